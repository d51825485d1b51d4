/*
 * cmd_chat — `colibri chat --model DIR`: a conversation in the terminal on
 * the batch core with one slot, saved as a session after every answer.
 *
 * Each turn renders the whole conversation through the chat template
 * (conversation_prompt), tokenizes it and starts the slot on it: the slot
 * keeps the longest prefix its sequence state already holds, so a turn
 * costs only its new tokens; the answer streams as it is decoded. The
 * conversation and the slot's state go to the session's files after each
 * answer (conversation_store.h), and the next `colibri chat` on the model
 * resumes them without a prefill.
 *
 * The context: the default -n is a quarter of it (at most CHAT_N_MAX), and
 * a turn whose prompt would leave less than that (at most half the
 * context) for its answer drops the oldest turns first, keeping the system
 * prompt (conversation_fit), as does a session that is resumed into a
 * context it no longer fits. What remains is rendered anew and the slot
 * keeps only the prefix it still shares, so the answers are those of a new
 * chat of the shortened conversation, not of a shifted cache.
 *
 * Output: answers on stdout; everything else (status lines, notices,
 * command output) on stderr, so a script that pipes entries in reads only
 * the answers on stdout. On a terminal, thinking is dimmed and the prompt
 * is edited with libedit; from a pipe there is no prompt and no colour.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/cli/chat_input.h"
#include "engine/text/harmony.h"
#include "engine/cli/cli_alias.h"
#include "engine/cli/cmd.h"
#include "engine/cli/default_model.h"
#include "engine/decode/batch.h"
#include "engine/decode/conversation.h"
#include "engine/decode/conversation_store.h"
#include "engine/decode/generate.h"
#include "engine/decode/session.h"
#include "engine/text/prompt.h"
#include "engine/text/tokenizer.h"
#include "storage/expert_store.h"

#define CHAT_CTX_DEFAULT 4096
#define CHAT_N_MAX 1024 /* the default -n: a quarter of the context, at most this */
#define DIM "\033[2m"
#define UNDIM "\033[22m"

static void chat_usage(FILE *f)
{
	fprintf(f, "usage: colibri chat [--model DIR] [--session NAME] [--new] [--system TEXT] [-n N]\n"
		   "                    [--temp T] [--top-p P] [--top-k K] [--min-p P] [--seed S] [--think show|hide|off]\n"
		   "                    [--repeat-penalty F] [--repeat-last-n N] [--presence-penalty F]\n"
		   "                    [--frequency-penalty F]%s\n"
		   "  A conversation in the terminal (without --model: the default model, a toy trained on\n"
		   "  the King James Bible); answers stream to stdout. Commands: :more :reset\n"
		   "  :save NAME :load NAME :sessions :stats :help :quit (also Ctrl-D); :help says more.\n"
		   "  The conversation is saved after every answer as session NAME (default \"last\") in\n"
		   "  the model's folder under $COLIBRI_CACHE_DIR/sessions (else $XDG_CACHE_HOME/colibri,\n"
		   "  else ~/.cache/colibri), and the next chat on this model resumes it without a prefill;\n"
		   "  --new starts a new conversation instead (replacing NAME's at the first answer).\n"
		   "  -n: tokens per answer at most (default a quarter of the context, at most %d; :more\n"
		   "  continues a cut answer).\n"
		   "  --ctx: positions of the conversation (default %d, at most the model's; beyond the\n"
		   "  model's positions with a warning). When the conversation and room for the answer (-n,\n"
		   "  at most half the context) outgrow it, the oldest turns are dropped, the system prompt\n"
		   "  stays, and a line says so; what remains answers as a new chat of it would.\n"
		   "  --think: show the model's reasoning (dimmed on a terminal), hide it, or ask the\n"
		   "  template for none (enable_thinking=false). Sampling defaults come from the\n"
		   "  model's generation_config.json; --temp 0 is greedy. --min-p, the penalties and\n"
		   "  --repeat-last-n (default 64, over the conversation's last tokens) as `run --help` says.\n",
		SESSION_USAGE, CHAT_N_MAX, CHAT_CTX_DEFAULT);
}

static void chat_help(FILE *f, const char *session)
{
	fprintf(f, "  :more        continue the last answer where -n or Ctrl-C cut it\n"
		   "  :reset       forget the conversation (a system prompt stays)\n"
		   "  :save NAME   save the conversation as session NAME (this chat keeps saving to \"%s\")\n"
		   "  :load NAME   replace the conversation with session NAME's\n"
		   "  :sessions    the saved sessions of this model\n"
		   "  :stats       tokens, speed, context and expert cache\n"
		   "  :help        this text\n"
		   "  :quit        save and leave (also Ctrl-D)\n"
		   "  A line ending in \\ continues on the next; a line holding only \"\"\" opens a block\n"
		   "  that the next such line closes. ::text sends \":text\". Ctrl-C stops an answer.\n",
		session);
}

