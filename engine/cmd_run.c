/*
 * cmd_run — `colibri run --model DIR (--prompt TEXT | --tokens IDS) [-n N]
 * [--temp T] [--top-p P] [--top-k K] [--seed S] [--chat] [--system TEXT]
 * [--stats]`: generates text and streams it to stdout.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cmd.h"
#include "engine/generate.h"
#include "engine/prompt.h"
#include "engine/session.h"
#include "engine/tokenizer.h"
#include "storage/error.h"

static void run_usage(FILE *f)
{
	fprintf(f, "usage: colibri run --model DIR (--prompt TEXT | --tokens IDS) [-n N] [--temp T] [--top-p P]\n"
		   "                   [--top-k K] [--seed S] [--chat] [--system TEXT] [--draft auto|N]%s\n"
		   "  Generates up to N tokens (default 128) and streams the text to stdout.\n"
		   "  Sampling defaults come from the model's generation_config.json; --temp 0 is greedy.\n"
		   "  --draft: tokens drafted per step with the model's MTP head and verified in one\n"
		   "  forward (exact: greedy output is the same with and without); auto (default)\n"
		   "  drafts when a cost model fed by the measured step times, expert misses and\n"
		   "  acceptance says it pays, and re-checks rarely when it does not; when sampling\n"
		   "  (temperature > 0) auto does not draft, so a seeded run's text is reproducible.\n"
		   "  --stats prints prompt and decode tok/s, time to first token and expert statistics to stderr.\n",
		SESSION_USAGE);
}

enum { RUN_PROMPT = 2000, RUN_TOKENS, RUN_TEMP, RUN_TOP_P, RUN_TOP_K, RUN_SEED, RUN_CHAT, RUN_SYSTEM, RUN_DRAFT };

static int parse_float(const char *name, const char *arg, float lo, float hi, float *out)
{
	char *end;
	double v = strtod(arg, &end);
	if (end == arg || *end || !(v >= lo && v <= hi))
		return error_set(EINVAL, "--%s must be a number in [%g, %g], not \"%s\"", name, lo, hi, arg);
	*out = (float)v;
	return 0;
}

int cmd_run(int argc, char **argv)
{
	struct session_options so;
	session_options_default(&so);
	struct generate_options go;
	const char *prompt = NULL, *tokens_arg = NULL, *system = NULL;
	bool chat = false;
	static const struct option opts[] = {
		SESSION_LONG_OPTIONS,
		{ "prompt", required_argument, 0, RUN_PROMPT }, { "tokens", required_argument, 0, RUN_TOKENS },
		{ "temp", required_argument, 0, RUN_TEMP },     { "top-p", required_argument, 0, RUN_TOP_P },
		{ "top-k", required_argument, 0, RUN_TOP_K },   { "seed", required_argument, 0, RUN_SEED },
		{ "chat", no_argument, 0, RUN_CHAT },           { "system", required_argument, 0, RUN_SYSTEM },
		{ "draft", required_argument, 0, RUN_DRAFT },
		{ "help", no_argument, 0, 'h' },                { 0, 0, 0, 0 },
	};
	/* The model folder decides the sampling defaults: find it first. */
	const char *model_dir = NULL;
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "--model"))
			model_dir = argv[i + 1];
	generate_options_default(&go, model_dir ? model_dir : ".");
	int ch, rc = 0;
	float f;
	optind = 1;
	while (!rc && (ch = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'n': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || v < 0 || v > 1 << 24)
				rc = error_set(EINVAL, "-n must be a non-negative integer, not \"%s\"", optarg);
			go.n_predict = (int)v;
			break;
		}
		case RUN_PROMPT: prompt = optarg; break;
		case RUN_TOKENS: tokens_arg = optarg; break;
		case RUN_TEMP: rc = parse_float("temp", optarg, 0, 100, &go.temp); break;
		case RUN_TOP_P:
			rc = parse_float("top-p", optarg, 1e-6f, 1, &go.top_p);
			break;
		case RUN_TOP_K:
			rc = parse_float("top-k", optarg, 0, 1e9f, &f);
			go.top_k = (int32_t)f;
			break;
		case RUN_SEED:
			go.seed = strtoull(optarg, NULL, 10);
			break;
		case RUN_CHAT: chat = true; break;
		case RUN_SYSTEM: system = optarg; break;
		case RUN_DRAFT:
			if (!strcmp(optarg, "auto")) {
				go.draft = -1;
			} else {
				char *end;
				long v = strtol(optarg, &end, 10);
				if (*end || v < 0 || v > 16)
					rc = error_set(EINVAL, "--draft takes auto or a number of drafts 0..16, not \"%s\"", optarg);
				go.draft = (int)v;
			}
			break;
		case 'h':
			run_usage(stdout);
			return 0;
		default:
			if (ch == '?' || (rc = session_option(&so, ch, optarg)) == -ENOENT) {
				run_usage(stderr);
				return 2;
			}
		}
	}
	if (rc)
		return cmd_fail("bad option");
	if (!so.model_dir || (!prompt == !tokens_arg) || optind != argc) {
		run_usage(stderr);
		return 2;
	}
	struct tokenizer *tok = NULL;
	int32_t *ids = NULL;
	int n = 0;
	rc = prompt_tokenizer_load(&tok, so.model_dir);
	if (rc == -ENOENT && tokens_arg) {
		error_clear();
		rc = 0;
		go.print_ids = true;
	}
	if (!rc && prompt) {
		struct model_config cfg;
		rc = model_config_load(&cfg, so.model_dir);
		if (!rc)
			rc = prompt_encode(tok, cfg.model_type, prompt, chat, system, &ids, &n);
	} else if (!rc) {
		rc = session_parse_tokens(tokens_arg, &ids, &n);
	}
	struct session s;
	memset(&s, 0, sizeof s);
	so.logits_rows = generate_logits_rows(&go);
	if (!rc)
		rc = session_open(&s, &so, n + go.n_predict);
	struct generate_stats st;
	if (!rc)
		rc = generate_run(&s, tok, ids, n, &go, stdout, &st);
	if (!rc && so.stats)
		generate_stats_print(&st, stderr);
	if (!rc) {
		generate_stats_record(&st, &s);
		rc = session_report(&s, stderr);
	}
	session_close(&s);
	free(ids);
	tokenizer_free(tok);
	return rc ? cmd_fail("run failed") : 0;
}
