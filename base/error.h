/*
 * error — the one-line message that says what went wrong.
 *
 * Library functions return 0 or a negative errno; the first failure on a
 * thread also records a sentence naming the file, tensor, layer or offset at
 * fault. "First error wins": later error_set calls are ignored until
 * error_clear, so the root cause is what the user sees. The command-line
 * front end prints error_message() and exits non-zero.
 */
#ifndef COLIBRI_STORAGE_ERROR_H
#define COLIBRI_STORAGE_ERROR_H

/* Records the message if none is pending. Returns -code (code is a positive
 * errno), so callers can write `return error_set(EINVAL, "...", ...);`. */
int error_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The pending message, or "" when none. Valid until the next error_clear. */
const char *error_message(void);

/* Forgets the pending message. */
void error_clear(void);

#endif
