/*
 * load — reading one record into its frame, from one copy or striped over
 * several, and failing over between copies (see store_internal.h).
 *
 * A load is a sequence of reads; each read goes through these steps:
 *
 *   load_start     picks the candidates and the block count, joins a pump queue
 *   load_pump      gives each block a copy (stripe_pick, or the one solo copy)
 *                  and a store_block, and queues its io_op on the ring
 *   load_block_done  one block finished; a failed block stops the issue of
 *                  the rest; the last one to finish calls load_read_done
 *   load_read_done verifies the checksum over the whole record and decides
 *
 * With one copy holding the layer nothing changes from a store without
 * mirrors: a failed read (error, end of file, checksum) is read once more,
 * then fails. With several, load_read_done blames copies:
 *
 *   - a failed block blames the copy that served it;
 *   - a checksum mismatch of a read that one copy served blames that copy;
 *   - a mismatch of a read that several copies served blames nobody yet:
 *     they become suspects and the record is read again from each of them
 *     alone; every copy whose read alone fails is blamed, every one whose
 *     read verifies is good. The load ends once the frame holds a verified
 *     read and no suspect is left (the last read is repeated from a good
 *     copy if a suspect's overwrote it).
 *
 * A blamed copy leaves the rotation (copies_fail, one warning per copy) and
 * is not read again in this load; the next read stripes over the copies
 * left. A striped read happens only when no copy is a suspect or good, and
 * its failure blames a copy or makes every copy it used a suspect; each
 * copy is then read alone at most twice (as a suspect, and again as the
 * good copy). So a load ends after at most 3 x copies reads; it fails once
 * every copy holding the layer is blamed, with a message naming each file
 * and why.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/checksum.h"
#include "base/error.h"
#include "storage/store_internal.h"

static int popcount8(uint8_t m)
{
	return __builtin_popcount(m);
}

static int lowest(uint8_t m)
{
	assert(m);
	return __builtin_ctz(m);
}

int load_init(struct expert_store *s, int depth)
{
	s->n_blocks = 2 * depth;
	s->blocks_prefetch_max = depth;
	s->loads = calloc((size_t)s->pool.n_frames, sizeof *s->loads);
	s->blocks = calloc((size_t)s->n_blocks, sizeof *s->blocks);
	if (!s->loads || !s->blocks)
		return error_set(ENOMEM, "out of memory");
	for (int32_t f = 0; f < s->pool.n_frames; f++)
		s->loads[f].pump_prev = s->loads[f].pump_next = -1;
	s->block_free = -1;
	for (int32_t i = s->n_blocks - 1; i >= 0; i--) {
		s->blocks[i].frame = -1;
		s->blocks[i].next_free = s->block_free;
		s->block_free = i;
	}
	for (int p = 0; p < IO_OP_PRIO_COUNT; p++)
		s->pump_head[p] = s->pump_tail[p] = -1;
	return 0;
}

void load_free(struct expert_store *s)
{
	free(s->loads);
	free(s->blocks);
	s->loads = NULL;
	s->blocks = NULL;
}

/* ---- pump queues: reads with blocks left to issue, FIFO per priority ---- */

static void pump_append(struct expert_store *s, int32_t f)
{
	struct store_load *ld = &s->loads[f];
	int p = ld->prio;
	assert(!ld->pumping);
	ld->pumping = true;
	ld->pump_next = -1;
	ld->pump_prev = s->pump_tail[p];
	if (s->pump_tail[p] >= 0)
		s->loads[s->pump_tail[p]].pump_next = f;
	else
		s->pump_head[p] = f;
	s->pump_tail[p] = f;
	s->n_pumping++;
}

static void pump_unlink(struct expert_store *s, int32_t f)
{
	struct store_load *ld = &s->loads[f];
	int p = ld->prio;
	assert(ld->pumping);
	if (ld->pump_prev >= 0)
		s->loads[ld->pump_prev].pump_next = ld->pump_next;
	else
		s->pump_head[p] = ld->pump_next;
	if (ld->pump_next >= 0)
		s->loads[ld->pump_next].pump_prev = ld->pump_prev;
	else
		s->pump_tail[p] = ld->pump_prev;
	ld->pump_prev = ld->pump_next = -1;
	ld->pumping = false;
	s->n_pumping--;
}

