/*
 * plan_machine — what the planner knows about this machine for one model:
 * the topology, the memory bandwidth (saved per machine, measured once),
 * and the disks the expert files live on with their saved profiles.
 * Nothing here knows the container format: callers pass the expert files'
 * paths.
 */
#ifndef COLIBRI_PLANNER_PLAN_MACHINE_H
#define COLIBRI_PLANNER_PLAN_MACHINE_H

#include <stdbool.h>
#include <stdint.h>

#include "planner/plan.h"
#include "planner/profile.h"
#include "planner/topology.h"

#define PLAN_DISKS_MAX 8               /* the primary disk and 7 mirrors */

enum plan_source {
	PLAN_SOURCE_NONE = 0,          /* unknown */
	PLAN_SOURCE_SAVED,             /* from the profile file */
	PLAN_SOURCE_MEASURED,          /* measured by this process (and saved) */
};

struct plan_disk {
	int n_files;                   /* expert files on this disk */
	uint64_t bytes;                /* their total size */
	bool profiled;                 /* profile holds at least one point */
	struct disk_profile profile;   /* profile.dev is the identity */
};

struct plan_machine {
	struct topology topo;
	double membw_gbps;
	enum plan_source membw_source;
	uint64_t membw_buffer_bytes;   /* what a measurement streams: 256 MiB, or 4x the L3 if larger,
				       * at most a quarter of the available memory */
	double compute_gbps;           /* filled by the caller (the kernels live above) */
	enum plan_source compute_source;
	char compute_what[64];         /* what compute_gbps measured, e.g. "int4 matvec, 2 threads" */
	int n_disks;                   /* distinct disks among the paths, at most PLAN_DISKS_MAX */
	struct plan_disk disks[PLAN_DISKS_MAX];
};

enum {
	PLAN_MEASURE_MEMBW = 1,        /* measure memory bandwidth when none is saved */
};

/* Discovers the machine and the disks of paths[0..n_paths) (files beyond
 * PLAN_DISKS_MAX distinct disks are counted with the last one). Never
 * measures disks; measures memory bandwidth only with PLAN_MEASURE_MEMBW.
 * 0, or -errno when a path cannot be stat'ed. */
int plan_machine_discover(struct plan_machine *m, const char *const *paths, int n_paths, unsigned flags);

/* The disk whose profile the estimates use: the one holding most expert
 * files. NULL when no disk is known or it has no profile. */
const struct disk_profile *plan_machine_disk(const struct plan_machine *m);

/* Index in m->disks of the disk holding path, or -1 when path cannot be
 * identified or its disk is not among them. */
int plan_machine_disk_of(const struct plan_machine *m, const char *path);

/* How much faster expert reads are with every copy than with the primary
 * copies alone. paths[0..n_primary) are the primary expert files, the rest
 * mirror copies; path_layer[i] is the expert layer (0..n_layers) of path i.
 * Reads of a layer are striped over the disks holding a copy in proportion
 * to their bandwidth (each disk's point nearest block and depth), so the
 * layer reads at the sum; the gain is the primary copies' summed read time
 * over the striped one, >= 1. Copies on a disk without a profile, or on a
 * disk that already holds that layer, add nothing; 1 when the primary disk
 * has no profile. */
double plan_machine_mirror_gain(const struct plan_machine *m, const char *const *paths, const int *path_layer,
				int n_paths, int n_primary, int n_layers, uint64_t block, int depth, bool buffered);

/* Copies what the machine knows into the machine half of in: physical
 * cores, available memory, memory and compute bandwidth, and the profile of
 * plan_machine_disk (which m must outlive). */
void plan_inputs_machine(struct plan_inputs *in, const struct plan_machine *m);

const char *plan_source_name(enum plan_source s);

/* A quick disk probe: random reads of block_bytes over paths for `seconds`
 * in total, split over two depths (top_k and PLAN_IO_DEPTH_DEFAULT), saved
 * into the profile of the disk holding the files and reloaded into m.
 * 0 or -errno with a sentence in err. */
int plan_machine_probe(struct plan_machine *m, const char *const *paths, int n_paths, uint64_t block_bytes,
		       int top_k, double seconds, bool buffered, char *err, size_t err_len);

#endif
