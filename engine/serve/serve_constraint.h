/*
 * serve_constraint — the grammar a chat request's output must follow, made
 * at admission on the HTTP thread: response_format json_object /
 * json_schema (engine/grammar/json_schema.h), or a tool call that
 * tool_choice "required" or a named function forces, written in the tool
 * format of the model's chat template (engine/text/tool_calls.h) with its
 * arguments constrained by the function's parameters schema.
 *
 * The tool-call grammar is one call (parallel calls are not forced):
 *   HERMES    <tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>
 *   GENERIC   {"tool_call": {"name": "N", "arguments": ARGS}}
 *   DEEPSEEK  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
 *             \n```json\nARGS\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
 *   QWEN_XML, GLM, DSML: the function's properties in schema order, the
 *             required ones present, the others optional; a value is JSON
 *             of the property's schema, or, for a property of type
 *             "string", raw text without '<' (its enum, minLength and
 *             maxLength kept, other string keywords not).
 * ARGS is the parameters schema through json_schema_to_gbnf in strict
 * mode whatever the function says: an object schema without
 * additionalProperties admits its listed members only (a schema that
 * allows more says so with additionalProperties), so that a forced call
 * ends; {} for a function without parameters.
 *
 * The constrain (engine/decode/constrain.h) is made here too, so that the
 * scheduler only masks and advances it. Ownership: the constraint owns its
 * grammar and constrain; tok must outlive it.
 */
#ifndef COLIBRI_ENGINE_SERVE_CONSTRAINT_H
#define COLIBRI_ENGINE_SERVE_CONSTRAINT_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/decode/constrain.h"
#include "engine/serve/serve_request.h"
#include "engine/text/tool_calls.h"

struct grammar;
struct tokenizer;

struct serve_constraint {
	struct grammar *g;
	struct constrain cs;
	bool have_cs;
	char *warnings;              /* what the grammar does not enforce, "; "-joined (malloc'd), or NULL */
};

/* Whether r's output is constrained (response_format, or a forced call). */
bool serve_constraint_wanted(const struct serve_request *r);

/*
 * Builds c for r (serve_constraint_wanted(r) must hold). format is the
 * model's tool format; dsml_tool_calls picks V4's <｜DSML｜tool_calls>
 * block over V3.2's function_calls. eos[n_eos] end the output; vocab is
 * the server's constrain_vocab of tok and eos (NULL: built for the request). Returns 0;
 * -EINVAL with err: 400 naming response_format.json_schema for a schema
 * that does not convert (or, with strict, uses keywords the grammar cannot
 * enforce), 400 naming tool_choice when the model has no tool format or a
 * function's parameters do not convert, 500 when out of memory. Free with
 * serve_constraint_free, also after a failure.
 */
int serve_constraint_build(struct serve_constraint *c, const struct serve_request *r, enum tool_format format,
			   bool dsml_tool_calls, const struct tokenizer *tok, const struct grammar_vocab *vocab,
			   const int32_t *eos, int n_eos, int32_t n_vocab, struct serve_error *err);
void serve_constraint_free(struct serve_constraint *c);

/*
 * The last step of serve_constraint_build, for other APIs' grammars too
 * (llama-server's grammar and json_schema): compiles gbnf (root rule
 * "root") into c and starts its constraint. Errors: 400 naming param
 * ("'PARAM' WHAT: the parser's reason" for a grammar that does not
 * compile), 500 when out of memory. c was zeroed; free it with
 * serve_constraint_free, also after a failure.
 */
int serve_constraint_compile(struct serve_constraint *c, const char *gbnf, const char *param, const char *what,
			     const struct tokenizer *tok, const struct grammar_vocab *vocab, const int32_t *eos,
			     int n_eos, int32_t n_vocab, struct serve_error *err);

/*
 * The GBNF text (root rule "root", malloc'd into *out) of one call in
 * format f of the function named only (NULL: any of tools). Returns 0, or
 * -EINVAL with a sentence in err (-E2BIG when the tools need more rules
 * than a request may compile), -ENOMEM.
 */
int serve_tool_call_gbnf(enum tool_format f, bool dsml_tool_calls, const cJSON *tools, const char *only, char **out,
			 char *err, size_t err_len);

#endif
