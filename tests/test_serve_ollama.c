/*
 * test_serve_ollama — Ollama's API on `colibri serve` (engine/serve/
 * serve_ollama.c) on the qwen3_moe_tok fixture, one server for the file:
 *  - raw requests with curl: NDJSON framing (one object a line, done only
 *    on the last, its done_reason, counts and durations; the same text as
 *    the whole answer), errors in Ollama's shape ({"error": ...} and its
 *    status: bad JSON, no model, an unknown model, a bad option, 401, 405),
 *    num_ctx clamped with a warning, a prompt over num_ctx refused, the
 *    load answer, and a conversation with Ollama's tool calls rendered as
 *    the same conversation sent to /v1/chat/completions;
 *  - the official ollama npm client (tests/serve/ollama_client.mjs): list,
 *    show, ps, version, chat (whole and streamed), generate with seed,
 *    num_predict and stop, format, embed refused, an unknown model;
 *  - without a server (cheap, and kept under the sanitizers, where the
 *    server test is left out): bodies parsed into the OpenAI request they
 *    mean (messages, tool calls, options, format, raw, num_ctx, errors),
 *    and the answer's tool calls in Ollama's shape (arguments an object),
 *    whole and streamed, which the fixture's random weights never write.
 */
#include "tests/serve_util.h"

#include "base/clock.h"
#include "engine/serve/serve_answer.h"
#include "engine/serve/serve_ollama.h"

#define KEY "-H 'Authorization: Bearer test-key'"

/* The lines of an NDJSON body, each an object; checks every line ends
 * with a newline. */
static cJSON *ndjson_lines(const char *text)
{
	cJSON *arr = cJSON_CreateArray();
	for (const char *p = text; p && *p;) {
		const char *nl = strchr(p, '\n');
		cr_assert(nl, "a line without its newline: %s", p);
		char *one = strndup(p, (size_t)(nl - p));
		cJSON *j = cJSON_Parse(one);
		cr_assert(cJSON_IsObject(j), "a line that is not a JSON object: %s", one);
		free(one);
		cJSON_AddItemToArray(arr, j);
		p = nl + 1;
	}
	return arr;
}

/* An Ollama error: the status, and a body that is {"error": text} only,
 * the text holding want. */
static void expect_ollama_error(const struct srv *s, const char *method, const char *path, const char *body,
				const char *extra, int status, const char *want)
{
	char *resp = NULL;
	int st = http(s, method, path, body, extra, &resp);
	cr_expect_eq(st, status, "%s %s %s: status %d, want %d: %s", method, path, body ? body : "", st, status,
		     resp ? resp : "");
	cJSON *j = cJSON_Parse(resp ? resp : "");
	cr_assert(j, "error body is not JSON: %s", resp ? resp : "");
	const cJSON *e = cJSON_GetObjectItem(j, "error");
	cr_expect(cJSON_IsString(e) && cJSON_GetArraySize(j) == 1, "Ollama's error shape: %s", resp);
	cr_expect(cJSON_IsString(e) && strstr(e->valuestring, want), "'%s' expected in %s", want, resp);
	cJSON_Delete(j);
	free(resp);
}

/* The response headers of a request (malloc'd); *body gets the body. */
static char *with_headers(const struct srv *s, const char *path, const char *body, char **resp, int *status)
{
	static int k;
	char hdr[PATH_MAX + 32], extra[PATH_MAX + 64];
	snprintf(hdr, sizeof hdr, "%s/ollama_headers%d", ws, k++);
	snprintf(extra, sizeof extra, KEY " -D '%s'", hdr);
	*status = http(s, "POST", path, body, extra, resp);
	return tu_read(hdr, NULL);
}

