/*
 * serve_constraint — see serve_constraint.h. Several schemas go into one
 * grammar (a call of any of the tools, a value per parameter), so each
 * converted schema's rules are renamed under a prefix of its own
 * ("t<tool>-", "t<tool>-p<param>-"): rule names are the identifiers of
 * the GBNF text outside literals, classes and comments.
 */
#include "engine/serve/serve_constraint.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/strbuf.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"

#define RAW_STRING_MAX GRAMMAR_REPEAT_MAX
/* Named rules in one request's grammar (a schema's, every tool's, or
 * llama-server's "grammar"): room for two schemas at their own limit. */
#define SERVE_GRAMMAR_RULES_MAX (2 * JSON_SCHEMA_RULES_MAX)

bool serve_constraint_wanted(const struct serve_request *r)
{
	return r->format != SERVE_FORMAT_TEXT || r->tool_choice == SERVE_TOOLS_REQUIRED ||
	       r->tool_choice == SERVE_TOOLS_NAMED;
}

/* Appends s[0..n) as a GBNF string literal. */
static void lit_n(struct strbuf *b, const char *s, size_t n)
{
	strbuf_put(b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			strbuf_put(b, "\\", 1);
			strbuf_put(b, s + i, 1);
		} else if (c == '\n') {
			strbuf_put(b, "\\n", 2);
		} else if (c == '\r') {
			strbuf_put(b, "\\r", 2);
		} else if (c == '\t') {
			strbuf_put(b, "\\t", 2);
		} else if (c < 0x20) {
			strbuf_printf(b, "\\x%02x", c);
		} else {
			strbuf_put(b, s + i, 1);
		}
	}
	strbuf_put(b, "\"", 1);
}

static void puts_(struct strbuf *b, const char *s)
{
	strbuf_put(b, s, strlen(s));
}

static void lit(struct strbuf *b, const char *s)
{
	lit_n(b, s, strlen(s));
}

/* The end of a literal or class opened at p[0] (closing char q). */
static const char *skip_quoted(const char *p, char q)
{
	for (p++; *p && *p != q; p += (*p == '\\' && p[1]) ? 2 : 1)
		;
	return *p ? p + 1 : p;
}

/* Appends gbnf with every rule name prefixed by pre. */
static void renamed(struct strbuf *b, const char *g, const char *pre)
{
	for (const char *p = g; *p;) {
		const char *q = p + 1;
		if (*p == '"' || *p == '[') {
			q = skip_quoted(p, *p == '"' ? '"' : ']');
		} else if (*p == '#') {
			for (q = p; *q && *q != '\n'; q++)
				;
		} else if (isalpha((unsigned char)*p)) {
			for (q = p; isalnum((unsigned char)*q) || *q == '-' || *q == '_'; q++)
				;
			strbuf_put(b, pre, strlen(pre));
		} else if (isdigit((unsigned char)*p)) {
			for (q = p; isalnum((unsigned char)*q); q++)
				;
		}
		strbuf_put(b, p, (size_t)(q - p));
		p = q;
	}
}

/* Appends the rules of schema s renamed under pre: its root is pre"root".
 * A call's arguments get at most a newline and one blank between tokens
 * (not response_format's twenty): they are read, not shown, and a model
 * that pads them would spend its max_tokens on layout before the call ends. */
static int schema_rules(struct strbuf *b, const cJSON *s, bool strict, const char *pre, char *err, size_t err_len)
{
	struct json_schema_options o = { .strict = strict, .ws_max = 1 };
	char *g = NULL;
	int rc = json_schema_to_gbnf(s, &o, &g, NULL, err, err_len);
	if (rc)
		return rc;
	renamed(b, g, pre);
	strbuf_put(b, "\n", 1);
	free(g);
	return 0;
}

