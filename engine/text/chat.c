/*
 * chat — recognises a model's chat template and dispatches rendering to
 * chat_render.c, where each family's template is written in C. See chat.h
 * for the families and the invariant.
 *
 * Recognition looks for fragments that pin down the exact output of a
 * template (e.g. "' [INST] ' + system_message + '\n\n'"), so a template of a
 * similar family with different spacing is rejected instead of rendered
 * almost right. The templates' tool-call features are not implemented.
 */
#include "engine/text/chat.h"
#include "engine/text/chat_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


void chat_set_err(char *err, size_t err_len, const char *fmt, ...)
{
	if (!err || err_len == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
}

const char *chat_family_name(enum chat_family f)
{
	static const char *const names[] = { "qwen3", "chatml", "tulu", "mistral", "deepseek_v3", "glm4" };
	return (unsigned)f < sizeof(names) / sizeof(names[0]) ? names[f] : "unknown";
}

static bool has(const char *s, const char *frag)
{
	return s && strstr(s, frag);
}

/*
 * The default system prompt of a ChatML template: a string literal
 * '<|im_start|>system\n...<|im_end|>' (Qwen1.5 / Qwen2-MoE), unescaped; NULL
 * when the template has none (Qwen3 writes messages[0].content there).
 */
static char *chatml_default_system(const char *t)
{
	static const char head[] = "<|im_start|>system\\n";
	for (const char *p = strstr(t, head); p; p = strstr(p + 1, head)) {
		if (p == t || (p[-1] != '\'' && p[-1] != '"'))
			continue;
		char quote = p[-1];
		const char *s = p + strlen(head), *e = strstr(s, "<|im_end|>");
		char *buf = e && e > s ? malloc((size_t)(e - s) + 1) : NULL;
		size_t w = 0;
		bool literal = buf != NULL;
		for (const char *c = s; literal && c < e; c++) {
			if (*c == quote) {
				literal = false;	/* the literal ends before <|im_end|> */
			} else if (*c == '\\' && c + 1 < e) {
				c++;
				buf[w++] = *c == 'n' ? '\n' : *c == 't' ? '\t' : *c;
			} else {
				buf[w++] = *c;
			}
		}
		if (literal) {
			buf[w] = 0;
			return buf;
		}
		free(buf);
	}
	return NULL;
}

/*
 * GLM-4.5 / GLM-4.6: the markers that set them apart from GLM-4.7 and
 * GLM-5, whose templates share the [gMASK]<sop> prefix but put no newline
 * after the role tags, write "</think>" rather than "\n<think></think>" for
 * a turn without reasoning, open the generation prompt with <think> and
 * drop /nothink; those are refused. What follows <|user|> decides the
 * newline there: zai-org's templates keep it, llama.cpp's copy of GLM-4.5
 * trims it ("{%-").
 */
static int glm4_detect(struct chat_template *ct, const char *t, char *err, size_t err_len)
{
	static const char *const markers[] = {
		"<|assistant|>", "<|system|>\n{{", "'\\n<think></think>'", "'\\n<think>' + reasoning_content.strip()",
		"'\\n' + content.strip()", "'/nothink'", "'\\n<tool_response>\\n'",
	};
	bool known = true;
	for (size_t i = 0; i < sizeof(markers) / sizeof(markers[0]); i++)
		known = known && has(t, markers[i]);
	if (known && (has(t, "<|user|>\n{{") || has(t, "<|user|>\n{% set"))) {
		ct->family = CHAT_FAMILY_GLM4;
		ct->variant = CHAT_VARIANT_GLM_USER_NL;	/* GLM writes no bos_token */
		return 0;
	}
	if (known && has(t, "<|user|>\n{%- set")) {
		ct->family = CHAT_FAMILY_GLM4;
		ct->variant = 0;
		return 0;
	}
	chat_set_err(err, err_len, "this [gMASK]<sop> chat template is not recognised (GLM-4.5's and GLM-4.6's are; "
		     "GLM-4.7 and GLM-5 format turns differently and are not supported)");
	return -EINVAL;
}

static int detect(struct chat_template *ct, const char *t, const char *model_type,
		  char *err, size_t err_len)
{
	if (!t) {
		/*
		 * glm_moe_dsa (GLM-5) is missing on purpose: its template formats
		 * turns unlike GLM-4.5's (see glm4_detect).
		 */
		static const struct {
			const char *type;
			enum chat_family f;
			unsigned variant;
		} by_type[] = {
			{ "qwen3", CHAT_FAMILY_QWEN3, CHAT_VARIANT_QWEN3_NO_THINK },
			{ "qwen3_moe", CHAT_FAMILY_QWEN3, CHAT_VARIANT_QWEN3_NO_THINK },
			{ "olmoe", CHAT_FAMILY_TULU, CHAT_VARIANT_BOS },
			{ "mixtral", CHAT_FAMILY_MISTRAL, CHAT_VARIANT_BOS | CHAT_VARIANT_MISTRAL_SYSTEM },
			{ "deepseek_v3", CHAT_FAMILY_DEEPSEEK_V3, CHAT_VARIANT_BOS },
			{ "glm4_moe", CHAT_FAMILY_GLM4, CHAT_VARIANT_GLM_USER_NL },
		};
		for (size_t i = 0; model_type && i < sizeof(by_type) / sizeof(by_type[0]); i++)
			if (strcmp(model_type, by_type[i].type) == 0) {
				ct->family = by_type[i].f;
				ct->variant = by_type[i].variant;
				return 0;
			}
		chat_set_err(err, err_len, "the model has no chat_template and model_type \"%s\" has no built-in one",
			model_type ? model_type : "(unknown)");
		return -EINVAL;
	}
	ct->variant = has(t, "bos_token") ? CHAT_VARIANT_BOS : 0;
	if (has(t, "<|im_start|>")) {
		if (has(t, "enable_thinking") || has(t, "reasoning_content")) {
			ct->family = CHAT_FAMILY_QWEN3;
			if (has(t, "enable_thinking"))
				ct->variant |= CHAT_VARIANT_QWEN3_NO_THINK;
			if (has(t, "'<|im_start|>assistant\\n<think>\\n'"))
				ct->variant |= CHAT_VARIANT_QWEN3_OPEN_THINK;
			return 0;
		}
		if (has(t, "<think>")) {
			chat_set_err(err, err_len, "ChatML chat template with <think> handling is not recognised");
			return -EINVAL;
		}
		ct->family = CHAT_FAMILY_CHATML;
		if (has(t, "tool"))
			ct->variant |= CHAT_VARIANT_CHATML_NO_TOOL;
		ct->default_system = chatml_default_system(t);
		return 0;
	}
	if (has(t, "<\xEF\xBD\x9CUser\xEF\xBD\x9C>") && has(t, "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>")) {
		if (has(t, "<think>")) {
			chat_set_err(err, err_len, "DeepSeek chat template with <think> (R1 / V3.1) is not supported");
			return -EINVAL;
		}
		ct->family = CHAT_FAMILY_DEEPSEEK_V3;
		return 0;
	}
	if (has(t, "[gMASK]<sop>"))
		return glm4_detect(ct, t, err, err_len);
	if (has(t, "[INST]")) {
		ct->family = CHAT_FAMILY_MISTRAL;
		if (has(t, "' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]'") &&
		    has(t, "' ' + message['content'] + eos_token")) {
			ct->variant |= CHAT_VARIANT_MISTRAL_SYSTEM;
			return 0;
		}
		if (!has(t, "system") && has(t, "'[INST] ' + message['content'] + ' [/INST]'") &&
		    has(t, "message['content'] + eos_token"))
			return 0;
		chat_set_err(err, err_len, "this [INST] chat template variant is not recognised (Mixtral-Instruct's are)");
		return -EINVAL;
	}
	if (has(t, "'<|user|>\\n' + message['content']") && has(t, "'<|assistant|>\\n'")) {
		if (has(t, "<think>")) {
			chat_set_err(err, err_len, "<|user|>/<|assistant|> chat template with <think> is not recognised");
			return -EINVAL;
		}
		ct->family = CHAT_FAMILY_TULU;
		if (has(t, "if not loop.last"))
			ct->variant |= CHAT_VARIANT_TULU3;
		return 0;
	}
	chat_set_err(err, err_len, "chat template not recognised (supported: Qwen3/ChatML, OLMoE, Mixtral, DeepSeek-V3, GLM-4.5/4.6): \"%.60s...\"", t);
	return -EINVAL;
}

int chat_template_init(struct chat_template *ct, const char *template_text, const char *model_type,
		       const char *bos, const char *eos, char *err, size_t err_len)
{
	memset(ct, 0, sizeof(*ct));
	int rc = detect(ct, template_text, model_type, err, err_len);
	if (rc)
		return rc;
	ct->bos = strdup(bos ? bos : "");
	ct->eos = strdup(eos ? eos : "");
	if (!ct->bos || !ct->eos) {
		chat_template_free(ct);
		chat_set_err(err, err_len, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

void chat_template_free(struct chat_template *ct)
{
	free(ct->bos);
	free(ct->eos);
	free(ct->default_system);
	memset(ct, 0, sizeof(*ct));
}


int chat_template_render(const struct chat_template *ct, const struct chat_message *msgs, size_t n,
			 const struct chat_options *opt, char **out, size_t *out_len,
			 char *err, size_t err_len)
{
	static const struct chat_options defaults = { .add_generation_prompt = true };
	struct chat_sb b = { 0 };
	int rc;
	opt = opt ? opt : &defaults;
	*out = NULL;
	*out_len = 0;
	if (ct->variant & CHAT_VARIANT_BOS)
		chat_cat(&b, 1, ct->bos);
	switch (ct->family) {
	case CHAT_FAMILY_QWEN3: rc = chat_render_qwen3(ct, &b, msgs, n, opt, err, err_len); break;
	case CHAT_FAMILY_CHATML: rc = chat_render_chatml(ct, &b, msgs, n, opt, err, err_len); break;
	case CHAT_FAMILY_TULU: rc = chat_render_tulu(ct, &b, msgs, n, opt, err, err_len); break;
	case CHAT_FAMILY_MISTRAL: rc = chat_render_mistral(ct, &b, msgs, n, err, err_len); break;
	case CHAT_FAMILY_DEEPSEEK_V3: rc = chat_render_deepseek_v3(ct, &b, msgs, n, opt, err, err_len); break;
	case CHAT_FAMILY_GLM4: rc = chat_render_glm4(ct, &b, msgs, n, opt, err, err_len); break;
	default: rc = -EINVAL; break;
	}
	if (rc == 0 && b.rc == 0)
		chat_put(&b, "", 0);	/* a NUL-terminated buffer even when empty */
	rc = rc ? rc : b.rc;
	if (rc) {
		if (rc == -ENOMEM)
			chat_set_err(err, err_len, "out of memory");
		free(b.p);
		return rc;
	}
	*out = b.p;
	*out_len = b.len;
	return 0;
}
