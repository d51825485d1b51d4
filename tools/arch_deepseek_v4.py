"""Tiny DeepSeek-V4 (deepseek_v4) checkpoints for gen_model.py, in the
released layout.

gen_model.py hands over to main() here for --arch deepseek_v4.  The weights
come from gen_model's per-tensor generators (master_weight, seeded by the
seed and the tensor name), so the same seed gives the same master weights
whatever the weight dtype; they are written by gen_model.write_checkpoint.

The names are those of DeepSeek's release (deepseek-ai/DeepSeek-V4-Flash),
which transformers v5.15.0 renames on load (conversion_mapping.py,
"deepseek_v4"; the FP8 quantizer renames `.scale` to `.weight_scale_inv`):
no `model.` prefix, `embed`, `head`, `norm`, `hc_head_{fn,base,scale}`,
`layers.L.{attn,ffn,attn_norm,ffn_norm,hc_attn_*,hc_ffn_*}`, and a
multi-token-prediction block `mtp.0.*` that transformers does not load.

What every tiny model exercises within 24 tokens (tools/README.md has the
table): a sliding window of 8, compressed sparse attention (CSA, rate 4,
overlapping windows, a Lightning Indexer keeping 2 entries) and heavily
compressed attention (HCA, rate 8), YaRN on the compressed layers, attention
sinks, hyper-connections (hc_mult 4, 20 Sinkhorn iterations), two hash-routed
MoE layers (`ffn.gate.tid2eid`, I64) then two sqrtsoftplus top-k layers with
a selection bias, a shared expert, and a SwiGLU clamp low enough to clip.

Weight dtypes:
- bf16 (default): every matrix BF16; hc_*, attn_sink, ape, gate.bias F32.
- fp8: the release's split.  F8_E4M3 with ue8m0 (F8_E8M0) 128x128 block
  scales under NAME.scale for wq_a, wq_b, wkv, wo_a, wo_b, indexer.wq_b,
  the shared experts and mtp.0.{e_proj,h_proj}; BF16 for embed, head, the
  router, the compressors' wkv / wgate and indexer.weights_proj (transformers'
  _keep_in_fp32_modules lists them as shipped without a scale); routed
  experts in FP4 (--expert-dtype fp4, the default: e2m1 packed two per I8
  byte, low nibble first, [out, in / 2], with an F8_E8M0 scale per 32
  inputs [out, in / 32], config expert_dtype "fp4") or FP8 like the dense
  ones (--expert-dtype fp8).

--v4-shape flash writes DeepSeek-V4-Flash's dimensions instead (the
defaults of transformers' DeepseekV4Config: hidden 4096, 64 heads of 512,
256 routed experts of 2048 + 1 shared, top-6, vocabulary 129280, the
default layer_types schedule and 3 hash layers), cut to --layers N, in the
release's FP8 + FP4 split (--weights-dtype fp8 is implied) and without the
MTP block (convert skips it; it would add a whole layer of experts).  It is
streamed shard by shard (one shard per layer, one for the embedding and
head) through gen_model.write_shape_checkpoint, so memory stays at one
tensor.  The values are random, not a trained model's: FP4 codes uniform
over all 16, FP8 codes of N(0, 1) quantiles, BF16 values of N(0, std), with
power-of-two scales near each tensor's std.  --v4-fill tiled repeats one
16 MiB block of random bytes per dtype from a per-tensor offset instead of
drawing every byte (a 2-layer checkpoint in about a minute instead of
several); the bytes stay deterministic in the seed either way.
"""

import os
import zlib

import numpy as np

import hf_dir
import safetensors_np as st

ARCHS = ("deepseek_v4",)

