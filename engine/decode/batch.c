/*
 * batch — see batch.h. Invariants per slot: tokens[0..seq.pos) is what its
 * sequence state holds; while DECODE, tokens has one more, `next`, sampled
 * and reported but not yet run (so seq.pos == n_tokens - 1); while PREFILL,
 * tokens[seq.pos..n_tokens) is the prompt still to run.
 *
 * Session file of batch_save (little-endian):
 *   char[8] "CLBSESS1", u64 model_id, u32 n_tokens, i32 tokens[n_tokens],
 *   u64 XXH3-64 of the above, then the sequence state (seq_state_save),
 * and nothing after it: batch_load refuses trailing bytes.
 */
#include "engine/decode/batch.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/error.h"
#include "compute/kernels.h"
#include "engine/decode/constrain.h"
#include "engine/text/tokenizer.h"
#include "compute/fmath.h"

#define SESSION_MAGIC "CLBSESS1"

static struct seq_state *seq_of(const struct batch *b, int i)
{
	return &b->f->seqs[i];
}

int batch_init(struct batch *b, struct forward *f, const struct tokenizer *tok, batch_token_fn on_token, void *ctx)
{
	memset(b, 0, sizeof *b);
	b->f = f;
	b->tok = tok;
	b->on_token = on_token;
	b->ctx = ctx;
	b->forced_batch = true;
	b->n_slots = f->n_seqs;
	size_t V = (size_t)f->m->cfg.vocab, S = (size_t)b->n_slots;
	b->slots = calloc(S, sizeof *b->slots);
	b->logits = malloc(S * V * sizeof *b->logits);
	b->work = malloc(V * sizeof *b->work);
	b->rows = malloc((size_t)f->batch * sizeof *b->rows);
	b->out = malloc(S * sizeof *b->out);
	b->out_slot = malloc(S * sizeof *b->out_slot);
	if (!b->slots || !b->logits || !b->work || !b->rows || !b->out || !b->out_slot) {
		batch_free(b);
		return error_set(ENOMEM, "out of memory");
	}
	for (int i = 0; i < b->n_slots; i++) {
		struct batch_slot *s = &b->slots[i];
		s->cap = f->ctx + 1;
		s->tokens = malloc((size_t)s->cap * sizeof *s->tokens);
		s->counts = calloc(V, sizeof *s->counts);
		if (!s->tokens || !s->counts) {
			batch_free(b);
			return error_set(ENOMEM, "out of memory");
		}
	}
	return 0;
}

void batch_free(struct batch *b)
{
	for (int i = 0; b->slots && i < b->n_slots; i++) {
		free(b->slots[i].tokens);
		free(b->slots[i].counts);
		if (b->slots[i].have_sampler)
			sampler_free(&b->slots[i].smp);
	}
	free(b->slots);
	free(b->logits);
	free(b->work);
	free(b->rows);
	free(b->out);
	free(b->out_slot);
	memset(b, 0, sizeof *b);
}

/* Tokens of prompt[0..n) that slot i's state already holds, in order. */
static int common_prefix(const struct batch *b, int i, const int32_t *prompt, int n)
{
	const struct batch_slot *s = &b->slots[i];
	int held = seq_of(b, i)->pos < s->n_tokens ? seq_of(b, i)->pos : s->n_tokens, k = 0;
	while (k < held && k < n && s->tokens[k] == prompt[k])
		k++;
	return k;
}

int batch_pick(const struct batch *b, const int32_t *prompt, int n)
{
	int best = -1, best_k = -1;
	for (int i = 0; i < b->n_slots; i++) {
		if (b->slots[i].state != BATCH_SLOT_FREE)
			continue;
		int k = common_prefix(b, i, prompt, n);
		if (k > best_k) {
			best = i;
			best_k = k;
		}
	}
	return best;
}

