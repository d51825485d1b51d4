/*
 * topology — what the machine offers the planner: physical cores and the
 * memory this process may actually use. Each call re-reads the system, so
 * callers that need a stable value call once at start-up and keep it.
 */
#ifndef COLIBRI_PLANNER_TOPOLOGY_H
#define COLIBRI_PLANNER_TOPOLOGY_H

#include <stdint.h>

/* Physical cores (hwloc HWLOC_OBJ_CORE); falls back to online logical CPUs
 * when hwloc cannot tell. Always >= 1. */
int topology_physical_cores(void);

/* Bytes this process can still take without swapping or being OOM-killed:
 * MemAvailable from /proc/meminfo, lowered to (limit - usage) of any cgroup
 * v1 or v2 memory limit that applies. -errno if /proc/meminfo is unreadable. */
int64_t topology_available_memory_bytes(void);

#endif
