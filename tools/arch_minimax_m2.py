"""gen_model.py's MiniMax-M2 family: a tiny random checkpoint in the layout
MiniMaxAI/MiniMax-M2 is released in (Mixtral's names: block_sparse_moe.gate,
block_sparse_moe.experts.E.w1/w3/w2, block_sparse_moe.e_score_correction_bias
in float32; q_norm / k_norm over the whole projected q / k; bf16, or FP8
e4m3 with 128x128 weight_scale_inv blocks as released).

    gen_model.py --arch minimax_m2 --out DIR [--seed N] [--weights-dtype {bf16,fp8}] [--shards N]

head_dim (24) is not hidden / heads (32); the config names the partial
rotary both ways the released and the transformers-v5 configs do
(rotary_dim 12 and partial_rotary_factor 0.5), so that transformers v5.15.0,
which reads only partial_rotary_factor, rotates the same 12 dims.
"""

import os

import numpy as np

import hf_dir

ARCHS = ("minimax_m2",)

TINY = dict(hidden=128, heads=4, kv_heads=2, head_dim=24, rotary_dim=12, experts=8, experts_ffn=64,
            layers=2, top_k=2, vocab=512)


def used(args):
    return getattr(args, "arch", None) in ARCHS


def build_config(vocab):
    t = TINY
    return {
        "architectures": ["MiniMaxM2ForCausalLM"],
        "model_type": "minimax_m2",
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": t["head_dim"],
        "hidden_act": "silu",
        "hidden_size": t["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": t["experts_ffn"],
        "max_position_embeddings": 196608,
        "num_attention_heads": t["heads"],
        "num_experts_per_tok": t["top_k"],
        "num_hidden_layers": t["layers"],
        "num_key_value_heads": t["kv_heads"],
        "num_local_experts": t["experts"],
        "output_router_logits": False,
        "partial_rotary_factor": t["rotary_dim"] / t["head_dim"],
        "qk_norm_type": "per_layer",
        "rms_norm_eps": 1e-06,
        "rope_theta": 5000000,
        "rotary_dim": t["rotary_dim"],
        "router_aux_loss_coef": 0.001,
        "router_jitter_noise": 0.0,
        "scoring_func": "sigmoid",
        "shared_intermediate_size": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.1",
        "use_cache": True,
        "use_qk_norm": True,
        "use_routing_bias": True,
        "vocab_size": vocab,
    }


def tensor_specs(cfg):
    """(name, shape, kind, std) in checkpoint order; kind "bias32" is a
    float32 vector (the release keeps e_score_correction_bias in F32)."""
    H, nh, nkv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    E, F = cfg["num_local_experts"], cfg["intermediate_size"]
    yield "model.embed_tokens.weight", (cfg["vocab_size"], H), "embed", 1.0
    for L in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % L
        yield p + "input_layernorm.weight", (H,), "norm", 0.1
        yield p + "self_attn.q_proj.weight", (nh * hd, H), "proj", H ** -0.5
        yield p + "self_attn.k_proj.weight", (nkv * hd, H), "proj", H ** -0.5
        yield p + "self_attn.v_proj.weight", (nkv * hd, H), "proj", H ** -0.5
        yield p + "self_attn.o_proj.weight", (H, nh * hd), "proj", 0.7 * (nh * hd) ** -0.5
        yield p + "self_attn.q_norm.weight", (nh * hd,), "norm", 0.1
        yield p + "self_attn.k_norm.weight", (nkv * hd,), "norm", 0.1
        yield p + "post_attention_layernorm.weight", (H,), "norm", 0.1
        m = p + "block_sparse_moe."
        # Sigmoid scores of logits with std ~2.5: decisive and varying per
        # token; the bias (std 0.15) moves some choices, so a bias applied to
        # the weights, or not to the choice, changes the output.
        yield m + "gate.weight", (E, H), "router", 2.5 * H ** -0.5
        yield m + "e_score_correction_bias", (E,), "bias32", 0.15
        for e in range(E):
            for hf, part in (("w1", "gate"), ("w3", "up"), ("w2", "down")):
                shape = (H, F) if part == "down" else (F, H)
                std = 0.7 * F ** -0.5 if part == "down" else H ** -0.5
                yield "%sexperts.%d.%s.weight" % (m, e, hf), shape, "proj", std
    yield "model.norm.weight", (H,), "norm", 0.1
    yield "lm_head.weight", (cfg["vocab_size"], H), "lm_head", 1.5 * H ** -0.5


def main(args, ap, g):
    """gen_model's main for MiniMax-M2; g is the gen_model module."""
    shards = hf_dir.tiny_only(args, ap, args.arch)
    cfg = build_config(args.vocab_size or TINY["vocab"])
    if args.weights_dtype == "fp8":
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "float8_e4m3fn",
                                      "quant_method": "fp8", "weight_block_size": [128, 128]}
    hf_dir.clear_weights(args.out)
    hf_dir.write_json(os.path.join(args.out, "config.json"), cfg)
    hf_dir.write_json(os.path.join(args.out, "generation_config.json"),
                      {"bos_token_id": 1, "eos_token_id": 2, "transformers_version": cfg["transformers_version"]})
    groups = []
    for name, shape, kind, std in tensor_specs(cfg):
        if kind == "bias32":
            rng = np.random.default_rng([args.seed, g.zlib.crc32(name.encode())])
            groups.append({name: ("F32", (std * rng.standard_normal(shape)).astype("<f4"))})
            continue
        w = g.master_weight(args.seed, name, shape, kind, std)
        groups.append(g.encode(name, w, kind, args.weights_dtype))
    g.write_checkpoint(args.out, groups, shards)
    return 0