int batch_start(struct batch *b, int i, const int32_t *prompt, int n, const struct batch_params *p, void *user,
		int *cached)
{
	if (i < 0 || i >= b->n_slots || b->slots[i].state != BATCH_SLOT_FREE)
		return error_set(EINVAL, "batch: slot %d is not free", i);
	struct batch_slot *s = &b->slots[i];
	struct seq_state *seq = seq_of(b, i);
	if (n < 1)
		return error_set(EINVAL, "the prompt is empty");
	if (n > b->f->ctx)
		return error_set(ENOSPC, "the prompt has %d tokens; the context holds %d", n, b->f->ctx);
	if (p->top_logprobs < 0 || p->top_logprobs > BATCH_LOGPROBS_MAX || p->n_predict < 0)
		return error_set(EINVAL, "top_logprobs must be in [0, %d] and n_predict >= 0", BATCH_LOGPROBS_MAX);
	if (s->have_sampler)
		sampler_free(&s->smp);
	s->have_sampler = false;
	struct sampler_params sp = {
		.temp = p->temp, .top_k = p->top_k, .top_p = p->top_p, .min_p = p->min_p,
		.repeat_penalty = p->repeat_penalty, .repeat_last_n = p->repeat_last_n,
		.presence = p->presence_penalty, .frequency = p->frequency_penalty,
	};
	int rc = sampler_init(&s->smp, b->f->m->cfg.vocab, &sp, p->seed);
	if (rc)
		return rc;
	s->have_sampler = true;
	/* The prompt cache: keep what the state holds of this prompt, but run
	 * its last token again so that it yields logits. */
	int keep = common_prefix(b, i, prompt, n);
	if (keep > n - 1)
		keep = n - 1;
	if (seq_state_truncate(seq, keep) != 0) {
		/* A state that cannot be cut (a recurrent one) goes back to its
		 * checkpoint when that lies within what is kept, else starts over. */
		error_clear();
		if (seq_state_restore_checkpoint(seq, keep) == 0) {
			keep = seq->pos;
		} else {
			seq_state_reset(seq);
			keep = 0;
		}
	}
	memcpy(s->tokens, prompt, (size_t)n * sizeof *prompt);
	memset(s->counts, 0, (size_t)b->f->m->cfg.vocab * sizeof *s->counts);
	s->n_tokens = n;
	s->n_prompt = n;
	s->n_cached = keep;
	s->n_generated = 0;
	s->p = *p;
	s->user = user;
	s->finish = BATCH_RUNNING;
	s->state = BATCH_SLOT_PREFILL;
	if (cached)
		*cached = keep;
	return 0;
}

void batch_finish(struct batch *b, int i)
{
	struct batch_slot *s = &b->slots[i];
	if (s->state == BATCH_SLOT_FREE)
		return;
	if (s->state == BATCH_SLOT_DECODE)
		s->n_tokens--; /* `next` never ran: the history is what the state holds */
	else
		s->n_tokens = seq_of(b, i)->pos; /* an unfinished prompt keeps what ran */
	s->state = BATCH_SLOT_FREE;
	s->finish = BATCH_STOPPED;
}

int batch_active(const struct batch *b)
{
	int n = 0;
	for (int i = 0; i < b->n_slots; i++)
		n += b->slots[i].state != BATCH_SLOT_FREE;
	return n;
}

static bool is_eos(const struct batch *b, int32_t id)
{
	const struct model_config *c = &b->f->m->cfg;
	for (int i = 0; i < c->n_eos; i++)
		if (c->eos_ids[i] == id)
			return true;
	return b->tok && tokenizer_eos_id(b->tok) == id;
}

/* Log probabilities of the raw logits: the chosen token's and the top n. */
static void logprobs_of(const struct batch *b, const float *logits, struct batch_token *t, int n_top)
{
	int32_t V = b->f->m->cfg.vocab;
	float mx = logits[sampler_argmax(logits, V)];
	double sum = 0;
	for (int32_t v = 0; v < V; v++)
		sum += fm_exp((double)logits[v] - mx);
	float lse = mx + (float)fm_log(sum);
	t->logprob = logits[t->id] - lse;
	t->n_top = n_top;
	if (n_top > 0) {
		topk(t->top_id, logits, V, n_top);
		for (int k = 0; k < n_top; k++)
			t->top_logprob[k] = logits[t->top_id[k]] - lse;
	}
}

/* Ends slot i after a step whose rows ran (the state holds every token)
 * because its grammar admits no token. */
