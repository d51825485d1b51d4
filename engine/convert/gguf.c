/*
 * gguf — header validation, split discovery and row reads (see gguf.h for
 * the format and the guarantees).
 *
 * The header is parsed from memory: gguf_file_open reads a prefix of the
 * file, and when the header runs past it reads a prefix twice as long and
 * parses again, up to GGUF_HEADER_BYTES_MAX. Every count is checked against
 * the bytes that can still follow it before anything is allocated for it,
 * so what a header makes us allocate is bounded by a small multiple of its
 * own size (a string array: a pointer, a length and a NUL per element, the
 * bytes in one pool).
 *
 * Rules taken from ggml's own reader (ggml/src/gguf.cpp at 81ff7abe5):
 * version 1 and byte-swapped versions refused; duplicate keys and tensor
 * names refused; an array of arrays refused; general.alignment a u32 power
 * of two (default 32); tensor names shorter than GGML_MAX_NAME (64) bytes;
 * at most 4 dims; a row a whole number of blocks; the element count below
 * INT64_MAX; the data section at the header's end padded to the alignment
 * (when there are tensors). Where ggml is looser we are stricter: ggml
 * accepts a zero dimension (and divides by it when it is not ne[0]), we
 * refuse it; ggml requires tensors packed in file order, we accept any
 * order of aligned, non-overlapping tensors inside the file.
 */
#include "engine/convert/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/files.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian fields with memcpy: a big-endian host needs byte swaps"
#endif

/* A header larger than this is not a model we will trust into memory (the
 * largest real ones, tokenizer arrays included, are tens of MB). */
#define GGUF_HEADER_BYTES_MAX (1ull << 30)
/* First prefix gguf_file_open reads; doubled while the header runs past it. */
#define GGUF_PREFIX_BYTES (4ull << 20)
/* Key length cap (ggml allows 1 GiB; real keys are a few dozen bytes). */
#define GGUF_KEY_BYTES_MAX 65535
/* ggml's GGML_MAX_NAME: a tensor name must be shorter. */
#define GGUF_NAME_BYTES_MAX 63
/* Counts beyond these are no model: caps that keep the per-entry structs
 * (tens of bytes each) bounded whatever the file size. */
#define GGUF_KVS_MAX (1u << 20)
#define GGUF_TENSORS_MAX (1u << 20)
/* The least bytes a metadata pair and a tensor info take in the file. */
#define GGUF_KV_BYTES_MIN (8 + 1 + 4)
#define GGUF_TENSOR_INFO_BYTES_MIN (8 + 1 + 4 + 8 + 4 + 8)

/* Internal: the header runs past the prefix read so far (never returned by
 * the public functions). */
#define GGUF_SHORT 0x7fff

static const struct {
	const char *name;
	int64_t block_elems;
	int64_t block_bytes;
} ggml_types[GGML_TYPE_COUNT] = {
	[GGML_F32] = { "f32", 1, 4 },          [GGML_F16] = { "f16", 1, 2 },
	[GGML_Q4_0] = { "q4_0", 32, 18 },      [GGML_Q4_1] = { "q4_1", 32, 20 },
	[GGML_Q5_0] = { "q5_0", 32, 22 },      [GGML_Q5_1] = { "q5_1", 32, 24 },
	[GGML_Q8_0] = { "q8_0", 32, 34 },      [GGML_Q8_1] = { "q8_1", 32, 36 },
	[GGML_Q2_K] = { "q2_K", 256, 84 },     [GGML_Q3_K] = { "q3_K", 256, 110 },
	[GGML_Q4_K] = { "q4_K", 256, 144 },    [GGML_Q5_K] = { "q5_K", 256, 176 },
	[GGML_Q6_K] = { "q6_K", 256, 210 },    [GGML_Q8_K] = { "q8_K", 256, 292 },
	[GGML_IQ2_XXS] = { "iq2_xxs", 256, 66 }, [GGML_IQ2_XS] = { "iq2_xs", 256, 74 },
	[GGML_IQ3_XXS] = { "iq3_xxs", 256, 98 }, [GGML_IQ1_S] = { "iq1_s", 256, 50 },
	[GGML_IQ4_NL] = { "iq4_nl", 32, 18 },  [GGML_IQ3_S] = { "iq3_s", 256, 110 },
	[GGML_IQ2_S] = { "iq2_s", 256, 82 },   [GGML_IQ4_XS] = { "iq4_xs", 256, 136 },
	[GGML_I8] = { "i8", 1, 1 },            [GGML_I16] = { "i16", 1, 2 },
	[GGML_I32] = { "i32", 1, 4 },          [GGML_I64] = { "i64", 1, 8 },
	[GGML_F64] = { "f64", 1, 8 },          [GGML_IQ1_M] = { "iq1_m", 256, 56 },
	[GGML_BF16] = { "bf16", 1, 2 },        [GGML_TQ1_0] = { "tq1_0", 256, 54 },
	[GGML_TQ2_0] = { "tq2_0", 256, 66 },   [GGML_MXFP4] = { "mxfp4", 32, 17 },
	[GGML_NVFP4] = { "nvfp4", 64, 36 },    [GGML_Q1_0] = { "q1_0", 128, 18 },
	[GGML_Q2_0] = { "q2_0", 64, 18 },
};

const char *ggml_type_name(uint32_t type)
{
	return type < GGML_TYPE_COUNT ? ggml_types[type].name : NULL;
}

int64_t ggml_block_elems(uint32_t type)
{
	return type < GGML_TYPE_COUNT ? ggml_types[type].block_elems : 0;
}

int64_t ggml_block_bytes(uint32_t type)
{
	return type < GGML_TYPE_COUNT ? ggml_types[type].block_bytes : 0;
}

