/*
 * clock — the monotonic clock every timing in colibri reads (stats, the
 * drafting policy, mirror re-admission, progress lines, benchmarks).
 */
#ifndef COLIBRI_STORAGE_CLOCK_H
#define COLIBRI_STORAGE_CLOCK_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
static inline double clock_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
