/*
 * topology — cores, caches and NUMA nodes through hwloc and libnuma;
 * total and available memory from /proc/meminfo and the cgroup memory
 * controller.
 *
 * The memory figure is a ceiling for the RAM plan, so where sources
 * disagree the smallest wins: a container's cgroup limit is usually far
 * below the host's MemAvailable. Every ancestor of our cgroup is checked
 * (cgroup v2 memory.max, v1 memory.limit_in_bytes and
 * hierarchical_memory_limit), because a limit set on a parent applies to
 * us too. The hierarchies are found where /proc/self/mountinfo says they
 * are mounted (cgroup2 is at /sys/fs/cgroup on a pure v2 system, at
 * /sys/fs/cgroup/unified on a hybrid one, whose memory controller is then
 * the v1 one), and our group in each from /proc/self/cgroup.
 */
#include "planner/topology.h"
#include "planner/topology_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <hwloc.h>
#include <inttypes.h>
#include <numa.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int topology_physical_cores(void)
{
	hwloc_topology_t topo;
	int cores = 0;
	if (hwloc_topology_init(&topo) == 0) {
		if (hwloc_topology_load(topo) == 0)
			cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
		hwloc_topology_destroy(topo);
	}
	if (cores <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		cores = n > 0 ? (int)n : 1;
	}
	return cores;
}

/* A cgroup file holding one number: the number, or -1 when the file is
 * absent, unreadable, "max" (no limit) or anything but one non-negative
 * decimal integer and a newline. The kernel writes nothing else, so other
 * text means the file is not what we think it is, and guessing at a limit
 * from it would be worse than ignoring it. */
static int64_t topology_read_limit(const char *path)
{
	char buf[64];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	if (buf[0] < '0' || buf[0] > '9')
		return -1;
	char *end;
	errno = 0;
	long long v = strtoll(buf, &end, 10);
	if (errno || (*end && strcmp(end, "\n") != 0))
		return -1;
	return v;
}

/* Lowers *avail to limit - usage and *total to limit when the limit is a
 * real one. cgroup v1 reports "no limit" as a huge page-rounded number,
 * which the comparisons discard naturally. */
static void topology_apply_limit(int64_t *avail, int64_t *total, int64_t limit, int64_t usage)
{
	if (limit < 0)
		return;
	if (limit < *total)
		*total = limit;
	int64_t left = limit;
	if (usage >= limit)
		left = 0;
	else if (usage > 0)
		left = limit - usage;
	if (left < *avail)
		*avail = left;
}

/* "hierarchical_memory_limit N" of a cgroup v1 memory.stat: the smallest
 * limit of the cgroup and its ancestors, including those above the root
 * of our view (a container that sees its own cgroup as the root); -1 if
 * absent. */
