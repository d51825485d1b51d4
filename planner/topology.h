/*
 * topology — what the machine offers the planner: cores, caches, NUMA nodes
 * and the memory this process may actually use. Each call re-reads the
 * system, so callers that need a stable value call once at start-up and
 * keep it.
 */
#ifndef COLIBRI_PLANNER_TOPOLOGY_H
#define COLIBRI_PLANNER_TOPOLOGY_H

#include <stdint.h>

#define TOPOLOGY_NODES_MAX 64

struct topology {
	int physical_cores;              /* hwloc cores, >= 1 */
	int logical_cpus;                /* hwloc PUs, >= 1 */
	int numa_nodes;                  /* >= 1 */
	int64_t node_memory_bytes[TOPOLOGY_NODES_MAX]; /* [numa_nodes], 0 if unknown */
	int node_cores[TOPOLOGY_NODES_MAX];            /* [numa_nodes] physical cores */
	int local_node;                  /* node of the calling CPU (libnuma), -1 if unknown */
	uint64_t l1d_bytes;              /* one instance of each cache level; 0 if unknown */
	uint64_t l2_bytes;
	uint64_t l3_bytes;
	int l3_instances;
	int64_t total_memory_bytes;      /* MemTotal, lowered to any cgroup limit */
	int64_t available_memory_bytes;  /* topology_available_memory_bytes() */
	char cpu_model[128];             /* "" if unknown */
};

/* Fills *t from hwloc, libnuma, /proc/meminfo and the cgroup limits. Never
 * fails: what cannot be read keeps a neutral value (1 core, 1 node, 0 bytes;
 * memory -1). */
void topology_discover(struct topology *t);

/* Physical cores (hwloc HWLOC_OBJ_CORE); falls back to online logical CPUs
 * when hwloc cannot tell. Always >= 1. */
int topology_physical_cores(void);

/* Bytes this process can still take without swapping or being OOM-killed:
 * MemAvailable from /proc/meminfo, lowered to (limit - usage) of any cgroup
 * v1 or v2 memory limit that applies. -errno if /proc/meminfo is unreadable. */
int64_t topology_available_memory_bytes(void);

/* MemTotal from /proc/meminfo, lowered to the smallest cgroup memory limit
 * that applies. -errno if /proc/meminfo is unreadable. */
int64_t topology_total_memory_bytes(void);

#endif
