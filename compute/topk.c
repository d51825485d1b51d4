/*
 * topk — the k largest entries of a score vector, for routers and sampling.
 *
 * Insertion into a sorted list of k candidates: O(n) compares plus O(k) per
 * insertion; fine for routers (k <= 16 of n <= 512) and for top-k sampling,
 * where after the first few thousand entries insertions become rare. NaN
 * ranks below every number, -inf included, so a NaN score never displaces a
 * real one; among equal values (and among NaNs) the lower index wins.
 */
#include <math.h>

#include "compute/kernels.h"

/* Whether v ranks strictly above u. */
static int topk_above(float v, float u)
{
	if (isnan(v))
		return 0;
	return isnan(u) || v > u;
}

void topk(int32_t *idx, const float *x, int64_t n, int64_t k)
{
	int64_t m = 0;
	if (k <= 0)
		return;
	for (int64_t i = 0; i < n; i++) {
		float v = x[i];
		/* Earlier indices win ties, so a candidate must rank strictly
		 * above an entry already kept to move past it. */
		if (m == k && !topk_above(v, x[idx[k - 1]]))
			continue;
		int64_t p = m < k ? m : k - 1;
		while (p > 0 && topk_above(v, x[idx[p - 1]])) {
			idx[p] = idx[p - 1];
			p--;
		}
		idx[p] = (int32_t)i;
		if (m < k)
			m++;
	}
}
