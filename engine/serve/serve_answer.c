/*
 * serve_answer — see serve_answer.h. The text of an event is its reasoning
 * bytes followed by its content bytes (serve_job.h).
 */
#include "engine/serve/serve_answer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "engine/text/tokenizer.h"

static atomic_ullong answer_counter;

int serve_answer_init(struct serve_answer *a, enum serve_endpoint e, const struct tokenizer *tok, const char *model,
		      bool logprobs, bool include_usage, bool split, const char *echo)
{
	memset(a, 0, sizeof *a);
	a->endpoint = e;
	a->tok = tok;
	a->model = model;
	a->logprobs = logprobs;
	a->include_usage = include_usage;
	a->split = split;
	a->created = (long long)time(NULL);
	unsigned long long n = atomic_fetch_add(&answer_counter, 1) + 1;
	unsigned long long t = (unsigned long long)(clock_now_s() * 1e6);
	snprintf(a->id, sizeof a->id, "%s-%012llx%08llx", e == SERVE_CHAT ? "chatcmpl" : "cmpl", t & 0xffffffffffffull,
		 n & 0xffffffffull);
	if (echo && !(a->echo = strdup(echo)))
		return -ENOMEM;
	if (logprobs) {
		a->lp = e == SERVE_CHAT ? cJSON_CreateArray() : cJSON_CreateObject();
		if (!a->lp)
			return -ENOMEM;
		if (e == SERVE_COMPLETION) {
			cJSON_AddArrayToObject(a->lp, "tokens");
			cJSON_AddArrayToObject(a->lp, "token_logprobs");
			cJSON_AddArrayToObject(a->lp, "top_logprobs");
			cJSON_AddArrayToObject(a->lp, "text_offset");
		}
	}
	return 0;
}

static int tools_event(void *ctx, const struct tool_call_event *ev);

int serve_answer_tools(struct serve_answer *a, enum tool_format f, const char *tools_json)
{
	if (f == TOOL_FORMAT_NONE)
		return 0;
	if (!(a->tools_json = cJSON_Parse(tools_json)))
		return -ENOMEM;
	tool_call_parser_init(&a->tp, f, a->tools_json, tools_event, a);
	a->tools = true;
	return 0;
}

void serve_answer_dialect(struct serve_answer *a, const struct serve_dialect *d, void *ctx)
{
	a->dialect = d;
	a->dialect_ctx = ctx;
}

char *serve_dialect_error(const struct serve_dialect *d, const struct serve_error *e)
{
	return d && d->error ? d->error(e) : serve_json_error(e);
}

void serve_answer_free(struct serve_answer *a)
{
	if (a->dialect && a->dialect->ctx_free)
		a->dialect->ctx_free(a->dialect_ctx);
	if (a->tools)
		tool_call_parser_free(&a->tp);
	cJSON_Delete(a->tools_json);
	strbuf_free(&a->tp_content);
	free(a->echo);
	strbuf_free(&a->content);
	strbuf_free(&a->reasoning);
	cJSON_Delete(a->lp);
	memset(a, 0, sizeof *a);
}

/* The text of one token; "" when it does not decode. */
static char *token_text(const struct serve_answer *a, int32_t id)
{
	char *text = NULL;
	size_t len = 0;
	if (tokenizer_decode(a->tok, &id, 1, &text, &len) != 0)
		return strdup("");
	return text;
}

static cJSON *bytes_of(const char *s)
{
	cJSON *b = cJSON_CreateArray();
	for (const unsigned char *p = (const unsigned char *)s; b && *p; p++)
		cJSON_AddItemToArray(b, cJSON_CreateNumber(*p));
	return b;
}

