/*
 * convert — see convert.h. The steps, in order:
 *   1. plan: check that OUT_DIR can be created or replaced, load
 *      config.json, open every shard, resolve every tensor the
 *      family needs (per-expert or fused expert layout, FP8 block scales)
 *      and check shapes and dtypes; nothing is written before this passes.
 *   2. write resident.bin, tensor by tensor, in row chunks;
 *   3. write experts/layer-LLL.bin, one 4 KiB-aligned record per expert;
 *   4. copy config/tokenizer files, write manifest.json, fsync, rename.
 */
#include "engine/convert/convert_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/files.h"
#include "engine/model/manifest.h"
#include "engine/model/model_config.h"
#include "engine/model/model_tensors.h"
#include "engine/convert/ckpt_names.h"
#include "engine/convert/safetensors.h"
#include "engine/convert/gguf.h"
#include "engine/convert/gguf_meta.h"
#include "engine/convert/gguf_view.h"
#include <cjson/cJSON.h>
#include "engine/model/verify.h"
#include "base/error.h"
#include "base/clock.h"

static volatile sig_atomic_t convert_interrupted;

static void convert_on_signal(int sig)
{
	(void)sig;
	convert_interrupted = 1;
}

/* Catches sig for the conversion, saving its disposition in old; a signal
 * that is ignored (nohup, a background job of a script) stays ignored. */
static void catch_signal(int sig, struct sigaction *old)
{
	struct sigaction sa = { .sa_handler = convert_on_signal };
	sigaction(sig, NULL, old);
	if (old->sa_handler != SIG_IGN)
		sigaction(sig, &sa, NULL);
}


static void progress_show(struct progress *p, bool final)
{
	double t = clock_now_s();
	if (p->quiet || (!final && t - p->last < (isatty(2) ? 0.5 : 10.0)))
		return;
	p->last = t;
	double mb = (double)p->bytes_read / 1e6, dt = t - p->t0 > 1e-6 ? t - p->t0 : 1e-6;
	/* A bar of tensors done: the experts' matrices, most of them in an
	 * MoE, are each a tensor here, so it follows the bytes closely. */
	double done = p->tensors_total ? (double)p->tensors_done / (double)p->tensors_total : 1;
	char bar[21];
	for (int i = 0; i < 20; i++)
		bar[i] = i < (int)(done * 20 + 1e-9) ? '#' : '.';
	bar[20] = 0;
	fprintf(stderr, "%sconvert: [%s] %3d%% tensors %" PRIu64 "/%" PRIu64 ", %.1f MB read, %.0f MB/s%s",
		isatty(2) ? "\r" : "", bar, (int)(done * 100), p->tensors_done, p->tensors_total, mb, mb / dt,
		final || !isatty(2) ? "\n" : "");
	fflush(stderr);
}

/* The 4-bit types: MTP layers keep int8 or better, and dense weights
 * default to int8, beside them. */
static bool four_bit(enum quant_type q)
{
	return q == QUANT_INT4 || q == QUANT_MXFP4;
}

enum quant_type convert_dense_quant(enum quant_type q)
{
	return four_bit(q) ? QUANT_INT8 : q;
}

void convert_options_default(struct convert_options *o)
{
	memset(o, 0, sizeof *o);
	o->quant = QUANT_INT4;
	o->group = QUANT_GROUP_DEFAULT;
	o->activations = "auto";
}

/* Quantizes the matrix in row chunks. Data bytes land at base + the row's
 * data offset and scales after the whole data block, through emit. */
typedef int (*emit_fn)(void *ctx, uint64_t off, const void *p, size_t len);

/* A GGUF tensor whose container type is its own: the rows as stored (GGML
 * blocks, f16, bf16 or f32), moved, no value recomputed; MXFP4 blocks
 * rearranged into the container's layout (codes, then e8m0 bytes). */
static int matrix_copy(struct converter *c, const struct matrix_src *s, enum quant_type type, emit_fn emit,
		       void *ctx, uint64_t base)
{
	int64_t cols = s->cols, rb = s->t->row_bytes;
	int64_t chunk = (int64_t)(c->qbuf_bytes / 2 / (size_t)rb);
	if (chunk < 1)
		return error_set(E2BIG, "%s: tensor %s: a row of %" PRId64 " bytes exceeds the staging buffer",
				 st_set_path(&c->set, s->t), s->t->name, rb);
	uint8_t *raw = c->qbuf, *out = c->qbuf + c->qbuf_bytes / 2;
	for (int64_t r = 0; r < s->rows; r += chunk) {
		if (convert_interrupted)
			return error_set(EINTR, "interrupted");
		int64_t n = s->rows - r < chunk ? s->rows - r : chunk;
		int rc = st_tensor_read_raw(&c->set, s->t, s->row0 + r, n, raw);
		if (rc)
			return rc;
		c->prog.bytes_read += (uint64_t)(n * rb);
		const uint8_t *p = raw;
		if (type == QUANT_MXFP4) {
			if (quant_mxfp4_from_ggml(out, raw, n, cols) != 0)
				return error_set(EINVAL, "%s: tensor %s: an MXFP4 scale in rows %" PRId64 "..%" PRId64
						 " is 255 (NaN in e8m0)", st_set_path(&c->set, s->t), gguf_view_source(s->t),
						 s->row0 + r, s->row0 + r + n - 1);
			p = out;
		}
		if ((rc = emit(ctx, base + quant_data_bytes(type, r, cols), p, quant_data_bytes(type, n, cols))))
			return rc;
		progress_show(&c->prog, false);
	}
	return 0;
}

