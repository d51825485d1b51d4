/*
 * test_manifest — engine/model/manifest.h: a manifest built in memory is written,
 * checked field by field against the JSON schema of docs/FORMAT.md (read
 * back with cJSON, not with the loader), loaded back with every field equal;
 * then single-field corruptions of a valid container are each rejected by
 * manifest_load with a message naming the manifest or the file at fault:
 * wrong format string, other versions, sizes that do not match the shape and
 * type, ranges outside resident.bin, truncated or missing files,
 * record_bytes not a multiple of 4096, parts outside their record or off
 * the record layout (shifted, swapped, aliased, misnamed), resident
 * tensors off their back-to-back layout (swapped with their checksums,
 * overlapping), file names that leave the container, malformed checksums
 * and sections. A shard (colibri shard) round-trips its shard object and
 * records; its fields out of range, records out of order, repeated or out
 * of range, records without a shard or a shard without records, records
 * that are not its placement's, mirrors, and a file shorter than its
 * records are each refused naming the field.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <cjson/cJSON.h>
#include <errno.h>

#include "engine/model/manifest.h"
#include "base/error.h"
#include "tests/test_util.h"

static char dir[4096];

/* The reference container:
 *   resident.bin 24576 bytes:
 *     model.norm.weight                       f32  [128]      @0     512
 *     model.layers.0.self_attn.q_proj.weight  int8 [64, 128]  @4096  8192 + 64*2*4 = 8704
 *     model.embed_tokens.weight               bf16 [32, 128]  @16384 8192
 *   3 experts per layer, layers 1 and 3, int4 group 64:
 *     gate [64, 128] @0     2048*2 + 64*2*4  = 4608
 *     up   [64, 128] @4608  4608
 *     down [128, 64] @9216  4096 + 128*1*4   = 4608
 *     record_bytes 16384 (13824 rounded up to 4096). */
#define RES_BYTES 24576u
#define RECORD 16384u
#define N_EXPERTS 3

static const uint64_t sums1[N_EXPERTS] = { 1, 0xffffffffffffffffull, 0x8000000000000000ull };
static const uint64_t sums3[N_EXPERTS] = { 0x0123456789abcdefull, 0, 0xa0b1c2d3e4f50617ull };

static void set_tensor(struct manifest_tensor *t, const char *name, enum quant_type type,
		       int32_t group, int ndim, int64_t r, int64_t c, uint64_t off, uint64_t bytes,
		       uint64_t sum)
{
	t->name = strdup(name);
	t->type = type;
	t->group = group;
	t->ndim = ndim;
	t->shape[0] = r;
	t->shape[1] = c;
	t->offset = off;
	t->bytes = bytes;
	t->checksum = sum;
}

/* Fills m with the reference container (heap fields freed by manifest_free). */
static void build_manifest(struct manifest *m)
{
	memset(m, 0, sizeof *m);
	m->version = MANIFEST_VERSION;
	snprintf(m->model_type, sizeof m->model_type, "qwen3_moe");
	m->expert_quant = QUANT_INT4;
	m->dense_quant = QUANT_INT8;
	m->group = 64;
	m->has_tokenizer = true;
	m->resident_file = strdup("resident.bin");
	m->resident_bytes = RES_BYTES;
	m->n_tensors = 3;
	m->tensors = calloc(3, sizeof *m->tensors);
	set_tensor(&m->tensors[0], "model.norm.weight", QUANT_F32, 0, 1, 128, 1, 0, 512,
		   0x00000000000000ffull);
	set_tensor(&m->tensors[1], "model.layers.0.self_attn.q_proj.weight", QUANT_INT8, 64, 2, 64,
		   128, 4096, 8704, 0xfedcba9876543210ull);
	set_tensor(&m->tensors[2], "model.embed_tokens.weight", QUANT_BF16, 0, 2, 32, 128, 16384,
		   8192, 0x0123456789abcdefull);
	m->n_experts = N_EXPERTS;
	m->n_expert_layers = 2;
	m->layers = calloc(2, sizeof *m->layers);
	for (int i = 0; i < 2; i++) {
		struct manifest_expert_layer *l = &m->layers[i];
		char f[64];
		l->layer = i == 0 ? 1 : 3;
		snprintf(f, sizeof f, "experts/layer-%03d.bin", l->layer);
		l->file = strdup(f);
		l->record_bytes = RECORD;
		set_tensor(&l->parts[0], "gate", QUANT_INT4, 64, 2, 64, 128, 0, 4608, 0);
		set_tensor(&l->parts[1], "up", QUANT_INT4, 64, 2, 64, 128, 4608, 4608, 0);
		set_tensor(&l->parts[2], "down", QUANT_INT4, 64, 2, 128, 64, 9216, 4608, 0);
		l->checksums = malloc(N_EXPERTS * sizeof *l->checksums);
		memcpy(l->checksums, i == 0 ? sums1 : sums3, sizeof sums1);
	}
}

static void write_zeros(const char *rel, size_t n)
{
	char p[4300];
	snprintf(p, sizeof p, "%s/%s", dir, rel);
	void *z = calloc(n ? n : 1, 1);
	cr_assert_eq(tu_write(p, z, n), 0, "cannot write %s", p);
	free(z);
}

