/*
 * test_draft — the `--draft auto` policy (engine/draft_policy.c):
 *  - the cost model against costs worked out by hand: a high miss rate and
 *    low acceptance choose plain, all hits and high acceptance drafting;
 *  - the policy driven by simulated steps (no clock): where drafting never
 *    pays it drafts a few steps per doubling backoff; where it pays it
 *    drafts; when the cache warms it re-tries drafting before the backoff;
 *    when acceptance collapses it stops.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "engine/draft_policy.h"

/* The model: plain = compute + misses * miss_s; drafting divides by
 * E = sum_{i=0..n} a^i. */
Test(draft, model_plain_when_misses_and_low_acceptance)
{
	struct draft_cost plain = { .compute_s = 0.010, .misses = 24, .miss_s = 0.001 };
	struct draft_cost draft = { .compute_s = 0.020, .misses = 33, .miss_s = 0.001 };
	struct draft_estimate e;
	draft_policy_estimate(&e, &plain, &draft, 0.2, 1);
	cr_expect_float_eq(e.plain_s, 0.034, 1e-12);
	cr_expect_float_eq(e.tokens_per_step, 1.2, 1e-12);
	cr_expect_float_eq(e.draft_s, 0.053 / 1.2, 1e-12);
	cr_expect(!e.pays, "drafting should not pay: %g vs %g s/token", e.draft_s, e.plain_s);
}

Test(draft, model_draft_when_hits_and_high_acceptance)
{
	struct draft_cost plain = { .compute_s = 0.010, .misses = 0, .miss_s = 0 };
	struct draft_cost draft = { .compute_s = 0.012, .misses = 0, .miss_s = 0 };
	struct draft_estimate e;
	draft_policy_estimate(&e, &plain, &draft, 0.9, 1);
	cr_expect_float_eq(e.tokens_per_step, 1.9, 1e-12);
	cr_expect(e.pays, "drafting should pay: %g vs %g s/token", e.draft_s, e.plain_s);
	draft_policy_estimate(&e, &plain, &draft, 0.9, 2);
	cr_expect_float_eq(e.tokens_per_step, 1 + 0.9 + 0.81, 1e-12);
	/* The same drafting loses once its extra experts come from disk. */
	draft.misses = 16;
	draft.miss_s = 0.002;
	draft_policy_estimate(&e, &plain, &draft, 0.9, 1);
	cr_expect(!e.pays, "drafting with 16 misses should not pay: %g vs %g", e.draft_s, e.plain_s);
}

Test(draft, model_expected_tokens_bounds)
{
	struct draft_cost c = { .compute_s = 1 };
	struct draft_estimate e;
	draft_policy_estimate(&e, &c, &c, 1, 4);
	cr_expect_float_eq(e.tokens_per_step, 5, 1e-12);
	draft_policy_estimate(&e, &c, &c, 0, 4);
	cr_expect_float_eq(e.tokens_per_step, 1, 1e-12);
	draft_policy_estimate(&e, &c, &c, 1.5, 2); /* clamped */
	cr_expect_float_eq(e.acceptance, 1, 1e-12);
}

/* A simulated machine: what a step costs in each mode. */
struct sim {
	double plain_compute_s, plain_misses, plain_requests;
	double draft_compute_s, draft_misses, draft_requests;
	double miss_s;
	double acceptance;       /* per draft, drawn from a fixed LCG */
	uint64_t rng;
};

struct sim_totals {
	uint64_t tokens, draft_steps, plain_steps, draft_tokens;
	uint64_t first_draft_after;  /* token where the first drafting stretch after the opening began */
};

static struct draft_sample sim_step(struct sim *m, bool drafted, int n)
{
	struct draft_sample s = { .drafted = drafted };
	if (!drafted) {
		s.tokens = 1;
		s.misses = (uint64_t)m->plain_misses;
		s.requests = (uint64_t)m->plain_requests;
		s.wait_s = m->plain_misses * m->miss_s;
		s.wall_s = m->plain_compute_s + s.wait_s;
		return s;
	}
	int j = 0;
	for (; j < n; j++) {
		m->rng = m->rng * 6364136223846793005ULL + 1442695040888963407ULL;
		if ((double)(m->rng >> 11) / 9007199254740992.0 >= m->acceptance)
			break;
	}
	s.accepted = j;
	s.examined = j + (j < n);
	s.tokens = 1 + j;
	s.misses = (uint64_t)m->draft_misses;
	s.requests = (uint64_t)m->draft_requests;
	s.wait_s = m->draft_misses * m->miss_s;
	s.wall_s = m->draft_compute_s + s.wait_s;
	return s;
}

/* Runs the policy for `tokens` tokens; the machine may change at the
 * token `change_at` into `after` (NULL: never). */
static struct sim_totals sim_run(struct draft_policy *p, struct sim *m, uint64_t tokens,
				 uint64_t change_at, const struct sim *after)
{
	struct sim_totals t = { 0 };
	bool left_opening = false;
	while (t.tokens < tokens) {
		if (after && t.tokens >= change_at) {
			uint64_t rng = m->rng;
			*m = *after;
			m->rng = rng;
			after = NULL;
		}
		bool drafted = p->mode == DRAFT_MODE_DRAFT;
		if (!drafted)
			left_opening = true;
		else if (left_opening && !t.first_draft_after)
			t.first_draft_after = t.tokens;
		struct draft_sample s = sim_step(m, drafted, p->n_draft);
		draft_policy_step(p, &s);
		t.tokens += (uint64_t)s.tokens;
		if (drafted) {
			t.draft_steps++;
			t.draft_tokens += (uint64_t)s.tokens;
		} else {
			t.plain_steps++;
		}
	}
	return t;
}

