/*
 * files — whole-file reads, JSON parsing, atomic writes, copies and tree
 * removal, each failing with a message that names the path.
 */
#ifndef COLIBRI_ENGINE_FILES_H
#define COLIBRI_ENGINE_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* Reads a whole file into a malloc'd NUL-terminated buffer (caller frees).
 * -errno with a message naming the file on failure. */
int file_read_all(const char *path, char **data, size_t *len);

/* Reads a whole input that may be a pipe or a terminal ("-": standard
 * input) until end of file, into a malloc'd NUL-terminated buffer of *len
 * bytes (NUL bytes inside are kept). -errno with a message naming it. */
int file_read_input(const char *path, char **data, size_t *len);

/* Parses a JSON file; -EINVAL with "PATH: malformed JSON near byte N" on
 * error, -ENOENT if absent. The caller frees *out with cJSON_Delete. */
int json_load(const char *path, struct cJSON **out);

/* Writes data to path atomically: a temporary PATH.tmp-PID-N of its own
 * (so that processes saving one file at once never mix their bytes),
 * fsync, rename; the last rename wins. */
int file_write_atomic(const char *path, const void *data, size_t len);

/* Reads len bytes of fd at off into buf, retrying short reads and EINTR:
 * 0, or -errno (-EIO at end of file). No message: the caller names what it
 * was reading. */
int file_pread_full(int fd, void *buf, uint64_t len, uint64_t off);

/* Reads (write_it false) or writes len bytes of fd at off, retrying short
 * transfers and EINTR: 0, or -errno (-EIO at end of file) with a message
 * naming path, the operation and the offset. */
int file_io_at(int fd, void *buf, size_t len, uint64_t off, bool write_it, const char *path);

/* Copies src to dst (created or truncated) chunk bytes at a time through
 * buf, never the whole file in memory, and syncs dst; the source's and
 * the copy's pages leave the page cache behind it, so a later check of
 * the copy reads the disk. step(ctx, bytes), when given, runs after each
 * chunk; its nonzero return stops the copy and is the result. */
int file_copy_through(const char *src, const char *dst, void *buf, size_t chunk, int (*step)(void *ctx, uint64_t bytes),
		      void *ctx);

/* Copies src to dst (created or truncated). */
int file_copy(const char *src, const char *dst);

/* Puts the finished folder tmp at dest: what is at dest is moved aside,
 * tmp renamed into place, the old one removed, and dest's parent synced so
 * that the rename lasts. On failure dest is as it was. The caller decides
 * beforehand whether dest may be replaced. */
int dir_publish(const char *tmp, const char *dest);

/* Keeps a file that was refused (corrupt, truncated, another model's): it
 * is renamed to PATH.refused, or PATH.refused.N for the first N from 2 that
 * is free, and the new name written into aside[0..n). Never deleted, so the
 * user can look at it or recover it. -errno with a message when it cannot
 * be renamed or 999 copies are already there. */
int file_put_aside(const char *path, char *aside, size_t n);

/* Removes path and everything below it; a missing path is not an error. */
int dir_remove_tree(const char *path);

/* mkdir -p of the folder holding path (0755); -errno on failure. */
int dir_make_parent(const char *path);

#endif