/* One entry of chat logprobs.content: {token, logprob, bytes, top_logprobs}. */
static cJSON *chat_entry(const struct serve_answer *a, const struct serve_event *e, const int32_t *top_id,
			 const float *top_lp)
{
	cJSON *o = cJSON_CreateObject(), *tops = cJSON_CreateArray();
	char *text = token_text(a, e->id);
	cJSON_AddStringToObject(o, "token", text ? text : "");
	cJSON_AddNumberToObject(o, "logprob", e->logprob);
	cJSON_AddItemToObject(o, "bytes", bytes_of(text ? text : ""));
	free(text);
	for (int k = 0; k < e->n_top; k++) {
		cJSON *t = cJSON_CreateObject();
		char *tt = token_text(a, top_id[k]);
		cJSON_AddStringToObject(t, "token", tt ? tt : "");
		cJSON_AddNumberToObject(t, "logprob", top_lp[k]);
		cJSON_AddItemToObject(t, "bytes", bytes_of(tt ? tt : ""));
		free(tt);
		cJSON_AddItemToArray(tops, t);
	}
	cJSON_AddItemToObject(o, "top_logprobs", tops);
	return o;
}

/* Adds one token to a completions logprobs object. */
static void completion_entry(struct serve_answer *a, cJSON *lp, const struct serve_event *e, const int32_t *top_id,
			     const float *top_lp)
{
	char *text = token_text(a, e->id);
	cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "tokens"), cJSON_CreateString(text ? text : ""));
	cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"), cJSON_CreateNumber(e->logprob));
	cJSON *tops = cJSON_CreateObject();
	for (int k = 0; k < e->n_top; k++) {
		char *tt = token_text(a, top_id[k]);
		if (!cJSON_GetObjectItemCaseSensitive(tops, tt ? tt : ""))
			cJSON_AddNumberToObject(tops, tt ? tt : "", top_lp[k]);
		free(tt);
	}
	cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), tops);
	cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "text_offset"), cJSON_CreateNumber((double)a->text_offset));
	a->text_offset += text ? strlen(text) : 0;
	free(text);
}

/* Logprobs of the events of t (a fresh object/array), or NULL when not asked. */
static cJSON *logprobs_of(struct serve_answer *a, const struct serve_take *t)
{
	if (!a->logprobs)
		return NULL;
	cJSON *lp = a->endpoint == SERVE_CHAT ? cJSON_CreateArray() : cJSON_CreateObject();
	if (a->endpoint == SERVE_COMPLETION) {
		cJSON_AddArrayToObject(lp, "tokens");
		cJSON_AddArrayToObject(lp, "token_logprobs");
		cJSON_AddArrayToObject(lp, "top_logprobs");
		cJSON_AddArrayToObject(lp, "text_offset");
	}
	for (int i = 0; i < t->n_ev; i++) {
		const struct serve_event *e = &t->ev[i];
		if (e->id < 0)
			continue;
		int nt = t->top_id ? e->n_top : 0;
		size_t at = (size_t)i * (size_t)t->n_top;
		const int32_t *ti = nt ? t->top_id + at : NULL;
		const float *tl = nt ? t->top_lp + at : NULL;
		struct serve_event ee = *e;
		ee.n_top = nt;
		if (a->endpoint == SERVE_CHAT)
			cJSON_AddItemToArray(lp, chat_entry(a, &ee, ti, tl));
		else
			completion_entry(a, lp, &ee, ti, tl);
	}
	return lp;
}

/* Appends the items of array src to array dst (src is consumed). */
static void append_items(cJSON *dst, cJSON *src)
{
	cJSON *it;
	while ((it = cJSON_DetachItemFromArray(src, 0)))
		cJSON_AddItemToArray(dst, it);
	cJSON_Delete(src);
}

static void merge_logprobs(struct serve_answer *a, cJSON *lp)
{
	if (!lp)
		return;
	if (a->endpoint == SERVE_CHAT) {
		append_items(a->lp, lp);
		return;
	}
	static const char *const keys[] = { "tokens", "token_logprobs", "top_logprobs", "text_offset" };
	for (int i = 0; i < 4; i++)
		append_items(cJSON_GetObjectItem(a->lp, keys[i]), cJSON_DetachItemFromObject(lp, keys[i]));
	cJSON_Delete(lp);
}