static void raw_checks(const struct srv *s)
{
	/* NDJSON: the default is a stream. */
	const char *gen = "{\"model\":\"serve-qwen3_moe_tok\",\"prompt\":\"Once upon a time\","
			  "\"options\":{\"num_predict\":6,\"temperature\":0}}";
	char *text = NULL;
	int st;
	char *hdr = with_headers(s, "/api/generate", gen, &text, &st);
	cr_assert_eq(st, 200, "%s", text ? text : "");
	cr_expect(hdr && strcasestr(hdr, "Content-Type: application/x-ndjson"), "%s", hdr ? hdr : "");
	free(hdr);
	cJSON *lines = ndjson_lines(text);
	int n = cJSON_GetArraySize(lines);
	cr_assert_geq(n, 3, "%s", text);
	char streamed[4096] = "";
	for (int i = 0; i < n; i++) {
		const cJSON *l = cJSON_GetArrayItem(lines, i);
		cr_expect_str_eq(str_at(l, "model"), "serve-qwen3_moe_tok");
		cr_expect(strlen(str_at(l, "created_at")) > 20 && str_at(l, "created_at")[4] == '-', "%s", text);
		cr_expect_eq(cJSON_IsTrue(at(l, "done")), i == n - 1, "done only on the last line: %s", text);
		strncat(streamed, str_at(l, "response"), sizeof streamed - strlen(streamed) - 1);
	}
	const cJSON *last = cJSON_GetArrayItem(lines, n - 1);
	cr_expect_str_eq(str_at(last, "done_reason"), "length");
	cr_expect_eq(num_at(last, "eval_count"), 6);
	cr_expect_gt(num_at(last, "prompt_eval_count"), 4, "the prompt went through the chat template");
	static const char *const durations[] = { "total_duration", "load_duration", "prompt_eval_duration",
						 "eval_duration" };
	for (size_t i = 0; i < sizeof durations / sizeof durations[0]; i++)
		cr_expect_geq(num_at(last, durations[i]), 0, "%s", durations[i]);
	cr_expect_gt(num_at(last, "total_duration"), num_at(last, "eval_duration"), "nanoseconds, the whole and a part");
	cJSON_Delete(lines);
	free(text);
	/* stream: false: one object, the same text. */
	char body[2048];
	snprintf(body, sizeof body, "%.*s,\"stream\":false}", (int)strlen(gen) - 1, gen);
	hdr = with_headers(s, "/api/generate", body, &text, &st);
	cr_assert_eq(st, 200);
	cr_expect(hdr && strcasestr(hdr, "Content-Type: application/json"), "%s", hdr ? hdr : "");
	free(hdr);
	cJSON *one = cJSON_Parse(text);
	cr_assert(one, "not one JSON object: %s", text);
	cr_expect_str_eq(str_at(one, "response"), streamed);
	cr_expect(cJSON_IsTrue(at(one, "done")) && num_at(one, "eval_count") == 6, "%s", text);
	cJSON_Delete(one);
	free(text);

	/* Errors in Ollama's shape. */
	const char *g = "/api/generate", *c = "/api/chat";
	expect_ollama_error(s, "POST", g, "{\"model\":", KEY, 400, "not valid JSON");
	expect_ollama_error(s, "POST", c, "{\"messages\":[]}", KEY, 400, "model is required");
	expect_ollama_error(s, "POST", c, "{\"model\":\"serve-qwen3_moe_tok\",\"messages\":[],\"messages\":[]}", KEY, 400,
			    "'messages' is given twice");
	expect_ollama_error(s, "POST", "/api/show", "{\"model\":\"a\",\"model\":\"b\"}", KEY, 400, "'model' is given twice");
	expect_ollama_error(s, "POST", c, "{\"model\":\"other\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", KEY,
			    404, "model 'other' not found");
	expect_ollama_error(s, "POST", "/api/show", "{\"model\":\"other:7b\"}", KEY, 404, "model 'other:7b' not found");
	expect_ollama_error(s, "POST", g, "{\"model\":\"serve-qwen3_moe_tok\",\"prompt\":\"x\",\"options\":{\"temperature\":\"hot\"}}",
			    KEY, 400, "options.temperature");
	expect_ollama_error(s, "POST", g, "{\"model\":\"serve-qwen3_moe_tok\",\"prompt\":\"x\",\"options\":{\"num_predict\":101}}",
			    KEY, 400, "--max-tokens");
	expect_ollama_error(s, "POST", g, "{\"model\":\"serve-qwen3_moe_tok\",\"prompt\":\"x\",\"raw\":true,\"system\":\"s\"}",
			    KEY, 400, "raw mode does not support");
	expect_ollama_error(s, "POST", g, "{\"model\":\"serve-qwen3_moe_tok\",\"prompt\":\"x\",\"template\":\"{{ .Prompt }}\"}",
			    KEY, 400, "'template' is not supported");
	expect_ollama_error(s, "POST", c, "{\"model\":\"serve-qwen3_moe_tok\",\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}",
			    KEY, 400, "messages[0].role");
	expect_ollama_error(s, "GET", c, NULL, KEY, 405, "use POST");
	expect_ollama_error(s, "GET", "/api/tags", NULL, NULL, 401, "API key");
	expect_ollama_error(s, "POST", "/api/embeddings", "{\"model\":\"serve-qwen3_moe_tok\",\"prompt\":\"x\"}", KEY, 400,
			    "does not support embeddings");

	/* num_ctx: above the server's context it is clamped and said; below
	 * a prompt's length the prompt is refused. */
	hdr = with_headers(s, g,
			   "{\"model\":\"serve-qwen3_moe_tok:latest\",\"prompt\":\"x\",\"stream\":false,"
			   "\"options\":{\"num_ctx\":8192,\"num_predict\":2}}",
			   &text, &st);
	cr_expect_eq(st, 200, "%s", text ? text : "");
	cr_expect(hdr && strcasestr(hdr, "X-Colibri-Warning:") && strstr(hdr, "num_ctx 8192") && strstr(hdr, "512"),
		  "%s", hdr ? hdr : "");
	one = cJSON_Parse(text);
	cr_expect(one && !strcmp(str_at(one, "model"), "serve-qwen3_moe_tok:latest"), "the name as given: %s", text);
	cJSON_Delete(one);
	free(hdr);
	free(text);
	expect_ollama_error(s, "POST", g,
			    "{\"model\":\"serve-qwen3_moe_tok\",\"prompt\":\"Once upon a time there was\",\"options\":"
			    "{\"num_ctx\":4}}",
			    KEY, 400, "context holds 4");

	/* Nothing to run: the load answer. */
	cJSON *j = NULL;
	cr_assert_eq(http(s, "POST", c, "{\"model\":\"serve-qwen3_moe_tok\"}", KEY, &text), 200);
	j = cJSON_Parse(text);
	cr_expect(j && cJSON_IsTrue(at(j, "done")) && !strcmp(str_at(j, "done_reason"), "load"), "%s", text);
	cJSON_Delete(j);
	free(text);

	/* Ollama's tool calls (arguments an object, tool_name) reach the
	 * template as the OpenAI conversation does: the same prompt, the same
	 * greedy tokens. */
	const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
			    "\"Weather of a city\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
			    "\"string\"}},\"required\":[\"city\"]}}}]";
	snprintf(body, sizeof body,
		 "{\"model\":\"serve-qwen3_moe_tok\",\"stream\":false,%s,\"options\":{\"num_predict\":4,\"temperature\":0},"
		 "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},{\"role\":\"assistant\",\"content\":"
		 "\"\",\"tool_calls\":[{\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}}]},"
		 "{\"role\":\"tool\",\"tool_name\":\"get_weather\",\"content\":\"sunny\"}]}",
		 tools);
	cr_assert_eq(http(s, "POST", c, body, KEY, &text), 200, "%s", text ? text : "");
	j = cJSON_Parse(text);
	free(text);
	snprintf(body, sizeof body,
		 "{\"model\":\"serve-qwen3_moe_tok\",%s,\"max_tokens\":4,\"temperature\":0,"
		 "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},{\"role\":\"assistant\",\"content\":"
		 "\"\",\"tool_calls\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
		 "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
		 "{\"role\":\"tool\",\"name\":\"get_weather\",\"tool_call_id\":\"call_0\",\"content\":\"sunny\"}]}",
		 tools);
	cr_assert_eq(http(s, "POST", "/v1/chat/completions", body, KEY, &text), 200, "%s", text ? text : "");
	cJSON *o = cJSON_Parse(text);
	free(text);
	cr_assert(j && o);
	cr_expect_eq(num_at(j, "prompt_eval_count"), num_at(o, "usage.prompt_tokens"));
	cr_expect_str_eq(str_at(j, "message.content"), str_at(o, "choices.0.message.content"));
	cJSON_Delete(j);
	cJSON_Delete(o);
}

