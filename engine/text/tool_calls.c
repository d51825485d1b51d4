/*
 * tool_calls — the streaming tool-call parser of tool_calls.h.
 *
 * The parser is a three-state machine over the bytes not yet decided
 * (p->pending):
 *
 *   TEXT --opener--> CALL --call_close--> TEXT (or BLOCK)
 *   TEXT --block_open--> BLOCK --call_open--> CALL
 *   BLOCK --block_close, or any other text--> TEXT
 *
 * In TEXT, bytes up to the earliest opener are content; a tail that is a
 * proper prefix of an opener waits for more bytes. In CALL, bytes wait for
 * the call's end marker, then the whole call is parsed by its format's
 * reader (read_hermes ... read_dsml); p->raw keeps the call's text as fed
 * so that a call that fails to read goes back to content. Buffers grow
 * with one response's text (geometrically; a few reallocations per reply).
 *
 * GENERIC has no markers and a machine of its own (run_generic): TEXT
 * while only blanks have come, then HOLD (the answer opened with '{': kept
 * in p->pending to the end, then read whole by generic_finish) or PLAIN
 * (everything is content, as it comes).
 */
#include "engine/text/tool_calls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ST_TEXT, ST_BLOCK, ST_CALL, ST_HOLD, ST_PLAIN };

struct tool_markers {
	const char *block_open[2], *block_close[2];	/* NULL when the format has no block */
	const char *call_open, *call_close;
};

static const struct tool_markers markers[] = {
	[TOOL_FORMAT_NONE] = { { NULL, NULL }, { NULL, NULL }, NULL, NULL },
	[TOOL_FORMAT_HERMES] = { { NULL, NULL }, { NULL, NULL }, "<tool_call>", "</tool_call>" },
	[TOOL_FORMAT_QWEN_XML] = { { NULL, NULL }, { NULL, NULL }, "<tool_call>", "</tool_call>" },
	[TOOL_FORMAT_GLM] = { { NULL, NULL }, { NULL, NULL }, "<tool_call>", "</tool_call>" },
	[TOOL_FORMAT_DEEPSEEK] = { { "<｜tool▁calls▁begin｜>", NULL }, { "<｜tool▁calls▁end｜>", NULL },
				   "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>" },
	[TOOL_FORMAT_DSML] = { { "<｜DSML｜function_calls>", "<｜DSML｜tool_calls>" },
			       { "</｜DSML｜function_calls>", "</｜DSML｜tool_calls>" },
			       "<｜DSML｜invoke", "</｜DSML｜invoke>" },
	[TOOL_FORMAT_HARMONY] = { { NULL, NULL }, { NULL, NULL }, "<|start|>assistant to=", "<|call|>" },
	[TOOL_FORMAT_GENERIC] = { { NULL, NULL }, { NULL, NULL }, NULL, NULL },
};

enum tool_format tool_format_detect(const char *template_text, const char *model_type)
{
	if (template_text) {
		if (strstr(template_text, "<|call|>") && strstr(template_text, "<|channel|>"))
			return TOOL_FORMAT_HARMONY;
		if (strstr(template_text, "｜DSML｜"))
			return TOOL_FORMAT_DSML;
		if (strstr(template_text, "<function=") && strstr(template_text, "<parameter="))
			return TOOL_FORMAT_QWEN_XML;
		if (strstr(template_text, "<arg_key>"))
			return TOOL_FORMAT_GLM;
		if (strstr(template_text, "<｜tool▁sep｜>"))
			return TOOL_FORMAT_DEEPSEEK;
		if (strstr(template_text, "<tool_call>"))
			return TOOL_FORMAT_HERMES;
	}
	static const struct {
		const char *type;
		enum tool_format f;
	} by_type[] = {
		{ "qwen3", TOOL_FORMAT_HERMES },	  { "qwen3_moe", TOOL_FORMAT_HERMES },
		{ "qwen3_next", TOOL_FORMAT_HERMES },	  { "qwen3_5_moe", TOOL_FORMAT_QWEN_XML },
		{ "qwen3_5_moe_text", TOOL_FORMAT_QWEN_XML }, { "glm4_moe", TOOL_FORMAT_GLM },
		{ "glm_moe_dsa", TOOL_FORMAT_GLM },	  { "deepseek_v3", TOOL_FORMAT_DEEPSEEK },
		{ "deepseek_v32", TOOL_FORMAT_DSML },	  { "deepseek_v4", TOOL_FORMAT_DSML },
		{ "gpt_oss", TOOL_FORMAT_HARMONY },
	};
	for (size_t i = 0; model_type && i < sizeof by_type / sizeof by_type[0]; i++)
		if (strcmp(model_type, by_type[i].type) == 0)
			return by_type[i].f;
	return TOOL_FORMAT_NONE;
}

const char *tool_format_name(enum tool_format f)
{
	static const char *const names[] = { "none", "hermes", "qwen_xml", "glm", "deepseek", "dsml", "harmony", "generic" };
	return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "?";
}

/* ---- buffers ---- */

