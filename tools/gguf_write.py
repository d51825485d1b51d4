#!/usr/bin/python3
"""Writes a Hugging Face OLMoE checkpoint as a GGUF v3 file for llama.cpp.

    gguf_write.py --model HF_DIR --out FILE.gguf --type {q4_0,q8_0,bf16,f32}
                  [--name NAME] [--quiet]

For benchmarking colibri against llama.cpp on the same weights: the input
is an OlmoeForCausalLM directory as tools/gen_model.py writes it (--arch
olmoe, or --shape olmoe-1b-7b), the output a file that llama.cpp (checked at
upstream commit 81ff7abe5) loads as architecture "olmoe".  Numbers are
those colibri converts from: each BF16 (or F16 / F32) source value widened
to float32 exactly, then stored as float32, bf16, or quantized with the
arithmetic of ggml's reference quantizers (ggml-quants.c
quantize_row_q4_0_ref, quantize_row_q8_0_ref, quantize_row_q6_K_ref:
float32 operations in the same order, fp16 scales rounded to nearest even),
which is what llama-quantize runs when no importance matrix is given.  The
output is byte for byte the tensor data llama-quantize writes from an F32
GGUF of the same model.

Tensor types follow convert_hf_to_gguf.py (OlmoeModel) and then
llama-quantize without --pure or an imatrix (llama-quant.cpp):

    tensor                                  f32   bf16  q8_0  q4_0
    *_norm.weight (attn, ffn, q/k, output)  F32   F32   F32   F32
    blk.L.ffn_gate_inp.weight (router)      F32   F32   F32   F32
    token_embd.weight                       F32   BF16  Q8_0  Q4_0
    output.weight                           F32   BF16  Q8_0  Q6_K (Q8_0 when hidden % 256 != 0)
    attn_q/k/v/output, ffn_*_exps           F32   BF16  Q8_0  Q4_0
    general.file_type                       0     32    7     2

(llama-quantize gives the output projection of a Q4_0 file Q6_K, and
attn_k / attn_v Q8_0 when the model has exactly 8 experts, as the tiny
fixtures do; OLMoE-1B-7B has 64, so its attention stays Q4_0.)
Quantized types need every row length (ggml's ne0) to be a multiple of 32,
which the OLMoE shapes and gen_model's sizes are.

Names and shapes (ggml lists dimensions innermost first, the reverse of
numpy): token_embd [H, V], blk.L.attn_norm [H], attn_q / attn_k / attn_v /
attn_output [H, H], attn_q_norm / attn_k_norm [H] (OLMoE normalises the
whole projection, heads * head_dim = H, before splitting heads), ffn_norm
[H], ffn_gate_inp [H, E], ffn_gate_exps / ffn_up_exps [H, I, E] (expert e's
[I, H] matrix is slice e), ffn_down_exps [I, H, E], output_norm [H], output
[H, V].  No q/k permutation: llama.cpp ropes OLMoE in the NeoX (rotate-half)
layout of the checkpoint.  Keys: general.architecture, name, alignment (32),
file_type, quantization_version (2), olmoe.context_length,
embedding_length, feed_forward_length (the expert width), block_count,
attention.head_count, attention.head_count_kv,
attention.layer_norm_rms_epsilon, rope.freq_base, expert_count,
expert_used_count.  llama.cpp's OLMoE graph never renormalises the top-k
weights and does not clamp q/k/v, so a config with norm_topk_prob true or
clip_qkv set is refused.

Vocabulary: always synthetic (a tokenizer.json in HF_DIR is ignored, with a
note), an SPM ("llama") vocabulary of exactly vocab_size entries: "<s>" at
bos_token_id, "</s>" at eos_token_id, "<pad>" at pad_token_id (control
tokens), "<unk>" at the first free id, then the 256 byte tokens "<0x00>" ..
"<0xFF>", U+2581 (SentencePiece's space) and the printable ASCII
characters, then "<filler_N>" pieces.  A text prompt tokenizes to one token
per character (other bytes to byte tokens).  When the config has no bos
(OLMoE's is null) the bos id is the eos id and add_bos_token is false.
Token ids are what matter when comparing engines.

The file is written sequentially, tensor by tensor in row chunks of 4 M
values (about 200 MB resident at most); the source is read with pread and
its pages dropped after use, the output synced and dropped every 256 MiB.
It goes to OUT.tmp, renamed to OUT when complete; on an error (or SIGINT /
SIGTERM) the partial file is removed and the exit status is non-zero.  The
16-layer OLMoE shape (13.8 GB of bf16) takes 2.5 to 4 minutes, bound by
the disk.
"""