TINY = dict(hidden=128, layers=4, heads=4, head_dim=64, rope_dim=16, q_lora_rank=128,
            o_groups=2, o_lora_rank=64, vocab=512, experts=8, top_k=2, experts_ffn=64,
            n_shared=1, routed_scaling_factor=1.5, sliding_window=8, csa_rate=4, hca_rate=8,
            index_n_heads=8, index_head_dim=32, index_topk=2, hc_mult=4, hc_sinkhorn_iters=20,
            hc_eps=1e-6, swiglu_limit=1.5, rope_theta=10000.0, compress_rope_theta=160000.0,
            yarn_factor=4, yarn_original_max=32, mtp_layers=1, n_hash=2)

LAYER_TYPES = ["sliding_attention", "compressed_sparse_attention",
               "heavily_compressed_attention", "compressed_sparse_attention"]
RATIO_OF_TYPE = {"sliding_attention": 0, "compressed_sparse_attention": 4,
                 "heavily_compressed_attention": 128}

# Router weight std (times hidden^-0.5) and selection-bias std: sqrtsoftplus
# scores spread over (0, ~2.5) so that selections differ per token, with a
# bias large enough that ignoring it changes the selection.
ROUTER_STD = 2.0
BIAS_STD = 0.3

OPTIONS = ("v4_config", "expert_dtype", "v4_shape", "v4_fill", "v4_layer_types", "v4_hash_layers")
TYPE_SHORT = {"sliding": "sliding_attention", "csa": "compressed_sparse_attention",
              "hca": "heavily_compressed_attention"}

# deepseek-ai/DeepSeek-V4-Flash as transformers' DeepseekV4Config defaults
# describe it (43 layers; YaRN factor 16 over 65536 positions on the
# compressed layers, as the release's rope_scaling).
FLASH = dict(hidden=4096, layers=43, heads=64, head_dim=512, rope_dim=64, q_lora_rank=1024,
             o_groups=8, o_lora_rank=1024, vocab=129280, experts=256, top_k=6, experts_ffn=2048,
             n_shared=1, routed_scaling_factor=1.5, sliding_window=128, csa_rate=4, hca_rate=128,
             index_n_heads=64, index_head_dim=128, index_topk=512, hc_mult=4,
             hc_sinkhorn_iters=20, hc_eps=1e-6, swiglu_limit=10.0, rope_theta=10000.0,
             compress_rope_theta=160000.0, yarn_factor=16, yarn_original_max=65536,
             mtp_layers=0, n_hash=3, max_position=1048576)
SHAPES = {"flash": FLASH}


def default_layer_types(n):
    """DeepseekV4Config's schedule when config.json names none: two HCA
    layers, then HCA and CSA alternating."""
    inter = ["compressed_sparse_attention" if i % 2 else "heavily_compressed_attention"
             for i in range(max(n - 2, 0))]
    return ["heavily_compressed_attention"] * min(n, 2) + inter


def add_arguments(ap):
    g = ap.add_argument_group("deepseek_v4")
    g.add_argument("--v4-config", choices=("current", "legacy"),
                   help="deepseek_v4: config.json keys: current (layer_types, compress_rates, "
                        "mlp_layer_types, partial_rotary_factor, rope_parameters; default) or "
                        "legacy (compress_ratios, compress_rate_csa/hca, num_hash_layers, "
                        "qk_rope_head_dim, rope_scaling), which DeepseekV4Config folds in")
    g.add_argument("--v4-shape", choices=sorted(SHAPES),
                   help="deepseek_v4: a released model's dimensions (flash: DeepSeek-V4-Flash, "
                        "GBs per layer), streamed, FP8 + FP4 as released; --layers N keeps N")
    g.add_argument("--v4-fill", choices=("random", "tiled"),
                   help="--v4-shape: random (default: every byte drawn) or tiled (one 16 MiB "
                        "random block per dtype read from a per-tensor offset; fast)")
    g.add_argument("--v4-layer-types", metavar="T,T,...",
                   help="--v4-shape: the kept layers' attention instead of the release's "
                        "schedule, one of sliding / csa / hca per layer (sets --layers)")
    g.add_argument("--v4-hash-layers", type=int, metavar="N",
                   help="--v4-shape: hash-routed first layers (default: the release's 3)")
    g.add_argument("--expert-dtype", choices=("fp4", "fp8"),
                   help="deepseek_v4 with --weights-dtype fp8: routed experts in FP4 (default, "
                        "as released) or FP8")


