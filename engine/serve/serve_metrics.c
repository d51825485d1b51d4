/*
 * serve_metrics — see serve_metrics.h. Metric names carry the colibri_
 * prefix and Prometheus' unit suffixes (_total, _seconds, _bytes).
 */
#include "engine/serve/serve_metrics.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/strbuf.h"
#include "storage/expert_store.h"

static const double ttft_le[SERVE_TTFT_BUCKETS] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
						    1, 2.5, 5, 10, 30, 60, 120 };
static const char *const route_names[SERVE_ROUTES] = { "/v1/chat/completions", "/v1/completions", "/v1/models",
						       "/health", "/metrics", "other" };

void serve_metrics_init(struct serve_metrics *m, int slots)
{
	memset(m, 0, sizeof *m);
	pthread_mutex_init(&m->mu, NULL);
	m->t_start = clock_now_s();
	m->slots = slots;
}

void serve_metrics_free(struct serve_metrics *m)
{
	pthread_mutex_destroy(&m->mu);
}

void serve_metrics_request(struct serve_metrics *m, enum serve_route r, int status)
{
	if (status < 0 || status >= 600 || (unsigned)r >= SERVE_ROUTES)
		return;
	pthread_mutex_lock(&m->mu);
	m->requests[r][status]++;
	pthread_mutex_unlock(&m->mu);
}

void serve_metrics_ttft(struct serve_metrics *m, double s)
{
	pthread_mutex_lock(&m->mu);
	int b = 0;
	while (b < SERVE_TTFT_BUCKETS && s > ttft_le[b])
		b++;
	m->ttft_bucket[b]++;
	m->ttft_count++;
	m->ttft_sum_s += s;
	pthread_mutex_unlock(&m->mu);
}

void serve_metrics_prompt(struct serve_metrics *m, int prefilled, int cached)
{
	pthread_mutex_lock(&m->mu);
	m->prompt_prefilled += (uint64_t)prefilled;
	m->prompt_cached += (uint64_t)cached;
	pthread_mutex_unlock(&m->mu);
}

void serve_metrics_job_done(struct serve_metrics *m, double s)
{
	pthread_mutex_lock(&m->mu);
	m->jobs_done++;
	m->job_sum_s += s;
	pthread_mutex_unlock(&m->mu);
}

void serve_metrics_drop(struct serve_metrics *m)
{
	pthread_mutex_lock(&m->mu);
	m->client_drops++;
	pthread_mutex_unlock(&m->mu);
}

void serve_metrics_step(struct serve_metrics *m, int tokens, int active, int queued, bool failed,
			const struct expert_store_stats *st, double now)
{
	pthread_mutex_lock(&m->mu);
	m->tokens_generated += (uint64_t)tokens;
	m->active = active;
	m->queue_len = queued;
	if (tokens || failed)
		m->steps++;
	m->step_errors += failed;
	int at = (m->rate_head + m->rate_n) % SERVE_RATE_WINDOW;
	if (m->rate_n == SERVE_RATE_WINDOW)
		m->rate_head = (m->rate_head + 1) % SERVE_RATE_WINDOW;
	else
		m->rate_n++;
	m->rate_t[at] = now;
	m->rate_tok[at] = m->tokens_generated;
	if (st) {
		m->expert_requests = st->requests;
		m->expert_hits = st->hits + st->pinned_hits;
		m->expert_misses = st->misses;
		m->bytes_read = st->bytes_read;
		m->disk_busy_s = st->disk_busy_s;
		m->disk_gbps = st->disk_gbps;
	}
	pthread_mutex_unlock(&m->mu);
}

int serve_metrics_retry_after(struct serve_metrics *m)
{
	pthread_mutex_lock(&m->mu);
	double mean = m->jobs_done ? m->job_sum_s / (double)m->jobs_done : 1;
	double turns = m->slots ? (double)(m->queue_len + 1) / m->slots : 1;
	pthread_mutex_unlock(&m->mu);
	double s = mean * turns;
	return s < 1 ? 1 : s > 60 ? 60 : (int)(s + 0.5);
}

/* Tokens per second over the samples of the last SERVE_RATE_SECONDS. */
static double rate_locked(const struct serve_metrics *m, double now)
{
	if (m->rate_n == 0)
		return 0;
	int last = (m->rate_head + m->rate_n - 1) % SERVE_RATE_WINDOW;
	int first = last;
	for (int k = m->rate_n - 2; k >= 0; k--) {
		int i = (m->rate_head + k) % SERVE_RATE_WINDOW;
		if (now - m->rate_t[i] > SERVE_RATE_SECONDS)
			break;
		first = i;
	}
	double span = now - m->rate_t[first];
	if (span < 1e-3 || now - m->rate_t[last] > SERVE_RATE_SECONDS)
		return 0;
	return (double)(m->rate_tok[last] - m->rate_tok[first]) / span;
}

