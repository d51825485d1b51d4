/*
 * cmd_plan — `colibri plan --model DIR [--ram SIZE|min] [--ctx N]
 * [--threads N] [--batch N] [--parallel N] [--draft auto|N] [--io-depth N]
 * [--no-direct] [--probe] [--json] [--hosts FILE [--placement
 * auto|even|W0,W1,..]]`: how the RAM budget is split, which IO depth and
 * thread count a run uses, and the decode speed to expect with its
 * bottleneck (planner/plan.h). The budget's fixed part is sized as
 * session_open sizes it (session_plan_shape), so a run, chat or serve of
 * the same options has the minimum plan states. With --hosts, also which
 * rank of an MPI run serves how many routed experts: the table
 * placement_weights and placement_build give rank 0 of a run from the
 * same disk bandwidths, and each rank's disk, compute and network cost
 * (planner/plan_hosts.h).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compute/kernels.h"
#include "compute/quant.h"
#include "compute/threadpool.h"
#include "engine/cli/cli_alias.h"
#include "engine/cli/cmd.h"
#include "engine/cli/model_cache.h"
#include "engine/forward/forward.h"
#include "engine/model/manifest.h"
#include "engine/decode/generate.h"
#include "engine/decode/session.h"
#include "planner/placement.h"
#include "planner/plan_hosts.h"
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

/* What --hosts adds to the plan: the ranks, the placement a run would
 * build from them, and its cost. */
struct hosts_plan {
	const char *path;
	struct plan_hosts hosts;
	const char *disk_from[PLACEMENT_RANKS_MAX]; /* where each rank's disk_gbps came from */
	char disk_note[PLACEMENT_RANKS_MAX][160];
	double w[PLACEMENT_RANKS_MAX];
	const char *why;
	int n_rows, n_experts;
	uint8_t *owner;                               /* [n_rows * n_experts] */
	uint64_t *holders;                            /* [n_rows * n_experts] with --replicas */
	int replicas;
	uint64_t record_bytes[MODEL_LAYERS_MAX];
	uint64_t fixed_bytes, min_bytes;
	struct plan_hosts_estimate est;
};

static int ram_size(const char *s, uint64_t *bytes)
{
	return session_parse_size(s, bytes);
}

/* Each profiled rank's bandwidth as its own run would see it: the point of
 * its profile that plan_compute picks for this model (frame size, and
 * min(top_k, IO depth) in flight with the depth planned from that profile's
 * knee), which is what session_open hands to the placement. */
static int hosts_disks(struct hosts_plan *hp, const struct plan_container *c, const struct session_options *so)
{
	for (int r = 0; r < hp->hosts.n; r++) {
		struct plan_host *h = &hp->hosts.hosts[r];
		if (!h->profile) {
			hp->disk_from[r] = "given";
			continue;
		}
		struct plan_inputs in = c->in;
		in.disk = h->profile;
		in.disk_gain = 0;
		in.ram_bytes = 0;
		in.ram_min = true;
		in.io_depth = so->io_depth;
		in.buffered = so->buffered;
		struct plan ph;
		if (plan_compute(&ph, &in))
			return error_set(EINVAL, "%s: entry %d: %s", hp->path, r, ph.error);
		const struct disk_point *pt = plan_disk_point(&ph, &in, h->profile);
		h->disk_gbps = ph.disk_known ? ph.disk_gbps : 0;
		hp->disk_from[r] = "profile";
		/* Through a local buffer: the path lives in *hp too, and GCC
		 * (-Werror=restrict at -O1) refuses an overlap it cannot rule out. */
		char blk[32], note[sizeof hp->disk_note[r]];
		if (pt)
			snprintf(note, sizeof note, "%s: %s reads, %d in flight", h->profile_path,
				 plan_bytes_str(blk, pt->block_bytes), pt->depth);
		else
			snprintf(note, sizeof note, "%s has no %s points: unknown", h->profile_path,
				 so->buffered ? "buffered" : "O_DIRECT");
		memcpy(hp->disk_note[r], note, sizeof note);
	}
	return 0;
}

