/*
 * topology_internal — the cgroup memory walk of planner/topology.c with
 * its inputs passed in, so that tests can run it over a fake cgroupfs in a
 * scratch folder on any machine. Internal to planner/ and its tests.
 */
#ifndef COLIBRI_PLANNER_TOPOLOGY_INTERNAL_H
#define COLIBRI_PLANNER_TOPOLOGY_INTERNAL_H

#include <stdint.h>

/* What the walk reads besides the cgroup files themselves. */
struct topology_cgroup_source {
	const char *proc_cgroup;  /* the text of /proc/self/cgroup */
	const char *mountinfo;    /* the text of /proc/self/mountinfo; NULL when unreadable */
	const char *default_root; /* where cgroupfs is when mountinfo is NULL: v2 there, v1
				   * memory in its memory/ folder ("/sys/fs/cgroup") */
};

/* Lowers *total to every memory limit that binds the process src describes
 * (cgroup v2 memory.max, v1 memory.limit_in_bytes and
 * hierarchical_memory_limit, on its group and each ancestor up to the
 * root of the mount), and *avail to each such limit minus that group's
 * usage. Files that are absent, unreadable, "max" or not one decimal
 * number bind nothing. Does not fail: what cannot be read is skipped. */
void topology_cgroup_limits_from(const struct topology_cgroup_source *src, int64_t *avail, int64_t *total);

#endif
