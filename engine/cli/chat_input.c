/*
 * chat_input — see chat_input.h. libedit's own signal handling (EL_SIGNAL)
 * stays off: it re-raises signals to the whole process group. Without it a
 * SIGINT makes el_gets return NULL with errno EINTR (libedit retries an
 * interrupted read only with EL_SAFEREAD, also off), which is the cancel.
 */
#include "engine/cli/chat_input.h"

#include <errno.h>
#include <histedit.h>
#include <langinfo.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define PROMPT_FIRST "> "
#define PROMPT_MORE "... "
#define HISTORY_SIZE 1000

static char *prompt_of(EditLine *el)
{
	struct chat_input *in = NULL;
	el_get(el, EL_CLIENTDATA, &in);
	return (char *)(in && in->prompt ? in->prompt : "");
}

int chat_input_init(struct chat_input *in, bool tty, const char *history_path)
{
	memset(in, 0, sizeof *in);
	in->tty = tty;
	if (!tty)
		return 0;
	/* libedit decodes keys with the locale's multibyte rules: without a
	 * UTF-8 locale it would drop every non-ASCII character typed. */
	setlocale(LC_CTYPE, "");
	if (strcmp(nl_langinfo(CODESET), "UTF-8") != 0)
		setlocale(LC_CTYPE, "C.UTF-8");
	EditLine *el = el_init("colibri", stdin, stdout, stderr);
	History *h = history_init();
	if (!el || !h) {
		if (el)
			el_end(el);
		if (h)
			history_end(h);
		return error_set(ENOMEM, "cannot start line editing");
	}
	in->el = el;
	in->hist = h;
	HistEvent ev;
	history(h, &ev, H_SETSIZE, HISTORY_SIZE);
	history(h, &ev, H_SETUNIQUE, 1);
	if (history_path && *history_path) {
		snprintf(in->history_path, sizeof in->history_path, "%s", history_path);
		history(h, &ev, H_LOAD, in->history_path); /* none yet is fine */
	}
	el_set(el, EL_CLIENTDATA, in);
	el_set(el, EL_EDITOR, "emacs");
	el_set(el, EL_HIST, history, h);
	el_set(el, EL_PROMPT, prompt_of);
	el_source(el, NULL); /* ~/.editrc, as every libedit program reads it */
	return 0;
}

void chat_input_free(struct chat_input *in)
{
	if (in->hist) {
		HistEvent ev;
		if (in->history_path[0])
			history(in->hist, &ev, H_SAVE, in->history_path);
		history_end(in->hist);
	}
	if (in->el)
		el_end(in->el);
	free(in->line);
	memset(in, 0, sizeof *in);
}

/* One physical line without its line end into *line (owned by in, valid
 * until the next read) and *len. */
static int read_line(struct chat_input *in, const char *prompt, const char **line, size_t *len)
{
	if (in->tty) {
		in->prompt = prompt;
		/* The editor's terminal mode before the prompt shows: keys typed
		 * after it must not reach the kernel's line buffer, where a Ctrl-D
		 * would turn into a NUL byte once libedit switches modes. */
		el_set(in->el, EL_PREP_TERM, 1);
		int count = 0;
		errno = 0;
		const char *s = el_gets(in->el, &count);
		if (!s)
			return count < 0 && errno == EINTR ? CHAT_INPUT_CANCEL : CHAT_INPUT_EOF;
		*line = s;
		*len = (size_t)count;
	} else {
		errno = 0;
		ssize_t n = getline(&in->line, &in->line_cap, stdin);
		if (n < 0) {
			bool intr = ferror(stdin) && errno == EINTR;
			clearerr(stdin);
			return intr ? CHAT_INPUT_CANCEL : CHAT_INPUT_EOF;
		}
		*line = in->line;
		*len = (size_t)n;
	}
	if (*len > 0 && (*line)[*len - 1] == '\n')
		(*len)--;
	if (*len > 0 && (*line)[*len - 1] == '\r')
		(*len)--;
	return CHAT_INPUT_ENTRY;
}

/* Appends s[0..n) to the growing entry. */
static int put(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t c = (*len + n + 1) * 2;
		char *b = realloc(*buf, c);
		if (!b)
			return error_set(ENOMEM, "out of memory");
		*buf = b;
		*cap = c;
	}
	memcpy(*buf + *len, s, n);
	*len += n;
	(*buf)[*len] = 0;
	return 0;
}

static bool is_fence(const char *s, size_t n)
{
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	while (n > 0 && (*s == ' ' || *s == '\t')) {
		s++;
		n--;
	}
	return n == 3 && !memcmp(s, "\"\"\"", 3);
}

int chat_input_read(struct chat_input *in, char **text)
{
	*text = NULL;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	const char *line;
	size_t n;
	int r = read_line(in, PROMPT_FIRST, &line, &n), rc = 0;
	if (r != CHAT_INPUT_ENTRY)
		return r;
	bool multi = false;
	if (is_fence(line, n)) {
		multi = true;
		rc = put(&buf, &len, &cap, "", 0);
		for (bool first = true; !rc; first = false) {
			r = read_line(in, PROMPT_MORE, &line, &n);
			if (r != CHAT_INPUT_ENTRY || is_fence(line, n))
				break;
			if (!first)
				rc = put(&buf, &len, &cap, "\n", 1);
			rc = rc ? rc : put(&buf, &len, &cap, line, n);
		}
	} else {
		for (;;) {
			bool more = n > 0 && line[n - 1] == '\\';
			rc = put(&buf, &len, &cap, line, more ? n - 1 : n);
			if (rc || !more)
				break;
			multi = true;
			rc = put(&buf, &len, &cap, "\n", 1);
			if (rc || (r = read_line(in, PROMPT_MORE, &line, &n)) != CHAT_INPUT_ENTRY)
				break;
		}
	}
	if (rc || r == CHAT_INPUT_CANCEL) {
		free(buf);
		return rc ? rc : CHAT_INPUT_CANCEL;
	}
	/* End of input inside an entry ends the entry. */
	if (in->tty && !multi && len > 0) {
		HistEvent ev;
		history(in->hist, &ev, H_ENTER, buf);
	}
	*text = buf;
	return CHAT_INPUT_ENTRY;
}
