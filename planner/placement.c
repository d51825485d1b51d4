/*
 * placement — see placement.h.
 */
#include "planner/placement.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

int placement_spec_parse(struct placement_spec *p, const char *arg)
{
	int replicas = p->replicas;
	memset(p, 0, sizeof *p);
	p->replicas = replicas;
	if (!strcmp(arg, "auto"))
		return 0;
	if (!strcmp(arg, "even")) {
		p->mode = PLACEMENT_EVEN;
		return 0;
	}
	p->mode = PLACEMENT_WEIGHTS;
	const char *s = arg;
	while (*s) {
		char *end;
		double v = strtod(s, &end);
		if (end == s || !(v > 0) || !isfinite(v) || (*end && *end != ','))
			return error_set(EINVAL, "--placement takes auto, even or positive weights W0,W1,... "
						 "(one per rank), not \"%s\"", arg);
		if (p->n_weights == PLACEMENT_RANKS_MAX)
			return error_set(EINVAL, "--placement: more than %d weights", PLACEMENT_RANKS_MAX);
		p->weights[p->n_weights++] = v;
		s = *end ? end + 1 : end;
		if (*end && !*s)
			return error_set(EINVAL, "--placement \"%s\": trailing comma", arg);
	}
	return p->n_weights ? 0 : error_set(EINVAL, "--placement: empty");
}

int placement_replicas_parse(struct placement_spec *p, const char *arg)
{
	char *end;
	long v = strtol(arg, &end, 10);
	if (end == arg || *end || v < 1 || v > PLACEMENT_REPLICAS_MAX)
		return error_set(EINVAL, "--replicas takes a whole number of ranks per expert, 1..%d, not \"%s\"",
				 PLACEMENT_REPLICAS_MAX, arg);
	p->replicas = (int)v;
	return 0;
}

int placement_weights(const struct placement_spec *spec, int n_ranks, const double *disk_gbps, double *w,
		      const char **why)
{
	if (n_ranks < 1 || n_ranks > PLACEMENT_RANKS_MAX)
		return error_set(EINVAL, "%d ranks: colibri places experts over 1..%d ranks", n_ranks,
				 PLACEMENT_RANKS_MAX);
	for (int r = 0; r < n_ranks; r++)
		w[r] = 1.0;
	*why = "even";
	if (spec->mode == PLACEMENT_WEIGHTS) {
		if (spec->n_weights != n_ranks)
			return error_set(EINVAL, "--placement gives %d weights for %d ranks", spec->n_weights, n_ranks);
		memcpy(w, spec->weights, (size_t)n_ranks * sizeof *w);
		*why = "weights";
		return 0;
	}
	if (spec->mode == PLACEMENT_EVEN)
		return 0;
	for (int r = 0; r < n_ranks; r++)
		if (!(disk_gbps[r] > 0)) {
			*why = "even (a rank's disk is not profiled: colibri iobench on it)";
			return 0;
		}
	memcpy(w, disk_gbps, (size_t)n_ranks * sizeof *w);
	*why = "disk bandwidth";
	return 0;
}

int placement_weights_ram(const struct placement_spec *spec, int n_ranks, const double *disk_gbps,
			  const uint64_t *cache_bytes, uint64_t expert_bytes, double *w, const char **why)
{
	int rc = placement_weights(spec, n_ranks, disk_gbps, w, why);
	if (rc || spec->mode != PLACEMENT_AUTO || strcmp(*why, "disk bandwidth") || expert_bytes == 0)
		return rc;
	double X = (double)expert_bytes, C = 0, D = 0;
	for (int r = 0; r < n_ranks; r++) {
		C += (double)cache_bytes[r];
		D += disk_gbps[r];
	}
	double T = (X - C) / D;
	*why = "disk bandwidth and RAM";
	if (T > 0) {
		for (int r = 0; r < n_ranks; r++)
			w[r] = ((double)cache_bytes[r] + T * disk_gbps[r]) / X;
		return 0;
	}
	/* Everything fits: shares by disk, each capped at its cache. The sum
	 * of min(c_r, lambda d_r) grows with lambda and reaches X by
	 * lambda = X / min d; 100 halvings pin it down. */
	double lo = 0, hi = 0;
	for (int r = 0; r < n_ranks; r++)
		hi = X / disk_gbps[r] > hi ? X / disk_gbps[r] : hi;
	for (int it = 0; it < 100; it++) {
		double mid = 0.5 * (lo + hi), sum = 0;
		for (int r = 0; r < n_ranks; r++)
			sum += fmin((double)cache_bytes[r], mid * disk_gbps[r]);
		if (sum < X)
			lo = mid;
		else
			hi = mid;
	}
	for (int r = 0; r < n_ranks; r++)
		w[r] = fmin((double)cache_bytes[r], hi * disk_gbps[r]) / X;
	return 0;
}

