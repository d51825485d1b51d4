/*
 * node_ref — the independent references of the tokenizer and chat tests:
 * tools/tokenizer_ref.js, which runs the npm package @lenml/tokenizers under
 * node on a JSON request, and tools/tiktoken_ref.js, which runs
 * gpt-tokenizer's o200k_harmony (gpt-oss). A test that needs one first
 * calls one of the node_ref_require* helpers, which skip the test with the
 * reason when node or a package under tools/node_modules is missing
 * (./setup.sh installs them).
 */
#ifndef COLIBRI_TESTS_NODE_REF_H
#define COLIBRI_TESTS_NODE_REF_H

#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <limits.h>

#include "tests/test_util.h"

/* Writes the model folder of the tokenizer package @lenml/<pkg> into buf. */
static inline void node_ref_model_dir(char *buf, size_t n, const char *pkg)
{
	snprintf(buf, n, "%s/tools/node_modules/@lenml/%s/models", tu_repo(), pkg);
}

/* Skips the calling test unless file (relative to @lenml/<pkg>) is installed. */
static inline void node_ref_require_file(const char *pkg, const char *file)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/tools/node_modules/@lenml/%s/%s", tu_repo(), pkg, file);
	if (access(path, R_OK) != 0)
		cr_skip_test("tools/node_modules/@lenml/%s is missing; run ./setup.sh", pkg);
}

/* Skips the calling test unless @lenml/<pkg>'s tokenizer.json is installed. */
static inline void node_ref_require_model(const char *pkg)
{
	node_ref_require_file(pkg, "models/tokenizer.json");
}

/* Skips the calling test unless node runs. */
static inline void node_ref_require_node(void)
{
	if (tu_sh("node --version >/dev/null 2>&1") != 0)
		cr_skip_test("node is not installed; run ./setup.sh");
}

/* Skips the calling test unless the reference can run on @lenml/<pkg>. */
static inline void node_ref_require(const char *pkg)
{
	node_ref_require_model(pkg);
	node_ref_require_node();
}

/* Runs tools/<script> on req; returns its parsed output, which the caller
 * frees with cJSON_Delete. Fails the test if the script fails. */
static inline cJSON *node_ref_run_script(const char *script, const cJSON *req)
{
	char dir[PATH_MAX], in[PATH_MAX + 16], out[PATH_MAX + 16];
	tu_mkdtemp(dir, sizeof(dir));
	snprintf(in, sizeof(in), "%s/in.json", dir);
	snprintf(out, sizeof(out), "%s/out.json", dir);
	char *s = cJSON_PrintUnformatted(req);
	cr_assert_eq(tu_write(in, s, strlen(s)), 0);
	free(s);
	int rc = tu_sh("node '%s/tools/%s' '%s' '%s'", tu_repo(), script, in, out);
	cr_assert_eq(rc, 0, "tools/%s failed with exit status %d", script, rc);
	size_t len;
	char *text = tu_read(out, &len);
	cr_assert_not_null(text);
	cJSON *res = cJSON_ParseWithLength(text, len);
	free(text);
	tu_rmrf(dir);
	cr_assert_not_null(res, "tools/%s wrote malformed JSON", script);
	return res;
}

/* Runs tools/tokenizer_ref.js (@lenml/tokenizers) on req; see node_ref_run_script. */
static inline cJSON *node_ref_run(const cJSON *req)
{
	return node_ref_run_script("tokenizer_ref.js", req);
}

#endif
