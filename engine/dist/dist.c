/*
 * dist — see dist.h: the process's place in the job (init, exit, the
 * agreement on rank 0's settings, the join that builds the placement) and
 * the end of a run (every rank's counters, STOP, BYE, LEAVE). The token path is dist_layer.c,
 * the failover dist_failover.c, the serving ranks' loop dist_serve.c
 * (README.md). Only engine/dist sees MPI.
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
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/dist/dist_internal.h"
#include "engine/forward/forward.h"

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
void dist_backoff(int *us, int cap_us)
{
	struct timespec ts = { 0, (long)*us * 1000 };
	nanosleep(&ts, NULL);
	*us = *us * 2 > cap_us ? cap_us : *us * 2;
}

void dist_keep_orphans(void *send, void *recv)
{
	/* Room for one pair per rank: each is lost once. */
	if (n_orphans + 2 <= (int)(sizeof orphans / sizeof orphans[0])) {
		orphans[n_orphans++] = send;
		orphans[n_orphans++] = recv;
	}
}

void dist_leave_unfinalized(void)
{
	leave_unfinalized = true;
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
				if ((rc = dist_rank_lost(d, r, DIST_LOST_AT_END, rc)))
					return rc;
				break;
			}
			dist_backoff(&us, 1000);
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
		dist_backoff(&us, 1000);
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
