/*
 * dist_layer — rank 0's side of the token path: the remote experts of
 * its forward (engine/forward/remote.h) over MPI. Per MoE layer the
 * union's experts are split by who serves them now (the placement, or
 * after a loss a live holder), each serving rank gets one non-blocking
 * message with its experts, the rows, the routing and its part of the
 * next layer's prediction, and its answer's rows land in their (token,
 * slot) cells. Waiting polls with a growing sleep (dist.c says why); a
 * rank silent for the timeout, failing or answering nonsense goes to
 * dist_failover.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/dist/dist_internal.h"

static int partition(void *ctx, int layer, int32_t *ids, int *n, int32_t *remote)
{
	const struct dist *d = ctx;
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

static void hint(void *ctx, int layer, const int32_t *ids, int n)
{
	struct dist *d = ctx;
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
			if ((rc = dist_rank_lost(d, r, layer, rc)))
				return rc;
			continue;
		}
		d->net_bytes += bytes;
		p->n_hint = 0;
	}
	d->hint_layer = -1;
	return 0;
}

static int send(void *ctx, int layer, int n, const int32_t *sel, const float *xn, const int32_t *remote, int n_remote)
{
	struct dist *d = ctx;
	if (d->broken)
		return error_set(EIO, "%s", d->broken_msg[0] ? d->broken_msg : "an earlier rank failure");
	return dist_remember(d, layer_send(d, layer, n, sel, xn, remote, n_remote));
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

/* Polls peer r once: 1 when its answer is in (or it was lost), 0 while
 * it is still out; a negative code ends the run. */
static int collect_one(struct dist *d, int r, int layer, float *expert_out)
{
	struct peer *p = &d->peers[r];
	int flag = 0, rc;
	MPI_Status st;
	if (p->sreq != MPI_REQUEST_NULL && MPI_Test(&p->sreq, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
		rc = error_set(EIO, "rank %d (host %s): sending layer %d failed", r, d->ranks[r].host, layer);
		return (rc = dist_rank_lost(d, r, layer, rc)) ? rc : 1;
	}
	flag = 0;
	if (MPI_Test(&p->rreq, &flag, &st) != MPI_SUCCESS) {
		rc = error_set(EIO, "rank %d (host %s): receiving layer %d failed", r, d->ranks[r].host, layer);
		return (rc = dist_rank_lost(d, r, layer, rc)) ? rc : 1;
	}
	if (!flag)
		return 0;
	if ((rc = unpack_answer(d, r, &st, expert_out)) != 0)
		return (rc = dist_rank_lost(d, r, layer, rc)) ? rc : 1;
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
					rc = dist_rank_lost(d, r, layer, rc);
				}
			break;
		}
		if (progressed)
			us = 20;
		else
			dist_backoff(&us, 100);
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

static int collect(void *ctx, int layer, float *expert_out)
{
	struct dist *d = ctx;
	return dist_remember(d, layer_collect(d, layer, expert_out));
}

static void count_local(void *ctx, int n)
{
	struct dist *d = ctx;
	d->local_runs += (uint64_t)n;
}

static int redo(void *ctx, int32_t *ids)
{
	return dist_layer_redo(ctx, ids);
}

static const struct remote_experts_ops dist_ops = {
	.partition = partition,
	.count_local = count_local,
	.hint = hint,
	.send = send,
	.collect = collect,
	.redo = redo,
};

struct remote_experts dist_remote(struct dist *d)
{
	return (struct remote_experts){ .ops = d && d->rank == 0 ? &dist_ops : NULL, .ctx = d };
}
