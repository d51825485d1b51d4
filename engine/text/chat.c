/*
 * chat — chooses how a model's conversations are rendered and dispatches:
 * the model's own template through the Jinja subset (chat_jinja.c) when it
 * has one the subset parses; otherwise a built-in one, with a note saying
 * so: a built-in Jinja text for model types whose checkpoints ship none
 * (chat_builtin.c), or a renderer written in C (chat_render.c), recognised
 * from the template text or chosen by model_type. See chat.h for the
 * families and the invariant.
 *
 * Recognition for the C renderers looks for fragments that pin down the
 * exact output of a template (e.g. "' [INST] ' + system_message + '\n\n'"),
 * so a template of a similar family with different spacing is rejected
 * instead of rendered almost right. The C renderers know roles and text
 * contents only: tools and messages with other fields are refused there.
 */
#include "engine/text/chat.h"
#include "engine/text/chat_internal.h"
#include "engine/text/jinja.h"

#include <errno.h>
#include <pthread.h>
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
	static const char *const names[] = { "qwen3", "chatml", "tulu", "mistral", "deepseek_v3", "glm4", "jinja" };
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
	chat_set_err(err, err_len, "this [gMASK]<sop> chat template is not recognised by the built-in renderers (GLM-4.5's "
		     "and GLM-4.6's are; GLM-4.7 and GLM-5 format turns differently)");
	return -EINVAL;
}

