/*
 * cmd_plan — `colibri plan --model DIR [--ram SIZE|min] [--ctx N]
 * [--threads N] [--batch N] [--io-depth N] [--no-direct] [--probe] [--json]`: how the
 * RAM budget is split, which IO depth and thread count a run uses, and the
 * decode speed to expect with its bottleneck (planner/plan.h).

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
#include "engine/cli/cmd.h"
#include "engine/forward/forward.h"
#include "engine/model/manifest.h"
#include "engine/decode/session.h"
#include "planner/plan_report.h"
#include "planner/topology.h"
#include "base/error.h"
#include "base/clock.h"

struct compute_probe {
	struct qmatrix m;
	const float *x;
	float *out;
};

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
		/* The GGML block types cannot be made from f32; their kernels'
		 * speed does not depend on the values, so any bytes whose halves
		 * are normal numbers (0x1111) will do. */
		if (quant_type_quantizable(type))
			quant_matrix_quantize(w, src, type, rows, cols, group);
		else
			memset(w, 0x11, bytes);
		struct qmatrix qm;
		quant_matrix_view(&qm, w, type, rows, cols, group);
		matvec(pool, out, &qm, x);
		double t0 = clock_now_s(), t = t0;
		uint64_t iters = 0;
		while (t - t0 < 0.1) {
			for (int k = 0; k < 8; k++)
				matvec(pool, out, &qm, x);
			iters += 8;
			t = clock_now_s();
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
	if ((rc = plan_container_load(&c, so.model_dir, so.ctx, so.batch, so.threads, so.parallel)))
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
	plan_print_overrides(&p, stderr);
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
