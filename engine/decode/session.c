/*
 * session — see session.h.
 */
#include "engine/decode/session.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "compute/kernels.h"
#include "compute/threadpool.h"
#include "base/files.h"
#include "engine/decode/plan_container.h"
#include "engine/model/shard.h"
#include "engine/text/tokenizer.h"
#include "planner/plan.h"
#include "planner/plan_machine.h"
#include "planner/profile.h"
#include "planner/topology.h"
#include "base/error.h"
#include "base/clock.h"


void session_options_default(struct session_options *o)
{
	memset(o, 0, sizeof *o);
	o->batch = 64;
	o->io_depth = 0; /* planned */
	o->logits_rows = 1;
	o->parallel = 1;
	o->dist_timeout_s = DIST_TIMEOUT_S_DEFAULT;
}

int session_parse_int(const char *name, const char *arg, int lo, int hi, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(arg, &end, 10);
	if (*arg == 0 || *end || errno == ERANGE || v < lo || v > hi)
		return error_set(EINVAL, "--%s must be an integer in [%d, %d], not \"%s\"", name, lo, hi, arg);
	*out = (int)v;
	return 0;
}

int session_parse_float(const char *name, const char *arg, float lo, float hi, float *out)
{
	char *end;
	double v = strtod(arg, &end);
	if (end == arg || *end || !(v >= lo && v <= hi))
		return error_set(EINVAL, "--%s must be a number in [%g, %g], not \"%s\"", name, lo, hi, arg);
	*out = (float)v;
	return 0;
}

int session_parse_seed(const char *arg, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(arg, &end, 10);
	/* strtoull takes "-1" as 2^64 - 1 and leading blanks: refuse both. */
	if (arg[0] < '0' || arg[0] > '9' || *end || errno == ERANGE)
		return error_set(EINVAL, "--seed must be an integer in [0, %llu], not \"%s\"", ULLONG_MAX, arg);
	*out = v;
	return 0;
}

int session_check_model(const char *dir)
{
	struct stat sb;
	char path[PATH_MAX];
	if (stat(dir, &sb) != 0)
		return error_set(errno, "%s: cannot open the model folder: %s", dir, strerror(errno));
	if (!S_ISDIR(sb.st_mode)) {
		/* A GGUF file is what llama.cpp and Ollama users have: the
		 * commands that run a model convert it on the way
		 * (engine/cli/model_cache.h), the others name the way out. */
		char magic[4];
		int fd = open(dir, O_RDONLY | O_CLOEXEC);
		bool gguf = fd >= 0 && file_pread_full(fd, magic, 4, 0) == 0 && !memcmp(magic, "GGUF", 4);
		if (fd >= 0)
			close(fd);
		if (gguf)
			return error_set(ENOTDIR, "%s: a GGUF file, not a container folder: run, chat, serve, plan, "
					 "logits and tokenize take it as it is (converted once into the cache, whose "
					 "folder they print), or convert it yourself: colibri convert %s DIR, then "
					 "--model DIR", dir, dir);
		return error_set(ENOTDIR, "%s: not a folder: --model takes a colibri container folder, or a .gguf "
				 "file; colibri convert makes a container of a Hugging Face checkpoint folder", dir);
	}
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	if (access(path, F_OK) != 0)
		return error_set(ENOENT, "%s: not a colibri container (no manifest.json); make one with "
				 "colibri convert HF_DIR OUT_DIR", dir);
	return 0;
}

int session_parse_size(const char *s, uint64_t *bytes)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || !(v > 0) || !isfinite(v))
		return -EINVAL;
	double mul = 1024.0 * 1024 * 1024;
	if ((*end == 'B' || *end == 'b') && !end[1])
		mul = 1; /* bytes, as plan --json states a minimum */
	else if (*end) {
		switch (*end) {
		case 'k': case 'K': mul = 1024.0; break;
		case 'm': case 'M': mul = 1024.0 * 1024; break;
		case 'g': case 'G': mul = 1024.0 * 1024 * 1024; break;
		case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
		default: return -EINVAL;
		}
		end++;
		if (*end == 'i')
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
		if (*end)
			return -EINVAL;
	}
	if (v * mul > 1.8e19)
		return -EINVAL;
	*bytes = (uint64_t)(v * mul);
	return 0;
}

struct plan_shape session_plan_shape(const struct session_options *o, int ctx)
{
	return (struct plan_shape){ .ctx = ctx, .batch = o->batch, .threads = o->threads, .n_seqs = o->parallel,
				    .logits_rows = o->logits_rows };
}