int serve_answer_add(struct serve_answer *a, const struct serve_take *t)
{
	size_t at = 0;
	for (int i = 0; i < t->n_ev; i++) {
		const struct serve_event *e = &t->ev[i];
		strbuf_put(&a->reasoning, t->text + at, e->reasoning_len);
		at += e->reasoning_len;
		if (a->tools) {
			int rc = tool_call_parser_feed(&a->tp, t->text + at, e->content_len);
			if (rc)
				return rc;
		} else {
			strbuf_put(&a->content, t->text + at, e->content_len);
		}
		at += e->content_len;
	}
	merge_logprobs(a, logprobs_of(a, t));
	int rc = a->content.rc ? a->content.rc : a->reasoning.rc;
	if (!rc && a->dialect && a->dialect->add)
		rc = a->dialect->add(a, t);
	return rc;
}

static cJSON *usage_of(const struct serve_take *t)
{
	cJSON *u = cJSON_CreateObject();
	cJSON_AddNumberToObject(u, "prompt_tokens", t->n_prompt);
	cJSON_AddNumberToObject(u, "completion_tokens", t->n_generated);
	cJSON_AddNumberToObject(u, "total_tokens", t->n_prompt + t->n_generated);
	cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
	cJSON_AddNumberToObject(d, "cached_tokens", t->n_cached);
	return u;
}

/* colibri's own: where the request's time went (docs/DASHBOARD.md). */
static cJSON *timings_of(const struct serve_take *t)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "queue_s", t->queue_s);
	cJSON_AddNumberToObject(o, "ttft_s", t->ttft_s);
	cJSON_AddNumberToObject(o, "decode_s", t->decode_s);
	cJSON_AddNumberToObject(o, "tokens_per_second",
				t->n_generated > 1 && t->decode_s > 0 ? (t->n_generated - 1) / t->decode_s : 0);
	cJSON_AddNumberToObject(o, "prompt_tokens", t->n_prompt);
	cJSON_AddNumberToObject(o, "cached_tokens", t->n_cached);
	cJSON_AddNumberToObject(o, "completion_tokens", t->n_generated);
	return o;
}

static const char *finish_name(const struct serve_answer *a, enum serve_finish f)
{
	if (f == SERVE_FINISH_STOP && a->tools && a->tp.n_calls)
		return "tool_calls";
	return f == SERVE_FINISH_LENGTH ? "length" : "stop";
}

/* message.tool_calls of the parsed calls. */
static cJSON *tool_calls_of(const struct serve_answer *a)
{
	cJSON *arr = cJSON_CreateArray();
	for (size_t i = 0; arr && i < a->tp.n_calls; i++) {
		const struct tool_call *c = &a->tp.calls[i];
		cJSON *o = cJSON_CreateObject(), *fn;
		cJSON_AddStringToObject(o, "id", c->id);
		cJSON_AddStringToObject(o, "type", "function");
		fn = cJSON_AddObjectToObject(o, "function");
		cJSON_AddStringToObject(fn, "name", c->name);
		cJSON_AddStringToObject(fn, "arguments", c->arguments);
		cJSON_AddItemToArray(arr, o);
	}
	return arr;
}

static cJSON *head_of(const struct serve_answer *a, const char *object)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", a->id);
	cJSON_AddStringToObject(o, "object", object);
	cJSON_AddNumberToObject(o, "created", (double)a->created);
	cJSON_AddStringToObject(o, "model", a->model);
	return o;
}

char *serve_json_print(cJSON *o)
{
	char *s = o ? cJSON_PrintUnformatted(o) : NULL;
	cJSON_Delete(o);
	return s;
}

