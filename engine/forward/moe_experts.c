/*
 * moe_experts — the routed experts of one layer once routed:
 *
 *   union   the experts any token of the chunk chose, once each, ascending;
 *   place   requested from the expert store in rounds of its capacity; the
 *           store delivers resident ones first, the others as reads land;
 *   overlap each delivered expert runs over the tokens that chose it while
 *           the next MoE layer's predicted experts are prefetched;
 *   remote  experts other processes serve (remote.h: over MPI, engine/dist)
 *           go out with the rows and the routing once this process's reads
 *           have started, and their answers land in the same cells; the
 *           serving side runs ffn_moe_serve, the same code over the same
 *           rows;
 *   sum     each expert's output lands in its (token, slot) cell and is
 *           added in slot order, so neither delivery order, the rounds nor
 *           where an expert ran changes a bit.
 */
#include <errno.h>
#include <string.h>

#include "base/error.h"
#include "compute/kernels.h"
#include "engine/forward/moe_internal.h"
#include "storage/expert_store.h"

/* Consumes the store's deliveries of the current request, in delivery
 * order: each expert runs over the tokens that chose it. */
static int experts_run(struct forward *f, const struct moe_weights *w, const struct moe_scratch *s, int layer,
		       int n)
{
	const struct model_config *c = &f->m->cfg;
	struct expert_store *store = f->m->store;
	int64_t H = c->hidden;
	int K = c->top_k, rc;
	int32_t e;
	const void *rec;
	while ((rc = expert_store_next(store, &e, &rec)) > 0) {
		int m = 0;
		for (int t = 0; t < n; t++)
			for (int k = 0; k < K; k++)
				if (s->sel[t * K + k] == e) {
					s->e_tok[m] = t;
					s->e_slot[m] = k;
					memcpy(s->e_in + m * H, f->xn + t * H, H * sizeof(float));
					m++;
				}
		struct qmatrix g, u, d;
		model_expert_part(&g, w->experts, rec, EXPERT_PART_GATE);
		model_expert_part(&u, w->experts, rec, EXPERT_PART_UP);
		model_expert_part(&d, w->experts, rec, EXPERT_PART_DOWN);
		struct glu_bias b = { 0 };
		if (w->gate_up_bias)
			b = (struct glu_bias){ w->gate_up_bias + (size_t)e * 2 * c->moe_intermediate,
					       w->down_bias + (size_t)e * H };
		ffn_swiglu(f, &g, &u, &d, w->gate_up_bias ? &b : NULL, s->e_in, m, s->gate, s->up, s->e_down);
		expert_store_release(store, layer, e);
		for (int j = 0; j < m; j++)
			memcpy(s->expert_out + ((size_t)s->e_tok[j] * K + s->e_slot[j]) * H, s->e_down + j * H,
			       H * sizeof(float));
	}
	return rc < 0 ? rc : 0;
}

/* Runs this rank's experts wanted[0..n_wanted) in rounds of at most the
 * store's capacity; over MPI sends remote[0..n_remote) to the ranks that
 * serve them once this rank's first reads (and, on the first pass, the
 * next layer's prediction) have started, and collects their rows. Each
 * expert's output lands in its (token, slot) cell, so neither the rounds
 * nor the ranks change the sum. */
static int routed_pass(struct forward *f, const struct moe_weights *w, const struct moe_scratch *s, int layer, int n,
		       int n_wanted, int n_remote, bool first_pass)
{
	struct expert_store *store = f->m->store;
	const struct remote_experts *r = &f->remote;
	int cap = expert_store_capacity(store, layer), rc = 0;
	bool sent = false;
	if (cap < 1)
		return error_set(EINVAL, "layer %d: the expert store has no frames", layer);
	for (int first = 0; !rc && (first < n_wanted || first == 0); first += cap) {
		int cnt = n_wanted - first < cap ? n_wanted - first : cap;
		if (cnt > 0)
			rc = expert_store_request(store, layer, s->wanted + first, cnt);
		if (!rc && first == 0) {
			if (first_pass)
				moe_prefetch_next(f, s, layer, n); /* overlaps this layer's reads and compute */
			/* The first pass tells every rank of the layer; a later
			 * one only goes out for rows still owed elsewhere. */
			if (r->ops && (first_pass || n_remote > 0)) {
				rc = r->ops->send(r->ctx, layer, n, s->sel, f->xn, s->remote, n_remote);
				sent = !rc;
			}
		}
		if (!rc && cnt > 0)
			rc = experts_run(f, w, s, layer, n);
		if (cnt <= 0)
			break;
	}
	if (sent) {
		/* Even after a local failure: nothing may stay in flight. */
		int crc = r->ops->collect(r->ctx, layer, s->expert_out);
		rc = rc ? rc : crc;
	}
	return rc;
}

