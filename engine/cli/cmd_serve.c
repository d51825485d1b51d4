/*
 * cmd_serve — `colibri serve --model DIR [--host H] [--port P] [--api-key KEY |
 * --api-key-file F] [--parallel N] ...`: the OpenAI-compatible HTTP server
 * (engine/serve/) with its web dashboard; `colibri web` is the same server
 * with the dashboard on, opened in a browser.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "engine/cli/cli_alias.h"
#include "engine/cli/cmd.h"
#include "engine/cli/default_model.h"
#include "engine/decode/session.h"
#include "engine/model/model_config.h"
#include "engine/serve/serve.h"
#include "engine/serve/serve_auth.h"
#include "engine/text/prompt.h"
#include "engine/text/tokenizer.h"

/* Slots decoded together unless --parallel says otherwise: four requests
 * already share most expert reads of a step (the issue's target is 2.5x the
 * tokens per second of one at four), while each slot costs a sequence state
 * of --ctx positions and a logits row. */
#define SERVE_PARALLEL_DEFAULT 4
#define SERVE_CTX_DEFAULT 4096

static void serve_usage(FILE *f, bool web)
{
	fprintf(f,
		"usage: colibri %s [--model DIR] [--host H] [--port P] [--api-key KEY | --api-key-file F]\n"
		"                     [--insecure-no-key] [--model-id NAME] [--parallel N] [--queue N]\n"
		"                     [--max-tokens N] [--max-body SIZE] [--timeout S] [--idle-timeout S]\n"
		"                     [--grace S] [--http-threads N] [--sessions DIR] [--slot-save-path DIR]\n"
		"                     [--no-forced-batch] [--ui | --no-ui] [--ui-dir DIR]%s%s\n"
		"  Serves the OpenAI API (/v1/chat/completions, /v1/completions, /v1/models) with /health and\n"
		"  /metrics (Prometheus), and the web dashboard at / (chat, runtime panel, expert map; on by\n"
		"  default for a loopback host, --ui elsewhere; docs/DASHBOARD.md). `colibri web` is serve\n"
		"  with the dashboard on, opened in the desktop's browser (--no-open: only printed).\n"
		"  Defaults: --host 127.0.0.1, --port 8080 (0: a free port, printed),\n"
		"  --parallel %d requests decoded together, --ctx min(%d, the model's) positions per request,\n"
		"  --queue 16 requests waiting beyond them (then 429), --max-tokens the context,\n"
		"  --max-body 4M, --timeout 600 s per request, --idle-timeout 30 s, --grace 10 s at shutdown.\n"
		"  Without a key only loopback addresses may be bound, unless --insecure-no-key.\n"
		"  Without --model: the default model (a toy trained on the King James Bible).\n"
		"  --sessions DIR keeps each slot's history and state across restarts (saved at shutdown).\n"
		"  llama-server's API too: /completion, /tokenize, /detokenize, /props, /slots; --slot-save-path\n"
		"  DIR is where POST /slots/ID?action=save|restore keeps slot files (default: --sessions DIR).\n"
		"  response_format / tool_choice constrain the output to a grammar; the tokens it forces run\n"
		"  in the next step's forward with the sampled one (--no-forced-batch: one step each).\n"
		"  SIGINT/SIGTERM: stop admitting, let requests finish within --grace, save, exit 0.\n",
		web ? "web  " : "serve", web ? " [--no-open]" : "", SESSION_USAGE, SERVE_PARALLEL_DEFAULT,
		SERVE_CTX_DEFAULT);
}

enum {
	SERVE_HOST = 3000, SERVE_PORT, SERVE_KEY, SERVE_KEY_FILE, SERVE_NO_KEY, SERVE_MODEL_ID, SERVE_PARALLEL,
	SERVE_QUEUE, SERVE_MAX_TOKENS, SERVE_MAX_BODY, SERVE_TIMEOUT, SERVE_IDLE, SERVE_GRACE, SERVE_HTTP_THREADS,
	SERVE_SESSIONS, SERVE_NO_FORCED_BATCH, SERVE_UI, SERVE_NO_UI, SERVE_UI_DIR, SERVE_NO_OPEN, SERVE_SLOT_SAVE,
};

