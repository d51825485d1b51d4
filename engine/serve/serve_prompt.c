/*
 * serve_prompt — see serve_prompt.h.
 */
#include "engine/serve/serve_prompt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/serve/serve_constraint.h"
#include "engine/text/tokenizer.h"

/* A template that renders tools writes this function's name when offered it. */
#define PROBE_NAME "colibri_probe_function"

/* Whether the template writes the tools it is given: 1, 0, or -ENOMEM.
 * Asked by rendering, not by reading the template text: a template may
 * name tool calls without ever listing tools (DeepSeek-V3's renders the
 * calls in the history only), and the built-in C renderers render none. */
static int renders_tools(const struct chat_template *ct)
{
	if (!ct->jinja)
		return 0;
	cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"Hello\"}]");
	cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"" PROBE_NAME "\","
				   "\"description\":\"A probe.\",\"parameters\":{\"type\":\"object\","
				   "\"properties\":{\"q\":{\"type\":\"string\"}}}}}]");
	struct chat_options o = { .add_generation_prompt = true };
	char *text = NULL, why[128];
	size_t len = 0;
	int rc = msgs && tools ? chat_template_render_json(ct, msgs, tools, &o, &text, &len, why, sizeof why) : -ENOMEM;
	if (rc != -ENOMEM)
		rc = rc == 0 && strstr(text, PROBE_NAME) != NULL;
	free(text);
	cJSON_Delete(msgs);
	cJSON_Delete(tools);
	return rc;
}

int serve_prompt_init(struct serve_prompt *sp, const struct tokenizer *tok, const char *model_type)
{
	memset(sp, 0, sizeof *sp);
	sp->tok = tok;
	sp->tool_format = tool_format_detect(tokenizer_chat_template(tok), model_type);
	sp->dsml_tool_calls = model_type && strcmp(model_type, "deepseek_v4") == 0;
	sp->think_tags = tokenizer_token_id(tok, "<think>") >= 0 && tokenizer_token_id(tok, "</think>") >= 0;
	sp->harmony = sp->tool_format == TOOL_FORMAT_HARMONY;
	int rc = chat_template_init(&sp->ct, tokenizer_chat_template(tok), model_type, tokenizer_bos_token(tok),
				    tokenizer_eos_token(tok), sp->template_error, sizeof sp->template_error);
	if (rc == -ENOMEM)
		return rc;
	sp->have_template = rc == 0;
	if (!sp->have_template)
		return 0;
	if ((rc = renders_tools(&sp->ct)) < 0) {
		chat_template_free(&sp->ct);
		return rc;
	}
	if (!rc) {
		sp->tool_format = TOOL_FORMAT_GENERIC;
		fprintf(stderr,
			"colibri serve: the %s%s chat template does not render tools; requests with tools get colibri's "
			"generic tool prompt, and calls are read from JSON answers (engine/serve/README.md)\n",
			sp->ct.jinja ? "model's" : "built-in ", sp->ct.jinja ? "" : chat_family_name(sp->ct.family));
	}
	return 0;
}

void serve_prompt_free(struct serve_prompt *sp)
{
	if (sp->have_template)
		chat_template_free(&sp->ct);
	memset(sp, 0, sizeof *sp);
}

/* Sets every tool call's arguments: parsed into an object when they are
 * JSON text of one (as_objects), else back to the text the client sent
 * (orig, the request's own messages). Returns whether any changed. */
static bool set_arguments(cJSON *msgs, const cJSON *orig, bool as_objects)
{
	bool changed = false;
	const cJSON *om = orig->child;
	for (cJSON *m = msgs->child; m && om; m = m->next, om = om->next) {
		cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
		const cJSON *ocalls = cJSON_GetObjectItemCaseSensitive(om, "tool_calls");
		const cJSON *oc = cJSON_IsArray(ocalls) ? ocalls->child : NULL;
		for (cJSON *c = cJSON_IsArray(calls) ? calls->child : NULL; c && oc; c = c->next, oc = oc->next) {
			cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
			const cJSON *text = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(oc, "function"),
									      "arguments");
			if (!cJSON_IsObject(fn) || !cJSON_IsString(text))
				continue;
			cJSON *v = as_objects ? cJSON_Parse(text->valuestring) : cJSON_CreateString(text->valuestring);
			if ((!as_objects || cJSON_IsObject(v)) && cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", v)) {
				changed = true;
				continue;
			}
			cJSON_Delete(v);
		}
	}
	return changed;
}

