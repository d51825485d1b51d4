/*
 * serve_ui — the dashboard's static files (engine/serve/web/, docs/DASHBOARD.md):
 * compiled into the binary by tools/web_embed.sh, or read from a folder
 * given with --ui-dir. A file is named by its base name: letters, digits,
 * '.', '_' and '-', not starting with a dot, so a name never leaves the
 * folder.
 */
#ifndef COLIBRI_ENGINE_SERVE_UI_H
#define COLIBRI_ENGINE_SERVE_UI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One embedded file; the table ends with name NULL. data is followed by a
 * NUL that size leaves out. */
struct serve_ui_file {
	const char *name;
	const unsigned char *data;
	size_t size;
};

#define SERVE_UI_FILE_MAX (8ull << 20) /* bytes of a file read from --ui-dir */

/* True when name is a file name the dashboard may serve. */
bool serve_ui_name_ok(const char *name);

/* The embedded file called name, or NULL. */
const struct serve_ui_file *serve_ui_find(const char *name);

/* The Content-Type of a file by its extension. */
const char *serve_ui_type(const char *name);

/* Reads dir/name (name checked by serve_ui_name_ok) into a malloc'd
 * buffer. 0; -ENOENT when absent or not a regular file; -EFBIG past
 * SERVE_UI_FILE_MAX; -EINVAL for a bad name; another -errno (with
 * error_set's message) else. */
int serve_ui_read(const char *dir, const char *name, char **out, size_t *len);

#endif
