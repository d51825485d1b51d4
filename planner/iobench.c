/*
 * iobench — see iobench.h.
 *
 * One thread, one ring, depth slots. Each slot owns a block-sized,
 * 4 KiB-aligned buffer and is always either in the kernel or being
 * resubmitted, until the time is up; then slots retire as their reads
 * complete. Latencies go into a log-linear histogram (32 steps per power of
 * two), so percentiles cost no allocation and no sort.
 */
#include "planner/iobench.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <liburing.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HIST_SUB 32                          /* steps per power of two */
#define HIST_BUCKETS (44 * HIST_SUB)         /* up to 2^48 ns */

struct iob_hist {
	uint64_t counts[HIST_BUCKETS];
	uint64_t n;
	double sum_ns;
};

struct iob_slot {
	int file;
	uint64_t offset;
	uint64_t done;                       /* bytes of this block already read */
	uint64_t t_submit_ns;
};

struct iob {
	const struct iobench_params *p;
	int n_files;
	int *fds;
	uint64_t *first_block;               /* [n_files + 1], prefix sums of blocks per file */
	const char *const *paths;
	uint8_t *buf;
	struct iob_slot *slots;
	struct io_uring ring;
	uint64_t rng;
	struct iob_hist hist;
	char *err;
	size_t err_len;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int fail(struct iob *b, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct iob *b, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (b->err && b->err_len)
		vsnprintf(b->err, b->err_len, fmt, ap);
	va_end(ap);
	return -code;
}

static unsigned hist_index(uint64_t v)
{
	if (v < HIST_SUB)
		return (unsigned)v;
	int msb = 63 - __builtin_clzll(v);
	unsigned idx = (unsigned)(msb - 4) * HIST_SUB + (unsigned)((v >> (msb - 5)) & (HIST_SUB - 1));
	return idx < HIST_BUCKETS ? idx : HIST_BUCKETS - 1;
}

/* Middle of bucket idx, in ns. */
static double hist_value(unsigned idx)
{
	if (idx < HIST_SUB)
		return idx;
	int msb = (int)(idx / HIST_SUB) + 4;
	uint64_t width = 1ull << (msb - 5);
	uint64_t lo = (uint64_t)(HIST_SUB + idx % HIST_SUB) << (msb - 5);
	return (double)lo + (double)width / 2;
}

static double hist_quantile(const struct iob_hist *h, double q)
{
	uint64_t target = (uint64_t)(q * (double)h->n + 0.999999), seen = 0;
	if (target < 1)
		target = 1;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += h->counts[i];
		if (seen >= target)
			return hist_value(i);
	}
	return 0;
}

/* splitmix64 */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Queues the read of slot s's remaining bytes. */
static int slot_queue(struct iob *b, int s)
{
	struct iob_slot *sl = &b->slots[s];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&b->ring);
	if (!sqe) {
		int rc = io_uring_submit(&b->ring);
		if (rc < 0)
			return fail(b, -rc, "io_uring_submit: %s", strerror(-rc));
		if (!(sqe = io_uring_get_sqe(&b->ring)))
			return fail(b, EBUSY, "io_uring: no submission slot");
	}
	uint8_t *dst = b->buf + (size_t)s * b->p->block_bytes + sl->done;
	io_uring_prep_read(sqe, b->fds[sl->file], dst, (unsigned)(b->p->block_bytes - sl->done),
			   sl->offset + sl->done);
	io_uring_sqe_set_data64(sqe, (uint64_t)s);
	return 0;
}

/* Gives slot s a fresh random block and queues it. */
static int slot_start(struct iob *b, int s, uint64_t t)
{
	uint64_t blk = rng_next(&b->rng) % b->first_block[b->n_files];
	int lo = 0, hi = b->n_files - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (b->first_block[mid] <= blk)
			lo = mid;
		else
			hi = mid - 1;
	}
	struct iob_slot *sl = &b->slots[s];
	sl->file = lo;
	sl->offset = (blk - b->first_block[lo]) * b->p->block_bytes;
	sl->done = 0;
	sl->t_submit_ns = t;
	return slot_queue(b, s);
}

