/*
 * session — what every command that runs a model shares: the common
 * options (--model, --threads, --ctx, --batch, --ram, --io-depth,
 * --no-direct, --stats, --stats-json, --chat-template), loading the model,
 * the thread pool and the forward state, and the statistics report.
 */
#ifndef COLIBRI_ENGINE_SESSION_H
#define COLIBRI_ENGINE_SESSION_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/decode/plan_container.h"
#include "engine/dist/dist.h"
#include "engine/forward/forward.h"
#include "engine/model/model.h"
#include "storage/pinning.h"

struct threadpool;
struct tokenizer;

struct session_options {
	const char *model_dir;
	int threads;                 /* 0: physical cores */
	int ctx;                     /* 0: prompt + generation, at most the model's max */
	int batch;                   /* tokens per forward step (prefill chunk) */
	uint64_t ram_bytes;          /* 0: no limit given */
	bool ram_min;                /* --ram min */
	int io_depth;                /* 0: planned from the disk profile */
	bool buffered;
	bool stats;
	const char *stats_json;
	bool no_prefetch;            /* do not predict and prefetch the next layer */
	bool no_pin;                 /* do not pin the learned hottest experts */
	int repin;                   /* swaps allowed at each safe point (--repin N) */
	int logits_rows;             /* logits rows the command holds at once (1 for run) */
	int parallel;                /* sequences decoded together (serve's --parallel; 1 otherwise) */
	struct placement_spec placement; /* under mpirun: which rank serves which experts (--placement),
					  * how many hold each (--replicas) */
	double dist_timeout_s;       /* under mpirun: how long a rank may stay silent (--dist-timeout) */
	const char *chat_template;   /* --chat-template: Jinja text that replaces the model's (NULL: its own) */
	const char *chat_template_file; /* --chat-template-file: the same, read from a file */
};

enum {
	SESSION_OPT_MODEL = 1000,
	SESSION_OPT_THREADS,
	SESSION_OPT_CTX,
	SESSION_OPT_BATCH,
	SESSION_OPT_RAM,
	SESSION_OPT_IO_DEPTH,
	SESSION_OPT_NO_DIRECT,
	SESSION_OPT_STATS,
	SESSION_OPT_STATS_JSON,
	SESSION_OPT_NO_PREFETCH,
	SESSION_OPT_NO_PIN,
	SESSION_OPT_REPIN,
	SESSION_OPT_PLACEMENT,
	SESSION_OPT_DIST_TIMEOUT,
	SESSION_OPT_REPLICAS,
	SESSION_OPT_CHAT_TEMPLATE,
	SESSION_OPT_CHAT_TEMPLATE_FILE,
};

#define SESSION_LONG_OPTIONS                                                  \
	{ "model", required_argument, 0, SESSION_OPT_MODEL },                 \
	{ "threads", required_argument, 0, SESSION_OPT_THREADS },             \
	{ "ctx", required_argument, 0, SESSION_OPT_CTX },                     \
	{ "batch", required_argument, 0, SESSION_OPT_BATCH },                 \
	{ "ram", required_argument, 0, SESSION_OPT_RAM },                     \
	{ "io-depth", required_argument, 0, SESSION_OPT_IO_DEPTH },           \
	{ "no-direct", no_argument, 0, SESSION_OPT_NO_DIRECT },               \
	{ "stats", no_argument, 0, SESSION_OPT_STATS },                       \
	{ "stats-json", required_argument, 0, SESSION_OPT_STATS_JSON },       \
	{ "no-prefetch", no_argument, 0, SESSION_OPT_NO_PREFETCH },           \
	{ "no-pin", no_argument, 0, SESSION_OPT_NO_PIN },                     \
	{ "repin", required_argument, 0, SESSION_OPT_REPIN },                 \
	{ "placement", required_argument, 0, SESSION_OPT_PLACEMENT },         \
	{ "dist-timeout", required_argument, 0, SESSION_OPT_DIST_TIMEOUT },   \
	{ "replicas", required_argument, 0, SESSION_OPT_REPLICAS },           \
	{ "chat-template", required_argument, 0, SESSION_OPT_CHAT_TEMPLATE }, \
	{ "chat-template-file", required_argument, 0, SESSION_OPT_CHAT_TEMPLATE_FILE }

#define SESSION_USAGE                                                         \
	"\n  common: [--threads N] [--ctx N] [--batch N] [--ram SIZE|min] [--io-depth N]" \
	" [--no-direct]\n          [--no-prefetch] [--no-pin] [--repin N] [--stats] [--stats-json FILE]" \
	"\n          [--chat-template JINJA | --chat-template-file FILE] (instead of the model's own)" \
	"\n  under mpirun: [--placement auto|even|W0,W1,..] [--replicas K] [--dist-timeout SECONDS]"

#define SESSION_EXTRA_MAX 32

/* The --ram promise: the peak resident set stays within the budget plus
 * this slack. */
