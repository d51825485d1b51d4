/*
 * generate — see generate.h.
 */
#include "engine/decode/generate.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/decode/constrain.h"
#include "engine/decode/draft_policy.h"
#include "engine/decode/session.h"
#include "base/files.h"
#include "base/json_get.h"
#include "engine/decode/sampler.h"
#include "engine/text/tokenizer.h"
#include "base/error.h"
#include "storage/expert_store.h"
#include "base/clock.h"

int generate_options_default(struct generate_options *o, const char *model_dir)
{
	memset(o, 0, sizeof *o);
	o->n_predict = 128;
	o->draft = -1;
	o->temp = 0;
	o->top_p = 1;
	o->repeat_penalty = 1;
	o->repeat_last_n = 64;
	o->seed = (uint64_t)time(NULL);
	o->forced_batch = true;
	if (!model_dir)
		return 0;
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/generation_config.json", model_dir);
	if (access(path, F_OK) != 0)
		return 0;
	cJSON *j = NULL;
	int rc = json_load(path, &j);
	if (rc)
		return rc;
	bool sample = false;
	int64_t top_k = 0;
	float temp = 1.0f, top_p = 1.0f, min_p = 0.0f, repeat = 1.0f;
	/* GenerationConfig's defaults for the fields the model leaves out. */
	rc = json_get_bool(j, "do_sample", false, path, &sample);
	rc = rc ? rc : json_get_float(j, "temperature", 1.0, 0.0, 100.0, false, path, &temp);
	rc = rc ? rc : json_get_int(j, "top_k", 0, 0, INT32_MAX, path, &top_k);
	rc = rc ? rc : json_get_float(j, "top_p", 1.0, 0.0, 1.0, true, path, &top_p);
	rc = rc ? rc : json_get_float(j, "min_p", 0.0, 0.0, 1.0, false, path, &min_p);
	rc = rc ? rc : json_get_float(j, "repetition_penalty", 1.0, 0.0, 100.0, true, path, &repeat);
	cJSON_Delete(j);
	if (rc)
		return rc;
	o->repeat_penalty = repeat;
	if (!sample)
		return 0;
	o->temp = temp;
	o->top_k = (int32_t)top_k;
	o->top_p = top_p;
	o->min_p = min_p;
	return 0;
}

int generate_options_model(struct generate_options *o, const char *model_dir, unsigned set)
{
	struct generate_options m;
	int rc = generate_options_default(&m, model_dir);
	if (rc)
		return rc;
	if (!(set & GENERATE_SET_TEMP))
		o->temp = m.temp;
	if (!(set & GENERATE_SET_TOP_K))
		o->top_k = m.top_k;
	if (!(set & GENERATE_SET_TOP_P))
		o->top_p = m.top_p;
	if (!(set & GENERATE_SET_MIN_P))
		o->min_p = m.min_p;
	if (!(set & GENERATE_SET_REPEAT_PENALTY)) {
		o->repeat_penalty = m.repeat_penalty;
		/* The model's own penalty is transformers' processor, which
		 * looks back on the whole context; the window of 64 is
		 * llama.cpp's habit for a --repeat-penalty given by hand. */
		if (!(set & GENERATE_SET_REPEAT_LAST_N))
			o->repeat_last_n = -1;
	}
	return 0;
}

int generate_options_parse(struct generate_options *o, unsigned *set, const char *name, const char *arg)
{
	if (!strcmp(name, "temp")) {
		*set |= GENERATE_SET_TEMP;
		return session_parse_float(name, arg, 0, 100, &o->temp);
	}
	if (!strcmp(name, "top-p")) {
		*set |= GENERATE_SET_TOP_P;
		return session_parse_float(name, arg, 1e-6f, 1, &o->top_p);
	}
	if (!strcmp(name, "top-k")) {
		*set |= GENERATE_SET_TOP_K;
		return session_parse_int(name, arg, 0, INT32_MAX, &o->top_k);
	}
	if (!strcmp(name, "seed"))
		return session_parse_seed(arg, &o->seed);
	if (!strcmp(name, "min-p")) {
		*set |= GENERATE_SET_MIN_P;
		return session_parse_float(name, arg, 0, 1, &o->min_p);
	}
	if (!strcmp(name, "repeat-penalty")) {
		*set |= GENERATE_SET_REPEAT_PENALTY;
		/* transformers refuses a penalty of 0, which would divide by it. */
		int rc = session_parse_float(name, arg, 0, 100, &o->repeat_penalty);
		if (!rc && !(o->repeat_penalty > 0))
			rc = error_set(EINVAL, "--repeat-penalty must be above 0 (1 is off), not \"%s\"", arg);
		return rc;
	}
	if (!strcmp(name, "repeat-last-n")) {
		*set |= GENERATE_SET_REPEAT_LAST_N;
		return session_parse_int(name, arg, -1, INT32_MAX, &o->repeat_last_n);
	}
	if (!strcmp(name, "presence-penalty"))
		return session_parse_float(name, arg, -2, 2, &o->presence_penalty);
	if (!strcmp(name, "frequency-penalty"))
		return session_parse_float(name, arg, -2, 2, &o->frequency_penalty);
	return -ENOENT;
}

