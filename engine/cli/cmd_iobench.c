/*
 * cmd_iobench — `colibri iobench PATH [--block-kb N] [--depth N]
 * [--seconds S] [--buffered] [--json] [--no-save]`: random-read bandwidth,
 * IOPS and latency of the disk under PATH (a file, a block device, or a
 * container folder: all its expert files), saved as that disk's profile for
 * plan and run (planner/profile.h). A container's mirror copies (other
 * disks) are measured too, each disk on its own.
 *
 * Without --block-kb and --depth it sweeps block sizes 128 KiB .. 32 MiB
 * (plus the container's expert record size) by depths 1, 4, 16, 64; with
 * one of them it sweeps the other. Points whose buffers (depth x block)
 * would exceed IOBENCH_CMD_INFLIGHT_MAX or a quarter of available memory,
 * or whose block is larger than every file, are skipped and listed.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/cli/cmd.h"
#include "engine/model/manifest.h"
#include "planner/iobench.h"
#include "planner/plan_report.h"
#include "planner/profile.h"
#include "planner/topology.h"
#include "base/error.h"

#define IOBENCH_CMD_INFLIGHT_MAX (1ull << 30)
#define IOBENCH_BLOCKS_MAX 16
#define IOBENCH_FILES_MAX 4096

static const int sweep_depths[] = { 1, 4, 16, 64 };

struct bench_group {
	struct disk_profile profile;     /* identity, and the points measured now */
	const char **files;              /* [n_files], pointing into struct bench */
	int n_files;
	uint64_t bytes, largest;
	cJSON *skipped;
};

struct bench {
	const char *path;
	struct plan_container pc;        /* a container's expert files and mirror copies */
	uint64_t record_bytes;           /* its main frame class's record, 0 for a file */
	struct bench_group *groups;
	int n_groups;
	uint64_t blocks[IOBENCH_BLOCKS_MAX];
	int n_blocks;
	int depths[4];
	int n_depths;
	double seconds;
	bool buffered, json, save;
};

/* The files to measure: PATH itself, or a container's expert files. */
static int collect_files(struct bench *b, const char ***files, int *n)
{
	struct stat st;
	if (stat(b->path, &st) != 0)
		return error_set(errno, "%s: %s", b->path, strerror(errno));
	if (!S_ISDIR(st.st_mode)) {
		*files = &b->path;
		*n = 1;
		return 0;
	}
	/* The expert files, then their mirror copies that exist (other disks). */
	int rc = plan_container_load(&b->pc, b->path, 0, 0, 0, 1);
	if (!rc && (b->pc.n_paths == 0 || b->pc.n_paths > IOBENCH_FILES_MAX))
		rc = error_set(EINVAL, "%s: no expert files to measure", b->path);
	b->record_bytes = rc ? 0 : plan_container_main_record(&b->pc);
	*files = (const char **)b->pc.paths;
	*n = rc ? 0 : b->pc.n_paths;
	return rc;
}

/* Size of a regular file or block device; 0 if unknown. */
static uint64_t path_bytes(const char *path, const struct stat *st)
{
	uint64_t size = 0;
	if (!S_ISBLK(st->st_mode))
		return (uint64_t)st->st_size;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (ioctl(fd, BLKGETSIZE64, &size) != 0)
			size = 0;
		close(fd);
	}
	return size;
}

/* Groups the files by disk. */
static int group_files(struct bench *b)
{
	const char **files = NULL;
	int n = 0, rc = collect_files(b, &files, &n);
	if (rc)
		return rc;
	if (!(b->groups = calloc((size_t)n, sizeof *b->groups)))
		return error_set(ENOMEM, "out of memory");
	for (int i = 0; i < n; i++) {
		struct blockdev dev;
		struct stat st;
		if ((rc = blockdev_identify(&dev, files[i])) || stat(files[i], &st) != 0)
			return error_set(rc ? -rc : errno, "%s: cannot stat", files[i]);
		int g = 0;
		while (g < b->n_groups && strcmp(b->groups[g].profile.dev.key, dev.key))
			g++;
		struct bench_group *gr = &b->groups[g];
		if (g == b->n_groups) {
			b->n_groups++;
			gr->profile.dev = dev;
			gr->files = calloc((size_t)n, sizeof *gr->files);
			if (!(gr->skipped = cJSON_CreateArray()) || !gr->files)
				return error_set(ENOMEM, "out of memory");
		}
		uint64_t size = path_bytes(files[i], &st);
		gr->files[gr->n_files++] = files[i];
		gr->bytes += size;
		gr->largest = size > gr->largest ? size : gr->largest;
	}
	return 0;
}

