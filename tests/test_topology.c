/*
 * test_topology — planner/topology.c's cgroup memory walk
 * (topology_cgroup_limits_from, planner/topology_internal.h) over fake
 * cgroupfs trees in a scratch folder, so that every layout runs on every
 * machine whatever its own cgroups are: v2 ancestors with "max" at the leaf,
 * "max" everywhere, hybrid v1 + v2 (as on CI's host), v1 subtree views,
 * namespace and subtree mounts, spaces and colons in mountinfo, deleted
 * groups, unreadable files, garbage in memory.max, and the default mount
 * points without mountinfo. test_planner runs plan in real child groups.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>

#include "planner/topology.h"
#include "planner/topology_internal.h"
#include "tests/test_util.h"

/* The cgroup memory walk (planner/topology_internal.h) over fake cgroupfs
 * trees in a scratch folder, so that every layout is checked on every
 * machine, whatever its own cgroups are. Each expected figure is worked out
 * by hand from the files the test writes, after what the kernel does: the
 * limit that binds a group is the smallest memory.max (v1:
 * memory.limit_in_bytes) on its path to the root, and the headroom under
 * each is that group's limit less that group's own usage. */
static char fake[4096];

#define FAKE_START (INT64_C(1) << 40) /* avail and total before the walk: 1 TiB */

static void fake_setup(void)
{
	tu_mkdtemp(fake, sizeof fake);
}

static void fake_teardown(void)
{
	tu_rmrf(fake);
}

TestSuite(cgroup, .init = fake_setup, .fini = fake_teardown);