static int matrix_write(struct converter *c, const struct matrix_src *s, enum quant_type type,
			int32_t group, emit_fn emit, void *ctx, uint64_t base)
{
	int64_t cols = s->cols;
	enum quant_type own;
	if (c->gguf && s->t->rows && s->t->rows->read_raw && !s->step && cv_native_type(c, s->t, &own) == 0 &&
	    own == type && type != QUANT_F32 && type != QUANT_BF16 && type != QUANT_F16)
		return matrix_copy(c, s, type, emit, ctx, base);
	if (!quant_type_quantizable(type))
		return error_set(EINVAL, "%s: tensor %s: cannot store %s values as %s", st_set_path(&c->set, s->t),
				 s->t->name, s->t->dtype_name, quant_type_name(type));
	int64_t chunk = (int64_t)(c->f32_floats / (size_t)cols);
	if (chunk < 1)
		return error_set(E2BIG, "%s: tensor %s: a row of %" PRId64 " inputs exceeds the staging buffer",
				 st_set_path(&c->set, s->t), s->t->name, cols);
	uint64_t data_all = quant_data_bytes(type, s->rows, cols);
	int32_t g = (type == QUANT_INT8 || type == QUANT_INT4) ? group : 0;
	for (int64_t r = 0; r < s->rows; r += chunk) {
		if (convert_interrupted)
			return error_set(EINTR, "interrupted");
		int64_t n = s->rows - r < chunk ? s->rows - r : chunk;
		int rc = cv_matrix_read(c, s, r, n, c->f32);
		if (rc)
			return rc;
		quant_matrix_quantize(c->qbuf, c->f32, type, n, cols, g);
		uint64_t dbytes = quant_data_bytes(type, n, cols);
		rc = emit(ctx, base + quant_data_bytes(type, r, cols), c->qbuf, dbytes);
		if (!rc && g) {
			uint64_t sbytes = (uint64_t)n * (uint64_t)(cols / g) * sizeof(float);
			uint64_t soff = (uint64_t)r * (uint64_t)(cols / g) * sizeof(float);
			rc = emit(ctx, base + data_all + soff, c->qbuf + dbytes, sbytes);
		}
		if (rc)
			return rc;
		progress_show(&c->prog, false);
	}
	return 0;
}

struct fd_sink {
	int fd;
	const char *path;
};

