/*
 * cmd_logits — `colibri logits --model DIR --tokens 1,2,3 --out FILE
 * [--threads N] [--batch N] [--ram SIZE]`: teacher-forced logits of every
 * position as float32 little-endian [n_tokens, vocab], nothing else.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cmd.h"
#include "engine/forward.h"
#include "engine/session.h"
#include "storage/error.h"

static void logits_usage(FILE *f)
{
	fprintf(f, "usage: colibri logits --model DIR --tokens 1,2,3 --out FILE [--mtp-out FILE]%s\n"
		   "  Writes float32 little-endian logits [n_tokens, vocab] of a teacher-forced run;\n"
		   "  --mtp-out also writes the MTP module's [n_tokens - 1, vocab] (row t predicts token t+2).\n",
		SESSION_USAGE);
}

/* Runs the tokens in chunks of --batch and appends each chunk's logits to
 * OUT.tmp, renamed to OUT only when every row is written: memory stays at
 * one chunk of logits however long the input, and a failure leaves nothing. */
static int logits_write(struct session *s, const int32_t *tokens, int n, const char *out, float *hidden)
{
	size_t V = (size_t)s->model.cfg.vocab;
	int B = s->fwd.batch;
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof tmp, "%s.tmp", out);
	float *rows = malloc((size_t)B * V * sizeof(float));
	FILE *f = rows ? fopen(tmp, "wb") : NULL;
	int rc = 0;
	if (!rows)
		rc = error_set(ENOMEM, "out of memory for %d rows of logits", B);
	else if (!f)
		rc = error_set(errno, "%s: cannot create: %s", tmp, strerror(errno));
	for (int i = 0; !rc && i < n; i += B) {
		int len = n - i < B ? n - i : B;
		rc = forward_step(&s->fwd, tokens + i, len, rows, true);
		if (!rc && hidden)
			memcpy(hidden + (size_t)i * s->model.cfg.hidden, s->fwd.hidden,
			       (size_t)len * s->model.cfg.hidden * sizeof(float));
		if (!rc && fwrite(rows, sizeof(float) * V, (size_t)len, f) != (size_t)len)
			rc = error_set(EIO, "%s: write failed", tmp);
	}
	if (f && (fflush(f) != 0 || fsync(fileno(f)) != 0) && !rc)
		rc = error_set(errno, "%s: cannot flush: %s", tmp, strerror(errno));
	if (f)
		fclose(f);
	if (!rc && rename(tmp, out) != 0)
		rc = error_set(errno, "%s: cannot rename into place: %s", out, strerror(errno));
	if (rc && f)
		unlink(tmp);
	free(rows);
	return rc;
}

/* The MTP module's logits, teacher-forced: row t from the hidden state of
 * position t and token t+1, predicting token t+2; [n-1, vocab]. */
static int mtp_write(struct session *s, const int32_t *tokens, int n, const float *hidden, const char *out)
{
	size_t V = (size_t)s->model.cfg.vocab, H = (size_t)s->model.cfg.hidden;
	int B = s->fwd.batch;
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof tmp, "%s.tmp", out);
	if (s->model.n_mtp == 0)
		return error_set(EINVAL, "%s: the model has no MTP module for --mtp-out", s->opt.model_dir);
	float *rows = malloc((size_t)B * V * sizeof(float));
	FILE *f = rows ? fopen(tmp, "wb") : NULL;
	int rc = !rows ? error_set(ENOMEM, "out of memory") : !f ? error_set(errno, "%s: cannot create", tmp) : 0;
	for (int i = 0; !rc && i < n - 1; i += B) {
		int len = n - 1 - i < B ? n - 1 - i : B;
		rc = forward_mtp(&s->fwd, 0, hidden + (size_t)i * H, tokens + i + 1, len, i, rows, NULL);
		if (!rc && fwrite(rows, sizeof(float) * V, (size_t)len, f) != (size_t)len)
			rc = error_set(EIO, "%s: write failed", tmp);
	}
	if (f && fclose(f) != 0 && !rc)
		rc = error_set(EIO, "%s: write failed", tmp);
	if (!rc && rename(tmp, out) != 0)
		rc = error_set(errno, "%s: cannot rename into place", out);
	if (rc && f)
		unlink(tmp);
	free(rows);
	return rc;
}

int cmd_logits(int argc, char **argv)
{
	struct session_options so;
	session_options_default(&so);
	const char *tokens_arg = NULL, *out = NULL, *mtp_out = NULL;
	static const struct option opts[] = {
		SESSION_LONG_OPTIONS,
		{ "tokens", required_argument, 0, 't' },
		{ "out", required_argument, 0, 'o' },
		{ "mtp-out", required_argument, 0, 'M' },
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
		else if (ch == 'M')
			mtp_out = optarg;
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
	so.logits_rows = so.batch;
	if (session_open(&s, &so, n) != 0) {
		free(tokens);
		session_close(&s);
		return cmd_fail("cannot load the model");
	}
	float *hidden = mtp_out ? malloc((size_t)n * s.model.cfg.hidden * sizeof(float)) : NULL;
	int rc = mtp_out && !hidden ? error_set(ENOMEM, "out of memory") : logits_write(&s, tokens, n, out, hidden);
	if (!rc && mtp_out)
		rc = mtp_write(&s, tokens, n, hidden, mtp_out);
	free(hidden);
	if (!rc)
		rc = session_report(&s, stderr);
	free(tokens);
	session_close(&s);
	return rc ? cmd_fail("logits failed") : 0;
}