int session_option(struct session_options *o, int ch, const char *arg)
{
	switch (ch) {
	case SESSION_OPT_MODEL:
		o->model_dir = arg;
		return 0;
	case SESSION_OPT_THREADS:
		return session_parse_int("threads", arg, 1, 1024, &o->threads);
	case SESSION_OPT_CTX:
		return session_parse_int("ctx", arg, 1, 1 << 24, &o->ctx);
	case SESSION_OPT_BATCH:
		return session_parse_int("batch", arg, 1, 4096, &o->batch);
	case SESSION_OPT_IO_DEPTH:
		return session_parse_int("io-depth", arg, 1, 4096, &o->io_depth);
	case SESSION_OPT_RAM:
		if (strcmp(arg, "min") == 0) {
			o->ram_min = true;
			return 0;
		}
		if (session_parse_size(arg, &o->ram_bytes) != 0)
			return error_set(EINVAL, "--ram takes a size such as 24G, 512M, 1000B (bytes), a number of GiB, or min; not \"%s\"", arg);
		return 0;
	case SESSION_OPT_NO_DIRECT:
		o->buffered = true;
		return 0;
	case SESSION_OPT_STATS:
		o->stats = true;
		return 0;
	case SESSION_OPT_NO_PREFETCH:
		o->no_prefetch = true;
		return 0;
	case SESSION_OPT_NO_PIN:
		o->no_pin = true;
		return 0;
	case SESSION_OPT_REPIN:
		return session_parse_int("repin", arg, 0, 64, &o->repin);
	case SESSION_OPT_STATS_JSON:
		o->stats_json = arg;
		return 0;
	case SESSION_OPT_PLACEMENT:
		return placement_spec_parse(&o->placement, arg);
	case SESSION_OPT_REPLICAS:
		return placement_replicas_parse(&o->placement, arg);
	case SESSION_OPT_DIST_TIMEOUT: {
		float v;
		int rc = session_parse_float("dist-timeout", arg, 0.1f, 86400.0f, &v);
		o->dist_timeout_s = v;
		return rc;
	}
	case SESSION_OPT_CHAT_TEMPLATE:
		o->chat_template = arg;
		return 0;
	case SESSION_OPT_CHAT_TEMPLATE_FILE:
		o->chat_template_file = arg;
		return 0;
	}
	return -ENOENT;
}

int session_chat_template(const struct session_options *o, struct tokenizer *tok)
{
	const char *text = o->chat_template;
	char *file_text = NULL;
	size_t len = 0;
	int rc;
	if (!text && !o->chat_template_file)
		return 0;
	if (text && o->chat_template_file)
		return error_set(EINVAL, "give one of --chat-template and --chat-template-file, not both");
	/* llama.cpp also takes the name of a template built into it; a name
	 * here would be rendered as literal text, every prompt the same. */
	if (text && !strstr(text, "{%") && !strstr(text, "{{"))
		return error_set(EINVAL, "--chat-template takes a Jinja template, not \"%.60s\": colibri has no "
					 "built-in templates by name as llama.cpp has (chatml, llama3 ...) and renders "
					 "the model's own by default; to use another, pass --chat-template-file FILE",
				 text);
	if (!text) {
		if ((rc = file_read_all(o->chat_template_file, &file_text, &len))) {
			/* The reader's message names the file; this one the option too. */
			char why[512];
			snprintf(why, sizeof why, "%s", error_message());
			error_clear();
			return error_set(-rc, "--chat-template-file %s", why);
		}
		if (strspn(file_text, " \t\r\n") == len) {
			free(file_text);
			return error_set(EINVAL, "--chat-template-file %s: the file is empty", o->chat_template_file);
		}
		text = file_text;
	}
	rc = tokenizer_set_chat_template(tok, text);
	free(file_text);
	return rc ? error_set(-rc, "out of memory for the chat template") : 0;
}

int session_parse_list(const char *s, const char *what, bool ranges, int32_t max, int32_t **out, int *n)
{
	*out = NULL;
	*n = 0;
	/* Pass 0 checks and counts, pass 1 fills. */
	int32_t *v = NULL;
	for (int pass = 0; pass < 2; pass++) {
		int k = 0;
		const char *p = s;
		do {
			char *end;
			long a = strtol(p, &end, 10), b = a;
			bool ok = end != p && *p != '-' && *p != '+' && *p != ' ';
			if (ok && ranges && *end == '-') {
				const char *q = end + 1;
				b = strtol(q, &end, 10);
				ok = end != q && *q != '-' && *q != '+' && *q != ' ';
			}
			if (!ok || a < 0 || b < a || b > max || (*end && *end != ',') || (*end == ',' && !end[1])) {
				free(v);
				return error_set(EINVAL, "%s takes comma-separated %s 0..%d, not \"%s\"", what,
						 ranges ? "numbers or ranges A-B of" : "numbers", max, s);
			}
			for (long x = a; x <= b; x++, k++)
				if (pass)
					v[k] = (int32_t)x;
			p = *end ? end + 1 : end;
		} while (*p);
		if (pass == 0 && !(v = malloc((size_t)k * sizeof *v)))
			return error_set(ENOMEM, "out of memory");
		*n = k;
	}
	*out = v;
	return 0;
}

int session_parse_tokens(const char *s, int32_t **ids, int *n)
{
	return session_parse_list(s, "--tokens", false, INT32_MAX, ids, n);
}

/* A memory line of /proc/self/status ("VmRSS", "VmHWM") in bytes; 0 if
 * unknown. VmRSS is what is already spent (binary, libraries, a loaded
 * tokenizer) before the model loads; VmHWM the peak, for the report. */
static uint64_t proc_status_bytes(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	uint64_t kb = 0;
	size_t n = strlen(key);
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, key, n) && line[n] == ':' && sscanf(line + n + 1, "%" SCNu64, &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb * 1024;
}

/* Bandwidth of each copy's disk (0 primary, k mirror k-1) from the disk
 * profiles pm holds, at the frame size, so stripes follow measured speed;
 * 0 where a disk has no profile (the store then weighs it like the others).
 * A copy's disk is that of its first file (pc lists files copy by copy). */
