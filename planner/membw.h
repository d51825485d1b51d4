/*
 * membw — how fast this machine streams memory into the cores: the bound on
 * decode speed once every byte a token needs is in RAM.
 */
#ifndef COLIBRI_PLANNER_MEMBW_H
#define COLIBRI_PLANNER_MEMBW_H

#include <stdint.h>

#define MEMBW_BUFFER_BYTES (256ull << 20)
#define MEMBW_SECONDS 0.2

/* Reads a buffer of buffer_bytes (filled first, so every page is real) over
 * and over with n_threads threads, each streaming its own slice, for about
 * seconds; *gbps is bytes read / elapsed / 1e9. The buffer should be well
 * above the last-level cache. Returns 0 or -errno (-ENOMEM, thread errors). */
int membw_measure(double *gbps, uint64_t buffer_bytes, double seconds, int n_threads);

#endif
