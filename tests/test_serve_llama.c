/*
 * test_serve_llama — llama-server's native API on `colibri serve`
 * (engine/serve/serve_llama.h), with raw requests in the shapes its README
 * documents (llama.cpp tools/server/README.md at 81ff7abe5), against one
 * server on the qwen3_moe_tok fixture (tests/serve_util.h):
 *  - GET /health and /v1/health, /props (default_generation_settings,
 *    n_ctx, total_slots, model_path, chat_template);
 *  - POST /tokenize (string and mixed content, with_pieces) and
 *    /detokenize, round trip;
 *  - POST /completion: the same tokens as /v1/completions for the same
 *    prompt and seed, as text or ids; return_tokens; the stream (a data:
 *    event per token, a final one with stop true, no [DONE]) giving the
 *    same text; n_probs in completion_probabilities' shape; a stop word;
 *    grammar and json_schema; cache_prompt false;
 *  - GET /slots, POST /slots/{id}?action=save|restore|erase: a restored
 *    slot continues without a prefill (timings.cache_n is the saved
 *    history, prompt_n only what follows) and gives the output of the
 *    continuation that was never saved;
 *  - errors in llama-server's shape {"error": {code, message, type}}: bad
 *    JSON, a bad field, an unknown slot, a bad file name, a missing file,
 *    an unknown action.
 * The parser's translations, and what needs a server started otherwise
 * (no slot folder), are checked without a server (suite serve_llama).
 */
#include "tests/serve_util.h"

#include "engine/serve/serve_llama.h"

/* llama-server's error shape with this status. */
static void expect_llama_error(const struct srv *s, const char *method, const char *path, const char *body, int status,
			       const char *type)
{
	char *resp = NULL;
	int st = http(s, method, path, body, NULL, &resp);
	cr_expect_eq(st, status, "%s %s %s: status %d, want %d: %s", method, path, body ? body : "", st, status,
		     resp ? resp : "");
	cJSON *j = cJSON_Parse(resp ? resp : "");
	cr_assert(j, "error body is not JSON: %s", resp ? resp : "");
	cr_expect_eq(num_at(j, "error.code"), status, "%s", resp);
	cr_expect(strlen(str_at(j, "error.message")) > 5, "%s", resp);
	cr_expect_str_eq(str_at(j, "error.type"), type, "%s", resp);
	cJSON_Delete(j);
	free(resp);
}

/* The data: events of a llama-server stream, which ends without [DONE]. */
static cJSON *llama_events(const char *text)
{
	cJSON *arr = cJSON_CreateArray();
	for (const char *p = text; p && *p;) {
		const char *e = strstr(p, "\n\n");
		cr_assert(e, "an event without its blank line: %s", p);
		cr_assert(!strncmp(p, "data: ", 6), "not a data line: %.60s", p);
		cr_assert(strncmp(p + 6, "[DONE]", 6) != 0, "llama-server's stream has no [DONE]");
		char *one = strndup(p + 6, (size_t)(e - p - 6));
		cJSON *j = cJSON_Parse(one);
		cr_assert(j, "event is not JSON: %s", one);
		free(one);
		cJSON_AddItemToArray(arr, j);
		p = e + 2;
	}
	return arr;
}

static cJSON *completion(const struct srv *s, const char *body)
{
	return http_json(s, "POST", "/completion", body, 200);
}

/* The ids of a JSON array as "a,b,c" (for building prompts). */
static void ids_text(const cJSON *a, char *out, size_t n)
{
	out[0] = 0;
	for (const cJSON *e = a->child; e; e = e->next)
		snprintf(out + strlen(out), n - strlen(out), "%s%d", e == a->child ? "" : ",", e->valueint);
}

