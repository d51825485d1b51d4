/*
 * test_conversation — the engine side of `colibri chat`
 * (engine/decode/conversation.h, conversation_store.h):
 *  - the message list: NUL bytes become U+FFFD, :reset keeps a system
 *    prompt, JSON round trip, the hash sees every field;
 *  - conversation_prompt on the real Qwen3 template: the ids of the ChatML
 *    text written by hand from Qwen3's template (not from our output), with
 *    and without enable_thinking, and whether the prompt opens <think>;
 *  - conversation_fit (issue 39, item 2): the oldest turns go whole, the
 *    system prompt and the kept messages stay, as few as leave the room
 *    asked for, and the prompt is the template's text of the shorter
 *    conversation (written by hand); a prompt that cannot leave what it
 *    needs drops nothing; through a real forward (after the reload below),
 *    the turn after a drop has the logits, bit for bit, of a cold prefill
 *    of what remains, with the shared prefix taken from the cache;
 *  - sessions on disk through a real forward (qwen3_moe_tok, bf16): saved
 *    after a turn and loaded into a fresh process state, the next turn
 *    prefills only its new tokens and its logits are bit-identical, row for
 *    row, to those of the uninterrupted conversation and of a cold prefill;
 *  - refusals, each renaming the bad file aside and keeping nothing from
 *    it: a flipped byte in the conversation (checksum), a truncated file,
 *    another model's id, another format version; a refused state keeps the
 *    conversation; a state of another point (a crash between the two
 *    renames) is dropped without renaming; names are checked.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>

#include "base/error.h"
#include "engine/decode/batch.h"
#include "engine/decode/conversation.h"
#include "engine/decode/conversation_store.h"
#include "engine/decode/session.h"
#include "engine/text/prompt.h"
#include "engine/text/tokenizer.h"
#include "tests/fixture_cache.h"
#include "tests/test_util.h"

static char ws[PATH_MAX];
static char model[PATH_MAX + 32];

static void setup(void)
{
	tu_mkdtemp(ws, sizeof ws);
	char cache[PATH_MAX + 16];
	snprintf(cache, sizeof cache, "%s/cache", ws);
	setenv("COLIBRI_CACHE_DIR", cache, 1);
	error_clear();
}

static void teardown(void)
{
	tu_rmrf(ws);
}

TestSuite(conversation, .init = setup, .fini = teardown, .timeout = 240);

/* qwen3_moe_tok converted at bf16 (the build's shared container: the
 * sessions go to the cache folder, not into it), or the test skips with
 * the reason. */
static void need_model(void)
{
	char hf[PATH_MAX];
	snprintf(hf, sizeof hf, "%s/hf/qwen3_moe_tok/tokenizer.json", tu_fixtures());
	if (access(hf, R_OK) != 0)
		cr_skip_test("fixture hf/qwen3_moe_tok is missing: tools/node_modules lacks the Qwen3 tokenizer "
			     "(run ./setup.sh)");
	fc_container(model, sizeof model, "hf/qwen3_moe_tok", "--quant bf16");
}

