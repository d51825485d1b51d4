/*
 * serve_request — see serve_request.h. Ranges are OpenAI's: temperature
 * [0, 2], top_p (0, 1], penalties [-2, 2], top_logprobs [0, 20]; top_k is
 * an extension (vLLM's: -1 or 0 is off), and so are min_p [0, 1] and the
 * repetition penalty (0, 100] under vLLM's name, repetition_penalty, or
 * llama-server's, repeat_penalty (one of them, or both equal), over the
 * last repeat_last_n tokens of prompt and output (0 none, -1 all). Without
 * repeat_last_n the window is each habit's own: 64 under llama-server's
 * name, as llama-server does; the whole context under vLLM's name and for
 * the model's generation_config.json penalty, as vLLM and transformers do. A seed is any integer a double
 * holds exactly (|seed| <= 2^53), negative ones taken modulo 2^64.
 */
#include "engine/serve/serve_request.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_get.h"

/* Replaces each byte that does not start a valid UTF-8 character with '?':
 * error texts quote what the client sent (and %.Ns may cut a character),
 * and the answer must be valid JSON text. */
static void utf8_scrub(char *s)
{
	size_t n = strlen(s);
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		size_t k = c < 0x80 ? 1 : c >> 5 == 6 ? 2 : c >> 4 == 14 ? 3 : c >> 3 == 30 ? 4 : 0;
		if (k && i + k <= n && serve_utf8_valid(s + i, k)) {
			i += k;
		} else {
			s[i] = '?';
			i++;
		}
	}
}

int serve_error_set(struct serve_error *e, int status, const char *param, const char *code, const char *fmt, ...)
{
	e->status = status;
	e->code = code;
	snprintf(e->param, sizeof e->param, "%s", param ? param : "");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof e->message, fmt, ap);
	va_end(ap);
	utf8_scrub(e->param);
	utf8_scrub(e->message);
	return -EINVAL;
}

const char *serve_error_type(int status)
{
	return status >= 500 ? "server_error" : "invalid_request_error";
}

bool serve_utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + n;
	while (p < end) {
		unsigned c = *p;
		if (c < 0x80) {
			p++;
			continue;
		}
		int k;
		unsigned cp, min;
		if (c >= 0xc2 && c <= 0xdf) {
			k = 1, cp = c & 0x1f, min = 0x80;
		} else if (c >= 0xe0 && c <= 0xef) {
			k = 2, cp = c & 0x0f, min = 0x800;
		} else if (c >= 0xf0 && c <= 0xf4) {
			k = 3, cp = c & 0x07, min = 0x10000;
		} else {
			return false;
		}
		if (end - p <= k)
			return false;
		for (int i = 1; i <= k; i++) {
			if ((p[i] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		p += k + 1;
	}
	return true;
}

static char *dup_n(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = 0;
	}
	return d;
}

/* A number field: absent or null keeps *out. */
static int get_num(const cJSON *o, const char *key, double lo, double hi, bool lo_open, float *out,
		   struct serve_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v))
		return 0;
	double x = cJSON_IsNumber(v) ? v->valuedouble : 0;
	if (!cJSON_IsNumber(v) || !(lo_open ? x > lo : x >= lo) || !(x <= hi))
		return serve_error_set(err, 400, key, NULL, "'%s' must be a number in %c%g, %g]", key, lo_open ? '(' : '[',
				       lo, hi);
	*out = (float)x;
	return 0;
}

/* An integer field in [lo, hi]: absent or null keeps *out. */
static int get_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *out, struct serve_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v))
		return 0;
	if (json_int(v, lo, hi, out) != 0)
		return serve_error_set(err, 400, key, NULL, "'%s' must be an integer in [%lld, %lld]", key, (long long)lo,
				       (long long)hi);
	return 0;
}

static int get_bool(const cJSON *o, const char *key, bool *out, struct serve_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsBool(v))
		return serve_error_set(err, 400, key, NULL, "'%s' must be a boolean", key);
	*out = cJSON_IsTrue(v);
	return 0;
}

/* A string value checked for UTF-8, copied. */
static int take_string(const cJSON *v, const char *param, char **out, struct serve_error *err)
{
	size_t n = strlen(v->valuestring);
	if (!serve_utf8_valid(v->valuestring, n))
		return serve_error_set(err, 400, param, NULL, "'%s' is not valid UTF-8", param);
	if (!(*out = dup_n(v->valuestring, n)))
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	return 0;
}

