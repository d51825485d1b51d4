/*
 * serve_metrics — the numbers GET /metrics reports, in Prometheus' text
 * format: requests by route and status, tokens generated and prompt tokens
 * (prefilled and cached) as counters, time to first token as a histogram,
 * generated tokens per second over the last 10 s and per second of step
 * time while generating (decode), queue length and active
 * slots, the expert store's hits (pinned, cached), misses, bytes read and
 * disk GB/s (since start, recent, and the saved disk profile's), time in
 * steps split into disk wait and compute, prefetch precision and recall,
 * the RAM budget's split, and each copy's traffic. The dashboard's state
 * (serve_live) carries the same samples as JSON, rendered by the same code
 * from the same numbers, so the two agree whenever nothing ran in between.
 *
 * The HTTP threads and the scheduler write under one mutex; the scheduler
 * copies the session's statistics in after each step, so /metrics never
 * reads the store while a step runs. Nothing here allocates but the render.
 */
#ifndef COLIBRI_ENGINE_SERVE_METRICS_H
#define COLIBRI_ENGINE_SERVE_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/expert_store.h"

struct cJSON;
struct session;

enum serve_route {
	SERVE_ROUTE_CHAT = 0,
	SERVE_ROUTE_COMPLETIONS,
	SERVE_ROUTE_MODELS,
	SERVE_ROUTE_HEALTH,
	SERVE_ROUTE_METRICS,
	SERVE_ROUTE_LIVE,            /* the dashboard's event stream */
	SERVE_ROUTE_STATE,           /* the dashboard's state, once */
	SERVE_ROUTE_UI,              /* the dashboard's static files */
	SERVE_ROUTE_OLLAMA_CHAT,     /* Ollama's API (serve_ollama.h) */
	SERVE_ROUTE_OLLAMA_GENERATE,
	SERVE_ROUTE_OLLAMA_TAGS,
	SERVE_ROUTE_OLLAMA_SHOW,
	SERVE_ROUTE_OLLAMA_PS,
	SERVE_ROUTE_OLLAMA_VERSION,
	SERVE_ROUTE_OLLAMA_EMBED,
	SERVE_ROUTE_OLLAMA_EMBEDDINGS,
	SERVE_ROUTE_LLAMA_COMPLETION, /* llama-server's API (serve_llama.h) */
	SERVE_ROUTE_LLAMA_TOKENIZE,
	SERVE_ROUTE_LLAMA_DETOKENIZE,
	SERVE_ROUTE_LLAMA_PROPS,
	SERVE_ROUTE_LLAMA_SLOTS,
	SERVE_ROUTE_OTHER,
	SERVE_ROUTES,
};

#define SERVE_TTFT_BUCKETS 14
#define SERVE_RATE_WINDOW 128        /* step samples kept for tokens per second */
#define SERVE_RATE_SECONDS 10.0

/* One copy of the experts as of the last step. */
struct serve_copy {
	uint64_t bytes_read;
	double weight;               /* its share of the striped blocks */
	bool in_rotation;            /* false: failed, waiting to be read again */
	uint64_t failures;
};

struct serve_metrics {
	pthread_mutex_t mu;
	double t_start;
	uint64_t requests[SERVE_ROUTES][600]; /* by HTTP status */
	uint64_t tokens_generated;
	uint64_t prompt_prefilled, prompt_cached;
	uint64_t ttft_bucket[SERVE_TTFT_BUCKETS + 1]; /* the last: +Inf */
	uint64_t ttft_count;
	double ttft_sum_s;
	uint64_t jobs_done;
	double job_sum_s;            /* admission to end, for Retry-After */
	int queue_len, active, slots;
	uint64_t steps, step_errors, client_drops;
	double rate_t[SERVE_RATE_WINDOW];
	uint64_t rate_tok[SERVE_RATE_WINDOW];
	uint64_t rate_bytes[SERVE_RATE_WINDOW]; /* bytes read, at each sample */
	double rate_busy_s[SERVE_RATE_WINDOW];  /* disk busy time, at each sample */
	double rate_gen_s[SERVE_RATE_WINDOW];   /* gen_step_s, at each sample */
	int rate_head, rate_n;
	double step_s;               /* summed time inside forward steps */
	double gen_step_s;           /* of it, in the steps that generated a token */
	double decode_tps;           /* tokens / gen_step_s over the last steps that generated */
	/* The session, as of the last step. */
	uint64_t expert_requests, expert_pinned_hits, expert_cached_hits, expert_joins, expert_misses;
	uint64_t bytes_read;
	double disk_busy_s, disk_gbps, disk_wait_s;
	double disk_profile_gbps;    /* 0: not profiled */
	uint64_t ram_budget, ram_resident, ram_kv, ram_scratch, ram_cache, ram_pinned, rss;
	bool prefetch_on;
	double prefetch_precision, prefetch_recall;
	int n_copies;
	struct serve_copy copies[EXPERT_COPIES_MAX];
};

void serve_metrics_init(struct serve_metrics *m, int slots);
void serve_metrics_free(struct serve_metrics *m);

void serve_metrics_request(struct serve_metrics *m, enum serve_route r, int status);
void serve_metrics_ttft(struct serve_metrics *m, double s);
void serve_metrics_prompt(struct serve_metrics *m, int prefilled, int cached);
void serve_metrics_job_done(struct serve_metrics *m, double s);
void serve_metrics_drop(struct serve_metrics *m);

/* After a step (or when idle): tokens it generated, slots active, jobs
 * queued, the seconds the step took (0: none ran), the session whose
 * store, forward and plan it reads (may be NULL), the time now. Call from
 * the thread that steps, between steps. */
void serve_metrics_step(struct serve_metrics *m, int tokens, int active, int queued, bool failed, double step_s,
			const struct session *s, double now);

/* Seconds a client refused for a full queue should wait: the mean job time
 * times the queue's turns, in [1, 60]. */
int serve_metrics_retry_after(struct serve_metrics *m);

/* The exposition text, malloc'd into *out (*len bytes). */
int serve_metrics_render(struct serve_metrics *m, const char *model_id, char **out, size_t *len);

/* The same samples as a JSON object keyed by each sample's name as the
 * text prints it (labels included), each value the number the text
 * prints; NULL when out of memory. The caller deletes it. */
struct cJSON *serve_metrics_json(struct serve_metrics *m, const char *model_id);

/* Each copy ([0] the primary) into out[]; returns how many. */
int serve_metrics_copies(struct serve_metrics *m, struct serve_copy out[EXPERT_COPIES_MAX]);

#endif
