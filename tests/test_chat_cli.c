/*
 * test_chat_cli — `colibri chat` end to end on qwen3_moe_tok (the real
 * Qwen3 tokenizer and chat template; skipped with the reason when the
 * fixture is missing), greedy:
 *  - from a pipe: no prompt and no colour; a second turn reuses the first
 *    from the prompt cache (cached tokens in its status line); :reset keeps
 *    the system prompt and answers the same question the same way, its
 *    whole prompt cached; `:save X` then a new process `--session X`
 *    restores the tokens (no prefill) and its next answer is the one an
 *    uninterrupted process gives to the same turns; --new starts over;
 *  - refusals: a corrupted and a truncated session file, and the session of
 *    another model (int8 beside int4), are refused with a message, kept
 *    aside under the name the message gives, and the chat starts fresh;
 *  - --think off renders Qwen3's closed empty reasoning block;
 *  - every family (tests/family_model.h) chats and resumes a session in a
 *    new process without a prefill, answering as an uninterrupted one;
 *  - the context (issue 39, item 2): the default -n is a quarter of it; a
 *    conversation that outgrows it drops its oldest turn, keeps the system
 *    prompt, says so in one line, and answers as a new chat of what remains
 *    does (a session holding only that, prefilled from nothing), on a
 *    transformer (the default model) and on a recurrent hybrid (qwen3_next,
 *    whose state cannot be cut back); the session left that full says so
 *    when it is resumed and drops its oldest turn before the first message;
 *  - on a terminal (forkpty): libedit is there (Ctrl-A moves to the start of
 *    the line, Up recalls history); -n 4 then :more continues the answer to
 *    what -n 8 gives at once; :save, :reset, and a resume in a new process;
 *    Ctrl-C stops an answer and the chat goes on.
 * Every process's stderr (and the terminal's output) is checked for a
 * sanitizer report, so the ASan pass of the suite finds leaks here.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <time.h>

#include "base/error.h"
#include "engine/decode/conversation_store.h"
#include "tests/family_model.h"
#include "tests/fixture_cache.h"
#include "tests/test_util.h"

static char ws[PATH_MAX];
static char cache[PATH_MAX + 16];

static void setup(void)
{
	tu_mkdtemp(ws, sizeof ws);
	snprintf(cache, sizeof cache, "%s/cache", ws);
}

static void teardown(void)
{
	tu_rmrf(ws);
}

TestSuite(chat_cli, .init = setup, .fini = teardown, .timeout = 300);

/* qwen3_moe_tok converted with quant (the build's shared container; the
 * sessions go to the cache folder, not into it), into out. */
static void need_model(const char *quant, char *out, size_t n)
{
	char hf[PATH_MAX], args[64];
	snprintf(hf, sizeof hf, "%s/hf/qwen3_moe_tok/tokenizer.json", tu_fixtures());
	if (access(hf, R_OK) != 0)
		cr_skip_test("fixture hf/qwen3_moe_tok is missing: tools/node_modules lacks the Qwen3 tokenizer "
			     "(run ./setup.sh)");
	snprintf(args, sizeof args, "--quant %s", quant);
	fc_container(out, n, "hf/qwen3_moe_tok", args);
}

static void no_sanitizer_report(const char *what, const char *text)
{
	cr_expect(!strstr(text, "LeakSanitizer") && !strstr(text, "AddressSanitizer") &&
		  !strstr(text, "runtime error"), "%s: a sanitizer report:\n%s", what, text);
}

struct run {
	int status;
	char *out, *err;
};

static void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
}

/* Pipes input into `colibri chat --model M --threads 2 --temp 0 ARGS`. */
static struct run chat_pipe(const char *model, const char *tag, const char *input, const char *args)
{
	char in[PATH_MAX + 64], out[PATH_MAX + 64], err[PATH_MAX + 64];
	snprintf(in, sizeof in, "%s/%s.in", ws, tag);
	snprintf(out, sizeof out, "%s/%s.out", ws, tag);
	snprintf(err, sizeof err, "%s/%s.err", ws, tag);
	cr_assert_eq(tu_write(in, input, strlen(input)), 0);
	struct run r;
	r.status = tu_sh("COLIBRI_CACHE_DIR='%s' '%s' chat --model '%s' --threads 2 --temp 0 --no-pin %s <'%s' >'%s' "
			 "2>'%s'", cache, tu_colibri(), model, args, in, out, err);
	r.out = tu_read(out, NULL);
	r.err = tu_read(err, NULL);
	cr_assert(r.out && r.err);
	no_sanitizer_report(tag, r.err);
	cr_expect_eq(r.status, 0, "%s: exit %d:\n%s", tag, r.status, r.err);
	return r;
}

