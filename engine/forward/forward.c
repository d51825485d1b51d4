/*
 * forward — see forward.h. One step over a chunk of n tokens:
 *   embed the tokens into the residual stream x;
 *   for each layer of the table:
 *     x += mixer(rmsnorm(x))     attention of the row's kind, its state appended
 *     x += ffn(rmsnorm(x))       dense SwiGLU, or the MoE path of ffn_moe.c
 *   final norm -> lm_head for the requested rows.
 * With hyper-connections (RESIDUAL_HC) the residual is hc_mult streams per
 * row, each block runs on their collapse and is mixed back into them
 * (hyper_conn.c), and the final head collapses them before the norm.
 * Buffers: x, xn, the final hidden states and the MTP input are the
 * forward's own; everything a block needs comes from the sizes it declares
 * (block.h): one shared arena as large as the largest need, each kind's own
 * scratch, a region per thread, and the sequence state's parts.
 */
#include "engine/forward/forward.h"
#include "engine/forward/forward_internal.h"
#include "engine/forward/hyper_conn.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "compute/kernels.h"
#include "compute/rope_freq.h"
#include "compute/threadpool.h"

/* What the blocks of n_layers rows declare for ctx and batch: the shared
 * arena and per-thread region (the largest need of any kind), each kind's
 * own scratch (the largest of its layers), and the state parts
 * [2 * n_layers]. */
struct forward_sizes {
	size_t shared, thread, own[BLOCK_KINDS];
};

static void block_sizes_of(const struct model_config *c, int n_layers, int ctx, int batch, struct forward_sizes *fs,
			   struct seq_part_size *parts)
{
	memset(fs, 0, sizeof *fs);
	for (int l = 0; l < n_layers; l++) {
		const struct block_kind *kinds[2] = { block_mixer(c->rows[l].mixer), block_ffn(c->rows[l].ffn) };
		for (int slot = 0; slot < 2; slot++) {
			struct block_sizes bs;
			kinds[slot]->sizes(c, l, batch, ctx, &bs);
			if (bs.shared_bytes > fs->shared)
				fs->shared = bs.shared_bytes;
			if (bs.thread_bytes > fs->thread)
				fs->thread = bs.thread_bytes;
			if (bs.private_bytes > fs->own[kinds[slot]->id])
				fs->own[kinds[slot]->id] = bs.private_bytes;
			/* The residual kind keeps its own after the block kind's. */
			size_t res = block_join(c->rows[l].residual)->state_fixed_bytes(c);
			parts[2 * l + slot] = (struct seq_part_size){ bs.state_pos_bytes, bs.state_fixed_bytes + res };
		}
	}
}

/* The forward's own buffers with their sizes: the one list forward_init
 * allocates, forward_free frees and forward_bytes adds up. */
struct fbuf {
	void **ptr;
	size_t bytes;
};

#define FORWARD_BUFS (18 + BLOCK_KINDS)

/* Residual streams per row: hc_mult with hyper-connections, else 0 (no
 * stream buffers). */
static size_t hc_streams(const struct model_config *c)
{
	return c->n_layers > 0 && c->rows[0].residual == RESIDUAL_HC ? (size_t)c->hc_mult : 0;
}

static int forward_buffers(struct forward *f, const struct model_config *c, const struct forward_sizes *fs,
			   struct fbuf *b)
{
	size_t B = (size_t)f->batch, H = (size_t)c->hidden, F = sizeof(float);
	size_t E = (size_t)(c->n_experts > 0 ? c->n_experts : 1);
	size_t HC = hc_streams(c);
	int n = 0;
#define FBUF(field, size) (b[n++] = (struct fbuf){ (void **)&f->field, (size) })
	FBUF(x, B * H * F);
	FBUF(xn, B * H * F);
	FBUF(hidden, B * (HC ? HC : 1) * H * F);
	FBUF(head_in, B * H * F);
	FBUF(row_seq, B * sizeof(int32_t));
	FBUF(row_pos, B * sizeof(int32_t));
	FBUF(row_tok, B * sizeof(int32_t));
	FBUF(mtp_in, B * 2 * H * F);
	FBUF(inv_freq, (size_t)(c->rot_dim / 2 + 1) * F);
	FBUF(predicted, (size_t)(c->n_layers + c->n_mtp_layers) * E * sizeof(int32_t));
	FBUF(hc_x, B * HC * H * F);
	FBUF(hc_flat, B * HC * H * F);
	FBUF(hc_mix, B * (2 + HC) * HC * F);
	FBUF(hc_w, B * (2 + HC) * HC * F);
	FBUF(hc_out, (HC ? B * H : 0) * F);
	FBUF(blk, (c->n_layers > 0 && c->rows[0].residual == RESIDUAL_SCONV ? B * H : 0) * F);
	FBUF(shared, fs->shared);
	FBUF(threads, (size_t)f->n_threads * fs->thread);
	for (int k = 0; k < BLOCK_KINDS; k++)
		FBUF(own[k], fs->own[k]);
#undef FBUF
	return n;
}

