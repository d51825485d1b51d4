/*
 * test_expert_store — the expert buffer manager (storage/) against expert
 * files generated here (tests/expert_store_fixture.h), whose bytes the test
 * keeps as the reference, with checksums from the system libxxhash (the
 * store computes its own). Every record here is one size: one frame class.
 *
 * Covers: every delivered record byte-equal to the file at the smallest,
 * a medium and a whole-model cache, io_depth 1 and 64, with and without
 * O_DIRECT, with COLIBRI_NO_IO_URING, COLIBRI_NO_DIRECT and
 * COLIBRI_NO_FIXED_BUFFERS; the default backend is io_uring whenever a
 * read through io_uring works in the test process (no silent fallback),
 * and a fallback, forced or under a seccomp filter that blocks io_uring,
 * says so in one line naming why; each distinct id delivered once per request;
 * prefetch joined by a request (read once), also while still queued;
 * prefetch bounds; pins protect frames, one release per delivery, an
 * abandoned request unpins the rest; the frequency-aware policy beating
 * LRU on a Zipf routing trace (same trace for both), also after the
 * favourites change; fault injection (a corrupt byte fails the request
 * naming layer, expert, file and offset after one retry, other experts
 * still load; records moved to another's place with their checksums fail,
 * since each record's checksum is seeded with its place; truncated files
 * fail with a clear error, at open or at read);
 * the O_DIRECT-refused path on /dev/shm; learned usage counters; bad
 * arguments. The pinned set: pinned experts stay in their frames under
 * pressure and count as pinned hits, extra releases never drop them,
 * capacity shrinks by the set, repin and pin_set swap experts in and out,
 * a set too large for one step is refused (nothing changed), a record that
 * fails to load undoes the call, also with the pread pool. Prefetch
 * counters: issued, used (hit or joined), wasted (evicted unused), and no
 * prefetch takes a frame of the pinned set.
 * (Frame classes and layer cooling: tests/test_store_classes.c; mirrors,
 * striping and failover: tests/test_mirror_store.c.)
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <liburing.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "base/error.h"
#include "storage/expert_store.h"
#include "tests/expert_store_fixture.h"
#include "tests/stderr_capture.h"

static void check_configs(bool buffered)
{
	struct store_fixture fx;
	fixture_make(&fx);
	const uint64_t frames[3] = {FX_PER_STEP, 20, 3 * FX_EXPERTS};
	const int depths[2] = {1, 64};
	for (int c = 0; c < 3; c++)
		for (int d = 0; d < 2; d++) {
			struct expert_store *s = store_open(&fx, frames[c], depths[d], buffered,
							    EXPERT_EVICT_DEFAULT, 0);
			const struct expert_store_stats *st = expert_store_stats(s);
			cr_assert_eq(st->n_frames, (int32_t)frames[c]);
			cr_assert_eq(st->frame_bytes, FX_REC);
			cr_assert_eq(st->n_classes, 1, "one record size, one class");
			cr_assert_eq(st->classes[0].n_frames, (int32_t)frames[c]);
			cr_assert_eq(st->classes[0].n_layers, 3);
			cr_assert_eq(st->cache_bytes, frames[c] * FX_REC);
			random_steps(s, &fx, 150, 7 + (uint64_t)c * 10 + (uint64_t)d);
			cr_assert_eq(st->requests, st->hits + st->misses + st->joins);
			cr_assert(st->bytes_read >= st->misses * FX_REC);
			cr_assert_eq(st->classes[0].requests, st->requests);
			cr_assert_eq(st->classes[0].bytes_read, st->bytes_read);
			if (c == 2)
				cr_assert(st->bytes_read <= (uint64_t)FX_EXPERTS * 3 * FX_REC,
					  "a whole-model cache reads each record at most once (%" PRIu64 ")",
					  st->bytes_read);
			expert_store_close(s);
		}
	store_fixture_free(&fx);
}

Test(expert_store, bytes_match_direct)
{
	check_configs(false);
}

Test(expert_store, bytes_match_buffered)
{
	check_configs(true);
}

/* Reads record 1 of layer 0 through a fresh io_uring (no O_DIRECT, no
 * registration) and compares it with the fixture's bytes: io_uring works
 * in this process when io_uring_setup, io_uring_enter and the read itself
 * do. 0, or -errno with the step that failed in *step. */
static int io_uring_probe(const struct store_fixture *fx, const char **step)
{
	struct io_uring ring;
	uint8_t *buf = malloc(FX_REC);
	int fd = open(fx->paths[0][0], O_RDONLY);
	int rc = !buf ? -ENOMEM : fd < 0 ? -errno : 0;
	*step = "open";
	if (rc)
		goto out;
	*step = "io_uring_queue_init";
	if ((rc = io_uring_queue_init(4, &ring, 0)) < 0)
		goto out;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
	io_uring_prep_read(sqe, fd, buf, FX_REC, FX_REC);
	*step = "io_uring_submit";
	if ((rc = io_uring_submit(&ring)) == 1) {
		struct io_uring_cqe *cqe;
		*step = "io_uring_wait_cqe";
		while ((rc = io_uring_wait_cqe(&ring, &cqe)) == -EINTR)
			;
		if (rc == 0) {
			*step = "the read";
			rc = cqe->res < 0 ? cqe->res : cqe->res != FX_REC ? -EIO : 0;
			io_uring_cqe_seen(&ring, cqe);
		}
	} else if (rc >= 0) {
		rc = -EIO;
	}
	io_uring_queue_exit(&ring);
	cr_assert(rc != 0 || memcmp(buf, fx->content[0] + FX_REC, FX_REC) == 0,
		  "io_uring read other bytes than the file holds");
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return rc;
}

/* The default I/O path, and a test that fails if the store fell back
 * while io_uring works here: when a read through io_uring of our own
 * succeeds, a store opened with default options must read with io_uring,
 * O_DIRECT where the file system takes it, and registered files and
 * buffers, and must print no fallback line. Where the probe fails (a
 * seccomp profile without io_uring, kernel.io_uring_disabled, an old
 * kernel) the test skips naming the step and errno; the fallback those
 * hosts get is tested below under a seccomp filter of our own. */
