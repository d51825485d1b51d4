/*
 * logits_util — the fixtures' token lists and `colibri logits` runs, for
 * the tests that compare a container's logits with a reference or with
 * another container's. Failures fail the calling test.
 */
#ifndef COLIBRI_TESTS_LOGITS_UTIL_H
#define COLIBRI_TESTS_LOGITS_UTIL_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/test_util.h"

/* ref/<name>.tokens of the fixtures: comma-separated ids (malloc'd). */
static inline char *lu_read_tokens(const char *name)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/ref/%s.tokens", tu_fixtures(), name);
	char *t = tu_read(path, NULL);
	cr_assert_not_null(t, "missing %s (run tools/make_fixtures.sh)", path);
	t[strcspn(t, "\r\n")] = 0;
	return t;
}

/* Runs `colibri logits` on model with extra options, writing into the
 * folder dir; returns the logits (malloc'd) and their count. */
static inline float *lu_logits(const char *dir, const char *model, const char *tokens, const char *extra,
			       size_t *n_floats)
{
	char out[4200];
	static int seq;
	snprintf(out, sizeof out, "%s/logits-%d.f32", dir, seq++);
	int rc = tu_sh("'%s' logits --model '%s' --tokens %s --out '%s' %s", tu_colibri(), model, tokens, out, extra);
	cr_assert_eq(rc, 0, "logits %s %s failed", model, extra);
	size_t len;
	float *l = (float *)tu_read(out, &len);
	cr_assert_not_null(l);
	*n_floats = len / sizeof(float);
	return l;
}

static inline int lu_argmax(const float *x, int n)
{
	int b = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[b])
			b = i;
	return b;
}

/* The number of ids in a comma-separated list. */
static inline int lu_count_tokens(const char *tokens)
{
	int n = 1;
	for (const char *p = tokens; *p; p++)
		n += *p == ',';
	return n;
}

/* Mean KL of softmax(b) from softmax(a) over the T positions of two
 * logits arrays of n floats, and the share of positions whose argmax
 * agrees. */
static inline double lu_mean_kl(const float *a, const float *b, size_t n, int T, double *top1)
{
	int V = (int)(n / (size_t)T);
	double kl_sum = 0, agree = 0;
	for (int t = 0; t < T; t++) {
		const float *x = a + (size_t)t * V, *y = b + (size_t)t * V;
		double mx = -INFINITY, my = -INFINITY, sx = 0, sy = 0, kl = 0;
		for (int v = 0; v < V; v++) {
			mx = fmax(mx, x[v]);
			my = fmax(my, y[v]);
		}
		for (int v = 0; v < V; v++) {
			sx += exp(x[v] - mx);
			sy += exp(y[v] - my);
		}
		for (int v = 0; v < V; v++) {
			double lp = x[v] - mx - log(sx), lq = y[v] - my - log(sy);
			kl += exp(lp) * (lp - lq);
		}
		kl_sum += kl;
		agree += lu_argmax(x, V) == lu_argmax(y, V);
	}
	*top1 = agree / T;
	return kl_sum / T;
}

#endif
