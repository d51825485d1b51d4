/*
 * plan — see plan.h. All sizes are uint64_t bytes; products are formed in
 * 64 bits after checking that the inputs are in range, so nothing wraps for
 * any model up to petabytes.
 */
#include "planner/plan.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "storage/expert_store.h"

_Static_assert(PLAN_CLASSES_MAX == EXPERT_CLASSES_MAX, "the planner mirrors the store's frame classes");

#define MIB (1ull << 20)
#define MIB_F 1048576.0

static int plan_fail(struct plan *p, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int plan_fail(struct plan *p, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->error, sizeof p->error, fmt, ap);
	va_end(ap);
	return -code;
}

static int check_inputs(struct plan *p, const struct plan_inputs *in)
{
	if (in->n_moe_layers < 0 || in->n_moe_layers > 4096)
		return plan_fail(p, EINVAL, "plan: %d MoE layers is out of range", in->n_moe_layers);
	if (in->n_moe_layers > 0 &&
	    (in->top_k < 1 || in->n_experts < in->top_k || in->n_experts > (1 << 20) || in->record_bytes_max == 0 ||
	     in->record_bytes_max > (1ull << 40) || in->record_bytes_sum < in->record_bytes_max ||
	     in->record_bytes_sum > (uint64_t)in->n_moe_layers * in->record_bytes_max))
		return plan_fail(p, EINVAL, "plan: inconsistent expert sizes (top_k %d of %d experts, records of %" PRIu64
				 " bytes, %" PRIu64 " per token-layer sum)", in->top_k, in->n_experts,
				 in->record_bytes_max, in->record_bytes_sum);
	if (in->ctx < 1 || in->kv_bytes_per_position > (1ull << 32) || in->resident_bytes > (1ull << 50))
		return plan_fail(p, EINVAL, "plan: context %d or model sizes out of range", in->ctx);
	if (in->n_moe_layers == 0 || in->n_classes == 0)
		return 0;
	if (in->n_classes < 0 || in->n_classes > PLAN_CLASSES_MAX)
		return plan_fail(p, EINVAL, "plan: %d record sizes (at most %d)", in->n_classes, PLAN_CLASSES_MAX);
	int32_t layers = 0;
	uint64_t sum = 0;
	for (int c = 0; c < in->n_classes; c++) {
		uint64_t rb = in->class_record_bytes[c];
		if (rb == 0 || rb > in->record_bytes_max || (c > 0 && rb <= in->class_record_bytes[c - 1]) ||
		    in->class_layers[c] < 1 || in->class_layers[c] > in->n_moe_layers)
			return plan_fail(p, EINVAL, "plan: record size class %d (%" PRIu64 " bytes, %d layers) is "
					 "inconsistent", c, rb, in->class_layers[c]);
		layers += in->class_layers[c];
		sum += rb * (uint64_t)in->class_layers[c];
	}
	if (layers != in->n_moe_layers || sum != in->record_bytes_sum ||
	    in->class_record_bytes[in->n_classes - 1] != in->record_bytes_max)
		return plan_fail(p, EINVAL, "plan: the record size classes (%d layers, %" PRIu64 " bytes per token-layer "
				 "sum) do not add up to the model's", layers, sum);
	return 0;
}

/* The frame classes of the inputs: as given, or one class of the largest
 * record for every MoE layer; and the main class, of the most layers
 * (ties: the smaller records). */
static void classes_init(struct plan *p, const struct plan_inputs *in)
{
	if (in->n_moe_layers == 0)
		return;
	p->n_classes = in->n_classes > 0 ? in->n_classes : 1;
	for (int c = 0; c < p->n_classes; c++) {
		struct plan_class *pc = &p->classes[c];
		pc->frame_bytes = in->n_classes > 0 ? in->class_record_bytes[c] : in->record_bytes_max;
		pc->layers = in->n_classes > 0 ? in->class_layers[c] : in->n_moe_layers;
		pc->frames_all = in->n_classes > 0 && in->class_records[c] ? in->class_records[c]
									   : (uint64_t)in->n_experts * (uint64_t)pc->layers;
	}
	p->main_class = in->n_classes > 0 ? plan_main_class(in) : 0;
}

