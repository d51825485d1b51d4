/*
 * test_convert_inkling — `colibri convert` of Inkling's released layout
 * (tools/make_fixtures.sh's inkling_f32: an inkling_mm_model with
 * model.llm.*, model.visual.*, model.audio.*, model.mtp.* tensors) at
 * --quant f32, every value of the container checked against the source
 * tensors read here, independently of the converter:
 *  - dense layer: gate_proj row j == w13_dn row 2j, up_proj row j == row
 *    2j + 1, down_proj == w2_md;
 *  - MoE layer: each expert's gate rows == w13_weight[e] even rows, up ==
 *    odd rows, down == w2_weight[e]; the shared experts' gate_proj row
 *    s * I + i == shared_w13[s] row 2i, up_proj row 2i + 1, down_proj
 *    column s * I + i == shared_w2[s][:, i]; the router (E + S rows), its
 *    bias as e_score_correction_bias, the global scales, the convolutions
 *    [C, K] from [C, 1, K];
 *  - embed_tokens and lm_head keep the first `vocab` (unpadded) rows;
 *  - the vision, audio and MTP towers are each reported in one line;
 *    `colibri plan` reads the container;
 *  - broken checkpoints are refused naming the released tensor and the
 *    file: w13_dn of odd rows, w13_weight of an odd second dim, a missing
 *    shared_w2_weight, an unembed of fewer rows than the vocabulary, a
 *    model.llm. tensor colibri does not know.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/model/manifest.h"
#include "tests/convert_fixture.h"

TestSuite(convert_inkling, .init = setup, .fini = teardown);

/* The fixture's source: its header and data block (f32 tensors only). */
struct src {
	char *buf;
	size_t len;
	uint64_t hlen;
	cJSON *h;
};

static void src_open(struct src *s, const char *dir)
{
	s->buf = read_file(dir, "model.safetensors", &s->len);
	s->hlen = 0;
	for (int i = 7; i >= 0; i--)
		s->hlen = s->hlen << 8 | (uint8_t)s->buf[i];
	s->h = cJSON_ParseWithLength(s->buf + 8, s->hlen);
	cr_assert(cJSON_IsObject(s->h));
}

static void src_close(struct src *s)
{
	cJSON_Delete(s->h);
	free(s->buf);
}

/* The f32 data of tensor name, and its shape in dims[4] (unused dims 1). */
static const float *src_tensor(const struct src *s, const char *name, int64_t dims[4])
{
	cJSON *t = cJSON_GetObjectItemCaseSensitive(s->h, name);
	cr_assert_not_null(t, "source has no %s", name);
	cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(t, "dtype")->valuestring, "F32");
	cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
	for (int i = 0; i < 4; i++)
		dims[i] = i < cJSON_GetArraySize(shape) ? (int64_t)cJSON_GetArrayItem(shape, i)->valuedouble : 1;
	uint64_t b = (uint64_t)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(t, "data_offsets"), 0)->valuedouble;
	return (const float *)(s->buf + 8 + s->hlen + b);
}

struct container {
	struct manifest m;
	char *resident;
	size_t resident_len;
	char dir[PATH_MAX];
};

static void container_open(struct container *c, const char *dir)
{
	snprintf(c->dir, sizeof c->dir, "%s", dir);
	cr_assert_eq(manifest_load(&c->m, dir), 0, "manifest_load: %s", error_message());
	c->resident = read_file(dir, c->m.resident_file, &c->resident_len);
}

static void container_close(struct container *c)
{
	manifest_free(&c->m);
	free(c->resident);
}

/* A resident tensor of rows x cols, f32 (--quant f32 keeps the values). */
static const float *resident(const struct container *c, const char *name, int64_t rows, int64_t cols)
{
	const struct manifest_tensor *t = manifest_find(&c->m, name);
	cr_assert_not_null(t, "container has no %s", name);
	cr_assert_eq(t->type, QUANT_F32, "%s is not f32", name);
	cr_assert(t->shape[0] == rows && t->shape[1] == cols, "%s is [%lld, %lld], expected [%lld, %lld]", name,
		  (long long)t->shape[0], (long long)t->shape[1], (long long)rows, (long long)cols);
	cr_assert_leq(t->offset + t->bytes, c->resident_len);
	return (const float *)(c->resident + t->offset);
}

/* a[0..n) == b[0..n) exactly (an f32 copy moves bits). */
static void expect_row(const float *a, const float *b, int64_t n, const char *what, int64_t row)
{
	for (int64_t i = 0; i < n; i++)
		if (a[i] != b[i]) {
			cr_expect_eq(a[i], b[i], "%s row %lld col %lld: %g != %g", what, (long long)row, (long long)i,
				     (double)a[i], (double)b[i]);
			return;
		}
}