static void info_endpoints(const struct srv *s)
{
	cJSON *j = http_json(s, "GET", "/health", NULL, 200);
	cr_expect_str_eq(str_at(j, "status"), "ok");
	cJSON_Delete(j);
	j = http_json(s, "GET", "/v1/health", NULL, 200);
	cr_expect_str_eq(str_at(j, "status"), "ok");
	cJSON_Delete(j);
	j = http_json(s, "GET", "/props", NULL, 200);
	cr_expect_eq(num_at(j, "default_generation_settings.n_ctx"), 512);
	cr_expect_eq(num_at(j, "default_generation_settings.params.n_predict"), -1);
	cr_expect(cJSON_IsNumber(at(j, "default_generation_settings.params.temperature")));
	cr_expect(cJSON_IsArray(at(j, "default_generation_settings.params.stop")));
	cr_expect_eq(num_at(j, "total_slots"), 2);
	cr_expect_str_eq(str_at(j, "model_path"), model);
	cr_expect_str_eq(str_at(j, "model_alias"), "serve-qwen3_moe_tok");
	cr_expect(strstr(str_at(j, "chat_template"), "<|im_start|>"), "the model's Jinja template");
	cJSON_Delete(j);
}

static void tokenize_endpoints(const struct srv *s)
{
	cJSON *j = http_json(s, "POST", "/tokenize", "{\"content\":\"Hello world\"}", 200);
	const cJSON *t = at(j, "tokens");
	cr_assert(cJSON_IsArray(t) && cJSON_GetArraySize(t) == 2, "Qwen3 splits \"Hello world\" in two");
	int hello = (int)num_at(t, "0"), world = (int)num_at(t, "1");
	cJSON_Delete(j);
	j = http_json(s, "POST", "/tokenize", "{\"content\":\"Hello world\",\"with_pieces\":true}", 200);
	cr_expect_eq(num_at(j, "tokens.0.id"), hello);
	cr_expect_str_eq(str_at(j, "tokens.0.piece"), "Hello");
	cr_expect_str_eq(str_at(j, "tokens.1.piece"), " world");
	cJSON_Delete(j);
	/* Mixed content: strings tokenized, ids as they are. */
	char body[256];
	snprintf(body, sizeof body, "{\"content\":[\"Hello\",%d,\" world\"]}", world);
	j = http_json(s, "POST", "/tokenize", body, 200);
	cr_expect_eq(cJSON_GetArraySize(at(j, "tokens")), 3);
	cr_expect_eq(num_at(j, "tokens.1"), world);
	cr_expect_eq(num_at(j, "tokens.2"), world);
	cJSON_Delete(j);
	snprintf(body, sizeof body, "{\"tokens\":[%d,%d]}", hello, world);
	j = http_json(s, "POST", "/detokenize", body, 200);
	cr_expect_str_eq(str_at(j, "content"), "Hello world");
	cJSON_Delete(j);
	expect_llama_error(s, "POST", "/detokenize", "{\"tokens\":[1,99999999]}", 400, "invalid_request_error");
	expect_llama_error(s, "POST", "/tokenize", "{\"content\":5}", 400, "invalid_request_error");
	expect_llama_error(s, "POST", "/tokenize", "{\"content\":", 400, "invalid_request_error");
}