/* The placement of a run over these hosts and what it costs per token. */
static int hosts_plan_build(struct hosts_plan *hp, const struct plan_container *c, const struct plan *p,
			    const struct session_options *so, const struct placement_spec *spec, const char *dir)
{
	int rc = hosts_disks(hp, c, so);
	if (rc)
		return rc;
	const struct model_config *cfg = &c->cfg;
	hp->n_rows = cfg->n_layers + cfg->n_mtp_layers;
	hp->n_experts = cfg->n_experts;
	if (hp->n_rows > MODEL_LAYERS_MAX || hp->n_experts < 1)
		return error_set(EINVAL, "%s: %d layers of %d experts: nothing to place", dir, hp->n_rows, hp->n_experts);
	struct manifest man;
	if ((rc = manifest_load(&man, dir))) {
		manifest_free(&man);
		return rc;
	}
	/* Only the layers that route experts count: the others are dealt
	 * too (placement_build deals every row) but nobody reads them. */
	for (size_t i = 0; i < man.n_expert_layers; i++) {
		int l = man.layers[i].layer;
		if (l >= 0 && l < hp->n_rows && model_config_layer_moe(cfg, l))
			hp->record_bytes[l] = man.layers[i].record_bytes;
	}
	/* What --placement auto weighs besides the disks (the run's
	 * dist_join does the same): every routed record, and each rank's RAM
	 * beyond what every rank holds. */
	uint64_t expert_bytes = 0;
	for (size_t i = 0; i < man.n_expert_layers; i++)
		expert_bytes += man.layers[i].record_bytes * (uint64_t)man.n_experts;
	manifest_free(&man);
	/* Every rank opens the whole session for now: the dense part, the KV
	 * cache and scratch, so each rank's experts get its RAM less that. */
	hp->fixed_bytes = p->resident_bytes + p->kv_bytes + p->scratch_bytes;
	hp->min_bytes = p->min_bytes;
	double gbps[PLACEMENT_RANKS_MAX];
	uint64_t cache[PLACEMENT_RANKS_MAX];
	for (int r = 0; r < hp->hosts.n; r++) {
		uint64_t ram = hp->hosts.hosts[r].ram_bytes;
		gbps[r] = hp->hosts.hosts[r].disk_gbps;
		cache[r] = ram > hp->fixed_bytes ? ram - hp->fixed_bytes : 0;
	}
	if ((rc = placement_weights_ram(spec, hp->hosts.n, gbps, cache, expert_bytes, hp->w, &hp->why))) {
		char why[512];
		snprintf(why, sizeof why, "%s", error_message());
		error_clear();
		return error_set(-rc, "%s lists %d rank%s: %s", hp->path, hp->hosts.n, hp->hosts.n == 1 ? "" : "s", why);
	}
	if (!(hp->owner = malloc((size_t)hp->n_rows * hp->n_experts)))
		return error_set(ENOMEM, "out of memory");
	placement_build(hp->owner, hp->n_rows, hp->n_experts, hp->hosts.n, hp->w);
	hp->replicas = spec->replicas > 1 ? spec->replicas : 1;
	if (hp->replicas > hp->hosts.n)
		return error_set(EINVAL, "--replicas %d: %s lists %d rank%s, and an expert can be held by at most every rank",
				 hp->replicas, hp->path, hp->hosts.n, hp->hosts.n == 1 ? "" : "s");
	if (!(hp->holders = malloc((size_t)hp->n_rows * hp->n_experts * sizeof *hp->holders)))
		return error_set(ENOMEM, "out of memory");
	placement_replicate(hp->holders, hp->owner, hp->n_rows, hp->n_experts, hp->hosts.n, hp->w, hp->replicas);
	double core = p->warm.memory_s > p->warm.compute_s ? p->warm.memory_s : p->warm.compute_s;
	struct plan_hosts_model m = {
		.n_rows = hp->n_rows, .n_experts = hp->n_experts, .top_k = cfg->top_k, .hidden = cfg->hidden,
		.record_bytes = hp->record_bytes, .fixed_bytes = hp->fixed_bytes, .compute_s = core,
	};
	plan_hosts_estimate(&hp->est, &hp->hosts, hp->owner, &m);
	return 0;
}

