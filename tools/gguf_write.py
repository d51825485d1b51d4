#!/usr/bin/python3
"""Writes a Hugging Face MoE checkpoint as a GGUF v3 file laid out as llama.cpp's.

    gguf_write.py --model HF_DIR --out FILE.gguf --type T
                  [--split-max-tensors N] [--name NAME] [--quiet]
    T: f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k mxfp4 q4_k_m

Families (model_type -> general.architecture), mapped as llama.cpp's
convert_hf_to_gguf.py (conversion/*.py at upstream commit 81ff7abe5) maps
them: olmoe -> "olmoe" (below), qwen3_moe -> "qwen3moe", mixtral -> "llama"
(q/k rows permuted), deepseek_v3 -> "deepseek2" (kv_b_proj split into
attn_k_b / attn_v_b, MTP layers dropped), glm4_moe -> "glm4moe" (MTP layers
kept as blk.N.nextn.*), gpt_oss -> "gpt-oss" (MXFP4 experts repacked, not
requantized).  Each plan_<family> docstring says what it moves; gguf_to_hf.py
is the inverse.  OLMoE is streamed from disk (the benchmark's 13.8 GB shape);
the other families are planned from tensors in memory (tiny fixtures).

Tensor types (pick_type): 1-D tensors, norms, routers (ffn_gate_inp) and
biases are always F32, as the converter keeps them; matrices follow --type:
f32 / f16 / bf16 as the converter's --outtype; q8_0 and q4_0 as
llama-quantize; q4_k / q5_k / q6_k every matrix of that type (--pure);
q4_k_m as llama-quantize's Q4_K_M (output Q6_K; attn_v and ffn_down* Q6_K on
use_more_bits layers; with exactly 8 experts attn_k / attn_v Q8_0 and
attn_output Q5_K); mxfp4 as MXFP4_MOE (3-D expert tensors MXFP4, other
matrices Q8_0).  Rows that are not whole blocks fall back as
tensor_type_fallback does, except Q4_K / Q5_K -> Q8_0 (not ggml's Q5_0 /
Q5_1) and 32-block types -> F16.  Quantizers: q8_0, q4_0, q6_k are ggml's
reference arithmetic bit for bit (below), and so are q4_k and q5_k
(quantize_row_q4_K_ref / quantize_row_q5_K_ref: make_qkx2_quants' weighted
search per 32-value sub-block, 6-bit scales and mins, requantization;
checked equal to libggml-base's ggml_quantize_chunk on 2048 super-blocks
with zero, all-positive, constant, heavy-tailed and tiny blocks); mxfp4 is
quantize_row_mxfp4_ref's rule, f16 numpy's round-to-nearest-even.

--split-max-tensors N writes OUT-00001-of-0000K.gguf ... (OUT less .gguf)
as gguf-split does: at most N tensors a file, all metadata in the first,
split.no / split.count (u16) and split.tensors.count (i32) in each.

Vocabulary: with a tokenizer.json (byte-level BPE, Qwen2/Qwen3) the
tokenizer.ggml.* keys convert_hf_to_gguf.py's _set_vocab_gpt2 writes
(hf_vocab_kv); without one the synthetic SPM vocabulary described below.

What follows is the OLMoE path, kept byte-identical for the types it had
(f32, bf16, q8_0, q4_0; bench/vs_llama.sh uses it).

The input is an OlmoeForCausalLM directory as tools/gen_model.py writes it (--arch
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

Synthetic vocabulary (no tokenizer.json in HF_DIR, any family): an SPM
("llama") vocabulary of exactly vocab_size entries: "<s>" at bos_token_id, "</s>" at eos_token_id, "<pad>" at pad_token_id (control
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
FAMILIES = {}                 # model_type -> (plan, metadata, pick_type's hyper-parameters)
QUANTIZATION_VERSION = 2      # GGML_QNT_VERSION
CHUNK_ELEMS = 1 << 22         # source values converted at once

# ggml_type: (id, values per block, bytes per block), from ggml_blocks' table
GGML_F32, GGML_BF16, GGML_Q4_0, GGML_Q8_0, GGML_Q6_K = "F32", "BF16", "Q4_0", "Q8_0", "Q6_K"
GGML_F16, GGML_Q4_K, GGML_Q5_K, GGML_MXFP4 = "F16", "Q4_K", "Q5_K", "MXFP4"
GGML_TYPES = {t: (gb.GGML_TYPE[t.lower()],) + gb.BLOCK[t.lower()]
              for t in (GGML_F32, GGML_Q4_0, GGML_Q8_0, GGML_Q6_K, GGML_BF16, GGML_F16,
                        GGML_Q4_K, GGML_Q5_K, GGML_MXFP4)}
# --type: (type of the big matrices, general.file_type = llama_ftype)
FILE_TYPES = {"f32": (GGML_F32, 0), "bf16": (GGML_BF16, 32), "q8_0": (GGML_Q8_0, 7),
              "q4_0": (GGML_Q4_0, 2), "f16": (GGML_F16, 1), "q4_k": (GGML_Q4_K, 14),
              "q5_k": (GGML_Q5_K, 16), "q6_k": (GGML_Q6_K, 18), "mxfp4": (GGML_MXFP4, 38),
              "q4_k_m": (GGML_Q4_K, 15)}

# gguf value types
GGUF_U16, GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 2, 4, 5, 6, 7, 8, 9

# llama_token_type
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = \
    1, 2, 3, 4, 5, 6


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


def _make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep):
    """make_qkx2_quants(32, nmax, x, weights, L, &min, Laux, rmin, rdelta,
    nstep, false) on sub-blocks x, w [B, 32]: returns (scale [B], the_min
    [B], L [B, 32]), every float32 operation in the C loop's order."""
    f = np.float32
    xt, wt = np.ascontiguousarray(x.T), np.ascontiguousarray(w.T)      # [32, B]
    mn, mx = xt[0].copy(), xt[0].copy()
    sum_w = wt[0].copy()
    sum_x = sum_w * xt[0]
    for i in range(1, 32):
        mn = np.minimum(mn, xt[i])
        mx = np.maximum(mx, xt[i])
        sum_w = sum_w + wt[i]
        sum_x = sum_x + wt[i] * xt[i]
    mn = np.where(mn > 0, f(0), mn).astype(f)
    flat = mx == mn
    with np.errstate(divide="ignore", invalid="ignore"):
        rng = np.where(flat, f(1), mx - mn).astype(f)
        iscale = (f(nmax) / rng).astype(f)
        scale = (f(1) / iscale).astype(f)
    L = np.clip(_nearest_int(iscale * (xt - mn)), 0, nmax).astype(f)
    best = np.zeros_like(mn)
    for i in range(32):
        diff = scale * L[i] + mn - xt[i]
        best = best + wt[i] * (diff * diff)
    for step in range(nstep + 1):
        # C updates min with the best fit, and later steps use it
        with np.errstate(divide="ignore", invalid="ignore"):
            rng = np.where(flat, f(1), mx - mn).astype(f)
            iscale = ((f(rmin) + f(rdelta) * f(step) + f(nmax)) / rng).astype(f)
        la = np.clip(_nearest_int(iscale * (xt - mn)), 0, nmax).astype(f)
        sl = np.zeros_like(mn)
        sl2 = np.zeros_like(mn)
        sxl = np.zeros_like(mn)
        for i in range(32):
            wl = wt[i] * la[i]
            sl = sl + wl
            sl2 = sl2 + wl * la[i]
            sxl = sxl + wl * xt[i]
        D = sum_w * sl2 - sl * sl
        ok = D > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            ts = ((sum_w * sxl - sum_x * sl) / D).astype(f)
            tm = ((sl2 * sum_x - sl * sxl) / D).astype(f)
            pos = tm > 0
            tm = np.where(pos, f(0), tm).astype(f)
            ts = np.where(pos, (sxl / sl2).astype(f), ts).astype(f)
        cur = np.zeros_like(mn)
        for i in range(32):
            diff = ts * la[i] + tm - xt[i]
            cur = cur + wt[i] * (diff * diff)
        take = ok & (cur < best) & ~flat
        L = np.where(take[None, :], la, L)
        best = np.where(take, cur, best).astype(f)
        scale = np.where(take, ts, scale).astype(f)
        mn = np.where(take, tm, mn).astype(f)
    scale = np.where(flat, f(0), scale).astype(f)
    L = np.where(flat[None, :], f(0), L)
    return scale, (-mn).astype(f), np.ascontiguousarray(L.T)