static void convert_ok(char *out, size_t n, const char *hf)
{
	snprintf(out, n, "%s/out", ws);
	int rc = convert(hf, out, "--quant f32 --dense-quant f32");
	char *log = read_file(ws, "log.txt", NULL);
	cr_assert_eq(rc, 0, "convert failed: %s", log);
	free(log);
}

Test(convert_inkling, values_match_the_released_tensors)
{
	char hf[PATH_MAX], out[PATH_MAX + 8];
	fixture_path(hf, sizeof hf, "inkling_f32");
	convert_ok(out, sizeof out, hf);
	char *log = read_file(ws, "log.txt", NULL);
	cr_expect(strstr(log, "vision tower (3 tensors model.visual.*)"), "log: %s", log);
	cr_expect(strstr(log, "audio tower (2 tensors model.audio.*)"), "log: %s", log);
	cr_expect(strstr(log, "MTP module (3 tensors model.mtp.*)"), "log: %s", log);
	free(log);
	cr_expect_eq(tu_sh("'%s' plan --model '%s' >/dev/null 2>&1", tu_colibri(), out), 0, "colibri plan failed");

	struct src s;
	struct container c;
	src_open(&s, hf);
	container_open(&c, out);
	int64_t d[4], H = 128, V = 512, I = 64, E = 8, S = 2, FD = 128, K = 4;
	char name[160], rel[160];

	/* The vocabulary's rows: 512 of the 520 stored. */
	const float *emb = src_tensor(&s, "model.llm.embed.weight", d);
	cr_assert_eq(d[0], 520);
	const float *ce = resident(&c, "model.embed_tokens.weight", V, H);
	for (int64_t r = 0; r < V; r++)
		expect_row(ce + r * H, emb + r * H, H, "embed_tokens", r);
	const float *un = src_tensor(&s, "model.llm.unembed.weight", d);
	const float *lm = resident(&c, "lm_head.weight", V, H);
	for (int64_t r = 0; r < V; r++)
		expect_row(lm + r * H, un + r * H, H, "lm_head", r);
	expect_row(resident(&c, "model.embed_norm.weight", H, 1), src_tensor(&s, "model.llm.embed_norm.weight", d), H,
		   "embed_norm", 0);

	/* Layer 0 is dense (dense_mlp_idx 1): w13_dn's interleaved rows split. */
	const float *w13 = src_tensor(&s, "model.llm.layers.0.mlp.w13_dn.weight", d);
	cr_assert(d[0] == 2 * FD && d[1] == H);
	const float *gate = resident(&c, "model.layers.0.mlp.gate_proj.weight", FD, H);
	const float *up = resident(&c, "model.layers.0.mlp.up_proj.weight", FD, H);
	for (int64_t j = 0; j < FD; j++) {
		expect_row(gate + j * H, w13 + 2 * j * H, H, "dense gate", j);
		expect_row(up + j * H, w13 + (2 * j + 1) * H, H, "dense up", j);
	}
	const float *down = resident(&c, "model.layers.0.mlp.down_proj.weight", H, FD);
	const float *w2 = src_tensor(&s, "model.llm.layers.0.mlp.w2_md.weight", d);
	for (int64_t r = 0; r < H; r++)
		expect_row(down + r * FD, w2 + r * FD, FD, "dense down", r);
	resident(&c, "model.layers.0.mlp.global_scale", 1, 1);
	cr_expect_null(manifest_expert_layer(&c.m, 0), "dense layer 0 has experts");

	/* The convolutions: [C, 1, K] as [C, K]; the relative bank as it is. */
	const float *ks = src_tensor(&s, "model.llm.layers.0.attn.k_sconv.weight", d);
	cr_assert(d[0] == 64 && d[1] == 1 && d[2] == K);
	expect_row(resident(&c, "model.layers.0.self_attn.k_sconv.conv1d.weight", 64, K), ks, 64 * K, "k_sconv", 0);
	const float *as = src_tensor(&s, "model.llm.layers.2.attn_sconv.weight", d);
	expect_row(resident(&c, "model.layers.2.attn_sconv.conv1d.weight", H, K), as, H * K, "attn_sconv", 0);
	expect_row(resident(&c, "model.layers.0.self_attn.rel_logits_proj.proj", 4, 5),
		   src_tensor(&s, "model.llm.layers.0.attn.rel_logits_proj.proj", d), 20, "rel_logits_proj (sliding)", 0);
	expect_row(resident(&c, "model.layers.1.self_attn.rel_logits_proj.proj", 4, 7),
		   src_tensor(&s, "model.llm.layers.1.attn.rel_logits_proj.proj", d), 28, "rel_logits_proj (global)", 0);
	/* Sliding layer 0: 8 heads of 16, r_proj 8 x d_rel; global layer 1: 4 of 32. */
	resident(&c, "model.layers.0.self_attn.q_proj.weight", 128, H);
	resident(&c, "model.layers.0.self_attn.r_proj.weight", 32, H);
	resident(&c, "model.layers.1.self_attn.r_proj.weight", 16, H);
	resident(&c, "model.layers.1.self_attn.q_norm.weight", 32, 1);

	for (int l = 1; l < 4; l++) {
		/* The router: E + S rows, f32; the bias under transformers' name. */
		snprintf(rel, sizeof rel, "model.llm.layers.%d.mlp.gate.weight", l);
		snprintf(name, sizeof name, "model.layers.%d.mlp.gate.weight", l);
		expect_row(resident(&c, name, E + S, H), src_tensor(&s, rel, d), (E + S) * H, "router", l);
		snprintf(rel, sizeof rel, "model.llm.layers.%d.mlp.gate.bias", l);
		snprintf(name, sizeof name, "model.layers.%d.mlp.gate.e_score_correction_bias", l);
		expect_row(resident(&c, name, E, 1), src_tensor(&s, rel, d), E, "router bias", l);
		snprintf(name, sizeof name, "model.layers.%d.mlp.gate.global_scale", l);
		resident(&c, name, 1, 1);

		/* Shared experts stacked: rows s * I + i, down's columns s * I + i. */
		snprintf(rel, sizeof rel, "model.llm.layers.%d.mlp.shared_experts.shared_w13_weight", l);
		const float *sw13 = src_tensor(&s, rel, d);
		cr_assert(d[0] == S && d[1] == 2 * I && d[2] == H);
		snprintf(name, sizeof name, "model.layers.%d.mlp.shared_experts.gate_proj.weight", l);
		const float *sg = resident(&c, name, S * I, H);
		snprintf(name, sizeof name, "model.layers.%d.mlp.shared_experts.up_proj.weight", l);
		const float *su = resident(&c, name, S * I, H);
		snprintf(rel, sizeof rel, "model.llm.layers.%d.mlp.shared_experts.shared_w2_weight", l);
		const float *sw2 = src_tensor(&s, rel, d);
		cr_assert(d[0] == S && d[1] == H && d[2] == I);
		snprintf(name, sizeof name, "model.layers.%d.mlp.shared_experts.down_proj.weight", l);
		const float *sd = resident(&c, name, H, S * I);
		for (int64_t e = 0; e < S; e++) {
			for (int64_t i = 0; i < I; i++) {
				expect_row(sg + (e * I + i) * H, sw13 + (e * 2 * I + 2 * i) * H, H, "shared gate", e * I + i);
				expect_row(su + (e * I + i) * H, sw13 + (e * 2 * I + 2 * i + 1) * H, H, "shared up",
					   e * I + i);
				for (int64_t h = 0; h < H; h++)
					if (sd[h * S * I + e * I + i] != sw2[(e * H + h) * I + i]) {
						cr_expect_fail("layer %d shared down [%lld, %lld] != shared_w2[%lld][%lld][%lld]",
							       l, (long long)h, (long long)(e * I + i), (long long)e,
							       (long long)h, (long long)i);
						break;
					}
			}
		}

		/* Routed experts: each record's gate / up / down. */
		snprintf(rel, sizeof rel, "model.llm.layers.%d.mlp.experts.w13_weight", l);
		const float *ew13 = src_tensor(&s, rel, d);
		snprintf(rel, sizeof rel, "model.llm.layers.%d.mlp.experts.w2_weight", l);
		const float *ew2 = src_tensor(&s, rel, d);
		const struct manifest_expert_layer *el = manifest_expert_layer(&c.m, l);
		cr_assert_not_null(el, "MoE layer %d has no expert file", l);
		size_t flen;
		char *f = read_file(out, el->file, &flen);
		cr_assert_eq(flen, (size_t)E * el->record_bytes);
		for (int64_t e = 0; e < E; e++) {
			const char *rec = f + e * el->record_bytes;
			const float *g = (const float *)(rec + el->parts[EXPERT_PART_GATE].offset);
			const float *u = (const float *)(rec + el->parts[EXPERT_PART_UP].offset);
			const float *dn = (const float *)(rec + el->parts[EXPERT_PART_DOWN].offset);
			cr_assert_eq(el->parts[EXPERT_PART_GATE].type, QUANT_F32);
			for (int64_t i = 0; i < I; i++) {
				expect_row(g + i * H, ew13 + (e * 2 * I + 2 * i) * H, H, "expert gate", e * I + i);
				expect_row(u + i * H, ew13 + (e * 2 * I + 2 * i + 1) * H, H, "expert up", e * I + i);
			}
			expect_row(dn, ew2 + e * H * I, H * I, "expert down", e);
		}
		free(f);
	}
	container_close(&c);
	src_close(&s);
}

