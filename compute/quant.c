/*
 * quant — the weight storage formats of quant.h: names, shape rules, sizes,
 * the quantizer used by the converter, and scalar conversions of the
 * half-width float formats found in Hugging Face checkpoints.
 *
 * Invariants: quant_matrix_quantize writes exactly quant_matrix_bytes bytes
 * for a shape that passes quant_check_shape, and is deterministic (the same
 * f32 input always yields the same bytes), so containers are reproducible.
 */
#include "compute/quant.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <string.h>

static const char *const quant_names[] = {
	[QUANT_F32] = "f32",
	[QUANT_BF16] = "bf16",
	[QUANT_INT8] = "int8",
	[QUANT_INT4] = "int4",
	[QUANT_MXFP4] = "mxfp4",
	[QUANT_F16] = "f16",
	[QUANT_Q8_0] = "q8_0",
	[QUANT_Q4_0] = "q4_0",
	[QUANT_Q4_K] = "q4_k",
	[QUANT_Q5_K] = "q5_k",
	[QUANT_Q6_K] = "q6_k",
};
_Static_assert(sizeof quant_names / sizeof quant_names[0] == QUANT_TYPE_COUNT, "a name per type");

const char *quant_type_name(enum quant_type type)
{
	if ((unsigned)type >= sizeof quant_names / sizeof quant_names[0])
		return "unknown";
	return quant_names[type];
}

int quant_type_parse(const char *name, enum quant_type *out)
{
	if (!name)
		return -EINVAL;
	for (unsigned i = 0; i < sizeof quant_names / sizeof quant_names[0]; i++) {
		if (strcmp(name, quant_names[i]) == 0) {
			*out = (enum quant_type)i;
			return 0;
		}
	}
	return -EINVAL;
}

static int quant_is_grouped(enum quant_type type)
{
	return type == QUANT_INT8 || type == QUANT_INT4;
}

bool quant_type_quantizable(enum quant_type type)
{
	return type == QUANT_F32 || type == QUANT_BF16 || type == QUANT_INT8 || type == QUANT_INT4 ||
	       type == QUANT_MXFP4 || type == QUANT_F16;
}

/* Elements and bytes of a GGML block type's block; 0 for the others. */
static int64_t quant_block_elems(enum quant_type type)
{
	switch (type) {
	case QUANT_Q8_0:
	case QUANT_Q4_0:
		return 32;
	case QUANT_Q4_K:
	case QUANT_Q5_K:
	case QUANT_Q6_K:
		return QUANT_K_BLOCK;
	default:
		return 0;
	}
}

static int64_t quant_block_bytes(enum quant_type type)
{
	switch (type) {
	case QUANT_Q8_0:
		return QUANT_Q8_0_BYTES;
	case QUANT_Q4_0:
		return QUANT_Q4_0_BYTES;
	case QUANT_Q4_K:
		return QUANT_Q4_K_BYTES;
	case QUANT_Q5_K:
		return QUANT_Q5_K_BYTES;
	case QUANT_Q6_K:
		return QUANT_Q6_K_BYTES;
	default:
		return 0;
	}
}

int quant_from_ggml_type(uint32_t ggml_type, enum quant_type *out)
{
	switch (ggml_type) {
	case 0:
		*out = QUANT_F32;
		return 0;
	case 1:
		*out = QUANT_F16;
		return 0;
	case 2:
		*out = QUANT_Q4_0;
		return 0;
	case 8:
		*out = QUANT_Q8_0;
		return 0;
	case 12:
		*out = QUANT_Q4_K;
		return 0;
	case 13:
		*out = QUANT_Q5_K;
		return 0;
	case 14:
		*out = QUANT_Q6_K;
		return 0;
	case 30:
		*out = QUANT_BF16;
		return 0;
	case 39:
		*out = QUANT_MXFP4;
		return 0;
	}
	return -ENOTSUP;
}

/* The group size is ignored for F32/BF16 so that a caller may pass its
 * default group for every type. Sizes are capped at 2^40 elements so that
 * byte counts can never overflow 64 bits. */