static int length_of(const cJSON *ps, const char *key, int dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(ps, key);
	if (!cJSON_IsNumber(v) || v->valuedouble < 0)
		return dflt;
	return v->valuedouble > RAW_STRING_MAX ? RAW_STRING_MAX : (int)v->valuedouble;
}

/* rule ::= a raw string value: its enum, or text without '<' within its lengths. */
static void raw_rule(struct strbuf *b, const char *rule, const cJSON *ps)
{
	strbuf_printf(b, "%s ::= ", rule);
	const cJSON *en = cJSON_GetObjectItemCaseSensitive(ps, "enum"), *x;
	int n = 0;
	cJSON_ArrayForEach(x, en) {
		if (!cJSON_IsString(x))
			continue;
		if (n++)
			puts_(b, " | ");
		lit(b, x->valuestring);
	}
	if (!n) {
		int lo = length_of(ps, "minLength", 0), hi = length_of(ps, "maxLength", -1);
		if (hi >= 0 && hi < lo)
			hi = lo;
		if (hi >= 0)
			strbuf_printf(b, "[^<]{%d,%d}", lo, hi);
		else if (lo > 0)
			strbuf_printf(b, "[^<]{%d} [^<]*", lo);
		else
			puts_(b, "[^<]*");
	}
	strbuf_put(b, "\n", 1);
}

static bool in_required(const cJSON *params, const char *key)
{
	const cJSON *x;
	cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(params, "required"))
		if (cJSON_IsString(x) && strcmp(x->valuestring, key) == 0)
			return true;
	return false;
}

/* The parameters of an XML format: rule pre"args" and its parts. */
static int xml_params(struct strbuf *b, enum tool_format f, const cJSON *params, bool strict, const char *pre,
		      char *err, size_t err_len)
{
	struct strbuf seq = { 0 };
	const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties"), *p;
	int j = 0, rc = 0;
	cJSON_ArrayForEach(p, props) {
		char vp[64], v[80];
		snprintf(vp, sizeof vp, "%sp%d-", pre, j);
		bool raw = tool_param_is_string(p);
		if (raw) {
			snprintf(v, sizeof v, "%sp%d-raw", pre, j);
			raw_rule(b, v, p);
		} else {
			snprintf(v, sizeof v, "%sroot", vp);
			if ((rc = schema_rules(b, p, strict, vp, err, err_len))) {
				strbuf_free(&seq);
				return rc;
			}
		}
		strbuf_printf(b, "%skv ::= ", vp);
		if (f == TOOL_FORMAT_QWEN_XML) {
			puts_(b, "\"<parameter=\" ");
			lit(b, p->string);
			strbuf_printf(b, " \">\\n\" %s \"\\n</parameter>\\n\"\n", v);
		} else if (f == TOOL_FORMAT_GLM) {
			puts_(b, "\"<arg_key>\" ");
			lit(b, p->string);
			strbuf_printf(b, " \"</arg_key>\\n<arg_value>\" %s \"</arg_value>\\n\"\n", v);
		} else {
			strbuf_printf(b, "\"<｜DSML｜parameter name=\\\"\" ");
			lit(b, p->string);
			strbuf_printf(b, " \"\\\" string=\\\"%s\\\">\" %s \"</｜DSML｜parameter>\\n\"\n", raw ? "true" : "false", v);
		}
		strbuf_printf(&seq, in_required(params, p->string) ? " %skv" : " %skv?", vp);
		j++;
	}
	strbuf_printf(b, "%sargs ::= \"\"%s\n", pre, seq.p ? seq.p : "");
	strbuf_free(&seq);
	return 0;
}

