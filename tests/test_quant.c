/*
 * test_quant — the storage formats of compute/quant.h: type names, shape
 * rules, byte counts, the int8/int4 quantizers (against an independent
 * straightforward quantizer written here, and against error bounds), the
 * exact int4 nibble layout on a handcrafted matrix, and the bf16 / f16 /
 * fp8-e4m3 conversions on known values.
 *
 * mxfp4: released blocks/scales (transformers' byte and nibble order) built
 * by hand and dequantized against hand-computed values (-0, 6 * 2^k, the
 * scale extremes, e = 255 refused); representable values round-trip
 * exactly through the quantizer; the quantizer's scale and rounding rule on
 * hand-computed cases and against a brute-force nearest-value quantizer
 * written here; bad shapes refused.
 *
 * GGML block formats (f16, q8_0, q4_0, q4_k, q5_k, q6_k): quant_row_dequantize
 * bit for bit against tools/ggml_blocks.py's numpy reference on its fixtures
 * ($COLIBRI_FIXTURES/ggml_blocks), mxfp4 through quant_mxfp4_from_ggml; the
 * ggml type numbers, shapes, byte counts and which types quantize; f16 from
 * f32 rounding to nearest even on hand-picked edges and against an
 * exhaustive check of every f16 value and every midpoint between two.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>

#include "compute/quant.h"
#include "tests/test_util.h"

static float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

Test(quant, type_names_round_trip)
{
	enum quant_type all[] = { QUANT_F32, QUANT_BF16, QUANT_INT8, QUANT_INT4, QUANT_MXFP4, QUANT_F16,
				  QUANT_Q8_0, QUANT_Q4_0, QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K };
	const char *names[] = { "f32", "bf16", "int8", "int4", "mxfp4", "f16",
				"q8_0", "q4_0", "q4_k", "q5_k", "q6_k" };
	cr_assert_eq(sizeof all / sizeof all[0], QUANT_TYPE_COUNT);
	for (int i = 0; i < QUANT_TYPE_COUNT; i++) {
		cr_assert_eq((int)all[i], i, "%s is %d", names[i], i);
		enum quant_type t;
		cr_assert_str_eq(quant_type_name(all[i]), names[i]);
		cr_assert_eq(quant_type_parse(names[i], &t), 0);
		cr_assert_eq(t, all[i]);
	}
	enum quant_type t = QUANT_F32;
	cr_assert_eq(quant_type_parse("int3", &t), -EINVAL);
	cr_assert_eq(quant_type_parse("", &t), -EINVAL);
	cr_assert_eq(quant_type_parse("INT4", &t), -EINVAL);
	cr_assert_eq(quant_type_parse(NULL, &t), -EINVAL);
}

Test(quant, check_shape)
{
	cr_assert_eq(quant_check_shape(QUANT_F32, 3, 5, 0), 0);
	cr_assert_eq(quant_check_shape(QUANT_BF16, 1, 1, 0), 0);
	cr_assert_eq(quant_check_shape(QUANT_INT4, 7, 192, 64), 0);
	cr_assert_eq(quant_check_shape(QUANT_INT8, 7, 96, 32), 0);
	cr_assert_eq(quant_check_shape(QUANT_F32, 0, 5, 0), -EINVAL);
	cr_assert_eq(quant_check_shape(QUANT_F32, 5, 0, 0), -EINVAL);
	cr_assert_eq(quant_check_shape(QUANT_F32, -1, 5, 0), -EINVAL);
	cr_assert_eq(quant_check_shape(QUANT_INT4, 4, 100, 64), -EINVAL);
	cr_assert_eq(quant_check_shape(QUANT_INT4, 4, 96, 64), -EINVAL);
	cr_assert_eq(quant_check_shape(QUANT_INT4, 4, 128, 48), -EINVAL);
	cr_assert_eq(quant_check_shape(QUANT_INT8, 4, 128, 0), -EINVAL);
	cr_assert_eq(quant_check_shape(QUANT_INT8, 4, 128, -64), -EINVAL);
	cr_assert_eq(quant_check_shape((enum quant_type)QUANT_TYPE_COUNT, 4, 128, 64), -EINVAL);
	cr_assert_eq(quant_check_shape(QUANT_F32, INT64_MAX, INT64_MAX, 0), -EINVAL);
	cr_assert_eq(quant_check_shape(QUANT_MXFP4, 3, 32, 0), 0);
	cr_assert_eq(quant_check_shape(QUANT_MXFP4, 3, 2880, 64), 0, "mxfp4 ignores the group");
	cr_assert_eq(quant_check_shape(QUANT_MXFP4, 3, 48, 0), -EINVAL);
	cr_assert_eq(quant_check_shape(QUANT_MXFP4, 3, 16, 16), -EINVAL);
	cr_assert_eq(quant_check_shape(QUANT_MXFP4, 0, 32, 0), -EINVAL);
	cr_assert_null(quant_shape_error(QUANT_MXFP4, 3, 64, 0));
	const char *why = quant_shape_error(QUANT_MXFP4, 3, 100, 0);
	cr_assert(why && strstr(why, "mxfp4") && strstr(why, "32"), "%s", why ? why : "(null)");
	cr_assert_not_null(quant_shape_error(QUANT_INT4, 4, 96, 64));
}

Test(quant, byte_counts)
{
	cr_assert_eq(quant_matrix_bytes(QUANT_F32, 3, 5, 0), 60);
	cr_assert_eq(quant_matrix_bytes(QUANT_BF16, 3, 5, 0), 30);
	cr_assert_eq(quant_data_bytes(QUANT_INT8, 4, 128), 512);
	cr_assert_eq(quant_matrix_bytes(QUANT_INT8, 4, 128, 64), 512 + 4 * 2 * 4);
	cr_assert_eq(quant_data_bytes(QUANT_INT4, 4, 128), 256);
	cr_assert_eq(quant_matrix_bytes(QUANT_INT4, 4, 128, 64), 256 + 4 * 2 * 4);
	cr_assert_eq(quant_matrix_bytes(QUANT_INT4, 4096, 7168, 64),
		     (uint64_t)4096 * 7168 / 2 + (uint64_t)4096 * 112 * 4);
	cr_assert_eq(quant_matrix_bytes(QUANT_MXFP4, 4, 128, 0), 4 * (64 + 4));
	cr_assert_eq(quant_data_bytes(QUANT_MXFP4, 4, 128), 4 * (64 + 4));
	cr_assert_eq(quant_matrix_bytes(QUANT_MXFP4, 2880, 2880, 64), (uint64_t)2880 * (1440 + 90));
}

/* The reference quantizer: one group at a time, written without sharing
 * code with compute/quant.c. Returns q values in natural input order. */