Test(serve, ollama_api)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "--api-key test-key --max-tokens 100");
	raw_checks(&s);
	char pkg[PATH_MAX + 64];
	snprintf(pkg, sizeof pkg, "%s/tools/node_modules/ollama/package.json", tu_repo());
	bool node = tu_sh("node --version >/dev/null 2>&1") == 0 && access(pkg, F_OK) == 0;
	if (node) {
		char out[PATH_MAX + 16];
		snprintf(out, sizeof out, "%s/ollama_node.out", ws);
		int rc = tu_sh("node '%s/tests/serve/ollama_client.mjs' http://127.0.0.1:%d serve-qwen3_moe_tok test-key 512 "
			       ">'%s' 2>&1",
			       tu_repo(), s.port, out);
		char *log = tu_read(out, NULL);
		cr_expect_eq(rc, 0, "ollama client:\n%s", log ? log : "");
		cr_expect(log && strstr(log, "all checks passed"), "%s", log ? log : "");
		free(log);
	}
	cr_expect_eq(srv_stop(&s), 0);
	if (!node)
		cr_skip_test("the raw checks passed; the ollama client part needs node and the ollama package "
			     "(cd tools && npm install)");
}

/* Parses body for a model "m" with a context of 512 and --max-tokens 100. */
static int parse(struct serve_ollama *o, struct serve_request *r, bool chat, const char *body, struct serve_error *e)
{
	static const struct serve_limits lim = { .max_tokens_cap = 100, .vocab = 1000, .temp = 0.5f, .top_p = 1 };
	const struct serve_ollama_model m = { .id = "m", .ctx = 512, .lim = &lim };
	return serve_ollama_parse(o, r, chat, body, strlen(body), &m, e);
}

