/*
 * fuzz_safetensors — the safetensors file header (engine/convert/safetensors.h).
 *
 * An input is a whole file image (u64 little-endian header length, header
 * JSON, data block), or, when it starts with '{', header JSON FUZZ_SEP data,
 * of which the harness builds the image with the true length: mutations of
 * the JSON then reach the parser instead of breaking the length prefix.
 * The image is parsed in memory by st_header_length and st_header_parse,
 * the two steps st_file_open runs after its reads.
 * Beyond "no crash", an accepted header must keep what it promises to the
 * row readers:
 *   - every tensor lies inside the data block (offset >= 8 + header length,
 *     offset + nbytes <= file size, no 64-bit wrap-around);
 *   - a known dtype's byte count is exactly shape x element size;
 *   - rows x columns (st_tensor_rows, st_tensor_cols) equal the element
 *     count and neither overflows int64;
 *   - no two tensors overlap.
 * A rejected header must return a negative errno, leave no tensors behind
 * and set a message that names the file. Accepted images are then written
 * to a memfd and opened by path with st_file_open, which must agree with the
 * in-memory parse tensor for tensor, and the first rows of each convertible
 * tensor are read back through st_tensor_read_f32.
 */
#include <stdbool.h>
#include <sys/mman.h>

#include "engine/convert/safetensors.h"
#include "base/error.h"
#include "tests/fuzz/fuzz_util.h"

#define PATH "fuzz.safetensors"