static void skip(struct bench_group *g, uint64_t block, int depth, const char *why)
{
	cJSON *s = cJSON_CreateObject();
	cJSON_AddNumberToObject(s, "block_bytes", (double)block);
	cJSON_AddNumberToObject(s, "depth", depth);
	cJSON_AddStringToObject(s, "reason", why);
	cJSON_AddItemToArray(g->skipped, s);
}

static void print_header(const struct bench *b, const struct bench_group *g)
{
	char sz[32];
	const struct blockdev *d = &g->profile.dev;
	printf("disk %s%s%s%s%s: %d file(s), %s, %s, %.2f s per point\n", d->name[0] ? d->name : d->key,
	       d->model[0] ? " " : "", d->model, d->serial[0] ? " serial " : "", d->serial, g->n_files,
	       plan_bytes_str(sz, g->bytes), b->buffered ? "buffered" : "O_DIRECT", b->seconds);
	printf("%10s %6s %9s %11s %9s %9s\n", "block", "depth", "GB/s", "IOPS", "p50 us", "p99 us");
}

static int measure_group(struct bench *b, struct bench_group *g, int64_t avail)
{
	uint64_t cap = IOBENCH_CMD_INFLIGHT_MAX;
	if (avail > 0 && (uint64_t)avail / 4 < cap)
		cap = (uint64_t)avail / 4;
	if (!b->json)
		print_header(b, g);
	for (int i = 0; i < b->n_blocks; i++) {
		for (int j = 0; j < b->n_depths; j++) {
			uint64_t block = b->blocks[i];
			int depth = b->depths[j];
			char sz[32], cp[32], why[128];
			if (block > g->largest) {
				skip(g, block, depth, "block larger than every file");
				continue;
			}
			if (block * (uint64_t)depth > cap) {
				snprintf(why, sizeof why, "%s of buffers in flight exceeds the cap of %s",
					 plan_bytes_str(sz, block * (uint64_t)depth), plan_bytes_str(cp, cap));
				skip(g, block, depth, why);
				continue;
			}
			struct iobench_params p = { .block_bytes = block, .depth = depth, .seconds = b->seconds,
						    .buffered = b->buffered, .seed = 0x5eed + (uint64_t)(i * 64 + j) };
			struct iobench_result r;
			char err[512];
			int rc = iobench_run(&r, g->files, g->n_files, &p, err, sizeof err);
			if (rc)
				return error_set(-rc, "%s", err);
			struct disk_point pt = { .block_bytes = block, .depth = depth, .buffered = b->buffered,
						 .seconds = r.seconds, .gbps = r.gbps, .iops = r.iops,
						 .lat_p50_us = r.lat_p50_us, .lat_p99_us = r.lat_p99_us };
			profile_now(pt.measured);
			disk_profile_put(&g->profile, &pt);
			if (!b->json) {
				printf("%10s %6d %9.3f %11.1f %9.1f %9.1f\n", plan_bytes_str(sz, block), depth, r.gbps,
				       r.iops, r.lat_p50_us, r.lat_p99_us);
				fflush(stdout);
			}
		}
	}
	/* One line per reason, not per point: a small file skips most of a sweep. */
	const cJSON *s, *t;
	int k = 0;
	cJSON_ArrayForEach(s, g->skipped) {
		const char *why = cJSON_GetObjectItem(s, "reason")->valuestring;
		int n = 0, first = 1, j = 0;
		cJSON_ArrayForEach(t, g->skipped) {
			bool same = !strcmp(cJSON_GetObjectItem(t, "reason")->valuestring, why);
			if (same && j < k)
				first = 0;
			n += same;
			j++;
		}
		if (first && !b->json)
			printf("  skipped %d point(s): %s\n", n, why);
		k++;
	}
	return 0;
}

