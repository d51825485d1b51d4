#!/usr/bin/python3
"""Writes a small random Hugging Face MoE checkpoint in the real on-disk format.

    gen_model.py --arch {olmoe,qwen3_moe,mixtral} --out DIR [--seed N]
                 [--experts-layout {per-expert,fused}] [--weights-dtype {bf16,fp8}]
                 [--shards N] [--tokenizer DIR] [--vocab-size N]
                 [--size {tiny,small}] [--clip-qkv X]
    gen_model.py --shape {olmoe-1b-7b,qwen3-30b-a3b} --out DIR [--seed N]
                 [--weights-dtype {bf16,fp8}] [--shards N] [--layers N]
    gen_model.py --arch {qwen3_5_moe,qwen3_5_moe_text,qwen3_next} --out DIR [--seed N]
                 [--experts-layout {per-expert,fused}] [--shards N] [--vocab-size N]
    gen_model.py --shape qwen3.5-35b-a3b --out DIR [--seed N] [--shards N] [--layers N]
                 [--vision-tower]
                 (arch_qwen35.py; also DeepSeek-V3 / GLM families: arch_deepseek.py)
    gen_model.py --arch deepseek_v4 --out DIR [--seed N] [--weights-dtype {bf16,fp8}]
                 [--expert-dtype {fp4,fp8}] [--v4-config {current,legacy}] [--shards N]
                 (arch_deepseek_v4.py: the released DeepSeek-V4 layout)
    gen_model.py --arch minimax_m2 --out DIR [--seed N] [--weights-dtype {bf16,fp8}] [--shards N]
                 (arch_minimax_m2.py: the released MiniMax-M2 layout)
    gen_model.py --arch gpt_oss --out DIR [--seed N] [--experts-dtype {mxfp4,bf16}] [--shards N]
                 (arch_gpt_oss.py: the released gpt-oss layouts, MXFP4 or BF16 experts)
    gen_model.py --shape gpt-oss-120b --out DIR [--seed N] [--shards N] [--layers N]
                 (arch_gpt_oss.py: openai/gpt-oss-120b's shape, MXFP4 experts)
    gen_model.py --arch inkling --out DIR [--seed N] [--weights-dtype {bf16,f32}] [--shards N]
                 (arch_inkling.py: the released Inkling layout, model.llm.*, interleaved w13)

The directory gets config.json and generation_config.json with the field
names, model_type and architectures of the real models, and safetensors
files (one, or N shards plus model.safetensors.index.json) with the real
tensor names.  See tools/README.md for the layouts.

Every tensor is drawn from its own generator seeded by (seed, crc32 of its
per-expert name), so the same seed gives the same master weights whatever
the layout, weight dtype, shard count or vocabulary: a fused or fp8 model is
the per-expert bf16 model stored differently.  Magnitudes are chosen so the
residual stream stays O(1), routing is decisive and varies from token to
token, and the logits are spread (std ~1.5).

--shape writes a real model's dimensions (GBs) for benchmarks, streamed
tensor by tensor with bounded memory, with skewed routing (see the "real
shapes" section below).
"""

import argparse
import json
import os
import shutil
import struct
import sys
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_dir  # noqa: E402
import safetensors_np as st  # noqa: E402
import arch_deepseek  # noqa: E402  (deepseek_v3, glm4_moe)
import arch_qwen35  # noqa: E402  (qwen3_5_moe, qwen3_5_moe_text, qwen3_next)
import arch_deepseek_v4  # noqa: E402  (deepseek_v4)
import arch_minimax_m2  # noqa: E402  (minimax_m2)
import arch_gpt_oss  # noqa: E402  (gpt_oss)
import arch_inkling  # noqa: E402  (inkling)

ARCHS = (("olmoe", "qwen3_moe", "mixtral") + arch_deepseek.ARCHS + arch_qwen35.ARCHS + arch_deepseek_v4.ARCHS
         + arch_minimax_m2.ARCHS + arch_gpt_oss.ARCHS + arch_inkling.ARCHS)

# Shapes per size.  olmoe is MHA (kv heads == heads) and its head_dim is
# hidden / heads; qwen3_moe sets head_dim explicitly so heads * head_dim
# differs from hidden.  "experts_ffn" is the routed expert width
# (olmoe/mixtral: intermediate_size, qwen3_moe: moe_intermediate_size).
SIZES = {
    "tiny": dict(hidden=128, heads=4, kv_heads=2, qwen_head_dim=64, experts=8,
                 experts_ffn=64, dense_ffn=256, vocab=512,
                 layers={"olmoe": 2, "qwen3_moe": 3, "mixtral": 2},
                 top_k={"olmoe": 4, "qwen3_moe": 2, "mixtral": 2}),
    "small": dict(hidden=256, heads=8, kv_heads=4, qwen_head_dim=64, experts=16,
                  experts_ffn=128, dense_ffn=512, vocab=2048,
                  layers={"olmoe": 4, "qwen3_moe": 4, "mixtral": 4},
                  top_k={"olmoe": 4, "qwen3_moe": 4, "mixtral": 2}),
    # Every matrix width a multiple of 256, so each GGML block type (the
    # k-quants' 256-value super-blocks included) applies to every matrix:
    # the GGUF block-type fixtures (tools/make_fixtures.sh).
    "blocks": dict(hidden=256, heads=4, kv_heads=2, qwen_head_dim=64, experts=8,
                   experts_ffn=256, dense_ffn=512, vocab=512,
                   layers={"olmoe": 2, "qwen3_moe": 3, "mixtral": 2},
                   top_k={"olmoe": 4, "qwen3_moe": 2, "mixtral": 2}),
}

