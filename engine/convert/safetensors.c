/*
 * safetensors — header validation, shard discovery and row reads
 * (see safetensors.h for the format and the guarantees).
 */
#include "engine/convert/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/quant.h"
#include "base/files.h"
#include "base/error.h"

/* A header larger than this is not a checkpoint we will trust into memory. */
#define ST_HEADER_BYTES_MAX (256ull << 20)

static const struct {
	const char *name;
	enum st_dtype dtype;
	size_t size;
} st_dtypes[] = {
	{ "F32", ST_DTYPE_F32, 4 },       { "BF16", ST_DTYPE_BF16, 2 },
	{ "F16", ST_DTYPE_F16, 2 },       { "F8_E4M3", ST_DTYPE_F8_E4M3, 1 },
	{ "F64", ST_DTYPE_F64, 8 },       { "I64", ST_DTYPE_I64, 8 },
	{ "I32", ST_DTYPE_I32, 4 },       { "I16", ST_DTYPE_I16, 2 },
	{ "I8", ST_DTYPE_I8, 1 },         { "U8", ST_DTYPE_U8, 1 },
	{ "BOOL", ST_DTYPE_BOOL, 1 },     { "F8_E8M0", ST_DTYPE_F8_E8M0, 1 },
};

size_t st_dtype_size(enum st_dtype dtype)
{
	for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
		if (st_dtypes[i].dtype == dtype)
			return st_dtypes[i].size;
	return 0;
}

static enum st_dtype st_dtype_parse(const char *name)
{
	for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
		if (strcmp(st_dtypes[i].name, name) == 0)
			return st_dtypes[i].dtype;
	return ST_DTYPE_UNKNOWN;
}

static int cmp_offset(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Fills t from one header entry; data_bytes is the size of the data block. */
static int st_entry_parse(struct st_tensor *t, const cJSON *e, uint64_t data_start,
			  uint64_t data_bytes, const char *path)
{
	const char *name = e->string;
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
	const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
	const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
	if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) ||
	    !cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
		return error_set(EINVAL, "%s: tensor %s: header entry needs dtype, shape and data_offsets",
				 path, name);
	snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dt->valuestring);
	t->dtype = st_dtype_parse(dt->valuestring);
	t->ndim = cJSON_GetArraySize(sh);
	if (t->ndim > ST_MAX_DIMS)
		return error_set(EINVAL, "%s: tensor %s: %d dims, at most %d supported",
				 path, name, t->ndim, ST_MAX_DIMS);
	/* The product of the nonzero dims must fit int64 too: rows x cols of a
	 * shape with a zero dim last, e.g. [2^31, 2^32, 0], is computed in
	 * int64 by st_tensor_rows and would overflow. */
	uint64_t numel = 1, nonzero = 1;
	for (int i = 0; i < t->ndim; i++) {
		const cJSON *d = cJSON_GetArrayItem(sh, i);
		if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 9.0e15 ||
		    d->valuedouble != (double)(int64_t)d->valuedouble)
			return error_set(EINVAL, "%s: tensor %s: bad shape", path, name);
		t->shape[i] = (int64_t)d->valuedouble;
		if (t->shape[i] != 0 && nonzero > (uint64_t)INT64_MAX / (uint64_t)t->shape[i])
			return error_set(EINVAL, "%s: tensor %s: shape overflows", path, name);
		nonzero *= t->shape[i] ? (uint64_t)t->shape[i] : 1;
		numel *= (uint64_t)t->shape[i];
	}
	const cJSON *b = cJSON_GetArrayItem(off, 0), *en = cJSON_GetArrayItem(off, 1);
	if (!cJSON_IsNumber(b) || !cJSON_IsNumber(en) || b->valuedouble < 0 ||
	    en->valuedouble < b->valuedouble || en->valuedouble > (double)data_bytes ||
	    b->valuedouble != floor(b->valuedouble) || en->valuedouble != floor(en->valuedouble))
		return error_set(EINVAL, "%s: tensor %s: data_offsets point outside the data (%llu bytes)",
				 path, name, (unsigned long long)data_bytes);
	uint64_t begin = (uint64_t)b->valuedouble, end = (uint64_t)en->valuedouble;
	size_t es = st_dtype_size(t->dtype);
	if (es && (numel > UINT64_MAX / es || numel * es != end - begin))
		return error_set(EINVAL, "%s: tensor %s: %llu bytes of data for shape of %llu %s elements",
				 path, name, (unsigned long long)(end - begin),
				 (unsigned long long)numel, t->dtype_name);
	t->offset = data_start + begin;
	t->nbytes = end - begin;
	t->name = strdup(name);
	return t->name ? 0 : error_set(ENOMEM, "out of memory");
}

