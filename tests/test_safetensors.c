/*
 * test_safetensors — the safetensors reader of engine/convert/safetensors.h against
 * files written byte by byte by the tests themselves:
 *   - a valid file with F32, BF16, F16 and F8_E4M3 tensors whose values are
 *     known by construction (bit patterns decoded by hand), read by rows;
 *   - adversarial headers (length out of range, not JSON, not an object,
 *     bytes other than space padding after the object, a byte order mark,
 *     offsets outside the data, begin > end, size not matching shape x dtype,
 *     overlapping tensors, negative or fractional dims, dims whose product
 *     overflows int64 even when a zero dim empties the tensor, missing
 *     fields, a file cut short), each rejected with a message that names
 *     the file;
 *   - a data block that shrinks after the header was validated: -EIO;
 *   - dtypes the header may carry but rows cannot be converted from:
 *     -ENOTSUP from st_tensor_read_f32;
 *   - checkpoint sets: sharded with model.safetensors.index.json, sharded
 *     without an index, a tensor duplicated across shards, a bad index,
 *     index entries that are not plain file names ("..", "", "a/b").
 * Nothing here may crash: the suite also runs under ASan/UBSan.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>

#include "engine/convert/safetensors.h"
#include "base/error.h"
#include "tests/test_util.h"

/* Writes u64 LE header length `hlen`, the header text, then `data`. */
static void write_st_raw(const char *path, uint64_t hlen, const char *header, size_t header_len,
			 const void *data, size_t data_len)
{
	size_t n = 8 + header_len + data_len;
	uint8_t *buf = malloc(n ? n : 1);
	cr_assert_not_null(buf);
	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)(hlen >> (8 * i));
	memcpy(buf + 8, header, header_len);
	if (data_len)
		memcpy(buf + 8 + header_len, data, data_len);
	cr_assert_eq(tu_write(path, buf, n), 0, "cannot write %s", path);
	free(buf);
}

/* A well-formed file: the header length is the header's own length. */
static void write_st(const char *path, const char *header, const void *data, size_t data_len)
{
	write_st_raw(path, strlen(header), header, strlen(header), data, data_len);
}

/* Opening `path` must fail with -EINVAL (or the given code) and a message
 * naming the file and containing `what` (if not NULL). */
static void expect_open_fails(const char *path, int code, const char *what)
{
	struct st_file f;
	error_clear();
	int rc = st_file_open(&f, path);
	cr_assert_eq(rc, -code, "%s: st_file_open returned %d, expected %d (message: %s)", path, rc,
		     -code, error_message());
	cr_assert(strstr(error_message(), path), "message does not name the file: %s", error_message());
	if (what)
		cr_assert(strstr(error_message(), what), "message lacks \"%s\": %s", what, error_message());
}

static void expect_header_rejected(const char *dir, const char *header, size_t data_len,
				   const char *what)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/bad.safetensors", dir);
	uint8_t *data = calloc(data_len ? data_len : 1, 1);
	cr_assert_not_null(data);
	write_st(path, header, data, data_len);
	free(data);
	expect_open_fails(path, EINVAL, what);
}

/* The valid file: tensor values chosen so each encoding is checked on
 * normal, negative, extreme and subnormal values:
 *   a  F32     [2, 3]  1, -2, 0.5 / 3.25, -0.125, 100
 *   b  BF16    [2, 2]  0x3f80 = 1, 0xc000 = -2 / 0x3f81 = 1 + 2^-7, 0x4049 = 3.140625
 *   c  F16     [4]     0x3c00 = 1, 0xc000 = -2, 0x7bff = 65504, 0x0001 = 2^-24
 *   d  F8_E4M3 [2, 2]  0x38 = 1, 0xc0 = -2 / 0x7e = 448, 0x01 = 2^-9
 * Data block: a at [0, 24), b at [24, 32), c at [32, 40), d at [40, 44). */
static const char VALID_HEADER[] =
	"{\"__metadata__\":{\"format\":\"pt\"},"
	"\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
	"\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[24,32]},"
	"\"c\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[32,40]},"
	"\"d\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[40,44]}}";