/* Converting the edited copy fails with a message holding every needle. */
static void expect_refused(const char *hf, const char *n1, const char *n2)
{
	char out[PATH_MAX + 8];
	snprintf(out, sizeof out, "%s/out", ws);
	int rc = convert(hf, out, "--quant f32");
	char *log = read_file(ws, "log.txt", NULL);
	cr_expect_neq(rc, 0, "accepted; log: %s", log);
	cr_expect(strstr(log, n1) && (!n2 || strstr(log, n2)), "message lacks \"%s\" / \"%s\": %s", n1,
		  n2 ? n2 : "", log);
	free(log);
}

/* Sets tensor name's shape to dims (its data shortened to fit). */
static void reshape(const char *hf, const char *name, int nd, const int64_t *dims)
{
	struct st_edit e;
	st_edit_open(&e, hf);
	cJSON *t = st_edit_entry(&e, name);
	uint64_t b = st_edit_num(t, "data_offsets", 0), n = 4;
	cJSON *shape = cJSON_CreateArray();
	for (int i = 0; i < nd; i++) {
		cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)dims[i]));
		n *= (uint64_t)dims[i];
	}
	cJSON_ReplaceItemInObjectCaseSensitive(t, "shape", shape);
	cJSON *off = cJSON_CreateArray();
	cJSON_AddItemToArray(off, cJSON_CreateNumber((double)b));
	cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(b + n)));
	cJSON_ReplaceItemInObjectCaseSensitive(t, "data_offsets", off);
	st_edit_save(&e);
}