int st_header_length(const uint8_t prefix[8], uint64_t file_bytes, const char *path, uint64_t *hlen)
{
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | prefix[i];
	if (n < 2 || n > ST_HEADER_BYTES_MAX || n > file_bytes - 8)
		return error_set(EINVAL, "%s: header length %llu does not fit the file (%llu bytes)",
				 path, (unsigned long long)n, (unsigned long long)file_bytes);
	*hlen = n;
	return 0;
}

/* The header text hdr[0..hlen) as a JSON object: an object from its first
 * byte (no byte order mark, no leading space), padded at the end with
 * spaces (0x20) only, as the safetensors format has it. hdr need not be
 * NUL-terminated. */
static int header_json(const char *hdr, size_t hlen, const char *path, cJSON **out)
{
	const char *end = NULL;
	*out = NULL;
	if (hlen == 0 || hdr[0] != '{')
		return error_set(EINVAL, "%s: header is not a JSON object: its first byte is 0x%02x, not '{'", path,
				 hlen ? (uint8_t)hdr[0] : 0);
	cJSON *root = cJSON_ParseWithLengthOpts(hdr, hlen, &end, false);
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return error_set(EINVAL, "%s: header is not a JSON object", path);
	}
	size_t at = (size_t)(end - hdr);
	while (at < hlen && hdr[at] == ' ')
		at++;
	if (at != hlen) {
		cJSON_Delete(root);
		return error_set(EINVAL, "%s: header has bytes other than spaces after its JSON object (at byte %zu "
				 "of %zu)", path, at, hlen);
	}
	*out = root;
	return 0;
}

int st_header_parse(struct st_file *f, const char *hdr, size_t hlen, uint64_t file_bytes)
{
	const char *path = f->path;
	cJSON *root = NULL;
	struct st_tensor *sorted = NULL;
	f->file_bytes = file_bytes;
	int rc = header_json(hdr, hlen, path, &root);
	if (rc)
		goto out;
	uint64_t data_start = 8 + (uint64_t)hlen, data_bytes = file_bytes - data_start;
	size_t n = 0;
	for (const cJSON *e = root->child; e; e = e->next)
		n += strcmp(e->string, "__metadata__") != 0;
	f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
	sorted = malloc((n ? n : 1) * sizeof *sorted);
	if (!f->tensors || !sorted) {
		rc = error_set(ENOMEM, "out of memory");
		goto out;
	}
	for (const cJSON *e = root->child; e; e = e->next) {
		if (strcmp(e->string, "__metadata__") == 0)
			continue;
		rc = st_entry_parse(&f->tensors[f->n_tensors], e, data_start, data_bytes, path);
		if (rc)
			goto out;
		f->n_tensors++;
	}
	/* Overlapping tensors mean a corrupt or hostile header. */
	memcpy(sorted, f->tensors, n * sizeof *sorted);
	qsort(sorted, n, sizeof *sorted, cmp_offset);
	for (size_t i = 1; i < n; i++) {
		if (sorted[i].offset < sorted[i - 1].offset + sorted[i - 1].nbytes) {
			rc = error_set(EINVAL, "%s: tensors %s and %s overlap", path,
				       sorted[i - 1].name, sorted[i].name);
			goto out;
		}
	}
out:
	free(sorted);
	cJSON_Delete(root);
	if (rc) {
		for (size_t i = 0; i < f->n_tensors; i++)
			free(f->tensors[i].name);
		free(f->tensors);
		f->tensors = NULL;
		f->n_tensors = 0;
	}
	return rc;
}