/* Writes the reference container (data files of zeros) into dir. */
static void write_container(void)
{
	struct manifest m;
	build_manifest(&m);
	char p[4300];
	snprintf(p, sizeof p, "%s/experts", dir);
	cr_assert_eq(mkdir(p, 0755), 0);
	write_zeros("resident.bin", RES_BYTES);
	write_zeros("experts/layer-001.bin", (size_t)N_EXPERTS * RECORD);
	write_zeros("experts/layer-003.bin", (size_t)N_EXPERTS * RECORD);
	error_clear();
	cr_assert_eq(manifest_write(&m, dir), 0, "%s", error_message());
	manifest_free(&m);
	cr_assert_eq(tu_sh("cp '%s/manifest.json' '%s/manifest.json.orig'", dir, dir), 0);
}

static void setup(void)
{
	tu_mkdtemp(dir, sizeof dir);
	error_clear();
	write_container();
}

static void teardown(void)
{
	tu_rmrf(dir);
}

TestSuite(manifest, .init = setup, .fini = teardown);

/* The manifest as written by write_container: every edit starts from it. */
static cJSON *read_json(void)
{
	char p[4300];
	snprintf(p, sizeof p, "%s/manifest.json.orig", dir);
	char *text = tu_read(p, NULL);
	cr_assert_not_null(text);
	cJSON *j = cJSON_Parse(text);
	free(text);
	cr_assert_not_null(j, "manifest.json is not JSON");
	return j;
}

static void write_json(cJSON *j)
{
	char p[4300];
	snprintf(p, sizeof p, "%s/manifest.json", dir);
	char *text = cJSON_Print(j);
	cr_assert_eq(tu_write(p, text, strlen(text)), 0);
	free(text);
}

/* The item at a dotted path ("resident.tensors.1.offset"); numeric
 * segments index arrays. */
static cJSON *json_at(cJSON *root, const char *path, cJSON **parent, char *last, size_t last_len)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", path);
	cJSON *cur = root, *par = NULL;
	char *save = NULL;
	for (char *seg = strtok_r(buf, ".", &save); seg; seg = strtok_r(NULL, ".", &save)) {
		par = cur;
		snprintf(last, last_len, "%s", seg);
		if (cJSON_IsArray(cur))
			cur = cJSON_GetArrayItem(cur, atoi(seg));
		else
			cur = cJSON_GetObjectItemCaseSensitive(cur, seg);
	}
	*parent = par;
	return cur;
}

/* Replaces (or adds, or with item == NULL removes) the item at path. */
static void json_put(cJSON *root, const char *path, cJSON *item)
{
	cJSON *parent;
	char last[64];
	cJSON *old = json_at(root, path, &parent, last, sizeof last);
	cr_assert_not_null(parent, "no parent for %s", path);
	if (cJSON_IsArray(parent)) {
		cr_assert_not_null(old, "no item at %s", path);
		if (item)
			cJSON_ReplaceItemInArray(parent, atoi(last), item);
		else
			cJSON_DeleteItemFromArray(parent, atoi(last));
	} else if (!item) {
		cJSON_DeleteItemFromObjectCaseSensitive(parent, last);
	} else if (old) {
		cJSON_ReplaceItemInObjectCaseSensitive(parent, last, item);
	} else {
		cJSON_AddItemToObject(parent, last, item);
	}
}

/* One edit of manifest.json: the item to put at a dotted path. */
struct edit {
	const char *path;
	cJSON *item;
};

/* Applies edits[0..n) to manifest.json, then expects manifest_load to fail
 * with a message containing `what` and (if not NULL) `names`; path names
 * the edit in failure messages. */
static void expect_edits_rejected(const struct edit *edits, int n, const char *what, const char *names)
{
	const char *path = n ? edits[0].path : NULL;
	cJSON *j = read_json();
	for (int i = 0; i < n; i++)
		if (edits[i].path)
			json_put(j, edits[i].path, edits[i].item);
	write_json(j);
	cJSON_Delete(j);
	struct manifest m;
	error_clear();
	int rc = manifest_load(&m, dir);
	cr_assert_lt(rc, 0, "edit of %s was accepted", path ? path : "(none)");
	cr_assert(strstr(error_message(), what), "edit of %s: message lacks \"%s\": %s",
		  path ? path : "(none)", what, error_message());
	cr_assert(strstr(error_message(), names ? names : dir),
		  "edit of %s: message does not name %s: %s", path ? path : "(none)",
		  names ? names : dir, error_message());
	manifest_free(&m);
}

/* Applies one edit to manifest.json, then expects manifest_load to fail
 * with a message containing `what` and (if not NULL) `names`. */
static void expect_rejected(const char *path, cJSON *item, const char *what, const char *names)
{
	const struct edit e = { path, item };
	expect_edits_rejected(&e, 1, what, names);
}

static void expect_loads(void)
{
	struct manifest m;
	error_clear();
	cr_assert_eq(manifest_load(&m, dir), 0, "%s", error_message());
	manifest_free(&m);
}

static void assert_tensor_eq(const struct manifest_tensor *a, const struct manifest_tensor *b,
			     bool resident)
{
	cr_assert_str_eq(a->name, b->name);
	cr_assert_eq(a->type, b->type, "%s: type", a->name);
	cr_assert_eq(a->group, b->group, "%s: group", a->name);
	cr_assert_eq(a->ndim, b->ndim, "%s: ndim", a->name);
	cr_assert_eq(a->shape[0], b->shape[0], "%s: rows", a->name);
	cr_assert_eq(a->shape[1], b->shape[1], "%s: cols", a->name);
	cr_assert_eq(a->offset, b->offset, "%s: offset", a->name);
	cr_assert_eq(a->bytes, b->bytes, "%s: bytes", a->name);
	if (resident)
		cr_assert_eq(a->checksum, b->checksum, "%s: checksum %016llx", a->name,
			     (unsigned long long)b->checksum);
}

