/*
 * test_serve_live — the server side of the web dashboard (docs/DASHBOARD.md,
 * engine/serve/serve_live.c, serve_ui.c) on the qwen3_moe_tok fixture,
 * driven with curl; the page itself in a real browser is test_web.c:
 *  - the static files: /, /ui/NAME byte for byte the files of
 *    engine/serve/web/ (compiled in) and from --ui-dir; names that could
 *    leave the folder, and unknown ones, 404; no key needed for them while
 *    the /api routes need it; --no-ui removes every dashboard route;
 *  - /api/state: its metrics equal /metrics' samples; its map adds up to
 *    the store's counters (routed = requests, RAM hits = hits, pinned
 *    cells x frame = pinned bytes) and, after shutdown, to --stats-json's
 *    expert_usage, layer by layer and expert by expert;
 *  - /api/live: an event on connect, events while a request decodes at
 *    most ten a second, one a second when idle, seq increasing; past 32
 *    dashboards a 503; a server with dashboards connected stops at SIGTERM;
 *  - the throughput headline (issue 39, item 7): while a request decodes,
 *    colibri_decode_tokens_per_second is the tokens over the time in steps
 *    that the events show; idle, it keeps that rate instead of diluting it
 *    with the idle seconds;
 *  - every chat answer's timings (streamed and not);
 *  - `colibri web --no-open` prints the dashboard's URL.
 */
#include "tests/serve_util.h"

static const char *const web_files[] = { "index.html", "style.css", "app.js", "chat.js", "panel.js", "map.js" };

/* The repository's copy of a dashboard file (malloc'd, *n bytes). */
static char *repo_file(const char *name, size_t *n)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/engine/serve/web/%s", tu_repo(), name);
	char *text = tu_read(path, n);
	cr_assert(text, "%s is missing", path);
	return text;
}

static void check_files(const struct srv *s)
{
	for (size_t i = 0; i < sizeof web_files / sizeof web_files[0]; i++) {
		char path[64], *body = NULL;
		size_t want_n = 0;
		snprintf(path, sizeof path, "/ui/%s", web_files[i]);
		char *want = repo_file(web_files[i], &want_n);
		cr_assert_eq(http(s, "GET", path, NULL, NULL, &body), 200, "%s", path);
		cr_expect(body && strlen(body) == want_n && !memcmp(body, want, want_n), "%s differs from the repository's",
			  path);
		free(body);
		free(want);
	}
}

Test(serve, dashboard_files)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	char *body = NULL, *want = repo_file("index.html", NULL);
	cr_assert_eq(http(&s, "GET", "/", NULL, NULL, &body), 200);
	cr_expect_str_eq(body, want, "/ is index.html");
	free(body);
	free(want);
	check_files(&s);
	char *head = NULL;
	cr_assert_eq(http(&s, "HEAD", "/ui/app.js", NULL, "-I", &head), 200);
	cr_expect(strcasestr(head, "content-type: text/javascript"), "app.js's type: %s", head);
	cr_expect(strcasestr(head, "content-security-policy:"), "no CSP: %s", head);
	free(head);
	const char *bad[] = { "/ui/", "/ui/nope.js", "/ui/.hidden", "/ui/..%2FMakefile", "/ui/a/b.js", "/index.html" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		expect_error(&s, "GET", bad[i], NULL, "--path-as-is", 404, NULL);
	expect_error(&s, "POST", "/", "{}", NULL, 405, NULL);
	cr_expect_eq(http(&s, "HEAD", "/", NULL, "-I", NULL), 200);
	cr_assert_eq(srv_stop(&s), 0);
	/* The same files from a folder, where an edit shows without a rebuild. */
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/engine/serve/web", tu_repo());
	srv_start(&s, "--ui-dir '%s'", dir);
	check_files(&s);
	expect_error(&s, "GET", "/ui/nope.js", NULL, NULL, 404, NULL);
	cr_assert_eq(srv_stop(&s), 0);
}