def _kquant_ref(sb, nmax, rmin, nstep):
    """quantize_row_q4_K_ref / quantize_row_q5_K_ref up to the packing:
    (d16, dmin16, sc, m, q) of super-blocks sb [n, 256]."""
    f = np.float32
    n = sb.shape[0]
    x = sb.reshape(n * 8, 32)
    s2 = np.zeros(n * 8, f)
    for i in range(32):
        s2 = s2 + x[:, i] * x[:, i]
    av = np.sqrt(s2 / f(32)).astype(f)
    w = (av[:, None] + np.abs(x)).astype(f)
    scales, mins, L = _make_qkx2_quants(x, w, nmax, rmin, 0.1, nstep)
    scales, mins, L = scales.reshape(n, 8), mins.reshape(n, 8), L.reshape(n, 8, 32)
    max_scale = np.maximum(scales.max(axis=1), f(0))
    max_min = np.maximum(mins.max(axis=1), f(0))
    with np.errstate(divide="ignore"):
        inv_s = np.where(max_scale > 0, f(63) / max_scale, f(0)).astype(f)
        inv_m = np.where(max_min > 0, f(63) / max_min, f(0)).astype(f)
    sc = np.minimum(63, _nearest_int(inv_s[:, None] * scales).astype(np.int64) & 255).astype(np.uint8)
    m = np.minimum(63, _nearest_int(inv_m[:, None] * mins).astype(np.int64) & 255).astype(np.uint8)
    d16 = (max_scale / f(63)).astype(np.float16)
    dm16 = (max_min / f(63)).astype(np.float16)
    d = d16.astype(f)[:, None] * sc.astype(f)
    dm = dm16.astype(f)[:, None] * m.astype(f)
    with np.errstate(divide="ignore", invalid="ignore"):
        l = np.clip(_nearest_int((sb.reshape(n, 8, 32) + dm[:, :, None]) / d[:, :, None]), 0, nmax)
    q = np.where((d != 0)[:, :, None], l, L).astype(np.uint8)
    return d16, dm16, sc, m, q


def _pack_kscales(sc, m):
    """The 12 scale bytes get_scale_min_k4 reads: j < 4 in the low 6 bits of
    bytes j (scale) and j + 4 (min); j >= 4 split over byte j + 4 (low
    nibbles) and the top two bits of bytes j - 4 and j."""
    out = np.empty((sc.shape[0], 12), np.uint8)
    out[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
    return out


def quantize_q4_K(x):
    """quantize_row_q4_K_ref: Q4_K blocks {f16 d, dmin; u8 scales[12]; u8 qs[128]}: 64-value chunk
    c keeps sub-block 2c in the low nibbles of qs[32c:32c+32], 2c+1 in the
    high ones."""
    sb = x.reshape(-1, 256)
    n = sb.shape[0]
    d16, dm16, sc, m, q = _kquant_ref(sb, 15, -1.0, 20)
    q = q.reshape(n, 4, 2, 32)
    out = np.empty((n, 144), np.uint8)
    out[:, 0:2] = d16.astype("<f2").view(np.uint8).reshape(n, 2)
    out[:, 2:4] = dm16.astype("<f2").view(np.uint8).reshape(n, 2)
    out[:, 4:16] = _pack_kscales(sc, m)
    out[:, 16:144] = ((q[:, :, 0] & 15) | ((q[:, :, 1] & 15) << 4)).reshape(n, 128)
    return out.reshape(x.shape[0], -1)


def quantize_q5_K(x):
    """quantize_row_q5_K_ref: Q5_K blocks {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: the
    low nibbles as Q4_K, bit 2c / 2c+1 of qh[l] the fifth bit of value l of
    sub-block 2c / 2c+1."""
    sb = x.reshape(-1, 256)
    n = sb.shape[0]
    d16, dm16, sc, m, q = _kquant_ref(sb, 31, -0.5, 15)
    q = q.reshape(n, 4, 2, 32)
    qh = np.zeros((n, 32), np.uint8)
    for c in range(4):
        qh |= ((q[:, c, 0] >> 4) & 1) << (2 * c)
        qh |= ((q[:, c, 1] >> 4) & 1) << (2 * c + 1)
    out = np.empty((n, 176), np.uint8)
    out[:, 0:2] = d16.astype("<f2").view(np.uint8).reshape(n, 2)
    out[:, 2:4] = dm16.astype("<f2").view(np.uint8).reshape(n, 2)
    out[:, 4:16] = _pack_kscales(sc, m)
    out[:, 16:48] = qh
    out[:, 48:176] = ((q[:, :, 0] & 15) | ((q[:, :, 1] & 15) << 4)).reshape(n, 128)
    return out.reshape(x.shape[0], -1)


def quantize_mxfp4(x):
    """quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127 (0 for an
    all-zero block), d = 2^(e - 128) (ggml's halved E8M0), each value the
    first nearest of the doubled E2M1 values times d; byte j holds value j
    low, value j + 16 high."""
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(amax)) - 2 + 127, 0)
    e = np.clip(e, 0, 255).astype(np.uint8)
    ee = e.astype(np.uint32)
    bits = np.where(ee < 2, np.uint32(0x00200000) << ee, (ee - 1) << 23).astype(np.uint32)
    d = bits.view(np.float32)
    kv = gb.KVALUES_MXFP4.astype(np.float32)
    err = np.abs(kv[None, None, :] * d[:, None, None] - b[:, :, None])
    idx = err.argmin(axis=2).astype(np.uint8)        # first minimum, as the C loop
    out = np.empty((b.shape[0], 17), np.uint8)
    out[:, 0] = e
    out[:, 1:] = idx[:, :16] | (idx[:, 16:] << 4)
    return out.reshape(x.shape[0], -1)


def quantize_f16(x):
    return x.astype("<f2")


QUANTIZERS = {GGML_Q4_0: quantize_q4_0, GGML_Q8_0: quantize_q8_0, GGML_Q6_K: quantize_q6_K,
              GGML_Q4_K: quantize_q4_K, GGML_Q5_K: quantize_q5_K, GGML_MXFP4: quantize_mxfp4,
              GGML_F16: quantize_f16}


def encode(gtype, src_dtype, raw):
    """Source rows (raw storage of src_dtype) -> bytes of ggml type gtype."""
    if gtype == GGML_BF16 and src_dtype == "BF16":
        return np.ascontiguousarray(raw, dtype="<u2")
    x = st.to_f32(st.Tensor(src_dtype, raw.shape, raw))
    return encode_f32(gtype, x)