/* Streaming, random MTP head: a drafting step reads twice the experts and
 * is never accepted. */
static const struct sim never_pays = {
	.plain_compute_s = 0.002, .plain_misses = 24, .plain_requests = 24,
	.draft_compute_s = 0.005, .draft_misses = 48, .draft_requests = 48,
	.miss_s = 0.0005, .acceptance = 0, .rng = 1,
};

/* Every expert cached, a cheap verify, drafts accepted 90% of the time. */
static const struct sim always_pays = {
	.plain_compute_s = 0.010, .plain_misses = 0, .plain_requests = 24,
	.draft_compute_s = 0.012, .draft_misses = 0, .draft_requests = 34,
	.miss_s = 0.0005, .acceptance = 0.9, .rng = 1,
};

Test(draft, policy_never_pays_costs_a_few_steps)
{
	struct draft_policy p;
	struct sim m = never_pays;
	draft_policy_init(&p, 1);
	struct sim_totals t = sim_run(&p, &m, 128, 0, NULL);
	cr_expect_eq(t.draft_steps, DRAFT_POLICY_MIN_STEPS,
		     "128 tokens: only the opening trial should draft, drafted %llu steps",
		     (unsigned long long)t.draft_steps);
	cr_expect(p.judged && !p.last.pays);
	cr_expect_eq(p.mode, DRAFT_MODE_PLAIN);

	draft_policy_init(&p, 1);
	m = never_pays;
	t = sim_run(&p, &m, 100000, 0, NULL);
	/* Re-tries after 128, 256, ... 8192 tokens, then every 8192. */
	int trials = 0;
	for (uint64_t b = DRAFT_POLICY_BACKOFF_MIN, sum = 0; sum + b < 100000;) {
		sum += b;
		trials++;
		if (b < DRAFT_POLICY_BACKOFF_MAX)
			b *= 2;
	}
	cr_expect_eq(t.draft_steps, (uint64_t)(1 + trials) * DRAFT_POLICY_MIN_STEPS,
		     "expected %d re-tries of %d steps, drafted %llu steps", trials, DRAFT_POLICY_MIN_STEPS,
		     (unsigned long long)t.draft_steps);
	cr_expect_lt((double)t.draft_steps / t.tokens, 0.001);
	cr_expect_eq(p.backoff_tokens, DRAFT_POLICY_BACKOFF_MAX);
}

Test(draft, policy_drafts_when_it_pays)
{
	struct draft_policy p;
	struct sim m = always_pays;
	draft_policy_init(&p, 1);
	struct sim_totals t = sim_run(&p, &m, 10000, 0, NULL);
	cr_expect_gt((double)t.draft_tokens / t.tokens, 0.97, "drafted only %llu of %llu tokens",
		     (unsigned long long)t.draft_tokens, (unsigned long long)t.tokens);
	cr_expect(p.last.pays);
	/* Deeper drafts are judged with E over n + 1 positions. */
	draft_policy_init(&p, 3);
	m = always_pays;
	t = sim_run(&p, &m, 10000, 0, NULL);
	cr_expect_gt((double)t.draft_tokens / t.tokens, 0.97);
	cr_expect_gt(p.last.tokens_per_step, 3);
}

/* Cold: every expert misses and drafting's wider set loses. Warm: all
 * hits and drafting wins. The drop in plain's miss rate brings a drafting
 * trial before the backoff would (once plain's running mean of misses has
 * fallen far enough). */
Test(draft, policy_retries_when_the_cache_warms)
{
	struct sim cold = {
		.plain_compute_s = 0.001, .plain_misses = 20, .plain_requests = 20,
		.draft_compute_s = 0.0012, .draft_misses = 40, .draft_requests = 40,
		.miss_s = 0.001, .acceptance = 1, .rng = 1,
	};
	struct sim warm = cold;
	warm.plain_misses = warm.draft_misses = 0;
	struct draft_policy p;
	draft_policy_init(&p, 1);
	struct sim_totals t = sim_run(&p, &cold, 300, 20, &warm);
	cr_expect_gt(t.first_draft_after, 20);
	cr_expect_lt(t.first_draft_after, 20 + DRAFT_POLICY_BACKOFF_MIN, "drafting re-tried only at token %llu",
		     (unsigned long long)t.first_draft_after);
	cr_expect_eq(p.mode, DRAFT_MODE_DRAFT);
	cr_expect_gt(t.draft_tokens, 200);
}

/* Drafting pays, then the drafts stop being accepted: it stops within the
 * acceptance mean's horizon and is then re-tried only rarely. */
Test(draft, policy_stops_when_acceptance_collapses)
{
	struct sim bad = always_pays;
	bad.acceptance = 0;
	struct draft_policy p;
	struct sim m = always_pays;
	draft_policy_init(&p, 1);
	sim_run(&p, &m, 1000, 500, &bad);
	cr_expect_eq(p.mode, DRAFT_MODE_PLAIN);
	struct sim_totals t = sim_run(&p, &m, 1000, 0, NULL);
	cr_expect_lt(t.draft_steps, 20, "still drafting: %llu steps", (unsigned long long)t.draft_steps);
}

/* Samples of a step that emitted no token (the end of generation) leave
 * the policy consistent. */
Test(draft, policy_zero_token_steps)
{
	struct draft_policy p;
	draft_policy_init(&p, 2);
	struct draft_sample s = { .drafted = true };
	for (int i = 0; i < 10; i++) {
		s.drafted = p.mode == DRAFT_MODE_DRAFT;
		draft_policy_step(&p, &s);
	}
	cr_expect(p.mode == DRAFT_MODE_PLAIN || p.mode == DRAFT_MODE_DRAFT);
	cr_expect(isfinite(p.last.plain_s) && isfinite(p.last.draft_s));
}
