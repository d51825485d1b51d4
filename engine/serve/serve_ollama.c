/*
 * serve_ollama — see serve_ollama.h. A request becomes the OpenAI request
 * it means (a cJSON body serve_request_parse reads), and the options that
 * have no OpenAI field, or other ranges than OpenAI's, are set on the
 * parsed request afterwards. Answers are built from the serve_answer's
 * gathering: its content, reasoning and tool-call parser.
 */
#include "engine/serve/serve_ollama.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/json_get.h"
#include "compute/quant.h"
#include "engine/decode/session.h"
#include "engine/serve/serve_prompt.h"

static const struct {
	const char *url;
	enum serve_route route;
	bool post;
} routes[] = {
	{ "/api/chat", SERVE_ROUTE_OLLAMA_CHAT, true },
	{ "/api/generate", SERVE_ROUTE_OLLAMA_GENERATE, true },
	{ "/api/tags", SERVE_ROUTE_OLLAMA_TAGS, false },
	{ "/api/show", SERVE_ROUTE_OLLAMA_SHOW, true },
	{ "/api/ps", SERVE_ROUTE_OLLAMA_PS, false },
	{ "/api/version", SERVE_ROUTE_OLLAMA_VERSION, false },
	{ "/api/embed", SERVE_ROUTE_OLLAMA_EMBED, true },
	{ "/api/embeddings", SERVE_ROUTE_OLLAMA_EMBEDDINGS, true },
};

enum serve_route serve_ollama_route(const char *url, bool *post)
{
	for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
		if (!strcmp(url, routes[i].url)) {
			*post = routes[i].post;
			return routes[i].route;
		}
	return SERVE_ROUTE_OTHER;
}

bool serve_ollama_is_route(enum serve_route r)
{
	for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
		if (routes[i].route == r)
			return true;
	return false;
}

bool serve_ollama_is_info(enum serve_route r)
{
	return serve_ollama_is_route(r) && r != SERVE_ROUTE_OLLAMA_CHAT && r != SERVE_ROUTE_OLLAMA_GENERATE;
}

/* ---- names and times ---- */

/* Ollama's names are model:tag, the tag "latest" when left out. */
static bool name_matches(const char *name, const char *id)
{
	size_t n = strlen(id);
	return !strcmp(name, id) || (!strchr(id, ':') && !strncmp(name, id, n) && !strcmp(name + n, ":latest"));
}

/* The name /api/tags and /api/ps list: the id with its tag. */
static void tagged_name(char *out, size_t n, const char *id)
{
	snprintf(out, n, "%s%s", id, strchr(id, ':') ? "" : ":latest");
}

/* RFC 3339 in UTC, with nanoseconds when ns >= 0. */
static void rfc3339(char *out, size_t n, time_t t, long ns)
{
	struct tm tm;
	gmtime_r(&t, &tm);
	size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
	if (ns >= 0)
		snprintf(out + k, n - k, ".%09ldZ", ns);
	else
		snprintf(out + k, n - k, "Z");
}

static void now_rfc3339(char *out, size_t n)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	rfc3339(out, n, ts.tv_sec, ts.tv_nsec);
}

static double ns_of(double s)
{
	return s > 0 ? floor(s * 1e9) : 0;
}

/* ---- requests ---- */

/* A field that must be a string when present (null counts as absent). */
static int get_string(const cJSON *o, const char *key, const char **out, struct serve_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	*out = NULL;
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsString(v))
		return serve_error_set(err, 400, key, NULL, "'%s' must be a string", key);
	*out = v->valuestring;
	return 0;
}

static bool nonempty_array(const cJSON *v)
{
	return cJSON_IsArray(v) && v->child;
}

static bool add_string(cJSON *o, const char *key, const char *s)
{
	return cJSON_AddStringToObject(o, key, s) != NULL;
}

/* An Ollama message to OpenAI's: content a string, thinking as
 * reasoning_content, tool_calls with their arguments as JSON text,
 * tool_name as name. The OpenAI parser checks the rest. */