static int detect(struct chat_template *ct, const char *t, const char *model_type,
		  char *err, size_t err_len)
{
	if (!t) {
		/* deepseek_v32, deepseek_v4, glm_moe_dsa, qwen3_5_moe(_text) and qwen3_next have
		 * built-in Jinja texts instead (builtin_by_type). */
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

/*
 * Model types whose built-in template is a Jinja text. The texts are parsed
 * together, once per process on first use, and shared by every chat_template
 * that falls back on them (never freed).
 */
static struct builtin_jinja {
	const char *text, *what;
	struct jinja_template *parsed;
	int rc;
	struct jinja_error err;
} builtin_jinja[] = {
	{ chat_builtin_deepseek_v32, "DeepSeek-V3.2", NULL, 0, { 0 } },
	{ chat_builtin_deepseek_v4, "DeepSeek-V4", NULL, 0, { 0 } },
	{ chat_builtin_glm5, "GLM-4.7/GLM-5", NULL, 0, { 0 } },
	{ chat_builtin_qwen35, "Qwen3.5", NULL, 0, { 0 } },
	{ chat_builtin_qwen3, "Qwen3", NULL, 0, { 0 } },
};

static const struct {
	const char *type;
	size_t text;	/* index in builtin_jinja */
} builtin_by_type[] = {
	{ "deepseek_v32", 0 },
	{ "deepseek_v4", 1 },
	{ "glm_moe_dsa", 2 },
	{ "qwen3_5_moe", 3 },
	{ "qwen3_5_moe_text", 3 },
	{ "qwen3_next", 4 },	/* Qwen3-Next: the Qwen3 template, tools included */
};

static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;

static void builtin_parse(void)
{
	for (size_t i = 0; i < sizeof builtin_jinja / sizeof builtin_jinja[0]; i++) {
		struct builtin_jinja *b = &builtin_jinja[i];
		b->rc = jinja_template_parse(&b->parsed, b->text, strlen(b->text), &b->err);
	}
}

static int choose(struct chat_template *ct, const char *template_text, const char *model_type, char *err,
		  size_t err_len)
{
	struct jinja_error je;
	int rc;
	if (template_text) {
		rc = jinja_template_parse(&ct->jinja, template_text, strlen(template_text), &je);
		if (rc == 0) {
			ct->family = CHAT_FAMILY_JINJA;
			return 0;
		}
		if (rc == -ENOMEM) {
			chat_set_err(err, err_len, "out of memory");
			return rc;
		}
		char why[sizeof ct->note];
		snprintf(why, sizeof why, "the chat template is outside colibri's Jinja subset (line %d, column %d: %s)",
			 je.line, je.col, je.msg);
		char detail[256] = "";
		if (detect(ct, template_text, model_type, detail, sizeof detail)) {
			chat_set_err(err, err_len, "%s, and no built-in renderer fits: %s", why, detail);
			return -EINVAL;
		}
		snprintf(ct->note, sizeof ct->note, "%s; using the built-in %s renderer", why, chat_family_name(ct->family));
		return 0;
	}
	for (size_t i = 0; model_type && i < sizeof builtin_by_type / sizeof builtin_by_type[0]; i++)
		if (strcmp(model_type, builtin_by_type[i].type) == 0) {
			struct builtin_jinja *b = &builtin_jinja[builtin_by_type[i].text];
			pthread_once(&builtin_once, builtin_parse);
			if (b->rc) {
				chat_set_err(err, err_len, "the built-in %s template: %s", b->what, b->err.msg);
				return b->rc;
			}
			ct->jinja = b->parsed;
			ct->jinja_shared = true;
			ct->family = CHAT_FAMILY_JINJA;
			snprintf(ct->note, sizeof ct->note, "the model has no chat template; using the built-in %s template",
				 b->what);
			return 0;
		}
	if ((rc = detect(ct, NULL, model_type, err, err_len)))
		return rc;
	snprintf(ct->note, sizeof ct->note, "the model has no chat template; using the built-in %s renderer for %s",
		 chat_family_name(ct->family), model_type);
	return 0;
}

int chat_template_init(struct chat_template *ct, const char *template_text, const char *model_type,
		       const char *bos, const char *eos, char *err, size_t err_len)
{
	memset(ct, 0, sizeof(*ct));
	int rc = choose(ct, template_text, model_type, err, err_len);
	if (rc) {
		chat_template_free(ct);
		return rc;
	}
	ct->has_bos = bos != NULL;
	ct->has_eos = eos != NULL;
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
	if (!ct->jinja_shared)
		jinja_template_free(ct->jinja);
	memset(ct, 0, sizeof(*ct));
}


static const struct chat_options defaults = { .add_generation_prompt = true };

/* A C renderer, for conversations of roles and text contents. */
static int render_builtin(const struct chat_template *ct, const struct chat_message *msgs, size_t n,
			  const struct chat_options *opt, char **out, size_t *out_len, char *err, size_t err_len)
{
	struct strbuf b = { 0 };
	int rc;
	if (opt->tools) {
		chat_set_err(err, err_len, "the built-in %s renderer does not support tools", chat_family_name(ct->family));
		return -EINVAL;
	}
	if (opt->kwargs && opt->kwargs->child) {
		chat_set_err(err, err_len, "the built-in %s renderer takes no template keyword arguments ('%s')",
			     chat_family_name(ct->family), opt->kwargs->child->string);
		return -EINVAL;
	}
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
		strbuf_put(&b, "", 0);	/* a NUL-terminated buffer even when empty */
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

int chat_template_render(const struct chat_template *ct, const struct chat_message *msgs, size_t n,
			 const struct chat_options *opt, char **out, size_t *out_len,
			 char *err, size_t err_len)
{
	opt = opt ? opt : &defaults;
	*out = NULL;
	*out_len = 0;
	if (!ct->jinja)
		return render_builtin(ct, msgs, n, opt, out, out_len, err, err_len);
	cJSON *m = chat_messages_json(msgs, n, err, err_len), *tools = NULL;
	if (!m)
		return -ENOMEM;
	if (opt->tools && !cJSON_IsArray(tools = cJSON_Parse(opt->tools))) {
		cJSON_Delete(m);
		cJSON_Delete(tools);
		chat_set_err(err, err_len, "tools is not a JSON array");
		return -EINVAL;
	}
	int rc = chat_jinja_render(ct, m, tools, opt, out, out_len, err, err_len);
	cJSON_Delete(m);
	cJSON_Delete(tools);
	return rc;
}

int chat_template_render_json(const struct chat_template *ct, const cJSON *messages, const cJSON *tools,
			      const struct chat_options *opt, char **out, size_t *out_len, char *err,
			      size_t err_len)
{
	opt = opt ? opt : &defaults;
	*out = NULL;
	*out_len = 0;
	if (!cJSON_IsArray(messages) || (tools && !cJSON_IsArray(tools) && !cJSON_IsNull(tools))) {
		chat_set_err(err, err_len, "messages and tools must be JSON arrays");
		return -EINVAL;
	}
	if (ct->jinja)
		return chat_jinja_render(ct, messages, cJSON_IsNull(tools) ? NULL : tools, opt, out, out_len, err, err_len);
	if (tools && cJSON_GetArraySize(tools) > 0) {
		chat_set_err(err, err_len, "the built-in %s renderer does not support tools", chat_family_name(ct->family));
		return -EINVAL;
	}
	size_t n = (size_t)cJSON_GetArraySize(messages), i = 0;
	struct chat_message *m = calloc(n ? n : 1, sizeof(*m));
	if (!m) {
		chat_set_err(err, err_len, "out of memory");
		return -ENOMEM;
	}
	for (const cJSON *c = messages->child; c; c = c->next, i++) {
		const cJSON *role = cJSON_GetObjectItemCaseSensitive(c, "role");
		const cJSON *content = cJSON_GetObjectItemCaseSensitive(c, "content");
		bool extra = false;
		for (const cJSON *f = c->child; f; f = f->next)
			extra = extra || (strcmp(f->string, "role") && strcmp(f->string, "content"));
		if (!cJSON_IsString(role) || !cJSON_IsString(content) || extra) {
			free(m);
			chat_set_err(err, err_len, "the built-in %s renderer takes messages of a role and a text content only "
				     "(message %zu)", chat_family_name(ct->family), i);
			return -EINVAL;
		}
		m[i] = (struct chat_message){ .role = role->valuestring, .content = content->valuestring };
	}
	int rc = render_builtin(ct, m, n, opt, out, out_len, err, err_len);
	free(m);
	return rc;
}
