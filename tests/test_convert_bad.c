/*
 * test_convert_bad — `colibri convert` on bad input, run as a separate
 * process (tu_colibri()) on copies of the checkpoints of
 * tools/make_fixtures.sh edited into scratch folders: a missing or corrupt
 * config.json, an unknown model type, a missing resident, expert or FP8
 * scale tensor (in a Qwen3.5 vision-language checkpoint too, named as it
 * would be there), a wrong shape, an unsupported dtype, a truncated shard,
 * header offsets past the end, bad --group-size and --quant values. Each
 * exits non-zero with one line naming the file or tensor and leaves
 * neither OUT_DIR nor a temporary sibling. An existing OUT_DIR is kept
 * without --force; --force refuses folders that are not containers (also
 * with a manifest.json of {}), containers of another format version, and
 * regular files; NaN or infinite weights and FP8 scales are refused; an
 * OUT_DIR that cannot be published is refused before any work; a failure
 * after the data files are written and an interrupted conversion (SIGINT)
 * leave nothing; under nohup, SIGHUP does not interrupt.
 * (Successful conversions and their values: tests/test_convert.c.)
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <time.h>

#include "compute/quant.h"
#include "engine/model/manifest.h"
#include "base/error.h"
#include "tests/convert_fixture.h"

TestSuite(convert_bad, .init = setup, .fini = teardown);

static void assert_one_line(const char *log)
{
	size_t n = strlen(log);
	cr_assert(n > 1 && log[n - 1] == '\n', "expected one line on stderr, got \"%s\"", log);
	cr_assert_null(memchr(log, '\n', n - 1), "expected one line on stderr, got \"%s\"", log);
}

/* Runs convert hf -> ws/out with args; it must fail with one line on stderr
 * containing every needle, and leave nothing named out* in ws. */
static void expect_failure(const char *hf, const char *args, const char *needle1, const char *needle2)
{
	char out[PATH_MAX + 16], names[1024];
	snprintf(out, sizeof out, "%s/out", ws);
	int st = convert(hf, out, args);
	char *log = read_file(ws, "log.txt", NULL);
	cr_assert_neq(st, 0, "convert %s %s succeeded", hf, args);
	cr_assert_neq(st, -1, "convert crashed: %s", log);
	cr_assert_lt(st, 128, "convert died of a signal (status %d): %s", st, log);
	assert_one_line(log);
	cr_assert(strstr(log, needle1), "message lacks \"%s\": %s", needle1, log);
	if (needle2)
		cr_assert(strstr(log, needle2), "message lacks \"%s\": %s", needle2, log);
	cr_assert_eq(out_entries(names, sizeof names), 0, "left behind: %s", names);
	free(log);
}

enum edit_op { EDIT_DROP, EDIT_HALVE_ROWS, EDIT_RETYPE_I32, EDIT_PAST_END };

/* One change to tensor `name` of HF_DIR/model.safetensors:
 *   EDIT_DROP        remove it
 *   EDIT_HALVE_ROWS  keep its first half of rows (a shape mismatch)
 *   EDIT_RETYPE_I32  store it as I32 of the same shape
 *   EDIT_PAST_END    move its data_offsets past the end of the data */
static void edit_checkpoint(const char *hf_dir, enum edit_op op, const char *name)
{
	struct st_edit e;
	st_edit_open(&e, hf_dir);
	cJSON *t = st_edit_entry(&e, name);
	cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
	cr_assert(op == EDIT_DROP || cJSON_GetArraySize(shape) == 2, "%s is not 2-D", name);
	int64_t rows = (int64_t)cJSON_GetArrayItem(shape, 0)->valuedouble;
	int64_t cols = op == EDIT_DROP ? 0 : (int64_t)cJSON_GetArrayItem(shape, 1)->valuedouble;
	uint64_t begin = st_edit_num(t, "data_offsets", 0), end = st_edit_num(t, "data_offsets", 1);
	const char *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype")->valuestring;
	char dt[16];
	snprintf(dt, sizeof dt, "%s", dtype);
	switch (op) {
	case EDIT_DROP:
		cJSON_DeleteItemFromObjectCaseSensitive(e.h, name);
		break;
	case EDIT_HALVE_ROWS:
		st_edit_set(t, dt, rows / 2, cols, begin, begin + (end - begin) / 2);
		break;
	case EDIT_RETYPE_I32: {
		uint64_t at = st_edit_append(&e, NULL, (size_t)(rows * cols * 4));
		st_edit_set(t, "I32", rows, cols, at, at + (uint64_t)(rows * cols * 4));
		break;
	}
	case EDIT_PAST_END: {
		uint64_t at = st_edit_data_bytes(&e) + 4096;
		st_edit_set(t, dt, rows, cols, at, at + (end - begin));
		break;
	}
	}
	st_edit_save(&e);
}

