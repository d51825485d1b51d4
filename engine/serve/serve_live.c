/*
 * serve_live — see serve_live.h. Lock order: live.mu before metrics.mu (a
 * render reads the metrics under both); the scheduler takes them one after
 * the other, never nested. The ticker and serve_live_next hand a
 * subscriber's connection to sleep and wake only with live.mu held, so a
 * wake-up is neither lost nor doubled (as serve_http does for jobs).
 */
#include "engine/serve/serve_live.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/decode/session.h"
#include "engine/serve/serve_metrics.h"
#include "storage/expert_store.h"

#define WIN_SLOTS (SERVE_LIVE_WINDOW + 1) /* samples: now and SERVE_LIVE_WINDOW steps back */

/* The cumulative per-layer counters into window slot `slot`. */
static void window_sample(struct serve_live *l, const struct expert_store_stats *st, int slot)
{
	for (int r = 0; r < l->rows; r++) {
		int layer = l->row_layer[r];
		bool counted = layer < EXPERT_STATS_LAYERS_MAX;
		l->win_req[slot * l->rows + r] = counted ? st->layer_requests[layer] : 0;
		l->win_hit[slot * l->rows + r] = counted ? st->layer_hits[layer] + st->layer_pinned_hits[layer] : 0;
	}
}

/* The map from the store; with l->mu held. A step that ran advances the
 * heat, the last uses and the window. */
static void snapshot_locked(struct serve_live *l, const struct session *s, bool stepped)
{
	const struct expert_store *store = s->model.store;
	const float decay = (float)exp2(-1.0 / SERVE_LIVE_HALF_LIFE);
	if (stepped)
		l->step++;
	for (int r = 0; r < l->rows; r++) {
		size_t at = (size_t)r * (size_t)l->cols;
		int layer = l->row_layer[r];
		expert_store_where(store, layer, l->where + at);
		const uint32_t *u = expert_store_usage(store, layer), *h = expert_store_ram_hits(store, layer);
		for (int e = 0; e < l->row_experts[r]; e++) {
			uint32_t routed_now = u[e] - l->routed[at + e];
			if (stepped) {
				l->heat[at + e] = l->heat[at + e] * decay + (float)routed_now;
				if (routed_now)
					l->last[at + e] = l->step;
			}
			l->routed[at + e] = u[e];
			l->ram_hits[at + e] = h[e];
		}
	}
	if (stepped) {
		window_sample(l, expert_store_stats(store), (int)(l->step % WIN_SLOTS));
		if (l->win_n < WIN_SLOTS)
			l->win_n++;
	}
	l->seq++;
}

static bool due(const struct serve_live *l, const struct serve_live_sub *sub, double now)
{
	return sub->events == 0 || (l->seq != sub->seq && now - sub->t_sent >= SERVE_LIVE_MIN_S) ||
	       now - sub->t_sent >= SERVE_LIVE_IDLE_S;
}

static void *ticker_main(void *arg)
{
	struct serve_live *l = arg;
	pthread_mutex_lock(&l->mu);
	while (!l->closed) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 50 * 1000 * 1000;
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&l->tick_cv, &l->mu, &until);
		double now = clock_now_s();
		for (int i = 0; i < SERVE_LIVE_SUBS_MAX; i++) {
			struct serve_live_sub *sub = l->subs[i];
			if (sub && sub->waiting && (l->closed || due(l, sub, now))) {
				sub->waiting = false;
				sub->wake(sub->arg);
			}
		}
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

int serve_live_init(struct serve_live *l, const struct session *s, struct serve_metrics *metrics,
		    const char *model_id)
{
	memset(l, 0, sizeof *l);
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->tick_cv, NULL);
	l->metrics = metrics;
	if (!(l->model_id = strdup(model_id)))
		return error_set(ENOMEM, "out of memory");
	const struct expert_store *store = s->model.store;
	int n_layers = s->model.cfg.n_layers + s->model.cfg.n_mtp_layers;
	l->row_layer = calloc((size_t)n_layers + 1, sizeof *l->row_layer);
	l->row_experts = calloc((size_t)n_layers + 1, sizeof *l->row_experts);
	if (!l->row_layer || !l->row_experts)
		return error_set(ENOMEM, "out of memory");
	for (int layer = 0; layer < n_layers; layer++) {
		int32_t n = store ? expert_store_n_experts(store, layer) : 0;
		if (n <= 0)
			continue;
		l->row_layer[l->rows] = layer;
		l->row_experts[l->rows++] = n;
		if (n > l->cols)
			l->cols = n;
	}
	size_t cells = (size_t)l->rows * (size_t)l->cols;
	l->where = malloc(cells + 1);
	l->heat = calloc(cells + 1, sizeof *l->heat);
	l->routed = calloc(cells + 1, sizeof *l->routed);
	l->ram_hits = calloc(cells + 1, sizeof *l->ram_hits);
	l->last = calloc(cells + 1, sizeof *l->last);
	l->win_req = calloc((size_t)WIN_SLOTS * (size_t)l->rows + 1, sizeof *l->win_req);
	l->win_hit = calloc((size_t)WIN_SLOTS * (size_t)l->rows + 1, sizeof *l->win_hit);
	if (!l->where || !l->heat || !l->routed || !l->ram_hits || !l->last || !l->win_req || !l->win_hit)
		return error_set(ENOMEM, "out of memory");
	memset(l->where, 255, cells);
	if (l->rows) {
		snapshot_locked(l, s, false);
		window_sample(l, expert_store_stats(store), 0);
		l->win_n = 1;
	}
	int rc = pthread_create(&l->ticker, NULL, ticker_main, l);
	if (rc)
		return error_set(rc, "cannot start the dashboard's ticker thread");
	l->ticker_running = true;
	return 0;
}