static bool is_eos(const struct model_config *c, const struct tokenizer *tok, int32_t id)
{
	for (int i = 0; i < c->n_eos; i++)
		if (c->eos_ids[i] == id)
			return true;
	return tok && tokenizer_eos_id(tok) == id;
}

/* One generation: the output stream and what has been emitted. */
struct gen {
	struct session *s;
	const struct tokenizer *tok;
	const struct generate_options *o;
	FILE *out;
	struct generate_stats *st;
	struct sampler smp;
	bool penalize;           /* the sampler's penalties are on */
	int32_t *hist;           /* [n_prompt + n_predict] prompt and emitted tokens, with the repeat penalty */
	int n_hist;
	uint16_t *counts;        /* [vocab] emitted-token counts, with presence or frequency */
	struct constrain *cs;    /* the grammar, or NULL */
	struct tokenizer_stream ts;
	bool have_stream;
	bool done;               /* EOS seen or n_predict reached */
};

/* Emits one sampled token; stops the run at EOS or after n_predict. */
static void gen_emit(struct gen *g, int32_t id)
{
	if (g->done)
		return;
	if (is_eos(&g->s->model.cfg, g->tok, id)) {
		g->st->stopped_at_eos = true;
		g->done = true;
		return;
	}
	if (g->have_stream) {
		const char *text;
		size_t len;
		if (tokenizer_stream_put(&g->ts, id, &text, &len) == 0 && len)
			fwrite(text, 1, len, g->out);
	} else {
		fprintf(g->out, "%s%d", g->st->n_generated ? "," : "", id);
	}
	fflush(g->out);
	if (g->hist)
		g->hist[g->n_hist++] = id;
	if (g->counts && g->counts[id] < UINT16_MAX)
		g->counts[id]++;
	g->st->n_generated++;
	g->done = g->st->n_generated >= g->o->n_predict;
}

/* The penalties on a row of logits for the token after those emitted. */
static void gen_penalize(struct gen *g, float *logits)
{
	if (g->penalize)
		sampler_penalties(&g->smp, logits, g->hist, g->n_hist, g->counts);
}

/* Masks a row of logits to what the grammar admits next. */
static int gen_mask(struct gen *g, float *logits)
{
	int64_t n = constrain_mask(g->cs, logits);
	return n > 0 ? 0 : n < 0 ? (int)n : -EILSEQ;
}

/* The next token from a row of logits (overwritten): among those the
 * grammar admits, sampled, and taken by the grammar. */
static int gen_pick(struct gen *g, float *logits, int32_t *id)
{
	gen_penalize(g, logits);
	int rc = g->cs ? gen_mask(g, logits) : 0;
	if (rc)
		return rc;
	*id = sampler_sample(&g->smp, logits);
	return g->cs ? constrain_accept(g->cs, *id) : 0;
}

/* Buffers and state of decoding. The invariant between steps: `cur` is the
 * next token, sampled but neither emitted nor in the cache; h_prev is the
 * final hidden state of position f->seqs[0].pos - 1; with an MTP module in use,
 * its cache holds the true pairs up to position f->seqs[0].pos - 2. */