static void ref_quantize(int *q, float *scales, const float *w, int64_t rows, int64_t cols,
			 int32_t group, int qmax)
{
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t g = 0; g < cols / group; g++) {
			float amax = 0;
			for (int i = 0; i < group; i++)
				amax = fmaxf(amax, fabsf(w[r * cols + g * group + i]));
			float s = amax / (float)qmax;
			scales[r * (cols / group) + g] = s;
			for (int i = 0; i < group; i++) {
				int64_t c = r * cols + g * group + i;
				q[c] = s == 0 ? 0 : (int)roundf(w[c] / s);
				if (q[c] > qmax)
					q[c] = qmax;
				if (q[c] < -qmax)
					q[c] = -qmax;
			}
		}
	}
}

static void check_grouped(enum quant_type type, int64_t rows, int64_t cols, int32_t group)
{
	int qmax = type == QUANT_INT8 ? 127 : 7;
	uint64_t st = (uint64_t)rows * 131 + (uint64_t)cols;
	float *w = malloc(sizeof(float) * rows * cols);
	int *q = malloc(sizeof(int) * rows * cols);
	float *s = malloc(sizeof(float) * rows * (cols / group));
	float *row = malloc(sizeof(float) * cols);
	uint8_t *blob = malloc(quant_matrix_bytes(type, rows, cols, group));
	for (int64_t i = 0; i < rows * cols; i++)
		w[i] = tu_randf(&st) * (1 + (i % 7));
	/* One all-zero group exercises the scale-0 rule. */
	for (int i = 0; i < group; i++)
		w[i] = 0;
	ref_quantize(q, s, w, rows, cols, group, qmax);
	quant_matrix_quantize(blob, w, type, rows, cols, group);

	struct qmatrix m;
	quant_matrix_view(&m, blob, type, rows, cols, group);
	cr_assert_eq(m.rows, rows);
	cr_assert_eq(m.cols, cols);
	cr_assert_eq(m.group, group);
	cr_assert_eq((const uint8_t *)m.scales, blob + quant_data_bytes(type, rows, cols));
	for (int64_t r = 0; r < rows; r++) {
		quant_row_dequantize(row, &m, r);
		for (int64_t c = 0; c < cols; c++) {
			float sc = s[r * (cols / group) + c / group];
			cr_assert_eq(m.scales[r * (cols / group) + c / group], sc);
			float want = (float)q[r * cols + c] * sc;
			cr_assert_eq(row[c], want, "%s r=%ld c=%ld: %g vs %g", quant_type_name(type),
				     (long)r, (long)c, row[c], want);
			float err = fabsf(row[c] - w[r * cols + c]);
			cr_assert_leq(err, sc * 0.5f * (1 + 1e-5f) + 1e-30f,
				      "error %g above half a step (scale %g)", err, sc);
		}
	}
	free(w);
	free(q);
	free(s);
	free(row);
	free(blob);
}

Test(quant, int8_round_trip)
{
	check_grouped(QUANT_INT8, 5, 192, 64);
	check_grouped(QUANT_INT8, 3, 96, 32);
}

Test(quant, int4_round_trip)
{
	check_grouped(QUANT_INT4, 5, 192, 64);
	check_grouped(QUANT_INT4, 2, 256, 128);
	check_grouped(QUANT_INT4, 3, 96, 32);
}

/* A 1x64 int4 matrix whose values are exact multiples of the scale, so every
 * nibble is known: w[c] = q(c) * 0.5 with q(c) = (c % 15) - 7; q reaches 7
 * (c = 14), so max|w| = 3.5 and the scale is 0.5. */
