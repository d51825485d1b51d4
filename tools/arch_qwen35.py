"""Tiny Qwen3.5-MoE / Qwen3.6-MoE and Qwen3-Next checkpoints for gen_model.py.

gen_model.py hands over to main() here for --arch qwen3_5_moe,
qwen3_5_moe_text and qwen3_next, and for --shape qwen3.5-35b-a3b.  Written
from transformers v5.15.0 (models/qwen3_5_moe/configuration_qwen3_5_moe.py
and modeling_qwen3_5_moe.py, models/qwen3_next/configuration_qwen3_next.py
and modeling_qwen3_next.py, conversion_mapping.py); the names, shapes and
config fields are those of the released checkpoints (Qwen/Qwen3.5-35B-A3B,
Qwen/Qwen3-Next-80B-A3B-Instruct).

What the three tiny layouts are (tools/README.md has the tables):

- qwen3_5_moe: the released vision-language layout.  config.json holds a
  `text_config` (model_type qwen3_5_moe_text, `layer_types` listed, RoPE in
  `rope_parameters` with the M-RoPE fields) and a small `vision_config`;
  tensors `model.language_model.*`, `lm_head.weight`, a one-block vision
  tower `model.visual.*` (random, for a converter to skip) and the MTP
  block `mtp.*`; routed experts fused as released
  (`mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj` [E, H, I]).
- qwen3_5_moe_text: the text-only Qwen3_5MoeForCausalLM layout, fields at
  the top level, `full_attention_interval` 2 instead of `layer_types`,
  `model.*` names, per-expert experts (transformers fuses them on load with
  the qwen2_moe conversion mapping), no vision, no MTP.
- qwen3_next: Qwen3NextForCausalLM, `full_attention_interval` 4, layer 2
  dense (`mlp_only_layers`), top-level `rope_theta` / `partial_rotary_factor`
  as Qwen3-Next-80B's config.json, per-expert experts, and the DeltaNet
  projections fused and grouped per key head (`in_proj_qkvz`, `in_proj_ba`)
  as Qwen3NextGatedDeltaNet.fix_query_key_value_ordering undoes them.

Weights are drawn per tensor from generators seeded by (seed, crc32 of a
master name), as in gen_model: the master name is the text model's
per-expert name without the `language_model.` part (`model.layers.L...`),
and Qwen3-Next's fused projections are built from the masters of Qwen3.5's
separate ones (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a), so a layout
is only a different storage of the same master weights.
"""

import os
import zlib

import numpy as np

import hf_dir

ARCHS = ("qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next")

# Tiny text dimensions, shared by the three fixtures.  Every matrix input
# dimension is a multiple of 64.
TINY = dict(hidden=128, layers=4, heads=4, kv_heads=2, head_dim=64, partial_rotary_factor=0.25,
            rope_theta=1000000.0, eps=1e-6, vocab=512, conv_kernel=4, lk_dim=32, lv_dim=32,
            lk_heads=2, lv_heads=4, experts=8, top_k=2, moe_ffn=64, shared_ffn=128,
            dense_ffn=256, mtp_layers=1)

# A one-block vision tower with the real module names (Qwen3_5MoeVisionModel).
TINY_VISION = dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=2, in_channels=3,
                   patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                   num_position_embeddings=16)

# Magnitudes (see tools/README.md, "Qwen3.5 / Qwen3-Next").  Zero-centred
# norms (weight w, applied as 1 + w) get N(0, ZC_NORM_STD); the gated
# DeltaNet norm (plain w) 1 + N(0, 0.1).  The DeltaNet decay
# g = -exp(A_log) * softplus(a + dt_bias) takes A = exp(A_log) uniform in
# [1, 16] and dt_bias ~ N(DT_BIAS_MEAN, 0.5), so exp(g) per step runs from
# about 0.2 (forgetting in a few tokens) to 0.97 (remembering the prompt);
# beta = sigmoid(b) spreads over (0, 1).
ZC_NORM_STD = 0.1
DT_BIAS_MEAN = -3.0
B_STD = 1.5           # in_proj_b rows, times hidden^-0.5
A_STD = 0.7           # in_proj_a rows, times hidden^-0.5
CONV_STD = 0.5        # conv1d taps: 4 taps of std 0.5 keep the conv output O(1)
ROUTER_STD = 2.5      # router rows, times hidden^-0.5 (as qwen3_moe)
SHARED_GATE_STD = 1.5  # shared_expert_gate row, times hidden^-0.5


