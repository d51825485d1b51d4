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
 *    exact distribution to 1e-6; min-p (issue 39) at several cuts and
 *    temperatures and after top-k and top-p; the repetition penalty (issue
 *    39), rewarding and penalising, over windows of the history, greedy and
 *    sampled, before presence and frequency;
 *  - the repetition penalty's arithmetic on single logits, hand-computed
 *    and in long double, and its window (repeat_last_n 0, 1, a part, all,
 *    -1, more than the history), each token once however often it repeats;
 *  - off values (min-p 0, repetition penalty 1 or 0, with a history)
 *    reproduce the sampler from before those stages bit for bit: its
 *    probabilities and 2000 draws, hashed;
 *  - greedy: temperature 0 gives the argmax (lowest id on ties) every time;
 *  - speculative sampling's verify step (sampler_spec_verify), a draft drawn
 *    from q and checked against p: the output is distributed as p and the
 *    acceptance rate is sum_v min(p_v, q_v), for a generic pair, q without
 *    mass where p has some, p == q, p without mass where q has some, and a
 *    one-hot p;
 *  - power, worked out analytically: for each wrong definition the issue
 *    names (temperature applied as T^2 or 1/T, top-k keeping k + 1 or k - 1,
 *    top-p keeping one token more or fewer, a penalty applied twice, min-p
 *    comparing with min_p alone or before temperature, a repetition penalty
 *    dividing negative logits, applied per occurrence, over one token too
 *    many, or after presence and frequency) and for
 *    a verify step that accepts every draft or redraws from p, the
 *    statistic a sampler built that way would show exceeds the threshold by
 *    five standard deviations, or it would draw a token of probability 0
 *    (at least 30 expected), so the comparison would catch it;
 *  - edge cases: a top-p below 1/n where the most probable token is not the
 *    first keeps that token; a uniform draw past the float sum of the
 *    probabilities never picks a token of probability 0; a rejected draft
 *    whose residual max(0, p - q) is zero by rounding draws from p.
 *
 * The definitions, in the order they apply (transformers' processors and
 * warpers, then vLLM's order of the penalties): the repetition penalty
 * (transformers' RepetitionPenaltyLogitsProcessor) turns the logit l of
 * each distinct token among the last repeat_last_n of the history into
 * l * penalty when l < 0, else l / penalty; penalties logit -= presence *
 * (count > 0) + frequency * count; temperature divides the logits (0:
 * greedy, the argmax); top-k keeps
 * exactly k tokens, the lower id on ties (as llama.cpp; transformers' warper
 * keeps every token tied with the k-th); top-p keeps the smallest set of the
 * most probable tokens whose probability reaches top_p, the lower id first
 * on ties, the first token always, on the probabilities after temperature
 * (llama.cpp's default chain applies temperature last, after top-p); min-p
 * (transformers' MinPLogitsWarper) then drops the tokens whose probability
 * is below min_p times the largest and renormalises.
 *
 * Adding a stage takes a field in struct setting, its step in exact_dist
 * where the sampler applies it, its wrong variants in enum wrong, and a
 * Test like top_p's whose expect_caught names them.
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

/* A history for the repetition penalty, oldest first: the top token (id
 * 5) three times, negative logits (ids 1, 4, 12 and 16, id 12 the least
 * likely), one of the tie at 0.85 (id 3, the other being id 21). The last
 * 4 hold ids 5 (twice), 1 and 21; one more adds id 3. */
static const int32_t hist32[] = { 9, 4, 16, 5, 12, 3, 5, 1, 5, 21 };
#define N_HIST32 ((int)(sizeof hist32 / sizeof hist32[0]))

struct setting {
	float temp;
	int32_t top_k;
	float top_p;
	float presence, frequency;
	const uint16_t *counts; /* NULL: no presence or frequency */
	float min_p;            /* 0: off */
	float repeat;           /* 0: off */
	int32_t last_n;         /* the repetition penalty's window */
	const int32_t *hist;    /* [n_hist]: NULL, no repetition penalty */
	int n_hist;
};

/* The sampler's parameters of a setting. */
static struct sampler_params params_of(const struct setting *st)
{
	return (struct sampler_params){
		.temp = st->temp, .top_k = st->top_k, .top_p = st->top_p, .min_p = st->min_p,
		.repeat_penalty = st->hist ? st->repeat : 1, .repeat_last_n = st->last_n,
		.presence = st->counts ? st->presence : 0, .frequency = st->counts ? st->frequency : 0,
	};
}

/* sampler_init with the plain parameters of the tests that need no more. */
static int init_plain(struct sampler *s, int32_t vocab, float temp, int32_t top_k, float top_p, uint64_t seed)
{
	struct sampler_params p = { .temp = temp, .top_k = top_k, .top_p = top_p, .repeat_penalty = 1 };
	return sampler_init(s, vocab, &p, seed);
}

/* The penalties of st on x, as batch.c and generate.c apply them. */
static void penalize(struct sampler *s, float *x, const struct setting *st)
{
	sampler_penalties(s, x, st->hist, st->n_hist, st->counts);
}

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
	WRONG_MINP_ABSOLUTE,     /* keeps p >= min_p, not min_p times the largest */
	WRONG_MINP_BEFORE_TEMP,  /* the cut on the probabilities at temperature 1 (llama.cpp's chain) */
	WRONG_REPEAT_SIGN,       /* divides negative logits too, raising them */
	WRONG_REPEAT_EACH,       /* once per occurrence, not per distinct token */
	WRONG_REPEAT_WINDOW,     /* one token more than repeat_last_n */
	WRONG_REPEAT_AFTER,      /* after presence and frequency */
	WRONG_COUNT,
};

static const char *const wrong_name[WRONG_COUNT] = {
	"none", "temperature T^2", "temperature 1/T", "top-k k+1", "top-k k-1",
	"top-p one more", "top-p one fewer", "penalty twice", "min-p without the largest",
	"min-p before temperature", "repetition penalty dividing negative logits",
	"repetition penalty per occurrence", "repetition window one too long",
	"repetition penalty after presence and frequency",
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

/* The repetition penalty of st on x[], in double, from its definition (or
 * the wrong one w); returns whether w applies. */
static bool repeat_exact(double *x, const struct setting *st, enum wrong w)
{
	if (!st->hist || st->repeat == 1 || st->last_n == 0)
		return false;
	int n = st->n_hist, from = st->last_n < 0 || st->last_n >= n ? 0 : n - st->last_n;
	bool applies = false, seen[V_MAX] = { false };
	if (w == WRONG_REPEAT_WINDOW && from > 0) {
		from--;
		applies = true;
	}
	double pen = st->repeat;
	for (int i = from; i < n; i++) {
		int t = st->hist[i];
		if (seen[t] && w != WRONG_REPEAT_EACH)
			continue;
		applies |= seen[t] && w == WRONG_REPEAT_EACH;
		applies |= x[t] < 0 && w == WRONG_REPEAT_SIGN;
		seen[t] = true;
		x[t] = x[t] < 0 && w != WRONG_REPEAT_SIGN ? x[t] * pen : x[t] / pen;
	}
	return applies;
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
	bool repeat_after = w == WRONG_REPEAT_AFTER && st->hist && st->counts;
	applies |= repeat_after;
	if (!repeat_after)
		applies |= repeat_exact(x, st, w);
	if (st->counts) {
		double times = w == WRONG_PENALTY_TWICE ? 2 : 1;
		for (int v = 0; v < V; v++) {
			double c = st->counts[v];
			x[v] -= times * ((double)st->presence * (c > 0) + (double)st->frequency * c);
			applies |= w == WRONG_PENALTY_TWICE && c > 0 && (st->presence != 0 || st->frequency != 0);
		}
	}
	if (repeat_after)
		repeat_exact(x, st, w);
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
	if (st->min_p > 0) {
		/* p[] is descending, so what min-p keeps is a prefix: the
		 * tokens of probability at least min_p times p[0], the largest
		 * (always kept, as transformers' min_tokens_to_keep 1). */
		applies |= w == WRONG_MINP_ABSOLUTE || w == WRONG_MINP_BEFORE_TEMP;
		int m = 1;
		while (m < n && (w == WRONG_MINP_ABSOLUTE	 ? p[m] >= st->min_p
				 : w == WRONG_MINP_BEFORE_TEMP ? exp(x[order[m]] - x[order[0]]) >= st->min_p
							       : p[m] >= st->min_p * p[0]))
			m++;
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
	struct sampler_params sp = params_of(st);
	cr_assert_eq(sampler_init(&s, V, &sp, seed), 0);
	memset(count, 0, (size_t)V * sizeof *count);
	for (int i = 0; i < N_DRAWS; i++) {
		memcpy(x, logits, (size_t)V * sizeof *x);
		penalize(&s, x, st);
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
	struct sampler_params sp = params_of(st);
	cr_assert_eq(sampler_init(&s, V, &sp, seed), 0);
	memcpy(x, logits, (size_t)V * sizeof *x);
	penalize(&s, x, st);
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
		cr_assert_eq(init_plain(&s, 16, 0, settings[i].top_k, settings[i].top_p, 7), 0);
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

/* How far min_p lies from every ratio p / p_max of st's distribution
 * before min-p: a case closer than float rounding has no well-defined cut. */
static double minp_margin(const float *logits, int V, const struct setting *st)
{
	struct setting all = *st;
	all.min_p = 0;
	double p[V_MAX], top = 0, margin = INFINITY;
	exact_dist(p, logits, V, &all, WRONG_NONE);
	for (int v = 0; v < V; v++)
		top = fmax(top, p[v]);
	for (int v = 0; v < V; v++)
		if (p[v] > 0 && p[v] < top)
			margin = fmin(margin, fabs(p[v] / top - st->min_p));
	return margin;
}

Test(sampler, min_p)
{
	/* 1 keeps the top token alone (id 5 has no tie); temperatures 0.5 and
	 * 2 tell min-p after temperature from min-p before it. */
	static const struct setting settings[] = {
		{ .temp = 1, .top_p = 1, .min_p = 0.3f },   { .temp = 0.5f, .top_p = 1, .min_p = 0.2f },
		{ .temp = 2, .top_p = 1, .min_p = 0.2f },   { .temp = 1, .top_p = 1, .min_p = 1 },
		/* After top-k and top-p, on what they kept. */
		{ .temp = 1, .top_k = 8, .top_p = 0.95f, .min_p = 0.3f },
	};
	unsigned caught = 0;
	for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
		const struct setting *st = &settings[i];
		char name[128];
		snprintf(name, sizeof name, "min-p %g, temperature %g, top-k %d, top-p %g", st->min_p, st->temp,
			 st->top_k, st->top_p);
		cr_assert(minp_margin(logits32, 32, st) > 1e-4, "%s lies on a ratio to the largest", name);
		if (st->top_p < 1)
			cr_assert(topp_margin(logits32, 32, st) > 1e-4, "%s lies on a cumulative boundary", name);
		caught |= check_setting(name, logits32, 32, st, 900 + i);
	}
	expect_caught("min-p", caught, BIT(WRONG_MINP_ABSOLUTE) | BIT(WRONG_MINP_BEFORE_TEMP));
}

Test(sampler, repetition_penalty)
{
	static const struct setting settings[] = {
		{ .temp = 1, .top_p = 1, .repeat = 1.5f, .last_n = -1, .hist = hist32, .n_hist = N_HIST32 },
		{ .temp = 1, .top_p = 1, .repeat = 1.5f, .last_n = 4, .hist = hist32, .n_hist = N_HIST32 },
		/* Below 1 it rewards what was seen. */
		{ .temp = 1, .top_p = 1, .repeat = 0.7f, .last_n = 64, .hist = hist32, .n_hist = N_HIST32 },
		/* Greedy too: ids 5 and 9 fall to 0.8 and 0.675, and id 2 (1.1,
		 * tied with id 8) becomes the argmax. */
		{ .temp = 0, .top_p = 1, .repeat = 2, .last_n = -1, .hist = hist32, .n_hist = N_HIST32 },
		/* Before presence and frequency (ids 5, 12 and 21 have both). */
		{ .temp = 1, .top_p = 1, .repeat = 1.5f, .last_n = -1, .hist = hist32, .n_hist = N_HIST32,
		  .presence = 0.5f, .frequency = 0.3f, .counts = counts32 },
		{ .temp = 0.8f, .top_k = 6, .top_p = 0.9f, .repeat = 1.3f, .last_n = 6, .hist = hist32,
		  .n_hist = N_HIST32, .presence = 0.4f, .frequency = 0.25f, .counts = counts32 },
	};
	unsigned caught = 0;
	for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
		const struct setting *st = &settings[i];
		char name[160];
		snprintf(name, sizeof name, "repetition %g over %d, presence %g, frequency %g, temperature %g, top-k %d, "
			 "top-p %g", st->repeat, st->last_n, st->presence, st->frequency, st->temp, st->top_k, st->top_p);
		if (st->top_p < 1)
			cr_assert(topp_margin(logits32, 32, st) > 1e-4, "%s lies on a cumulative boundary", name);
		caught |= check_setting(name, logits32, 32, st, 1000 + i);
	}
	expect_caught("repetition penalty", caught,
		      BIT(WRONG_REPEAT_SIGN) | BIT(WRONG_REPEAT_EACH) | BIT(WRONG_REPEAT_WINDOW) |
			      BIT(WRONG_REPEAT_AFTER));
}

Test(sampler, repetition_penalty_values_and_window)
{
	/* By hand, penalty 2: 2 -> 1, -3 -> -6 (once, though it repeats),
	 * -0.25 -> -0.5, 0 stays 0; ids 2 and 4, not in the history, stay.
	 * Penalty 0.5 rewards: 2 -> 4, -3 -> -1.5. */
	static const int32_t hist[] = { 0, 1, 1, 3, 5, 1 };
	const float x0[6] = { 2, -3, 0.5f, -0.25f, 1, 0 };
	const float want2[6] = { 1, -6, 0.5f, -0.5f, 1, 0 }, want_half[6] = { 4, -1.5f, 0.5f, -0.125f, 1, 0 };
	struct sampler s;
	float x[V_MAX];
	cr_assert_eq(init_plain(&s, 6, 1, 0, 1, 1), 0);
	memcpy(x, x0, sizeof x0);
	sampler_repeat_penalize(&s, x, hist, 6, 2, -1);
	for (int v = 0; v < 6; v++)
		cr_expect_eq(x[v], want2[v], "penalty 2: logit %d is %.9g, want %.9g", v, x[v], want2[v]);
	memcpy(x, x0, sizeof x0);
	sampler_repeat_penalize(&s, x, hist, 6, 0.5f, -1);
	for (int v = 0; v < 6; v++)
		cr_expect_eq(x[v], want_half[v], "penalty 0.5: logit %d is %.9g, want %.9g", v, x[v], want_half[v]);
	/* Ids outside the vocabulary are skipped. */
	static const int32_t stray[] = { -1, 6, 1 << 30 };
	memcpy(x, x0, sizeof x0);
	sampler_repeat_penalize(&s, x, stray, 3, 2, -1);
	cr_expect_eq(memcmp(x, x0, sizeof x0), 0, "ids outside the vocabulary moved a logit");
	sampler_free(&s);

	/* The window over hist32, against long double: the last N tokens, 0
	 * none, -1 or more than the history all of it. */
	static const int32_t windows[] = { 0, 1, 4, 5, 9, 10, 11, 1000, -1 };
	const float pen = 1.3f;
	cr_assert_eq(init_plain(&s, 32, 1, 0, 1, 1), 0);
	for (size_t k = 0; k < sizeof windows / sizeof windows[0]; k++) {
		int32_t n = windows[k];
		bool in[32] = { false };
		for (int i = 0; i < N_HIST32; i++)
			in[hist32[i]] |= n < 0 || i >= N_HIST32 - n;
		memcpy(x, logits32, sizeof logits32);
		sampler_repeat_penalize(&s, x, hist32, N_HIST32, pen, n);
		for (int v = 0; v < 32; v++) {
			long double l = logits32[v], want = !in[v] ? l : l < 0 ? l * pen : l / pen;
			cr_expect(fabsl(x[v] - want) <= fabsl(want) * 0x1p-24L, "window %d: logit %d is %.9g, want %.12Lg", n,
				  v, x[v], want);
			if (!in[v])
				cr_expect_eq(x[v], logits32[v], "window %d: logit %d moved", n, v);
		}
	}
	sampler_free(&s);
}

/* FNV-1a over n bytes. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

Test(sampler, off_values_are_the_old_sampler)
{
	/* The hashes of sampler_probs and 2000 draws that the sampler of
	 * commit b4d21fe (before min-p and the repetition penalty existed)
	 * gives for these settings and seeds 42..45. With min-p 0 and the
	 * repetition penalty 1 or 0 beside a history, every bit must stay. */
	static const struct {
		float temp;
		int32_t top_k;
		float top_p, presence, frequency;
		uint64_t hash;
	} old[] = {
		{ 0.7f, 0, 1, 0, 0, 0x8603e65149dc6ca4ull },
		{ 1, 5, 0.9f, 0, 0, 0x3361d8947bc80156ull },
		{ 1.3f, 0, 0.6f, 0.4f, 0.25f, 0x1600ea208eff1fbfull },
		{ 0, 0, 1, 0.5f, 0, 0x6aafd70591767f88ull },
	};
	for (int repeat = 0; repeat <= 1; repeat++) {
		for (int i = 0; i < 4; i++) {
			struct setting st = { .temp = old[i].temp, .top_k = old[i].top_k, .top_p = old[i].top_p,
					      .presence = old[i].presence, .frequency = old[i].frequency,
					      .counts = old[i].presence || old[i].frequency ? counts32 : NULL,
					      .repeat = (float)repeat, .last_n = 64, .hist = hist32, .n_hist = N_HIST32 };
			struct sampler_params sp = params_of(&st);
			struct sampler s;
			float x[32], probs[32];
			cr_assert_eq(sampler_init(&s, 32, &sp, 42 + (uint64_t)i), 0);
			cr_expect_eq(sampler_penalizes(&s), st.counts != NULL, "setting %d: penalties on with none", i);
			uint64_t h = 0xcbf29ce484222325ull;
			memcpy(x, logits32, sizeof x);
			penalize(&s, x, &st);
			sampler_probs(&s, x, probs);
			h = fnv1a(h, probs, sizeof probs);
			for (int d = 0; d < 2000; d++) {
				memcpy(x, logits32, sizeof x);
				penalize(&s, x, &st);
				int32_t id = sampler_sample(&s, x);
				h = fnv1a(h, &id, sizeof id);
			}
			sampler_free(&s);
			cr_expect_eq(h, old[i].hash, "setting %d with repetition penalty %d: hash %#llx, the old sampler's %#llx",
				     i, repeat, (unsigned long long)h, (unsigned long long)old[i].hash);
		}
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
	cr_assert_eq(init_plain(&s, V, 1, 0, 1, seed), 0);
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
	cr_assert_eq(init_plain(&s, 1, 1, 0, 1, 0), 0);
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
	cr_assert_eq(init_plain(&s, V, 1, 0, 1, 1), 0);
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
	cr_assert_eq(init_plain(&s, 4, 1, 0, 1, 1), 0);
	s.rng = state;
	int32_t id = sampler_spec_verify(&s, p, q, 1, &accepted);
	cr_expect(!accepted, "the largest uniform should reject p/q = %.9g", nextafterf(0.5f, 0) / 0.5f);
	cr_expect(id == 1 || id == 2, "the residual redraw picked token %d, outside p's support", id);
	sampler_free(&s);
}
