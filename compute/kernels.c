/*
 * kernels — dispatch of the SIMD level and the parallel matvec / matmul.
 *
 * matvec and matmul split the output rows into contiguous blocks, one task
 * per block, and each task calls the level's kernel_rows_fn. A row's value
 * is computed whole by one task (see kernels_internal.h), so the thread
 * count and the block size change speed only, never bits.
 *
 * matmul blocking: a task owns at most ROWS_PER_TASK_MAX rows; it walks the
 * tokens in blocks small enough that their activations stay in L2, and for
 * each block runs its rows over those tokens. A task's weights come from
 * memory once and stay in L2 across token blocks; activations are re-read
 * once per row block. Known limit: a long prefill re-reads its activations
 * rows / 64 times, which a real GEMM blocking would avoid.
 *
 * With int8 or int16 activations the caller's thread quantizes the tokens
 * once, into a buffer of its own that grows to the largest call and is freed
 * when the thread ends, and the tasks read them from there. A container's
 * arithmetic never changes for want of that buffer: the process stops.
 */
#include "compute/kernels.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kernels_internal.h"
#include "compute/threadpool.h"

#define ROWS_PER_TASK_MAX 64
#define ROWS_PER_TASK_MIN 8
#define TASKS_PER_THREAD 4
#define TOKEN_BLOCK_BYTES (256 * 1024)
/* The most tokens a kernel takes at once (the AVX512-VNNI ones); token
 * blocks are whole groups of it. */
#define TOKEN_GROUP 8

/* The VNNI levels are their base level's table with the integer dot
 * products replaced (kernels_vnni_avx2 / kernels_vnni_avx512). */
static struct kernels_ops ops_avx2_vnni, ops_avx512_vnni;
static pthread_once_t ops_vnni_once = PTHREAD_ONCE_INIT;

static void ops_vnni_make(void)
{
	ops_avx2_vnni = kernels_ops_avx2;
	ops_avx2_vnni.name = "avxvnni";
	kernels_vnni_avx2(&ops_avx2_vnni);
	ops_avx512_vnni = kernels_ops_avx512;
	ops_avx512_vnni.name = "avx512vnni";
	kernels_vnni_avx512(&ops_avx512_vnni);
}

const struct kernels_ops *kernels_ops_for(enum cpu_simd level)
{
	switch (level) {
	case CPU_SIMD_AVX512_VNNI:
		pthread_once(&ops_vnni_once, ops_vnni_make);
		return &ops_avx512_vnni;
	case CPU_SIMD_AVX512:
		return &kernels_ops_avx512;
	case CPU_SIMD_AVX2_VNNI:
		pthread_once(&ops_vnni_once, ops_vnni_make);
		return &ops_avx2_vnni;
	case CPU_SIMD_AVX2:
		return &kernels_ops_avx2;
	case CPU_SIMD_SCALAR:
	case CPU_SIMD_COUNT:
		break;
	}
	return &kernels_ops_scalar;
}

/* NULL until kernels_set_level: cpu_simd_level()'s table. */
static _Atomic(const struct kernels_ops *) ops_forced;

int kernels_set_level(enum cpu_simd level)
{
	if ((unsigned)level >= CPU_SIMD_COUNT || !cpu_simd_available(level))
		return -ENOTSUP;
	atomic_store(&ops_forced, kernels_ops_for(level));
	return 0;
}

const struct kernels_ops *kernels_ops_get(void)
{
	const struct kernels_ops *ops = atomic_load_explicit(&ops_forced, memory_order_relaxed);
	return ops ? ops : kernels_ops_for(cpu_simd_level());
}

/* What the int8 weights (low byte) and the int4, mxfp4 and GGML block
 * weights (high byte) meet. f32, bf16 and f16 meet f32 activations
 * whatever the setting: their rows_q8 is NULL. */
enum { ACT_F32 = 0, ACT_Q8 = 1, ACT_Q16 = 2 };
#define ACT_MODE(int8, int4) ((unsigned)(int8) | (unsigned)(int4) << 8)
static atomic_uint act_mode = ACT_MODE(ACT_Q16, ACT_Q8);

