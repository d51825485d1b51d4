/*
 * cli_alias — the table of llama.cpp's option names and the argv rewrite
 * that applies it (cli_alias.h). Only names whose meaning is the same here
 * are aliases; a few llama.cpp options with no counterpart are accepted,
 * with a note (-ngl) or without (--jinja).
 */
#include "engine/cli/cli_alias.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


enum alias_kind {
	ALIAS_RENAME,        /* our option under llama.cpp's name */
	ALIAS_GRAMMAR,       /* --grammar: GBNF text when it holds "::=" (llama.cpp's), else a file (ours) */
	ALIAS_SCHEMA_FILE,   /* -jf FILE: our --json-schema, which reads a value starting with '{' as JSON */
	ALIAS_GPU_LAYERS,    /* -ngl N: accepted, nothing to offload; a note says so */
	ALIAS_JINJA,         /* --jinja: accepted, templates are always rendered; takes no value */
};

struct alias {
	const char *names;   /* llama.cpp's spellings, space-separated */
	const char *ours;    /* ours, space-separated: the first the command has is taken */
	enum alias_kind kind;
};

/* Where llama.cpp and colibri spell an option the same (--temp, --top-k,
 * --top-p, --min-p, --repeat-penalty, --repeat-last-n, --presence-penalty,
 * --frequency-penalty, --threads, --seed, --host, --port, --api-key,
 * --api-key-file, --parallel, --model, --prompt, --chat-template,
 * --chat-template-file) there is nothing to rewrite. `-p` and `-f` are
 * llama-tokenize's too, hence tokenize's --text and --file after run's
 * --prompt and --prompt-file. */
static const struct alias aliases[] = {
	{ "-m", "--model", ALIAS_RENAME },
	{ "-p", "--prompt --text", ALIAS_RENAME },
	{ "-f --file", "--prompt-file --file", ALIAS_RENAME },
	{ "-n --n-predict --predict", "-n", ALIAS_RENAME },
	{ "-c --ctx-size", "--ctx", ALIAS_RENAME },
	{ "-t", "--threads", ALIAS_RENAME },
	{ "-s", "--seed", ALIAS_RENAME },
	{ "-np", "--parallel", ALIAS_RENAME },
	{ "--temperature", "--temp", ALIAS_RENAME },
	{ "-sys --system-prompt", "--system", ALIAS_RENAME },
	{ "--grammar", "--grammar-text --grammar", ALIAS_GRAMMAR },
	{ "--grammar-file", "--grammar", ALIAS_RENAME },
	{ "-j", "--json-schema", ALIAS_RENAME },
	{ "-jf --json-schema-file", "--json-schema", ALIAS_SCHEMA_FILE },
	{ "-a --alias", "--model-id", ALIAS_RENAME },
	{ "-ngl --n-gpu-layers --gpu-layers", "", ALIAS_GPU_LAYERS },
	{ "--jinja", "", ALIAS_JINJA },
};

/* A command line the command cannot run, said as cmd_usage_error says it
 * (main.c, which the test binaries do not link). */
static int refuse(const char *cmd, const char *reason)
{
	fprintf(stderr, "colibri %s: %s (colibri %s --help lists the options)\n", cmd, reason, cmd);
	return 2;
}

/* The last call's command line: the pointer array, then the strings made
 * for it. Kept until the next call, so the commands free nothing. */
static char **alias_argv;

struct walk {
	const char *cmd;              /* NULL: quiet and lenient (MPI ranks 1..) */
	const char *shortopts;
	const struct option *longopts;
	char **argv;                  /* the command line being written */
	int argc;
	char *pool, *pool_end;        /* room for the strings it makes */
};

static void emit(struct walk *w, char *s)
{
	w->argv[w->argc++] = s;
}

/* Appends a copy of a followed by b (NULL for none) to the line. The pool
 * is sized for the worst case in cli_alias_apply. */
static void emit_copy(struct walk *w, const char *a, const char *b)
{
	size_t na = strlen(a), nb = b ? strlen(b) : 0;
	if (w->pool + na + nb + 1 > w->pool_end)
		abort(); /* a bug in the bound below, not an input error */
	char *s = w->pool;
	memcpy(s, a, na);
	memcpy(s + na, b ? b : "", nb);
	s[na + nb] = 0;
	w->pool += na + nb + 1;
	emit(w, s);
}

