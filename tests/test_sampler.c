/*
 * test_sampler — sampling (engine/decode/sampler.c) checked against its
 * definition, not only for reproducibility:
 *  - for each setting (temperature 0.5, 1 and 2; top-k 1, 3 and vocab - 1;
 *    top-p tiny, at a tie, at several values and exactly at a cumulative
 *    boundary; top-k with top-p; presence and frequency penalties, alone and
 *    before the other stages), N_DRAWS tokens drawn from fixed logits are
 *    compared with the distribution worked out here in double precision from
 *    the definitions, by Pearson's chi-square at significance P_FAIL; a token
 *    of probability 0 must never be drawn, and sampler_probs must give the
 *    exact distribution to 1e-6;
 *  - greedy: temperature 0 gives the argmax (lowest id on ties) every time;
 *  - speculative sampling's verify step (sampler_spec_verify), a draft drawn
 *    from q and checked against p: the output is distributed as p and the
 *    acceptance rate is sum_v min(p_v, q_v), for a generic pair, q without
 *    mass where p has some, p == q, p without mass where q has some, and a
 *    one-hot p;
 *  - power, worked out analytically: for each wrong definition the issue
 *    names (temperature applied as T^2 or 1/T, top-k keeping k + 1 or k - 1,
 *    top-p keeping one token more or fewer, a penalty applied twice) and for
 *    a verify step that accepts every draft or redraws from p, the
 *    statistic a sampler built that way would show exceeds the threshold by
 *    five standard deviations, or it would draw a token of probability 0
 *    (at least 30 expected), so the comparison would catch it;
 *  - edge cases: a top-p below 1/n where the most probable token is not the
 *    first keeps that token; a uniform draw past the float sum of the
 *    probabilities never picks a token of probability 0; a rejected draft
 *    whose residual max(0, p - q) is zero by rounding draws from p.
 *
 * The definitions, in the order they apply (transformers' warpers, OpenAI's
 * penalties): penalties logit -= presence * (count > 0) + frequency * count;
 * temperature divides the logits (0: greedy, the argmax); top-k keeps
 * exactly k tokens, the lower id on ties (as llama.cpp; transformers' warper
 * keeps every token tied with the k-th); top-p keeps the smallest set of the
 * most probable tokens whose probability reaches top_p, the lower id first
 * on ties, the first token always, on the probabilities after temperature
 * (llama.cpp's default chain applies temperature last, after top-p).
 *
 * Adding a stage (min-p, issue 39, which colibri does not have yet) takes a
 * field in struct setting, its step in exact_dist where the sampler applies
 * it (transformers: after top-p, drop tokens under min_p times the largest
 * probability and renormalise), its wrong variants in enum wrong (say
 * comparing with min_p alone, not times the largest), and a Test like
 * top_p's whose expect_caught names them.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/decode/sampler.h"

#define V_MAX 64
#define N_DRAWS 100000
#define P_FAIL 1e-6       /* a correct sampler fails one seed in a million */
#define MIN_EXPECTED 5.0  /* cells expected to hold fewer draws are pooled */
#define SUPPORT_DRAWS 30.0 /* expected draws off the support that a wrong sampler cannot hide */

/* The main logits: a spread over [-2, 1.6] with ties at ranks 3-4 (ids 2
 * and 8, at top-k 3 and at top-p 0.25) and at ranks 7-8 (ids 3 and 21). */
static const float logits32[32] = {
	0.30f, -1.20f, 1.10f, 0.85f, -0.40f, 1.60f, 0.05f, -1.90f,
	1.10f, 1.35f, -0.75f, 0.60f, -2.00f, 0.20f, -0.10f, 0.95f,
	-1.50f, 0.45f, -0.95f, 0.70f, -0.25f, 0.85f, -1.65f, 0.10f,
	-0.55f, 1.00f, -1.35f, 0.35f, -0.05f, -1.05f, 0.55f, -1.80f,
};

/* Generated-token counts for the penalty cases: the top token, a tie and
 * the least likely token among them. */
static const uint16_t counts32[32] = { [5] = 3, [9] = 1, [2] = 2, [12] = 4, [20] = 1, [21] = 6 };

struct setting {
	float temp;
	int32_t top_k;
	float top_p;
	float presence, frequency;
	const uint16_t *counts; /* NULL: no penalties */
};