void serve_live_close(struct serve_live *l)
{
	pthread_mutex_lock(&l->mu);
	l->closed = true;
	for (int i = 0; i < SERVE_LIVE_SUBS_MAX; i++) {
		struct serve_live_sub *sub = l->subs[i];
		if (sub && sub->waiting) {
			sub->waiting = false;
			sub->wake(sub->arg);
		}
	}
	pthread_cond_broadcast(&l->tick_cv);
	pthread_mutex_unlock(&l->mu);
	if (l->ticker_running)
		pthread_join(l->ticker, NULL);
	l->ticker_running = false;
}

void serve_live_free(struct serve_live *l)
{
	if (l->ticker_running)
		serve_live_close(l);
	free(l->model_id);
	free(l->row_layer);
	free(l->row_experts);
	free(l->where);
	free(l->heat);
	free(l->routed);
	free(l->ram_hits);
	free(l->last);
	free(l->win_req);
	free(l->win_hit);
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->tick_cv);
	memset(l, 0, sizeof *l);
}

void serve_live_step(struct serve_live *l, const struct session *s, bool stepped)
{
	if (!l->rows)
		return;
	pthread_mutex_lock(&l->mu);
	snapshot_locked(l, s, stepped);
	pthread_mutex_unlock(&l->mu);
}

static void base64_put(struct strbuf *out, const uint8_t *p, size_t n)
{
	static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char quad[4];
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
		quad[0] = digits[v >> 18 & 63];
		quad[1] = digits[v >> 12 & 63];
		quad[2] = i + 1 < n ? digits[v >> 6 & 63] : '=';
		quad[3] = i + 2 < n ? digits[v & 63] : '=';
		strbuf_put(out, quad, 4);
	}
}

/* A "name":"<base64 of the words as little-endian>" member. */
static void words_put(struct strbuf *out, const char *name, const uint32_t *w, size_t n)
{
	strbuf_printf(out, ",\"%s\":\"", name);
	uint8_t le[3 * 4];
	size_t i = 0;
	/* Three words at a time: 12 bytes, whole base64 quads. */
	for (; i + 3 <= n; i += 3) {
		for (int k = 0; k < 3; k++)
			for (int b = 0; b < 4; b++)
				le[4 * k + b] = (uint8_t)(w[i + k] >> (8 * b));
		base64_put(out, le, sizeof le);
	}
	size_t rest = n - i;
	for (size_t k = 0; k < rest; k++)
		for (int b = 0; b < 4; b++)
			le[4 * k + b] = (uint8_t)(w[i + k] >> (8 * b));
	base64_put(out, le, 4 * rest);
	strbuf_put(out, "\"", 1);
}

static void json_put(struct strbuf *out, cJSON *j)
{
	char *text = j ? cJSON_PrintUnformatted(j) : NULL;
	if (!text) {
		out->rc = out->rc ? out->rc : -ENOMEM;
		return;
	}
	strbuf_put(out, text, strlen(text));
	free(text);
}

