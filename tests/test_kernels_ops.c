/*
 * test_kernels_ops — the kernels besides matvec: the SIMD level's name,
 * dot/axpy, rmsnorm, softmax, swiglu, rope (NEOX and GPT-J), topk and
 * attention_head against straightforward double-precision references.
 */
#include "tests/kernels_ref.h"

Test(kernels, simd_level_named)
{
	enum cpu_simd lvl = cpu_simd_level(), parsed;
	cr_assert_leq(lvl, cpu_simd_supported());
	cr_assert_eq(cpu_simd_parse(cpu_simd_name(lvl), &parsed), 0);
	cr_assert_eq(parsed, lvl);
	cr_assert_str_eq(kernels_ops_get()->name, cpu_simd_name(lvl));
	cr_assert_neq(cpu_simd_parse("sse9", &parsed), 0);
}

Test(kernels, rmsnorm_reference)
{
	int64_t n = 517;
	float *x = rand_vec(n, 1), *w = rand_vec(n, 2), *out = malloc(sizeof(float) * n);
	double ss = 0;
	for (int64_t i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	double inv = 1.0 / sqrt(ss / n + 1e-6);
	rmsnorm(out, x, w, n, 1e-6f);
	for (int64_t i = 0; i < n; i++)
		cr_assert_float_eq(out[i], x[i] * inv * w[i], 1e-5);
	/* In place. */
	rmsnorm(x, x, w, n, 1e-6f);
	cr_assert_eq(memcmp(x, out, sizeof(float) * n), 0);
	free(x);
	free(w);
	free(out);
}

Test(kernels, softmax_and_swiglu_reference)
{
	int64_t n = 203;
	float *x = rand_vec(n, 3), *up = rand_vec(n, 4), *out = malloc(sizeof(float) * n);
	double *e = malloc(sizeof(double) * n), sum = 0, max = -INFINITY;
	for (int64_t i = 0; i < n; i++) {
		x[i] *= 30.0f; /* large logits: exercises the max subtraction */
		max = fmax(max, x[i]);
	}
	for (int64_t i = 0; i < n; i++)
		sum += e[i] = exp(x[i] - max);
	float *gate = rand_vec(n, 5);
	double *gw = malloc(sizeof(double) * n);
	for (int64_t i = 0; i < n; i++) {
		gate[i] *= 8.0f; /* silu over [-8, 8): both tails and the bend */
		double g = gate[i];
		gw[i] = g / (1 + exp(-g)) * up[i];
	}
	swiglu(out, gate, up, n);
	for (int64_t i = 0; i < n; i++)
		cr_assert_float_eq(out[i], gw[i], 1e-5, "swiglu %ld", (long)i);
	swiglu(gate, gate, up, n);
	cr_assert_eq(memcmp(gate, out, sizeof(float) * n), 0, "swiglu in place");
	free(gate);
	free(gw);
	softmax(x, n);
	double total = 0;
	for (int64_t i = 0; i < n; i++) {
		cr_assert_float_eq(x[i], e[i] / sum, 1e-6);
		total += x[i];
	}
	cr_assert_float_eq(total, 1.0, 1e-5);
	free(x);
	free(up);
	free(out);
	free(e);
}

static void check_rope(enum rope_kind kind)
{
	int64_t dim = 128, rot = 64, half = rot / 2;
	float inv_freq[32];
	for (int i = 0; i < half; i++)
		inv_freq[i] = (float)pow(10000.0, -2.0 * i / rot);
	for (int64_t pos = 0; pos < 300; pos += 37) {
		float *x = rand_vec(dim, 40 + pos);
		double *want = malloc(sizeof(double) * dim);
		for (int64_t i = 0; i < dim; i++)
			want[i] = x[i];
		for (int64_t i = 0; i < half; i++) {
			/* The angle rounds to f32 first, as in the HF cos/sin tables. */
			double th = (float)pos * inv_freq[i];
			int64_t a = kind == ROPE_NEOX ? i : 2 * i;
			int64_t b = kind == ROPE_NEOX ? i + half : 2 * i + 1;
			want[a] = x[a] * cos(th) - x[b] * sin(th);
			want[b] = x[b] * cos(th) + x[a] * sin(th);
		}
		rope(x, rot, pos, inv_freq, kind);
		for (int64_t i = 0; i < dim; i++)
			cr_assert_float_eq(x[i], want[i], 1e-5, "kind %d pos %ld i %ld", kind,
					   (long)pos, (long)i);
		free(x);
		free(want);
	}
}

Test(kernels, rope_neox_reference)
{
	check_rope(ROPE_NEOX);
}

Test(kernels, rope_gptj_reference)
{
	check_rope(ROPE_GPTJ);
}

Test(kernels, topk_reference)
{
	float x[] = { 0.5f, 2.0f, NAN, 2.0f, -1.0f, 7.0f, 0.5f, -INFINITY, 2.0f };
	int32_t idx[9];
	topk(idx, x, 9, 5);
	int32_t want[] = { 5, 1, 3, 8, 0 };
	for (int i = 0; i < 5; i++)
		cr_assert_eq(idx[i], want[i], "position %d: %d vs %d", i, idx[i], want[i]);
	topk(idx, x, 9, 9);
	int32_t all[] = { 5, 1, 3, 8, 0, 6, 4, 7, 2 };
	for (int i = 0; i < 9; i++)
		cr_assert_eq(idx[i], all[i], "full sort position %d", i);
	/* Random scores with many ties, against selection by repeated argmax. */
	uint64_t st = 99;
	float y[300];
	for (int i = 0; i < 300; i++)
		y[i] = (float)(int)(tu_randf(&st) * 20);
	int32_t got[40];
	char used[300] = { 0 };
	topk(got, y, 300, 40);
	for (int j = 0; j < 40; j++) {
		int best = -1;
		for (int i = 0; i < 300; i++)
			if (!used[i] && (best < 0 || y[i] > y[best]))
				best = i;
		used[best] = 1;
		cr_assert_eq(got[j], best, "rank %d", j);
	}
}

/* The sink joins the softmax (its max too) and takes no value: with a sink
 * far above the scores the output shrinks toward 0, far below it equals
 * plain attention's. */
Test(kernels, attention_head_sink_reference)
{
	int64_t n_ctx = 13, k_dim = 32, v_dim = 24, ks = 40, vs = 30;
	float *q = rand_vec(k_dim, 4), *k = rand_vec(n_ctx * ks, 5), *v = rand_vec(n_ctx * vs, 6);
	float *out = malloc(sizeof(float) * v_dim), *plain = malloc(sizeof(float) * v_dim);
	float *scratch = malloc(sizeof(float) * n_ctx), scale = 0.7f;
	const float sinks[] = { -50.0f, -0.3f, 0.0f, 1.7f, 40.0f };
	for (size_t c = 0; c < sizeof sinks / sizeof sinks[0]; c++) {
		double p[13], max = sinks[c], sum = 0;
		for (int64_t t = 0; t < n_ctx; t++) {
			double d = 0;
			for (int64_t i = 0; i < k_dim; i++)
				d += (double)q[i] * k[t * ks + i];
			p[t] = scale * d;
			max = fmax(max, p[t]);
		}
		for (int64_t t = 0; t < n_ctx; t++)
			sum += p[t] = exp(p[t] - max);
		sum += exp(sinks[c] - max);
		attention_head_sink(out, q, k, ks, v, vs, n_ctx, k_dim, v_dim, scale, sinks[c], scratch);
		for (int64_t i = 0; i < v_dim; i++) {
			double want = 0;
			for (int64_t t = 0; t < n_ctx; t++)
				want += p[t] / sum * v[t * vs + i];
			cr_assert_float_eq(out[i], want, 1e-5, "sink %g, dim %ld", (double)sinks[c], (long)i);
		}
	}
	attention_head(plain, q, k, ks, v, vs, n_ctx, k_dim, v_dim, scale, scratch);
	attention_head_sink(out, q, k, ks, v, vs, n_ctx, k_dim, v_dim, scale, -INFINITY, scratch);
	for (int64_t i = 0; i < v_dim; i++)
		cr_expect_float_eq(out[i], plain[i], 1e-6, "a -inf sink is no sink: dim %ld", (long)i);
	free(q);
	free(k);
	free(v);
	free(out);
	free(plain);
	free(scratch);
}

Test(kernels, attention_head_reference)
{
	int64_t n_ctx = 19, k_dim = 48, v_dim = 40, ks = 64, vs = 56;
	float *q = rand_vec(k_dim, 1), *k = rand_vec(n_ctx * ks, 2), *v = rand_vec(n_ctx * vs, 3);
	float *out = malloc(sizeof(float) * v_dim), *scratch = malloc(sizeof(float) * n_ctx);
	float scale = 1.0f / sqrtf((float)k_dim);
	double p[19], max = -INFINITY, sum = 0;
	for (int64_t t = 0; t < n_ctx; t++) {
		double d = 0;
		for (int64_t i = 0; i < k_dim; i++)
			d += (double)q[i] * k[t * ks + i];
		p[t] = scale * d * 4; /* sharpen so one position dominates less trivially */
		max = fmax(max, p[t]);
	}
	for (int64_t i = 0; i < k_dim; i++)
		q[i] *= 4;
	for (int64_t t = 0; t < n_ctx; t++)
		sum += p[t] = exp(p[t] - max);
	attention_head(out, q, k, ks, v, vs, n_ctx, k_dim, v_dim, scale, scratch);
	for (int64_t i = 0; i < v_dim; i++) {
		double want = 0;
		for (int64_t t = 0; t < n_ctx; t++)
			want += p[t] / sum * v[t * vs + i];
		cr_assert_float_eq(out[i], want, 1e-5, "dim %ld", (long)i);
	}
	free(q);
	free(k);
	free(v);
	free(out);
	free(scratch);
}

/* topk_set keeps the same set as topk (ties: lower index), in index order. */
Test(kernels, topk_set_matches_topk)
{
	float x[] = { 0.5f, 2.0f, NAN, 2.0f, -1.0f, 7.0f, 0.5f, -INFINITY, 2.0f };
	int32_t got[9];
	float scratch[9];
	topk_set(got, x, 9, 3, scratch);
	int32_t want3[] = { 1, 3, 5 }; /* 7, then the first two of three 2.0s */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(got[i], want3[i], "k=3 position %d: %d", i, got[i]);
	topk_set(got, x, 9, 9, scratch);
	for (int i = 0; i < 9; i++)
		cr_assert_eq(got[i], i, "k=n keeps everything in order");
	uint64_t st = 7;
	for (int trial = 0; trial < 200; trial++) {
		int n = 1 + (int)(fabsf(tu_randf(&st)) * 299), k = 1 + (int)(fabsf(tu_randf(&st)) * (n - 1));
		float y[300], sc[300];
		/* Coarse values give many ties; some exact zeros as relu makes them. */
		for (int i = 0; i < n; i++)
			y[i] = trial % 2 ? (float)(int)(tu_randf(&st) * 4) : tu_randf(&st);
		int32_t a[300], b[300];
		topk(a, y, n, k);
		topk_set(b, y, n, k, sc);
		char in_a[300] = { 0 };
		for (int i = 0; i < k; i++)
			in_a[a[i]] = 1;
		for (int i = 0; i < k; i++) {
			cr_assert(in_a[b[i]], "trial %d: index %d kept by topk_set, not by topk", trial, b[i]);
			cr_assert(i == 0 || b[i] > b[i - 1], "trial %d: not increasing", trial);
		}
	}
}

/* attention_head_keys over a subset equals attention_head over those keys
 * gathered contiguously, bit for bit; over all keys it is attention_head. */
Test(kernels, attention_head_keys_subset)
{
	int64_t n_ctx = 23, k_dim = 40, v_dim = 24, ks = 48, vs = 32;
	float *q = rand_vec(k_dim, 11), *k = rand_vec(n_ctx * ks, 12), *v = rand_vec(n_ctx * vs, 13);
	float a[24], b[24], scratch[23];
	int32_t keys[] = { 0, 3, 4, 9, 15, 22 }, all[23];
	int64_t nk = 6;
	float kg[6 * 48], vg[6 * 32];
	for (int64_t i = 0; i < nk; i++) {
		memcpy(kg + i * ks, k + keys[i] * ks, sizeof(float) * (size_t)ks);
		memcpy(vg + i * vs, v + keys[i] * vs, sizeof(float) * (size_t)vs);
	}
	attention_head_keys(a, q, k, ks, v, vs, keys, nk, k_dim, v_dim, 0.3f, scratch);
	attention_head(b, q, kg, ks, vg, vs, nk, k_dim, v_dim, 0.3f, scratch);
	cr_assert_eq(memcmp(a, b, sizeof a), 0, "subset differs from the gathered keys");
	for (int i = 0; i < 23; i++)
		all[i] = i;
	attention_head_keys(a, q, k, ks, v, vs, all, n_ctx, k_dim, v_dim, 0.3f, scratch);
	attention_head(b, q, k, ks, v, vs, n_ctx, k_dim, v_dim, 0.3f, scratch);
	cr_assert_eq(memcmp(a, b, sizeof a), 0, "all keys differ from attention_head");
	free(q);
	free(k);
	free(v);
}
