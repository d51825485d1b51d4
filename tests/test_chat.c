/*
 * test_chat — chat templates (engine/text/chat*.c) rendered through the Jinja
 * subset and through the built-in renderers, against references that are
 * never our own output:
 *   - released_templates: every template of tests/chat_templates/ (Qwen3,
 *     Qwen1.5-MoE, DeepSeek-V3, DeepSeek-V3.1, our DeepSeek-V3.2 and
 *     DeepSeek-V4 renderings of their encoding scripts, OLMoE, Tulu 3, Mixtral current and original,
 *     GLM-4.5 (llama.cpp's copy), GLM-4.6, GLM-4.7, GLM-4.7-Flash, Qwen3.5; sources in
 *     tests/chat_templates/README.md) on the conversations of
 *     tests/chat_templates/expected.json: system and user turns, multi-turn,
 *     tool definitions, tool calls (object and JSON-string arguments) and
 *     results, reasoning_content and reasoning inside the content,
 *     enable_thinking=false, with and without the generation prompt, and for
 *     Qwen3.5 content parts (text, images, videos, add_vision_id), explicit
 *     enable_thinking=true and the conversations it refuses; the
 *     expected texts and errors are Jinja2 3.1's under Hugging Face's
 *     settings (tools/jinja_fixtures.py), and for DeepSeek-V3.2 and
 *     DeepSeek-V4 their vendor's encode_messages(); for DeepSeek-V4 also
 *     tool results out of call order, latest_reminder, tasks, a prefilled
 *     turn, response_format, reasoning_effort and the thinking switch;
 *   - the same role-and-content conversations through the npm package
 *     @lenml/tokenizers (tools/tokenizer_ref.js) for DeepSeek-V3 with the
 *     real tokenizer_config.json, OLMoE (Tulu 2), Tulu 3, Mixtral-Instruct
 *     (current and original) and Qwen1.5-style ChatML; and Qwen3 with the
 *     real tokenizer_config.json, whose template the package cannot parse:
 *     there the expected strings below were derived by hand and checked
 *     once with Python's Jinja2 3.1 under Hugging Face's settings. Each
 *     family is rendered twice: by the Jinja subset from the template, and
 *     by its built-in C renderer (the template with a tag outside the
 *     subset appended, so that it falls back);
 *   - GLM-4.5 / GLM-4.6: expected strings rendered once with Jinja2 3.1.6
 *     from llama.cpp's models/templates/GLM-4.6.jinja and glm_4_5.jinja,
 *     through the Jinja subset and through the built-in renderer chosen by
 *     model_type glm4_moe;
 *   - the choice of renderer: the model's template when the subset parses
 *     it, a built-in one otherwise with a note saying so, the built-in
 *     Jinja texts for deepseek_v32, deepseek_v4, glm_moe_dsa,
 *     qwen3_5_moe(_text) and qwen3_next (the same bytes as their files, rendering every case of
 *     those files as Jinja2 does), errors for what fits nothing, the built-in renderers refusing
 *     tools and unknown roles;
 *   - DeepSeek-V4's generation prompt as its script ends it: <｜Assistant｜><think>
 *     thinking, <｜Assistant｜></think> with thinking off, and reasoning_effort "max".
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>

#include "tests/node_ref.h"
#include "tests/chat_fixtures.h"
#include "tests/cli_util.h"
#include "tests/test_util.h"
#include "engine/text/chat.h"
#include "engine/text/chat_internal.h"
#include "engine/text/tokenizer.h"

struct conv {
	const char *name;
	struct chat_message m[6];
	size_t n;
	bool gen, no_thinking;
	const char *expected;	/* Qwen3's, hand-derived; used only when the reference cannot render */
};

/* A family under test: template text (NULL = the tokenizer's own), bos and eos strings. */
struct family {
	const char *pkg;	/* tokenizer package giving the model dir */
	const char *tmpl;
	const char *bos, *eos;
	bool hand_derived;	/* conv.expected holds this family's output */
};

