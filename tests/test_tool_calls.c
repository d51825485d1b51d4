/*
 * test_tool_calls — tool calls read back from model output
 * (engine/text/tool_calls.c):
 *   - released_templates: for every tool-capable template of
 *     tests/chat_templates/ (Qwen3, Qwen3.5, DeepSeek-V3, V3.1, V3.2, V4,
 *     GLM-4.5, 4.6, 4.7, 4.7-Flash), every assistant turn with tool_calls
 *     in the conversations of expected.json is rendered by colibri's Jinja
 *     (which test_chat holds to Jinja2's output): the text the turn adds
 *     after the generation prompt is what the model would emit. Parsed
 *     back, its calls must have the conversation's names and JSON-equal
 *     arguments, whole, a byte at a time and in random chunks;
 *   - the format each template and model_type maps to, none for Mixtral,
 *     OLMoE, Tulu 3 and Qwen1.5-MoE;
 *   - streaming invariants on every input: concatenated content deltas
 *     equal the final content, each delta is whole UTF-8, the argument
 *     deltas of each call equal its final arguments, ids are call_<index>;
 *   - content around calls, several calls, no calls, a literal "<tool_call"
 *     that is no call, truncated and malformed calls (text kept as content,
 *     error set), the typed-parameter rule, a callback that stops the
 *     parser, and random bytes and marker fragments without a crash;
 *   - the generic format (for templates that render no tools): its prompt
 *     lists each tool and the answer shapes, a history's calls written as
 *     that answer read back as the same calls, and canned answers: a call,
 *     calls, a response, plain text, and malformed or cut-off calls, which
 *     are content.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>

#include "tests/chat_fixtures.h"
#include "tests/cli_util.h"
#include "tests/test_util.h"
#include "engine/text/chat.h"
#include "engine/text/tool_calls.h"

/* ---- running the parser and checking the stream ---- */

struct stream {
	char *content;
	size_t content_len;
	char *args[64];
	size_t n_started, n_ended;
	bool bad_utf8_delta, bad_order;
	int stop_after;	/* >0: the callback returns -ECANCELED at that event */
	int events;
};

static void sadd(char **s, size_t *len, const char *t, size_t n)
{
	*s = realloc(*s, *len + n + 1);
	memcpy(*s + *len, t, n);
	*len += n;
	(*s)[*len] = '\0';
}

static bool utf8_valid(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t k = s[i] < 0x80 ? 1 : (s[i] & 0xE0) == 0xC0 ? 2 : (s[i] & 0xF0) == 0xE0 ? 3 : (s[i] & 0xF8) == 0xF0 ? 4 : 0;
		if (!k || i + k > n)
			return false;
		for (size_t j = 1; j < k; j++)
			if ((s[i + j] & 0xC0) != 0x80)
				return false;
		i += k;
	}
	return true;
}

static int on_event(void *ctx, const struct tool_call_event *ev)
{
	struct stream *st = ctx;
	if (st->stop_after && ++st->events >= st->stop_after)
		return -ECANCELED;
	switch (ev->kind) {
	case TOOL_CALL_EVENT_CONTENT:
		cr_assert(ev->text_len > 0);
		if (!utf8_valid((const unsigned char *)ev->text, ev->text_len))
			st->bad_utf8_delta = true;
		sadd(&st->content, &st->content_len, ev->text, ev->text_len);
		break;
	case TOOL_CALL_EVENT_START: {
		char id[24];
		snprintf(id, sizeof id, "call_%zu", ev->index);
		if (ev->index != st->n_started || st->n_ended != st->n_started || strcmp(ev->id, id) != 0 || !ev->name)
			st->bad_order = true;
		if (st->n_started < 64)
			st->args[st->n_started] = calloc(1, 1);
		st->n_started++;
		break;
	}
	case TOOL_CALL_EVENT_ARGUMENTS:
		if (ev->index + 1 != st->n_started || st->n_ended != ev->index)
			st->bad_order = true;
		else if (ev->index < 64) {
			size_t l = strlen(st->args[ev->index]);
			sadd(&st->args[ev->index], &l, ev->text, ev->text_len);
		}
		break;
	case TOOL_CALL_EVENT_END:
		if (ev->index != st->n_ended || ev->index + 1 != st->n_started)
			st->bad_order = true;
		st->n_ended++;
		break;
	}
	return 0;
}

