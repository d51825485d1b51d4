/*
 * mixer_gdn — MIXER_GDN: Gated DeltaNet linear attention (Qwen3.5 / Qwen3.6
 * MoE, Qwen3-Next), following Qwen3_5MoeGatedDeltaNet and
 * Qwen3NextGatedDeltaNet of transformers v5.15.0:
 *
 *   project   q|k|v (the convolution's channels), z, b, a from the normed
 *             input: separate projections (Qwen3.5), or in_proj_qkvz and
 *             in_proj_ba grouped per key head (Qwen3-Next), regrouped here
 *             as fix_query_key_value_ordering does;
 *   conv      a causal depthwise convolution of kernel lin_conv over each
 *             channel's last inputs, then SiLU;
 *   prepare   q and k L2-normalised per key head (eps 1e-6, as l2norm),
 *             q scaled by 1/sqrt(d_k); beta = sigmoid(b),
 *             g = -exp(A_log) * softplus(a + dt_bias); value head h reads
 *             key head h / (value heads per key head) (repeat_interleave);
 *   delta     per value head, over the recurrent state S [d_k, d_v]:
 *             S *= exp(g); delta = (v - S^T k) * beta; S += k delta^T;
 *             o = S^T q;
 *   out       RMSNorm of o per value head times w (not zero-centred) times
 *             fm_siluf(z), then out_proj.
 *
 * One formulation for every batch size: the recurrent form, token by
 * token in each sequence's order (transformers' chunked prefill form is the
 * same rule regrouped; the reference tests check this against it), so a
 * token's result is the same bits at --batch 1 and --batch 64 and alone or
 * beside other sequences.
 *
 * State (fixed, per sequence and layer): the convolution's last
 * lin_conv - 1 inputs [lin_conv - 1, conv_dim], oldest first, then S
 * [lin_v_heads, d_k, d_v]. Nothing grows with the position. Shared
 * scratch: the projections, the convolution output, g and beta, the delta
 * rule's output and out_proj's. Per thread: two rows of d_v floats.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "compute/kernels.h"
#include "compute/threadpool.h"
#include "engine/forward/forward_internal.h"
#include "compute/fmath.h"

struct gdn_weights {
	struct qmatrix qkv;              /* [2*key_dim + value_dim, hidden] in_proj_qkv (Qwen3.5) */
	struct qmatrix z;                /* [value_dim, hidden] in_proj_z */
	struct qmatrix b, a;             /* [v_heads, hidden] f32 in_proj_b, in_proj_a */
	struct qmatrix qkvz;             /* [2*key_dim + 2*value_dim, hidden] grouped (Qwen3-Next) */
	struct qmatrix ba;               /* [2*v_heads, hidden] f32, grouped */
	const float *conv;               /* [conv_dim, lin_conv] */
	const float *dt_bias, *A_log;    /* [v_heads] */
	const float *norm;               /* [v_dim] the gated norm's weight */
	struct qmatrix out;              /* [hidden, value_dim] out_proj */
};

/* The step's buffers in the shared arena. */
struct gdn_scratch {
	float *mixed;                    /* [batch, conv_dim] q|k|v before the convolution */
	float *z;                        /* [batch, value_dim] */
	float *b, *a;                    /* [batch, v_heads] */
	float *fused;                    /* [batch, 2*key_dim + 2*value_dim] grouped projection */
	float *fused_ba;                 /* [batch, 2*v_heads] */
	float *conv;                     /* [batch, conv_dim] after the convolution and SiLU */
	float *g, *beta;                 /* [batch, v_heads] */
	float *core;                     /* [batch, value_dim] the delta rule's output, then gated-normed */
	float *out;                      /* [batch, hidden] out_proj */
	int32_t *seqs;                   /* [batch] the step's sequences, each once */
};

static int64_t key_dim(const struct model_config *c)
{
	return (int64_t)c->lin_k_heads * c->lin_k_dim;
}

static int64_t value_dim(const struct model_config *c)
{
	return (int64_t)c->lin_v_heads * c->lin_v_dim;
}

static int64_t conv_dim(const struct model_config *c)
{
	return 2 * key_dim(c) + value_dim(c);
}

static size_t state_conv_floats(const struct model_config *c)
{
	return (size_t)(c->lin_conv - 1) * (size_t)conv_dim(c);
}