# ---------------------------------------------------------------- config


def layer_types(n_layers, interval):
    """HF Qwen3_5MoeTextConfig / Qwen3NextConfig.__post_init__ without layer_types."""
    return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n_layers)]


def text_fields(d, ids):
    """The text-model fields common to both families, Qwen3.5-35B-A3B's names."""
    return {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ids["bos"],
        "dtype": "bfloat16",
        "eos_token_id": ids["eos"],
        "head_dim": d["head_dim"],
        "hidden_act": "silu",
        "hidden_size": d["hidden"],
        "initializer_range": 0.02,
        "linear_conv_kernel_dim": d["conv_kernel"],
        "linear_key_head_dim": d["lk_dim"],
        "linear_num_key_heads": d["lk_heads"],
        "linear_num_value_heads": d["lv_heads"],
        "linear_value_head_dim": d["lv_dim"],
        "max_position_embeddings": 262144,
        "moe_intermediate_size": d["moe_ffn"],
        "num_attention_heads": d["heads"],
        "num_experts": d["experts"],
        "num_experts_per_tok": d["top_k"],
        "num_hidden_layers": d["layers"],
        "num_key_value_heads": d["kv_heads"],
        "output_router_logits": False,
        "rms_norm_eps": d["eps"],
        "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": d["shared_ffn"],
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": d["vocab"],
    }


def rope_parameters(d, mrope):
    rp = {"rope_type": "default", "rope_theta": d["rope_theta"],
          "partial_rotary_factor": d["partial_rotary_factor"]}
    if mrope:
        # Interleaved M-RoPE sections over the rotary_dim / 2 frequencies
        # (Qwen3.5-35B-A3B: [11, 11, 10] of 32); text positions are the same
        # on all three axes, so for text they change nothing.
        half = int(d["head_dim"] * d["partial_rotary_factor"]) // 2
        a = int(round(half * 11 / 32))
        rp.update(mrope_section=[a, a, half - 2 * a], mrope_interleaved=True)
    return rp


def build_config(arch, d, ids, vision):
    """config.json for dims d (TINY or a SHAPES entry)."""
    tf = text_fields(d, ids)
    if arch == "qwen3_next":
        # Qwen/Qwen3-Next-80B-A3B-Instruct's field set: RoPE at the top level.
        return dict(tf, architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next",
                    decoder_sparse_step=1, full_attention_interval=4,
                    intermediate_size=d["dense_ffn"], mlp_only_layers=[2],
                    norm_topk_prob=True, partial_rotary_factor=d["partial_rotary_factor"],
                    rope_scaling=None, rope_theta=d["rope_theta"],
                    transformers_version="4.57.0.dev0", use_sliding_window=False)
    if arch == "qwen3_5_moe_text":
        return dict(tf, architectures=["Qwen3_5MoeForCausalLM"], model_type="qwen3_5_moe_text",
                    full_attention_interval=2, rope_parameters=rope_parameters(d, False),
                    transformers_version="5.15.0")
    text = dict(tf, model_type="qwen3_5_moe_text",
                layer_types=layer_types(d["layers"], 4), full_attention_interval=4,
                rope_parameters=rope_parameters(d, True),
                mtp_num_hidden_layers=d["mtp_layers"], mtp_use_dedicated_embeddings=False,
                attn_output_gate=True)
    text.pop("tie_word_embeddings")
    cfg = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
           "text_config": text, "tie_word_embeddings": False,
           "transformers_version": "4.57.0.dev0",
           "image_token_id": ids["image"], "video_token_id": ids["video"],
           "vision_start_token_id": ids["vision_start"], "vision_end_token_id": ids["vision_end"]}
    if vision:
        # The release writes the vision model_type as "qwen3_5_moe", which
        # Qwen3_5MoeConfig.__post_init__ renames to qwen3_5_moe_vision.
        cfg["vision_config"] = dict(vision, model_type="qwen3_5_moe", hidden_act="gelu_pytorch_tanh",
                                    initializer_range=0.02, out_hidden_size=d["hidden"],
                                    deepstack_visual_indexes=[])
    return cfg


