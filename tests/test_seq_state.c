/*
 * test_seq_state — the sequence-state interface (engine/forward/seq_state.h):
 *  - its semantics on hand-made parts: positional rows truncate to any
 *    earlier position; a fixed part refuses (-EAGAIN) and comes back from a
 *    snapshot, or from the checkpoint when that lies within what is kept;
 *    reset zeroes the fixed parts; COLIBRI_SEQ_REPLAY forces the replay
 *    path;
 *  - save and load: a round trip gives the same bytes; another model id,
 *    another layout, too many positions, a truncated or corrupted file are
 *    refused with a message naming the file, and leave the state reset; a
 *    file of the format before checkpoints (CLBSEQ01) still loads;
 *  - on real models (qwen3_moe: GQA + dense + MoE layers; deepseek_v32:
 *    MLA + DSA indexer + MTP; qwen3_5_moe: Gated DeltaNet layers with a
 *    fixed recurrent and convolution state beside gated attention): a
 *    prefill saved, the forward reset and the state loaded again continues
 *    with logits bit-identical to an uninterrupted run; each layer of the
 *    block table states what it keeps, per position or fixed;
 *  - drafting through forward_rewind's replay path (COLIBRI_SEQ_REPLAY=1)
 *    gives the same greedy text as truncation, and does replay (more
 *    expert requests).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <xxhash.h>

#include "base/error.h"
#include "compute/threadpool.h"
#include "engine/decode/session.h"
#include "engine/forward/forward.h"
#include "engine/forward/seq_state.h"
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

TestSuite(seq_state, .init = setup, .fini = teardown);

static const struct seq_part_size sizes[3] = { { 8, 0 }, { 0, 16 }, { 0, 0 } };

static void fill(struct seq_state *s, int pos, uint8_t v)
{
	memset(s->parts[0].rows, v, (size_t)pos * 8);
	memset(s->parts[1].fixed, v, 16);
	s->pos = pos;
}

Test(seq_state, truncate_snapshot_restore)
{
	struct seq_state s;
	cr_assert_eq(seq_state_init(&s, sizes, 3, 5), 0);
	cr_expect_eq(seq_state_bytes(sizes, 3, 5), 5 * 8 + 3 * 16, "rows, and the fixed part with its snapshot and checkpoint");
	cr_expect_null(seq_state_rows(&s, 2));
	cr_expect_null(seq_state_fixed(&s, 0));
	fill(&s, 3, 0xab);
	seq_state_snapshot(&s);
	fill(&s, 4, 0xcd);
	/* A fixed part knows only its latest value: going back needs the snapshot. */
	cr_expect_eq(seq_state_truncate(&s, 3), -EAGAIN);
	cr_expect_eq(seq_state_truncate(&s, 4), 0, "staying put needs nothing");
	cr_expect_neq(seq_state_truncate(&s, 5), 0, "beyond the sequence");
	cr_assert_eq(seq_state_restore(&s), 0);
	cr_expect_eq(s.pos, 3);
	cr_expect_eq(s.parts[1].fixed[0], 0xab);
	cr_expect_eq(s.parts[1].fixed[15], 0xab);
	seq_state_reset(&s);
	cr_expect_eq(s.pos, 0);
	cr_expect_eq(s.parts[1].fixed[7], 0);
	cr_expect_neq(seq_state_restore(&s), 0, "reset forgets the snapshot");

	/* The checkpoint outlives snapshots: the end of a conversation's
	 * history, which a later prompt sharing it goes back to. */
	fill(&s, 2, 0x11);
	seq_state_checkpoint(&s);
	fill(&s, 3, 0x22);
	seq_state_snapshot(&s);
	fill(&s, 5, 0x33);
	cr_expect_eq(seq_state_restore_checkpoint(&s, 1), -EAGAIN, "the checkpoint lies past what is kept");
	cr_assert_eq(seq_state_restore_checkpoint(&s, 4), 0);
	cr_expect(s.pos == 2 && s.parts[1].fixed[0] == 0x11 && s.parts[1].fixed[15] == 0x11, "pos %d", s.pos);
	cr_expect_neq(seq_state_restore(&s), 0, "going back to the checkpoint drops the later snapshot");
	seq_state_reset(&s);
	cr_expect_eq(seq_state_restore_checkpoint(&s, 4), -EAGAIN, "reset forgets the checkpoint");
	seq_state_free(&s);

	/* Rows alone truncate to any earlier position. */
	cr_assert_eq(seq_state_init(&s, sizes, 1, 5), 0);
	s.pos = 5;
	cr_expect_eq(seq_state_truncate(&s, 2), 0);
	cr_expect_eq(s.pos, 2);
	seq_state_free(&s);

	/* COLIBRI_SEQ_REPLAY=1 makes every truncation ask for the replay. */
	setenv("COLIBRI_SEQ_REPLAY", "1", 1);
	cr_assert_eq(seq_state_init(&s, sizes, 1, 5), 0);
	unsetenv("COLIBRI_SEQ_REPLAY");
	s.pos = 5;
	cr_expect_eq(seq_state_truncate(&s, 2), -EAGAIN);
	seq_state_free(&s);
}