/* The wrong definitions whose detection the test proves. */
enum wrong {
	WRONG_NONE,
	WRONG_TEMP_SQUARED,
	WRONG_TEMP_INVERSE,
	WRONG_TOPK_MORE,
	WRONG_TOPK_FEWER,
	WRONG_TOPP_MORE,
	WRONG_TOPP_FEWER,
	WRONG_PENALTY_TWICE,
	WRONG_COUNT,
};

static const char *const wrong_name[WRONG_COUNT] = {
	"none", "temperature T^2", "temperature 1/T", "top-k k+1", "top-k k-1",
	"top-p one more", "top-p one fewer", "penalty twice",
};

/* Ids ordered by value, descending, the lower id first on ties. */
static void rank_desc(int *order, const double *val, int n)
{
	for (int i = 0; i < n; i++) {
		int j = i;
		while (j > 0 && val[order[j - 1]] < val[i]) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = i;
	}
}

/* The exact distribution out[V] of setting st over logits, in double, from
 * the definitions; with w, the distribution of that wrong definition.
 * Returns false when w does not apply to st (its stage is off, or k + 1,
 * k - 1 or the nucleus one more or fewer falls outside 1..n). */
static bool exact_dist(double *out, const float *logits, int V, const struct setting *st, enum wrong w)
{
	double x[V_MAX];
	int order[V_MAX];
	bool applies = w == WRONG_NONE;
	for (int v = 0; v < V; v++)
		x[v] = logits[v];
	if (st->counts) {
		double times = w == WRONG_PENALTY_TWICE ? 2 : 1;
		for (int v = 0; v < V; v++) {
			double c = st->counts[v];
			x[v] -= times * ((double)st->presence * (c > 0) + (double)st->frequency * c);
			applies |= w == WRONG_PENALTY_TWICE && c > 0 && (st->presence != 0 || st->frequency != 0);
		}
	}
	memset(out, 0, (size_t)V * sizeof *out);
	rank_desc(order, x, V);
	if (st->temp == 0) {
		out[order[0]] = 1;
		return applies;
	}
	double T = st->temp;
	if (w == WRONG_TEMP_SQUARED || w == WRONG_TEMP_INVERSE) {
		T = w == WRONG_TEMP_SQUARED ? T * T : 1 / T;
		applies = T != st->temp;
	}
	int n = V;
	if (st->top_k > 0 && st->top_k < V) {
		n = st->top_k;
		if (w == WRONG_TOPK_MORE || w == WRONG_TOPK_FEWER) {
			n += w == WRONG_TOPK_MORE ? 1 : -1;
			applies = n >= 1 && n <= V;
		}
	}
	if (n < 1 || n > V)
		return false;
	double p[V_MAX], sum = 0;
	for (int i = 0; i < n; i++)
		sum += p[i] = exp((x[order[i]] - x[order[0]]) / T);
	for (int i = 0; i < n; i++)
		p[i] /= sum;
	if (st->top_p < 1) {
		/* p[] follows order[], which ranks by probability as well. */
		double cum = 0;
		int m = n;
		for (int i = 0; i < n; i++) {
			cum += p[i];
			if (cum >= st->top_p) {
				m = i + 1;
				break;
			}
		}
		if (w == WRONG_TOPP_MORE || w == WRONG_TOPP_FEWER) {
			m += w == WRONG_TOPP_MORE ? 1 : -1;
			applies = m >= 1 && m <= n;
		}
		if (m < 1 || m > n)
			return false;
		n = m;
		sum = 0;
		for (int i = 0; i < n; i++)
			sum += p[i];
		for (int i = 0; i < n; i++)
			p[i] /= sum;
	}
	for (int i = 0; i < n; i++)
		out[order[i]] = p[i];
	return applies;
}

/* The regularised upper incomplete gamma function Q(a, x): the series of
 * P below a + 1, Lentz's continued fraction above (Numerical Recipes'
 * gammq). */
static double gamma_q(double a, double x)
{
	if (x <= 0)
		return 1;
	double front = exp(-x + a * log(x) - lgamma(a));
	if (x < a + 1) {
		double ap = a, del = 1 / a, sum = del;
		for (int i = 0; i < 10000 && fabs(del) > fabs(sum) * 1e-16; i++) {
			ap += 1;
			del *= x / ap;
			sum += del;
		}
		return 1 - sum * front;
	}
	const double tiny = 1e-300;
	double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
	for (int i = 1; i < 10000; i++) {
		double an = -i * (i - a);
		b += 2;
		d = an * d + b;
		d = fabs(d) < tiny ? tiny : d;
		c = b + an / c;
		c = fabs(c) < tiny ? tiny : c;
		d = 1 / d;
		double del = d * c;
		h *= del;
		if (fabs(del - 1) < 1e-16)
			break;
	}
	return front * h;
}

