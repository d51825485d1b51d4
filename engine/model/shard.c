/*
 * shard — see shard.h. Writes into TO.tmp-XXXXXX beside the destination and
 * renames it into place only once every file is written, synced and read
 * back verified; any failure or a SIGINT/SIGTERM/SIGHUP removes the
 * temporary folder. The read-back comes after the sync with the written
 * files' pages dropped, so it checks what reached the disk, not the page
 * cache. Memory: two buffers (one record, SHARD_BUF_BYTES), whatever the
 * size of resident.bin or the expert files.
 */
#include "engine/model/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/files.h"
#include "engine/model/manifest.h"
#include "engine/model/verify.h"
#include "storage/checksum.h"

#define SHARD_BUF_BYTES (4u << 20) /* read-back chunk */

static volatile sig_atomic_t shard_interrupted;

static void shard_on_signal(int sig)
{
	(void)sig;
	shard_interrupted = 1;
}

struct shard_progress {
	uint64_t done, total;
	double t0, last;
	bool quiet;
};

static void progress(struct shard_progress *p, const char *verb, bool final)
{
	double t = clock_now_s();
	if (p->quiet || (!final && t - p->last < (isatty(2) ? 0.5 : 10)))
		return;
	p->last = t;
	double dt = t - p->t0 > 1e-6 ? t - p->t0 : 1e-6;
	fprintf(stderr, "%sshard: %s %.1f of %.1f MB, %.0f MB/s%s", isatty(2) ? "\r" : "", verb, p->done / 1e6,
		p->total / 1e6, p->done / 1e6 / dt, final || !isatty(2) ? "\n" : "");
}

int shard_check_run(const struct manifest *m, const char *dir, bool under_mpi, int rank, int n_ranks)
{
	const struct manifest_shard *s = &m->shard;
	if (!s->present)
		return 0;
	if (!under_mpi)
		return error_set(EINVAL, "%s is shard %d of %d (colibri shard): it holds only rank %d's experts; run it "
					 "as rank %d of mpirun -n %d, or use the full container",
				 dir, s->rank, s->ranks, s->rank, s->rank, s->ranks);
	if (rank != s->rank || n_ranks != s->ranks)
		return error_set(EINVAL, "%s is shard %d of %d (colibri shard), but this is rank %d of %d: give each "
					 "rank its own shard",
				 dir, s->rank, s->ranks, rank, n_ranks);
	return 0;
}

/* One chunk of resident.bin copied: progress, and stop on a signal. */
static int copy_step(void *ctx, uint64_t bytes)
{
	struct shard_progress *p = ctx;
	p->done += bytes;
	progress(p, "wrote", false);
	return shard_interrupted ? error_set(EINTR, "interrupted") : 0;
}

/* Copies what is not an expert file: resident.bin (verified against its
 * tensors' checksums by read_back) and the HF side files that are there,
 * the same list convert copies. */
static int copy_dense(const char *src, const char *tmp, const struct manifest *m, uint8_t *buf,
		      struct shard_progress *p)
{
	char from[PATH_MAX], to[PATH_MAX];
	snprintf(from, sizeof from, "%s/%s", src, m->resident_file);
	snprintf(to, sizeof to, "%s/%s", tmp, m->resident_file);
	int rc = dir_make_parent(to);
	if (!rc)
		rc = file_copy_through(from, to, buf, SHARD_BUF_BYTES, copy_step, p); /* may be tens of GB */
	const char *const *side = manifest_side_files;
	for (size_t i = 0; !rc && i < MANIFEST_SIDE_FILES; i++) {
		snprintf(from, sizeof from, "%s/%s", src, side[i]);
		snprintf(to, sizeof to, "%s/%s", tmp, side[i]);
		if (access(from, F_OK) == 0)
			rc = file_copy(from, to);
	}
	return rc;
}

/* Layer l's records of this shard: each read from the source file, checked
 * against its checksum, written at its slot. rec is 4 KiB-aligned and holds
 * one record. */
