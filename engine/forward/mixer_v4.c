/*
 * mixer_v4 — MIXER_V4: DeepSeek-V4's attention, as transformers v5.15.0's
 * DeepseekV4Attention computes it, in three layer kinds (v4_attn):
 *
 *   q  = q_b(rmsnorm_w(q_a(x)))           per head an unweighted RMSNorm
 *   kv = rmsnorm_w(kv_proj(x))            one head, key and value at once
 *   interleaved RoPE (pairs 2i, 2i+1) on the last rot_dim floats of every
 *   head: rope_theta for sliding layers, compress_rope_theta with YaRN
 *   frequencies (attention factor 1) for compressed ones
 *   softmax over [the last sliding_window keys ; compressed entries ; a
 *   per-head sink logit], scale head_dim^-0.5; the sink takes no value
 *   the output's rope floats rotated back by -pos, then the grouped output
 *   projection: o_a per group of heads, o_b over the groups.
 *
 * Compressed entries (v4_compress.h): HCA layers pool non-overlapping
 * windows of compress_rate_hca positions and a query sees every entry whose
 * window has closed; CSA layers pool overlapping windows (two series, 2 x
 * compress_rate_csa wide, stride compress_rate_csa) and the Lightning
 * indexer keeps index_topk of the closed ones: its own compressor at
 * index_head_dim, queries q_b(q_residual) roped at the query position,
 * scores sum_h relu(q_h . k) * index_head_dim^-0.5 * weights_proj(x)_h *
 * index_n_heads^-0.5, the best index_topk (all while no more are closed;
 * ties keep the lower entry, as dsa_indexer.c explains).
 *
 * State per position (floats): the roped kv (head_dim); for compressed
 * layers the compressor's projected kv and gate rows and the entry slot
 * (filled at the rows that close a window); for CSA the indexer's the same
 * at index_head_dim. All of it is per position, so truncation to any
 * position is exact. The slot of a non-closing row is unused (known cost:
 * head_dim floats per position where only one in compress_rate carries an
 * entry).
 *
 * Per row the arithmetic never depends on the other rows of the step: the
 * projections are matmuls (row t the same bits as alone), entries are
 * pooled from rows in a fixed order, and each (row, head) attends alone.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "compute/kernels.h"
#include "compute/rope_freq.h"
#include "compute/threadpool.h"
#include "engine/forward/forward_internal.h"
#include "engine/forward/v4_compress.h"

#define V4_ROT_PAIRS_MAX 256 /* rot_dim / 2 at most (the layer's frequencies live in its weights) */
#define V4_ENTRY_BLOCK 64    /* indexer entries scored per task */

struct v4_comp_weights {
	struct qmatrix kv, gate;         /* [series floats, hidden] */
	const float *bias;               /* [rate, series floats] position_bias */
	const float *norm;               /* [dim] kv_norm */
};

struct v4_weights {
	struct qmatrix q_a;              /* [q_lora_rank, hidden] */
	const float *q_a_norm;           /* [q_lora_rank] */
	struct qmatrix q_b;              /* [n_heads*head_dim, q_lora_rank] */
	struct qmatrix kv;               /* [head_dim, hidden] */
	const float *kv_norm;            /* [head_dim] */
	struct qmatrix o_a;              /* [o_groups*o_lora_rank, n_heads*head_dim/o_groups] */
	struct qmatrix o_b;              /* [hidden, o_groups*o_lora_rank] */
	const float *sinks;              /* [n_heads] */
	struct v4_comp_weights comp;     /* CSA, HCA */
	struct v4_comp_weights ix;       /* CSA: the indexer's compressor */
	struct qmatrix ix_q_b;           /* [index_n_heads*index_head_dim, q_lora_rank] */
	struct qmatrix ix_w;             /* [index_n_heads, hidden] scorer.weights_proj */
	float freq[V4_ROT_PAIRS_MAX];    /* the layer's RoPE frequencies [rot_dim / 2] */
};

