/*
 * test_v4 — the pieces of DeepSeek-V4's blocks that can be checked on
 * their own, each against a double-precision formula written here from
 * transformers v5.15.0's modeling_deepseek_v4.py:
 *  - hyper-connections (hyper_conn.h): pre/post/comb from the mix logits
 *    (sigmoid ranges, the softmax + eps, the Sinkhorn passes in their
 *    order: a column pass, then rows and columns iters-1 times), the
 *    collapse and the transposed stream mix;
 *  - the compressors (v4_compress.h): HCA and CSA window pooling (the
 *    overlapping Ca/Cb layout, window 0 without Ca, the slots of
 *    v4_window_slots), an entry's kv_norm and interleaved RoPE at its
 *    window's first position, and the Lightning indexer's scores;
 *  - MIXER_V4's sequence state for a DeepSeek-V4-Flash-shaped config
 *    against what transformers' DeepseekV4HCACache / DeepseekV4CSACache
 *    keep;
 *  - the inverse RoPE (angle -pos) undoing the rotation.
 * The whole model against its reference runs from the deepseek_v4
 * fixtures (test_forward), which this file does not need.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kernels.h"
#include "base/error.h"
#include "compute/rope_freq.h"
#include "engine/forward/forward.h"
#include "engine/forward/hyper_conn.h"
#include "engine/forward/v4_compress.h"

static uint64_t rng = 88172645463325252ull;

/* Uniform in [-a, a). */
static float rnd(float a)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0) * a;
}

static double dsig(double x)
{
	return 1.0 / (1.0 + exp(-x));
}

/* DeepseekV4HyperConnection.forward's weights in double. */
static void ref_hc(double *pre, double *post, double *comb, const float *mix, const float *base, const float *scale,
		   int hc, int iters, double eps)
{
	for (int i = 0; i < hc; i++) {
		pre[i] = dsig((double)mix[i] * scale[0] + base[i]) + eps;
		post[i] = 2 * dsig((double)mix[hc + i] * scale[1] + base[hc + i]);
	}
	for (int i = 0; i < hc; i++) {
		double m = -INFINITY, s = 0;
		double *r = comb + i * hc;
		for (int j = 0; j < hc; j++) {
			r[j] = (double)mix[2 * hc + i * hc + j] * scale[2] + base[2 * hc + i * hc + j];
			m = r[j] > m ? r[j] : m;
		}
		for (int j = 0; j < hc; j++)
			s += exp(r[j] - m);
		for (int j = 0; j < hc; j++)
			r[j] = exp(r[j] - m) / s + eps;
	}
	/* comb / (comb.sum(-2) + eps): columns; then rows (-1) and columns. */
	for (int pass = 0; pass < 1 + 2 * (iters - 1); pass++) {
		bool cols = pass % 2 == 0;
		for (int a = 0; a < hc; a++) {
			double s = 0;
			for (int b = 0; b < hc; b++)
				s += cols ? comb[b * hc + a] : comb[a * hc + b];
			for (int b = 0; b < hc; b++)
				if (cols)
					comb[b * hc + a] /= s + eps;
				else
					comb[a * hc + b] /= s + eps;
		}
	}
}

static void random_mix(float *mix, float *base, float *scale, int hc)
{
	int M = (2 + hc) * hc;
	for (int i = 0; i < M; i++) {
		mix[i] = rnd(3);
		base[i] = rnd(1);
	}
	for (int i = 0; i < 3; i++)
		scale[i] = 0.5f + rnd(0.4f) + 0.5f;
}

