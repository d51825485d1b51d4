/*
 * llama_logits — teacher-forced logits of a GGUF through libllama, the
 * llama.cpp side of bench/gguf_vs_llama.sh.
 *
 *   llama_logits --model FILE.gguf --tokens 1,2,3 --out FILE
 *                [--threads N] [--no-repack] [--cache-type-k T]
 *                [--cache-type-v T] [--flash-attn on|off|auto]
 *                [--check-tensors] [--verbose]
 *
 * Writes what `colibri logits` writes: float32 little-endian [n_tokens,
 * vocab], row t the logits after token t, nothing else. The ids go in as
 * given (no BOS added, nothing tokenized), all in one llama_batch at
 * positions 0..n-1 of sequence 0 with an output requested at every
 * position, in a context asked for n positions (llama.cpp rounds it up to
 * a multiple of 256) with n_batch = n_ubatch = n, so the whole sequence is
 * one graph as colibri runs it in one chunk.
 * The model is loaded CPU-only (no layers offloaded); --no-repack turns
 * off llama.cpp's weight repacking (its extra buffer types), as
 * llama-completion's --no-repack does. The other options are
 * llama-completion's too, and llama.cpp's defaults stand where they are not
 * given: --cache-type-k and --cache-type-v set the KV cache's type (f16,
 * f32 or bf16; f16 by default at 81ff7abe5), --flash-attn chooses the
 * attention graph (auto by default: on where the backend supports it), and
 * --check-tensors makes the load fail on a tensor whose data ggml finds
 * invalid (NaN or inf, a bad block scale).
 *
 * The benchmark (bench/gguf_vs_llama.sh) runs llama.cpp as its users do,
 * so it keeps those defaults. The references in tests/ref/ggml/ state one
 * arithmetic instead, the same on any build and host: --threads 1
 * --no-repack --cache-type-k f32 --cache-type-v f32 --flash-attn off
 * --check-tensors (f16 K and V would round what the model computed; flash
 * attention's on / off choice under auto depends on the backend; repacked
 * layouts depend on the CPU's instruction sets). tests/ref/ggml/README.md
 * gives that run and how this file is built for it.
 *
 * Built against llama.cpp 81ff7abe5's llama.h by the benchmark script (cc
 * -I$LLAMA/include -I$LLAMA/ggml/include -L$LLAMA/build/bin -lllama, with
 * an rpath). Any failure prints one line naming the file and the problem
 * and exits 1; the output is written to FILE.tmp and renamed, so a failed
 * run leaves no partial FILE.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static int verbose;

/* llama.cpp logs every load step at INFO; only its warnings and errors are
 * worth showing next to ours, unless --verbose. */
static void log_cb(enum ggml_log_level level, const char *text, void *user)
{
	(void)user;
	if (verbose || level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: llama_logits --model FILE.gguf --tokens 1,2,3 --out FILE\n"
		   "                    [--threads N] [--no-repack] [--cache-type-k T] [--cache-type-v T]\n"
		   "                    [--flash-attn on|off|auto] [--check-tensors] [--verbose]\n"
		   "  Writes float32 little-endian logits [n_tokens, vocab] of a teacher-forced\n"
		   "  run through libllama (CPU only), as colibri logits does. T is f16,\n"
		   "  f32 or bf16; llama.cpp's defaults stand for the options not given.\n");
}

/* The values of --cache-type-k / --cache-type-v and --flash-attn, by the
 * names llama-completion gives them: the KV cache types llama.cpp takes
 * without flash attention, and flash attention's three settings. */
static const char *const cache_type_names[] = { "f32", "f16", "bf16" };
static const enum ggml_type cache_types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16 };
static const char *const flash_attn_names[] = { "on", "off", "auto" };
static const enum llama_flash_attn_type flash_attn_types[] = {
	LLAMA_FLASH_ATTN_TYPE_ENABLED,
	LLAMA_FLASH_ATTN_TYPE_DISABLED,
	LLAMA_FLASH_ATTN_TYPE_AUTO,
};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The index of NAME among the n names, or -1. */
static int name_index(const char *name, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(name, names[i]))
			return i;
	return -1;
}