static void copy_bandwidths(const struct plan_container *pc, const struct plan_machine *pm, uint64_t block,
			    int depth, bool buffered, double *gbps)
{
	for (int i = 0; i < pc->n_paths; i++) {
		int k = pc->path_copy[i];
		if ((i > 0 && pc->path_copy[i - 1] == k) || k >= EXPERT_COPIES_MAX)
			continue;
		int d = plan_machine_disk_of(pm, pc->paths[i]);
		const struct disk_point *pt = d >= 0 && pm->disks[d].profiled
						      ? disk_profile_nearest(&pm->disks[d].profile, block, depth, buffered)
						      : NULL;
		gbps[k] = pt ? pt->gbps : 0;
	}
}

/* Learned pinning takes up to half of each frame class's frames beyond one
 * step's need; the rest stays a cache for what the workload does now.
 * Under MPI only this rank's experts (owner), and nothing is saved. The
 * report's window starts when it is done. */
static int session_pin(struct session *s, const uint8_t *owner)
{
	double t_pin = clock_now_s();
	struct pinning_target pt = {
		.store = s->model.store, .dir = s->model.dir, .n_layers = s->model.cfg.n_layers,
		.n_experts = s->model.cfg.n_experts, .max_per_step = s->model.max_experts_per_step,
		.model_id = manifest_model_id(&s->model.man), .owner = owner, .rank = dist_rank(),
		.no_save = dist_active(),
	};
	int rc = pinning_start(&s->pin, &pt, !s->opt.no_pin);
	if (rc)
		return rc;
	s->pin_ready = true;
	s->t_open = clock_now_s();
	s->pin_s = s->t_open - t_pin;
	s->at_open = *expert_store_stats(s->model.store);
	s->pins_at_open = s->pin.n_pins;
	return 0;
}

/* The positions a model takes: max_position_embeddings, or what its YaRN
 * scaling reaches when that says more. */
static int32_t model_positions(const struct model_config *c)
{
	double yarn = c->yarn ? (double)c->yarn_factor * c->yarn_original_max : 0;
	return yarn > c->max_positions ? (yarn < INT32_MAX ? (int32_t)yarn : INT32_MAX) : c->max_positions;
}

static int session_open_local(struct session *s, const struct session_options *o, int need_ctx)
{
	memset(s, 0, sizeof *s);
	s->opt = *o;
	struct model_config cfg;
	int rc = session_check_model(o->model_dir);
	if (!rc)
		rc = model_config_load(&cfg, o->model_dir);
	if (rc)
		return rc;
	int threads = o->threads;
	int ctx = o->ctx ? o->ctx : need_ctx;
	int32_t most = model_positions(&cfg);
	if (ctx > most && !o->ctx)
		return error_set(EINVAL, "%d positions needed but the model has %d (max_position_embeddings): a shorter "
					 "prompt or -n (--ctx N goes beyond the model's positions, with a warning)",
				 need_ctx, most);
	if (ctx < need_ctx)
		return error_set(EINVAL, "%d positions needed but the context is %d (--ctx)", need_ctx, ctx);
	/* transformers computes any position, so a longer context is the same
	 * arithmetic, but the model never saw those positions in training: as
	 * llama.cpp does for n_ctx > n_ctx_train, say so and go on. */
	if (ctx > most && dist_rank() == 0)
		fprintf(stderr, "colibri: warning: --ctx %d is beyond the %d positions the model was trained for "
				"(max_position_embeddings); what it writes past position %d may degrade\n", ctx, most,
			most);
	/* The plan sizes the expert cache, the IO depth and the threads;
	 * explicit flags override it and the run says so. */
	struct plan_container pc;
	struct plan_machine *pm = calloc(1, sizeof *pm);
	struct plan plan;
	struct plan_shape shape = session_plan_shape(o, ctx);
	rc = pm ? plan_container_load_shape(&pc, o->model_dir, &shape) : error_set(ENOMEM, "out of memory");
	if (!rc && (rc = plan_machine_discover(pm, (const char *const *)pc.paths, pc.n_paths, 0)) != 0)
		rc = error_set(-rc, "%s: cannot inspect the disks of the expert files", o->model_dir);
	if (!rc) {
		plan_inputs_machine(&pc.in, pm);
		/* The budget counts what is resident before the model loads (the
		 * binary, its libraries, the tokenizer) from the container, as
		 * plan does, so both take the same minimum. Where this process
		 * holds more than that, the promise may slip: say so. */
		uint64_t before = proc_status_bytes("VmRSS"),
			 allowed = pc.in.scratch.reserve_bytes + pc.in.scratch.tokenizer_bytes;
#ifndef __SANITIZE_ADDRESS__ /* shadow memory is not the engine's */
		if (before > allowed)
			fprintf(stderr, "colibri: warning: %.1f MiB is resident before the model loads, more than the "
					"%.1f MiB the budget sets aside for the binary, its libraries and the tokenizer; the "
					"resident set may pass the budget by the difference\n", before / 1048576.0,
				allowed / 1048576.0);
#else
		(void)before;
		(void)allowed;
#endif
		pc.in.ram_bytes = o->ram_bytes;
		pc.in.ram_min = o->ram_min;
		pc.in.threads = o->threads;
		pc.in.io_depth = o->io_depth;
		pc.in.buffered = o->buffered;
		if ((rc = plan_compute(&plan, &pc.in)) != 0)
			rc = error_set(-rc, "%s", plan.error);
	}
	if (!rc) {
		if (plan.budget_source == PLAN_BUDGET_DEFAULT_LOW)
			fprintf(stderr, "colibri: warning: available memory is below the model's minimum of %.0f MiB; "
					"running at the minimum\n", plan.min_bytes / 1048576.0);
		plan_print_overrides(&plan, stderr);
		s->plan = (struct session_plan){
			.budget_bytes = plan.budget_bytes, .resident_bytes = plan.resident_bytes,
			.kv_bytes = plan.kv_bytes, .scratch_bytes = plan.scratch_bytes,
			.expert_cache_bytes = plan.expert_cache_bytes, .disk_gbps = plan.disk_known ? plan.disk_gbps : 0,
		};
	}
	struct model_options mo = { .buffered = o->buffered };
	if (!rc) {
		/* The store opens exactly the frames the plan counted, class by class. */
		mo.expert_cache_bytes = plan.expert_cache_bytes;
		for (int c = 0; c < plan.n_classes && c < EXPERT_CLASSES_MAX; c++)
			mo.class_frames[c] = (struct expert_class_frames){
				.frame_bytes = plan.classes[c].frame_bytes,
				.n_frames = plan.classes[c].frames > INT32_MAX ? INT32_MAX : (int32_t)plan.classes[c].frames,
			};
		mo.io_depth = plan.io_depth;
		threads = plan.threads;
		copy_bandwidths(&pc, pm, plan.frame_bytes, plan.io_depth, o->buffered, mo.copy_gbps);
	}
	if (pm)
		plan_container_free(&pc);
	free(pm);
	if (rc)
		return rc;
	double t_load = clock_now_s();
	if ((rc = model_load(&s->model, o->model_dir, &mo))) {
		model_free(&s->model); /* what the failed load had allocated */
		return rc;
	}
	s->model_loaded = true;
	s->load_s = clock_now_s() - t_load;
	/* A shard holds one rank's experts: only that rank of its job runs it. */
	if ((rc = shard_check_run(&s->model.man, o->model_dir, dist_active(), dist_rank(), dist_size())))
		return rc;
	/* Under MPI the placement decides what to pin: after the join. */
	if (!dist_active() && (rc = session_pin(s, NULL)))
		return rc;
	/* The container names its arithmetic (manifest.c: activations). */
	kernels_set_activations(s->model.man.activations);
	if ((rc = threadpool_init(&s->pool, threads)))
		return error_set(-rc, "cannot start %d threads", threads);
	if ((rc = forward_init(&s->fwd, &s->model, s->pool, ctx, o->batch, o->parallel)))
		return rc;
	s->fwd_ready = true;
	s->fwd.prefetch = !o->no_prefetch;
	return 0;
}