Test(convert_bad, missing_config)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	char p[PATH_MAX + 32];
	snprintf(p, sizeof p, "%s/config.json", hf);
	cr_assert_eq(unlink(p), 0);
	expect_failure(hf, "", p, NULL);
}

Test(convert_bad, missing_hf_dir)
{
	char hf[PATH_MAX + 16];
	snprintf(hf, sizeof hf, "%s/no-such-checkpoint", ws);
	expect_failure(hf, "", "no-such-checkpoint", NULL);
}

Test(convert_bad, config_not_json)
{
	char hf[PATH_MAX], p[PATH_MAX + 32];
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	snprintf(p, sizeof p, "%s/config.json", hf);
	cr_assert_eq(tu_write(p, "{\"model_type\": \"qwen3_moe\",", 27), 0);
	expect_failure(hf, "", p, "JSON");
}

Test(convert_bad, unknown_model_type)
{
	char hf[PATH_MAX], p[PATH_MAX + 32];
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	snprintf(p, sizeof p, "%s/config.json", hf);
	char *text = tu_read(p, NULL);
	cJSON *j = cJSON_Parse(text);
	free(text);
	cJSON_ReplaceItemInObject(j, "model_type", cJSON_CreateString("gpt_neox_moe"));
	text = cJSON_Print(j);
	cJSON_Delete(j);
	cr_assert_eq(tu_write(p, text, strlen(text)), 0);
	free(text);
	expect_failure(hf, "", "config.json", "gpt_neox_moe");
}

/* The vision-language Qwen3.5 layout: a missing DeltaNet tensor is named as
 * colibri stores it and as the checkpoint would hold it; a wrong shape
 * names the checkpoint's tensor; a config whose text model is missing is
 * refused naming text_config, each in one line. */
Test(convert_bad, hybrid_checkpoint_faults)
{
	char hf[PATH_MAX], p[PATH_MAX + 32];
	copy_fixture(hf, sizeof hf, "qwen3_5_moe");
	edit_checkpoint(hf, EDIT_DROP, "model.language_model.layers.1.linear_attn.in_proj_b.weight");
	expect_failure(hf, "", "model.layers.1.linear_attn.in_proj_b.weight",
		       "model.language_model.layers.1.linear_attn.in_proj_b.weight");
	tu_rmrf(hf);
	copy_fixture(hf, sizeof hf, "qwen3_5_moe");
	edit_checkpoint(hf, EDIT_HALVE_ROWS, "model.language_model.layers.0.linear_attn.in_proj_qkv.weight");
	expect_failure(hf, "", "model.language_model.layers.0.linear_attn.in_proj_qkv.weight", "shape");
	tu_rmrf(hf);
	copy_fixture(hf, sizeof hf, "qwen3_5_moe");
	snprintf(p, sizeof p, "%s/config.json", hf);
	char *text = tu_read(p, NULL);
	cJSON *j = cJSON_Parse(text);
	free(text);
	cJSON_DeleteItemFromObjectCaseSensitive(j, "text_config");
	text = cJSON_Print(j);
	cJSON_Delete(j);
	cr_assert_eq(tu_write(p, text, strlen(text)), 0);
	free(text);
	expect_failure(hf, "", "config.json", "text_config");
}

Test(convert_bad, missing_resident_tensor)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	edit_checkpoint(hf, EDIT_DROP, "model.layers.2.self_attn.k_proj.weight");
	expect_failure(hf, "", "model.layers.2.self_attn.k_proj.weight", NULL);
}

Test(convert_bad, missing_expert_tensor)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	edit_checkpoint(hf, EDIT_DROP, "model.layers.2.mlp.experts.5.up_proj.weight");
	expect_failure(hf, "", "model.layers.2.mlp.experts.5.up_proj.weight", NULL);
}

Test(convert_bad, missing_fp8_scale)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "qwen3_moe_fp8");
	edit_checkpoint(hf, EDIT_DROP, "model.layers.0.self_attn.q_proj.weight_scale_inv");
	expect_failure(hf, "", "model.layers.0.self_attn.q_proj.weight_scale_inv", NULL);
}

