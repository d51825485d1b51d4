/*
 * serve_metrics — see serve_metrics.h. Metric names carry the colibri_
 * prefix and Prometheus' unit suffixes (_total, _seconds, _bytes).
 */
#include "engine/serve/serve_metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <stdarg.h>

#include "base/clock.h"
#include "base/strbuf.h"
#include "engine/decode/session.h"
#include "storage/expert_store.h"

static const double ttft_le[SERVE_TTFT_BUCKETS] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
						    1, 2.5, 5, 10, 30, 60, 120 };
static const char *const route_names[SERVE_ROUTES] = {
	[SERVE_ROUTE_CHAT] = "/v1/chat/completions",
	[SERVE_ROUTE_COMPLETIONS] = "/v1/completions",
	[SERVE_ROUTE_MODELS] = "/v1/models",
	[SERVE_ROUTE_HEALTH] = "/health",
	[SERVE_ROUTE_METRICS] = "/metrics",
	[SERVE_ROUTE_LIVE] = "/api/live",
	[SERVE_ROUTE_STATE] = "/api/state",
	[SERVE_ROUTE_UI] = "/ui",
	[SERVE_ROUTE_OLLAMA_CHAT] = "/api/chat",
	[SERVE_ROUTE_OLLAMA_GENERATE] = "/api/generate",
	[SERVE_ROUTE_OLLAMA_TAGS] = "/api/tags",
	[SERVE_ROUTE_OLLAMA_SHOW] = "/api/show",
	[SERVE_ROUTE_OLLAMA_PS] = "/api/ps",
	[SERVE_ROUTE_OLLAMA_VERSION] = "/api/version",
	[SERVE_ROUTE_OLLAMA_EMBED] = "/api/embed",
	[SERVE_ROUTE_OLLAMA_EMBEDDINGS] = "/api/embeddings",
	[SERVE_ROUTE_LLAMA_COMPLETION] = "/completion",
	[SERVE_ROUTE_LLAMA_TOKENIZE] = "/tokenize",
	[SERVE_ROUTE_LLAMA_DETOKENIZE] = "/detokenize",
	[SERVE_ROUTE_LLAMA_PROPS] = "/props",
	[SERVE_ROUTE_LLAMA_SLOTS] = "/slots",
	[SERVE_ROUTE_OTHER] = "other",
};

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

/* The resident set from /proc/self/statm, without allocating (this runs
 * between the scheduler's steps); 0 if unknown. */