/* A layer's state row and kind. */
struct v4_layout {
	enum v4_attn attn;
	int64_t stride;                  /* floats per position */
	struct v4_series comp, ix;       /* comp: CSA, HCA; ix: CSA */
	/* Bounds for the scratch, linear in ctx or capped (plan extrapolates
	 * the forward's bytes from two context sizes, so none may grow faster
	 * later): a context holds at most ctx / rate <= ctx entries. */
	int64_t entries;                 /* entries of a context at most: ctx */
	int64_t keep;                    /* entries a query attends to at most: min(index_topk, ctx) for CSA */
	int64_t window;                  /* sliding keys a query sees at most */
};

static enum v4_attn attn_of(const struct model_config *c, int l)
{
	return l < c->n_layers ? c->v4_attn[l] : V4_ATTN_SLIDING;
}

static void layout_of(const struct model_config *c, int l, int ctx, struct v4_layout *o)
{
	memset(o, 0, sizeof *o);
	o->attn = attn_of(c, l);
	int64_t hd = c->head_dim, id = c->index_head_dim, at = hd;
	int32_t rate = o->attn == V4_ATTN_CSA ? c->compress_rate_csa : c->compress_rate_hca;
	if (o->attn != V4_ATTN_SLIDING) {
		o->comp = (struct v4_series){ .dim = hd, .rate = rate, .overlap = o->attn == V4_ATTN_CSA };
		int64_t sf = v4_series_floats(&o->comp);
		o->comp.kv = at;
		o->comp.gate = at + sf;
		o->comp.entry = at + 2 * sf;
		at += 2 * sf + hd;
		o->entries = ctx;
		o->keep = ctx;
	}
	if (o->attn == V4_ATTN_CSA) {
		o->ix = (struct v4_series){ .dim = id, .rate = rate, .overlap = true };
		o->ix.kv = at;
		o->ix.gate = at + 2 * id;
		o->ix.entry = at + 4 * id;
		at += 5 * id;
		o->keep = c->index_topk < o->entries ? c->index_topk : o->entries;
	}
	o->stride = at;
	o->window = c->sliding_window > 0 && c->sliding_window < ctx ? c->sliding_window : ctx;
}

/* The step's buffers in the shared arena. */
struct v4_scratch {
	float *qr;                       /* [batch, q_lora_rank] q_residual */
	float *q;                        /* [batch, n_heads*head_dim] */
	float *kv;                       /* [batch, head_dim] */
	float *ckv, *cgate;              /* [batch, series floats] compressor projections */
	float *ikv, *igate;              /* [batch, 2*index_head_dim] the indexer's */
	float *iq;                       /* [batch, index_n_heads*index_head_dim] */
	float *iw;                       /* [batch, index_n_heads] head weights */
	float *iscores;                  /* [batch, entries] */
	int32_t *sel;                    /* [batch, keep] entries kept, increasing */
	int32_t *nsel;                   /* [batch] */
	float *pool;                     /* [2 * max(head_dim, index_head_dim)] pooling scratch */
	float *att;                      /* [batch, n_heads*head_dim] */
	float *gin;                      /* [batch, n_heads*head_dim/o_groups] one group's input */
	float *gout;                     /* [batch, o_lora_rank] one group's output */
	float *grouped;                  /* [batch, o_groups*o_lora_rank] */
	float *out;                      /* [batch, hidden] */
};