static int chat_message(cJSON *out, const cJSON *m, int i, struct serve_error *err)
{
	char p[64];
	snprintf(p, sizeof p, "messages[%d]", i);
	if (!cJSON_IsObject(m))
		return serve_error_set(err, 400, p, NULL, "'%s' must be an object", p);
	cJSON *d = cJSON_CreateObject();
	if (!d || !cJSON_AddItemToArray(out, d))
		goto oom;
	const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
	if (cJSON_IsString(role)) {
		/* Ollama reads roles in any case. */
		char r[16];
		size_t k = 0;
		for (; role->valuestring[k] && k + 1 < sizeof r; k++)
			r[k] = (char)tolower((unsigned char)role->valuestring[k]);
		r[k] = 0;
		if (!add_string(d, "role", role->valuestring[k] ? role->valuestring : r))
			goto oom;
	} else if (role) {
		cJSON *c = cJSON_Duplicate(role, 1);
		if (!c || !cJSON_AddItemToObject(d, "role", c))
			goto oom;
	}
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	snprintf(p, sizeof p, "messages[%d].content", i);
	if (content && !cJSON_IsNull(content) && !cJSON_IsString(content))
		return serve_error_set(err, 400, p, NULL, "'%s' must be a string", p);
	if (!add_string(d, "content", cJSON_IsString(content) ? content->valuestring : ""))
		goto oom;
	snprintf(p, sizeof p, "messages[%d].images", i);
	if (nonempty_array(cJSON_GetObjectItemCaseSensitive(m, "images")))
		return serve_error_set(err, 400, p, NULL, "'%s': images are not supported, this model reads text only", p);
	const cJSON *thinking = cJSON_GetObjectItemCaseSensitive(m, "thinking");
	if (cJSON_IsString(thinking) && thinking->valuestring[0] && !add_string(d, "reasoning_content", thinking->valuestring))
		goto oom;
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "tool_name");
	if (cJSON_IsString(name) && !add_string(d, "name", name->valuestring))
		goto oom;
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
	if (cJSON_IsString(id) && !add_string(d, "tool_call_id", id->valuestring))
		goto oom;
	const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
	if (!calls || cJSON_IsNull(calls))
		return 0;
	snprintf(p, sizeof p, "messages[%d].tool_calls", i);
	if (!cJSON_IsArray(calls))
		return serve_error_set(err, 400, p, NULL, "'%s' must be an array", p);
	cJSON *oc = cJSON_AddArrayToObject(d, "tool_calls");
	if (!oc)
		goto oom;
	int k = 0;
	for (const cJSON *c = calls->child; c; c = c->next, k++) {
		const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
		cJSON *call = cJSON_CreateObject(), *f;
		if (!call || !cJSON_AddItemToArray(oc, call))
			goto oom;
		const cJSON *cid = cJSON_GetObjectItemCaseSensitive(c, "id");
		char made[24];
		snprintf(made, sizeof made, "call_%d", k);
		if (!add_string(call, "id", cJSON_IsString(cid) ? cid->valuestring : made) ||
		    !add_string(call, "type", "function") || !(f = cJSON_AddObjectToObject(call, "function")))
			goto oom;
		const cJSON *fname = cJSON_GetObjectItemCaseSensitive(fn, "name");
		if (cJSON_IsString(fname) && !add_string(f, "name", fname->valuestring))
			goto oom;
		/* Ollama's arguments are an object; OpenAI's are its JSON text. */
		const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
		char *text = cJSON_IsString(args) ? strdup(args->valuestring)
			   : args && !cJSON_IsNull(args) ? cJSON_PrintUnformatted(args)
							 : strdup("{}");
		bool ok = text && add_string(f, "arguments", text);
		free(text);
		if (!ok)
			goto oom;
	}
	return 0;
oom:
	return serve_error_set(err, 500, NULL, NULL, "out of memory");
}

static int chat_body(struct serve_ollama *o, cJSON *oa, const cJSON *in, struct serve_error *err)
{
	const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(in, "messages");
	if (msgs && !cJSON_IsNull(msgs) && !cJSON_IsArray(msgs))
		return serve_error_set(err, 400, "messages", NULL, "'messages' must be an array");
	if (!nonempty_array(msgs)) {
		o->done_reason = "load"; /* Ollama's way to load a model */
		return 0;
	}
	cJSON *out = cJSON_AddArrayToObject(oa, "messages");
	if (!out)
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	int i = 0, rc;
	for (const cJSON *m = msgs->child; m; m = m->next, i++)
		if ((rc = chat_message(out, m, i, err)))
			return rc;
	const cJSON *tools = cJSON_GetObjectItemCaseSensitive(in, "tools");
	cJSON *t;
	if (tools && !cJSON_IsNull(tools) && (!(t = cJSON_Duplicate(tools, 1)) || !cJSON_AddItemToObject(oa, "tools", t)))
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	return 0;
}

/* /api/generate: the prompt as one user turn (after the system prompt)
 * through the chat template, or with raw the prompt text itself. */
