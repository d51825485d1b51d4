/*
 * manifest — JSON <-> struct manifest, and the validation that makes every
 * offset trustworthy (see manifest.h, docs/FORMAT.md).
 */
#include "engine/model/manifest.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "base/files.h"
#include "base/json_get.h"
#include "base/error.h"

/* A number that reads back as the same double. cJSON prints %1.15g when
 * that reads back within a relative DBL_EPSILON, so a weight one ulp from
 * a 15-digit number came back changed, and with it the shard's placement
 * (fuzz_manifest, at 9.1M runs: 90071992547409921 read back as
 * 90071992547409900). %.17g always reads back exactly. */
static cJSON *exact_number(double v)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%.17g", v);
	return cJSON_CreateRaw(buf);
}

static cJSON *tensor_to_json(const struct manifest_tensor *t, bool resident)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "name", t->name);
	cJSON_AddStringToObject(o, "type", quant_type_name(t->type));
	double shape[2] = { (double)t->shape[0], (double)t->shape[1] };
	cJSON_AddItemToObject(o, "shape", cJSON_CreateDoubleArray(shape, t->ndim));
	cJSON_AddNumberToObject(o, "group", t->group);
	cJSON_AddNumberToObject(o, "offset", (double)t->offset);
	cJSON_AddNumberToObject(o, "bytes", (double)t->bytes);
	if (resident) {
		char hex[17];
		snprintf(hex, sizeof hex, "%016" PRIx64, t->checksum);
		cJSON_AddStringToObject(o, "xxh3", hex);
	}
	return o;
}

int manifest_write(const struct manifest *m, const char *dir)
{
	cJSON *root = cJSON_CreateObject();
	cJSON_AddStringToObject(root, "format", MANIFEST_FORMAT);
	cJSON_AddNumberToObject(root, "version", MANIFEST_VERSION);
	cJSON_AddStringToObject(root, "model_type", m->model_type);
	cJSON *q = cJSON_AddObjectToObject(root, "quant");
	cJSON_AddStringToObject(q, "experts", quant_type_name(m->expert_quant));
	cJSON_AddStringToObject(q, "dense", quant_type_name(m->dense_quant));
	cJSON_AddStringToObject(q, "activations", m->activations[0] ? m->activations : "auto");
	cJSON_AddNumberToObject(q, "group_size", m->group);
	cJSON_AddBoolToObject(root, "tokenizer", m->has_tokenizer);

	cJSON *res = cJSON_AddObjectToObject(root, "resident");
	cJSON_AddStringToObject(res, "file", m->resident_file);
	cJSON_AddNumberToObject(res, "bytes", (double)m->resident_bytes);
	cJSON *ts = cJSON_AddArrayToObject(res, "tensors");
	for (size_t i = 0; i < m->n_tensors; i++)
		cJSON_AddItemToArray(ts, tensor_to_json(&m->tensors[i], true));

	cJSON *ex = cJSON_AddObjectToObject(root, "experts");
	cJSON_AddNumberToObject(ex, "n_experts", m->n_experts);
	cJSON *ls = cJSON_AddArrayToObject(ex, "layers");
	for (size_t i = 0; i < m->n_expert_layers; i++) {
		const struct manifest_expert_layer *l = &m->layers[i];
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "layer", l->layer);
		cJSON_AddStringToObject(o, "file", l->file);
		cJSON_AddNumberToObject(o, "record_bytes", (double)l->record_bytes);
		cJSON *parts = cJSON_AddArrayToObject(o, "parts");
		for (int p = 0; p < EXPERT_PARTS; p++)
			cJSON_AddItemToArray(parts, tensor_to_json(&l->parts[p], false));
		cJSON *sums = cJSON_AddArrayToObject(o, "xxh3");
		for (int e = 0; e < m->n_experts; e++) {
			char hex[17];
			snprintf(hex, sizeof hex, "%016" PRIx64, l->checksums[e]);
			cJSON_AddItemToArray(sums, cJSON_CreateString(hex));
		}
		if (l->records)
			cJSON_AddItemToObject(o, "records", cJSON_CreateIntArray(l->records, l->n_records));
		cJSON_AddItemToArray(ls, o);
	}
	if (m->shard.present) {
		cJSON *sh = cJSON_AddObjectToObject(root, "shard");
		cJSON_AddNumberToObject(sh, "ranks", m->shard.ranks);
		cJSON_AddNumberToObject(sh, "rank", m->shard.rank);
		cJSON_AddNumberToObject(sh, "replicas", m->shard.replicas);
		cJSON *ws = cJSON_AddArrayToObject(sh, "weights");
		for (int r = 0; ws && r < m->shard.ranks; r++)
			cJSON_AddItemToArray(ws, exact_number(m->shard.weights[r]));
	}
	if (m->n_mirrors) {
		cJSON *ms = cJSON_AddArrayToObject(root, "mirrors");
		for (size_t i = 0; i < m->n_mirrors; i++) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "dir", m->mirrors[i].dir);
			cJSON *ls2 = cJSON_AddArrayToObject(o, "layers");
			for (size_t k = 0; k < m->mirrors[i].n_layers; k++)
				cJSON_AddItemToArray(ls2, cJSON_CreateNumber(m->mirrors[i].layers[k]));
			cJSON_AddItemToArray(ms, o);
		}
	}
	char *text = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	if (!text)
		return error_set(ENOMEM, "out of memory writing the manifest");
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	size_t len = strlen(text);
	text[len] = 0;
	int rc = file_write_atomic(path, text, len);
	free(text);
	return rc;
}