Test(manifest, round_trip_every_field)
{
	struct manifest want, got;
	build_manifest(&want);
	error_clear();
	cr_assert_eq(manifest_load(&got, dir), 0, "%s", error_message());
	cr_assert_eq(got.version, 2);
	cr_assert_str_eq(got.model_type, want.model_type);
	cr_assert_eq(got.expert_quant, QUANT_INT4);
	cr_assert_eq(got.dense_quant, QUANT_INT8);
	cr_assert_eq(got.group, 64);
	cr_assert_eq(got.has_tokenizer, true);
	cr_assert_str_eq(got.resident_file, "resident.bin");
	cr_assert_eq(got.resident_bytes, RES_BYTES);
	cr_assert_eq(got.n_tensors, want.n_tensors);
	for (size_t i = 0; i < want.n_tensors; i++)
		assert_tensor_eq(&got.tensors[i], &want.tensors[i], true);
	cr_assert_eq(got.n_experts, N_EXPERTS);
	cr_assert_eq(got.n_expert_layers, 2);
	for (size_t i = 0; i < 2; i++) {
		const struct manifest_expert_layer *a = &got.layers[i], *b = &want.layers[i];
		cr_assert_eq(a->layer, b->layer);
		cr_assert_str_eq(a->file, b->file);
		cr_assert_eq(a->record_bytes, b->record_bytes);
		for (int p = 0; p < EXPERT_PARTS; p++)
			assert_tensor_eq(&a->parts[p], &b->parts[p], false);
		for (int e = 0; e < N_EXPERTS; e++)
			cr_assert_eq(a->checksums[e], b->checksums[e], "layer %d expert %d", a->layer, e);
	}
	/* Lookups. */
	cr_assert_eq(manifest_find(&got, "model.embed_tokens.weight"), &got.tensors[2]);
	cr_assert_null(manifest_find(&got, "lm_head.weight"));
	cr_assert_eq(manifest_expert_layer(&got, 3), &got.layers[1]);
	cr_assert_eq(manifest_expert_layer(&got, 1), &got.layers[0]);
	cr_assert_null(manifest_expert_layer(&got, 0));
	cr_assert_null(manifest_expert_layer(&got, 2));
	manifest_free(&got);
	manifest_free(&want);

	/* A second round trip with the other flag values. */
	build_manifest(&want);
	want.has_tokenizer = false;
	want.expert_quant = QUANT_BF16;
	want.dense_quant = QUANT_F32;
	error_clear();
	cr_assert_eq(manifest_write(&want, dir), 0, "%s", error_message());
	cr_assert_eq(manifest_load(&got, dir), 0, "%s", error_message());
	cr_assert_eq(got.has_tokenizer, false);
	cr_assert_eq(got.expert_quant, QUANT_BF16);
	cr_assert_eq(got.dense_quant, QUANT_F32);
	manifest_free(&got);
	manifest_free(&want);
}

static const char *jstr(cJSON *o, const char *k)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	cr_assert(cJSON_IsString(v), "\"%s\" is not a string", k);
	return v->valuestring;
}

static double jnum(cJSON *o, const char *k)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	cr_assert(cJSON_IsNumber(v), "\"%s\" is not a number", k);
	return v->valuedouble;
}

static void assert_hex16(const char *s, uint64_t want)
{
	cr_assert_eq(strlen(s), 16, "checksum \"%s\" is not 16 hex digits", s);
	for (const char *c = s; *c; c++)
		cr_assert((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'),
			  "checksum \"%s\" is not lowercase hex", s);
	cr_assert_eq(strtoull(s, NULL, 16), want, "checksum \"%s\"", s);
}

/* The JSON itself, key by key, as docs/FORMAT.md describes it. */
Test(manifest, json_schema)
{
	cJSON *j = read_json();
	cr_assert_str_eq(jstr(j, "format"), "colibri-container");
	cr_assert_eq(jnum(j, "version"), 2);
	cr_assert_str_eq(jstr(j, "model_type"), "qwen3_moe");
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "tokenizer")));
	cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "quant");
	cr_assert_str_eq(jstr(q, "experts"), "int4");
	cr_assert_str_eq(jstr(q, "dense"), "int8");
	cr_assert_eq(jnum(q, "group_size"), 64);

	cJSON *res = cJSON_GetObjectItemCaseSensitive(j, "resident");
	cr_assert_str_eq(jstr(res, "file"), "resident.bin");
	cr_assert_eq(jnum(res, "bytes"), RES_BYTES);
	cJSON *ts = cJSON_GetObjectItemCaseSensitive(res, "tensors");
	cr_assert_eq(cJSON_GetArraySize(ts), 3);
	cJSON *t0 = cJSON_GetArrayItem(ts, 0), *t1 = cJSON_GetArrayItem(ts, 1);
	cr_assert_str_eq(jstr(t0, "name"), "model.norm.weight");
	cr_assert_str_eq(jstr(t0, "type"), "f32");
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t0, "shape")), 1,
		     "a vector keeps its 1-D shape");
	cr_assert_eq(jnum(t0, "group"), 0);
	cr_assert_eq(jnum(t0, "offset"), 0);
	cr_assert_eq(jnum(t0, "bytes"), 512);
	assert_hex16(jstr(t0, "xxh3"), 0xff);
	cr_assert_str_eq(jstr(t1, "type"), "int8");
	cJSON *sh = cJSON_GetObjectItemCaseSensitive(t1, "shape");
	cr_assert_eq(cJSON_GetArraySize(sh), 2);
	cr_assert_eq(cJSON_GetArrayItem(sh, 0)->valuedouble, 64);
	cr_assert_eq(cJSON_GetArrayItem(sh, 1)->valuedouble, 128);
	cr_assert_eq(jnum(t1, "group"), 64);
	cr_assert_eq(jnum(t1, "offset"), 4096);
	cr_assert_eq(jnum(t1, "bytes"), 8704);
	assert_hex16(jstr(t1, "xxh3"), 0xfedcba9876543210ull);

	cJSON *ex = cJSON_GetObjectItemCaseSensitive(j, "experts");
	cr_assert_eq(jnum(ex, "n_experts"), N_EXPERTS);
	cJSON *ls = cJSON_GetObjectItemCaseSensitive(ex, "layers");
	cr_assert_eq(cJSON_GetArraySize(ls), 2);
	cJSON *l0 = cJSON_GetArrayItem(ls, 0);
	cr_assert_eq(jnum(l0, "layer"), 1);
	cr_assert_str_eq(jstr(l0, "file"), "experts/layer-001.bin");
	cr_assert_eq(jnum(l0, "record_bytes"), RECORD);
	cJSON *parts = cJSON_GetObjectItemCaseSensitive(l0, "parts");
	cr_assert_eq(cJSON_GetArraySize(parts), 3);
	const char *pn[3] = { "gate", "up", "down" };
	const double po[3] = { 0, 4608, 9216 };
	for (int p = 0; p < 3; p++) {
		cJSON *o = cJSON_GetArrayItem(parts, p);
		cr_assert_str_eq(jstr(o, "name"), pn[p]);
		cr_assert_str_eq(jstr(o, "type"), "int4");
		cr_assert_eq(jnum(o, "group"), 64);
		cr_assert_eq(jnum(o, "offset"), po[p]);
		cr_assert_eq(jnum(o, "bytes"), 4608);
		cr_assert_null(cJSON_GetObjectItemCaseSensitive(o, "xxh3"),
			       "parts carry no checksum; records do");
	}
	cJSON *sums = cJSON_GetObjectItemCaseSensitive(l0, "xxh3");
	cr_assert_eq(cJSON_GetArraySize(sums), N_EXPERTS);
	for (int e = 0; e < N_EXPERTS; e++)
		assert_hex16(cJSON_GetArrayItem(sums, e)->valuestring, sums1[e]);
	cJSON_Delete(j);
}

