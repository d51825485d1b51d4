/*
 * test_serve_tools — structured output and tool calls in `colibri serve`,
 * on tiny models with random weights, so that the grammar is what makes
 * the output valid:
 *  - response_format json_object: every finished answer parses as a JSON
 *    object; json_schema: every answer validates against the schema (a
 *    validator for the one schema used, written here), and the streamed
 *    deltas concatenate to the non-streamed answer;
 *  - tool_choice "required" and a named function on every family with a
 *    tool format in its template (tests/family_model.h): the answer is a
 *    tool_calls message whose arguments parse and match the parameters'
 *    types and ranges, finish_reason "tool_calls", streamed as
 *    delta.tool_calls whose pieces concatenate to the same call;
 *  - the generic tool format on the default model, whose template renders
 *    no tools: the tools reach the prompt as the generic system prompt,
 *    a history's calls as generic answers, the log says so once, and
 *    forced calls of schemas without additionalProperties end as
 *    tool_calls within a bounded max_tokens;
 *  - what is refused with a 400 naming the field: a schema that does not
 *    convert, a strict schema with keywords the grammar cannot enforce, an
 *    unknown response_format type, a tool_choice naming no tool or forcing
 *    a call without tools, and schemas or tools whose grammar is wider than
 *    the matcher's stacks or larger than a request may compile.
 */
#include "base/strbuf.h"
#include "engine/serve/serve_constraint.h"
#include "engine/text/tool_calls.h"
#include "tests/serve_util.h"

#define SCHEMA                                                                                                  \
	"{\"type\":\"object\",\"properties\":{"                                                                  \
	"\"name\":{\"type\":\"string\",\"maxLength\":6},"                                                        \
	"\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"                                          \
	"\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\"]},\"maxItems\":3},"                 \
	"\"ok\":{\"type\":\"boolean\"}},"                                                                        \
	"\"required\":[\"name\",\"age\",\"tags\",\"ok\"],\"additionalProperties\":false}"

/* The validator of SCHEMA: every member present, of its type and range, no other. */
static void expect_schema(const char *text, const char *what)
{
	cJSON *j = cJSON_Parse(text);
	cr_assert(cJSON_IsObject(j), "%s: not a JSON object: %s", what, text);
	const cJSON *name = at(j, "name"), *age = at(j, "age"), *tags = at(j, "tags"), *ok = at(j, "ok");
	cr_expect(cJSON_IsString(name) && strlen(name->valuestring) <= 6 * 4, "%s: name: %s", what, text);
	cr_expect(cJSON_IsNumber(age) && age->valuedouble == (double)(int)age->valuedouble && age->valuedouble >= 0 &&
			  age->valuedouble <= 120,
		  "%s: age: %s", what, text);
	cr_expect(cJSON_IsArray(tags) && cJSON_GetArraySize(tags) <= 3, "%s: tags: %s", what, text);
	const cJSON *t;
	cJSON_ArrayForEach(t, tags)
		cr_expect(cJSON_IsString(t) && (!strcmp(t->valuestring, "red") || !strcmp(t->valuestring, "green")),
			  "%s: a tag: %s", what, text);
	cr_expect(cJSON_IsBool(ok), "%s: ok: %s", what, text);
	cr_expect_eq(cJSON_GetArraySize(j), 4, "%s: other members: %s", what, text);
	cJSON_Delete(j);
}

/* Content and finish_reason of a streamed chat answer, concatenated. */
static char *stream_content(const struct srv *s, const char *body, char *finish, size_t n)
{
	char *resp = NULL;
	cr_assert_eq(http(s, "POST", "/v1/chat/completions", body, NULL, &resp), 200, "%s", resp ? resp : "");
	cJSON *ev = sse_events(resp);
	struct strbuf b = { 0 };
	strbuf_put(&b, "", 0);
	const cJSON *e;
	cJSON_ArrayForEach(e, ev) {
		const cJSON *c = at(e, "choices.0.delta.content"), *f = at(e, "choices.0.finish_reason");
		if (cJSON_IsString(c))
			strbuf_put(&b, c->valuestring, strlen(c->valuestring));
		if (cJSON_IsString(f))
			snprintf(finish, n, "%s", f->valuestring);
	}
	cJSON_Delete(ev);
	free(resp);
	return b.p;
}