const char *quant_shape_error(enum quant_type type, int64_t rows, int64_t cols, int32_t group)
{
	if ((unsigned)type >= QUANT_TYPE_COUNT)
		return "unknown quantization type";
	if (rows <= 0 || cols <= 0)
		return "rows and cols must be positive";
	if (rows > ((int64_t)1 << 40) / cols)
		return "more than 2^40 elements";
	if (type == QUANT_MXFP4 && cols % QUANT_MXFP4_BLOCK != 0)
		return "mxfp4 needs the inputs (cols) in whole blocks of 32";
	if (quant_block_elems(type) == 32 && cols % 32 != 0)
		return "q8_0 and q4_0 need the inputs (cols) in whole blocks of 32";
	if (quant_block_elems(type) == QUANT_K_BLOCK && cols % QUANT_K_BLOCK != 0)
		return "q4_k, q5_k and q6_k need the inputs (cols) in whole blocks of 256";
	if (!quant_is_grouped(type))
		return NULL;
	if (group <= 0 || group % 32 != 0)
		return "the group size must be a positive multiple of 32";
	if (cols % group != 0)
		return "the inputs (cols) must be a multiple of the group size";
	return NULL;
}

int quant_check_shape(enum quant_type type, int64_t rows, int64_t cols, int32_t group)
{
	return quant_shape_error(type, rows, cols, group) ? -EINVAL : 0;
}

uint64_t quant_data_bytes(enum quant_type type, int64_t rows, int64_t cols)
{
	uint64_t n = (uint64_t)rows * (uint64_t)cols;
	switch (type) {
	case QUANT_F32:
		return n * 4;
	case QUANT_BF16:
		return n * 2;
	case QUANT_INT8:
		return n;
	case QUANT_INT4:
		return n / 2;
	case QUANT_MXFP4:
		return n / 2 + n / QUANT_MXFP4_BLOCK;
	case QUANT_F16:
		return n * 2;
	case QUANT_Q8_0:
	case QUANT_Q4_0:
	case QUANT_Q4_K:
	case QUANT_Q5_K:
	case QUANT_Q6_K:
		return n / (uint64_t)quant_block_elems(type) * (uint64_t)quant_block_bytes(type);
	}
	return 0;
}

uint64_t quant_matrix_bytes(enum quant_type type, int64_t rows, int64_t cols, int32_t group)
{
	uint64_t bytes = quant_data_bytes(type, rows, cols);
	if (quant_is_grouped(type) && group > 0)
		bytes += (uint64_t)rows * (uint64_t)(cols / group) * sizeof(float);
	return bytes;
}

/* roundf(v) clamped to [-lim, lim]; NaN (only from NaN weights) maps to 0 so
 * the float-to-int conversion is always defined. */
static int quant_round_clamp(float v, int lim)
{
	float r = roundf(v);
	if (!(r == r))
		return 0;
	if (r > (float)lim)
		return lim;
	if (r < (float)-lim)
		return -lim;
	return (int)r;
}

/* Scale of one group: max|w| / qmax, 0 for an all-zero group. */
static float quant_group_scale(const float *w, int32_t group, int qmax)
{
	float amax = 0.0f;
	for (int32_t i = 0; i < group; i++) {
		float a = fabsf(w[i]);
		if (a > amax)
			amax = a;
	}
	return amax / (float)qmax;
}

static void quant_row_quantize_int8(int8_t *q, float *scales, const float *w,
				    int64_t cols, int32_t group)
{
	for (int64_t g = 0; g < cols / group; g++) {
		const float *wg = w + g * group;
		float s = quant_group_scale(wg, group, 127);
		scales[g] = s;
		for (int32_t i = 0; i < group; i++)
			q[g * group + i] = (int8_t)(s > 0.0f ? quant_round_clamp(wg[i] / s, 127) : 0);
	}
}

