/*
 * test_gguf — the GGUF reader of engine/convert/gguf.h against files written
 * byte by byte by tests/gguf_build.h:
 *   - valid v3 and v2 files holding every metadata value type and arrays of
 *     each, read back value for value; alignments other than 32; the typed
 *     getters (integer widening and range checks, wrong type -EINVAL with a
 *     message, absent -ENOENT);
 *   - the ggml type table against block sizes worked out from the block
 *     structs of ggml-common.h;
 *   - hostile headers, each refused with a message naming the file and the
 *     field: every prefix of a valid file, lying counts (metadata pairs,
 *     tensors, string lengths, array counts) refused before allocating for
 *     them (checked under an address-space limit), overflowing shapes,
 *     rows that are not whole blocks, unknown and removed types, misaligned,
 *     overlapping and out-of-range offsets, duplicate keys and names, nested
 *     arrays, bad alignments, v1, big-endian and unknown versions;
 *   - split sets (three files opened from any of them; a missing file; a
 *     split.count that disagrees; a tensor in two files; a wrong
 *     split.tensors.count);
 *   - gguf_tensor_read_rows on 3-D tensors (values known by construction),
 *     out-of-range requests, a file that shrank after opening;
 *   - gguf_is_gguf.
 * Nothing here may crash: the suite also runs under ASan/UBSan.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <sys/resource.h>

#include "engine/convert/gguf.h"
#include "base/error.h"
#include "tests/gguf_build.h"
#include "tests/test_util.h"

static char dir[4096];

static void setup(void)
{
	tu_mkdtemp(dir, sizeof dir);
}

static void teardown(void)
{
	tu_rmrf(dir);
}

TestSuite(gguf, .init = setup, .fini = teardown);

static const char *tmp(const char *name)
{
	static char path[4][4200];
	static int k;
	k = (k + 1) % 4;
	snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
	return path[k];
}

static void write_gb(const struct gb *b, const char *path)
{
	cr_assert_eq(gb_write(b, path), 0, "cannot write %s", path);
}

/* Opening path must fail with -code and a message naming the file and
 * holding what. */
static void expect_open_fails(const char *path, int code, const char *what)
{
	struct gguf_set s;
	error_clear();
	int rc = gguf_set_open(&s, path);
	cr_assert_eq(rc, -code, "%s: gguf_set_open returned %d, expected %d (message: %s)", path, rc, -code,
		     error_message());
	cr_assert(strstr(error_message(), path), "message does not name the file: %s", error_message());
	if (what)
		cr_assert(strstr(error_message(), what), "message lacks \"%s\": %s", what, error_message());
	cr_assert_eq(s.n_files, 0);
	cr_assert_null(s.files);
}

static void expect_rejected(const struct gb *b, const char *what)
{
	const char *path = tmp("bad.gguf");
	write_gb(b, path);
	expect_open_fails(path, EINVAL, what);
}

/* Every value type, arrays of each, and three tensors (f32 3-D, q8_0 2-D,
 * f16 1-D) whose bytes are known. */
static const float f32_vals[24] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
				    12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23 };

static void build_all(struct gb *b, uint32_t version, uint32_t alignment)
{
	gb_init(b);
	b->version = version;
	gb_kv_str(b, "general.architecture", "olmoe");
	if (alignment != 32)
		gb_alignment(b, alignment);
	gb_kv_u8(b, "t.u8", 200);
	gb_kv_i8(b, "t.i8", -100);
	gb_kv_u16(b, "t.u16", 60000);
	gb_kv_i16(b, "t.i16", -30000);
	gb_kv_u32(b, "t.u32", 4000000000u);
	gb_kv_i32(b, "t.i32", -2000000000);
	gb_kv_f32(b, "t.f32", 0.25f);
	gb_kv_bool(b, "t.bool", 1);
	gb_kv_u64(b, "t.u64", 18000000000000000000ull);
	gb_kv_i64(b, "t.i64", -9000000000000000000ll);
	gb_kv_f64(b, "t.f64", 1e300);
	gb_kv_str(b, "t.empty", "");
	const uint8_t au8[3] = { 1, 2, 255 };
	const int8_t ai8[2] = { -1, 127 };
	const uint16_t au16[2] = { 65535, 7 };
	const int16_t ai16[2] = { -32768, 5 };
	const uint32_t au32[2] = { 4294967295u, 9 };
	const int32_t ai32[3] = { -1, 0, 2147483647 };
	const float af32[2] = { -1.5f, 3.0f };
	const uint8_t abool[3] = { 1, 0, 1 };
	const uint64_t au64[1] = { 1ull << 63 };
	const int64_t ai64[2] = { INT64_MIN, 42 };
	const double af64[2] = { 0.125, -2.0 };
	gb_kv_arr(b, "a.u8", GB_U8, 3, au8, 1);
	gb_kv_arr(b, "a.i8", GB_I8, 2, ai8, 1);
	gb_kv_arr(b, "a.u16", GB_U16, 2, au16, 2);
	gb_kv_arr(b, "a.i16", GB_I16, 2, ai16, 2);
	gb_kv_arr(b, "a.u32", GB_U32, 2, au32, 4);
	gb_kv_arr(b, "a.i32", GB_I32, 3, ai32, 4);
	gb_kv_arr(b, "a.f32", GB_F32, 2, af32, 4);
	gb_kv_arr(b, "a.bool", GB_BOOL, 3, abool, 1);
	gb_kv_arr(b, "a.u64", GB_U64, 1, au64, 8);
	gb_kv_arr(b, "a.i64", GB_I64, 2, ai64, 8);
	gb_kv_arr(b, "a.f64", GB_F64, 2, af64, 8);
	gb_kv_arr(b, "a.empty", GB_I32, 0, NULL, 4);
	const char *strs[4] = { "<s>", "", "h\xc3\xa9llo", "</s>" };
	gb_kv_arr_str(b, "a.str", 4, strs);
	gb_kv_arr_str(b, "a.nostr", 0, NULL);

	gb_tensor(b, "blk.0.cube", 0, 3, (int64_t[]){ 4, 3, 2 }, f32_vals, sizeof f32_vals);
	uint8_t q8[3 * 34];
	for (size_t i = 0; i < sizeof q8; i++)
		q8[i] = (uint8_t)(i * 7 + 1);
	gb_tensor(b, "blk.0.q8", GGML_Q8_0, 2, (int64_t[]){ 32, 3 }, q8, sizeof q8);
	uint16_t h[5] = { 0x3c00, 0xc000, 0x3800, 0, 0x7bff };
	gb_tensor(b, "norm", GGML_F16, 1, (int64_t[]){ 5 }, h, sizeof h);
}

static const struct gguf_kv *kv_of(const struct gguf_set *s, const char *key)
{
	const struct gguf_kv *kv = gguf_find_kv(s, key);
	cr_assert_not_null(kv, "key %s missing", key);
	return kv;
}

