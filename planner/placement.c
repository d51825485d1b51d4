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
	memset(p, 0, sizeof *p);
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