Test(quant, int4_nibble_layout)
{
	float w[64];
	int qv[64];
	for (int c = 0; c < 64; c++) {
		qv[c] = (c % 15) - 7;
		w[c] = (float)qv[c] * 0.5f;
	}
	uint8_t blob[32 + 4];
	cr_assert_eq(quant_matrix_bytes(QUANT_INT4, 1, 64, 64), sizeof blob);
	quant_matrix_quantize(blob, w, QUANT_INT4, 1, 64, 64);
	float scale;
	memcpy(&scale, blob + 32, 4);
	cr_assert_eq(scale, 0.5f);
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < 16; i++) {
			uint8_t b = blob[k * 16 + i];
			cr_assert_eq(b & 0xf, qv[32 * k + i] + 8, "low nibble of byte %d", k * 16 + i);
			cr_assert_eq(b >> 4, qv[32 * k + 16 + i] + 8, "high nibble of byte %d",
				     k * 16 + i);
		}
	/* First byte: input 0 (q=-7 -> 1) low, input 16 (q=-6 -> 2) high. */
	cr_assert_eq(blob[0], 0x21);
}

Test(quant, int8_exact_values)
{
	float w[32] = { 0 };
	w[0] = 127.0f;
	w[1] = -63.5f; /* tie: rounds away from zero to -64 */
	w[2] = 1.0f;
	uint8_t blob[32 + 4];
	quant_matrix_quantize(blob, w, QUANT_INT8, 1, 32, 32);
	float scale;
	memcpy(&scale, blob + 32, 4);
	cr_assert_eq(scale, 1.0f);
	cr_assert_eq((int8_t)blob[0], 127);
	cr_assert_eq((int8_t)blob[1], -64);
	cr_assert_eq((int8_t)blob[2], 1);
	cr_assert_eq((int8_t)blob[3], 0);
}

Test(quant, f32_and_bf16_storage)
{
	float w[6] = { 1.0f, -2.5f, 3.0e-3f, 1e30f, -0.0f, 65504.0f };
	float blob[6];
	uint16_t hb[6];
	float row[6];
	struct qmatrix m;
	quant_matrix_quantize(blob, w, QUANT_F32, 2, 3, 0);
	quant_matrix_view(&m, blob, QUANT_F32, 2, 3, 64);
	cr_assert_eq(m.group, 0);
	cr_assert_null(m.scales);
	quant_row_dequantize(row, &m, 1);
	cr_assert_eq(memcmp(row, w + 3, 3 * sizeof(float)), 0);
	quant_matrix_quantize(hb, w, QUANT_BF16, 2, 3, 0);
	quant_matrix_view(&m, hb, QUANT_BF16, 2, 3, 0);
	for (int r = 0; r < 2; r++) {
		quant_row_dequantize(row, &m, r);
		for (int c = 0; c < 3; c++)
			cr_assert_eq(row[c], bf16_to_f32(f32_to_bf16(w[r * 3 + c])));
	}
}

Test(quant, bf16_rounding)
{
	cr_assert_eq(f32_to_bf16(1.0f), 0x3f80);
	cr_assert_eq(f32_to_bf16(-2.0f), 0xc000);
	/* Exactly halfway, kept half even: stays. */
	cr_assert_eq(f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80);
	/* Exactly halfway, kept half odd: rounds up to even. */
	cr_assert_eq(f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82);
	/* Just above and below halfway. */
	cr_assert_eq(f32_to_bf16(bits_f32(0x3f808001u)), 0x3f81);
	cr_assert_eq(f32_to_bf16(bits_f32(0x3f807fffu)), 0x3f80);
	/* Carry into the exponent, and overflow to infinity. */
	cr_assert_eq(f32_to_bf16(bits_f32(0x3fffffffu)), 0x4000);
	cr_assert_eq(f32_to_bf16(bits_f32(0x7f7fffffu)), 0x7f80);
	cr_assert_eq(f32_to_bf16(INFINITY), 0x7f80);
	cr_assert_eq(f32_to_bf16(-INFINITY), 0xff80);
	cr_assert_eq(f32_to_bf16(-0.0f), 0x8000);
	/* NaNs stay NaN, including those with payload only in the low half. */
	uint32_t nans[] = { 0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu };
	for (int i = 0; i < 4; i++) {
		uint16_t h = f32_to_bf16(bits_f32(nans[i]));
		cr_assert(isnan(bf16_to_f32(h)), "0x%08x -> 0x%04x", nans[i], h);
		cr_assert_eq(h >> 15, nans[i] >> 31);
	}
	/* Every bf16 value round-trips exactly. */
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = bf16_to_f32((uint16_t)h);
		if (!isnan(f))
			cr_assert_eq(f32_to_bf16(f), h);
	}
}

Test(quant, f16_known_values)
{
	cr_assert_eq(f16_to_f32(0x0000), 0.0f);
	cr_assert_eq(f32_bits(f16_to_f32(0x8000)), 0x80000000u);
	cr_assert_eq(f16_to_f32(0x3c00), 1.0f);
	cr_assert_eq(f16_to_f32(0xc000), -2.0f);
	cr_assert_eq(f16_to_f32(0x3555), 0.333251953125f);
	cr_assert_eq(f16_to_f32(0x7bff), 65504.0f);
	cr_assert_eq(f16_to_f32(0x0400), 0x1p-14f);
	cr_assert_eq(f16_to_f32(0x0001), 0x1p-24f);
	cr_assert_eq(f16_to_f32(0x03ff), 1023 * 0x1p-24f);
	cr_assert_eq(f16_to_f32(0x8001), -0x1p-24f);
	cr_assert(isinf(f16_to_f32(0x7c00)) && f16_to_f32(0x7c00) > 0);
	cr_assert(isinf(f16_to_f32(0xfc00)) && f16_to_f32(0xfc00) < 0);
	cr_assert(isnan(f16_to_f32(0x7e00)));
	cr_assert(isnan(f16_to_f32(0x7c01)));
}