Test(manifest, written_atomically)
{
	/* manifest_write leaves no temporary file (manifest.json.tmp-PID-N)
	 * behind. */
	cr_assert_neq(tu_sh("ls -a '%s' | grep -q '^manifest.json.tmp'", dir), 0, "a temporary manifest is left in %s",
		      dir);
}

Test(manifest, unedited_copy_loads)
{
	/* The edit helpers themselves change nothing: re-serialised JSON loads. */
	cJSON *j = read_json();
	write_json(j);
	cJSON_Delete(j);
	expect_loads();
}

Test(manifest, wrong_format_string)
{
	expect_rejected("format", cJSON_CreateString("colibri-container-v0"), "not a colibri manifest",
			"manifest.json");
	expect_rejected("format", cJSON_CreateNumber(1), "not a colibri manifest", "manifest.json");
	expect_rejected("format", NULL, "not a colibri manifest", "manifest.json");
}

/* quant.activations names the container's arithmetic; a manifest written
 * before the field existed means f32 activations, what it was made for. */
Test(manifest, activations_named_or_f32_before)
{
	static const char *const cases[][2] = { { NULL, "auto" }, { "int8", "int8" }, { "", "f32" }, { "f32", "f32" } };
	for (int i = 0; i < 4; i++) {
		if (cases[i][0]) {
			cJSON *j = read_json();
			json_put(j, "quant.activations", cases[i][0][0] ? cJSON_CreateString(cases[i][0]) : NULL);
			write_json(j);
			cJSON_Delete(j);
		}
		struct manifest m;
		error_clear();
		cr_assert_eq(manifest_load(&m, dir), 0, "%s", error_message());
		cr_expect_str_eq(m.activations, cases[i][1], "quant.activations %s", cases[i][0] ? cases[i][0] : "as written");
		manifest_free(&m);
	}
	expect_rejected("quant.activations", cJSON_CreateString("int4"), "quant.activations must be", "manifest.json");
	expect_rejected("quant.activations", cJSON_CreateNumber(8), "quant.activations must be", "manifest.json");
}

Test(manifest, other_versions_refused)
{
	/* Version 1 checksums were not seeded: such a container must be reconverted. */
	expect_rejected("version", cJSON_CreateNumber(1), "version 1 is not supported (this colibri reads 2); "
			"reconvert the model", "manifest.json");
	expect_rejected("version", cJSON_CreateNumber(3), "version 3", "manifest.json");
	expect_rejected("version", cJSON_CreateNumber(0), "version 0", "manifest.json");
	expect_rejected("version", cJSON_CreateString("2"), "version", "manifest.json");
	expect_rejected("version", cJSON_CreateNumber(1.5), "version", "manifest.json");
	expect_rejected("version", NULL, "version", "manifest.json");
}