Test(conversation, messages_json_hash)
{
	struct conversation c, d;
	conversation_init(&c);
	conversation_init(&d);
	cr_assert_eq(conversation_add(&c, "system", "Be brief.", 9), 0);
	cr_assert_eq(conversation_add(&c, "user", "a\0b", 3), 0);
	cr_expect_str_eq(c.msgs[1].content, "a\xef\xbf\xbd" "b", "a NUL byte becomes U+FFFD");
	cr_expect_eq(c.msgs[1].len, 5);
	cr_assert_eq(conversation_add(&c, "assistant", "Hi", 2), 0);
	cr_assert_eq(conversation_append(&c, " there\0", 7), 0);
	cr_expect_str_eq(c.msgs[2].content, "Hi there\xef\xbf\xbd");
	cr_expect_eq(conversation_add(&c, "tool", "x", 1), -EINVAL);
	cr_expect(strstr(error_message(), "tool"), "%s", error_message());
	c.cut_token = 77;
	cr_expect_eq(conversation_count(&c, "user"), 1);

	cJSON *j = conversation_to_json(&c);
	cr_assert_not_null(j);
	char *text = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	cJSON *back = cJSON_Parse(text);
	free(text);
	cr_assert_eq(conversation_from_json(&d, back, "t.json"), 0, "%s", error_message());
	cJSON_Delete(back);
	d.cut_token = 77;
	cr_expect_eq(d.n, 3);
	for (size_t i = 0; i < d.n; i++) {
		cr_expect_str_eq(d.msgs[i].role, c.msgs[i].role);
		cr_expect_str_eq(d.msgs[i].content, c.msgs[i].content);
	}
	uint64_t h = conversation_hash(&c, 5);
	cr_expect_eq(conversation_hash(&d, 5), h, "the same conversation, the same hash");
	cr_expect_neq(conversation_hash(&c, 6), h, "the seed counts");
	d.cut_token = 78;
	cr_expect_neq(conversation_hash(&d, 5), h, "cut_token counts");
	d.cut_token = 77;
	d.msgs[2].content[0] = 'h';
	cr_expect_neq(conversation_hash(&d, 5), h, "a content byte counts");

	/* Refused JSON: not an array, a message without content. */
	conversation_free(&d);
	error_clear();
	cJSON *bad = cJSON_Parse("[{\"role\": \"user\"}]");
	cr_expect_eq(conversation_from_json(&d, bad, "b.json"), -EINVAL);
	cr_expect(strstr(error_message(), "b.json") && strstr(error_message(), "message 0"), "%s", error_message());
	cJSON_Delete(bad);
	conversation_free(&d);

	conversation_clear(&c, true);
	cr_expect_eq(c.n, 1, ":reset keeps the system prompt");
	cr_expect_eq(c.cut_token, -1);
	conversation_clear(&c, false);
	cr_expect_eq(c.n, 0);
	conversation_free(&c);
}

/* The ids of text, for comparing prompts. */
static void expect_ids(const struct tokenizer *tok, const int32_t *ids, int n, const char *text)
{
	int32_t *want = NULL;
	size_t nw = 0;
	cr_assert_eq(tokenizer_encode(tok, text, strlen(text), &want, &nw), 0);
	cr_expect_eq((size_t)n, nw, "%d ids, the hand-written prompt has %zu", n, nw);
	cr_expect_eq(memcmp(ids, want, nw * sizeof *ids), 0, "other ids than the hand-written prompt's");
	free(want);
}

Test(conversation, prompt_is_the_qwen3_template)
{
	need_model();
	struct tokenizer *tok = NULL;
	cr_assert_eq(prompt_tokenizer_load(&tok, model), 0, "%s", error_message());
	struct conversation c;
	conversation_init(&c);
	cr_assert_eq(conversation_add(&c, "system", "Be brief.", 9), 0);
	cr_assert_eq(conversation_add(&c, "user", "Hello", 5), 0);
	cr_assert_eq(conversation_add(&c, "assistant", "<think>\nhm\n</think>\n\nHi!", 24), 0);
	cr_assert_eq(conversation_add(&c, "user", "Again", 5), 0);
	int32_t *ids = NULL;
	int n = 0;
	bool thinking = true;
	/* Qwen3's template drops the reasoning of turns before the last query. */
	cr_assert_eq(conversation_prompt(&c, c.n, tok, "qwen3_moe", NULL, &ids, &n, &thinking, NULL), 0, "%s",
		     error_message());
	expect_ids(tok, ids, n,
		   "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
		   "<|im_start|>assistant\nHi!<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n");
	cr_expect_not(thinking, "Qwen3's generation prompt leaves <think> to the model");
	free(ids);
	struct conversation_prompt_options off = { .no_thinking = true };
	cr_assert_eq(conversation_prompt(&c, 2, tok, "qwen3_moe", &off, &ids, &n, &thinking, NULL), 0);
	expect_ids(tok, ids, n,
		   "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
		   "<|im_start|>assistant\n<think>\n\n</think>\n\n");
	cr_expect_not(thinking, "enable_thinking=false closes the block");
	free(ids);
	conversation_free(&c);
	tokenizer_free(tok);
}

