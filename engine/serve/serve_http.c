/*
 * serve_http — see serve_http.h. Each request has a struct http_req (MHD's
 * con_cls), made on the first call of the access handler and freed when
 * MHD reports the request complete; it holds the HTTP side's reference to
 * the job. Suspension protocol: a connection is suspended only inside
 * serve_job_take's sleep callback, with the job's mutex held, and resumed
 * only by the job's wake with the same mutex held, so a wake-up can be
 * neither lost nor doubled.
 */
#include "engine/serve/serve_http.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/decode/constrain.h"
#include "engine/grammar/grammar.h"
#include "engine/serve/serve_answer.h"
#include "engine/serve/serve_auth.h"
#include "engine/serve/serve_job.h"
#include "engine/serve/serve_live.h"
#include "engine/serve/serve_llama.h"
#include "engine/serve/serve_ollama.h"
#include "engine/serve/serve_ui.h"
#include "engine/text/tokenizer.h"

struct http_req {
	struct serve_http *h;
	struct MHD_Connection *conn;
	enum serve_route route;
	const struct serve_dialect *dialect; /* the route's answer and error shapes; NULL: OpenAI's */
	bool post;                   /* a completion request: has a body */
	bool answered;               /* a response is queued */
	struct strbuf body;
	bool too_large;
	struct serve_job *job;
	struct serve_answer ans;
	bool ans_ready;
	struct serve_take take;
	struct strbuf sse;        /* formatted events not yet handed to MHD */
	char warning[512];        /* what the request's grammar does not enforce: the X-Colibri-Warning header */
	size_t sse_sent;
	const char *ui_name;      /* SERVE_ROUTE_UI: the file asked for */
	struct serve_live_sub sub; /* SERVE_ROUTE_LIVE */
	bool subscribed;
	char slot_arg[16];        /* POST /slots/{id}: the id as given */
	struct serve_slot_op op;  /* GET /slots, POST /slots/{id}: the scheduler's action */
	bool op_ready, op_submitted;
	char *op_file;            /* its file name as the client gave it */
	struct serve_slot_info *op_info; /* GET /slots: [slots] */
};

static enum MHD_Result respond(struct http_req *r, int status, const char *type, char *body, size_t len)
{
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(body ? len : 0, body ? body : (void *)"", body ? MHD_RESPMEM_MUST_FREE
											      : MHD_RESPMEM_PERSISTENT);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (r->warning[0])
		MHD_add_response_header(resp, "X-Colibri-Warning", r->warning);
	if (status == 401)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (status == 405)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->post ? "POST" : "GET, HEAD");
	if (status == 429) {
		char s[16];
		snprintf(s, sizeof s, "%d", serve_metrics_retry_after(r->h->metrics));
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, s);
	}
	enum MHD_Result rc = MHD_queue_response(r->conn, (unsigned)status, resp);
	MHD_destroy_response(resp);
	r->answered = true;
	serve_metrics_request(r->h->metrics, r->route, status);
	return rc;
}

static enum MHD_Result respond_json(struct http_req *r, int status, char *json)
{
	return respond(r, status, "application/json", json, json ? strlen(json) : 0);
}

static enum MHD_Result respond_error(struct http_req *r, const struct serve_error *e)
{
	return respond_json(r, e->status, serve_dialect_error(r->dialect, e));
}

static enum MHD_Result fail(struct http_req *r, int status, const char *param, const char *code, const char *msg)
{
	struct serve_error e;
	serve_error_set(&e, status, param, code, "%s", msg);
	return respond_error(r, &e);
}

/* Called by serve_job_take with the job's mutex held. */
static void conn_sleep(void *arg)
{
	MHD_suspend_connection(((struct http_req *)arg)->conn);
}

/* Called by the scheduler with the job's mutex held. */
static void conn_wake(void *arg)
{
	MHD_resume_connection(((struct http_req *)arg)->conn);
}

/* The route of url, and whether its method is the right one. The
 * dashboard's routes exist only with the dashboard on. */