static int emit_fd(void *ctx, uint64_t off, const void *p, size_t len)
{
	struct fd_sink *s = ctx;
	const uint8_t *b = p;
	while (len > 0) {
		ssize_t w = pwrite(s->fd, b, len, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return error_set(w < 0 ? errno : EIO, "%s: write failed: %s", s->path,
					 strerror(w < 0 ? errno : EIO));
		b += w;
		len -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

static int emit_mem(void *ctx, uint64_t off, const void *p, size_t len)
{
	memcpy((uint8_t *)ctx + off, p, len);
	return 0;
}

/* The storage type of a resident tensor, falling back to bf16 when a
 * grouped type does not fit the shape. */
static enum quant_type resident_type(const struct converter *c, const struct tensor_spec *s,
				     const struct st_tensor *t)
{
	enum quant_type q = c->opt->quant;
	if (c->native && s->role != TENSOR_ROLE_VECTOR && s->role != TENSOR_ROLE_ROUTER &&
	    s->role != TENSOR_ROLE_INDEX && cv_native_type(c, t, &q) == 0 &&
	    quant_check_shape(q, s->shape[0], s->shape[1], 0) == 0)
		return q;
	switch (s->role) {
	case TENSOR_ROLE_VECTOR:
	case TENSOR_ROLE_ROUTER:
	case TENSOR_ROLE_INDEX:
		return QUANT_F32;
	case TENSOR_ROLE_EMBED:
		return q == QUANT_F32 ? QUANT_F32 : QUANT_BF16;
	case TENSOR_ROLE_DENSE:
		break;
	}
	enum quant_type d = c->dense_quant;
	if (c->opt->head_quant_set && strcmp(s->name, "lm_head.weight") == 0)
		d = c->opt->head_quant;
	/* MTP modules keep int8 or better, as their experts do. */
	if (s->layer >= c->cfg.n_layers && four_bit(d))
		d = QUANT_INT8;
	if (quant_check_shape(d, s->shape[0], s->shape[1], c->opt->group) != 0)
		return QUANT_BF16;
	return d;
}

static int write_resident(struct converter *c, struct manifest *m)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/resident.bin", c->tmp_dir);
	struct fd_sink sink = { .fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), .path = path };
	if (sink.fd < 0)
		return error_set(errno, "%s: cannot create: %s", path, strerror(errno));
	m->tensors = calloc(c->n_specs, sizeof *m->tensors);
	if (!m->tensors) {
		close(sink.fd);
		return error_set(ENOMEM, "out of memory");
	}
	uint64_t off = 0;
	int rc = 0;
	for (size_t i = 0; i < c->n_specs && !rc; i++) {
		const struct tensor_spec *s = &c->specs[i];
		const struct st_tensor *t = ckpt_names_find(&c->names, s->name);
		if (!t)
			continue; /* optional and absent: checked in plan */
		struct manifest_tensor *mt = &m->tensors[m->n_tensors++];
		mt->name = strdup(s->name);
		mt->type = resident_type(c, s, t);
		mt->group = (mt->type == QUANT_INT8 || mt->type == QUANT_INT4) ? c->opt->group : 0;
		mt->ndim = s->ndim;
		mt->shape[0] = s->shape[0];
		mt->shape[1] = s->shape[1];
		mt->offset = off;
		mt->bytes = quant_matrix_bytes(mt->type, s->shape[0], s->shape[1], mt->group);
		struct matrix_src src = { .t = t, .rows = st_tensor_rows(t), .cols = st_tensor_cols(t) };
		if (!mt->name)
			rc = error_set(ENOMEM, "out of memory");
		else if (s->role == TENSOR_ROLE_INDEX)
			rc = cv_resolve_index(c, &src, c->cfg.n_experts);
		else
			rc = cv_resolve_scale(c, &src, s->name, false);
		if (!rc)
			rc = matrix_write(c, &src, mt->type, mt->group, emit_fd, &sink, off);
		off = manifest_align_up(off + mt->bytes, MANIFEST_ALIGN);
		c->prog.tensors_done++;
	}
	if (!rc && ftruncate(sink.fd, (off_t)off) != 0)
		rc = error_set(errno, "%s: cannot size: %s", path, strerror(errno));
	for (size_t i = 0; !rc && i < m->n_tensors; i++) {
		struct manifest_tensor *t = &m->tensors[i];
		rc = verify_hash_range(&(struct verify){ .buf = c->qbuf, .buf_bytes = CONVERT_CHUNK_BYTES }, path,
				       sink.fd, t->offset, t->bytes, manifest_tensor_seed(t->name, t->offset), &t->checksum);
	}
	if (!rc && fsync(sink.fd) != 0)
		rc = error_set(errno, "%s: fsync failed: %s", path, strerror(errno));
	close(sink.fd);
	m->resident_file = strdup("resident.bin");
	m->resident_bytes = off;
	return rc;
}

/* The record layout of a layer: parts at 64-byte aligned offsets, the
 * record padded to MANIFEST_ALIGN. */
static void expert_layout(const struct converter *c, const enum quant_type q[EXPERT_PARTS],
			  struct manifest_expert_layer *l)
{
	uint64_t off = 0;
	for (int p = 0; p < EXPERT_PARTS; p++) {
		struct manifest_tensor *t = &l->parts[p];
		t->name = strdup(expert_part_name((enum expert_part)p));
		t->type = q[p];
		t->group = (q[p] == QUANT_INT8 || q[p] == QUANT_INT4) ? c->opt->group : 0;
		t->ndim = 2;
		model_expert_shape(&c->cfg, (enum expert_part)p, &t->shape[0], &t->shape[1]);
		t->offset = off;
		t->bytes = quant_matrix_bytes(q[p], t->shape[0], t->shape[1], t->group);
		off = manifest_align_up(off + t->bytes, MANIFEST_PART_ALIGN);
	}
	l->record_bytes = manifest_align_up(off, MANIFEST_ALIGN);
}

/* An MXFP4 source matrix into an mxfp4 record part as it is: the codes
 * and scales move, no value is recomputed. */
static int mx_copy(struct converter *c, const struct matrix_src *s, uint8_t *dst)
{
	uint8_t *blocks, *scales;
	int rc = cv_mx_gather(c, s, 0, s->rows, &blocks, &scales);
	if (rc)
		return rc;
	if (quant_mxfp4_from_packed(dst, blocks, scales, s->rows, s->cols) != 0) {
		int64_t k = 0;
		while (k < s->rows * (s->cols / 32) && scales[k] != 0xff)
			k++;
		int64_t at = s->row0 + s->first + k / (s->cols / 32) * s->step, out = s->rows * s->step;
		return error_set(EINVAL, "%s: tensor %s: the scale of expert %" PRId64 ", row %" PRId64 ", block %" PRId64
				 " is 255 (NaN in e8m0)", st_set_path(&c->set, s->mx_scales), s->mx_scales->name,
				 at / out, at % out, k % (s->cols / 32));
	}
	return 0;
}

/* A GGUF's experts keep their types, which may differ by part (Q4_K_M's
 * down projections are Q6_K) and by layer. */
static int expert_native_types(struct converter *c, int layer, enum quant_type q[EXPERT_PARTS])
{
	for (int p = 0; p < EXPERT_PARTS; p++) {
		struct matrix_src src;
		int rc = cv_resolve_expert(c, layer, 0, (enum expert_part)p, &src);
		rc = rc ? rc : cv_native_type(c, src.t, &q[p]);
		if (rc)
			return rc;
		if (quant_check_shape(q[p], src.rows, src.cols, 0) != 0)
			return error_set(EINVAL, "%s: tensor %s: %s", st_set_path(&c->set, src.t), gguf_view_source(src.t),
					 quant_shape_error(q[p], src.rows, src.cols, 0));
	}
	return 0;
}

static int write_expert_layer(struct converter *c, int layer, struct manifest_expert_layer *l)
{
	char rel[64], path[PATH_MAX];
	snprintf(rel, sizeof rel, "experts/layer-%03d.bin", layer);
	snprintf(path, sizeof path, "%s/%s", c->tmp_dir, rel);
	l->layer = layer;
	l->file = strdup(rel);
	/* MTP modules (layers past n_layers) keep int8 or better. */
	enum quant_type q = c->opt->quant;
	if (layer >= c->cfg.n_layers && four_bit(q))
		q = QUANT_INT8;
	enum quant_type parts[EXPERT_PARTS] = { q, q, q };
	int rc = c->native ? expert_native_types(c, layer, parts) : 0;
	if (rc)
		return rc;
	expert_layout(c, parts, l);
	int E = c->cfg.n_experts;
	l->checksums = calloc((size_t)E, sizeof *l->checksums);
	if (!l->file || !l->checksums)
		return error_set(ENOMEM, "out of memory");
	struct fd_sink sink = { .fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), .path = path };
	if (sink.fd < 0)
		return error_set(errno, "%s: cannot create: %s", path, strerror(errno));
	for (int e = 0; e < E && !rc; e++) {
		memset(c->record, 0, l->record_bytes);
		for (int p = 0; p < EXPERT_PARTS && !rc; p++) {
			struct matrix_src src;
			rc = cv_resolve_expert(c, layer, e, (enum expert_part)p, &src);
			if (!rc && src.mx_scales && l->parts[p].type == QUANT_MXFP4)
				rc = mx_copy(c, &src, c->record + l->parts[p].offset);
			else if (!rc)
				rc = matrix_write(c, &src, l->parts[p].type, l->parts[p].group, emit_mem,
						  c->record, l->parts[p].offset);
			c->prog.tensors_done++;
		}
		if (rc)
			break;
		l->checksums[e] = XXH3_64bits_withSeed(c->record, l->record_bytes, manifest_record_seed(layer, e));
		rc = emit_fd(&sink, (uint64_t)e * l->record_bytes, c->record, l->record_bytes);
	}
	if (!rc && fsync(sink.fd) != 0)
		rc = error_set(errno, "%s: fsync failed: %s", path, strerror(errno));
	close(sink.fd);
	return rc;
}

