/*
 * chat_input — what `colibri chat` reads: one entry at a time, from a
 * terminal through libedit (line editing, emacs keys, history kept in a
 * file), or plain lines from a pipe or file (no prompt, so scripts work).
 *
 * An entry is one line, or several joined with "\n": a line ending in a
 * backslash continues on the next (the backslash is dropped), and a line
 * holding only """ opens a block that the next such line closes.
 *
 * Ctrl-C: the caller's SIGINT handler must not set SA_RESTART; then a
 * Ctrl-C at the prompt interrupts the read, which reports CHAT_INPUT_CANCEL.
 */
#ifndef COLIBRI_ENGINE_CLI_CHAT_INPUT_H
#define COLIBRI_ENGINE_CLI_CHAT_INPUT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

enum chat_input_result {
	CHAT_INPUT_EOF = 0,          /* end of input (Ctrl-D on an empty line) */
	CHAT_INPUT_ENTRY,            /* an entry was read */
	CHAT_INPUT_CANCEL,           /* Ctrl-C: the line was dropped */
};

struct chat_input {
	bool tty;                    /* libedit on a terminal */
	void *el, *hist;             /* EditLine *, History * */
	const char *prompt;          /* what the prompt function shows now */
	char history_path[PATH_MAX]; /* "" when history is not kept */
	char *line;                  /* getline's buffer (pipes) */
	size_t line_cap;
};

/* Opens the input on stdin: libedit when tty, else plain lines.
 * history_path (may be NULL) is loaded now and saved by chat_input_free.
 * Free with chat_input_free, also after a failure. */
int chat_input_init(struct chat_input *in, bool tty, const char *history_path);
void chat_input_free(struct chat_input *in);

/* Reads one entry into *text (malloc'd, NUL-terminated, no final
 * newline). Returns a chat_input_result, or -errno. */
int chat_input_read(struct chat_input *in, char **text);

#endif
