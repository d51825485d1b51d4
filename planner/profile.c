/*
 * profile — see profile.h. The file is small (a few kilobytes per disk), so
 * every update rewrites it whole.
 */
#include "planner/profile.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/files.h"

#define PROFILE_VERSION 1

int profile_path(char *buf, size_t n)
{
	const char *d = getenv("COLIBRI_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
	int len;
	if (d && *d)
		len = snprintf(buf, n, "%s/disks.json", d);
	else if (x && *x)
		len = snprintf(buf, n, "%s/colibri/disks.json", x);
	else if (h && *h)
		len = snprintf(buf, n, "%s/.cache/colibri/disks.json", h);
	else
		return -ENOENT;
	return len < 0 || (size_t)len >= n ? -ENAMETOOLONG : 0;
}

void profile_now(char buf[24])
{
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, 24, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Parses the file at path; an absent file gives an empty root. -EINVAL
 * for a file that is not a profile file. */
static int root_read(const char *path, cJSON **out)
{
	*out = NULL;
	FILE *f = fopen(path, "rb");
	if (!f && errno != ENOENT)
		return -errno;
	cJSON *root = NULL;
	if (f) {
		char *buf = NULL;
		size_t cap = 0, len = 0, r;
		do {
			if (len + 4096 + 1 > cap) {
				char *nb = realloc(buf, cap = cap * 2 + 8192);
				if (!nb) {
					free(buf);
					fclose(f);
					return -ENOMEM;
				}
				buf = nb;
			}
			r = fread(buf + len, 1, cap - len - 1, f);
			len += r;
		} while (r > 0);
		fclose(f);
		buf[len] = 0;
		root = cJSON_Parse(buf);
		free(buf);
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "version");
		if (!cJSON_IsObject(root) || !cJSON_IsNumber(v) || v->valuedouble != PROFILE_VERSION) {
			cJSON_Delete(root);
			return -EINVAL;
		}
	} else {
		root = cJSON_CreateObject();
		if (!root || !cJSON_AddNumberToObject(root, "version", PROFILE_VERSION)) {
			cJSON_Delete(root);
			return -ENOMEM;
		}
	}
	*out = root;
	return 0;
}

/* The object member name of parent, created when absent. */
static cJSON *member_object(cJSON *parent, const char *name)
{
	cJSON *o = cJSON_GetObjectItemCaseSensitive(parent, name);
	if (cJSON_IsObject(o))
		return o;
	cJSON_DeleteItemFromObjectCaseSensitive(parent, name);
	return cJSON_AddObjectToObject(parent, name);
}

static int root_write(const char *path, const cJSON *root)
{
	char tmp[PATH_MAX + 32];
	char *text = cJSON_Print(root);
	int rc = 0, fd = -1;
	if (!text)
		return -ENOMEM;
	snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
	size_t len = strlen(text), done = 0;
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
		rc = -errno;
		goto out;
	}
	while (done < len) {
		ssize_t w = write(fd, text + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			rc = w < 0 ? -errno : -EIO;
			goto out;
		}
		done += (size_t)w;
	}
	if (write(fd, "\n", 1) != 1 || fsync(fd) != 0) {
		rc = -errno;
		goto out;
	}
	close(fd);
	fd = -1;
	if (rename(tmp, path) != 0) {
		rc = -errno;
		goto out;
	}
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash) {
		*slash = 0;
		int dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			fsync(dfd);
			close(dfd);
		}
	}
out:
	if (fd >= 0)
		close(fd);
	if (rc)
		unlink(tmp);
	cJSON_free(text);
	return rc;
}

/* Opens and write-locks path.lock, creating the folder; returns the fd. */
static int lock_acquire(const char *path)
{
	char lock[PATH_MAX + 8];
	int rc = dir_make_parent(path);
	if (rc)
		return rc;
	snprintf(lock, sizeof lock, "%s.lock", path);
	int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	while (flock(fd, LOCK_EX) != 0) {
		if (errno != EINTR) {
			rc = -errno;
			close(fd);
			return rc;
		}
	}
	return fd;
}

/* Runs update(root, ctx) on the saved file under the lock and writes it. A
 * file that is not a valid profile file is replaced: it is only a cache. */
static int profile_update(int (*update)(cJSON *root, const void *ctx), const void *ctx)
{
	char path[PATH_MAX];
	cJSON *root = NULL;
	int rc = profile_path(path, sizeof path);
	if (rc)
		return rc;
	int lock = lock_acquire(path);
	if (lock < 0)
		return lock;
	rc = root_read(path, &root);
	if (rc == -EINVAL) {
		char bad[PATH_MAX + 8];
		snprintf(bad, sizeof bad, "%s.bad", path);
		rename(path, bad);
		rc = root_read(path, &root);
	}
	if (!rc)
		rc = update(root, ctx);
	if (!rc)
		rc = root_write(path, root);
	cJSON_Delete(root);
	close(lock);
	return rc;
}