/* Joins the MPI job after this rank's open (rc): the ranks agree on the
 * placement, then each pins its own experts. */
static int session_join(struct session *s, const struct dist_options *d, int rc)
{
	uint64_t id = s->model_loaded ? manifest_model_id(&s->model.man) : 0;
	rc = dist_join(&s->dist, rc ? NULL : &s->fwd, d, rc, id, s->plan.disk_gbps, s->plan.expert_cache_bytes);
	if (!rc)
		rc = session_pin(s, dist_owner_table(s->dist));
	if (!rc && dist_rank() == 0)
		s->fwd.remote = dist_remote(s->dist);
	return rc;
}

/* Rank 0's settings every rank takes. */
static struct dist_options dist_options_of(const struct session_options *o)
{
	return (struct dist_options){ .placement = o->placement, .timeout_s = o->dist_timeout_s, .batch = o->batch };
}

int session_open(struct session *s, const struct session_options *o, int need_ctx)
{
	if (!dist_active())
		return session_open_local(s, o, need_ctx);
	static bool opened;
	if (opened) {
		memset(s, 0, sizeof *s);
		return error_set(EBUSY, "an MPI job serves one model once: this command opened it twice");
	}
	opened = true;
	struct dist_options d = dist_options_of(o);
	dist_agree(&d);
	return session_join(s, &d, session_open_local(s, o, need_ctx));
}

int session_serve(const struct session_options *o, const struct dist_options *agreed, int rc_args)
{
	struct dist_options d = *agreed;
	if (rc_args) {
		struct session none = { 0 };
		return session_join(&none, &d, rc_args);
	}
	struct session_options mine = *o;
	/* Rank 0's steps: this rank's forward holds as many rows. */
	mine.batch = d.batch;
	mine.stats = false;
	mine.stats_json = NULL;
	struct session s;
	int rc = session_open_local(&s, &mine, 1);
	rc = session_join(&s, &d, rc);
	if (!rc)
		rc = dist_serve(s.dist);
	session_close(&s);
	return rc;
}

void session_safe_point(struct session *s)
{
	if (s->pin_ready && s->opt.repin > 0)
		pinning_repin(&s->pin, s->opt.repin);
}

void session_close(struct session *s)
{
	dist_free(s->dist); /* tells the serving ranks to stop */
	s->fwd.remote = (struct remote_experts){ 0 };
	if (s->pin_ready)
		pinning_finish(&s->pin);
	if (s->fwd_ready)
		forward_free(&s->fwd);
	if (s->pool)
		threadpool_free(s->pool);
	if (s->model_loaded)
		model_free(&s->model);
	memset(s, 0, sizeof *s);
}

