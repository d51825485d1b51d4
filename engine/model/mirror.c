/*
 * mirror — see mirror.h.
 */
#include "engine/model/mirror.h"

#include <errno.h>
#include <glob.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/files.h"
#include "engine/model/manifest.h"
#include "engine/model/verify.h"
#include "base/error.h"
#include "base/clock.h"

#define MIRROR_CHUNK (8u << 20)

struct mirror_progress {
	uint64_t done, total;
	double t0, last;
	bool quiet;
	const char *verb;
};

static void progress(struct mirror_progress *p, bool final)
{
	double t = clock_now_s();
	if (p->quiet || (!final && t - p->last < (isatty(2) ? 0.5 : 10)))
		return;
	p->last = t;
	double dt = t - p->t0 > 1e-6 ? t - p->t0 : 1e-6;
	fprintf(stderr, "%smirror: %s %.1f of %.1f MB, %.0f MB/s%s", isatty(2) ? "\r" : "", p->verb,
		p->done / 1e6, p->total / 1e6, p->done / 1e6 / dt, final || !isatty(2) ? "\n" : "");
}

struct mirror_check {
	const char *path;
	const char *src;	/* what path was copied from, or NULL */
	struct mirror_progress *p;
};

static int check_bad(void *ctx, size_t i, uint64_t off, uint64_t hash, int rc)
{
	const struct mirror_check *c = ctx;
	if (rc)
		return rc;   /* verify_file said where */
	if (c->src)
		return error_set(EIO, "%s: expert %zu (offset %" PRIu64 ") does not match its checksum (checked in "
				      "its copy %s)", c->src, i, off, c->path);
	return error_set(EIO, "%s: expert %zu (offset %" PRIu64 ") does not match its checksum", c->path, i, off);
}

static void check_progress(void *ctx, uint64_t bytes)
{
	struct mirror_progress *p = ((struct mirror_check *)ctx)->p;
	p->done += bytes;
	progress(p, false);
}

/* Verifies every record of path, a copy of layer l (made from src, NULL
 * when it is the registered copy itself), against the layer's checksums,
 * reading past the page cache when the file system allows O_DIRECT. buf
 * holds buf_bytes, 4096-aligned. */
static int verify_copy(const char *path, const char *src, const struct manifest_expert_layer *l, int n_experts,
		       uint8_t *buf, size_t buf_bytes, struct mirror_progress *p)
{
	struct mirror_check c = { .path = path, .src = src, .p = p };
	struct verify v = { .buf = buf, .buf_bytes = buf_bytes, .direct = true, .bad = check_bad,
			    .progress = check_progress, .ctx = &c };
	uint64_t seed = manifest_record_seed(l->layer, 0);
	return verify_file(&v, path, (size_t)n_experts, NULL, &l->record_bytes, l->checksums, &seed);
}

static int copy_step(void *ctx, uint64_t bytes)
{
	struct mirror_progress *p = ctx;
	p->done += bytes;
	progress(p, false);
	return 0;
}

/* Copies the expert file of model layer `layer` to the mirror folder to,
 * checked against the manifest's checksums before it takes the file's name.
 * The source is the model's own file, else (missing, short, unreadable or
 * failing a checksum) each registered mirror holding the layer in turn,
 * but never the folder being written: a damaged primary whose layer a
 * mirror still holds whole is copied from that mirror, with a warning. The
 * error is the first source's when none gives a good copy. */
