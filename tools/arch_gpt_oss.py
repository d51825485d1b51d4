"""gen_model.py's gpt-oss family: a tiny random checkpoint in the layouts
openai/gpt-oss-20b is released in (MXFP4 experts: mlp.experts.
{gate_up,down}_proj_blocks U8 [E, out, in/32, 16] with _scales U8
[E, out, in/32], two e2m1 codes a byte, the even element in the low nibble,
scale 2^(code - 127); everything else BF16), or the BF16 dequantized one
(mlp.experts.gate_up_proj [E, H, 2I], down_proj [E, I, H], as the community
BF16 conversions store it and transformers holds it).

    gen_model.py --arch gpt_oss --out DIR [--seed N] [--experts-dtype {mxfp4,bf16}] [--shards N]
    gen_model.py --shape gpt-oss-120b --out DIR [--seed N] [--shards N] [--layers N]

(--shape: openai/gpt-oss-120b's dimensions in the MXFP4 layout, streamed,
for benchmarks; see "real shape" below.)

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
    return getattr(args, "arch", None) in ARCHS or getattr(args, "shape", None) in SHAPES


def add_arguments(ap):
    ap.add_argument("--experts-dtype", choices=("mxfp4", "bf16"), default=None,
                    help="gpt_oss: MXFP4 *_blocks/*_scales as released (default), or the BF16 dequantized layout")


def build_config(vocab, experts_dtype, t=TINY, eos=2, pad=1):
    """config.json for dims t (TINY or a SHAPES entry, layers already cut)."""
    cfg = {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": eos,
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
        "pad_token_id": pad,
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


# ---------------------------------------------------------------- real shape
#
# --shape gpt-oss-120b writes openai/gpt-oss-120b's dimensions and config.json
# in the released MXFP4 layout above, streamed tensor by tensor through
# gen_model's write_shape_checkpoint (headers first, bounded memory), for
# benchmarks: 1.70 GB of experts per layer, 2.3 GB of embed_tokens + lm_head
# (65.2 GB in all, as released).
#
# The dense tensors come from gen_model's ShapeWeights writers (table-drawn
# normals, the shared embedding direction, q/k/v rows orthogonal to it,
# lm_head orthogonal to it); norms are the "norm" masters ShapeWeights aims
# by.  The experts are random bytes through lookup tables, so a layer costs
# about as much as writing it:
#
# - blocks: each byte is two e2m1 codes, each nibble of a random byte
#   mapped to the code nearest BLOCK_CODE_STD times one of 16 equiprobable
#   N(0, 1) quantiles (values 0 .. +-6, rms 2.93);
# - scales: 2^(base - 127) times 2^-1, 1, 1, 2 by the top two bits of a
#   random byte (rms factor 1.25): base 121 for gate_up (weights of rms
#   0.057, pre-activations of std ~3 on a normed input, so the clamp at 7
#   bites as in the tiny fixture) and 116 for down (an expert adds ~0.6 rms
#   to the residual stream);
# - routing is skewed and token-dependent: router row e is
#   ROUTER_SCALE * m_e * r_e with r_e a random unit vector orthogonal to the
#   shared direction and m_e = exp(NORM_SIGMA N(0, 1)), and router.bias is
#   ROUTER_SCALE * b_e with b_e = -ROUTER_ZIPF * log(rank_e), centred, for a
#   random ranking.  Measured on layer 0 of the generated model (256 random
#   tokens, attention skipped): router logits of std 2.2 per token, the
#   hottest expert in the top 4 of 18% of the tokens, the median one of 1.6%
#   (uniform: 3.1%), the hottest quarter of the experts 69% of the picks;
#   gate_up pre-activations of std 3.1, 1.3% of the gates above 7; expert
#   outputs of rms 0.66.

SHAPES = {
    # openai/gpt-oss-120b: 116.8 B parameters (65.2 GB), 5.1 B active; 15 safetensors files.
    "gpt-oss-120b": dict(hidden=2880, layers=36, heads=64, kv_heads=8, head_dim=64, experts=128,
                         experts_ffn=2880, top_k=4, vocab=201088, sliding_window=128, shards=15,
                         eos=200002, pad=199999, bos=199998, gen_eos=[200002, 199999, 200012]),
}

BLOCK_CODE_STD = 3.0
SCALE_BASE = {"gate_up_proj": 121, "down_proj": 116}
ROUTER_ZIPF = 0.2
EXPERT_CHUNK_BYTES = 64 << 20


def block_lut(g):
    """256 bytes: random byte -> two e2m1 codes (low nibble, high nibble)."""
    q = g.normal_quantiles(16)
    nib = st.f32_to_e2m1(q * BLOCK_CODE_STD)
    b = np.arange(256)
    return (nib[b & 15] | (nib[b >> 4] << 4)).astype(np.uint8)


def scale_lut(base):
    """256 bytes: random byte -> scale code base - 1, base, base, base + 1."""
    return (base + np.array([-1, 0, 0, 1])[np.arange(256) >> 6]).astype(np.uint8)


def random_bytes_writer(seed, name, n_bytes, lut):
    """Writes n_bytes of lut[random byte], two bytes per 16 random bits (a
    65536-entry table: about 2.5 s of CPU a GB)."""
    lut16 = (lut[np.arange(65536) & 255].astype(np.uint16)
             | (lut[np.arange(65536) >> 8].astype(np.uint16) << 8)).astype("<u2")

    def write(f):
        bits = rng_for(seed, name).bit_generator
        left = n_bytes
        while left:
            n = min(left, EXPERT_CHUNK_BYTES)
            raw = bits.random_raw(-(-n // 8)).astype("<u8", copy=False).view("<u2")
            f.write(lut16[raw].view(np.uint8)[:n].data)
            left -= n
    return write


def router_rows(g, sw, seed, name, E):
    """(weight [E, H], bias [E]) float32 of one router (see above)."""
    layer = int(name.split(".")[2])
    u = sw.shared_dir("model.layers.%d.post_attention_layernorm.weight" % layer)
    rng = rng_for(seed, name)
    r = rng.standard_normal((E, sw.H))
    r -= np.outer(r @ u, u)
    r /= np.linalg.norm(r, axis=1, keepdims=True)
    m = np.exp(g.NORM_SIGMA * rng.standard_normal(E))
    b = -ROUTER_ZIPF * np.log(rng.permutation(E) + 1.0)
    b -= b.mean()
    return ((g.ROUTER_SCALE * m)[:, None] * r).astype(np.float32), (g.ROUTER_SCALE * b).astype(np.float32)


def shape_plan(g, cfg, seed):
    """(name, dtype, shape, write) groups of the --shape checkpoint, in
    checkpoint order; a tensor's blocks and scales share a group."""
    sw = g.ShapeWeights(cfg, seed, "bf16")
    H, nh, nkv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    E, F, V = cfg["num_local_experts"], cfg["intermediate_size"], cfg["vocab_size"]
    blut = block_lut(g)

    def arr(name, w):
        return [(name, "BF16", w.shape, sw.array_writer(st.f32_to_bf16(np.asarray(w, dtype=np.float32))))]

    def norm(name):
        return arr(name, g.master_weight(seed, name, (H,), "norm", 0.1))

    def vec(name, shape, std, mean=0.0):
        return arr(name, mean + std * rng_for(seed, name).standard_normal(shape))

    groups = [[("model.embed_tokens.weight", "BF16", (V, H), sw.embed_writer("model.embed_tokens.weight", (V, H)))]]
    for L in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % L
        groups.append(norm(p + "input_layernorm.weight"))
        for proj, rows in (("q_proj", nh * hd), ("k_proj", nkv * hd), ("v_proj", nkv * hd)):
            name = p + "self_attn.%s.weight" % proj
            groups.append([(name, "BF16", (rows, H), sw.qkv_writer(name, (rows, H), H ** -0.5, None))])
            groups.append(vec(p + "self_attn.%s.bias" % proj, (rows,), 0.2))
        name = p + "self_attn.o_proj.weight"
        groups.append([(name, "BF16", (H, nh * hd), sw.proj_bf16_writer(name, (H, nh * hd), 0.7 * (nh * hd) ** -0.5))])
        groups.append(vec(p + "self_attn.o_proj.bias", (H,), 0.2))
        groups.append(vec(p + "self_attn.sinks", (nh,), 1.5, mean=0.5))
        groups.append(norm(p + "post_attention_layernorm.weight"))
        m = p + "mlp."
        w, b = router_rows(g, sw, seed, m + "router.weight", E)
        groups.append(arr(m + "router.weight", w))
        groups.append(arr(m + "router.bias", b))
        for proj, out_dim, in_dim in (("gate_up_proj", 2 * F, H), ("down_proj", H, F)):
            name = m + "experts." + proj
            nb = in_dim // 32
            groups.append([(name + "_blocks", "U8", (E, out_dim, nb, 16),
                            random_bytes_writer(seed, name + "_blocks", E * out_dim * nb * 16, blut)),
                           (name + "_scales", "U8", (E, out_dim, nb),
                            random_bytes_writer(seed, name + "_scales", E * out_dim * nb,
                                                scale_lut(SCALE_BASE[proj])))])
            groups.append(vec(name + "_bias", (E, out_dim), 0.5 if proj == "gate_up_proj" else 0.1))
    groups.append(norm("model.norm.weight"))
    groups.append([("lm_head.weight", "BF16", (V, H), sw.lm_head_writer("lm_head.weight", (V, H), 1.5 * H ** -0.5))])
    return groups