static size_t valid_data(uint8_t *d)
{
	const float a[6] = { 1.0f, -2.0f, 0.5f, 3.25f, -0.125f, 100.0f };
	const uint16_t b[4] = { 0x3f80, 0xc000, 0x3f81, 0x4049 };
	const uint16_t c[4] = { 0x3c00, 0xc000, 0x7bff, 0x0001 };
	const uint8_t e[4] = { 0x38, 0xc0, 0x7e, 0x01 };
	size_t o = 0;
	for (int i = 0; i < 6; i++, o += 4) {
		uint32_t u;
		memcpy(&u, &a[i], 4);
		for (int k = 0; k < 4; k++)
			d[o + k] = (uint8_t)(u >> (8 * k));
	}
	for (int i = 0; i < 4; i++, o += 2) {
		d[o] = (uint8_t)b[i];
		d[o + 1] = (uint8_t)(b[i] >> 8);
	}
	for (int i = 0; i < 4; i++, o += 2) {
		d[o] = (uint8_t)c[i];
		d[o + 1] = (uint8_t)(c[i] >> 8);
	}
	for (int i = 0; i < 4; i++)
		d[o++] = e[i];
	return o;
}

static char dir[4096];

static void setup(void)
{
	tu_mkdtemp(dir, sizeof dir);
	error_clear();
}

static void teardown(void)
{
	tu_rmrf(dir);
}

TestSuite(safetensors, .init = setup, .fini = teardown);

Test(safetensors, dtype_sizes)
{
	cr_assert_eq(st_dtype_size(ST_DTYPE_F32), 4);
	cr_assert_eq(st_dtype_size(ST_DTYPE_BF16), 2);
	cr_assert_eq(st_dtype_size(ST_DTYPE_F16), 2);
	cr_assert_eq(st_dtype_size(ST_DTYPE_F8_E4M3), 1);
	cr_assert_eq(st_dtype_size(ST_DTYPE_I64), 8);
	cr_assert_eq(st_dtype_size(ST_DTYPE_UNKNOWN), 0);
}