Test(v4, hc_weights_match_the_formula)
{
	int iters_of[] = { 1, 2, 20 };
	for (int hc = 1; hc <= 8; hc++)
		for (int k = 0; k < 3; k++) {
			int iters = iters_of[k], M = (2 + hc) * hc;
			float mix[(2 + 8) * 8], base[(2 + 8) * 8], scale[3], pre[8], post[8], comb[64];
			double rpre[8], rpost[8], rcomb[64];
			random_mix(mix, base, scale, hc);
			(void)M;
			hc_weights_of(pre, post, comb, mix, base, scale, hc, iters, 1e-6f);
			ref_hc(rpre, rpost, rcomb, mix, base, scale, hc, iters, 1e-6);
			for (int i = 0; i < hc; i++) {
				cr_assert(fabs(pre[i] - rpre[i]) < 1e-6, "hc %d pre[%d] %g vs %g", hc, i, pre[i], rpre[i]);
				cr_assert(fabs(post[i] - rpost[i]) < 2e-6, "hc %d post[%d]", hc, i);
				cr_assert(pre[i] > 0 && pre[i] < 1 + 2e-6 && post[i] > 0 && post[i] < 2);
			}
			for (int i = 0; i < hc * hc; i++)
				cr_assert(fabs(comb[i] - rcomb[i]) < 1e-5, "hc %d iters %d comb[%d] %g vs %g", hc, iters, i,
					  comb[i], rcomb[i]);
		}
}

/* After the last column pass every column sums to 1 (less eps); with
 * the iterations the rows converge too: the matrix tends to doubly
 * stochastic. */
Test(v4, sinkhorn_is_doubly_stochastic)
{
	int hc = 4;
	float mix[24], base[24], scale[3], pre[4], post[4], comb[16];
	for (int trial = 0; trial < 100; trial++) {
		int iters = trial % 2 ? 20 : 500;
		double row_tol = trial % 2 ? 1e-2 : 1e-4;
		random_mix(mix, base, scale, hc);
		hc_weights_of(pre, post, comb, mix, base, scale, hc, iters, 1e-6f);
		for (int a = 0; a < hc; a++) {
			double rs = 0, cs = 0;
			for (int b = 0; b < hc; b++) {
				cr_assert(comb[a * hc + b] > 0);
				rs += comb[a * hc + b];
				cs += comb[b * hc + a];
			}
			cr_assert(fabs(cs - 1) < 1e-5, "column %d sums to %g", a, cs);
			cr_assert(fabs(rs - 1) < row_tol, "%d iterations: row %d sums to %g", iters, a, rs);
		}
	}
}

/* The block's input is sum_s pre[s] stream[s]; the new stream k is
 * sum_j comb[j][k] stream[j] + post[k] out (comb transposed: HF's
 * matmul(comb.transpose(-1, -2), streams)). */
Test(v4, hc_collapse_and_expand)
{
	enum { HC = 4, H = 37 };
	float streams[HC * H], out[H], pre[HC], post[HC], comb[HC * HC], col[H];
	double want[HC * H];
	for (int i = 0; i < HC * H; i++)
		streams[i] = rnd(2);
	for (int i = 0; i < H; i++)
		out[i] = rnd(2);
	for (int i = 0; i < HC; i++) {
		pre[i] = 0.1f + (float)i;
		post[i] = 0.5f + 0.25f * (float)i;
	}
	for (int i = 0; i < HC * HC; i++)
		comb[i] = (float)(i + 1) / 16.0f; /* not symmetric: a transpose would show */
	hc_collapse(col, streams, pre, HC, H);
	for (int d = 0; d < H; d++) {
		double s = 0;
		for (int i = 0; i < HC; i++)
			s += (double)pre[i] * streams[i * H + d];
		cr_assert(fabs(col[d] - s) < 1e-5);
	}
	for (int k = 0; k < HC; k++)
		for (int d = 0; d < H; d++) {
			double s = (double)post[k] * out[d];
			for (int j = 0; j < HC; j++)
				s += (double)comb[j * HC + k] * streams[j * H + d];
			want[k * H + d] = s;
		}
	hc_expand(streams, out, post, comb, HC, H);
	for (int i = 0; i < HC * H; i++)
		cr_assert(fabs(streams[i] - want[i]) < 1e-5, "stream float %d: %g vs %g", i, streams[i], want[i]);
}