static int copy_layer(const struct manifest *m, const char *model_dir, const char *to, int layer, uint8_t *buf,
		      size_t buf_bytes, struct mirror_progress *p)
{
	const struct manifest_expert_layer *l = manifest_expert_layer(m, layer);
	size_t li = (size_t)(l - m->layers), src_k[MANIFEST_MIRRORS_MAX + 1], n_src = 0;
	char src[PATH_MAX], dst[PATH_MAX], tmp[PATH_MAX + 8], first[1024] = "";
	int first_rc = 0;
	for (size_t k = 0; k <= m->n_mirrors; k++)
		if (manifest_copy_path(m, model_dir, k, li, src, sizeof src) &&
		    (k == 0 || strcmp(m->mirrors[k - 1].dir, to) != 0))
			src_k[n_src++] = k;
	snprintf(dst, sizeof dst, "%s/%s", to, l->file);
	snprintf(tmp, sizeof tmp, "%s.tmp", dst);
	for (size_t i = 0; i < n_src; i++) {
		manifest_copy_path(m, model_dir, src_k[i], li, src, sizeof src);
		uint64_t done = p->done, bytes = 2 * l->record_bytes * (uint64_t)m->n_experts;
		int rc = file_copy_through(src, tmp, buf, MIRROR_CHUNK, copy_step, p);
		if (!rc)
			rc = verify_copy(tmp, src, l, m->n_experts, buf, buf_bytes, p);
		if (!rc && rename(tmp, dst) != 0)
			rc = error_set(errno, "%s: cannot rename: %s", dst, strerror(errno));
		if (!rc) {
			if (i > 0 && !p->quiet)
				fprintf(stderr, "mirror: %s copied from the mirror %s instead\n", l->file,
					m->mirrors[src_k[i] - 1].dir);
			return 0;
		}
		unlink(tmp);
		if (!first_rc) {
			first_rc = rc;
			snprintf(first, sizeof first, "%s", error_message());
		}
		if (i + 1 == n_src)
			break;
		/* Another copy to try: this one's failure is a warning. */
		if (!p->quiet)
			fprintf(stderr, "%smirror: %s; trying the mirror %s\n", isatty(2) ? "\n" : "",
				error_message()[0] ? error_message() : strerror(-rc), m->mirrors[src_k[i + 1] - 1].dir);
		error_clear();
		p->done = done + bytes;
		p->total += bytes;
	}
	/* The first source's message is the one that stays pending when it
	 * was the only one; after others, it is set again. */
	if (n_src > 1 && first[0]) {
		error_clear();
		error_set(-first_rc, "%s", first);
	}
	return first_rc ? first_rc : error_set(ENOENT, "%s: no copy of %s to read", model_dir, l->file);
}

int mirror_leftovers(const struct manifest *m, const char *dir, int (*found)(void *ctx, const char *path),
		     void *ctx)
{
	char path[PATH_MAX];
	int rc = 0;
	for (size_t i = 0; !rc && i <= m->n_expert_layers; i++) {
		const char *name = i < m->n_expert_layers ? m->layers[i].file : "colibri-mirror.json";
		snprintf(path, sizeof path, "%s/%s.tmp", dir, name);
		struct stat sb;
		if (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode))
			rc = found(ctx, path);
	}
	/* colibri-mirror.json goes through file_write_atomic, whose temporary
	 * file is colibri-mirror.json.tmp-PID-N. */
	glob_t g;
	snprintf(path, sizeof path, "%s/colibri-mirror.json.tmp-*", dir);
	if (!rc && glob(path, GLOB_NOSORT, NULL, &g) == 0) {
		for (size_t i = 0; !rc && i < g.gl_pathc; i++) {
			struct stat sb;
			if (lstat(g.gl_pathv[i], &sb) == 0 && S_ISREG(sb.st_mode))
				rc = found(ctx, g.gl_pathv[i]);
		}
		globfree(&g);
	}
	return rc;
}

/* mirror_leftovers' callback of mirror_add: ctx points at its quiet flag. */
static int leftover_remove(void *ctx, const char *path)
{
	if (unlink(path) != 0 && errno != ENOENT)
		return error_set(errno, "%s: cannot remove this leftover of an interrupted mirror: %s", path,
				 strerror(errno));
	if (!*(const bool *)ctx)
		fprintf(stderr, "mirror: removed %s, left by an interrupted mirror\n", path);
	return 0;
}

static int mirror_index(const struct manifest *m, const char *dir)
{
	for (size_t i = 0; i < m->n_mirrors; i++)
		if (strcmp(m->mirrors[i].dir, dir) == 0)
			return (int)i;
	return -1;
}

