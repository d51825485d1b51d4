/*
 * conversation — see conversation.h. The list grows by doubling; a chat
 * has tens to hundreds of messages, so nothing here is on a hot path.
 */
#include "engine/decode/conversation.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/error.h"
#include "engine/text/chat.h"
#include "engine/text/tokenizer.h"

void conversation_init(struct conversation *c)
{
	memset(c, 0, sizeof *c);
	c->cut_token = -1;
}

void conversation_free(struct conversation *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free(c->msgs[i].role);
		free(c->msgs[i].content);
	}
	free(c->msgs);
	conversation_init(c);
}

void conversation_pop(struct conversation *c)
{
	if (c->n == 0)
		return;
	c->n--;
	free(c->msgs[c->n].role);
	free(c->msgs[c->n].content);
	c->cut_token = -1;
}

void conversation_clear(struct conversation *c, bool keep_system)
{
	size_t keep = keep_system && c->n > 0 && !strcmp(c->msgs[0].role, "system") ? 1 : 0;
	while (c->n > keep)
		conversation_pop(c);
	c->cut_token = -1;
}

void conversation_move(struct conversation *dst, struct conversation *src)
{
	conversation_free(dst);
	*dst = *src;
	conversation_init(src);
}

/* The index of the first message a turn can start at: after a leading
 * system message. */
static size_t first_turn(const struct conversation *c)
{
	return c->n > 0 && !strcmp(c->msgs[0].role, "system") ? 1 : 0;
}

/* The end of the turn that starts at message i: the next user message
 * after it, or n. */
static size_t turn_end(const struct conversation *c, size_t i)
{
	for (i++; i < c->n && strcmp(c->msgs[i].role, "user"); i++)
		;
	return i;
}

size_t conversation_drop_turn(struct conversation *c, size_t keep)
{
	size_t start = first_turn(c);
	if (start >= c->n)
		return 0;
	size_t end = turn_end(c, start);
	if (end + keep > c->n)
		return 0;
	for (size_t i = start; i < end; i++) {
		free(c->msgs[i].role);
		free(c->msgs[i].content);
	}
	if (end == c->n)
		c->cut_token = -1;
	memmove(c->msgs + start, c->msgs + end, (c->n - end) * sizeof *c->msgs);
	c->n -= end - start;
	return end - start;
}

size_t conversation_count(const struct conversation *c, const char *role)
{
	size_t k = 0;
	for (size_t i = 0; i < c->n; i++)
		k += !strcmp(c->msgs[i].role, role);
	return k;
}

/* Copies text[0..len) into dst at *at, NUL bytes as U+FFFD (3 bytes);
 * dst has room for 3 * len bytes. */
static void copy_text(char *dst, size_t *at, const char *text, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (text[i]) {
			dst[(*at)++] = text[i];
		} else {
			memcpy(dst + *at, "\xef\xbf\xbd", 3);
			*at += 3;
		}
	}
	dst[*at] = 0;
}

/* Room for len more bytes after NUL replacement. */
static size_t grown_len(const char *text, size_t len)
{
	size_t n = len;
	for (size_t i = 0; i < len; i++)
		n += text[i] ? 0 : 2;
	return n;
}

int conversation_add(struct conversation *c, const char *role, const char *text, size_t len)
{
	if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant"))
		return error_set(EINVAL, "a message's role is system, user or assistant, not \"%s\"", role);
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 16;
		struct conversation_message *m = realloc(c->msgs, cap * sizeof *m);
		if (!m)
			return error_set(ENOMEM, "out of memory");
		c->msgs = m;
		c->cap = cap;
	}
	struct conversation_message *m = &c->msgs[c->n];
	m->role = strdup(role);
	m->content = malloc(grown_len(text, len) + 1);
	if (!m->role || !m->content) {
		free(m->role);
		free(m->content);
		return error_set(ENOMEM, "out of memory");
	}
	m->len = 0;
	copy_text(m->content, &m->len, text, len);
	c->n++;
	c->cut_token = -1;
	return 0;
}