static int parse_stop(struct serve_request *r, const cJSON *o, struct serve_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "stop");
	if (!v || cJSON_IsNull(v))
		return 0;
	const cJSON *one = cJSON_IsString(v) ? v : NULL;
	if (!one && !cJSON_IsArray(v))
		return serve_error_set(err, 400, "stop", NULL, "'stop' must be a string or an array of strings");
	int n = one ? 1 : cJSON_GetArraySize(v);
	if (n > SERVE_STOP_MAX)
		return serve_error_set(err, 400, "stop", NULL, "'stop' holds %d strings; at most %d are allowed", n,
				       SERVE_STOP_MAX);
	for (int i = 0; i < n; i++) {
		const cJSON *s = one ? one : cJSON_GetArrayItem(v, i);
		char param[32];
		snprintf(param, sizeof param, one ? "stop" : "stop[%d]", i);
		if (!cJSON_IsString(s))
			return serve_error_set(err, 400, param, NULL, "'%s' must be a string", param);
		size_t len = strlen(s->valuestring);
		if (len == 0 || len > SERVE_STOP_BYTES_MAX)
			return serve_error_set(err, 400, param, NULL, "'%s' must hold 1 to %d bytes", param,
					       SERVE_STOP_BYTES_MAX);
		int rc = take_string(s, param, &r->stop[r->n_stop], err);
		if (rc)
			return rc;
		r->n_stop++;
	}
	return 0;
}

/* A message's content: a string, null, or an array of text parts. */
static int parse_content(struct serve_message *m, const cJSON *c, int i, struct serve_error *err)
{
	char param[64];
	snprintf(param, sizeof param, "messages[%d].content", i);
	if (!c || cJSON_IsNull(c)) {
		m->content = dup_n("", 0);
		return m->content ? 0 : serve_error_set(err, 500, NULL, NULL, "out of memory");
	}
	if (cJSON_IsString(c))
		return take_string(c, param, &m->content, err);
	if (!cJSON_IsArray(c))
		return serve_error_set(err, 400, param, NULL, "'%s' must be a string or an array of content parts", param);
	size_t total = 0;
	int n = cJSON_GetArraySize(c);
	for (int pass = 0; pass < 2; pass++) {
		size_t at = 0;
		for (int k = 0; k < n; k++) {
			const cJSON *part = cJSON_GetArrayItem(c, k);
			const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
			const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
			char pp[96];
			snprintf(pp, sizeof pp, "%s[%d].type", param, k);
			if (!cJSON_IsObject(part) || !cJSON_IsString(type))
				return serve_error_set(err, 400, pp, NULL, "'%s' must be a content part with a type", pp);
			if (strcmp(type->valuestring, "text") != 0)
				return serve_error_set(err, 400, pp, NULL,
						       "content parts of type '%.40s' are not supported (only 'text')",
						       type->valuestring);
			snprintf(pp, sizeof pp, "%s[%d].text", param, k);
			if (!cJSON_IsString(text))
				return serve_error_set(err, 400, pp, NULL, "'%s' must be a string", pp);
			size_t len = strlen(text->valuestring);
			if (pass == 0 && !serve_utf8_valid(text->valuestring, len))
				return serve_error_set(err, 400, pp, NULL, "'%s' is not valid UTF-8", pp);
			if (pass == 1)
				memcpy(m->content + at, text->valuestring, len);
			at += len;
		}
		total = at;
		if (pass == 0 && !(m->content = malloc(total + 1)))
			return serve_error_set(err, 500, NULL, NULL, "out of memory");
	}
	m->content[total] = 0;
	return 0;
}

/* A function object of a tool or tool call: {"name": string, ...}, and
 * for a call also "arguments": string (JSON text, as OpenAI sends it). */
