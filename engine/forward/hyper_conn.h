/*
 * hyper_conn — RESIDUAL_HC, DeepSeek-V4's manifold-constrained
 * hyper-connections, as transformers v5.15.0's DeepseekV4HyperConnection
 * and DeepseekV4HyperHead compute them. Internal to engine/forward/.
 *
 * A token's residual is hc streams of hidden floats. Before a block:
 *   flat = x / sqrt(mean(x^2) + rms_eps) over all hc*hidden floats
 *   mix  = fn . flat                               [(2+hc)*hc]
 *   pre  = sigmoid(mix[0:hc] * scale[0] + base[0:hc]) + eps
 *   post = 2 * sigmoid(mix[hc:2hc] * scale[1] + base[hc:2hc])
 *   comb = softmax over j of (mix[2hc:] * scale[2] + base[2hc:])[i][j], + eps,
 *          then columns normalised, then (iters - 1) times rows then
 *          columns, each sum + eps in the denominator
 *   the block's input is sum_s pre[s] * stream[s];
 * after it: stream'[k] = sum_j comb[j][k] * stream[j] + post[k] * out.
 * The final head collapses with pre = sigmoid(hc_fn . flat * hc_scale +
 * hc_base) + eps. Everything is per token, so a row's result does not
 * depend on the rows beside it.
 */
#ifndef COLIBRI_ENGINE_FORWARD_HYPER_CONN_H
#define COLIBRI_ENGINE_FORWARD_HYPER_CONN_H

#include "engine/forward/forward_internal.h"

/* hc_mult at most (the Sinkhorn matrix lives on the stack). */
#define HC_MULT_MAX 16

/* Binds "<prefix>.fn", ".base", ".scale" of layer (prefix with %d), or with
 * head the model's hc_head.{hc_fn, hc_base, hc_scale} (layer -1) or an MTP
 * layer's (layers.L.hc_head.*). */
int hc_bind(struct hc_weights *w, const struct model *m, int layer, const char *site);
int hc_head_bind(struct hc_weights *w, const struct model *m, int layer);

/* pre[hc], post[hc] and comb[hc*hc] (row i: input stream i) from one
 * token's mix [(2+hc)*hc]. */
void hc_weights_of(float *pre, float *post, float *comb, const float *mix, const float *base, const float *scale,
		   int hc, int iters, float eps);

/* out[H] = sum_s pre[s] * streams[s*H ..]. */
void hc_collapse(float *out, const float *streams, const float *pre, int hc, int64_t H);

/* streams[k] = sum_j comb[j][k] * streams[j] + post[k] * out, in place. */
void hc_expand(float *streams, const float *out, const float *post, const float *comb, int hc, int64_t H);

/* The forward's side: the step's n rows through one hyper-connected block
 * (kind k of layer l, norm before it), and a final collapse of the streams
 * into f->x by w (the model's hc_head, or an MTP module's). */
int hc_block(struct forward *f, const struct hc_weights *w, const float *norm, const struct block_kind *k, int l,
	     int n);
void hc_head(struct forward *f, const struct hc_weights *w, int n);

#endif