static void quant_row_quantize_int4(uint8_t *q, float *scales, const float *w,
				    int64_t cols, int32_t group)
{
	for (int64_t g = 0; g < cols / group; g++) {
		const float *wg = w + g * group;
		float s = quant_group_scale(wg, group, 7);
		scales[g] = s;
		for (int32_t run = 0; run < group; run += 32) {
			uint8_t *b = q + (g * group + run) / 2;
			for (int i = 0; i < 16; i++) {
				int lo = s > 0.0f ? quant_round_clamp(wg[run + i] / s, 7) : 0;
				int hi = s > 0.0f ? quant_round_clamp(wg[run + 16 + i] / s, 7) : 0;
				b[i] = (uint8_t)((lo + 8) | ((hi + 8) << 4));
			}
		}
	}
}

/* One block of 32 weights as downcast_to_mxfp_torch quantizes it (quant.h):
 * codes into b[16] in INT4's order; returns the scale byte. */
static uint8_t quant_block_quantize_mxfp4(uint8_t *b, const float *w)
{
	float amax = 0.0f;
	for (int i = 0; i < 32; i++)
		amax = fabsf(w[i]) > amax ? fabsf(w[i]) : amax;
	float ds = amax / 6.0f;
	uint32_t bits;
	memcpy(&bits, &ds, 4);
	bits = (bits + 0x007fffffu) & 0x7f800000u;
	if (bits > 0x7f000000u) /* an infinite block: the largest scale */
		bits = 0x7f000000u;
	float s, inv = 0.0f;
	memcpy(&s, &bits, 4);
	if (bits)
		inv = 1.0f / s;
	uint8_t code[32];
	for (int i = 0; i < 32; i++) {
		float v = w[i] == w[i] ? w[i] * inv : 0.0f;
		uint32_t u;
		memcpy(&u, &v, 4);
		uint32_t sign = u >> 31, exp = (u >> 23) & 0xff, man = u & 0x7fffffu;
		if (exp < 127) { /* below 1: into e2m1's subnormal range */
			uint32_t shift = 126 - exp;
			man = shift < 32 ? (0x400000u | (man >> 1)) >> shift : 0;
		}
		exp = exp > 126 ? exp - 126 : 0;
		uint32_t mag = (((exp << 2) | (man >> 21)) + 1) >> 1;
		code[i] = (uint8_t)(sign << 3 | (mag < 7 ? mag : 7));
	}
	for (int i = 0; i < 16; i++)
		b[i] = (uint8_t)(code[i] | code[16 + i] << 4);
	return (uint8_t)(bits >> 23);
}

static void quant_row_quantize_mxfp4(uint8_t *row, const float *w, int64_t cols)
{
	uint8_t *e = row + cols / 2;
	for (int64_t k = 0; k < cols / 32; k++)
		e[k] = quant_block_quantize_mxfp4(row + 16 * k, w + 32 * k);
}

int quant_mxfp4_from_packed(void *dst, const uint8_t *blocks, const uint8_t *scales,
			    int64_t rows, int64_t cols)
{
	if (quant_check_shape(QUANT_MXFP4, rows, cols, 0) != 0)
		return -EINVAL;
	int64_t n_blocks = rows * (cols / 32);
	for (int64_t k = 0; k < n_blocks; k++)
		if (scales[k] == 0xff)
			return -EINVAL;
	uint8_t *out = dst;
	int64_t stride = cols / 2 + cols / 32;
	for (int64_t r = 0; r < rows; r++) {
		uint8_t *row = out + r * stride;
		for (int64_t k = 0; k < cols / 32; k++) {
			const uint8_t *src = blocks + (r * (cols / 32) + k) * 16;
			uint8_t *b = row + 16 * k;
			/* Input i of the block: byte i / 2, low nibble when i is even. */
			for (int i = 0; i < 16; i++) {
				int lo = (src[i / 2] >> (4 * (i % 2))) & 0xf;
				int hi = (src[8 + i / 2] >> (4 * (i % 2))) & 0xf;
				b[i] = (uint8_t)(lo | hi << 4);
			}
		}
		memcpy(row + cols / 2, scales + r * (cols / 32), (size_t)(cols / 32));
	}
	return 0;
}