static int check_function(const cJSON *item, const char *param, bool call, struct serve_error *err)
{
	char p[128];
	const cJSON *fn = cJSON_GetObjectItemCaseSensitive(item, "function");
	snprintf(p, sizeof p, "%s.function", param);
	if (!cJSON_IsObject(item) || !cJSON_IsObject(fn))
		return serve_error_set(err, 400, p, NULL, "'%s' must be an object", p);
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "type");
	if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "function"))) {
		snprintf(p, sizeof p, "%s.type", param);
		return serve_error_set(err, 400, p, NULL, "'%s' must be \"function\"", p);
	}
	snprintf(p, sizeof p, "%s.function.name", param);
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
	if (!cJSON_IsString(name) || !name->valuestring[0])
		return serve_error_set(err, 400, p, NULL, "'%s' must be a non-empty string", p);
	snprintf(p, sizeof p, "%s.function.arguments", param);
	if (call && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "arguments")))
		return serve_error_set(err, 400, p, NULL, "'%s' must be a string (JSON text)", p);
	return 0;
}

static int check_tool_calls(const cJSON *calls, int i, struct serve_error *err)
{
	char param[64];
	snprintf(param, sizeof param, "messages[%d].tool_calls", i);
	if (!calls || cJSON_IsNull(calls))
		return 0;
	if (!cJSON_IsArray(calls))
		return serve_error_set(err, 400, param, NULL, "'%s' must be an array", param);
	int k = 0;
	for (const cJSON *c = calls->child; c; c = c->next, k++) {
		char p[80];
		snprintf(p, sizeof p, "%s[%d]", param, k);
		int rc = check_function(c, p, true, err);
		if (rc)
			return rc;
	}
	return 0;
}

/* Copies m's field key into d when it has type check(); returns false when out of memory. */
static bool copy_field(cJSON *d, const cJSON *m, const char *key, cJSON_bool (*check)(const cJSON *))
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(m, key);
	if (!f || !check(f))
		return true;
	cJSON *c = cJSON_Duplicate(f, 1);
	return c && cJSON_AddItemToObject(d, key, c);
}

/*
 * The messages as a Jinja template reads them (r->messages_json): role as
 * parsed, content a string (text parts joined) or null, and the fields
 * templates use when they have the right type: tool_calls, tool_call_id,
 * name, reasoning_content. Tool call arguments stay as the client sent them.
 */
static int messages_json(struct serve_request *r, const cJSON *v, struct serve_error *err)
{
	cJSON *a = cJSON_CreateArray();
	bool ok = a != NULL;
	int i = 0;
	for (const cJSON *m = v->child; ok && m; m = m->next, i++) {
		cJSON *d = cJSON_CreateObject();
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
		ok = d && cJSON_AddItemToArray(a, d) && cJSON_AddStringToObject(d, "role", r->messages[i].role) &&
		     ((!c || cJSON_IsNull(c)) ? cJSON_AddNullToObject(d, "content") != NULL
					      : cJSON_AddStringToObject(d, "content", r->messages[i].content) != NULL) &&
		     copy_field(d, m, "tool_calls", cJSON_IsArray) && copy_field(d, m, "tool_call_id", cJSON_IsString) &&
		     copy_field(d, m, "name", cJSON_IsString) && copy_field(d, m, "reasoning_content", cJSON_IsString);
	}
	if (ok)
		ok = (r->messages_json = cJSON_PrintUnformatted(a)) != NULL;
	cJSON_Delete(a);
	if (!ok)
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	if (!serve_utf8_valid(r->messages_json, strlen(r->messages_json)))
		return serve_error_set(err, 400, "messages", NULL, "'messages' is not valid UTF-8");
	return 0;
}

