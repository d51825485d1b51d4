/*
 * test_convert — `colibri convert` end to end, run as a separate process
 * (tu_colibri()) on the checkpoints of tools/make_fixtures.sh and on variants
 * generated or edited into scratch folders:
 *   - every fixture (olmoe, qwen3_moe, sharded mixtral, fused-layout and FP8
 *     qwen3_moe, the text-only Qwen3.5 hybrid) under every --quant converts; the manifest loads; resident
 *     tensors sit at 4 KiB-aligned offsets and expert records at multiples of
 *     record_bytes (itself a multiple of 4096) with parts 64-byte aligned and
 *     zero padding; every checksum equals XXH3-64 computed here over the file
 *     bytes with the seed of docs/FORMAT.md (a resident tensor's: XXH3-64 of
 *     its name seeded with its offset; a record's: layer * 2^32 + expert);
 *     every tensor has the storage type its role implies;
 *   - values: every stored matrix is dequantized and compared with the
 *     checkpoint as read by a small safetensors reader in this file (not
 *     engine/convert/safetensors.c): f32 bit-exact, bf16 bit-exact to the
 *     round-to-nearest-even of the source (so lossless on bf16 checkpoints),
 *     int8/int4 with the documented scale max|w|/qmax and |w - w^| <= scale/2;
 *     FP8 sources are decoded here as e4m3 x 128x128 block scale_inv;
 *   - the fused expert layout converts to the same bytes as the per-expert
 *     layout of the same weights, and transformers v5 names convert;
 *   - --activations lands in the manifest (auto by default), a bad value
 *     is refused;
 *   - --dense-quant int4 stores dense matrices as int4 (MTP layers keep
 *     int8), every value checked; a bad type is refused;
 *   - --force replaces an existing container, leaving nothing else behind.
 * (Bad input, refusals and interrupted conversions: tests/test_convert_bad.c.)
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <xxhash.h>

#include "compute/quant.h"
#include "engine/model/manifest.h"
#include "base/error.h"
#include "tests/convert_fixture.h"

#define PY "/usr/bin/python3"

/* ------------------------------------------------------------ locations */

/* The repository root: two levels above COLIBRI_FIXTURES (build/fixtures,
 * as tools/run_tests.py sets it), else the current folder. */
static const char *repo_root(void)
{
	static char root[PATH_MAX];
	if (root[0])
		return root;
	char cand[PATH_MAX + 64];
	snprintf(cand, sizeof cand, "%s/../..", tu_fixtures());
	char probe[PATH_MAX + 128];
	snprintf(probe, sizeof probe, "%s/tools/gen_model.py", cand);
	if (access(probe, R_OK) == 0 && realpath(cand, root))
		return root;
	cr_assert_eq(access("tools/gen_model.py", R_OK), 0,
		     "cannot find tools/gen_model.py from COLIBRI_FIXTURES or the current folder");
	cr_assert_not_null(getcwd(root, sizeof root));
	return root;
}

/* ------------------------------------------- an independent HF reader */

struct hf_tensor {
	char name[200];
	char dtype[16];
	int ndim;
	int64_t shape[4];
	const uint8_t *data;
	uint64_t nbytes;
};

struct hf_ckpt {
	char *bufs[16];
	int n_bufs;
	struct hf_tensor *t;
	size_t n;
	cJSON *config;
};

/* Reads every *.safetensors in dir whole (the fixtures are small) and
 * config.json. Header format: u64 LE length, JSON, data block. */
static void hf_load(struct hf_ckpt *c, const char *dir)
{
	memset(c, 0, sizeof *c);
	DIR *d = opendir(dir);
	cr_assert_not_null(d, "cannot open %s", dir);
	struct dirent *de;
	size_t cap = 0;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l < 12 || strcmp(de->d_name + l - 12, ".safetensors") != 0)
			continue;
		char p[PATH_MAX + 256];
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		size_t len = 0;
		char *buf = tu_read(p, &len);
		cr_assert(buf && len >= 8, "cannot read %s", p);
		cr_assert_lt(c->n_bufs, 16);
		c->bufs[c->n_bufs++] = buf;
		uint64_t hlen = 0;
		for (int i = 7; i >= 0; i--)
			hlen = hlen << 8 | (uint8_t)buf[i];
		cr_assert_leq(8 + hlen, len, "%s: bad header length", p);
		cJSON *h = cJSON_ParseWithLength(buf + 8, hlen);
		cr_assert(cJSON_IsObject(h), "%s: header is not a JSON object", p);
		for (cJSON *e = h->child; e; e = e->next) {
			if (strcmp(e->string, "__metadata__") == 0)
				continue;
			if (c->n == cap) {
				cap = cap ? 2 * cap : 256;
				c->t = realloc(c->t, cap * sizeof *c->t);
				cr_assert_not_null(c->t);
			}
			struct hf_tensor *t = &c->t[c->n++];
			memset(t, 0, sizeof *t);
			snprintf(t->name, sizeof t->name, "%s", e->string);
			snprintf(t->dtype, sizeof t->dtype, "%s",
				 cJSON_GetObjectItem(e, "dtype")->valuestring);
			cJSON *sh = cJSON_GetObjectItem(e, "shape");
			t->ndim = cJSON_GetArraySize(sh);
			cr_assert_leq(t->ndim, 4);
			for (int i = 0; i < t->ndim; i++)
				t->shape[i] = (int64_t)cJSON_GetArrayItem(sh, i)->valuedouble;
			cJSON *off = cJSON_GetObjectItem(e, "data_offsets");
			uint64_t b = (uint64_t)cJSON_GetArrayItem(off, 0)->valuedouble;
			uint64_t en = (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble;
			cr_assert_leq(8 + hlen + en, len, "%s: tensor %s past the end", p, t->name);
			t->data = (const uint8_t *)buf + 8 + hlen + b;
			t->nbytes = en - b;
		}
		cJSON_Delete(h);
	}
	closedir(d);
	cr_assert_gt(c->n, 0, "%s: no tensors", dir);
	char p[PATH_MAX + 64];
	snprintf(p, sizeof p, "%s/config.json", dir);
	char *text = tu_read(p, NULL);
	cr_assert_not_null(text, "%s: cannot read", p);
	c->config = cJSON_Parse(text);
	free(text);
	cr_assert_not_null(c->config);
}