static uint64_t rss_bytes(void)
{
	char buf[128];
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	unsigned long long size = 0, resident = 0;
	if (sscanf(buf, "%llu %llu", &size, &resident) != 2)
		return 0;
	return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Tokens per second of generating steps' time over the samples of the
 * SERVE_RATE_SECONDS up to sample `last` (the step that just generated):
 * the decode rate of the last stretch of work. Idle time between requests
 * lies outside the steps, so it never dilutes the rate; `alone` (the last
 * step's own rate) stands in when no earlier sample is that recent. O(window). */
static double decode_rate_locked(const struct serve_metrics *m, int last, double alone)
{
	int first = last;
	for (int k = m->rate_n - 2; k >= 0; k--) {
		int i = (m->rate_head + k) % SERVE_RATE_WINDOW;
		if (m->rate_t[last] - m->rate_t[i] > SERVE_RATE_SECONDS)
			break;
		first = i;
	}
	double s = m->rate_gen_s[last] - m->rate_gen_s[first];
	return first == last || s < 1e-9 ? alone : (double)(m->rate_tok[last] - m->rate_tok[first]) / s;
}

void serve_metrics_step(struct serve_metrics *m, int tokens, int active, int queued, bool failed, double step_s,
			const struct session *s, double now)
{
	const struct expert_store_stats *st = s ? expert_store_stats(s->model.store) : NULL;
	uint64_t rss = s ? rss_bytes() : 0; /* outside the lock: it reads a file */
	pthread_mutex_lock(&m->mu);
	m->tokens_generated += (uint64_t)tokens;
	m->active = active;
	m->queue_len = queued;
	if (tokens || failed)
		m->steps++;
	m->step_errors += failed;
	m->step_s += step_s;
	if (tokens > 0)
		m->gen_step_s += step_s;
	if (st) {
		m->expert_requests = st->requests;
		m->expert_pinned_hits = st->pinned_hits;
		m->expert_cached_hits = st->hits;
		m->expert_joins = st->joins;
		m->expert_misses = st->misses;
		m->bytes_read = st->bytes_read;
		m->disk_busy_s = st->disk_busy_s;
		m->disk_gbps = st->disk_gbps;
		/* The run's waits: the start-up's pinned set is not a step's. */
		m->disk_wait_s = st->disk_wait_s - s->at_open.disk_wait_s;
		m->ram_budget = s->plan.budget_bytes;
		m->ram_resident = s->plan.resident_bytes;
		m->ram_kv = s->plan.kv_bytes;
		m->ram_scratch = s->plan.scratch_bytes;
		m->ram_cache = st->cache_bytes;
		m->ram_pinned = 0;
		for (int c = 0; c < st->n_classes && c < EXPERT_CLASSES_MAX; c++)
			m->ram_pinned += (uint64_t)st->classes[c].n_pinned * st->classes[c].frame_bytes;
		m->rss = rss;
		m->disk_profile_gbps = s->plan.disk_gbps;
		const struct forward_prefetch_stats *pf = &s->fwd.pf;
		m->prefetch_on = s->fwd.prefetch;
		m->prefetch_precision = pf->predicted ? (double)pf->correct / (double)pf->predicted : 0;
		m->prefetch_recall = pf->actual ? (double)pf->correct / (double)pf->actual : 0;
		m->n_copies = st->n_copies < EXPERT_COPIES_MAX ? st->n_copies : EXPERT_COPIES_MAX;
		for (int k = 0; k < m->n_copies; k++)
			m->copies[k] = (struct serve_copy){ st->copy_bytes_read[k], st->copy_weight[k],
							    st->copy_in_rotation[k], st->copy_failures[k] };
	}
	int at = (m->rate_head + m->rate_n) % SERVE_RATE_WINDOW;
	if (m->rate_n == SERVE_RATE_WINDOW)
		m->rate_head = (m->rate_head + 1) % SERVE_RATE_WINDOW;
	else
		m->rate_n++;
	m->rate_t[at] = now;
	m->rate_tok[at] = m->tokens_generated;
	m->rate_bytes[at] = m->bytes_read;
	m->rate_busy_s[at] = m->disk_busy_s;
	m->rate_gen_s[at] = m->gen_step_s;
	if (tokens > 0)
		m->decode_tps = decode_rate_locked(m, at, step_s > 0 ? (double)tokens / step_s : 0);
	pthread_mutex_unlock(&m->mu);
}

int serve_metrics_copies(struct serve_metrics *m, struct serve_copy out[EXPERT_COPIES_MAX])
{
	pthread_mutex_lock(&m->mu);
	int n = m->n_copies;
	memcpy(out, m->copies, (size_t)n * sizeof *out);
	pthread_mutex_unlock(&m->mu);
	return n;
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

/* The oldest and the newest sample of the last SERVE_RATE_SECONDS, into
 * *first and *last; false when there is none that recent. */
static bool window_locked(const struct serve_metrics *m, double now, int *first, int *last)
{
	if (m->rate_n == 0)
		return false;
	*last = (m->rate_head + m->rate_n - 1) % SERVE_RATE_WINDOW;
	*first = *last;
	for (int k = m->rate_n - 2; k >= 0; k--) {
		int i = (m->rate_head + k) % SERVE_RATE_WINDOW;
		if (now - m->rate_t[i] > SERVE_RATE_SECONDS)
			break;
		*first = i;
	}
	return now - m->rate_t[*last] <= SERVE_RATE_SECONDS;
}

/* Bytes read / disk busy time over the last SERVE_RATE_SECONDS, in GB/s. */
static double disk_recent_locked(const struct serve_metrics *m, double now)
{
	int first, last;
	if (!window_locked(m, now, &first, &last))
		return 0;
	double busy = m->rate_busy_s[last] - m->rate_busy_s[first];
	return busy > 1e-9 ? (double)(m->rate_bytes[last] - m->rate_bytes[first]) / busy / 1e9 : 0;
}

/* Tokens per second over the samples of the last SERVE_RATE_SECONDS. */
static double rate_locked(const struct serve_metrics *m, double now)
{
	int first, last;
	if (!window_locked(m, now, &first, &last))
		return 0;
	double span = now - m->rate_t[first];
	return span < 1e-3 ? 0 : (double)(m->rate_tok[last] - m->rate_tok[first]) / span;
}

/* Where samples go: the exposition text, or a JSON object of the same
 * numbers (each parsed back from the text it would print). */
struct emit {
	struct strbuf *t;            /* text, or NULL */
	struct cJSON *j;             /* JSON, or NULL */
};

static void head(struct emit *e, const char *name, const char *type, const char *help)
{
	if (e->t)
		strbuf_printf(e->t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample: name, its labels ("" or `{k="v"}`), the value as printf
 * prints fmt. */
static void sample(struct emit *e, const char *name, const char *labels, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void sample(struct emit *e, const char *name, const char *labels, const char *fmt, ...)
{
	char value[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(value, sizeof value, fmt, ap);
	va_end(ap);
	if (e->t) {
		strbuf_printf(e->t, "%s%s %s\n", name, labels, value);
		return;
	}
	char key[256];
	snprintf(key, sizeof key, "%s%s", name, labels);
	cJSON_AddNumberToObject(e->j, key, strtod(value, NULL));
}

static void counter(struct emit *e, const char *name, const char *help, uint64_t v)
{
	head(e, name, "counter", help);
	sample(e, name, "", "%llu", (unsigned long long)v);
}

static void gauge(struct emit *e, const char *name, const char *help, double v)
{
	head(e, name, "gauge", help);
	sample(e, name, "", "%.6f", v);
}

static void gauge_bytes(struct emit *e, const char *name, const char *help, uint64_t v)
{
	head(e, name, "gauge", help);
	sample(e, name, "", "%llu", (unsigned long long)v);
}

static void render_locked(struct serve_metrics *m, const char *model_id, double now, struct emit *e)
{
	head(e, "colibri_requests_total", "counter", "HTTP requests answered, by route and status.");
	for (int r = 0; r < SERVE_ROUTES; r++)
		for (int s = 0; s < 600; s++)
			if (m->requests[r][s]) {
				char labels[96];
				snprintf(labels, sizeof labels, "{route=\"%s\",status=\"%d\"}", route_names[r], s);
				sample(e, "colibri_requests_total", labels, "%llu", (unsigned long long)m->requests[r][s]);
			}
	counter(e, "colibri_generated_tokens_total", "Tokens generated (EOS not counted).", m->tokens_generated);
	head(e, "colibri_prompt_tokens_total", "counter", "Prompt tokens, by whether they were prefilled or came from the prompt cache.");
	sample(e, "colibri_prompt_tokens_total", "{kind=\"prefilled\"}", "%llu", (unsigned long long)m->prompt_prefilled);
	sample(e, "colibri_prompt_tokens_total", "{kind=\"cached\"}", "%llu", (unsigned long long)m->prompt_cached);
	head(e, "colibri_tokens_per_second", "gauge", "Tokens generated per second over the last 10 s, all requests together.");
	sample(e, "colibri_tokens_per_second", "", "%.3f", rate_locked(m, now));
	head(e, "colibri_decode_tokens_per_second", "gauge",
	     "Tokens generated per second of the time in steps that generated, over the last 10 s of them: the decode rate of the latest work, idle time not counted (kept while idle).");
	sample(e, "colibri_decode_tokens_per_second", "", "%.3f", m->decode_tps);
	head(e, "colibri_time_to_first_token_seconds", "histogram", "From admission to a request's first token.");
	uint64_t cum = 0;
	for (int b = 0; b < SERVE_TTFT_BUCKETS; b++) {
		cum += m->ttft_bucket[b];
		char labels[32];
		snprintf(labels, sizeof labels, "{le=\"%g\"}", ttft_le[b]);
		sample(e, "colibri_time_to_first_token_seconds_bucket", labels, "%llu", (unsigned long long)cum);
	}
	sample(e, "colibri_time_to_first_token_seconds_bucket", "{le=\"+Inf\"}", "%llu", (unsigned long long)m->ttft_count);
	sample(e, "colibri_time_to_first_token_seconds_sum", "", "%.6f", m->ttft_sum_s);
	sample(e, "colibri_time_to_first_token_seconds_count", "", "%llu", (unsigned long long)m->ttft_count);
	head(e, "colibri_queue_length", "gauge", "Requests waiting for a slot.");
	sample(e, "colibri_queue_length", "", "%d", m->queue_len);
	head(e, "colibri_active_slots", "gauge", "Slots prefilling or decoding.");
	sample(e, "colibri_active_slots", "", "%d", m->active);
	head(e, "colibri_slots", "gauge", "Slots (--parallel).");
	sample(e, "colibri_slots", "", "%d", m->slots);
	counter(e, "colibri_steps_total", "Batched forward steps.", m->steps);
	counter(e, "colibri_step_errors_total", "Forward steps that failed (the requests in them got an error).", m->step_errors);
	counter(e, "colibri_client_drops_total", "Requests ended because the client left or could not keep up.", m->client_drops);
	head(e, "colibri_step_seconds_total", "counter", "Time inside forward steps.");
	sample(e, "colibri_step_seconds_total", "", "%.6f", m->step_s);
	head(e, "colibri_disk_wait_seconds_total", "counter", "Of the steps' time, blocked waiting for an expert read.");
	sample(e, "colibri_disk_wait_seconds_total", "", "%.6f", m->disk_wait_s);
	head(e, "colibri_compute_seconds_total", "counter", "Of the steps' time, the rest (compute).");
	sample(e, "colibri_compute_seconds_total", "", "%.6f", m->step_s > m->disk_wait_s ? m->step_s - m->disk_wait_s : 0);
	counter(e, "colibri_expert_requests_total", "Experts the forward asked the store for.", m->expert_requests);
	counter(e, "colibri_expert_hits_total", "Of those, found in RAM (cache or pinned).",
		m->expert_pinned_hits + m->expert_cached_hits);
	counter(e, "colibri_expert_pinned_hits_total", "Of those, served by the pinned set.", m->expert_pinned_hits);
	counter(e, "colibri_expert_cached_hits_total", "Of those, found in an ordinary cache frame.", m->expert_cached_hits);
	counter(e, "colibri_expert_joins_total", "Requested while their read (a prefetch) was in flight: joined it.",
		m->expert_joins);
	counter(e, "colibri_expert_misses_total", "Requested and read from disk.", m->expert_misses);
	gauge(e, "colibri_expert_hit_rate", "Expert hits / requests since start.",
	      m->expert_requests ? (double)(m->expert_pinned_hits + m->expert_cached_hits) / (double)m->expert_requests : 0);
	counter(e, "colibri_expert_read_bytes_total", "Bytes the expert store read from disk.", m->bytes_read);
	head(e, "colibri_disk_busy_seconds_total", "counter", "Time with at least one expert read in flight.");
	sample(e, "colibri_disk_busy_seconds_total", "", "%.6f", m->disk_busy_s);
	gauge(e, "colibri_disk_gigabytes_per_second", "Bytes read / disk busy time, in GB/s (1e9).", m->disk_gbps);
	gauge(e, "colibri_disk_recent_gigabytes_per_second", "Bytes read / disk busy time over the last 10 s, in GB/s.",
	      disk_recent_locked(m, now));
	gauge(e, "colibri_disk_profile_gigabytes_per_second",
	      "The saved disk profile's random-read bandwidth at the store's read size and depth (0: not profiled).",
	      m->disk_profile_gbps);
	gauge(e, "colibri_prefetch_enabled", "1 when the forward prefetches the next layers' experts.", m->prefetch_on);
	gauge(e, "colibri_prefetch_precision", "Predicted experts that were then needed / predicted.", m->prefetch_precision);
	gauge(e, "colibri_prefetch_recall", "Needed experts that were predicted / needed.", m->prefetch_recall);
	gauge_bytes(e, "colibri_ram_budget_bytes", "The RAM budget the plan settled on (--ram).", m->ram_budget);
	gauge_bytes(e, "colibri_ram_resident_bytes", "Of the budget: the dense weights.", m->ram_resident);
	gauge_bytes(e, "colibri_ram_kv_bytes", "Of the budget: the sequence state (KV cache).", m->ram_kv);
	gauge_bytes(e, "colibri_ram_scratch_bytes", "Of the budget: scratch buffers.", m->ram_scratch);
	gauge_bytes(e, "colibri_ram_expert_cache_bytes", "Of the budget: the expert frames.", m->ram_cache);
	gauge_bytes(e, "colibri_ram_pinned_bytes", "Of the expert frames: the pinned set.", m->ram_pinned);
	gauge_bytes(e, "colibri_resident_set_bytes", "The process's resident set (VmRSS), as of the last step.", m->rss);
	head(e, "colibri_copy_read_bytes_total", "counter", "Bytes read from each copy of the experts (0: the primary, then the mirrors).");
	for (int k = 0; k < m->n_copies; k++) {
		char labels[32];
		snprintf(labels, sizeof labels, "{copy=\"%d\"}", k);
		sample(e, "colibri_copy_read_bytes_total", labels, "%llu", (unsigned long long)m->copies[k].bytes_read);
	}
	head(e, "colibri_copy_weight", "gauge", "Each copy's share of the striped blocks.");
	for (int k = 0; k < m->n_copies; k++) {
		char labels[32];
		snprintf(labels, sizeof labels, "{copy=\"%d\"}", k);
		sample(e, "colibri_copy_weight", labels, "%.6f", m->copies[k].weight);
	}
	head(e, "colibri_uptime_seconds", "gauge", "Since the server started.");
	sample(e, "colibri_uptime_seconds", "", "%.3f", now - m->t_start);
	head(e, "colibri_model_info", "gauge", "The model served.");
	char labels[320];
	snprintf(labels, sizeof labels, "{model=\"%.256s\"}", model_id);
	sample(e, "colibri_model_info", labels, "1");
}

int serve_metrics_render(struct serve_metrics *m, const char *model_id, char **out, size_t *len)
{
	struct strbuf t = { 0 };
	strbuf_put(&t, "", 0);	/* text even when empty */
	struct emit e = { .t = &t };
	pthread_mutex_lock(&m->mu);
	render_locked(m, model_id, clock_now_s(), &e);
	pthread_mutex_unlock(&m->mu);
	if (t.rc) {
		free(t.p);
		return t.rc;
	}
	*out = t.p;
	*len = t.len;
	return 0;
}

cJSON *serve_metrics_json(struct serve_metrics *m, const char *model_id)
{
	struct emit e = { .j = cJSON_CreateObject() };
	if (!e.j)
		return NULL;
	pthread_mutex_lock(&m->mu);
	render_locked(m, model_id, clock_now_s(), &e);
	pthread_mutex_unlock(&m->mu);
	return e.j;
}
