/*
 * chat — renders a conversation into the prompt text a chat model expects.
 *
 * There is no Jinja engine: each supported family's template is written in
 * C and chosen by recognising the tokenizer_config.json chat_template (or,
 * when a checkpoint has none, by config.json's model_type). Families:
 *   QWEN3        Qwen3 ChatML with <think> handling (qwen3, qwen3_moe)
 *   CHATML       plain ChatML, optionally with the template's default system
 *                prompt (Qwen1.5/Qwen2-MoE)
 *   TULU         OLMoE-Instruct's <|user|>/<|assistant|> format (also Tulu 3)
 *   MISTRAL      Mixtral-Instruct's [INST] ... [/INST], with or without the
 *                system-message variant
 *   DEEPSEEK_V3  <｜begin▁of▁sentence｜>{system}<｜User｜>...<｜Assistant｜>
 *   GLM4         GLM-4.5 / GLM-4.6: [gMASK]<sop><|system|>\n...<|user|>\n...
 *                <|assistant|>\n<think>...</think>... (glm4_moe)
 * Anything else is an error that names the problem, never a guess.
 *
 * Invariant: for the conversations a family accepts, the output is byte for
 * byte what the model's own Jinja template renders with Hugging Face's
 * settings (trim_blocks, lstrip_blocks).
 */
#ifndef COLIBRI_CHAT_H
#define COLIBRI_CHAT_H

#include <stdbool.h>
#include <stddef.h>

enum chat_family {
	CHAT_FAMILY_QWEN3,
	CHAT_FAMILY_CHATML,
	CHAT_FAMILY_TULU,
	CHAT_FAMILY_MISTRAL,
	CHAT_FAMILY_DEEPSEEK_V3,
	CHAT_FAMILY_GLM4,
};

/* One message; role is "system", "user", "assistant" or (Qwen3, DeepSeek-V3, GLM) "tool". */
struct chat_message {
	const char *role;
	const char *content;
};

struct chat_template {
	enum chat_family family;
	unsigned variant;	/* family-specific flags, set by chat_template_init */
	char *bos, *eos;	/* token text the template inserts ("" when absent) */
	char *default_system;	/* CHATML: system prompt used when none is given, or NULL */
};

struct chat_options {
	bool add_generation_prompt;	/* end with the assistant header */
	bool no_thinking;		/* Qwen3, GLM: enable_thinking=false (empty <think> block) */
};

/*
 * Chooses the family from template_text (may be NULL) or else model_type
 * (may be NULL); bos/eos are the tokenizer's token strings (may be NULL).
 * Returns 0, or -EINVAL with a message in err when nothing is recognised;
 * -ENOMEM. Free with chat_template_free.
 */
int chat_template_init(struct chat_template *ct, const char *template_text, const char *model_type,
		       const char *bos, const char *eos, char *err, size_t err_len);
void chat_template_free(struct chat_template *ct);

/*
 * Renders n messages. On success *out is a malloc'd NUL-terminated string of
 * *out_len bytes that the caller frees. Returns -EINVAL with a message for a
 * conversation the template itself rejects (e.g. Mistral's alternation rule)
 * or a role the family does not know; -ENOMEM.
 */
int chat_template_render(const struct chat_template *ct, const struct chat_message *msgs, size_t n,
			 const struct chat_options *opt, char **out, size_t *out_len,
			 char *err, size_t err_len);

/* Lower-case family name for messages, e.g. "qwen3". */
const char *chat_family_name(enum chat_family f);

#endif