static void stream_free(struct stream *st)
{
	free(st->content);
	for (size_t i = 0; i < st->n_started && i < 64; i++)
		free(st->args[i]);
}

/* chunk: 0 whole, 1 a byte at a time, else random sizes from seed chunk. */
static void parse(struct tool_call_parser *p, enum tool_format f, const cJSON *tools, const char *text, size_t len,
		  unsigned chunk, bool valid_utf8)
{
	struct stream st = { 0 };
	tool_call_parser_init(p, f, tools, on_event, &st);
	unsigned seed = chunk;
	for (size_t at = 0; at < len;) {
		size_t n = chunk == 0 ? len : chunk == 1 ? 1 : 1 + (size_t)(rand_r(&seed) % 17);
		if (n > len - at)
			n = len - at;
		cr_assert_eq(tool_call_parser_feed(p, text + at, n), 0);
		at += n;
	}
	cr_assert_eq(tool_call_parser_finish(p), 0);
	cr_assert_eq(st.content_len, p->content.len, "content deltas: %zu bytes, content %zu", st.content_len,
		     p->content.len);
	cr_assert_eq(memcmp(st.content ? st.content : "", p->content.data, p->content.len), 0,
		     "content deltas differ from the content");
	cr_assert_eq(p->content.data[p->content.len], '\0');
	if (valid_utf8)
		cr_assert(!st.bad_utf8_delta, "a content delta splits a UTF-8 character");
	cr_assert(!st.bad_order, "events out of order");
	cr_assert_eq(st.n_started, p->n_calls);
	cr_assert_eq(st.n_ended, p->n_calls);
	for (size_t i = 0; i < p->n_calls && i < 64; i++) {
		cr_assert_str_eq(st.args[i], p->calls[i].arguments, "call %zu: argument deltas", i);
		cJSON *a = cJSON_Parse(p->calls[i].arguments);
		cr_assert(cJSON_IsObject(a), "call %zu: arguments %s", i, p->calls[i].arguments);
		cJSON_Delete(a);
	}
	if (p->error)
		cr_assert(p->error_msg[0]);
	stream_free(&st);
}

/* The same result whole, byte by byte and in 20 random splittings; p holds the whole-text parse. */
static void parse_all_ways(struct tool_call_parser *p, enum tool_format f, const cJSON *tools, const char *text,
			   size_t len)
{
	bool valid = utf8_valid((const unsigned char *)text, len);
	parse(p, f, tools, text, len, 0, valid);
	for (unsigned c = 1; c < 22; c++) {
		struct tool_call_parser q;
		parse(&q, f, tools, text, len, c, valid);
		cr_assert_eq(q.content.len, p->content.len, "chunking %u: content [%s] vs [%s]", c, q.content.data,
			     p->content.data);
		cr_assert_eq(memcmp(q.content.data, p->content.data, p->content.len), 0, "chunking %u", c);
		cr_assert_eq(q.n_calls, p->n_calls, "chunking %u", c);
		cr_assert_eq(q.error, p->error, "chunking %u", c);
		for (size_t i = 0; i < p->n_calls; i++) {
			cr_assert_str_eq(q.calls[i].name, p->calls[i].name);
			cr_assert_str_eq(q.calls[i].arguments, p->calls[i].arguments);
		}
		tool_call_parser_free(&q);
	}
}

static void expect_json(const char *got, const char *want)
{
	cJSON *g = cJSON_Parse(got), *w = cJSON_Parse(want);
	cr_assert(w, "bad test JSON %s", want);
	cr_expect(g && cJSON_Compare(g, w, true), "arguments %s, want %s", got, want);
	cJSON_Delete(g);
	cJSON_Delete(w);
}

/* ---- released templates ---- */

