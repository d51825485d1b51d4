/*
 * fuzz_gguf — the GGUF file header (engine/convert/gguf.h).
 *
 * An input is a whole file image, parsed in memory by gguf_parse. Beyond
 * "no crash", an accepted header must keep what it promises to the
 * converter:
 *   - version 2 or 3, the alignment a power of two, the data section at an
 *     aligned offset inside the file;
 *   - every key non-empty and unique; every string NUL-terminated at its
 *     length; every array element readable (gguf_arr_i64 / gguf_arr_f64,
 *     under ASan); every typed getter on every key returns 0, -EINVAL with
 *     a message naming the file, never anything else;
 *   - every tensor: 1 to 4 dims, each >= 1, unused ones 1, the element count
 *     within int64; a known type, ne[0] a whole number of blocks, row_bytes
 *     and nbytes exactly the blocks' bytes; its data aligned, inside the
 *     file (no 64-bit wrap-around), overlapping no other; names unique;
 *   - the same header parses from the first data_offset bytes alone.
 * A rejected header must return a negative errno, leave nothing behind and
 * set a message that names the file. Accepted images are then written to a
 * memfd and opened by path with gguf_file_open, which must agree tensor for
 * tensor, and the first rows of each tensor are read back against the image
 * through gguf_tensor_read_rows (a row past the end must be refused).
 *
 * An input holding FUZZ_SEP is a split model instead: up to three images,
 * written to the scratch folder as m-0000N-of-00003.gguf (an empty part is
 * a missing file) and opened as a set from the first. An accepted set has
 * split.count files, split.tensors.count tensors in all, each found by
 * name in the file it came from; a refused one leaves no files behind and a
 * message naming a file of the set.
 */
#include <stdbool.h>
#include <sys/mman.h>

#include "engine/convert/gguf.h"
#include "base/error.h"
#include "tests/fuzz/fuzz_util.h"