static const char *ms_str(char buf[32], double s)
{
	if (s < 0)
		snprintf(buf, 32, "unknown");
	else
		snprintf(buf, 32, "%.3f ms", s * 1e3);
	return buf;
}

/* The experts rank r holds (owned and replicas) over the MoE layers, and
 * their records' bytes. */
static void hosts_held(const struct hosts_plan *hp, int r, uint64_t *held, uint64_t *bytes)
{
	*held = *bytes = 0;
	for (int l = 0; l < hp->n_rows; l++)
		for (int e = 0; hp->record_bytes[l] && e < hp->n_experts; e++)
			if (hp->holders[(size_t)l * hp->n_experts + e] >> r & 1) {
				(*held)++;
				*bytes += hp->record_bytes[l];
			}
}

static void hosts_plan_text(FILE *f, const struct hosts_plan *hp)
{
	const struct plan_hosts_estimate *e = &hp->est;
	char a[32], b[32], c[32], d[32], t[32], rd[32];
	int cells = 0;
	for (int r = 0; r < hp->hosts.n; r++)
		cells += e->ranks[r].experts;
	fprintf(f, "\nhosts: %s, %d rank%s; placement: %s\n", hp->path, hp->hosts.n, hp->hosts.n == 1 ? "" : "s",
		hp->why);
	for (int r = 0; r < hp->hosts.n; r++) {
		const struct plan_host *h = &hp->hosts.hosts[r];
		const struct plan_hosts_rank *k = &e->ranks[r];
		char gb[48];
		if (h->disk_gbps > 0)
			snprintf(gb, sizeof gb, "%.2f GB/s", h->disk_gbps);
		else
			snprintf(gb, sizeof gb, "unknown GB/s");
		fprintf(f, "rank %d host %s: %d experts (%.1f%%), %s of experts, %s of them fit its RAM (%s less %s), "
			   "miss %.0f%%; disk %s (%s%s%s) -> %s read, %s per token; placement %s, weight %g%s\n",
			r, h->host, k->experts, cells ? 100.0 * k->experts / cells : 0.0, plan_bytes_str(a, k->expert_bytes),
			plan_bytes_str(b, k->fit_bytes), plan_bytes_str(c, h->ram_bytes), plan_bytes_str(d, hp->fixed_bytes),
			100.0 * k->miss, gb, hp->disk_from[r], hp->disk_note[r][0] ? ", " : "", hp->disk_note[r],
			plan_bytes_str(rd, (uint64_t)(k->disk_bytes_token + 0.5)), ms_str(t, k->disk_s), hp->why, hp->w[r],
			h->ram_bytes < hp->min_bytes ? "; WARNING: ram is below the model's minimum, a run fails" : "");
	}
	fprintf(f, "  (every rank loads the dense part, KV cache and scratch for now: %s of each rank's RAM;\n"
		   "   misses assume uniform routing over the experts of a rank that do not fit its RAM)\n",
		plan_bytes_str(a, hp->fixed_bytes));
	if (hp->hosts.n > 1)
		fprintf(f, "network: %d MoE layers x (RTT %.0f us + hidden row and routing out, %.1f%% of the top-k rows "
			   "back at %.2f GB/s): the slowest link to rank 0\n",
			e->n_moe_layers, e->net.rtt_s * 1e6, 100.0 * e->share_remote, e->net.gbps);
	fprintf(f, "decode: disk %s (rank %d; ranks read in parallel) + compute %s (this machine's plan) + network %s "
		   "= %s per token",
		ms_str(a, e->disk_s), e->slowest, ms_str(b, e->compute_s), ms_str(c, e->net_s), ms_str(d, e->token_s));
	if (e->tok_s > 0)
		fprintf(f, " -> %.1f tok/s\n", e->tok_s);
	else
		fprintf(f, " -> tok/s unknown (a disk without bandwidth, or compute unmeasured)\n");
	fprintf(f, "single host (rank 0 alone, every expert, miss %.0f%%): disk %s + compute %s = %s per token",
		100.0 * e->single_miss, ms_str(a, e->single_disk_s), ms_str(b, e->compute_s),
		ms_str(c, e->single_token_s));
	if (e->single_tok_s > 0)
		fprintf(f, " -> %.1f tok/s\n", e->single_tok_s);
	else
		fprintf(f, " -> tok/s unknown\n");
	if (hp->replicas < 2) {
		fprintf(f, "replication: none (each expert on one rank; a lost rank ends the run; --replicas K keeps "
			   "going)\n");
		return;
	}
	fprintf(f, "replication: %d ranks hold each expert; the owner serves it, and when a rank is lost the other "
		   "holders take its experts over (same results)\n",
		hp->replicas);
	for (int r = 0; r < hp->hosts.n; r++) {
		uint64_t held = 0, bytes = 0;
		hosts_held(hp, r, &held, &bytes);
		fprintf(f, "  rank %d host %s holds %" PRIu64 " experts, %s of records (a shard of rank %d holds just "
			   "these; a full container all)\n",
			r, hp->hosts.hosts[r].host, held, plan_bytes_str(a, bytes), r);
	}
}

