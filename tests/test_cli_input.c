/*
 * test_cli_input — what the command line does with bad or unusual input:
 *  - numbers that do not parse or are out of range (--seed abc / -1 /
 *    2^64, --top-k -1 / 1.5, -n "", --draft x) are refused naming the
 *    option, with nothing on stdout; before, --seed abc became 0, -1
 *    wrapped and --top-k -1 converted an uninitialised value;
 *  - --model naming a missing path, a file, or a folder that is not a
 *    container says which, before anything else is tried;
 *  - --prompt-file (also "-" for stdin) gives the same text as --prompt,
 *    and takes prompts larger than a command line can carry;
 *  - tokenize --file encodes every byte, NUL included, as the reference
 *    tokenizer does;
 *  - a run that fails on a corrupt expert record reports that error first
 *    and alone, even when the model folder cannot be written (the usage
 *    save used to replace it with its own warning and a bare "run failed");
 *  - --ram beyond the memory available is warned about.
 */
#include <criterion/criterion.h>

#include "tests/cli_util.h"
#include "tests/fixture_cache.h"
#include "tests/node_ref.h"

static char ws[PATH_MAX];

static void setup(void)
{
	tu_mkdtemp(ws, sizeof ws);
}

static void teardown(void)
{
	tu_rmrf(ws);
}

TestSuite(cli_input, .init = setup, .fini = teardown);

/* Writes the path of fixture `name` converted at bf16: the build's shared
 * container, which a test reads and never changes. */
static void convert(const char *name, char *model, size_t n)
{
	char src[256];
	snprintf(src, sizeof src, "hf/%s", name);
	fc_container(model, n, src, "--quant bf16");
}

/* The same, as a private copy at ws/name that the test may change. */
static void convert_copy(const char *name, char *model, size_t n)
{
	char src[256];
	snprintf(src, sizeof src, "hf/%s", name);
	snprintf(model, n, "%s/%s", ws, name);
	fc_container_copy(model, src, "--quant bf16");
}

/* Runs colibri with args (printf-style); it must fail with status 1..127,
 * print nothing on stdout and one stderr line holding every needle.
 * Returns that stderr (malloc'd). */
