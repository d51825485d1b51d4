/*
 * cmd_run — `colibri run --model DIR (--prompt TEXT | --prompt-file F | --tokens IDS) [-n N]
 * [--temp T] [--top-p P] [--top-k K] [--min-p P] [--repeat-penalty F] [--repeat-last-n N]
 * [--presence-penalty F] [--frequency-penalty F] [--seed S] [--chat] [--system TEXT]
 * [--stats]`: generates text and streams it to stdout.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/cli_alias.h"
#include "engine/cli/cmd.h"
#include "engine/cli/default_model.h"
#include "base/files.h"
#include "engine/decode/constrain.h"
#include "engine/decode/generate.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/text/prompt.h"
#include "engine/decode/session.h"
#include "engine/text/tokenizer.h"
#include "base/error.h"

static void run_usage(FILE *f)
{
	fprintf(f, "usage: colibri run [--model DIR] (--prompt TEXT | --prompt-file F | --tokens IDS) [-n N]\n"
		   "                   [--temp T] [--top-p P] [--top-k K] [--min-p P] [--seed S] [--chat] [--system TEXT]\n"
		   "                   [--repeat-penalty F] [--repeat-last-n N] [--presence-penalty F] [--frequency-penalty F]\n"
		   "                   [--draft auto|N] [--grammar FILE | --grammar-text GBNF | --json-schema FILE|JSON]\n"
		   "                   [--json-ws N|none] [--no-forced-batch]%s\n"
		   "  Generates up to N tokens (default 128, at most a quarter of the context) and streams\n"
		   "  the text to stdout. --ctx beyond the model's positions (max_position_embeddings) warns.\n"
		   "  Without --model: the default model (a toy trained on the King James Bible, models/kjv-moe-hf).\n"
		   "  --prompt-file reads the prompt from a file (- for stdin), for prompts too long for a\n"
		   "  command line.\n"
		   "  Sampling defaults come from the model's generation_config.json; --temp 0 is greedy.\n"
		   "  Sampling applies temperature, top-k, top-p, then min-p (0 = off: drop tokens below P\n"
		   "  times the most probable one), in transformers' order (llama.cpp applies temperature last).\n"
		   "  --repeat-penalty F (1 = off, transformers' repetition_penalty): the logit l of each token\n"
		   "  among the last --repeat-last-n N of prompt and output (default 64, 0 off, -1 all) becomes\n"
		   "  l / F, or l * F when negative, greedy too; then --presence-penalty F and --frequency-penalty F\n"
		   "  (OpenAI's, 0 = off) subtract F, and F times the count, from each generated token's logit.\n"
		   "  --draft: tokens drafted per step with the model's MTP head and verified in one\n"
		   "  forward (exact: greedy output is the same with and without); auto (default)\n"
		   "  drafts when a cost model fed by the measured step times, expert misses and\n"
		   "  acceptance says it pays, and re-checks rarely when it does not; when sampling\n"
		   "  (temperature > 0) auto does not draft, so a seeded run's text is reproducible.\n"
		   "  --grammar / --grammar-text: the output follows a GBNF grammar (llama.cpp's format; root\n"
		   "  rule \"root\"): each step samples among the tokens it admits, and where it admits one\n"
		   "  token only, that token is appended without sampling and a run of them goes through one\n"
		   "  forward (--no-forced-batch: one forward each, the same output).\n"
		   "  --json-schema: the output is JSON the schema admits (a file, or the schema itself when the\n"
		   "  argument starts with '{'); keywords it cannot enforce are named in a warning. --json-ws N:\n"
		   "  whitespace between JSON tokens, one optional newline then up to N spaces or tabs (default\n"
		   "  20; none: compact JSON, which leaves the model fewer choices and forces more tokens).\n"
		   "  --stats prints prompt and decode tok/s, time to first token and expert statistics to stderr.\n",
		SESSION_USAGE);
}

enum {
	RUN_PROMPT = 2000, RUN_PROMPT_FILE, RUN_TOKENS, RUN_TEMP, RUN_TOP_P, RUN_TOP_K, RUN_SEED, RUN_CHAT,
	RUN_SYSTEM, RUN_DRAFT, RUN_GRAMMAR, RUN_GRAMMAR_TEXT, RUN_NO_FORCED_BATCH, RUN_JSON_SCHEMA, RUN_JSON_WS,
	RUN_MIN_P, RUN_REPEAT_PENALTY, RUN_REPEAT_LAST_N, RUN_PRESENCE_PENALTY, RUN_FREQUENCY_PENALTY
};

/* The GBNF of --json-schema ARG (a file, or the schema when ARG starts
 * with '{'), warnings on stderr; errors name the file or the option. */