static enum serve_route route_of(const struct serve_http *h, const char *url, bool *post, const char **model_arg)
{
	*post = false;
	*model_arg = NULL;
	enum serve_route ollama = serve_ollama_route(url, post);
	if (ollama != SERVE_ROUTE_OTHER)
		return ollama;
	enum serve_route llama = serve_llama_route(url, post, model_arg);
	if (llama != SERVE_ROUTE_OTHER)
		return llama;
	if (h->o.live && (!strcmp(url, "/") || !strncmp(url, "/ui/", 4))) {
		*model_arg = url[1] ? url + 4 : "index.html";
		return SERVE_ROUTE_UI;
	}
	if (h->o.live && !strcmp(url, "/api/live"))
		return SERVE_ROUTE_LIVE;
	if (h->o.live && !strcmp(url, "/api/state"))
		return SERVE_ROUTE_STATE;
	if (!strcmp(url, "/v1/chat/completions")) {
		*post = true;
		return SERVE_ROUTE_CHAT;
	}
	if (!strcmp(url, "/v1/completions")) {
		*post = true;
		return SERVE_ROUTE_COMPLETIONS;
	}
	if (!strcmp(url, "/v1/models"))
		return SERVE_ROUTE_MODELS;
	if (!strncmp(url, "/v1/models/", 11)) {
		*model_arg = url + 11;
		return SERVE_ROUTE_MODELS;
	}
	if (!strcmp(url, "/health"))
		return SERVE_ROUTE_HEALTH;
	if (!strcmp(url, "/metrics"))
		return SERVE_ROUTE_METRICS;
	return SERVE_ROUTE_OTHER;
}

static ssize_t live_read(void *cls, uint64_t pos, char *buf, size_t max);

/* Answers 200 with a stream whose bytes reader gives: server-sent events,
 * or what the route's dialect streams. */
static enum MHD_Result stream_respond(struct http_req *r, MHD_ContentReaderCallback reader)
{
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 65536, reader, r, NULL);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				r->dialect ? r->dialect->stream_type : "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	if (r->warning[0])
		MHD_add_response_header(resp, "X-Colibri-Warning", r->warning);
	enum MHD_Result rc = MHD_queue_response(r->conn, 200, resp);
	MHD_destroy_response(resp);
	r->answered = true;
	serve_metrics_request(r->h->metrics, r->route, 200);
	return rc;
}

/* Copies formatted bytes not yet handed to MHD into buf; 0 once there are
 * none left (the buffer is then emptied for the next events). */
static size_t sse_pending(struct http_req *r, char *buf, size_t max)
{
	if (r->sse_sent < r->sse.len) {
		size_t n = r->sse.len - r->sse_sent < max ? r->sse.len - r->sse_sent : max;
		memcpy(buf, r->sse.p + r->sse_sent, n);
		r->sse_sent += n;
		return n;
	}
	r->sse.len = 0;
	r->sse_sent = 0;
	return 0;
}

/* A static file of the dashboard, embedded or from --ui-dir. */
static enum MHD_Result ui_file(struct http_req *r, const char *name)
{
	struct serve_http *h = r->h;
	struct MHD_Response *resp = NULL;
	if (!serve_ui_name_ok(name))
		return fail(r, 404, NULL, "not_found", "no such file");
	if (h->o.ui_dir) {
		char *data = NULL;
		size_t len = 0;
		int rc = serve_ui_read(h->o.ui_dir, name, &data, &len);
		if (rc == -ENOENT || rc == -EINVAL)
			return fail(r, 404, NULL, "not_found", "no such file");
		if (rc) {
			fprintf(stderr, "colibri serve: %s/%s: %s\n", h->o.ui_dir, name, strerror(-rc));
			return fail(r, 500, NULL, NULL, "the dashboard's file cannot be read");
		}
		resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
		if (!resp)
			free(data);
	} else {
		const struct serve_ui_file *f = serve_ui_find(name);
		if (!f)
			return fail(r, 404, NULL, "not_found", "no such file");
		resp = MHD_create_response_from_buffer(f->size, (void *)f->data, MHD_RESPMEM_PERSISTENT);
	}
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, serve_ui_type(name));
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "Content-Security-Policy",
				"default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
				"frame-ancestors 'none'");
	enum MHD_Result rc = MHD_queue_response(r->conn, 200, resp);
	MHD_destroy_response(resp);
	r->answered = true;
	serve_metrics_request(h->metrics, r->route, 200);
	return rc;
}