# Tokenizers whose real configs pad the vocabulary beyond the tokenizer's
# id range: base BPE vocabulary size -> vocab_size of the real config.
KNOWN_PADDED_VOCAB = {151643: 151936}   # Qwen2 / Qwen2.5 / Qwen3


def size_dims(arch, size):
    """The dimensions of one --size for one family, flattened."""
    s = SIZES[size]
    n_layers = s["layers"][arch]
    return dict(s, layers=n_layers, top_k=s["top_k"][arch],
                mlp_only_layers=[1] if n_layers > 2 else [])


def build_config(arch, s, vocab, ids, clip_qkv):
    """config.json for dimensions s (size_dims, or a SHAPES entry)."""
    n_layers = s["layers"]
    common = {
        "attention_dropout": 0.0,
        "bos_token_id": ids["bos"],
        "eos_token_id": ids["eos"],
        "hidden_act": "silu",
        "hidden_size": s["hidden"],
        "initializer_range": 0.02,
        "num_attention_heads": s["heads"],
        "num_experts_per_tok": s["top_k"],
        "num_hidden_layers": n_layers,
        "output_router_logits": False,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "vocab_size": vocab,
    }
    if arch == "olmoe":
        cfg = dict(common,
                   architectures=["OlmoeForCausalLM"], model_type="olmoe",
                   attention_bias=False, clip_qkv=clip_qkv,
                   intermediate_size=s["experts_ffn"],
                   max_position_embeddings=4096,
                   norm_topk_prob=False, num_experts=s["experts"],
                   num_key_value_heads=s["heads"],
                   pad_token_id=ids["pad"], rms_norm_eps=1e-05,
                   rope_theta=10000.0, router_aux_loss_coef=0.01)
    elif arch == "qwen3_moe":
        cfg = dict(common,
                   architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                   attention_bias=False, decoder_sparse_step=1,
                   head_dim=s["qwen_head_dim"],
                   intermediate_size=s["dense_ffn"],
                   max_position_embeddings=40960, max_window_layers=n_layers,
                   mlp_only_layers=s["mlp_only_layers"],
                   moe_intermediate_size=s["experts_ffn"],
                   norm_topk_prob=True, num_experts=s["experts"],
                   num_key_value_heads=s["kv_heads"], rms_norm_eps=1e-06,
                   rope_theta=1000000.0, router_aux_loss_coef=0.001,
                   sliding_window=None, use_sliding_window=False)
    else:
        cfg = dict(common,
                   architectures=["MixtralForCausalLM"], model_type="mixtral",
                   intermediate_size=s["experts_ffn"],
                   max_position_embeddings=32768,
                   num_key_value_heads=s["kv_heads"],
                   num_local_experts=s["experts"], rms_norm_eps=1e-05,
                   rope_theta=1000000.0, router_aux_loss_coef=0.02,
                   router_jitter_noise=0.0, sliding_window=None)
    return cfg