static const struct {
	const char *file;
	enum tool_format format;
	bool string_args;	/* the template prints arguments given as a JSON string (else as an object) */
	const char *marker;	/* a call's start as the template writes it */
} tool_templates[] = {
	{ "qwen3.jinja", TOOL_FORMAT_HERMES, false, "<tool_call>" },
	{ "qwen3.5.jinja", TOOL_FORMAT_QWEN_XML, false, "<tool_call>" },
	{ "deepseek-v3.jinja", TOOL_FORMAT_DEEPSEEK, true, "<｜tool▁call▁begin｜>" },
	{ "deepseek-v3.1.jinja", TOOL_FORMAT_DEEPSEEK, true, "<｜tool▁call▁begin｜>" },
	{ "deepseek-v3.2.jinja", TOOL_FORMAT_DSML, false, "<｜DSML｜invoke" },
	{ "deepseek-v4.jinja", TOOL_FORMAT_DSML, false, "<｜DSML｜invoke" },
	{ "glm-4.5-llama.cpp.jinja", TOOL_FORMAT_GLM, false, "<tool_call>" },
	{ "glm-4.6.jinja", TOOL_FORMAT_GLM, false, "<tool_call>" },
	{ "glm-4.7.jinja", TOOL_FORMAT_GLM, false, "<tool_call>" },
	{ "glm-4.7-flash.jinja", TOOL_FORMAT_GLM, false, "<tool_call>" },
};

/* The messages [0, n) of msgs, a new array. */
static cJSON *first_messages(const cJSON *msgs, int n)
{
	cJSON *a = cJSON_Duplicate(msgs, true);
	while (cJSON_GetArraySize(a) > n)
		cJSON_DeleteItemFromArray(a, cJSON_GetArraySize(a) - 1);
	return a;
}

/* Checks the calls of p against an assistant message's tool_calls. */
static void expect_calls(const struct tool_call_parser *p, const cJSON *tool_calls, const char *what)
{
	cr_expect_eq(p->error, 0, "%s: %s", what, p->error_msg);
	cr_assert_eq(p->n_calls, (size_t)cJSON_GetArraySize(tool_calls), "%s: %zu calls, want %d; content [%s]", what,
		     p->n_calls, cJSON_GetArraySize(tool_calls), p->content.data);
	for (size_t i = 0; i < p->n_calls; i++) {
		const cJSON *fn = cJSON_GetObjectItem(cJSON_GetArrayItem(tool_calls, (int)i), "function");
		const cJSON *args = cJSON_GetObjectItem(fn, "arguments");
		cr_expect_str_eq(p->calls[i].name, cJSON_GetStringValue(cJSON_GetObjectItem(fn, "name")), "%s", what);
		char *want = cJSON_IsString(args) ? strdup(args->valuestring) : cJSON_PrintUnformatted(args);
		expect_json(p->calls[i].arguments, want);
		free(want);
	}
}