Test(manifest, bytes_not_matching_shape)
{
	expect_rejected("resident.tensors.1.bytes", cJSON_CreateNumber(8705), "do not match",
			"model.layers.0.self_attn.q_proj.weight");
	/* The same bytes with a shape that implies a different size. */
	cJSON *shape = cJSON_CreateArray();
	cJSON_AddItemToArray(shape, cJSON_CreateNumber(128));
	cJSON_AddItemToArray(shape, cJSON_CreateNumber(128));
	expect_rejected("resident.tensors.2.shape", shape, "do not match", "model.embed_tokens.weight");
	/* The type changes the size too. */
	expect_rejected("resident.tensors.2.type", cJSON_CreateString("f32"), "do not match",
			"model.embed_tokens.weight");
	/* A group that does not divide the inputs. */
	expect_rejected("resident.tensors.1.group", cJSON_CreateNumber(96), "do not match",
			"model.layers.0.self_attn.q_proj.weight");
	expect_rejected("experts.layers.1.parts.2.bytes", cJSON_CreateNumber(4096), "do not match",
			"down");
}

Test(manifest, bad_tensor_fields)
{
	expect_rejected("resident.tensors.0.type", cJSON_CreateString("int3"), "unknown type",
			"model.norm.weight");
	cJSON *s3 = cJSON_CreateArray();
	for (int i = 0; i < 3; i++)
		cJSON_AddItemToArray(s3, cJSON_CreateNumber(8));
	expect_rejected("resident.tensors.0.shape", s3, "dims", "model.norm.weight");
	cJSON *s0 = cJSON_CreateArray();
	cJSON_AddItemToArray(s0, cJSON_CreateNumber(0));
	expect_rejected("resident.tensors.0.shape", s0, "shape", "model.norm.weight");
	expect_rejected("resident.tensors.0.shape", cJSON_CreateArray(), "shape", "model.norm.weight");
	expect_rejected("resident.tensors.0.offset", cJSON_CreateNumber(-4096), "offset",
			"model.norm.weight");
	expect_rejected("resident.tensors.0.bytes", cJSON_CreateNumber(511.5), "bytes",
			"model.norm.weight");
	expect_rejected("resident.tensors.0.offset", cJSON_CreateNumber(1e300), "offset",
			"model.norm.weight");
	expect_rejected("resident.tensors.0.name", NULL, "name", "manifest.json");
	expect_rejected("resident.tensors.0", cJSON_CreateString("x"), "name", "manifest.json");
}

Test(manifest, offset_past_resident_bin)
{
	/* 20480 + 8192 > 24576. */
	expect_rejected("resident.tensors.2.offset", cJSON_CreateNumber(20480), "outside",
			"model.embed_tokens.weight");
	/* A range that ends exactly at the end is fine. */
	cJSON *j = read_json();
	json_put(j, "resident.tensors.2.offset", cJSON_CreateNumber(RES_BYTES - 8192));
	write_json(j);
	cJSON_Delete(j);
	expect_loads();
}

Test(manifest, resident_offset_unaligned)
{
	expect_rejected("resident.tensors.0.offset", cJSON_CreateNumber(4097), "outside",
			"model.norm.weight");
}

Test(manifest, resident_bin_truncated)
{
	char p[4300];
	snprintf(p, sizeof p, "%s/resident.bin", dir);
	cr_assert_eq(truncate(p, RES_BYTES - 1), 0);
	expect_rejected(NULL, NULL, "truncated", "resident.bin");
}

Test(manifest, resident_bytes_beyond_file)
{
	expect_rejected("resident.bytes", cJSON_CreateNumber(RES_BYTES + 4096), "truncated",
			"resident.bin");
}

Test(manifest, expert_file_truncated)
{
	char p[4300];
	snprintf(p, sizeof p, "%s/experts/layer-003.bin", dir);
	cr_assert_eq(truncate(p, 2 * RECORD + 100), 0);
	expect_rejected(NULL, NULL, "truncated", "experts/layer-003.bin");
	cr_assert_eq(truncate(p, 0), 0);
	expect_rejected(NULL, NULL, "truncated", "experts/layer-003.bin");
}

Test(manifest, record_bytes_not_multiple_of_4096)
{
	expect_rejected("experts.layers.0.record_bytes", cJSON_CreateNumber(RECORD + 64),
			"not a multiple of 4096", "manifest.json");
	expect_rejected("experts.layers.0.record_bytes", cJSON_CreateNumber(0),
			"not a multiple of 4096", "manifest.json");
	expect_rejected("experts.layers.0.record_bytes", cJSON_CreateNumber(13824),
			"not a multiple of 4096", "manifest.json");
}

Test(manifest, part_past_its_record)
{
	expect_rejected("experts.layers.0.parts.2.offset", cJSON_CreateNumber(12288), "runs past",
			"down");
}

Test(manifest, missing_files)
{
	char p[4300];
	snprintf(p, sizeof p, "%s/experts/layer-001.bin", dir);
	cr_assert_eq(unlink(p), 0);
	expect_rejected(NULL, NULL, "missing", "experts/layer-001.bin");
	snprintf(p, sizeof p, "%s/resident.bin", dir);
	cr_assert_eq(unlink(p), 0);
	expect_rejected(NULL, NULL, "missing", "resident.bin");
	snprintf(p, sizeof p, "%s/manifest.json", dir);
	cr_assert_eq(unlink(p), 0);
	struct manifest m;
	error_clear();
	cr_assert_eq(manifest_load(&m, dir), -ENOENT);
	cr_assert(strstr(error_message(), "manifest.json"), "%s", error_message());
	cr_assert(strstr(error_message(), dir), "%s", error_message());
	manifest_free(&m);
}

Test(manifest, names_leaving_the_container)
{
	/* Refused by name, whether or not the target exists. */
	expect_rejected("resident.file", cJSON_CreateString("../resident.bin"), "leaves the container",
			"../resident.bin");
	expect_rejected("resident.file", cJSON_CreateString("/etc/hostname"), "leaves the container",
			"/etc/hostname");
	expect_rejected("experts.layers.1.file", cJSON_CreateString("experts/../../layer-003.bin"),
			"leaves the container", "experts/../../layer-003.bin");
	expect_rejected("experts.layers.0.file", cJSON_CreateString(".."), "leaves the container",
			"manifest.json");
}