def used(args):
    return (getattr(args, "arch", None) in ARCHS
            or any(getattr(args, o, None) is not None for o in OPTIONS))


# ---------------------------------------------------------------- config


def build_config(args, vocab, t=TINY, types=LAYER_TYPES):
    legacy = args.v4_config == "legacy"
    L = t["layers"]
    cfg = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "compress_rope_theta": t["compress_rope_theta"],
        "hc_eps": t["hc_eps"],
        "hc_mult": t["hc_mult"],
        "hc_sinkhorn_iters": t["hc_sinkhorn_iters"],
        "head_dim": t["head_dim"],
        "hidden_act": "silu",
        "hidden_size": t["hidden"],
        "index_head_dim": t["index_head_dim"],
        "index_n_heads": t["index_n_heads"],
        "index_topk": t["index_topk"],
        "initializer_range": 0.02,
        "max_position_embeddings": t.get("max_position", t["yarn_factor"] * t["yarn_original_max"]),
        "moe_intermediate_size": t["experts_ffn"],
        "n_routed_experts": t["experts"],
        "n_shared_experts": t["n_shared"],
        "norm_topk_prob": True,
        "num_attention_heads": t["heads"],
        "num_experts_per_tok": t["top_k"],
        "num_hidden_layers": L,
        "num_key_value_heads": 1,
        "num_nextn_predict_layers": t["mtp_layers"],
        "o_groups": t["o_groups"],
        "o_lora_rank": t["o_lora_rank"],
        "q_lora_rank": t["q_lora_rank"],
        "rms_norm_eps": 1e-06,
        "rope_theta": t["rope_theta"],
        "routed_scaling_factor": t["routed_scaling_factor"],
        "scoring_func": "sqrtsoftplus",
        "sliding_window": t["sliding_window"],
        "swiglu_limit": t["swiglu_limit"],
        "tie_word_embeddings": False,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "5.15.0",
        "use_cache": True,
        "vocab_size": vocab,
    }
    yarn = {"beta_fast": 32, "beta_slow": 1, "factor": t["yarn_factor"],
            "original_max_position_embeddings": t["yarn_original_max"]}
    if legacy:
        # The release's own spelling (DeepSeek-V4-Flash config.json): one
        # compress ratio per layer (0 / 4 / 128 name the layer type;
        # DeepseekV4Config maps them through _COMPRESS_RATIO_TO_LAYER_TYPE),
        # the rates of the two compressed types, the hash layer count, the
        # rope dims and a flat YaRN rope_scaling for the compressed layers.
        # The release lists its MTP layers after the decoder layers
        # (DeepSeek's Attention reads compress_ratios[layer_id] for them; 0
        # there); here the MTP layer is a CSA layer, so that its compressor
        # and indexer run too.
        cfg.update(compress_ratios=[RATIO_OF_TYPE[x] for x in types] + [4] * t["mtp_layers"],
                   compress_rate_csa=t["csa_rate"], compress_rate_hca=t["hca_rate"],
                   num_hash_layers=t["n_hash"], qk_rope_head_dim=t["rope_dim"],
                   rope_scaling=dict(yarn, type="yarn"))
    else:
        cfg.update(layer_types=list(types),
                   compress_rates={"compressed_sparse_attention": t["csa_rate"],
                                   "heavily_compressed_attention": t["hca_rate"]},
                   mlp_layer_types=(["hash_moe"] * min(L, t["n_hash"])
                                        + ["moe"] * max(0, L - t["n_hash"])),
                   partial_rotary_factor=t["rope_dim"] / t["head_dim"],
                   rope_parameters=dict(yarn, rope_type="yarn", rope_theta=t["rope_theta"]))
    return cfg