static unsigned act_of(enum quant_type t)
{
	unsigned m = atomic_load(&act_mode);
	switch (t) {
	case QUANT_INT8:
		return m & 0xff;
	case QUANT_INT4:
	case QUANT_MXFP4:
	case QUANT_Q8_0:
	case QUANT_Q4_0:
	case QUANT_Q4_K:
	case QUANT_Q5_K:
	case QUANT_Q6_K:
		return m >> 8;
	case QUANT_F32:
	case QUANT_BF16:
	case QUANT_F16:
		break;
	}
	return ACT_F32;
}

int kernels_set_activations(const char *name)
{
	if (!strcmp(name, "auto"))
		atomic_store(&act_mode, ACT_MODE(ACT_Q16, ACT_Q8));
	else if (!strcmp(name, "f32"))
		atomic_store(&act_mode, ACT_MODE(ACT_F32, ACT_F32));
	else if (!strcmp(name, "int8"))
		atomic_store(&act_mode, ACT_MODE(ACT_Q8, ACT_Q8));
	else
		return -EINVAL;
	return 0;
}

const char *kernels_activations_name(void)
{
	unsigned m = atomic_load(&act_mode);
	return m == ACT_MODE(ACT_Q16, ACT_Q8) ? "auto" : m == ACT_MODE(ACT_Q8, ACT_Q8) ? "int8" : "f32";
}

const char *kernels_ops_name(void)
{
	return kernels_ops_get()->name;
}

void act_q8_quantize(const struct kernels_ops *ops, struct act_q8 *a, int8_t *q, float *d,
		     int32_t *sum8, const float *x, int64_t n, int64_t cols)
{
	int64_t pairs = (cols + 63) / 64, runs = cols / 32;
	for (int64_t t = 0; t < n; t++)
		for (int64_t p = 0; p < pairs; p++) {
			int8_t *qp = q + (t * pairs + p) * 64;
			float *dp = d + (t * pairs + p) * 8;
			int32_t *sp = sum8 + (t * pairs + p) * 8;
			for (int h = 0; h < 2; h++) {
				int8_t *lo = qp + 16 * h, *hi = qp + 32 + 16 * h;
				float dk = 0.0f;
				if (2 * p + h < runs)
					dk = ops->act_q8_run(lo, hi, x + t * cols + 64 * p + 32 * h);
				else {
					memset(lo, 0, 16);
					memset(hi, 0, 16);
				}
				for (int l = 0; l < 4; l++) {
					dp[4 * h + l] = dk;
					sp[4 * h + l] = 8 * (lo[4 * l] + lo[4 * l + 1] + lo[4 * l + 2] + lo[4 * l + 3] +
							     hi[4 * l] + hi[4 * l + 1] + hi[4 * l + 2] + hi[4 * l + 3]);
				}
			}
		}
	*a = (struct act_q8){ .q = q, .d = d, .sum8 = sum8, .pairs = pairs };
}

/* The calling thread's buffer for quantized activations. */
struct act_buffer {
	void *p;
	size_t cap;
};

static pthread_key_t act_key;
static pthread_once_t act_once = PTHREAD_ONCE_INIT;
static int act_key_ok;

static void act_buffer_free(void *v)
{
	struct act_buffer *b = v;
	free(b->p);
	free(b);
}

static void act_key_make(void)
{
	act_key_ok = pthread_key_create(&act_key, act_buffer_free) == 0;
}

/* A matvec has no way to report an error, and taking another arithmetic
 * instead would make the logits depend on memory: without the few MiB of
 * the activation buffer the process stops, saying so. */
static _Noreturn void act_buffer_fail(size_t need)
{
	fprintf(stderr, "colibri: out of memory: %zu bytes for quantized activations\n", need);
	abort();
}

