/*
 * forward — the forward pass: tokens in, logits out, built from the shared
 * blocks (attention with optional q/k norm, RMSNorm, softmax top-k router,
 * SwiGLU experts or dense FFN) chosen by the model config.
 *
 * A forward holds the KV cache and every scratch buffer, sized once at init
 * for `ctx` positions and chunks of up to `batch` tokens; a step allocates
 * nothing. Routed experts come from the model's expert store in whatever
 * order it delivers them; each expert's output is kept per (token, slot) and
 * summed in a fixed order afterwards, so logits are bit-identical whatever
 * the cache state, delivery order or thread count.
 */
#ifndef COLIBRI_ENGINE_FORWARD_H
#define COLIBRI_ENGINE_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/model/model.h"

struct threadpool;

struct forward {
	const struct model *m;
	struct threadpool *pool;
	int32_t ctx;                 /* KV cache capacity in positions */
	int32_t batch;               /* tokens per step at most */
	int32_t pos;                 /* positions already in the cache */
	int n_threads;
	float *k_cache;              /* [n_layers, ctx, k_cache_dim]: keys, or MLA's latent + rope key */
	float *v_cache;              /* [n_layers, ctx, v_cache_dim]; empty for MLA */
	float *lat;                  /* [batch, q_lora + kv_lora + rope] MLA projections */
	/* DSA indexer (empty without DSA); ID = index_head_dim, IH = index_n_heads */
	float *ix_k_cache;           /* [n_layers, ctx, ID] roped indexer keys */
	float *ix_q;                 /* [batch, IH * ID] */
	float *ix_k;                 /* [batch, ID] */
	float *ix_w;                 /* [batch, IH] head weights */
	float *ix_scores;            /* [batch, ctx] index scores */
	int32_t *ix_sel;             /* [batch, dsa_keep] kept positions, increasing */
	int32_t *ix_nsel;            /* [batch] how many */
	float *head_scratch;         /* [n_threads, head_scratch] per-head attention scratch */
	float *x;                    /* [batch, hidden] residual stream */
	float *xn;                   /* [batch, hidden] normed input of a block */
	float *q;                    /* [batch, q_dim] */
	float *k, *v;                /* [batch, kv_dim] */
	float *att;                  /* [batch, att_dim] attention output, before o_proj */
	float *tmp;                  /* [batch, hidden] */
	float *router_logits;        /* [batch, n_experts] */
	int32_t *sel;                /* [batch, top_k] chosen experts */
	float *sel_w;                /* [batch, top_k] their weights */
	float *expert_out;           /* [batch, top_k, hidden] */
	float *e_in;                 /* [batch, hidden] tokens of one expert */
	float *e_gate, *e_up;        /* [batch, max(moe_intermediate, intermediate)] */
	float *e_down;               /* [batch, hidden] */
	int32_t *e_tok, *e_slot;     /* [batch] */
	int32_t *wanted;             /* [n_experts] union of a step */
	float *scores;               /* [n_threads, ctx] attention scratch */
	float *inv_freq;             /* [rot_dim / 2] */
	bool prefetch;               /* predict and prefetch the next MoE layer */
	float *pred_in;              /* [batch, hidden] prediction input */
	float *hidden;               /* [batch, hidden] final-normed hidden states of the last step */
	float *mtp_in;               /* [batch, 2 * hidden] MTP module input */
	float *route_scratch;        /* [n_experts] biased scores of the grouped router */
	float *pred_logits;          /* [batch, n_experts] */
	int32_t *pred_sel;           /* [batch, top_k] */
	int32_t *predicted;          /* [n_layers, n_experts] 1 if predicted this step */
	struct forward_prefetch_stats {
		uint64_t predicted;      /* experts predicted for a layer (union per step) */
		uint64_t actual;         /* experts that layer then needed */
		uint64_t correct;        /* predicted and needed */
	} pf;
};

/* Sizes and allocates everything. pool may be NULL. Free with forward_free. */
int forward_init(struct forward *f, const struct model *m, struct threadpool *pool, int ctx,
		 int batch);
void forward_free(struct forward *f);

/* Bytes forward_init allocates for this config, context, batch and threads
 * (KV cache included): what the RAM budget must set aside. */
uint64_t forward_bytes(const struct model_config *c, int ctx, int batch, int n_threads);

/* Forgets the cache (pos = 0). */
void forward_reset(struct forward *f);

/* Runs tokens[0..n) (n <= batch) at positions pos..pos+n-1 and advances pos.
 * logits: [n, vocab] when all_logits, else [vocab] for the last token; may
 * be NULL. -ENOSPC when the context is full; -errno from the expert store. */
int forward_step(struct forward *f, const int32_t *tokens, int n, float *logits, bool all_logits);

/* Runs MTP module `module` over n rows: row t combines hidden[t] (a final
 * hidden state, as forward_step leaves in f->hidden) with the token next[t]
 * that followed it, at MTP cache position pos0 + t, and gives logits for
 * the token after next[t] ([n, vocab], may be NULL) and the module's normed
 * output hidden states (may be NULL) for chained drafting. The main
 * model's cache and position are untouched. */
int forward_mtp(struct forward *f, int module, const float *hidden, const int32_t *next, int n, int pos0,
		float *logits, float *hidden_out);

#endif