Test(ollama, parse)
{
	struct serve_ollama o;
	struct serve_request r;
	struct serve_error e;
	/* A chat with Ollama's tool calls and options. */
	cr_assert_eq(parse(&o, &r, true,
			   "{\"model\":\"m:latest\",\"stream\":false,\"format\":\"json\",\"messages\":["
			   "{\"role\":\"User\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":\"\","
			   "\"thinking\":\"hm\",\"tool_calls\":[{\"function\":{\"name\":\"w\",\"arguments\":{\"c\":1}}}]},"
			   "{\"role\":\"tool\",\"tool_name\":\"w\",\"content\":\"sunny\"}],"
			   "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\"}}],"
			   "\"options\":{\"temperature\":1.5,\"top_k\":20,\"top_p\":0.9,\"min_p\":0.05,\"seed\":7,"
			   "\"repeat_penalty\":1.1,\"repeat_last_n\":32,\"num_predict\":9,\"num_ctx\":100,"
			   "\"stop\":[\"\\n\\n\"],\"num_gpu\":99,\"mirostat\":2}}",
			   &e),
		     0, "%s", e.message);
	cr_expect(o.chat && !o.done_reason && !strcmp(o.model, "m:latest"));
	cr_expect_eq(r.endpoint, SERVE_CHAT);
	cr_expect_eq(r.n_messages, 3);
	cr_expect_str_eq(r.messages[0].role, "user", "roles in any case");
	cr_expect(r.messages[1].has_tool_calls);
	cr_expect(strstr(r.messages_json, "\"arguments\":\"{\\\"c\\\":1}\"") && strstr(r.messages_json, "\"name\":\"w\"") &&
		  strstr(r.messages_json, "\"reasoning_content\":\"hm\""),
		  "arguments as JSON text, tool_name as name, thinking as reasoning: %s", r.messages_json);
	cr_expect(r.tools_json && r.tool_choice == SERVE_TOOLS_AUTO);
	cr_expect_eq(r.format, SERVE_FORMAT_JSON_OBJECT);
	cr_expect(!r.stream);
	cr_expect(r.p.temp == 1.5f && r.p.top_k == 20 && r.p.top_p == 0.9f && r.p.min_p == 0.05f);
	cr_expect(r.seed_given && r.p.seed == 7);
	cr_expect(r.p.repeat_penalty == 1.1f && r.p.repeat_last_n == 32);
	cr_expect_eq(r.max_tokens, 9);
	cr_expect_eq(o.num_ctx, 100);
	cr_expect(r.n_stop == 1 && !strcmp(r.stop[0], "\n\n"));
	cr_expect(strstr(o.warning, "options.mirostat") && !strstr(o.warning, "num_gpu"), "%s", o.warning);
	serve_request_free(&r);

	/* generate: the prompt as a user turn after the system prompt; raw:
	 * the prompt itself, a schema still constraining it; defaults from
	 * the limits; num_ctx above the context clamped and said. */
	cr_assert_eq(parse(&o, &r, false, "{\"model\":\"m\",\"prompt\":\"Hi\",\"system\":\"Be brief\"}", &e), 0, "%s",
		     e.message);
	cr_expect(r.endpoint == SERVE_CHAT && r.n_messages == 2 && r.stream);
	cr_expect(!strcmp(r.messages[0].role, "system") && !strcmp(r.messages[1].content, "Hi"));
	cr_expect(r.p.temp == 0.5f && !r.seed_given && r.max_tokens == -1 && o.num_ctx == 0);
	serve_request_free(&r);
	cr_assert_eq(parse(&o, &r, false,
			   "{\"model\":\"m\",\"prompt\":\"Hi\",\"raw\":true,\"format\":{\"type\":\"object\"},"
			   "\"options\":{\"num_ctx\":4096,\"seed\":-1}}",
			   &e),
		     0, "%s", e.message);
	cr_expect(r.endpoint == SERVE_COMPLETION && !strcmp(r.prompt, "Hi") && !r.seed_given);
	cr_expect(r.format == SERVE_FORMAT_JSON_SCHEMA && r.schema_json && strstr(r.schema_json, "object"));
	cr_expect(o.num_ctx == 512 && strstr(o.warning, "num_ctx 4096"), "%s", o.warning);
	serve_request_free(&r);

	/* Ollama's window of 64 for a penalty the request sets; the model's
	 * own over the whole context, as transformers. */
	cr_assert_eq(parse(&o, &r, false, "{\"model\":\"m\",\"prompt\":\"Hi\",\"options\":{\"repeat_penalty\":1.2}}", &e),
		     0, "%s", e.message);
	cr_expect(r.p.repeat_penalty == 1.2f && r.p.repeat_last_n == 64, "window %d", r.p.repeat_last_n);
	serve_request_free(&r);
	cr_assert_eq(parse(&o, &r, false, "{\"model\":\"m\",\"prompt\":\"Hi\"}", &e), 0, "%s", e.message);
	cr_expect_eq(r.p.repeat_last_n, -1);
	serve_request_free(&r);

	/* A body that is not UTF-8, here only in a schema's key, which no
	 * string check reached (fuzz_serve_ollama): refused whole. */
	cr_expect_neq(parse(&o, &r, false, "{\"model\":\"m\",\"prompt\":\"Hi\",\"format\":{\"prope\xf2ties\":{}}}", &e), 0);
	cr_expect(e.status == 400 && strstr(e.message, "UTF-8"), "%d %s", e.status, e.message);
	serve_request_free(&r);

	/* Nothing to run: load, or unload with keep_alive 0. */
	cr_assert_eq(parse(&o, &r, false, "{\"model\":\"m\",\"prompt\":\"\"}", &e), 0);
	cr_expect_str_eq(o.done_reason, "load");
	cr_assert_eq(parse(&o, &r, true, "{\"model\":\"m\",\"messages\":[],\"keep_alive\":\"0s\"}", &e), 0);
	cr_expect_str_eq(o.done_reason, "unload");

	/* Refused, with the status and a sentence naming the problem. */
	static const struct {
		bool chat;
		const char *body;
		int status;
		const char *want;
	} bad[] = {
		{ true, "", 400, "missing request body" },
		{ true, "{\"model\":", 400, "not valid JSON" },
		{ true, "[]", 400, "JSON object" },
		{ true, "{\"messages\":[]}", 400, "model is required" },
		{ true, "{\"model\":\"llama3.2\"}", 404, "model 'llama3.2' not found" },
		{ true, "{\"model\":\"m:7b\"}", 404, "model 'm:7b' not found" },
		{ true, "{\"model\":\"m\",\"messages\":{}}", 400, "'messages' must be an array" },
		{ true, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[]}]}", 400, "messages[0].content" },
		{ true, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"images\":[\"AA==\"]}]}", 400,
		  "images" },
		{ true, "{\"model\":\"m\",\"stream\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "stream" },
		{ true, "{\"model\":\"m\",\"format\":\"xml\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
		  "format" },
		{ true, "{\"model\":\"m\",\"think\":\"lots\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
		  "think" },
		{ true, "{\"model\":\"m\",\"think\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
		  "does not support thinking" },
		{ false, "{\"model\":\"m\",\"prompt\":\"x\",\"options\":[]}", 400, "'options' must be an object" },
		{ false, "{\"model\":\"m\",\"prompt\":\"x\",\"options\":{\"top_k\":1.5}}", 400, "options.top_k" },
		{ false, "{\"model\":\"m\",\"prompt\":\"x\",\"options\":{\"top_p\":0}}", 400, "options.top_p" },
		{ false, "{\"model\":\"m\",\"prompt\":\"x\",\"options\":{\"seed\":\"7\"}}", 400, "options.seed" },
		{ false, "{\"model\":\"m\",\"prompt\":\"x\",\"options\":{\"num_predict\":101}}", 400, "--max-tokens" },
		{ false, "{\"model\":\"m\",\"prompt\":\"x\",\"options\":{\"stop\":[1]}}", 400, "stop[0]" },
		{ false, "{\"model\":\"m\",\"prompt\":5}", 400, "'prompt' must be a string" },
		{ false, "{\"model\":\"m\",\"prompt\":\"x\",\"raw\":true,\"system\":\"s\"}", 400, "raw mode" },
		{ false, "{\"model\":\"m\",\"prompt\":\"x\",\"template\":\"{{ .Prompt }}\"}", 400, "'template'" },
		{ false, "{\"model\":\"m\",\"prompt\":\"x\",\"suffix\":\"y\"}", 400, "suffix" },
		{ false, "{\"model\":\"m\",\"prompt\":\"x\",\"context\":[1,2]}", 400, "/api/chat" },
		{ false, "{\"model\":\"m\",\"prompt\":\"x\",\"logprobs\":true}", 400, "logprobs" },
		{ false, "{\"model\":\"m\",\"prompt\":\"x\\u0000\"}", 400, "NUL" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_expect_eq(parse(&o, &r, bad[i].chat, bad[i].body, &e), -EINVAL, "%s", bad[i].body);
		cr_expect_eq(e.status, bad[i].status, "%s: %d %s", bad[i].body, e.status, e.message);
		cr_expect(strstr(e.message, bad[i].want), "%s: '%s' expected in: %s", bad[i].body, bad[i].want, e.message);
	}
}