static void scratch_layout(struct carve *cv, const struct model_config *c, const struct v4_layout *lay, int batch,
			   struct v4_scratch *s)
{
	size_t B = (size_t)batch, F = sizeof(float);
	size_t Q = (size_t)c->n_heads * (size_t)c->head_dim, og = c->o_groups > 0 ? (size_t)c->o_groups : 1;
	size_t comp = lay->attn != V4_ATTN_SLIDING, csa = lay->attn == V4_ATTN_CSA;
	size_t sf = comp ? (size_t)v4_series_floats(&lay->comp) : 0, id = (size_t)c->index_head_dim;
	size_t pool = (size_t)(c->head_dim > c->index_head_dim ? c->head_dim : c->index_head_dim);
	s->qr = carve(cv, B * (size_t)c->q_lora_rank * F);
	s->q = carve(cv, B * Q * F);
	s->kv = carve(cv, B * (size_t)c->head_dim * F);
	s->ckv = carve(cv, B * sf * F);
	s->cgate = carve(cv, B * sf * F);
	s->ikv = carve(cv, csa * B * 2 * id * F);
	s->igate = carve(cv, csa * B * 2 * id * F);
	s->iq = carve(cv, csa * B * (size_t)c->index_n_heads * id * F);
	s->iw = carve(cv, csa * B * (size_t)c->index_n_heads * F);
	s->iscores = carve(cv, csa * B * (size_t)lay->entries * F);
	s->sel = carve(cv, csa * B * (size_t)lay->keep * sizeof(int32_t));
	s->nsel = carve(cv, csa * B * sizeof(int32_t));
	s->pool = carve(cv, comp * 2 * pool * F);
	s->att = carve(cv, B * Q * F);
	s->gin = carve(cv, B * (Q / og) * F);
	s->gout = carve(cv, B * (size_t)c->o_lora_rank * F);
	s->grouped = carve(cv, B * og * (size_t)c->o_lora_rank * F);
	s->out = carve(cv, B * (size_t)c->hidden * F);
}

static void v4_sizes(const struct model_config *c, int layer, int batch, int ctx, struct block_sizes *out)
{
	struct v4_layout lay;
	layout_of(c, layer, ctx, &lay);
	struct carve cv = { 0 };
	struct v4_scratch s;
	scratch_layout(&cv, c, &lay, batch, &s);
	/* Per thread: one (row, head)'s logits, or the indexer's top-k scratch. */
	size_t scores = (size_t)(lay.window + lay.keep + 1);
	size_t thread = scores > (size_t)lay.entries ? scores : (size_t)lay.entries;
	*out = (struct block_sizes){
		.shared_bytes = cv.used,
		.thread_bytes = thread * sizeof(float),
		.state_pos_bytes = (size_t)lay.stride * sizeof(float),
	};
}

/* A [rows, cols] f32 table (position_bias): stored as a matrix or as a
 * vector of rows * cols, whichever the container holds. */
static int bind_table(const struct model *m, const float **p, int64_t rows, int64_t cols, const char *fmt, int l)
{
	char name[TENSOR_NAME_MAX];
	snprintf(name, sizeof name, fmt, l);
	const struct manifest_tensor *t = manifest_find(&m->man, name);
	if (t && cols > 1 && t->shape[0] == rows && t->shape[1] == cols) {
		struct qmatrix q;
		int rc = model_matrix(m, &q, rows, cols, fmt, l);
		if (!rc && q.type != QUANT_F32)
			rc = error_set(EINVAL, "%s/manifest.json: tensor %s is not f32", m->dir, name);
		if (!rc)
			*p = q.data;
		return rc;
	}
	return model_vector(m, p, rows * cols, fmt, l);
}

static int bind_comp(struct v4_comp_weights *w, const struct model *m, int l, const char *prefix, int64_t dim,
		     int64_t series, int32_t rate)
{
	char kv[128], gate[128], bias[128], norm[128];
	snprintf(kv, sizeof kv, "model.layers.%%d.self_attn.%s.kv_proj.weight", prefix);
	snprintf(gate, sizeof gate, "model.layers.%%d.self_attn.%s.gate_proj.weight", prefix);
	snprintf(bias, sizeof bias, "model.layers.%%d.self_attn.%s.position_bias", prefix);
	snprintf(norm, sizeof norm, "model.layers.%%d.self_attn.%s.kv_norm.weight", prefix);
	int64_t h = m->cfg.hidden;
	int rc = model_matrix(m, &w->kv, series, h, kv, l);
	rc = rc ? rc : model_matrix(m, &w->gate, series, h, gate, l);
	rc = rc ? rc : bind_table(m, &w->bias, rate, series, bias, l);
	rc = rc ? rc : model_vector(m, &w->norm, dim, norm, l);
	return rc;
}

