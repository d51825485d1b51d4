/*
 * model — a loaded container: config, resident weights in RAM, and the
 * expert store that serves routed experts from disk.
 *
 * Resident weights are read whole into one aligned buffer and verified
 * against their checksums at load; every qmatrix and vector below points
 * into that buffer. Routed experts never live here: the forward pass asks
 * the expert store for them layer by layer.
 */
#ifndef COLIBRI_ENGINE_MODEL_H
#define COLIBRI_ENGINE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "compute/quant.h"
#include "engine/model/manifest.h"
#include "engine/model/model_config.h"
#include "storage/expert_store.h"

struct layer_weights {
	const float *attn_norm;          /* [hidden] */
	const float *ffn_norm;           /* [hidden] */
	struct qmatrix wq;               /* [n_heads*head_dim, hidden] */
	struct qmatrix wk;               /* [n_kv_heads*head_dim, hidden] */
	struct qmatrix wv;               /* [n_kv_heads*head_dim, hidden] */
	struct qmatrix wo;               /* [hidden, n_heads*head_dim] */
	const float *q_norm;             /* [head_dim] or [n_heads*head_dim]; NULL if none */
	const float *k_norm;             /* [head_dim] or [n_kv_heads*head_dim] */
	bool moe;
	struct qmatrix router;           /* [n_experts, hidden], f32 */
	const struct manifest_expert_layer *experts; /* record layout, moe only */
	struct qmatrix ffn_gate;         /* [intermediate, hidden], dense only */
	struct qmatrix ffn_up;           /* [intermediate, hidden] */
	struct qmatrix ffn_down;         /* [hidden, intermediate] */
	const float *bq, *bk, *bv;       /* q/k/v biases (attn_bias), else NULL */
	/* MLA (wq is q_proj when q_lora_rank is 0; wo is o_proj) */
	struct qmatrix q_a;              /* [q_lora_rank, hidden] */
	const float *q_a_norm;           /* [q_lora_rank] */
	struct qmatrix q_b;              /* [n_heads*(nope+rope), q_lora_rank] */
	struct qmatrix kv_a;             /* [kv_lora_rank + rope, hidden] */
	const float *kv_a_norm;          /* [kv_lora_rank] */
	struct qmatrix kv_b;             /* [n_heads*(nope+v), kv_lora_rank] */
	/* DSA indexer (dsa models; absent in layers that reuse a selection) */
	struct qmatrix ix_wq_b;          /* [index_n_heads*index_head_dim, q_lora_rank] */
	struct qmatrix ix_wk;            /* [index_head_dim, hidden] */
	const float *ix_k_norm, *ix_k_bias; /* [index_head_dim] LayerNorm */
	struct qmatrix ix_weights;       /* [index_n_heads, hidden], f32 */
	/* Grouped sigmoid routing and shared experts (DeepSeek-V3, GLM) */
	const float *router_bias;        /* [n_experts] e_score_correction_bias */
	bool shared;
	struct qmatrix sh_gate;          /* [moe_intermediate*n_shared, hidden] */
	struct qmatrix sh_up;
	struct qmatrix sh_down;          /* [hidden, moe_intermediate*n_shared] */
};

/* A DeepSeek/GLM multi-token-prediction module: it turns the final hidden
 * state of position t and the token at t+1 into logits for t+2 through one
 * more decoder layer (layers[n_layers + i]). */
struct mtp_weights {
	const float *enorm;              /* [hidden] norm of the next token's embedding */
	const float *hnorm;              /* [hidden] norm of the hidden state */
	struct qmatrix eh_proj;          /* [hidden, 2*hidden]: [enorm(e); hnorm(h)] -> hidden */
	const float *head_norm;          /* [hidden] shared_head.norm */
	struct qmatrix head;             /* [vocab, hidden] shared_head.head, or lm_head */
	struct qmatrix embed;            /* [vocab, hidden] its embed_tokens, or the model's */
};

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
	struct qmatrix embed;            /* [vocab, hidden] */
	struct qmatrix lm_head;          /* [vocab, hidden]; the embedding when tied */
	const float *final_norm;         /* [hidden] */
	struct layer_weights *layers;    /* [n_layers + n_mtp]: decoder layers, then MTP layers */
	int n_mtp;                       /* MTP modules loaded (0 when the checkpoint has none) */
	struct mtp_weights *mtp;         /* [n_mtp] */
	struct expert_store *store;
	int max_experts_per_step;        /* experts one step may pin at once */
};

/* Loads the container in dir. On failure returns -errno with a message and
 * leaves *m freeable with model_free. */
int model_load(struct model *m, const char *dir, const struct model_options *opt);
void model_free(struct model *m);

/* Builds a view of one expert part inside a delivered record. */
void model_expert_part(struct qmatrix *out, const struct layer_weights *lw, const void *record,
		       enum expert_part part);

/* Bytes of all expert records of the model. */
uint64_t model_expert_bytes(const struct model *m);

#endif
