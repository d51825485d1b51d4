/*
 * array — growing a malloc'd array by doubling.
 */
#ifndef COLIBRI_BASE_ARRAY_H
#define COLIBRI_BASE_ARRAY_H

#include <errno.h>
#include <stdlib.h>

/* Makes *p (of *cap elements of elem bytes) hold at least need; 0 or
 * -ENOMEM (then *p and *cap are unchanged). */
static inline int array_grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 16;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, c * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

#endif