/* Whether word is one of the space-separated words of list. */
static bool in_list(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, " ");
		if (len == n && !strncmp(p, word, n))
			return true;
		p += len;
		p += *p == ' ';
	}
	return false;
}

/* 0: c is no short option of the command; 1: a flag; 2: it takes a value;
 * 3: an optional value (attached only). */
static int short_arity(const char *shortopts, char c)
{
	const char *s = shortopts;
	while (*s == '+' || *s == '-' || *s == ':')
		s++;
	if (c == ':' || !(s = strchr(s, c)))
		return 0;
	return s[1] != ':' ? 1 : s[2] == ':' ? 3 : 2;
}

/* The option getopt_long takes for --name[0..n): the exact match, else the
 * one option the name abbreviates; NULL for none or several. */
static const struct option *long_find(const struct option *opts, const char *name, size_t n)
{
	const struct option *hit = NULL;
	int hits = 0;
	for (const struct option *o = opts; o && o->name; o++) {
		if (strncmp(o->name, name, n))
			continue;
		if (strlen(o->name) == n)
			return o;
		hit = o;
		hits++;
	}
	return hits == 1 ? hit : NULL;
}

/* Whether the command has the option spelled s ("--ctx" or "-n"). */
static bool has(const struct walk *w, const char *s)
{
	if (s[1] != '-')
		return short_arity(w->shortopts, s[1]) != 0;
	for (const struct option *o = w->longopts; o && o->name; o++)
		if (!strcmp(o->name, s + 2))
			return true;
	return false;
}

/* The first of the space-separated spellings in list the command has,
 * copied into out; false when it has none. */
static bool first_had(const struct walk *w, const char *list, char *out, size_t len)
{
	for (const char *p = list; *p;) {
		size_t n = strcspn(p, " ");
		if (n < len) {
			memcpy(out, p, n);
			out[n] = 0;
			if (has(w, out))
				return true;
		}
		p += n;
		p += *p == ' ';
	}
	return false;
}

/* llama.cpp's alias al, spelled key, with its value v (NULL for --jinja). */
static int alias_take(struct walk *w, const struct alias *al, const char *key, char *v)
{
	char t[32];
	switch (al->kind) {
	case ALIAS_RENAME:
	case ALIAS_SCHEMA_FILE:
	case ALIAS_GRAMMAR:
		if (al->kind == ALIAS_GRAMMAR)
			snprintf(t, sizeof t, "%s", strstr(v, "::=") ? "--grammar-text" : "--grammar");
		if (al->kind == ALIAS_GRAMMAR ? !has(w, t) : !first_had(w, al->ours, t, sizeof t)) {
			if (!w->cmd)
				return 0;
			char msg[160];
			if (in_list(al->ours, key))
				snprintf(msg, sizeof msg, "unknown option %s", key);
			else
				snprintf(msg, sizeof msg, "%s (llama.cpp's name) is our %.*s, which %s does not take", key,
					 (int)(al->kind == ALIAS_GRAMMAR ? strlen(t) : strcspn(al->ours, " ")),
					 al->kind == ALIAS_GRAMMAR ? t : al->ours, w->cmd);
			return refuse(w->cmd, msg);
		}
		emit_copy(w, t, NULL);
		/* A schema file whose name starts with '{' would be read as the
		 * schema itself. */
		if (al->kind == ALIAS_SCHEMA_FILE && v[0] == '{')
			emit_copy(w, "./", v);
		else
			emit(w, v);
		return 0;
	case ALIAS_GPU_LAYERS:
		if (w->cmd)
			fprintf(stderr, "colibri: %s %s ignored: colibri has no GPU offload yet; it keeps the dense "
					"weights in RAM and streams the routed experts from disk (--ram sets the RAM "
					"it uses)\n", key, v);
		return 0;
	case ALIAS_JINJA:
		return 0;
	}
	return 0;
}

/* One option at argv[*i] (an argument starting with '-', not "-" or "--"),
 * with the value that goes with it; *i is left at the last argument taken. */
