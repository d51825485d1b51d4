/*
 * json_schema — JSON Schema to a GBNF grammar (grammar.h) whose language is
 * the JSON texts the schema admits, in the form a model should write them.
 *
 * The grammar is a subset of what the schema validates, chosen so that
 * constrained decoding terminates and stays cheap:
 *   - whitespace between tokens is bounded: at most one newline followed by
 *     ws_max spaces or tabs (default 20), none at the start or the end;
 *   - object members come in the schema's "properties" order, required and
 *     optional interleaved as listed (an optional member may be left out);
 *     extra members (additionalProperties not false) follow the listed ones
 *     and their keys are any string but the listed names (as written in
 *     their shortest JSON form);
 *   - numbers have at most 16 integer digits, 16 fraction digits and a
 *     3-digit exponent; bounded numbers have no exponent; "-0" is not
 *     produced for bounded numbers or integers;
 *   - strings are written in their shortest JSON form where a pattern, a
 *     format, enum or const decides them: only '"', '\' and control
 *     characters are escaped;
 *   - enum / const values are matched structurally (whitespace as above,
 *     members in the value's order, numbers as cJSON prints them); other
 *     keywords beside them are not applied, except "type", which drops the
 *     values it leaves out;
 *   - oneOf is treated as anyOf (exclusivity is not checked).
 * Keywords outside the supported set are named in a warning with the JSON
 * pointer of the schema that holds them; the output is then looser than the
 * schema, never stricter. Invalid or hostile schemas (cyclic $ref that
 * consumes no input, nesting beyond depth_max, a grammar beyond
 * JSON_SCHEMA_GBNF_BYTES_MAX or JSON_SCHEMA_RULES_MAX, unsatisfiable
 * constraints) are refused with a message. A grammar that converts may
 * still fan out wider than the matcher holds (an enum, anyOf or pattern
 * with thousands of alternatives, thousands of optional properties):
 * callers check grammar_width after grammar_parse.
 */
#ifndef COLIBRI_JSON_SCHEMA_H
#define COLIBRI_JSON_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* Largest grammar text produced; beyond it conversion fails with -E2BIG. */
#define JSON_SCHEMA_GBNF_BYTES_MAX (8u << 20)
/* Largest minItems / maxItems / minLength / maxLength enforced; larger are warned and dropped. */
#define JSON_SCHEMA_REPEAT_MAX 4096
/*
 * Most named rules in a schema's grammar (about 1,000 object properties);
 * beyond it conversion fails with -E2BIG at once. It bounds what one
 * schema costs to compile: grammar_parse looks rules up by name linearly,
 * so its time grows with the square of their number (0.1-0.2 s here at 2,048
 * named rules, 85 s at 20,000 properties).
 */
#define JSON_SCHEMA_RULES_MAX 2048
/* Most warnings kept; one more line says how many were left out. */
#define JSON_SCHEMA_WARNINGS_MAX 64

struct json_schema_options {
	int ws_max;		/* spaces/tabs after the optional newline; 0: default 20; <0: no whitespace */
	int depth_max;		/* nesting of subschemas; 0: default 64 */
	bool strict;		/* absent additionalProperties means false (OpenAI's strict mode) */
};

/* Messages about what the grammar does not enforce; each msg[i] is malloc'd. */
struct json_schema_warnings {
	char **msg;
	size_t count;
};

/*
 * Converts schema (an object or a boolean) to GBNF text with root rule
 * "root". opt may be NULL (defaults); warnings may be NULL (then they are
 * dropped). Returns 0 and *gbnf_out (malloc'd, caller frees; NUL-ended);
 * -EINVAL with a sentence in err (when err_len > 0) for a schema that is
 * invalid, unsatisfiable or too deep; -E2BIG for a grammar too large;
 * -ENOMEM. On failure *gbnf_out is NULL; warnings may hold messages either
 * way and are freed with json_schema_warnings_free.
 */
int json_schema_to_gbnf(const cJSON *schema, const struct json_schema_options *opt, char **gbnf_out,
			struct json_schema_warnings *warnings, char *err, size_t err_len);

/* The grammar of any JSON object (response_format {"type": "json_object"}). */
int json_schema_object_gbnf(const struct json_schema_options *opt, char **gbnf_out);

void json_schema_warnings_free(struct json_schema_warnings *w);

#endif
