"""Tiny DeepSeek-V3 and GLM-4.5 (glm4_moe) checkpoints for gen_model.py.

gen_model.py hands over to main() here for --arch deepseek_v3 and
--arch glm4_moe (and whenever one of the options below is given).  The
weights come from gen_model's per-tensor generators (master_weight, seeded
by the seed and the tensor name), are encoded by gen_model.encode (BF16, or
F8_E4M3 + F32 `weight_scale_inv` blocks for --weights-dtype fp8) and written
by gen_model.write_checkpoint, so every convention of the other families
holds here too (shards + index, fused experts, same-seed-same-weights).

What is specific to these families (see tools/README.md for the full list):

- deepseek_v3: multi-head latent attention (q_a_proj / q_a_layernorm /
  q_b_proj, or a plain q_proj when q_lora_rank is null; kv_a_proj_with_mqa /
  kv_a_layernorm / kv_b_proj), YaRN rope_scaling, rope_interleave left to
  the transformers default (true) as in the real config.json.
- glm4_moe (arch_glm.py): GQA with q/k/v biases, per-head q_norm / k_norm,
  partial_rotary_factor 0.5.
- both: the first `first_k_dense_replace` layers dense (intermediate_size),
  the others a sigmoid router `mlp.gate.weight` with an F32
  `mlp.gate.e_score_correction_bias`, grouped top-k (n_group / topk_group),
  routed experts `mlp.experts.E.*` and a shared expert `mlp.shared_experts.*`;
  and `num_nextn_predict_layers` multi-token-prediction layers stored as
  layers num_hidden_layers.. with the real names (embed_tokens, enorm, hnorm,
  eh_proj, shared_head.norm, shared_head.head, plus a full decoder layer).
"""

import os

import numpy as np

import arch_glm
import hf_dir

ARCHS = ("deepseek_v3", "glm4_moe", "deepseek_v32", "glm_moe_dsa")
DSA = ("deepseek_v32", "glm_moe_dsa")

# Tiny dimensions.  Every matrix input dimension is a multiple of 64, except
# the MLA up-projections whose input is the 64-wide latent (still 64).
TINY = dict(hidden=128, layers=3, first_k_dense=1, heads=4, vocab=512,
            experts=16, top_k=4, n_shared=1, experts_ffn=64, dense_ffn=256,
            routed_scaling_factor=2.5, mtp_layers=1)
DEEPSEEK_TINY = dict(q_lora_rank=64, kv_lora_rank=64, qk_nope=32, qk_rope=16, v_head=32,
                     n_group=4, topk_group=2, rope_theta=10000, max_pos=256,
                     yarn_factor=4, yarn_original_max=64, mscale=1.0, mscale_all_dim=1.0)

# The DSA indexer (deepseek_v32, glm_moe_dsa): 8 heads of 32 dims (16 roped),
# keeping 4 positions, so that positions 4.. of a 16-token prompt attend
# sparsely.  GLM-5's layer 2 reuses layer 1's selection ("shared").
DSA_TINY = dict(index_n_heads=8, index_head_dim=32, index_topk=4)

# Options added to gen_model's parser (all default None: "not given").
OPTIONS = ("q_lora_rank", "mscale", "mscale_all_dim", "mtp_layers", "n_group", "topk_group",
           "rope_interleave", "indexer_rope_interleave", "glm_rope")


def add_arguments(ap):
    g = ap.add_argument_group("deepseek_v3 / glm4_moe")
    g.add_argument("--q-lora-rank", type=int, metavar="N",
                   help="deepseek_v3: q_lora_rank (default 64; 0 writes null: a plain q_proj)")
    g.add_argument("--mscale", type=float, metavar="X",
                   help="deepseek_v3: rope_scaling.mscale (default 1.0)")
    g.add_argument("--mscale-all-dim", type=float, metavar="X",
                   help="deepseek_v3: rope_scaling.mscale_all_dim (default 1.0)")
    g.add_argument("--rope-interleave", choices=("absent", "true", "false"),
                   help="deepseek_v3: rope_interleave in config.json (default absent, "
                        "which transformers reads as true, as in the real config)")
    g.add_argument("--indexer-rope-interleave", choices=("absent", "true", "false"),
                   help="deepseek_v32 / glm_moe_dsa: indexer_rope_interleave in config.json "
                        "(default absent); for glm_moe_dsa it also sets rope_interleave, "
                        "as GLM-5's release does (transformers v5.15.0 reads neither)")
    g.add_argument("--glm-rope", choices=("default", "yarn"),
                   help="glm_moe_dsa: rope_parameters type (default \"default\", as GLM-5; "
                        "yarn takes the deepseek_v3 fixture's YaRN settings and --mscale*)")
    g.add_argument("--mtp-layers", type=int, metavar="N",
                   help="num_nextn_predict_layers (default 1)")
    g.add_argument("--n-group", type=int, metavar="G",
                   help="router groups (default: deepseek_v3 4, glm4_moe 1 as GLM-4.5)")
    g.add_argument("--topk-group", type=int, metavar="K",
                   help="groups kept per token (default: deepseek_v3 2, glm4_moe 1)")