static void map_put_locked(struct serve_live *l, struct strbuf *out)
{
	size_t cells = (size_t)l->rows * (size_t)l->cols;
	strbuf_printf(out, ",\"map\":{\"layers\":%d,\"experts\":%d,\"step\":%u,\"layer_ids\":[", l->rows, l->cols, l->step);
	for (int r = 0; r < l->rows; r++)
		strbuf_printf(out, "%s%d", r ? "," : "", l->row_layer[r]);
	strbuf_put(out, "],\"where\":\"", 11);
	base64_put(out, l->where, cells);
	/* Heat scaled so that the hottest cell is 255; bytes written in place
	 * of nothing else: a small stack block at a time. */
	float hot = 0;
	for (size_t i = 0; i < cells; i++)
		hot = l->heat[i] > hot ? l->heat[i] : hot;
	strbuf_put(out, "\",\"heat\":\"", 10);
	uint8_t block[3 * 256];
	for (size_t i = 0; i < cells; i += sizeof block) {
		size_t n = cells - i < sizeof block ? cells - i : sizeof block;
		for (size_t k = 0; k < n; k++)
			block[k] = hot > 0 ? (uint8_t)lrintf(255.0f * l->heat[i + k] / hot) : 0;
		base64_put(out, block, n);
	}
	strbuf_put(out, "\"", 1);
	words_put(out, "routed", l->routed, cells);
	words_put(out, "ram_hits", l->ram_hits, cells);
	words_put(out, "last", l->last, cells);
	strbuf_put(out, ",\"layer_hit_rate\":[", 19);
	int now = (int)(l->step % WIN_SLOTS), then = (int)((l->step + WIN_SLOTS - (uint32_t)(l->win_n - 1)) % WIN_SLOTS);
	for (int r = 0; r < l->rows; r++) {
		uint64_t req = l->win_req[now * l->rows + r] - l->win_req[then * l->rows + r];
		uint64_t hit = l->win_hit[now * l->rows + r] - l->win_hit[then * l->rows + r];
		if (req)
			strbuf_printf(out, "%s%.4f", r ? "," : "", (double)hit / (double)req);
		else
			strbuf_printf(out, "%snull", r ? "," : "");
	}
	strbuf_put(out, "]}", 2);
}

static int state_locked(struct serve_live *l, struct strbuf *out)
{
	cJSON *model = cJSON_CreateString(l->model_id);
	cJSON *metrics = serve_metrics_json(l->metrics, l->model_id);
	struct serve_copy copies[EXPERT_COPIES_MAX];
	int n_copies = serve_metrics_copies(l->metrics, copies);
	strbuf_printf(out, "{\"seq\":%llu,\"uptime_s\":%.3f,\"model\":", (unsigned long long)l->seq,
		      clock_now_s() - l->metrics->t_start);
	json_put(out, model);
	strbuf_put(out, ",\"metrics\":", 11);
	json_put(out, metrics);
	strbuf_put(out, ",\"copies\":[", 11);
	for (int k = 0; k < n_copies; k++)
		strbuf_printf(out, "%s{\"bytes_read\":%llu,\"weight\":%.6f,\"in_rotation\":%s,\"failures\":%llu}", k ? "," : "",
			      (unsigned long long)copies[k].bytes_read, copies[k].weight,
			      copies[k].in_rotation ? "true" : "false", (unsigned long long)copies[k].failures);
	strbuf_put(out, "]", 1);
	map_put_locked(l, out);
	strbuf_put(out, "}", 1);
	cJSON_Delete(model);
	cJSON_Delete(metrics);
	return out->rc;
}

int serve_live_state(struct serve_live *l, struct strbuf *out)
{
	pthread_mutex_lock(&l->mu);
	int rc = state_locked(l, out);
	pthread_mutex_unlock(&l->mu);
	return rc;
}

int serve_live_subscribe(struct serve_live *l, struct serve_live_sub *sub)
{
	int rc = -EBUSY;
	pthread_mutex_lock(&l->mu);
	for (int i = 0; i < SERVE_LIVE_SUBS_MAX && rc; i++)
		if (!l->subs[i]) {
			l->subs[i] = sub;
			rc = 0;
		}
	pthread_mutex_unlock(&l->mu);
	return rc;
}

void serve_live_unsubscribe(struct serve_live *l, struct serve_live_sub *sub)
{
	pthread_mutex_lock(&l->mu);
	for (int i = 0; i < SERVE_LIVE_SUBS_MAX; i++)
		if (l->subs[i] == sub)
			l->subs[i] = NULL;
	pthread_mutex_unlock(&l->mu);
}

int serve_live_next(struct serve_live *l, struct serve_live_sub *sub, struct strbuf *out, void (*sleep)(void *arg),
		    void *arg)
{
	pthread_mutex_lock(&l->mu);
	int rc;
	double now = clock_now_s();
	if (l->closed) {
		rc = -1;
	} else if (due(l, sub, now)) {
		strbuf_put(out, "event: state\ndata: ", 19);
		rc = state_locked(l, out);
		strbuf_put(out, "\n\n", 2);
		rc = rc ? rc : out->rc ? out->rc : 1;
		sub->seq = l->seq;
		sub->t_sent = now;
		sub->events++;
	} else {
		sub->waiting = true;
		sleep(arg);
		rc = 0;
	}
	pthread_mutex_unlock(&l->mu);
	return rc;
}
