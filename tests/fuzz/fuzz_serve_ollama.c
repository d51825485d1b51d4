/*
 * fuzz_serve_ollama — the bodies of Ollama's /api/chat and /api/generate on
 * colibri serve (serve_ollama_parse in engine/serve/serve_ollama.c), which
 * rewrites them into the OpenAI request serve_request_parse then reads.
 *
 * Input: one byte choosing the route (even: /api/chat; odd: /api/generate),
 * then the body. The served model is "m" with a context of 512 positions,
 * max_tokens at most 64 and a vocabulary of 1000 ids.
 *
 * Beyond "no crash": a refused body leaves a 4xx/5xx status and a message,
 * and an empty request; an accepted one echoes a model name that names "m"
 * (with or without ":latest"), holds num_ctx in [0, 512] and a
 * NUL-terminated warning; with a done_reason (load, unload) it holds
 * nothing to run; otherwise /api/chat is a chat request, and every message
 * and the prompt, the tools and the schema are valid UTF-8, max_tokens is
 * -1 or within the cap, and a repeat window is -1 or more.
 */
#include <stdbool.h>
#include <string.h>

#include "engine/serve/serve_ollama.h"
#include "engine/serve/serve_request.h"
#include "tests/fuzz/fuzz_util.h"

static bool utf8_or_null(const char *s)
{
	return !s || serve_utf8_valid(s, strlen(s));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	bool chat = !(data[0] & 1);
	const char *body = (const char *)data + 1;
	size_t len = size - 1;
	static const struct serve_limits lim = { .max_tokens_cap = 64, .vocab = 1000, .temp = 0.8f, .top_p = 1 };
	const struct serve_ollama_model m = { .id = "m", .ctx = 512, .lim = &lim };
	struct serve_ollama o;
	struct serve_request r;
	struct serve_error err = { 0 };
	if (serve_ollama_parse(&o, &r, chat, body, len, &m, &err) != 0) {
		FUZZ_ASSERT(err.status >= 400 && err.status < 600 && err.message[0], "refused without a status or message");
		FUZZ_ASSERT(!r.messages && !r.prompt && !r.prompt_ids && !r.tools_json && !r.schema_json,
			    "a refused request holds data");
		serve_request_free(&r);
		return 0;
	}
	FUZZ_ASSERT(!strcmp(o.model, "m") || !strcmp(o.model, "m:latest"), "model \"%.64s\" accepted", o.model);
	FUZZ_ASSERT(o.num_ctx >= 0 && o.num_ctx <= 512, "num_ctx %d", o.num_ctx);
	FUZZ_ASSERT(memchr(o.warning, 0, sizeof o.warning), "warning not terminated");
	if (o.done_reason) {
		FUZZ_ASSERT(!r.messages && !r.prompt && !r.prompt_ids, "a load or unload answer holds a request");
		serve_request_free(&r);
		return 0;
	}
	FUZZ_ASSERT(!chat || r.endpoint == SERVE_CHAT, "/api/chat parsed as a completion");
	FUZZ_ASSERT(r.n_messages == 0 || r.messages, "messages");
	FUZZ_ASSERT(r.endpoint == SERVE_CHAT || r.prompt || r.prompt_ids, "a completion without a prompt");
	for (int i = 0; i < r.n_messages; i++)
		FUZZ_ASSERT(utf8_or_null(r.messages[i].role) && utf8_or_null(r.messages[i].content), "message %d UTF-8", i);
	FUZZ_ASSERT(utf8_or_null(r.prompt) && utf8_or_null(r.messages_json) && utf8_or_null(r.tools_json) &&
			    utf8_or_null(r.schema_json),
		    "request text UTF-8");
	FUZZ_ASSERT(r.max_tokens == -1 || (r.max_tokens >= 0 && r.max_tokens <= 64), "max_tokens %d", r.max_tokens);
	FUZZ_ASSERT(r.p.repeat_last_n >= -1, "repeat_last_n %d", r.p.repeat_last_n);
	FUZZ_ASSERT(r.n_stop >= 0 && r.n_stop <= SERVE_STOP_MAX, "stops %d", r.n_stop);
	serve_request_free(&r);
	return 0;
}
