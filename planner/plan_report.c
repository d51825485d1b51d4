/*
 * plan_report — see plan_report.h. Every number printed comes from the plan
 * or the machine; nothing is recomputed here except unit conversions.
 */
#include "planner/plan_report.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

const char *plan_bytes_str(char buf[32], uint64_t b)
{
	if (b >= (1ull << 30))
		snprintf(buf, 32, "%.2f GiB", (double)b / GIB);
	else if (b >= (1ull << 20))
		snprintf(buf, 32, "%.1f MiB", (double)b / (1 << 20));
	else if (b >= (1ull << 10))
		snprintf(buf, 32, "%.1f KiB", (double)b / (1 << 10));
	else
		snprintf(buf, 32, "%" PRIu64 " B", b);
	return buf;
}

/* plan_bytes_str rounded up at its last printed digit, for a figure a user
 * copies back as --ram: 104.04 MiB prints 104.1, which is accepted, where
 * 104.0 would be refused as below the minimum. */
static const char *bytes_str_up(char buf[32], uint64_t b)
{
	uint64_t unit = b >= (1ull << 30) ? (1ull << 30) : b >= (1ull << 20) ? (1ull << 20) : (1ull << 10);
	int digits = unit == (1ull << 30) ? 2 : 1;
	uint64_t scale = digits == 2 ? 100 : 10;
	if (b < (1ull << 10) || b > UINT64_MAX / scale)
		return plan_bytes_str(buf, b);
	uint64_t n = (b * scale + unit - 1) / unit; /* the figure x scale, rounded up */
	snprintf(buf, 32, "%" PRIu64 ".%0*" PRIu64 " %s", n / scale, digits, n % scale,
		 unit == (1ull << 30) ? "GiB" : unit == (1ull << 20) ? "MiB" : "KiB");
	return buf;
}

