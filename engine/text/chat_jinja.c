/*
 * chat_jinja — a model's chat template rendered with the Jinja subset, with
 * the variables transformers v5.15.0 passes (tokenization_utils_base.py
 * apply_chat_template -> chat_template_utils.render_jinja_template):
 * messages, tools (None when there are none), documents (None),
 * add_generation_prompt, the special tokens the tokenizer defines
 * (bos_token, eos_token), and the caller's template kwargs: here
 * enable_thinking=false when thinking is turned off.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_internal.h"
#include "engine/text/jinja.h"

cJSON *chat_messages_json(const struct chat_message *m, size_t n, char *err, size_t err_len)
{
	cJSON *arr = cJSON_CreateArray();
	for (size_t i = 0; arr && i < n; i++) {
		cJSON *o = cJSON_CreateObject();
		if (!o || !cJSON_AddItemToArray(arr, o) || !cJSON_AddStringToObject(o, "role", m[i].role) ||
		    !cJSON_AddStringToObject(o, "content", m[i].content)) {
			cJSON_Delete(arr);
			arr = NULL;
		}
	}
	if (!arr)
		chat_set_err(err, err_len, "out of memory");
	return arr;
}

int chat_jinja_render(const struct chat_template *ct, const cJSON *messages, const cJSON *tools,
		      const struct chat_options *opt, char **out, size_t *out_len, char *err, size_t err_len)
{
	cJSON *vars = cJSON_CreateObject();
	bool ok = vars && cJSON_AddItemReferenceToObject(vars, "messages", (cJSON *)messages) &&
		  (tools ? cJSON_AddItemReferenceToObject(vars, "tools", (cJSON *)tools) : cJSON_AddNullToObject(vars, "tools") != NULL) &&
		  cJSON_AddNullToObject(vars, "documents") && cJSON_AddBoolToObject(vars, "add_generation_prompt", opt->add_generation_prompt) &&
		  (!ct->has_bos || cJSON_AddStringToObject(vars, "bos_token", ct->bos)) &&
		  (!ct->has_eos || cJSON_AddStringToObject(vars, "eos_token", ct->eos)) &&
		  (!opt->no_thinking || cJSON_AddFalseToObject(vars, "enable_thinking"));
	for (const cJSON *k = opt->kwargs ? opt->kwargs->child : NULL; ok && k; k = k->next) {
		static const char *const own[] = { "messages", "tools", "documents", "add_generation_prompt" };
		for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
			if (!strcmp(k->string, own[i])) {
				cJSON_Delete(vars);
				chat_set_err(err, err_len, "a template keyword argument may not set '%s'", own[i]);
				return -EINVAL;
			}
		cJSON_DeleteItemFromObjectCaseSensitive(vars, k->string);
		ok = cJSON_AddItemReferenceToObject(vars, k->string, (cJSON *)k);
	}
	if (!ok) {
		cJSON_Delete(vars);
		chat_set_err(err, err_len, "out of memory");
		return -ENOMEM;
	}
	struct jinja_render_options ro = { .now = opt->now };
	struct jinja_error je;
	int rc = jinja_template_render(ct->jinja, vars, &ro, out, out_len, &je);
	cJSON_Delete(vars);
	if (rc == 0)
		return 0;
	if (je.raised)
		chat_set_err(err, err_len, "%s", je.msg);
	else if (je.line)
		chat_set_err(err, err_len, "chat template line %d, column %d: %s", je.line, je.col, je.msg);
	else
		chat_set_err(err, err_len, "chat template: %s", je.msg);
	return rc;
}