/* ---- reads ---- */

void load_begin(struct expert_store *s, int32_t f)
{
	struct store_load *ld = &s->loads[f];
	assert(!ld->pumping && ld->n_inflight == 0);
	memset(ld, 0, sizeof *ld);
	ld->pump_prev = ld->pump_next = -1;
	ld->solo = -1;
}

/* The copies the current read may use. */
static uint8_t load_candidates(const struct expert_store *s, const struct store_layer *l,
			       const struct store_load *ld)
{
	if (ld->solo >= 0)
		return (uint8_t)(1u << ld->solo);
	return copies_candidates(&s->copies, l->holders & (uint8_t)~ld->bad);
}

void load_start(struct expert_store *s, int32_t f, enum io_op_prio prio)
{
	const struct frame *fr = &s->pool.frames[f];
	const struct store_layer *l = &s->layers[fr->layer];
	struct store_load *ld = &s->loads[f];
	assert(!ld->pumping && ld->n_inflight == 0);
	uint8_t cand = load_candidates(s, l, ld);
	assert(cand);
	ld->n_blocks = stripe_blocks(&s->stripe, l->record_bytes, popcount8(cand));
	ld->next_block = 0;
	ld->bytes_done = 0;
	ld->err = 0;
	ld->used = ld->failed = 0;
	ld->prio = (uint8_t)prio;
	pump_append(s, f);
}

static void load_block_done(struct io_op *op);

/* Issues the next block of frame f's read with block b. */
static void block_issue(struct expert_store *s, int32_t f, struct store_block *b)
{
	const struct frame *fr = &s->pool.frames[f];
	struct store_layer *l = &s->layers[fr->layer];
	struct store_load *ld = &s->loads[f];
	uint32_t i = ld->next_block++;
	uint8_t cand = load_candidates(s, l, ld);
	uint64_t rec_off;
	uint32_t len;
	stripe_block_range(&s->stripe, l->record_bytes, ld->n_blocks, i, &rec_off, &len);
	int c = popcount8(cand) == 1 ? lowest(cand) : stripe_pick(&s->stripe, &l->credit, cand, len);
	const struct copy_file *cf = &l->copy[c];

	struct io_op *op = &b->op;
	memset(op, 0, sizeof *op);
	op->kind = IO_OP_READ;
	op->prio = ld->prio;
	op->fd = cf->fd;
	op->file_index = cf->file_index;
	op->direct = cf->direct;
	op->buf_index = store_frame_buf_index(s, f);
	op->buf = buffer_pool_frame_data(&s->pool, f) + rec_off;
	op->offset = store_record_offset(l, fr->expert) + rec_off;
	op->len_bytes = len;
	op->done = load_block_done;
	op->ctx = s;
	assert(cf->fd >= 0);
	assert(op->offset % IO_RING_ALIGN == 0 && (uintptr_t)op->buf % IO_RING_ALIGN == 0 &&
	       len % IO_RING_ALIGN == 0);
	b->frame = f;
	b->copy = (uint8_t)c;
	b->prefetch = ld->prio == IO_OP_PRIO_PREFETCH;
	if (b->prefetch)
		s->n_blocks_prefetch++;
	ld->used |= (uint8_t)(1u << c);
	ld->n_inflight++;
	io_ring_queue(&s->ring, op);
}

void load_pump(struct expert_store *s)
{
	while (s->block_free >= 0) {
		int32_t f = s->pump_head[IO_OP_PRIO_DEMAND];
		if (f < 0 && s->n_blocks_prefetch < s->blocks_prefetch_max)
			f = s->pump_head[IO_OP_PRIO_PREFETCH];
		if (f < 0)
			return;
		struct store_block *b = &s->blocks[s->block_free];
		s->block_free = b->next_free;
		b->next_free = -1;
		block_issue(s, f, b);
		if (s->loads[f].next_block == s->loads[f].n_blocks)
			pump_unlink(s, f);
	}
}