Test(convert_bad, shape_mismatch)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	edit_checkpoint(hf, EDIT_HALVE_ROWS, "model.layers.0.self_attn.q_proj.weight");
	expect_failure(hf, "", "model.layers.0.self_attn.q_proj.weight", "shape");
}

Test(convert_bad, expert_shape_mismatch)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "olmoe");
	edit_checkpoint(hf, EDIT_HALVE_ROWS, "model.layers.1.mlp.experts.3.down_proj.weight");
	expect_failure(hf, "", "model.layers.1.mlp.experts.3.down_proj.weight", "shape");
}

Test(convert_bad, unsupported_dtype)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	edit_checkpoint(hf, EDIT_RETYPE_I32, "model.layers.0.self_attn.o_proj.weight");
	expect_failure(hf, "", "model.layers.0.self_attn.o_proj.weight", "I32");
}

Test(convert_bad, unsupported_expert_dtype)
{
	char hf[PATH_MAX];
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	edit_checkpoint(hf, EDIT_RETYPE_I32, "model.layers.0.mlp.experts.1.down_proj.weight");
	expect_failure(hf, "", "model.layers.0.mlp.experts.1.down_proj.weight", "I32");
}

Test(convert_bad, truncated_shard)
{
	char hf[PATH_MAX], p[PATH_MAX + 64];
	copy_fixture(hf, sizeof hf, "mixtral");
	snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", hf);
	struct stat sb;
	cr_assert_eq(stat(p, &sb), 0);
	cr_assert_eq(truncate(p, sb.st_size / 2), 0);
	expect_failure(hf, "", p, NULL);
}

Test(convert_bad, header_offsets_past_end)
{
	char hf[PATH_MAX], p[PATH_MAX + 32];
	const char *victim = "model.layers.1.self_attn.v_proj.weight";
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	edit_checkpoint(hf, EDIT_PAST_END, victim);
	snprintf(p, sizeof p, "%s/model.safetensors", hf);
	expect_failure(hf, "", p, victim);
}

Test(convert_bad, group_size_48_refused)
{
	char hf[PATH_MAX];
	fixture_path(hf, sizeof hf, "qwen3_moe");
	expect_failure(hf, "--group-size 48", "group-size", "48");
	expect_failure(hf, "--group-size 0", "group-size", NULL);
	expect_failure(hf, "--group-size 64x", "group-size", NULL);
}

Test(convert_bad, group_size_not_dividing_experts)
{
	/* Expert down_proj has 64 inputs: --group-size 128 cannot hold it. */
	char hf[PATH_MAX];
	fixture_path(hf, sizeof hf, "qwen3_moe");
	expect_failure(hf, "--quant int4 --group-size 128", "128", "down");
}

Test(convert_bad, unknown_quant)
{
	char hf[PATH_MAX];
	fixture_path(hf, sizeof hf, "qwen3_moe");
	expect_failure(hf, "--quant int3", "int3", NULL);
}

Test(convert_bad, existing_out_dir_needs_force)
{
	char hf[PATH_MAX], out[PATH_MAX + 16], p[PATH_MAX + 64], names[1024];
	fixture_path(hf, sizeof hf, "qwen3_moe");
	snprintf(out, sizeof out, "%s/out", ws);
	cr_assert_eq(convert(hf, out, "--quiet"), 0);
	snprintf(p, sizeof p, "%s/manifest.json", out);
	char *before = tu_read(p, NULL);
	snprintf(p, sizeof p, "%s/marker.txt", out);
	cr_assert_eq(tu_write(p, "keep", 4), 0);

	int st = convert(hf, out, "--quant f32");
	char *log = read_file(ws, "log.txt", NULL);
	cr_assert_neq(st, 0, "an existing container was replaced without --force");
	assert_one_line(log);
	cr_assert(strstr(log, out) && strstr(log, "--force"), "%s", log);
	free(log);
	char *marker = tu_read(p, NULL);
	cr_assert(marker && !strcmp(marker, "keep"), "old content was touched");
	free(marker);
	snprintf(p, sizeof p, "%s/manifest.json", out);
	char *after = tu_read(p, NULL);
	cr_assert(after && !strcmp(before, after), "old manifest was changed");
	free(before);
	free(after);
	cr_assert_eq(out_entries(names, sizeof names), 1, "left behind: %s", names);
	struct manifest m;
	cr_assert_eq(manifest_load(&m, out), 0, "%s", error_message());
	cr_assert_eq(m.expert_quant, QUANT_INT4);
	manifest_free(&m);
}