Test(manifest, malformed_json)
{
	char p[4300];
	snprintf(p, sizeof p, "%s/manifest.json", dir);
	cr_assert_eq(tu_write(p, "{\"format\": \"colibri-container\", ", 32), 0);
	struct manifest m;
	error_clear();
	cr_assert_lt(manifest_load(&m, dir), 0);
	cr_assert(strstr(error_message(), "malformed JSON"), "%s", error_message());
	cr_assert(strstr(error_message(), p), "%s", error_message());
	manifest_free(&m);
	cr_assert_eq(tu_write(p, "[]", 2), 0);
	error_clear();
	cr_assert_lt(manifest_load(&m, dir), 0);
	cr_assert(strstr(error_message(), p), "%s", error_message());
	manifest_free(&m);
}

Test(manifest, missing_sections)
{
	expect_rejected("quant", NULL, "quant", "manifest.json");
	expect_rejected("resident", NULL, "resident", "manifest.json");
	expect_rejected("experts", NULL, "experts", "manifest.json");
	expect_rejected("model_type", NULL, "model_type", "manifest.json");
	expect_rejected("quant.experts", cJSON_CreateString("int2"), "quant", "manifest.json");
	expect_rejected("quant.group_size", cJSON_CreateNumber(-64), "quant", "manifest.json");
	expect_rejected("resident.tensors", NULL, "resident", "manifest.json");
	expect_rejected("experts.n_experts", NULL, "n_experts", "manifest.json");
}

Test(manifest, bad_checksums)
{
	expect_rejected("resident.tensors.0.xxh3", cJSON_CreateString("ff"), "xxh3", "model.norm.weight");
	expect_rejected("resident.tensors.0.xxh3", cJSON_CreateString("zz00000000000000"), "xxh3",
			"model.norm.weight");
	expect_rejected("resident.tensors.0.xxh3", NULL, "xxh3", "model.norm.weight");
	expect_rejected("experts.layers.0.xxh3.1", cJSON_CreateString("0123456789abcdeg"), "checksum",
			"manifest.json");
	/* One checksum per expert, no more, no fewer. */
	expect_rejected("experts.layers.0.xxh3.2", NULL, "malformed", "manifest.json");
	expect_rejected("experts.layers.0.parts.2", NULL, "malformed", "manifest.json");
}

/* record_bytes * n_experts must not wrap around 64 bits and so pass the
 * size check with a tiny file: here 2^52 * 4096 = 2^64 = 0 (mod 2^64).
 */
Test(manifest, record_size_overflow)
{
	struct manifest m;
	build_manifest(&m);
	m.n_expert_layers = 1;
	m.n_experts = 4096;
	m.layers[0].record_bytes = 1ull << 52;
	uint64_t *sums = calloc(4096, sizeof *sums);
	free(m.layers[0].checksums);
	m.layers[0].checksums = sums;
	cr_assert_eq(manifest_write(&m, dir), 0, "%s", error_message());
	m.n_expert_layers = 2;
	manifest_free(&m);
	/* Load this manifest as written: expect_rejected would restore the
	 * original first. */
	struct manifest back;
	error_clear();
	cr_assert_lt(manifest_load(&back, dir), 0, "a 2^52-byte record size was accepted");
	cr_expect(strstr(error_message(), "truncated") && strstr(error_message(), "experts/layer-001.bin"),
		  "unclear message: %s", error_message());
	manifest_free(&back);
}

/* Expert parts at other offsets than docs/FORMAT.md section 4 gives, each
 * of which would have a part read another's bytes (or padding): refused
 * naming the manifest and the part. */
Test(manifest, expert_parts_off_their_layout)
{
	expect_rejected("experts.layers.0.parts.0.offset", cJSON_CreateNumber(64), "part gate", "manifest.json");
	const struct edit swap[2] = {
		{ "experts.layers.0.parts.0.offset", cJSON_CreateNumber(4608) },
		{ "experts.layers.0.parts.1.offset", cJSON_CreateNumber(0) },
	};
	expect_edits_rejected(swap, 2, "part gate", "manifest.json");
	expect_rejected("experts.layers.1.parts.2.offset", cJSON_CreateNumber(4608), "part down", "manifest.json");
	expect_rejected("experts.layers.1.parts.1.offset", cJSON_CreateNumber(4672), "part up", "manifest.json");
	/* Parts named out of order (their shapes are those of the other). */
	const struct edit names[2] = {
		{ "experts.layers.0.parts.0.name", cJSON_CreateString("up") },
		{ "experts.layers.0.parts.1.name", cJSON_CreateString("gate") },
	};
	expect_edits_rejected(names, 2, "expected gate", "manifest.json");
}

/* The reference container plus model.layers.0.input_layernorm.weight, the
 * same shape and type as model.norm.weight, after the others; its
 * manifest becomes the one edits start from. */
static void write_twin_container(void)
{
	struct manifest m;
	build_manifest(&m);
	struct manifest_tensor *t = realloc(m.tensors, 4 * sizeof *t);
	cr_assert_not_null(t);
	m.tensors = t;
	set_tensor(&m.tensors[3], "model.layers.0.input_layernorm.weight", QUANT_F32, 0, 1, 128, 1, RES_BYTES, 512,
		   0x00000000000000eeull);
	m.n_tensors = 4;
	m.resident_bytes = RES_BYTES + 4096;
	write_zeros("resident.bin", RES_BYTES + 4096);
	error_clear();
	cr_assert_eq(manifest_write(&m, dir), 0, "%s", error_message());
	manifest_free(&m);
	cr_assert_eq(tu_sh("cp '%s/manifest.json' '%s/manifest.json.orig'", dir, dir), 0);
	expect_loads();
}