/* Saves s to ws/name and returns the path. */
static void save(const struct seq_state *s, uint64_t id, const char *name, char *path, size_t n)
{
	snprintf(path, n, "%s/%s", ws, name);
	FILE *f = fopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(seq_state_save(s, id, f, path), 0, "%s", error_message());
	cr_assert_eq(fclose(f), 0);
}

/* Loads path into s: its result, with the message in msg. */
static int load(struct seq_state *s, uint64_t id, const char *path)
{
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f);
	error_clear();
	int rc = seq_state_load(s, id, f, path);
	fclose(f);
	return rc;
}

static void expect_refused(struct seq_state *s, uint64_t id, const char *path, const char *what)
{
	cr_expect_neq(load(s, id, path), 0, "%s: loaded", what);
	cr_expect(strstr(error_message(), path) && strstr(error_message(), what), "message \"%s\" lacks %s and \"%s\"",
		  error_message(), path, what);
	cr_expect_eq(s->pos, 0, "%s: the state is not reset", what);
}

Test(seq_state, save_and_load)
{
	struct seq_state a, b, other;
	cr_assert_eq(seq_state_init(&a, sizes, 3, 5), 0);
	cr_assert_eq(seq_state_init(&b, sizes, 3, 5), 0);
	for (int i = 0; i < 3 * 8; i++)
		a.parts[0].rows[i] = (uint8_t)(i * 7 + 1);
	memset(a.parts[1].fixed, 0x4b, 16);
	a.pos = 2;
	seq_state_checkpoint(&a);
	memset(a.parts[1].fixed, 0x5a, 16);
	a.pos = 3;
	char path[PATH_MAX + 32], bad[PATH_MAX + 32];
	save(&a, 42, "s.bin", path, sizeof path);
	cr_assert_eq(load(&b, 42, path), 0, "%s", error_message());
	cr_expect_eq(b.pos, 3);
	cr_expect_eq(memcmp(a.parts[0].rows, b.parts[0].rows, 3 * 8), 0);
	cr_expect_eq(memcmp(a.parts[1].fixed, b.parts[1].fixed, 16), 0);
	/* The checkpoint travels with the state. */
	cr_assert_eq(seq_state_restore_checkpoint(&b, 3), 0);
	cr_expect(b.pos == 2 && b.parts[1].fixed[0] == 0x4b, "the checkpoint came back at %d", b.pos);

	/* A file of the format before checkpoints (CLBSEQ01: no checkpoint
	 * field) still loads, without a checkpoint. */
	seq_state_reset(&a);
	a.pos = 3;
	save(&a, 42, "v2.bin", path, sizeof path);
	size_t vlen = 0;
	uint8_t *v = (uint8_t *)tu_read(path, &vlen);
	cr_assert(v && vlen > 12 && !memcmp(v, "CLBSEQ02", 8));
	int32_t none;
	memcpy(&none, v + vlen - 12, 4);
	cr_assert_eq(none, -1, "no checkpoint: the field is -1 and nothing follows it");
	memcpy(v, "CLBSEQ01", 8);
	uint64_t sum = XXH3_64bits(v, vlen - 12);
	memcpy(v + vlen - 12, &sum, 8);
	snprintf(bad, sizeof bad, "%s/v1.bin", ws);
	cr_assert_eq(tu_write(bad, v, vlen - 4), 0);
	free(v);
	cr_assert_eq(load(&b, 42, bad), 0, "%s", error_message());
	cr_expect(b.pos == 3 && b.ckpt_pos == -1 && !memcmp(a.parts[1].fixed, b.parts[1].fixed, 16));
	save(&a, 42, "s.bin", path, sizeof path);

	expect_refused(&b, 43, path, "another model");
	cr_assert_eq(seq_state_init(&other, sizes, 2, 5), 0);
	expect_refused(&other, 42, path, "parts");
	seq_state_free(&other);
	cr_assert_eq(seq_state_init(&other, sizes, 3, 2), 0);
	expect_refused(&other, 42, path, "positions");
	seq_state_free(&other);
	const struct seq_part_size wider[3] = { { 16, 0 }, { 0, 16 }, { 0, 0 } };
	cr_assert_eq(seq_state_init(&other, wider, 3, 5), 0);
	expect_refused(&other, 42, path, "another layout");
	seq_state_free(&other);

	size_t len = 0;
	char *bytes = tu_read(path, &len);
	cr_assert(bytes && len > 64);
	snprintf(bad, sizeof bad, "%s/cut.bin", ws);
	cr_assert_eq(tu_write(bad, bytes, len - 9), 0);
	expect_refused(&b, 42, bad, "truncated");
	bytes[len - 9] ^= 0x10; /* the last byte of the fixed part, before the checksum */
	snprintf(bad, sizeof bad, "%s/flip.bin", ws);
	cr_assert_eq(tu_write(bad, bytes, len), 0);
	expect_refused(&b, 42, bad, "corrupt");
	snprintf(bad, sizeof bad, "%s/junk.bin", ws);
	cr_assert_eq(tu_write(bad, "not a state", 11), 0);
	expect_refused(&b, 42, bad, "not a colibri sequence state");
	free(bytes);
	seq_state_free(&a);
	seq_state_free(&b);
}