/* P(X >= stat) for X chi-square with df degrees of freedom. */
static double chi2_pvalue(double stat, int df)
{
	return gamma_q(df / 2.0, stat / 2.0);
}

/* The statistic a correct sampler exceeds with probability P_FAIL. */
static double chi2_critical(int df)
{
	double lo = 0, hi = 1000;
	for (int i = 0; i < 200; i++) {
		double mid = (lo + hi) / 2;
		if (chi2_pvalue(mid, df) > P_FAIL)
			lo = mid;
		else
			hi = mid;
	}
	return hi;
}

/* Pearson's statistic of the draws obs[V] against probabilities p[V] over
 * n draws, over the cells where p > 0; *df gets its degrees of freedom.
 * Cells expected to hold fewer than MIN_EXPECTED draws are pooled, as the
 * chi-square law of the statistic needs; a pool still under that joins the
 * smallest other cell. */
static double chi2_stat(const double *obs, const double *p, int V, double n, int *df)
{
	double e[V_MAX + 1], o[V_MAX + 1], pool_e = 0, pool_o = 0;
	int m = 0;
	for (int v = 0; v < V; v++) {
		if (!(p[v] > 0))
			continue;
		if (n * p[v] < MIN_EXPECTED) {
			pool_e += n * p[v];
			pool_o += obs[v];
		} else {
			e[m] = n * p[v];
			o[m++] = obs[v];
		}
	}
	if (pool_e > 0 && (pool_e >= MIN_EXPECTED || m == 0)) {
		e[m] = pool_e;
		o[m++] = pool_o;
	} else if (pool_e > 0) {
		int s = 0;
		for (int i = 1; i < m; i++)
			if (e[i] < e[s])
				s = i;
		e[s] += pool_e;
		o[s] += pool_o;
	}
	double stat = 0;
	for (int i = 0; i < m; i++)
		stat += (o[i] - e[i]) * (o[i] - e[i]) / e[i];
	*df = m - 1;
	return stat;
}

/* The draws count[V] agree with p[V]: none where p is 0, and the
 * chi-square statistic below the P_FAIL threshold. */
static void expect_counts_match(const char *name, const double *count, const double *p, int V)
{
	double n = 0;
	for (int v = 0; v < V; v++) {
		n += count[v];
		if (p[v] == 0)
			cr_expect_eq(count[v], 0, "%s: token %d has probability 0 but was drawn %.0f times", name, v,
				     count[v]);
	}
	int df;
	double stat = chi2_stat(count, p, V, n, &df);
	if (df < 1)
		return; /* one cell: the zero check above is the whole test */
	double pv = chi2_pvalue(stat, df);
	cr_expect(isfinite(stat) && pv >= P_FAIL, "%s: chi-square %.2f with %d df, p = %.3g < %g", name, stat, df, pv,
		  P_FAIL);
}

/* Whether draws from q would fail the comparison with p almost surely: at
 * least SUPPORT_DRAWS expected where p is 0, or the expected statistic 5
 * standard deviations (noncentral chi-square) above the threshold. */
static bool detects(const double *p, const double *q, int V, double n, double *margin)
{
	double off = 0, eq[V_MAX];
	for (int v = 0; v < V; v++) {
		off += p[v] == 0 ? q[v] : 0;
		eq[v] = n * q[v];
	}
	int df;
	double lambda = chi2_stat(eq, p, V, n, &df);
	if (df < 1)
		lambda = 0;
	double crit = df < 1 ? INFINITY : chi2_critical(df);
	*margin = df + lambda - 5 * sqrt(2 * (df + 2 * lambda)) - crit;
	return n * off >= SUPPORT_DRAWS || *margin > 0;
}

/* N_DRAWS tokens of setting st over logits into count[V], penalised as
 * batch.c's sample_slot does for each step. */
static void draw_counts(double *count, const float *logits, int V, const struct setting *st, uint64_t seed)
{
	struct sampler s;
	float x[V_MAX];
	cr_assert_eq(sampler_init(&s, V, st->temp, st->top_k, st->top_p, seed), 0);
	memset(count, 0, (size_t)V * sizeof *count);
	for (int i = 0; i < N_DRAWS; i++) {
		memcpy(x, logits, (size_t)V * sizeof *x);
		if (st->counts)
			sampler_penalize(x, st->counts, V, st->presence, st->frequency);
		int32_t id = sampler_sample(&s, x);
		cr_assert(id >= 0 && id < V, "sampled id %d outside the vocabulary", id);
		count[id]++;
	}
	sampler_free(&s);
}

