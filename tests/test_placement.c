/*
 * test_placement — planner/placement.h, the arithmetic every MPI rank runs
 * alike to share the routed experts out (engine/dist):
 * - placement_build deals each layer so every rank's count is within one
 *   of E * w_r / sum(w);
 * - placement_replicate gives every expert exactly K holders, its owner
 *   among them, with each rank's extra share near its weight;
 * - placement_failover keeps live owners, moves a lost rank's experts to
 *   live holders only, spreads them over the survivors, and names the
 *   first expert nobody alive holds;
 * - placement_weights_ram makes every rank's misses take the same time
 *   when the experts outgrow the ranks' RAM (the formula of placement.h
 *   worked again here), and shares by disk within the caches when they
 *   do not; it leaves even, explicit weights and unprofiled disks alone;
 * - --placement and --replicas parse or are refused by name.
 * Every property is checked by counting here, not against tables copied
 * from a run.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>

#include "base/error.h"
#include "planner/placement.h"

#define ROWS 5
#define E 24

static int bits(uint64_t v)
{
	return __builtin_popcountll(v);
}

Test(placement, build_deals_each_layer_by_weight)
{
	const double w[3] = { 1, 3, 2 };
	uint8_t owner[ROWS * E];
	placement_build(owner, ROWS, E, 3, w);
	for (int l = 0; l < ROWS; l++) {
		int count[3] = { 0 };
		for (int e = 0; e < E; e++) {
			cr_assert_lt(owner[l * E + e], 3);
			count[owner[l * E + e]]++;
		}
		for (int r = 0; r < 3; r++)
			cr_expect_leq(fabs(count[r] - E * w[r] / 6.0), 1.0, "layer %d rank %d: %d experts for weight %g", l,
				      r, count[r], w[r]);
	}
}

/* Over n ranks of weights w with K replicas: K holders per cell, the owner
 * one of them, and per layer K * E held in all. */
static void check_replicas(int n, const double *w, int K, uint64_t *holders, uint8_t *owner)
{
	placement_build(owner, ROWS, E, n, w);
	placement_replicate(holders, owner, ROWS, E, n, w, K);
	for (int l = 0; l < ROWS; l++) {
		int held = 0;
		for (int e = 0; e < E; e++) {
			uint64_t h = holders[l * E + e];
			cr_assert_eq(bits(h), K < n ? K : n, "layer %d expert %d: %d holders, want %d", l, e, bits(h), K);
			cr_assert(h >> owner[l * E + e] & 1, "layer %d expert %d: its owner %d does not hold it", l, e,
				  owner[l * E + e]);
			cr_assert_eq(h >> n, 0, "layer %d expert %d: held by a rank beyond %d", l, e, n - 1);
			held += bits(h);
		}
		cr_expect_eq(held, (K < n ? K : n) * E);
	}
}

Test(placement, replicate_gives_k_holders_near_the_weights)
{
	uint8_t owner[ROWS * E];
	uint64_t holders[ROWS * E];
	const double even[4] = { 1, 1, 1, 1 };
	check_replicas(4, even, 2, holders, owner);
	/* Even weights: every rank holds 2E/4 of each layer, give or take one. */
	for (int l = 0; l < ROWS; l++)
		for (int r = 0; r < 4; r++) {
			int held = 0;
			for (int e = 0; e < E; e++)
				held += (int)(holders[l * E + e] >> r & 1);
			cr_expect_leq(abs(held - 2 * E / 4), 1, "layer %d rank %d holds %d, want %d", l, r, held, E / 2);
		}
	const double w[3] = { 1, 2, 3 };
	check_replicas(3, w, 2, holders, owner);
	check_replicas(3, w, 3, holders, owner);
	check_replicas(3, w, 1, holders, owner);
	/* One replica changes nothing: the owner alone. */
	for (int i = 0; i < ROWS * E; i++)
		cr_assert_eq(holders[i], 1ull << owner[i]);
}

