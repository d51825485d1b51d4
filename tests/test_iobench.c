/*
 * test_iobench — planner/iobench.h, planner/blockdev.h and planner/profile.h,
 * and `colibri iobench` on small temporary files: a point runs and its
 * numbers are positive and consistent (bytes = reads x block, p50 <= p99),
 * bad inputs fail with a message naming the file, the JSON output parses,
 * the profile is written and merged per disk (two files on one file system
 * share one entry, keyed by the device, not the path) and plan then reuses
 * it, sweeps skip blocks larger than the files and include a container's
 * record size. Where the scratch file system refuses O_DIRECT (tmpfs), the
 * tests measure with --buffered and say so. Nothing asserts a speed.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>

#include "planner/blockdev.h"
#include "planner/iobench.h"
#include "planner/profile.h"
#include "tests/cli_util.h"
#include "tests/fixture_cache.h"
#include "tests/test_util.h"

static char scratch[4096], cache[4200], file_a[4200], file_b[4200], small[4200];
static bool direct;

static void make_file(const char *path, size_t bytes)
{
	char *buf = malloc(bytes);
	for (size_t i = 0; i < bytes; i++)
		buf[i] = (char)(i * 2654435761u >> 13);
	cr_assert_eq(tu_write(path, buf, bytes), 0, "cannot write %s", path);
	free(buf);
}

/* Whether the scratch file system serves a 4 KiB O_DIRECT read. */
static bool direct_works(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECT);
	void *buf = NULL;
	bool ok = fd >= 0 && posix_memalign(&buf, 4096, 4096) == 0 && pread(fd, buf, 4096, 0) == 4096;
	free(buf);
	if (fd >= 0)
		close(fd);
	return ok;
}

static void setup(void)
{
	tu_mkdtemp(scratch, sizeof scratch);
	snprintf(cache, sizeof cache, "%s/cache", scratch);
	snprintf(file_a, sizeof file_a, "%s/a.bin", scratch);
	snprintf(file_b, sizeof file_b, "%s/b.bin", scratch);
	snprintf(small, sizeof small, "%s/small.bin", scratch);
	make_file(file_a, 4u << 20);
	make_file(file_b, 4u << 20);
	make_file(small, 8192);
	direct = direct_works(file_a);
	if (!direct)
		cr_log_warn("%s refuses O_DIRECT: measuring with --buffered", scratch);
	setenv("COLIBRI_CACHE_DIR", cache, 1);
}

static void teardown(void)
{
	tu_rmrf(scratch);
}

TestSuite(iobench, .init = setup, .fini = teardown, .timeout = 120);

Test(iobench, one_point_is_consistent)
{
	struct iobench_params p = { .block_bytes = 64 << 10, .depth = 4, .seconds = 0.1, .buffered = !direct, .seed = 1 };
	struct iobench_result r;
	char err[512];
	const char *paths[] = { file_a, file_b };
	cr_assert_eq(iobench_run(&r, paths, 2, &p, err, sizeof err), 0, "%s", err);
	cr_expect_gt(r.reads, 0);
	cr_expect_eq(r.bytes, r.reads * p.block_bytes, "every read is a whole block");
	cr_expect_gt(r.gbps, 0);
	cr_expect_gt(r.lat_p50_us, 0);
	cr_expect_geq(r.lat_p99_us, r.lat_p50_us);
	cr_expect_gt(r.lat_mean_us, 0);
}

Test(iobench, bad_inputs_name_the_file)
{
	struct iobench_params p = { .block_bytes = 64 << 10, .depth = 1, .seconds = 0.05, .buffered = !direct };
	struct iobench_result r;
	char err[512], missing[4300];
	const char *one[1] = { small };
	cr_expect_eq(iobench_run(&r, one, 1, &p, err, sizeof err), -EINVAL);
	cr_expect(strstr(err, small) && strstr(err, "smaller than"), "%s", err);
	snprintf(missing, sizeof missing, "%s/missing.bin", scratch);
	one[0] = missing;
	cr_expect_eq(iobench_run(&r, one, 1, &p, err, sizeof err), -ENOENT);
	cr_expect(strstr(err, missing), "%s", err);
	one[0] = file_a;
	p.block_bytes = 1000;
	cr_expect_eq(iobench_run(&r, one, 1, &p, err, sizeof err), -EINVAL, "unaligned block accepted");
}

