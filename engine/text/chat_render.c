/*
 * chat_render — the chat templates of the supported families, in C. Each
 * renderer follows its Jinja template statement by statement (the template's
 * whitespace as rendered with trim_blocks and lstrip_blocks); the comment
 * above it names the template and what it leaves out. bos_token, when the
 * template writes it, is already in the buffer (chat.c).
 *
 * Where a template silently skips a message of an unknown role, we return
 * an error instead: dropping part of a conversation is never what the
 * caller meant.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_internal.h"

void chat_cat(struct strbuf *b, int n, ...)
{
	va_list ap;
	va_start(ap, n);
	for (int i = 0; i < n; i++) {
		const char *s = va_arg(ap, const char *);
		strbuf_put(b, s, strlen(s));
	}
	va_end(ap);
}

static bool is(const struct chat_message *m, const char *role)
{
	return strcmp(m->role, role) == 0;
}

static int bad_role(const struct chat_template *ct, const char *role, char *err, size_t err_len)
{
	chat_set_err(err, err_len, "role \"%s\" is not supported by the %s chat template", role,
		     chat_family_name(ct->family));
	return -EINVAL;
}

/* A byte range [s, e) of a message, for the Python string methods below. */
struct span {
	const char *s, *e;
};

static struct span lstrip_nl(struct span x)
{
	while (x.s < x.e && *x.s == '\n')
		x.s++;
	return x;
}

static struct span rstrip_nl(struct span x)
{
	while (x.e > x.s && x.e[-1] == '\n')
		x.e--;
	return x;
}

/* Start of the last occurrence of needle in x, or NULL. */
static const char *last_in(struct span x, const char *needle)
{
	size_t k = strlen(needle);
	const char *last = NULL;
	for (const char *p = x.s; p + k <= x.e; p++)
		if (memcmp(p, needle, k) == 0)
			last = p;
	return last;
}

static void put_span(struct strbuf *b, struct span x)
{
	strbuf_put(b, x.s, (size_t)(x.e - x.s));
}

/*
 * The reasoning and the answer of an assistant turn's content, as Qwen3's
 * and GLM's templates split them: when there is a </think>,
 *   reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
 *   content   = content.split('</think>')[-1].lstrip('\n')
 * else the reasoning is empty and the content whole.
 */
static void think_split(const char *c, struct span *content, struct span *reasoning)
{
	*content = (struct span){ c, c + strlen(c) };
	*reasoning = (struct span){ c, c };
	const char *end_think = strstr(c, "</think>");
	if (!end_think)
		return;
	content->s = last_in(*content, "</think>") + 8;
	*content = lstrip_nl(*content);
	*reasoning = rstrip_nl((struct span){ c, end_think });
	const char *open = last_in(*reasoning, "<think>");
	if (open)
		reasoning->s = open + 7;
	*reasoning = lstrip_nl(*reasoning);
}

/*
 * Byte length of the character starting at p (at most n bytes of UTF-8)
 * when Python's str.isspace() holds for it, else 0: ASCII \t-\r, \x1c-\x1f
 * and space, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F,
 * U+205F and U+3000.
 */
static size_t py_space_len(const char *p, size_t n)
{
	const unsigned char *u = (const unsigned char *)p;
	if (n >= 1 && ((u[0] >= 0x09 && u[0] <= 0x0d) || (u[0] >= 0x1c && u[0] <= 0x20)))
		return 1;
	if (n >= 2 && u[0] == 0xc2 && (u[1] == 0x85 || u[1] == 0xa0))
		return 2;
	if (n < 3)
		return 0;
	if ((u[0] == 0xe1 && u[1] == 0x9a && u[2] == 0x80) || (u[0] == 0xe3 && u[1] == 0x80 && u[2] == 0x80))
		return 3;
	if (u[0] == 0xe2 && u[1] == 0x80 &&
	    ((u[2] >= 0x80 && u[2] <= 0x8a) || u[2] == 0xa8 || u[2] == 0xa9 || u[2] == 0xaf))
		return 3;
	if (u[0] == 0xe2 && u[1] == 0x81 && u[2] == 0x9f)
		return 3;
	return 0;
}

