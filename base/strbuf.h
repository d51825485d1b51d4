/*
 * strbuf — a growable, always NUL-terminated byte string. The first
 * allocation failure sticks in rc (later appends do nothing), so a caller
 * appends freely and checks once at the end.
 */
#ifndef COLIBRI_BASE_STRBUF_H
#define COLIBRI_BASE_STRBUF_H

#include <stddef.h>

struct strbuf {
	char *p;	/* NULL until the first append */
	size_t len, cap;
	int rc;		/* 0, or -ENOMEM / -EINVAL of the first failure */
};

/* Appends p[0..n) (p may be NULL when n is 0). */
void strbuf_put(struct strbuf *b, const char *p, size_t n);
/* Appends formatted text. */
void strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void strbuf_free(struct strbuf *b);

#endif
