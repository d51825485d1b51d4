/*
 * jinja — the subset of Jinja2 that chat templates use, rendered the way
 * Hugging Face transformers' apply_chat_template does (v5.15.0,
 * utils/chat_template_utils.py): an ImmutableSandboxedEnvironment with
 * trim_blocks and lstrip_blocks, the loopcontrols extension, the
 * {% generation %} tag, a tojson that is json.dumps(ensure_ascii=False,
 * indent=..., sort_keys=False), and the globals raise_exception and
 * strftime_now.
 *
 * Supported: {{ }}, {% %} and {# #} with - and + whitespace control; raw;
 * if/elif/else; for (with else, an if filter, tuple targets, loop.*,
 * break, continue); set (names, tuples, namespace attributes, set blocks);
 * macro and macro calls; with; filter blocks; generation. Expressions:
 * literals, lists, tuples, dicts, + - * / // % ** ~, comparisons, in,
 * not in, and/or/not, is [not] tests, x if c else y, subscripts, slices,
 * attributes, calls, the filters and tests listed in jinja_filters.c and
 * the methods in jinja_methods.c. Refused at parse time: extends, include,
 * import, block, call blocks, recursive loops, unknown tags, filters and
 * tests, so a template outside the subset fails early with a message.
 *
 * Strings are byte-exact UTF-8; length, indexing and slicing count code
 * points, as Python does. Integers are 64-bit (an overflow is an error,
 * where Python would grow). Known differences from Python: lower/upper/
 * title/capitalize change ASCII letters only, and the repr of a string
 * escapes only ASCII and a few common Unicode non-printables.
 *
 * Bounded: every render runs under jinja_limits (output bytes, memory,
 * nesting depth, evaluation steps); a template that exceeds one fails
 * with -E2BIG and a message, never a hang or a crash. Errors carry the
 * 1-based line and byte column of the construct at fault.
 */
#ifndef COLIBRI_JINJA_H
#define COLIBRI_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cjson/cJSON.h>

/* Where and why a parse or a render failed. */
struct jinja_error {
	int line, col;	/* 1-based; 0 when not tied to a place in the template */
	bool raised;	/* the template called raise_exception(msg): msg is its text */
	char msg[512];
};

struct jinja_limits {
	size_t output_bytes_max;	/* rendered text, and each captured macro or set block */
	size_t memory_bytes_max;	/* values and scopes made while rendering */
	unsigned depth_max;	/* nesting of macro calls */
	uint64_t steps_max;	/* statements and expressions evaluated */
};

/* The limits used when none are given: 16 MiB output, 64 MiB memory,
 * macro calls 64 deep, 4 million steps (a long real conversation takes
 * well under a tenth of that). Values nest at most 512 deep and
 * range() has at most 100000 items, as in Jinja's sandbox. */
extern const struct jinja_limits jinja_limits_default;

struct jinja_template;

/*
 * Parses src[0..len) (need not be NUL-terminated). On success *out is a
 * template the caller frees with jinja_template_free; it does not keep
 * src. Returns -EINVAL with err filled for a syntax error or a construct
 * outside the subset, -E2BIG for blocks or expressions nested more than 100
 * deep, -ENOMEM.
 */
int jinja_template_parse(struct jinja_template **out, const char *src, size_t len, struct jinja_error *err);
void jinja_template_free(struct jinja_template *t);

struct jinja_render_options {
	const struct jinja_limits *limits;	/* NULL: jinja_limits_default */
	time_t now;	/* the time strftime_now formats (local time); 0: the current time */
};

/*
 * Renders t with the variables of vars (a JSON object; NULL for none):
 * each member is a template variable, JSON null being Python's None.
 * Numbers that are integral and fit 64 bits become ints, others floats.
 * On success *out is a malloc'd NUL-terminated string of *out_len bytes
 * that the caller frees. Returns -EINVAL with err filled for a render
 * error (err->raised when the template raised it), -E2BIG when a limit is
 * exceeded, -ENOMEM. t may be rendered by several threads at once.
 */
int jinja_template_render(const struct jinja_template *t, const cJSON *vars, const struct jinja_render_options *opt,
			  char **out, size_t *out_len, struct jinja_error *err);

#endif