Test(safetensors, valid_file_reads_known_values)
{
	char path[4200];
	uint8_t data[64];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	size_t n = valid_data(data);
	write_st(path, VALID_HEADER, data, n);

	struct st_set set;
	cr_assert_eq(st_set_open(&set, dir), 0, "%s", error_message());
	cr_assert_eq(set.n_files, 1);
	cr_assert_eq(set.n_tensors, 4, "__metadata__ is not a tensor");
	cr_assert_eq(set.total_bytes, 44);
	cr_assert_null(st_set_find(&set, "__metadata__"));
	cr_assert_null(st_set_find(&set, "e"));

	const struct st_tensor *a = st_set_find(&set, "a");
	cr_assert_not_null(a);
	cr_assert_eq(a->dtype, ST_DTYPE_F32);
	cr_assert_eq(a->ndim, 2);
	cr_assert_eq(a->shape[0], 2);
	cr_assert_eq(a->shape[1], 3);
	cr_assert_eq(a->nbytes, 24);
	cr_assert_eq(a->offset, 8 + strlen(VALID_HEADER), "offset is absolute in the file");
	cr_assert_eq(st_tensor_rows(a), 2);
	cr_assert_eq(st_tensor_cols(a), 3);
	cr_assert_str_eq(st_set_path(&set, a), path);
	float out[8];
	cr_assert_eq(st_tensor_read_f32(&set, a, 0, 2, out), 0);
	const float want_a[6] = { 1.0f, -2.0f, 0.5f, 3.25f, -0.125f, 100.0f };
	for (int i = 0; i < 6; i++)
		cr_assert_eq(out[i], want_a[i], "a[%d] = %g", i, out[i]);
	memset(out, 0, sizeof out);
	cr_assert_eq(st_tensor_read_f32(&set, a, 1, 1, out), 0);
	cr_assert_eq(out[0], 3.25f);
	cr_assert_eq(out[1], -0.125f);
	cr_assert_eq(out[2], 100.0f);

	const struct st_tensor *b = st_set_find(&set, "b");
	cr_assert_eq(b->dtype, ST_DTYPE_BF16);
	cr_assert_eq(st_tensor_read_f32(&set, b, 0, 2, out), 0);
	cr_assert_eq(out[0], 1.0f);
	cr_assert_eq(out[1], -2.0f);
	cr_assert_eq(out[2], 1.0f + 0x1p-7f);
	cr_assert_eq(out[3], 3.140625f);
	cr_assert_eq(st_tensor_read_f32(&set, b, 1, 1, out), 0);
	cr_assert_eq(out[0], 1.0f + 0x1p-7f);
	cr_assert_eq(out[1], 3.140625f);

	const struct st_tensor *c = st_set_find(&set, "c");
	cr_assert_eq(c->dtype, ST_DTYPE_F16);
	cr_assert_eq(c->ndim, 1);
	cr_assert_eq(st_tensor_rows(c), 1, "a 1-D tensor is one row");
	cr_assert_eq(st_tensor_cols(c), 4);
	cr_assert_eq(st_tensor_read_f32(&set, c, 0, 1, out), 0);
	cr_assert_eq(out[0], 1.0f);
	cr_assert_eq(out[1], -2.0f);
	cr_assert_eq(out[2], 65504.0f);
	cr_assert_eq(out[3], 0x1p-24f);

	const struct st_tensor *d = st_set_find(&set, "d");
	cr_assert_eq(d->dtype, ST_DTYPE_F8_E4M3);
	cr_assert_eq(st_tensor_read_f32(&set, d, 0, 2, out), 0);
	cr_assert_eq(out[0], 1.0f);
	cr_assert_eq(out[1], -2.0f);
	cr_assert_eq(out[2], 448.0f);
	cr_assert_eq(out[3], 0x1p-9f);
	cr_assert_eq(st_tensor_read_f32(&set, d, 1, 1, out), 0);
	cr_assert_eq(out[0], 448.0f);
	cr_assert_eq(out[1], 0x1p-9f);

	/* Rows outside the tensor are refused, not read. */
	error_clear();
	cr_assert_eq(st_tensor_read_f32(&set, a, 1, 2, out), -EINVAL);
	cr_assert(strstr(error_message(), "a"));
	error_clear();
	cr_assert_eq(st_tensor_read_f32(&set, a, -1, 1, out), -EINVAL);
	st_set_close(&set);
}

Test(safetensors, zero_dim_and_gaps_are_valid)
{
	/* An empty tensor, a scalar, and unused bytes between and after
	 * tensors are all allowed by the format. */
	char path[4200];
	snprintf(path, sizeof path, "%s/x.safetensors", dir);
	const char *h = "{\"empty\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[0,0]},"
			"\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]}}";
	float data[5] = { 0, 0, 7.5f, 0, 0 };
	write_st(path, h, data, sizeof data);
	struct st_file f;
	cr_assert_eq(st_file_open(&f, path), 0, "%s", error_message());
	cr_assert_eq(f.n_tensors, 2);
	st_file_close(&f);
}

Test(safetensors, header_length_out_of_range)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/h.safetensors", dir);
	const char *h = "{}";
	uint8_t data[16] = { 0 };

	/* Larger than the file. */
	write_st_raw(path, 1000, h, 2, data, sizeof data);
	expect_open_fails(path, EINVAL, NULL);
	/* Enormous: must not try to allocate it. */
	write_st_raw(path, UINT64_MAX, h, 2, data, sizeof data);
	expect_open_fails(path, EINVAL, NULL);
	write_st_raw(path, UINT64_MAX - 7, h, 2, data, sizeof data);
	expect_open_fails(path, EINVAL, NULL);
	/* Zero and one byte can hold no JSON object. */
	write_st_raw(path, 0, h, 2, data, sizeof data);
	expect_open_fails(path, EINVAL, NULL);
	write_st_raw(path, 1, h, 2, data, sizeof data);
	expect_open_fails(path, EINVAL, NULL);
	/* Shorter than the 8-byte length itself. */
	cr_assert_eq(tu_write(path, "\x02\x00\x00", 3), 0);
	expect_open_fails(path, EINVAL, NULL);
	cr_assert_eq(tu_write(path, "", 0), 0);
	expect_open_fails(path, EINVAL, NULL);
	/* A missing file: errno from open, still naming the file. */
	snprintf(path, sizeof path, "%s/absent.safetensors", dir);
	expect_open_fails(path, ENOENT, NULL);
}