static void grammar_end(struct batch *b, int i)
{
	struct batch_slot *s = &b->slots[i];
	s->n_tokens = seq_of(b, i)->pos;
	s->state = BATCH_SLOT_FREE;
	s->finish = BATCH_GRAMMAR;
	if (b->on_token)
		b->on_token(b->ctx, i, NULL, BATCH_GRAMMAR);
}

static enum batch_finish report_token(struct batch *b, int i, const struct batch_token *tp);

/* Samples slot i's next token from its logits row and reports it. Under
 * a grammar the row is masked in b->work (logprobs stay the model's) and
 * the grammar takes the token; a grammar that admits nothing ends the slot
 * with BATCH_GRAMMAR and no token. */
static void sample_slot(struct batch *b, int i, float *row)
{
	struct batch_slot *s = &b->slots[i];
	int32_t V = b->f->m->cfg.vocab;
	struct batch_token t = { 0 };
	bool penalties = sampler_penalizes(&s->smp);
	float *x = row;
	if (penalties || s->p.logprobs || s->p.cs) {
		memcpy(b->work, row, (size_t)V * sizeof *row);
		x = b->work;
	}
	/* Every token of the history has run: the prompt, then what was
	 * generated (and forced) up to the one this row follows. */
	if (penalties)
		sampler_penalties(&s->smp, x, s->tokens, s->n_tokens, s->counts);
	if (s->p.cs && constrain_mask(s->p.cs, x) <= 0) {
		grammar_end(b, i);
		return;
	}
	t.id = sampler_sample(&s->smp, x);
	if (s->p.cs && constrain_accept(s->p.cs, t.id) != 0) {
		grammar_end(b, i);
		return;
	}
	if (s->p.logprobs)
		logprobs_of(b, row, &t, s->p.top_logprobs);
	t.eos = is_eos(b, t.id);
	s->state = BATCH_SLOT_DECODE;
	enum batch_finish fin = report_token(b, i, &t);
	/* on_token may have finished the slot (a stop string): then it is free. */
	if (fin != BATCH_RUNNING || s->state == BATCH_SLOT_FREE || !s->p.cs || !b->forced_batch || s->p.logprobs)
		return;
	/* The tokens the grammar forces after it are appended now, without
	 * sampling, and the next step runs them with the sampled one as a
	 * prompt's rows (its last row samples): one forward for all of them.
	 * Without logprobs only: a forced token has no row of logits. */
	int32_t f;
	while (s->n_tokens < s->cap && (f = constrain_forced(s->p.cs)) >= 0) {
		if (constrain_accept(s->p.cs, f) != 0) {
			error_clear();
			break;
		}
		struct batch_token ft = { .id = f };
		s->state = BATCH_SLOT_PREFILL;
		if (report_token(b, i, &ft) != BATCH_RUNNING || s->state == BATCH_SLOT_FREE)
			return;
	}
}

/* Appends a chosen token to slot i's history and reports it; the slot
 * decodes on (BATCH_RUNNING, its `next` not yet in the state) or ends
 * here (EOS, n_predict, the context). */
static enum batch_finish report_token(struct batch *b, int i, const struct batch_token *tp)
{
	struct batch_slot *s = &b->slots[i];
	struct batch_token t = *tp;
	enum batch_finish fin = BATCH_RUNNING;
	if (t.eos) {
		fin = BATCH_EOS;
	} else {
		s->tokens[s->n_tokens++] = t.id;
		s->n_generated++;
		if (s->counts[t.id] < UINT16_MAX)
			s->counts[t.id]++;
		/* Another step needs the position of this token in the state. */
		if (s->n_generated >= s->p.n_predict || s->n_tokens > b->f->ctx)
			fin = BATCH_LENGTH;
	}
	s->next = t.id; /* DECODE; forced tokens are pending rows of a PREFILL slot */
	s->finish = fin;
	if (fin != BATCH_RUNNING) {
		if (!t.eos)
			s->n_tokens--; /* this token never runs */
		if (s->state == BATCH_SLOT_PREFILL)
			s->n_tokens = seq_of(b, i)->pos; /* nor do the forced ones before it */
		s->state = BATCH_SLOT_FREE;
	}
	if (b->on_token)
		b->on_token(b->ctx, i, &t, fin);
	return fin;
}

