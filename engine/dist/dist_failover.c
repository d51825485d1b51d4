/*
 * dist_failover — rank 0 when a rank fails or goes silent. Without
 * --replicas the run ends with an error naming the rank and its host, and
 * every later step fails with that first error (a late answer could land
 * in a later layer's cells). With replicas the rank's experts move to
 * live holders (placement_failover), the rows it owed for the layer in
 * flight are asked again from them (dist_layer_redo, which ffn_moe.c
 * calls through the remote ops), and the rank is never sent to or waited
 * for again: same results, less speed, and a warning.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/dist/dist_internal.h"

/* Once a rank failed or went silent, its late answers could land in a
 * later layer's cells: every later step fails with the first error. */
int dist_remember(struct dist *d, int rc)
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
int dist_rank_lost(struct dist *d, int r, int layer, int rc)
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
	dist_keep_orphans(p->send, p->recv);
	p->send = NULL;
	p->recv = NULL;
	fprintf(stderr, "colibri: warning: %s; its experts are served by the ranks holding their replicas from now "
			"on (--replicas %d): same results, less speed\n",
		why, d->replicas);
	fflush(stderr);
	return 0;
}

int dist_layer_redo(struct dist *d, int32_t *ids)
{
	int n = d->n_redo;
	memcpy(ids, d->redo, (size_t)n * sizeof *ids);
	d->n_redo = 0;
	return n;
}