/* Opens fixture name converted at bf16 (the build's shared container; the
 * states go to ws) with a forward of 32 positions and prefill chunks of 8. */
static void open_model(const char *name, struct session *s)
{
	static char model[PATH_MAX + 32];
	char src[256];
	snprintf(src, sizeof src, "hf/%s", name);
	fc_container(model, sizeof model, src, "--quant bf16");
	struct session_options o;
	session_options_default(&o);
	o.model_dir = model;
	o.batch = 8;
	o.threads = 2;
	o.no_pin = true;
	static char cache[PATH_MAX + 16];
	snprintf(cache, sizeof cache, "%s/cache", ws);
	setenv("COLIBRI_CACHE_DIR", cache, 1);
	cr_assert_eq(session_open(s, &o, 32), 0, "%s", error_message());
}

/* 16 tokens in two chunks; the second chunk's logits, into out. With
 * through_file, the state after the first chunk is saved, the forward
 * reset, and the state loaded back before the second. */
static void two_chunks(struct session *s, bool through_file, float *out)
{
	struct forward *f = &s->fwd;
	int32_t tokens[16];
	for (int i = 0; i < 16; i++)
		tokens[i] = (i * 37 + 11) % s->model.cfg.vocab;
	forward_reset(f);
	cr_assert_eq(forward_step(f, tokens, 8, NULL, false), 0, "%s", error_message());
	if (through_file) {
		char path[PATH_MAX + 32];
		uint64_t id = manifest_model_id(&s->model.man);
		save(&f->seqs[0], id, "prefill.seq", path, sizeof path);
		forward_reset(f);
		cr_assert_eq(f->seqs[0].pos, 0);
		/* Poison what the rows held (NaN floats): only the file can bring
		 * the prefill back. */
		for (int i = 0; i < f->seqs[0].n_parts; i++)
			if (f->seqs[0].parts[i].rows)
				memset(f->seqs[0].parts[i].rows, 0xff, (size_t)f->seqs[0].ctx * f->seqs[0].parts[i].pos_bytes);
		cr_assert_eq(load(&f->seqs[0], id, path), 0, "%s", error_message());
		cr_assert_eq(f->seqs[0].pos, 8);
	}
	cr_assert_eq(forward_step(f, tokens + 8, 8, out, true), 0, "%s", error_message());
}