/* Python's str.strip() with no argument: Unicode whitespace on both ends. */
static struct span py_strip(struct span x)
{
	for (size_t k; x.s < x.e && (k = py_space_len(x.s, (size_t)(x.e - x.s))) > 0;)
		x.s += k;
	for (bool more = true; more;) {
		more = false;
		for (size_t k = 1; k <= 3 && !more; k++)
			if ((size_t)(x.e - x.s) >= k && py_space_len(x.e - k, k) == k) {
				x.e -= k;
				more = true;
			}
	}
	return x;
}

/* User turns that wrap a tool response do not count as the last query. */
static bool is_query(const struct chat_message *m)
{
	size_t n = strlen(m->content);
	return is(m, "user") && !(strncmp(m->content, "<tool_response>", 15) == 0 && n >= 16 &&
				  strcmp(m->content + n - 16, "</tool_response>") == 0);
}

/*
 * Qwen3 (Qwen3-30B-A3B / Qwen3-235B-A22B tokenizer_config.json): ChatML;
 * an assistant turn after the last user query shows its reasoning in a
 * <think> block, earlier ones lose it. Not implemented: tools / tool_calls
 * and the reasoning_content field (reasoning is parsed from the content).
 */
int chat_render_qwen3(const struct chat_template *ct, struct strbuf *b, const struct chat_message *m,
		      size_t n, const struct chat_options *opt, char *err, size_t err_len)
{
	size_t last_query = n ? n - 1 : 0;
	for (size_t i = n; i-- > 0;)
		if (is_query(&m[i])) {
			last_query = i;
			break;
		}
	if (n > 0 && is(&m[0], "system"))
		chat_cat(b, 3, "<|im_start|>system\n", m[0].content, "<|im_end|>\n");
	for (size_t i = 0; i < n; i++) {
		const char *c = m[i].content;
		if (is(&m[i], "user") || (is(&m[i], "system") && i > 0)) {
			chat_cat(b, 5, "<|im_start|>", m[i].role, "\n", c, "<|im_end|>\n");
		} else if (is(&m[i], "assistant")) {
			struct span content, reasoning;
			think_split(c, &content, &reasoning);
			chat_cat(b, 1, "<|im_start|>assistant\n");
			if (i > last_query && (i == n - 1 || reasoning.e > reasoning.s)) {
				chat_cat(b, 1, "<think>\n");
				put_span(b, rstrip_nl(lstrip_nl(reasoning)));
				chat_cat(b, 1, "\n</think>\n\n");
				content = lstrip_nl(content);
			}
			put_span(b, content);
			chat_cat(b, 1, "<|im_end|>\n");
		} else if (is(&m[i], "tool")) {
			if (i == 0 || !is(&m[i - 1], "tool"))
				chat_cat(b, 1, "<|im_start|>user");
			chat_cat(b, 3, "\n<tool_response>\n", c, "\n</tool_response>");
			if (i == n - 1 || !is(&m[i + 1], "tool"))
				chat_cat(b, 1, "<|im_end|>\n");
		} else if (!is(&m[i], "system")) {
			return bad_role(ct, m[i].role, err, err_len);
		}
	}
	if (opt->add_generation_prompt) {
		chat_cat(b, 1, "<|im_start|>assistant\n");
		if (ct->variant & CHAT_VARIANT_QWEN3_OPEN_THINK)
			chat_cat(b, 1, "<think>\n");
		else if ((ct->variant & CHAT_VARIANT_QWEN3_NO_THINK) && opt->no_thinking)
			chat_cat(b, 1, "<think>\n\n</think>\n\n");
	}
	return 0;
}

/*
 * Plain ChatML (Qwen1.5 / Qwen2-MoE style): every message as
 * <|im_start|>role\ncontent<|im_end|>\n, the template's default system
 * prompt first when the conversation has none. Templates that mention
 * tools format tool turns their own way, which is not implemented.
 */
int chat_render_chatml(const struct chat_template *ct, struct strbuf *b, const struct chat_message *m,
		       size_t n, const struct chat_options *opt, char *err, size_t err_len)
{
	for (size_t i = 0; i < n; i++)
		if ((ct->variant & CHAT_VARIANT_CHATML_NO_TOOL) && is(&m[i], "tool"))
			return bad_role(ct, m[i].role, err, err_len);
	for (size_t i = 0; i < n; i++) {
		if (i == 0 && ct->default_system && !is(&m[0], "system"))
			chat_cat(b, 3, "<|im_start|>system\n", ct->default_system, "<|im_end|>\n");
		chat_cat(b, 5, "<|im_start|>", m[i].role, "\n", m[i].content, "<|im_end|>\n");
	}
	if (opt->add_generation_prompt)
		chat_cat(b, 1, "<|im_start|>assistant\n");
	return 0;
}

