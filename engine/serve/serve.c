/*
 * serve — see serve.h.
 */
#include "engine/serve/serve.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/decode/generate.h"
#include "engine/decode/session.h"
#include "engine/serve/serve_auth.h"
#include "engine/serve/serve_http.h"
#include "engine/serve/serve_live.h"
#include "engine/serve/serve_metrics.h"
#include "engine/serve/serve_prompt.h"
#include "engine/serve/serve_sched.h"
#include "engine/text/tokenizer.h"

void serve_options_default(struct serve_options *o)
{
	memset(o, 0, sizeof *o);
	o->host = "127.0.0.1";
	o->port = 8080;
	o->queue = 16;
	o->body_max = 4u << 20;
	o->timeout_s = 600;
	o->idle_timeout_s = 30;
	o->grace_s = 10;
	o->http_threads = 4;
	o->ui = -1;
}

/* Opens url in the desktop's browser when there is one (xdg-open, with a
 * display); else says to open it. Never waits for the browser. */
static void browser_open(const char *url)
{
	bool display = getenv("DISPLAY") || getenv("WAYLAND_DISPLAY");
	if (display && access("/usr/bin/xdg-open", X_OK) == 0) {
		pid_t pid = fork();
		if (pid == 0) {
			int null = open("/dev/null", O_RDWR);
			if (null >= 0) {
				dup2(null, 1);
				dup2(null, 2);
			}
			/* A grandchild, so that nothing is left to reap. */
			if (fork() == 0)
				execl("/usr/bin/xdg-open", "xdg-open", url, (char *)NULL);
			_exit(0);
		}
		if (pid > 0) {
			waitpid(pid, NULL, 0);
			return;
		}
	}
	fprintf(stderr, "colibri web: open %s in a browser\n", url);
}

int serve_listen(const struct serve_options *o, int *fd, int *port)
{
	if (!o->api_key && !o->insecure_no_key && !serve_host_is_loopback(o->host))
		return error_set(EPERM, "--host %s is not a loopback address: give --api-key (or --api-key-file), "
				 "or --insecure-no-key to serve without one", o->host);
	char service[16];
	snprintf(service, sizeof service, "%d", o->port);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
	struct addrinfo *res = NULL;
	int rc = getaddrinfo(o->host, service, &hints, &res);
	if (rc != 0)
		return error_set(EINVAL, "--host %s: %s", o->host, gai_strerror(rc));
	int s = -1, err = 0;
	for (struct addrinfo *a = res; a && s < 0; a = a->ai_next) {
		s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
		if (s < 0) {
			err = errno;
			continue;
		}
		int one = 1;
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(s, a->ai_addr, a->ai_addrlen) != 0 || listen(s, 128) != 0) {
			err = errno;
			close(s);
			s = -1;
		}
	}
	freeaddrinfo(res);
	if (s < 0)
		return error_set(err ? err : EADDRNOTAVAIL, "cannot listen on %s:%d: %s", o->host, o->port,
				 strerror(err ? err : EADDRNOTAVAIL));
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	*port = o->port;
	if (getsockname(s, (struct sockaddr *)&ss, &len) == 0) {
		char h[NI_MAXHOST], p[NI_MAXSERV];
		if (getnameinfo((struct sockaddr *)&ss, len, h, sizeof h, p, sizeof p, NI_NUMERICHOST | NI_NUMERICSERV) == 0)
			*port = atoi(p);
	}
	*fd = s;
	return 0;
}

/* The model object's created time: when the container was written. */
static long long model_created(const char *dir)
{
	char path[4096];
	struct stat st;
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	return stat(path, &st) == 0 ? (long long)st.st_mtime : (long long)time(NULL);
}

