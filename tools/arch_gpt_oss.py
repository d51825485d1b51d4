"""gen_model.py's gpt-oss family: a tiny random checkpoint in the layouts
openai/gpt-oss-20b is released in (MXFP4 experts: mlp.experts.
{gate_up,down}_proj_blocks U8 [E, out, in/32, 16] with _scales U8
[E, out, in/32], two e2m1 codes a byte, the even element in the low nibble,
scale 2^(code - 127); everything else BF16), or the BF16 dequantized one
(mlp.experts.gate_up_proj [E, H, 2I], down_proj [E, I, H], as the community
BF16 conversions store it and transformers holds it).

    gen_model.py --arch gpt_oss --out DIR [--seed N] [--experts-dtype {mxfp4,bf16}] [--shards N]

The expert weights are drawn first as MXFP4 codes and scales (a normal
master weight, scaled per 32-input block by x0.55 .. x1.8, quantized), and
the BF16 layout holds exactly those values dequantized, so the two variants
of one seed are the same model.  gate_up_proj interleaves gate and up on its
last dim (column 2j is gate j, 2j + 1 is up j).

Magnitudes: gate/up pre-activations have std ~3 so that the clamped SwiGLU
(gate <= 7, |up| <= 7) clips a few percent of them; router logits std ~2.5
plus a bias; sinks around 0.5 +- 1.5, comparable to the attention scores;
head_dim 64 with hidden 128 (not hidden / heads); sliding_window 8 so the
sliding layers (0 and 2) drop keys within 24 tokens.
"""

import os
import zlib

import numpy as np

import hf_dir
import safetensors_np as st

ARCHS = ("gpt_oss",)

TINY = dict(hidden=128, heads=4, kv_heads=2, head_dim=64, experts=8, experts_ffn=96,
            layers=4, top_k=4, vocab=512, sliding_window=8)

# As released (openai/gpt-oss-20b config.json): the modules kept in BF16.
MODULES_NOT_CONVERTED = ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                         "model.embed_tokens", "lm_head"]


def used(args):
    return getattr(args, "arch", None) in ARCHS


def add_arguments(ap):
    ap.add_argument("--experts-dtype", choices=("mxfp4", "bf16"), default=None,
                    help="gpt_oss: MXFP4 *_blocks/*_scales as released (default), or the BF16 dequantized layout")


def build_config(vocab, experts_dtype):
    t = TINY
    cfg = {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": 2,
        "experts_per_token": t["top_k"],
        "head_dim": t["head_dim"],
        "hidden_act": "silu",
        "hidden_size": t["hidden"],
        "initial_context_length": 4096,
        "initializer_range": 0.02,
        "intermediate_size": t["experts_ffn"],
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(t["layers"])],
        "max_position_embeddings": 131072,
        "model_type": "gpt_oss",
        "num_attention_heads": t["heads"],
        "num_experts_per_tok": t["top_k"],
        "num_hidden_layers": t["layers"],
        "num_key_value_heads": t["kv_heads"],
        "num_local_experts": t["experts"],
        "output_router_logits": False,
        "pad_token_id": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": False},
        "rope_theta": 150000,
        "router_aux_loss_coef": 0.9,
        "sliding_window": t["sliding_window"],
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "transformers_version": "4.55.0.dev0",
        "use_cache": True,
        "vocab_size": vocab,
    }
    if experts_dtype == "mxfp4":
        cfg["quantization_config"] = {"modules_to_not_convert": MODULES_NOT_CONVERTED, "quant_method": "mxfp4"}
    return cfg


