/*
 * cmd_logits — `colibri logits --model DIR --tokens 1,2,3 --out FILE
 * [--threads N] [--batch N] [--ram SIZE]`: teacher-forced logits of every
 * position as float32 little-endian [n_tokens, vocab], nothing else.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cmd.h"
#include "engine/files.h"
#include "engine/forward.h"
#include "engine/session.h"
#include "storage/error.h"

static void logits_usage(FILE *f)
{
	fprintf(f, "usage: colibri logits --model DIR --tokens 1,2,3 --out FILE [--threads N] [--batch N]%s\n"
		   "  Writes float32 little-endian logits [n_tokens, vocab] of a teacher-forced run.\n",
		SESSION_USAGE);
}

int cmd_logits(int argc, char **argv)
{
	struct session_options so;
	session_options_default(&so);
	const char *tokens_arg = NULL, *out = NULL;
	static const struct option opts[] = {
		SESSION_LONG_OPTIONS,
		{ "tokens", required_argument, 0, 't' },
		{ "out", required_argument, 0, 'o' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int ch;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (ch == 't')
			tokens_arg = optarg;
		else if (ch == 'o')
			out = optarg;
		else if (ch == 'h') {
			logits_usage(stdout);
			return 0;
		} else if (session_option(&so, ch, optarg) != 0) {
			if (ch != '?')
				return cmd_fail("bad option");
			logits_usage(stderr);
			return 2;
		}
	}
	if (!so.model_dir || !tokens_arg || !out || optind != argc) {
		logits_usage(stderr);
		return 2;
	}
	int32_t *tokens = NULL;
	int n = 0;
	if (session_parse_tokens(tokens_arg, &tokens, &n) != 0)
		return cmd_fail("bad --tokens");
	struct session s;
	if (session_open(&s, &so, n) != 0) {
		free(tokens);
		session_close(&s);
		return cmd_fail("cannot load the model");
	}
	size_t bytes = (size_t)n * (size_t)s.model.cfg.vocab * sizeof(float);
	float *logits = malloc(bytes);
	int rc = logits ? forward_tokens(&s.fwd, tokens, n, logits, true)
			: error_set(ENOMEM, "cannot allocate %zu MiB of logits", bytes >> 20);
	if (!rc)
		rc = file_write_atomic(out, logits, bytes);
	if (!rc)
		session_report(&s, stderr);
	free(logits);
	free(tokens);
	session_close(&s);
	return rc ? cmd_fail("logits failed") : 0;
}