def tiny_ids(vocab):
    """Token ids placed as Qwen3.5 places them, near the end of the vocabulary:
    <|endoftext|> = bos = pad, <|im_end|> = eos, then the vision markers."""
    return dict(bos=vocab - 12, eos=vocab - 10, pad=vocab - 12, vision_start=vocab - 8,
                vision_end=vocab - 7, image=vocab - 5, video=vocab - 4)


def generation_config(arch, ids, version):
    gen = {"bos_token_id": ids["bos"], "eos_token_id": [ids["eos"], ids["bos"]],
           "pad_token_id": ids["pad"], "transformers_version": version}
    if arch != "qwen3_next":
        gen.update(do_sample=True, temperature=0.6, top_k=20, top_p=0.95)
    return gen


def text_of(cfg):
    return cfg.get("text_config") or cfg


# ---------------------------------------------------------------- tensors


def is_moe_layer(cfg, L):
    """HF Qwen3NextDecoderLayer: sparse unless in mlp_only_layers or off the
    decoder_sparse_step; every Qwen3.5-MoE layer (MTP layers too) is sparse."""
    t = text_of(cfg)
    if t.get("model_type") != "qwen3_next" or L >= t["num_hidden_layers"]:
        return True
    return (L not in (t.get("mlp_only_layers") or []) and t["num_experts"] > 0
            and (L + 1) % t.get("decoder_sparse_step", 1) == 0)


def types_of(cfg):
    t = text_of(cfg)
    return t.get("layer_types") or layer_types(t["num_hidden_layers"], t.get("full_attention_interval", 4))


def deltanet_specs(cfg, p, m):
    """(name, master, shape, kind, std, None) of one Gated DeltaNet; p is the
    stored prefix, m the master prefix (both end with 'linear_attn.')."""
    t = text_of(cfg)
    H = t["hidden_size"]
    nk, nv = t["linear_num_key_heads"], t["linear_num_value_heads"]
    dk, dv = t["linear_key_head_dim"], t["linear_value_head_dim"]
    K = t["linear_conv_kernel_dim"]
    key_dim, value_dim = nk * dk, nv * dv
    conv_dim = 2 * key_dim + value_dim
    if t["model_type"] == "qwen3_next":
        # Built from the masters of the separate projections (see fused_next).
        yield p + "in_proj_qkvz.weight", None, (2 * key_dim + 2 * value_dim, H), "qkvz", H ** -0.5, None
        yield p + "in_proj_ba.weight", None, (2 * nv, H), "ba", None, None
    else:
        yield p + "in_proj_qkv.weight", m + "in_proj_qkv.weight", (conv_dim, H), "proj", H ** -0.5, None
        yield p + "in_proj_z.weight", m + "in_proj_z.weight", (value_dim, H), "proj", H ** -0.5, None
        yield p + "in_proj_b.weight", m + "in_proj_b.weight", (nv, H), "linear", B_STD * H ** -0.5, None
        yield p + "in_proj_a.weight", m + "in_proj_a.weight", (nv, H), "linear", A_STD * H ** -0.5, None
    yield p + "conv1d.weight", m + "conv1d.weight", (conv_dim, 1, K), "conv", CONV_STD, None
    yield p + "dt_bias", m + "dt_bias", (nv,), "dt_bias", 0.5, None
    yield p + "A_log", m + "A_log", (nv,), "A_log", None, None
    yield p + "norm.weight", m + "norm.weight", (dv,), "norm", 0.1, None
    yield p + "out_proj.weight", m + "out_proj.weight", (H, value_dim), "proj", 0.7 * value_dim ** -0.5, None