/* Reads a non-negative integer that fits exactly in a double (json_int). */
static int get_u64(const cJSON *o, const char *key, uint64_t *out)
{
	int64_t v;
	int rc = json_int(cJSON_GetObjectItemCaseSensitive(o, key), 0, JSON_INT_EXACT, &v);
	if (!rc)
		*out = (uint64_t)v;
	return rc;
}

static int parse_hex64(const cJSON *v, uint64_t *out)
{
	if (!cJSON_IsString(v) || strlen(v->valuestring) != 16 ||
	    strspn(v->valuestring, "0123456789abcdef") != 16)
		return -EINVAL;
	char *end;
	*out = strtoull(v->valuestring, &end, 16);
	return *end ? -EINVAL : 0;
}

static int tensor_from_json(struct manifest_tensor *t, const cJSON *o, bool resident,
			    const char *path)
{
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
	uint64_t group = 0;
	if (!cJSON_IsString(name) || !cJSON_IsString(type) || !cJSON_IsArray(shape))
		return error_set(EINVAL, "%s: tensor entry needs name, type and shape", path);
	t->name = strdup(name->valuestring);
	if (!t->name)
		return error_set(ENOMEM, "out of memory");
	if (quant_type_parse(type->valuestring, &t->type) != 0)
		return error_set(EINVAL, "%s: tensor %s: unknown type \"%s\"", path, t->name,
				 type->valuestring);
	t->ndim = cJSON_GetArraySize(shape);
	if (t->ndim < 1 || t->ndim > 2)
		return error_set(EINVAL, "%s: tensor %s: shape must have 1 or 2 dims", path, t->name);
	t->shape[1] = 1;
	for (int i = 0; i < t->ndim; i++) {
		if (json_int(cJSON_GetArrayItem(shape, i), 1, 1000000000000LL, &t->shape[i]))
			return error_set(EINVAL, "%s: tensor %s: bad shape", path, t->name);
	}
	if (get_u64(o, "group", &group) || get_u64(o, "offset", &t->offset) ||
	    get_u64(o, "bytes", &t->bytes) || group > INT32_MAX)
		return error_set(EINVAL, "%s: tensor %s: bad group, offset or bytes", path, t->name);
	t->group = (int32_t)group;
	if (quant_check_shape(t->type, t->shape[0], t->shape[1], t->group) != 0 ||
	    quant_matrix_bytes(t->type, t->shape[0], t->shape[1], t->group) != t->bytes)
		return error_set(EINVAL, "%s: tensor %s: %" PRIu64 " bytes do not match a %s [%" PRId64
				 ", %" PRId64 "] matrix with group %d", path, t->name, t->bytes,
				 quant_type_name(t->type), t->shape[0], t->shape[1], t->group);
	if (resident && parse_hex64(cJSON_GetObjectItemCaseSensitive(o, "xxh3"), &t->checksum))
		return error_set(EINVAL, "%s: tensor %s: bad xxh3 checksum field", path, t->name);
	return 0;
}