static const char *const vtype_names[] = {
	"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

static const char *vtype_name(uint32_t t)
{
	return t < sizeof vtype_names / sizeof vtype_names[0] ? vtype_names[t] : "unknown type";
}

/* Bytes of one element of a fixed-size value type; 0 for string / array. */
static size_t vtype_size(uint32_t t)
{
	switch (t) {
	case GGUF_VT_U8: case GGUF_VT_I8: case GGUF_VT_BOOL: return 1;
	case GGUF_VT_U16: case GGUF_VT_I16: return 2;
	case GGUF_VT_U32: case GGUF_VT_I32: case GGUF_VT_F32: return 4;
	case GGUF_VT_U64: case GGUF_VT_I64: case GGUF_VT_F64: return 8;
	default: return 0;
	}
}

static bool vtype_is_int(uint32_t t)
{
	return t <= GGUF_VT_I32 || t == GGUF_VT_U64 || t == GGUF_VT_I64;
}

static bool vtype_is_signed(uint32_t t)
{
	return t == GGUF_VT_I8 || t == GGUF_VT_I16 || t == GGUF_VT_I32 || t == GGUF_VT_I64;
}

static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

/* Open-addressing set of names, for the duplicate checks. */
struct name_set {
	const char **slots;
	size_t mask;
};

static int name_set_init(struct name_set *s, size_t n)
{
	size_t cap = 16;
	while (cap < 2 * n)
		cap *= 2;
	s->slots = calloc(cap, sizeof *s->slots);
	s->mask = cap - 1;
	return s->slots ? 0 : error_set(ENOMEM, "out of memory");
}

/* Adds name; returns the earlier equal name if there is one. */
static const char *name_set_add(struct name_set *s, const char *name)
{
	size_t i = name_hash(name) & s->mask;
	while (s->slots[i]) {
		if (strcmp(s->slots[i], name) == 0)
			return s->slots[i];
		i = (i + 1) & s->mask;
	}
	s->slots[i] = name;
	return NULL;
}

/* The parser's cursor over buf[0, len), the first len bytes of a file of
 * file_bytes bytes. what names the item being read, for messages. */
struct rd {
	const uint8_t *buf;
	size_t len;
	uint64_t at;
	uint64_t file_bytes;
	const char *path;
	bool can_grow;		/* the caller can read more: running past len is GGUF_SHORT */
	char what[192];
};

/* Bytes the header may still hold after the cursor: the file's rest, but
 * never more than the header cap. */
static uint64_t rd_left(const struct rd *r)
{
	uint64_t end = r->file_bytes < GGUF_HEADER_BYTES_MAX ? r->file_bytes : GGUF_HEADER_BYTES_MAX;
	return r->at < end ? end - r->at : 0;
}

/* What n items of size bytes each run past, for messages: the file's end,
 * or only the header cap. */
static const char *rd_end_name(const struct rd *r, uint64_t n, uint64_t size)
{
	return n > (r->file_bytes - r->at) / size ? "file" : "largest header read (1 GiB)";
}

static int rd_need(struct rd *r, uint64_t n)
{
	if (r->at <= r->len && n <= r->len - r->at)
		return 0;
	if (r->at > r->file_bytes || n > r->file_bytes - r->at || !r->can_grow)
		return error_set(EINVAL, "%s: truncated header (%s)", r->path, r->what);
	if (r->at + n > GGUF_HEADER_BYTES_MAX)
		return error_set(EINVAL, "%s: header is larger than %llu MiB (%s): not read", r->path,
				 GGUF_HEADER_BYTES_MAX >> 20, r->what);
	return -GGUF_SHORT;
}

static int rd_bytes(struct rd *r, void *out, size_t n)
{
	int rc = rd_need(r, n);
	if (rc)
		return rc;
	memcpy(out, r->buf + r->at, n);
	r->at += n;
	return 0;
}

static int rd_u32(struct rd *r, uint32_t *v)
{
	return rd_bytes(r, v, 4);
}

static int rd_u64(struct rd *r, uint64_t *v)
{
	return rd_bytes(r, v, 8);
}

/* A string's u64 length, checked against the header's rest and max; the
 * bytes stay at r->buf + r->at, for the caller to take. */
static int rd_str_len(struct rd *r, uint64_t max, uint64_t *len)
{
	int rc = rd_u64(r, len);
	if (rc)
		return rc;
	if (*len > rd_left(r))
		return error_set(EINVAL, "%s: %s: string length %llu runs past the end of the %s", r->path,
				 r->what, (unsigned long long)*len,
				 rd_end_name(r, *len, 1));
	if (*len > max)
		return error_set(EINVAL, "%s: %s: string length %llu exceeds %llu bytes", r->path, r->what,
				 (unsigned long long)*len, (unsigned long long)max);
	return rd_need(r, *len);
}

/* A key or tensor name: a NUL-terminated copy in *out, no NUL inside. */
static int rd_name(struct rd *r, uint64_t max, char **out)
{
	uint64_t len;
	int rc = rd_str_len(r, max, &len);
	if (rc)
		return rc;
	const uint8_t *p = r->buf + r->at;
	if (len == 0)
		return error_set(EINVAL, "%s: %s: the name is empty", r->path, r->what);
	if (memchr(p, 0, len))
		return error_set(EINVAL, "%s: %s: the name holds a NUL byte", r->path, r->what);
	char *s = malloc(len + 1);
	if (!s)
		return error_set(ENOMEM, "out of memory");
	memcpy(s, p, len);
	s[len] = 0;
	r->at += len;
	*out = s;
	return 0;
}

static void kv_free(struct gguf_kv *kv)
{
	free(kv->key);
	free(kv->s);
	if (kv->strs)
		free(kv->strs[0]);	/* the pool all strings of the array live in */
	free(kv->strs);
	free(kv->lens);
	free(kv->data);
	memset(kv, 0, sizeof *kv);
}

/* A scalar of fixed size into kv->v. */
static void kv_scalar(struct gguf_kv *kv, const uint8_t *p)
{
	uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64; float f32; double f64;
	switch (kv->type) {
	case GGUF_VT_U8: kv->v.u = p[0]; break;
	case GGUF_VT_I8: kv->v.i = (int8_t)p[0]; break;
	case GGUF_VT_BOOL: memcpy(&u8, p, 1); kv->v.u = u8 != 0; break;
	case GGUF_VT_U16: memcpy(&u16, p, 2); kv->v.u = u16; break;
	case GGUF_VT_I16: memcpy(&u16, p, 2); kv->v.i = (int16_t)u16; break;
	case GGUF_VT_U32: memcpy(&u32, p, 4); kv->v.u = u32; break;
	case GGUF_VT_I32: memcpy(&u32, p, 4); kv->v.i = (int32_t)u32; break;
	case GGUF_VT_F32: memcpy(&f32, p, 4); kv->v.f = f32; break;
	case GGUF_VT_U64: memcpy(&u64, p, 8); kv->v.u = u64; break;
	case GGUF_VT_I64: memcpy(&u64, p, 8); kv->v.i = (int64_t)u64; break;
	case GGUF_VT_F64: memcpy(&f64, p, 8); kv->v.f = f64; break;
	default: break;
	}
}

/* An array of strings: one pass to check the lengths and size the pool,
 * one to copy. */
static int kv_str_array(struct rd *r, struct gguf_kv *kv)
{
	uint64_t start = r->at, pool = 0, len;
	int rc;
	for (uint64_t i = 0; i < kv->n; i++) {
		if ((rc = rd_str_len(r, UINT64_MAX, &len)))
			return rc;
		r->at += len;
		pool += len + 1;
	}
	r->at = start;
	if (kv->n == 0)
		return 0;
	kv->strs = calloc(kv->n, sizeof *kv->strs);
	kv->lens = calloc(kv->n, sizeof *kv->lens);
	char *p = malloc(pool);
	if (!kv->strs || !kv->lens || !p) {
		free(p);
		return error_set(ENOMEM, "out of memory");
	}
	for (uint64_t i = 0; i < kv->n; i++) {
		memcpy(&len, r->buf + r->at, 8);
		r->at += 8;
		memcpy(p, r->buf + r->at, len);
		p[len] = 0;
		r->at += len;
		kv->strs[i] = p;
		kv->lens[i] = len;
		p += len + 1;
	}
	return 0;
}

static int kv_parse(struct rd *r, struct gguf_kv *kv, size_t i)
{
	int rc;
	uint32_t type;
	snprintf(r->what, sizeof r->what, "metadata key %zu", i);
	if ((rc = rd_name(r, GGUF_KEY_BYTES_MAX, &kv->key)))
		return rc;
	snprintf(r->what, sizeof r->what, "metadata key %zu (%.80s)", i, kv->key);
	if ((rc = rd_u32(r, &type)))
		return rc;
	if (type > GGUF_VT_F64)
		return error_set(EINVAL, "%s: %s: unknown value type %u", r->path, r->what, type);
	kv->type = type;
	if (type == GGUF_VT_STRING) {
		uint64_t len;
		if ((rc = rd_str_len(r, UINT64_MAX, &len)))
			return rc;
		if (!(kv->s = malloc(len + 1)))
			return error_set(ENOMEM, "out of memory");
		memcpy(kv->s, r->buf + r->at, len);
		kv->s[len] = 0;
		kv->len = len;
		r->at += len;
		return 0;
	}
	if (type != GGUF_VT_ARRAY) {
		if ((rc = rd_need(r, vtype_size(type))))
			return rc;
		kv_scalar(kv, r->buf + r->at);
		r->at += vtype_size(type);
		return 0;
	}
	uint32_t et;
	if ((rc = rd_u32(r, &et)) || (rc = rd_u64(r, &kv->n)))
		return rc;
	if (et == GGUF_VT_ARRAY)
		return error_set(EINVAL, "%s: %s: an array of arrays (ggml refuses nested arrays)", r->path,
				 r->what);
	if (et > GGUF_VT_F64)
		return error_set(EINVAL, "%s: %s: unknown array element type %u", r->path, r->what, et);
	kv->arr_type = et;
	size_t es = et == GGUF_VT_STRING ? 8 : vtype_size(et);
	if (kv->n > rd_left(r) / es)
		return error_set(EINVAL, "%s: %s: array count %llu runs past the end of the %s (%s elements "
				 "take at least %zu bytes each)", r->path, r->what, (unsigned long long)kv->n,
				 rd_end_name(r, kv->n, es), vtype_name(et), es);
	if (et == GGUF_VT_STRING)
		return kv_str_array(r, kv);
	size_t bytes = (size_t)kv->n * es;
	if ((rc = rd_need(r, bytes)))
		return rc;
	if (!(kv->data = malloc(bytes ? bytes : 1)))
		return error_set(ENOMEM, "out of memory");
	memcpy(kv->data, r->buf + r->at, bytes);
	r->at += bytes;
	return 0;
}

static int tensor_parse(struct rd *r, struct gguf_tensor *t, size_t i)
{
	int rc;
	uint32_t n_dims;
	snprintf(r->what, sizeof r->what, "tensor infos, tensor %zu", i);
	if ((rc = rd_name(r, GGUF_NAME_BYTES_MAX, &t->name)))
		return rc;
	snprintf(r->what, sizeof r->what, "tensor infos, tensor %zu (%s)", i, t->name);
	const char *path = r->path;
	if ((rc = rd_u32(r, &n_dims)))
		return rc;
	if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
		return error_set(EINVAL, "%s: tensor %zu (%s): %u dimensions, not 1 to %d", path, i, t->name,
				 n_dims, GGUF_MAX_DIMS);
	t->n_dims = (int)n_dims;
	uint64_t numel = 1;
	for (int d = 0; d < GGUF_MAX_DIMS; d++) {
		uint64_t ne = 1;
		if (d < t->n_dims && (rc = rd_u64(r, &ne)))
			return rc;
		if (ne == 0)
			return error_set(EINVAL, "%s: tensor %zu (%s): dimension %d is 0", path, i, t->name, d);
		if (ne > INT64_MAX || numel > INT64_MAX / ne)
			return error_set(EINVAL, "%s: tensor %zu (%s): dimension %d (%llu) makes the element count "
					 "overflow int64", path, i, t->name, d, (unsigned long long)ne);
		t->ne[d] = (int64_t)ne;
		numel *= ne;
	}
	if ((rc = rd_u32(r, &t->type)) || (rc = rd_u64(r, &t->offset)))
		return rc;
	int64_t be = ggml_block_elems(t->type), bb = ggml_block_bytes(t->type);
	if (be == 0) {
		bool removed = t->type < GGML_TYPE_COUNT;
		return error_set(EINVAL, "%s: tensor %zu (%s): unknown ggml type %u%s", path, i, t->name,
				 t->type, removed ? " (a type ggml has removed)" : "");
	}
	if (t->ne[0] % be != 0)
		return error_set(EINVAL, "%s: tensor %zu (%s): a row of %lld elements is not a whole number "
				 "of %s blocks of %lld", path, i, t->name, (long long)t->ne[0],
				 ggml_type_name(t->type), (long long)be);
	uint64_t rows = numel / (uint64_t)t->ne[0];
	if (__builtin_mul_overflow(t->ne[0] / be, bb, &t->row_bytes) ||
	    __builtin_mul_overflow((uint64_t)t->row_bytes, rows, &t->nbytes) || t->nbytes > INT64_MAX)
		return error_set(EINVAL, "%s: tensor %zu (%s): its size in bytes overflows", path, i, t->name);
	return 0;
}

static int cmp_tensor_offset(const void *a, const void *b)
{
	const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
	const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Places the tensors: offsets aligned, inside the file, not overlapping. */
static int tensors_place(struct gguf_file *f)
{
	const char *path = f->path;
	uint64_t data_bytes = f->file_bytes - f->data_offset;
	for (size_t i = 0; i < f->n_tensors; i++) {
		struct gguf_tensor *t = &f->tensors[i];
		if (t->offset % f->alignment)
			return error_set(EINVAL, "%s: tensor %zu (%s): data offset %llu is not a multiple of the "
					 "alignment %u", path, i, t->name, (unsigned long long)t->offset,
					 f->alignment);
		if (t->offset > data_bytes || t->nbytes > data_bytes - t->offset)
			return error_set(EINVAL, "%s: tensor %zu (%s): data [%llu, +%llu) runs past the end of the "
					 "file (%llu bytes of data)", path, i, t->name,
					 (unsigned long long)t->offset, (unsigned long long)t->nbytes,
					 (unsigned long long)data_bytes);
		t->offset += f->data_offset;
	}
	if (f->n_tensors < 2)
		return 0;
	struct gguf_tensor **by = malloc(f->n_tensors * sizeof *by);
	if (!by)
		return error_set(ENOMEM, "out of memory");
	for (size_t i = 0; i < f->n_tensors; i++)
		by[i] = &f->tensors[i];
	qsort(by, f->n_tensors, sizeof *by, cmp_tensor_offset);
	int rc = 0;
	for (size_t i = 1; i < f->n_tensors && !rc; i++)
		if (by[i]->offset < by[i - 1]->offset + by[i - 1]->nbytes)
			rc = error_set(EINVAL, "%s: tensors %s and %s overlap", path, by[i - 1]->name, by[i]->name);
	free(by);
	return rc;
}

static void file_free_entries(struct gguf_file *f)
{
	for (size_t i = 0; i < f->n_kvs; i++)
		kv_free(&f->kvs[i]);
	free(f->kvs);
	for (size_t i = 0; i < f->n_tensors; i++)
		free(f->tensors[i].name);
	free(f->tensors);
	f->kvs = NULL;
	f->tensors = NULL;
	f->n_kvs = f->n_tensors = 0;
}

static const struct gguf_kv *file_find_kv(const struct gguf_file *f, const char *key)
{
	for (size_t i = 0; i < f->n_kvs; i++)
		if (strcmp(f->kvs[i].key, key) == 0)
			return &f->kvs[i];
	return NULL;
}

static int version_check(const char *path, uint32_t v)
{
	if ((v & 0xffff) == 0 && v != 0)
		return error_set(EINVAL, "%s: version field 0x%08x is a byte-swapped small number: a "
				 "big-endian GGUF file, and only little-endian ones are supported", path, v);
	if (v == 1)
		return error_set(EINVAL, "%s: GGUF version 1 is not supported (only 2 and 3; llama.cpp "
				 "dropped it too)", path);
	if (v != 2 && v != 3)
		return error_set(EINVAL, "%s: GGUF version %u is not supported (only 2 and 3)", path, v);
	return 0;
}

/* The parse proper; with can_grow, a header that runs past len returns
 * GGUF_SHORT with no message. f->path is set by the caller. */
static int parse(struct gguf_file *f, const uint8_t *buf, size_t len, uint64_t file_bytes, bool can_grow)
{
	struct rd r = { .buf = buf, .len = len, .file_bytes = file_bytes, .path = f->path,
			.can_grow = can_grow };
	struct name_set names = { 0 };
	uint8_t magic[4];
	uint64_t n_tensors, n_kvs;
	int rc;

	f->file_bytes = file_bytes;
	snprintf(r.what, sizeof r.what, "magic and counts");
	if ((rc = rd_bytes(&r, magic, 4)))
		goto fail;
	if (memcmp(magic, "GGUF", 4) != 0) {
		rc = error_set(EINVAL, "%s: not a GGUF file: it starts with %02x %02x %02x %02x, not \"GGUF\"",
			       f->path, magic[0], magic[1], magic[2], magic[3]);
		goto fail;
	}
	if ((rc = rd_u32(&r, &f->version)) || (rc = version_check(f->path, f->version)))
		goto fail;
	if ((rc = rd_u64(&r, &n_tensors)) || (rc = rd_u64(&r, &n_kvs)))
		goto fail;
	if (n_kvs > GGUF_KVS_MAX || n_kvs > rd_left(&r) / GGUF_KV_BYTES_MIN) {
		rc = error_set(EINVAL, "%s: metadata count %llu cannot fit in the %llu bytes that follow "
			       "(each pair takes at least %d; at most %u are read)", f->path,
			       (unsigned long long)n_kvs, (unsigned long long)rd_left(&r), GGUF_KV_BYTES_MIN,
			       GGUF_KVS_MAX);
		goto fail;
	}
	if (n_tensors > GGUF_TENSORS_MAX ||
	    n_tensors > (rd_left(&r) - n_kvs * GGUF_KV_BYTES_MIN) / GGUF_TENSOR_INFO_BYTES_MIN) {
		rc = error_set(EINVAL, "%s: tensor count %llu cannot fit in the %llu bytes that follow "
			       "(each tensor info takes at least %d; at most %u are read)", f->path,
			       (unsigned long long)n_tensors, (unsigned long long)rd_left(&r),
			       GGUF_TENSOR_INFO_BYTES_MIN, GGUF_TENSORS_MAX);
		goto fail;
	}
	f->kvs = calloc(n_kvs ? n_kvs : 1, sizeof *f->kvs);
	f->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *f->tensors);
	if (!f->kvs || !f->tensors) {
		rc = error_set(ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = name_set_init(&names, n_kvs > n_tensors ? n_kvs : n_tensors)))
		goto fail;
	for (size_t i = 0; i < n_kvs; i++) {
		rc = kv_parse(&r, &f->kvs[i], i);
		f->n_kvs = i + 1;	/* a partly read pair is freed too */
		if (rc)
			goto fail;
		if (name_set_add(&names, f->kvs[i].key)) {
			rc = error_set(EINVAL, "%s: metadata key %zu (%.80s) appears twice", f->path, i,
				       f->kvs[i].key);
			goto fail;
		}
	}
	f->alignment = 32;
	const struct gguf_kv *al = file_find_kv(f, "general.alignment");
	if (al) {
		if (al->type != GGUF_VT_U32 || al->v.u == 0 || (al->v.u & (al->v.u - 1))) {
			rc = error_set(EINVAL, "%s: general.alignment must be a u32 power of two, not %s %llu",
				       f->path, vtype_name(al->type), (unsigned long long)al->v.u);
			goto fail;
		}
		f->alignment = (uint32_t)al->v.u;
	}
	memset(names.slots, 0, (names.mask + 1) * sizeof *names.slots);
	for (size_t i = 0; i < n_tensors; i++) {
		rc = tensor_parse(&r, &f->tensors[i], i);
		f->n_tensors = i + 1;
		if (rc)
			goto fail;
		const char *dup = name_set_add(&names, f->tensors[i].name);
		if (dup) {
			rc = error_set(EINVAL, "%s: tensor %zu (%s): the name appears twice", f->path, i, dup);
			goto fail;
		}
	}
	f->data_offset = r.at;
	if (n_tensors > 0) {
		f->data_offset = (r.at + f->alignment - 1) / f->alignment * f->alignment;
		if (f->data_offset > file_bytes) {
			rc = error_set(EINVAL, "%s: truncated: the data section would start at %llu, past the "
				       "end of the file (%llu bytes)", f->path,
				       (unsigned long long)f->data_offset, (unsigned long long)file_bytes);
			goto fail;
		}
	}
	if ((rc = tensors_place(f)))
		goto fail;
	free(names.slots);
	return 0;
fail:
	free(names.slots);
	file_free_entries(f);
	return rc;
}

int gguf_parse(struct gguf_file *f, const uint8_t *buf, size_t len, uint64_t file_bytes, const char *path)
{
	memset(f, 0, sizeof *f);
	f->fd = -1;
	if (!(f->path = strdup(path)))
		return error_set(ENOMEM, "out of memory");
	if (len > file_bytes)
		len = (size_t)file_bytes;
	int rc = parse(f, buf, len, file_bytes, false);
	if (rc) {
		free(f->path);
		f->path = NULL;
	}
	return rc;
}

int gguf_file_open(struct gguf_file *f, const char *path)
{
	memset(f, 0, sizeof *f);
	f->fd = -1;
	uint8_t *buf = NULL;
	struct stat sb;
	int rc, fd = -1;

	char *p = strdup(path);
	if (!p)
		return error_set(ENOMEM, "out of memory");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = error_set(errno, "%s: cannot open: %s", path, strerror(errno));
		goto fail;
	}
	if (fstat(fd, &sb) != 0) {
		rc = error_set(errno, "%s: cannot stat: %s", path, strerror(errno));
		goto fail;
	}
	uint64_t file_bytes = (uint64_t)sb.st_size, have = 0, want = GGUF_PREFIX_BYTES;
	for (;;) {
		if (want > file_bytes)
			want = file_bytes;
		if (want > GGUF_HEADER_BYTES_MAX)
			want = GGUF_HEADER_BYTES_MAX;
		uint8_t *nb = realloc(buf, want ? want : 1);
		if (!nb) {
			rc = error_set(ENOMEM, "%s: out of memory for a %llu-byte header", path,
				       (unsigned long long)want);
			goto fail;
		}
		buf = nb;
		rc = file_pread_full(fd, buf + have, want - have, have);
		if (rc) {
			rc = error_set(-rc == EIO ? EIO : -rc, "%s: cannot read the header: %s", path,
				       rc == -EIO ? "the file shrank" : strerror(-rc));
			goto fail;
		}
		have = want;
		memset(f, 0, sizeof *f);
		f->path = p;
		f->fd = -1;
		rc = parse(f, buf, have, file_bytes, have < file_bytes);
		if (rc != -GGUF_SHORT)
			break;
		want = have * 2;
	}
	f->path = p;
	f->fd = fd;
	if (rc)
		goto fail;
	free(buf);
	return 0;
fail:
	free(buf);
	if (fd >= 0)
		close(fd);
	free(p);
	memset(f, 0, sizeof *f);
	f->fd = -1;
	return rc;
}