def attention_specs(cfg, p, m):
    """Gated attention (HF Qwen3_5MoeAttention / Qwen3NextAttention): q_proj
    holds, per head, head_dim query rows then head_dim gate rows."""
    t = text_of(cfg)
    H = t["hidden_size"]
    nh, nkv, hd = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    yield p + "q_proj.weight", m + "q_proj.weight", (nh * hd * 2, H), "proj", H ** -0.5, None
    yield p + "k_proj.weight", m + "k_proj.weight", (nkv * hd, H), "proj", H ** -0.5, None
    yield p + "v_proj.weight", m + "v_proj.weight", (nkv * hd, H), "proj", H ** -0.5, None
    yield p + "o_proj.weight", m + "o_proj.weight", (H, nh * hd), "proj", 0.7 * (nh * hd) ** -0.5, None
    yield p + "q_norm.weight", m + "q_norm.weight", (hd,), "zc_norm", ZC_NORM_STD, None
    yield p + "k_norm.weight", m + "k_norm.weight", (hd,), "zc_norm", ZC_NORM_STD, None


def layer_specs(cfg, p, m, L, full):
    """One decoder layer; p / m: stored / master prefixes ending with '.';
    L the layer index (MTP layers: num_hidden_layers + k); full: full attention."""
    t = text_of(cfg)
    H = t["hidden_size"]
    yield p + "input_layernorm.weight", m + "input_layernorm.weight", (H,), "zc_norm", ZC_NORM_STD, None
    if full:
        yield from attention_specs(cfg, p + "self_attn.", m + "self_attn.")
    else:
        yield from deltanet_specs(cfg, p + "linear_attn.", m + "linear_attn.")
    yield (p + "post_attention_layernorm.weight", m + "post_attention_layernorm.weight", (H,),
           "zc_norm", ZC_NORM_STD, None)
    if not is_moe_layer(cfg, L):
        F = t["intermediate_size"]
        yield p + "mlp.gate_proj.weight", m + "mlp.gate_proj.weight", (F, H), "proj", H ** -0.5, None
        yield p + "mlp.up_proj.weight", m + "mlp.up_proj.weight", (F, H), "proj", H ** -0.5, None
        yield p + "mlp.down_proj.weight", m + "mlp.down_proj.weight", (H, F), "proj", 0.7 * F ** -0.5, None
        return
    E, I, S = t["num_experts"], t["moe_intermediate_size"], t["shared_expert_intermediate_size"]
    yield p + "mlp.gate.weight", m + "mlp.gate.weight", (E, H), "router", ROUTER_STD * H ** -0.5, None
    for e in range(E):
        for part in ("gate", "up", "down"):
            shape = (H, I) if part == "down" else (I, H)
            std = 0.7 * I ** -0.5 if part == "down" else H ** -0.5
            name = "mlp.experts.%d.%s_proj.weight" % (e, part)
            yield p + name, m + name, shape, "proj", std, (e, part)
    for part, shape, std in (("gate", (S, H), H ** -0.5), ("up", (S, H), H ** -0.5),
                             ("down", (H, S), 0.7 * S ** -0.5)):
        name = "mlp.shared_expert.%s_proj.weight" % part
        yield p + name, m + name, shape, "proj", std, None
    yield (p + "mlp.shared_expert_gate.weight", m + "mlp.shared_expert_gate.weight", (1, H), "linear",
           SHARED_GATE_STD * H ** -0.5, None)


def vision_specs(v):
    """The vision tower's tensors (Qwen3_5MoeVisionModel module names)."""
    C, h, f = v["hidden_size"], v["hidden_size"], v["intermediate_size"]
    pt, ps, cin = v["temporal_patch_size"], v["patch_size"], v["in_channels"]
    merged = C * v["spatial_merge_size"] ** 2
    out = v["out_hidden_size"]
    x = "model.visual."
    yield x + "patch_embed.proj.weight", (C, cin, pt, ps, ps), 0.02
    yield x + "patch_embed.proj.bias", (C,), 0.02
    yield x + "pos_embed.weight", (v["num_position_embeddings"], C), 0.02
    for b in range(v["depth"]):
        k = x + "blocks.%d." % b
        for n in ("norm1", "norm2"):
            yield k + n + ".weight", (h,), "ones"
            yield k + n + ".bias", (h,), 0.02
        yield k + "attn.qkv.weight", (3 * h, h), 0.02
        yield k + "attn.qkv.bias", (3 * h,), 0.02
        yield k + "attn.proj.weight", (h, h), 0.02
        yield k + "attn.proj.bias", (h,), 0.02
        yield k + "mlp.linear_fc1.weight", (f, h), 0.02
        yield k + "mlp.linear_fc1.bias", (f,), 0.02
        yield k + "mlp.linear_fc2.weight", (h, f), 0.02
        yield k + "mlp.linear_fc2.bias", (h,), 0.02
    yield x + "merger.norm.weight", (C,), "ones"
    yield x + "merger.norm.bias", (C,), 0.02
    yield x + "merger.linear_fc1.weight", (merged, merged), 0.02
    yield x + "merger.linear_fc1.bias", (merged,), 0.02
    yield x + "merger.linear_fc2.weight", (out, merged), 0.02
    yield x + "merger.linear_fc2.bias", (out,), 0.02