/* Makes every missing folder of the path below the scratch folder. */
static void fake_mkdirs(const char *rel)
{
	char path[8192];
	int n = snprintf(path, sizeof path, "%s/%s", fake, rel);
	for (int i = (int)strlen(fake) + 1; i <= n; i++)
		if (path[i] == '/' || path[i] == 0) {
			char c = path[i];
			path[i] = 0;
			cr_assert(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s: %s", path, strerror(errno));
			path[i] = c;
		}
}

/* Writes text into the file rel (below the scratch folder), making its
 * folders. */
static void fake_file(const char *rel, const char *text)
{
	char dir[4096], path[8192];
	snprintf(dir, sizeof dir, "%s", rel);
	char *slash = strrchr(dir, '/');
	if (slash) {
		*slash = 0;
		fake_mkdirs(dir);
	}
	snprintf(path, sizeof path, "%s/%s", fake, rel);
	cr_assert_eq(tu_write(path, text, strlen(text)), 0, "cannot write %s", path);
}

/* Appends to buf the mountinfo line of a cgroup mount at the scratch
 * folder's sub (spaces escaped as the kernel does), showing the
 * hierarchy's group root; a v1 mount's controller is sub's name ("/cpu"). */
static void fake_mount(char *buf, size_t n, const char *sub, const char *root, bool v2)
{
	char point[8192];
	size_t k = 0;
	for (int part = 0; part < 2; part++)
		for (const char *s = part ? sub : fake; *s && k + 5 < sizeof point; s++) {
			if (*s == ' ')
				k += (size_t)snprintf(point + k, 5, "\\040");
			else
				point[k++] = *s;
		}
	point[k] = 0;
	size_t len = strlen(buf);
	snprintf(buf + len, n - len, "41 31 0:38 %s %s rw,nosuid,nodev,noexec,relatime shared:9 - %s cgroup rw,%s\n",
		 root, point, v2 ? "cgroup2" : "cgroup", v2 ? "nsdelegate" : sub + 1);
}

/* Runs the walk; proc_cgroup is /proc/self/cgroup's text, mountinfo NULL
 * for the default mount points below the scratch folder. */
static void fake_limits(const char *proc_cgroup, const char *mountinfo, int64_t *avail, int64_t *total)
{
	*avail = *total = FAKE_START;
	struct topology_cgroup_source src = { .proc_cgroup = proc_cgroup, .mountinfo = mountinfo, .default_root = fake };
	topology_cgroup_limits_from(&src, avail, total);
}

#define MIB64 (INT64_C(1) << 20)

/* a/b/c with "max" at the leaf and numbers above it, and no memory.max at
 * the root (the kernel's root group has none): the smallest limit on the
 * path binds, and the headroom is the tightest limit-less-usage, which need
 * not be at the group with the smallest limit. */
Test(cgroup, v2_smallest_ancestor_limit_binds)
{
	char mi[4096] = "";
	fake_mount(mi, sizeof mi, "/v2", "/", true);
	fake_file("v2/cgroup.controllers", "cpuset cpu io memory pids\n");
	fake_file("v2/a/memory.max", "314572800\n");      /* 300 MiB */
	fake_file("v2/a/memory.current", "104857600\n");  /* 100 MiB */
	fake_file("v2/a/b/memory.max", "524288000\n");    /* 500 MiB */
	fake_file("v2/a/b/memory.current", "52428800\n"); /* 50 MiB */
	fake_file("v2/a/b/c/memory.max", "max\n");
	fake_file("v2/a/b/c/memory.current", "10485760\n");
	int64_t avail, total;
	fake_limits("0::/a/b/c\n", mi, &avail, &total);
	cr_expect_eq(total, 300 * MIB64, "total %" PRId64 ": a's 300 MiB binds c", total);
	cr_expect_eq(avail, 200 * MIB64, "avail %" PRId64 ": 300 MiB less a's 100 MiB in use", avail);

	/* A tighter limit lower down, nearly used up: it binds the headroom. */
	fake_file("v2/a/b/memory.max", "157286400\n");     /* 150 MiB */
	fake_file("v2/a/b/memory.current", "125829120\n"); /* 120 MiB */
	fake_limits("0::/a/b/c\n", mi, &avail, &total);
	cr_expect_eq(total, 150 * MIB64, "total %" PRId64 ": b's 150 MiB", total);
	cr_expect_eq(avail, 30 * MIB64, "avail %" PRId64 ": 150 MiB less b's 120 MiB", avail);

	/* Usage past the limit leaves nothing; the leaf's own limit counts too. */
	fake_file("v2/a/b/c/memory.max", "8388608\n");
	fake_file("v2/a/b/c/memory.current", "9437184\n");
	fake_limits("0::/a/b/c\n", mi, &avail, &total);
	cr_expect_eq(total, 8 * MIB64);
	cr_expect_eq(avail, 0);

	/* The same group seen from the middle: c is not on b's path. */
	fake_limits("0::/a/b\n", mi, &avail, &total);
	cr_expect_eq(total, 150 * MIB64);
	cr_expect_eq(avail, 30 * MIB64);
}

Test(cgroup, v2_max_everywhere_binds_nothing)
{
	char mi[4096] = "";
	fake_mount(mi, sizeof mi, "/v2", "/", true);
	fake_file("v2/a/memory.max", "max\n");
	fake_file("v2/a/memory.current", "104857600\n");
	fake_file("v2/a/b/memory.max", "max\n");
	fake_file("v2/a/b/memory.current", "1048576\n");
	int64_t avail, total;
	fake_limits("0::/a/b\n", mi, &avail, &total);
	cr_expect_eq(total, FAKE_START);
	cr_expect_eq(avail, FAKE_START);
	fake_limits("0::/\n", mi, &avail, &total);
	cr_expect_eq(total, FAKE_START, "the root group has no memory.max");
	cr_expect_eq(avail, FAKE_START);
}

/* A hybrid host like the CI machine: the memory controller is bound to the
 * v1 hierarchy, and cgroup2 is mounted at unified/ without it. The v1
 * limit binds; the top folder of the cgroup tmpfs is not a cgroup2 mount,
 * so a memory.max planted there means nothing. */
Test(cgroup, hybrid_takes_memory_from_v1)
{
	char mi[4096] = "";
	fake_mount(mi, sizeof mi, "/cpu", "/", false);
	fake_mount(mi, sizeof mi, "/memory", "/", false);
	fake_mount(mi, sizeof mi, "/unified", "/", true);
	fake_file("unified/cgroup.controllers", "hugetlb\n");
	fake_file("unified/cgroup.procs", "1\n");
	fake_file("memory.max", "1048576\n");
	fake_file("memory/memory.limit_in_bytes", "9223372036854771712\n"); /* v1's "no limit" */
	fake_file("memory/memory.usage_in_bytes", "4294967296\n");
	fake_file("memory/process_api/memory.limit_in_bytes", "734003200\n"); /* 700 MiB */
	fake_file("memory/process_api/memory.usage_in_bytes", "209715200\n"); /* 200 MiB */
	fake_file("memory/process_api/x/memory.limit_in_bytes", "9223372036854771712\n");
	fake_file("memory/process_api/x/memory.usage_in_bytes", "20971520\n");
	fake_file("memory/process_api/x/memory.stat", "cache 0\nrss 20971520\nhierarchical_memory_limit 734003200\n");
	int64_t avail, total;
	fake_limits("9:name=systemd:/\n8:pids:/\n4:memory:/process_api/x\n1:cpu:/\n0::/\n", mi, &avail, &total);
	cr_expect_eq(total, 700 * MIB64, "total %" PRId64 ": the v1 parent's 700 MiB", total);
	cr_expect_eq(avail, 500 * MIB64, "avail %" PRId64 ": 700 MiB less the parent's 200 MiB", avail);

	/* The same without mountinfo: the usual places, memory/ for v1. */
	fake_limits("4:memory:/process_api/x\n0::/\n", NULL, &avail, &total);
	cr_expect_eq(total, 1 * MIB64, "without mountinfo the top folder is taken for cgroup2");
	char planted[8192];
	snprintf(planted, sizeof planted, "%s/memory.max", fake);
	cr_assert_eq(unlink(planted), 0);
	fake_limits("4:memory:/process_api/x\n0::/\n", NULL, &avail, &total);
	cr_expect_eq(total, 700 * MIB64);
	cr_expect_eq(avail, 500 * MIB64);
}

/* v1 in a container that was given its own subtree: the mount's root is
 * our group's ancestor, limits above it reach us through
 * hierarchical_memory_limit, and a group outside the view gets the view's
 * root, never a same-named folder inside it. */
Test(cgroup, v1_subtree_view)
{
	char mi[4096] = "";
	fake_mount(mi, sizeof mi, "/memory", "/docker/abc", false);
	fake_file("memory/memory.stat", "cache 0\nhierarchical_memory_limit 629145600\n"); /* 600 MiB above */
	fake_file("memory/memory.limit_in_bytes", "9223372036854771712\n");
	fake_file("memory/sub/memory.limit_in_bytes", "9223372036854771712\n");
	fake_file("memory/sub/memory.usage_in_bytes", "1048576\n");
	fake_file("memory/elsewhere/memory.limit_in_bytes", "104857600\n");
	int64_t avail, total;
	fake_limits("4:memory:/docker/abc/sub\n", mi, &avail, &total);
	cr_expect_eq(total, 600 * MIB64, "total %" PRId64 ": the limit above the view", total);
	cr_expect_eq(avail, 600 * MIB64);
	fake_file("memory/sub/memory.limit_in_bytes", "262144000\n"); /* 250 MiB */
	fake_limits("4:memory:/docker/abc/sub\n", mi, &avail, &total);
	cr_expect_eq(total, 250 * MIB64);
	cr_expect_eq(avail, 249 * MIB64);
	fake_limits("4:memory:/elsewhere\n", mi, &avail, &total);
	cr_expect_eq(total, 600 * MIB64, "a group outside the view: the view's root only, not memory/elsewhere");
	fake_limits("4:memory:/docker/abcd\n", mi, &avail, &total);
	cr_expect_eq(total, 600 * MIB64, "/docker/abcd is not below /docker/abc");
}

/* v2 in a cgroup namespace: our group is the mount's root, its memory.max
 * is the container's limit; a "/.." path is outside the namespace and must
 * not be followed out of the mount. Of two cgroup2 mounts, the one showing
 * our group is read. */
Test(cgroup, v2_namespace_and_subtree_mounts)
{
	char mi[4096] = "";
	fake_mount(mi, sizeof mi, "/v2", "/", true);
	fake_file("v2/memory.max", "268435456\n"); /* 256 MiB */
	fake_file("v2/memory.current", "67108864\n");
	fake_file("sibling/memory.max", "1048576\n");
	int64_t avail, total;
	fake_limits("0::/\n", mi, &avail, &total);
	cr_expect_eq(total, 256 * MIB64);
	cr_expect_eq(avail, 192 * MIB64);
	fake_limits("0::/../sibling\n", mi, &avail, &total);
	cr_expect_eq(total, 256 * MIB64, "total %" PRId64 ": /.. never leaves the mount", total);

	char two[4096] = "";
	fake_mount(two, sizeof two, "/other", "/other", true);
	fake_mount(two, sizeof two, "/ours", "/kubepods/pod1", true);
	fake_file("other/memory.max", "1048576\n");
	fake_file("ours/memory.max", "max\n");
	fake_file("ours/ctr/memory.max", "419430400\n"); /* 400 MiB */
	fake_limits("0::/kubepods/pod1/ctr\n", two, &avail, &total);
	cr_expect_eq(total, 400 * MIB64, "total %" PRId64 ": the mount showing /kubepods/pod1", total);
}

/* Group names with spaces and colons, on a mount point with a space
 * (mountinfo writes it \040; /proc/self/cgroup writes names as they are). */
Test(cgroup, v2_spaces_and_colons)
{
	char mi[4096] = "";
	fake_mount(mi, sizeof mi, "/cg root", "/", true);
	fake_file("cg root/my group/memory.max", "419430400\n"); /* 400 MiB */
	fake_file("cg root/my group/leaf:one/memory.max", "max\n");
	int64_t avail, total;
	fake_limits("0::/my group/leaf:one\n", mi, &avail, &total);
	cr_expect_eq(total, 400 * MIB64, "total %" PRId64, total);
	cr_expect_eq(avail, 400 * MIB64);
}

/* A group that was removed: the kernel shows "/a/b (deleted)". It has no
 * folder, and its parents still bind; a new group that took the name b is
 * not ours. */
Test(cgroup, v2_deleted_group)
{
	char mi[4096] = "";
	fake_mount(mi, sizeof mi, "/v2", "/", true);
	fake_file("v2/a/memory.max", "314572800\n");
	fake_file("v2/a/b/memory.max", "104857600\n");
	int64_t avail, total;
	fake_limits("0::/a/b (deleted)\n", mi, &avail, &total);
	cr_expect_eq(total, 300 * MIB64, "total %" PRId64 ": a binds, the new b does not", total);
}

/* Files that cannot be read (a dangling link, a folder where the file
 * should be, and for an unprivileged run a file without read permission)
 * bind nothing, and the limits that can be read still do. */
Test(cgroup, unreadable_files_skipped)
{
	char mi[4096] = "", path[8192];
	fake_mount(mi, sizeof mi, "/v2", "/", true);
	fake_file("v2/a/memory.max", "314572800\n");
	fake_mkdirs("v2/a/b/c/memory.max");
	snprintf(path, sizeof path, "%s/v2/a/b/memory.max", fake);
	cr_assert_eq(symlink("/nonexistent/memory.max", path), 0);
	fake_file("v2/a/b/c/memory.current", "1048576\n");
	fake_file("v2/a/b/c/d/memory.max", "1048576\n");
	snprintf(path, sizeof path, "%s/v2/a/b/c/d/memory.max", fake);
	cr_assert_eq(chmod(path, 0), 0);
	int64_t avail, total;
	fake_limits("0::/a/b/c\n", mi, &avail, &total);
	cr_expect_eq(total, 300 * MIB64);
	cr_expect_eq(avail, 300 * MIB64);
	if (geteuid() != 0) { /* root reads a file of mode 0 */
		fake_limits("0::/a/b/c/d\n", mi, &avail, &total);
		cr_expect_eq(total, 300 * MIB64, "a memory.max without read permission binds nothing");
	}
	fake_limits("4:memory:/a\n", mi, &avail, &total);
	cr_expect_eq(total, FAKE_START, "no v1 memory mount in mountinfo: nothing to read");
	fake_limits("garbage\n0:/a\n0::\n::::\n", mi, &avail, &total);
	cr_expect_eq(total, FAKE_START, "lines that are not hierarchy:controllers:/path");
}

/* The kernel writes a decimal number or "max"; anything else is not a
 * limit and binds nothing, rather than being read as its leading digits. */
Test(cgroup, garbage_in_memory_max_binds_nothing)
{
	const char *bad[] = { "", "\n", "12abc\n", "abc\n", "-5\n", " 5\n", "+5\n", "0x100\n", "5 6\n",
			      "max junk\n", "99999999999999999999\n", "5\n\n" };
	char mi[4096] = "";
	fake_mount(mi, sizeof mi, "/v2", "/", true);
	int64_t avail, total;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		fake_file("v2/a/memory.max", bad[i]);
		fake_limits("0::/a\n", mi, &avail, &total);
		cr_expect_eq(total, FAKE_START, "memory.max \"%s\" read as %" PRId64, bad[i], total);
		cr_expect_eq(avail, FAKE_START);
	}
	fake_file("v2/a/memory.max", "5\n");
	fake_file("v2/a/memory.current", "12abc\n"); /* usage unknown: the limit alone */
	fake_limits("0::/a\n", mi, &avail, &total);
	cr_expect_eq(total, 5);
	cr_expect_eq(avail, 5);
	fake_file("v2/a/memory.max", "0");
	fake_limits("0::/a\n", mi, &avail, &total);
	cr_expect_eq(total, 0, "a limit of 0 without a newline is still a limit");
	cr_expect_eq(avail, 0);
}

/* Without mountinfo, v2 is taken at the default root and v1 memory in its
 * memory/ folder, and both hierarchies bind. */
Test(cgroup, default_mount_points_without_mountinfo)
{
	fake_file("memory/g/memory.limit_in_bytes", "209715200\n"); /* 200 MiB */
	fake_file("h/memory.max", "157286400\n");                  /* 150 MiB */
	fake_file("h/memory.current", "104857600\n");
	int64_t avail, total;
	fake_limits("4:memory:/g\n0::/h\n", NULL, &avail, &total);
	cr_expect_eq(total, 150 * MIB64);
	cr_expect_eq(avail, 50 * MIB64);
}