def layer_types(cfg):
    if "layer_types" in cfg:
        return cfg["layer_types"]
    inv = {v: k for k, v in RATIO_OF_TYPE.items()}
    return [inv[r] for r in cfg["compress_ratios"]]


def rates(cfg):
    if "compress_rates" in cfg:
        return cfg["compress_rates"]
    return {"compressed_sparse_attention": cfg["compress_rate_csa"],
            "heavily_compressed_attention": cfg["compress_rate_hca"]}


def is_hash(cfg, L):
    if "mlp_layer_types" in cfg:
        return L < len(cfg["mlp_layer_types"]) and cfg["mlp_layer_types"][L] == "hash_moe"
    return L < cfg["num_hash_layers"]


# ---------------------------------------------------------------- tensors
#
# Kinds: "proj" (FP8 in the fp8 release), "linear" (BF16 always), "expert"
# (FP4 / FP8), "norm" (1 + noise, BF16), "f32" (F32 parameters: hc_*,
# attn_sink, ape, gate.bias), "embed", "lm_head", "router", "tid2eid".


def block_specs(cfg, p, ltype, hash_layer):
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    nh, hd, qr = cfg["num_attention_heads"], cfg["head_dim"], cfg["q_lora_rank"]
    hc = cfg["hc_mult"]
    mix = (2 + hc) * hc
    og, olr = cfg["o_groups"], cfg["o_lora_rank"]
    E, I, k = cfg["n_routed_experts"], cfg["moe_intermediate_size"], cfg["num_experts_per_tok"]
    yield p + "attn_norm.weight", (H,), "norm", 0.1
    yield p + "ffn_norm.weight", (H,), "norm", 0.1
    for site in ("attn", "ffn"):
        yield p + "hc_%s_fn" % site, (mix, hc * H), "f32", (hc * H) ** -0.5
        yield p + "hc_%s_base" % site, (mix,), "f32", 0.5
        yield p + "hc_%s_scale" % site, (3,), "hc_scale", 0.3
    a = p + "attn."
    yield a + "wq_a.weight", (qr, H), "proj", H ** -0.5
    yield a + "q_norm.weight", (qr,), "norm", 0.1
    yield a + "wq_b.weight", (nh * hd, qr), "proj", qr ** -0.5
    yield a + "wkv.weight", (hd, H), "proj", H ** -0.5
    yield a + "kv_norm.weight", (hd,), "norm", 0.1
    yield a + "wo_a.weight", (og * olr, nh * hd // og), "proj", (nh * hd // og) ** -0.5
    yield a + "wo_b.weight", (H, og * olr), "proj", 0.7 * (og * olr) ** -0.5
    yield a + "attn_sink", (nh,), "f32", 1.0
    if ltype != "sliding_attention":
        csa = ltype == "compressed_sparse_attention"
        rate = rates(cfg)[ltype]
        w = (2 if csa else 1) * hd
        c = a + "compressor."
        yield c + "wkv.weight", (w, H), "linear", H ** -0.5
        yield c + "wgate.weight", (w, H), "linear", H ** -0.5
        yield c + "ape", (rate, w), "f32", 0.5
        yield c + "norm.weight", (hd,), "norm", 0.1
        if csa:
            ih, idim = cfg["index_n_heads"], cfg["index_head_dim"]
            x = a + "indexer."
            yield x + "wq_b.weight", (ih * idim, qr), "proj", qr ** -0.5
            yield x + "weights_proj.weight", (ih, H), "linear", H ** -0.5
            yield x + "compressor.wkv.weight", (2 * idim, H), "linear", H ** -0.5
            yield x + "compressor.wgate.weight", (2 * idim, H), "linear", H ** -0.5
            yield x + "compressor.ape", (rate, 2 * idim), "f32", 0.5
            yield x + "compressor.norm.weight", (idim,), "norm", 0.1
    f = p + "ffn."
    yield f + "gate.weight", (E, H), "router", ROUTER_STD * H ** -0.5
    if hash_layer:
        yield f + "gate.tid2eid", (V, k), "tid2eid", 0.0
    else:
        yield f + "gate.bias", (E,), "f32", BIAS_STD
    for e in range(E):
        yield "%sexperts.%d.w1.weight" % (f, e), (I, H), "expert", H ** -0.5
        yield "%sexperts.%d.w2.weight" % (f, e), (H, I), "expert", 0.5 * I ** -0.5
        yield "%sexperts.%d.w3.weight" % (f, e), (I, H), "expert", H ** -0.5
    S = I * cfg["n_shared_experts"]
    yield f + "shared_experts.w1.weight", (S, H), "proj", H ** -0.5
    yield f + "shared_experts.w2.weight", (H, S), "proj", 0.7 * S ** -0.5
    yield f + "shared_experts.w3.weight", (S, H), "proj", H ** -0.5


def head_specs(cfg, p):
    H, hc = cfg["hidden_size"], cfg["hc_mult"]
    yield p + "hc_head_fn", (hc, hc * H), "f32", (hc * H) ** -0.5
    yield p + "hc_head_base", (hc,), "f32", 0.5
    yield p + "hc_head_scale", (1,), "hc_scale", 0.3


def tensor_specs(cfg):
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    types = layer_types(cfg)
    yield "embed.weight", (V, H), "embed", 1.0
    for L in range(cfg["num_hidden_layers"]):
        yield from block_specs(cfg, "layers.%d." % L, types[L], is_hash(cfg, L))
    yield "norm.weight", (H,), "norm", 0.1
    yield "head.weight", (V, H), "lm_head", 1.5 * H ** -0.5
    yield from head_specs(cfg, "")
    for m in range(cfg["num_nextn_predict_layers"]):
        # The MTP block as the release names it (DeepSeek's MTPBlock, see
        # ref_deepseek_v4.py): e_proj / h_proj on the normed embedding and
        # each hidden stream, its own final norm and hc_head, and one block
        # with a top-k-routed MoE, its attention as compress_ratios lists it
        # (else sliding).
        p = "mtp.%d." % m
        L = cfg["num_hidden_layers"] + m
        mtype = types[L] if L < len(types) else "sliding_attention"
        yield p + "e_proj.weight", (H, H), "proj", H ** -0.5
        yield p + "h_proj.weight", (H, H), "proj", H ** -0.5
        yield p + "enorm.weight", (H,), "norm", 0.1
        yield p + "hnorm.weight", (H,), "norm", 0.1
        yield p + "norm.weight", (H,), "norm", 0.1
        yield from head_specs(cfg, p)
        yield from block_specs(cfg, p, mtype, False)


def encode(name, w, kind, weights_dtype, expert_dtype):
    """{name: (dtype, storage)} of one master weight in the release's format."""
    base = name[: -len(".weight")] if name.endswith(".weight") else name
    if weights_dtype == "fp8" and (kind == "proj" or (kind == "expert" and expert_dtype == "fp8")):
        codes, scale = st.fp8_block_quantize_ue8m0(w)
        return {name: ("F8_E4M3", codes), base + ".scale": ("F8_E8M0", scale)}
    if weights_dtype == "fp8" and kind == "expert":
        packed, scale = st.fp4_quantize(w)
        return {name: ("I8", packed), base + ".scale": ("F8_E8M0", scale)}
    return {name: ("BF16", st.f32_to_bf16(w))}


def build_tensors(cfg, seed, weights_dtype, expert_dtype, g):
    groups = []
    for name, shape, kind, std in tensor_specs(cfg):
        if kind == "tid2eid":
            # A frozen token id -> k distinct expert ids table (I64, as
            # released; transformers holds it as a long buffer).
            rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
            E = cfg["n_routed_experts"]
            table = np.stack([rng.permutation(E)[:shape[1]] for _ in range(shape[0])])
            groups.append({name: ("I64", table.astype("<i8"))})
            continue
        if kind == "hc_scale":
            w = g.master_weight(seed, name, shape, "norm", std)
            groups.append({name: ("F32", np.ascontiguousarray(w, dtype=np.float32))})
            continue
        w = g.master_weight(seed, name, shape, "proj" if kind == "expert" else kind, std)
        if kind == "f32":
            groups.append({name: ("F32", np.ascontiguousarray(w, dtype=np.float32))})
        else:
            groups.append(encode(name, w, kind, weights_dtype, expert_dtype))
    return groups


# ---------------------------------------------------------------- main


def main(args, ap, g):
    """gen_model's main for deepseek_v4; g is the gen_model module."""
    if args.arch not in ARCHS:
        ap.error("--v4-config, --expert-dtype, --v4-shape, --v4-fill, --v4-layer-types and "
                 "--v4-hash-layers apply to --arch deepseek_v4 only")
    if args.v4_shape:
        return shape_main(args, ap, g)
    for opt in ("v4_fill", "v4_layer_types", "v4_hash_layers"):
        if getattr(args, opt) is not None:
            ap.error("--%s needs --v4-shape" % opt.replace("_", "-"))
    shards = hf_dir.tiny_only(args, ap, "deepseek_v4")
    if args.expert_dtype is not None and args.weights_dtype != "fp8":
        ap.error("--expert-dtype needs --weights-dtype fp8")
    expert_dtype = args.expert_dtype or "fp4"
    vocab = args.vocab_size or TINY["vocab"]
    if vocab < 2:
        ap.error("--vocab-size must be >= 2")
    cfg = build_config(args, vocab)
    if args.weights_dtype == "fp8":
        # DeepSeek-V4-Flash: FP8 e4m3 blocks with ue8m0 scales; experts FP4.
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                      "quant_method": "fp8", "scale_fmt": "ue8m0",
                                      "weight_block_size": [128, 128]}
        if expert_dtype == "fp4":
            cfg["expert_dtype"] = "fp4"
    hf_dir.clear_weights(args.out)
    hf_dir.write_json(os.path.join(args.out, "config.json"), cfg)
    gen = {"bos_token_id": 0, "eos_token_id": 1, "transformers_version": cfg["transformers_version"]}
    hf_dir.write_json(os.path.join(args.out, "generation_config.json"), gen)
    groups = build_tensors(cfg, args.seed, args.weights_dtype, expert_dtype, g)
    g.write_checkpoint(args.out, groups, shards)
    return 0