/* The calling thread's buffer, at least `need` bytes (aligned for floats). */
static void *act_buffer_get(size_t need)
{
	pthread_once(&act_once, act_key_make);
	if (!act_key_ok)
		act_buffer_fail(need);
	struct act_buffer *b = pthread_getspecific(act_key);
	if (!b) {
		b = calloc(1, sizeof(*b));
		if (!b || pthread_setspecific(act_key, b) != 0)
			act_buffer_fail(need);
	}
	if (need > b->cap) {
		void *p = malloc(need);
		if (!p)
			act_buffer_fail(need);
		free(b->p);
		b->p = p;
		b->cap = need;
	}
	return b->p;
}

/* n tokens of cols activations quantized into the thread's buffer. */
static void act_q8_prepare(const struct kernels_ops *ops, struct act_q8 *a, const float *x, int64_t n,
			   int64_t cols)
{
	size_t q_bytes = (size_t)act_q8_bytes(n, cols), lanes = (size_t)act_q8_lanes(n, cols);
	int32_t *sum8 = act_buffer_get(lanes * (sizeof(float) + sizeof(int32_t)) + q_bytes);
	float *d = (float *)(sum8 + lanes);
	act_q8_quantize(ops, a, (int8_t *)(d + lanes), d, sum8, x, n, cols);
}

void act_q16_quantize(const struct kernels_ops *ops, struct act_q16 *a, int16_t *q, float *d,
		      const float *x, int64_t n, int64_t cols)
{
	for (int64_t k = 0; k < n * cols / 32; k++)
		d[k] = ops->act_q16_run(q + 32 * k, x + 32 * k);
	*a = (struct act_q16){ .q = q, .d = d, .cols = cols };
}

static void act_q16_prepare(const struct kernels_ops *ops, struct act_q16 *a, const float *x, int64_t n,
			    int64_t cols)
{
	size_t runs = (size_t)(n * cols / 32);
	float *d = act_buffer_get(runs * sizeof(float) + (size_t)(n * cols) * sizeof(int16_t));
	act_q16_quantize(ops, a, (int16_t *)(d + runs), d, x, n, cols);
}

struct rows_job {
	kernel_rows_fn fn;
	kernel_rows_q8_fn fn_q8;      /* set: int8 activations in xq */
	kernel_rows_q16_fn fn_q16;    /* set: int16 activations in xq16 */
	float *out;
	const struct qmatrix *m;
	float *out2;                  /* matmul_pair: tasks from first2 on take m2 into out2 */
	const struct qmatrix *m2;
	int first2;
	const float *x;
	struct act_q8 xq;
	struct act_q16 xq16;
	int64_t n;
	int64_t rows_per_task;
	int64_t tokens_per_block;
};

static void rows_job_run(void *ctx, int task, int thread)
{
	const struct rows_job *job = ctx;
	const struct qmatrix *m = job->m;
	float *out_m = job->out;
	if (job->m2 && task >= job->first2) {
		m = job->m2;
		out_m = job->out2;
		task -= job->first2;
	}
	int64_t begin = (int64_t)task * job->rows_per_task;
	int64_t end = begin + job->rows_per_task;
	int64_t cols = m->cols;
	if (end > m->rows)
		end = m->rows;
	for (int64_t t = 0; t < job->n; t += job->tokens_per_block) {
		int64_t nt = job->n - t < job->tokens_per_block ? job->n - t : job->tokens_per_block;
		float *out = out_m + t * m->rows;
		if (job->fn_q8) {
			int64_t pairs = job->xq.pairs;
			struct act_q8 xt = {
				.q = job->xq.q + t * pairs * 64,
				.d = job->xq.d + t * pairs * 8,
				.sum8 = job->xq.sum8 + t * pairs * 8,
				.pairs = pairs,
			};
			job->fn_q8(out, m->rows, m, &xt, nt, begin, end);
		} else if (job->fn_q16) {
			struct act_q16 xt = { .q = job->xq16.q + t * cols, .d = job->xq16.d + t * (cols / 32),
					      .cols = cols };
			job->fn_q16(out, m->rows, m, &xt, nt, begin, end);
		} else {
			job->fn(out, m->rows, m, job->x + t * cols, nt, begin, end);
		}
	}
}