Test(expert_store, io_uring_direct_fixed_by_default)
{
	const char *forced = getenv("COLIBRI_NO_IO_URING");
	if (forced && *forced && strcmp(forced, "0") != 0)
		cr_skip_test("COLIBRI_NO_IO_URING is set: the default backend is not in use");
	struct store_fixture fx;
	fixture_make(&fx);
	const char *step;
	int rc = io_uring_probe(&fx, &step);
	if (rc < 0) {
		store_fixture_free(&fx);
		cr_skip_test("io_uring does not work in this process: %s failed with %s (%d); the store falls back to "
			     "pread threads here", step, strerror(-rc), -rc);
	}
	int fd = open(fx.paths[0][0], O_RDONLY | O_DIRECT);
	bool direct = fd >= 0;
	if (fd >= 0)
		close(fd);
	struct stderr_capture cap;
	stderr_capture_begin(&cap);
	struct expert_store *s = store_open(&fx, 20, 8, false, EXPERT_EVICT_DEFAULT, 0);
	char *said = stderr_capture_end(&cap);
	const struct expert_store_stats *st = expert_store_stats(s);
	cr_assert(st->io_uring, "io_uring works in this process, but the store fell back to pread threads");
	cr_expect_eq(stderr_count(said, "pread threads"), 0, "no fallback line: %s", said);
	cr_assert_eq(st->o_direct, direct, "O_DIRECT whenever the file system takes it");
	cr_assert(st->fixed_files);
	cr_assert(st->fixed_buffers, "registration fails only over RLIMIT_MEMLOCK");
	cr_assert_eq(st->evict, EXPERT_EVICT_FREQ);
	cr_assert_eq(st->io_depth, 8);
	cr_assert_eq(st->prefetch_depth, 4);
	random_steps(s, &fx, 50, 3);
	cr_assert_eq(st->misses + st->joins > 0 && st->bytes_read > 0, true, "the steps read through io_uring");
	free(said);
	expert_store_close(s);
	store_fixture_free(&fx);
}

/* Makes io_uring_setup, io_uring_enter and io_uring_register fail with
 * EPERM in this process from now on, as Docker's default seccomp profile
 * does. Criterion runs each test in a process of its own, so the filter
 * ends with the test. 0 or -errno. */
static int seccomp_block_io_uring(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 3, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_enter, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_register, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
	};
	struct sock_fprog prog = { .len = (unsigned short)(sizeof f / sizeof f[0]), .filter = f };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
		return -errno;
	return 0;
}

/* Under a seccomp profile that blocks io_uring the store falls back to
 * pread threads, says so once naming the error, reports it in its stats,
 * and delivers the same bytes. */
Test(expert_store, io_uring_blocked_falls_back_and_says_why)
{
	struct store_fixture fx;
	fixture_make(&fx);
	int rc = seccomp_block_io_uring();
	if (rc < 0) {
		store_fixture_free(&fx);
		cr_skip_test("cannot install a seccomp filter here: %s", strerror(-rc));
	}
	const char *step;
	cr_assert_eq(io_uring_probe(&fx, &step), -EPERM, "the filter blocks io_uring (%s)", step);
	struct stderr_capture cap;
	stderr_capture_begin(&cap);
	struct expert_store *s = store_open(&fx, 20, 8, false, EXPERT_EVICT_DEFAULT, 0);
	char *said = stderr_capture_end(&cap);
	cr_assert(!expert_store_stats(s)->io_uring);
	cr_expect_eq(stderr_count(said, "colibri: warning: io_uring is unavailable (Operation not permitted); "
				      "reading experts with pread threads\n"), 1, "one line naming why: %s", said);
	cr_expect_eq(stderr_count(said, "pread threads"), 1, "said once: %s", said);
	random_steps(s, &fx, 150, 14);
	free(said);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, env_no_io_uring)
{
	setenv("COLIBRI_NO_IO_URING", "1", 1);
	struct store_fixture fx;
	fixture_make(&fx);
	for (int d = 1; d <= 64; d *= 64) {
		struct stderr_capture cap;
		stderr_capture_begin(&cap);
		struct expert_store *s = store_open(&fx, 20, d, false, EXPERT_EVICT_DEFAULT, 0);
		char *said = stderr_capture_end(&cap);
		cr_assert(!expert_store_stats(s)->io_uring);
		cr_expect_eq(stderr_count(said, "colibri: warning: COLIBRI_NO_IO_URING is set; reading experts with pread "
					      "threads\n"), 1, "the forced fallback says so once: %s", said);
		cr_expect_eq(stderr_count(said, "pread threads"), 1, "said once: %s", said);
		free(said);
		random_steps(s, &fx, 150, 11);
		expert_store_close(s);
	}
	store_fixture_free(&fx);
}