static int generate_body(struct serve_ollama *o, cJSON *oa, const cJSON *in, bool *raw, struct serve_error *err)
{
	const char *prompt, *system, *suffix, *template;
	int rc;
	if ((rc = get_string(in, "prompt", &prompt, err)) || (rc = get_string(in, "system", &system, err)) ||
	    (rc = get_string(in, "suffix", &suffix, err)) || (rc = get_string(in, "template", &template, err)))
		return rc;
	const cJSON *rv = cJSON_GetObjectItemCaseSensitive(in, "raw");
	if (rv && !cJSON_IsNull(rv) && !cJSON_IsBool(rv))
		return serve_error_set(err, 400, "raw", NULL, "'raw' must be a boolean");
	*raw = cJSON_IsTrue(rv);
	const cJSON *context = cJSON_GetObjectItemCaseSensitive(in, "context");
	if (*raw && ((template && *template) || (system && *system) || nonempty_array(context)))
		return serve_error_set(err, 400, "raw", NULL, "raw mode does not support template, system, or context");
	if (template && *template)
		return serve_error_set(err, 400, "template", NULL,
				       "'template' is not supported: colibri renders the model's own chat template (Jinja); "
				       "send the prompt you formatted with \"raw\": true instead");
	if (suffix && *suffix)
		return serve_error_set(err, 400, "suffix", NULL, "'suffix' is not supported (no fill-in-the-middle)");
	if (nonempty_array(context))
		return serve_error_set(err, 400, "context", NULL,
				       "'context' is not supported: send the conversation to /api/chat instead");
	if (nonempty_array(cJSON_GetObjectItemCaseSensitive(in, "images")))
		return serve_error_set(err, 400, "images", NULL, "images are not supported: this model reads text only");
	if (!prompt || !*prompt) {
		o->done_reason = "load";
		return 0;
	}
	if (*raw)
		return add_string(oa, "prompt", prompt) ? 0 : serve_error_set(err, 500, NULL, NULL, "out of memory");
	cJSON *msgs = cJSON_AddArrayToObject(oa, "messages"), *m;
	bool ok = msgs != NULL;
	if (ok && system && *system)
		ok = (m = cJSON_CreateObject()) && cJSON_AddItemToArray(msgs, m) && add_string(m, "role", "system") &&
		     add_string(m, "content", system);
	ok = ok && (m = cJSON_CreateObject()) && cJSON_AddItemToArray(msgs, m) && add_string(m, "role", "user") &&
	     add_string(m, "content", prompt);
	return ok ? 0 : serve_error_set(err, 500, NULL, NULL, "out of memory");
}

/* format: "json" (any JSON object) or a JSON schema; "" or null: text. */
static int format_of(const cJSON *in, const cJSON **schema, bool *json, struct serve_error *err)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(in, "format");
	*schema = NULL;
	*json = false;
	if (!f || cJSON_IsNull(f) || (cJSON_IsString(f) && !f->valuestring[0]))
		return 0;
	if (cJSON_IsString(f) && !strcmp(f->valuestring, "json")) {
		*json = true;
		return 0;
	}
	if (cJSON_IsObject(f)) {
		*schema = f;
		return 0;
	}
	return serve_error_set(err, 400, "format", NULL, "'format' must be \"json\" or a JSON schema (an object)");
}

/* think: a boolean, or a level ("low", "medium", "high", "max"), which
 * also goes to the template as reasoning_effort (gpt-oss's). */
static int think_of(cJSON *oa, const cJSON *in, const struct serve_ollama_model *m, const char *model,
		    struct serve_error *err)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(in, "think");
	if (!t || cJSON_IsNull(t))
		return 0;
	static const char *const levels[] = { "low", "medium", "high", "max" };
	const char *level = NULL;
	if (cJSON_IsString(t))
		for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
			if (!strcmp(t->valuestring, levels[i]))
				level = i == 3 ? "high" : levels[i];
	if (!cJSON_IsBool(t) && !level)
		return serve_error_set(err, 400, "think", NULL,
				       "'think' must be a boolean or one of \"low\", \"medium\", \"high\", \"max\"");
	bool on = level || cJSON_IsTrue(t);
	bool thinks = m->prompt && (m->prompt->think_tags || m->prompt->harmony);
	if (on && !thinks)
		return serve_error_set(err, 400, "think", NULL, "\"%.200s\" does not support thinking", model);
	if (!thinks)
		return 0; /* think: false on a model that does not think: nothing to switch off */
	cJSON *kw = cJSON_AddObjectToObject(oa, "chat_template_kwargs");
	if (!kw || !cJSON_AddBoolToObject(kw, "enable_thinking", on) || (level && !add_string(kw, "reasoning_effort", level)))
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	return 0;
}

/* options.key as a number in [lo, hi] (an integer when integral): *given
 * stays false when absent or null. */
static int opt_num(const cJSON *opts, const char *key, double lo, double hi, bool integral, double *out, bool *given,
		   struct serve_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(opts, key);
	char p[48];
	snprintf(p, sizeof p, "options.%s", key);
	if (!v || cJSON_IsNull(v))
		return 0;
	int64_t i = 0;
	if (integral && json_int(v, (int64_t)lo, (int64_t)hi, &i) != 0)
		return serve_error_set(err, 400, p, NULL, "'%s' must be an integer in [%.0f, %.0f]", p, lo, hi);
	if (!integral && !(cJSON_IsNumber(v) && v->valuedouble >= lo && v->valuedouble <= hi))
		return serve_error_set(err, 400, p, NULL, "'%s' must be a number in [%g, %g]", p, lo, hi);
	*out = integral ? (double)i : v->valuedouble;
	*given = true;
	return 0;
}

/* Appends one sentence to the request's warning ("; " between). */
__attribute__((format(printf, 2, 3))) static void warn(struct serve_ollama *o, const char *fmt, ...)
{
	size_t n = strlen(o->warning);
	if (n + 3 >= sizeof o->warning)
		return;
	if (n)
		n += (size_t)snprintf(o->warning + n, sizeof o->warning - n, "; ");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(o->warning + n, sizeof o->warning - n, fmt, ap);
	va_end(ap);
}

/* options.key, a number in [lo, hi], into *out; absent or null keeps it. */
static int opt_float(const cJSON *opts, const char *key, double lo, double hi, float *out, struct serve_error *err)
{
	double v = 0;
	bool given = false;
	int rc = opt_num(opts, key, lo, hi, false, &v, &given, err);
	if (!rc && given)
		*out = (float)v;
	return rc;
}

