/*
 * test_fmath — compute/fmath.h against the C library's long double
 * functions (x87 extended precision on x86-64: 11 more bits than double),
 * an independent reference:
 *  - fm_exp, fm_log within 2 ulps of double over their ranges, fm_sincos
 *    within 4 (the reduction's error grows with |x|; |x| < 1.6e6), fm_pow
 *    within 4 + 2 |y log x| (exp's argument carries log's rounding);
 *  - the float versions within 1 ulp, and equal to the correctly rounded
 *    float in all but a handful of cases;
 *  - special values: NaN, infinities, zeros, subnormals, overflow and
 *    underflow edges.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "compute/fmath.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double uniform(double lo, double hi)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return lo + (hi - lo) * ((double)(rng >> 11) * 0x1p-53);
}

/* |got - want| in ulps of double at want. */
static double ulps(double got, long double want)
{
	double w = (double)want;
	if (got == w)
		return 0;
	double ulp = nextafter(fabs(w), INFINITY) - fabs(w);
	return (double)fabsl((long double)got - want) / ulp;
}

static double ulpsf(float got, long double want)
{
	float w = (float)want;
	if (got == w)
		return 0;
	float ulp = nextafterf(fabsf(w), INFINITY) - fabsf(w);
	return (double)fabsl((long double)got - want) / ulp;
}

Test(fmath, exp_within_two_ulps)
{
	for (int i = 0; i < 200000; i++) {
		double x = i % 2 ? uniform(-745.0, 709.7) : uniform(-30.0, 30.0);
		double u = ulps(fm_exp(x), expl((long double)x));
		/* Results below 2^-1022 are subnormal: one rounding at 2^-1074. */
		if (x < -708.0)
			cr_assert_leq(fabs(fm_exp(x) - (double)expl((long double)x)), 0x1p-1074, "exp(%a)", x);
		else
			cr_assert_leq(u, 2.0, "exp(%a) = %a, %.3g ulps", x, fm_exp(x), u);
	}
}

Test(fmath, expf_correctly_rounded_nearly_always)
{
	int off = 0;
	for (int i = 0; i < 200000; i++) {
		float x = (float)(i % 2 ? uniform(-103.0, 88.7) : uniform(-20.0, 20.0));
		float got = fm_expf(x);
		long double want = expl((long double)x);
		double u = ulpsf(got, want);
		if (got != (float)want)
			off++;
		if (want >= FLT_MIN)
			cr_assert_leq(u, 1.0, "expf(%a) = %a vs %a", (double)x, (double)got, (double)(float)want);
	}
	cr_assert_leq(off, 20, "%d of 200000 expf not the correctly rounded float", off);
}

Test(fmath, log_within_two_ulps)
{
	for (int i = 0; i < 200000; i++) {
		double x = i % 3 == 0 ? uniform(0.5, 2.0) : ldexp(uniform(1.0, 2.0), (int)uniform(-1070, 1020));
		double u = ulps(fm_log(x), logl((long double)x));
		cr_assert_leq(u, 2.0, "log(%a) = %a, %.3g ulps", x, fm_log(x), u);
	}
}

Test(fmath, logf_and_log1pf_within_one_ulp)
{
	for (int i = 0; i < 200000; i++) {
		float x = (float)ldexp(uniform(1.0, 2.0), (int)uniform(-140, 120));
		cr_assert_leq(ulpsf(fm_logf(x), logl((long double)x)), 1.0, "logf(%a)", (double)x);
		float y = (float)(i % 2 ? uniform(-0.999, 4.0) : ldexp(uniform(-1.0, 1.0), -(int)uniform(0, 60)));
		cr_assert_leq(ulpsf(fm_log1pf(y), log1pl((long double)y)), 1.0, "log1pf(%a) = %a", (double)y,
			      (double)fm_log1pf(y));
	}
}

Test(fmath, pow_within_a_few_ulps)
{
	for (int i = 0; i < 100000; i++) {
		double x = uniform(1.0, 2e6), y = uniform(-1.0, 1.0);
		double u = ulps(fm_pow(x, y), powl((long double)x, (long double)y));
		double bound = 4.0 + 2.0 * fabs(y * log(x));
		cr_assert_leq(u, bound, "pow(%a, %a), %.3g ulps", x, y, u);
		float xf = (float)x, yf = (float)y;
		cr_assert_leq(ulpsf((float)fm_pow(xf, yf), powl((long double)xf, (long double)yf)), 1.0,
			      "pow(%a, %a) as a float", (double)xf, (double)yf);
	}
	cr_assert_eq(fm_pow(10000.0, 0.0), 1.0);
	cr_assert_eq(fm_pow(0.0, 2.0), 0.0);
	cr_assert(isinf(fm_pow(0.0, -1.0)));
	cr_assert(isnan(fm_pow(-2.0, 0.5)));
}

