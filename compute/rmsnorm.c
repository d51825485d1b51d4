/*
 * rmsnorm — root-mean-square layer norm as in Llama/Qwen/DeepSeek:
 * out = x / sqrt(mean(x^2) + eps) * w, computed in f32 like the reference
 * models do after upcasting. The sum of squares goes through dot_f32, so it
 * follows the kernels' fixed order for the chosen SIMD level.
 */
#include <math.h>

#include "compute/kernels.h"

void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
	float ss = dot_f32(x, x, n);
	float inv = 1.0f / sqrtf(ss / (float)n + eps);
	/* Element i is read before it is written, so out may alias x. */
	for (int64_t i = 0; i < n; i++)
		out[i] = (x[i] * inv) * w[i];
}

void rmsnorm_plain(float *out, const float *x, int64_t n, float eps)
{
	float inv = 1.0f / sqrtf(dot_f32(x, x, n) / (float)n + eps);
	for (int64_t i = 0; i < n; i++)
		out[i] = x[i] * inv;
}
