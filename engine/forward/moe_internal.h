/*
 * moe_internal — what the files of the MoE FFN share (ffn_moe.c: the
 * block kinds; moe_router.c: the router kinds; moe_experts.c: the union,
 * the rounds through the expert store, the remote experts and the sum;
 * moe_prefetch.c: the next layer's prediction): the weights, the step's
 * scratch, and their functions.
 */
#ifndef COLIBRI_ENGINE_FORWARD_MOE_INTERNAL_H
#define COLIBRI_ENGINE_FORWARD_MOE_INTERNAL_H

#include "engine/forward/forward_internal.h"

struct moe_weights {
	struct qmatrix router;           /* [router_rows, hidden], f32 */
	float global_scale;              /* mlp.gate.global_scale (Inkling), else 1 */
	const float *router_bias;        /* [n_experts] e_score_correction_bias, or NULL */
	const float *logit_bias;         /* [n_experts] mlp.router.bias added to the logits (gpt-oss), or NULL */
	const float *gate_up_bias;       /* [n_experts, 2 * moe_intermediate] (expert_bias), or NULL */
	const float *down_bias;          /* [n_experts, hidden] */
	const float *tid2eid;            /* [vocab, top_k] experts of each token id (hash-routed layer), or NULL */
	const struct manifest_expert_layer *experts; /* record layout of the layer's expert file */
	const struct route_kind *route; /* block_route: the config's, or hash routing on a hashed layer */
};

/* FFN_MOE_SHARED: the routed experts first (so a pointer to either kind's
 * weights is one to its moe_weights), then the shared experts. */
struct moe_shared_weights {
	struct moe_weights moe;
	struct qmatrix gate;             /* [shared_intermediate, hidden] */
	struct qmatrix up;
	struct qmatrix down;             /* [hidden, shared_intermediate] */
	struct qmatrix share;            /* [1, hidden] f32 shared_expert_gate (shared_gate), else unset */
};

/* The step's buffers in the shared arena. */
struct moe_scratch {
	float *logits;                   /* [batch, router_rows] router logits, then scores */
	float *shared_w;                 /* [batch, n_shared_experts] ROUTER_SIGMOID_SHARED: the shared
					  * experts' weights */
	int32_t *sel;                    /* [batch, top_k] chosen experts */
	float *sel_w;                    /* [batch, top_k] their weights */
	float *expert_out;               /* [batch, top_k, hidden] */
	float *e_in;                     /* [batch, hidden] tokens of one expert */
	float *gate, *up;                /* [batch, max(moe_intermediate, shared width)] */
	float *e_down;                   /* [batch, hidden] */
	int32_t *e_tok, *e_slot;         /* [batch] */
	int32_t *wanted;                 /* [n_experts] union of the chunk (over MPI: this rank's part) */
	int32_t *remote;                 /* [n_experts] over MPI: the union's experts other ranks serve */
	int32_t *pred_remote;            /* [n_experts] over MPI: the prediction's */
	float *choice;                   /* [n_experts] biased scores of the grouped router */
	float *pred_in;                  /* [batch, hidden] prediction input */
	float *pred_logits;              /* [batch, router_rows] */
	int32_t *pred_sel;               /* [batch, top_k] */
	float *out;                      /* [batch, hidden] the shared experts' output */
	float *share;                    /* [batch] the shared expert gate's logit */
};

/* Rows of a layer's router: one per routed expert, and with
 * ROUTER_SIGMOID_SHARED one per shared expert after them. */
static inline int router_rows(const struct model_config *c)
{
	return c->n_experts + (c->router == ROUTER_SIGMOID_SHARED ? c->n_shared_experts : 0);
}

/* The step's scratch laid out in cv (ffn_moe.c). */
void moe_layout(struct carve *cv, const struct model_config *c, int batch, struct moe_scratch *s);

/* Each of the n rows' experts and weights from its router logits in
 * s->logits (moe_router.c). */
void moe_route(const struct forward *f, const struct moe_weights *w, const struct moe_scratch *s, int n);

/* The routed experts of one layer over the n rows of f->xn, added to acc
 * in slot order (moe_experts.c). */
int moe_routed_run(struct forward *f, const struct moe_weights *w, const struct moe_scratch *s, int layer, int n,
		   float *acc);

/* The next layer's prediction and prefetch, started while this layer's
 * experts are read (moe_prefetch.c), and the score of this layer's
 * prediction against the union it needed (s->wanted[0..n_wanted)). */
void moe_prefetch_next(struct forward *f, const struct moe_scratch *s, int layer, int n);
void moe_prefetch_score(struct forward *f, const struct moe_scratch *s, int layer, int n_wanted);

#endif
