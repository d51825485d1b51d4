/*
 * quant — weight storage formats shared by the converter, the container and
 * the kernels.
 *
 * A matrix W has `rows` outputs and `cols` inputs (HF Linear layout
 * [out_features, in_features]) and is stored row-major as one byte block:
 *
 *   QUANT_F32   rows * cols float, little-endian.
 *   QUANT_BF16  rows * cols uint16 (the top half of the f32 bit pattern).
 *   QUANT_INT8  data:   rows * cols int8 q, symmetric, q in [-127, 127]
 *               scales: rows * (cols / group) float, immediately after data.
 *               w[r][c] = q[r][c] * scale[r][c / group].
 *   QUANT_INT4  data:   rows * cols / 2 bytes, then scales as for INT8.
 *               Each run of 32 inputs (c = 32k .. 32k+31) is 16 bytes b[0..15]:
 *               input 32k+i sits in the low nibble of b[i], input 32k+16+i in
 *               the high nibble of b[i]; a nibble n means q = n - 8, q in [-8, 7]
 *               (the quantizer only writes -7..7).
 *               w[r][c] = q[r][c] * scale[r][c / group].
 *
 *   QUANT_MXFP4 OCP MX FP4 (how gpt-oss releases its experts), blocks of 32
 *               inputs, each with its own power-of-two scale; the group is
 *               fixed at 32 (the group argument is ignored, as for F32/BF16,
 *               and qmatrix.group reads 32) and scales is NULL: each row
 *               carries its own. Row r is 17 * cols / 32 bytes:
 *                 codes  cols / 2 bytes: block k (c = 32k .. 32k+31) is 16
 *                        bytes b[0..15] in INT4's order: input 32k+i in the
 *                        low nibble of b[i], 32k+16+i in the high nibble;
 *                 e8m0   cols / 32 bytes right after, byte k the scale
 *                        exponent e of block k.
 *               A code n is e2m1: sign bit 3, magnitude
 *               {0, 0.5, 1, 1.5, 2, 3, 4, 6}[n & 7] (n = 8 is -0).
 *               w[r][c] = e2m1(n) * 2^(e - 127), exact in f32 (a magnitude
 *               of at most two significant bits times a power of two from
 *               2^-127 to 2^127), except that it overflows to +-inf for
 *               e = 253 with |e2m1| >= 4 and e = 254 with |e2m1| >= 2, as
 *               in transformers. e = 255 (NaN in the spec) is never written.
 *
 *   QUANT_F16   rows * cols uint16, IEEE binary16 (a GGUF's F16 tensors).
 *               The only one of the GGML-born types that quant_matrix_quantize
 *               makes: round to nearest even, as numpy's astype(float16) and
 *               ggml's FP32_TO_FP16; overflow to +-inf, NaN stays NaN.
 *
 * GGML block formats, stored exactly as a GGUF holds them (ggml-common.h)
 * so that a converted container keeps the file's bits: rows of blocks, rows
 * consecutive, no scales array (scales NULL), qmatrix.group the elements
 * per block, cols % block == 0. A half d below is IEEE binary16, little-
 * endian, converted exactly to f32; every formula is f32 arithmetic in the
 * order written (ggml's dequantize_row_*, which the kernels reproduce):
 *
 *   QUANT_Q8_0  32 inputs in 34 bytes: { half d; int8 q[32]; }
 *               w[j] = (float)q[j] * d.
 *   QUANT_Q4_0  32 inputs in 18 bytes: { half d; uint8 qs[16]; }
 *               w[j] = (float)((qs[j] & 15) - 8) * d,
 *               w[j + 16] = (float)((qs[j] >> 4) - 8) * d, j < 16.
 *   QUANT_Q4_K  256 inputs in 144 bytes:
 *               { half d, dmin; uint8 scales[12]; uint8 qs[128]; }
 *               eight sub-blocks of 32, sub-block i with a 6-bit scale sc_i
 *               and min m_i packed in scales (i < 4: sc = scales[i] & 63,
 *               m = scales[i + 4] & 63; i >= 4: sc = (scales[i + 4] & 15) |
 *               (scales[i - 4] >> 6) << 4, m = (scales[i + 4] >> 4) |
 *               (scales[i] >> 6) << 4). Inputs 64k .. 64k + 31 are the low
 *               nibbles of qs[32k .. 32k + 31] (sub-block 2k), 64k + 32 ..
 *               64k + 63 their high nibbles (sub-block 2k + 1):
 *               d1 = d * sc_i, m1 = dmin * m_i, w = d1 * (float)q - m1.
 *   QUANT_Q5_K  256 inputs in 176 bytes:
 *               { half d, dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128]; }
 *               as Q4_K, q gaining a fifth bit 16: input 64k + l (l < 32)
 *               takes bit 2k of qh[l], input 64k + 32 + l bit 2k + 1.
 *   QUANT_Q6_K  256 inputs in 210 bytes:
 *               { uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d; }
 *               two halves of 128, half h with ql + 64h, qh + 32h, scales +
 *               8h; within a half, input 32k + l (k < 4, l < 32) is
 *               q = (low | high << 4) - 32, low the nibble k >> 1 of
 *               ql[l + 32 (k & 1)] (low nibble first), high bits 2k, 2k + 1
 *               of qh[l], its scale s = scales[2k + l / 16]:
 *               w = (d * (float)s) * (float)q.
 *
 * Grouped formats need cols % group == 0 and group % 32 == 0. The scale of a
 * group is max|w| / 127 (int8) or max|w| / 7 (int4); an all-zero group has
 * scale 0. Rounding is to nearest, ties away from zero (roundf).
 *
 * MXFP4 from f32 follows triton_kernels' downcast_to_mxfp_torch (what
 * transformers v5.15.0 quantize_to_mxfp4 calls), bit for bit on f32 input:
 * per block, s = max|w| / 6 rounded up to a power of two (on the f32 bits:
 * (bits(s) + 0x7fffff) & 0x7f800000; an all-zero block gets e = 0), each
 * w * (1 / s) rounded to the nearest e2m1 value, ties away from zero,
 * saturating at 6, and the sign kept (so -0 stays -0). NaN weights (which
 * the converter refuses before quantizing) count as 0; an infinite block
 * gets e = 254 and saturates.
 */
