/*
 * moe_prefetch — the next MoE layer's experts, predicted and read ahead:
 * its router runs on this layer's residual stream (normed with its own FFN
 * norm) while this layer's experts are read, and while recent predictions
 * were precise (FORWARD_PREFETCH_PRECISION) their reads start at low
 * priority; a hash-routed layer's experts follow from the token ids alone.
 * The prediction never touches the computation: prefetch on or off, the
 * logits are the same bits. Over remote experts (remote.h) this process
 * reads only its own share; the rest travels as hints.
 */
#include <string.h>

#include "compute/kernels.h"
#include "engine/forward/moe_internal.h"
#include "storage/expert_store.h"

/* The next MoE layer after `layer`, or -1. */
static int moe_next_layer(const struct model_config *c, int layer)
{
	for (int l = layer + 1; l < c->n_layers; l++)
		if (model_config_layer_moe(c, l))
			return l;
	return -1;
}

/* Starts the reads of ids[0..n) of layer: over MPI only this rank's, the
 * others travel to their ranks with the next request. */
static void prefetch_ids(struct forward *f, const struct moe_scratch *s, int layer, int32_t *ids, int n)
{
	const struct remote_experts *r = &f->remote;
	if (r->ops) {
		int nr = r->ops->partition(r->ctx, layer, ids, &n, s->pred_remote);
		r->ops->hint(r->ctx, layer, s->pred_remote, nr);
	}
	expert_store_prefetch(f->m->store, layer, ids, n);
}

/* A hash-routed layer's experts follow from the token ids alone: marks
 * them as the layer's prediction and starts their reads, whatever the
 * recent precision (the prediction is exact, so no read is wasted). */
static void prefetch_hashed(struct forward *f, const struct moe_scratch *s, int layer, int n)
{
	const struct model_config *c = &f->m->cfg;
	const struct moe_weights *w = f->layers[layer].ffn_w;
	int E = c->n_experts, K = c->top_k;
	int32_t *mark = f->predicted + (size_t)layer * E;
	memset(mark, 0, (size_t)E * sizeof *mark);
	for (int t = 0; t < n; t++)
		for (int k = 0; k < K; k++)
			mark[(int32_t)w->tid2eid[(size_t)f->row_tok[t] * K + k]] = 1;
	int np = 0;
	for (int e = 0; e < E; e++)
		if (mark[e])
			s->pred_sel[np++] = e;
	f->pf.predicted += (uint64_t)np;
	f->pf.prefetch_steps++;
	f->pf.issued_steps++;
	prefetch_ids(f, s, layer, s->pred_sel, np);
}

void ffn_moe_prefetch_first(struct forward *f, int n)
{
	const struct model_config *c = &f->m->cfg;
	int first = moe_next_layer(c, -1);
	if (!f->prefetch || first < 0)
		return;
	const struct moe_weights *w = f->layers[first].ffn_w;
	if (!w->tid2eid)
		return;
	struct carve cv = forward_shared(f); /* no block runs yet: the arena is free */
	struct moe_scratch s;
	moe_layout(&cv, c, f->batch, &s);
	prefetch_hashed(f, &s, first, n);
}

/* Predicts the experts of the next MoE layer by running its router on this
 * layer's residual stream (normed with its own FFN norm) and, while recent
 * predictions were precise (FORWARD_PREFETCH_PRECISION), starts their reads
 * at low priority. The prediction never touches the computation: prefetch
 * on or off, the logits are the same bits. */
void moe_prefetch_next(struct forward *f, const struct moe_scratch *s, int layer, int n)
{
	const struct model *m = f->m;
	const struct model_config *c = &m->cfg;
	int next = moe_next_layer(c, layer);
	if (!f->prefetch || next < 0)
		return;
	const struct layer *ly = &f->layers[next];
	const struct moe_weights *w = ly->ffn_w;
	if (w->tid2eid) {
		prefetch_hashed(f, s, next, n);
		return;
	}
	int64_t H = c->hidden;
	int E = c->n_experts, K = c->top_k, R = router_rows(c);
	for (int t = 0; t < n; t++)
		rmsnorm(s->pred_in + t * H, f->x + t * H, ly->ffn_norm, H, c->rms_eps);
	matmul(f->pool, s->pred_logits, &w->router, s->pred_in, n);
	int32_t *mark = f->predicted + (size_t)next * E;
	memset(mark, 0, (size_t)E * sizeof *mark);
	for (int t = 0; t < n; t++) {
		float *pl = s->pred_logits + (size_t)t * R;
		if (w->route->predict)
			w->route->predict(w, E, pl);
		if (w->logit_bias)
			for (int e = 0; e < E; e++)
				pl[e] += w->logit_bias[e];
		/* Softmax is monotone: top-k of the logits is top-k of the probabilities. */
		topk(s->pred_sel + t * K, pl, E, K);
		for (int k = 0; k < K; k++)
			mark[s->pred_sel[t * K + k]] = 1;
	}
	int np = 0;
	for (int e = 0; e < E; e++)
		if (mark[e])
			s->pred_sel[np++] = e; /* pred_sel reused as the id list */
	f->pf.predicted += (uint64_t)np;
	f->pf.prefetch_steps++;
	if (f->pf.precision_ema < f->prefetch_precision)
		return;
	f->pf.issued_steps++;
	prefetch_ids(f, s, next, s->pred_sel, np);
}

/* Scores the prediction made for this layer against what it needed, and
 * moves the recent precision that decides whether predictions are read
 * (over about the last 16 layer predictions). */
void moe_prefetch_score(struct forward *f, const struct moe_scratch *s, int layer, int n_wanted)
{
	const int32_t *mark = f->predicted + (size_t)layer * f->m->cfg.n_experts;
	int marked = 0, correct = 0;
	for (int e = 0; e < f->m->cfg.n_experts; e++)
		marked += mark[e] != 0;
	if (!f->prefetch || !marked)
		return;
	for (int i = 0; i < n_wanted; i++)
		correct += mark[s->wanted[i]] != 0;
	f->pf.actual += (uint64_t)n_wanted;
	f->pf.correct += (uint64_t)correct;
	/* A hash-routed layer's exact prediction says nothing about the routers'. */
	const struct moe_weights *w = f->layers[layer].ffn_w;
	if (!w->tid2eid)
		f->pf.precision_ema += ((double)correct / marked - f->pf.precision_ema) / 16.0;
}
