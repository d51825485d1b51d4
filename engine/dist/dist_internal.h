/*
 * dist_internal — what the files of engine/dist share: the message tags
 * and layouts, the per-rank state (struct dist), and a few helpers. Only
 * engine/dist includes it, and only engine/dist sees MPI.
 */
#ifndef COLIBRI_ENGINE_DIST_INTERNAL_H
#define COLIBRI_ENGINE_DIST_INTERNAL_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/dist/dist.h"
#include "storage/expert_store.h"

enum {
	DIST_TAG_LAYER = 1,
	DIST_TAG_ROWS,
	DIST_TAG_ERROR,
	DIST_TAG_STATS,
	DIST_TAG_STOP,
	DIST_TAG_BYE,
	DIST_TAG_LEAVE,
};

/* How long rank 0 waits at the end for a lost rank's BYE. */
#define DIST_BYE_WAIT_S 3.0

#define DIST_MAGIC 0x636f6c69 /* "coli" */
#define DIST_MSG_MAX 512

/* What every rank tells the others at the join. */
struct join_info {
	int32_t rc;
	int32_t n_layers, n_experts, hidden, top_k;
	uint64_t model_id;
	double disk_gbps;
	uint64_t cache_bytes;        /* its expert cache */
	uint64_t expert_bytes;       /* every routed record of the model */
	int32_t shard_ranks;         /* its container is a shard (colibri shard) of this many ranks; 0: full */
	int32_t shard_replicas;
	double shard_weights[PLACEMENT_RANKS_MAX];
	char host[DIST_HOST_MAX];
	char msg[DIST_MSG_MAX];
};

/* Rank 0's settings, and whether it opened a model at all. */
struct agree_info {
	int32_t done;                /* rank 0 ended without a model */
	struct dist_options o;
};

/* The header of a layer request (int32 words), then experts[n_exp],
 * hints[n_hint], and with n_exp > 0 sel[n * top_k] and xn[n * hidden]. */
enum { H_MAGIC, H_LAYER, H_N, H_K, H_NEXP, H_NHINT, H_HINT_LAYER, H_HIDDEN, H_WORDS };
/* The header of an answer: magic, layer, rows; then the rows. */
enum { A_MAGIC, A_LAYER, A_ROWS, A_WORDS };

struct peer {
	uint8_t *send;               /* the request being sent */
	size_t send_cap;
	float *recv;                 /* A_WORDS int32 words, then rows */
	size_t recv_cap;             /* bytes */
	MPI_Request sreq, rreq;
	int32_t *experts;            /* [n_experts] this layer's, ascending */
	int n_exp;
	int32_t *hints;              /* [n_experts] the next layer's predicted */
	int n_hint;
};

struct dist {
	struct forward *f;
	int rank, size;
	int n_layers, n_experts, hidden, top_k, batch;
	double timeout_s;
	struct join_info *ranks;     /* [size] what each rank said at the join */
	uint8_t *owner;              /* [n_layers * n_experts] */
	uint64_t *holders;           /* [n_layers * n_experts] bit r: rank r holds it (owner and replicas) */
	int replicas;
	const char *why;
	double weights[PLACEMENT_RANKS_MAX];
	/* Rank 0: who serves each expert now (the owner, or after a loss a
	 * live holder), which ranks still answer, where each was lost. */
	uint8_t *serve;              /* [n_layers * n_experts] */
	uint64_t alive;
	int32_t lost_layer[PLACEMENT_RANKS_MAX];
	int32_t *redo;               /* [n_experts] the pending layer's experts of lost ranks */
	int n_redo;
	/* Rank 0: one slot per rank (0 unused), the layer in flight. */
	struct peer *peers;
	int pending_layer;           /* -1: none */
	int pending_n;
	const int32_t *pending_sel;
	int hint_layer;
	uint64_t local_runs;         /* rank 0's own expert runs */
	double net_s;
	uint64_t net_bytes;
	bool broken;                 /* a rank failed or went silent: no STOP, the job aborts */
	char broken_msg[DIST_MSG_MAX]; /* why, for every later step (serve goes on answering) */
	/* Ranks 1..: the request and answer buffers, the counters. */
	uint8_t *req;
	size_t req_cap;
	float *ans;
	size_t ans_cap;
	struct dist_rank_stats mine;
	struct expert_store_stats at_open; /* the store's counters at the join: the start-up's reads apart */
	char err[DIST_MSG_MAX];      /* set: every request is answered with it */
};

static inline bool rank_alive(const struct dist *d, int r)
{
	return d->alive >> r & 1;
}

/* Sleeps a little longer each time nothing has arrived: 20 us, doubling
 * up to cap_us (dist.c). */
void dist_backoff(int *us, int cap_us);

/* Keeps a lost rank's request buffers until MPI_Finalize: Open MPI may
 * still hold a send to it (dist.c). Either may be NULL. */
void dist_keep_orphans(void *send, void *recv);

/* A serving rank leaves without MPI_Finalize (rank 0 said a lost rank
 * never said BYE; dist.c). */
void dist_leave_unfinalized(void);

/* Rank 0: the failover of a lost rank (dist_failover.c). remember keeps
 * the first error of a broken job for every later step; rank_lost ends
 * the run without replicas, else moves rank r's experts to live holders
 * and its owed rows of the layer in flight to the redo list (0: the run
 * goes on). */
int dist_remember(struct dist *d, int rc);
int dist_rank_lost(struct dist *d, int r, int layer, int rc);
int dist_layer_redo(struct dist *d, int32_t *ids);

#endif