int plan_main_class(const struct plan_inputs *in)
{
	int best = 0;
	for (int c = 1; c < in->n_classes; c++)
		if (in->class_layers[c] > in->class_layers[best])
			best = c; /* ascending sizes: a tie keeps the smaller */
	return best;
}

static uint64_t kv_bytes_of(const struct plan_inputs *in)
{
	return in->kv_bytes_per_position * (uint64_t)in->ctx + in->state_fixed_bytes;
}

static uint64_t scratch_bytes_of(const struct plan_inputs *in)
{
	return in->scratch_bytes ? in->scratch_bytes : PLAN_SCRATCH_BYTES;
}

/* One token's experts: top_k frames of every class. */
static uint64_t one_token_bytes(const struct plan_inputs *in)
{
	if (in->n_moe_layers == 0)
		return 0;
	if (in->n_classes == 0)
		return (uint64_t)in->top_k * in->record_bytes_max;
	uint64_t sum = 0;
	for (int c = 0; c < in->n_classes; c++)
		sum += (uint64_t)in->top_k * in->class_record_bytes[c];
	return sum;
}

uint64_t plan_min_bytes(const struct plan_inputs *in)
{
	return in->resident_bytes + kv_bytes_of(in) + scratch_bytes_of(in) + one_token_bytes(in);
}

/* What the scratch of the refusal holds, when the inputs say. */
static void scratch_parts_str(char *buf, size_t len, const struct plan_inputs *in)
{
	const struct plan_scratch *s = &in->scratch;
	if (!s->batch) {
		buf[0] = 0;
		return;
	}
	snprintf(buf, len, " (forward buffers %.1f MiB for batch %d, %d threads and %d sequence%s; %d logits rows "
			   "%.1f MiB; tokenizer %.1f MiB; reserve %.1f MiB)",
		 s->forward_bytes / MIB_F, s->batch, s->threads, s->n_seqs, s->n_seqs == 1 ? "" : "s", s->logits_rows,
		 s->logits_bytes / MIB_F, s->tokenizer_bytes / MIB_F, s->reserve_bytes / MIB_F);
}

/* Chooses the budget; refuses an explicit one below the minimum. */
static int choose_budget(struct plan *p, const struct plan_inputs *in)
{
	if (in->ram_min) {
		p->budget_bytes = p->min_bytes;
		p->budget_source = PLAN_BUDGET_MIN;
	} else if (in->ram_bytes) {
		p->available_bytes = in->available_memory_bytes > 0 ? (uint64_t)in->available_memory_bytes : 0;
		if (in->ram_bytes < p->min_bytes) {
			/* The minimum rounded up, so that passing the stated number
			 * works; the budget exact, or a budget a byte short reads
			 * as the minimum itself. */
			uint64_t min_mib = (p->min_bytes + MIB - 1) / MIB;
			char parts[256];
			scratch_parts_str(parts, sizeof parts, in);
			return plan_fail(p, ENOMEM,
					 "--ram %.1f MiB (%" PRIu64 " bytes) is below the minimum of %" PRIu64 " MiB (%" PRIu64
					 " bytes) for this model: resident weights %.1f MiB + KV cache %.1f MiB for %d positions "
					 "+ one token's %d experts %.1f MiB + scratch %.1f MiB%s; pass --ram min to run at the "
					 "minimum", in->ram_bytes / MIB_F, in->ram_bytes, min_mib, p->min_bytes,
					 p->resident_bytes / MIB_F, p->kv_bytes / MIB_F, in->ctx, in->top_k,
					 one_token_bytes(in) / MIB_F, p->scratch_bytes / MIB_F, parts);
		}
		p->budget_bytes = in->ram_bytes;
		p->budget_source = PLAN_BUDGET_EXPLICIT;
	} else {
		double share = in->available_memory_bytes > 0
				       ? (double)in->available_memory_bytes * PLAN_RAM_DEFAULT_FRACTION : 0;
		uint64_t b = (uint64_t)share;
		if (b < p->min_bytes) {
			p->budget_bytes = p->min_bytes;
			p->budget_source = PLAN_BUDGET_DEFAULT_LOW;
		} else {
			p->budget_bytes = b < p->full_bytes ? b : p->full_bytes;
			p->budget_source = PLAN_BUDGET_DEFAULT;
		}
	}
	return 0;
}