Test(tool_calls, released_templates)
{
	cJSON *root = chat_fixture_expected();
	const cJSON *convs = cJSON_GetObjectItem(root, "conversations"), *tools = cJSON_GetObjectItem(root, "tools");
	time_t now = (time_t)cJSON_GetObjectItem(root, "now")->valuedouble;
	size_t total = 0;
	for (size_t t = 0; t < sizeof tool_templates / sizeof tool_templates[0]; t++) {
		const cJSON *tj = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "templates"), tool_templates[t].file);
		cr_assert(tj, "%s", tool_templates[t].file);
		char *tmpl = chat_fixture_template(tool_templates[t].file), err[512];
		cr_expect_eq(tool_format_detect(tmpl, NULL), tool_templates[t].format, "%s detected as %s",
			     tool_templates[t].file, tool_format_name(tool_format_detect(tmpl, NULL)));
		struct chat_template ct;
		cr_assert_eq(chat_template_init(&ct, tmpl, NULL, cJSON_GetStringValue(cJSON_GetObjectItem(tj, "bos_token")),
						cJSON_GetStringValue(cJSON_GetObjectItem(tj, "eos_token")), err, sizeof err),
			     0, "%s: %s", tool_templates[t].file, err);
		size_t checked = 0;
		const cJSON *conv;
		cJSON_ArrayForEach(conv, convs) {
			const cJSON *msgs = cJSON_GetObjectItem(conv, "messages");
			for (int k = 0; k < cJSON_GetArraySize(msgs); k++) {
				const cJSON *m = cJSON_GetArrayItem(msgs, k);
				const cJSON *tc = cJSON_GetObjectItem(m, "tool_calls");
				if (cJSON_GetArraySize(tc) == 0)
					continue;
				bool string_args = cJSON_IsString(cJSON_GetObjectItem(
					cJSON_GetObjectItem(cJSON_GetArrayItem(tc, 0), "function"), "arguments"));
				if (string_args != tool_templates[t].string_args)
					continue;
				cJSON *before = first_messages(msgs, k), *upto = first_messages(msgs, k + 1);
				struct chat_options gen = { .add_generation_prompt = true, .now = now };
				struct chat_options nogen = { .now = now };
				char *a = NULL, *b = NULL;
				size_t an = 0, bn = 0;
				int ra = chat_template_render_json(&ct, before, tools, &gen, &a, &an, err, sizeof err);
				int rb = chat_template_render_json(&ct, upto, tools, &nogen, &b, &bn, err, sizeof err);
				if (ra == 0 && rb == 0) {
					size_t lcp = 0;
					while (lcp < an && lcp < bn && a[lcp] == b[lcp])
						lcp++;
					const char *turn = b + lcp;
					/* a template that leaves the calls out (DeepSeek-V3 beside content) has nothing to read */
					if (strstr(turn, tool_templates[t].marker)) {
						char what[256];
						snprintf(what, sizeof what, "%s, %s, message %d", tool_templates[t].file,
							 cJSON_GetStringValue(cJSON_GetObjectItem(conv, "name")), k);
						struct tool_call_parser p;
						parse_all_ways(&p, tool_templates[t].format, tools, turn, strlen(turn));
						expect_calls(&p, tc, what);
						cr_expect(!strstr(p.content.data, tool_templates[t].marker), "%s: content [%s]",
							  what, p.content.data);
						const char *c = cJSON_GetStringValue(cJSON_GetObjectItem(m, "content"));
						const char *after_think = c && strstr(c, "</think>") ? strstr(c, "</think>") + 8 : c;
						if (after_think) {
							char *want = strdup(after_think), *w = want;
							while (*w == '\n')
								w++;
							cr_expect(strstr(p.content.data, w), "%s: content [%s] lacks [%s]", what,
								  p.content.data, w);
							free(want);
						}
						tool_call_parser_free(&p);
						checked++;
					}
				}
				free(a);
				free(b);
				cJSON_Delete(before);
				cJSON_Delete(upto);
			}
		}
		cr_expect(checked > 0, "%s: no rendered tool call was read back", tool_templates[t].file);
		fprintf(stderr, "tool calls: %s (%s): %zu turns\n", tool_templates[t].file,
			tool_format_name(tool_templates[t].format), checked);
		total += checked;
		chat_template_free(&ct);
		free(tmpl);
	}
	fprintf(stderr, "tool calls: %zu rendered assistant turns read back\n", total);
	cJSON_Delete(root);
}

Test(tool_calls, formats_without_tools)
{
	static const char *const none[] = { "mixtral.jinja", "mixtral-v0.1-original.jinja", "olmoe.jinja", "tulu3.jinja",
					    "qwen1.5-moe.jinja" };
	for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
		char *t = chat_fixture_template(none[i]);
		cr_expect_eq(tool_format_detect(t, NULL), TOOL_FORMAT_NONE, "%s", none[i]);
		free(t);
	}
	static const struct {
		const char *type;
		enum tool_format f;
	} types[] = {
		{ "qwen3_moe", TOOL_FORMAT_HERMES }, { "qwen3_next", TOOL_FORMAT_HERMES },
		{ "qwen3_5_moe", TOOL_FORMAT_QWEN_XML }, { "glm4_moe", TOOL_FORMAT_GLM },
		{ "glm_moe_dsa", TOOL_FORMAT_GLM }, { "deepseek_v3", TOOL_FORMAT_DEEPSEEK },
		{ "deepseek_v32", TOOL_FORMAT_DSML }, { "deepseek_v4", TOOL_FORMAT_DSML },
		{ "mixtral", TOOL_FORMAT_NONE }, { "olmoe", TOOL_FORMAT_NONE }, { "qwen2_moe", TOOL_FORMAT_NONE },
	};
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		cr_expect_eq(tool_format_detect(NULL, types[i].type), types[i].f, "%s", types[i].type);
	cr_expect_eq(tool_format_detect(NULL, NULL), TOOL_FORMAT_NONE);

	/* with no tool format, markup is content */
	struct tool_call_parser p;
	const char *s = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
	parse_all_ways(&p, TOOL_FORMAT_NONE, NULL, s, strlen(s));
	cr_expect_str_eq(p.content.data, s);
	cr_expect_eq(p.n_calls, 0);
	tool_call_parser_free(&p);
}