static int64_t topology_v1_hierarchical_limit(const char *stat_path)
{
	FILE *f = fopen(stat_path, "re");
	char line[256];
	int64_t v = -1;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "hierarchical_memory_limit %" SCNd64, &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

/* Where one cgroup hierarchy is mounted: the folder (point) and the
 * hierarchy's group that folder shows (root, "/" unless a container was
 * given a subtree). */
struct cgroup_mount {
	char point[4096];
	char root[4096];
};

/* Copies the space-delimited field at s into out (n bytes), undoing
 * mountinfo's octal escapes (\040 space, \011 tab, \012 newline, \134
 * backslash). Returns the character after the field. */
static const char *mountinfo_field(const char *s, char *out, size_t n)
{
	size_t k = 0;
	while (*s == ' ')
		s++;
	while (*s && *s != ' ' && *s != '\n') {
		char c = *s++;
		if (c == '\\' && s[0] >= '0' && s[0] <= '3' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' &&
		    s[2] <= '7') {
			c = (char)((s[0] - '0') * 64 + (s[1] - '0') * 8 + (s[2] - '0'));
			s += 3;
		}
		if (k + 1 < n)
			out[k++] = c;
	}
	out[k] = 0;
	return s;
}

/* True when the comma-separated list holds word. */
static bool topology_list_has(const char *list, const char *word)
{
	size_t len = strlen(word);
	for (const char *p = list; *p;) {
		size_t tok = strcspn(p, ",");
		if (tok == len && !strncmp(p, word, len))
			return true;
		p += tok + (p[tok] == ',');
	}
	return false;
}

/* True when the hierarchy group root contains the group cg. */
static bool topology_cgroup_under(const char *cg, const char *root)
{
	size_t len = strlen(root);
	if (!strcmp(root, "/"))
		return true;
	return !strncmp(cg, root, len) && (cg[len] == 0 || cg[len] == '/');
}

/* True when a component of path is "..": a cgroup namespace shows a group
 * outside it that way, and the folder it names is not ours. */
static bool topology_path_climbs(const char *path)
{
	for (const char *p = strstr(path, ".."); p; p = strstr(p + 2, ".."))
		if ((p == path || p[-1] == '/') && (p[2] == 0 || p[2] == '/'))
			return true;
	return false;
}

/* Finds in mountinfo the cgroup2 mount (v2) or the cgroup v1 mount with
 * the memory controller, preferring one whose root contains cg: the same
 * hierarchy may be mounted more than once, a subtree at a time. False
 * when there is none. */
static bool topology_find_mount(const char *mountinfo, bool v2, const char *cg, struct cgroup_mount *out)
{
	bool found = false;
	for (const char *line = mountinfo; line && *line;) {
		const char *eol = strchr(line, '\n');
		const char *next = eol ? eol + 1 : line + strlen(line);
		char field[4096], root[4096], point[4096], fstype[64], super[1024];
		const char *s = line;
		line = next;
		/* id parent major:minor root point options [optional...] - fstype source super */
		for (int i = 0; i < 3; i++)
			s = mountinfo_field(s, field, sizeof field);
		s = mountinfo_field(s, root, sizeof root);
		s = mountinfo_field(s, point, sizeof point);
		do
			s = mountinfo_field(s, field, sizeof field);
		while (field[0] && strcmp(field, "-") != 0);
		if (strcmp(field, "-") != 0 || !point[0] || !root[0])
			continue; /* not a mountinfo line */
		s = mountinfo_field(s, fstype, sizeof fstype);
		s = mountinfo_field(s, field, sizeof field);
		mountinfo_field(s, super, sizeof super);
		bool match = v2 ? !strcmp(fstype, "cgroup2")
				: !strcmp(fstype, "cgroup") && topology_list_has(super, "memory");
		if (!match || (found && !topology_cgroup_under(cg, root)))
			continue;
		snprintf(out->point, sizeof out->point, "%s", point);
		snprintf(out->root, sizeof out->root, "%s", root);
		if (topology_cgroup_under(cg, root))
			return true;
		found = true;
	}
	return found;
}

/* Applies the limits of our group cg and each ancestor up to the root of
 * the mount m: a limit set on a parent binds its children too, and the
 * headroom under it is the parent's limit minus the parent's usage (a
 * child with no limit under a 700 MiB parent has 700 MiB minus what its
 * siblings use); the kernel's effective limit is the smallest on the path.
 * A group outside what the mount shows (a subtree bind-mounted into a
 * container, or "/.." paths of a cgroup namespace) gets the limits of the
 * mount's root only: that is the group the container was given. A group
 * that no longer exists (v2 adds " (deleted)") has no folder, and the walk
 * goes on with its parent. */
static void topology_cgroup_walk(const struct cgroup_mount *m, const char *cg, bool v2, int64_t *avail,
				 int64_t *total)
{
	char dir[8192], path[8300];
	const char *rel = "";
	if (topology_cgroup_under(cg, m->root) && !topology_path_climbs(cg))
		rel = strcmp(m->root, "/") ? cg + strlen(m->root) : cg;
	size_t base = strlen(m->point);
	while (base > 0 && m->point[base - 1] == '/')
		base--; /* a mount at "/" is the empty prefix */
	snprintf(dir, sizeof dir, "%.*s%s", (int)base, m->point, strcmp(rel, "/") ? rel : "");
	for (;;) {
		int64_t lim, use;
		if (v2) {
			snprintf(path, sizeof path, "%s/memory.max", dir);
			lim = topology_read_limit(path);
			snprintf(path, sizeof path, "%s/memory.current", dir);
			use = topology_read_limit(path);
		} else {
			snprintf(path, sizeof path, "%s/memory.stat", dir);
			topology_apply_limit(avail, total, topology_v1_hierarchical_limit(path), -1);
			snprintf(path, sizeof path, "%s/memory.limit_in_bytes", dir);
			lim = topology_read_limit(path);
			snprintf(path, sizeof path, "%s/memory.usage_in_bytes", dir);
			use = topology_read_limit(path);
		}
		topology_apply_limit(avail, total, lim, use);
		char *slash = strlen(dir) > base ? strrchr(dir + base, '/') : NULL;
		if (!slash)
			break;
		*slash = 0;
	}
}

void topology_cgroup_limits_from(const struct topology_cgroup_source *src, int64_t *avail, int64_t *total)
{
	bool v1_done = false, v2_done = false;
	for (const char *line = src->proc_cgroup; line && *line;) {
		/* hierarchy-id:controllers:path; the path may hold ':' and spaces. */
		const char *eol = strchr(line, '\n');
		size_t len = eol ? (size_t)(eol - line) : strlen(line);
		char buf[4096], ctrl_list[1024];
		snprintf(buf, sizeof buf, "%.*s", (int)len, line);
		line += len + (eol != NULL);
		char *ctrl = strchr(buf, ':');
		char *cg = ctrl ? strchr(ctrl + 1, ':') : NULL;
		if (!cg || cg[1] != '/')
			continue;
		*cg++ = 0;
		*ctrl++ = 0;
		snprintf(ctrl_list, sizeof ctrl_list, "%s", ctrl);
		bool v2 = !strcmp(buf, "0") && !ctrl_list[0];
		if (v2 ? v2_done : (v1_done || !topology_list_has(ctrl_list, "memory")))
			continue;
		struct cgroup_mount m = { .root = "/" };
		if (src->mountinfo) {
			if (!topology_find_mount(src->mountinfo, v2, cg, &m))
				continue; /* not mounted here: nothing to read */
		} else {
			snprintf(m.point, sizeof m.point, "%s%s", src->default_root, v2 ? "" : "/memory");
		}
		topology_cgroup_walk(&m, cg, v2, avail, total);
		if (v2)
			v2_done = true;
		else
			v1_done = true;
	}
}

/* The whole text of a /proc file (whose size stat cannot tell), or NULL.
 * Bounded at 16 MiB: mountinfo of a host with thousands of mounts is a
 * few MiB. The caller frees. */
static char *topology_slurp(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t cap = 16384, len = 0;
	char *buf = fd >= 0 ? malloc(cap) : NULL;
	while (buf) {
		if (len + 1 == cap) {
			char *more = cap < (16u << 20) ? realloc(buf, cap * 2) : NULL;
			if (!more) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = more;
			cap *= 2;
		}
		ssize_t n = read(fd, buf + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			buf = NULL;
		} else if (n == 0) {
			buf[len] = 0;
			break;
		}
		len += n > 0 ? (size_t)n : 0;
	}
	if (fd >= 0)
		close(fd);
	return buf;
}

static void topology_cgroup_limits(int64_t *avail, int64_t *total)
{
	char *cgroup = topology_slurp("/proc/self/cgroup");
	char *mountinfo = topology_slurp("/proc/self/mountinfo");
	struct topology_cgroup_source src = {
		.proc_cgroup = cgroup, .mountinfo = mountinfo, .default_root = "/sys/fs/cgroup",
	};
	if (cgroup)
		topology_cgroup_limits_from(&src, avail, total);
	free(cgroup);
	free(mountinfo);
}

/* A "Key: N kB" line of /proc/meminfo in bytes; -errno if unreadable. */
static int64_t topology_meminfo(const char *key)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	size_t klen = strlen(key);
	int64_t v = -EIO;
	if (!f)
		return -errno;
	while (fgets(line, sizeof line, f)) {
		int64_t kb;
		if (!strncmp(line, key, klen) && line[klen] == ':' &&
		    sscanf(line + klen + 1, " %" SCNd64, &kb) == 1) {
			v = kb * 1024;
			break;
		}
	}
	fclose(f);
	return v;
}