void gguf_file_close(struct gguf_file *f)
{
	file_free_entries(f);
	if (f->fd >= 0)
		close(f->fd);
	free(f->path);
	memset(f, 0, sizeof *f);
	f->fd = -1;
}

/* An integer-typed kv's value as int64 or uint64: -EINVAL when not an
 * integer. *neg tells whether it is a negative signed value. */
static int kv_int(const struct gguf_kv *kv, uint64_t *u, bool *neg)
{
	if (!vtype_is_int(kv->type))
		return -EINVAL;
	*neg = vtype_is_signed(kv->type) && kv->v.i < 0;
	*u = kv->v.u;
	return 0;
}

/* A split file's split.no / split.count, -1 when absent. */
static int file_split_int(const struct gguf_file *f, const char *key, int64_t max, int64_t *out)
{
	const struct gguf_kv *kv = file_find_kv(f, key);
	uint64_t u;
	bool neg;
	*out = -1;
	if (!kv)
		return 0;
	if (kv_int(kv, &u, &neg) || neg || u > (uint64_t)max)
		return error_set(EINVAL, "%s: %s must be an integer in [0, %lld]", f->path, key, (long long)max);
	*out = (int64_t)u;
	return 0;
}

static int set_index(struct gguf_set *set)
{
	set->n_tensors = 0;
	set->total_bytes = 0;
	for (size_t i = 0; i < set->n_files; i++)
		set->n_tensors += set->files[i].n_tensors;
	set->n_slots = 16;
	while (set->n_slots < 2 * set->n_tensors)
		set->n_slots *= 2;
	set->slots = calloc(set->n_slots, sizeof *set->slots);
	if (!set->slots)
		return error_set(ENOMEM, "out of memory");
	for (size_t i = 0; i < set->n_files; i++) {
		for (size_t j = 0; j < set->files[i].n_tensors; j++) {
			struct gguf_tensor *t = &set->files[i].tensors[j];
			t->file_index = (int)i;
			set->total_bytes += t->nbytes;
			size_t s = name_hash(t->name) & (set->n_slots - 1);
			while (set->slots[s]) {
				if (strcmp(set->slots[s]->name, t->name) == 0)
					return error_set(EINVAL, "%s: tensor %s also appears in %s", set->files[i].path,
							 t->name, set->files[set->slots[s]->file_index].path);
				s = (s + 1) & (set->n_slots - 1);
			}
			set->slots[s] = t;
		}
	}
	return 0;
}