def encode_f32(gtype, x):
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

    def __init__(self, name, gtype, ne, segments, data=None):
        self.name, self.gtype, self.ne, self.segments = name, gtype, tuple(ne), segments
        self.data = data      # or the values themselves: float32 (ne reversed) or raw blocks

    def nbytes(self):
        return row_bytes(self.gtype, self.ne[0]) * int(np.prod(self.ne[1:]))


def read_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise GGUFError("%s: %s" % (path, e))
    if cfg.get("model_type") in FAMILIES:
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
            cfg_int(cfg, key, path)
        return cfg
    if cfg.get("model_type") != "olmoe":
        raise GGUFError("%s: model_type is %r; supported: olmoe, %s"
                        % (path, cfg.get("model_type"), ", ".join(sorted(FAMILIES))))
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
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    I, E = cfg["intermediate_size"], cfg["num_experts"]
    # pick_type: e.g. llama-quantize gives the output projection of a Q4_0
    # file Q6_K (Q8_0 when a row is not whole 256-value blocks) and bumps
    # attn_k and attn_v to Q8_0 in 8-expert models (Mixtral-style; the tiny
    # fixtures have 8 experts, OLMoE-1B-7B 64).
    hp = dict(n_expert=E, n_layer=cfg["num_hidden_layers"], n_attn_v=cfg["num_hidden_layers"])
    state = {}
    plans = []

    def ty(gguf_name, ne):
        if converter_f32(gguf_name, len(ne)):
            return GGML_F32
        return pick_type(ftype, gguf_name, ne, hp, state)

    def whole(gguf_name, hf_name, gtype, shape):
        src.check(hf_name, shape)
        rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        ne = tuple(reversed(shape))
        plans.append(Plan(gguf_name, ty(gguf_name, ne), ne, [(hf_name, 0, rows)]))

    whole("token_embd.weight", "model.embed_tokens.weight", None, (V, H))
    for L in range(cfg["num_hidden_layers"]):
        p, b = "model.layers.%d." % L, "blk.%d." % L
        whole(b + "attn_norm.weight", p + "input_layernorm.weight", None, (H,))
        for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                       ("o_proj", "attn_output")):
            whole(b + gg + ".weight", p + "self_attn.%s.weight" % hf, None, (H, H))
        whole(b + "attn_q_norm.weight", p + "self_attn.q_norm.weight", None, (H,))
        whole(b + "attn_k_norm.weight", p + "self_attn.k_norm.weight", None, (H,))
        whole(b + "ffn_norm.weight", p + "post_attention_layernorm.weight", None, (H,))
        whole(b + "ffn_gate_inp.weight", p + "mlp.gate.weight", None, (E, H))
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
            plans.append(Plan(b + gg + ".weight", ty(b + gg + ".weight", (cols, rows, E)),
                              (cols, rows, E), segs))
    whole("output_norm.weight", "model.norm.weight", None, (H,))
    if "lm_head.weight" in src.entries or not cfg.get("tie_word_embeddings"):
        whole("output.weight", "lm_head.weight", None, (V, H))
    else:
        src.check("model.embed_tokens.weight", (V, H))
        plans.append(Plan("output.weight", ty("output.weight", (H, V)), (H, V),
                          [("model.embed_tokens.weight", 0, V)]))
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


def hf_vocab_kv(model_dir, cfg):
    """tokenizer.ggml.* as convert_hf_to_gguf.py's _set_vocab_gpt2 writes
    them for a byte-level BPE tokenizer.json (Qwen2/Qwen3 style): model
    "gpt2", pre "qwen2" (the name get_vocab_base_pre gives Qwen's
    pre-tokenizer hash; other tokenizers are refused, as the hash cannot be
    computed without transformers), tokens of exactly vocab_size entries
    (ids the tokenizer lacks as "[PAD<id>]", type UNUSED), types NORMAL /
    CONTROL (added tokens marked special, or looking special: <|...|>) /
    USER_DEFINED (other added tokens), merges as "a b" strings (a space
    inside a part written as U+0120), then gguf.SpecialVocab's ids: from
    tokenizer_config.json's *_token strings matched against added_tokens,
    then config.json's *_token_id for types still unset; add_*_token
    booleans from tokenizer_config.json, the chat template."""
    tj = os.path.join(model_dir, "tokenizer.json")
    tc_path = os.path.join(model_dir, "tokenizer_config.json")
    try:
        with open(tj, encoding="utf-8") as f:
            tok = json.load(f)
        tc = {}
        if os.path.exists(tc_path):
            with open(tc_path, encoding="utf-8") as f:
                tc = json.load(f)
    except (OSError, ValueError) as e:
        raise GGUFError("%s: %s" % (tj, e))
    model = tok.get("model") or {}
    if model.get("type") != "BPE" or (tok.get("decoder") or {}).get("type") != "ByteLevel":
        raise GGUFError("%s: only byte-level BPE tokenizers (Qwen2/Qwen3) are written; this "
                        "one is %r" % (tj, model.get("type")))
    V = cfg_int(cfg, "vocab_size")
    rev = {}
    for text, i in model.get("vocab", {}).items():
        rev[i] = text
    added = {}
    for a in tok.get("added_tokens", []):
        rev[a["id"]] = a["content"]
        added[a["id"]] = a
    if rev and max(rev) >= V:
        raise GGUFError("%s: token id %d is outside vocab_size %d" % (tj, max(rev), V))
    tokens, types = [], []
    for i in range(V):
        if i not in rev:
            tokens.append("[PAD%d]" % i)
            types.append(TOKEN_UNUSED)
            continue
        t = rev[i]
        if i in added:
            looks = (t.startswith("<|") and t.endswith("|>")) or t in ("<pad>", "<mask>")
            if added[i].get("special") or looks:
                types.append(TOKEN_CONTROL)
            else:
                t = t.replace("\u2581", " ")
                types.append(TOKEN_USER_DEFINED)
        else:
            types.append(TOKEN_NORMAL)
        tokens.append(t)
    merges = model.get("merges") or []
    if merges and isinstance(merges[0], list):
        merges = [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part)
                           for part in pair) for pair in merges]
    kv = [("tokenizer.ggml.model", GGUF_STRING, "gpt2"),
          ("tokenizer.ggml.pre", GGUF_STRING, "qwen2"),
          ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, tokens)),
          ("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_I32, types))]
    if merges:
        kv.append(("tokenizer.ggml.merges", GGUF_ARRAY, (GGUF_STRING, merges)))
    ids, adds = {}, {}
    for typ in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        if isinstance(tc.get("add_%s_token" % typ), bool):
            adds[typ] = tc["add_%s_token" % typ]
        entry = tc.get("%s_token" % typ)
        if isinstance(entry, dict):
            entry = entry.get("content")
        if isinstance(entry, str):
            tid = next((a.get("id") for a in tok.get("added_tokens", [])
                        if a.get("content") == entry), None)
            if isinstance(tid, int) and typ not in ids:
                ids[typ] = tid
    for typ in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        tid = cfg.get("%s_token_id" % typ)
        if isinstance(tid, int) and not isinstance(tid, bool) and typ not in ids:
            ids[typ] = tid
    gname = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id",
             "sep": "seperator_token_id", "pad": "padding_token_id", "cls": "cls_token_id",
             "mask": "mask_token_id"}
    for typ, tid in ids.items():
        kv.append(("tokenizer.ggml." + gname[typ], GGUF_U32, tid))
    for typ, v in adds.items():
        kv.append(("tokenizer.ggml.add_%s_token" % typ, GGUF_BOOL, v))
    tmpl = tc.get("chat_template")
    if tmpl is None:
        for alt in ("chat_template.jinja",):
            path = os.path.join(model_dir, alt)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    tmpl = f.read()
    if isinstance(tmpl, str):
        kv.append(("tokenizer.chat_template", GGUF_STRING, tmpl))
    return kv