Test(convert_bad, force_refuses_non_container)
{
	char hf[PATH_MAX], out[PATH_MAX + 16], p[PATH_MAX + 64], names[1024];
	fixture_path(hf, sizeof hf, "qwen3_moe");
	snprintf(out, sizeof out, "%s/out", ws);
	cr_assert_eq(mkdir(out, 0755), 0);
	snprintf(p, sizeof p, "%s/precious.txt", out);
	cr_assert_eq(tu_write(p, "data", 4), 0);
	int st = convert(hf, out, "--force");
	char *log = read_file(ws, "log.txt", NULL);
	cr_assert_neq(st, 0, "--force replaced a folder that is not a container");
	assert_one_line(log);
	cr_assert(strstr(log, out), "%s", log);
	free(log);
	char *d = tu_read(p, NULL);
	cr_assert(d && !strcmp(d, "data"));
	free(d);
	cr_assert_eq(out_entries(names, sizeof names), 1, "left behind: %s", names);

	/* A regular file in the way is not replaced either. */
	tu_rmrf(out);
	cr_assert_eq(tu_write(out, "file", 4), 0);
	st = convert(hf, out, "--force");
	log = read_file(ws, "log.txt", NULL);
	cr_assert_neq(st, 0);
	assert_one_line(log);
	free(log);
	d = tu_read(out, NULL);
	cr_assert(d && !strcmp(d, "file"));
	free(d);
	cr_assert_eq(out_entries(names, sizeof names), 1, "left behind: %s", names);
}

/* A folder holding a manifest.json that is no container of this colibri
 * ("{}" here) and other files is not ours: --force refuses it naming the
 * folder, and every file stays. */
Test(convert_bad, force_keeps_a_folder_with_a_foreign_manifest)
{
	char hf[PATH_MAX], out[PATH_MAX + 16], p[PATH_MAX + 64], names[1024];
	fixture_path(hf, sizeof hf, "qwen3_moe");
	snprintf(out, sizeof out, "%s/out", ws);
	cr_assert_eq(mkdir(out, 0755), 0);
	snprintf(p, sizeof p, "%s/manifest.json", out);
	cr_assert_eq(tu_write(p, "{}", 2), 0);
	snprintf(p, sizeof p, "%s/thesis.tex", out);
	cr_assert_eq(tu_write(p, "mine", 4), 0);
	int st = convert(hf, out, "--force --quiet");
	char *log = read_file(ws, "log.txt", NULL);
	cr_assert_neq(st, 0, "--force replaced a folder whose manifest.json is {}");
	assert_one_line(log);
	cr_assert(strstr(log, out) && strstr(log, "not a container"), "%s", log);
	free(log);
	char *d = read_file(out, "thesis.tex", NULL);
	cr_assert_str_eq(d, "mine");
	free(d);
	d = read_file(out, "manifest.json", NULL);
	cr_assert_str_eq(d, "{}");
	free(d);
	cr_assert_eq(out_entries(names, sizeof names), 1, "left behind: %s", names);
}

/* A container of a format version this colibri does not read may hold
 * anything: --force refuses to replace it and says so. */
Test(convert_bad, force_keeps_a_container_of_another_version)
{
	char hf[PATH_MAX], out[PATH_MAX + 16], names[1024];
	fixture_path(hf, sizeof hf, "qwen3_moe");
	snprintf(out, sizeof out, "%s/out", ws);
	cr_assert_eq(convert(hf, out, "--quiet"), 0);
	cr_assert_eq(tu_sh("sed -i 's/\"version\":%d,/\"version\":1,/' '%s/manifest.json'", MANIFEST_VERSION, out), 0);
	char *before = read_file(out, "manifest.json", NULL);
	cr_assert(strstr(before, "\"version\":1,"), "%s", before);
	int st = convert(hf, out, "--force --quiet");
	char *log = read_file(ws, "log.txt", NULL);
	cr_assert_neq(st, 0, "--force replaced a container of format version 1");
	assert_one_line(log);
	cr_assert(strstr(log, out) && strstr(log, "version 1") && strstr(log, "remove it yourself"), "%s", log);
	free(log);
	char *after = read_file(out, "manifest.json", NULL);
	cr_assert_str_eq(before, after);
	free(before);
	free(after);
	cr_assert_eq(out_entries(names, sizeof names), 1, "left behind: %s", names);
}

/* Points tensor `name` of hf_dir/model.safetensors at a copy of its data,
 * appended, whose element i holds the size bytes at v (little-endian). */