static int parse_messages(struct serve_request *r, const cJSON *o, struct serve_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "messages");
	if (!v)
		return serve_error_set(err, 400, "messages", NULL, "'messages' is required");
	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
		return serve_error_set(err, 400, "messages", NULL, "'messages' must be a non-empty array");
	int n = cJSON_GetArraySize(v);
	if (n > SERVE_MESSAGES_MAX)
		return serve_error_set(err, 400, "messages", NULL, "'messages' holds %d messages; at most %d are allowed",
				       n, SERVE_MESSAGES_MAX);
	if (!(r->messages = calloc((size_t)n, sizeof *r->messages)))
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	static const char *const roles[] = { "system", "user", "assistant", "tool", "developer" };
	int i = 0;
	for (const cJSON *m = v->child; m; m = m->next, i++) {
		char param[64];
		snprintf(param, sizeof param, "messages[%d]", i);
		if (!cJSON_IsObject(m))
			return serve_error_set(err, 400, param, NULL, "'%s' must be an object", param);
		const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
		snprintf(param, sizeof param, "messages[%d].role", i);
		if (!cJSON_IsString(role))
			return serve_error_set(err, 400, param, NULL, "'%s' must be a string", param);
		size_t k = 0;
		while (k < sizeof roles / sizeof roles[0] && strcmp(role->valuestring, roles[k]) != 0)
			k++;
		if (k == sizeof roles / sizeof roles[0])
			return serve_error_set(err, 400, param, NULL,
					       "'%s' must be one of system, developer, user, assistant, tool", param);
		struct serve_message *sm = &r->messages[i];
		r->n_messages = i + 1;
		if (!(sm->role = dup_n(roles[k == 4 ? 0 : k], strlen(roles[k == 4 ? 0 : k]))))
			return serve_error_set(err, 500, NULL, NULL, "out of memory");
		const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
		sm->has_tool_calls = calls && !cJSON_IsNull(calls) && !(cJSON_IsArray(calls) && !calls->child);
		int rc = check_tool_calls(calls, i, err);
		if (rc)
			return rc;
		rc = parse_content(sm, cJSON_GetObjectItemCaseSensitive(m, "content"), i, err);
		if (rc)
			return rc;
	}
	return messages_json(r, v, err);
}

/* tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name": N}}
 * naming one of tools (the request's array, or NULL). */
static int parse_tool_choice(struct serve_request *r, const cJSON *o, const cJSON *tools, struct serve_error *err)
{
	bool have_tools = cJSON_IsArray(tools) && tools->child;
	r->tool_choice = have_tools ? SERVE_TOOLS_AUTO : SERVE_TOOLS_NONE;
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "tool_choice");
	if (!v || cJSON_IsNull(v))
		return 0;
	if (cJSON_IsString(v)) {
		if (!strcmp(v->valuestring, "none"))
			r->tool_choice = SERVE_TOOLS_NONE;
		else if (!strcmp(v->valuestring, "auto"))
			r->tool_choice = have_tools ? SERVE_TOOLS_AUTO : SERVE_TOOLS_NONE;
		else if (!strcmp(v->valuestring, "required"))
			r->tool_choice = SERVE_TOOLS_REQUIRED;
		else
			return serve_error_set(err, 400, "tool_choice", NULL,
					       "'tool_choice' must be \"none\", \"auto\", \"required\" or a function object");
	} else if (cJSON_IsObject(v)) {
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type");
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(v, "function"), "name");
		if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0)
			return serve_error_set(err, 400, "tool_choice.type", NULL, "'tool_choice.type' must be \"function\"");
		if (!cJSON_IsString(name) || !name->valuestring[0])
			return serve_error_set(err, 400, "tool_choice.function.name", NULL,
					       "'tool_choice.function.name' must be a non-empty string");
		const cJSON *t = have_tools ? tools->child : NULL;
		for (; t; t = t->next) {
			const cJSON *tn = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
			if (cJSON_IsString(tn) && !strcmp(tn->valuestring, name->valuestring))
				break;
		}
		if (!t)
			return serve_error_set(err, 400, "tool_choice.function.name", NULL,
					       "'tool_choice.function.name' names '%.60s', which is not one of 'tools'",
					       name->valuestring);
		r->tool_choice = SERVE_TOOLS_NAMED;
		int rc = take_string(name, "tool_choice.function.name", &r->tool_name, err);
		if (rc)
			return rc;
	} else {
		return serve_error_set(err, 400, "tool_choice", NULL, "'tool_choice' must be a string or an object");
	}
	if (r->tool_choice == SERVE_TOOLS_REQUIRED && !have_tools)
		return serve_error_set(err, 400, "tool_choice", NULL, "'tool_choice' \"required\" needs 'tools'");
	return 0;
}

/* response_format: {"type": "text"}, {"type": "json_object"}, or {"type":
 * "json_schema", "json_schema": {"name": N, "schema": S, "strict": B}}; the
 * schema is also taken from response_format.schema (llama.cpp's and vLLM's
 * spelling). Whether the schema converts is the caller's check. */