static void row(FILE *f, const char *label, const char *value, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void row(FILE *f, const char *label, const char *value, const char *fmt, ...)
{
	va_list ap;
	fprintf(f, "%-17s %-14s ", label, value);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
}

static const char *ms_str(char buf[32], double s)
{
	if (s < 0)
		snprintf(buf, 32, "unknown");
	else
		snprintf(buf, 32, "%.2f ms", s * 1e3);
	return buf;
}

static const char *toks_str(char buf[32], double tok_s)
{
	if (tok_s < 0)
		snprintf(buf, 32, "unknown");
	else
		snprintf(buf, 32, "%.2f tok/s", tok_s);
	return buf;
}

static void text_budget(FILE *f, const struct plan *p, const struct plan_inputs *in)
{
	char v[32], a[32], b[32];
	switch (p->budget_source) {
	case PLAN_BUDGET_EXPLICIT:
		row(f, "budget", plan_bytes_str(v, p->budget_bytes), "--ram, as given");
		break;
	case PLAN_BUDGET_MIN:
		row(f, "budget", bytes_str_up(v, p->budget_bytes), "--ram min: the smallest budget that runs");
		break;
	case PLAN_BUDGET_DEFAULT:
		row(f, "budget", plan_bytes_str(v, p->budget_bytes),
		    "%.0f%% of the %s of memory available (cgroup limits included), at most what caching every "
		    "expert needs; --ram sets it", PLAN_RAM_DEFAULT_FRACTION * 100,
		    plan_bytes_str(a, (uint64_t)(in->available_memory_bytes > 0 ? in->available_memory_bytes : 0)));
		break;
	case PLAN_BUDGET_DEFAULT_LOW:
		row(f, "budget", plan_bytes_str(v, p->budget_bytes),
		    "the minimum: only %s of memory is available, below it; expect swapping",
		    plan_bytes_str(a, (uint64_t)(in->available_memory_bytes > 0 ? in->available_memory_bytes : 0)));
		break;
	}
	if (in->embed_disk_bytes)
		row(f, "  resident", plan_bytes_str(v, p->resident_bytes),
		    "dense weights (attention, norms, routers, output head) in RAM; the embedding table (%s) stays on "
		    "disk, a row read per token", plan_bytes_str(a, in->embed_disk_bytes));
	else
		row(f, "  resident", plan_bytes_str(v, p->resident_bytes),
		    "dense weights (embeddings, attention, norms, routers), read whole into RAM");
	const char *what = in->kv_what ? in->kv_what : "K and V of every layer, attention score rows";
	if (in->state_fixed_bytes) {
		char s[32];
		row(f, "  kv cache", plan_bytes_str(v, p->kv_bytes),
		    "%d positions x %s (%s) + %s of fixed state (recurrent, sliding-window keys, open windows; "
		    "with its snapshot and checkpoint)",
		    in->ctx, plan_bytes_str(a, in->kv_bytes_per_position), what, plan_bytes_str(s, in->state_fixed_bytes));
	} else {
		row(f, "  kv cache", plan_bytes_str(v, p->kv_bytes), "%d positions x %s (%s)", in->ctx,
		    plan_bytes_str(a, in->kv_bytes_per_position), what);
	}
	const struct plan_scratch *sc = &in->scratch;
	if (sc->batch) {
		char t[32], r[32];
		row(f, "  scratch", plan_bytes_str(v, p->scratch_bytes),
		    "forward buffers %s (batch %d, %d threads) + %d logits rows %s + tokenizer %s (%dx its files) + "
		    "reserve %s (the binary, libraries, stacks, io rings)", plan_bytes_str(a, sc->forward_bytes),
		    sc->batch, sc->threads, sc->logits_rows, plan_bytes_str(b, sc->logits_bytes),
		    plan_bytes_str(t, sc->tokenizer_bytes), PLAN_TOKENIZER_FACTOR, plan_bytes_str(r, sc->reserve_bytes));
	} else {
		row(f, "  scratch", plan_bytes_str(v, p->scratch_bytes),
		    "activations and buffers of the forward pass, logits, a reserve for stacks and rings");
	}
	if (p->n_classes <= 1) {
		row(f, "  expert cache", plan_bytes_str(v, p->expert_cache_bytes),
		    "%" PRIu64 " frames of %s, %.1f per MoE layer of %d experts%s", p->frames,
		    plan_bytes_str(a, p->frame_bytes), p->frames_per_layer, in->n_experts,
		    p->frames == p->frames_all ? " (every expert fits)" : "");
	} else {
		row(f, "  expert cache", plan_bytes_str(v, p->expert_cache_bytes),
		    "%" PRIu64 " frames in %d classes by record size: top_k frames for each class, the rest to the "
		    "main one (most layers) first%s", p->frames, p->n_classes,
		    p->frames == p->frames_all ? " (every expert fits)" : "");
		for (int c = 0; c < p->n_classes; c++) {
			const struct plan_class *pc = &p->classes[c];
			row(f, "    class", plan_bytes_str(v, pc->frames * pc->frame_bytes),
			    "%" PRIu64 " frames of %s for %d MoE layer(s), %.1f per layer of %d experts%s", pc->frames,
			    plan_bytes_str(a, pc->frame_bytes), pc->layers, (double)pc->frames / pc->layers, in->n_experts,
			    c == p->main_class ? " (main)" : "");
		}
	}
	if (p->slack_bytes)
		row(f, "  slack", plan_bytes_str(v, p->slack_bytes), "left over: less than one frame");
	if (p->unused_bytes)
		row(f, "  unused", plan_bytes_str(v, p->unused_bytes), "beyond what caching every expert needs");
	/* In whole MiB rounded up, as the refusal states it: the number a
	 * reader passes back, and the bytes that are the exact line. */
	snprintf(v, sizeof v, "%" PRIu64 " MiB", (p->min_bytes + (1u << 20) - 1) >> 20);
	row(f, "minimum", v,
	    "%" PRIu64 " bytes (--ram %" PRIu64 "B): resident + KV + scratch + one token's %d experts%s (%s); a "
	    "smaller --ram is refused", p->min_bytes, p->min_bytes, in->top_k,
	    p->n_classes > 1 ? " in frames of every class" : "",
	    plan_bytes_str(b, p->min_bytes - p->resident_bytes - p->kv_bytes - p->scratch_bytes));
	row(f, "every expert", plan_bytes_str(v, p->full_bytes), "the budget that caches all %" PRIu64 " experts",
	    p->frames_all);
}

static void text_machine(FILE *f, const struct plan *p, const struct plan_inputs *in, const struct plan_machine *m,
			 const char *dir)
{
	char v[32], a[32], b[32];
	const struct topology *t = &m->topo;
	snprintf(v, sizeof v, "%d", p->threads);
	row(f, "threads", v, p->threads == p->threads_planned ? "the physical cores (hwloc); --threads overrides"
							     : "--threads (the plan: %d physical cores)",
	    p->threads_planned);
	snprintf(v, sizeof v, "%d", p->io_depth);
	if (p->io_depth != p->io_depth_planned)
		row(f, "io depth", v, "--io-depth (the plan: %d)", p->io_depth_planned);
	else if (p->io_depth_measured)
		row(f, "io depth", v, "expert reads in flight at most: the least depth within %.0f%% of the disk's best "
				      "at this block size, at least top_k", PLAN_KNEE_FRACTION * 100);
	else
		row(f, "io depth", v, "expert reads in flight at most: the default without a disk profile");
	for (int i = 0; i < m->n_disks; i++) {
		const struct plan_disk *d = &m->disks[i];
		const struct blockdev *dev = &d->profile.dev;
		char who[200];
		snprintf(who, sizeof who, "%s%s%s%s%s", dev->name[0] ? dev->name : dev->key, dev->model[0] ? " " : "",
			 dev->model, dev->serial[0] ? " serial " : "", dev->serial);
		if (!d->profiled) {
			row(f, "disk", "no profile", "%s holds %d expert file(s), %s; measure it with `colibri iobench %s` "
			    "(or `colibri plan --probe`)", who, d->n_files, plan_bytes_str(a, d->bytes), dir);
			continue;
		}
		const struct disk_point *pt = plan_disk_point(p, in, &d->profile);
		snprintf(v, sizeof v, pt ? "%.2f GB/s" : "no points", pt ? pt->gbps : 0);
		if (pt)
			row(f, "disk", v, "%s, %d expert file(s): random %s reads, %d in flight%s (profile of %s)", who,
			    d->n_files, plan_bytes_str(b, pt->block_bytes), pt->depth, pt->buffered ? ", buffered" : "",
			    pt->measured[0] ? pt->measured : "unknown date");
		else
			row(f, "disk", v, "%s: the profile has no %s points; run `colibri iobench`", who,
			    in->buffered ? "buffered" : "O_DIRECT");
	}
	if (p->disk_gain > 1.0001) {
		snprintf(v, sizeof v, "x %.2f", p->disk_gain);
		row(f, "mirrors", v, "reads of a layer are striped over every disk holding a copy, by bandwidth: %.2f GB/s "
				     "in all", p->disk_gbps);
	}
	if (m->membw_gbps > 0) {
		snprintf(v, sizeof v, "%.1f GB/s", m->membw_gbps);
		row(f, "memory", v, "streaming read of %s with %d threads (%s)", plan_bytes_str(a, m->membw_buffer_bytes),
		    t->physical_cores, m->membw_source == PLAN_SOURCE_MEASURED ? "measured now, saved" : "saved profile");
	} else {
		row(f, "memory", "unknown", "memory bandwidth not measured");
	}
	if (m->compute_gbps > 0) {
		snprintf(v, sizeof v, "%.1f GB/s", m->compute_gbps);
		row(f, "compute", v, "weight bytes per second through the kernels: %s (%s)", m->compute_what,
		    m->compute_source == PLAN_SOURCE_MEASURED ? "measured now, saved" : "saved profile");
	} else {
		row(f, "compute", "unknown", "kernel throughput not measured");
	}
	snprintf(v, sizeof v, "%d cores", t->physical_cores);
	row(f, "cpu", v, "%s, %d logical CPUs, %d NUMA node(s) (local node %d), L2 %s, L3 %s x %d",
	    t->cpu_model[0] ? t->cpu_model : "unknown model", t->logical_cpus, t->numa_nodes, t->local_node,
	    plan_bytes_str(a, t->l2_bytes), plan_bytes_str(b, t->l3_bytes), t->l3_instances);
}

static void text_estimate(FILE *f, const struct plan *p, const struct plan_inputs *in, const char *dir)
{
	char v[32], a[32], b[32], c[32];
	row(f, "token, cold", plan_bytes_str(v, p->disk_bytes_cold),
	    "from disk: %d experts x %d MoE layers of their records, nothing cached yet", in->top_k, in->n_moe_layers);
	snprintf(v, sizeof v, "%.1f%%", p->hit_rate_warm * 100);
	row(f, "warm hit rate", v, "cached experts per layer / experts per layer: the hit rate if routing were "
				   "uniform; real routing is skewed, so usually higher (see run --stats)");
	row(f, "token, warm", plan_bytes_str(v, p->disk_bytes_warm), "from disk: the cold bytes x (1 - hit rate)");
	row(f, "token, memory", plan_bytes_str(v, p->memory_bytes),
	    "read from RAM: dense weights a token uses + its experts + the KV cache at %d positions", in->ctx);
	row(f, "decode, cold", toks_str(v, p->cold.tok_s),
	    "1 / (disk %s + max(memory %s, compute %s)): reads wait for each layer's router", ms_str(a, p->cold.disk_s),
	    ms_str(b, p->cold.memory_s), ms_str(c, p->cold.compute_s));
	row(f, "decode, warm", toks_str(v, p->warm.tok_s), "1 / (disk %s + max(memory %s, compute %s))",
	    ms_str(a, p->warm.disk_s), ms_str(b, p->warm.memory_s), ms_str(c, p->warm.compute_s));
	row(f, "bottleneck", plan_bottleneck_name(p->bottleneck), "%s",
	    p->bottleneck == PLAN_BOTTLENECK_UNKNOWN ? "the disk is not profiled, so its share is unknown"
						     : "the largest part of a warm token's time");
	switch (p->help) {
	case PLAN_HELP_PROFILE:
		row(f, "would help most", "profiling", "measure the disk: `colibri iobench %s` (or plan --probe)", dir);
		break;
	case PLAN_HELP_RAM:
	case PLAN_HELP_DISK:
		row(f, "would help most", p->help == PLAN_HELP_RAM ? "more RAM" : "second SSD",
		    "--ram %s (twice the budget, capped at every expert) gives %s warm; a second SSD "
		    "(colibri mirror, twice the bandwidth) gives %s", plan_bytes_str(a, p->double_ram_bytes),
		    toks_str(b, p->tok_s_double_ram), toks_str(c, p->tok_s_two_disks));
		break;
	case PLAN_HELP_MEMORY:
		row(f, "would help most", "memory", "faster memory or more channels: warm tokens are memory-bound");
		break;
	case PLAN_HELP_CORES:
		row(f, "would help most", "more cores", "the kernels are the limit at %d threads", p->threads);
		break;
	case PLAN_HELP_NONE:
		break;
	}
}

void plan_report_text(FILE *f, const struct plan *p, const struct plan_inputs *in, const struct plan_machine *m,
		      const struct plan_model_info *mi)
{
	fprintf(f, "plan for %s (%s, %d layers, %d MoE layers of %d experts, top-%d, %s experts)\n", mi->dir,
		mi->model_type, mi->n_layers, in->n_moe_layers, in->n_experts, in->top_k, mi->expert_quant);
	const struct plan_scratch *sc = &in->scratch;
	if (sc->batch) {
		char par[32] = "";
		if (sc->n_seqs > 1)
			snprintf(par, sizeof par, " --parallel %d", sc->n_seqs);
		fprintf(f, "sized for --ctx %d --batch %d --threads %d%s, %d logits rows: run, chat and serve given the "
			   "same have this minimum (run's --ctx is the prompt + -n unless given)\n",
			in->ctx, sc->batch, sc->threads, par, sc->logits_rows);
	}
	fputc('\n', f);
	text_budget(f, p, in);
	text_machine(f, p, in, m, mi->dir);
	text_estimate(f, p, in, mi->dir);
}

/* JSON helpers: a number, or null when negative (unknown). */
static void num_or_null(cJSON *o, const char *k, double v)
{
	if (v < 0)
		cJSON_AddNullToObject(o, k);
	else
		cJSON_AddNumberToObject(o, k, v);
}

static cJSON *estimate_json(const struct plan_estimate *e, uint64_t disk_bytes)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "disk_bytes", (double)disk_bytes);
	num_or_null(o, "disk_s", e->disk_s);
	num_or_null(o, "memory_s", e->memory_s);
	num_or_null(o, "compute_s", e->compute_s);
	num_or_null(o, "tok_s", e->tok_s);
	return o;
}