Test(expert_store, env_no_direct)
{
	setenv("COLIBRI_NO_DIRECT", "1", 1);
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 20, 16, false, EXPERT_EVICT_DEFAULT, 0);
	cr_assert(!expert_store_stats(s)->o_direct);
	random_steps(s, &fx, 150, 12);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, env_no_fixed_buffers)
{
	setenv("COLIBRI_NO_FIXED_BUFFERS", "1", 1);
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 20, 16, false, EXPERT_EVICT_DEFAULT, 0);
	cr_assert(!expert_store_stats(s)->fixed_buffers);
	random_steps(s, &fx, 150, 13);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, prefetch_joined_read_once)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 20, 8, false, EXPERT_EVICT_DEFAULT, 4);
	const struct expert_store_stats *st = expert_store_stats(s);
	int32_t id = 5;
	cr_assert_eq(expert_store_prefetch(s, 2, &id, 1), 1);
	cr_assert_eq(expert_store_prefetch(s, 2, &id, 1), 0, "in flight: not prefetched twice");
	step_check(s, &fx, 2, &id, 1, false);
	cr_assert_eq(st->misses, 0);
	cr_assert_eq(st->hits + st->joins, 1);
	cr_assert_eq(st->bytes_read, FX_REC, "read once: %" PRIu64, st->bytes_read);
	cr_assert_eq(st->prefetch_issued_bytes, FX_REC);
	cr_assert_eq(st->prefetch_used_bytes, FX_REC);
	cr_assert_eq(expert_store_prefetch(s, 2, &id, 1), 0, "resident: nothing to prefetch");
	/* A hit on the prefetched expert is reported as prefetched in time;
	 * the next request of it is an ordinary hit. */
	uint64_t ph = st->prefetch_hits;
	cr_assert_eq(ph, st->hits, "prefetch hits %" PRIu64 ", hits %" PRIu64, ph, st->hits);
	step_check(s, &fx, 2, &id, 1, false);
	cr_assert_eq(st->prefetch_hits, ph, "a second request counted as a prefetch hit");

	/* Requested right after the prefetch: its read is still in flight, or
	 * at least unreaped, so the request joins it. */
	int32_t two[2] = {6, 7};
	cr_assert_eq(expert_store_prefetch(s, 3, two, 2), 2);
	step_check(s, &fx, 3, two, 2, false);
	cr_assert_eq(st->misses, 0);
	cr_assert_eq(st->joins, 3, "joins %" PRIu64 ", hits %" PRIu64, st->joins, st->hits);
	cr_assert_eq(st->bytes_read, 3 * FX_REC);

	/* Bounded: at most prefetch_depth reads in flight, the rest skipped. */
	int32_t many[10] = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
	cr_assert_eq(expert_store_prefetch(s, 0, many, 10), 4);
	step_check(s, &fx, 0, many, 8, false);
	cr_assert_eq(st->misses, 4);
	cr_assert_eq(st->joins, 7);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, prefetch_joined_while_queued)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 20, 1, false, EXPERT_EVICT_DEFAULT, 1);
	const struct expert_store_stats *st = expert_store_stats(s);
	int32_t a[4] = {0, 1, 2, 3}, x = 9;
	error_clear();
	cr_assert_eq(expert_store_request(s, 3, a, 4), 0); /* 1 read in the kernel, 3 queued */
	cr_assert_eq(expert_store_prefetch(s, 3, &x, 1), 1); /* queued behind them */
	cr_assert_eq(expert_store_prefetch(s, 3, a, 4), 0, "in flight already");
	/* A new request abandons the first and joins the queued prefetch,
	 * which moves to the demand queue. */
	step_check(s, &fx, 3, &x, 1, false);
	cr_assert_eq(st->joins, 1);
	step_check(s, &fx, 3, a, 4, false);
	cr_assert_eq(st->misses, 4, "the abandoned request's reads were not repeated");
	cr_assert_eq(st->bytes_read, 5 * FX_REC);
	cr_assert_eq(st->reads_queued + st->reads_in_kernel, 0);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, prefetch_never_takes_pinned_frames)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, FX_PER_STEP, 8, false, EXPERT_EVICT_DEFAULT, 8);
	int32_t ids[FX_PER_STEP] = {0, 1, 2, 3, 4, 5, 6, 7};
	step_check(s, &fx, 2, ids, FX_PER_STEP, true); /* every frame pinned */
	int32_t more[4] = {20, 21, 22, 23};
	cr_assert_eq(expert_store_prefetch(s, 2, more, 4), 0);
	/* The pinned records are intact. */
	for (int i = 0; i < FX_PER_STEP; i++)
		expert_store_release(s, 2, ids[i]);
	cr_assert_eq(expert_store_prefetch(s, 2, more, 4), 4);
	step_check(s, &fx, 2, more, 4, false);
	step_check(s, &fx, 2, ids, 4, false);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, pins_protect_frames)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, FX_PER_STEP, 4, false, EXPERT_EVICT_DEFAULT, 0);
	int32_t a[4] = {0, 1, 2, 3}, b[5] = {10, 11, 12, 13, 14}, c[4] = {20, 21, 22, 23};
	const void *held[4];
	int32_t held_id[4];
	error_clear();
	cr_assert_eq(expert_store_request(s, 2, a, 4), 0);
	int32_t e;
	for (int i = 0; i < 4; i++)
		cr_assert_eq(expert_store_next(s, &held_id[i], &held[i]), 1);
	cr_assert_eq(expert_store_next(s, &e, &held[0]), 0);

	/* 4 of 8 frames pinned: 5 misses cannot fit. */
	uint64_t steps = expert_store_stats(s)->steps;
	error_clear();
	cr_assert_eq(expert_store_request(s, 2, b, 5), -ENOMEM);
	cr_assert_eq(expert_store_stats(s)->steps, steps, "a refused request is not a step");
	cr_assert(strstr(error_message(), "unpinned"), "%s", error_message());
	cr_assert_eq(expert_store_next(s, &e, &held[0]), 0, "a refused request delivers nothing");
	step_check(s, &fx, 2, c, 4, true); /* 4 fit; now all 8 pinned */
	int32_t one = 30;
	error_clear();
	cr_assert_eq(expert_store_request(s, 2, &one, 1), -ENOMEM);
	/* Held records were never overwritten. */
	for (int i = 0; i < 4; i++)
		cr_assert(memcmp(held[i], record_ref(&fx, 2, held_id[i]), FX_REC) == 0);
	/* A pinned expert asked for again is a hit, not a miss. */
	step_check(s, &fx, 2, a, 2, false); /* pins a[0], a[1] again and releases once */
	cr_assert_eq(expert_store_request(s, 2, &one, 1), -ENOMEM, "a[0], a[1] are still held once");
	for (int i = 0; i < 4; i++) {
		expert_store_release(s, 2, a[i]);
		expert_store_release(s, 2, c[i]);
	}
	/* Released: every frame is evictable again. */
	int32_t d[8] = {24, 25, 26, 27, 28, 29, 30, 31};
	step_check(s, &fx, 2, d, 8, false);
	step_check(s, &fx, 2, a, 4, false);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, one_release_per_delivery)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, FX_PER_STEP, 4, false, EXPERT_EVICT_DEFAULT, 0);
	int32_t id = 9;
	step_check(s, &fx, 3, &id, 1, true);
	step_check(s, &fx, 3, &id, 1, true); /* pinned twice */
	expert_store_release(s, 3, id);
	int32_t eight[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	error_clear();
	cr_assert_eq(expert_store_request(s, 3, eight, 8), -ENOMEM, "one pin is left");
	expert_store_release(s, 3, id);
	step_check(s, &fx, 3, eight, 8, false);
	/* A request abandoned before its last delivery unpins the rest. */
	cr_assert_eq(expert_store_request(s, 3, eight, 8), 0);
	int32_t e;
	const void *rec;
	cr_assert_eq(expert_store_next(s, &e, &rec), 1);
	expert_store_release(s, 3, e);
	int32_t other[8] = {20, 21, 22, 23, 24, 25, 26, 27};
	step_check(s, &fx, 3, other, 8, false);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, release_needs_a_delivery)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, FX_PER_STEP, 4, false, EXPERT_EVICT_DEFAULT, 8);
	int32_t ids[FX_PER_STEP] = {0, 1, 2, 3, 4, 5, 6, 7};
	step_check(s, &fx, 2, ids, FX_PER_STEP, false); /* every frame resident, unpinned */
	cr_assert_eq(expert_store_request(s, 2, ids, FX_PER_STEP), 0);
	int32_t first, e;
	const void *rec;
	cr_assert_eq(expert_store_next(s, &first, &rec), 1);
	/* Releases of experts still to be delivered, or twice of the delivered
	 * one, take no pin: only the delivered expert's frame is evictable. */
	for (int i = 0; i < FX_PER_STEP; i++)
		if (ids[i] != first)
			expert_store_release(s, 2, ids[i]);
	expert_store_release(s, 2, first);
	expert_store_release(s, 2, first);
	int32_t more[2] = {20, 21};
	cr_assert_eq(expert_store_prefetch(s, 2, more, 2), 1, "a stray release unpinned a frame");
	/* The undelivered experts kept their frames and bytes. */
	int n = 1;
	while (expert_store_next(s, &e, &rec) > 0) {
		cr_assert_neq(e, first);
		cr_assert(memcmp(rec, record_ref(&fx, 2, e), FX_REC) == 0, "expert %d was overwritten", e);
		expert_store_release(s, 2, e);
		n++;
	}
	cr_assert_eq(n, FX_PER_STEP);
	step_check(s, &fx, 2, more, 2, false);
	expert_store_close(s);
	store_fixture_free(&fx);
}

