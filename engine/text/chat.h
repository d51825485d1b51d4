/*
 * chat — renders a conversation into the prompt text a chat model expects.
 *
 * The model's own chat template (tokenizer_config.json's chat_template, or
 * chat_template.jinja) is rendered with colibri's Jinja subset (jinja.h)
 * exactly as transformers' apply_chat_template renders it, tools, tool
 * calls and reasoning included. Built-in templates are the fallback, used
 * only when the model has no template or its template is outside the
 * subset; chat_template.note then says so in one line:
 *   - for model types whose checkpoints ship no Jinja template, Jinja texts
 *     of their format: DeepSeek-V3.2 (its encoding_dsv32.py), DeepSeek-V4
 *     (its encoding_dsv4.py), GLM-4.7 / GLM-5 (glm_moe_dsa), Qwen3.5
 *     (qwen3_5_moe, qwen3_5_moe_text) and Qwen3's for Qwen3-Next
 *     (qwen3_next);
 *   - the renderers written in C, chosen by recognising the template text
 *     or by model_type (role and content only, no tools):
 *       QWEN3        Qwen3 ChatML with <think> handling (qwen3, qwen3_moe)
 *       CHATML       plain ChatML, optionally with the template's default
 *                    system prompt (Qwen1.5/Qwen2-MoE)
 *       TULU         OLMoE-Instruct's <|user|>/<|assistant|> format (also Tulu 3)
 *       MISTRAL      Mixtral-Instruct's [INST] ... [/INST], with or without
 *                    the system-message variant
 *       DEEPSEEK_V3  <｜begin▁of▁sentence｜>{system}<｜User｜>...<｜Assistant｜>
 *       GLM4         GLM-4.5 / GLM-4.6 (glm4_moe)
 * Anything else is an error that names the problem, never a guess.
 *
 * Invariant: the output is byte for byte what the model's Jinja template
 * renders with Hugging Face's settings (trim_blocks, lstrip_blocks) for the
 * same messages, tools and flags.
 */
#ifndef COLIBRI_CHAT_H
#define COLIBRI_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include <cjson/cJSON.h>

enum chat_family {
	CHAT_FAMILY_QWEN3,
	CHAT_FAMILY_CHATML,
	CHAT_FAMILY_TULU,
	CHAT_FAMILY_MISTRAL,
	CHAT_FAMILY_DEEPSEEK_V3,
	CHAT_FAMILY_GLM4,
	CHAT_FAMILY_JINJA,	/* rendered by the Jinja subset */
};

/* One message of text; role is "system", "user", "assistant", "tool" or whatever else the
 * template knows. Messages with tool calls, reasoning or content parts go through
 * chat_template_render_json. */
struct chat_message {
	const char *role;
	const char *content;
};

struct jinja_template;

struct chat_template {
	enum chat_family family;
	unsigned variant;	/* family-specific flags, set by chat_template_init */
	char *bos, *eos;	/* token text the template inserts ("" when absent) */
	bool has_bos, has_eos;	/* the tokenizer defines them: bos_token / eos_token are passed */
	char *default_system;	/* CHATML: system prompt used when none is given, or NULL */
	struct jinja_template *jinja;	/* CHAT_FAMILY_JINJA: the parsed template */
	bool jinja_shared;	/* jinja is a built-in one, parsed once per process: not freed */
	char note[384];	/* "" when the model's own template is rendered, else why a built-in one is */
};

struct chat_options {
	bool add_generation_prompt;	/* end with the assistant header */
	bool no_thinking;		/* pass enable_thinking=false (Qwen3, GLM, DeepSeek: no reasoning) */
	const char *tools;		/* JSON array of tool definitions, or NULL (tools=None) */
	time_t now;			/* the time strftime_now() formats; 0: the current time */
	const cJSON *kwargs;		/* more template variables (an object), as apply_chat_template's
					 * **kwargs: they override bos_token / eos_token / enable_thinking;
					 * messages, tools, documents and add_generation_prompt are refused.
					 * Jinja templates only: the built-in renderers refuse any. */
};

/*
 * Parses template_text (may be NULL) with the Jinja subset; when there is
 * none or it is outside the subset, chooses a built-in template from the
 * text or model_type (may be NULL) and says so in ct->note. bos/eos are
 * the tokenizer's token strings (NULL: the tokenizer has none). Returns 0,
 * or -EINVAL with a message in err when nothing fits; -ENOMEM. Free with
 * chat_template_free.
 */
int chat_template_init(struct chat_template *ct, const char *template_text, const char *model_type,
		       const char *bos, const char *eos, char *err, size_t err_len);
void chat_template_free(struct chat_template *ct);

/*
 * Renders n messages (opt NULL: add_generation_prompt, nothing else). On
 * success *out is a malloc'd NUL-terminated string of *out_len bytes that
 * the caller frees. Returns -EINVAL with a message for a conversation the
 * template rejects (its raise_exception text as it is, e.g. Mistral's
 * alternation rule), a template error (with its line and column), a role
 * or field a built-in renderer does not know, or malformed tool JSON;
 * -E2BIG when the template exceeds the Jinja limits; -ENOMEM.
 */
int chat_template_render(const struct chat_template *ct, const struct chat_message *msgs, size_t n,
			 const struct chat_options *opt, char **out, size_t *out_len,
			 char *err, size_t err_len);

/*
 * The same for messages given as a JSON array of objects, any fields the
 * template reads included (content parts, tool calls...); opt->tools is
 * ignored in favour of tools (a JSON array, or NULL). The built-in C
 * renderers accept string contents and roles only.
 */
int chat_template_render_json(const struct chat_template *ct, const cJSON *messages, const cJSON *tools,
			      const struct chat_options *opt, char **out, size_t *out_len, char *err,
			      size_t err_len);

/* Lower-case family name for messages, e.g. "qwen3" ("jinja" for the model's own template). */
const char *chat_family_name(enum chat_family f);

#endif