#define SESSION_RAM_SLACK (32ull << 20)

/* A named number a command adds to the --stats-json report. */
struct session_stat {
	const char *name;        /* static string */
	double value;
};

/* The plan's RAM split (planner/plan.h; the parts sum to about budget_bytes)
 * and the saved disk profile's bandwidth for the store's reads. */
struct session_plan {
	uint64_t budget_bytes;
	uint64_t resident_bytes;     /* dense weights */
	uint64_t kv_bytes;           /* sequence state */
	uint64_t scratch_bytes;
	uint64_t expert_cache_bytes; /* the frames */
	double disk_gbps;            /* random reads of a frame at the IO depth; 0: not profiled */
};

struct session {
	struct session_options opt;
	struct model model;
	struct threadpool *pool;
	struct forward fwd;
	bool model_loaded, fwd_ready;
	struct pinning pin;
	bool pin_ready;
	double t_open;           /* when the model finished loading: the report's window starts here */
	double load_s;           /* reading and checking the resident weights (model_load) */
	double pin_s;            /* loading the learned pinned set (pinning_start) */
	struct expert_store_stats at_open; /* the store's counters at t_open: the start-up's reads, which
				  * the report puts apart from the run's */
	int pins_at_open;        /* experts the start-up pinned */
	struct session_plan plan; /* what the plan settled on */
	struct session_stat extra[SESSION_EXTRA_MAX];
	size_t n_extra;
	struct dist *dist;       /* under mpirun: the job's ranks (rank 0 sends them experts) */
};

void session_options_default(struct session_options *o);

/* What the RAM minimum of a session of these options at ctx positions
 * counts (plan_container_load_shape): the one mapping that plan and
 * session_open both use. */
struct plan_shape session_plan_shape(const struct session_options *o, int ctx);

/* Applies one parsed option (ch from SESSION_LONG_OPTIONS). Returns 0 if
 * handled, -EINVAL with a message for a bad value, -ENOENT if ch is not a
 * session option. */
int session_option(struct session_options *o, int ch, const char *arg);

/* Applies --chat-template or --chat-template-file to tok, once the command
 * has loaded it: the Jinja text then replaces the model's own template. A
 * value of --chat-template without "{%" or "{{" (llama.cpp's built-in
 * names: chatml, llama3 ...), an empty or unreadable file and both options
 * together are -EINVAL (or -errno) with a message naming the option or the
 * file, tok untouched. 0 when neither is given. */
int session_chat_template(const struct session_options *o, struct tokenizer *tok);

/* Parses a decimal integer in [lo, hi] for option --name; -EINVAL with a
 * message naming the option otherwise (empty, trailing text, overflow). */
int session_parse_int(const char *name, const char *arg, int lo, int hi, int *out);
/* A float option --name in [lo, hi]; 0, or -EINVAL with a message naming it. */
int session_parse_float(const char *name, const char *arg, float lo, float hi, float *out);

/* Parses --seed: decimal digits only, at most 2^64 - 1 ("-1" is refused,
 * not wrapped). */
int session_parse_seed(const char *arg, uint64_t *out);

/* 0 when dir is a folder holding manifest.json; else -errno with a message
 * saying what dir is instead (missing, not a folder, not a container). */
int session_check_model(const char *dir);

/* Parses "24G", "512M", "1.5T", "64K", "1000B" (bytes) or a plain number of GiB. */
int session_parse_size(const char *s, uint64_t *bytes);

/* Parses "1,2,3" (and, with ranges, "0-3,7") of numbers 0..max into a
 * malloc'd array; empty input, empty items and a trailing comma are refused
 * with a message naming `what`. */
int session_parse_list(const char *s, const char *what, bool ranges, int32_t max, int32_t **out, int *n);

/* Token ids: session_parse_list without ranges. */
int session_parse_tokens(const char *s, int32_t **ids, int *n);

/* Loads the model and prepares a forward with room for need_ctx positions
 * (or opt.ctx when set). Under mpirun (rank 0) it then joins the other
 * ranks, which serve their share of the routed experts. session_close is
 * safe after a failure. */
int session_open(struct session *s, const struct session_options *o, int need_ctx);

/* A serving rank of an MPI job (ranks 1..), after dist_agree gave it rank
 * 0's settings (agreed): loads the model with its own options (--ram,
 * --io-depth, --threads...), joins and serves until rank 0 is done.
 * rc_args: its options' error, which it then tells the other ranks
 * instead. */
int session_serve(const struct session_options *o, const struct dist_options *agreed, int rc_args);
void session_close(struct session *s);

/* A safe point between steps: applies --repin. */
void session_safe_point(struct session *s);

/* Adds a number to the --stats-json report (e.g. decode_tok_s). */
void session_stat(struct session *s, const char *name, double value);

/* Prints the storage, disk and memory statistics when --stats, and writes
 * them with the extra numbers to --stats-json. */
int session_report(struct session *s, FILE *out);

#endif