/* A Zipf(s) routing trace: each step picks k distinct experts of one layer
 * (layers in turn), with popularity by rank and a different ranking per
 * layer. */
static void zipf_trace(int32_t *ids, int n_steps, int k, int n_layers, int n_experts, double skew,
		       uint64_t seed)
{
	double *cdf = malloc((size_t)n_experts * sizeof *cdf);
	int32_t *perm = malloc((size_t)n_layers * n_experts * sizeof *perm);
	double sum = 0;
	for (int r = 0; r < n_experts; r++)
		cdf[r] = (sum += 1.0 / pow(r + 1, skew));
	for (int l = 0; l < n_layers; l++) {
		int32_t *p = perm + l * n_experts;
		for (int e = 0; e < n_experts; e++)
			p[e] = e;
		for (int e = n_experts - 1; e > 0; e--) {
			int j = (int)(splitmix(&seed) % (uint64_t)(e + 1));
			int32_t t = p[e];
			p[e] = p[j];
			p[j] = t;
		}
	}
	for (int step = 0; step < n_steps; step++) {
		int32_t *out = ids + (size_t)step * k;
		const int32_t *p = perm + (step % n_layers) * n_experts;
		for (int i = 0; i < k;) {
			double u = (double)(splitmix(&seed) >> 11) / 9007199254740992.0 * sum;
			int r = 0;
			while (r < n_experts - 1 && cdf[r] < u)
				r++;
			bool dup = false;
			for (int j = 0; j < i; j++)
				dup |= out[j] == p[r];
			if (!dup)
				out[i++] = p[r];
		}
	}
	free(cdf);
	free(perm);
}

/* Hit rate of the steps from `from` on, after running all of the trace. */
static double trace_hit_rate(const struct store_fixture *fx, const int32_t *ids, int n_steps, int k,
			     enum expert_evict evict, int from)
{
	struct expert_store_options o = {
		.cache_bytes = 48 * 4096, .io_depth = 16, .buffered = true, .evict = evict,
	};
	struct expert_store *s = store_fixture_open(fx, k, &o);
	cr_assert_eq(expert_store_stats(s)->evict, evict);
	uint64_t hits0 = 0, requests0 = 0;
	for (int step = 0; step < n_steps; step++) {
		int layer = step % 4;
		if (step == from) {
			hits0 = expert_store_stats(s)->hits;
			requests0 = expert_store_stats(s)->requests;
		}
		cr_assert_eq(expert_store_request(s, layer, ids + (size_t)step * k, k), 0, "%s",
			     error_message());
		int32_t e;
		const void *rec;
		int rc;
		while ((rc = expert_store_next(s, &e, &rec)) > 0) {
			cr_assert(memcmp(rec, record_ref(fx, layer, e), 4096) == 0);
			expert_store_release(s, layer, e);
		}
		cr_assert_eq(rc, 0, "%s", error_message());
	}
	const struct expert_store_stats *st = expert_store_stats(s);
	cr_assert_eq(st->requests, (uint64_t)n_steps * k);
	double rate = (double)(st->hits - hits0) / (double)(st->requests - requests0);
	for (int l = 0; l < 4; l++)
		cr_assert(st->layer_requests[l] > 0 && st->layer_hits[l] <= st->layer_requests[l]);
	expert_store_close(s);
	return rate;
}

Test(expert_store, freq_policy_beats_lru_on_zipf)
{
	enum { STEPS = 4000, K = 6, EXPERTS = 64 };
	const uint64_t rec[FX_LAYERS] = {4096, 4096, 4096, 4096};
	struct store_fixture fx;
	store_fixture_make(&fx, 1, EXPERTS, rec, FX_SEED);
	int32_t *ids = malloc((size_t)STEPS * K * sizeof *ids);
	zipf_trace(ids, STEPS, K, 4, EXPERTS, 1.0, 42);
	double freq = trace_hit_rate(&fx, ids, STEPS, K, EXPERT_EVICT_FREQ, 0);
	double lru = trace_hit_rate(&fx, ids, STEPS, K, EXPERT_EVICT_LRU, 0);
	fprintf(stderr, "zipf(1.0) trace, 48 of 256 experts cached: freq %.1f%% hits, lru %.1f%%\n",
		100 * freq, 100 * lru);
	cr_assert(freq > lru + 0.08, "freq %.3f should beat lru %.3f by 8 points", freq, lru);
	free(ids);
	store_fixture_free(&fx);
}

/* Routing that changes its favourites halfway: aging lets the frequency
 * policy forget the old ones, so it still beats LRU on the second half. */
