/*
 * cmd_mirror — `colibri mirror --model DIR --to DIR2 [--layers A-B,C]
 * [--verify] [--remove] [--no-probe] [--quiet]`.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/cmd.h"
#include "engine/model/mirror.h"
#include "engine/decode/session.h"
#include "engine/model/model_config.h"
#include "planner/plan_machine.h"
#include "base/error.h"

static void mirror_usage(FILE *f)
{
	fprintf(f, "usage: colibri mirror --model DIR --to DIR2 [--layers A-B,C] [--no-probe] [--quiet]\n"
		   "       colibri mirror --model DIR [--to DIR2] --verify\n"
		   "       colibri mirror --model DIR --to DIR2 --remove\n"
		   "  Copies the expert files to another disk, verifies every checksum and registers\n"
		   "  the copy, so expert reads are striped over all disks. --layers makes a partial\n"
		   "  mirror; --verify re-checks registered copies; --remove unregisters one.\n"
		   "  Reads are split by each disk's bandwidth: a disk with no saved profile is\n"
		   "  measured for 2 s afterwards (as `colibri plan --probe`) unless --no-probe.\n");
}

/* Measures, for 2 s each, the disks holding paths[0..n) that have no saved
 * profile. Striping weighs every copy by its disk's profile and gives a
 * disk without one an equal share, which a slower second disk turns into
 * a bottleneck. A failed probe is a warning: the mirror itself is done. */
static void probe_group(const struct plan_container *c, const char *const *paths, int n, const char *what)
{
	struct plan_machine *m = calloc(1, sizeof *m);
	char err[512];
	if (!m || n == 0)
		goto out;
	if (plan_machine_discover(m, paths, n, 0) || plan_machine_disk(m))
		goto out;
	fprintf(stderr, "colibri: measuring the disk of the %s for 2 s (no saved profile)\n", what);
	if (plan_machine_probe(m, paths, n, plan_container_main_record(c), c->in.top_k, 2.0, false, err, sizeof err))
		fprintf(stderr, "colibri: warning: disk probe failed (%s); `colibri iobench` measures it later\n", err);
out:
	free(m);
	error_clear();
}

static void probe_disks(const char *model, const char *to)
{
	struct plan_container c = { 0 };
	if (plan_container_load(&c, model, 0, 0, 0, 1)) {
		error_clear();
		return;
	}
	probe_group(&c, (const char *const *)c.paths, c.n_primary, "model's expert files");
	/* The copies in `to` (registered by its absolute path). */
	char dir[PATH_MAX];
	if (!realpath(to, dir))
		snprintf(dir, sizeof dir, "%s", to);
	size_t len = strlen(dir);
	const char **mine = calloc((size_t)c.n_paths + 1, sizeof *mine);
	int n = 0;
	for (int i = c.n_primary; mine && i < c.n_paths; i++)
		if (strncmp(c.paths[i], dir, len) == 0 && c.paths[i][len] == '/')
			mine[n++] = c.paths[i];
	if (mine)
		probe_group(&c, mine, n, "mirror");
	free(mine);
	plan_container_free(&c);
}

int cmd_mirror(int argc, char **argv)
{
	const char *model = NULL, *to = NULL, *layers_arg = NULL;
	bool verify = false, remove_it = false, quiet = false, probe = true;
	static const struct option opts[] = {
		{ "model", required_argument, 0, 'm' }, { "to", required_argument, 0, 't' },
		{ "layers", required_argument, 0, 'l' }, { "verify", no_argument, 0, 'v' },
		{ "remove", no_argument, 0, 'r' },      { "quiet", no_argument, 0, 'q' },
		{ "no-probe", no_argument, 0, 'p' },    { "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int ch;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'm': model = optarg; break;
		case 't': to = optarg; break;
		case 'l': layers_arg = optarg; break;
		case 'v': verify = true; break;
		case 'r': remove_it = true; break;
		case 'q': quiet = true; break;
		case 'p': probe = false; break;
		case 'h': mirror_usage(stdout); return 0;
		default: mirror_usage(stderr); return 2;
		}
	}
	if (!model || optind != argc || (verify && remove_it) || (!verify && !to)) {
		mirror_usage(stderr);
		return 2;
	}
	int rc;
	if (verify) {
		rc = mirror_verify(model, to, quiet);
	} else if (remove_it) {
		rc = mirror_remove(model, to);
	} else {
		int32_t *layers = NULL;
		int n = 0;
		rc = layers_arg ? session_parse_list(layers_arg, "--layers", true, MODEL_LAYERS_MAX - 1, &layers, &n) : 0;
		if (!rc)
			rc = mirror_add(model, to, layers, n, quiet);
		free(layers);
		if (!rc && probe)
			probe_disks(model, to);
	}
	return rc ? cmd_fail("mirror failed") : 0;
}
