/*
 * draft_policy — see draft_policy.h.
 *
 * The stretch state machine: a stretch is a run of steps in one mode. After
 * DRAFT_POLICY_DRAFT_STEPS or _PLAIN_STEPS steps it is judged, and again
 * after every step;
 * the first judgement settles it or leaves it. A stretch that leaves a
 * settled mode is a trial: a trial that loses its first judgement doubles
 * the backoff, one that wins resets it. A settled stretch longer than the
 * backoff starts a trial of the other mode.
 */
#include "engine/decode/draft_policy.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define STALE_TOKENS 16         /* a window last fed longer ago starts over */
#define ACCEPT_HORIZON 32.0     /* draft positions in the acceptance mean */
#define ACCEPT_PRIOR 0.5        /* one pseudo-position accepted at this rate */
#define RATE_EPS 0.01           /* keeps the miss-rate ratio finite near all hits */

void draft_policy_estimate(struct draft_estimate *e, const struct draft_cost *plain,
			   const struct draft_cost *draft, double acceptance, int n)
{
	double a = acceptance < 0 ? 0 : acceptance > 1 ? 1 : acceptance;
	double tokens = 0, ai = 1;
	for (int i = 0; i <= n; i++, ai *= a)
		tokens += ai;
	e->plain_s = plain->compute_s + plain->misses * plain->miss_s;
	e->draft_s = (draft->compute_s + draft->misses * draft->miss_s) / tokens;
	e->tokens_per_step = tokens;
	e->acceptance = a;
	e->pays = e->draft_s < e->plain_s;
}

void draft_policy_init(struct draft_policy *p, int n_draft)
{
	assert(n_draft >= 1);
	memset(p, 0, sizeof *p);
	p->n_draft = n_draft;
	p->mode = DRAFT_MODE_DRAFT;
	p->backoff_tokens = DRAFT_POLICY_BACKOFF_MIN;
}

static double sum(const double *v, int n)
{
	double t = 0;
	for (int i = 0; i < n; i++)
		t += v[i];
	return t;
}

/* Median of v[0..n), n <= DRAFT_POLICY_WINDOW; 0 when n = 0. */
static double median(const double *v, int n)
{
	double s[DRAFT_POLICY_WINDOW];
	for (int i = 0; i < n; i++) {
		int j = i;
		for (; j > 0 && s[j - 1] > v[i]; j--)
			s[j] = s[j - 1];
		s[j] = v[i];
	}
	return n == 0 ? 0 : n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static double miss_rate(const struct draft_window *w)
{
	double req = sum(w->requests, w->n);
	return req > 0 ? sum(w->misses, w->n) / req : 0;
}

static void window_add(struct draft_window *w, const struct draft_sample *s, uint64_t now)
{
	if (w->n > 0 && now - w->last_token > STALE_TOKENS)
		w->n = w->next = 0;
	w->compute_s[w->next] = s->wall_s > s->wait_s ? s->wall_s - s->wait_s : 0;
	w->wait_s[w->next] = s->wait_s;
	w->misses[w->next] = (double)s->misses;
	w->requests[w->next] = (double)s->requests;
	w->next = (w->next + 1) % DRAFT_POLICY_WINDOW;
	if (w->n < DRAFT_POLICY_WINDOW)
		w->n++;
}

/* The window as the model's input; its misses times miss_scale. Waits of
 * steps without a miss (joining a prefetch in flight) are left out. */
static void window_cost(struct draft_cost *c, const struct draft_window *w, double miss_scale)
{
	double per_miss[DRAFT_POLICY_WINDOW];
	int k = 0;
	for (int i = 0; i < w->n; i++)
		if (w->misses[i] > 0)
			per_miss[k++] = w->wait_s[i] / w->misses[i];
	c->compute_s = median(w->compute_s, w->n);
	c->misses = (w->n ? sum(w->misses, w->n) / w->n : 0) * miss_scale;
	c->miss_s = median(per_miss, k);
}

/* Judges the running mode against the other's last window and returns the
 * mode the model prefers. Leaving plain on an estimate asks for a margin:
 * the drafting numbers are older. */
static enum draft_mode judge(struct draft_policy *p)
{
	enum draft_mode r = p->mode, o = r == DRAFT_MODE_PLAIN ? DRAFT_MODE_DRAFT : DRAFT_MODE_PLAIN;
	const struct draft_window *wr = &p->win[r];
	double scale = (miss_rate(wr) + RATE_EPS) / (wr->ref_rate + RATE_EPS);
	struct draft_cost c[2];
	window_cost(&c[r], wr, 1);
	window_cost(&c[o], &p->win[o], scale);
	double a = (p->accepted + ACCEPT_PRIOR) / (p->examined + 1);
	draft_policy_estimate(&p->last, &c[DRAFT_MODE_PLAIN], &c[DRAFT_MODE_DRAFT], a, p->n_draft);
	p->judged = true;
	if (r == DRAFT_MODE_PLAIN)
		return p->last.draft_s < (1 - DRAFT_POLICY_MARGIN) * p->last.plain_s ? DRAFT_MODE_DRAFT
										 : DRAFT_MODE_PLAIN;
	return p->last.draft_s <= p->last.plain_s ? DRAFT_MODE_DRAFT : DRAFT_MODE_PLAIN;
}

static void stretch_start(struct draft_policy *p, enum draft_mode m, bool trial)
{
	p->mode = m;
	p->stretch_steps = 0;
	p->stretch_tokens = 0;
	p->trial = trial;
	p->settled = false;
	p->switches++;
}

enum draft_mode draft_policy_step(struct draft_policy *p, const struct draft_sample *s)
{
	enum draft_mode r = p->mode, o = r == DRAFT_MODE_PLAIN ? DRAFT_MODE_DRAFT : DRAFT_MODE_PLAIN;
	assert(s->drafted == (r == DRAFT_MODE_DRAFT));
	struct draft_window *w = &p->win[r];
	window_add(w, s, p->tokens);
	p->tokens += (uint64_t)s->tokens;
	w->last_token = p->tokens;
	p->steps[r]++;
	p->mode_tokens[r] += (uint64_t)s->tokens;
	if (r == DRAFT_MODE_DRAFT && s->examined > 0) {
		double keep = pow(1 - 1 / ACCEPT_HORIZON, s->examined);
		p->accepted = p->accepted * keep + s->accepted;
		p->examined = p->examined * keep + s->examined;
	}
	p->stretch_steps++;
	p->stretch_tokens += (uint64_t)s->tokens;
	int min_steps = r == DRAFT_MODE_DRAFT ? DRAFT_POLICY_DRAFT_STEPS : DRAFT_POLICY_PLAIN_STEPS;
	if (p->stretch_steps == min_steps)
		w->ref_rate = miss_rate(w);
	if (p->stretch_steps < min_steps)
		return p->mode;
	/* The other mode never ran: measure it before judging. */
	enum draft_mode want = p->win[o].n > 0 ? judge(p) : o;
	if (want != r) {
		if (p->trial && !p->settled && p->backoff_tokens < DRAFT_POLICY_BACKOFF_MAX)
			p->backoff_tokens *= 2;
		stretch_start(p, want, p->settled);
		return p->mode;
	}
	if (!p->settled) {
		p->settled = true;
		if (p->trial)
			p->backoff_tokens = DRAFT_POLICY_BACKOFF_MIN;
	}
	if (p->stretch_tokens >= p->backoff_tokens)
		stretch_start(p, o, true);
	return p->mode;
}
