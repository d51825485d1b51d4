/*
 * harmony — the reply of a gpt-oss model, read as it streams, in OpenAI's
 * harmony format: messages `[<|start|>assistant]HEADER<|message|>BODY END`,
 * where HEADER holds `<|channel|>CHANNEL`, maybe a recipient `to=NAME` (on
 * either side of the channel) and a content type (`json`, `<|constrain|>json`),
 * and END is <|end|>, <|call|> or <|return|>. The generation prompt ends with
 * `<|start|>assistant`, so the first header starts the output.
 *
 * Each body becomes one kind of text:
 *   HARMONY_REASONING  the `analysis` channel
 *   HARMONY_CONTENT    `final`, and `commentary` without a recipient (a preamble)
 *   HARMONY_CALL       a message to a recipient (a tool call), re-emitted whole in
 *                      the form the released template renders a call:
 *                      `<|start|>assistant to=NAME<|channel|>commentary json<|message|>`
 *                      BODY `<|call|>` (tool_calls.c's TOOL_FORMAT_HARMONY reads it)
 * Headers and end markers are never emitted otherwise. A call the output
 * stops inside (<|call|> is a stop token) is closed by the flush; one that
 * ends at <|call|> sets `called`, which ends the turn in harmony.
 *
 * Invariants: text is emitted in order, cut only where the input was cut or
 * before a '<' (an ASCII byte), so UTF-8 characters whole in the input stay
 * whole; nothing allocates: it runs in serve's token callback. A header
 * longer than HARMONY_HEADER_MAX is not harmony: it and the rest of the
 * output are content.
 */
#ifndef COLIBRI_HARMONY_H
#define COLIBRI_HARMONY_H

#include <stdbool.h>
#include <stddef.h>

enum harmony_kind { HARMONY_CONTENT, HARMONY_REASONING, HARMONY_CALL };

/* Receives text of one kind, in order; p is valid during the call only. */
typedef void (*harmony_fn)(void *ctx, enum harmony_kind kind, const char *p, size_t n);

#define HARMONY_HEADER_MAX 256

struct harmony_stream {
	int state;                       /* in a header, in a body, or not harmony */
	char head[HARMONY_HEADER_MAX];   /* the current header's bytes */
	size_t n_head;
	char hold[16];                   /* body bytes that may begin an end marker */
	size_t n_hold;
	enum harmony_kind kind;          /* of the current body */
	bool called;                     /* a call ended at <|call|>: the turn is over */
	harmony_fn emit;
	void *ctx;
};

/* Starts reading a reply at the start of its first header (after the
 * generation prompt's `<|start|>assistant`). */
void harmony_stream_init(struct harmony_stream *h, harmony_fn emit, void *ctx);

/* Feeds the next n bytes of the reply, cut anywhere. */
void harmony_stream_put(struct harmony_stream *h, const char *p, size_t n);

/* The end of the reply: releases held body bytes and closes an open call. */
void harmony_stream_flush(struct harmony_stream *h);

/* Whether a chat template writes harmony (gpt-oss's). */
bool harmony_template(const char *template_text);

#endif