/* Whether OUT_DIR may be replaced (manifest_dir_replaceable). */
static int out_replaceable(const struct converter *c)
{
	return manifest_dir_replaceable(c->out, c->opt->force);
}

/* Step 0, before anything is read: OUT_DIR names a folder whose parent is
 * a writable folder, and is absent or replaceable, so that no work is done
 * for an output that cannot be published. Fills c->out, without trailing
 * slashes. */
static int out_check(struct converter *c)
{
	if (strlen(c->opt->out_dir) >= sizeof c->out - 32)
		return error_set(ENAMETOOLONG, "%.64s...: the output folder name is too long", c->opt->out_dir);
	snprintf(c->out, sizeof c->out, "%s", c->opt->out_dir);
	size_t n = strlen(c->out);
	while (n > 1 && c->out[n - 1] == '/')
		c->out[--n] = 0;
	const char *slash = strrchr(c->out, '/');
	const char *base = slash ? slash + 1 : c->out;
	if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
		return error_set(EINVAL, "output folder \"%s\" does not name a folder to create", c->opt->out_dir);
	char parent[PATH_MAX];
	if (!slash)
		snprintf(parent, sizeof parent, ".");
	else
		snprintf(parent, sizeof parent, "%.*s", slash == c->out ? 1 : (int)(slash - c->out), c->out);
	struct stat sb;
	int e = stat(parent, &sb) != 0 ? errno : S_ISDIR(sb.st_mode) ? 0 : ENOTDIR;
	if (e)
		return error_set(e, "%s: cannot be created: %s: %s", c->out, parent, strerror(e));
	if (access(parent, W_OK | X_OK) != 0)
		return error_set(errno, "%s: cannot be created: %s is not writable: %s", c->out, parent,
				 strerror(errno));
	return out_replaceable(c);
}

/* Step 1: the output can be published, and everything the conversion will
 * read exists with the right shape. */