static cJSON *disks_json(const struct plan *p, const struct plan_inputs *in, const struct plan_machine *m)
{
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; i < m->n_disks; i++) {
		const struct plan_disk *d = &m->disks[i];
		cJSON *o = cJSON_CreateObject();
		cJSON_AddItemToArray(a, o);
		cJSON_AddStringToObject(o, "key", d->profile.dev.key);
		cJSON_AddStringToObject(o, "name", d->profile.dev.name);
		cJSON_AddStringToObject(o, "model", d->profile.dev.model);
		cJSON_AddStringToObject(o, "serial", d->profile.dev.serial);
		cJSON_AddNumberToObject(o, "files", d->n_files);
		cJSON_AddNumberToObject(o, "bytes", (double)d->bytes);
		cJSON_AddBoolToObject(o, "profiled", d->profiled);
		const struct disk_point *pt = d->profiled ? plan_disk_point(p, in, &d->profile) : NULL;
		cJSON_AddItemToObject(o, "point", pt ? disk_point_json(pt) : cJSON_CreateNull());
	}
	return a;
}

static cJSON *machine_json(const struct plan_machine *m)
{
	const struct topology *t = &m->topo;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "cpu_model", t->cpu_model);
	cJSON_AddNumberToObject(o, "physical_cores", t->physical_cores);
	cJSON_AddNumberToObject(o, "logical_cpus", t->logical_cpus);
	cJSON_AddNumberToObject(o, "numa_nodes", t->numa_nodes);
	cJSON_AddNumberToObject(o, "local_node", t->local_node);
	cJSON *nodes = cJSON_AddArrayToObject(o, "nodes");
	for (int i = 0; i < t->numa_nodes; i++) {
		cJSON *n = cJSON_CreateObject();
		cJSON_AddItemToArray(nodes, n);
		cJSON_AddNumberToObject(n, "memory_bytes", (double)t->node_memory_bytes[i]);
		cJSON_AddNumberToObject(n, "cores", t->node_cores[i]);
	}
	cJSON_AddNumberToObject(o, "l1d_bytes", (double)t->l1d_bytes);
	cJSON_AddNumberToObject(o, "l2_bytes", (double)t->l2_bytes);
	cJSON_AddNumberToObject(o, "l3_bytes", (double)t->l3_bytes);
	cJSON_AddNumberToObject(o, "l3_instances", t->l3_instances);
	num_or_null(o, "total_memory_bytes", (double)t->total_memory_bytes);
	num_or_null(o, "available_memory_bytes", (double)t->available_memory_bytes);
	num_or_null(o, "membw_gbps", m->membw_gbps > 0 ? m->membw_gbps : -1);
	cJSON_AddStringToObject(o, "membw_source", plan_source_name(m->membw_source));
	num_or_null(o, "compute_gbps", m->compute_gbps > 0 ? m->compute_gbps : -1);
	cJSON_AddStringToObject(o, "compute_source", plan_source_name(m->compute_source));
	cJSON_AddStringToObject(o, "compute_what", m->compute_what);
	return o;
}

