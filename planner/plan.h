/*
 * plan — how a RAM budget is split between resident weights, the KV cache,
 * scratch and the expert cache; the IO depth and thread count; and what
 * decode speed to expect, with the bottleneck named.
 *
 * plan_compute is pure arithmetic over plain numbers (plan_inputs): the
 * model's byte sizes, the user's flags and what the machine measured
 * (plan_machine.h discovers those). The split always sums to the budget:
 *
 *     budget = resident + kv + scratch + expert_cache + slack + unused
 *
 * where expert_cache is a whole number of frames in each frame class (the
 * MoE layers whose records have one size; a frame holds one record of its
 * class), slack is the remainder smaller than a frame, and unused is what
 * the budget holds beyond caching every expert. The minimum budget is
 * resident + kv + scratch + top_k frames of every class (one token's
 * experts of a layer are pinned together, in frames of that layer's
 * class); a smaller explicit budget is refused.
 *
 * The frames of the classes (the rule the expert store applies, see
 * expert_store_split in storage/expert_store.h, and the store opens exactly
 * what the plan says): every class gets its top_k; the rest goes to the
 * main class (the most MoE layers; ties: smaller records) up to all of its
 * experts, then to the next class in that order, and so on. So an MTP
 * layer kept at int8 beside int4 routed layers costs the int4 class only
 * one token's int8 experts, not frames of twice the size for every expert.
 *
 * Speed model, per decoded token (docs/PLAN.md explains it):
 *   disk bytes    = top_k x sum over MoE layers of record bytes x (1 - hit)
 *                   hit = 0 cold; warm = a class's cached experts per layer /
 *                   n_experts for the layers of that class, which is the hit
 *                   rate under uniform routing (real routing is skewed, so
 *                   the measured rate is usually higher);
 *   memory bytes  = dense bytes a token reads + its experts + the KV cache;
 *   compute bytes = dense bytes + experts, at the measured kernel rate;
 *   seconds       = disk time + max(memory time, compute time)
 *                   (a layer's expert reads wait for its router, so reads and
 *                   compute are counted in series; prefetch only improves it).
 */
#ifndef COLIBRI_PLANNER_PLAN_H
#define COLIBRI_PLANNER_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "planner/profile.h"

#define PLAN_SCRATCH_BYTES (64ull << 20)     /* scratch when the caller gives none */
/* A loaded tokenizer keeps up to this many times the bytes of its files
 * resident (its tables, and the parse's freed heap that malloc keeps):
 * VmRSS after tokenizer_load less before is 5.4x tokenizer.json for
 * DeepSeek-V3's, 6.8x DeepSeek-V4's, 7.0x Qwen3's, 14x gpt-oss's; the
 * toy's 2.1 MiB for 128 KiB is mostly fixed cost, which the reserve holds. */
#define PLAN_TOKENIZER_FACTOR 16
#define PLAN_RESERVE_BYTES (16ull << 20)     /* the binary and its libraries (about 9 MiB resident),
					      * stacks, io_uring rings, allocator slack */
#define PLAN_OUTPUT_ROWS 7                   /* logits and sampler rows of vocab floats counted at
					      * least: run's with --draft auto, so chat's 3 and serve's
					      * --parallel + 1 up to 6 count the same */
#define PLAN_BATCH_DEFAULT 64                /* tokens per forward step (session default) */
#define PLAN_RAM_DEFAULT_FRACTION 0.85       /* share of available memory without --ram */
#define PLAN_IO_DEPTH_DEFAULT 32             /* without a disk profile */
#define PLAN_IO_DEPTH_MAX 256
#define PLAN_CTX_DEFAULT 4096                /* positions plan and doctor assume without --ctx */
#define PLAN_KNEE_FRACTION 0.9               /* io depth: least depth within 10% of the best */
#define PLAN_CLASSES_MAX 8                   /* frame classes (as EXPERT_CLASSES_MAX) */

