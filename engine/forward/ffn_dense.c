/*
 * ffn_dense — FFN_DENSE: the SwiGLU MLP down(silu(gate(x)) * up(x)) of a
 * dense layer; also the SwiGLU every expert and shared expert runs
 * (ffn_swiglu), with DeepSeek-V4's and gpt-oss's clamp when the model sets
 * swiglu_limit, and gpt-oss's biased GLU (GptOssExperts._apply_gate).
 * Inkling's dense MLP multiplies its output by mlp.global_scale.
 */
#include <math.h>

#include "compute/kernels.h"
#include "engine/forward/forward_internal.h"
#include "compute/fmath.h"

struct dense_weights {
	struct qmatrix gate;             /* [intermediate, hidden] */
	struct qmatrix up;               /* [intermediate, hidden] */
	struct qmatrix down;             /* [hidden, intermediate] */
	const float *global_scale;       /* [1] the output's factor (Inkling's mlp.global_scale), else NULL */
};

void ffn_swiglu(const struct forward *f, const struct qmatrix *g, const struct qmatrix *u, const struct qmatrix *d,
		const struct glu_bias *b, const float *in, int m, float *gate, float *up, float *out)
{
	int64_t I = g->rows, n = (int64_t)m * I;
	matmul_pair(f->pool, gate, g, up, u, in, m);
	if (b)
		for (int64_t i = 0; i < n; i++) {
			gate[i] += b->gate_up[2 * (i % I)];
			up[i] += b->gate_up[2 * (i % I) + 1];
		}
	/* The clamp (DeepSeek-V4, gpt-oss): gate <= limit, |up| <= limit,
	 * before the activation. */
	float lim = f->m->cfg.swiglu_limit, alpha = f->m->cfg.glu_alpha;
	if (lim > 0)
		for (int64_t i = 0; i < n; i++) {
			gate[i] = gate[i] > lim ? lim : gate[i];
			up[i] = up[i] > lim ? lim : up[i] < -lim ? -lim : up[i];
		}
	if (alpha > 0)
		for (int64_t i = 0; i < n; i++)
			gate[i] = (up[i] + 1.0f) * (gate[i] / (1.0f + fm_expf(-alpha * gate[i])));
	else
		swiglu(gate, gate, up, n);
	matmul(f->pool, out, d, gate, m);
	if (b)
		for (int64_t i = 0; i < (int64_t)m * d->rows; i++)
			out[i] += b->down[i % d->rows];
}

/* The step's buffers in the shared arena: gate, up [batch, intermediate],
 * the output [batch, hidden]. */
static void dense_layout(struct carve *cv, const struct model_config *c, int batch, float **gate, float **up,
			 float **out)
{
	size_t B = (size_t)batch, F = sizeof(float);
	*gate = carve(cv, B * (size_t)c->intermediate * F);
	*up = carve(cv, B * (size_t)c->intermediate * F);
	*out = carve(cv, B * (size_t)c->hidden * F);
}

static void dense_sizes(const struct model_config *c, int layer, int batch, int ctx, struct block_sizes *out)
{
	struct carve cv = { 0 };
	float *g, *u, *o;
	dense_layout(&cv, c, batch, &g, &u, &o);
	*out = (struct block_sizes){ .shared_bytes = cv.used };
}

static int dense_bind(void *wp, const struct model *m, int i)
{
	struct dense_weights *w = wp;
	int64_t h = m->cfg.hidden, f = m->cfg.intermediate;
	int rc = model_matrix(m, &w->gate, f, h, "model.layers.%d.mlp.gate_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->up, f, h, "model.layers.%d.mlp.up_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->down, h, f, "model.layers.%d.mlp.down_proj.weight", i);
	if (!rc && m->cfg.global_scale)
		rc = model_vector(m, &w->global_scale, 1, "model.layers.%d.mlp.global_scale", i);
	return rc;
}

static int dense_run(struct forward *f, int layer, int n, float *acc)
{
	const struct dense_weights *w = f->layers[layer].ffn_w;
	struct carve cv = forward_shared(f);
	float *gate, *up, *out;
	dense_layout(&cv, &f->m->cfg, f->batch, &gate, &up, &out);
	ffn_swiglu(f, &w->gate, &w->up, &w->down, NULL, f->xn, n, gate, up, out);
	float g = w->global_scale ? w->global_scale[0] : 1.0f;
	for (int64_t i = 0; i < n * (int64_t)f->m->cfg.hidden; i++)
		acc[i] += w->global_scale ? out[i] * g : out[i];
	return 0;
}

const struct block_kind block_ffn_dense = {
	.name = "dense",
	.id = 3,
	.weights_bytes = sizeof(struct dense_weights),
	.bind = dense_bind,
	.sizes = dense_sizes,
	.run = dense_run,
};