/* Total variation distance between p[V] and q[V]. */
static double tv_distance(const double *p, const double *q, int V)
{
	double tv = 0;
	for (int v = 0; v < V; v++)
		tv += fabs(p[v] - q[v]) / 2;
	return tv;
}

/* One setting against its definition: sampler_probs, the draws, and the
 * power of the comparison against each wrong definition that applies and
 * changes the distribution (k - 1 under a top-p that keeps fewer than k
 * changes nothing, for one). Returns the set of wrong definitions, as bits
 * 1 << w, that the comparison was shown to catch. */
static unsigned check_setting(const char *name, const float *logits, int V, const struct setting *st, uint64_t seed)
{
	double p[V_MAX], count[V_MAX];
	float x[V_MAX], probs[V_MAX];
	cr_assert(exact_dist(p, logits, V, st, WRONG_NONE));

	struct sampler s;
	cr_assert_eq(sampler_init(&s, V, st->temp, st->top_k, st->top_p, seed), 0);
	memcpy(x, logits, (size_t)V * sizeof *x);
	if (st->counts)
		sampler_penalize(x, st->counts, V, st->presence, st->frequency);
	sampler_probs(&s, x, probs);
	sampler_free(&s);
	for (int v = 0; v < V; v++) {
		cr_expect(isfinite(probs[v]), "%s: sampler_probs[%d] = %g", name, v, probs[v]);
		if (p[v] == 0)
			cr_expect_eq(probs[v], 0.0f, "%s: sampler_probs[%d] = %g, exact 0", name, v, probs[v]);
		else
			cr_expect(fabs(probs[v] - p[v]) <= 1e-6, "%s: sampler_probs[%d] = %.9g, exact %.9g", name, v,
				  probs[v], p[v]);
	}

	draw_counts(count, logits, V, st, seed);
	expect_counts_match(name, count, p, V);

	unsigned caught = 0;
	for (int w = WRONG_NONE + 1; w < WRONG_COUNT; w++) {
		double q[V_MAX], margin;
		if (!exact_dist(q, logits, V, st, (enum wrong)w) || tv_distance(p, q, V) < 1e-9)
			continue;
		bool ok = detects(p, q, V, N_DRAWS, &margin);
		cr_expect(ok, "%s: the test cannot tell a sampler with %s (5-sigma margin %.1f)", name, wrong_name[w],
			  margin);
		caught |= ok ? 1u << w : 0;
	}
	return caught;
}

/* The cases of one test, together, caught each wrong definition in want. */
static void expect_caught(const char *what, unsigned caught, unsigned want)
{
	for (int w = WRONG_NONE + 1; w < WRONG_COUNT; w++)
		cr_expect(!(want & 1u << w) || (caught & 1u << w), "%s: no case shows that %s would be caught", what,
			  wrong_name[w]);
}

#define BIT(w) (1u << (w))

/* How far top_p lies from every cumulative sum of st's distribution before
 * top-p: a case closer than float rounding has no well-defined nucleus. */
static double topp_margin(const float *logits, int V, const struct setting *st)
{
	struct setting all = *st;
	all.top_p = 1;
	double p[V_MAX], cum = 0, margin = INFINITY;
	int order[V_MAX];
	exact_dist(p, logits, V, &all, WRONG_NONE);
	rank_desc(order, p, V);
	for (int i = 0; i < V; i++) {
		cum += p[order[i]];
		margin = fmin(margin, fabs(cum - st->top_p));
	}
	return margin;
}

