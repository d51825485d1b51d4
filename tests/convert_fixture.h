/*
 * convert_fixture — what test_convert and test_convert_bad share: the
 * per-test scratch folder ws, running `colibri convert` (tu_colibri()) with
 * its stderr in ws/log.txt, the checkpoints of tools/make_fixtures.sh and
 * copies of them to edit, and an editor of safetensors headers that keeps
 * every untouched tensor's bytes.
 */
#ifndef COLIBRI_TESTS_CONVERT_FIXTURE_H
#define COLIBRI_TESTS_CONVERT_FIXTURE_H

#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <stdbool.h>

#include "tests/test_util.h"

/* The path of fixture `name` of tools/make_fixtures.sh; it must exist. */
static inline void fixture_path(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/hf/%s", tu_fixtures(), name);
	char cfg[PATH_MAX + 64];
	snprintf(cfg, sizeof cfg, "%s/config.json", buf);
	cr_assert_eq(access(cfg, R_OK), 0, "fixture %s is missing: run tools/make_fixtures.sh "
		     "(tools/run_tests.py sets COLIBRI_FIXTURES)", buf);
}

/* Reads dir/rel whole (NUL-terminated); the caller frees it. */
static inline char *read_file(const char *dir, const char *rel, size_t *len)
{
	char p[PATH_MAX + 256];
	snprintf(p, sizeof p, "%s/%s", dir, rel);
	char *b = tu_read(p, len);
	cr_assert_not_null(b, "cannot read %s", p);
	return b;
}

/* The per-test scratch folder: each suite sets setup and teardown as its
 * .init and .fini. */
static char ws[PATH_MAX];

static inline void setup(void)
{
	tu_mkdtemp(ws, sizeof ws);
}

static inline void teardown(void)
{
	tu_rmrf(ws);
}

/* Runs colibri convert; stderr goes to ws/log.txt. Returns the exit status. */
static inline int convert(const char *hf, const char *out, const char *args)
{
	return tu_sh("'%s' convert '%s' '%s' %s >/dev/null 2>'%s/log.txt'", tu_colibri(), hf, out,
		     args, ws);
}

/* Copies fixture `name` into ws/hf and returns that path in buf. */
static inline void copy_fixture(char *buf, size_t n, const char *name)
{
	char src[PATH_MAX];
	fixture_path(src, sizeof src, name);
	snprintf(buf, n, "%s/hf", ws);
	cr_assert_eq(tu_sh("cp -r '%s' '%s'", src, buf), 0);
}

/* An editable safetensors file: its parsed header, its data block, and
 * bytes to append after the data block. Edits change only the header (and
 * append data), so every untouched tensor keeps its bytes. */
struct st_edit {
	char path[PATH_MAX + 64];
	char *buf;
	size_t len;
	uint64_t hlen;
	cJSON *h;
	uint8_t *extra;
	size_t extra_len;
};

static inline void st_edit_open(struct st_edit *e, const char *hf_dir)
{
	memset(e, 0, sizeof *e);
	snprintf(e->path, sizeof e->path, "%s/model.safetensors", hf_dir);
	e->buf = tu_read(e->path, &e->len);
	cr_assert(e->buf && e->len >= 8, "cannot read %s", e->path);
	for (int i = 7; i >= 0; i--)
		e->hlen = e->hlen << 8 | (uint8_t)e->buf[i];
	e->h = cJSON_ParseWithLength(e->buf + 8, e->hlen);
	cr_assert(cJSON_IsObject(e->h), "%s: bad header", e->path);
}

static inline uint64_t st_edit_data_bytes(const struct st_edit *e)
{
	return e->len - 8 - e->hlen;
}

static inline cJSON *st_edit_entry(struct st_edit *e, const char *name)
{
	cJSON *t = cJSON_GetObjectItemCaseSensitive(e->h, name);
	cr_assert_not_null(t, "%s: no tensor %s", e->path, name);
	return t;
}

/* Sets the entry's dtype, shape and data_offsets. */
static inline void st_edit_set(cJSON *t, const char *dtype, int64_t rows, int64_t cols, uint64_t begin,
			       uint64_t end)
{
	cJSON_ReplaceItemInObjectCaseSensitive(t, "dtype", cJSON_CreateString(dtype));
	cJSON *shape = cJSON_CreateArray();
	cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)rows));
	cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)cols));
	cJSON_ReplaceItemInObjectCaseSensitive(t, "shape", shape);
	cJSON *off = cJSON_CreateArray();
	cJSON_AddItemToArray(off, cJSON_CreateNumber((double)begin));
	cJSON_AddItemToArray(off, cJSON_CreateNumber((double)end));
	cJSON_ReplaceItemInObjectCaseSensitive(t, "data_offsets", off);
}

static inline uint64_t st_edit_num(cJSON *t, const char *key, int i)
{
	return (uint64_t)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(t, key), i)->valuedouble;
}

/* Appends n bytes (zeros if data is NULL); returns their data offset. */
static inline uint64_t st_edit_append(struct st_edit *e, const void *data, size_t n)
{
	uint64_t at = st_edit_data_bytes(e) + e->extra_len;
	e->extra = realloc(e->extra, e->extra_len + n);
	cr_assert_not_null(e->extra);
	if (data)
		memcpy(e->extra + e->extra_len, data, n);
	else
		memset(e->extra + e->extra_len, 0, n);
	e->extra_len += n;
	return at;
}

static inline void st_edit_save(struct st_edit *e)
{
	char *text = cJSON_PrintUnformatted(e->h);
	uint64_t nlen = strlen(text), data = st_edit_data_bytes(e);
	size_t total = 8 + nlen + data + e->extra_len;
	char *nb = malloc(total);
	cr_assert_not_null(nb);
	for (int i = 0; i < 8; i++)
		nb[i] = (char)(nlen >> (8 * i));
	memcpy(nb + 8, text, nlen);
	memcpy(nb + 8 + nlen, e->buf + 8 + e->hlen, data);
	if (e->extra_len)
		memcpy(nb + 8 + nlen + data, e->extra, e->extra_len);
	cr_assert_eq(tu_write(e->path, nb, total), 0);
	free(nb);
	free(text);
	cJSON_Delete(e->h);
	free(e->buf);
	free(e->extra);
}

/* Entries of ws whose name starts with "out": the output folder and any
 * sibling made from its name (out.tmp-XXXXXX, out.old-PID). */
static inline int out_entries(char *names, size_t len)
{
	DIR *d = opendir(ws);
	cr_assert_not_null(d);
	struct dirent *de;
	int n = 0;
	names[0] = 0;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "out", 3) != 0)
			continue;
		n++;
		snprintf(names + strlen(names), len - strlen(names), "%s ", de->d_name);
	}
	closedir(d);
	return n;
}

#endif
