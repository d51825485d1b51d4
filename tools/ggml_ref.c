/*
 * ggml_ref — makes the outside references in tests/ref/ggml/ with ggml and
 * llama.cpp themselves, so that tests/test_ggml_ref.c can check colibri's
 * GGUF reading against the library that defines the format.
 *
 * Our code, calling only the public API of llama.cpp (llama.h) and ggml
 * (ggml.h). It is built by hand against a CPU build of upstream llama.cpp
 * at commit 81ff7abe5 and run once, offline; it is never built or run in
 * CI, and no part of llama.cpp lives in this repository.
 * tests/ref/ggml/README.md gives the build commands, the command that made
 * each reference, and what the references are compared with.
 *
 *   ggml_ref dequant TYPE IN.bin OUT.f32
 *       IN.bin raw GGML blocks of TYPE (f16 bf16 q8_0 q4_0 q4_k q5_k q6_k
 *       mxfp4), as tools/ggml_blocks.py writes them; OUT.f32 their values,
 *       float32 little-endian, from ggml's own to_float of the type
 *       (ggml_get_type_traits(type)->to_float).
 *
 *   ggml_ref logits MODEL.gguf TOKENS OUT.f32
 *       Loads MODEL.gguf (the first file of a split set brings the others)
 *       with llama.cpp on the CPU, decodes the comma-separated token ids in
 *       the file TOKENS as one batch at positions 0.. with the logits of
 *       every position, and writes them, float32 LE [n_tokens, n_vocab].
 *
 * The logits run fixes what would otherwise vary with the build or the
 * host, so that the reference states one arithmetic: one thread; the KV
 * cache in f32 (llama.cpp's default f16 cache would round K and V); flash
 * attention off (the plain KQ, softmax, KQV graph in f32); no repacked
 * weight layouts (use_extra_bufts false: each block type goes through its
 * type's own vec_dot, the activations quantized to the type's vec_dot_type
 * as ggml always does, Q8_0 or Q8_K for the block types, f16 / bf16 for
 * f16 / bf16 weights). Exit status 0 on success, 1 with a message on
 * stderr otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "llama.h"

static int usage(void)
{
	fprintf(stderr, "usage: ggml_ref dequant TYPE IN.bin OUT.f32\n"
			"       ggml_ref logits MODEL.gguf TOKENS OUT.f32\n");
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

/* The ids of a comma-separated list into a malloc'd array. */
static llama_token *parse_tokens(const char *text, int *n_out)
{
	int cap = 1;
	for (const char *p = text; *p; p++)
		cap += *p == ',';
	llama_token *ids = malloc((size_t)cap * sizeof *ids);
	int n = 0;
	const char *p = text;
	while (ids && *p && *p != '\n' && *p != '\r') {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v < 0 || v > INT32_MAX) {
			free(ids);
			return NULL;
		}
		ids[n++] = (llama_token)v;
		p = *end == ',' ? end + 1 : end;
	}
	*n_out = n;
	return ids;
}

static int logits(const char *model_path, const char *tokens_path, const char *out)
{
	size_t len;
	char *text = read_all(tokens_path, &len);
	if (!text)
		return 1;
	int n_tokens = 0;
	llama_token *ids = parse_tokens(text, &n_tokens);
	free(text);
	if (!ids || n_tokens == 0) {
		fprintf(stderr, "%s: not a comma-separated list of token ids\n", tokens_path);
		free(ids);
		return 1;
	}

	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	mp.use_extra_bufts = false;
	mp.check_tensors = true;
	struct llama_model *model = llama_model_load_from_file(model_path, mp);
	if (!model) {
		fprintf(stderr, "%s: llama.cpp could not load the model\n", model_path);
		free(ids);
		return 1;
	}
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = (uint32_t)n_tokens < 64 ? 64 : (uint32_t)n_tokens;
	cp.n_batch = cp.n_ctx;
	cp.n_ubatch = cp.n_ctx;
	cp.n_seq_max = 1;
	cp.n_threads = 1;
	cp.n_threads_batch = 1;
	cp.type_k = GGML_TYPE_F32;
	cp.type_v = GGML_TYPE_F32;
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	cp.no_perf = true;
	struct llama_context *ctx = llama_init_from_model(model, cp);
	int rc = 1;
	struct llama_batch batch = llama_batch_init(n_tokens, 0, 1);
	if (!ctx) {
		fprintf(stderr, "%s: llama.cpp could not make a context\n", model_path);
		goto done;
	}
	for (int i = 0; i < n_tokens; i++) {
		batch.token[i] = ids[i];
		batch.pos[i] = i;
		batch.n_seq_id[i] = 1;
		batch.seq_id[i][0] = 0;
		batch.logits[i] = 1;
	}
	batch.n_tokens = n_tokens;
	int err = llama_decode(ctx, batch);
	if (err) {
		fprintf(stderr, "%s: llama_decode returned %d\n", model_path, err);
		goto done;
	}
	int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
	const float *l = llama_get_logits(ctx);
	if (!l) {
		fprintf(stderr, "%s: no logits\n", model_path);
		goto done;
	}
	rc = write_all(out, l, (size_t)n_tokens * (size_t)n_vocab * sizeof(float));
	if (rc == 0)
		fprintf(stderr, "%s: %d tokens x %d logits -> %s\n", model_path, n_tokens, n_vocab, out);
done:
	llama_batch_free(batch);
	if (ctx)
		llama_free(ctx);
	llama_model_free(model);
	llama_backend_free();
	free(ids);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "dequant"))
		return dequant(argv[2], argv[3], argv[4]);
	if (argc == 5 && !strcmp(argv[1], "logits"))
		return logits(argv[2], argv[3], argv[4]);
	return usage();
}