static int parse_response_format(struct serve_request *r, const cJSON *o, struct serve_error *err)
{
	const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "response_format");
	if (!fmt || cJSON_IsNull(fmt))
		return 0;
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(fmt, "type");
	if (!cJSON_IsObject(fmt) || !cJSON_IsString(t))
		return serve_error_set(err, 400, "response_format", NULL, "'response_format' must be an object with a type");
	if (!strcmp(t->valuestring, "text"))
		return 0;
	const cJSON *js = cJSON_GetObjectItemCaseSensitive(fmt, "json_schema");
	const cJSON *schema = cJSON_GetObjectItemCaseSensitive(fmt, "schema");
	if (!strcmp(t->valuestring, "json_object")) {
		r->format = SERVE_FORMAT_JSON_OBJECT;
		if (!schema || cJSON_IsNull(schema))
			return 0;
	} else if (!strcmp(t->valuestring, "json_schema")) {
		r->format = SERVE_FORMAT_JSON_SCHEMA;
		if (js && !cJSON_IsNull(js) && !cJSON_IsObject(js))
			return serve_error_set(err, 400, "response_format.json_schema", NULL,
					       "'response_format.json_schema' must be an object");
		const cJSON *in = cJSON_GetObjectItemCaseSensitive(js, "schema");
		if (in)
			schema = in;
		const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
		if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict))
			return serve_error_set(err, 400, "response_format.json_schema.strict", NULL,
					       "'response_format.json_schema.strict' must be a boolean");
		r->schema_strict = cJSON_IsTrue(strict);
		if (!schema || cJSON_IsNull(schema))
			return serve_error_set(err, 400, "response_format.json_schema.schema", NULL,
					       "'response_format.json_schema.schema' is required");
	} else {
		return serve_error_set(err, 400, "response_format.type", NULL,
				       "response_format '%.40s' is not supported (text, json_object or json_schema)",
				       t->valuestring);
	}
	if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
		return serve_error_set(err, 400, "response_format.json_schema.schema", NULL,
				       "'response_format.json_schema.schema' must be a JSON Schema (an object or a boolean)");
	r->format = SERVE_FORMAT_JSON_SCHEMA;
	if (!(r->schema_json = cJSON_PrintUnformatted(schema)))
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	if (!serve_utf8_valid(r->schema_json, strlen(r->schema_json)))
		return serve_error_set(err, 400, "response_format.json_schema.schema", NULL,
				       "'response_format.json_schema.schema' is not valid UTF-8");
	return 0;
}

