/*
 * blockdev — see blockdev.h. Everything comes from sysfs and
 * /proc/self/mountinfo; nothing needs privileges. Resolution follows at
 * most BLOCKDEV_DEPTH_MAX links (loop on loop on dm ...), so a cycle in a
 * strange setup ends in an unresolved key rather than a hang.
 */
#include "planner/blockdev.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define BLOCKDEV_DEPTH_MAX 8

/* First line of a sysfs file, trimmed; 0 if non-empty, -1 otherwise. */
static int read_trimmed(const char *path, char *buf, size_t n)
{
	FILE *f = fopen(path, "r");
	buf[0] = 0;
	if (!f)
		return -1;
	if (!fgets(buf, (int)n, f))
		buf[0] = 0;
	fclose(f);
	size_t len = strlen(buf);
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' ' || buf[len - 1] == '\t'))
		buf[--len] = 0;
	size_t lead = strspn(buf, " \t");
	memmove(buf, buf + lead, len - lead + 1);
	return buf[0] ? 0 : -1;
}

static int read_devno(const char *path, unsigned *maj, unsigned *min)
{
	char buf[64];
	if (read_trimmed(path, buf, sizeof buf) || sscanf(buf, "%u:%u", maj, min) != 2)
		return -1;
	return 0;
}

static void fill_identity(struct blockdev *out, const char *name, unsigned maj, unsigned min)
{
	char path[PATH_MAX];
	snprintf(out->name, sizeof out->name, "%s", name);
	out->major = maj;
	out->minor = min;
	out->resolved = true;
	snprintf(path, sizeof path, "/sys/block/%s/device/model", name);
	read_trimmed(path, out->model, sizeof out->model);
	static const char *serials[] = { "device/serial", "serial", "wwid", "device/wwid" };
	for (size_t i = 0; i < sizeof serials / sizeof serials[0] && !out->serial[0]; i++) {
		snprintf(path, sizeof path, "/sys/block/%s/%s", name, serials[i]);
		read_trimmed(path, out->serial, sizeof out->serial);
	}
	if (out->serial[0] && out->model[0])
		snprintf(out->key, sizeof out->key, "disk:%s/%s", out->model, out->serial);
	else if (out->serial[0])
		snprintf(out->key, sizeof out->key, "disk:%s", out->serial);
	else
		snprintf(out->key, sizeof out->key, "dev:%s", name);
}

static int resolve_dev(struct blockdev *out, unsigned long long dev, int depth);

/* The single device under a stacked one (dm, md), or -1 if none or several. */
static int single_slave(const char *name, unsigned *maj, unsigned *min)
{
	char path[PATH_MAX], found[256] = "";
	snprintf(path, sizeof path, "/sys/block/%s/slaves", name);
	DIR *d = opendir(path);
	int n = 0;
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		if (n++ == 0)
			snprintf(found, sizeof found, "%s", e->d_name);
	}
	closedir(d);
	if (n != 1)
		return -1;
	snprintf(path, sizeof path, "/sys/block/%s/slaves/%s/dev", name, found);
	return read_devno(path, maj, min);
}

/* Resolves a block device number to its whole disk. -ENOENT if the number
 * is not a block device. */
static int resolve_block(struct blockdev *out, unsigned maj, unsigned min, int depth)
{
	char link[64], real[PATH_MAX], path[PATH_MAX + 32];
	snprintf(link, sizeof link, "/sys/dev/block/%u:%u", maj, min);
	if (depth > BLOCKDEV_DEPTH_MAX || !realpath(link, real))
		return -ENOENT;
	snprintf(path, sizeof path, "%s/partition", real);
	if (access(path, F_OK) == 0) {
		char *slash = strrchr(real, '/');
		if (slash)
			*slash = 0;
		snprintf(path, sizeof path, "%s/dev", real);
		if (read_devno(path, &maj, &min))
			return -ENOENT;
	}
	const char *name = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;
	if (!strncmp(name, "loop", 4)) {
		char backing[PATH_MAX];
		struct stat st;
		snprintf(path, sizeof path, "/sys/block/%s/loop/backing_file", name);
		if (read_trimmed(path, backing, sizeof backing) == 0 && stat(backing, &st) == 0 &&
		    resolve_dev(out, (unsigned long long)st.st_dev, depth + 1) == 0 && out->resolved)
			return 0;
	}
	unsigned smaj, smin;
	if (single_slave(name, &smaj, &smin) == 0 && resolve_block(out, smaj, smin, depth + 1) == 0)
		return 0;
	fill_identity(out, name, maj, min);
	return 0;
}

/* The mountinfo line of st_dev dev: file system type, source and
 * overlayfs upperdir. -ENOENT if not mounted (as seen from here). */
static int mount_of(unsigned long long dev, char *type, size_t type_n, char *source, size_t source_n,
		    char *upper, size_t upper_n)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[8192];
	int rc = -ENOENT;
	if (!f)
		return -errno;
	while (rc && fgets(line, sizeof line, f)) {
		unsigned maj, min;
		if (sscanf(line, "%*d %*d %u:%u", &maj, &min) != 2 || makedev(maj, min) != dev)
			continue;
		char *sep = strstr(line, " - ");
		char t[64], src[4096], opts[4096] = "";
		if (!sep || sscanf(sep + 3, "%63s %4095s %4095s", t, src, opts) < 2)
			continue;
		snprintf(type, type_n, "%s", t);
		snprintf(source, source_n, "%s", src);
		char *u = strstr(opts, "upperdir=");
		upper[0] = 0;
		if (u) {
			u += strlen("upperdir=");
			size_t len = strcspn(u, ",");
			snprintf(upper, upper_n, "%.*s", (int)len, u);
		}
		rc = 0;
	}
	fclose(f);
	return rc;
}

static int resolve_dev(struct blockdev *out, unsigned long long dev, int depth)
{
	char type[64] = "", source[4096] = "", upper[4096] = "";
	if (depth > BLOCKDEV_DEPTH_MAX)
		return -ELOOP;
	mount_of(dev, type, sizeof type, source, sizeof source, upper, sizeof upper);
	if (!out->fs_type[0])
		snprintf(out->fs_type, sizeof out->fs_type, "%s", type);
	if (resolve_block(out, major(dev), minor(dev), depth) == 0)
		return 0;
	struct stat st;
	if (source[0] == '/' && stat(source, &st) == 0 && S_ISBLK(st.st_mode) &&
	    resolve_block(out, major(st.st_rdev), minor(st.st_rdev), depth + 1) == 0)
		return 0;
	if (upper[0] && stat(upper, &st) == 0 && st.st_dev != dev &&
	    resolve_dev(out, (unsigned long long)st.st_dev, depth + 1) == 0 && out->resolved)
		return 0;
	out->major = major(dev);
	out->minor = minor(dev);
	out->resolved = false;
	snprintf(out->key, sizeof out->key, "fs:%s:%u:%u", type[0] ? type : "unknown", major(dev), minor(dev));
	return 0;
}

int blockdev_identify(struct blockdev *out, const char *path)
{
	struct stat st;
	memset(out, 0, sizeof *out);
	if (stat(path, &st) != 0)
		return -errno;
	if (S_ISBLK(st.st_mode) && resolve_block(out, major(st.st_rdev), minor(st.st_rdev), 0) == 0)
		return 0;
	return resolve_dev(out, (unsigned long long)st.st_dev, 0);
}