/* GET /api/live: an event stream of the dashboard's state. */
static enum MHD_Result live_stream(struct http_req *r)
{
	r->sub = (struct serve_live_sub){ .wake = conn_wake, .arg = r };
	if (serve_live_subscribe(r->h->o.live, &r->sub) != 0)
		return fail(r, 503, NULL, "too_many_dashboards", "too many dashboards are connected");
	r->subscribed = true;
	return stream_respond(r, live_read);
}

/* MHD's content reader of /api/live: the next state event, or suspend. */
static ssize_t live_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct http_req *r = cls;
	for (;;) {
		size_t sent = sse_pending(r, buf, max);
		if (sent)
			return (ssize_t)sent;
		int n = serve_live_next(r->h->o.live, &r->sub, &r->sse, conn_sleep, r);
		if (n == -1)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (n < 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (n == 0)
			return 0; /* suspended until the ticker wakes it */
	}
}

/* What Ollama's API says about the served model (serve_ollama.h). */
static void ollama_model(const struct serve_http *h, struct serve_ollama_model *m)
{
	*m = (struct serve_ollama_model){ .id = h->o.model_id, .created = h->o.created, .ctx = h->o.ctx,
					  .s = h->sched->s, .prompt = h->prompt, .lim = &h->o.lim };
}

/* Ollama's routes that answer without a job: tags, ps, version, show, embed. */
static enum MHD_Result ollama_info(struct http_req *r)
{
	struct serve_ollama_model m;
	struct serve_error e;
	ollama_model(r->h, &m);
	char *json = serve_ollama_info(r->route, &m, r->body.p, r->body.len, &e);
	return json ? respond_json(r, 200, json) : respond_error(r, &e);
}

/* What llama-server's routes say about this server (serve_llama.h). */
static void llama_info(const struct serve_http *h, struct serve_llama_info *in)
{
	*in = (struct serve_llama_info){ .model_id = h->o.model_id, .model_path = h->o.model_path, .tok = h->tok,
					 .n_ctx = h->o.ctx, .n_slots = h->sched->b.n_slots, .lim = &h->o.lim,
					 .slot_save_dir = h->o.slot_save_dir };
}

/* The answer of a slot action once the scheduler did it; else sleeps
 * until it wakes the connection. */
static enum MHD_Result slot_op_reply(struct http_req *r)
{
	if (!serve_slot_op_done(&r->op, conn_sleep, r))
		return MHD_YES; /* suspended until the scheduler wakes it */
	if (r->op.rc) {
		struct serve_error e;
		serve_error_set(&e, r->op.status ? r->op.status : 500, NULL, NULL, "%s", r->op.error);
		return respond_error(r, &e);
	}
	struct serve_llama_info in;
	llama_info(r->h, &in);
	const char *f = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "fail_on_no_slot");
	if (r->op.action == SERVE_SLOT_LIST && f && *f) {
		int idle = 0;
		for (int i = 0; i < in.n_slots; i++)
			idle += !r->op_info[i].processing;
		if (!idle)
			return fail(r, 503, NULL, NULL, "no slot available");
	}
	char *json = r->op.action == SERVE_SLOT_LIST ? serve_llama_slots(&in, r->op_info)
						      : serve_llama_slot_answer(&r->op, r->op_file);
	return json ? respond_json(r, 200, json) : fail(r, 500, NULL, NULL, "out of memory");
}

/* Hands r->op to the scheduler, which runs it between steps (the batch is
 * its own), and answers once it is done. */
