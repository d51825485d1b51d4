/*
 * safetensors — reader for Hugging Face .safetensors checkpoints.
 *
 * A file is: u64 little-endian header length N, N bytes of JSON
 * {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
 * then the data block; offsets are relative to the data block. Opening a file
 * validates the whole header against the file size (offsets in range, sizes
 * equal to shape x dtype, no overlaps), so later reads cannot run off the end
 * of a well-formed header. Tensors are read by rows, never mapped whole, so
 * converting a 700 GB checkpoint needs memory for one chunk of rows only.
 *
 * A checkpoint (st_set) is one model.safetensors, or the shards listed in
 * model.safetensors.index.json, or every model-*.safetensors when no index
 * exists. Names are looked up through a hash table: O(1) per lookup, fine
 * for the ~100k tensors of the largest checkpoints.
 */
#ifndef COLIBRI_ENGINE_SAFETENSORS_H
#define COLIBRI_ENGINE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

enum st_dtype {
	ST_DTYPE_UNKNOWN = 0,
	ST_DTYPE_F32,
	ST_DTYPE_BF16,
	ST_DTYPE_F16,
	ST_DTYPE_F8_E4M3,
	ST_DTYPE_F64,
	ST_DTYPE_I64,
	ST_DTYPE_I32,
	ST_DTYPE_I16,
	ST_DTYPE_I8,
	ST_DTYPE_U8,
	ST_DTYPE_BOOL,
	ST_DTYPE_F8_E8M0,        /* ue8m0: 2^(b - 127), 0xff NaN (DeepSeek-V4's block scales) */
	ST_DTYPE_GGML,           /* rows of GGML blocks (st_tensor.ggml_type, row_bytes): a GGUF tensor */
};

/* The value of a ue8m0 byte (torch.float8_e8m0fnu): 2^(b - 127); 0xff is NaN. */
static inline float st_e8m0_to_f32(uint8_t b)
{
	union { uint32_t u; float f; } v;
	if (b == 0xff)
		v.u = 0x7fc00000u;
	else if (b == 0)
		v.u = 0x00400000u; /* 2^-127, a subnormal */
	else
		v.u = (uint32_t)b << 23;
	return v.f;
}

#define ST_MAX_DIMS 8

struct st_set;
struct st_tensor;

/* A tensor whose rows are not read at its offset: a GGUF tensor seen under
 * the name the container gives it (engine/convert/gguf_view.c), stored in
 * another row order or made of several tensors. st_tensor_read_f32 and
 * st_tensor_read_raw go through these. read_raw is NULL when the rows have
 * no stored form (they are computed, e.g. two tensors interleaved); such a
 * tensor is read as f32 only. */
struct st_rows {
	int (*read_raw)(const struct st_set *set, const struct st_tensor *t, int64_t row, int64_t n,
			void *out);
	int (*read_f32)(const struct st_set *set, const struct st_tensor *t, int64_t row, int64_t n,
			float *out);
};

struct st_tensor {
	char *name;
	enum st_dtype dtype;
	char dtype_name[16];     /* as written in the header, for messages */
	int ndim;
	int64_t shape[ST_MAX_DIMS];
	uint64_t offset;         /* absolute byte offset in the file */
	uint64_t nbytes;
	int file_index;          /* index into st_set.files */
	/* Set for tensors of another format (see struct st_rows), else NULL / 0. */
	const struct st_rows *rows;
	void *rows_ctx;
	uint32_t ggml_type;      /* ST_DTYPE_GGML: the block format (a GGML type number) */
	int64_t row_bytes;       /* ST_DTYPE_GGML: bytes of one row */
};

struct st_file {
	char *path;
	int fd;
	uint64_t file_bytes;
	struct st_tensor *tensors;   /* [n_tensors] */
	size_t n_tensors;
};

struct st_set {
	struct st_file *files;       /* [n_files] */
	size_t n_files;
	struct st_tensor **slots;    /* hash table, [n_slots], NULL = empty */
	size_t n_slots;
	size_t n_tensors;
	uint64_t total_bytes;        /* sum of tensor bytes */
};

/* Bytes per element, 0 for ST_DTYPE_UNKNOWN. */
size_t st_dtype_size(enum st_dtype dtype);

/* Decodes the u64 little-endian header length from the first 8 bytes of a
 * file of file_bytes (>= 8) bytes into *hlen; -EINVAL with a message naming
 * path when it is below 2, above the 256 MiB cap or runs past the file. */
int st_header_length(const uint8_t prefix[8], uint64_t file_bytes, const char *path, uint64_t *hlen);

/* Validates the hlen bytes of header JSON of a file of file_bytes bytes
 * (hlen as st_header_length accepted it) and fills f->tensors, n_tensors
 * and file_bytes; f->path names the file in messages and nothing is read.
 * st_file_open is this after reading the bytes. On failure -EINVAL (or
 * -ENOMEM) with error_set(), and f holds no tensors. */
int st_header_parse(struct st_file *f, const char *hdr, size_t hlen, uint64_t file_bytes);

/* Opens and validates one file. On failure returns -errno with error_set()
 * naming the file and the problem; *f needs no cleanup then. */
int st_file_open(struct st_file *f, const char *path);
void st_file_close(struct st_file *f);

/* The shard file names of a model.safetensors.index.json text of len bytes:
 * the distinct values of its weight_map, sorted. Each is a plain file name
 * in the checkpoint folder. -EINVAL (not JSON, no weight_map object, a value
 * that is not a file name) or -ENOENT (no shards), with a message naming
 * path. The caller frees *names with st_names_free. */
int st_index_parse(const char *json, size_t len, const char *path, char ***names, size_t *n);
void st_names_free(char **names, size_t n);

/* Opens every shard of the checkpoint in dir (see above). The caller frees
 * with st_set_close. */
int st_set_open(struct st_set *set, const char *dir);

/* Builds the name table of a set whose files and tensors the caller filled
 * (set->files[n_files], each file's tensors, names malloc'd, fds owned):
 * sets file_index, n_tensors and total_bytes. -EINVAL for a name in two
 * places. st_set_open ends with this. */
int st_set_index(struct st_set *set);
void st_set_close(struct st_set *set);

/* NULL if absent. */
const struct st_tensor *st_set_find(const struct st_set *set, const char *name);

/* Path of the file that holds t, for messages. */
const char *st_set_path(const struct st_set *set, const struct st_tensor *t);

/* Number of "rows": the product of all dims but the last (1 for 1-D). */
int64_t st_tensor_rows(const struct st_tensor *t);
/* Size of the last dim (the whole length for 1-D). */
int64_t st_tensor_cols(const struct st_tensor *t);

/* Reads rows [row, row + n_rows) of t converted to f32 into out
 * (n_rows * cols floats). F32, BF16, F16, F8_E4M3 (raw, without block
 * scales) and F8_E8M0 are converted; other dtypes give -ENOTSUP. Short
 * files give -EIO with a message naming the file and tensor. */
int st_tensor_read_f32(const struct st_set *set, const struct st_tensor *t,
		       int64_t row, int64_t n_rows, float *out);

/* Bytes of n rows of t as stored (st_tensor_read_raw writes that many). */
uint64_t st_tensor_row_bytes(const struct st_tensor *t, int64_t n);

/* Reads the bytes of rows [row, row + n_rows) of t, of any dtype with a
 * size or of GGML blocks, into out (st_tensor_row_bytes long), as stored
 * (little-endian). Errors as st_tensor_read_f32. */
int st_tensor_read_raw(const struct st_set *set, const struct st_tensor *t,
		       int64_t row, int64_t n_rows, void *out);

#endif