def rng_for(seed, name):
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def expert_codes(seed, name, shape, std):
    """MXFP4 codes of one expert tensor [E, out, in]: (blocks U8 [E, out, in/32, 16],
    scales U8 [E, out, in/32]) from a normal master weight whose 32-input
    blocks are scaled by exp(U(-0.6, 0.6)), so the scales vary."""
    rng = rng_for(seed, name)
    w = std * rng.standard_normal(shape)
    w *= np.repeat(np.exp(rng.uniform(-0.6, 0.6, shape[:-1] + (shape[-1] // 32,))), 32, axis=-1)
    packed, scales = st.fp4_quantize(w.astype(np.float32))
    return packed.view(np.uint8).reshape(shape[:-1] + (shape[-1] // 32, 16)), scales


def expert_values(blocks, scales):
    """The dequantized [E, out, in] float32 values of expert_codes' output."""
    E, out, g, _ = blocks.shape
    return st.fp4_dequantize(blocks.reshape(E, out, g * 16), scales)


def bias(seed, name, shape, std, mean=0.0):
    return {name: ("BF16", st.f32_to_bf16((mean + std * rng_for(seed, name).standard_normal(shape))
                                          .astype(np.float32)))}


def build_groups(cfg, seed, experts_dtype, g):
    """Groups of {name: (dtype, storage)} in checkpoint order (a tensor with
    its scales in one group); g is the gen_model module."""
    H, nh, nkv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    E, F, V = cfg["num_local_experts"], cfg["intermediate_size"], cfg["vocab_size"]

    def weight(name, shape, kind, std):
        return g.encode(name, g.master_weight(seed, name, shape, kind, std), kind, "bf16")

    groups = [weight("model.embed_tokens.weight", (V, H), "embed", 1.0)]
    for L in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % L
        groups.append(weight(p + "input_layernorm.weight", (H,), "norm", 0.1))
        for proj, rows, cols, std in (("q_proj", nh * hd, H, H ** -0.5), ("k_proj", nkv * hd, H, H ** -0.5),
                                      ("v_proj", nkv * hd, H, H ** -0.5),
                                      ("o_proj", H, nh * hd, 0.7 * (nh * hd) ** -0.5)):
            groups.append(weight(p + "self_attn.%s.weight" % proj, (rows, cols), "proj", std))
            groups.append(bias(seed, p + "self_attn.%s.bias" % proj, (rows,), 0.2))
        groups.append(bias(seed, p + "self_attn.sinks", (nh,), 1.5, mean=0.5))
        groups.append(weight(p + "post_attention_layernorm.weight", (H,), "norm", 0.1))
        m = p + "mlp."
        # Router logits std ~2.5 plus a bias of std 0.5: top-4 of 8 decisive
        # and varying per token, the bias moving some choices.
        groups.append(weight(m + "router.weight", (E, H), "router", 2.5 * H ** -0.5))
        groups.append(bias(seed, m + "router.bias", (E,), 0.5))
        # gate/up pre-activations std ~3 (inputs are RMS-normed): the clamp
        # at 7 clips a few percent; down scaled so an expert adds ~0.5 rms.
        for proj, out_dim, in_dim, std in (("gate_up_proj", 2 * F, H, 3.0 * H ** -0.5),
                                           ("down_proj", H, F, 0.1 * F ** -0.5)):
            name = m + "experts." + proj
            blocks, scales = expert_codes(seed, name, (E, out_dim, in_dim), std)
            if experts_dtype == "mxfp4":
                groups.append({name + "_blocks": ("U8", blocks), name + "_scales": ("U8", scales)})
            else:
                # transformers' layout: [E, in, out] (gate_up [E, H, 2I], down [E, I, H]).
                w = np.ascontiguousarray(expert_values(blocks, scales).transpose(0, 2, 1))
                groups.append({name: ("BF16", st.f32_to_bf16(w))})
            groups.append(bias(seed, name + "_bias", (E, out_dim), 0.5 if proj == "gate_up_proj" else 0.1))
    groups.append(weight("model.norm.weight", (H,), "norm", 0.1))
    groups.append(weight("lm_head.weight", (V, H), "lm_head", 1.5 * H ** -0.5))
    return groups


def main(args, ap, g):
    """gen_model's main for gpt-oss; g is the gen_model module."""
    shards = hf_dir.tiny_only(args, ap, args.arch, (("--weights-dtype fp8", args.weights_dtype == "fp8"),))
    experts_dtype = args.experts_dtype or "mxfp4"
    cfg = build_config(args.vocab_size or TINY["vocab"], experts_dtype)
    hf_dir.clear_weights(args.out)
    hf_dir.write_json(os.path.join(args.out, "config.json"), cfg)
    hf_dir.write_json(os.path.join(args.out, "generation_config.json"),
                      {"bos_token_id": 0, "eos_token_id": [2, 3], "pad_token_id": 1,
                       "transformers_version": cfg["transformers_version"]})
    g.write_checkpoint(args.out, build_groups(cfg, args.seed, experts_dtype, g), shards)
    return 0