static void poison_element(const char *hf_dir, const char *name, size_t i, const void *v, size_t size)
{
	struct st_edit e;
	st_edit_open(&e, hf_dir);
	cJSON *t = st_edit_entry(&e, name);
	uint64_t begin = st_edit_num(t, "data_offsets", 0), end = st_edit_num(t, "data_offsets", 1);
	cr_assert_leq((i + 1) * size, end - begin, "%s has no element %zu", name, i);
	uint8_t *copy = malloc(end - begin);
	cr_assert_not_null(copy);
	memcpy(copy, e.buf + 8 + e.hlen + begin, end - begin);
	memcpy(copy + i * size, v, size);
	uint64_t at = st_edit_append(&e, copy, end - begin);
	free(copy);
	cJSON *off = cJSON_CreateArray();
	cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
	cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(at + end - begin)));
	cJSON_ReplaceItemInObjectCaseSensitive(t, "data_offsets", off);
	st_edit_save(&e);
}

/* A NaN or an infinity in a weight, or in an FP8 block scale, cannot be
 * quantized: refused naming the file and the tensor, nothing written. */
Test(convert_bad, nan_and_inf_weights_refused)
{
	char hf[PATH_MAX], p[PATH_MAX + 32];
	const uint16_t bf16_nan = 0x7fc0, bf16_inf = 0xff80;
	const uint8_t e4m3_nan = 0x7f;
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	snprintf(p, sizeof p, "%s/model.safetensors", hf);
	poison_element(hf, "model.layers.1.self_attn.o_proj.weight", 37, &bf16_nan, 2);
	expect_failure(hf, "", "model.layers.1.self_attn.o_proj.weight", p);
	expect_failure(hf, "", "NaN", NULL);
	tu_rmrf(hf);
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	poison_element(hf, "model.layers.2.mlp.experts.3.down_proj.weight", 5, &bf16_inf, 2);
	expect_failure(hf, "", "model.layers.2.mlp.experts.3.down_proj.weight", p);
	expect_failure(hf, "", "infinite", NULL);
	tu_rmrf(hf);
	copy_fixture(hf, sizeof hf, "qwen3_moe_fp8");
	poison_element(hf, "model.layers.0.mlp.experts.1.up_proj.weight", 9, &e4m3_nan, 1);
	expect_failure(hf, "", "model.layers.0.mlp.experts.1.up_proj.weight", p);
}

/* An FP8 block scale of +Inf: refused naming the scale tensor, and an
 * existing container that --force would replace is left as it was. */
Test(convert_bad, inf_fp8_scale_refused)
{
	char hf[PATH_MAX], out[PATH_MAX + 16], p[PATH_MAX + 32], names[1024];
	const float inf = INFINITY;
	fixture_path(hf, sizeof hf, "qwen3_moe");
	snprintf(out, sizeof out, "%s/out", ws);
	cr_assert_eq(convert(hf, out, "--quiet"), 0);
	char *before = read_file(out, "manifest.json", NULL);
	copy_fixture(hf, sizeof hf, "qwen3_moe_fp8");
	snprintf(p, sizeof p, "%s/model.safetensors", hf);
	poison_element(hf, "model.layers.0.self_attn.q_proj.weight_scale_inv", 1, &inf, 4);
	int st = convert(hf, out, "--force");
	char *log = read_file(ws, "log.txt", NULL);
	cr_assert_neq(st, 0, "an infinite scale was accepted");
	assert_one_line(log);
	cr_assert(strstr(log, p) && strstr(log, "model.layers.0.self_attn.q_proj.weight_scale_inv") &&
		  strstr(log, "infinite"), "%s", log);
	free(log);
	char *after = read_file(out, "manifest.json", NULL);
	cr_assert_str_eq(before, after, "the old container was replaced");
	free(before);
	free(after);
	cr_assert_eq(out_entries(names, sizeof names), 1, "left behind: %s", names);
}

/* An OUT_DIR that cannot be published ("", ".", a missing parent, a parent
 * that is a file) is refused before any weight is read: here the
 * checkpoint also fails late (tokenizer.json is a folder), and the message
 * must be about OUT_DIR, with nothing made in the working folder. */