def tensor_specs(cfg, mtp=True):
    """Yields (stored name, master name or None, shape, kind, std, expert)
    in checkpoint order, experts per expert (expert = (e, part) or None).
    Vision tensors come separately (vision_specs)."""
    t = text_of(cfg)
    vlm = cfg.get("model_type") == "qwen3_5_moe"
    H, V = t["hidden_size"], t["vocab_size"]
    base = "model.language_model." if vlm else "model."
    yield base + "embed_tokens.weight", "model.embed_tokens.weight", (V, H), "embed", 1.0, None
    for L, kind in enumerate(types_of(cfg)):
        yield from layer_specs(cfg, "%slayers.%d." % (base, L), "model.layers.%d." % L, L,
                               kind == "full_attention")
    yield base + "norm.weight", "model.norm.weight", (H,), "zc_norm", ZC_NORM_STD, None
    yield "lm_head.weight", "lm_head.weight", (V, H), "lm_head", 1.5 * H ** -0.5, None
    if not mtp or not mtp_layers(cfg):
        return
    # Multi-token prediction as Qwen3.5 / Qwen3-Next ship it (transformers
    # ignores ^mtp.*): u = fc(cat(pre_fc_norm_embedding(E[t+1]),
    # pre_fc_norm_hidden(h_t))), then full-attention decoder layers, then norm.
    yield "mtp.fc.weight", "mtp.fc.weight", (H, 2 * H), "linear", (2 * H) ** -0.5, None
    yield ("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_embedding.weight", (H,), "zc_norm",
           ZC_NORM_STD, None)
    yield ("mtp.pre_fc_norm_hidden.weight", "mtp.pre_fc_norm_hidden.weight", (H,), "zc_norm",
           ZC_NORM_STD, None)
    for k in range(mtp_layers(cfg)):
        p = "mtp.layers.%d." % k
        yield from layer_specs(cfg, p, p, t["num_hidden_layers"] + k, True)
    yield "mtp.norm.weight", "mtp.norm.weight", (H,), "zc_norm", ZC_NORM_STD, None


def mtp_layers(cfg):
    t = text_of(cfg)
    if t.get("model_type") == "qwen3_next":
        return 1          # Qwen3-Next's config.json has no count; the release ships one layer
    return t.get("mtp_num_hidden_layers", 0)


# ---------------------------------------------------------------- weights


def rng_of(seed, name):
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def master(g, seed, name, shape, kind, std):
    """Float32 master weight of one tensor (its own generator)."""
    if kind == "proj":
        return g.master_weight(seed, name, shape, "proj", std)
    if kind == "norm":
        return g.master_weight(seed, name, shape, "norm", std)
    rng = rng_of(seed, name)
    if kind == "A_log":
        return np.log(rng.uniform(1.0, 16.0, shape)).astype(np.float32)
    if kind == "dt_bias":
        return (DT_BIAS_MEAN + std * rng.standard_normal(shape)).astype(np.float32)
    # zc_norm, linear, router, embed, lm_head, conv: plain N(0, std)
    return (std * rng.standard_normal(shape)).astype(np.float32)