uint64_t forward_bytes(const struct model_config *c, int ctx, int batch, int n_threads, int n_seqs)
{
	struct forward f = { .ctx = ctx, .batch = batch, .n_threads = n_threads };
	int L = c->n_layers + c->n_mtp_layers; /* MTP layers keep their own state */
	struct seq_part_size *parts = calloc((size_t)(2 * L), sizeof *parts);
	if (!parts)
		return UINT64_MAX;
	struct forward_sizes fs;
	block_sizes_of(c, L, ctx, batch, &fs, parts);
	struct fbuf b[FORWARD_BUFS];
	int n = forward_buffers(&f, c, &fs, b);
	uint64_t sum = (uint64_t)n_seqs * seq_state_bytes(parts, 2 * L, ctx);
	for (int i = 0; i < n; i++)
		sum += b[i].bytes;
	free(parts);
	return sum;
}

uint64_t forward_state_fixed_bytes(const struct model_config *c, int n_seqs)
{
	int L = c->n_layers + c->n_mtp_layers;
	struct seq_part_size *parts = calloc((size_t)(2 * L), sizeof *parts);
	if (!parts)
		return UINT64_MAX;
	struct forward_sizes fs;
	block_sizes_of(c, L, 1, 1, &fs, parts);
	for (int i = 0; i < 2 * L; i++)
		parts[i].pos_bytes = 0;
	/* What seq_state allocates for them: each part, its snapshot and checkpoint copies. */
	uint64_t sum = seq_state_bytes(parts, 2 * L, 1);
	free(parts);
	return sum * (uint64_t)(n_seqs > 0 ? n_seqs : 1);
}

void forward_state_what(const struct model_config *c, char *buf, size_t len)
{
	const char *what = NULL;
	int with = 0;
	for (int l = 0; l < c->n_layers; l++) {
		/* A layer whose kind keeps nothing per position there (V4's
		 * sliding layers) does not count. */
		const struct block_kind *k = block_mixer(c->rows[l].mixer);
		struct block_sizes bs;
		k->sizes(c, l, 1, 1, &bs);
		const char *w = bs.state_pos_bytes ? k->state_what : NULL;
		what = what ? what : w;
		with += w != NULL;
	}
	if (with == c->n_layers)
		snprintf(buf, len, "%s of every layer, attention score rows", what);
	else
		snprintf(buf, len, "%s of %d of the %d layers, attention score rows", what ? what : "nothing", with,
			 c->n_layers);
}