Test(serve, dashboard_off_and_keys)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "--no-ui");
	expect_error(&s, "GET", "/", NULL, NULL, 404, NULL);
	expect_error(&s, "GET", "/ui/app.js", NULL, NULL, 404, NULL);
	expect_error(&s, "GET", "/api/state", NULL, NULL, 404, NULL);
	expect_error(&s, "GET", "/api/live", NULL, NULL, 404, NULL);
	char *out = tu_read(s.out, NULL);
	cr_expect(out && !strstr(out, "dashboard on"), "--no-ui still prints a dashboard: %s", out ? out : "");
	free(out);
	cr_assert_eq(srv_stop(&s), 0);
	srv_start(&s, "%s", "--api-key sesame");
	cr_expect_eq(http(&s, "GET", "/", NULL, NULL, NULL), 200, "the page needs no key (it asks for one)");
	cr_expect_eq(http(&s, "GET", "/ui/chat.js", NULL, NULL, NULL), 200);
	expect_error(&s, "GET", "/api/state", NULL, NULL, 401, NULL);
	expect_error(&s, "GET", "/api/live", NULL, NULL, 401, NULL);
	cr_expect_eq(http(&s, "GET", "/api/state", NULL, "-H 'Authorization: Bearer sesame'", NULL), 200);
	cr_assert_eq(srv_stop(&s), 0);
	cr_expect_neq(tu_sh("'%s' serve --no-open >/dev/null 2>&1", tu_colibri()), 0, "serve takes no --no-open");
	cr_expect_neq(tu_sh("'%s' web --no-ui >/dev/null 2>&1", tu_colibri()), 0, "web is the dashboard");
	cr_expect_neq(tu_sh("'%s' serve --ui-dir /nonexistent >/dev/null 2>&1", tu_colibri()), 0);
}

/* The /metrics text as a JSON object of name (labels included) -> value. */
static cJSON *metrics_object(const struct srv *s)
{
	char *text = NULL;
	cr_assert_eq(http(s, "GET", "/metrics", NULL, NULL, &text), 200);
	cJSON *o = cJSON_CreateObject();
	for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		if (nl)
			*nl = 0;
		char *sp = strrchr(line, ' ');
		if (line[0] == '#' || !sp)
			continue;
		*sp = 0;
		cJSON_AddNumberToObject(o, line, strtod(sp + 1, NULL));
	}
	free(text);
	return o;
}

/* Base64 (standard alphabet, padded) into out; returns the bytes. */
static size_t unbase64(const char *in, uint8_t *out, size_t cap)
{
	static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = 0;
	uint32_t acc = 0;
	int bits = 0;
	for (const char *p = in; *p && *p != '='; p++) {
		const char *d = strchr(digits, *p);
		cr_assert(d, "not base64: '%c'", *p);
		acc = acc << 6 | (uint32_t)(d - digits);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			cr_assert_lt(n, cap);
			out[n++] = (uint8_t)(acc >> bits);
		}
	}
	return n;
}

struct map {
	int rows, cols;
	int layer[64];
	uint8_t where[64 * 256], heat[64 * 256];
	uint32_t routed[64 * 256], ram_hits[64 * 256], last[64 * 256];
};

static void words(const cJSON *state, const char *name, uint32_t *out, size_t cells)
{
	uint8_t *b = malloc(cells * 4 + 4);
	cr_assert_eq(unbase64(str_at(state, name), b, cells * 4 + 4), cells * 4, "%s", name);
	for (size_t i = 0; i < cells; i++)
		out[i] = b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
	free(b);
}

static void map_read(const cJSON *state, struct map *m)
{
	m->rows = (int)num_at(state, "map.layers");
	m->cols = (int)num_at(state, "map.experts");
	cr_assert(m->rows > 0 && m->rows <= 64 && m->cols > 0 && m->cols <= 256, "%d x %d", m->rows, m->cols);
	size_t cells = (size_t)m->rows * (size_t)m->cols;
	const cJSON *ids = at(state, "map.layer_ids");
	cr_assert_eq(cJSON_GetArraySize(ids), m->rows);
	for (int r = 0; r < m->rows; r++)
		m->layer[r] = cJSON_GetArrayItem(ids, r)->valueint;
	cr_assert_eq(unbase64(str_at(state, "map.where"), m->where, sizeof m->where), cells);
	cr_assert_eq(unbase64(str_at(state, "map.heat"), m->heat, sizeof m->heat), cells);
	words(state, "map.routed", m->routed, cells);
	words(state, "map.ram_hits", m->ram_hits, cells);
	words(state, "map.last", m->last, cells);
}