def used(args):
    """True when this module should handle the run."""
    return (getattr(args, "arch", None) in ARCHS
            or any(getattr(args, o, None) is not None for o in OPTIONS))


# ---------------------------------------------------------------- config


def build_config(arch, args, vocab):
    t = dict(TINY)
    n_mtp = t["mtp_layers"] if args.mtp_layers is None else args.mtp_layers
    common = {
        "attention_dropout": 0.0,
        "first_k_dense_replace": t["first_k_dense"],
        "hidden_act": "silu",
        "hidden_size": t["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": t["dense_ffn"],
        "moe_intermediate_size": t["experts_ffn"],
        "n_routed_experts": t["experts"],
        "n_shared_experts": t["n_shared"],
        "norm_topk_prob": True,
        "num_attention_heads": t["heads"],
        "num_experts_per_tok": t["top_k"],
        "num_hidden_layers": t["layers"],
        "num_nextn_predict_layers": n_mtp,
        "routed_scaling_factor": t["routed_scaling_factor"],
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": vocab,
    }
    if arch == "glm4_moe":
        cfg = arch_glm.config(common, vocab)
        if args.n_group is not None:
            cfg["n_group"] = args.n_group
        if args.topk_group is not None:
            cfg["topk_group"] = args.topk_group
        return cfg
    cfg = deepseek_config(common, t, args)
    if arch in DSA:
        cfg = dsa_config(cfg, arch, args)
    return cfg


def dsa_config(cfg, arch, args):
    """deepseek_v32 (DeepSeek-V3.2-Exp's config.json field set) or
    glm_moe_dsa (GLM-5's) from the deepseek_v3 config."""
    cfg = dict(cfg, **DSA_TINY)
    cfg.pop("rope_interleave", None)   # DeepseekV32Config rejects the field
    if arch == "deepseek_v32":
        cfg.update(architectures=["DeepseekV32ForCausalLM"], model_type="deepseek_v32")
    else:
        # GLM-5: default RoPE (YaRN with --glm-rope yarn), one router group,
        # layer 2 "shared".
        rope = {"rope_theta": 10000.0, "rope_type": "default"}
        if args.glm_rope == "yarn":
            ys = cfg["rope_scaling"]
            rope = dict(rope_theta=10000.0, rope_type="yarn", factor=ys["factor"],
                        beta_fast=ys["beta_fast"], beta_slow=ys["beta_slow"], mscale=ys["mscale"],
                        mscale_all_dim=ys["mscale_all_dim"],
                        original_max_position_embeddings=ys["original_max_position_embeddings"])
        for k in ("rope_scaling", "aux_loss_alpha", "ep_size", "moe_layer_freq", "pretraining_tp",
                  "seq_aux", "topk_method", "scoring_func"):
            cfg.pop(k, None)
        cfg.update(architectures=["GlmMoeDsaForCausalLM"], model_type="glm_moe_dsa",
                   rope_parameters=rope,
                   n_group=1 if args.n_group is None else args.n_group,
                   topk_group=1 if args.topk_group is None else args.topk_group,
                   indexer_types=["full"] * (cfg["num_hidden_layers"] - 1) + ["shared"])
        cfg.pop("rope_theta", None)
    if args.indexer_rope_interleave in ("true", "false"):
        cfg["indexer_rope_interleave"] = args.indexer_rope_interleave == "true"
        if arch == "glm_moe_dsa":
            cfg["rope_interleave"] = cfg["indexer_rope_interleave"]
    return cfg


def deepseek_config(common, t, args):
    d = DEEPSEEK_TINY
    q_lora = d["q_lora_rank"] if args.q_lora_rank is None else args.q_lora_rank
    # Field set and order of deepseek-ai/DeepSeek-V3's config.json (no
    # auto_map: no remote code ships with these checkpoints).
    cfg = dict(common,
               architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3",
               attention_bias=False, aux_loss_alpha=0.001, bos_token_id=0, eos_token_id=1,
               ep_size=1, kv_lora_rank=d["kv_lora_rank"],
               max_position_embeddings=d["max_pos"], moe_layer_freq=1,
               n_group=d["n_group"] if args.n_group is None else args.n_group,
               num_key_value_heads=t["heads"], pretraining_tp=1,
               q_lora_rank=q_lora if q_lora else None,
               qk_nope_head_dim=d["qk_nope"], qk_rope_head_dim=d["qk_rope"],
               rms_norm_eps=1e-06,
               rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": d["yarn_factor"],
                             "mscale": d["mscale"] if args.mscale is None else args.mscale,
                             "mscale_all_dim": (d["mscale_all_dim"] if args.mscale_all_dim is None
                                                else args.mscale_all_dim),
                             "original_max_position_embeddings": d["yarn_original_max"],
                             "type": "yarn"},
               rope_theta=d["rope_theta"], scoring_func="sigmoid", seq_aux=True,
               topk_group=d["topk_group"] if args.topk_group is None else args.topk_group,
               topk_method="noaux_tc", transformers_version="4.33.1",
               v_head_dim=d["v_head"])
    if args.rope_interleave in ("true", "false"):
        cfg["rope_interleave"] = args.rope_interleave == "true"
    return cfg