/* What of the checkpoint colibri does not convert: a vision tower
 * (vision-language checkpoints: colibri runs the text model), MTP modules
 * the config announces but the checkpoint lacks (transformers drops mtp.*
 * when it saves; the model then runs without drafting), an MTP block the
 * config does not announce. Said by skip_notes_show once the plan holds. */
static void skip_absent_parts(struct converter *c)
{
	for (size_t f = 0; f < c->set.n_files; f++)
		for (size_t i = 0; i < c->set.files[f].n_tensors; i++)
			c->n_visual += strncmp(c->set.files[f].tensors[i].name, "model.visual.", 13) == 0;
	char probe[TENSOR_NAME_MAX];
	snprintf(probe, sizeof probe, "model.layers.%d.%s", c->cfg.n_layers,
		 c->cfg.arch == MODEL_ARCH_DEEPSEEK_V4 ? "e_proj.weight" : "eh_proj.weight");
	/* A DeepSeek-V4 MTP block that is there in part is converted, so that
	 * what it lacks is named. */
	if (c->cfg.n_mtp_layers > 0 && !ckpt_names_find(&c->names, probe) && !c->names.n_mtp_named) {
		c->mtp_absent = c->cfg.n_mtp_layers;
		c->cfg.n_mtp_layers = 0;
	}
	c->mtp_unannounced = c->cfg.n_mtp_layers == 0 && !c->mtp_absent && st_set_find(&c->set, "mtp.fc.weight");
}

/* One line for each part skip_absent_parts left out. */
static void skip_notes_show(const struct converter *c)
{
	if (c->opt->quiet)
		return;
	if (c->n_visual)
		fprintf(stderr, "convert: skipping the vision tower (%zu tensors model.visual.*); colibri runs the "
			"text model\n", c->n_visual);
	if (c->names.n_tower[1])
		fprintf(stderr, "convert: skipping the audio tower (%zu tensors model.audio.*); colibri runs the text "
			"model\n", c->names.n_tower[1]);
	if (c->names.n_tower[2])
		fprintf(stderr, "convert: skipping the MTP module (%zu tensors model.mtp.*); transformers does not run "
			"it either\n", c->names.n_tower[2]);
	if (c->mtp_absent)
		fprintf(stderr, "convert: config.json announces %d MTP module(s) but the checkpoint has no MTP "
			"tensors; converting without them (no drafting)\n", c->mtp_absent);
	if (c->mtp_unannounced)
		fprintf(stderr, "convert: the checkpoint has an MTP block (mtp.*) that config.json does not announce "
			"(mtp_num_hidden_layers); converting without it\n");
	if (c->names.n_mtp_skipped)
		fprintf(stderr, "convert: skipping %zu mtp.* tensors of MTP modules config.json does not announce "
			"(num_nextn_predict_layers %d); they do not draft\n", c->names.n_mtp_skipped, c->cfg.n_mtp_layers);
	if (c->fp4_seen)
		fprintf(stderr, "convert: FP4 (e2m1, ue8m0 per 32 inputs) routed experts are dequantized exactly to f32, "
			"then stored as %s (--quant)\n", quant_type_name(c->opt->quant));
	if (c->gguf && c->gv.n_unused)
		fprintf(stderr, "convert: %zu tensors of the GGUF are not used by the container (e.g. %s)\n",
			c->gv.n_unused, c->gv.unused_example);
	if (c->native)
		fprintf(stderr, "convert: GGUF tensors keep their types (the file's blocks, copied; --quant "
			"requantizes)\n");
	if (c->mx_seen && c->opt->quant == QUANT_MXFP4)
		fprintf(stderr, "convert: MXFP4 routed experts are copied as they are (codes and scales, no rounding)\n");
	else if (c->mx_seen)
		fprintf(stderr, "convert: MXFP4 routed experts are dequantized exactly to f32, then stored as %s (--quant; "
			"--quant mxfp4 keeps them as released)\n", quant_type_name(c->opt->quant));
}

/* Whether the checkpoint's routed experts are released in MXFP4
 * (gpt-oss's *_blocks of the first MoE layer). */
static bool released_mxfp4(const struct converter *c)
{
	for (int l = 0; l < c->cfg.n_layers; l++) {
		if (!model_config_layer_moe(&c->cfg, l))
			continue;
		char name[TENSOR_NAME_MAX];
		snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj_blocks", l);
		return c->cfg.expert_naming == EXPERT_NAMING_GPT_OSS && st_set_find(&c->set, name);
	}
	return false;
}

/* A GGUF input: the model from its metadata (gguf_meta), its tensors under
 * the container's names (gguf_view). The tensor list is made again once
 * skip_absent_parts has dropped MTP modules the file lacks. */