/* Frames of each class that a budget buys (the rule of plan.h): top_k of
 * every class first, then the classes in order of layers (most first; ties:
 * smaller records), each up to all its experts. Returns their sum. */
static uint64_t frames_for(const struct plan *p, const struct plan_inputs *in, uint64_t budget,
			   uint64_t frames[PLAN_CLASSES_MAX])
{
	uint64_t fixed = p->resident_bytes + p->kv_bytes + p->scratch_bytes, total = 0;
	uint64_t fb[PLAN_CLASSES_MAX] = {0}, mx[PLAN_CLASSES_MAX] = {0};
	int32_t nl[PLAN_CLASSES_MAX] = {0};
	for (int c = 0; c < p->n_classes; c++) {
		fb[c] = p->classes[c].frame_bytes;
		nl[c] = p->classes[c].layers;
		mx[c] = p->classes[c].frames_all;
	}
	expert_frames_split(p->n_classes, fb, nl, mx, (uint64_t)in->top_k, budget > fixed ? budget - fixed : 0,
			    frames);
	for (int c = 0; c < p->n_classes; c++)
		total += frames[c];
	return total;
}

/* The share of a token's expert bytes the frames hold under uniform
 * routing: each class's cached share of its experts, weighted by the bytes
 * of its layers' records. */
static double hit_rate(const struct plan *p, const uint64_t frames[PLAN_CLASSES_MAX])
{
	double hit = 0, all = 0;
	for (int c = 0; c < p->n_classes; c++) {
		const struct plan_class *pc = &p->classes[c];
		double h = frames[c] >= pc->frames_all ? 1.0 : (double)frames[c] / (double)pc->frames_all;
		double w = (double)pc->frame_bytes * pc->layers;
		hit += h * w;
		all += w;
	}
	return all > 0 ? hit / all : 1.0;
}

/* The io depth from the profile: the least depth within PLAN_KNEE_FRACTION
 * of the best bandwidth at the block size nearest the frame. 0 if unknown. */
static int knee_depth(const struct plan_inputs *in, uint64_t frame)
{
	const struct disk_point *near = disk_profile_nearest(in->disk, frame, 1, in->buffered);
	if (!near)
		return 0;
	double best = 0;
	int knee = 0;
	for (int i = 0; i < in->disk->n_points; i++) {
		const struct disk_point *q = &in->disk->points[i];
		if (q->block_bytes == near->block_bytes && q->buffered == in->buffered && q->gbps > best)
			best = q->gbps;
	}
	for (int i = 0; i < in->disk->n_points; i++) {
		const struct disk_point *q = &in->disk->points[i];
		if (q->block_bytes == near->block_bytes && q->buffered == in->buffered &&
		    q->gbps >= PLAN_KNEE_FRACTION * best && (!knee || q->depth < knee))
			knee = q->depth;
	}
	return knee;
}

static double seconds(uint64_t bytes, double gbps)
{
	if (bytes == 0)
		return 0;
	return gbps > 0 ? (double)bytes / (gbps * 1e9) : -1;
}

/* Disk time, then max(memory, compute); unknown parts make speed unknown,
 * except that memory and compute need only one of the two known. */
static struct plan_estimate estimate(const struct plan *p, const struct plan_inputs *in, uint64_t disk_bytes,
				     double disk_gbps)
{
	struct plan_estimate e = {
		.disk_s = seconds(disk_bytes, disk_gbps),
		.memory_s = seconds(p->memory_bytes, in->membw_gbps),
		.compute_s = seconds(p->compute_bytes, in->compute_gbps),
		.tok_s = -1,
	};
	double core = e.memory_s > e.compute_s ? e.memory_s : e.compute_s;
	if (e.disk_s >= 0 && core >= 0 && e.disk_s + core > 0)
		e.tok_s = 1.0 / (e.disk_s + core);
	return e;
}

