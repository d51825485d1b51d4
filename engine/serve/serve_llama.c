/*
 * serve_llama — see serve_llama.h. A /completion body is checked for what
 * is llama-server's own, rewritten into the OpenAI body it means, and
 * parsed by serve_request_parse, so that the sampling fields and their
 * ranges are read in one place for both APIs.
 */
#include "engine/serve/serve_llama.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/json_get.h"
#include "base/strbuf.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/text/tokenizer.h"

/* ---- routes ---- */

enum serve_route serve_llama_route(const char *url, bool *post, const char **arg)
{
	static const struct {
		const char *url;
		enum serve_route route;
		bool post;
	} routes[] = {
		{ "/completion", SERVE_ROUTE_LLAMA_COMPLETION, true }, { "/completions", SERVE_ROUTE_LLAMA_COMPLETION, true },
		{ "/tokenize", SERVE_ROUTE_LLAMA_TOKENIZE, true },     { "/detokenize", SERVE_ROUTE_LLAMA_DETOKENIZE, true },
		{ "/props", SERVE_ROUTE_LLAMA_PROPS, false },          { "/slots", SERVE_ROUTE_LLAMA_SLOTS, false },
		{ "/v1/health", SERVE_ROUTE_HEALTH, false },
	};
	for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
		if (!strcmp(url, routes[i].url)) {
			*post = routes[i].post;
			return routes[i].route;
		}
	if (!strncmp(url, "/slots/", 7)) {
		*post = true;
		*arg = url + 7;
		return SERVE_ROUTE_LLAMA_SLOTS;
	}
	return SERVE_ROUTE_OTHER;
}

bool serve_llama_is_route(enum serve_route r)
{
	return r == SERVE_ROUTE_LLAMA_COMPLETION || r == SERVE_ROUTE_LLAMA_TOKENIZE || r == SERVE_ROUTE_LLAMA_DETOKENIZE ||
	       r == SERVE_ROUTE_LLAMA_PROPS || r == SERVE_ROUTE_LLAMA_SLOTS;
}

/* ---- errors ---- */

/* llama-server's error types (server-common.cpp, format_error_response). */
static const char *error_type(int status)
{
	switch (status) {
	case 401: return "authentication_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 501: return "not_supported_error";
	case 503: return "unavailable_error";
	default: return status >= 500 ? "server_error" : "invalid_request_error";
	}
}


static char *error_json(const struct serve_error *e)
{
	cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
	cJSON_AddNumberToObject(err, "code", e->status);
	cJSON_AddStringToObject(err, "message", e->message);
	cJSON_AddStringToObject(err, "type", error_type(e->status));
	return serve_json_print(o);
}

/* ---- reading fields ---- */

static const cJSON *field(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

static int int_field(const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *out, struct serve_error *err)
{
	const cJSON *v = field(o, key);
	if (v && json_int(v, lo, hi, out) != 0)
		return serve_error_set(err, 400, key, NULL, "'%s' must be an integer in [%lld, %lld]", key, (long long)lo,
				       (long long)hi);
	return 0;
}

static int bool_field(const cJSON *o, const char *key, bool *out, struct serve_error *err)
{
	const cJSON *v = field(o, key);
	if (v && !cJSON_IsBool(v))
		return serve_error_set(err, 400, key, NULL, "'%s' must be a boolean", key);
	if (v)
		*out = cJSON_IsTrue(v);
	return 0;
}

/*
 * Options of llama-server that colibri lacks, and the values that leave
 * each off: clients send them at those values (its web UI, SillyTavern),
 * so those pass; any other is refused.
 */
#define NOT_SAMPLED "colibri samples with temperature, top_k, top_p, min_p and the repeat, presence and frequency penalties"
static const struct {
	const char *key;
	double lo, hi;               /* off within [lo, hi] */
	const char *why;
} neutral[] = {
	{ "typical_p", 1, INFINITY, NOT_SAMPLED },
	{ "mirostat", 0, 0, NOT_SAMPLED },
	{ "dynatemp_range", -INFINITY, 0, NOT_SAMPLED },
	{ "dry_multiplier", -INFINITY, 0, NOT_SAMPLED },
	{ "xtc_probability", -INFINITY, 0, NOT_SAMPLED },
	{ "top_n_sigma", -INFINITY, 0, NOT_SAMPLED },
	{ "adaptive_target", -INFINITY, -1e-30, NOT_SAMPLED },
	{ "n_cmpl", 1, 1, "one completion per request" },
	{ "n", 1, 1, "one completion per request" },
};

static int check_neutral(const cJSON *o, struct serve_error *err)
{
	for (size_t i = 0; i < sizeof neutral / sizeof neutral[0]; i++) {
		const cJSON *v = field(o, neutral[i].key);
		if (!v)
			continue;
		if (!cJSON_IsNumber(v))
			return serve_error_set(err, 400, neutral[i].key, NULL, "'%s' must be a number", neutral[i].key);
		if (!(v->valuedouble >= neutral[i].lo && v->valuedouble <= neutral[i].hi))
			return serve_error_set(err, 400, neutral[i].key, NULL, "'%s' %g is not supported: %s", neutral[i].key,
					       v->valuedouble, neutral[i].why);
	}
	static const char *const off[] = { "ignore_eos", "post_sampling_probs" };
	for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
		bool on = false;
		int rc = bool_field(o, off[i], &on, err);
		if (rc)
			return rc;
		if (on)
			return serve_error_set(err, 400, off[i], NULL, "'%s' true is not supported", off[i]);
	}
	const cJSON *lora = field(o, "lora");
	if (lora && !(cJSON_IsArray(lora) && !lora->child))
		return serve_error_set(err, 400, "lora", NULL, "'lora' is not supported: colibri has no LoRA adapters");
	return 0;
}

