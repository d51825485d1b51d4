/*
 * serve_prompt — a request's prompt as token ids: the one place where chat
 * messages meet the model's chat template, so that moving to another
 * template engine changes this file only.
 *
 * The model's chat template (engine/text/chat.h) is rendered with the
 * Jinja subset from the messages as the client sent them: roles system /
 * user / assistant / tool, content (text parts joined), tool_calls,
 * tool_call_id, name, reasoning_content, and the request's tools,
 * add_generation_prompt, enable_thinking and any other
 * chat_template_kwargs (template variables, as apply_chat_template's
 * **kwargs). Tool call arguments (JSON text in OpenAI's API) go in as
 * objects, as vLLM passes them and as transformers documents them; a
 * template that fails on objects gets the text the client sent.
 *
 * Whether the template renders tools is found once, at init, by rendering
 * a probe tool (a template may name tool calls without listing tools, as
 * DeepSeek-V3's does; a built-in C renderer renders none). One that does
 * not gets the generic tool format (tool_calls.h, TOOL_FORMAT_GENERIC):
 * the tools go in a system prompt of colibri's own (joined to the
 * request's system message; at the head of the first message where the
 * template refuses a system role), the history's tool_calls are written as
 * the JSON answers that prompt asks for, and tool_format says GENERIC so
 * that calls are read back and forced in that form; init says so once on
 * stderr. With a built-in C renderer (no usable template) the rest is
 * refused with a 400 naming the field: template variables, a role the
 * family lacks, and enable_thinking=false for a template without the
 * switch. A constrained request (response_format, or a tool_choice
 * that forces a call) is rendered without thinking where the template has
 * the switch, and its output is all content: the grammar holds from the
 * first token.
 */
#ifndef COLIBRI_ENGINE_SERVE_PROMPT_H
#define COLIBRI_ENGINE_SERVE_PROMPT_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/serve/serve_request.h"
#include "engine/text/chat.h"
#include "engine/text/tool_calls.h"

struct tokenizer;

struct serve_prompt {
	const struct tokenizer *tok;
	struct chat_template ct;
	bool have_template;
	char template_error[256];    /* why there is none */
	bool think_tags;             /* the vocabulary has <think> and </think> */
	bool harmony;                /* the template writes gpt-oss's harmony: its channels are split, a call ends the
				      * output (serve_text), reasoning_content goes to the template as `thinking` */
	enum tool_format tool_format; /* how the template writes tool calls; GENERIC when it renders no tools */
	bool dsml_tool_calls;        /* DSML in V4's <｜DSML｜tool_calls> block (else V3.2's function_calls) */
	bool history;                /* find each chat prompt's history (serve_prompt_ids.history): the model's
				      * sequence state has fixed parts, which only a checkpoint takes back */
};

/* Recognises the chat template of tok (model_type as a fallback). A model
 * without a usable template still serves /v1/completions; chat requests
 * then get a 400 naming the reason. tok must outlive sp. */
int serve_prompt_init(struct serve_prompt *sp, const struct tokenizer *tok, const char *model_type);
void serve_prompt_free(struct serve_prompt *sp);

struct serve_prompt_ids {
	int32_t *ids;                /* [n] malloc'd */
	int n;
	bool reasoning_open;         /* the prompt ends inside <think>: output starts as reasoning */
	int history;                 /* chat, with serve_prompt.history: the ids the messages give without the
				      * generation prompt, which a next turn shares (batch_params.checkpoint_at);
				      * 0 otherwise */
};

/* Chat: messages through the template, then the tokenizer (no extra BOS:
 * the template writes what the model expects). Completions: the prompt
 * text tokenized, with BOS when the tokenizer config asks for it, or the
 * given ids. Returns 0, or -EINVAL with err (400 for what the request asked,
 * 500 for out of memory). */
int serve_prompt_build(const struct serve_prompt *sp, const struct serve_request *r, struct serve_prompt_ids *out,
		       struct serve_error *err);

#endif