Test(v4, rmsnorm_plain_is_unweighted_rms)
{
	float x[100], y[100];
	double ss = 0;
	for (int i = 0; i < 100; i++) {
		x[i] = rnd(3);
		ss += (double)x[i] * x[i];
	}
	rmsnorm_plain(y, x, 100, 1e-6f);
	for (int i = 0; i < 100; i++)
		cr_assert(fabs(y[i] - x[i] / sqrt(ss / 100 + 1e-6)) < 1e-5);
}

/* Rows of a test state: stride floats per position, the compressor's kv at
 * kv, its gate at gate (series floats each), something around them. */
struct rows {
	float *r;
	int64_t stride, kv, gate;
	struct v4_series s;
};

static void rows_init(struct rows *t, int64_t dim, int32_t rate, bool overlap, int64_t positions)
{
	t->s = (struct v4_series){ .dim = dim, .rate = rate, .overlap = overlap };
	int64_t sf = v4_series_floats(&t->s);
	t->kv = 3; /* something before, as the roped kv is in the engine */
	t->gate = 3 + sf;
	t->stride = 3 + 2 * sf + 1;
	t->r = calloc((size_t)(positions * t->stride), sizeof(float));
	for (int64_t i = 0; i < positions * t->stride; i++)
		t->r[i] = rnd(2);
}

/* Entry w's pooling inputs from the test rows, through v4_window_slots:
 * half h of a row is its floats [h*dim, (h+1)*dim). */
static int pool_inputs(struct v4_pool_in *in, const struct rows *t, const float *bias, int64_t w)
{
	struct v4_slot sl[2 * 128];
	int64_t D = t->s.dim, SF = v4_series_floats(&t->s);
	int n = v4_window_slots(sl, &t->s, w);
	cr_assert_eq(n, t->s.overlap && w > 0 ? 2 * t->s.rate : t->s.rate);
	for (int j = 0; j < n; j++) {
		const float *row = t->r + sl[j].pos * t->stride;
		int64_t col = sl[j].half * D;
		in[j] = (struct v4_pool_in){ row + t->kv + col, row + t->gate + col, bias + sl[j].bias_row * SF + col };
	}
	return n;
}

/* The pooled entry w as HF builds it: new_kv / new_gate [2*rate, dim] (or
 * [rate, dim]), -inf gates where window w-1 does not exist, softmax over
 * the slots per channel, the weighted sum. */
static void ref_pool(double *out, const struct rows *t, const float *bias, int64_t w)
{
	int64_t D = t->s.dim, R = t->s.rate, SF = v4_series_floats(&t->s);
	int slots = t->s.overlap ? 2 * (int)R : (int)R;
	for (int64_t d = 0; d < D; d++) {
		double g[512], v[512], m = -INFINITY, sum = 0;
		for (int j = 0; j < slots; j++) {
			int64_t p, col;
			int64_t br;
			if (!t->s.overlap) {
				p = w * R + j, col = d, br = j;
			} else if (j < R) { /* Ca of window w-1 */
				if (w == 0) {
					g[j] = -INFINITY, v[j] = 0;
					continue;
				}
				p = (w - 1) * R + j, col = d, br = j;
			} else { /* Cb of window w */
				p = w * R + (j - R), col = D + d, br = j - R;
			}
			g[j] = (double)t->r[p * t->stride + t->gate + col] + bias[br * SF + col];
			v[j] = t->r[p * t->stride + t->kv + col];
		}
		for (int j = 0; j < slots; j++)
			m = g[j] > m ? g[j] : m;
		for (int j = 0; j < slots; j++)
			sum += exp(g[j] - m);
		out[d] = 0;
		for (int j = 0; j < slots; j++)
			out[d] += v[j] * exp(g[j] - m) / sum;
	}
}

