/*
 * usage — per (layer, expert) routing counts remembered across runs, in a
 * sidecar of the model (MODEL_DIR/usage.json), so that the hottest experts
 * of this user's workload can be pinned at start-up.
 *
 * The file is versioned and carries the model's identity (the caller's
 * hash; colibri passes one over every expert record checksum), so counts are never applied to another model or
 * format: such a file is ignored with one warning. Writes are atomic (temp
 * file, fsync, rename); a model folder that cannot be written costs a
 * warning, never the run.
 */
#ifndef COLIBRI_STORAGE_USAGE_H
#define COLIBRI_STORAGE_USAGE_H

#include <stdint.h>

#define USAGE_FILE "usage.json"
#define USAGE_VERSION 1

struct usage {
	int32_t n_layers;            /* model layers */
	int32_t n_experts;
	uint64_t model_id;
	double *counts;              /* [n_layers, n_experts]; 0 for dense layers */
};

/* Empty counts for n_layers layers of n_experts experts of the model whose
 * identity is model_id. */
int usage_init(struct usage *u, int n_layers, int n_experts, uint64_t model_id);
void usage_free(struct usage *u);

/* Adds the sidecar's counts when it exists and belongs to this model;
 * returns 0 also when it is absent or foreign (with a warning then). */
int usage_load(struct usage *u, const char *model_dir);

/* Adds this run's request counts of one layer. */
void usage_add(struct usage *u, int layer, const uint32_t *counts);

/* Writes the sidecar atomically; a failure is returned with a message. */
int usage_save(const struct usage *u, const char *model_dir);

/* The n hottest (layer, expert) pairs, hottest first, into layers[] and
 * experts[] (each of room n); returns how many have a non-zero count. */
int usage_hottest(const struct usage *u, int n, int32_t *layers, int32_t *experts);

#endif