#define PATH "fuzz.gguf"

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_offset(const void *a, const void *b)
{
	const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
	const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static void check_getter(int rc, const char *key)
{
	FUZZ_ASSERT(rc == 0 || rc == -EINVAL, "%s: getter returned %d", key, rc);
	if (rc)
		FUZZ_ASSERT(strstr(error_message(), PATH), "%s: message does not name the file: %s", key,
			    error_message());
	error_clear();
}

static void check_kvs(const struct gguf_file *f)
{
	const char **keys = malloc((f->n_kvs + 1) * sizeof *keys);
	if (!keys)
		abort();
	struct gguf_set set = { .files = (struct gguf_file *)f, .n_files = 1 };
	volatile double sink = 0;
	for (size_t i = 0; i < f->n_kvs; i++) {
		const struct gguf_kv *kv = &f->kvs[i];
		FUZZ_ASSERT(kv->key && kv->key[0], "kv %zu has no key", i);
		keys[i] = kv->key;
		FUZZ_ASSERT(kv->type <= GGUF_VT_F64, "%s: type %d", kv->key, kv->type);
		if (kv->type == GGUF_VT_STRING)
			FUZZ_ASSERT(kv->s && kv->s[kv->len] == 0, "%s: string not terminated", kv->key);
		if (kv->type == GGUF_VT_ARRAY) {
			FUZZ_ASSERT(kv->arr_type != GGUF_VT_ARRAY && kv->arr_type <= GGUF_VT_F64,
				    "%s: element type %d", kv->key, kv->arr_type);
			uint64_t n = kv->n < 4096 ? kv->n : 4096;
			if (kv->arr_type == GGUF_VT_STRING) {
				FUZZ_ASSERT(kv->n == 0 || (kv->strs && kv->lens), "%s: no strings", kv->key);
				for (uint64_t j = 0; j < n; j++)
					FUZZ_ASSERT(kv->strs[j][kv->lens[j]] == 0, "%s[%llu] not terminated", kv->key,
						    (unsigned long long)j);
				if (kv->n)
					sink += kv->strs[kv->n - 1][0];
			} else {
				FUZZ_ASSERT(kv->n == 0 || kv->data, "%s: no data", kv->key);
				for (uint64_t j = 0; j < n; j++)
					sink += (double)gguf_arr_i64(kv, j) + gguf_arr_f64(kv, j);
				if (kv->n)
					sink += gguf_arr_f64(kv, kv->n - 1);
			}
		}
		FUZZ_ASSERT(gguf_find_kv(&set, kv->key) == kv, "%s: lookup finds another pair", kv->key);
		uint32_t u32;
		uint64_t u64;
		int64_t i64;
		float fl;
		bool b;
		const char *s;
		const struct gguf_kv *a;
		error_clear();
		check_getter(gguf_get_u32(&set, kv->key, &u32), kv->key);
		check_getter(gguf_get_u64(&set, kv->key, &u64), kv->key);
		check_getter(gguf_get_i64(&set, kv->key, &i64), kv->key);
		check_getter(gguf_get_f32(&set, kv->key, &fl), kv->key);
		check_getter(gguf_get_bool(&set, kv->key, &b), kv->key);
		check_getter(gguf_get_str(&set, kv->key, &s), kv->key);
		check_getter(gguf_get_arr(&set, kv->key, GGUF_VT_ARRAY, &a), kv->key);
		check_getter(gguf_get_arr(&set, kv->key, GGUF_VT_U32, &a), kv->key);
		check_getter(gguf_get_arr(&set, kv->key, GGUF_VT_F32, &a), kv->key);
	}
	(void)sink;
	qsort(keys, f->n_kvs, sizeof *keys, cmp_str);
	for (size_t i = 1; i < f->n_kvs; i++)
		FUZZ_ASSERT(strcmp(keys[i - 1], keys[i]) != 0, "key %s twice", keys[i]);
	free(keys);
}

static void check_tensors(const struct gguf_file *f, uint64_t file_bytes)
{
	FUZZ_ASSERT(f->version == 2 || f->version == 3, "version %u", f->version);
	FUZZ_ASSERT(f->alignment && !(f->alignment & (f->alignment - 1)), "alignment %u", f->alignment);
	FUZZ_ASSERT(f->data_offset <= file_bytes, "data at %llu of %llu", (unsigned long long)f->data_offset,
		    (unsigned long long)file_bytes);
	if (f->n_tensors)
		FUZZ_ASSERT(f->data_offset % f->alignment == 0, "data at %llu", (unsigned long long)f->data_offset);
	const struct gguf_tensor **by = malloc((f->n_tensors + 1) * sizeof *by);
	const char **names = malloc((f->n_tensors + 1) * sizeof *names);
	if (!by || !names)
		abort();
	for (size_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		FUZZ_ASSERT(t->name && t->name[0] && strlen(t->name) < 64, "tensor %zu name", i);
		FUZZ_ASSERT(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS, "%s: %d dims", t->name, t->n_dims);
		int64_t numel = 1;
		for (int d = 0; d < GGUF_MAX_DIMS; d++) {
			FUZZ_ASSERT(t->ne[d] >= 1 && (d < t->n_dims || t->ne[d] == 1), "%s: ne[%d] = %lld", t->name, d,
				    (long long)t->ne[d]);
			FUZZ_ASSERT(!__builtin_mul_overflow(numel, t->ne[d], &numel), "%s: element count overflows",
				    t->name);
		}
		int64_t be = ggml_block_elems(t->type), bb = ggml_block_bytes(t->type);
		FUZZ_ASSERT(be > 0 && bb > 0 && ggml_type_name(t->type), "%s: type %u", t->name, t->type);
		FUZZ_ASSERT(t->ne[0] % be == 0 && t->row_bytes == t->ne[0] / be * bb, "%s: row of %lld %s is %lld bytes",
			    t->name, (long long)t->ne[0], ggml_type_name(t->type), (long long)t->row_bytes);
		uint64_t nb;
		FUZZ_ASSERT(!__builtin_mul_overflow((uint64_t)t->row_bytes, (uint64_t)(numel / t->ne[0]), &nb) &&
			    nb == t->nbytes, "%s: %llu bytes", t->name, (unsigned long long)t->nbytes);
		FUZZ_ASSERT(t->offset >= f->data_offset && (t->offset - f->data_offset) % f->alignment == 0,
			    "%s: offset %llu", t->name, (unsigned long long)t->offset);
		FUZZ_ASSERT(t->offset <= file_bytes && t->nbytes <= file_bytes - t->offset,
			    "%s: [%llu, +%llu) outside a file of %llu bytes", t->name, (unsigned long long)t->offset,
			    (unsigned long long)t->nbytes, (unsigned long long)file_bytes);
		by[i] = t;
		names[i] = t->name;
	}
	qsort(by, f->n_tensors, sizeof *by, cmp_offset);
	for (size_t i = 1; i < f->n_tensors; i++)
		FUZZ_ASSERT(by[i]->offset >= by[i - 1]->offset + by[i - 1]->nbytes, "%s and %s overlap",
			    by[i - 1]->name, by[i]->name);
	qsort(names, f->n_tensors, sizeof *names, cmp_str);
	for (size_t i = 1; i < f->n_tensors; i++)
		FUZZ_ASSERT(strcmp(names[i - 1], names[i]) != 0, "tensor %s twice", names[i]);
	free(by);
	free(names);
}

/* Opens the image by path, compares with the in-memory parse, reads rows. */
static void check_open(const uint8_t *data, size_t size, const struct gguf_file *mem)
{
	int fd = memfd_create("fuzz-gguf", MFD_CLOEXEC);
	if (fd < 0)
		return;	/* no memfd here: the in-memory checks stand alone */
	if (write(fd, data, size) != (ssize_t)size)
		abort();
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	struct gguf_file f;
	error_clear();
	int rc = gguf_file_open(&f, path);
	FUZZ_ASSERT(rc == 0, "gguf_file_open refuses what gguf_parse accepted: %s", error_message());
	FUZZ_ASSERT(f.n_tensors == mem->n_tensors && f.n_kvs == mem->n_kvs && f.data_offset == mem->data_offset,
		    "by path %zu tensors %zu kvs, in memory %zu and %zu", f.n_tensors, f.n_kvs, mem->n_tensors,
		    mem->n_kvs);
	struct gguf_set set = { .files = &f, .n_files = 1, .n_tensors = f.n_tensors };
	uint8_t *buf = malloc(4 * 65536);
	if (!buf)
		abort();
	for (size_t i = 0; i < f.n_tensors; i++) {
		const struct gguf_tensor *t = &f.tensors[i], *m = &mem->tensors[i];
		FUZZ_ASSERT(strcmp(t->name, m->name) == 0 && t->offset == m->offset && t->nbytes == m->nbytes &&
			    t->type == m->type && t->row_bytes == m->row_bytes,
			    "tensor %zu differs between gguf_file_open and gguf_parse", i);
		int64_t rows = (int64_t)(t->nbytes / (uint64_t)t->row_bytes);
		if (t->row_bytes <= 65536) {
			int64_t n = rows < 4 ? rows : 4;
			error_clear();
			FUZZ_ASSERT(gguf_tensor_read_rows(&set, t, 0, n, buf) == 0, "%s: %s", t->name, error_message());
			FUZZ_ASSERT(memcmp(buf, data + t->offset, (size_t)(n * t->row_bytes)) == 0,
				    "%s: rows differ from the image", t->name);
		}
		FUZZ_ASSERT(gguf_tensor_read_rows(&set, t, rows, 1, buf) == -EINVAL, "%s: row past the end read",
			    t->name);
	}
	free(buf);
	gguf_file_close(&f);

	/* As a set: a split header names siblings that are not there. */
	struct gguf_set s;
	error_clear();
	rc = gguf_set_open(&s, path);
	if (rc == 0) {
		FUZZ_ASSERT(s.n_files == 1 && s.n_tensors == mem->n_tensors, "set of %zu files, %zu tensors",
			    s.n_files, s.n_tensors);
		gguf_set_close(&s);
	} else {
		FUZZ_ASSERT(rc < 0 && strstr(error_message(), "split"), "set refused: %s", error_message());
	}
	close(fd);
}

static void fuzz_split_set(const uint8_t *data, size_t size)
{
	struct fuzz_part parts[3];
	fuzz_split(data, size, parts, 3);
	const char *d = fuzz_dir();
	for (int i = 0; i < 3; i++) {
		char name[64];
		snprintf(name, sizeof name, "m-%05d-of-00003.gguf", i + 1);
		fuzz_write(d, name, parts[i].n ? parts[i].p : NULL, parts[i].n);
	}
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/m-00001-of-00003.gguf", d);
	struct gguf_set s;
	error_clear();
	int rc = gguf_set_open(&s, path);
	if (rc) {
		FUZZ_ASSERT(rc < 0, "positive return %d", rc);
		FUZZ_ASSERT(!s.files && s.n_files == 0 && !s.slots, "a failed open left something behind");
		FUZZ_ASSERT(strstr(error_message(), d), "message does not name a file of the set: %s",
			    error_message());
		return;
	}
	uint64_t count = 1, want;
	error_clear();
	rc = gguf_get_u64(&s, "split.count", &count);
	FUZZ_ASSERT(rc == 0 || rc == -ENOENT, "split.count of an accepted set: %s", error_message());
	if (rc || count == 0)
		count = 1;
	FUZZ_ASSERT(s.n_files == count, "%zu files for split.count %llu", s.n_files, (unsigned long long)count);
	size_t total = 0;
	for (size_t i = 0; i < s.n_files; i++) {
		const struct gguf_file *f = &s.files[i];
		total += f->n_tensors;
		for (size_t j = 0; j < f->n_tensors; j++) {
			const struct gguf_tensor *t = &f->tensors[j];
			FUZZ_ASSERT(t->file_index == (int)i && gguf_set_find(&s, t->name) == t,
				    "%s: not found in file %zu", t->name, i);
			FUZZ_ASSERT(strcmp(gguf_set_path(&s, t), f->path) == 0, "%s: path", t->name);
		}
	}
	FUZZ_ASSERT(total == s.n_tensors, "%zu tensors in the files, %zu in the set", total, s.n_tensors);
	if (s.n_files > 1) {
		FUZZ_ASSERT(gguf_get_u64(&s, "split.tensors.count", &want) == 0 && want == total,
			    "split.tensors.count %llu for %zu tensors", (unsigned long long)want, total);
	}
	gguf_set_close(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (memmem(data, size, FUZZ_SEP, strlen(FUZZ_SEP))) {
		fuzz_split_set(data, size);
		return 0;
	}
	struct gguf_file f;
	error_clear();
	int rc = gguf_parse(&f, data, size, size, PATH);
	if (rc) {
		FUZZ_ASSERT(rc < 0, "positive return %d", rc);
		FUZZ_ASSERT(!f.kvs && !f.tensors && !f.path && f.n_kvs == 0 && f.n_tensors == 0,
			    "a failed parse left something behind");
		FUZZ_ASSERT(strstr(error_message(), PATH), "message does not name the file: %s", error_message());
		return 0;
	}
	check_tensors(&f, size);
	check_kvs(&f);
	struct gguf_file g;
	error_clear();
	rc = gguf_parse(&g, data, (size_t)f.data_offset, size, PATH);
	FUZZ_ASSERT(rc == 0 && g.n_tensors == f.n_tensors && g.n_kvs == f.n_kvs,
		    "the header alone (%llu bytes) does not parse: %s", (unsigned long long)f.data_offset,
		    error_message());
	gguf_file_close(&g);
	check_open(data, size, &f);
	gguf_file_close(&f);
	return 0;
}