/* The options that set sampling, onto the parsed request: their ranges
 * are Ollama's, wider than OpenAI's (temperature up to 100, a repetition
 * penalty of 0 is off as 1 is, seed -1 asks for a fresh one). */
static int sampling_of(struct serve_request *r, const cJSON *opts, struct serve_error *err)
{
	double top_k = 0, last_n = 0, seed = -1;
	bool k_given = false, n_given = false, seed_given = false;
	int rc;
	if ((rc = opt_float(opts, "temperature", 0, 100, &r->p.temp, err)) ||
	    (rc = opt_float(opts, "top_p", 0, 1, &r->p.top_p, err)) ||
	    (rc = opt_float(opts, "min_p", 0, 1, &r->p.min_p, err)) ||
	    (rc = opt_float(opts, "repeat_penalty", 0, 100, &r->p.repeat_penalty, err)) ||
	    (rc = opt_float(opts, "presence_penalty", -2, 2, &r->p.presence_penalty, err)) ||
	    (rc = opt_float(opts, "frequency_penalty", -2, 2, &r->p.frequency_penalty, err)) ||
	    (rc = opt_num(opts, "top_k", -1, INT32_MAX, true, &top_k, &k_given, err)) ||
	    (rc = opt_num(opts, "repeat_last_n", -1, INT32_MAX, true, &last_n, &n_given, err)) ||
	    (rc = opt_num(opts, "seed", -JSON_INT_EXACT, JSON_INT_EXACT, true, &seed, &seed_given, err)))
		return rc;
	if (!(r->p.top_p > 0))
		return serve_error_set(err, 400, "options.top_p", NULL, "'options.top_p' must be a number in (0, 1]");
	if (k_given)
		r->p.top_k = top_k > 0 ? (int32_t)top_k : 0;
	if (n_given)
		r->p.repeat_last_n = (int32_t)last_n;
	else if (opts && cJSON_GetObjectItemCaseSensitive(opts, "repeat_penalty"))
		r->p.repeat_last_n = 64; /* Ollama's window for a penalty the request sets */
	if (seed_given && seed >= 0) {
		r->p.seed = (uint64_t)seed;
		r->seed_given = true;
	}
	return 0;
}

/* options: num_predict and stop into oa, num_ctx into o; the ones that
 * set up hardware are accepted and do nothing here, others are named in
 * the warning. The sampling ones are read by sampling_of. */
static int options_of(struct serve_ollama *o, cJSON *oa, const cJSON *in, const struct serve_ollama_model *m,
		      struct serve_error *err)
{
	const cJSON *opts = cJSON_GetObjectItemCaseSensitive(in, "options");
	if (!opts || cJSON_IsNull(opts))
		return 0;
	if (!cJSON_IsObject(opts))
		return serve_error_set(err, 400, "options", NULL, "'options' must be an object");
	double v = 0;
	bool given = false;
	int rc;
	/* num_predict: -1 (until the context is full) and -2 (fill it) are the same here. */
	if ((rc = opt_num(opts, "num_predict", -2, JSON_INT_EXACT, true, &v, &given, err)))
		return rc;
	if (given && v > m->lim->max_tokens_cap)
		return serve_error_set(err, 400, "options.num_predict", NULL,
				       "'options.num_predict' is %.0f; this server generates at most %d tokens a request "
				       "(--max-tokens)", v, m->lim->max_tokens_cap);
	if (given && v > 0 && !cJSON_AddNumberToObject(oa, "max_tokens", v))
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	given = false;
	if ((rc = opt_num(opts, "num_ctx", 0, INT32_MAX, true, &v, &given, err)))
		return rc;
	if (given && v > m->ctx) {
		warn(o, "options.num_ctx %.0f is above this server's context of %d: clamped (start colibri serve with a "
			"larger --ctx)", v, m->ctx);
		v = m->ctx;
	}
	o->num_ctx = given ? (int)v : 0;
	const cJSON *stop = cJSON_GetObjectItemCaseSensitive(opts, "stop");
	cJSON *c;
	if (stop && !cJSON_IsNull(stop) && (!(c = cJSON_Duplicate(stop, 1)) || !cJSON_AddItemToObject(oa, "stop", c)))
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	/* What the server sets up once (threads, GPU layers, batch, memory
	 * mapping) does nothing per request; sampling colibri lacks is named. */
	static const char *const quiet[] = { "num_keep", "num_batch", "num_gpu", "main_gpu", "use_mmap", "use_mlock",
					     "num_thread", "numa", "low_vram", "f16_kv", "vocab_only", "logits_all",
					     "draft_num_predict", "temperature", "top_k", "top_p", "min_p", "seed",
					     "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty",
					     "num_predict", "num_ctx", "stop" };
	for (const cJSON *k = opts->child; k; k = k->next) {
		size_t q = 0;
		while (q < sizeof quiet / sizeof quiet[0] && strcmp(k->string, quiet[q]) != 0)
			q++;
		/* Values that leave sampling as it is need no word. */
		bool neutral = cJSON_IsNull(k) ||
			       (!strcmp(k->string, "typical_p") && cJSON_IsNumber(k) && k->valuedouble >= 1) ||
			       (!strcmp(k->string, "tfs_z") && cJSON_IsNumber(k) && k->valuedouble >= 1) ||
			       (!strcmp(k->string, "mirostat") && cJSON_IsNumber(k) && k->valuedouble == 0) ||
			       !strcmp(k->string, "mirostat_tau") || !strcmp(k->string, "mirostat_eta") ||
			       !strcmp(k->string, "penalize_newline");
		if (q == sizeof quiet / sizeof quiet[0] && !neutral)
			warn(o, "options.%.40s is not supported and was ignored", k->string);
	}
	return 0;
}

