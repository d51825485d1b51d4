/*
 * forward_internal — what the block files of engine/forward/ share with
 * forward.c: their scratch regions, their sequence-state parts, RoPE with
 * the model's frequencies, and the layer table's binding (layers.c).
 */
#ifndef COLIBRI_ENGINE_FORWARD_INTERNAL_H
#define COLIBRI_ENGINE_FORWARD_INTERNAL_H

#include "engine/forward/forward.h"

/* The kind's scratch valid during one run call (shared with every kind). */
static inline struct carve forward_shared(const struct forward *f)
{
	return (struct carve){ f->shared, 0 };
}

/* The kind's own scratch, kept between runs. */
static inline struct carve forward_own(const struct forward *f, const struct block_kind *k)
{
	return (struct carve){ f->own[k->id], 0 };
}

/* Worker thread's scratch during one run. */
static inline struct carve forward_thread(const struct forward *f, int thread)
{
	return (struct carve){ f->threads + (size_t)thread * f->thread_bytes, 0 };
}

/* The sequence-state rows of layer's mixer (slot 0) or FFN (slot 1) in the
 * sequence of the step's row t. */
static inline uint8_t *forward_state_rows(const struct forward *f, int t, int layer, int slot)
{
	return seq_state_rows(&f->seqs[f->row_seq[t]], 2 * layer + slot);
}

/* Rotates x[rot_dim] at pos with the model's pairing and YaRN factor. */
void forward_rope(const struct forward *f, float *x, int64_t pos);
/* The same with the pairing given: interleave 1 pairs (2i, 2i+1). */
void forward_rope_as(const struct forward *f, float *x, int64_t pos, int interleave);

/* One expert's biases (gpt-oss): gate_up [2 * rows of g], gate j's at 2j
 * and up j's at 2j + 1; down [rows of d]. */
struct glu_bias {
	const float *gate_up;
	const float *down;
};

/* SwiGLU down(silu(gate(in)) * up(in)) over m rows into out, through the
 * buffers gate and up [m, g->rows] (ffn_dense.c); with the model's clamp
 * (swiglu_limit) and, when glu_alpha > 0, gpt-oss's (up + 1) * gate *
 * sigmoid(alpha * gate) in place of silu(gate) * up; b (or NULL) adds
 * biases to gate, up and the output. */
void ffn_swiglu(const struct forward *f, const struct qmatrix *g, const struct qmatrix *u, const struct qmatrix *d,
		const struct glu_bias *b, const float *in, int m, float *gate, float *up, float *out);

/* Starts the reads of the first MoE layer's experts when it is hash-routed
 * (DeepSeek-V4): the step's token ids decide them before any layer runs
 * (ffn_moe.c; rows' tokens in f->row_tok). Changes no result. */
void ffn_moe_prefetch_first(struct forward *f, int n);

/* Short convolutions (sconv.c). sconv_row: y = x + the causal depthwise
 * convolution w [channels, kernel] over the sequence's history hist
 * [kernel - 1, channels] (oldest first) and x, which it then appends to
 * hist; y may be x. sconv_state_bytes: the history of one convolution of
 * that many channels. sconv_block: one block of a RESIDUAL_SCONV layer
 * (slot 0 the mixer, 1 the FFN): x += sconv(k(norm(x))), the history in
 * the layer's state part after the kind's own fixed bytes. */
void sconv_row(float *y, const float *x, const float *w, float *hist, int64_t channels, int64_t kernel);
size_t sconv_state_bytes(const struct model_config *c, int64_t channels);
int sconv_block(struct forward *f, const struct block_kind *k, const float *norm, int layer, int slot, int n);

/* Fills f->layers (and f->mtp) from the model: each row's norms and the
 * weights of its two kinds (layers.c). */
int forward_layers_bind(struct forward *f);
void forward_layers_free(struct forward *f);

#endif