int64_t topology_available_memory_bytes(void)
{
	int64_t avail = topology_meminfo("MemAvailable");
	int64_t total = INT64_MAX;
	if (avail < 0)
		return avail;
	topology_cgroup_limits(&avail, &total);
	return avail;
}

int64_t topology_total_memory_bytes(void)
{
	int64_t total = topology_meminfo("MemTotal");
	int64_t avail = INT64_MAX;
	if (total < 0)
		return total;
	topology_cgroup_limits(&avail, &total);
	return total;
}

/* Size of the first cache object of a level, or 0. */
static uint64_t topology_cache_bytes(hwloc_topology_t topo, hwloc_obj_type_t type, int *count)
{
	int n = hwloc_get_nbobjs_by_type(topo, type);
	hwloc_obj_t o = n > 0 ? hwloc_get_obj_by_type(topo, type, 0) : NULL;
	if (count)
		*count = n > 0 ? n : 0;
	return o && o->attr ? (uint64_t)o->attr->cache.size : 0;
}

static void topology_from_hwloc(struct topology *t)
{
	hwloc_topology_t topo;
	if (hwloc_topology_init(&topo) != 0)
		return;
	if (hwloc_topology_load(topo) != 0) {
		hwloc_topology_destroy(topo);
		return;
	}
	int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
	int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
	if (cores > 0)
		t->physical_cores = cores;
	if (pus > 0)
		t->logical_cpus = pus;
	int nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
	if (nodes > TOPOLOGY_NODES_MAX)
		nodes = TOPOLOGY_NODES_MAX;
	if (nodes > 0)
		t->numa_nodes = nodes;
	for (int i = 0; i < nodes; i++) {
		hwloc_obj_t n = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
		t->node_memory_bytes[i] = n->attr ? (int64_t)n->attr->numanode.local_memory : 0;
		t->node_cores[i] = hwloc_get_nbobjs_inside_cpuset_by_type(topo, n->cpuset, HWLOC_OBJ_CORE);
	}
	if (nodes <= 1)
		t->node_cores[0] = t->physical_cores;
	t->l1d_bytes = topology_cache_bytes(topo, HWLOC_OBJ_L1CACHE, NULL);
	t->l2_bytes = topology_cache_bytes(topo, HWLOC_OBJ_L2CACHE, NULL);
	t->l3_bytes = topology_cache_bytes(topo, HWLOC_OBJ_L3CACHE, &t->l3_instances);
	hwloc_obj_t pkg = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0);
	const char *model = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
	if (model)
		snprintf(t->cpu_model, sizeof t->cpu_model, "%s", model);
	hwloc_topology_destroy(topo);
}

void topology_discover(struct topology *t)
{
	memset(t, 0, sizeof *t);
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	t->physical_cores = t->logical_cpus = online > 0 ? (int)online : 1;
	t->numa_nodes = 1;
	t->local_node = -1;
	topology_from_hwloc(t);
	if (numa_available() >= 0) {
		int cpu = sched_getcpu();
		t->local_node = cpu >= 0 ? numa_node_of_cpu(cpu) : -1;
	}
	t->total_memory_bytes = topology_total_memory_bytes();
	t->available_memory_bytes = topology_available_memory_bytes();
	if (t->numa_nodes == 1 && t->node_memory_bytes[0] <= 0)
		t->node_memory_bytes[0] = t->total_memory_bytes > 0 ? t->total_memory_bytes : 0;
}
