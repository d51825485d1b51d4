/*
 * gguf — reader for GGUF files (llama.cpp's model format), versions 2 and 3.
 *
 * A file is: magic "GGUF", u32 version, u64 tensor count, u64 metadata
 * count, the metadata key-value pairs (a u64-length string key, a u32 value
 * type, the value; an array is a u32 element type, a u64 count and the
 * elements), the tensor infos (name, u32 n_dims, n_dims u64 ne in ggml's
 * order: ne[0] the innermost, contiguous dimension; u32 ggml type, u64
 * offset relative to the data section), padding to `general.alignment`
 * (default 32) and the data section. Everything little-endian.
 *
 * Opening validates the whole header against the file size (counts that
 * the file cannot hold, shapes whose product overflows, a row that is not a
 * whole number of blocks, unknown or removed types, offsets misaligned,
 * out of range or overlapping, duplicate names or keys), so later reads
 * cannot run off the end of an accepted header. A split model
 * (NAME-00001-of-0000N.gguf, split.no / split.count / split.tensors.count)
 * opens as one set from any of its files' paths.
 *
 * Limits: a header of at most 1 GiB, 2^20 metadata pairs and 2^20 tensors
 * per file; keys of at most 65535 bytes and tensor names of at most 63
 * (ggml's GGML_MAX_NAME), neither empty nor holding a NUL; every dimension
 * at least 1 (ggml lets a zero through; nothing writes one).
 *
 * Errors: -EINVAL (or -ENOMEM, -errno of the system) with error_set()
 * naming the file and the field at fault.
 */
#ifndef COLIBRI_ENGINE_CONVERT_GGUF_H
#define COLIBRI_ENGINE_CONVERT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Metadata value types, as numbered in the file. */
enum gguf_vtype {
	GGUF_VT_U8 = 0, GGUF_VT_I8 = 1, GGUF_VT_U16 = 2, GGUF_VT_I16 = 3,
	GGUF_VT_U32 = 4, GGUF_VT_I32 = 5, GGUF_VT_F32 = 6, GGUF_VT_BOOL = 7,
	GGUF_VT_STRING = 8, GGUF_VT_ARRAY = 9, GGUF_VT_U64 = 10, GGUF_VT_I64 = 11,
	GGUF_VT_F64 = 12,
};

/* ggml tensor types, as numbered in the file (ggml.h at llama.cpp
 * 81ff7abe5). 4, 5 and 31-33, 36-38 are removed types: refused. */
enum ggml_type {
	GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3,
	GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8, GGML_Q8_1 = 9,
	GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13,
	GGML_Q6_K = 14, GGML_Q8_K = 15,
	GGML_IQ2_XXS = 16, GGML_IQ2_XS = 17, GGML_IQ3_XXS = 18, GGML_IQ1_S = 19,
	GGML_IQ4_NL = 20, GGML_IQ3_S = 21, GGML_IQ2_S = 22, GGML_IQ4_XS = 23,
	GGML_I8 = 24, GGML_I16 = 25, GGML_I32 = 26, GGML_I64 = 27, GGML_F64 = 28,
	GGML_IQ1_M = 29, GGML_BF16 = 30, GGML_TQ1_0 = 34, GGML_TQ2_0 = 35,
	GGML_MXFP4 = 39, GGML_NVFP4 = 40, GGML_Q1_0 = 41, GGML_Q2_0 = 42,
};
#define GGML_TYPE_COUNT 43

/* The type's name as ggml prints it ("q4_K", "bf16", ...), NULL for a
 * number that is not a type. */
const char *ggml_type_name(uint32_t type);

/* Elements per block and bytes per block; 0 for a number that is not a
 * type (or a removed one). */
int64_t ggml_block_elems(uint32_t type);
int64_t ggml_block_bytes(uint32_t type);

#define GGUF_MAX_DIMS 4

struct gguf_kv {
	char *key;
	enum gguf_vtype type;
	enum gguf_vtype arr_type;  /* GGUF_VT_ARRAY only */
	uint64_t n;                /* GGUF_VT_ARRAY: element count */
	/* Scalars: the value in the widest field of its kind. */
	union {
		uint64_t u;            /* U8/U16/U32/U64, BOOL (0/1) */
		int64_t i;             /* I8/I16/I32/I64 */
		double f;              /* F32/F64 */
	} v;
	/* STRING: s (NUL-terminated copy; len bytes, may hold NULs).
	 * ARRAY of STRING: strs[n] and lens[n], each NUL-terminated, all in
	 * one block that strs[0] points to (NULL when n = 0).
	 * ARRAY of a number: data points to n packed little-endian elements
	 * of arr_type as in the file (copied). */
	char *s;
	uint64_t len;
	char **strs;
	uint64_t *lens;
	void *data;
};