static cJSON *group_json(const struct bench_group *g)
{
	cJSON *o = cJSON_CreateObject();
	const struct blockdev *d = &g->profile.dev;
	cJSON_AddStringToObject(o, "key", d->key);
	cJSON_AddStringToObject(o, "name", d->name);
	cJSON_AddStringToObject(o, "model", d->model);
	cJSON_AddStringToObject(o, "serial", d->serial);
	cJSON_AddStringToObject(o, "fs_type", d->fs_type);
	cJSON_AddNumberToObject(o, "files", g->n_files);
	cJSON_AddNumberToObject(o, "bytes", (double)g->bytes);
	cJSON *pts = cJSON_AddArrayToObject(o, "points");
	for (int i = 0; i < g->profile.n_points; i++)
		cJSON_AddItemToArray(pts, disk_point_json(&g->profile.points[i]));
	cJSON_AddItemReferenceToObject(o, "skipped", g->skipped);
	return o;
}

static void iobench_usage(FILE *f)
{
	fprintf(f, "usage: colibri iobench PATH [--block-kb N] [--depth N] [--seconds S] [--buffered] [--json] [--no-save]\n"
		   "  Random reads over PATH (a file, a block device, or a container folder: its expert files)\n"
		   "  with io_uring and O_DIRECT (--buffered: through the page cache). Without --block-kb and\n"
		   "  --depth: a sweep of 128 KiB .. 32 MiB (and the container's record size) by depths 1, 4, 16,\n"
		   "  64, 0.5 s per point; one point runs 2 s. Results are saved as the disk's profile (%s).\n",
		"$COLIBRI_CACHE_DIR or ~/.cache/colibri/disks.json");
}

static int parse_args(struct bench *b, int argc, char **argv)
{
	enum { O_BLOCK = 4000, O_DEPTH, O_SECONDS, O_BUFFERED, O_JSON, O_NO_SAVE };
	static const struct option opts[] = {
		{ "block-kb", required_argument, 0, O_BLOCK }, { "depth", required_argument, 0, O_DEPTH },
		{ "seconds", required_argument, 0, O_SECONDS }, { "buffered", no_argument, 0, O_BUFFERED },
		{ "json", no_argument, 0, O_JSON },             { "no-save", no_argument, 0, O_NO_SAVE },
		{ "help", no_argument, 0, 'h' },                { 0, 0, 0, 0 },
	};
	long block_kb = 0, depth = 0;
	int ch;
	char *end;
	optind = 1;
	b->save = true;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case O_BLOCK:
			block_kb = strtol(optarg, &end, 10);
			if (*end || block_kb < 4 || block_kb > (1 << 20) || block_kb % 4)
				return error_set(EINVAL, "--block-kb must be a multiple of 4 in [4, 1048576], not \"%s\"", optarg);
			break;
		case O_DEPTH:
			depth = strtol(optarg, &end, 10);
			if (*end || depth < 1 || depth > IOBENCH_DEPTH_MAX)
				return error_set(EINVAL, "--depth must be in [1, %d], not \"%s\"", IOBENCH_DEPTH_MAX, optarg);
			break;
		case O_SECONDS:
			b->seconds = strtod(optarg, &end);
			if (*end || !(b->seconds > 0 && b->seconds <= 3600))
				return error_set(EINVAL, "--seconds must be in (0, 3600], not \"%s\"", optarg);
			break;
		case O_BUFFERED: b->buffered = true; break;
		case O_JSON: b->json = true; break;
		case O_NO_SAVE: b->save = false; break;
		default:
			iobench_usage(ch == 'h' ? stdout : stderr);
			return ch == 'h' ? 1 : -EINVAL;
		}
	}
	if (optind != argc - 1) {
		iobench_usage(stderr);
		return -EINVAL;
	}
	b->path = argv[optind];
	if (!b->seconds)
		b->seconds = block_kb && depth ? 2.0 : 0.5;
	if (depth) {
		b->depths[b->n_depths++] = (int)depth;
	} else {
		for (size_t i = 0; i < sizeof sweep_depths / sizeof sweep_depths[0]; i++)
			b->depths[b->n_depths++] = sweep_depths[i];
	}
	if (block_kb)
		b->blocks[b->n_blocks++] = (uint64_t)block_kb << 10;
	else
		for (uint64_t s = 128ull << 10; s <= 32ull << 20; s *= 2)
			b->blocks[b->n_blocks++] = s;
	return 0;
}