/* Whether the array holds a number (llama-server: then it is one prompt). */
static bool has_number(const cJSON *a)
{
	for (const cJSON *e = a->child; e; e = e->next)
		if (cJSON_IsNumber(e))
			return true;
	return false;
}

/*
 * The prompt as llama-server reads it (tokenize_input_prompts): a string;
 * an array holding a number is one prompt of ids, or of ids and strings
 * mixed; any other array is a list of prompts, of which one is served
 * here; {"prompt_string": P} is P. A mixed prompt goes to x->mixed and
 * leaves "" for the OpenAI parser; the others stay for it to read.
 */
static int take_prompt(cJSON *o, struct serve_llama_completion *x, struct serve_error *err)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "prompt");
	if (!v || cJSON_IsNull(v))
		return serve_error_set(err, 400, "prompt", NULL, "'prompt' is required");
	if (cJSON_IsArray(v) && !has_number(v)) {
		int n = cJSON_GetArraySize(v);
		if (n != 1)
			return serve_error_set(err, 400, "prompt", NULL, n ? "several prompts in one request are not supported"
									    : "'prompt' must not be empty");
		v = v->child;
	}
	if (cJSON_IsObject(v)) {
		if (field(v, "multimodal_data"))
			return serve_error_set(err, 400, "prompt", NULL, "multimodal prompts are not supported");
		v = cJSON_GetObjectItemCaseSensitive(v, "prompt_string");
		if (!v || !(cJSON_IsString(v) || cJSON_IsArray(v)))
			return serve_error_set(err, 400, "prompt", NULL, "'prompt.prompt_string' must be a string or an array");
	}
	bool mixed = false;
	if (cJSON_IsArray(v)) {
		int i = 0;
		for (const cJSON *e = v->child; e; e = e->next, i++) {
			int64_t id;
			if (cJSON_IsString(e))
				mixed = true;
			else if (json_int(e, 0, INT32_MAX, &id) != 0)
				return serve_error_set(err, 400, "prompt", NULL, "prompt[%d] must be a token id or a string", i);
		}
	} else if (!cJSON_IsString(v)) {
		return serve_error_set(err, 400, "prompt", NULL,
				       "'prompt' must be a string, an array of token ids and strings, or an object");
	}
	cJSON *keep = mixed ? cJSON_CreateString("") : cJSON_Duplicate(v, 1);
	if (mixed && !(x->mixed = cJSON_PrintUnformatted(v))) {
		cJSON_Delete(keep);
		keep = NULL;
	}
	if (!keep || !cJSON_ReplaceItemInObjectCaseSensitive(o, "prompt", keep)) {
		cJSON_Delete(keep);
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	}
	return 0;
}

/* n_predict, or its aliases max_completion_tokens and max_tokens. */
static int take_n_predict(const cJSON *o, struct serve_llama_completion *x, struct serve_error *err)
{
	static const char *const keys[] = { "n_predict", "max_completion_tokens", "max_tokens" };
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		if (!field(o, keys[i]))
			continue;
		int64_t n = -1;
		int rc = int_field(o, keys[i], -1, INT32_MAX, &n, err);
		x->n_predict = (int)n;
		return rc;
	}
	return 0;
}

static int take_grammar(const cJSON *o, struct serve_llama_completion *x, struct serve_error *err)
{
	const cJSON *schema = field(o, "json_schema"), *g = field(o, "grammar");
	/* json_schema wins when both are given, as in llama-server. */
	if (schema) {
		if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
			return serve_error_set(err, 400, "json_schema", NULL,
					       "'json_schema' must be a JSON Schema (an object or a boolean)");
		if (!(x->json_schema = cJSON_PrintUnformatted(schema)))
			return serve_error_set(err, 500, NULL, NULL, "out of memory");
		if (!serve_utf8_valid(x->json_schema, strlen(x->json_schema)))
			return serve_error_set(err, 400, "json_schema", NULL, "'json_schema' is not valid UTF-8");
		return 0;
	}
	if (!g)
		return 0;
	if (!cJSON_IsString(g))
		return serve_error_set(err, 400, "grammar", NULL, "'grammar' must be a string of GBNF");
	if (!g->valuestring[0])
		return 0;
	if (!serve_utf8_valid(g->valuestring, strlen(g->valuestring)))
		return serve_error_set(err, 400, "grammar", NULL, "'grammar' is not valid UTF-8");
	if (!(x->grammar = strdup(g->valuestring)))
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	return 0;
}

/* Rewrites o, a /completion body, into the OpenAI /v1/completions body it
 * means, taking what is llama-server's own into x. */