def synthetic_vocab_kv(cfg):
    tokens, scores, types, ids = synthetic_vocab(cfg)
    kv = [("tokenizer.ggml.model", GGUF_STRING, "llama"),
          ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, tokens)),
          ("tokenizer.ggml.scores", GGUF_ARRAY, (GGUF_F32, scores)),
          ("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_I32, types)),
          ("tokenizer.ggml.bos_token_id", GGUF_U32, ids["bos"]),
          ("tokenizer.ggml.eos_token_id", GGUF_U32, ids["eos"]),
          ("tokenizer.ggml.unknown_token_id", GGUF_U32, ids["unk"]),
          ("tokenizer.ggml.add_bos_token", GGUF_BOOL, ids["add_bos"]),
          ("tokenizer.ggml.add_eos_token", GGUF_BOOL, False)]
    if ids["pad"] is not None:
        kv.append(("tokenizer.ggml.padding_token_id", GGUF_U32, ids["pad"]))
    return kv


def vocab_kv(model_dir, cfg):
    if os.path.exists(os.path.join(model_dir, "tokenizer.json")):
        return hf_vocab_kv(model_dir, cfg)
    return synthetic_vocab_kv(cfg)


# ---------------------------------------------------------------- other families
#
# The other families are planned from whole tensors in memory (the tiny
# fixtures they serve are a few MB): each GGUF tensor is (name, numpy array
# in the checkpoint's orientation, i.e. ne reversed), mapped as
# convert_hf_to_gguf.py maps that family, then typed by pick_type.


def use_more_bits(i, n):
    """llama-quant.cpp's use_more_bits: the first and last eighth, and every
    third layer between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def converter_f32(name, ndim):
    """Tensors convert_hf_to_gguf.py always stores as F32 (and llama-quantize
    then leaves alone): 1-D ones, norms, routers, and names not ending in
    .weight (biases, exp_probs_b)."""
    return (ndim <= 1 or name.endswith("_norm.weight") or "ffn_gate_inp" in name
            or not name.endswith(".weight"))


def pick_type(ftype, name, ne, hp, state):
    """The ggml type of one matrix (2-D or 3-D, not converter_f32) under
    --type ftype.  f32 / f16 / bf16: the converter's --outtype, every
    matrix.  q8_0, q4_0: llama-quantize with that type (output.weight Q6_K
    for q4_0; attn_k / attn_v Q8_0 when the model has exactly 8 experts).
    q4_k, q5_k, q6_k: every matrix of that type (as llama-quantize --pure;
    no llama ftype keeps a single k-type).  q4_k_m: llama-quantize's
    Q4_K_M: Q4_K, output.weight Q6_K, attn_v and ffn_down* Q6_K on
    use_more_bits layers, attn_k / attn_v Q8_0 and attn_output Q5_K with
    exactly 8 experts.  mxfp4: MXFP4_MOE: 3-D expert tensors MXFP4, all
    other matrices Q8_0.  Then llama-quantize's width fallback
    (tensor_type_fallback) when ne0 is not whole blocks, except that Q4_K /
    Q5_K fall back to Q8_0 instead of ggml's Q5_0 / Q5_1 (types colibri does
    not take); Q8_0 / Q4_0 / MXFP4 rows not whole 32-blocks become F16."""
    big = FILE_TYPES[ftype][0]
    if ftype in ("f32", "f16", "bf16"):
        return big
    e8 = hp.get("n_expert") == 8
    t = big
    if ftype == "mxfp4":
        t = GGML_MXFP4 if len(ne) > 2 and ne[2] > 1 else GGML_Q8_0
    elif ftype in ("q4_k", "q5_k", "q6_k"):
        pass
    elif name == "output.weight":
        t = GGML_Q8_0 if ne[0] % 256 else (big if big == GGML_Q8_0 else GGML_Q6_K)
    elif ".attn_v." in name or ".attn_kv_b." in name:
        if ftype == "q4_k_m" and use_more_bits(state.get("wv", 0), hp["n_attn_v"]):
            t = GGML_Q6_K
        if e8:
            t = GGML_Q8_0
        state["wv"] = state.get("wv", 0) + 1
    elif ".attn_k." in name:
        if e8:
            t = GGML_Q8_0
    elif ".ffn_down" in name:
        if ftype == "q4_k_m" and use_more_bits(int(name.split(".")[1]), hp["n_layer"]):
            t = GGML_Q6_K
    elif ".attn_output." in name:
        if e8 and ftype == "q4_k_m":
            t = GGML_Q5_K
    blk = GGML_TYPES[t][1]
    if ne[0] % blk:
        t = {GGML_Q4_K: GGML_Q8_0, GGML_Q5_K: GGML_Q8_0, GGML_Q6_K: GGML_Q8_0}.get(t, GGML_F16)
        if ne[0] % GGML_TYPES[t][1]:
            t = GGML_F16
    return t


class Hf:
    """The checkpoint's tensors by name, widened to float32 on demand."""

    def __init__(self, model_dir):
        try:
            self.t = st.load_dir(model_dir)
        except (OSError, ValueError) as e:
            raise GGUFError(str(e))
        self.model_dir = model_dir

    def has(self, name):
        return name in self.t

    def raw(self, name):
        if name not in self.t:
            raise GGUFError("%s: the checkpoint has no tensor %r" % (self.model_dir, name))
        return self.t[name]

    def f32(self, name, shape=None):
        t = self.raw(name)
        if t.dtype not in ("BF16", "F16", "F32"):
            raise GGUFError("%s: tensor %r is %s; only BF16 / F16 / F32 (and MXFP4 expert "
                            "blocks) sources are supported" % (self.model_dir, name, t.dtype))
        x = np.ascontiguousarray(st.to_f32(t), dtype=np.float32)
        if shape is not None and tuple(x.shape) != tuple(shape):
            raise GGUFError("%s: tensor %r has shape %s, the config implies %s"
                            % (self.model_dir, name, list(x.shape), list(shape)))
        return x


def permute_rope(w, n_head, n_head_kv):
    """LlamaModel.permute: each head's rows from the rotate-half order of
    the checkpoint to GPT-J's interleaved pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return np.ascontiguousarray(
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def stack_experts(hf, fmt, n_expert, shape):
    return np.stack([hf.f32(fmt % e, shape) for e in range(n_expert)])


def moe_experts(hf, p, cfg, E, I, H, names=("gate_proj", "up_proj", "down_proj"), fused=True):
    """(gate, up, down) stacked [E, I, H], [E, I, H], [E, H, I], from
    per-expert tensors or transformers' fused gate_up_proj / down_proj."""
    if fused and hf.has(p + "experts.gate_up_proj"):
        gu = hf.f32(p + "experts.gate_up_proj", (E, 2 * I, H))
        return (gu[:, :I], gu[:, I:], hf.f32(p + "experts.down_proj", (E, H, I)))
    g, u, d = names
    return (stack_experts(hf, p + "experts.%d." + g + ".weight", E, (I, H)),
            stack_experts(hf, p + "experts.%d." + u + ".weight", E, (I, H)),
            stack_experts(hf, p + "experts.%d." + d + ".weight", E, (H, I)))


