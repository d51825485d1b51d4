/*
 * prompt — see prompt.h. A chat prompt gets no extra BOS: the template
 * writes whatever special tokens the model expects, as transformers'
 * apply_chat_template does. A plain prompt gets BOS when the tokenizer
 * config asks for it (add_bos_token). When a built-in template stands in
 * for the model's (none, or one outside the Jinja subset), one line on
 * stderr says so.
 */
#include "engine/text/prompt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat.h"
#include "engine/text/tokenizer.h"
#include "base/error.h"

int prompt_tokenizer_load(struct tokenizer **out, const char *model_dir)
{
	char err[512] = "";
	int rc = tokenizer_load(out, model_dir, err, sizeof err);
	if (rc == -ENOENT)
		return error_set(ENOENT, "%s: the model has no tokenizer (tokenizer.json); pass --tokens instead",
				 model_dir);
	if (rc)
		return error_set(-rc, "%s", err[0] ? err : "cannot load the tokenizer");
	return 0;
}

int prompt_encode(const struct tokenizer *tok, const char *model_type, const char *text, size_t len,
		  bool chat, const char *system, int32_t **ids, int *n)
{
	char err[512] = "";
	char *rendered = NULL;
	int rc;
	*ids = NULL;
	*n = 0;
	const char *nul = chat ? memchr(text, 0, len) : NULL;
	if (nul)
		return error_set(EINVAL, "the prompt holds a NUL byte at offset %zu; --chat needs text without one",
				 (size_t)(nul - text));
	if (chat) {
		struct chat_template ct;
		rc = chat_template_init(&ct, tokenizer_chat_template(tok), model_type,
					tokenizer_bos_token(tok), tokenizer_eos_token(tok), err, sizeof err);
		if (rc)
			return error_set(-rc, "chat template: %s", err[0] ? err : "not supported");
		if (ct.note[0])
			fprintf(stderr, "colibri: chat template: %s\n", ct.note);
		struct chat_message msgs[2];
		size_t nm = 0;
		if (system)
			msgs[nm++] = (struct chat_message){ "system", system };
		msgs[nm++] = (struct chat_message){ "user", text };
		struct chat_options co = { .add_generation_prompt = true };
		rc = chat_template_render(&ct, msgs, nm, &co, &rendered, &len, err, sizeof err);
		chat_template_free(&ct);
		if (rc)
			return error_set(-rc, "chat template: %s", err[0] ? err : "cannot render");
		text = rendered;
	}
	int32_t *v = NULL;
	size_t nv = 0;
	rc = tokenizer_encode(tok, text, len, &v, &nv);
	free(rendered);
	if (rc)
		return error_set(-rc, rc == -EILSEQ ? "the prompt is not valid UTF-8" : "cannot tokenize the prompt");
	bool bos = !chat && tokenizer_add_bos(tok) && tokenizer_bos_id(tok) >= 0;
	int32_t *out = malloc((nv + 1) * sizeof *out);
	if (!out) {
		free(v);
		return error_set(ENOMEM, "out of memory");
	}
	size_t k = 0;
	if (bos)
		out[k++] = tokenizer_bos_id(tok);
	memcpy(out + k, v, nv * sizeof *v);
	free(v);
	*ids = out;
	*n = (int)(nv + k);
	return 0;
}
