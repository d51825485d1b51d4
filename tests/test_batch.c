/*
 * test_batch — many sequences decoded together (engine/decode/batch.h), on
 * real fixtures (qwen3_moe: GQA, dense and MoE layers; deepseek_v32: MLA +
 * DSA indexer; glm_moe_dsa: a shared indexer layer; qwen3_5_moe and
 * qwen3_next: Gated DeltaNet states per slot; inkling_bf16: short
 * convolution histories and K/V per slot):
 *  - each slot's tokens and log probabilities are bit-identical whether it
 *    runs alone or beside other slots started at other steps (greedy and
 *    seeded sampling, penalties, top logprobs);
 *  - a greedy slot gives the ids `colibri run --temp 0` gives;
 *  - the prompt cache: a request extending what a slot holds reuses it
 *    (cached tokens reported) with the same result as a fresh slot; on a
 *    hybrid (Gated DeltaNet), through the checkpoint at checkpoint_at;
 *  - a slot saved to a session file and loaded into a fresh forward
 *    continues bit-identically; foreign, truncated, corrupted files and
 *    ones with bytes appended are refused naming the file, leaving the
 *    slot empty;
 *  - limits: n_predict, a full context (finish reason length), n_predict 0,
 *    a prompt longer than the context refused.
 */
#include <criterion/criterion.h>
#include <errno.h>

#include "base/error.h"
#include "engine/decode/batch.h"
#include "engine/decode/session.h"
#include "tests/cli_util.h"
#include "tests/fixture_cache.h"

static char ws[PATH_MAX];

static void setup(void)
{
	tu_mkdtemp(ws, sizeof ws);
	error_clear();
}

static void teardown(void)
{
	tu_rmrf(ws);
}

TestSuite(batch, .init = setup, .fini = teardown, .timeout = 240);

#define MAX_OUT 64

/* What each slot produced. */
struct record {
	int n[4];
	int32_t id[4][MAX_OUT];
	float lp[4][MAX_OUT];
	float top[4][MAX_OUT];
	enum batch_finish fin[4];
};

static void on_token(void *ctx, int slot, const struct batch_token *t, enum batch_finish fin)
{
	struct record *r = ctx;
	if (t && !t->eos && r->n[slot] < MAX_OUT) {
		r->id[slot][r->n[slot]] = t->id;
		r->lp[slot][r->n[slot]] = t->logprob;
		r->top[slot][r->n[slot]] = t->n_top ? t->top_logprob[t->n_top - 1] : 0;
		r->n[slot]++;
	}
	r->fin[slot] = fin;
}

struct rig {
	struct session s;
	struct forward f;
	struct batch b;
	struct record r;
	char model[PATH_MAX + 32];
};

/* Opens fixture name converted at bf16 (the build's shared container: the
 * sessions go to ws, nothing is written into it), and a forward of 3
 * sequences of ctx positions with steps of 8 rows. */
static void rig_open(struct rig *g, const char *name, int ctx)
{
	memset(g, 0, sizeof *g);
	char src[256];
	snprintf(src, sizeof src, "hf/%s", name);
	fc_container(g->model, sizeof g->model, src, "--quant bf16");
	char cache[PATH_MAX + 16];
	snprintf(cache, sizeof cache, "%s/cache", ws);
	setenv("COLIBRI_CACHE_DIR", cache, 1);
	struct session_options o;
	session_options_default(&o);
	o.model_dir = g->model;
	o.threads = 2;
	o.no_pin = true;
	cr_assert_eq(session_open(&g->s, &o, 8), 0, "%s", error_message());
	cr_assert_eq(forward_init(&g->f, &g->s.model, g->s.pool, ctx, 8, 3), 0, "%s", error_message());
	cr_assert_eq(batch_init(&g->b, &g->f, NULL, on_token, &g->r), 0, "%s", error_message());
}

static void rig_close(struct rig *g)
{
	batch_free(&g->b);
	forward_free(&g->f);
	session_close(&g->s);
}

static void run_to_end(struct batch *b)
{
	int rc;
	while ((rc = batch_step(b)) > 0)
		;
	cr_assert_geq(rc, 0, "batch_step: %s", error_message());
}

static const int32_t prompts[3][9] = { { 5, 6, 7, 8, 9 }, { 40, 41, 42, 43, 44, 45, 46, 47, 48 }, { 300, 301, 302 } };
static const int lens[3] = { 5, 9, 3 };

