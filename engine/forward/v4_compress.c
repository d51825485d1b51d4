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

/* Slot j of entry w: its row, its column within the series floats, its
 * position_bias row. */
struct slot {
	int64_t row, col;
	int32_t bias_row;
};

static int slots_of(const struct v4_series *s, int64_t w)
{
	return s->overlap && w > 0 ? 2 * s->rate : s->rate;
}

static struct slot slot_at(const struct v4_series *s, int64_t w, int j)
{
	int32_t r = s->rate;
	if (s->overlap && w > 0) {
		if (j < r) /* Ca of window w-1 */
			return (struct slot){ (w - 1) * r + j, 0, j };
		return (struct slot){ w * r + (j - r), s->dim, j - r }; /* Cb of window w */
	}
	return (struct slot){ w * r + j, s->overlap ? s->dim : 0, j };
}

void v4_pool(float *out, const float *rows, int64_t stride, const struct v4_series *s, int64_t w,
	     const float *bias, float *scratch)
{
	int64_t D = s->dim, SF = v4_series_floats(s);
	float *max = scratch, *sum = scratch + D;
	int n = slots_of(s, w);
	for (int j = 0; j < n; j++) {
		struct slot sl = slot_at(s, w, j);
		const float *g = rows + sl.row * stride + s->gate + sl.col, *b = bias + (int64_t)sl.bias_row * SF + sl.col;
		for (int64_t d = 0; d < D; d++) {
			float v = g[d] + b[d];
			max[d] = j == 0 || v > max[d] ? v : max[d];
		}
	}
	for (int64_t d = 0; d < D; d++)
		sum[d] = 0.0f;
	for (int j = 0; j < n; j++) {
		struct slot sl = slot_at(s, w, j);
		const float *g = rows + sl.row * stride + s->gate + sl.col, *b = bias + (int64_t)sl.bias_row * SF + sl.col;
		for (int64_t d = 0; d < D; d++)
			sum[d] += expf((g[d] + b[d]) - max[d]);
	}
	for (int64_t d = 0; d < D; d++)
		out[d] = 0.0f;
	for (int j = 0; j < n; j++) {
		struct slot sl = slot_at(s, w, j);
		const float *g = rows + sl.row * stride + s->gate + sl.col, *b = bias + (int64_t)sl.bias_row * SF + sl.col;
		const float *kv = rows + sl.row * stride + s->kv + sl.col;
		for (int64_t d = 0; d < D; d++)
			out[d] += kv[d] * (expf((g[d] + b[d]) - max[d]) / sum[d]);
	}
}

void v4_compress_entry(float *rows, int64_t stride, const struct v4_series *s, int64_t w, const float *bias,
		       const float *norm, float eps, const float *freq, int64_t rot_dim, float *scratch)
{
	float *e = rows + ((w + 1) * s->rate - 1) * stride + s->entry;
	v4_pool(e, rows, stride, s, w, bias, scratch);
	rmsnorm(e, e, norm, s->dim, eps);
	rope(e + s->dim - rot_dim, rot_dim, w * s->rate, freq, ROPE_GPTJ);
}

void v4_index_scores(float *out, const float *q, const float *w, int64_t n_heads, const float *rows, int64_t stride,
		     const struct v4_series *s, int64_t e0, int64_t e1, float scale)
{
	for (int64_t e = e0; e < e1; e++) {
		const float *k = rows + ((e + 1) * s->rate - 1) * stride + s->entry;
		float sum = 0.0f;
		for (int64_t h = 0; h < n_heads; h++) {
			float d = dot_f32(q + h * s->dim, k, s->dim);
			sum += ((d > 0 ? d : 0.0f) * scale) * w[h];
		}
		out[e] = sum;
	}
}
