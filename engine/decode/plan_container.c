/*
 * plan_container — see plan_container.h.
 */
#include "engine/decode/plan_container.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/forward/forward.h"
#include "engine/model/manifest.h"
#include "planner/topology.h"
#include "base/error.h"

/* Appends copy `copy` of expert layer index `layer` when the copy lists it
 * and its file exists: a missing mirror is out of rotation, and a missing
 * primary file got past manifest_load only because a mirror serves it. */
static int add_path(struct plan_container *c, const struct manifest *man, const char *dir, size_t copy,
		    size_t layer)
{
	char path[PATH_MAX];
	if (!manifest_copy_path(man, dir, copy, layer, path, sizeof path) || access(path, R_OK) != 0)
		return 0;
	if (!(c->paths[c->n_paths] = strdup(path)))
		return error_set(ENOMEM, "out of memory");
	c->path_layer[c->n_paths] = (int)layer;
	c->path_copy[c->n_paths++] = (int)copy;
	return 0;
}

/* Counts one MoE layer of record_bytes, whose file holds n_records, in its
 * frame class (the sizes kept ascending, as the expert store orders its
 * classes). */
static int class_add(struct plan_inputs *in, uint64_t record_bytes, int32_t n_records)
{
	int k = 0;
	while (k < in->n_classes && in->class_record_bytes[k] < record_bytes)
		k++;
	if (k == in->n_classes || in->class_record_bytes[k] != record_bytes) {
		if (in->n_classes == PLAN_CLASSES_MAX)
			return error_set(EINVAL, "expert records come in more than %d sizes", PLAN_CLASSES_MAX);
		for (int j = in->n_classes; j > k; j--) {
			in->class_record_bytes[j] = in->class_record_bytes[j - 1];
			in->class_layers[j] = in->class_layers[j - 1];
			in->class_records[j] = in->class_records[j - 1];
		}
		in->class_record_bytes[k] = record_bytes;
		in->class_layers[k] = 0;
		in->class_records[k] = 0;
		in->n_classes++;
	}
	in->class_layers[k]++;
	in->class_records[k] += (uint64_t)n_records;
	return 0;
}

/* What tokenizer_load reads: tokenizer.json, tokenizer_config.json and
 * chat_template.jinja, times PLAN_TOKENIZER_FACTOR; 0 without
 * tokenizer.json (nothing is loaded then). */
static uint64_t tokenizer_bytes(const char *dir)
{
	static const char *const files[] = { "tokenizer.json", "tokenizer_config.json", "chat_template.jinja" };
	uint64_t sum = 0;
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		char path[PATH_MAX];
		struct stat st;
		snprintf(path, sizeof path, "%s/%s", dir, files[i]);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
			sum += (uint64_t)st.st_size;
		else if (i == 0)
			return 0;
	}
	return sum * PLAN_TOKENIZER_FACTOR;
}

int plan_container_load(struct plan_container *c, const char *dir, int ctx, int batch, int threads, int n_seqs)
{
	struct plan_shape sh = { .ctx = ctx, .batch = batch, .threads = threads, .n_seqs = n_seqs };
	return plan_container_load_shape(c, dir, &sh);
}