static struct batch_params params_of(int slot)
{
	struct batch_params p = { .n_predict = 12, .top_p = 1, .logprobs = true, .top_logprobs = 3 };
	if (slot == 1) {
		p.temp = 0.8f;
		p.top_k = 40;
		p.top_p = 0.9f;
		p.seed = 7;
	}
	if (slot == 2) {
		p.presence_penalty = 0.5f;
		p.frequency_penalty = 0.25f;
	}
	return p;
}

static void check_alone_vs_together(const char *name)
{
	struct rig g;
	rig_open(&g, name, 40);
	struct record alone;
	for (int i = 0; i < 3; i++) {
		struct batch_params p = params_of(i);
		cr_assert_eq(batch_start(&g.b, i, prompts[i], lens[i], &p, NULL, NULL), 0, "%s", error_message());
		run_to_end(&g.b);
	}
	alone = g.r;
	memset(&g.r, 0, sizeof g.r);
	for (int i = 0; i < 3; i++)
		seq_state_reset(forward_seq(&g.f, i));
	/* Together, slot 2 joining after two steps, while the others decode. */
	for (int i = 0; i < 2; i++) {
		struct batch_params p = params_of(i);
		cr_assert_eq(batch_start(&g.b, i, prompts[i], lens[i], &p, NULL, NULL), 0);
	}
	cr_assert_gt(batch_step(&g.b), 0);
	cr_assert_gt(batch_step(&g.b), 0);
	struct batch_params p2 = params_of(2);
	cr_assert_eq(batch_start(&g.b, 2, prompts[2], lens[2], &p2, NULL, NULL), 0);
	run_to_end(&g.b);
	for (int i = 0; i < 3; i++) {
		cr_expect_eq(g.r.n[i], alone.n[i], "%s slot %d: %d tokens together, %d alone", name, i, g.r.n[i], alone.n[i]);
		cr_expect_eq(memcmp(g.r.id[i], alone.id[i], sizeof alone.id[i]), 0, "%s slot %d: other tokens together", name,
			     i);
		cr_expect_eq(memcmp(g.r.lp[i], alone.lp[i], sizeof alone.lp[i]), 0, "%s slot %d: other logprobs", name, i);
		cr_expect_eq(memcmp(g.r.top[i], alone.top[i], sizeof alone.top[i]), 0, "%s slot %d: other top logprobs",
			     name, i);
		cr_expect_eq(g.r.fin[i], alone.fin[i]);
	}
	cr_expect_eq(alone.fin[0], BATCH_LENGTH);
	cr_expect_eq(alone.n[0], 12);
	for (int k = 0; k < alone.n[0]; k++)
		cr_expect(alone.lp[0][k] <= 0 && alone.top[0][k] <= alone.lp[0][k] + 1e-6f, "greedy logprobs");

	/* The greedy slot agrees with colibri run. */
	char out[PATH_MAX + 32];
	snprintf(out, sizeof out, "%s/run.txt", ws);
	cr_assert_eq(cli_run(ws, out, "run --model '%s' --tokens 5,6,7,8,9 -n 12 --temp 0 --no-pin --draft 0", g.model),
		     0);
	char *ids = tu_read(out, NULL), want[1024] = "";
	for (int k = 0; k < alone.n[0]; k++)
		snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", k ? "," : "", alone.id[0][k]);
	cr_assert(ids);
	ids[strcspn(ids, "\n")] = 0;
	cr_expect_str_eq(ids, want, "%s: colibri run gives other ids", name);
	free(ids);
	rig_close(&g);
}

Test(batch, gqa_moe_alone_equals_together) { check_alone_vs_together("qwen3_moe"); }
Test(batch, mla_dsa_alone_equals_together) { check_alone_vs_together("deepseek_v32"); }
Test(batch, glm5_alone_equals_together) { check_alone_vs_together("glm_moe_dsa"); }
Test(batch, gdn_alone_equals_together) { check_alone_vs_together("qwen3_5_moe"); }
Test(batch, gdn_grouped_alone_equals_together) { check_alone_vs_together("qwen3_next"); }
Test(batch, v4_alone_equals_together) { check_alone_vs_together("deepseek_v4"); }
Test(batch, inkling_alone_equals_together) { check_alone_vs_together("inkling_bf16"); }

/* The history of slot 0 after one request, plus three tokens. */
static int extended(const struct batch *b, int32_t *out)
{
	const struct batch_slot *s = &b->slots[0];
	memcpy(out, s->tokens, (size_t)s->n_tokens * sizeof *out);
	int n = s->n_tokens;
	out[n++] = 11;
	out[n++] = 12;
	out[n++] = 13;
	return n;
}

