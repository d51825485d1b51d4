/*
 * attention — one query head against a KV cache, causal by construction
 * (the caller passes only the positions it may see).
 *
 * Scores go through dot_f32 and the weighted sum through axpy_f32 in
 * position order, so the result is fixed for a given SIMD level and does
 * not depend on how heads are spread over threads.
 */
#include <math.h>

#include "compute/kernels.h"
#include "compute/fmath.h"

void attention_head_keys(float *out, const float *q, const float *k, int64_t k_stride,
			 const float *v, int64_t v_stride, const int32_t *keys, int64_t n_keys,
			 int64_t k_dim, int64_t v_dim, float scale, float *scratch)
{
	for (int64_t i = 0; i < n_keys; i++)
		scratch[i] = scale * dot_f32(q, k + keys[i] * k_stride, k_dim);
	softmax(scratch, n_keys);
	for (int64_t i = 0; i < v_dim; i++)
		out[i] = 0.0f;
	for (int64_t i = 0; i < n_keys; i++)
		axpy_f32(out, scratch[i], v + keys[i] * v_stride, v_dim);
}

void attention_head(float *out, const float *q, const float *k, int64_t k_stride,
		    const float *v, int64_t v_stride, int64_t n_ctx, int64_t k_dim,
		    int64_t v_dim, float scale, float *scratch)
{
	for (int64_t t = 0; t < n_ctx; t++)
		scratch[t] = scale * dot_f32(q, k + t * k_stride, k_dim);
	softmax(scratch, n_ctx);
	for (int64_t i = 0; i < v_dim; i++)
		out[i] = 0.0f;
	for (int64_t t = 0; t < n_ctx; t++)
		axpy_f32(out, scratch[t], v + t * v_stride, v_dim);
}

void attention_head_bias(float *out, const float *q, const float *k, int64_t k_stride,
			 const float *v, int64_t v_stride, int64_t n_ctx, int64_t k_dim,
			 int64_t v_dim, float scale, float *bias)
{
	for (int64_t t = 0; t < n_ctx; t++)
		bias[t] += scale * dot_f32(q, k + t * k_stride, k_dim);
	softmax(bias, n_ctx);
	for (int64_t i = 0; i < v_dim; i++)
		out[i] = 0.0f;
	for (int64_t t = 0; t < n_ctx; t++)
		axpy_f32(out, bias[t], v + t * v_stride, v_dim);
}

void attention_head_sink(float *out, const float *q, const float *k, int64_t k_stride,
			 const float *v, int64_t v_stride, int64_t n_ctx, int64_t k_dim,
			 int64_t v_dim, float scale, float sink, float *scratch)
{
	float max = sink, sum = 0.0f;
	for (int64_t t = 0; t < n_ctx; t++) {
		scratch[t] = scale * dot_f32(q, k + t * k_stride, k_dim);
		max = scratch[t] > max ? scratch[t] : max;
	}
	for (int64_t t = 0; t < n_ctx; t++) {
		scratch[t] = fm_expf(scratch[t] - max);
		sum += scratch[t];
	}
	sum += fm_expf(sink - max);
	for (int64_t i = 0; i < v_dim; i++)
		out[i] = 0.0f;
	for (int64_t t = 0; t < n_ctx; t++)
		axpy_f32(out, scratch[t] / sum, v + t * v_stride, v_dim);
}