Test(safetensors, header_not_json)
{
	expect_header_rejected(dir, "{\"a\": {\"dtype\": \"F32\", ", 0, "JSON");
	expect_header_rejected(dir, "not json at all", 0, "JSON");
	expect_header_rejected(dir, "{\"a\":1}garbage", 0, NULL);
}

/* The header is one JSON object from its first byte, padded at the end
 * with spaces only: trailing bytes after the object (which a lenient JSON
 * parser stops before), a UTF-8 byte order mark, leading spaces, or
 * padding with newlines, tabs or NULs are refused naming the file; the
 * same header padded with spaces opens. */
Test(safetensors, header_only_space_padded)
{
	const char *obj = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
	const char *const bad[][2] = {
		{ "", "xyz" }, { "", "}" }, { "", " {}" }, { "", "\n" }, { "", "  \t" }, { "\xef\xbb\xbf", "" },
		{ " ", "" }, { "\n", "  " },
	};
	char header[256];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(header, sizeof header, "%s%s%s", bad[i][0], obj, bad[i][1]);
		expect_header_rejected(dir, header, 4, "header");
	}
	/* A NUL inside the declared header: the rest is not spaces. */
	char path[4200];
	snprintf(path, sizeof path, "%s/nul.safetensors", dir);
	snprintf(header, sizeof header, "%s   ", obj);
	size_t len = strlen(header);
	header[len - 2] = 0;
	float zero = 0;
	write_st_raw(path, len, header, len, &zero, sizeof zero);
	expect_open_fails(path, EINVAL, "spaces");

	snprintf(path, sizeof path, "%s/padded.safetensors", dir);
	snprintf(header, sizeof header, "%s       ", obj);
	write_st(path, header, &zero, sizeof zero);
	struct st_file f;
	error_clear();
	cr_assert_eq(st_file_open(&f, path), 0, "%s", error_message());
	cr_assert_eq(f.n_tensors, 1);
	st_file_close(&f);
}

Test(safetensors, header_not_an_object)
{
	expect_header_rejected(dir, "[1,2,3]", 0, "object");
	expect_header_rejected(dir, "\"text\"", 0, "object");
	expect_header_rejected(dir, "42", 0, "object");
	/* Entries that are not tensor objects. */
	expect_header_rejected(dir, "{\"a\":1}", 0, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]}}", 4, "tensor a");
}

Test(safetensors, offsets_past_the_end)
{
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[100,104]}}", 12, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e300]}}", 12, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 12, "tensor a");
}

Test(safetensors, begin_after_end)
{
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 12, "tensor a");
}

Test(safetensors, size_not_matching_shape_and_dtype)
{
	/* 3 x 2 F32 is 24 bytes, not 20 or 28; BF16 [4] is 8 bytes, not 16. */
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,20]}}", 32, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,28]}}", 32, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,16]}}", 32, "tensor a");
	/* A shape whose element count overflows 64 bits must not wrap around
	 * to a small size. */
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
				    "\"data_offsets\":[0,0]}}", 32, "tensor a");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
				    "\"data_offsets\":[0,0]}}", 32, "tensor a");
}

Test(safetensors, overlapping_tensors)
{
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
				    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 16, "overlap");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
				    "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 16, "overlap");
	/* The same range twice. */
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
				    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16, "overlap");
}

Test(safetensors, bad_dims)
{
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 8, "shape");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,-2],\"data_offsets\":[0,16]}}", 16, "shape");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 8, "shape");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e30],\"data_offsets\":[0,4]}}", 8, "shape");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
				    "\"data_offsets\":[0,4]}}", 8, "dims");
}

/* A zero dim makes a tensor empty whatever the others are, but rows x cols
 * are still computed in int64 (st_tensor_rows): dims whose product does
 * not fit were accepted and overflowed there (found by fuzz_safetensors,
 * UBSan signed-integer-overflow). The largest product that fits is fine. */