static void hf_free(struct hf_ckpt *c)
{
	for (int i = 0; i < c->n_bufs; i++)
		free(c->bufs[i]);
	free(c->t);
	cJSON_Delete(c->config);
	memset(c, 0, sizeof *c);
}

static const struct hf_tensor *hf_find(const struct hf_ckpt *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->t[i].name, name) == 0)
			return &c->t[i];
	return NULL;
}

/* Looks up a tensor by the name the container uses, or by the name
 * transformers v5 gives it (Mixtral's block_sparse_moe became mlp). */
static const struct hf_tensor *hf_find_alias(const struct hf_ckpt *c, const char *name)
{
	const struct hf_tensor *t = hf_find(c, name);
	const char *old = strstr(name, ".block_sparse_moe.");
	if (t || !old)
		return t;
	char alias[256];
	snprintf(alias, sizeof alias, "%.*s.mlp.%s", (int)(old - name), name,
		 old + strlen(".block_sparse_moe."));
	return hf_find(c, alias);
}

static int cfg_int(const struct hf_ckpt *c, const char *key)
{
	cJSON *v = cJSON_GetObjectItem(c->config, key);
	return cJSON_IsNumber(v) ? (int)v->valuedouble : -1;
}

static float from_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static uint32_t to_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

/* e4m3fn: s eeee mmm, bias 7, subnormals at e = 0, 0x7f/0xff NaN. */
static float e4m3_value(uint8_t v)
{
	int e = (v >> 3) & 15, m = v & 7;
	float mag = e == 0 ? (float)m / 8.0f * 0x1p-6f : (1.0f + (float)m / 8.0f) * ldexpf(1.0f, e - 7);
	if (e == 15 && m == 7)
		mag = NAN;
	return (v & 0x80) ? -mag : mag;
}

/* Nearest bf16 value of x, ties to even (finite x). */
static float round_bf16(float x)
{
	uint32_t u = to_bits(x), hi = u & 0xffff0000u, rest = u & 0xffffu;
	if (rest > 0x8000u || (rest == 0x8000u && (hi & 0x10000u)))
		hi += 0x10000u;
	return from_bits(hi);
}

/* Element i of t as f32 (no scale). */
static float hf_elem(const struct hf_tensor *t, uint64_t i)
{
	if (!strcmp(t->dtype, "BF16")) {
		uint16_t h = (uint16_t)(t->data[2 * i] | t->data[2 * i + 1] << 8);
		return from_bits((uint32_t)h << 16);
	}
	if (!strcmp(t->dtype, "F32")) {
		uint32_t u = 0;
		for (int k = 3; k >= 0; k--)
			u = u << 8 | t->data[4 * i + (uint64_t)k];
		return from_bits(u);
	}
	if (!strcmp(t->dtype, "F8_E4M3"))
		return e4m3_value(t->data[i]);
	cr_assert_fail("tensor %s: dtype %s not expected in the fixtures", t->name, t->dtype);
	return 0;
}

/* Rows [row0, row0 + rows) of t viewed as a [*, cols] matrix, as the model
 * means them: FP8 weights times their 128x128 block scale_inv. */
static void hf_rows(const struct hf_ckpt *c, const struct hf_tensor *t, int64_t row0, int64_t rows,
		    int64_t cols, float *out, bool *exact_src)
{
	const struct hf_tensor *scale = NULL;
	if (!strcmp(t->dtype, "F8_E4M3")) {
		char n[256];
		snprintf(n, sizeof n, "%s_scale_inv", t->name);
		scale = hf_find(c, n);
		cr_assert_not_null(scale, "%s has no scale_inv", t->name);
		cr_assert_eq(t->ndim, 2);
	}
	for (int64_t r = 0; r < rows; r++) {
		for (int64_t k = 0; k < cols; k++) {
			float v = hf_elem(t, (uint64_t)((row0 + r) * cols + k));
			if (scale) {
				int64_t bc = (t->shape[1] + 127) / 128;
				v = v * hf_elem(scale, (uint64_t)(((row0 + r) / 128) * bc + k / 128));
			}
			out[r * cols + k] = v;
		}
	}
	*exact_src = !strcmp(t->dtype, "BF16") || !strcmp(t->dtype, "F32");
}

/* --------------------------------------------------- families and roles */

static bool is_mixtral(const struct hf_ckpt *c)
{
	return !strcmp(cJSON_GetObjectItem(c->config, "model_type")->valuestring, "mixtral");
}

static int hf_experts_ffn(const struct hf_ckpt *c)
{
	int i = cfg_int(c, "moe_intermediate_size");
	return i > 0 ? i : cfg_int(c, "intermediate_size");
}

static int hf_n_experts(const struct hf_ckpt *c)
{
	int e = cfg_int(c, "num_experts");
	return e > 0 ? e : cfg_int(c, "num_local_experts");
}

/* A layer is MoE when the checkpoint has its router. */
static bool hf_layer_is_moe(const struct hf_ckpt *c, int l)
{
	char n[200];
	snprintf(n, sizeof n, "model.layers.%d.%s.gate.weight", l,
		 is_mixtral(c) ? "block_sparse_moe" : "mlp");
	return hf_find_alias(c, n) != NULL;
}

/* The source rows of expert e's part p (0 gate, 1 up, 2 down) in layer l:
 * per-expert tensors, or a slice of the fused [E, 2I, H] / [E, H, I] ones. */
static const struct hf_tensor *hf_expert(const struct hf_ckpt *c, int l, int e, int p,
					 int64_t *row0)
{
	static const char *const mix[3] = { "w1", "w3", "w2" };
	static const char *const mlp[3] = { "gate_proj", "up_proj", "down_proj" };
	char n[200];
	if (is_mixtral(c))
		snprintf(n, sizeof n, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", l, e, mix[p]);
	else
		snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, mlp[p]);
	const struct hf_tensor *t = hf_find_alias(c, n);
	*row0 = 0;
	if (t)
		return t;
	int64_t I = hf_experts_ffn(c), H = cfg_int(c, "hidden_size");
	snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%s", l, p == 2 ? "down_proj" : "gate_up_proj");
	t = hf_find(c, n);
	cr_assert_not_null(t, "no expert %d part %d of layer %d in the checkpoint", e, p, l);
	*row0 = p == 2 ? e * H : e * 2 * I + (p == 1 ? I : 0);
	return t;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && strcmp(s + a - b, suffix) == 0;
}