/* Independent decoding of e4m3fn: value = (-1)^s * 2^(e-7) * (1 + m/8), or
 * 2^-6 * m/8 when e == 0, computed in double. */
static double ref_fp8(uint8_t v)
{
	int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
	double mag = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
	return s ? -mag : mag;
}

Test(quant, fp8_e4m3_values)
{
	cr_assert_eq(fp8_e4m3_to_f32(0x00), 0.0f);
	cr_assert_eq(f32_bits(fp8_e4m3_to_f32(0x80)), 0x80000000u);
	cr_assert_eq(fp8_e4m3_to_f32(0x38), 1.0f);
	cr_assert_eq(fp8_e4m3_to_f32(0xb8), -1.0f);
	cr_assert_eq(fp8_e4m3_to_f32(0x7e), 448.0f);
	cr_assert_eq(fp8_e4m3_to_f32(0xfe), -448.0f);
	cr_assert_eq(fp8_e4m3_to_f32(0x01), 0x1p-9f);
	cr_assert_eq(fp8_e4m3_to_f32(0x07), 7 * 0x1p-9f);
	cr_assert_eq(fp8_e4m3_to_f32(0x08), 0x1p-6f);
	cr_assert_eq(fp8_e4m3_to_f32(0x40), 2.0f);
	cr_assert(isnan(fp8_e4m3_to_f32(0x7f)));
	cr_assert(isnan(fp8_e4m3_to_f32(0xff)));
	for (int v = 0; v < 256; v++) {
		if ((v & 0x7f) == 0x7f)
			continue;
		float f = fp8_e4m3_to_f32((uint8_t)v);
		cr_assert_eq((double)f, ref_fp8((uint8_t)v), "code 0x%02x", v);
		cr_assert_eq(signbit(f) != 0, (v >> 7) != 0);
	}
}

/* The e2m1 magnitudes, written out for the mxfp4 tests. */
static const float e2m1_mag[8] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f };

static float e2m1_value(int n)
{
	return (n & 8) ? -e2m1_mag[n & 7] : e2m1_mag[n & 7];
}

/* Released tensors for one row of two blocks, built by hand in
 * transformers' order (input 2j in the low nibble of byte j, 2j + 1 in the
 * high), dequantized against values computed here: -0, +-6 * 2^k, the
 * smallest scale (e = 0: 0.5 * 2^-127 = 2^-128, subnormal) and the largest
 * (e = 254: 1.5 * 2^127 finite, 2 * 2^127 = +inf). */
Test(quant, mxfp4_from_packed_hand_values)
{
	uint8_t blocks[2 * 16], scales[2] = { 127 + 3, 0 };
	int code[64];
	for (int i = 0; i < 64; i++)
		code[i] = (i * 7 + 3) % 16;
	code[0] = 0x8;  /* -0 */
	code[1] = 0x7;  /* 6 */
	code[2] = 0xf;  /* -6 */
	code[3] = 0x1;  /* 0.5 */
	code[32] = 0x1; /* 0.5 * 2^-127 */
	code[33] = 0xf; /* -6 * 2^-127 */
	for (int k = 0; k < 2; k++)
		for (int j = 0; j < 16; j++)
			blocks[16 * k + j] = (uint8_t)(code[32 * k + 2 * j] | code[32 * k + 2 * j + 1] << 4);
	cr_assert_eq(blocks[0], 0x78);
	uint8_t blob[2 * 16 + 2];
	cr_assert_eq(quant_matrix_bytes(QUANT_MXFP4, 1, 64, 0), sizeof blob);
	cr_assert_eq(quant_mxfp4_from_packed(blob, blocks, scales, 1, 64), 0);
	struct qmatrix m;
	quant_matrix_view(&m, blob, QUANT_MXFP4, 1, 64, 0);
	cr_assert_eq(m.group, 32);
	cr_assert_null(m.scales);
	float got[64];
	quant_row_dequantize(got, &m, 0);
	cr_assert_eq(f32_bits(got[0]), 0x80000000u, "-0 stays -0: %g", got[0]);
	cr_assert_eq(got[1], 48.0f);
	cr_assert_eq(got[2], -48.0f);
	cr_assert_eq(got[3], 4.0f);
	cr_assert_eq(got[32], 0x1p-128f);
	cr_assert_eq(got[33], -0x3p-126f);
	for (int i = 0; i < 64; i++) {
		float want = ldexpf(e2m1_value(code[i]), (int)scales[i / 32] - 127);
		cr_assert_eq(f32_bits(got[i]), f32_bits(want), "input %d: %g vs %g", i, got[i], want);
	}
	/* Stored in the kernels' order: input i of block k in the low nibble of
	 * byte 16k + i (i < 16), 16 + i in its high nibble; scales after. */
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < 16; i++)
			cr_assert_eq(blob[16 * k + i], code[32 * k + i] | code[32 * k + 16 + i] << 4);
	cr_assert_eq(blob[32], scales[0]);
	cr_assert_eq(blob[33], scales[1]);

	/* The largest scale. */
	uint8_t big[16] = { 0x43 }, e254 = 254; /* input 0: 1.5, input 1: 2 */
	cr_assert_eq(quant_mxfp4_from_packed(blob, big, &e254, 1, 32), 0);
	quant_matrix_view(&m, blob, QUANT_MXFP4, 1, 32, 0);
	quant_row_dequantize(got, &m, 0);
	cr_assert_eq(got[0], 0x3p126f);
	cr_assert(isinf(got[1]) && got[1] > 0);
	cr_assert_eq(f32_bits(got[2]), 0);

	/* e = 255 is NaN in the spec: refused, dst untouched; so are shapes off
	 * the block size. */
	uint8_t e255[2] = { 127, 255 };
	memset(blob, 0xa5, sizeof blob);
	cr_assert_eq(quant_mxfp4_from_packed(blob, blocks, e255, 1, 64), -EINVAL);
	cr_assert_eq(blob[0], 0xa5);
	cr_assert_eq(quant_mxfp4_from_packed(blob, blocks, scales, 1, 48), -EINVAL);
	cr_assert_eq(quant_mxfp4_from_packed(blob, blocks, scales, 0, 64), -EINVAL);
}