Test(convert_bad, unusable_out_dir_refused_first)
{
	char hf[PATH_MAX], p[PATH_MAX + 32], out[PATH_MAX + 32];
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	snprintf(p, sizeof p, "%s/tokenizer.json", hf);
	cr_assert_eq(mkdir(p, 0755), 0);
	snprintf(p, sizeof p, "%s/file", ws);
	cr_assert_eq(tu_write(p, "x", 1), 0);
	const char *outs[] = { "", ".", "out/..", "none/out", "file/out" };
	const char *names[] = { "\"\"", "\".\"", "\"out/..\"", "none", "file" };
	for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
		snprintf(out, sizeof out, "%s", outs[i]);
		int st = tu_sh("cd '%s' && '%s' convert '%s' '%s' >/dev/null 2>'%s/log.txt'", ws, tu_colibri(), hf, out,
			       ws);
		char *log = read_file(ws, "log.txt", NULL);
		cr_assert(st > 0 && st < 128, "convert '%s': status %d: %s", out, st, log);
		assert_one_line(log);
		cr_assert(!strstr(log, "tokenizer.json"), "convert '%s' did the work first: %s", out, log);
		cr_assert(strstr(log, names[i]), "convert '%s': message does not name it: %s", out, log);
		free(log);
		cr_assert_neq(tu_sh("ls -a '%s' | grep -q tmp-", ws), 0, "convert '%s' left a temporary folder", out);
	}
}

/* A failure after the data files are written (here: tokenizer.json is a
 * folder, found only when the side files are copied) still removes the
 * temporary folder. */
