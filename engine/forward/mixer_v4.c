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
 * Sequence state, what transformers' DeepseekV4 cache classes keep:
 *   fixed: a ring of the last sliding_window - 1 roped kv (position p in
 *   slot p % (sliding_window - 1); a query's own key comes from the step),
 *   and for each compressor the projected kv and gate rows of its open
 *   window (HCA: rate rows; CSA: the open window's Cb halves and the Ca
 *   halves of it and of the window before, by window parity, since the
 *   next entry pools the previous window's Ca);
 *   per position: the compressed entries only, entry w (and for CSA the
 *   indexer's after it) spread over the rows of its window's rate
 *   positions, ceil(entry floats / rate) floats each, written when the
 *   window closes. A sliding layer keeps nothing per position.
 * The fixed part knows only the latest positions, so going back restores
 * a snapshot and replays (seq_state.h), as Gated DeltaNet does. Rows of a
 * step read the positions before the step from the state and the step's
 * own from its projections (rows of one sequence come in order), and the
 * state takes the step's rows after its attention. Entry w's rows start
 * before the position that closes it, so a state cut back inside a window
 * may hold bytes of an entry pooled before the cut there; they are never
 * read, and the entry is pooled again when the window closes.
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
#include "compute/fmath.h"

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

/* A layer's state and kind. Fixed floats: the key ring [ring, head_dim],
 * then each compressor's window rows (series_rows_floats); per position:
 * pos_floats, entry w at w * rate * pos_floats. */
struct v4_layout {
	enum v4_attn attn;
	struct v4_series comp, ix;       /* comp: CSA, HCA; ix: CSA */
	int64_t ring;                    /* sliding keys the state keeps: sliding_window - 1 (at least 1) */
	int64_t comp_rows, ix_rows;      /* fixed-float offsets of the compressors' window rows */
	int64_t fixed;                   /* fixed floats */
	int64_t entry_stride;            /* floats from entry w to w+1: rate * pos_floats */
	int64_t pos_floats;              /* floats per position: ceil((comp dim + ix dim) / rate) */
	/* Bounds for the scratch, linear in ctx or capped (plan extrapolates
	 * the forward's bytes from two context sizes, so none may grow faster
	 * later): a context holds at most ctx / rate <= ctx entries. */
	int64_t entries;                 /* entries of a context at most: ctx */
	int64_t keep;                    /* entries a query attends to at most: min(index_topk, ctx) for CSA */
	int64_t window;                  /* sliding keys a query sees at most */
};

/* A compressor's window rows in the fixed state, 2*dim floats a slot (kv
 * then gate): the open window's Cb halves (HCA: its rows) in slots
 * [0, rate); CSA adds the Ca halves of the two latest windows in slots
 * rate + (window % 2) * rate + j. */
static int64_t series_rows_floats(const struct v4_series *s)
{
	return (s->overlap ? 3 : 1) * (int64_t)s->rate * 2 * s->dim;
}

static int64_t series_slot(const struct v4_series *s, int64_t pos, int half)
{
	int64_t j = pos % s->rate;
	return (s->overlap && half == 0 ? s->rate + (pos / s->rate) % 2 * s->rate + j : j) * 2 * s->dim;
}

static enum v4_attn attn_of(const struct model_config *c, int l)
{
	return l < c->n_layers + c->n_mtp_layers ? c->v4_attn[l] : V4_ATTN_SLIDING;
}

static void layout_of(const struct model_config *c, int l, int ctx, struct v4_layout *o)
{
	memset(o, 0, sizeof *o);
	o->attn = attn_of(c, l);
	int64_t hd = c->head_dim, id = c->index_head_dim;
	int32_t rate = o->attn == V4_ATTN_CSA ? c->compress_rate_csa : c->compress_rate_hca;
	/* A query sees sliding_window keys, its own from the step: the state
	 * keeps sliding_window - 1, as DynamicSlidingWindowLayer does. */
	o->ring = c->sliding_window > 1 ? c->sliding_window - 1 : 1;
	int64_t fixed = o->ring * hd, entry = 0;
	if (o->attn != V4_ATTN_SLIDING) {
		o->comp = (struct v4_series){ .dim = hd, .rate = rate, .overlap = o->attn == V4_ATTN_CSA };
		o->comp_rows = fixed;
		fixed += series_rows_floats(&o->comp);
		entry = hd;
		o->entries = ctx;
		o->keep = ctx;
	}
	if (o->attn == V4_ATTN_CSA) {
		o->ix = (struct v4_series){ .dim = id, .rate = rate, .overlap = true };
		o->ix_rows = fixed;
		fixed += series_rows_floats(&o->ix);
		entry += id;
		o->keep = c->index_topk < o->entries ? c->index_topk : o->entries;
	}
	o->fixed = fixed;
	o->pos_floats = rate > 0 && entry ? (entry + rate - 1) / rate : 0;
	o->entry_stride = o->pos_floats * rate;
	o->window = c->sliding_window > 0 && c->sliding_window < ctx ? c->sliding_window : ctx;
}

/* The step's buffers in the shared arena. */
struct v4_scratch {
	float *qr;                       /* [batch, q_lora_rank] q_residual */
	float *q;                        /* [batch, n_heads*head_dim] */
	float *kv;                       /* [batch, head_dim] roped */
	float *ckv, *cgate;              /* [batch, series floats] compressor projections */
	float *ikv, *igate;              /* [batch, 2*index_head_dim] the indexer's */
	float *iq;                       /* [batch, index_n_heads*index_head_dim] */
	float *iw;                       /* [batch, index_n_heads] head weights */
	float *iscores;                  /* [batch, entries] */
	int32_t *sel;                    /* [batch, keep] entries kept, increasing */
	int32_t *nsel;                   /* [batch] */
	int32_t *step0;                  /* [batch] the first position of row t's sequence in the step */
	int32_t *base;                   /* [batch] where its sequence's rows start in byseq */
	int32_t *byseq;                  /* [batch] the step's rows by sequence, each in position order */
	struct v4_slot *slots;           /* [2 * rate] one window's slots */
	struct v4_pool_in *pool_in;      /* [2 * rate] their floats */
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
	size_t B = (size_t)batch, F = sizeof(float), I = sizeof(int32_t);
	size_t Q = (size_t)c->n_heads * (size_t)c->head_dim, og = c->o_groups > 0 ? (size_t)c->o_groups : 1;
	size_t comp = lay->attn != V4_ATTN_SLIDING, csa = lay->attn == V4_ATTN_CSA;
	size_t sf = comp ? (size_t)v4_series_floats(&lay->comp) : 0, id = (size_t)c->index_head_dim;
	size_t pool = (size_t)(c->head_dim > c->index_head_dim ? c->head_dim : c->index_head_dim);
	size_t slots = comp ? 2 * (size_t)lay->comp.rate : 0;
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
	s->sel = carve(cv, csa * B * (size_t)lay->keep * I);
	s->nsel = carve(cv, csa * B * I);
	s->step0 = carve(cv, B * I);
	s->base = carve(cv, B * I);
	s->byseq = carve(cv, B * I);
	s->slots = carve(cv, slots * sizeof(struct v4_slot));
	s->pool_in = carve(cv, slots * sizeof(struct v4_pool_in));
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
		.state_pos_bytes = (size_t)lay.pos_floats * sizeof(float),
		.state_fixed_bytes = (size_t)lay.fixed * sizeof(float),
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
			       c->yarn_original_max, c->yarn_truncate);
	else
		rope_freq_default(w->freq, rot, c->compress_rope_theta);
	return rc;
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

/* Row t's entries (rows of its sequence's state; NULL for a sliding
 * layer) and its fixed floats. */
static float *state_entries(const struct forward *f, int t, int layer)
{
	return (float *)forward_state_rows(f, t, layer, 0);
}

static float *state_fixed(const struct forward *f, int t, int layer)
{
	return (float *)seq_state_fixed(&f->seqs[f->row_seq[t]], 2 * layer);
}

/* The step's row of position pos in row t's sequence, or -1 when pos lies
 * before the step (in the state). */
static int step_row(const struct v4_scratch *s, int t, int64_t pos)
{
	return pos >= s->step0[t] ? s->byseq[s->base[t] + (pos - s->step0[t])] : -1;
}

/* Groups the step's rows by sequence (each sequence's rows come in order
 * and take consecutive positions from its first row's). O(n^2) over the
 * rows of a step; fine while a step holds at most a few thousand. */
static void step_map(const struct forward *f, int n, const struct v4_scratch *s)
{
	int k = 0;
	for (int t = 0; t < n; t++) {
		int head = t;
		for (int u = 0; u < t && head == t; u++)
			head = f->row_seq[u] == f->row_seq[t] ? u : t;
		if (head < t) {
			s->base[t] = s->base[head];
			s->step0[t] = s->step0[head];
			continue;
		}
		s->base[t] = k;
		s->step0[t] = f->row_pos[t];
		for (int u = t; u < n; u++)
			if (f->row_seq[u] == f->row_seq[t])
				s->byseq[k++] = u;
	}
}

/* Row t's sliding key at position pos: the step's, or the state's ring. */
static const float *slide_key(const struct forward *f, const struct v4_job *j, int t, int64_t pos)
{
	int64_t hd = f->m->cfg.head_dim;
	int u = step_row(j->s, t, pos);
	return u >= 0 ? j->s->kv + (size_t)u * hd : state_fixed(f, t, j->layer) + (pos % j->lay->ring) * hd;
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
	const float *keys = state_entries(f, t, j->layer) + lay->comp.dim;
	v4_index_scores(j->s->iscores + (size_t)t * lay->entries, j->s->iq + (size_t)t * IH * ID,
			j->s->iw + (size_t)t * IH, IH, keys, lay->entry_stride, ID, e0, e1, 1.0f / sqrtf((float)ID));
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
	int64_t hd = c->head_dim, Q = (int64_t)c->n_heads * hd, rot = c->rot_dim, es = lay->entry_stride;
	int64_t pos = f->row_pos[t], first = pos + 1 > lay->window ? pos + 1 - lay->window : 0;
	int64_t n_slide = pos + 1 - first, n_entry = 0;
	const int32_t *sel = NULL;
	if (lay->attn == V4_ATTN_CSA) {
		sel = j->s->sel + (size_t)t * lay->keep;
		n_entry = j->s->nsel[t];
	} else if (lay->attn == V4_ATTN_HCA) {
		n_entry = v4_entries_visible(pos, lay->comp.rate);
	}
	const float *entries = state_entries(f, t, j->layer);
	const float *q = j->s->q + (size_t)t * Q + (size_t)h * hd;
	struct carve tc = forward_thread(f, thread);
	float *sc = carve(&tc, (size_t)(n_slide + n_entry + 1) * sizeof(float));
	float scale = 1.0f / sqrtf((float)hd), sink = j->w->sinks[h], max = sink;
	for (int64_t i = 0; i < n_slide; i++) {
		sc[i] = dot_f32(q, slide_key(f, j, t, first + i), hd) * scale;
		max = sc[i] > max ? sc[i] : max;
	}
	for (int64_t i = 0; i < n_entry; i++) {
		int64_t e = sel ? sel[i] : i;
		sc[n_slide + i] = dot_f32(q, entries + e * es, hd) * scale;
		max = sc[n_slide + i] > max ? sc[n_slide + i] : max;
	}
	float sum = 0.0f;
	for (int64_t i = 0; i < n_slide + n_entry; i++) {
		sc[i] = fm_expf(sc[i] - max);
		sum += sc[i];
	}
	sum += fm_expf(sink - max);
	float *out = j->s->att + (size_t)t * Q + (size_t)h * hd;
	memset(out, 0, (size_t)hd * sizeof(float));
	for (int64_t i = 0; i < n_slide; i++)
		axpy_f32(out, sc[i] / sum, slide_key(f, j, t, first + i), hd);
	for (int64_t i = 0; i < n_entry; i++) {
		int64_t e = sel ? sel[i] : i;
		axpy_f32(out, sc[n_slide + i] / sum, entries + e * es, hd);
	}
	rope(out + hd - rot, rot, -pos, j->w->freq, ROPE_GPTJ);
}

/* Entry e of series `ser` for row t, into out: its window's rows from the
 * step's projections (kv, gate: [batch, series floats]) or the state's
 * window rows (fixed floats `win`). */
static void close_window(const struct forward *f, const struct v4_scratch *s, const struct v4_series *ser,
			 const struct v4_comp_weights *cw, const float *kv, const float *gate, const float *win, int t,
			 int64_t e, float *out, const float *freq)
{
	const struct model_config *c = &f->m->cfg;
	int64_t D = ser->dim, SF = v4_series_floats(ser);
	int n = v4_window_slots(s->slots, ser, e);
	for (int i = 0; i < n; i++) {
		const struct v4_slot *sl = &s->slots[i];
		int u = step_row(s, t, sl->pos);
		const float *b = cw->bias + (int64_t)sl->bias_row * SF + sl->half * D;
		if (u >= 0) {
			s->pool_in[i] = (struct v4_pool_in){ kv + (size_t)u * SF + sl->half * D,
							     gate + (size_t)u * SF + sl->half * D, b };
		} else {
			const float *r = win + series_slot(ser, sl->pos, sl->half);
			s->pool_in[i] = (struct v4_pool_in){ r, r + D, b };
		}
	}
	v4_compress_entry(out, s->pool_in, n, D, cw->norm, c->rms_eps, freq, c->rot_dim, e * ser->rate, s->pool);
}

/* The projected row of position pos (kv, gate: series floats) into a
 * series' window rows. */
static void keep_row(float *win, const struct v4_series *ser, int64_t pos, const float *kv, const float *gate)
{
	int64_t D = ser->dim;
	for (int half = 0; half < (ser->overlap ? 2 : 1); half++) {
		float *r = win + series_slot(ser, pos, half);
		memcpy(r, kv + half * D, (size_t)D * sizeof(float));
		memcpy(r + D, gate + half * D, (size_t)D * sizeof(float));
	}
}

/* Projections of the step's rows, and the entries of the windows they
 * close (written to their sequence's state). */
static void project(struct forward *f, const struct v4_weights *w, const struct v4_layout *lay,
		    const struct v4_scratch *s, int layer, int n)
{
	const struct model_config *c = &f->m->cfg;
	int64_t QL = c->q_lora_rank, hd = c->head_dim, rot = c->rot_dim, Q = (int64_t)c->n_heads * hd;
	int64_t IH = c->index_n_heads, ID = c->index_head_dim;
	bool comp = lay->attn != V4_ATTN_SLIDING, csa = lay->attn == V4_ATTN_CSA;
	matmul(f->pool, s->qr, &w->q_a, f->xn, n);
	for (int t = 0; t < n; t++)
		rmsnorm(s->qr + t * QL, s->qr + t * QL, w->q_a_norm, QL, c->rms_eps);
	matmul(f->pool, s->q, &w->q_b, s->qr, n);
	matmul(f->pool, s->kv, &w->kv, f->xn, n);
	if (comp) {
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
		for (int h = 0; h < c->n_heads; h++) {
			float *qh = s->q + t * Q + h * hd;
			rmsnorm_plain(qh, qh, hd, c->rms_eps); /* q_b_norm */
			rope(qh + hd - rot, rot, pos, w->freq, ROPE_GPTJ);
		}
		float *kv = s->kv + t * hd;
		rmsnorm(kv, kv, w->kv_norm, hd, c->rms_eps);
		rope(kv + hd - rot, rot, pos, w->freq, ROPE_GPTJ);
		if (csa) {
			for (int64_t h = 0; h < IH; h++) {
				float *qh = s->iq + (t * IH + h) * ID;
				rope(qh + ID - rot, rot, pos, w->freq, ROPE_GPTJ);
			}
			for (int64_t h = 0; h < IH; h++)
				s->iw[t * IH + h] *= wscale;
		}
	}
	/* Entries of the windows the step's rows close, once every row is
	 * projected: a window's rows may come from earlier rows of the step. */
	for (int t = 0; comp && t < n; t++) {
		int64_t pos = f->row_pos[t];
		if ((pos + 1) % lay->comp.rate)
			continue;
		int64_t e = (pos + 1) / lay->comp.rate - 1;
		float *entry = state_entries(f, t, layer) + e * lay->entry_stride;
		const float *fixed = state_fixed(f, t, layer);
		close_window(f, s, &lay->comp, &w->comp, s->ckv, s->cgate, fixed + lay->comp_rows, t, e, entry, w->freq);
		if (csa)
			close_window(f, s, &lay->ix, &w->ix, s->ikv, s->igate, fixed + lay->ix_rows, t, e,
				     entry + lay->comp.dim, w->freq);
	}
}

/* The step's rows into their sequences' fixed state, in row order (so
 * each keeps its latest positions): the roped key into the ring, the
 * compressor rows into the window rows. After the attention, which reads
 * the positions before the step there. */
static void keep_step(struct forward *f, const struct v4_layout *lay, const struct v4_scratch *s, int layer, int n)
{
	const struct model_config *c = &f->m->cfg;
	int64_t hd = c->head_dim, ID = c->index_head_dim;
	int64_t SF = lay->attn != V4_ATTN_SLIDING ? v4_series_floats(&lay->comp) : 0;
	for (int t = 0; t < n; t++) {
		int64_t pos = f->row_pos[t];
		float *fixed = state_fixed(f, t, layer);
		memcpy(fixed + (pos % lay->ring) * hd, s->kv + t * hd, (size_t)hd * sizeof(float));
		if (SF)
			keep_row(fixed + lay->comp_rows, &lay->comp, pos, s->ckv + t * SF, s->cgate + t * SF);
		if (lay->attn == V4_ATTN_CSA)
			keep_row(fixed + lay->ix_rows, &lay->ix, pos, s->ikv + t * 2 * ID, s->igate + t * 2 * ID);
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
	step_map(f, n, &s);
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
	keep_step(f, &lay, &s, layer, n);
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
	.state_what = "V4 compressed entries", /* a sliding layer keeps none; the sliding keys and open
						    * windows are fixed state */
};
