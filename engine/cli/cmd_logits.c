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

#include "engine/cli/cli_alias.h"
#include "engine/cli/cmd.h"
#include "engine/cli/model_cache.h"
#include "engine/forward/forward.h"
#include "engine/decode/session.h"
#include "base/error.h"

static void logits_usage(FILE *f)
{
	fprintf(f, "usage: colibri logits --model DIR --tokens 1,2,3 --out FILE [--mtp-out FILE]%s\n"
		   "  Writes float32 little-endian logits [n_tokens, vocab] of a teacher-forced run;\n"
		   "  --mtp-out also writes the MTP module's [n_tokens - 1, vocab] (row t predicts token t+2).\n",
		SESSION_USAGE);
}

/* A file of float32 rows written as OUT.tmp and renamed to OUT only when
 * complete and synced: a failure leaves nothing. */
struct rows_file {
	FILE *f;
	const char *path;
	char tmp[PATH_MAX];
};

static int rows_open(struct rows_file *r, const char *path)
{
	r->path = path;
	snprintf(r->tmp, sizeof r->tmp, "%s.tmp", path);
	r->f = fopen(r->tmp, "wb");
	return r->f ? 0 : error_set(errno, "%s: cannot create: %s", r->tmp, strerror(errno));
}

static int rows_append(struct rows_file *r, const float *rows, int n, size_t vocab)
{
	if (fwrite(rows, sizeof(float) * vocab, (size_t)n, r->f) != (size_t)n)
		return error_set(EIO, "%s: write failed", r->tmp);
	return 0;
}

/* Publishes the file when rc is 0, else removes it; returns rc or the
 * first error of closing. */
static int rows_close(struct rows_file *r, int rc)
{
	if (!r->f)
		return rc;
	if ((fflush(r->f) != 0 || fsync(fileno(r->f)) != 0) && !rc)
		rc = error_set(errno, "%s: cannot flush: %s", r->tmp, strerror(errno));
	if (fclose(r->f) != 0 && !rc)
		rc = error_set(EIO, "%s: write failed", r->tmp);
	r->f = NULL;
	if (!rc && rename(r->tmp, r->path) != 0)
		rc = error_set(errno, "%s: cannot rename into place: %s", r->path, strerror(errno));
	if (rc)
		unlink(r->tmp);
	return rc;
}

/* Runs the tokens in chunks of --batch, appending each chunk's logits:
 * memory stays at one chunk of rows however long the input. With
 * mtp_out, each chunk's final hidden states also go through the MTP module
 * (row t from position t and token t+1, predicting token t+2; [n-1, vocab])
 * before the next chunk, as generate's prefill does. */
static int logits_write(struct session *s, const int32_t *tokens, int n, const char *out, const char *mtp_out)
{
	size_t V = (size_t)s->model.cfg.vocab;
	int B = s->fwd.batch;
	if (mtp_out && s->model.n_mtp == 0)
		return error_set(EINVAL, "%s: the model has no MTP module for --mtp-out", s->opt.model_dir);
	struct rows_file lf = { 0 }, mf = { 0 };
	float *rows = malloc((size_t)B * V * sizeof(float));
	int rc = rows ? rows_open(&lf, out) : error_set(ENOMEM, "out of memory for %d rows of logits", B);
	if (!rc && mtp_out)
		rc = rows_open(&mf, mtp_out);
	for (int i = 0; !rc && i < n; i += B) {
		int len = n - i < B ? n - i : B;
		rc = forward_step(&s->fwd, tokens + i, len, rows, true);
		rc = rc ? rc : rows_append(&lf, rows, len, V);
		int known = i + len < n ? len : len - 1; /* rows whose next token is given */
		if (!rc && mtp_out && known > 0) {
			rc = forward_mtp(&s->fwd, 0, s->fwd.hidden, tokens + i + 1, known, i, rows, NULL);
			rc = rc ? rc : rows_append(&mf, rows, known, V);
		}
	}
	rc = rows_close(&lf, rc);
	rc = rows_close(&mf, rc);
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
	if (cli_alias_apply("logits", &argc, &argv, "h", opts))
		return 2;
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
	if (model_cache_use(&so.model_dir))
		return cmd_fail("no model");
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
	int rc = logits_write(&s, tokens, n, out, mtp_out);
	if (!rc)
		rc = session_report(&s, stderr);
	free(tokens);
	session_close(&s);
	return rc ? cmd_fail("logits failed") : 0;
}
