/*
 * cmd_plan — `colibri plan --model DIR [--ram SIZE|min] [--ctx N]
 * [--threads N] [--batch N] [--io-depth N] [--no-direct] [--probe] [--json]`: how the
 * RAM budget is split, which IO depth and thread count a run uses, and the
 * decode speed to expect with its bottleneck (planner/plan.h).
 *
 * Also the bridge from a container to the planner's plain numbers
 * (plan_container_load), shared with doctor and with session.c.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compute/kernels.h"
#include "compute/quant.h"
#include "compute/threadpool.h"
#include "engine/cmd.h"
#include "engine/forward.h"
#include "engine/manifest.h"
#include "engine/session.h"
#include "planner/plan_report.h"
#include "planner/topology.h"
#include "storage/error.h"

/* Appends dir/file as a copy of expert layer index `layer`; a mirror copy
 * only when the file exists. */
static int add_path(struct plan_container *c, const char *dir, const char *file, int layer)
{
	size_t len = strlen(dir) + strlen(file) + 2;
	char *p = malloc(len);
	if (!p)
		return error_set(ENOMEM, "out of memory");
	snprintf(p, len, "%s/%s", dir, file);
	if (c->n_primary && access(p, R_OK) != 0) {
		free(p);
		return 0;
	}
	c->paths[c->n_paths] = p;
	c->path_layer[c->n_paths++] = layer;
	return 0;
}

/* Counts one MoE layer of record_bytes in its frame class (the sizes kept
 * ascending, as the expert store orders its classes). */
static int class_add(struct plan_inputs *in, uint64_t record_bytes)
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
		}
		in->class_record_bytes[k] = record_bytes;
		in->class_layers[k] = 0;
		in->n_classes++;
	}
	in->class_layers[k]++;
	return 0;
}

int plan_container_load(struct plan_container *c, const char *dir, int ctx, int batch, int threads)
{
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
	if (embed && manifest_find(&man, "lm_head.weight") && embed->bytes < man.resident_bytes)
		in->token_dense_bytes -= embed->bytes;
	in->n_moe_layers = (int32_t)man.n_expert_layers;
	in->n_experts = man.n_experts;
	in->top_k = c->cfg.top_k;
	size_t cap = man.n_expert_layers * (1 + man.n_mirrors) + 1;
	c->paths = calloc(cap, sizeof *c->paths);
	c->path_layer = calloc(cap, sizeof *c->path_layer);
	if (!c->paths || !c->path_layer)
		rc = error_set(ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < man.n_expert_layers; i++) {
		const struct manifest_expert_layer *l = &man.layers[i];
		in->record_bytes_max = l->record_bytes > in->record_bytes_max ? l->record_bytes : in->record_bytes_max;
		in->record_bytes_sum += l->record_bytes;
		rc = rc ? rc : class_add(in, l->record_bytes);
		rc = rc ? rc : add_path(c, dir, l->file, (int)i);
	}
	c->n_primary = c->n_paths;
	/* Mirror copies that are there; a missing mirror is out of rotation. */
	for (size_t k = 0; !rc && k < man.n_mirrors; k++)
		for (size_t i = 0; !rc && i < man.n_expert_layers; i++)
			if (manifest_mirror_has(&man.mirrors[k], man.layers[i].layer))
				rc = add_path(c, man.mirrors[k].dir, man.layers[i].file, (int)i);
	manifest_free(&man);
	/* The forward pass's buffers grow linearly with the context: the KV
	 * cache (MLA latents for DeepSeek-style attention) and a score row per
	 * thread. Two sizes give the slope and the constant, exactly as
	 * forward_init allocates them. */
	int t = threads > 0 ? threads : topology_physical_cores();
	int bt = batch > 0 ? batch : PLAN_BATCH_DEFAULT;
	uint64_t f1 = forward_bytes(&c->cfg, 1, bt, t), f2 = forward_bytes(&c->cfg, 2, bt, t);
	in->kv_bytes_per_position = f2 - f1;
	if (c->cfg.dsa)
		in->kv_what = "MLA latent and rope key, and the DSA indexer's key, of every layer; score rows";
	else if (c->cfg.attn == ATTN_MLA)
		in->kv_what = "MLA latent and rope key of every layer; score rows";
	in->scratch_bytes = (f1 - in->kv_bytes_per_position) + PLAN_OUTPUT_ROWS * (uint64_t)c->cfg.vocab * sizeof(float) +
			    PLAN_RESERVE_BYTES;
	in->ctx = ctx > 0 ? ctx : c->cfg.max_positions < PLAN_CTX_DEFAULT ? c->cfg.max_positions : PLAN_CTX_DEFAULT;
	return rc;
}