struct plan_inputs {
	/* The model. */
	uint64_t resident_bytes;       /* resident.bin, read into RAM (all of it but embed_disk_bytes) */
	uint64_t embed_disk_bytes;     /* the embedding table left on disk, read a row per token; 0: none */
	uint64_t token_dense_bytes;    /* resident bytes one decoded token reads; 0: resident_bytes */
	int32_t n_moe_layers;          /* layers with an expert file */
	int32_t n_experts;             /* routed experts per MoE layer */
	int32_t top_k;                 /* experts per token per layer */
	uint64_t record_bytes_max;     /* largest expert record */
	uint64_t record_bytes_sum;     /* one expert of every MoE layer: sum of record_bytes */
	int32_t n_classes;             /* distinct record sizes; 0: one, record_bytes_max */
	uint64_t class_record_bytes[PLAN_CLASSES_MAX]; /* each size, ascending */
	int32_t class_layers[PLAN_CLASSES_MAX];        /* MoE layers whose records have it */
	uint64_t class_records[PLAN_CLASSES_MAX];      /* records their files hold: a shard's (colibri shard)
							* fewer; 0: n_experts per layer */
	uint64_t kv_bytes_per_position; /* what grows per position: K and V of every layer, score rows */
	const char *kv_what;         /* what that is for this attention, for the report; NULL: K and V */
	uint64_t state_fixed_bytes;    /* sequence state that does not grow with the position: recurrent and
					* convolution states (Gated DeltaNet), counted with the KV cache */
	int32_t ctx;                   /* positions the KV cache holds, >= 1 */
	uint64_t scratch_bytes;        /* everything else outside the expert cache: forward buffers,
					* logits, tokenizer, reserve; 0: PLAN_SCRATCH_BYTES */
	struct plan_scratch {          /* what scratch_bytes was sized for and holds, for the report and
					* the refusal; all zero: not known (a bare scratch_bytes) */
		int32_t batch;         /* rows of a forward step */
		int32_t threads;       /* score rows, one per thread */
		int32_t n_seqs;        /* sequences decoded together, each with its KV cache */
		int32_t logits_rows;   /* rows of vocab floats counted */
		uint64_t forward_bytes;   /* the forward pass's buffers beyond the KV cache */
		uint64_t logits_bytes;    /* logits_rows x vocab floats */
		uint64_t tokenizer_bytes; /* what a loaded tokenizer may keep resident */
		uint64_t reserve_bytes;   /* PLAN_RESERVE_BYTES */
	} scratch;
	/* The user; zero means "plan it". */
	uint64_t ram_bytes;            /* --ram SIZE */
	bool ram_min;                  /* --ram min */
	int threads;                   /* --threads */
	int io_depth;                  /* --io-depth */
	bool buffered;                 /* --no-direct: use buffered disk points */
	/* The machine; zero or NULL means unknown. */
	int physical_cores;
	int64_t available_memory_bytes;
	double membw_gbps;             /* streaming read, all cores, 1e9 B/s */
	double compute_gbps;           /* weight bytes per second the kernels consume with `threads` */
	const struct disk_profile *disk; /* the disk holding the expert files */
	double disk_gain;              /* read speed-up from mirrors (plan_machine_mirror_gain); 0: 1 */
};

enum plan_budget_source {
	PLAN_BUDGET_EXPLICIT = 0,      /* --ram SIZE */
	PLAN_BUDGET_MIN,               /* --ram min */
	PLAN_BUDGET_DEFAULT,           /* PLAN_RAM_DEFAULT_FRACTION of available, at most what is needed */
	PLAN_BUDGET_DEFAULT_LOW,       /* available memory is below the minimum: the minimum */
};

enum plan_bottleneck {
	PLAN_BOTTLENECK_UNKNOWN = 0,
	PLAN_BOTTLENECK_DISK,
	PLAN_BOTTLENECK_MEMORY,
	PLAN_BOTTLENECK_COMPUTE,
};

/* What would raise warm decode speed the most. */
enum plan_help {
	PLAN_HELP_NONE = 0,
	PLAN_HELP_PROFILE,             /* measure the disk first (colibri iobench) */
	PLAN_HELP_RAM,                 /* a larger budget: more experts cached */
	PLAN_HELP_DISK,                /* a second SSD (mirror): twice the read bandwidth */
	PLAN_HELP_MEMORY,              /* faster memory, more channels */
	PLAN_HELP_CORES,               /* more cores */
};

/* Seconds per token by resource, and the resulting speed; < 0: unknown. */
struct plan_estimate {
	double disk_s;
	double memory_s;
	double compute_s;
	double tok_s;
};

