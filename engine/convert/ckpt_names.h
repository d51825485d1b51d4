/*
 * ckpt_names — where a checkpoint keeps the tensors the container names:
 * by the same name; by the name transformers v5 gives a released
 * DeepSeek-V4 tensor (its conversion_mapping.py rules, and the MTP block
 * as layer n_layers + M); where a Qwen3.5 / Qwen3-Next checkpoint keeps a
 * text model's tensors; Mixtral's block_sparse_moe as mlp; Inkling's
 * released model.llm.* tensors, renamed or computed from them (gate / up
 * split, deinterleaved experts, stacked shared experts, the vocabulary's
 * rows). Internal to engine/convert/.
 */
#ifndef COLIBRI_ENGINE_CONVERT_CKPT_NAMES_H
#define COLIBRI_ENGINE_CONVERT_CKPT_NAMES_H

#include <stddef.h>

#include "engine/convert/safetensors.h"
#include "engine/model/model_config.h"

#define INK_TOWERS 3 /* Inkling's model.visual.*, model.audio.*, model.mtp.* */

struct ink_view;

struct ckpt_names {
	const struct st_set *set;
	const struct model_config *cfg;  /* read at each lookup (the converter may drop MTP layers) */
	const struct st_tensor **slots;  /* [n_slots] DeepSeek-V4 released tensors by ... */
	char **names;                    /* [n_slots] ... their transformers names (open addressing) */
	size_t n_slots;
	size_t n_mtp_skipped;            /* DeepSeek-V4 mtp.* tensors of modules config.json does not announce */
	size_t n_mtp_named;              /* DeepSeek-V4 mtp.* tensors of the modules it announces */
	struct st_tensor *views;         /* [n_views] Inkling's computed tensors (rows through st_rows) */
	struct ink_view *view_src;       /* [n_views] what each is made of */
	size_t n_views;
	size_t n_tower[INK_TOWERS];      /* Inkling's tensors of other towers, not converted */
};

/* Indexes set for cfg (the DeepSeek-V4 and Inkling tables; nothing for the
 * others). Both must outlive n. Returns 0, -ENOMEM, or -EINVAL when two
 * released tensors mean the same one, or (Inkling) for a model.llm. tensor
 * no rule knows or one whose shape its rule cannot split, naming the file. */
int ckpt_names_init(struct ckpt_names *n, const struct st_set *set, const struct model_config *cfg);
void ckpt_names_free(struct ckpt_names *n);

/* The checkpoint's tensor the container calls name, or NULL. */
const struct st_tensor *ckpt_names_find(const struct ckpt_names *n, const char *name);

/* A missing tensor's name for a message: name, and where a Qwen3.5 /
 * Qwen3-Next checkpoint may keep it instead, or for a DeepSeek-V4 MTP
 * layer the release's module it belongs to. */
const char *ckpt_names_missing(const struct ckpt_names *n, const char *name, char *buf, size_t len);

#endif