/* The k-th status line's numbers (from 0); false when there is none. */
static bool status_of(const char *err, int k, int *tokens, int *prompt, int *cached)
{
	const char *p = err;
	for (int i = 0; p; i++) {
		p = strstr(p, " tok/s, first token");
		if (!p)
			return false;
		if (i == k)
			break;
		p++;
	}
	const char *open = p;
	while (open > err && *open != '[')
		open--;
	const char *q = strstr(p, "; prompt ");
	return sscanf(open, "[%d tokens", tokens) == 1 && q && sscanf(q, "; prompt %d tokens (%d cached)", prompt, cached) == 2;
}

static int count(const char *s, const char *needle)
{
	int n = 0;
	for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* The session folder of the model whose files say "model": model. */
static void session_dir(const char *model, char *out, size_t n)
{
	char root[PATH_MAX + 32];
	snprintf(root, sizeof root, "%s/sessions", cache);
	DIR *d = opendir(root);
	cr_assert_not_null(d, "no %s", root);
	out[0] = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char dir[PATH_MAX + 64];
		snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
		DIR *s = opendir(dir);
		for (struct dirent *f; s && (f = readdir(s));) {
			size_t len = strlen(f->d_name);
			if (len < 5 || strcmp(f->d_name + len - 5, ".json"))
				continue;
			char path[PATH_MAX + 400];
			snprintf(path, sizeof path, "%s/%s", dir, f->d_name);
			char *text = tu_read(path, NULL);
			cJSON *j = text ? cJSON_Parse(text) : NULL;
			const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
			if (cJSON_IsString(m) && !strcmp(m->valuestring, model))
				snprintf(out, n, "%s", dir);
			cJSON_Delete(j);
			free(text);
		}
		if (s)
			closedir(s);
	}
	closedir(d);
	cr_assert(out[0], "no session folder for %s", model);
}

/* Session name of model, parsed (the caller frees it). */
static cJSON *session_read(const char *model, const char *name)
{
	char dir[PATH_MAX + 64], path[PATH_MAX + 200];
	session_dir(model, dir, sizeof dir);
	snprintf(path, sizeof path, "%s/%s.json", dir, name);
	char *text = tu_read(path, NULL);
	cr_assert_not_null(text, "no %s", path);
	cJSON *j = cJSON_Parse(text);
	free(text);
	cr_assert_not_null(j, "%s is not JSON", path);
	return j;
}

static const cJSON *messages_of(const cJSON *j)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "messages");
	cr_assert(cJSON_IsArray(m));
	return m;
}

static const char *content_of(const cJSON *j, int i)
{
	const cJSON *m = cJSON_GetArrayItem(messages_of(j), i);
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
	cr_assert(cJSON_IsString(c), "message %d has no content", i);
	return c->valuestring;
}

Test(chat_cli, two_turns_reuse_the_first)
{
	char m[PATH_MAX + 32];
	need_model("int4", m, sizeof m);
	struct run r = chat_pipe(m, "two", "Hello there\nHow are you?\n", "-n 12");
	int t1, p1, c1, t2, p2, c2;
	cr_assert(status_of(r.err, 0, &t1, &p1, &c1) && status_of(r.err, 1, &t2, &p2, &c2), "no status lines:\n%s",
		  r.err);
	cr_expect(!status_of(r.err, 2, &t2, &p2, &c2));
	cr_expect_eq(t1, 12);
	cr_expect_eq(c1, 0, "a new session has nothing cached");
	cr_expect_geq(c2, p1, "the second turn prefilled the first again: %d of %d cached", c2, p1);
	cr_expect(strstr(r.err, "cut at -n (:more continues)"), "%s", r.err);
	/* From a pipe: no banner, prompt or colour. */
	cr_expect(!strstr(r.err, "colibri chat:") && !strchr(r.out, '\033') && !strchr(r.err, '\033'));
	cr_expect(strncmp(r.out, "> ", 2) != 0);
	cr_expect_gt(strlen(r.out), 2);
	cJSON *j = session_read(m, "last");
	cr_expect_eq(cJSON_GetArraySize(messages_of(j)), 4);
	cr_expect_str_eq(content_of(j, 0), "Hello there");
	cr_expect_str_eq(content_of(j, 2), "How are you?");
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "state");
	cr_expect_eq(cJSON_GetObjectItemCaseSensitive(st, "tokens")->valueint, p2 + t2 - 1,
		     "the state holds the prompt and the answer but its last token");
	cJSON_Delete(j);
	run_free(&r);
}

