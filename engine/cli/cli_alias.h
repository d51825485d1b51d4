/*
 * cli_alias — llama.cpp's spellings of the options that mean the same here
 * (-m, -p, -c, --ctx-size, -np, --alias ...), rewritten into colibri's
 * before a command's getopt_long runs, so that a llama.cpp habit works
 * beside ours. The table, with what each name becomes, is in cli_alias.c
 * and in the README ("Coming from llama.cpp / Ollama").
 *
 * The rewrite walks the command line the way getopt_long will: it knows the
 * arity of the command's own options (from its optstring and option table)
 * and of each alias, so a value is never read as an option (`-p "-m"` keeps
 * "-m" as the prompt), and it stops at "--". An alias applies only where the
 * command has the option it stands for: `-np` is serve's --parallel, and run
 * refuses it by name. A single dash followed by two letters or more that is
 * no alias is refused by name ("unknown option -fa"), where getopt would read
 * `-ngl 99` as `-n gl` and complain about "gl".
 */
#ifndef COLIBRI_ENGINE_CLI_ALIAS_H
#define COLIBRI_ENGINE_CLI_ALIAS_H

#include <getopt.h>

/* Rewrites the command line argv[0..argc) (argv[0] the command) for
 * getopt_long with the command's shortopts and longopts: on return *argc and
 * *argv are the rewritten line, whose strings are the caller's or the
 * module's; they stay valid until the next call (static storage, so that a
 * command spends one line on it and frees nothing). cmd names the command
 * in messages; NULL for MPI ranks 1.., which take only the session options
 * and leave errors to rank 0: there an alias the ranks do not have is left
 * out with its value, and nothing is refused or printed. Returns 0, or the
 * exit status 2 after one line on stderr saying what is wrong (out of
 * memory included). */
int cli_alias_apply(const char *cmd, int *argc, char ***argv, const char *shortopts,
		    const struct option *longopts);

#endif