/* /completion answers as /v1/completions does, in its own shape. */
static void completion_shapes(const struct srv *s)
{
	const char *prompt = "In the beginning";
	char body[1024];
	snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":5,\"temperature\":0.9,\"seed\":11}", prompt);
	cJSON *oa = http_json(s, "POST", "/v1/completions", body, 200);
	const char *want = str_at(oa, "choices.0.text");
	snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"n_predict\":5,\"temperature\":0.9,\"seed\":11,\"return_tokens\":true}",
		 prompt);
	cJSON *j = completion(s, body);
	cr_expect_str_eq(str_at(j, "content"), want, "/completion and /v1/completions: the same prompt and seed");
	cr_expect(cJSON_IsTrue(at(j, "stop")));
	cr_expect_eq(num_at(j, "tokens_predicted"), 5);
	cr_expect_eq(num_at(j, "tokens_evaluated"), num_at(oa, "usage.prompt_tokens"));
	cr_expect_str_eq(str_at(j, "stop_type"), "limit");
	cr_expect_str_eq(str_at(j, "model"), "serve-qwen3_moe_tok");
	cr_expect_str_eq(str_at(j, "prompt"), prompt);
	cr_expect_eq(num_at(j, "generation_settings.n_predict"), 5);
	cr_expect_eq(num_at(j, "generation_settings.seed"), 11);
	cr_expect(cJSON_IsNumber(at(j, "timings.predicted_n")) && cJSON_IsNumber(at(j, "timings.cache_n")));
	cr_expect(cJSON_IsNumber(at(j, "id_slot")));
	const cJSON *toks = at(j, "tokens");
	cr_assert_eq(cJSON_GetArraySize(toks), 5, "return_tokens");
	char ids[512], b2[1024];
	ids_text(toks, ids, sizeof ids);
	snprintf(b2, sizeof b2, "{\"tokens\":[%s]}", ids);
	cJSON *d = http_json(s, "POST", "/detokenize", b2, 200);
	cr_expect_str_eq(str_at(d, "content"), want, "the tokens are the content's");
	cJSON_Delete(d);

	/* The prompt as ids, and as ids and text mixed: the same answer. */
	snprintf(b2, sizeof b2, "{\"content\":\"%s\"}", prompt);
	cJSON *pt = http_json(s, "POST", "/tokenize", b2, 200);
	ids_text(at(pt, "tokens"), ids, sizeof ids);
	snprintf(b2, sizeof b2, "{\"prompt\":[%s],\"n_predict\":5,\"temperature\":0.9,\"seed\":11}", ids);
	cJSON *k = completion(s, b2);
	cr_expect_str_eq(str_at(k, "content"), want, "a prompt of ids");
	cJSON_Delete(k);
	snprintf(b2, sizeof b2, "{\"prompt\":[\"In the\",%d],\"n_predict\":5,\"temperature\":0.9,\"seed\":11}",
		 (int)num_at(pt, "tokens.2"));
	k = completion(s, b2);
	cr_expect_str_eq(str_at(k, "content"), want, "a mixed prompt");
	cJSON_Delete(k);
	cJSON_Delete(pt);

	/* Streamed: a data: event per token, then the final object; no [DONE]. */
	snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"n_predict\":5,\"temperature\":0.9,\"seed\":11,\"stream\":true}",
		 prompt);
	char *resp = NULL;
	cr_assert_eq(http(s, "POST", "/completion", body, NULL, &resp), 200);
	cJSON *ev = llama_events(resp);
	free(resp);
	int n = cJSON_GetArraySize(ev);
	cr_assert_eq(n, 6, "five tokens and the final event");
	char joined[2048] = "", word[64] = "";
	for (int i = 0; i < n - 1; i++) {
		const cJSON *e = cJSON_GetArrayItem(ev, i);
		char k[8];
		snprintf(k, sizeof k, "%d", i);
		cr_expect(cJSON_IsFalse(at(e, "stop")));
		cr_expect_eq(num_at(e, "tokens.0"), num_at(toks, k));
		cr_expect_eq(num_at(e, "tokens_predicted"), i + 1);
		const char *piece = str_at(e, "content");
		/* A stop word for below: a later token's text, plain ASCII. */
		bool plain = i >= 1 && strlen(piece) > 1 && strlen(piece) < sizeof word && !word[0];
		for (const char *c = piece; plain && *c; c++)
			plain = *c >= 0x20 && *c < 0x7f && *c != '"' && *c != '\\';
		if (plain)
			snprintf(word, sizeof word, "%s", piece);
		strncat(joined, piece, sizeof joined - strlen(joined) - 1);
	}
	cr_expect_str_eq(joined, want, "the stream's text");
	const cJSON *last = cJSON_GetArrayItem(ev, n - 1);
	cr_expect(cJSON_IsTrue(at(last, "stop")));
	cr_expect_str_eq(str_at(last, "content"), "");
	cr_expect_str_eq(str_at(last, "stop_type"), "limit");
	cr_expect(cJSON_IsObject(at(last, "timings")));
	cJSON_Delete(ev);

	/* A stop word: the text before it, and which word stopped it. */
	cr_assert(word[0], "no token of the output is plain ASCII to stop at: %s", want);
	snprintf(body, sizeof body,
		 "{\"prompt\":\"%s\",\"n_predict\":5,\"temperature\":0.9,\"seed\":11,\"stop\":[\"%s\"]}", prompt, word);
	k = completion(s, body);
	cr_expect_str_eq(str_at(k, "stop_type"), "word");
	cr_expect_str_eq(str_at(k, "stopping_word"), word);
	cr_expect(!strncmp(want, str_at(k, "content"), strlen(str_at(k, "content"))) &&
			  !strcmp(want + strlen(str_at(k, "content")), strstr(want, word)),
		  "the text before the stop word: %s", str_at(k, "content"));
	cJSON_Delete(k);
	cJSON_Delete(j);
	cJSON_Delete(oa);

	/* n_probs: completion_probabilities, greedy's pick the most likely. */
	j = completion(s, "{\"prompt\":\"Hello\",\"n_predict\":3,\"temperature\":0,\"n_probs\":3}");
	const cJSON *pr = at(j, "completion_probabilities");
	cr_assert_eq(cJSON_GetArraySize(pr), 3);
	for (int i = 0; i < 3; i++) {
		const cJSON *e = cJSON_GetArrayItem(pr, i);
		cr_expect(cJSON_IsNumber(at(e, "id")) && cJSON_IsString(at(e, "token")) && cJSON_IsArray(at(e, "bytes")));
		cr_expect_leq(num_at(e, "logprob"), 0);
		const cJSON *top = at(e, "top_logprobs");
		cr_assert_eq(cJSON_GetArraySize(top), 3);
		cr_expect_eq(num_at(top, "0.id"), num_at(e, "id"));
		cr_expect_eq(num_at(top, "0.logprob"), num_at(e, "logprob"));
		cr_expect_geq(num_at(top, "0.logprob"), num_at(top, "1.logprob"));
		cr_expect_geq(num_at(top, "1.logprob"), num_at(top, "2.logprob"));
	}
	cJSON_Delete(j);

	/* Grammars: GBNF and a JSON schema hold whatever the model. */
	j = completion(s, "{\"prompt\":\"Answer:\",\"n_predict\":4,\"temperature\":0,"
			  "\"grammar\":\"root ::= \\\"yes\\\" | \\\"no\\\"\"}");
	const char *c = str_at(j, "content");
	cr_expect(!strcmp(c, "yes") || !strcmp(c, "no"), "the grammar's language: %s", c);
	cr_expect_str_eq(str_at(j, "stop_type"), "eos");
	cJSON_Delete(j);
	j = completion(s, "{\"prompt\":\"JSON:\",\"n_predict\":12,\"temperature\":0,\"json_schema\":{\"type\":\"object\","
			  "\"properties\":{\"n\":{\"enum\":[1,2]}},\"required\":[\"n\"],\"additionalProperties\":false}}");
	cJSON *v = cJSON_Parse(str_at(j, "content"));
	cr_expect(v && cJSON_IsNumber(at(v, "n")), "the schema's object: %s", str_at(j, "content"));
	cJSON_Delete(v);
	cJSON_Delete(j);

	/* Issue 40: a grammar within the compile-time bound whose shared
	 * prefixes need more stacks than the matcher holds once the output
	 * reaches them (2 x 3000 after the "x") ends in a 400 naming the
	 * limit and the position, not a 500 grammar_dead_end. */
	struct strbuf g = { 0 };
	strbuf_printf(&g, "{\"prompt\":\"x\",\"n_predict\":4,\"grammar\":\"root ::= a \\\"1\\\" | a \\\"2\\\"\\n"
		      "a ::= \\\"x\\\" b\\nb ::= ");
	for (int i = 0; i < 3000; i++)
		strbuf_printf(&g, "%s\\\"y\\\" \\\"%d\\\"", i ? " | " : "", i);
	strbuf_printf(&g, "\"}");
	char *wide = NULL;
	int st = http(s, "POST", "/completion", g.p, NULL, &wide);
	cr_expect(st == 400 && wide && strstr(wide, "at byte 0 of the output") && strstr(wide, "4096"),
		  "a grammar too wide at run time: %d %s", st, wide ? wide : "");
	free(wide);
	strbuf_free(&g);

	expect_llama_error(s, "POST", "/completion", "{\"prompt\":", 400, "invalid_request_error");
	expect_llama_error(s, "POST", "/completion", "{\"prompt\":\"x\",\"n_predict\":\"many\"}", 400,
			   "invalid_request_error");
	expect_llama_error(s, "POST", "/completion", "{\"prompt\":\"x\",\"mirostat\":2}", 400, "invalid_request_error");
	expect_llama_error(s, "POST", "/completion", "{\"prompt\":\"x\",\"id_slot\":7}", 400, "invalid_request_error");
	expect_llama_error(s, "POST", "/completion", "{\"prompt\":\"x\",\"grammar\":\"root ::= [\"}", 400,
			   "invalid_request_error");
	expect_llama_error(s, "POST", "/completion", "{\"prompt\":[\"a\",\"b\"]}", 400, "invalid_request_error");
	expect_llama_error(s, "POST", "/completion", "{\"prompt\":\"x\",\"n_predict\":1,\"n_predict\":9}", 400,
			   "invalid_request_error");
	expect_llama_error(s, "POST", "/tokenize", "{\"content\":\"a\",\"content\":\"b\"}", 400, "invalid_request_error");
}

