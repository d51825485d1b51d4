/*
 * ggml_ref — ggml's own dequantization of raw GGML blocks, the
 * tests/ref/ggml/dequant_<type>.f32 references, so that
 * tests/test_ggml_ref.c can check colibri's reading of the block types
 * against the library that defines them. (llama.cpp's logits, the other
 * references there, come from bench/llama_logits.c, which already drives
 * libllama for the benchmark; this file holds only what that one lacks.)
 *
 * Our code, calling only the public API of ggml (ggml.h). It is built by
 * hand against a CPU build of upstream llama.cpp at commit 81ff7abe5 and
 * run once, offline; it is never built or run in CI, and no part of
 * llama.cpp lives in this repository. tests/ref/ggml/README.md gives the
 * build commands, the command that made each reference, and what the
 * references are compared with.
 *
 *   ggml_ref dequant TYPE IN.bin OUT.f32
 *       IN.bin raw GGML blocks of TYPE (f16 bf16 q8_0 q4_0 q4_k q5_k q6_k
 *       mxfp4), as tools/ggml_blocks.py writes them; OUT.f32 their values,
 *       float32 little-endian, from ggml's own to_float of the type
 *       (ggml_get_type_traits(type)->to_float).
 *
 * Exit status 0 on success, 1 with a message on stderr otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

static int usage(void)
{
	fprintf(stderr, "usage: ggml_ref dequant TYPE IN.bin OUT.f32\n");
	return 1;
}

/* Reads a whole file into a malloc'd buffer with a NUL after it. */
static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return NULL;
	}
	char *buf = NULL;
	long n = -1;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
		buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	if (!buf) {
		fprintf(stderr, "%s: cannot read\n", path);
		return NULL;
	}
	buf[n] = 0;
	*len = (size_t)n;
	return buf;
}

static int write_all(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!f) {
		perror(path);
		return 1;
	}
	size_t w = fwrite(data, 1, len, f);
	if (fclose(f) != 0 || w != len) {
		fprintf(stderr, "%s: short write\n", path);
		return 1;
	}
	return 0;
}

static int type_parse(const char *name, enum ggml_type *out)
{
	static const struct {
		const char *name;
		enum ggml_type type;
	} types[] = {
		{ "f16", GGML_TYPE_F16 },   { "bf16", GGML_TYPE_BF16 }, { "q8_0", GGML_TYPE_Q8_0 },
		{ "q4_0", GGML_TYPE_Q4_0 }, { "q4_k", GGML_TYPE_Q4_K }, { "q5_k", GGML_TYPE_Q5_K },
		{ "q6_k", GGML_TYPE_Q6_K }, { "mxfp4", GGML_TYPE_MXFP4 },
	};
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		if (!strcmp(name, types[i].name)) {
			*out = types[i].type;
			return 0;
		}
	}
	return -1;
}

/* The whole file as blocks of one type, through ggml's to_float in one call
 * (it walks the blocks in order; rows are consecutive, so the matrix's rows
 * need no separate calls). */
static int dequant(const char *type_name, const char *in, const char *out)
{
	enum ggml_type type;
	if (type_parse(type_name, &type)) {
		fprintf(stderr, "unknown type %s\n", type_name);
		return 1;
	}
	const struct ggml_type_traits *tt = ggml_get_type_traits(type);
	size_t len;
	char *raw = read_all(in, &len);
	if (!raw)
		return 1;
	if (len == 0 || len % tt->type_size) {
		fprintf(stderr, "%s: %zu bytes is not a whole number of %s blocks of %zu bytes\n", in, len, type_name,
			tt->type_size);
		free(raw);
		return 1;
	}
	int64_t n = (int64_t)(len / tt->type_size) * tt->blck_size;
	float *y = malloc((size_t)n * sizeof(float));
	int rc = 1;
	if (y) {
		tt->to_float(raw, y, n);
		rc = write_all(out, y, (size_t)n * sizeof(float));
	}
	free(y);
	free(raw);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "dequant"))
		return dequant(argv[2], argv[3], argv[4]);
	return usage();
}