/* One take: the given content pieces, done with finish f. */
static void take_of(struct serve_take *t, const char *const *pieces, int n, enum serve_finish f)
{
	memset(t, 0, sizeof *t);
	t->ev = calloc((size_t)n, sizeof *t->ev);
	size_t len = 0;
	for (int i = 0; i < n; i++)
		len += strlen(pieces[i]);
	t->text = malloc(len + 1);
	for (int i = 0; i < n; i++) {
		t->ev[i] = (struct serve_event){ .id = i + 1, .content_len = (uint32_t)strlen(pieces[i]) };
		memcpy(t->text + t->n_text, pieces[i], strlen(pieces[i]));
		t->n_text += strlen(pieces[i]);
	}
	t->n_ev = n;
	t->done = true;
	t->finish = f;
	t->n_prompt = 5;
	t->n_generated = n;
}

static void answer_of(struct serve_answer *a, const char *tools)
{
	cr_assert_eq(serve_answer_init(a, SERVE_CHAT, NULL, "m", false, false, false, NULL), 0);
	cr_assert_eq(serve_answer_tools(a, TOOL_FORMAT_HERMES, tools), 0);
	struct serve_ollama *o = calloc(1, sizeof *o);
	o->chat = true;
	o->t_start = clock_now_s();
	strcpy(o->model, "m");
	serve_answer_dialect(a, &serve_ollama_dialect, o);
}

