/*
 * copies — opening the copies of each layer, rotation and the warnings (see
 * copies.h).
 */
#include "storage/copies.h"
#include "storage/io_ring.h"
#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(COPIES_MAX <= 8, "sets of copies are 8-bit masks");

static const char *copy_name(int c)
{
	return c == 0 ? "primary copy" : "mirror copy";
}

void copies_init(struct copy_set *cs, int n_copies, double readmit_s)
{
	memset(cs, 0, sizeof *cs);
	cs->n_copies = n_copies;
	cs->rotation = (uint8_t)((1u << n_copies) - 1);
	cs->readmit_s = readmit_s > 0 ? readmit_s : COPIES_READMIT_DEFAULT_S;
}

void copies_readmit(struct copy_set *cs, double now)
{
	for (int c = 0; c < cs->n_copies; c++) {
		if (copies_in_rotation(cs, c) || cs->back_at[c] <= 0 || now < cs->back_at[c])
			continue;
		cs->rotation |= (uint8_t)(1u << c);
		cs->back_at[c] = 0;
		cs->readmissions[c]++;
		fprintf(stderr, "colibri: %s %d is back in rotation after %g s (%" PRIu64
				" failed reads so far); a new failure takes it out for %g s\n",
			copy_name(c), c, cs->wait_s[c], cs->failures[c],
			cs->wait_s[c] * 2 < COPIES_READMIT_MAX_S ? cs->wait_s[c] * 2 : COPIES_READMIT_MAX_S);
	}
}

int copy_file_open(struct copy_file *cf, const char *path, bool direct, uint64_t want_bytes,
		   bool *warned_direct, char *why, size_t why_bytes)
{
	cf->fd = -1;
	cf->file_index = -1;
	cf->direct = false;
	cf->path = strdup(path);
	if (!cf->path) {
		snprintf(why, why_bytes, "out of memory");
		return -ENOMEM;
	}
	if (direct) {
		cf->fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
		cf->direct = cf->fd >= 0;
		if (cf->fd < 0 && errno == EINVAL && !*warned_direct) {
			fprintf(stderr, "colibri: warning: %s: the file system refuses O_DIRECT; "
					"reading experts through the page cache\n", path);
			*warned_direct = true;
		}
	}
	if (cf->fd < 0)
		cf->fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc = 0;
	struct stat st;
	if (cf->fd < 0) {
		rc = -errno;
		snprintf(why, why_bytes, "%s: cannot open: %s", path, strerror(errno));
	} else if (fstat(cf->fd, &st) != 0) {
		rc = -errno;
		snprintf(why, why_bytes, "%s: cannot stat: %s", path, strerror(errno));
	} else if ((uint64_t)st.st_size < want_bytes) {
		rc = -EINVAL;
		snprintf(why, why_bytes, "%s: truncated expert file: %" PRIu64 " bytes, expected %" PRIu64,
			 path, (uint64_t)st.st_size, want_bytes);
	}
	if (rc)
		copy_file_close(cf);
	return rc;
}

void copy_file_close(struct copy_file *cf)
{
	if (cf->fd >= 0)
		close(cf->fd);
	free(cf->path);
	cf->path = NULL;
	cf->fd = -1;
	cf->file_index = -1;
}

void copies_missing(struct copy_set *cs, int c, const char *why)
{
	if (cs->layers_missing[c]++ == 0)
		snprintf(cs->first_missing[c], sizeof cs->first_missing[c], "%s", why);
}

void copies_report_missing(const struct copy_set *cs, int n_layers_named)
{
	for (int c = 0; c < cs->n_copies; c++) {
		if (!cs->layers_missing[c])
			continue;
		fprintf(stderr, "colibri: warning: %s %d lacks %d of %d expert files (first: %s); %s\n",
			copy_name(c), c, cs->layers_missing[c], n_layers_named, cs->first_missing[c],
			c == 0 ? "their mirrors serve those layers alone"
			       : "those layers read from the other copies");
	}
}

void copies_fail(struct copy_set *cs, int c, const char *fmt, ...)
{
	cs->failures[c]++;
	if (!copies_in_rotation(cs, c))
		return;
	cs->rotation &= (uint8_t)~(1u << c);
	cs->wait_s[c] = cs->wait_s[c] > 0 ? cs->wait_s[c] * 2 : cs->readmit_s;
	if (cs->wait_s[c] > COPIES_READMIT_MAX_S)
		cs->wait_s[c] = COPIES_READMIT_MAX_S;
	cs->back_at[c] = clock_now_s() + cs->wait_s[c];
	char why[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	fprintf(stderr, "colibri: warning: %s %d is out of rotation: %s; %s; it is tried again in %g s\n",
		copy_name(c), c, why,
		cs->rotation ? "the other copies take its share"
			     : "no copy is left in rotation, every copy is still tried",
		cs->wait_s[c]);
}