static int write_layer(const char *src, const char *tmp, const struct manifest_expert_layer *l, void *rec,
		       struct shard_progress *p)
{
	char from[PATH_MAX], to[PATH_MAX];
	snprintf(from, sizeof from, "%s/%s", src, l->file);
	snprintf(to, sizeof to, "%s/%s", tmp, l->file);
	int in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return error_set(errno, "%s: cannot open: %s", from, strerror(errno));
	int rc = dir_make_parent(to);
	int out = rc ? -1 : open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (!rc && out < 0)
		rc = error_set(errno, "%s: cannot create: %s", to, strerror(errno));
	for (int32_t i = 0; !rc && i < l->n_records; i++) {
		int32_t e = l->records[i];
		if (shard_interrupted) {
			rc = error_set(EINTR, "interrupted");
			break;
		}
		uint64_t off = (uint64_t)e * l->record_bytes;
		if ((rc = file_io_at(in, rec, l->record_bytes, off, false, from)))
			break;
		uint64_t h = checksum_xxh3(rec, l->record_bytes, manifest_record_seed(l->layer, e));
		if (h != l->checksums[e]) {
			rc = error_set(EIO, "%s: layer %d expert %d (offset %" PRIu64 ") does not match its checksum: the "
					    "source is damaged (colibri doctor --deep %s)",
				       from, l->layer, e, off, src);
			break;
		}
		rc = file_io_at(out, rec, l->record_bytes, (uint64_t)i * l->record_bytes, true, to);
		/* The source's pages are not ours to keep. */
		posix_fadvise(in, (off_t)off, (off_t)l->record_bytes, POSIX_FADV_DONTNEED);
		p->done += l->record_bytes;
		progress(p, "wrote", false);
	}
	if (!rc && out >= 0 && fsync(out) != 0)
		rc = error_set(errno, "%s: cannot sync: %s", to, strerror(errno));
	if (out >= 0 && close(out) != 0 && !rc)
		rc = error_set(errno, "%s: write failed: %s", to, strerror(errno));
	close(in);
	return rc;
}

static void verified_bytes(void *ctx, uint64_t bytes)
{
	struct shard_progress *p = ctx;
	p->done += bytes;
	progress(p, "verified", false);
}

/* Opens path for the read-back with its cached pages dropped (the folder
 * has been synced, so they are clean), so the reads come from the disk. */
static int open_uncached(const char *path, int *fd)
{
	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0)
		return error_set(errno, "%s: cannot open: %s", path, strerror(errno));
	posix_fadvise(*fd, 0, 0, POSIX_FADV_DONTNEED);
	return 0;
}

/* Reads the written shard back as m (loaded from tmp) describes it and
 * checks every resident tensor and every record against its checksum. */
static int read_back(const char *tmp, const struct manifest *m, uint8_t *buf, struct shard_progress *p)
{
	struct verify v = { .buf = buf, .buf_bytes = SHARD_BUF_BYTES, .progress = verified_bytes, .ctx = p };
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", tmp, m->resident_file);
	int fd, rc = open_uncached(path, &fd);
	for (size_t i = 0; !rc && i < m->n_tensors; i++) {
		const struct manifest_tensor *t = &m->tensors[i];
		uint64_t h;
		rc = verify_hash_range(&v, path, fd, t->offset, t->bytes, manifest_tensor_seed(t->name, t->offset), &h);
		if (!rc && h != t->checksum)
			rc = error_set(EIO, "%s: tensor %s does not match its checksum: the source's resident.bin is "
					    "damaged or the copy failed",
				       path, t->name);
	}
	if (fd >= 0)
		close(fd);
	/* Tensors need not cover resident.bin to its end: count it all. */
	if (!rc) {
		uint64_t tensors = 0;
		for (size_t i = 0; i < m->n_tensors; i++)
			tensors += m->tensors[i].bytes;
		p->done += m->resident_bytes > tensors ? m->resident_bytes - tensors : 0;
	}
	for (size_t i = 0; !rc && i < m->n_expert_layers; i++) {
		const struct manifest_expert_layer *l = &m->layers[i];
		snprintf(path, sizeof path, "%s/%s", tmp, l->file);
		if ((rc = open_uncached(path, &fd)))
			break;
		for (int32_t k = 0; !rc && k < l->n_records; k++) {
			int32_t e = l->records[k];
			uint64_t h, off = (uint64_t)k * l->record_bytes;
			rc = verify_hash_range(&v, path, fd, off, l->record_bytes, manifest_record_seed(l->layer, e), &h);
			if (!rc && h != l->checksums[e])
				rc = error_set(EIO, "%s: layer %d expert %d (offset %" PRIu64 ") reads back wrong", path,
					       l->layer, e, off);
			if (!rc && shard_interrupted)
				rc = error_set(EINTR, "interrupted");
		}
		close(fd);
	}
	return rc;
}

