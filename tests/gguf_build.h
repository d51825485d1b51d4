/*
 * gguf_build — writes small GGUF files for tests, byte by byte from the
 * published layout (llama.cpp docs/gguf.md), independent of the reader in
 * engine/convert/gguf.c:
 *
 *   "GGUF", u32 version, u64 n_tensors, u64 n_kv, the metadata pairs, the
 *   tensor infos, zero padding to the alignment, the data section.
 *
 *	struct gb b;
 *	gb_init(&b);                              version 3, alignment 32
 *	gb_kv_str(&b, "general.architecture", "olmoe");
 *	gb_kv_u32(&b, "olmoe.block_count", 2);
 *	gb_tensor(&b, "token_embd.weight", 0, 2, (int64_t[]){ 8, 4 }, data, 128);
 *	gb_write(&b, path);
 *	gb_free(&b);
 *
 * Tensor data go at the next multiple of b.alignment in the data section
 * (gb_alignment also writes general.alignment). Everything is public so
 * that a test can lie: b.n_kv and b.n_tensors are what the header says,
 * gb_raw appends any bytes to a section, gb_tensor_info writes an info with
 * any offset and no data. Out of memory aborts: this is test code.
 */
#ifndef COLIBRI_TESTS_GGUF_BUILD_H
#define COLIBRI_TESTS_GGUF_BUILD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Value types as numbered in the file. */
enum {
	GB_U8 = 0, GB_I8 = 1, GB_U16 = 2, GB_I16 = 3, GB_U32 = 4, GB_I32 = 5, GB_F32 = 6,
	GB_BOOL = 7, GB_STRING = 8, GB_ARRAY = 9, GB_U64 = 10, GB_I64 = 11, GB_F64 = 12,
};

struct gb_buf {
	uint8_t *p;
	size_t n, cap;
};

struct gb {
	uint32_t version;
	uint32_t alignment;		/* padding of the data section and of each tensor's data */
	uint64_t n_kv, n_tensors;	/* as the header will say */
	struct gb_buf kv, info, data;
};

static inline void gb_raw(struct gb_buf *b, const void *p, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n)
			cap *= 2;
		uint8_t *q = realloc(b->p, cap);
		if (!q)
			abort();
		b->p = q;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
}

static inline void gb_u32(struct gb_buf *b, uint32_t v)
{
	uint8_t x[4];
	for (int i = 0; i < 4; i++)
		x[i] = (uint8_t)(v >> (8 * i));
	gb_raw(b, x, 4);
}

static inline void gb_u64(struct gb_buf *b, uint64_t v)
{
	uint8_t x[8];
	for (int i = 0; i < 8; i++)
		x[i] = (uint8_t)(v >> (8 * i));
	gb_raw(b, x, 8);
}

/* A GGUF string: u64 length, the bytes. */
static inline void gb_strn(struct gb_buf *b, const char *s, size_t n)
{
	gb_u64(b, n);
	gb_raw(b, s, n);
}

static inline void gb_str(struct gb_buf *b, const char *s)
{
	gb_strn(b, s, strlen(s));
}

static inline void gb_init(struct gb *b)
{
	memset(b, 0, sizeof *b);
	b->version = 3;
	b->alignment = 32;
}

static inline void gb_free(struct gb *b)
{
	free(b->kv.p);
	free(b->info.p);
	free(b->data.p);
	memset(b, 0, sizeof *b);
}

/* A pair's key and value type; the caller writes the value. */
static inline void gb_kv_head(struct gb *b, const char *key, uint32_t type)
{
	gb_str(&b->kv, key);
	gb_u32(&b->kv, type);
	b->n_kv++;
}

/* A scalar of 1, 2, 4 or 8 bytes (the low bytes of v, little-endian). */
static inline void gb_kv_scalar(struct gb *b, const char *key, uint32_t type, uint64_t v, int bytes)
{
	gb_kv_head(b, key, type);
	for (int i = 0; i < bytes; i++) {
		uint8_t x = (uint8_t)(v >> (8 * i));
		gb_raw(&b->kv, &x, 1);
	}
}

static inline void gb_kv_u8(struct gb *b, const char *k, uint8_t v) { gb_kv_scalar(b, k, GB_U8, v, 1); }
static inline void gb_kv_i8(struct gb *b, const char *k, int8_t v) { gb_kv_scalar(b, k, GB_I8, (uint8_t)v, 1); }
static inline void gb_kv_u16(struct gb *b, const char *k, uint16_t v) { gb_kv_scalar(b, k, GB_U16, v, 2); }
static inline void gb_kv_i16(struct gb *b, const char *k, int16_t v) { gb_kv_scalar(b, k, GB_I16, (uint16_t)v, 2); }
static inline void gb_kv_u32(struct gb *b, const char *k, uint32_t v) { gb_kv_scalar(b, k, GB_U32, v, 4); }
static inline void gb_kv_i32(struct gb *b, const char *k, int32_t v) { gb_kv_scalar(b, k, GB_I32, (uint32_t)v, 4); }
static inline void gb_kv_u64(struct gb *b, const char *k, uint64_t v) { gb_kv_scalar(b, k, GB_U64, v, 8); }
static inline void gb_kv_i64(struct gb *b, const char *k, int64_t v) { gb_kv_scalar(b, k, GB_I64, (uint64_t)v, 8); }
static inline void gb_kv_bool(struct gb *b, const char *k, int v) { gb_kv_scalar(b, k, GB_BOOL, v ? 1 : 0, 1); }