static int v4_bind(void *wp, const struct model *m, int i)
{
	struct v4_weights *w = wp;
	const struct model_config *c = &m->cfg;
	struct v4_layout lay;
	layout_of(c, i, 1, &lay);
	int64_t h = c->hidden, nh = c->n_heads, hd = c->head_dim, QL = c->q_lora_rank, rot = c->rot_dim;
	int64_t og = c->o_groups, OL = c->o_lora_rank;
	if (rot <= 0 || rot % 2 || rot > hd || rot / 2 > V4_ROT_PAIRS_MAX ||
	    (lay.attn == V4_ATTN_CSA && rot > c->index_head_dim))
		return error_set(EINVAL, "%s: layer %d: rotary dims %d do not fit heads of %d", m->dir, i, c->rot_dim,
				 c->head_dim);
	if (og <= 0 || nh % og || OL <= 0 || QL <= 0)
		return error_set(EINVAL, "%s: layer %d: o_groups %d, o_lora_rank %d, q_lora_rank %d do not fit %d heads",
				 m->dir, i, c->o_groups, c->o_lora_rank, c->q_lora_rank, c->n_heads);
	if (lay.attn != V4_ATTN_SLIDING && lay.comp.rate <= 0)
		return error_set(EINVAL, "%s: layer %d: compress rate %d", m->dir, i, lay.comp.rate);
	int rc = 0;
	rc = rc ? rc : model_matrix(m, &w->q_a, QL, h, "model.layers.%d.self_attn.q_a_proj.weight", i);
	rc = rc ? rc : model_vector(m, &w->q_a_norm, QL, "model.layers.%d.self_attn.q_a_norm.weight", i);
	rc = rc ? rc : model_matrix(m, &w->q_b, nh * hd, QL, "model.layers.%d.self_attn.q_b_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->kv, hd, h, "model.layers.%d.self_attn.kv_proj.weight", i);
	rc = rc ? rc : model_vector(m, &w->kv_norm, hd, "model.layers.%d.self_attn.kv_norm.weight", i);
	rc = rc ? rc : model_matrix(m, &w->o_a, og * OL, nh * hd / og, "model.layers.%d.self_attn.o_a_proj.weight", i);
	rc = rc ? rc : model_matrix(m, &w->o_b, h, og * OL, "model.layers.%d.self_attn.o_b_proj.weight", i);
	rc = rc ? rc : model_vector(m, &w->sinks, nh, "model.layers.%d.self_attn.sinks", i);
	if (!rc && lay.attn != V4_ATTN_SLIDING)
		rc = bind_comp(&w->comp, m, i, "compressor", hd, v4_series_floats(&lay.comp), lay.comp.rate);
	if (!rc && lay.attn == V4_ATTN_CSA) {
		int64_t id = c->index_head_dim, ih = c->index_n_heads;
		rc = bind_comp(&w->ix, m, i, "compressor.indexer", id, 2 * id, lay.ix.rate);
		rc = rc ? rc : model_matrix(m, &w->ix_q_b, ih * id, QL,
					    "model.layers.%d.self_attn.compressor.indexer.q_b_proj.weight", i);
		rc = rc ? rc : model_matrix(m, &w->ix_w, ih, h,
					    "model.layers.%d.self_attn.compressor.indexer.scorer.weights_proj.weight", i);
	}
	if (lay.attn == V4_ATTN_SLIDING)
		rope_freq_default(w->freq, rot, c->rope_theta);
	else if (c->yarn)
		rope_freq_yarn(w->freq, rot, c->compress_rope_theta, c->yarn_factor, c->yarn_beta_fast, c->yarn_beta_slow,
			       c->yarn_original_max);
	else
		rope_freq_default(w->freq, rot, c->compress_rope_theta);
	return rc;
}

/* x[n] / sqrt(mean(x^2) + eps), in place (q_b_norm). */
static void norm_unweighted(float *x, int64_t n, float eps)
{
	float inv = 1.0f / sqrtf(dot_f32(x, x, n) / (float)n + eps);
	for (int64_t i = 0; i < n; i++)
		x[i] = x[i] * inv;
}

struct v4_job {
	struct forward *f;
	const struct v4_weights *w;
	const struct v4_layout *lay;
	const struct v4_scratch *s;
	int layer, n, blocks;
};

static void run_tasks(struct forward *f, void (*task)(void *, int, int), struct v4_job *job, int n)
{
	if (f->pool)
		threadpool_run(f->pool, task, job, n);
	else
		for (int i = 0; i < n; i++)
			task(job, i, 0);
}

/* Task = (row, block of entries): indexer scores of a row that will drop
 * some of its visible entries. */
static void score_task(void *ctx, int task, int thread)
{
	(void)thread;
	struct v4_job *j = ctx;
	struct forward *f = j->f;
	const struct model_config *c = &f->m->cfg;
	const struct v4_layout *lay = j->lay;
	int t = task / j->blocks, b = task % j->blocks;
	int64_t visible = v4_entries_visible(f->row_pos[t], lay->ix.rate);
	int64_t e0 = (int64_t)b * V4_ENTRY_BLOCK, e1 = e0 + V4_ENTRY_BLOCK < visible ? e0 + V4_ENTRY_BLOCK : visible;
	if (visible <= lay->keep || e0 >= e1)
		return;
	int64_t IH = c->index_n_heads, ID = c->index_head_dim;
	const float *rows = (const float *)forward_state_rows(f, t, j->layer, 0);
	v4_index_scores(j->s->iscores + (size_t)t * lay->entries, j->s->iq + (size_t)t * IH * ID,
			j->s->iw + (size_t)t * IH, IH, rows, lay->stride, &lay->ix, e0, e1, 1.0f / sqrtf((float)ID));
}

/* Task = row: the entries it keeps. */
static void select_task(void *ctx, int t, int thread)
{
	struct v4_job *j = ctx;
	struct forward *f = j->f;
	const struct v4_layout *lay = j->lay;
	int64_t visible = v4_entries_visible(f->row_pos[t], lay->ix.rate);
	int32_t *sel = j->s->sel + (size_t)t * lay->keep;
	if (visible <= lay->keep) {
		for (int64_t e = 0; e < visible; e++)
			sel[e] = (int32_t)e;
		j->s->nsel[t] = (int32_t)visible;
		return;
	}
	struct carve tc = forward_thread(f, thread);
	float *scratch = carve(&tc, (size_t)lay->entries * sizeof(float));
	topk_set(sel, j->s->iscores + (size_t)t * lay->entries, visible, lay->keep, scratch);
	j->s->nsel[t] = (int32_t)lay->keep;
}

/* Task = (row, head): softmax over the sliding keys, the row's compressed
 * entries and the head's sink; the output's rope floats rotated back. */
static void attend_task(void *ctx, int task, int thread)
{
	struct v4_job *j = ctx;
	struct forward *f = j->f;
	const struct model_config *c = &f->m->cfg;
	const struct v4_layout *lay = j->lay;
	int t = task / c->n_heads, h = task % c->n_heads;
	int64_t hd = c->head_dim, Q = (int64_t)c->n_heads * hd, rot = c->rot_dim, stride = lay->stride;
	int64_t pos = f->row_pos[t], first = pos + 1 > lay->window ? pos + 1 - lay->window : 0;
	int64_t n_slide = pos + 1 - first, n_entry = 0;
	const int32_t *sel = NULL;
	if (lay->attn == V4_ATTN_CSA) {
		sel = j->s->sel + (size_t)t * lay->keep;
		n_entry = j->s->nsel[t];
	} else if (lay->attn == V4_ATTN_HCA) {
		n_entry = v4_entries_visible(pos, lay->comp.rate);
	}
	const float *rows = (const float *)forward_state_rows(f, t, j->layer, 0);
	const float *q = j->s->q + (size_t)t * Q + (size_t)h * hd;
	struct carve tc = forward_thread(f, thread);
	float *sc = carve(&tc, (size_t)(n_slide + n_entry + 1) * sizeof(float));
	float scale = 1.0f / sqrtf((float)hd), sink = j->w->sinks[h], max = sink;
	for (int64_t i = 0; i < n_slide; i++) {
		sc[i] = dot_f32(q, rows + (first + i) * stride, hd) * scale;
		max = sc[i] > max ? sc[i] : max;
	}
	for (int64_t i = 0; i < n_entry; i++) {
		int64_t e = sel ? sel[i] : i;
		sc[n_slide + i] = dot_f32(q, rows + ((e + 1) * lay->comp.rate - 1) * stride + lay->comp.entry, hd) * scale;
		max = sc[n_slide + i] > max ? sc[n_slide + i] : max;
	}
	float sum = 0.0f;
	for (int64_t i = 0; i < n_slide + n_entry; i++) {
		sc[i] = expf(sc[i] - max);
		sum += sc[i];
	}
	sum += expf(sink - max);
	float *out = j->s->att + (size_t)t * Q + (size_t)h * hd;
	memset(out, 0, (size_t)hd * sizeof(float));
	for (int64_t i = 0; i < n_slide; i++)
		axpy_f32(out, sc[i] / sum, rows + (first + i) * stride, hd);
	for (int64_t i = 0; i < n_entry; i++) {
		int64_t e = sel ? sel[i] : i;
		axpy_f32(out, sc[n_slide + i] / sum, rows + ((e + 1) * lay->comp.rate - 1) * stride + lay->comp.entry, hd);
	}
	rope(out + hd - rot, rot, -pos, j->w->freq, ROPE_GPTJ);
}

/* Projections of the step's rows; each row's roped kv and compressor rows
 * written to its state row. */
static void project(struct forward *f, const struct v4_weights *w, const struct v4_layout *lay,
		    const struct v4_scratch *s, int layer, int n)
{
	const struct model_config *c = &f->m->cfg;
	int64_t QL = c->q_lora_rank, hd = c->head_dim, rot = c->rot_dim, Q = (int64_t)c->n_heads * hd;
	int64_t IH = c->index_n_heads, ID = c->index_head_dim, SF = lay->attn != V4_ATTN_SLIDING ? v4_series_floats(&lay->comp) : 0;
	bool csa = lay->attn == V4_ATTN_CSA;
	matmul(f->pool, s->qr, &w->q_a, f->xn, n);
	for (int t = 0; t < n; t++)
		rmsnorm(s->qr + t * QL, s->qr + t * QL, w->q_a_norm, QL, c->rms_eps);
	matmul(f->pool, s->q, &w->q_b, s->qr, n);
	matmul(f->pool, s->kv, &w->kv, f->xn, n);
	if (SF) {
		matmul(f->pool, s->ckv, &w->comp.kv, f->xn, n);
		matmul(f->pool, s->cgate, &w->comp.gate, f->xn, n);
	}
	if (csa) {
		matmul(f->pool, s->ikv, &w->ix.kv, f->xn, n);
		matmul(f->pool, s->igate, &w->ix.gate, f->xn, n);
		matmul(f->pool, s->iq, &w->ix_q_b, s->qr, n);
		matmul(f->pool, s->iw, &w->ix_w, f->xn, n);
	}
	float wscale = 1.0f / sqrtf((float)IH);
	for (int t = 0; t < n; t++) {
		int64_t pos = f->row_pos[t];
		float *row = (float *)forward_state_rows(f, t, layer, 0) + (size_t)pos * lay->stride;
		for (int h = 0; h < c->n_heads; h++) {
			float *qh = s->q + t * Q + h * hd;
			norm_unweighted(qh, hd, c->rms_eps);
			rope(qh + hd - rot, rot, pos, w->freq, ROPE_GPTJ);
		}
		float *kv = s->kv + t * hd;
		rmsnorm(kv, kv, w->kv_norm, hd, c->rms_eps);
		rope(kv + hd - rot, rot, pos, w->freq, ROPE_GPTJ);
		memcpy(row, kv, (size_t)hd * sizeof(float));
		if (SF) {
			memcpy(row + lay->comp.kv, s->ckv + t * SF, (size_t)SF * sizeof(float));
			memcpy(row + lay->comp.gate, s->cgate + t * SF, (size_t)SF * sizeof(float));
		}
		if (csa) {
			memcpy(row + lay->ix.kv, s->ikv + t * 2 * ID, (size_t)(2 * ID) * sizeof(float));
			memcpy(row + lay->ix.gate, s->igate + t * 2 * ID, (size_t)(2 * ID) * sizeof(float));
			for (int64_t h = 0; h < IH; h++) {
				float *qh = s->iq + (t * IH + h) * ID;
				rope(qh + ID - rot, rot, pos, w->freq, ROPE_GPTJ);
			}
			for (int64_t h = 0; h < IH; h++)
				s->iw[t * IH + h] *= wscale;
		}
	}
	/* Entries of the windows the step's rows close, once every row is in:
	 * a window's rows may come from earlier rows of the same step. */
	for (int t = 0; SF && t < n; t++) {
		int64_t pos = f->row_pos[t];
		if ((pos + 1) % lay->comp.rate)
			continue;
		float *rows = (float *)forward_state_rows(f, t, layer, 0);
		int64_t e = (pos + 1) / lay->comp.rate - 1;
		v4_compress_entry(rows, lay->stride, &lay->comp, e, w->comp.bias, w->comp.norm, c->rms_eps, w->freq, rot,
				  s->pool);
		if (csa)
			v4_compress_entry(rows, lay->stride, &lay->ix, e, w->ix.bias, w->ix.norm, c->rms_eps, w->freq, rot,
					  s->pool);
	}
}

static int v4_run(struct forward *f, int layer, int n, float *acc)
{
	const struct model_config *c = &f->m->cfg;
	const struct v4_weights *w = f->layers[layer].mixer_w;
	struct v4_layout lay;
	layout_of(c, layer, f->ctx, &lay);
	struct carve cv = forward_shared(f);
	struct v4_scratch s;
	scratch_layout(&cv, c, &lay, f->batch, &s);
	project(f, w, &lay, &s, layer, n);
	struct v4_job job = { f, w, &lay, &s, layer, n, 0 };
	if (lay.attn == V4_ATTN_CSA) {
		int64_t visible = 0;
		for (int t = 0; t < n; t++) {
			int64_t v = v4_entries_visible(f->row_pos[t], lay.ix.rate);
			visible = v > visible ? v : visible;
		}
		job.blocks = (int)((visible + V4_ENTRY_BLOCK - 1) / V4_ENTRY_BLOCK);
		if (visible > lay.keep)
			run_tasks(f, score_task, &job, n * job.blocks);
		run_tasks(f, select_task, &job, n);
	}
	run_tasks(f, attend_task, &job, n * c->n_heads);
	/* Grouped output: group g's heads through rows g*o_lora_rank.. of o_a. */
	int64_t og = c->o_groups, OL = c->o_lora_rank, Q = (int64_t)c->n_heads * c->head_dim, IG = Q / og;
	for (int64_t g = 0; g < og; g++) {
		for (int t = 0; t < n; t++)
			memcpy(s.gin + t * IG, s.att + t * Q + g * IG, (size_t)IG * sizeof(float));
		struct qmatrix part;
		quant_matrix_rows(&part, &w->o_a, g * OL, OL);
		matmul(f->pool, s.gout, &part, s.gin, n);
		for (int t = 0; t < n; t++)
			memcpy(s.grouped + t * og * OL + g * OL, s.gout + t * OL, (size_t)OL * sizeof(float));
	}
	matmul(f->pool, s.out, &w->o_b, s.grouped, n);
	for (int64_t i = 0; i < n * (int64_t)c->hidden; i++)
		acc[i] += s.out[i];
	return 0;
}

const struct block_kind block_v4 = {
	.name = "v4",
	.id = 7,
	.weights_bytes = sizeof(struct v4_weights),
	.bind = v4_bind,
	.sizes = v4_sizes,
	.run = v4_run,
	.state_what = "V4 shared K=V, compressor rows and compressed entries",
};