/* ids of text, in a malloc'd array; *n their count. */
static int32_t *ids_of(const struct tokenizer *tok, const char *text, int *n)
{
	int32_t *ids = NULL;
	size_t nv = 0;
	cr_assert_eq(tokenizer_encode(tok, text, strlen(text), &ids, &nv), 0);
	*n = (int)nv;
	return ids;
}

/* [system, One, Two, Three, Four, Five]: two turns and a question. */
static void five(struct conversation *c)
{
	static const char *const m[][2] = { { "system", "Be brief." }, { "user", "One" },   { "assistant", "Two" },
					    { "user", "Three" },      { "assistant", "Four" }, { "user", "Five" } };
	conversation_init(c);
	for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
		cr_assert_eq(conversation_add(c, m[i][0], m[i][1], strlen(m[i][1])), 0);
}

#define SYS "<|im_start|>system\nBe brief.<|im_end|>\n"
#define TURN(u, a) "<|im_start|>user\n" u "<|im_end|>\n<|im_start|>assistant\n" a "<|im_end|>\n"
#define ASK(u) "<|im_start|>user\n" u "<|im_end|>\n<|im_start|>assistant\n"

Test(conversation, fit_drops_the_oldest_turns)
{
	need_model();
	struct tokenizer *tok = NULL;
	cr_assert_eq(prompt_tokenizer_load(&tok, model), 0, "%s", error_message());
	int n_all, n_one, n_two;
	free(ids_of(tok, SYS TURN("One", "Two") TURN("Three", "Four") ASK("Five"), &n_all));
	free(ids_of(tok, SYS TURN("Three", "Four") ASK("Five"), &n_one));
	free(ids_of(tok, SYS ASK("Five"), &n_two));
	struct conversation c;
	int32_t *ids = NULL;
	int n = 0;
	/* Room enough: nothing goes. */
	five(&c);
	struct conversation_fit f = { .ctx = n_all + 8, .want = 8, .need = 1, .keep = 1 };
	cr_assert_eq(conversation_fit(&c, &f, tok, "qwen3_moe", NULL, &ids, &n, NULL, NULL), 0, "%s", error_message());
	cr_expect(f.dropped == 0 && f.freed == 0 && c.n == 6);
	expect_ids(tok, ids, n, SYS TURN("One", "Two") TURN("Three", "Four") ASK("Five"));
	free(ids);
	/* One position short: the oldest turn goes, whole. */
	f.ctx = n_all + 7;
	cr_assert_eq(conversation_fit(&c, &f, tok, "qwen3_moe", NULL, &ids, &n, NULL, NULL), 0, "%s", error_message());
	cr_expect_eq(f.dropped, 1);
	cr_expect_eq(f.freed, n_all - n_one);
	cr_expect(c.n == 4 && !strcmp(c.msgs[0].content, "Be brief.") && !strcmp(c.msgs[1].content, "Three"));
	expect_ids(tok, ids, n, SYS TURN("Three", "Four") ASK("Five"));
	free(ids);
	conversation_free(&c);
	/* Room only without both: both go, in one call. */
	five(&c);
	f.ctx = n_two + 8;
	cr_assert_eq(conversation_fit(&c, &f, tok, "qwen3_moe", NULL, &ids, &n, NULL, NULL), 0, "%s", error_message());
	cr_expect(f.dropped == 2 && f.freed == n_all - n_two && c.n == 2);
	expect_ids(tok, ids, n, SYS ASK("Five"));
	free(ids);
	conversation_free(&c);
	/* What is wanted cannot be had, what is needed can: all that can go goes. */
	five(&c);
	f.ctx = n_two + 1;
	cr_assert_eq(conversation_fit(&c, &f, tok, "qwen3_moe", NULL, &ids, &n, NULL, NULL), 0, "%s", error_message());
	cr_expect(f.dropped == 2 && c.n == 2);
	free(ids);
	conversation_free(&c);
	/* Not even what is needed: nothing goes, the prompt's length is said. */
	five(&c);
	f.ctx = n_two;
	cr_expect_eq(conversation_fit(&c, &f, tok, "qwen3_moe", NULL, &ids, &n, NULL, NULL), -ENOSPC);
	cr_expect(ids == NULL && n == n_two && c.n == 6 && f.dropped == 0, "%d tokens, %zu messages", n, c.n);
	error_clear();
	/* A cut answer that goes on (:more): left out of the prompt, kept with
	 * its question and its cut token; the turn before goes. */
	cr_assert_eq(conversation_add(&c, "assistant", "Si", 2), 0);
	c.cut_token = 77;
	int n_head;
	free(ids_of(tok, SYS TURN("Three", "Four") ASK("Five"), &n_head));
	f = (struct conversation_fit){ .ctx = n_head + 10, .want = 10, .need = 3, .keep = 2, .leave_out = 1 };
	cr_assert_eq(conversation_fit(&c, &f, tok, "qwen3_moe", NULL, &ids, &n, NULL, NULL), 0, "%s", error_message());
	cr_expect(f.dropped == 1 && c.n == 5 && c.cut_token == 77 && !strcmp(c.msgs[4].content, "Si"));
	expect_ids(tok, ids, n, SYS TURN("Three", "Four") ASK("Five"));
	free(ids);
	/* The last two are kept: the next turn cannot go whole. */
	cr_expect_eq(conversation_drop_turn(&c, 2), 2);
	cr_expect_eq(conversation_drop_turn(&c, 2), 0, "a turn went into the kept messages");
	cr_expect_eq(c.n, 3);
	/* Without a system prompt, an answer first goes alone; the last
	 * message going takes the cut token with it. */
	conversation_free(&c);
	conversation_init(&c);
	cr_assert_eq(conversation_add(&c, "assistant", "Hi", 2), 0);
	cr_assert_eq(conversation_add(&c, "user", "Hello", 5), 0);
	cr_assert_eq(conversation_add(&c, "assistant", "Yes", 3), 0);
	c.cut_token = 5;
	cr_expect_eq(conversation_drop_turn(&c, 0), 1);
	cr_expect(c.n == 2 && !strcmp(c.msgs[0].content, "Hello") && c.cut_token == 5);
	cr_expect_eq(conversation_drop_turn(&c, 0), 2);
	cr_expect(c.n == 0 && c.cut_token == -1);
	conversation_free(&c);
	tokenizer_free(tok);
}