static int translate(cJSON *o, struct serve_llama_completion *x, int n_slots, struct serve_error *err)
{
	int64_t v;
	int rc = take_prompt(o, x, err);
	if (rc || (rc = take_n_predict(o, x, err)) || (rc = check_neutral(o, err)) || (rc = take_grammar(o, x, err)))
		return rc;
	const char *probs = field(o, "n_probs") ? "n_probs" : "logprobs";
	v = 0;
	if ((rc = int_field(o, probs, 0, INT32_MAX, &v, err)))
		return rc;
	/* llama-server gives "at most n_probs" tokens: past the engine's limit, that many. */
	x->n_probs = v > BATCH_LOGPROBS_MAX ? BATCH_LOGPROBS_MAX : (int)v;
	v = -1;
	if ((rc = int_field(o, "id_slot", -1, n_slots - 1, &v, err)))
		return rc;
	x->id_slot = (int)v;
	if ((rc = bool_field(o, "cache_prompt", &x->cache_prompt, err)) ||
	    (rc = bool_field(o, "return_tokens", &x->return_tokens, err)))
		return rc;
	/* seed -1 is llama-server's "random". */
	const cJSON *seed = field(o, "seed");
	if (seed && cJSON_IsNumber(seed) && seed->valuedouble == -1)
		cJSON_DeleteItemFromObjectCaseSensitive(o, "seed");
	/* Clamped where llama-server clamps (its soft limits). */
	const cJSON *t = field(o, "temperature");
	if (t && cJSON_IsNumber(t) && t->valuedouble < 0)
		cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "temperature"), 0);
	t = field(o, "top_k");
	if (t && cJSON_IsNumber(t) && t->valuedouble < 0)
		cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "top_k"), 0);
	const cJSON *bias = field(o, "logit_bias");
	if (bias && (cJSON_IsArray(bias) || cJSON_IsObject(bias)) && !bias->child)
		cJSON_DeleteItemFromObjectCaseSensitive(o, "logit_bias");
	/* What the OpenAI parser would read otherwise: llama-server has no such
	 * fields on /completion, or they mean something else there. */
	static const char *const drop[] = {
		"model", "echo", "suffix", "best_of", "n", "logprobs", "top_logprobs", "max_tokens",
		"max_completion_tokens", "n_predict", "stream_options", "response_format",
	};
	for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
		cJSON_DeleteItemFromObjectCaseSensitive(o, drop[i]);
	return 0;
}

int serve_llama_completion_parse(struct serve_request *q, struct serve_llama_completion *x, const char *body,
				 size_t len, const struct serve_limits *lim, int n_slots, struct serve_error *err)
{
	memset(q, 0, sizeof *q);
	memset(x, 0, sizeof *x);
	x->n_predict = -1;
	x->id_slot = -1;
	x->cache_prompt = true;
	cJSON *o = serve_body_parse(body, len, err);
	int rc = o ? translate(o, x, n_slots, err) : -EINVAL;
	char *text = rc ? NULL : cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (!rc && !text)
		rc = serve_error_set(err, 500, NULL, NULL, "out of memory");
	if (!rc)
		rc = serve_request_parse(q, SERVE_COMPLETION, text, strlen(text), lim, err);
	free(text);
	if (rc) {
		serve_llama_completion_free(x);
		return rc;
	}
	q->p.logprobs = x->n_probs > 0;
	q->p.top_logprobs = x->n_probs;
	return 0;
}

void serve_llama_completion_free(struct serve_llama_completion *x)
{
	free(x->grammar);
	free(x->json_schema);
	free(x->mixed);
	memset(x, 0, sizeof *x);
	x->n_predict = -1;
	x->id_slot = -1;
}

/* ---- prompts and tokens ---- */

struct ids {
	int32_t *p;
	size_t n, cap;
	int rc;
};

static void ids_put(struct ids *v, const int32_t *p, size_t n)
{
	if (v->rc)
		return;
	if (v->n + n > v->cap) {
		size_t cap = (v->n + n) * 2 + 16;
		int32_t *q = realloc(v->p, cap * sizeof *q);
		if (!q) {
			v->rc = -ENOMEM;
			return;
		}
		v->p = q;
		v->cap = cap;
	}
	if (n)
		memcpy(v->p + v->n, p, n * sizeof *p);
	v->n += n;
}

/*
 * The ids of a: strings tokenized (special tokens written in them become
 * theirs), ids checked against the vocabulary; BOS first when bos and the
 * first element is a string (llama-server's tokenize_mixed). *ids is
 * malloc'd.
 */
static int mixed_ids(const cJSON *a, bool bos, const struct tokenizer *tok, const char *param, int32_t **ids, int *n,
		     struct serve_error *err)
{
	struct ids v = { 0 };
	int vocab = tokenizer_vocab_size(tok), i = 0;
	int32_t b = tokenizer_bos_id(tok);
	if (bos && cJSON_IsString(a->child) && tokenizer_add_bos(tok) && b >= 0)
		ids_put(&v, &b, 1);
	for (const cJSON *e = a->child; e && !v.rc; e = e->next, i++) {
		int64_t id;
		if (cJSON_IsString(e)) {
			int32_t *part = NULL;
			size_t np = 0;
			int rc = tokenizer_encode(tok, e->valuestring, strlen(e->valuestring), &part, &np);
			if (rc) {
				free(v.p);
				return serve_error_set(err, rc == -ENOMEM ? 500 : 400, param, NULL, "%s[%d] cannot be tokenized (%s)",
						       param, i, rc == -EILSEQ ? "not UTF-8" : "error");
			}
			ids_put(&v, part, np);
			free(part);
		} else if (json_int(e, 0, vocab - 1, &id) == 0) {
			int32_t one = (int32_t)id;
			ids_put(&v, &one, 1);
		} else {
			free(v.p);
			return serve_error_set(err, 400, param, NULL, "%s[%d] must be a string or a token id in [0, %d]", param, i,
					       vocab - 1);
		}
	}
	if (v.rc) {
		free(v.p);
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	}
	*ids = v.p;
	*n = (int)v.n;
	return 0;
}