/* keep_alive 0 (a number, or a duration such as "0", "0s", "0m"). */
static bool keep_alive_zero(const cJSON *in)
{
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(in, "keep_alive");
	if (cJSON_IsNumber(k))
		return k->valuedouble == 0;
	if (!cJSON_IsString(k))
		return false;
	char *end;
	double x = strtod(k->valuestring, &end);
	return end != k->valuestring && x == 0 && (!*end || !strcmp(end, "s") || !strcmp(end, "m") || !strcmp(end, "h"));
}

int serve_ollama_parse(struct serve_ollama *o, struct serve_request *r, bool chat, const char *body, size_t len,
		       const struct serve_ollama_model *m, struct serve_error *err)
{
	memset(o, 0, sizeof *o);
	memset(r, 0, sizeof *r);
	o->chat = chat;
	o->t_start = clock_now_s();
	if (len == 0)
		return serve_error_set(err, 400, NULL, NULL, "missing request body");
	cJSON *in = serve_body_parse(body, len, err), *oa = NULL;
	int rc = 0;
	char *text = NULL;
	const char *model = NULL;
	if (!in) {
		rc = -EINVAL;
		goto out;
	}
	if ((rc = get_string(in, "model", &model, err)))
		goto out;
	if (!model || !*model) {
		rc = serve_error_set(err, 400, "model", NULL, "model is required");
		goto out;
	}
	if (strlen(model) >= sizeof o->model || !serve_utf8_valid(model, strlen(model))) {
		rc = serve_error_set(err, 404, "model", NULL, "model '%.200s' not found", model);
		goto out;
	}
	snprintf(o->model, sizeof o->model, "%s", model);
	if (!name_matches(model, m->id)) {
		rc = serve_error_set(err, 404, "model", NULL, "model '%.200s' not found", model);
		goto out;
	}
	if (!(oa = cJSON_CreateObject())) {
		rc = serve_error_set(err, 500, NULL, NULL, "out of memory");
		goto out;
	}
	const cJSON *stream = cJSON_GetObjectItemCaseSensitive(in, "stream");
	if (stream && !cJSON_IsNull(stream) && !cJSON_IsBool(stream)) {
		rc = serve_error_set(err, 400, "stream", NULL, "'stream' must be a boolean");
		goto out;
	}
	bool raw = false;
	if ((rc = chat ? chat_body(o, oa, in, err) : generate_body(o, oa, in, &raw, err)))
		goto out;
	if (o->done_reason) {
		if (keep_alive_zero(in))
			o->done_reason = "unload"; /* said as Ollama says it; the model stays loaded */
		goto out;
	}
	const cJSON *lp = cJSON_GetObjectItemCaseSensitive(in, "logprobs");
	if (lp && !cJSON_IsNull(lp) && !cJSON_IsFalse(lp)) {
		rc = serve_error_set(err, 400, "logprobs", NULL,
				     "'logprobs' is not supported on the Ollama API here; /v1/chat/completions has them");
		goto out;
	}
	const cJSON *schema;
	bool json;
	if ((rc = format_of(in, &schema, &json, err)) || (!raw && (rc = think_of(oa, in, m, model, err))) ||
	    (rc = options_of(o, oa, in, m, err)))
		goto out;
	if (!raw && (json || schema)) {
		cJSON *rf = cJSON_AddObjectToObject(oa, "response_format"), *js, *c;
		bool ok = rf && add_string(rf, "type", json ? "json_object" : "json_schema");
		if (ok && schema)
			ok = (js = cJSON_AddObjectToObject(rf, "json_schema")) && add_string(js, "name", "format") &&
			     (c = cJSON_Duplicate(schema, 1)) && cJSON_AddItemToObject(js, "schema", c);
		if (!ok) {
			rc = serve_error_set(err, 500, NULL, NULL, "out of memory");
			goto out;
		}
	}
	if (!cJSON_AddBoolToObject(oa, "stream", !cJSON_IsFalse(stream)) || !(text = cJSON_PrintUnformatted(oa))) {
		rc = serve_error_set(err, 500, NULL, NULL, "out of memory");
		goto out;
	}
	if ((rc = serve_request_parse(r, raw ? SERVE_COMPLETION : SERVE_CHAT, text, strlen(text), m->lim, err)))
		goto out;
	/* A raw prompt is a completion, whose OpenAI request has no
	 * response_format: the constraint is set here. */
	if (raw && (json || schema)) {
		r->format = json ? SERVE_FORMAT_JSON_OBJECT : SERVE_FORMAT_JSON_SCHEMA;
		if (schema && !(r->schema_json = cJSON_PrintUnformatted(schema))) {
			rc = serve_error_set(err, 500, NULL, NULL, "out of memory");
			goto out;
		}
	}
	rc = sampling_of(r, cJSON_GetObjectItemCaseSensitive(in, "options"), err);
out:
	free(text);
	cJSON_Delete(oa);
	cJSON_Delete(in);
	if (rc)
		serve_request_free(r);
	return rc;
}