Test(chat_cli, reset_keeps_the_system_prompt)
{
	char m[PATH_MAX + 32];
	need_model("int4", m, sizeof m);
	struct run r = chat_pipe(m, "reset", "Hello there\n:reset\nHello there\n", "-n 10 --system 'Be brief.'");
	int t1, p1, c1, t2, p2, c2;
	cr_assert(status_of(r.err, 0, &t1, &p1, &c1) && status_of(r.err, 1, &t2, &p2, &c2), "%s", r.err);
	cr_expect(strstr(r.err, "(a new conversation; the system prompt stays)"), "%s", r.err);
	cr_expect_eq(p2, p1);
	cr_expect_eq(c2, p1 - 1, "after :reset the same prompt is cached but its last token: %d of %d", c2, p1);
	size_t len = strlen(r.out);
	cr_assert(len % 2 == 0 && !memcmp(r.out, r.out + len / 2, len / 2), "two answers to one question differ:\n%s",
		  r.out);
	cJSON *j = session_read(m, "last");
	cr_expect_eq(cJSON_GetArraySize(messages_of(j)), 3);
	cr_expect_str_eq(content_of(j, 0), "Be brief.");
	cJSON_Delete(j);
	run_free(&r);
}

Test(chat_cli, save_and_resume_continue_as_without_a_restart)
{
	char m[PATH_MAX + 32];
	need_model("int4", m, sizeof m);
	struct run u = chat_pipe(m, "u", "Hello there\nWhat next?\nTell me more\n", "-n 12 --session U");
	struct run p = chat_pipe(m, "p", "Hello there\nWhat next?\n:save X\n", "-n 12 --session P");
	cr_expect(strstr(p.err, "saved as session \"X\""), "%s", p.err);
	struct run c = chat_pipe(m, "c", "Tell me more\n", "-n 12 --session X");
	int restored = -1;
	const char *at = strstr(c.err, "tokens restored (no prefill)");
	cr_assert(at, "%s", c.err);
	while (at > c.err && at[-1] != ' ')
		at--;
	while (at > c.err && at[-1] == ' ')
		at--;
	while (at > c.err && at[-1] >= '0' && at[-1] <= '9')
		at--;
	cr_assert_eq(sscanf(at, "%d", &restored), 1);
	cr_expect(strstr(c.err, "session \"X\": 4 messages"), "%s", c.err);
	int tu, pu, cu, tc, pc, cc;
	cr_assert(status_of(u.err, 2, &tu, &pu, &cu) && status_of(c.err, 0, &tc, &pc, &cc));
	cr_expect_eq(cc, restored, "the resumed turn prefilled again: %d cached, %d restored", cc, restored);
	cr_expect_eq(cc, cu, "the resumed process cached %d, the uninterrupted one %d", cc, cu);
	cr_expect_eq(pc, pu);
	size_t lu = strlen(u.out), lc = strlen(c.out);
	cr_expect(lc > 1 && lu > lc && !strcmp(u.out + lu - lc, c.out),
		  "the answer after a restart differs from the uninterrupted one:\n[%s]\n[%s]", c.out, u.out);
	cJSON *ju = session_read(m, "U"), *jx = session_read(m, "X");
	cr_expect_eq(cJSON_GetArraySize(messages_of(jx)), 6);
	for (int i = 0; i < 6; i++)
		cr_expect_str_eq(content_of(jx, i), content_of(ju, i), "message %d differs", i);
	cJSON_Delete(ju);
	cJSON_Delete(jx);
	/* --new: a fresh conversation in the same session. */
	struct run n = chat_pipe(m, "n", "Hello there\n", "-n 12 --session X --new");
	cr_expect(!strstr(n.err, "restored"), "%s", n.err);
	int tn, pn, cn;
	cr_assert(status_of(n.err, 0, &tn, &pn, &cn));
	jx = session_read(m, "X");
	cr_expect_eq(cJSON_GetArraySize(messages_of(jx)), 2);
	cJSON_Delete(jx);
	run_free(&u);
	run_free(&p);
	run_free(&c);
	run_free(&n);
}

/* Every family chats and resumes: each tiny fixture with a small tokenizer
 * and its family's template (tests/family_model.h); a turn, then a new
 * process continues the session from its saved state (no prefill of what
 * was restored) with the answer an uninterrupted process gives. */