/* The placement the shard is cut by, and each layer's records of rank
 * o->rank under it, into m (a loaded full container). */
static int shard_plan(struct manifest *m, const struct shard_options *o, int64_t *n_out)
{
	struct manifest_shard *s = &m->shard;
	const char *why;
	double w[PLACEMENT_RANKS_MAX];
	static const double no_disks[PLACEMENT_RANKS_MAX];
	if (o->ranks < 1 || o->ranks > PLACEMENT_RANKS_MAX)
		return error_set(EINVAL, "--ranks %d: colibri shares experts over 1..%d ranks", o->ranks,
				 PLACEMENT_RANKS_MAX);
	if (o->rank < 0 || o->rank >= o->ranks)
		return error_set(EINVAL, "--rank %d: ranks of --ranks %d are 0..%d", o->rank, o->ranks, o->ranks - 1);
	int replicas = o->placement.replicas > 1 ? o->placement.replicas : 1;
	if (replicas > o->ranks)
		return error_set(EINVAL, "--replicas %d over %d rank%s: an expert can be held by at most every rank",
				 replicas, o->ranks, o->ranks == 1 ? "" : "s");
	if (o->placement.mode == PLACEMENT_AUTO)
		return error_set(EINVAL, "--placement auto weighs the disks a run measures, which a shard cannot know: "
					 "give --placement even (the default) or weights W0,W1,..");
	int rc = placement_weights(&o->placement, o->ranks, no_disks, w, &why);
	if (rc)
		return rc;
	*s = (struct manifest_shard){ .present = true, .ranks = o->ranks, .rank = o->rank, .replicas = replicas };
	memcpy(s->weights, w, (size_t)o->ranks * sizeof *w);
	if (!m->n_expert_layers)
		return error_set(EINVAL, "the model has no routed experts to shard");
	int rows = m->layers[m->n_expert_layers - 1].layer + 1;
	uint64_t *holders = manifest_shard_holders(s, rows, m->n_experts);
	if (!holders)
		return -ENOMEM;
	*n_out = 0;
	for (size_t i = 0; !rc && i < m->n_expert_layers; i++) {
		struct manifest_expert_layer *l = &m->layers[i];
		l->records = malloc((size_t)m->n_experts * sizeof *l->records);
		l->slot = malloc((size_t)m->n_experts * sizeof *l->slot);
		if (!l->records || !l->slot) {
			rc = error_set(ENOMEM, "out of memory");
			break;
		}
		l->n_records = 0;
		for (int e = 0; e < m->n_experts; e++) {
			bool mine = holders[(size_t)l->layer * m->n_experts + e] >> o->rank & 1;
			l->slot[e] = mine ? l->n_records : -1;
			if (mine)
				l->records[l->n_records++] = e;
		}
		*n_out += l->n_records;
	}
	free(holders);
	return rc;
}

/* What may be at o->to_dir: nothing, an empty folder, or with --force a
 * container this colibri reads (never the source itself). */
static int dest_check(const struct shard_options *o)
{
	struct stat sb;
	char a[PATH_MAX], b[PATH_MAX];
	if (stat(o->to_dir, &sb) != 0)
		return errno == ENOENT ? 0 : error_set(errno, "%s: %s", o->to_dir, strerror(errno));
	if (realpath(o->to_dir, a) && realpath(o->model_dir, b) && !strcmp(a, b))
		return error_set(EINVAL, "%s: the shard cannot replace its own source", o->to_dir);
	return manifest_dir_replaceable(o->to_dir, o->force);
}

static void catch_signal(int sig, struct sigaction *old)
{
	struct sigaction sa = { .sa_handler = shard_on_signal };
	sigaction(sig, NULL, old);
	if (old->sa_handler != SIG_IGN)
		sigaction(sig, &sa, NULL);
}