/* The folder's last name: the default --model-id. */
static void folder_name(const char *dir, char *out, size_t n)
{
	size_t len = strlen(dir);
	while (len > 1 && dir[len - 1] == '/')
		len--;
	size_t s = len;
	while (s > 0 && dir[s - 1] != '/')
		s--;
	snprintf(out, n, "%.*s", (int)(len - s), dir + s);
}

/* A model id goes into JSON and a Prometheus label: plain characters only. */
static int check_model_id(const char *id)
{
	size_t n = strlen(id);
	bool ok = n > 0 && n <= 128;
	for (size_t i = 0; ok && i < n; i++)
		ok = (id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') || (id[i] >= '0' && id[i] <= '9') ||
		     strchr("._-:/+@", id[i]);
	return ok ? 0 : error_set(EINVAL, "--model-id \"%s\" must be 1 to 128 letters, digits or ._-:/+@", id);
}

static int serve_main(int argc, char **argv, bool web)
{
	struct session_options so;
	session_options_default(&so);
	struct serve_options o;
	serve_options_default(&o);
	const char *key_file = NULL;
	bool no_open = false;
	int parallel = SERVE_PARALLEL_DEFAULT, max_tokens = 0, secs = 0;
	static const struct option opts[] = {
		SESSION_LONG_OPTIONS,
		{ "host", required_argument, 0, SERVE_HOST },
		{ "port", required_argument, 0, SERVE_PORT },
		{ "api-key", required_argument, 0, SERVE_KEY },
		{ "api-key-file", required_argument, 0, SERVE_KEY_FILE },
		{ "insecure-no-key", no_argument, 0, SERVE_NO_KEY },
		{ "model-id", required_argument, 0, SERVE_MODEL_ID },
		{ "parallel", required_argument, 0, SERVE_PARALLEL },
		{ "queue", required_argument, 0, SERVE_QUEUE },
		{ "max-tokens", required_argument, 0, SERVE_MAX_TOKENS },
		{ "max-body", required_argument, 0, SERVE_MAX_BODY },
		{ "timeout", required_argument, 0, SERVE_TIMEOUT },
		{ "idle-timeout", required_argument, 0, SERVE_IDLE },
		{ "grace", required_argument, 0, SERVE_GRACE },
		{ "http-threads", required_argument, 0, SERVE_HTTP_THREADS },
		{ "sessions", required_argument, 0, SERVE_SESSIONS },
		{ "slot-save-path", required_argument, 0, SERVE_SLOT_SAVE },
		{ "no-forced-batch", no_argument, 0, SERVE_NO_FORCED_BATCH },
		{ "ui", no_argument, 0, SERVE_UI },
		{ "no-ui", no_argument, 0, SERVE_NO_UI },
		{ "ui-dir", required_argument, 0, SERVE_UI_DIR },
		{ "no-open", no_argument, 0, SERVE_NO_OPEN },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int ch, rc = 0;
	uint64_t bytes = 0;
	if (cli_alias_apply(web ? "web" : "serve", &argc, &argv, "h", opts))
		return 2;
	optind = 1;
	while (!rc && (ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case SERVE_HOST: o.host = optarg; break;
		case SERVE_PORT: rc = session_parse_int("port", optarg, 0, 65535, &o.port); break;
		case SERVE_KEY: o.api_key = optarg; break;
		case SERVE_KEY_FILE: key_file = optarg; break;
		case SERVE_NO_KEY: o.insecure_no_key = true; break;
		case SERVE_MODEL_ID: o.model_id = optarg; break;
		case SERVE_PARALLEL: rc = session_parse_int("parallel", optarg, 1, 256, &parallel); break;
		case SERVE_QUEUE: rc = session_parse_int("queue", optarg, 0, 1 << 16, &o.queue); break;
		case SERVE_MAX_TOKENS: rc = session_parse_int("max-tokens", optarg, 1, 1 << 24, &max_tokens); break;
		case SERVE_MAX_BODY:
			if (session_parse_size(optarg, &bytes) != 0 || bytes < 1024 || bytes > (1ull << 30))
				rc = error_set(EINVAL, "--max-body takes a size from 1K to 1G such as 4M, not \"%s\"", optarg);
			o.body_max = (size_t)bytes;
			break;
		case SERVE_TIMEOUT:
			rc = session_parse_int("timeout", optarg, 1, 1 << 24, &secs);
			o.timeout_s = secs;
			break;
		case SERVE_IDLE:
			rc = session_parse_int("idle-timeout", optarg, 1, 1 << 20, &secs);
			o.idle_timeout_s = (unsigned)secs;
			break;
		case SERVE_GRACE:
			rc = session_parse_int("grace", optarg, 0, 1 << 20, &secs);
			o.grace_s = secs;
			break;
		case SERVE_HTTP_THREADS: rc = session_parse_int("http-threads", optarg, 1, 64, &o.http_threads); break;
		case SERVE_SESSIONS: o.sessions_dir = optarg; break;
		case SERVE_SLOT_SAVE: o.slot_save_dir = optarg; break;
		case SERVE_NO_FORCED_BATCH: o.no_forced_batch = true; break;
		case SERVE_UI: o.ui = 1; break;
		case SERVE_NO_UI: o.ui = 0; break;
		case SERVE_UI_DIR: o.ui_dir = optarg; break;
		case SERVE_NO_OPEN: no_open = true; break;
		case 'h':
			serve_usage(stdout, web);
			return 0;
		default:
			if (ch == '?' || (rc = session_option(&so, ch, optarg)) == -ENOENT) {
				serve_usage(stderr, web);
				return 2;
			}
		}
	}
	if (rc)
		return cmd_fail("bad option");
	if (optind != argc || (no_open && !web)) {
		serve_usage(stderr, web);
		return 2;
	}
	if (web && o.ui == 0) {
		fprintf(stderr, "colibri: web is the dashboard: --no-ui does not go with it (use serve --no-ui)\n");
		return 2;
	}
	if (web) {
		o.ui = 1;
		o.open_browser = !no_open;
	}
	if (o.slot_save_dir && mkdir(o.slot_save_dir, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "colibri: --slot-save-path %s: %s\n", o.slot_save_dir, strerror(errno));
		return 2;
	}
	if (o.ui_dir && access(o.ui_dir, R_OK | X_OK) != 0) {
		fprintf(stderr, "colibri: --ui-dir %s: %s\n", o.ui_dir, strerror(errno));
		return 2;
	}
	if (default_model_use(&so.model_dir))
		return cmd_fail("no model");
	if (o.api_key && key_file) {
		fprintf(stderr, "colibri: give --api-key or --api-key-file, not both\n");
		return 2;
	}
	char *file_key = NULL;
	if (key_file && serve_auth_read_key(key_file, &file_key) != 0)
		return cmd_fail("cannot read the API key");
	if (file_key)
		o.api_key = file_key;
	if (o.api_key && !o.api_key[0]) {
		free(file_key);
		fprintf(stderr, "colibri: --api-key is empty\n");
		return 2;
	}
	char id[PATH_MAX];
	folder_name(so.model_dir, id, sizeof id);
	if (!o.model_id)
		o.model_id = id;
	struct model_config cfg;
	struct tokenizer *tok = NULL;
	struct session s;
	memset(&s, 0, sizeof s);
	int fd = -1, port = 0;
	rc = check_model_id(o.model_id);
	if (!rc)
		rc = session_check_model(so.model_dir);
	if (!rc)
		rc = model_config_load(&cfg, so.model_dir);
	if (!rc) {
		if (!so.ctx)
			so.ctx = cfg.max_positions < SERVE_CTX_DEFAULT ? cfg.max_positions : SERVE_CTX_DEFAULT;
		o.max_tokens = max_tokens ? max_tokens : so.ctx;
		so.parallel = parallel;
		so.logits_rows = parallel + 1;
		rc = prompt_tokenizer_load(&tok, so.model_dir);
		if (!rc)
			rc = session_chat_template(&so, tok);
	}
	/* Bind first: a port in use is found before the model loads. */
	if (!rc)
		rc = serve_listen(&o, &fd, &port);
	/* SIGINT and SIGTERM are taken by sigwait in serve_run: blocked in every
	 * thread, so they are blocked before any thread starts. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (!rc)
		rc = session_open(&s, &so, so.ctx);
	if (!rc) {
		rc = serve_run(&s, tok, &o, fd, port, &sigs);
		fd = -1;
	}
	if (fd >= 0)
		close(fd);
	if (!rc)
		rc = session_report(&s, stderr);
	session_close(&s);
	tokenizer_free(tok);
	free(file_key);
	return rc ? cmd_fail("serve failed") : 0;
}

int cmd_serve(int argc, char **argv)
{
	return serve_main(argc, argv, false);
}

int cmd_web(int argc, char **argv)
{
	return serve_main(argc, argv, true);
}