static int open_files(struct iob *b)
{
	int flags = O_RDONLY | O_CLOEXEC | (b->p->buffered ? 0 : O_DIRECT);
	b->first_block[0] = 0;
	for (int i = 0; i < b->n_files; i++) {
		const char *path = b->paths[i];
		struct stat st;
		uint64_t size = 0;
		int fd = b->fds[i] = open(path, flags);
		if (fd < 0 && errno == EINVAL && !b->p->buffered)
			return fail(b, EINVAL, "%s: the file system refuses O_DIRECT (tmpfs?); measure with --buffered", path);
		if (fd < 0)
			return fail(b, errno, "%s: cannot open: %s", path, strerror(errno));
		if (fstat(fd, &st) != 0)
			return fail(b, errno, "%s: cannot stat: %s", path, strerror(errno));
		if (S_ISBLK(st.st_mode)) {
			if (ioctl(fd, BLKGETSIZE64, &size) != 0)
				return fail(b, errno, "%s: cannot get the device size: %s", path, strerror(errno));
		} else if (S_ISREG(st.st_mode)) {
			size = (uint64_t)st.st_size;
		} else {
			return fail(b, EINVAL, "%s: not a regular file or block device", path);
		}
		b->first_block[i + 1] = b->first_block[i] + size / b->p->block_bytes;
	}
	if (b->first_block[b->n_files] == 0)
		return fail(b, EINVAL, "%s%s: smaller than one %llu KiB block", b->paths[0],
			    b->n_files > 1 ? " and the other files" : "",
			    (unsigned long long)(b->p->block_bytes >> 10));
	return 0;
}

/* Handles one completion. Returns 1 when the slot finished a block, 0 when
 * it was requeued for a remainder, -errno on a failed read. */
static int complete(struct iob *b, int s, int res)
{
	struct iob_slot *sl = &b->slots[s];
	if (res == -EAGAIN || res == -EINTR)
		return slot_queue(b, s);
	if (res == -EINVAL && !b->p->buffered)
		return fail(b, EINVAL, "%s: O_DIRECT read refused at offset %llu; measure with --buffered",
			    b->paths[sl->file], (unsigned long long)sl->offset);
	if (res < 0)
		return fail(b, -res, "%s: read at offset %llu failed: %s", b->paths[sl->file],
			    (unsigned long long)sl->offset, strerror(-res));
	if (res == 0)
		return fail(b, EIO, "%s: unexpected end of file at offset %llu", b->paths[sl->file],
			    (unsigned long long)(sl->offset + sl->done));
	sl->done += (uint64_t)res;
	if (sl->done < b->p->block_bytes)
		return slot_queue(b, s);
	return 1;
}

static int run_loop(struct iob *b, struct iobench_result *out)
{
	const struct iobench_params *p = b->p;
	uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)(p->seconds * 1e9), t_end = 0;
	int in_flight = p->depth, rc = 0;
	bool stopping = false;
	for (int s = 0; s < p->depth && !rc; s++)
		rc = slot_start(b, s, t0);
	if (rc)
		stopping = true;
	while (in_flight > 0) {
		int sub = io_uring_submit_and_wait(&b->ring, 1);
		if (sub < 0 && sub != -EINTR && sub != -EAGAIN && sub != -EBUSY) {
			if (!rc)
				rc = fail(b, -sub, "io_uring_submit_and_wait: %s", strerror(-sub));
			break;
		}
		uint64_t t = now_ns();
		/* Past the deadline nothing more counts, unless nothing has yet:
		 * a stalled device still gets its first reads measured. */
		bool late = t > deadline && out->reads > 0;
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&b->ring, head, cqe) {
			seen++;
			int s = (int)io_uring_cqe_get_data64(cqe);
			int done = complete(b, s, cqe->res);
			if (done < 0) {
				if (!rc)
					rc = done;
				stopping = true;
				in_flight--;
				continue;
			}
			if (done == 0)
				continue;
			if (!late && !stopping) {
				uint64_t lat = t - b->slots[s].t_submit_ns;
				b->hist.counts[hist_index(lat)]++;
				b->hist.n++;
				b->hist.sum_ns += (double)lat;
				out->bytes += p->block_bytes;
				out->reads++;
			}
			if (stopping || late) {
				in_flight--;
			} else if ((done = slot_start(b, s, t)) < 0) {
				rc = rc ? rc : done;
				stopping = true;
				in_flight--;
			}
		}
		io_uring_cq_advance(&b->ring, seen);
		if (!stopping && t > deadline && out->reads > 0) {
			stopping = true;
			t_end = late ? deadline : t;
		}
	}
	out->seconds = t_end > t0 ? (double)(t_end - t0) / 1e9 : p->seconds;
	return rc;
}