int serve_llama_prompt(struct serve_request *q, const struct serve_llama_completion *x, const struct tokenizer *tok,
		       struct serve_error *err)
{
	if (!x->mixed)
		return 0;
	cJSON *a = cJSON_Parse(x->mixed);
	if (!a)
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	int32_t *ids = NULL;
	int n = 0;
	int rc = mixed_ids(a, true, tok, "prompt", &ids, &n, err);
	cJSON_Delete(a);
	if (rc)
		return rc;
	if (n == 0) {
		free(ids);
		return serve_error_set(err, 400, "prompt", NULL, "the prompt is empty");
	}
	free(q->prompt);
	q->prompt = NULL;
	free(q->prompt_ids);
	q->prompt_ids = ids;
	q->n_prompt_ids = n;
	return 0;
}

int serve_llama_n_predict(const struct serve_llama_completion *x, int left, int cap)
{
	int n = x->n_predict >= 0 && x->n_predict < left ? x->n_predict : left;
	return n < cap ? n : cap;
}

bool serve_llama_constrained(const struct serve_llama_completion *x)
{
	return x->grammar || x->json_schema;
}

int serve_llama_constraint(struct serve_constraint *c, const struct serve_llama_completion *x,
			   const struct tokenizer *tok, const struct grammar_vocab *vocab, const int32_t *eos, int n_eos,
			   int32_t n_vocab, struct serve_error *err)
{
	memset(c, 0, sizeof *c);
	const char *param = x->json_schema ? "json_schema" : "grammar";
	char *gbnf = NULL, why[256] = "";
	int rc = 0;
	if (x->json_schema) {
		cJSON *schema = cJSON_Parse(x->json_schema);
		struct json_schema_warnings w = { 0 };
		rc = schema ? json_schema_to_gbnf(schema, NULL, &gbnf, &w, why, sizeof why) : -ENOMEM;
		cJSON_Delete(schema);
		/* llama-server enforces what it can of a schema and says nothing
		 * of the rest; the server's log names it here. */
		for (size_t i = 0; !rc && i < w.count; i++)
			fprintf(stderr, "colibri serve: warning: json_schema: %s\n", w.msg[i]);
		json_schema_warnings_free(&w);
		if (rc == -ENOMEM)
			return serve_error_set(err, 500, NULL, NULL, "out of memory");
		if (rc)
			return serve_error_set(err, 400, param, NULL, "'json_schema' cannot be enforced: %s",
					       why[0] ? why : "its grammar is too large");
	}
	rc = serve_constraint_compile(c, gbnf ? gbnf : x->grammar, param, "does not compile", tok, vocab, eos, n_eos,
				      n_vocab, err);
	free(gbnf);
	return rc;
}

/* ---- the /completion answer ---- */

/* Length of the longest prefix of s[0..n) that is valid UTF-8 (a piece
 * may end inside a character; llama-server's validate_utf8 cuts it). */
static size_t utf8_prefix(const char *s, size_t n)
{
	size_t k = n;
	while (k && !serve_utf8_valid(s, k))
		k--;
	return k;
}

static cJSON *bytes_json(const char *s, size_t n)
{
	cJSON *b = cJSON_CreateArray();
	for (size_t i = 0; b && i < n; i++)
		cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)s[i]));
	return b;
}

/* {"id", "token", "bytes", "logprob"} of one id: its raw piece. */
static cJSON *prob_json(const struct tokenizer *tok, int32_t id, float logprob)
{
	const char *bytes = "";
	size_t n = 0;
	if (tokenizer_token_bytes(tok, id, &bytes, &n) != 0) {
		bytes = "";
		n = 0;
	}
	cJSON *o = cJSON_CreateObject();
	char *text = strndup(bytes, utf8_prefix(bytes, n));
	cJSON_AddNumberToObject(o, "id", id);
	cJSON_AddStringToObject(o, "token", text ? text : "");
	cJSON_AddItemToObject(o, "bytes", bytes_json(bytes, n));
	/* JSON has no -inf: llama-server writes the lowest float instead. */
	cJSON_AddNumberToObject(o, "logprob", isfinite(logprob) ? logprob : -3.4028234663852886e38);
	free(text);
	return o;
}

/* The dialect's context: what the answer needs beyond the gathered text. */
struct llama_answer {
	const struct tokenizer *tok;
	const char *model;           /* borrowed from the server */
	int n_ctx, id_slot;
	bool stream, return_tokens;
	int n_probs;
	cJSON *settings;             /* generation_settings */
	char *prompt;                /* the prompt's text */
	cJSON *tokens;               /* non-streamed: the generated ids */
	cJSON *probs;                /* non-streamed: completion_probabilities */
	int n_predicted;             /* stream: tokens sent so far */
};

/* One completion_probabilities entry per event of t with a token. */
static void probs_of(const struct llama_answer *la, const struct serve_take *t, cJSON *into)
{
	for (int i = 0; i < t->n_ev; i++) {
		const struct serve_event *e = &t->ev[i];
		if (e->id < 0)
			continue;
		cJSON *p = prob_json(la->tok, e->id, e->logprob), *top = cJSON_AddArrayToObject(p, "top_logprobs");
		for (int k = 0; t->top_id && k < e->n_top; k++) {
			size_t at = (size_t)i * (size_t)t->n_top + (size_t)k;
			cJSON_AddItemToArray(top, prob_json(la->tok, t->top_id[at], t->top_lp[at]));
		}
		cJSON_AddItemToArray(into, p);
	}
}

static int llama_add(struct serve_answer *a, const struct serve_take *t)
{
	struct llama_answer *la = a->dialect_ctx;
	for (int i = 0; i < t->n_ev; i++)
		if (t->ev[i].id >= 0 && la->return_tokens)
			cJSON_AddItemToArray(la->tokens, cJSON_CreateNumber(t->ev[i].id));
	if (la->n_probs)
		probs_of(la, t, la->probs);
	return 0;
}