#define ROWS_MAX 8

/* The logits of every answer token, and its ids. */
struct rec {
	struct batch *b;
	int n;
	int32_t id[ROWS_MAX];
	float *rows;                 /* [ROWS_MAX, vocab] */
};

static void on_token(void *ctx, int slot, const struct batch_token *t, enum batch_finish fin)
{
	struct rec *r = ctx;
	if (!t || t->eos || r->n >= ROWS_MAX)
		return;
	size_t V = (size_t)r->b->f->m->cfg.vocab;
	memcpy(r->rows + (size_t)r->n * V, r->b->logits + (size_t)slot * V, V * sizeof(float));
	r->id[r->n++] = t->id;
}

struct rig {
	struct session s;
	struct tokenizer *tok;
	struct batch b;
	struct rec r;
	struct conversation_store st;
};

static void rig_open(struct rig *g)
{
	memset(g, 0, sizeof *g);
	struct session_options o;
	session_options_default(&o);
	o.model_dir = model;
	o.threads = 2;
	o.no_pin = true;
	cr_assert_eq(prompt_tokenizer_load(&g->tok, model), 0, "%s", error_message());
	cr_assert_eq(session_open(&g->s, &o, 256), 0, "%s", error_message());
	cr_assert_eq(batch_init(&g->b, &g->s.fwd, g->tok, on_token, &g->r), 0, "%s", error_message());
	g->r.b = &g->b;
	g->r.rows = malloc(ROWS_MAX * (size_t)g->s.model.cfg.vocab * sizeof(float));
	cr_assert_not_null(g->r.rows);
	cr_assert_eq(conversation_store_init(&g->st, manifest_model_id(&g->s.model.man), model), 0);
}

static void rig_close(struct rig *g)
{
	free(g->r.rows);
	batch_free(&g->b);
	session_close(&g->s);
	tokenizer_free(g->tok);
}

/* One greedy answer of ROWS_MAX tokens to the conversation; returns the
 * tokens the slot had cached. The answer is appended to c. */