Test(serve, json_object_and_schema_always_parse)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	int stopped = 0;
	/* One seed under the sanitizers: each request masks up to 200 steps
	 * over the 151k-token vocabulary (21 s for two seeds there); the masks'
	 * memory is the same at every seed. */
	for (int seed = 1; seed <= (TU_SANITIZED ? 1 : 6); seed++) {
		char body[2048];
		snprintf(body, sizeof body,
			 "{\"messages\":[{\"role\":\"user\",\"content\":\"Give JSON\"}],\"max_tokens\":120,"
			 "\"temperature\":1,\"seed\":%d,\"response_format\":{\"type\":\"json_object\"}}",
			 seed);
		cJSON *j = http_json(&s, "POST", "/v1/chat/completions", body, 200);
		const char *text = str_at(j, "choices.0.message.content"), *fin = str_at(j, "choices.0.finish_reason");
		if (!strcmp(fin, "stop")) {
			cJSON *o = cJSON_Parse(text);
			cr_expect(cJSON_IsObject(o), "json_object seed %d: %s", seed, text);
			cJSON_Delete(o);
			stopped++;
		}
		cJSON_Delete(j);
		/* The schema: bounded, so it always finishes. */
		snprintf(body, sizeof body,
			 "{\"messages\":[{\"role\":\"user\",\"content\":\"Give JSON\"}],\"max_tokens\":200,"
			 "\"temperature\":1,\"seed\":%d,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
			 "{\"name\":\"person\",\"strict\":true,\"schema\":" SCHEMA "}}%s}",
			 seed, "");
		j = http_json(&s, "POST", "/v1/chat/completions", body, 200);
		char what[32];
		snprintf(what, sizeof what, "schema seed %d", seed);
		cr_expect_str_eq(str_at(j, "choices.0.finish_reason"), "stop", "%s", what);
		char *whole = strdup(str_at(j, "choices.0.message.content"));
		expect_schema(whole, what);
		cJSON_Delete(j);
		/* Streamed: the same text. */
		body[strlen(body) - 1] = 0;
		strcat(body, ",\"stream\":true}");
		char fin2[32] = "";
		char *streamed = stream_content(&s, body, fin2, sizeof fin2);
		cr_expect_str_eq(streamed, whole, "%s streamed", what);
		cr_expect_str_eq(fin2, "stop");
		free(streamed);
		free(whole);
	}
	cr_expect_gt(stopped, 0, "no json_object answer finished within max_tokens");
	cr_expect_eq(srv_stop(&s), 0);
}

/* Expects a 400 naming param whose message names limit. */
static void expect_limit(const struct srv *s, const char *body, const char *param, const char *limit)
{
	char *resp = NULL;
	int st = http(s, "POST", "/v1/chat/completions", body, NULL, &resp);
	cJSON *j = cJSON_Parse(resp ? resp : "");
	const cJSON *p = at(j, "error.param"), *msg = at(j, "error.message");
	cr_expect(st == 400 && cJSON_IsString(p) && !strcmp(p->valuestring, param), "%d, param %s expected: %s", st,
		  param, resp ? resp : "");
	cr_expect(cJSON_IsString(msg) && strstr(msg->valuestring, limit), "the limit %s is not named: %s", limit,
		  resp ? resp : "");
	cJSON_Delete(j);
	free(resp);
}

/* Issue 40, defect 1: grammars wider than the matcher's stacks (a pattern
 * of 5,000 alternatives, 4,100 optional properties, a forced call of a
 * function with 4,100 optional parameters) are refused at admission with
 * a 400 naming the field and the limit; they were admitted and ended in
 * 500 grammar_dead_end where the output fanned out. */
