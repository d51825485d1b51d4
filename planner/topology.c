/*
 * topology — cores, caches and NUMA nodes through hwloc and libnuma;
 * total and available memory from /proc/meminfo and the cgroup memory
 * controller.
 *
 * The memory figure is a ceiling for the RAM plan, so where sources
 * disagree the smallest wins: a container's cgroup limit is usually far
 * below the host's MemAvailable. Every ancestor of our cgroup is checked
 * (cgroup v2 memory.max, v1 memory.limit_in_bytes and
 * hierarchical_memory_limit), because a limit set on a parent applies to
 * us too.
 */
#include "planner/topology.h"

#include <errno.h>
#include <hwloc.h>
#include <inttypes.h>
#include <numa.h>
#include <sched.h>
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

/* Lowers *avail to limit - usage and *total to limit when the limit is a
 * real one. cgroup v1 reports "no limit" as a huge page-rounded number,
 * which the comparisons discard naturally. */
static void topology_apply_limit(int64_t *avail, int64_t *total, int64_t limit, int64_t usage)
{
	if (limit < 0)
		return;
	if (limit < *total)
		*total = limit;
	int64_t left = limit;
	if (usage >= limit)
		left = 0;
	else if (usage > 0)
		left = limit - usage;
	if (left < *avail)
		*avail = left;
}

/* "hierarchical_memory_limit N" of a cgroup v1 memory.stat: the smallest
 * limit of the cgroup and its ancestors; -1 if absent. */
static int64_t topology_v1_hierarchical_limit(const char *stat_path)
{
	FILE *f = fopen(stat_path, "r");
	char line[256];
	int64_t v = -1;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "hierarchical_memory_limit %" SCNd64, &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

/* cgroup v1: a limit on any ancestor applies to us, and its headroom is
 * that ancestor's limit minus that ancestor's usage (a child with no limit
 * of its own under a 700 MiB parent has 700 MiB minus what its siblings
 * use). So walk from our cgroup up to the root of the hierarchy, as for
 * v2; hierarchical_memory_limit also covers ancestors outside our view
 * (a container that sees its own cgroup as the root). */
static void topology_cgroup_v1_limits(const char *cg, int64_t *avail, int64_t *total)
{
	char dir[4096], path[4400];
	snprintf(dir, sizeof dir, "%s", strcmp(cg, "/") ? cg : "");
	snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", dir);
	if (access(path, R_OK) != 0)
		dir[0] = 0; /* our path is outside this mount's view: its root is our cgroup */
	snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.stat", dir);
	topology_apply_limit(avail, total, topology_v1_hierarchical_limit(path), -1);
	for (;;) {
		snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", dir);
		int64_t lim = topology_read_i64(path);
		snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", dir);
		topology_apply_limit(avail, total, lim, topology_read_i64(path));
		char *slash = strrchr(dir, '/');
		if (!slash)
			break;
		*slash = 0;
	}
}

static void topology_cgroup_limits(int64_t *avail, int64_t *total)
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
				topology_apply_limit(avail, total, lim, topology_read_i64(path));
				char *slash = strrchr(dir, '/');
				if (!slash || dir[0] == 0)
					break;
				*slash = 0;
			}
		} else if (strstr(ctrl, "memory")) {
			topology_cgroup_v1_limits(cg, avail, total);
		}
	}
	fclose(f);
}

/* A "Key: N kB" line of /proc/meminfo in bytes; -errno if unreadable. */
static int64_t topology_meminfo(const char *key)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	size_t klen = strlen(key);
	int64_t v = -EIO;
	if (!f)
		return -errno;
	while (fgets(line, sizeof line, f)) {
		int64_t kb;
		if (!strncmp(line, key, klen) && line[klen] == ':' &&
		    sscanf(line + klen + 1, " %" SCNd64, &kb) == 1) {
			v = kb * 1024;
			break;
		}
	}
	fclose(f);
	return v;
}

int64_t topology_available_memory_bytes(void)
{
	int64_t avail = topology_meminfo("MemAvailable");
	int64_t total = INT64_MAX;
	if (avail < 0)
		return avail;
	topology_cgroup_limits(&avail, &total);
	return avail;
}

int64_t topology_total_memory_bytes(void)
{
	int64_t total = topology_meminfo("MemTotal");
	int64_t avail = INT64_MAX;
	if (total < 0)
		return total;
	topology_cgroup_limits(&avail, &total);
	return total;
}

/* Size of the first cache object of a level, or 0. */
static uint64_t topology_cache_bytes(hwloc_topology_t topo, hwloc_obj_type_t type, int *count)
{
	int n = hwloc_get_nbobjs_by_type(topo, type);
	hwloc_obj_t o = n > 0 ? hwloc_get_obj_by_type(topo, type, 0) : NULL;
	if (count)
		*count = n > 0 ? n : 0;
	return o && o->attr ? (uint64_t)o->attr->cache.size : 0;
}

static void topology_from_hwloc(struct topology *t)
{
	hwloc_topology_t topo;
	if (hwloc_topology_init(&topo) != 0)
		return;
	if (hwloc_topology_load(topo) != 0) {
		hwloc_topology_destroy(topo);
		return;
	}
	int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
	int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
	if (cores > 0)
		t->physical_cores = cores;
	if (pus > 0)
		t->logical_cpus = pus;
	int nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
	if (nodes > TOPOLOGY_NODES_MAX)
		nodes = TOPOLOGY_NODES_MAX;
	if (nodes > 0)
		t->numa_nodes = nodes;
	for (int i = 0; i < nodes; i++) {
		hwloc_obj_t n = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
		t->node_memory_bytes[i] = n->attr ? (int64_t)n->attr->numanode.local_memory : 0;
		t->node_cores[i] = hwloc_get_nbobjs_inside_cpuset_by_type(topo, n->cpuset, HWLOC_OBJ_CORE);
	}
	if (nodes <= 1)
		t->node_cores[0] = t->physical_cores;
	t->l1d_bytes = topology_cache_bytes(topo, HWLOC_OBJ_L1CACHE, NULL);
	t->l2_bytes = topology_cache_bytes(topo, HWLOC_OBJ_L2CACHE, NULL);
	t->l3_bytes = topology_cache_bytes(topo, HWLOC_OBJ_L3CACHE, &t->l3_instances);
	hwloc_obj_t pkg = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0);
	const char *model = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
	if (model)
		snprintf(t->cpu_model, sizeof t->cpu_model, "%s", model);
	hwloc_topology_destroy(topo);
}

void topology_discover(struct topology *t)
{
	memset(t, 0, sizeof *t);
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	t->physical_cores = t->logical_cpus = online > 0 ? (int)online : 1;
	t->numa_nodes = 1;
	t->local_node = -1;
	topology_from_hwloc(t);
	if (numa_available() >= 0) {
		int cpu = sched_getcpu();
		t->local_node = cpu >= 0 ? numa_node_of_cpu(cpu) : -1;
	}
	t->total_memory_bytes = topology_total_memory_bytes();
	t->available_memory_bytes = topology_available_memory_bytes();
	if (t->numa_nodes == 1 && t->node_memory_bytes[0] <= 0)
		t->node_memory_bytes[0] = t->total_memory_bytes > 0 ? t->total_memory_bytes : 0;
}