import argparse
import json
import os
import shutil
import signal
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np as st  # noqa: E402
import ggml_blocks as gb  # noqa: E402

ALIGNMENT = 32
QUANTIZATION_VERSION = 2      # GGML_QNT_VERSION
CHUNK_ELEMS = 1 << 22         # source values converted at once

# ggml_type: (id, values per block, bytes per block), from ggml_blocks' table
GGML_F32, GGML_BF16, GGML_Q4_0, GGML_Q8_0, GGML_Q6_K = "F32", "BF16", "Q4_0", "Q8_0", "Q6_K"
GGML_TYPES = {t: (gb.GGML_TYPE[t.lower()],) + gb.BLOCK[t.lower()]
              for t in (GGML_F32, GGML_Q4_0, GGML_Q8_0, GGML_Q6_K, GGML_BF16)}
# --type: (type of the big matrices, general.file_type)
FILE_TYPES = {"f32": (GGML_F32, 0), "bf16": (GGML_BF16, 32), "q8_0": (GGML_Q8_0, 7),
              "q4_0": (GGML_Q4_0, 2)}

# gguf value types
GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9

# llama_token_type
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6


class GGUFError(Exception):
    """Bad input or a failed write; the message names the file and problem."""


# ---------------------------------------------------------------- quantizers
#
# Each takes float32 rows [n, k] (k a multiple of the block) and returns the
# blocks as uint8 [n, k / block * block_bytes], computing in float32 exactly
# as ggml-quants.c does (ggml-base is built for baseline x86-64, so no fused
# multiply-adds there either).


def _fp16_bytes(v):
    return np.asarray(v, dtype=np.float32).astype("<f2").view(np.uint8).reshape(-1, 2)


def _roundf(v):
    """C roundf of float32 values (half away from zero), exactly: the
    fraction v - trunc(v) of a float32 is itself a float32."""
    t = np.trunc(v)
    return t + np.copysign((np.abs(v - t) >= np.float32(0.5)).astype(np.float32), v)


def quantize_q8_0(x):
    """quantize_row_q8_0_ref: d = amax / 127, q = roundf(x * (1 / d))."""
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = _roundf(b * inv[:, None]).astype(np.int8)
    out = np.empty((b.shape[0], 34), dtype=np.uint8)
    out[:, :2] = _fp16_bytes(d)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(x.shape[0], -1)


def quantize_q4_0(x):
    """quantize_row_q4_0_ref: d = (the value of largest magnitude, first one
    if tied) / -8, q = min(15, (int8)(x * (1 / d) + 8.5)); byte j holds
    value j in its low nibble and value j + 16 in its high nibble."""
    b = x.reshape(-1, 32)
    first = np.abs(b).argmax(axis=1)
    mx = b[np.arange(b.shape[0]), first]
    mx = np.where(mx == 0, np.float32(0), mx)   # an all-zero block keeps C's max = +0.0f
    d = mx / np.float32(-8)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = b * inv[:, None] + np.float32(8.5)
    q = np.minimum(v.astype(np.int8), 15).astype(np.uint8)
    out = np.empty((b.shape[0], 18), dtype=np.uint8)
    out[:, :2] = _fp16_bytes(d)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.reshape(x.shape[0], -1)


def _nearest_int(v):
    """ggml's nearest_int (float32 + 1.5 * 2^23): round half to even."""
    return np.rint(v)