/* llama-server's timings: the prompt's part from a slot to the first token. */
static cJSON *timings_json(const struct serve_take *t)
{
	cJSON *o = cJSON_CreateObject();
	int prompt_n = t->n_prompt - t->n_cached;
	double prompt_ms = t->ttft_s > t->queue_s ? (t->ttft_s - t->queue_s) * 1e3 : 0, gen_ms = t->decode_s * 1e3;
	int gen_n = t->n_generated;
	cJSON_AddNumberToObject(o, "cache_n", t->n_cached);
	cJSON_AddNumberToObject(o, "prompt_n", prompt_n);
	cJSON_AddNumberToObject(o, "prompt_ms", prompt_ms);
	cJSON_AddNumberToObject(o, "prompt_per_token_ms", prompt_n ? prompt_ms / prompt_n : 0);
	cJSON_AddNumberToObject(o, "prompt_per_second", prompt_ms > 0 ? prompt_n * 1e3 / prompt_ms : 0);
	cJSON_AddNumberToObject(o, "predicted_n", gen_n);
	cJSON_AddNumberToObject(o, "predicted_ms", gen_ms);
	/* The first token comes with the prompt: the rest are the decode's. */
	cJSON_AddNumberToObject(o, "predicted_per_token_ms", gen_n > 1 ? gen_ms / (gen_n - 1) : 0);
	cJSON_AddNumberToObject(o, "predicted_per_second", gen_ms > 0 && gen_n > 1 ? (gen_n - 1) * 1e3 / gen_ms : 0);
	return o;
}

/* The final object: content and tokens ("" and [] when streamed: they went
 * in the chunks), why it stopped, counts, settings, timings. */
static cJSON *final_json(struct serve_answer *a, const struct serve_take *last)
{
	struct llama_answer *la = a->dialect_ctx;
	cJSON *o = cJSON_CreateObject();
	const char *content = la->stream || !a->content.p ? "" : a->content.p;
	cJSON_AddNumberToObject(o, "index", 0);
	cJSON_AddStringToObject(o, "content", content);
	cJSON *tokens = la->stream || !la->tokens ? cJSON_CreateArray() : la->tokens;
	if (tokens == la->tokens)
		la->tokens = NULL;
	cJSON_AddItemToObject(o, "tokens", tokens);
	cJSON_AddNumberToObject(o, "id_slot", last->slot);
	cJSON_AddBoolToObject(o, "stop", true);
	cJSON_AddStringToObject(o, "model", la->model);
	cJSON_AddNumberToObject(o, "tokens_predicted", last->n_generated);
	cJSON_AddNumberToObject(o, "tokens_evaluated", last->n_prompt);
	cJSON_AddItemToObject(o, "generation_settings", cJSON_Duplicate(la->settings, 1));
	cJSON_AddStringToObject(o, "prompt", la->prompt ? la->prompt : "");
	cJSON_AddBoolToObject(o, "has_new_line", a->content.p && memchr(a->content.p, '\n', a->content.len));
	cJSON_AddBoolToObject(o, "truncated", false);
	const cJSON *stop = cJSON_GetObjectItemCaseSensitive(la->settings, "stop");
	const cJSON *word = last->stop_index >= 0 ? cJSON_GetArrayItem(stop, last->stop_index) : NULL;
	cJSON_AddStringToObject(o, "stop_type", last->finish == SERVE_FINISH_LENGTH ? "limit" : word ? "word" : "eos");
	cJSON_AddStringToObject(o, "stopping_word", cJSON_IsString(word) ? word->valuestring : "");
	/* What the slot's state holds for the next request: the prompt and
	 * every generated token but the last, which never ran. */
	cJSON_AddNumberToObject(o, "tokens_cached", last->n_prompt + (last->n_generated ? last->n_generated - 1 : 0));
	cJSON_AddItemToObject(o, "timings", timings_json(last));
	if (!la->stream && la->n_probs) {
		cJSON_AddItemToObject(o, "completion_probabilities", la->probs);
		la->probs = NULL;
	}
	return o;
}

static char *llama_json(struct serve_answer *a, const struct serve_take *last)
{
	return serve_json_print(final_json(a, last));
}

static void sse_put(struct strbuf *out, cJSON *o)
{
	serve_json_put(out, "data: ", o, "\n\n");
}

/* A stream: one event per token (its text, which a stop string being
 * matched may hold back, and its id), then the final object; an error
 * ends it as {"error": ...}. No data: [DONE], as llama-server sends none. */