Test(expert_store, freq_policy_follows_drift)
{
	enum { STEPS = 4000, K = 6, EXPERTS = 64 };
	const uint64_t rec[FX_LAYERS] = {4096, 4096, 4096, 4096};
	struct store_fixture fx;
	store_fixture_make(&fx, 1, EXPERTS, rec, FX_SEED);
	int32_t *ids = malloc((size_t)STEPS * K * sizeof *ids);
	zipf_trace(ids, STEPS / 2, K, 4, EXPERTS, 1.0, 42);
	zipf_trace(ids + (size_t)STEPS / 2 * K, STEPS / 2, K, 4, EXPERTS, 1.0, 4242);
	double freq = trace_hit_rate(&fx, ids, STEPS, K, EXPERT_EVICT_FREQ, STEPS / 2);
	double lru = trace_hit_rate(&fx, ids, STEPS, K, EXPERT_EVICT_LRU, STEPS / 2);
	fprintf(stderr, "zipf(1.0) trace, new favourites halfway, second half: freq %.1f%% hits, lru %.1f%%\n",
		100 * freq, 100 * lru);
	cr_assert(freq > lru + 0.05, "freq %.3f should beat lru %.3f by 5 points after the shift", freq, lru);
	free(ids);
	store_fixture_free(&fx);
}

Test(expert_store, env_selects_lru)
{
	setenv("COLIBRI_EVICT", "lru", 1);
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 20, 4, false, EXPERT_EVICT_DEFAULT, 0);
	cr_assert_eq(expert_store_stats(s)->evict, EXPERT_EVICT_LRU);
	random_steps(s, &fx, 100, 5);
	expert_store_close(s);
	s = store_open(&fx, 20, 4, false, EXPERT_EVICT_FREQ, 0);
	cr_assert_eq(expert_store_stats(s)->evict, EXPERT_EVICT_FREQ, "the option wins over the env");
	expert_store_close(s);
	store_fixture_free(&fx);
}

/* Requests ids of layer and drains it; returns next's final result and
 * counts the deliveries (released). */
static int drain(struct expert_store *s, int layer, const int32_t *ids, int n, int *n_got)
{
	error_clear();
	int rc = expert_store_request(s, layer, ids, n);
	*n_got = 0;
	if (rc)
		return rc;
	int32_t e;
	const void *rec;
	while ((rc = expert_store_next(s, &e, &rec)) > 0) {
		(*n_got)++;
		expert_store_release(s, layer, e);
	}
	return rc;
}

static void check_corrupt(bool buffered, bool no_uring)
{
	if (no_uring)
		setenv("COLIBRI_NO_IO_URING", "1", 1);
	struct store_fixture fx;
	fixture_make(&fx);
	uint64_t off = 5ull * FX_REC;
	store_fixture_flip(fx.paths[0][3], off + 100, 0x5a);
	struct expert_store *s = store_open(&fx, 20, 8, buffered, EXPERT_EVICT_DEFAULT, 0);
	const struct expert_store_stats *st = expert_store_stats(s);
	int32_t ids[3] = {3, 5, 7};
	int n_got;
	int rc = drain(s, 3, ids, 3, &n_got);
	cr_assert_eq(rc, -EIO, "rc %d", rc);
	const char *msg = error_message();
	char want[700];
	snprintf(want, sizeof want, "layer 3 expert 5: checksum mismatch at offset %" PRIu64 " in %s", off,
		 fx.paths[0][3]);
	cr_assert(strstr(msg, want), "message: %s\nwanted: %s", msg, want);
	cr_assert_eq(st->read_retries, 1);
	cr_assert_eq(st->read_failures, 1);
	int32_t e;
	const void *rec;
	cr_assert_eq(expert_store_next(s, &e, &rec), -EIO, "the failure sticks until the next request");

	/* The others still load, and the bad one fails again, not cached. */
	int32_t good[2] = {3, 7};
	step_check(s, &fx, 3, good, 2, false);
	cr_assert_eq(drain(s, 3, &ids[1], 1, &n_got), -EIO);
	step_check(s, &fx, 3, ids, 1, false);
	cr_assert_eq(st->read_failures, 2);
	/* Prefetching the bad record fails quietly; the request still reports it. */
	cr_assert_eq(expert_store_prefetch(s, 3, &ids[1], 1), 1);
	cr_assert_eq(drain(s, 3, &ids[1], 1, &n_got), -EIO);
	int32_t l0[3] = {1, 2, 3};
	step_check(s, &fx, 0, l0, 3, false);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, corrupt_record_direct)
{
	check_corrupt(false, false);
}

Test(expert_store, corrupt_record_buffered)
{
	check_corrupt(true, false);
}

Test(expert_store, corrupt_record_pread)
{
	check_corrupt(false, true);
}

/* Writes the reference bytes of record `from` of layer lf over record `to`
 * of layer lt in the file, and gives that place the checksum sum. */
static void place_record(struct store_fixture *fx, int lf, int32_t from, int lt, int32_t to, uint64_t sum)
{
	int fd = open(fx->paths[0][lt], O_WRONLY);
	cr_assert(fd >= 0, "cannot open %s", fx->paths[0][lt]);
	cr_assert_eq(pwrite(fd, record_ref(fx, lf, from), FX_REC, (off_t)to * FX_REC), FX_REC);
	close(fd);
	fx->checksums[lt][to] = sum;
}

/* Records 2 and 5 of layer 3 swapped, bytes and checksums together, and
 * layer 0's record 4 with its checksum over layer 3's: the file and the
 * checksums still agree as sets, but a record's checksum is seeded with its
 * place, so each read fails. The records in their place still load. */
Test(expert_store, records_out_of_place_fail_their_check)
{
	struct store_fixture fx;
	fixture_make(&fx);
	uint64_t sum2 = fx.checksums[3][2], sum5 = fx.checksums[3][5];
	place_record(&fx, 3, 5, 3, 2, sum5);
	place_record(&fx, 3, 2, 3, 5, sum2);
	place_record(&fx, 0, 4, 3, 4, fx.checksums[0][4]);
	struct expert_store *s = store_open(&fx, 20, 8, false, EXPERT_EVICT_DEFAULT, 0);
	const int32_t bad[3] = {2, 5, 4};
	for (int i = 0; i < 3; i++) {
		int n_got;
		char want[128];
		cr_assert_eq(drain(s, 3, &bad[i], 1, &n_got), -EIO, "expert %d out of place was delivered", bad[i]);
		snprintf(want, sizeof want, "layer 3 expert %d: checksum mismatch at offset %d", bad[i], bad[i] * FX_REC);
		cr_assert(strstr(error_message(), want), "message: %s\nwanted: %s", error_message(), want);
	}
	int32_t good[3] = {1, 3, 6}, l0[1] = {4};
	step_check(s, &fx, 3, good, 3, false);
	step_check(s, &fx, 0, l0, 1, false);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, truncated_file_refused_at_open)
{
	struct store_fixture fx;
	fixture_make(&fx);
	cr_assert_eq(truncate(fx.paths[0][2], FX_REC * 20 + 100), 0);
	struct expert_store_options o = {.cache_bytes = 20 * FX_REC, .io_depth = 4};
	struct expert_store *s = NULL;
	error_clear();
	cr_assert_eq(expert_store_open(&s, fx.desc, FX_LAYERS, FX_PER_STEP, &o), -EINVAL);
	cr_assert_null(s);
	cr_assert(strstr(error_message(), fx.paths[0][2]) && strstr(error_message(), "truncated"), "%s",
		  error_message());
	store_fixture_free(&fx);
}

