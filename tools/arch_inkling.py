"""gen_model.py's Inkling family: a tiny random checkpoint in the layout
thinkingmachines/Inkling is released in (model_type "inkling_mm_model",
InklingForConditionalGeneration; the text model under model.llm.*, gate and
up rows interleaved in every w13 tensor, the short convolutions [C, 1, K]
in float32, a padded unembed cut to unpadded_vocab_size, and a few
model.visual.*, model.audio.* and model.mtp.* tensors that a text-only
reader must skip).

    gen_model.py --arch inkling --out DIR [--seed N] [--weights-dtype {bf16,f32}] [--shards N]

Shapes (config.json's text_config): hidden 128, 4 layers, layer_types
hybrid_sliding / hybrid / hybrid_sliding / hybrid (given explicitly),
dense_mlp_idx 1 (mlp_layer_types absent, so layer 0 dense and 1-3 sparse),
dense_intermediate_size 128; global layers 4 heads / 2 kv heads of 32,
sliding layers 8 / 4 of 16 (a different width, so the two kinds cannot be
swapped unnoticed); d_rel 4, rel_extent 7, sliding_window_size 5 (the
sliding layers' relative extent too), log_scaling_n_floor 4 with alpha 0.3;
sconv_kernel_size 4; 8 routed experts, top 2, 2 shared, width 64,
route_scale 2.5; logits_mup_width_multiplier 4; vocab_size 520 with
unpadded_vocab_size 512.

Magnitudes, chosen so that each piece visibly moves the logits: norms
1 + 0.2 noise, but q_norm / k_norm 2.5 x (1 + 0.2 noise) (the scores are
q.k / head_dim of RMS-normed vectors, std ~1/sqrt(head_dim) with unit
weights, which would leave attention nearly uniform); r_proj 1/sqrt(H) and
rel_logits_proj std 0.5, so the bias r @ proj is O(1); every short
convolution's taps std 0.3 (the conv adds ~0.6 of its input); router
2.5/sqrt(H) (sigmoid scores spread ~0.3) with gate.bias std 0.2, enough to
change choices; global_scale values uniform in [0.7, 1.4]; unembed
6/sqrt(H), so that after the division by 4 the logits have std ~1.5.
"""

import os
import zlib

import numpy as np

import hf_dir
import safetensors_np as st

ARCHS = ("inkling",)

TINY = dict(hidden=128, layers=4, heads=4, kv_heads=2, head_dim=32, swa_heads=8, swa_kv_heads=4,
            swa_head_dim=16, d_rel=4, rel_extent=7, window=5, kernel=4, experts=8, top_k=2, shared=2,
            moe_ffn=64, dense_ffn=128, vocab=520, unpadded=512)


def used(args):
    return getattr(args, "arch", None) in ARCHS