#ifndef COLIBRI_COMPUTE_QUANT_H
#define COLIBRI_COMPUTE_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum quant_type {
	QUANT_F32 = 0,
	QUANT_BF16 = 1,
	QUANT_INT8 = 2,
	QUANT_INT4 = 3,
	QUANT_MXFP4 = 4,
	QUANT_F16 = 5,
	QUANT_Q8_0 = 6,
	QUANT_Q4_0 = 7,
	QUANT_Q4_K = 8,
	QUANT_Q5_K = 9,
	QUANT_Q6_K = 10,
};

#define QUANT_TYPE_COUNT 11
#define QUANT_MXFP4_BLOCK 32

/* Elements and bytes of one GGML block (quant.h's block formats). */
#define QUANT_Q8_0_BLOCK 32
#define QUANT_Q8_0_BYTES 34
#define QUANT_Q4_0_BLOCK 32
#define QUANT_Q4_0_BYTES 18
#define QUANT_K_BLOCK 256
#define QUANT_Q4_K_BYTES 144
#define QUANT_Q5_K_BYTES 176
#define QUANT_Q6_K_BYTES 210

#define QUANT_GROUP_DEFAULT 64

/* A weight matrix as the kernels see it. Points into memory owned elsewhere
 * (the resident arena or an expert frame); never freed through this struct. */
struct qmatrix {
	enum quant_type type;
	int32_t group;        /* inputs per scale; 0 for F32/BF16/F16, 32 for MXFP4,
			       * the block size (32 or 256) for the GGML blocks */
	int64_t rows;         /* outputs */
	int64_t cols;         /* inputs */
	const void *data;     /* [rows, cols] in the format above */
	const float *scales;  /* [rows, cols / group], NULL but for INT8/INT4 */
};

/* Name as used on the command line and in the manifest: "f32", "bf16",
 * "int8", "int4", "mxfp4", "f16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k".
 * quant_type_parse returns -EINVAL for anything else. */
const char *quant_type_name(enum quant_type type);
int quant_type_parse(const char *name, enum quant_type *out);

/* Whether quant_matrix_quantize can make `type` from f32: f32, bf16, int8,
 * int4, mxfp4 and f16. The GGML block types only come from a GGUF, as
 * they are. */
bool quant_type_quantizable(enum quant_type type);

/* The colibri type that holds ggml type number ggml_type (ggml.h: F32 0,
 * F16 1, Q4_0 2, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14, BF16 30, MXFP4 39),
 * into *out; -ENOTSUP for any other. MXFP4's bytes are not the container's
 * as they stand: they go through quant_mxfp4_from_ggml. */
int quant_from_ggml_type(uint32_t ggml_type, enum quant_type *out);

/* 0 if (type, rows, cols, group) is a valid layout, else -EINVAL. */
int quant_check_shape(enum quant_type type, int64_t rows, int64_t cols, int32_t group);

/* Why quant_check_shape refuses (type, rows, cols, group), as a sentence
 * fragment for an error message (static storage); NULL when it accepts. */