static void check_truncated_after_open(bool buffered)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 20, 8, buffered, EXPERT_EVICT_DEFAULT, 0);
	/* Expert 20 loses its second half, 21 and later vanish. */
	cr_assert_eq(truncate(fx.paths[0][2], FX_REC * 20 + 6000), 0);
	int32_t id = 20, n_got;
	cr_assert_eq(drain(s, 2, &id, 1, &n_got), -EIO);
	char want[700];
	snprintf(want, sizeof want, "layer 2 expert 20: unexpected end of file at offset %d in %s",
		 FX_REC * 20, fx.paths[0][2]);
	cr_assert(strstr(error_message(), want), "%s", error_message());
	id = 25;
	cr_assert_eq(drain(s, 2, &id, 1, &n_got), -EIO);
	cr_assert(strstr(error_message(), "layer 2 expert 25: unexpected end of file"), "%s",
		  error_message());
	int32_t ok[3] = {0, 10, 19};
	step_check(s, &fx, 2, ok, 3, false);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, truncated_after_open_direct)
{
	check_truncated_after_open(false);
}

Test(expert_store, truncated_after_open_buffered)
{
	check_truncated_after_open(true);
}

Test(expert_store, direct_refused_on_dev_shm)
{
	struct stat st;
	if (stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode))
		cr_skip_test("/dev/shm is missing");
	char dir[512] = "/dev/shm/colibri-test-XXXXXX";
	cr_assert(mkdtemp(dir));
	struct store_fixture fx;
	store_fixture_make_in(&fx, (const char *[]){dir}, 1, FX_EXPERTS, fx_records, FX_SEED);
	int fd = open(fx.paths[0][0], O_RDONLY | O_DIRECT);
	bool refused = fd < 0 && errno == EINVAL;
	if (fd >= 0)
		close(fd);
	struct expert_store *s = store_open(&fx, 20, 8, false, EXPERT_EVICT_DEFAULT, 0);
	cr_assert_eq(expert_store_stats(s)->o_direct, !refused);
	random_steps(s, &fx, 100, 21);
	expert_store_close(s);
	store_fixture_free(&fx);
	if (!refused)
		cr_skip_test("tmpfs accepts O_DIRECT on this kernel (Linux >= 6.6): the store ran with "
			     "O_DIRECT on /dev/shm, the refusal fallback was not exercised");
}

Test(expert_store, usage_counters)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 20, 4, false, EXPERT_EVICT_DEFAULT, 0);
	int32_t a[4] = {1, 2, 2, 3}, b[2] = {3, 4};
	step_check(s, &fx, 0, a, 4, false);
	step_check(s, &fx, 0, b, 2, false);
	cr_assert_eq(expert_store_prefetch(s, 0, (int32_t[]){9}, 1), 1);
	const uint32_t *u = expert_store_usage(s, 0);
	cr_assert_not_null(u);
	cr_assert_null(expert_store_usage(s, 1));
	uint32_t want[FX_EXPERTS] = {0, 1, 1, 2, 1};
	for (int e = 0; e < FX_EXPERTS; e++)
		cr_assert_eq(u[e], want[e], "expert %d: %u", e, u[e]);
	const struct expert_store_stats *st = expert_store_stats(s);
	cr_assert_eq(st->requests, 5);
	cr_assert_eq(st->layer_requests[0], 5);
	cr_assert_eq(st->layer_hits[0], 1);
	cr_assert_eq(st->steps, 2);
	cr_assert(st->step_s > 0 && st->disk_busy_s > 0 && st->disk_gbps > 0);
	expert_store_close(s);
	store_fixture_free(&fx);
}

/* expert_store_where follows each expert through its states, and
 * ram_hits counts the requests a resident frame served. */
Test(expert_store, where_and_ram_hits)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 20, 4, false, EXPERT_EVICT_DEFAULT, 0);
	uint8_t where[FX_EXPERTS];
	cr_assert_eq(expert_store_where(s, 0, where), FX_EXPERTS);
	for (int e = 0; e < FX_EXPERTS; e++)
		cr_assert_eq(where[e], EXPERT_ON_DISK, "expert %d before any request", e);
	step_check(s, &fx, 0, (int32_t[]){1, 2, 3}, 3, false);
	step_check(s, &fx, 0, (int32_t[]){3, 4}, 2, false);
	cr_assert_eq(expert_store_pin_set(s, (struct expert_pin[]){{0, 7}}, 1), 0);
	step_check(s, &fx, 0, (int32_t[]){7}, 1, false);
	cr_assert_eq(expert_store_prefetch(s, 0, (int32_t[]){9}, 1), 1);
	cr_assert_eq(expert_store_where(s, 0, where), FX_EXPERTS);
	for (int e = 0; e < FX_EXPERTS; e++) {
		int want = e == 7 ? EXPERT_PINNED : e >= 1 && e <= 4 ? EXPERT_CACHED : EXPERT_ON_DISK;
		if (e == 9)
			cr_assert(where[e] == EXPERT_LOADING || where[e] == EXPERT_CACHED, "prefetched: %d", where[e]);
		else
			cr_assert_eq(where[e], want, "expert %d: %d, not %d", e, where[e], want);
	}
	const uint32_t *h = expert_store_ram_hits(s, 0), *u = expert_store_usage(s, 0);
	cr_assert_not_null(h);
	cr_assert_null(expert_store_ram_hits(s, 1));
	cr_assert_eq(expert_store_where(s, 1, where), 0, "a layer without experts");
	cr_assert_eq(expert_store_n_experts(s, 0), FX_EXPERTS);
	cr_assert_eq(expert_store_n_experts(s, 1), 0);
	cr_assert_eq(expert_store_n_experts(s, 99), 0);
	for (int e = 0; e < FX_EXPERTS; e++)
		cr_assert_eq(h[e], e == 3 || e == 7 ? 1u : 0u, "expert %d: %u RAM hits", e, h[e]);
	cr_assert_eq(u[7], 1);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, bad_arguments)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 20, 4, false, EXPERT_EVICT_DEFAULT, 0);
	int32_t bad = FX_EXPERTS, ok = 1;
	error_clear();
	cr_assert_eq(expert_store_request(s, 1, &ok, 1), -EINVAL, "layer 1 has no experts");
	cr_assert_eq(expert_store_request(s, 0, &bad, 1), -EINVAL);
	cr_assert_eq(expert_store_request(s, FX_LAYERS, &ok, 1), -EINVAL);
	cr_assert_eq(expert_store_prefetch(s, 0, &bad, 1), -EINVAL);
	cr_assert_eq(expert_store_request(s, 0, &ok, 0), 0);
	int32_t e;
	const void *rec;
	cr_assert_eq(expert_store_next(s, &e, &rec), 0);
	expert_store_release(s, 0, 31); /* never delivered: ignored */
	expert_store_close(s);

	struct expert_store_options o = {.cache_bytes = 7 * FX_REC, .io_depth = 4};
	error_clear();
	cr_assert_eq(expert_store_open(&s, fx.desc, FX_LAYERS, FX_PER_STEP, &o), -ENOMEM);
	cr_assert(strstr(error_message(), "minimum"), "%s", error_message());
	store_fixture_free(&fx);
}

