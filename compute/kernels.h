/*
 * kernels — the numerical building blocks of a forward pass.
 *
 * Every kernel has a plain scalar version (the reference) and, where it pays,
 * AVX2, AVX-VNNI, AVX-512 and AVX512-VNNI versions chosen once at run time
 * from CPUID (see cpu.h). Activations are f32, except that int4, mxfp4, int8
 * and the GGML block weights may meet them quantized to int8 / int16
 * (kernels_set_activations). Three rules keep results reproducible:
 *  - every level follows docs/ARITHMETIC.md's order of operations (the
 *    32-lane dot product, the quantized lanes), so all write the same bits;
 *  - each output element is reduced by one thread in a fixed order, so the
 *    result does not depend on the thread count;
 *  - row t of matmul() is bit-identical to matvec() on token t, so prefill,
 *    decode and batched verification agree exactly.
 */
#ifndef COLIBRI_COMPUTE_KERNELS_H
#define COLIBRI_COMPUTE_KERNELS_H

#include <stdint.h>
#include "compute/quant.h"

struct threadpool;

/* How int8, int4, mxfp4 and the GGML block weights (q8_0, q4_0, q4_k,
 * q5_k, q6_k) meet their activations, for the whole process (set before the
 * first forward pass; f32, bf16 and f16 always take f32). mxfp4 and the
 * block types go as int4 does: their weights are small integers times
 * scales (mxfp4 2 * e2m1 in [-12, 12] times a power of two; q4_k d * sc * q
 * - dmin * m, the two parts summed apart; kernels_internal.h), so against
 * int8 activations only the activations are rounded. Under "f32" a block
 * type's matvec is bit-identical to an f32 matvec of its dequantized
 * weights.
 * A weight either is dequantized, w = q * scale, and multiplied with the f32
 * activations, or meets the token's activations quantized per run of 32
 * inputs (scale max|x| / 127 for int8, / 32767 for int16, rounded to
 * nearest even), the products of a run summed exactly in integers and
 * scaled by the two scales: the way llama.cpp's Q4_0 / Q8_0 kernels work,
 * several times less arithmetic per weight, and the same bits at every SIMD
 * level.
 *   "auto"  int4 / mxfp4 / block weights meet int8 activations, int8 weights int16 (the
 *           default: within 1.1x of the f32 path's KL to the f32 model on
 *           every fixture family; test_forward);
 *   "int8"  all meet int8 activations (on int8 weights 2-12x their KL);
 *   "f32"   none is quantized.
 * All are deterministic and independent of threads and batch;
 * kernels_set_activations returns -EINVAL for any other name. */
int kernels_set_activations(const char *name);
const char *kernels_activations_name(void);

/* The SIMD level the kernels run at: "scalar", "avx2", "avxvnni", "avx512" or
 * "avx512vnni". */
const char *kernels_ops_name(void);

/* out[rows] = m x, x[cols]. out must not alias x. pool may be NULL (caller's
 * thread only). */
void matvec(struct threadpool *pool, float *out, const struct qmatrix *m, const float *x);

/* out[n, rows] = x[n, cols] m^T: n tokens through one matrix, the weights
 * streamed once. Row t equals matvec(x + t*cols) bit for bit. */
void matmul(struct threadpool *pool, float *out, const struct qmatrix *m,
	    const float *x, int64_t n);

/* out_a[n, a->rows] = x a^T and out_b[n, b->rows] = x b^T in one pass over
 * the pool, the activations quantized once (a SwiGLU's gate and up): each
 * the bits of its own matmul. Two matmuls where a and b differ in type,
 * width or group. */
void matmul_pair(struct threadpool *pool, float *out_a, const struct qmatrix *a, float *out_b,
		 const struct qmatrix *b, const float *x, int64_t n);

/* out[n] = x[n] / sqrt(mean(x^2) + eps) * w[n]; out may alias x. */
void rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);

/* The same without a weight: out[n] = x[n] / sqrt(mean(x^2) + eps). */
void rmsnorm_plain(float *out, const float *x, int64_t n, float eps);

/* In-place softmax over x[n], max-subtracted. */
void softmax(float *x, int64_t n);

/* out[n] = silu(gate[n]) * up[n]; out may alias gate. */
void swiglu(float *out, const float *gate, const float *up, int64_t n);

/* Rotary embedding of one head vector x[dim] at position pos, rotating the
 * first rot_dim entries. inv_freq[rot_dim/2] holds the per-pair frequencies.
 * ROPE_NEOX pairs (i, i + rot_dim/2) ("rotate_half", Llama/Qwen/Mixtral);
 * ROPE_GPTJ pairs (2i, 2i+1) (interleaved, DeepSeek MLA rope part). */
enum rope_kind { ROPE_NEOX = 0, ROPE_GPTJ = 1 };
void rope(float *x, int64_t rot_dim, int64_t pos, const float *inv_freq, enum rope_kind kind);

/* Indices of the k largest values of x[n] in descending order of value (ties:
 * lower index first) into idx[k]. k <= n. */
void topk(int32_t *idx, const float *x, int64_t n, int64_t k);

/* The set of the k largest values of x[n] (ties: lower index first), as
 * indices in increasing order into idx[k]; expected O(n) time. scratch holds
 * n floats. k <= n; NaN ranks lowest, as in topk. */
void topk_set(int32_t *idx, const float *x, int64_t n, int64_t k, float *scratch);

/* Causal attention of one query head over n_ctx cached positions:
 * out[v_dim] = sum_t softmax_t(scale * q.k_t) v_t, where k_t = k + t*k_stride
 * (k_dim floats) and v_t = v + t*v_stride (v_dim floats). scratch holds n_ctx
 * floats. */
void attention_head(float *out, const float *q, const float *k, int64_t k_stride,
		    const float *v, int64_t v_stride, int64_t n_ctx, int64_t k_dim,
		    int64_t v_dim, float scale, float *scratch);

/* attention_head with a sink: one more logit, `sink`, joins the softmax
 * (its maximum included) and takes no value, so the weights of the keys
 * sum to less than 1 (gpt-oss's self_attn.sinks). */
void attention_head_sink(float *out, const float *q, const float *k, int64_t k_stride,
			 const float *v, int64_t v_stride, int64_t n_ctx, int64_t k_dim,
			 int64_t v_dim, float scale, float sink, float *scratch);

/* attention_head with an additive bias per position (Inkling's relative
 * position bias): bias[n_ctx] holds on entry what each score gets added
 * after the scale, and is the scratch after. */
void attention_head_bias(float *out, const float *q, const float *k, int64_t k_stride,
			 const float *v, int64_t v_stride, int64_t n_ctx, int64_t k_dim,
			 int64_t v_dim, float scale, float *bias);

/* attention_head over the positions keys[n_keys] only (increasing), as
 * sparse attention selects them. */
void attention_head_keys(float *out, const float *q, const float *k, int64_t k_stride,
			 const float *v, int64_t v_stride, const int32_t *keys, int64_t n_keys,
			 int64_t k_dim, int64_t v_dim, float scale, float *scratch);

/* Dot product of two f32 vectors in docs/ARITHMETIC.md's order (32 lanes of
 * fused multiply-adds, folded i + 16, 8, 4, 2, 1). */
float dot_f32(const float *a, const float *b, int64_t n);

/* out[i] = fmaf(a, x[i], out[i]) */
void axpy_f32(float *out, float a, const float *x, int64_t n);

#endif