Test(placement, failover_moves_only_the_lost_ranks_experts)
{
	const double w[3] = { 1, 1, 1 };
	uint8_t owner[ROWS * E], serve[ROWS * E];
	uint64_t holders[ROWS * E];
	int el = -1, ee = -1;
	check_replicas(3, w, 2, holders, owner);
	cr_assert_eq(placement_failover(serve, owner, holders, ROWS, E, 3, w, 0x7, &el, &ee), 0);
	cr_expect_arr_eq(serve, owner, sizeof serve, "all alive: the owners serve");
	/* Rank 1 lost: its experts go to the other holder, nobody else moves. */
	cr_assert_eq(placement_failover(serve, owner, holders, ROWS, E, 3, w, 0x5, &el, &ee), 0);
	int moved[3] = { 0 };
	for (int i = 0; i < ROWS * E; i++) {
		if (owner[i] != 1) {
			cr_expect_eq(serve[i], owner[i], "cell %d: a live owner lost its expert", i);
			continue;
		}
		cr_expect_neq(serve[i], 1, "cell %d still on the lost rank", i);
		cr_expect(holders[i] >> serve[i] & 1, "cell %d moved to rank %d, which does not hold it", i, serve[i]);
		moved[serve[i]]++;
	}
	/* Its E/3 experts per layer spread over both survivors. */
	cr_expect_gt(moved[0], 0);
	cr_expect_gt(moved[2], 0);
	cr_expect_eq(moved[0] + moved[2], ROWS * E / 3);
	/* Ranks 1 and 2 lost with two replicas: some expert is held by those
	 * two only, and the failover names it. */
	error_clear();
	cr_assert_eq(placement_failover(serve, owner, holders, ROWS, E, 3, w, 0x1, &el, &ee), -EHOSTUNREACH);
	cr_assert(el >= 0 && el < ROWS && ee >= 0 && ee < E);
	cr_expect_eq(holders[el * E + ee] & 1, 0, "expert %d of layer %d is on rank 0 but was called lost", ee, el);
	cr_expect(strstr(error_message(), "no live rank holds it") != NULL, "message: %s", error_message());
	/* With three replicas rank 0 alone holds everything. */
	check_replicas(3, w, 3, holders, owner);
	cr_assert_eq(placement_failover(serve, owner, holders, ROWS, E, 3, w, 0x1, &el, &ee), 0);
	for (int i = 0; i < ROWS * E; i++)
		cr_expect_eq(serve[i], 0);
}

Test(placement, failover_follows_the_weights)
{
	/* Rank 0 lost over 4 ranks weighted 1,1,1,3 with every rank holding
	 * every expert: rank 3 takes about half of the moved experts. */
	const double w[4] = { 1, 1, 1, 3 };
	uint8_t owner[ROWS * E], serve[ROWS * E];
	uint64_t holders[ROWS * E];
	int el, ee;
	check_replicas(4, w, 4, holders, owner);
	cr_assert_eq(placement_failover(serve, owner, holders, ROWS, E, 4, w, 0xe, &el, &ee), 0);
	for (int l = 0; l < ROWS; l++) {
		int count[4] = { 0 };
		for (int e = 0; e < E; e++)
			count[serve[l * E + e]]++;
		cr_expect_eq(count[0], 0);
		for (int r = 1; r < 4; r++)
			cr_expect_leq(fabs(count[r] - E * w[r] / 5.0), 1.0, "layer %d rank %d serves %d of %d", l, r,
				      count[r], E);
	}
}

Test(placement, options_parse_or_are_refused)
{
	struct placement_spec p = { 0 };
	cr_assert_eq(placement_replicas_parse(&p, "2"), 0);
	cr_expect_eq(p.replicas, 2);
	cr_assert_eq(placement_spec_parse(&p, "1,3"), 0);
	cr_expect_eq(p.replicas, 2, "--placement after --replicas forgot it");
	cr_expect_eq(p.mode, PLACEMENT_WEIGHTS);
	cr_expect_eq(p.n_weights, 2);
	static const char *const bad[] = { "0", "9", "x", "2a", "", "-1", "1.5" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		error_clear();
		cr_expect_eq(placement_replicas_parse(&p, bad[i]), -EINVAL, "--replicas '%s' accepted", bad[i]);
		cr_expect(strstr(error_message(), "--replicas") != NULL, "'%s': message %s", bad[i], error_message());
	}
	cr_expect_eq(p.replicas, 2, "a refused value changed the setting");
	static const char *const bad_spec[] = { "0,1", "1,", "a", "1,,2" };
	for (size_t i = 0; i < sizeof bad_spec / sizeof bad_spec[0]; i++)
		cr_expect_eq(placement_spec_parse(&p, bad_spec[i]), -EINVAL, "--placement '%s' accepted", bad_spec[i]);
}