static void num_or_null(cJSON *o, const char *k, double v)
{
	if (v < 0)
		cJSON_AddNullToObject(o, k);
	else
		cJSON_AddNumberToObject(o, k, v);
}

/* The "hosts" member of plan --json: the same as hosts_plan_text. */
static cJSON *hosts_plan_json(const struct hosts_plan *hp)
{
	const struct plan_hosts_estimate *e = &hp->est;
	cJSON *j = cJSON_CreateObject(), *ranks = j ? cJSON_AddArrayToObject(j, "ranks") : NULL;
	if (!ranks) {
		cJSON_Delete(j);
		return NULL;
	}
	cJSON_AddStringToObject(j, "file", hp->path);
	cJSON_AddStringToObject(j, "placement", hp->why);
	cJSON_AddNumberToObject(j, "held_by_every_rank_bytes", (double)hp->fixed_bytes);
	cJSON_AddNumberToObject(j, "min_bytes", (double)hp->min_bytes);
	for (int r = 0; r < hp->hosts.n; r++) {
		const struct plan_host *h = &hp->hosts.hosts[r];
		const struct plan_hosts_rank *k = &e->ranks[r];
		cJSON *o = cJSON_CreateObject();
		if (!o || !cJSON_AddItemToArray(ranks, o)) {
			cJSON_Delete(o);
			cJSON_Delete(j);
			return NULL;
		}
		cJSON_AddNumberToObject(o, "rank", r);
		cJSON_AddStringToObject(o, "host", h->host);
		cJSON_AddNumberToObject(o, "weight", hp->w[r]);
		cJSON_AddNumberToObject(o, "experts", k->experts);
		cJSON_AddNumberToObject(o, "expert_bytes", (double)k->expert_bytes);
		cJSON_AddNumberToObject(o, "ram_bytes", (double)h->ram_bytes);
		cJSON_AddNumberToObject(o, "fit_bytes", (double)k->fit_bytes);
		cJSON_AddNumberToObject(o, "miss_rate", k->miss);
		num_or_null(o, "disk_gbps", h->disk_gbps > 0 ? h->disk_gbps : -1);
		cJSON_AddStringToObject(o, "disk_source", hp->disk_from[r]);
		cJSON_AddNumberToObject(o, "disk_bytes_per_token", k->disk_bytes_token);
		num_or_null(o, "disk_s_per_token", k->disk_s);
	}
	cJSON *t = cJSON_AddObjectToObject(j, "per_token"), *s = cJSON_AddObjectToObject(j, "single_host");
	if (!t || !s) {
		cJSON_Delete(j);
		return NULL;
	}
	num_or_null(t, "disk_s", e->disk_s);
	num_or_null(t, "compute_s", e->compute_s);
	cJSON_AddNumberToObject(t, "network_s", e->net_s);
	num_or_null(t, "total_s", e->token_s);
	num_or_null(t, "tok_s", e->tok_s);
	cJSON_AddNumberToObject(t, "share_remote", e->share_remote);
	cJSON_AddNumberToObject(t, "rtt_s", e->net.rtt_s);
	cJSON_AddNumberToObject(t, "net_gbps", e->net.gbps);
	cJSON_AddNumberToObject(s, "miss_rate", e->single_miss);
	num_or_null(s, "disk_s", e->single_disk_s);
	num_or_null(s, "total_s", e->single_token_s);
	num_or_null(s, "tok_s", e->single_tok_s);
	cJSON *rep = cJSON_AddObjectToObject(j, "replication"), *held = rep ? cJSON_AddArrayToObject(rep, "ranks") : NULL;
	if (!held) {
		cJSON_Delete(j);
		return NULL;
	}
	cJSON_AddNumberToObject(rep, "replicas", hp->replicas);
	for (int r = 0; r < hp->hosts.n; r++) {
		uint64_t n = 0, bytes = 0;
		hosts_held(hp, r, &n, &bytes);
		cJSON *o = cJSON_CreateObject();
		if (!o || !cJSON_AddItemToArray(held, o)) {
			cJSON_Delete(o);
			cJSON_Delete(j);
			return NULL;
		}
		cJSON_AddNumberToObject(o, "rank", r);
		cJSON_AddNumberToObject(o, "experts_held", (double)n);
		cJSON_AddNumberToObject(o, "bytes_held", (double)bytes);
	}
	return j;
}