Test(chat_cli, every_family_resumes_as_without_a_restart)
{
	for (size_t f = 0; f < FAMILY_CHATS; f++) {
		const char *fam = family_chats[f].family;
		char m[PATH_MAX + 64], tag[64];
		family_model(ws, &family_chats[f], m, sizeof m);
		snprintf(tag, sizeof tag, "%s-u", fam);
		struct run u = chat_pipe(m, tag, "hello there\nwhat next\n", "-n 6 --session U");
		snprintf(tag, sizeof tag, "%s-p", fam);
		struct run p = chat_pipe(m, tag, "hello there\n", "-n 6 --session P");
		snprintf(tag, sizeof tag, "%s-c", fam);
		struct run c = chat_pipe(m, tag, "what next\n", "-n 6 --session P");
		cr_log_info("%s: [%s] [%s]", fam, p.out, c.out);
		cr_expect(strstr(c.err, "tokens restored (no prefill)"), "%s: %s", fam, c.err);
		int tu, pu, cu, tc, pc, cc;
		cr_assert(status_of(u.err, 1, &tu, &pu, &cu) && status_of(c.err, 0, &tc, &pc, &cc), "%s: %s", fam, c.err);
		cr_expect_eq(pc, pu, "%s: prompt of %d tokens after the restart, %d without", fam, pc, pu);
		cr_expect_eq(cc, cu, "%s: %d tokens cached after the restart, %d without", fam, cc, cu);
		cr_expect_gt(cc, 0, "%s: nothing reused after the restart", fam);
		size_t lu = strlen(u.out), lc = strlen(c.out), lp = strlen(p.out);
		cr_expect(lu == lp + lc && !strncmp(u.out, p.out, lp) && !strcmp(u.out + lp, c.out),
			  "%s: the turns differ across a restart:\n[%s][%s]\n[%s]", fam, p.out, c.out, u.out);
		run_free(&u);
		run_free(&p);
		run_free(&c);
	}
}

Test(chat_cli, think_off_closes_the_reasoning_block)
{
	char m[PATH_MAX + 32];
	need_model("int4", m, sizeof m);
	struct run on = chat_pipe(m, "on", "Hello there\n", "-n 4 --session on");
	struct run off = chat_pipe(m, "off", "Hello there\n", "-n 4 --session off --think off");
	int t, p_on, p_off, c;
	cr_assert(status_of(on.err, 0, &t, &p_on, &c) && status_of(off.err, 0, &t, &p_off, &c));
	/* enable_thinking=false: "<think>", "\n\n", "</think>", "\n\n" after the generation prompt. */
	cr_expect_eq(p_off, p_on + 4, "--think off: %d prompt tokens, %d without", p_off, p_on);
	cr_expect_eq(tu_sh("COLIBRI_CACHE_DIR='%s' '%s' chat --model '%s' --think maybe </dev/null >/dev/null 2>&1", cache,
			   tu_colibri(), m), 1, "--think maybe accepted");
	run_free(&on);
	run_free(&off);
}

/* Expects err to say the session file was refused for `why` and kept
 * aside; returns the aside path's bytes (the caller frees them). */
static char *expect_aside(const char *err, const char *why, const char *json, size_t *len)
{
	cr_expect(strstr(err, "refused") && strstr(err, why), "no refusal for \"%s\":\n%s", why, err);
	cr_expect(strstr(err, "starting a new conversation"), "%s", err);
	char aside[PATH_MAX + 256];
	snprintf(aside, sizeof aside, "%s.refused", json);
	cr_expect(strstr(err, aside), "the message does not say where the file went (%s):\n%s", aside, err);
	char *bytes = tu_read(aside, len);
	cr_expect_not_null(bytes, "%s is not there", aside);
	return bytes;
}

Test(chat_cli, bad_session_files_are_refused_and_kept)
{
	char m[PATH_MAX + 32], dir[PATH_MAX + 64], json[PATH_MAX + 128];
	need_model("int4", m, sizeof m);
	struct run r = chat_pipe(m, "first", "Hello there\n", "-n 6");
	run_free(&r);
	session_dir(m, dir, sizeof dir);
	snprintf(json, sizeof json, "%s/last.json", dir);

	/* A changed letter in a message: still JSON, the checksum fails. */
	size_t len = 0, got_len = 0;
	char *bytes = tu_read(json, &len);
	char *at = strstr(bytes, "Hello there");
	cr_assert_not_null(at);
	at[0] = 'Y';
	cr_assert_eq(tu_write(json, bytes, len), 0);
	r = chat_pipe(m, "flip", "Hi\n", "-n 6");
	char *got = expect_aside(r.err, "corrupt (checksum mismatch)", json, &got_len);
	cr_expect(got && got_len == len && !memcmp(got, bytes, len), "the file aside is not the refused one");
	free(got);
	free(bytes);
	run_free(&r);
	cJSON *j = session_read(m, "last");
	cr_expect_eq(cJSON_GetArraySize(messages_of(j)), 2, "the chat did not start fresh");
	cr_expect_str_eq(content_of(j, 0), "Hi");
	cJSON_Delete(j);

	/* Cut in half. */
	bytes = tu_read(json, &len);
	cr_assert_eq(tu_write(json, bytes, len / 2), 0);
	free(bytes);
	r = chat_pipe(m, "cut", "Hi again\n", "-n 6");
	cr_expect(strstr(r.err, "truncated or not JSON") && strstr(r.err, ".refused.2"), "%s", r.err);
	run_free(&r);
	j = session_read(m, "last");
	cr_expect_eq(cJSON_GetArraySize(messages_of(j)), 2);
	cJSON_Delete(j);

	/* A corrupted state keeps the conversation and costs a prefill. */
	char state[PATH_MAX + 128];
	snprintf(state, sizeof state, "%s/last.state", dir);
	bytes = tu_read(state, &len);
	cr_assert(bytes && len > 64);
	bytes[len - 2] ^= 0x40;
	cr_assert_eq(tu_write(state, bytes, len), 0);
	free(bytes);
	r = chat_pipe(m, "state", "And?\n", "-n 6");
	cr_expect(strstr(r.err, "its saved state was refused") && strstr(r.err, "last.state.refused"), "%s", r.err);
	int t, p, c;
	cr_assert(status_of(r.err, 0, &t, &p, &c));
	cr_expect_eq(c, 0, "a refused state restores nothing");
	run_free(&r);
	j = session_read(m, "last");
	cr_expect_eq(cJSON_GetArraySize(messages_of(j)), 4, "the conversation was lost with its state");
	cJSON_Delete(j);
}