static int llama_stream(struct serve_answer *a, const struct serve_take *t, struct strbuf *out)
{
	struct llama_answer *la = a->dialect_ctx;
	a->started = true;
	size_t at = 0;
	for (int i = 0; i < t->n_ev; i++) {
		const struct serve_event *e = &t->ev[i];
		size_t n = e->reasoning_len + e->content_len;
		char *text = strndup(t->text + at, n);
		at += n;
		cJSON *o = cJSON_CreateObject(), *ids = cJSON_CreateArray();
		la->n_predicted += e->id >= 0;
		if (e->id >= 0)
			cJSON_AddItemToArray(ids, cJSON_CreateNumber(e->id));
		cJSON_AddNumberToObject(o, "index", 0);
		cJSON_AddStringToObject(o, "content", text ? text : "");
		cJSON_AddItemToObject(o, "tokens", ids);
		cJSON_AddBoolToObject(o, "stop", false);
		cJSON_AddNumberToObject(o, "id_slot", t->slot);
		cJSON_AddNumberToObject(o, "tokens_predicted", la->n_predicted);
		cJSON_AddNumberToObject(o, "tokens_evaluated", t->n_prompt);
		if (la->n_probs && e->id >= 0) {
			struct serve_take one = *t;
			one.ev = (struct serve_event *)e;
			one.n_ev = 1;
			if (t->top_id) {
				one.top_id = t->top_id + (size_t)i * (size_t)t->n_top;
				one.top_lp = t->top_lp + (size_t)i * (size_t)t->n_top;
			}
			probs_of(la, &one, cJSON_AddArrayToObject(o, "completion_probabilities"));
		}
		free(text);
		sse_put(out, o);
	}
	if (!t->done)
		return out->rc;
	if (t->finish == SERVE_FINISH_ERROR) {
		char *e = error_json(&t->error);
		strbuf_put(out, "data: ", 6);
		strbuf_put(out, e ? e : "{}", e ? strlen(e) : 2);
		strbuf_put(out, "\n\n", 2);
		free(e);
	} else {
		sse_put(out, final_json(a, t));
	}
	a->finished = true;
	return out->rc;
}

static void llama_answer_free(void *ctx)
{
	struct llama_answer *la = ctx;
	if (!la)
		return;
	cJSON_Delete(la->settings);
	cJSON_Delete(la->tokens);
	cJSON_Delete(la->probs);
	free(la->prompt);
	free(la);
}

const struct serve_dialect serve_llama_dialect = {
	.stream_type = "text/event-stream",
	.add = llama_add,
	.json = llama_json,
	.stream = llama_stream,
	.error = error_json,
	.ctx_free = llama_answer_free,
};

/* generation_settings / params: the sampling a request runs with. */
static cJSON *settings_json(const struct batch_params *p, int n_predict, char *const *stop, int n_stop, bool stream,
			    int n_probs, const char *grammar, bool seed_given)
{
	cJSON *o = cJSON_CreateObject(), *s = cJSON_CreateArray();
	cJSON_AddNumberToObject(o, "n_predict", n_predict);
	/* 4294967295 is llama-server's "random" (LLAMA_DEFAULT_SEED). */
	cJSON_AddNumberToObject(o, "seed", seed_given ? (double)p->seed : 4294967295.0);
	cJSON_AddNumberToObject(o, "temperature", p->temp);
	cJSON_AddNumberToObject(o, "top_k", p->top_k);
	cJSON_AddNumberToObject(o, "top_p", p->top_p);
	cJSON_AddNumberToObject(o, "min_p", p->min_p);
	cJSON_AddNumberToObject(o, "repeat_last_n", p->repeat_last_n);
	cJSON_AddNumberToObject(o, "repeat_penalty", p->repeat_penalty > 0 ? p->repeat_penalty : 1);
	cJSON_AddNumberToObject(o, "presence_penalty", p->presence_penalty);
	cJSON_AddNumberToObject(o, "frequency_penalty", p->frequency_penalty);
	for (int i = 0; i < n_stop; i++)
		cJSON_AddItemToArray(s, cJSON_CreateString(stop[i]));
	cJSON_AddItemToObject(o, "stop", s);
	cJSON_AddNumberToObject(o, "max_tokens", n_predict);
	cJSON_AddNumberToObject(o, "n_keep", 0);
	cJSON_AddBoolToObject(o, "ignore_eos", false);
	cJSON_AddBoolToObject(o, "stream", stream);
	cJSON_AddNumberToObject(o, "n_probs", n_probs);
	cJSON_AddStringToObject(o, "grammar", grammar ? grammar : "");
	/* The order colibri's sampler applies them in (sampler.h). */
	static const char *const order[] = { "penalties", "temperature", "top_k", "top_p", "min_p" };
	cJSON *so = cJSON_AddArrayToObject(o, "samplers");
	for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
		cJSON_AddItemToArray(so, cJSON_CreateString(order[i]));
	return o;
}

int serve_llama_answer(struct serve_answer *a, const struct serve_request *q, const struct serve_llama_completion *x,
		       const int32_t *prompt, int n_prompt, const struct serve_llama_info *info)
{
	struct llama_answer *la = calloc(1, sizeof *la);
	if (!la)
		return -ENOMEM;
	la->tok = info->tok;
	la->model = info->model_id;
	la->n_ctx = info->n_ctx;
	la->stream = q->stream;
	la->return_tokens = x->return_tokens;
	la->n_probs = x->n_probs;
	la->settings = settings_json(&q->p, x->n_predict, q->stop, q->n_stop, q->stream, x->n_probs,
				     x->grammar ? x->grammar : x->json_schema, q->seed_given);
	la->tokens = cJSON_CreateArray();
	la->probs = cJSON_CreateArray();
	size_t len = 0;
	if (tokenizer_decode(info->tok, prompt, (size_t)n_prompt, &la->prompt, &len) != 0)
		la->prompt = NULL;
	serve_answer_dialect(a, &serve_llama_dialect, la);
	return la->settings && la->tokens && la->probs && la->prompt ? 0 : -ENOMEM;
}

/* ---- /tokenize, /detokenize ---- */