static inline void gb_kv_f32(struct gb *b, const char *k, float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	gb_kv_scalar(b, k, GB_F32, u, 4);
}

static inline void gb_kv_f64(struct gb *b, const char *k, double v)
{
	uint64_t u;
	memcpy(&u, &v, 8);
	gb_kv_scalar(b, k, GB_F64, u, 8);
}

static inline void gb_kv_str(struct gb *b, const char *k, const char *s)
{
	gb_kv_head(b, k, GB_STRING);
	gb_str(&b->kv, s);
}

/* An array of n numbers of type elem, data holding them packed as in the
 * file (little-endian, the host's order on the machines we test on). */
static inline void gb_kv_arr(struct gb *b, const char *k, uint32_t elem, uint64_t n, const void *data,
			     size_t elem_bytes)
{
	gb_kv_head(b, k, GB_ARRAY);
	gb_u32(&b->kv, elem);
	gb_u64(&b->kv, n);
	gb_raw(&b->kv, data, (size_t)n * elem_bytes);
}

static inline void gb_kv_arr_str(struct gb *b, const char *k, uint64_t n, const char *const *strs)
{
	gb_kv_head(b, k, GB_ARRAY);
	gb_u32(&b->kv, GB_STRING);
	gb_u64(&b->kv, n);
	for (uint64_t i = 0; i < n; i++)
		gb_str(&b->kv, strs[i]);
}

/* general.alignment = a, and the padding the builder uses from now on. */
static inline void gb_alignment(struct gb *b, uint32_t a)
{
	gb_kv_u32(b, "general.alignment", a);
	b->alignment = a;
}

/* A tensor info with any offset (relative to the data section), no data. */
static inline void gb_tensor_info(struct gb *b, const char *name, uint32_t type, int n_dims,
				  const int64_t *ne, uint64_t offset)
{
	gb_str(&b->info, name);
	gb_u32(&b->info, (uint32_t)n_dims);
	for (int i = 0; i < n_dims; i++)
		gb_u64(&b->info, (uint64_t)ne[i]);
	gb_u32(&b->info, type);
	gb_u64(&b->info, offset);
	b->n_tensors++;
}

/* Pads the data section with zeros to a multiple of the alignment. */
static inline void gb_data_align(struct gb *b)
{
	static const uint8_t zero;
	while (b->data.n % b->alignment)
		gb_raw(&b->data, &zero, 1);
}

/* A tensor and its nbytes of data (NULL: zeros), placed at the next aligned
 * offset; returns that offset. */
static inline uint64_t gb_tensor(struct gb *b, const char *name, uint32_t type, int n_dims,
				 const int64_t *ne, const void *data, size_t nbytes)
{
	gb_data_align(b);
	uint64_t off = b->data.n;
	gb_tensor_info(b, name, type, n_dims, ne, off);
	if (data) {
		gb_raw(&b->data, data, nbytes);
	} else {
		uint8_t *z = calloc(nbytes ? nbytes : 1, 1);
		if (!z)
			abort();
		gb_raw(&b->data, z, nbytes);
		free(z);
	}
	return off;
}

/* Where the data section starts in the image gb_bytes makes. */
static inline size_t gb_data_offset(const struct gb *b)
{
	size_t h = 24 + b->kv.n + b->info.n;
	return b->n_tensors ? (h + b->alignment - 1) / b->alignment * b->alignment : h;
}

/* The whole file image, malloc'd (the caller frees); *len its size. */
static inline uint8_t *gb_bytes(const struct gb *b, size_t *len)
{
	struct gb_buf o = { 0 };
	gb_raw(&o, "GGUF", 4);
	gb_u32(&o, b->version);
	gb_u64(&o, b->n_tensors);
	gb_u64(&o, b->n_kv);
	gb_raw(&o, b->kv.p, b->kv.n);
	gb_raw(&o, b->info.p, b->info.n);
	static const uint8_t zero;
	while (o.n < gb_data_offset(b))
		gb_raw(&o, &zero, 1);
	gb_raw(&o, b->data.p, b->data.n);
	*len = o.n;
	return o.p;
}

/* Writes the image to path: 0, or -1 when it cannot. */
static inline int gb_write(const struct gb *b, const char *path)
{
	size_t n;
	uint8_t *p = gb_bytes(b, &n);
	FILE *f = fopen(path, "wb");
	int rc = f && fwrite(p, 1, n, f) == n ? 0 : -1;
	if (f && fclose(f) != 0)
		rc = -1;
	free(p);
	return rc;
}

#endif