Test(chat_cli, another_models_session_is_refused)
{
	char a[PATH_MAX + 32], b[PATH_MAX + 32], da[PATH_MAX + 64], db[PATH_MAX + 64];
	need_model("int4", a, sizeof a);
	need_model("int8", b, sizeof b);
	struct run r = chat_pipe(a, "a", "Hello there\n", "-n 6");
	run_free(&r);
	r = chat_pipe(b, "b", "Hello there\n", "-n 6");
	run_free(&r);
	session_dir(a, da, sizeof da);
	session_dir(b, db, sizeof db);
	cr_assert_str_neq(da, db, "two models, one session folder");
	char src[PATH_MAX + 128], dst[PATH_MAX + 128];
	snprintf(src, sizeof src, "%s/last.json", da);
	snprintf(dst, sizeof dst, "%s/last.json", db);
	size_t len = 0, got_len = 0;
	char *bytes = tu_read(src, &len);
	cr_assert_eq(tu_write(dst, bytes, len), 0);
	r = chat_pipe(b, "foreign", "Hi\n", "-n 6");
	char *got = expect_aside(r.err, "belongs to another model", dst, &got_len);
	cr_expect(got && got_len == len && !memcmp(got, bytes, len));
	free(got);
	free(bytes);
	run_free(&r);
	cJSON *j = session_read(b, "last");
	cr_expect_eq(cJSON_GetArraySize(messages_of(j)), 2);
	cr_expect_str_eq(content_of(j, 0), "Hi");
	cJSON_Delete(j);
}

/* The line before the k-th status line (from 0), or "" (static). */
static const char *line_before_status(const char *err, int k)
{
	static char line[512];
	line[0] = 0;
	const char *p = err;
	for (int i = 0; p && (p = strstr(p, " tok/s, first token")); i++, p++) {
		if (i < k)
			continue;
		while (p > err && *p != '[')
			p--;
		const char *end = p > err ? p - 1 : p, *start = end;
		while (start > err && start[-1] != '\n')
			start--;
		snprintf(line, sizeof line, "%.*s", (int)(end - start), start);
		break;
	}
	return line;
}

/* Saves the first n messages of session `from` as session `to` with no
 * state, as if a chat had held only them: the next chat on it prefills
 * all of it. */
static void session_head(const char *model, const char *from, int n, const char *to)
{
	cJSON *j = session_read(model, from);
	struct conversation_store st = { .model_dir = model };
	session_dir(model, st.dir, sizeof st.dir);
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "model_id");
	cr_assert(cJSON_IsString(id));
	st.model_id = strtoull(id->valuestring, NULL, 16);
	struct conversation c;
	conversation_init(&c);
	for (int i = 0; i < n; i++) {
		const cJSON *msg = cJSON_GetArrayItem(messages_of(j), i);
		const char *role = cJSON_GetObjectItemCaseSensitive(msg, "role")->valuestring, *text = content_of(j, i);
		cr_assert_eq(conversation_add(&c, role, text, strlen(text)), 0);
	}
	cr_assert_eq(conversation_store_save(&st, to, &c, NULL, 0), 0, "%s", error_message());
	conversation_free(&c);
	cJSON_Delete(j);
}

/* Three turns in a context that holds two: the third drops the first (one
 * line says so), the system prompt stays, and its answer is the one a new
 * chat of [system, turn 2] gives to the third message, prefilled from
 * nothing. quarter: the default -n that args leave (0: args give -n). */