static int buf_add(struct tool_call_buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *d = realloc(b->data, cap);
		if (!d)
			return -ENOMEM;
		b->data = d;
		b->cap = cap;
	}
	if (n)
		memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

static void buf_drop_front(struct tool_call_buf *b, size_t n)
{
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
	b->data[b->len] = '\0';
}

static void buf_free(struct tool_call_buf *b)
{
	free(b->data);
	*b = (struct tool_call_buf){ 0 };
}

static bool is_ws(char c)
{
	return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static void set_error(struct tool_call_parser *p, const char *msg)
{
	if (p->error)
		return;
	p->error = -EBADMSG;
	snprintf(p->error_msg, sizeof p->error_msg, "tool call %zu: %s", p->n_calls, msg);
}

/* ---- content ---- */

/* Where the content may be cut: before an incomplete UTF-8 character at its end. */
static size_t utf8_cut(const char *s, size_t len)
{
	for (size_t back = 1; back <= 4 && back <= len; back++) {
		unsigned char b = (unsigned char)s[len - back];
		if ((b & 0xC0) == 0x80)
			continue;
		size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
		return back < need ? len - back : len;
	}
	return len;
}

static int content_flush(struct tool_call_parser *p, bool all)
{
	size_t done = p->content_emitted, cut = all ? p->content.len : utf8_cut(p->content.data, p->content.len);
	if (cut <= done)
		return 0;
	p->content_emitted = cut;
	if (!p->emit)
		return 0;
	struct tool_call_event ev = { .kind = TOOL_CALL_EVENT_CONTENT, .text = p->content.data + done,
				      .text_len = cut - done };
	return p->emit(p->ctx, &ev);
}

static int content_out(struct tool_call_parser *p, const char *s, size_t n)
{
	if (!n)
		return 0;
	if (buf_add(&p->content, s, n))
		return -ENOMEM;
	return content_flush(p, false);
}

/* Content text: whitespace right after a call is dropped, trailing whitespace is held in p->ws. */
static int content_text(struct tool_call_parser *p, const char *s, size_t n)
{
	if (p->after_call) {
		while (n && is_ws(*s))
			s++, n--;
		if (!n)
			return 0;
		p->after_call = false;
	}
	size_t body = n;
	while (body && is_ws(s[body - 1]))
		body--;
	if (!body)
		return buf_add(&p->ws, s, n);
	int rc = content_out(p, p->ws.data, p->ws.len);
	p->ws.len = 0;
	if (rc || (rc = content_out(p, s, body)))
		return rc;
	return buf_add(&p->ws, s + body, n - body);
}

/* ---- reading one call ---- */

static bool eat(const char **s, size_t *n, const char *lit)
{
	size_t k = strlen(lit);
	if (*n < k || memcmp(*s, lit, k) != 0)
		return false;
	*s += k;
	*n -= k;
	return true;
}

static void skip_ws(const char **s, size_t *n)
{
	while (*n && is_ws(**s))
		(*s)++, (*n)--;
}

static void trim(const char **s, size_t *n)
{
	skip_ws(s, n);
	while (*n && is_ws((*s)[*n - 1]))
		(*n)--;
}

static long find(const char *s, size_t n, const char *lit)
{
	const char *q = memmem(s, n, lit, strlen(lit));
	return q ? q - s : -1;
}

static char *dup_n(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

/* JSON text that is one value and nothing else, or NULL. */
static cJSON *json_exact(const char *s, size_t n)
{
	char *t = dup_n(s, n);
	if (!t)
		return NULL;
	const char *end = NULL;
	cJSON *v = cJSON_ParseWithOpts(t, &end, 1);
	free(t);
	return v;
}

/* A function name: non-empty, no markup or line breaks. */
static bool name_ok(const char *s, size_t n)
{
	if (!n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] == '<' || s[i] == '>' || s[i] == '\n' || s[i] == '"' || (unsigned char)s[i] < 0x20)
			return false;
	return true;
}

bool tool_param_is_string(const cJSON *param)
{
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(param, "type"), *x;
	if (cJSON_IsString(type))
		return strcmp(type->valuestring, "string") == 0;
	bool str = false;
	cJSON_ArrayForEach(x, type) {
		if (!cJSON_IsString(x))
			return false;
		if (strcmp(x->valuestring, "string") == 0)
			str = true;
		else if (strcmp(x->valuestring, "null") != 0)
			return false;
	}
	return str;
}

/* The tool schema says parameter pname of fname is a string (tool_param_is_string). */
static bool schema_string(const cJSON *tools, const char *fname, const char *pname)
{
	const cJSON *t;
	cJSON_ArrayForEach(t, tools) {
		const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
		if (!fn)
			fn = t;
		const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
		if (!name || strcmp(name, fname) != 0)
			continue;
		const cJSON *props = cJSON_GetObjectItemCaseSensitive(
			cJSON_GetObjectItemCaseSensitive(fn, "parameters"), "properties");
		return tool_param_is_string(cJSON_GetObjectItemCaseSensitive(props, pname));
	}
	return false;
}

/* One call being read: its name, its arguments object and where reading failed. */
struct call_read {
	char *name;
	cJSON *args;
	const char *why;	/* a static message, or NULL */
	bool oom;
};

static bool set_name(struct call_read *r, const char *s, size_t n)
{
	trim(&s, &n);
	if (!name_ok(s, n)) {
		r->why = "no function name";
		return false;
	}
	if (!(r->name = dup_n(s, n)))
		r->oom = true;
	return r->name != NULL;
}

/*
 * Adds parameter k = v to r->args. string_attr: DSML's string="true" (1),
 * "false" (0) or absent (-1). The rule is tool_calls.h's: a string when
 * declared one, else JSON, else a Python literal, else a string.
 */
static bool add_param(const struct tool_call_parser *p, struct call_read *r, const char *k, size_t kn, const char *v,
		      size_t vn, int string_attr)
{
	trim(&k, &kn);
	char *key = dup_n(k, kn), *val = dup_n(v, vn);
	cJSON *item = NULL;
	if (!key || !val)
		goto oom;
	if (!kn) {
		r->why = "a parameter without a name";
		goto fail;
	}
	bool as_string = string_attr == 1 || (p->tools && schema_string(p->tools, r->name, key));
	if (!as_string)
		item = json_exact(val, vn);
	if (!item && !as_string) {
		if (strcmp(val, "True") == 0)
			item = cJSON_CreateTrue();
		else if (strcmp(val, "False") == 0)
			item = cJSON_CreateFalse();
		else if (strcmp(val, "None") == 0)
			item = cJSON_CreateNull();
	}
	if (!item)
		item = cJSON_CreateString(val);
	if (!item)
		goto oom;
	bool ok = cJSON_GetObjectItemCaseSensitive(r->args, key)
			  ? cJSON_ReplaceItemInObjectCaseSensitive(r->args, key, item)
			  : cJSON_AddItemToObject(r->args, key, item);
	if (!ok) {
		cJSON_Delete(item);
		goto oom;
	}
	free(key);
	free(val);
	return true;
oom:
	r->oom = true;
fail:
	free(key);
	free(val);
	return false;
}

/* Between the markers: {"name": N, "arguments": {...}} (arguments may be a JSON string, or absent). */
static void read_hermes(const struct tool_call_parser *p, struct call_read *r, const char *s, size_t n)
{
	(void)p;
	trim(&s, &n);
	cJSON *obj = json_exact(s, n);
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(obj, "name");
	if (!cJSON_IsObject(obj) || !cJSON_IsString(name)) {
		r->why = "not a JSON object with a name";
		goto done;
	}
	if (!set_name(r, name->valuestring, strlen(name->valuestring)))
		goto done;
	cJSON *args = cJSON_GetObjectItemCaseSensitive(obj, "arguments");
	if (!args)
		args = cJSON_GetObjectItemCaseSensitive(obj, "parameters");
	if (cJSON_IsString(args)) {
		cJSON *parsed = json_exact(args->valuestring, strlen(args->valuestring));
		if (!cJSON_IsObject(parsed)) {
			cJSON_Delete(parsed);
			r->why = "arguments are not a JSON object";
			goto done;
		}
		cJSON_Delete(r->args);
		r->args = parsed;
	} else if (cJSON_IsObject(args)) {
		cJSON_Delete(r->args);
		r->args = cJSON_DetachItemViaPointer(obj, args);
	} else if (args) {
		r->why = "arguments are not a JSON object";
	}
done:
	cJSON_Delete(obj);
}

/* functions.N<|channel|>commentary json<|message|>{...}: the recipient, then the
 * arguments, a JSON object (or the JSON text of one, as the template writes
 * arguments given as a string). */
static void read_harmony(const struct tool_call_parser *p, struct call_read *r, const char *s, size_t n)
{
	(void)p;
	long ch = find(s, n, "<|channel|>"), msg = find(s, n, "<|message|>");
	if (msg < 0) {
		r->why = "no <|message|> in the call";
		return;
	}
	size_t name_n = (size_t)(ch >= 0 && ch < msg ? ch : msg);
	while (name_n && s[name_n - 1] == ' ')
		name_n--;
	const char *name = s;
	if (name_n > 10 && memcmp(name, "functions.", 10) == 0)
		name += 10, name_n -= 10;
	if (!set_name(r, name, name_n))
		return;
	const char *a = s + msg + strlen("<|message|>");
	size_t an = n - (size_t)msg - strlen("<|message|>");
	trim(&a, &an);
	cJSON *v = json_exact(a, an);
	if (cJSON_IsString(v)) {
		cJSON *inner = json_exact(v->valuestring, strlen(v->valuestring));
		cJSON_Delete(v);
		v = inner;
	}
	if (!cJSON_IsObject(v)) {
		cJSON_Delete(v);
		r->why = "arguments are not a JSON object";
		return;
	}
	cJSON_Delete(r->args);
	r->args = v;
}

/* <function=N> (<parameter=P>\nV\n</parameter>)* </function> */
static void read_qwen_xml(const struct tool_call_parser *p, struct call_read *r, const char *s, size_t n)
{
	skip_ws(&s, &n);
	long e;
	if (!eat(&s, &n, "<function=") || (e = find(s, n, ">")) < 0) {
		r->why = "no <function=NAME>";
		return;
	}
	if (!set_name(r, s, (size_t)e))
		return;
	s += e + 1, n -= (size_t)e + 1;
	for (;;) {
		skip_ws(&s, &n);
		if (!n)
			return;	/* </function> left out: vLLM accepts it too */
		if (eat(&s, &n, "</function>")) {
			skip_ws(&s, &n);
			if (n)
				r->why = "text after </function>";
			return;
		}
		long k, v;
		if (!eat(&s, &n, "<parameter=") || (k = find(s, n, ">")) < 0 ||
		    (v = find(s + k + 1, n - (size_t)k - 1, "</parameter>")) < 0) {
			r->why = "a malformed <parameter=...>";
			return;
		}
		const char *val = s + k + 1;
		size_t vn = (size_t)v;
		if (vn && val[0] == '\n')
			val++, vn--;
		if (vn && val[vn - 1] == '\n')
			vn--;
		if (!add_param(p, r, s, (size_t)k, val, vn, -1))
			return;
		size_t used = (size_t)k + 1 + (size_t)v + strlen("</parameter>");
		s += used, n -= used;
	}
}

/* N (<arg_key>P</arg_key> <arg_value>V</arg_value>)* */
static void read_glm(const struct tool_call_parser *p, struct call_read *r, const char *s, size_t n)
{
	long k = find(s, n, "<arg_key>");
	if (!set_name(r, s, k < 0 ? n : (size_t)k))
		return;
	if (k < 0)
		return;
	s += k, n -= (size_t)k;
	for (;;) {
		skip_ws(&s, &n);
		if (!n)
			return;
		long ke, ve;
		if (!eat(&s, &n, "<arg_key>") || (ke = find(s, n, "</arg_key>")) < 0) {
			r->why = "a malformed <arg_key>";
			return;
		}
		const char *key = s;
		s += ke + strlen("</arg_key>"), n -= (size_t)ke + strlen("</arg_key>");
		skip_ws(&s, &n);
		if (!eat(&s, &n, "<arg_value>") || (ve = find(s, n, "</arg_value>")) < 0) {
			r->why = "an <arg_key> without its <arg_value>";
			return;
		}
		if (!add_param(p, r, key, (size_t)ke, s, (size_t)ve, -1))
			return;
		s += ve + strlen("</arg_value>"), n -= (size_t)ve + strlen("</arg_value>");
	}
}

/* V3: TYPE<｜tool▁sep｜>N\n```json\n{...}\n```   V3.1: N<｜tool▁sep｜>{...} */
static void read_deepseek(const struct tool_call_parser *p, struct call_read *r, const char *s, size_t n)
{
	(void)p;
	static const char sep[] = "<｜tool▁sep｜>";
	long at = find(s, n, sep);
	if (at < 0) {
		r->why = "no <｜tool▁sep｜>";
		return;
	}
	const char *rs = s + at + strlen(sep), *js;
	size_t rn = n - (size_t)at - strlen(sep), jn;
	long fence = find(rs, rn, "```");
	if (fence >= 0) {
		if (!set_name(r, rs, (size_t)fence))
			return;
		js = rs + fence + 3, jn = rn - (size_t)fence - 3;
		eat(&js, &jn, "json");
		while (jn >= 3 && memcmp(js + jn - 3, "```", 3) != 0)
			jn--;
		if (jn < 3) {
			r->why = "an unclosed ```json fence";
			return;
		}
		jn -= 3;
	} else {
		if (!set_name(r, s, (size_t)at))
			return;
		js = rs, jn = rn;
	}
	trim(&js, &jn);
	cJSON *args = json_exact(js, jn);
	if (!cJSON_IsObject(args)) {
		cJSON_Delete(args);
		r->why = "arguments are not a JSON object";
		return;
	}
	cJSON_Delete(r->args);
	r->args = args;
}

/* After <｜DSML｜invoke: name="N"> (<｜DSML｜parameter name="P" string="B">V</｜DSML｜parameter>)* */
static void read_dsml(const struct tool_call_parser *p, struct call_read *r, const char *s, size_t n)
{
	static const char popen[] = "<｜DSML｜parameter", pclose[] = "</｜DSML｜parameter>";
	long e;
	skip_ws(&s, &n);
	if (!eat(&s, &n, "name=\"") || (e = find(s, n, "\"")) < 0) {
		r->why = "no invoke name";
		return;
	}
	if (!set_name(r, s, (size_t)e))
		return;
	s += e + 1, n -= (size_t)e + 1;
	skip_ws(&s, &n);
	if (!eat(&s, &n, ">")) {
		r->why = "a malformed invoke tag";
		return;
	}
	for (;;) {
		skip_ws(&s, &n);
		if (!n)
			return;
		long k, b = -1, v;
		int string_attr = -1;
		if (!eat(&s, &n, popen)) {
			r->why = "text that is not a parameter";
			return;
		}
		skip_ws(&s, &n);
		if (!eat(&s, &n, "name=\"") || (k = find(s, n, "\"")) < 0) {
			r->why = "a parameter without a name";
			return;
		}
		const char *key = s;
		s += k + 1, n -= (size_t)k + 1;
		skip_ws(&s, &n);
		if (eat(&s, &n, "string=\"")) {
			if ((b = find(s, n, "\"")) < 0 || !((b == 4 && memcmp(s, "true", 4) == 0) ||
							   (b == 5 && memcmp(s, "false", 5) == 0))) {
				r->why = "string= is neither \"true\" nor \"false\"";
				return;
			}
			string_attr = b == 4;
			s += b + 1, n -= (size_t)b + 1;
			skip_ws(&s, &n);
		}
		if (!eat(&s, &n, ">") || (v = find(s, n, pclose)) < 0) {
			r->why = "an unclosed parameter";
			return;
		}
		if (!add_param(p, r, key, (size_t)k, s, (size_t)v, string_attr))
			return;
		s += v + strlen(pclose), n -= (size_t)v + strlen(pclose);
	}
}

/* Records a call read whole: args (an object) printed as its arguments,
 * the events emitted. name is taken over (freed here either way). */
static int call_record(struct tool_call_parser *p, char *name, const cJSON *args)
{
	char *json = cJSON_PrintUnformatted(args);
	if (!json)
		goto oom;
	if (p->n_calls == p->calls_cap) {
		size_t cap = p->calls_cap ? p->calls_cap * 2 : 4;
		struct tool_call *c = realloc(p->calls, cap * sizeof *c);
		if (!c)
			goto oom;
		p->calls = c;
		p->calls_cap = cap;
	}
	struct tool_call *c = &p->calls[p->n_calls];
	snprintf(c->id, sizeof c->id, "call_%zu", p->n_calls);
	c->name = name;
	c->arguments = json;
	size_t i = p->n_calls++;
	if (!p->emit)
		return 0;
	struct tool_call_event ev = { .kind = TOOL_CALL_EVENT_START, .index = i, .id = c->id, .name = c->name };
	int rc = p->emit(p->ctx, &ev);
	if (rc)
		return rc;
	ev.kind = TOOL_CALL_EVENT_ARGUMENTS;
	ev.text = c->arguments;
	ev.text_len = strlen(c->arguments);
	if ((rc = p->emit(p->ctx, &ev)))
		return rc;
	ev.kind = TOOL_CALL_EVENT_END;
	ev.text = NULL;
	ev.text_len = 0;
	return p->emit(p->ctx, &ev);
oom:
	free(name);
	free(json);
	return -ENOMEM;
}

/* Reads the text between a call's markers and records the call, or returns -EBADMSG. */
static int call_finish(struct tool_call_parser *p, const char *s, size_t n)
{
	struct call_read r = { .args = cJSON_CreateObject() };
	int rc = 0;
	if (!r.args)
		return -ENOMEM;
	switch (p->format) {
	case TOOL_FORMAT_HERMES: read_hermes(p, &r, s, n); break;
	case TOOL_FORMAT_QWEN_XML: read_qwen_xml(p, &r, s, n); break;
	case TOOL_FORMAT_GLM: read_glm(p, &r, s, n); break;
	case TOOL_FORMAT_DEEPSEEK: read_deepseek(p, &r, s, n); break;
	case TOOL_FORMAT_DSML: read_dsml(p, &r, s, n); break;
	case TOOL_FORMAT_HARMONY: read_harmony(p, &r, s, n); break;
	case TOOL_FORMAT_NONE:
	case TOOL_FORMAT_GENERIC: r.why = "no tool format"; break;
	}
	if (r.oom) {
		rc = -ENOMEM;
		goto out;
	}
	if (!r.why && !r.name)
		r.why = "no function name";
	if (r.why) {
		set_error(p, r.why);
		rc = -EBADMSG;
		goto out;
	}
	rc = call_record(p, r.name, r.args);
	r.name = NULL;
out:
	free(r.name);
	cJSON_Delete(r.args);
	return rc;
}

/* ---- the generic format ---- */

static int buf_str(struct tool_call_buf *b, const char *s)
{
	return buf_add(b, s, strlen(s));
}

/* The function object of a tools or tool_calls item: its "function", or the item itself. */
static const cJSON *function_of(const cJSON *item)
{
	const cJSON *fn = cJSON_GetObjectItemCaseSensitive(item, "function");
	return cJSON_IsObject(fn) ? fn : item;
}

/* Appends v printed without layout. */
static int buf_json(struct tool_call_buf *b, const cJSON *v)
{
	char *t = cJSON_PrintUnformatted(v);
	int rc = t ? buf_str(b, t) : -ENOMEM;
	free(t);
	return rc;
}

/*
 * The wording is colibri's; the shapes are llama.cpp's generic format, so
 * that a model that has seen that format writes what we read. A plain-text
 * answer is allowed (and streams) where llama.cpp asks for {"response": ...}:
 * nothing constrains an answer that may or may not call.
 */
char *tool_generic_prompt(const cJSON *tools)
{
	struct tool_call_buf b = { 0 };
	int rc = buf_str(&b, "You can call these functions. Each line is one function as JSON: its name, what it does, "
			     "and the JSON Schema of its arguments.\n");
	const cJSON *t;
	cJSON_ArrayForEach(t, tools) {
		const cJSON *fn = function_of(t);
		static const char *const keys[] = { "name", "description", "parameters" };
		cJSON *line = cJSON_CreateObject();
		if (!line)
			rc = -ENOMEM;
		for (int k = 0; !rc && k < 3; k++) {
			const cJSON *v = cJSON_GetObjectItemCaseSensitive(fn, keys[k]);
			if (v && !cJSON_AddItemToObject(line, keys[k], cJSON_Duplicate(v, true)))
				rc = -ENOMEM;
		}
		if (!rc)
			rc = buf_json(&b, line);
		if (!rc)
			rc = buf_str(&b, "\n");
		cJSON_Delete(line);
	}
	if (!rc)
		rc = buf_str(&b, "\nTo call a function, answer with this JSON object and nothing else:\n"
				 "{\"tool_call\": {\"name\": \"<function name>\", \"arguments\": {<its arguments>}}}\n"
				 "To call several at once:\n"
				 "{\"tool_calls\": [{\"name\": \"<function name>\", \"arguments\": {<its arguments>}}, ...]}\n"
				 "Each result comes back in a message of its own. When no function is needed, "
				 "answer in plain text.");
	if (rc) {
		buf_free(&b);
		return NULL;
	}
	return b.data;
}

/* Appends {"name": N, "arguments": A} of one OpenAI tool call. */
static int generic_call_text(struct tool_call_buf *b, const cJSON *call)
{
	const cJSON *fn = function_of(call), *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
	if (!cJSON_IsString(name))
		return -EINVAL;
	cJSON *parsed = cJSON_IsString(args) ? json_exact(args->valuestring, strlen(args->valuestring)) : NULL;
	if (cJSON_IsObject(parsed))
		args = parsed;
	int rc = buf_str(b, "{\"name\": ");
	if (!rc)
		rc = buf_json(b, name);
	if (!rc)
		rc = buf_str(b, ", \"arguments\": ");
	if (!rc && args)
		rc = buf_json(b, args);
	else if (!rc)
		rc = buf_str(b, "{}");
	if (!rc)
		rc = buf_str(b, "}");
	cJSON_Delete(parsed);
	return rc;
}

char *tool_generic_calls_text(const cJSON *tool_calls)
{
	int n = cJSON_GetArraySize(tool_calls);
	if (!cJSON_IsArray(tool_calls) || n == 0)
		return NULL;
	struct tool_call_buf b = { 0 };
	int rc = buf_str(&b, n == 1 ? "{\"tool_call\": " : "{\"tool_calls\": [");
	const cJSON *c;
	int i = 0;
	cJSON_ArrayForEach(c, tool_calls) {
		if (!rc && i++)
			rc = buf_str(&b, ", ");
		if (!rc)
			rc = generic_call_text(&b, c);
	}
	if (!rc)
		rc = buf_str(&b, n == 1 ? "}" : "]}");
	if (rc) {
		buf_free(&b);
		return NULL;
	}
	return b.data;
}

/* Adds one call of an answer ({"name": N, "arguments": ...}, or OpenAI's
 * shape) to out as {"name", "arguments"} with object arguments; returns why
 * not (a static message), or NULL. *oom is set when memory ran out. */
static const char *generic_call_read(const cJSON *call, cJSON *out, bool *oom)
{
	const cJSON *fn = function_of(call);
	const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
	if (!cJSON_IsObject(fn) || !name || !name_ok(name, strlen(name)))
		return "no function name";
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
	if (!args)
		args = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
	cJSON *a = !args ? cJSON_CreateObject()
		   : cJSON_IsString(args) ? json_exact(args->valuestring, strlen(args->valuestring))
					  : cJSON_Duplicate(args, true);
	if (!a && (!args || !cJSON_IsString(args))) {
		*oom = true;
		return "out of memory";
	}
	if (!cJSON_IsObject(a)) {
		cJSON_Delete(a);
		return "arguments are not a JSON object";
	}
	cJSON *o = cJSON_CreateObject();
	if (!o || !cJSON_AddStringToObject(o, "name", name) || !cJSON_AddItemToObject(o, "arguments", a)) {
		cJSON_Delete(o);
		cJSON_Delete(a);
		*oom = true;
		return "out of memory";
	}
	cJSON_AddItemToArray(out, o);
	return NULL;
}

/*
 * Reads a held answer (it opened with '{'): the calls of a leading
 * {"tool_calls": [...]} or {"tool_call": {...}} (text after them is
 * content), the text of a lone {"response": ...}, else the answer's bytes
 * as content, with the error set when it tried to be a call.
 */
static int generic_finish(struct tool_call_parser *p)
{
	const char *s = p->pending.data;
	size_t n = p->pending.len;
	char *text = dup_n(s, n);
	cJSON *calls = cJSON_CreateArray();
	int rc = 0;
	if (!text || !calls) {
		rc = -ENOMEM;
		goto out;
	}
	const char *end = NULL, *why = NULL;
	cJSON *v = cJSON_ParseWithOpts(text, &end, 0);
	const char *rest = v ? end : text + n;
	size_t rest_n = (size_t)(text + n - rest);
	skip_ws(&rest, &rest_n);
	const cJSON *many = cJSON_GetObjectItemCaseSensitive(v, "tool_calls");
	const cJSON *one = cJSON_GetObjectItemCaseSensitive(v, "tool_call");
	const cJSON *response = cJSON_GetObjectItemCaseSensitive(v, "response");
	bool oom = false;
	if (!v) {
		if (strstr(text, "\"tool_call"))
			why = "not JSON (cut off?)";
	} else if (many || one) {
		if (many && (!cJSON_IsArray(many) || cJSON_GetArraySize(many) == 0))
			why = "\"tool_calls\" is not an array of calls";
		const cJSON *c;
		if (many && !why)
			cJSON_ArrayForEach(c, many)
				if (!why)
					why = generic_call_read(c, calls, &oom);
		if (!many)
			why = generic_call_read(one, calls, &oom);
		if (oom) {
			rc = -ENOMEM;
			goto free_v;
		}
		if (!why) {
			cJSON *c2;
			cJSON_ArrayForEach(c2, calls) {
				char *name = strdup(cJSON_GetObjectItemCaseSensitive(c2, "name")->valuestring);
				if (!name) {
					rc = -ENOMEM;
					goto free_v;
				}
				if ((rc = call_record(p, name, cJSON_GetObjectItemCaseSensitive(c2, "arguments"))))
					goto free_v;
			}
			p->after_call = true;
			rc = content_text(p, rest, rest_n);
			goto free_v;
		}
	} else if (response && !rest_n) {
		char *printed = cJSON_IsString(response) ? NULL : cJSON_PrintUnformatted(response);
		const char *r = printed ? printed : cJSON_GetStringValue(response);
		rc = r ? content_out(p, r, strlen(r)) : -ENOMEM;
		free(printed);
		goto free_v;
	}
	if (why)
		set_error(p, why);
	rc = content_text(p, s, n);
free_v:
	cJSON_Delete(v);
out:
	p->pending.len = 0;
	cJSON_Delete(calls);
	free(text);
	return rc;
}

/* GENERIC's machine: decides on the answer's first non-blank byte. */
static int run_generic(struct tool_call_parser *p)
{
	if (p->state == ST_TEXT) {
		size_t i = 0;
		while (i < p->pending.len && is_ws(p->pending.data[i]))
			i++;
		if (i == p->pending.len)
			return 0;
		p->state = p->pending.data[i] == '{' ? ST_HOLD : ST_PLAIN;
	}
	if (p->state == ST_HOLD)
		return 0;
	int rc = content_text(p, p->pending.data, p->pending.len);
	p->pending.len = 0;
	return rc;
}

/* ---- the state machine ---- */

void tool_call_parser_init(struct tool_call_parser *p, enum tool_format format, const cJSON *tools,
			   tool_call_event_fn emit, void *ctx)
{
	*p = (struct tool_call_parser){ .format = format, .tools = tools, .emit = emit, .ctx = ctx, .state = ST_TEXT };
}

void tool_call_parser_free(struct tool_call_parser *p)
{
	buf_free(&p->pending);
	buf_free(&p->ws);
	buf_free(&p->raw);
	buf_free(&p->content);
	for (size_t i = 0; i < p->n_calls; i++) {
		free(p->calls[i].name);
		free(p->calls[i].arguments);
	}
	free(p->calls);
	*p = (struct tool_call_parser){ 0 };
}

/* The raw text of a call that will not be one goes back to content. */
static int raw_to_content(struct tool_call_parser *p)
{
	int rc = content_text(p, p->raw.data, p->raw.len);
	p->raw.len = 0;
	return rc;
}

/* Length of the longest tail of s that is a proper prefix of lit. */
static size_t prefix_tail(const char *s, size_t n, const char *lit)
{
	size_t k = strlen(lit);
	for (size_t t = k - 1 < n ? k - 1 : n; t; t--)
		if (memcmp(s + n - t, lit, t) == 0)
			return t;
	return 0;
}

/* Moves what is decided out of p->pending; returns 0 when it needs more bytes. */
static int step_text(struct tool_call_parser *p)
{
	const struct tool_markers *m = &markers[p->format];
	const char *open[3] = { m->block_open[0], m->block_open[1], m->call_open };
	const char *s = p->pending.data;
	size_t n = p->pending.len, best = n, hold = 0;
	int which = -1;
	for (int i = 0; i < 3; i++) {
		if (!open[i])
			continue;
		long at = find(s, n, open[i]);
		if (at >= 0 && (size_t)at < best)
			best = (size_t)at, which = i;
	}
	if (which < 0) {
		for (int i = 0; i < 3; i++)
			if (open[i]) {
				size_t t = prefix_tail(s, n, open[i]);
				hold = t > hold ? t : hold;
			}
		int rc = content_text(p, s, n - hold);
		if (!rc)
			buf_drop_front(&p->pending, n - hold);
		return rc;
	}
	int rc = content_text(p, s, best);
	if (rc)
		return rc;
	size_t used = best + strlen(open[which]);
	if (buf_add(&p->raw, p->ws.data, p->ws.len) || buf_add(&p->raw, s + best, used - best))
		return -ENOMEM;
	p->ws.len = 0;
	p->state = which < 2 ? ST_BLOCK : ST_CALL;
	p->in_block = which < 2;
	p->block_calls = 0;
	p->scan = 0;
	buf_drop_front(&p->pending, used);
	return 1;
}

static int step_block(struct tool_call_parser *p)
{
	const struct tool_markers *m = &markers[p->format];
	const char *s = p->pending.data;
	size_t n = p->pending.len, w = 0;
	while (w < n && is_ws(s[w]))
		w++;
	if (buf_add(&p->raw, s, w))
		return -ENOMEM;
	buf_drop_front(&p->pending, w);
	s = p->pending.data, n = p->pending.len;
	if (!n)
		return 0;
	const char *lit[3] = { m->call_open, m->block_close[0], m->block_close[1] };
	for (int i = 0; i < 3; i++) {
		if (!lit[i])
			continue;
		size_t k = strlen(lit[i]);
		if (n >= k && memcmp(s, lit[i], k) == 0) {
			if (buf_add(&p->raw, s, k))
				return -ENOMEM;
			buf_drop_front(&p->pending, k);
			if (i == 0) {
				p->state = ST_CALL;
				p->scan = 0;
			} else {
				/* a closed block: its calls were read; an empty one is dropped */
				p->raw.len = 0;
				p->state = ST_TEXT;
				p->in_block = false;
				p->after_call = true;
			}
			return 1;
		}
		if (n < k && memcmp(s, lit[i], n) == 0)
			return 0;	/* may still be this marker */
	}
	/* other text: the block is over; what it held so far goes back to content */
	p->state = ST_TEXT;
	p->in_block = false;
	if (p->block_calls == 0 && p->raw.len)
		set_error(p, "a block of tool calls without a call");
	int rc = raw_to_content(p);
	return rc ? rc : 1;
}

static int step_call(struct tool_call_parser *p)
{
	const char *close = markers[p->format].call_close;
	size_t k = strlen(close);
	long at = find(p->pending.data + p->scan, p->pending.len - p->scan, close);
	if (at < 0) {
		p->scan = p->pending.len >= k ? p->pending.len - k + 1 : 0;
		return 0;
	}
	size_t end = p->scan + (size_t)at;
	int rc = call_finish(p, p->pending.data, end);
	if (rc != 0 && rc != -EBADMSG)
		return rc;
	bool read = rc == 0;
	if (read) {
		p->raw.len = 0;
		p->block_calls++;
	} else {
		if (buf_add(&p->raw, p->pending.data, end + k))
			return -ENOMEM;
		if ((rc = raw_to_content(p)))
			return rc;
	}
	buf_drop_front(&p->pending, end + k);
	p->state = p->in_block ? ST_BLOCK : ST_TEXT;
	p->after_call = read;	/* a call that fell back is content: the text after it keeps its spaces */
	return 1;
}

static int run(struct tool_call_parser *p)
{
	if (p->format == TOOL_FORMAT_GENERIC)
		return run_generic(p);
	if (p->format == TOOL_FORMAT_NONE) {
		int rc = content_text(p, p->pending.data, p->pending.len);
		p->pending.len = 0;
		return rc;
	}
	for (;;) {
		int rc = p->state == ST_TEXT ? step_text(p) : p->state == ST_BLOCK ? step_block(p) : step_call(p);
		if (rc <= 0)
			return rc;
	}
}

int tool_call_parser_feed(struct tool_call_parser *p, const char *text, size_t len)
{
	if (p->stopped)
		return p->stopped;
	if (buf_add(&p->pending, text, len))
		return -ENOMEM;
	int rc = run(p);
	if (rc)
		p->stopped = rc;
	return rc;
}

int tool_call_parser_finish(struct tool_call_parser *p)
{
	int rc = p->stopped;
	if (rc)
		return rc;
	if (p->state == ST_HOLD) {
		rc = generic_finish(p);
	} else if (p->state == ST_CALL || (p->state == ST_BLOCK && p->block_calls == 0)) {
		set_error(p, "cut off before its end marker");
		rc = buf_add(&p->raw, p->pending.data, p->pending.len);
		p->pending.len = 0;
		if (!rc)
			rc = raw_to_content(p);
	} else {
		/* a block left open after its calls (DeepSeek-V3's template does that); a marker's prefix is text */
		rc = content_text(p, p->pending.data, p->pending.len);
		p->pending.len = 0;
	}
	p->state = ST_TEXT;
	if (!rc)
		rc = content_out(p, p->ws.data, p->ws.len);
	p->ws.len = 0;
	if (!rc)
		rc = content_flush(p, true);
	if (!rc && buf_add(&p->content, "", 0))
		rc = -ENOMEM;
	if (rc)
		p->stopped = rc;
	return rc;
}
