/*
 * fuzz_serve_request — the JSON body of colibri serve's completion requests
 * (serve_request_parse in engine/serve/serve_request.c), then the text
 * pipeline (engine/serve/serve_text.c) over the accepted request's own text
 * with its stop strings.
 *
 * Input: one byte choosing the endpoint (even: /v1/chat/completions, odd:
 * /v1/completions), then the body. The limits are fixed: max_tokens at most
 * 64, a vocabulary of 1000 ids.
 *
 * Beyond "no crash": a refused body leaves a 4xx/5xx status and a message,
 * and an empty request; an accepted one holds what the server trusts
 * without checking again: 1..SERVE_MESSAGES_MAX messages with a known role
 * (developer read as system) and content that is valid UTF-8; a prompt that
 * is text or 1+ ids below the vocabulary, never both; stop strings of 1 to
 * SERVE_STOP_BYTES_MAX bytes of valid UTF-8, at most SERVE_STOP_MAX; every
 * sampling number in OpenAI's range (temperature [0, 2], top_p (0, 1],
 * penalties [-2, 2], top_logprobs [0, 20] and only with logprobs, top_k >=
 * 0, max_tokens -1 or [1, 64]). The text pipeline then releases a prefix of
 * the text it was fed (no split) that ends right before a stop string when
 * it reports one, and contains none.
 */
#include <stdbool.h>
#include <string.h>

#include "engine/serve/serve_request.h"
#include "engine/serve/serve_text.h"
#include "tests/fuzz/fuzz_util.h"

struct out {
	char buf[8192];
	size_t n;
	bool overflow;
};

static void emit(void *ctx, enum serve_text_kind kind, const char *p, size_t n)
{
	struct out *o = ctx;
	FUZZ_ASSERT(kind == SERVE_TEXT_CONTENT, "reasoning released without the split");
	if (o->n + n > sizeof o->buf) {
		o->overflow = true;
		return;
	}
	memcpy(o->buf + o->n, p, n);
	o->n += n;
}

static void check_text(const struct serve_request *r, const char *text)
{
	size_t len = strlen(text);
	if (len > 4096)
		return;
	static struct serve_text t;
	struct out o = { .n = 0 };
	serve_text_init(&t, (char *const *)r->stop, r->n_stop, false, false, false, emit, &o);
	bool stopped = false;
	for (size_t at = 0; at < len && !stopped; at += 3)
		stopped = serve_text_put(&t, text + at, len - at < 3 ? len - at : 3);
	serve_text_flush(&t);
	FUZZ_ASSERT(!o.overflow && o.n <= len && memcmp(o.buf, text, o.n) == 0, "the released text is not a prefix");
	for (int i = 0; i < r->n_stop; i++)
		FUZZ_ASSERT(!memmem(o.buf, o.n, r->stop[i], strlen(r->stop[i])), "stop string %d was released", i);
	if (stopped) {
		bool found = false;
		for (int i = 0; i < r->n_stop; i++)
			found = found || !strncmp(text + o.n, r->stop[i], strlen(r->stop[i]));
		FUZZ_ASSERT(found, "a stop reported where none starts");
	} else {
		FUZZ_ASSERT(o.n == len, "text lost without a stop");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	enum serve_endpoint e = data[0] & 1 ? SERVE_COMPLETION : SERVE_CHAT;
	const char *body = (const char *)data + 1;
	size_t len = size - 1;
	struct serve_limits lim = { .max_tokens_cap = 64, .vocab = 1000, .temp = 1, .top_p = 1, .top_k = 0 };
	struct serve_request r;
	struct serve_error err = { 0 };
	int rc = serve_request_parse(&r, e, body, len, &lim, &err);
	if (rc) {
		FUZZ_ASSERT(err.status >= 400 && err.status < 600 && err.message[0], "refused without a status or message");
		FUZZ_ASSERT(!r.messages && !r.prompt && !r.prompt_ids && r.n_stop == 0, "a refused request holds data");
		serve_request_free(&r);
		return 0;
	}
	FUZZ_ASSERT(r.endpoint == e, "endpoint");
	const struct batch_params *p = &r.p;
	FUZZ_ASSERT(p->temp >= 0 && p->temp <= 2, "temperature %g", p->temp);
	FUZZ_ASSERT(p->top_p > 0 && p->top_p <= 1, "top_p %g", p->top_p);
	FUZZ_ASSERT(p->top_k >= 0, "top_k %d", p->top_k);
	FUZZ_ASSERT(p->presence_penalty >= -2 && p->presence_penalty <= 2, "presence_penalty");
	FUZZ_ASSERT(p->frequency_penalty >= -2 && p->frequency_penalty <= 2, "frequency_penalty");
	FUZZ_ASSERT(p->top_logprobs >= 0 && p->top_logprobs <= BATCH_LOGPROBS_MAX && (!p->top_logprobs || p->logprobs),
		    "top_logprobs %d", p->top_logprobs);
	FUZZ_ASSERT(r.max_tokens == -1 || (r.max_tokens >= 1 && r.max_tokens <= 64), "max_tokens %d", r.max_tokens);
	FUZZ_ASSERT(r.n_stop >= 0 && r.n_stop <= SERVE_STOP_MAX, "n_stop");
	for (int i = 0; i < r.n_stop; i++) {
		size_t n = strlen(r.stop[i]);
		FUZZ_ASSERT(n >= 1 && n <= SERVE_STOP_BYTES_MAX && serve_utf8_valid(r.stop[i], n), "stop[%d]", i);
	}
	if (e == SERVE_CHAT) {
		FUZZ_ASSERT(r.n_messages >= 1 && r.n_messages <= SERVE_MESSAGES_MAX && r.messages, "messages");
		for (int i = 0; i < r.n_messages; i++) {
			const struct serve_message *m = &r.messages[i];
			FUZZ_ASSERT(m->role && (!strcmp(m->role, "system") || !strcmp(m->role, "user") ||
						!strcmp(m->role, "assistant") || !strcmp(m->role, "tool")),
				    "role of message %d", i);
			FUZZ_ASSERT(m->content && serve_utf8_valid(m->content, strlen(m->content)), "content of %d", i);
		}
		check_text(&r, r.messages[0].content);
	} else {
		FUZZ_ASSERT(!r.prompt != !r.prompt_ids, "prompt: text xor ids");
		FUZZ_ASSERT(!r.prompt || serve_utf8_valid(r.prompt, strlen(r.prompt)), "prompt UTF-8");
		FUZZ_ASSERT(!r.prompt_ids || r.n_prompt_ids >= 1, "empty id prompt");
		for (int i = 0; i < r.n_prompt_ids; i++)
			FUZZ_ASSERT(r.prompt_ids[i] >= 0 && r.prompt_ids[i] < 1000, "prompt id %d", i);
		if (r.prompt)
			check_text(&r, r.prompt);
	}
	serve_request_free(&r);
	return 0;
}
