/*
 * fuzz_serve_llama — the bodies of llama-server's routes on colibri serve
 * (engine/serve/serve_llama.c): a /completion body
 * (serve_llama_completion_parse, which rewrites it into the OpenAI request
 * serve_request_parse then reads), and a POST /slots/{id}?action=A body
 * with the path's id and the query's action (serve_llama_slot_action).
 *
 * Input: one byte choosing the parser (even: /completion; odd: the slot
 * action, whose id and action are the first two lines of what follows,
 * then the body). The limits are fixed: max_tokens at most 64, a
 * vocabulary of 1000 ids, 3 slots, the slot folder "/slots".
 *
 * Beyond "no crash": a refused body leaves a 4xx/5xx status and a message,
 * and empty requests; an accepted /completion holds n_predict >= -1,
 * n_probs in [0, BATCH_LOGPROBS_MAX] with logprobs asked exactly when it
 * is above 0, id_slot in [-1, 2], a prompt that is text xor ids (text ""
 * when the prompt is mixed, which is then a JSON array of strings and
 * integers), at most one of grammar and json_schema, each valid UTF-8.
 * An accepted slot action names a slot in [0, 2], and for save and
 * restore a path in the folder whose name passes serve_llama_filename_ok.
 */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <string.h>

#include "engine/serve/serve_llama.h"
#include "tests/fuzz/fuzz_util.h"

static void completion(const char *body, size_t len)
{
	struct serve_limits lim = { .max_tokens_cap = 64, .vocab = 1000, .temp = 1, .top_p = 1, .top_k = 0 };
	struct serve_request q;
	struct serve_llama_completion x;
	struct serve_error err = { 0 };
	if (serve_llama_completion_parse(&q, &x, body, len, &lim, 3, &err) != 0) {
		FUZZ_ASSERT(err.status >= 400 && err.status < 600 && err.message[0], "refused without a status or message");
		FUZZ_ASSERT(!q.prompt && !q.prompt_ids && !x.mixed && !x.grammar && !x.json_schema, "a refused request holds data");
		serve_request_free(&q);
		serve_llama_completion_free(&x);
		return;
	}
	FUZZ_ASSERT(q.endpoint == SERVE_COMPLETION, "endpoint");
	FUZZ_ASSERT(x.n_predict >= -1, "n_predict %d", x.n_predict);
	FUZZ_ASSERT(x.n_probs >= 0 && x.n_probs <= BATCH_LOGPROBS_MAX, "n_probs %d", x.n_probs);
	FUZZ_ASSERT(q.p.logprobs == (x.n_probs > 0) && q.p.top_logprobs == x.n_probs, "logprobs");
	FUZZ_ASSERT(x.id_slot >= -1 && x.id_slot <= 2, "id_slot %d", x.id_slot);
	FUZZ_ASSERT(!q.prompt != !q.prompt_ids, "prompt: text xor ids");
	FUZZ_ASSERT(!q.prompt || serve_utf8_valid(q.prompt, strlen(q.prompt)), "prompt UTF-8");
	for (int i = 0; i < q.n_prompt_ids; i++)
		FUZZ_ASSERT(q.prompt_ids[i] >= 0 && q.prompt_ids[i] < 1000, "prompt id %d", i);
	if (x.mixed) {
		FUZZ_ASSERT(q.prompt && !q.prompt[0], "a mixed prompt leaves \"\"");
		cJSON *a = cJSON_Parse(x.mixed);
		FUZZ_ASSERT(cJSON_IsArray(a), "mixed is an array");
		for (const cJSON *e = a->child; e; e = e->next)
			FUZZ_ASSERT(cJSON_IsString(e) || (cJSON_IsNumber(e) && e->valuedouble >= 0), "mixed element");
		cJSON_Delete(a);
	}
	FUZZ_ASSERT(!(x.grammar && x.json_schema), "grammar and json_schema");
	FUZZ_ASSERT(!x.grammar || (x.grammar[0] && serve_utf8_valid(x.grammar, strlen(x.grammar))), "grammar UTF-8");
	FUZZ_ASSERT(!x.json_schema || serve_utf8_valid(x.json_schema, strlen(x.json_schema)), "json_schema UTF-8");
	FUZZ_ASSERT(serve_llama_n_predict(&x, 100, 64) >= 0 && serve_llama_n_predict(&x, 100, 64) <= 64, "n_predict");
	serve_request_free(&q);
	serve_llama_completion_free(&x);
}

static void slot_action(const char *in, size_t len)
{
	struct serve_limits lim = { 0 };
	struct serve_llama_info info = { .model_id = "m", .n_slots = 3, .lim = &lim, .slot_save_dir = "/slots" };
	char id[32] = "", action[32] = "";
	const char *nl = memchr(in, '\n', len), *nl2 = nl ? memchr(nl + 1, '\n', len - (size_t)(nl + 1 - in)) : NULL;
	if (!nl2)
		return;
	snprintf(id, sizeof id, "%.*s", (int)(nl - in), in);
	snprintf(action, sizeof action, "%.*s", (int)(nl2 - nl - 1), nl + 1);
	struct serve_slot_op op;
	struct serve_error err = { 0 };
	char *name = NULL;
	serve_slot_op_init(&op, SERVE_SLOT_LIST, 0, NULL, NULL);
	if (serve_llama_slot_action(&op, &name, id, action, nl2 + 1, len - (size_t)(nl2 + 1 - in), &info, &err) != 0) {
		FUZZ_ASSERT(err.status >= 400 && err.status < 600 && err.message[0], "refused without a status or message");
	} else {
		FUZZ_ASSERT(op.slot >= 0 && op.slot <= 2, "slot %d", op.slot);
		if (op.action != SERVE_SLOT_ERASE) {
			FUZZ_ASSERT(name && serve_llama_filename_ok(name), "file name");
			FUZZ_ASSERT(!strncmp(op.path, "/slots/", 7) && !strcmp(op.path + 7, name), "path in the folder");
			FUZZ_ASSERT(!strchr(name, '/') && !strstr(name, ".."), "no way out of the folder");
		}
	}
	free(name);
	serve_slot_op_destroy(&op);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 1)
		slot_action((const char *)data + 1, size - 1);
	else
		completion((const char *)data + 1, size - 1);
	return 0;
}