char *serve_llama_tokenize(const char *body, size_t len, const struct tokenizer *tok, struct serve_error *err)
{
	cJSON *o = serve_body_parse(body, len, err);
	if (!o)
		return NULL;
	bool add_special = false, parse_special = true, pieces = false;
	int32_t *ids = NULL;
	int n = 0, rc;
	const cJSON *c = field(o, "content");
	if ((rc = bool_field(o, "add_special", &add_special, err)) || (rc = bool_field(o, "parse_special", &parse_special, err)) ||
	    (rc = bool_field(o, "with_pieces", &pieces, err)))
		goto out;
	if (!parse_special) {
		rc = serve_error_set(err, 400, "parse_special", NULL,
				     "'parse_special' false is not supported: special tokens written in the text become theirs");
		goto out;
	}
	if (c && cJSON_IsString(c)) {
		cJSON *one = cJSON_CreateArray();
		cJSON_AddItemToArray(one, cJSON_CreateString(c->valuestring));
		if (!serve_utf8_valid(c->valuestring, strlen(c->valuestring)))
			rc = serve_error_set(err, 400, "content", NULL, "'content' is not valid UTF-8");
		else
			rc = mixed_ids(one, add_special, tok, "content", &ids, &n, err);
		cJSON_Delete(one);
	} else if (c && cJSON_IsArray(c)) {
		rc = mixed_ids(c, add_special, tok, "content", &ids, &n, err);
	} else if (c) {
		rc = serve_error_set(err, 400, "content", NULL, "'content' must be a string or an array of strings and ids");
	}
	if (rc)
		goto out;
	cJSON *r = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(r, "tokens");
	for (int i = 0; i < n; i++) {
		if (!pieces) {
			cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
			continue;
		}
		const char *b = "";
		size_t nb = 0;
		if (tokenizer_token_bytes(tok, ids[i], &b, &nb) != 0)
			nb = 0;
		cJSON *e = cJSON_CreateObject();
		cJSON_AddNumberToObject(e, "id", ids[i]);
		/* A piece that is not UTF-8 on its own (part of a character) is
		 * its bytes, as llama-server writes it. */
		char *s = serve_utf8_valid(b, nb) ? strndup(b, nb) : NULL;
		cJSON_AddItemToObject(e, "piece", s ? cJSON_CreateString(s) : bytes_json(b, nb));
		free(s);
		cJSON_AddItemToArray(arr, e);
	}
	free(ids);
	cJSON_Delete(o);
	char *text = serve_json_print(r);
	if (!text)
		serve_error_set(err, 500, NULL, NULL, "out of memory");
	return text;
out:
	free(ids);
	cJSON_Delete(o);
	return NULL;
}

char *serve_llama_detokenize(const char *body, size_t len, const struct tokenizer *tok, struct serve_error *err)
{
	cJSON *o = serve_body_parse(body, len, err);
	if (!o)
		return NULL;
	const cJSON *t = field(o, "tokens");
	int n = t ? cJSON_GetArraySize(t) : 0, vocab = tokenizer_vocab_size(tok), i = 0;
	int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
	char *text = NULL, *out = NULL;
	size_t tl = 0;
	if (!ids) {
		serve_error_set(err, 500, NULL, NULL, "out of memory");
		goto done;
	}
	if (t && !cJSON_IsArray(t)) {
		serve_error_set(err, 400, "tokens", NULL, "'tokens' must be an array of token ids");
		goto done;
	}
	for (const cJSON *e = t ? t->child : NULL; e; e = e->next, i++) {
		int64_t id;
		if (json_int(e, 0, vocab - 1, &id) != 0) {
			serve_error_set(err, 400, "tokens", NULL, "tokens[%d] must be a token id in [0, %d]", i, vocab - 1);
			goto done;
		}
		ids[i] = (int32_t)id;
	}
	if (tokenizer_decode(tok, ids, (size_t)n, &text, &tl) != 0) {
		serve_error_set(err, 500, NULL, NULL, "out of memory");
		goto done;
	}
	cJSON *r = cJSON_CreateObject();
	cJSON_AddStringToObject(r, "content", text);
	if (!(out = serve_json_print(r)))
		serve_error_set(err, 500, NULL, NULL, "out of memory");
done:
	free(ids);
	free(text);
	cJSON_Delete(o);
	return out;
}

/* ---- /props, /slots ---- */

static const char *or_empty(const char *s)
{
	return s ? s : "";
}

/* A slot as llama-server describes it (GET /slots, and /props's defaults). */
static cJSON *slot_json(const struct serve_llama_info *info, int id, const struct serve_slot_info *s)
{
	struct batch_params d = { .temp = info->lim->temp, .top_k = info->lim->top_k, .top_p = info->lim->top_p,
				  .repeat_last_n = 64, .repeat_penalty = 1 };
	const struct batch_params *p = s && (s->processing || s->n_prompt) ? &s->p : &d;
	cJSON *o = cJSON_CreateObject(), *next;
	cJSON_AddNumberToObject(o, "id", id);
	cJSON_AddNumberToObject(o, "id_task", -1);
	cJSON_AddNumberToObject(o, "n_ctx", info->n_ctx);
	cJSON_AddBoolToObject(o, "speculative", false);
	cJSON_AddBoolToObject(o, "is_processing", s && s->processing);
	cJSON_AddItemToObject(o, "params", settings_json(p, p == &d ? -1 : p->n_predict, NULL, 0, false,
							 p->top_logprobs, NULL, p != &d));
	cJSON_AddStringToObject(o, "prompt", "");
	next = cJSON_AddObjectToObject(o, "next_token");
	cJSON_AddBoolToObject(next, "has_next_token", s && s->processing);
	cJSON_AddBoolToObject(next, "has_new_line", false);
	cJSON_AddNumberToObject(next, "n_remain", s && s->processing ? p->n_predict - s->n_generated : -1);
	cJSON_AddNumberToObject(next, "n_decoded", s ? s->n_generated : 0);
	cJSON_AddStringToObject(next, "stopping_word", "");
	/* colibri's own: the tokens the slot's state holds (its prompt cache). */
	cJSON_AddNumberToObject(o, "n_past", s ? s->n_history : 0);
	return o;
}