int st_file_open(struct st_file *f, const char *path)
{
	memset(f, 0, sizeof *f);
	f->fd = -1;
	char *hdr = NULL;
	int rc;
	struct stat sb;

	f->path = strdup(path);
	if (!f->path) {
		rc = error_set(ENOMEM, "out of memory");
		goto fail;
	}
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0) {
		rc = error_set(errno, "%s: cannot open: %s", path, strerror(errno));
		goto fail;
	}
	if (fstat(f->fd, &sb) != 0) {
		rc = error_set(errno, "%s: cannot stat: %s", path, strerror(errno));
		goto fail;
	}
	uint64_t file_bytes = (uint64_t)sb.st_size, hlen;
	uint8_t lenbuf[8];
	if (file_bytes < 8 || file_pread_full(f->fd, lenbuf, 8, 0) != 0) {
		rc = error_set(EINVAL, "%s: truncated: no safetensors header", path);
		goto fail;
	}
	if ((rc = st_header_length(lenbuf, file_bytes, path, &hlen)))
		goto fail;
	hdr = malloc(hlen + 1);
	if (!hdr) {
		rc = error_set(ENOMEM, "out of memory");
		goto fail;
	}
	if (file_pread_full(f->fd, hdr, hlen, 8) != 0) {
		rc = error_set(EIO, "%s: cannot read header", path);
		goto fail;
	}
	hdr[hlen] = 0;
	if ((rc = st_header_parse(f, hdr, hlen, file_bytes)))
		goto fail;
	free(hdr);
	return 0;
fail:
	free(hdr);
	st_file_close(f);
	return rc;
}

void st_file_close(struct st_file *f)
{
	for (size_t i = 0; i < f->n_tensors; i++)
		free(f->tensors[i].name);
	free(f->tensors);
	if (f->fd >= 0)
		close(f->fd);
	free(f->path);
	memset(f, 0, sizeof *f);
	f->fd = -1;
}

static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

