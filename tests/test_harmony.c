/*
 * test_harmony — gpt-oss replies in the harmony format (engine/text/harmony.h)
 * read as they stream, fed whole, one byte at a time and in seeded random
 * pieces: the analysis channel as reasoning, final and preamble commentary as
 * content, headers and end markers dropped, tool calls re-emitted in the
 * template's form (recipient before or after the channel, <|constrain|>,
 * <|call|> present or left to the stop token) and read back by tool_calls.c's
 * TOOL_FORMAT_HARMONY, markers that are not markers kept as text, UTF-8 kept
 * whole, a header too long to be harmony given back as content; and that
 * released gpt-oss.jinja is recognised as harmony and its rendered calls read.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/harmony.h"
#include "engine/text/tool_calls.h"
#include "tests/chat_fixtures.h"

struct sink {
	char content[8192], reasoning[8192], call[8192];
	bool split_utf8;
};

static void sink_emit(void *ctx, enum harmony_kind kind, const char *p, size_t n)
{
	struct sink *s = ctx;
	char *dst = kind == HARMONY_REASONING ? s->reasoning : kind == HARMONY_CALL ? s->call : s->content;
	if (n && ((unsigned char)p[0] & 0xc0) == 0x80)
		s->split_utf8 = true;
	strncat(dst, p, n);
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Feeds text whole (seed 0), per byte (seed 1) and in random pieces; checks every way. */
static void expect_split(const char *text, const char *content, const char *reasoning, const char *call,
			 bool called)
{
	for (uint64_t seed = 0; seed < 40; seed++) {
		struct harmony_stream h;
		struct sink *s = calloc(1, sizeof *s);
		harmony_stream_init(&h, sink_emit, s);
		size_t n = strlen(text), at = 0;
		uint64_t r = seed * 0x9e3779b97f4a7c15ull + 1;
		while (at < n) {
			size_t k = seed == 0 ? n : seed == 1 ? 1 : 1 + rng_next(&r) % 12;
			k = k > n - at ? n - at : k;
			harmony_stream_put(&h, text + at, k);
			at += k;
		}
		harmony_stream_flush(&h);
		cr_expect_str_eq(s->content, content, "content of [%s], seed %d", text, (int)seed);
		cr_expect_str_eq(s->reasoning, reasoning, "reasoning of [%s], seed %d", text, (int)seed);
		cr_expect_str_eq(s->call, call, "call of [%s], seed %d", text, (int)seed);
		cr_expect_eq(h.called, called, "[%s]", text);
		if (seed == 0)
			cr_expect(!s->split_utf8, "[%s]: a delta starts inside a character", text);
		free(s);
	}
}

#define CALL(name, args) "<|start|>assistant to=" name "<|channel|>commentary json<|message|>" args "<|call|>"

Test(harmony, channels)
{
	/* what gpt-oss writes after the generation prompt <|start|>assistant */
	expect_split("<|channel|>analysis<|message|>User says hi. Reply.<|end|><|start|>assistant<|channel|>final"
		     "<|message|>Hello! 🙂 Ça va?", "Hello! 🙂 Ça va?", "User says hi. Reply.", "", false);
	/* <|return|> is the stop token, but a reply may carry it as text too */
	expect_split("<|channel|>final<|message|>Done.<|return|>", "Done.", "", "", false);
	/* no analysis at all */
	expect_split("<|channel|>final<|message|>A < B and <|x|> <|en are text", "A < B and <|x|> <|en are text", "", "",
		     false);
	/* a preamble on commentary is shown */
	expect_split("<|channel|>commentary<|message|>Let me look.<|end|>", "Let me look.", "", "", false);
	/* cut off inside the analysis: what came is reasoning */
	expect_split("<|channel|>analysis<|message|>thinking <|", "", "thinking <|", "", false);
	/* a <|start|> with no <|end|> before it still ends the body */
	expect_split("<|channel|>analysis<|message|>a<|start|>assistant<|channel|>final<|message|>b", "b", "a", "", false);
	/* an empty reply and a header the output stopped in give nothing */
	expect_split("", "", "", "", false);
	expect_split("<|channel|>analy", "", "", "", false);
}