Test(convert_inkling, odd_w13_dn_refused)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "inkling_f32");
	reshape(hf, "model.llm.layers.0.mlp.w13_dn.weight", 2, (int64_t[]){ 255, 128 });
	expect_refused(hf, "model.llm.layers.0.mlp.w13_dn.weight", "model.safetensors");
}

Test(convert_inkling, short_w13_dn_refused)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "inkling_f32");
	reshape(hf, "model.llm.layers.0.mlp.w13_dn.weight", 2, (int64_t[]){ 254, 128 });
	expect_refused(hf, "model.llm.layers.0.mlp.w13_dn.weight", "expected [128, 128]");
}

Test(convert_inkling, odd_experts_w13_refused)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "inkling_f32");
	reshape(hf, "model.llm.layers.2.mlp.experts.w13_weight", 3, (int64_t[]){ 8, 127, 128 });
	expect_refused(hf, "model.llm.layers.2.mlp.experts.w13_weight", "model.safetensors");
}

Test(convert_inkling, missing_shared_w2_refused)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "inkling_f32");
	struct st_edit e;
	st_edit_open(&e, hf);
	cJSON_DeleteItemFromObjectCaseSensitive(e.h, "model.llm.layers.3.mlp.shared_experts.shared_w2_weight");
	st_edit_save(&e);
	expect_refused(hf, "model.llm.layers.3.mlp.shared_experts.shared_w2_weight",
		       "model.layers.3.mlp.shared_experts.down_proj.weight");
}

Test(convert_inkling, short_unembed_refused)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "inkling_f32");
	reshape(hf, "model.llm.unembed.weight", 2, (int64_t[]){ 500, 128 });
	expect_refused(hf, "model.llm.unembed.weight", "fewer than the vocabulary's 512");
}

Test(convert_inkling, unknown_llm_tensor_refused)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "inkling_f32");
	struct st_edit e;
	st_edit_open(&e, hf);
	uint64_t at = st_edit_append(&e, NULL, 4 * 128);
	cJSON *t = cJSON_CreateObject();
	cJSON_AddItemToObject(e.h, "model.llm.layers.1.attn.wz_du.weight", t);
	cJSON_AddItemToObject(t, "dtype", cJSON_CreateString("F32"));
	cJSON_AddItemToObject(t, "shape", cJSON_CreateArray());
	cJSON_AddItemToObject(t, "data_offsets", cJSON_CreateArray());
	st_edit_set(t, "F32", 1, 128, at, at + 4 * 128);
	st_edit_save(&e);
	expect_refused(hf, "model.llm.layers.1.attn.wz_du.weight", "model.safetensors");
}