static void check_all(const char *path, uint32_t version, uint32_t alignment)
{
	struct gguf_set s;
	error_clear();
	cr_assert_eq(gguf_set_open(&s, path), 0, "%s", error_message());
	const struct gguf_file *f = &s.files[0];
	cr_assert_eq(s.n_files, 1);
	cr_assert_eq(f->version, version);
	cr_assert_eq(f->alignment, alignment);
	cr_assert_eq(f->n_kvs, 27 + (alignment != 32));
	cr_assert_eq(s.n_tensors, 3);
	cr_assert_eq(f->data_offset % alignment, 0);
	cr_assert_str_eq(f->kvs[0].key, "general.architecture");

	cr_assert_eq(kv_of(&s, "t.u8")->v.u, 200);
	cr_assert_eq(kv_of(&s, "t.i8")->v.i, -100);
	cr_assert_eq(kv_of(&s, "t.u16")->v.u, 60000);
	cr_assert_eq(kv_of(&s, "t.i16")->v.i, -30000);
	cr_assert_eq(kv_of(&s, "t.u32")->v.u, 4000000000u);
	cr_assert_eq(kv_of(&s, "t.i32")->v.i, -2000000000);
	cr_assert_eq(kv_of(&s, "t.f32")->v.f, 0.25);
	cr_assert_eq(kv_of(&s, "t.bool")->v.u, 1);
	cr_assert_eq(kv_of(&s, "t.u64")->v.u, 18000000000000000000ull);
	cr_assert_eq(kv_of(&s, "t.i64")->v.i, -9000000000000000000ll);
	cr_assert_eq(kv_of(&s, "t.f64")->v.f, 1e300);
	cr_assert_eq(kv_of(&s, "t.empty")->len, 0);
	cr_assert_str_eq(kv_of(&s, "t.empty")->s, "");
	cr_assert_eq(kv_of(&s, "t.u8")->type, GGUF_VT_U8);
	cr_assert_eq(kv_of(&s, "t.f64")->type, GGUF_VT_F64);

	const struct gguf_kv *a;
	cr_assert_eq(gguf_get_arr(&s, "a.u8", GGUF_VT_U32, &a), 0);
	cr_assert_eq(a->n, 3);
	cr_assert_eq(gguf_arr_i64(a, 2), 255);
	cr_assert_eq(gguf_get_arr(&s, "a.i8", GGUF_VT_I64, &a), 0);
	cr_assert_eq(gguf_arr_i64(a, 0), -1);
	cr_assert_eq(gguf_arr_i64(a, 1), 127);
	cr_assert_eq(gguf_get_arr(&s, "a.u16", GGUF_VT_U16, &a), 0);
	cr_assert_eq(gguf_arr_i64(a, 0), 65535);
	cr_assert_eq(gguf_get_arr(&s, "a.i16", GGUF_VT_I16, &a), 0);
	cr_assert_eq(gguf_arr_i64(a, 0), -32768);
	cr_assert_eq(gguf_get_arr(&s, "a.u32", GGUF_VT_U32, &a), 0);
	cr_assert_eq(gguf_arr_i64(a, 0), 4294967295ll);
	cr_assert_eq(gguf_get_arr(&s, "a.i32", GGUF_VT_I32, &a), 0);
	cr_assert_eq(a->n, 3);
	cr_assert_eq(gguf_arr_i64(a, 0), -1);
	cr_assert_eq(gguf_arr_i64(a, 2), 2147483647);
	cr_assert_eq(gguf_arr_f64(a, 0), -1.0);
	cr_assert_eq(gguf_get_arr(&s, "a.f32", GGUF_VT_F32, &a), 0);
	cr_assert_eq(gguf_arr_f64(a, 0), -1.5);
	cr_assert_eq(gguf_arr_f64(a, 1), 3.0);
	cr_assert_eq(gguf_get_arr(&s, "a.bool", GGUF_VT_BOOL, &a), 0);
	cr_assert_eq(gguf_arr_i64(a, 0), 1);
	cr_assert_eq(gguf_arr_i64(a, 1), 0);
	cr_assert_eq(gguf_get_arr(&s, "a.u64", GGUF_VT_U64, &a), 0);
	cr_assert_eq((uint64_t)gguf_arr_i64(a, 0), 1ull << 63);
	cr_assert_eq(gguf_arr_f64(a, 0), 9223372036854775808.0);
	cr_assert_eq(gguf_get_arr(&s, "a.i64", GGUF_VT_I64, &a), 0);
	cr_assert_eq(gguf_arr_i64(a, 0), INT64_MIN);
	cr_assert_eq(gguf_arr_i64(a, 1), 42);
	cr_assert_eq(gguf_get_arr(&s, "a.f64", GGUF_VT_F32, &a), 0, "F32 takes F64 arrays");
	cr_assert_eq(gguf_arr_f64(a, 0), 0.125);
	cr_assert_eq(gguf_arr_f64(a, 1), -2.0);
	cr_assert_eq(gguf_get_arr(&s, "a.empty", GGUF_VT_ARRAY, &a), 0);
	cr_assert_eq(a->n, 0);
	cr_assert_eq(gguf_get_arr(&s, "a.str", GGUF_VT_STRING, &a), 0);
	cr_assert_eq(a->n, 4);
	cr_assert_str_eq(a->strs[0], "<s>");
	cr_assert_str_eq(a->strs[1], "");
	cr_assert_eq(a->lens[1], 0);
	cr_assert_str_eq(a->strs[2], "h\xc3\xa9llo");
	cr_assert_eq(a->lens[2], 6);
	cr_assert_str_eq(a->strs[3], "</s>");
	cr_assert_eq(gguf_get_arr(&s, "a.nostr", GGUF_VT_STRING, &a), 0);
	cr_assert_eq(a->n, 0);

	const struct gguf_tensor *t = gguf_set_find(&s, "blk.0.cube");
	cr_assert_not_null(t);
	cr_assert_eq(t->type, GGML_F32);
	cr_assert_eq(t->n_dims, 3);
	cr_assert(t->ne[0] == 4 && t->ne[1] == 3 && t->ne[2] == 2 && t->ne[3] == 1);
	cr_assert_eq(t->row_bytes, 16);
	cr_assert_eq(t->nbytes, 96);
	cr_assert_eq(t->offset, f->data_offset);
	cr_assert_str_eq(gguf_set_path(&s, t), path);
	float rows[24];
	cr_assert_eq(gguf_tensor_read_rows(&s, t, 0, 6, rows), 0, "%s", error_message());
	cr_assert_eq(memcmp(rows, f32_vals, sizeof rows), 0);

	t = gguf_set_find(&s, "blk.0.q8");
	cr_assert_not_null(t);
	cr_assert_eq(t->row_bytes, 34);
	cr_assert_eq(t->nbytes, 102);
	cr_assert_eq(t->offset % alignment, 0);
	uint8_t q8[34];
	cr_assert_eq(gguf_tensor_read_rows(&s, t, 2, 1, q8), 0, "%s", error_message());
	for (int i = 0; i < 34; i++)
		cr_assert_eq(q8[i], (uint8_t)((68 + i) * 7 + 1));

	t = gguf_set_find(&s, "norm");
	cr_assert_not_null(t);
	cr_assert_eq(t->nbytes, 10);
	cr_assert_eq(t->offset % alignment, 0);
	uint16_t h[5];
	cr_assert_eq(gguf_tensor_read_rows(&s, t, 0, 1, h), 0);
	cr_assert_eq(h[0], 0x3c00);
	cr_assert_eq(h[4], 0x7bff);
	cr_assert_null(gguf_set_find(&s, "nope"));
	cr_assert_eq(s.total_bytes, 96 + 102 + 10);
	gguf_set_close(&s);
}

