/*
 * tokenizer_config — the fields of MODEL_DIR/tokenizer_config.json the
 * engine uses: bos_token, eos_token (a string or an AddedToken object),
 * add_bos_token, and chat_template (a string, or a list of named templates
 * of which "default" is taken). Newer checkpoints keep the template in
 * MODEL_DIR/chat_template.jinja; as in transformers v5.15.0
 * (PreTrainedTokenizerBase._from_pretrained), that file takes priority over
 * the config's chat_template when both exist.
 * A missing config file is not an error: the fields stay unset.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/text/tokenizer_internal.h"

static char *read_text(const char *path, size_t *len, int *rc)
{
	struct tok_buf b = { 0 };
	char chunk[65536];
	size_t got;
	FILE *f = fopen(path, "rb");
	*rc = 0;
	if (!f) {
		*rc = -errno;
		return NULL;
	}
	while (*rc == 0 && (got = fread(chunk, 1, sizeof(chunk), f)) > 0)
		*rc = tok_buf_append(&b, chunk, got);
	if (*rc == 0 && ferror(f))
		*rc = -EIO;
	if (*rc == 0)
		*rc = tok_buf_append(&b, "", 1);
	fclose(f);
	if (*rc) {
		tok_buf_free(&b);
		return NULL;
	}
	*len = b.len - 1;
	return b.data;
}

/* A token field: "text", {"content": "text", ...}, or null. */
static int token_field(const cJSON *cfg, const char *key, char **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
	if (cJSON_IsObject(v))
		v = cJSON_GetObjectItemCaseSensitive(v, "content");
	if (!cJSON_IsString(v))
		return 0;
	*out = strdup(v->valuestring);
	return *out ? 0 : -ENOMEM;
}

static const char *pick_template(const cJSON *v)
{
	if (cJSON_IsString(v))
		return v->valuestring;
	const cJSON *it, *first = NULL;
	cJSON_ArrayForEach(it, v) {
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
		const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(it, "template");
		if (!cJSON_IsString(tmpl))
			continue;
		if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0)
			return tmpl->valuestring;
		first = first ? first : tmpl;
	}
	return first ? first->valuestring : NULL;
}

int tok_load_config(struct tokenizer *t, const char *model_dir, char *err, size_t err_len)
{
	char path[4096];
	size_t len;
	int rc;
	snprintf(path, sizeof(path), "%s/tokenizer_config.json", model_dir);
	char *text = read_text(path, &len, &rc);
	if (rc == -ENOENT)
		goto jinja;
	if (rc) {
		tok_err(err, err_len, "%s: %s", path, strerror(-rc));
		return rc;
	}
	cJSON *cfg = cJSON_ParseWithLength(text, len);
	free(text);
	if (!cJSON_IsObject(cfg)) {
		cJSON_Delete(cfg);
		tok_err(err, err_len, "%s: malformed JSON (expected an object)", path);
		return -EINVAL;
	}
	rc = token_field(cfg, "bos_token", &t->bos_str);
	if (!rc)
		rc = token_field(cfg, "eos_token", &t->eos_str);
	const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
	t->add_bos = cJSON_IsTrue(ab);
	const char *tmpl = pick_template(cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"));
	if (!rc && tmpl && !(t->chat_template = strdup(tmpl)))
		rc = -ENOMEM;
	cJSON_Delete(cfg);
	if (rc) {
		tok_err(err, err_len, "%s: out of memory", path);
		return rc;
	}
jinja:
	snprintf(path, sizeof(path), "%s/chat_template.jinja", model_dir);
	char *file = read_text(path, &len, &rc);
	if (rc && rc != -ENOENT) {
		tok_err(err, err_len, "%s: %s", path, strerror(-rc));
		return rc;
	}
	if (file) {
		free(t->chat_template);
		t->chat_template = file;
	}
	t->bos_id = t->bos_str ? tokenizer_token_id(t, t->bos_str) : -1;
	t->eos_id = t->eos_str ? tokenizer_token_id(t, t->eos_str) : -1;
	return 0;
}
