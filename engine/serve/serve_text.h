/*
 * serve_text — what a request's decoded text goes through before the
 * client sees it: stop strings, then the split of reasoning from content.
 *
 * Stop strings are matched on the decoded text, across token boundaries:
 * text that could still be the start of a stop string is held back until
 * it cannot; when one is found, the text before it is released, the stop
 * string and everything after are dropped, and put reports the stop.
 *
 * Reasoning models (Qwen3, GLM-4.5, DeepSeek-R1 style) write their thinking
 * between <think> and </think>; with the split on, that text is released as
 * reasoning and the rest as content (blanks right after </think> dropped).
 * Output starts inside the block when the prompt opened it, else a block
 * counts only at the very start of the output (after blanks). The tags may
 * arrive split across pieces. gpt-oss writes harmony instead (harmony.h):
 * with harmony on, the analysis channel is reasoning, the final channel
 * content, a tool call content in the template's form (for the tool-call
 * parser), and no header or end marker reaches the client.
 *
 * All buffers are inside the struct: nothing allocates after init, so it
 * runs in the scheduler's token callback.
 */
#ifndef COLIBRI_ENGINE_SERVE_TEXT_H
#define COLIBRI_ENGINE_SERVE_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/serve/serve_request.h"
#include "engine/text/harmony.h"

enum serve_text_kind { SERVE_TEXT_CONTENT = 0, SERVE_TEXT_REASONING };

/* Receives released text, in order. */
typedef void (*serve_text_fn)(void *ctx, enum serve_text_kind kind, const char *p, size_t n);

#define SERVE_TEXT_CHUNK 1024        /* bytes taken from one put at a time */
#define SERVE_TEXT_HOLD (SERVE_STOP_BYTES_MAX + SERVE_TEXT_CHUNK)

enum serve_think_state { SERVE_THINK_START = 0, SERVE_THINK_IN, SERVE_THINK_OUT };

struct serve_text {
	char *const *stop;           /* [n_stop] borrowed: must outlive t */
	int n_stop;
	char held[SERVE_TEXT_HOLD];  /* decoded, not yet released (stop matching) */
	size_t n_held;
	bool stopped;
	int stop_index;              /* the stop string found (stop[i]); -1 none */
	bool split;                  /* reasoning apart from content */
	enum serve_think_state think;
	bool skip_blank;             /* drop blanks at the start of the content */
	bool skip_nl;                /* drop newlines at the start of the reasoning */
	char tag[SERVE_TEXT_HOLD + 16]; /* the splitter's held bytes and scratch */
	size_t n_tag;
	bool harmony;                /* split harmony's channels instead of <think> */
	struct harmony_stream hs;
	serve_text_fn emit;
	void *ctx;
};

/* reasoning_open: the prompt ended inside <think> (serve_prompt_ids).
 * harmony: the split reads harmony's channels (with split on). */
void serve_text_init(struct serve_text *t, char *const *stop, int n_stop, bool split, bool reasoning_open,
		     bool harmony, serve_text_fn emit, void *ctx);

/* Feeds decoded text; true once a stop string was found (later input is
 * ignored). */
bool serve_text_put(struct serve_text *t, const char *p, size_t n);

/* The end of generation: releases whatever is held. */
void serve_text_flush(struct serve_text *t);

#endif