/* split.count = count > 1 in first: finds its siblings by llama.cpp's names
 * (PREFIX-%05d-of-%05d.gguf, llama_split_path) and opens them all. */
static int set_open_split(struct gguf_set *set, struct gguf_file *first, int64_t count)
{
	const char *path = first->path;
	int64_t no;
	int rc = file_split_int(first, "split.no", count - 1, &no);
	if (rc)
		return rc;
	if (no < 0)
		return error_set(EINVAL, "%s: split.count is %lld but split.no is missing", path, (long long)count);
	char suffix[64];
	snprintf(suffix, sizeof suffix, "-%05lld-of-%05lld.gguf", (long long)no + 1, (long long)count);
	size_t pl = strlen(path), sl = strlen(suffix);
	if (pl <= sl || strcmp(path + pl - sl, suffix) != 0)
		return error_set(EINVAL, "%s: split.no %lld of split.count %lld, but the name does not end in "
				 "%s, so its other files cannot be found", path, (long long)no, (long long)count,
				 suffix);
	set->files = calloc((size_t)count, sizeof *set->files);
	if (!set->files)
		return error_set(ENOMEM, "out of memory");
	for (int64_t i = 0; i < count; i++)
		set->files[i].fd = -1;
	set->files[no] = *first;
	memset(first, 0, sizeof *first);
	first->fd = -1;
	set->n_files = (size_t)count;
	char *sib = malloc(pl + 1);
	if (!sib)
		return error_set(ENOMEM, "out of memory");
	for (int64_t i = 0; i < count && !rc; i++) {
		if (i == no)
			continue;
		snprintf(sib, pl + 1, "%.*s-%05lld-of-%05lld.gguf", (int)(pl - sl), path, (long long)i + 1,
			 (long long)count);
		if ((rc = gguf_file_open(&set->files[i], sib)))
			break;
		int64_t c, n;
		const struct gguf_file *g = &set->files[i];
		if ((rc = file_split_int(g, "split.count", INT64_MAX, &c)) ||
		    (rc = file_split_int(g, "split.no", INT64_MAX, &n)))
			break;
		if (c < 0 || n < 0)
			rc = error_set(EINVAL, "%s: split.count or split.no is missing (a split of %s)", sib,
				       set->files[no].path);
		else if (c != count)
			rc = error_set(EINVAL, "%s: split.count is %lld, but %s says %lld", sib, (long long)c,
				       set->files[no].path, (long long)count);
		else if (n != i)
			rc = error_set(EINVAL, "%s: split.no is %lld, but its name makes it split %lld", sib,
				       (long long)n, (long long)i);
	}
	free(sib);
	return rc;
}

