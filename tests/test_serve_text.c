/*
 * test_serve_text — what colibri serve does to decoded text before a client
 * sees it (engine/serve/serve_text.h), fed in pieces cut at every byte and at
 * seeded random places: stop strings (across piece boundaries, several at
 * once, multi-byte, a partial match at the end released), and the split of
 * <think> ... </think> into reasoning and content (the tags split anywhere,
 * a block only at the start or when the prompt opened it, blanks after the
 * block dropped, stop strings applying to both).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serve/serve_text.h"

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

struct sink {
	char content[4096], reasoning[4096];
};

static void sink_emit(void *ctx, enum serve_text_kind kind, const char *p, size_t n)
{
	struct sink *s = ctx;
	char *dst = kind == SERVE_TEXT_REASONING ? s->reasoning : s->content;
	strncat(dst, p, n);
}

/* Feeds text in pieces cut by the seeded generator; checks the outputs. */
static void pipe_check(const char *text, char **stop, int n_stop, bool split, bool open, const char *want_content,
		       const char *want_reasoning, bool want_stop)
{
	for (uint64_t seed = 1; seed <= 64; seed++) {
		struct serve_text *t = malloc(sizeof *t);
		struct sink out = { "", "" };
		serve_text_init(t, stop, n_stop, split, open, false, sink_emit, &out);
		uint64_t r = seed * 0x9e3779b97f4a7c15ull;
		size_t n = strlen(text), at = 0;
		bool stopped = false;
		while (at < n && !stopped) {
			size_t piece = seed == 1 ? 1 : 1 + rng_next(&r) % 7;
			piece = piece > n - at ? n - at : piece;
			stopped = serve_text_put(t, text + at, piece);
			at += piece;
		}
		serve_text_flush(t);
		cr_expect_str_eq(out.content, want_content, "content of \"%s\" (seed %llu)", text, (unsigned long long)seed);
		cr_expect_str_eq(out.reasoning, want_reasoning, "reasoning of \"%s\" (seed %llu)", text,
				 (unsigned long long)seed);
		cr_expect_eq(stopped, want_stop, "stop of \"%s\"", text);
		free(t);
	}
}

Test(serve_text, stops_and_reasoning)
{
	char *stops[] = { "STOP", "top!", "\xc3\xa9t\xc3\xa9" };
	pipe_check("Hello STOP world", stops, 3, false, false, "Hello ", "", true);
	pipe_check("Hello STO", stops, 3, false, false, "Hello STO", "", false);
	pipe_check("a ST STOP", stops, 3, false, false, "a ST ", "", true);
	pipe_check("xtop!y", stops, 3, false, false, "x", "", true);
	pipe_check("l'\xc3\xa9t\xc3\xa9 est", stops, 3, false, false, "l'", "", true);
	pipe_check("no stop at all", NULL, 0, false, false, "no stop at all", "", false);
	/* Reasoning. */
	pipe_check("<think>\nplan it\n</think>\n\nThe answer.", NULL, 0, true, false, "The answer.", "plan it", false);
	pipe_check("\n<think>a</think>b", NULL, 0, true, false, "b", "a", false);
	pipe_check("plan</think>\n\nDone", NULL, 0, true, true, "Done", "plan", false);
	pipe_check("still thinking", NULL, 0, true, true, "", "still thinking", false);
	pipe_check("Hi <think>x</think>", NULL, 0, true, false, "Hi <think>x</think>", "", false);
	pipe_check("<thi", NULL, 0, true, false, "<thi", "", false);
	pipe_check("<think>x</think>y", NULL, 0, false, false, "<think>x</think>y", "", false);
	pipe_check("<think>ab STOP cd</think>e", stops, 3, true, false, "", "ab ", true);
	pipe_check("<think>ab</think>c STOP d", stops, 3, true, false, "c ", "ab", true);
}