def _make_qx_quants_16_32(x):
    """make_qx_quants(16, 32, x, L, rmse_type 1, NULL) on sub-blocks x
    [B, 16]: returns (scale [B] float32, L [B, 16] in 0..63).  The sums run
    over the 16 values left to right in float32, as the C loop adds them."""
    nmax = np.float32(32)
    first = np.abs(x).argmax(axis=1)
    mx = x[np.arange(x.shape[0]), first]
    zero = np.abs(mx) < np.float32(1e-15)
    mx = np.where(zero, np.float32(1), mx).astype(np.float32)
    xt = np.ascontiguousarray(x.T)           # [16, B]: one vector add per value
    wx = xt * xt * xt                        # w * x[i] with w = x[i] * x[i]
    w = xt * xt

    def sums(iscale):
        l = np.clip(_nearest_int(iscale[None, :] * xt), -32, 31).astype(np.float32)
        lx, l2 = wx * l, w * l * l
        sumlx, suml2 = lx[0].copy(), l2[0].copy()
        for i in range(1, 16):
            sumlx += lx[i]
            suml2 += l2[i]
        return l, sumlx, suml2

    l, sumlx, suml2 = sums(-nmax / mx)
    L = l + nmax
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 != 0, sumlx / suml2, np.float32(0)).astype(np.float32)
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        l, sumlx, suml2 = sums(-(nmax + np.float32(0.1) * np.float32(step)) / mx)
        take = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        L = np.where(take[None, :], l + nmax, L)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(take, sumlx / suml2, scale).astype(np.float32)
        best = np.where(take, scale * sumlx, best).astype(np.float32)
    scale = np.where(zero, np.float32(0), scale)
    L = np.where(zero[None, :], np.float32(0), L)
    return scale, np.ascontiguousarray(L.T)


def quantize_q6_K(x):
    """quantize_row_q6_K_ref on rows x [n, k], k a multiple of 256: per
    super-block, 16 sub-block scales from make_qx_quants, quantized to int8
    against the largest (d = 1 / (-128 / max_scale) as fp16), then each
    value requantized to 6 bits against its int8 scale times d."""
    sb = x.reshape(-1, 256)
    n = sb.shape[0]
    scales, L = _make_qx_quants_16_32(sb.reshape(-1, 16))
    scales = scales.reshape(n, 16)
    L = L.reshape(n, 256)
    first = np.abs(scales).argmax(axis=1)
    max_scale = scales[np.arange(n), first]
    zero = np.abs(max_scale) < np.float32(1e-15)
    max_scale = np.where(zero, np.float32(1), max_scale).astype(np.float32)
    iscale = np.float32(-128) / max_scale
    d16 = (np.float32(1) / iscale).astype(np.float16)
    qs = np.minimum(127, _nearest_int(iscale[:, None] * scales)).astype(np.int8)
    dj = d16.astype(np.float32)[:, None] * qs.astype(np.float32)          # [n, 16]
    with np.errstate(divide="ignore", invalid="ignore"):
        l = np.clip(_nearest_int(sb.reshape(n, 16, 16) / dj[:, :, None]), -32, 31)
    L = np.where((dj != 0)[:, :, None], l + 32, L.reshape(n, 16, 16)).reshape(n, 2, 4, 32)
    L = L.astype(np.uint8)
    # Per half of 128 values: ql[0:32] = L[0:32] | L[64:96] << 4,
    # ql[32:64] = L[32:64] | L[96:128] << 4, qh = the top two bits of the four.
    ql = np.concatenate([(L[:, :, 0] & 15) | ((L[:, :, 2] & 15) << 4),
                         (L[:, :, 1] & 15) | ((L[:, :, 3] & 15) << 4)], axis=2)
    qh = (L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4) | \
        ((L[:, :, 3] >> 4) << 6)
    out = np.empty((n, 210), dtype=np.uint8)
    out[:, 0:128] = ql.reshape(n, 128)
    out[:, 128:192] = qh.reshape(n, 64)
    out[:, 192:208] = qs.view(np.uint8)
    out[:, 208:210] = d16.astype("<f2").view(np.uint8).reshape(n, 2)
    out[zero] = 0
    return out.reshape(x.shape[0], -1)


QUANTIZERS = {GGML_Q4_0: quantize_q4_0, GGML_Q8_0: quantize_q8_0, GGML_Q6_K: quantize_q6_K}


def encode(gtype, src_dtype, raw):
    """Source rows (raw storage of src_dtype) -> bytes of ggml type gtype."""
    if gtype == GGML_BF16 and src_dtype == "BF16":
        return np.ascontiguousarray(raw, dtype="<u2")
    x = st.to_f32(st.Tensor(src_dtype, raw.shape, raw))
    x = np.ascontiguousarray(x, dtype=np.float32)
    if gtype == GGML_F32:
        return x.astype("<f4")
    if gtype == GGML_BF16:
        return st.f32_to_bf16(x)
    return QUANTIZERS[gtype](x)


def row_bytes(gtype, ne0):
    _, blk, size = GGML_TYPES[gtype]
    return ne0 // blk * size


# ---------------------------------------------------------------- source


