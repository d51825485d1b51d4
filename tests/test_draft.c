/*
 * test_draft — the `--draft auto` policy (engine/decode/draft_policy.c):
 *  - the cost model against costs worked out by hand: a high miss rate and
 *    low acceptance choose plain, all hits and high acceptance drafting;
 *  - the policy driven by simulated steps (no clock): where drafting never
 *    pays it drafts a few steps per doubling backoff, also when plain steps
 *    are now and then preempted; where it pays it drafts; when the cache
 *    warms it re-tries drafting before the backoff; when acceptance
 *    collapses it stops;
 *  - end to end on the DeepSeek-V3 fixture, with its random MTP head and
 *    with one rewritten to agree with the model (bench/mtp_agree.py):
 *    greedy output identical with --draft 0, 1 and auto, and --stats /
 *    --stats-json report what auto decided.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "engine/decode/draft_policy.h"
#include "tests/fixture_cache.h"
#include "tests/test_util.h"

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
	int spike_every;         /* every so many plain steps is preempted */
	double spike_s;          /* for this long */
	uint64_t plain_steps;
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
		if (m->spike_every && ++m->plain_steps % (uint64_t)m->spike_every == 0)
			s.wall_s += m->spike_s;
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
	cr_expect_eq(t.draft_steps, DRAFT_POLICY_DRAFT_STEPS,
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
	cr_expect_eq(t.draft_steps, (uint64_t)(1 + trials) * DRAFT_POLICY_DRAFT_STEPS,
		     "expected %d re-tries of %d steps, drafted %llu steps", trials, DRAFT_POLICY_DRAFT_STEPS,
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

/* A plain step in four preempted (a shared core) must not make
 * drafting look cheaper: only the opening trial and the backoff re-tries
 * draft. */
Test(draft, policy_ignores_preempted_steps)
{
	struct sim m = {
		.plain_compute_s = 0.00014, .plain_requests = 8,
		.draft_compute_s = 0.00036, .draft_requests = 20,
		.acceptance = 1, .rng = 1, .spike_every = 4, .spike_s = 0.003,
	};
	struct draft_policy p;
	draft_policy_init(&p, 1);
	struct sim_totals t = sim_run(&p, &m, 128, 0, NULL);
	cr_expect_eq(t.draft_steps, DRAFT_POLICY_DRAFT_STEPS, "drafted %llu steps in 128 tokens",
		     (unsigned long long)t.draft_steps);
	cr_expect(!p.last.pays);
	/* Re-tries after 128, 256, 512 and 1024 plain tokens. */
	t = sim_run(&p, &m, 2000, 0, NULL);
	cr_expect_eq(t.draft_steps, 4 * DRAFT_POLICY_DRAFT_STEPS, "drafted %llu steps in 2000 more tokens",
		     (unsigned long long)t.draft_steps);
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
	cr_expect(isfinite(p.last.plain_s) && isfinite(p.last.draft_s));
}

/* End to end. */

static char scratch[4096];

static void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
}

static void teardown(void)
{
	tu_rmrf(scratch);
}

TestSuite(draft_run, .init = setup, .fini = teardown);

/* The DeepSeek-V3 fixture at int4 (the build's shared container; the runs
 * here use --no-pin and only read it), or its agreeing rewrite converted
 * into scratch. */
static void model(bool agree, char *out, size_t n)
{
	if (!agree) {
		fc_container(out, n, "hf/deepseek_v3", "--quant int4");
		return;
	}
	char hf[4200];
	snprintf(hf, sizeof hf, "%s/hf-agree", scratch);
	cr_assert_eq(tu_sh("/usr/bin/python3 '%s/bench/mtp_agree.py' --src '%s/hf/deepseek_v3' --out '%s' "
			   "--alpha 0.05 >/dev/null 2>&1", tu_repo(), tu_fixtures(), hf), 0, "mtp_agree.py failed");
	snprintf(out, n, "%s/agree-int4", scratch);
	cr_assert_eq(tu_sh("'%s' convert --quiet --quant int4 '%s' '%s'", tu_colibri(), hf, out), 0,
		     "convert failed");
}

/* Runs greedily with --draft d; returns stdout (malloc'd). */
static char *run(const char *m, const char *tokens, const char *d, const char *ram, const char *tag)
{
	char out[4400];
	snprintf(out, sizeof out, "%s/%s-%s-%s", scratch, tag, d, ram);
	cr_assert_eq(tu_sh("'%s' run --model '%s' --tokens %s -n 220 --temp 0 --draft %s --ram %s --no-pin "
			   "--stats --stats-json '%s.json' >'%s' 2>'%s.err'",
			   tu_colibri(), m, tokens, d, ram, out, out, out), 0, "run --draft %s --ram %s failed", d, ram);
	char *s = tu_read(out, NULL);
	cr_assert(s && strchr(s, ','), "no ids with --draft %s", d);
	return s;
}

/* 220 tokens pass the opening trial and the first re-try after 128. */
static void check_exact(bool agree)
{
	char m[4300];
	model(agree, m, sizeof m);
	const char *tokens[] = { "1,2,3", "400,401,402" };
	const char *rams[] = { "min", "1G" };
	const char *drafts[] = { "1", "auto" };
	for (size_t t = 0; t < 2; t++)
		for (size_t r = 0; r < 2; r++) {
			char *base = run(m, tokens[t], "0", rams[r], agree ? "agree" : "random");
			for (size_t d = 0; d < 2; d++) {
				char *s = run(m, tokens[t], drafts[d], rams[r], agree ? "agree" : "random");
				cr_expect_str_eq(s, base, "greedy output differs with --draft %s --ram %s, prompt %s",
						 drafts[d], rams[r], tokens[t]);
				free(s);
			}
			free(base);
		}
}

Test(draft_run, auto_exact_random_head) { check_exact(false); }
Test(draft_run, auto_exact_agreeing_head) { check_exact(true); }

static double json_num(const char *js, const char *key)
{
	char k[128];
	snprintf(k, sizeof k, "\"%s\":", key);
	const char *p = strstr(js, k);
	cr_assert_not_null(p, "stats json lacks %s: %s", key, js);
	return strtod(p + strlen(k), NULL);
}

Test(draft_run, stats_report_the_decision)
{
	char m[4300], path[4500];
	model(true, m, sizeof m);
	free(run(m, "1,2,3", "auto", "min", "stats"));
	snprintf(path, sizeof path, "%s/stats-auto-min.json", scratch);
	char *js = tu_read(path, NULL);
	cr_assert_not_null(js, "no --stats-json file");
	cr_expect_eq(json_num(js, "draft_auto"), 1);
	cr_expect_geq(json_num(js, "draft_switches"), 1);
	double fw = json_num(js, "decode_forwards"), dfw = json_num(js, "draft_forwards");
	cr_expect_geq(dfw, DRAFT_POLICY_DRAFT_STEPS, "the opening trial drafts");
	cr_expect_lt(dfw, fw);
	cr_expect_eq(json_num(js, "drafted"), dfw, "auto drafts one token per drafting forward");
	cr_expect_geq(json_num(js, "draft_tokens"), dfw);
	cr_expect_gt(json_num(js, "draft_est_plain_s_per_token"), 0);
	cr_expect_gt(json_num(js, "draft_est_draft_s_per_token"), 0);
	cr_expect_gt(json_num(js, "draft_est_tokens_per_step"), 1);
	cr_expect_gt(json_num(js, "draft_est_acceptance"), 0.5, "the agreeing head is accepted");
	json_num(js, "draft_est_pays");
	json_num(js, "tokens_per_forward");
	json_num(js, "draft_acceptance");
	free(js);
	snprintf(path, sizeof path, "%s/stats-auto-min.err", scratch);
	char *err = tu_read(path, NULL);
	cr_assert_not_null(err);
	cr_expect(strstr(err, "draft auto: ") && strstr(err, "last estimate: plain "), "--stats: %s", err);
	cr_expect(strstr(err, "tokens per forward"), "--stats: %s", err);
	free(err);

	/* --draft 0 and N: no auto decision; N drafts every forward that has
	 * room to verify them (the context holds prompt + -n, so the last N
	 * positions go plainly). */
	free(run(m, "1,2,3", "0", "min", "stats"));
	snprintf(path, sizeof path, "%s/stats-0-min.json", scratch);
	js = tu_read(path, NULL);
	cr_assert_not_null(js);
	cr_expect_eq(json_num(js, "draft_auto"), 0);
	cr_expect_eq(json_num(js, "draft_forwards"), 0);
	cr_expect_eq(json_num(js, "draft_switches"), 0);
	cr_expect(!strstr(js, "draft_est_"), "estimates without auto: %s", js);
	free(js);
	free(run(m, "1,2,3", "2", "min", "stats"));
	snprintf(path, sizeof path, "%s/stats-2-min.json", scratch);
	js = tu_read(path, NULL);
	cr_assert_not_null(js);
	double plain = json_num(js, "decode_forwards") - json_num(js, "draft_forwards");
	cr_expect(json_num(js, "draft_forwards") > 0 && plain >= 0 && plain <= 2, "%s", js);
	cr_expect_eq(json_num(js, "draft_auto"), 0);
	free(js);
}

/* Sampling: auto never drafts (its choice follows timing, and drafting
 * uses the sampler's random numbers differently), so a seeded run's text
 * is the same at any budget; --draft 1 still drafts. */
Test(draft_run, auto_samples_plainly)
{
	char m[4300], out[4400];
	model(true, m, sizeof m);
	const char *cases[][2] = { { "auto", "min" }, { "auto", "1G" }, { "1", "1G" } };
	char *first = NULL;
	for (int i = 0; i < 3; i++) {
		snprintf(out, sizeof out, "%s/sample-%d", scratch, i);
		cr_assert_eq(tu_sh("'%s' run --model '%s' --tokens 1,2,3 -n 40 --temp 0.8 --seed 5 --draft %s --ram %s "
				   "--no-pin --stats-json '%s.json' >'%s' 2>/dev/null",
				   tu_colibri(), m, cases[i][0], cases[i][1], out, out), 0);
		char path[4500];
		snprintf(path, sizeof path, "%s.json", out);
		char *js = tu_read(path, NULL);
		cr_assert_not_null(js);
		if (i < 2) {
			cr_expect_eq(json_num(js, "draft_forwards"), 0, "auto drafted while sampling");
			char *text = tu_read(out, NULL);
			if (!first)
				first = text;
			else {
				cr_expect_str_eq(text, first, "seeded sampling differs between budgets");
				free(text);
			}
		} else {
			cr_expect_gt(json_num(js, "draft_forwards"), 0, "--draft 1 did not draft while sampling");
		}
		free(js);
	}
	free(first);
}