static int run_json_schema(const char *arg, int ws, char **gbnf)
{
	bool inline_schema = arg[0] == '{';
	const char *what = inline_schema ? "--json-schema" : arg;
	char *buf = NULL, err[512] = "";
	size_t len = 0;
	int rc = 0;
	if (!inline_schema && (rc = file_read_input(arg, &buf, &len)))
		return rc;
	cJSON *j = cJSON_ParseWithLength(inline_schema ? arg : buf, inline_schema ? strlen(arg) : len);
	free(buf);
	if (!j)
		return error_set(EINVAL, "%s: not valid JSON", what);
	struct json_schema_warnings w = { 0 };
	struct json_schema_options opt = { .ws_max = ws };
	rc = json_schema_to_gbnf(j, &opt, gbnf, &w, err, sizeof err);
	cJSON_Delete(j);
	for (size_t i = 0; i < w.count; i++)
		fprintf(stderr, "colibri: warning: %s: %s\n", what, w.msg[i]);
	json_schema_warnings_free(&w);
	if (rc)
		return error_set(-rc, "%s: %s", what, err[0] ? err : "cannot convert the schema");
	return 0;
}

/* Compiles the grammar of --grammar FILE or --grammar-text TEXT; errors
 * name the file (or the option) with the line and column. */
static int run_grammar(const char *file, const char *text, struct grammar **out)
{
	char *buf = NULL, err[512] = "";
	size_t len = text ? strlen(text) : 0;
	int rc = 0;
	if (file && (rc = file_read_input(file, &buf, &len)))
		return rc;
	rc = grammar_parse(out, file ? buf : text, len, NULL, err, sizeof err);
	free(buf);
	if (!rc && (rc = constrain_check(*out, err, sizeof err))) {
		grammar_free(*out);
		*out = NULL;
	}
	if (rc)
		return error_set(-rc, "%s: %s", file ? file : "--grammar-text", err[0] ? err : "cannot compile the grammar");
	return 0;
}