int shard_write(const struct shard_options *o, struct shard_result *out)
{
	struct manifest m;
	char tmp[PATH_MAX] = "";
	uint8_t *buf = NULL;
	void *rec = NULL;
	struct sigaction old_int, old_term, old_hup;
	memset(out, 0, sizeof *out);
	shard_interrupted = 0;
	catch_signal(SIGINT, &old_int);
	catch_signal(SIGTERM, &old_term);
	catch_signal(SIGHUP, &old_hup);
	int rc = manifest_load(&m, o->model_dir);
	if (!rc && m.shard.present)
		rc = error_set(EINVAL, "%s is already shard %d of %d: shard the full container", o->model_dir,
			       m.shard.rank, m.shard.ranks);
	if (!rc)
		rc = dest_check(o);
	if (!rc)
		rc = shard_plan(&m, o, &out->experts);
	uint64_t rec_max = 0;
	struct shard_progress p = { .t0 = clock_now_s(), .quiet = o->quiet };
	for (size_t i = 0; !rc && i < m.n_expert_layers; i++) {
		out->experts_total += m.n_experts;
		rec_max = m.layers[i].record_bytes > rec_max ? m.layers[i].record_bytes : rec_max;
		p.total += 2 * m.layers[i].record_bytes * (uint64_t)m.layers[i].n_records; /* write + read back */
	}
	p.total += 2 * m.resident_bytes;
	if (!rc && (posix_memalign(&rec, 4096, rec_max ? rec_max : 4096) != 0 ||
		    posix_memalign((void **)&buf, 4096, SHARD_BUF_BYTES) != 0))
		rc = error_set(ENOMEM, "out of memory");
	if (!rc && strlen(o->to_dir) + 16 >= sizeof tmp)
		rc = error_set(ENAMETOOLONG, "%s: path too long", o->to_dir);
	if (!rc) {
		snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", o->to_dir);
		if (!mkdtemp(tmp)) {
			rc = error_set(errno, "%s: cannot create a folder beside it: %s", o->to_dir, strerror(errno));
			tmp[0] = 0;
		} else {
			mode_t mask = umask(0);
			umask(mask);
			chmod(tmp, 0777 & ~mask); /* mkdtemp makes it 0700 */
		}
	}
	if (!rc)
		rc = copy_dense(o->model_dir, tmp, &m, buf, &p);
	for (size_t i = 0; !rc && i < m.n_expert_layers; i++)
		rc = write_layer(o->model_dir, tmp, &m.layers[i], rec, &p);
	if (!rc) {
		/* The shard's own manifest: no mirrors (they copy the source). */
		struct manifest w = m;
		w.n_mirrors = 0;
		rc = manifest_write(&w, tmp);
	}
	if (!rc && shard_interrupted)
		rc = error_set(EINTR, "interrupted");
	if (!rc) {
		/* Every file and folder of the shard on the disk (as convert). */
		int dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0 || syncfs(dfd) != 0)
			rc = error_set(errno, "%s: cannot sync: %s", tmp, strerror(errno));
		if (dfd >= 0)
			close(dfd);
	}
	if (!rc) {
		/* Read back as a reader would: the manifest's checks, then every
		 * tensor and record against its checksum. */
		struct manifest back;
		rc = manifest_load(&back, tmp);
		if (!rc)
			rc = read_back(tmp, &back, buf, &p);
		manifest_free(&back);
	}
	if (!rc && shard_interrupted)
		rc = error_set(EINTR, "interrupted");
	if (!rc) {
		/* What is at the destination may have changed meanwhile. */
		rc = dest_check(o);
		if (!rc)
			rc = dir_publish(tmp, o->to_dir);
		if (!rc)
			tmp[0] = 0;
	}
	if (!rc) {
		out->bytes = m.resident_bytes;
		for (size_t i = 0; i < m.n_expert_layers; i++)
			out->bytes += m.layers[i].record_bytes * (uint64_t)m.layers[i].n_records;
		progress(&p, "verified", true);
	}
	if (tmp[0])
		dir_remove_tree(tmp);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGHUP, &old_hup, NULL);
	free(rec);
	free(buf);
	manifest_free(&m);
	return rc;
}
