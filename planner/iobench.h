/*
 * iobench — random reads over a set of files, timed: the disk profile the
 * planner uses, measured the way the expert store reads (io_uring, O_DIRECT,
 * one block per read, a fixed number in flight).
 *
 * Each read takes a block-aligned offset drawn uniformly from all blocks of
 * all files (files shorter than a block are left out), as fio's randread
 * does with blockalign = bs. A short read is resubmitted for its remainder;
 * its latency runs from the first submission to the last completion. Only
 * reads that complete within the time count; those in flight at the end are
 * drained and discarded. A device that completes nothing within the time
 * is waited for until its first reads complete, and the time is then the
 * time taken, so a point always has at least one read. The ring is set up as fio's io_uring engine sets
 * up its own (COOP_TASKRUN, SINGLE_ISSUER, DEFER_TASKRUN where the kernel
 * has them), so the two measure the same thing. Liburing is used directly:
 * this module does not depend on the expert store.
 */
#ifndef COLIBRI_PLANNER_IOBENCH_H
#define COLIBRI_PLANNER_IOBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IOBENCH_ALIGN 4096
#define IOBENCH_DEPTH_MAX 1024

struct iobench_params {
	uint64_t block_bytes;        /* bytes per read, a multiple of IOBENCH_ALIGN */
	int depth;                   /* reads in flight, 1..IOBENCH_DEPTH_MAX */
	double seconds;              /* how long to issue reads, > 0 */
	bool buffered;               /* through the page cache instead of O_DIRECT */
	uint64_t seed;               /* offsets are a function of the seed */
};

struct iobench_result {
	uint64_t reads;              /* completed within the time */
	uint64_t bytes;
	double seconds;              /* the time asked for, or longer when the first read took longer */
	double gbps;                 /* bytes / seconds / 1e9 */
	double iops;
	double lat_mean_us;
	double lat_p50_us;           /* from a log-linear histogram, within 3% */
	double lat_p99_us;
};

/* Runs one point over paths[0..n_paths). Returns 0, or -errno with a
 * sentence in err naming the file: -EINVAL when O_DIRECT is refused (the
 * sentence suggests --buffered) or when no file holds one block, -ENOMEM
 * when the depth x block buffers cannot be had, the read's error otherwise. */
int iobench_run(struct iobench_result *out, const char *const *paths, int n_paths,
		const struct iobench_params *p, char *err, size_t err_len);

#endif
