/*
 * plan_container — the bridge from a converted container to the planner's
 * plain numbers: the model half of the plan inputs and the expert files
 * (with their mirror copies) whose disks a plan names. Used by plan, run,
 * doctor, iobench and mirror.
 */
#ifndef COLIBRI_ENGINE_PLAN_CONTAINER_H
#define COLIBRI_ENGINE_PLAN_CONTAINER_H

#include "compute/quant.h"
#include "engine/model/model_config.h"
#include "planner/plan.h"

/* A container as the planner sees it: the model half of the
 * plan inputs (ctx too), and the expert files whose disks the plan names. */
struct plan_container {
	struct plan_inputs in;       /* user and machine fields left zero */
	struct model_config cfg;
	enum quant_type expert_type;
	char expert_quant[8];        /* its name */
	char **paths;                /* [n_paths]: the n_primary expert files "DIR/experts/layer-NNN.bin"
				      * in manifest order, then the mirror copies that exist */
	int *path_layer;             /* [n_paths] index of each file's expert layer (manifest order) */
	int *path_copy;              /* [n_paths] which copy each file is: 0 the primary, k mirror k - 1 */
	int n_paths;
	int n_primary;
	char kv_what[160];           /* in.kv_what points here */
};

/* What a session holds beside the model's weights and frames, which sizes
 * the fixed part of its budget. plan, run, chat and serve each fill it from
 * their options (session_plan_shape), so given the same --ctx, --batch,
 * --threads (and serve's --parallel) they count the same minimum. */
struct plan_shape {
	int ctx;                     /* positions of each sequence; 0: PLAN_CTX_DEFAULT, at most the model's */
	int batch;                   /* rows of a forward step; 0: PLAN_BATCH_DEFAULT */
	int threads;                 /* 0: the physical cores */
	int n_seqs;                  /* sequences decoded together (serve's --parallel); 0: one */
	int logits_rows;             /* rows of vocab floats the command holds at once; at least
				      * PLAN_OUTPUT_ROWS are counted */
};

/* Loads config.json and the manifest of dir and sizes the session of
 * shape sh (NULL: every default). kv_bytes_per_position is what
 * forward_init allocates per position for that shape (the sequence states
 * and a score row per thread), state_fixed_bytes its fixed state; and
 * scratch_bytes the only count of the rest (in.scratch says what it holds):
 * the forward's other buffers, max(logits_rows, PLAN_OUTPUT_ROWS) rows of
 * vocab floats, PLAN_TOKENIZER_FACTOR x the tokenizer's files and
 * PLAN_RESERVE_BYTES. Free with plan_container_free, also after a failure.
 * -errno with a message on failure. */
int plan_container_load_shape(struct plan_container *c, const char *dir, const struct plan_shape *sh);

/* plan_container_load_shape with the logits rows' default. */
int plan_container_load(struct plan_container *c, const char *dir, int ctx, int batch, int threads, int n_seqs);
/* The record size most MoE layers share (ties: the smaller): the read the
 * disk mostly serves, and the block a disk probe should measure. */
uint64_t plan_container_main_record(const struct plan_container *c);
void plan_container_free(struct plan_container *c);

#endif