Test(gguf, v3_every_value_type)
{
	struct gb b;
	build_all(&b, 3, 32);
	write_gb(&b, tmp("v3.gguf"));
	gb_free(&b);
	check_all(tmp("v3.gguf"), 3, 32);
}

Test(gguf, v2_every_value_type)
{
	struct gb b;
	build_all(&b, 2, 32);
	write_gb(&b, tmp("v2.gguf"));
	gb_free(&b);
	check_all(tmp("v2.gguf"), 2, 32);
}

Test(gguf, other_alignments)
{
	uint32_t al[] = { 1, 8, 64, 4096 };
	for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
		struct gb b;
		build_all(&b, 3, al[i]);
		write_gb(&b, tmp("al.gguf"));
		size_t expect = gb_data_offset(&b);
		gb_free(&b);
		check_all(tmp("al.gguf"), 3, al[i]);
		struct gguf_file f;
		cr_assert_eq(gguf_file_open(&f, tmp("al.gguf")), 0);
		cr_assert_eq(f.data_offset, expect, "alignment %u: data at %llu, expected %zu", al[i],
			     (unsigned long long)f.data_offset, expect);
		gguf_file_close(&f);
	}
}

/* The header parsed from memory: same result as from the file. */
Test(gguf, parse_from_memory)
{
	struct gb b;
	build_all(&b, 3, 32);
	size_t n;
	uint8_t *img = gb_bytes(&b, &n);
	struct gguf_file f;
	error_clear();
	cr_assert_eq(gguf_parse(&f, img, n, n, "mem.gguf"), 0, "%s", error_message());
	cr_assert_eq(f.fd, -1);
	cr_assert_str_eq(f.path, "mem.gguf");
	cr_assert_eq(f.n_tensors, 3);
	cr_assert_eq(f.data_offset, gb_data_offset(&b));
	gguf_file_close(&f);
	/* Only the header needs to be there: the data may lie beyond len. */
	cr_assert_eq(gguf_parse(&f, img, gb_data_offset(&b), n, "mem.gguf"), 0, "%s", error_message());
	gguf_file_close(&f);
	error_clear();
	cr_assert_eq(gguf_parse(&f, img, gb_data_offset(&b) - 40, n, "mem.gguf"), -EINVAL);
	cr_assert(strstr(error_message(), "mem.gguf: truncated header (tensor infos"), "%s", error_message());
	cr_assert_null(f.path);
	free(img);
	gb_free(&b);
}