/* ---- the pinned set ---- */

static void check_pinned_survive(bool pread)
{
	if (pread)
		setenv("COLIBRI_NO_IO_URING", "1", 1);
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 20, 8, false, EXPERT_EVICT_DEFAULT, 0);
	const struct expert_store_stats *st = expert_store_stats(s);
	const struct expert_pin pins[7] = {{2, 0}, {2, 1}, {2, 2}, {3, 4}, {3, 5}, {0, 7}, {2, 1}};
	error_clear();
	cr_assert_eq(expert_store_pin_set(s, pins, 7), 0, "%s", error_message());
	cr_assert_eq(st->n_pinned, 6, "a duplicate counts once");
	cr_assert_eq(expert_store_capacity(s, 2), 14);
	cr_assert_eq(st->bytes_read, 6 * FX_REC, "loaded once: %" PRIu64, st->bytes_read);
	cr_assert_eq(st->requests, 0, "pinning is not a request");

	const void *recs[FX_EXPERTS] = {0}, *again[FX_EXPERTS] = {0};
	int32_t ids[3] = {0, 1, 2};
	step_recs(s, &fx, 2, ids, 3, recs);
	cr_assert_eq(st->pinned_hits, 3);
	cr_assert_eq(st->layer_pinned_hits[2], 3);
	cr_assert_eq(st->hits + st->misses + st->joins, 0);
	/* Extra releases never drop a pin of the set. */
	for (int i = 0; i < 5; i++)
		expert_store_release(s, 2, 1);

	random_steps(s, &fx, 300, 77); /* 96 experts through 14 free frames */
	uint64_t misses = st->misses, bytes = st->bytes_read, pinned = st->pinned_hits;
	step_recs(s, &fx, 2, ids, 3, again);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(again[i], recs[i], "expert %d moved: it was evicted", i);
	int32_t l3[2] = {4, 5};
	step_recs(s, &fx, 3, l3, 2, NULL);
	cr_assert_eq(st->misses, misses);
	cr_assert_eq(st->bytes_read, bytes);
	cr_assert_eq(st->pinned_hits, pinned + 5);
	cr_assert_eq(st->requests, st->pinned_hits + st->hits + st->joins + st->misses);
	cr_assert_eq(expert_store_capacity(s, 0), 14);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, pinned_set_survives_pressure)
{
	check_pinned_survive(false);
}

Test(expert_store, pinned_set_survives_pressure_pread)
{
	check_pinned_survive(true);
}

/* Requests 24 other experts of layer 2 in steps of 8, so that with LRU
 * every unpinned frame is reused. */
static void flush_layer2(struct expert_store *s, const struct store_fixture *fx)
{
	for (int32_t first = 8; first < 32; first += 8) {
		int32_t ids[8];
		for (int i = 0; i < 8; i++)
			ids[i] = first + i;
		step_recs(s, fx, 2, ids, 8, NULL);
	}
}