struct dec {
	int n;                   /* drafts per speculative step (0: none) */
	bool mtp;                /* keep the MTP cache current */
	float *rows;             /* [n + 1, vocab] logits */
	float *draft_logits;     /* [vocab] */
	float *q;                /* [n, vocab] draft distributions */
	float *p;                /* [vocab] target distribution */
	float *hid;              /* [n + 1, forward_mtp_dim] */
	float *mtp_hid;          /* [n, forward_mtp_dim] module output states, for chained drafts */
	float *h_prev;           /* [forward_mtp_dim] */
	int32_t *toks;           /* [max(n + 1, batch)] cur and the drafts, or cur and forced tokens */
	int32_t cur;
	bool drafted;            /* toks[1..n] and q hold drafts for cur */
	int examined;            /* draft positions the last verification decided */
};

/* Drafts n tokens after cur: the first from h_prev, the rest chained
 * through the module's own output state. Writes the true MTP pair of
 * position f->seqs[0].pos - 1 on the way. */
static int dec_draft(struct gen *g, struct dec *d)
{
	struct forward *f = &g->s->fwd;
	int64_t H = forward_mtp_dim(f), V = g->s->model.cfg.vocab;
	int32_t prev = d->cur;
	const float *h = d->h_prev;
	/* Under a grammar the drafts are drawn among the tokens it admits, on
	 * a copy of its state (verification masks the target rows itself, so
	 * this only raises acceptance). */
	struct grammar_state *saved = NULL;
	bool masking = g->cs != NULL;
	if (masking && constrain_save(g->cs, &saved))
		return -ENOMEM;
	int rc = 0;
	for (int k = 0; !rc && k < d->n; k++) {
		rc = forward_mtp(f, 0, h, &prev, 1, f->seqs[0].pos - 1 + k, d->draft_logits, d->mtp_hid + k * H);
		if (rc)
			break;
		if (masking && constrain_mask(g->cs, d->draft_logits) <= 0) {
			masking = false; /* a dead end: the rest is drafted freely, and rejected */
			error_clear();
		}
		sampler_probs(&g->smp, d->draft_logits, d->q + (size_t)k * V);
		prev = sampler_draw(&g->smp, d->q + (size_t)k * V);
		d->toks[k + 1] = prev;
		if (masking && constrain_accept(g->cs, prev)) {
			masking = false;
			error_clear();
		}
		h = d->mtp_hid + k * H;
	}
	if (saved)
		constrain_restore(g->cs, saved);
	d->drafted = !rc;
	return rc;
}

/* One token with one forward, and with it the tokens the grammar forces
 * after it (appended without sampling, as many as a step holds); keeps the
 * MTP cache current when asked. */
static int dec_plain(struct gen *g, struct dec *d)
{
	struct forward *f = &g->s->fwd;
	int64_t H = forward_mtp_dim(f);
	gen_emit(g, d->cur);
	d->drafted = false;
	int n = 1, rc = 0;
	d->toks[0] = d->cur;
	while (!rc && !g->done && g->cs && g->o->forced_batch && n < f->batch) {
		int32_t t = constrain_forced(g->cs);
		if (t < 0)
			break;
		rc = constrain_accept(g->cs, t);
		d->toks[n++] = t;
		g->st->forced++;
		gen_emit(g, t);
	}
	if (rc || g->done)
		return rc;
	if (n > 1)
		g->st->forced_forwards++;
	int32_t P = f->seqs[0].pos;
	rc = forward_step(f, d->toks, n, d->rows, false);
	g->st->forwards++;
	if (!rc && d->mtp)
		rc = forward_mtp(f, 0, d->h_prev, d->toks, 1, P - 1, NULL, NULL);
	if (!rc && d->mtp && n > 1)
		rc = forward_mtp(f, 0, f->hidden, d->toks + 1, n - 1, P, NULL, NULL);
	if (rc)
		return rc;
	memcpy(d->h_prev, f->hidden + (size_t)(n - 1) * H, (size_t)H * sizeof(float));
	/* Without forced batching a forced token is still the only one the
	 * mask leaves, so it is what gen_pick chooses. */
	if (g->cs && !g->o->forced_batch && constrain_forced(g->cs) >= 0)
		g->st->forced++;
	return gen_pick(g, d->rows, &d->cur);
}

/* Whether a speculative step fits in the context: the verify forward of
 * cur and n drafts, and the drafts after it. */
static bool dec_room(const struct gen *g, const struct dec *d)
{
	const struct forward *f = &g->s->fwd;
	return f->seqs[0].pos + d->n + 1 <= f->ctx;
}