Test(gguf, getters)
{
	struct gb b;
	build_all(&b, 3, 32);
	gb_kv_i32(&b, "t.neg", -1);
	gb_kv_u32(&b, "t.small", 7);
	write_gb(&b, tmp("g.gguf"));
	gb_free(&b);
	struct gguf_set s;
	cr_assert_eq(gguf_set_open(&s, tmp("g.gguf")), 0);
	uint32_t u32;
	uint64_t u64;
	int64_t i64;
	float f;
	bool bo;
	const char *str;
	const struct gguf_kv *a;

	cr_assert_eq(gguf_get_u32(&s, "t.u8", &u32), 0);
	cr_assert_eq(u32, 200);
	cr_assert_eq(gguf_get_u32(&s, "t.u32", &u32), 0);
	cr_assert_eq(u32, 4000000000u);
	cr_assert_eq(gguf_get_u32(&s, "t.small", &u32), 0);
	cr_assert_eq(u32, 7);
	cr_assert_eq(gguf_get_u64(&s, "t.u64", &u64), 0);
	cr_assert_eq(u64, 18000000000000000000ull);
	cr_assert_eq(gguf_get_i64(&s, "t.i8", &i64), 0);
	cr_assert_eq(i64, -100);
	cr_assert_eq(gguf_get_i64(&s, "t.u32", &i64), 0);
	cr_assert_eq(i64, 4000000000ll);
	cr_assert_eq(gguf_get_f32(&s, "t.f32", &f), 0);
	cr_assert_eq(f, 0.25f);
	cr_assert_eq(gguf_get_bool(&s, "t.bool", &bo), 0);
	cr_assert(bo);
	cr_assert_eq(gguf_get_str(&s, "general.architecture", &str), 0);
	cr_assert_str_eq(str, "olmoe");

	/* Absent: -ENOENT and no message. */
	error_clear();
	cr_assert_eq(gguf_get_u32(&s, "nope", &u32), -ENOENT);
	cr_assert_eq(gguf_get_str(&s, "nope", &str), -ENOENT);
	cr_assert_eq(gguf_get_arr(&s, "nope", GGUF_VT_ARRAY, &a), -ENOENT);
	cr_assert_str_eq(error_message(), "");

	/* Wrong type or a value that does not fit: -EINVAL naming the file and key. */
	/* Each call again with a cleared message: the first error wins. */
#define BAD(call, key)                                                                          \
	do {                                                                                    \
		error_clear();                                                                  \
		cr_assert_eq(call, -EINVAL, #call);                                             \
		cr_assert(strstr(error_message(), tmp("g.gguf")) && strstr(error_message(), key), \
			  "%s: %s", #call, error_message());                                     \
	} while (0)
	BAD(gguf_get_u32(&s, "t.neg", &u32), "t.neg");
	BAD(gguf_get_u32(&s, "t.u64", &u32), "t.u64");
	BAD(gguf_get_u64(&s, "t.i8", &u64), "t.i8");
	BAD(gguf_get_i64(&s, "t.u64", &i64), "t.u64");
	BAD(gguf_get_u32(&s, "t.f32", &u32), "t.f32");
	BAD(gguf_get_u32(&s, "t.bool", &u32), "t.bool");
	BAD(gguf_get_u32(&s, "general.architecture", &u32), "general.architecture");
	BAD(gguf_get_f32(&s, "t.f64", &f), "t.f64");
	BAD(gguf_get_f32(&s, "t.u8", &f), "t.u8");
	BAD(gguf_get_bool(&s, "t.u8", &bo), "t.u8");
	BAD(gguf_get_str(&s, "t.u8", &str), "t.u8");
	BAD(gguf_get_str(&s, "a.str", &str), "a.str");
	BAD(gguf_get_arr(&s, "t.u8", GGUF_VT_ARRAY, &a), "t.u8");
	BAD(gguf_get_arr(&s, "a.str", GGUF_VT_U32, &a), "a.str");
	BAD(gguf_get_arr(&s, "a.f32", GGUF_VT_I32, &a), "a.f32");
	BAD(gguf_get_arr(&s, "a.u8", GGUF_VT_STRING, &a), "a.u8");
#undef BAD
	cr_assert_eq(u32, 7, "a failed getter must leave *out alone");
	gguf_set_close(&s);
}

/* Block sizes from the block structs of ggml-common.h (81ff7abe5): e.g.
 * block_q4_K = { half d, dmin; u8 scales[12]; u8 qs[QK_K/2] }. */
Test(gguf, type_table)
{
	const int QK_K = 256;
	struct { uint32_t t; const char *name; int64_t elems, bytes; } want[] = {
		{ GGML_F32, "f32", 1, 4 }, { GGML_F16, "f16", 1, 2 }, { GGML_BF16, "bf16", 1, 2 },
		{ GGML_Q4_0, "q4_0", 32, 2 + 16 }, { GGML_Q4_1, "q4_1", 32, 4 + 16 },
		{ GGML_Q5_0, "q5_0", 32, 2 + 4 + 16 }, { GGML_Q5_1, "q5_1", 32, 4 + 4 + 16 },
		{ GGML_Q8_0, "q8_0", 32, 2 + 32 }, { GGML_Q8_1, "q8_1", 32, 4 + 32 },
		{ GGML_Q2_K, "q2_K", QK_K, QK_K / 16 + QK_K / 4 + 4 },
		{ GGML_Q3_K, "q3_K", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2 },
		{ GGML_Q4_K, "q4_K", QK_K, 4 + 12 + QK_K / 2 },
		{ GGML_Q5_K, "q5_K", QK_K, 4 + 12 + QK_K / 8 + QK_K / 2 },
		{ GGML_Q6_K, "q6_K", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2 },
		{ GGML_Q8_K, "q8_K", QK_K, 4 + QK_K + QK_K / 16 * 2 },
		{ GGML_IQ2_XXS, "iq2_xxs", QK_K, 2 + QK_K / 8 * 2 },
		{ GGML_IQ2_XS, "iq2_xs", QK_K, 2 + QK_K / 8 * 2 + QK_K / 32 },
		{ GGML_IQ3_XXS, "iq3_xxs", QK_K, 2 + 3 * QK_K / 8 },
		{ GGML_IQ1_S, "iq1_s", QK_K, 2 + QK_K / 8 + QK_K / 32 * 2 },
		{ GGML_IQ4_NL, "iq4_nl", 32, 2 + 16 },
		{ GGML_IQ3_S, "iq3_s", QK_K, 2 + QK_K / 4 + QK_K / 32 + QK_K / 8 + 4 },
		{ GGML_IQ2_S, "iq2_s", QK_K, 2 + QK_K / 4 + QK_K / 16 },
		{ GGML_IQ4_XS, "iq4_xs", QK_K, 2 + 2 + QK_K / 64 + QK_K / 2 },
		{ GGML_I8, "i8", 1, 1 }, { GGML_I16, "i16", 1, 2 }, { GGML_I32, "i32", 1, 4 },
		{ GGML_I64, "i64", 1, 8 }, { GGML_F64, "f64", 1, 8 },
		{ GGML_IQ1_M, "iq1_m", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32 },
		{ GGML_TQ1_0, "tq1_0", QK_K, (QK_K - 4 * QK_K / 64) / 5 + QK_K / 64 + 2 },
		{ GGML_TQ2_0, "tq2_0", QK_K, QK_K / 4 + 2 },
		{ GGML_MXFP4, "mxfp4", 32, 1 + 16 }, { GGML_NVFP4, "nvfp4", 64, 4 + 32 },
		{ GGML_Q1_0, "q1_0", 128, 2 + 16 }, { GGML_Q2_0, "q2_0", 64, 2 + 16 },
	};
	size_t n = sizeof want / sizeof want[0];
	cr_assert_eq(n, GGML_TYPE_COUNT - 8, "every type but the 8 removed ones");
	for (size_t i = 0; i < n; i++) {
		cr_assert_str_eq(ggml_type_name(want[i].t), want[i].name);
		cr_assert_eq(ggml_block_elems(want[i].t), want[i].elems, "%s", want[i].name);
		cr_assert_eq(ggml_block_bytes(want[i].t), want[i].bytes, "%s", want[i].name);
	}
	uint32_t removed[] = { 4, 5, 31, 32, 33, 36, 37, 38, 43, 1000, UINT32_MAX };
	for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++) {
		cr_assert_null(ggml_type_name(removed[i]));
		cr_assert_eq(ggml_block_elems(removed[i]), 0);
		cr_assert_eq(ggml_block_bytes(removed[i]), 0);
	}
}

/* A small valid file, cut at every length: each prefix refused cleanly. */
Test(gguf, every_prefix_refused)
{
	struct gb b;
	gb_init(&b);
	gb_kv_str(&b, "general.architecture", "x");
	gb_kv_u32(&b, "n", 3);
	const char *strs[2] = { "ab", "c" };
	gb_kv_arr_str(&b, "s", 2, strs);
	gb_kv_arr(&b, "f", GB_F32, 2, (float[]){ 1, 2 }, 4);
	gb_tensor(&b, "a", GGML_F32, 2, (int64_t[]){ 2, 2 }, f32_vals, 16);
	gb_tensor(&b, "b", GGML_Q8_0, 1, (int64_t[]){ 32 }, NULL, 34);
	size_t n;
	uint8_t *img = gb_bytes(&b, &n);
	gb_free(&b);
	const char *path = tmp("cut.gguf");
	tu_write(path, img, n);
	struct gguf_set s;
	cr_assert_eq(gguf_set_open(&s, path), 0, "%s", error_message());
	gguf_set_close(&s);
	for (size_t len = 0; len < n; len++) {
		cr_assert_eq(tu_write(path, img, len), 0);
		expect_open_fails(path, EINVAL, NULL);
		struct gguf_file f;
		error_clear();
		cr_assert_eq(gguf_parse(&f, img, len, len, "m.gguf"), -EINVAL, "prefix %zu", len);
		cr_assert(strstr(error_message(), "m.gguf: "), "%s", error_message());
	}
	free(img);
}

/* Caps this test process's address space at 256 MiB above what it maps
 * now, so that allocating for a lying count fails the test (ENOMEM, and the
 * wrong message) instead of passing. ASan reserves terabytes of shadow:
 * there the limit cannot be set and the checks run without it. */
static void limit_memory(void)
{
#if defined(__SANITIZE_ADDRESS__)
	return;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
	return;
#endif
#endif
	FILE *st = fopen("/proc/self/status", "r");
	cr_assert_not_null(st);
	char line[256];
	unsigned long long kb = 0;
	while (fgets(line, sizeof line, st))
		if (sscanf(line, "VmSize: %llu kB", &kb) == 1)
			break;
	fclose(st);
	cr_assert(kb > 0);
	struct rlimit rl = { .rlim_cur = (kb << 10) + (256ull << 20), .rlim_max = (kb << 10) + (256ull << 20) };
	cr_assert_eq(setrlimit(RLIMIT_AS, &rl), 0);
}

Test(gguf, lying_counts)
{
	limit_memory();
	struct gb b;

	gb_init(&b);
	gb_kv_u32(&b, "a", 1);
	b.n_kv = 1ull << 40;
	expect_rejected(&b, "metadata count 1099511627776 cannot fit");
	b.n_kv = 1000; /* more than the 17 bytes can hold */
	expect_rejected(&b, "metadata count 1000 cannot fit");
	gb_free(&b);

	gb_init(&b);
	gb_tensor(&b, "t", GGML_F32, 1, (int64_t[]){ 4 }, NULL, 16);
	b.n_tensors = UINT64_MAX;
	expect_rejected(&b, "tensor count 18446744073709551615 cannot fit");
	b.n_tensors = 1ull << 30;
	expect_rejected(&b, "tensor count 1073741824 cannot fit");
	gb_free(&b);

	/* Key length: huge, and just past the end. */
	gb_init(&b);
	gb_u64(&b.kv, UINT64_MAX);
	gb_raw(&b.kv, "key.and.some.bytes", 18);
	b.n_kv = 1;
	expect_rejected(&b, "metadata key 0: string length 18446744073709551615 runs past the end of the file");
	gb_free(&b);

	/* A string value's length, at key 12. */
	gb_init(&b);
	for (int i = 0; i < 12; i++) {
		char k[16];
		snprintf(k, sizeof k, "k%d", i);
		gb_kv_u8(&b, k, (uint8_t)i);
	}
	gb_kv_head(&b, "general.name", GB_STRING);
	gb_u64(&b.kv, UINT64_MAX);
	expect_rejected(&b, "metadata key 12 (general.name): string length 18446744073709551615 runs past "
			 "the end of the file");
	gb_free(&b);

	/* Array counts: numbers, strings, and a string inside an array. */
	uint32_t et[] = { GB_U8, GB_U32, GB_F64, GB_STRING };
	uint64_t cnt[] = { UINT64_MAX, 1ull << 62, 1ull << 61, 1ull << 61 };
	for (int i = 0; i < 4; i++) {
		gb_init(&b);
		gb_kv_head(&b, "tokenizer.ggml.tokens", GB_ARRAY);
		gb_u32(&b.kv, et[i]);
		gb_u64(&b.kv, cnt[i]);
		gb_raw(&b.kv, "\0\0\0\0\0\0\0\0", 8);
		expect_rejected(&b, "array count");
		gb_free(&b);
	}
	gb_init(&b);
	gb_kv_head(&b, "tokenizer.ggml.tokens", GB_ARRAY);
	gb_u32(&b.kv, GB_STRING);
	gb_u64(&b.kv, 2);
	gb_str(&b.kv, "ok");
	gb_u64(&b.kv, 1ull << 50);
	expect_rejected(&b, "string length 1125899906842624 runs past the end of the file");
	gb_free(&b);

	/* A tensor name's length. */
	gb_init(&b);
	gb_u64(&b.info, 1ull << 62);
	b.n_tensors = 1;
	gb_raw(&b.info, "0123456789012345678901234567890123456789", 40);
	expect_rejected(&b, "tensor infos, tensor 0: string length 4611686018427387904 runs past the end");
	gb_free(&b);
}

Test(gguf, shapes)
{
	struct {
		uint32_t type;
		int n_dims;
		int64_t ne[4];
		const char *what;
	} cases[] = {
		{ GGML_F32, 2, { 1ll << 32, 1ll << 32 }, "dimension 1 (4294967296) makes the element count overflow" },
		{ GGML_F32, 4, { 1 << 16, 1 << 16, 1 << 16, 1 << 16 }, "dimension 3" },
		{ GGML_F32, 1, { -1 }, "dimension 0 (18446744073709551615)" },
		{ GGML_I64, 1, { 1ll << 61 }, "size in bytes overflows" },
		{ GGML_F32, 2, { 1ll << 40, 1ll << 22 }, "size in bytes overflows" },
		{ GGML_F32, 2, { 4, 0 }, "tensor 0 (w): dimension 1 is 0" },
		{ GGML_F32, 1, { 0 }, "dimension 0 is 0" },
		{ GGML_F32, 0, { 0 }, "0 dimensions, not 1 to 4" },
		{ GGML_F32, 5, { 1, 1, 1, 1 }, "5 dimensions, not 1 to 4" },
		{ GGML_Q8_0, 2, { 48, 2 }, "a row of 48 elements is not a whole number of q8_0 blocks of 32" },
		{ GGML_Q4_K, 1, { 32 }, "not a whole number of q4_K blocks of 256" },
		{ 4, 1, { 32 }, "unknown ggml type 4 (a type ggml has removed)" },
		{ 31, 1, { 32 }, "unknown ggml type 31" },
		{ 38, 1, { 32 }, "unknown ggml type 38" },
		{ 43, 1, { 32 }, "unknown ggml type 43" },
		{ 4000000000u, 1, { 32 }, "unknown ggml type 4000000000" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct gb b;
		gb_init(&b);
		int64_t ne[5] = { cases[i].ne[0], cases[i].ne[1], cases[i].ne[2], cases[i].ne[3], 1 };
		gb_tensor_info(&b, "w", cases[i].type, cases[i].n_dims, ne, 0);
		gb_data_align(&b);
		gb_raw(&b.data, f32_vals, 64);
		expect_rejected(&b, cases[i].what);
		gb_free(&b);
	}
}

Test(gguf, offsets)
{
	struct gb b;
	/* Misaligned. */
	gb_init(&b);
	gb_tensor_info(&b, "a", GGML_F32, 1, (int64_t[]){ 4 }, 16);
	gb_raw(&b.data, f32_vals, 64);
	expect_rejected(&b, "tensor 0 (a): data offset 16 is not a multiple of the alignment 32");
	gb_free(&b);
	/* Aligned to 16 in a file of alignment 16: fine. */
	gb_init(&b);
	gb_alignment(&b, 16);
	gb_tensor_info(&b, "a", GGML_F32, 1, (int64_t[]){ 4 }, 16);
	gb_raw(&b.data, f32_vals, 32);
	write_gb(&b, tmp("a16.gguf"));
	struct gguf_set s;
	cr_assert_eq(gguf_set_open(&s, tmp("a16.gguf")), 0, "%s", error_message());
	float v[4];
	cr_assert_eq(gguf_tensor_read_rows(&s, gguf_set_find(&s, "a"), 0, 1, v), 0);
	cr_assert_eq(v[0], 4.0f);
	gguf_set_close(&s);
	gb_free(&b);
	/* Overlapping, in any order. */
	gb_init(&b);
	gb_tensor_info(&b, "late", GGML_F32, 1, (int64_t[]){ 16 }, 32);
	gb_tensor_info(&b, "early", GGML_F32, 1, (int64_t[]){ 16 }, 0);
	gb_raw(&b.data, f32_vals, 96);
	expect_rejected(&b, "tensors early and late overlap");
	gb_free(&b);
	/* Past the end, and an offset that would wrap 64 bits. */
	gb_init(&b);
	gb_tensor_info(&b, "a", GGML_F32, 1, (int64_t[]){ 8 }, 0);
	gb_raw(&b.data, f32_vals, 31);
	expect_rejected(&b, "tensor 0 (a): data [0, +32) runs past the end of the file (31 bytes of data)");
	gb_free(&b);
	gb_init(&b);
	gb_tensor_info(&b, "a", GGML_F32, 1, (int64_t[]){ 8 }, UINT64_MAX - 31);
	gb_raw(&b.data, f32_vals, 64);
	expect_rejected(&b, "runs past the end of the file");
	gb_free(&b);
	/* The data section itself past the end: header end padded beyond it. */
	gb_init(&b);
	gb_tensor_info(&b, "a", GGML_F32, 1, (int64_t[]){ 1 }, 0);
	size_t n;
	uint8_t *img = gb_bytes(&b, &n);
	size_t hdr = 24 + b.kv.n + b.info.n;
	cr_assert(hdr % 32 != 0);
	tu_write(tmp("pad.gguf"), img, hdr + 1);
	expect_open_fails(tmp("pad.gguf"), EINVAL, "the data section would start at");
	free(img);
	gb_free(&b);
}

Test(gguf, structure)
{
	struct gb b;
	/* Duplicate key. */
	gb_init(&b);
	gb_kv_u32(&b, "general.x", 1);
	gb_kv_str(&b, "y", "z");
	gb_kv_u32(&b, "general.x", 2);
	expect_rejected(&b, "metadata key 2 (general.x) appears twice");
	gb_free(&b);
	/* Duplicate tensor name. */
	gb_init(&b);
	gb_tensor(&b, "w", GGML_F32, 1, (int64_t[]){ 4 }, NULL, 16);
	gb_tensor(&b, "w", GGML_F32, 1, (int64_t[]){ 4 }, NULL, 16);
	expect_rejected(&b, "tensor 1 (w): the name appears twice");
	gb_free(&b);
	/* An array of arrays. */
	gb_init(&b);
	gb_kv_head(&b, "nest", GB_ARRAY);
	gb_u32(&b.kv, GB_ARRAY);
	gb_u64(&b.kv, 1);
	gb_u32(&b.kv, GB_U8);
	gb_u64(&b.kv, 0);
	expect_rejected(&b, "metadata key 0 (nest): an array of arrays");
	gb_free(&b);
	/* Unknown value and element types. */
	gb_init(&b);
	gb_kv_scalar(&b, "odd", 13, 0, 4);
	expect_rejected(&b, "metadata key 0 (odd): unknown value type 13");
	gb_free(&b);
	gb_init(&b);
	gb_kv_head(&b, "odd", GB_ARRAY);
	gb_u32(&b.kv, 99);
	gb_u64(&b.kv, 0);
	expect_rejected(&b, "unknown array element type 99");
	gb_free(&b);
	/* Alignment: not a power of two, zero, not a u32. */
	uint32_t bad[] = { 0, 48, 3 };
	for (int i = 0; i < 3; i++) {
		gb_init(&b);
		gb_kv_u32(&b, "general.alignment", bad[i]);
		expect_rejected(&b, "general.alignment must be a u32 power of two");
		gb_free(&b);
	}
	gb_init(&b);
	gb_kv_u64(&b, "general.alignment", 64);
	expect_rejected(&b, "general.alignment must be a u32 power of two, not u64 64");
	gb_free(&b);
	/* Names: empty, holding a NUL, 64 bytes (ggml's GGML_MAX_NAME). */
	gb_init(&b);
	gb_kv_u8(&b, "", 1);
	expect_rejected(&b, "metadata key 0: the name is empty");
	gb_free(&b);
	gb_init(&b);
	gb_str(&b.kv, "a");
	b.kv.p[b.kv.n - 1] = 0;
	gb_u32(&b.kv, GB_U8);
	gb_raw(&b.kv, "\1", 1);
	b.n_kv = 1;
	expect_rejected(&b, "metadata key 0: the name holds a NUL byte");
	gb_free(&b);
	char name[65];
	memset(name, 'n', 64);
	name[64] = 0;
	gb_init(&b);
	gb_tensor(&b, name, GGML_F32, 1, (int64_t[]){ 1 }, NULL, 4);
	expect_rejected(&b, "string length 64 exceeds 63 bytes");
	gb_free(&b);
	name[63] = 0;
	gb_init(&b);
	gb_tensor(&b, name, GGML_F32, 1, (int64_t[]){ 1 }, NULL, 4);
	write_gb(&b, tmp("n63.gguf"));
	gb_free(&b);
	struct gguf_set s;
	cr_assert_eq(gguf_set_open(&s, tmp("n63.gguf")), 0, "a 63-byte name is fine: %s", error_message());
	cr_assert_not_null(gguf_set_find(&s, name));
	gguf_set_close(&s);
	/* A key of 65536 bytes. */
	char *key = malloc(65537);
	memset(key, 'k', 65536);
	key[65536] = 0;
	gb_init(&b);
	gb_kv_u8(&b, key, 1);
	expect_rejected(&b, "string length 65536 exceeds 65535 bytes");
	gb_free(&b);
	free(key);
}

Test(gguf, versions_and_magic)
{
	struct gb b;
	gb_init(&b);
	gb_kv_u32(&b, "a", 1);
	b.version = 1;
	expect_rejected(&b, "GGUF version 1 is not supported");
	b.version = 0x03000000; /* 3, byte-swapped: a big-endian file */
	expect_rejected(&b, "big-endian");
	b.version = 0x02000000;
	expect_rejected(&b, "big-endian");
	b.version = 4;
	expect_rejected(&b, "GGUF version 4 is not supported");
	b.version = 0;
	expect_rejected(&b, "GGUF version 0 is not supported");
	b.version = 3;
	size_t n;
	uint8_t *img = gb_bytes(&b, &n);
	img[3] = 'G';
	tu_write(tmp("magic.gguf"), img, n);
	expect_open_fails(tmp("magic.gguf"), EINVAL, "not a GGUF file: it starts with 47 47 55 47");
	free(img);
	gb_free(&b);
	expect_open_fails(tmp("missing.gguf"), ENOENT, "cannot open");
}

Test(gguf, is_gguf)
{
	struct gb b;
	gb_init(&b);
	write_gb(&b, tmp("e.gguf"));
	gb_free(&b);
	cr_assert(gguf_is_gguf(tmp("e.gguf")));
	struct gguf_set s;
	cr_assert_eq(gguf_set_open(&s, tmp("e.gguf")), 0, "an empty GGUF is valid: %s", error_message());
	cr_assert_eq(s.n_tensors, 0);
	cr_assert_eq(s.files[0].data_offset, 24);
	gguf_set_close(&s);
	tu_write(tmp("st.safetensors"), "\2\0\0\0\0\0\0\0{}", 10);
	cr_assert_not(gguf_is_gguf(tmp("st.safetensors")));
	tu_write(tmp("short"), "GGU", 3);
	cr_assert_not(gguf_is_gguf(tmp("short")));
	cr_assert_not(gguf_is_gguf(tmp("absent")));
	cr_assert_not(gguf_is_gguf(dir));
}

Test(gguf, read_rows)
{
	struct gb b;
	gb_init(&b);
	/* f32 [3, 4, 2]: element (i, j, k) = 100k + 10j + i. */
	float v[24];
	for (int k = 0; k < 2; k++)
		for (int j = 0; j < 4; j++)
			for (int i = 0; i < 3; i++)
				v[(k * 4 + j) * 3 + i] = (float)(100 * k + 10 * j + i);
	gb_tensor(&b, "x", GGML_F32, 3, (int64_t[]){ 3, 4, 2 }, v, sizeof v);
	/* q4_0 [64, 2, 3]: 2 blocks of 18 bytes a row, 6 rows. */
	uint8_t q[6 * 36];
	for (size_t i = 0; i < sizeof q; i++)
		q[i] = (uint8_t)(i ^ 0x5a);
	gb_tensor(&b, "q", GGML_Q4_0, 3, (int64_t[]){ 64, 2, 3 }, q, sizeof q);
	write_gb(&b, tmp("r.gguf"));
	gb_free(&b);
	struct gguf_set s;
	cr_assert_eq(gguf_set_open(&s, tmp("r.gguf")), 0, "%s", error_message());
	const struct gguf_tensor *x = gguf_set_find(&s, "x"), *qt = gguf_set_find(&s, "q");
	float out[24];
	/* Row r is (j, k) = (r % 4, r / 4). */
	cr_assert_eq(gguf_tensor_read_rows(&s, x, 3, 3, out), 0);
	for (int r = 0; r < 3; r++)
		for (int i = 0; i < 3; i++)
			cr_assert_eq(out[r * 3 + i], (float)(100 * ((3 + r) / 4) + 10 * ((3 + r) % 4) + i));
	cr_assert_eq(gguf_tensor_read_rows(&s, x, 0, 8, out), 0);
	cr_assert_eq(memcmp(out, v, sizeof v), 0);
	cr_assert_eq(gguf_tensor_read_rows(&s, x, 8, 0, out), 0, "no rows at the end is fine");
	uint8_t qo[36 * 2];
	cr_assert_eq(qt->row_bytes, 36);
	cr_assert_eq(gguf_tensor_read_rows(&s, qt, 4, 2, qo), 0);
	cr_assert_eq(memcmp(qo, q + 4 * 36, sizeof qo), 0);

	int64_t bad[][2] = { { 7, 2 }, { 8, 1 }, { -1, 1 }, { 0, -1 }, { 0, 9 }, { INT64_MAX, 1 },
			     { 1, INT64_MAX } };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		error_clear();
		cr_assert_eq(gguf_tensor_read_rows(&s, x, bad[i][0], bad[i][1], out), -EINVAL, "rows %lld +%lld",
			     (long long)bad[i][0], (long long)bad[i][1]);
		cr_assert(strstr(error_message(), tmp("r.gguf")) && strstr(error_message(), "tensor x"), "%s",
			  error_message());
	}
	/* The file shrinks under the open set: -EIO naming it. */
	cr_assert_eq(truncate(tmp("r.gguf"), (off_t)qt->offset + 40), 0);
	error_clear();
	cr_assert_eq(gguf_tensor_read_rows(&s, qt, 1, 1, qo), -EIO);
	cr_assert(strstr(error_message(), "tensor q: file is truncated"), "%s", error_message());
	gguf_set_close(&s);
}

/* A header larger than the first prefix gguf_file_open reads (4 MiB): the
 * reader reads more and parses again. */
Test(gguf, large_header)
{
	struct gb b;
	gb_init(&b);
	size_t n = 400000;
	char **strs = malloc(n * sizeof *strs);
	for (size_t i = 0; i < n; i++) {
		strs[i] = malloc(16);
		snprintf(strs[i], 16, "tok%zu", i);
	}
	gb_kv_arr_str(&b, "tokenizer.ggml.tokens", n, (const char *const *)strs);
	gb_tensor(&b, "w", GGML_F32, 1, (int64_t[]){ 4 }, f32_vals, 16);
	cr_assert(gb_data_offset(&b) > (4u << 20));
	write_gb(&b, tmp("big.gguf"));
	struct gguf_set s;
	cr_assert_eq(gguf_set_open(&s, tmp("big.gguf")), 0, "%s", error_message());
	const struct gguf_kv *a;
	cr_assert_eq(gguf_get_arr(&s, "tokenizer.ggml.tokens", GGUF_VT_STRING, &a), 0);
	cr_assert_eq(a->n, n);
	cr_assert_str_eq(a->strs[n - 1], strs[n - 1]);
	float v[4];
	cr_assert_eq(gguf_tensor_read_rows(&s, gguf_set_find(&s, "w"), 0, 1, v), 0);
	cr_assert_eq(v[3], 3.0f);
	gguf_set_close(&s);
	/* Cut inside the array, past the first prefix: still "truncated". */
	size_t len;
	uint8_t *img = gb_bytes(&b, &len);
	cr_assert_eq(tu_write(tmp("bigcut.gguf"), img, 5u << 20), 0);
	expect_open_fails(tmp("bigcut.gguf"), EINVAL, "metadata key 0 (tokenizer.ggml.tokens): string length");
	free(img);
	gb_free(&b);
	for (size_t i = 0; i < n; i++)
		free(strs[i]);
	free(strs);
}

/* A string that the file could hold but the 1 GiB header cap cannot: refused
 * from its length, before anything is read or allocated for it (a sparse
 * 2 GiB file). */
Test(gguf, header_cap)
{
	struct gb b;
	gb_init(&b);
	gb_kv_head(&b, "tokenizer.chat_template", GB_STRING);
	gb_u64(&b.kv, 3ull << 29);
	write_gb(&b, tmp("cap.gguf"));
	gb_free(&b);
	cr_assert_eq(truncate(tmp("cap.gguf"), 2ll << 30), 0);
	expect_open_fails(tmp("cap.gguf"), EINVAL, "string length 1610612736 runs past the end of the largest "
			  "header read (1 GiB)");
}

/* Split i of 3 of model-0000N-of-00003.gguf: tensors "t.i.a" and "t.i.b"
 * (f32 [2, 2], element = 10 i + j), split.* keys as llama.cpp's gguf-split
 * writes them (u16, u16, i32). */
static void write_split(const char *prefix, int i, int count, int no, int tensors_count, const char *extra)
{
	struct gb b;
	gb_init(&b);
	if (i == 0)
		gb_kv_str(&b, "general.architecture", "qwen3moe");
	gb_kv_u16(&b, "split.no", (uint16_t)no);
	gb_kv_u16(&b, "split.count", (uint16_t)count);
	gb_kv_i32(&b, "split.tensors.count", tensors_count);
	float v[4];
	for (int j = 0; j < 4; j++)
		v[j] = (float)(10 * i + j);
	char name[64];
	snprintf(name, sizeof name, "t.%d.a", i);
	gb_tensor(&b, name, GGML_F32, 2, (int64_t[]){ 2, 2 }, v, 16);
	snprintf(name, sizeof name, "t.%d.b", i);
	gb_tensor(&b, name, GGML_F32, 1, (int64_t[]){ 4 }, v, 16);
	if (extra)
		gb_tensor(&b, extra, GGML_F32, 1, (int64_t[]){ 1 }, v, 4);
	char path[4300];
	snprintf(path, sizeof path, "%s-%05d-of-%05d.gguf", prefix, i + 1, 3);
	write_gb(&b, path);
	gb_free(&b);
}

static void write_splits(const char *prefix)
{
	for (int i = 0; i < 3; i++)
		write_split(prefix, i, 3, i, 6, NULL);
}

Test(gguf, split_set)
{
	char prefix[4200];
	snprintf(prefix, sizeof prefix, "%s/model", dir);
	write_splits(prefix);
	for (int from = 1; from <= 3; from++) {
		char path[4300];
		snprintf(path, sizeof path, "%s-%05d-of-00003.gguf", prefix, from);
		struct gguf_set s;
		error_clear();
		cr_assert_eq(gguf_set_open(&s, path), 0, "%s", error_message());
		cr_assert_eq(s.n_files, 3);
		cr_assert_eq(s.n_tensors, 6);
		cr_assert_eq(s.total_bytes, 6 * 16);
		const char *arch;
		cr_assert_eq(gguf_get_str(&s, "general.architecture", &arch), 0, "metadata of file 0");
		cr_assert_str_eq(arch, "qwen3moe");
		for (int i = 0; i < 3; i++) {
			char name[64], want[4300];
			snprintf(name, sizeof name, "t.%d.a", i);
			snprintf(want, sizeof want, "%s-%05d-of-00003.gguf", prefix, i + 1);
			const struct gguf_tensor *t = gguf_set_find(&s, name);
			cr_assert_not_null(t, "%s", name);
			cr_assert_eq(t->file_index, i);
			cr_assert_str_eq(gguf_set_path(&s, t), want);
			cr_assert_str_eq(s.files[i].path, want);
			float v[4];
			cr_assert_eq(gguf_tensor_read_rows(&s, t, 1, 1, v), 0);
			cr_assert_eq(v[0], (float)(10 * i + 2));
			cr_assert_eq(v[1], (float)(10 * i + 3));
		}
		gguf_set_close(&s);
	}
}

Test(gguf, split_errors)
{
	char prefix[4200], p1[4300], p2[4300], p3[4300];
	snprintf(prefix, sizeof prefix, "%s/m", dir);
	snprintf(p1, sizeof p1, "%s-00001-of-00003.gguf", prefix);
	snprintf(p2, sizeof p2, "%s-00002-of-00003.gguf", prefix);
	snprintf(p3, sizeof p3, "%s-00003-of-00003.gguf", prefix);

	/* A missing file: the message names it. */
	write_splits(prefix);
	unlink(p3);
	struct gguf_set s;
	error_clear();
	cr_assert_eq(gguf_set_open(&s, p1), -ENOENT);
	cr_assert(strstr(error_message(), p3) && strstr(error_message(), "cannot open"), "%s", error_message());

	/* split.count disagrees. */
	write_splits(prefix);
	write_split(prefix, 2, 4, 2, 6, NULL);
	error_clear();
	cr_assert_eq(gguf_set_open(&s, p1), -EINVAL);
	cr_assert(strstr(error_message(), p3) && strstr(error_message(), "split.count is 4"), "%s",
		  error_message());

	/* split.no disagrees with the name. */
	write_splits(prefix);
	write_split(prefix, 1, 3, 2, 6, NULL);
	error_clear();
	cr_assert_eq(gguf_set_open(&s, p1), -EINVAL);
	cr_assert(strstr(error_message(), p2) && strstr(error_message(), "split.no is 2"), "%s", error_message());
	expect_open_fails(p2, EINVAL, "the name does not end in -00003-of-00003.gguf");

	/* A tensor in two files. */
	write_splits(prefix);
	write_split(prefix, 2, 3, 2, 7, "t.0.b");
	error_clear();
	cr_assert_eq(gguf_set_open(&s, p2), -EINVAL);
	cr_assert(strstr(error_message(), "tensor t.0.b also appears in") && strstr(error_message(), p1), "%s",
		  error_message());

	/* split.tensors.count wrong. */
	write_splits(prefix);
	write_split(prefix, 0, 3, 0, 5, NULL);
	expect_open_fails(p1, EINVAL, "split.tensors.count is 5, but the 3 files hold 6 tensors");

	/* A split file whose name is not llama.cpp's. */
	write_splits(prefix);
	char odd[4300];
	snprintf(odd, sizeof odd, "%s/renamed.gguf", dir);
	cr_assert_eq(rename(p1, odd), 0);
	expect_open_fails(odd, EINVAL, "the name does not end in -00001-of-00003.gguf");

	/* split.count 1: an ordinary file whatever its name. */
	struct gb b;
	gb_init(&b);
	gb_kv_u16(&b, "split.count", 1);
	gb_kv_u16(&b, "split.no", 0);
	write_gb(&b, tmp("one.gguf"));
	gb_free(&b);
	cr_assert_eq(gguf_set_open(&s, tmp("one.gguf")), 0, "%s", error_message());
	gguf_set_close(&s);
	/* split.count not an integer. */
	gb_init(&b);
	gb_kv_str(&b, "split.count", "3");
	write_gb(&b, tmp("strcount.gguf"));
	gb_free(&b);
	expect_open_fails(tmp("strcount.gguf"), EINVAL, "split.count must be an integer");
}
