/*
 * cmd_mirror — `colibri mirror --model DIR --to DIR2 [--layers A-B,C]
 * [--verify] [--remove] [--quiet]`.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cmd.h"
#include "engine/mirror.h"
#include "engine/model_config.h"
#include "storage/error.h"

static void mirror_usage(FILE *f)
{
	fprintf(f, "usage: colibri mirror --model DIR --to DIR2 [--layers A-B,C] [--quiet]\n"
		   "       colibri mirror --model DIR [--to DIR2] --verify\n"
		   "       colibri mirror --model DIR --to DIR2 --remove\n"
		   "  Copies the expert files to another disk, verifies every checksum and registers\n"
		   "  the copy, so expert reads are striped over all disks. --layers makes a partial\n"
		   "  mirror; --verify re-checks registered copies; --remove unregisters one.\n");
}

/* "0-3,7" -> layer list. */
static int parse_layers(const char *s, int32_t **out, int *n)
{
	int32_t *v = calloc(MODEL_LAYERS_MAX, sizeof *v);
	*n = 0;
	if (!v)
		return error_set(ENOMEM, "out of memory");
	const char *p = s;
	while (*p) {
		char *end;
		long a = strtol(p, &end, 10), b = a;
		if (end == p)
			goto bad;
		if (*end == '-') {
			p = end + 1;
			b = strtol(p, &end, 10);
			if (end == p)
				goto bad;
		}
		if (a < 0 || b < a || b >= MODEL_LAYERS_MAX || (*end && *end != ','))
			goto bad;
		for (long l = a; l <= b && *n < MODEL_LAYERS_MAX; l++)
			v[(*n)++] = (int32_t)l;
		p = *end ? end + 1 : end;
	}
	*out = v;
	return 0;
bad:
	free(v);
	return error_set(EINVAL, "--layers takes a list such as 0-15,20, not \"%s\"", s);
}

int cmd_mirror(int argc, char **argv)
{
	const char *model = NULL, *to = NULL, *layers_arg = NULL;
	bool verify = false, remove_it = false, quiet = false;
	static const struct option opts[] = {
		{ "model", required_argument, 0, 'm' }, { "to", required_argument, 0, 't' },
		{ "layers", required_argument, 0, 'l' }, { "verify", no_argument, 0, 'v' },
		{ "remove", no_argument, 0, 'r' },      { "quiet", no_argument, 0, 'q' },
		{ "help", no_argument, 0, 'h' },        { 0, 0, 0, 0 },
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
		rc = layers_arg ? parse_layers(layers_arg, &layers, &n) : 0;
		if (!rc)
			rc = mirror_add(model, to, layers, n, quiet);
		free(layers);
	}
	return rc ? cmd_fail("mirror failed") : 0;
}
