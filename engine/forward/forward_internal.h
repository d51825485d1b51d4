/*
 * forward_internal — what the forward pass's files share: buffer widths per
 * attention kind and the attention blocks (attn_gqa.c, attn_mla.c). Each
 * block reads the normed input f->xn for n tokens at positions f->pos..,
 * appends to the layer's KV cache and writes f->att; forward.c applies
 * o_proj and the residual.
 */
#ifndef COLIBRI_ENGINE_FORWARD_INTERNAL_H
#define COLIBRI_ENGINE_FORWARD_INTERNAL_H

#include "engine/forward/forward.h"

/* Query width of a token (all heads). */
int64_t forward_q_dim(const struct model_config *c);
/* K/V projection width (GQA), 0 for MLA. */
int64_t forward_kv_dim(const struct model_config *c);
/* Attention output width, the input of o_proj. */
int64_t forward_att_dim(const struct model_config *c);
/* Floats per cached position and layer. */
int64_t forward_k_cache_dim(const struct model_config *c);
int64_t forward_v_cache_dim(const struct model_config *c);
/* Per-thread scratch floats of one attention task (a head over up to batch
 * tokens), beyond the scores. */
int64_t forward_head_scratch(const struct model_config *c, int batch);

void attn_gqa(struct forward *f, int layer, int n);
void attn_mla(struct forward *f, int layer, int n);

/* Rotates x[rot_dim] at pos with the model's pairing and YaRN factor. */
void forward_rope(const struct forward *f, float *x, int64_t pos);
/* The same with the pairing given: interleave 1 pairs (2i, 2i+1). */
void forward_rope_as(const struct forward *f, float *x, int64_t pos, int interleave);

/* Positions the DSA indexer keeps per query in a context of ctx (0 without
 * DSA): the width of f->ix_sel. */
int64_t forward_dsa_keep(const struct model_config *c, int ctx);
/* Runs the indexer of layer for n tokens (input f->xn, query latent qr
 * [n, q_lora_rank]); appends to its key cache and leaves each token's kept
 * positions, increasing, in f->ix_sel / f->ix_nsel (attn_dsa.c). */
void dsa_select(struct forward *f, int layer, int n, const float *qr);

#endif