static enum MHD_Result slot_op_start(struct http_req *r)
{
	if (serve_sched_slot_op(r->h->sched, &r->op) != 0)
		return fail(r, 503, NULL, "shutting_down", "the server is shutting down");
	r->op_submitted = true;
	atomic_fetch_add(&r->h->jobs_open, 1);
	return slot_op_reply(r);
}

/* GET /slots (action LIST), POST /slots/{id}?action=save|restore|erase. */
static enum MHD_Result slot_action(struct http_req *r)
{
	struct serve_llama_info in;
	struct serve_error e;
	llama_info(r->h, &in);
	serve_slot_op_init(&r->op, SERVE_SLOT_LIST, 0, conn_wake, r);
	r->op_ready = true;
	if (!r->post) {
		if (!(r->op_info = calloc((size_t)in.n_slots, sizeof *r->op_info)))
			return fail(r, 500, NULL, NULL, "out of memory");
		r->op.info = r->op_info;
	} else if (serve_llama_slot_action(&r->op, &r->op_file, r->slot_arg,
					   MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "action"),
					   r->body.p ? r->body.p : "", r->body.len, &in, &e) != 0) {
		return respond_error(r, &e);
	}
	return slot_op_start(r);
}

/* POST /tokenize and /detokenize: answered here, without the scheduler. */
static enum MHD_Result llama_tokens(struct http_req *r)
{
	struct serve_error e;
	const char *b = r->body.p ? r->body.p : "";
	char *json = r->route == SERVE_ROUTE_LLAMA_TOKENIZE ? serve_llama_tokenize(b, r->body.len, r->h->tok, &e)
							      : serve_llama_detokenize(b, r->body.len, r->h->tok, &e);
	return json ? respond_json(r, 200, json) : respond_error(r, &e);
}

static enum MHD_Result get_route(struct http_req *r, const char *model_arg)
{
	struct serve_http *h = r->h;
	if (r->route == SERVE_ROUTE_LLAMA_SLOTS)
		return slot_action(r);
	if (r->route == SERVE_ROUTE_LLAMA_PROPS) {
		struct serve_llama_info in;
		llama_info(h, &in);
		char *json = serve_llama_props(&in);
		return json ? respond_json(r, 200, json) : fail(r, 500, NULL, NULL, "out of memory");
	}
	if (serve_ollama_is_info(r->route))
		return ollama_info(r);
	if (r->route == SERVE_ROUTE_UI)
		return ui_file(r, model_arg);
	if (r->route == SERVE_ROUTE_LIVE)
		return live_stream(r);
	if (r->route == SERVE_ROUTE_STATE) {
		struct strbuf t = { 0 };
		if (serve_live_state(h->o.live, &t) != 0) {
			strbuf_free(&t);
			return fail(r, 500, NULL, NULL, "out of memory");
		}
		return respond(r, 200, "application/json", t.p, t.len);
	}
	if (r->route == SERVE_ROUTE_HEALTH)
		return respond_json(r, 200, strdup("{\"status\":\"ok\"}"));
	if (r->route == SERVE_ROUTE_METRICS) {
		char *text = NULL;
		size_t len = 0;
		if (serve_metrics_render(h->metrics, h->o.model_id, &text, &len) != 0)
			return fail(r, 500, NULL, NULL, "out of memory");
		return respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
	}
	if (!model_arg)
		return respond_json(r, 200, serve_json_models(h->o.model_id, h->o.created));
	if (strcmp(model_arg, h->o.model_id) != 0) {
		struct serve_error e;
		serve_error_set(&e, 404, "model", "model_not_found", "the model '%.200s' does not exist", model_arg);
		return respond_error(r, &e);
	}
	return respond_json(r, 200, serve_json_model(h->o.model_id, h->o.created));
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max);

/* Turns the pending output of a non-streamed job into the answer once
 * done; else sleeps until there is more. */