static void wide_refusals(const struct srv *s, const char *m)
{
	struct strbuf b = { 0 };
	strbuf_printf(&b, "{%s,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
		      "\"schema\":{\"type\":\"string\",\"pattern\":\"^(", m);
	for (int i = 0; i < 5000; i++)
		strbuf_printf(&b, "%sa%d", i ? "|" : "", i);
	strbuf_printf(&b, ")$\"}}}}");
	expect_limit(s, b.p, "response_format.json_schema", "4096");
	strbuf_free(&b);
	struct strbuf props = { 0 };
	for (int i = 0; i < 4100; i++)
		strbuf_printf(&props, "%s\"p%d\":{\"type\":\"integer\"}", i ? "," : "", i);
	strbuf_printf(&b, "{%s,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
		      "\"schema\":{\"type\":\"object\",\"properties\":{%s}}}}}", m, props.p);
	expect_limit(s, b.p, "response_format.json_schema", "2048");
	strbuf_free(&b);
	strbuf_free(&props);
}

/* The same for a forced call of a function with 4,100 optional parameters,
 * in a JSON and an XML call format. In process: the tools' text in the
 * prompt would overflow the test server's context before the grammar is
 * built, which is what a server with a large context does. */
Test(serve, wide_tool_grammar_refused)
{
	struct strbuf tools = { 0 };
	strbuf_printf(&tools, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
		      "{\"type\":\"object\",\"properties\":{");
	for (int i = 0; i < 4100; i++)
		strbuf_printf(&tools, "%s\"p%d\":{\"type\":\"integer\"}", i ? "," : "", i);
	strbuf_printf(&tools, "}}}}]");
	struct serve_request r = { .tools_json = tools.p, .tool_choice = SERVE_TOOLS_REQUIRED };
	const enum tool_format f[2] = { TOOL_FORMAT_HERMES, TOOL_FORMAT_QWEN_XML };
	for (int i = 0; i < 2; i++) {
		struct serve_constraint c;
		struct serve_error e = { 0 };
		double t0 = now_s();
		int rc = serve_constraint_build(&c, &r, f[i], false, NULL, NULL, NULL, 0, 0, &e);
		double dt = now_s() - t0;
		serve_constraint_free(&c);
		cr_expect(rc != 0 && e.status == 400 && !strcmp(e.param, "tool_choice"), "format %d: rc %d, %d %s: %s", i,
			  rc, e.status, e.param, e.message);
		cr_expect(strstr(e.message, "4096"), "format %d: the limit is not named: %s", i, e.message);
		cr_expect_lt(dt, 0.5, "format %d: refused after %.3f s", i, dt);
	}
	strbuf_free(&tools);
}

Test(serve, constraint_refusals)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":4";
	char body[2048];
	snprintf(body, sizeof body,
		 "{%s,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":"
		 "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/nope\"}}}}}}",
		 m);
	expect_error(&s, "POST", "/v1/chat/completions", body, NULL, 400, "response_format.json_schema");
	snprintf(body, sizeof body,
		 "{%s,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,"
		 "\"schema\":{\"type\":\"object\",\"frobnicate\":1}}}}",
		 m);
	expect_error(&s, "POST", "/v1/chat/completions", body, NULL, 400, "response_format.json_schema");
	/* Not strict: accepted, the warning in a header. */
	snprintf(body, sizeof body,
		 "{%s,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
		 "\"schema\":{\"type\":\"object\",\"frobnicate\":1}}}}",
		 m);
	char hdr[PATH_MAX + 16], extra[PATH_MAX + 32];
	snprintf(hdr, sizeof hdr, "%s/headers", ws);
	snprintf(extra, sizeof extra, "-D '%s'", hdr);
	cr_expect_eq(http(&s, "POST", "/v1/chat/completions", body, extra, NULL), 200);
	char *resp = tu_read(hdr, NULL);
	cr_expect(resp && strcasestr(resp, "X-Colibri-Warning:") && strstr(resp, "frobnicate"), "%s", resp ? resp : "");
	free(resp);
	snprintf(body, sizeof body, "{%s,\"response_format\":{\"type\":\"xml\"}}", m);
	expect_error(&s, "POST", "/v1/chat/completions", body, NULL, 400, "response_format.type");
	snprintf(body, sizeof body, "{%s,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}}", m);
	expect_error(&s, "POST", "/v1/chat/completions", body, NULL, 400, "response_format.json_schema.schema");
	snprintf(body, sizeof body, "{%s,\"tool_choice\":\"required\"}", m);
	expect_error(&s, "POST", "/v1/chat/completions", body, NULL, 400, "tool_choice");
	snprintf(body, sizeof body,
		 "{%s,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
		 "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}",
		 m);
	expect_error(&s, "POST", "/v1/chat/completions", body, NULL, 400, "tool_choice.function.name");
	snprintf(body, sizeof body, "{%s,\"tool_choice\":\"sometimes\"}", m);
	expect_error(&s, "POST", "/v1/chat/completions", body, NULL, 400, "tool_choice");
	wide_refusals(&s, m);
	cr_expect_eq(srv_stop(&s), 0);
}