static void check_pool(int64_t dim, int32_t rate, bool overlap)
{
	struct rows t;
	int64_t windows = 4;
	rows_init(&t, dim, rate, overlap, windows * rate);
	int64_t SF = v4_series_floats(&t.s);
	float *bias = malloc((size_t)(rate * SF) * sizeof(float)), *out = malloc((size_t)dim * sizeof(float));
	float *scratch = malloc((size_t)(2 * dim) * sizeof(float));
	double *want = malloc((size_t)dim * sizeof(double));
	struct v4_pool_in in[2 * 128];
	for (int64_t i = 0; i < rate * SF; i++)
		bias[i] = rnd(1);
	for (int64_t w = 0; w < windows; w++) {
		int n = pool_inputs(in, &t, bias, w);
		v4_pool(out, in, n, dim, scratch);
		ref_pool(want, &t, bias, w);
		for (int64_t d = 0; d < dim; d++)
			cr_assert(fabs(out[d] - want[d]) < 1e-5, "dim %ld rate %d overlap %d window %ld channel %ld: %g vs %g",
				  (long)dim, rate, overlap, (long)w, (long)d, out[d], want[d]);
	}
	free(t.r);
	free(bias);
	free(out);
	free(scratch);
	free(want);
}

Test(v4, hca_pooling_matches_the_formula)
{
	check_pool(16, 8, false);
	check_pool(5, 1, false);
	check_pool(64, 128, false);
}

Test(v4, csa_pooling_matches_the_formula)
{
	check_pool(16, 4, true);
	check_pool(7, 1, true);
	check_pool(32, 3, true);
}

/* An entry is the pooled window, normed with the weights, its last rot_dim
 * floats rotated in pairs (2i, 2i+1) by angle (w*rate)*freq[i]. */
Test(v4, entry_is_the_window_normed_and_roped)
{
	enum { D = 16, RATE = 4, ROT = 8, W = 3 };
	struct rows t;
	rows_init(&t, D, RATE, true, (W + 1) * RATE);
	int64_t SF = v4_series_floats(&t.s);
	float bias[RATE * 2 * D], norm[D], freq[ROT / 2], scratch[2 * D], e[D];
	struct v4_pool_in in[2 * RATE];
	for (int i = 0; i < RATE * SF; i++)
		bias[i] = rnd(1);
	for (int i = 0; i < D; i++)
		norm[i] = 1 + rnd(0.5f);
	rope_freq_yarn(freq, ROT, 160000.0, 4.0, 32, 1, 32, true);
	double pooled[D], ss = 0;
	ref_pool(pooled, &t, bias, W);
	int n = pool_inputs(in, &t, bias, W);
	v4_compress_entry(e, in, n, D, norm, 1e-6f, freq, ROT, W * RATE, scratch);
	for (int d = 0; d < D; d++)
		ss += pooled[d] * pooled[d];
	double inv = 1 / sqrt(ss / D + 1e-6), want[D];
	for (int d = 0; d < D; d++)
		want[d] = pooled[d] * inv * norm[d];
	for (int i = 0; i < ROT / 2; i++) {
		double a = (double)(W * RATE) * freq[i], c = cos(a), s = sin(a);
		int x0 = D - ROT + 2 * i, x1 = x0 + 1;
		double y0 = want[x0] * c - want[x1] * s, y1 = want[x1] * c + want[x0] * s;
		want[x0] = y0;
		want[x1] = y1;
	}
	for (int d = 0; d < D; d++)
		cr_assert(fabs(e[d] - want[d]) < 1e-4, "channel %d: %g vs %g", d, e[d], want[d]);
	free(t.r);
}

Test(v4, entries_visible_once_their_window_closes)
{
	/* (pos + 1) // rate: entry e closes at position (e+1)*rate - 1. */
	for (int rate = 1; rate <= 9; rate++)
		for (int64_t pos = 0; pos < 40; pos++) {
			int64_t n = v4_entries_visible(pos, rate);
			cr_assert(n * rate - 1 <= pos && (n + 1) * rate - 1 > pos);
		}
}

