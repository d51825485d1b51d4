/*
 * dist — routed experts served by the ranks of an MPI job (Open MPI).
 *
 * `mpirun -n N colibri run|logits|serve ...`: every rank opens the same
 * container. Rank 0 runs the command as a single host would: dense part,
 * sequence state, sampling, output. Ranks 1..N-1 read only the expert
 * tensors of the resident file and serve their share of the routed experts
 * (planner/placement.h) from their own expert store: their own --ram,
 * pinning and prefetch. Per MoE layer rank 0 sends each rank that serves
 * one of the chosen experts the step's normed hidden states, the routing
 * and its part of the next layer's prediction (non-blocking sends; the
 * rank starts its reads as soon as the message lands), runs its own
 * experts meanwhile, and places every answer in its (token, slot) cell.
 * The sum stays rank 0's fixed slot-order sum, and a rank computes an
 * expert with the same kernels over the same rows as rank 0 would, so the
 * logits are the single host's bits at any rank count, placement, budget
 * and network timing.
 *
 * Messages, all between rank 0 and one other rank (MPI keeps their order):
 *   DIST_TAG_LAYER  0 -> r  header, experts, routing, prediction, rows
 *   DIST_TAG_ROWS   r -> 0  one output row per (expert, token, slot) asked,
 *                           experts ascending, then tokens, then slots
 *   DIST_TAG_ERROR  r -> 0  the rank's error message instead of the rows
 *   DIST_TAG_STATS  0 -> r, then r -> 0 its counters
 *   DIST_TAG_STOP   0 -> r  leave the serve loop (int32: 1 when rank 0
 *                           has reported this rank's failure already)
 *   DIST_TAG_BYE    r -> 0  after STOP: the rank is leaving
 *   DIST_TAG_LEAVE  0 -> r  int32: 1 when every rank said BYE and all
 *                           finalize; 0: a lost rank never did, and every
 *                           rank leaves without MPI_Finalize
 * A rank that does not answer within the timeout, fails, or answers
 * nonsense ends the run with an error naming it and its host; a rank that
 * dies takes the job down with it (mpirun names it). With --replicas K
 * every expert is held by K ranks (planner/placement.h): rank 0 then warns,
 * moves the lost rank's experts to live holders (placement_failover) and
 * asks them for the rows the lost rank owed, so the run goes on with the
 * same bits. A rank that dies only leaves the job running under
 * `mpirun --enable-recovery` (else mpirun ends the job), and the ranks then
 * leave without MPI_Finalize, which could wait for it; one that hangs is
 * taken down at the end with MPI_Abort under plain mpirun, as nothing else
 * ends it (tests/mpi/README.md: what Open MPI does in each case).
 *
 * Only engine/dist sees MPI (README.md: which file holds what). Without mpirun (no OMPI_COMM_WORLD_SIZE in the
 * environment) nothing here runs and colibri is a single process.
 */
#ifndef COLIBRI_ENGINE_DIST_H
#define COLIBRI_ENGINE_DIST_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/forward/remote.h"
#include "planner/placement.h"

struct forward;

#define DIST_HOST_MAX 64
#define DIST_TIMEOUT_S_DEFAULT 60.0

/* What rank 0 decides for every rank (its command line): the others take
 * these, whatever theirs say. */
struct dist_options {
	struct placement_spec placement; /* .replicas: ranks holding each expert */
	double timeout_s;            /* a rank silent this long on a layer ends the run */
	int32_t batch;               /* rows per step at most (rank 0's --batch) */
};

#define DIST_LOST_NONE -1           /* the rank answered to the end */
#define DIST_LOST_AT_END -2         /* it went silent after the last layer, asked for its counters */

/* One rank's share of a run, as rank 0 reports it. */
struct dist_rank_stats {
	char host[DIST_HOST_MAX];
	int32_t experts_owned;       /* over every MoE layer */
	int32_t experts_held;        /* owned and replicas (--replicas) */
	int32_t lost_layer;          /* the layer at which rank 0 lost it, DIST_LOST_NONE or DIST_LOST_AT_END */
	double weight;               /* its placement weight */
	uint64_t experts_served;     /* expert runs (one per expert per step) */
	uint64_t rows_served;        /* (token, slot) rows computed */
	uint64_t requests;           /* of its store */
	uint64_t hits;
	uint64_t bytes_read;
	double disk_wait_s;
	double serve_s;              /* from a layer's message to its answer sent */
	double net_s;                /* moving bytes: receiving requests, sending answers (rank 0: waiting
				      * for answers after its own experts were done) */
	uint64_t net_bytes;          /* sent and received */
	uint64_t peak_rss_bytes;
};

/* Joins the MPI job when mpirun started this process; a no-op otherwise.
 * Call once from main before anything else. 0, or -errno with a message. */
int dist_init(int *argc, char ***argv);

/* Leaves the job: MPI_Finalize after a clean run, MPI_Abort with rc after
 * a failure, so that no rank is left waiting. Only the front end calls it,
 * last. Returns rc. */
int dist_exit(int rc);

bool dist_active(void);       /* started by mpirun (any size, 1 included) */
/* On ranks 1..: the failure at hand is rank 0's to report (it knows it
 * from the join), so this rank prints nothing. */
bool dist_failure_reported(void);
int dist_rank(void);          /* 0 without mpirun */
int dist_size(void);          /* 1 without mpirun */

struct dist;

/* Before any rank opens its model: rank 0 sends *o to every rank, the
 * others receive it into *o. 1 on the others when rank 0 ended without
 * opening a model (nothing to serve), else 0. */
int dist_agree(struct dist_options *o);

/* After this rank opened its model and forward (rc_local: how that went):
 * every rank exchanges its outcome, host, model identity, disk bandwidth
 * (GB/s, 0 unknown) and expert cache size (--placement auto weighs both:
 * placement_weights_ram); the first rank that failed fails them all
 * with its message, named by rank and host. Then every rank builds the
 * same placement. On rank 0 the forward sends experts out (f->dist); the
 * other ranks then call dist_serve. *out is freed with dist_free. */
int dist_join(struct dist **out, struct forward *f, const struct dist_options *o, int rc_local,
	      uint64_t model_id, double disk_gbps, uint64_t cache_bytes);

/* Ranks 1..N-1: serves layer requests until rank 0 says stop. 0, or the
 * error that ended it (which rank 0 is told instead of the rows). */
int dist_serve(struct dist *d);

/* Rank 0, at the end: collects every rank's counters into out[dist_size()]
 * (out[0] its own, filled by the caller's numbers for the store). */
int dist_stats(struct dist *d, struct dist_rank_stats *out);

/* Rank 0: tells the other ranks to stop (when the job is still sound);
 * every rank frees d. Safe with NULL. */
void dist_free(struct dist *d);

/* The placement (for the report): which rule, and rank r's experts. */
const char *dist_placement_why(const struct dist *d);
const uint8_t *dist_owner_table(const struct dist *d); /* [n_layers * n_experts] */

/* Rank 0: the ranks serving experts, as its forward calls them
 * (engine/forward/remote.h; dist_layer.c). On the other ranks, and with d
 * NULL, ops is NULL: every expert is served locally. */
struct remote_experts dist_remote(struct dist *d);

#endif
