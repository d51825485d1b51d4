/*
 * remote — routed experts that other processes serve, as the MoE FFN sees
 * them: an ops table forward owns and a transport implements (engine/dist,
 * over MPI). forward calls it and never includes the transport; the
 * transport calls back into forward only through ffn_moe_serve
 * (forward.h) on the serving side.
 *
 * Per MoE layer, on the process that runs the token path (rank 0):
 *   partition   keeps in ids[0..*n) the experts served here (order kept),
 *               moves the others, ascending, to remote[]; returns how many
 *               went there;
 *   count_local counts n expert runs done here (the report's line);
 *   hint        notes the next layer's predicted experts served elsewhere;
 *               they travel with the next send;
 *   send        sends each server its experts of remote[0..n_remote) with
 *               the rows of xn ([n, hidden]) and sel ([n, top_k]) and the
 *               hints; does not wait;
 *   collect     waits for the answers of the last send and writes each row
 *               into its cell of expert_out ([n, top_k, hidden]): the
 *               fixed-order sum over slots is the caller's, so where a row
 *               was computed changes no bit; an error names the server;
 *   redo        after collect: the experts whose server was lost (served
 *               again by a replica), ascending, into ids[]; their rows are
 *               still owed and partition now places them on live servers;
 *               returns their count (0: every row is in).
 * Every function returns 0 (or a count) or -errno with a message set.
 */
#ifndef COLIBRI_ENGINE_FORWARD_REMOTE_H
#define COLIBRI_ENGINE_FORWARD_REMOTE_H

#include <stdint.h>

struct remote_experts_ops {
	int (*partition)(void *ctx, int layer, int32_t *ids, int *n, int32_t *remote);
	void (*count_local)(void *ctx, int n);
	void (*hint)(void *ctx, int layer, const int32_t *ids, int n);
	int (*send)(void *ctx, int layer, int n, const int32_t *sel, const float *xn, const int32_t *remote,
		    int n_remote);
	int (*collect)(void *ctx, int layer, float *expert_out);
	int (*redo)(void *ctx, int32_t *ids);
};

/* A transport and its state; ops NULL: every expert is served here. */
struct remote_experts {
	const struct remote_experts_ops *ops;
	void *ctx;
};

#endif