Test(v4, index_scores_match_the_formula)
{
	enum { D = 8, HEADS = 3, N = 5, STRIDE = 13 };
	float keys[N * STRIDE], q[HEADS * D], w[HEADS], out[N];
	for (int i = 0; i < N * STRIDE; i++)
		keys[i] = rnd(2);
	for (int i = 0; i < HEADS * D; i++)
		q[i] = rnd(1);
	for (int i = 0; i < HEADS; i++)
		w[i] = rnd(1);
	float scale = 1.0f / sqrtf((float)D);
	v4_index_scores(out, q, w, HEADS, keys + 2, STRIDE, D, 1, N, scale);
	for (int e = 1; e < N; e++) {
		const float *k = keys + 2 + e * STRIDE;
		double s = 0;
		for (int h = 0; h < HEADS; h++) {
			double d = 0;
			for (int i = 0; i < D; i++)
				d += (double)q[h * D + i] * k[i];
			s += (d > 0 ? d : 0) * scale * w[h];
		}
		cr_assert(fabs(out[e] - s) < 1e-5, "entry %d: %g vs %g", e, out[e], s);
	}
}

/* The attention output's rope floats are rotated by -pos: after a rotation
 * by +pos that gives the vector back. */
Test(v4, inverse_rope_undoes_the_rotation)
{
	enum { ROT = 16 };
	float freq[ROT / 2], x[ROT], y[ROT];
	rope_freq_default(freq, ROT, 10000.0);
	for (int i = 0; i < ROT; i++)
		x[i] = y[i] = rnd(1);
	rope(y, ROT, 1234, freq, ROPE_GPTJ);
	rope(y, ROT, -1234, freq, ROPE_GPTJ);
	for (int i = 0; i < ROT; i++)
		cr_assert(fabs(x[i] - y[i]) < 1e-5);
}

static void parse_config(struct model_config *c, const char *json)
{
	cJSON *j = cJSON_Parse(json);
	cr_assert(j);
	memset(c, 0, sizeof *c);
	cr_assert_eq(model_config_parse(c, j, "config.json"), 0, "%s", error_message());
	cJSON_Delete(j);
}

/* What `plan` shows for the KV cache at ctx: the forward's bytes per
 * position (sequence state and score rows, from two context sizes as
 * plan_container.c takes them) times ctx, plus the fixed state. */
static uint64_t plan_kv_bytes(const struct model_config *c, int ctx, int threads)
{
	uint64_t f1 = forward_bytes(c, 1, 64, threads, 1), f2 = forward_bytes(c, 2, 64, threads, 1);
	return (f2 - f1) * (uint64_t)ctx + forward_state_fixed_bytes(c, 1);
}

/* DeepSeek-V4-Flash's shape (transformers' DeepseekV4Config defaults: 43
 * layers, head_dim 512, sliding_window 128, CSA rate 4, HCA rate 128,
 * index_head_dim 128; two HCA layers, then CSA and HCA in turn). Per
 * layer the state is what the cache classes keep: the sliding layer's
 * sliding_window - 1 keys; HCA's buffer_kv / buffer_gate of up to rate
 * rows of head_dim; CSA's buffer of rate rows of 2 * head_dim (Ca | Cb)
 * and overlap_kv / overlap_gate (the last window's Ca), for the
 * compressor and the indexer (index_head_dim); per position only the
 * compressed entries, an entry per rate positions. The totals go to
 * stderr next to DeepSeek-V3's MLA cache. */