def cfg_int(cfg, key, path="config.json"):
    v = cfg.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise GGUFError("%s: missing or non-integer %s" % (path, key))
    return v


def common_kv(cfg, arch, ftype, name, head_dim_keys=True):
    """TextModel.set_gguf_parameters' keys, in its order."""
    a = arch + "."
    kv = [("general.architecture", GGUF_STRING, arch),
          ("general.name", GGUF_STRING, name),
          ("general.alignment", GGUF_U32, ALIGNMENT),
          (a + "block_count", GGUF_U32, cfg["num_hidden_layers"])]
    if cfg.get("max_position_embeddings") is not None:
        kv.append((a + "context_length", GGUF_U32, cfg["max_position_embeddings"]))
    kv.append((a + "embedding_length", GGUF_U32, cfg["hidden_size"]))
    if cfg.get("intermediate_size") is not None:
        kv.append((a + "feed_forward_length", GGUF_U32, cfg["intermediate_size"]))
    kv.append((a + "attention.head_count", GGUF_U32, cfg["num_attention_heads"]))
    if cfg.get("num_key_value_heads") is not None:
        kv.append((a + "attention.head_count_kv", GGUF_U32, cfg["num_key_value_heads"]))
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta"))
    if rp.get("rope_type", rp.get("type")) == "yarn" and rp.get("factor") is not None:
        kv += [(a + "rope.scaling.type", GGUF_STRING, "yarn"),
               (a + "rope.scaling.factor", GGUF_F32, rp["factor"]),
               (a + "rope.scaling.original_context_length", GGUF_U32,
                rp["original_max_position_embeddings"])]
        for k, gk in (("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow")):
            if rp.get(k) is not None:
                kv.append((a + "rope.scaling." + gk, GGUF_F32, rp[k]))
    if theta is not None:
        kv.append((a + "rope.freq_base", GGUF_F32, theta))
    if cfg.get("rms_norm_eps") is not None:
        kv.append((a + "attention.layer_norm_rms_epsilon", GGUF_F32, cfg["rms_norm_eps"]))
    for keys, gk in ((("num_local_experts", "num_experts", "n_routed_experts"), "expert_count"),
                     (("num_experts_per_tok", "num_experts_per_token"), "expert_used_count")):
        for k in keys:
            if cfg.get(k) is not None:
                kv.append((a + gk, GGUF_U32, cfg[k]))
                break
    if cfg.get("n_group") is not None:
        kv.append((a + "expert_group_count", GGUF_U32, cfg["n_group"]))
    if cfg.get("topk_group") is not None:
        kv.append((a + "expert_group_used_count", GGUF_U32, cfg["topk_group"]))
    sf = cfg.get("scoring_func")
    if sf is not None:
        kv.append((a + "expert_gating_func", GGUF_U32, {"softmax": 1, "sigmoid": 2}[sf]))
    if head_dim_keys and cfg.get("head_dim") is not None:
        kv += [(a + "attention.key_length", GGUF_U32, cfg["head_dim"]),
               (a + "attention.value_length", GGUF_U32, cfg["head_dim"])]
    kv.append(("general.file_type", GGUF_U32, FILE_TYPES[ftype][1]))
    return kv


def plan_qwen3_moe(cfg, hf):
    """Qwen3MoeModel (Qwen2MoeModel): no permutation (NeoX RoPE), experts
    stacked, dense mlp_only_layers as ffn_gate / ffn_up / ffn_down."""
    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    E, I = cfg["num_experts"], cfg["moe_intermediate_size"]
    out = [("token_embd.weight", hf.f32("model.embed_tokens.weight", (V, H)))]
    dense = set(cfg.get("mlp_only_layers") or [])
    step = cfg.get("decoder_sparse_step", 1) or 1
    for i in range(L):
        p, b = "model.layers.%d." % i, "blk.%d." % i
        out.append((b + "attn_norm.weight", hf.f32(p + "input_layernorm.weight")))
        for hn, gn in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                       ("o_proj", "attn_output")):
            out.append((b + gn + ".weight", hf.f32(p + "self_attn.%s.weight" % hn)))
        out.append((b + "attn_q_norm.weight", hf.f32(p + "self_attn.q_norm.weight")))
        out.append((b + "attn_k_norm.weight", hf.f32(p + "self_attn.k_norm.weight")))
        out.append((b + "ffn_norm.weight", hf.f32(p + "post_attention_layernorm.weight")))
        if i in dense or E == 0 or (i + 1) % step:
            for hn, gn in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
                out.append((b + gn + ".weight", hf.f32(p + "mlp.%s.weight" % hn)))
        else:
            out.append((b + "ffn_gate_inp.weight", hf.f32(p + "mlp.gate.weight", (E, H))))
            g, u, d = moe_experts(hf, p + "mlp.", cfg, E, I, H)
            out += [(b + "ffn_gate_exps.weight", g), (b + "ffn_up_exps.weight", u),
                    (b + "ffn_down_exps.weight", d)]
    out.append(("output_norm.weight", hf.f32("model.norm.weight", (H,))))
    if hf.has("lm_head.weight") or not cfg.get("tie_word_embeddings"):
        out.append(("output.weight", hf.f32("lm_head.weight", (V, H))))
    kv = None
    return out, kv


def kv_qwen3_moe(cfg, ftype, name):
    kv = common_kv(cfg, "qwen3moe", ftype, name)
    i = [k for k, _, _ in kv].index("general.file_type")
    kv.insert(i, ("qwen3moe.expert_feed_forward_length", GGUF_U32, cfg["moe_intermediate_size"]))
    return kv