/* gpt-oss's template reads an assistant's reasoning from `thinking` and
 * fails on a null content (`... in message.content`): an OpenAI client's
 * reasoning_content becomes thinking and a null content is left out, as
 * llama.cpp does for this template. */
static void harmony_messages(cJSON *msgs)
{
	cJSON *m;
	cJSON_ArrayForEach(m, msgs) {
		const cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
		if (cJSON_IsString(rc) && !cJSON_HasObjectItem(m, "thinking"))
			cJSON_AddItemToObject(m, "thinking", cJSON_CreateString(rc->valuestring));
		if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m, "content")))
			cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
	}
}

/* The model's own (or a built-in) Jinja template: every field a template
 * reads, tools included. Tool call arguments go in as objects, as vLLM
 * passes them and transformers documents them; a template that fails on
 * that (DeepSeek-V3's concatenates them as text) gets the text the client
 * sent. */
static int render_jinja(const struct serve_prompt *sp, const struct serve_request *r, const struct chat_options *co,
			char **text, size_t *len, char *why, size_t why_len)
{
	cJSON *orig = cJSON_Parse(r->messages_json), *msgs = cJSON_Duplicate(orig, 1);
	cJSON *tools = r->tools_json ? cJSON_Parse(r->tools_json) : NULL;
	cJSON *kwargs = r->template_kwargs_json ? cJSON_Parse(r->template_kwargs_json) : NULL;
	struct chat_options o = *co;
	o.kwargs = kwargs;
	int rc = -ENOMEM;
	if (orig && msgs && (tools || !r->tools_json) && (kwargs || !r->template_kwargs_json)) {
		if (sp->harmony)
			harmony_messages(msgs);
		bool objects = set_arguments(msgs, orig, true);
		rc = chat_template_render_json(&sp->ct, msgs, tools, &o, text, len, why, why_len);
		if (rc == -EINVAL && objects && set_arguments(msgs, orig, false))
			rc = chat_template_render_json(&sp->ct, msgs, tools, &o, text, len, why, why_len);
	}
	cJSON_Delete(orig);
	cJSON_Delete(msgs);
	cJSON_Delete(tools);
	cJSON_Delete(kwargs);
	return rc;
}

/* Whether r goes through the generic tool format: tools on offer, or calls in the history. */
static bool generic_wanted(const struct serve_prompt *sp, const struct serve_request *r)
{
	if (sp->tool_format != TOOL_FORMAT_GENERIC)
		return false;
	if (r->tools_json && r->tool_choice != SERVE_TOOLS_NONE)
		return true;
	for (int i = 0; i < r->n_messages; i++)
		if (r->messages[i].has_tool_calls)
			return true;
	return false;
}

/* Sets m's content to head + sep + tail (head: its text content, may be absent). */
static bool set_content(cJSON *m, const char *head, const char *sep, const char *tail)
{
	size_t n = (head ? strlen(head) + strlen(sep) : 0) + strlen(tail) + 1;
	char *t = malloc(n);
	if (!t)
		return false;
	snprintf(t, n, "%s%s%s", head ? head : "", head ? sep : "", tail);
	cJSON *v = cJSON_CreateString(t);
	free(t);
	if (!v)
		return false;
	if (cJSON_HasObjectItem(m, "content"))
		return cJSON_ReplaceItemInObjectCaseSensitive(m, "content", v);
	return cJSON_AddItemToObject(m, "content", v);
}

/* The text content of m, or NULL when it has none. */
static const char *content_of(const cJSON *m)
{
	const char *c = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "content"));
	return c && c[0] ? c : NULL;
}

/* The messages as the generic format gives them to the template: an
 * assistant's tool_calls become its content, written as the answer the
 * generic prompt asks for, and a null content is "" (such templates print
 * content as text); for a built-in renderer (plain) every message keeps
 * its role and text only. Returns false when out of memory. */
static bool generic_messages(cJSON *msgs, bool plain)
{
	cJSON *m;
	cJSON_ArrayForEach(m, msgs) {
		const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
		if (calls) {
			char *t = tool_generic_calls_text(calls);
			bool ok = !t || set_content(m, content_of(m), "\n", t);
			free(t);
			if (!ok)
				return false;
			cJSON_DeleteItemFromObjectCaseSensitive(m, "tool_calls");
		}
		if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "content")) && !set_content(m, NULL, "", ""))
			return false;
		for (cJSON *f = m->child, *next; plain && f; f = next) {
			next = f->next;
			if (strcmp(f->string, "role") != 0 && strcmp(f->string, "content") != 0)
				cJSON_Delete(cJSON_DetachItemViaPointer(m, f));
		}
	}
	return true;
}