void load_promote(struct expert_store *s, int32_t f)
{
	struct store_load *ld = &s->loads[f];
	if (ld->prio == IO_OP_PRIO_DEMAND)
		return;
	bool pumping = ld->pumping;
	if (pumping)
		pump_unlink(s, f);
	ld->prio = IO_OP_PRIO_DEMAND;
	if (pumping)
		pump_append(s, f);
	/* O(blocks) = O(io_depth): joins of prefetches are a few per step. */
	for (int32_t i = 0; i < s->n_blocks; i++) {
		struct store_block *b = &s->blocks[i];
		if (b->frame != f)
			continue;
		io_ring_promote(&s->ring, &b->op);
		if (b->prefetch) {
			b->prefetch = false;
			s->n_blocks_prefetch--;
		}
	}
}

/* ---- ends of reads ---- */

static const char *load_err_text(int err, char *buf, size_t n)
{
	if (err == -EBADMSG)
		return "checksum mismatch";
	if (err == -ENODATA)
		return "unexpected end of file";
	snprintf(buf, n, "read error: %s", strerror(-err));
	return buf;
}

/* The load failed for good: sets the message a waiter will see. */
static void load_fail(struct expert_store *s, int32_t f, int err)
{
	const struct frame *fr = &s->pool.frames[f];
	const struct store_layer *l = &s->layers[fr->layer];
	const struct store_load *ld = &s->loads[f];
	uint64_t off = store_record_offset(l, fr->expert);
	int rc = 0;
	if (!fr->awaited && !fr->pin_wait) {
		store_frame_failed(s, f, 0);
		return;
	}
	if (popcount8(l->holders) == 1) {
		/* The message of a store without mirrors. */
		const char *path = l->copy[lowest(l->holders)].path;
		if (err == -EBADMSG)
			rc = error_set(EIO, "layer %d expert %d: checksum mismatch at offset %" PRIu64 " in %s",
				       fr->layer, fr->expert, off, path);
		else if (err == -ENODATA)
			rc = error_set(EIO, "layer %d expert %d: unexpected end of file at offset %" PRIu64
				       " in %s (read %u of %" PRIu64 " bytes)",
				       fr->layer, fr->expert, off, path, ld->bytes_done, l->record_bytes);
		else
			rc = error_set(-err, "layer %d expert %d: read error at offset %" PRIu64 " in %s: %s",
				       fr->layer, fr->expert, off, path, strerror(-err));
	} else {
		char list[900] = "", tmp[128];
		size_t len = 0;
		for (int c = 0; c < COPIES_MAX; c++) {
			if (!(l->holders & (1u << c)))
				continue;
			len += (size_t)snprintf(list + len, len < sizeof list ? sizeof list - len : 0, "%s%s: %s",
						len ? "; " : "", l->copy[c].path,
						load_err_text(ld->copy_err[c], tmp, sizeof tmp));
		}
		rc = error_set(EIO, "layer %d expert %d: no copy holds a verified record at offset %" PRIu64
			       " (%s)", fr->layer, fr->expert, off, list);
	}
	store_frame_failed(s, f, rc);
}

/* Copy c failed this record with err. */
static void load_blame(struct expert_store *s, int32_t f, int c, int err, uint64_t err_offset)
{
	const struct frame *fr = &s->pool.frames[f];
	const struct store_layer *l = &s->layers[fr->layer];
	struct store_load *ld = &s->loads[f];
	char tmp[128];
	ld->bad |= (uint8_t)(1u << c);
	ld->suspects &= (uint8_t)~(1u << c);
	ld->copy_err[c] = (int16_t)err;
	copies_fail(&s->copies, c, "%s: %s in layer %d expert %d at offset %" PRIu64, l->copy[c].path,
		    load_err_text(err, tmp, sizeof tmp), fr->layer, fr->expert, err_offset);
}