Test(sampler, chi2_helpers_match_closed_forms)
{
	/* With 2 df the tail is exp(-x/2); with 1 df it is erfc(sqrt(x/2)). */
	for (double x = 0.5; x < 60; x *= 1.7) {
		cr_expect(fabs(chi2_pvalue(x, 2) - exp(-x / 2)) <= 1e-12 * fmax(1, exp(-x / 2)) + 1e-300,
			  "Q(1, %g)", x / 2);
		cr_expect(fabs(chi2_pvalue(x, 1) - erfc(sqrt(x / 2))) <= 1e-9 * erfc(sqrt(x / 2)), "Q(1/2, %g)",
			  x / 2);
	}
	cr_expect(fabs(chi2_critical(2) - 2 * log(1 / P_FAIL)) < 1e-9, "critical value, 2 df: %.9g",
		  chi2_critical(2));
	/* With 1 df, erfc(sqrt(x / 2)) = 1e-6 at x = 23.928127 (z = 4.8916). */
	cr_expect(fabs(chi2_critical(1) - 23.928127) < 1e-5, "critical value, 1 df: %.9g", chi2_critical(1));
	/* The statistic of counts equal to their expectations is 0. */
	double p[3] = { 0.5, 0.25, 0.25 }, c[3] = { 500, 250, 250 };
	int df;
	cr_expect_eq(chi2_stat(c, p, 3, 1000, &df), 0.0);
	cr_expect_eq(df, 2);
}

Test(sampler, temperature)
{
	static const float temps[] = { 0.5f, 1.0f, 2.0f };
	unsigned caught = 0;
	for (int i = 0; i < 3; i++) {
		char name[128];
		snprintf(name, sizeof name, "temperature %g", temps[i]);
		struct setting st = { .temp = temps[i], .top_p = 1 };
		caught |= check_setting(name, logits32, 32, &st, 100 + i);
	}
	expect_caught("temperature", caught, BIT(WRONG_TEMP_SQUARED) | BIT(WRONG_TEMP_INVERSE));
}

Test(sampler, greedy_is_argmax)
{
	/* Ids 4 and 9 tie at the maximum: the lower id wins, at any top-k and
	 * top-p, and sampler_probs is one-hot there. */
	float x[16];
	for (int v = 0; v < 16; v++)
		x[v] = logits32[v];
	x[4] = x[9] = 2.5f;
	static const struct setting settings[] = {
		{ .temp = 0, .top_p = 1 },
		{ .temp = 0, .top_k = 3, .top_p = 0.5f },
	};
	for (int i = 0; i < 2; i++) {
		struct sampler s;
		float y[16], probs[16];
		cr_assert_eq(sampler_init(&s, 16, 0, settings[i].top_k, settings[i].top_p, 7), 0);
		for (int k = 0; k < 1000; k++) {
			memcpy(y, x, sizeof y);
			cr_assert_eq(sampler_sample(&s, y), 4, "greedy draw %d", k);
		}
		memcpy(y, x, sizeof y);
		sampler_probs(&s, y, probs);
		for (int v = 0; v < 16; v++)
			cr_expect_eq(probs[v], v == 4 ? 1.0f : 0.0f, "greedy sampler_probs[%d] = %g", v, probs[v]);
		sampler_free(&s);
	}
	/* With penalties the argmax is that of the penalised logits. */
	struct setting st = { .temp = 0, .top_p = 1, .presence = 0.5f, .counts = counts32 };
	expect_caught("greedy", check_setting("greedy with presence", logits32, 32, &st, 11), BIT(WRONG_PENALTY_TWICE));
}

Test(sampler, top_k)
{
	/* k = 3 ends at the tie of ids 2 and 8: id 2 is kept, id 8 never drawn. */
	static const int32_t ks[] = { 1, 3, 31 };
	unsigned caught = 0;
	for (int i = 0; i < 3; i++) {
		char name[128];
		snprintf(name, sizeof name, "top-k %d", ks[i]);
		struct setting st = { .temp = 1, .top_k = ks[i], .top_p = 1 };
		caught |= check_setting(name, logits32, 32, &st, 200 + i);
	}
	expect_caught("top-k", caught, BIT(WRONG_TOPK_MORE) | BIT(WRONG_TOPK_FEWER));
}

Test(sampler, top_p)
{
	/* 0.25 ends inside the tie of ids 2 and 8 (cumulative 0.198, then
	 * 0.265 and 0.332); 0.01 keeps the top token alone. */
	static const float ps[] = { 0.01f, 0.25f, 0.6f, 0.9f };
	unsigned caught = 0;
	for (int i = 0; i < 4; i++) {
		char name[128];
		snprintf(name, sizeof name, "top-p %g", ps[i]);
		struct setting st = { .temp = 1, .top_p = ps[i] };
		cr_assert(topp_margin(logits32, 32, &st) > 1e-4, "%s lies on a cumulative boundary", name);
		caught |= check_setting(name, logits32, 32, &st, 300 + i);
	}
	expect_caught("top-p", caught, BIT(WRONG_TOPP_MORE) | BIT(WRONG_TOPP_FEWER));
}