def plan_mixtral(cfg, hf):
    """LlamaModel on MixtralForCausalLM: attn_q / attn_k rows permuted
    (permute_rope), block_sparse_moe.experts.N.w1 / w3 / w2 stacked as
    ffn_gate_exps / ffn_up_exps / ffn_down_exps, gate -> ffn_gate_inp."""
    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    E, I = cfg["num_local_experts"], cfg["intermediate_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    out = [("token_embd.weight", hf.f32("model.embed_tokens.weight", (V, H)))]
    for i in range(L):
        p, b = "model.layers.%d." % i, "blk.%d." % i
        out.append((b + "attn_norm.weight", hf.f32(p + "input_layernorm.weight")))
        out.append((b + "attn_q.weight", permute_rope(hf.f32(p + "self_attn.q_proj.weight"), nh, nh)))
        out.append((b + "attn_k.weight", permute_rope(hf.f32(p + "self_attn.k_proj.weight"), nh, nkv)))
        out.append((b + "attn_v.weight", hf.f32(p + "self_attn.v_proj.weight")))
        out.append((b + "attn_output.weight", hf.f32(p + "self_attn.o_proj.weight")))
        out.append((b + "ffn_norm.weight", hf.f32(p + "post_attention_layernorm.weight")))
        m = p + "block_sparse_moe."
        out.append((b + "ffn_gate_inp.weight", hf.f32(m + "gate.weight", (E, H))))
        g, u, d = moe_experts(hf, m, cfg, E, I, H, names=("w1", "w3", "w2"), fused=False)
        out += [(b + "ffn_gate_exps.weight", g), (b + "ffn_down_exps.weight", d),
                (b + "ffn_up_exps.weight", u)]
    out.append(("output_norm.weight", hf.f32("model.norm.weight", (H,))))
    if hf.has("lm_head.weight") or not cfg.get("tie_word_embeddings"):
        out.append(("output.weight", hf.f32("lm_head.weight", (V, H))))
    return out, None


def kv_mixtral(cfg, ftype, name):
    kv = common_kv(cfg, "llama", ftype, name)
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv += [("llama.vocab_size", GGUF_U32, cfg["vocab_size"]),
           ("llama.rope.dimension_count", GGUF_U32, hd)]
    return kv


def shared_experts(hf, out, p, b):
    for hn, gn in (("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"),
                   ("down_proj", "ffn_down_shexp")):
        out.append((b + gn + ".weight", hf.f32(p + "mlp.shared_experts.%s.weight" % hn)))


def dense_mlp(hf, out, p, b):
    for hn, gn in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
        out.append((b + gn + ".weight", hf.f32(p + "mlp.%s.weight" % hn)))


def plan_deepseek_v3(cfg, hf):
    """DeepseekV2Model: kv_b_proj split per head into attn_k_b ([H_n, rank,
    nope], transposed for the absorbed MLA product) and attn_v_b ([H_n, v,
    rank]); e_score_correction_bias as exp_probs_b.bias; the MTP layers
    (index >= num_hidden_layers) dropped, as skip_mtp does."""
    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    E, I = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
    nh = cfg["num_attention_heads"]
    nope, vd, rank = cfg["qk_nope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
    nkv = cfg.get("num_key_value_heads") or nh
    out = [("token_embd.weight", hf.f32("model.embed_tokens.weight", (V, H)))]
    for i in range(L):
        p, b = "model.layers.%d." % i, "blk.%d." % i
        a = p + "self_attn."
        out.append((b + "attn_norm.weight", hf.f32(p + "input_layernorm.weight")))
        if cfg.get("q_lora_rank"):
            out.append((b + "attn_q_a.weight", hf.f32(a + "q_a_proj.weight")))
            out.append((b + "attn_q_a_norm.weight", hf.f32(a + "q_a_layernorm.weight")))
            out.append((b + "attn_q_b.weight", hf.f32(a + "q_b_proj.weight")))
        else:
            out.append((b + "attn_q.weight", hf.f32(a + "q_proj.weight")))
        out.append((b + "attn_kv_a_mqa.weight", hf.f32(a + "kv_a_proj_with_mqa.weight")))
        out.append((b + "attn_kv_a_norm.weight", hf.f32(a + "kv_a_layernorm.weight")))
        kvb = hf.f32(a + "kv_b_proj.weight", (nkv * (nope + vd), rank)).reshape(nkv, nope + vd, rank)
        out.append((b + "attn_k_b.weight", np.ascontiguousarray(kvb[:, :nope].transpose(0, 2, 1))))
        out.append((b + "attn_v_b.weight", np.ascontiguousarray(kvb[:, nope:])))
        out.append((b + "attn_output.weight", hf.f32(a + "o_proj.weight")))
        out.append((b + "ffn_norm.weight", hf.f32(p + "post_attention_layernorm.weight")))
        if i < (cfg.get("first_k_dense_replace") or 0):
            dense_mlp(hf, out, p, b)
            continue
        out.append((b + "ffn_gate_inp.weight", hf.f32(p + "mlp.gate.weight", (E, H))))
        if hf.has(p + "mlp.gate.e_score_correction_bias"):
            out.append((b + "exp_probs_b.bias", hf.f32(p + "mlp.gate.e_score_correction_bias")))
        g, u, d = moe_experts(hf, p + "mlp.", cfg, E, I, H)
        out += [(b + "ffn_down_exps.weight", d), (b + "ffn_gate_exps.weight", g),
                (b + "ffn_up_exps.weight", u)]
        if cfg.get("n_shared_experts"):
            shared_experts(hf, out, p, b)
    out.append(("output_norm.weight", hf.f32("model.norm.weight", (H,))))
    if not cfg.get("tie_word_embeddings"):
        out.append(("output.weight", hf.f32("lm_head.weight", (V, H))))
    return out, None


def kv_deepseek_v3(cfg, ftype, name):
    a = "deepseek2."
    c = dict(cfg, num_key_value_heads=1)           # MLA written as MQA
    c.setdefault("rms_norm_eps", 1e-6)
    kv = common_kv(c, "deepseek2", ftype, name)
    ft = kv.pop()
    rank, rope = cfg.get("kv_lora_rank", 512), cfg["qk_rope_head_dim"]
    kv += [(a + "leading_dense_block_count", GGUF_U32, cfg.get("first_k_dense_replace") or 0),
           (a + "vocab_size", GGUF_U32, cfg["vocab_size"])]
    if cfg.get("q_lora_rank") is not None:
        kv.append((a + "attention.q_lora_rank", GGUF_U32, cfg["q_lora_rank"]))
    kv += [(a + "attention.kv_lora_rank", GGUF_U32, rank),
           (a + "attention.key_length", GGUF_U32, rank + rope),
           (a + "attention.value_length", GGUF_U32, rank),
           (a + "attention.key_length_mla", GGUF_U32, cfg["qk_nope_head_dim"] + rope),
           (a + "attention.value_length_mla", GGUF_U32, cfg["v_head_dim"]),
           (a + "expert_feed_forward_length", GGUF_U32, cfg["moe_intermediate_size"]),
           (a + "expert_shared_count", GGUF_U32, cfg.get("n_shared_experts", 0))]
    if cfg.get("routed_scaling_factor") is not None:
        kv.append((a + "expert_weights_scale", GGUF_F32, cfg["routed_scaling_factor"]))
    if cfg.get("norm_topk_prob"):
        kv.append((a + "expert_weights_norm", GGUF_BOOL, True))
    kv.append((a + "rope.dimension_count", GGUF_U32, rope))
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if rp.get("mscale_all_dim") is not None:
        kv.append((a + "rope.scaling.yarn_log_multiplier", GGUF_F32, 0.1 * rp["mscale_all_dim"]))
    return kv + [ft]


def plan_glm4_moe(cfg, hf):
    """Glm4MoeModel: q/k/v biases, q/k norms, first_k_dense_replace dense
    layers, shared experts, exp_probs_b.bias; the MTP (nextn) layers kept
    as extra blocks: their eh_proj / embed_tokens / enorm / hnorm /
    shared_head.head / shared_head.norm as blk.N.nextn.*, the rest under
    the usual names."""
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    L = cfg["num_hidden_layers"] + (cfg.get("num_nextn_predict_layers") or 0)
    E, I = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
    out = [("token_embd.weight", hf.f32("model.embed_tokens.weight", (V, H)))]
    for i in range(L):
        p, b = "model.layers.%d." % i, "blk.%d." % i
        a = p + "self_attn."
        out.append((b + "attn_norm.weight", hf.f32(p + "input_layernorm.weight")))
        for hn, gn in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v")):
            out.append((b + gn + ".weight", hf.f32(a + hn + ".weight")))
            if hf.has(a + hn + ".bias"):
                out.append((b + gn + ".bias", hf.f32(a + hn + ".bias")))
        out.append((b + "attn_output.weight", hf.f32(a + "o_proj.weight")))
        if hf.has(a + "q_norm.weight"):
            out.append((b + "attn_q_norm.weight", hf.f32(a + "q_norm.weight")))
            out.append((b + "attn_k_norm.weight", hf.f32(a + "k_norm.weight")))
        # GLM4_MOE's tensor list has ATTN_POST_NORM, not FFN_NORM
        out.append((b + "post_attention_norm.weight", hf.f32(p + "post_attention_layernorm.weight")))
        if i < (cfg.get("first_k_dense_replace") or 0):
            dense_mlp(hf, out, p, b)
        else:
            out.append((b + "ffn_gate_inp.weight", hf.f32(p + "mlp.gate.weight", (E, H))))
            if hf.has(p + "mlp.gate.e_score_correction_bias"):
                out.append((b + "exp_probs_b.bias", hf.f32(p + "mlp.gate.e_score_correction_bias")))
            g, u, d = moe_experts(hf, p + "mlp.", cfg, E, I, H)
            out += [(b + "ffn_down_exps.weight", d), (b + "ffn_gate_exps.weight", g),
                    (b + "ffn_up_exps.weight", u)]
            if cfg.get("n_shared_experts"):
                shared_experts(hf, out, p, b)
        if i >= cfg["num_hidden_layers"]:
            for hn, gn in (("eh_proj", "eh_proj"), ("embed_tokens", "embed_tokens"),
                           ("enorm", "enorm"), ("hnorm", "hnorm"),
                           ("shared_head.head", "shared_head_head"),
                           ("shared_head.norm", "shared_head_norm")):
                out.append((b + "nextn." + gn + ".weight", hf.f32(p + hn + ".weight")))
    out.append(("output_norm.weight", hf.f32("model.norm.weight", (H,))))
    if not cfg.get("tie_word_embeddings"):
        out.append(("output.weight", hf.f32("lm_head.weight", (V, H))))
    return out, None


def kv_glm4_moe(cfg, ftype, name):
    a = "glm4moe."
    L = cfg["num_hidden_layers"] + (cfg.get("num_nextn_predict_layers") or 0)
    kv = common_kv(dict(cfg, num_hidden_layers=L), "glm4moe", ftype, name)
    ft = kv.pop()
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    rp = cfg.get("rope_parameters") or {}
    prf = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.5))
    kv.append((a + "rope.dimension_count", GGUF_U32, int(hd * prf)))
    kv = [x for x in kv if x[0] != a + "expert_gating_func"]
    kv += [(a + "expert_count", GGUF_U32, cfg["n_routed_experts"])] if not any(
        k == a + "expert_count" for k, _, _ in kv) else []
    kv.append((a + "expert_feed_forward_length", GGUF_U32, cfg["moe_intermediate_size"]))
    if cfg.get("n_shared_experts") is not None:
        kv.append((a + "expert_shared_count", GGUF_U32, cfg["n_shared_experts"]))
    if cfg.get("first_k_dense_replace") is not None:
        kv.append((a + "leading_dense_block_count", GGUF_U32, cfg["first_k_dense_replace"]))
    kv.append((a + "expert_gating_func", GGUF_U32, 2))      # sigmoid
    if cfg.get("routed_scaling_factor") is not None:
        kv.append((a + "expert_weights_scale", GGUF_F32, cfg["routed_scaling_factor"]))
    if cfg.get("norm_topk_prob") is not None:
        kv.append((a + "expert_weights_norm", GGUF_BOOL, bool(cfg["norm_topk_prob"])))
    if cfg.get("num_nextn_predict_layers") is not None:
        kv.append((a + "nextn_predict_layers", GGUF_U32, cfg["num_nextn_predict_layers"]))
    return kv + [ft]


