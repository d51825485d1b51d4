/*
 * plan_hosts — the hosts of a distributed run as `colibri plan --hosts FILE`
 * reads them, and what their share of the routed experts costs per token.
 *
 * FILE is a JSON array with one object per MPI rank, in rank order:
 *   {"host": "a", "ram": "16G", "disk_gbps": 3.2, "net_gbps": 1.25, "rtt_us": 50}
 * "ram" is a size string as --ram takes it, or a number of bytes. Instead of
 * "disk_gbps" an entry may name "profile": a disk profile saved on that
 * host (its disks.json from `colibri iobench`, or `iobench --json` output),
 * with "disk" choosing the disk key when the file holds several. The
 * bandwidth is then read from the profile at the plan's frame size and IO
 * depth by the caller (plan_hosts_estimate takes plain numbers).
 *
 * The estimate is pure arithmetic under uniform routing: a rank's misses are
 * the experts of its share that do not fit its RAM, the ranks read in
 * parallel (the slowest one counts), compute is the single-host plan's, and
 * the network term is placement_net_s over the slowest link.
 */
#ifndef COLIBRI_PLANNER_PLAN_HOSTS_H
#define COLIBRI_PLANNER_PLAN_HOSTS_H

#include <stdbool.h>
#include <stdint.h>

#include "planner/placement.h"
#include "planner/profile.h"

#define PLAN_HOST_NAME_MAX 64
#define PLAN_HOST_NET_GBPS_DEFAULT 1.25   /* 10 GbE */
#define PLAN_HOST_RTT_US_DEFAULT 50.0

struct plan_host {
	char host[PLAN_HOST_NAME_MAX];
	uint64_t ram_bytes;
	double disk_gbps;               /* "disk_gbps", or filled from profile by the caller; 0 unknown */
	struct disk_profile *profile;   /* "profile" loaded (owned), or NULL */
	char profile_path[512];         /* as the file gave it, for messages */
	double net_gbps;
	double rtt_us;
};

struct plan_hosts {
	int n;
	struct plan_host hosts[PLACEMENT_RANKS_MAX];
};

/* Reads the hosts file at path into *out (1..PLACEMENT_RANKS_MAX entries).
 * parse_size turns a "ram" string into bytes (the caller's --ram grammar;
 * 0 or negative). 0, or -errno with a message naming the file and, for a bad
 * entry, its index and field. Free with plan_hosts_free, also after a
 * failure. */
int plan_hosts_load(struct plan_hosts *out, const char *path, int (*parse_size)(const char *s, uint64_t *bytes));

void plan_hosts_free(struct plan_hosts *h);

/* Loads the disk profile file at path (disks.json or iobench --json) into
 * *out: the disk named key, or the only disk when key is NULL. 0, or -errno
 * with a message naming the file. */
int plan_hosts_profile_load(struct disk_profile *out, const char *path, const char *key);

/* The model as the estimate needs it: routed-expert rows and their sizes. */
struct plan_hosts_model {
	int n_rows;                     /* layers in owner[] */
	int n_experts;
	int top_k;
	int hidden;
	const uint64_t *record_bytes;   /* [n_rows] one expert's record; 0: not a MoE layer */
	uint64_t fixed_bytes;           /* what every rank holds besides experts (dense, KV, scratch) */
	double compute_s;               /* per token, from the single-host plan; < 0 unknown */
};

struct plan_hosts_rank {
	int32_t experts;                /* owner cells of MoE layers */
	uint64_t expert_bytes;          /* their records */
	uint64_t cache_bytes;           /* its RAM beyond fixed_bytes */
	uint64_t fit_bytes;             /* min(expert_bytes, cache_bytes) */
	double miss;                    /* 1 - fit / expert (0 with no experts) */
	double disk_bytes_token;        /* expected reads per token */
	double disk_s;                  /* per token; < 0 unknown disk */
};

struct plan_hosts_estimate {
	struct plan_hosts_rank ranks[PLACEMENT_RANKS_MAX];
	int n_moe_layers;
	double share_remote;            /* experts not on rank 0 */
	int slowest;                    /* rank with the largest disk_s */
	double disk_s, compute_s, net_s, token_s, tok_s;   /* < 0 unknown */
	struct placement_net net;       /* the slowest link to rank 0 */
	double single_disk_s, single_token_s, single_tok_s; /* rank 0 alone; < 0 unknown */
	double single_miss;
};

/* The cost of owner[] (placement_build over m) on hosts h. */
void plan_hosts_estimate(struct plan_hosts_estimate *out, const struct plan_hosts *h, const uint8_t *owner,
			 const struct plan_hosts_model *m);

#endif