/* Save, erase, restore into another slot: the continuation runs without a
 * prefill of the saved history, and gives what the unsaved one gave. */
static void slots(const struct srv *s, const char *dir)
{
	cJSON *j = http_json(s, "GET", "/slots?fail_on_no_slot=1", NULL, 200);
	cr_assert_eq(cJSON_GetArraySize(j), 2);
	cr_expect_eq(num_at(j, "1.id"), 1);
	cr_expect(cJSON_IsFalse(at(j, "0.is_processing")));
	cr_expect_eq(num_at(j, "0.n_ctx"), 512);
	cr_expect(cJSON_IsObject(at(j, "0.params")));
	cJSON_Delete(j);

	/* A history on slot 0: its prompt and output. */
	cJSON *pt = http_json(s, "POST", "/tokenize", "{\"content\":\"And God said, Let there be light\"}", 200);
	char p[1024], g[512], body[2048];
	ids_text(at(pt, "tokens"), p, sizeof p);
	int np = cJSON_GetArraySize(at(pt, "tokens"));
	cJSON_Delete(pt);
	snprintf(body, sizeof body, "{\"prompt\":[%s],\"n_predict\":4,\"id_slot\":0,\"temperature\":0,\"return_tokens\":true}",
		 p);
	j = completion(s, body);
	cr_expect_eq(num_at(j, "id_slot"), 0);
	ids_text(at(j, "tokens"), g, sizeof g);
	cJSON_Delete(j);
	int saved = np + 4 - 1; /* the last token never ran */
	j = http_json(s, "POST", "/slots/0?action=save", "{\"filename\":\"kjv.bin\"}", 200);
	cr_expect_eq(num_at(j, "id_slot"), 0);
	cr_expect_str_eq(str_at(j, "filename"), "kjv.bin");
	cr_expect_eq(num_at(j, "n_saved"), saved);
	cr_expect_gt(num_at(j, "n_written"), 0);
	cr_expect(cJSON_IsNumber(at(j, "timings.save_ms")));
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/kjv.bin", dir);
	cr_expect_eq(access(path, F_OK), 0, "the file is in --slot-save-path");
	cJSON_Delete(j);

	/* The continuation, unsaved: on slot 0, from its cache. */
	snprintf(body, sizeof body,
		 "{\"prompt\":[%s,%s,13],\"n_predict\":4,\"id_slot\":0,\"temperature\":0.8,\"seed\":5,\"return_tokens\":true}", p,
		 g);
	j = completion(s, body);
	cr_expect_eq(num_at(j, "timings.cache_n"), saved);
	char *unsaved = strdup(str_at(j, "content"));
	cJSON_Delete(j);

	/* Slot 1 forgets, then takes the saved file. */
	j = http_json(s, "POST", "/slots/1?action=erase", NULL, 200);
	cr_expect_eq(num_at(j, "id_slot"), 1);
	cr_expect(cJSON_IsNumber(at(j, "n_erased")));
	cJSON_Delete(j);
	j = http_json(s, "POST", "/slots/1?action=restore", "{\"filename\":\"kjv.bin\"}", 200);
	cr_expect_eq(num_at(j, "n_restored"), saved);
	cr_expect_gt(num_at(j, "n_read"), 0);
	cr_expect(cJSON_IsNumber(at(j, "timings.restore_ms")));
	cJSON_Delete(j);
	j = http_json(s, "GET", "/slots", NULL, 200);
	cr_expect_eq(num_at(j, "1.n_past"), saved);
	cJSON_Delete(j);
	snprintf(body, sizeof body, "{\"prompt\":[%s,%s,13],\"n_predict\":4,\"id_slot\":1,\"temperature\":0.8,\"seed\":5}", p,
		 g);
	j = completion(s, body);
	cr_expect_eq(num_at(j, "id_slot"), 1);
	cr_expect_eq(num_at(j, "timings.cache_n"), saved, "the restored history is not prefilled again");
	cr_expect_eq(num_at(j, "timings.prompt_n"), 2, "only what follows it is");
	cr_expect_str_eq(str_at(j, "content"), unsaved, "the restored slot continues as the unsaved one did");
	cJSON_Delete(j);

	/* cache_prompt false: no reuse, whatever the slot holds; the same text. */
	char *nc = strdup(body);
	nc[strlen(nc) - 1] = 0;
	snprintf(body, sizeof body, "%s,\"cache_prompt\":false}", nc);
	free(nc);
	j = completion(s, body);
	cr_expect_eq(num_at(j, "timings.cache_n"), 0);
	cr_expect_str_eq(str_at(j, "content"), unsaved);
	cJSON_Delete(j);
	free(unsaved);

	expect_llama_error(s, "POST", "/slots/9?action=save", "{\"filename\":\"a.bin\"}", 400, "invalid_request_error");
	expect_llama_error(s, "POST", "/slots/x?action=erase", NULL, 400, "invalid_request_error");
	expect_llama_error(s, "POST", "/slots/0?action=fly", "{}", 400, "invalid_request_error");
	expect_llama_error(s, "POST", "/slots/0?action=save", "{\"filename\":\"../a.bin\"}", 400, "invalid_request_error");
	expect_llama_error(s, "POST", "/slots/0?action=save", "{\"filename\":\"sub/a.bin\"}", 400, "invalid_request_error");
	expect_llama_error(s, "POST", "/slots/0?action=save", "{}", 400, "invalid_request_error");
	expect_llama_error(s, "POST", "/slots/0?action=restore", "{\"filename\":\"missing.bin\"}", 400,
			   "invalid_request_error");
	snprintf(path, sizeof path, "%s/junk.bin", dir);
	cr_assert_eq(tu_write(path, "not a session", 13), 0);
	expect_llama_error(s, "POST", "/slots/0?action=restore", "{\"filename\":\"junk.bin\"}", 400, "invalid_request_error");
}