static int write_identity(const struct manifest *m, const char *to)
{
	char path[PATH_MAX], text[256];
	snprintf(path, sizeof path, "%s/colibri-mirror.json", to);
	int n = snprintf(text, sizeof text,
			 "{\"format\":\"colibri-mirror\",\"version\":1,\"model_type\":\"%s\",\"model_id\":\"%016" PRIx64 "\"}\n",
			 m->model_type, manifest_model_id(m));
	return file_write_atomic(path, text, (size_t)n);
}

int mirror_add(const char *model_dir, const char *to_dir, const int32_t *layers, int n, bool quiet)
{
	struct manifest m;
	char to[PATH_MAX], src_real[PATH_MAX], dir[PATH_MAX];
	uint8_t *buf = NULL;
	int rc = manifest_load(&m, model_dir);
	if (rc)
		goto out;
	if (m.shard.present) {
		rc = error_set(EINVAL, "%s is shard %d of %d: colibri mirror copies full containers (copy the shard "
				       "folder to the other disk instead)",
			       model_dir, m.shard.rank, m.shard.ranks);
		goto out;
	}
	snprintf(dir, sizeof dir, "%s/experts", to_dir);
	if ((mkdir(to_dir, 0755) != 0 && errno != EEXIST) || (mkdir(dir, 0755) != 0 && errno != EEXIST)) {
		rc = error_set(errno, "%s: cannot create: %s", dir, strerror(errno));
		goto out;
	}
	if (!realpath(to_dir, to) || !realpath(model_dir, src_real)) {
		rc = error_set(errno, "%s: cannot resolve the path", to_dir);
		goto out;
	}
	if (strcmp(to, src_real) == 0) {
		rc = error_set(EINVAL, "%s: a mirror must be another folder than the model", to_dir);
		goto out;
	}
	if ((rc = mirror_leftovers(&m, to, leftover_remove, &quiet)))
		goto out;
	int idx = mirror_index(&m, to);
	if (idx < 0 && m.n_mirrors >= MANIFEST_MIRRORS_MAX) {
		rc = error_set(ENOSPC, "%s: already %d mirrors registered", model_dir, MANIFEST_MIRRORS_MAX);
		goto out;
	}
	/* Which layers: the requested ones, each checked, else every MoE layer. */
	int32_t *want = calloc(m.n_expert_layers + 1, sizeof *want);
	size_t n_want = 0;
	uint64_t rec_max = 4096;
	struct mirror_progress p = { .t0 = clock_now_s(), .quiet = quiet, .verb = "copied" };
	p.last = p.t0;
	for (size_t i = 0; want && i < m.n_expert_layers; i++) {
		const struct manifest_expert_layer *l = &m.layers[i];
		bool asked = !layers;
		for (int k = 0; layers && k < n; k++)
			asked |= layers[k] == l->layer;
		if (!asked)
			continue;
		want[n_want++] = l->layer;
		p.total += 2 * l->record_bytes * (uint64_t)m.n_experts; /* copy + verify */
		rec_max = l->record_bytes > rec_max ? l->record_bytes : rec_max;
	}
	for (int k = 0; want && layers && k < n; k++)
		if (!manifest_expert_layer(&m, layers[k])) {
			free(want);
			rc = error_set(EINVAL, "%s: layer %d has no expert file", model_dir, layers[k]);
			goto out;
		}
	size_t buf_bytes = rec_max > MIRROR_CHUNK ? rec_max : MIRROR_CHUNK;
	buf = aligned_alloc(4096, buf_bytes);
	if (!want || !buf) {
		free(want);
		rc = error_set(ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; !rc && i < n_want; i++)
		rc = copy_layer(&m, model_dir, to, want[i], buf, buf_bytes, &p);
	if (!rc)
		rc = write_identity(&m, to);
	if (!rc) {
		/* Register: a new entry, or the union with what it held before. */
		struct manifest_mirror *mm;
		if (idx < 0) {
			mm = &m.mirrors[m.n_mirrors++];
			mm->dir = strdup(to);
			mm->layers = NULL;
			mm->n_layers = 0;
		} else {
			mm = &m.mirrors[idx];
		}
		int32_t *all = realloc(mm->layers, (mm->n_layers + n_want + 1) * sizeof *all);
		if (!mm->dir || !all) {
			rc = error_set(ENOMEM, "out of memory");
		} else {
			mm->layers = all;
			for (size_t i = 0; i < n_want; i++)
				if (!manifest_mirror_has(mm, want[i]))
					mm->layers[mm->n_layers++] = want[i];
			rc = manifest_write(&m, model_dir);
		}
	}
	free(want);
	if (!rc)
		progress(&p, true);
	if (!rc && !quiet)
		fprintf(stderr, "mirror: %s now holds %zu expert file(s) of %s\n", to, n_want, model_dir);
out:
	free(buf);
	manifest_free(&m);
	return rc;
}

int mirror_verify(const char *model_dir, const char *to_dir, bool quiet)
{
	struct manifest m;
	char to[PATH_MAX] = "";
	int rc = manifest_load(&m, model_dir);
	if (!rc && to_dir && !realpath(to_dir, to))
		rc = error_set(errno, "%s: cannot resolve the path", to_dir);
	if (!rc && to_dir && mirror_index(&m, to) < 0)
		rc = error_set(ENOENT, "%s: not a registered mirror of %s", to_dir, model_dir);
	if (!rc && m.n_mirrors == 0)
		rc = error_set(ENOENT, "%s: no mirrors registered", model_dir);
	uint64_t rec_max = 4096;
	struct mirror_progress p = { .t0 = clock_now_s(), .quiet = quiet, .verb = "verified" };
	p.last = p.t0;
	for (size_t i = 0; i < m.n_expert_layers; i++)
		rec_max = m.layers[i].record_bytes > rec_max ? m.layers[i].record_bytes : rec_max;
	uint8_t *buf = rc ? NULL : aligned_alloc(4096, rec_max);
	if (!rc && !buf)
		rc = error_set(ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < m.n_mirrors; i++) {
		const struct manifest_mirror *mm = &m.mirrors[i];
		if (to_dir && strcmp(mm->dir, to) != 0)
			continue;
		for (size_t k = 0; k < mm->n_layers; k++)
			p.total += manifest_expert_layer(&m, mm->layers[k])->record_bytes * (uint64_t)m.n_experts;
		for (size_t k = 0; !rc && k < mm->n_layers; k++) {
			const struct manifest_expert_layer *l = manifest_expert_layer(&m, mm->layers[k]);
			char path[PATH_MAX];
			manifest_copy_path(&m, model_dir, i + 1, (size_t)(l - m.layers), path, sizeof path);
			rc = verify_copy(path, NULL, l, m.n_experts, buf, (size_t)rec_max, &p);
		}
	}
	if (!rc)
		progress(&p, true);
	free(buf);
	manifest_free(&m);
	return rc;
}

int mirror_remove(const char *model_dir, const char *to_dir)
{
	struct manifest m;
	char to[PATH_MAX];
	int rc = manifest_load(&m, model_dir);
	if (rc)
		goto out;
	/* The folder may be gone already: match the registered path as given too. */
	if (!realpath(to_dir, to))
		snprintf(to, sizeof to, "%s", to_dir);
	int idx = mirror_index(&m, to);
	if (idx < 0) {
		rc = error_set(ENOENT, "%s: not a registered mirror of %s", to_dir, model_dir);
		goto out;
	}
	free(m.mirrors[idx].dir);
	free(m.mirrors[idx].layers);
	memmove(&m.mirrors[idx], &m.mirrors[idx + 1], (m.n_mirrors - (size_t)idx - 1) * sizeof m.mirrors[0]);
	m.n_mirrors--;
	rc = manifest_write(&m, model_dir);
out:
	manifest_free(&m);
	return rc;
}