static void gdn_layout(struct carve *cv, const struct model_config *c, int batch, struct gdn_scratch *s)
{
	size_t B = (size_t)batch, F = sizeof(float), G = c->lin_grouped ? 1 : 0;
	size_t C = (size_t)conv_dim(c), V = (size_t)value_dim(c), NV = (size_t)c->lin_v_heads;
	s->mixed = carve(cv, B * C * F);
	s->z = carve(cv, B * V * F);
	s->b = carve(cv, B * NV * F);
	s->a = carve(cv, B * NV * F);
	s->fused = carve(cv, G * B * (C + V) * F);
	s->fused_ba = carve(cv, G * B * 2 * NV * F);
	s->conv = carve(cv, B * C * F);
	s->g = carve(cv, B * NV * F);
	s->beta = carve(cv, B * NV * F);
	s->core = carve(cv, B * V * F);
	s->out = carve(cv, B * (size_t)c->hidden * F);
	s->seqs = carve(cv, B * sizeof(int32_t));
}

static void gdn_sizes(const struct model_config *c, int layer, int batch, int ctx, struct block_sizes *out)
{
	struct carve cv = { 0 };
	struct gdn_scratch s;
	gdn_layout(&cv, c, batch, &s);
	size_t S = (size_t)c->lin_v_heads * (size_t)c->lin_k_dim * (size_t)c->lin_v_dim;
	*out = (struct block_sizes){
		.shared_bytes = cv.used,
		.thread_bytes = 2 * (size_t)c->lin_v_dim * sizeof(float),
		.state_fixed_bytes = (state_conv_floats(c) + S) * sizeof(float),
	};
}

static int gdn_bind(void *wp, const struct model *m, int i)
{
	struct gdn_weights *w = wp;
	const struct model_config *c = &m->cfg;
	int64_t h = c->hidden, kd = key_dim(c), vd = value_dim(c), nv = c->lin_v_heads;
	struct qmatrix conv;
	int rc = 0;
	if (c->lin_grouped) {
		rc = rc ? rc : model_matrix(m, &w->qkvz, 2 * kd + 2 * vd, h, "model.layers.%d.linear_attn.in_proj_qkvz.weight", i);
		rc = rc ? rc : model_f32_matrix(m, &w->ba, 2 * nv, h, "model.layers.%d.linear_attn.in_proj_ba.weight", i);
	} else {
		rc = rc ? rc : model_matrix(m, &w->qkv, 2 * kd + vd, h, "model.layers.%d.linear_attn.in_proj_qkv.weight", i);
		rc = rc ? rc : model_matrix(m, &w->z, vd, h, "model.layers.%d.linear_attn.in_proj_z.weight", i);
		rc = rc ? rc : model_f32_matrix(m, &w->b, nv, h, "model.layers.%d.linear_attn.in_proj_b.weight", i);
		rc = rc ? rc : model_f32_matrix(m, &w->a, nv, h, "model.layers.%d.linear_attn.in_proj_a.weight", i);
	}
	rc = rc ? rc : model_f32_matrix(m, &conv, conv_dim(c), c->lin_conv, "model.layers.%d.linear_attn.conv1d.weight", i);
	rc = rc ? rc : model_vector(m, &w->dt_bias, nv, "model.layers.%d.linear_attn.dt_bias", i);
	rc = rc ? rc : model_vector(m, &w->A_log, nv, "model.layers.%d.linear_attn.A_log", i);
	rc = rc ? rc : model_vector(m, &w->norm, c->lin_v_dim, "model.layers.%d.linear_attn.norm.weight", i);
	rc = rc ? rc : model_matrix(m, &w->out, h, vd, "model.layers.%d.linear_attn.out_proj.weight", i);
	if (!rc)
		w->conv = conv.data;
	return rc;
}

/* Qwen3-Next: each key head's group holds [q (d_k) | k (d_k) | v (r d_v) |
 * z (r d_v)] and [b (r) | a (r)], r value heads per key head; the
 * canonical layout concatenates the groups' q, k, v (the convolution's
 * channels), z, b and a. */
