/*
 * model_tensors — which tensors a model family needs, with their HF names,
 * shapes and storage roles. The converter checks a checkpoint against this
 * list before writing anything; the loader finds tensors by the same names.
 */
#ifndef COLIBRI_ENGINE_MODEL_TENSORS_H
#define COLIBRI_ENGINE_MODEL_TENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model/model_config.h"

/* The role decides the storage type: vectors and routers stay f32,
 * embeddings bf16 (f32 under --quant f32), dense matrices the dense quant,
 * routed experts the expert quant in the expert files. An index table
 * (DeepSeek-V4's tid2eid) holds integers in [0, n_experts) of an integer
 * dtype in the checkpoint; it is stored f32, which holds them exactly. */
enum tensor_role {
	TENSOR_ROLE_EMBED = 0,
	TENSOR_ROLE_VECTOR,
	TENSOR_ROLE_ROUTER,
	TENSOR_ROLE_DENSE,
	TENSOR_ROLE_INDEX,
};

enum expert_part { EXPERT_PART_GATE = 0, EXPERT_PART_UP = 1, EXPERT_PART_DOWN = 2 };
#define EXPERT_PARTS 3

#define TENSOR_NAME_MAX 160

struct tensor_spec {
	char name[TENSOR_NAME_MAX];
	enum tensor_role role;
	int ndim;
	int64_t shape[2];   /* [rows, cols]; [n, 1] for vectors */
	int32_t layer;      /* -1 for model-level tensors */
	bool optional;      /* e.g. lm_head when embeddings are tied */
	bool squeezed;      /* the checkpoint stores [rows, 1, cols] (a depthwise Conv1d weight) */
	bool plus_one;      /* a zero-centred norm weight: the loader makes it 1 + w */
};

/* The resident (non-expert) tensors of cfg. *out is malloc'd; caller frees. */
int model_tensors_resident(const struct model_config *cfg, struct tensor_spec **out, size_t *n);

/* HF name of one routed expert matrix in the per-expert layout. */
void model_expert_name(const struct model_config *cfg, int layer, int expert,
		       enum expert_part part, char *buf, size_t len);

/* HF names of the fused 3-D layout: gate_up [E, 2*I, H] (gate rows first)
 * and down [E, H, I], as written by recent transformers. */
void model_expert_fused_name(const struct model_config *cfg, int layer, bool gate_up,
			     char *buf, size_t len);

/* [rows, cols] of an expert matrix: gate/up [I, H], down [H, I]. */
void model_expert_shape(const struct model_config *cfg, enum expert_part part,
			int64_t *rows, int64_t *cols);

/* "gate", "up", "down" (the names used in the manifest). */
const char *expert_part_name(enum expert_part part);

#endif