static int file_size_of(const char *dir, const char *rel, uint64_t *size)
{
	char path[PATH_MAX];
	struct stat sb;
	if (strstr(rel, "..") || rel[0] == '/')
		return error_set(EINVAL, "%s/manifest.json: file name \"%s\" leaves the container", dir, rel);
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	if (stat(path, &sb) != 0)
		return error_set(ENOENT, "%s: missing (%s)", path, strerror(errno));
	*size = (uint64_t)sb.st_size;
	return 0;
}

/* The record layout of docs/FORMAT.md section 4: gate, up and down in this
 * order, each of its own type (a GGUF's Q4_K_M keeps down in Q6_K), gate at
 * 0, each other part at the end of the one before rounded up to 64, and the
 * record the end of down rounded
 * up to MANIFEST_ALIGN. Parts therefore never overlap, and an edited
 * offset cannot point a part at another part's bytes. */
static int parts_check(const struct manifest_expert_layer *l, const char *path)
{
	uint64_t off = 0;
	for (int p = 0; p < EXPERT_PARTS; p++) {
		const struct manifest_tensor *t = &l->parts[p];
		const char *want = expert_part_name((enum expert_part)p);
		if (strcmp(t->name, want) != 0)
			return error_set(EINVAL, "%s: layer %d: part %d is \"%s\", expected %s (parts are gate, up, "
					 "down in this order)", path, l->layer, p, t->name, want);
		if (t->offset != off)
			return error_set(EINVAL, "%s: layer %d: part %s is at offset %" PRIu64 " of its record, not %"
					 PRIu64 " (docs/FORMAT.md section 4)", path, l->layer, t->name, t->offset, off);
		off = manifest_align_up(off + t->bytes, MANIFEST_PART_ALIGN);
	}
	uint64_t record = manifest_align_up(off, MANIFEST_ALIGN);
	if (l->record_bytes != record)
		return error_set(EINVAL, "%s: layer %d: record_bytes %" PRIu64 " is not %" PRIu64 ", the end of part "
				 "down rounded up to %d", path, l->layer, l->record_bytes, record, MANIFEST_ALIGN);
	return 0;
}

/* A shard's "records" (the experts its file holds, strictly ascending)
 * into l->records and l->slot; without the key the file holds all ne. */
static int records_from_json(struct manifest_expert_layer *l, const cJSON *rs, uint64_t ne, const char *path)
{
	l->n_records = (int32_t)ne;
	if (!rs)
		return 0;
	if (!cJSON_IsArray(rs) || cJSON_GetArraySize(rs) > (int)ne)
		return error_set(EINVAL, "%s: layer %d: records must be a list of at most %" PRIu64 " experts", path,
				 l->layer, ne);
	l->records = calloc(ne ? ne : 1, sizeof *l->records);
	l->slot = malloc((ne ? ne : 1) * sizeof *l->slot);
	if (!l->records || !l->slot)
		return error_set(ENOMEM, "out of memory");
	for (uint64_t e = 0; e < ne; e++)
		l->slot[e] = -1;
	l->n_records = 0;
	for (const cJSON *r = rs->child; r; r = r->next) {
		int64_t e;
		if (json_int(r, 0, (int64_t)ne - 1, &e) || (l->n_records && e <= l->records[l->n_records - 1]))
			return error_set(EINVAL, "%s: layer %d: records must be expert numbers below %" PRIu64 ", "
						 "strictly ascending",
					 path, l->layer, ne);
		l->slot[e] = l->n_records;
		l->records[l->n_records++] = (int32_t)e;
	}
	return 0;
}