/* Rule t<i>-call: one call of function fn in format f. */
static int call_rule(struct strbuf *b, enum tool_format f, const cJSON *fn, int i, char *err, size_t err_len)
{
	const char *name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
	/* An object without additionalProperties takes no other members (as
	 * OpenAI's strict mode reads it), whatever the function's "strict":
	 * else a forced call may run on in keys nobody declared until
	 * max_tokens cuts it off, and then it is no call. */
	bool strict = true;
	cJSON *none = NULL;
	if (!cJSON_IsObject(params) && !cJSON_IsBool(params))
		params = none = cJSON_Parse("{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}");
	if (!params)
		return -ENOMEM;
	char pre[32];
	snprintf(pre, sizeof pre, "t%d-", i);
	int rc;
	if (f == TOOL_FORMAT_HERMES || f == TOOL_FORMAT_DEEPSEEK || f == TOOL_FORMAT_HARMONY || f == TOOL_FORMAT_GENERIC) {
		rc = schema_rules(b, params, strict, pre, err, err_len);
	} else {
		rc = xml_params(b, f, params, strict, pre, err, err_len);
	}
	cJSON_Delete(none);
	if (rc)
		return rc;
	strbuf_printf(b, "%scall ::= ", pre);
	if (f == TOOL_FORMAT_HERMES || f == TOOL_FORMAT_GENERIC) {
		cJSON *js = cJSON_CreateString(name);
		char *q = js ? cJSON_PrintUnformatted(js) : NULL;
		cJSON_Delete(js);
		if (!q)
			return -ENOMEM;
		puts_(b, f == TOOL_FORMAT_HERMES ? "\"<tool_call>\\n{\\\"name\\\": \" "
						 : "\"{\\\"tool_call\\\": {\\\"name\\\": \" ");
		lit(b, q);
		free(q);
		strbuf_printf(b, " \", \\\"arguments\\\": \" %sroot %s\n", pre,
			      f == TOOL_FORMAT_HERMES ? "\"}\\n</tool_call>\"" : "\"}}\"");
	} else if (f == TOOL_FORMAT_DEEPSEEK) {
		strbuf_printf(b, "\"<｜tool▁call▁begin｜>function<｜tool▁sep｜>\" ");
		lit(b, name);
		strbuf_printf(b, " \"\\n```json\\n\" %sroot \"\\n```<｜tool▁call▁end｜>\"\n", pre);
	} else if (f == TOOL_FORMAT_QWEN_XML) {
		strbuf_printf(b, "\"<tool_call>\\n<function=\" ");
		lit(b, name);
		strbuf_printf(b, " \">\\n\" %sargs \"</function>\\n</tool_call>\"\n", pre);
	} else if (f == TOOL_FORMAT_HARMONY) {
		/* The reply starts after the generation prompt's <|start|>assistant:
		 * a commentary message to the function, JSON, ended by <|call|>. */
		strbuf_printf(b, "\"<|channel|>commentary to=functions.\" ");
		lit(b, name);
		strbuf_printf(b, " \" <|constrain|>json<|message|>\" %sroot \"<|call|>\"\n", pre);
	} else if (f == TOOL_FORMAT_GLM) {
		strbuf_printf(b, "\"<tool_call>\" ");
		lit(b, name);
		strbuf_printf(b, " \"\\n\" %sargs \"</tool_call>\"\n", pre);
	} else {
		strbuf_printf(b, "\"<｜DSML｜invoke name=\\\"\" ");
		lit(b, name);
		strbuf_printf(b, " \"\\\">\\n\" %sargs \"</｜DSML｜invoke>\\n\"\n", pre);
	}
	return 0;
}

