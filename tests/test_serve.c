/*
 * test_serve — the OpenAI API of `colibri serve` (engine/serve/) on the
 * qwen3_moe_tok fixture (a tiny Qwen3-MoE with the real Qwen3 tokenizer and
 * chat template), driven with curl (tests/serve_util.h):
 *  - GET /v1/models, /v1/models/{id}, /health, /metrics (Prometheus format);
 *  - chat, non-streamed and streamed (usage, finish_reason, the same text
 *    both ways), stop strings (the text before the stop, not the stop),
 *    logprobs in OpenAI's shape, seeded sampling reproducible;
 *  - /v1/completions: text and token-list prompts, echo, logprobs, the
 *    repetition penalty under vLLM's and llama-server's names;
 *  - tools and tool calls reach the model's template: the same prompt
 *    tokens, tokens and logprobs as a completion of Jinja2's render;
 *  - --chat-template-file replaces the model's template;
 *  - errors in OpenAI's shape: 400 naming the field, 401, 404, 405, 413;
 *  - the official openai npm client (tests/serve/openai_client.mjs).
 * Scheduling and sessions: test_serve_batch.c; hostile input:
 * test_serve_hostile.c; the text pipeline alone: test_serve_text.c.
 * The suite runs it against build/colibri and build-asan/colibri.
 */
#include "tests/serve_util.h"