static double num(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : 0;
}

static void str(const cJSON *o, const char *name, char *buf, size_t n)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	snprintf(buf, n, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

int disk_profile_put(struct disk_profile *p, const struct disk_point *pt)
{
	for (int i = 0; i < p->n_points; i++) {
		struct disk_point *q = &p->points[i];
		if (q->block_bytes == pt->block_bytes && q->depth == pt->depth && q->buffered == pt->buffered) {
			*q = *pt;
			return 0;
		}
	}
	if (p->n_points >= PROFILE_POINTS_MAX)
		return -ENOSPC;
	p->points[p->n_points++] = *pt;
	return 0;
}

static void disk_from_json(struct disk_profile *out, const cJSON *d, const char *key)
{
	memset(out, 0, sizeof *out);
	snprintf(out->dev.key, sizeof out->dev.key, "%s", key);
	str(d, "name", out->dev.name, sizeof out->dev.name);
	str(d, "model", out->dev.model, sizeof out->dev.model);
	str(d, "serial", out->dev.serial, sizeof out->dev.serial);
	out->dev.resolved = out->dev.name[0] != 0;
	const cJSON *pts = cJSON_GetObjectItemCaseSensitive(d, "points"), *e;
	cJSON_ArrayForEach(e, pts) {
		struct disk_point pt = {
			.block_bytes = (uint64_t)num(e, "block_bytes"),
			.depth = (int)num(e, "depth"),
			.buffered = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "buffered")),
			.seconds = num(e, "seconds"),
			.gbps = num(e, "gbps"),
			.iops = num(e, "iops"),
			.lat_p50_us = num(e, "p50_us"),
			.lat_p99_us = num(e, "p99_us"),
		};
		str(e, "measured", pt.measured, sizeof pt.measured);
		if (pt.block_bytes && pt.depth > 0 && pt.gbps > 0)
			disk_profile_put(out, &pt);
	}
}

int profile_disk_load(struct disk_profile *out, const char *key)
{
	char path[PATH_MAX];
	cJSON *root = NULL;
	memset(out, 0, sizeof *out);
	int rc = profile_path(path, sizeof path);
	if (rc || (rc = root_read(path, &root)))
		return rc;
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "disks"), key);
	if (cJSON_IsObject(d))
		disk_from_json(out, d, key);
	else
		rc = -ENOENT;
	cJSON_Delete(root);
	return rc ? rc : out->n_points ? 0 : -ENOENT;
}

cJSON *disk_point_json(const struct disk_point *pt)
{
	cJSON *e = cJSON_CreateObject();
	if (!e)
		return NULL;
	cJSON_AddNumberToObject(e, "block_bytes", (double)pt->block_bytes);
	cJSON_AddNumberToObject(e, "depth", pt->depth);
	cJSON_AddBoolToObject(e, "buffered", pt->buffered);
	cJSON_AddNumberToObject(e, "seconds", pt->seconds);
	cJSON_AddNumberToObject(e, "gbps", pt->gbps);
	cJSON_AddNumberToObject(e, "iops", pt->iops);
	cJSON_AddNumberToObject(e, "p50_us", pt->lat_p50_us);
	cJSON_AddNumberToObject(e, "p99_us", pt->lat_p99_us);
	cJSON_AddStringToObject(e, "measured", pt->measured);
	return e;
}

static int disk_update(cJSON *root, const void *ctx)
{
	const struct disk_profile *p = ctx;
	cJSON *disks = member_object(root, "disks");
	if (!disks)
		return -ENOMEM;
	struct disk_profile *merged = malloc(sizeof *merged);
	if (!merged)
		return -ENOMEM;
	const cJSON *old = cJSON_GetObjectItemCaseSensitive(disks, p->dev.key);
	disk_from_json(merged, cJSON_IsObject(old) ? old : NULL, p->dev.key);
	merged->dev = p->dev;
	int rc = 0;
	for (int i = 0; i < p->n_points && !rc; i++)
		rc = disk_profile_put(merged, &p->points[i]);
	cJSON *d = cJSON_CreateObject(), *pts = NULL;
	if (!rc && d) {
		cJSON_AddStringToObject(d, "name", merged->dev.name);
		cJSON_AddStringToObject(d, "model", merged->dev.model);
		cJSON_AddStringToObject(d, "serial", merged->dev.serial);
		pts = cJSON_AddArrayToObject(d, "points");
	}
	for (int i = 0; !rc && pts && i < merged->n_points; i++) {
		cJSON *e = disk_point_json(&merged->points[i]);
		if (!e || !cJSON_AddItemToArray(pts, e)) {
			cJSON_Delete(e);
			rc = -ENOMEM;
		}
	}
	free(merged);
	if (!rc && !pts)
		rc = -ENOMEM;
	if (rc) {
		cJSON_Delete(d);
		return rc;
	}
	cJSON_DeleteItemFromObjectCaseSensitive(disks, p->dev.key);
	cJSON_AddItemToObject(disks, p->dev.key, d);
	return 0;
}