static void plan_usage(FILE *f)
{
	fprintf(f, "usage: colibri plan --model DIR [--ram SIZE|min] [--ctx N] [--threads N] [--batch N]\n"
		   "                    [--parallel N] [--draft auto|N] [--io-depth N] [--no-direct] [--probe]\n"
		   "                    [--json] [--hosts FILE [--placement auto|even|W0,W1,..] [--replicas K]]\n"
		   "  Shows how the RAM budget is split (resident weights, KV cache, scratch, expert cache),\n"
		   "  the IO depth and threads a run uses, the disks and their measured bandwidth, and the\n"
		   "  expected cold and warm decode speed with its bottleneck. --ctx defaults to %d positions\n"
		   "  (at most the model's). The minimum is the one run, chat and serve take with the same\n"
		   "  --ctx, --batch, --threads and --draft (run's --ctx defaults to the prompt + -n); --parallel N\n"
		   "  sizes it for serve's N sequences. --probe measures the disk for 2 s when it has no saved profile.\n"
		   "  --json prints the same as the schema of docs/PLAN.md.\n"
		   "  --hosts FILE: the ranks of an MPI run, a JSON array in rank order of\n"
		   "    {\"host\":\"a\", \"ram\":\"16G\", \"disk_gbps\":3.2 or \"profile\":\"disks.json\" [, \"disk\":KEY],\n"
		   "     \"net_gbps\":%.2f, \"rtt_us\":%.0f}: prints which rank serves how many experts\n"
		   "    (--placement auto|even|W0,W1,.. as for run, default auto) and the expected\n"
		   "    tok/s from disk, compute and network, next to rank 0 alone; --replicas K: what each\n"
		   "    rank holds when K ranks hold every expert.\n",
		PLAN_CTX_DEFAULT, PLAN_HOST_NET_GBPS_DEFAULT, PLAN_HOST_RTT_US_DEFAULT);
}

/* --draft auto|N as run takes it: the drafts change the logits rows a run holds. */
static int plan_draft(struct generate_options *go, const char *arg)
{
	if (strcmp(arg, "auto") == 0) {
		go->draft = -1;
		return 0;
	}
	if (session_parse_int("draft", arg, 0, 16, &go->draft) == 0)
		return 0;
	error_clear();
	return error_set(EINVAL, "--draft takes auto or a number of drafts 0..16, not \"%s\"", arg);
}

enum { PLAN_OPT_JSON = 3000, PLAN_OPT_PROBE, PLAN_OPT_HOSTS, PLAN_OPT_PLACEMENT, PLAN_OPT_PARALLEL, PLAN_OPT_DRAFT };