/* One experts.layers[] entry of ne experts into l. */
static int layer_from_json(struct manifest_expert_layer *l, const cJSON *o, uint64_t ne, const char *path)
{
	uint64_t layer;
	const cJSON *file = cJSON_GetObjectItemCaseSensitive(o, "file");
	const cJSON *parts = cJSON_GetObjectItemCaseSensitive(o, "parts");
	const cJSON *sums = cJSON_GetObjectItemCaseSensitive(o, "xxh3");
	if (get_u64(o, "layer", &layer) || layer >= MODEL_LAYERS_MAX || !cJSON_IsString(file) ||
	    get_u64(o, "record_bytes", &l->record_bytes) || !cJSON_IsArray(parts) ||
	    cJSON_GetArraySize(parts) != EXPERT_PARTS || !cJSON_IsArray(sums) || cJSON_GetArraySize(sums) != (int)ne)
		return error_set(EINVAL, "%s: malformed expert layer entry", path);
	l->layer = (int32_t)layer;
	if (!(l->file = strdup(file->valuestring)))
		return error_set(ENOMEM, "out of memory");
	if (l->record_bytes == 0 || l->record_bytes % MANIFEST_ALIGN)
		return error_set(EINVAL, "%s: layer %d: record_bytes %" PRIu64 " is not a multiple of %d", path,
				 l->layer, l->record_bytes, MANIFEST_ALIGN);
	for (int p = 0; p < EXPERT_PARTS; p++) {
		int rc = tensor_from_json(&l->parts[p], cJSON_GetArrayItem(parts, p), false, path);
		if (rc)
			return rc;
		if (l->parts[p].offset % MANIFEST_PART_ALIGN || l->parts[p].offset + l->parts[p].bytes > l->record_bytes)
			return error_set(EINVAL, "%s: layer %d: part %s is misaligned or runs past its record", path,
					 l->layer, l->parts[p].name);
	}
	l->checksums = calloc(ne ? ne : 1, sizeof *l->checksums);
	if (!l->checksums)
		return error_set(ENOMEM, "out of memory");
	int e = 0;
	for (const cJSON *s = sums->child; s; s = s->next, e++)
		if (parse_hex64(s, &l->checksums[e]))
			return error_set(EINVAL, "%s: layer %d: bad checksum of expert %d", path, l->layer, e);
	int rc = records_from_json(l, cJSON_GetObjectItemCaseSensitive(o, "records"), ne, path);
	if (rc)
		return rc;
	/* The file's size and then the parts are checked once the mirrors are
	 * known (expert_layers_check); its name here. */
	if (strstr(l->file, "..") || l->file[0] == '/')
		return error_set(EINVAL, "%s: file name \"%s\" leaves the container", path, l->file);
	return 0;
}

/* 0 when the file at path holds the n_records records of l; else -ENOENT
 * or -EINVAL, with why in the words of manifest_load's error. */
static int expert_file_size(const struct manifest_expert_layer *l, const char *path, char *why, size_t why_bytes)
{
	struct stat sb;
	if (stat(path, &sb) != 0) {
		snprintf(why, why_bytes, "%s: missing (%s)", path, strerror(errno));
		return -ENOENT;
	}
	uint64_t fsize = (uint64_t)sb.st_size, nr = (uint64_t)l->n_records;
	if (nr && (l->record_bytes > fsize / nr || fsize < nr * l->record_bytes)) {
		snprintf(why, why_bytes, "%s: truncated: %" PRIu64 " bytes, %" PRIu64 " expected", path, fsize,
			 nr * l->record_bytes);
		return -EINVAL;
	}
	return 0;
}

/* Every expert file holds its records, or a registered mirror's copy of it
 * does: a missing or short primary file that a mirror covers is left to
 * the expert store, which reads that layer from the mirror alone and says
 * so (storage/copies.h); the records' checksums still judge every byte
 * read. Without such a mirror, the primary's error. Then each layer's
 * parts (after the size, whose check must not wrap however large the
 * records claim to be). */
static int expert_layers_check(const struct manifest *m, const char *dir, const char *manifest_path)
{
	char path[PATH_MAX], why[PATH_MAX + 128], mirror_why[PATH_MAX + 128];
	for (size_t i = 0; i < m->n_expert_layers; i++) {
		manifest_copy_path(m, dir, 0, i, path, sizeof path);
		int rc = expert_file_size(&m->layers[i], path, why, sizeof why);
		bool covered = false;
		for (size_t k = 1; rc && !covered && k <= m->n_mirrors; k++)
			covered = manifest_copy_path(m, dir, k, i, path, sizeof path) &&
				  expert_file_size(&m->layers[i], path, mirror_why, sizeof mirror_why) == 0;
		if (rc && !covered)
			return error_set(-rc, "%s", why);
		if ((rc = parts_check(&m->layers[i], manifest_path)))
			return rc;
	}
	return 0;
}