/* One speculative step: verify [cur, d_1..d_n] in one forward and accept
 * the longest prefix the model agrees with (speculative sampling: accept
 * d with probability min(1, p/q), else draw from max(0, p - q); at
 * temperature 0 exactly the greedy tokens), roll the cache back to what was
 * accepted, write the true MTP pairs and draft again. */
static int dec_spec(struct gen *g, struct dec *d)
{
	struct forward *f = &g->s->fwd;
	int64_t H = forward_mtp_dim(f), V = g->s->model.cfg.vocab;
	int rc = d->drafted ? 0 : dec_draft(g, d);
	if (rc)
		return rc;
	int32_t P = f->seqs[0].pos;
	d->toks[0] = d->cur;
	seq_state_snapshot(&f->seqs[0]); /* a state that cannot be cut goes back by replay */
	if ((rc = forward_step(f, d->toks, d->n + 1, d->rows, true)))
		return rc;
	memcpy(d->hid, f->hidden, (size_t)(d->n + 1) * H * sizeof(float));
	g->st->forwards++;
	g->st->drafted += (uint64_t)d->n;
	d->drafted = false;
	gen_emit(g, d->cur);
	int j = 0;
	int32_t next = -1;
	for (; j < d->n && !g->done; j++) {
		gen_penalize(g, d->rows + (size_t)j * V);
		if (g->cs && (rc = gen_mask(g, d->rows + (size_t)j * V)))
			return rc;
		sampler_probs(&g->smp, d->rows + (size_t)j * V, d->p);
		int32_t t = d->toks[j + 1];
		bool accepted;
		int32_t v = sampler_spec_verify(&g->smp, d->p, d->q + (size_t)j * V, t, &accepted);
		if (!accepted) {
			next = v;
			break;
		}
		gen_emit(g, t);
		g->st->accepted++;
		if (g->cs && (rc = constrain_accept(g->cs, t)))
			return rc;
	}
	d->examined = j + (next >= 0); /* a rejected draft was decided too */
	/* cur and the j accepted drafts stay; d->hid keeps the verify's hidden
	 * states, which a replay would overwrite in f->hidden. */
	if ((rc = forward_rewind(f, P + 1 + j, d->toks)))
		return rc;
	if (g->done)
		return 0;
	if (next < 0) {
		gen_penalize(g, d->rows + (size_t)j * V);
		if (g->cs && (rc = gen_mask(g, d->rows + (size_t)j * V)))
			return rc;
		sampler_probs(&g->smp, d->rows + (size_t)j * V, d->p);
		next = sampler_draw(&g->smp, d->p);
	}
	if (g->cs && (rc = constrain_accept(g->cs, next)))
		return rc;
	if (j > 0 && (rc = forward_mtp(f, 0, d->hid, d->toks + 1, j, P, NULL, NULL)))
		return rc;
	memcpy(d->h_prev, d->hid + (size_t)j * H, (size_t)H * sizeof(float));
	d->cur = next;
	return dec_room(g, d) ? dec_draft(g, d) : 0;
}

/* --draft auto: before each step, the cost model of draft_policy.h picks
 * drafting or plain from what the steps so far measured: their time less
 * disk wait, their expert misses and disk wait from the store's counters,
 * and the drafts accepted. Exactness does not depend on the choice; only
 * speed does. */