const char *quant_shape_error(enum quant_type type, int64_t rows, int64_t cols, int32_t group);

/* Bytes of the whole stored matrix (data plus scales). */
uint64_t quant_matrix_bytes(enum quant_type type, int64_t rows, int64_t cols, int32_t group);

/* Bytes of the data block only (scales follow at this offset). */
uint64_t quant_data_bytes(enum quant_type type, int64_t rows, int64_t cols);

/* Quantizes f32 src [rows, cols] into dst (quant_matrix_bytes long). The
 * shape must pass quant_check_shape and the type quant_type_quantizable
 * (asserted: callers taking a type from the user check it first). */
void quant_matrix_quantize(void *dst, const float *src, enum quant_type type,
			   int64_t rows, int64_t cols, int32_t group);

/* MXFP4 from released tensors, no float round trip: blocks [rows, cols / 32,
 * 16] and scales [rows, cols / 32] bytes as a checkpoint's `*_blocks` /
 * `*_scales` hold them (transformers' _convert_moe_packed_tensors: byte j of
 * a block holds input 2j in its low nibble and 2j + 1 in its high nibble;
 * scale byte e means 2^(e - 127)). Writes quant_matrix_bytes(QUANT_MXFP4)
 * bytes to dst. -EINVAL, dst untouched, when the shape fails
 * quant_check_shape or a scale byte is 255 (NaN). */
int quant_mxfp4_from_packed(void *dst, const uint8_t *blocks, const uint8_t *scales,
			    int64_t rows, int64_t cols);

/* MXFP4 from a GGUF's GGML blocks [rows, cols / 32] of 17 bytes { uint8 e;
 * uint8 qs[16]; } (qs[j] low nibble element j, high nibble element j + 16;
 * value kvalues[n] * 2^(e - 128) with kvalues 2 * e2m1) into dst in
 * QUANT_MXFP4's row layout, quant_matrix_bytes(QUANT_MXFP4) bytes: codes
 * and scale bytes move, none is recomputed (ggml's code 8 reads +0, ours
 * -0: the same value). -EINVAL, dst untouched, when the shape fails
 * quant_check_shape or an e is 255. */
int quant_mxfp4_from_ggml(void *dst, const void *blocks, int64_t rows, int64_t cols);

/* Builds a qmatrix view over a stored matrix block starting at `base`. */
void quant_matrix_view(struct qmatrix *m, const void *base, enum quant_type type,
		       int64_t rows, int64_t cols, int32_t group);

/* A view of rows [row, row + n) of m (a slice of one matrix, e.g. one
 * attention head's block); shares m's memory. */
void quant_matrix_rows(struct qmatrix *out, const struct qmatrix *m, int64_t row, int64_t n);

/* Dequantizes row `row` of m into dst[cols]. */
void quant_row_dequantize(float *dst, const struct qmatrix *m, int64_t row);

/* Dequantizes one block of a GGML block type (q8_0, q4_0, q4_k, q5_k,
 * q6_k) into dst[32 or 256], the values quant_row_dequantize gives. */
void quant_block_dequantize(float *dst, enum quant_type type, const void *block);

/* bf16 <-> f32. bf16 from f32 rounds to nearest even; NaN stays NaN. */
static inline float bf16_to_f32(uint16_t h)
{
	union { uint32_t u; float f; } v = { .u = (uint32_t)h << 16 };
	return v.f;
}
uint16_t f32_to_bf16(float f);

/* The value of e2m1 code n (low four bits): +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}. */
static inline float quant_e2m1_to_f32(unsigned n)
{
	static const float v[16] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
				     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f };
	return v[n & 15];
}

/* 2^(e - 127 - shift) exactly, for shift 0 (the e8m0 scale) or 1 (the scale
 * of 2 * e2m1, an integer in [-12, 12], as the int8 dot products use it);
 * the smallest are subnormal; e = 255 gives +inf at shift 0 (2^128). */
static inline float quant_e8m0_to_f32(unsigned e, unsigned shift)
{
	int b = (int)(e & 255) - (int)shift;
	union { uint32_t u; float f; } v;
	v.u = b >= 1 ? (uint32_t)b << 23 : 0x00400000u >> -b;
	return v.f;
}
float f16_to_f32(uint16_t h);
/* f16 from f32, rounding to nearest even (subnormals included); overflow
 * gives +-inf, a NaN stays a NaN (quiet, its top payload bits kept). */
uint16_t f32_to_f16(float f);
/* FP8 E4M3 (finite-only "fn" variant used by DeepSeek/GLM): 1 sign, 4 exponent
 * (bias 7), 3 mantissa bits; 0x7f/0xff are NaN; no infinities. */
float fp8_e4m3_to_f32(uint8_t v);

#endif