Test(sampler, top_p_exactly_at_boundary)
{
	/* Eight tied tokens of probability 1/8, exact in float and double:
	 * top-p 0.5 reaches the boundary exactly after four, which are all it
	 * keeps (the lower ids); a strict "cum > top_p" would keep five. */
	float x[32];
	for (int v = 0; v < 32; v++)
		x[v] = v % 4 == 1 ? 0.75f : -INFINITY;
	struct setting st = { .temp = 1, .top_p = 0.5f };
	expect_caught("top-p at the boundary", check_setting("top-p at the boundary", x, 32, &st, 400),
		      BIT(WRONG_TOPP_MORE) | BIT(WRONG_TOPP_FEWER));
	/* The same with a top-k that leaves six of them: 1/6 each, top-p 0.5
	 * reaches 0.5 after three. */
	st.top_k = 6;
	check_setting("top-k 6, top-p at the boundary", x, 32, &st, 401);
}

Test(sampler, top_p_tiny_keeps_the_most_probable)
{
	/* Probabilities 0.33, 0.34, 0.33 and top-p 0.01: the nucleus is id 1
	 * alone, though every probability falls under the prefilter's cut
	 * (1 - 0.01) / 2. */
	float x[3] = { logf(0.33f), logf(0.34f), logf(0.33f) };
	struct setting st = { .temp = 1, .top_p = 0.01f };
	expect_caught("top-p 0.01", check_setting("top-p 0.01 over 0.33, 0.34, 0.33", x, 3, &st, 500),
		      BIT(WRONG_TOPP_MORE));
	/* Sixteen near-uniform tokens, the most probable in the middle. */
	float y[16] = { 0 };
	y[7] = 0.05f;
	check_setting("top-p 0.01 over near-uniform 16", y, 16, &st, 501);
}

Test(sampler, top_k_with_top_p)
{
	/* The first keeps all 8 of its top-k set (cumulative 0.906 after 7),
	 * so k + 1, k - 1 and one fewer show; the second ends inside its set. */
	static const struct setting settings[] = {
		{ .temp = 1, .top_k = 8, .top_p = 0.95f },
		{ .temp = 0.7f, .top_k = 12, .top_p = 0.8f },
	};
	unsigned caught = 0;
	for (int i = 0; i < 2; i++) {
		char name[128];
		snprintf(name, sizeof name, "temperature %g, top-k %d, top-p %g", settings[i].temp, settings[i].top_k,
			 settings[i].top_p);
		cr_assert(topp_margin(logits32, 32, &settings[i]) > 1e-4, "%s lies on a cumulative boundary", name);
		caught |= check_setting(name, logits32, 32, &settings[i], 600 + i);
	}
	expect_caught("top-k with top-p", caught,
		      BIT(WRONG_TOPK_MORE) | BIT(WRONG_TOPK_FEWER) | BIT(WRONG_TOPP_MORE) | BIT(WRONG_TOPP_FEWER));
}

Test(sampler, penalties)
{
	static const struct setting settings[] = {
		{ .temp = 1, .top_p = 1, .presence = 0.8f, .counts = counts32 },
		{ .temp = 1, .top_p = 1, .frequency = 0.5f, .counts = counts32 },
		{ .temp = 1, .top_p = 1, .presence = 0.6f, .frequency = 0.3f, .counts = counts32 },
		{ .temp = 1, .top_p = 1, .presence = -0.5f, .frequency = -0.2f, .counts = counts32 },
		/* Penalties come first: they change which tokens top-k keeps. */
		{ .temp = 0.8f, .top_k = 6, .top_p = 0.9f, .presence = 0.4f, .frequency = 0.25f, .counts = counts32 },
	};
	unsigned caught = 0;
	for (int i = 0; i < 5; i++) {
		char name[128];
		snprintf(name, sizeof name, "presence %g, frequency %g, temperature %g, top-k %d, top-p %g",
			 settings[i].presence, settings[i].frequency, settings[i].temp, settings[i].top_k,
			 settings[i].top_p);
		if (settings[i].top_p < 1)
			cr_assert(topp_margin(logits32, 32, &settings[i]) > 1e-4, "%s lies on a cumulative boundary",
				  name);
		caught |= check_setting(name, logits32, 32, &settings[i], 700 + i);
	}
	expect_caught("penalties", caught, BIT(WRONG_PENALTY_TWICE));
}