int quant_mxfp4_from_ggml(void *dst, const void *blocks, int64_t rows, int64_t cols)
{
	if (quant_check_shape(QUANT_MXFP4, rows, cols, 0) != 0)
		return -EINVAL;
	const uint8_t *src = blocks;
	int64_t n_blocks = rows * (cols / 32);
	for (int64_t k = 0; k < n_blocks; k++)
		if (src[17 * k] == 0xff)
			return -EINVAL;
	/* ggml's qs already is INT4's nibble order (element j low, j + 16 high)
	 * and its kvalues are 2 * e2m1 of the same codes against half the
	 * scale, so the codes and e move as they are. */
	uint8_t *out = dst;
	int64_t stride = cols / 2 + cols / 32;
	for (int64_t r = 0; r < rows; r++) {
		uint8_t *row = out + r * stride;
		for (int64_t k = 0; k < cols / 32; k++) {
			const uint8_t *b = src + 17 * (r * (cols / 32) + k);
			memcpy(row + 16 * k, b + 1, 16);
			row[cols / 2 + k] = b[0];
		}
	}
	return 0;
}

void quant_matrix_quantize(void *dst, const float *src, enum quant_type type,
			   int64_t rows, int64_t cols, int32_t group)
{
	assert(quant_type_quantizable(type));
	uint8_t *out = dst;
	float *scales = NULL;
	if (quant_is_grouped(type))
		scales = (float *)(out + quant_data_bytes(type, rows, cols));
	for (int64_t r = 0; r < rows; r++) {
		const float *w = src + r * cols;
		switch (type) {
		case QUANT_F32:
			memcpy(out + r * cols * 4, w, (size_t)cols * 4);
			break;
		case QUANT_BF16: {
			uint16_t *h = (uint16_t *)(out + r * cols * 2);
			for (int64_t c = 0; c < cols; c++)
				h[c] = f32_to_bf16(w[c]);
			break;
		}
		case QUANT_INT8:
			quant_row_quantize_int8((int8_t *)(out + r * cols), scales + r * (cols / group),
						w, cols, group);
			break;
		case QUANT_INT4:
			quant_row_quantize_int4(out + r * cols / 2, scales + r * (cols / group),
						w, cols, group);
			break;
		case QUANT_MXFP4:
			quant_row_quantize_mxfp4(out + r * (cols / 2 + cols / 32), w, cols);
			break;
		case QUANT_F16: {
			uint16_t *h = (uint16_t *)(out + r * cols * 2);
			for (int64_t c = 0; c < cols; c++)
				h[c] = f32_to_f16(w[c]);
			break;
		}
		case QUANT_Q8_0:
		case QUANT_Q4_0:
		case QUANT_Q4_K:
		case QUANT_Q5_K:
		case QUANT_Q6_K:
			break; /* not quantizable: asserted above */
		}
	}
}

void quant_matrix_view(struct qmatrix *m, const void *base, enum quant_type type,
		       int64_t rows, int64_t cols, int32_t group)
{
	m->type = type;
	m->rows = rows;
	m->cols = cols;
	m->data = base;
	if (quant_is_grouped(type)) {
		m->group = group;
		m->scales = (const float *)((const uint8_t *)base + quant_data_bytes(type, rows, cols));
	} else {
		m->group = type == QUANT_MXFP4 ? QUANT_MXFP4_BLOCK : (int32_t)quant_block_elems(type);
		m->scales = NULL;
	}
}

void quant_matrix_rows(struct qmatrix *out, const struct qmatrix *m, int64_t row, int64_t n)
{
	*out = *m;
	out->rows = n;
	out->data = (const uint8_t *)m->data + quant_data_bytes(m->type, row, m->cols);
	if (m->scales)
		out->scales = m->scales + row * (m->cols / m->group);
}

