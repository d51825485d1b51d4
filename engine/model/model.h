/*
 * model — a loaded container: config, resident weights in RAM, and the
 * expert store that serves routed experts from disk.
 *
 * Resident weights are read whole into one aligned buffer and verified
 * against their checksums at load; every qmatrix and vector handed out
 * (model_matrix, model_vector) points into that buffer, and the forward
 * pass binds its blocks' weights through them (engine/forward/). Routed
 * experts never live here: the forward pass asks the expert store for them
 * layer by layer.
 */
#ifndef COLIBRI_ENGINE_MODEL_H
#define COLIBRI_ENGINE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "compute/quant.h"
#include "engine/model/manifest.h"
#include "engine/model/model_config.h"
#include "storage/expert_store.h"

struct model_options {
	uint64_t expert_cache_bytes;     /* 0: enough for every expert; split over the frame classes
					  * by the store's rule (expert_store_split) */
	struct expert_class_frames class_frames[EXPERT_CLASSES_MAX]; /* frames per record size as
					  * the plan chose them, overriding expert_cache_bytes;
					  * [0].frame_bytes 0: unset */
	int io_depth;
	bool buffered;                   /* no O_DIRECT for expert reads */
	double copy_gbps[EXPERT_COPIES_MAX]; /* disk bandwidth of the primary and each mirror; 0 unknown */
};

struct model {
	struct model_config cfg;
	struct manifest man;
	char *dir;
	uint8_t *resident;               /* resident.bin, man.resident_bytes */
	struct qmatrix embed;            /* [vocab, hidden]; data NULL while the table stays on disk */
	uint8_t *embed_row;              /* one row read from disk; NULL while the table is in RAM */
	int embed_fd;                    /* resident.bin, open while embed_row is set */
	uint64_t embed_offset;           /* the table's place in resident.bin */
	struct qmatrix lm_head;          /* [vocab, hidden]; the embedding when tied */
	const float *final_norm;         /* [hidden] */
	const float *embed_norm;         /* [hidden] the norm after the embedding (Inkling), else NULL */
	int n_mtp;                       /* MTP modules loaded (0 when the checkpoint has none) */
	struct expert_store *store;
	int max_experts_per_step;        /* experts one step may pin at once */
};

/* Loads the container in dir. On failure returns -errno with a message and
 * leaves *m freeable with model_free. */
int model_load(struct model *m, const char *dir, const struct model_options *opt);
void model_free(struct model *m);

/* The resident matrix named fmt (with %d the layer) as a view into the
 * resident weights, or a message naming the tensor when it is missing or
 * of another shape than [rows, cols]. */
int model_matrix(const struct model *m, struct qmatrix *q, int64_t rows, int64_t cols, const char *fmt, int layer);

/* model_matrix for a matrix that must be stored f32 (convolutions,
 * position banks, routers). */
int model_f32_matrix(const struct model *m, struct qmatrix *q, int64_t rows, int64_t cols, const char *fmt, int layer);

/* The same for an f32 vector of n. */
int model_vector(const struct model *m, const float **v, int64_t n, const char *fmt, int layer);

/* Whether the container holds the tensor fmt (with %d the layer). */
bool model_has(const struct model *m, const char *fmt, int layer);

/* Row `token` of the embedding table `embed` as f32 into out[cols]: from
 * RAM, or read from resident.bin when it is the model's table kept on disk
 * (the same bytes either way, so the same floats). -EIO with a message
 * when the read fails. Not thread-safe: one caller at a time. */
int model_embed_row(const struct model *m, const struct qmatrix *embed, int32_t token, float *out);

/* Whether model_load leaves an untied embedding table on disk (reading a
 * row per token) rather than in RAM: yes unless COLIBRI_EMBED_IN_RAM=1 or
 * the table is also the output head. */
bool model_embed_on_disk(bool tied);

/* Builds a view of one expert part inside a delivered record of layer l. */
void model_expert_part(struct qmatrix *out, const struct manifest_expert_layer *l, const void *record,
		       enum expert_part part);

/* Bytes of all expert records of the model. */
uint64_t model_expert_bytes(const struct model *m);

#endif