Test(sampler, penalize_touches_only_generated_tokens)
{
	float x[32];
	memcpy(x, logits32, sizeof x);
	sampler_penalize(x, counts32, 32, 0.6f, 0.3f);
	for (int v = 0; v < 32; v++) {
		double c = counts32[v], want = logits32[v] - (c > 0 ? 0.6 + 0.3 * c : 0);
		if (c == 0)
			cr_expect_eq(x[v], logits32[v], "token %d was never generated but moved", v);
		else
			cr_expect(fabs(x[v] - want) <= 1e-6, "token %d: %.9g, want %.9g", v, x[v], want);
	}
}

/* The speculative step: the draft from q, verified against p, N_DRAWS
 * times. The output must be distributed as p, the acceptance rate must be
 * sum_v q_v min(1, p_v / q_v), and a verify step that accepts every draft
 * or redraws from p on rejection must be caught where it differs. */
static void check_spec(const char *name, const float *p, const float *q, int V, uint64_t seed)
{
	double pd[V_MAX], qd[V_MAX], sp = 0, sq = 0, accept = 0;
	for (int v = 0; v < V; v++) {
		sp += p[v];
		sq += q[v];
	}
	for (int v = 0; v < V; v++) {
		pd[v] = p[v] / sp;
		qd[v] = q[v] / sq;
		if (q[v] > 0)
			accept += qd[v] * fmin(1, (double)p[v] / q[v]);
	}
	struct sampler s;
	float pw[V_MAX];
	double count[V_MAX] = { 0 }, n_accepted = 0;
	cr_assert_eq(sampler_init(&s, V, 1, 0, 1, seed), 0);
	for (int i = 0; i < N_DRAWS; i++) {
		bool accepted;
		int32_t draft = sampler_draw(&s, q);
		cr_assert(draft >= 0 && draft < V && q[draft] > 0, "%s: draft %d has q = 0", name, draft);
		memcpy(pw, p, (size_t)V * sizeof *pw);
		int32_t id = sampler_spec_verify(&s, pw, q, draft, &accepted);
		cr_assert(id >= 0 && id < V, "%s: verified id %d outside the vocabulary", name, id);
		cr_assert(!accepted || id == draft, "%s: accepted %d but returned %d", name, draft, id);
		count[id]++;
		n_accepted += accepted;
	}
	sampler_free(&s);
	expect_counts_match(name, count, pd, V);
	/* Binomial acceptance, 5.3 sigma (two-sided ~1e-7); p == q accepts
	 * every draft (the float sums may put accept a rounding above 1). */
	accept = fmin(accept, 1);
	double sd = sqrt(N_DRAWS * accept * (1 - accept));
	cr_expect(fabs(n_accepted - N_DRAWS * accept) <= 5.3 * sd + 0.5, "%s: accepted %.0f of %d, expected %.1f",
		  name, n_accepted, N_DRAWS, N_DRAWS * accept);

	/* The wrong verify steps: the output q (accept everything), and
	 * min(p, q) + (1 - accept) p (redraw from p, not from p - q). */
	double wrong[2][V_MAX];
	for (int v = 0; v < V; v++) {
		wrong[0][v] = qd[v];
		wrong[1][v] = fmin(pd[v], qd[v]) + (1 - accept) * pd[v];
	}
	static const char *const wrong_names[2] = { "accepting every draft", "redrawing from p" };
	for (int k = 0; k < 2; k++) {
		double margin;
		if (tv_distance(wrong[k], pd, V) < 1e-9)
			continue; /* the same distribution for this pair: nothing to catch */
		cr_expect(detects(pd, wrong[k], V, N_DRAWS, &margin),
			  "%s: the test cannot tell a verify step %s (5-sigma margin %.1f)", name, wrong_names[k],
			  margin);
	}
}

/* softmax(logits / T) as floats, the tokens in [off, off + n) only. */
static void softmax_f(float *out, const float *logits, int V, double T, int off, int n)
{
	double mx = -INFINITY, sum = 0, e[V_MAX];
	for (int v = off; v < off + n; v++)
		mx = fmax(mx, logits[v]);
	for (int v = 0; v < V; v++) {
		e[v] = v >= off && v < off + n ? exp((logits[v] - mx) / T) : 0;
		sum += e[v];
	}
	for (int v = 0; v < V; v++)
		out[v] = (float)(e[v] / sum);
}

