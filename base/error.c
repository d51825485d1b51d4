/*
 * error — thread-local first-error-wins message buffer (see error.h).
 */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char error_buf[1024];
static _Thread_local int error_pending;

int error_set(int code, const char *fmt, ...)
{
	if (!error_pending) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(error_buf, sizeof error_buf, fmt, ap);
		va_end(ap);
		error_pending = 1;
	}
	return -code;
}

const char *error_message(void)
{
	return error_pending ? error_buf : "";
}

void error_clear(void)
{
	error_pending = 0;
	error_buf[0] = 0;
}
