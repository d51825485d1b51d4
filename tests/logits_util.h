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

/* How logits l differ from a reference r: the largest |l - r| over the
 * largest |r| of the same position (the row's scale), where it was, how
 * many positions' top-1 agree and how many values are not finite. */
struct lu_diff {
	double max_abs;  /* largest |l - r| over finite pairs */
	double max_rel;  /* largest |l - r| / max |r| of that row */
	size_t worst;    /* index of max_rel's logit */
	int top1_agree;  /* positions whose argmax agree */
	int first_disagree; /* the first position whose argmax differs, or -1 */
	int bad;         /* values of l or r that are NaN or infinite */
	size_t first_bad; /* the index of the first of them */
};

/* Measures l against r, both T rows of n / T floats. NaN never compares,
 * so a max over differences (fmax drops NaN) would pass {1, NaN} against
 * {1, 2}: non-finite values are counted first and apart. */
static inline struct lu_diff lu_diff_of(const float *l, const float *r, size_t n, int T)
{
	struct lu_diff d = { .first_disagree = -1 };
	size_t V = n / (size_t)T;
	for (size_t i = 0; i < n; i++)
		if (!isfinite(l[i]) || !isfinite(r[i]))
			if (d.bad++ == 0)
				d.first_bad = i;
	for (int t = 0; t < T; t++) {
		const float *x = l + (size_t)t * V, *y = r + (size_t)t * V;
		double scale = 0;
		for (size_t v = 0; v < V; v++)
			if (isfinite(y[v]) && fabs(y[v]) > scale)
				scale = fabs(y[v]);
		if (lu_argmax(x, (int)V) == lu_argmax(y, (int)V))
			d.top1_agree++;
		else if (d.first_disagree < 0)
			d.first_disagree = t;
		for (size_t v = 0; v < V; v++) {
			double diff = fabs((double)x[v] - (double)y[v]);
			if (!isfinite(diff))
				continue;
			if (diff > d.max_abs)
				d.max_abs = diff;
			double rel = scale > 0 ? diff / scale : diff;
			if (rel > d.max_rel) {
				d.max_rel = rel;
				d.worst = (size_t)t * V + v;
			}
		}
	}
	return d;
}

/* Compares logits l with a reference r, both T rows of n / T floats, and
 * fails the calling test when a value of either is NaN or infinite, a
 * row's top-1 differs, or some |l - r| exceeds rel_tol times the largest
 * |r| of its row. The scale is the row's, so the bound tracks the logits'
 * size: an error of 1e-4 relative fails a bound of 1e-5 whatever the
 * logits' magnitude. Returns what it measured. */
static inline struct lu_diff lu_expect_close(const char *what, const float *l, const float *r, size_t n, int T,
					     double rel_tol)
{
	cr_assert(T > 0 && n > 0 && n % (size_t)T == 0, "%s: %zu logits do not make %d rows", what, n, T);
	size_t V = n / (size_t)T;
	struct lu_diff d = lu_diff_of(l, r, n, T);
	cr_expect_eq(d.bad, 0, "%s: %d logits are NaN or infinite, the first at position %zu id %zu: %g, reference %g",
		     what, d.bad, d.first_bad / V, d.first_bad % V, l[d.first_bad], r[d.first_bad]);
	cr_expect_eq(d.top1_agree, T, "%s: top-1 differs at %d of %d positions, the first at %d", what,
		     T - d.top1_agree, T, d.first_disagree);
	cr_log_info("%s: max |diff| %.3g, %.3g of the row's largest logit (bound %.1g), top-1 %d/%d", what,
		    d.max_abs, d.max_rel, rel_tol, d.top1_agree, T);
	cr_expect_leq(d.max_rel, rel_tol, "%s: |diff| %.3g of the row's scale at position %zu id %zu (%.9g vs %.9g) "
		      "> bound %.1g", what, d.max_rel, d.worst / V, d.worst % V, l[d.worst], r[d.worst], rel_tol);
	return d;
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