/*
 * OLMoE-1B-7B-0924-Instruct (the Tulu 2 template): "<|role|>\ncontent\n",
 * assistant turns end with eos_token. The Tulu 3 / OLMo 2 variant omits the
 * newline after a final assistant turn.
 */
int chat_render_tulu(const struct chat_template *ct, struct strbuf *b, const struct chat_message *m,
		     size_t n, const struct chat_options *opt, char *err, size_t err_len)
{
	for (size_t i = 0; i < n; i++) {
		const char *c = m[i].content;
		if (is(&m[i], "system")) {
			chat_cat(b, 3, "<|system|>\n", c, "\n");
		} else if (is(&m[i], "user")) {
			chat_cat(b, 3, "<|user|>\n", c, "\n");
		} else if (is(&m[i], "assistant")) {
			chat_cat(b, 3, "<|assistant|>\n", c, ct->eos);
			if (!(ct->variant & CHAT_VARIANT_TULU3) || i + 1 < n)
				chat_cat(b, 1, "\n");
		} else {
			return bad_role(ct, m[i].role, err, err_len);
		}
		if (i + 1 == n && opt->add_generation_prompt)
			chat_cat(b, 1, "<|assistant|>\n");
	}
	return 0;
}

/*
 * Mixtral-8x7B-Instruct-v0.1: [INST] turns that must alternate user /
 * assistant. The current template takes an optional leading system message
 * into the first [INST] and puts a space before each turn; the original one
 * accepts no system message. Neither has a generation prompt: the prompt
 * ends with [/INST].
 */
int chat_render_mistral(const struct chat_template *ct, struct strbuf *b, const struct chat_message *m,
			size_t n, char *err, size_t err_len)
{
	bool sys_variant = ct->variant & CHAT_VARIANT_MISTRAL_SYSTEM;
	const char *sys = NULL;
	size_t start = 0;
	if (sys_variant && n > 0 && is(&m[0], "system")) {
		sys = m[0].content;
		start = 1;
	}
	for (size_t i = start; i < n; i++) {
		size_t k = i - start;
		if (is(&m[i], "user") != (k % 2 == 0)) {
			chat_set_err(err, err_len, sys_variant
				? "After the optional system message, conversation roles must alternate user/assistant/user/assistant/..."
				: "Conversation roles must alternate user/assistant/user/assistant/...");
			return -EINVAL;
		}
		if (is(&m[i], "user")) {
			const char *lead = sys_variant ? " [INST] " : "[INST] ";
			if (k == 0 && sys)
				chat_cat(b, 5, lead, sys, "\n\n", m[i].content, " [/INST]");
			else
				chat_cat(b, 3, lead, m[i].content, " [/INST]");
		} else if (is(&m[i], "assistant")) {
			chat_cat(b, 3, sys_variant ? " " : "", m[i].content, ct->eos);
		} else {
			chat_set_err(err, err_len, sys_variant
				? "Only user and assistant roles are supported, with the exception of an initial optional system message!"
				: "Only user and assistant roles are supported!");
			return -EINVAL;
		}
	}
	return 0;
}

#define FW_BAR "\xEF\xBD\x9C"	/* U+FF5C FULLWIDTH VERTICAL LINE */
#define LOW_BLOCK "\xE2\x96\x81"	/* U+2581 LOWER ONE EIGHTH BLOCK */

/*
 * DeepSeek-V3: bos, all system messages joined by "\n\n", then
 * <｜User｜>... and <｜Assistant｜>...<｜end▁of▁sentence｜> turns; tool
 * outputs are wrapped in the tool-output markers. Not implemented: the
 * assistant tool_calls form (assistant content none).
 */