static void shift_as_a_new_chat(const char *m, const char *tag, const char *input, const char *last,
				const char *args, int quarter)
{
	char t[64], a[512];
	snprintf(t, sizeof t, "%s-a", tag);
	snprintf(a, sizeof a, "%s --session A", args);
	struct run r = chat_pipe(m, t, input, a);
	int t1, p1, c1, p2, c2, p3, c3;
	cr_assert(status_of(r.err, 0, &t1, &p1, &c1) && status_of(r.err, 1, &t1, &p2, &c2) &&
		  status_of(r.err, 2, &t1, &p3, &c3) && !status_of(r.err, 3, &t1, &p3, &c3),
		  "%s: three answers expected:\n%s", tag, r.err);
	if (quarter) { /* item 1: the default answer stays well inside the context */
		cr_assert(status_of(r.err, 0, &t1, &p1, &c1));
		cr_expect(t1 <= quarter && (t1 == quarter || !strstr(r.err, "cut at -n")),
			  "%s: %d tokens answered by default, not a quarter of the context (%d):\n%s", tag, t1, quarter,
			  r.err);
	}
	cr_expect_eq(count(r.err, "context full:"), 1, "%s: %s", tag, r.err);
	int freed = 0;
	cr_expect_eq(sscanf(line_before_status(r.err, 2), "context full: dropped the oldest turn (%d tokens)", &freed), 1,
		     "%s: no notice before the third answer:\n%s", tag, r.err);
	cr_expect_gt(freed, 0);
	cr_expect_lt(p3, p2 + freed, "%s: the third prompt (%d) did not shrink", tag, p3);
	cr_expect_lt(c3, p3, "%s: the shifted prompt was taken from the cache whole", tag);
	cJSON *j = session_read(m, "A");
	cr_assert_eq(cJSON_GetArraySize(messages_of(j)), 5, "%s: [system, turn 2, turn 3] expected", tag);
	cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(messages_of(j), 0), "role")->valuestring,
			 "system", "%s: the system prompt went", tag);
	cr_expect_str_eq(content_of(j, 3), last);
	cJSON_Delete(j);
	/* The new chat: the first three messages that remain, then the last. */
	session_head(m, "A", 3, "F");
	snprintf(t, sizeof t, "%s-f", tag);
	snprintf(a, sizeof a, "%s --session F", args);
	char in[256];
	snprintf(in, sizeof in, "%s\n", last);
	struct run f = chat_pipe(m, t, in, a);
	int tf, pf, cf;
	cr_assert(status_of(f.err, 0, &tf, &pf, &cf), "%s: %s", tag, f.err);
	cr_expect(!strstr(f.err, "context full"), "%s: %s", tag, f.err);
	cr_expect_eq(cf, 0, "%s: the new chat had something cached", tag);
	cr_expect_eq(pf, p3, "%s: the new chat's prompt has %d tokens, the shifted one %d", tag, pf, p3);
	size_t la = strlen(r.out), lf = strlen(f.out);
	cr_expect(lf > 1 && la > lf && !strcmp(r.out + la - lf, f.out),
		  "%s: the answer after the shift is not the new chat's:\n[%s]\n[%s]", tag, r.out, f.out);
	run_free(&r);
	run_free(&f);
}

/* Items 1-3 of issue 39 on the default model (kjv-moe, whose 1,024
 * positions the old default -n filled): the default -n of --ctx 80 is 20;
 * the third turn drops the first and answers as a new chat would; and
 * session A, which then leaves no room for another answer of 20, says so
 * when it is resumed, before the first message, and drops its oldest turn. */
Test(chat_cli, context_full_drops_the_oldest_turn_as_a_new_chat_would)
{
	char m[PATH_MAX + 32];
	fc_container(m, sizeof m, "models/kjv-moe-hf", "");
	const char *args = "--ctx 80 --system 'Be brief.'";
	shift_as_a_new_chat(m, "shift", "And it came to pass\nWhat then?\nWhat next?\n", "What next?", args, 20);
	char a[256];
	snprintf(a, sizeof a, "%s --session A", args);
	struct run r = chat_pipe(m, "resume-full", "Tell me more\n", a);
	const char *said = strstr(r.err, "session \"A\" ("), *dropped = strstr(r.err, "context full: dropped the oldest");
	const char *first = strstr(r.err, " tok/s, first token");
	cr_expect(said && strstr(said, "no longer fits the context of 80 with room for an answer (20)"), "%s", r.err);
	cr_expect(said && dropped && first && said < dropped && dropped < first,
		  "the resume did not say so before the first answer:\n%s", r.err);
	int t, p, c;
	cr_assert(status_of(r.err, 0, &t, &p, &c), "%s", r.err);
	cr_expect_leq(p + 20, 80, "the resumed prompt (%d tokens) leaves no room", p);
	cJSON *j = session_read(m, "A");
	cr_expect_eq(cJSON_GetArraySize(messages_of(j)), 5);
	cr_expect_str_eq(content_of(j, 0), "Be brief.");
	cr_expect_str_eq(content_of(j, 1), "What next?");
	cr_expect_str_eq(content_of(j, 3), "Tell me more");
	cJSON_Delete(j);
	run_free(&r);
}