/* What the store did in the report's window (from t_open): its reads,
 * their wait and busy time; the start-up's reads (the pinned set) are
 * counted apart. */
struct window {
	uint64_t bytes_read;
	double wait_s, busy_s, gbps;
};

static struct window window_of(const struct session *s, const struct expert_store_stats *st)
{
	const struct expert_store_stats *a = &s->at_open;
	struct window w = {
		.bytes_read = st->bytes_read - a->bytes_read,
		.wait_s = st->disk_wait_s - a->disk_wait_s,
		.busy_s = st->disk_busy_s - a->disk_busy_s,
	};
	w.gbps = w.busy_s > 0 ? (double)w.bytes_read / w.busy_s / 1e9 : 0;
	return w;
}

static void report_text(struct session *s, const struct expert_store_stats *st, double wall,
			FILE *out)
{
	struct window w = window_of(s, st);
	double ram = st->requests ? (double)(st->hits + st->pinned_hits) / (double)st->requests : 0;
	const struct model_config *c = &s->model.cfg;
	fprintf(out, "experts: %" PRIu64 " requested, %.1f%% from RAM (%" PRIu64 " pinned hits, %" PRIu64
		     " cache hits of which %" PRIu64 " prefetched in time), %" PRIu64 " joined in flight, %" PRIu64
		     " misses; %d pinned, %d repinned\n",
		st->requests, 100 * ram, st->pinned_hits, st->hits, st->prefetch_hits, st->joins, st->misses,
		s->pin.n_pins, s->pin.repins);
	fprintf(out, "disk: %.1f MB read, busy %.3f s (%.2f GB/s while busy), waited %.3f s of %.3f s "
		     "(compute and the rest %.3f s), %" PRIu64 " retries\n",
		w.bytes_read / 1e6, w.busy_s, w.gbps, w.wait_s, wall, wall > w.wait_s ? wall - w.wait_s : 0,
		st->read_retries);
	fprintf(out, "start-up (before that): resident weights %.1f MB in %.3f s; pinned set %d experts, %.1f MB in "
		     "%.3f s\n",
		s->model.man.resident_bytes / 1e6, s->load_s, s->pins_at_open,
		s->at_open.bytes_read / 1e6, s->pin_s);
	fprintf(out, "hit rate by layer:");
	for (int l = 0; l < c->n_layers + c->n_mtp_layers && l < EXPERT_STATS_LAYERS_MAX; l++)
		if (st->layer_requests[l])
			fprintf(out, " %s%d:%.0f%%", l >= c->n_layers ? "mtp" : "", l,
				100.0 * (st->layer_hits[l] + st->layer_pinned_hits[l]) / st->layer_requests[l]);
	fprintf(out, "\n");
	char frames[EXPERT_CLASSES_MAX * 48] = "";
	size_t len = 0;
	for (int c = 0; c < st->n_classes && c < EXPERT_CLASSES_MAX; c++)
		len += (size_t)snprintf(frames + len, sizeof frames - len, "%s%d frames of %" PRIu64 " KiB",
					c ? " + " : "", st->classes[c].n_frames, st->classes[c].frame_bytes >> 10);
	fprintf(out, "kernels: %s, activations %s\n", kernels_ops_name(), kernels_activations_name());
	fprintf(out, "store: %s, %s, %s, io depth %d, %s eviction%s\n",
		st->io_uring ? "io_uring" : "pread threads", st->o_direct ? "O_DIRECT" : "buffered",
		st->n_classes ? frames : "no frames", st->io_depth,
		st->evict == EXPERT_EVICT_LRU ? "LRU" : "frequency-aware",
		st->fixed_buffers ? ", fixed buffers" : "");
	if (st->n_classes > 1) {
		fprintf(out, "frame classes:");
		for (int c = 0; c < st->n_classes && c < EXPERT_CLASSES_MAX; c++) {
			const struct expert_class_stats *k = &st->classes[c];
			fprintf(out, " [%" PRIu64 " KiB, %d layers] %" PRIu64 " requested, %.1f%% from RAM, %" PRIu64
				     " misses, %" PRIu64 " evictions;", k->frame_bytes >> 10, k->n_layers, k->requests,
				k->requests ? 100.0 * (k->hits + k->pinned_hits) / k->requests : 0, k->misses,
				k->evictions);
		}
		fprintf(out, "\n");
	}
	if (st->n_copies > 1) {
		fprintf(out, "copies:");
		for (int k = 0; k < st->n_copies && k < EXPERT_COPIES_MAX; k++)
			fprintf(out, " [%d] %.1f MB, weight %.2f%s%s%s", k, st->copy_bytes_read[k] / 1e6,
				st->copy_weight[k], st->copy_in_rotation[k] ? "" : ", OUT OF ROTATION",
				st->copy_failures[k] ? ", failures" : "",
				st->copy_readmissions[k] ? ", returned after a wait" : "");
		fprintf(out, " (stripe %" PRIu64 " KiB)\n", st->stripe_bytes >> 10);
	}
	const struct forward_prefetch_stats *pf = &s->fwd.pf;
	if (s->fwd.prefetch && pf->predicted)
		fprintf(out, "prefetch: precision %.1f%%, recall %.1f%% (%" PRIu64 " predicted, %" PRIu64
			     " needed, %" PRIu64 " both), %.1f MB prefetched: %" PRIu64 " of %" PRIu64
			     " reads used, %" PRIu64 " wasted; read for %.0f%% of the predictions (recent precision %.2f; "
			     "reads start at %.2f)\n",
			100.0 * pf->correct / pf->predicted, pf->actual ? 100.0 * pf->correct / pf->actual : 0,
			pf->predicted, pf->actual, pf->correct, st->prefetch_issued_bytes / 1e6,
			st->prefetch_used, st->prefetch_issued, st->prefetch_wasted,
			pf->prefetch_steps ? 100.0 * pf->issued_steps / pf->prefetch_steps : 0, pf->precision_ema,
			s->fwd.prefetch_precision);
	else
		fprintf(out, "prefetch: off\n");
	fprintf(out, "memory: peak resident set %.1f MiB", proc_status_bytes("VmHWM") / 1048576.0);
	if (s->plan.budget_bytes)
		fprintf(out, " of a %.1f MiB budget (+%llu MiB slack)", s->plan.budget_bytes / 1048576.0,
			SESSION_RAM_SLACK >> 20);
	fprintf(out, "\n");
}