def build_config():
    t = TINY
    text = {
        "model_type": "inkling_text",
        "vocab_size": t["vocab"],
        "unpadded_vocab_size": t["unpadded"],
        "hidden_size": t["hidden"],
        "num_hidden_layers": t["layers"],
        "num_attention_heads": t["heads"],
        "num_key_value_heads": t["kv_heads"],
        "head_dim": t["head_dim"],
        "swa_num_attention_heads": t["swa_heads"],
        "swa_num_key_value_heads": t["swa_kv_heads"],
        "swa_head_dim": t["swa_head_dim"],
        "sliding_window_size": t["window"],
        "d_rel": t["d_rel"],
        "rel_extent": t["rel_extent"],
        "log_scaling_n_floor": 4,
        "log_scaling_alpha": 0.3,
        "layer_types": ["hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid"],
        # the released spellings: sconv_kernel_size and model_max_length are
        # InklingTextConfig attribute_map aliases; dense_mlp_idx and
        # dense_intermediate_size are kwargs its __post_init__ reads.
        "sconv_kernel_size": t["kernel"],
        "model_max_length": 4096,
        "dense_mlp_idx": 1,
        "dense_intermediate_size": t["dense_ffn"],
        "hidden_act": "silu",
        "moe_intermediate_size": t["moe_ffn"],
        "n_routed_experts": t["experts"],
        "num_experts_per_tok": t["top_k"],
        "n_shared_experts": t["shared"],
        "route_scale": 2.5,
        "logits_mup_width_multiplier": 4.0,
        "rms_norm_eps": 1e-06,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    return {
        "architectures": ["InklingForConditionalGeneration"],
        "model_type": "inkling_mm_model",
        "text_config": text,
        "vision_config": {"model_type": "inkling_vision", "hidden_size": 64, "n_layers": 4,
                          "num_attention_heads": 2, "patch_size": 4, "temporal_patch_size": 2,
                          "num_channels": 3, "rms_norm_eps": 1e-06},
        "audio_config": {"model_type": "inkling_audio", "n_mel_bins": 4, "mel_vocab_size": 8,
                         "rms_norm_eps": 1e-06},
        "mtp_config": {"num_nextn_predict_layers": 1, "chain_hidden_post_norm": False},
        # inside the unpadded vocabulary, unused by the text path
        "image_token_id": 508,
        "audio_token_id": 509,
        "image_bos_token_id": 510,
        "audio_bos_token_id": 511,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "5.15.0",
    }


def layer_dims(text, layer):
    """(heads, kv heads, head_dim, relative extent) of one layer."""
    if text["layer_types"][layer] == "hybrid_sliding":
        return (text["swa_num_attention_heads"], text["swa_num_key_value_heads"], text["swa_head_dim"],
                text["sliding_window_size"])
    return text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"], text["rel_extent"]


def tensor_specs(cfg):
    """(name, shape, kind, std) in checkpoint order.  kinds: embed, norm,
    proj, router, lm_head (gen_model.master_weight's), and here: qknorm
    (2.5 x a norm), conv (float32 [C, 1, K]), scale ([1] in [0.7, 1.4]),
    bias (router bias), rel (the relative-logit bank), tower (the other
    towers' and the MTP layer's tensors, never read by the text path)."""
    t = cfg["text_config"]
    H, K, V = t["hidden_size"], t["sconv_kernel_size"], t["vocab_size"]
    E, S, I = t["n_routed_experts"], t["n_shared_experts"], t["moe_intermediate_size"]
    Id, d_rel = t["dense_intermediate_size"], t["d_rel"]
    yield "model.llm.embed.weight", (V, H), "embed", 1.0
    yield "model.llm.embed_norm.weight", (H,), "norm", 0.2
    for L in range(t["num_hidden_layers"]):
        p = "model.llm.layers.%d." % L
        nh, nkv, hd, extent = layer_dims(t, L)
        yield p + "attn_norm.weight", (H,), "norm", 0.2
        yield p + "attn.wq_du.weight", (nh * hd, H), "proj", H ** -0.5
        yield p + "attn.wk_dv.weight", (nkv * hd, H), "proj", H ** -0.5
        yield p + "attn.wv_dv.weight", (nkv * hd, H), "proj", H ** -0.5
        yield p + "attn.wr_du.weight", (nh * d_rel, H), "proj", H ** -0.5
        yield p + "attn.wo_ud.weight", (H, nh * hd), "proj", 0.7 * (nh * hd) ** -0.5
        yield p + "attn.q_norm.weight", (hd,), "qknorm", 0.2
        yield p + "attn.k_norm.weight", (hd,), "qknorm", 0.2
        yield p + "attn.k_sconv.weight", (nkv * hd, 1, K), "conv", 0.3
        yield p + "attn.v_sconv.weight", (nkv * hd, 1, K), "conv", 0.3
        yield p + "attn.rel_logits_proj.proj", (d_rel, extent), "rel", 0.5
        yield p + "attn_sconv.weight", (H, 1, K), "conv", 0.3
        yield p + "mlp_norm.weight", (H,), "norm", 0.2
        if L < t["dense_mlp_idx"]:
            yield p + "mlp.w13_dn.weight", (2 * Id, H), "proj", H ** -0.5
            yield p + "mlp.w2_md.weight", (H, Id), "proj", 0.7 * Id ** -0.5
            yield p + "mlp.global_scale", (1,), "scale", 0.0
        else:
            yield p + "mlp.gate.weight", (E + S, H), "router", 2.5 * H ** -0.5
            yield p + "mlp.gate.bias", (E,), "bias", 0.2
            yield p + "mlp.gate.global_scale", (1,), "scale", 0.0
            yield p + "mlp.experts.w13_weight", (E, 2 * I, H), "proj", H ** -0.5
            yield p + "mlp.experts.w2_weight", (E, H, I), "proj", 0.7 * I ** -0.5
            yield p + "mlp.shared_experts.shared_w13_weight", (S, 2 * I, H), "proj", H ** -0.5
            yield p + "mlp.shared_experts.shared_w2_weight", (S, H, I), "proj", 0.7 * I ** -0.5
        yield p + "mlp_sconv.weight", (H, 1, K), "conv", 0.3
    yield "model.llm.norm.weight", (H,), "norm", 0.2
    yield "model.llm.unembed.weight", (V, H), "lm_head", 6.0 * H ** -0.5
    # The other towers (shapes plausible, contents never read by the text
    # path) and one MTP layer: a converter must skip them, not choke.
    vc, ac = cfg["vision_config"], cfg["audio_config"]
    patch = vc["num_channels"] * vc["temporal_patch_size"] * vc["patch_size"] ** 2
    yield "model.visual.layers.linear_0.weight", (vc["hidden_size"], patch), "tower", 0.1
    yield "model.visual.layers.norm_0.weight", (vc["hidden_size"],), "tower", 0.1
    yield "model.visual.final_norm.weight", (H,), "tower", 0.1
    yield "model.audio.encoder.weight", (ac["n_mel_bins"] * ac["mel_vocab_size"], H), "tower", 0.1
    yield "model.audio.final_norm.weight", (H,), "tower", 0.1
    yield "model.mtp.layers.0.attn_norm.weight", (H,), "tower", 0.1
    yield "model.mtp.layers.0.mlp.w13_dn.weight", (2 * Id, H), "tower", 0.1
    yield "model.mtp.layers.0.mlp.w2_md.weight", (H, Id), "tower", 0.1


def master(seed, name, shape, kind, std, g):
    """The float32 value of one tensor, from its own generator."""
    if kind in ("embed", "norm", "proj", "router", "lm_head"):
        if kind == "proj" and len(shape) == 3:
            # gen_model's 128x128 block factors per expert slice
            return np.stack([g.master_weight(seed, "%s.%d" % (name, e), shape[1:], kind, std)
                             for e in range(shape[0])])
        return g.master_weight(seed, name, shape, kind, std)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if kind == "qknorm":
        return (2.5 * (1.0 + std * rng.standard_normal(shape))).astype(np.float32)
    if kind == "scale":
        return rng.uniform(0.7, 1.4, shape).astype(np.float32)
    return (std * rng.standard_normal(shape)).astype(np.float32)


def main(args, ap, g):
    """gen_model's main for Inkling; g is the gen_model module."""
    shards = hf_dir.tiny_only(args, ap, args.arch, (
        ("--experts-dtype", getattr(args, "experts_dtype", None) is not None),
        ("--vision-tower", getattr(args, "vision_tower", False))))
    if args.weights_dtype not in ("bf16", "f32"):
        ap.error("--weights-dtype %s is not available for --arch inkling (bf16 or f32)" % args.weights_dtype)
    if args.vocab_size:
        ap.error("--vocab-size is not available for --arch inkling")
    cfg = build_config()
    if args.weights_dtype == "f32":
        cfg["torch_dtype"] = "float32"
    hf_dir.clear_weights(args.out)
    hf_dir.write_json(os.path.join(args.out, "config.json"), cfg)
    hf_dir.write_json(os.path.join(args.out, "generation_config.json"),
                      {"bos_token_id": 1, "eos_token_id": 2, "transformers_version": cfg["transformers_version"]})
    groups = []
    for name, shape, kind, std in tensor_specs(cfg):
        w = master(args.seed, name, shape, kind, std, g)
        if kind == "conv" or args.weights_dtype == "f32":
            # transformers keeps the short convolutions in float32
            # (_keep_in_fp32_modules_strict); the release stores them so.
            groups.append({name: ("F32", w.astype("<f4"))})
        else:
            groups.append({name: ("BF16", st.f32_to_bf16(w))})
    g.write_checkpoint(args.out, groups, shards)
    return 0