uint64_t plan_container_main_record(const struct plan_container *c)
{
	int best = 0;
	for (int k = 1; k < c->in.n_classes; k++)
		if (c->in.class_layers[k] > c->in.class_layers[best])
			best = k; /* ascending sizes: a tie keeps the smaller */
	return c->in.n_classes ? c->in.class_record_bytes[best] : c->in.record_bytes_max;
}

void plan_container_free(struct plan_container *c)
{
	for (int i = 0; c->paths && i < c->n_paths; i++)
		free(c->paths[i]);
	free(c->paths);
	free(c->path_layer);
	memset(c, 0, sizeof *c);
}

struct compute_probe {
	struct qmatrix m;
	const float *x;
	float *out;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Weight bytes per second that matvec consumes with `threads` threads on
 * a cache-resident matrix of the expert type (about 2 MiB): the compute
 * ceiling, apart from memory. Saved per machine, type and thread count. */
static int measure_compute(struct plan_machine *m, enum quant_type type, int threads)
{
	char name[64];
	snprintf(name, sizeof name, "compute_%s_t%d_gbps", quant_type_name(type), threads);
	snprintf(m->compute_what, sizeof m->compute_what, "%s matvec, %d threads, cache-resident",
		 quant_type_name(type), threads);
	if (profile_machine_get(name, &m->compute_gbps) == 0) {
		m->compute_source = PLAN_SOURCE_SAVED;
		return 0;
	}
	const int64_t cols = 4096;
	int32_t group = type == QUANT_INT4 || type == QUANT_INT8 ? QUANT_GROUP_DEFAULT : 0;
	int64_t rows = (int64_t)((2u << 20) / (quant_matrix_bytes(type, 1, cols, group)));
	uint64_t bytes = quant_matrix_bytes(type, rows, cols, group);
	float *src = malloc((size_t)(rows * cols) * sizeof *src), *x = malloc((size_t)cols * sizeof *x);
	float *out = malloc((size_t)rows * sizeof *out);
	void *w = aligned_alloc(64, (bytes + 63) / 64 * 64);
	struct threadpool *pool = NULL;
	int rc = !src || !x || !out || !w ? -ENOMEM : threadpool_init(&pool, threads);
	if (!rc) {
		uint64_t s = 1;
		for (int64_t i = 0; i < rows * cols; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			src[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
		}
		for (int64_t i = 0; i < cols; i++)
			x[i] = src[i];
		quant_matrix_quantize(w, src, type, rows, cols, group);
		struct qmatrix qm;
		quant_matrix_view(&qm, w, type, rows, cols, group);
		matvec(pool, out, &qm, x);
		double t0 = now_s(), t = t0;
		uint64_t iters = 0;
		while (t - t0 < 0.1) {
			for (int k = 0; k < 8; k++)
				matvec(pool, out, &qm, x);
			iters += 8;
			t = now_s();
		}
		m->compute_gbps = (double)bytes * (double)iters / (t - t0) / 1e9;
		m->compute_source = PLAN_SOURCE_MEASURED;
		profile_machine_put(name, m->compute_gbps);
	}
	if (pool)
		threadpool_free(pool);
	free(w);
	free(out);
	free(x);
	free(src);
	return rc;
}

static void plan_usage(FILE *f)
{
	fprintf(f, "usage: colibri plan --model DIR [--ram SIZE|min] [--ctx N] [--threads N] [--batch N]\n"
		   "                    [--io-depth N] [--no-direct] [--probe] [--json]\n"
		   "  Shows how the RAM budget is split (resident weights, KV cache, scratch, expert cache),\n"
		   "  the IO depth and threads a run uses, the disks and their measured bandwidth, and the\n"
		   "  expected cold and warm decode speed with its bottleneck. --ctx defaults to %d positions\n"
		   "  (at most the model's). --probe measures the disk for 2 s when it has no saved profile.\n"
		   "  --json prints the same as the schema of docs/PLAN.md.\n",
		PLAN_CTX_DEFAULT);
}

enum { PLAN_OPT_JSON = 3000, PLAN_OPT_PROBE };

int cmd_plan(int argc, char **argv)
{
	struct session_options so;
	session_options_default(&so);
	so.io_depth = 0;
	bool json = false, probe = false;
	static const struct option opts[] = {
		SESSION_LONG_OPTIONS,
		{ "json", no_argument, 0, PLAN_OPT_JSON }, { "probe", no_argument, 0, PLAN_OPT_PROBE },
		{ "help", no_argument, 0, 'h' },           { 0, 0, 0, 0 },
	};
	int ch, rc = 0;
	optind = 1;
	while (!rc && (ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (ch == PLAN_OPT_JSON)
			json = true;
		else if (ch == PLAN_OPT_PROBE)
			probe = true;
		else if (ch == 'h' || (rc = session_option(&so, ch, optarg)) == -ENOENT) {
			plan_usage(ch == 'h' ? stdout : stderr);
			return ch == 'h' ? 0 : 2;
		}
	}
	if (rc)
		return cmd_fail("bad option");
	if (!so.model_dir || optind != argc) {
		plan_usage(stderr);
		return 2;
	}
	struct plan_container c;
	struct plan_machine *m = calloc(1, sizeof *m);
	struct plan p;
	if (!m)
		return cmd_fail("out of memory");
	if ((rc = plan_container_load(&c, so.model_dir, so.ctx, so.batch, so.threads)))
		goto out;
	if ((rc = plan_machine_discover(m, (const char *const *)c.paths, c.n_paths, PLAN_MEASURE_MEMBW))) {
		rc = error_set(-rc, "%s: cannot find the disk of the expert files: %s", so.model_dir, strerror(-rc));
		goto out;
	}
	if (probe && !plan_machine_disk(m) && c.n_paths) {
		char err[512];
		fprintf(stderr, "colibri: no disk profile; probing for 2 s at the expert record size\n");
		if ((rc = plan_machine_probe(m, (const char *const *)c.paths, c.n_paths, plan_container_main_record(&c),
					     c.in.top_k, 2.0, so.buffered, err, sizeof err))) {
			rc = error_set(-rc, "disk probe failed: %s", err);
			goto out;
		}
	}
	c.in.ram_bytes = so.ram_bytes;
	c.in.ram_min = so.ram_min;
	c.in.threads = so.threads;
	c.in.io_depth = so.io_depth;
	c.in.buffered = so.buffered;
	/* Without it the estimate still stands on memory bandwidth alone. */
	(void)measure_compute(m, c.expert_type, so.threads > 0 ? so.threads : m->topo.physical_cores);
	plan_inputs_machine(&c.in, m);
	c.in.disk_gain = plan_machine_mirror_gain(m, (const char *const *)c.paths, c.path_layer, c.n_paths, c.n_primary,
						  c.in.n_moe_layers, plan_container_main_record(&c), c.in.top_k, so.buffered);
	if ((rc = plan_compute(&p, &c.in))) {
		rc = error_set(-rc, "%s", p.error);
		goto out;
	}
	struct plan_model_info mi = { .dir = so.model_dir, .model_type = c.cfg.model_type,
				      .n_layers = c.cfg.n_layers, .expert_quant = c.expert_quant };
	if (json) {
		cJSON *j = plan_report_json(&p, &c.in, m, &mi);
		char *text = j ? cJSON_Print(j) : NULL;
		if (!text)
			rc = error_set(ENOMEM, "out of memory");
		else
			printf("%s\n", text);
		cJSON_free(text);
		cJSON_Delete(j);
	} else {
		plan_report_text(stdout, &p, &c.in, m, &mi);
	}
out:
	plan_container_free(&c);
	free(m);
	return rc ? cmd_fail("plan failed") : 0;
}