/* Each with a description: the released gpt-oss template requires one
 * ("// " + tool.description fails in Jinja2 without it). */
#define TOOLS                                                                                                     \
	"[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather.\",\"parameters\":{\"type\":\"object\","      \
	"\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},\"days\":{\"type\":\"integer\","          \
	"\"minimum\":1,\"maximum\":7},\"metric\":{\"type\":\"boolean\"}},\"required\":[\"city\",\"days\"],"        \
	"\"additionalProperties\":false}}},"                                                                     \
	"{\"type\":\"function\",\"function\":{\"name\":\"add\",\"description\":\"Adds.\",\"parameters\":{\"type\":\"object\","               \
	"\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":999},\"b\":{\"type\":\"integer\","  \
	"\"minimum\":0,\"maximum\":999}},\"required\":[\"a\",\"b\"],\"additionalProperties\":false}}}]"

/* Checks a call's name and arguments against TOOLS. */
static void expect_call(const char *name, const char *args, const char *want_name, const char *what)
{
	if (want_name)
		cr_expect_str_eq(name, want_name, "%s", what);
	cJSON *a = cJSON_Parse(args);
	cr_assert(cJSON_IsObject(a), "%s: arguments are not a JSON object: %s", what, args);
	if (!strcmp(name, "get_weather")) {
		const cJSON *city = at(a, "city"), *days = at(a, "days"), *metric = at(a, "metric");
		cr_expect(cJSON_IsString(city), "%s: city: %s", what, args);
		cr_expect(cJSON_IsNumber(days) && days->valuedouble >= 1 && days->valuedouble <= 7, "%s: days: %s", what,
			  args);
		cr_expect(!metric || cJSON_IsBool(metric), "%s: metric: %s", what, args);
		cr_expect_leq(cJSON_GetArraySize(a), 3, "%s: %s", what, args);
	} else {
		cr_expect_str_eq(name, "add", "%s", what);
		const cJSON *x = at(a, "a"), *y = at(a, "b");
		cr_expect(cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble <= 999, "%s: a: %s", what, args);
		cr_expect(cJSON_IsNumber(y) && y->valuedouble >= 0 && y->valuedouble <= 999, "%s: b: %s", what, args);
		cr_expect_eq(cJSON_GetArraySize(a), 2, "%s: %s", what, args);
	}
	cJSON_Delete(a);
}