static bool is_grouped(enum quant_type q)
{
	return q == QUANT_INT8 || q == QUANT_INT4;
}

/* The storage type docs/FORMAT.md gives a resident tensor under --quant q:
 * norms, routers and the Gated DeltaNet's small parts (its convolution,
 * decay and step parameters, b/a projections, the shared expert's gate)
 * f32; embeddings bf16 (f32 under f32); other matrices the dense type
 * (int4 -> int8), bf16 when the group does not divide. */
static enum quant_type expected_type(const char *name, enum quant_type q, enum quant_type dense, int64_t cols,
				     int32_t group)
{
	static const char *const f32[] = {
		"norm.weight", ".mlp.gate.weight", ".block_sparse_moe.gate.weight", ".mlp.shared_expert_gate.weight",
		"linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight", "linear_attn.in_proj_ba.weight",
		"linear_attn.conv1d.weight", "linear_attn.dt_bias", "linear_attn.A_log",
	};
	for (size_t i = 0; i < sizeof f32 / sizeof f32[0]; i++)
		if (ends_with(name, f32[i]))
			return QUANT_F32;
	if (!strcmp(name, "model.embed_tokens.weight"))
		return q == QUANT_F32 ? QUANT_F32 : QUANT_BF16;
	enum quant_type d = dense;
	if (is_grouped(d) && cols % group != 0)
		return QUANT_BF16;
	return d;
}

/* ------------------------------------------------------ value checking */

/* Compares a stored matrix with the source values `want`. The int layouts
 * are decoded here from quant.h's description and must agree with
 * quant_row_dequantize. */
static void check_matrix(const char *what, const uint8_t *base, enum quant_type type, int32_t group,
			 int64_t rows, int64_t cols, const float *want, bool exact_src)
{
	struct qmatrix m;
	quant_matrix_view(&m, base, type, rows, cols, group);
	float *got = malloc((size_t)cols * sizeof *got);
	cr_assert_not_null(got);
	for (int64_t r = 0; r < rows; r++) {
		quant_row_dequantize(got, &m, r);
		const float *w = want + r * cols;
		for (int64_t k = 0; k < cols; k++) {
			if (type == QUANT_F32) {
				cr_assert_eq(to_bits(got[k]), to_bits(w[k]), "%s [%lld, %lld]: f32 %a, source %a",
					     what, (long long)r, (long long)k, got[k], w[k]);
			} else if (type == QUANT_BF16) {
				cr_assert_eq(to_bits(got[k]), to_bits(round_bf16(w[k])),
					     "%s [%lld, %lld]: bf16 %a, source %a", what, (long long)r,
					     (long long)k, got[k], w[k]);
				if (exact_src)
					cr_assert_eq(got[k], w[k], "%s: bf16 of a bf16 source must be lossless", what);
			}
		}
		if (!is_grouped(type))
			continue;
		int qmax = type == QUANT_INT8 ? 127 : 7;
		const float *scales = (const float *)(base + (type == QUANT_INT8 ? rows * cols : rows * cols / 2));
		for (int64_t g = 0; g < cols / group; g++) {
			float amax = 0;
			for (int64_t k = g * group; k < (g + 1) * group; k++)
				amax = fmaxf(amax, fabsf(w[k]));
			float s;
			memcpy(&s, &scales[r * (cols / group) + g], sizeof s);
			float s_want = amax / (float)qmax;
			cr_assert(fabsf(s - s_want) <= 1e-6f * s_want, "%s row %lld group %lld: scale %a, max|w|/%d = %a",
				  what, (long long)r, (long long)g, s, qmax, s_want);
			for (int64_t k = g * group; k < (g + 1) * group; k++) {
				int q;
				if (type == QUANT_INT8) {
					q = (int8_t)base[r * cols + k];
				} else {
					uint8_t b = base[r * cols / 2 + (k / 32) * 16 + k % 16];
					int nib = (k % 32) < 16 ? (b & 15) : (b >> 4);
					q = nib - 8;
				}
				cr_assert(q >= -qmax && q <= qmax, "%s: q = %d outside +-%d", what, q, qmax);
				cr_assert_eq(to_bits(got[k]), to_bits((float)q * s),
					     "%s [%lld, %lld]: dequantized %a, q * scale = %a", what, (long long)r,
					     (long long)k, got[k], (float)q * s);
				float err = fabsf(w[k] - got[k]);
				cr_assert(err <= s / 2 + 1e-5f * s, "%s [%lld, %lld]: |w - w^| = %g > scale/2 = %g",
					  what, (long long)r, (long long)k, err, s / 2);
			}
		}
	}
	free(got);
}