static void compare(const struct family *f, const struct conv *cv, size_t n_conv)
{
	char dir[PATH_MAX], err[512] = "";
	node_ref_require(f->pkg);
	node_ref_model_dir(dir, sizeof(dir), f->pkg);
	struct tokenizer *tok;
	cr_assert_eq(tokenizer_load(&tok, dir, err, sizeof(err)), 0, "%s", err);
	const char *tmpl = f->tmpl ? f->tmpl : tokenizer_chat_template(tok);
	const char *bos = f->bos ? f->bos : tokenizer_bos_token(tok);
	const char *eos = f->eos ? f->eos : tokenizer_eos_token(tok);
	/* the template through the Jinja subset, then through its built-in renderer: a tag
	 * outside the subset appended makes chat_template_init fall back on the same text */
	struct chat_template cts[2];
	char *fallback = malloc(strlen(tmpl) + 64);
	sprintf(fallback, "%s{%% include 'not in the subset' %%}", tmpl);
	cr_assert_eq(chat_template_init(&cts[0], tmpl, NULL, bos, eos, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(cts[0].family, CHAT_FAMILY_JINJA);
	cr_expect_str_eq(cts[0].note, "");
	cr_assert_eq(chat_template_init(&cts[1], fallback, NULL, bos, eos, err, sizeof(err)), 0, "%s", err);
	cr_assert_neq(cts[1].family, CHAT_FAMILY_JINJA);
	cr_expect(strstr(cts[1].note, "outside colibri's Jinja subset") && strstr(cts[1].note, "include"), "%s",
		  cts[1].note);
	free(fallback);

	cJSON *req = cJSON_CreateObject(), *chats = cJSON_AddArrayToObject(req, "chat");
	cJSON_AddStringToObject(req, "model_dir", dir);
	for (size_t i = 0; i < n_conv; i++) {
		cJSON *c = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(c, "messages");
		cJSON *kw = cJSON_AddObjectToObject(c, "kwargs");
		for (size_t k = 0; k < cv[i].n; k++) {
			cJSON *m = cJSON_CreateObject();
			cJSON_AddStringToObject(m, "role", cv[i].m[k].role);
			cJSON_AddStringToObject(m, "content", cv[i].m[k].content);
			cJSON_AddItemToArray(msgs, m);
		}
		cJSON_AddBoolToObject(c, "add_generation_prompt", cv[i].gen);
		if (f->tmpl)
			cJSON_AddStringToObject(c, "chat_template", f->tmpl);
		if (bos)
			cJSON_AddStringToObject(kw, "bos_token", bos);
		if (eos)
			cJSON_AddStringToObject(kw, "eos_token", eos);
		if (cv[i].no_thinking)
			cJSON_AddFalseToObject(kw, "enable_thinking");
		cJSON_AddItemToArray(chats, c);
	}
	cJSON *res = node_ref_run(req);
	for (int k = 0; k < 2; k++) {
		const struct chat_template *ct = &cts[k];
		size_t by_ref = 0, by_hand = 0, rejected = 0;
		for (size_t i = 0; i < n_conv; i++) {
			const cJSON *ref = cJSON_GetArrayItem(cJSON_GetObjectItem(res, "chat"), (int)i);
			const char *ref_text = cJSON_GetStringValue(cJSON_GetObjectItem(ref, "text"));
			const char *ref_err = cJSON_GetStringValue(cJSON_GetObjectItem(ref, "error"));
			struct chat_options opt = { .add_generation_prompt = cv[i].gen, .no_thinking = cv[i].no_thinking };
			char *out = NULL;
			size_t len;
			err[0] = 0;
			int rc = chat_template_render(ct, cv[i].m, cv[i].n, &opt, &out, &len, err, sizeof(err));
			by_ref += ref_text != NULL;
			by_hand += !ref_text && f->hand_derived && cv[i].expected;
			rejected += !ref_text && !(f->hand_derived && cv[i].expected);
			const char *how = k ? "built-in" : "jinja";
			if (ref_text) {
				cr_expect_eq(rc, 0, "%s (%s): we fail (%s) where the reference renders", cv[i].name, how, err);
				if (rc == 0)
					cr_expect_str_eq(out, ref_text, "%s (%s): rendering differs from the reference", cv[i].name, how);
			} else if (f->hand_derived && cv[i].expected) {
				cr_expect_eq(rc, 0, "%s (%s): %s", cv[i].name, how, err);
				if (rc == 0)
					cr_expect_str_eq(out, cv[i].expected, "%s (%s): rendering differs from the template", cv[i].name,
							 how);
			} else {
				cr_expect_eq(rc, -EINVAL, "%s (%s): the reference fails (%s) but we render", cv[i].name, how, ref_err);
				cr_expect_str_eq(err, ref_err ? ref_err : "", "%s (%s): error message differs", cv[i].name, how);
			}
			if (rc == 0)
				cr_expect_eq(strlen(out), len);
			free(out);
		}
		fprintf(stderr, "%s (%s): %zu conversations match the reference renderer, %zu the hand-derived text, "
			"%zu rejected with the template's message\n", chat_family_name(cts[1].family), k ? "built-in" : "jinja",
			by_ref, by_hand, rejected);
	}
	cJSON_Delete(res);
	cJSON_Delete(req);
	chat_template_free(&cts[0]);
	chat_template_free(&cts[1]);
	tokenizer_free(tok);
}

#define SYS_USER { { "system", "You are a helpful assistant." }, { "user", "What is 2+2?" } }, 2
#define USER_ONLY { { "user", "Hello!" } }, 1
#define MULTI { { "user", "Hi" }, { "assistant", "Hello! How can I help?" }, { "user", "Tell me a joke." } }, 3
#define SYS_MULTI { { "system", "Be brief." }, { "user", "Hi" }, { "assistant", "Hello." } }, 3

/* The conversations every family renders; Qwen3's hand-derived outputs alongside. */
static const struct conv common[] = {
	{ "system+user", SYS_USER, true, false,
	  "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
	  "<|im_start|>assistant\n" },
	{ "user only", USER_ONLY, true, false, "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n" },
	{ "multi-turn", MULTI, true, false,
	  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
	  "<|im_start|>user\nTell me a joke.<|im_end|>\n<|im_start|>assistant\n" },
	{ "system multi-turn, no generation prompt", SYS_MULTI, false, false,
	  /* the final assistant turn follows the last query: Qwen3 gives it an empty think block */
	  "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
	  "<|im_start|>assistant\n<think>\n\n</think>\n\nHello.<|im_end|>\n" },
	{ "user only, no generation prompt", USER_ONLY, false, false, "<|im_start|>user\nHello!<|im_end|>\n" },
};
#define N_COMMON (sizeof(common) / sizeof(common[0]))

Test(chat, qwen3)
{
	static const struct conv extra[] = {
		{ "reasoning in history is dropped",
		  { { "user", "Q1" }, { "assistant", "<think>\nplan\n</think>\n\nA1" }, { "user", "Q2" } }, 3, true, false,
		  "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
		  "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n" },
		{ "reasoning after the last query is kept",
		  { { "user", "Q" }, { "assistant", "<think>\n\nplan\n\n</think>\n\n\nA" } }, 2, false, false,
		  "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nplan\n</think>\n\nA<|im_end|>\n" },
		{ "enable_thinking=false", USER_ONLY, true, true,
		  "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n" },
		{ "later system message",
		  { { "user", "Hi" }, { "system", "Switch to French." }, { "user", "Bonjour" } }, 3, true, false,
		  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nSwitch to French.<|im_end|>\n"
		  "<|im_start|>user\nBonjour<|im_end|>\n<|im_start|>assistant\n" },
		{ "tool results",
		  { { "user", "Weather?" }, { "assistant", "Let me check." }, { "tool", "{\"temp\": 20}" },
		    { "tool", "{\"wind\": 5}" } }, 4, true, false,
		  "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\nLet me check.<|im_end|>\n"
		  "<|im_start|>user\n<tool_response>\n{\"temp\": 20}\n</tool_response>\n<tool_response>\n"
		  "{\"wind\": 5}\n</tool_response><|im_end|>\n<|im_start|>assistant\n" },
	};
	struct family f = { "tokenizer-qwen3", NULL, NULL, NULL, true };
	compare(&f, common, N_COMMON);
	compare(&f, extra, sizeof(extra) / sizeof(extra[0]));
}

Test(chat, deepseek_v3)
{
	static const struct conv extra[] = {
		{ "two system messages", { { "system", "A." }, { "user", "Hi" }, { "system", "B." } }, 3, true, false, NULL },
		{ "tool outputs", { { "user", "Weather?" }, { "tool", "sunny" }, { "tool", "20C" } }, 3, true, false, NULL },
		{ "answer after tool outputs",
		  { { "user", "Weather?" }, { "tool", "sunny" }, { "assistant", "It is sunny." }, { "user", "Thanks" } },
		  4, true, false, NULL },
	};
	struct family f = { "tokenizer-deepseek_v3", NULL, NULL, NULL, false };
	compare(&f, common, N_COMMON);
	compare(&f, extra, sizeof(extra) / sizeof(extra[0]));
}

/* Renders each conversation with ct and checks it against cv[i].expected. */
static void expect_renders(const struct chat_template *ct, const struct conv *cv, size_t n_conv)
{
	for (size_t i = 0; i < n_conv; i++) {
		struct chat_options opt = { .add_generation_prompt = cv[i].gen, .no_thinking = cv[i].no_thinking };
		char err[256] = "", *out = NULL;
		size_t len;
		int rc = chat_template_render(ct, cv[i].m, cv[i].n, &opt, &out, &len, err, sizeof(err));
		cr_expect_eq(rc, 0, "%s: %s", cv[i].name, err);
		if (rc == 0) {
			cr_expect_str_eq(out, cv[i].expected, "%s: rendering differs from the template", cv[i].name);
			cr_expect_eq(strlen(out), len);
		}
		free(out);
	}
}

Test(chat, glm4)
{
	static const struct conv glm46[] = {
		{ "system+user", SYS_USER, true, false,
		  "[gMASK]<sop><|system|>\nYou are a helpful assistant.<|user|>\nWhat is 2+2?<|assistant|>" },
		{ "user only", USER_ONLY, true, false, "[gMASK]<sop><|user|>\nHello!<|assistant|>" },
		{ "multi-turn", MULTI, true, false,
		  "[gMASK]<sop><|user|>\nHi<|assistant|>\n<think></think>\nHello! How can I help?<|user|>\n"
		  "Tell me a joke.<|assistant|>" },
		{ "system multi-turn, no generation prompt", SYS_MULTI, false, false,
		  "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi<|assistant|>\n<think></think>\nHello." },
		{ "user only, no generation prompt", USER_ONLY, false, false, "[gMASK]<sop><|user|>\nHello!" },
		{ "reasoning in history is dropped",
		  { { "user", "Q1" }, { "assistant", "<think>\nplan\n</think>\n\nA1" }, { "user", "Q2" } }, 3, true, false,
		  "[gMASK]<sop><|user|>\nQ1<|assistant|>\n<think></think>\nA1<|user|>\nQ2<|assistant|>" },
		{ "reasoning after the last user turn is kept, stripped",
		  { { "user", "Q" }, { "assistant", "<think>\n\n plan \n\n</think>\n\n\nA" } }, 2, false, false,
		  "[gMASK]<sop><|user|>\nQ<|assistant|>\n<think>plan</think>\nA" },
		{ "whitespace around assistant content",
		  { { "user", "Hi" }, { "assistant", " \n Hello there \t\n" }, { "user", "Again" } }, 3, true, false,
		  "[gMASK]<sop><|user|>\nHi<|assistant|>\n<think></think>\nHello there<|user|>\nAgain<|assistant|>" },
		{ "empty system, empty assistant", { { "system", "" }, { "user", "Hi" }, { "assistant", "" } }, 3, false, false,
		  "[gMASK]<sop><|system|>\n<|user|>\nHi<|assistant|>\n<think></think>" },
		/* U+3000 and U+00A0 are whitespace to Python's str.strip() */
		{ "unicode",
		  { { "system", "Réponds en français." }, { "user", "日本語で？ 🙂" },
		    { "assistant", "<think>考える\xE3\x80\x80</think>\xC2\xA0はい。\xE3\x80\x80" } }, 3, false, false,
		  "[gMASK]<sop><|system|>\nRéponds en français.<|user|>\n日本語で？ 🙂<|assistant|>\n<think>考える</think>\nはい。" },
		{ "enable_thinking=false", USER_ONLY, true, true,
		  "[gMASK]<sop><|user|>\nHello!/nothink<|assistant|>\n<think></think>" },
		{ "enable_thinking=false, multi-turn",
		  { { "user", "Hi" }, { "assistant", "Hello." }, { "user", "Joke? /nothink" } }, 3, true, true,
		  "[gMASK]<sop><|user|>\nHi/nothink<|assistant|>\n<think></think>\nHello.<|user|>\nJoke? /nothink"
		  "<|assistant|>\n<think></think>" },
		{ "tool results",
		  { { "user", "Weather?" }, { "assistant", "Let me check." }, { "tool", "{\"temp\": 20}" },
		    { "tool", "{\"wind\": 5}" } }, 4, true, false,
		  "[gMASK]<sop><|user|>\nWeather?<|assistant|>\n<think></think>\nLet me check.<|observation|>\n"
		  "<tool_response>\n{\"temp\": 20}\n</tool_response>\n<tool_response>\n{\"wind\": 5}\n</tool_response>"
		  "<|assistant|>" },
		{ "no user turn: the reasoning is kept; split at the first and last </think>",
		  { { "system", "S" }, { "assistant", "a<think>r1</think>b</think>\nc" } }, 2, false, false,
		  "[gMASK]<sop><|system|>\nS<|assistant|>\n<think>r1</think>\nc" },
	};
	/* llama.cpp's glm_4_5.jinja: no newline after <|user|> */
	static const struct conv glm45_llama[] = {
		{ "system+user", SYS_USER, true, false,
		  "[gMASK]<sop><|system|>\nYou are a helpful assistant.<|user|>What is 2+2?<|assistant|>" },
		{ "multi-turn", MULTI, true, false,
		  "[gMASK]<sop><|user|>Hi<|assistant|>\n<think></think>\nHello! How can I help?<|user|>"
		  "Tell me a joke.<|assistant|>" },
		{ "enable_thinking=false, multi-turn",
		  { { "user", "Hi" }, { "assistant", "Hello." }, { "user", "Joke? /nothink" } }, 3, true, true,
		  "[gMASK]<sop><|user|>Hi/nothink<|assistant|>\n<think></think>\nHello.<|user|>Joke? /nothink"
		  "<|assistant|>\n<think></think>" },
	};
	struct chat_template ct;
	char err[512] = "";
	/* the built-in renderer for model_type glm4_moe */
	cr_assert_eq(chat_template_init(&ct, NULL, "glm4_moe", "", "<|endoftext|>", err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(ct.family, CHAT_FAMILY_GLM4);
	cr_expect(strstr(ct.note, "no chat template") && strstr(ct.note, "glm4"), "%s", ct.note);
	expect_renders(&ct, glm46, sizeof(glm46) / sizeof(glm46[0]));
	chat_template_free(&ct);

	/* the released templates through the Jinja subset, and through the built-in renderer they fall back to */
	static const struct {
		const char *file;
		const struct conv *cv;
		size_t n;
	} files[] = { { "glm-4.6.jinja", glm46, sizeof(glm46) / sizeof(glm46[0]) },
		      { "glm-4.5-llama.cpp.jinja", glm45_llama, sizeof(glm45_llama) / sizeof(glm45_llama[0]) } };
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		char *tmpl = chat_fixture_template(files[i].file), *fallback = malloc(strlen(tmpl) + 32);
		sprintf(fallback, "%s{%% import 'x' as y %%}", tmpl);
		cr_assert_eq(chat_template_init(&ct, tmpl, NULL, NULL, "<|endoftext|>", err, sizeof(err)), 0, "%s", err);
		cr_expect_eq(ct.family, CHAT_FAMILY_JINJA);
		expect_renders(&ct, files[i].cv, files[i].n);
		chat_template_free(&ct);
		cr_assert_eq(chat_template_init(&ct, fallback, NULL, NULL, "<|endoftext|>", err, sizeof(err)), 0, "%s", err);
		cr_expect_eq(ct.family, CHAT_FAMILY_GLM4, "%s", files[i].file);
		expect_renders(&ct, files[i].cv, files[i].n);
		struct chat_message m[2] = { { "user", "hi" }, { "observer", "x" } };
		char *out = (char *)&out;
		size_t len;
		cr_expect_eq(chat_template_render(&ct, m, 2, NULL, &out, &len, err, sizeof(err)), -EINVAL);
		cr_expect_null(out);
		cr_expect(strstr(err, "observer") && strstr(err, "glm4"), "%s", err);
		chat_template_free(&ct);
		free(tmpl);
		free(fallback);
	}

	/* GLM-4.7 / GLM-5 turns are not GLM-4.5's: outside the subset such a template is refused, not guessed */
	cr_expect_eq(chat_template_init(&ct, "[gMASK]<sop><|system|>{{ c }}<|user|>{{ c }}<|assistant|>{{ '</think>' }}"
					"<|assistant|>{{ '<think>' }}{% extends 'x' %}", NULL, NULL, NULL, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "[gMASK]<sop>") && strstr(err, "GLM-4.7") && strstr(err, "line 1"), "%s", err);
	/* GLM-5 checkpoints without a template get GLM-4.7's, as a built-in Jinja text */
	cr_assert_eq(chat_template_init(&ct, NULL, "glm_moe_dsa", NULL, "<|endoftext|>", err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(ct.family, CHAT_FAMILY_JINJA);
	cr_expect(strstr(ct.note, "GLM-4.7/GLM-5"), "%s", ct.note);
	char *out;
	size_t len;
	struct chat_message m[1] = { { "user", "Hello!" } };
	cr_assert_eq(chat_template_render(&ct, m, 1, NULL, &out, &len, err, sizeof(err)), 0, "%s", err);
	cr_expect_str_eq(out, "[gMASK]<sop><|user|>Hello!<|assistant|><think>");	/* Jinja2 3.1.6 on glm-4.7.jinja */
	free(out);
	chat_template_free(&ct);
}

/* OLMoE-1B-7B-0924-Instruct's template (the Tulu 2 format of open-instruct). */
static const char olmoe_template[] =
	"{{ bos_token }}{% for message in messages %}\n{% if message['role'] == 'system' %}\n"
	"{{ '<|system|>\\n' + message['content'] }}\n{% elif message['role'] == 'user' %}\n"
	"{{ '<|user|>\\n' + message['content'] }}\n{% elif message['role'] == 'assistant' %}\n"
	"{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n"
	"{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

/* Llama-3.1-Tulu-3-8B's template. */
static const char tulu3_template[] =
	"{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\\n' + message['content'] + '\\n' }}"
	"{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '\\n' }}"
	"{% elif message['role'] == 'assistant' %}{% if not loop.last %}"
	"{{ '<|assistant|>\\n'  + message['content'] + eos_token + '\\n' }}{% else %}"
	"{{ '<|assistant|>\\n'  + message['content'] + eos_token }}{% endif %}{% endif %}"
	"{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}";

/* Mixtral-8x7B-Instruct-v0.1's current template. */
static const char mixtral_template[] =
	"{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n"
	"    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n"
	"{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n"
	"    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
	"        {{- raise_exception('After the optional system message, conversation roles must alternate "
	"user/assistant/user/assistant/...') }}\n    {%- endif %}\n    {%- if message['role'] == 'user' %}\n"
	"        {%- if loop.first and system_message is defined %}\n"
	"            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
	"        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n"
	"    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n"
	"    {%- else %}\n        {{- raise_exception('Only user and assistant roles are supported, with the "
	"exception of an initial optional system message!') }}\n    {%- endif %}\n{%- endfor %}\n";

/* Mixtral-8x7B-Instruct-v0.1's original template. */
static const char mixtral_v0_template[] =
	"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
	"{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
	"{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
	"{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
	"{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";

/* Qwen1.5-MoE-A2.7B-Chat's template: ChatML with a default system prompt. */
static const char qwen15_template[] =
	"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
	"{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
	"{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
	"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

Test(chat, olmoe_and_tulu3)
{
	struct family olmoe = { "tokenizer-deepseek_v3", olmoe_template, "<|endoftext|>", "<|endoftext|>", false };
	struct family tulu3 = { "tokenizer-deepseek_v3", tulu3_template, "<|endoftext|>", "<|end_of_text|>", false };
	compare(&olmoe, common, N_COMMON);
	compare(&tulu3, common, N_COMMON);
}

Test(chat, mixtral)
{
	static const struct conv extra[] = {
		{ "assistant first", { { "assistant", "Hi" }, { "user", "Hello" } }, 2, true, false, NULL },
		{ "two users in a row", { { "user", "a" }, { "user", "b" } }, 2, true, false, NULL },
		{ "system in the middle", { { "user", "a" }, { "system", "b" } }, 2, true, false, NULL },
		{ "multi-turn ending in assistant", { { "user", "a" }, { "assistant", "b" } }, 2, false, false, NULL },
	};
	struct family cur = { "tokenizer-deepseek_v3", mixtral_template, "<s>", "</s>", false };
	struct family v0 = { "tokenizer-deepseek_v3", mixtral_v0_template, "<s>", "</s>", false };
	compare(&cur, common, N_COMMON);
	compare(&cur, extra, sizeof(extra) / sizeof(extra[0]));
	compare(&v0, common, N_COMMON);
	compare(&v0, extra, sizeof(extra) / sizeof(extra[0]));
}

Test(chat, chatml_default_system)
{
	struct family f = { "tokenizer-deepseek_v3", qwen15_template, NULL, NULL, false };
	compare(&f, common, N_COMMON);
}

Test(chat, recognition_and_errors)
{
	static const struct {
		const char *type;
		enum chat_family f;
	} by_type[] = { { "qwen3_moe", CHAT_FAMILY_QWEN3 }, { "olmoe", CHAT_FAMILY_TULU },
			{ "mixtral", CHAT_FAMILY_MISTRAL }, { "deepseek_v3", CHAT_FAMILY_DEEPSEEK_V3 },
			{ "glm4_moe", CHAT_FAMILY_GLM4 }, { "deepseek_v32", CHAT_FAMILY_JINJA },
			{ "deepseek_v4", CHAT_FAMILY_JINJA },
			{ "glm_moe_dsa", CHAT_FAMILY_JINJA }, { "qwen3_5_moe", CHAT_FAMILY_JINJA },
			{ "qwen3_5_moe_text", CHAT_FAMILY_JINJA }, { "qwen3_next", CHAT_FAMILY_JINJA } };
	struct chat_template ct;
	char err[512] = "";
	for (size_t i = 0; i < sizeof(by_type) / sizeof(by_type[0]); i++) {
		cr_assert_eq(chat_template_init(&ct, NULL, by_type[i].type, "<s>", "</s>", err, sizeof(err)), 0, "%s", err);
		cr_expect_eq(ct.family, by_type[i].f, "%s", by_type[i].type);
		cr_expect(strstr(ct.note, "the model has no chat template; using the built-in"), "%s", ct.note);
		chat_template_free(&ct);
	}
	cr_expect_eq(chat_template_init(&ct, NULL, "llama", NULL, NULL, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "llama") && strstr(err, "chat_template"), "%s", err);
	cr_expect_eq(chat_template_init(&ct, NULL, NULL, NULL, NULL, err, sizeof(err)), -EINVAL);

	/* any template the subset parses is the model's own: rendered, with no note */
	cr_assert_eq(chat_template_init(&ct, "{{ messages[0]['content'] | upper }}", "qwen3", NULL, NULL, err, sizeof(err)),
		     0, "%s", err);
	cr_expect_eq(ct.family, CHAT_FAMILY_JINJA);
	cr_expect_str_eq(ct.note, "");
	struct chat_message hi[1] = { { "user", "hi" } };
	char *out = (char *)&out;
	size_t len;
	cr_assert_eq(chat_template_render(&ct, hi, 1, NULL, &out, &len, err, sizeof(err)), 0, "%s", err);
	cr_expect_str_eq(out, "HI");
	free(out);
	chat_template_free(&ct);
	/* template keyword arguments are variables, as apply_chat_template's **kwargs: they
	 * override the special tokens; the request's own variables are refused */
	cr_assert_eq(chat_template_init(&ct, "{{ bos_token }}{{ greeting }} {{ messages[0].content }}{{ n * 2 }}", NULL,
					"<s>", NULL, err, sizeof(err)), 0, "%s", err);
	cJSON *kw = cJSON_Parse("{\"greeting\": \"hello\", \"n\": 21, \"bos_token\": \"[B]\"}");
	struct chat_options ko = { .add_generation_prompt = true, .kwargs = kw };
	cr_assert_eq(chat_template_render(&ct, hi, 1, &ko, &out, &len, err, sizeof(err)), 0, "%s", err);
	cr_expect_str_eq(out, "[B]hello hi42");
	free(out);
	cJSON_Delete(kw);
	kw = cJSON_Parse("{\"messages\": []}");
	ko.kwargs = kw;
	cr_expect_eq(chat_template_render(&ct, hi, 1, &ko, &out, &len, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "'messages'"), "%s", err);
	chat_template_free(&ct);
	cr_assert_eq(chat_template_init(&ct, NULL, "olmoe", NULL, "<|endoftext|>", err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(chat_template_render(&ct, hi, 1, &ko, &out, &len, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "built-in") && strstr(err, "'messages'"), "%s", err);
	cJSON_Delete(kw);
	chat_template_free(&ct);
	/* a render error names the template's line and column; raise_exception's text is passed as it is */
	cr_assert_eq(chat_template_init(&ct, "ok\n{{ messages[0].content.nope() }}", NULL, NULL, NULL, err, sizeof(err)), 0);
	cr_expect_eq(chat_template_render(&ct, hi, 1, NULL, &out, &len, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "chat template line 2, column") && strstr(err, "nope"), "%s", err);
	chat_template_free(&ct);

	/* outside the subset and not one of the built-in formats: refused with both reasons */
	cr_expect_eq(chat_template_init(&ct, "{% extends 'base.jinja' %}", "qwen3", NULL, NULL, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "outside colibri's Jinja subset") && strstr(err, "line 1, column 4") &&
		  strstr(err, "extends") && strstr(err, "not recognised"), "%s", err);
	cr_expect_eq(chat_template_init(&ct, "{{ bos_token }}<\xEF\xBD\x9CUser\xEF\xBD\x9C><\xEF\xBD\x9C"
					"Assistant\xEF\xBD\x9C><think>\\n{% call x() %}{% endcall %}", NULL, NULL, NULL, err,
					sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "DeepSeek"), "%s", err);
	cr_expect_eq(chat_template_init(&ct, "[INST] <<SYS>> system {{ 1 +", NULL, NULL, NULL, err, sizeof(err)), -EINVAL);
	cr_expect_eq(chat_template_init(&ct, "{{ '<|user|>\\n' + message['content'] }}{{ '<|assistant|>\\n' }}<think>{%",
					NULL, NULL, NULL, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "<think>"), "%s", err);

	/* A ChatML template that handles tools its own way, outside the subset: the built-in
	 * renderer refuses tool turns and tool definitions rather than guessing them. */
	cr_assert_eq(chat_template_init(&ct, "{% if tools %}...{% endif %}{% for message in messages %}"
					"{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}"
					"{% endfor %}{% import 'x' as y %}", NULL, NULL, NULL, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(ct.family, CHAT_FAMILY_CHATML);
	cr_expect(strstr(ct.note, "line 1") && strstr(ct.note, "built-in chatml renderer"), "%s", ct.note);
	struct chat_message tool[2] = { { "user", "hi" }, { "tool", "42" } };
	out = (char *)&out;
	cr_expect_eq(chat_template_render(&ct, tool, 2, NULL, &out, &len, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "tool"), "%s", err);
	struct chat_options with_tools = { .add_generation_prompt = true, .tools = "[]" };
	cr_expect_eq(chat_template_render(&ct, hi, 1, &with_tools, &out, &len, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "does not support tools"), "%s", err);
	cJSON *msgs = cJSON_Parse("[{\"role\": \"assistant\", \"content\": null, \"tool_calls\": []}]");
	cr_expect_eq(chat_template_render_json(&ct, msgs, NULL, NULL, &out, &len, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "role and a text content only"), "%s", err);
	cJSON_Delete(msgs);
	cr_expect_null(ct.default_system);
	chat_template_free(&ct);

	/* A role the family does not know is an error, not a silently dropped message. */
	cr_assert_eq(chat_template_init(&ct, NULL, "qwen3", NULL, NULL, err, sizeof(err)), 0);
	struct chat_message m[2] = { { "user", "hi" }, { "narrator", "x" } };
	out = (char *)&out;
	cr_expect_eq(chat_template_render(&ct, m, 2, NULL, &out, &len, err, sizeof(err)), -EINVAL);
	cr_expect_null(out);
	cr_expect(strstr(err, "narrator"), "%s", err);
	chat_template_free(&ct);

	/* malformed input to the Jinja path */
	cr_assert_eq(chat_template_init(&ct, "{{ tools|length }}", NULL, NULL, NULL, err, sizeof(err)), 0);
	struct chat_options bad_tools = { .tools = "{not json" };
	cr_expect_eq(chat_template_render(&ct, hi, 1, &bad_tools, &out, &len, err, sizeof(err)), -EINVAL);
	cr_expect(strstr(err, "tools"), "%s", err);
	cJSON *notarray = cJSON_Parse("{}");
	cr_expect_eq(chat_template_render_json(&ct, notarray, NULL, NULL, &out, &len, err, sizeof(err)), -EINVAL);
	cJSON_Delete(notarray);
	chat_template_free(&ct);
}

/* The built-in Jinja texts are the files the expected outputs were rendered from. */
Test(chat, builtin_texts)
{
	static const struct {
		const char *text, *file;
	} builtin[] = {
		{ chat_builtin_deepseek_v32, "deepseek-v3.2.jinja" },
		{ chat_builtin_deepseek_v4, "deepseek-v4.jinja" },
		{ chat_builtin_glm5, "glm-4.7.jinja" },
		{ chat_builtin_qwen35, "qwen3.5.jinja" },
		{ chat_builtin_qwen3, "qwen3.jinja" },
	};
	for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) {
		char *text = chat_fixture_template(builtin[i].file);
		cr_expect_str_eq(builtin[i].text, text, "engine/text/chat_builtin.c is stale for %s: tools/jinja_fixtures.py "
				 "--builtin", builtin[i].file);
		free(text);
	}
}

/*
 * Renders every case of one template of expected.json (cases) with ct,
 * through chat_template_render_json as a server would call it: the same
 * text as Jinja2, or a failure where Jinja2 fails (with its message when
 * the template raised it). Conversations of roles and text contents also
 * go through chat_template_render. Counts into *total, *same, *failed.
 */
static void expect_cases(const struct chat_template *ct, const char *what, const cJSON *cases, const cJSON *root,
			 size_t *total, size_t *same, size_t *failed)
{
	const cJSON *convs = cJSON_GetObjectItem(root, "conversations"), *tools = cJSON_GetObjectItem(root, "tools");
	time_t now = (time_t)cJSON_GetObjectItem(root, "now")->valuedouble;
	char err[512];
	const cJSON *c;
	cJSON_ArrayForEach(c, cases) {
		const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
		const cJSON *conv = cJSON_GetArrayItem(convs, cJSON_GetObjectItem(c, "conversation")->valueint);
		const cJSON *msgs = cJSON_GetObjectItem(conv, "messages");
		const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(c, "expected"));
		const char *want_err = cJSON_GetStringValue(cJSON_GetObjectItem(c, "error"));
		struct chat_options opt = {
			.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")),
			.no_thinking = cJSON_IsFalse(cJSON_GetObjectItem(c, "enable_thinking")),
			.now = now,
			.kwargs = cJSON_GetObjectItem(c, "kwargs"),
		};
		bool with_tools = cJSON_IsTrue(cJSON_GetObjectItem(c, "tools"));
		char *out = NULL;
		size_t len = 0;
		const cJSON *defs = cJSON_GetObjectItem(c, "tool_defs"); /* the case's own tools, else the common ones */
		int rc = chat_template_render_json(ct, msgs, with_tools ? (defs ? defs : tools) : NULL, &opt, &out, &len, err,
						   sizeof err);
		(*total)++;
		if (want) {
			cr_expect_eq(rc, 0, "%s, %s: fails (%s) where Jinja2 renders", what, name, err);
			if (rc == 0) {
				bool eq = len == strlen(want) && memcmp(out, want, len) == 0;
				cr_expect(eq, "%s, %s:\n  ours:   [%s]\n  Jinja2: [%s]", what, name, out, want);
				*same += eq;
			}
		} else {
			cr_expect_neq(rc, 0, "%s, %s: renders where Jinja2 fails (%s)", what, name, want_err);
			if (cJSON_IsTrue(cJSON_GetObjectItem(c, "raised")))
				cr_expect_str_eq(err, want_err, "%s, %s: the template's message differs", what, name);
			*failed += rc != 0;
		}
		free(out);

		/* the same through the struct API when the messages are roles and texts */
		size_t k = 0, nm = (size_t)cJSON_GetArraySize(msgs);
		struct chat_message m[16];
		const cJSON *x;
		cJSON_ArrayForEach(x, msgs) {
			if (k == 16 || cJSON_GetArraySize(x) != 2 || !cJSON_IsString(cJSON_GetObjectItem(x, "content")))
				break;
			m[k++] = (struct chat_message){ cJSON_GetStringValue(cJSON_GetObjectItem(x, "role")),
							cJSON_GetStringValue(cJSON_GetObjectItem(x, "content")) };
		}
		if (k == nm && !with_tools && want) {
			cr_expect_eq(chat_template_render(ct, m, k, &opt, &out, &len, err, sizeof err), 0, "%s", err);
			if (out)
				cr_expect_str_eq(out, want, "%s, %s (chat_template_render)", what, name);
			free(out);
		}
	}
}

/* Every released template on every conversation of expected.json (expect_cases). */
Test(chat, released_templates)
{
	cJSON *root = chat_fixture_expected();
	size_t total = 0, same = 0, failed = 0, templates = 0;
	const cJSON *t;
	cJSON_ArrayForEach(t, cJSON_GetObjectItem(root, "templates")) {
		char *tmpl = chat_fixture_template(t->string), err[512];
		struct chat_template ct;
		cr_assert_eq(chat_template_init(&ct, tmpl, NULL, cJSON_GetStringValue(cJSON_GetObjectItem(t, "bos_token")),
						cJSON_GetStringValue(cJSON_GetObjectItem(t, "eos_token")), err, sizeof err), 0,
			     "%s: %s", t->string, err);
		cr_expect_eq(ct.family, CHAT_FAMILY_JINJA, "%s: %s", t->string, ct.note);
		templates++;
		expect_cases(&ct, t->string, cJSON_GetObjectItem(t, "cases"), root, &total, &same, &failed);
		chat_template_free(&ct);
		free(tmpl);
	}
	fprintf(stderr, "released templates: %zu templates, %zu of %zu cases render as Jinja2 does, %zu fail as it does\n",
		templates, same, total, failed);
	cr_expect_eq(same + failed, total);
	cJSON_Delete(root);
}

/* Checkpoints without a template whose model_type has a built-in Jinja text render every case
 * of that text's file as Jinja2 renders the file. */
Test(chat, builtin_templates_by_model_type)
{
	static const struct {
		const char *type, *file, *what;
	} by_type[] = {
		{ "deepseek_v32", "deepseek-v3.2.jinja", "DeepSeek-V3.2" },
		{ "deepseek_v4", "deepseek-v4.jinja", "DeepSeek-V4" },
		{ "glm_moe_dsa", "glm-4.7.jinja", "GLM-4.7/GLM-5" },
		{ "qwen3_5_moe", "qwen3.5.jinja", "Qwen3.5" },
		{ "qwen3_5_moe_text", "qwen3.5.jinja", "Qwen3.5" },
		{ "qwen3_next", "qwen3.jinja", "Qwen3" },
	};
	cJSON *root = chat_fixture_expected();
	const cJSON *templates = cJSON_GetObjectItem(root, "templates");
	for (size_t i = 0; i < sizeof by_type / sizeof by_type[0]; i++) {
		const cJSON *t = cJSON_GetObjectItem(templates, by_type[i].file);
		cr_assert(t, "%s", by_type[i].file);
		struct chat_template ct;
		char err[512], what[128];
		cr_assert_eq(chat_template_init(&ct, NULL, by_type[i].type,
						cJSON_GetStringValue(cJSON_GetObjectItem(t, "bos_token")),
						cJSON_GetStringValue(cJSON_GetObjectItem(t, "eos_token")), err, sizeof err), 0,
			     "%s: %s", by_type[i].type, err);
		cr_expect_eq(ct.family, CHAT_FAMILY_JINJA, "%s", by_type[i].type);
		char note[128];
		snprintf(note, sizeof note, "the model has no chat template; using the built-in %s template", by_type[i].what);
		cr_expect_str_eq(ct.note, note, "%s", by_type[i].type);
		size_t total = 0, same = 0, failed = 0;
		snprintf(what, sizeof what, "%s (built-in)", by_type[i].type);
		expect_cases(&ct, what, cJSON_GetObjectItem(t, "cases"), root, &total, &same, &failed);
		cr_expect(total > 0 && same + failed == total, "%s: %zu of %zu", by_type[i].type, same + failed, total);
		chat_template_free(&ct);
	}
	cJSON_Delete(root);
}

/*
 * DeepSeek-V4 without a template: the generation prompt ends as encoding_dsv4.py ends it,
 * <｜Assistant｜><think> in thinking mode (so a server reads the answer as reasoning first)
 * and <｜Assistant｜></think> in chat mode, whether thinking is turned off by
 * enable_thinking=false or by the `thinking` variable; reasoning_effort "max" opens the
 * prompt with the script's request for maximum effort.
 */
Test(chat, deepseek_v4_generation_prompt)
{
	struct chat_template ct;
	char err[512];
	cr_assert_eq(chat_template_init(&ct, NULL, "deepseek_v4", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", err,
					sizeof err), 0, "%s", err);
	struct chat_message m[2] = { { "system", "S" }, { "user", "Q" } };
	cJSON *off = cJSON_Parse("{\"thinking\": false}"), *max = cJSON_Parse("{\"reasoning_effort\": \"max\"}");
	static const char *const want[] = {
		"<｜begin▁of▁sentence｜>S<｜User｜>Q<｜Assistant｜><think>",
		"<｜begin▁of▁sentence｜>S<｜User｜>Q<｜Assistant｜></think>",
		"<｜begin▁of▁sentence｜>S<｜User｜>Q<｜Assistant｜></think>",
	};
	struct chat_options opt[3] = {
		{ .add_generation_prompt = true },
		{ .add_generation_prompt = true, .no_thinking = true },
		{ .add_generation_prompt = true, .kwargs = off },
	};
	for (size_t i = 0; i < 3; i++) {
		char *out = NULL;
		size_t len;
		cr_assert_eq(chat_template_render(&ct, m, 2, &opt[i], &out, &len, err, sizeof err), 0, "%s", err);
		cr_expect_str_eq(out, want[i], "case %zu", i);
		free(out);
	}
	struct chat_options effort = { .add_generation_prompt = true, .kwargs = max };
	char *out = NULL;
	size_t len;
	cr_assert_eq(chat_template_render(&ct, m, 2, &effort, &out, &len, err, sizeof err), 0, "%s", err);
	cr_expect(strncmp(out, "<｜begin▁of▁sentence｜>Reasoning Effort: Absolute maximum", 50) == 0, "%s", out);
	cr_expect(len > strlen(want[0]) && strcmp(out + len - strlen(want[0]) + strlen("<｜begin▁of▁sentence｜>"),
						  want[0] + strlen("<｜begin▁of▁sentence｜>")) == 0, "%s", out);
	free(out);
	cJSON_Delete(off);
	cJSON_Delete(max);
	chat_template_free(&ct);
}

/* chat_template.jinja beside tokenizer_config.json is the template, as transformers v5 loads it. */
Test(chat, jinja_file_takes_priority)
{
	char src[PATH_MAX], dir[PATH_MAX], path[PATH_MAX + 32], err[256] = "";
	node_ref_require("tokenizer-qwen3");
	node_ref_model_dir(src, sizeof(src), "tokenizer-qwen3");
	tu_mkdtemp(dir, sizeof dir);
	cr_assert_eq(tu_sh("ln -s '%s/tokenizer.json' '%s/tokenizer_config.json' '%s/'", src, src, dir), 0);
	snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
	const char *file = "{{ messages[0]['content'] }} from the file";
	cr_assert_eq(tu_write(path, file, strlen(file)), 0);
	struct tokenizer *tok;
	cr_assert_eq(tokenizer_load(&tok, dir, err, sizeof(err)), 0, "%s", err);
	cr_expect_str_eq(tokenizer_chat_template(tok), file);
	tokenizer_free(tok);
	tu_rmrf(dir);
}