/* The routed experts of one layer, added to acc in slot order. */
int moe_routed_run(struct forward *f, const struct moe_weights *w, const struct moe_scratch *s, int layer, int n,
		      float *acc)
{
	const struct model_config *c = &f->m->cfg;
	int64_t H = c->hidden;
	int E = c->n_experts, K = c->top_k, R = router_rows(c);
	matmul(f->pool, s->logits, &w->router, f->xn, n);
	for (int t = 0; w->logit_bias && t < n; t++)
		for (int e = 0; e < E; e++)
			s->logits[(size_t)t * R + e] += w->logit_bias[e];
	moe_route(f, w, s, n);

	/* Union: each expert any token of the chunk needs, once, ascending. */
	memset(s->wanted, 0, (size_t)E * sizeof(int32_t));
	for (int i = 0; i < n * K; i++)
		s->wanted[s->sel[i]] = 1;
	int n_wanted = 0;
	for (int e = 0; e < E; e++)
		if (s->wanted[e])
			s->wanted[n_wanted++] = e;
	moe_prefetch_score(f, s, layer, n_wanted);
	/* Over MPI: this rank's experts stay in wanted, the others go out
	 * once this rank's reads and the prediction have started. */
	const struct remote_experts *r = &f->remote;
	int n_remote = 0;
	if (r->ops) {
		n_remote = r->ops->partition(r->ctx, layer, s->wanted, &n_wanted, s->remote);
		r->ops->count_local(r->ctx, n_wanted);
	}
	int rc = routed_pass(f, w, s, layer, n, n_wanted, n_remote, true);
	/* A rank lost mid-layer (--replicas): the rows it owed, again, from
	 * the ranks that serve its experts now (rank 0 among them). */
	while (!rc && r->ops && (n_wanted = r->ops->redo(r->ctx, s->wanted)) > 0) {
		n_remote = r->ops->partition(r->ctx, layer, s->wanted, &n_wanted, s->remote);
		r->ops->count_local(r->ctx, n_wanted);
		rc = routed_pass(f, w, s, layer, n, n_wanted, n_remote, false);
	}
	if (rc)
		return rc;
	/* Fixed-order sum: slot 0..K-1, independent of delivery order. */
	for (int t = 0; t < n; t++) {
		float *x = acc + t * H;
		for (int k = 0; k < K; k++)
			axpy_f32(x, s->sel_w[t * K + k], s->expert_out + ((size_t)t * K + k) * H, H);
	}
	return 0;
}

int ffn_moe_serve(struct forward *f, int layer, const int32_t *experts, int n_exp, const int32_t *sel,
		  const float *xn, int n, int hint_layer, const int32_t *hints, int n_hint, float *rows)
{
	const struct model_config *c = &f->m->cfg;
	struct expert_store *store = f->m->store;
	if (layer < 0 || layer >= f->n_layers ||
	    (f->layers[layer].ffn != &block_ffn_moe && f->layers[layer].ffn != &block_ffn_moe_shared))
		return error_set(EINVAL, "layer %d has no routed experts to serve", layer);
	if (n < 0 || n > f->batch)
		return error_set(EINVAL, "layer %d: %d rows, beyond this rank's batch of %d", layer, n, f->batch);
	const struct moe_weights *w = f->layers[layer].ffn_w;
	struct carve cv = forward_shared(f);
	struct moe_scratch s;
	moe_layout(&cv, c, f->batch, &s);
	int64_t H = c->hidden;
	int K = c->top_k, rc = 0;
	if (!f->prefetch)
		n_hint = 0; /* this rank's --no-prefetch */
	if (n_exp > 0) {
		memcpy(s.sel, sel, (size_t)n * K * sizeof *sel);
		memcpy(f->xn, xn, (size_t)n * H * sizeof *xn);
		memcpy(s.wanted, experts, (size_t)n_exp * sizeof *experts);
	}
	int cap = expert_store_capacity(store, layer);
	if (cap < 1)
		return error_set(EINVAL, "layer %d: the expert store has no frames", layer);
	bool hinted = false;
	for (int first = 0; !rc && first < n_exp; first += cap) {
		int cnt = n_exp - first < cap ? n_exp - first : cap;
		rc = expert_store_request(store, layer, s.wanted + first, cnt);
		if (!rc && !hinted && n_hint > 0 && hint_layer != layer) {
			expert_store_prefetch(store, hint_layer, hints, n_hint);
			hinted = true;
		}
		if (!rc)
			rc = experts_run(f, w, &s, layer, n);
	}
	if (rc)
		return rc;
	if (!hinted && n_hint > 0 && hint_layer != layer)
		expert_store_prefetch(store, hint_layer, hints, n_hint);
	int m = 0;
	for (int i = 0; i < n_exp; i++)
		for (int t = 0; t < n; t++)
			for (int k = 0; k < K; k++)
				if (s.sel[t * K + k] == experts[i])
					memcpy(rows + (size_t)m++ * H, s.expert_out + ((size_t)t * K + k) * H,
					       (size_t)H * sizeof(float));
	return m;
}