static bool all_zero(const uint8_t *p, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* Everything a reader may rely on in the container at out, converted from
 * the checkpoint hf with --quant q --group-size group. */
/* The dense type --quant q gives when --dense-quant is not set. */
static enum quant_type default_dense(enum quant_type q)
{
	return q == QUANT_INT4 ? QUANT_INT8 : q;
}

static void check_container_dense(const char *out, const struct hf_ckpt *hf, enum quant_type q, enum quant_type dense,
				  int32_t group)
{
	struct manifest m;
	error_clear();
	cr_assert_eq(manifest_load(&m, out), 0, "manifest_load(%s): %s", out, error_message());
	cr_assert_eq(m.version, 2);
	cr_assert_str_eq(m.model_type, cJSON_GetObjectItem(hf->config, "model_type")->valuestring);
	cr_assert_eq(m.expert_quant, q);
	cr_assert_eq(m.dense_quant, dense);
	cr_assert_eq(m.group, group);

	/* Resident tensors: every non-expert tensor of the checkpoint, once. */
	size_t n_src = 0;
	for (size_t i = 0; i < hf->n; i++) {
		const char *n = hf->t[i].name;
		if (strstr(n, ".experts.") || ends_with(n, "_scale_inv"))
			continue;
		n_src++;
	}
	cr_assert_eq(m.n_tensors, n_src, "%s: %zu resident tensors, the checkpoint has %zu", out,
		     m.n_tensors, n_src);

	size_t res_len = 0;
	uint8_t *res = (uint8_t *)read_file(out, m.resident_file, &res_len);
	cr_assert_eq(res_len, m.resident_bytes);
	uint64_t end = 0;
	for (size_t i = 0; i < m.n_tensors; i++) {
		const struct manifest_tensor *t = &m.tensors[i];
		cr_assert_eq(t->offset % 4096, 0, "%s at %llu is not 4 KiB-aligned", t->name,
			     (unsigned long long)t->offset);
		cr_assert_geq(t->offset, end, "%s overlaps the tensor before it", t->name);
		cr_assert(all_zero(res + end, t->offset - end), "padding before %s is not zero", t->name);
		end = t->offset + t->bytes;
		uint64_t seed = XXH3_64bits_withSeed(t->name, strlen(t->name), t->offset);
		cr_assert_eq(XXH3_64bits_withSeed(res + t->offset, t->bytes, seed), t->checksum, "%s: checksum", t->name);
		enum quant_type want = expected_type(t->name, q, dense, t->shape[1], group);
		cr_assert_eq(t->type, want, "%s stored as %s, expected %s", t->name,
			     quant_type_name(t->type), quant_type_name(want));
		cr_assert_eq(t->group, is_grouped(t->type) ? group : 0, "%s: group %d", t->name, t->group);

		for (size_t k = 0; k < i; k++)
			cr_assert_str_neq(m.tensors[k].name, t->name, "%s is stored twice", t->name);
		const struct hf_tensor *src = hf_find_alias(hf, t->name);
		cr_assert_not_null(src, "%s: %s is not in the checkpoint", out, t->name);
		int64_t rows = t->shape[0], cols = t->shape[1];
		/* A depthwise Conv1d weight [C, 1, K] is stored as [C, K]. */
		bool conv = src->ndim == 3 && src->shape[1] == 1;
		cr_assert_eq(t->ndim, conv ? 2 : src->ndim, "%s: ndim", t->name);
		cr_assert_eq(rows, src->shape[0], "%s: rows", t->name);
		if (src->ndim >= 2)
			cr_assert_eq(cols, src->shape[src->ndim - 1], "%s: cols", t->name);
		float *want_v = malloc((size_t)(rows * cols) * sizeof *want_v);
		bool exact;
		hf_rows(hf, src, 0, rows, cols, want_v, &exact);
		check_matrix(t->name, res + t->offset, t->type, t->group, rows, cols, want_v, exact);
		free(want_v);
	}
	cr_assert(all_zero(res + end, res_len - end), "resident.bin: tail padding is not zero");
	free(res);

	/* Expert files: one per MoE layer, one record per expert. */
	int E = hf_n_experts(hf), L = cfg_int(hf, "num_hidden_layers");
	int64_t I = hf_experts_ffn(hf), H = cfg_int(hf, "hidden_size");
	cr_assert_eq(m.n_experts, E);
	size_t n_moe = 0;
	for (int l = 0; l < L; l++) {
		const struct manifest_expert_layer *el = manifest_expert_layer(&m, l);
		if (!hf_layer_is_moe(hf, l)) {
			cr_assert_null(el, "dense layer %d has an expert file", l);
			continue;
		}
		n_moe++;
		cr_assert_not_null(el, "MoE layer %d has no expert file", l);
		char name[64];
		snprintf(name, sizeof name, "experts/layer-%03d.bin", l);
		cr_assert_str_eq(el->file, name);
		cr_assert_eq(el->record_bytes % 4096, 0);
		size_t flen = 0;
		uint8_t *f = (uint8_t *)read_file(out, el->file, &flen);
		cr_assert_eq(flen, (uint64_t)E * el->record_bytes, "%s: %zu bytes", el->file, flen);
		static const char *const pn[3] = { "gate", "up", "down" };
		uint64_t pend = 0;
		for (int p = 0; p < 3; p++) {
			const struct manifest_tensor *pt = &el->parts[p];
			cr_assert_str_eq(pt->name, pn[p]);
			cr_assert_eq(pt->type, q);
			cr_assert_eq(pt->group, is_grouped(q) ? group : 0);
			cr_assert_eq(pt->offset % 64, 0, "part %s at %llu", pn[p], (unsigned long long)pt->offset);
			cr_assert_geq(pt->offset, pend);
			cr_assert_eq(pt->shape[0], p == 2 ? H : I);
			cr_assert_eq(pt->shape[1], p == 2 ? I : H);
			pend = pt->offset + pt->bytes;
		}
		cr_assert_leq(pend, el->record_bytes);
		cr_assert_gt(pend + 4096, el->record_bytes, "record_bytes %llu is padded beyond 4 KiB",
			     (unsigned long long)el->record_bytes);
		float *want_v = malloc((size_t)(I * H) * sizeof *want_v);
		for (int e = 0; e < E; e++) {
			const uint8_t *rec = f + (uint64_t)e * el->record_bytes;
			uint64_t seed = (uint64_t)l << 32 | (uint64_t)e;
			cr_assert_eq(XXH3_64bits_withSeed(rec, el->record_bytes, seed), el->checksums[e],
				     "%s: record %d checksum", el->file, e);
			uint64_t at = 0;
			for (int p = 0; p < 3; p++) {
				const struct manifest_tensor *pt = &el->parts[p];
				cr_assert(all_zero(rec + at, pt->offset - at), "%s expert %d: padding before %s",
					  el->file, e, pn[p]);
				at = pt->offset + pt->bytes;
				int64_t row0;
				const struct hf_tensor *src = hf_expert(hf, l, e, p, &row0);
				bool exact;
				hf_rows(hf, src, row0, pt->shape[0], pt->shape[1], want_v, &exact);
				char what[128];
				snprintf(what, sizeof what, "layer %d expert %d %s", l, e, pn[p]);
				check_matrix(what, rec + pt->offset, pt->type, pt->group, pt->shape[0],
					     pt->shape[1], want_v, exact);
			}
			cr_assert(all_zero(rec + at, el->record_bytes - at), "%s expert %d: tail padding",
				  el->file, e);
		}
		free(want_v);
		free(f);
	}
	cr_assert_eq(m.n_expert_layers, n_moe);
	manifest_free(&m);
}

static void check_container(const char *out, const struct hf_ckpt *hf, enum quant_type q, int32_t group)
{
	check_container_dense(out, hf, q, default_dense(q), group);
}

/* ------------------------------------------------------- running colibri */

TestSuite(convert, .init = setup, .fini = teardown);

static const char *quants[4] = { "f32", "bf16", "int8", "int4" };

/* Converts fixture `name` under every --quant and checks each container. */
static void convert_all_quants(const char *name)
{
	char hf_dir[PATH_MAX];
	fixture_path(hf_dir, sizeof hf_dir, name);
	struct hf_ckpt hf;
	hf_load(&hf, hf_dir);
	for (int i = 0; i < 4; i++) {
		char out[PATH_MAX + 64], args[64];
		snprintf(out, sizeof out, "%s/%s-%s", ws, name, quants[i]);
		snprintf(args, sizeof args, "--quant %s --quiet", quants[i]);
		int st = convert(hf_dir, out, args);
		char *log = read_file(ws, "log.txt", NULL);
		cr_assert_eq(st, 0, "convert %s --quant %s: exit %d: %s", name, quants[i], st, log);
		free(log);
		enum quant_type q;
		cr_assert_eq(quant_type_parse(quants[i], &q), 0);
		check_container(out, &hf, q, 64);
	}
	hf_free(&hf);
}

Test(convert, olmoe_every_quant) { convert_all_quants("olmoe"); }
Test(convert, qwen3_moe_every_quant) { convert_all_quants("qwen3_moe"); }
Test(convert, mixtral_sharded_every_quant) { convert_all_quants("mixtral"); }
Test(convert, qwen3_moe_fused_every_quant) { convert_all_quants("qwen3_moe_fused"); }
Test(convert, qwen3_5_moe_text_every_quant) { convert_all_quants("qwen3_5_moe_text"); }

/* --dense-quant: int4 dense weights beside int4 experts (a Q4_0-sized
 * resident set), every value checked; an MTP layer keeps int8; a bad type
 * is refused. */
Test(convert, dense_quant_option)
{
	char hf_dir[PATH_MAX], out[PATH_MAX + 64];
	fixture_path(hf_dir, sizeof hf_dir, "qwen3_moe");
	struct hf_ckpt hf;
	hf_load(&hf, hf_dir);
	snprintf(out, sizeof out, "%s/dense4", ws);
	cr_assert_eq(convert(hf_dir, out, "--quant int4 --dense-quant int4 --quiet"), 0);
	check_container_dense(out, &hf, QUANT_INT4, QUANT_INT4, 64);
	hf_free(&hf);

	fixture_path(hf_dir, sizeof hf_dir, "deepseek_v3");
	snprintf(out, sizeof out, "%s/ds-dense4", ws);
	cr_assert_eq(convert(hf_dir, out, "--quant int4 --dense-quant int4 --quiet"), 0);
	struct manifest m;
	cr_assert_eq(manifest_load(&m, out), 0, "%s", error_message());
	cr_expect_eq(m.dense_quant, QUANT_INT4);
	const struct manifest_tensor *dec = manifest_find(&m, "model.layers.0.self_attn.q_a_proj.weight");
	const struct manifest_tensor *mtp = manifest_find(&m, "model.layers.3.eh_proj.weight");
	cr_assert(dec && mtp);
	cr_expect_eq(dec->type, QUANT_INT4, "a decoder layer's dense matrix is %s", quant_type_name(dec->type));
	cr_expect_eq(mtp->type, QUANT_INT8, "the MTP layer's dense matrix is %s", quant_type_name(mtp->type));
	manifest_free(&m);

	snprintf(out, sizeof out, "%s/bad", ws);
	int st = convert(hf_dir, out, "--dense-quant int3");
	char *log = read_file(ws, "log.txt", NULL);
	cr_expect_eq(st, 2);
	cr_expect(log && strstr(log, "--dense-quant") && strstr(log, "int3"), "%s", log);
	free(log);
}
Test(convert, qwen3_moe_fp8_every_quant) { convert_all_quants("qwen3_moe_fp8"); }

/* --head-quant: lm_head alone takes its own type, the other dense matrices
 * keep --dense-quant's (both ways round); a bad type is refused. */
Test(convert, head_quant_option)
{
	char hf_dir[PATH_MAX], out[PATH_MAX + 64];
	fixture_path(hf_dir, sizeof hf_dir, "qwen3_moe");
	static const char *const args[] = { "--quant int4 --dense-quant int4 --head-quant int8 --quiet",
					    "--quant int4 --head-quant int4 --quiet" };
	static const enum quant_type head[] = { QUANT_INT8, QUANT_INT4 }, dense[] = { QUANT_INT4, QUANT_INT8 };
	for (int i = 0; i < 2; i++) {
		snprintf(out, sizeof out, "%s/head%d", ws, i);
		cr_assert_eq(convert(hf_dir, out, args[i]), 0);
		struct manifest m;
		cr_assert_eq(manifest_load(&m, out), 0, "%s", error_message());
		const struct manifest_tensor *lm = manifest_find(&m, "lm_head.weight");
		const struct manifest_tensor *q = manifest_find(&m, "model.layers.0.self_attn.q_proj.weight");
		cr_assert(lm && q);
		cr_expect_eq(lm->type, head[i], "%s: lm_head is %s", args[i], quant_type_name(lm->type));
		cr_expect_eq(q->type, dense[i], "%s: q_proj is %s", args[i], quant_type_name(q->type));
		manifest_free(&m);
	}
	snprintf(out, sizeof out, "%s/bad-head", ws);
	int st = convert(hf_dir, out, "--head-quant int3");
	char *log = read_file(ws, "log.txt", NULL);
	cr_expect_eq(st, 2);
	cr_expect(log && strstr(log, "--head-quant") && strstr(log, "int3"), "%s", log);
	free(log);
}

/* --activations is written into the manifest (auto by default); a bad
 * value is refused naming the option. */
Test(convert, activations_option)
{
	char hf_dir[PATH_MAX], out[PATH_MAX + 64];
	fixture_path(hf_dir, sizeof hf_dir, "olmoe");
	static const char *const args[][2] = { { "--quiet", "auto" }, { "--activations f32 --quiet", "f32" },
					       { "--activations int8 --quiet", "int8" } };
	for (int i = 0; i < 3; i++) {
		snprintf(out, sizeof out, "%s/act%d", ws, i);
		cr_assert_eq(convert(hf_dir, out, args[i][0]), 0);
		struct manifest m;
		cr_assert_eq(manifest_load(&m, out), 0, "%s", error_message());
		cr_expect_str_eq(m.activations, args[i][1], "convert %s", args[i][0]);
		manifest_free(&m);
	}
	snprintf(out, sizeof out, "%s/act-bad", ws);
	int st = convert(hf_dir, out, "--activations int16");
	char *log = read_file(ws, "log.txt", NULL);
	cr_expect_eq(st, 2);
	cr_expect(log && strstr(log, "--activations") && strstr(log, "int16"), "%s", log);
	free(log);
}

/* The types by role, spelled out once for int4 on a model with a dense
 * layer (qwen3_moe layer 1). */
Test(convert, types_by_role_under_int4)
{
	char hf_dir[PATH_MAX], out[PATH_MAX + 16];
	fixture_path(hf_dir, sizeof hf_dir, "qwen3_moe");
	snprintf(out, sizeof out, "%s/out", ws);
	cr_assert_eq(convert(hf_dir, out, "--quiet"), 0, "default --quant must be int4");
	struct manifest m;
	cr_assert_eq(manifest_load(&m, out), 0, "%s", error_message());
	cr_assert_eq(m.expert_quant, QUANT_INT4);
	cr_assert_eq(m.dense_quant, QUANT_INT8);
	cr_assert_eq(m.group, 64);
	static const struct {
		const char *name;
		enum quant_type type;
	} want[] = {
		{ "model.embed_tokens.weight", QUANT_BF16 },
		{ "model.layers.0.input_layernorm.weight", QUANT_F32 },
		{ "model.layers.0.post_attention_layernorm.weight", QUANT_F32 },
		{ "model.layers.0.self_attn.q_norm.weight", QUANT_F32 },
		{ "model.layers.0.self_attn.k_norm.weight", QUANT_F32 },
		{ "model.layers.0.mlp.gate.weight", QUANT_F32 },
		{ "model.layers.2.mlp.gate.weight", QUANT_F32 },
		{ "model.norm.weight", QUANT_F32 },
		{ "model.layers.0.self_attn.q_proj.weight", QUANT_INT8 },
		{ "model.layers.0.self_attn.k_proj.weight", QUANT_INT8 },
		{ "model.layers.0.self_attn.v_proj.weight", QUANT_INT8 },
		{ "model.layers.0.self_attn.o_proj.weight", QUANT_INT8 },
		{ "model.layers.1.mlp.gate_proj.weight", QUANT_INT8 },
		{ "model.layers.1.mlp.up_proj.weight", QUANT_INT8 },
		{ "model.layers.1.mlp.down_proj.weight", QUANT_INT8 },
		{ "lm_head.weight", QUANT_INT8 },
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		const struct manifest_tensor *t = manifest_find(&m, want[i].name);
		cr_assert_not_null(t, "%s missing", want[i].name);
		cr_assert_eq(t->type, want[i].type, "%s is %s", want[i].name, quant_type_name(t->type));
	}
	cr_assert_null(manifest_find(&m, "model.layers.1.mlp.gate.weight"), "layer 1 is dense");
	cr_assert_null(manifest_expert_layer(&m, 1));
	cr_assert_not_null(manifest_expert_layer(&m, 0));
	cr_assert_not_null(manifest_expert_layer(&m, 2));
	for (int p = 0; p < EXPERT_PARTS; p++)
		cr_assert_eq(manifest_expert_layer(&m, 2)->parts[p].type, QUANT_INT4);
	manifest_free(&m);
}

Test(convert, group_size_32)
{
	char hf_dir[PATH_MAX], out[PATH_MAX + 16];
	fixture_path(hf_dir, sizeof hf_dir, "olmoe");
	struct hf_ckpt hf;
	hf_load(&hf, hf_dir);
	snprintf(out, sizeof out, "%s/out4", ws);
	cr_assert_eq(convert(hf_dir, out, "--quant int4 --group-size 32 --quiet"), 0);
	check_container(out, &hf, QUANT_INT4, 32);
	hf_free(&hf);
}

/* Narrows the dense MLP of every dense layer to 96 (config and tensors):
 * gate/up keep their first 96 rows, down its first 96 columns. */
static void narrow_dense_mlp(const char *hf_dir)
{
	char p[PATH_MAX + 32];
	snprintf(p, sizeof p, "%s/config.json", hf_dir);
	char *text = tu_read(p, NULL);
	cJSON *cfg = cJSON_Parse(text);
	free(text);
	cJSON_ReplaceItemInObjectCaseSensitive(cfg, "intermediate_size", cJSON_CreateNumber(96));
	text = cJSON_Print(cfg);
	cJSON_Delete(cfg);
	cr_assert_eq(tu_write(p, text, strlen(text)), 0);
	free(text);

	struct st_edit e;
	st_edit_open(&e, hf_dir);
	int n = 0;
	for (cJSON *t = e.h->child; t; t = t->next) {
		bool gu = strstr(t->string, ".mlp.gate_proj.") || strstr(t->string, ".mlp.up_proj.");
		bool down = strstr(t->string, ".mlp.down_proj.") != NULL;
		if (!gu && !down)
			continue;
		cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(t, "dtype")->valuestring, "BF16");
		cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
		int64_t rows = (int64_t)cJSON_GetArrayItem(shape, 0)->valuedouble;
		int64_t cols = (int64_t)cJSON_GetArrayItem(shape, 1)->valuedouble;
		uint64_t begin = st_edit_num(t, "data_offsets", 0);
		if (gu) {
			st_edit_set(t, "BF16", 96, cols, begin, begin + 96 * (uint64_t)cols * 2);
		} else {
			const char *src = e.buf + 8 + e.hlen + begin;
			char *cut = malloc((size_t)rows * 96 * 2);
			for (int64_t r = 0; r < rows; r++)
				memcpy(cut + r * 96 * 2, src + r * cols * 2, 96 * 2);
			uint64_t at = st_edit_append(&e, cut, (size_t)rows * 96 * 2);
			free(cut);
			st_edit_set(t, "BF16", rows, 96, at, at + (uint64_t)rows * 96 * 2);
		}
		n++;
	}
	cr_assert_gt(n, 0, "%s has no dense MLP", hf_dir);
	st_edit_save(&e);
}