int conversation_append(struct conversation *c, const char *text, size_t len)
{
	if (c->n == 0)
		return error_set(EINVAL, "the conversation is empty");
	struct conversation_message *m = &c->msgs[c->n - 1];
	char *s = realloc(m->content, m->len + grown_len(text, len) + 1);
	if (!s)
		return error_set(ENOMEM, "out of memory");
	m->content = s;
	copy_text(m->content, &m->len, text, len);
	return 0;
}

cJSON *conversation_to_json(const struct conversation *c)
{
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; a && i < c->n; i++) {
		cJSON *m = cJSON_CreateObject();
		if (!m || !cJSON_AddItemToArray(a, m) || !cJSON_AddStringToObject(m, "role", c->msgs[i].role) ||
		    !cJSON_AddStringToObject(m, "content", c->msgs[i].content)) {
			cJSON_Delete(a);
			return NULL;
		}
	}
	return a;
}

int conversation_from_json(struct conversation *c, const cJSON *messages, const char *src)
{
	if (!cJSON_IsArray(messages))
		return error_set(EINVAL, "%s: \"messages\" is not an array", src);
	int i = 0;
	for (const cJSON *m = messages->child; m; m = m->next, i++) {
		const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
		const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
		if (!cJSON_IsString(role) || !cJSON_IsString(content))
			return error_set(EINVAL, "%s: message %d lacks a string role or content", src, i);
		int rc = conversation_add(c, role->valuestring, content->valuestring, strlen(content->valuestring));
		if (rc == -EINVAL) {
			char why[512];
			snprintf(why, sizeof why, "%s", error_message());
			error_clear();
			return error_set(EINVAL, "%s: message %d: %s", src, i, why);
		}
		if (rc)
			return rc;
	}
	return 0;
}

uint64_t conversation_hash(const struct conversation *c, uint64_t seed)
{
	XXH3_state_t *h = XXH3_createState();
	if (!h)
		return 0;
	XXH3_64bits_reset_withSeed(h, seed);
	uint64_t n = c->n;
	XXH3_64bits_update(h, &n, sizeof n);
	for (size_t i = 0; i < c->n; i++) {
		uint64_t lens[2] = { strlen(c->msgs[i].role), c->msgs[i].len };
		XXH3_64bits_update(h, lens, sizeof lens);
		XXH3_64bits_update(h, c->msgs[i].role, lens[0]);
		XXH3_64bits_update(h, c->msgs[i].content, lens[1]);
	}
	XXH3_64bits_update(h, &c->cut_token, sizeof c->cut_token);
	uint64_t d = XXH3_64bits_digest(h);
	XXH3_freeState(h);
	return d;
}

/* Today's renderer: engine/text/chat.h, the families written in C. A Jinja
 * interpreter replaces it here and nowhere else. */
/* How many leading ids[0..n) the rendering of the messages without the
 * generation prompt shares: the history the next turn keeps. 0 when that
 * rendering fails (the caller then keeps no checkpoint). */
static int history_ids(const struct chat_template *ct, const struct chat_message *msgs, size_t n_msgs,
		       const struct chat_options *co, const struct tokenizer *tok, const int32_t *ids, int n)
{
	struct chat_options without = *co;
	without.add_generation_prompt = false;
	char err[256], *text = NULL;
	size_t len = 0, nv = 0;
	int32_t *h = NULL;
	int k = 0;
	if (chat_template_render(ct, msgs, n_msgs, &without, &text, &len, err, sizeof err) == 0 &&
	    tokenizer_encode(tok, text, len, &h, &nv) == 0)
		while (k < n && (size_t)k < nv && h[k] == ids[k])
			k++;
	error_clear();
	free(text);
	free(h);
	return k;
}

