/*
 * fuzz_manifest — the container manifest (manifest_load in engine/model/manifest.c).
 *
 * manifest_load reads DIR/manifest.json and stats the data files beside it,
 * so the harness keeps a scratch container: links to the data files of a
 * converted fixture (COLIBRI_FUZZ_CONTAINER, which tools/fuzz.sh converts
 * from build/fixtures/hf/qwen3_moe), and the input written as its
 * manifest.json. The input is the manifest text.
 *
 * Beyond "no crash", an accepted manifest must keep manifest.h's promise
 * that no offset can point outside a file:
 *   - each resident tensor is 4 KiB-aligned, inside resident_bytes, which
 *     the resident file holds, and its byte count is what its quant type,
 *     shape and group give;
 *   - each expert layer is a model layer index below MODEL_LAYERS_MAX, its
 *     record a nonzero multiple of 4 KiB, its file holds n_experts records,
 *     its parts lie 64-byte aligned inside one record, with one checksum
 *     per expert; no two entries describe the same layer;
 *   - each mirror has an absolute folder and lists only expert layers;
 *   - a shard (colibri shard) names a rank below its rank count, and every
 *     expert layer lists its records, strictly ascending, each slot naming
 *     its record; its file holds them all; a full container lists none;
 *   - manifest_write then manifest_load gives the same manifest back.
 * A rejected one returns a negative errno with a message, and manifest_free
 * cleans up after it.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <dirent.h>
#include <sys/stat.h>

#include "engine/model/manifest.h"
#include "base/error.h"
#include "tests/fuzz/fuzz_util.h"

static char dir[PATH_MAX];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char src[PATH_MAX], given[PATH_MAX];
	const char *c = getenv("COLIBRI_FUZZ_CONTAINER");
	if (c && *c)
		snprintf(given, sizeof given, "%s", c);
	else
		snprintf(given, sizeof given, "%s/build-fuzz/container", fuzz_repo());
	if (!realpath(given, src))
		snprintf(src, sizeof src, "%s", given);	/* opendir below says why */
	snprintf(dir, sizeof dir, "%s/container", fuzz_dir());
	DIR *d = opendir(src);
	if (!d || mkdir(dir, 0755) != 0) {
		fprintf(stderr, "fuzz_manifest: no converted container in %s (COLIBRI_FUZZ_CONTAINER; tools/fuzz.sh "
			"makes one)\n", src);
		abort();
	}
	for (struct dirent *de; (de = readdir(d));) {
		if (de->d_name[0] == '.' || strcmp(de->d_name, "manifest.json") == 0)
			continue;
		char from[PATH_MAX * 2], to[PATH_MAX * 2];
		snprintf(from, sizeof from, "%s/%s", src, de->d_name);
		snprintf(to, sizeof to, "%s/%s", dir, de->d_name);
		if (symlink(from, to) != 0)
			abort();
	}
	closedir(d);
	return 0;
}

static uint64_t size_of(const char *rel)
{
	char path[PATH_MAX * 2];
	struct stat sb;
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	FUZZ_ASSERT(stat(path, &sb) == 0, "accepted file %s does not exist", rel);
	return (uint64_t)sb.st_size;
}

static void check_tensor(const struct manifest_tensor *t)
{
	FUZZ_ASSERT(t->name, "a tensor without a name");
	FUZZ_ASSERT(t->ndim >= 1 && t->ndim <= 2 && t->shape[0] >= 1 && t->shape[1] >= 1,
		    "%s: shape %d dims [%" PRId64 ", %" PRId64 "]", t->name, t->ndim, t->shape[0], t->shape[1]);
	FUZZ_ASSERT(quant_matrix_bytes(t->type, t->shape[0], t->shape[1], t->group) == t->bytes,
		    "%s: %" PRIu64 " bytes for its type and shape", t->name, t->bytes);
}