enum {
	CHAT_TEMP = 2100, CHAT_TOP_P, CHAT_TOP_K, CHAT_SEED, CHAT_SYSTEM, CHAT_NEW, CHAT_SESSION, CHAT_THINK,
	CHAT_MIN_P, CHAT_REPEAT_PENALTY, CHAT_REPEAT_LAST_N, CHAT_PRESENCE_PENALTY, CHAT_FREQUENCY_PENALTY
};

enum think_mode { THINK_SHOW, THINK_HIDE, THINK_OFF };

static volatile sig_atomic_t chat_interrupted;

static void chat_on_sigint(int sig)
{
	(void)sig;
	chat_interrupted = 1;
}

struct chat {
	struct session s;
	struct tokenizer *tok;
	struct batch b;
	bool b_ready;
	struct conversation conv;
	struct conversation_store store;
	struct chat_input in;
	const char *session_name;
	const char *system;
	char model_type[32];
	struct batch_params params;
	enum think_mode think;
	bool tty, color;
	int32_t think_open, think_close;   /* token ids, -1 when the tokenizer has none */
	bool harmony;                      /* gpt-oss: analysis is reasoning, the answer is the final channel */
	struct harmony_stream hs;
	bool dirty;                        /* changed since the last save */
	/* The answer being decoded. */
	struct tokenizer_stream ts;
	bool ts_ready;
	char *answer;
	size_t answer_len, answer_cap;
	bool in_think, dimmed, shown;      /* inside <think>; dim on; visible text printed */
	int n_answer;
	int32_t last_id;
	enum batch_finish finish;
	double t_start, t_first;
	int oom;                           /* a failed append */
	/* Totals for :stats. */
	uint64_t answers, generated, prompt_tokens, cached_tokens;
	uint64_t decode_tokens;            /* tokens after each answer's first, over decode_s */
	double decode_s;
};