Test(safetensors, empty_tensor_with_huge_dims)
{
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2147483648,4294967296,0],"
				    "\"data_offsets\":[0,0]}}", 0, "shape overflows");
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"BF16\",\"shape\":[0,4294967296,4294967296],"
				    "\"data_offsets\":[0,0]}}", 0, "shape overflows");

	char path[4200];
	snprintf(path, sizeof path, "%s/ok.safetensors", dir);
	write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1073741824,8589934591,0],"
		       "\"data_offsets\":[0,0]}}", "", 0);
	struct st_file f;
	error_clear();
	cr_assert_eq(st_file_open(&f, path), 0, "%s", error_message());
	cr_assert_eq(st_tensor_rows(&f.tensors[0]), 1073741824ll * 8589934591ll);
	cr_assert_eq(st_tensor_cols(&f.tensors[0]), 0);
	cr_assert_eq(f.tensors[0].nbytes, 0);
	st_file_close(&f);
}

/* The reader validates data_offsets as integers like shapes: a fractional
 * offset is not a byte position. */
Test(safetensors, fractional_offsets)
{
	expect_header_rejected(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4.5]}}", 8, "tensor a");
}

Test(safetensors, file_cut_short_is_rejected_at_open)
{
	/* The valid file minus its last 3 data bytes: tensor d no longer fits. */
	char path[4200];
	uint8_t data[64];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	size_t n = valid_data(data);
	write_st(path, VALID_HEADER, data, n - 3);
	expect_open_fails(path, EINVAL, "d");
	/* And with the data block gone entirely. */
	write_st(path, VALID_HEADER, data, 0);
	expect_open_fails(path, EINVAL, NULL);
	/* Through the set API, the message still names the shard. */
	struct st_set set;
	error_clear();
	cr_assert_lt(st_set_open(&set, dir), 0);
	cr_assert(strstr(error_message(), path), "%s", error_message());
}

Test(safetensors, file_truncated_after_open_gives_read_error)
{
	char path[4200];
	uint8_t data[64];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	size_t n = valid_data(data);
	write_st(path, VALID_HEADER, data, n);
	struct st_set set;
	cr_assert_eq(st_set_open(&set, dir), 0, "%s", error_message());
	/* Another process cuts the file after the header was validated. */
	cr_assert_eq(truncate(path, (off_t)(8 + strlen(VALID_HEADER) + 26)), 0);
	float out[8];
	error_clear();
	cr_assert_eq(st_tensor_read_f32(&set, st_set_find(&set, "d"), 0, 2, out), -EIO);
	cr_assert(strstr(error_message(), path), "%s", error_message());
	cr_assert(strstr(error_message(), "d"), "%s", error_message());
	/* Rows still inside the file read fine. */
	error_clear();
	cr_assert_eq(st_tensor_read_f32(&set, st_set_find(&set, "a"), 0, 2, out), 0);
	cr_assert_eq(out[5], 100.0f);
	error_clear();
	cr_assert_eq(st_tensor_read_f32(&set, st_set_find(&set, "c"), 0, 1, out), -EIO);
	st_set_close(&set);
}

