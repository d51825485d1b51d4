/*
 * cmd_worker — what ranks 1..N-1 of `mpirun -n N colibri COMMAND ...` run
 * whatever COMMAND is: serve their share of the routed experts to rank 0
 * (engine/dist). Of the command line they take only the session options
 * (--model, --ram, --threads, --io-depth, --no-direct, --no-prefetch,
 * --no-pin ...), so that every rank can be given the same line, or its own
 * --ram and --model (its own copy of the container on its own disk); rank
 * 0's --batch, --placement and --dist-timeout hold for all.
 */
#include <errno.h>
#include <getopt.h>

#include "base/error.h"
#include "engine/cli/cli_alias.h"
#include "engine/cli/cmd.h"
#include "engine/cli/default_model.h"
#include "engine/decode/session.h"
#include "engine/dist/dist.h"

int cmd_worker(int argc, char **argv)
{
	static const struct option opts[] = { SESSION_LONG_OPTIONS, { 0, 0, 0, 0 } };
	struct session_options so;
	session_options_default(&so);
	int ch, rc = 0;
	opterr = 0; /* the command's own options are rank 0's business */
	cli_alias_apply(NULL, &argc, &argv, "", opts); /* -m as --model; on failure the line stays */
	optind = 1;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (ch == '?' || ch == ':')
			continue;
		int orc = session_option(&so, ch, optarg);
		if (orc && orc != -ENOENT && !rc)
			rc = orc;
	}
	/* Rank 0's settings first: it may have ended without a model (its
	 * --help), and then there is nothing to load. */
	struct dist_options agreed = { .batch = so.batch };
	if (dist_agree(&agreed) > 0)
		return 0;
	if (!rc)
		rc = default_model_use(&so.model_dir);
	rc = session_serve(&so, &agreed, rc);
	return rc ? cmd_fail("serving experts failed") : 0;
}