/*
 * A template that cannot render tools, given them: the generic tool
 * prompt (engine/text/tool_calls.h) joins the system message, or opens the
 * conversation as one; a template that refuses a system message then gets
 * it at the head of the first message. Calls in the history are written as
 * the generic answers they were (generic_messages).
 */
static int render_generic(const struct serve_prompt *sp, const struct serve_request *r, const struct chat_options *co,
			  char **text, size_t *len, char *why, size_t why_len)
{
	cJSON *msgs = cJSON_Parse(r->messages_json);
	cJSON *tools = r->tools_json && r->tool_choice != SERVE_TOOLS_NONE ? cJSON_Parse(r->tools_json) : NULL;
	cJSON *kwargs = r->template_kwargs_json ? cJSON_Parse(r->template_kwargs_json) : NULL;
	char *prompt = tools ? tool_generic_prompt(tools) : NULL;
	struct chat_options o = *co;
	o.kwargs = kwargs;
	int rc = -ENOMEM;
	if (!msgs || (tools && !prompt) || (r->template_kwargs_json && !kwargs) || !generic_messages(msgs, !sp->ct.jinja))
		goto out;
	cJSON *first = msgs->child;
	const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(first, "role"));
	bool system = role && !strcmp(role, "system");
	cJSON *added = NULL;
	if (prompt && system) {
		if (!set_content(first, content_of(first), "\n\n", prompt))
			goto out;
	} else if (prompt) {
		if (!(added = cJSON_CreateObject()) || !cJSON_AddStringToObject(added, "role", "system") ||
		    !cJSON_AddStringToObject(added, "content", prompt) || !cJSON_InsertItemInArray(msgs, 0, added)) {
			cJSON_Delete(added);
			goto out;
		}
	}
	rc = chat_template_render_json(&sp->ct, msgs, NULL, &o, text, len, why, why_len);
	if (rc == -EINVAL && added && first) {
		cJSON_DeleteItemFromArray(msgs, 0);
		const char *c = content_of(first);
		rc = set_content(first, prompt, c ? "\n\n" : "", c ? c : "")
			     ? chat_template_render_json(&sp->ct, msgs, NULL, &o, text, len, why, why_len)
			     : -ENOMEM;
	}
out:
	cJSON_Delete(msgs);
	cJSON_Delete(tools);
	cJSON_Delete(kwargs);
	free(prompt);
	return rc;
}

/* Renders the messages; *text is malloc'd. */
static int render(const struct serve_prompt *sp, const struct serve_request *r, bool no_thinking, char **text,
		  size_t *len, struct serve_error *err)
{
	struct chat_options co = { .add_generation_prompt = r->add_generation_prompt, .no_thinking = no_thinking };
	char why[256] = "";
	int rc;
	if (generic_wanted(sp, r)) {
		rc = render_generic(sp, r, &co, text, len, why, sizeof why);
	} else if (sp->ct.jinja) {
		rc = render_jinja(sp, r, &co, text, len, why, sizeof why);
	} else {
		struct chat_message *msgs = malloc((size_t)r->n_messages * sizeof *msgs);
		if (!msgs)
			return serve_error_set(err, 500, NULL, NULL, "out of memory");
		for (int i = 0; i < r->n_messages; i++)
			msgs[i] = (struct chat_message){ r->messages[i].role, r->messages[i].content };
		rc = chat_template_render(&sp->ct, msgs, (size_t)r->n_messages, &co, text, len, why, sizeof why);
		free(msgs);
	}
	if (rc == -ENOMEM)
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	if (rc)
		return serve_error_set(err, 400, "messages", NULL, "the %s chat template cannot render these messages: %s",
				       chat_family_name(sp->ct.family), why[0] ? why : "refused");
	return 0;
}

/* Whether text ends inside an open <think> block (blanks aside). */
static bool ends_open_think(const char *text, size_t len)
{
	while (len && (text[len - 1] == '\n' || text[len - 1] == ' '))
		len--;
	return len >= 7 && memcmp(text + len - 7, "<think>", 7) == 0;
}