def special_ids(arch, vocab):
    """(config ids, generation_config dict)."""
    if arch == "glm4_moe":
        return arch_glm.special_ids(vocab)
    return {}, {"bos_token_id": 0, "eos_token_id": 1}


# ---------------------------------------------------------------- tensors


def is_moe_layer(cfg, layer):
    # HF DeepseekV3DecoderLayer / Glm4MoeDecoderLayer: MoE when
    # layer_idx >= first_k_dense_replace (an MTP layer is past the last layer).
    return layer >= cfg["first_k_dense_replace"]


def mla_specs(cfg, p):
    """deepseek_v3 attention tensors of one layer (prefix p ends with '.')."""
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    kvr, rope, vd = cfg["kv_lora_rank"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    a = p + "self_attn."
    qr = cfg["q_lora_rank"]
    if qr:
        yield a + "q_a_proj.weight", (qr, H), "proj", H ** -0.5
        yield a + "q_a_layernorm.weight", (qr,), "norm", 0.1
        yield a + "q_b_proj.weight", (nh * qk, qr), "proj", qr ** -0.5
    else:
        yield a + "q_proj.weight", (nh * qk, H), "proj", H ** -0.5
    yield a + "kv_a_proj_with_mqa.weight", (kvr + rope, H), "proj", H ** -0.5
    yield a + "kv_a_layernorm.weight", (kvr,), "norm", 0.1
    yield a + "kv_b_proj.weight", (nh * (cfg["qk_nope_head_dim"] + vd), kvr), "proj", kvr ** -0.5
    yield a + "o_proj.weight", (H, nh * vd), "proj", 0.7 * (nh * vd) ** -0.5
    if cfg["model_type"] in DSA and indexer_runs(cfg, p):
        # Real layout: wq_b and wk F8_E4M3 in the fp8 release, k_norm F32,
        # weights_proj BF16 (kind "linear": never fp8).
        ih, idim = cfg["index_n_heads"], cfg["index_head_dim"]
        x = a + "indexer."
        yield x + "wq_b.weight", (ih * idim, qr), "proj", qr ** -0.5
        yield x + "wk.weight", (idim, H), "proj", H ** -0.5
        yield x + "k_norm.weight", (idim,), "norm32", 0.1
        yield x + "k_norm.bias", (idim,), "bias32", 0.1
        yield x + "weights_proj.weight", (ih, H), "linear", H ** -0.5


def indexer_runs(cfg, prefix):
    """Whether the layer of this tensor prefix runs its own indexer (GLM-5's
    "shared" layers reuse the previous selection and carry none here)."""
    L = int(prefix.split(".")[2])
    types = cfg.get("indexer_types")
    return not types or L >= len(types) or types[L] == "full"


# Router weight std (times hidden^-0.5) and e_score_correction_bias std:
# sigmoid scores spread over (0, 1) so that selections differ per token,
# with a bias large enough that ignoring it (or adding it to the weights)
# changes the result.
ROUTER_STD = 2.0
BIAS_STD = 0.15


def layer_specs(cfg, L):
    """(name, shape, kind, std, expert-or-None, master-name-or-None) of one
    decoder layer, MTP layers included."""
    H = cfg["hidden_size"]
    V = cfg["vocab_size"]
    p = "model.layers.%d." % L
    mtp = L >= cfg["num_hidden_layers"]
    if mtp:
        # Real DeepSeek-V3 / GLM-4.5 layout: the MTP layer carries copies of
        # the embedding and of lm_head (identical values, as in the release).
        yield p + "embed_tokens.weight", (V, H), "embed", 1.0, None, "model.embed_tokens.weight"
        yield p + "enorm.weight", (H,), "norm", 0.1, None, None
        yield p + "hnorm.weight", (H,), "norm", 0.1, None, None
        # eh_proj is BF16 in the FP8 release: kind "linear" is never quantized.
        yield p + "eh_proj.weight", (H, 2 * H), "linear", (2 * H) ** -0.5, None, None
    yield p + "input_layernorm.weight", (H,), "norm", 0.1, None, None
    attn = arch_glm.attention_specs(cfg, p) if cfg["model_type"] == "glm4_moe" else mla_specs(cfg, p)
    for name, shape, kind, std in attn:
        yield name, shape, kind, std, None, None
    yield p + "post_attention_layernorm.weight", (H,), "norm", 0.1, None, None
    m = p + "mlp."
    if not is_moe_layer(cfg, L):
        F = cfg["intermediate_size"]
        yield m + "gate_proj.weight", (F, H), "proj", H ** -0.5, None, None
        yield m + "up_proj.weight", (F, H), "proj", H ** -0.5, None, None
        yield m + "down_proj.weight", (H, F), "proj", 0.7 * F ** -0.5, None, None
    else:
        E, I = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
        yield m + "gate.weight", (E, H), "router", ROUTER_STD * H ** -0.5, None, None
        yield m + "gate.e_score_correction_bias", (E,), "bias32", BIAS_STD, None, None
        for e in range(E):
            for part in ("gate", "up", "down"):
                shape = (H, I) if part == "down" else (I, H)
                std = 0.5 * I ** -0.5 if part == "down" else H ** -0.5
                yield ("%sexperts.%d.%s_proj.weight" % (m, e, part), shape, "proj", std,
                       (L, e, part), None)
        S = I * cfg["n_shared_experts"]
        yield m + "shared_experts.gate_proj.weight", (S, H), "proj", H ** -0.5, None, None
        yield m + "shared_experts.up_proj.weight", (S, H), "proj", H ** -0.5, None, None
        yield m + "shared_experts.down_proj.weight", (H, S), "proj", 0.7 * S ** -0.5, None, None
    if mtp:
        yield p + "shared_head.norm.weight", (H,), "norm", 0.1, None, None
        yield p + "shared_head.head.weight", (V, H), "lm_head", 1.5 * H ** -0.5, None, "lm_head.weight"


def tensor_specs(cfg):
    H = cfg["hidden_size"]
    V = cfg["vocab_size"]
    yield "model.embed_tokens.weight", (V, H), "embed", 1.0, None, None
    for L in range(cfg["num_hidden_layers"] + cfg["num_nextn_predict_layers"]):
        yield from layer_specs(cfg, L)
    yield "model.norm.weight", (H,), "norm", 0.1, None, None
    yield "lm_head.weight", (V, H), "lm_head", 1.5 * H ** -0.5, None, None


def build_tensors(cfg, seed, layout, weights_dtype, g):
    """Groups of {name: (dtype, storage)} as gen_model.build_tensors returns."""
    groups = []
    experts = {}
    n_experts = cfg["n_routed_experts"]
    for name, shape, kind, std, ex, master in tensor_specs(cfg):
        w = g.master_weight(seed, master or name, shape, kind, std)
        if ex is not None and layout == "fused":
            experts.setdefault((ex[0], ex[2]), []).append(w)
            if ex[2] == "down" and ex[1] == n_experts - 1:
                groups.extend(g.fused_groups(ex[0], experts, weights_dtype))
            continue
        if kind == "norm32":
            w = g.master_weight(seed, master or name, shape, "norm", std)
            groups.append({name: ("F32", np.ascontiguousarray(w, dtype=np.float32))})
        elif kind == "bias32":
            # e_score_correction_bias is F32 in the real checkpoints
            # (transformers keeps it in float32: _keep_in_fp32_modules_strict).
            groups.append({name: ("F32", np.ascontiguousarray(w, dtype=np.float32))})
        else:
            groups.append(g.encode(name, w, kind, weights_dtype))
    return groups


# ---------------------------------------------------------------- main


def main(args, ap, g):
    """gen_model's main for these families; g is the gen_model module."""
    if args.arch not in ARCHS:
        ap.error("--q-lora-rank, --mscale, --mscale-all-dim, --rope-interleave, --mtp-layers, "
                 "--indexer-rope-interleave, --n-group and --topk-group apply to --arch "
                 "deepseek_v3 / deepseek_v32 / glm4_moe / glm_moe_dsa only")
    for opt, bad in (("--shape", getattr(args, "shape", None)),
                     ("--layers", getattr(args, "layers", None) is not None),
                     ("--tokenizer", args.tokenizer),
                     ("--clip-qkv", args.clip_qkv is not None),
                     ("--size small", args.size not in (None, "tiny"))):
        if bad:
            ap.error("%s is not available for --arch %s" % (opt, args.arch))
    if args.arch == "glm4_moe":
        for opt in ("q_lora_rank", "mscale", "mscale_all_dim", "rope_interleave"):
            if getattr(args, opt) is not None:
                ap.error("--%s applies to deepseek_v3 only" % opt.replace("_", "-"))
    if args.arch in DSA:
        if args.rope_interleave is not None:
            ap.error("--rope-interleave: use --indexer-rope-interleave for %s" % args.arch)
        if args.q_lora_rank == 0:
            ap.error("--q-lora-rank 0: the DSA indexer reads the query latent")
        if (args.arch == "glm_moe_dsa" and args.glm_rope != "yarn"
                and (args.mscale is not None or args.mscale_all_dim is not None)):
            ap.error("--mscale / --mscale-all-dim: glm_moe_dsa needs --glm-rope yarn")
    elif args.indexer_rope_interleave is not None:
        ap.error("--indexer-rope-interleave applies to deepseek_v32 / glm_moe_dsa only")
    if args.glm_rope is not None and args.arch != "glm_moe_dsa":
        ap.error("--glm-rope applies to glm_moe_dsa only")
    shards = 1 if args.shards is None else args.shards
    if shards < 1:
        ap.error("--shards must be >= 1")
    if args.q_lora_rank is not None and args.q_lora_rank < 0:
        ap.error("--q-lora-rank must be >= 0")
    if args.mtp_layers is not None and args.mtp_layers < 0:
        ap.error("--mtp-layers must be >= 0")
    vocab = args.vocab_size or TINY["vocab"]
    cfg = build_config(args.arch, args, vocab)
    E, G, K = cfg["n_routed_experts"], cfg["n_group"], cfg["topk_group"]
    if G < 1 or E % G or E // G < 2 or not 1 <= K <= G:
        ap.error("n_group %d / topk_group %d do not fit %d experts (transformers takes the "
                 "top 2 of each group)" % (G, K, E))
    if cfg["num_experts_per_tok"] > K * (E // G):
        ap.error("top-%d does not fit in %d groups of %d experts"
                 % (cfg["num_experts_per_tok"], K, E // G))
    ids, gen = special_ids(args.arch, vocab)
    cfg.update(ids)
    for k, v in list(ids.items()) + list(gen.items()):
        for x in (v if isinstance(v, list) else [v]):
            if x is not None and not 0 <= x < vocab:
                ap.error("%s %d is outside the vocabulary of %d" % (k, x, vocab))
    if args.weights_dtype == "fp8":
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                      "quant_method": "fp8", "weight_block_size": [128, 128]}
    hf_dir.clear_weights(args.out)
    hf_dir.write_json(os.path.join(args.out, "config.json"), cfg)
    gen = dict(gen, transformers_version=cfg["transformers_version"])
    hf_dir.write_json(os.path.join(args.out, "generation_config.json"), gen)
    groups = build_tensors(cfg, args.seed, args.experts_layout, args.weights_dtype, g)
    g.write_checkpoint(args.out, groups, shards)
    return 0
