/*
 * fuzz_gguf_meta — config.json, tokenizer.json and tokenizer_config.json
 * from GGUF metadata (engine/convert/gguf_meta.h).
 *
 * An input is a whole GGUF file image, written to a memfd and opened by
 * path. When the reader accepts it:
 *   - gguf_meta_config returns 0 with a config that model_config_parse
 *     accepts, or -EINVAL / -ENOTSUP / -ENOMEM with no config and a message
 *     naming the file;
 *   - gguf_meta_tokenizer returns 0 with both documents or neither, or an
 *     error as above; the documents it returns load in colibri's tokenizer
 *     (tokenizer_load on them written to a scratch folder), since a
 *     converter would otherwise write a container that cannot run.
 */
#include <cjson/cJSON.h>
#include <sys/mman.h>

#include "base/error.h"
#include "engine/convert/gguf.h"
#include "engine/convert/gguf_meta.h"
#include "engine/model/model_config.h"
#include "engine/text/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

static void write_doc(const char *dir, const char *name, const cJSON *j)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	char *s = cJSON_PrintUnformatted(j);
	FUZZ_ASSERT(s, "cJSON_Print failed");
	FILE *f = fopen(path, "wb");
	FUZZ_ASSERT(f, "cannot write %s", path);
	fputs(s, f);
	fclose(f);
	free(s);
}

static void check_rc(int rc, const char *path, const char *what)
{
	FUZZ_ASSERT(rc == -EINVAL || rc == -ENOTSUP || rc == -ENOMEM, "%s returned %d", what, rc);
	FUZZ_ASSERT(strstr(error_message(), path), "%s: message does not name the file: %s", what, error_message());
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *dir = fuzz_dir();
	int fd = memfd_create("fuzz_gguf_meta.gguf", 0);
	if (fd < 0)
		return 0;
	for (size_t off = 0; off < size;) {
		ssize_t w = write(fd, data + off, size - off);
		if (w <= 0) {
			close(fd);
			return 0;
		}
		off += (size_t)w;
	}
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	struct gguf_set set;
	error_clear();
	if (gguf_set_open(&set, path)) {
		error_clear();
		close(fd);
		return 0;
	}
	cJSON *cfg = (cJSON *)1;
	error_clear();
	int rc = gguf_meta_config(&set, &cfg);
	if (rc) {
		check_rc(rc, path, "gguf_meta_config");
		FUZZ_ASSERT(cfg == NULL, "config left set on error");
	} else {
		struct model_config *mc = calloc(1, sizeof *mc);
		FUZZ_ASSERT(mc, "out of memory");
		FUZZ_ASSERT(model_config_parse(mc, cfg, "fuzz") == 0, "synthesized config refused: %s", error_message());
		free(mc);
		cJSON_Delete(cfg);
	}
	cJSON *tj = (cJSON *)1, *tc = (cJSON *)1;
	error_clear();
	rc = gguf_meta_tokenizer(&set, &tj, &tc);
	if (rc) {
		check_rc(rc, path, "gguf_meta_tokenizer");
		FUZZ_ASSERT(tj == NULL && tc == NULL, "documents left set on error");
	} else if (tj || tc) {
		FUZZ_ASSERT(tj && tc, "one document without the other");
		write_doc(dir, "tokenizer.json", tj);
		write_doc(dir, "tokenizer_config.json", tc);
		char err[512];
		struct tokenizer *t = NULL;
		int lrc = tokenizer_load(&t, dir, err, sizeof err);
		FUZZ_ASSERT(lrc == 0 || lrc == -ENOMEM, "synthesized tokenizer does not load: %d %s", lrc, err);
		tokenizer_free(t);
		cJSON_Delete(tj);
		cJSON_Delete(tc);
	}
	error_clear();
	gguf_set_close(&set);
	close(fd);
	return 0;
}
