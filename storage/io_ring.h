/*
 * io_ring — the storage layer's read loop: a bounded queue of file reads
 * handed to io_uring (liburing), or to a small pread thread pool where
 * io_uring is unavailable. Internal to storage/.
 *
 * Every read is a completion record (struct io_op) owned by the caller: it
 * names the operation, its context and a callback, and io_uring's user_data
 * points at it. The ring keeps these invariants:
 *
 *   - At most `depth` reads are in the kernel (or the pool) at once; more are
 *     queued in FIFOs inside the ring. A full submission queue is a queue,
 *     never an error. Demand reads leave the queue before prefetch reads.
 *   - io_ring_reap reaps every available completion first and runs the
 *     callbacks after, so a callback may queue new reads (a retry) without
 *     re-entering the reap loop.
 *   - A short read advances the op and queues the rest; -EAGAIN and -EINTR
 *     queue the op again. Only a finished read (all bytes, an error, or end
 *     of file) reaches its callback.
 *   - Callbacks always run on the thread that calls io_ring_reap, also with
 *     the pread pool, so the caller needs no locks.
 *
 * Not thread-safe: one thread drives a ring.
 */
#ifndef COLIBRI_STORAGE_IO_RING_H
#define COLIBRI_STORAGE_IO_RING_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#define IO_RING_ALIGN 4096 /* O_DIRECT alignment of buffers, offsets and lengths */

enum io_op_kind {
	IO_OP_READ = 1,
};

enum io_op_prio {
	IO_OP_PRIO_DEMAND = 0,   /* a request waits for it */
	IO_OP_PRIO_PREFETCH = 1, /* speculative: submitted after demand reads, lowest disk priority */
	IO_OP_PRIO_COUNT
};

struct io_op;
typedef void (*io_op_done_fn)(struct io_op *op);

/* A completion record. The caller fills the fields above `res` and calls
 * io_ring_queue; the ring fills `res` and `done_bytes` and calls `done`. */
struct io_op {
	enum io_op_kind kind;
	enum io_op_prio prio;
	int fd;                  /* raw descriptor (pread pool, or no fixed files) */
	int file_index;          /* fixed-file slot, or -1 */
	int buf_index;           /* fixed-buffer slot holding buf, or -1 */
	bool direct;             /* fd is O_DIRECT: buf, offset and len are 4 KiB aligned */
	uint8_t *buf;            /* destination of byte 0 */
	uint64_t offset;         /* file offset of byte 0 */
	uint32_t len_bytes;      /* bytes wanted */
	io_op_done_fn done;      /* called once the read finished */
	void *ctx;               /* the caller's context */

	int res;                 /* 0: all bytes read; -ENODATA: end of file first; else -errno */
	uint32_t done_bytes;     /* bytes read so far */
	int kres;                /* raw result of the last attempt (bytes or -errno) */
	bool queued;             /* in a FIFO of the ring, not yet handed over */
	struct io_op *next;      /* queue link, owned by the ring */
};

enum io_ring_backend {
	IO_RING_URING = 1,
	IO_RING_PREAD = 2,
};

struct pread_pool;

struct io_ring {
	enum io_ring_backend backend;
	struct io_uring uring;
	struct pread_pool *pool;
	int depth;               /* reads in the kernel at most */
	int n_queued;            /* in the FIFOs, not yet handed over */
	int n_sq;                /* prepared SQEs the kernel has not consumed yet */
	int n_kernel;            /* handed over, completion not yet reaped */
	bool fixed_files;
	bool fixed_buffers;
	struct io_op *q_head[IO_OP_PRIO_COUNT], *q_tail[IO_OP_PRIO_COUNT];
	struct io_op **reaped;   /* [depth] finished ops of one reap pass */
	struct io_op **batch;    /* [depth] raw completions from the pread pool */
	uint64_t resubmits;      /* short reads, EAGAIN and EINTR */
	double busy_s;           /* time with at least one read in the kernel */
	double busy_since;       /* start of the current busy interval */
	double wait_s;           /* time blocked in io_ring_reap waiting for a completion */
};

/* Sets up *r for `depth` reads in flight. Uses io_uring unless force_pread or
 * io_uring_queue_init fails, in which case it starts a pread pool of 2-4
 * threads and prints one warning line (unless forced). Returns 0 or -errno
 * (with error_set). Free with io_ring_free. */
int io_ring_init(struct io_ring *r, int depth, bool force_pread);

/* Waits for reads in the kernel to finish (their callbacks do not run),
 * drops queued ones and releases the ring. Safe on a zeroed ring. */
void io_ring_free(struct io_ring *r);

/* Registers fds[0..n) as fixed files; op->file_index indexes them. Returns 0
 * or -errno; on failure ops keep using raw descriptors. */
int io_ring_register_files(struct io_ring *r, const int *fds, int n);

/* Registers iov[0..n) as fixed buffers; op->buf_index indexes them. Returns
 * 0 or -errno (typically RLIMIT_MEMLOCK); on failure ops use plain reads. */
int io_ring_register_buffers(struct io_ring *r, const struct iovec *iov, int n);

/* Appends op to its priority's FIFO. Never fails; io_ring_submit hands it
 * to the kernel when a slot is free. */
void io_ring_queue(struct io_ring *r, struct io_op *op);

/* Moves a queued prefetch op to the demand FIFO: a request now waits for
 * it. No effect once the op is in the kernel. */
void io_ring_promote(struct io_ring *r, struct io_op *op);

/* Hands queued ops to the kernel until `depth` are in flight, in one
 * io_uring_submit. Returns 0 or -errno for a broken ring. */
int io_ring_submit(struct io_ring *r);

/* Reaps every available completion, then runs the callbacks of the ops that
 * finished, then submits what is queued. With wait, blocks until at least
 * one completion arrives if none is available and a read is in flight.
 * Returns the number of callbacks run, or -errno. */
int io_ring_reap(struct io_ring *r, bool wait);

/* Reads queued or in flight. */
static inline int io_ring_pending(const struct io_ring *r)
{
	return r->n_queued + r->n_sq + r->n_kernel;
}


#endif