Test(serve, llama_server_api)
{
	NEED_FIXTURE();
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/slot-files", ws);
	struct srv s;
	srv_start(&s, "--parallel 2 --slot-save-path '%s'", dir);
	info_endpoints(&s);
	tokenize_endpoints(&s);
	completion_shapes(&s);
	slots(&s, dir);
	cr_expect_gt(metric(&s, "colibri_requests_total{route=\"/completion\",status=\"200\"}"), 10);
	cr_expect_eq(srv_stop(&s), 0);
}

/* ---- without a server ---- */

TestSuite(serve_llama);

static const struct serve_limits lim = { .max_tokens_cap = 512, .vocab = 1000, .temp = 0.7f, .top_p = 1, .top_k = 0 };

/* llama-server's defaults and spellings read as what they mean. */
Test(serve_llama, completion_fields)
{
	struct serve_request q;
	struct serve_llama_completion x;
	struct serve_error e;
	const char *b = "{\"prompt\":\"hi\",\"n_predict\":-1,\"seed\":-1,\"temperature\":-1,\"top_k\":-5,\"logit_bias\":[],"
			"\"typical_p\":1,\"mirostat\":0,\"n_probs\":50,\"cache_prompt\":false,\"id_slot\":1,\"model\":\"any\","
			"\"samplers\":[\"top_k\"]}";
	cr_assert_eq(serve_llama_completion_parse(&q, &x, b, strlen(b), &lim, 2, &e), 0, "%s", e.message);
	cr_expect_str_eq(q.prompt, "hi");
	cr_expect(!q.seed_given, "seed -1 is random");
	cr_expect_eq(q.p.temp, 0, "a negative temperature is greedy");
	cr_expect_eq(q.p.top_k, 0);
	cr_expect_eq(x.n_predict, -1);
	cr_expect_eq(x.n_probs, BATCH_LOGPROBS_MAX, "at most n_probs: the engine's most");
	cr_expect(q.p.logprobs && q.p.top_logprobs == BATCH_LOGPROBS_MAX);
	cr_expect(!x.cache_prompt);
	cr_expect_eq(x.id_slot, 1);
	cr_expect_null(q.model, "the model field is not llama-server's");
	cr_expect_eq(serve_llama_n_predict(&x, 100, 512), 100, "-1: to the context's end");
	serve_request_free(&q);
	serve_llama_completion_free(&x);

	b = "{\"prompt\":[[1,\"two\",3]],\"max_tokens\":0,\"json_schema\":{\"type\":\"string\"},\"grammar\":\"root ::= \\\"a\\\"\"}";
	cr_assert_eq(serve_llama_completion_parse(&q, &x, b, strlen(b), &lim, 2, &e), 0, "%s", e.message);
	cr_expect_str_eq(x.mixed, "[1,\"two\",3]", "a prompt of ids and strings");
	cr_expect_eq(serve_llama_n_predict(&x, 100, 512), 0, "max_tokens is n_predict's alias; 0 runs only the prompt");
	cr_expect_str_eq(x.json_schema, "{\"type\":\"string\"}", "json_schema wins over grammar");
	cr_expect_null(x.grammar);
	cr_expect(serve_llama_constrained(&x));
	serve_request_free(&q);
	serve_llama_completion_free(&x);

	/* The repetition penalty's window without repeat_last_n: 64 under
	 * llama-server's name, as llama-server; the whole context under vLLM's
	 * name and for the model's own penalty, as vLLM and transformers. */
	b = "{\"prompt\":\"x\",\"repeat_penalty\":1.2}";
	cr_assert_eq(serve_llama_completion_parse(&q, &x, b, strlen(b), &lim, 2, &e), 0, "%s", e.message);
	cr_expect(q.p.repeat_penalty == 1.2f && q.p.repeat_last_n == 64, "repeat_penalty: window %d", q.p.repeat_last_n);
	serve_request_free(&q);
	serve_llama_completion_free(&x);
	struct serve_limits own = lim;
	own.repeat_penalty = 1.3f;
	const struct {
		const char *body;
		const struct serve_limits *lim;
		float penalty;
		int32_t window;
	} win[] = {
		{ "{\"prompt\":\"x\",\"repetition_penalty\":1.2}", &lim, 1.2f, -1 },
		{ "{\"prompt\":\"x\"}", &own, 1.3f, -1 },
		{ "{\"prompt\":\"x\",\"repeat_penalty\":1.2,\"repeat_last_n\":8}", &own, 1.2f, 8 },
	};
	for (size_t i = 0; i < sizeof win / sizeof win[0]; i++) {
		cr_assert_eq(serve_request_parse(&q, SERVE_COMPLETION, win[i].body, strlen(win[i].body), win[i].lim, &e), 0,
			     "%s: %s", win[i].body, e.message);
		cr_expect(q.p.repeat_penalty == win[i].penalty && q.p.repeat_last_n == win[i].window,
			  "%s: penalty %g over %d", win[i].body, q.p.repeat_penalty, q.p.repeat_last_n);
		serve_request_free(&q);
	}

	static const char *const bad[] = {
		"{\"prompt\":\"x\",\"ignore_eos\":true}", "{\"prompt\":\"x\",\"dry_multiplier\":0.8}",
		"{\"prompt\":\"x\",\"id_slot\":2}",     "{\"prompt\":{\"prompt_string\":\"x\",\"multimodal_data\":[\"AA\"]}}",
		"{\"prompt\":[1,{}]}",                  "{\"n_predict\":3}",
		"[1]",                                  "{\"prompt\":\"x\",\"logit_bias\":[[1,2]]}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_expect_neq(serve_llama_completion_parse(&q, &x, bad[i], strlen(bad[i]), &lim, 2, &e), 0, "%s", bad[i]);
		cr_expect_eq(e.status, 400, "%s", bad[i]);
		serve_request_free(&q);
		serve_llama_completion_free(&x);
	}
}