/* A dense matrix whose inputs the group does not divide falls back to bf16;
 * the other matrices keep the dense type. */
Test(convert, dense_bf16_fallback)
{
	char hf_dir[PATH_MAX], out[PATH_MAX + 16];
	copy_fixture(hf_dir, sizeof hf_dir, "qwen3_moe");
	narrow_dense_mlp(hf_dir);
	struct hf_ckpt hf;
	hf_load(&hf, hf_dir);
	for (int i = 2; i < 4; i++) {
		snprintf(out, sizeof out, "%s/out-%s", ws, quants[i]);
		char args[64];
		snprintf(args, sizeof args, "--quant %s --quiet", quants[i]);
		int st = convert(hf_dir, out, args);
		char *log = read_file(ws, "log.txt", NULL);
		cr_assert_eq(st, 0, "%s", log);
		free(log);
		enum quant_type q;
		quant_type_parse(quants[i], &q);
		check_container(out, &hf, q, 64);
		struct manifest m;
		cr_assert_eq(manifest_load(&m, out), 0);
		cr_assert_eq(manifest_find(&m, "model.layers.1.mlp.down_proj.weight")->type, QUANT_BF16);
		cr_assert_eq(manifest_find(&m, "model.layers.1.mlp.up_proj.weight")->type, QUANT_INT8);
		manifest_free(&m);
	}
	hf_free(&hf);
}

