/*
 * serve_metrics — the numbers GET /metrics reports, in Prometheus' text
 * format: requests by route and status, tokens generated and prompt tokens
 * (prefilled and cached) as counters, time to first token as a histogram,
 * generated tokens per second over the last 10 s, queue length and active
 * slots, and the expert store's hit rate, bytes read and disk GB/s.
 *
 * The HTTP threads and the scheduler write under one mutex; the scheduler
 * copies the store's statistics in after each step, so /metrics never reads
 * the store while a step runs. Nothing here allocates but the render.
 */
#ifndef COLIBRI_ENGINE_SERVE_METRICS_H
#define COLIBRI_ENGINE_SERVE_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct expert_store_stats;

enum serve_route {
	SERVE_ROUTE_CHAT = 0,
	SERVE_ROUTE_COMPLETIONS,
	SERVE_ROUTE_MODELS,
	SERVE_ROUTE_HEALTH,
	SERVE_ROUTE_METRICS,
	SERVE_ROUTE_OTHER,
	SERVE_ROUTES,
};

#define SERVE_TTFT_BUCKETS 14
#define SERVE_RATE_WINDOW 128        /* step samples kept for tokens per second */
#define SERVE_RATE_SECONDS 10.0

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
	int rate_head, rate_n;
	/* The store, as of the last step. */
	uint64_t expert_requests, expert_hits, expert_misses, bytes_read;
	double disk_busy_s, disk_gbps;
};

void serve_metrics_init(struct serve_metrics *m, int slots);
void serve_metrics_free(struct serve_metrics *m);

void serve_metrics_request(struct serve_metrics *m, enum serve_route r, int status);
void serve_metrics_ttft(struct serve_metrics *m, double s);
void serve_metrics_prompt(struct serve_metrics *m, int prefilled, int cached);
void serve_metrics_job_done(struct serve_metrics *m, double s);
void serve_metrics_drop(struct serve_metrics *m);

/* After a step (or when idle): tokens it generated, slots active, jobs
 * queued, the store's statistics (may be NULL), the time now. */
void serve_metrics_step(struct serve_metrics *m, int tokens, int active, int queued, bool failed,
			const struct expert_store_stats *st, double now);

/* Seconds a client refused for a full queue should wait: the mean job time
 * times the queue's turns, in [1, 60]. */
int serve_metrics_retry_after(struct serve_metrics *m);

/* The exposition text, malloc'd into *out (*len bytes). */
int serve_metrics_render(struct serve_metrics *m, const char *model_id, char **out, size_t *len);

#endif
