/*
 * serve_ui — see serve_ui.h. The table serve_ui_files is written by
 * tools/web_embed.sh into build/engine/serve/web_files.S.
 */
#include "engine/serve/serve_ui.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/files.h"

extern const struct serve_ui_file serve_ui_files[];

bool serve_ui_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > 128 || name[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return false;
	}
	return true;
}

const struct serve_ui_file *serve_ui_find(const char *name)
{
	for (const struct serve_ui_file *f = serve_ui_files; f->name; f++)
		if (!strcmp(f->name, name))
			return f;
	return NULL;
}

const char *serve_ui_type(const char *name)
{
	static const char *const types[][2] = {
		{ ".html", "text/html; charset=utf-8" }, { ".css", "text/css; charset=utf-8" },
		{ ".js", "text/javascript; charset=utf-8" }, { ".json", "application/json" },
		{ ".svg", "image/svg+xml" }, { ".png", "image/png" }, { ".ico", "image/x-icon" },
	};
	const char *dot = strrchr(name, '.');
	for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
		if (!strcmp(dot, types[i][0]))
			return types[i][1];
	return "application/octet-stream";
}

int serve_ui_read(const char *dir, const char *name, char **out, size_t *len)
{
	if (!serve_ui_name_ok(name))
		return -EINVAL;
	char path[4096];
	if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
		return -ENAMETOOLONG;
	struct stat st;
	if (stat(path, &st) != 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -ENOENT;
	if ((uint64_t)st.st_size > SERVE_UI_FILE_MAX)
		return -EFBIG;
	return file_read_all(path, out, len);
}