int serve_tool_call_gbnf(enum tool_format f, bool dsml_tool_calls, const cJSON *tools, const char *only, char **out,
			 char *err, size_t err_len)
{
	*out = NULL;
	if (f == TOOL_FORMAT_NONE) {
		snprintf(err, err_len, "the model's chat template has no tool-call format");
		return -EINVAL;
	}
	/* Every tool is a rule and every parameter at least one: refuse a
	 * grammar that cannot fit SERVE_GRAMMAR_RULES_MAX before converting
	 * thousands of parameter schemas one by one. */
	size_t n_rules = 0;
	const cJSON *t;
	cJSON_ArrayForEach(t, tools) {
		const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
		const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
		n_rules += 1 + (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(params, "properties"));
	}
	if (n_rules > SERVE_GRAMMAR_RULES_MAX) {
		snprintf(err, err_len, "the tools and their parameters need more than the %d grammar rules a request may "
			 "compile", SERVE_GRAMMAR_RULES_MAX);
		return -E2BIG;
	}
	struct strbuf b = { 0 }, alts = { 0 };
	int i = 0, rc = 0;
	cJSON_ArrayForEach(t, tools) {
		const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
		if (!cJSON_IsString(name) || (only && strcmp(name->valuestring, only) != 0)) {
			i++;
			continue;
		}
		char why[256] = "";
		if ((rc = call_rule(&b, f, fn, i, why, sizeof why))) {
			snprintf(err, err_len, "the parameters of '%.60s' do not convert to a grammar: %s", name->valuestring,
				 why[0] ? why : "out of memory");
			break;
		}
		strbuf_printf(&alts, alts.len ? " | t%d-call" : "t%d-call", i);
		i++;
	}
	if (!rc && !alts.len) {
		snprintf(err, err_len, "no function to call");
		rc = -EINVAL;
	}
	if (!rc) {
		if (f == TOOL_FORMAT_DEEPSEEK)
			strbuf_printf(&b, "root ::= \"<｜tool▁calls▁begin｜>\" ( %s ) \"<｜tool▁calls▁end｜>\"\n", alts.p);
		else if (f == TOOL_FORMAT_DSML)
			strbuf_printf(&b, "root ::= \"<｜DSML｜%s>\\n\" ( %s ) \"</｜DSML｜%s>\"\n",
				      dsml_tool_calls ? "tool_calls" : "function_calls", alts.p,
				      dsml_tool_calls ? "tool_calls" : "function_calls");
		else
			strbuf_printf(&b, "root ::= %s\n", alts.p);
		rc = b.rc;
	}
	strbuf_free(&alts);
	if (rc) {
		strbuf_free(&b);
		return rc;
	}
	*out = b.p;
	return 0;
}

/* The grammar text of r's response_format; warnings joined into *warn. */
static int format_gbnf(const struct serve_request *r, char **gbnf, char **warn, struct serve_error *err)
{
	const char *param = "response_format.json_schema";
	if (r->format == SERVE_FORMAT_JSON_OBJECT)
		return json_schema_object_gbnf(NULL, gbnf) ? serve_error_set(err, 500, NULL, NULL, "out of memory") : 0;
	cJSON *schema = cJSON_Parse(r->schema_json);
	if (!schema)
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	struct json_schema_options o = { .strict = r->schema_strict };
	struct json_schema_warnings w = { 0 };
	char why[256] = "";
	int rc = json_schema_to_gbnf(schema, &o, gbnf, &w, why, sizeof why);
	cJSON_Delete(schema);
	if (rc == -ENOMEM)
		rc = serve_error_set(err, 500, NULL, NULL, "out of memory");
	else if (rc)
		rc = serve_error_set(err, 400, param, NULL, "'%s' cannot be enforced: %s", param,
				     why[0] ? why : "its grammar is too large");
	struct strbuf all = { 0 };
	for (size_t i = 0; i < w.count; i++) {
		strbuf_put(&all, i ? "; " : "", i ? 2 : 0);
		strbuf_put(&all, w.msg[i], strlen(w.msg[i]));
	}
	json_schema_warnings_free(&w);
	if (!rc && all.len && r->schema_strict)
		rc = serve_error_set(err, 400, param, NULL,
				     "'%s' is strict but uses what the grammar cannot enforce: %.400s", param, all.p);
	if (rc) {
		free(*gbnf);
		*gbnf = NULL;
		strbuf_free(&all);
		return rc;
	}
	*warn = all.p;
	return 0;
}