/* Forced calls on one family: required and named, plain and streamed. */
static void forced_calls(const char *family)
{
	const struct family_chat *fc = NULL;
	for (size_t i = 0; i < FAMILY_CHATS; i++)
		if (!strcmp(family_chats[i].family, family))
			fc = &family_chats[i];
	cr_assert(fc);
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/hf/%s", tu_fixtures(), family);
	if (access(p, F_OK) != 0)
		cr_skip_test("fixture %s is missing", p);
	char dir[PATH_MAX];
	family_model(ws, fc, dir, sizeof dir);
	struct srv s;
	srv_start_dir(&s, dir, "%s", "--ctx 4096"); /* the tiny tokenizer spells the tools' prompt in letters */
	static const char *const choices[] = { "\"required\"",
					       "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}" };
	for (int c = 0; c < 2; c++)
		for (int seed = 1; seed <= tu_reps(3); seed++) {
			char body[4096], what[96];
			snprintf(what, sizeof what, "%s %s seed %d", family, c ? "named" : "required", seed);
			snprintf(body, sizeof body,
				 "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"max_tokens\":700,"
				 "\"temperature\":1,\"seed\":%d,\"tools\":" TOOLS ",\"tool_choice\":%s}",
				 seed, choices[c]);
			cJSON *j = http_json(&s, "POST", "/v1/chat/completions", body, 200);
			char *printed = cJSON_PrintUnformatted(j);
			cr_expect_str_eq(str_at(j, "choices.0.finish_reason"), "tool_calls", "%s: %s", what, printed);
			const cJSON *calls = at(j, "choices.0.message.tool_calls");
			cr_assert(cJSON_IsArray(calls) && cJSON_GetArraySize(calls) == 1, "%s: %s", what, printed);
			cr_expect_str_eq(str_at(j, "choices.0.message.tool_calls.0.type"), "function", "%s", what);
			cr_expect_str_eq(str_at(j, "choices.0.message.tool_calls.0.id"), "call_0", "%s", what);
			const char *name = str_at(j, "choices.0.message.tool_calls.0.function.name");
			const char *args = str_at(j, "choices.0.message.tool_calls.0.function.arguments");
			expect_call(name, args, c ? "add" : NULL, what);
			/* Streamed: the deltas make the same call. */
			body[strlen(body) - 1] = 0;
			strcat(body, ",\"stream\":true}");
			char *resp = NULL;
			cr_assert_eq(http(&s, "POST", "/v1/chat/completions", body, NULL, &resp), 200);
			cJSON *ev = sse_events(resp);
			struct strbuf sa = { 0 }, sn = { 0 };
			strbuf_put(&sa, "", 0);
			strbuf_put(&sn, "", 0);
			const char *fin = "";
			const cJSON *e;
			cJSON_ArrayForEach(e, ev) {
				const cJSON *tc = at(e, "choices.0.delta.tool_calls.0"), *f = at(e, "choices.0.finish_reason");
				if (cJSON_IsString(f))
					fin = f->valuestring;
				if (!tc)
					continue;
				cr_expect_eq(num_at(tc, "index"), 0, "%s", what);
				const cJSON *n = at(tc, "function.name"), *a = at(tc, "function.arguments");
				if (cJSON_IsString(n))
					strbuf_put(&sn, n->valuestring, strlen(n->valuestring));
				if (cJSON_IsString(a))
					strbuf_put(&sa, a->valuestring, strlen(a->valuestring));
			}
			cr_expect_str_eq(fin, "tool_calls", "%s streamed", what);
			cr_expect_str_eq(sn.p, name, "%s streamed name", what);
			cr_expect_str_eq(sa.p, args, "%s streamed arguments", what);
			strbuf_free(&sa);
			strbuf_free(&sn);
			cJSON_Delete(ev);
			free(resp);
			free(printed);
			cJSON_Delete(j);
		}
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve, forced_tool_calls_qwen3) { forced_calls("qwen3_next"); }
Test(serve, forced_tool_calls_qwen3_5) { forced_calls("qwen3_5_moe"); }
/* DeepSeek-V3's template writes calls but lists no tools: the generic format. */
Test(serve, forced_tool_calls_deepseek_v3) { forced_calls("deepseek_v3"); }
Test(serve, forced_tool_calls_deepseek_v32) { forced_calls("deepseek_v32"); }
Test(serve, forced_tool_calls_deepseek_v4) { forced_calls("deepseek_v4"); }
Test(serve, forced_tool_calls_glm4_moe) { forced_calls("glm4_moe"); }
Test(serve, forced_tool_calls_glm_moe_dsa) { forced_calls("glm_moe_dsa"); }
/* harmony: a commentary message to functions.NAME, JSON, ended by <|call|>. */
Test(serve, forced_tool_calls_gpt_oss) { forced_calls("gpt_oss_mxfp4"); }

/* The tokens a schema forces (its keys, its punctuation) run in the step
 * of the sampled token before them: the same greedy answers as a server
 * that runs them one step each (--no-forced-batch), in fewer steps. */
