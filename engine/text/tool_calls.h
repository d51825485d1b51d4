/*
 * tool_calls — reads tool calls back out of a model's reply, in the tool
 * format its chat template taught it, as the reply streams.
 *
 * Formats (each as its released template renders an assistant's calls):
 *   HERMES    Qwen3: <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
 *   QWEN_XML  Qwen3.5: <tool_call>\n<function=N>\n<parameter=P>\nV\n</parameter>\n
 *             </function>\n</tool_call>
 *   GLM       GLM-4.5/4.6/4.7: <tool_call>N<arg_key>P</arg_key><arg_value>V</arg_value>
 *             </tool_call> (4.5/4.6 put newlines between the parts)
 *   DEEPSEEK  DeepSeek-V3: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
 *             \n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>, and
 *             V3.1's <｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
 *             (told apart per call by the ``` fence)
 *   DSML      DeepSeek-V3.2 (<｜DSML｜function_calls>) and V4 (<｜DSML｜tool_calls>):
 *             <｜DSML｜invoke name="N"><｜DSML｜parameter name="P" string="true|false">V
 *             </｜DSML｜parameter></｜DSML｜invoke>
 *   HARMONY   gpt-oss: <|start|>assistant to=functions.N<|channel|>commentary json
 *             <|message|>{...}<|call|>, as the template renders a call and as
 *             harmony.h re-emits one the model wrote (the recipient may also
 *             follow the channel there; <|call|> may be the stop token)
 *   GENERIC   colibri's own, for a template that does not render tools (the
 *             server's choice, never detected): the answer is one JSON object,
 *             {"tool_call": {"name": N, "arguments": {...}}}, {"tool_calls":
 *             [{"name": N, "arguments": {...}}, ...]} or {"response": TEXT}
 *             (the shapes of llama.cpp's generic format); tool_generic_prompt
 *             tells the model so. Any other answer is content.
 *   NONE      Mixtral, OLMoE / Tulu, Qwen1.5-MoE: their templates have no tool
 *             format; everything is content.
 *
 * Typed parameters (QWEN_XML, GLM, DSML) become one JSON arguments object.
 * A value is a JSON string when DSML says string="true" or the tool's schema
 * (parameters.properties.P.type) is "string"; otherwise it is parsed as JSON,
 * then True / False / None (Qwen3.5's template prints Python values) read
 * as true / false / null, and anything else stays a string, as vLLM does.
 * Qwen3.5 values lose the one newline the template puts on each side;
 * GLM and DSML values are taken byte for byte.
 *
 * Invariants: every byte fed comes out either as content or inside a
 * parsed call; a call that is malformed or cut off falls back to content
 * (its markers included) and sets the parser's error, the first error
 * winning. Whitespace between content and a call, and between calls, is
 * dropped (it is the template's, not the answer's). Content deltas end on
 * UTF-8 character boundaries and hold back any tail that may still become
 * a call marker; the concatenated deltas equal the final content.
 * Known limit: a call is held until its end marker, then emitted whole
 * (start, its arguments in one delta, end), so that a malformed call can
 * still become content; argument text does not stream within one call.
 * GENERIC has no markers: an answer whose first non-blank byte is '{' is
 * held to the end and then read as a whole (a call, calls, a response's
 * text, or, when it is none of these, its bytes as content); any other
 * answer streams as content. A call may be followed by text (content);
 * text before it makes the whole answer content.
 */
#ifndef COLIBRI_TOOL_CALLS_H
#define COLIBRI_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

enum tool_format {
	TOOL_FORMAT_NONE,
	TOOL_FORMAT_HERMES,
	TOOL_FORMAT_QWEN_XML,
	TOOL_FORMAT_GLM,
	TOOL_FORMAT_DEEPSEEK,
	TOOL_FORMAT_DSML,
	TOOL_FORMAT_HARMONY,
	TOOL_FORMAT_GENERIC,
};

/*
 * The tool format of a chat template: recognised from template_text (the
 * Jinja source, may be NULL), else from model_type (may be NULL; qwen3*,
 * qwen3_5_moe*, glm4_moe, glm_moe_dsa, deepseek_v3, deepseek_v32,
 * deepseek_v4, gpt_oss). TOOL_FORMAT_NONE when neither names one.
 */
enum tool_format tool_format_detect(const char *template_text, const char *model_type);