def fused_next(g, seed, cfg, m, kind):
    """Qwen3-Next's grouped projections from the Qwen3.5 masters under m
    ('...linear_attn.').  Per key head k (of nk), in_proj_qkvz rows are
    [q_k (dk) | k_k (dk) | v of value heads k*r..k*r+r-1 (r*dv) | z of the same
    (r*dv)] and in_proj_ba rows [b of those r heads | a of them], r = nv / nk:
    the layout HF fix_query_key_value_ordering splits."""
    t = text_of(cfg)
    H = t["hidden_size"]
    nk, nv = t["linear_num_key_heads"], t["linear_num_value_heads"]
    dk, dv = t["linear_key_head_dim"], t["linear_value_head_dim"]
    r = nv // nk
    kd, vd = nk * dk, nv * dv
    if kind == "qkvz":
        qkv = g.master_weight(seed, m + "in_proj_qkv.weight", (2 * kd + vd, H), "proj", H ** -0.5)
        z = g.master_weight(seed, m + "in_proj_z.weight", (vd, H), "proj", H ** -0.5)
        q, k, v = qkv[:kd], qkv[kd:2 * kd], qkv[2 * kd:]
        rows = []
        for h in range(nk):
            rows += [q[h * dk:(h + 1) * dk], k[h * dk:(h + 1) * dk],
                     v[h * r * dv:(h + 1) * r * dv], z[h * r * dv:(h + 1) * r * dv]]
        return np.concatenate(rows, axis=0)
    b = master(g, seed, m + "in_proj_b.weight", (nv, H), "linear", B_STD * H ** -0.5)
    a = master(g, seed, m + "in_proj_a.weight", (nv, H), "linear", A_STD * H ** -0.5)
    rows = []
    for h in range(nk):
        rows += [b[h * r:(h + 1) * r], a[h * r:(h + 1) * r]]
    return np.concatenate(rows, axis=0)


def bf16(g, name, w):
    return {name: ("BF16", g.st.f32_to_bf16(np.ascontiguousarray(w, dtype=np.float32)))}


def build_tensors(cfg, seed, layout, g, vision=True):
    """Groups of {name: (dtype, storage)} as gen_model.build_tensors returns.
    A_log is F32 (as in the releases); everything else BF16."""
    t = text_of(cfg)
    E = t["num_experts"]
    groups, pending = [], {}
    for name, mname, shape, kind, std, ex in tensor_specs(cfg):
        if kind in ("qkvz", "ba"):
            w = fused_next(g, seed, cfg, name.rsplit("in_proj_", 1)[0], kind)
        else:
            w = master(g, seed, mname, shape, kind, std)
        if ex is not None and layout == "fused":
            prefix = name.split("experts.")[0] + "experts."
            pending.setdefault((prefix, ex[1]), []).append(w)
            if ex == (E - 1, "down"):
                gate_up = np.stack([np.concatenate([a, b], axis=0) for a, b in
                                    zip(pending.pop((prefix, "gate")), pending.pop((prefix, "up")))])
                groups.append(bf16(g, prefix + "gate_up_proj", gate_up))
                groups.append(bf16(g, prefix + "down_proj", np.stack(pending.pop((prefix, "down")))))
            continue
        if kind == "A_log":
            groups.append({name: ("F32", np.ascontiguousarray(w, dtype=np.float32))})
        else:
            groups.append(bf16(g, name, w))
    if vision and "vision_config" in cfg:
        v = cfg["vision_config"]
        for name, shape, std in vision_specs(v):
            rng = rng_of(seed, name)
            w = np.ones(shape, np.float32) if std == "ones" else std * rng.standard_normal(shape)
            groups.append(bf16(g, name, w))
    return groups


# ---------------------------------------------------------------- real shapes
#
# --shape qwen3.5-35b-a3b writes Qwen/Qwen3.5-35B-A3B's dimensions in the
# released VLM layout (fused experts, mtp.*; the vision tower only with
# --vision-tower), streamed tensor by tensor through gen_model's
# write_shape_checkpoint with gen_model's ShapeWeights writers: table-drawn
# normals, the shared embedding direction, skewed token-dependent routing.
# Every zero-centred norm w is drawn as N(0, 0.1) from the generator of its
# text master name, so 1 + w is exactly the "norm" master that ShapeWeights
# aims the routers and lm_head by.