/* ---- hand-written outputs ---- */

static const char tools_json[] =
	"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
	"{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},\"o\":{\"type\":[\"string\",\"null\"]}}}}}]";

struct want_call {
	const char *name, *args;
};

static void expect_parse(enum tool_format f, bool with_tools, const char *text, const char *content, int error,
			 const struct want_call *calls, size_t n)
{
	cJSON *tools = with_tools ? cJSON_Parse(tools_json) : NULL;
	struct tool_call_parser p;
	parse_all_ways(&p, f, tools, text, strlen(text));
	cr_expect_str_eq(p.content.data, content, "%s: [%s] gives content [%s]", tool_format_name(f), text, p.content.data);
	cr_expect_eq(p.error, error, "%s: [%s]: %s", tool_format_name(f), text, p.error_msg);
	cr_assert_eq(p.n_calls, n, "%s: [%s]", tool_format_name(f), text);
	for (size_t i = 0; i < n; i++) {
		cr_expect_str_eq(p.calls[i].name, calls[i].name);
		expect_json(p.calls[i].arguments, calls[i].args);
	}
	tool_call_parser_free(&p);
	cJSON_Delete(tools);
}

#define CALLS(...) ((const struct want_call[]){ __VA_ARGS__ }), sizeof((const struct want_call[]){ __VA_ARGS__ }) / sizeof(struct want_call)
#define NO_CALLS NULL, 0

Test(tool_calls, content_around_calls)
{
	expect_parse(TOOL_FORMAT_HERMES, false,
		     "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n"
		     "<tool_call>\n{\"name\": \"g\", \"arguments\": \"{\\\"b\\\": [true]}\"}\n</tool_call>\nDone, Zürich.\n",
		     "Let me look.Done, Zürich.\n", 0, CALLS({ "f", "{\"a\":1}" }, { "g", "{\"b\":[true]}" }));
	expect_parse(TOOL_FORMAT_HERMES, false, "<tool_call>{\"name\": \"f\"}</tool_call>", "", 0, CALLS({ "f", "{}" }));
	expect_parse(TOOL_FORMAT_QWEN_XML, true,
		     "Sure.\n\n<tool_call>\n<function=f>\n<parameter=s>\n123\n</parameter>\n<parameter=n>\n7\n"
		     "</parameter>\n<parameter=x>\nline 1\nline 2\n</parameter>\n<parameter=b>\nFalse\n</parameter>\n"
		     "</function>\n</tool_call>",
		     "Sure.", 0, CALLS({ "f", "{\"s\":\"123\",\"n\":7,\"x\":\"line 1\\nline 2\",\"b\":false}" }));
	expect_parse(TOOL_FORMAT_GLM, false,
		     "<think></think>\nOK\n<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>东京 \"x\"</arg_value>\n"
		     "<arg_key>n</arg_key>\n<arg_value>{\"k\": null}</arg_value>\n</tool_call><tool_call>g</tool_call>",
		     "<think></think>\nOK", 0, CALLS({ "f", "{\"s\":\"东京 \\\"x\\\"\",\"n\":{\"k\":null}}" }, { "g", "{}" }));
	expect_parse(TOOL_FORMAT_DEEPSEEK, false,
		     "Hi<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n```"
		     "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>g<｜tool▁sep｜>{\"b\": \"c\"}<｜tool▁call▁end｜>"
		     "<｜tool▁calls▁end｜> bye",
		     "Hibye", 0, CALLS({ "f", "{\"a\":1}" }, { "g", "{\"b\":\"c\"}" }));
	expect_parse(TOOL_FORMAT_DSML, true,
		     "x\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"s\" string=\"false\">1"
		     "</｜DSML｜parameter>\n<｜DSML｜parameter name=\"n\" string=\"true\">2</｜DSML｜parameter>\n"
		     "<｜DSML｜parameter name=\"o\">None</｜DSML｜parameter>\n<｜DSML｜parameter name=\"z\" string=\"false\">"
		     "not json</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
		     "x", 0, CALLS({ "f", "{\"s\":\"1\",\"n\":\"2\",\"o\":\"None\",\"z\":\"not json\"}" }));
	/* without a schema the same values are read as JSON */
	expect_parse(TOOL_FORMAT_DSML, false,
		     "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"s\" string=\"false\">1"
		     "</｜DSML｜parameter>\n<｜DSML｜parameter name=\"o\">None</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
		     "</｜DSML｜function_calls>",
		     "", 0, CALLS({ "f", "{\"s\":1,\"o\":null}" }));
}