static int cmp_offset(const void *a, const void *b)
{
	const struct st_tensor *x = *(const struct st_tensor *const *)a;
	const struct st_tensor *y = *(const struct st_tensor *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static void check_tensors(const struct st_file *f, uint64_t hlen, uint64_t file_bytes)
{
	const struct st_tensor **by_off = malloc((f->n_tensors + 1) * sizeof *by_off);
	if (!by_off)
		abort();
	for (size_t i = 0; i < f->n_tensors; i++) {
		const struct st_tensor *t = &f->tensors[i];
		FUZZ_ASSERT(t->name, "tensor %zu has no name", i);
		FUZZ_ASSERT(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS, "%s: ndim %d", t->name, t->ndim);
		FUZZ_ASSERT(t->offset >= 8 + hlen, "%s: offset %llu inside the header", t->name,
			    (unsigned long long)t->offset);
		FUZZ_ASSERT(t->offset <= file_bytes && t->nbytes <= file_bytes - t->offset,
			    "%s: [%llu, +%llu) outside a file of %llu bytes", t->name,
			    (unsigned long long)t->offset, (unsigned long long)t->nbytes,
			    (unsigned long long)file_bytes);
		uint64_t numel = 1;
		for (int d = 0; d < t->ndim; d++) {
			FUZZ_ASSERT(t->shape[d] >= 0, "%s: dim %d is %lld", t->name, d, (long long)t->shape[d]);
			FUZZ_ASSERT(!__builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel),
				    "%s: element count overflows", t->name);
		}
		size_t es = st_dtype_size(t->dtype);
		uint64_t bytes;
		if (es) {
			FUZZ_ASSERT(!__builtin_mul_overflow(numel, (uint64_t)es, &bytes) && bytes == t->nbytes,
				    "%s: %llu bytes for %llu elements of %s", t->name,
				    (unsigned long long)t->nbytes, (unsigned long long)numel, t->dtype_name);
		}
		int64_t rows = st_tensor_rows(t), cols = st_tensor_cols(t), prod;
		FUZZ_ASSERT(rows >= 0 && cols >= 0 && !__builtin_mul_overflow(rows, cols, &prod) &&
			    (uint64_t)prod == numel, "%s: %lld rows x %lld cols != %llu elements", t->name,
			    (long long)rows, (long long)cols, (unsigned long long)numel);
		by_off[i] = t;
	}
	qsort(by_off, f->n_tensors, sizeof *by_off, cmp_offset);
	for (size_t i = 1; i < f->n_tensors; i++)
		FUZZ_ASSERT(by_off[i]->offset >= by_off[i - 1]->offset + by_off[i - 1]->nbytes,
			    "%s and %s overlap", by_off[i - 1]->name, by_off[i]->name);
	free(by_off);
}

/* Opens the image by path, compares with the in-memory parse, reads rows. */
static void check_open(const uint8_t *data, size_t size, const struct st_file *mem)
{
	int fd = memfd_create("fuzz-st", MFD_CLOEXEC);
	if (fd < 0)
		return;	/* no memfd here: the in-memory checks stand alone */
	if (write(fd, data, size) != (ssize_t)size)
		abort();
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	struct st_file f;
	error_clear();
	int rc = st_file_open(&f, path);
	FUZZ_ASSERT(rc == 0, "st_file_open refuses what st_header_parse accepted: %s", error_message());
	FUZZ_ASSERT(f.n_tensors == mem->n_tensors, "%zu tensors by path, %zu in memory", f.n_tensors,
		    mem->n_tensors);
	struct st_set set = { .files = &f, .n_files = 1, .n_tensors = f.n_tensors };
	float *rowbuf = malloc(4 * 4096 * sizeof(float));
	if (!rowbuf)
		abort();
	for (size_t i = 0; i < f.n_tensors; i++) {
		const struct st_tensor *t = &f.tensors[i], *m = &mem->tensors[i];
		FUZZ_ASSERT(strcmp(t->name, m->name) == 0 && t->offset == m->offset &&
			    t->nbytes == m->nbytes && t->dtype == m->dtype && t->ndim == m->ndim,
			    "tensor %zu differs between st_file_open and st_header_parse", i);
		int64_t cols = st_tensor_cols(t), rows = st_tensor_rows(t);
		if (cols <= 0 || cols > 4096 || rows <= 0)
			continue;
		int64_t n_rows = rows < 4 ? rows : 4;
		error_clear();	/* the message below is this read's */
		int rr = st_tensor_read_f32(&set, t, 0, n_rows, rowbuf);
		bool convertible = t->dtype == ST_DTYPE_F32 || t->dtype == ST_DTYPE_BF16 ||
				   t->dtype == ST_DTYPE_F16 || t->dtype == ST_DTYPE_F8_E4M3 ||
				   t->dtype == ST_DTYPE_F8_E8M0;
		FUZZ_ASSERT(convertible ? rr == 0 : rr == -ENOTSUP, "%s: read of %lld rows gave %d: %s",
			    t->name, (long long)n_rows, rr, error_message());
		FUZZ_ASSERT(st_tensor_read_f32(&set, t, rows, 1, rowbuf) < 0, "%s: row past the end read",
			    t->name);
	}
	free(rowbuf);
	st_file_close(&f);
	close(fd);
}

static void fuzz_image(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0 || data[0] != '{') {
		fuzz_image(data, size);
		return 0;
	}
	struct fuzz_part parts[2];
	fuzz_split(data, size, parts, 2);
	size_t n = 8 + parts[0].n + parts[1].n;
	uint8_t *img = malloc(n);
	if (!img)
		abort();
	for (int i = 0; i < 8; i++)
		img[i] = (uint8_t)((uint64_t)parts[0].n >> (8 * i));
	memcpy(img + 8, parts[0].p, parts[0].n);
	memcpy(img + 8 + parts[0].n, parts[1].p, parts[1].n);
	fuzz_image(img, n);
	free(img);
	return 0;
}

static void fuzz_image(const uint8_t *data, size_t size)
{
	if (size < 8)
		return;	/* st_file_open refuses these before any parsing */
	uint64_t hlen = 0;
	error_clear();
	if (st_header_length(data, size, PATH, &hlen) != 0) {
		FUZZ_ASSERT(strstr(error_message(), PATH), "message does not name the file: %s", error_message());
		return;
	}
	FUZZ_ASSERT(hlen >= 2 && hlen <= size - 8, "accepted header length %llu of a %zu-byte file",
		    (unsigned long long)hlen, size);
	struct st_file f = { .path = PATH, .fd = -1 };
	int rc = st_header_parse(&f, (const char *)data + 8, hlen, size);
	if (rc) {
		FUZZ_ASSERT(rc < 0, "positive return %d", rc);
		FUZZ_ASSERT(!f.tensors && f.n_tensors == 0, "a failed parse left %zu tensors", f.n_tensors);
		FUZZ_ASSERT(strstr(error_message(), PATH), "message does not name the file: %s", error_message());
		return;
	}
	check_tensors(&f, hlen, size);
	check_open(data, size, &f);
	for (size_t i = 0; i < f.n_tensors; i++)
		free(f.tensors[i].name);
	free(f.tensors);
}
