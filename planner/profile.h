/*
 * profile — what was measured about this machine, kept between runs so
 * that plan and run reuse it without measuring again: the random-read
 * profile of each disk (iobench points), keyed by the disk's identity
 * (blockdev.h), and per-machine numbers such as memory bandwidth, keyed by
 * the machine (its CPU model, CPU count, memory and machine-id).
 *
 * The file is $COLIBRI_CACHE_DIR/disks.json, else
 * $XDG_CACHE_HOME/colibri/disks.json, else ~/.cache/colibri/disks.json
 * (docs/PLAN.md gives its schema). Updates are read-modify-write under an
 * exclusive flock on disks.json.lock and are published atomically
 * (temporary file, fsync, rename, fsync of the folder), so concurrent
 * writers never lose each other's entries and a crash leaves the old file.
 */
#ifndef COLIBRI_PLANNER_PROFILE_H
#define COLIBRI_PLANNER_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "planner/blockdev.h"

#define PROFILE_POINTS_MAX 128

/* One measured point: random reads of block_bytes, depth in flight. */
struct disk_point {
	uint64_t block_bytes;
	int depth;
	bool buffered;
	double seconds;
	double gbps;                 /* 1e9 bytes per second */
	double iops;
	double lat_p50_us;
	double lat_p99_us;
	char measured[24];           /* UTC, "2025-01-31T12:00:00Z" */
};

struct disk_profile {
	struct blockdev dev;         /* identity: key, name, model, serial */
	int n_points;
	struct disk_point points[PROFILE_POINTS_MAX];
};

/* Writes the profile file's path into buf. -ENAMETOOLONG, or -ENOENT when
 * neither $COLIBRI_CACHE_DIR nor $HOME is set. */
int profile_path(char *buf, size_t n);

/* Loads the profile of disk key into *out. 0; -ENOENT when the file or the
 * key is absent; -EINVAL when the file is not a valid profile file. */
int profile_disk_load(struct disk_profile *out, const char *key);

/* Merges p's points into the saved profile of p->dev.key: a point replaces
 * the saved one with the same block size, depth and buffering; the others
 * are kept (up to PROFILE_POINTS_MAX). 0 or -errno. */
int profile_disk_save(const struct disk_profile *p);

/* Adds or replaces one point of p (same block, depth, buffering). Returns
 * -ENOSPC when p is full. */
int disk_profile_put(struct disk_profile *p, const struct disk_point *pt);

/* The point nearest to (block_bytes, depth) among those with the given
 * buffering: nearest block size first (by ratio), then nearest depth (by
 * ratio; a tie goes to the deeper point). NULL when none. */
const struct disk_point *disk_profile_nearest(const struct disk_profile *p, uint64_t block_bytes,
					      int depth, bool buffered);

struct cJSON;

/* A point as the JSON of the profile file, iobench --json and plan --json:
 * block_bytes, depth, buffered, seconds, gbps, iops, p50_us, p99_us,
 * measured. A new object (the caller deletes it), or NULL when out of
 * memory. */
struct cJSON *disk_point_json(const struct disk_point *pt);

/* A number measured on this machine (e.g. "membw_gbps"). 0, or -ENOENT. */
int profile_machine_get(const char *name, double *value);

/* Saves a number for this machine. 0 or -errno. */
int profile_machine_put(const char *name, double value);

/* The current UTC time as "2025-01-31T12:00:00Z". */
void profile_now(char buf[24]);

#endif