int serve_constraint_build(struct serve_constraint *c, const struct serve_request *r, enum tool_format format,
			   bool dsml_tool_calls, const struct tokenizer *tok, const struct grammar_vocab *vocab,
			   const int32_t *eos, int n_eos, int32_t n_vocab, struct serve_error *err)
{
	memset(c, 0, sizeof *c);
	char *gbnf = NULL;
	int rc;
	const char *param = r->format != SERVE_FORMAT_TEXT ? "response_format.json_schema" : "tool_choice";
	if (r->format != SERVE_FORMAT_TEXT) {
		if ((rc = format_gbnf(r, &gbnf, &c->warnings, err)))
			return rc;
	} else {
		cJSON *tools = cJSON_Parse(r->tools_json ? r->tools_json : "[]");
		char why[384] = "";
		rc = tools ? serve_tool_call_gbnf(format, dsml_tool_calls, tools,
						  r->tool_choice == SERVE_TOOLS_NAMED ? r->tool_name : NULL, &gbnf, why,
						  sizeof why)
			   : -ENOMEM;
		cJSON_Delete(tools);
		if (rc == -ENOMEM)
			return serve_error_set(err, 500, NULL, NULL, "out of memory");
		if (rc)
			return serve_error_set(err, 400, "tool_choice", NULL, "'tool_choice' cannot be enforced: %s", why);
	}
	rc = serve_constraint_compile(c, gbnf, param, "gives a grammar colibri cannot run", tok, vocab, eos, n_eos,
				      n_vocab, err);
	free(gbnf);
	return rc;
}

int serve_constraint_compile(struct serve_constraint *c, const char *gbnf, const char *param, const char *what,
			     const struct tokenizer *tok, const struct grammar_vocab *vocab, const int32_t *eos,
			     int n_eos, int32_t n_vocab, struct serve_error *err)
{
	char why[256] = "";
	/* Parsing costs O(rules^2) (linear rule look-up): count them first, so
	 * that a huge grammar costs milliseconds, not a minute of CPU. */
	size_t n_rules = 0;
	for (const char *p = strstr(gbnf, "::="); p; p = strstr(p + 3, "::="))
		n_rules++;
	if (n_rules > SERVE_GRAMMAR_RULES_MAX)
		return serve_error_set(err, 400, param, NULL, "'%s' %s: it has %zu grammar rules, more than the %d a "
				       "request may compile", param, what, n_rules, SERVE_GRAMMAR_RULES_MAX);
	int rc = grammar_parse(&c->g, gbnf, strlen(gbnf), "root", why, sizeof why);
	if (rc == -ENOMEM)
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	if (rc)
		return serve_error_set(err, 400, param, NULL, "'%s' %s: %s", param, what, why);
	/* A grammar that fans out past the matcher's stacks would fail with
	 * 500 where the output reaches that point: refuse it here. */
	if ((rc = constrain_check(c->g, why, sizeof why)))
		return rc == -ENOMEM ? serve_error_set(err, 500, NULL, NULL, "out of memory")
				     : serve_error_set(err, 400, param, NULL, "'%s' %s: %s", param, what, why);
	/* Set first: a constrain_init that fails keeps what it allocated
	 * for constrain_free, which serve_constraint_free then calls. */
	c->have_cs = true;
	rc = constrain_init(&c->cs, c->g, tok, vocab, eos, n_eos, n_vocab);
	if (rc) {
		int status = rc == -ENOMEM ? 500 : 400;
		serve_error_set(err, status, status == 400 ? param : NULL, NULL, "%s",
				error_message()[0] ? error_message() : "the grammar cannot start");
		error_clear();
		return -EINVAL;
	}
	return 0;
}

void serve_constraint_free(struct serve_constraint *c)
{
	if (c->have_cs)
		constrain_free(&c->cs);
	grammar_free(c->g);
	free(c->warnings);
	memset(c, 0, sizeof *c);
}