class Source:
    """The checkpoint's tensors as (file, dtype, shape, absolute offset),
    read by row ranges with pread; safetensors_np validates the headers."""

    READABLE = ("BF16", "F16", "F32")

    def __init__(self, model_dir):
        index = os.path.join(model_dir, "model.safetensors.index.json")
        if os.path.exists(index):
            try:
                with open(index) as f:
                    files = sorted(set(json.load(f)["weight_map"].values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                raise GGUFError("%s: unreadable index: %s" % (index, e))
        elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
            files = ["model.safetensors"]
        else:
            raise GGUFError("%s: neither model.safetensors nor model.safetensors.index.json"
                            % model_dir)
        self.model_dir, self.entries, self.fds = model_dir, {}, {}
        for fname in files:
            path = os.path.join(model_dir, fname)
            try:
                header, _, data_start = st.read_header(path)
                self.fds[path] = os.open(path, os.O_RDONLY)
            except (OSError, ValueError) as e:
                raise GGUFError(str(e))
            for name, info in header.items():
                self.entries[name] = (path, info["dtype"], tuple(info["shape"]),
                                      data_start + info["data_offsets"][0])

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}

    def check(self, name, shape):
        if name not in self.entries:
            raise GGUFError("%s: the checkpoint has no tensor %r" % (self.model_dir, name))
        path, dtype, have, _ = self.entries[name]
        if have != tuple(shape):
            raise GGUFError("%s: tensor %r has shape %s, the config implies %s"
                            % (path, name, list(have), list(shape)))
        if dtype not in self.READABLE:
            raise GGUFError("%s: tensor %r is %s; only %s sources are supported (generate "
                            "with --weights-dtype bf16)" % (path, name, dtype,
                                                            "/".join(self.READABLE)))
        return dtype

    def rows(self, name, row, count):
        """Raw storage of flat rows [row, row + count) of the tensor viewed
        as [prod(shape[:-1]), shape[-1]]."""
        path, dtype, shape, offset = self.entries[name]
        cols = shape[-1] if shape else 1
        np_dtype, itemsize = st.DTYPES[dtype]
        begin = offset + row * cols * itemsize
        want = count * cols * itemsize
        buf = os.pread(self.fds[path], want, begin)
        if len(buf) != want:
            raise GGUFError("%s: short read of %r (%d of %d bytes)" % (path, name, len(buf), want))
        return np.frombuffer(buf, dtype=np_dtype).reshape(count, cols)

    def drop(self, name):
        """Drops the page cache of one tensor's bytes (read once)."""
        path, dtype, shape, offset = self.entries[name]
        n = st.DTYPES[dtype][1] * int(np.prod(shape))
        os.posix_fadvise(self.fds[path], offset, n, os.POSIX_FADV_DONTNEED)


# ---------------------------------------------------------------- the plan


class Plan:
    """One GGUF tensor: name, ggml type, ne (innermost first) and the source
    row segments [(hf name, first flat row, row count)] it concatenates."""

    def __init__(self, name, gtype, ne, segments):
        self.name, self.gtype, self.ne, self.segments = name, gtype, tuple(ne), segments

    def nbytes(self):
        return row_bytes(self.gtype, self.ne[0]) * int(np.prod(self.ne[1:]))


def read_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise GGUFError("%s: %s" % (path, e))
    if cfg.get("model_type") != "olmoe":
        raise GGUFError("%s: model_type is %r; only olmoe (OlmoeForCausalLM) is supported"
                        % (path, cfg.get("model_type")))
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "num_experts", "num_experts_per_tok", "vocab_size", "rms_norm_eps"):
        if not isinstance(cfg.get(key), (int, float)) or isinstance(cfg.get(key), bool):
            raise GGUFError("%s: missing or non-numeric %s" % (path, key))
    if cfg.get("norm_topk_prob"):
        raise GGUFError("%s: norm_topk_prob is true; llama.cpp's OLMoE graph never "
                        "renormalises the top-k weights" % path)
    if cfg.get("clip_qkv") is not None:
        raise GGUFError("%s: clip_qkv is %r; llama.cpp's OLMoE graph does not clamp q/k/v"
                        % (path, cfg["clip_qkv"]))
    if (cfg.get("rope_scaling") or {}).get("rope_type", "default") != "default":
        raise GGUFError("%s: rope_scaling %r is not supported" % (path, cfg["rope_scaling"]))
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or H // nh
    if hd * nh != H or nkv != nh:
        raise GGUFError("%s: llama.cpp's OLMoE needs heads * head_dim == hidden and as many "
                        "kv heads as heads (have %d * %d, hidden %d, %d kv heads)"
                        % (path, nh, hd, H, nkv))
    return cfg