/* The little-endian half at p. */
static float quant_half(const uint8_t *p)
{
	return f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static void quant_q8_0_block_dequantize(float *y, const uint8_t *b)
{
	float d = quant_half(b);
	for (int j = 0; j < 32; j++)
		y[j] = (float)(int8_t)b[2 + j] * d;
}

static void quant_q4_0_block_dequantize(float *y, const uint8_t *b)
{
	float d = quant_half(b);
	for (int j = 0; j < 16; j++) {
		y[j] = (float)((b[2 + j] & 15) - 8) * d;
		y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
	}
}

static void quant_k_scale_min(uint8_t sc[8], uint8_t mn[8], const uint8_t *s)
{
	for (int i = 0; i < 4; i++) {
		sc[i] = s[i] & 63;
		mn[i] = s[i + 4] & 63;
		sc[i + 4] = (uint8_t)((s[i + 8] & 15) | (s[i] >> 6) << 4);
		mn[i + 4] = (uint8_t)((s[i + 8] >> 4) | (s[i + 4] >> 6) << 4);
	}
}

/* Q4_K (qh NULL) and Q5_K share all but the fifth bit. */
static void quant_q45_k_block_dequantize(float *y, const uint8_t *b, const uint8_t *qh,
					 const uint8_t *qs)
{
	float d = quant_half(b), dmin = quant_half(b + 2);
	uint8_t sc[8], mn[8];
	quant_k_scale_min(sc, mn, b + 4);
	for (int k = 0; k < 4; k++) {
		for (int h = 0; h < 2; h++) {
			float d1 = d * (float)sc[2 * k + h], m1 = dmin * (float)mn[2 * k + h];
			for (int l = 0; l < 32; l++) {
				int q = h ? qs[32 * k + l] >> 4 : qs[32 * k + l] & 15;
				if (qh)
					q |= ((qh[l] >> (2 * k + h)) & 1) << 4;
				y[64 * k + 32 * h + l] = d1 * (float)q - m1;
			}
		}
	}
}

static void quant_q4_k_block_dequantize(float *y, const uint8_t *b)
{
	quant_q45_k_block_dequantize(y, b, NULL, b + 16);
}

static void quant_q5_k_block_dequantize(float *y, const uint8_t *b)
{
	quant_q45_k_block_dequantize(y, b, b + 16, b + 48);
}

static void quant_q6_k_block_dequantize(float *y, const uint8_t *b)
{
	float d = quant_half(b + 208);
	const int8_t *scales = (const int8_t *)(b + 192);
	for (int h = 0; h < 2; h++) {
		const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
		for (int k = 0; k < 4; k++)
			for (int l = 0; l < 32; l++) {
				int lo = ql[l + 32 * (k & 1)] >> (4 * (k >> 1)) & 15;
				int q = (lo | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
				float s = d * (float)scales[8 * h + 2 * k + l / 16];
				y[128 * h + 32 * k + l] = s * (float)q;
			}
	}
}

void quant_block_dequantize(float *dst, enum quant_type type, const void *block)
{
	switch (type) {
	case QUANT_Q8_0:
		quant_q8_0_block_dequantize(dst, block);
		return;
	case QUANT_Q4_0:
		quant_q4_0_block_dequantize(dst, block);
		return;
	case QUANT_Q4_K:
		quant_q4_k_block_dequantize(dst, block);
		return;
	case QUANT_Q5_K:
		quant_q5_k_block_dequantize(dst, block);
		return;
	case QUANT_Q6_K:
		quant_q6_k_block_dequantize(dst, block);
		return;
	default:
		assert(!"quant_block_dequantize: not a GGML block type");
	}
}

void quant_row_dequantize(float *dst, const struct qmatrix *m, int64_t row)
{
	int64_t cols = m->cols;
	switch (m->type) {
	case QUANT_F32:
		memcpy(dst, (const float *)m->data + row * cols, (size_t)cols * sizeof(float));
		return;
	case QUANT_BF16: {
		const uint16_t *h = (const uint16_t *)m->data + row * cols;
		for (int64_t c = 0; c < cols; c++)
			dst[c] = bf16_to_f32(h[c]);
		return;
	}
	case QUANT_INT8: {
		const int8_t *q = (const int8_t *)m->data + row * cols;
		const float *s = m->scales + row * (cols / m->group);
		for (int64_t c = 0; c < cols; c++)
			dst[c] = (float)q[c] * s[c / m->group];
		return;
	}
	case QUANT_INT4: {
		const uint8_t *q = (const uint8_t *)m->data + row * cols / 2;
		const float *s = m->scales + row * (cols / m->group);
		for (int64_t c = 0; c < cols; c++) {
			uint8_t b = q[(c / 32) * 16 + (c % 16)];
			int n = (c % 32) < 16 ? (b & 0xf) : (b >> 4);
			dst[c] = (float)(n - 8) * s[c / m->group];
		}
		return;
	}
	case QUANT_MXFP4: {
		const uint8_t *q = (const uint8_t *)m->data + row * (cols / 2 + cols / 32);
		const uint8_t *e = q + cols / 2;
		for (int64_t c = 0; c < cols; c++) {
			uint8_t b = q[(c / 32) * 16 + (c % 16)];
			unsigned n = (c % 32) < 16 ? (b & 0xfu) : (b >> 4);
			dst[c] = quant_e2m1_to_f32(n) * quant_e8m0_to_f32(e[c / 32], 0);
		}
		return;
	}
	case QUANT_F16: {
		const uint16_t *h = (const uint16_t *)m->data + row * cols;
		for (int64_t c = 0; c < cols; c++)
			dst[c] = f16_to_f32(h[c]);
		return;
	}
	case QUANT_Q8_0:
	case QUANT_Q4_0:
	case QUANT_Q4_K:
	case QUANT_Q5_K:
	case QUANT_Q6_K: {
		int64_t qk = quant_block_elems(m->type), bs = quant_block_bytes(m->type);
		const uint8_t *b = (const uint8_t *)m->data + row * (cols / qk) * bs;
		for (int64_t k = 0; k < cols / qk; k++)
			quant_block_dequantize(dst + k * qk, m->type, b + k * bs);
		return;
	}
	}
}

uint16_t f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	/* A NaN whose payload sits only in the low half would truncate to
	 * infinity; setting the quiet bit keeps it a NaN. */
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	/* Round to nearest even: adding 0x7fff plus the lowest kept bit carries
	 * into the kept half exactly when the dropped half is above the tie,
	 * or at the tie with an odd kept half. Overflow rounds to infinity. */
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;
	uint32_t u;
	if (exp == 0x1f) {
		u = sign | 0x7f800000u | (man << 13);
	} else if (exp != 0) {
		u = sign | ((exp + 112u) << 23) | (man << 13);
	} else {
		/* Zero or subnormal: man * 2^-24 is exact in f32. */
		float v = (float)man * 0x1p-24f;
		memcpy(&u, &v, sizeof u);
		u |= sign;
	}
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

uint16_t f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	uint16_t sign = (uint16_t)(u >> 16 & 0x8000u);
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u) /* NaN: quiet, the top of the payload kept */
		return (uint16_t)(sign | 0x7e00u | (a >> 13 & 0x3ffu));
	if (a >= 0x477ff000u) /* at or above 65520, halfway past the largest: inf */
		return (uint16_t)(sign | 0x7c00u);
	if (a >= 0x38800000u) { /* normal in f16 (2^-14 and up) */
		/* Rebias the exponent, then round away the 13 low bits to nearest
		 * even; a carry out of the mantissa bumps the exponent, as it
		 * should. */
		uint32_t v = a - 0x38000000u;
		v += 0xfffu + (v >> 13 & 1u);
		return (uint16_t)(sign | v >> 13);
	}
	/* Subnormal or zero: f * 2^24 is the integer count of 2^-24 steps,
	 * which rintf rounds to nearest even exactly (the product is exact). */
	float mag;
	memcpy(&mag, &a, sizeof mag);
	return (uint16_t)(sign | (uint16_t)rintf(mag * 0x1p24f));
}

float fp8_e4m3_to_f32(uint8_t v)
{
	uint32_t exp = (v >> 3) & 0xfu;
	uint32_t man = v & 0x7u;
	float mag;
	if (exp == 0xf && man == 0x7)
		return (v & 0x80) ? -NAN : NAN;
	if (exp == 0)
		mag = (float)man * 0x1p-9f;
	else
		mag = ldexpf(1.0f + (float)man / 8.0f, (int)exp - 7);
	return (v & 0x80) ? -mag : mag;
}