def shape_main(args, ap, g):
    """gen_model --shape gpt-oss-120b."""
    import shutil
    import sys
    import time
    d, shards = hf_dir.shape_dims(args, ap, SHAPES, (("--experts-layout fused", args.experts_layout == "fused"),
                                                    ("--experts-dtype bf16", args.experts_dtype == "bf16")))
    cfg = build_config(d["vocab"], "mxfp4", d, eos=d["eos"], pad=d["pad"])
    groups = shape_plan(g, cfg, args.seed)
    need = sum(st.DTYPES[t[1]][1] * int(np.prod(t[2])) for grp in groups for t in grp)
    hf_dir.clear_weights(args.out)
    free = shutil.disk_usage(args.out).free
    if need + (1 << 30) > free:
        raise SystemExit("gen_model: %s needs %.1f GB but %s has %.1f GB free (keeping 1 GiB)"
                         % (args.shape, need / 1e9, args.out, free / 1e9))
    hf_dir.write_json(os.path.join(args.out, "config.json"), cfg)
    hf_dir.write_json(os.path.join(args.out, "generation_config.json"),
                      {"bos_token_id": d["bos"], "do_sample": True, "eos_token_id": d["gen_eos"],
                       "pad_token_id": d["pad"], "transformers_version": cfg["transformers_version"]})
    label = args.shape + (" (%d layers)" % args.layers if args.layers else "")
    # Parameters as released count two per MXFP4 byte and none for the scales.
    n_params = sum(int(np.prod(t[2])) * (2 if t[0].endswith("_blocks") else 1)
                   for grp in groups for t in grp if not t[0].endswith("_scales"))
    sys.stderr.write("gen_model: %s, %.2f B parameters, mxfp4 experts, %.2f GB in %d shard(s) -> %s\n"
                     % (label, n_params / 1e9, need / 1e9, shards, args.out))
    t0 = time.monotonic()
    g.write_shape_checkpoint(args.out, groups, shards, label)
    sys.stderr.write("gen_model: %s written in %.0f s\n" % (label, time.monotonic() - t0))
    return 0


def main(args, ap, g):
    """gen_model's main for gpt-oss; g is the gen_model module."""
    if args.shape in SHAPES:
        return shape_main(args, ap, g)
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
