/*
 * serve_request — the JSON body of a POST /v1/chat/completions or
 * /v1/completions request, parsed and checked into a struct serve_request.
 *
 * Fields follow OpenAI's API. Unknown fields are ignored; a known field of
 * the wrong type or out of range is refused with a serve_error naming it
 * (400, invalid_request_error). Features the engine lacks (n > 1, logit_bias,
 * several prompts, echo with logprobs) are
 * refused the same way rather than silently ignored. Whether the model's chat
 * template can render what was asked (tools, roles, template variables) is
 * serve_prompt's decision, not the parser's: the parser keeps them as JSON text.
 *
 * The parser works on bytes in memory and touches nothing else, so it is
 * safe on any input (tests/fuzz/fuzz_serve_request.c). Every string of an
 * accepted request is valid UTF-8 without NUL bytes.
 */
#ifndef COLIBRI_ENGINE_SERVE_REQUEST_H
#define COLIBRI_ENGINE_SERVE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/decode/batch.h"

#define SERVE_STOP_MAX 16            /* stop strings per request */
#define SERVE_STOP_BYTES_MAX 256     /* bytes of one stop string */
#define SERVE_MESSAGES_MAX 4096      /* messages of one chat request */

enum serve_endpoint { SERVE_CHAT = 0, SERVE_COMPLETION };

/* An error answer in OpenAI's shape: {"error": {message, type, param, code}}. */
struct serve_error {
	int status;                  /* HTTP status */
	const char *code;            /* static string or NULL */
	char param[96];              /* "" for none */
	char message[512];
};

/* Fills e (status, param may be NULL, code may be NULL) and returns -EINVAL. */
int serve_error_set(struct serve_error *e, int status, const char *param, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* "invalid_request_error" for 4xx, "server_error" for 5xx. */
const char *serve_error_type(int status);

struct serve_message {
	char *role;                  /* system, user, assistant or tool ("developer" reads as system) */
	char *content;               /* text parts joined; "" for a null content */
	bool has_tool_calls;         /* an assistant turn carrying tool_calls */
};

/* response_format. */
enum serve_format {
	SERVE_FORMAT_TEXT = 0,
	SERVE_FORMAT_JSON_OBJECT,    /* any JSON object */
	SERVE_FORMAT_JSON_SCHEMA,    /* JSON text the schema admits */
};

/* tool_choice: the default is auto with tools, none without. */
enum serve_tool_choice {
	SERVE_TOOLS_AUTO = 0,        /* calls in the output are parsed into tool_calls */
	SERVE_TOOLS_NONE,            /* tools are rendered; the output is all content */
	SERVE_TOOLS_REQUIRED,        /* the output is one call of some tool (grammar-forced) */
	SERVE_TOOLS_NAMED,           /* the output is one call of tool_name (grammar-forced) */
};

struct serve_limits {
	int max_tokens_cap;          /* largest max_tokens a request may ask for */
	int32_t vocab;               /* token ids of a prompt must be below it */
	float temp, top_p;           /* sampling defaults where the request gives none */
	int32_t top_k;               /* (the model's generation_config.json) */
	float min_p, repeat_penalty; /* likewise (repeat_penalty 0 is off, as 1) */
};

struct serve_request {
	enum serve_endpoint endpoint;
	char *model;                 /* as given, or NULL */
	/* chat */
	struct serve_message *messages; /* [n_messages] */
	int n_messages;
	char *messages_json;         /* the messages as templates read them, compact JSON (see serve_request.c) */
	bool add_generation_prompt;  /* default true */
	int enable_thinking;         /* chat_template_kwargs.enable_thinking: -1 not given, 0, 1 */
	char *tools_json;            /* tools as compact JSON, NULL when absent or empty */
	char *template_kwargs_json;  /* chat_template_kwargs other than the two above, a compact JSON object, or NULL */
	enum serve_tool_choice tool_choice;
	char *tool_name;             /* SERVE_TOOLS_NAMED: the function, one of tools */
	enum serve_format format;    /* response_format.type */
	char *schema_json;           /* SERVE_FORMAT_JSON_SCHEMA: the schema (an object or a boolean), compact JSON */
	bool schema_strict;          /* response_format.json_schema.strict */
	/* completions */
	char *prompt;                /* text prompt, or NULL when prompt_ids is set */
	int32_t *prompt_ids;         /* [n_prompt_ids] a prompt given as token ids */
	int n_prompt_ids;
	bool echo;
	/* both */
	int max_tokens;              /* -1: not given */
	bool seed_given;
	struct batch_params p;       /* n_predict is left 0: the caller sets it */
	char *stop[SERVE_STOP_MAX];
	int n_stop;
	bool stream;
	bool include_usage;          /* stream_options.include_usage */
};

struct cJSON;

/* Parses a request body, for every API the server speaks: a JSON object
 * in valid UTF-8 with no NUL character and no key given twice in any object (cJSON keeps
 * the first where Python and JavaScript keep the last, so a proxy that
 * checked the body would have seen other values). Returns the object (the
 * caller cJSON_Deletes it), or NULL with err set: a 400 naming what is
 * wrong, the duplicate's path as the param ("messages[0].content"). */
struct cJSON *serve_body_parse(const char *body, size_t len, struct serve_error *err);

/* Parses body[0..len) for endpoint e. On success r holds the request (free
 * with serve_request_free); on failure -EINVAL, err says why and r is empty
 * (serve_request_free is still safe). */
int serve_request_parse(struct serve_request *r, enum serve_endpoint e, const char *body, size_t len,
			const struct serve_limits *lim, struct serve_error *err);
void serve_request_free(struct serve_request *r);

/* True when s[0..n) is valid UTF-8 (no overlong forms, surrogates or code
 * points past U+10FFFF). */
bool serve_utf8_valid(const char *s, size_t n);

#endif
