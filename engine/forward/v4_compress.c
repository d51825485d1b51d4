/*
 * v4_compress — see v4_compress.h. The pooling follows transformers v5.15.0's
 * DeepseekV4HCACompressor / DeepseekV4CSACompressor (and the indexer's own
 * compressor): gate + position_bias, softmax over the window's slots per
 * channel in f32, the weighted sum of kv, kv_norm, then RoPE at the
 * window's first position. Per channel the slots are taken in order (the
 * Ca slots of the previous window first), so an entry is the same bits
 * whichever step closes it.
 */
#include "engine/forward/v4_compress.h"

#include <math.h>

#include "compute/kernels.h"
#include "compute/fmath.h"

int v4_window_slots(struct v4_slot *out, const struct v4_series *s, int64_t w)
{
	int32_t r = s->rate;
	int n = 0;
	if (s->overlap && w > 0)
		for (int j = 0; j < r; j++) /* Ca of window w-1 */
			out[n++] = (struct v4_slot){ (w - 1) * r + j, 0, j };
	for (int j = 0; j < r; j++) /* Cb of window w (HCA: its only series) */
		out[n++] = (struct v4_slot){ w * r + j, s->overlap ? 1 : 0, j };
	return n;
}

void v4_pool(float *out, const struct v4_pool_in *in, int n, int64_t dim, float *scratch)
{
	int64_t D = dim;
	float *max = scratch, *sum = scratch + D;
	for (int j = 0; j < n; j++) {
		const float *g = in[j].gate, *b = in[j].bias;
		for (int64_t d = 0; d < D; d++) {
			float v = g[d] + b[d];
			max[d] = j == 0 || v > max[d] ? v : max[d];
		}
	}
	for (int64_t d = 0; d < D; d++)
		sum[d] = 0.0f;
	for (int j = 0; j < n; j++) {
		const float *g = in[j].gate, *b = in[j].bias;
		for (int64_t d = 0; d < D; d++)
			sum[d] += fm_expf((g[d] + b[d]) - max[d]);
	}
	for (int64_t d = 0; d < D; d++)
		out[d] = 0.0f;
	for (int j = 0; j < n; j++) {
		const float *g = in[j].gate, *b = in[j].bias, *kv = in[j].kv;
		for (int64_t d = 0; d < D; d++)
			out[d] += kv[d] * (fm_expf((g[d] + b[d]) - max[d]) / sum[d]);
	}
}

void v4_compress_entry(float *out, const struct v4_pool_in *in, int n, int64_t dim, const float *norm, float eps,
		       const float *freq, int64_t rot_dim, int64_t pos0, float *scratch)
{
	v4_pool(out, in, n, dim, scratch);
	rmsnorm(out, out, norm, dim, eps);
	rope(out + dim - rot_dim, rot_dim, pos0, freq, ROPE_GPTJ);
}

void v4_index_scores(float *out, const float *q, const float *w, int64_t n_heads, const float *keys,
		     int64_t key_stride, int64_t dim, int64_t e0, int64_t e1, float scale)
{
	for (int64_t e = e0; e < e1; e++) {
		const float *k = keys + e * key_stride;
		float sum = 0.0f;
		for (int64_t h = 0; h < n_heads; h++) {
			float d = dot_f32(q + h * dim, k, dim);
			sum += ((d > 0 ? d : 0.0f) * scale) * w[h];
		}
		out[e] = sum;
	}
}