static int answer(struct rig *g, struct conversation *c)
{
	int32_t *ids = NULL;
	int n = 0, cached = -1;
	cr_assert_eq(conversation_prompt(c, c->n, g->tok, "qwen3_moe", NULL, &ids, &n, NULL, NULL), 0, "%s", error_message());
	struct batch_params p = { .n_predict = ROWS_MAX, .top_p = 1, .logprobs = true };
	g->r.n = 0;
	cr_assert_eq(batch_start(&g->b, 0, ids, n, &p, NULL, &cached), 0, "%s", error_message());
	int rc;
	while ((rc = batch_step(&g->b)) > 0)
		;
	cr_assert_geq(rc, 0, "%s", error_message());
	free(ids);
	char *text = NULL;
	size_t len = 0;
	cr_assert_eq(tokenizer_decode(g->tok, g->r.id, (size_t)g->r.n, &text, &len), 0);
	cr_assert_eq(conversation_add(c, "assistant", text, len), 0);
	free(text);
	c->cut_token = g->r.id[g->r.n - 1];
	return cached;
}

Test(conversation, resume_gives_bit_identical_logits)
{
	need_model();
	struct rig g;
	rig_open(&g);
	struct conversation c;
	conversation_init(&c);
	cr_assert_eq(conversation_add(&c, "user", "Hello there", 11), 0);
	cr_expect_eq(answer(&g, &c), 0);
	int32_t cut = c.cut_token;
	cr_assert_eq(conversation_store_save(&g.st, "s1", &c, &g.b, 0), 0, "%s", error_message());
	int held = g.b.slots[0].n_tokens;
	cr_assert_gt(held, 0);
	/* Uninterrupted: the second turn. */
	cr_assert_eq(conversation_add(&c, "user", "And then?", 9), 0);
	int warm_cached = answer(&g, &c);
	cr_expect_gt(warm_cached, 0, "the second turn reuses the first");
	size_t V = (size_t)g.s.model.cfg.vocab;
	int n_rows = g.r.n;
	float *want = malloc((size_t)ROWS_MAX * V * sizeof(float));
	memcpy(want, g.r.rows, (size_t)n_rows * V * sizeof(float));
	char *want_text = strdup(c.msgs[c.n - 1].content);
	/* A cold prefill of the same conversation computes the same bits. */
	seq_state_reset(&g.s.fwd.seqs[0]);
	conversation_pop(&c);
	cr_expect_eq(answer(&g, &c), 0);
	cr_expect_eq(g.r.n, n_rows);
	cr_expect_eq(memcmp(g.r.rows, want, (size_t)n_rows * V * sizeof(float)), 0, "a cold prefill changed the logits");
	rig_close(&g);
	conversation_free(&c);

	/* A restart: the session loads into a fresh forward. */
	rig_open(&g);
	struct conversation_load r;
	cr_assert_eq(conversation_store_load(&g.st, "s1", &c, &g.b, 0, &r), 0, "%s", error_message());
	cr_expect(r.found && !r.refused && !r.state_refused && !r.state_stale);
	cr_expect_eq(r.restored, held, "%d tokens restored, %d saved", r.restored, held);
	cr_expect_eq(c.n, 2);
	cr_expect_eq(c.cut_token, cut, "the cut answer's last token comes back");
	cr_assert_eq(conversation_add(&c, "user", "And then?", 9), 0);
	cr_expect_eq(answer(&g, &c), warm_cached, "after a reload the turn prefills only its new tokens");
	cr_expect_eq(g.r.n, n_rows);
	cr_expect_eq(memcmp(g.r.rows, want, (size_t)n_rows * V * sizeof(float)), 0,
		     "logits differ after a reload");
	cr_expect_str_eq(c.msgs[c.n - 1].content, want_text);
	free(want_text);

	/* A third question whose prompt leaves no room for its answer: the
	 * oldest turn goes, and the warm slot, which holds both turns, answers
	 * with the logits of a cold prefill of what remains, taking only the
	 * shared prefix from its cache. */
	cr_assert_eq(conversation_add(&c, "user", "Tell me more", 12), 0);
	int32_t *ids = NULL;
	int n = 0;
	cr_assert_eq(conversation_prompt(&c, c.n, g.tok, "qwen3_moe", NULL, &ids, &n, NULL, NULL), 0);
	free(ids);
	struct conversation_fit f = { .ctx = n - 1 + ROWS_MAX, .want = ROWS_MAX, .need = 1, .keep = 1 };
	cr_assert_eq(conversation_fit(&c, &f, g.tok, "qwen3_moe", NULL, &ids, &n, NULL, NULL), 0, "%s", error_message());
	free(ids);
	cr_assert(f.dropped == 1 && c.n == 3, "%d turns dropped, %zu messages left", f.dropped, c.n);
	int cached = answer(&g, &c);
	cr_expect(cached > 0 && cached < n, "%d of %d prompt tokens cached after the drop", cached, n);
	n_rows = g.r.n;
	memcpy(want, g.r.rows, (size_t)n_rows * V * sizeof(float));
	seq_state_reset(&g.s.fwd.seqs[0]);
	conversation_pop(&c);
	cr_expect_eq(answer(&g, &c), 0);
	cr_expect_eq(g.r.n, n_rows);
	cr_expect_eq(memcmp(g.r.rows, want, (size_t)n_rows * V * sizeof(float)), 0,
		     "the turn after the drop differs from a cold prefill of what remains");
	free(want);
	conversation_free(&c);
	rig_close(&g);
}

