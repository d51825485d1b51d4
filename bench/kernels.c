/*
 * kernels — matvec throughput of each weight format against the memory
 * bandwidth measured in the same run (planner/membw.c, what `plan` uses).
 *
 *   make bench-kernels && build/bench/kernels [--seconds S] [--mib M] [--tokens N]
 *
 * For each format (f32, bf16, int8, int4, mxfp4, f16, and the GGML block types
 * q8_0, q4_0, q4_k, q5_k, q6_k, filled with random blocks whose halves are
 * finite: their kernels' speed does not depend on the values) it quantizes a set of matrices of
 * the OLMoE / Qwen3 expert shapes (rows x cols = 1024 x 2048 and 2048 x 1024)
 * whose stored bytes total M MiB (256 by default, far above any L3), then runs
 * matvec over them in turn, at 1 thread and at all threads, for about S
 * seconds each (0.5); --l2 runs one small matrix that stays in L2 instead
 * (the compute rate alone). GB/s counts the stored bytes (data and scales) read per
 * second; the ratio is that over the bandwidth measured with the same thread
 * count just before. With activation quantization on (the default, auto:
 * int4, mxfp4 and the GGML block types q8_0 .. q6_k take the int8
 * dot-product path, int8 the int16 one; `--activations int8` puts int8 on
 * the int8 path too) and `--activations f32` measures the f32 path (f32,
 * bf16 and f16 are always there). COLIBRI_SIMD=avx512|avxvnni|avx2|scalar
 * measures a lower level; the first line names the level that ran and the
 * CPU's flags. Gw/s is billions of weights a second, which compares formats
 * of different widths. --tokens N runs matmul over N tokens instead (a
 * prefill: N = 512), where Gw/s counts weights times tokens, the rate that
 * bounds prompt processing, and GB/s the stored bytes once per call.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "compute/cpu.h"
#include "compute/kernels.h"
#include "compute/kernels_internal.h"
#include "compute/quant.h"
#include "compute/threadpool.h"
#include "planner/membw.h"

struct bench_set {
	struct qmatrix *m;
	int n;
	uint64_t bytes;
	void *arena;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float rng_float(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (float)((rng_state >> 40) & 0xffffff) / (float)0x1000000 - 0.5f;
}

/* Random blocks of a GGML block type with every d / dmin a random half in
 * [0.001, 0.1) (normal numbers, as real files hold). */
static void blocks_fill(uint8_t *p, enum quant_type type, int64_t rows, int64_t cols, int32_t qk)
{
	uint64_t bytes = quant_data_bytes(type, rows, cols), bs = quant_data_bytes(type, 1, qk);
	for (uint64_t i = 0; i < bytes; i++)
		p[i] = (uint8_t)(rng_float() * 255.0f + 128.0f);
	for (uint64_t k = 0; k < bytes / bs; k++) {
		uint8_t *b = p + k * bs;
		int n = type == QUANT_Q4_K || type == QUANT_Q5_K ? 2 : 1;
		for (int h = 0; h < n; h++) {
			uint16_t v = f32_to_f16(0.0505f + 0.099f * rng_float());
			memcpy(type == QUANT_Q6_K ? b + 208 : b + 2 * h, &v, 2);
		}
	}
}

/* l2: one matrix of 128 x 2048, which stays in L2: the kernel's compute
 * rate without memory. */
static int set_build(struct bench_set *s, enum quant_type type, uint64_t target, int l2)
{
	static const int64_t shapes[2][2] = { { 1024, 2048 }, { 2048, 1024 } };
	static const int64_t small[2][2] = { { 128, 2048 }, { 128, 2048 } };
	const int64_t (*sh_of)[2] = l2 ? small : shapes;
	int32_t group = type == QUANT_INT8 || type == QUANT_INT4 ? QUANT_GROUP_DEFAULT : 0;
	uint64_t per = quant_matrix_bytes(type, sh_of[0][0], sh_of[0][1], group);
	s->n = l2 ? 1 : (int)(target / per) + 1;
	s->m = calloc((size_t)s->n, sizeof(*s->m));
	s->arena = malloc((size_t)per * (size_t)s->n);
	float *src = malloc(1024 * 2048 * sizeof(float));
	if (!s->m || !s->arena || !src) {
		free(src);
		return -ENOMEM;
	}
	for (int64_t i = 0; i < 1024 * 2048; i++)
		src[i] = rng_float();
	s->bytes = 0;
	for (int i = 0; i < s->n; i++) {
		const int64_t *sh = sh_of[i % 2];
		uint8_t *base = (uint8_t *)s->arena + (uint64_t)i * per;
		if (quant_type_quantizable(type)) {
			quant_matrix_quantize(base, src, type, sh[0], sh[1], group);
			quant_matrix_view(&s->m[i], base, type, sh[0], sh[1], group);
		} else {
			quant_matrix_view(&s->m[i], base, type, sh[0], sh[1], group);
			blocks_fill(base, type, sh[0], sh[1], s->m[i].group);
		}
		s->bytes += per;
	}
	free(src);
	return 0;
}

/* Runs matvec (tokens 1) or matmul over `tokens` tokens over the set until
 * `seconds` pass; GB/s of stored bytes, and billions of weights times
 * tokens a second into *gw. */
