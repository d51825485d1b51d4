/*
 * layers — the table the forward pass walks: for each row of the config
 * (decoder layers, then the MTP layers the container holds), its norms and
 * its two block kinds with their bound weights; and the MTP modules' own
 * input and output weights.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/forward/forward_internal.h"
#include "engine/forward/hyper_conn.h"

const struct block_kind *const block_kinds[BLOCK_KINDS] = {
	&block_gqa, &block_mla, &block_mla_dsa, &block_ffn_dense, &block_ffn_moe, &block_ffn_moe_shared, &block_gdn,
	&block_v4, &block_rel,
};

const struct block_kind *block_mixer(enum mixer_kind k)
{
	switch (k) {
	case MIXER_GQA: return &block_gqa;
	case MIXER_MLA: return &block_mla;
	case MIXER_MLA_DSA: return &block_mla_dsa;
	case MIXER_GDN: return &block_gdn;
	case MIXER_V4: return &block_v4;
	case MIXER_REL: return &block_rel;
	}
	return NULL;
}

const struct block_kind *block_ffn(enum ffn_kind k)
{
	switch (k) {
	case FFN_DENSE: return &block_ffn_dense;
	case FFN_MOE: return &block_ffn_moe;
	case FFN_MOE_SHARED: return &block_ffn_moe_shared;
	}
	return NULL;
}

static int bind_kind(const struct block_kind *k, void **w, const struct model *m, int layer)
{
	*w = calloc(1, k->weights_bytes);
	if (!*w)
		return error_set(ENOMEM, "out of memory");
	return k->bind(*w, m, layer);
}

static int bind_mtp(const struct model *m, int layer, struct mtp_weights *w)
{
	const struct model_config *c = &m->cfg;
	int64_t h = c->hidden;
	int rc = 0;
	rc = rc ? rc : model_vector(m, &w->enorm, h, "model.layers.%d.enorm.weight", layer);
	rc = rc ? rc : model_vector(m, &w->hnorm, h, "model.layers.%d.hnorm.weight", layer);
	if (c->rows[layer].residual == RESIDUAL_HC) {
		rc = rc ? rc : model_matrix(m, &w->e_proj, h, h, "model.layers.%d.e_proj.weight", layer);
		rc = rc ? rc : model_matrix(m, &w->h_proj, h, h, "model.layers.%d.h_proj.weight", layer);
		rc = rc ? rc : hc_head_bind(&w->hc_head, m, layer);
	} else {
		rc = rc ? rc : model_matrix(m, &w->eh_proj, h, 2 * h, "model.layers.%d.eh_proj.weight", layer);
	}
	rc = rc ? rc : model_vector(m, &w->head_norm, h, "model.layers.%d.shared_head.norm.weight", layer);
	if (rc)
		return rc;
	w->head = m->lm_head;
	if (model_has(m, "model.layers.%d.shared_head.head.weight", layer))
		rc = model_matrix(m, &w->head, c->vocab, h, "model.layers.%d.shared_head.head.weight", layer);
	w->embed = m->embed;
	if (!rc && model_has(m, "model.layers.%d.embed_tokens.weight", layer))
		rc = model_matrix(m, &w->embed, c->vocab, h, "model.layers.%d.embed_tokens.weight", layer);
	return rc;
}

int forward_layers_bind(struct forward *f)
{
	const struct model *m = f->m;
	const struct model_config *c = &m->cfg;
	f->n_layers = c->n_layers + m->n_mtp;
	f->n_mtp = m->n_mtp;
	f->layers = calloc((size_t)f->n_layers, sizeof *f->layers);
	f->mtp = calloc((size_t)f->n_mtp + 1, sizeof *f->mtp);
	if (!f->layers || !f->mtp)
		return error_set(ENOMEM, "out of memory");
	int rc = 0;
	for (int l = 0; !rc && l < f->n_layers; l++) {
		struct layer *ly = &f->layers[l];
		int64_t h = c->hidden;
		ly->mixer = block_mixer(c->rows[l].mixer);
		ly->ffn = block_ffn(c->rows[l].ffn);
		ly->join = block_join(c->rows[l].residual);
		rc = model_vector(m, &ly->attn_norm, h, "model.layers.%d.input_layernorm.weight", l);
		rc = rc ? rc : model_vector(m, &ly->ffn_norm, h, "model.layers.%d.post_attention_layernorm.weight", l);
		rc = rc ? rc : bind_kind(ly->mixer, &ly->mixer_w, m, l);
		rc = rc ? rc : bind_kind(ly->ffn, &ly->ffn_w, m, l);
		rc = rc ? rc : ly->join->bind(ly, m, l);
	}
	if (!rc && c->n_layers > 0 && c->rows[0].residual == RESIDUAL_HC)
		rc = hc_head_bind(&f->hc_head, m, -1);
	for (int i = 0; !rc && i < f->n_mtp; i++)
		rc = bind_mtp(m, c->n_layers + i, &f->mtp[i]);
	return rc;
}

void forward_layers_free(struct forward *f)
{
	for (int l = 0; f->layers && l < f->n_layers; l++) {
		free(f->layers[l].mixer_w);
		free(f->layers[l].ffn_w);
	}
	free(f->layers);
	free(f->mtp);
	f->layers = NULL;
	f->mtp = NULL;
}
