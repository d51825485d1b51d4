/*
 * v4_compress — DeepSeek-V4's KV compressors (the CSA and HCA layers of
 * MIXER_V4, mixer_v4.c) and the Lightning indexer's scores. Internal to
 * engine/forward/.
 *
 * A compressor projects every position to a kv and a gate row (one series
 * of dim floats for HCA, two for CSA: Ca then Cb) and pools window w,
 * positions [w*rate, (w+1)*rate), into one entry when the window closes.
 * The functions here see a window as its slots, each a (position, half)
 * that the caller resolves to where it keeps that row (mixer_v4.c: the
 * rows of the step, or the window rows of the sequence state), so the
 * pooling is the same bits wherever the rows lie.
 */
#ifndef COLIBRI_ENGINE_FORWARD_V4_COMPRESS_H
#define COLIBRI_ENGINE_FORWARD_V4_COMPRESS_H

#include <stdbool.h>
#include <stdint.h>

/* One compressor's shape. */
struct v4_series {
	int64_t dim;               /* floats of an entry and of each half of a row */
	int32_t rate;              /* positions per window */
	bool overlap;              /* CSA: two series (Ca | Cb), windows of 2*rate with stride rate */
};

/* Floats one position's projected row holds in each of kv and gate. */
static inline int64_t v4_series_floats(const struct v4_series *s)
{
	return s->overlap ? 2 * s->dim : s->dim;
}

/* Where slot j of a window comes from: the half (0: Ca, or HCA's only
 * series; 1: Cb) of position pos's row, with position_bias row bias_row. */
struct v4_slot {
	int64_t pos;
	int half;
	int32_t bias_row;
};

/* The slots of entry w into out[2*rate], in pooling order; returns their
 * count. HCA: the rate positions of window w. CSA: the Ca half of window
 * w-1's positions (absent for w = 0), then the Cb half of window w's, as
 * DeepseekV4CSACompressor lays them out. */
int v4_window_slots(struct v4_slot *out, const struct v4_series *s, int64_t w);

/* A slot's floats: kv, gate and its position_bias row, dim floats each. */
struct v4_pool_in {
	const float *kv, *gate, *bias;
};

/* The pooled (not yet normed) entry into out[dim]: per channel d, the
 * softmax over the n slots of gate + position_bias weighting kv, slots
 * taken in order. scratch: 2*dim floats. */
void v4_pool(float *out, const struct v4_pool_in *in, int n, int64_t dim, float *scratch);

/* Pools an entry into out[dim], applies kv_norm (weight norm, eps) and the
 * interleaved RoPE of the last rot_dim floats at position pos0 (the
 * window's first; freq: rot_dim/2). */
void v4_compress_entry(float *out, const struct v4_pool_in *in, int n, int64_t dim, const float *norm, float eps,
		       const float *freq, int64_t rot_dim, int64_t pos0, float *scratch);

/* Entries a query at pos may see: those whose window has closed,
 * (pos + 1) / rate. */
static inline int64_t v4_entries_visible(int64_t pos, int32_t rate)
{
	return (pos + 1) / rate;
}

/* The Lightning indexer's score of one query over entries [e0, e1):
 * out[e] = sum_h relu(q_h . k_e) * scale * w[h], q [n_heads, dim], k_e at
 * keys + e * key_stride. */
void v4_index_scores(float *out, const float *q, const float *w, int64_t n_heads, const float *keys,
		     int64_t key_stride, int64_t dim, int64_t e0, int64_t e1, float scale);

#endif