static bool same_file(const char *a, const char *b)
{
	size_t la = 0, lb = 0;
	char *x = tu_read(a, &la), *y = tu_read(b, &lb);
	cr_assert(x && y, "cannot read %s or %s", a, b);
	bool same = la == lb && memcmp(x, y, la) == 0;
	free(x);
	free(y);
	return same;
}

/* gen_model.py draws each weight from (seed, per-expert name), whatever the
 * layout; the fixtures qwen3_moe and qwen3_moe_fused share seed 1. First
 * check that premise on the checkpoints, then that the containers agree
 * byte for byte. */
Test(convert, fused_layout_matches_per_expert)
{
	char a_dir[PATH_MAX], b_dir[PATH_MAX];
	fixture_path(a_dir, sizeof a_dir, "qwen3_moe");
	fixture_path(b_dir, sizeof b_dir, "qwen3_moe_fused");
	struct hf_ckpt a, b;
	hf_load(&a, a_dir);
	hf_load(&b, b_dir);
	int64_t I = hf_experts_ffn(&a), H = cfg_int(&a, "hidden_size");
	float *va = malloc((size_t)(I * H) * sizeof *va), *vb = malloc((size_t)(I * H) * sizeof *vb);
	int n_fused = 0;
	for (int l = 0; l < cfg_int(&a, "num_hidden_layers"); l++) {
		if (!hf_layer_is_moe(&a, l))
			continue;
		for (int e = 0; e < hf_n_experts(&a); e++) {
			for (int p = 0; p < 3; p++) {
				int64_t r0a, r0b, rows = p == 2 ? H : I, cols = p == 2 ? I : H;
				bool x;
				const struct hf_tensor *ta = hf_expert(&a, l, e, p, &r0a);
				const struct hf_tensor *tb = hf_expert(&b, l, e, p, &r0b);
				n_fused += tb->ndim == 3;
				hf_rows(&a, ta, r0a, rows, cols, va, &x);
				hf_rows(&b, tb, r0b, rows, cols, vb, &x);
				cr_assert_eq(memcmp(va, vb, (size_t)(rows * cols) * sizeof *va), 0,
					     "gen_model.py: fused and per-expert weights of seed 1 differ "
					     "(layer %d expert %d part %d)", l, e, p);
			}
		}
	}
	cr_assert_gt(n_fused, 0, "qwen3_moe_fused has no fused expert tensors");
	free(va);
	free(vb);
	hf_free(&a);
	hf_free(&b);

	const char *qs[2] = { "int4", "bf16" };
	for (int i = 0; i < 2; i++) {
		char oa[PATH_MAX + 32], ob[PATH_MAX + 32], args[64];
		snprintf(oa, sizeof oa, "%s/per-expert-%s", ws, qs[i]);
		snprintf(ob, sizeof ob, "%s/fused-%s", ws, qs[i]);
		snprintf(args, sizeof args, "--quant %s --quiet", qs[i]);
		cr_assert_eq(convert(a_dir, oa, args), 0);
		cr_assert_eq(convert(b_dir, ob, args), 0);
		struct manifest ma, mb;
		cr_assert_eq(manifest_load(&ma, oa), 0);
		cr_assert_eq(manifest_load(&mb, ob), 0);
		cr_assert_eq(ma.n_expert_layers, mb.n_expert_layers);
		for (size_t l = 0; l < ma.n_expert_layers; l++) {
			char fa[PATH_MAX + 128], fb[PATH_MAX + 128];
			snprintf(fa, sizeof fa, "%s/%s", oa, ma.layers[l].file);
			snprintf(fb, sizeof fb, "%s/%s", ob, mb.layers[l].file);
			cr_assert(same_file(fa, fb), "%s and %s differ", fa, fb);
			cr_assert_eq(memcmp(ma.layers[l].checksums, mb.layers[l].checksums,
					    (size_t)ma.n_experts * sizeof(uint64_t)), 0);
		}
		char ra[PATH_MAX + 32], rb[PATH_MAX + 32];
		snprintf(ra, sizeof ra, "%s/resident.bin", oa);
		snprintf(rb, sizeof rb, "%s/resident.bin", ob);
		cr_assert(same_file(ra, rb), "resident.bin differs between layouts");
		manifest_free(&ma);
		manifest_free(&mb);
	}
}

