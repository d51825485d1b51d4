/*
 * default_model — finds (and on first use converts) the model of run, chat
 * and serve when no --model is given; the order is in default_model.h.
 */
#include "engine/cli/default_model.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/files.h"
#include "engine/cli/model_cache.h"
#include "engine/convert/convert.h"

#define HF_NAME "kjv-moe-hf"
#define OUT_NAME "kjv-moe"

/* Seconds since the epoch of path's last change, or -1 when it is absent. */
static double mtime_of(const char *dir, const char *file)
{
	char p[PATH_MAX];
	struct stat sb;
	snprintf(p, sizeof p, "%s/%s", dir, file);
	if (stat(p, &sb) != 0)
		return -1;
	return (double)sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec * 1e-9;
}

static bool is_container(const char *dir)
{
	return mtime_of(dir, "manifest.json") >= 0;
}

static bool is_checkpoint(const char *dir)
{
	return mtime_of(dir, "config.json") >= 0 && mtime_of(dir, "model.safetensors") >= 0;
}

/* A container made from the checkpoint hf at or after the checkpoint's
 * last change (a git pull that brings a new model makes it stale). */
static bool container_fresh(const char *dir, const char *hf)
{
	double made = mtime_of(dir, "manifest.json");
	return made >= 0 && made >= mtime_of(hf, "model.safetensors") && made >= mtime_of(hf, "config.json");
}

/* Checks an snprintf into a path buffer of len bytes. */
static int fits(int n, size_t len, const char *what)
{
	return n < 0 || (size_t)n >= len ? error_set(ENAMETOOLONG, "default model: path too long: %s", what) : 0;
}

/* The cache folder for the converted default model. */
static int cache_dir(char *out, size_t len)
{
	char root[PATH_MAX];
	int rc = model_cache_root(root, sizeof root);
	return rc ? rc : fits(snprintf(out, len, "%s/" OUT_NAME, root), len, root);
}

/* The container of checkpoint hf: its fresh sibling, else the cache,
 * converted there when missing or stale. */
static int container_for(const char *hf, char *out, size_t len)
{
	char sib[PATH_MAX];
	snprintf(sib, sizeof sib, "%s", hf);
	char *slash = strrchr(sib, '/');
	size_t base = slash ? (size_t)(slash + 1 - sib) : 0;
	const char *name = sib + base;
	size_t nlen = strlen(name);
	if (nlen > 3 && !strcmp(name + nlen - 3, "-hf")) {
		sib[base + nlen - 3] = 0;
		if (container_fresh(sib, hf))
			return fits(snprintf(out, len, "%s", sib), len, sib);
	}
	int rc = cache_dir(out, len);
	if (rc || container_fresh(out, hf))
		return rc;
	if ((rc = dir_make_parent(out)) != 0)
		return error_set(-rc, "%s: cannot make its folder: %s", out, strerror(-rc));
	fprintf(stderr, "colibri: converting the default model %s into %s (once)\n", hf, out);
	struct convert_options o;
	convert_options_default(&o);
	o.hf_dir = hf;
	o.out_dir = out;
	o.force = true;
	return convert_run(&o);
}

int default_model_dir(char *out, size_t len)
{
	const char *env = getenv("COLIBRI_DEFAULT_MODEL");
	if (env && *env) {
		if (is_container(env))
			return fits(snprintf(out, len, "%s", env), len, env);
		if (is_checkpoint(env))
			return container_for(env, out, len);
		return error_set(ENOENT, "COLIBRI_DEFAULT_MODEL=%s: neither a colibri container (manifest.json) "
					 "nor a checkpoint (config.json, model.safetensors)", env);
	}
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return error_set(errno, "default model: cannot find the colibri executable: %s", strerror(errno));
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = 0;
	static const char *const where[] = { "/models/" HF_NAME, "/../models/" HF_NAME,
					     "/../share/colibri/" HF_NAME };
	char tried[3 * PATH_MAX] = "";
	for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
		char hf[PATH_MAX];
		int rc = fits(snprintf(hf, sizeof hf, "%s%s", exe, where[i]), sizeof hf, exe);
		if (rc)
			return rc;
		char real[PATH_MAX];
		if (realpath(hf, real) && is_checkpoint(real))
			return container_for(real, out, len);
		size_t t = strlen(tried);
		snprintf(tried + t, sizeof tried - t, "%s%s", t ? ", " : "", hf);
	}
	return error_set(ENOENT, "no --model given and the default model is not installed (looked in %s); "
				 "pass --model DIR, or set COLIBRI_DEFAULT_MODEL", tried);
}

int default_model_use(const char **model_dir)
{
	static char dir[PATH_MAX];
	if (*model_dir)
		return model_cache_use(model_dir);
	int rc = default_model_dir(dir, sizeof dir);
	if (rc)
		return rc;
	fprintf(stderr, "colibri: no --model given: using the default model %s "
			"(a toy MoE trained on the King James Bible)\n", dir);
	*model_dir = dir;
	return 0;
}