/* Save and restore need a folder; erase does not. Names stay in it. */
Test(serve_llama, slot_actions)
{
	struct serve_llama_info in = { .model_id = "m", .n_slots = 2, .lim = &lim };
	struct serve_slot_op op;
	struct serve_error e;
	char *name = NULL;
	serve_slot_op_init(&op, SERVE_SLOT_LIST, 0, NULL, NULL);
	const char *b = "{\"filename\":\"a.bin\"}";
	cr_expect_neq(serve_llama_slot_action(&op, &name, "0", "save", b, strlen(b), &in, &e), 0);
	cr_expect_eq(e.status, 501);
	cr_expect(strstr(e.message, "--slot-save-path"), "the option is named: %s", e.message);
	cr_expect_eq(serve_llama_slot_action(&op, &name, "1", "erase", "", 0, &in, &e), 0);
	cr_expect_eq(op.action, SERVE_SLOT_ERASE);
	cr_expect_eq(op.slot, 1);
	in.slot_save_dir = "/srv/slots";
	cr_assert_eq(serve_llama_slot_action(&op, &name, "1", "restore", b, strlen(b), &in, &e), 0, "%s", e.message);
	cr_expect_eq(op.action, SERVE_SLOT_RESTORE);
	cr_expect_str_eq(op.path, "/srv/slots/a.bin");
	cr_expect_str_eq(name, "a.bin");
	free(name);
	serve_slot_op_destroy(&op);
	static const char *const ok[] = { "a.bin", "slot 0.bin", "é.bin", ".hidden" };
	static const char *const no[] = { "", "..", "../a", "a/b", "a\\b", "x..y", "a\nb", "/etc/passwd" };
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		cr_expect(serve_llama_filename_ok(ok[i]), "%s", ok[i]);
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
		cr_expect(!serve_llama_filename_ok(no[i]), "%s", no[i]);
}