static int layers_from_json(struct manifest *m, const cJSON *ex, const char *path)
{
	uint64_t ne = 0;
	const cJSON *ls = cJSON_GetObjectItemCaseSensitive(ex, "layers");
	if (get_u64(ex, "n_experts", &ne) || ne > 1 << 20 || !cJSON_IsArray(ls))
		return error_set(EINVAL, "%s: experts needs n_experts and layers", path);
	m->n_experts = (int32_t)ne;
	int n = cJSON_GetArraySize(ls);
	m->layers = calloc(n ? (size_t)n : 1, sizeof *m->layers);
	if (!m->layers)
		return error_set(ENOMEM, "out of memory");
	for (const cJSON *o = ls->child; o; o = o->next) {
		int rc = layer_from_json(&m->layers[m->n_expert_layers++], o, ne, path);
		if (rc)
			return rc;
		/* Increasing layers: a lookup finds the one entry of each. */
		size_t i = m->n_expert_layers - 1;
		if (i > 0 && m->layers[i].layer <= m->layers[i - 1].layer)
			return error_set(EINVAL, "%s: expert layer %d is listed after layer %d (the list must be "
					 "increasing, each layer once)", path, m->layers[i].layer, m->layers[i - 1].layer);
	}
	return 0;
}

/* "mirrors" is optional; a listed folder that is missing is not an error
 * here (the store takes an unreadable copy out of rotation). */
static int mirrors_from_json(struct manifest *m, const cJSON *ms, const char *path)
{
	if (!ms)
		return 0;
	if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) > MANIFEST_MIRRORS_MAX)
		return error_set(EINVAL, "%s: mirrors must be a list of at most %d entries", path,
				 MANIFEST_MIRRORS_MAX);
	for (const cJSON *o = ms->child; o; o = o->next) {
		struct manifest_mirror *mm = &m->mirrors[m->n_mirrors++];
		const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "dir");
		const cJSON *ls = cJSON_GetObjectItemCaseSensitive(o, "layers");
		if (!cJSON_IsString(d) || d->valuestring[0] != '/' || !cJSON_IsArray(ls))
			return error_set(EINVAL, "%s: a mirror needs an absolute dir and a layers list", path);
		mm->dir = strdup(d->valuestring);
		mm->layers = calloc((size_t)cJSON_GetArraySize(ls) + 1, sizeof *mm->layers);
		if (!mm->dir || !mm->layers)
			return error_set(ENOMEM, "out of memory");
		for (const cJSON *l = ls->child; l; l = l->next) {
			int64_t layer;
			if (json_int(l, 0, MODEL_LAYERS_MAX - 1, &layer) || !manifest_expert_layer(m, (int)layer))
				return error_set(EINVAL, "%s: mirror %s lists a layer without experts", path, mm->dir);
			mm->layers[mm->n_layers++] = (int32_t)layer;
		}
	}
	return 0;
}

/* Resident tensors lie back to back in manifest order, each at the end of
 * the one before rounded up to MANIFEST_ALIGN, the first at 0, and
 * resident.bytes ends the last (docs/FORMAT.md section 3): no tensor
 * overlaps another, and swapping two entries' offsets is refused. */
static int resident_layout_check(const struct manifest *m, const char *path)
{
	uint64_t off = 0;
	for (size_t i = 0; i < m->n_tensors; i++) {
		const struct manifest_tensor *t = &m->tensors[i];
		if (t->offset != off)
			return error_set(EINVAL, "%s: tensor %s is at offset %" PRIu64 " of %s, not %" PRIu64
					 " (tensors lie back to back in manifest order, docs/FORMAT.md section 3)",
					 path, t->name, t->offset, m->resident_file, off);
		off = manifest_align_up(off + t->bytes, MANIFEST_ALIGN);
	}
	if (m->resident_bytes != off)
		return error_set(EINVAL, "%s: resident bytes %" PRIu64 " is not %" PRIu64 ", the end of the last "
				 "tensor rounded up to %d", path, m->resident_bytes, off, MANIFEST_ALIGN);
	return 0;
}

