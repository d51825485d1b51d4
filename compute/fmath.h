/*
 * fmath — the transcendental functions of the token path, ours rather than
 * the C library's, so that every machine computes the same bits
 * (docs/ARITHMETIC.md).
 *
 * Each libm (glibc's FMA and non-FMA variants, musl, Apple's, a GPU's) may
 * round exp, log, sin and cos differently in the last bit; these are
 * written with IEEE additions, subtractions, multiplications, divisions and
 * rint only, in double precision, in one written order, so any machine
 * that does IEEE double arithmetic (x86-64, AArch64 NEON, a GPU's f64)
 * reproduces them exactly. The float versions evaluate in double and round
 * once at the end: within about half an ulp of the true value, so they
 * stand in for expf and friends against the references.
 *
 * Special values: NaN in, NaN out; exp(+inf) = inf, exp(-inf) = 0;
 * log(0) = -inf, log(x < 0) = NaN, log(+inf) = inf; sincos of an infinity
 * is NaN.
 */
#ifndef COLIBRI_COMPUTE_FMATH_H
#define COLIBRI_COMPUTE_FMATH_H

#include <math.h>
#include <stdint.h>

/* exp within 2 ulps of double; log within 2.
 * x^y for x > 0 (exp(y log x)); 0^y is 0 for y > 0, 1 for y == 0, inf for
 * y < 0; NaN for x < 0. Within 4 + 2 |y log x| ulps. */
double fm_exp(double x);
double fm_log(double x);
double fm_pow(double x, double y);

/* sin and cos of x, within 4 ulps. The reduction by pi/2 is exact to about 1e-21 for
 * |x| < 1.6e6 (2^20 * pi / 2), which covers the RoPE angles of every
 * context length in use; beyond it the error grows with |x|, the same
 * on every machine. */
void fm_sincos(double x, double *s, double *c);

float fm_logf(float x);
float fm_log1pf(float x);
void fm_sincosf(float x, float *s, float *c);

/* 1 / (1 + exp(-x)) and x * sigmoid(x) (SiLU), as the model code writes
 * them: x / (1 + exp(-x)). */
float fm_sigmoidf(float x);
float fm_siluf(float x);

/* torch.nn.functional.softplus with its defaults (beta 1, threshold 20):
 * x above 20, else log1p(exp(x)). */
float fm_softplusf(float x);


/* The inline body of fm_exp and fm_expf (the softmax and SiLU loops call
 * them per element); fmath.c's comment describes the method. */
#define FM_LN2_HI 6.93147180369123816490e-01 /* 0x3fe62e42fee00000 */
#define FM_LN2_LO 1.90821492927058770002e-10
#define FM_INV_LN2 1.44269504088896338700e+00
extern const double fm_exp2_32[32]; /* 2^(j/32), rounded to double */

/* 2^k for -1022 <= k <= 1023, exactly. */
static inline double fm_pow2i(int k)
{
	union {
		uint64_t u;
		double d;
	} b = { .u = (uint64_t)(k + 1023) << 52 };
	return b.d;
}

static inline double fm_exp_inline(double x)
{
	if (x != x)
		return x;
	if (x > 709.8)
		return (double)INFINITY;
	if (x < -745.2)
		return 0.0;
	double kd = rint(x * (32.0 * FM_INV_LN2));
	double r = (x - kd * (FM_LN2_HI / 32.0)) - kd * (FM_LN2_LO / 32.0);
	/* exp(r) - 1 to r^6 / 6!, Horner from the top. */
	double p = 1.0 / 720.0;
	p = p * r + 1.0 / 120.0;
	p = p * r + 1.0 / 24.0;
	p = p * r + 1.0 / 6.0;
	p = p * r + 0.5;
	p = p * r + 1.0;
	p = p * r;
	int k = (int)kd, e = k >> 5; /* floor(k / 32): >> of a negative int is arithmetic in gcc and clang */
	double t = fm_exp2_32[k & 31];
	int e1 = e / 2;
	return (t + t * p) * fm_pow2i(e1) * fm_pow2i(e - e1);
}

static inline float fm_expf(float x)
{
	return (float)fm_exp_inline((double)x);
}

#endif
