/*
 * seq_state — see seq_state.h.
 *
 * File layout of seq_state_save (little-endian):
 *   char[8]  "CLBSEQ02"
 *   u64      model_id
 *   u32      n_parts, u32 pos
 *   n_parts x { u64 pos_bytes, u64 fixed_bytes }
 *   for each part: rows of positions [0, pos), then the fixed bytes
 *   i32      the checkpoint's position, -1 none; then, when there is one,
 *            each part's fixed bytes at the checkpoint
 *   u64      XXH3-64 of everything above
 * "CLBSEQ01" files (no checkpoint field) are still read.
 */
#include "engine/forward/seq_state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/error.h"

#define SEQ_MAGIC "CLBSEQ02"
#define SEQ_MAGIC_V1 "CLBSEQ01"

uint64_t seq_state_bytes(const struct seq_part_size *sizes, int n_parts, int32_t ctx)
{
	uint64_t n = 0;
	for (int i = 0; i < n_parts; i++)
		n += (uint64_t)sizes[i].pos_bytes * (uint64_t)ctx + 3 * (uint64_t)sizes[i].fixed_bytes;
	return n;
}

int seq_state_init(struct seq_state *s, const struct seq_part_size *sizes, int n_parts, int32_t ctx)
{
	memset(s, 0, sizeof *s);
	s->ctx = ctx;
	s->snap_pos = -1;
	s->ckpt_pos = -1;
	const char *replay = getenv("COLIBRI_SEQ_REPLAY");
	s->force_replay = replay && strcmp(replay, "1") == 0;
	s->parts = calloc(n_parts > 0 ? (size_t)n_parts : 1, sizeof *s->parts);
	if (!s->parts)
		return error_set(ENOMEM, "out of memory");
	s->n_parts = n_parts;
	for (int i = 0; i < n_parts; i++) {
		struct seq_part *p = &s->parts[i];
		p->pos_bytes = sizes[i].pos_bytes;
		p->fixed_bytes = sizes[i].fixed_bytes;
		if (p->pos_bytes && !(p->rows = calloc((size_t)ctx, p->pos_bytes)))
			return error_set(ENOMEM, "cannot allocate the sequence state of %d positions", ctx);
		if (p->fixed_bytes && (!(p->fixed = calloc(1, p->fixed_bytes)) || !(p->fixed_snap = calloc(1, p->fixed_bytes)) ||
				       !(p->fixed_ckpt = calloc(1, p->fixed_bytes))))
			return error_set(ENOMEM, "cannot allocate the sequence state");
		s->has_fixed |= p->fixed_bytes > 0;
	}
	return 0;
}

void seq_state_free(struct seq_state *s)
{
	for (int i = 0; s->parts && i < s->n_parts; i++) {
		free(s->parts[i].rows);
		free(s->parts[i].fixed);
		free(s->parts[i].fixed_snap);
		free(s->parts[i].fixed_ckpt);
	}
	free(s->parts);
	memset(s, 0, sizeof *s);
}

void seq_state_reset(struct seq_state *s)
{
	s->pos = 0;
	s->snap_pos = -1;
	s->ckpt_pos = -1;
	for (int i = 0; i < s->n_parts; i++)
		if (s->parts[i].fixed)
			memset(s->parts[i].fixed, 0, s->parts[i].fixed_bytes);
}

void seq_state_snapshot(struct seq_state *s)
{
	s->snap_pos = s->pos;
	for (int i = 0; i < s->n_parts; i++)
		if (s->parts[i].fixed)
			memcpy(s->parts[i].fixed_snap, s->parts[i].fixed, s->parts[i].fixed_bytes);
}

int seq_state_truncate(struct seq_state *s, int32_t pos)
{
	if (pos < 0 || pos > s->pos)
		return error_set(EINVAL, "sequence state: cannot go to position %d of %d", pos, s->pos);
	if (pos == s->pos)
		return 0;
	if (s->has_fixed || s->force_replay)
		return -EAGAIN; /* no message: the caller replays */
	s->pos = pos;
	return 0;
}

void seq_state_checkpoint(struct seq_state *s)
{
	if (!s->has_fixed)
		return;
	s->ckpt_pos = s->pos;
	for (int i = 0; i < s->n_parts; i++)
		if (s->parts[i].fixed)
			memcpy(s->parts[i].fixed_ckpt, s->parts[i].fixed, s->parts[i].fixed_bytes);
}

int seq_state_restore_checkpoint(struct seq_state *s, int32_t pos)
{
	if (s->ckpt_pos <= 0 || s->ckpt_pos > pos || s->ckpt_pos > s->pos)
		return -EAGAIN;
	s->pos = s->ckpt_pos;
	s->snap_pos = -1;
	for (int i = 0; i < s->n_parts; i++)
		if (s->parts[i].fixed)
			memcpy(s->parts[i].fixed, s->parts[i].fixed_ckpt, s->parts[i].fixed_bytes);
	return 0;
}

int seq_state_restore(struct seq_state *s)
{
	if (s->snap_pos < 0)
		return error_set(EINVAL, "sequence state: no snapshot to restore");
	s->pos = s->snap_pos;
	for (int i = 0; i < s->n_parts; i++)
		if (s->parts[i].fixed)
			memcpy(s->parts[i].fixed, s->parts[i].fixed_snap, s->parts[i].fixed_bytes);
	return 0;
}

/* Writes or reads n bytes, hashing them. */
static int put(FILE *f, XXH3_state_t *h, const void *p, size_t n)
{
	XXH3_64bits_update(h, p, n);
	return n && fwrite(p, 1, n, f) != n ? -EIO : 0;
}