static void regroup(const struct model_config *c, const struct gdn_scratch *s, int n)
{
	int64_t dk = c->lin_k_dim, r = c->lin_v_heads / c->lin_k_heads, rv = r * c->lin_v_dim;
	int64_t kd = key_dim(c), vd = value_dim(c), C = conv_dim(c), NV = c->lin_v_heads;
	int64_t per = 2 * dk + 2 * rv;
	size_t F = sizeof(float);
	for (int t = 0; t < n; t++) {
		const float *in = s->fused + (size_t)t * (size_t)(C + vd), *ba = s->fused_ba + (size_t)t * 2 * NV;
		float *mixed = s->mixed + (size_t)t * C;
		for (int64_t g = 0; g < c->lin_k_heads; g++) {
			const float *grp = in + g * per;
			memcpy(mixed + g * dk, grp, (size_t)dk * F);
			memcpy(mixed + kd + g * dk, grp + dk, (size_t)dk * F);
			memcpy(mixed + 2 * kd + g * rv, grp + 2 * dk, (size_t)rv * F);
			memcpy(s->z + (size_t)t * vd + g * rv, grp + 2 * dk + rv, (size_t)rv * F);
			memcpy(s->b + (size_t)t * NV + g * r, ba + g * 2 * r, (size_t)r * F);
			memcpy(s->a + (size_t)t * NV + g * r, ba + g * 2 * r + r, (size_t)r * F);
		}
	}
}

/* The convolution over the step's rows in order: row t's output takes its
 * sequence's last lin_conv - 1 inputs (the state, which row t then
 * advances) and its own; then SiLU. */
static void conv_rows(struct forward *f, const struct gdn_weights *w, const struct gdn_scratch *s, int layer,
		      int n)
{
	const struct model_config *c = &f->m->cfg;
	int64_t C = conv_dim(c), K = c->lin_conv;
	for (int t = 0; t < n; t++) {
		float *hist = (float *)seq_state_fixed(&f->seqs[f->row_seq[t]], 2 * layer);
		const float *x = s->mixed + (size_t)t * C;
		float *y = s->conv + (size_t)t * C;
		for (int64_t ch = 0; ch < C; ch++) {
			const float *wc = w->conv + ch * K;
			float acc = 0.0f;
			for (int64_t j = 0; j + 1 < K; j++)
				acc += wc[j] * hist[j * C + ch];
			y[ch] = fm_siluf(acc + wc[K - 1] * x[ch]);
		}
		if (K > 1) {
			memmove(hist, hist + C, (size_t)((K - 2) * C) * sizeof(float));
			memcpy(hist + (K - 2) * C, x, (size_t)C * sizeof(float));
		}
	}
}

/* q and k normalised per key head, q scaled; beta and g per value head. */
static void prepare_rows(const struct model_config *c, const struct gdn_weights *w, const struct gdn_scratch *s,
			 int n)
{
	int64_t dk = c->lin_k_dim, kd = key_dim(c), C = conv_dim(c), NV = c->lin_v_heads;
	float scale = 1.0f / sqrtf((float)dk);
	for (int t = 0; t < n; t++) {
		float *q = s->conv + (size_t)t * C, *k = q + kd;
		for (int64_t h = 0; h < c->lin_k_heads; h++) {
			float *qh = q + h * dk, *kh = k + h * dk;
			float iq = 1.0f / sqrtf(dot_f32(qh, qh, dk) + 1e-6f);
			float ik = 1.0f / sqrtf(dot_f32(kh, kh, dk) + 1e-6f);
			for (int64_t i = 0; i < dk; i++) {
				qh[i] = qh[i] * iq * scale;
				kh[i] *= ik;
			}
		}
		for (int64_t h = 0; h < NV; h++) {
			size_t i = (size_t)t * NV + h;
			s->beta[i] = fm_sigmoidf(s->b[i]);
			s->g[i] = -fm_expf(w->A_log[h]) * fm_softplusf(s->a[i] + w->dt_bias[h]);
		}
	}
}

struct gdn_job {
	struct forward *f;
	const struct gdn_scratch *s;
	int layer, n, n_seqs;
};

/* Task = (sequence of the step, value head): the delta rule over that
 * sequence's rows in order, on its state. */