/* A request of n_predict 0 ends before its first token. */
static void finish_empty(struct batch *b, int i)
{
	struct batch_slot *s = &b->slots[i];
	s->state = BATCH_SLOT_FREE;
	s->finish = BATCH_LENGTH;
	s->n_tokens = seq_of(b, i)->pos;
	if (b->on_token)
		b->on_token(b->ctx, i, NULL, BATCH_LENGTH);
}

int batch_step(struct batch *b)
{
	int budget = b->f->batch, n = 0, n_out = 0;
	for (int i = 0; i < b->n_slots; i++)
		if (b->slots[i].state == BATCH_SLOT_PREFILL && b->slots[i].p.n_predict == 0)
			finish_empty(b, i);
	/* Decoding slots first, one row each: their latency is a user's wait. */
	for (int i = 0; i < b->n_slots && n < budget; i++) {
		struct batch_slot *s = &b->slots[i];
		if (s->state != BATCH_SLOT_DECODE)
			continue;
		b->rows[n] = (struct forward_row){ i, s->next };
		b->out[n_out] = n++;
		b->out_slot[n_out++] = i;
	}
	/* Then the prompts, in slot order, as far as the rows go. */
	for (int i = 0; i < b->n_slots && n < budget; i++) {
		struct batch_slot *s = &b->slots[i];
		if (s->state != BATCH_SLOT_PREFILL)
			continue;
		int from = seq_of(b, i)->pos, left = s->n_tokens - from;
		int take = left < budget - n ? left : budget - n;
		/* A step ends at the checkpoint position, so that the state is
		 * there to keep after it. */
		if (from < s->p.checkpoint_at && from + take > s->p.checkpoint_at)
			take = s->p.checkpoint_at - from;
		for (int k = 0; k < take; k++)
			b->rows[n++] = (struct forward_row){ i, s->tokens[from + k] };
		if (take == left) {
			b->out[n_out] = n - 1;
			b->out_slot[n_out++] = i;
		}
	}
	if (n == 0)
		return 0;
	int rc = forward_step_rows(b->f, b->rows, n, b->out, n_out, b->logits);
	b->steps++;
	b->rows_run += (uint64_t)n;
	for (int i = 0; !rc && i < b->n_slots; i++)
		if (b->slots[i].state == BATCH_SLOT_PREFILL && b->slots[i].p.checkpoint_at > 0 &&
		    seq_of(b, i)->pos == b->slots[i].p.checkpoint_at)
			seq_state_checkpoint(seq_of(b, i));
	if (rc) {
		for (int i = 0; i < b->n_slots; i++) {
			if (b->slots[i].state == BATCH_SLOT_FREE)
				continue;
			batch_finish(b, i);
			if (b->on_token)
				b->on_token(b->ctx, i, NULL, BATCH_STOPPED);
		}
		return rc;
	}
	size_t V = (size_t)b->f->m->cfg.vocab;
	for (int k = 0; k < n_out; k++)
		sample_slot(b, b->out_slot[k], b->logits + (size_t)k * V);
	return batch_active(b);
}

/* Writes n bytes and hashes them. */
static int put(FILE *f, XXH3_state_t *h, const void *p, size_t n)
{
	if (h)
		XXH3_64bits_update(h, p, n);
	return n && fwrite(p, 1, n, f) != n ? -EIO : 0;
}