/* The rank's reads per token under uniform routing, in units of X: what
 * its share does not fit, over its disk. */
static double read_time(double share, double cache, double X, double gbps)
{
	double miss = share * X - cache;
	return (miss > 0 ? miss : 0) / gbps;
}

Test(placement, ram_balances_the_slowest_reads)
{
	struct placement_spec auto_spec = { 0 };
	const double gbps[3] = { 1, 1, 2 };
	const uint64_t X = 1200, cache[3] = { 0, 600, 100 };
	double w[3];
	const char *why;
	cr_assert_eq(placement_weights_ram(&auto_spec, 3, gbps, cache, X, w, &why), 0);
	cr_expect_str_eq(why, "disk bandwidth and RAM");
	double sum = w[0] + w[1] + w[2];
	cr_expect_float_eq(sum, 1.0, 1e-9);
	/* Every rank's misses take the same time, and that time is less than
	 * what disk-only weights (1:1:2) leave the slowest rank. */
	double t0 = read_time(w[0], 0, X, 1), t1 = read_time(w[1], 600, X, 1), t2 = read_time(w[2], 100, X, 2);
	cr_expect_float_eq(t0, t1, 1e-6);
	cr_expect_float_eq(t0, t2, 1e-6);
	double disk_only = fmax(read_time(0.25, 0, X, 1), fmax(read_time(0.25, 600, X, 1), read_time(0.5, 100, X, 2)));
	cr_expect_lt(t0, disk_only);
	/* From the formula: T = (1200 - 700) / 4 = 125; s X = c + T d. */
	cr_expect_float_eq(w[0] * X, 125.0, 1e-6);
	cr_expect_float_eq(w[1] * X, 725.0, 1e-6);
	cr_expect_float_eq(w[2] * X, 350.0, 1e-6);
}

Test(placement, ram_that_holds_everything_shares_by_disk_within_the_caches)
{
	struct placement_spec auto_spec = { 0 };
	const double gbps[3] = { 1, 3, 2 };
	double w[3];
	const char *why;
	/* Room for all of it everywhere: the disks' 1:3:2. */
	const uint64_t big[3] = { 5000, 5000, 5000 };
	cr_assert_eq(placement_weights_ram(&auto_spec, 3, gbps, big, 1200, w, &why), 0);
	cr_expect_float_eq(w[1] / w[0], 3.0, 1e-6);
	cr_expect_float_eq(w[2] / w[0], 2.0, 1e-6);
	/* Rank 1's cache holds less than its disk share (600): it gets what
	 * fits, the others share the rest by disk, and nobody misses. */
	const uint64_t cache[3] = { 1000, 300, 1000 };
	cr_assert_eq(placement_weights_ram(&auto_spec, 3, gbps, cache, 1200, w, &why), 0);
	cr_expect_float_eq(w[0] + w[1] + w[2], 1.0, 1e-6);
	cr_expect_float_eq(w[1] * 1200, 300.0, 1e-3);
	cr_expect_float_eq(w[2] / w[0], 2.0, 1e-6);
	for (int r = 0; r < 3; r++)
		cr_expect_leq(w[r] * 1200, (double)cache[r] + 1e-3);
}

Test(placement, ram_changes_only_auto_with_known_disks)
{
	const uint64_t cache[2] = { 0, 1000 };
	double w[2];
	const char *why;
	struct placement_spec even = { .mode = PLACEMENT_EVEN };
	const double gbps[2] = { 1, 1 }, unknown[2] = { 1, 0 };
	cr_assert_eq(placement_weights_ram(&even, 2, gbps, cache, 1000, w, &why), 0);
	cr_expect(w[0] == 1 && w[1] == 1 && !strcmp(why, "even"));
	struct placement_spec auto_spec = { 0 };
	cr_assert_eq(placement_weights_ram(&auto_spec, 2, unknown, cache, 1000, w, &why), 0);
	cr_expect(w[0] == 1 && w[1] == 1, "an unprofiled disk must give even, got %g:%g", w[0], w[1]);
	cr_expect(strstr(why, "not profiled") != NULL, "%s", why);
	struct placement_spec weights = { .mode = PLACEMENT_WEIGHTS, .n_weights = 2, .weights = { 2, 5 } };
	cr_assert_eq(placement_weights_ram(&weights, 2, gbps, cache, 1000, w, &why), 0);
	cr_expect(w[0] == 2 && w[1] == 5);
}
