/*
 * plan_report — a plan as text (one line per number, each with its
 * explanation) and as JSON (the stable schema of docs/PLAN.md, "colibri-plan"
 * version 1). Both say the same things.
 */
#ifndef COLIBRI_PLANNER_PLAN_REPORT_H
#define COLIBRI_PLANNER_PLAN_REPORT_H

#include <stdio.h>

#include "planner/plan.h"
#include "planner/plan_machine.h"

#define PLAN_SCHEMA "colibri-plan"
#define PLAN_SCHEMA_VERSION 1

struct cJSON;

/* What the report says about the model; the planner itself only sees sizes. */
struct plan_model_info {
	const char *dir;
	const char *model_type;
	int n_layers;
	const char *expert_quant;      /* "int4", ... */
};

void plan_report_text(FILE *f, const struct plan *p, const struct plan_inputs *in, const struct plan_machine *m,
		      const struct plan_model_info *mi);

/* A new JSON object (the caller deletes it), or NULL when out of memory. */
struct cJSON *plan_report_json(const struct plan *p, const struct plan_inputs *in, const struct plan_machine *m,
			       const struct plan_model_info *mi);

/* "1.50 GiB", "12.0 MiB", "16.0 KiB", "512 B" */
const char *plan_bytes_str(char buf[32], uint64_t bytes);

#endif