int plan_container_load_shape(struct plan_container *c, const char *dir, const struct plan_shape *sh)
{
	static const struct plan_shape defaults;
	if (!sh)
		sh = &defaults;
	struct manifest man;
	memset(c, 0, sizeof *c);
	int rc = model_config_load(&c->cfg, dir);
	if (rc)
		return rc;
	if ((rc = manifest_load(&man, dir))) {
		manifest_free(&man);
		return rc;
	}
	struct plan_inputs *in = &c->in;
	c->expert_type = man.expert_quant;
	snprintf(c->expert_quant, sizeof c->expert_quant, "%s", quant_type_name(man.expert_quant));
	in->resident_bytes = man.resident_bytes;
	/* An untied embedding table is read one row per token; a tied one is
	 * also the output head, read whole. */
	const struct manifest_tensor *embed = manifest_find(&man, "model.embed_tokens.weight");
	in->token_dense_bytes = man.resident_bytes;
	if (embed && manifest_find(&man, "lm_head.weight") && embed->bytes < man.resident_bytes) {
		in->token_dense_bytes -= embed->bytes;
		/* model_load leaves it on disk, reading a row per token. */
		if (model_embed_on_disk(false)) {
			in->resident_bytes -= embed->bytes;
			in->embed_disk_bytes = embed->bytes;
		}
	}
	in->n_moe_layers = (int32_t)man.n_expert_layers;
	in->n_experts = man.n_experts;
	in->top_k = c->cfg.top_k;
	size_t cap = man.n_expert_layers * (1 + man.n_mirrors) + 1;
	c->paths = calloc(cap, sizeof *c->paths);
	c->path_layer = calloc(cap, sizeof *c->path_layer);
	c->path_copy = calloc(cap, sizeof *c->path_copy);
	if (!c->paths || !c->path_layer || !c->path_copy)
		rc = error_set(ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < man.n_expert_layers; i++) {
		const struct manifest_expert_layer *l = &man.layers[i];
		in->record_bytes_max = l->record_bytes > in->record_bytes_max ? l->record_bytes : in->record_bytes_max;
		in->record_bytes_sum += l->record_bytes;
		rc = rc ? rc : class_add(in, l->record_bytes, l->n_records);
		rc = rc ? rc : add_path(c, &man, dir, 0, i);
	}
	c->n_primary = c->n_paths;
	/* Mirror copies that are there; a missing mirror is out of rotation. */
	for (size_t k = 1; !rc && k <= man.n_mirrors; k++)
		for (size_t i = 0; !rc && i < man.n_expert_layers; i++)
			rc = add_path(c, &man, dir, k, i);
	manifest_free(&man);
	/* The forward pass's buffers grow linearly with the context: the
	 * sequence state (KV cache, MLA latents for DeepSeek-style attention)
	 * and a score row per thread. Two sizes give the slope and the
	 * constant, exactly as forward_init allocates them (measured: within
	 * 20 KB, its layer table, of what it mallocs). Where a part stops
	 * growing (a sliding window) the line overcounts, never under. */
	int t = sh->threads > 0 ? sh->threads : topology_physical_cores();
	int bt = sh->batch > 0 ? sh->batch : PLAN_BATCH_DEFAULT;
	int ns = sh->n_seqs > 0 ? sh->n_seqs : 1;
	int rows = sh->logits_rows > PLAN_OUTPUT_ROWS ? sh->logits_rows : PLAN_OUTPUT_ROWS;
	uint64_t f1 = forward_bytes(&c->cfg, 1, bt, t, ns), f2 = forward_bytes(&c->cfg, 2, bt, t, ns);
	in->kv_bytes_per_position = f2 - f1;
	forward_state_what(&c->cfg, c->kv_what, sizeof c->kv_what);
	in->kv_what = c->kv_what;
	in->state_fixed_bytes = forward_state_fixed_bytes(&c->cfg, ns);
	struct plan_scratch *s = &in->scratch;
	*s = (struct plan_scratch){
		.batch = bt, .threads = t, .n_seqs = ns, .logits_rows = rows,
		.forward_bytes = f1 - in->kv_bytes_per_position - in->state_fixed_bytes,
		.logits_bytes = (uint64_t)rows * (uint64_t)c->cfg.vocab * sizeof(float),
		.tokenizer_bytes = tokenizer_bytes(dir),
		.reserve_bytes = PLAN_RESERVE_BYTES,
	};
	in->scratch_bytes = s->forward_bytes + s->logits_bytes + s->tokenizer_bytes + s->reserve_bytes;
	in->ctx = sh->ctx > 0 ? sh->ctx
			      : c->cfg.max_positions < PLAN_CTX_DEFAULT ? c->cfg.max_positions : PLAN_CTX_DEFAULT;
	return rc;
}

uint64_t plan_container_main_record(const struct plan_container *c)
{
	return c->in.n_classes ? c->in.class_record_bytes[plan_main_class(&c->in)] : c->in.record_bytes_max;
}

void plan_container_free(struct plan_container *c)
{
	for (int i = 0; c->paths && i < c->n_paths; i++)
		free(c->paths[i]);
	free(c->paths);
	free(c->path_layer);
	free(c->path_copy);
	memset(c, 0, sizeof *c);
}