Test(expert_store, repin_swaps)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 20, 8, false, EXPERT_EVICT_LRU, 0);
	const struct expert_store_stats *st = expert_store_stats(s);
	const struct expert_pin a[2] = {{2, 0}, {2, 1}}, add[2] = {{2, 3}, {2, 1}};
	const struct expert_pin drop[3] = {{2, 0}, {2, 1}, {2, 9}};
	cr_assert_eq(expert_store_pin_set(s, a, 2), 0);
	/* Drop 0, add 3; 1 is in both lists and stays; 9 is not pinned: ignored. */
	error_clear();
	cr_assert_eq(expert_store_repin(s, add, 2, drop, 3), 0, "%s", error_message());
	cr_assert_eq(st->n_pinned, 2);
	cr_assert_eq(expert_store_capacity(s, 2), 18);
	int32_t zero = 0, one = 1, three = 3;
	step_recs(s, &fx, 2, &zero, 1, NULL);
	cr_assert_eq(st->hits, 1, "dropped: an ordinary cached frame");
	step_recs(s, &fx, 2, &three, 1, NULL);
	step_recs(s, &fx, 2, &one, 1, NULL);
	cr_assert_eq(st->pinned_hits, 2);
	flush_layer2(s, &fx);
	uint64_t misses = st->misses;
	step_recs(s, &fx, 2, &zero, 1, NULL);
	cr_assert_eq(st->misses, misses + 1, "expert 0 was evicted once dropped");
	step_recs(s, &fx, 2, &three, 1, NULL);
	step_recs(s, &fx, 2, &one, 1, NULL);
	cr_assert_eq(st->pinned_hits, 4);

	/* pin_set replaces the whole set. */
	const struct expert_pin b[1] = {{3, 6}};
	cr_assert_eq(expert_store_pin_set(s, b, 1), 0);
	cr_assert_eq(st->n_pinned, 1);
	cr_assert_eq(expert_store_capacity(s, 3), 19);
	flush_layer2(s, &fx);
	misses = st->misses;
	step_recs(s, &fx, 2, &one, 1, NULL);
	cr_assert_eq(st->misses, misses + 1, "expert 1 left the set");
	cr_assert_eq(expert_store_pin_set(s, NULL, 0), 0);
	cr_assert_eq(st->n_pinned, 0);
	cr_assert_eq(expert_store_capacity(s, 2), 20);
	cr_assert_eq(expert_store_capacity(s, 1), 0, "no experts, no frames");
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, pin_set_too_large_refused)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 20, 8, false, EXPERT_EVICT_DEFAULT, 0);
	const struct expert_store_stats *st = expert_store_stats(s);
	struct expert_pin pins[13];
	for (int i = 0; i < 13; i++)
		pins[i] = (struct expert_pin){2, i};
	error_clear();
	cr_assert_eq(expert_store_pin_set(s, pins, 13), -ENOMEM);
	cr_assert(strstr(error_message(), "a pinned set of 13 experts leaves 7 of 20 expert frames, fewer than "
				      "the 8 one step pins"), "%s", error_message());
	cr_assert_eq(st->n_pinned, 0, "nothing changed");
	cr_assert_eq(st->bytes_read, 0);
	cr_assert_eq(expert_store_capacity(s, 2), 20);
	error_clear();
	cr_assert_eq(expert_store_pin_set(s, pins, 12), 0, "%s", error_message());
	cr_assert_eq(expert_store_capacity(s, 0), 8);
	const struct expert_pin more = {3, 0}, less = {2, 0};
	error_clear();
	cr_assert_eq(expert_store_repin(s, &more, 1, NULL, 0), -ENOMEM);
	cr_assert_eq(st->n_pinned, 12);
	cr_assert_eq(expert_store_repin(s, &more, 1, &less, 1), 0, "a swap keeps the size");
	cr_assert_eq(st->n_pinned, 12);
	/* The frames left still take a full step of misses. */
	int32_t ids[8] = {20, 21, 22, 23, 24, 25, 26, 27};
	step_check(s, &fx, 2, ids, 8, false);
	step_check(s, &fx, 0, ids, 8, false);

	const struct expert_pin bad_layer = {1, 0}, bad_id = {2, FX_EXPERTS};
	error_clear();
	cr_assert_eq(expert_store_pin_set(s, &bad_layer, 1), -EINVAL);
	cr_assert_eq(expert_store_repin(s, NULL, 0, &bad_id, 1), -EINVAL);
	cr_assert_eq(st->n_pinned, 12);
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, pin_set_read_failure_undone)
{
	struct store_fixture fx;
	fixture_make(&fx);
	store_fixture_flip(fx.paths[0][3], 5 * 8192 + 10, 0x5a);
	struct expert_store *s = store_open(&fx, 20, 8, false, EXPERT_EVICT_DEFAULT, 0);
	const struct expert_store_stats *st = expert_store_stats(s);
	const struct expert_pin pins[3] = {{3, 4}, {3, 5}, {2, 9}};
	error_clear();
	cr_assert_eq(expert_store_pin_set(s, pins, 3), -EIO);
	cr_assert(strstr(error_message(), "layer 3 expert 5: checksum mismatch at offset 40960"), "%s",
		  error_message());
	cr_assert_eq(st->n_pinned, 0);
	cr_assert_eq(expert_store_capacity(s, 3), 20);
	int32_t four = 4;
	step_check(s, &fx, 3, &four, 1, false);
	cr_assert_eq(st->hits, 1, "loaded, and kept as an ordinary cached frame");
	expert_store_close(s);
	store_fixture_free(&fx);
}

/* ---- prefetch accounting ---- */

Test(expert_store, prefetch_used_and_wasted)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, FX_PER_STEP, 8, false, EXPERT_EVICT_DEFAULT, 8);
	const struct expert_store_stats *st = expert_store_stats(s);
	int32_t pre[4] = {20, 21, 22, 23}, used[2] = {20, 21}, other[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	cr_assert_eq(expert_store_prefetch(s, 2, pre, 4), 4);
	step_check(s, &fx, 2, used, 2, false);
	cr_assert_eq(st->prefetch_issued, 4);
	cr_assert_eq(st->prefetch_used, 2);
	cr_assert_eq(st->prefetch_wasted, 0);
	step_check(s, &fx, 2, other, 8, false); /* every frame: 22 and 23 go unused */
	cr_assert_eq(st->prefetch_wasted, 2);
	cr_assert_eq(st->prefetch_wasted_bytes, 2 * FX_REC);
	cr_assert_eq(st->prefetch_issued_bytes, 4 * FX_REC);
	cr_assert_eq(st->prefetch_used_bytes, 2 * FX_REC);
	step_check(s, &fx, 2, used, 2, false);
	cr_assert_eq(st->prefetch_used, 2, "a request after eviction is a miss, not a use");
	expert_store_close(s);
	store_fixture_free(&fx);
}

Test(expert_store, prefetch_never_takes_pinned_set)
{
	struct store_fixture fx;
	fixture_make(&fx);
	struct expert_store *s = store_open(&fx, 20, 8, false, EXPERT_EVICT_DEFAULT, 8);
	const struct expert_store_stats *st = expert_store_stats(s);
	struct expert_pin pins[12];
	for (int i = 0; i < 12; i++)
		pins[i] = (struct expert_pin){3, i};
	cr_assert_eq(expert_store_pin_set(s, pins, 12), 0);
	int32_t held[8] = {0, 1, 2, 3, 4, 5, 6, 7};
	step_check(s, &fx, 2, held, 8, true); /* the other 8 frames pinned by a request */
	int32_t more[4] = {20, 21, 22, 23};
	cr_assert_eq(expert_store_prefetch(s, 2, more, 4), 0);
	for (int i = 0; i < 8; i++)
		expert_store_release(s, 2, held[i]);
	int32_t many[12] = {12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23};
	cr_assert_eq(expert_store_prefetch(s, 3, many, 12), 8, "bounded by prefetch_depth and free frames");
	int32_t l3[8] = {0, 2, 4, 6, 8, 9, 10, 11};
	uint64_t pinned = st->pinned_hits, bytes = st->bytes_read;
	step_check(s, &fx, 3, l3, 8, false);
	cr_assert_eq(st->pinned_hits, pinned + 8);
	cr_assert_eq(st->n_pinned, 12);
	while (st->reads_queued + st->reads_in_kernel > 0)
		step_check(s, &fx, 3, l3, 1, false); /* reaps the prefetches */
	cr_assert_eq(st->bytes_read, bytes + 8 * FX_REC, "only the prefetches were read");
	expert_store_close(s);
	store_fixture_free(&fx);
}