struct gguf_tensor {
	char *name;
	uint32_t type;             /* enum ggml_type */
	int n_dims;
	int64_t ne[GGUF_MAX_DIMS]; /* ggml order; unused dims 1 */
	uint64_t offset;           /* absolute byte offset in its file */
	uint64_t nbytes;
	int64_t row_bytes;         /* bytes of one ne[0] row */
	int file_index;            /* index into gguf_set.files */
};

struct gguf_file {
	char *path;
	int fd;                    /* -1 for a parsed buffer */
	uint64_t file_bytes;
	uint32_t version;
	uint32_t alignment;
	uint64_t data_offset;      /* start of the data section */
	struct gguf_kv *kvs;       /* [n_kvs] in file order */
	size_t n_kvs;
	struct gguf_tensor *tensors; /* [n_tensors] in file order */
	size_t n_tensors;
};

struct gguf_set {
	struct gguf_file *files;   /* [n_files], split.no order */
	size_t n_files;
	struct gguf_tensor **slots; /* hash table over all files' tensors */
	size_t n_slots;
	size_t n_tensors;
	uint64_t total_bytes;      /* sum of tensor bytes */
};

/* Parses a header held in buf[len], the first len bytes of a file of
 * file_bytes bytes (len may be less than file_bytes: only the header must be
 * there; -EINVAL "truncated" when it is not). path names the file in
 * messages. On success f holds kvs, tensors and a copy of path, fd = -1;
 * gguf_file_close frees them. On failure f holds nothing. The fuzz target's
 * entry point. */
int gguf_parse(struct gguf_file *f, const uint8_t *buf, size_t len, uint64_t file_bytes,
	       const char *path);

/* Opens and validates one file. */
int gguf_file_open(struct gguf_file *f, const char *path);
void gguf_file_close(struct gguf_file *f);

/* Opens a GGUF model: one file, or every file of a split when path is one
 * of them (all must be present, agree on split.count and hold
 * split.tensors.count tensors in all; a tensor name in two files is an
 * error). Metadata lookups read the first file (split.no = 0). */
int gguf_set_open(struct gguf_set *set, const char *path);
void gguf_set_close(struct gguf_set *set);

/* Whether path names a GGUF file (by its first four bytes; false when it
 * cannot be read). */
bool gguf_is_gguf(const char *path);

const struct gguf_tensor *gguf_set_find(const struct gguf_set *set, const char *name);
const char *gguf_set_path(const struct gguf_set *set, const struct gguf_tensor *t);

/* The metadata of the first file, by key; NULL if absent. */
const struct gguf_kv *gguf_find_kv(const struct gguf_set *set, const char *key);

/* Typed getters. 0 on success; -ENOENT (no message) when the key is absent;
 * -EINVAL with a message naming the file and key when it has another type
 * or the value does not fit. Integers of any integer type are accepted
 * when the value fits the requested one. */
int gguf_get_u32(const struct gguf_set *set, const char *key, uint32_t *out);
int gguf_get_u64(const struct gguf_set *set, const char *key, uint64_t *out);
int gguf_get_i64(const struct gguf_set *set, const char *key, int64_t *out);
int gguf_get_f32(const struct gguf_set *set, const char *key, float *out); /* F32/F64 */
int gguf_get_bool(const struct gguf_set *set, const char *key, bool *out);
/* STRING: *out points into the kv (valid while set is open). */
int gguf_get_str(const struct gguf_set *set, const char *key, const char **out);
/* ARRAY: its kv, checked to hold elements of type elem (integers: any
 * integer type; GGUF_VT_F32 also takes F64; pass GGUF_VT_ARRAY to accept
 * any). */
int gguf_get_arr(const struct gguf_set *set, const char *key, enum gguf_vtype elem,
		 const struct gguf_kv **out);
/* Element i of a numeric array as int64 / double (range-checked by the
 * caller through kv->n). Floats truncate toward zero in gguf_arr_i64 (0
 * when out of range or NaN); a u64 above INT64_MAX wraps; 0 for a string
 * array. */
int64_t gguf_arr_i64(const struct gguf_kv *kv, uint64_t i);
double gguf_arr_f64(const struct gguf_kv *kv, uint64_t i);

/* Reads rows [row, row + n) of t, counting rows over every dimension above
 * ne[0] (so row r of a 3-D [ne0, ne1, ne2] tensor is (r % ne1, r / ne1)),
 * n * t->row_bytes bytes, into dst. -EIO / -EINVAL with a message naming
 * the file and tensor. */
int gguf_tensor_read_rows(const struct gguf_set *set, const struct gguf_tensor *t,
			  int64_t row, int64_t n, void *dst);

#endif