static void head(struct strbuf *t, const char *name, const char *type, const char *help)
{
	strbuf_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

int serve_metrics_render(struct serve_metrics *m, const char *model_id, char **out, size_t *len)
{
	struct strbuf t = { 0 };
	strbuf_put(&t, "", 0);	/* text even when empty */
	double now = clock_now_s();
	pthread_mutex_lock(&m->mu);
	head(&t, "colibri_requests_total", "counter", "HTTP requests answered, by route and status.");
	for (int r = 0; r < SERVE_ROUTES; r++)
		for (int s = 0; s < 600; s++)
			if (m->requests[r][s])
				strbuf_printf(&t, "colibri_requests_total{route=\"%s\",status=\"%d\"} %llu\n", route_names[r], s,
					      (unsigned long long)m->requests[r][s]);
	head(&t, "colibri_generated_tokens_total", "counter", "Tokens generated (EOS not counted).");
	strbuf_printf(&t, "colibri_generated_tokens_total %llu\n", (unsigned long long)m->tokens_generated);
	head(&t, "colibri_prompt_tokens_total", "counter", "Prompt tokens, by whether they were prefilled or came from the prompt cache.");
	strbuf_printf(&t, "colibri_prompt_tokens_total{kind=\"prefilled\"} %llu\n", (unsigned long long)m->prompt_prefilled);
	strbuf_printf(&t, "colibri_prompt_tokens_total{kind=\"cached\"} %llu\n", (unsigned long long)m->prompt_cached);
	head(&t, "colibri_tokens_per_second", "gauge", "Tokens generated per second over the last 10 s, all requests together.");
	strbuf_printf(&t, "colibri_tokens_per_second %.3f\n", rate_locked(m, now));
	head(&t, "colibri_time_to_first_token_seconds", "histogram", "From admission to a request's first token.");
	uint64_t cum = 0;
	for (int b = 0; b < SERVE_TTFT_BUCKETS; b++) {
		cum += m->ttft_bucket[b];
		strbuf_printf(&t, "colibri_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n", ttft_le[b], (unsigned long long)cum);
	}
	strbuf_printf(&t, "colibri_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)m->ttft_count);
	strbuf_printf(&t, "colibri_time_to_first_token_seconds_sum %.6f\n", m->ttft_sum_s);
	strbuf_printf(&t, "colibri_time_to_first_token_seconds_count %llu\n", (unsigned long long)m->ttft_count);
	head(&t, "colibri_queue_length", "gauge", "Requests waiting for a slot.");
	strbuf_printf(&t, "colibri_queue_length %d\n", m->queue_len);
	head(&t, "colibri_active_slots", "gauge", "Slots prefilling or decoding.");
	strbuf_printf(&t, "colibri_active_slots %d\n", m->active);
	head(&t, "colibri_slots", "gauge", "Slots (--parallel).");
	strbuf_printf(&t, "colibri_slots %d\n", m->slots);
	head(&t, "colibri_steps_total", "counter", "Batched forward steps.");
	strbuf_printf(&t, "colibri_steps_total %llu\n", (unsigned long long)m->steps);
	head(&t, "colibri_step_errors_total", "counter", "Forward steps that failed (the requests in them got an error).");
	strbuf_printf(&t, "colibri_step_errors_total %llu\n", (unsigned long long)m->step_errors);
	head(&t, "colibri_client_drops_total", "counter", "Requests ended because the client left or could not keep up.");
	strbuf_printf(&t, "colibri_client_drops_total %llu\n", (unsigned long long)m->client_drops);
	head(&t, "colibri_expert_requests_total", "counter", "Experts the forward asked the store for.");
	strbuf_printf(&t, "colibri_expert_requests_total %llu\n", (unsigned long long)m->expert_requests);
	head(&t, "colibri_expert_hits_total", "counter", "Of those, found in RAM (cache or pinned).");
	strbuf_printf(&t, "colibri_expert_hits_total %llu\n", (unsigned long long)m->expert_hits);
	head(&t, "colibri_expert_hit_rate", "gauge", "Expert hits / requests since start.");
	strbuf_printf(&t, "colibri_expert_hit_rate %.6f\n",
	    m->expert_requests ? (double)m->expert_hits / (double)m->expert_requests : 0);
	head(&t, "colibri_expert_read_bytes_total", "counter", "Bytes the expert store read from disk.");
	strbuf_printf(&t, "colibri_expert_read_bytes_total %llu\n", (unsigned long long)m->bytes_read);
	head(&t, "colibri_disk_busy_seconds_total", "counter", "Time with at least one expert read in flight.");
	strbuf_printf(&t, "colibri_disk_busy_seconds_total %.6f\n", m->disk_busy_s);
	head(&t, "colibri_disk_gigabytes_per_second", "gauge", "Bytes read / disk busy time, in GB/s (1e9).");
	strbuf_printf(&t, "colibri_disk_gigabytes_per_second %.6f\n", m->disk_gbps);
	head(&t, "colibri_uptime_seconds", "gauge", "Since the server started.");
	strbuf_printf(&t, "colibri_uptime_seconds %.3f\n", now - m->t_start);
	head(&t, "colibri_model_info", "gauge", "The model served.");
	strbuf_printf(&t, "colibri_model_info{model=\"%s\"} 1\n", model_id);
	pthread_mutex_unlock(&m->mu);
	if (t.rc) {
		free(t.p);
		return t.rc;
	}
	*out = t.p;
	*len = t.len;
	return 0;
}
