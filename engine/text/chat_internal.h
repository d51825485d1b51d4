/*
 * chat_internal — what chat.c (template choice, dispatch), chat_jinja.c
 * (the model's template through the Jinja subset), chat_builtin.c (built-in
 * Jinja texts) and chat_render.c (the renderers in C) share. Not part of the
 * public API.
 */
#ifndef COLIBRI_CHAT_INTERNAL_H
#define COLIBRI_CHAT_INTERNAL_H

#include <stddef.h>

#include "base/strbuf.h"
#include "engine/text/chat.h"

/* Bits of chat_template.variant. */
enum {
	CHAT_VARIANT_BOS = 1,		/* the template writes bos_token first */
	CHAT_VARIANT_QWEN3_NO_THINK = 2,	/* the template knows enable_thinking */
	CHAT_VARIANT_QWEN3_OPEN_THINK = 4,	/* its generation prompt opens <think> */
	CHAT_VARIANT_TULU3 = 8,		/* no newline after a final assistant turn */
	CHAT_VARIANT_MISTRAL_SYSTEM = 16,	/* system message merged into the first [INST] */
	CHAT_VARIANT_CHATML_NO_TOOL = 32,	/* the template formats tool turns its own way */
	CHAT_VARIANT_GLM_USER_NL = 64,	/* a newline after <|user|> (all but llama.cpp's GLM-4.5 copy) */
};

/* Appends n NUL-terminated strings. */
void chat_cat(struct strbuf *b, int n, ...);

void chat_set_err(char *err, size_t err_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Built-in Jinja texts (chat_builtin.c). */
extern const char chat_builtin_deepseek_v32[];
extern const char chat_builtin_deepseek_v4[];
extern const char chat_builtin_glm5[];
extern const char chat_builtin_qwen35[];
extern const char chat_builtin_qwen3[];

/* The messages as the JSON array a template sees; NULL with err set when out of memory. */
cJSON *chat_messages_json(const struct chat_message *m, size_t n, char *err, size_t err_len);
/* Renders ct->jinja with Hugging Face's variables (chat_jinja.c). */
int chat_jinja_render(const struct chat_template *ct, const cJSON *messages, const cJSON *tools,
		      const struct chat_options *opt, char **out, size_t *out_len, char *err, size_t err_len);

int chat_render_qwen3(const struct chat_template *ct, struct strbuf *b, const struct chat_message *m,
		      size_t n, const struct chat_options *opt, char *err, size_t err_len);
int chat_render_chatml(const struct chat_template *ct, struct strbuf *b, const struct chat_message *m,
		       size_t n, const struct chat_options *opt, char *err, size_t err_len);
int chat_render_tulu(const struct chat_template *ct, struct strbuf *b, const struct chat_message *m,
		     size_t n, const struct chat_options *opt, char *err, size_t err_len);
int chat_render_mistral(const struct chat_template *ct, struct strbuf *b, const struct chat_message *m,
			size_t n, char *err, size_t err_len);
int chat_render_deepseek_v3(const struct chat_template *ct, struct strbuf *b,
			    const struct chat_message *m, size_t n, const struct chat_options *opt,
			    char *err, size_t err_len);
int chat_render_glm4(const struct chat_template *ct, struct strbuf *b, const struct chat_message *m,
		     size_t n, const struct chat_options *opt, char *err, size_t err_len);

#endif