/* m2 (or NULL): a second matrix of m's type and width, into out2, in the
 * same pass over the pool and on the same quantized activations. */
static void rows_job_dispatch(struct threadpool *pool, float *out, const struct qmatrix *m,
			      float *out2, const struct qmatrix *m2, const float *x, int64_t n)
{
	const struct kernels_ops *ops = kernels_ops_get();
	struct rows_job job = {
		.fn = ops->rows[m->type],
		.out = out,
		.m = m,
		.out2 = out2,
		.m2 = m2,
		.x = x,
		.n = n,
	};
	unsigned act = act_of(m->type);
	if (act == ACT_Q8) {
		act_q8_prepare(ops, &job.xq, x, n, m->cols);
		job.fn_q8 = ops->rows_q8[m->type];
	} else if (act == ACT_Q16) {
		act_q16_prepare(ops, &job.xq16, x, n, m->cols);
		job.fn_q16 = ops->rows_q16;
	}
	/* A token block's activations as the kernels read them: f32, int8
	 * with a d and a sum8 per 8 inputs (2 bytes an input), or int16 with
	 * a d per 32; whole groups, so that no block ends in a few tokens that
	 * take the one-token path (7168 inputs gave blocks of 9 f32 tokens:
	 * one-thread prefill of 512 tokens on 512x7168 int8 50 -> 54 Gw/s,
	 * mxfp4 55 -> 64, 256x2880 int8 48 -> 53). */
	int64_t token_bytes = act == ACT_Q8 ? 2 * m->cols : act == ACT_Q16 ? 2 * m->cols + m->cols / 8
				: m->cols * (int64_t)sizeof(float);
	job.tokens_per_block = TOKEN_BLOCK_BYTES / token_bytes;
	if (job.tokens_per_block >= TOKEN_GROUP)
		job.tokens_per_block -= job.tokens_per_block % TOKEN_GROUP;
	else if (job.tokens_per_block < 4)
		job.tokens_per_block = 4;
	int threads = pool ? threadpool_size(pool) : 1;
	int64_t rows = m->rows + (m2 ? m2->rows : 0);
	int64_t per = rows / ((int64_t)threads * TASKS_PER_THREAD);
	if (per > ROWS_PER_TASK_MAX)
		per = ROWS_PER_TASK_MAX;
	if (per < ROWS_PER_TASK_MIN)
		per = ROWS_PER_TASK_MIN;
	job.rows_per_task = per;
	int n_tasks = (int)((m->rows + per - 1) / per);
	job.first2 = n_tasks;
	if (m2)
		n_tasks += (int)((m2->rows + per - 1) / per);
	if (!pool) {
		for (int i = 0; i < n_tasks; i++)
			rows_job_run(&job, i, 0);
		return;
	}
	threadpool_run(pool, rows_job_run, &job, n_tasks);
}

void matvec(struct threadpool *pool, float *out, const struct qmatrix *m, const float *x)
{
	rows_job_dispatch(pool, out, m, NULL, NULL, x, 1);
}

void matmul(struct threadpool *pool, float *out, const struct qmatrix *m,
	    const float *x, int64_t n)
{
	if (n > 0)
		rows_job_dispatch(pool, out, m, NULL, NULL, x, n);
}

void matmul_pair(struct threadpool *pool, float *out_a, const struct qmatrix *a, float *out_b,
		 const struct qmatrix *b, const float *x, int64_t n)
{
	if (n <= 0)
		return;
	if (a->type != b->type || a->cols != b->cols || a->group != b->group) {
		rows_job_dispatch(pool, out_a, a, NULL, NULL, x, n);
		rows_job_dispatch(pool, out_b, b, NULL, NULL, x, n);
		return;
	}
	rows_job_dispatch(pool, out_a, a, out_b, b, x, n);
}

float dot_f32(const float *a, const float *b, int64_t n)
{
	return kernels_ops_get()->dot_f32(a, b, n);
}

void axpy_f32(float *out, float a, const float *x, int64_t n)
{
	kernels_ops_get()->axpy_f32(out, a, x, n);
}