static enum MHD_Result drain(struct http_req *r)
{
	for (;;) {
		int n = serve_job_take(r->job, &r->take, conn_sleep, r);
		if (n < 0 || serve_answer_add(&r->ans, &r->take) != 0)
			return fail(r, 500, NULL, NULL, "out of memory");
		if (r->take.done)
			break;
		if (n == 0)
			return MHD_YES; /* suspended until the scheduler wakes it */
	}
	if (r->take.finish == SERVE_FINISH_ERROR)
		return respond_error(r, &r->take.error);
	char *json = serve_answer_json(&r->ans, &r->take);
	return json ? respond_json(r, 200, json) : fail(r, 500, NULL, NULL, "out of memory");
}

static uint64_t fresh_seed(void)
{
	static atomic_ullong counter;
	uint64_t s = 0;
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (read(fd, &s, sizeof s) != (ssize_t)sizeof s)
			s = 0;
		close(fd);
	}
	return s ^ (uint64_t)(clock_now_s() * 1e9) ^ (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull);
}

/* The text of a completions prompt to echo (malloc'd). */
static char *echo_text(const struct serve_http *h, const struct serve_request *q)
{
	if (q->prompt)
		return strdup(q->prompt);
	char *text = NULL;
	size_t len = 0;
	return tokenizer_decode(h->tok, q->prompt_ids, (size_t)q->n_prompt_ids, &text, &len) == 0 ? text : NULL;
}

/* An Ollama chat or generate body into q, and *ol (malloc'd) its own part.
 * Returns 0 to go on; otherwise the request is answered (an error, or
 * nothing to run) and *res is the result. */
static int ollama_parse(struct http_req *r, struct serve_request *q, struct serve_ollama **ol, enum MHD_Result *res)
{
	struct serve_ollama_model m;
	struct serve_error e;
	ollama_model(r->h, &m);
	if (!(*ol = malloc(sizeof **ol))) {
		*res = fail(r, 500, NULL, NULL, "out of memory");
		return -1;
	}
	if (serve_ollama_parse(*ol, q, r->route == SERVE_ROUTE_OLLAMA_CHAT, r->body.p ? r->body.p : "", r->body.len, &m,
			       &e) != 0) {
		*res = respond_error(r, &e);
	} else if ((*ol)->done_reason) {
		char *json = serve_ollama_done_json(*ol);
		*res = json ? respond_json(r, 200, json) : fail(r, 500, NULL, NULL, "out of memory");
	} else {
		if ((*ol)->warning[0]) {
			snprintf(r->warning, sizeof r->warning, "%s", (*ol)->warning);
			fprintf(stderr, "colibri serve: warning: %s\n", r->warning);
		}
		return 0;
	}
	free(*ol);
	*ol = NULL;
	return -1;
}