/* A notice on stderr, after what stdout holds so far. */
static void note(struct chat *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(struct chat *c, const char *fmt, ...)
{
	fflush(stdout);
	va_list ap;
	va_start(ap, fmt);
	if (c->color)
		fputs(DIM, stderr);
	vfprintf(stderr, fmt, ap);
	if (c->color)
		fputs(UNDIM, stderr);
	fputc('\n', stderr);
	va_end(ap);
}

static void answer_put(struct chat *c, const char *text, size_t len)
{
	if (c->answer_len + len + 1 > c->answer_cap) {
		size_t cap = (c->answer_len + len + 1) * 2;
		char *a = realloc(c->answer, cap);
		if (!a) {
			c->oom = 1;
			return;
		}
		c->answer = a;
		c->answer_cap = cap;
	}
	memcpy(c->answer + c->answer_len, text, len);
	c->answer_len += len;
	c->answer[c->answer_len] = 0;
}

/* Shows text of an answer: reasoning dimmed (or not at all with --think
 * hide, and then the blank lines after it neither). */
static void show(struct chat *c, const char *text, size_t len, bool thinking)
{
	if (thinking && c->think == THINK_HIDE)
		return;
	if (!thinking && !c->shown && c->think == THINK_HIDE) {
		while (len > 0 && (*text == '\n' || *text == ' ')) {
			text++;
			len--;
		}
		if (!len)
			return;
	}
	if (c->color && thinking != c->dimmed) {
		fputs(thinking ? DIM : UNDIM, stdout);
		c->dimmed = thinking;
	}
	fwrite(text, 1, len, stdout);
	fflush(stdout);
	c->shown = c->shown || !thinking;
}

static void on_token(void *ctx, int slot, const struct batch_token *t, enum batch_finish fin)
{
	struct chat *c = ctx;
	(void)slot;
	c->finish = fin;
	if (!t || t->eos)
		return;
	if (c->n_answer++ == 0)
		c->t_first = clock_now_s();
	c->last_id = t->id;
	const char *text;
	size_t len;
	if (tokenizer_stream_put(&c->ts, t->id, &text, &len) != 0)
		len = 0;
	if (c->harmony) {
		harmony_stream_put(&c->hs, text, len);
		return;
	}
	bool was = c->in_think;
	if (t->id == c->think_open)
		c->in_think = true;
	else if (t->id == c->think_close)
		c->in_think = false;
	answer_put(c, text, len);
	show(c, text, len, was || c->in_think);
}

/* Harmony's channels of an answer: analysis shown as reasoning; the final
 * channel (and a tool call, in the template's form) is the answer kept in
 * the conversation, without headers, which the template writes itself. */
static void harmony_shown(void *ctx, enum harmony_kind kind, const char *p, size_t n)
{
	struct chat *c = ctx;
	if (kind != HARMONY_REASONING)
		answer_put(c, p, n);
	show(c, p, n, kind == HARMONY_REASONING);
}

/* Ends the stream of an answer: what it held back comes out. */
static void answer_end(struct chat *c)
{
	const char *text;
	size_t len;
	if (c->harmony) {
		if (tokenizer_stream_flush(&c->ts, &text, &len) == 0 && len)
			harmony_stream_put(&c->hs, text, len);
		harmony_stream_flush(&c->hs);
	} else if (tokenizer_stream_flush(&c->ts, &text, &len) == 0 && len) {
		answer_put(c, text, len);
		show(c, text, len, c->in_think);
	}
	if (c->dimmed) {
		fputs(UNDIM, stdout);
		c->dimmed = false;
	}
	fputc('\n', stdout); /* one answer, one line end: scripts can count them */
	fflush(stdout);
}

/* The share of expert requests served from RAM between two readings. */
static double ram_share(const struct expert_store_stats *a, const struct expert_store_stats *b)
{
	uint64_t req = b->requests - a->requests;
	uint64_t ram = (b->hits + b->pinned_hits) - (a->hits + a->pinned_hits);
	return req ? 100.0 * (double)ram / (double)req : 100.0;
}

/* Decodes one answer to ids[0..n) (the whole rendered conversation, or
 * the slot's history plus the cut token for :more). thinking: the prompt
 * left the answer inside <think>. history: ids of the messages before the
 * generation prompt, where the state keeps a checkpoint for the next turn
 * (0: none). Returns 0 (the answer, maybe empty, is in c->answer) or
 * -errno with a message. */
static int decode_answer(struct chat *c, const int32_t *ids, int n, bool thinking, int history)
{
	struct batch_params p = c->params;
	p.checkpoint_at = history;
	/* A seeded chat samples the same answers when replayed: the seed moves
	 * with the conversation's length. */
	p.seed = c->params.seed + (uint64_t)c->conv.n;
	int cached = 0;
	c->answer_len = 0;
	if (c->answer)
		c->answer[0] = 0;
	c->n_answer = 0;
	c->in_think = thinking;
	if (c->harmony)
		harmony_stream_init(&c->hs, harmony_shown, c);
	c->shown = false;
	c->finish = BATCH_RUNNING;
	c->oom = 0;
	c->t_start = clock_now_s();
	c->t_first = 0;
	const struct expert_store_stats *es = expert_store_stats(c->s.model.store);
	struct expert_store_stats before = *es;
	int rc = batch_start(&c->b, 0, ids, n, &p, NULL, &cached);
	if (rc) { /* what :more fed the stream goes */
		const char *text;
		size_t len;
		(void)tokenizer_stream_flush(&c->ts, &text, &len);
	}
	if (rc == -ENOSPC) {
		error_clear();
		return error_set(ENOSPC, "the conversation (%d tokens) no longer fits the context of %d: :reset, or "
					 "start with a larger --ctx", n, c->b.f->ctx);
	}
	if (rc)
		return rc;
	chat_interrupted = 0;
	int safe_at = 16;
	while ((rc = batch_step(&c->b)) > 0) {
		if (chat_interrupted) {
			batch_finish(&c->b, 0);
			c->finish = BATCH_STOPPED;
			rc = 0;
			break;
		}
		if (c->n_answer >= safe_at) {
			session_safe_point(&c->s);
			safe_at = c->n_answer + 16;
		}
	}
	chat_interrupted = 0;
	answer_end(c);
	if (rc < 0)
		return rc;
	if (c->oom)
		return error_set(ENOMEM, "out of memory");
	double t_end = clock_now_s();
	double decode = c->n_answer > 1 ? t_end - c->t_first : 0;
	c->answers++;
	c->generated += (uint64_t)c->n_answer;
	c->prompt_tokens += (uint64_t)n;
	c->cached_tokens += (uint64_t)cached;
	c->decode_s += decode;
	c->decode_tokens += c->n_answer > 1 ? (uint64_t)c->n_answer - 1 : 0;
	const struct batch_slot *s = &c->b.slots[0];
	const char *why = c->finish == BATCH_STOPPED ? "; stopped"
			  : c->finish != BATCH_LENGTH   ? ""
			  : s->n_tokens + 1 >= c->b.f->ctx ? "; the context is full (the next turn drops the oldest)"
							  : "; cut at -n (:more continues)";
	char first[32] = "-";
	if (c->n_answer)
		snprintf(first, sizeof first, "%.2f s", c->t_first - c->t_start);
	note(c, "[%d tokens, %.1f tok/s, first token %s; prompt %d tokens (%d cached); experts %.1f%% from RAM; "
		"context %d/%d%s]",
	     c->n_answer, decode > 0 ? (c->n_answer - 1) / decode : 0.0, first, n, cached, ram_share(&before, es),
	     s->n_tokens, c->b.f->ctx, why);
	return 0;
}

static void save(struct chat *c)
{
	if (conversation_store_save(&c->store, c->session_name, &c->conv, &c->b, 0))
		note(c, "colibri: warning: cannot save the session: %s", error_message());
	else
		c->dirty = false;
	error_clear();
}

/* Where an answer that was cut stands: inside <think> or not. */
static bool cut_in_think(struct chat *c)
{
	bool opened = false;
	int32_t *ids = NULL;
	int n = 0;
	struct conversation_prompt_options po = { .no_thinking = c->think == THINK_OFF };
	if (conversation_prompt(&c->conv, c->conv.n - 1, c->tok, c->model_type, &po, &ids, &n, &opened, NULL))
		error_clear();
	free(ids);
	const char *a = c->conv.msgs[c->conv.n - 1].content, *open = NULL, *close = NULL;
	for (const char *p = strstr(a, "<think>"); p; p = strstr(p + 1, "<think>"))
		open = p;
	for (const char *p = strstr(a, "</think>"); p; p = strstr(p + 1, "</think>"))
		close = p;
	return close ? open > close : open || opened;
}

/* The room a turn keeps for its answer: -n, at most half the context, so
 * that a large -n still leaves turns to keep. */
static int answer_room(const struct chat *c)
{
	int half = c->b.f->ctx / 2;
	return c->params.n_predict < half ? c->params.n_predict : half;
}

/* The one line that says conversation_fit dropped turns. */
static void fit_note(struct chat *c, const struct conversation_fit *f)
{
	if (f->dropped == 1)
		note(c, "context full: dropped the oldest turn (%d tokens)", f->freed);
	else if (f->dropped > 1)
		note(c, "context full: dropped the %d oldest turns (%d tokens)", f->dropped, f->freed);
	if (f->dropped)
		c->dirty = true;
}

/* A conversation just loaded (name) that leaves no room for the next
 * answer says so and drops its oldest turns, before the first message. */
static void fit_loaded(struct chat *c, const char *name)
{
	struct conversation_prompt_options po = { .no_thinking = c->think == THINK_OFF };
	struct conversation_fit f = { .ctx = c->b.f->ctx, .want = answer_room(c) };
	int32_t *ids = NULL;
	int n = 0;
	int rc = conversation_fit(&c->conv, &f, c->tok, c->model_type, &po, &ids, &n, NULL, NULL);
	free(ids);
	if (rc) { /* a template that cannot render it says so at the first message */
		error_clear();
		return;
	}
	if (f.dropped)
		note(c, "colibri: session \"%s\" (%d tokens) no longer fits the context of %d with room for an answer "
			"(%d)", name, n + f.freed, f.ctx, f.want);
	fit_note(c, &f);
	if (n + f.want > f.ctx)
		note(c, "colibri: session \"%s\": its system prompt alone leaves %d of the context's %d positions; "
			"answers are cut short (a larger --ctx, or --new)", name, f.ctx - n, f.ctx);
}

/* A new user message and its answer. */
static void turn(struct chat *c, const char *text)
{
	if (conversation_add(&c->conv, "user", text, strlen(text))) {
		note(c, "colibri: %s", error_message());
		error_clear();
		return;
	}
	int32_t *ids = NULL;
	int n = 0;
	bool thinking = false;
	struct conversation_prompt_options po = { .no_thinking = c->think == THINK_OFF };
	int history = 0;
	/* The oldest turns go when the prompt leaves too little room for the
	 * answer; the rest is rendered anew, so that the slot keeps only the
	 * prefix it still shares (the system prompt) and prefills what follows:
	 * the answer is that of a new chat of what remains. The history's
	 * length (a second render) matters only to a state that goes back by
	 * checkpoint. */
	struct conversation_fit f = { .ctx = c->b.f->ctx, .want = answer_room(c), .need = 1, .keep = 1 };
	int rc = conversation_fit(&c->conv, &f, c->tok, c->model_type, &po, &ids, &n, &thinking,
				  c->s.fwd.seqs[0].has_fixed ? &history : NULL);
	if (rc == -ENOSPC) {
		error_clear();
		rc = error_set(ENOSPC, "the message does not fit: its prompt has %d tokens and the context holds %d (a "
				       "larger --ctx, or a shorter message)", n, f.ctx);
	}
	if (!rc) {
		fit_note(c, &f);
		rc = decode_answer(c, ids, n, thinking, history);
	}
	free(ids);
	if (!rc && c->n_answer == 0 && c->finish == BATCH_STOPPED) {
		note(c, "(stopped before the answer began; the message is dropped)");
		conversation_pop(&c->conv);
		return;
	}
	if (!rc)
		rc = conversation_add(&c->conv, "assistant", c->answer ? c->answer : "", c->answer_len);
	if (rc) {
		note(c, "colibri: %s", error_message());
		error_clear();
		if (!strcmp(c->conv.msgs[c->conv.n - 1].role, "user"))
			conversation_pop(&c->conv);
		return;
	}
	c->conv.cut_token = c->finish != BATCH_EOS && c->n_answer > 0 ? c->last_id : -1;
	c->dirty = true;
	save(c);
}

/* :more — the cut answer goes on from its last token, which the slot's
 * state does not hold yet: the prompt is the rendering of the messages
 * before the answer, the answer's tokens as the slot holds them, and that
 * token. When they leave no room, the oldest turns go as for a new message
 * (the cut answer and its question stay), and the answer goes on after the
 * shorter history as it would in a new chat of what remains. */
static void more(struct chat *c)
{
	const struct batch_slot *s = &c->b.slots[0];
	if (c->conv.n == 0 || strcmp(c->conv.msgs[c->conv.n - 1].role, "assistant") || c->conv.cut_token < 0) {
		note(c, "nothing to continue: the last answer is complete");
		return;
	}
	struct conversation_prompt_options po = { .no_thinking = c->think == THINK_OFF };
	int32_t *head = NULL, *ids = NULL;
	int n_head = 0;
	int rc = conversation_prompt(&c->conv, c->conv.n - 1, c->tok, c->model_type, &po, &head, &n_head, NULL, NULL);
	if (rc)
		error_clear();
	if (rc || s->n_tokens < n_head || c->b.f->seqs[0].pos != s->n_tokens ||
	    memcmp(s->tokens, head, (size_t)n_head * sizeof *head)) {
		free(head);
		note(c, "the cut answer's tokens were not restored, so it cannot go on exactly; ask again instead");
		return;
	}
	int n_answer = s->n_tokens - n_head + 1;
	int32_t *answer = malloc((size_t)n_answer * sizeof *answer);
	free(head);
	head = NULL;
	if (!answer) {
		note(c, "colibri: out of memory");
		return;
	}
	memcpy(answer, s->tokens + n_head, (size_t)(n_answer - 1) * sizeof *answer);
	answer[n_answer - 1] = c->conv.cut_token;
	struct conversation_fit f = { .ctx = c->b.f->ctx, .want = n_answer + answer_room(c), .need = n_answer + 1,
				      .keep = 2, .leave_out = 1 };
	int history = 0;
	rc = conversation_fit(&c->conv, &f, c->tok, c->model_type, &po, &head, &n_head, NULL,
			      c->s.fwd.seqs[0].has_fixed ? &history : NULL);
	if (rc == -ENOSPC) {
		error_clear();
		rc = error_set(ENOSPC, "the cut answer fills the context of %d: it cannot go on (a larger --ctx)", f.ctx);
	}
	int n = n_head + n_answer;
	if (!rc && !(ids = malloc((size_t)n * sizeof *ids)))
		rc = error_set(ENOMEM, "out of memory");
	if (rc) {
		note(c, "colibri: %s", error_message());
		error_clear();
		free(head);
		free(answer);
		return;
	}
	memcpy(ids, head, (size_t)n_head * sizeof *ids);
	memcpy(ids + n_head, answer, (size_t)n_answer * sizeof *ids);
	free(head);
	free(answer);
	fit_note(c, &f);
	bool thinking = cut_in_think(c);
	/* The stream goes on from the cut token (its text is shown already),
	 * so that a decoder's first-token rules do not apply again. */
	const char *skip;
	size_t skip_len;
	(void)tokenizer_stream_put(&c->ts, c->conv.cut_token, &skip, &skip_len);
	rc = decode_answer(c, ids, n, thinking, history);
	free(ids);
	if (!rc && c->answer_len)
		rc = conversation_append(&c->conv, c->answer, c->answer_len);
	if (rc) {
		note(c, "colibri: %s", error_message());
		error_clear();
		return;
	}
	if (c->n_answer > 0)
		c->conv.cut_token = c->finish != BATCH_EOS ? c->last_id : -1;
	else if (c->finish == BATCH_EOS)
		c->conv.cut_token = -1;
	c->dirty = true;
	save(c);
}

static void start_fresh(struct chat *c)
{
	conversation_clear(&c->conv, false);
	if (c->system)
		(void)conversation_add(&c->conv, "system", c->system, strlen(c->system));
}

/* Reports what loading a session found; true when a conversation came. */
static bool report_load(struct chat *c, const char *name, const struct conversation_load *r)
{
	if (!r->found)
		return false;
	if (r->refused) {
		note(c, "colibri: session \"%s\" refused: %s; the file is kept as %s%s%s; starting a new conversation",
		     name, r->message, r->aside, r->state_aside[0] ? " and its state as " : "", r->state_aside);
		return false;
	}
	if (r->restored)
		note(c, "colibri: session \"%s\": %zu messages, %d tokens restored (no prefill)", name, c->conv.n,
		     r->restored);
	else if (r->state_refused)
		note(c, "colibri: session \"%s\": %zu messages; its saved state was refused (%s) and is kept as %s; the "
			"next answer prefills the conversation", name, c->conv.n, r->message, r->state_aside);
	else if (r->state_missing || r->state_stale)
		note(c, "colibri: session \"%s\": %zu messages; its saved state is %s; the next answer prefills the "
			"conversation", name, c->conv.n, r->state_missing ? "missing" : "of another point of it");
	else
		note(c, "colibri: session \"%s\": %zu messages, 0 tokens restored", name, c->conv.n);
	return true;
}

static void load(struct chat *c, const char *name)
{
	if (conversation_store_name_check(name)) {
		note(c, "colibri: %s", error_message());
		error_clear();
		return;
	}
	struct conversation tmp;
	conversation_init(&tmp);
	struct conversation_load r;
	char path[PATH_MAX + 80];
	conversation_store_path(&c->store, name, "json", path, sizeof path);
	if (access(path, F_OK) != 0) {
		note(c, "colibri: no session \"%s\" (%s)", name, path);
		return;
	}
	if (conversation_store_load(&c->store, name, &tmp, &c->b, 0, &r)) {
		note(c, "colibri: %s", error_message());
		error_clear();
		conversation_free(&tmp);
		return;
	}
	if (r.refused) {
		note(c, "colibri: session \"%s\" refused: %s; the file is kept as %s; the conversation is unchanged", name,
		     r.message, r.aside);
		conversation_free(&tmp);
		return;
	}
	conversation_move(&c->conv, &tmp);
	report_load(c, name, &r);
	fit_loaded(c, name);
	c->dirty = true;
	save(c);
}

static void list_sessions(struct chat *c)
{
	char **names = NULL;
	int n = 0;
	if (conversation_store_list(&c->store, &names, &n)) {
		note(c, "colibri: %s", error_message());
		error_clear();
		return;
	}
	note(c, "sessions in %s:%s", c->store.dir, n ? "" : " none yet");
	for (int i = 0; i < n; i++) {
		note(c, "  %s%s", names[i], strcmp(names[i], c->session_name) ? "" : " (this chat)");
		free(names[i]);
	}
	free(names);
}

static void stats(struct chat *c)
{
	const struct expert_store_stats *es = expert_store_stats(c->s.model.store);
	note(c, "session \"%s\": %zu messages, %d of %d context positions", c->session_name, c->conv.n,
	     c->b.slots[0].n_tokens, c->b.f->ctx);
	note(c, "answers: %" PRIu64 ", %" PRIu64 " tokens, %.1f tok/s; prompts: %" PRIu64 " tokens, %" PRIu64
		" of them cached", c->answers, c->generated,
	     c->decode_s > 0 ? (double)c->decode_tokens / c->decode_s : 0.0,
	     c->prompt_tokens, c->cached_tokens);
	double ram = es->requests ? 100.0 * (double)(es->hits + es->pinned_hits) / (double)es->requests : 100.0;
	note(c, "experts: %" PRIu64 " requested, %.1f%% from RAM (%" PRIu64 " pinned, %" PRIu64 " cached), %" PRIu64
		" misses, %.1f MB read, %.2f GB/s while busy, %.3f s waiting on disk",
	     es->requests, ram, es->pinned_hits, es->hits, es->misses, es->bytes_read / 1e6, es->disk_gbps,
	     es->disk_wait_s);
}

/* Runs one command line (text after ':'); returns false for :quit. */
static bool command(struct chat *c, const char *cmd)
{
	char word[16] = "";
	const char *arg = cmd;
	size_t k = 0;
	while (*arg && *arg != ' ' && *arg != '\t' && k + 1 < sizeof word)
		word[k++] = *arg++;
	word[k] = 0;
	while (*arg == ' ' || *arg == '\t')
		arg++;
	char name[CONVERSATION_NAME_MAX + 2];
	snprintf(name, sizeof name, "%s", arg);
	name[strcspn(name, " \t")] = 0;
	if (!strcmp(word, "quit") || !strcmp(word, "q") || !strcmp(word, "exit")) {
		return false;
	} else if (!strcmp(word, "help") || !strcmp(word, "h")) {
		chat_help(stderr, c->session_name);
	} else if (!strcmp(word, "more")) {
		more(c);
	} else if (!strcmp(word, "reset")) {
		conversation_clear(&c->conv, true);
		if (c->conv.n == 0 && c->system)
			(void)conversation_add(&c->conv, "system", c->system, strlen(c->system));
		c->dirty = true;
		save(c);
		note(c, "(a new conversation%s)", c->conv.n ? "; the system prompt stays" : "");
	} else if (!strcmp(word, "save") && name[0]) {
		if (conversation_store_save(&c->store, name, &c->conv, &c->b, 0) == 0) {
			char path[PATH_MAX + 80];
			conversation_store_path(&c->store, name, "json", path, sizeof path);
			note(c, "saved as session \"%s\" (%s)", name, path);
		} else {
			note(c, "colibri: %s", error_message());
		}
		error_clear();
	} else if (!strcmp(word, "load") && name[0]) {
		load(c, name);
	} else if (!strcmp(word, "sessions")) {
		list_sessions(c);
	} else if (!strcmp(word, "stats")) {
		stats(c);
	} else {
		note(c, "unknown command \":%s\"%s; :help lists them", cmd,
		     !strcmp(word, "save") || !strcmp(word, "load") ? " (it takes a NAME)" : "");
	}
	return true;
}

static int chat_loop(struct chat *c)
{
	if (c->tty)
		note(c, "colibri chat: %s, session \"%s\". :help for commands, Ctrl-D to leave.", c->s.opt.model_dir,
		     c->session_name);
	for (;;) {
		char *text = NULL;
		int r = chat_input_read(&c->in, &text);
		if (r < 0)
			return r;
		if (r == CHAT_INPUT_CANCEL) {
			free(text);
			if (!c->tty)
				return 0; /* Ctrl-C while a pipe feeds the chat: leave, saved */
			fputc('\n', stderr);
			continue;
		}
		if (r == CHAT_INPUT_EOF) {
			if (c->tty)
				fputc('\n', stderr);
			return 0;
		}
		const char *t = text;
		while (*t == ' ' || *t == '\t')
			t++;
		bool go_on = true;
		if (t[0] == ':' && t[1] != ':')
			go_on = command(c, t + 1);
		else if (*t)
			turn(c, t[0] == ':' ? t + 1 : text);
		free(text);
		if (!go_on)
			return 0;
	}
}

int cmd_chat(int argc, char **argv)
{
	struct session_options so;
	session_options_default(&so);
	struct generate_options go;
	static const struct option opts[] = {
		SESSION_LONG_OPTIONS,
		{ "temp", required_argument, 0, CHAT_TEMP },     { "top-p", required_argument, 0, CHAT_TOP_P },
		{ "top-k", required_argument, 0, CHAT_TOP_K },   { "seed", required_argument, 0, CHAT_SEED },
		{ "min-p", required_argument, 0, CHAT_MIN_P },
		{ "repeat-penalty", required_argument, 0, CHAT_REPEAT_PENALTY },
		{ "repeat-last-n", required_argument, 0, CHAT_REPEAT_LAST_N },
		{ "presence-penalty", required_argument, 0, CHAT_PRESENCE_PENALTY },
		{ "frequency-penalty", required_argument, 0, CHAT_FREQUENCY_PENALTY },
		{ "system", required_argument, 0, CHAT_SYSTEM }, { "new", no_argument, 0, CHAT_NEW },
		{ "session", required_argument, 0, CHAT_SESSION }, { "think", required_argument, 0, CHAT_THINK },
		{ "help", no_argument, 0, 'h' },                 { 0, 0, 0, 0 },
	};
	if (cli_alias_apply("chat", &argc, &argv, "n:h", opts))
		return 2;
	struct chat *c = calloc(1, sizeof *c);
	if (!c)
		return cmd_fail("out of memory");
	c->session_name = "last";
	c->think_open = c->think_close = -1;
	conversation_init(&c->conv);
	bool fresh = false;
	/* The model folder's generation_config.json gives the sampling
	 * defaults, taken once the folder is known; what the options set stays. */
	int rc = generate_options_default(&go, NULL);
	unsigned set = 0;
	go.n_predict = 0; /* not given: set from the context once it is known */
	int ch;
	optind = 1;
	while (!rc && (ch = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'n': rc = session_parse_int("n", optarg, 1, 1 << 24, &go.n_predict); break;
		case CHAT_TEMP: rc = generate_options_parse(&go, &set, "temp", optarg); break;
		case CHAT_TOP_P: rc = generate_options_parse(&go, &set, "top-p", optarg); break;
		case CHAT_TOP_K: rc = generate_options_parse(&go, &set, "top-k", optarg); break;
		case CHAT_SEED: rc = generate_options_parse(&go, &set, "seed", optarg); break;
		case CHAT_MIN_P: rc = generate_options_parse(&go, &set, "min-p", optarg); break;
		case CHAT_REPEAT_PENALTY: rc = generate_options_parse(&go, &set, "repeat-penalty", optarg); break;
		case CHAT_REPEAT_LAST_N: rc = generate_options_parse(&go, &set, "repeat-last-n", optarg); break;
		case CHAT_PRESENCE_PENALTY: rc = generate_options_parse(&go, &set, "presence-penalty", optarg); break;
		case CHAT_FREQUENCY_PENALTY: rc = generate_options_parse(&go, &set, "frequency-penalty", optarg); break;
		case CHAT_SYSTEM: c->system = optarg; break;
		case CHAT_NEW: fresh = true; break;
		case CHAT_SESSION:
			c->session_name = optarg;
			rc = conversation_store_name_check(optarg);
			break;
		case CHAT_THINK:
			if (!strcmp(optarg, "show"))
				c->think = THINK_SHOW;
			else if (!strcmp(optarg, "hide"))
				c->think = THINK_HIDE;
			else if (!strcmp(optarg, "off"))
				c->think = THINK_OFF;
			else
				rc = error_set(EINVAL, "--think takes show, hide or off, not \"%s\"", optarg);
			break;
		case 'h':
			chat_usage(stdout);
			free(c);
			return 0;
		default:
			if (ch == '?' || (rc = session_option(&so, ch, optarg)) == -ENOENT) {
				chat_usage(stderr);
				free(c);
				return 2;
			}
		}
	}
	if (rc) {
		free(c);
		return cmd_fail("bad option");
	}
	if (optind != argc) {
		chat_usage(stderr);
		free(c);
		return 2;
	}
	if (default_model_use(&so.model_dir)) {
		free(c);
		return cmd_fail("no model");
	}
	if (generate_options_model(&go, so.model_dir, set)) {
		free(c);
		return cmd_fail("bad generation_config.json");
	}
	c->params = (struct batch_params){ .n_predict = go.n_predict, .temp = go.temp, .top_k = go.top_k,
					   .top_p = go.top_p, .seed = go.seed, .min_p = go.min_p,
					   .repeat_penalty = go.repeat_penalty, .repeat_last_n = go.repeat_last_n,
					   .presence_penalty = go.presence_penalty,
					   .frequency_penalty = go.frequency_penalty };
	c->tty = isatty(STDIN_FILENO);
	const char *term = getenv("TERM");
	c->color = c->tty && isatty(STDOUT_FILENO) && !getenv("NO_COLOR") && !(term && !strcmp(term, "dumb"));
	struct model_config cfg;
	rc = session_check_model(so.model_dir);
	rc = rc ? rc : model_config_load(&cfg, so.model_dir);
	rc = rc ? rc : prompt_tokenizer_load(&c->tok, so.model_dir);
	rc = rc ? rc : session_chat_template(&so, c->tok);
	int need_ctx = 0;
	if (!rc) {
		snprintf(c->model_type, sizeof c->model_type, "%s", cfg.model_type);
		need_ctx = so.ctx                              ? so.ctx
			   : CHAT_CTX_DEFAULT < cfg.max_positions ? CHAT_CTX_DEFAULT
								  : cfg.max_positions;
		c->think_open = tokenizer_token_id(c->tok, "<think>");
		c->think_close = tokenizer_token_id(c->tok, "</think>");
		if (c->think_open < 0 || c->think_close < 0)
			c->think_open = c->think_close = -1;
		c->harmony = harmony_template(tokenizer_chat_template(c->tok));
		if (c->harmony && c->think == THINK_OFF) { /* gpt-oss always reasons: its template has no switch */
			fprintf(stderr, "colibri: the harmony template cannot turn reasoning off; --think off hides it\n");
			c->think = THINK_HIDE;
		}
	}
	/* Only this thread takes SIGINT: the compute and IO threads that
	 * session_open starts inherit a mask that blocks it. */
	sigset_t block, old_mask;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	pthread_sigmask(SIG_BLOCK, &block, &old_mask);
	so.logits_rows = 3; /* the batch's logits row, its work row, the sampler's */
	if (!rc)
		rc = session_open(&c->s, &so, need_ctx);
	pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	if (!rc && c->s.fwd.n_seqs != 1)
		rc = error_set(EINVAL, "chat decodes one sequence");
	if (!rc && c->params.n_predict == 0) { /* well inside the context, so that turns can stay */
		int quarter = c->s.fwd.ctx / 4 > 0 ? c->s.fwd.ctx / 4 : 1;
		c->params.n_predict = quarter < CHAT_N_MAX ? quarter : CHAT_N_MAX;
	}
	if (!rc && (rc = batch_init(&c->b, &c->s.fwd, c->tok, on_token, c)) == 0)
		c->b_ready = true;
	if (!rc && (rc = tokenizer_stream_init(&c->ts, c->tok)) == 0)
		c->ts_ready = true;
	if (!rc)
		rc = conversation_store_init(&c->store, manifest_model_id(&c->s.model.man), c->s.opt.model_dir);
	if (!rc) {
		char history[PATH_MAX + 16];
		snprintf(history, sizeof history, "%s/history", c->store.dir);
		rc = chat_input_init(&c->in, c->tty, history);
	}
	if (!rc) {
		struct conversation_load r = { 0 };
		bool resumed = false;
		if (!fresh && (rc = conversation_store_load(&c->store, c->session_name, &c->conv, &c->b, 0, &r)) == 0)
			resumed = report_load(c, c->session_name, &r);
		if (resumed)
			fit_loaded(c, c->session_name);
		if (!rc && !resumed)
			start_fresh(c);
		if (!rc && resumed && c->system &&
		    (c->conv.n == 0 || strcmp(c->conv.msgs[0].role, "system") || strcmp(c->conv.msgs[0].content, c->system)))
			note(c, "colibri: the resumed conversation keeps its own system prompt; --new starts one with "
				"--system");
	}
	if (!rc) {
		struct sigaction sa = { .sa_handler = chat_on_sigint }, old_int;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, &old_int); /* no SA_RESTART: a read at the prompt is interrupted */
		rc = chat_loop(c);
		sigaction(SIGINT, &old_int, NULL);
		if (c->dirty)
			save(c);
		if (!rc)
			rc = session_report(&c->s, stderr);
	}
	chat_input_free(&c->in);
	if (c->ts_ready)
		tokenizer_stream_free(&c->ts);
	if (c->b_ready)
		batch_free(&c->b);
	session_close(&c->s);
	conversation_free(&c->conv);
	tokenizer_free(c->tok);
	free(c->answer);
	free(c);
	return rc ? cmd_fail("chat failed") : 0;
}