/* Adds the container's record size to a block sweep, in order. */
static void add_record_block(struct bench *b)
{
	if (!b->record_bytes || b->n_blocks < 2 || b->n_blocks >= IOBENCH_BLOCKS_MAX)
		return;
	int i = 0;
	while (i < b->n_blocks && b->blocks[i] < b->record_bytes)
		i++;
	if (i < b->n_blocks && b->blocks[i] == b->record_bytes)
		return;
	memmove(&b->blocks[i + 1], &b->blocks[i], (size_t)(b->n_blocks - i) * sizeof b->blocks[0]);
	b->blocks[i] = b->record_bytes;
	b->n_blocks++;
}

int cmd_iobench(int argc, char **argv)
{
	struct bench b;
	memset(&b, 0, sizeof b);
	int rc = parse_args(&b, argc, argv);
	if (rc)
		return rc > 0 ? 0 : error_message()[0] ? cmd_fail("bad option") : 2;
	if ((rc = group_files(&b)))
		goto out;
	add_record_block(&b);
	int64_t avail = topology_available_memory_bytes(), total = topology_total_memory_bytes();
	for (int g = 0; g < b.n_groups && !rc; g++) {
		char a[32], t[32];
		if (b.buffered && total > 0 && b.groups[g].bytes < (uint64_t)total)
			fprintf(stderr, "colibri: warning: the files (%s) are smaller than RAM (%s): with --buffered, pages "
					"cached by earlier reads inflate the results\n",
				plan_bytes_str(a, b.groups[g].bytes), plan_bytes_str(t, (uint64_t)total));
		if (!b.json && g)
			printf("\n");
		rc = measure_group(&b, &b.groups[g], avail);
		if (!rc && b.save && b.groups[g].profile.n_points && (rc = profile_disk_save(&b.groups[g].profile))) {
			char path[PATH_MAX] = "the profile file";
			profile_path(path, sizeof path);
			rc = error_set(-rc, "cannot save the disk profile to %s: %s", path, strerror(-rc));
		}
	}
	if (!rc) {
		char path[PATH_MAX] = "";
		profile_path(path, sizeof path);
		if (b.json) {
			cJSON *j = cJSON_CreateObject();
			cJSON_AddStringToObject(j, "path", b.path);
			cJSON_AddBoolToObject(j, "buffered", b.buffered);
			cJSON_AddNumberToObject(j, "seconds_per_point", b.seconds);
			cJSON_AddNumberToObject(j, "record_bytes", (double)b.record_bytes);
			if (b.save)
				cJSON_AddStringToObject(j, "profile", path);
			else
				cJSON_AddNullToObject(j, "profile");
			cJSON *devs = cJSON_AddArrayToObject(j, "devices");
			for (int g = 0; g < b.n_groups; g++)
				cJSON_AddItemToArray(devs, group_json(&b.groups[g]));
			char *text = cJSON_Print(j);
			printf("%s\n", text ? text : "{}");
			cJSON_free(text);
			cJSON_Delete(j);
		} else if (b.save) {
			printf("saved to %s\n", path);
		}
	}
out:
	for (int g = 0; g < b.n_groups; g++) {
		cJSON_Delete(b.groups[g].skipped);
		free(b.groups[g].files);
	}
	free(b.groups);
	plan_container_free(&b.pc);
	return rc ? cmd_fail("iobench failed") : 0;
}