Test(tool_calls, no_calls)
{
	static const enum tool_format all[] = { TOOL_FORMAT_HERMES, TOOL_FORMAT_QWEN_XML, TOOL_FORMAT_GLM,
						TOOL_FORMAT_DEEPSEEK, TOOL_FORMAT_DSML };
	static const char *const texts[] = {
		"",
		"Plain answer.\n\n",
		"  indented\n\tand 東京 🌂\n",
		"a < b and c <tool_ d",
		"ends with a marker's start: <tool_call",
		"ends with <｜tool▁call",
		"ends with <｜DSML｜inv",
		"<tool_c",
	};
	for (size_t f = 0; f < sizeof all / sizeof all[0]; f++)
		for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
			expect_parse(all[f], false, texts[i], texts[i], 0, NO_CALLS);
}

Test(tool_calls, truncated_and_malformed)
{
	/* cut off by max_tokens: all text is content, the error says so */
	static const struct {
		enum tool_format f;
		const char *text;
	} cut[] = {
		{ TOOL_FORMAT_HERMES, "Sure.\n<tool_call>\n{\"name\": \"f\", \"argu" },
		{ TOOL_FORMAT_HERMES, "use <tool_call> tags" },
		{ TOOL_FORMAT_QWEN_XML, "<tool_call>\n<function=f>\n<parameter=s>\nab" },
		{ TOOL_FORMAT_GLM, "<tool_call>f<arg_key>s</arg_key><arg_val" },
		{ TOOL_FORMAT_DEEPSEEK, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\"" },
		{ TOOL_FORMAT_DEEPSEEK, "<｜tool▁calls▁begin｜>" },
		{ TOOL_FORMAT_DSML, "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜para" },
		/* malformed but closed */
		{ TOOL_FORMAT_HERMES, "a\n<tool_call>\n{bad json}\n</tool_call>\nb" },
		{ TOOL_FORMAT_HERMES, "<tool_call>[1, 2]</tool_call>" },
		{ TOOL_FORMAT_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>" },
		{ TOOL_FORMAT_QWEN_XML, "<tool_call>\n<parameter=s>\n1\n</parameter>\n</tool_call>" },
		{ TOOL_FORMAT_QWEN_XML, "<tool_call>\n<function=f>\n</function>\nextra\n</tool_call>" },
		{ TOOL_FORMAT_GLM, "<tool_call>f<arg_key>k</arg_key>v</tool_call>" },
		{ TOOL_FORMAT_GLM, "<tool_call>\n</tool_call>" },
		{ TOOL_FORMAT_DEEPSEEK, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\":1}<｜tool▁call▁end｜>" },
		{ TOOL_FORMAT_DEEPSEEK, "<｜tool▁call▁begin｜>f{}<｜tool▁call▁end｜>" },
		{ TOOL_FORMAT_DSML, "<｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"s\" string=\"maybe\">1"
				    "</｜DSML｜parameter></｜DSML｜invoke>" },
		{ TOOL_FORMAT_DSML, "<｜DSML｜function_calls>stray text" },
	};
	for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++)
		expect_parse(cut[i].f, false, cut[i].text, cut[i].text, -EBADMSG, NO_CALLS);

	/* a bad call between good ones: the good ones are kept, the bad one is content */
	expect_parse(TOOL_FORMAT_HERMES, false,
		     "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n<tool_call>oops</tool_call>\n"
		     "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>",
		     "<tool_call>oops</tool_call>", -EBADMSG, CALLS({ "f", "{}" }, { "g", "{}" }));
	/* DeepSeek-V3's template leaves the block open after its calls: not an error */
	expect_parse(TOOL_FORMAT_DEEPSEEK, false,
		     "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜>\n", "", 0,
		     CALLS({ "f", "{}" }));
}