Test(serve, models_health_metrics)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	cJSON *j = http_json(&s, "GET", "/v1/models", NULL, 200);
	cr_expect_str_eq(str_at(j, "object"), "list");
	cr_expect_str_eq(str_at(j, "data.0.id"), "serve-qwen3_moe_tok", "the default id is the folder's name");
	cr_expect_str_eq(str_at(j, "data.0.object"), "model");
	cJSON_Delete(j);
	j = http_json(&s, "GET", "/v1/models/serve-qwen3_moe_tok", NULL, 200);
	cr_expect_str_eq(str_at(j, "id"), "serve-qwen3_moe_tok");
	cJSON_Delete(j);
	j = http_json(&s, "GET", "/health", NULL, 200);
	cr_expect_str_eq(str_at(j, "status"), "ok");
	cJSON_Delete(j);
	char body[512];
	chat_body(body, sizeof body, "Hi", 4, NULL);
	free(chat_text(&s, body, NULL));
	char *text = NULL;
	cr_assert_eq(http(&s, "GET", "/metrics", NULL, NULL, &text), 200);
	/* Every line a comment or "name{labels} value". */
	int samples = 0;
	for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		cr_assert(nl, "the exposition must end with a newline");
		*nl = 0;
		if (line[0] == '#') {
			cr_expect(!strncmp(line, "# HELP colibri_", 15) || !strncmp(line, "# TYPE colibri_", 15), "%s", line);
			continue;
		}
		char *sp = strrchr(line, ' ');
		cr_assert(sp, "%s", line);
		char *end;
		strtod(sp + 1, &end);
		cr_expect(*end == 0 && sp[1], "a sample without a number: %s", line);
		cr_expect(!strncmp(line, "colibri_", 8), "%s", line);
		samples++;
	}
	free(text);
	cr_expect_gt(samples, 20);
	static const char *const names[] = {
		"colibri_generated_tokens_total", "colibri_prompt_tokens_total{kind=\"prefilled\"}",
		"colibri_prompt_tokens_total{kind=\"cached\"}", "colibri_tokens_per_second",
		"colibri_time_to_first_token_seconds_count", "colibri_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
		"colibri_queue_length", "colibri_active_slots", "colibri_expert_hit_rate",
		"colibri_expert_read_bytes_total", "colibri_disk_gigabytes_per_second",
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		cr_expect_geq(metric(&s, names[i]), 0, "%s missing", names[i]);
	cr_expect_eq(metric(&s, "colibri_generated_tokens_total"), 4);
	cr_expect_eq(metric(&s, "colibri_time_to_first_token_seconds_count"), 1);
	cr_expect_gt(metric(&s, "colibri_expert_read_bytes_total"), 0);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve, chat_stream_logprobs_usage)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	char body[1024];
	chat_body(body, sizeof body, "Hello there", 10, "\"logprobs\":true,\"top_logprobs\":3");
	cJSON *j;
	char *text = chat_text(&s, body, &j);
	cr_expect_str_eq(str_at(j, "object"), "chat.completion");
	cr_expect(!strncmp(str_at(j, "id"), "chatcmpl-", 9));
	cr_expect_str_eq(str_at(j, "choices.0.message.role"), "assistant");
	cr_expect_str_eq(str_at(j, "choices.0.finish_reason"), "length");
	cr_expect_eq(num_at(j, "usage.completion_tokens"), 10);
	double prompt = num_at(j, "usage.prompt_tokens");
	cr_expect_gt(prompt, 3);
	cr_expect_eq(num_at(j, "usage.total_tokens"), prompt + 10);
	cr_expect_eq(num_at(j, "usage.prompt_tokens_details.cached_tokens"), 0);
	const cJSON *lp = at(j, "choices.0.logprobs.content");
	cr_assert(cJSON_IsArray(lp));
	cr_expect_eq(cJSON_GetArraySize(lp), 10);
	for (int k = 0; k < cJSON_GetArraySize(lp); k++) {
		const cJSON *e = cJSON_GetArrayItem(lp, k);
		cr_expect(cJSON_IsString(at(e, "token")) && cJSON_IsArray(at(e, "bytes")));
		double l = num_at(e, "logprob");
		cr_expect(l <= 0);
		const cJSON *top = at(e, "top_logprobs");
		cr_expect_eq(cJSON_GetArraySize(top), 3);
		/* Greedy: the chosen token is the most likely one. */
		cr_expect_eq(num_at(top, "0.logprob"), l);
		cr_expect_str_eq(str_at(top, "0.token"), str_at(e, "token"));
		cr_expect(num_at(top, "1.logprob") <= l && num_at(top, "2.logprob") <= num_at(top, "1.logprob"));
	}
	cJSON_Delete(j);

	/* Streamed: the same text in deltas, finish_reason, the usage chunk. */
	chat_body(body, sizeof body, "Hello there", 10, "\"stream\":true,\"stream_options\":{\"include_usage\":true}");
	char *resp = NULL;
	cr_assert_eq(http(&s, "POST", "/v1/chat/completions", body, NULL, &resp), 200);
	cJSON *ev = sse_events(resp);
	free(resp);
	int n = cJSON_GetArraySize(ev);
	cr_assert_geq(n, 3);
	cr_expect_str_eq(str_at(ev, "0.choices.0.delta.role"), "assistant");
	char joined[4096] = "";
	const char *finish = NULL;
	const cJSON *usage = NULL;
	for (int k = 0; k < n; k++) {
		const cJSON *e = cJSON_GetArrayItem(ev, k);
		cr_expect_str_eq(str_at(e, "object"), "chat.completion.chunk");
		const cJSON *c = at(e, "choices.0.delta.content");
		if (cJSON_IsString(c))
			strncat(joined, c->valuestring, sizeof joined - strlen(joined) - 1);
		const cJSON *f = at(e, "choices.0.finish_reason");
		if (cJSON_IsString(f))
			finish = f->valuestring;
		if (cJSON_IsObject(at(e, "usage")))
			usage = at(e, "usage");
	}
	cr_expect_str_eq(joined, text, "streamed text differs from the non-streamed one");
	cr_expect(finish && !strcmp(finish, "length"));
	cr_assert(usage, "no usage chunk");
	cr_expect_eq(num_at(usage, "completion_tokens"), 10);
	cr_expect_eq(num_at(usage, "prompt_tokens"), prompt);
	cr_expect_eq(num_at(usage, "prompt_tokens_details.cached_tokens"), prompt - 1, "the same prompt again: cached");
	cr_expect_eq(cJSON_GetArraySize(at(cJSON_GetArrayItem(ev, n - 1), "choices")), 0);
	cJSON_Delete(ev);
	free(text);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve, stop_strings_and_seeds)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	char body[1024];
	chat_body(body, sizeof body, "Count with me", 24, NULL);
	char *text = chat_text(&s, body, NULL);
	size_t len = strlen(text);
	cr_assert_gt(len, 12, "%s", text);
	/* A stop string from the middle of the greedy text: 3 ASCII bytes. */
	size_t at3 = len / 2;
	while (at3 + 3 < len && ((unsigned char)text[at3] >= 0x80 || (unsigned char)text[at3 + 1] >= 0x80 ||
				 (unsigned char)text[at3 + 2] >= 0x80 || text[at3] == '"' || text[at3] == '\\' ||
				 text[at3 + 1] == '"' || text[at3 + 1] == '\\' || text[at3 + 2] == '"' ||
				 text[at3 + 2] == '\\' || (unsigned char)text[at3] < 0x20 || (unsigned char)text[at3 + 1] < 0x20 ||
				 (unsigned char)text[at3 + 2] < 0x20))
		at3++;
	cr_assert(at3 + 3 < len, "no ASCII run in %s", text);
	char stop[4] = { text[at3], text[at3 + 1], text[at3 + 2], 0 };
	size_t first = (size_t)(strstr(text, stop) - text);
	char more[128];
	snprintf(more, sizeof more, "\"stop\":[\"zzzzqqq\",\"%s\"]", stop);
	chat_body(body, sizeof body, "Count with me", 24, more);
	cJSON *j;
	char *cut = chat_text(&s, body, &j);
	cr_expect_eq(strlen(cut), first, "stop \"%s\": \"%s\" of \"%s\"", stop, cut, text);
	cr_expect_eq(strncmp(cut, text, first), 0);
	cr_expect_str_eq(str_at(j, "choices.0.finish_reason"), "stop");
	cr_expect_lt(num_at(j, "usage.completion_tokens"), 24);
	cJSON_Delete(j);
	/* Streamed, the stop string as a plain string. */
	snprintf(more, sizeof more, "\"stop\":\"%s\",\"stream\":true", stop);
	chat_body(body, sizeof body, "Count with me", 24, more);
	char *resp = NULL;
	cr_assert_eq(http(&s, "POST", "/v1/chat/completions", body, NULL, &resp), 200);
	cJSON *ev = sse_events(resp);
	free(resp);
	char joined[4096] = "";
	const char *finish = NULL;
	for (int k = 0; k < cJSON_GetArraySize(ev); k++) {
		const cJSON *c = at(cJSON_GetArrayItem(ev, k), "choices.0.delta.content");
		const cJSON *f = at(cJSON_GetArrayItem(ev, k), "choices.0.finish_reason");
		if (cJSON_IsString(c))
			strncat(joined, c->valuestring, sizeof joined - strlen(joined) - 1);
		if (cJSON_IsString(f))
			finish = f->valuestring;
	}
	cr_expect_str_eq(joined, cut, "the stream holds back a partial stop string the same way");
	cr_expect(finish && !strcmp(finish, "stop"));
	cJSON_Delete(ev);
	free(cut);
	free(text);

	/* Seeded sampling: the same seed, the same text; another seed, another. */
	const char *sampled = "\"temperature\":1.5,\"top_p\":0.95,\"top_k\":50,\"seed\":";
	char a[1024], b[1024];
	snprintf(more, sizeof more, "%s42", sampled);
	snprintf(a, sizeof a, "{\"messages\":[{\"role\":\"user\",\"content\":\"Pick words\"}],\"max_tokens\":16,%s}", more);
	snprintf(more, sizeof more, "%s43", sampled);
	snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":\"Pick words\"}],\"max_tokens\":16,%s}", more);
	char *t1 = chat_text(&s, a, NULL), *t2 = chat_text(&s, a, NULL), *t3 = chat_text(&s, b, NULL);
	cr_expect_str_eq(t1, t2, "seed 42 twice gave different texts");
	cr_expect_str_neq(t1, t3, "seeds 42 and 43 gave the same text");
	free(t1);
	free(t2);
	free(t3);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve, completions)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	cJSON *j = http_json(&s, "POST", "/v1/completions",
			     "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"temperature\":0,\"logprobs\":2}", 200);
	cr_expect_str_eq(str_at(j, "object"), "text_completion");
	cr_expect(!strncmp(str_at(j, "id"), "cmpl-", 5));
	char *text = strdup(str_at(j, "choices.0.text"));
	cr_expect_eq(num_at(j, "usage.completion_tokens"), 6);
	const cJSON *lp = at(j, "choices.0.logprobs");
	cr_expect_eq(cJSON_GetArraySize(at(lp, "tokens")), 6);
	cr_expect_eq(cJSON_GetArraySize(at(lp, "token_logprobs")), 6);
	cr_expect_eq(cJSON_GetArraySize(at(lp, "top_logprobs.0")), 2);
	cr_expect_eq(num_at(lp, "text_offset.0"), 0);
	int n_prompt = (int)num_at(j, "usage.prompt_tokens");
	cJSON_Delete(j);
	/* echo puts the prompt in front. */
	j = http_json(&s, "POST", "/v1/completions",
		      "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"temperature\":0,\"echo\":true}", 200);
	char want[1024];
	snprintf(want, sizeof want, "Once upon a time%s", text);
	cr_expect_str_eq(str_at(j, "choices.0.text"), want);
	cJSON_Delete(j);
	/* The prompt as token ids: the ids colibri tokenize gives. */
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/ids.txt", ws);
	cr_assert_eq(cli_run(ws, out, "tokenize --model '%s' --text 'Once upon a time'", model), 0);
	char *ids = tu_read(out, NULL);
	ids[strcspn(ids, "\n")] = 0;
	char body[1024];
	snprintf(body, sizeof body, "{\"prompt\":[%s],\"max_tokens\":6,\"temperature\":0}", ids);
	j = http_json(&s, "POST", "/v1/completions", body, 200);
	cr_expect_str_eq(str_at(j, "choices.0.text"), text, "ids %s", ids);
	cr_expect_eq(num_at(j, "usage.prompt_tokens"), n_prompt);
	cJSON_Delete(j);
	/* The repetition penalty under vLLM's and llama-server's names (issue
	 * 39): the same greedy text either way, another than without, and
	 * without again over a window of 0 tokens. Below 1 it rewards the
	 * prompt's tokens, which the random fixture's text never repeats. */
	static const char *const repeat[] = { "\"repetition_penalty\":0.05", "\"repeat_penalty\":0.05",
					      "\"repeat_penalty\":0.05,\"repeat_last_n\":0" };
	char *penalised = NULL;
	for (int k = 0; k < 3; k++) {
		snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"temperature\":0,%s}",
			 repeat[k]);
		j = http_json(&s, "POST", "/v1/completions", body, 200);
		const char *t = str_at(j, "choices.0.text");
		if (k == 0)
			cr_expect_str_neq((penalised = strdup(t)), text, "%s changed nothing", repeat[k]);
		else
			cr_expect_str_eq(t, k == 1 ? penalised : text, "%s", repeat[k]);
		cJSON_Delete(j);
	}
	free(penalised);
	/* Streamed. */
	char *resp = NULL;
	cr_assert_eq(http(&s, "POST", "/v1/completions",
			  "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"temperature\":0,\"stream\":true}", NULL, &resp),
		     200);
	cJSON *ev = sse_events(resp);
	char joined[2048] = "";
	for (int k = 0; k < cJSON_GetArraySize(ev); k++) {
		cr_expect_str_eq(str_at(cJSON_GetArrayItem(ev, k), "object"), "text_completion");
		const cJSON *t = at(cJSON_GetArrayItem(ev, k), "choices.0.text");
		if (cJSON_IsString(t))
			strncat(joined, t->valuestring, sizeof joined - strlen(joined) - 1);
	}
	cr_expect_str_eq(joined, text);
	cJSON_Delete(ev);
	free(resp);
	free(ids);
	free(text);
	cr_expect_eq(srv_stop(&s), 0);
}