static int decode_loop(struct gen *g, struct dec *d, int draft_mode)
{
	int rc = 0;
	bool spec = d->n > 0;
	bool autom = draft_mode < 0 && d->n > 0;
	struct draft_policy pol;
	if (autom)
		draft_policy_init(&pol, d->n);
	struct expert_store *store = g->s->model.store;
	const struct expert_store_stats *es = store ? expert_store_stats(store) : NULL;
	int safe_at = 16; /* repinning waits for a step boundary every 16 tokens */
	while (!rc && !g->done) {
		/* Near the end of the context there is no room to verify drafts. */
		bool draft_now = spec && dec_room(g, d);
		/* Tokens the grammar forces after cur go in a plain step's
		 * forward; drafting resumes after them. */
		if (draft_now && g->cs && g->o->forced_batch && constrain_forced(g->cs) >= 0)
			draft_now = false;
		/* The first drafts after a plain stretch are made outside the
		 * measured step: a drafting step in the stream drafts once. */
		if (draft_now && !d->drafted && (rc = dec_draft(g, d)))
			break;
		struct draft_sample smp = { .drafted = draft_now };
		int n0 = g->st->n_generated;
		uint64_t acc0 = g->st->accepted, miss0 = es ? es->misses : 0, req0 = es ? es->requests : 0;
		double wait0 = es ? es->disk_wait_s : 0, t0 = clock_now_s();
		rc = draft_now ? dec_spec(g, d) : dec_plain(g, d);
		if (draft_now) {
			g->st->draft_forwards++;
			g->st->draft_tokens += g->st->n_generated - n0;
		}
		if (g->st->n_generated >= safe_at) {
			session_safe_point(g->s);
			safe_at = g->st->n_generated + 16;
		}
		if (!autom || rc || (spec && !draft_now))
			continue;
		smp.wall_s = clock_now_s() - t0;
		smp.tokens = g->st->n_generated - n0;
		smp.accepted = (int)(g->st->accepted - acc0);
		smp.examined = spec ? d->examined : 0;
		if (es) {
			smp.wait_s = es->disk_wait_s - wait0;
			smp.misses = es->misses - miss0;
			smp.requests = es->requests - req0;
		}
		bool want = draft_policy_step(&pol, &smp) == DRAFT_MODE_DRAFT;
		if (want != spec) {
			/* Plain stretches skip the MTP module entirely; drafts made
			 * after one see a stale MTP cache, which costs acceptance,
			 * never exactness. */
			spec = want;
			d->mtp = spec;
			/* The MTP layers' experts would otherwise keep frames the
			 * plain steps need for as long as their heat lasts. */
			for (int k = 0; !spec && store && k < g->s->model.n_mtp; k++)
				(void)expert_store_cool_layer(store, g->s->model.cfg.n_layers + k);
		}
	}
	if (autom) {
		g->st->draft_auto = true;
		g->st->draft_switches = pol.switches;
		g->st->draft_judged = pol.judged;
		g->st->draft_last = pol.last;
	}
	return rc;
}

int generate_logits_rows(const struct generate_options *o)
{
	int n = o->draft < 0 ? 1 : o->draft > 16 ? 16 : o->draft;
	/* rows [n+1] + q [n] + draft_logits + p + the sampler's two, and the
	 * presence and frequency penalties' counts (half a row) */
	bool counts = o->presence_penalty != 0 || o->frequency_penalty != 0;
	return (n + 1) + (n > 0 ? n : 1) + 4 + counts;
}