char *serve_answer_json(struct serve_answer *a, const struct serve_take *last)
{
	if (a->dialect)
		return a->dialect->json(a, last);
	bool chat = a->endpoint == SERVE_CHAT;
	cJSON *o = head_of(a, chat ? "chat.completion" : "text_completion");
	cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
	cJSON_AddNumberToObject(c, "index", 0);
	if (chat) {
		cJSON *m = cJSON_AddObjectToObject(c, "message");
		cJSON_AddStringToObject(m, "role", "assistant");
		if (a->tools) {
			if (tool_call_parser_finish(&a->tp) != 0) {
				cJSON_Delete(o);
				return NULL;
			}
			strbuf_put(&a->content, a->tp.content.data ? a->tp.content.data : "", a->tp.content.len);
		}
		if (a->tools && a->tp.n_calls && !a->content.len)
			cJSON_AddNullToObject(m, "content");
		else
			cJSON_AddStringToObject(m, "content", a->content.p ? a->content.p : "");
		if (a->tools && a->tp.n_calls)
			cJSON_AddItemToObject(m, "tool_calls", tool_calls_of(a));
		if (a->split && a->reasoning.len)
			cJSON_AddStringToObject(m, "reasoning_content", a->reasoning.p);
	} else {
		struct strbuf text = { 0 };
		if (a->echo)
			strbuf_put(&text, a->echo, strlen(a->echo));
		strbuf_put(&text, a->content.p ? a->content.p : "", a->content.len);
		cJSON_AddStringToObject(c, "text", text.p ? text.p : "");
		strbuf_free(&text);
	}
	if (a->lp) {
		if (chat) {
			cJSON *l = cJSON_AddObjectToObject(c, "logprobs");
			cJSON_AddItemToObject(l, "content", a->lp);
			cJSON_AddNullToObject(l, "refusal");
		} else {
			cJSON_AddItemToObject(c, "logprobs", a->lp);
		}
		a->lp = NULL;
	} else {
		cJSON_AddNullToObject(c, "logprobs");
	}
	cJSON_AddStringToObject(c, "finish_reason", finish_name(a, last->finish));
	cJSON_AddItemToArray(choices, c);
	cJSON_AddItemToObject(o, "usage", usage_of(last));
	cJSON_AddItemToObject(o, "timings", timings_of(last));
	return serve_json_print(o);
}

void serve_json_put(struct strbuf *out, const char *pre, cJSON *o, const char *post)
{
	char *s = serve_json_print(o);
	if (!s) {
		out->rc = -ENOMEM;
		return;
	}
	strbuf_put(out, pre, strlen(pre));
	strbuf_put(out, s, strlen(s));
	strbuf_put(out, post, strlen(post));
	free(s);
}

/* Appends "data: JSON\n\n". */
static void sse_put(struct strbuf *out, cJSON *o)
{
	serve_json_put(out, "data: ", o, "\n\n");
}

/* A chunk with one choice: delta (chat) or text (completions). */
static cJSON *chunk(const struct serve_answer *a, cJSON **choice)
{
	cJSON *o = head_of(a, a->endpoint == SERVE_CHAT ? "chat.completion.chunk" : "text_completion");
	cJSON *choices = cJSON_AddArrayToObject(o, "choices");
	*choice = cJSON_CreateObject();
	cJSON_AddNumberToObject(*choice, "index", 0);
	cJSON_AddItemToArray(choices, *choice);
	if (a->include_usage)
		cJSON_AddNullToObject(o, "usage");
	return o;
}

