/*
 * copies — the copies of each layer's expert file (the primary and its
 * mirrors), and which copies are in rotation. Internal to storage/.
 *
 * A copy is an index, the same for every layer: 0 the primary, c the
 * descriptor's mirror_paths[c - 1]. Each layer holds the copies whose file
 * opened with the right size (a bit mask, `holders`). Sets of copies are
 * 8-bit masks, bit c for copy c.
 *
 * Rotation is per copy, for all layers at once: a copy that fails is taken
 * out with one warning line naming it and why, and is then read only where
 * no copy in rotation holds a layer (copies_candidates), so a read is tried
 * on every copy before it fails. Failures are counted per copy either way.
 * A copy out of rotation comes back on probation after readmit_s seconds
 * (copies_readmit, called at each request), so one transient error does
 * not cost its disk's bandwidth for the rest of the run; each failure after
 * a return doubles the wait (up to COPIES_READMIT_MAX_S), so a copy that
 * stays broken costs one failed block per wait, retried on another copy.
 * Copies absent at open are reported once per copy (copies_report_missing),
 * not once per layer; a layer whose primary file is absent or short is read
 * from its mirrors alone, none of its stripes going to the primary.
 */
#ifndef COLIBRI_STORAGE_COPIES_H
#define COLIBRI_STORAGE_COPIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/expert_store.h"

#define COPIES_MAX EXPERT_COPIES_MAX
#define COPIES_READMIT_DEFAULT_S 30.0
#define COPIES_READMIT_MAX_S 3600.0

/* One copy of one layer's file. */
struct copy_file {
	char *path;                  /* NULL: the copy lacks the layer */
	int fd;                      /* -1 when absent */
	int file_index;              /* fixed-file slot, or -1 */
	bool direct;                 /* fd is O_DIRECT */
};

struct copy_set {
	int n_copies;                /* 1 + the highest copy index any layer names */
	uint8_t rotation;            /* copies in rotation */
	int32_t layers_held[COPIES_MAX];
	int32_t layers_missing[COPIES_MAX];  /* named but not opened */
	char first_missing[COPIES_MAX][512]; /* the first of those, and why */
	uint64_t bytes_read[COPIES_MAX];
	uint64_t blocks_read[COPIES_MAX];
	uint64_t failures[COPIES_MAX];
	double readmit_s;            /* first wait before a failed copy returns */
	double wait_s[COPIES_MAX];   /* its current wait; 0 before any failure */
	double back_at[COPIES_MAX];  /* monotonic time it returns; 0 in rotation */
	uint32_t readmissions[COPIES_MAX];
};

/* Every copy in rotation, none held yet; a failed copy returns after
 * readmit_s seconds (<= 0: COPIES_READMIT_DEFAULT_S). */
void copies_init(struct copy_set *cs, int n_copies, double readmit_s);

/* Puts back in rotation, with one line each, the copies whose wait has
 * passed at monotonic time now (seconds). */
void copies_readmit(struct copy_set *cs, double now);

/* Opens path read-only (O_DIRECT when direct; a file system that refuses it
 * gets a buffered descriptor and, the first time *warned_direct is false,
 * one warning) and checks that it holds want_bytes. Returns 0, or -errno
 * with the reason in why[why_bytes], nothing printed and no error_set: the
 * caller decides whether a missing copy is fatal. */
int copy_file_open(struct copy_file *cf, const char *path, bool direct, uint64_t want_bytes,
		   bool *warned_direct, char *why, size_t why_bytes);
void copy_file_close(struct copy_file *cf);

/* Copy c was named for a layer but could not be opened (why). */
void copies_missing(struct copy_set *cs, int c, const char *why);

/* One warning line per copy that lacks some layers it was named for. */
void copies_report_missing(const struct copy_set *cs, int n_layers_named);

/* The copies of `allowed` to read from: those in rotation, or all of
 * `allowed` when none of them is. */
static inline uint8_t copies_candidates(const struct copy_set *cs, uint8_t allowed)
{
	uint8_t r = allowed & cs->rotation;
	return r ? r : allowed;
}

static inline bool copies_in_rotation(const struct copy_set *cs, int c)
{
	return cs->rotation & (1u << c);
}

/* Counts a finished read of bytes from copy c. */
static inline void copies_count(struct copy_set *cs, int c, uint32_t bytes)
{
	cs->bytes_read[c] += bytes;
	cs->blocks_read[c]++;
}

/* Copy c failed (the reason, formatted, names file and offset): counts it
 * and, if it is in rotation, takes it out with one warning line. */
void copies_fail(struct copy_set *cs, int c, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