int cmd_plan(int argc, char **argv)
{
	struct session_options so;
	session_options_default(&so);
	so.io_depth = 0;
	bool json = false, probe = false;
	const char *placement = NULL;
	/* What the session would hold: run's logits rows (its --draft), or
	 * with --parallel serve's sequences and rows, as cmd_serve sets them. */
	struct generate_options go;
	generate_options_default(&go, NULL);
	int parallel = 0;
	struct hosts_plan *hp = NULL;
	/* Ours first, so that they win over a session option of the same name. */
	static const struct option opts[] = {
		{ "json", no_argument, 0, PLAN_OPT_JSON },
		{ "probe", no_argument, 0, PLAN_OPT_PROBE },
		{ "hosts", required_argument, 0, PLAN_OPT_HOSTS },
		{ "placement", required_argument, 0, PLAN_OPT_PLACEMENT },
		{ "parallel", required_argument, 0, PLAN_OPT_PARALLEL },
		{ "draft", required_argument, 0, PLAN_OPT_DRAFT },
		{ "help", no_argument, 0, 'h' },
		SESSION_LONG_OPTIONS,
		{ 0, 0, 0, 0 },
	};
	const char *hosts_path = NULL;
	int ch, rc = 0;
	if (cli_alias_apply("plan", &argc, &argv, "h", opts))
		return 2;
	optind = 1;
	while (!rc && (ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (ch == PLAN_OPT_JSON)
			json = true;
		else if (ch == PLAN_OPT_PROBE)
			probe = true;
		else if (ch == PLAN_OPT_HOSTS)
			hosts_path = optarg;
		else if (ch == PLAN_OPT_PLACEMENT)
			placement = optarg;
		else if (ch == PLAN_OPT_PARALLEL)
			rc = session_parse_int("parallel", optarg, 1, 256, &parallel);
		else if (ch == PLAN_OPT_DRAFT)
			rc = plan_draft(&go, optarg);
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
	if (model_cache_use(&so.model_dir))
		return cmd_fail("no model");
	struct placement_spec spec = { .replicas = so.placement.replicas };
	if ((placement || so.placement.replicas) && !hosts_path) {
		fprintf(stderr, "colibri: plan: --%s needs --hosts FILE (the ranks it places over)\n",
			placement ? "placement" : "replicas");
		return 2;
	}
	if ((rc = placement_spec_parse(&spec, placement ? placement : "auto")))
		return cmd_fail("bad --placement");
	if (hosts_path) {
		if (!(hp = calloc(1, sizeof *hp)))
			return cmd_fail("out of memory");
		hp->path = hosts_path;
		if ((rc = plan_hosts_load(&hp->hosts, hosts_path, ram_size))) {
			plan_hosts_free(&hp->hosts);
			free(hp);
			return cmd_fail("bad hosts file");
		}
	}
	struct plan_container c;
	struct plan_machine *m = calloc(1, sizeof *m);
	struct plan p;
	if (!m)
		return cmd_fail("out of memory");
	if (parallel) {
		so.parallel = parallel;
		so.logits_rows = parallel + 1;
	} else {
		so.logits_rows = generate_logits_rows(&go);
	}
	struct plan_shape shape = session_plan_shape(&so, so.ctx);
	if ((rc = plan_container_load_shape(&c, so.model_dir, &shape)))
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
	if (hp && (rc = hosts_plan_build(hp, &c, &p, &so, &spec, so.model_dir)))
		goto out;
	struct plan_model_info mi = { .dir = so.model_dir, .model_type = c.cfg.model_type,
				      .n_layers = c.cfg.n_layers, .expert_quant = c.expert_quant };
	if (json) {
		cJSON *j = plan_report_json(&p, &c.in, m, &mi), *hj = j && hp ? hosts_plan_json(hp) : NULL;
		if (hj && !cJSON_AddItemToObject(j, "hosts", hj)) {
			cJSON_Delete(hj);
			hj = NULL;
		}
		char *text = j && (!hp || hj) ? cJSON_Print(j) : NULL;
		if (!text)
			rc = error_set(ENOMEM, "out of memory");
		else
			printf("%s\n", text);
		cJSON_free(text);
		cJSON_Delete(j);
	} else {
		plan_report_text(stdout, &p, &c.in, m, &mi);
		if (hp)
			hosts_plan_text(stdout, hp);
	}
out:
	plan_container_free(&c);
	free(m);
	if (hp) {
		plan_hosts_free(&hp->hosts);
		free(hp->owner);
		free(hp->holders);
		free(hp);
	}
	return rc ? cmd_fail("plan failed") : 0;
}