/* The conversation and tools of tests/chat_templates/expected.json's case
 * `name` for qwen3.jinja (the fixture's template), and what Jinja2 renders. */
static cJSON *template_case(const char *name, cJSON **messages, cJSON **tools, const char **expected)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/tests/chat_templates/expected.json", tu_repo());
	char *text = tu_read(path, NULL);
	cr_assert(text, "%s is missing", path);
	cJSON *d = cJSON_Parse(text);
	free(text);
	cr_assert(d);
	const cJSON *cases = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "templates"), "qwen3.jinja"), "cases");
	const cJSON *c = NULL;
	for (c = cases ? cases->child : NULL; c; c = c->next)
		if (!strcmp(str_at(c, "name"), name))
			break;
	cr_assert(c, "no case '%s' in %s", name, path);
	int conv = (int)num_at(c, "conversation");
	*messages = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "conversations"), conv),
						     "messages");
	*tools = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "tools")) ? cJSON_GetObjectItemCaseSensitive(d, "tools") : NULL;
	*expected = str_at(c, "expected");
	return d;
}

/* Tools and tool calls reach the model's own template: a chat request with
 * them (arguments as JSON text, as OpenAI clients send them) is the
 * completion of what Jinja2 renders for the same conversation with object
 * arguments: same prompt tokens, same greedy tokens and logprobs. */