/* Parses "1,2,3" into a malloc'd array the caller frees; -1 on an empty
 * list, a non-number or an id outside [0, INT32_MAX]. */
static int parse_tokens(const char *s, llama_token **out, int *n_out)
{
	int cap = 16, n = 0;
	llama_token *v = malloc(sizeof(*v) * (size_t)cap);

	if (!v)
		return -1;
	while (*s) {
		char *end;
		errno = 0;
		long x = strtol(s, &end, 10);
		if (end == s || errno || x < 0 || x > INT32_MAX || (*end && *end != ','))
			goto fail;
		if (n == cap) {
			cap *= 2;
			llama_token *w = realloc(v, sizeof(*v) * (size_t)cap);
			if (!w)
				goto fail;
			v = w;
		}
		v[n++] = (llama_token)x;
		s = *end ? end + 1 : end;
	}
	if (n == 0)
		goto fail;
	*out = v;
	*n_out = n;
	return 0;
fail:
	free(v);
	return -1;
}

int main(int argc, char **argv)
{
	const char *model_path = NULL, *tokens_arg = NULL, *out = NULL;
	int threads = 1, repack = 1, check_tensors = 0;
	/* Unless an option says otherwise, the benchmark's run keeps whatever
	 * llama.cpp does by default, as it did before these options. */
	const struct llama_context_params defaults = llama_context_default_params();
	enum ggml_type type_k = defaults.type_k, type_v = defaults.type_v;
	enum llama_flash_attn_type flash_attn = defaults.flash_attn_type;
	static const struct option opts[] = {
		{ "model", required_argument, 0, 'm' },
		{ "tokens", required_argument, 0, 't' },
		{ "out", required_argument, 0, 'o' },
		{ "threads", required_argument, 0, 'j' },
		{ "no-repack", no_argument, 0, 'R' },
		{ "cache-type-k", required_argument, 0, 'K' },
		{ "cache-type-v", required_argument, 0, 'V' },
		{ "flash-attn", required_argument, 0, 'F' },
		{ "check-tensors", no_argument, 0, 'C' },
		{ "verbose", no_argument, 0, 'v' },
		{ "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c, i;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'm': model_path = optarg; break;
		case 't': tokens_arg = optarg; break;
		case 'o': out = optarg; break;
		case 'j': threads = atoi(optarg); break;
		case 'R': repack = 0; break;
		case 'K':
		case 'V':
			i = name_index(optarg, cache_type_names, COUNT(cache_type_names));
			if (i < 0) {
				fprintf(stderr, "llama_logits: bad --cache-type-%c %s (f16, f32 or bf16)\n",
					c == 'K' ? 'k' : 'v', optarg);
				return 2;
			}
			*(c == 'K' ? &type_k : &type_v) = cache_types[i];
			break;
		case 'F':
			i = name_index(optarg, flash_attn_names, COUNT(flash_attn_names));
			if (i < 0) {
				fprintf(stderr, "llama_logits: bad --flash-attn %s (on, off or auto)\n", optarg);
				return 2;
			}
			flash_attn = flash_attn_types[i];
			break;
		case 'C': check_tensors = 1; break;
		case 'v': verbose = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!model_path || !tokens_arg || !out || optind != argc || threads < 1) {
		usage(stderr);
		return 2;
	}

	llama_token *tokens = NULL;
	int n = 0;
	if (parse_tokens(tokens_arg, &tokens, &n) != 0) {
		fprintf(stderr, "llama_logits: bad --tokens (comma-separated ids, none negative)\n");
		return 1;
	}

	llama_log_set(log_cb, NULL);
	llama_backend_init();

	int rc = 1;
	struct llama_model *model = NULL;
	struct llama_context *ctx = NULL;
	struct llama_batch batch = { 0 };
	int have_batch = 0;
	FILE *f = NULL;
	char *tmp = NULL;

	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	mp.use_extra_bufts = repack;
	mp.check_tensors = check_tensors;
	model = llama_model_load_from_file(model_path, mp);
	if (!model) {
		fprintf(stderr, "llama_logits: %s: llama.cpp could not load the model (see its messages above)\n",
			model_path);
		goto done;
	}
	const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
	for (int i = 0; i < n; i++) {
		if (tokens[i] >= vocab) {
			fprintf(stderr, "llama_logits: %s: token %d at position %d is outside the vocabulary of %d\n",
				model_path, tokens[i], i, vocab);
			goto done;
		}
	}

	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = (uint32_t)n;
	cp.n_batch = (uint32_t)n;
	cp.n_ubatch = (uint32_t)n;
	cp.n_seq_max = 1;
	cp.n_threads = threads;
	cp.n_threads_batch = threads;
	cp.type_k = type_k;
	cp.type_v = type_v;
	cp.flash_attn_type = flash_attn;
	cp.no_perf = true;
	ctx = llama_init_from_model(model, cp);
	if (!ctx) {
		fprintf(stderr, "llama_logits: %s: llama.cpp could not make a context of %d positions\n",
			model_path, n);
		goto done;
	}
	if ((int)llama_n_ctx(ctx) < n) {
		fprintf(stderr, "llama_logits: %s: the context holds %u positions, %d needed\n", model_path,
			llama_n_ctx(ctx), n);
		goto done;
	}

	batch = llama_batch_init(n, 0, 1);
	have_batch = 1;
	for (int i = 0; i < n; i++) {
		batch.token[i] = tokens[i];
		batch.pos[i] = i;
		batch.n_seq_id[i] = 1;
		batch.seq_id[i][0] = 0;
		batch.logits[i] = 1;
	}
	batch.n_tokens = n;
	int d = llama_decode(ctx, batch);
	if (d != 0) {
		fprintf(stderr, "llama_logits: %s: llama_decode of %d tokens failed (%d)\n", model_path, n, d);
		goto done;
	}

	size_t len = strlen(out) + 5;
	tmp = malloc(len);
	if (!tmp) {
		fprintf(stderr, "llama_logits: out of memory\n");
		goto done;
	}
	snprintf(tmp, len, "%s.tmp", out);
	f = fopen(tmp, "wb");
	if (!f) {
		fprintf(stderr, "llama_logits: %s: %s\n", tmp, strerror(errno));
		goto done;
	}
	for (int i = 0; i < n; i++) {
		const float *row = llama_get_logits_ith(ctx, i);
		if (!row) {
			fprintf(stderr, "llama_logits: %s: no logits for position %d\n", model_path, i);
			goto done;
		}
		if (fwrite(row, sizeof(float), (size_t)vocab, f) != (size_t)vocab) {
			fprintf(stderr, "llama_logits: %s: short write: %s\n", tmp, strerror(errno));
			goto done;
		}
	}
	if (fclose(f) != 0) {
		f = NULL;
		fprintf(stderr, "llama_logits: %s: %s\n", tmp, strerror(errno));
		goto done;
	}
	f = NULL;
	if (rename(tmp, out) != 0) {
		fprintf(stderr, "llama_logits: %s: cannot rename to %s: %s\n", tmp, out, strerror(errno));
		goto done;
	}
	rc = 0;
done:
	if (f)
		fclose(f);
	if (rc != 0 && tmp)
		remove(tmp);
	free(tmp);
	if (have_batch)
		llama_batch_free(batch);
	if (ctx)
		llama_free(ctx);
	if (model)
		llama_model_free(model);
	llama_backend_free();
	free(tokens);
	return rc;
}
