/*
 * serve_live — the dashboard's live state (docs/DASHBOARD.md): the
 * runtime numbers (serve_metrics' samples as JSON) and the expert map
 * (where each routed expert lives now, its routing heat over a recent
 * window, its routed and RAM-hit counts, its last use, and each layer's hit
 * rate over the last SERVE_LIVE_WINDOW steps), pushed to subscribers as
 * server-sent events.
 *
 * The scheduler thread writes the map after each step (serve_live_step: it
 * reads the store between steps, O(layers x experts), no allocation); HTTP
 * threads render it for their subscribers under the same mutex. A
 * subscriber gets an event on connect, after new steps at most every
 * SERVE_LIVE_MIN_S, and every SERVE_LIVE_IDLE_S when nothing ran; between
 * events its connection sleeps (the caller's sleep callback, e.g.
 * MHD_suspend_connection) and a ticker thread wakes it when one is due.
 */
#ifndef COLIBRI_ENGINE_SERVE_LIVE_H
#define COLIBRI_ENGINE_SERVE_LIVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/strbuf.h"

struct session;
struct serve_metrics;

#define SERVE_LIVE_SUBS_MAX 32       /* dashboards connected at once */
#define SERVE_LIVE_WINDOW 64         /* steps of the per-layer hit rate */
#define SERVE_LIVE_HALF_LIFE 16.0    /* steps, of the routing heat */
#define SERVE_LIVE_MIN_S 0.1         /* between two events of one subscriber */
#define SERVE_LIVE_IDLE_S 1.0        /* an event at least this often */

/* One subscriber (a dashboard's /api/live), owned by its HTTP request. */
struct serve_live_sub {
	uint64_t seq;                /* the state it saw last */
	double t_sent;               /* when its last event was made */
	uint64_t events;
	bool waiting;                /* asleep, in the waiting list */
	void (*wake)(void *arg);     /* called with the live mutex held */
	void *arg;
};

struct serve_live {
	pthread_mutex_t mu;
	struct serve_metrics *metrics;
	char *model_id;
	uint64_t seq;                /* map updates */
	int rows, cols;              /* layers with routed experts x the most experts of one */
	int32_t *row_layer;          /* [rows] */
	int32_t *row_experts;        /* [rows] */
	uint8_t *where;              /* [rows x cols] enum expert_where, 255 past a row's experts */
	float *heat;                 /* [rows x cols] */
	uint32_t *routed, *ram_hits, *last; /* [rows x cols] */
	uint32_t step;               /* steps seen */
	uint64_t *win_req, *win_hit; /* [SERVE_LIVE_WINDOW x rows] cumulative per step */
	int win_n;                   /* samples held, up to SERVE_LIVE_WINDOW */
	struct serve_live_sub *subs[SERVE_LIVE_SUBS_MAX];
	bool closed;
	pthread_t ticker;
	bool ticker_running;
	pthread_cond_t tick_cv;
};

/* Sizes the map for s's model and takes a first snapshot (the pinned set
 * at start-up); starts the ticker. metrics and s must outlive l. 0 or
 * -errno with error_set. serve_live_free after any result. */
int serve_live_init(struct serve_live *l, const struct session *s, struct serve_metrics *metrics,
		    const char *model_id);
/* Wakes and ends every subscriber; they get no further events. Call before
 * the HTTP daemon stops (a suspended connection must be resumed first). */
void serve_live_close(struct serve_live *l);
void serve_live_free(struct serve_live *l);

/* From the scheduler thread after a step that ran (stepped) or not: takes
 * the store's map and counters. */
void serve_live_step(struct serve_live *l, const struct session *s, bool stepped);

/* The state object (docs/DASHBOARD.md) appended to out. 0 or -ENOMEM. */
int serve_live_state(struct serve_live *l, struct strbuf *out);

/* Adds sub (its wake callback and arg set). -EBUSY when
 * SERVE_LIVE_SUBS_MAX are connected. */
int serve_live_subscribe(struct serve_live *l, struct serve_live_sub *sub);
void serve_live_unsubscribe(struct serve_live *l, struct serve_live_sub *sub);

/* A subscriber's next event: appends "event: state\ndata: {...}\n\n" to
 * out and returns 1 when one is due; else calls sleep(arg) with the mutex
 * held, marks it waiting (the ticker wakes it) and returns 0; returns -1
 * once the live state is closed, or -ENOMEM. */
int serve_live_next(struct serve_live *l, struct serve_live_sub *sub, struct strbuf *out, void (*sleep)(void *arg),
		    void *arg);

#endif
