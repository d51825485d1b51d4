/*
 * strbuf — see strbuf.h.
 */
#include "base/strbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for n more bytes and the NUL; false (rc set) when there is none. */
static int reserve(struct strbuf *b, size_t n)
{
	if (b->rc)
		return 0;
	if (b->len + n + 1 <= b->cap)
		return 1;
	size_t c = b->cap ? b->cap * 2 : 256;
	while (c < b->len + n + 1)
		c *= 2;
	char *q = realloc(b->p, c);
	if (!q) {
		b->rc = -ENOMEM;
		return 0;
	}
	b->p = q;
	b->cap = c;
	return 1;
}

void strbuf_put(struct strbuf *b, const char *p, size_t n)
{
	if (!reserve(b, n))
		return;
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = 0;
}

void strbuf_printf(struct strbuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		if (!b->rc)
			b->rc = -EINVAL;
		return;
	}
	if (!reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void strbuf_free(struct strbuf *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}