static int gguf_plan_open(struct converter *c)
{
	int rc = gguf_view_open(&c->gv, c->opt->hf_dir);
	if (rc)
		return rc;
	c->gv_open = true;
	rc = gguf_meta_config(&c->gv.g, &c->gguf_config);
	rc = rc ? rc : gguf_meta_tokenizer(&c->gv.g, &c->gguf_tokenizer, &c->gguf_tokenizer_config);
	rc = rc ? rc : model_config_parse(&c->cfg, c->gguf_config, c->opt->hf_dir);
	rc = rc ? rc : model_tensors_resident(&c->cfg, &c->specs, &c->n_specs);
	rc = rc ? rc : gguf_view_map(&c->gv, &c->set, &c->cfg, c->specs, c->n_specs);
	rc = rc ? rc : ckpt_names_init(&c->names, &c->set, &c->cfg);
	if (rc)
		return rc;
	skip_absent_parts(c);
	free(c->specs);
	c->specs = NULL;
	return model_tensors_resident(&c->cfg, &c->specs, &c->n_specs);
}

/* The largest expert record of a GGUF whose types are kept (types may
 * differ by layer). */
static int native_record_max(struct converter *c, uint64_t *max)
{
	*max = MANIFEST_ALIGN;
	for (int l = 0; l < c->cfg.n_layers + c->cfg.n_mtp_layers; l++) {
		if (!model_config_layer_moe(&c->cfg, l))
			continue;
		enum quant_type q[EXPERT_PARTS];
		struct manifest_expert_layer probe = { 0 };
		int rc = expert_native_types(c, l, q);
		if (rc)
			return rc;
		expert_layout(c, q, &probe);
		for (int p = 0; p < EXPERT_PARTS; p++)
			free(probe.parts[p].name);
		*max = probe.record_bytes > *max ? probe.record_bytes : *max;
	}
	return 0;
}

/* The manifest's quant.experts / quant.dense of a GGUF kept as it is: the
 * type of the first routed gate, and of layer 0's attention output (the
 * figures the planner and `colibri doctor` show; each tensor carries its
 * own). */
static void native_summary(struct manifest *m)
{
	if (m->n_expert_layers)
		m->expert_quant = m->layers[0].parts[EXPERT_PART_GATE].type;
	const struct manifest_tensor *o = manifest_find(m, "model.layers.0.self_attn.o_proj.weight");
	for (size_t i = 0; !o && i < m->n_tensors; i++)
		if (m->tensors[i].ndim == 2 && m->tensors[i].shape[1] > 1)
			o = &m->tensors[i];
	if (o)
		m->dense_quant = o->type;
}

static int convert_plan(struct converter *c, struct convert_options *resolved)
{
	int rc = out_check(c);
	if (!rc && c->gguf) {
		rc = gguf_plan_open(c);
	} else if (!rc) {
		rc = model_config_load(&c->cfg, c->opt->hf_dir);
		if (!rc)
			rc = st_set_open(&c->set, c->opt->hf_dir);
		if (!rc)
			rc = ckpt_names_init(&c->names, &c->set, &c->cfg);
		if (!rc)
			skip_absent_parts(c);
		if (!rc)
			rc = model_tensors_resident(&c->cfg, &c->specs, &c->n_specs);
	}
	if (rc)
		return rc;
	/* Experts released in 4 bits stay as they are unless --quant says otherwise. */
	if (!resolved->quant_set && released_mxfp4(c)) {
		resolved->quant = QUANT_MXFP4;
		if (!resolved->dense_quant_set)
			c->dense_quant = convert_dense_quant(QUANT_MXFP4);
	}
	int32_t g = c->opt->group;
	if (!c->native && (c->opt->quant == QUANT_INT8 || four_bit(c->opt->quant))) {
		bool mx = c->opt->quant == QUANT_MXFP4;
		for (int p = 0; p < EXPERT_PARTS; p++) {
			int64_t rows, cols;
			model_expert_shape(&c->cfg, (enum expert_part)p, &rows, &cols);
			if (quant_check_shape(c->opt->quant, rows, cols, g) == 0)
				continue;
			if (mx)
				return error_set(EINVAL, "%s: expert %s_proj has %" PRId64
						 " inputs, not a multiple of 32 (mxfp4 blocks)",
						 c->opt->hf_dir, expert_part_name((enum expert_part)p), cols);
			return error_set(EINVAL, "%s: expert %s_proj has %" PRId64
					 " inputs, not a multiple of --group-size %d (which must be a multiple of 32)",
					 c->opt->hf_dir, expert_part_name((enum expert_part)p), cols, g);
		}
	}
	for (size_t i = 0; i < c->n_specs; i++) {
		const struct tensor_spec *s = &c->specs[i];
		const struct st_tensor *t = ckpt_names_find(&c->names, s->name);
		if (!t) {
			if (s->optional)
				continue;
			char a[2 * TENSOR_NAME_MAX + 48];
			return error_set(EINVAL, "%s: missing tensor %s (model_type %s)", c->opt->hf_dir,
					 ckpt_names_missing(&c->names, s->name, a, sizeof a), c->cfg.model_type);
		}
		rc = cv_check_shape(c, t, s->ndim, s->shape, s->squeezed);
		struct matrix_src src = { .t = t, .rows = st_tensor_rows(t), .cols = st_tensor_cols(t) };
		if (!rc && s->role == TENSOR_ROLE_INDEX) {
			/* Small (vocab x top_k): every entry checked before writing. */
			uint8_t *buf = malloc(1u << 20);
			rc = buf ? cv_resolve_index(c, &src, c->cfg.n_experts) : error_set(ENOMEM, "out of memory");
			if (!rc)
				rc = cv_index_read(c, &src, 0, src.rows, NULL, buf, 1u << 20);
			free(buf);
		} else if (!rc)
			rc = cv_resolve_scale(c, &src, s->name, false);
		if (rc)
			return rc;
		c->prog.tensors_total++;
	}
	for (int l = 0; l < c->cfg.n_layers + c->cfg.n_mtp_layers; l++) {
		if (!model_config_layer_moe(&c->cfg, l))
			continue;
		for (int e = 0; e < c->cfg.n_experts; e++) {
			for (int p = 0; p < EXPERT_PARTS; p++) {
				struct matrix_src src;
				rc = cv_resolve_expert(c, l, e, (enum expert_part)p, &src);
				if (rc)
					return rc;
				c->prog.tensors_total++;
			}
		}
	}
	return 0;
}