/* ---- answers ---- */

static cJSON *head(const struct serve_ollama *o)
{
	char t[48];
	now_rfc3339(t, sizeof t);
	cJSON *x = cJSON_CreateObject();
	cJSON_AddStringToObject(x, "model", o->model);
	cJSON_AddStringToObject(x, "created_at", t);
	return x;
}


/* The text fields of one object: message {role, content, thinking,
 * tool_calls} for chat, response and thinking for generate. calls: the
 * parsed calls [from, to) of p, or none. */
static void put_text(const struct serve_ollama *o, cJSON *x, const char *content, size_t nc, const char *thinking,
		     size_t nt, const struct tool_call_parser *p, size_t from, size_t to)
{
	cJSON *m = o->chat ? cJSON_AddObjectToObject(x, "message") : x;
	if (o->chat)
		cJSON_AddStringToObject(m, "role", "assistant");
	char *s = malloc((nc > nt ? nc : nt) + 1);
	if (!s)
		return;
	memcpy(s, content ? content : "", nc);
	s[nc] = 0;
	cJSON_AddStringToObject(m, o->chat ? "content" : "response", s);
	if (nt) {
		memcpy(s, thinking, nt);
		s[nt] = 0;
		cJSON_AddStringToObject(m, "thinking", s);
	}
	free(s);
	if (!p || from >= to)
		return;
	cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
	for (size_t i = from; calls && i < to; i++) {
		cJSON *c = cJSON_CreateObject(), *f;
		cJSON_AddItemToArray(calls, c);
		cJSON_AddStringToObject(c, "id", p->calls[i].id);
		f = cJSON_AddObjectToObject(c, "function");
		cJSON_AddNumberToObject(f, "index", (double)i);
		cJSON_AddStringToObject(f, "name", p->calls[i].name);
		cJSON *args = cJSON_Parse(p->calls[i].arguments);
		cJSON_AddItemToObject(f, "arguments", args ? args : cJSON_CreateObject());
	}
}

/* done, done_reason and the statistics of the final object. */
static void put_done(const struct serve_ollama *o, cJSON *x, const struct serve_take *t)
{
	cJSON_AddTrueToObject(x, "done");
	cJSON_AddStringToObject(x, "done_reason", t->finish == SERVE_FINISH_LENGTH ? "length" : "stop");
	cJSON_AddNumberToObject(x, "total_duration", ns_of(clock_now_s() - o->t_start));
	/* The model is always loaded: the wait for a slot stands in. */
	cJSON_AddNumberToObject(x, "load_duration", ns_of(t->queue_s));
	cJSON_AddNumberToObject(x, "prompt_eval_count", t->n_prompt);
	cJSON_AddNumberToObject(x, "prompt_eval_duration", ns_of(t->ttft_s - t->queue_s));
	cJSON_AddNumberToObject(x, "eval_count", t->n_generated);
	cJSON_AddNumberToObject(x, "eval_duration", ns_of(t->decode_s));
}

char *serve_ollama_done_json(const struct serve_ollama *o)
{
	cJSON *x = head(o);
	put_text(o, x, "", 0, NULL, 0, NULL, 0, 0);
	cJSON_AddTrueToObject(x, "done");
	cJSON_AddStringToObject(x, "done_reason", o->done_reason ? o->done_reason : "load");
	return serve_json_print(x);
}

static char *ol_json(struct serve_answer *a, const struct serve_take *last)
{
	struct serve_ollama *o = a->dialect_ctx;
	const char *content = a->content.p;
	size_t nc = a->content.len, calls = 0;
	if (a->tools) {
		if (tool_call_parser_finish(&a->tp) != 0)
			return NULL;
		content = a->tp.content.data;
		nc = a->tp.content.len;
		calls = a->tp.n_calls;
	}
	cJSON *x = head(o);
	put_text(o, x, content, nc, a->reasoning.p, a->split ? a->reasoning.len : 0, a->tools ? &a->tp : NULL, 0,
		 calls);
	put_done(o, x, last);
	return serve_json_print(x);
}

static void line_put(struct strbuf *out, cJSON *x)
{
	serve_json_put(out, "", x, "\n");
}

/* A line of text not yet done (content, thinking, new calls). */
static void line_text(struct serve_ollama *o, struct strbuf *out, const char *content, size_t nc,
		      const char *thinking, size_t nt, const struct tool_call_parser *p, size_t from, size_t to)
{
	cJSON *x = head(o);
	put_text(o, x, content, nc, thinking, nt, p, from, to);
	cJSON_AddFalseToObject(x, "done");
	line_put(out, x);
}