Test(iobench, blockdev_keys_by_device_not_path)
{
	struct blockdev a, b;
	cr_assert_eq(blockdev_identify(&a, file_a), 0);
	cr_assert_eq(blockdev_identify(&b, scratch), 0);
	cr_expect_str_eq(a.key, b.key);
	cr_expect_neq(a.key[0], 0);
	cr_expect(!strstr(a.key, "a.bin"), "the key must not be the path: %s", a.key);
	if (!a.resolved)
		cr_log_warn("%s has no block device (%s): keyed by file system", scratch, a.key);
	char missing[4300];
	snprintf(missing, sizeof missing, "%s/missing", scratch);
	cr_expect_eq(blockdev_identify(&a, missing), -ENOENT);
}

Test(iobench, nearest_point_prefers_block_then_depth)
{
	struct disk_profile *p = calloc(1, sizeof *p);
	const uint64_t blocks[] = { 128 << 10, 1 << 20, 4 << 20 };
	const int depths[] = { 1, 16 };
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 2; j++) {
			struct disk_point pt = { .block_bytes = blocks[i], .depth = depths[j], .gbps = i * 2 + j + 1 };
			cr_assert_eq(disk_profile_put(p, &pt), 0);
		}
	struct disk_point again = { .block_bytes = 1 << 20, .depth = 16, .gbps = 42 };
	cr_assert_eq(disk_profile_put(p, &again), 0);
	cr_expect_eq(p->n_points, 6, "a point with the same block and depth replaces the old one");
	const struct disk_point *n = disk_profile_nearest(p, 1536 << 10, 12, false);
	cr_assert_not_null(n);
	cr_expect_eq(n->block_bytes, 1 << 20);
	cr_expect_eq(n->depth, 16);
	cr_expect_float_eq(n->gbps, 42, 0);
	cr_expect_null(disk_profile_nearest(p, 1 << 20, 1, true), "no buffered points");
	free(p);
}

Test(iobench, profile_is_saved_per_device_and_reused_by_plan)
{
	char out[4400], prof[4400];
	const char *mode = direct ? "" : "--buffered";
	snprintf(out, sizeof out, "%s/out.json", scratch);
	snprintf(prof, sizeof prof, "%s/disks.json", cache);
	cr_assert_eq(cli_run(cache, out, "iobench '%s' --block-kb 64 --depth 4 --seconds 0.1 --json %s", file_a, mode), 0);
	cJSON *j = cli_json_read(out);
	const cJSON *dev = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "devices"), 0);
	const cJSON *pt = cJSON_GetArrayItem(cJSON_GetObjectItem(dev, "points"), 0);
	cr_assert_not_null(pt);
	cr_expect_eq(cli_json_num(pt, "block_bytes"), 65536);
	cr_expect_eq(cli_json_num(pt, "depth"), 4);
	cr_expect_gt(cli_json_num(pt, "gbps"), 0);
	cr_expect_gt(cli_json_num(pt, "iops"), 0);
	cr_expect_gt(cli_json_num(pt, "p50_us"), 0);
	cr_expect_geq(cli_json_num(pt, "p99_us"), cli_json_num(pt, "p50_us"));
	cr_expect_str_eq(cJSON_GetObjectItem(j, "profile")->valuestring, prof);
	char key[400];
	snprintf(key, sizeof key, "%s", cJSON_GetObjectItem(dev, "key")->valuestring);
	cJSON_Delete(j);

	/* Another file in the same folder: same disk, one entry, points merged. */
	cr_assert_eq(cli_run(cache, out, "iobench '%s' --block-kb 128 --depth 1 --seconds 0.1 %s", file_b, mode), 0);
	j = cli_json_read(prof);
	const cJSON *disks = cJSON_GetObjectItem(j, "disks");
	cr_expect_eq(cJSON_GetArraySize(disks), 1, "two files on one file system made two entries");
	const cJSON *entry = cJSON_GetObjectItemCaseSensitive(disks, key);
	cr_assert_not_null(entry, "no entry for %s", key);
	cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(entry, "points")), 2);
	cJSON_Delete(j);

	/* plan finds the profile of the disk holding the container: a copy in
	 * scratch, on the disk just measured (the shared container may lie on
	 * another). */
	char model[4300];
	snprintf(model, sizeof model, "%s/model", scratch);
	fc_container_copy(model, "hf/qwen3_moe", "");
	cr_assert_eq(cli_run(cache, out, "plan --model '%s' --ram min --json %s", model, direct ? "" : "--no-direct"), 0);
	j = cli_json_read(out);
	const cJSON *d0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "disks"), 0);
	cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(d0, "profiled")), "plan did not find the saved profile");
	cr_expect_str_eq(cJSON_GetObjectItem(d0, "key")->valuestring, key);
	const cJSON *est = cJSON_GetObjectItem(j, "estimate");
	cr_expect_gt(cli_json_num(est, "disk_gbps"), 0);
	cr_expect_gt(cli_json_num(cJSON_GetObjectItem(est, "cold"), "tok_s"), 0);
	cJSON_Delete(j);
}