/* A GGUF's documents, made from its metadata, into the container. */
static int write_gguf_docs(struct converter *c, struct manifest *m)
{
	const struct {
		const char *name;
		const cJSON *doc;
	} docs[] = { { "config.json", c->gguf_config },
		     { "tokenizer.json", c->gguf_tokenizer },
		     { "tokenizer_config.json", c->gguf_tokenizer_config } };
	for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
		if (!docs[i].doc)
			continue;
		char path[PATH_MAX];
		snprintf(path, sizeof path, "%s/%s", c->tmp_dir, docs[i].name);
		char *text = cJSON_PrintUnformatted(docs[i].doc);
		if (!text)
			return error_set(ENOMEM, "out of memory");
		int rc = file_write_atomic(path, text, strlen(text));
		cJSON_free(text);
		if (rc)
			return rc;
		if (docs[i].doc == c->gguf_tokenizer)
			m->has_tokenizer = true;
	}
	return 0;
}

static int copy_side_files(struct converter *c, struct manifest *m)
{
	if (c->gguf)
		return write_gguf_docs(c, m);
	const char *const *files = manifest_side_files;
	for (size_t i = 0; i < MANIFEST_SIDE_FILES; i++) {
		char src[PATH_MAX], dst[PATH_MAX];
		snprintf(src, sizeof src, "%s/%s", c->opt->hf_dir, files[i]);
		snprintf(dst, sizeof dst, "%s/%s", c->tmp_dir, files[i]);
		if (access(src, F_OK) != 0)
			continue;
		int rc = file_copy(src, dst);
		if (rc)
			return rc;
		if (strcmp(files[i], "tokenizer.json") == 0)
			m->has_tokenizer = true;
	}
	return 0;
}

/* Makes the temporary sibling folder of OUT_DIR that the container is
 * written into; an existing OUT_DIR is replaced only in publish(). */
static int prepare_out(struct converter *c)
{
	snprintf(c->tmp_dir, sizeof c->tmp_dir, "%s.tmp-XXXXXX", c->out);
	if (!mkdtemp(c->tmp_dir)) {
		int e = errno;
		c->tmp_dir[0] = 0;
		return error_set(e, "%s: cannot create a folder beside it: %s", c->out, strerror(e));
	}
	mode_t mask = umask(0);
	umask(mask);
	chmod(c->tmp_dir, 0777 & ~mask); /* mkdtemp makes it 0700 */
	char exp[PATH_MAX];
	snprintf(exp, sizeof exp, "%s/experts", c->tmp_dir);
	if (mkdir(exp, 0755) != 0)
		return error_set(errno, "%s: cannot create: %s", exp, strerror(errno));
	return 0;
}

/* Moves the finished folder into place, replacing an old container. What
 * is at OUT_DIR is checked again: it may have appeared or changed while
 * the conversion ran. */
static int publish(struct converter *c)
{
	int rc = out_replaceable(c);
	if (!rc)
		rc = dir_publish(c->tmp_dir, c->out);
	if (!rc)
		c->tmp_dir[0] = 0;
	return rc;
}