def plan_tensors(cfg, src, ftype):
    """The GGUF tensors in convert_hf_to_gguf.py's order, checked against
    the checkpoint (names, shapes, dtypes) before anything is written."""
    big, _ = FILE_TYPES[ftype]
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    I, E = cfg["intermediate_size"], cfg["num_experts"]
    output_type = big
    if big == GGML_Q4_0:
        # llama-quantize: the output projection of a Q4_0 file is Q6_K,
        # falling back to Q8_0 when a row is not whole 256-value blocks.
        output_type = GGML_Q6_K if H % 256 == 0 else GGML_Q8_0
    # llama-quantize bumps attn_k and attn_v to Q8_0 in 8-expert models
    # (Mixtral-style; the tiny fixtures have 8 experts, OLMoE-1B-7B 64).
    kv_type = GGML_Q8_0 if big == GGML_Q4_0 and E == 8 else big
    plans = []

    def whole(gguf_name, hf_name, gtype, shape):
        src.check(hf_name, shape)
        rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        plans.append(Plan(gguf_name, gtype, tuple(reversed(shape)), [(hf_name, 0, rows)]))

    whole("token_embd.weight", "model.embed_tokens.weight", big, (V, H))
    for L in range(cfg["num_hidden_layers"]):
        p, b = "model.layers.%d." % L, "blk.%d." % L
        whole(b + "attn_norm.weight", p + "input_layernorm.weight", GGML_F32, (H,))
        for hf, gg, gtype in (("q_proj", "attn_q", big), ("k_proj", "attn_k", kv_type),
                              ("v_proj", "attn_v", kv_type), ("o_proj", "attn_output", big)):
            whole(b + gg + ".weight", p + "self_attn.%s.weight" % hf, gtype, (H, H))
        whole(b + "attn_q_norm.weight", p + "self_attn.q_norm.weight", GGML_F32, (H,))
        whole(b + "attn_k_norm.weight", p + "self_attn.k_norm.weight", GGML_F32, (H,))
        whole(b + "ffn_norm.weight", p + "post_attention_layernorm.weight", GGML_F32, (H,))
        whole(b + "ffn_gate_inp.weight", p + "mlp.gate.weight", GGML_F32, (E, H))
        fused = p + "mlp.experts.gate_up_proj" in src.entries
        for part, gg in (("gate", "ffn_gate_exps"), ("up", "ffn_up_exps"),
                         ("down", "ffn_down_exps")):
            rows, cols = (H, I) if part == "down" else (I, H)
            if fused and part == "down":
                src.check(p + "mlp.experts.down_proj", (E, H, I))
                segs = [(p + "mlp.experts.down_proj", e * H, H) for e in range(E)]
            elif fused:
                src.check(p + "mlp.experts.gate_up_proj", (E, 2 * I, H))
                first = 0 if part == "gate" else I
                segs = [(p + "mlp.experts.gate_up_proj", e * 2 * I + first, I) for e in range(E)]
            else:
                segs = []
                for e in range(E):
                    name = p + "mlp.experts.%d.%s_proj.weight" % (e, part)
                    src.check(name, (rows, cols))
                    segs.append((name, 0, rows))
            plans.append(Plan(b + gg + ".weight", big, (cols, rows, E), segs))
    whole("output_norm.weight", "model.norm.weight", GGML_F32, (H,))
    if "lm_head.weight" in src.entries or not cfg.get("tie_word_embeddings"):
        whole("output.weight", "lm_head.weight", output_type, (V, H))
    else:
        src.check("model.embed_tokens.weight", (V, H))
        plans.append(Plan("output.weight", output_type, (H, V), [("model.embed_tokens.weight", 0, V)]))
    for t in plans:
        blk = GGML_TYPES[t.gtype][1]
        if t.ne[0] % blk:
            raise GGUFError("%s: rows of %d values are not whole %s blocks of %d; use --type "
                            "f32 or bf16" % (t.name, t.ne[0], t.gtype, blk))
    return plans


# ---------------------------------------------------------------- vocabulary