Test(convert, force_replaces_container)
{
	char hf_dir[PATH_MAX], out[PATH_MAX + 16], p[PATH_MAX + 64], names[1024];
	fixture_path(hf_dir, sizeof hf_dir, "mixtral");
	snprintf(out, sizeof out, "%s/out", ws);
	cr_assert_eq(convert(hf_dir, out, "--quiet"), 0);
	snprintf(p, sizeof p, "%s/marker.txt", out);
	cr_assert_eq(tu_write(p, "old", 3), 0);
	int st = convert(hf_dir, out, "--force --quant bf16 --quiet");
	char *log = read_file(ws, "log.txt", NULL);
	cr_assert_eq(st, 0, "%s", log);
	free(log);
	cr_assert_neq(access(p, F_OK), 0, "the old container was merged, not replaced");
	cr_assert_eq(out_entries(names, sizeof names), 1, "left behind: %s", names);
	struct hf_ckpt hf;
	hf_load(&hf, hf_dir);
	check_container(out, &hf, QUANT_BF16, 64);
	hf_free(&hf);
}

/* transformers v5 stores Mixtral's router as mlp.gate and its experts as
 * fused mlp.experts tensors (gen_model.py --arch mixtral --experts-layout
 * fused writes it so); the container keeps the block_sparse_moe names. */