static void check_resume(const char *name)
{
	struct session s;
	open_model(name, &s);
	size_t V = (size_t)s.model.cfg.vocab;
	float *plain = malloc(8 * V * sizeof(float)), *resumed = malloc(8 * V * sizeof(float));
	two_chunks(&s, false, plain);
	two_chunks(&s, true, resumed);
	cr_expect_eq(memcmp(plain, resumed, 8 * V * sizeof(float)), 0, "%s: logits differ after save and load", name);
	for (int l = 0; l < s.fwd.n_layers; l++) {
		const struct seq_part *p = &s.fwd.seqs[0].parts[2 * l];
		/* DeltaNet and V4's sliding layers keep only fixed state. */
		bool gdn = s.model.cfg.rows[l].mixer == MIXER_GDN ||
			   (s.model.cfg.rows[l].mixer == MIXER_V4 && s.model.cfg.v4_attn[l] == V4_ATTN_SLIDING);
		if (gdn)
			cr_expect(p->pos_bytes == 0 && p->fixed_bytes > 0, "%s: DeltaNet layer %d keeps %zu per position, "
				  "%zu fixed", name, l, p->pos_bytes, p->fixed_bytes);
		else
			cr_expect_gt(p->pos_bytes, 0, "%s: layer %d's mixer keeps nothing per position", name, l);
	}
	free(plain);
	free(resumed);
	session_close(&s);
}

Test(seq_state, gqa_moe_resumes_bit_identical) { check_resume("qwen3_moe"); }
Test(seq_state, mla_dsa_resumes_bit_identical) { check_resume("deepseek_v32"); }
Test(seq_state, gdn_resumes_bit_identical) { check_resume("qwen3_5_moe"); }
Test(seq_state, v4_resumes_bit_identical) { check_resume("deepseek_v4"); }
Test(seq_state, inkling_resumes_bit_identical) { check_resume("inkling_bf16"); }

/* Greedy drafting on GLM-5 (MLA + DSA, a shared indexer layer, MTP):
 * rolling back through snapshot and replay gives the text truncation
 * gives, and costs the replays' expert requests. */
Test(seq_state, drafting_through_replay)
{
	char model[PATH_MAX + 32], out[PATH_MAX + 32];
	fc_container(model, sizeof model, "hf/glm_moe_dsa", "--quant bf16");
	char *text[2];
	double requests[2];
	for (int replay = 0; replay < 2; replay++) {
		snprintf(out, sizeof out, "%s/draft%d.txt", ws, replay);
		/* The run inherits COLIBRI_SEQ_REPLAY from the second round on. */
		cr_assert_eq(cli_run(ws, out, "run --model '%s' --tokens 5,6,7 -n 24 --temp 0 --draft 2 --no-pin "
					      "--stats-json '%s.json'", model, out), 0);
		text[replay] = tu_read(out, NULL);
		char js[PATH_MAX + 40];
		snprintf(js, sizeof js, "%s.json", out);
		cJSON *j = cli_json_read(js);
		requests[replay] = cli_json_num(j, "expert_requests");
		cJSON_Delete(j);
		setenv("COLIBRI_SEQ_REPLAY", "1", 1);
	}
	unsetenv("COLIBRI_SEQ_REPLAY");
	cr_assert(text[0] && text[1]);
	cr_expect_str_eq(text[1], text[0], "greedy drafting differs through the replay path");
	cr_expect_gt(requests[1], requests[0], "the replay path did not replay (%g vs %g expert requests)", requests[1],
		     requests[0]);
	free(text[0]);
	free(text[1]);
}
