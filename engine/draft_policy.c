/*
 * draft_policy — see draft_policy.h.
 *
 * The stretch state machine: a stretch is a run of steps in one mode. After
 * DRAFT_POLICY_MIN_STEPS steps it is judged, and again after every step;
 * the first judgement settles it or leaves it. A stretch that leaves a
 * settled mode is a trial: a trial that loses its first judgement doubles
 * the backoff, one that wins resets it. A settled stretch longer than the
 * backoff starts a trial of the other mode.
 */
#include "engine/draft_policy.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define HORIZON_PLAIN 16.0      /* steps in a plain running mean */
#define HORIZON_DRAFT 8.0       /* drafting runs in shorter stretches */
#define STALE_TOKENS 16         /* a mean last fed longer ago restarts */
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

static double miss_rate(const struct draft_mean *m)
{
	return m->requests > 0 ? m->misses / m->requests : 0;
}

/* Adds one step to a running mean: the plain mean of the first `horizon`
 * samples, exponential after that; a stale mean starts over. */
static void mean_add(struct draft_mean *m, const struct draft_sample *s, double horizon, uint64_t now)
{
	if (m->n > 0 && now - m->last_token > STALE_TOKENS)
		m->n = 0;
	double n = m->n + 1 < horizon ? m->n + 1 : horizon, w = 1.0 / n;
	double compute = s->wall_s > s->wait_s ? s->wall_s - s->wait_s : 0;
	m->compute_s += w * (compute - m->compute_s);
	m->wait_s += w * (s->wait_s - m->wait_s);
	m->misses += w * ((double)s->misses - m->misses);
	m->requests += w * ((double)s->requests - m->requests);
	m->n = n;
}

static void mean_cost(struct draft_cost *c, const struct draft_mean *m, double miss_scale)
{
	c->compute_s = m->compute_s;
	c->misses = m->misses * miss_scale;
	c->miss_s = m->misses > 0 ? m->wait_s / m->misses : 0;
}

/* Judges the running mode against the other's last means and returns the
 * mode the model prefers. Leaving plain on an estimate asks for a margin:
 * the drafting numbers are older. */
static enum draft_mode judge(struct draft_policy *p)
{
	enum draft_mode r = p->mode, o = r == DRAFT_MODE_PLAIN ? DRAFT_MODE_DRAFT : DRAFT_MODE_PLAIN;
	const struct draft_mean *mr = &p->mean[r];
	double scale = (miss_rate(mr) + RATE_EPS) / (mr->ref_rate + RATE_EPS);
	struct draft_cost c[2];
	mean_cost(&c[r], mr, 1);
	mean_cost(&c[o], &p->mean[o], scale);
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
	struct draft_mean *m = &p->mean[r];
	mean_add(m, s, r == DRAFT_MODE_DRAFT ? HORIZON_DRAFT : HORIZON_PLAIN, p->tokens);
	p->tokens += (uint64_t)s->tokens;
	m->last_token = p->tokens;
	p->steps[r]++;
	p->mode_tokens[r] += (uint64_t)s->tokens;
	if (r == DRAFT_MODE_DRAFT && s->examined > 0) {
		double keep = pow(1 - 1 / ACCEPT_HORIZON, s->examined);
		p->accepted = p->accepted * keep + s->accepted;
		p->examined = p->examined * keep + s->examined;
	}
	p->stretch_steps++;
	p->stretch_tokens += (uint64_t)s->tokens;
	if (p->stretch_steps == DRAFT_POLICY_MIN_STEPS)
		m->ref_rate = miss_rate(m);
	if (p->stretch_steps < DRAFT_POLICY_MIN_STEPS)
		return p->mode;
	/* The other mode never ran: measure it before judging. */
	enum draft_mode want = p->mean[o].n > 0 ? judge(p) : o;
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
