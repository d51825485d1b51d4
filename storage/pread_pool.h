/*
 * pread_pool — the fallback behind io_ring where io_uring is unavailable: a
 * few threads that each take one queued read, run one pread(2) for it and
 * post the raw result, as the kernel posts a CQE. Internal to storage/.
 *
 * The pool never interprets results: short reads, EAGAIN and errors go back
 * to io_ring, which handles them exactly as for io_uring. Job and completion
 * queues are arrays sized once at init; the caller keeps at most `cap` ops
 * in the pool.
 */
#ifndef COLIBRI_STORAGE_PREAD_POOL_H
#define COLIBRI_STORAGE_PREAD_POOL_H

#include <stdbool.h>

#include "storage/io_ring.h"

/* Starts n_threads (clamped to 1..8) workers for at most cap ops at once.
 * Returns 0 or -errno; the caller frees *out with pread_pool_free. */
int pread_pool_init(struct pread_pool **out, int n_threads, int cap);

/* Stops and joins the workers. Ops still in the pool are finished first. */
void pread_pool_free(struct pread_pool *p);

/* Hands op to a worker; op->kres receives pread's result (bytes or -errno)
 * for the range op->buf + op->done_bytes .. op->len_bytes. */
void pread_pool_submit(struct pread_pool *p, struct io_op *op);

/* Moves up to max finished ops into out[]; with wait, blocks until at least
 * one is available. Returns how many were moved. */
int pread_pool_reap(struct pread_pool *p, struct io_op **out, int max, bool wait);

#endif
