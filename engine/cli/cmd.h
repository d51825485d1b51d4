/*
 * cmd — the subcommands of the colibri command line. Each takes the
 * arguments after its name (argv[0] is the subcommand) and returns the
 * process exit status; only main() calls exit().
 */
#ifndef COLIBRI_ENGINE_CMD_H
#define COLIBRI_ENGINE_CMD_H

#include "engine/decode/plan_container.h"

int cmd_convert(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_iobench(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_mirror(int argc, char **argv);
int cmd_shard(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_web(int argc, char **argv);
/* Ranks 1.. of an MPI job, whatever the command (cmd_worker.c). */
int cmd_worker(int argc, char **argv);

/* Prints "colibri: <message>" for the pending error (or `what` if none) to
 * stderr and returns the exit status 1. On ranks 1.. of an MPI job the
 * prefix names the rank, and nothing is printed for a failure rank 0
 * reports. */
int cmd_fail(const char *what);

/* A command line the command cannot run: prints "colibri CMD: REASON" and
 * where the options are, and returns the exit status 2. */
int cmd_usage_error(const char *cmd, const char *reason);

#endif
