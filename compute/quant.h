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
 * Grouped formats need cols % group == 0 and group % 32 == 0. The scale of a
 * group is max|w| / 127 (int8) or max|w| / 7 (int4); an all-zero group has
 * scale 0. Rounding is to nearest, ties away from zero (roundf).
 */
#ifndef COLIBRI_COMPUTE_QUANT_H
#define COLIBRI_COMPUTE_QUANT_H

#include <stddef.h>
#include <stdint.h>

enum quant_type {
	QUANT_F32 = 0,
	QUANT_BF16 = 1,
	QUANT_INT8 = 2,
	QUANT_INT4 = 3,
};

#define QUANT_GROUP_DEFAULT 64

/* A weight matrix as the kernels see it. Points into memory owned elsewhere
 * (the resident arena or an expert frame); never freed through this struct. */
struct qmatrix {
	enum quant_type type;
	int32_t group;        /* inputs per scale; 0 for F32/BF16 */
	int64_t rows;         /* outputs */
	int64_t cols;         /* inputs */
	const void *data;     /* [rows, cols] in the format above */
	const float *scales;  /* [rows, cols / group], NULL for F32/BF16 */
};

/* Name as used on the command line and in the manifest: "f32", "bf16",
 * "int8", "int4". quant_type_parse returns -EINVAL for anything else. */
const char *quant_type_name(enum quant_type type);
int quant_type_parse(const char *name, enum quant_type *out);

/* 0 if (type, rows, cols, group) is a valid layout, else -EINVAL. */
int quant_check_shape(enum quant_type type, int64_t rows, int64_t cols, int32_t group);

/* Bytes of the whole stored matrix (data plus scales). */
uint64_t quant_matrix_bytes(enum quant_type type, int64_t rows, int64_t cols, int32_t group);

/* Bytes of the data block only (scales follow at this offset). */
uint64_t quant_data_bytes(enum quant_type type, int64_t rows, int64_t cols);

/* Quantizes f32 src [rows, cols] into dst (quant_matrix_bytes long). The
 * shape must pass quant_check_shape. */
void quant_matrix_quantize(void *dst, const float *src, enum quant_type type,
			   int64_t rows, int64_t cols, int32_t group);

/* Builds a qmatrix view over a stored matrix block starting at `base`. */
void quant_matrix_view(struct qmatrix *m, const void *base, enum quant_type type,
		       int64_t rows, int64_t cols, int32_t group);

/* A view of rows [row, row + n) of m (a slice of one matrix, e.g. one
 * attention head's block); shares m's memory. */
void quant_matrix_rows(struct qmatrix *out, const struct qmatrix *m, int64_t row, int64_t n);

/* Dequantizes row `row` of m into dst[cols]. */
void quant_row_dequantize(float *dst, const struct qmatrix *m, int64_t row);

/* bf16 <-> f32. bf16 from f32 rounds to nearest even; NaN stays NaN. */
static inline float bf16_to_f32(uint16_t h)
{
	union { uint32_t u; float f; } v = { .u = (uint32_t)h << 16 };
	return v.f;
}
uint16_t f32_to_bf16(float f);
float f16_to_f32(uint16_t h);
/* FP8 E4M3 (finite-only "fn" variant used by DeepSeek/GLM): 1 sign, 4 exponent
 * (bias 7), 3 mantissa bits; 0x7f/0xff are NaN; no infinities. */
float fp8_e4m3_to_f32(uint8_t v);

#endif