static void choose_bottleneck(struct plan *p)
{
	const struct plan_estimate *w = &p->warm;
	if (w->disk_s < 0) {
		p->bottleneck = PLAN_BOTTLENECK_UNKNOWN;
		p->help = PLAN_HELP_PROFILE;
		return;
	}
	double worst = w->disk_s;
	p->bottleneck = PLAN_BOTTLENECK_DISK;
	if (w->memory_s > worst) {
		worst = w->memory_s;
		p->bottleneck = PLAN_BOTTLENECK_MEMORY;
	}
	if (w->compute_s > worst) {
		worst = w->compute_s;
		p->bottleneck = PLAN_BOTTLENECK_COMPUTE;
	}
	if (worst <= 0)
		p->bottleneck = PLAN_BOTTLENECK_UNKNOWN;
	if (p->bottleneck == PLAN_BOTTLENECK_MEMORY)
		p->help = PLAN_HELP_MEMORY;
	else if (p->bottleneck == PLAN_BOTTLENECK_COMPUTE)
		p->help = PLAN_HELP_CORES;
	else if (p->bottleneck == PLAN_BOTTLENECK_DISK)
		p->help = p->tok_s_double_ram > p->tok_s_two_disks ? PLAN_HELP_RAM : PLAN_HELP_DISK;
}

const struct disk_point *plan_disk_point(const struct plan *p, const struct plan_inputs *in,
					 const struct disk_profile *d)
{
	int per_layer = in->top_k < p->io_depth ? in->top_k : p->io_depth;
	return disk_profile_nearest(d, p->frame_bytes, per_layer, in->buffered);
}

int plan_compute(struct plan *p, const struct plan_inputs *in)
{
	memset(p, 0, sizeof *p);
	int rc = check_inputs(p, in);
	if (rc)
		return rc;
	bool moe = in->n_moe_layers > 0;
	p->resident_bytes = in->resident_bytes;
	p->kv_bytes = kv_bytes_of(in);
	p->scratch_bytes = scratch_bytes_of(in);
	classes_init(p, in);
	p->frame_bytes = moe ? p->classes[p->main_class].frame_bytes : 0;
	uint64_t fixed = p->resident_bytes + p->kv_bytes + p->scratch_bytes;
	for (int c = 0; c < p->n_classes; c++) {
		p->frames_all += p->classes[c].frames_all;
		p->cache_bytes_all += p->classes[c].frames_all * p->classes[c].frame_bytes;
	}
	p->min_bytes = plan_min_bytes(in);
	p->full_bytes = fixed + p->cache_bytes_all;
	if ((rc = choose_budget(p, in)))
		return rc;

	uint64_t frames[PLAN_CLASSES_MAX] = {0};
	p->frames = frames_for(p, in, p->budget_bytes, frames);
	for (int c = 0; c < p->n_classes; c++) {
		struct plan_class *pc = &p->classes[c];
		pc->frames = frames[c];
		pc->hit_rate_warm = pc->frames_all ? (double)pc->frames / (double)pc->frames_all : 1.0;
		p->expert_cache_bytes += pc->frames * pc->frame_bytes;
	}
	uint64_t rest = p->budget_bytes - fixed - p->expert_cache_bytes;
	if (p->frames == p->frames_all)
		p->unused_bytes = rest;
	else
		p->slack_bytes = rest;
	p->frames_per_layer = moe ? (double)p->frames / in->n_moe_layers : 0;
	p->hit_rate_warm = hit_rate(p, frames);

	p->threads_planned = in->physical_cores > 0 ? in->physical_cores : 1;
	p->threads = in->threads > 0 ? in->threads : p->threads_planned;
	int knee = knee_depth(in, p->frame_bytes);
	p->io_depth_measured = knee > 0;
	p->io_depth_planned = knee > 0 ? knee : PLAN_IO_DEPTH_DEFAULT;
	if (p->io_depth_planned < in->top_k)
		p->io_depth_planned = in->top_k;
	if (p->io_depth_planned > PLAN_IO_DEPTH_MAX)
		p->io_depth_planned = PLAN_IO_DEPTH_MAX;
	if (p->io_depth_planned < 1)
		p->io_depth_planned = 1;
	p->io_depth = in->io_depth > 0 ? in->io_depth : p->io_depth_planned;

	const struct disk_point *pt = plan_disk_point(p, in, in->disk);
	p->disk_gain = in->disk_gain >= 1 ? in->disk_gain : 1;
	if (pt) {
		p->disk_known = true;
		p->disk_gbps = pt->gbps * p->disk_gain;
	}

	uint64_t dense = in->token_dense_bytes ? in->token_dense_bytes : in->resident_bytes;
	p->expert_bytes_token = moe ? (uint64_t)in->top_k * in->record_bytes_sum : 0;
	p->disk_bytes_cold = p->expert_bytes_token;
	p->disk_bytes_warm = (uint64_t)((double)p->expert_bytes_token * (1.0 - p->hit_rate_warm) + 0.5);
	p->memory_bytes = dense + p->expert_bytes_token + p->kv_bytes;
	p->compute_bytes = dense + p->expert_bytes_token;
	p->cold = estimate(p, in, p->disk_bytes_cold, p->disk_gbps);
	p->warm = estimate(p, in, p->disk_bytes_warm, p->disk_gbps);

	p->tok_s_two_disks = estimate(p, in, p->disk_bytes_warm, 2 * p->disk_gbps).tok_s;
	uint64_t twice = p->budget_bytes * 2;
	p->double_ram_bytes = twice < p->full_bytes ? twice : p->full_bytes;
	uint64_t frames2[PLAN_CLASSES_MAX] = {0};
	frames_for(p, in, p->double_ram_bytes, frames2);
	double h2 = hit_rate(p, frames2);
	uint64_t disk2 = (uint64_t)((double)p->expert_bytes_token * (1.0 - h2) + 0.5);
	p->tok_s_double_ram = estimate(p, in, disk2, p->disk_gbps).tok_s;
	choose_bottleneck(p);
	return 0;
}