static int get(FILE *f, XXH3_state_t *h, void *p, size_t n)
{
	if (n && fread(p, 1, n, f) != n)
		return -EIO;
	XXH3_64bits_update(h, p, n);
	return 0;
}

int seq_state_save(const struct seq_state *s, uint64_t model_id, FILE *f, const char *name)
{
	XXH3_state_t *h = XXH3_createState();
	if (!h)
		return error_set(ENOMEM, "out of memory");
	XXH3_64bits_reset(h);
	uint32_t head[2] = { (uint32_t)s->n_parts, (uint32_t)s->pos };
	int rc = put(f, h, SEQ_MAGIC, 8);
	rc = rc ? rc : put(f, h, &model_id, sizeof model_id);
	rc = rc ? rc : put(f, h, head, sizeof head);
	for (int i = 0; !rc && i < s->n_parts; i++) {
		uint64_t sz[2] = { s->parts[i].pos_bytes, s->parts[i].fixed_bytes };
		rc = put(f, h, sz, sizeof sz);
	}
	for (int i = 0; !rc && i < s->n_parts; i++) {
		const struct seq_part *p = &s->parts[i];
		rc = put(f, h, p->rows, p->pos_bytes * (size_t)s->pos);
		rc = rc ? rc : put(f, h, p->fixed, p->fixed_bytes);
	}
	/* A checkpoint past the position (the state was cut back before it)
	 * is not kept. */
	int32_t ckpt = s->ckpt_pos <= s->pos ? s->ckpt_pos : -1;
	rc = rc ? rc : put(f, h, &ckpt, sizeof ckpt);
	for (int i = 0; !rc && ckpt >= 0 && i < s->n_parts; i++)
		rc = put(f, h, s->parts[i].fixed_ckpt, s->parts[i].fixed_bytes);
	uint64_t sum = XXH3_64bits_digest(h);
	XXH3_freeState(h);
	if (!rc && fwrite(&sum, sizeof sum, 1, f) != 1)
		rc = -EIO;
	return rc ? error_set(EIO, "%s: cannot write the sequence state", name) : 0;
}

int seq_state_load(struct seq_state *s, uint64_t model_id, FILE *f, const char *name)
{
	XXH3_state_t *h = XXH3_createState();
	if (!h)
		return error_set(ENOMEM, "out of memory");
	XXH3_64bits_reset(h);
	seq_state_reset(s);
	char magic[8];
	uint64_t id = 0, sum = 0;
	uint32_t head[2] = { 0, 0 };
	int rc = 0;
	bool v1 = false;
	if (get(f, h, magic, 8) || (memcmp(magic, SEQ_MAGIC, 8) != 0 && !(v1 = !memcmp(magic, SEQ_MAGIC_V1, 8))))
		rc = error_set(EINVAL, "%s: not a colibri sequence state", name);
	if (!rc && (get(f, h, &id, sizeof id) || get(f, h, head, sizeof head)))
		rc = error_set(EINVAL, "%s: truncated sequence state", name);
	if (!rc && id != model_id)
		rc = error_set(EINVAL, "%s: the sequence state belongs to another model", name);
	if (!rc && (head[0] != (uint32_t)s->n_parts || head[1] > (uint32_t)s->ctx))
		rc = error_set(EINVAL, "%s: the sequence state has %u parts and %u positions; this model and context "
			       "take %d parts and %d positions", name, head[0], head[1], s->n_parts, s->ctx);
	for (int i = 0; !rc && i < s->n_parts; i++) {
		uint64_t sz[2];
		if (get(f, h, sz, sizeof sz))
			rc = error_set(EINVAL, "%s: truncated sequence state", name);
		else if (sz[0] != s->parts[i].pos_bytes || sz[1] != s->parts[i].fixed_bytes)
			rc = error_set(EINVAL, "%s: part %d of the sequence state has another layout", name, i);
	}
	for (int i = 0; !rc && i < s->n_parts; i++) {
		struct seq_part *p = &s->parts[i];
		if (get(f, h, p->rows, p->pos_bytes * (size_t)head[1]) || get(f, h, p->fixed, p->fixed_bytes))
			rc = error_set(EINVAL, "%s: truncated sequence state", name);
	}
	/* The checkpoint's position is trusted only once the checksum holds. */
	int32_t ckpt = -1;
	if (!rc && !v1 && get(f, h, &ckpt, sizeof ckpt))
		rc = error_set(EINVAL, "%s: truncated sequence state", name);
	for (int i = 0; !rc && ckpt >= 0 && s->has_fixed && i < s->n_parts; i++)
		if (get(f, h, s->parts[i].fixed_ckpt, s->parts[i].fixed_bytes))
			rc = error_set(EINVAL, "%s: truncated sequence state", name);
	uint64_t want = XXH3_64bits_digest(h);
	XXH3_freeState(h);
	if (!rc && (fread(&sum, sizeof sum, 1, f) != 1 || sum != want))
		rc = error_set(EINVAL, "%s: the sequence state is corrupt (checksum mismatch)", name);
	if (!rc && (ckpt < -1 || ckpt > (int32_t)head[1] || (ckpt >= 0 && !s->has_fixed)))
		rc = error_set(EINVAL, "%s: the sequence state's checkpoint at %d is not in [0, %u]", name, ckpt, head[1]);
	if (rc) {
		seq_state_reset(s);
	} else {
		s->pos = (int32_t)head[1];
		s->ckpt_pos = ckpt;
	}
	return rc;
}
