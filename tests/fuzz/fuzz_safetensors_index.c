/*
 * fuzz_safetensors_index — model.safetensors.index.json (st_index_parse in
 * engine/convert/safetensors.c), the list of shards a sharded checkpoint is opened
 * from.
 *
 * The input is the index text. Beyond "no crash", an accepted index must
 * give what st_set_open then opens blindly: at least one name; names sorted
 * and distinct; each a plain file name of the checkpoint folder (not empty,
 * no '/', not "." or ".."); exactly the set of weight_map values. A rejected
 * one leaves no list and a message naming the index file.
 *
 * When the sharded fixture (build/fixtures/hf/mixtral) exists, an accepted
 * index is also written into a scratch folder beside links to its two
 * shards and opened with st_set_open: it must either fail with a message
 * or open every listed shard and find each tensor by its name.
 */
#include <stdbool.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "engine/convert/safetensors.h"
#include "base/error.h"
#include "tests/fuzz/fuzz_util.h"

#define PATH "fuzz/model.safetensors.index.json"

static const char *const shards[] = { "model-00001-of-00002.safetensors",
				      "model-00002-of-00002.safetensors" };
static bool have_shards;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = fuzz_dir();
	have_shards = true;
	for (size_t i = 0; i < 2; i++) {
		char src[PATH_MAX], dst[PATH_MAX];
		snprintf(src, sizeof src, "%s/hf/mixtral/%s", fuzz_fixtures(), shards[i]);
		snprintf(dst, sizeof dst, "%s/%s", dir, shards[i]);
		have_shards = have_shards && access(src, R_OK) == 0 && symlink(src, dst) == 0;
	}
	if (!have_shards)
		fprintf(stderr, "fuzz_safetensors_index: no mixtral fixture in %s, st_set_open is not exercised\n",
			fuzz_fixtures());
	return 0;
}

static bool is_file_name(const char *s)
{
	return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* Every weight_map value is a listed name and every name a value. */
static void check_same_set(const uint8_t *data, size_t size, char **names, size_t n)
{
	cJSON *root = cJSON_ParseWithLength((const char *)data, size);
	const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
	FUZZ_ASSERT(cJSON_IsObject(map), "accepted without a weight_map object");
	bool *used = calloc(n, sizeof *used);
	if (!used)
		abort();
	for (const cJSON *e = map->child; e; e = e->next) {
		FUZZ_ASSERT(cJSON_IsString(e), "accepted a weight_map value that is not a string");
		bool found = false;
		for (size_t i = 0; i < n && !found; i++)
			if (strcmp(names[i], e->valuestring) == 0)
				found = used[i] = true;
		FUZZ_ASSERT(found, "weight_map value \"%s\" is not in the list", e->valuestring);
	}
	for (size_t i = 0; i < n; i++)
		FUZZ_ASSERT(used[i], "listed name \"%s\" is no weight_map value", names[i]);
	free(used);
	cJSON_Delete(root);
}

static void check_set_open(const uint8_t *data, size_t size, size_t n)
{
	const char *dir = fuzz_dir();
	fuzz_write(dir, "model.safetensors.index.json", data, size);
	struct st_set set;
	error_clear();
	int rc = st_set_open(&set, dir);
	if (rc) {
		FUZZ_ASSERT(rc < 0 && error_message()[0], "st_set_open failed (%d) without a message", rc);
		return;
	}
	FUZZ_ASSERT(set.n_files == n, "index lists %zu shards, %zu opened", n, set.n_files);
	size_t total = 0;
	for (size_t i = 0; i < set.n_files; i++) {
		for (size_t j = 0; j < set.files[i].n_tensors; j++) {
			const struct st_tensor *t = &set.files[i].tensors[j];
			FUZZ_ASSERT(st_set_find(&set, t->name) == t, "tensor %s is not found by name", t->name);
			FUZZ_ASSERT(t->file_index == (int)i, "tensor %s has file_index %d, not %zu", t->name,
				    t->file_index, i);
		}
		total += set.files[i].n_tensors;
	}
	FUZZ_ASSERT(total == set.n_tensors, "n_tensors %zu, files hold %zu", set.n_tensors, total);
	st_set_close(&set);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char **names = (char **)&names;	/* poison: must be reset by the parser */
	size_t n = 7;
	error_clear();
	int rc = st_index_parse((const char *)data, size, PATH, &names, &n);
	if (rc) {
		FUZZ_ASSERT(rc < 0, "positive return %d", rc);
		FUZZ_ASSERT(!names && n == 0, "a failed parse left %zu names", n);
		FUZZ_ASSERT(strstr(error_message(), PATH), "message does not name the index: %s", error_message());
		return 0;
	}
	FUZZ_ASSERT(n >= 1 && names, "accepted with no shard");
	for (size_t i = 0; i < n; i++) {
		FUZZ_ASSERT(is_file_name(names[i]), "shard name \"%s\" is not a file name in the folder", names[i]);
		FUZZ_ASSERT(i == 0 || strcmp(names[i - 1], names[i]) < 0, "names not sorted and distinct: \"%s\", \"%s\"",
			    names[i - 1], names[i]);
	}
	check_same_set(data, size, names, n);
	if (have_shards)
		check_set_open(data, size, n);
	st_names_free(names, n);
	return 0;
}
