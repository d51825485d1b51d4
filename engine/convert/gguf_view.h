/*
 * gguf_view — a GGUF model seen as the Hugging Face checkpoint it was
 * converted from, so that the converter (convert.c) reads it as it reads
 * safetensors: each tensor the container needs, under the container's
 * (HF) name and shape, found where llama.cpp's converter (at 81ff7abe5)
 * put it.
 *
 * What llama.cpp changed is undone exactly, without touching a value:
 *  - names: blk.L.attn_q.weight is model.layers.L.self_attn.q_proj.weight
 *    and so on (the table in gguf_view.c);
 *  - Llama's RoPE row order (Mixtral): llama.cpp permutes the q and k rows
 *    of each head from rotate-half pairs (j, j + d/2) to adjacent pairs
 *    (2j, 2j + 1); the view reads HF row h*d + s*d/2 + j from file row
 *    h*d + 2j + s, whole rows, so block-quantized rows stay as they are;
 *  - stacked experts ffn_{gate,up,down}_exps [E, rows, cols]: expert e is
 *    the run of rows e*rows .. e*rows + rows - 1, named as one expert of
 *    the per-expert layout;
 *  - DeepSeek's kv_b_proj, which llama.cpp stores split and transposed as
 *    attn_k_b [H, kv_lora, nope] and attn_v_b [H, v, kv_lora]: rebuilt as
 *    [H * (nope + v), kv_lora], dequantized (computed rows: f32 only);
 *  - gpt-oss's expert biases, split into ffn_gate_exps.bias and
 *    ffn_up_exps.bias: interleaved again into gate_up_proj_bias [E, 2I].
 * Rows with a stored form (everything but the two rebuilt kinds) can be
 * read raw (st_tensor_read_raw: the GGML blocks as in the file) or as f32
 * (dequantized exactly, as ggml does).
 */
#ifndef COLIBRI_ENGINE_CONVERT_GGUF_VIEW_H
#define COLIBRI_ENGINE_CONVERT_GGUF_VIEW_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/convert/gguf.h"
#include "engine/convert/safetensors.h"
#include "engine/model/model_config.h"
#include "engine/model/model_tensors.h"

struct gv_src;

struct gguf_view {
	struct gguf_set g;
	struct gv_src *srcs;         /* [n_srcs], one per view tensor */
	size_t n_srcs;
	bool *used;                  /* [g.n_tensors order of g.files]: consumed by the view */
	size_t n_unused;             /* GGUF tensors the container does not take */
	char unused_example[128];    /* one of them, for the note */
};

/* Opens the GGUF model at path (one file, or any file of a split). */
int gguf_view_open(struct gguf_view *v, const char *path);

/* Fills set (st_set_close frees it; the view must outlive it) with the
 * tensors of cfg that the GGUF holds: the resident specs[n_specs] and
 * every routed expert matrix of every MoE layer, each under the
 * container's name. A tensor the GGUF lacks is simply absent (the
 * converter names what is missing); a GGUF tensor in a form the view
 * cannot undo is an error naming it. */
int gguf_view_map(struct gguf_view *v, struct st_set *set, const struct model_config *cfg,
		  const struct tensor_spec *specs, size_t n_specs);

/* The GGUF name of the tensor t of the view (for messages). */
const char *gguf_view_source(const struct st_tensor *t);

void gguf_view_close(struct gguf_view *v);

#endif
