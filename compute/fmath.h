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

float fm_expf(float x);
float fm_logf(float x);
float fm_log1pf(float x);
void fm_sincosf(float x, float *s, float *c);

/* 1 / (1 + exp(-x)) and x * sigmoid(x) (SiLU), as the model code writes
 * them: x / (1 + exp(-x)). */
float fm_sigmoidf(float x);
float fm_siluf(float x);

#endif