/* Representable values, e2m1 * 2^(e - 127) with a +-6 in each block, for
 * every e from 1 to 252 (the scales the rule can choose for such a block
 * whose 6 * 2^(e - 127) is finite),
 * quantize to exactly those codes and scales and dequantize to the same
 * bits, -0 included. */
Test(quant, mxfp4_round_trip_exact)
{
	const int64_t rows = 11, cols = 23 * 32, blocks = rows * cols / 32;
	float *w = malloc(sizeof(float) * rows * cols), *back = malloc(sizeof(float) * cols);
	uint8_t *codes = malloc((size_t)(rows * cols)), *es = malloc((size_t)blocks);
	uint64_t seed = 5;
	for (int64_t k = 0; k < blocks; k++) {
		es[k] = (uint8_t)(1 + k % 252);
		for (int i = 0; i < 32; i++) {
			int n = (int)((seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 60);
			if (i == (int)(k % 32))
				n = k % 2 ? 0xf : 0x7;
			codes[32 * k + i] = (uint8_t)n;
			w[32 * k + i] = ldexpf(e2m1_value(n), es[k] - 127);
		}
	}
	uint8_t *blob = malloc(quant_matrix_bytes(QUANT_MXFP4, rows, cols, 0));
	quant_matrix_quantize(blob, w, QUANT_MXFP4, rows, cols, 0);
	struct qmatrix m;
	quant_matrix_view(&m, blob, QUANT_MXFP4, rows, cols, 0);
	for (int64_t r = 0; r < rows; r++) {
		const uint8_t *row = blob + r * (cols / 2 + cols / 32);
		for (int64_t b = 0; b < cols / 32; b++) {
			int64_t k = r * (cols / 32) + b;
			cr_assert_eq(row[cols / 2 + b], es[k], "block %ld: scale %d vs %d", (long)k,
				     row[cols / 2 + b], es[k]);
			for (int i = 0; i < 16; i++)
				cr_assert_eq(row[16 * b + i], codes[32 * k + i] | codes[32 * k + 16 + i] << 4,
					     "block %ld byte %d", (long)k, i);
		}
		quant_row_dequantize(back, &m, r);
		for (int64_t c = 0; c < cols; c++)
			cr_assert_eq(f32_bits(back[c]), f32_bits(w[r * cols + c]), "(%ld, %ld): %g vs %g",
				     (long)r, (long)c, back[c], w[r * cols + c]);
	}
	free(w);
	free(back);
	free(codes);
	free(es);
	free(blob);
}

/* The scale rule and the rounding on values worked out by hand. */
Test(quant, mxfp4_quantize_hand_cases)
{
	float w[96] = { 0 };
	/* Block 0: max 5, 5 / 6 rounds up to the scale 1 (e = 127). */
	w[0] = 5.0f;    /* tie between 4 and 6: away, 6 */
	w[1] = 4.9f;    /* 4 */
	w[2] = 0.25f;   /* tie between 0 and 0.5: 0.5 */
	w[3] = 0.24f;   /* 0 */
	w[4] = 0.75f;   /* tie: 1 */
	w[5] = -2.5f;   /* tie: -3 */
	w[6] = -1.25f;  /* tie: -1.5 */
	w[7] = -0.0f;   /* -0 */
	w[8] = 1.74f;   /* 1.5 */
	w[9] = -3.6f;   /* -4 */
	/* Block 1: max 7, 7 / 6 rounds up to 2 (e = 128); 7 / 2 = 3.5 -> 4. */
	w[32] = 7.0f;
	w[33] = -0.5f;  /* 0.25 -> 0.5, so -1 */
	w[34] = 0.4f;   /* 0.2 -> 0 */
	/* Block 2: all zero: e = 0, codes 0. */
	uint8_t blob[3 * 16 + 3];
	quant_matrix_quantize(blob, w, QUANT_MXFP4, 1, 96, 0);
	cr_assert_eq(blob[48], 127);
	cr_assert_eq(blob[49], 128);
	cr_assert_eq(blob[50], 0);
	float got[96];
	struct qmatrix m;
	quant_matrix_view(&m, blob, QUANT_MXFP4, 1, 96, 0);
	quant_row_dequantize(got, &m, 0);
	const float want[10] = { 6, 4, 0.5f, 0, 1, -3, -1.5f, -0.0f, 1.5f, -4 };
	for (int i = 0; i < 10; i++)
		cr_assert_eq(f32_bits(got[i]), f32_bits(want[i]), "input %d: %g vs %g", i, got[i], want[i]);
	cr_assert_eq(got[32], 8.0f);
	cr_assert_eq(got[33], -1.0f);
	cr_assert_eq(f32_bits(got[34]), 0);
	for (int i = 64; i < 96; i++)
		cr_assert_eq(f32_bits(got[i]), 0);
	/* An infinite block takes the largest scale and saturates; NaN is 0. */
	float inf[32] = { INFINITY, -1.0f, NAN };
	uint8_t b1[17];
	quant_matrix_quantize(b1, inf, QUANT_MXFP4, 1, 32, 0);
	cr_assert_eq(b1[16], 254);
	cr_assert_eq(b1[0] & 0xf, 0x7);
	cr_assert_eq(b1[1] & 0xf, 0x8, "-1 * 2^-127 rounds to -0");
	cr_assert_eq(b1[2] & 0xf, 0x0);
}

/* Against a brute-force quantizer written here: scale 2^ceil(log2(max/6))
 * from frexp, each w / scale to the nearest e2m1 magnitude by search, ties
 * to the larger, saturating at 6; on blocks of magnitudes 2^-20 .. 2^20. */
Test(quant, mxfp4_quantize_matches_brute_force)
{
	const int64_t rows = 9, cols = 41 * 32;
	float *w = malloc(sizeof(float) * rows * cols), *got = malloc(sizeof(float) * cols);
	uint64_t seed = 17;
	for (int64_t k = 0; k < rows * cols / 32; k++) {
		float mag = ldexpf(1.0f, (int)(k % 41) - 20);
		for (int i = 0; i < 32; i++)
			w[32 * k + i] = tu_randf(&seed) * mag;
	}
	uint8_t *blob = malloc(quant_matrix_bytes(QUANT_MXFP4, rows, cols, 0));
	quant_matrix_quantize(blob, w, QUANT_MXFP4, rows, cols, 0);
	struct qmatrix m;
	quant_matrix_view(&m, blob, QUANT_MXFP4, rows, cols, 0);
	for (int64_t r = 0; r < rows; r++) {
		quant_row_dequantize(got, &m, r);
		for (int64_t b = 0; b < cols / 32; b++) {
			const float *wb = w + r * cols + 32 * b;
			double amax = 0;
			for (int i = 0; i < 32; i++)
				amax = fmax(amax, fabs((double)wb[i]));
			int ex;
			double fr = frexp((double)(float)(amax / 6.0), &ex); /* amax/6 = fr * 2^ex */
			double scale = ldexp(1.0, fr == 0.5 ? ex - 1 : ex);
			for (int i = 0; i < 32; i++) {
				double v = fabs(wb[i]) / scale, best = 0;
				for (int j = 0; j < 8; j++)
					if (fabs(v - e2m1_mag[j]) <= fabs(v - best))
						best = e2m1_mag[j];
				double want = copysign(best * scale, wb[i]);
				cr_assert_eq((double)got[32 * b + i], want, "(%ld, %ld): %g vs %g (w %g)", (long)r,
					     (long)(32 * b + i), got[32 * b + i], want, wb[i]);
			}
		}
	}
	free(w);
	free(got);
	free(blob);
}

Test(quant, ggml_type_numbers)
{
	static const struct {
		uint32_t ggml;
		enum quant_type t;
	} map[] = {
		{ 0, QUANT_F32 },   { 1, QUANT_F16 },   { 2, QUANT_Q4_0 },  { 8, QUANT_Q8_0 },  { 12, QUANT_Q4_K },
		{ 13, QUANT_Q5_K }, { 14, QUANT_Q6_K }, { 30, QUANT_BF16 }, { 39, QUANT_MXFP4 },
	};
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
		enum quant_type t = QUANT_INT8;
		cr_assert_eq(quant_from_ggml_type(map[i].ggml, &t), 0, "ggml type %u", map[i].ggml);
		cr_assert_eq(t, map[i].t, "ggml type %u", map[i].ggml);
	}
	/* Q4_1, Q5_0, Q5_1, Q8_1, Q2_K, Q3_K, Q8_K, IQ2_XXS, ..., I8, F64, TQ1_0 */
	static const uint32_t refused[] = { 3, 4, 5, 6, 7, 9, 10, 11, 15, 16, 20, 24, 28, 34, 40, 1000 };
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		enum quant_type t = QUANT_INT8;
		cr_assert_eq(quant_from_ggml_type(refused[i], &t), -ENOTSUP, "ggml type %u", refused[i]);
		cr_assert_eq(t, QUANT_INT8);
	}
}