Test(ollama, tool_calls_shape)
{
	const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
			    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";
	static const char *const pieces[] = { "Let me look.", "\n<tool_call>\n{\"name\": \"get_weather\", ",
					      "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>" };
	struct serve_take t;
	take_of(&t, pieces, 3, SERVE_FINISH_STOP);
	struct serve_answer a;
	answer_of(&a, tools);
	cr_assert_eq(serve_answer_add(&a, &t), 0);
	char *json = serve_answer_json(&a, &t);
	cJSON *j = cJSON_Parse(json);
	cr_assert(j, "%s", json ? json : "");
	cr_expect_str_eq(str_at(j, "message.role"), "assistant");
	cr_expect_str_eq(str_at(j, "message.content"), "Let me look.");
	cr_expect_str_eq(str_at(j, "message.tool_calls.0.function.name"), "get_weather");
	cr_expect(cJSON_IsObject(at(j, "message.tool_calls.0.function.arguments")), "arguments an object: %s", json);
	cr_expect_str_eq(str_at(j, "message.tool_calls.0.function.arguments.city"), "Paris");
	cr_expect(cJSON_IsTrue(at(j, "done")) && !strcmp(str_at(j, "done_reason"), "stop"), "%s", json);
	cr_expect_eq(num_at(j, "prompt_eval_count"), 5);
	cJSON_Delete(j);
	free(json);
	serve_answer_free(&a);

	/* Streamed: the content, the call in its own line, then done. */
	answer_of(&a, tools);
	struct strbuf out = { 0 };
	cr_assert_eq(serve_answer_sse(&a, &t, &out), 0);
	cr_expect(a.finished);
	cJSON *lines = ndjson_lines(out.p);
	int n = cJSON_GetArraySize(lines), calls = 0;
	char content[256] = "";
	for (int i = 0; i < n; i++) {
		const cJSON *l = cJSON_GetArrayItem(lines, i);
		strncat(content, str_at(l, "message.content"), sizeof content - strlen(content) - 1);
		const cJSON *tc = at(l, "message.tool_calls");
		if (tc) {
			calls += cJSON_GetArraySize(tc);
			cr_expect_str_eq(str_at(tc, "0.function.arguments.city"), "Paris");
		}
		cr_expect_eq(cJSON_IsTrue(at(l, "done")), i == n - 1, "%s", out.p);
	}
	cr_expect_eq(calls, 1, "%s", out.p);
	cr_expect_str_eq(content, "Let me look.");
	cJSON_Delete(lines);
	strbuf_free(&out);
	serve_answer_free(&a);

	/* An error after the stream began: one {"error": ...} line ends it. */
	free(t.ev);
	free(t.text);
	take_of(&t, pieces, 1, SERVE_FINISH_ERROR);
	serve_error_set(&t.error, 500, NULL, NULL, "a disk read failed");
	answer_of(&a, tools);
	cr_assert_eq(serve_answer_sse(&a, &t, &out), 0);
	cr_expect(out.p && strstr(out.p, "{\"error\":\"a disk read failed\"}\n"), "%s", out.p ? out.p : "");
	strbuf_free(&out);
	serve_answer_free(&a);
	free(t.ev);
	free(t.text);
}