static int parse_chat(struct serve_request *r, const cJSON *o, struct serve_error *err)
{
	int rc = parse_messages(r, o, err);
	if (rc)
		return rc;
	r->add_generation_prompt = true;
	const cJSON *kw = cJSON_GetObjectItemCaseSensitive(o, "chat_template_kwargs");
	if (kw && !cJSON_IsNull(kw)) {
		if (!cJSON_IsObject(kw))
			return serve_error_set(err, 400, "chat_template_kwargs", NULL, "'chat_template_kwargs' must be an object");
		cJSON *more = NULL;
		for (const cJSON *k = kw->child; k; k = k->next) {
			char param[96];
			snprintf(param, sizeof param, "chat_template_kwargs.%.60s", k->string);
			bool b = false;
			if (!strcmp(k->string, "messages") || !strcmp(k->string, "tools") || !strcmp(k->string, "documents")) {
				cJSON_Delete(more);
				return serve_error_set(err, 400, param, NULL, "'%s' cannot be set: it is the request's own",
						       param);
			}
			if (strcmp(k->string, "enable_thinking") != 0 && strcmp(k->string, "add_generation_prompt") != 0) {
				/* Any other variable goes to the template as it is. */
				cJSON *c = cJSON_Duplicate(k, 1);
				if (!more)
					more = cJSON_CreateObject();
				if (!c || !more || !cJSON_AddItemToObject(more, k->string, c)) {
					cJSON_Delete(c);
					cJSON_Delete(more);
					return serve_error_set(err, 500, NULL, NULL, "out of memory");
				}
				continue;
			}
			if (!cJSON_IsBool(k)) {
				cJSON_Delete(more);
				return serve_error_set(err, 400, param, NULL, "'%s' must be a boolean", param);
			}
			b = cJSON_IsTrue(k);
			if (!strcmp(k->string, "enable_thinking"))
				r->enable_thinking = b;
			else
				r->add_generation_prompt = b;
		}
		if (more) {
			r->template_kwargs_json = cJSON_PrintUnformatted(more);
			cJSON_Delete(more);
			if (!r->template_kwargs_json)
				return serve_error_set(err, 500, NULL, NULL, "out of memory");
			if (!serve_utf8_valid(r->template_kwargs_json, strlen(r->template_kwargs_json)))
				return serve_error_set(err, 400, "chat_template_kwargs", NULL,
						       "'chat_template_kwargs' is not valid UTF-8");
		}
	}
	const cJSON *tools = cJSON_GetObjectItemCaseSensitive(o, "tools");
	if (tools && !cJSON_IsNull(tools)) {
		if (!cJSON_IsArray(tools))
			return serve_error_set(err, 400, "tools", NULL, "'tools' must be an array");
		int k = 0;
		for (const cJSON *t = tools->child; t; t = t->next, k++) {
			char p[32];
			snprintf(p, sizeof p, "tools[%d]", k);
			if ((rc = check_function(t, p, false, err)))
				return rc;
		}
		if (tools->child && !(r->tools_json = cJSON_PrintUnformatted(tools)))
			return serve_error_set(err, 500, NULL, NULL, "out of memory");
		if (r->tools_json && !serve_utf8_valid(r->tools_json, strlen(r->tools_json)))
			return serve_error_set(err, 400, "tools", NULL, "'tools' is not valid UTF-8");
	}
	if ((rc = parse_tool_choice(r, o, tools, err)) || (rc = parse_response_format(r, o, err)))
		return rc;
	if (r->format != SERVE_FORMAT_TEXT && (r->tool_choice == SERVE_TOOLS_REQUIRED || r->tool_choice == SERVE_TOOLS_NAMED))
		return serve_error_set(err, 400, "response_format", NULL,
				       "'response_format' cannot be combined with a tool_choice that forces a call");
	bool lp = false;
	int64_t top = 0;
	if ((rc = get_bool(o, "logprobs", &lp, err)) || (rc = get_int(o, "top_logprobs", 0, BATCH_LOGPROBS_MAX, &top, err)))
		return rc;
	if (top > 0 && !lp)
		return serve_error_set(err, 400, "top_logprobs", NULL, "'top_logprobs' needs 'logprobs' set to true");
	r->p.logprobs = lp;
	r->p.top_logprobs = (int)top;
	return 0;
}

/* prompt: a string, an array of token ids, or an array holding one of those. */
static int parse_prompt(struct serve_request *r, const cJSON *o, const struct serve_limits *lim,
			struct serve_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "prompt");
	if (!v)
		return serve_error_set(err, 400, "prompt", NULL, "'prompt' is required");
	if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && (cJSON_IsString(v->child) || cJSON_IsArray(v->child)))
		v = v->child;
	else if (cJSON_IsArray(v) && v->child && (cJSON_IsString(v->child) || cJSON_IsArray(v->child)))
		return serve_error_set(err, 400, "prompt", NULL, "several prompts in one request are not supported");
	if (cJSON_IsString(v))
		return take_string(v, "prompt", &r->prompt, err);
	if (!cJSON_IsArray(v) || !v->child)
		return serve_error_set(err, 400, "prompt", NULL, "'prompt' must be a string or a non-empty array of token ids");
	int n = cJSON_GetArraySize(v), i = 0;
	if (!(r->prompt_ids = malloc((size_t)n * sizeof *r->prompt_ids)))
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	for (const cJSON *t = v->child; t; t = t->next, i++) {
		int64_t id;
		if (json_int(t, 0, lim->vocab - 1, &id) != 0)
			return serve_error_set(err, 400, "prompt", NULL, "prompt[%d] must be a token id in [0, %d]", i,
					       lim->vocab - 1);
		r->prompt_ids[i] = (int32_t)id;
	}
	r->n_prompt_ids = n;
	return 0;
}

static int parse_completion(struct serve_request *r, const cJSON *o, const struct serve_limits *lim,
			    struct serve_error *err)
{
	int rc = parse_prompt(r, o, lim, err);
	if (rc || (rc = get_bool(o, "echo", &r->echo, err)))
		return rc;
	const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(o, "suffix");
	if (suffix && !cJSON_IsNull(suffix) && !(cJSON_IsString(suffix) && !suffix->valuestring[0]))
		return serve_error_set(err, 400, "suffix", NULL, "'suffix' is not supported");
	int64_t best = 1, lp = -1;
	if ((rc = get_int(o, "best_of", 1, 1, &best, err)))
		return serve_error_set(err, 400, "best_of", NULL, "'best_of' other than 1 is not supported");
	if ((rc = get_int(o, "logprobs", 0, BATCH_LOGPROBS_MAX, &lp, err)))
		return rc;
	if (lp >= 0 && r->echo)
		return serve_error_set(err, 400, "logprobs", NULL, "'logprobs' with 'echo' is not supported");
	r->p.logprobs = lp >= 0;
	r->p.top_logprobs = lp > 0 ? (int)lp : 0;
	return 0;
}

