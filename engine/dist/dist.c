/*
 * dist — see dist.h. The only file that sees MPI.
 *
 * Rank 0 waits for answers by polling with a growing sleep instead of a
 * blocking receive: Open MPI's blocking calls spin a core, and a rank's
 * cores belong to its experts (on a small machine several ranks share
 * them). A rank 0 that stops hearing from one rank for timeout_s names it.
 *
 * A lost rank (with --replicas) is never sent to or waited for again:
 * its requests are cancelled or freed, and the buffers they point at are
 * kept until MPI_Finalize (orphans), since Open MPI may still hold a send
 * to it. Rank 0 still offers it STOP at the end and waits a little for its
 * BYE: one that never says it is hung, and only MPI_Abort ends it.
 */
#include "engine/dist/dist.h"

#include <errno.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/forward/forward.h"

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

static bool active;
static int my_rank, n_ranks = 1;
static bool agreed;              /* dist_agree ran */
static bool quiet_failure;       /* the failure is known to rank 0, which reports it */
static char my_host[DIST_HOST_MAX] = "?";
static bool recovery;            /* mpirun --enable-recovery: a dead rank does not end the job */
static char stuck[DIST_MSG_MAX]; /* rank 0: the lost ranks that never said BYE */
/* MPI_Finalize waits for every rank, a lost one too (Open MPI 4.1 under
 * --enable-recovery hangs there now and then): when a rank never said BYE,
 * every rank leaves without it. */
static bool leave_unfinalized;
/* Buffers a lost rank's requests may still point at: freed after
 * MPI_Finalize (dist_exit), never before. */
static void *orphans[2 * PLACEMENT_RANKS_MAX];
static int n_orphans;

int dist_init(int *argc, char ***argv)
{
	if (!getenv("OMPI_COMM_WORLD_SIZE"))
		return 0;
	/* One thread at a time calls MPI: the main thread, or serve's
	 * scheduler thread that runs the forward. */
	int provided = 0;
	if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
		return error_set(EIO, "MPI_Init failed (started by mpirun: is Open MPI installed on every host?)");
	if (provided < MPI_THREAD_SERIALIZED) {
		MPI_Finalize();
		return error_set(ENOTSUP, "this MPI library does not allow calls from more than one thread "
					  "(MPI_THREAD_SERIALIZED); colibri needs it");
	}
	active = true;
	MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n_ranks);
	int len = 0;
	char name[MPI_MAX_PROCESSOR_NAME];
	if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS && len > 0)
		snprintf(my_host, sizeof my_host, "%s", name);
	/* Errors come back as codes: the engine names the rank that failed. */
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	/* mpirun passes its MCA settings down in the environment. */
	const char *rec = getenv("OMPI_MCA_orte_enable_recovery");
	recovery = rec && (!strcmp(rec, "1") || !strcmp(rec, "true"));
	return 0;
}

static void orphans_free(void)
{
	for (int i = 0; i < n_orphans; i++)
		free(orphans[i]);
	n_orphans = 0;
}

bool dist_active(void)
{
	return active;
}

int dist_rank(void)
{
	return my_rank;
}

int dist_size(void)
{
	return n_ranks;
}

bool dist_failure_reported(void)
{
	return active && my_rank > 0 && quiet_failure;
}


int dist_exit(int rc)
{
	if (!active)
		return rc;
	fflush(stdout);
	fflush(stderr);
	if (my_rank == 0 && !agreed && rc == 0) {
		/* Ended without a model (--help, a listing): release the others. */
		struct agree_info a = { .done = 1 };
		MPI_Bcast(&a, (int)sizeof a, MPI_BYTE, 0, MPI_COMM_WORLD);
		agreed = true;
	}
	if (stuck[0] && !recovery) {
		/* MPI_Finalize would wait for the hung rank forever. */
		fprintf(stderr, "colibri: %s never answered again; ending the job with MPI_Abort to take it down "
				"(the output above is complete)\n", stuck);
		fflush(stderr);
		MPI_Abort(MPI_COMM_WORLD, rc > 0 && rc < 256 ? rc : rc ? 1 : 0);
		return rc;
	}
	if (stuck[0])
		fprintf(stderr, "colibri: %s never answered again; leaving without MPI_Finalize (mpirun "
				"--enable-recovery ends once it has: at once if it died, when killed if it hangs)\n",
			stuck);
	if (leave_unfinalized) {
		fflush(stderr);
		_exit(rc > 0 && rc < 256 ? rc : rc ? 1 : 0);
	}
	if (rc == 0 || quiet_failure) {
		MPI_Finalize();
		orphans_free();
		return rc;
	}
	/* A failure the other ranks do not know of: they may be waiting for
	 * this rank. Take the job down (mpirun reports it). */
	MPI_Abort(MPI_COMM_WORLD, rc > 0 && rc < 256 ? rc : 1);
	return rc;
}

