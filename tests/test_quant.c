/*
 * test_quant — the storage formats of compute/quant.h: type names, shape
 * rules, byte counts, the int8/int4 quantizers (against an independent
 * straightforward quantizer written here, and against error bounds), the
 * exact int4 nibble layout on a handcrafted matrix, and the bf16 / f16 /
 * fp8-e4m3 conversions on known values.
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
	enum quant_type all[] = { QUANT_F32, QUANT_BF16, QUANT_INT8, QUANT_INT4 };
	const char *names[] = { "f32", "bf16", "int8", "int4" };
	for (int i = 0; i < 4; i++) {
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
	cr_assert_eq(quant_check_shape((enum quant_type)9, 4, 128, 64), -EINVAL);
	cr_assert_eq(quant_check_shape(QUANT_F32, INT64_MAX, INT64_MAX, 0), -EINVAL);
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