Test(serve, dashboard_state_matches_metrics_and_stats)
{
	NEED_FIXTURE();
	struct srv s;
	char stats[PATH_MAX + 16];
	snprintf(stats, sizeof stats, "%s/stats.json", ws);
	/* A cache smaller than the model, so that experts come and go. */
	srv_start(&s, "--ram min --stats-json '%s'", stats);
	char body[512];
	chat_body(body, sizeof body, "Tell me about the sea", 24, NULL);
	free(chat_text(&s, body, NULL));
	chat_body(body, sizeof body, "And the mountains?", 16, NULL);
	free(chat_text(&s, body, NULL));
	cJSON *metrics = metrics_object(&s);
	cJSON *state = http_json(&s, "GET", "/api/state", NULL, 200);
	const cJSON *sm = at(state, "metrics"), *v;
	int compared = 0;
	cJSON_ArrayForEach(v, metrics) {
		/* Requests are counted once answered (this state's own request, the
		 * /metrics before it); uptime and the 10 s rate move with the clock. */
		if (!strncmp(v->string, "colibri_requests_total", 22) || !strcmp(v->string, "colibri_uptime_seconds") ||
		    !strcmp(v->string, "colibri_tokens_per_second") ||
		    !strcmp(v->string, "colibri_disk_recent_gigabytes_per_second"))
			continue;
		const cJSON *w = cJSON_GetObjectItemCaseSensitive(sm, v->string);
		cr_assert(cJSON_IsNumber(w), "%s is in /metrics, not in the state", v->string);
		cr_expect_eq(w->valuedouble, v->valuedouble, "%s: state %.9g, /metrics %.9g", v->string, w->valuedouble,
			     v->valuedouble);
		compared++;
	}
	cr_expect_gt(compared, 40);
	const char *shown[] = { "colibri_ram_budget_bytes", "colibri_ram_resident_bytes", "colibri_ram_kv_bytes",
				"colibri_ram_expert_cache_bytes", "colibri_ram_pinned_bytes", "colibri_step_seconds_total",
				"colibri_expert_misses_total", "colibri_prefetch_recall", "colibri_copy_weight{copy=\"0\"}" };
	for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++)
		cr_expect(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(sm, shown[i])), "no %s", shown[i]);
	cr_expect_gt(num_at(sm, "colibri_ram_budget_bytes"), 0);
	cr_expect_gt(num_at(sm, "colibri_expert_misses_total"), 0, "--ram min: some experts come from disk");
	cr_expect_leq(num_at(sm, "colibri_disk_wait_seconds_total"), num_at(sm, "colibri_step_seconds_total"));

	static struct map m;
	map_read(state, &m);
	uint64_t routed = 0, hits = 0, pinned = 0;
	for (int i = 0; i < m.rows * m.cols; i++) {
		routed += m.routed[i];
		hits += m.ram_hits[i];
		pinned += m.where[i] == 3;
		cr_assert(m.where[i] <= 3, "cell %d: where %d", i, m.where[i]);
		cr_assert_leq(m.ram_hits[i], m.routed[i]);
		cr_assert(m.routed[i] ? m.last[i] >= 1 && m.last[i] <= num_at(state, "map.step") : m.last[i] == 0,
			  "cell %d: routed %u, last %u", i, m.routed[i], m.last[i]);
		cr_assert(m.heat[i] == 0 || m.last[i] > 0, "cell %d: heat without a use", i);
	}
	cr_expect_eq((double)routed, num_at(sm, "colibri_expert_requests_total"), "the map's routed = the requests");
	cr_expect_eq((double)hits, num_at(sm, "colibri_expert_hits_total"), "the map's RAM hits = the hits");
	const cJSON *rates = at(state, "map.layer_hit_rate");
	cr_assert_eq(cJSON_GetArraySize(rates), m.rows);
	cJSON_ArrayForEach(v, rates)
		cr_assert(cJSON_IsNull(v) || (v->valuedouble >= 0 && v->valuedouble <= 1));
	cr_expect_eq(pinned > 0, num_at(sm, "colibri_ram_pinned_bytes") > 0);
	cJSON_Delete(state);
	cJSON_Delete(metrics);
	cr_assert_eq(srv_stop(&s), 0);

	/* --stats-json counts the same routing, layer by layer. */
	char *report = tu_read(stats, NULL);
	cJSON *js = cJSON_Parse(report ? report : "");
	free(report);
	cr_assert(js, "no --stats-json report");
	const cJSON *usage = cJSON_GetObjectItemCaseSensitive(js, "expert_usage");
	cr_assert(cJSON_IsArray(usage));
	int row = 0;
	for (int l = 0; l < cJSON_GetArraySize(usage); l++) {
		const cJSON *u = cJSON_GetArrayItem(usage, l);
		if (cJSON_IsNull(u))
			continue;
		cr_assert_lt(row, m.rows, "layer %d has experts in the report, not in the map", l);
		cr_assert_eq(m.layer[row], l);
		cr_assert_eq(cJSON_GetArraySize(u), m.cols);
		for (int e = 0; e < m.cols; e++)
			cr_expect_eq(cJSON_GetArrayItem(u, e)->valuedouble, m.routed[row * m.cols + e], "layer %d expert %d",
				     l, e);
		row++;
	}
	cr_expect_eq(row, m.rows);
	cJSON_Delete(js);
}