Test(v4, flash_state_is_what_the_cache_classes_keep)
{
	struct model_config c, v3;
	parse_config(&c, "{\"model_type\": \"deepseek_v4\"}");
	int64_t F = sizeof(float), hd = 512, id = 128, sw = 128, rc = 4, rh = 128;
	cr_assert_eq(c.head_dim, hd);
	cr_assert_eq(c.index_head_dim, id);
	cr_assert_eq(c.sliding_window, sw);
	cr_assert_eq(c.compress_rate_csa, rc);
	cr_assert_eq(c.compress_rate_hca, rh);
	uint64_t pos = 0, fixed = 0, before = 0;
	int n[3] = { 0 };
	for (int l = 0; l < c.n_layers; l++) {
		struct block_sizes bs;
		block_v4.sizes(&c, l, 1, 8192, &bs);
		int64_t want_pos = 0, want_fixed = (sw - 1) * hd * F, old = hd;
		if (c.v4_attn[l] == V4_ATTN_HCA) {
			want_pos = (hd + rh - 1) / rh * F;
			want_fixed += 2 * rh * hd * F;
			old += 2 * hd + hd;
		} else if (c.v4_attn[l] == V4_ATTN_CSA) {
			want_pos = (hd + id + rc - 1) / rc * F;
			want_fixed += (2 * rc * 2 * hd + 2 * rc * hd) * F + (2 * rc * 2 * id + 2 * rc * id) * F;
			old += 2 * 2 * hd + hd + 5 * id;
		}
		cr_assert_eq(bs.state_pos_bytes, (size_t)want_pos, "layer %d", l);
		cr_assert_eq(bs.state_fixed_bytes, (size_t)want_fixed, "layer %d", l);
		pos += bs.state_pos_bytes;
		fixed += bs.state_fixed_bytes;
		before += (uint64_t)(old * F);
		n[c.v4_attn[l]]++;
	}
	cr_assert_eq(pos, (uint64_t)(n[V4_ATTN_CSA] * 640 + n[V4_ATTN_HCA] * 16));
	parse_config(&v3, "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 7168, \"num_hidden_layers\": 61, "
			  "\"num_attention_heads\": 128, \"kv_lora_rank\": 512, \"qk_rope_head_dim\": 64, "
			  "\"qk_nope_head_dim\": 128, \"v_head_dim\": 128, \"q_lora_rank\": 1536, "
			  "\"n_routed_experts\": 256, \"num_experts_per_tok\": 8, \"moe_intermediate_size\": 2048, "
			  "\"intermediate_size\": 18432, \"first_k_dense_replace\": 3, \"vocab_size\": 129280, "
			  "\"num_nextn_predict_layers\": 0}");
	uint64_t v3_pos = 0;
	for (int l = 0; l < v3.n_layers; l++) {
		struct block_sizes bs;
		block_mixer(v3.rows[l].mixer)->sizes(&v3, l, 1, 8192, &bs);
		v3_pos += bs.state_pos_bytes;
	}
	cr_assert_eq(v3_pos, (uint64_t)v3.n_layers * (512 + 64) * F);
	fprintf(stderr, "DeepSeek-V4-Flash shape: %d sliding, %d CSA, %d HCA layers: state %llu B per position "
		"(%llu B per position before), %llu B fixed (x3 with snapshot and checkpoint: %llu B); "
		"DeepSeek-V3 MLA: %llu B per position\n", n[V4_ATTN_SLIDING], n[V4_ATTN_CSA], n[V4_ATTN_HCA],
		(unsigned long long)pos, (unsigned long long)before, (unsigned long long)fixed,
		(unsigned long long)forward_state_fixed_bytes(&c, 1), (unsigned long long)v3_pos);
	for (int ctx = 8192; ctx <= 32768; ctx *= 4)
		fprintf(stderr, "plan --ctx %d kv cache (16 threads): V4-Flash %.1f MiB (state alone %.1f MiB), "
			"V3 %.1f MiB (state alone %.1f MiB)\n", ctx, plan_kv_bytes(&c, ctx, 16) / 1048576.0,
			(pos * (uint64_t)ctx + forward_state_fixed_bytes(&c, 1)) / 1048576.0,
			plan_kv_bytes(&v3, ctx, 16) / 1048576.0, v3_pos * (uint64_t)ctx / 1048576.0);
}