def mxfp4_blocks(hf, bname, sname, rows_sel):
    """transformers' MXFP4 experts (blocks [E, R, G, 16] with value 2k in
    the low nibble of byte k, scales [E, R, G] E8M0) -> ggml block_mxfp4
    bytes [E, R, G * 17] {e; qs[16]: value j low, j + 16 high}: the codes
    and exponents moved, not recomputed (the E2M1 code of HF's value table
    is ggml's index into its doubled table, and 2^(s-127) * v equals
    2^(s-128) * 2v).  rows_sel picks rows (gpt-oss's gate / up interleave)."""
    bl = hf.raw(bname).raw[:, rows_sel]
    sc = hf.raw(sname).raw[:, rows_sel]
    codes = np.empty(bl.shape[:-1] + (32,), np.uint8)
    codes[..., 0::2] = bl & 15
    codes[..., 1::2] = bl >> 4
    out = np.empty(bl.shape[:-1] + (17,), np.uint8)
    out[..., 0] = sc
    out[..., 1:] = codes[..., :16] | (codes[..., 16:] << 4)
    E, R, G = out.shape[:3]
    return out.reshape(E, R, G * 17), (G * 32, R, E)


def plan_gpt_oss(cfg, hf):
    """GptOssModel: post_attention_layernorm as post_attention_norm, sinks
    as attn_sinks.weight, router (and its bias) as ffn_gate_inp, the
    interleaved gate_up_proj (rows 2k gate, 2k+1 up) split into
    ffn_gate_exps / ffn_up_exps, biases split the same way; MXFP4 experts
    kept as their blocks in every --type, BF16 ones transposed from
    transformers' [E, in, out] layout."""
    H, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    E, I = cfg["num_local_experts"], cfg["intermediate_size"]
    out = [("token_embd.weight", hf.f32("model.embed_tokens.weight", (V, H)))]
    for i in range(L):
        p, b = "model.layers.%d." % i, "blk.%d." % i
        a = p + "self_attn."
        out.append((b + "attn_norm.weight", hf.f32(p + "input_layernorm.weight")))
        for hn, gn in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                       ("o_proj", "attn_output")):
            out.append((b + gn + ".weight", hf.f32(a + hn + ".weight")))
            out.append((b + gn + ".bias", hf.f32(a + hn + ".bias")))
        out.append((b + "attn_sinks.weight", hf.f32(a + "sinks")))
        out.append((b + "post_attention_norm.weight", hf.f32(p + "post_attention_layernorm.weight")))
        m = p + "mlp."
        out.append((b + "ffn_gate_inp.weight", hf.f32(m + "router.weight", (E, H))))
        out.append((b + "ffn_gate_inp.bias", hf.f32(m + "router.bias")))
        x = m + "experts."
        if hf.has(x + "gate_up_proj_blocks"):
            out.append((b + "ffn_down_exps.weight",
                        mxfp4_blocks(hf, x + "down_proj_blocks", x + "down_proj_scales", slice(None))))
            gub = hf.f32(x + "gate_up_proj_bias", (E, 2 * I))
            out.append((b + "ffn_gate_exps.weight",
                        mxfp4_blocks(hf, x + "gate_up_proj_blocks", x + "gate_up_proj_scales",
                                     slice(0, None, 2))))
            out.append((b + "ffn_up_exps.weight",
                        mxfp4_blocks(hf, x + "gate_up_proj_blocks", x + "gate_up_proj_scales",
                                     slice(1, None, 2))))
        else:
            gu = hf.f32(x + "gate_up_proj", (E, H, 2 * I)).transpose(0, 2, 1)
            gub = hf.f32(x + "gate_up_proj_bias", (E, 2 * I))
            out.append((b + "ffn_down_exps.weight",
                        np.ascontiguousarray(hf.f32(x + "down_proj", (E, I, H)).transpose(0, 2, 1))))
            out.append((b + "ffn_gate_exps.weight", np.ascontiguousarray(gu[:, 0::2])))
            out.append((b + "ffn_up_exps.weight", np.ascontiguousarray(gu[:, 1::2])))
        out.append((b + "ffn_down_exps.bias", hf.f32(x + "down_proj_bias", (E, H))))
        out.append((b + "ffn_gate_exps.bias", np.ascontiguousarray(gub[:, 0::2])))
        out.append((b + "ffn_up_exps.bias", np.ascontiguousarray(gub[:, 1::2])))
    out.append(("output_norm.weight", hf.f32("model.norm.weight", (H,))))
    if not cfg.get("tie_word_embeddings"):
        out.append(("output.weight", hf.f32("lm_head.weight", (V, H))))
    return out, None


