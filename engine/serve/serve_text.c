/*
 * serve_text — see serve_text.h. Invariant of the stop matcher: held[0..n)
 * is the longest suffix of the text seen so far that is a proper prefix of
 * some stop string, plus at most one chunk being examined; so a stop string
 * can never straddle released text.
 */
#include "engine/serve/serve_text.h"

#include <string.h>

#define OPEN_TAG "<think>"
#define CLOSE_TAG "</think>"

static void harmony_out(void *ctx, enum harmony_kind kind, const char *p, size_t n)
{
	struct serve_text *t = ctx;
	t->emit(t->ctx, kind == HARMONY_REASONING ? SERVE_TEXT_REASONING : SERVE_TEXT_CONTENT, p, n);
}

void serve_text_init(struct serve_text *t, char *const *stop, int n_stop, bool split, bool reasoning_open,
		     bool harmony, serve_text_fn emit, void *ctx)
{
	memset(t, 0, sizeof *t);
	t->stop = stop;
	t->n_stop = n_stop;
	t->stop_index = -1;
	t->split = split;
	t->think = split && reasoning_open ? SERVE_THINK_IN : SERVE_THINK_START;
	t->skip_nl = t->think == SERVE_THINK_IN;
	t->emit = emit;
	t->ctx = ctx;
	t->harmony = split && harmony;
	if (t->harmony)
		harmony_stream_init(&t->hs, harmony_out, t);
}

/* Longest k < tag length with p[n-k..n) == tag[0..k). */
static size_t partial_suffix(const char *p, size_t n, const char *tag, size_t tag_len)
{
	for (size_t k = tag_len - 1 < n ? tag_len - 1 : n; k > 0; k--)
		if (memcmp(p + n - k, tag, k) == 0)
			return k;
	return 0;
}

static void emit_content(struct serve_text *t, const char *p, size_t n)
{
	if (t->skip_blank) {
		while (n && (*p == '\n' || *p == ' ' || *p == '\r' || *p == '\t'))
			p++, n--;
		if (n)
			t->skip_blank = false;
	}
	if (n)
		t->emit(t->ctx, SERVE_TEXT_CONTENT, p, n);
}

/* The splitter over released text p[0..n) (n <= SERVE_TEXT_HOLD). */
static void split_put(struct serve_text *t, const char *p, size_t n)
{
	if (t->harmony) { /* a tool call's <|call|> ends the turn, as a stop string would */
		harmony_stream_put(&t->hs, p, n);
		t->stopped = t->stopped || t->hs.called;
		return;
	}
	if (!t->split || t->think == SERVE_THINK_OUT) {
		emit_content(t, p, n);
		return;
	}
	/* Work on the held bytes followed by the new ones. */
	memcpy(t->tag + t->n_tag, p, n);
	size_t len = t->n_tag + n;
	t->n_tag = 0;
	const char *w = t->tag;
	if (t->think == SERVE_THINK_START) {
		size_t b = 0;
		while (b < len && (w[b] == '\n' || w[b] == ' '))
			b++;
		size_t rest = len - b, ol = strlen(OPEN_TAG);
		if (rest < ol && memcmp(w + b, OPEN_TAG, rest) == 0 && b <= 8) {
			t->n_tag = len; /* still possibly an opening tag */
			return;
		}
		if (rest >= ol && memcmp(w + b, OPEN_TAG, ol) == 0) {
			t->think = SERVE_THINK_IN;
			t->skip_nl = true;
			w += b + ol;
			len = rest - ol;
		} else {
			t->think = SERVE_THINK_OUT;
			emit_content(t, w, len);
			return;
		}
	}
	/* Inside the block: up to </think> is reasoning. */
	if (t->skip_nl) {
		while (len && *w == '\n')
			w++, len--;
		t->skip_nl = len == 0;
	}
	const char *end = memmem(w, len, CLOSE_TAG, strlen(CLOSE_TAG));
	if (end) {
		size_t r = (size_t)(end - w);
		while (r && w[r - 1] == '\n')
			r--;
		if (r)
			t->emit(t->ctx, SERVE_TEXT_REASONING, w, r);
		t->think = SERVE_THINK_OUT;
		t->skip_blank = true;
		const char *after = end + strlen(CLOSE_TAG);
		emit_content(t, after, (size_t)(w + len - after));
		return;
	}
	size_t keep = partial_suffix(w, len, CLOSE_TAG, strlen(CLOSE_TAG));
	/* Newlines right before </think> are not reasoning: hold a few. */
	for (int nl = 0; nl < 8 && keep < len && w[len - keep - 1] == '\n'; nl++)
		keep++;
	if (len > keep)
		t->emit(t->ctx, SERVE_TEXT_REASONING, w, len - keep);
	memmove(t->tag, w + len - keep, keep);
	t->n_tag = keep;
}

/* Examines held[0..n_held) for stop strings and releases what is safe. */
static void stop_scan(struct serve_text *t)
{
	size_t first = t->n_held;
	int which = -1;
	for (int i = 0; i < t->n_stop; i++) {
		const char *at = memmem(t->held, t->n_held, t->stop[i], strlen(t->stop[i]));
		if (at && (size_t)(at - t->held) < first) {
			first = (size_t)(at - t->held);
			which = i;
		}
	}
	if (first < t->n_held) {
		split_put(t, t->held, first);
		t->n_held = 0;
		t->stopped = true;
		t->stop_index = which;
		return;
	}
	size_t keep = 0;
	for (int i = 0; i < t->n_stop; i++) {
		size_t k = partial_suffix(t->held, t->n_held, t->stop[i], strlen(t->stop[i]));
		keep = k > keep ? k : keep;
	}
	split_put(t, t->held, t->n_held - keep);
	memmove(t->held, t->held + t->n_held - keep, keep);
	t->n_held = keep;
}

bool serve_text_put(struct serve_text *t, const char *p, size_t n)
{
	while (n && !t->stopped) {
		size_t take = n < SERVE_TEXT_CHUNK ? n : SERVE_TEXT_CHUNK;
		memcpy(t->held + t->n_held, p, take);
		t->n_held += take;
		p += take;
		n -= take;
		stop_scan(t);
	}
	return t->stopped;
}

void serve_text_flush(struct serve_text *t)
{
	if (t->n_held)
		split_put(t, t->held, t->n_held);
	t->n_held = 0;
	if (t->harmony)
		harmony_stream_flush(&t->hs);
	if (t->n_tag) {
		if (t->think == SERVE_THINK_IN)
			t->emit(t->ctx, SERVE_TEXT_REASONING, t->tag, t->n_tag);
		else
			emit_content(t, t->tag, t->n_tag);
	}
	t->n_tag = 0;
}