/* With tools: the content the parser released and the calls it completed
 * since the last line. */
static void tools_flush(struct serve_ollama *o, struct serve_answer *a, struct strbuf *out, const char *thinking,
			size_t nt)
{
	size_t emitted = a->tp.content_emitted;
	const char *c = a->tp.content.data ? a->tp.content.data + o->content_sent : "";
	size_t nc = emitted > o->content_sent ? emitted - o->content_sent : 0;
	if (nc || nt)
		line_text(o, out, c, nc, thinking, nt, NULL, 0, 0);
	o->content_sent += nc;
	if (a->tp.n_calls > o->calls_sent)
		line_text(o, out, "", 0, NULL, 0, &a->tp, o->calls_sent, a->tp.n_calls);
	o->calls_sent = a->tp.n_calls;
}

static int ol_stream(struct serve_answer *a, const struct serve_take *t, struct strbuf *out)
{
	struct serve_ollama *o = a->dialect_ctx;
	a->started = true;
	size_t at = 0;
	for (int i = 0; i < t->n_ev; i++) {
		const struct serve_event *e = &t->ev[i];
		const char *r = t->text + at, *c = r + e->reasoning_len;
		size_t nr = a->split ? e->reasoning_len : 0, nc = e->content_len;
		at += e->reasoning_len + e->content_len;
		if (a->tools) {
			if (nc && tool_call_parser_feed(&a->tp, c, nc) != 0)
				out->rc = -ENOMEM;
			tools_flush(o, a, out, r, nr);
		} else if (nr || nc) {
			line_text(o, out, c, nc, r, nr, NULL, 0, 0);
		}
	}
	if (!t->done)
		return out->rc;
	if (t->finish == SERVE_FINISH_ERROR) {
		cJSON *x = cJSON_CreateObject();
		cJSON_AddStringToObject(x, "error", t->error.message);
		line_put(out, x);
	} else {
		if (a->tools) {
			if (tool_call_parser_finish(&a->tp) != 0)
				out->rc = -ENOMEM;
			tools_flush(o, a, out, NULL, 0);
		}
		cJSON *x = head(o);
		put_text(o, x, "", 0, NULL, 0, NULL, 0, 0);
		put_done(o, x, t);
		line_put(out, x);
	}
	a->finished = o->finished = true;
	return out->rc;
}

static char *ol_error(const struct serve_error *e)
{
	cJSON *x = cJSON_CreateObject();
	cJSON_AddStringToObject(x, "error", e->message);
	return serve_json_print(x);
}

const struct serve_dialect serve_ollama_dialect = {
	.stream_type = "application/x-ndjson",
	.json = ol_json,
	.stream = ol_stream,
	.error = ol_error,
	.ctx_free = free,
};

/* ---- what the server knows ---- */

/* "7.6B", "30.5M": parameter_size as Ollama writes it. */
static void size_text(char *out, size_t n, double params)
{
	static const char *const unit[] = { "", "K", "M", "B", "T" };
	int u = 0;
	while (params >= 1000 && u < 4) {
		params /= 1000;
		u++;
	}
	snprintf(out, n, "%.1f%s", params, unit[u]);
}

/* The weights' parameters and the container's bytes: resident tensors
 * and every expert of every layer. */
static void model_size(const struct manifest *man, double *params, double *bytes)
{
	*params = 0;
	*bytes = (double)man->resident_bytes;
	for (size_t i = 0; i < man->n_tensors; i++)
		*params += (double)man->tensors[i].shape[0] * (double)man->tensors[i].shape[1];
	for (size_t l = 0; l < man->n_expert_layers; l++) {
		const struct manifest_expert_layer *el = &man->layers[l];
		for (int k = 0; k < EXPERT_PARTS; k++)
			*params += (double)man->n_experts * (double)el->parts[k].shape[0] * (double)el->parts[k].shape[1];
		*bytes += (double)el->record_bytes * (double)el->n_records;
	}
}

static cJSON *details_of(const struct serve_ollama_model *m)
{
	const struct model *md = &m->s->model;
	double params, bytes;
	char ps[32];
	model_size(&md->man, &params, &bytes);
	size_text(ps, sizeof ps, params);
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "parent_model", "");
	cJSON_AddStringToObject(d, "format", "colibri");
	cJSON_AddStringToObject(d, "family", md->cfg.model_type);
	cJSON_AddItemToObject(d, "families", cJSON_CreateStringArray((const char *const[]){ md->cfg.model_type }, 1));
	cJSON_AddStringToObject(d, "parameter_size", ps);
	cJSON_AddStringToObject(d, "quantization_level", quant_type_name(md->man.expert_quant));
	return d;
}

