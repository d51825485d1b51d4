/*
 * io_ring — bounded read loop over io_uring or the pread pool (see io_ring.h).
 *
 * Accounting: n_queued ops sit in the FIFOs, n_sq are prepared SQEs the
 * kernel has not consumed, n_kernel were consumed (or given to the pool) and
 * have not been reaped. n_sq + n_kernel <= depth always. busy_s sums the
 * intervals in which n_kernel > 0, as seen from this thread: an interval ends
 * when its last completion is reaped, so it over-counts by however long a
 * completion waits in the CQ before the caller reaps it.
 */
#include "storage/io_ring.h"

#include <assert.h>
#include <errno.h>
#include <linux/ioprio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "storage/pread_pool.h"
#include "base/clock.h"

_Static_assert(IO_RING_ALIGN == 4096, "O_DIRECT layout assumes 4 KiB blocks");

/* The value of /proc/sys/kernel/io_uring_disabled, or 0 when absent. */
static int io_uring_disabled_sysctl(void)
{
	FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "r");
	int v = 0;
	if (!f)
		return 0;
	if (fscanf(f, "%d", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

int io_ring_init(struct io_ring *r, int depth, bool force_pread)
{
	memset(r, 0, sizeof *r);
	if (depth < 1)
		depth = 1;
	r->depth = depth;
	r->reaped = calloc((size_t)depth, sizeof *r->reaped);
	r->batch = calloc((size_t)depth, sizeof *r->batch);
	if (!r->reaped || !r->batch) {
		io_ring_free(r);
		return error_set(ENOMEM, "out of memory");
	}
	if (!force_pread) {
		int rc = io_uring_queue_init((unsigned)depth, &r->uring, 0);
		if (rc == 0) {
			r->backend = IO_RING_URING;
			return 0;
		}
		int sysctl = io_uring_disabled_sysctl();
		char why[96] = "";
		if (sysctl)
			snprintf(why, sizeof why, "; /proc/sys/kernel/io_uring_disabled is %d", sysctl);
		fprintf(stderr, "colibri: warning: io_uring is unavailable (%s%s); reading experts with pread threads\n",
			strerror(-rc), why);
	}
	int threads = depth < 2 ? 2 : depth > 4 ? 4 : depth;
	int rc = pread_pool_init(&r->pool, threads, depth);
	if (rc) {
		io_ring_free(r);
		return error_set(-rc, "cannot start the pread threads: %s", strerror(-rc));
	}
	r->backend = IO_RING_PREAD;
	return 0;
}

void io_ring_free(struct io_ring *r)
{
	for (int p = 0; p < IO_OP_PRIO_COUNT; p++)
		r->q_head[p] = r->q_tail[p] = NULL;
	r->n_queued = 0;
	if (r->backend == IO_RING_URING) {
		/* Buffers of reads still in the kernel must outlive them. */
		while (r->n_kernel > 0) {
			struct io_uring_cqe *cqe;
			int rc = io_uring_wait_cqe(&r->uring, &cqe);
			if (rc == -EINTR || rc == -EAGAIN)
				continue;
			if (rc < 0)
				break;
			io_uring_cqe_seen(&r->uring, cqe);
			r->n_kernel--;
		}
		io_uring_queue_exit(&r->uring);
	}
	pread_pool_free(r->pool); /* finishes the reads it holds */
	free(r->reaped);
	free(r->batch);
	memset(r, 0, sizeof *r);
}

int io_ring_register_files(struct io_ring *r, const int *fds, int n)
{
	if (r->backend != IO_RING_URING)
		return -EOPNOTSUPP;
	int rc = io_uring_register_files(&r->uring, fds, (unsigned)n);
	r->fixed_files = rc == 0;
	return rc;
}

int io_ring_register_buffers(struct io_ring *r, const struct iovec *iov, int n)
{
	if (r->backend != IO_RING_URING)
		return -EOPNOTSUPP;
	int rc = io_uring_register_buffers(&r->uring, iov, (unsigned)n);
	r->fixed_buffers = rc == 0;
	return rc;
}

void io_ring_queue(struct io_ring *r, struct io_op *op)
{
	assert(op->kind == IO_OP_READ && op->len_bytes > 0 && op->done);
	assert(op->prio >= 0 && op->prio < IO_OP_PRIO_COUNT);
	op->next = NULL;
	op->queued = true;
	if (r->q_tail[op->prio])
		r->q_tail[op->prio]->next = op;
	else
		r->q_head[op->prio] = op;
	r->q_tail[op->prio] = op;
	r->n_queued++;
}

void io_ring_promote(struct io_ring *r, struct io_op *op)
{
	if (!op->queued || op->prio == IO_OP_PRIO_DEMAND)
		return;
	/* O(prefetch queue), which the caller bounds by its prefetch depth. */
	struct io_op *prev = NULL;
	for (struct io_op *q = r->q_head[op->prio]; q != op; q = q->next) {
		assert(q);
		prev = q;
	}
	if (prev)
		prev->next = op->next;
	else
		r->q_head[op->prio] = op->next;
	if (r->q_tail[op->prio] == op)
		r->q_tail[op->prio] = prev;
	r->n_queued--;
	op->prio = IO_OP_PRIO_DEMAND;
	io_ring_queue(r, op);
}

/* Puts a partly done op back at the head of its FIFO: it was first in line. */
static void io_ring_queue_front(struct io_ring *r, struct io_op *op)
{
	op->queued = true;
	op->next = r->q_head[op->prio];
	r->q_head[op->prio] = op;
	if (!r->q_tail[op->prio])
		r->q_tail[op->prio] = op;
	r->n_queued++;
}

static struct io_op *io_ring_dequeue(struct io_ring *r)
{
	for (int p = 0; p < IO_OP_PRIO_COUNT; p++) {
		struct io_op *op = r->q_head[p];
		if (!op)
			continue;
		r->q_head[p] = op->next;
		if (!r->q_head[p])
			r->q_tail[p] = NULL;
		op->next = NULL;
		op->queued = false;
		r->n_queued--;
		return op;
	}
	return NULL;
}

static void io_op_assert_aligned(const struct io_op *op)
{
	if (!op->direct)
		return;
	assert((uintptr_t)(op->buf + op->done_bytes) % IO_RING_ALIGN == 0);
	assert((op->offset + op->done_bytes) % IO_RING_ALIGN == 0);
	assert((op->len_bytes - op->done_bytes) % IO_RING_ALIGN == 0);
}

static void io_op_prep(struct io_ring *r, struct io_uring_sqe *sqe, struct io_op *op)
{
	io_op_assert_aligned(op);
	uint8_t *buf = op->buf + op->done_bytes;
	uint64_t off = op->offset + op->done_bytes;
	unsigned len = op->len_bytes - op->done_bytes;
	bool fixed_file = r->fixed_files && op->file_index >= 0;
	int fd = fixed_file ? op->file_index : op->fd;
	if (r->fixed_buffers && op->buf_index >= 0)
		io_uring_prep_read_fixed(sqe, fd, buf, len, off, op->buf_index);
	else
		io_uring_prep_read(sqe, fd, buf, len, off);
	if (fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	if (op->prio == IO_OP_PRIO_PREFETCH)
		sqe->ioprio = IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 7);
	io_uring_sqe_set_data(sqe, op);
}

int io_ring_submit(struct io_ring *r)
{
	int before = r->n_kernel;
	while (r->n_kernel + r->n_sq < r->depth && r->n_queued > 0) {
		struct io_op *op = io_ring_dequeue(r);
		if (r->backend == IO_RING_PREAD) {
			io_op_assert_aligned(op);
			pread_pool_submit(r->pool, op);
			r->n_kernel++;
			continue;
		}
		struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);
		if (!sqe) {
			io_ring_queue_front(r, op);
			break;
		}
		io_op_prep(r, sqe, op);
		r->n_sq++;
	}
	if (r->backend == IO_RING_URING && r->n_sq > 0) {
		int rc = io_uring_submit(&r->uring);
		if (rc >= 0) {
			r->n_sq -= rc;
			r->n_kernel += rc;
		} else if (rc != -EAGAIN && rc != -EBUSY && rc != -EINTR) {
			return error_set(-rc, "io_uring_submit: %s", strerror(-rc));
		}
		/* EAGAIN, EBUSY, EINTR: the SQEs stay in the ring for the next call. */
	}
	if (before == 0 && r->n_kernel > 0)
		r->busy_since = clock_now_s();
	return 0;
}

/* Applies one raw result to op. Returns true when op is finished (res set);
 * false when it went back to the queue. */
static bool io_op_complete(struct io_ring *r, struct io_op *op, int kres)
{
	if (kres == -EAGAIN || kres == -EINTR) {
		r->resubmits++;
		io_ring_queue_front(r, op);
		return false;
	}
	if (kres < 0) {
		op->res = kres;
		return true;
	}
	if (kres == 0) {
		op->res = -ENODATA; /* end of file before the last byte */
		return true;
	}
	op->done_bytes += (uint32_t)kres;
	if (op->done_bytes >= op->len_bytes) {
		op->res = 0;
		return true;
	}
	/* With O_DIRECT only end of file cuts a read at an unaligned length. */
	if (op->direct && op->done_bytes % IO_RING_ALIGN) {
		op->res = -ENODATA;
		return true;
	}
	r->resubmits++;
	io_ring_queue_front(r, op);
	return false;
}

/* Collects available completions (blocking for one with wait) into
 * r->reaped from *n_fin on. Returns how many raw completions were seen. */
static int io_ring_collect(struct io_ring *r, bool wait, int *n_fin)
{
	int seen = 0;
	if (r->backend == IO_RING_PREAD) {
		double t0 = wait ? clock_now_s() : 0;
		seen = pread_pool_reap(r->pool, r->batch, r->depth, wait);
		if (wait)
			r->wait_s += clock_now_s() - t0;
		for (int i = 0; i < seen; i++)
			if (io_op_complete(r, r->batch[i], r->batch[i]->kres))
				r->reaped[(*n_fin)++] = r->batch[i];
	} else {
		struct io_uring_cqe *cqe;
		if (wait) {
			double t0 = clock_now_s();
			int rc;
			while ((rc = io_uring_wait_cqe(&r->uring, &cqe)) == -EINTR)
				;
			r->wait_s += clock_now_s() - t0;
			if (rc < 0)
				return error_set(-rc, "io_uring_wait_cqe: %s", strerror(-rc));
		}
		unsigned head;
		io_uring_for_each_cqe(&r->uring, head, cqe) {
			struct io_op *op = io_uring_cqe_get_data(cqe);
			seen++;
			if (io_op_complete(r, op, cqe->res))
				r->reaped[(*n_fin)++] = op;
		}
		io_uring_cq_advance(&r->uring, (unsigned)seen);
	}
	r->n_kernel -= seen;
	if (seen > 0 && r->n_kernel == 0)
		r->busy_s += clock_now_s() - r->busy_since;
	return seen;
}

int io_ring_reap(struct io_ring *r, bool wait)
{
	int n_fin = 0;
	int rc = io_ring_submit(r);
	if (rc)
		return rc;
	for (;;) {
		rc = io_ring_collect(r, false, &n_fin);
		if (rc < 0)
			return rc;
		if (n_fin > 0 || !wait)
			break;
		/* Only resubmitted pieces so far: send them and wait again. */
		if ((rc = io_ring_submit(r)))
			return rc;
		if (r->n_kernel == 0)
			break;
		rc = io_ring_collect(r, true, &n_fin);
		if (rc < 0)
			return rc;
		if (n_fin > 0)
			break;
	}
	/* Refill the slots just freed before the callbacks run (they verify
	 * checksums, which takes a while), then send what they queued. */
	if ((rc = io_ring_submit(r)))
		return rc;
	for (int i = 0; i < n_fin; i++)
		r->reaped[i]->done(r->reaped[i]);
	rc = io_ring_submit(r);
	return rc ? rc : n_fin;
}