# ---------------------------------------------------------------- real shapes
#
# --v4-shape: the same tensor list (tensor_specs) at a released model's
# dimensions, as gen_model.ShapeWeights-style writers: (name, dtype, shape,
# write) with write(f) streaming the raw storage in row chunks.

POOL_BYTES = 16 << 20
ROW_CHUNK_BYTES = 32 << 20
# rms of an e2m1 code drawn uniformly from all 16: sqrt(mean of
# {0, .5, 1, 1.5, 2, 3, 4, 6}^2).
E2M1_RMS = float(np.sqrt(np.mean(np.square([0, .5, 1, 1.5, 2, 3, 4, 6]))))
# FP8 codes hold N(0, 1) x FP8_GAIN, so that the scale is std / FP8_GAIN
# (a power of two) and the codes use most of e4m3's range.
FP8_GAIN = 64.0


def e8m0_code(x):
    """The ue8m0 code of the power of two nearest x > 0."""
    return int(np.clip(np.round(np.log2(x)) + 127, 1, 254))


class ShapeFill:
    """Byte sources of one --v4-shape checkpoint.  bytes_of(name, kind, n)
    gives n bytes of a dtype's codes for tensor `name`: drawn from the
    tensor's own generator (random) or a window of a per-kind pool at an
    offset seeded by the name (tiled)."""

    def __init__(self, g, seed, tiled):
        self.g, self.seed, self.tiled = g, seed, tiled
        q = g.normal_quantiles()
        self.bf16_q = st.f32_to_bf16(q.astype(np.float32))                # N(0, 1) as bf16 codes
        with np.errstate(invalid="ignore"):
            self.e4m3_q = st.f32_to_e4m3((q * FP8_GAIN).astype(np.float32))  # N(0, 64) as e4m3
        self.pools = {}

    def _draw(self, rng, kind, n):
        """n bytes of codes of kind fp4 (uniform bytes), fp8 or bf16 (u16
        indices into the quantile tables)."""
        if kind == "fp4":
            return np.frombuffer(rng.bytes(n), dtype=np.uint8)
        idx = self.g.rng_u16(rng, n if kind == "fp8" else n // 2)
        return (self.e4m3_q if kind == "fp8" else self.bf16_q)[idx].view(np.uint8)

    def chunks(self, name, kind, n):
        """Yields the n bytes of a tensor in pieces of at most ROW_CHUNK_BYTES."""
        rng = self.g.seeded_rng(self.seed, name)
        if not self.tiled:
            done = 0
            while done < n:
                k = min(ROW_CHUNK_BYTES, n - done)
                yield self._draw(rng, kind, k)
                done += k
            return
        if kind not in self.pools:
            pool = self._draw(self.g.seeded_rng(self.seed, "pool:" + kind), kind, POOL_BYTES)
            self.pools[kind] = np.concatenate([pool, pool])
        pool = self.pools[kind]
        pos = int(rng.integers(POOL_BYTES // 2)) * 2    # even: bf16 values stay aligned
        done = 0
        while done < n:
            k = min(POOL_BYTES - pos, n - done)
            yield pool[pos:pos + k]
            done += k
            pos = 0


def shape_groups(cfg, seed, fill, g):
    """The --v4-shape checkpoint as gen_model.write_shape_checkpoint groups."""
    E = cfg["n_routed_experts"]

    def stream(name, kind, n):
        def write(f):
            for buf in fill.chunks(name, kind, n):
                f.write(buf.data)
        return write

    def const(arr):
        arr = np.ascontiguousarray(arr)
        return lambda f: f.write(arr.data)

    groups = []
    for name, shape, kind, std in tensor_specs(cfg):
        base = name[: -len(".weight")] if name.endswith(".weight") else name
        n = int(np.prod(shape))
        if kind == "tid2eid":
            # k distinct experts per token id: the first k of a random
            # ranking, chunked so that the ranking of every id is not held.
            rng = np.random.default_rng([seed, zlib.crc32(name.encode())])

            def write_table(f, rng=rng, shape=shape):
                for a in range(0, shape[0], 8192):
                    r = rng.random((min(8192, shape[0] - a), E))
                    top = np.argpartition(r, shape[1], axis=1)[:, :shape[1]]
                    f.write(np.ascontiguousarray(top, dtype="<i8").data)
            groups.append([(name, "I64", shape, write_table)])
        elif kind in ("f32", "hc_scale", "norm"):
            w = g.master_weight(seed, name, shape, "norm" if kind != "f32" else "f32", std)
            if kind == "norm":
                groups.append([(name, "BF16", shape, const(st.f32_to_bf16(w)))])
            else:
                groups.append([(name, "F32", shape, const(w.astype("<f4")))])
        elif kind == "expert":
            rows, cols = shape
            sshape = (rows, cols // 32)
            code = e8m0_code(std / E2M1_RMS)
            groups.append([(name, "I8", (rows, cols // 2), stream(name, "fp4", n // 2)),
                           (base + ".scale", "F8_E8M0", sshape,
                            const(np.full(sshape, code, dtype=np.uint8)))])
        elif kind == "proj":
            rows, cols = shape
            sshape = (-(-rows // 128), -(-cols // 128))
            code = e8m0_code(std / FP8_GAIN)
            groups.append([(name, "F8_E4M3", shape, stream(name, "fp8", n)),
                           (base + ".scale", "F8_E8M0", sshape,
                            const(np.full(sshape, code, dtype=np.uint8)))])
        else:
            # BF16 matrices (embed, head, router, compressors, weights_proj):
            # N(0, 1) codes; the std is folded in by a power of two, exactly
            # (bf16 exponent arithmetic), so the fill stays a table lookup.
            shift = int(np.round(np.log2(std)))

            def write_bf16(f, name=name, n=n, shift=shift):
                for buf in fill.chunks(name, "bf16", 2 * n):
                    v = buf.view("<u2").astype(np.int32)
                    e = (v >> 7) & 0xFF
                    v = np.where(e > 0, v + (shift << 7), v)   # zero stays zero
                    f.write(v.astype("<u2").data)
            groups.append([(name, "BF16", shape, write_bf16)])
    return groups


def shape_main(args, ap, g):
    t = dict(SHAPES[args.v4_shape])
    for opt, bad in (("--shape", getattr(args, "shape", None)),
                     ("--tokenizer", args.tokenizer), ("--vocab-size", args.vocab_size),
                     ("--clip-qkv", args.clip_qkv is not None),
                     ("--experts-layout fused", args.experts_layout == "fused"),
                     ("--size", args.size is not None),
                     ("--v4-config legacy", args.v4_config == "legacy"),
                     ("--expert-dtype fp8", args.expert_dtype == "fp8")):
        if bad:
            ap.error("%s does not combine with --v4-shape" % opt)
    types = None
    if args.v4_layer_types:
        try:
            types = [TYPE_SHORT[x.strip()] for x in args.v4_layer_types.split(",")]
        except KeyError as e:
            ap.error("--v4-layer-types: %s is not sliding, csa or hca" % e)
        if args.layers is not None and args.layers != len(types):
            ap.error("--layers %d but --v4-layer-types lists %d" % (args.layers, len(types)))
        args.layers = len(types)
    if args.layers is not None:
        if not 1 <= args.layers <= t["layers"]:
            ap.error("--layers must be in [1, %d] for --v4-shape %s" % (t["layers"], args.v4_shape))
        t["layers"] = args.layers
    if args.v4_hash_layers is not None:
        if args.v4_hash_layers < 0:
            ap.error("--v4-hash-layers must be >= 0")
        t["n_hash"] = args.v4_hash_layers
    L = t["layers"]
    shards = L + 1 if args.shards is None else args.shards
    if shards < 1:
        ap.error("--shards must be >= 1")
    args.weights_dtype = "fp8"
    cfg = build_config(args, t["vocab"], t, types or default_layer_types(L))
    cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                  "quant_method": "fp8", "scale_fmt": "ue8m0",
                                  "weight_block_size": [128, 128]}
    cfg["expert_dtype"] = "fp4"
    fill = ShapeFill(g, args.seed, args.v4_fill == "tiled")
    groups = shape_groups(cfg, args.seed, fill, g)
    need = sum(st.DTYPES[x[1]][1] * int(np.prod(x[2])) for grp in groups for x in grp)
    hf_dir.clear_weights(args.out)
    free = g.shutil.disk_usage(args.out).free
    if need + (1 << 30) > free:
        raise SystemExit("gen_model: deepseek_v4 %s needs %.1f GB but %s has %.1f GB free "
                         "(keeping 1 GiB)" % (args.v4_shape, need / 1e9, args.out, free / 1e9))
    hf_dir.write_json(os.path.join(args.out, "config.json"), cfg)
    gen = {"bos_token_id": 0, "eos_token_id": 1, "transformers_version": cfg["transformers_version"]}
    hf_dir.write_json(os.path.join(args.out, "generation_config.json"), gen)
    label = "deepseek-v4-%s (%d layers)" % (args.v4_shape, L)
    g.sys.stderr.write("gen_model: %s, FP8 + FP4, %.2f GB in %d shard(s), %s fill -> %s\n"
                       % (label, need / 1e9, shards, args.v4_fill or "random", args.out))
    t0 = g.time.monotonic()
    g.write_shape_checkpoint(args.out, groups, shards, label)
    g.sys.stderr.write("gen_model: %s written in %.0f s\n" % (label, g.time.monotonic() - t0))
    return 0