int forward_init(struct forward *f, const struct model *m, struct threadpool *pool, int ctx, int batch, int n_seqs)
{
	memset(f, 0, sizeof *f);
	const struct model_config *c = &m->cfg;
	f->m = m;
	f->pool = pool;
	f->ctx = ctx;
	f->batch = batch;
	f->n_threads = pool ? threadpool_size(pool) : 1;
	f->prefetch = true;
	f->prefetch_precision = FORWARD_PREFETCH_PRECISION;
	const char *pp = getenv("COLIBRI_PREFETCH_PRECISION");
	if (pp && *pp) {
		char *end;
		double v = strtod(pp, &end);
		if (!*end && v >= 0 && v <= 1)
			f->prefetch_precision = v;
	}
	int rc = forward_layers_bind(f);
	struct seq_part_size *parts = rc ? NULL : calloc((size_t)(2 * f->n_layers), sizeof *parts);
	if (!rc && !parts)
		rc = error_set(ENOMEM, "out of memory");
	if (rc) {
		forward_free(f);
		return rc;
	}
	struct forward_sizes fs;
	block_sizes_of(c, f->n_layers, ctx, batch, &fs, parts);
	for (int l = 0; l < f->n_layers; l++)
		for (int slot = 0; slot < 2; slot++)
			f->layers[l].sconv_off[slot] = parts[2 * l + slot].fixed_bytes -
						       f->layers[l].join->state_fixed_bytes(c);
	f->thread_bytes = fs.thread;
	f->seqs = calloc((size_t)(n_seqs > 0 ? n_seqs : 1), sizeof *f->seqs);
	if (!f->seqs)
		rc = error_set(ENOMEM, "out of memory");
	else
		f->n_seqs = n_seqs > 0 ? n_seqs : 1;
	for (int i = 0; !rc && i < f->n_seqs; i++)
		rc = seq_state_init(&f->seqs[i], parts, 2 * f->n_layers, ctx);
	free(parts);
	struct fbuf b[FORWARD_BUFS];
	int n = forward_buffers(f, c, &fs, b);
	for (int i = 0; !rc && i < n; i++)
		if (!(*b[i].ptr = calloc(b[i].bytes ? b[i].bytes : 1, 1)))
			rc = error_set(ENOMEM, "cannot allocate %" PRIu64 " MiB for the sequence states and scratch of %d "
				       "positions", forward_bytes(c, ctx, batch, f->n_threads, f->n_seqs) >> 20, ctx);
	if (rc) {
		forward_free(f);
		return rc;
	}
	if (c->yarn)
		rope_freq_yarn(f->inv_freq, c->rot_dim, c->rope_theta, c->yarn_factor, c->yarn_beta_fast,
			       c->yarn_beta_slow, c->yarn_original_max, c->yarn_truncate);
	else
		rope_freq_default(f->inv_freq, c->rot_dim, c->rope_theta);
	return 0;
}

void forward_free(struct forward *f)
{
	if (f->m) {
		struct forward_sizes fs = { 0 };
		struct fbuf b[FORWARD_BUFS];
		int n = forward_buffers(f, &f->m->cfg, &fs, b);
		for (int i = 0; i < n; i++)
			free(*b[i].ptr);
	}
	for (int i = 0; f->seqs && i < f->n_seqs; i++)
		seq_state_free(&f->seqs[i]);
	free(f->seqs);
	forward_layers_free(f);
	memset(f, 0, sizeof *f);
}

void forward_reset(struct forward *f)
{
	seq_state_reset(&f->seqs[0]);
}

void forward_rope(const struct forward *f, float *x, int64_t pos)
{
	forward_rope_as(f, x, pos, f->m->cfg.rope_interleave);
}

void forward_rope_as(const struct forward *f, float *x, int64_t pos, int interleave)
{
	const struct model_config *c = &f->m->cfg;
	rope(x, c->rot_dim, pos, f->inv_freq, interleave ? ROPE_GPTJ : ROPE_NEOX);
	if (c->rope_attn_factor != 1.0f)
		for (int64_t i = 0; i < c->rot_dim; i++)
			x[i] *= c->rope_attn_factor;
}

/* One layer over the step's rows: its mixer, then its FFN, each on its
 * normed input and joined to the residual stream as the row's residual
 * kind says (residual.c). */
static int layer_forward(struct forward *f, int l, int n)
{
	const struct layer *ly = &f->layers[l];
	int rc = ly->join->run(f, ly->mixer, ly->attn_norm, l, 0, n);
	return rc ? rc : ly->join->run(f, ly->ffn, ly->ffn_norm, l, 1, n);
}