Test(quant, ggml_shapes_bytes_and_quantizable)
{
	cr_assert_eq(quant_check_shape(QUANT_F16, 3, 5, 0), 0);
	cr_assert_eq(quant_check_shape(QUANT_Q8_0, 3, 96, 0), 0);
	cr_assert_eq(quant_check_shape(QUANT_Q4_0, 3, 32, 64), 0, "the group argument is ignored");
	cr_assert_eq(quant_check_shape(QUANT_Q8_0, 3, 48, 0), -EINVAL);
	cr_assert_eq(quant_check_shape(QUANT_Q4_0, 3, 16, 0), -EINVAL);
	for (int t = QUANT_Q4_K; t <= QUANT_Q6_K; t++) {
		cr_assert_eq(quant_check_shape((enum quant_type)t, 2, 512, 0), 0);
		cr_assert_eq(quant_check_shape((enum quant_type)t, 2, 384, 0), -EINVAL);
		const char *why = quant_shape_error((enum quant_type)t, 2, 128, 0);
		cr_assert(why && strstr(why, quant_type_name((enum quant_type)t)) && strstr(why, "256"), "%s",
			  why ? why : "(null)");
	}
	const char *why = quant_shape_error(QUANT_Q8_0, 2, 40, 0);
	cr_assert(why && strstr(why, "q8_0") && strstr(why, "32"), "%s", why ? why : "(null)");
	cr_assert_eq(quant_matrix_bytes(QUANT_F16, 3, 5, 0), 30);
	cr_assert_eq(quant_matrix_bytes(QUANT_Q8_0, 4, 512, 64), 4 * 16 * 34);
	cr_assert_eq(quant_matrix_bytes(QUANT_Q4_0, 4, 512, 0), 4 * 16 * 18);
	cr_assert_eq(quant_matrix_bytes(QUANT_Q4_K, 4, 512, 0), 4 * 2 * 144);
	cr_assert_eq(quant_matrix_bytes(QUANT_Q5_K, 4, 512, 0), 4 * 2 * 176);
	cr_assert_eq(quant_data_bytes(QUANT_Q6_K, 4, 512), 4 * 2 * 210);
	cr_assert_eq(quant_matrix_bytes(QUANT_Q4_K, 4096, 7168, 0), (uint64_t)4096 * 28 * 144);
	static const bool can[QUANT_TYPE_COUNT] = {
		[QUANT_F32] = true, [QUANT_BF16] = true, [QUANT_INT8] = true,
		[QUANT_INT4] = true, [QUANT_MXFP4] = true, [QUANT_F16] = true,
	};
	for (int t = 0; t < QUANT_TYPE_COUNT; t++)
		cr_assert_eq(quant_type_quantizable((enum quant_type)t), can[t], "%s",
			     quant_type_name((enum quant_type)t));
	/* The view: block size as the group, no scales; a slice of rows starts
	 * at whole rows of blocks. */
	static uint8_t blob[4 * 2 * 210];
	struct qmatrix m, sub;
	quant_matrix_view(&m, blob, QUANT_Q6_K, 4, 512, 64);
	cr_assert_eq(m.group, 256);
	cr_assert_null(m.scales);
	quant_matrix_rows(&sub, &m, 3, 1);
	cr_assert_eq((const uint8_t *)sub.data - blob, 3 * 2 * 210);
	quant_matrix_view(&m, blob, QUANT_Q8_0, 4, 128, 64);
	cr_assert_eq(m.group, 32);
	quant_matrix_view(&m, blob, QUANT_F16, 4, 128, 64);
	cr_assert_eq(m.group, 0);
	cr_assert_null(m.scales);
}