Test(iobench, sweep_skips_large_blocks_and_adds_the_record_size)
{
	char out[4400], prof[4400];
	const char *mode = direct ? "" : "--buffered";
	snprintf(out, sizeof out, "%s/out.json", scratch);
	cr_assert_eq(cli_run(cache, out, "iobench '%s' --depth 1 --seconds 0.02 --json --no-save %s", file_a, mode), 0);
	cJSON *j = cli_json_read(out);
	const cJSON *dev = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "devices"), 0);
	const cJSON *e;
	int n = 0;
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(dev, "points")) {
		cr_expect_leq(cli_json_num(e, "block_bytes"), 4 << 20);
		n++;
	}
	cr_expect_eq(n, 6, "128 KiB .. 4 MiB fit a 4 MiB file");
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(dev, "skipped"))
		cr_expect_gt(cli_json_num(e, "block_bytes"), 4 << 20);
	cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(dev, "skipped")), 3, "8, 16, 32 MiB are skipped");
	cJSON_Delete(j);
	snprintf(prof, sizeof prof, "%s/disks.json", cache);
	cr_expect_neq(access(prof, F_OK), 0, "--no-save wrote a profile");

	/* A copy in scratch, whose disk (and O_DIRECT) `direct` describes. */
	char model[4300];
	snprintf(model, sizeof model, "%s/model", scratch);
	fc_container_copy(model, "hf/qwen3_moe", "");
	cr_assert_eq(cli_run(cache, out, "iobench '%s' --depth 2 --seconds 0.02 --json --no-save %s", model, mode), 0);
	j = cli_json_read(out);
	double record = cli_json_num(j, "record_bytes");
	cr_expect_gt(record, 0);
	bool found = false;
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "devices"), 0), "points"))
		found |= cli_json_num(e, "block_bytes") == record;
	cr_expect(found, "the sweep of a container measures its record size");
	cJSON_Delete(j);
}

Test(iobench, buffered_small_file_warns)
{
	char out[4400];
	snprintf(out, sizeof out, "%s/out.txt", scratch);
	cr_assert_eq(cli_run(cache, out, "iobench '%s' --buffered --block-kb 64 --depth 1 --seconds 0.02", file_a), 0);
	char *err = cli_read_err(out);
	cr_expect(err && strstr(err, "smaller than RAM"), "%s", err);
	free(err);
}

Test(iobench, command_errors_are_reported)
{
	char out[4400], missing[4300];
	snprintf(out, sizeof out, "%s/out.txt", scratch);
	snprintf(missing, sizeof missing, "%s/missing.bin", scratch);
	cr_expect_neq(cli_run(cache, out, "iobench '%s' --block-kb 64 --depth 1 --seconds 0.02", missing), 0);
	char *err = cli_read_err(out);
	cr_expect(err && strstr(err, missing), "%s", err);
	free(err);
	cr_expect_neq(cli_run(cache, out, "iobench '%s' --block-kb 3", file_a), 0, "a block of 3 KiB was accepted");
	cr_expect_neq(cli_run(cache, out, "iobench '%s' --depth 0", file_a), 0);
}

Test(iobench, a_corrupt_profile_file_is_replaced)
{
	char prof[4400];
	snprintf(prof, sizeof prof, "%s/disks.json", cache);
	cr_assert_eq(tu_sh("mkdir -p '%s' && echo '{not json' > '%s'", cache, prof), 0);
	struct disk_profile p;
	cr_expect_eq(profile_disk_load(&p, "any"), -EINVAL);
	cr_assert_eq(profile_machine_put("test_gbps", 1.5), 0);
	double v = 0;
	cr_expect_eq(profile_machine_get("test_gbps", &v), 0);
	cr_expect_float_eq(v, 1.5, 0);
	char bad[4500];
	snprintf(bad, sizeof bad, "%s.bad", prof);
	cr_expect_eq(access(bad, F_OK), 0, "the corrupt file is kept aside");
}