Test(safetensors, unknown_and_unconvertible_dtypes)
{
	/* An unknown dtype passes the header (its size is unknown, its range
	 * is still checked); a known non-float dtype too. Reading either as
	 * f32 is -ENOTSUP with a message naming the file, tensor and dtype. */
	char path[4200];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	const char *h = "{\"q\":{\"dtype\":\"F4_E2M1\",\"shape\":[2,4],\"data_offsets\":[0,4]},"
			"\"i\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[4,12]},"
			"\"f\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[16,24]}}";
	uint8_t data[24] = { 0 };
	write_st(path, h, data, sizeof data);
	struct st_set set;
	cr_assert_eq(st_set_open(&set, dir), 0, "%s", error_message());
	const struct st_tensor *q = st_set_find(&set, "q");
	cr_assert_not_null(q);
	cr_assert_eq(q->dtype, ST_DTYPE_UNKNOWN);
	cr_assert_str_eq(q->dtype_name, "F4_E2M1");
	float out[8];
	error_clear();
	cr_assert_eq(st_tensor_read_f32(&set, q, 0, 1, out), -ENOTSUP);
	cr_assert(strstr(error_message(), "F4_E2M1"), "%s", error_message());
	cr_assert(strstr(error_message(), path), "%s", error_message());
	const struct st_tensor *i = st_set_find(&set, "i");
	cr_assert_eq(i->dtype, ST_DTYPE_I32);
	error_clear();
	cr_assert_eq(st_tensor_read_f32(&set, i, 0, 1, out), -ENOTSUP);
	cr_assert(strstr(error_message(), "I32"), "%s", error_message());
	error_clear();
	cr_assert_eq(st_tensor_read_f32(&set, st_set_find(&set, "f"), 0, 1, out), -ENOTSUP);
	st_set_close(&set);

	/* An unknown dtype's range must still lie inside the data. */
	expect_header_rejected(dir, "{\"q\":{\"dtype\":\"F4_E2M1\",\"shape\":[2],\"data_offsets\":[0,64]}}", 8, "tensor q");
}

/* Two shards: a in shard 1, b and c in shard 2. */
static void write_two_shards(const char *d, const char *name1, const char *name2,
			     bool duplicate)
{
	char p[4200];
	float v1[2] = { 1.5f, -2.5f };
	snprintf(p, sizeof p, "%s/%s", d, name1);
	write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", v1, sizeof v1);
	uint16_t v2[4] = { 0x4000, 0x4040, 0xbf80, 0x0000 }; /* 2, 3 | -1, 0 */
	snprintf(p, sizeof p, "%s/%s", d, name2);
	write_st(p, duplicate ? "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
				"\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}"
			      : "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
				"\"c\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}",
		 v2, sizeof v2);
}

static void check_two_shards(const char *d, const char *name1, const char *name2)
{
	struct st_set set;
	char p1[4200], p2[4200];
	snprintf(p1, sizeof p1, "%s/%s", d, name1);
	snprintf(p2, sizeof p2, "%s/%s", d, name2);
	cr_assert_eq(st_set_open(&set, d), 0, "%s", error_message());
	cr_assert_eq(set.n_files, 2);
	cr_assert_eq(set.n_tensors, 3);
	cr_assert_eq(set.total_bytes, 16);
	const struct st_tensor *a = st_set_find(&set, "a"), *b = st_set_find(&set, "b"),
			       *c = st_set_find(&set, "c");
	cr_assert(a && b && c);
	cr_assert_str_eq(st_set_path(&set, a), p1);
	cr_assert_str_eq(st_set_path(&set, b), p2);
	cr_assert_str_eq(st_set_path(&set, c), p2);
	float out[2];
	cr_assert_eq(st_tensor_read_f32(&set, a, 0, 1, out), 0);
	cr_assert_eq(out[0], 1.5f);
	cr_assert_eq(out[1], -2.5f);
	cr_assert_eq(st_tensor_read_f32(&set, b, 0, 1, out), 0);
	cr_assert_eq(out[0], 2.0f);
	cr_assert_eq(out[1], 3.0f);
	cr_assert_eq(st_tensor_read_f32(&set, c, 0, 1, out), 0);
	cr_assert_eq(out[0], -1.0f);
	cr_assert_eq(out[1], 0.0f);
	st_set_close(&set);
}

Test(safetensors, sharded_with_index)
{
	const char *s1 = "model-00001-of-00002.safetensors", *s2 = "model-00002-of-00002.safetensors";
	write_two_shards(dir, s1, s2, false);
	char p[4200];
	snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
	const char *index = "{\"metadata\":{\"total_size\":16},\"weight_map\":{"
			    "\"a\":\"model-00001-of-00002.safetensors\","
			    "\"b\":\"model-00002-of-00002.safetensors\","
			    "\"c\":\"model-00002-of-00002.safetensors\"}}";
	cr_assert_eq(tu_write(p, index, strlen(index)), 0);
	/* A stray file that the index does not list is not part of the set. */
	snprintf(p, sizeof p, "%s/model-stray.safetensors", dir);
	cr_assert_eq(tu_write(p, "junk", 4), 0);
	check_two_shards(dir, s1, s2);
}

