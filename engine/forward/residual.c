/*
 * residual — the residual kinds (block.h, struct join_kind): how a
 * layer's two blocks join the residual stream.
 *
 *   plain  x += block(rmsnorm(x)): every family but the two below;
 *   hc     DeepSeek-V4's hyper-connections: hc_mult streams collapsed into
 *          the block's input and its output mixed back in (hyper_conn.c);
 *   sconv  Inkling: the block's output through a short causal convolution
 *          before it joins x (sconv.c), whose history is the layer's
 *          state after the block kind's own fixed bytes.
 */
#include "base/error.h"
#include "compute/kernels.h"
#include "engine/forward/forward_internal.h"
#include "engine/forward/hyper_conn.h"

static int plain_bind(struct layer *ly, const struct model *m, int layer)
{
	return 0;
}

static size_t no_state(const struct model_config *c)
{
	return 0;
}

static int plain_run(struct forward *f, const struct block_kind *k, const float *norm, int layer, int slot, int n)
{
	const struct model_config *c = &f->m->cfg;
	int64_t H = c->hidden;
	for (int t = 0; t < n; t++)
		rmsnorm(f->xn + t * H, f->x + t * H, norm, H, c->rms_eps);
	return k->run(f, layer, n, f->x);
}

static int hc_layer_bind(struct layer *ly, const struct model *m, int layer)
{
	int rc = hc_bind(&ly->attn_hc, m, layer, "attn_hc");
	return rc ? rc : hc_bind(&ly->ffn_hc, m, layer, "ffn_hc");
}

static int hc_run(struct forward *f, const struct block_kind *k, const float *norm, int layer, int slot, int n)
{
	const struct layer *ly = &f->layers[layer];
	return hc_block(f, slot ? &ly->ffn_hc : &ly->attn_hc, norm, k, layer, n);
}

static int sconv_bind(struct layer *ly, const struct model *m, int layer)
{
	const struct model_config *c = &m->cfg;
	struct qmatrix a, b;
	int rc = model_f32_matrix(m, &a, c->hidden, c->sconv_kernel, "model.layers.%d.attn_sconv.conv1d.weight", layer);
	rc = rc ? rc : model_f32_matrix(m, &b, c->hidden, c->sconv_kernel, "model.layers.%d.mlp_sconv.conv1d.weight",
					layer);
	ly->sconv[0] = rc ? NULL : a.data;
	ly->sconv[1] = rc ? NULL : b.data;
	return rc;
}

static size_t sconv_state(const struct model_config *c)
{
	return sconv_state_bytes(c, c->hidden);
}

const struct join_kind join_plain = {
	.name = "plain", .id = 0, .bind = plain_bind, .state_fixed_bytes = no_state, .run = plain_run,
};
const struct join_kind join_hc = {
	.name = "hc", .id = 1, .bind = hc_layer_bind, .state_fixed_bytes = no_state, .run = hc_run,
};
const struct join_kind join_sconv = {
	.name = "sconv", .id = 2, .bind = sconv_bind, .state_fixed_bytes = sconv_state, .run = sconv_block,
};

const struct join_kind *const join_kinds[JOIN_KINDS] = { &join_plain, &join_hc, &join_sconv };

const struct join_kind *block_join(enum residual_kind k)
{
	switch (k) {
	case RESIDUAL_PLAIN: return &join_plain;
	case RESIDUAL_HC: return &join_hc;
	case RESIDUAL_SCONV: return &join_sconv;
	}
	return NULL;
}
