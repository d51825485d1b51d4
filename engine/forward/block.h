/*
 * block — the block kinds a layer's row is made of (model_config.h, struct
 * layer_row), and the one interface every kind implements.
 *
 * Each kind owns a weights struct and a file: mixer_gqa.c, mixer_mla.c
 * (MLA, and MLA + the DSA indexer of dsa_indexer.c), mixer_gdn.c (Gated
 * DeltaNet), mixer_v4.c (DeepSeek-V4's attention, with the compressors of
 * v4_compress.c), mixer_rel.c (Inkling's relative-position attention),
 * ffn_dense.c,
 * ffn_moe.c (routed experts, with or without shared experts, whose router
 * is a kind of its own: struct route_kind below). How a layer's blocks
 * join the residual stream is a kind too (struct join_kind below: plain,
 * hyper-connections, short convolutions). The forward pass knows a kind
 * only through these tables:
 *
 *   bind   finds and checks the layer's tensors in the container and fills
 *          the kind's weights struct (zeroed, weights_bytes);
 *   sizes  what one step of up to `batch` tokens in a context of `ctx`
 *          needs, as a struct block_sizes (below);
 *   run    takes the step's n rows of the normed input f->xn (row t a token
 *          of sequence f->row_seq[t] at position f->row_pos[t]), appends to
 *          that sequence's state and adds its output to acc [n, hidden]
 *          (the residual stream for RESIDUAL_PLAIN).
 *
 * Sequence state is generic (seq_state.h): a kind declares bytes per
 * position and fixed bytes per layer and lays them out as it likes; reset,
 * truncation, snapshot and restore, save and load work on those bytes
 * without knowing the kind.
 *
 * Adding a family: parse its config into rows (model_config.c set_rows),
 * add the tensor inventory of any new kind (model_tensors.c), add the kind
 * here and its file; nothing in the generation loop, the store or the
 * commands changes. docs/ARCHITECTURE.md has the recipe.
 */
#ifndef COLIBRI_ENGINE_FORWARD_BLOCK_H
#define COLIBRI_ENGINE_FORWARD_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model/model.h"

struct forward;

/* Bytes a kind needs in one layer. */
struct block_sizes {
	size_t shared_bytes;      /* scratch valid during one run call: one arena for every kind */
	size_t private_bytes;     /* scratch of this kind kept between calls (a selection a later
				   * layer reuses, marks for the next layer's prefetch) */
	size_t thread_bytes;      /* scratch of each worker thread during one run */
	size_t state_pos_bytes;   /* sequence state per position (KV cache, latents, indexer keys) */
	size_t state_fixed_bytes; /* sequence state that does not grow (recurrent, convolution) */
};

struct block_kind {
	const char *name;
	int id;                   /* index in block_kinds[] */
	size_t weights_bytes;
	int (*bind)(void *w, const struct model *m, int layer);
	void (*sizes)(const struct model_config *c, int layer, int batch, int ctx, struct block_sizes *out);
	int (*run)(struct forward *f, int layer, int n, float *acc);
	const char *state_what;   /* what its per-position state holds in a layer, for `plan` ("K and V");
				   * NULL: nothing per position */
};

extern const struct block_kind block_gqa, block_mla, block_mla_dsa, block_gdn, block_v4, block_rel;
extern const struct block_kind block_ffn_dense, block_ffn_moe, block_ffn_moe_shared;

#define BLOCK_KINDS 9
extern const struct block_kind *const block_kinds[BLOCK_KINDS];

/* The kinds of a row. */
const struct block_kind *block_mixer(enum mixer_kind k);
const struct block_kind *block_ffn(enum ffn_kind k);

struct layer;

/* A join kind: how a layer's two blocks join the residual stream, one
 * per enum residual_kind (residual.c). bind: the layer's own weights for it, into ly; state_fixed_bytes:
 * what it keeps per block after the block kind's own fixed state; run:
 * block k (slot 0 the mixer, 1 the FFN) of layer over the step's n rows,
 * with that block's norm, its output joined to the stream. */
struct join_kind {
	const char *name;
	int id;                   /* index in join_kinds[] */
	int (*bind)(struct layer *ly, const struct model *m, int layer);
	size_t (*state_fixed_bytes)(const struct model_config *c);
	int (*run)(struct forward *f, const struct block_kind *k, const float *norm, int layer, int slot, int n);
};