static void ranks_json(const struct session *s, const struct dist_rank_stats *r, cJSON *j);

static int report_json(struct session *s, const struct expert_store_stats *st, double wall,
		       const struct dist_rank_stats *ranks)
{
	struct window w = window_of(s, st);
	cJSON *j = cJSON_CreateObject();
	double hit = st->requests ? (double)(st->hits + st->pinned_hits) / (double)st->requests : 0;
	cJSON_AddNumberToObject(j, "expert_requests", (double)st->requests);
	cJSON_AddNumberToObject(j, "expert_hits", (double)st->hits);
	cJSON_AddNumberToObject(j, "expert_pinned_hits", (double)st->pinned_hits);
	cJSON_AddNumberToObject(j, "expert_prefetch_hits", (double)st->prefetch_hits);
	cJSON_AddNumberToObject(j, "pinned_experts", s->pin.n_pins);
	cJSON_AddNumberToObject(j, "repinned", s->pin.repins);
	cJSON_AddNumberToObject(j, "prefetch_reads", (double)st->prefetch_issued);
	cJSON_AddNumberToObject(j, "prefetch_reads_used", (double)st->prefetch_used);
	cJSON_AddNumberToObject(j, "prefetch_reads_wasted", (double)st->prefetch_wasted);
	cJSON_AddNumberToObject(j, "expert_joins", (double)st->joins);
	cJSON_AddNumberToObject(j, "expert_misses", (double)st->misses);
	cJSON_AddNumberToObject(j, "hit_rate", hit);
	cJSON_AddNumberToObject(j, "bytes_read", (double)w.bytes_read);
	cJSON_AddNumberToObject(j, "read_retries", (double)st->read_retries);
	cJSON_AddNumberToObject(j, "disk_wait_s", w.wait_s);
	cJSON_AddNumberToObject(j, "disk_busy_s", w.busy_s);
	cJSON_AddNumberToObject(j, "disk_gbps", w.gbps);
	cJSON_AddNumberToObject(j, "wall_s", wall);
	cJSON_AddNumberToObject(j, "compute_s", wall > w.wait_s ? wall - w.wait_s : 0);
	/* The start-up, before wall_s: the resident weights, the pinned set. */
	cJSON_AddNumberToObject(j, "startup_resident_bytes", (double)s->model.man.resident_bytes);
	cJSON_AddNumberToObject(j, "startup_resident_s", s->load_s);
	cJSON_AddNumberToObject(j, "startup_pinned_experts", s->pins_at_open);
	cJSON_AddNumberToObject(j, "startup_pin_bytes", (double)s->at_open.bytes_read);
	cJSON_AddNumberToObject(j, "startup_pin_s", s->pin_s);
	cJSON_AddNumberToObject(j, "startup_pin_wait_s", s->at_open.disk_wait_s);
	cJSON_AddNumberToObject(j, "prefetch_issued_bytes", (double)st->prefetch_issued_bytes);
	cJSON_AddNumberToObject(j, "prefetch_used_bytes", (double)st->prefetch_used_bytes);
	const struct forward_prefetch_stats *pf = &s->fwd.pf;
	cJSON_AddBoolToObject(j, "prefetch", s->fwd.prefetch);
	cJSON_AddNumberToObject(j, "prefetch_predicted", (double)pf->predicted);
	cJSON_AddNumberToObject(j, "prefetch_needed", (double)pf->actual);
	cJSON_AddNumberToObject(j, "prefetch_correct", (double)pf->correct);
	cJSON_AddNumberToObject(j, "prefetch_precision", pf->predicted ? (double)pf->correct / pf->predicted : 0);
	cJSON_AddNumberToObject(j, "prefetch_precision_recent", pf->precision_ema);
	cJSON_AddNumberToObject(j, "prefetch_issued_share",
				pf->prefetch_steps ? (double)pf->issued_steps / pf->prefetch_steps : 0);
	cJSON_AddNumberToObject(j, "prefetch_recall", pf->actual ? (double)pf->correct / pf->actual : 0);
	cJSON_AddNumberToObject(j, "peak_rss_bytes", (double)proc_status_bytes("VmHWM"));
	cJSON_AddNumberToObject(j, "ram_budget_bytes", (double)s->plan.budget_bytes);
#ifdef __SANITIZE_ADDRESS__
	cJSON_AddBoolToObject(j, "sanitizers", true); /* shadow memory inflates the resident set */
#else
	cJSON_AddBoolToObject(j, "sanitizers", false);
#endif
	cJSON_AddNumberToObject(j, "frames", st->n_frames);
	cJSON_AddNumberToObject(j, "frame_bytes", (double)st->frame_bytes);
	cJSON_AddNumberToObject(j, "cache_bytes", (double)st->cache_bytes);
	cJSON *classes = cJSON_AddArrayToObject(j, "frame_classes");
	for (int c = 0; c < st->n_classes && c < EXPERT_CLASSES_MAX; c++) {
		const struct expert_class_stats *k = &st->classes[c];
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "frame_bytes", (double)k->frame_bytes);
		cJSON_AddNumberToObject(o, "frames", k->n_frames);
		cJSON_AddNumberToObject(o, "layers", k->n_layers);
		cJSON_AddNumberToObject(o, "pinned", k->n_pinned);
		cJSON_AddNumberToObject(o, "requests", (double)k->requests);
		cJSON_AddNumberToObject(o, "hits", (double)k->hits);
		cJSON_AddNumberToObject(o, "pinned_hits", (double)k->pinned_hits);
		cJSON_AddNumberToObject(o, "joins", (double)k->joins);
		cJSON_AddNumberToObject(o, "misses", (double)k->misses);
		cJSON_AddNumberToObject(o, "evictions", (double)k->evictions);
		cJSON_AddNumberToObject(o, "bytes_read", (double)k->bytes_read);
		cJSON_AddItemToArray(classes, o);
	}
	cJSON_AddStringToObject(j, "activations", kernels_activations_name());
	cJSON_AddNumberToObject(j, "io_depth", st->io_depth);
	cJSON_AddBoolToObject(j, "io_uring", st->io_uring);
	cJSON_AddBoolToObject(j, "o_direct", st->o_direct);
	cJSON_AddStringToObject(j, "eviction", st->evict == EXPERT_EVICT_LRU ? "lru" : "freq");
	/* Decoder layers, then MTP layers (requested only while drafting). */
	cJSON *layers = cJSON_AddArrayToObject(j, "layer_hit_rate");
	for (int l = 0; l < s->model.cfg.n_layers + s->model.cfg.n_mtp_layers && l < EXPERT_STATS_LAYERS_MAX; l++)
		cJSON_AddItemToArray(layers, st->layer_requests[l]
					     ? cJSON_CreateNumber((double)(st->layer_hits[l] + st->layer_pinned_hits[l]) /
								  st->layer_requests[l])
					     : cJSON_CreateNull());
	cJSON *copies = cJSON_AddArrayToObject(j, "copies");
	for (int k = 0; k < st->n_copies && k < EXPERT_COPIES_MAX; k++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "bytes_read", (double)st->copy_bytes_read[k]);
		cJSON_AddNumberToObject(o, "weight", st->copy_weight[k]);
		cJSON_AddNumberToObject(o, "failures", (double)st->copy_failures[k]);
		cJSON_AddBoolToObject(o, "in_rotation", st->copy_in_rotation[k]);
		cJSON_AddNumberToObject(o, "readmissions", st->copy_readmissions[k]);
		cJSON_AddItemToArray(copies, o);
	}
	/* Times each expert was routed to, per layer as layer_hit_rate (null
	 * for a layer without routed experts): the dashboard's map counts the
	 * same. */
	cJSON *usage = cJSON_AddArrayToObject(j, "expert_usage");
	for (int l = 0; l < s->model.cfg.n_layers + s->model.cfg.n_mtp_layers; l++) {
		const uint32_t *u = s->model.store ? expert_store_usage(s->model.store, l) : NULL;
		cJSON *row = u ? cJSON_CreateArray() : cJSON_CreateNull();
		for (int e = 0; u && e < s->model.cfg.n_experts; e++)
			cJSON_AddItemToArray(row, cJSON_CreateNumber(u[e]));
		cJSON_AddItemToArray(usage, row);
	}
	if (ranks)
		ranks_json(s, ranks, j);
	for (size_t i = 0; i < s->n_extra; i++)
		cJSON_AddNumberToObject(j, s->extra[i].name, s->extra[i].value);
	char *text = cJSON_Print(j);
	cJSON_Delete(j);
	if (!text)
		return error_set(ENOMEM, "out of memory");
	int rc = file_write_atomic(s->opt.stats_json, text, strlen(text));
	free(text);
	return rc;
}