/* Reads $COLIBRI_FIXTURES/ggml_blocks/<name><ext> whole; its size into *len. */
static void *read_fixture(const char *name, const char *ext, size_t *len)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/ggml_blocks/%s%s", tu_fixtures(), name, ext);
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "%s: %s (run tools/make_fixtures.sh)", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	void *p = malloc((size_t)n + 1);
	cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n, "%s: short read", path);
	fclose(f);
	*len = (size_t)n;
	return p;
}

/* got[i] and want[i] the same bits, or both zeros where signed_zero lets
 * the sign differ. */
static void assert_same_bits(const float *got, const float *want, int64_t n, const char *what,
			     bool signed_zero)
{
	for (int64_t i = 0; i < n; i++) {
		uint32_t g = f32_bits(got[i]), w = f32_bits(want[i]);
		if (signed_zero && got[i] == 0.0f && want[i] == 0.0f)
			continue;
		cr_assert_eq(g, w, "%s: value %ld (row %ld, col %ld): %.9g (0x%08x) vs numpy %.9g (0x%08x)", what,
			     (long)i, (long)(i / 512), (long)(i % 512), got[i], g, want[i], w);
	}
}

Test(quant, ggml_blocks_dequantize_like_numpy)
{
	static const enum quant_type types[] = { QUANT_F16, QUANT_BF16, QUANT_Q8_0, QUANT_Q4_0,
						 QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K };
	const int64_t rows = 4, cols = 512;
	float *got = malloc(sizeof(float) * rows * cols);
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		enum quant_type t = types[i];
		const char *name = quant_type_name(t);
		size_t nb, nf;
		void *blocks = read_fixture(name, ".bin", &nb);
		float *want = read_fixture(name, ".f32", &nf);
		cr_assert_eq(nb, quant_matrix_bytes(t, rows, cols, 0), "%s.bin: %zu bytes", name, nb);
		cr_assert_eq(nf, sizeof(float) * rows * cols, "%s.f32: %zu bytes", name, nf);
		struct qmatrix m;
		quant_matrix_view(&m, blocks, t, rows, cols, 0);
		memset(got, 0xff, sizeof(float) * rows * cols);
		for (int64_t r = 0; r < rows; r++)
			quant_row_dequantize(got + r * cols, &m, r);
		assert_same_bits(got, want, rows * cols, name, false);
		/* The one-block entry point gives the same values. */
		if (m.group > 0) {
			float blk[256];
			uint64_t bb = quant_data_bytes(t, 1, m.group);
			for (int64_t k = 0; k < rows * cols / m.group; k++) {
				quant_block_dequantize(blk, t, (const uint8_t *)blocks + k * bb);
				assert_same_bits(blk, want + k * m.group, m.group, name, false);
			}
		}
		free(blocks);
		free(want);
	}
	free(got);
}