static double set_run(const struct bench_set *s, struct threadpool *pool, double seconds,
		      const float *x, float *y, int64_t tokens, double *gw)
{
	double t0 = clock_now_s(), t;
	uint64_t bytes = 0, weights = 0;
	int i = 0;
	do {
		if (tokens == 1)
			matvec(pool, y, &s->m[i], x);
		else
			matmul(pool, y, &s->m[i], x, tokens);
		bytes += quant_matrix_bytes(s->m[i].type, s->m[i].rows, s->m[i].cols, s->m[i].group);
		weights += (uint64_t)(s->m[i].rows * s->m[i].cols * tokens);
		i = (i + 1) % s->n;
		t = clock_now_s();
	} while (t - t0 < seconds);
	*gw = (double)weights / (t - t0) / 1e9;
	return (double)bytes / (t - t0) / 1e9;
}

/* What ran: the level and the CPU flags it was chosen from. */
static void print_cpu(void)
{
	struct cpu_features f;
	cpu_features_detect(&f);
	const struct {
		const char *name;
		bool on;
	} flags[] = {
		{ "avx2", f.avx2 },	    { "fma", f.fma },		{ "f16c", f.f16c },
		{ "avx512f", f.avx512f },   { "avx512bw", f.avx512bw }, { "avx512vl", f.avx512vl },
		{ "avx512dq", f.avx512dq }, { "avx512vnni", f.avx512vnni }, { "avx512bf16", f.avx512bf16 },
		{ "avxvnni", f.avxvnni },
	};
	printf("cpu: best level %s, flags", cpu_simd_name(cpu_simd_supported()));
	for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
		if (flags[i].on)
			printf(" %s", flags[i].name);
	printf("\n");
}

int main(int argc, char **argv)
{
	double seconds = 0.5;
	uint64_t mib = 256;
	int64_t tokens = 1;
	int l2 = 0;
	const char *only = NULL;
	const char *act = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			mib = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--l2"))
			l2 = 1;
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else if (!strcmp(argv[i], "--activations") && i + 1 < argc)
			act = argv[++i];
		else if (!strcmp(argv[i], "--tokens") && i + 1 < argc && atoll(argv[i + 1]) >= 1)
			tokens = atoll(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--seconds S] [--mib M] [--l2] [--only FORMAT] [--activations auto|int8|f32] [--tokens N]\n",
				argv[0]);
			return 2;
		}
	}
	if (act && kernels_set_activations(act) != 0) {
		fprintf(stderr, "kernels: --activations must be auto, int8 or f32, not '%s'\n", act);
		return 2;
	}
	int all = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (all < 1)
		all = 1;
	int counts[2] = { 1, all };
	double bw[2];
	for (int k = 0; k < 2; k++)
		if (membw_measure(&bw[k], MEMBW_BUFFER_BYTES, MEMBW_SECONDS * 2, counts[k]) != 0) {
			fprintf(stderr, "kernels: memory bandwidth measurement failed\n");
			return 1;
		}
	print_cpu();
	printf("kernels %s, activations %s, %s of %lld token%s; memory bandwidth %.1f GB/s at 1 thread, %.1f GB/s at %d\n",
	       kernels_ops_get()->name, kernels_activations_name(), tokens == 1 ? "matvec" : "matmul",
	       (long long)tokens, tokens == 1 ? "" : "s", bw[0], bw[1], all);
	printf("%-6s %8s %10s %10s %8s %8s\n", "format", "threads", "MiB", "GB/s", "of bw", "Gw/s");
	float *x = malloc((size_t)tokens * 2048 * sizeof(float)), *y = malloc((size_t)tokens * 2048 * sizeof(float));
	if (!x || !y)
		return 1;
	for (int64_t i = 0; i < tokens * 2048; i++)
		x[i] = rng_float();
	static const enum quant_type types[] = { QUANT_F32,  QUANT_BF16, QUANT_INT8, QUANT_INT4,
						 QUANT_MXFP4, QUANT_F16,  QUANT_Q8_0, QUANT_Q4_0,
						 QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K };
	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
		if (only && strcmp(only, quant_type_name(types[ti])))
			continue;
		struct bench_set s;
		if (set_build(&s, types[ti], mib << 20, l2) != 0) {
			fprintf(stderr, "kernels: out of memory building %s matrices\n",
				quant_type_name(types[ti]));
			return 1;
		}
		for (int k = 0; k < 2; k++) {
			struct threadpool *pool = NULL;
			if (counts[k] > 1 && threadpool_init(&pool, counts[k]) != 0)
				return 1;
			double gw;
			set_run(&s, pool, seconds / 5, x, y, tokens, &gw);
			double gbps = set_run(&s, pool, seconds, x, y, tokens, &gw);
			/* A prefill reads its weights once per call: the share of the
			 * bandwidth says nothing there. */
			if (tokens == 1)
				printf("%-6s %8d %10.0f %10.2f %7.0f%% %8.2f\n", quant_type_name(types[ti]), counts[k],
				       (double)s.bytes / (1 << 20), gbps, 100 * gbps / bw[k], gw);
			else
				printf("%-6s %8d %10.0f %10.2f %8s %8.2f\n", quant_type_name(types[ti]), counts[k],
				       (double)s.bytes / (1 << 20), gbps, "-", gw);
			if (pool)
				threadpool_free(pool);
		}
		free(s.m);
		free(s.arena);
	}
	free(x);
	free(y);
	return 0;
}