int dist_agree(struct dist_options *o)
{
	if (!active)
		return 0;
	struct agree_info a = { 0 };
	if (my_rank == 0)
		a.o = *o;
	if (MPI_Bcast(&a, (int)sizeof a, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
		return error_set(EIO, "rank %d (host %s): cannot receive rank 0's settings", my_rank, my_host);
	agreed = true;
	if (a.done)
		return 1;
	*o = a.o;
	return 0;
}

/* The first rank whose join failed, or -1. */
static int first_failed(const struct join_info *ji, int n)
{
	for (int r = 0; r < n; r++)
		if (ji[r].rc)
			return r;
	return -1;
}

static int join_check(struct dist *d, const struct join_info *ji)
{
	const struct join_info *z = &ji[0];
	for (int r = 1; r < d->size; r++)
		if (ji[r].model_id != z->model_id || ji[r].n_layers != z->n_layers || ji[r].n_experts != z->n_experts ||
		    ji[r].hidden != z->hidden || ji[r].top_k != z->top_k)
			return error_set(EINVAL, "rank %d (host %s) opened a different model than rank 0 (host %s): "
						 "model id %016" PRIx64 " vs %016" PRIx64 "; every rank needs a copy of the "
						 "same container",
					 r, ji[r].host, z->host, ji[r].model_id, z->model_id);
	if (z->n_experts < 1)
		return error_set(EINVAL, "%d ranks: the model has no routed experts to share out", d->size);
	if (d->size > PLACEMENT_RANKS_MAX)
		return error_set(EINVAL, "%d ranks: colibri shares experts over at most %d", d->size,
				 PLACEMENT_RANKS_MAX);
	if (d->replicas > d->size)
		return error_set(EINVAL, "--replicas %d over %d rank%s: an expert can be held by at most every rank",
				 d->replicas, d->size, d->size == 1 ? "" : "s");
	return 0;
}

/* Ranks that opened a shard (colibri shard) hold only what its placement
 * gives them: the run deals by that placement, which every shard must
 * name alike and rank 0's --placement / --replicas, when given, too. */
static int shards_agree(struct dist *d, const struct join_info *ji, const struct placement_spec *spec)
{
	int first = -1;
	for (int r = 0; r < d->size; r++) {
		if (!ji[r].shard_ranks)
			continue;
		if (first < 0) {
			first = r;
			continue;
		}
		if (ji[r].shard_replicas != ji[first].shard_replicas ||
		    memcmp(ji[r].shard_weights, ji[first].shard_weights, sizeof ji[r].shard_weights))
			return error_set(EINVAL, "rank %d (host %s) and rank %d (host %s) hold shards of different "
						 "placements (colibri shard --placement / --replicas): cut every shard alike",
					 first, ji[first].host, r, ji[r].host);
	}
	if (first < 0)
		return 0;
	const struct join_info *s = &ji[first];
	bool weights_differ = false;
	for (int r = 0; spec->mode != PLACEMENT_AUTO && r < d->size; r++)
		weights_differ |= spec->mode == PLACEMENT_EVEN ? s->shard_weights[r] != s->shard_weights[0]
							      : spec->weights[r] != s->shard_weights[r];
	if (weights_differ || (spec->replicas && spec->replicas != s->shard_replicas)) {
		char w[256] = "";
		for (int r = 0, at = 0; r < d->size && at < (int)sizeof w; r++)
			at += snprintf(w + at, sizeof w - (size_t)at, "%s%g", r ? "," : "", s->shard_weights[r]);
		return error_set(EINVAL, "the shards (rank %d's on host %s the first) were cut with --placement %s "
					 "--replicas %d, and rank 0's --placement or --replicas differ: leave them out, or "
					 "cut the shards again",
				 first, s->host, w, s->shard_replicas);
	}
	memcpy(d->weights, s->shard_weights, (size_t)d->size * sizeof *d->weights);
	d->replicas = s->shard_replicas;
	d->why = "the shards' placement (colibri shard)";
	return 0;
}

static int dist_alloc(struct dist *d)
{
	size_t L = (size_t)d->n_layers, E = (size_t)d->n_experts, B = (size_t)d->batch, K = (size_t)d->top_k;
	size_t H = (size_t)d->hidden;
	size_t req = (H_WORDS + 2 * E + B * K) * sizeof(int32_t) + B * H * sizeof(float);
	size_t ans = A_WORDS * sizeof(int32_t) + B * K * H * sizeof(float);
	d->owner = malloc(L * E);
	d->holders = malloc(L * E * sizeof *d->holders);
	if (!d->owner || !d->holders)
		return error_set(ENOMEM, "out of memory");
	if (d->rank == 0) {
		d->peers = calloc((size_t)d->size, sizeof *d->peers);
		d->serve = malloc(L * E);
		d->redo = malloc(E * sizeof *d->redo);
		if (!d->peers || !d->serve || !d->redo)
			return error_set(ENOMEM, "out of memory");
		for (int r = 1; r < d->size; r++) {
			struct peer *p = &d->peers[r];
			p->send = malloc(req);
			p->recv = malloc(ans);
			p->experts = malloc(E * sizeof(int32_t));
			p->hints = malloc(E * sizeof(int32_t));
			p->send_cap = req;
			p->recv_cap = ans;
			p->sreq = p->rreq = MPI_REQUEST_NULL;
			if (!p->send || !p->recv || !p->experts || !p->hints)
				return error_set(ENOMEM, "out of memory");
		}
		return 0;
	}
	d->req = malloc(req);
	d->ans = malloc(ans);
	d->req_cap = req;
	d->ans_cap = ans;
	return d->req && d->ans ? 0 : error_set(ENOMEM, "out of memory");
}

int dist_join(struct dist **out, struct forward *f, const struct dist_options *o, int rc_local, uint64_t model_id,
	      double disk_gbps, uint64_t cache_bytes)
{
	*out = NULL;
	if (!active)
		return rc_local;
	struct join_info me = { .rc = rc_local, .model_id = model_id, .disk_gbps = disk_gbps,
				.cache_bytes = cache_bytes };
	snprintf(me.host, sizeof me.host, "%s", my_host);
	if (rc_local)
		snprintf(me.msg, sizeof me.msg, "%s", error_message()[0] ? error_message() : strerror(-rc_local));
	else {
		const struct model_config *c = &f->m->cfg;
		me.n_layers = c->n_layers + c->n_mtp_layers;
		me.n_experts = c->n_experts;
		me.hidden = (int32_t)c->hidden;
		me.top_k = c->top_k;
		const struct manifest *man = &f->m->man;
		for (size_t i = 0; i < man->n_expert_layers; i++)
			me.expert_bytes += man->layers[i].record_bytes * (uint64_t)man->n_experts;
		if (man->shard.present) {
			me.shard_ranks = man->shard.ranks;
			me.shard_replicas = man->shard.replicas;
			memcpy(me.shard_weights, man->shard.weights, sizeof me.shard_weights);
		}
	}
	struct dist *d = calloc(1, sizeof *d);
	struct join_info *ji = calloc((size_t)n_ranks, sizeof *ji);
	if (!ji || !d) {
		/* Not a failure the others hear of: dist_exit aborts the job. */
		free(d);
		free(ji);
		return error_set(ENOMEM, "rank %d (host %s): out of memory joining the MPI job", my_rank, my_host);
	}
	if (MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, ji, (int)sizeof me, MPI_BYTE, MPI_COMM_WORLD) !=
	    MPI_SUCCESS) {
		free(d);
		free(ji);
		return error_set(EIO, "rank %d (host %s): the MPI join failed", my_rank, my_host);
	}
	d->f = f;
	d->rank = my_rank;
	d->size = n_ranks;
	d->ranks = ji;
	d->pending_layer = -1;
	d->hint_layer = -1;
	d->timeout_s = o->timeout_s > 0 ? o->timeout_s : DIST_TIMEOUT_S_DEFAULT;
	d->batch = o->batch;
	d->replicas = o->placement.replicas > 1 ? o->placement.replicas : 1;
	d->alive = n_ranks >= 64 ? ~0ull : (1ull << n_ranks) - 1; /* bit r: rank r */
	for (int r = 0; r < PLACEMENT_RANKS_MAX; r++)
		d->lost_layer[r] = DIST_LOST_NONE;
	int bad = first_failed(ji, n_ranks);
	int rc = 0;
	if (bad >= 0) {
		/* Every rank knows; rank 0 reports it. Its own failure keeps its
		 * own message, as one process would print it. */
		quiet_failure = true; /* every rank knows: all finalize */
		rc = bad == my_rank ? rc_local
				    : error_set(ji[bad].rc < 0 ? -ji[bad].rc : EIO, "rank %d (host %s): %s", bad,
						ji[bad].host, ji[bad].msg);
	}
	if (!rc) {
		d->n_layers = ji[0].n_layers;
		d->n_experts = ji[0].n_experts;
		d->hidden = ji[0].hidden;
		d->top_k = ji[0].top_k;
		double gbps[PLACEMENT_RANKS_MAX] = { 0 };
		uint64_t cache[PLACEMENT_RANKS_MAX] = { 0 };
		rc = join_check(d, ji);
		for (int r = 0; !rc && r < n_ranks; r++) {
			gbps[r] = ji[r].disk_gbps;
			cache[r] = ji[r].cache_bytes;
		}
		if (!rc)
			rc = placement_weights_ram(&o->placement, n_ranks, gbps, cache, ji[0].expert_bytes, d->weights,
						   &d->why);
		if (!rc)
			rc = shards_agree(d, ji, &o->placement);
		if (!rc)
			rc = dist_alloc(d);
		if (!rc) {
			placement_build(d->owner, d->n_layers, d->n_experts, n_ranks, d->weights);
			placement_replicate(d->holders, d->owner, d->n_layers, d->n_experts, n_ranks, d->weights,
					    d->replicas);
			if (d->serve)
				memcpy(d->serve, d->owner, (size_t)d->n_layers * d->n_experts);
		}
		/* Computed alike everywhere from the same inputs: every rank
		 * fails alike, and rank 0 says why. */
		if (rc)
			quiet_failure = true;
	}
	if (rc) {
		d->broken = true; /* nobody serves: no STOP to send */
		dist_free(d);
		return rc;
	}
	if (my_rank > 0) {
		snprintf(d->mine.host, sizeof d->mine.host, "%s", my_host);
		d->mine.weight = d->weights[my_rank];
		d->at_open = *expert_store_stats(f->m->store);
	}
	*out = d;
	return 0;
}

const char *dist_placement_why(const struct dist *d)
{
	return d->why;
}

const uint8_t *dist_owner_table(const struct dist *d)
{
	return d->owner;
}

/* Sleeps a little longer each time nothing has arrived: 20 us, doubling
 * up to cap_us. */
static void backoff(int *us, int cap_us)
{
	struct timespec ts = { 0, (long)*us * 1000 };
	nanosleep(&ts, NULL);
	*us = *us * 2 > cap_us ? cap_us : *us * 2;
}

/* ---- rank 0: the token path ---- */

static bool rank_alive(const struct dist *d, int r)
{
	return d->alive >> r & 1;
}

int dist_partition(const struct dist *d, int layer, int32_t *ids, int *n, int32_t *remote)
{
	const uint8_t *own = d->serve + (size_t)layer * d->n_experts;
	int keep = 0, nr = 0;
	for (int i = 0; i < *n; i++) {
		if (own[ids[i]] == d->rank)
			ids[keep++] = ids[i];
		else
			remote[nr++] = ids[i];
	}
	*n = keep;
	return nr;
}

void dist_hint(struct dist *d, int layer, const int32_t *ids, int n)
{
	const uint8_t *own = d->serve + (size_t)layer * d->n_experts;
	for (int r = 1; r < d->size; r++)
		d->peers[r].n_hint = 0;
	d->hint_layer = layer;
	for (int i = 0; i < n; i++) {
		int r = own[ids[i]];
		if (r > 0)
			d->peers[r].hints[d->peers[r].n_hint++] = ids[i];
	}
}

/* The message to peer r: header, its experts and hints, and the rows when
 * it has experts to run. Returns its size in bytes. */
static size_t pack_request(const struct dist *d, const struct peer *p, int layer, int n, const int32_t *sel,
			   const float *xn)
{
	int32_t *w = (int32_t *)p->send;
	int K = d->top_k, H = d->hidden;
	w[H_MAGIC] = DIST_MAGIC;
	w[H_LAYER] = layer;
	w[H_N] = n;
	w[H_K] = K;
	w[H_NEXP] = p->n_exp;
	w[H_NHINT] = p->n_hint;
	w[H_HINT_LAYER] = d->hint_layer;
	w[H_HIDDEN] = H;
	size_t off = H_WORDS;
	memcpy(w + off, p->experts, (size_t)p->n_exp * sizeof *w);
	off += (size_t)p->n_exp;
	memcpy(w + off, p->hints, (size_t)p->n_hint * sizeof *w);
	off += (size_t)p->n_hint;
	if (!p->n_exp)
		return off * sizeof *w;
	memcpy(w + off, sel, (size_t)n * K * sizeof *w);
	off += (size_t)n * K;
	memcpy(w + off, xn, (size_t)n * H * sizeof(float));
	return off * sizeof *w + (size_t)n * H * sizeof(float);
}

/* Once a rank failed or went silent, its late answers could land in a
 * later layer's cells: every later step fails with the first error. */
static int remember(struct dist *d, int rc)
{
	if (rc && d->broken && !d->broken_msg[0])
		snprintf(d->broken_msg, sizeof d->broken_msg, "%s", error_message());
	return rc;
}

/* Adds the ascending ids[0..n) to the ascending d->redo, once each. */
static void redo_merge(struct dist *d, const int32_t *ids, int n)
{
	for (int i = 0; i < n; i++) {
		int j = d->n_redo;
		while (j > 0 && d->redo[j - 1] > ids[i])
			j--;
		if (j > 0 && d->redo[j - 1] == ids[i])
			continue;
		memmove(d->redo + j + 1, d->redo + j, (size_t)(d->n_redo - j) * sizeof *d->redo);
		d->redo[j] = ids[i];
		d->n_redo++;
	}
}

/* Rank r is silent or failed at layer (what happened is the error message
 * at hand, rc its code). Without replicas the run ends with it. With
 * replicas its experts move to live holders, the rows it owed for the
 * layer in flight go to dist_layer_redo, and nothing is sent to or waited
 * for from it again. 0 when the run goes on. */
static int rank_lost(struct dist *d, int r, int layer, int rc)
{
	if (d->replicas < 2) {
		d->broken = true;
		return rc;
	}
	/* Handled here: the message becomes the warning, and the next
	 * failure must be able to say its own. */
	char why[DIST_MSG_MAX];
	snprintf(why, sizeof why, "%s", error_message());
	error_clear();
	struct peer *p = &d->peers[r];
	d->alive &= ~(1ull << r);
	d->lost_layer[r] = layer;
	int el = -1, ee = -1;
	if (placement_failover(d->serve, d->owner, d->holders, d->n_layers, d->n_experts, d->size, d->weights,
			       d->alive, &el, &ee)) {
		error_clear();
		d->broken = true;
		return error_set(EHOSTUNREACH, "%s; no rank left holds expert %d of layer %d (--replicas %d)", why, ee,
				 el, d->replicas);
	}
	if (layer == d->pending_layer)
		redo_merge(d, p->experts, p->n_exp);
	p->n_exp = p->n_hint = 0;
	/* Never waited for again; a late answer stays unmatched. */
	if (p->rreq != MPI_REQUEST_NULL) {
		MPI_Cancel(&p->rreq);
		MPI_Request_free(&p->rreq);
	}
	if (p->sreq != MPI_REQUEST_NULL)
		MPI_Request_free(&p->sreq);
	if (n_orphans + 2 <= (int)(sizeof orphans / sizeof orphans[0])) {
		orphans[n_orphans++] = p->send;
		orphans[n_orphans++] = p->recv;
		p->send = NULL;
		p->recv = NULL;
	}
	fprintf(stderr, "colibri: warning: %s; its experts are served by the ranks holding their replicas from now "
			"on (--replicas %d): same results, less speed\n",
		why, d->replicas);
	fflush(stderr);
	return 0;
}

static int layer_send(struct dist *d, int layer, int n, const int32_t *sel, const float *xn, const int32_t *remote,
		      int n_remote);

int dist_layer_send(struct dist *d, int layer, int n, const int32_t *sel, const float *xn, const int32_t *remote,
		    int n_remote)
{
	if (d->broken)
		return error_set(EIO, "%s", d->broken_msg[0] ? d->broken_msg : "an earlier rank failure");
	return remember(d, layer_send(d, layer, n, sel, xn, remote, n_remote));
}

static int layer_send(struct dist *d, int layer, int n, const int32_t *sel, const float *xn, const int32_t *remote,
		      int n_remote)
{
	const uint8_t *own = d->serve + (size_t)layer * d->n_experts;
	for (int r = 1; r < d->size; r++)
		d->peers[r].n_exp = 0;
	for (int i = 0; i < n_remote; i++) {
		struct peer *p = &d->peers[own[remote[i]]];
		p->experts[p->n_exp++] = remote[i];
	}
	d->pending_layer = layer;
	d->pending_n = n;
	d->pending_sel = sel;
	d->n_redo = 0;
	/* Every rank hears of every MoE layer, experts for it or not: one
	 * small round trip each, which also tells a silent rank in time. */
	for (int r = 1; r < d->size; r++) {
		struct peer *p = &d->peers[r];
		if (!rank_alive(d, r))
			continue;
		size_t bytes = pack_request(d, p, layer, n, sel, xn);
		if (MPI_Irecv(p->recv, (int)p->recv_cap, MPI_BYTE, r, MPI_ANY_TAG, MPI_COMM_WORLD, &p->rreq) !=
			    MPI_SUCCESS ||
		    MPI_Isend(p->send, (int)bytes, MPI_BYTE, r, DIST_TAG_LAYER, MPI_COMM_WORLD, &p->sreq) != MPI_SUCCESS) {
			int rc = error_set(EIO, "rank %d (host %s): cannot send layer %d", r, d->ranks[r].host, layer);
			if ((rc = rank_lost(d, r, layer, rc)))
				return rc;
			continue;
		}
		d->net_bytes += bytes;
		p->n_hint = 0;
	}
	d->hint_layer = -1;
	return 0;
}

/* Peer r's answer, landed in p->recv with status st: its rows into their
 * (token, slot) cells. */
static int unpack_answer(struct dist *d, int r, const MPI_Status *st, float *expert_out)
{
	struct peer *p = &d->peers[r];
	int bytes = 0;
	MPI_Get_count(st, MPI_BYTE, &bytes);
	const char *host = d->ranks[r].host;
	if (st->MPI_TAG == DIST_TAG_ERROR) {
		char msg[DIST_MSG_MAX];
		int len = bytes < (int)sizeof msg - 1 ? bytes : (int)sizeof msg - 1;
		memcpy(msg, p->recv, (size_t)(len > 0 ? len : 0));
		msg[len > 0 ? len : 0] = 0;
		return error_set(EIO, "rank %d (host %s): %s", r, host, msg);
	}
	const int32_t *w = (const int32_t *)p->recv;
	int K = d->top_k, H = d->hidden, n = d->pending_n;
	size_t want_rows = 0;
	for (int i = 0; i < p->n_exp; i++)
		for (int c = 0; c < n * K; c++)
			want_rows += d->pending_sel[c] == p->experts[i];
	if (st->MPI_TAG != DIST_TAG_ROWS || bytes < (int)(A_WORDS * sizeof(int32_t)) || w[A_MAGIC] != DIST_MAGIC ||
	    w[A_LAYER] != d->pending_layer || (size_t)w[A_ROWS] != want_rows ||
	    (size_t)bytes != A_WORDS * sizeof(int32_t) + want_rows * H * sizeof(float))
		return error_set(EPROTO, "rank %d (host %s): a malformed answer for layer %d (tag %d, %d bytes, "
					 "%zu rows expected)",
				 r, host, d->pending_layer, st->MPI_TAG, bytes, want_rows);
	const float *row = p->recv + A_WORDS;
	for (int i = 0; i < p->n_exp; i++)
		for (int t = 0; t < n; t++)
			for (int k = 0; k < K; k++)
				if (d->pending_sel[t * K + k] == p->experts[i]) {
					memcpy(expert_out + ((size_t)t * K + k) * H, row, (size_t)H * sizeof(float));
					row += H;
				}
	d->net_bytes += (uint64_t)bytes;
	return 0;
}

static int layer_collect(struct dist *d, int layer, float *expert_out);

int dist_layer_collect(struct dist *d, int layer, float *expert_out)
{
	return remember(d, layer_collect(d, layer, expert_out));
}

/* Polls peer r once: 1 when its answer is in (or it was lost), 0 while
 * it is still out; a negative code ends the run. */
static int collect_one(struct dist *d, int r, int layer, float *expert_out)
{
	struct peer *p = &d->peers[r];
	int flag = 0, rc;
	MPI_Status st;
	if (p->sreq != MPI_REQUEST_NULL && MPI_Test(&p->sreq, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
		rc = error_set(EIO, "rank %d (host %s): sending layer %d failed", r, d->ranks[r].host, layer);
		return (rc = rank_lost(d, r, layer, rc)) ? rc : 1;
	}
	flag = 0;
	if (MPI_Test(&p->rreq, &flag, &st) != MPI_SUCCESS) {
		rc = error_set(EIO, "rank %d (host %s): receiving layer %d failed", r, d->ranks[r].host, layer);
		return (rc = rank_lost(d, r, layer, rc)) ? rc : 1;
	}
	if (!flag)
		return 0;
	if ((rc = unpack_answer(d, r, &st, expert_out)) != 0)
		return (rc = rank_lost(d, r, layer, rc)) ? rc : 1;
	return 1;
}

static int layer_collect(struct dist *d, int layer, float *expert_out)
{
	if (d->pending_layer != layer)
		return error_set(EINVAL, "layer %d: no request in flight to collect", layer);
	double t0 = clock_now_s(), deadline = t0 + d->timeout_s;
	int us = 20, rc = 0;
	for (;;) {
		int progressed = 0, left = 0;
		for (int r = 1; !rc && r < d->size; r++) {
			if (!rank_alive(d, r) || d->peers[r].rreq == MPI_REQUEST_NULL)
				continue;
			int got = collect_one(d, r, layer, expert_out);
			if (got < 0)
				rc = got;
			else if (got)
				progressed = 1;
			else
				left++;
		}
		if (rc || left == 0)
			break;
		if (clock_now_s() > deadline) {
			for (int r = 1; !rc && r < d->size; r++)
				if (rank_alive(d, r) && d->peers[r].rreq != MPI_REQUEST_NULL) {
					rc = error_set(ETIMEDOUT, "rank %d (host %s) did not answer layer %d within %.0f s "
								  "(--dist-timeout): stopped, hung or cut off",
						       r, d->ranks[r].host, layer, d->timeout_s);
					rc = rank_lost(d, r, layer, rc);
				}
			break;
		}
		if (progressed)
			us = 20;
		else
			backoff(&us, 100);
	}
	if (rc) {
		d->broken = true;
		return rc;
	}
	/* The sends are done once their answers are in; make it official. */
	for (int r = 1; r < d->size; r++)
		if (rank_alive(d, r) && d->peers[r].sreq != MPI_REQUEST_NULL)
			MPI_Wait(&d->peers[r].sreq, MPI_STATUS_IGNORE);
	d->net_s += clock_now_s() - t0;
	d->pending_layer = -1;
	return 0;
}

int dist_layer_redo(struct dist *d, int32_t *ids)
{
	int n = d->n_redo;
	memcpy(ids, d->redo, (size_t)n * sizeof *ids);
	d->n_redo = 0;
	return n;
}

void dist_count_local(struct dist *d, int n)
{
	d->local_runs += (uint64_t)n;
}

/* ---- ranks 1..: serving ---- */

/* VmHWM of /proc/self/status in bytes, 0 if unknown. */
static uint64_t peak_rss_bytes(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	uint64_t kb = 0;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmHWM: %" SCNu64, &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb * 1024;
}

/* Checks a request of `bytes` in d->req against the model; NULL, or what
 * is wrong with it. */
static const char *check_request(const struct dist *d, size_t bytes)
{
	const int32_t *w = (const int32_t *)d->req;
	if (bytes < H_WORDS * sizeof(int32_t) || w[H_MAGIC] != DIST_MAGIC)
		return "not a colibri layer request";
	int n = w[H_N], ne = w[H_NEXP], nh = w[H_NHINT], layer = w[H_LAYER], hl = w[H_HINT_LAYER];
	if (layer < 0 || layer >= d->n_layers || w[H_K] != d->top_k || w[H_HIDDEN] != d->hidden)
		return "a request for another model's shape";
	if (n < 0 || n > d->batch || ne < 0 || ne > d->n_experts || nh < 0 || nh > d->n_experts ||
	    (nh && (hl < 0 || hl >= d->n_layers)))
		return "a request beyond this rank's batch or the model's experts";
	size_t words = H_WORDS + (size_t)ne + (size_t)nh + (ne ? (size_t)n * d->top_k : 0);
	size_t want = words * sizeof(int32_t) + (ne ? (size_t)n * d->hidden * sizeof(float) : 0);
	if (bytes != want)
		return "a request of the wrong size";
	const int32_t *ids = w + H_WORDS;
	for (int i = 0; i < ne + nh; i++) {
		int l = i < ne ? layer : hl;
		if (ids[i] < 0 || ids[i] >= d->n_experts || !(d->holders[(size_t)l * d->n_experts + ids[i]] >> d->rank & 1))
			return "a request for an expert this rank does not hold";
	}
	const int32_t *sel = ids + ne + nh;
	for (int i = 0; ne && i < n * d->top_k; i++)
		if (sel[i] < 0 || sel[i] >= d->n_experts)
			return "routing that names no expert";
	return NULL;
}

static void send_error(struct dist *d)
{
	MPI_Send(d->err, (int)strlen(d->err), MPI_BYTE, 0, DIST_TAG_ERROR, MPI_COMM_WORLD);
}

static void serve_layer(struct dist *d, size_t bytes)
{
	double t0 = clock_now_s();
	const char *bad = d->err[0] ? NULL : check_request(d, bytes);
	if (bad)
		snprintf(d->err, sizeof d->err, "%s", bad);
	if (d->err[0]) {
		send_error(d);
		return;
	}
	const int32_t *w = (const int32_t *)d->req;
	int n = w[H_N], ne = w[H_NEXP], nh = w[H_NHINT];
	const int32_t *ids = w + H_WORDS, *hints = ids + ne, *sel = hints + nh;
	const float *xn = (const float *)(sel + (ne ? (size_t)n * d->top_k : 0));
	int rows = ffn_moe_serve(d->f, w[H_LAYER], ids, ne, ne ? sel : NULL, ne ? xn : NULL, n, w[H_HINT_LAYER],
				 hints, nh, d->ans + A_WORDS);
	if (rows < 0) {
		snprintf(d->err, sizeof d->err, "%s", error_message()[0] ? error_message() : strerror(-rows));
		send_error(d);
		return;
	}
	int32_t *a = (int32_t *)d->ans;
	a[A_MAGIC] = DIST_MAGIC;
	a[A_LAYER] = w[H_LAYER];
	a[A_ROWS] = rows;
	size_t out = A_WORDS * sizeof(int32_t) + (size_t)rows * d->hidden * sizeof(float);
	double t1 = clock_now_s();
	MPI_Send(d->ans, (int)out, MPI_BYTE, 0, DIST_TAG_ROWS, MPI_COMM_WORLD);
	double t2 = clock_now_s();
	d->mine.experts_served += (uint64_t)ne;
	d->mine.rows_served += (uint64_t)rows;
	d->mine.serve_s += t2 - t0;
	d->mine.net_s += t2 - t1;
	d->mine.net_bytes += bytes + out;
}

int dist_serve(struct dist *d)
{
	int us = 20;
	for (;;) {
		int flag = 0;
		MPI_Status st;
		if (MPI_Iprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS)
			return error_set(EIO, "rank %d (host %s): lost rank 0", d->rank, my_host);
		if (!flag) {
			/* Rank 0 may compute for long (a prompt's attention):
			 * no timeout here; if it dies, mpirun ends this rank. */
			backoff(&us, 200);
			continue;
		}
		us = 20;
		int bytes = 0;
		MPI_Get_count(&st, MPI_BYTE, &bytes);
		double t0 = clock_now_s();
		if (bytes < 0 || (size_t)bytes > d->req_cap) {
			/* Take it off the line anyway, then refuse it. */
			char sink;
			MPI_Recv(&sink, 0, MPI_BYTE, 0, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			snprintf(d->err, sizeof d->err, "a message of %d bytes, beyond the %zu a request can take", bytes,
				 d->req_cap);
			send_error(d);
			continue;
		}
		MPI_Recv(d->req, bytes, MPI_BYTE, 0, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		d->mine.net_s += clock_now_s() - t0;
		switch (st.MPI_TAG) {
		case DIST_TAG_LAYER:
			serve_layer(d, (size_t)bytes);
			break;
		case DIST_TAG_STATS: {
			const struct expert_store_stats *s = expert_store_stats(d->f->m->store);
			struct dist_rank_stats out = d->mine;
			out.requests = s->requests - d->at_open.requests;
			out.hits = (s->hits + s->pinned_hits) - (d->at_open.hits + d->at_open.pinned_hits);
			out.bytes_read = s->bytes_read - d->at_open.bytes_read;
			out.disk_wait_s = s->disk_wait_s - d->at_open.disk_wait_s;
			out.peak_rss_bytes = peak_rss_bytes();
			MPI_Send(&out, (int)sizeof out, MPI_BYTE, 0, DIST_TAG_STATS, MPI_COMM_WORLD);
			break;
		}
		case DIST_TAG_STOP: {
			/* Rank 0 has reported this rank's failure already when
			 * it moved on without it: then leave cleanly. */
			int32_t reported = bytes >= (int)sizeof(int32_t) ? *(const int32_t *)d->req : 0;
			int32_t bye = 0, finalize = 1;
			MPI_Send(&bye, 1, MPI_INT32_T, 0, DIST_TAG_BYE, MPI_COMM_WORLD);
			/* Then how to leave: with MPI_Finalize when every rank
			 * is there to finalize. */
			for (int flag = 0, wait_us = 20; !flag;) {
				if (MPI_Iprobe(0, DIST_TAG_LEAVE, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
					break;
				if (!flag)
					backoff(&wait_us, 1000);
			}
			MPI_Recv(&finalize, 1, MPI_INT32_T, 0, DIST_TAG_LEAVE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			leave_unfinalized = !finalize;
			return d->err[0] && !reported ? error_set(EIO, "%s", d->err) : 0;
		}
		default:
			snprintf(d->err, sizeof d->err, "a message with tag %d", st.MPI_TAG);
			send_error(d);
		}
	}
}

int dist_stats(struct dist *d, struct dist_rank_stats *out)
{
	memset(out, 0, (size_t)d->size * sizeof *out);
	for (int r = 0; r < d->size; r++) {
		snprintf(out[r].host, sizeof out[r].host, "%s", d->ranks[r].host);
		out[r].weight = d->weights[r];
		out[r].lost_layer = d->lost_layer[r];
	}
	for (int l = 0; l < d->n_layers; l++)
		for (int e = 0; e < d->n_experts; e++)
			if (l >= (int)d->f->m->cfg.n_layers || model_config_layer_moe(&d->f->m->cfg, l)) {
				size_t i = (size_t)l * d->n_experts + e;
				out[d->owner[i]].experts_owned++;
				for (int r = 0; r < d->size; r++)
					out[r].experts_held += (int32_t)(d->holders[i] >> r & 1);
			}
	out[0].experts_served = d->local_runs;
	out[0].net_s = d->net_s;
	out[0].net_bytes = d->net_bytes;
	if (d->broken)
		return error_set(EIO, "the ranks' counters are lost with the run");
	double deadline = clock_now_s() + d->timeout_s;
	for (int r = 1; r < d->size; r++) {
		struct dist_rank_stats got;
		MPI_Request q;
		if (!rank_alive(d, r))
			continue; /* its counters are lost with it */
		if (MPI_Send(NULL, 0, MPI_BYTE, r, DIST_TAG_STATS, MPI_COMM_WORLD) != MPI_SUCCESS ||
		    MPI_Irecv(&got, (int)sizeof got, MPI_BYTE, r, DIST_TAG_STATS, MPI_COMM_WORLD, &q) != MPI_SUCCESS) {
			d->broken = true;
			return error_set(EIO, "rank %d (host %s): cannot ask for its counters", r, d->ranks[r].host);
		}
		int flag = 0, us = 20;
		while (!flag) {
			MPI_Test(&q, &flag, MPI_STATUS_IGNORE);
			if (flag)
				break;
			if (clock_now_s() > deadline) {
				MPI_Cancel(&q);
				MPI_Request_free(&q);
				int rc = error_set(ETIMEDOUT, "rank %d (host %s) did not send its counters within %.0f s",
						   r, d->ranks[r].host, d->timeout_s);
				if ((rc = rank_lost(d, r, DIST_LOST_AT_END, rc)))
					return rc;
				break;
			}
			backoff(&us, 1000);
		}
		if (!flag)
			continue;
		struct dist_rank_stats mine = out[r];
		out[r] = got;
		snprintf(out[r].host, sizeof out[r].host, "%s", mine.host);
		out[r].experts_owned = mine.experts_owned;
		out[r].experts_held = mine.experts_held;
		out[r].weight = mine.weight;
		out[r].lost_layer = DIST_LOST_NONE;
	}
	return 0;
}

/* Rank 0 at the end: STOP to every rank (never blocking on a lost one),
 * then each one's BYE, a lost one's for a few seconds at most. What a lost
 * rank still sends first (a late answer, which may wait for its receiver
 * to be posted) is taken and dropped, so that one that was only slow can
 * reach its BYE. The lost ranks that never say BYE are hung: dist_exit
 * must not finalize with them unless mpirun runs with --enable-recovery. */
static void stop_all(struct dist *d)
{
	static const int32_t stop_msg[2] = { 0, 1 }; /* [0]: a live rank, [1]: one rank 0 reported */
	if (d->size < 2)
		return;
	MPI_Request *q = calloc((size_t)d->size, sizeof *q);
	bool *done = calloc((size_t)d->size, sizeof *done);
	size_t drop_cap = d->peers[1].recv_cap;
	void *drop = malloc(drop_cap);
	if (!q || !done || !drop) {
		free(q);
		free(done);
		free(drop);
		return;
	}
	for (int r = 1; r < d->size; r++)
		MPI_Isend(&stop_msg[rank_alive(d, r) ? 0 : 1], 1, MPI_INT32_T, r, DIST_TAG_STOP, MPI_COMM_WORLD, &q[r]);
	double t0 = clock_now_s();
	double lost_wait = DIST_BYE_WAIT_S < d->timeout_s ? DIST_BYE_WAIT_S : d->timeout_s;
	int us = 20;
	for (;;) {
		int waiting = 0;
		double waited = clock_now_s() - t0;
		for (int r = 1; r < d->size; r++) {
			int flag = 0, bytes = 0;
			MPI_Status st;
			if (done[r] || waited >= (rank_alive(d, r) ? d->timeout_s : lost_wait))
				continue;
			waiting++;
			if (MPI_Iprobe(r, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS || !flag)
				continue;
			MPI_Get_count(&st, MPI_BYTE, &bytes);
			if (bytes > (int)drop_cap) {
				void *bigger = realloc(drop, (size_t)bytes);
				if (!bigger)
					continue;
				drop = bigger;
				drop_cap = (size_t)bytes;
			}
			MPI_Recv(drop, bytes, MPI_BYTE, r, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			done[r] = st.MPI_TAG == DIST_TAG_BYE;
			us = 20;
		}
		if (!waiting)
			break;
		backoff(&us, 1000);
	}
	for (int r = 1; r < d->size; r++) {
		if (!done[r]) {
			size_t at = strlen(stuck);
			snprintf(stuck + at, sizeof stuck - at, "%srank %d (host %s)", at ? ", " : "", r, d->ranks[r].host);
		}
		MPI_Request_free(&q[r]);
	}
	/* Every rank that said BYE waits to hear whether all will finalize. */
	int32_t finalize = !stuck[0];
	leave_unfinalized = !finalize;
	for (int r = 1; r < d->size; r++)
		if (done[r])
			MPI_Send(&finalize, 1, MPI_INT32_T, r, DIST_TAG_LEAVE, MPI_COMM_WORLD);
	free(drop);
	free(done);
	free(q);
}

void dist_free(struct dist *d)
{
	if (!d)
		return;
	if (d->rank == 0 && !d->broken)
		stop_all(d);
	if (d->peers)
		for (int r = 1; r < d->size; r++) {
			free(d->peers[r].send);
			free(d->peers[r].recv);
			free(d->peers[r].experts);
			free(d->peers[r].hints);
		}
	free(d->peers);
	free(d->req);
	free(d->ans);
	free(d->owner);
	free(d->holders);
	free(d->serve);
	free(d->redo);
	free(d->ranks);
	free(d);
}
