/*
 * harmony — the streaming reader of harmony.h. A byte machine:
 *
 *   HEADER --<|message|>--> BODY --<|end|> <|call|> <|return|>--> HEADER
 *   BODY --<|start|>--> HEADER (an end marker left out)
 *   HEADER --longer than HARMONY_HEADER_MAX--> RAW (everything is content)
 *
 * In BODY, bytes run straight from the input to emit; a '<' starts h->hold,
 * which grows while it is a prefix of an end marker and is released as
 * body text as soon as it is not (the byte that broke it is read again).
 */
#include "engine/text/harmony.h"

#include <string.h>

enum { HS_HEADER, HS_BODY, HS_RAW };

static const char *const body_end[] = { "<|end|>", "<|call|>", "<|return|>", "<|start|>" };
#define N_BODY_END (sizeof body_end / sizeof body_end[0])

#define CALL_OPEN "<|start|>assistant to="
#define CALL_MID "<|channel|>commentary json<|message|>"
#define CALL_CLOSE "<|call|>"

void harmony_stream_init(struct harmony_stream *h, harmony_fn emit, void *ctx)
{
	memset(h, 0, sizeof *h);
	h->state = HS_HEADER;
	h->emit = emit;
	h->ctx = ctx;
}

static bool ends_with(const char *p, size_t n, const char *s)
{
	size_t k = strlen(s);
	return n >= k && memcmp(p + n - k, s, k) == 0;
}

/* p[0..n) up to the first of ' ', '<' or the end. */
static size_t word(const char *p, size_t n)
{
	size_t k = 0;
	while (k < n && p[k] != ' ' && p[k] != '<')
		k++;
	return k;
}

/* The header head[0..n) is complete: what its body is. */
static void header_done(struct harmony_stream *h, size_t n)
{
	const char *head = h->head, *to = NULL, *ch = NULL;
	for (size_t i = 0; i + 3 <= n; i++)
		if (memcmp(head + i, "to=", 3) == 0 && (i == 0 || head[i - 1] == ' ' || head[i - 1] == '>')) {
			to = head + i + 3;
			break;
		}
	for (size_t i = 0; i + 11 <= n; i++)
		if (memcmp(head + i, "<|channel|>", 11) == 0) {
			ch = head + i + 11;
			break;
		}
	size_t to_len = to ? word(to, n - (size_t)(to - head)) : 0;
	size_t ch_len = ch ? word(ch, n - (size_t)(ch - head)) : 0;
	h->state = HS_BODY;
	if (to_len) {
		h->kind = HARMONY_CALL;
		h->emit(h->ctx, HARMONY_CALL, CALL_OPEN, strlen(CALL_OPEN));
		h->emit(h->ctx, HARMONY_CALL, to, to_len);
		h->emit(h->ctx, HARMONY_CALL, CALL_MID, strlen(CALL_MID));
	} else {
		h->kind = ch_len == 8 && memcmp(ch, "analysis", 8) == 0 ? HARMONY_REASONING : HARMONY_CONTENT;
	}
}

/* A body ends at marker m (an index of body_end). */
static void body_done(struct harmony_stream *h, size_t m)
{
	if (h->kind == HARMONY_CALL) {
		h->emit(h->ctx, HARMONY_CALL, CALL_CLOSE, strlen(CALL_CLOSE));
		h->called = h->called || (m < N_BODY_END && strcmp(body_end[m], CALL_CLOSE) == 0);
	}
	h->state = HS_HEADER;
	h->n_head = 0;
	h->n_hold = 0;
}

/* Whether hold[0..n) is a prefix of some end marker; *full: which one it is
 * whole, or N_BODY_END. */
static bool hold_prefix(const char *hold, size_t n, size_t *full)
{
	bool any = false;
	*full = N_BODY_END;
	for (size_t i = 0; i < N_BODY_END; i++) {
		size_t k = strlen(body_end[i]);
		if (n <= k && memcmp(hold, body_end[i], n) == 0) {
			any = true;
			if (n == k)
				*full = i;
		}
	}
	return any;
}

void harmony_stream_put(struct harmony_stream *h, const char *p, size_t n)
{
	size_t run = 0; /* start of the body bytes of p not yet emitted */
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (h->state == HS_RAW)
			break;
		if (h->state == HS_HEADER) {
			if (h->n_head == sizeof h->head) { /* not harmony */
				h->state = HS_RAW;
				h->emit(h->ctx, HARMONY_CONTENT, h->head, h->n_head);
				run = i;
				break;
			}
			h->head[h->n_head++] = c;
			if (ends_with(h->head, h->n_head, "<|start|>")) {
				h->n_head = 0;
			} else if (ends_with(h->head, h->n_head, "<|message|>")) {
				header_done(h, h->n_head - strlen("<|message|>"));
				run = i + 1;
			}
			continue;
		}
		/* HS_BODY */
		if (h->n_hold == 0 && c != '<')
			continue;
		if (h->n_hold == 0 && i > run)
			h->emit(h->ctx, h->kind, p + run, i - run);
		h->hold[h->n_hold++] = c;
		size_t full;
		if (!hold_prefix(h->hold, h->n_hold, &full)) {
			/* not a marker: release all but the byte that broke it, and read that again */
			if (h->n_hold > 1)
				h->emit(h->ctx, h->kind, h->hold, h->n_hold - 1);
			h->n_hold = 0;
			run = i;
			i--;
			continue;
		}
		run = i + 1;
		if (full == N_BODY_END)
			continue;
		bool start = full == N_BODY_END - 1;
		body_done(h, full);
		if (start) /* <|start|> opens the next header */
			h->n_head = 0;
	}
	if (h->state == HS_RAW) {
		if (n > run)
			h->emit(h->ctx, HARMONY_CONTENT, p + run, n - run);
		return;
	}
	if (h->state == HS_BODY && h->n_hold == 0 && n > run)
		h->emit(h->ctx, h->kind, p + run, n - run);
}

void harmony_stream_flush(struct harmony_stream *h)
{
	if (h->state != HS_BODY)
		return;
	if (h->n_hold)
		h->emit(h->ctx, h->kind, h->hold, h->n_hold);
	h->n_hold = 0;
	body_done(h, N_BODY_END);
}

bool harmony_template(const char *template_text)
{
	return template_text && strstr(template_text, "<|channel|>") && strstr(template_text, "<|message|>") &&
	       strstr(template_text, "<|start|>");
}