int batch_save(const struct batch *b, int i, uint64_t model_id, const char *path)
{
	const struct batch_slot *s = &b->slots[i];
	const struct seq_state *seq = seq_of(b, i);
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *f = fopen(tmp, "wb");
	if (!f)
		return error_set(errno, "%s: cannot create: %s", tmp, strerror(errno));
	XXH3_state_t *h = XXH3_createState();
	int rc = h ? 0 : error_set(ENOMEM, "out of memory");
	uint32_t n = (uint32_t)seq->pos;
	if (!rc) {
		XXH3_64bits_reset(h);
		rc = put(f, h, SESSION_MAGIC, 8);
		rc = rc ? rc : put(f, h, &model_id, sizeof model_id);
		rc = rc ? rc : put(f, h, &n, sizeof n);
		rc = rc ? rc : put(f, h, s->tokens, n * sizeof *s->tokens);
		uint64_t sum = XXH3_64bits_digest(h);
		rc = rc ? rc : put(f, NULL, &sum, sizeof sum);
		rc = rc ? error_set(EIO, "%s: write failed", tmp) : seq_state_save(seq, model_id, f, tmp);
	}
	XXH3_freeState(h);
	if (!rc && (fflush(f) != 0 || fsync(fileno(f)) != 0))
		rc = error_set(errno, "%s: cannot flush: %s", tmp, strerror(errno));
	if (fclose(f) != 0 && !rc)
		rc = error_set(EIO, "%s: write failed", tmp);
	if (!rc && rename(tmp, path) != 0)
		rc = error_set(errno, "%s: cannot rename into place: %s", path, strerror(errno));
	if (rc)
		unlink(tmp);
	return rc;
}

/* Reads n bytes and hashes them. */
static int get(FILE *f, XXH3_state_t *h, void *p, size_t n)
{
	if (n && fread(p, 1, n, f) != n)
		return -EIO;
	XXH3_64bits_update(h, p, n);
	return 0;
}

/* A session ends where its state ends: bytes after it were not written by
 * batch_save and no checksum covers them, so the file is refused rather than
 * read as if they were not there. */
static int trailing_check(FILE *f, const char *path)
{
	long end = ftell(f);
	struct stat st;
	if (end < 0 || fstat(fileno(f), &st) != 0)
		return error_set(errno, "%s: cannot read: %s", path, strerror(errno));
	if (st.st_size != (off_t)end)
		return error_set(EINVAL, "%s: %lld bytes after the end of the session (the session ends at byte %ld "
					 "of %lld)", path, (long long)st.st_size - end, end, (long long)st.st_size);
	return 0;
}

int batch_load(struct batch *b, int i, uint64_t model_id, const char *path)
{
	if (i < 0 || i >= b->n_slots || b->slots[i].state != BATCH_SLOT_FREE)
		return error_set(EINVAL, "batch: slot %d is not free", i);
	struct batch_slot *s = &b->slots[i];
	struct seq_state *seq = seq_of(b, i);
	s->n_tokens = 0;
	seq_state_reset(seq);
	FILE *f = fopen(path, "rb");
	if (!f)
		return error_set(errno, "%s: cannot open: %s", path, strerror(errno));
	XXH3_state_t *h = XXH3_createState();
	char magic[8];
	uint64_t id = 0, sum = 0;
	uint32_t n = 0;
	int rc = h ? 0 : error_set(ENOMEM, "out of memory");
	if (!rc) {
		XXH3_64bits_reset(h);
		if (get(f, h, magic, 8) || memcmp(magic, SESSION_MAGIC, 8) != 0)
			rc = error_set(EINVAL, "%s: not a colibri session", path);
		else if (get(f, h, &id, sizeof id) || get(f, h, &n, sizeof n))
			rc = error_set(EINVAL, "%s: truncated session", path);
		else if (id != model_id)
			rc = error_set(EINVAL, "%s: the session belongs to another model", path);
		else if (n > (uint32_t)b->f->ctx)
			rc = error_set(EINVAL, "%s: the session holds %u tokens; the context holds %d", path, n, b->f->ctx);
		else if (get(f, h, s->tokens, n * sizeof *s->tokens) || fread(&sum, sizeof sum, 1, f) != 1)
			rc = error_set(EINVAL, "%s: truncated session", path);
		else if (sum != XXH3_64bits_digest(h))
			rc = error_set(EINVAL, "%s: the session is corrupt (checksum mismatch)", path);
	}
	XXH3_freeState(h);
	if (!rc)
		rc = seq_state_load(seq, model_id, f, path);
	if (!rc && seq->pos != (int32_t)n)
		rc = error_set(EINVAL, "%s: the session's state holds %d positions for %u tokens", path, seq->pos, n);
	if (!rc)
		rc = trailing_check(f, path);
	fclose(f);
	if (rc) {
		seq_state_reset(seq);
		return rc;
	}
	s->n_tokens = (int)n;
	return 0;
}