Test(harmony, tool_calls)
{
	/* the model's order: recipient after the channel, <|constrain|>json; <|call|> as text */
	expect_split("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
		     "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"東京\"}<|call|>",
		     "", "Need weather.", CALL("functions.get_weather", "{\"city\":\"東京\"}"), true);
	/* the template's order, and <|call|> taken by the stop token: the flush closes the call */
	expect_split(" to=functions.search<|channel|>commentary json<|message|>{\"query\": \"q\"}", "", "",
		     CALL("functions.search", "{\"query\": \"q\"}"), false);
	/* a header longer than any harmony header is not harmony */
	char longer[HARMONY_HEADER_MAX + 64];
	memset(longer, 'x', sizeof longer - 1);
	longer[sizeof longer - 1] = 0;
	expect_split(longer, longer, "", "", false);
}

struct calls {
	struct tool_call_parser p;
};

static void to_parser(void *ctx, enum harmony_kind kind, const char *p, size_t n)
{
	if (kind != HARMONY_REASONING)
		cr_assert_eq(tool_call_parser_feed(ctx, p, n), 0);
}

/* The split's output read by the HARMONY tool-call parser, as serve chains them. */
Test(harmony, calls_read_back)
{
	const char *reply = "<|channel|>analysis<|message|>Two steps.<|end|><|start|>assistant<|channel|>commentary"
			    " to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": 2}";
	for (size_t piece = 1; piece <= strlen(reply); piece += 7) {
		struct tool_call_parser p;
		tool_call_parser_init(&p, TOOL_FORMAT_HARMONY, NULL, NULL, NULL);
		struct harmony_stream h;
		harmony_stream_init(&h, to_parser, &p);
		for (size_t at = 0; at < strlen(reply); at += piece)
			harmony_stream_put(&h, reply + at, strlen(reply) - at < piece ? strlen(reply) - at : piece);
		harmony_stream_flush(&h);
		cr_assert_eq(tool_call_parser_finish(&p), 0);
		cr_expect_eq(p.error, 0, "%s", p.error_msg);
		cr_assert_eq(p.n_calls, 1);
		cr_expect_str_eq(p.calls[0].name, "get_weather");
		cr_expect_str_eq(p.calls[0].arguments, "{\"city\":\"Paris\",\"days\":2}");
		cr_expect_str_eq(p.content.data ? p.content.data : "", "");
		tool_call_parser_free(&p);
	}
}

/* gpt-oss.jinja is harmony; the calls it renders (object and string arguments) parse back. */
Test(harmony, released_template)
{
	char *tmpl = chat_fixture_template("gpt-oss.jinja");
	cr_expect(harmony_template(tmpl));
	cr_expect_eq(tool_format_detect(tmpl, NULL), TOOL_FORMAT_HARMONY);
	cr_expect_eq(tool_format_detect(NULL, "gpt_oss"), TOOL_FORMAT_HARMONY);
	cr_expect_str_eq(tool_format_name(TOOL_FORMAT_HARMONY), "harmony");
	free(tmpl);
	cJSON *root = chat_fixture_expected();
	const cJSON *cases = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "templates"), "gpt-oss.jinja"),
						 "cases");
	size_t read = 0;
	const cJSON *c;
	cJSON_ArrayForEach(c, cases) {
		const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(c, "expected"));
		for (const char *at = want ? strstr(want, "<|start|>assistant to=") : NULL; at;
		     at = strstr(at + 1, "<|start|>assistant to=")) {
			const char *end = strstr(at, "<|call|>");
			cr_assert(end);
			struct tool_call_parser p;
			tool_call_parser_init(&p, TOOL_FORMAT_HARMONY, NULL, NULL, NULL);
			for (const char *q = at; q < end + 8; q++) /* a byte at a time */
				cr_assert_eq(tool_call_parser_feed(&p, q, 1), 0);
			cr_assert_eq(tool_call_parser_finish(&p), 0);
			cr_expect_eq(p.error, 0, "%s: %s", cJSON_GetStringValue(cJSON_GetObjectItem(c, "name")), p.error_msg);
			cr_expect_eq(p.n_calls, 1);
			cr_expect(p.n_calls == 0 || p.calls[0].arguments[0] == '{');
			tool_call_parser_free(&p);
			read++;
		}
	}
	cr_expect_gt(read, 20);
	fprintf(stderr, "harmony: %zu calls rendered by gpt-oss.jinja read back\n", read);
	cJSON_Delete(root);
}