void placement_build(uint8_t *owner, int n_layers, int n_experts, int n_ranks, const double *w)
{
	double total = 0;
	for (int r = 0; r < n_ranks; r++)
		total += w[r];
	for (int l = 0; l < n_layers; l++) {
		int count[PLACEMENT_RANKS_MAX] = { 0 };
		for (int e = 0; e < n_experts; e++) {
			/* The rank furthest behind its share after this expert;
			 * ties go to the first from this layer's starting rank. */
			int best = -1;
			double best_lag = 0;
			for (int i = 0; i < n_ranks; i++) {
				int r = (l + i) % n_ranks;
				double lag = (e + 1) * w[r] / total - count[r];
				if (best < 0 || lag > best_lag + 1e-12) {
					best = r;
					best_lag = lag;
				}
			}
			count[best]++;
			owner[(size_t)l * n_experts + e] = (uint8_t)best;
		}
	}
}

void placement_replicate(uint64_t *holders, const uint8_t *owner, int n_layers, int n_experts, int n_ranks,
			 const double *w, int replicas)
{
	size_t cells = (size_t)n_layers * n_experts;
	for (size_t i = 0; i < cells; i++)
		holders[i] = 1ull << owner[i];
	for (int round = 1; round < replicas && round < n_ranks; round++)
		for (int l = 0; l < n_layers; l++) {
			/* Each owner's experts are dealt over the other ranks
			 * apart, so that when it is lost they spread over the
			 * survivors by weight instead of landing on one. */
			int count[PLACEMENT_RANKS_MAX][PLACEMENT_RANKS_MAX]; /* 16 KiB */
			int dealt[PLACEMENT_RANKS_MAX] = { 0 };
			memset(count, 0, sizeof count);
			uint64_t *h = holders + (size_t)l * n_experts;
			const uint8_t *own = owner + (size_t)l * n_experts;
			for (int e = 0; e < n_experts; e++) {
				int o = own[e], best = -1;
				double total = 0, best_lag = 0;
				for (int r = 0; r < n_ranks; r++)
					total += h[e] >> r & 1 ? 0 : w[r];
				dealt[o]++;
				for (int i = 0; i < n_ranks; i++) {
					int r = (l + round + o + i) % n_ranks;
					if (h[e] >> r & 1)
						continue;
					double lag = dealt[o] * w[r] / total - count[o][r];
					if (best < 0 || lag > best_lag + 1e-12) {
						best = r;
						best_lag = lag;
					}
				}
				count[o][best]++;
				h[e] |= 1ull << best;
			}
		}
}

int placement_failover(uint8_t *serve, const uint8_t *owner, const uint64_t *holders, int n_layers, int n_experts,
		       int n_ranks, const double *w, uint64_t alive, int *layer_out, int *expert_out)
{
	for (int l = 0; l < n_layers; l++) {
		size_t row = (size_t)l * n_experts;
		int count[PLACEMENT_RANKS_MAX] = { 0 };
		double total = 0;
		for (int r = 0; r < n_ranks; r++)
			total += alive >> r & 1 ? w[r] : 0;
		/* Live owners keep theirs; each rank's count starts there. */
		for (int e = 0; e < n_experts; e++)
			if (alive >> owner[row + e] & 1)
				count[owner[row + e]]++;
		for (int e = 0; e < n_experts; e++) {
			int o = owner[row + e];
			if (alive >> o & 1) {
				serve[row + e] = (uint8_t)o;
				continue;
			}
			int best = -1;
			double best_lag = 0;
			for (int r = 0; r < n_ranks; r++) {
				if (!(alive >> r & 1) || !(holders[row + e] >> r & 1))
					continue;
				/* How far below its share of the layer. */
				double lag = n_experts * w[r] / total - count[r];
				if (best < 0 || lag > best_lag + 1e-12) {
					best = r;
					best_lag = lag;
				}
			}
			if (best < 0) {
				*layer_out = l;
				*expert_out = e;
				return error_set(EHOSTUNREACH, "expert %d of layer %d: no live rank holds it", e, l);
			}
			count[best]++;
			serve[row + e] = (uint8_t)best;
		}
	}
	return 0;
}

double placement_net_s(const struct placement_net *net, int n_moe_layers, int hidden, int top_k,
		       double share_remote)
{
	if (share_remote <= 0 || n_moe_layers <= 0)
		return 0;
	double row = (double)hidden * sizeof(float);
	/* Out: the normed row and the routing; back: each remote expert's row. */
	double bytes = row + top_k * 8.0 + top_k * share_remote * row;
	return n_moe_layers * (net->rtt_s + (net->gbps > 0 ? bytes / (net->gbps * 1e9) : 0));
}