Test(serve, forced_tokens_batched_same_answers)
{
	NEED_FIXTURE();
	struct srv a, b;
	srv_start(&a, "%s", "");
	srv_start(&b, "%s", "--no-forced-batch");
	double a0 = metric(&a, "colibri_steps_total"), b0 = metric(&b, "colibri_steps_total");
	for (int k = 0; k < tu_reps(3); k++) {
		char body[2048];
		snprintf(body, sizeof body,
			 "{\"messages\":[{\"role\":\"user\",\"content\":\"Person %d as JSON\"}],\"max_tokens\":200,"
			 "\"temperature\":0,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
			 "{\"name\":\"person\",\"strict\":true,\"schema\":" SCHEMA "}}}", k);
		cJSON *ja = http_json(&a, "POST", "/v1/chat/completions", body, 200);
		cJSON *jb = http_json(&b, "POST", "/v1/chat/completions", body, 200);
		cr_expect_str_eq(str_at(ja, "choices.0.message.content"), str_at(jb, "choices.0.message.content"),
				 "request %d: forced batching changed the answer", k);
		cr_expect_eq(num_at(ja, "usage.completion_tokens"), num_at(jb, "usage.completion_tokens"));
		cJSON_Delete(ja);
		cJSON_Delete(jb);
	}
	double sa = metric(&a, "colibri_steps_total") - a0, sb = metric(&b, "colibri_steps_total") - b0;
	cr_log_info("%d schema answers: %.0f steps with forced batching, %.0f without", tu_reps(3), sa, sb);
	cr_expect_lt(sa, sb, "forced batching saved no step (%.0f vs %.0f)", sa, sb);
	cr_expect_eq(srv_stop(&a), 0);
	cr_expect_eq(srv_stop(&b), 0);
}

/* A stop string inside the forced part of an answer ends the request there
 * (the slot is finished while its forced tokens are reported), and the
 * slots serve the next requests as usual. */
Test(serve, stop_string_inside_forced_tokens)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	for (int k = 0; k < tu_reps(6); k++) {
		char body[2048];
		snprintf(body, sizeof body,
			 "{\"messages\":[{\"role\":\"user\",\"content\":\"Person %d\"}],\"max_tokens\":200,"
			 "\"temperature\":0,\"stop\":[\"ag\"],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
			 "{\"name\":\"person\",\"strict\":true,\"schema\":" SCHEMA "}}}", k);
		cJSON *j = http_json(&s, "POST", "/v1/chat/completions", body, 200);
		const char *text = str_at(j, "choices.0.message.content");
		cr_expect_str_eq(str_at(j, "choices.0.finish_reason"), "stop", "request %d: %s", k, text);
		cr_expect(!strstr(text, "ag") && strstr(text, "\"name\""), "request %d: %s", k, text);
		cJSON_Delete(j);
		/* Then a whole answer from the same slots. */
		snprintf(body, sizeof body,
			 "{\"messages\":[{\"role\":\"user\",\"content\":\"Person %d\"}],\"max_tokens\":200,"
			 "\"temperature\":0,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
			 "{\"name\":\"person\",\"strict\":true,\"schema\":" SCHEMA "}}}", k);
		j = http_json(&s, "POST", "/v1/chat/completions", body, 200);
		cr_expect_str_eq(str_at(j, "choices.0.finish_reason"), "stop");
		expect_schema(str_at(j, "choices.0.message.content"), "after a stop string");
		cJSON_Delete(j);
	}
	/* Every request answered, nothing decodes on: no step runs while idle. */
	double s0 = metric(&s, "colibri_steps_total");
	struct timespec ts = { 1, 500 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	double s1 = metric(&s, "colibri_steps_total");
	cr_expect_eq(s1, s0, "%.0f steps ran on an idle server: a finished slot went on decoding", s1 - s0);
	cr_expect_eq(metric(&s, "colibri_active_slots"), 0);
	cr_expect_eq(srv_stop(&s), 0);
}

/* ---- the generic tool format, on the default model ---- */

/* Enough for any call of TOOLS_OPEN on the default model: the longest is
 * about 130 bytes (a 12-character city, every member, a newline and a
 * blank in each gap) and its tokenizer spends at most a token on each
 * (97 tokens at most measured over these seeds). */
#define GENERIC_CALL_TOKENS_MAX 160

/* TOOLS without additionalProperties: a forced call must still end. */
#define TOOLS_OPEN                                                                                                \
	"[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather.\",\"parameters\":"   \
	"{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},\"days\":{\"type\":"      \
	"\"integer\",\"minimum\":1,\"maximum\":7},\"metric\":{\"type\":\"boolean\"}},\"required\":[\"city\",\"days\"]}}}," \
	"{\"type\":\"function\",\"function\":{\"name\":\"add\",\"description\":\"Adds.\",\"parameters\":{\"type\":"     \
	"\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":999},\"b\":{\"type\":"        \
	"\"integer\",\"minimum\":0,\"maximum\":999}},\"required\":[\"a\",\"b\"]}}}]"