static void chunk_text(const struct serve_answer *a, struct strbuf *out, const char *reasoning, size_t nr,
		       const char *content, size_t nc, cJSON *lp, const struct serve_take *last, bool role)
{
	cJSON *c, *o = chunk(a, &c);
	if (a->endpoint == SERVE_CHAT) {
		cJSON *d = cJSON_AddObjectToObject(c, "delta");
		if (role)
			cJSON_AddStringToObject(d, "role", "assistant");
		char *s = malloc(nr + nc + 1);
		if (s && (nr || nc || role)) {
			if (nr) {
				memcpy(s, reasoning, nr);
				s[nr] = 0;
				cJSON_AddStringToObject(d, "reasoning_content", s);
			}
			if (nc || role) {
				if (nc)
					memcpy(s, content, nc);
				s[nc] = 0;
				cJSON_AddStringToObject(d, "content", s);
			}
		}
		free(s);
		if (lp) {
			cJSON *l = cJSON_AddObjectToObject(c, "logprobs");
			cJSON_AddItemToObject(l, "content", lp);
			cJSON_AddNullToObject(l, "refusal");
		} else {
			cJSON_AddNullToObject(c, "logprobs");
		}
	} else {
		char *s = malloc(nr + nc + 1);
		if (s) {
			if (nr)
				memcpy(s, reasoning, nr);
			if (nc)
				memcpy(s + nr, content, nc);
			s[nr + nc] = 0;
			cJSON_AddStringToObject(c, "text", s);
		}
		free(s);
		if (lp)
			cJSON_AddItemToObject(c, "logprobs", lp);
		else
			cJSON_AddNullToObject(c, "logprobs");
	}
	if (last) {
		cJSON_AddStringToObject(c, "finish_reason", finish_name(a, last->finish));
		cJSON_AddItemToObject(o, "timings", timings_of(last));
	} else {
		cJSON_AddNullToObject(c, "finish_reason");
	}
	sse_put(out, o);
}

/* A chunk of one delta.tool_calls entry: the call's start (id, type, name,
 * empty arguments) or a piece of its arguments. */
static void chunk_tool(const struct serve_answer *a, struct strbuf *out, const struct tool_call_event *ev)
{
	cJSON *c, *o = chunk(a, &c);
	cJSON *d = cJSON_AddObjectToObject(c, "delta"), *calls = cJSON_AddArrayToObject(d, "tool_calls");
	cJSON *tc = cJSON_CreateObject(), *fn;
	cJSON_AddItemToArray(calls, tc);
	cJSON_AddNumberToObject(tc, "index", (double)ev->index);
	char *text = malloc(ev->text_len + 1);
	if (text) {
		if (ev->text_len)
			memcpy(text, ev->text, ev->text_len);
		text[ev->text_len] = 0;
	}
	if (ev->kind == TOOL_CALL_EVENT_START) {
		cJSON_AddStringToObject(tc, "id", ev->id);
		cJSON_AddStringToObject(tc, "type", "function");
		fn = cJSON_AddObjectToObject(tc, "function");
		cJSON_AddStringToObject(fn, "name", ev->name);
		cJSON_AddStringToObject(fn, "arguments", "");
	} else {
		fn = cJSON_AddObjectToObject(tc, "function");
		cJSON_AddStringToObject(fn, "arguments", text ? text : "");
	}
	free(text);
	cJSON_AddNullToObject(c, "logprobs");
	cJSON_AddNullToObject(c, "finish_reason");
	sse_put(out, o);
}

/* Content the parser released so far in this feed, as its own chunk. */
static void tools_flush(struct serve_answer *a)
{
	if (a->tp_content.len)
		chunk_text(a, a->tp_out, NULL, 0, a->tp_content.p, a->tp_content.len, NULL, NULL, false);
	a->tp_content.len = 0;
}

/* The stream's parser events: content gathers until a call starts. */
static int tools_event(void *ctx, const struct tool_call_event *ev)
{
	struct serve_answer *a = ctx;
	if (!a->tp_out)
		return 0; /* not a stream: the results are read at the end */
	if (ev->kind == TOOL_CALL_EVENT_CONTENT) {
		strbuf_put(&a->tp_content, ev->text, ev->text_len);
		return a->tp_content.rc;
	}
	if (ev->kind == TOOL_CALL_EVENT_END)
		return 0;
	if (ev->kind == TOOL_CALL_EVENT_START)
		tools_flush(a);
	chunk_tool(a, a->tp_out, ev);
	return a->tp_out->rc;
}