/* A repetition penalty under name key, in (0, 100] once rounded to
 * float (a tiny one that rounds to 0 would divide by it); absent or null
 * keeps *out. */
static int get_repeat_penalty(const cJSON *o, const char *key, float *out, struct serve_error *err)
{
	float v = -1;
	int rc = get_num(o, key, 0, 100, true, &v, err);
	if (rc || v == -1)
		return rc;
	if (!(v > 0))
		return serve_error_set(err, 400, key, NULL, "'%s' must be a number in (0, 100]", key);
	*out = v;
	return 0;
}

/* min_p and the repetition penalty, under either name, and its window. */
static int parse_repeat(struct serve_request *r, const cJSON *o, const struct serve_limits *lim,
			struct serve_error *err)
{
	r->p.min_p = lim->min_p;
	float vllm = 0, llama = 0;
	int64_t last_n = -1;
	int rc;
	if ((rc = get_num(o, "min_p", 0, 1, false, &r->p.min_p, err)) ||
	    (rc = get_repeat_penalty(o, "repetition_penalty", &vllm, err)) ||
	    (rc = get_repeat_penalty(o, "repeat_penalty", &llama, err)) ||
	    (rc = get_int(o, "repeat_last_n", -1, INT32_MAX, &last_n, err)))
		return rc;
	if (vllm > 0 && llama > 0 && vllm != llama)
		return serve_error_set(err, 400, "repeat_penalty", NULL,
				       "'repetition_penalty' and 'repeat_penalty' are one setting: give one of them");
	r->p.repeat_penalty = vllm > 0 ? vllm : llama > 0 ? llama : lim->repeat_penalty;
	if (!cJSON_GetObjectItemCaseSensitive(o, "repeat_last_n") && !(vllm > 0) && llama > 0)
		last_n = 64;
	r->p.repeat_last_n = (int32_t)last_n;
	return 0;
}

static int parse_common(struct serve_request *r, const cJSON *o, const struct serve_limits *lim,
			struct serve_error *err)
{
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
	int rc = 0;
	if (model && !cJSON_IsNull(model)) {
		if (!cJSON_IsString(model))
			return serve_error_set(err, 400, "model", NULL, "'model' must be a string");
		if ((rc = take_string(model, "model", &r->model, err)))
			return rc;
	}
	int64_t mt = -1, mct = -1, n = 1, seed = 0, top_k = 0;
	if ((rc = get_int(o, "max_tokens", 1, lim->max_tokens_cap, &mt, err)) ||
	    (rc = get_int(o, "max_completion_tokens", 1, lim->max_tokens_cap, &mct, err)))
		return rc;
	r->max_tokens = mct >= 0 ? (int)mct : (int)mt;
	if ((rc = get_int(o, "n", 1, 1, &n, err)))
		return serve_error_set(err, 400, "n", NULL, "'n' other than 1 is not supported");
	r->p.top_p = lim->top_p;
	r->p.temp = lim->temp;
	top_k = lim->top_k;
	if ((rc = get_num(o, "temperature", 0, 2, false, &r->p.temp, err)) ||
	    (rc = get_num(o, "top_p", 0, 1, true, &r->p.top_p, err)) ||
	    (rc = get_num(o, "presence_penalty", -2, 2, false, &r->p.presence_penalty, err)) ||
	    (rc = get_num(o, "frequency_penalty", -2, 2, false, &r->p.frequency_penalty, err)) ||
	    (rc = get_int(o, "top_k", -1, INT32_MAX, &top_k, err)))
		return rc;
	r->p.top_k = top_k > 0 ? (int32_t)top_k : 0;
	if (!(r->p.top_p > 0 && r->p.top_p <= 1))
		r->p.top_p = 1;
	if ((rc = parse_repeat(r, o, lim, err)))
		return rc;
	const cJSON *sv = cJSON_GetObjectItemCaseSensitive(o, "seed");
	if ((rc = get_int(o, "seed", -JSON_INT_EXACT, JSON_INT_EXACT, &seed, err)))
		return rc;
	r->seed_given = sv && !cJSON_IsNull(sv);
	r->p.seed = (uint64_t)seed;
	const cJSON *bias = cJSON_GetObjectItemCaseSensitive(o, "logit_bias");
	if (bias && !cJSON_IsNull(bias) && !(cJSON_IsObject(bias) && !bias->child))
		return serve_error_set(err, 400, "logit_bias", NULL, "'logit_bias' is not supported");
	if ((rc = parse_stop(r, o, err)) || (rc = get_bool(o, "stream", &r->stream, err)))
		return rc;
	const cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
	if (so && !cJSON_IsNull(so)) {
		if (!cJSON_IsObject(so))
			return serve_error_set(err, 400, "stream_options", NULL, "'stream_options' must be an object");
		const cJSON *iu = cJSON_GetObjectItemCaseSensitive(so, "include_usage");
		if (iu && !cJSON_IsNull(iu) && !cJSON_IsBool(iu))
			return serve_error_set(err, 400, "stream_options.include_usage", NULL,
					       "'stream_options.include_usage' must be a boolean");
		r->include_usage = cJSON_IsTrue(iu);
	}
	return 0;
}