/* The "resident" section, checked against dir/resident.bin. */
static int resident_from_json(struct manifest *m, const cJSON *res, const char *dir, const char *path)
{
	const cJSON *rf = cJSON_GetObjectItemCaseSensitive(res, "file");
	const cJSON *ts = cJSON_GetObjectItemCaseSensitive(res, "tensors");
	uint64_t fsize = 0;
	if (!cJSON_IsString(rf) || !cJSON_IsArray(ts) || get_u64(res, "bytes", &m->resident_bytes))
		return error_set(EINVAL, "%s: resident needs file, bytes and tensors", path);
	if (!(m->resident_file = strdup(rf->valuestring)))
		return error_set(ENOMEM, "out of memory");
	int rc = file_size_of(dir, m->resident_file, &fsize);
	if (rc)
		return rc;
	if (fsize < m->resident_bytes)
		return error_set(EINVAL, "%s/%s: truncated: %" PRIu64 " bytes, %" PRIu64 " expected", dir,
				 m->resident_file, fsize, m->resident_bytes);
	int n = cJSON_GetArraySize(ts);
	m->tensors = calloc(n ? (size_t)n : 1, sizeof *m->tensors);
	if (!m->tensors)
		return error_set(ENOMEM, "out of memory");
	for (const cJSON *o = ts->child; o; o = o->next) {
		struct manifest_tensor *t = &m->tensors[m->n_tensors++];
		if ((rc = tensor_from_json(t, o, true, path)))
			return rc;
		/* O(n^2) name compares, once at load: a few ms for 2,000 tensors. */
		for (size_t k = 0; k + 1 < m->n_tensors; k++)
			if (strcmp(m->tensors[k].name, t->name) == 0)
				return error_set(EINVAL, "%s: tensor %s is listed twice", path, t->name);
		if (t->offset % MANIFEST_ALIGN || t->offset + t->bytes > m->resident_bytes)
			return error_set(EINVAL, "%s: tensor %s: range %" PRIu64 "+%" PRIu64 " is outside %s", path,
					 t->name, t->offset, t->bytes, m->resident_file);
	}
	return resident_layout_check(m, path);
}

uint64_t *manifest_shard_holders(const struct manifest_shard *sh, int rows, int n_experts)
{
	size_t cells = (size_t)(rows > 0 ? rows : 1) * (size_t)(n_experts > 0 ? n_experts : 1);
	uint8_t *owner = malloc(cells);
	uint64_t *holders = malloc(cells * sizeof *holders);
	if (!owner || !holders) {
		free(owner);
		free(holders);
		error_set(ENOMEM, "out of memory");
		return NULL;
	}
	placement_build(owner, rows, n_experts, sh->ranks, sh->weights);
	placement_replicate(holders, owner, rows, n_experts, sh->ranks, sh->weights, sh->replicas);
	free(owner);
	return holders;
}

/* The optional "shard" object, then the rule that ties it to the layers:
 * every layer lists its records exactly when the container is a shard,
 * and they are the experts its placement gives its rank. */
static int shard_from_json(struct manifest *m, const cJSON *sh, const char *path)
{
	struct manifest_shard *s = &m->shard;
	bool listed = m->n_expert_layers && m->layers[0].records;
	for (size_t i = 0; i < m->n_expert_layers; i++)
		if (!m->layers[i].records != !listed || (!sh && m->layers[i].records))
			return error_set(EINVAL, "%s: layer %d: \"records\" belongs to every expert layer of a shard and "
						 "to none otherwise",
					 path, m->layers[i].layer);
	if (!sh)
		return 0;
	if (!cJSON_IsObject(sh))
		return error_set(EINVAL, "%s: shard is not an object", path);
	const cJSON *ws = cJSON_GetObjectItemCaseSensitive(sh, "weights");
	int64_t ranks, rank, replicas;
	if (json_int(cJSON_GetObjectItemCaseSensitive(sh, "ranks"), 1, PLACEMENT_RANKS_MAX, &ranks))
		return error_set(EINVAL, "%s: shard.ranks must be an integer 1..%d", path, PLACEMENT_RANKS_MAX);
	if (json_int(cJSON_GetObjectItemCaseSensitive(sh, "rank"), 0, ranks - 1, &rank))
		return error_set(EINVAL, "%s: shard.rank must be an integer below shard.ranks (%" PRId64 ")", path,
				 ranks);
	if (json_int(cJSON_GetObjectItemCaseSensitive(sh, "replicas"), 1, ranks, &replicas))
		return error_set(EINVAL, "%s: shard.replicas must be an integer 1..shard.ranks (%" PRId64 ")", path,
				 ranks);
	if (!cJSON_IsArray(ws) || cJSON_GetArraySize(ws) != ranks)
		return error_set(EINVAL, "%s: shard.weights must list one weight per rank (%" PRId64 ")", path, ranks);
	s->ranks = (int32_t)ranks;
	s->rank = (int32_t)rank;
	s->replicas = (int32_t)replicas;
	int r = 0;
	for (const cJSON *w = ws->child; w; w = w->next, r++) {
		if (!cJSON_IsNumber(w) || !isfinite(w->valuedouble) || !(w->valuedouble > 0))
			return error_set(EINVAL, "%s: shard.weights[%d] is not a positive number", path, r);
		s->weights[r] = w->valuedouble;
	}
	if (!listed)
		return error_set(EINVAL, "%s: a shard lists the records of every expert layer", path);
	if (m->n_mirrors)
		return error_set(EINVAL, "%s: a shard has no mirrors (colibri mirror copies full containers)", path);
	s->present = true;
	int rows = m->layers[m->n_expert_layers - 1].layer + 1;
	uint64_t *holders = manifest_shard_holders(s, rows, m->n_experts);
	if (!holders)
		return -ENOMEM;
	int rc = 0;
	for (size_t i = 0; !rc && i < m->n_expert_layers; i++) {
		const struct manifest_expert_layer *l = &m->layers[i];
		for (int e = 0; !rc && e < m->n_experts; e++) {
			bool want = holders[(size_t)l->layer * m->n_experts + e] >> s->rank & 1, have = l->slot[e] >= 0;
			if (want != have)
				rc = error_set(EINVAL, "%s: layer %d: %s expert %d, which rank %d of %d %s under the shard's "
							"placement (records and shard do not belong together)",
					       path, l->layer, have ? "holds" : "lacks", e, s->rank, s->ranks,
					       have ? "does not hold" : "holds");
		}
	}
	free(holders);
	return rc;
}