int forward_step_rows(struct forward *f, const struct forward_row *rows, int n, const int *out, int n_out,
		      float *logits)
{
	const struct model *m = f->m;
	const struct model_config *c = &m->cfg;
	int64_t H = c->hidden;
	if (n <= 0 || n > f->batch)
		return error_set(EINVAL, "forward: %d tokens in one step (1..%d)", n, f->batch);
	/* Positions: each sequence's rows take its next ones, in order. */
	for (int t = 0; t < n; t++) {
		int32_t s = rows[t].seq;
		if (s < 0 || s >= f->n_seqs)
			return error_set(EINVAL, "forward: sequence %d of %d", s, f->n_seqs);
		int32_t before = 0;
		for (int u = 0; u < t; u++)
			before += rows[u].seq == s;
		f->row_seq[t] = s;
		f->row_pos[t] = f->seqs[s].pos + before;
		f->row_tok[t] = rows[t].token;
		if (f->row_pos[t] >= f->ctx)
			return error_set(ENOSPC, "context is full: %d positions (raise --ctx)", f->ctx);
		if (rows[t].token < 0 || rows[t].token >= c->vocab)
			return error_set(EINVAL, "token id %d is outside the vocabulary (0..%d)", rows[t].token,
					 c->vocab - 1);
		int rc = model_embed_row(m, &m->embed, rows[t].token, f->x + t * H);
		if (rc)
			return rc;
		if (m->embed_norm)
			rmsnorm(f->x + t * H, f->x + t * H, m->embed_norm, H, c->rms_eps);
		for (size_t i = 0; i < hc_streams(c); i++) /* every stream starts as the embedding */
			memcpy(f->hc_x + (t * hc_streams(c) + i) * H, f->x + t * H, (size_t)H * sizeof(float));
	}
	ffn_moe_prefetch_first(f, n);
	for (int l = 0; l < c->n_layers; l++) {
		int rc = layer_forward(f, l, n);
		if (rc)
			return rc;
	}
	for (int t = 0; t < n; t++)
		f->seqs[rows[t].seq].pos++;
	/* Every row's MTP input stays in f->hidden: its final-normed hidden
	 * state, or with hyper-connections its streams before the collapse
	 * (DeepSeek-V4's MTPBlock reads those). */
	size_t D = (size_t)forward_mtp_dim(f);
	if (hc_streams(c)) {
		memcpy(f->hidden, f->hc_x, (size_t)n * D * sizeof(float));
		hc_head(f, &f->hc_head, n);
	}
	for (int t = 0; t < n; t++)
		rmsnorm(f->xn + t * H, f->x + t * H, m->final_norm, H, c->rms_eps);
	if (!hc_streams(c))
		memcpy(f->hidden, f->xn, (size_t)n * H * sizeof(float));
	if (!logits || n_out <= 0)
		return 0;
	/* The head runs over the rows asked for, gathered (a matmul row is the
	 * same bits whatever the other rows); Inkling divides them first. */
	for (int i = 0; i < n_out; i++) {
		float *h = f->head_in + (size_t)i * H;
		memcpy(h, f->xn + (size_t)out[i] * H, (size_t)H * sizeof(float));
		if (c->logit_divisor != 0.0f && c->logit_divisor != 1.0f)
			for (int64_t d = 0; d < H; d++)
				h[d] /= c->logit_divisor;
	}
	matmul(f->pool, logits, &m->lm_head, f->head_in, n_out);
	return 0;
}

int forward_step(struct forward *f, const int32_t *tokens, int n, float *logits, bool all_logits)
{
	struct forward_row rows[n > 0 && n <= f->batch ? n : 1];
	int out[n > 0 && n <= f->batch ? n : 1];
	if (n <= 0 || n > f->batch)
		return error_set(EINVAL, "forward: %d tokens in one step (1..%d)", n, f->batch);
	if (f->seqs[0].pos + n > f->ctx)
		return error_set(ENOSPC, "context is full: %d positions (raise --ctx)", f->ctx);
	for (int t = 0; t < n; t++) {
		rows[t] = (struct forward_row){ 0, tokens[t] };
		out[t] = t;
	}
	int first = all_logits ? 0 : n - 1;
	return forward_step_rows(f, rows, n, out + first, logits ? n - first : 0, logits);
}

int64_t forward_mtp_dim(const struct forward *f)
{
	const struct model_config *c = &f->m->cfg;
	return (int64_t)(hc_streams(c) ? hc_streams(c) : 1) * c->hidden;
}

/* DeepSeek-V4's MTPBlock.forward (DeepSeek's inference/model.py; transformers
 * does not run it): e = enorm(E[next]), each stream s of the hidden state
 * h_proj(hnorm(h_s)) + e_proj(e), the hyper-connected block, the module's
 * own hc_head and norm, the shared head. */