cJSON *plan_report_json(const struct plan *p, const struct plan_inputs *in, const struct plan_machine *m,
			const struct plan_model_info *mi)
{
	cJSON *r = cJSON_CreateObject();
	if (!r)
		return NULL;
	cJSON_AddStringToObject(r, "schema", PLAN_SCHEMA);
	cJSON_AddNumberToObject(r, "version", PLAN_SCHEMA_VERSION);
	cJSON *mo = cJSON_AddObjectToObject(r, "model");
	cJSON_AddStringToObject(mo, "dir", mi->dir);
	cJSON_AddStringToObject(mo, "model_type", mi->model_type);
	cJSON_AddStringToObject(mo, "expert_quant", mi->expert_quant);
	cJSON_AddNumberToObject(mo, "layers", mi->n_layers);
	cJSON_AddNumberToObject(mo, "moe_layers", in->n_moe_layers);
	cJSON_AddNumberToObject(mo, "n_experts", in->n_experts);
	cJSON_AddNumberToObject(mo, "top_k", in->top_k);
	cJSON_AddNumberToObject(mo, "record_bytes_max", (double)in->record_bytes_max);
	cJSON_AddNumberToObject(mo, "record_bytes_sum", (double)in->record_bytes_sum);
	cJSON_AddNumberToObject(mo, "resident_bytes", (double)in->resident_bytes);
	cJSON_AddNumberToObject(mo, "embed_disk_bytes", (double)in->embed_disk_bytes);
	cJSON_AddNumberToObject(mo, "token_dense_bytes", (double)(in->token_dense_bytes ? in->token_dense_bytes
											 : in->resident_bytes));
	cJSON_AddNumberToObject(mo, "kv_bytes_per_position", (double)in->kv_bytes_per_position);
	cJSON_AddNumberToObject(mo, "state_fixed_bytes", (double)in->state_fixed_bytes);
	cJSON *bu = cJSON_AddObjectToObject(r, "budget");
	cJSON_AddNumberToObject(bu, "bytes", (double)p->budget_bytes);
	cJSON_AddStringToObject(bu, "source", plan_budget_source_name(p->budget_source));
	cJSON_AddNumberToObject(bu, "min_bytes", (double)p->min_bytes);
	cJSON_AddNumberToObject(bu, "full_bytes", (double)p->full_bytes);
	cJSON *sp = cJSON_AddObjectToObject(r, "split");
	cJSON_AddNumberToObject(sp, "resident_bytes", (double)p->resident_bytes);
	cJSON_AddNumberToObject(sp, "kv_bytes", (double)p->kv_bytes);
	cJSON_AddNumberToObject(sp, "scratch_bytes", (double)p->scratch_bytes);
	cJSON_AddNumberToObject(sp, "expert_cache_bytes", (double)p->expert_cache_bytes);
	cJSON_AddNumberToObject(sp, "slack_bytes", (double)p->slack_bytes);
	cJSON_AddNumberToObject(sp, "unused_bytes", (double)p->unused_bytes);
	cJSON_AddNumberToObject(r, "ctx", in->ctx);
	const struct plan_scratch *sc = &in->scratch;
	if (sc->batch) {
		cJSON *sh = cJSON_AddObjectToObject(r, "shape");
		cJSON_AddNumberToObject(sh, "ctx", in->ctx);
		cJSON_AddNumberToObject(sh, "batch", sc->batch);
		cJSON_AddNumberToObject(sh, "threads", sc->threads);
		cJSON_AddNumberToObject(sh, "sequences", sc->n_seqs);
		cJSON_AddNumberToObject(sh, "logits_rows", sc->logits_rows);
		cJSON *sp2 = cJSON_AddObjectToObject(r, "scratch");
		cJSON_AddNumberToObject(sp2, "forward_bytes", (double)sc->forward_bytes);
		cJSON_AddNumberToObject(sp2, "logits_bytes", (double)sc->logits_bytes);
		cJSON_AddNumberToObject(sp2, "tokenizer_bytes", (double)sc->tokenizer_bytes);
		cJSON_AddNumberToObject(sp2, "reserve_bytes", (double)sc->reserve_bytes);
	}
	cJSON *ec = cJSON_AddObjectToObject(r, "expert_cache");
	cJSON_AddNumberToObject(ec, "frame_bytes", (double)p->frame_bytes);
	cJSON_AddNumberToObject(ec, "frames", (double)p->frames);
	cJSON_AddNumberToObject(ec, "frames_all", (double)p->frames_all);
	cJSON_AddNumberToObject(ec, "frames_per_layer", p->frames_per_layer);
	cJSON_AddNumberToObject(ec, "warm_hit_rate", p->hit_rate_warm);
	cJSON *cl = cJSON_AddArrayToObject(ec, "classes");
	for (int c = 0; c < p->n_classes; c++) {
		const struct plan_class *pc = &p->classes[c];
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "frame_bytes", (double)pc->frame_bytes);
		cJSON_AddNumberToObject(o, "layers", pc->layers);
		cJSON_AddNumberToObject(o, "frames", (double)pc->frames);
		cJSON_AddNumberToObject(o, "frames_all", (double)pc->frames_all);
		cJSON_AddBoolToObject(o, "main", c == p->main_class);
		cJSON_AddItemToArray(cl, o);
	}
	cJSON *th = cJSON_AddObjectToObject(r, "threads");
	cJSON_AddNumberToObject(th, "value", p->threads);
	cJSON_AddNumberToObject(th, "planned", p->threads_planned);
	cJSON *io = cJSON_AddObjectToObject(r, "io_depth");
	cJSON_AddNumberToObject(io, "value", p->io_depth);
	cJSON_AddNumberToObject(io, "planned", p->io_depth_planned);
	cJSON_AddStringToObject(io, "planned_from", p->io_depth_measured ? "profile" : "default");
	cJSON_AddItemToObject(r, "disks", disks_json(p, in, m));
	cJSON_AddItemToObject(r, "machine", machine_json(m));
	cJSON *pt = cJSON_AddObjectToObject(r, "per_token");
	cJSON_AddNumberToObject(pt, "expert_bytes", (double)p->expert_bytes_token);
	cJSON_AddNumberToObject(pt, "memory_bytes", (double)p->memory_bytes);
	cJSON_AddNumberToObject(pt, "compute_bytes", (double)p->compute_bytes);
	cJSON *es = cJSON_AddObjectToObject(r, "estimate");
	num_or_null(es, "disk_gbps", p->disk_known ? p->disk_gbps : -1);
	cJSON_AddNumberToObject(es, "disk_mirror_gain", p->disk_gain);
	cJSON_AddItemToObject(es, "cold", estimate_json(&p->cold, p->disk_bytes_cold));
	cJSON_AddItemToObject(es, "warm", estimate_json(&p->warm, p->disk_bytes_warm));
	cJSON_AddStringToObject(es, "bottleneck", plan_bottleneck_name(p->bottleneck));
	cJSON_AddStringToObject(es, "would_help_most", plan_help_name(p->help));
	num_or_null(es, "warm_tok_s_two_disks", p->tok_s_two_disks);
	cJSON_AddNumberToObject(es, "double_ram_bytes", (double)p->double_ram_bytes);
	num_or_null(es, "warm_tok_s_double_ram", p->tok_s_double_ram);
	return r;
}
