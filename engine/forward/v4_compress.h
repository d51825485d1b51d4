/*
 * v4_compress — DeepSeek-V4's KV compressors (the CSA and HCA layers of
 * MIXER_V4, mixer_v4.c) and the Lightning indexer's scores, over the rows
 * of a layer's sequence state. Internal to engine/forward/.
 *
 * A compressor keeps, per position, its projected kv and gate rows (one
 * series of dim floats for HCA, two for CSA: Ca then Cb), and, at the
 * position that closes a window, the window's entry: entry w covers window
 * [w*rate, (w+1)*rate) and lives in row (w+1)*rate - 1. An entry is pooled
 * only from rows at or before that position, so cutting the state back to
 * any position leaves every entry before it exact and the next one is
 * pooled again when its window closes.
 */
#ifndef COLIBRI_ENGINE_FORWARD_V4_COMPRESS_H
#define COLIBRI_ENGINE_FORWARD_V4_COMPRESS_H

#include <stdbool.h>
#include <stdint.h>

/* Where one compressor's floats lie in a state row. */
struct v4_series {
	int64_t kv, gate;          /* offsets of the projected rows: series floats each */
	int64_t entry;             /* offset of the entry (dim floats), valid at closing rows */
	int64_t dim;               /* floats of an entry */
	int32_t rate;              /* positions per window */
	bool overlap;              /* CSA: two series (Ca | Cb), windows of 2*rate with stride rate */
};

/* Floats one position's projected row holds in each of kv and gate. */
static inline int64_t v4_series_floats(const struct v4_series *s)
{
	return s->overlap ? 2 * s->dim : s->dim;
}

/* The pooled (not yet normed) entry w into out[dim]: per channel d, the
 * softmax over the window's slots of gate + position_bias weighting kv.
 * HCA: the rate slots of window w. CSA: the Ca half of window w-1's rows
 * (absent for w = 0), then the Cb half of window w's, as
 * DeepseekV4CSACompressor lays them out. rows: row p at rows + p*stride;
 * bias: [rate, v4_series_floats]; scratch: 2*dim floats. */
void v4_pool(float *out, const float *rows, int64_t stride, const struct v4_series *s, int64_t w,
	     const float *bias, float *scratch);

/* Pools entry w, applies kv_norm (weight norm, eps) and the interleaved
 * RoPE of the last rot_dim floats at position w*rate (freq: rot_dim/2),
 * and writes it at row (w+1)*rate - 1's entry. */
void v4_compress_entry(float *rows, int64_t stride, const struct v4_series *s, int64_t w, const float *bias,
		       const float *norm, float eps, const float *freq, int64_t rot_dim, float *scratch);

/* Entries a query at pos may see: those whose window has closed,
 * (pos + 1) / rate. */
static inline int64_t v4_entries_visible(int64_t pos, int32_t rate)
{
	return (pos + 1) / rate;
}

/* The Lightning indexer's score of one query over entries [e0, e1):
 * out[e] = sum_h relu(q_h . k_e) * scale * w[h], q [n_heads, dim], k_e the
 * indexer entry of row (e+1)*rate - 1. */
void v4_index_scores(float *out, const float *q, const float *w, int64_t n_heads, const float *rows, int64_t stride,
		     const struct v4_series *s, int64_t e0, int64_t e1, float scale);

#endif