int serve_answer_sse(struct serve_answer *a, const struct serve_take *t, struct strbuf *out)
{
	if (a->finished)
		return 0;
	if (a->dialect)
		return a->dialect->stream(a, t, out);
	if (!a->started) {
		a->started = true;
		if (a->endpoint == SERVE_CHAT)
			chunk_text(a, out, NULL, 0, "", 0, NULL, NULL, true);
		else if (a->echo)
			chunk_text(a, out, NULL, 0, a->echo, strlen(a->echo), NULL, NULL, false);
	}
	size_t at = 0;
	for (int i = 0; i < t->n_ev; i++) {
		const struct serve_event *e = &t->ev[i];
		const char *r = t->text + at, *c = r + e->reasoning_len;
		size_t nr = e->reasoning_len, nc = e->content_len;
		at += nr + nc;
		cJSON *lp = NULL;
		if (a->logprobs && e->id >= 0) {
			struct serve_take s = { 0 };
			struct serve_event ee = *e;
			s.ev = &ee;
			s.n_ev = 1;
			s.n_top = t->n_top;
			s.top_id = t->top_id ? t->top_id + (size_t)i * (size_t)t->n_top : NULL;
			s.top_lp = t->top_lp ? t->top_lp + (size_t)i * (size_t)t->n_top : NULL;
			lp = logprobs_of(a, &s);
		}
		if (a->tools && nc) {
			a->tp_out = out;
			if (tool_call_parser_feed(&a->tp, c, nc) != 0)
				out->rc = -ENOMEM;
			c = a->tp_content.p;
			nc = a->tp_content.len;
		}
		if (nr || nc || lp)
			chunk_text(a, out, r, nr, c, nc, lp, NULL, false);
		a->tp_content.len = 0;
	}
	if (!t->done)
		return out->rc;
	if (t->finish == SERVE_FINISH_ERROR) {
		char *e = serve_json_error(&t->error);
		strbuf_put(out, "data: ", 6);
		strbuf_put(out, e ? e : "{}", e ? strlen(e) : 2);
		strbuf_put(out, "\n\n", 2);
		free(e);
	} else {
		if (a->tools) {
			a->tp_out = out;
			if (tool_call_parser_finish(&a->tp) != 0)
				out->rc = -ENOMEM;
			tools_flush(a);
		}
		chunk_text(a, out, NULL, 0, NULL, 0, NULL, t, false);
		if (a->include_usage) {
			cJSON *o = head_of(a, a->endpoint == SERVE_CHAT ? "chat.completion.chunk" : "text_completion");
			cJSON_AddArrayToObject(o, "choices");
			cJSON_AddItemToObject(o, "usage", usage_of(t));
			sse_put(out, o);
		}
	}
	strbuf_put(out, "data: [DONE]\n\n", 14);
	a->finished = true;
	return out->rc;
}

char *serve_json_error(const struct serve_error *e)
{
	cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
	cJSON_AddStringToObject(err, "message", e->message);
	cJSON_AddStringToObject(err, "type", serve_error_type(e->status));
	if (e->param[0])
		cJSON_AddStringToObject(err, "param", e->param);
	else
		cJSON_AddNullToObject(err, "param");
	if (e->code)
		cJSON_AddStringToObject(err, "code", e->code);
	else
		cJSON_AddNullToObject(err, "code");
	return serve_json_print(o);
}

static cJSON *model_obj(const char *id, long long created)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "id", id);
	cJSON_AddStringToObject(m, "object", "model");
	cJSON_AddNumberToObject(m, "created", (double)created);
	cJSON_AddStringToObject(m, "owned_by", "colibri");
	return m;
}

char *serve_json_model(const char *id, long long created)
{
	return serve_json_print(model_obj(id, created));
}

char *serve_json_models(const char *id, long long created)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "object", "list");
	cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_obj(id, created));
	return serve_json_print(o);
}
