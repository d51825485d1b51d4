/*
 * serve_ui — see serve_ui.h. The table serve_ui_files is written by
 * tools/web_embed.sh into build/engine/serve/web_files.S.
 */
#include "engine/serve/serve_ui.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = 0;
	char *buf = NULL;
	if (fstat(fd, &st) != 0)
		rc = -errno;
	else if (!S_ISREG(st.st_mode))
		rc = -ENOENT;
	else if ((uint64_t)st.st_size > SERVE_UI_FILE_MAX)
		rc = -EFBIG;
	else if (!(buf = malloc((size_t)st.st_size + 1)))
		rc = -ENOMEM;
	size_t got = 0;
	while (!rc && got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			break;
		}
		got += (size_t)n;
	}
	close(fd);
	if (rc) {
		free(buf);
		return rc;
	}
	buf[got] = 0;
	*out = buf;
	*len = got;
	return 0;
}
