/*
 * hyper_conn — see hyper_conn.h. The streams live in f->hc_x [batch,
 * hc*hidden]; during a block f->x holds the collapsed input (what the MoE
 * prefetch reads), f->xn its norm, and the block adds its output to
 * f->hc_out, zeroed first. The mix matrices run as one matmul over the
 * step's rows (row t the same bits as alone); the rest is per row.
 */
#include "engine/forward/hyper_conn.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "compute/kernels.h"
#include "compute/fmath.h"

static int bind_of(struct hc_weights *w, const struct model *m, int layer, int64_t rows, int64_t n_scale,
		   const char *fn, const char *base, const char *scale)
{
	const struct model_config *c = &m->cfg;
	int64_t cols = (int64_t)c->hc_mult * c->hidden;
	int rc = model_matrix(m, &w->fn, rows, cols, fn, layer);
	rc = rc ? rc : model_vector(m, &w->base, rows, base, layer);
	rc = rc ? rc : model_vector(m, &w->scale, n_scale, scale, layer);
	return rc;
}

int hc_bind(struct hc_weights *w, const struct model *m, int layer, const char *site)
{
	int hc = m->cfg.hc_mult;
	if (hc < 1 || hc > HC_MULT_MAX)
		return error_set(EINVAL, "%s: hc_mult %d is outside 1..%d", m->dir, hc, HC_MULT_MAX);
	char fn[64], base[64], scale[64];
	snprintf(fn, sizeof fn, "model.layers.%%d.%s.fn", site);
	snprintf(base, sizeof base, "model.layers.%%d.%s.base", site);
	snprintf(scale, sizeof scale, "model.layers.%%d.%s.scale", site);
	return bind_of(w, m, layer, (int64_t)(2 + hc) * hc, 3, fn, base, scale);
}

int hc_head_bind(struct hc_weights *w, const struct model *m, int layer)
{
	if (layer < 0)
		return bind_of(w, m, 0, m->cfg.hc_mult, 1, "model.hc_head.hc_fn", "model.hc_head.hc_base",
			       "model.hc_head.hc_scale");
	return bind_of(w, m, layer, m->cfg.hc_mult, 1, "model.layers.%d.hc_head.hc_fn", "model.layers.%d.hc_head.hc_base",
		       "model.layers.%d.hc_head.hc_scale");
}

void hc_weights_of(float *pre, float *post, float *comb, const float *mix, const float *base, const float *scale,
		   int hc, int iters, float eps)
{
	for (int i = 0; i < hc; i++) {
		pre[i] = fm_sigmoidf(mix[i] * scale[0] + base[i]) + eps;
		post[i] = 2.0f * fm_sigmoidf(mix[hc + i] * scale[1] + base[hc + i]);
	}
	for (int i = 0; i < hc; i++) {
		float *r = comb + i * hc;
		for (int j = 0; j < hc; j++)
			r[j] = mix[2 * hc + i * hc + j] * scale[2] + base[2 * hc + i * hc + j];
		softmax(r, hc);
		for (int j = 0; j < hc; j++)
			r[j] += eps;
	}
	float sum[HC_MULT_MAX];
	for (int it = 0; it < (iters > 1 ? iters : 1); it++) {
		if (it > 0) /* rows, except before the first column pass */
			for (int i = 0; i < hc; i++) {
				float s = 0.0f;
				for (int j = 0; j < hc; j++)
					s += comb[i * hc + j];
				for (int j = 0; j < hc; j++)
					comb[i * hc + j] /= s + eps;
			}
		for (int j = 0; j < hc; j++) {
			sum[j] = 0.0f;
			for (int i = 0; i < hc; i++)
				sum[j] += comb[i * hc + j];
		}
		for (int i = 0; i < hc; i++)
			for (int j = 0; j < hc; j++)
				comb[i * hc + j] /= sum[j] + eps;
	}
}

void hc_collapse(float *out, const float *streams, const float *pre, int hc, int64_t H)
{
	for (int64_t d = 0; d < H; d++) {
		float s = 0.0f;
		for (int i = 0; i < hc; i++)
			s += pre[i] * streams[i * H + d];
		out[d] = s;
	}
}

void hc_expand(float *streams, const float *out, const float *post, const float *comb, int hc, int64_t H)
{
	float old[HC_MULT_MAX];
	for (int64_t d = 0; d < H; d++) {
		for (int j = 0; j < hc; j++)
			old[j] = streams[j * H + d];
		for (int k = 0; k < hc; k++) {
			float s = 0.0f;
			for (int j = 0; j < hc; j++)
				s += comb[j * hc + k] * old[j];
			streams[k * H + d] = s + post[k] * out[d];
		}
	}
}

/* Normed flat streams of the n rows into f->hc_flat, mixed by w->fn into
 * f->hc_mix [n, w->fn.rows]. */
static void hc_mix(struct forward *f, const struct hc_weights *w, int n)
{
	const struct model_config *c = &f->m->cfg;
	int64_t HH = (int64_t)c->hc_mult * c->hidden;
	for (int t = 0; t < n; t++)
		rmsnorm_plain(f->hc_flat + t * HH, f->hc_x + t * HH, HH, c->rms_eps);
	matmul(f->pool, f->hc_mix, &w->fn, f->hc_flat, n);
}

int hc_block(struct forward *f, const struct hc_weights *w, const float *norm, const struct block_kind *k, int l,
	     int n)
{
	const struct model_config *c = &f->m->cfg;
	int hc = c->hc_mult;
	int64_t H = c->hidden, HH = (int64_t)hc * H, M = (int64_t)(2 + hc) * hc;
	hc_mix(f, w, n);
	for (int t = 0; t < n; t++) {
		float *wt = f->hc_w + t * M; /* pre | post | comb */
		hc_weights_of(wt, wt + hc, wt + 2 * hc, f->hc_mix + t * M, w->base, w->scale, hc, c->hc_sinkhorn_iters,
			      c->hc_eps);
		hc_collapse(f->x + t * H, f->hc_x + t * HH, wt, hc, H);
		rmsnorm(f->xn + t * H, f->x + t * H, norm, H, c->rms_eps);
	}
	memset(f->hc_out, 0, (size_t)n * H * sizeof(float));
	int rc = k->run(f, l, n, f->hc_out);
	if (rc)
		return rc;
	for (int t = 0; t < n; t++) {
		const float *wt = f->hc_w + t * M;
		hc_expand(f->hc_x + t * HH, f->hc_out + t * H, wt + hc, wt + 2 * hc, hc, H);
	}
	return 0;
}

void hc_head(struct forward *f, const struct hc_weights *w, int n)
{
	const struct model_config *c = &f->m->cfg;
	int hc = c->hc_mult;
	int64_t H = c->hidden, HH = (int64_t)hc * H;
	hc_mix(f, w, n);
	for (int t = 0; t < n; t++) {
		float pre[HC_MULT_MAX];
		for (int i = 0; i < hc; i++)
			pre[i] = fm_sigmoidf(f->hc_mix[t * hc + i] * w->scale[0] + w->base[i]) + c->hc_eps;
		hc_collapse(f->x + t * H, f->hc_x + t * HH, pre, hc, H);
	}
}
