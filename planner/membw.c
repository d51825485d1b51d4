/*
 * membw — see membw.h. Each thread sums its slice with eight independent
 * accumulators, enough to keep the loads in flight that a streaming read
 * needs; the sum is published so the reads cannot be optimised away. The
 * clock is read once per pass over a slice, so a pass (slice / bandwidth,
 * milliseconds) bounds the overshoot.
 */
#include "planner/membw.h"
#include "base/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct membw_worker {
	pthread_t thread;
	const uint64_t *data;
	size_t words;
	const atomic_int *go;            /* 1: start; 2: give up */
	const double *deadline;          /* valid once go is 1 */
	uint64_t bytes;
	uint64_t sum;
};

/* Where the sums go, so that the reads stay live. */
static volatile uint64_t membw_sink;

static void *membw_worker_run(void *arg)
{
	struct membw_worker *w = arg;
	uint64_t a[8] = { 0 };
	int go;
	while (!(go = atomic_load(w->go)))
		;
	if (go != 1)
		return NULL;
	do {
		const uint64_t *p = w->data;
		for (size_t i = 0; i + 8 <= w->words; i += 8)
			for (int k = 0; k < 8; k++)
				a[k] += p[i + k];
		w->bytes += w->words * sizeof *p;
	} while (clock_now_s() < *w->deadline);
	w->sum = a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
	return NULL;
}

int membw_measure(double *gbps, uint64_t buffer_bytes, double seconds, int n_threads)
{
	*gbps = 0;
	if (n_threads < 1)
		n_threads = 1;
	size_t words = (size_t)(buffer_bytes / sizeof(uint64_t)) / (size_t)n_threads / 8 * 8;
	if (words == 0)
		return -EINVAL;
	uint64_t *data = NULL;
	struct membw_worker *w = calloc((size_t)n_threads, sizeof *w);
	if (!w || posix_memalign((void **)&data, 64, words * (size_t)n_threads * sizeof *data)) {
		free(w);
		return -ENOMEM;
	}
	for (size_t i = 0; i < words * (size_t)n_threads; i++)
		data[i] = i * 0x9e3779b97f4a7c15ull;
	atomic_int go = 0;
	double deadline = 0;
	int started = 0, rc = 0;
	for (; started < n_threads; started++) {
		w[started] = (struct membw_worker){ .data = data + (size_t)started * words, .words = words,
						    .go = &go, .deadline = &deadline };
		if ((rc = pthread_create(&w[started].thread, NULL, membw_worker_run, &w[started])))
			break;
	}
	double t0 = clock_now_s();
	deadline = t0 + seconds;
	atomic_store(&go, rc ? 2 : 1);
	uint64_t bytes = 0, sink = 0;
	for (int i = 0; i < started; i++) {
		pthread_join(w[i].thread, NULL);
		bytes += w[i].bytes;
		sink ^= w[i].sum;
	}
	double elapsed = clock_now_s() - t0;
	free(data);
	free(w);
	if (rc)
		return -rc;
	*gbps = elapsed > 0 ? (double)bytes / elapsed / 1e9 : 0;
	membw_sink = sink;
	return 0;
}
