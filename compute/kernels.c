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
 */
#include "compute/kernels.h"

#include "compute/kernels_internal.h"
#include "compute/threadpool.h"

#define ROWS_PER_TASK_MAX 64
#define ROWS_PER_TASK_MIN 8
#define TASKS_PER_THREAD 4
#define TOKEN_BLOCK_BYTES (256 * 1024)

const struct kernels_ops *kernels_ops_for(enum cpu_simd level)
{
	switch (level) {
	case CPU_SIMD_AVX512:
		return &kernels_ops_avx512;
	case CPU_SIMD_AVX2:
		return &kernels_ops_avx2;
	case CPU_SIMD_SCALAR:
		break;
	}
	return &kernels_ops_scalar;
}

const struct kernels_ops *kernels_ops_get(void)
{
	return kernels_ops_for(cpu_simd_level());
}

struct rows_job {
	kernel_rows_fn fn;
	float *out;
	const struct qmatrix *m;
	const float *x;
	int64_t n;
	int64_t rows_per_task;
	int64_t tokens_per_block;
};

static void rows_job_run(void *ctx, int task, int thread)
{
	const struct rows_job *job = ctx;
	int64_t begin = (int64_t)task * job->rows_per_task;
	int64_t end = begin + job->rows_per_task;
	if (end > job->m->rows)
		end = job->m->rows;
	for (int64_t t = 0; t < job->n; t += job->tokens_per_block) {
		int64_t nt = job->n - t < job->tokens_per_block ? job->n - t : job->tokens_per_block;
		job->fn(job->out + t * job->m->rows, job->m->rows, job->m,
			job->x + t * job->m->cols, nt, begin, end);
	}
}

static void rows_job_dispatch(struct threadpool *pool, float *out, const struct qmatrix *m,
			      const float *x, int64_t n)
{
	struct rows_job job = {
		.fn = kernels_ops_get()->rows[m->type],
		.out = out,
		.m = m,
		.x = x,
		.n = n,
	};
	job.tokens_per_block = TOKEN_BLOCK_BYTES / (m->cols * (int64_t)sizeof(float));
	if (job.tokens_per_block < 4)
		job.tokens_per_block = 4;
	int threads = pool ? threadpool_size(pool) : 1;
	int64_t per = m->rows / ((int64_t)threads * TASKS_PER_THREAD);
	if (per > ROWS_PER_TASK_MAX)
		per = ROWS_PER_TASK_MAX;
	if (per < ROWS_PER_TASK_MIN)
		per = ROWS_PER_TASK_MIN;
	job.rows_per_task = per;
	int n_tasks = (int)((m->rows + per - 1) / per);
	if (!pool) {
		for (int i = 0; i < n_tasks; i++)
			rows_job_run(&job, i, 0);
		return;
	}
	threadpool_run(pool, rows_job_run, &job, n_tasks);
}

void matvec(struct threadpool *pool, float *out, const struct qmatrix *m, const float *x)
{
	rows_job_dispatch(pool, out, m, x, 1);
}

void matmul(struct threadpool *pool, float *out, const struct qmatrix *m,
	    const float *x, int64_t n)
{
	if (n > 0)
		rows_job_dispatch(pool, out, m, x, n);
}

float dot_f32(const float *a, const float *b, int64_t n)
{
	return kernels_ops_get()->dot_f32(a, b, n);
}

void axpy_f32(float *out, float a, const float *x, int64_t n)
{
	kernels_ops_get()->axpy_f32(out, a, x, n);
}