/* After indexing (so that a tensor in two files is named as such): the
 * tensors of all files are as many as the first file says. */
static int set_check_count(const struct gguf_set *set)
{
	int64_t want, count = (int64_t)set->n_files;
	int rc;
	const struct gguf_file *f0 = &set->files[0];
	if ((rc = file_split_int(f0, "split.tensors.count", INT64_MAX, &want)))
		return rc;
	if (want < 0)
		return error_set(EINVAL, "%s: split.tensors.count is missing", f0->path);
	size_t total = 0;
	for (size_t i = 0; i < set->n_files; i++)
		total += set->files[i].n_tensors;
	if ((uint64_t)want != total)
		return error_set(EINVAL, "%s: split.tensors.count is %lld, but the %lld files hold %zu tensors",
				 f0->path, (long long)want, (long long)count, total);
	return 0;
}

int gguf_set_open(struct gguf_set *set, const char *path)
{
	memset(set, 0, sizeof *set);
	struct gguf_file first;
	int64_t count;
	int rc = gguf_file_open(&first, path);
	if (rc)
		return rc;
	if ((rc = file_split_int(&first, "split.count", 65535, &count)))
		goto fail;
	if (count > 1) {
		/* Takes first over once it has a place for it. */
		if ((rc = set_open_split(set, &first, count)))
			goto fail;
	} else {
		set->files = malloc(sizeof *set->files);
		if (!set->files) {
			rc = error_set(ENOMEM, "out of memory");
			goto fail;
		}
		set->files[0] = first;
		set->n_files = 1;
		memset(&first, 0, sizeof first);
		first.fd = -1;
	}
	if ((rc = set_index(set)) || (set->n_files > 1 && (rc = set_check_count(set))))
		goto fail;
	return 0;
fail:
	gguf_file_close(&first);
	gguf_set_close(set);
	return rc;
}