static char *expect_fail(const char *needle1, const char *needle2, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static char *expect_fail(const char *needle1, const char *needle2, const char *fmt, ...)
{
	char args[4096], out[PATH_MAX + 16];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	snprintf(out, sizeof out, "%s/out.txt", ws);
	int st = cli_run(ws, out, "%s", args);
	char *err = cli_read_err(out);
	size_t n_out = 0;
	char *stdout_text = tu_read(out, &n_out);
	cr_assert_not_null(err);
	cr_expect(st > 0 && st < 128, "%s: exit status %d: %s", args, st, err);
	cr_expect_eq(n_out, 0, "%s: printed on stdout: %s", args, stdout_text);
	size_t len = strlen(err);
	cr_expect(len > 0 && memchr(err, '\n', len - 1) == NULL, "%s: expected one line on stderr, got: %s", args, err);
	cr_expect(strstr(err, needle1), "%s: message lacks \"%s\": %s", args, needle1, err);
	if (needle2)
		cr_expect(strstr(err, needle2), "%s: message lacks \"%s\": %s", args, needle2, err);
	free(stdout_text);
	return err;
}

Test(cli_input, bad_numbers_refused)
{
	char m[PATH_MAX + 16];
	convert("qwen3_moe", m, sizeof m);
	static const char *const bad[][2] = {
		{ "--seed abc", "--seed" },  { "--seed -1", "--seed" },    { "--seed ' 5'", "--seed" },
		{ "--seed 18446744073709551616", "--seed" },             { "--top-k -1", "--top-k" },
		{ "--top-k 1.5", "--top-k" }, { "--top-k 3000000000", "--top-k" }, { "-n ''", "-n" },
		{ "-n 5x", "-n" },            { "--draft x", "--draft" },  { "--threads 0", "--threads" },
		{ "--ram 0", "--ram" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		free(expect_fail(bad[i][1], NULL, "run --model '%s' --tokens 1,2 -n 2 %s", m, bad[i][0]));
}

Test(cli_input, model_folder_named)
{
	char file[PATH_MAX + 16];
	snprintf(file, sizeof file, "%s/a-file", ws);
	cr_assert_eq(tu_write(file, "x", 1), 0);
	free(expect_fail("/nonexistent-colibri-model", "No such file",
			 "run --model /nonexistent-colibri-model --prompt hello"));
	free(expect_fail("/nonexistent-colibri-model", "No such file",
			 "logits --model /nonexistent-colibri-model --tokens 1 --out '%s/l.f32'", ws));
	free(expect_fail(file, "not a folder", "run --model '%s' --prompt hello", file));
	free(expect_fail("not a colibri container", "colibri convert", "run --model '%s/hf/qwen3_moe' --prompt hello",
			 tu_fixtures()));
}

Test(cli_input, prompt_file)
{
	char hf[PATH_MAX], m[PATH_MAX + 16], path[PATH_MAX + 16], out[PATH_MAX + 16];
	snprintf(hf, sizeof hf, "%s/hf/qwen3_moe_tok/tokenizer.json", tu_fixtures());
	if (access(hf, R_OK) != 0)
		cr_skip_test("fixture hf/qwen3_moe_tok is missing: no Qwen3 tokenizer in tools/node_modules (run ./setup.sh)");
	convert("qwen3_moe_tok", m, sizeof m);
	const char *text = "The quick brown fox: jumps over the lazy dog";
	snprintf(path, sizeof path, "%s/prompt.txt", ws);
	cr_assert_eq(tu_write(path, text, strlen(text)), 0);
	const char *how[3] = { "--prompt '%s'", "--prompt-file '%s'", "--prompt-file - <'%s'" };
	char *got[3];
	for (int i = 0; i < 3; i++) {
		char opt[PATH_MAX + 64];
		snprintf(opt, sizeof opt, how[i], i ? path : text);
		snprintf(out, sizeof out, "%s/p%d.txt", ws, i);
		cr_assert_eq(cli_run(ws, out, "run --model '%s' %s -n 6 --temp 0", m, opt), 0, "%s failed", opt);
		got[i] = tu_read(out, NULL);
		cr_assert(got[i] && got[i][0], "%s printed nothing", opt);
	}
	cr_expect_str_eq(got[1], got[0], "--prompt-file differs from --prompt");
	cr_expect_str_eq(got[2], got[0], "--prompt-file - differs from --prompt");
	for (int i = 0; i < 3; i++)
		free(got[i]);
	/* 300 KB: more than one command-line argument can hold (128 KiB).
	 * It reaches the model whole: 60,000+ tokens exceed the context. */
	cr_assert_eq(tu_sh("yes 'a few words of prompt' | head -c 300000 >'%s'", path), 0);
	free(expect_fail("positions needed", NULL, "run --model '%s' --prompt-file '%s' -n 1", m, path));
	snprintf(out, sizeof out, "%s/ids.txt", ws);
	cr_assert_eq(cli_run(ws, out, "tokenize --model '%s' --file '%s'", m, path), 0);
	cr_expect_eq(tu_sh("test $(tr ',' '\\n' <'%s' | wc -l) -gt 50000", out), 0, "300 KB tokenized short");
}

Test(cli_input, tokenize_file_keeps_nul)
{
	node_ref_require("tokenizer-qwen3");
	char dir[PATH_MAX], path[PATH_MAX + 16], out[PATH_MAX + 16];
	node_ref_model_dir(dir, sizeof dir, "tokenizer-qwen3");
	static const char text[] = "ab\0cd\0\0 ef";
	snprintf(path, sizeof path, "%s/nul.txt", ws);
	cr_assert_eq(tu_write(path, text, sizeof text - 1), 0);
	snprintf(out, sizeof out, "%s/ids.txt", ws);
	cr_assert_eq(cli_run(ws, out, "tokenize --model '%s' --file '%s'", dir, path), 0);
	char *ids = tu_read(out, NULL);
	cJSON *req = cJSON_CreateObject();
	cJSON_AddStringToObject(req, "model_dir", dir);
	cJSON *enc = cJSON_AddArrayToObject(req, "encode");
	/* cJSON strings stop at NUL: build the JSON text by hand. */
	cJSON_AddItemToArray(enc, cJSON_CreateRaw("\"ab\\u0000cd\\u0000\\u0000 ef\""));
	cJSON *res = node_ref_run(req);
	cJSON_Delete(req);
	const cJSON *want = cJSON_GetArrayItem(cJSON_GetObjectItem(res, "encode"), 0);
	char expect[1024] = "";
	const cJSON *id;
	cJSON_ArrayForEach(id, want)
		snprintf(expect + strlen(expect), sizeof expect - strlen(expect), "%s%d", expect[0] ? "," : "",
			 id->valueint);
	cr_assert(ids);
	ids[strcspn(ids, "\n")] = 0;
	cr_expect_str_eq(ids, expect, "tokenize --file with NUL bytes");
	cr_expect_gt(cJSON_GetArraySize(want), 3);
	cJSON_Delete(res);
	free(ids);
}

Test(cli_input, error_first_and_alone)
{
	char m[PATH_MAX + 16], path[PATH_MAX + 64], out[PATH_MAX + 16];
	convert_copy("qwen3_moe", m, sizeof m);
	/* A folder in the way of usage.json: the usage save fails as on a
	 * read-only disk, even for root (the load before it says it ignores
	 * the folder). */
	snprintf(path, sizeof path, "%s/usage.json", m);
	cr_assert_eq(mkdir(path, 0755), 0);
	snprintf(out, sizeof out, "%s/ok.txt", ws);
	cr_assert_eq(cli_run(ws, out, "run --model '%s' --tokens 1,2,3 -n 2 --temp 0", m), 0);
	char *err = cli_read_err(out);
	cr_expect(err && strstr(err, "warning: cannot save expert usage") && strstr(err, "usage.json"),
		  "the failed save is not reported: %s", err);
	free(err);
	cr_assert_eq(rmdir(path), 0);
	/* Flip one byte of every record of the first expert file: whatever
	 * the routing, the first expert read fails its checksum. */
	snprintf(path, sizeof path, "%s/experts/layer-000.bin", m);
	cr_assert_eq(tu_sh("/usr/bin/python3 -c \"import os,sys; p=sys.argv[1]; f=open(p,'r+b'); n=os.path.getsize(p); "
			   "r=n//8\nfor e in range(8):\n f.seek(e*r+7); b=f.read(1); f.seek(e*r+7); f.write(bytes([b[0]^1]))\" '%s'",
			   path), 0);
	err = expect_fail("checksum mismatch", "layer-000.bin", "run --model '%s' --tokens 1,2,3 -n 2 --temp 0", m);
	cr_expect_null(strstr(err, "usage"), "the usage save speaks over the error: %s", err);
	free(err);
}

Test(cli_input, ram_beyond_memory_warned)
{
	char m[PATH_MAX + 16], out[PATH_MAX + 16];
	convert("qwen3_moe", m, sizeof m);
	snprintf(out, sizeof out, "%s/r.txt", ws);
	cr_assert_eq(cli_run(ws, out, "run --model '%s' --tokens 1,2 -n 1 --ram 99999999G", m), 0);
	char *err = cli_read_err(out);
	cr_expect(err && strstr(err, "--ram") && strstr(err, "more than"), "no warning: %s", err);
	free(err);
}

/* Copies fixture `name`'s bf16 container to ws/dst and applies a Python
 * edit to the dict m of file `json` in it (or a shell command when json is
 * NULL). */
static void broken_copy(const char *name, const char *dst, const char *json, const char *edit)
{
	char d[PATH_MAX + 16], src[256];
	snprintf(d, sizeof d, "%s/%s", ws, dst);
	snprintf(src, sizeof src, "hf/%s", name);
	tu_rmrf(d);
	fc_container_copy(d, src, "--quant bf16");
	if (json)
		cr_assert_eq(tu_sh("/usr/bin/python3 -c \"import json,sys; p=sys.argv[1]; m=json.load(open(p)); %s; "
				   "json.dump(m, open(p, 'w'))\" '%s/%s'", edit, d, json), 0, "%s", edit);
	else
		cr_assert_eq(tu_sh("cd '%s' && %s", d, edit), 0, "%s", edit);
}

/* model_load's failure paths free what they allocated: under the
 * sanitizer build LeakSanitizer would add its report to stderr (and change
 * the exit status), which expect_fail's one-line rule catches. */
Test(cli_input, load_failures_leak_nothing)
{
	static const struct {
		const char *name, *json, *edit, *needle;
	} cases[] = {
		{ "layers", "config.json", "m['num_hidden_layers'] = 2", "does not describe" },
		{ "sum", "manifest.json", "m['resident']['tensors'][3]['xxh3'] = '0' * 16", "checksum" },
		{ "mirror", "manifest.json", "m['mirrors'] = [{'dir': '/x', 'layers': [99]}]", "mirror" },
		{ "eps", "config.json", "m['rms_norm_eps'] = 0", "rms_norm_eps" },
		{ "trunc", NULL, "truncate -s 100 resident.bin", "truncated" },
		{ "nofile", NULL, "rm experts/layer-001.bin", "layer-001.bin" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		broken_copy("deepseek_v32", cases[i].name, cases[i].json, cases[i].edit);
		free(expect_fail(cases[i].needle, NULL, "logits --model '%s/%s' --tokens 1,2 --out '%s/l.f32'", ws,
				 cases[i].name, ws));
	}
}