int plan_print_overrides(const struct plan *p, FILE *f)
{
	int n = 0;
	if (p->budget_source == PLAN_BUDGET_EXPLICIT && p->available_bytes && p->budget_bytes > p->available_bytes) {
		/* The plan spends at most full_bytes whatever the budget. */
		uint64_t use = p->budget_bytes < p->full_bytes ? p->budget_bytes : p->full_bytes;
		fprintf(f, "colibri: warning: --ram %.1f GiB is more than the %.1f GiB of memory available (cgroup "
			   "limits included); %s\n", p->budget_bytes / 1073741824.0, p->available_bytes / 1073741824.0,
			use > p->available_bytes ? "the run may swap or be killed for lack of memory"
						 : "the model needs less, so the run uses only that");
		n++;
	}
	if (p->threads != p->threads_planned) {
		fprintf(f, "colibri: --threads %d overrides the plan (%d, the physical cores)\n", p->threads,
			p->threads_planned);
		n++;
	}
	if (p->io_depth != p->io_depth_planned) {
		fprintf(f, "colibri: --io-depth %d overrides the plan (%d, %s)\n", p->io_depth, p->io_depth_planned,
			p->io_depth_measured ? "the knee of the disk profile" : "the default without a disk profile");
		n++;
	}
	return n;
}

const char *plan_bottleneck_name(enum plan_bottleneck b)
{
	switch (b) {
	case PLAN_BOTTLENECK_DISK: return "disk";
	case PLAN_BOTTLENECK_MEMORY: return "memory";
	case PLAN_BOTTLENECK_COMPUTE: return "compute";
	case PLAN_BOTTLENECK_UNKNOWN: break;
	}
	return "unknown";
}

const char *plan_budget_source_name(enum plan_budget_source s)
{
	switch (s) {
	case PLAN_BUDGET_EXPLICIT: return "explicit";
	case PLAN_BUDGET_MIN: return "min";
	case PLAN_BUDGET_DEFAULT: return "default";
	case PLAN_BUDGET_DEFAULT_LOW: return "default_below_min";
	}
	return "unknown";
}

const char *plan_help_name(enum plan_help h)
{
	switch (h) {
	case PLAN_HELP_PROFILE: return "profile_disk";
	case PLAN_HELP_RAM: return "more_ram";
	case PLAN_HELP_DISK: return "second_ssd";
	case PLAN_HELP_MEMORY: return "faster_memory";
	case PLAN_HELP_CORES: return "more_cores";
	case PLAN_HELP_NONE: break;
	}
	return "none";
}
