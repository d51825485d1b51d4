/*
 * usage — see usage.h. Counts are decayed by half on every save, so the
 * pinned set follows a workload that changes over weeks rather than being
 * ruled forever by its first day.
 */
#include "storage/usage.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/files.h"
#include "base/json_get.h"
#include "base/error.h"

#define USAGE_FORMAT "colibri-usage"
#define USAGE_DECAY 0.5

int usage_init(struct usage *u, int n_layers, int n_experts, uint64_t model_id)
{
	memset(u, 0, sizeof *u);
	u->n_layers = n_layers;
	u->n_experts = n_experts;
	u->model_id = model_id;
	size_t n = (size_t)n_layers * (size_t)(n_experts > 0 ? n_experts : 1);
	u->counts = calloc(n, sizeof *u->counts);
	return u->counts ? 0 : error_set(ENOMEM, "out of memory");
}

void usage_free(struct usage *u)
{
	free(u->counts);
	memset(u, 0, sizeof *u);
}

static void usage_warn(const char *path, const char *why)
{
	fprintf(stderr, "colibri: warning: %s: %s; ignoring the saved expert usage\n", path, why);
}

int usage_load(struct usage *u, const char *model_dir)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", model_dir, USAGE_FILE);
	if (access(path, F_OK) != 0)
		return 0;
	cJSON *j = NULL;
	if (json_load(path, &j) != 0) {
		usage_warn(path, error_message());
		error_clear();
		return 0;
	}
	const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
	const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "version");
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "model_id");
	const cJSON *layers = cJSON_GetObjectItemCaseSensitive(j, "layers");
	char want[17];
	snprintf(want, sizeof want, "%016" PRIx64, u->model_id);
	int64_t version = 0, li = 0;
	if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, USAGE_FORMAT) != 0 ||
	    json_int(ver, USAGE_VERSION, USAGE_VERSION, &version) != 0)
		usage_warn(path, "not a usage file of this format version");
	else if (!cJSON_IsString(id) || strcmp(id->valuestring, want) != 0)
		usage_warn(path, "written for another model");
	else if (!cJSON_IsArray(layers))
		usage_warn(path, "no layers list");
	else {
		for (const cJSON *l = layers->child; l; l = l->next) {
			const cJSON *cs = cJSON_GetObjectItemCaseSensitive(l, "counts");
			if (json_int(cJSON_GetObjectItemCaseSensitive(l, "layer"), 0, u->n_layers - 1, &li) != 0 ||
			    !cJSON_IsArray(cs) || cJSON_GetArraySize(cs) != u->n_experts)
				continue;
			double *row = u->counts + (size_t)li * u->n_experts;
			int e = 0;
			for (const cJSON *c = cs->child; c; c = c->next, e++)
				if (cJSON_IsNumber(c) && isfinite(c->valuedouble) && c->valuedouble > 0)
					row[e] += c->valuedouble;
		}
	}
	cJSON_Delete(j);
	return 0;
}

void usage_add(struct usage *u, int layer, const uint32_t *counts)
{
	if (layer < 0 || layer >= u->n_layers || !counts)
		return;
	double *row = u->counts + (size_t)layer * u->n_experts;
	for (int e = 0; e < u->n_experts; e++)
		row[e] += counts[e];
}

int usage_save(const struct usage *u, const char *model_dir)
{
	cJSON *j = cJSON_CreateObject();
	char id[17];
	snprintf(id, sizeof id, "%016" PRIx64, u->model_id);
	cJSON_AddStringToObject(j, "format", USAGE_FORMAT);
	cJSON_AddNumberToObject(j, "version", USAGE_VERSION);
	cJSON_AddStringToObject(j, "model_id", id);
	cJSON *layers = cJSON_AddArrayToObject(j, "layers");
	for (int l = 0; l < u->n_layers; l++) {
		const double *row = u->counts + (size_t)l * u->n_experts;
		bool any = false;
		for (int e = 0; e < u->n_experts && !any; e++)
			any = row[e] > 0;
		if (!any)
			continue;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "layer", l);
		cJSON *cs = cJSON_AddArrayToObject(o, "counts");
		for (int e = 0; e < u->n_experts; e++)
			cJSON_AddItemToArray(cs, cJSON_CreateNumber(row[e] * USAGE_DECAY));
		cJSON_AddItemToArray(layers, o);
	}
	char *text = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	if (!text)
		return error_set(ENOMEM, "out of memory");
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", model_dir, USAGE_FILE);
	int rc = file_write_atomic(path, text, strlen(text));
	free(text);
	return rc;
}

int usage_hottest(const struct usage *u, int n, int32_t *layers, int32_t *experts)
{
	/* Selection by repeated insertion: O(cells * n), fine for the few
	 * thousand experts of the largest models and n in the hundreds. */
	int got = 0;
	size_t cells = (size_t)u->n_layers * (size_t)u->n_experts;
	for (size_t i = 0; i < cells; i++) {
		double v = u->counts[i];
		if (v <= 0)
			continue;
		int pos = got < n ? got : n;
		while (pos > 0 && u->counts[(size_t)layers[pos - 1] * u->n_experts + experts[pos - 1]] < v)
			pos--;
		if (pos >= n)
			continue;
		int last = got < n ? got : n - 1;
		for (int k = last; k > pos; k--) {
			layers[k] = layers[k - 1];
			experts[k] = experts[k - 1];
		}
		layers[pos] = (int32_t)(i / (size_t)u->n_experts);
		experts[pos] = (int32_t)(i % (size_t)u->n_experts);
		if (got < n)
			got++;
	}
	return got;
}
