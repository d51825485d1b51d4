/*
 * seq_state — what a sequence carries from one step to the next, behind
 * one interface: KV caches, MLA latents and rope keys, DSA indexer keys
 * today; recurrent and convolution states (which do not grow with the
 * position) for the families to come.
 *
 * The state is a list of parts, one per (layer, block) that keeps any: a
 * part holds `pos_bytes` per position for ctx positions (rows, written by
 * position) and `fixed_bytes` that the blocks update in place. pos is the
 * number of positions the sequence holds. The parts' bytes are the blocks'
 * business (block.h); everything here works without knowing them.
 *
 * Going back: positional rows can be cut to any earlier position
 * (seq_state_truncate). A fixed part cannot: it only knows its latest
 * value. So a caller that may go back (drafting, grammar-forced tokens)
 * takes a snapshot first; seq_state_truncate then refuses with -EAGAIN when
 * a fixed part exists, and the caller restores the snapshot and runs the
 * tokens it keeps again (generate.c does). COLIBRI_SEQ_REPLAY=1 makes every
 * truncation take that path, so it is tested on the families without fixed
 * state.
 *
 * A checkpoint is a second, longer-lived copy of the fixed parts at one
 * position (seq_state_checkpoint): the prompt cache keeps one at the end of
 * a conversation's history, so that the next turn, which shares the
 * tokens up to there but not the generated ones after, can go back to it
 * (seq_state_restore_checkpoint) instead of starting over.
 *
 * Save and load (sessions on disk, a server's prompt cache) write the rows
 * of positions [0, pos), the fixed parts and the checkpoint, with the
 * layout and an identity of the model, so a state is never loaded into
 * another model.
 */
#ifndef COLIBRI_ENGINE_FORWARD_SEQ_STATE_H
#define COLIBRI_ENGINE_FORWARD_SEQ_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The size of one part. */
struct seq_part_size {
	size_t pos_bytes;          /* per position */
	size_t fixed_bytes;
};

struct seq_part {
	size_t pos_bytes, fixed_bytes;
	uint8_t *rows;             /* [ctx * pos_bytes], or NULL */
	uint8_t *fixed;            /* [fixed_bytes], or NULL */
	uint8_t *fixed_snap;       /* [fixed_bytes]: the snapshot's copy */
	uint8_t *fixed_ckpt;       /* [fixed_bytes]: the checkpoint's copy */
};

struct seq_state {
	int32_t ctx;               /* positions the rows hold */
	int32_t pos;               /* positions in the sequence */
	int n_parts;
	struct seq_part *parts;    /* [n_parts] */
	int32_t snap_pos;          /* position of the snapshot, -1 none */
	int32_t ckpt_pos;          /* position of the checkpoint, -1 none */
	bool has_fixed;            /* some part has fixed bytes */
	bool force_replay;         /* COLIBRI_SEQ_REPLAY: truncation always asks for a replay */
};

/* Bytes seq_state_init allocates for these parts and ctx. */
uint64_t seq_state_bytes(const struct seq_part_size *sizes, int n_parts, int32_t ctx);

/* Allocates the parts (zeroed; pos 0). A part of 0 + 0 bytes allocates
 * nothing. Free with seq_state_free, also after a failure. */
int seq_state_init(struct seq_state *s, const struct seq_part_size *sizes, int n_parts, int32_t ctx);
void seq_state_free(struct seq_state *s);

/* Rows of part i, or its fixed bytes; NULL when it has none. */
static inline uint8_t *seq_state_rows(const struct seq_state *s, int part)
{
	return s->parts[part].rows;
}

static inline uint8_t *seq_state_fixed(const struct seq_state *s, int part)
{
	return s->parts[part].fixed;
}

/* Empty sequence: pos 0, fixed parts zeroed, no snapshot, no checkpoint. */
void seq_state_reset(struct seq_state *s);

/* Remembers the current position and copies the fixed parts. */
void seq_state_snapshot(struct seq_state *s);

/* Goes back to pos (<= s->pos): 0, or -EAGAIN when fixed parts cannot go
 * back there (restore the snapshot and replay instead), -EINVAL for a pos
 * beyond the sequence. */
int seq_state_truncate(struct seq_state *s, int32_t pos);

/* Returns to the snapshot: its position and fixed parts. -EINVAL without
 * one. */
int seq_state_restore(struct seq_state *s);

/* Keeps the fixed parts at the current position as the checkpoint (a
 * state without fixed parts needs none: nothing happens). */
void seq_state_checkpoint(struct seq_state *s);

/* Goes back to the checkpoint if it lies in (0, pos] and at or before the
 * current position: 0 with s->pos the checkpoint's (the caller runs the
 * tokens after it again); -EAGAIN, without a message, otherwise. */
int seq_state_restore_checkpoint(struct seq_state *s, int32_t pos);

/* Writes the state (layout, model_id, pos, rows [0, pos), fixed parts) to
 * f; `name` names the file in messages. */
int seq_state_save(const struct seq_state *s, uint64_t model_id, FILE *f, const char *name);

/* Reads a state seq_state_save wrote into s, which must have the same
 * layout and model_id and room for its positions; anything else is refused
 * with a message naming `name`, and s is left reset. */
int seq_state_load(struct seq_state *s, uint64_t model_id, FILE *f, const char *name);

#endif
