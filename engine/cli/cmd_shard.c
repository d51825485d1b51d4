/*
 * cmd_shard — `colibri shard --model DIR --ranks N --rank R --to DIR2
 * [--placement even|W0,W1,..] [--replicas K] [--force] [--quiet]`: the
 * container of one MPI rank, holding only its experts (engine/model/shard.h).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/cli/cmd.h"
#include "engine/decode/session.h"
#include "engine/model/shard.h"

static void shard_usage(FILE *f)
{
	fprintf(f, "usage: colibri shard --model DIR --ranks N --rank R --to DIR2\n"
		   "                     [--placement even|W0,W1,..] [--replicas K] [--force] [--quiet]\n"
		   "  Writes the container of rank R of an N-rank `mpirun` job: every file of DIR but the\n"
		   "  expert files as they are, and of the experts only those the placement gives rank R\n"
		   "  (its own and, with --replicas K, the replicas it holds). Each record is checked\n"
		   "  against its checksum when read and again when read back; DIR2 appears only when\n"
		   "  complete. A run over shards takes their placement; give every rank the same\n"
		   "  --placement and --replicas (default even, 1). `colibri plan --hosts FILE\n"
		   "  --placement ... --replicas K` shows what each shard holds.\n");
}

enum { SHARD_OPT_RANKS = 4000, SHARD_OPT_RANK, SHARD_OPT_TO, SHARD_OPT_PLACEMENT, SHARD_OPT_REPLICAS,
       SHARD_OPT_FORCE, SHARD_OPT_QUIET };

int cmd_shard(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, 0, 'm' },
		{ "ranks", required_argument, 0, SHARD_OPT_RANKS },
		{ "rank", required_argument, 0, SHARD_OPT_RANK },
		{ "to", required_argument, 0, SHARD_OPT_TO },
		{ "placement", required_argument, 0, SHARD_OPT_PLACEMENT },
		{ "replicas", required_argument, 0, SHARD_OPT_REPLICAS },
		{ "force", no_argument, 0, SHARD_OPT_FORCE },
		{ "quiet", no_argument, 0, SHARD_OPT_QUIET },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	struct shard_options o = { .ranks = -1, .rank = -1 };
	const char *placement = "even";
	int ch, rc = 0;
	optind = 1;
	while (!rc && (ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'm': o.model_dir = optarg; break;
		case SHARD_OPT_RANKS: rc = session_parse_int("ranks", optarg, 1, PLACEMENT_RANKS_MAX, &o.ranks); break;
		case SHARD_OPT_RANK: rc = session_parse_int("rank", optarg, 0, PLACEMENT_RANKS_MAX - 1, &o.rank); break;
		case SHARD_OPT_TO: o.to_dir = optarg; break;
		case SHARD_OPT_PLACEMENT: placement = optarg; break;
		case SHARD_OPT_REPLICAS: rc = placement_replicas_parse(&o.placement, optarg); break;
		case SHARD_OPT_FORCE: o.force = true; break;
		case SHARD_OPT_QUIET: o.quiet = true; break;
		case 'h': shard_usage(stdout); return 0;
		default: shard_usage(stderr); return 2;
		}
	}
	if (rc)
		return cmd_fail("bad option");
	if (!o.model_dir || !o.to_dir || o.ranks < 0 || o.rank < 0 || optind != argc) {
		shard_usage(stderr);
		return 2;
	}
	if ((rc = placement_spec_parse(&o.placement, placement)))
		return cmd_fail("bad --placement");
	struct shard_result r;
	if ((rc = shard_write(&o, &r)))
		return cmd_fail("shard failed");
	printf("%s: shard %d of %d, %" PRId64 " of %" PRId64 " expert records (replicas %d), %.1f MB, every record "
	       "verified\n",
	       o.to_dir, o.rank, o.ranks, r.experts, r.experts_total,
	       o.placement.replicas > 1 ? o.placement.replicas : 1, r.bytes / 1e6);
	return 0;
}