/* One model of /api/tags or /api/ps. */
static cJSON *model_entry(const struct serve_ollama_model *m, bool running)
{
	char name[300], t[48], digest[24];
	double params, bytes;
	model_size(&m->s->model.man, &params, &bytes);
	tagged_name(name, sizeof name, m->id);
	snprintf(digest, sizeof digest, "%016" PRIx64, manifest_model_id(&m->s->model.man));
	cJSON *e = cJSON_CreateObject();
	cJSON_AddStringToObject(e, "name", name);
	cJSON_AddStringToObject(e, "model", name);
	if (!running) {
		rfc3339(t, sizeof t, (time_t)m->created, -1);
		cJSON_AddStringToObject(e, "modified_at", t);
	}
	cJSON_AddNumberToObject(e, "size", bytes);
	cJSON_AddStringToObject(e, "digest", digest);
	cJSON_AddItemToObject(e, "details", details_of(m));
	if (running) {
		/* Loaded for as long as the server runs. */
		rfc3339(t, sizeof t, (time_t)253402300799LL, -1);
		cJSON_AddStringToObject(e, "expires_at", t);
		cJSON_AddNumberToObject(e, "size_vram", 0);
		cJSON_AddNumberToObject(e, "context_length", m->ctx);
	}
	return e;
}

static cJSON *capabilities_of(const struct serve_ollama_model *m)
{
	cJSON *c = cJSON_CreateArray();
	cJSON_AddItemToArray(c, cJSON_CreateString("completion"));
	const struct serve_prompt *p = m->prompt;
	if (p && p->have_template && p->tool_format != TOOL_FORMAT_NONE)
		cJSON_AddItemToArray(c, cJSON_CreateString("tools"));
	if (p && (p->think_tags || p->harmony))
		cJSON_AddItemToArray(c, cJSON_CreateString("thinking"));
	return c;
}

static cJSON *show_of(const struct serve_ollama_model *m)
{
	const struct model_config *cfg = &m->s->model.cfg;
	double params, bytes;
	model_size(&m->s->model.man, &params, &bytes);
	cJSON *x = cJSON_CreateObject();
	char text[256], key[96], t[48];
	snprintf(text, sizeof text, "temperature %g\ntop_k %d\ntop_p %g", m->lim->temp, m->lim->top_k, m->lim->top_p);
	cJSON_AddStringToObject(x, "parameters", text);
	cJSON_AddItemToObject(x, "details", details_of(m));
	cJSON *mi = cJSON_AddObjectToObject(x, "model_info");
	const char *a = cfg->model_type;
	cJSON_AddStringToObject(mi, "general.architecture", a);
	cJSON_AddNumberToObject(mi, "general.parameter_count", params);
	static const char *const keys[] = { "context_length", "embedding_length", "block_count", "attention.head_count",
					    "attention.head_count_kv", "expert_count", "expert_used_count", "vocab_size" };
	const double vals[] = { cfg->max_positions, cfg->hidden, cfg->n_layers, cfg->n_heads,
				cfg->n_kv_heads, cfg->n_experts, cfg->top_k, cfg->vocab };
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		snprintf(key, sizeof key, "%s.%s", a, keys[i]);
		cJSON_AddNumberToObject(mi, key, vals[i]);
	}
	cJSON_AddItemToObject(x, "capabilities", capabilities_of(m));
	rfc3339(t, sizeof t, (time_t)m->created, -1);
	cJSON_AddStringToObject(x, "modified_at", t);
	return x;
}

char *serve_ollama_info(enum serve_route r, const struct serve_ollama_model *m, const char *body, size_t len,
			struct serve_error *err)
{
	cJSON *x = NULL;
	if (r == SERVE_ROUTE_OLLAMA_VERSION) {
		x = cJSON_CreateObject();
		cJSON_AddStringToObject(x, "version", SERVE_OLLAMA_VERSION);
	} else if (r == SERVE_ROUTE_OLLAMA_TAGS || r == SERVE_ROUTE_OLLAMA_PS) {
		x = cJSON_CreateObject();
		cJSON_AddItemToArray(cJSON_AddArrayToObject(x, "models"), model_entry(m, r == SERVE_ROUTE_OLLAMA_PS));
	} else {
		/* show, embed, embeddings: a body naming the model ("name" is
		 * the older spelling of show's). */
		if (!body || len == 0) {
			serve_error_set(err, 400, NULL, NULL, "missing request body");
			return NULL;
		}
		cJSON *in = serve_body_parse(body, len, err);
		if (!in)
			return NULL;
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(in, "model");
		if (!cJSON_IsString(name) || !name->valuestring[0])
			name = cJSON_GetObjectItemCaseSensitive(in, "name");
		if (!cJSON_IsString(name) || !name->valuestring[0])
			serve_error_set(err, 400, "model", NULL, "model is required");
		else if (!name_matches(name->valuestring, m->id))
			serve_error_set(err, 404, "model", NULL, "model '%.200s' not found", name->valuestring);
		else if (r == SERVE_ROUTE_OLLAMA_SHOW)
			x = show_of(m);
		else
			serve_error_set(err, 400, NULL, NULL,
					"\"%.200s\" does not support embeddings: colibri serve generates text and computes "
					"no embeddings",
					name->valuestring);
		cJSON_Delete(in);
		if (!x)
			return NULL;
	}
	char *s = serve_json_print(x);
	if (!s)
		serve_error_set(err, 500, NULL, NULL, "out of memory");
	return s;
}