/* Runs prompt in slot 0, expecting `want_cached` tokens of it cached, then
 * in slot 1 from scratch: the same tokens and logprobs. Returns slot 0's
 * record. */
static struct record cached_equals_fresh(struct rig *g, const int32_t *prompt, int n, const struct batch_params *p,
					 int want_cached)
{
	int cached = -1;
	memset(&g->r, 0, sizeof g->r);
	cr_assert_eq(batch_start(&g->b, 0, prompt, n, p, NULL, &cached), 0);
	cr_expect_eq(cached, want_cached);
	run_to_end(&g->b);
	struct record warm = g->r;
	memset(&g->r, 0, sizeof g->r);
	cr_assert_eq(batch_start(&g->b, 1, prompt, n, p, NULL, &cached), 0);
	cr_expect_eq(cached, 0);
	run_to_end(&g->b);
	cr_expect_eq(g->r.n[1], warm.n[0]);
	cr_expect_eq(memcmp(g->r.id[1], warm.id[0], sizeof warm.id[0]), 0, "the cached prefix changed the tokens");
	cr_expect_eq(memcmp(g->r.lp[1], warm.lp[0], sizeof warm.lp[0]), 0, "the cached prefix changed the logprobs");
	return warm;
}

/* A recurrent state cannot be cut back, so the prompt cache of a hybrid
 * goes back to the checkpoint kept at checkpoint_at (the history before a
 * generation prompt): a next request sharing the tokens up to there but
 * not the ones after prefills only from there, also after a save and load,
 * with the tokens and logprobs of a fresh slot; one diverging before it
 * starts over. */
Test(batch, gdn_prompt_cache_checkpoint)
{
	struct rig g;
	rig_open(&g, "qwen3_5_moe", 40);
	struct batch_params p = params_of(0);
	p.checkpoint_at = 3;
	cr_assert_eq(batch_start(&g.b, 0, prompts[0], lens[0], &p, NULL, NULL), 0);
	run_to_end(&g.b);
	cr_expect_eq(forward_seq(&g.f, 0)->ckpt_pos, 3, "the checkpoint is where it was asked");
	char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/gdn.session", ws);
	cr_assert_eq(batch_save(&g.b, 0, 99, path), 0, "%s", error_message());
	/* The same first 4 tokens, then others: back to position 3. */
	const int32_t next[] = { 5, 6, 7, 8, 77, 78, 79 };
	int n = 7, cached = -1;
	p.checkpoint_at = 0;
	struct record warm = cached_equals_fresh(&g, next, n, &p, 3);
	/* Diverging before the checkpoint: nothing to go back to. */
	const int32_t other[] = { 5, 9, 9, 9 };
	cr_assert_eq(batch_start(&g.b, 0, other, 4, &p, NULL, &cached), 0);
	cr_expect_eq(cached, 0);
	run_to_end(&g.b);
	rig_close(&g);
	/* After a restart the saved checkpoint serves as well. */
	rig_open(&g, "qwen3_5_moe", 40);
	cr_assert_eq(batch_load(&g.b, 2, 99, path), 0, "%s", error_message());
	memset(&g.r, 0, sizeof g.r);
	cr_assert_eq(batch_start(&g.b, 2, next, n, &p, NULL, &cached), 0);
	cr_expect_eq(cached, 3);
	run_to_end(&g.b);
	cr_expect_eq(memcmp(g.r.id[2], warm.id[0], sizeof warm.id[0]), 0, "tokens differ after a reload");
	cr_expect_eq(memcmp(g.r.lp[2], warm.lp[0], sizeof warm.lp[0]), 0, "logprobs differ after a reload");
	rig_close(&g);
}

