/*
 * main — the colibri command: dispatches to the subcommands in cmd_*.c.
 */
#include <stdio.h>
#include <string.h>

#include "engine/cli/cmd.h"
#include "engine/dist/dist.h"
#include "base/error.h"

#define COLIBRI_VERSION "0.1.0"

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "convert", cmd_convert, "turn a Hugging Face checkpoint into a colibri container" },
	{ "run", cmd_run, "generate text, streamed to stdout" },
	{ "chat", cmd_chat, "a conversation in the terminal, resumed where the last one stopped" },
	{ "logits", cmd_logits, "teacher-forced logits of a token sequence, as float32" },
	{ "tokenize", cmd_tokenize, "print the token ids of a text" },
	{ "detokenize", cmd_detokenize, "print the text of token ids" },
	{ "plan", cmd_plan, "how the RAM budget is split, and the decode speed to expect" },
	{ "iobench", cmd_iobench, "measure random-read bandwidth of a disk, saved for plan and run" },
	{ "doctor", cmd_doctor, "check a container and this system, with a fix for each problem" },
	{ "mirror", cmd_mirror, "copy the expert files to another disk and stripe reads over both" },
	{ "shard", cmd_shard, "the container of one MPI rank: only the experts it holds" },
	{ "serve", cmd_serve, "serve the OpenAI API over HTTP, requests decoded together, with a web dashboard" },
	{ "web", cmd_web, "serve with the web dashboard and open it in a browser" },
};

static void usage(FILE *f)
{
	fprintf(f, "colibri %s: run huge Mixture-of-Experts models with experts streamed from NVMe\n\n"
		   "usage: colibri COMMAND [ARGS]   (colibri COMMAND --help for details)\n\n",
		COLIBRI_VERSION);
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
}

int cmd_fail(const char *what)
{
	const char *msg = error_message();
	if (dist_failure_reported())
		return 1;
	if (dist_rank() > 0)
		fprintf(stderr, "colibri[rank %d]: %s\n", dist_rank(), msg[0] ? msg : what);
	else
		fprintf(stderr, "colibri: %s\n", msg[0] ? msg : what);
	return 1;
}

int cmd_usage_error(const char *cmd, const char *reason)
{
	fprintf(stderr, "colibri %s: %s (colibri %s --help lists the options)\n", cmd, reason, cmd);
	return 2;
}

static int dispatch(int argc, char **argv)
{
	if (dist_rank() > 0)
		return cmd_worker(argc > 1 ? argc - 1 : argc, argc > 1 ? argv + 1 : argv);
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("colibri %s\n", COLIBRI_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "colibri: unknown command \"%s\"\n\n", argv[1]);
	usage(stderr);
	return 2;
}

/* Under mpirun (engine/dist) rank 0 runs the command and the other ranks
 * serve it experts; without it colibri is one process. */
int main(int argc, char **argv)
{
	if (dist_init(&argc, &argv) != 0)
		return cmd_fail("cannot join the MPI job");
	return dist_exit(dispatch(argc, argv));
}
