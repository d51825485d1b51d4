/*
 * shard — a container holding only the experts of one MPI rank
 * (`colibri shard`, docs/FORMAT.md section 2 "shard").
 *
 * A 1.6 TB model over three hosts needs only about a third of its expert
 * bytes on each host's disk: rank R's shard is the container with every
 * file but the expert files copied as they are, and in each expert file
 * only the records that the placement (planner/placement.h) gives rank R,
 * its owned experts and the replicas it holds, back to back in ascending
 * expert order. The manifest keeps every expert's checksum, so the shard
 * has the full container's model id and every record still verifies with
 * the seed of its expert; it also names the placement it was cut by, which
 * a run over shards then uses (engine/dist).
 *
 * Writing reads each record from the source, checks its checksum, writes
 * it, and at the end reads the whole shard back and checks it again; the
 * shard is written into a temporary sibling folder and renamed into place,
 * so a failure or an interruption leaves nothing at the destination.
 */
#ifndef COLIBRI_ENGINE_SHARD_H
#define COLIBRI_ENGINE_SHARD_H

#include <stdbool.h>
#include <stdint.h>

#include "planner/placement.h"

struct manifest;

struct shard_options {
	const char *model_dir;       /* a full container */
	const char *to_dir;          /* where the shard goes */
	int ranks, rank;             /* rank of ranks */
	struct placement_spec placement; /* even or weights (auto is refused: a shard cannot know run-time disks);
					  * .replicas: ranks holding each expert */
	bool force;                  /* replace a container (or an empty folder) at to_dir */
	bool quiet;                  /* no progress on stderr */
};

/* What shard_write did. */
struct shard_result {
	int64_t experts;             /* records written, over every expert layer */
	int64_t experts_total;       /* records of the source */
	uint64_t bytes;              /* bytes written, resident file included */
};

/* Writes rank o->rank's shard of o->model_dir to o->to_dir. 0, or -errno
 * with a message naming the file, layer or expert at fault. */
int shard_write(const struct shard_options *o, struct shard_result *out);

/* 0 unless m (of the container at dir) is a shard that this process may
 * not run: without mpirun (rank 0 of n_ranks 1 with under_mpi false), or
 * as another rank or rank count than the shard was cut for. -EINVAL with a
 * message saying what the shard is and how to run it. */
int shard_check_run(const struct manifest *m, const char *dir, bool under_mpi, int rank, int n_ranks);

#endif