/* One frame class of the expert cache. */
struct plan_class {
	uint64_t frame_bytes;          /* its record size */
	int32_t layers;                /* MoE layers of that record size */
	uint64_t frames;
	uint64_t frames_all;           /* layers x n_experts, or the records a shard's files hold */
	double hit_rate_warm;          /* frames / frames_all */
};

struct plan {
	uint64_t budget_bytes;
	enum plan_budget_source budget_source;
	uint64_t min_bytes;            /* smallest budget that runs */
	uint64_t full_bytes;           /* smallest budget that caches every expert */
	uint64_t available_bytes;      /* memory available (cgroup limits included); 0 unknown */
	/* The split; sums to budget_bytes. */
	uint64_t resident_bytes;
	uint64_t kv_bytes;
	uint64_t scratch_bytes;
	uint64_t expert_cache_bytes;   /* sum over the classes of frames x frame_bytes */
	uint64_t slack_bytes;          /* less than one frame */
	uint64_t unused_bytes;         /* beyond caching every expert */
	uint64_t frame_bytes;          /* the main class's (the only one's): the common read */
	uint64_t frames;               /* of every class */
	uint64_t frames_all;           /* n_experts x n_moe_layers */
	uint64_t cache_bytes_all;      /* the expert cache that holds every expert */
	double frames_per_layer;
	int n_classes;                 /* frame classes, ascending frame_bytes */
	int main_class;                /* the one with the most layers */
	struct plan_class classes[PLAN_CLASSES_MAX];
	/* Threads and reads in flight: what runs, and what the plan chose. */
	int threads, threads_planned;
	int io_depth, io_depth_planned;
	bool io_depth_measured;        /* planned from the disk profile's knee */
	/* The disk point the estimates use (plan_disk_point of in->disk). */
	bool disk_known;
	double disk_gbps;              /* the point's bandwidth x disk_gain */
	double disk_gain;
	/* Per token. */
	double hit_rate_warm;
	uint64_t expert_bytes_token;   /* top_k x record_bytes_sum */
	uint64_t disk_bytes_cold;
	uint64_t disk_bytes_warm;
	uint64_t memory_bytes;
	uint64_t compute_bytes;
	struct plan_estimate cold, warm;
	enum plan_bottleneck bottleneck; /* of the warm estimate */
	enum plan_help help;
	double tok_s_two_disks;        /* warm, with twice the disk bandwidth; < 0 unknown */
	uint64_t double_ram_bytes;     /* twice the budget, at most full_bytes */
	double tok_s_double_ram;       /* warm, with that budget; < 0 unknown */
	char error[512];               /* why plan_compute failed */
};

/* The main frame class of in's classes (class_record_bytes/class_layers):
 * the one of the most MoE layers, ties to the smaller records. 0 when there
 * are none. */
int plan_main_class(const struct plan_inputs *in);

/* The smallest budget that runs: resident + KV cache + scratch + top_k
 * frames of every class (docs/PLAN.md, section 1). The one place the
 * minimum is computed: plan_compute takes it, so plan, run, chat and serve,
 * which all get their inputs from plan_container_load_shape, print, accept
 * and refuse the same number. in: inputs plan_compute accepts. */
uint64_t plan_min_bytes(const struct plan_inputs *in);

/* Computes the plan. 0, or -EINVAL (inconsistent inputs) / -ENOMEM (an
 * explicit budget below plan_min_bytes) with out->error stating the problem
 * and, for -ENOMEM, the minimum in MiB (rounded up) and bytes and what it
 * is made of. */
int plan_compute(struct plan *out, const struct plan_inputs *in);

/* The point of disk profile d that p's estimates read at: block nearest the
 * main class's frame, depth nearest min(top_k, io_depth) (one layer's reads
 * in flight), in's buffering. NULL when d is NULL or has no such point. */
const struct disk_point *plan_disk_point(const struct plan *p, const struct plan_inputs *in,
					 const struct disk_profile *d);

/* Prints one "colibri: --FLAG V overrides the plan (...)" line per explicit
 * --threads or --io-depth that differs from the planned value, and a
 * warning for an explicit --ram above the memory available. Returns the
 * number of lines. */
int plan_print_overrides(const struct plan *p, FILE *f);

const char *plan_bottleneck_name(enum plan_bottleneck b);
const char *plan_budget_source_name(enum plan_budget_source s);
const char *plan_help_name(enum plan_help h);

#endif