Test(fmath, sincos_within_two_ulps)
{
	for (int i = 0; i < 200000; i++) {
		double x = i % 2 ? uniform(-1.6e6, 1.6e6) : uniform(-10.0, 10.0);
		double s, c;
		fm_sincos(x, &s, &c);
		long double ws = sinl((long double)x), wc = cosl((long double)x);
		/* Near a zero of sin or cos the reduction's absolute error
		 * (about 2^-70 |x|) is what counts. */
		double floor_abs = 0x1p-70 * fmax(1.0, fabs(x));
		double us = ulps(s, ws), uc = ulps(c, wc);
		cr_assert(us <= 4.0 || fabsl((long double)s - ws) <= floor_abs, "sin(%a): %.3g ulps", x, us);
		cr_assert(uc <= 4.0 || fabsl((long double)c - wc) <= floor_abs, "cos(%a): %.3g ulps", x, uc);
		float xf = (float)x, sf, cf;
		fm_sincosf(xf, &sf, &cf);
		cr_assert_leq(ulpsf(sf, sinl((long double)xf)), 1.0, "sinf(%a)", (double)xf);
		cr_assert_leq(ulpsf(cf, cosl((long double)xf)), 1.0, "cosf(%a)", (double)xf);
	}
}

Test(fmath, special_values)
{
	cr_assert(isnan(fm_expf(NAN)));
	cr_assert(isnan(fm_logf(NAN)));
	cr_assert(isnan(fm_log1pf(NAN)));
	cr_assert_eq(fm_expf(INFINITY), INFINITY);
	cr_assert_eq(fm_expf(-INFINITY), 0.0f);
	cr_assert_eq(fm_expf(0.0f), 1.0f);
	cr_assert_eq(fm_expf(-0.0f), 1.0f);
	cr_assert_eq(fm_expf(89.0f), INFINITY);
	cr_assert_eq(fm_expf(-104.0f), 0.0f);
	cr_assert_gt(fm_expf(-100.0f), 0.0f, "a subnormal float result");
	cr_assert_eq(fm_exp(710.0), INFINITY);
	cr_assert_eq(fm_exp(-746.0), 0.0);
	cr_assert_eq(fm_logf(1.0f), 0.0f);
	cr_assert_eq(fm_logf(0.0f), -INFINITY);
	cr_assert(isnan(fm_logf(-1.0f)));
	cr_assert_eq(fm_logf(INFINITY), INFINITY);
	cr_assert_leq(ulpsf(fm_logf(FLT_TRUE_MIN), logl((long double)FLT_TRUE_MIN)), 1.0);
	cr_assert_leq(ulps(fm_log(DBL_TRUE_MIN), logl((long double)DBL_TRUE_MIN)), 2.0);
	cr_assert_eq(fm_log1pf(-1.0f), -INFINITY);
	cr_assert(isnan(fm_log1pf(-2.0f)));
	float z = fm_log1pf(-0.0f);
	cr_assert(z == 0.0f);
	float s, c;
	fm_sincosf(INFINITY, &s, &c);
	cr_assert(isnan(s) && isnan(c));
	fm_sincosf(0.0f, &s, &c);
	cr_assert(s == 0.0f && c == 1.0f);
	cr_assert_eq(fm_sigmoidf(0.0f), 0.5f);
	cr_assert_eq(fm_siluf(0.0f), 0.0f);
	cr_assert_eq(fm_sigmoidf(-INFINITY), 0.0f);
	cr_assert_eq(fm_sigmoidf(INFINITY), 1.0f);
	cr_assert_eq(fm_softplusf(30.0f), 30.0f, "above the threshold softplus is x");
	cr_assert_leq(ulpsf(fm_softplusf(0.5f), log1pl(expl(0.5L))), 1.0);
	cr_assert_leq(ulpsf(fm_softplusf(-12.0f), log1pl(expl(-12.0L))), 1.0);
}
