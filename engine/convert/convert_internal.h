/*
 * convert_internal — what the two halves of the converter share:
 * convert_src.c finds and reads the checkpoint's matrices (a safetensors
 * tensor or a GGUF one through gguf_view, FP8 / FP4 / MXFP4 sources, gpt-oss
 * experts, index tables) as f32 rows; convert.c plans, quantizes or copies
 * them, writes the container and publishes it. Internal to engine/convert/.
 */
#ifndef COLIBRI_ENGINE_CONVERT_INTERNAL_H
#define COLIBRI_ENGINE_CONVERT_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "compute/quant.h"
#include "engine/convert/ckpt_names.h"
#include "engine/convert/convert.h"
#include "engine/convert/gguf_view.h"
#include "engine/convert/safetensors.h"
#include "engine/model/model_config.h"
#include "engine/model/model_tensors.h"

/* f32 staging per chunk of rows: bounds conversion memory. */
#define CONVERT_CHUNK_BYTES (64u << 20)
#define FP8_BLOCK 128

/* Where one matrix's rows come from: rows [row0, row0 + rows) of tensor t,
 * dequantized with the block scales in `scale` (blocks of block_rows x
 * block_cols) when t is FP8 e4m3, or FP4 e2m1 packed two per I8 byte;
 * index_max > 0: t holds integers that must lie in [0, index_max). */
struct matrix_src {
	const struct st_tensor *t;
	const struct st_tensor *scale;
	int64_t row0;
	int64_t rows, cols;
	int64_t block_rows, block_cols;
	bool fp4;
	int32_t index_max;
	/* gpt-oss's experts (resolve_expert_oss): row r of the matrix is
	 * source row row0 + first + r * step of an MXFP4 pair (t the *_blocks
	 * [E, out, cols / 32, 16], mx_scales its *_scales), or with transposed
	 * column first + r * step of the source rows row0 .. row0 + cols - 1
	 * (t [E, cols, out], as transformers holds them). step 0: neither. */
	const struct st_tensor *mx_scales;
	bool transposed;
	int64_t first, step;
};

struct progress {
	uint64_t tensors_total, tensors_done;
	uint64_t bytes_read;
	double t0, last;
	bool quiet;
};

struct converter {
	const struct convert_options *opt; /* the caller's, with the expert quant resolved (released_mxfp4) */
	struct model_config cfg;
	struct st_set set;
	struct tensor_spec *specs;
	size_t n_specs;
	enum quant_type dense_quant;
	float *f32;              /* staging rows, CONVERT_CHUNK_BYTES or one expert matrix */
	size_t f32_floats;
	uint8_t *qbuf;           /* quantized chunk */
	uint8_t *record;         /* one expert record */
	float *scale_buf;        /* FP8 block scales of scale_of */
	size_t scale_cap;
	const struct st_tensor *scale_of;
	struct ckpt_names names; /* the checkpoint's tensors by the names the container gives them */
	bool fp4_seen;           /* FP4 experts were dequantized to the container's type */
	bool mx_seen;            /* MXFP4 experts (gpt-oss's *_blocks / *_scales) were read */
	uint8_t *packed;         /* a gpt-oss expert's source bytes (expert_src_read) */
	size_t packed_bytes;
	const struct st_tensor *packed_of; /* mx_gather's raw rows [packed_row, + packed_span) of this *_blocks */
	int64_t packed_row, packed_span;
	size_t qbuf_bytes;
	size_t n_visual;         /* vision tower tensors, not converted */
	int32_t mtp_absent;      /* MTP modules config.json announces that the checkpoint lacks */
	bool mtp_unannounced;    /* an mtp.* block config.json does not announce */
	/* A GGUF input: its tensors seen under the container's names, and the
	 * HF documents made from its metadata. native: each matrix keeps the
	 * GGUF's own type (no --quant given). */
	bool gguf, native, gv_open;
	struct gguf_view gv;
	cJSON *gguf_config, *gguf_tokenizer, *gguf_tokenizer_config;
	char out[PATH_MAX];      /* OUT_DIR without trailing slashes */
	char tmp_dir[PATH_MAX];
	struct progress prog;
};

/* convert_src.c. All return 0 or -errno with error_set() naming the file
 * and tensor at fault. */

/* The container type that keeps a GGUF tensor as it is (f32 for rows the
 * view computes); -ENOTSUP for a GGML type without kernels. */
int cv_native_type(const struct converter *c, const struct st_tensor *t, enum quant_type *q);

/* The FP8 / FP4 block scales of s->t, named name in the container. */
int cv_resolve_scale(struct converter *c, struct matrix_src *s, const char *name, bool fp4);

/* An index table: integers of an integer dtype below index_max. */
int cv_resolve_index(struct converter *c, struct matrix_src *s, int32_t index_max);

/* t has shape[ndim] (squeezed: or [shape[0], 1, shape[1]]). */
int cv_check_shape(struct converter *c, const struct st_tensor *t, int ndim,
		       const int64_t *shape, bool squeezed);

/* One routed expert matrix, in whichever layout the checkpoint has it. */
int cv_resolve_expert(struct converter *c, int layer, int e, enum expert_part p,
			  struct matrix_src *s);

/* Rows of an index table, each entry checked; out may be NULL (check only). */
int cv_index_read(struct converter *c, const struct matrix_src *s, int64_t r, int64_t n, float *out,
		      uint8_t *buf, size_t buf_bytes);

/* The raw MXFP4 blocks and scales of rows [r, r + n) of a gpt-oss expert. */
int cv_mx_gather(struct converter *c, const struct matrix_src *s, int64_t r, int64_t n, uint8_t **blocks,
		     uint8_t **scales);

/* Rows [r, r + n) of the matrix as f32, block scales applied, finite. */
int cv_matrix_read(struct converter *c, const struct matrix_src *s, int64_t r, int64_t n,
		       float *out);

#endif