SHAPES = {
    # Qwen/Qwen3.5-35B-A3B (text): 35 B parameters, 3 B active.
    "qwen3.5-35b-a3b": dict(hidden=2048, layers=40, heads=16, kv_heads=2, head_dim=256,
                            partial_rotary_factor=0.25, rope_theta=10000000.0, eps=1e-6,
                            vocab=248320, conv_kernel=4, lk_dim=128, lv_dim=128, lk_heads=16,
                            lv_heads=32, experts=256, top_k=8, moe_ffn=512, shared_ffn=512,
                            mtp_layers=1, shards=14,
                            ids=dict(bos=248044, eos=248044, pad=248044, vision_start=248053,
                                     vision_end=248054, image=248056, video=248057),
                            gen_eos=[248046, 248044],
                            vision=dict(depth=27, hidden_size=1152, intermediate_size=4304,
                                        num_heads=16, in_channels=3, patch_size=16,
                                        spatial_merge_size=2, temporal_patch_size=2,
                                        num_position_embeddings=2304)),
}


def add_arguments(ap):
    g = ap.add_argument_group("qwen3.5-35b-a3b")
    g.add_argument("--vision-tower", action="store_true",
                   help="--shape qwen3.5-35b-a3b: also write the (random) 27-block vision tower")


def shape_plan(g, cfg, seed, vision):
    """(name, dtype, shape, write) groups of a --shape checkpoint, in order."""
    sw = g.ShapeWeights(text_of(cfg), seed, "bf16")
    t = text_of(cfg)
    H = t["hidden_size"]
    E, I = t["num_experts"], t["moe_intermediate_size"]
    groups = []
    for name, mname, shape, kind, std, ex in tensor_specs(cfg):
        if ex is not None:
            if ex != (E - 1, "down"):
                continue
            # The whole layer's fused experts at its last per-expert spec.
            prefix = name.split("experts.")[0] + "experts."
            mp = mname.split("experts.")[0] + "experts."
            groups.append([(prefix + "gate_up_proj", "BF16", (E, 2 * I, H),
                            sw.proj_bf16_writer(mp + "gate_up_proj", (E * 2 * I, H), H ** -0.5))])
            groups.append([(prefix + "down_proj", "BF16", (E, H, I),
                            sw.proj_bf16_writer(mp + "down_proj", (E * H, I), 0.7 * I ** -0.5))])
            continue
        last = name.rsplit(".", 2)[-2]
        if kind == "embed":
            w = sw.embed_writer(mname, shape)
        elif kind == "lm_head":
            w = sw.lm_head_writer(mname, shape, std)
        elif kind == "router" and mname.startswith("model.layers."):
            w = sw.router_writer(mname, shape)
        elif last in ("q_proj", "k_proj", "v_proj", "in_proj_qkv", "in_proj_z"):
            # Rows orthogonal to the shared component (ShapeWeights.qkv_writer).
            w = sw.qkv_writer(mname, shape, std, None)
        elif kind == "zc_norm":
            v = master(g, seed, mname, shape, kind, std)
            if last in ("q_norm", "k_norm"):
                v = g.QK_NORM_GAIN * (1.0 + v) - 1.0     # scores of std ~4, as gen_model's shapes
            w = sw.array_writer(g.st.f32_to_bf16(v))
        elif kind == "A_log":
            groups.append([(name, "F32", shape, sw.array_writer(master(g, seed, mname, shape, kind, std)))])
            continue
        elif kind in ("proj", "linear", "router") and len(shape) == 2 and shape[0] * shape[1] > 65536:
            w = sw.proj_bf16_writer(mname, shape, std)
        else:
            w = sw.array_writer(g.st.f32_to_bf16(master(g, seed, mname, shape, kind, std)))
        groups.append([(name, "BF16", shape, w)])
    if vision and "vision_config" in cfg:
        for name, shape, std in vision_specs(cfg["vision_config"]):
            if std == "ones":
                w = sw.array_writer(g.st.f32_to_bf16(np.ones(shape, np.float32)))
            elif len(shape) == 1:
                w = sw.array_writer(g.st.f32_to_bf16((std * rng_of(seed, name).standard_normal(shape))
                                                     .astype(np.float32)))
            else:
                w = sw.proj_bf16_writer(name, (shape[0], int(np.prod(shape[1:]))), std)
            groups.append([(name, "BF16", shape, w)])
    return groups