/* The same on Qwen3-Next, whose Gated DeltaNet state cannot be cut back to
 * the shared prefix: the shifted turn starts over (its checkpoint lies
 * beyond what is shared) and still answers as the new chat does. */
Test(chat_cli, context_full_on_a_recurrent_state)
{
	const struct family_chat *fc = NULL;
	for (size_t i = 0; i < FAMILY_CHATS; i++)
		if (!strcmp(family_chats[i].family, "qwen3_next"))
			fc = &family_chats[i];
	cr_assert_not_null(fc);
	char m[PATH_MAX + 64];
	family_model(ws, fc, m, sizeof m);
	shift_as_a_new_chat(m, "shift-gdn", "hello there\nwhat next\ntell me more\n", "tell me more",
			    "--ctx 96 -n 6 --system 'be brief'", 0);
}

/* colibri chat on a pseudo-terminal. */
struct tty {
	pid_t pid;
	int fd;
	char *buf;
	size_t len, cap;
};

static void tty_start(struct tty *t, const char *model, const char *args)
{
	memset(t, 0, sizeof *t);
	t->cap = 1 << 22;
	t->buf = calloc(1, t->cap);
	cr_assert_not_null(t->buf);
	struct winsize w = { .ws_row = 40, .ws_col = 200 };
	char cmd[8192];
	snprintf(cmd, sizeof cmd, "exec '%s' chat --model '%s' --threads 2 --temp 0 --no-pin %s", tu_colibri(), model,
		 args);
	t->pid = forkpty(&t->fd, NULL, NULL, &w);
	cr_assert_geq(t->pid, 0, "forkpty: %s", strerror(errno));
	if (t->pid == 0) {
		setenv("COLIBRI_CACHE_DIR", cache, 1);
		setenv("TERM", "xterm", 1);
		unsetenv("NO_COLOR");
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads what is there within timeout_s; false at end of output. */
static bool tty_read(struct tty *t, double timeout_s)
{
	struct pollfd p = { .fd = t->fd, .events = POLLIN };
	if (poll(&p, 1, (int)(timeout_s * 1000)) <= 0)
		return true;
	ssize_t n = read(t->fd, t->buf + t->len, t->cap - 1 - t->len);
	if (n <= 0)
		return false;
	t->len += (size_t)n;
	t->buf[t->len] = 0;
	return true;
}

/* Waits until the output holds needle n times. */
static bool tty_expect(struct tty *t, const char *needle, int n, double timeout_s)
{
	double end = now_s() + timeout_s;
	while (count(t->buf, needle) < n) {
		if (now_s() > end || !tty_read(t, 0.05))
			return count(t->buf, needle) >= n;
	}
	return true;
}

static void tty_send(struct tty *t, const char *s)
{
	cr_assert_eq(write(t->fd, s, strlen(s)), (ssize_t)strlen(s));
}

/* Waits for the k-th prompt: chat_input puts the terminal in libedit's
 * mode before it shows, so that what is sent next is read as keys, not
 * typed ahead into the kernel's line buffer (where Ctrl-D would be lost). */
static void tty_prompt(struct tty *t, int k)
{
	cr_assert(tty_expect(t, "\n> ", k, 60), "no prompt %d:\n%s", k, t->buf);
}

/* Reads to the end and returns the exit status (-1: killed after timeout_s). */
static int tty_end(struct tty *t, double timeout_s)
{
	double end = now_s() + timeout_s;
	while (now_s() < end && tty_read(t, 0.1))
		;
	/* The terminal closes before the process has quite exited. */
	int st = 0;
	pid_t w;
	while ((w = waitpid(t->pid, &st, WNOHANG)) == 0 && now_s() < end)
		usleep(10000);
	if (w == 0) {
		kill(t->pid, SIGKILL);
		waitpid(t->pid, &st, 0);
		st = -1;
	} else {
		st = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	}
	close(t->fd);
	no_sanitizer_report("terminal", t->buf);
	return st;
}

Test(chat_cli, terminal_line_editing_and_history)
{
	char m[PATH_MAX + 32];
	need_model("int4", m, sizeof m);
	struct tty t;
	tty_start(&t, m, "-n 4");
	cr_assert(tty_expect(&t, "colibri chat:", 1, 60), "no banner:\n%s", t.buf);
	/* "elp", Ctrl-A, ":h": only a line editor makes that ":help". */
	tty_prompt(&t, 1);
	tty_send(&t, "elp\001:h\r");
	cr_expect(tty_expect(&t, ":sessions    the saved sessions", 1, 30), "Ctrl-A did not edit the line:\n%s", t.buf);
	tty_prompt(&t, 2);
	tty_send(&t, ":stats\r");
	cr_expect(tty_expect(&t, "context positions", 1, 30), "%s", t.buf);
	tty_prompt(&t, 3);
	tty_send(&t, "\033[A\r"); /* Up: the last line again */
	cr_expect(tty_expect(&t, "context positions", 2, 30), "Up did not recall :stats:\n%s", t.buf);
	tty_prompt(&t, 4);
	tty_send(&t, "\004");
	cr_expect_eq(tty_end(&t, 60), 0, "%s", t.buf);
	free(t.buf);
}

Test(chat_cli, terminal_more_save_reset_resume)
{
	char m[PATH_MAX + 32];
	need_model("int4", m, sizeof m);
	struct tty t;
	tty_start(&t, m, "-n 4");
	tty_prompt(&t, 1);
	tty_send(&t, "Hello there\r");
	cr_assert(tty_expect(&t, "cut at -n", 1, 60), "%s", t.buf);
	tty_prompt(&t, 2);
	tty_send(&t, ":more\r");
	cr_assert(tty_expect(&t, "cut at -n", 2, 60), "%s", t.buf);
	int tk, pk, ck;
	cr_assert(status_of(t.buf, 1, &tk, &pk, &ck), "%s", t.buf);
	cr_expect_eq(ck, pk - 1, ":more prefilled more than the cut token: %d of %d cached", ck, pk);
	cr_expect(strstr(t.buf, "\033[2m["), "the status line is not dimmed on a terminal");
	tty_prompt(&t, 3);
	tty_send(&t, ":save S\r");
	cr_expect(tty_expect(&t, "saved as session \"S\"", 1, 30), "%s", t.buf);
	tty_prompt(&t, 4);
	tty_send(&t, ":reset\r");
	cr_expect(tty_expect(&t, "(a new conversation)", 1, 30), "%s", t.buf);
	tty_prompt(&t, 5);
	tty_send(&t, ":more\r");
	cr_expect(tty_expect(&t, "nothing to continue", 1, 30), "%s", t.buf);
	tty_prompt(&t, 6);
	tty_send(&t, "\004");
	cr_expect_eq(tty_end(&t, 60), 0, "%s", t.buf);
	free(t.buf);

	/* -n 4 and :more is -n 8 at once. */
	struct run r = chat_pipe(m, "eight", "Hello there\n", "-n 8 --session E");
	run_free(&r);
	cJSON *js = session_read(m, "S"), *je = session_read(m, "E");
	cr_expect_eq(cJSON_GetArraySize(messages_of(js)), 2);
	cr_expect_str_eq(content_of(js, 1), content_of(je, 1), ":more did not continue the answer");
	cJSON_Delete(js);
	cJSON_Delete(je);

	/* A new process resumes S without a prefill. */
	tty_start(&t, m, "-n 4 --session S");
	cr_expect(tty_expect(&t, "tokens restored (no prefill)", 1, 60), "%s", t.buf);
	tty_prompt(&t, 1);
	tty_send(&t, ":quit\r");
	cr_expect_eq(tty_end(&t, 60), 0, "%s", t.buf);
	free(t.buf);
}

Test(chat_cli, terminal_ctrl_c_stops_the_answer)
{
	char m[PATH_MAX + 32];
	need_model("int4", m, sizeof m);
	struct tty t;
	tty_start(&t, m, "-n 100000");
	tty_prompt(&t, 1);
	tty_send(&t, "Tell me a story\r");
	cr_assert(tty_expect(&t, "Tell me a story\r\n", 1, 30), "%s", t.buf);
	/* Some of the answer first, so that Ctrl-C stops an answer, not a prefill. */
	size_t echo = t.len;
	double end = now_s() + 60;
	while (t.len < echo + 24 && now_s() < end && tty_read(&t, 0.05))
		;
	tty_send(&t, "\003");
	cr_expect(tty_expect(&t, "; stopped]", 1, 60), "Ctrl-C did not stop the answer:\n%s", t.buf);
	tty_prompt(&t, 2);
	tty_send(&t, ":stats\r");
	cr_expect(tty_expect(&t, "context positions", 1, 30), "the chat did not go on:\n%s", t.buf);
	tty_prompt(&t, 3);
	tty_send(&t, ":quit\r");
	cr_expect_eq(tty_end(&t, 60), 0, "%s", t.buf);
	free(t.buf);
	cJSON *j = session_read(m, "last");
	cr_expect_eq(cJSON_GetArraySize(messages_of(j)), 2, "the stopped answer is kept");
	cr_expect_geq(cJSON_GetObjectItemCaseSensitive(j, "cut_token")->valueint, 0, "a stopped answer can go on");
	cJSON_Delete(j);
}