static void delta_task(void *ctx, int task, int thread)
{
	struct gdn_job *j = ctx;
	struct forward *f = j->f;
	const struct model_config *c = &f->m->cfg;
	const struct gdn_scratch *s = j->s;
	int32_t seq = s->seqs[task / c->lin_v_heads];
	int64_t h = task % c->lin_v_heads, dk = c->lin_k_dim, dv = c->lin_v_dim;
	int64_t kh = h / (c->lin_v_heads / c->lin_k_heads), kd = key_dim(c), C = conv_dim(c);
	float *S = (float *)seq_state_fixed(&f->seqs[seq], 2 * j->layer) + state_conv_floats(c) + (size_t)(h * dk * dv);
	struct carve tc = forward_thread(f, thread);
	float *mem = carve(&tc, (size_t)dv * sizeof(float));
	float *delta = carve(&tc, (size_t)dv * sizeof(float));
	for (int t = 0; t < j->n; t++) {
		if (f->row_seq[t] != seq)
			continue;
		const float *q = s->conv + (size_t)t * C + kh * dk, *k = q + kd;
		const float *v = s->conv + (size_t)t * C + 2 * kd + h * dv;
		float decay = fm_expf(s->g[(size_t)t * c->lin_v_heads + h]);
		float beta = s->beta[(size_t)t * c->lin_v_heads + h];
		float *o = s->core + (size_t)t * value_dim(c) + h * dv;
		memset(mem, 0, (size_t)dv * sizeof(float));
		for (int64_t i = 0; i < dk; i++) {
			float *row = S + i * dv;
			for (int64_t jv = 0; jv < dv; jv++)
				row[jv] *= decay;
			axpy_f32(mem, k[i], row, dv);
		}
		for (int64_t jv = 0; jv < dv; jv++)
			delta[jv] = (v[jv] - mem[jv]) * beta;
		memset(o, 0, (size_t)dv * sizeof(float));
		for (int64_t i = 0; i < dk; i++) {
			float *row = S + i * dv;
			axpy_f32(row, k[i], delta, dv);
			axpy_f32(o, q[i], row, dv);
		}
	}
}

static int gdn_run(struct forward *f, int layer, int n, float *acc)
{
	const struct model_config *c = &f->m->cfg;
	const struct gdn_weights *w = f->layers[layer].mixer_w;
	int64_t H = c->hidden, dv = c->lin_v_dim, NV = c->lin_v_heads;
	struct carve cv = forward_shared(f);
	struct gdn_scratch s;
	gdn_layout(&cv, c, f->batch, &s);
	if (c->lin_grouped) {
		matmul(f->pool, s.fused, &w->qkvz, f->xn, n);
		matmul(f->pool, s.fused_ba, &w->ba, f->xn, n);
		regroup(c, &s, n);
	} else {
		matmul(f->pool, s.mixed, &w->qkv, f->xn, n);
		matmul(f->pool, s.z, &w->z, f->xn, n);
		matmul(f->pool, s.b, &w->b, f->xn, n);
		matmul(f->pool, s.a, &w->a, f->xn, n);
	}
	conv_rows(f, w, &s, layer, n);
	prepare_rows(c, w, &s, n);
	int n_seqs = 0;
	for (int t = 0; t < n; t++) {
		int u = 0;
		while (u < n_seqs && s.seqs[u] != f->row_seq[t])
			u++;
		if (u == n_seqs)
			s.seqs[n_seqs++] = f->row_seq[t];
	}
	struct gdn_job job = { f, &s, layer, n, n_seqs };
	if (f->pool)
		threadpool_run(f->pool, delta_task, &job, n_seqs * (int)NV);
	else
		for (int i = 0; i < n_seqs * (int)NV; i++)
			delta_task(&job, i, 0);
	/* Qwen3_5MoeRMSNormGated: norm(o) * w * fm_siluf(z), per value head. */
	for (int64_t r = 0; r < (int64_t)n * NV; r++) {
		float *o = s.core + r * dv;
		const float *z = s.z + r * dv;
		rmsnorm(o, o, w->norm, dv, c->rms_eps);
		for (int64_t i = 0; i < dv; i++)
			o[i] *= fm_siluf(z[i]);
	}
	matmul(f->pool, s.out, &w->out, s.core, n);
	for (int64_t i = 0; i < n * H; i++)
		acc[i] += s.out[i];
	return 0;
}

const struct block_kind block_gdn = {
	.name = "gdn",
	.id = 6,
	.weights_bytes = sizeof(struct gdn_weights),
	.bind = gdn_bind,
	.sizes = gdn_sizes,
	.run = gdn_run,
	.state_what = NULL, /* nothing per position: its fixed state is counted apart (state_fixed_bytes) */
};