uint64_t manifest_tensor_seed(const char *name, uint64_t offset)
{
	return XXH3_64bits_withSeed(name, strlen(name), offset);
}

uint64_t manifest_record_seed(int32_t layer, int32_t expert)
{
	return (uint64_t)(uint32_t)layer << 32 | (uint32_t)expert;
}

uint64_t manifest_model_id(const struct manifest *m)
{
	XXH3_state_t *st = XXH3_createState();
	if (!st)
		return 0;
	XXH3_64bits_reset(st);
	XXH3_64bits_update(st, &m->n_experts, sizeof m->n_experts);
	for (size_t i = 0; i < m->n_expert_layers; i++) {
		XXH3_64bits_update(st, &m->layers[i].layer, sizeof m->layers[i].layer);
		XXH3_64bits_update(st, m->layers[i].checksums, (size_t)m->n_experts * sizeof(uint64_t));
	}
	uint64_t id = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return id;
}

bool manifest_mirror_has(const struct manifest_mirror *mirror, int layer)
{
	for (size_t i = 0; i < mirror->n_layers; i++)
		if (mirror->layers[i] == layer)
			return true;
	return false;
}

bool manifest_copy_path(const struct manifest *m, const char *dir, size_t copy, size_t layer_index, char *buf,
			size_t n)
{
	const struct manifest_expert_layer *l = &m->layers[layer_index];
	if (copy > 0 && !manifest_mirror_has(&m->mirrors[copy - 1], l->layer))
		return false;
	snprintf(buf, n, "%s/%s", copy > 0 ? m->mirrors[copy - 1].dir : dir, l->file);
	return true;
}

const char *const manifest_side_files[MANIFEST_SIDE_FILES] = {
	"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
	"special_tokens_map.json",
};

static bool dir_is_empty(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return false;
	struct dirent *e;
	bool empty = true;
	while (empty && (e = readdir(d)))
		empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
	closedir(d);
	return empty;
}

int manifest_dir_replaceable(const char *dir, bool force)
{
	struct stat sb;
	if (stat(dir, &sb) != 0)
		return errno == ENOENT ? 0 : error_set(errno, "%s: %s", dir, strerror(errno));
	if (!force)
		return error_set(EEXIST, "%s: already exists; pass --force to replace it", dir);
	if (!S_ISDIR(sb.st_mode))
		return error_set(EEXIST, "%s: exists and is not a folder; refusing to replace it", dir);
	if (dir_is_empty(dir))
		return 0;
	struct manifest m;
	int rc = manifest_load(&m, dir);
	manifest_free(&m);
	if (!rc)
		return 0;
	char why[768];
	snprintf(why, sizeof why, "%s", error_message());
	error_clear();
	return error_set(EEXIST, "%s: exists and is not a container this colibri reads (%s); --force replaces only "
			 "such a container or an empty folder, so remove it yourself if it is to go", dir, why);
}