int convert_run(const struct convert_options *given)
{
	struct convert_options resolved = *given, *o = &resolved;
	struct converter c = { .opt = o };
	struct manifest m = { 0 };
	struct sigaction old_int, old_term, old_hup;
	int rc;

	if (o->group <= 0 || o->group % 32 != 0)
		return error_set(EINVAL, "--group-size %d must be a positive multiple of 32", o->group);
	struct stat in_st;
	bool in_ok = stat(o->hf_dir, &in_st) == 0;
	c.gguf = in_ok && S_ISREG(in_st.st_mode) && gguf_is_gguf(o->hf_dir);
	size_t in_len = strlen(o->hf_dir);
	if (!in_ok && in_len > 5 && !strcmp(o->hf_dir + in_len - 5, ".gguf"))
		return error_set(errno, "%s: cannot open: %s", o->hf_dir, strerror(errno));
	if (in_ok && S_ISREG(in_st.st_mode) && !c.gguf)
		return error_set(EINVAL, "%s: not a GGUF file (it does not start with \"GGUF\") nor a checkpoint "
				 "folder", o->hf_dir);
	convert_interrupted = 0;
	catch_signal(SIGINT, &old_int);
	catch_signal(SIGTERM, &old_term);
	catch_signal(SIGHUP, &old_hup);
	c.prog.quiet = o->quiet;
	c.prog.t0 = c.prog.last = clock_now_s();
	c.dense_quant = o->dense_quant_set ? o->dense_quant : convert_dense_quant(o->quant);
	/* A GGUF keeps its own types unless --quant asks for others. */
	c.native = c.gguf && !o->quant_set;

	if ((rc = convert_plan(&c, o)))
		goto fail;
	skip_notes_show(&c);
	/* Staging must hold one expert matrix whole (it is quantized into the
	 * record in one piece) and at least one chunk of resident rows. */
	size_t expert_floats = (size_t)c.cfg.moe_intermediate * (size_t)c.cfg.hidden;
	c.f32_floats = CONVERT_CHUNK_BYTES / sizeof(float);
	if (c.f32_floats < expert_floats)
		c.f32_floats = expert_floats;
	if ((size_t)c.cfg.hidden > c.f32_floats)
		c.f32_floats = (size_t)c.cfg.hidden;
	struct manifest_expert_layer probe = { 0 };
	enum quant_type pq = four_bit(o->quant) && c.cfg.n_mtp_layers ? QUANT_INT8 : o->quant;
	expert_layout(&c, (enum quant_type[EXPERT_PARTS]){ pq, pq, pq }, &probe);
	for (int p = 0; p < EXPERT_PARTS; p++)
		free(probe.parts[p].name);
	if (c.native && (rc = native_record_max(&c, &probe.record_bytes)))
		goto fail;
	c.f32 = malloc(c.f32_floats * sizeof(float));
	c.qbuf = malloc(c.f32_floats * sizeof(float) > CONVERT_CHUNK_BYTES ? c.f32_floats * sizeof(float)
									  : CONVERT_CHUNK_BYTES);
	c.qbuf_bytes = c.f32_floats * sizeof(float) > CONVERT_CHUNK_BYTES ? c.f32_floats * sizeof(float)
									  : CONVERT_CHUNK_BYTES;
	c.record = aligned_alloc(MANIFEST_ALIGN, probe.record_bytes);
	if (!c.f32 || !c.qbuf || !c.record) {
		rc = error_set(ENOMEM, "out of memory for conversion buffers");
		goto fail;
	}
	if ((rc = prepare_out(&c)))
		goto fail;

	snprintf(m.model_type, sizeof m.model_type, "%s", c.cfg.model_type);
	m.expert_quant = o->quant;
	m.dense_quant = c.dense_quant;
	snprintf(m.activations, sizeof m.activations, "%s", o->activations ? o->activations : "auto");
	m.group = o->group;
	m.n_experts = c.cfg.n_experts;
	if ((rc = write_resident(&c, &m)))
		goto fail;
	int stored = c.cfg.n_layers + c.cfg.n_mtp_layers;
	m.layers = calloc((size_t)stored, sizeof *m.layers);
	if (!m.layers) {
		rc = error_set(ENOMEM, "out of memory");
		goto fail;
	}
	for (int l = 0; l < stored; l++) {
		if (!model_config_layer_moe(&c.cfg, l))
			continue;
		if ((rc = write_expert_layer(&c, l, &m.layers[m.n_expert_layers++])))
			goto fail;
	}
	if (c.native)
		native_summary(&m);
	if ((rc = copy_side_files(&c, &m)) || (rc = manifest_write(&m, c.tmp_dir)))
		goto fail;
	if (convert_interrupted) {
		rc = error_set(EINTR, "interrupted");
		goto fail;
	}
	int dfd = open(c.tmp_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || syncfs(dfd) != 0) {
		rc = error_set(errno, "%s: cannot sync: %s", c.tmp_dir, strerror(errno));
		if (dfd >= 0)
			close(dfd);
		goto fail;
	}
	close(dfd);
	if ((rc = publish(&c)))
		goto fail;
	progress_show(&c.prog, true);
fail:
	if (rc && c.tmp_dir[0])
		dir_remove_tree(c.tmp_dir);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGHUP, &old_hup, NULL);
	manifest_free(&m);
	free(c.f32);
	free(c.qbuf);
	free(c.record);
	free(c.scale_buf);
	free(c.packed);
	free(c.specs);
	ckpt_names_free(&c.names);
	st_set_close(&c.set);
	if (c.gv_open)
		gguf_view_close(&c.gv);
	cJSON_Delete(c.gguf_config);
	cJSON_Delete(c.gguf_tokenizer);
	cJSON_Delete(c.gguf_tokenizer_config);
	return rc;
}
