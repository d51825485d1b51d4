/*
 * test_serve_hostile — `colibri serve` under hostile input, over raw
 * sockets: malformed and deeply nested JSON, invalid UTF-8, huge bodies,
 * wrong types, a client that sends half a request and stalls, 1,000 seeded
 * random requests; then the server still answers and its stderr holds no
 * sanitizer report (the suite's ASan pass finds leaks here).
 */
#include "tests/serve_util.h"

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