/* The chat request and a completion of the prompt text it should render
 * give the same prompt tokens and the same greedy text. */
static void expect_rendered(const struct srv *s, cJSON *chat, const char *prompt, const char *what)
{
	cJSON *cmpl = cJSON_CreateObject();
	cJSON_AddStringToObject(cmpl, "prompt", prompt);
	cJSON_AddNumberToObject(cmpl, "max_tokens", 6);
	cJSON_AddNumberToObject(cmpl, "temperature", 0);
	cJSON_AddNumberToObject(chat, "max_tokens", 6);
	cJSON_AddNumberToObject(chat, "temperature", 0);
	char *chat_s = cJSON_PrintUnformatted(chat), *cmpl_s = cJSON_PrintUnformatted(cmpl);
	cJSON *a = http_json(s, "POST", "/v1/chat/completions", chat_s, 200);
	cJSON *b = http_json(s, "POST", "/v1/completions", cmpl_s, 200);
	cr_expect_eq(num_at(a, "usage.prompt_tokens"), num_at(b, "usage.prompt_tokens"), "%s: the prompt is not the one expected",
		     what);
	cr_expect_str_eq(str_at(a, "choices.0.message.content"), str_at(b, "choices.0.text"), "%s", what);
	cr_expect(!at(a, "choices.0.message.tool_calls"), "%s", what);
	cJSON_Delete(a);
	cJSON_Delete(b);
	cJSON_Delete(cmpl);
	free(chat_s);
	free(cmpl_s);
}

/* The default model's template (kjv-moe: '<|role|>\ncontent<|end|>\n')
 * renders no tools, so tools go through the generic format: the server
 * says so once in its log; with tool_choice auto the tools reach the
 * prompt as the generic system prompt (it failed silently before: they
 * were dropped), a history's calls are written as generic answers; a
 * forced call (required, or named) of tools whose schemas leave
 * additionalProperties unset ends within a few dozen tokens as tool_calls
 * whose arguments have no member beyond the schema's (before, it could run
 * on in keys of its own until max_tokens and come back as text). */