void gguf_set_close(struct gguf_set *set)
{
	for (size_t i = 0; i < set->n_files; i++)
		gguf_file_close(&set->files[i]);
	free(set->files);
	free(set->slots);
	memset(set, 0, sizeof *set);
}

bool gguf_is_gguf(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	uint8_t m[4];
	bool yes = file_pread_full(fd, m, 4, 0) == 0 && memcmp(m, "GGUF", 4) == 0;
	close(fd);
	return yes;
}

const struct gguf_tensor *gguf_set_find(const struct gguf_set *set, const char *name)
{
	if (!set->n_slots)
		return NULL;
	size_t s = name_hash(name) & (set->n_slots - 1);
	while (set->slots[s]) {
		if (strcmp(set->slots[s]->name, name) == 0)
			return set->slots[s];
		s = (s + 1) & (set->n_slots - 1);
	}
	return NULL;
}

const char *gguf_set_path(const struct gguf_set *set, const struct gguf_tensor *t)
{
	return set->files[t->file_index].path;
}

/* O(n) over the first file's keys: a few dozen in a real model. */
const struct gguf_kv *gguf_find_kv(const struct gguf_set *set, const char *key)
{
	return set->n_files ? file_find_kv(&set->files[0], key) : NULL;
}

static int wrong_type(const struct gguf_set *set, const struct gguf_kv *kv, const char *want)
{
	const char *t = kv->type == GGUF_VT_ARRAY ? "array" : vtype_name(kv->type);
	return error_set(EINVAL, "%s: metadata key %s is a %s, not %s", set->files[0].path, kv->key, t, want);
}