static int stop_cb(void *ctx, const struct tool_call_event *ev)
{
	(void)ev;
	return ++*(int *)ctx >= 2 ? -ECANCELED : 0;
}

Test(tool_calls, callback_stops)
{
	int n = 0;
	struct tool_call_parser p;
	tool_call_parser_init(&p, TOOL_FORMAT_HERMES, NULL, stop_cb, &n);
	const char *s = "hi <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
	cr_expect_eq(tool_call_parser_feed(&p, s, strlen(s)), -ECANCELED);
	cr_expect_eq(tool_call_parser_feed(&p, "x", 1), -ECANCELED);
	cr_expect_eq(tool_call_parser_finish(&p), -ECANCELED);
	tool_call_parser_free(&p);
}

/* Random bytes and random sequences of marker fragments: no crash, the stream invariants hold. */
Test(tool_calls, hostile_input)
{
	static const char *const parts[] = {
		"<tool_call>", "</tool_call>", "<function=", "<parameter=", "</parameter>", "</function>", "<arg_key>",
		"</arg_key>", "<arg_value>", "</arg_value>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
		"<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "```json\n", "```", "<｜DSML｜tool_calls>",
		"<｜DSML｜invoke", " name=\"", "\">", "<｜DSML｜parameter", " string=\"true\"", "</｜DSML｜parameter>",
		"</｜DSML｜invoke>", "</｜DSML｜function_calls>", "{\"name\": \"f\", \"arguments\": {", "}", "\"", "\n",
		"{\"tool_call\": ", "{\"tool_calls\": [", "]", ", ", "{\"response\": ",
		" ", "f", "1", "True", "[", "東", "\xe4\xba", "\xff", "<", "<｜",
	};
	static const enum tool_format all[] = { TOOL_FORMAT_NONE, TOOL_FORMAT_HERMES, TOOL_FORMAT_QWEN_XML,
						TOOL_FORMAT_GLM, TOOL_FORMAT_DEEPSEEK, TOOL_FORMAT_DSML,
						TOOL_FORMAT_GENERIC };
	cJSON *tools = cJSON_Parse(tools_json);
	unsigned seed = 18;
	char text[4096];
	for (int round = 0; round < 300; round++) {
		size_t len = 0;
		if (round % 3 == 0) {
			len = (size_t)(rand_r(&seed) % 512);
			for (size_t i = 0; i < len; i++)
				text[i] = (char)rand_r(&seed);
		} else {
			while (len < 3000) {
				const char *s = parts[rand_r(&seed) % (sizeof parts / sizeof parts[0])];
				memcpy(text + len, s, strlen(s));
				len += strlen(s);
				if (rand_r(&seed) % 40 == 0)
					break;
			}
		}
		for (size_t f = 0; f < sizeof all / sizeof all[0]; f++) {
			struct tool_call_parser p;
			parse(&p, all[f], tools, text, len, 0, false);
			size_t whole = p.content.len, n_calls = p.n_calls;
			tool_call_parser_free(&p);
			parse(&p, all[f], tools, text, len, 1 + (unsigned)round, false);
			cr_assert_eq(p.content.len, whole, "round %d, %s: chunking changed the content", round,
				     tool_format_name(all[f]));
			cr_assert_eq(p.n_calls, n_calls);
			tool_call_parser_free(&p);
		}
	}
	cJSON_Delete(tools);
}

/* ---- the generic format ---- */

