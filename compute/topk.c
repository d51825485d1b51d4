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

/* Quickselect: the value of rank k-1 (0 = largest) of a[n], reordering a. */
static float kth_largest(float *a, int64_t n, int64_t k)
{
	int64_t lo = 0, hi = n - 1, want = k - 1;
	while (lo < hi) {
		float pivot = a[lo + (hi - lo) / 2];
		int64_t i = lo, j = hi;
		while (i <= j) {
			while (topk_above(a[i], pivot))
				i++;
			while (topk_above(pivot, a[j]))
				j--;
			if (i <= j) {
				float t = a[i];
				a[i++] = a[j];
				a[j--] = t;
			}
		}
		if (want <= j)
			hi = j;
		else if (want >= i)
			lo = i;
		else
			break;
	}
	return a[want];
}

void topk_set(int32_t *idx, const float *x, int64_t n, int64_t k, float *scratch)
{
	if (k <= 0)
		return;
	for (int64_t i = 0; i < n; i++)
		scratch[i] = x[i];
	float kth = kth_largest(scratch, n, k);
	/* Everything ranked above the k-th value, then its ties by index. */
	int64_t above = 0;
	for (int64_t i = 0; i < n; i++)
		above += topk_above(x[i], kth);
	int64_t ties = k - above, m = 0;
	for (int64_t i = 0; i < n; i++) {
		if (topk_above(x[i], kth))
			idx[m++] = (int32_t)i;
		else if (ties > 0 && !topk_above(kth, x[i])) {
			idx[m++] = (int32_t)i;
			ties--;
		}
	}
}