int chat_render_deepseek_v3(const struct chat_template *ct, struct strbuf *b,
			    const struct chat_message *m, size_t n, const struct chat_options *opt,
			    char *err, size_t err_len)
{
	static const char eos[] = "<" FW_BAR "end" LOW_BLOCK "of" LOW_BLOCK "sentence" FW_BAR ">";
	bool first_sys = true, is_tool = false, output_first = true;
	for (size_t i = 0; i < n; i++)
		if (is(&m[i], "system")) {
			chat_cat(b, 2, first_sys ? "" : "\n\n", m[i].content);
			first_sys = false;
		}
	for (size_t i = 0; i < n; i++) {
		const char *c = m[i].content;
		if (is(&m[i], "user")) {
			is_tool = false;
			chat_cat(b, 2, "<" FW_BAR "User" FW_BAR ">", c);
		} else if (is(&m[i], "assistant")) {
			if (is_tool)
				chat_cat(b, 3, "<" FW_BAR "tool" LOW_BLOCK "outputs" LOW_BLOCK "end" FW_BAR ">", c, eos);
			else
				chat_cat(b, 3, "<" FW_BAR "Assistant" FW_BAR ">", c, eos);
			is_tool = false;
		} else if (is(&m[i], "tool")) {
			is_tool = true;
			chat_cat(b, 3, output_first ? "<" FW_BAR "tool" LOW_BLOCK "outputs" LOW_BLOCK "begin" FW_BAR
							"><" FW_BAR "tool" LOW_BLOCK "output" LOW_BLOCK "begin" FW_BAR ">"
						    : "\n<" FW_BAR "tool" LOW_BLOCK "output" LOW_BLOCK "begin" FW_BAR ">",
				 c, "<" FW_BAR "tool" LOW_BLOCK "output" LOW_BLOCK "end" FW_BAR ">");
			output_first = false;
		} else if (!is(&m[i], "system")) {
			return bad_role(ct, m[i].role, err, err_len);
		}
	}
	if (is_tool)
		chat_cat(b, 1, "<" FW_BAR "tool" LOW_BLOCK "outputs" LOW_BLOCK "end" FW_BAR ">");
	if (opt->add_generation_prompt && !is_tool)
		chat_cat(b, 1, "<" FW_BAR "Assistant" FW_BAR ">");
	return 0;
}

/*
 * GLM-4.5 / GLM-4.6 (zai-org's chat_template.jinja; also llama.cpp's
 * models/templates/glm_4_5.jinja and GLM-4.6.jinja): "[gMASK]<sop>", then
 * turns with no separator between them. Each assistant turn opens with a
 * think block that holds its reasoning (split from the content; the
 * message has no reasoning_content field) only when it follows the last
 * user turn, and is empty otherwise; its content is stripped of
 * whitespace. enable_thinking=false appends /nothink to each user turn
 * that lacks it and an empty think block to the generation prompt. Not
 * implemented: tool definitions and assistant tool_calls.
 */
int chat_render_glm4(const struct chat_template *ct, struct strbuf *b, const struct chat_message *m,
		     size_t n, const struct chat_options *opt, char *err, size_t err_len)
{
	size_t after_last_user = 0;	/* loop.index0 > ns.last_user_index <=> i >= after_last_user */
	for (size_t i = 0; i < n; i++)
		if (is(&m[i], "user"))
			after_last_user = i + 1;
	chat_cat(b, 1, "[gMASK]<sop>");
	for (size_t i = 0; i < n; i++) {
		const char *c = m[i].content;
		if (is(&m[i], "user")) {
			size_t len = strlen(c);
			bool has_nothink = len >= 8 && strcmp(c + len - 8, "/nothink") == 0;
			chat_cat(b, 3, "<|user|>", (ct->variant & CHAT_VARIANT_GLM_USER_NL) ? "\n" : "", c);
			if (opt->no_thinking && !has_nothink)
				chat_cat(b, 1, "/nothink");
		} else if (is(&m[i], "assistant")) {
			struct span content, reasoning;
			think_split(c, &content, &reasoning);
			chat_cat(b, 1, "<|assistant|>\n<think>");
			if (i >= after_last_user)
				put_span(b, py_strip(reasoning));
			chat_cat(b, 1, "</think>");
			content = py_strip(content);
			if (content.e > content.s) {
				chat_cat(b, 1, "\n");
				put_span(b, content);
			}
		} else if (is(&m[i], "tool")) {
			if (i == 0 || !is(&m[i - 1], "tool"))
				chat_cat(b, 1, "<|observation|>");
			chat_cat(b, 3, "\n<tool_response>\n", c, "\n</tool_response>");
		} else if (is(&m[i], "system")) {
			chat_cat(b, 2, "<|system|>\n", c);
		} else {
			return bad_role(ct, m[i].role, err, err_len);
		}
	}
	if (opt->add_generation_prompt)
		chat_cat(b, 2, "<|assistant|>", opt->no_thinking ? "\n<think></think>" : "");
	return 0;
}