static int build_chat(const struct serve_prompt *sp, const struct serve_request *r, char **text, size_t *len,
		      struct serve_error *err)
{
	if (!sp->have_template)
		return serve_error_set(err, 400, "messages", NULL,
				       "this model has no usable chat template (%s); use /v1/completions", sp->template_error);
	if (r->template_kwargs_json && !sp->ct.jinja)
		return serve_error_set(err, 400, "chat_template_kwargs", NULL,
				       "template variables need the model's Jinja template; the built-in %s renderer takes none",
				       chat_family_name(sp->ct.family));
	bool no_thinking = r->enable_thinking == 0 || serve_constraint_wanted(r);
	int rc = render(sp, r, no_thinking, text, len, err);
	if (rc || r->enable_thinking != 0)
		return rc;
	/* A template without the switch renders the same either way. */
	char *plain = NULL;
	size_t plain_len = 0;
	if ((rc = render(sp, r, false, &plain, &plain_len, err)) == 0 && plain_len == *len &&
	    memcmp(plain, *text, plain_len) == 0)
		rc = serve_error_set(err, 400, "chat_template_kwargs.enable_thinking", NULL,
				     "the %s chat template has no enable_thinking switch", chat_family_name(sp->ct.family));
	free(plain);
	if (rc) {
		free(*text);
		*text = NULL;
	}
	return rc;
}

/* How many of ids[0..n) the messages give without the generation prompt:
 * the conversation's history, which its next turn shares. 0 when that
 * rendering fails. */
static int history_ids(const struct serve_prompt *sp, const struct serve_request *r, const int32_t *ids, int n)
{
	struct serve_request without = *r;
	without.add_generation_prompt = false;
	struct serve_error e = { 0 };
	char *text = NULL;
	size_t len = 0, nv = 0;
	int32_t *h = NULL;
	int k = 0;
	if (render(sp, &without, r->enable_thinking == 0 || serve_constraint_wanted(r), &text, &len, &e) == 0 &&
	    tokenizer_encode(sp->tok, text, len, &h, &nv) == 0)
		while (k < n && (size_t)k < nv && h[k] == ids[k])
			k++;
	free(text);
	free(h);
	return k;
}

int serve_prompt_build(const struct serve_prompt *sp, const struct serve_request *r, struct serve_prompt_ids *out,
		       struct serve_error *err)
{
	memset(out, 0, sizeof *out);
	if (r->endpoint == SERVE_COMPLETION && r->prompt_ids) {
		if (!(out->ids = malloc((size_t)r->n_prompt_ids * sizeof *out->ids)))
			return serve_error_set(err, 500, NULL, NULL, "out of memory");
		memcpy(out->ids, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof *out->ids);
		out->n = r->n_prompt_ids;
		return 0;
	}
	char *text = NULL;
	size_t len = 0;
	int rc = 0;
	if (r->endpoint == SERVE_CHAT) {
		if ((rc = build_chat(sp, r, &text, &len, err)))
			return rc;
		out->reasoning_open = sp->think_tags && !serve_constraint_wanted(r) && ends_open_think(text, len);
	}
	const char *src = text ? text : r->prompt;
	size_t src_len = text ? len : strlen(r->prompt);
	int32_t *v = NULL;
	size_t nv = 0;
	rc = tokenizer_encode(sp->tok, src, src_len, &v, &nv);
	free(text);
	if (rc)
		return serve_error_set(err, rc == -ENOMEM ? 500 : 400, r->endpoint == SERVE_CHAT ? "messages" : "prompt",
				       NULL, "the prompt cannot be tokenized (%s)", rc == -EILSEQ ? "not UTF-8" : "error");
	bool bos = r->endpoint == SERVE_COMPLETION && tokenizer_add_bos(sp->tok) && tokenizer_bos_id(sp->tok) >= 0;
	if (!(out->ids = malloc((nv + 1) * sizeof *out->ids))) {
		free(v);
		return serve_error_set(err, 500, NULL, NULL, "out of memory");
	}
	if (bos)
		out->ids[out->n++] = tokenizer_bos_id(sp->tok);
	if (nv)
		memcpy(out->ids + out->n, v, nv * sizeof *v);
	out->n += (int)nv;
	free(v);
	if (out->n == 0) {
		free(out->ids);
		out->ids = NULL;
		return serve_error_set(err, 400, r->endpoint == SERVE_CHAT ? "messages" : "prompt", NULL,
				       "the prompt is empty");
	}
	if (sp->history && r->endpoint == SERVE_CHAT && r->add_generation_prompt)
		out->history = history_ids(sp, r, out->ids, out->n);
	return 0;
}
