/*
 * fmath — exp, log, pow and sincos in double precision from IEEE basic
 * operations only (see fmath.h). The build's -ffp-contract=off keeps every
 * multiply and add as written; nothing here calls the C library's
 * transcendental functions.
 *
 * exp: k = rint(x / ln 2), r = (x - k ln2_hi) - k ln2_lo (ln2_hi has 32
 * significant bits, so k ln2_hi is exact for |k| < 2^21), |r| <= 0.35;
 * exp(r) by its Taylor series to r^13 (remainder below 1e-17) in Horner
 * form; then times 2^k in two exact steps.
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

#define LN2_HI 6.93147180369123816490e-01 /* 0x3fe62e42fee00000 */
#define LN2_LO 1.90821492927058770002e-10
#define INV_LN2 1.44269504088896338700e+00
#define SQRT_HALF 0.70710678118654752440

/* 2^k for -1022 <= k <= 1023, exactly. */
static double pow2i(int k)
{
	uint64_t b = (uint64_t)(k + 1023) << 52;
	double d;
	memcpy(&d, &b, 8);
	return d;
}

double fm_exp(double x)
{
	if (x != x)
		return x;
	if (x > 709.8)
		return INFINITY;
	if (x < -745.2)
		return 0.0;
	double kd = rint(x * INV_LN2);
	double r = (x - kd * LN2_HI) - kd * LN2_LO;
	/* 1/n! for n = 13 .. 2, Horner from the top. */
	double p = 1.0 / 6227020800.0;
	p = p * r + 1.0 / 479001600.0;
	p = p * r + 1.0 / 39916800.0;
	p = p * r + 1.0 / 3628800.0;
	p = p * r + 1.0 / 362880.0;
	p = p * r + 1.0 / 40320.0;
	p = p * r + 1.0 / 5040.0;
	p = p * r + 1.0 / 720.0;
	p = p * r + 1.0 / 120.0;
	p = p * r + 1.0 / 24.0;
	p = p * r + 1.0 / 6.0;
	p = p * r + 0.5;
	p = p * r + 1.0;
	p = p * r + 1.0;
	int k = (int)kd, k1 = k / 2;
	return p * pow2i(k1) * pow2i(k - k1);
}

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
	return (ed * LN2_LO + lm) + ed * LN2_HI;
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

float fm_expf(float x)
{
	return (float)fm_exp((double)x);
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