extern const struct join_kind join_plain, join_hc, join_sconv;

#define JOIN_KINDS 3
extern const struct join_kind *const join_kinds[JOIN_KINDS];

const struct join_kind *block_join(enum residual_kind k);

struct moe_weights;

/* A router kind: how FFN_MOE turns a token's router logits into its
 * experts (moe_router.c). route: logits [router_rows] (overwritten with
 * scores) into sel [top_k] and their weights wt [top_k], with
 * ROUTER_SIGMOID_SHARED also the shared experts' weights shared_w
 * [n_shared_experts]; choice [n_experts] is scratch. predict: the scores,
 * in place, whose top_k the next layer's prediction takes (NULL: the
 * logits themselves). A layer's kind is the config's router, or hash
 * routing on a layer with a tid2eid table. */
struct route_kind {
	const char *name;
	int id;                   /* index in route_kinds[] */
	void (*route)(const struct model_config *c, const struct moe_weights *w, int32_t token, float *logits,
		      int32_t *sel, float *wt, float *shared_w, float *choice);
	void (*predict)(const struct moe_weights *w, int n_experts, float *logits);
};

extern const struct route_kind router_softmax, router_sigmoid_grouped, router_sqrtsoftplus, router_hash,
	router_topk_softmax, router_sigmoid_shared;

#define ROUTE_KINDS 6
extern const struct route_kind *const route_kinds[ROUTE_KINDS];

const struct route_kind *block_route(enum router_kind k, bool hashed);

/* A hyper-connection of RESIDUAL_HC (DeepSeek-V4, hyper_conn.h): the
 * weights that turn hc_mult residual streams into a block's input and mix
 * its output back in; the final head's (hc_head) has hc rows and one
 * scale. */
struct hc_weights {
	struct qmatrix fn;                /* [(2+hc)*hc, hc*hidden]; hc_head: [hc, hc*hidden] */
	const float *base;                /* [(2+hc)*hc]; hc_head: [hc] */
	const float *scale;               /* [3]: pre, post, comb; hc_head: [1] */
};

/* One layer of the forward pass: its norms and its two blocks. */
struct layer {
	const float *attn_norm;           /* [hidden] before the mixer */
	const float *ffn_norm;            /* [hidden] before the FFN */
	const struct block_kind *mixer, *ffn;
	const struct join_kind *join;     /* how its blocks join the residual stream */
	void *mixer_w, *ffn_w;            /* the kinds' weights structs */
	struct hc_weights attn_hc, ffn_hc; /* RESIDUAL_HC only */
	const float *sconv[2];            /* RESIDUAL_SCONV: [hidden, sconv_kernel] after the mixer, the FFN */
	size_t sconv_off[2];              /* where their history starts in the layer's state parts */
};

/* A DeepSeek/GLM multi-token-prediction module: the final hidden state of
 * position t and the token at t+1 become logits for t+2 through one more
 * decoder layer (layers[n_layers + i]). DeepSeek-V4's (RESIDUAL_HC) takes
 * the hc streams before the final collapse, projects the embedding and
 * each stream apart (e_proj, h_proj, summed) and ends in its own hc_head. */
struct mtp_weights {
	const float *enorm;               /* [hidden] norm of the next token's embedding */
	const float *hnorm;               /* [hidden] norm of the hidden state (of each stream) */
	struct qmatrix eh_proj;           /* [hidden, 2*hidden]: [enorm(e); hnorm(h)] -> hidden */
	struct qmatrix e_proj, h_proj;    /* RESIDUAL_HC: [hidden, hidden] each, instead of eh_proj */
	struct hc_weights hc_head;        /* RESIDUAL_HC: the module's own collapse */
	const float *head_norm;           /* [hidden] shared_head.norm */
	struct qmatrix head;              /* [vocab, hidden] shared_head.head, or lm_head */
	struct qmatrix embed;             /* [vocab, hidden] its embed_tokens, or the model's */
};

/* Sequential pieces of a scratch region: carve(&c, bytes) returns the next
 * 64-byte aligned piece, or with a NULL base only counts (so one layout
 * function both sizes a region and lays it out). */
struct carve {
	uint8_t *base;
	size_t used;
};

static inline void *carve(struct carve *c, size_t bytes)
{
	void *p = c->base ? c->base + c->used : NULL;
	c->used += (bytes + 63) & ~(size_t)63;
	return p;
}

#endif