static int get_int(const struct gguf_set *set, const char *key, const char *want, int64_t min,
		   uint64_t max, uint64_t *u, bool *neg)
{
	const struct gguf_kv *kv = gguf_find_kv(set, key);
	if (!kv)
		return -ENOENT;
	if (kv_int(kv, u, neg))
		return wrong_type(set, kv, want);
	if (*neg ? kv->v.i < min : *u > max) {
		if (*neg)
			return error_set(EINVAL, "%s: metadata key %s: %lld does not fit %s",
					 set->files[0].path, key, (long long)kv->v.i, want);
		return error_set(EINVAL, "%s: metadata key %s: %llu does not fit %s", set->files[0].path, key,
				 (unsigned long long)*u, want);
	}
	return 0;
}

int gguf_get_u32(const struct gguf_set *set, const char *key, uint32_t *out)
{
	uint64_t u;
	bool neg;
	int rc = get_int(set, key, "a u32", 0, UINT32_MAX, &u, &neg);
	if (rc == 0)
		*out = (uint32_t)u;
	return rc;
}

int gguf_get_u64(const struct gguf_set *set, const char *key, uint64_t *out)
{
	uint64_t u;
	bool neg;
	int rc = get_int(set, key, "a u64", 0, UINT64_MAX, &u, &neg);
	if (rc == 0)
		*out = u;
	return rc;
}

int gguf_get_i64(const struct gguf_set *set, const char *key, int64_t *out)
{
	uint64_t u;
	bool neg;
	int rc = get_int(set, key, "an i64", INT64_MIN, INT64_MAX, &u, &neg);
	if (rc == 0)
		*out = (int64_t)u;
	return rc;
}