static int option_take(struct walk *w, char **argv, int argc, int *i)
{
	char *a = argv[*i];
	bool dashes = a[1] == '-';
	char *eq = dashes ? strchr(a, '=') : NULL;
	size_t n = eq ? (size_t)(eq - a) : strlen(a);
	char key[64];
	if (n >= sizeof key) { /* no option is that long: getopt names it */
		emit(w, a);
		return 0;
	}
	/* llama.cpp reads --ctx_size as --ctx-size. */
	memcpy(key, a, n);
	key[n] = 0;
	for (char *p = key + 2; dashes && *p; p++)
		*p = *p == '_' ? '-' : *p;
	for (size_t k = 0; k < sizeof aliases / sizeof aliases[0]; k++) {
		const struct alias *al = &aliases[k];
		if (!in_list(al->names, key))
			continue;
		bool valued = al->kind != ALIAS_JINJA;
		char *v = eq ? eq + 1 : NULL;
		if (!valued && v) {
			if (!w->cmd)
				return 0;
			char msg[128];
			snprintf(msg, sizeof msg, "%s takes no value", key);
			return refuse(w->cmd, msg);
		}
		if (valued && !v) {
			if (*i + 1 >= argc) {
				if (!w->cmd)
					return 0;
				char msg[128];
				snprintf(msg, sizeof msg, "%s needs a value", key);
				return refuse(w->cmd, msg);
			}
			v = argv[++*i];
		}
		return alias_take(w, al, key, v);
	}
	if (!dashes) {
		/* getopt_long would take -ngl as -n with the value "gl". */
		bool letters = (a[1] >= 'a' && a[1] <= 'z') || (a[1] >= 'A' && a[1] <= 'Z');
		letters = letters && ((a[2] >= 'a' && a[2] <= 'z') || (a[2] >= 'A' && a[2] <= 'Z'));
		if (letters && w->cmd) {
			char msg[128];
			snprintf(msg, sizeof msg, "unknown option %.60s", a);
			return refuse(w->cmd, msg);
		}
		emit(w, a);
		for (const char *p = a + 1; *p; p++) {
			int arity = short_arity(w->shortopts, *p);
			if (arity == 2 && !p[1] && *i + 1 < argc)
				emit(w, argv[++*i]);
			if (arity != 1)
				break;
		}
		return 0;
	}
	const struct option *o = long_find(w->longopts, key + 2, n - 2);
	if (o && strncmp(key, a, n))
		emit_copy(w, key, eq); /* --top_k as --top-k */
	else
		emit(w, a);
	if (o && o->has_arg == required_argument && !eq && *i + 1 < argc)
		emit(w, argv[++*i]);
	return 0;
}

int cli_alias_apply(const char *cmd, int *argc, char ***argv, const char *shortopts,
		    const struct option *longopts)
{
	/* An argument becomes at most two (--ctx-size=N: --ctx, N), and a made
	 * string is at most the argument plus "./" or an option's name. */
	size_t ptrs = 2 * (size_t)*argc + 1, chars = 0;
	for (int i = 0; i < *argc; i++)
		chars += strlen((*argv)[i]) + 40;
	char **line = malloc(ptrs * sizeof *line + chars);
	if (!line) {
		fprintf(stderr, "colibri: out of memory\n");
		return 2;
	}
	struct walk w = { .cmd = cmd, .shortopts = shortopts, .longopts = longopts, .argv = line,
			  .pool = (char *)(line + ptrs), .pool_end = (char *)(line + ptrs) + chars };
	int rc = 0, i = 0;
	if (*argc > 0)
		emit(&w, (*argv)[i++]);
	for (; !rc && i < *argc; i++) {
		char *a = (*argv)[i];
		if (!strcmp(a, "--")) {
			while (i < *argc)
				emit(&w, (*argv)[i++]);
			break;
		}
		if (a[0] != '-' || !a[1])
			emit(&w, a);
		else
			rc = option_take(&w, *argv, *argc, &i);
	}
	if (rc) {
		free(line);
		return rc;
	}
	w.argv[w.argc] = NULL;
	free(alias_argv);
	alias_argv = line;
	*argc = w.argc;
	*argv = line;
	return 0;
}
