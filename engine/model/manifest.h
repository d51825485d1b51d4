/*
 * manifest — the index of a colibri container (docs/FORMAT.md).
 *
 * A container folder holds manifest.json, resident.bin, experts/LAYER.bin
 * and copies of the HF config, generation config and tokenizer files.
 * manifest_load validates everything that later code trusts: known version,
 * every byte range inside its file, sizes equal to what the quant type and
 * shape imply, expert records 4 KiB-aligned, and every offset the one the
 * converter's layout gives (docs/FORMAT.md sections 3 and 4). After a
 * successful load, no offset in the manifest can point outside a file or
 * at another tensor's bytes. Each checksum is seeded with what its bytes
 * are (manifest_tensor_seed, manifest_record_seed), so bytes moved to
 * another tensor's or record's place, checksum and all, fail their check.
 */
#ifndef COLIBRI_ENGINE_MANIFEST_H
#define COLIBRI_ENGINE_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compute/quant.h"
#include "engine/model/model_tensors.h"
#include "planner/placement.h"

#define MANIFEST_FORMAT "colibri-container"
#define MANIFEST_VERSION 2
#define MANIFEST_ALIGN 4096
#define MANIFEST_PART_ALIGN 64

/* The layout rule of docs/FORMAT.md sections 3 and 4: where the next tensor
 * starts after one that ends at `end`, rounded up to align (MANIFEST_ALIGN
 * between resident tensors and for a record's size, MANIFEST_PART_ALIGN
 * between the parts of a record). The converter places tensors with it;
 * manifest_load accepts no other offset. */
static inline uint64_t manifest_align_up(uint64_t end, uint64_t align)
{
	return (end + align - 1) / align * align;
}

struct manifest_tensor {
	char *name;
	enum quant_type type;
	int32_t group;
	int ndim;
	int64_t shape[2];     /* [rows, cols]; cols = 1 for vectors */
	uint64_t offset;      /* in resident.bin, or within an expert record */
	uint64_t bytes;
	uint64_t checksum;    /* XXH3-64 of the bytes, manifest_tensor_seed (resident tensors only) */
};

struct manifest_expert_layer {
	int32_t layer;
	char *file;                         /* relative to the container */
	uint64_t record_bytes;              /* multiple of MANIFEST_ALIGN */
	struct manifest_tensor parts[EXPERT_PARTS];
	uint64_t *checksums;                /* [n_experts], XXH3-64 of each record, manifest_record_seed */
	int32_t n_records;                  /* records in the file: n_experts, or a shard's */
	int32_t *records;                   /* shard: [n_records] its experts, ascending; NULL otherwise */
	int32_t *slot;                      /* shard: [n_experts] record index of each expert, -1 absent */
};

/* A container that holds the experts of one MPI rank only (colibri shard,
 * docs/FORMAT.md): which rank of how many, and the placement it was cut
 * by, so that a run can deal the experts the same way. */
struct manifest_shard {
	bool present;
	int32_t ranks, rank, replicas;
	double weights[PLACEMENT_RANKS_MAX]; /* [ranks], > 0 */
};

/* A copy of some or all expert files on another disk (colibri mirror). */
struct manifest_mirror {
	char *dir;                          /* absolute path of the copy's folder */
	int32_t *layers;                    /* [n_layers] model layers it holds */
	size_t n_layers;
};

#define MANIFEST_MIRRORS_MAX 7

struct manifest {
	int32_t version;
	char model_type[32];
	enum quant_type expert_quant;
	enum quant_type dense_quant;
	char activations[8];                /* "auto", "int8" or "f32": what quantized weights meet
					     * (kernels_set_activations); "f32" when the manifest
					     * predates the field */
	int32_t group;
	bool has_tokenizer;
	char *resident_file;
	uint64_t resident_bytes;
	struct manifest_tensor *tensors;    /* [n_tensors] */
	size_t n_tensors;
	int32_t n_experts;
	struct manifest_expert_layer *layers; /* [n_expert_layers], by layer index */
	size_t n_expert_layers;
	struct manifest_mirror mirrors[MANIFEST_MIRRORS_MAX];
	size_t n_mirrors;
	struct manifest_shard shard;
};

/* Bit r of holders[l * n_experts + e] for the placement a shard names
 * (placement_build, then placement_replicate): rank r holds expert e of
 * row l. rows: model layers and MTP layers, at least one past the largest
 * layer index of m. Returns a malloc'd [rows * n_experts], or NULL with an
 * error set. */
uint64_t *manifest_shard_holders(const struct manifest_shard *sh, int rows, int n_experts);

/* The seed of a resident tensor's checksum: XXH3-64 of its name's bytes
 * with seed offset, its place in resident.bin. */
uint64_t manifest_tensor_seed(const char *name, uint64_t offset);

/* The seed of the checksum of expert record `expert` of model layer
 * `layer`: layer * 2^32 + expert, so record e's is manifest_record_seed(
 * layer, 0) + e, the store's rule (expert_layer_desc.checksum_seed). */
uint64_t manifest_record_seed(int32_t layer, int32_t expert);

/* Identity of the model's experts: XXH3-64 over n_experts and every layer's
 * index and record checksums. Two containers of the same conversion agree. */
uint64_t manifest_model_id(const struct manifest *m);

/* True when mirror holds the expert file of model layer `layer`. */
bool manifest_mirror_has(const struct manifest_mirror *mirror, int layer);

/* Copy `copy` of expert layer layers[layer_index]: 0 is dir's own file (dir
 * the container), k > 0 the file in mirror k - 1. Writes "FOLDER/FILE" to
 * buf[0..n), cut like snprintf (callers pass PATH_MAX, past which open()
 * fails anyway), and returns true, or false when that mirror does not list
 * the layer. Whether the file exists is the caller's business. */
bool manifest_copy_path(const struct manifest *m, const char *dir, size_t copy, size_t layer_index, char *buf,
			size_t n);

/* Whether a command may put a container at dir (0 also when nothing is
 * there): only with force, and only over an empty folder or a container
 * this colibri reads. A folder with anything else in it, even a
 * manifest.json, is not ours to delete; nor is a container of a format
 * version this build does not read. -EEXIST with a message otherwise. */
int manifest_dir_replaceable(const char *dir, bool force);

/* The Hugging Face files a container keeps beside its data, copied as they
 * are when present (docs/FORMAT.md section 1): config, generation config,
 * tokenizer, chat template. MANIFEST_SIDE_FILES of them. */
#define MANIFEST_SIDE_FILES 6
extern const char *const manifest_side_files[MANIFEST_SIDE_FILES];

/* Writes dir/manifest.json atomically. */
int manifest_write(const struct manifest *m, const char *dir);

/* Reads and validates dir/manifest.json against the files beside it; a
 * shard's records must be exactly those its placement gives its rank. An
 * expert file missing or shorter than its records is accepted only where a
 * registered mirror holds that layer's file whole (the store reads it from
 * the mirrors alone). Free with manifest_free, also after a failure. */
int manifest_load(struct manifest *m, const char *dir);
void manifest_free(struct manifest *m);

const struct manifest_tensor *manifest_find(const struct manifest *m, const char *name);

/* The expert layer entry for model layer `layer`, NULL for a dense layer. */
const struct manifest_expert_layer *manifest_expert_layer(const struct manifest *m, int layer);

#endif