/* One thread submits and reaps, so the ring can skip the cross-CPU work a
 * shared ring needs: completion work runs when we wait for it (as fio's
 * io_uring engine sets up its rings). Older kernels lack the flags; fall
 * back step by step. */
static int ring_init(struct io_uring *ring, unsigned depth)
{
	static const unsigned flags[] = {
		IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
		IORING_SETUP_COOP_TASKRUN,
		0,
	};
	int rc = -EINVAL;
	for (size_t i = 0; i < sizeof flags / sizeof flags[0] && rc == -EINVAL; i++)
		rc = io_uring_queue_init(depth, ring, flags[i]);
	return rc;
}

int iobench_run(struct iobench_result *out, const char *const *paths, int n_paths,
		const struct iobench_params *p, char *err, size_t err_len)
{
	struct iob b = { .p = p, .n_files = n_paths, .paths = paths, .rng = p->seed, .err = err, .err_len = err_len };
	int rc = 0;
	bool ring = false;
	memset(out, 0, sizeof *out);
	if (err && err_len)
		err[0] = 0;
	if (n_paths < 1 || p->depth < 1 || p->depth > IOBENCH_DEPTH_MAX || !(p->seconds > 0) ||
	    p->block_bytes == 0 || p->block_bytes % IOBENCH_ALIGN || p->block_bytes > (1ull << 30))
		return fail(&b, EINVAL, "iobench: bad parameters (block %llu bytes, depth %d, %.3f s)",
			    (unsigned long long)p->block_bytes, p->depth, p->seconds);
	b.fds = malloc((size_t)n_paths * sizeof *b.fds);
	b.first_block = calloc((size_t)n_paths + 1, sizeof *b.first_block);
	b.slots = calloc((size_t)p->depth, sizeof *b.slots);
	if (!b.fds || !b.first_block || !b.slots) {
		rc = fail(&b, ENOMEM, "iobench: out of memory");
		goto out;
	}
	for (int i = 0; i < n_paths; i++)
		b.fds[i] = -1;
	if ((rc = open_files(&b)))
		goto out;
	size_t buf_bytes = (size_t)p->depth * (size_t)p->block_bytes;
	if (posix_memalign((void **)&b.buf, IOBENCH_ALIGN, buf_bytes)) {
		b.buf = NULL;
		rc = fail(&b, ENOMEM, "iobench: cannot allocate %d buffers of %llu KiB", p->depth,
			  (unsigned long long)(p->block_bytes >> 10));
		goto out;
	}
	memset(b.buf, 0x5a, buf_bytes);
	if ((rc = ring_init(&b.ring, (unsigned)p->depth)) < 0) {
		rc = fail(&b, -rc, "io_uring_queue_init: %s", strerror(-rc));
		goto out;
	}
	ring = true;
	if ((rc = run_loop(&b, out)))
		goto out;
	out->gbps = (double)out->bytes / out->seconds / 1e9;
	out->iops = (double)out->reads / out->seconds;
	if (b.hist.n) {
		out->lat_mean_us = b.hist.sum_ns / (double)b.hist.n / 1e3;
		out->lat_p50_us = hist_quantile(&b.hist, 0.50) / 1e3;
		out->lat_p99_us = hist_quantile(&b.hist, 0.99) / 1e3;
	}
out:
	if (ring)
		io_uring_queue_exit(&b.ring);
	for (int i = 0; b.fds && i < n_paths; i++)
		if (b.fds[i] >= 0)
			close(b.fds[i]);
	free(b.buf);
	free(b.slots);
	free(b.first_block);
	free(b.fds);
	return rc;
}