def head_dim_of(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def is_moe_layer(cfg, layer):
    if cfg["model_type"] != "qwen3_moe":
        return True
    return (layer not in cfg.get("mlp_only_layers", [])
            and cfg["num_experts"] > 0
            and (layer + 1) % cfg.get("decoder_sparse_step", 1) == 0)


def tensor_specs(cfg):
    """Yields (name, shape, kind, std) in checkpoint order, per-expert names.

    kind is one of: embed, norm, proj (2-D projection, fp8-able), router,
    lm_head; expert projections also carry ("expert", layer, e, part).
    """
    arch = cfg["model_type"]
    H = cfg["hidden_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim_of(cfg)
    E = cfg.get("num_experts") or cfg.get("num_local_experts")
    ffn = cfg["moe_intermediate_size"] if arch == "qwen3_moe" else cfg["intermediate_size"]
    yield "model.embed_tokens.weight", (cfg["vocab_size"], H), "embed", 1.0, None
    for L in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % L
        yield p + "input_layernorm.weight", (H,), "norm", 0.1, None
        yield p + "self_attn.q_proj.weight", (nh * hd, H), "proj", H ** -0.5, None
        yield p + "self_attn.k_proj.weight", (nkv * hd, H), "proj", H ** -0.5, None
        yield p + "self_attn.v_proj.weight", (nkv * hd, H), "proj", H ** -0.5, None
        yield p + "self_attn.o_proj.weight", (H, nh * hd), "proj", 0.7 * (nh * hd) ** -0.5, None
        if arch == "olmoe":
            yield p + "self_attn.q_norm.weight", (nh * hd,), "norm", 0.1, None
            yield p + "self_attn.k_norm.weight", (nkv * hd,), "norm", 0.1, None
        elif arch == "qwen3_moe":
            yield p + "self_attn.q_norm.weight", (hd,), "norm", 0.1, None
            yield p + "self_attn.k_norm.weight", (hd,), "norm", 0.1, None
        yield p + "post_attention_layernorm.weight", (H,), "norm", 0.1, None
        if not is_moe_layer(cfg, L):
            F = cfg["intermediate_size"]
            yield p + "mlp.gate_proj.weight", (F, H), "proj", H ** -0.5, None
            yield p + "mlp.up_proj.weight", (F, H), "proj", H ** -0.5, None
            yield p + "mlp.down_proj.weight", (H, F), "proj", 0.7 * F ** -0.5, None
            continue
        if arch == "mixtral":
            m, parts = p + "block_sparse_moe.", (("w1", "gate"), ("w3", "up"), ("w2", "down"))
        else:
            m, parts = p + "mlp.", (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down"))
        # Router logits have std ~2.5 (top-2) or ~1.2 (OLMoE's top-4 of 8):
        # decisive, different per token, and for OLMoE leaving a visible
        # share of probability outside the top-k, so that renormalising by
        # mistake changes the output.
        r_std = 1.2 if arch == "olmoe" else 2.5
        yield m + "gate.weight", (E, H), "router", r_std * H ** -0.5, None
        for e in range(E):
            for hf, part in parts:
                shape = (H, ffn) if part == "down" else (ffn, H)
                std = 0.7 * ffn ** -0.5 if part == "down" else H ** -0.5
                yield "%sexperts.%d.%s.weight" % (m, e, hf), shape, "proj", std, (L, e, part)
    yield "model.norm.weight", (H,), "norm", 0.1, None
    yield "lm_head.weight", (cfg["vocab_size"], H), "lm_head", 1.5 * H ** -0.5, None


def master_weight(seed, name, shape, kind, std):
    """Deterministic float32 weight for one tensor (independent of the others)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if kind == "norm":
        return (1.0 + std * rng.standard_normal(shape)).astype(np.float32)
    w = (std * rng.standard_normal(shape)).astype(np.float32)
    if kind == "proj":
        # Vary the magnitude per 128x128 block (x0.6 .. x1.6) so that an fp8
        # scale applied to the wrong block shows up in the logits.
        nr, nc = -(-shape[0] // 128), -(-shape[1] // 128)
        f = np.exp(rng.uniform(-0.5, 0.5, (nr, nc))).astype(np.float32)
        f = np.repeat(np.repeat(f, 128, 0), 128, 1)[:shape[0], :shape[1]]
        w *= f
    return w


def encode(name, w, kind, weights_dtype):
    """Returns {name: (dtype, storage)} for one master weight."""
    if weights_dtype == "fp8" and kind == "proj":
        codes, scale = st.fp8_block_quantize(w)
        return {name: ("F8_E4M3", codes), name + "_scale_inv": ("F32", scale)}
    return {name: ("BF16", st.f32_to_bf16(w))}


def build_tensors(cfg, seed, layout, weights_dtype):
    """Returns a list of groups; each group is an ordered {name: (dtype, storage)}
    that must stay within one shard (a weight and its scale)."""
    arch = cfg["model_type"]
    groups = []
    experts = {}   # (layer, part) -> list of master weights, for the fused layout
    n_experts = cfg.get("num_experts") or cfg.get("num_local_experts")
    for name, shape, kind, std, ex in tensor_specs(cfg):
        w = master_weight(seed, name, shape, kind, std)
        if ex is not None and layout == "fused":
            experts.setdefault((ex[0], ex[2]), []).append(w)
            if ex[2] == "down" and ex[1] == n_experts - 1:
                groups.extend(fused_groups(ex[0], experts, weights_dtype))
            continue
        if arch == "mixtral" and layout == "fused" and ".block_sparse_moe.gate." in name:
            # transformers v5 renames Mixtral's block_sparse_moe to mlp.
            name = name.replace(".block_sparse_moe.", ".mlp.")
        groups.append(encode(name, w, kind, weights_dtype))
    return groups


def fused_groups(layer, experts, weights_dtype):
    """The transformers v5 fused expert tensors of one layer:
    gate_up_proj [E, 2*I, H] (per expert: the I gate rows, then the I up rows)
    and down_proj [E, H, I]; no ".weight" suffix, as in the v5 modules."""
    p = "model.layers.%d.mlp.experts." % layer
    gate_up = np.stack([np.concatenate([g, u], axis=0)
                        for g, u in zip(experts.pop((layer, "gate")), experts.pop((layer, "up")))])
    down = np.stack(experts.pop((layer, "down")))
    return [encode(p + "gate_up_proj", gate_up, "proj", weights_dtype),
            encode(p + "down_proj", down, "proj", weights_dtype)]


def group_bytes(group):
    return sum(arr.nbytes for _, arr in group.values())


def shard_bounds(sizes, shards):
    """Splits groups of the given byte sizes into `shards` contiguous runs
    [begin, end) by cumulative bytes, every shard non-empty."""
    total = sum(sizes)
    bounds, acc, start = [], 0, 0
    for i, size in enumerate(sizes):
        acc += size
        left_groups = len(sizes) - (i + 1)
        left_shards = shards - len(bounds) - 1
        if left_shards > 0 and (acc >= total * (len(bounds) + 1) / shards
                                or left_groups == left_shards):
            bounds.append((start, i + 1))
            start = i + 1
    bounds.append((start, len(sizes)))
    return bounds


def write_index(out, weight_map, total_size):
    index = {"metadata": {"total_size": total_size},
             "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


def write_checkpoint(out, groups, shards):
    if shards <= 1:
        tensors = {}
        for g in groups:
            tensors.update(g)
        st.write_file(os.path.join(out, "model.safetensors"), tensors, {"format": "pt"})
        return
    if shards > len(groups):
        raise SystemExit("gen_model: --shards %d exceeds the %d tensor groups" % (shards, len(groups)))
    bounds = shard_bounds([group_bytes(g) for g in groups], shards)
    weight_map, total_size = {}, 0
    for k, (a, b) in enumerate(bounds):
        fname = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
        tensors = {}
        for g in groups[a:b]:
            tensors.update(g)
        total_size += st.write_file(os.path.join(out, fname), tensors, {"format": "pt"})
        for name in tensors:
            weight_map[name] = fname
    write_index(out, weight_map, total_size)


# ---------------------------------------------------------------- real shapes
#
# --shape writes a checkpoint with the dimensions and config.json values of a
# published model, for benchmarks: several GB to tens of GB.  It streams:
# shapes and byte sizes are known up front, so each shard's header is written
# first and then each tensor is generated and written in row chunks; memory
# stays at a few chunks whatever the model size.  Normal samples come from a
# table of 65536 equiprobable N(0, 1) quantiles indexed by random 16-bit
# integers (about 3 ns a value, so generation runs at disk speed), already
# encoded as bf16 or e4m3 codes.  The weights differ from those of --size:
# no 128x128 block factors, and the routing below.

SHAPES = {
    # allenai/OLMoE-1B-7B-0924: 6.9 B parameters, 1.3 B active.
    "olmoe-1b-7b": dict(arch="olmoe", hidden=2048, heads=16, kv_heads=16, qwen_head_dim=None,
                        experts=64, experts_ffn=1024, dense_ffn=None, vocab=50304,
                        layers=16, top_k=8, mlp_only_layers=[], shards=3,
                        ids=dict(bos=None, eos=50279, pad=1), gen_eos=50279),
    # Qwen/Qwen3-30B-A3B: 30.5 B parameters, 3.3 B active.
    "qwen3-30b-a3b": dict(arch="qwen3_moe", hidden=2048, heads=32, kv_heads=4, qwen_head_dim=128,
                          experts=128, experts_ffn=768, dense_ffn=6144, vocab=151936,
                          layers=48, top_k=8, mlp_only_layers=[], shards=16,
                          ids=dict(bos=151643, eos=151645, pad=151643),
                          gen_eos=[151645, 151643]),
}

# Routing as in trained models: a few experts per layer are hot (Zipf-like
# usage), yet each token picks its own set.  Every embedding row is
# SHARE * g + sqrt(1 - SHARE^2) * noise for one fixed random vector g (real
# residual streams have such a common direction).  After a layer's
# post-attention norm (weight w) that component points along u = unit(w * g),
# and x . u is close to c = SHARE * |w * g| / rms(residual) for every token.
# Router row e is
#     ROUTER_SCALE * (m_e * r_e + b_e * u / c)
# with r_e a random unit vector orthogonal to u, m_e = exp(NORM_SIGMA * N(0,1))
# (heavy-tailed row norms) and b_e = -ZIPF_ALPHA * log(rank_e), centred, for a
# random ranking of the experts.  So logit_e ~ ROUTER_SCALE * (m_e * z_e + b_e)
# with z_e = x . r_e ~ N(0, 1) different for every token: expert rank 1 is in
# the top 8 of 64 for about 60% of the tokens, the median expert for about
# 10%, the coldest for a few percent.  lm_head rows are orthogonal to the
# shared component, so it does not bias the next token.
SHARE = 0.25
ROUTER_SCALE = 2.0
NORM_SIGMA = 0.3
ZIPF_ALPHA = 0.5
# rms of the residual stream entering layer L's MoE, relative to the
# embeddings, is about sqrt(1 + RESIDUAL_GROWTH * (L + 0.5)); measured with
# bench/route_stats.py on the generated models.
RESIDUAL_GROWTH = 0.28

# q_norm / k_norm weights: attention scores of std QK_NORM_GAIN^2, so that
# each query attends to a few tokens of its own.  Nearly uniform attention
# would give every token the same output, a common direction that grows
# layer after layer and crowds out the token-specific router input.
QK_NORM_GAIN = 2.0

CHUNK_ELEMS = 1 << 23         # values generated at once


def shape_dims(name, layers):
    d = dict(SHAPES[name])
    if layers:
        d["layers"] = layers
    return d


def normal_quantiles(n=65536):
    """n equiprobable quantiles of N(0, 1), float64, ascending, antisymmetric."""
    x = np.linspace(-9.0, 9.0, (1 << 21) + 1)
    pdf = np.exp(-0.5 * x * x)
    cdf = np.concatenate([[0.0], np.cumsum((pdf[1:] + pdf[:-1]) * 0.5)])
    cdf /= cdf[-1]
    q = np.interp((np.arange(n) + 0.5) / n, cdf, x)
    return (q - q[::-1]) * 0.5


def seeded_rng(seed, name):
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def rng_u16(rng, n):
    return np.frombuffer(rng.bytes(2 * n), dtype="<u2")


_E4M3_OF_BF16 = []


def fp8_quantize_fast(w):
    """safetensors_np.fp8_block_quantize for a 2-D w whose sides are
    multiples of 128, much faster: a 65536-entry table indexed by the top 16
    bits of each float32, rounded to odd (the last bit set when any dropped
    bit is), which then rounds to e4m3 exactly as the float32 would."""
    if not _E4M3_OF_BF16:
        with np.errstate(invalid="ignore"):
            _E4M3_OF_BF16.append(st.f32_to_e4m3(st.bf16_to_f32(np.arange(65536, dtype=np.uint16))))
    rows, cols = w.shape
    assert rows % 128 == 0 and cols % 128 == 0, w.shape
    blocks = np.abs(w).reshape(rows // 128, 128, cols // 128, 128).max(axis=(1, 3))
    scale = np.where(blocks > 0, blocks / np.float32(st.E4M3_MAX), np.float32(1.0)).astype(np.float32)
    full = np.repeat(np.repeat(scale, 128, axis=0), 128, axis=1)
    bits = np.ascontiguousarray(w / full, dtype=np.float32).view(np.uint32)
    odd = ((bits >> 16) | ((bits & 0xFFFF) != 0)).astype(np.uint16)
    return _E4M3_OF_BF16[0][odd], scale


def bf16_round(w):
    return st.bf16_to_f32(st.f32_to_bf16(w))


class ShapeWeights:
    """Makes the tensors of a --shape checkpoint.  plan() lists them as
    (name, dtype, shape, write) with write(f) streaming the raw storage."""

    def __init__(self, cfg, seed, weights_dtype):
        self.cfg, self.seed, self.fp8 = cfg, seed, weights_dtype == "fp8"
        self.H = cfg["hidden_size"]
        self.q = normal_quantiles()
        self.q32 = self.q.astype(np.float32)
        self.qmax = float(self.q[-1])
        self.tables = {}
        self.g = seeded_rng(seed, "shared-direction").standard_normal(self.H)

    def bf16_table(self, std):
        if std not in self.tables:
            self.tables[std] = st.f32_to_bf16((self.q * std).astype(np.float32))
        return self.tables[std]

    def norm(self, name):
        """A norm weight as the engine reads it (bf16-rounded)."""
        return bf16_round(master_weight(self.seed, name, (self.H,), "norm", 0.1)).astype(np.float64)

    def shared_dir(self, norm_name):
        v = self.norm(norm_name) * self.g
        return v / np.linalg.norm(v)

    def plan(self):
        """Groups of tensors that stay within one shard, in checkpoint order."""
        groups = []
        for name, shape, kind, std, ex in tensor_specs(self.cfg):
            if name.rsplit(".", 2)[-2] in ("q_proj", "k_proj", "v_proj") and self.fp8:
                sshape = (-(-shape[0] // 128), -(-shape[1] // 128))
                groups.append([(name, "F8_E4M3", shape, self.qkv_writer(name, shape, std, 0)),
                               (name + "_scale_inv", "F32", sshape,
                                self.qkv_writer(name, shape, std, 1))])
            elif name.rsplit(".", 2)[-2] in ("q_proj", "k_proj", "v_proj"):
                groups.append([(name, "BF16", shape, self.qkv_writer(name, shape, std, None))])
            elif kind == "proj" and self.fp8:
                rows, cols = shape
                sshape = (-(-rows // 128), -(-cols // 128))
                groups.append([(name, "F8_E4M3", shape, self.proj_fp8_writer(name, shape)),
                               (name + "_scale_inv", "F32", sshape,
                                self.const_writer(sshape, std * self.qmax / st.E4M3_MAX))])
            elif kind == "proj":
                groups.append([(name, "BF16", shape, self.proj_bf16_writer(name, shape, std))])
            elif kind == "norm":
                w = master_weight(self.seed, name, shape, "norm", std)
                if name.endswith(("q_norm.weight", "k_norm.weight")):
                    w *= QK_NORM_GAIN
                groups.append([(name, "BF16", shape, self.array_writer(st.f32_to_bf16(w)))])
            elif kind == "router":
                groups.append([(name, "BF16", shape, self.router_writer(name, shape))])
            elif kind == "embed":
                groups.append([(name, "BF16", shape, self.embed_writer(name, shape))])
            else:
                groups.append([(name, "BF16", shape, self.lm_head_writer(name, shape, std))])
        return groups

    def qkv_writer(self, name, shape, std, part):
        """q/k/v_proj with rows orthogonal to the shared component.  With it
        in the values, or in the scores (every query then attends to the same
        few tokens), each token would get the same attention output: a common
        direction that grows layer after layer and drowns the token-specific
        part of the router input.  Built whole (at most 4096 x 2048), once
        for the bf16 tensor, or once each for the fp8 codes (part 0) and
        their scales (part 1), which lie apart in the shard."""
        def write(f):
            layer = int(name.split(".")[2])
            u = self.shared_dir("model.layers.%d.input_layernorm.weight" % layer).astype(np.float32)
            rng = seeded_rng(self.seed, name)
            w = self.q32[rng_u16(rng, shape[0] * shape[1])].reshape(shape) * np.float32(std)
            w -= np.outer(w @ u, u)
            f.write((st.f32_to_bf16(w) if part is None else fp8_quantize_fast(w)[part]).data)
        return write

    @staticmethod
    def array_writer(arr):
        return lambda f: f.write(np.ascontiguousarray(arr).data)

    @staticmethod
    def const_writer(shape, value):
        return ShapeWeights.array_writer(np.full(shape, value, dtype="<f4"))

    def chunks(self, name, shape):
        """(rng, row count) per chunk of a 2-D tensor."""
        rng = seeded_rng(self.seed, name)
        rows, cols = shape
        step = max(1, CHUNK_ELEMS // cols)
        for r in range(0, rows, step):
            yield rng, min(step, rows - r)

    def proj_bf16_writer(self, name, shape, std):
        def write(f):
            table = self.bf16_table(std)
            for rng, n in self.chunks(name, shape):
                f.write(table[rng_u16(rng, n * shape[1])].data)
        return write

    def proj_fp8_writer(self, name, shape):
        # Every 128x128 block spans the table's whole range, so its scale is
        # std * qmax / 448, the amax-based scale of a real fp8 checkpoint.
        def write(f):
            if "e4m3" not in self.tables:
                self.tables["e4m3"] = st.f32_to_e4m3(self.q * (st.E4M3_MAX / self.qmax))
            table = self.tables["e4m3"]
            for rng, n in self.chunks(name, shape):
                f.write(table[rng_u16(rng, n * shape[1])].data)
        return write

    def embed_writer(self, name, shape):
        def write(f):
            shared = (SHARE * self.g).astype(np.float32)
            keep = np.float32(np.sqrt(1.0 - SHARE * SHARE))
            for rng, n in self.chunks(name, shape):
                noise = self.q32[rng_u16(rng, n * shape[1])].reshape(n, shape[1])
                f.write(st.f32_to_bf16(noise * keep + shared).data)
        return write

    def lm_head_writer(self, name, shape, std):
        def write(f):
            u = self.shared_dir("model.norm.weight").astype(np.float32)
            for rng, n in self.chunks(name, shape):
                w = self.q32[rng_u16(rng, n * shape[1])].reshape(n, shape[1]) * np.float32(std)
                w -= np.outer(w @ u, u)
                f.write(st.f32_to_bf16(w).data)
        return write

    def router_writer(self, name, shape):
        def write(f):
            layer = int(name.split(".")[2])
            u = self.shared_dir("model.layers.%d.post_attention_layernorm.weight" % layer)
            rho = np.sqrt(1.0 + RESIDUAL_GROWTH * (layer + 0.5))
            c = SHARE * np.linalg.norm(self.norm(
                "model.layers.%d.post_attention_layernorm.weight" % layer) * self.g) / rho
            rng = seeded_rng(self.seed, name)
            n_experts = shape[0]
            r = rng.standard_normal(shape)
            r -= np.outer(r @ u, u)
            r /= np.linalg.norm(r, axis=1, keepdims=True)
            m = np.exp(NORM_SIGMA * rng.standard_normal(n_experts))
            b = -ZIPF_ALPHA * np.log(rng.permutation(n_experts) + 1.0)
            b -= b.mean()
            # x . r_e has the rms of the token-specific part, sqrt(1 - SHARE^2).
            keep = np.sqrt(1.0 - SHARE * SHARE)
            w = ROUTER_SCALE * ((m / keep)[:, None] * r + (b / c)[:, None] * u[None, :])
            f.write(st.f32_to_bf16(w.astype(np.float32)).data)
        return write


def write_shape_checkpoint(out, groups, shards, label):
    """Writes groups (ShapeWeights.plan) as `shards` safetensors files plus
    the index, laid out as safetensors_np.write_file lays them out."""
    itemsize = {k: v[1] for k, v in st.DTYPES.items()}

    def nbytes(t):
        return itemsize[t[1]] * int(np.prod(t[2]))
    sizes = [sum(nbytes(t) for t in g) for g in groups]
    if shards > len(groups):
        raise SystemExit("gen_model: --shards %d exceeds the %d tensor groups" % (shards, len(groups)))
    bounds = shard_bounds(sizes, shards)
    progress = st.Progress(sum(sizes), "gen_model", label)
    weight_map, total_size = {}, 0
    for k, (a, b) in enumerate(bounds):
        fname = ("model.safetensors" if shards == 1
                 else "model-%05d-of-%05d.safetensors" % (k + 1, shards))
        tensors = [t for g in groups[a:b] for t in g]
        tensors.sort(key=lambda t: (-itemsize[t[1]], t[0]))
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for name, dtype, shape, _ in tensors:
            header[name] = {"dtype": dtype, "shape": list(shape),
                            "data_offsets": [offset, offset + nbytes((name, dtype, shape))]}
            offset += nbytes((name, dtype, shape))
            weight_map[name] = fname
        text = json.dumps(header, separators=(",", ":")).encode("utf-8")
        text += b" " * (-len(text) % 8)
        path = os.path.join(out, fname)
        with open(path + ".tmp", "wb") as f:
            w = st.SyncedWriter(f, progress, "shard %d/%d" % (k + 1, len(bounds)))
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for name, dtype, shape, write in tensors:
                before = f.tell()
                write(w)
                if f.tell() - before != nbytes((name, dtype, shape)):
                    raise AssertionError("gen_model: %s: wrote %d bytes, planned %d"
                                         % (name, f.tell() - before, nbytes((name, dtype, shape))))
            w.sync()
        os.replace(path + ".tmp", path)
        total_size += offset
    if shards > 1:
        write_index(out, weight_map, total_size)
    return total_size


def tokenizer_info(tok_dir):
    """Reads tokenizer.json / tokenizer_config.json: (id range, base vocab size,
    id of a token content or None)."""
    with open(os.path.join(tok_dir, "tokenizer.json")) as f:
        tok = json.load(f)
    vocab = tok.get("model", {}).get("vocab", {})
    if isinstance(vocab, list):          # unigram: [[piece, score], ...]
        ids = {p[0]: i for i, p in enumerate(vocab)}
    else:
        ids = dict(vocab)
    for a in tok.get("added_tokens", []):
        ids[a["content"]] = a["id"]
    n_ids = max(ids.values()) + 1
    return n_ids, len(vocab), ids


def special_ids(arch, tok_dir, vocab):
    """bos/eos/pad ids and generation_config eos (a list for qwen3_moe, as in
    the real Qwen3 generation_config.json)."""
    if tok_dir is None:
        if arch == "olmoe":
            ids = dict(bos=0, eos=vocab - 2, pad=1)
        elif arch == "qwen3_moe":
            ids = dict(bos=vocab - 12, eos=vocab - 10, pad=vocab - 12)
        else:
            ids = dict(bos=1, eos=2, pad=None)
    else:
        _, _, tok_ids = tokenizer_info(tok_dir)
        with open(os.path.join(tok_dir, "tokenizer_config.json")) as f:
            tcfg = json.load(f)

        def lookup(key):
            v = tcfg.get(key)
            if isinstance(v, dict):
                v = v.get("content")
            return tok_ids.get(v) if v is not None else None
        eos = lookup("eos_token")
        pad = lookup("pad_token")
        bos = lookup("bos_token")
        if bos is None:
            bos = pad if pad is not None else eos
        ids = dict(bos=bos, eos=eos, pad=pad)
    gen_eos = [ids["eos"], ids["bos"]] if arch == "qwen3_moe" and ids["bos"] != ids["eos"] else ids["eos"]
    return ids, gen_eos


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=ARCHS, help="family (required unless --shape)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--experts-layout", choices=("per-expert", "fused"),
                    help="default per-expert (qwen3_5_moe: fused, as released)")
    ap.add_argument("--weights-dtype", choices=("bf16", "fp8", "f32"), default="bf16",
                    help="f32: --arch inkling only")
    ap.add_argument("--shards", type=int, help="default 1 (--shape: the real model's count)")
    ap.add_argument("--tokenizer", help="directory with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--vocab-size", type=int, help="override vocab_size")
    ap.add_argument("--size", choices=sorted(SIZES), help="default tiny")
    ap.add_argument("--clip-qkv", type=float, default=None, help="olmoe only: clip_qkv value")
    ap.add_argument("--shape",
                    choices=sorted(SHAPES) + sorted(arch_qwen35.SHAPES) + sorted(arch_gpt_oss.SHAPES),
                    help="a real model's dimensions, streamed to disk (GBs; see tools/README.md)")
    ap.add_argument("--layers", type=int, help="--shape only: keep the first N layers")
    arch_deepseek.add_arguments(ap)
    arch_qwen35.add_arguments(ap)
    arch_deepseek_v4.add_arguments(ap)
    arch_gpt_oss.add_arguments(ap)
    args = ap.parse_args(argv)
    if arch_inkling.used(args):
        return arch_inkling.main(args, ap, sys.modules[__name__])
    if args.weights_dtype == "f32":
        ap.error("--weights-dtype f32 applies to --arch inkling only")
    if arch_qwen35.used(args):
        return arch_qwen35.main(args, ap, sys.modules[__name__])
    if args.vision_tower:
        ap.error("--vision-tower applies to --shape qwen3.5-35b-a3b only")
    if args.experts_layout is None:
        args.experts_layout = "per-expert"
    if arch_deepseek_v4.used(args):
        return arch_deepseek_v4.main(args, ap, sys.modules[__name__])
    if arch_deepseek.used(args):
        return arch_deepseek.main(args, ap, sys.modules[__name__])
    if arch_minimax_m2.used(args):
        return arch_minimax_m2.main(args, ap, sys.modules[__name__])
    if arch_gpt_oss.used(args):
        return arch_gpt_oss.main(args, ap, sys.modules[__name__])
    if args.experts_dtype is not None:
        ap.error("--experts-dtype applies to --arch gpt_oss only")

    if args.shape:
        shape = SHAPES[args.shape]
        if args.arch and args.arch != shape["arch"]:
            ap.error("--shape %s is a %s model, not --arch %s" % (args.shape, shape["arch"], args.arch))
        args.arch = shape["arch"]
        for opt, bad in (("--size", args.size), ("--tokenizer", args.tokenizer),
                         ("--vocab-size", args.vocab_size),
                         ("--experts-layout fused", args.experts_layout == "fused")):
            if bad:
                ap.error("%s does not combine with --shape" % opt)
        if args.layers is not None and not 1 <= args.layers <= shape["layers"]:
            ap.error("--layers must be in [1, %d] for %s" % (shape["layers"], args.shape))
        if args.shards is None:
            args.shards = shape["shards"]
    elif args.layers is not None:
        ap.error("--layers applies to --shape only")
    if not args.arch:
        ap.error("one of --arch or --shape is required")
    if args.size is None:
        args.size = "tiny"
    if args.shards is None:
        args.shards = 1
    if args.clip_qkv is not None and args.arch != "olmoe":
        ap.error("--clip-qkv applies to olmoe only")
    if args.shards < 1:
        ap.error("--shards must be >= 1")
    if args.shape:
        dims = shape_dims(args.shape, args.layers)
        vocab, ids, gen_eos = dims["vocab"], dims["ids"], dims["gen_eos"]
    else:
        dims = size_dims(args.arch, args.size)
        vocab = SIZES[args.size]["vocab"]
        if args.tokenizer:
            for f in ("tokenizer.json", "tokenizer_config.json"):
                if not os.path.isfile(os.path.join(args.tokenizer, f)):
                    ap.error("%s has no %s" % (args.tokenizer, f))
            n_ids, base, _ = tokenizer_info(args.tokenizer)
            vocab = KNOWN_PADDED_VOCAB.get(base, -(-n_ids // 64) * 64)
            vocab = max(vocab, n_ids)
        if args.vocab_size:
            vocab = args.vocab_size
        ids, gen_eos = special_ids(args.arch, args.tokenizer, vocab)
    for k, v in ids.items():
        if v is not None and not 0 <= v < vocab:
            ap.error("%s token id %d is outside the vocabulary of %d" % (k, v, vocab))

    cfg = build_config(args.arch, dims, vocab, ids, args.clip_qkv)
    if args.weights_dtype == "fp8":
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                      "quant_method": "fp8", "weight_block_size": [128, 128]}
    hf_dir.clear_weights(args.out)
    if args.shape:
        shape_weights = ShapeWeights(cfg, args.seed, args.weights_dtype)
        groups = shape_weights.plan()
        need = sum(st.DTYPES[t[1]][1] * int(np.prod(t[2])) for g in groups for t in g)
        free = shutil.disk_usage(args.out).free
        if need + (1 << 30) > free:
            raise SystemExit("gen_model: %s needs %.1f GB but %s has %.1f GB free (keeping 1 GiB)"
                             % (args.shape, need / 1e9, args.out, free / 1e9))
    hf_dir.write_json(os.path.join(args.out, "config.json"), cfg)
    gen = {"bos_token_id": ids["bos"], "eos_token_id": gen_eos,
           "transformers_version": cfg["transformers_version"]}
    if ids["pad"] is not None:
        gen["pad_token_id"] = ids["pad"]
    hf_dir.write_json(os.path.join(args.out, "generation_config.json"), gen)
    if args.tokenizer:
        for fname in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(args.tokenizer, fname), os.path.join(args.out, fname))

    if args.shape:
        label = args.shape + (" (%d layers)" % args.layers if args.layers else "")
        n_params = sum(int(np.prod(t[2])) for g in groups for t in g if not t[0].endswith("_scale_inv"))
        sys.stderr.write("gen_model: %s, %.2f B parameters, %s, %.2f GB in %d shard(s) -> %s\n"
                         % (label, n_params / 1e9, args.weights_dtype, need / 1e9, args.shards,
                            args.out))
        t0 = time.monotonic()
        write_shape_checkpoint(args.out, groups, args.shards, label)
        sys.stderr.write("gen_model: %s written in %.0f s\n" % (label, time.monotonic() - t0))
        return 0
    groups = build_tensors(cfg, args.seed, args.experts_layout, args.weights_dtype)
    write_checkpoint(args.out, groups, args.shards)
    return 0

if __name__ == "__main__":
    sys.exit(main())