Test(convert_bad, late_failure_leaves_nothing)
{
	char hf[PATH_MAX], p[PATH_MAX + 32];
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	snprintf(p, sizeof p, "%s/tokenizer.json", hf);
	cr_assert_eq(mkdir(p, 0755), 0);
	expect_failure(hf, "", p, NULL);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Starts `colibri convert HF OUT --quiet` with stderr in ws/log.txt and
 * SIGINT caught as in a terminal; with ignore_hup, SIGHUP is ignored when
 * it starts, as under nohup. */
static pid_t convert_start(const char *hf, const char *out, bool ignore_hup)
{
	char logp[PATH_MAX + 16];
	snprintf(logp, sizeof logp, "%s/log.txt", ws);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 2);
		/* A suite started in the background of a script inherits SIGINT
		 * ignored, which convert rightly keeps; these tests send it. */
		signal(SIGINT, SIG_DFL);
		signal(SIGHUP, ignore_hup ? SIG_IGN : SIG_DFL);
		execl(tu_colibri(), tu_colibri(), "convert", hf, out, "--quiet", (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* Waits (30 s at most) until convert pid has made its temporary folder
 * ws/out.tmp-XXXXXX, whose path goes into tmp. */
static void wait_for_tmp(pid_t pid, char *tmp, size_t len)
{
	tmp[0] = 0;
	for (double t0 = now_s(); !tmp[0] && now_s() - t0 < 30; usleep(200)) {
		DIR *d = opendir(ws);
		struct dirent *de;
		while ((de = readdir(d)))
			if (strncmp(de->d_name, "out.tmp-", 8) == 0)
				snprintf(tmp, len, "%s/%s", ws, de->d_name);
		closedir(d);
		int st;
		cr_assert_eq(waitpid(pid, &st, WNOHANG), 0, "convert exited before it was signalled");
	}
	cr_assert(tmp[0], "no temporary folder appeared within 30 s");
}

/* SIGINT during a conversion. To interrupt at a known point, tokenizer.json
 * is a FIFO with no writer: the converter blocks opening it after writing
 * resident.bin and the expert files into its temporary folder. The test
 * waits for that folder, then sends SIGINT (again every second, in case the
 * first one landed before the block) until the process exits. */
Test(convert_bad, interrupt_leaves_nothing)
{
	char hf[PATH_MAX], out[PATH_MAX + 16], fifo[PATH_MAX + 32], tmp[PATH_MAX + 64], names[1024];
	copy_fixture(hf, sizeof hf, "qwen3_moe");
	snprintf(fifo, sizeof fifo, "%s/tokenizer.json", hf);
	cr_assert_eq(mkfifo(fifo, 0644), 0);
	snprintf(out, sizeof out, "%s/out", ws);
	pid_t pid = convert_start(hf, out, false);
	wait_for_tmp(pid, tmp, sizeof tmp);
	int st = 0;
	pid_t w = 0;
	for (int tries = 0; tries < 20 && w == 0; tries++) {
		kill(pid, SIGINT);
		double t1 = now_s();
		while ((w = waitpid(pid, &st, WNOHANG)) == 0 && now_s() - t1 < 1.0)
			usleep(2000);
	}
	if (w == 0) {
		/* Where it is stuck, for the report: its kernel wait channel and
		 * its signal masks. */
		char p[64], wchan[64] = "?", status[4096] = "";
		snprintf(p, sizeof p, "/proc/%d/wchan", (int)pid);
		FILE *f = fopen(p, "r");
		if (f) {
			if (!fgets(wchan, sizeof wchan, f))
				wchan[0] = 0;
			fclose(f);
		}
		snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
		if ((f = fopen(p, "r"))) {
			size_t n = fread(status, 1, sizeof status - 1, f);
			status[n] = 0;
			fclose(f);
		}
		const char *sig = strstr(status, "SigBlk:");
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		cr_assert_fail("convert did not stop on SIGINT (waiting in %s; %.120s)", wchan, sig ? sig : "");
	}
	/* It exits with an error, or (if a later SIGINT arrives after it
	 * restored the default handler on its way out) dies of SIGINT. */
	cr_assert(WIFSIGNALED(st) ? WTERMSIG(st) == SIGINT : WEXITSTATUS(st) != 0,
		  "unexpected status %d", st);
	if (WIFEXITED(st)) {
		char *log = read_file(ws, "log.txt", NULL);
		assert_one_line(log);
		free(log);
	}
	cr_assert_eq(out_entries(names, sizeof names), 0, "left behind: %s", names);
}

/* Started with SIGHUP ignored (nohup), convert keeps it ignored. To send
 * SIGHUP mid-conversion, the test stops the process (SIGSTOP) once its
 * temporary folder exists and checks that manifest.json is not written yet
 * (a SIGHUP caught before that point interrupts the conversion), sends
 * SIGHUP, and lets it continue: it must publish the container. */
Test(convert_bad, sighup_ignored_under_nohup)
{
	char hf[PATH_MAX], out[PATH_MAX + 16], tmp[PATH_MAX + 64], names[1024];
	fixture_path(hf, sizeof hf, "qwen3_moe");
	snprintf(out, sizeof out, "%s/out", ws);
	bool early = false;
	int st = 0;
	for (int tries = 0; tries < 5 && !early; tries++) {
		tu_rmrf(out);
		pid_t pid = convert_start(hf, out, true);
		wait_for_tmp(pid, tmp, sizeof tmp);
		kill(pid, SIGSTOP);
		cr_assert_eq(waitpid(pid, &st, WUNTRACED), pid);
		char mpath[PATH_MAX + 128];
		snprintf(mpath, sizeof mpath, "%s/manifest.json", tmp);
		early = WIFSTOPPED(st) && access(mpath, F_OK) != 0;
		early = early && tu_sh("ls -a '%s' | grep -q '^manifest.json.tmp'", tmp) != 0;
		kill(pid, SIGHUP);
		kill(pid, SIGCONT);
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		char *log = read_file(ws, "log.txt", NULL);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "convert failed after SIGHUP (status %d): %s", st, log);
		free(log);
	}
	if (!early)
		cr_skip_test("the conversion was past its manifest each time it was stopped");
	struct manifest m;
	error_clear();
	cr_assert_eq(manifest_load(&m, out), 0, "%s", error_message());
	manifest_free(&m);
	cr_assert_eq(out_entries(names, sizeof names), 1, "left behind: %s", names);
}

/* A released-layout DeepSeek-V4 checkpoint of tests/v4_checkpoint.py (FP8
 * weights, FP4 experts) in ws/hf. */
static void v4_checkpoint(char *hf, size_t n)
{
	snprintf(hf, n, "%s/hf", ws);
	tu_rmrf(hf);
	cr_assert_eq(tu_sh("mkdir -p '%s' && /usr/bin/python3 '%s/tests/v4_checkpoint.py' '%s' released fp8 fp4", hf,
			   tu_repo(), hf), 0);
}

/* DeepSeek-V4's released layout: a missing tensor is named as the
 * container names it, a missing FP4 scale, a wrong FP4 shape and a tid2eid
 * entry that is no expert are refused naming the checkpoint's tensor, each
 * in one line and leaving nothing behind. */
Test(convert_bad, deepseek_v4_faults)
{
	char hf[PATH_MAX], p[PATH_MAX + 32];
	v4_checkpoint(hf, sizeof hf);
	snprintf(p, sizeof p, "%s/model.safetensors", hf);
	edit_checkpoint(hf, EDIT_DROP, "layers.1.attn.wkv.weight");
	expect_failure(hf, "", "model.layers.1.self_attn.kv_proj.weight", "missing");
	v4_checkpoint(hf, sizeof hf);
	edit_checkpoint(hf, EDIT_DROP, "layers.2.ffn.experts.1.w2.scale");
	expect_failure(hf, "", "layers.2.ffn.experts.1.w2.weight", "FP4");
	v4_checkpoint(hf, sizeof hf);
	edit_checkpoint(hf, EDIT_HALVE_ROWS, "layers.2.ffn.experts.0.w1.scale");
	expect_failure(hf, "", "layers.2.ffn.experts.0.w1.scale", "block scales");
	v4_checkpoint(hf, sizeof hf);
	edit_checkpoint(hf, EDIT_HALVE_ROWS, "layers.0.ffn.experts.3.w3.weight");
	expect_failure(hf, "", "layers.0.ffn.experts.3.w3.weight", "shape");
	v4_checkpoint(hf, sizeof hf);
	const int64_t not_an_expert = 4; /* the checkpoint has 4 experts */
	poison_element(hf, "layers.0.ffn.gate.tid2eid", 11, &not_an_expert, 8);
	expect_failure(hf, "", "layers.0.ffn.gate.tid2eid", p);
	expect_failure(hf, "", "[0, 4)", NULL);
	v4_checkpoint(hf, sizeof hf);
	edit_checkpoint(hf, EDIT_DROP, "layers.0.ffn.gate.tid2eid");
	expect_failure(hf, "", "model.layers.0.mlp.gate.tid2eid", NULL);
	/* An MTP block there in part is refused, naming what it lacks, not
	 * converted without drafting as a checkpoint without one is. */
	v4_checkpoint(hf, sizeof hf);
	edit_checkpoint(hf, EDIT_DROP, "mtp.0.e_proj.weight");
	expect_failure(hf, "", "model.layers.3.e_proj.weight", "mtp.0");
	v4_checkpoint(hf, sizeof hf);
	edit_checkpoint(hf, EDIT_DROP, "mtp.0.ffn.experts.2.w1.weight");
	expect_failure(hf, "", "model.layers.3.mlp.experts.2.gate_proj.weight", "mtp.0");
}

/* gpt-oss's released MXFP4 experts: a missing *_scales, a missing expert
 * tensor in both layouts, a scale byte of 255 (NaN in e8m0) copied as is
 * (mxfp4, the default for them) or dequantized (--quant bf16), a missing
 * sink: each
 * refused in one line naming the tensor, nothing left behind. */
Test(convert_bad, gpt_oss_faults)
{
	char hf[PATH_MAX], p[PATH_MAX + 32];
	const uint8_t e8m0_nan = 0xff;
	copy_fixture(hf, sizeof hf, "gpt_oss_mxfp4");
	snprintf(p, sizeof p, "%s/model.safetensors", hf);
	edit_checkpoint(hf, EDIT_DROP, "model.layers.1.mlp.experts.down_proj_scales");
	expect_failure(hf, "", "model.layers.1.mlp.experts.down_proj_scales is missing", "MXFP4");
	tu_rmrf(hf);
	copy_fixture(hf, sizeof hf, "gpt_oss_mxfp4");
	edit_checkpoint(hf, EDIT_DROP, "model.layers.2.mlp.experts.gate_up_proj_blocks");
	expect_failure(hf, "", "missing tensor model.layers.2.mlp.experts.gate_up_proj_blocks", "(dequantized)");
	tu_rmrf(hf);
	copy_fixture(hf, sizeof hf, "gpt_oss_mxfp4");
	poison_element(hf, "model.layers.3.mlp.experts.gate_up_proj_scales", 1000, &e8m0_nan, 1);
	/* Scale 1000 of [8, 192, 4]: expert 1, row 58, block 0. */
	expect_failure(hf, "--quiet", "model.layers.3.mlp.experts.gate_up_proj_scales: the scale of expert 1, row 58",
		       "255");
	expect_failure(hf, "--quiet --quant bf16", "model.layers.3.mlp.experts.gate_up_proj_blocks", p);
	tu_rmrf(hf);
	copy_fixture(hf, sizeof hf, "gpt_oss_bf16");
	edit_checkpoint(hf, EDIT_DROP, "model.layers.0.mlp.experts.down_proj");
	expect_failure(hf, "--quant bf16", "missing tensor model.layers.0.mlp.experts.down_proj_blocks", NULL);
	tu_rmrf(hf);
	copy_fixture(hf, sizeof hf, "gpt_oss_bf16");
	edit_checkpoint(hf, EDIT_DROP, "model.layers.1.self_attn.sinks");
	expect_failure(hf, "--quant bf16", "model.layers.1.self_attn.sinks", "missing");
}