Test(convert, mixtral_fused_v5_names)
{
	char hf_dir[PATH_MAX + 16], out[PATH_MAX + 16];
	snprintf(hf_dir, sizeof hf_dir, "%s/hf", ws);
	cr_assert_eq(tu_sh(PY " '%s/tools/gen_model.py' --arch mixtral --experts-layout fused --out '%s'",
			   repo_root(), hf_dir), 0);
	struct hf_ckpt hf;
	hf_load(&hf, hf_dir);
	cr_assert_null(hf_find(&hf, "model.layers.0.block_sparse_moe.gate.weight"));
	cr_assert_not_null(hf_find(&hf, "model.layers.0.mlp.gate.weight"));
	snprintf(out, sizeof out, "%s/out", ws);
	int st = convert(hf_dir, out, "--quant int8 --quiet");
	char *log = read_file(ws, "log.txt", NULL);
	cr_assert_eq(st, 0, "%s", log);
	free(log);
	check_container(out, &hf, QUANT_INT8, 64);
	struct manifest m;
	cr_assert_eq(manifest_load(&m, out), 0);
	cr_assert_not_null(manifest_find(&m, "model.layers.1.block_sparse_moe.gate.weight"));
	manifest_free(&m);
	hf_free(&hf);
}

/* A DeepSeek-V4 checkpoint of tests/v4_checkpoint.py in ws/v4 (args: its
 * layout and precisions), converted with --quant f32 into ws/v4-out; every
 * stored value must equal what the generator computed from the checkpoint
 * (the FP8 and FP4 products are exact in f32). Returns convert's stderr. */
static char *v4_convert_check(const char *args)
{
	char hf[PATH_MAX + 8], out[PATH_MAX + 16];
	snprintf(hf, sizeof hf, "%s/v4", ws);
	snprintf(out, sizeof out, "%s/v4-out", ws);
	tu_rmrf(hf);
	tu_rmrf(out);
	cr_assert_eq(tu_sh("mkdir -p '%s' && " PY " '%s/tests/v4_checkpoint.py' '%s' %s", hf, tu_repo(), hf, args), 0);
	int st = convert(hf, out, "--quant f32");
	char *log = read_file(ws, "log.txt", NULL);
	cr_assert_eq(st, 0, "%s: %s", args, log);
	cr_expect_eq(tu_sh(PY " '%s/tests/v4_checkpoint.py' check '%s' '%s/expect.json' >&2", tu_repo(), out, hf), 0,
		     "%s: stored values differ", args);
	return log;
}

/* DeepSeek-V4: the released layout (names of the reference code, renamed
 * by transformers' conversion rules, FP8 weights with F32 or F8_E8M0
 * `.scale` block scales, FP4 experts, an I64 tid2eid, the MTP block mtp.0
 * kept as layer 3) and transformers' own names with fused experts (which
 * have no MTP block: said in a line) convert to the same container names,
 * every value exact. */
Test(convert, deepseek_v4_layouts)
{
	char *log = v4_convert_check("released fp8 fp4");
	cr_expect(!strstr(log, "MTP"), "%s", log);
	cr_expect(strstr(log, "FP4") && strstr(log, "dequantized"), "%s", log);
	free(log);
	free(v4_convert_check("released fp8 e8m0"));
	log = v4_convert_check("internal");
	cr_expect(strstr(log, "no MTP tensors") && strstr(log, "no drafting"), "%s", log);
	free(log);
	/* The default quantization keeps what transformers keeps in fp32. */
	char hf[PATH_MAX + 8], out[PATH_MAX + 16];
	snprintf(hf, sizeof hf, "%s/v4", ws);
	snprintf(out, sizeof out, "%s/v4-int4", ws);
	cr_assert_eq(convert(hf, out, "--dense-quant int4"), 0);
	struct manifest m;
	cr_assert_eq(manifest_load(&m, out), 0, "%s", error_message());
	static const char *const f32[] = { "model.layers.1.attn_hc.fn", "model.layers.1.self_attn.sinks",
					   "model.layers.1.self_attn.compressor.kv_proj.weight",
					   "model.layers.1.self_attn.compressor.indexer.scorer.weights_proj.weight",
					   "model.layers.1.self_attn.compressor.position_bias", "model.hc_head.hc_fn",
					   "model.layers.0.mlp.gate.tid2eid", "model.layers.1.mlp.gate.weight",
					   "model.layers.1.mlp.gate.e_score_correction_bias" };
	for (size_t i = 0; i < sizeof f32 / sizeof f32[0]; i++) {
		const struct manifest_tensor *t = manifest_find(&m, f32[i]);
		cr_assert_not_null(t, "%s missing", f32[i]);
		cr_expect_eq(t->type, QUANT_F32, "%s is not f32", f32[i]);
	}
	cr_expect_eq(manifest_find(&m, "model.layers.1.self_attn.q_a_proj.weight")->type, QUANT_INT4);
	cr_expect_null(manifest_find(&m, "model.layers.0.mlp.gate.e_score_correction_bias"), "hash layers have no bias");
	manifest_free(&m);
}