/* Saves a two-message session `name` and returns the paths of its files. */
static void save_one(struct rig *g, const char *name, char *json, char *state, size_t n)
{
	struct conversation c;
	conversation_init(&c);
	cr_assert_eq(conversation_add(&c, "user", "Hello", 5), 0);
	answer(g, &c);
	cr_assert_eq(conversation_store_save(&g->st, name, &c, &g->b, 0), 0, "%s", error_message());
	conversation_free(&c);
	conversation_store_path(&g->st, name, "json", json, n);
	conversation_store_path(&g->st, name, "state", state, n);
}

/* Loads name expecting the conversation refused with `why` and the file aside. */
static void expect_refused(struct rig *g, const char *name, const char *json, const char *why, const char *bytes,
			   size_t len)
{
	struct conversation c;
	conversation_init(&c);
	struct conversation_load r;
	cr_assert_eq(conversation_store_load(&g->st, name, &c, &g->b, 0, &r), 0, "%s", error_message());
	cr_expect(r.found && r.refused, "%s: not refused", name);
	cr_expect(strstr(r.message, why) && strstr(r.message, json), "%s: \"%s\" lacks \"%s\"", name, r.message, why);
	cr_expect_eq(c.n, 0, "nothing of a refused file is kept");
	cr_expect_neq(access(json, F_OK), 0, "the refused file is still in place");
	char want[PATH_MAX + 32];
	snprintf(want, sizeof want, "%s.refused", json);
	cr_expect_str_eq(r.aside, want);
	size_t got_len = 0;
	char *got = tu_read(r.aside, &got_len);
	cr_expect(got && got_len == len && !memcmp(got, bytes, len), "the file aside is not the refused bytes");
	free(got);
	conversation_free(&c);
}

