/*
 * fmath — exp, log, pow and sincos in double precision from IEEE basic
 * operations only (see fmath.h). The build's -ffp-contract=off keeps every
 * multiply and add as written; nothing here calls the C library's
 * transcendental functions.
 *
 * exp: k = rint(32 x / ln 2), r = (x - k ln2_hi / 32) - k ln2_lo / 32
 * (ln2_hi has 32 significant bits, so k ln2_hi / 32 is exact for |k| <
 * 2^21), |r| <= ln 2 / 64; exp(x) = 2^(k >> 5) 2^((k & 31) / 32) exp(r),
 * with exp(r) - 1 by its Taylor series to r^6 (remainder below 1e-17) in
 * Horner form, the table value t as t + t (exp(r) - 1), then times the
 * power of two in two exact steps.
 * log: x = m 2^e with m in [sqrt(1/2), sqrt(2)); f = m - 1 (exact),
 * s = f / (2 + f), log m = 2 s (1 + s^2/3 + ... + s^22/23) (remainder below
 * 1e-18); log x = (e ln2_lo + log m) + e ln2_hi.
 * sincos: k = rint(x 2/pi), r = ((x - k p1) - k p2) - k p3 with p1, p2
 * of 33 bits each (exact products for |k| < 2^20), |r| <= pi/4; sin r and
 * cos r by Taylor series to r^19 / r^20; the quadrant k mod 4 picks the
 * signs.
 */
#include "compute/fmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define SQRT_HALF 0.70710678118654752440

double fm_exp(double x)
{
	return fm_exp_inline(x);
}

const double fm_exp2_32[32] = {
	0x1.0000000000000p+0, /* 2^(0/32) */
	0x1.059b0d3158574p+0, /* 2^(1/32) */
	0x1.0b5586cf9890fp+0, /* 2^(2/32) */
	0x1.11301d0125b51p+0, /* 2^(3/32) */
	0x1.172b83c7d517bp+0, /* 2^(4/32) */
	0x1.1d4873168b9aap+0, /* 2^(5/32) */
	0x1.2387a6e756238p+0, /* 2^(6/32) */
	0x1.29e9df51fdee1p+0, /* 2^(7/32) */
	0x1.306fe0a31b715p+0, /* 2^(8/32) */
	0x1.371a7373aa9cbp+0, /* 2^(9/32) */
	0x1.3dea64c123422p+0, /* 2^(10/32) */
	0x1.44e086061892dp+0, /* 2^(11/32) */
	0x1.4bfdad5362a27p+0, /* 2^(12/32) */
	0x1.5342b569d4f82p+0, /* 2^(13/32) */
	0x1.5ab07dd485429p+0, /* 2^(14/32) */
	0x1.6247eb03a5585p+0, /* 2^(15/32) */
	0x1.6a09e667f3bcdp+0, /* 2^(16/32) */
	0x1.71f75e8ec5f74p+0, /* 2^(17/32) */
	0x1.7a11473eb0187p+0, /* 2^(18/32) */
	0x1.82589994cce13p+0, /* 2^(19/32) */
	0x1.8ace5422aa0dbp+0, /* 2^(20/32) */
	0x1.93737b0cdc5e5p+0, /* 2^(21/32) */
	0x1.9c49182a3f090p+0, /* 2^(22/32) */
	0x1.a5503b23e255dp+0, /* 2^(23/32) */
	0x1.ae89f995ad3adp+0, /* 2^(24/32) */
	0x1.b7f76f2fb5e47p+0, /* 2^(25/32) */
	0x1.c199bdd85529cp+0, /* 2^(26/32) */
	0x1.cb720dcef9069p+0, /* 2^(27/32) */
	0x1.d5818dcfba487p+0, /* 2^(28/32) */
	0x1.dfc97337b9b5fp+0, /* 2^(29/32) */
	0x1.ea4afa2a490dap+0, /* 2^(30/32) */
	0x1.f50765b6e4540p+0, /* 2^(31/32) */
};