/* Every block of the current read of frame f has finished. */
static void load_read_done(struct expert_store *s, int32_t f)
{
	struct frame *fr = &s->pool.frames[f];
	const struct store_layer *l = &s->layers[fr->layer];
	struct store_load *ld = &s->loads[f];
	uint64_t seed = l->checksum_seed + (uint64_t)fr->expert;
	bool ok = !ld->failed &&
		  checksum_xxh3(buffer_pool_frame_data(&s->pool, f), l->record_bytes, seed) == l->checksums[fr->expert];
	enum io_op_prio prio = fr->awaited || fr->pin_wait ? IO_OP_PRIO_DEMAND : (enum io_op_prio)ld->prio;

	if (popcount8(l->holders) == 1) {
		if (ok) {
			store_frame_loaded(s, f);
		} else if (fr->attempt == 0) {
			fr->attempt = 1;
			s->stats.read_retries++;
			load_start(s, f, prio);
		} else {
			load_fail(s, f, ld->failed ? ld->err : -EBADMSG);
		}
		return;
	}

	if (ok) {
		if (ld->solo >= 0)
			ld->good |= (uint8_t)(1u << ld->solo);
		if (!ld->suspects) {
			store_frame_loaded(s, f);
			return;
		}
	} else if (ld->failed) {
		uint64_t rec_off = store_record_offset(l, fr->expert);
		for (int c = 0; c < COPIES_MAX; c++)
			if (ld->failed & (1u << c))
				load_blame(s, f, c, ld->copy_err[c], c == ld->err_copy ? ld->err_offset : rec_off);
	} else if (popcount8(ld->used) == 1) {
		load_blame(s, f, lowest(ld->used), -EBADMSG, store_record_offset(l, fr->expert));
	} else {
		ld->suspects |= ld->used & (uint8_t)~(ld->bad | ld->good);
	}

	/* The next read: a suspect alone, else a good copy again, else the
	 * copies not blamed yet, striped. */
	uint8_t good = ld->good & (uint8_t)~ld->bad;
	if (ld->suspects) {
		ld->solo = (int8_t)lowest(ld->suspects);
		ld->suspects &= (uint8_t)~(1u << ld->solo);
	} else if (good) {
		ld->solo = (int8_t)lowest(good);
	} else if (l->holders & (uint8_t)~ld->bad) {
		ld->solo = -1;
	} else {
		load_fail(s, f, -EIO);
		return;
	}
	if (fr->attempt < UINT8_MAX)
		fr->attempt++;
	s->stats.read_retries++;
	load_start(s, f, prio);
}

/* Completion callback of every block. */
static void load_block_done(struct io_op *op)
{
	struct store_block *b = (struct store_block *)((char *)op - offsetof(struct store_block, op));
	struct expert_store *s = op->ctx;
	int32_t f = b->frame;
	struct store_load *ld = &s->loads[f];
	s->stats.bytes_read += op->done_bytes;
	store_frame_stats(s, f)->bytes_read += op->done_bytes;
	copies_count(&s->copies, b->copy, op->done_bytes);
	ld->bytes_done += op->done_bytes;
	if (op->res) {
		if (!ld->failed) {
			ld->err = op->res;
			ld->err_offset = op->offset + op->done_bytes;
			ld->err_copy = b->copy;
		}
		ld->failed |= (uint8_t)(1u << b->copy);
		ld->copy_err[b->copy] = (int16_t)op->res;
		/* The read has failed: issue no more of its blocks. */
		if (ld->pumping)
			pump_unlink(s, f);
		ld->n_blocks = ld->next_block;
	}
	if (b->prefetch)
		s->n_blocks_prefetch--;
	b->frame = -1;
	b->prefetch = false;
	b->next_free = s->block_free;
	s->block_free = (int32_t)(b - s->blocks);
	assert(ld->n_inflight > 0);
	if (--ld->n_inflight == 0 && ld->next_block == ld->n_blocks)
		load_read_done(s, f);
	load_pump(s);
}