def shape_main(args, ap, g):
    """gen_model --shape qwen3.5-35b-a3b."""
    import shutil
    import sys
    import time
    d, shards = hf_dir.shape_dims(args, ap, SHAPES, (("--experts-layout", args.experts_layout),))
    cfg = build_config("qwen3_5_moe", d, d["ids"], dict(d["vision"]))
    groups = shape_plan(g, cfg, args.seed, args.vision_tower)
    need = sum(g.st.DTYPES[t[1]][1] * int(np.prod(t[2])) for grp in groups for t in grp)
    hf_dir.clear_weights(args.out)
    free = shutil.disk_usage(args.out).free
    if need + (1 << 30) > free:
        raise SystemExit("gen_model: %s needs %.1f GB but %s has %.1f GB free (keeping 1 GiB)"
                         % (args.shape, need / 1e9, args.out, free / 1e9))
    hf_dir.write_json(os.path.join(args.out, "config.json"), cfg)
    gen = generation_config("qwen3_5_moe", d["ids"], cfg["transformers_version"])
    gen["eos_token_id"] = d["gen_eos"]
    hf_dir.write_json(os.path.join(args.out, "generation_config.json"), gen)
    label = args.shape + (" (%d layers)" % args.layers if args.layers else "")
    n_params = sum(int(np.prod(t[2])) for grp in groups for t in grp)
    sys.stderr.write("gen_model: %s, %.2f B parameters, bf16, %.2f GB in %d shard(s) -> %s\n"
                     % (label, n_params / 1e9, need / 1e9, shards, args.out))
    t0 = time.monotonic()
    g.write_shape_checkpoint(args.out, groups, shards, label)
    sys.stderr.write("gen_model: %s written in %.0f s\n" % (label, time.monotonic() - t0))
    return 0


# ---------------------------------------------------------------- main


def used(args):
    return getattr(args, "arch", None) in ARCHS or getattr(args, "shape", None) in SHAPES


def main(args, ap, g):
    """gen_model's main for these families; g is the gen_model module."""
    if args.shape in SHAPES:
        return shape_main(args, ap, g)
    if args.vision_tower:
        ap.error("--vision-tower applies to --shape qwen3.5-35b-a3b only")
    if args.shape:
        ap.error("--shape %s is not a %s model" % (args.shape, args.arch))
    for opt, bad in (("--tokenizer", args.tokenizer),
                     ("--clip-qkv", args.clip_qkv is not None),
                     ("--size small", args.size not in (None, "tiny")),
                     ("--weights-dtype fp8", args.weights_dtype == "fp8"),
                     ("--layers", args.layers is not None)):
        if bad:
            ap.error("%s is not available for --arch %s" % (opt, args.arch))
    given = [o for o in g.arch_deepseek.OPTIONS if getattr(args, o, None) is not None]
    if given:
        ap.error("--%s applies to the deepseek / glm families only" % given[0].replace("_", "-"))
    shards = 1 if args.shards is None else args.shards
    if shards < 1:
        ap.error("--shards must be >= 1")
    layout = args.experts_layout or ("fused" if args.arch == "qwen3_5_moe" else "per-expert")
    d = dict(TINY)
    if args.vocab_size:
        d["vocab"] = args.vocab_size
    ids = tiny_ids(d["vocab"])
    for k, v in ids.items():
        if not 0 <= v < d["vocab"]:
            ap.error("%s token id %d is outside the vocabulary of %d" % (k, v, d["vocab"]))
    vision = dict(TINY_VISION) if args.arch == "qwen3_5_moe" else None
    cfg = build_config(args.arch, d, ids, vision)
    hf_dir.clear_weights(args.out)
    hf_dir.write_json(os.path.join(args.out, "config.json"), cfg)
    hf_dir.write_json(os.path.join(args.out, "generation_config.json"),
               generation_config(args.arch, ids, cfg["transformers_version"]))
    groups = build_tensors(cfg, args.seed, layout, g)
    g.write_checkpoint(args.out, groups, shards)
    return 0