def kv_gpt_oss(cfg, ftype, name):
    a = "gpt-oss."
    kv = common_kv(cfg, "gpt-oss", ftype, name)
    ft = kv.pop()
    kv += [(a + "attention.sliding_window", GGUF_U32, cfg["sliding_window"]),
           (a + "expert_feed_forward_length", GGUF_U32, cfg["intermediate_size"])]
    return kv + [ft]

def hp_moe(key_e):
    def f(cfg):
        n = cfg["num_hidden_layers"]
        return dict(n_expert=cfg.get(key_e), n_layer=n, n_attn_v=n)
    return f


FAMILIES.update({
    "qwen3_moe": (plan_qwen3_moe, kv_qwen3_moe, hp_moe("num_experts")),
    "mixtral": (plan_mixtral, kv_mixtral, hp_moe("num_local_experts")),
    "deepseek_v3": (plan_deepseek_v3, kv_deepseek_v3, hp_moe("n_routed_experts")),
    "glm4_moe": (plan_glm4_moe, kv_glm4_moe, hp_moe("n_routed_experts")),
    "gpt_oss": (plan_gpt_oss, kv_gpt_oss, hp_moe("num_local_experts")),
})


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
    return out + struct.pack({GGUF_U16: "<H", GGUF_U32: "<I", GGUF_I32: "<i", GGUF_F32: "<f",
                              GGUF_BOOL: "<?"}[vtype], value)


def metadata(cfg, ftype, name, model_dir):
    a = "olmoe."
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
    ]
    return kv + vocab_kv(model_dir, cfg)


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
    if t.data is not None:
        if t.data.dtype == np.uint8:          # blocks kept as they are (MXFP4)
            data = np.ascontiguousarray(t.data)
            w.write(data)
            written = data.nbytes
        else:
            x = np.ascontiguousarray(t.data, dtype=np.float32).reshape(-1, cols)
            for r in range(0, x.shape[0], step):
                data = encode_f32(t.gtype, x[r:r + step])
                w.write(data)
                written += data.nbytes
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




def family_plans(cfg, model_dir, ftype):
    """Plans of a non-OLMoE family, every tensor held in memory."""
    mt = cfg.get("model_type")
    plan, kvf, hpf = FAMILIES[mt]
    hf = Hf(model_dir)
    tensors, _ = plan(cfg, hf)
    hp = hpf(cfg)
    state, plans = {}, []
    for name, arr in tensors:
        if isinstance(arr, tuple):            # blocks kept as they are, and their ne
            arr, ne = arr
        else:
            ne = tuple(reversed(arr.shape))
        if arr.dtype == np.uint8:
            gtype = GGML_MXFP4                # as the converter, at every --type
        elif converter_f32(name, len(ne)):
            gtype = GGML_F32
        else:
            gtype = pick_type(ftype, name, ne, hp, state)
        plans.append(Plan(name, gtype, ne, [], data=arr))
    return plans, kvf(cfg, ftype, "")


def split_names(out, n):
    base = out[:-5] if out.endswith(".gguf") else out
    return ["%s-%05d-of-%05d.gguf" % (base, i + 1, n) for i in range(n)]


def write_gguf(model_dir, out, ftype, name, quiet, split_max=0):
    cfg = read_config(model_dir)
    if cfg.get("model_type") == "olmoe":
        src = Source(model_dir)
        plans = plan_tensors(cfg, src, ftype)
        kv = metadata(cfg, ftype, name, model_dir)
    else:
        src = None
        plans, kv = family_plans(cfg, model_dir, ftype)
        kv = [(k, t, name if k == "general.name" else v) for k, t, v in kv]
        kv.insert([k for k, _, _ in kv].index("general.file_type") + 1,
                  ("general.quantization_version", GGUF_U32, QUANTIZATION_VERSION))
        kv += vocab_kv(model_dir, cfg)
    for t in plans:
        if t.ne[0] % GGML_TYPES[t.gtype][1]:
            raise GGUFError("%s: rows of %d values are not whole %s blocks"
                            % (t.name, t.ne[0], t.gtype))
    if split_max and split_max < len(plans):
        groups = [plans[i:i + split_max] for i in range(0, len(plans), split_max)]
        outs = split_names(out, len(groups))
        # gguf-split: the first file carries every key and the split keys
        # after them, the others only split.no / split.count (u16) and
        # split.tensors.count (i32, the total).
        files = []
        for i, g in enumerate(groups):
            sk = [("split.no", GGUF_U16, i), ("split.count", GGUF_U16, len(groups)),
                  ("split.tensors.count", GGUF_I32, len(plans))]
            files.append((outs[i], (kv if i == 0 else []) + sk, g))
    else:
        files = [(out, kv, plans)]
    tmps = []
    try:
        t0 = time.monotonic()
        for path, fkv, fplans in files:
            head, data_bytes = header_bytes(fkv, fplans)
            total = len(head) + data_bytes
            out_dir = os.path.dirname(os.path.abspath(path))
            free = shutil.disk_usage(out_dir).free
            if total + (1 << 30) > free:
                raise GGUFError("%s: needs %.2f GB but %s has %.2f GB free (keeping 1 GiB)"
                                % (path, total / 1e9, out_dir, free / 1e9))
            if not quiet:
                sys.stderr.write("gguf_write: %s -> %s: %s, %d tensors, %.2f GB\n"
                                 % (model_dir, path, ftype, len(fplans), total / 1e9))
            tmp = path + ".tmp"
            tmps.append((tmp, path))
            with open(tmp, "wb") as f:
                w = st.SyncedWriter(f, None if quiet else st.Progress(total, "gguf_write"), "header")
                w.write(head)
                for t in fplans:
                    w.part = t.name
                    write_tensor(w, src, t)
                w.sync()
                if f.tell() != total:
                    raise AssertionError("gguf_write: wrote %d bytes, planned %d" % (f.tell(), total))
        for tmp, path in tmps:
            os.replace(tmp, path)
        if not quiet:
            sys.stderr.write("gguf_write: %s written in %.0f s\n" % (out, time.monotonic() - t0))
    except BaseException:
        for tmp, _ in tmps:
            if os.path.exists(tmp):
                os.remove(tmp)
        raise
    finally:
        if src is not None:
            src.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face checkpoint directory")
    ap.add_argument("--out", required=True, help="GGUF file to write")
    ap.add_argument("--type", required=True, choices=sorted(FILE_TYPES))
    ap.add_argument("--split-max-tensors", type=int, default=0,
                    help="write OUT-0000K-of-0000N.gguf files of at most N tensors each")
    ap.add_argument("--name", help="general.name (default: the model directory's name)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    name = args.name or os.path.basename(os.path.normpath(args.model))
    # SIGTERM unwinds like Ctrl-C, so the partial OUT.tmp is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        write_gguf(args.model, args.out, args.type, name, args.quiet, args.split_max_tensors)
    except (GGUFError, OSError) as e:
        sys.stderr.write("gguf_write: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