/* What the tests read from one state event. */
struct live_event {
	uint64_t seq;
	double generated, step_s, decode_tps, active;
};

/* The events in the text of an /api/live stream: each "event: state" with
 * its data's numbers; returns how many. */
static int live_events(const char *text, struct live_event *ev, int cap)
{
	int n = 0;
	for (const char *p = text; p && (p = strstr(p, "event: state\ndata: ")); p++) {
		p += strlen("event: state\ndata: ");
		const char *end = strstr(p, "\n\n");
		cr_assert(end, "an unfinished event");
		char *data = strndup(p, (size_t)(end - p));
		cJSON *j = cJSON_Parse(data);
		cr_assert(j, "an event that is not JSON: %.200s", data);
		cr_assert(at(j, "map.where") && at(j, "metrics.colibri_generated_tokens_total"), "not a state: %.200s", data);
		if (n < cap)
			ev[n] = (struct live_event){ (uint64_t)num_at(j, "seq"),
						     num_at(j, "metrics.colibri_generated_tokens_total"),
						     num_at(j, "metrics.colibri_step_seconds_total"),
						     num_at(j, "metrics.colibri_decode_tokens_per_second"),
						     num_at(j, "metrics.colibri_active_slots") };
		n++;
		cJSON_Delete(j);
		free(data);
	}
	return n;
}

Test(serve, dashboard_live_events)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	static struct live_event ev[64];
	/* Idle: one on connect, then one a second. */
	char *idle = NULL;
	double t0 = now_s();
	http(&s, "GET", "/api/live", NULL, "--max-time 2.5", &idle);
	int n = live_events(idle, ev, 64);
	cr_expect(n >= 2 && n <= 4, "%d events in 2.5 s idle (one on connect, one a second)", n);
	cr_expect_lt(now_s() - t0, 10);
	free(idle);
	/* Decoding: after steps, at most ten a second. */
	char pid[PATH_MAX + 16], *busy = NULL;
	snprintf(pid, sizeof pid, "%s/long.pid", ws);
	long_stream(&s, pid);
	wait_metric(&s, "colibri_generated_tokens_total", 2);
	/* The 400 tokens take 3 s here: the second below is all decoding. */
	http(&s, "GET", "/api/live", NULL, "--max-time 1", &busy);
	n = live_events(busy, ev, 64);
	cr_expect(n >= 4 && n <= 12, "%d events in 1 s of decoding (at most 10 a second)", n);
	for (int i = 1; i < n && i < 64; i++)
		cr_expect_gt(ev[i].seq, ev[i - 1].seq, "event %d: seq %llu after %llu", i, (unsigned long long)ev[i].seq,
			     (unsigned long long)ev[i - 1].seq);
	free(busy);
	kill_pidfile(pid);
	/* The headline while decoding: the tokens over the time in steps
	 * between the first event and the last that show the request active. */
	const struct live_event *a = NULL, *b = NULL;
	for (int i = 0; i < n && i < 64; i++)
		if (ev[i].active > 0) {
			a = a ? a : &ev[i];
			b = &ev[i];
		}
	cr_assert(a && b->step_s > a->step_s, "no two events a step apart while the request decoded");
	double want = (b->generated - a->generated) / (b->step_s - a->step_s);
	cr_expect(b->decode_tps > want / 1.5 && b->decode_tps < want * 1.5,
		  "decoding: colibri_decode_tokens_per_second %.1f, the events show %.0f tokens in %.3f s of steps (%.1f/s)",
		  b->decode_tps, b->generated - a->generated, b->step_s - a->step_s, want);
	/* Idle: the same rate, however long since (the 10 s average falls). */
	double until_idle = now_s() + 10;
	cJSON *state = NULL;
	for (;;) {
		state = http_json(&s, "GET", "/api/state", NULL, 200);
		if (num_at(state, "metrics.colibri_active_slots") == 0 || now_s() > until_idle)
			break;
		cJSON_Delete(state);
		sleep_ms(20);
	}
	cr_assert_eq(num_at(state, "metrics.colibri_active_slots"), 0,
		     "the stream's request still runs 10 s after its client left");
	double t_idle = now_s(), kept = num_at(state, "metrics.colibri_decode_tokens_per_second");
	cr_expect(kept > want / 1.5 && kept < want * 1.5, "idle: colibri_decode_tokens_per_second %.1f, decoding ran at %.1f/s",
		  kept, want);
	cJSON_Delete(state);
	/* 32 dashboards at once, a 33rd refused; the server stops with them
	 * connected. */
	tu_sh("for i in $(seq 32); do curl -sN --max-time 60 http://127.0.0.1:%d/api/live >/dev/null 2>&1 & done", s.port);
	double until = now_s() + 30;
	int st = 0;
	while (now_s() < until && (st = http(&s, "GET", "/api/live", NULL, "--max-time 0.5", NULL)) != 503)
		sleep_ms(50);
	cr_expect_eq(st, 503, "the 33rd dashboard is refused");
	cJSON *later = http_json(&s, "GET", "/api/state", NULL, 200);
	cr_expect_eq(num_at(later, "metrics.colibri_decode_tokens_per_second"), kept,
		     "idle %.1f s later, the decode rate moved", now_s() - t_idle);
	cJSON_Delete(later);
	t0 = now_s();
	cr_assert_eq(srv_stop(&s), 0);
	cr_expect_lt(now_s() - t0, 10, "the dashboards' streams hold the shutdown up");
	tu_sh("pkill -f 'curl -sN --max-time 60 http://127.0.0.1:%d/api/live' || true", s.port);
}