static void check(const struct manifest *m)
{
	FUZZ_ASSERT(m->version == MANIFEST_VERSION, "version %d", m->version);
	FUZZ_ASSERT(memchr(m->model_type, 0, sizeof m->model_type), "model_type not terminated");
	FUZZ_ASSERT(m->resident_file, "no resident file");
	FUZZ_ASSERT(size_of(m->resident_file) >= m->resident_bytes, "resident file shorter than resident_bytes");
	for (size_t i = 0; i < m->n_tensors; i++) {
		const struct manifest_tensor *t = &m->tensors[i];
		check_tensor(t);
		FUZZ_ASSERT(t->offset % MANIFEST_ALIGN == 0 && t->offset <= m->resident_bytes &&
			    t->bytes <= m->resident_bytes - t->offset,
			    "%s: [%" PRIu64 ", +%" PRIu64 ") outside %" PRIu64 " resident bytes", t->name, t->offset,
			    t->bytes, m->resident_bytes);
	}
	FUZZ_ASSERT(m->n_experts >= 0 && m->n_experts <= 1 << 20, "n_experts %d", m->n_experts);
	for (size_t i = 0; i < m->n_expert_layers; i++) {
		const struct manifest_expert_layer *l = &m->layers[i];
		FUZZ_ASSERT(l->layer >= 0 && l->layer < MODEL_LAYERS_MAX, "layer %d", l->layer);
		FUZZ_ASSERT(l->file && l->checksums, "layer %d without file or checksums", l->layer);
		FUZZ_ASSERT(l->record_bytes > 0 && l->record_bytes % MANIFEST_ALIGN == 0, "layer %d: record_bytes %" PRIu64,
			    l->layer, l->record_bytes);
		uint64_t need;
		FUZZ_ASSERT(!__builtin_mul_overflow(l->record_bytes, (uint64_t)l->n_records, &need) &&
			    size_of(l->file) >= need, "layer %d: %s holds fewer than %d records", l->layer, l->file,
			    l->n_records);
		FUZZ_ASSERT(!l->records == !m->shard.present, "layer %d: records %s a shard", l->layer,
			    l->records ? "without" : "missing in");
		FUZZ_ASSERT(l->records || l->n_records == m->n_experts, "layer %d: %d records of %d experts", l->layer,
			    l->n_records, m->n_experts);
		for (int32_t k = 0; l->records && k < l->n_records; k++)
			FUZZ_ASSERT(l->records[k] >= 0 && l->records[k] < m->n_experts &&
				    (k == 0 || l->records[k] > l->records[k - 1]) && l->slot[l->records[k]] == k,
				    "layer %d: record %d is expert %d", l->layer, k, l->records[k]);
		for (int p = 0; p < EXPERT_PARTS; p++) {
			check_tensor(&l->parts[p]);
			FUZZ_ASSERT(l->parts[p].offset % 64 == 0 && l->parts[p].offset <= l->record_bytes &&
				    l->parts[p].bytes <= l->record_bytes - l->parts[p].offset,
				    "layer %d: part %d outside its record", l->layer, p);
		}
		FUZZ_ASSERT(i == 0 || m->layers[i - 1].layer < l->layer, "layer %d listed after layer %d", l->layer,
			    m->layers[i - 1].layer);
		char path[PATH_MAX];
		for (size_t copy = 0; copy <= m->n_mirrors; copy++)
			if (manifest_copy_path(m, dir, copy, i, path, sizeof path))
				FUZZ_ASSERT(copy > 0 || strstr(path, l->file), "copy path %s", path);
	}
	FUZZ_ASSERT(m->n_mirrors <= MANIFEST_MIRRORS_MAX, "%zu mirrors", m->n_mirrors);
	FUZZ_ASSERT(!m->shard.present || (m->shard.ranks >= 1 && m->shard.ranks <= PLACEMENT_RANKS_MAX &&
					  m->shard.rank >= 0 && m->shard.rank < m->shard.ranks &&
					  m->shard.replicas >= 1 && m->shard.replicas <= m->shard.ranks && !m->n_mirrors),
		    "shard %d of %d, %d replicas, %zu mirrors", m->shard.rank, m->shard.ranks, m->shard.replicas,
		    m->n_mirrors);
	for (size_t k = 0; k < m->n_mirrors; k++) {
		const struct manifest_mirror *mm = &m->mirrors[k];
		FUZZ_ASSERT(mm->dir && mm->dir[0] == '/', "mirror %zu folder is not absolute", k);
		for (size_t j = 0; j < mm->n_layers; j++)
			FUZZ_ASSERT(manifest_expert_layer(m, mm->layers[j]), "mirror lists layer %d without experts",
				    mm->layers[j]);
	}
	(void)manifest_model_id(m);
}