void session_stat(struct session *s, const char *name, double value)
{
	if (s->n_extra < SESSION_EXTRA_MAX)
		s->extra[s->n_extra++] = (struct session_stat){ name, value };
}

/* Rank 0 of an MPI run: every rank's share, its own from its store. */
static int ranks_gather(struct session *s, const struct expert_store_stats *st, double wall,
			struct dist_rank_stats *r)
{
	int rc = dist_stats(s->dist, r);
	struct window w = window_of(s, st);
	r[0].requests = st->requests - s->at_open.requests;
	r[0].hits = st->hits + st->pinned_hits - s->at_open.hits - s->at_open.pinned_hits;
	r[0].bytes_read = w.bytes_read;
	r[0].disk_wait_s = w.wait_s;
	r[0].serve_s = wall;
	r[0].peak_rss_bytes = proc_status_bytes("VmHWM");
	return rc;
}

static void ranks_text(const struct session *s, const struct dist_rank_stats *r, FILE *out)
{
	int n = dist_size();
	fprintf(out, "ranks: %d, placement by %s\n", n, dist_placement_why(s->dist));
	for (int i = 0; i < n; i++) {
		if (r[i].lost_layer != DIST_LOST_NONE) {
			char at[32] = "the end";
			if (r[i].lost_layer >= 0)
				snprintf(at, sizeof at, "layer %d", r[i].lost_layer);
			fprintf(out, "  rank %d host %s: %d experts (%d held), LOST at %s: its counters went with it\n", i,
				r[i].host, r[i].experts_owned, r[i].experts_held, at);
			continue;
		}
		fprintf(out, "  rank %d host %s: %d experts (%d held, weight %.2f), %" PRIu64 " runs over %" PRIu64
			     " rows, %.1f%% from RAM, %.1f MB read, disk wait %.3f s, %s %.3f s, network %.3f s "
			     "(%.2f MB), peak %.1f MiB\n",
			i, r[i].host, r[i].experts_owned, r[i].experts_held, r[i].weight, r[i].experts_served,
			r[i].rows_served, r[i].requests ? 100.0 * r[i].hits / r[i].requests : 0, r[i].bytes_read / 1e6,
			r[i].disk_wait_s, i ? "serving" : "run", r[i].serve_s, r[i].net_s, r[i].net_bytes / 1e6,
			r[i].peak_rss_bytes / 1048576.0);
	}
}