double fm_log(double x)
{
	if (x != x || x < 0.0)
		return NAN;
	if (x == 0.0)
		return -INFINITY;
	if (x == INFINITY)
		return x;
	int e = 0;
	if (x < 0x1p-1022) { /* subnormal: scale into the normal range, exactly */
		x *= 0x1p54;
		e = -54;
	}
	uint64_t b;
	memcpy(&b, &x, 8);
	e += (int)((b >> 52) & 0x7ff) - 1023;
	b = (b & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
	double m;
	memcpy(&m, &b, 8); /* [1, 2) */
	if (m > 2.0 * SQRT_HALF) {
		m *= 0.5;
		e++;
	}
	double f = m - 1.0;
	double s = f / (2.0 + f);
	double z = s * s;
	double p = 1.0 / 23.0;
	p = p * z + 1.0 / 21.0;
	p = p * z + 1.0 / 19.0;
	p = p * z + 1.0 / 17.0;
	p = p * z + 1.0 / 15.0;
	p = p * z + 1.0 / 13.0;
	p = p * z + 1.0 / 11.0;
	p = p * z + 1.0 / 9.0;
	p = p * z + 1.0 / 7.0;
	p = p * z + 1.0 / 5.0;
	p = p * z + 1.0 / 3.0;
	double lm = (2.0 * s) + (2.0 * s) * (z * p);
	double ed = (double)e;
	return (ed * FM_LN2_LO + lm) + ed * FM_LN2_HI;
}

double fm_pow(double x, double y)
{
	if (x != x || y != y)
		return NAN;
	if (x < 0.0)
		return NAN;
	if (x == 0.0)
		return y > 0.0 ? 0.0 : y == 0.0 ? 1.0 : INFINITY;
	if (y == 0.0)
		return 1.0;
	return fm_exp(y * fm_log(x));
}

#define PIO2_1 1.57079632673412561417e+00  /* first 33 bits of pi/2 */
#define PIO2_2 6.07710050630396597660e-11  /* next 33 bits */
#define PIO2_3 2.02226624879595063154e-21  /* pi/2 - PIO2_1 - PIO2_2 */
#define TWO_OVER_PI 6.36619772367581382433e-01

void fm_sincos(double x, double *s, double *c)
{
	if (x != x || x == INFINITY || x == -INFINITY) {
		*s = *c = NAN;
		return;
	}
	double kd = rint(x * TWO_OVER_PI);
	double r = ((x - kd * PIO2_1) - kd * PIO2_2) - kd * PIO2_3;
	double z = r * r;
	/* sin r = r (1 - z/3! + z^2/5! - ... - z^9/19!) */
	double ps = -1.0 / 121645100408832000.0;
	ps = ps * z + 1.0 / 355687428096000.0;
	ps = ps * z - 1.0 / 1307674368000.0;
	ps = ps * z + 1.0 / 6227020800.0;
	ps = ps * z - 1.0 / 39916800.0;
	ps = ps * z + 1.0 / 362880.0;
	ps = ps * z - 1.0 / 5040.0;
	ps = ps * z + 1.0 / 120.0;
	ps = ps * z - 1.0 / 6.0;
	double sr = r + r * (z * ps);
	/* cos r = 1 - z/2! + z^2/4! - ... + z^10/20! */
	double pc = 1.0 / 2432902008176640000.0;
	pc = pc * z - 1.0 / 6402373705728000.0;
	pc = pc * z + 1.0 / 20922789888000.0;
	pc = pc * z - 1.0 / 87178291200.0;
	pc = pc * z + 1.0 / 479001600.0;
	pc = pc * z - 1.0 / 3628800.0;
	pc = pc * z + 1.0 / 40320.0;
	pc = pc * z - 1.0 / 720.0;
	pc = pc * z + 1.0 / 24.0;
	pc = pc * z - 0.5;
	double cr = 1.0 + z * pc;
	/* The quadrant, k mod 4, from the low bits of k (|k| < 2^53). */
	int64_t k = (int64_t)kd;
	switch ((int)(k & 3)) {
	case 0:
		*s = sr;
		*c = cr;
		break;
	case 1:
		*s = cr;
		*c = -sr;
		break;
	case 2:
		*s = -sr;
		*c = -cr;
		break;
	default:
		*s = -cr;
		*c = sr;
		break;
	}
}

float fm_logf(float x)
{
	return (float)fm_log((double)x);
}

float fm_log1pf(float x)
{
	double xd = (double)x;
	if (xd > -0x1p-20 && xd < 0x1p-20) /* log1p x = x - x^2/2 + x^3/3, to 2^-60 */
		return (float)(xd - (xd * xd) * 0.5 + (xd * xd * xd) * (1.0 / 3.0));
	/* 1 + x is exact in double for any float |x| >= 2^-20 */
	return (float)fm_log(1.0 + xd);
}

void fm_sincosf(float x, float *s, float *c)
{
	double sd, cd;
	fm_sincos((double)x, &sd, &cd);
	*s = (float)sd;
	*c = (float)cd;
}

float fm_sigmoidf(float x)
{
	return 1.0f / (1.0f + fm_expf(-x));
}

float fm_siluf(float x)
{
	return x / (1.0f + fm_expf(-x));
}

float fm_softplusf(float x)
{
	return x > 20.0f ? x : fm_log1pf(fm_expf(x));
}