Test(batch, prompt_cache_and_sessions)
{
	struct rig g;
	rig_open(&g, "qwen3_moe", 40);
	struct batch_params p = params_of(0);
	cr_assert_eq(batch_start(&g.b, 0, prompts[0], lens[0], &p, NULL, NULL), 0);
	run_to_end(&g.b);
	cr_expect_eq(g.b.slots[0].n_tokens, 5 + 12 - 1, "history: prompt and the generated tokens that ran");
	int32_t next[64];
	int n = extended(&g.b, next);
	cr_expect_eq(batch_pick(&g.b, next, n), 0, "the slot holding the prefix");
	char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/s.session", ws);
	cr_assert_eq(batch_save(&g.b, 0, 99, path), 0, "%s", error_message());
	cr_expect_neq(access(path, F_OK), -1);
	/* Cached: the second request prefills only its new tokens, with what
	 * a fresh slot computes from scratch. */
	int cached = -1;
	struct record warm = cached_equals_fresh(&g, next, n, &p, n - 3);
	rig_close(&g);

	/* A restart: the session loads into a fresh forward and continues with
	 * the same bits, prefilling only the new tokens. */
	rig_open(&g, "qwen3_moe", 40);
	cr_assert_eq(batch_load(&g.b, 2, 99, path), 0, "%s", error_message());
	cr_expect_eq(g.b.slots[2].n_tokens, n - 3);
	cr_assert_eq(batch_start(&g.b, 2, next, n, &p, NULL, &cached), 0);
	cr_expect_eq(cached, n - 3);
	run_to_end(&g.b);
	cr_expect_eq(memcmp(g.r.id[2], warm.id[0], sizeof warm.id[0]), 0, "tokens differ after a reload");
	cr_expect_eq(memcmp(g.r.lp[2], warm.lp[0], sizeof warm.lp[0]), 0, "logprobs differ after a reload");

	/* Refused: another model, cut short, bytes appended, a flipped byte,
	 * not a session. */
	cr_expect_neq(batch_load(&g.b, 1, 98, path), 0);
	cr_expect(strstr(error_message(), path) && strstr(error_message(), "another model"), "%s", error_message());
	cr_expect_eq(g.b.slots[1].n_tokens, 0);
	size_t len = 0;
	char *bytes = tu_read(path, &len);
	cr_assert(bytes && len > 64);
	char bad[PATH_MAX + 32];
	snprintf(bad, sizeof bad, "%s/cut.session", ws);
	cr_assert_eq(tu_write(bad, bytes, len / 2), 0);
	error_clear();
	cr_expect_neq(batch_load(&g.b, 1, 99, bad), 0);
	cr_expect(strstr(error_message(), bad), "%s", error_message());
	/* Bytes after the state: no checksum covers them, so refused too. */
	char *longer = malloc(len + 5);
	cr_assert_not_null(longer);
	memcpy(longer, bytes, len);
	memcpy(longer + len, "extra", 5);
	snprintf(bad, sizeof bad, "%s/tail.session", ws);
	cr_assert_eq(tu_write(bad, longer, len + 5), 0);
	free(longer);
	error_clear();
	cr_expect_neq(batch_load(&g.b, 1, 99, bad), 0, "a session with bytes appended was accepted");
	cr_expect(strstr(error_message(), bad) && strstr(error_message(), "5 bytes after the end"), "%s",
		  error_message());
	cr_expect_eq(g.b.slots[1].n_tokens, 0);
	bytes[20] ^= 1;
	snprintf(bad, sizeof bad, "%s/flip.session", ws);
	cr_assert_eq(tu_write(bad, bytes, len), 0);
	error_clear();
	cr_expect_neq(batch_load(&g.b, 1, 99, bad), 0);
	cr_expect(strstr(error_message(), "corrupt"), "%s", error_message());
	cr_expect_eq(forward_seq(&g.f, 1)->pos, 0, "a refused session leaves the slot empty");
	free(bytes);
	rig_close(&g);
}

Test(batch, limits)
{
	struct rig g;
	rig_open(&g, "qwen3_moe", 12);
	struct batch_params p = { .n_predict = 100, .top_p = 1 };
	/* 5 prompt tokens in a context of 12: 8 tokens, then the context is full. */
	cr_assert_eq(batch_start(&g.b, 0, prompts[0], lens[0], &p, NULL, NULL), 0);
	run_to_end(&g.b);
	cr_expect_eq(g.r.fin[0], BATCH_LENGTH);
	cr_expect_eq(g.r.n[0], 12 - 5 + 1, "the last token needs no position");
	p.n_predict = 0;
	cr_assert_eq(batch_start(&g.b, 1, prompts[1], lens[1], &p, NULL, NULL), 0);
	run_to_end(&g.b);
	cr_expect_eq(g.r.n[1], 0);
	cr_expect_eq(g.r.fin[1], BATCH_LENGTH);
	int32_t longp[13] = { 0 };
	cr_expect_eq(batch_start(&g.b, 2, longp, 13, &p, NULL, NULL), -ENOSPC);
	cr_expect_eq(batch_start(&g.b, 2, longp, 0, &p, NULL, NULL), -EINVAL);
	struct batch_params bad = { .n_predict = 4, .top_p = 0 };
	cr_expect_neq(batch_start(&g.b, 2, longp, 3, &bad, NULL, NULL), 0, "top_p 0 accepted");
	rig_close(&g);
}
