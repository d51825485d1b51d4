/*
 * placement — which rank of a distributed run (engine/dist) serves each
 * routed expert, and what the split should cost per token.
 *
 * Pure arithmetic over plain numbers, so that every rank computes the same
 * table from the same inputs (the ranks' weights, gathered at start-up) and
 * `colibri plan --hosts` prints the table a run would use. Each layer's
 * experts are dealt out by stride scheduling: expert e goes to the rank
 * whose share is furthest behind its weight, so every rank's count is
 * within one of E * w_r / sum(w) and a layer's experts interleave across
 * ranks (a token's top-k lands on several ranks, whose disks then read in
 * parallel). The deal starts at a different rank in each layer so that the
 * rounding does not favour one rank everywhere. Placement never changes
 * results: rank 0 sums the experts' outputs in slot order wherever they ran.
 */
#ifndef COLIBRI_PLANNER_PLACEMENT_H
#define COLIBRI_PLANNER_PLACEMENT_H

#include <stdint.h>

#define PLACEMENT_RANKS_MAX 64

/* How --placement shares experts out. */
enum placement_mode {
	PLACEMENT_AUTO,      /* by each rank's measured disk bandwidth; even when any is unknown */
	PLACEMENT_EVEN,
	PLACEMENT_WEIGHTS,   /* explicit per-rank weights */
};

struct placement_spec {
	enum placement_mode mode;
	int n_weights;
	double weights[PLACEMENT_RANKS_MAX];
	int replicas;                /* ranks that hold each expert (--replicas); 0 counts as 1 */
};

#define PLACEMENT_REPLICAS_MAX 8

/* Parses --placement auto|even|W0,W1,... (weights > 0, at most
 * PLACEMENT_RANKS_MAX) into *p, keeping p->replicas. 0, or -EINVAL with a
 * message naming the option. */
int placement_spec_parse(struct placement_spec *p, const char *arg);

/* Parses --replicas K (1..PLACEMENT_REPLICAS_MAX) into p->replicas. 0, or
 * -EINVAL with a message naming the option. */
int placement_replicas_parse(struct placement_spec *p, const char *arg);

/* The weight of each of n_ranks ranks under spec, given each rank's disk
 * bandwidth in GB/s (0: not profiled), into w[n_ranks]; *why says which
 * rule applied ("disk bandwidth", "even", "weights", or why auto fell back
 * to even). -EINVAL with a message when explicit weights do not match the
 * rank count. */
int placement_weights(const struct placement_spec *spec, int n_ranks, const double *disk_gbps, double *w,
		      const char **why);

/* placement_weights with each rank's RAM: auto then minimizes the slowest
 * rank's reads per token under uniform routing. A rank holding share s_r of
 * expert_bytes (all routed records) in a cache of cache_bytes[r] misses
 * max(0, s_r X - c_r) of them, read at disk_gbps[r]; the shares that make
 * every rank's (s_r X - c_r) / d_r equal are
 *     s_r X = c_r + T d_r,   T = (X - sum c) / sum d.
 * When everything fits (T <= 0) no share misses, and the disks' speeds
 * share the cold reads: s_r X = min(c_r, lambda d_r) with lambda making the
 * shares sum to X. *why says "disk bandwidth and RAM". A cache of 0 is a
 * rank with no room for experts; unknown disks give even as before. */
int placement_weights_ram(const struct placement_spec *spec, int n_ranks, const double *disk_gbps,
			  const uint64_t *cache_bytes, uint64_t expert_bytes, double *w, const char **why);

/* owner[l * n_experts + e]: the rank serving expert e of layer l, for
 * n_layers layers of n_experts each (every layer dealt, MoE or not; the
 * caller ignores the others). The caller owns owner[n_layers * n_experts]. */
void placement_build(uint8_t *owner, int n_layers, int n_experts, int n_ranks, const double *w);

/* Replication. holders[l * n_experts + e] has bit r set when rank r holds
 * expert e of layer l: its owner (from placement_build) and replicas - 1
 * other ranks, dealt round by round by weight over the ranks that lack the
 * expert, each owner's experts apart, so that a lost rank's experts spread
 * over the survivors by weight. Owners serve; the other holders are the
 * fallback when an owner is lost. replicas in 1..n_ranks; the caller owns
 * holders[n_layers * n_experts]. */
void placement_replicate(uint64_t *holders, const uint8_t *owner, int n_layers, int n_experts, int n_ranks,
			 const double *w, int replicas);

/* Who serves each expert while only the ranks in alive (bit r: rank r)
 * answer: its owner when alive, else the live holder furthest behind its
 * weight in that layer (so a lost rank's experts spread over the holders
 * by weight), into serve[n_layers * n_experts]. Deterministic in its
 * inputs. 0, or -EHOSTUNREACH with a message naming the first expert no
 * live rank holds (*layer_out, *expert_out set to it). */
int placement_failover(uint8_t *serve, const uint8_t *owner, const uint64_t *holders, int n_layers, int n_experts,
		       int n_ranks, const double *w, uint64_t alive, int *layer_out, int *expert_out);

/* Per-token network cost of a split: for each MoE layer, one round trip to
 * every other rank that serves one of the token's top_k experts (at most
 * min(top_k, n_ranks - 1) ranks, sent in parallel, so one RTT per layer),
 * plus the bytes: the normed hidden state and routing out, one output row
 * per expert served back. */
struct placement_net {
	double rtt_s;            /* one request and its answer, latency only */
	double gbps;             /* link bandwidth in GB/s (1e9 bytes) */
};

/* Seconds of network per decoded token for n_moe_layers layers of hidden
 * floats and top_k experts, share_remote the fraction of experts rank 0
 * does not serve. */
double placement_net_s(const struct placement_net *net, int n_moe_layers, int hidden, int top_k,
		       double share_remote);

#endif