/* Two resident tensors of one shape whose offsets are swapped, each with
 * the other's checksum, so every checksum still matches its bytes: refused
 * at load, since tensors lie back to back in manifest order. */
Test(manifest, resident_tensors_swapped)
{
	write_twin_container();
	const struct edit swap[4] = {
		{ "resident.tensors.0.offset", cJSON_CreateNumber(RES_BYTES) },
		{ "resident.tensors.0.xxh3", cJSON_CreateString("00000000000000ee") },
		{ "resident.tensors.3.offset", cJSON_CreateNumber(0) },
		{ "resident.tensors.3.xxh3", cJSON_CreateString("00000000000000ff") },
	};
	expect_edits_rejected(swap, 4, "model.norm.weight is at offset 24576", "manifest.json");
	/* One tensor over another of its size: they overlap. */
	expect_rejected("resident.tensors.3.offset", cJSON_CreateNumber(0), "model.layers.0.input_layernorm.weight",
			"manifest.json");
}

/* resident.bytes is the end of the last tensor rounded up to 4096, not
 * merely within the file. */
Test(manifest, resident_bytes_past_the_last_tensor)
{
	write_zeros("resident.bin", RES_BYTES + 4096);
	expect_rejected("resident.bytes", cJSON_CreateNumber(RES_BYTES + 4096), "resident bytes", "manifest.json");
}

/* A name listed twice, or expert layers out of order (lookups take the
 * first entry, so the second would silently be ignored). */
Test(manifest, duplicates_and_disorder_refused)
{
	expect_rejected("resident.tensors.1.name", cJSON_CreateString("model.embed_tokens.weight"), "listed twice",
			"model.embed_tokens.weight");
	expect_rejected("experts.layers.1.layer", cJSON_CreateNumber(1), "increasing", "manifest.json");
	expect_rejected("experts.layers.1.layer", cJSON_CreateNumber(0), "increasing", "manifest.json");
}

/* ---- shards (colibri shard): the shard object and each layer's records ---- */

/* Makes dir the shard of rank 1 of 2 (weights one ulp above 1.5, and 2.25:
 * fractions must survive a round trip to the last bit, where cJSON's own
 * printing gave back 1.5) of the reference container: each expert file
 * shrunk to the records the placement gives rank 1, listed in "records".
 * Fills *out with what was written (free with manifest_free). */
static void write_shard_container(struct manifest *out)
{
	build_manifest(out);
	struct manifest_shard *sh = &out->shard;
	*sh = (struct manifest_shard){ .present = true, .ranks = 2, .rank = 1, .replicas = 1 };
	sh->weights[0] = nextafter(1.5, 2.0);
	sh->weights[1] = 2.25;
	uint64_t *holders = manifest_shard_holders(sh, 4, N_EXPERTS);
	cr_assert_not_null(holders);
	for (size_t i = 0; i < out->n_expert_layers; i++) {
		struct manifest_expert_layer *l = &out->layers[i];
		l->records = calloc(N_EXPERTS, sizeof *l->records);
		l->slot = calloc(N_EXPERTS, sizeof *l->slot);
		l->n_records = 0;
		for (int e = 0; e < N_EXPERTS; e++) {
			bool mine = holders[(size_t)l->layer * N_EXPERTS + e] >> 1 & 1;
			l->slot[e] = mine ? l->n_records : -1;
			if (mine)
				l->records[l->n_records++] = e;
		}
		write_zeros(l->file, (size_t)l->n_records * RECORD);
	}
	free(holders);
	/* Both ranks hold something of 3 experts in each layer at these weights. */
	cr_assert(out->layers[0].n_records >= 1 && out->layers[0].n_records <= 2, "%d records",
		  out->layers[0].n_records);
	error_clear();
	cr_assert_eq(manifest_write(out, dir), 0, "%s", error_message());
	cr_assert_eq(tu_sh("cp '%s/manifest.json' '%s/manifest.json.orig'", dir, dir), 0);
}

Test(manifest, shard_round_trip)
{
	struct manifest want, got;
	write_shard_container(&want);
	error_clear();
	cr_assert_eq(manifest_load(&got, dir), 0, "%s", error_message());
	cr_assert(got.shard.present);
	cr_assert_eq(got.shard.ranks, 2);
	cr_assert_eq(got.shard.rank, 1);
	cr_assert_eq(got.shard.replicas, 1);
	cr_assert_eq(got.shard.weights[0], nextafter(1.5, 2.0), "weight %.17g read back as %.17g", nextafter(1.5, 2.0),
		     got.shard.weights[0]);
	cr_assert_eq(got.shard.weights[1], 2.25);
	for (size_t i = 0; i < 2; i++) {
		const struct manifest_expert_layer *a = &got.layers[i], *b = &want.layers[i];
		cr_assert_eq(a->n_records, b->n_records, "layer %d", a->layer);
		cr_assert_eq(memcmp(a->records, b->records, (size_t)a->n_records * sizeof *a->records), 0);
		for (int e = 0; e < N_EXPERTS; e++) {
			cr_assert_eq(a->slot[e], b->slot[e], "layer %d expert %d", a->layer, e);
			/* Every checksum stays, held or not (the model id is the full
			 * container's). */
			cr_assert_eq(a->checksums[e], b->checksums[e], "layer %d expert %d", a->layer, e);
		}
	}
	manifest_free(&got);
	/* A full container has no shard and no slot table. */
	cr_assert_eq(tu_sh("rm -r '%s/experts'", dir), 0);
	write_container();
	cr_assert_eq(manifest_load(&got, dir), 0, "%s", error_message());
	cr_assert(!got.shard.present);
	cr_assert_null(got.layers[0].records);
	cr_assert_null(got.layers[0].slot);
	cr_assert_eq(got.layers[0].n_records, N_EXPERTS);
	manifest_free(&got);
	manifest_free(&want);
}