int cmd_run(int argc, char **argv)
{
	struct session_options so;
	session_options_default(&so);
	struct generate_options go;
	const char *prompt = NULL, *prompt_file = NULL, *tokens_arg = NULL, *system = NULL;
	const char *grammar_file = NULL, *grammar_text = NULL, *json_schema = NULL;
	int json_ws = 0;
	bool chat = false, n_given = false;
	static const struct option opts[] = {
		SESSION_LONG_OPTIONS,
		{ "prompt", required_argument, 0, RUN_PROMPT }, { "prompt-file", required_argument, 0, RUN_PROMPT_FILE },
		{ "tokens", required_argument, 0, RUN_TOKENS },
		{ "temp", required_argument, 0, RUN_TEMP },     { "top-p", required_argument, 0, RUN_TOP_P },
		{ "top-k", required_argument, 0, RUN_TOP_K },   { "seed", required_argument, 0, RUN_SEED },
		{ "min-p", required_argument, 0, RUN_MIN_P },
		{ "repeat-penalty", required_argument, 0, RUN_REPEAT_PENALTY },
		{ "repeat-last-n", required_argument, 0, RUN_REPEAT_LAST_N },
		{ "presence-penalty", required_argument, 0, RUN_PRESENCE_PENALTY },
		{ "frequency-penalty", required_argument, 0, RUN_FREQUENCY_PENALTY },
		{ "chat", no_argument, 0, RUN_CHAT },           { "system", required_argument, 0, RUN_SYSTEM },
		{ "draft", required_argument, 0, RUN_DRAFT },
		{ "grammar", required_argument, 0, RUN_GRAMMAR }, { "grammar-text", required_argument, 0, RUN_GRAMMAR_TEXT },
		{ "no-forced-batch", no_argument, 0, RUN_NO_FORCED_BATCH },
		{ "json-schema", required_argument, 0, RUN_JSON_SCHEMA },
		{ "json-ws", required_argument, 0, RUN_JSON_WS },
		{ "help", no_argument, 0, 'h' },                { 0, 0, 0, 0 },
	};
	/* The model folder's generation_config.json gives the sampling
	 * defaults, taken once the folder is known; what the options set stays. */
	int rc = generate_options_default(&go, NULL);
	unsigned set = 0;
	int ch;
	if (cli_alias_apply("run", &argc, &argv, "n:h", opts))
		return 2;
	optind = 1;
	while (!rc && (ch = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'n':
			rc = session_parse_int("n", optarg, 0, 1 << 24, &go.n_predict);
			n_given = true;
			break;
		case RUN_PROMPT: prompt = optarg; break;
		case RUN_PROMPT_FILE: prompt_file = optarg; break;
		case RUN_TOKENS: tokens_arg = optarg; break;
		case RUN_TEMP: rc = generate_options_parse(&go, &set, "temp", optarg); break;
		case RUN_TOP_P: rc = generate_options_parse(&go, &set, "top-p", optarg); break;
		case RUN_TOP_K: rc = generate_options_parse(&go, &set, "top-k", optarg); break;
		case RUN_SEED: rc = generate_options_parse(&go, &set, "seed", optarg); break;
		case RUN_MIN_P: rc = generate_options_parse(&go, &set, "min-p", optarg); break;
		case RUN_REPEAT_PENALTY: rc = generate_options_parse(&go, &set, "repeat-penalty", optarg); break;
		case RUN_REPEAT_LAST_N: rc = generate_options_parse(&go, &set, "repeat-last-n", optarg); break;
		case RUN_PRESENCE_PENALTY: rc = generate_options_parse(&go, &set, "presence-penalty", optarg); break;
		case RUN_FREQUENCY_PENALTY: rc = generate_options_parse(&go, &set, "frequency-penalty", optarg); break;
		case RUN_CHAT: chat = true; break;
		case RUN_SYSTEM: system = optarg; break;
		case RUN_DRAFT:
			if (!strcmp(optarg, "auto")) {
				go.draft = -1;
			} else if (session_parse_int("draft", optarg, 0, 16, &go.draft)) {
				error_clear();
				rc = error_set(EINVAL, "--draft takes auto or a number of drafts 0..16, not \"%s\"", optarg);
			}
			break;
		case RUN_GRAMMAR: grammar_file = optarg; break;
		case RUN_GRAMMAR_TEXT: grammar_text = optarg; break;
		case RUN_NO_FORCED_BATCH: go.forced_batch = false; break;
		case RUN_JSON_SCHEMA: json_schema = optarg; break;
		case RUN_JSON_WS:
			if (!strcmp(optarg, "none"))
				json_ws = -1;
			else if (session_parse_int("json-ws", optarg, 1, 4096, &json_ws)) {
				error_clear();
				rc = error_set(EINVAL, "--json-ws takes none or 1..4096, not \"%s\"", optarg);
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
	if (!prompt && !prompt_file && !tokens_arg)
		return cmd_usage_error("run", "no prompt: give --prompt TEXT, --prompt-file F or --tokens IDS");
	if ((!!prompt + !!prompt_file + !!tokens_arg) != 1)
		return cmd_usage_error("run", "give one of --prompt, --prompt-file and --tokens, not several");
	if (optind != argc) {
		char msg[512];
		snprintf(msg, sizeof msg, "unexpected argument \"%s\" (a prompt goes after --prompt)", argv[optind]);
		return cmd_usage_error("run", msg);
	}
	if ((!!grammar_file + !!grammar_text + !!json_schema) > 1)
		return cmd_usage_error("run", "give one of --grammar, --grammar-text and --json-schema, not several");
	/* llama-cli chats by default; run does only with --chat. */
	if ((so.chat_template || so.chat_template_file) && !chat)
		fprintf(stderr, "colibri: the chat template renders --chat prompts only; without --chat the prompt "
				"is passed as it is\n");
	struct grammar *gram = NULL;
	char *schema_gbnf = NULL;
	if (json_schema && run_json_schema(json_schema, json_ws, &schema_gbnf))
		return cmd_fail("bad schema");
	if (schema_gbnf) {
		char err[512] = "";
		rc = grammar_parse(&gram, schema_gbnf, strlen(schema_gbnf), NULL, err, sizeof err);
		free(schema_gbnf);
		/* Before the model loads: a grammar the matcher cannot hold is
		 * refused now, not when the output reaches the point it fans out. */
		bool parsed = rc == 0;
		if (parsed && (rc = constrain_check(gram, err, sizeof err))) {
			grammar_free(gram);
			gram = NULL;
		}
		if (rc) {
			error_set(-rc, "%s: %s%s", json_schema[0] == '{' ? "--json-schema" : json_schema,
				  parsed ? "" : "the schema's grammar does not compile: ", err);
			return cmd_fail("bad schema");
		}
	}
	if ((grammar_file || grammar_text) && run_grammar(grammar_file, grammar_text, &gram))
		return cmd_fail("bad grammar");
	go.grammar = gram;
	if (default_model_use(&so.model_dir)) {
		grammar_free(gram);
		return cmd_fail("no model");
	}
	if (generate_options_model(&go, so.model_dir, set)) {
		grammar_free(gram);
		return cmd_fail("bad generation_config.json");
	}
	struct tokenizer *tok = NULL;
	int32_t *ids = NULL;
	int n = 0;
	char *file_text = NULL;
	size_t prompt_len = prompt ? strlen(prompt) : 0;
	if (prompt_file && (rc = file_read_input(prompt_file, &file_text, &prompt_len))) {
		grammar_free(gram);
		return cmd_fail("cannot read the prompt");
	}
	if (prompt_file)
		prompt = file_text;
	rc = session_check_model(so.model_dir);
	if (!rc)
		rc = prompt_tokenizer_load(&tok, so.model_dir);
	if (!rc)
		rc = session_chat_template(&so, tok);
	if (rc == -ENOENT && tokens_arg) {
		error_clear();
		rc = 0;
		go.print_ids = true;
	}
	if (!rc && prompt) {
		struct model_config cfg;
		rc = model_config_load(&cfg, so.model_dir);
		if (!rc)
			rc = prompt_encode(tok, cfg.model_type, prompt, prompt_len, chat, system, &ids, &n);
	} else if (!rc) {
		rc = session_parse_tokens(tokens_arg, &ids, &n);
	}
	struct session s;
	memset(&s, 0, sizeof s);
	so.logits_rows = generate_logits_rows(&go);
	struct model_config mc;
	if (!rc && !n_given && (rc = model_config_load(&mc, so.model_dir)) == 0) {
		int quarter = (so.ctx ? so.ctx : mc.max_positions) / 4; /* well inside the context */
		if (go.n_predict > quarter)
			go.n_predict = quarter > 1 ? quarter : 1;
	}
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
	free(file_text);
	tokenizer_free(tok);
	grammar_free(gram);
	return rc ? cmd_fail("run failed") : 0;
}