/* The body is complete: parse, render, admit, start answering. */
static enum MHD_Result completion(struct http_req *r)
{
	struct serve_http *h = r->h;
	enum serve_endpoint ep = r->route == SERVE_ROUTE_CHAT ? SERVE_CHAT : SERVE_COMPLETION;
	struct serve_request q;
	struct serve_error e;
	struct serve_ollama *ol = NULL; /* an Ollama request's own, until the answer takes it */
	bool llama = r->route == SERVE_ROUTE_LLAMA_COMPLETION;
	struct serve_llama_completion lx = { 0 }; /* llama-server's /completion fields */
	enum MHD_Result res;
	if (r->dialect == &serve_ollama_dialect) {
		if (ollama_parse(r, &q, &ol, &res) != 0)
			return res;
		ep = q.endpoint;
	} else if (llama) {
		if (serve_llama_completion_parse(&q, &lx, r->body.p ? r->body.p : "", r->body.len, &h->o.lim,
						 h->sched->b.n_slots, &e) != 0)
			return respond_error(r, &e);
	} else if (serve_request_parse(&q, ep, r->body.p ? r->body.p : "", r->body.len, &h->o.lim, &e) != 0) {
		return respond_error(r, &e);
	}
	int ctx = ol && ol->num_ctx ? ol->num_ctx : h->o.ctx; /* Ollama's num_ctx may ask for less */
	struct serve_prompt_ids ids = { 0 };
	struct serve_constraint con = { 0 };
	if (q.model && strcmp(q.model, h->o.model_id) != 0) {
		serve_error_set(&e, 404, "model", "model_not_found", "the model '%.200s' does not exist", q.model);
		res = respond_error(r, &e);
		goto out;
	}
	if ((llama && serve_llama_prompt(&q, &lx, h->tok, &e) != 0) || serve_prompt_build(h->prompt, &q, &ids, &e) != 0) {
		res = respond_error(r, &e);
		goto out;
	}
	const char *what = ep == SERVE_CHAT ? "messages" : "prompt";
	if (ids.n >= ctx) {
		serve_error_set(&e, 400, what, "context_length_exceeded",
				"the prompt has %d tokens; this server's context holds %d (prompt and completion)", ids.n,
				ctx);
		res = respond_error(r, &e);
		goto out;
	}
	if (q.max_tokens > 0 && ids.n + q.max_tokens > ctx) {
		serve_error_set(&e, 400, "max_tokens", "context_length_exceeded",
				"the context holds %d tokens; the request asks for %d (%d in the prompt, %d to generate)",
				ctx, ids.n + q.max_tokens, ids.n, q.max_tokens);
		res = respond_error(r, &e);
		goto out;
	}
	bool constrained = llama ? serve_llama_constrained(&lx) : (ep == SERVE_CHAT || ol) && serve_constraint_wanted(&q);
	if (constrained) {
		if (llama ? serve_llama_constraint(&con, &lx, h->tok, h->vocab, h->o.eos, h->o.n_eos, h->o.lim.vocab, &e) != 0
			  : serve_constraint_build(&con, &q, h->prompt->tool_format, h->prompt->dsml_tool_calls, h->tok,
						   h->vocab, h->o.eos, h->o.n_eos, h->o.lim.vocab, &e) != 0) {
			res = respond_error(r, &e);
			goto out;
		}
		if (con.warnings) {
			/* Not strict: the answer is looser than the schema where it says. */
			snprintf(r->warning, sizeof r->warning, "response_format.json_schema: %s", con.warnings);
			for (char *c = r->warning; *c; c++)
				if (*c == '\n' || *c == '\r')
					*c = ' ';
			fprintf(stderr, "colibri serve: warning: %s\n", r->warning);
		}
	}
	struct batch_params p = q.p;
	p.checkpoint_at = ids.history;
	p.n_predict = q.max_tokens > 0 ? q.max_tokens : ctx - ids.n;
	if (p.n_predict > h->o.lim.max_tokens_cap)
		p.n_predict = h->o.lim.max_tokens_cap;
	if (llama) /* n_predict: -1 to the context's end, 0 only the prompt, more than fits up to the end */
		p.n_predict = serve_llama_n_predict(&lx, ctx - ids.n, h->o.lim.max_tokens_cap);
	if (!q.seed_given)
		p.seed = fresh_seed();
	char *echo = ep == SERVE_COMPLETION && q.echo ? echo_text(h, &q) : NULL;
	bool stream = q.stream, usage = q.include_usage;
	/* A forced call in harmony is a harmony message (its header names the
	 * function): the reader turns it into the call the parser takes. */
	bool forced_call = q.tool_choice == SERVE_TOOLS_REQUIRED || q.tool_choice == SERVE_TOOLS_NAMED;
	bool split = ep == SERVE_CHAT && (h->prompt->think_tags || h->prompt->harmony) &&
		     (!constrained || (h->prompt->harmony && forced_call));
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	int rc = serve_answer_init(&r->ans, ep, h->tok, h->o.model_id, p.logprobs && !llama, usage, split, echo);
	free(echo);
	r->ans_ready = true;
	if (!rc && ep == SERVE_CHAT && q.tools_json && q.tool_choice != SERVE_TOOLS_NONE)
		rc = serve_answer_tools(&r->ans, h->prompt->tool_format, q.tools_json);
	if (!rc && ol) {
		serve_answer_dialect(&r->ans, &serve_ollama_dialect, ol);
		ol = NULL;
	}
	if (!rc && llama) {
		struct serve_llama_info in;
		llama_info(h, &in);
		rc = serve_llama_answer(&r->ans, &q, &lx, ids.ids, ids.n, &in);
	}
	struct serve_job *j = rc ? NULL
				 : serve_job_new(&q, ids.ids, ids.n, &p, split, ids.reasoning_open, h->prompt->harmony, h->tok, h->o.timeout_s,
						 ci ? ci->connect_fd : -1);
	if (!j) {
		res = fail(r, 500, NULL, NULL, "out of memory");
		goto out;
	}
	ids.ids = NULL; /* the job's now */
	if (llama) {
		j->slot_wanted = lx.id_slot;
		j->no_cache = !lx.cache_prompt;
	}
	serve_job_constrain(j, &con);
	serve_job_set_wake(j, conn_wake, r);
	rc = serve_sched_submit(h->sched, j);
	if (rc) {
		serve_job_unref(j); /* the scheduler's, never handed over */
		serve_job_unref(j);
		res = rc == -EAGAIN ? fail(r, 429, NULL, "queue_full", "the server is busy: every slot and queue place is taken")
				    : fail(r, 503, NULL, "shutting_down", "the server is shutting down");
		goto out;
	}
	r->job = j;
	atomic_fetch_add(&h->jobs_open, 1);
	if (!stream) {
		res = drain(r);
		goto out;
	}
	res = stream_respond(r, sse_read);
out:
	free(ol);
	serve_llama_completion_free(&lx);
	free(ids.ids);
	serve_constraint_free(&con);
	serve_request_free(&q);
	return res;
}