static bool tensor_same(const struct manifest_tensor *a, const struct manifest_tensor *b, bool resident)
{
	return strcmp(a->name, b->name) == 0 && a->type == b->type && a->group == b->group && a->ndim == b->ndim &&
	       a->shape[0] == b->shape[0] && a->shape[1] == b->shape[1] && a->offset == b->offset &&
	       a->bytes == b->bytes && (!resident || a->checksum == b->checksum);
}

/* What manifest_load accepted, manifest_write must write so that it loads again unchanged. */
static void check_round_trip(const struct manifest *m)
{
	error_clear();
	int rc = manifest_write(m, dir);
	FUZZ_ASSERT(rc == 0, "manifest_write failed: %s", error_message());
	struct manifest b;
	rc = manifest_load(&b, dir);
	FUZZ_ASSERT(rc == 0, "the written manifest does not load: %s", error_message());
	FUZZ_ASSERT(strcmp(m->model_type, b.model_type) == 0 && m->expert_quant == b.expert_quant &&
		    m->dense_quant == b.dense_quant && m->group == b.group && m->has_tokenizer == b.has_tokenizer &&
		    strcmp(m->resident_file, b.resident_file) == 0 && m->resident_bytes == b.resident_bytes &&
		    m->n_tensors == b.n_tensors && m->n_experts == b.n_experts &&
		    m->n_expert_layers == b.n_expert_layers && m->n_mirrors == b.n_mirrors,
		    "the reloaded manifest differs in its header fields");
	for (size_t i = 0; i < m->n_tensors; i++)
		FUZZ_ASSERT(tensor_same(&m->tensors[i], &b.tensors[i], true), "tensor %zu differs after a round trip", i);
	for (size_t i = 0; i < m->n_expert_layers; i++) {
		const struct manifest_expert_layer *x = &m->layers[i], *y = &b.layers[i];
		FUZZ_ASSERT(x->layer == y->layer && strcmp(x->file, y->file) == 0 && x->record_bytes == y->record_bytes &&
			    memcmp(x->checksums, y->checksums, (size_t)m->n_experts * sizeof *x->checksums) == 0 &&
			    x->n_records == y->n_records && !x->records == !y->records &&
			    (!x->records || !memcmp(x->records, y->records, (size_t)x->n_records * sizeof *x->records)),
			    "expert layer %zu differs after a round trip", i);
		for (int p = 0; p < EXPERT_PARTS; p++)
			FUZZ_ASSERT(tensor_same(&x->parts[p], &y->parts[p], false), "layer %zu part %d differs", i, p);
	}
	FUZZ_ASSERT(m->shard.present == b.shard.present && m->shard.ranks == b.shard.ranks &&
		    m->shard.rank == b.shard.rank && m->shard.replicas == b.shard.replicas &&
		    !memcmp(m->shard.weights, b.shard.weights, sizeof m->shard.weights),
		    "the shard differs after a round trip");
	for (size_t k = 0; k < m->n_mirrors; k++)
		FUZZ_ASSERT(strcmp(m->mirrors[k].dir, b.mirrors[k].dir) == 0 &&
			    m->mirrors[k].n_layers == b.mirrors[k].n_layers &&
			    memcmp(m->mirrors[k].layers, b.mirrors[k].layers,
				   m->mirrors[k].n_layers * sizeof *m->mirrors[k].layers) == 0,
			    "mirror %zu differs after a round trip", k);
	manifest_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_write(dir, "manifest.json", data, size);
	struct manifest m;
	error_clear();
	int rc = manifest_load(&m, dir);
	if (rc) {
		FUZZ_ASSERT(rc < 0 && error_message()[0], "failure %d without a message", rc);
		manifest_free(&m);
		return 0;
	}
	check(&m);
	check_round_trip(&m);
	manifest_free(&m);
	return 0;
}
