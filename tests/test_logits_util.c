/*
 * test_logits_util — the comparison every exactness test goes through
 * (tests/logits_util.h: lu_diff_of, behind lu_expect_close) sees what a
 * max over |l - r| misses: NaN and infinity on either side, a top-1 that
 * moved, and an error that is small in absolute terms but large against
 * the logits' scale. The issue that asked for it measured the old check,
 * fmax(maxdiff, fabs(l - r)), passing {1, NaN, 3, NaN} against {1, 2, 3, 4}
 * with maxdiff 0.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "tests/logits_util.h"

Test(logits_util, nan_is_counted_not_dropped)
{
	const float l[4] = { 1, NAN, 3, NAN }, r[4] = { 1, 2, 3, 4 };
	/* The check this helper replaced: NaN vanishes in fmax. */
	double old = 0;
	for (int i = 0; i < 4; i++)
		old = fmax(old, fabs((double)l[i] - r[i]));
	cr_assert_eq(old, 0.0, "the premise: fmax drops NaN");
	struct lu_diff d = lu_diff_of(l, r, 4, 1);
	cr_expect_eq(d.bad, 2);
	cr_expect_eq(d.first_bad, 1);
	/* And in the reference, and as infinity. */
	const float inf[4] = { 1, 2, INFINITY, 4 };
	cr_expect_eq(lu_diff_of(r, l, 4, 1).bad, 2);
	cr_expect_eq(lu_diff_of(inf, r, 4, 1).bad, 1);
	cr_expect_eq(lu_diff_of(r, inf, 4, 2).bad, 1);
	cr_expect_eq(lu_diff_of(r, r, 4, 2).bad, 0);
}

/* The bound is relative to each row's largest |reference|: a 1e-4 relative
 * error fails a 1e-5 bound at any magnitude, and the same absolute error
 * on a row of larger logits is a smaller relative one. */
Test(logits_util, relative_to_the_row_scale)
{
	for (double scale = 1e-3; scale <= 1e3; scale *= 10) {
		float r[8], l[8];
		for (int i = 0; i < 8; i++)
			r[i] = l[i] = (float)(scale * (i - 3.5) / 3.5);
		l[5] = (float)(r[5] + 1e-4 * scale);
		struct lu_diff d = lu_diff_of(l, r, 8, 1);
		cr_expect(d.max_rel > 0.9e-4 && d.max_rel < 1.1e-4, "scale %g: relative %g", scale, d.max_rel);
		cr_expect_eq(d.worst, 5);
		cr_expect_eq(d.bad, 0);
	}
	/* Two rows of different scales: each measured against its own. */
	const float r[4] = { 1, -2, 1000, -10 }, l[4] = { 1, -2.001f, 1000.001f, -10 };
	struct lu_diff d = lu_diff_of(l, r, 4, 2);
	cr_expect(fabs(d.max_rel - 0.001 / 2) < 1e-6, "relative %g, expected 5e-4 of row 0's scale", d.max_rel);
	cr_expect_eq(d.worst, 1);
}

Test(logits_util, top1_disagreement_found)
{
	const float r[6] = { 0, 1, 0.5f, 2, 0, 1 };
	const float l[6] = { 0, 1, 0.5f, 2, 0, 2.5f };
	struct lu_diff d = lu_diff_of(l, r, 6, 2);
	cr_expect_eq(d.top1_agree, 1);
	cr_expect_eq(d.first_disagree, 1);
	struct lu_diff same = lu_diff_of(r, r, 6, 2);
	cr_expect_eq(same.top1_agree, 2);
	cr_expect_eq(same.first_disagree, -1);
	cr_expect_eq(same.max_rel, 0.0);
}