Test(sampler, spec_verify_reproduces_target)
{
	float p[32], q[32], rev[32];
	double pd[32];
	for (int v = 0; v < 32; v++)
		rev[v] = logits32[31 - v];

	softmax_f(p, logits32, 32, 1.0, 0, 32);
	softmax_f(q, rev, 32, 1.5, 0, 32);
	check_spec("generic p and q", p, q, 32, 800);

	/* q has no mass on ids 0..7, where p has a third of its own. */
	softmax_f(q, logits32, 32, 0.8, 8, 24);
	check_spec("q without mass where p has some", p, q, 32, 801);

	check_spec("p == q", p, p, 32, 802);

	/* The target after top-k 5 (a grammar's mask looks alike): no mass
	 * where the draft has most of its own. */
	struct setting st = { .temp = 1, .top_k = 5, .top_p = 1 };
	exact_dist(pd, logits32, 32, &st, WRONG_NONE);
	for (int v = 0; v < 32; v++)
		p[v] = (float)pd[v];
	softmax_f(q, rev, 32, 1.0, 0, 32);
	check_spec("p without mass where q has some", p, q, 32, 803);

	/* A greedy target: one-hot, so the output is always its argmax. */
	memset(p, 0, sizeof p);
	p[9] = 1;
	check_spec("one-hot p", p, q, 32, 804);
}

/* A generator state whose next uniform is the largest, 1 - 2^-24: the draw
 * that lands past a sum of probabilities rounded below 1. One state in 2^24
 * qualifies; this tries states in order. */
static bool largest_uniform_state(uint64_t *state)
{
	struct sampler s;
	bool found = false;
	float top = nextafterf(1.0f, 0.0f);
	cr_assert_eq(sampler_init(&s, 1, 1, 0, 1, 0), 0);
	for (uint64_t c = 0; c < (1ull << 28) && !found; c++) {
		s.rng = c;
		if (sampler_uniform(&s) == top) {
			*state = c;
			found = true;
		}
	}
	sampler_free(&s);
	return found;
}

Test(sampler, draw_past_the_sum_skips_zero_probability)
{
	/* A grammar's mask leaves the last token at -inf. When the float sum
	 * of the probabilities falls short of 1 and the uniform lands past it,
	 * the draw must still be a token of positive probability. */
	uint64_t state;
	if (!largest_uniform_state(&state))
		cr_skip_test("no generator state among the first 2^28 gives the largest uniform");
	enum { V = 64 };
	float x[V], y[V], probs[V];
	uint64_t lcg = 12345;
	struct sampler s;
	cr_assert_eq(sampler_init(&s, V, 1, 0, 1, 1), 0);
	for (int tries = 0; tries < 1000; tries++) {
		for (int v = 0; v < V - 1; v++) {
			lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
			x[v] = (float)(lcg >> 40) / 16777216.0f * 6 - 3;
		}
		x[V - 1] = -INFINITY;
		memcpy(y, x, sizeof y);
		sampler_probs(&s, y, probs);
		float acc = 0; /* in the order sampler_sample adds them */
		for (int v = 0; v < V; v++)
			acc += probs[v];
		if (acc >= 1)
			continue;
		s.rng = state;
		int32_t id = sampler_sample(&s, x);
		cr_expect(probs[id] > 0, "the draw past a sum of %.9g picked token %d of probability 0", acc, id);
		sampler_free(&s);
		return;
	}
	sampler_free(&s);
	cr_skip_test("no logits among 1000 tries sum their probabilities below 1 in float");
}

Test(sampler, spec_residual_without_mass_draws_from_p)
{
	/* p <= q everywhere and p[1] < q[1] by one rounding step: with the
	 * largest uniform the draft is rejected, and max(0, p - q) is zero. The
	 * redraw must come from p's support, never token 0 that p excludes. */
	uint64_t state;
	if (!largest_uniform_state(&state))
		cr_skip_test("no generator state among the first 2^28 gives the largest uniform");
	float p[4] = { 0, nextafterf(0.5f, 0), 0.5f, 0 }, q[4] = { 0, 0.5f, 0.5f, 0 };
	struct sampler s;
	bool accepted;
	cr_assert_eq(sampler_init(&s, 4, 1, 0, 1, 1), 0);
	s.rng = state;
	int32_t id = sampler_spec_verify(&s, p, q, 1, &accepted);
	cr_expect(!accepted, "the largest uniform should reject p/q = %.9g", nextafterf(0.5f, 0) / 0.5f);
	cr_expect(id == 1 || id == 2, "the residual redraw picked token %d, outside p's support", id);
	sampler_free(&s);
}
