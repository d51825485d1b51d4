/*
 * activation — elementwise and normalising activations: softmax and the
 * SwiGLU gate. Plain C: these touch a few thousand floats per token and are
 * not worth SIMD variants; -ffp-contract=off keeps their order as written.
 */
#include <math.h>

#include "compute/kernels.h"
#include "compute/fmath.h"

void softmax(float *x, int64_t n)
{
	if (n <= 0)
		return;
	float max = x[0];
	for (int64_t i = 1; i < n; i++)
		if (x[i] > max)
			max = x[i];
	float sum = 0.0f;
	for (int64_t i = 0; i < n; i++) {
		x[i] = fm_expf(x[i] - max);
		sum += x[i];
	}
	/* Dividing (not multiplying by 1/sum) matches torch.softmax rounding. */
	for (int64_t i = 0; i < n; i++)
		x[i] /= sum;
}

void swiglu(float *out, const float *gate, const float *up, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		float g = gate[i];
		out[i] = fm_siluf(g) * up[i];
	}
}