/* --chat-template-file (llama.cpp's name, issue 39, item 4): the server
 * renders chats with that Jinja text instead of the model's Qwen3 template,
 * so a chat of "Hi" is the completion of "<<Hi>>" (the same prompt tokens
 * and greedy text), and /props reports the template in effect. */
Test(serve, chat_template_file)
{
	NEED_FIXTURE();
	static const char tmpl[] = "{% for m in messages %}<<{{ m.content }}>>{% endfor %}";
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/t.jinja", ws);
	cr_assert_eq(tu_write(path, tmpl, strlen(tmpl)), 0);
	struct srv s;
	srv_start(&s, "--chat-template-file '%s'", path);
	char body[512];
	chat_body(body, sizeof body, "Hi", 4, NULL);
	cJSON *chat = NULL;
	char *text = chat_text(&s, body, &chat);
	cJSON *j = http_json(&s, "POST", "/v1/completions", "{\"prompt\":\"<<Hi>>\",\"max_tokens\":4,\"temperature\":0}",
			     200);
	cr_expect_str_eq(text, str_at(j, "choices.0.text"), "the chat was not rendered with --chat-template-file");
	cr_expect_eq(num_at(chat, "usage.prompt_tokens"), num_at(j, "usage.prompt_tokens"));
	cJSON_Delete(j);
	j = http_json(&s, "GET", "/props", NULL, 200);
	cr_expect_str_eq(str_at(j, "chat_template"), tmpl);
	cJSON_Delete(j);
	cJSON_Delete(chat);
	free(text);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve, tools_reach_the_template)
{
	NEED_FIXTURE();
	cJSON *msgs, *tools;
	const char *expected;
	cJSON *d = template_case("tool calls with object arguments, tools", &msgs, &tools, &expected);
	cr_assert(tools && msgs);
	cJSON *m = cJSON_Duplicate(msgs, 1);
	for (cJSON *x = m->child; x; x = x->next) {
		cJSON *calls = cJSON_GetObjectItemCaseSensitive(x, "tool_calls");
		for (cJSON *c = calls ? calls->child : NULL; c; c = c->next) {
			cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
			char *args = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(fn, "arguments"));
			cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", cJSON_CreateString(args));
			free(args);
		}
	}
	cJSON *chat = cJSON_CreateObject(), *cmpl = cJSON_CreateObject();
	cJSON_AddItemToObject(chat, "messages", m);
	cJSON_AddItemToObject(chat, "tools", cJSON_Duplicate(tools, 1));
	cJSON_AddNumberToObject(chat, "max_tokens", 4);
	cJSON_AddNumberToObject(chat, "temperature", 0);
	cJSON_AddTrueToObject(chat, "logprobs");
	cJSON_AddStringToObject(cmpl, "prompt", expected);
	cJSON_AddNumberToObject(cmpl, "max_tokens", 4);
	cJSON_AddNumberToObject(cmpl, "temperature", 0);
	cJSON_AddNumberToObject(cmpl, "logprobs", 1);
	char *chat_s = cJSON_PrintUnformatted(chat), *cmpl_s = cJSON_PrintUnformatted(cmpl);
	struct srv s;
	srv_start(&s, "%s", "");
	cJSON *a = http_json(&s, "POST", "/v1/chat/completions", chat_s, 200);
	cJSON *b = http_json(&s, "POST", "/v1/completions", cmpl_s, 200);
	cr_expect_eq(num_at(a, "usage.prompt_tokens"), num_at(b, "usage.prompt_tokens"));
	const cJSON *la = at(a, "choices.0.logprobs.content"), *lb = at(b, "choices.0.logprobs.token_logprobs");
	cr_assert_eq(cJSON_GetArraySize(la), 4);
	cr_assert_eq(cJSON_GetArraySize(lb), 4);
	for (int k = 0; k < 4; k++) {
		cr_expect_str_eq(str_at(cJSON_GetArrayItem(la, k), "token"),
				 cJSON_GetArrayItem(at(b, "choices.0.logprobs.tokens"), k)->valuestring);
		cr_expect_eq(num_at(cJSON_GetArrayItem(la, k), "logprob"), cJSON_GetArrayItem(lb, k)->valuedouble, "token %d", k);
	}
	/* Without the tools the prompt is shorter: the template wrote them. */
	cJSON_DeleteItemFromObject(chat, "tools");
	free(chat_s);
	chat_s = cJSON_PrintUnformatted(chat);
	cJSON *c = http_json(&s, "POST", "/v1/chat/completions", chat_s, 200);
	cr_expect_lt(num_at(c, "usage.prompt_tokens") + 50, num_at(a, "usage.prompt_tokens"));
	/* Other template variables are passed on; Qwen3's template reads none of these. */
	cJSON_AddItemToObject(chat, "chat_template_kwargs", cJSON_Parse("{\"reasoning_effort\":\"high\",\"x\":[1]}"));
	char *kw_s = cJSON_PrintUnformatted(chat);
	cJSON *k = http_json(&s, "POST", "/v1/chat/completions", kw_s, 200);
	cr_expect_eq(num_at(k, "usage.prompt_tokens"), num_at(c, "usage.prompt_tokens"));
	cJSON_Delete(k);
	free(kw_s);
	/* A null content reaches the template as None, where Jinja2 fails too
	 * ("argument of type 'NoneType' is not iterable"): a 400 naming messages. */
	expect_error(&s, "POST", "/v1/chat/completions",
		     "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":null}],"
		     "\"max_tokens\":1}",
		     NULL, 400, "messages");
	cJSON_Delete(a);
	cJSON_Delete(b);
	cJSON_Delete(c);
	cJSON_Delete(chat);
	cJSON_Delete(cmpl);
	cJSON_Delete(d);
	free(chat_s);
	free(cmpl_s);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve, bad_requests)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "--max-body 64K --max-tokens 100");
	const char *chat = "/v1/chat/completions";
	const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
	static const struct {
		const char *fields, *param;
	} bad[] = {
		{ "\"temperature\":\"hot\"", "temperature" },     { "\"temperature\":3", "temperature" },
		{ "\"top_p\":0", "top_p" },                       { "\"top_k\":1.5", "top_k" },
		{ "\"max_tokens\":0", "max_tokens" },             { "\"max_tokens\":101", "max_tokens" },
		{ "\"max_completion_tokens\":\"9\"", "max_completion_tokens" },
		{ "\"seed\":\"x\"", "seed" },                     { "\"stop\":7", "stop" },
		{ "\"stop\":[\"a\",3]", "stop[1]" },              { "\"stop\":\"\"", "stop" },
		{ "\"presence_penalty\":-3", "presence_penalty" }, { "\"frequency_penalty\":true", "frequency_penalty" },
		{ "\"logprobs\":1", "logprobs" },                 { "\"top_logprobs\":3", "top_logprobs" },
		{ "\"logprobs\":true,\"top_logprobs\":21", "top_logprobs" },
		{ "\"stream\":\"yes\"", "stream" },               { "\"stream_options\":{\"include_usage\":1}", "stream_options.include_usage" },
		{ "\"n\":2", "n" },                               { "\"model\":5", "model" },
		{ "\"tools\":{}", "tools" },                     { "\"tools\":[{\"type\":\"function\"}]", "tools[0].function" },
		{ "\"tools\":[{\"type\":\"code\",\"function\":{\"name\":\"f\"}}]", "tools[0].type" },
		{ "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]", "tools[0].function.name" },
		{ "\"response_format\":{\"type\":\"xml\"}", "response_format.type" },
		{ "\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}", "chat_template_kwargs.enable_thinking" },
		{ "\"chat_template_kwargs\":{\"messages\":[]}", "chat_template_kwargs.messages" },
		{ "\"chat_template_kwargs\":{\"x\":1,\"enable_thinking\":\"no\"}", "chat_template_kwargs.enable_thinking" },
		{ "\"chat_template_kwargs\":{\"tools\":null}", "chat_template_kwargs.tools" },
		{ "\"logit_bias\":{\"5\":1}", "logit_bias" },
		{ "\"min_p\":1.5", "min_p" },                    { "\"repetition_penalty\":0", "repetition_penalty" },
		{ "\"repeat_penalty\":1e-300", "repeat_penalty" }, { "\"repeat_last_n\":-2", "repeat_last_n" },
		{ "\"repetition_penalty\":1.1,\"repeat_penalty\":1.2", "repeat_penalty" },
		{ "\"temperature\":0.5,\"temperature\":1.9", "temperature" },
	};
	char body[1024];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(body, sizeof body, "{%s,%s}", msgs, bad[i].fields);
		expect_error(&s, "POST", chat, body, NULL, 400, bad[i].param);
	}
	/* What the client sent is quoted, but the answer stays valid UTF-8: a lone
	 * byte, and a two-byte character cut by the message's %.40s. */
	static const char *const quoting[] = {
		"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"\xff\xfe\"}}",
		"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
		"\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9\"}}",
	};
	for (size_t i = 0; i < sizeof quoting / sizeof quoting[0]; i++) {
		char *resp = NULL;
		cr_expect_eq(http(&s, "POST", chat, quoting[i], NULL, &resp), 400);
		cr_expect(resp && serve_utf8_valid(resp, strlen(resp)), "not UTF-8: %s", resp ? resp : "");
		free(resp);
	}
	expect_error(&s, "POST", chat, "{}", NULL, 400, "messages");
	expect_error(&s, "POST", chat, "{\"messages\":[]}", NULL, 400, "messages");
	expect_error(&s, "POST", chat, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", NULL, 400,
		     "messages[0].role");
	expect_error(&s, "POST", chat, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", NULL, 400,
		     "messages[0].content");
	/* A key given twice means the first value to cJSON and the last to
	 * Python or JavaScript: refused at any depth, naming where. */
	expect_error(&s, "POST", chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"content\":\"b\"}]}",
		     NULL, 400, "messages[0].content");
	expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"prompt\":\"b\"}", NULL, 400, "prompt");
	expect_error(&s, "POST", chat,
		     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}", NULL,
		     400, "messages[0].content[0].type");
	expect_error(&s, "POST", chat,
		     "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"1\"}]}]}", NULL,
		     400, "messages[0].tool_calls[0].function");
	expect_error(&s, "POST", chat,
		     "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\","
		     "\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]}",
		     NULL, 400, "messages[0].tool_calls[0].function.arguments");
	expect_error(&s, "POST", chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":100,"
				       "\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\","
				       "\"m\",\"n\",\"o\",\"p\",\"q\"]}", NULL, 400, "stop");
	expect_error(&s, "POST", chat, "[1,2]", NULL, 400, NULL);
	expect_error(&s, "POST", chat, "{\"messages\":", NULL, 400, NULL);
	expect_error(&s, "POST", "/v1/completions", "{\"prompt\":[1,2,99999999]}", NULL, 400, "prompt");
	expect_error(&s, "POST", "/v1/completions", "{\"prompt\":[\"a\",\"b\"]}", NULL, 400, "prompt");
	expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"echo\":true,\"logprobs\":1}", NULL, 400, "logprobs");
	expect_error(&s, "POST", "/v1/completions", "{\"max_tokens\":3}", NULL, 400, "prompt");
	/* A prompt longer than the context (512 positions). */
	size_t big = 40000;
	char *lng = malloc(big + 256);
	strcpy(lng, "{\"prompt\":\"");
	for (size_t k = strlen(lng); k < big; k += 4)
		memcpy(lng + k, " ab.", 4);
	strcpy(lng + big, "\",\"max_tokens\":5}");
	expect_error(&s, "POST", "/v1/completions", lng, NULL, 400, "prompt");
	free(lng);
	/* 404: path, model; 405; 413. */
	expect_error(&s, "GET", "/v1/nothing", NULL, NULL, 404, NULL);
	expect_error(&s, "GET", "/v1/models/other", NULL, NULL, 404, "model");
	snprintf(body, sizeof body, "{%s,\"model\":\"other\"}", msgs);
	expect_error(&s, "POST", chat, body, NULL, 404, "model");
	expect_error(&s, "GET", chat, NULL, NULL, 405, NULL);
	expect_error(&s, "POST", "/v1/models", "{}", NULL, 405, NULL);
	expect_error(&s, "DELETE", "/health", NULL, NULL, 405, NULL);
	char *huge = malloc(100000);
	memset(huge, 'x', 99999);
	huge[99999] = 0;
	expect_error(&s, "POST", chat, huge, NULL, 413, NULL);
	/* Chunked: no Content-Length to refuse early. */
	expect_error(&s, "POST", chat, huge, "-H 'Transfer-Encoding: chunked'", 413, NULL);
	free(huge);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve, api_key)
{
	NEED_FIXTURE();
	char keyfile[PATH_MAX + 16];
	snprintf(keyfile, sizeof keyfile, "%s/key", ws);
	cr_assert_eq(tu_write(keyfile, "  s3cret-key \n", 14), 0);
	struct srv s;
	srv_start(&s, "--api-key-file '%s'", keyfile);
	expect_error(&s, "GET", "/v1/models", NULL, NULL, 401, NULL);
	expect_error(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer s3cret-kez'", 401, NULL);
	expect_error(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer s3cret-key2'", 401, NULL);
	expect_error(&s, "GET", "/v1/models", NULL, "-H 'Authorization: s3cret-key'", 401, NULL);
	expect_error(&s, "POST", "/v1/chat/completions", "{}", NULL, 401, NULL);
	expect_error(&s, "GET", "/metrics", NULL, NULL, 401, NULL);
	cr_expect_eq(http(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer s3cret-key'", NULL), 200);
	cr_expect_eq(http(&s, "GET", "/health", NULL, NULL, NULL), 200, "health needs no key");
	cr_expect_eq(srv_stop(&s), 0);
	/* No key: loopback only. */
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/nokey", ws);
	cr_expect_neq(cli_run(ws, out, "serve --model '%s' --host 0.0.0.0 --port 0", model), 0);
	char *err = cli_read_err(out);
	cr_expect(err && strstr(err, "--api-key") && strstr(err, "--insecure-no-key"), "%s", err ? err : "");
	free(err);
}

/* --parallel 1 --queue 0: a second request while one runs is refused with
 * 429 and Retry-After; the running client leaves, its slot is free again. */
Test(serve, openai_node_client)
{
	NEED_FIXTURE();
	char pkg[PATH_MAX + 64];
	snprintf(pkg, sizeof pkg, "%s/tools/node_modules/openai/package.json", tu_repo());
	if (tu_sh("node --version >/dev/null 2>&1") != 0 || access(pkg, F_OK) != 0)
		cr_skip_test("node or the openai package is missing (cd tools && npm install)");
	struct srv s;
	srv_start(&s, "%s", "--api-key test-key");
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/node.out", ws);
	int rc = tu_sh("node '%s/tests/serve/openai_client.mjs' http://127.0.0.1:%d/v1 serve-qwen3_moe_tok test-key "
		       ">'%s' 2>&1",
		       tu_repo(), s.port, out);
	char *log = tu_read(out, NULL);
	cr_expect_eq(rc, 0, "openai client:\n%s", log ? log : "");
	cr_expect(log && strstr(log, "all checks passed"), "%s", log ? log : "");
	cr_expect(log && strstr(log, "ok response_format json_schema") && strstr(log, "ok tool_choice required"),
		  "structured output and tool calls through the client: %s", log ? log : "");
	free(log);
	cr_expect_eq(srv_stop(&s), 0);
}