Test(conversation, refusals)
{
	need_model();
	struct rig g;
	rig_open(&g);
	char json[PATH_MAX + 80], state[PATH_MAX + 80];
	size_t len = 0;

	/* A flipped byte inside a message: still JSON, the checksum fails. */
	save_one(&g, "flip", json, state, sizeof json);
	char *bytes = tu_read(json, &len);
	char *at = strstr(bytes, "Hello");
	cr_assert_not_null(at);
	at[0] = 'J';
	cr_assert_eq(tu_write(json, bytes, len), 0);
	expect_refused(&g, "flip", json, "corrupt (checksum mismatch)", bytes, len);
	char aside[PATH_MAX + 96];
	snprintf(aside, sizeof aside, "%s.refused", state);
	cr_expect_eq(access(aside, F_OK), 0, "the state of a refused conversation goes aside too");
	free(bytes);
	/* A second refusal of the same name does not overwrite the first. */
	save_one(&g, "flip", json, state, sizeof json);
	bytes = tu_read(json, &len);
	cr_assert_eq(tu_write(json, bytes, len / 2), 0);
	struct conversation c;
	conversation_init(&c);
	struct conversation_load r;
	cr_assert_eq(conversation_store_load(&g.st, "flip", &c, &g.b, 0, &r), 0);
	cr_expect(r.refused && strstr(r.aside, ".refused.2"), "%s", r.aside);
	cr_expect(strstr(r.message, "truncated or not JSON"), "%s", r.message);
	free(bytes);

	/* Another model, another version: edited and re-checksummed would
	 * still be refused by the id; here the fields alone are changed. */
	save_one(&g, "other", json, state, sizeof json);
	bytes = tu_read(json, &len);
	char id[20];
	snprintf(id, sizeof id, "\"%016" PRIx64 "\"", g.st.model_id);
	at = strstr(bytes, id);
	cr_assert_not_null(at);
	at[1] = at[1] == '0' ? '1' : '0';
	cr_assert_eq(tu_write(json, bytes, len), 0);
	expect_refused(&g, "other", json, "belongs to another model", bytes, len);
	free(bytes);
	save_one(&g, "ver", json, state, sizeof json);
	bytes = tu_read(json, &len);
	at = strstr(bytes, "\"version\":\t1");
	cr_assert_not_null(at, "%s", bytes);
	at[11] = '7';
	cr_assert_eq(tu_write(json, bytes, len), 0);
	expect_refused(&g, "ver", json, "format version 7", bytes, len);
	free(bytes);

	/* A refused state keeps the conversation. */
	save_one(&g, "st", json, state, sizeof json);
	bytes = tu_read(state, &len);
	bytes[len - 3] ^= 1;
	cr_assert_eq(tu_write(state, bytes, len), 0);
	free(bytes);
	conversation_free(&c);
	cr_assert_eq(conversation_store_load(&g.st, "st", &c, &g.b, 0, &r), 0);
	cr_expect(r.found && !r.refused && r.state_refused && r.restored == 0);
	cr_expect_eq(c.n, 2, "the conversation is kept");
	cr_expect(strstr(r.message, state), "%s", r.message);
	snprintf(aside, sizeof aside, "%s.refused", state);
	cr_expect_str_eq(r.state_aside, aside);
	cr_expect_eq(g.b.slots[0].n_tokens, 0);
	cr_expect_eq(g.s.fwd.seqs[0].pos, 0);

	/* A state of another point of the conversation: the JSON of an older
	 * save beside the state of a newer one. */
	save_one(&g, "stale", json, state, sizeof json);
	bytes = tu_read(json, &len);
	cr_assert_eq(conversation_add(&c, "user", "More", 4), 0);
	answer(&g, &c);
	cr_assert_eq(conversation_store_save(&g.st, "stale", &c, &g.b, 0), 0);
	cr_assert_eq(tu_write(json, bytes, len), 0);
	free(bytes);
	conversation_free(&c);
	cr_assert_eq(conversation_store_load(&g.st, "stale", &c, &g.b, 0, &r), 0);
	cr_expect(r.found && !r.refused && r.state_stale && r.restored == 0);
	cr_expect_eq(c.n, 2);
	cr_expect_eq(access(state, F_OK), 0, "a stale state is not bad: it stays to be overwritten");
	conversation_free(&c);

	/* Absent: nothing found, nothing changed. */
	cr_assert_eq(conversation_store_load(&g.st, "none", &c, &g.b, 0, &r), 0);
	cr_expect(!r.found && c.n == 0);
	/* Names. */
	cr_expect_eq(conversation_store_name_check("ok-name_1.v2"), 0);
	cr_expect_eq(conversation_store_name_check("../x"), -EINVAL);
	cr_expect_eq(conversation_store_name_check(".hidden"), -EINVAL);
	cr_expect_eq(conversation_store_name_check(""), -EINVAL);
	cr_expect_eq(conversation_store_save(&g.st, "a/b", &c, &g.b, 0), -EINVAL);
	char **names = NULL;
	int n = 0;
	cr_assert_eq(conversation_store_list(&g.st, &names, &n), 0);
	cr_expect_eq(n, 2, "st and stale are the sessions left (%d)", n);
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	rig_close(&g);
}