int manifest_load(struct manifest *m, const char *dir)
{
	memset(m, 0, sizeof *m);
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/manifest.json", dir);
	cJSON *root = NULL;
	int rc = json_load(path, &root);
	if (rc == -ENOENT) {
		error_clear();
		return error_set(ENOENT, "%s: not a colibri container (no manifest.json)", dir);
	}
	if (rc)
		return rc;
	const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
	const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quant");
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "resident");
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(root, "experts");
	uint64_t version = 0, group = 0;
	if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, MANIFEST_FORMAT) != 0) {
		rc = error_set(EINVAL, "%s: not a colibri manifest", path);
		goto out;
	}
	if (get_u64(root, "version", &version) || version != MANIFEST_VERSION) {
		rc = error_set(EINVAL, "%s: format version %" PRIu64 " is not supported (this colibri reads %d); reconvert the model",
			       path, version, MANIFEST_VERSION);
		goto out;
	}
	m->version = (int32_t)version;
	if (!cJSON_IsString(mt) || !cJSON_IsObject(q) || !cJSON_IsObject(res) || !cJSON_IsObject(ex)) {
		rc = error_set(EINVAL, "%s: needs model_type, quant, resident and experts", path);
		goto out;
	}
	snprintf(m->model_type, sizeof m->model_type, "%s", mt->valuestring);
	const cJSON *qe = cJSON_GetObjectItemCaseSensitive(q, "experts");
	const cJSON *qd = cJSON_GetObjectItemCaseSensitive(q, "dense");
	if (!cJSON_IsString(qe) || quant_type_parse(qe->valuestring, &m->expert_quant) ||
	    !cJSON_IsString(qd) || quant_type_parse(qd->valuestring, &m->dense_quant) ||
	    get_u64(q, "group_size", &group) || group > INT32_MAX) {
		rc = error_set(EINVAL, "%s: bad quant section", path);
		goto out;
	}
	m->group = (int32_t)group;
	/* Containers made before the integer-activation kernels computed with
	 * f32 activations; they keep doing so. */
	const cJSON *qa = cJSON_GetObjectItemCaseSensitive(q, "activations");
	if (qa && (!cJSON_IsString(qa) || (strcmp(qa->valuestring, "auto") && strcmp(qa->valuestring, "int8") &&
					   strcmp(qa->valuestring, "f32")))) {
		rc = error_set(EINVAL, "%s: quant.activations must be \"auto\", \"int8\" or \"f32\"", path);
		goto out;
	}
	snprintf(m->activations, sizeof m->activations, "%s", qa ? qa->valuestring : "f32");
	m->has_tokenizer = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "tokenizer"));

	if ((rc = resident_from_json(m, res, dir, path)))
		goto out;
	rc = layers_from_json(m, ex, path);
	if (!rc)
		rc = mirrors_from_json(m, cJSON_GetObjectItemCaseSensitive(root, "mirrors"), path);
	if (!rc)
		rc = expert_layers_check(m, dir, path);
	if (!rc)
		rc = shard_from_json(m, cJSON_GetObjectItemCaseSensitive(root, "shard"), path);
out:
	cJSON_Delete(root);
	return rc;
}

void manifest_free(struct manifest *m)
{
	for (size_t i = 0; i < m->n_tensors; i++)
		free(m->tensors[i].name);
	free(m->tensors);
	for (size_t i = 0; i < m->n_expert_layers; i++) {
		for (int p = 0; p < EXPERT_PARTS; p++)
			free(m->layers[i].parts[p].name);
		free(m->layers[i].file);
		free(m->layers[i].checksums);
		free(m->layers[i].records);
		free(m->layers[i].slot);
	}
	free(m->layers);
	free(m->resident_file);
	for (size_t i = 0; i < m->n_mirrors; i++) {
		free(m->mirrors[i].dir);
		free(m->mirrors[i].layers);
	}
	memset(m, 0, sizeof *m);
}

const struct manifest_tensor *manifest_find(const struct manifest *m, const char *name)
{
	for (size_t i = 0; i < m->n_tensors; i++)
		if (strcmp(m->tensors[i].name, name) == 0)
			return &m->tensors[i];
	return NULL;
}

const struct manifest_expert_layer *manifest_expert_layer(const struct manifest *m, int layer)
{
	for (size_t i = 0; i < m->n_expert_layers; i++)
		if (m->layers[i].layer == layer)
			return &m->layers[i];
	return NULL;
}