int conversation_prompt(const struct conversation *c, size_t n_msgs, const struct tokenizer *tok,
			const char *model_type, const struct conversation_prompt_options *o, int32_t **ids, int *n,
			bool *thinking, int *n_history)
{
	char err[512] = "";
	*ids = NULL;
	*n = 0;
	if (n_history)
		*n_history = 0;
	if (n_msgs > c->n)
		n_msgs = c->n;
	struct chat_template ct;
	int rc = chat_template_init(&ct, tokenizer_chat_template(tok), model_type, tokenizer_bos_token(tok),
				    tokenizer_eos_token(tok), err, sizeof err);
	if (rc)
		return error_set(-rc, "chat template: %s", err[0] ? err : "not supported");
	struct chat_message *msgs = malloc((n_msgs ? n_msgs : 1) * sizeof *msgs);
	char *text = NULL;
	size_t len = 0;
	if (!msgs) {
		chat_template_free(&ct);
		return error_set(ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n_msgs; i++)
		msgs[i] = (struct chat_message){ c->msgs[i].role, c->msgs[i].content };
	struct chat_options co = { .add_generation_prompt = true, .no_thinking = o && o->no_thinking };
	rc = chat_template_render(&ct, msgs, n_msgs, &co, &text, &len, err, sizeof err);
	if (rc) {
		chat_template_free(&ct);
		free(msgs);
		return error_set(-rc, "chat template: %s", err[0] ? err : "cannot render the conversation");
	}
	if (thinking) {
		/* The generation prompt opens the reasoning itself ("<think>\n"). */
		size_t k = len;
		while (k > 0 && (text[k - 1] == '\n' || text[k - 1] == ' '))
			k--;
		*thinking = k >= 7 && !memcmp(text + k - 7, "<think>", 7);
	}
	size_t nv = 0;
	rc = tokenizer_encode(tok, text, len, ids, &nv);
	free(text);
	if (!rc && n_history)
		*n_history = history_ids(&ct, msgs, n_msgs, &co, tok, *ids, (int)nv);
	chat_template_free(&ct);
	free(msgs);
	if (rc)
		return error_set(-rc, rc == -EILSEQ ? "the conversation is not valid UTF-8" : "cannot tokenize the conversation");
	*n = (int)nv;
	return 0;
}

int conversation_fit(struct conversation *c, struct conversation_fit *f, const struct tokenizer *tok,
		     const char *model_type, const struct conversation_prompt_options *o, int32_t **ids, int *n,
		     bool *thinking, int *n_history)
{
	*ids = NULL;
	*n = 0;
	f->dropped = 0;
	f->freed = 0;
	/* A view of c without its first k turns: the leading system message
	 * and msgs[from..n), borrowed, so that c changes only once the number
	 * of turns is settled. One rendering per turn tried; a chat drops one
	 * or two at a time. */
	size_t start = first_turn(c), from = start;
	struct conversation v = *c;
	v.msgs = malloc((c->n ? c->n : 1) * sizeof *v.msgs);
	if (!v.msgs)
		return error_set(ENOMEM, "out of memory");
	memcpy(v.msgs, c->msgs, start * sizeof *v.msgs);
	int k = 0, n_first = -1, rc = 0;
	for (;;) {
		v.n = start + (c->n - from);
		memcpy(v.msgs + start, c->msgs + from, (c->n - from) * sizeof *v.msgs);
		free(*ids);
		rc = conversation_prompt(&v, v.n - (f->leave_out < v.n ? f->leave_out : v.n), tok, model_type, o, ids,
					 n, thinking, NULL);
		if (rc)
			break;
		if (n_first < 0)
			n_first = *n;
		size_t next = from < c->n ? turn_end(c, from) : c->n;
		if ((int64_t)*n + f->want <= f->ctx || from >= c->n || next + f->keep > c->n)
			break;
		from = next;
		k++;
	}
	free(v.msgs);
	if (!rc && (int64_t)*n + f->need > f->ctx)
		rc = error_set(ENOSPC, "the prompt has %d tokens; the context holds %d", *n, f->ctx);
	if (rc) { /* *n stays: how long the prompt would be */
		free(*ids);
		*ids = NULL;
		return rc;
	}
	for (int i = 0; i < k; i++)
		conversation_drop_turn(c, f->keep);
	f->dropped = k;
	f->freed = n_first - *n;
	if (n_history) { /* its second rendering, once, for what remains */
		free(*ids);
		rc = conversation_prompt(c, c->n - (f->leave_out < c->n ? f->leave_out : c->n), tok, model_type, o,
					 ids, n, thinking, n_history);
	}
	return rc;
}