int generate_run(struct session *s, const struct tokenizer *tok, const int32_t *prompt,
		 int n_prompt, const struct generate_options *o, FILE *out, struct generate_stats *st)
{
	const struct model_config *c = &s->model.cfg;
	struct forward *f = &s->fwd;
	struct gen g = { .s = s, .tok = tok, .o = o, .out = out, .st = st };
	struct dec d = { 0 };
	memset(st, 0, sizeof *st);
	st->n_prompt = n_prompt;
	int has_mtp = s->model.n_mtp > 0;
	int mode = o->draft; /* -1 auto, 0 off, N */
	/* Drafting draws from the sampler differently from plain steps, so
	 * when sampling, auto's timing-driven choice would make a seeded run's
	 * text depend on load and cache state: auto samples plainly. */
	if (mode < 0 && o->temp > 0)
		mode = 0;
	if (mode > 0 && !has_mtp)
		fprintf(stderr, "colibri: warning: the model has no MTP module; --draft ignored\n");
	d.n = !has_mtp ? 0 : mode < 0 ? 1 : mode;
	if (d.n > f->batch - 1)
		d.n = f->batch - 1;
	if (d.n > 16)
		d.n = 16;
	d.mtp = d.n > 0;
	if (n_prompt <= 0)
		return error_set(EINVAL, "the prompt is empty: nothing to continue from");
	int64_t V = c->vocab, H = forward_mtp_dim(f);
	size_t rows = (size_t)(d.n + 1), drafts = (size_t)(d.n > 0 ? d.n : 1);
	d.rows = malloc(rows * V * sizeof(float));
	d.draft_logits = malloc(V * sizeof(float));
	d.q = malloc(drafts * V * sizeof(float));
	d.p = malloc(V * sizeof(float));
	d.hid = malloc(rows * H * sizeof(float));
	d.mtp_hid = malloc(drafts * H * sizeof(float));
	d.h_prev = malloc(H * sizeof(float));
	d.toks = malloc((rows > (size_t)f->batch ? rows : (size_t)f->batch) * sizeof(int32_t));
	int rc = 0;
	if (!d.rows || !d.draft_logits || !d.q || !d.p || !d.hid || !d.mtp_hid || !d.h_prev || !d.toks)
		rc = error_set(ENOMEM, "out of memory");
	struct sampler_params sp = {
		.temp = o->temp, .top_k = o->top_k, .top_p = o->top_p, .min_p = o->min_p,
		.repeat_penalty = o->repeat_penalty, .repeat_last_n = o->repeat_last_n,
		.presence = o->presence_penalty, .frequency = o->frequency_penalty,
	};
	if (!rc)
		rc = sampler_init(&g.smp, c->vocab, &sp, o->seed);
	/* The penalties' history: the prompt, then each token emitted. */
	g.penalize = !rc && sampler_penalizes(&g.smp);
	if (g.penalize && g.smp.repeat_penalty != 1 && g.smp.repeat_last_n != 0) {
		if ((g.hist = malloc(((size_t)n_prompt + (size_t)o->n_predict) * sizeof *g.hist))) {
			memcpy(g.hist, prompt, (size_t)n_prompt * sizeof *prompt);
			g.n_hist = n_prompt;
		} else {
			rc = error_set(ENOMEM, "out of memory");
		}
	}
	if (!rc && g.penalize && (o->presence_penalty != 0 || o->frequency_penalty != 0) &&
	    !(g.counts = calloc((size_t)V, sizeof *g.counts)))
		rc = error_set(ENOMEM, "out of memory");
	struct constrain cs;
	bool have_cs = false;
	if (!rc && o->grammar && !tok)
		rc = error_set(EINVAL, "a grammar needs the model's tokenizer");
	if (!rc && o->grammar) {
		int32_t eos[MODEL_EOS_MAX + 1];
		int n_eos = 0;
		for (int i = 0; i < c->n_eos; i++)
			eos[n_eos++] = c->eos_ids[i];
		if (tokenizer_eos_id(tok) >= 0)
			eos[n_eos++] = tokenizer_eos_id(tok);
		rc = constrain_init(&cs, o->grammar, tok, NULL, eos, n_eos, c->vocab);
		have_cs = true;
		if (!rc)
			g.cs = &cs;
	}
	if (!rc && tok && !o->print_ids) {
		if ((rc = tokenizer_stream_init(&g.ts, tok)) != 0)
			rc = error_set(-rc, "cannot start the text stream");
		else
			g.have_stream = true;
	}
	/* Prefill in chunks; with drafting, also the MTP pairs the prompt knows. */
	double t0 = clock_now_s();
	for (int i = 0; !rc && i < n_prompt; i += f->batch) {
		int len = n_prompt - i < f->batch ? n_prompt - i : f->batch;
		rc = forward_step(f, prompt + i, len, d.rows, false);
		int known = i + len < n_prompt ? len : len - 1;
		if (!rc && d.mtp && known > 0)
			rc = forward_mtp(f, 0, f->hidden, prompt + i + 1, known, i, NULL, NULL);
		if (!rc && i + len == n_prompt)
			memcpy(d.h_prev, f->hidden + (size_t)(len - 1) * H, (size_t)H * sizeof(float));
	}
	st->prefill_s = clock_now_s() - t0;
	double t1 = clock_now_s();
	if (!rc && o->n_predict > 0) {
		rc = gen_pick(&g, d.rows, &d.cur);
		st->first_token_s = clock_now_s() - t0;
		rc = rc ? rc : decode_loop(&g, &d, mode);
	}
	st->decode_s = clock_now_s() - t1;
	if (g.have_stream) {
		const char *text;
		size_t len;
		if (tokenizer_stream_flush(&g.ts, &text, &len) == 0 && len)
			fwrite(text, 1, len, out);
		tokenizer_stream_free(&g.ts);
	}
	/* A run that fails before its first token prints nothing at all. */
	if (!rc || st->n_generated > 0)
		fputc('\n', out);
	fflush(out);
	sampler_free(&g.smp);
	free(g.hist);
	free(g.counts);
	if (have_cs)
		constrain_free(&cs);
	free(d.rows);
	free(d.draft_logits);
	free(d.q);
	free(d.p);
	free(d.hid);
	free(d.mtp_hid);
	free(d.h_prev);
	free(d.toks);
	return rc;
}