int gguf_get_f32(const struct gguf_set *set, const char *key, float *out)
{
	const struct gguf_kv *kv = gguf_find_kv(set, key);
	if (!kv)
		return -ENOENT;
	if (kv->type != GGUF_VT_F32 && kv->type != GGUF_VT_F64)
		return wrong_type(set, kv, "an f32");
	if (isfinite(kv->v.f) && fabs(kv->v.f) > FLT_MAX)
		return error_set(EINVAL, "%s: metadata key %s: %g does not fit an f32", set->files[0].path, key,
				 kv->v.f);
	*out = (float)kv->v.f;
	return 0;
}

int gguf_get_bool(const struct gguf_set *set, const char *key, bool *out)
{
	const struct gguf_kv *kv = gguf_find_kv(set, key);
	if (!kv)
		return -ENOENT;
	if (kv->type != GGUF_VT_BOOL)
		return wrong_type(set, kv, "a bool");
	*out = kv->v.u != 0;
	return 0;
}

int gguf_get_str(const struct gguf_set *set, const char *key, const char **out)
{
	const struct gguf_kv *kv = gguf_find_kv(set, key);
	if (!kv)
		return -ENOENT;
	if (kv->type != GGUF_VT_STRING)
		return wrong_type(set, kv, "a string");
	*out = kv->s;
	return 0;
}

int gguf_get_arr(const struct gguf_set *set, const char *key, enum gguf_vtype elem,
		 const struct gguf_kv **out)
{
	const struct gguf_kv *kv = gguf_find_kv(set, key);
	if (!kv)
		return -ENOENT;
	if (kv->type != GGUF_VT_ARRAY)
		return wrong_type(set, kv, "an array");
	bool ok = elem == GGUF_VT_ARRAY || kv->arr_type == elem ||
		  (vtype_is_int(elem) && vtype_is_int(kv->arr_type)) ||
		  (elem == GGUF_VT_F32 && kv->arr_type == GGUF_VT_F64);
	if (!ok)
		return error_set(EINVAL, "%s: metadata key %s is an array of %s, not of %s", set->files[0].path,
				 key, vtype_name(kv->arr_type), vtype_name(elem));
	*out = kv;
	return 0;
}

int64_t gguf_arr_i64(const struct gguf_kv *kv, uint64_t i)
{
	if (!kv->data)
		return 0;	/* not a numeric array */
	const uint8_t *p = (const uint8_t *)kv->data + i * vtype_size(kv->arr_type);
	uint16_t u16; uint32_t u32; uint64_t u64; float f; double d;
	switch (kv->arr_type) {
	case GGUF_VT_U8: return p[0];
	case GGUF_VT_I8: return (int8_t)p[0];
	case GGUF_VT_BOOL: return p[0] != 0;
	case GGUF_VT_U16: memcpy(&u16, p, 2); return u16;
	case GGUF_VT_I16: memcpy(&u16, p, 2); return (int16_t)u16;
	case GGUF_VT_U32: memcpy(&u32, p, 4); return u32;
	case GGUF_VT_I32: memcpy(&u32, p, 4); return (int32_t)u32;
	case GGUF_VT_U64: memcpy(&u64, p, 8); return (int64_t)u64;
	case GGUF_VT_I64: memcpy(&u64, p, 8); return (int64_t)u64;
	case GGUF_VT_F32: memcpy(&f, p, 4); d = f; break;
	case GGUF_VT_F64: memcpy(&d, p, 8); break;
	default: return 0;
	}
	/* Floats truncate toward zero; NaN and out-of-range values give 0. */
	return d > -9.2e18 && d < 9.2e18 ? (int64_t)d : 0;
}

double gguf_arr_f64(const struct gguf_kv *kv, uint64_t i)
{
	if (!kv->data)
		return 0;
	const uint8_t *p = (const uint8_t *)kv->data + i * vtype_size(kv->arr_type);
	float f;
	double d;
	switch (kv->arr_type) {
	case GGUF_VT_F32: memcpy(&f, p, 4); return f;
	case GGUF_VT_F64: memcpy(&d, p, 8); return d;
	case GGUF_VT_U64: { uint64_t u; memcpy(&u, p, 8); return (double)u; }
	case GGUF_VT_STRING: case GGUF_VT_ARRAY: return 0;
	default: return (double)gguf_arr_i64(kv, i);
	}
}

int gguf_tensor_read_rows(const struct gguf_set *set, const struct gguf_tensor *t,
			  int64_t row, int64_t n, void *dst)
{
	const char *path = gguf_set_path(set, t);
	int64_t rows = (int64_t)(t->nbytes / (uint64_t)t->row_bytes);
	if (row < 0 || n < 0 || row > rows || n > rows - row)
		return error_set(EINVAL, "%s: tensor %s: %lld rows from row %lld: out of range (it has %lld)",
				 path, t->name, (long long)n, (long long)row, (long long)rows);
	uint64_t off = t->offset + (uint64_t)row * (uint64_t)t->row_bytes;
	uint64_t bytes = (uint64_t)n * (uint64_t)t->row_bytes;
	int fd = set->files[t->file_index].fd;
	if (fd < 0)
		return error_set(EINVAL, "%s: tensor %s: the file is not open (a parsed buffer)", path, t->name);
	int rc = file_pread_full(fd, dst, (size_t)bytes, off);
	if (rc == -EIO)
		return error_set(EIO, "%s: tensor %s: file is truncated (needs %llu bytes)", path, t->name,
				 (unsigned long long)(off + bytes));
	if (rc)
		return error_set(-rc, "%s: tensor %s: read failed: %s", path, t->name, strerror(-rc));
	return 0;
}