static int st_set_add_file(struct st_set *set, const char *path)
{
	struct st_file *files = realloc(set->files, (set->n_files + 1) * sizeof *files);
	if (!files)
		return error_set(ENOMEM, "out of memory");
	set->files = files;
	int rc = st_file_open(&set->files[set->n_files], path);
	if (rc)
		return rc;
	set->n_files++;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void st_names_free(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* Appends a copy of name to the list; -ENOMEM leaves the list as it was. */
static int names_add(char ***names, size_t *n, const char *name)
{
	char **nn = realloc(*names, (*n + 1) * sizeof *nn);
	if (!nn)
		return error_set(ENOMEM, "out of memory");
	*names = nn;
	if (!(nn[*n] = strdup(name)))
		return error_set(ENOMEM, "out of memory");
	(*n)++;
	return 0;
}

int st_index_parse(const char *json, size_t len, const char *path, char ***names, size_t *n)
{
	*names = NULL;
	*n = 0;
	int rc = 0;
	cJSON *root = cJSON_ParseWithLength(json, len);
	const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
	if (!cJSON_IsObject(map)) {
		rc = error_set(EINVAL, "%s: not valid JSON with a weight_map object", path);
		goto out;
	}
	for (const cJSON *e = map->child; e; e = e->next) {
		/* "", "." and ".." would open the folder itself or its parent. */
		if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !e->valuestring[0] ||
		    strcmp(e->valuestring, ".") == 0 || strcmp(e->valuestring, "..") == 0) {
			rc = error_set(EINVAL, "%s: weight_map entry %s is not a file name", path, e->string);
			goto out;
		}
		int seen = 0;
		for (size_t i = 0; i < *n && !seen; i++)
			seen = strcmp((*names)[i], e->valuestring) == 0;
		if (!seen && (rc = names_add(names, n, e->valuestring)))
			goto out;
	}
	if (*n == 0)
		rc = error_set(ENOENT, "%s: weight_map lists no shards", path);
	else
		qsort(*names, *n, sizeof **names, cmp_str);
out:
	cJSON_Delete(root);
	if (rc) {
		st_names_free(*names, *n);
		*names = NULL;
		*n = 0;
	}
	return rc;
}

/* Shard file names: from the index's weight_map if present, else every
 * model*.safetensors in dir, sorted. */
static int st_set_list(const char *dir, char ***names, size_t *n)
{
	char path[PATH_MAX];
	*names = NULL;
	*n = 0;
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
	if (access(path, F_OK) == 0) {
		char *buf;
		size_t len;
		int rc = file_read_all(path, &buf, &len);
		if (rc)
			return rc;
		rc = st_index_parse(buf, len, path, names, n);
		free(buf);
		return rc;
	}
	DIR *d = opendir(dir);
	if (!d)
		return error_set(errno, "%s: cannot open folder: %s", dir, strerror(errno));
	struct dirent *de;
	int rc = 0;
	while (rc == 0 && (de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (strncmp(de->d_name, "model", 5) == 0 && l >= 12 &&
		    strcmp(de->d_name + l - 12, ".safetensors") == 0)
			rc = names_add(names, n, de->d_name);
	}
	closedir(d);
	if (rc == 0 && *n == 0)
		rc = error_set(ENOENT, "%s: no model.safetensors or model-*.safetensors shards", dir);
	if (rc) {
		st_names_free(*names, *n);
		*names = NULL;
		*n = 0;
		return rc;
	}
	qsort(*names, *n, sizeof **names, cmp_str);
	return 0;
}

int st_set_index(struct st_set *set)
{
	set->n_tensors = 0;
	set->total_bytes = 0;
	for (size_t i = 0; i < set->n_files; i++)
		set->n_tensors += set->files[i].n_tensors;
	set->n_slots = 16;
	while (set->n_slots < 2 * set->n_tensors)
		set->n_slots *= 2;
	free(set->slots);
	set->slots = calloc(set->n_slots, sizeof *set->slots);
	if (!set->slots)
		return error_set(ENOMEM, "out of memory");
	for (size_t i = 0; i < set->n_files; i++) {
		for (size_t j = 0; j < set->files[i].n_tensors; j++) {
			struct st_tensor *t = &set->files[i].tensors[j];
			t->file_index = (int)i;
			set->total_bytes += t->nbytes;
			size_t s = name_hash(t->name) & (set->n_slots - 1);
			while (set->slots[s]) {
				if (strcmp(set->slots[s]->name, t->name) == 0)
					return error_set(EINVAL, "%s: tensor %s also appears in %s", set->files[i].path,
							 t->name, set->files[set->slots[s]->file_index].path);
				s = (s + 1) & (set->n_slots - 1);
			}
			set->slots[s] = t;
		}
	}
	return 0;
}

int st_set_open(struct st_set *set, const char *dir)
{
	memset(set, 0, sizeof *set);
	char **names = NULL;
	size_t n = 0;
	int rc = st_set_list(dir, &names, &n);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char path[PATH_MAX];
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		rc = st_set_add_file(set, path);
	}
	st_names_free(names, n);
	if (rc)
		goto fail;

	if ((rc = st_set_index(set)))
		goto fail;
	return 0;
fail:
	st_set_close(set);
	return rc;
}

void st_set_close(struct st_set *set)
{
	for (size_t i = 0; i < set->n_files; i++)
		st_file_close(&set->files[i]);
	free(set->files);
	free(set->slots);
	memset(set, 0, sizeof *set);
}

const struct st_tensor *st_set_find(const struct st_set *set, const char *name)
{
	if (!set->n_slots)
		return NULL;
	size_t s = name_hash(name) & (set->n_slots - 1);
	while (set->slots[s]) {
		if (strcmp(set->slots[s]->name, name) == 0)
			return set->slots[s];
		s = (s + 1) & (set->n_slots - 1);
	}
	return NULL;
}

const char *st_set_path(const struct st_set *set, const struct st_tensor *t)
{
	return set->files[t->file_index].path;
}

int64_t st_tensor_rows(const struct st_tensor *t)
{
	int64_t r = 1;
	for (int i = 0; i + 1 < t->ndim; i++)
		r *= t->shape[i];
	return r;
}

int64_t st_tensor_cols(const struct st_tensor *t)
{
	return t->ndim ? t->shape[t->ndim - 1] : 1;
}

uint64_t st_tensor_row_bytes(const struct st_tensor *t, int64_t n)
{
	if (t->dtype == ST_DTYPE_GGML)
		return (uint64_t)n * (uint64_t)t->row_bytes;
	return (uint64_t)n * (uint64_t)st_tensor_cols(t) * st_dtype_size(t->dtype);
}

int st_tensor_read_raw(const struct st_set *set, const struct st_tensor *t,
		       int64_t row, int64_t n_rows, void *out)
{
	const char *path = st_set_path(set, t);
	if (t->rows && t->rows->read_raw)
		return t->rows->read_raw(set, t, row, n_rows, out);
	if (t->rows)
		return error_set(ENOTSUP, "%s: tensor %s has no stored form (it is computed from other tensors)",
				 path, t->name);
	size_t es = st_dtype_size(t->dtype);
	if (!es)
		return error_set(ENOTSUP, "%s: tensor %s: unsupported dtype %s", path, t->name,
				 t->dtype_name);
	int64_t cols = st_tensor_cols(t);
	if (row < 0 || n_rows < 0 || row + n_rows > st_tensor_rows(t))
		return error_set(EINVAL, "%s: tensor %s: rows %lld..%lld out of range", path,
				 t->name, (long long)row, (long long)(row + n_rows));
	uint64_t n = (uint64_t)n_rows * (uint64_t)cols;
	uint64_t off = t->offset + (uint64_t)row * (uint64_t)cols * es;
	int rc = file_pread_full(set->files[t->file_index].fd, out, n * es, off);
	if (rc == -EIO)
		return error_set(EIO, "%s: tensor %s: file is truncated (needs %llu bytes)", path,
				 t->name, (unsigned long long)(off + n * es));
	if (rc)
		return error_set(-rc, "%s: tensor %s: read failed: %s", path, t->name, strerror(-rc));
	return 0;
}

int st_tensor_read_f32(const struct st_set *set, const struct st_tensor *t,
		       int64_t row, int64_t n_rows, float *out)
{
	if (t->rows)
		return t->rows->read_f32(set, t, row, n_rows, out);
	if (t->dtype != ST_DTYPE_F32 && t->dtype != ST_DTYPE_BF16 &&
	    t->dtype != ST_DTYPE_F16 && t->dtype != ST_DTYPE_F8_E4M3 && t->dtype != ST_DTYPE_F8_E8M0)
		return error_set(ENOTSUP, "%s: tensor %s: unsupported dtype %s", st_set_path(set, t), t->name,
				 t->dtype_name);
	int rc = st_tensor_read_raw(set, t, row, n_rows, out);
	if (rc)
		return rc;
	uint64_t n = (uint64_t)n_rows * (uint64_t)st_tensor_cols(t);
	/* Widen in place from the last element down: writing element i
	 * overwrites the source bytes of elements >= i only, and those have
	 * already been converted. */
	const unsigned char *raw = (const unsigned char *)out;
	if (t->dtype == ST_DTYPE_BF16 || t->dtype == ST_DTYPE_F16) {
		for (uint64_t i = n; i-- > 0;) {
			uint16_t h;
			memcpy(&h, raw + 2 * i, 2); /* char access: may alias out */
			out[i] = t->dtype == ST_DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
		}
	} else if (t->dtype == ST_DTYPE_F8_E4M3) {
		for (uint64_t i = n; i-- > 0;)
			out[i] = fp8_e4m3_to_f32(raw[i]);
	} else if (t->dtype == ST_DTYPE_F8_E8M0) {
		for (uint64_t i = n; i-- > 0;)
			out[i] = st_e8m0_to_f32(raw[i]);
	}
	return 0;
}
