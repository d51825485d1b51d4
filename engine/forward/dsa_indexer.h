/*
 * dsa_indexer — DeepSeek sparse attention's "lightning indexer", the part
 * of the MIXER_MLA_DSA kind (mixer_mla.c) that chooses, for each query,
 * the positions MLA attends to. Internal to engine/forward/.
 */
#ifndef COLIBRI_ENGINE_FORWARD_DSA_INDEXER_H
#define COLIBRI_ENGINE_FORWARD_DSA_INDEXER_H

#include "engine/forward/forward_internal.h"

/* The indexer of a layer; absent (indexer false) in a layer that reuses
 * the previous layer's selection (GLM-5 "shared"). */
struct dsa_weights {
	bool indexer;
	struct qmatrix wq_b;             /* [index_n_heads*index_head_dim, q_lora_rank] */
	struct qmatrix wk;               /* [index_head_dim, hidden] */
	const float *k_norm, *k_bias;    /* [index_head_dim] LayerNorm */
	struct qmatrix weights;          /* [index_n_heads, hidden], f32 */
};

/* The selection of the step: kept positions per token, increasing. It
 * lives in the kind's own scratch, so a shared layer finds its
 * predecessor's. */
struct dsa_selection {
	int32_t *sel;                    /* [batch, keep] */
	int32_t *nsel;                   /* [batch] */
};

/* The step's buffers in the shared arena. */
struct dsa_scratch {
	float *q;                        /* [batch, index_n_heads * index_head_dim] */
	float *k;                        /* [batch, index_head_dim] */
	float *w;                        /* [batch, index_n_heads] head weights */
	float *scores;                   /* [batch, ctx] index scores */
};

/* Positions the indexer keeps per query in a context of ctx. */
int64_t dsa_keep(const struct model_config *c, int ctx);

int dsa_bind(struct dsa_weights *w, const struct model *m, int layer);

/* Lays out the indexer's shared scratch on shared and its selection on own
 * (the kind's own scratch). Per thread it takes ctx floats from the start
 * of the thread's region, while the mixer's tasks are not running. */
void dsa_layout(struct carve *shared, struct carve *own, const struct model_config *c, int batch, int ctx,
		struct dsa_scratch *s, struct dsa_selection *sel);

/* Runs the indexer of `layer` for n rows (input f->xn, query latent qr
 * [n, q_lora_rank]): writes each row's roped key at column key_col of its
 * state row in its sequence (row_floats per position) and leaves the kept
 * positions in sel. A layer without an indexer (shared) leaves sel as it
 * is. */
void dsa_select(struct forward *f, const struct dsa_weights *w, int layer, int n, const float *qr,
		int64_t row_floats, int64_t key_col, const struct dsa_scratch *s, const struct dsa_selection *sel);

#endif