/* Lower-case name, e.g. "hermes". */
const char *tool_format_name(enum tool_format f);

/*
 * GENERIC's instructions to the model (malloc'd, caller frees; NULL when
 * out of memory): the functions of tools (an OpenAI tools array) one JSON
 * line each, with name, description and parameters schema, then the JSON
 * answer that calls them. Meant to join the system prompt.
 */
char *tool_generic_prompt(const cJSON *tools);

/*
 * GENERIC's text of an assistant's calls (tool_calls as OpenAI's API gives
 * them: [{"function": {"name": N, "arguments": TEXT or object}}, ...]), as
 * the model is asked to write it: {"tool_call": ...} for one call,
 * {"tool_calls": [...]} for several; arguments that are JSON text of an
 * object go in as the object. malloc'd; NULL when out of memory or when
 * tool_calls is not a non-empty array of calls with a name.
 */
char *tool_generic_calls_text(const cJSON *tool_calls);

enum tool_call_event_kind {
	TOOL_CALL_EVENT_CONTENT,	/* text: a delta of the content */
	TOOL_CALL_EVENT_START,		/* index, id, name: a call begins */
	TOOL_CALL_EVENT_ARGUMENTS,	/* index, text: a delta of the arguments JSON */
	TOOL_CALL_EVENT_END,		/* index: the call is complete */
};

/* Valid only during the callback; text is not NUL-terminated. */
struct tool_call_event {
	enum tool_call_event_kind kind;
	size_t index;		/* of the call, counted from 0 */
	const char *id;		/* "call_<index>" */
	const char *name;
	const char *text;
	size_t text_len;
};

/* Returns 0 to go on; anything else stops the parser and is returned by feed / finish. */
typedef int (*tool_call_event_fn)(void *ctx, const struct tool_call_event *ev);

struct tool_call {
	char id[24];		/* "call_<index>" */
	char *name;
	char *arguments;	/* a JSON object, unformatted */
};

struct tool_call_buf {
	char *data;
	size_t len, cap;
};

struct tool_call_parser {
	enum tool_format format;
	const cJSON *tools;		/* the request's tools array, or NULL */
	tool_call_event_fn emit;	/* may be NULL */
	void *ctx;
	int state;			/* text, in a block of calls, in a call */
	bool after_call;		/* whitespace after a call is dropped */
	bool finished;
	struct tool_call_buf pending;	/* fed bytes not yet decided */
	struct tool_call_buf ws;	/* content whitespace held until it is known not to adjoin a call */
	struct tool_call_buf raw;	/* the current call's text as fed, for the fall back to content */
	size_t content_emitted;		/* bytes of content already given to emit */
	bool in_block;			/* the current call sits in a block of calls */
	size_t block_calls;		/* calls read in the current block */
	size_t scan;			/* where to look for the end marker in pending */
	int stopped;			/* the first -ENOMEM or callback value: the parser is stopped */
	/* results, valid after tool_call_parser_finish */
	struct tool_call_buf content;	/* NUL-terminated */
	struct tool_call *calls;
	size_t n_calls, calls_cap;
	int error;			/* 0, or -EBADMSG: a call was malformed or cut off */
	char error_msg[192];
};

/*
 * Starts a parser for one response. tools (may be NULL) must outlive the
 * parser; it is read for parameter types only. emit (may be NULL) gets the
 * events in order. Free with tool_call_parser_free, which frees the
 * results too.
 */
/* Whether a parameter's schema types it as a string: type "string", or a
 * list of "string" and "null" only (such a value is kept as text). */
bool tool_param_is_string(const cJSON *param);

void tool_call_parser_init(struct tool_call_parser *p, enum tool_format format, const cJSON *tools,
			   tool_call_event_fn emit, void *ctx);
void tool_call_parser_free(struct tool_call_parser *p);

/*
 * Feeds the next len bytes of decoded text, cut anywhere (inside markers or
 * UTF-8 characters). Returns 0, -ENOMEM, or the callback's non-zero value.
 * A malformed call is not a failure: see p->error.
 */
int tool_call_parser_feed(struct tool_call_parser *p, const char *text, size_t len);

/*
 * Ends the response: held text is emitted, an unfinished call becomes
 * content with p->error set. Afterwards p->content, p->calls and
 * p->n_calls are the final result. Returns as feed does.
 */
int tool_call_parser_finish(struct tool_call_parser *p);

#endif
