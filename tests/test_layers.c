/*
 * test_layers — the folders include only what their READMEs allow
 * (docs/ARCHITECTURE.md's table, engine/README.md's rooms): every
 * `#include "FOLDER/..."` in every .c and .h of a folder names the folder
 * itself or one it may include. In particular forward never includes dist
 * (it owns the interface of remote experts, engine/forward/remote.h, which
 * dist implements), and nothing below the engine knows a model.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "tests/test_util.h"

struct room {
	const char *dir;
	const char *may; /* space-separated folders it may include besides itself */
};

static const struct room rooms[] = {
	{ "base", "" },
	{ "compute", "base" },
	{ "storage", "base" },
	{ "planner", "base storage" },
	{ "engine/model", "base compute storage planner" },
	{ "engine/convert", "base compute storage planner engine/model" },
	{ "engine/text", "base" },
	{ "engine/grammar", "base engine/text" },
	{ "engine/forward", "base compute storage engine/model" },
	{ "engine/dist", "base compute storage planner engine/model engine/forward" },
	{ "engine/decode",
	  "base compute storage planner engine/model engine/text engine/grammar engine/forward engine/dist" },
	{ "engine/serve",
	  "base compute storage planner engine/model engine/text engine/grammar engine/forward engine/decode" },
};

/* The folder an include names: "engine/x" for engine's rooms, else its
 * first component. */
static void folder_of(const char *inc, char *out, size_t n)
{
	size_t len = strcspn(inc, "/");
	if (!strncmp(inc, "engine/", 7))
		len = 7 + strcspn(inc + 7, "/");
	snprintf(out, n, "%.*s", (int)len, inc);
}

static bool allowed(const struct room *r, const char *folder)
{
	if (!strcmp(folder, r->dir))
		return true;
	size_t n = strlen(folder);
	for (const char *p = r->may; *p;) {
		size_t w = strcspn(p, " ");
		if (w == n && !strncmp(p, folder, n))
			return true;
		p += w;
		p += strspn(p, " ");
	}
	return false;
}

/* Checks one source file; returns how many includes break the rule, each
 * logged when report. */
static int check_file(const struct room *r, const char *path, bool report)
{
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "%s: cannot open", path);
	char line[1024];
	int bad = 0, no = 0;
	while (fgets(line, sizeof line, f)) {
		no++;
		const char *p = line + strspn(line, " \t");
		if (strncmp(p, "#include \"", 10))
			continue;
		char inc[512], folder[512];
		snprintf(inc, sizeof inc, "%.*s", (int)strcspn(p + 10, "\""), p + 10);
		if (!strchr(inc, '/'))
			continue;
		folder_of(inc, folder, sizeof folder);
		if (!allowed(r, folder) && report) {
			cr_log_error("%s:%d includes %s: %s may include only %s", path, no, inc, r->dir,
				     r->may[0] ? r->may : "itself");
		}
		bad += !allowed(r, folder);
	}
	fclose(f);
	return bad;
}

Test(layers, every_folder_includes_only_what_it_may)
{
	int bad = 0, files = 0;
	for (size_t i = 0; i < sizeof rooms / sizeof rooms[0]; i++) {
		char dir[4096];
		snprintf(dir, sizeof dir, "%s/%s", tu_repo(), rooms[i].dir);
		DIR *d = opendir(dir);
		cr_assert_not_null(d, "%s: no such folder", dir);
		struct dirent *e;
		while ((e = readdir(d))) {
			size_t n = strlen(e->d_name);
			if (n < 3 || (strcmp(e->d_name + n - 2, ".c") && strcmp(e->d_name + n - 2, ".h")))
				continue;
			char path[8192];
			snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
			bad += check_file(&rooms[i], path, true);
			files++;
		}
		closedir(d);
	}
	cr_expect_gt(files, 200, "only %d source files found under %s", files, tu_repo());
	cr_expect_eq(bad, 0, "%d includes cross the layering (listed above)", bad);
}

/* The check itself: a forward file including dist is caught. */
Test(layers, a_forbidden_include_is_caught)
{
	char dir[4096], path[4200];
	tu_mkdtemp(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/x.c", dir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs("#include <mpi.h>\n#include \"engine/forward/forward.h\"\n  #include \"engine/dist/dist.h\"\n", f);
	fclose(f);
	const struct room forward = { "engine/forward", "base compute storage engine/model" };
	cr_expect_eq(check_file(&forward, path, false), 1);
	tu_rmrf(dir);
}