/* The first token comes from the prefill's logits, so decode time covers
 * the forwards of the tokens after it. */
static double decode_tok_s(const struct generate_stats *st)
{
	int n = st->n_generated - 1;
	return st->decode_s > 0 && n > 0 ? n / st->decode_s : 0;
}

void generate_stats_print(const struct generate_stats *st, FILE *f)
{
	fprintf(f, "prompt: %d tokens in %.3f s (%.2f tok/s)\n", st->n_prompt, st->prefill_s,
		st->prefill_s > 0 ? st->n_prompt / st->prefill_s : 0);
	fprintf(f, "decode: %d tokens in %.3f s (%.2f tok/s)%s\n", st->n_generated, st->decode_s,
		decode_tok_s(st), st->stopped_at_eos ? ", stopped at EOS" : "");
	fprintf(f, "time to first token: %.3f s\n", st->first_token_s);
	if (st->drafted)
		fprintf(f, "drafting: %" PRIu64 " of %" PRIu64 " drafts accepted (%.1f%%), %.2f tokens per forward\n",
			st->accepted, st->drafted, 100.0 * st->accepted / st->drafted,
			st->forwards ? (double)st->n_generated / st->forwards : 0);
	if (st->forced)
		fprintf(f, "grammar: %" PRIu64 " forced tokens, %" PRIu64 " forwards ran them after a sampled one, "
			   "%" PRIu64 " forwards saved; %.2f tokens per forward\n",
			st->forced, st->forced_forwards, st->forced_forwards ? st->forced : 0,
			st->forwards ? (double)st->n_generated / st->forwards : 0);
	if (!st->draft_auto)
		return;
	fprintf(f, "draft auto: %" PRIu64 " of %" PRIu64 " forwards drafted (%d of %d tokens), %d switches",
		st->draft_forwards, st->forwards, st->draft_tokens, st->n_generated, st->draft_switches);
	const struct draft_estimate *e = &st->draft_last;
	if (st->draft_judged)
		fprintf(f, "; last estimate: plain %.3f ms/token, drafting %.3f ms/token "
			   "(%.2f tokens per step at %.0f%% acceptance per draft): %s",
			e->plain_s * 1e3, e->draft_s * 1e3, e->tokens_per_step, 100 * e->acceptance,
			e->pays ? "drafting pays" : "plain");
	fputc('\n', f);
}

void generate_stats_record(const struct generate_stats *st, struct session *s)
{
	session_stat(s, "prompt_tokens", st->n_prompt);
	session_stat(s, "generated_tokens", st->n_generated);
	session_stat(s, "prefill_s", st->prefill_s);
	session_stat(s, "decode_s", st->decode_s);
	session_stat(s, "prompt_tok_s", st->prefill_s > 0 ? st->n_prompt / st->prefill_s : 0);
	session_stat(s, "decode_tok_s", decode_tok_s(st));
	session_stat(s, "time_to_first_token_s", st->first_token_s);
	session_stat(s, "drafted", (double)st->drafted);
	session_stat(s, "draft_accepted", (double)st->accepted);
	session_stat(s, "draft_acceptance", st->drafted ? (double)st->accepted / st->drafted : 0);
	session_stat(s, "tokens_per_forward", st->forwards ? (double)st->n_generated / st->forwards : 0);
	session_stat(s, "decode_forwards", (double)st->forwards);
	session_stat(s, "draft_forwards", (double)st->draft_forwards);
	session_stat(s, "draft_tokens", st->draft_tokens);
	session_stat(s, "grammar_forced", (double)st->forced);
	session_stat(s, "grammar_forced_forwards", (double)st->forced_forwards);
	session_stat(s, "grammar_forwards_saved", (double)(st->forced_forwards ? st->forced : 0));
	session_stat(s, "draft_auto", st->draft_auto);
	session_stat(s, "draft_switches", st->draft_switches);
	if (!st->draft_judged)
		return;
	const struct draft_estimate *e = &st->draft_last;
	session_stat(s, "draft_est_plain_s_per_token", e->plain_s);
	session_stat(s, "draft_est_draft_s_per_token", e->draft_s);
	session_stat(s, "draft_est_tokens_per_step", e->tokens_per_step);
	session_stat(s, "draft_est_acceptance", e->acceptance);
	session_stat(s, "draft_est_pays", e->pays);
}