int profile_disk_save(const struct disk_profile *p)
{
	return profile_update(disk_update, p);
}

/* The first "key: value" line of /proc/cpuinfo with this key. */
static void cpuinfo(const char *key, char *buf, size_t n)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];
	buf[0] = 0;
	while (f && fgets(line, sizeof line, f)) {
		char *colon = strchr(line, ':');
		if (strncmp(line, key, strlen(key)) || !colon)
			continue;
		colon += 1 + strspn(colon + 1, " \t");
		colon[strcspn(colon, "\n")] = 0;
		snprintf(buf, n, "%s", colon);
		break;
	}
	if (f)
		fclose(f);
}

/* The identity of this machine: CPU model, logical CPUs, total memory and
 * /etc/machine-id, so a resized VM is measured again. */
static void profile_machine_key(char *buf, size_t n)
{
	char model[256], id[64] = "";
	long long mem_kb = 0;
	cpuinfo("model name", model, sizeof model);
	FILE *f = fopen("/proc/meminfo", "r");
	if (f) {
		if (fscanf(f, "MemTotal: %lld kB", &mem_kb) != 1)
			mem_kb = 0;
		fclose(f);
	}
	if ((f = fopen("/etc/machine-id", "r"))) {
		if (!fgets(id, sizeof id, f))
			id[0] = 0;
		id[strcspn(id, "\n")] = 0;
		fclose(f);
	}
	snprintf(buf, n, "%s|%ld cpus|%.0f GiB|%s", model[0] ? model : "unknown cpu",
		 sysconf(_SC_NPROCESSORS_ONLN), (double)mem_kb / (1024.0 * 1024.0), id);
}

int profile_machine_get(const char *name, double *value)
{
	char path[PATH_MAX], key[512];
	cJSON *root = NULL;
	int rc = profile_path(path, sizeof path);
	if (rc || (rc = root_read(path, &root)))
		return rc;
	profile_machine_key(key, sizeof key);
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "machines"), key);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, name);
	rc = cJSON_IsNumber(v) && v->valuedouble > 0 ? 0 : -ENOENT;
	if (!rc)
		*value = v->valuedouble;
	cJSON_Delete(root);
	return rc;
}

struct machine_value {
	const char *name;
	double value;
};

static int machine_update(cJSON *root, const void *ctx)
{
	const struct machine_value *mv = ctx;
	char key[512], now[24];
	profile_machine_key(key, sizeof key);
	profile_now(now);
	cJSON *machines = member_object(root, "machines");
	cJSON *m = machines ? member_object(machines, key) : NULL;
	if (!m)
		return -ENOMEM;
	cJSON_DeleteItemFromObjectCaseSensitive(m, mv->name);
	cJSON_DeleteItemFromObjectCaseSensitive(m, "measured");
	if (!cJSON_AddNumberToObject(m, mv->name, mv->value) || !cJSON_AddStringToObject(m, "measured", now))
		return -ENOMEM;
	return 0;
}

int profile_machine_put(const char *name, double value)
{
	struct machine_value mv = { name, value };
	return profile_update(machine_update, &mv);
}

const struct disk_point *disk_profile_nearest(const struct disk_profile *p, uint64_t block_bytes,
					      int depth, bool buffered)
{
	const struct disk_point *best = NULL;
	double best_b = 0, best_d = 0;
	for (int i = 0; p && i < p->n_points; i++) {
		const struct disk_point *q = &p->points[i];
		if (q->buffered != buffered)
			continue;
		double db = fabs(log2((double)q->block_bytes / (double)(block_bytes ? block_bytes : 1)));
		double dd = fabs(log2((double)q->depth / (double)(depth > 0 ? depth : 1)));
		/* Ties go to the deeper point: prefetch adds reads in flight. */
		bool same_b = best && fabs(db - best_b) <= 1e-9, same_d = best && fabs(dd - best_d) <= 1e-9;
		if (!best || db < best_b - 1e-9 || (same_b && dd < best_d - 1e-9) ||
		    (same_b && same_d && q->depth > best->depth)) {
			best = q;
			best_b = db;
			best_d = dd;
		}
	}
	return best;
}
