/*
 * topology — core count through hwloc and available memory from
 * /proc/meminfo and the cgroup memory controller.
 *
 * The memory figure is a ceiling for the RAM plan, so where sources
 * disagree the smallest wins: a container's cgroup limit is usually far
 * below the host's MemAvailable. For cgroup v2 every ancestor of our cgroup
 * is checked, because a limit set on a parent applies to us too.
 */
#include "planner/topology.h"

#include <errno.h>
#include <hwloc.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int topology_physical_cores(void)
{
	hwloc_topology_t topo;
	int cores = 0;
	if (hwloc_topology_init(&topo) == 0) {
		if (hwloc_topology_load(topo) == 0)
			cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
		hwloc_topology_destroy(topo);
	}
	if (cores <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		cores = n > 0 ? (int)n : 1;
	}
	return cores;
}

/* Reads the first integer of a file; -1 if absent or "max" (no limit). */
static int64_t topology_read_i64(const char *path)
{
	FILE *f = fopen(path, "r");
	int64_t v = -1;
	if (!f)
		return -1;
	if (fscanf(f, "%" SCNd64, &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/* Lowers *avail to limit - usage when the limit is a real one. cgroup v1
 * reports "no limit" as a huge page-rounded number, which the comparison
 * with *avail discards naturally. */
static void topology_apply_limit(int64_t *avail, int64_t limit, int64_t usage)
{
	if (limit < 0)
		return;
	int64_t left = limit;
	if (usage >= limit)
		left = 0;
	else if (usage > 0)
		left = limit - usage;
	if (left < *avail)
		*avail = left;
}

static void topology_cgroup_limits(int64_t *avail)
{
	FILE *f = fopen("/proc/self/cgroup", "r");
	char line[4096], path[4400];
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		char *ctrl = strchr(line, ':');
		char *cg = ctrl ? strchr(ctrl + 1, ':') : NULL;
		if (!cg)
			continue;
		*cg++ = 0;
		ctrl++;
		if (strcmp(line, "0") == 0 && *ctrl == 0) {
			/* cgroup v2: walk from our cgroup up to the root. */
			char dir[4096];
			snprintf(dir, sizeof dir, "%s", cg);
			for (;;) {
				snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", dir);
				int64_t lim = topology_read_i64(path);
				snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", dir);
				topology_apply_limit(avail, lim, topology_read_i64(path));
				char *slash = strrchr(dir, '/');
				if (!slash || dir[0] == 0)
					break;
				*slash = 0;
			}
		} else if (strstr(ctrl, "memory")) {
			snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", cg);
			int64_t lim = topology_read_i64(path);
			if (lim < 0)
				lim = topology_read_i64("/sys/fs/cgroup/memory/memory.limit_in_bytes");
			snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", cg);
			int64_t use = topology_read_i64(path);
			if (use < 0)
				use = topology_read_i64("/sys/fs/cgroup/memory/memory.usage_in_bytes");
			topology_apply_limit(avail, lim, use);
		}
	}
	fclose(f);
}

int64_t topology_available_memory_bytes(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	int64_t avail = -1;
	if (!f)
		return -errno;
	while (fgets(line, sizeof line, f)) {
		int64_t kb;
		if (sscanf(line, "MemAvailable: %" SCNd64 " kB", &kb) == 1) {
			avail = kb * 1024;
			break;
		}
	}
	fclose(f);
	if (avail < 0)
		return -EIO;
	topology_cgroup_limits(&avail);
	return avail;
}