Test(tool_calls, generic_answers)
{
	const enum tool_format g = TOOL_FORMAT_GENERIC;
	expect_parse(g, false, "{\"tool_call\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}", "", 0,
		     CALLS({ "f", "{\"a\":1}" }));
	/* blanks before, text after, arguments as JSON text or left out */
	expect_parse(g, true, "\n {\"tool_call\":{\"name\":\"f\",\"arguments\":\"{\\\"s\\\": \\\"x\\\"}\"}}\n\nDone, Zürich.",
		     "Done, Zürich.", 0, CALLS({ "f", "{\"s\":\"x\"}" }));
	expect_parse(g, false, "{\"tool_call\": {\"name\": \"f\"}}", "", 0, CALLS({ "f", "{}" }));
	expect_parse(g, false,
		     "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}, {\"type\": \"function\", \"function\": "
		     "{\"name\": \"g\", \"arguments\": {\"b\": [true]}}}]}",
		     "", 0, CALLS({ "f", "{}" }, { "g", "{\"b\":[true]}" }));
	/* a response is its text; any other answer is content as written */
	expect_parse(g, false, "{\"response\": \"Hello, \\u6771\\u4eac.\\n\"}", "Hello, 東京.\n", 0, NO_CALLS);
	expect_parse(g, false, "{\"response\": {\"x\": 1}}", "{\"x\":1}", 0, NO_CALLS);
	static const char *const plain[] = {
		"",
		"  \n",
		"Plain answer, 東京 🌂\n",
		"Let me call {\"tool_call\": {\"name\": \"f\", \"arguments\": {}}}",
		"{\"answer\": 42}",
		"{braces} in text",
		"{\"response\": \"x\"} and more",
	};
	for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
		expect_parse(g, false, plain[i], plain[i], 0, NO_CALLS);
	/* a call that is malformed or cut off is content too, with the error set */
	static const char *const bad[] = {
		"{\"tool_call\": {\"name\": \"f\", \"argu",
		"{\"tool_call\": {\"arguments\": {}}}",
		"{\"tool_call\": {\"name\": \"f\", \"arguments\": 3}}",
		"{\"tool_call\": {\"name\": \"f\", \"arguments\": \"not json\"}}",
		"{\"tool_call\": \"f\"}",
		"{\"tool_calls\": []}",
		"{\"tool_calls\": {\"name\": \"f\"}}",
		"{\"tool_calls\": [{\"name\": \"f\"}, {\"nom\": \"g\"}]}",
		"{\"tool_call\": {\"name\": \"<f>\", \"arguments\": {}}}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		expect_parse(g, false, bad[i], bad[i], -EBADMSG, NO_CALLS);
}

Test(tool_calls, generic_prompt_and_history)
{
	cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
				   "\"Weather of a city.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
				   "{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
				   "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]");
	char *prompt = tool_generic_prompt(tools);
	cr_assert(prompt);
	/* each tool on a line of its own, as JSON with its schema */
	cr_expect(strstr(prompt, "\n{\"name\":\"get_weather\",\"description\":\"Weather of a city.\",\"parameters\":"
				 "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}\n"),
		  "%s", prompt);
	cr_expect(strstr(prompt, "\n{\"name\":\"now\"}\n"), "%s", prompt);
	cr_expect(strstr(prompt, "{\"tool_call\": {\"name\": ") && strstr(prompt, "{\"tool_calls\": [{\"name\": "), "%s",
		  prompt);
	free(prompt);
	cJSON_Delete(tools);

	/* an assistant's calls, as OpenAI's API sends them, written as the answer the prompt asks for */
	cJSON *one = cJSON_Parse("[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
				 "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]");
	char *t = tool_generic_calls_text(one);
	cr_assert(t);
	cr_expect_str_eq(t, "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}}");
	expect_parse(TOOL_FORMAT_GENERIC, false, t, "", 0, CALLS({ "get_weather", "{\"city\":\"Paris\"}" }));
	free(t);
	cJSON *two = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"now\",\"arguments\":\"{}\"}},"
				 "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"東京\"}}}]");
	t = tool_generic_calls_text(two);
	cr_assert(t);
	cr_expect(!strncmp(t, "{\"tool_calls\": [", 16), "%s", t);
	expect_parse(TOOL_FORMAT_GENERIC, false, t, "", 0, CALLS({ "now", "{}" }, { "get_weather", "{\"city\":\"東京\"}" }));
	free(t);
	cJSON *none = cJSON_Parse("[]"), *nameless = cJSON_Parse("[{\"function\":{\"arguments\":\"{}\"}}]");
	cr_expect_null(tool_generic_calls_text(none));
	cr_expect_null(tool_generic_calls_text(nameless));
	cJSON_Delete(one);
	cJSON_Delete(two);
	cJSON_Delete(none);
	cJSON_Delete(nameless);
}