char *serve_llama_props(const struct serve_llama_info *info)
{
	cJSON *o = cJSON_CreateObject(), *m;
	cJSON_AddItemToObject(o, "default_generation_settings", slot_json(info, 0, NULL));
	cJSON_AddNumberToObject(o, "total_slots", info->n_slots);
	cJSON_AddStringToObject(o, "model_alias", info->model_id);
	cJSON_AddStringToObject(o, "model_path", or_empty(info->model_path));
	m = cJSON_AddObjectToObject(o, "modalities");
	cJSON_AddBoolToObject(m, "vision", false);
	cJSON_AddBoolToObject(m, "video", false);
	cJSON_AddBoolToObject(m, "audio", false);
	cJSON_AddBoolToObject(o, "endpoint_slots", true);
	cJSON_AddBoolToObject(o, "endpoint_props", false);
	cJSON_AddBoolToObject(o, "endpoint_metrics", true);
	cJSON_AddStringToObject(o, "chat_template", or_empty(tokenizer_chat_template(info->tok)));
	cJSON_AddStringToObject(o, "bos_token", or_empty(tokenizer_bos_token(info->tok)));
	cJSON_AddStringToObject(o, "eos_token", or_empty(tokenizer_eos_token(info->tok)));
	cJSON_AddStringToObject(o, "build_info", "colibri");
	cJSON_AddBoolToObject(o, "is_sleeping", false);
	return serve_json_print(o);
}

char *serve_llama_slots(const struct serve_llama_info *info, const struct serve_slot_info *slots)
{
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; a && i < info->n_slots; i++)
		cJSON_AddItemToArray(a, slot_json(info, i, &slots[i]));
	return serve_json_print(a);
}

/* ---- slot actions ---- */

bool serve_llama_filename_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > 255 || !serve_utf8_valid(name, n) || strstr(name, ".."))
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f || name[i] == '/' || name[i] == '\\')
			return false;
	return true;
}

int serve_llama_slot_action(struct serve_slot_op *op, char **filename, const char *id, const char *action,
			    const char *body, size_t len, const struct serve_llama_info *info, struct serve_error *err)
{
	*filename = NULL;
	char *end = NULL;
	long slot = id && *id >= '0' && *id <= '9' ? strtol(id, &end, 10) : -1;
	if (!end || *end || slot < 0 || slot >= info->n_slots)
		return serve_error_set(err, 400, "id_slot", NULL, "Invalid slot ID: slots are 0 to %d", info->n_slots - 1);
	op->slot = (int)slot;
	if (!action || (strcmp(action, "save") && strcmp(action, "restore") && strcmp(action, "erase")))
		return serve_error_set(err, 400, "action", NULL, "Invalid action: ?action= save, restore or erase");
	if (!strcmp(action, "erase")) {
		op->action = SERVE_SLOT_ERASE;
		return 0;
	}
	op->action = !strcmp(action, "save") ? SERVE_SLOT_SAVE : SERVE_SLOT_RESTORE;
	if (!info->slot_save_dir)
		return serve_error_set(err, 501, NULL, NULL,
				       "slot %s needs a folder for its files: start colibri serve with --slot-save-path DIR "
				       "(or --sessions DIR)",
				       action);
	cJSON *o = serve_body_parse(body, len, err);
	if (!o)
		return -EINVAL;
	const cJSON *f = field(o, "filename");
	int rc = 0;
	if (!cJSON_IsString(f))
		rc = serve_error_set(err, 400, "filename", NULL, "'filename' is required (a file name)");
	else if (!serve_llama_filename_ok(f->valuestring))
		rc = serve_error_set(err, 400, "filename", NULL,
				     "Invalid filename: a plain name of 1 to 255 bytes, without '/', '\\\\', '..' or "
				     "control characters");
	else if ((size_t)snprintf(op->path, sizeof op->path, "%s/%s", info->slot_save_dir, f->valuestring) >=
		 sizeof op->path)
		rc = serve_error_set(err, 400, "filename", NULL, "Invalid filename: the path is too long");
	else if (!(*filename = strdup(f->valuestring)))
		rc = serve_error_set(err, 500, NULL, NULL, "out of memory");
	cJSON_Delete(o);
	return rc;
}

char *serve_llama_slot_answer(const struct serve_slot_op *op, const char *filename)
{
	cJSON *o = cJSON_CreateObject(), *t;
	cJSON_AddNumberToObject(o, "id_slot", op->slot);
	switch (op->action) {
	case SERVE_SLOT_SAVE:
	case SERVE_SLOT_RESTORE: {
		bool save = op->action == SERVE_SLOT_SAVE;
		cJSON_AddStringToObject(o, "filename", or_empty(filename));
		cJSON_AddNumberToObject(o, save ? "n_saved" : "n_restored", op->n_tokens);
		cJSON_AddNumberToObject(o, save ? "n_written" : "n_read", (double)op->bytes);
		t = cJSON_AddObjectToObject(o, "timings");
		cJSON_AddNumberToObject(t, save ? "save_ms" : "restore_ms", op->seconds * 1e3);
		break;
	}
	case SERVE_SLOT_ERASE:
		cJSON_AddNumberToObject(o, "n_erased", op->n_tokens);
		break;
	case SERVE_SLOT_LIST:
		break;
	}
	return serve_json_print(o);
}