Test(serve, generic_tools_on_the_default_model)
{
	char dir[PATH_MAX];
	fc_container(dir, sizeof dir, "models/kjv-moe-hf", "");
	struct srv s;
	srv_start_dir(&s, dir, "%s", "--ctx 1024");
	cJSON *tools = cJSON_Parse(TOOLS_OPEN);
	char *gp = tool_generic_prompt(tools);
	cr_assert(gp);
	struct strbuf want = { 0 };

	/* auto: the prompt opens with the generic one as the system message */
	cJSON *chat = cJSON_CreateObject();
	cJSON_AddItemToObject(chat, "messages", cJSON_Parse("[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}]"));
	cJSON_AddItemToObject(chat, "tools", cJSON_Duplicate(tools, 1));
	strbuf_printf(&want, "<|system|>\n%s<|end|>\n<|user|>\nWeather in Paris?<|end|>\n<|assistant|>\n", gp);
	expect_rendered(&s, chat, want.p, "auto");
	cJSON_Delete(chat);

	/* a history: the prompt joins the system message, the call is a generic answer */
	cJSON *calls = cJSON_Parse("[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"add\","
				   "\"arguments\":\"{\\\"a\\\": 2, \\\"b\\\": 3}\"}}]");
	char *ct = tool_generic_calls_text(calls);
	cr_assert(ct);
	chat = cJSON_CreateObject();
	cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
	cJSON_AddItemToArray(msgs, cJSON_Parse("{\"role\":\"system\",\"content\":\"Be brief.\"}"));
	cJSON_AddItemToArray(msgs, cJSON_Parse("{\"role\":\"user\",\"content\":\"Add 2 and 3.\"}"));
	cJSON *asst = cJSON_Parse("{\"role\":\"assistant\",\"content\":null}");
	cJSON_AddItemToObject(asst, "tool_calls", calls);
	cJSON_AddItemToArray(msgs, asst);
	cJSON_AddItemToArray(msgs, cJSON_Parse("{\"role\":\"tool\",\"tool_call_id\":\"call_0\",\"content\":\"5\"}"));
	cJSON_AddItemToObject(chat, "tools", cJSON_Duplicate(tools, 1));
	want.len = 0;
	strbuf_printf(&want,
		      "<|system|>\nBe brief.\n\n%s<|end|>\n<|user|>\nAdd 2 and 3.<|end|>\n<|assistant|>\n%s<|end|>\n"
		      "<|tool|>\n5<|end|>\n<|assistant|>\n",
		      gp, ct);
	expect_rendered(&s, chat, want.p, "history");
	cJSON_Delete(chat);
	free(ct);

	/* required and named: a finished call of the schema */
	static const char *const choices[] = { "\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}" };
	int most = 0;
	for (int c = 0; c < 2; c++)
		for (int seed = 1; seed <= tu_reps(3); seed++) {
			char body[4096], what[64];
			snprintf(what, sizeof what, "%s seed %d", c ? "named" : "required", seed);
			snprintf(body, sizeof body,
				 "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"max_tokens\":%d,"
				 "\"temperature\":1,\"seed\":%d,\"tools\":" TOOLS_OPEN ",\"tool_choice\":%s%s}",
				 GENERIC_CALL_TOKENS_MAX, seed, choices[c], seed == 1 ? ",\"stream\":true" : "");
			if (seed == 1) {
				/* streamed: the call comes as delta.tool_calls */
				char *resp = NULL;
				cr_assert_eq(http(&s, "POST", "/v1/chat/completions", body, NULL, &resp), 200);
				cJSON *ev = sse_events(resp);
				struct strbuf sa = { 0 }, sn = { 0 };
				const char *fin = "";
				const cJSON *e;
				cJSON_ArrayForEach(e, ev) {
					const cJSON *n = at(e, "choices.0.delta.tool_calls.0.function.name");
					const cJSON *a = at(e, "choices.0.delta.tool_calls.0.function.arguments");
					const cJSON *f = at(e, "choices.0.finish_reason");
					if (cJSON_IsString(f))
						fin = f->valuestring;
					if (cJSON_IsString(n))
						strbuf_put(&sn, n->valuestring, strlen(n->valuestring));
					if (cJSON_IsString(a))
						strbuf_put(&sa, a->valuestring, strlen(a->valuestring));
				}
				cr_expect_str_eq(fin, "tool_calls", "%s: %s", what, resp);
				cr_assert(sn.p && sa.p, "%s: no delta.tool_calls: %s", what, resp);
				expect_call(sn.p, sa.p, c ? "add" : NULL, what);
				strbuf_free(&sa);
				strbuf_free(&sn);
				cJSON_Delete(ev);
				free(resp);
				continue;
			}
			cJSON *j = http_json(&s, "POST", "/v1/chat/completions", body, 200);
			char *printed = cJSON_PrintUnformatted(j);
			cr_expect_str_eq(str_at(j, "choices.0.finish_reason"), "tool_calls", "%s: %s", what, printed);
			const cJSON *tc = at(j, "choices.0.message.tool_calls");
			cr_assert(cJSON_IsArray(tc) && cJSON_GetArraySize(tc) == 1, "%s: %s", what, printed);
			expect_call(str_at(j, "choices.0.message.tool_calls.0.function.name"),
				    str_at(j, "choices.0.message.tool_calls.0.function.arguments"), c ? "add" : NULL, what);
			int n = (int)num_at(j, "usage.completion_tokens");
			most = n > most ? n : most;
			free(printed);
			cJSON_Delete(j);
		}
	cr_log_info("generic forced calls: at most %d tokens", most);

	/* said once, at start, whatever the requests */
	cr_expect_eq(srv_stop(&s), 0);
	char *log = tu_read(s.err, NULL);
	int said = 0;
	for (const char *p = log; p && (p = strstr(p, "does not render tools")); p++)
		said++;
	cr_expect_eq(said, 1, "the generic format is said %d times in the log:\n%s", said, log ? log : "");
	free(log);
	strbuf_free(&want);
	free(gp);
	cJSON_Delete(tools);
}
