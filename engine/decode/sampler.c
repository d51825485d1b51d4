/*
 * sampler — see sampler.h. Top-p first drops tokens whose probability is
 * below (1 - p) / (n - 1): such a token can never be inside the nucleus
 * unless it is the most probable one, which the nucleus always holds (when
 * p < 1 / n every token may fall under the cut), and the filter spares
 * sorting the whole vocabulary. Min-p compares with min_p times the
 * largest probability of what top-p left, in float, as transformers'
 * float32 warper does; the largest always passes (min_p <= 1), and when
 * nothing falls under the cut the probabilities are left as they were, so
 * a min-p that removes nothing changes no bit.
 *
 * The repetition penalty must touch each distinct token of its window
 * once. It marks them in s->prob, which holds nothing between calls
 * (sampler_dist writes every candidate's probability before reading it):
 * one pass over the window clears each token's mark, a second penalises a
 * token whose mark is clear and sets it. Two passes over the window, no
 * pass over the vocabulary.
 *
 * Float limits, decided here: the nucleus boundary is found on a float
 * cumulative sum, so a top_p within a few ulps of a cumulative sum may keep
 * one token more or fewer than exact arithmetic would (transformers' float32
 * cumsum has the same limit). The probabilities of a draw may sum to a few
 * ulps under 1, so a uniform can land past them: the draw then takes the
 * last token of positive probability, never a masked one.
 * tests/test_sampler.c checks every stage against its definition.
 */
#include "engine/decode/sampler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kernels.h"
#include "base/error.h"
#include "compute/fmath.h"

int sampler_init(struct sampler *s, int32_t vocab, const struct sampler_params *p, uint64_t seed)
{
	memset(s, 0, sizeof *s);
	if (!(p->temp >= 0) || p->top_k < 0 || !(p->top_p > 0 && p->top_p <= 1))
		return error_set(EINVAL, "sampling needs --temp >= 0, --top-k >= 0 and 0 < --top-p <= 1");
	if (!(p->min_p >= 0 && p->min_p <= 1) || !(p->repeat_penalty >= 0) || p->repeat_last_n < -1)
		return error_set(EINVAL, "sampling needs 0 <= --min-p <= 1, --repeat-penalty > 0 and --repeat-last-n >= -1");
	if (!isfinite(p->presence) || !isfinite(p->frequency) || !isfinite(p->repeat_penalty))
		return error_set(EINVAL, "sampling needs finite penalties");
	s->vocab = vocab;
	s->temp = p->temp;
	s->top_k = p->top_k > vocab ? vocab : p->top_k;
	s->top_p = p->top_p;
	s->min_p = p->min_p;
	s->repeat_penalty = p->repeat_penalty == 0 ? 1 : p->repeat_penalty;
	s->repeat_last_n = p->repeat_last_n;
	s->presence = p->presence;
	s->frequency = p->frequency;
	s->rng = seed ^ 0x9e3779b97f4a7c15ull;
	s->idx = malloc((size_t)vocab * sizeof *s->idx);
	s->prob = malloc((size_t)vocab * sizeof *s->prob);
	if (!s->idx || !s->prob) {
		sampler_free(s);
		return error_set(ENOMEM, "out of memory");
	}
	return 0;
}

void sampler_free(struct sampler *s)
{
	free(s->idx);
	free(s->prob);
	memset(s, 0, sizeof *s);
}