Test(quant, ggml_mxfp4_repacked_dequantizes_like_numpy)
{
	const int64_t rows = 4, cols = 512;
	size_t nb, nf;
	uint8_t *blocks = read_fixture("mxfp4", ".bin", &nb);
	float *want = read_fixture("mxfp4", ".f32", &nf);
	cr_assert_eq(nb, (size_t)(rows * cols / 32 * 17));
	cr_assert_eq(nf, sizeof(float) * rows * cols);
	uint64_t bytes = quant_matrix_bytes(QUANT_MXFP4, rows, cols, 0);
	uint8_t *dst = malloc(bytes);
	cr_assert_eq(quant_mxfp4_from_ggml(dst, blocks, rows, cols), 0);
	/* Moved, not recomputed: each block's 16 code bytes and its e. */
	for (int64_t r = 0; r < rows; r++)
		for (int64_t k = 0; k < cols / 32; k++) {
			const uint8_t *b = blocks + 17 * (r * (cols / 32) + k);
			const uint8_t *row = dst + r * (cols / 2 + cols / 32);
			cr_assert_eq(memcmp(row + 16 * k, b + 1, 16), 0);
			cr_assert_eq(row[cols / 2 + k], b[0]);
		}
	struct qmatrix m;
	quant_matrix_view(&m, dst, QUANT_MXFP4, rows, cols, 0);
	float *got = malloc(sizeof(float) * rows * cols);
	for (int64_t r = 0; r < rows; r++)
		quant_row_dequantize(got + r * cols, &m, r);
	/* ggml's code 8 is +0 (kvalues[8] = 0), ours -0: the same value. */
	assert_same_bits(got, want, rows * cols, "mxfp4", true);
	/* e = 255 (NaN) and a bad shape are refused, dst untouched. */
	memset(dst, 0xab, bytes);
	blocks[17 * 37] = 0xff;
	cr_assert_eq(quant_mxfp4_from_ggml(dst, blocks, rows, cols), -EINVAL);
	cr_assert_eq(quant_mxfp4_from_ggml(dst, blocks, rows, 48), -EINVAL);
	for (uint64_t i = 0; i < bytes; i++)
		cr_assert_eq(dst[i], 0xab);
	free(got);
	free(dst);
	free(blocks);
	free(want);
}

/* f16 -> f32 -> f16 is the identity on every non-NaN half; halfway between
 * two neighbours rounds to the even one, a hair above to the upper one. */
Test(quant, f16_from_f32_rounds_to_nearest_even)
{
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			continue;
		cr_assert_eq(f32_to_f16(f16_to_f32((uint16_t)h)), h, "half 0x%04x", h);
	}
	for (uint32_t h = 0; h < 0x7bff; h++) {
		/* Neighbours a < b, both finite and positive: the midpoint is exact
		 * in f32 (one bit more than the half). */
		double a = f16_to_f32((uint16_t)h), b = f16_to_f32((uint16_t)(h + 1));
		float mid = (float)((a + b) / 2);
		uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
		cr_assert_eq(f32_to_f16(mid), even, "midpoint above half 0x%04x", h);
		cr_assert_eq(f32_to_f16(-mid), even | 0x8000, "negative midpoint above half 0x%04x", h);
		cr_assert_eq(f32_to_f16(nextafterf(mid, 1e30f)), h + 1, "just above the midpoint of 0x%04x", h);
		cr_assert_eq(f32_to_f16(nextafterf(mid, 0.0f)), h, "just below the midpoint of 0x%04x", h);
	}
	cr_assert_eq(f32_to_f16(65504.0f), 0x7bff);
	cr_assert_eq(f32_to_f16(65519.996f), 0x7bff);
	cr_assert_eq(f32_to_f16(65520.0f), 0x7c00, "the midpoint past the largest rounds to inf");
	cr_assert_eq(f32_to_f16(1e10f), 0x7c00);
	cr_assert_eq(f32_to_f16(-INFINITY), 0xfc00);
	cr_assert_eq(f32_to_f16(0x1p-25f), 0x0000, "half the smallest subnormal: ties to even, 0");
	cr_assert_eq(f32_to_f16(0x1.000002p-25f), 0x0001);
	cr_assert_eq(f32_to_f16(0x3p-25f), 0x0002, "1.5 steps: ties to even, 2");
	cr_assert_eq(f32_to_f16(-0.0f), 0x8000);
	cr_assert_eq(f32_to_f16(1e-30f), 0x0000);
	uint16_t n = f32_to_f16(NAN);
	cr_assert((n & 0x7c00) == 0x7c00 && (n & 0x3ff), "NaN gave 0x%04x", n);
	/* Through the quantizer, rows laid out as f16. */
	float w[6] = { 1.0f, -2.5f, 65520.0f, 0x1p-24f, 3.140625f, 0.1f };
	uint16_t h[6];
	quant_matrix_quantize(h, w, QUANT_F16, 2, 3, 0);
	static const uint16_t want[6] = { 0x3c00, 0xc100, 0x7c00, 0x0001, 0x4248, 0x2e66 };
	for (int i = 0; i < 6; i++)
		cr_assert_eq(h[i], want[i], "value %d: 0x%04x vs 0x%04x", i, h[i], want[i]);
}