static int forward_mtp_hc(struct forward *f, const struct mtp_weights *w, int layer, const float *hidden,
			  const int32_t *next, int n, float *logits, float *hidden_out)
{
	const struct model *m = f->m;
	const struct model_config *c = &m->cfg;
	int64_t H = c->hidden, hc = (int64_t)hc_streams(c), HH = hc * H;
	for (int t = 0; t < n; t++) {
		float *e = f->mtp_in + (size_t)t * H;
		int rc = model_embed_row(m, &w->embed, next[t], e);
		if (rc)
			return rc;
		rmsnorm(e, e, w->enorm, H, c->rms_eps);
		for (int64_t s = 0; s < hc; s++)
			rmsnorm(f->hc_flat + t * HH + s * H, hidden + (size_t)t * HH + s * H, w->hnorm, H, c->rms_eps);
	}
	matmul(f->pool, f->x, &w->e_proj, f->mtp_in, n);
	matmul(f->pool, f->hc_x, &w->h_proj, f->hc_flat, n * hc);
	for (int t = 0; t < n; t++)
		for (int64_t s = 0; s < hc; s++) {
			float *st = f->hc_x + t * HH + s * H;
			const float *e = f->x + t * H;
			for (int64_t d = 0; d < H; d++)
				st[d] = e[d] + st[d];
		}
	int rc = layer_forward(f, layer, n);
	if (rc)
		return rc;
	if (hidden_out)
		memcpy(hidden_out, f->hc_x, (size_t)n * HH * sizeof(float));
	hc_head(f, &w->hc_head, n);
	for (int t = 0; t < n; t++)
		rmsnorm(f->xn + t * H, f->x + t * H, w->head_norm, H, c->rms_eps);
	if (logits)
		matmul(f->pool, logits, &w->head, f->xn, n);
	return 0;
}

int forward_mtp(struct forward *f, int module, const float *hidden, const int32_t *next, int n, int pos0,
		float *logits, float *hidden_out)
{
	const struct model *m = f->m;
	const struct model_config *c = &m->cfg;
	int64_t H = c->hidden;
	if (module < 0 || module >= f->n_mtp)
		return error_set(EINVAL, "the model has no MTP module %d", module);
	if (n <= 0 || n > f->batch || pos0 < 0 || pos0 + n > f->ctx)
		return error_set(EINVAL, "MTP: %d rows at position %d do not fit", n, pos0);
	const struct mtp_weights *w = &f->mtp[module];
	for (int t = 0; t < n; t++) {
		if (next[t] < 0 || next[t] >= c->vocab)
			return error_set(EINVAL, "token id %d is outside the vocabulary", next[t]);
		f->row_seq[t] = 0;
		f->row_pos[t] = pos0 + t;
		f->row_tok[t] = next[t];
	}
	if (hc_streams(c))
		return forward_mtp_hc(f, w, c->n_layers + module, hidden, next, n, logits, hidden_out);
	/* u_t = eh_proj([enorm(E[next_t]); hnorm(h_t)]), embedding first. */
	for (int t = 0; t < n; t++) {
		float *in = f->mtp_in + (size_t)t * 2 * H;
		int rc = model_embed_row(m, &w->embed, next[t], in);
		if (rc)
			return rc;
		rmsnorm(in, in, w->enorm, H, c->rms_eps);
		rmsnorm(in + H, hidden + (size_t)t * H, w->hnorm, H, c->rms_eps);
	}
	matmul(f->pool, f->x, &w->eh_proj, f->mtp_in, n);
	int rc = layer_forward(f, c->n_layers + module, n);
	if (rc)
		return rc;
	for (int t = 0; t < n; t++)
		rmsnorm(f->xn + t * H, f->x + t * H, w->head_norm, H, c->rms_eps);
	if (hidden_out)
		memcpy(hidden_out, f->xn, (size_t)n * H * sizeof(float));
	if (logits)
		matmul(f->pool, logits, &w->head, f->xn, n);
	return 0;
}

int forward_rewind(struct forward *f, int32_t pos, const int32_t *tokens)
{
	struct seq_state *s = &f->seqs[0];
	int rc = seq_state_truncate(s, pos);
	if (rc != -EAGAIN)
		return rc;
	int32_t from = s->snap_pos;
	if (from < 0 || from > pos)
		return error_set(EINVAL, "sequence state: no snapshot before position %d to replay from", pos);
	if ((rc = seq_state_restore(s)))
		return rc;
	for (int32_t i = 0; !rc && i < pos - from; i += f->batch) {
		int len = pos - from - i < f->batch ? pos - from - i : f->batch;
		rc = forward_step(f, tokens + i, len, NULL, false);
	}
	return rc;
}
