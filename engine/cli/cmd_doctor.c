/*
 * cmd_doctor — `colibri doctor --model DIR [--deep]`: checks a container
 * and the system it runs on, one line per check:
 *
 *     pass  what: detail
 *     warn  what: detail
 *           fix: what to do
 *     FAIL  what: detail
 *           fix: what to do
 *
 * and exits non-zero when any check fails. Warnings are things colibri works
 * around (a fallback, a missing profile) at some cost. --deep reads every
 * byte of the container and verifies each resident tensor and expert record
 * against its checksum, with a progress line on a terminal.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/cli/cmd.h"
#include "engine/model/manifest.h"
#include "engine/model/mirror.h"
#include "engine/model/verify.h"
#include "planner/plan_machine.h"
#include "planner/plan_report.h"
#include "base/error.h"
#include "base/clock.h"

#define DOCTOR_CHUNK_BYTES (16u << 20)
#define DOCTOR_MISMATCH_LINES 10

enum doctor_level { DOCTOR_PASS, DOCTOR_WARN, DOCTOR_FAIL };

struct doctor {
	const char *dir;
	int n[3];
	int mismatches;
	/* --deep progress */
	uint64_t done_bytes, total_bytes;
	double last_progress;
	bool tty;
};

static void report(struct doctor *d, enum doctor_level lvl, const char *what, const char *fix, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void report(struct doctor *d, enum doctor_level lvl, const char *what, const char *fix, const char *fmt, ...)
{
	static const char *tag[] = { "pass", "warn", "FAIL" };
	va_list ap;
	if (d->tty && d->total_bytes)
		fprintf(stderr, "\r%60s\r", "");
	printf("%s  %s: ", tag[lvl], what);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (lvl != DOCTOR_PASS && fix)
		printf("      fix: %s\n", fix);
	fflush(stdout);
	d->n[lvl]++;
}

/* What doctor --deep is checking now, for the callbacks of verify_file. */
struct doctor_file {
	struct doctor *d;
	const char *path;
	const uint64_t *sizes, *sums, *seeds; /* as verify_file takes them */
	const char *const *names;     /* [n] tensor names; NULL for expert records */
	const int32_t *experts;       /* [n] a shard's: the expert of each record; NULL: record i is expert i */
};

static void progress(void *ctx, uint64_t bytes)
{
	struct doctor *d = ((struct doctor_file *)ctx)->d;
	d->done_bytes += bytes;
	double t = clock_now_s();
	if (!d->tty || t - d->last_progress < 0.25)
		return;
	d->last_progress = t;
	fprintf(stderr, "\rverifying checksums: %.2f / %.2f GB (%.0f%%)", d->done_bytes / 1e9, d->total_bytes / 1e9,
		100.0 * (double)d->done_bytes / (double)d->total_bytes);
}

static const char *fix_reconvert = "reconvert the model (colibri convert HF_DIR DIR --force) or restore the "
				   "container from a good copy";
/* convert --force replaces only a container whose manifest loads. */
static const char *fix_unloadable = "remove DIR and reconvert the model (colibri convert HF_DIR DIR), or restore "
				    "the container from a good copy";

static int deep_bad(void *ctx, size_t i, uint64_t off, uint64_t hash, int rc)
{
	const struct doctor_file *f = ctx;
	char what[64];
	if (f->names)
		snprintf(what, sizeof what, "tensor %.40s", f->names[i]);
	else
		snprintf(what, sizeof what, "expert %d", f->experts ? f->experts[i] : (int)i);
	if (rc) {
		report(f->d, DOCTOR_FAIL, "checksums", fix_reconvert, "%s: %s at offset %" PRIu64 ": read failed: %s",
		       f->path, what, off, strerror(-rc));
		error_clear();   /* said here, in doctor's words */
	} else if (++f->d->mismatches <= DOCTOR_MISMATCH_LINES)
		report(f->d, DOCTOR_FAIL, "checksums", fix_reconvert,
		       "%s: %s at offset %" PRIu64 " (%" PRIu64 " bytes): xxh3 %016" PRIx64 ", manifest says %016" PRIx64,
		       f->path, what, off, f->names || f->experts ? f->sizes[i] : f->sizes[0], hash, f->sums[i]);
	return 0;
}

/* Whether copy k of expert layer index l exists: k = 0 is the container's
 * own file, k > 0 mirror k - 1 when it lists the layer. Writes its path. */
static bool copy_exists(const struct doctor *d, const struct manifest *m, size_t k, size_t l, char *path, size_t n)
{
	return manifest_copy_path(m, d->dir, k, l, path, n) && (k == 0 || access(path, R_OK) == 0);
}

/* What a leftover of an interrupted mirror is reported against. */
struct doctor_mirror {
	struct doctor *d;
	const char *dir;
};

/* A temporary file of an interrupted `colibri mirror`: reported, not
 * removed, since a mirror run may be writing it now. */
static int leftover_report(void *ctx, const char *path)
{
	const struct doctor_mirror *dm = ctx;
	char fix[8400];
	snprintf(fix, sizeof fix, "delete it, or run colibri mirror --model %s --to %s again, which removes it",
		 dm->d->dir, dm->dir);
	report(dm->d, DOCTOR_WARN, "mirror", fix, "%s is left over from an interrupted colibri mirror (unless one is "
	       "running now)", path);
	return 0;
}

/* Mirrors (colibri mirror): each listed folder and copy is there with the
 * expert file's size. A missing copy is a warning: reads use the others;
 * so is a temporary file an interrupted mirror left. */
static void check_mirrors(struct doctor *d, const struct manifest *m)
{
	char path[4096], fix[4300];
	for (size_t k = 1; k <= m->n_mirrors; k++) {
		const char *dir = m->mirrors[k - 1].dir;
		int bad = 0, n = 0;
		snprintf(fix, sizeof fix, "restore %s (colibri mirror --model %s --to ...), or remove the mirror", dir, d->dir);
		for (size_t l = 0; l < m->n_expert_layers; l++) {
			if (!manifest_mirror_has(&m->mirrors[k - 1], m->layers[l].layer))
				continue;
			n++;
			struct stat st;
			uint64_t want = m->layers[l].record_bytes * (uint64_t)m->n_experts;
			bool ok = copy_exists(d, m, k, l, path, sizeof path) && stat(path, &st) == 0 &&
				  (uint64_t)st.st_size == want;
			if (!ok && bad++ == 0)
				report(d, DOCTOR_WARN, "mirror", fix, "%s is missing or not %" PRIu64 " bytes: reads of that "
				       "layer use the other copies", path, want);
		}
		if (!bad)
			report(d, DOCTOR_PASS, "mirror", NULL, "%s holds %d expert files", dir, n);
		struct doctor_mirror dm = { .d = d, .dir = dir };
		mirror_leftovers(m, dir, leftover_report, &dm);
	}
}

/* Verifies one file; a file that cannot be opened is one failure. */
static void deep_file(struct doctor_file *f, const struct verify *v, size_t n, const uint64_t *offs)
{
	if (verify_file(v, f->path, n, offs, f->sizes, f->sums, f->seeds) < 0) {
		report(f->d, DOCTOR_FAIL, "checksums", fix_reconvert, "%s", error_message());
		error_clear();
	}
}

/* Every record of expert layer l in f->path: record i is expert i, or in
 * a shard expert l->records[i], each with its own checksum and seed. */
static void deep_layer(struct doctor_file *f, const struct verify *v, const struct manifest_expert_layer *l)
{
	size_t n = (size_t)l->n_records;
	uint64_t seed = manifest_record_seed(l->layer, 0);
	if (!l->records) {
		f->sizes = &l->record_bytes;
		f->sums = l->checksums;
		f->seeds = &seed;
		f->experts = NULL;
		deep_file(f, v, n, NULL);
		return;
	}
	uint64_t *offs = calloc(n + 1, sizeof *offs), *sizes = calloc(n + 1, sizeof *sizes);
	uint64_t *sums = calloc(n + 1, sizeof *sums), *seeds = calloc(n + 1, sizeof *seeds);
	if (offs && sizes && sums && seeds) {
		for (size_t i = 0; i < n; i++) {
			offs[i] = (uint64_t)i * l->record_bytes;
			sizes[i] = l->record_bytes;
			sums[i] = l->checksums[l->records[i]];
			seeds[i] = seed + (uint64_t)l->records[i];
		}
		f->sizes = sizes;
		f->sums = sums;
		f->seeds = seeds;
		f->experts = l->records;
		deep_file(f, v, n, offs);
		f->experts = NULL;
	} else {
		report(f->d, DOCTOR_FAIL, "checksums", NULL, "out of memory");
	}
	free(offs);
	free(sizes);
	free(sums);
	free(seeds);
}

static void check_deep(struct doctor *d, const struct manifest *m)
{
	char path[4096];
	size_t n = m->n_tensors;
	uint64_t *offs = calloc(n ? n : 1, sizeof *offs), *lens = calloc(n ? n : 1, sizeof *lens);
	uint64_t *sums = calloc(n ? n : 1, sizeof *sums), *seeds = calloc(n ? n : 1, sizeof *seeds);
	const char **names = calloc(n ? n : 1, sizeof *names);
	uint8_t *buf = malloc(DOCTOR_CHUNK_BYTES);
	struct doctor_file f = { .d = d, .path = path };
	struct verify v = { .buf = buf, .buf_bytes = DOCTOR_CHUNK_BYTES, .bad = deep_bad, .progress = progress, .ctx = &f };
	if (!offs || !lens || !sums || !seeds || !names || !buf) {
		report(d, DOCTOR_FAIL, "checksums", NULL, "out of memory");
		goto out;
	}
	d->total_bytes = 0;
	for (size_t i = 0; i < n; i++) {
		offs[i] = m->tensors[i].offset;
		lens[i] = m->tensors[i].bytes;
		sums[i] = m->tensors[i].checksum;
		seeds[i] = manifest_tensor_seed(m->tensors[i].name, m->tensors[i].offset);
		names[i] = m->tensors[i].name;
		d->total_bytes += lens[i];
	}
	/* The expert files, then the mirror copies that are there (a missing
	 * one is check_mirrors' business). */
	size_t copies = 0;
	for (size_t k = 0; k <= m->n_mirrors; k++)
		for (size_t l = 0; l < m->n_expert_layers; l++)
			if (copy_exists(d, m, k, l, path, sizeof path)) {
				d->total_bytes += m->layers[l].record_bytes * (uint64_t)m->layers[l].n_records;
				copies++;
			}
	d->total_bytes += !d->total_bytes;
	double t0 = clock_now_s();
	int before = d->n[DOCTOR_FAIL];
	snprintf(path, sizeof path, "%s/%s", d->dir, m->resident_file);
	f.sizes = lens;
	f.sums = sums;
	f.seeds = seeds;
	f.names = names;
	deep_file(&f, &v, n, offs);
	f.names = NULL;
	for (size_t k = 0; k <= m->n_mirrors; k++)
		for (size_t l = 0; l < m->n_expert_layers; l++)
			if (copy_exists(d, m, k, l, path, sizeof path))
				deep_layer(&f, &v, &m->layers[l]);
	if (d->tty)
		fprintf(stderr, "\r%60s\r", "");
	if (d->mismatches > DOCTOR_MISMATCH_LINES)
		report(d, DOCTOR_FAIL, "checksums", fix_reconvert, "... and %d more mismatches",
		       d->mismatches - DOCTOR_MISMATCH_LINES);
	if (d->n[DOCTOR_FAIL] == before && m->shard.present)
		report(d, DOCTOR_PASS, "checksums", NULL, "%zu resident tensors and the %zu expert files' records of "
		       "shard %d of %d verified (%.2f GB in %.1f s)", n, copies, m->shard.rank, m->shard.ranks,
		       d->done_bytes / 1e9, clock_now_s() - t0);
	else if (d->n[DOCTOR_FAIL] == before)
		report(d, DOCTOR_PASS, "checksums", NULL, "%zu resident tensors and %zu x %d expert records verified "
		       "(%.2f GB in %.1f s)", n, copies, m->n_experts, d->done_bytes / 1e9, clock_now_s() - t0);
out:
	free(buf);
	free(names);
	free(seeds);
	free(sums);
	free(lens);
	free(offs);
}

/* The first registered mirror holding expert layer l's file, or -1. */
static int mirror_of(const struct manifest *m, size_t l)
{
	for (size_t k = 0; k < m->n_mirrors; k++)
		if (manifest_mirror_has(&m->mirrors[k], m->layers[l].layer))
			return (int)k;
	return -1;
}

/* Files larger than the manifest says: the manifest and data may not
 * belong together. A missing or short file fails manifest_load, but for an
 * expert file a registered mirror holds whole (manifest_load checked that
 * mirror), which the mirror then serves alone: a warning with the way back
 * to two copies. */
static void check_sizes(struct doctor *d, const struct manifest *m)
{
	char path[4096], a[32], b[32], fix[4096 + 128];
	struct stat st;
	uint64_t total = 0;
	int bad = 0;
	for (size_t l = 0; l <= m->n_expert_layers; l++) {
		const char *rel = l < m->n_expert_layers ? m->layers[l].file : m->resident_file;
		uint64_t want = l < m->n_expert_layers ? m->layers[l].record_bytes * (uint64_t)m->layers[l].n_records
						      : m->resident_bytes;
		snprintf(path, sizeof path, "%s/%s", d->dir, rel);
		bool missing = stat(path, &st) != 0;
		int k = l < m->n_expert_layers && (missing || (uint64_t)st.st_size < want) ? mirror_of(m, l) : -1;
		if (k >= 0) {
			snprintf(fix, sizeof fix, "copy %s/%s back to %s (colibri mirror --verify then checks both copies)",
				 m->mirrors[k].dir, rel, path);
			report(d, DOCTOR_WARN, "files", fix, "%s is %s: the mirror %s serves that layer alone", path,
			       missing ? "missing" : "short", m->mirrors[k].dir);
			bad++;
			if (!missing)
				total += (uint64_t)st.st_size;
			continue;
		}
		if (missing) {
			report(d, DOCTOR_FAIL, "files", fix_reconvert, "%s: %s", path, strerror(errno));
			bad++;
			continue;
		}
		total += (uint64_t)st.st_size;
		if ((uint64_t)st.st_size != want) {
			report(d, DOCTOR_WARN, "files", fix_reconvert, "%s is %s, the manifest expects %s", path,
			       plan_bytes_str(a, (uint64_t)st.st_size), plan_bytes_str(b, want));
			bad++;
		}
	}
	if (!bad)
		report(d, DOCTOR_PASS, "files", NULL, "%s and %zu expert files present with the sizes the manifest gives "
		       "(%s)", m->resident_file, m->n_expert_layers, plan_bytes_str(a, total));
}

/* Returns true when the manifest loaded (and fills *m). */
static bool check_container(struct doctor *d, struct manifest *m, bool deep)
{
	struct model_config cfg;
	char path[4096];
	bool cfg_ok = model_config_load(&cfg, d->dir) == 0;
	if (cfg_ok)
		report(d, DOCTOR_PASS, "config", NULL, "config.json: %s, %d layers, %d experts, top-%d", cfg.model_type,
		       cfg.n_layers, cfg.n_experts, cfg.top_k);
	else
		report(d, DOCTOR_FAIL, "config", fix_reconvert, "%s", error_message());
	error_clear();
	if (manifest_load(m, d->dir) != 0) {
		report(d, DOCTOR_FAIL, "manifest", fix_unloadable, "%s", error_message());
		error_clear();
		return false;
	}
	report(d, DOCTOR_PASS, "manifest", NULL, "manifest.json: format %d, %s experts, %zu resident tensors, %zu MoE "
	       "layers of %d experts", m->version, quant_type_name(m->expert_quant), m->n_tensors, m->n_expert_layers,
	       m->n_experts);
	if (cfg_ok && strcmp(cfg.model_type, m->model_type))
		report(d, DOCTOR_FAIL, "manifest", fix_reconvert, "manifest model_type %s differs from config.json's %s",
		       m->model_type, cfg.model_type);
	check_sizes(d, m);
	check_mirrors(d, m);
	snprintf(path, sizeof path, "%s/tokenizer.json", d->dir);
	if (access(path, R_OK) == 0)
		report(d, DOCTOR_PASS, "tokenizer", NULL, "tokenizer.json present");
	else
		report(d, DOCTOR_WARN, "tokenizer", "convert from a checkpoint folder that holds tokenizer.json, or pass "
		       "token ids (--tokens)", "no tokenizer.json: text prompts cannot be encoded");
	if (deep)
		check_deep(d, m);
	return true;
}

static void check_io(struct doctor *d, const char *file)
{
	struct io_uring ring;
	int rc = io_uring_queue_init(4, &ring, 0);
	if (rc == 0) {
		io_uring_queue_exit(&ring);
		report(d, DOCTOR_PASS, "io_uring", NULL, "io_uring_queue_init works");
	} else {
		report(d, DOCTOR_WARN, "io_uring", "allow io_uring (sysctl kernel.io_uring_disabled=0; in a container, a "
		       "seccomp profile that permits io_uring_setup)", "io_uring_queue_init: %s; expert reads fall back "
		       "to a pread thread pool", strerror(-rc));
	}
	if (!file)
		return;
	struct blockdev dev;
	blockdev_identify(&dev, file);
	int fd = open(file, O_RDONLY | O_DIRECT | O_CLOEXEC);
	void *buf = NULL;
	ssize_t r = -1;
	int err = fd < 0 ? errno : posix_memalign(&buf, 4096, 4096);
	if (!err) {
		r = pread(fd, buf, 4096, 0);
		err = r < 0 ? errno : 0;
	}
	if (r == 4096)
		report(d, DOCTOR_PASS, "O_DIRECT", NULL, "%s (%s): a 4096-byte O_DIRECT read works", file, dev.fs_type);
	else if (err == EINVAL)
		report(d, DOCTOR_WARN, "O_DIRECT", "keep the model on a local file system that supports O_DIRECT "
		       "(ext4, xfs, btrfs), not tmpfs or a network mount", "%s (%s) refuses O_DIRECT: expert reads go "
		       "through the page cache, which --ram does not count", file, dev.fs_type);
	else
		report(d, DOCTOR_FAIL, "O_DIRECT", fix_reconvert, "%s: cannot read: %s", file,
		       r >= 0 ? "short read" : strerror(err));
	free(buf);
	if (fd >= 0)
		close(fd);
}

static void check_memory(struct doctor *d, struct plan_container *c)
{
	char a[32], b[32], e[32];
	struct plan p;
	int64_t avail = topology_available_memory_bytes();
	c->in.ram_min = true;
	if (plan_compute(&p, &c->in)) {
		report(d, DOCTOR_FAIL, "memory", fix_reconvert, "%s", p.error);
		return;
	}
	if (avail < 0)
		report(d, DOCTOR_WARN, "memory", "mount /proc", "cannot read /proc/meminfo");
	else if ((uint64_t)avail < p.min_bytes)
		report(d, DOCTOR_FAIL, "memory", "free memory (close other programs) or raise the cgroup memory limit",
		       "%s available, below the minimum budget of %s (resident, KV for %d positions, one token's experts, "
		       "scratch)", plan_bytes_str(a, (uint64_t)avail), plan_bytes_str(b, p.min_bytes), c->in.ctx);
	else
		report(d, DOCTOR_PASS, "memory", NULL, "%s available; the minimum budget is %s, every expert cached %s "
		       "(at %d positions)", plan_bytes_str(a, (uint64_t)avail), plan_bytes_str(b, p.min_bytes),
		       plan_bytes_str(e, p.full_bytes), c->in.ctx);
	struct rlimit rl;
	uint64_t arena = p.cache_bytes_all;
	if (avail > 0 && arena > (uint64_t)avail)
		arena = (uint64_t)avail;
	if (geteuid() != 0 && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < arena)
		report(d, DOCTOR_WARN, "memlock", "ulimit -l unlimited (LimitMEMLOCK=infinity for a service)",
		       "the locked-memory limit (%s) is below the expert cache (up to %s): its frames cannot be "
		       "registered with io_uring, so reads take a slightly slower path",
		       plan_bytes_str(a, (uint64_t)rl.rlim_cur), plan_bytes_str(b, arena));
	else
		report(d, DOCTOR_PASS, "memlock", NULL, "the expert cache can be registered with io_uring");
}

static void check_thp(struct doctor *d)
{
	char line[256] = "";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	if (!f) {
		report(d, DOCTOR_PASS, "huge pages", NULL, "transparent huge pages not available on this kernel");
		return;
	}
	if (!fgets(line, sizeof line, f))
		line[0] = 0;
	fclose(f);
	line[strcspn(line, "\n")] = 0;
	if (strstr(line, "[never]"))
		report(d, DOCTOR_WARN, "huge pages", "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (as root)",
		       "transparent huge pages are off (%s): more TLB misses on the resident weights", line);
	else
		report(d, DOCTOR_PASS, "huge pages", NULL, "transparent huge pages: %s", line);
}

static void check_profiles(struct doctor *d, struct plan_container *c)
{
	struct plan_machine *m = calloc(1, sizeof *m);
	char fix[4200];
	if (!m || plan_machine_discover(m, (const char *const *)c->paths, c->n_paths, 0) != 0) {
		report(d, DOCTOR_WARN, "disk profile", NULL, "cannot identify the disks of the expert files");
		free(m);
		return;
	}
	snprintf(fix, sizeof fix, "colibri iobench %s (measures and saves it; plan and run then use it)", d->dir);
	for (int i = 0; i < m->n_disks; i++) {
		const struct plan_disk *k = &m->disks[i];
		const char *name = k->profile.dev.name[0] ? k->profile.dev.name : k->profile.dev.key;
		if (k->profiled)
			report(d, DOCTOR_PASS, "disk profile", NULL, "%s: %d measured points", name, k->profile.n_points);
		else
			report(d, DOCTOR_WARN, "disk profile", fix, "%s (%d expert files) has no saved profile: plan cannot "
			       "estimate disk time", name, k->n_files);
	}
	free(m);
}

int cmd_doctor(int argc, char **argv)
{
	struct doctor d = { .tty = isatty(2) };
	bool deep = false;
	static const struct option opts[] = {
		{ "model", required_argument, 0, 'm' }, { "deep", no_argument, 0, 'd' },
		{ "help", no_argument, 0, 'h' },        { 0, 0, 0, 0 },
	};
	int ch;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (ch == 'm')
			d.dir = optarg;
		else if (ch == 'd')
			deep = true;
		else {
			fprintf(ch == 'h' ? stdout : stderr, "usage: colibri doctor --model DIR [--deep]\n"
				"  Checks the container (manifest, files, sizes; --deep: every checksum) and the system\n"
				"  (io_uring, O_DIRECT, memory, huge pages, disk profile). Exit status 1 on any failure.\n");
			return ch == 'h' ? 0 : 2;
		}
	}
	if (!d.dir || optind != argc) {
		fprintf(stderr, "usage: colibri doctor --model DIR [--deep]\n");
		return 2;
	}
	struct manifest man;
	bool loaded = check_container(&d, &man, deep);
	char file[4096];
	/* The first expert file that holds a record: a shard's may hold none. */
	size_t probe = 0;
	while (loaded && probe < man.n_expert_layers && man.layers[probe].n_records == 0)
		probe++;
	bool first = loaded && probe < man.n_expert_layers &&
		     manifest_copy_path(&man, d.dir, 0, probe, file, sizeof file);
	manifest_free(&man);
	check_io(&d, first ? file : NULL);
	struct plan_container c;
	memset(&c, 0, sizeof c);
	if (loaded && plan_container_load(&c, d.dir, 0, 0, 0, 1) == 0) {
		check_memory(&d, &c);
		check_profiles(&d, &c);
	}
	error_clear();
	plan_container_free(&c);
	check_thp(&d);
	printf("doctor: %d passed, %d warnings, %d failed\n", d.n[DOCTOR_PASS], d.n[DOCTOR_WARN], d.n[DOCTOR_FAIL]);
	return d.n[DOCTOR_FAIL] ? 1 : 0;
}
