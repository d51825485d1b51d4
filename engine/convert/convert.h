/*
 * convert — Hugging Face checkpoint -> colibri container (docs/FORMAT.md).
 *
 * Streams tensor rows through a fixed set of buffers (memory stays at a few
 * hundred MB plus one expert, whatever the checkpoint size), validates the
 * whole checkpoint against the family's tensor list before writing, writes
 * into a temporary sibling of the output folder and renames it into place
 * only when everything is on disk, so a failed or interrupted conversion
 * leaves no half-written container.
 */
#ifndef COLIBRI_ENGINE_CONVERT_H
#define COLIBRI_ENGINE_CONVERT_H

#include <stdbool.h>
#include <stdint.h>

#include "compute/quant.h"

struct convert_options {
	const char *hf_dir;
	const char *out_dir;
	enum quant_type quant;   /* routed experts; default QUANT_INT4 */
	bool quant_set;          /* quant was chosen; else experts released in MXFP4 (gpt-oss) stay QUANT_MXFP4 */
	bool dense_quant_set;    /* dense matrices take dense_quant, else convert_dense_quant(quant) */
	enum quant_type dense_quant;
	bool head_quant_set;     /* lm_head takes head_quant, else the dense type */
	enum quant_type head_quant;
	const char *activations;  /* "auto" (default), "int8" or "f32": the manifest's quant.activations */
	int32_t group;           /* default QUANT_GROUP_DEFAULT */
	bool force;              /* replace an existing container */
	bool quiet;              /* no progress lines */
};

void convert_options_default(struct convert_options *o);

/* Runs the conversion. 0 on success; -errno with error_message() naming the
 * file and tensor at fault. */
int convert_run(const struct convert_options *o);

/* Dense (non-expert) matrices use the expert quant, except int4 -> int8:
 * the resident set is small and attention is precision-sensitive
 * (--dense-quant chooses otherwise). */
enum quant_type convert_dense_quant(enum quant_type expert_quant);

#endif