Test(safetensors, sharded_without_index)
{
	/* Shard names that sort differently from creation order. */
	const char *s1 = "model-00001-of-00002.safetensors", *s2 = "model-00002-of-00002.safetensors";
	write_two_shards(dir, s1, s2, false);
	char p[4200];
	snprintf(p, sizeof p, "%s/notes.txt", dir);
	cr_assert_eq(tu_write(p, "x", 1), 0);
	check_two_shards(dir, s1, s2);
}

Test(safetensors, duplicate_tensor_across_shards)
{
	const char *s1 = "model-00001-of-00002.safetensors", *s2 = "model-00002-of-00002.safetensors";
	write_two_shards(dir, s1, s2, true);
	struct st_set set;
	error_clear();
	cr_assert_eq(st_set_open(&set, dir), -EINVAL);
	cr_assert(strstr(error_message(), "a"), "%s", error_message());
	cr_assert(strstr(error_message(), s1), "%s", error_message());
	cr_assert(strstr(error_message(), s2), "%s", error_message());
}

Test(safetensors, bad_index)
{
	char p[4200];
	struct st_set set;
	snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);

	cr_assert_eq(tu_write(p, "{\"weight_map\":[1]}", 18), 0);
	error_clear();
	cr_assert_lt(st_set_open(&set, dir), 0);
	cr_assert(strstr(error_message(), p), "%s", error_message());

	cr_assert_eq(tu_write(p, "not json", 8), 0);
	error_clear();
	cr_assert_lt(st_set_open(&set, dir), 0);
	cr_assert(strstr(error_message(), p), "%s", error_message());

	/* The index names a shard that does not exist. */
	const char *missing = "{\"weight_map\":{\"a\":\"model-00009-of-00009.safetensors\"}}";
	cr_assert_eq(tu_write(p, missing, strlen(missing)), 0);
	error_clear();
	cr_assert_lt(st_set_open(&set, dir), 0);
	cr_assert(strstr(error_message(), "model-00009-of-00009.safetensors"), "%s", error_message());
}

/* weight_map values must be plain file names in the checkpoint folder. */
Test(safetensors, index_entry_not_a_file_name)
{
	char p[4200];
	struct st_set set;
	snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
	const char *escape = "{\"weight_map\":{\"a\":\"../outside.safetensors\"}}";
	cr_assert_eq(tu_write(p, escape, strlen(escape)), 0);
	error_clear();
	cr_assert_eq(st_set_open(&set, dir), -EINVAL);
	cr_assert(strstr(error_message(), p), "%s", error_message());
	cr_assert(strstr(error_message(), "a"), "%s", error_message());
	/* Names that resolve to the folder itself or its parent: opening them
	 * failed later with a misleading "truncated" (found by
	 * fuzz_safetensors_index). */
	const char *folders[] = { "{\"weight_map\":{\"c\":\"\"}}", "{\"weight_map\":{\"c\":\".\"}}",
				  "{\"weight_map\":{\"c\":\"..\"}}" };
	for (size_t i = 0; i < 3; i++) {
		cr_assert_eq(tu_write(p, folders[i], strlen(folders[i])), 0);
		error_clear();
		cr_assert_eq(st_set_open(&set, dir), -EINVAL, "%s", folders[i]);
		cr_assert(strstr(error_message(), "is not a file name"), "%s: %s", folders[i], error_message());
	}
	const char *number = "{\"weight_map\":{\"b\":5}}";
	cr_assert_eq(tu_write(p, number, strlen(number)), 0);
	error_clear();
	cr_assert_eq(st_set_open(&set, dir), -EINVAL);
	cr_assert(strstr(error_message(), p), "%s", error_message());
}

Test(safetensors, empty_folder)
{
	struct st_set set;
	error_clear();
	cr_assert_eq(st_set_open(&set, dir), -ENOENT);
	cr_assert(strstr(error_message(), dir), "%s", error_message());
}