/* "ranks" and "dist" of the JSON report. compute_s of a serving rank: its
 * time serving requests less its disk wait and network. */
static void ranks_json(const struct session *s, const struct dist_rank_stats *r, cJSON *j)
{
	int n = dist_size();
	cJSON *a = cJSON_AddArrayToObject(j, "ranks");
	double net_s = 0, net_bytes = 0;
	for (int i = 0; i < n; i++) {
		cJSON *o = cJSON_CreateObject();
		double busy = r[i].serve_s - r[i].disk_wait_s - r[i].net_s;
		cJSON_AddNumberToObject(o, "rank", i);
		cJSON_AddStringToObject(o, "host", r[i].host);
		cJSON_AddNumberToObject(o, "experts", r[i].experts_owned);
		cJSON_AddNumberToObject(o, "experts_held", r[i].experts_held);
		cJSON_AddNumberToObject(o, "weight", r[i].weight);
		cJSON_AddBoolToObject(o, "lost", r[i].lost_layer != DIST_LOST_NONE);
		if (r[i].lost_layer >= 0)
			cJSON_AddNumberToObject(o, "lost_at_layer", r[i].lost_layer);
		cJSON_AddNumberToObject(o, "experts_served", (double)r[i].experts_served);
		cJSON_AddNumberToObject(o, "rows_served", (double)r[i].rows_served);
		cJSON_AddNumberToObject(o, "expert_requests", (double)r[i].requests);
		cJSON_AddNumberToObject(o, "hit_rate", r[i].requests ? (double)r[i].hits / r[i].requests : 0);
		cJSON_AddNumberToObject(o, "bytes_read", (double)r[i].bytes_read);
		cJSON_AddNumberToObject(o, "disk_wait_s", r[i].disk_wait_s);
		cJSON_AddNumberToObject(o, "compute_s", busy > 0 ? busy : 0);
		cJSON_AddNumberToObject(o, i ? "serve_s" : "wall_s", r[i].serve_s);
		cJSON_AddNumberToObject(o, "net_s", r[i].net_s);
		cJSON_AddNumberToObject(o, "net_bytes", (double)r[i].net_bytes);
		cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)r[i].peak_rss_bytes);
		cJSON_AddItemToArray(a, o);
		net_s += r[i].net_s;
		net_bytes += (double)r[i].net_bytes;
	}
	cJSON *d = cJSON_AddObjectToObject(j, "dist");
	cJSON_AddNumberToObject(d, "ranks", n);
	cJSON_AddStringToObject(d, "placement", dist_placement_why(s->dist));
	cJSON_AddNumberToObject(d, "net_s", r[0].net_s); /* rank 0's wait for answers beyond its own experts */
	cJSON_AddNumberToObject(d, "net_bytes", (double)r[0].net_bytes);
	cJSON_AddNumberToObject(d, "net_s_all_ranks", net_s);
	cJSON_AddNumberToObject(d, "net_bytes_all_ranks", net_bytes);
}

int session_report(struct session *s, FILE *out)
{
	const struct expert_store_stats *st = expert_store_stats(s->model.store);
	double wall = clock_now_s() - s->t_open;
	struct dist_rank_stats *ranks = NULL;
	if (s->dist && (s->opt.stats || s->opt.stats_json)) {
		ranks = calloc((size_t)dist_size(), sizeof *ranks);
		if (!ranks)
			return error_set(ENOMEM, "out of memory");
		int rc = ranks_gather(s, st, wall, ranks);
		if (rc) {
			free(ranks);
			return rc;
		}
	}
	if (s->opt.stats) {
		report_text(s, st, wall, out);
		if (ranks)
			ranks_text(s, ranks, out);
	}
	int rc = s->opt.stats_json ? report_json(s, st, wall, ranks) : 0;
	free(ranks);
	return rc;
}