int32_t sampler_argmax(const float *logits, int32_t n)
{
	int32_t best = 0;
	for (int32_t i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

/* splitmix64: a uniform float in [0, 1). */
static float rng_uniform(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (float)(z >> 40) / 16777216.0f;
}

static int by_prob_desc(const void *a, const void *b, void *ctx)
{
	const float *prob = ctx;
	float x = prob[*(const int32_t *)a], y = prob[*(const int32_t *)b];
	if (x != y)
		return x > y ? -1 : 1;
	return *(const int32_t *)a - *(const int32_t *)b;
}

/* The candidates idx[0..n) with their normalised probabilities in
 * prob[id]: temperature, then top-k, then top-p, then min-p. Returns n. */
static int32_t sampler_dist(struct sampler *s, float *logits)
{
	int32_t n;
	if (s->top_k > 0) {
		topk(s->idx, logits, s->vocab, s->top_k);
		n = s->top_k;
	} else {
		for (int32_t i = 0; i < s->vocab; i++)
			s->idx[i] = i;
		n = s->vocab;
	}
	float mx = -INFINITY, sum = 0;
	for (int32_t i = 0; i < n; i++)
		mx = fmaxf(mx, logits[s->idx[i]]);
	for (int32_t i = 0; i < n; i++) {
		float p = fm_expf((logits[s->idx[i]] - mx) / s->temp);
		s->prob[s->idx[i]] = p;
		sum += p;
	}
	for (int32_t i = 0; i < n; i++)
		s->prob[s->idx[i]] /= sum;
	if (s->top_p < 1 && n > 1) {
		float cut = (1 - s->top_p) / (float)(n - 1);
		int32_t m = 0, top = s->idx[0];
		for (int32_t i = 0; i < n; i++) {
			int32_t id = s->idx[i];
			if (s->prob[id] > s->prob[top] || (s->prob[id] == s->prob[top] && id < top))
				top = id;
			if (s->prob[id] >= cut)
				s->idx[m++] = id;
		}
		/* Nothing passes only when the most probable token does not:
		 * the nucleus is that token alone. */
		if (m == 0)
			s->idx[m++] = top;
		n = m;
		qsort_r(s->idx, (size_t)n, sizeof *s->idx, by_prob_desc, s->prob);
		float cum = 0;
		int32_t keep = n;
		for (int32_t i = 0; i < n; i++) {
			cum += s->prob[s->idx[i]];
			if (cum >= s->top_p) {
				keep = i + 1;
				break;
			}
		}
		n = keep;
		sum = 0;
		for (int32_t i = 0; i < n; i++)
			sum += s->prob[s->idx[i]];
		for (int32_t i = 0; i < n; i++)
			s->prob[s->idx[i]] /= sum;
	}
	if (s->min_p > 0 && n > 1) {
		float top = 0;
		for (int32_t i = 0; i < n; i++)
			top = fmaxf(top, s->prob[s->idx[i]]);
		float cut = s->min_p * top;
		int32_t m = 0;
		for (int32_t i = 0; i < n; i++)
			if (s->prob[s->idx[i]] >= cut)
				s->idx[m++] = s->idx[i];
		if (m < n) {
			n = m;
			sum = 0;
			for (int32_t i = 0; i < n; i++)
				sum += s->prob[s->idx[i]];
			for (int32_t i = 0; i < n; i++)
				s->prob[s->idx[i]] /= sum;
		}
	}
	return n;
}

int32_t sampler_sample(struct sampler *s, float *logits)
{
	if (s->temp == 0)
		return sampler_argmax(logits, s->vocab);
	int32_t n = sampler_dist(s, logits);
	float r = rng_uniform(&s->rng), acc = 0;
	int32_t last = s->idx[0];
	for (int32_t i = 0; i < n; i++) {
		float p = s->prob[s->idx[i]];
		if (p <= 0)
			continue;
		acc += p;
		last = s->idx[i];
		if (r < acc)
			return last;
	}
	/* r landed past a sum rounded under 1. */
	return last;
}

void sampler_probs(struct sampler *s, float *logits, float *probs)
{
	memset(probs, 0, (size_t)s->vocab * sizeof *probs);
	if (s->temp == 0) {
		probs[sampler_argmax(logits, s->vocab)] = 1.0f;
		return;
	}
	int32_t n = sampler_dist(s, logits);
	for (int32_t i = 0; i < n; i++)
		probs[s->idx[i]] = s->prob[s->idx[i]];
}

int32_t sampler_draw(struct sampler *s, const float *probs)
{
	float sum = 0;
	for (int32_t i = 0; i < s->vocab; i++)
		sum += probs[i];
	float r = rng_uniform(&s->rng) * sum, acc = 0;
	int32_t last = 0;
	for (int32_t i = 0; i < s->vocab; i++) {
		if (probs[i] <= 0)
			continue;
		acc += probs[i];
		last = i;
		if (r < acc)
			return i;
	}
	return last;
}

float sampler_uniform(struct sampler *s)
{
	return rng_uniform(&s->rng);
}

int32_t sampler_spec_verify(struct sampler *s, float *p, const float *q, int32_t draft, bool *accepted)
{
	/* Where p[draft] >= q[draft] the ratio is at least 1: accepted without
	 * a draw, which keeps a seeded run's draws what they have always been. */
	*accepted = !(p[draft] < q[draft] && rng_uniform(&s->rng) * q[draft] >= p[draft]);
	if (*accepted)
		return draft;
	/* As p and q both sum to 1, p[draft] < q[draft] leaves p - q some
	 * mass elsewhere; only rounding can leave p <= q everywhere, and then
	 * p itself is drawn rather than token 0 from an empty residual. */
	bool residual = false;
	for (int32_t v = 0; v < s->vocab && !residual; v++)
		residual = p[v] > q[v];
	if (residual)
		for (int32_t v = 0; v < s->vocab; v++)
			p[v] = p[v] > q[v] ? p[v] - q[v] : 0.0f;
	return sampler_draw(s, p);
}

bool sampler_penalizes(const struct sampler *s)
{
	return (s->repeat_penalty != 1 && s->repeat_last_n != 0) || s->presence != 0 || s->frequency != 0;
}

void sampler_repeat_penalize(struct sampler *s, float *x, const int32_t *hist, int n_hist, float penalty,
			     int32_t last_n)
{
	int from = last_n < 0 || last_n >= n_hist ? 0 : n_hist - last_n;
	for (int i = from; i < n_hist; i++)
		if (hist[i] >= 0 && hist[i] < s->vocab)
			s->prob[hist[i]] = 0;
	for (int i = from; i < n_hist; i++) {
		int32_t t = hist[i];
		if (t < 0 || t >= s->vocab || s->prob[t] != 0)
			continue;
		s->prob[t] = 1;
		x[t] = x[t] < 0 ? x[t] * penalty : x[t] / penalty;
	}
}

void sampler_penalties(struct sampler *s, float *x, const int32_t *hist, int n_hist, const uint16_t *counts)
{
	if (s->repeat_penalty != 1 && s->repeat_last_n != 0)
		sampler_repeat_penalize(s, x, hist, n_hist, s->repeat_penalty, s->repeat_last_n);
	if (s->presence != 0 || s->frequency != 0)
		sampler_penalize(x, counts, s->vocab, s->presence, s->frequency);
}

void sampler_penalize(float *x, const uint16_t *counts, int32_t vocab, float presence, float frequency)
{
	for (int32_t v = 0; v < vocab; v++)
		if (counts[v])
			x[v] -= presence + frequency * counts[v];
}