/* MHD's content reader of a stream: formatted events, or suspend. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct http_req *r = cls;
	for (;;) {
		size_t sent = sse_pending(r, buf, max);
		if (sent)
			return (ssize_t)sent;
		if (r->ans.finished)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (!r->ans.started) {
			struct serve_take none = { 0 };
			serve_answer_sse(&r->ans, &none, &r->sse);
			continue;
		}
		int n = serve_job_take(r->job, &r->take, conn_sleep, r);
		if (n < 0 || serve_answer_sse(&r->ans, &r->take, &r->sse) != 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (r->sse.len == 0 && n == 0 && !r->take.done)
			return 0; /* suspended until the scheduler wakes it */
	}
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
				  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct serve_http *h = cls;
	struct http_req *r = *con_cls;
	if (!r) {
		if (!(r = calloc(1, sizeof *r)))
			return MHD_NO;
		r->h = h;
		r->conn = conn;
		*con_cls = r;
		const char *model_arg;
		r->route = route_of(h, url, &r->post, &model_arg);
		if (serve_ollama_is_route(r->route))
			r->dialect = &serve_ollama_dialect;
		else if (serve_llama_is_route(r->route))
			r->dialect = &serve_llama_dialect;
		if (r->route == SERVE_ROUTE_LLAMA_SLOTS && r->post &&
		    (size_t)snprintf(r->slot_arg, sizeof r->slot_arg, "%s", model_arg) >= sizeof r->slot_arg)
			r->slot_arg[0] = 0; /* cut, it could read as another slot: no slot */
		if (atomic_load(&h->stopping))
			return fail(r, 503, NULL, "shutting_down", "the server is shutting down");
		if (r->route == SERVE_ROUTE_OTHER)
			return fail(r, 404, NULL, "not_found", "no such endpoint");
		bool is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
		if (r->post ? strcmp(method, "POST") != 0 : !is_get)
			return fail(r, 405, NULL, "method_not_allowed", r->post ? "use POST" : "use GET");
		if (h->o.api_key && r->route != SERVE_ROUTE_HEALTH && r->route != SERVE_ROUTE_UI &&
		    !serve_auth_ok(h->o.api_key,
				   MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION)))
			return fail(r, 401, NULL, "invalid_api_key", "a valid API key is needed (Authorization: Bearer KEY)");
		const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (r->post && cl && strtoull(cl, NULL, 10) > h->o.body_max)
			return fail(r, 413, NULL, "body_too_large", "the request body is larger than the server accepts");
		if (!r->post)
			return get_route(r, model_arg);
		return MHD_YES;
	}
	if (r->answered) {
		*upload_size = 0; /* the rest of a refused body is not read into anything */
		return MHD_YES;
	}
	if (*upload_size) {
		if (r->body.len + *upload_size > h->o.body_max)
			r->too_large = true;
		else
			strbuf_put(&r->body, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	if (r->job)
		return drain(r); /* resumed: more output of a non-streamed answer */
	if (r->op_submitted)
		return slot_op_reply(r); /* resumed: the slot action is done */
	if (r->too_large)
		return fail(r, 413, NULL, "body_too_large", "the request body is larger than the server accepts");
	if (r->body.rc)
		return fail(r, 500, NULL, NULL, "out of memory");
	if (serve_ollama_is_info(r->route))
		return ollama_info(r);
	if (r->route == SERVE_ROUTE_LLAMA_TOKENIZE || r->route == SERVE_ROUTE_LLAMA_DETOKENIZE)
		return llama_tokens(r);
	if (r->route == SERVE_ROUTE_LLAMA_SLOTS)
		return slot_action(r);
	return completion(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	struct http_req *r = *con_cls;
	if (!r)
		return;
	if (r->subscribed)
		serve_live_unsubscribe(r->h->o.live, &r->sub);
	if (r->job) {
		serve_job_http_gone(r->job);
		serve_job_unref(r->job);
		atomic_fetch_sub(&r->h->jobs_open, 1);
	}
	if (r->ans_ready)
		serve_answer_free(&r->ans);
	if (r->op_submitted)
		atomic_fetch_sub(&r->h->jobs_open, 1);
	if (r->op_ready)
		serve_slot_op_destroy(&r->op);
	free(r->op_file);
	free(r->op_info);
	serve_take_free(&r->take);
	strbuf_free(&r->sse);
	strbuf_free(&r->body);
	free(r);
	*con_cls = NULL;
}

/* libmicrohttpd's own messages (malformed requests and the like) stay
 * quiet: each bad request already gets its answer. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
}

int serve_http_start(struct serve_http *h, const struct serve_http_options *o, struct serve_sched *sched,
		     struct serve_metrics *metrics, const struct serve_prompt *prompt, const struct tokenizer *tok)
{
	memset(h, 0, sizeof *h);
	h->o = *o;
	h->sched = sched;
	h->metrics = metrics;
	h->prompt = prompt;
	h->tok = tok;
	/* Built once: a constrained request's mask reads it (a request of its
	 * own would index the vocabulary again, 0.2 s on 151k tokens). */
	if (tok && constrain_vocab(&h->vocab, tok, o->eos, o->n_eos))
		return -ENOMEM;
	atomic_init(&h->stopping, false);
	atomic_init(&h->jobs_open, 0);
	h->d = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL,
				NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)o->listen_fd,
				MHD_OPTION_THREAD_POOL_SIZE, (unsigned)o->threads, MHD_OPTION_CONNECTION_TIMEOUT,
				o->idle_timeout_s, MHD_OPTION_CONNECTION_LIMIT, 512u, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
				(size_t)65536, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
				MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
	if (!h->d) {
		grammar_vocab_free(h->vocab);
		h->vocab = NULL;
		return error_set(EIO, "cannot start the HTTP server (libmicrohttpd)");
	}
	return 0;
}

void serve_http_refuse(struct serve_http *h)
{
	atomic_store(&h->stopping, true);
}

void serve_http_stop(struct serve_http *h, double wait_s)
{
	atomic_store(&h->stopping, true);
	double until = clock_now_s() + wait_s;
	while (atomic_load(&h->jobs_open) > 0 && clock_now_s() < until) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	if (h->d)
		MHD_stop_daemon(h->d);
	h->d = NULL;
	grammar_vocab_free(h->vocab);
	h->vocab = NULL;
}