int serve_run(struct session *s, const struct tokenizer *tok, const struct serve_options *o, int listen_fd,
	      int port, const sigset_t *signals)
{
	struct serve_metrics metrics;
	struct serve_prompt prompt;
	struct serve_sched sched;
	struct serve_http http;
	struct serve_live live;
	struct generate_options go;
	memset(&http, 0, sizeof http);
	memset(&live, 0, sizeof live);
	serve_metrics_init(&metrics, s->opt.parallel);
	bool ui = o->ui > 0 || (o->ui < 0 && serve_host_is_loopback(o->host));
	int rc = serve_prompt_init(&prompt, tok, s->model.cfg.model_type);
	bool prompt_ready = rc == 0, sched_ready = false, live_ready = false;
	if (!rc && ui) {
		/* The first numbers before any step: the plan's split, the pinned set. */
		serve_metrics_step(&metrics, 0, 0, 0, false, 0, s, clock_now_s());
		rc = serve_live_init(&live, s, &metrics, o->model_id);
		live_ready = true;
	}
	prompt.history = s->fwd.seqs[0].has_fixed; /* a second render per chat request, only where it pays */
	if (!rc && (rc = generate_options_default(&go, s->opt.model_dir)) == 0) {
		struct serve_sched_options so = { .queue_max = o->queue, .sessions_dir = o->sessions_dir,
						  .no_forced_batch = o->no_forced_batch, .live = ui ? &live : NULL };
		rc = serve_sched_init(&sched, s, tok, &metrics, &so);
		sched_ready = true;
	}
	if (!rc && !prompt.have_template)
		fprintf(stderr, "colibri serve: warning: no chat template (%s); /v1/chat/completions will refuse\n",
			prompt.template_error);
	if (!rc)
		rc = serve_sched_start(&sched);
	if (!rc) {
		struct serve_http_options ho = {
			.listen_fd = listen_fd, .api_key = o->api_key, .model_id = o->model_id,
			.created = model_created(s->opt.model_dir), .body_max = o->body_max, .ctx = s->fwd.ctx,
			.timeout_s = o->timeout_s, .idle_timeout_s = o->idle_timeout_s, .threads = o->http_threads,
			.lim = { .max_tokens_cap = o->max_tokens, .vocab = s->model.cfg.vocab, .temp = go.temp,
				 .top_p = go.top_p, .top_k = go.top_k, .min_p = go.min_p,
				 .repeat_penalty = go.repeat_penalty },
			.live = ui ? &live : NULL, .ui_dir = o->ui_dir, .model_path = s->opt.model_dir,
			.slot_save_dir = o->slot_save_dir ? o->slot_save_dir : o->sessions_dir,
		};
		for (int i = 0; i < s->model.cfg.n_eos && ho.n_eos < MODEL_EOS_MAX; i++)
			ho.eos[ho.n_eos++] = s->model.cfg.eos_ids[i];
		if (tok && tokenizer_eos_id(tok) >= 0)
			ho.eos[ho.n_eos++] = tokenizer_eos_id(tok);
		rc = serve_http_start(&http, &ho, &sched, &metrics, &prompt, tok);
		if (!rc)
			listen_fd = -1; /* the daemon's now */
	}
	if (!rc) {
		printf("colibri serve: listening on http://%s%s%s:%d (model %s, %d slots, context %d)\n",
		       strchr(o->host, ':') ? "[" : "", o->host, strchr(o->host, ':') ? "]" : "", port, o->model_id,
		       s->opt.parallel, s->fwd.ctx);
		if (ui) {
			char url[512];
			snprintf(url, sizeof url, "http://%s%s%s:%d/", strchr(o->host, ':') ? "[" : "",
				 strcmp(o->host, "0.0.0.0") ? o->host : "127.0.0.1", strchr(o->host, ':') ? "]" : "", port);
			printf("colibri serve: dashboard on %s\n", url);
			fflush(stdout);
			if (o->open_browser)
				browser_open(url);
		}
		fflush(stdout);
		int sig = 0;
		sigwait(signals, &sig);
		fprintf(stderr, "colibri serve: %s: stopping (running requests have %.0f s to finish)\n",
			strsignal(sig), o->grace_s);
		serve_http_refuse(&http);
		serve_sched_stop(&sched, o->grace_s);
		/* A second signal cancels what still runs. */
		struct timespec tick = { 0, 100 * 1000 * 1000 };
		for (;;) {
			pthread_mutex_lock(&sched.mu);
			bool idle = sched.n_busy == 0 && sched.q_n == 0;
			pthread_mutex_unlock(&sched.mu);
			if (idle)
				break;
			if (sigtimedwait(signals, NULL, &tick) > 0)
				serve_sched_stop(&sched, 0);
		}
	}
	if (sched_ready) {
		serve_sched_stop(&sched, 0);
		int save = serve_sched_join(&sched);
		rc = rc ? rc : save;
	}
	if (live_ready)
		serve_live_close(&live); /* its streams end: no connection stays suspended */
	serve_http_stop(&http, 5);
	if (live_ready)
		serve_live_free(&live);
	if (sched_ready)
		serve_sched_free(&sched);
	if (prompt_ready)
		serve_prompt_free(&prompt);
	serve_metrics_free(&metrics);
	if (listen_fd >= 0)
		close(listen_fd);
	if (!rc)
		fprintf(stderr, "colibri serve: stopped\n");
	return rc;
}