def synthetic_vocab(cfg):
    """(tokens, scores, token types, {bos, eos, unk, pad, add_bos}) of an
    SPM vocabulary of exactly vocab_size entries (see the module docstring)."""
    V = cfg["vocab_size"]
    eos = cfg.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    bos, pad = cfg.get("bos_token_id"), cfg.get("pad_token_id")
    if eos is None:
        raise GGUFError("config.json has no eos_token_id")
    tokens, types = [None] * V, [TOKEN_NORMAL] * V
    for tid, text in ((bos, "<s>"), (eos, "</s>"), (pad, "<pad>")):
        if tid is None:
            continue
        if not isinstance(tid, int) or not 0 <= tid < V:
            raise GGUFError("config.json: special token id %r is outside the vocabulary of %d"
                            % (tid, V))
        if tokens[tid] is None:       # bos, eos and pad may share an id
            tokens[tid], types[tid] = text, TOKEN_CONTROL
    free = [i for i in range(V) if tokens[i] is None]
    if len(free) < 1 + 256:
        raise GGUFError("config.json: vocab_size %d is too small for a synthetic SPM "
                        "vocabulary (<unk> and 256 byte tokens besides the special ones)" % V)
    free = iter(free)
    unk = next(free)
    tokens[unk], types[unk] = "<unk>", TOKEN_UNKNOWN
    for byte in range(256):
        i = next(free)
        tokens[i], types[i] = "<0x%02X>" % byte, TOKEN_BYTE
    pieces = ["\u2581"] + [chr(c) for c in range(0x21, 0x7F)]
    filler = 0
    for i in free:
        if pieces:
            tokens[i] = pieces.pop(0)
        else:
            tokens[i] = "<filler_%d>" % filler
            filler += 1
    scores = [0.0 if t != TOKEN_NORMAL else -float(i) for i, t in enumerate(types)]
    ids = dict(bos=eos if bos is None else bos, eos=eos, unk=unk, pad=pad,
               add_bos=bos is not None)
    return tokens, scores, types, ids


# ---------------------------------------------------------------- writing


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv_bytes(key, vtype, value):
    out = gguf_string(key) + struct.pack("<I", vtype)
    if vtype == GGUF_ARRAY:
        etype, items = value
        out += struct.pack("<IQ", etype, len(items))
        if etype == GGUF_STRING:
            return out + b"".join(gguf_string(s) for s in items)
        fmt = {GGUF_F32: "<f4", GGUF_I32: "<i4", GGUF_U32: "<u4"}[etype]
        return out + np.asarray(items, dtype=fmt).tobytes()
    if vtype == GGUF_STRING:
        return out + gguf_string(value)
    return out + struct.pack({GGUF_U32: "<I", GGUF_I32: "<i", GGUF_F32: "<f",
                              GGUF_BOOL: "<?"}[vtype], value)


def metadata(cfg, ftype, name):
    a = "olmoe."
    tokens, scores, types, ids = synthetic_vocab(cfg)
    kv = [
        ("general.architecture", GGUF_STRING, "olmoe"),
        ("general.name", GGUF_STRING, name),
        ("general.alignment", GGUF_U32, ALIGNMENT),
        ("general.file_type", GGUF_U32, FILE_TYPES[ftype][1]),
        ("general.quantization_version", GGUF_U32, QUANTIZATION_VERSION),
        (a + "context_length", GGUF_U32, cfg.get("max_position_embeddings", 4096)),
        (a + "embedding_length", GGUF_U32, cfg["hidden_size"]),
        (a + "feed_forward_length", GGUF_U32, cfg["intermediate_size"]),
        (a + "block_count", GGUF_U32, cfg["num_hidden_layers"]),
        (a + "attention.head_count", GGUF_U32, cfg["num_attention_heads"]),
        (a + "attention.head_count_kv", GGUF_U32,
         cfg.get("num_key_value_heads") or cfg["num_attention_heads"]),
        (a + "attention.layer_norm_rms_epsilon", GGUF_F32, cfg["rms_norm_eps"]),
        (a + "rope.freq_base", GGUF_F32, cfg.get("rope_theta", 10000.0)),
        (a + "expert_count", GGUF_U32, cfg["num_experts"]),
        (a + "expert_used_count", GGUF_U32, cfg["num_experts_per_tok"]),
        ("tokenizer.ggml.model", GGUF_STRING, "llama"),
        ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, tokens)),
        ("tokenizer.ggml.scores", GGUF_ARRAY, (GGUF_F32, scores)),
        ("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_I32, types)),
        ("tokenizer.ggml.bos_token_id", GGUF_U32, ids["bos"]),
        ("tokenizer.ggml.eos_token_id", GGUF_U32, ids["eos"]),
        ("tokenizer.ggml.unknown_token_id", GGUF_U32, ids["unk"]),
        ("tokenizer.ggml.add_bos_token", GGUF_BOOL, ids["add_bos"]),
        ("tokenizer.ggml.add_eos_token", GGUF_BOOL, False),
    ]
    if ids["pad"] is not None:
        kv.append(("tokenizer.ggml.padding_token_id", GGUF_U32, ids["pad"]))
    return kv