cJSON *serve_body_parse(const char *body, size_t len, struct serve_error *err)
{
	if (memchr(body, 0, len) || memmem(body, len, "\\u0000", 6)) {
		serve_error_set(err, 400, NULL, NULL, "the body holds a NUL character");
		return NULL;
	}
	/* JSON text is UTF-8 (RFC 8259), and cJSON keeps whatever bytes a
	 * string or key holds: checked once here, a schema's keys, a tool's
	 * description or a message an API rewrites are valid text wherever
	 * they go next (fuzz_serve_ollama found a schema key that was not). */
	if (!serve_utf8_valid(body, len)) {
		serve_error_set(err, 400, NULL, NULL, "the body is not valid UTF-8");
		return NULL;
	}
	cJSON *o = cJSON_ParseWithLength(body, len);
	if (!o) {
		serve_error_set(err, 400, NULL, NULL, "the body is not valid JSON");
		return NULL;
	}
	char path[sizeof err->param];
	int dup = cJSON_IsObject(o) ? json_find_duplicate_key(o, path, sizeof path) : 0;
	if (!cJSON_IsObject(o))
		serve_error_set(err, 400, NULL, NULL, "the body must be a JSON object");
	else if (dup == -ENOMEM)
		serve_error_set(err, 500, NULL, NULL, "out of memory");
	else if (dup < 0)
		serve_error_set(err, 400, NULL, NULL, "the body nests too deep");
	else if (dup)
		serve_error_set(err, 400, path, NULL, "'%s' is given twice: a key may appear once in an object", path);
	if (!cJSON_IsObject(o) || dup) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

int serve_request_parse(struct serve_request *r, enum serve_endpoint e, const char *body, size_t len,
			const struct serve_limits *lim, struct serve_error *err)
{
	memset(r, 0, sizeof *r);
	r->endpoint = e;
	r->enable_thinking = -1;
	r->max_tokens = -1;
	cJSON *o = serve_body_parse(body, len, err);
	int rc = o ? 0 : -EINVAL;
	if (o && !(rc = parse_common(r, o, lim, err)))
		rc = e == SERVE_CHAT ? parse_chat(r, o, err) : parse_completion(r, o, lim, err);
	cJSON_Delete(o);
	if (rc) {
		serve_request_free(r);
		r->endpoint = e;
	}
	return rc;
}

void serve_request_free(struct serve_request *r)
{
	for (int i = 0; i < r->n_messages; i++) {
		free(r->messages[i].role);
		free(r->messages[i].content);
	}
	free(r->messages);
	free(r->messages_json);
	free(r->model);
	free(r->tools_json);
	free(r->template_kwargs_json);
	free(r->tool_name);
	free(r->schema_json);
	free(r->prompt);
	free(r->prompt_ids);
	for (int i = 0; i < r->n_stop; i++)
		free(r->stop[i]);
	memset(r, 0, sizeof *r);
}