Test(serve, dashboard_chat_timings)
{
	NEED_FIXTURE();
	struct srv s;
	srv_start(&s, "%s", "");
	char body[512];
	chat_body(body, sizeof body, "Hello there", 12, NULL);
	cJSON *whole = NULL;
	free(chat_text(&s, body, &whole));
	int completion = (int)num_at(whole, "usage.completion_tokens");
	cr_expect_eq(num_at(whole, "timings.completion_tokens"), completion);
	cr_expect_eq(num_at(whole, "timings.prompt_tokens"), num_at(whole, "usage.prompt_tokens"));
	cr_expect_geq(num_at(whole, "timings.queue_s"), 0);
	cr_expect_gt(num_at(whole, "timings.ttft_s"), 0);
	cr_expect_geq(num_at(whole, "timings.ttft_s"), num_at(whole, "timings.queue_s"));
	if (completion > 1)
		cr_expect_gt(num_at(whole, "timings.tokens_per_second"), 0);
	cJSON_Delete(whole);
	/* Streamed: on the chunk with finish_reason, without include_usage. */
	chat_body(body, sizeof body, "Hello there", 12, "\"stream\":true");
	char *text = NULL;
	cr_assert_eq(http(&s, "POST", "/v1/chat/completions", body, NULL, &text), 200);
	cJSON *ev = sse_events(text);
	const cJSON *e, *fin = NULL;
	cJSON_ArrayForEach(e, ev)
		if (cJSON_IsString(at(e, "choices.0.finish_reason")))
			fin = e;
	cr_assert(fin, "no chunk with finish_reason");
	cr_expect_eq(num_at(fin, "timings.completion_tokens"), completion);
	cr_expect_gt(num_at(fin, "timings.ttft_s"), 0);
	cJSON_Delete(ev);
	free(text);
	cr_assert_eq(srv_stop(&s), 0);
}

Test(serve, web_prints_the_dashboard)
{
	NEED_FIXTURE();
	char out[PATH_MAX + 16];
	snprintf(out, sizeof out, "%s/web.out", ws);
	int rc = tu_sh("COLIBRI_CACHE_DIR='%s/cache' DISPLAY= WAYLAND_DISPLAY= '%s' web --model '%s' --port 0 --no-pin "
		       "--threads 1 --ctx 256 >'%s' 2>&1 & pid=$!; "
		       "for i in $(seq 300); do grep -q 'dashboard on http://127.0.0.1:' '%s' && break; sleep 0.1; done; "
		       "kill -INT $pid; wait $pid",
		       ws, tu_colibri(), model, out, out);
	char *text = tu_read(out, NULL);
	cr_expect_eq(rc, 0, "web: %s", text ? text : "");
	cr_expect(text && strstr(text, "colibri serve: dashboard on http://127.0.0.1:"), "%s", text ? text : "");
	free(text);
}