def header_bytes(kv, plans):
    out = [b"GGUF", struct.pack("<IQQ", 3, len(plans), len(kv))]
    out += [kv_bytes(*item) for item in kv]
    offset = 0
    for t in plans:
        out.append(gguf_string(t.name) + struct.pack("<I", len(t.ne))
                   + struct.pack("<%dQ" % len(t.ne), *t.ne)
                   + struct.pack("<IQ", GGML_TYPES[t.gtype][0], offset))
        offset += -(-t.nbytes() // ALIGNMENT) * ALIGNMENT
    head = b"".join(out)
    return head + b"\0" * (-len(head) % ALIGNMENT), offset


def write_tensor(w, src, t):
    cols = t.ne[0]
    step = max(1, CHUNK_ELEMS // cols)
    written = 0
    for name, row, count in t.segments:
        dtype = src.entries[name][1]
        for r in range(row, row + count, step):
            n = min(step, row + count - r)
            data = encode(t.gtype, dtype, src.rows(name, r, n))
            w.write(data)
            written += data.nbytes
        src.drop(name)
    if written != t.nbytes():
        raise AssertionError("gguf_write: %s: wrote %d bytes, planned %d"
                             % (t.name, written, t.nbytes()))
    w.write(b"\0" * (-written % ALIGNMENT))


def write_gguf(model_dir, out, ftype, name, quiet):
    cfg = read_config(model_dir)
    if os.path.exists(os.path.join(model_dir, "tokenizer.json")) and not quiet:
        sys.stderr.write("gguf_write: note: %s has a tokenizer.json; writing a synthetic SPM "
                         "vocabulary of the same size instead\n" % model_dir)
    src = Source(model_dir)
    tmp = out + ".tmp"
    try:
        plans = plan_tensors(cfg, src, ftype)
        head, data_bytes = header_bytes(metadata(cfg, ftype, name), plans)
        total = len(head) + data_bytes
        out_dir = os.path.dirname(os.path.abspath(out))
        free = shutil.disk_usage(out_dir).free
        if total + (1 << 30) > free:
            raise GGUFError("%s: needs %.2f GB but %s has %.2f GB free (keeping 1 GiB)"
                            % (out, total / 1e9, out_dir, free / 1e9))
        if not quiet:
            sys.stderr.write("gguf_write: %s -> %s: %s, %d tensors, %.2f GB\n"
                             % (model_dir, out, ftype, len(plans), total / 1e9))
        t0 = time.monotonic()
        with open(tmp, "wb") as f:
            w = st.SyncedWriter(f, None if quiet else st.Progress(total, "gguf_write"), "header")
            w.write(head)
            for t in plans:
                w.part = t.name
                write_tensor(w, src, t)
            w.sync()
            if f.tell() != total:
                raise AssertionError("gguf_write: wrote %d bytes, planned %d" % (f.tell(), total))
        os.replace(tmp, out)
        if not quiet:
            sys.stderr.write("gguf_write: %s written in %.0f s\n" % (out, time.monotonic() - t0))
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    finally:
        src.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face OLMoE checkpoint directory")
    ap.add_argument("--out", required=True, help="GGUF file to write")
    ap.add_argument("--type", required=True, choices=sorted(FILE_TYPES))
    ap.add_argument("--name", help="general.name (default: the model directory's name)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    name = args.name or os.path.basename(os.path.normpath(args.model))
    # SIGTERM unwinds like Ctrl-C, so the partial OUT.tmp is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        write_gguf(args.model, args.out, args.type, name, args.quiet)
    except (GGUFError, OSError) as e:
        sys.stderr.write("gguf_write: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