Test(manifest, shard_fields_out_of_range)
{
	struct manifest m;
	write_shard_container(&m);
	manifest_free(&m);
	expect_loads();
	expect_rejected("shard", cJSON_CreateNumber(1), "shard is not an object", "manifest.json");
	expect_rejected("shard.ranks", cJSON_CreateNumber(0), "shard.ranks", "manifest.json");
	expect_rejected("shard.ranks", cJSON_CreateNumber(65), "shard.ranks", "manifest.json");
	expect_rejected("shard.ranks", cJSON_CreateString("2"), "shard.ranks", "manifest.json");
	expect_rejected("shard.ranks", NULL, "shard.ranks", "manifest.json");
	expect_rejected("shard.rank", cJSON_CreateNumber(2), "shard.rank must be", "manifest.json");
	expect_rejected("shard.rank", cJSON_CreateNumber(-1), "shard.rank must be", "manifest.json");
	expect_rejected("shard.replicas", cJSON_CreateNumber(0), "shard.replicas", "manifest.json");
	expect_rejected("shard.replicas", cJSON_CreateNumber(3), "shard.replicas", "manifest.json");
	expect_rejected("shard.weights", cJSON_CreateNumber(1), "shard.weights", "manifest.json");
	expect_rejected("shard.weights.1", NULL, "shard.weights must list one weight per rank", "manifest.json");
	expect_rejected("shard.weights.1", cJSON_CreateNumber(0), "shard.weights[1]", "manifest.json");
	expect_rejected("shard.weights.0", cJSON_CreateNumber(-1), "shard.weights[0]", "manifest.json");
	expect_rejected("shard.weights.0", cJSON_CreateString("1"), "shard.weights[0]", "manifest.json");
}

Test(manifest, shard_records_refused)
{
	struct manifest m;
	write_shard_container(&m);
	const struct manifest_expert_layer *l0 = &m.layers[0];
	int first = l0->records[0];
	/* Out of range, repeated, descending, not a list. */
	cJSON *a = cJSON_CreateArray();
	cJSON_AddItemToArray(a, cJSON_CreateNumber(N_EXPERTS));
	expect_rejected("experts.layers.0.records", a, "strictly ascending", "manifest.json");
	int twice[2] = { first, first };
	expect_rejected("experts.layers.0.records", cJSON_CreateIntArray(twice, 2), "strictly ascending",
			"manifest.json");
	int down[2] = { 2, 1 };
	expect_rejected("experts.layers.0.records", cJSON_CreateIntArray(down, 2), "strictly ascending",
			"manifest.json");
	expect_rejected("experts.layers.0.records", cJSON_CreateNumber(first), "records must be a list",
			"manifest.json");
	int all4[4] = { 0, 1, 2, 3 };
	expect_rejected("experts.layers.0.records", cJSON_CreateIntArray(all4, 4), "records must be a list",
			"manifest.json");
	/* Records in one layer only, records without a shard, a shard without
	 * records; the files are long enough for every expert, so only the
	 * rule can refuse them. */
	write_zeros("experts/layer-001.bin", (size_t)N_EXPERTS * RECORD);
	write_zeros("experts/layer-003.bin", (size_t)N_EXPERTS * RECORD);
	expect_rejected("experts.layers.1.records", NULL, "belongs to every expert layer of a shard", "manifest.json");
	expect_rejected("shard", NULL, "belongs to every expert layer of a shard", "manifest.json");
	const struct edit none[2] = { { "experts.layers.0.records", NULL }, { "experts.layers.1.records", NULL } };
	expect_edits_rejected(none, 2, "a shard lists the records of every expert layer", "manifest.json");
	/* Well formed, but not what the placement gives the rank. */
	expect_rejected("shard.rank", cJSON_CreateNumber(0), "records and shard do not belong together",
			"manifest.json");
	expect_rejected("shard.weights.0", cJSON_CreateNumber(100), "records and shard do not belong together",
			"manifest.json");
	/* A shard has no mirrors. */
	cJSON *ms = cJSON_CreateArray(), *mo = cJSON_CreateObject();
	cJSON_AddStringToObject(mo, "dir", "/nonexistent-mirror");
	int layers[1] = { 1 };
	cJSON_AddItemToObject(mo, "layers", cJSON_CreateIntArray(layers, 1));
	cJSON_AddItemToArray(ms, mo);
	expect_rejected("mirrors", ms, "a shard has no mirrors", "manifest.json");
	manifest_free(&m);
}

/* A shard's file holds its records, not n_experts of them. */
Test(manifest, shard_file_size_is_its_records)
{
	struct manifest m;
	write_shard_container(&m);
	const struct manifest_expert_layer *l = &m.layers[1];
	char p[4300];
	snprintf(p, sizeof p, "%s/%s", dir, l->file);
	expect_loads();
	cr_assert_eq(truncate(p, (off_t)l->n_records * RECORD - 4096), 0);
	expect_rejected(NULL, NULL, "truncated", l->file);
	manifest_free(&m);
}
