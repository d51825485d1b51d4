#!/usr/bin/python3
"""Writes a small random Hugging Face MoE checkpoint in the real on-disk format.

    gen_model.py --arch {olmoe,qwen3_moe,mixtral} --out DIR [--seed N]
                 [--experts-layout {per-expert,fused}] [--weights-dtype {bf16,fp8}]
                 [--shards N] [--tokenizer DIR] [--vocab-size N]
                 [--size {tiny,small}] [--clip-qkv X]

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
"""

import argparse
import json
import os
import shutil
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np as st  # noqa: E402

ARCHS = ("olmoe", "qwen3_moe", "mixtral")

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
}

# Tokenizers whose real configs pad the vocabulary beyond the tokenizer's
# id range: base BPE vocabulary size -> vocab_size of the real config.
KNOWN_PADDED_VOCAB = {151643: 151936}   # Qwen2 / Qwen2.5 / Qwen3


def build_config(arch, size, vocab, ids, clip_qkv):
    s = SIZES[size]
    n_layers = s["layers"][arch]
    common = {
        "attention_dropout": 0.0,
        "bos_token_id": ids["bos"],
        "eos_token_id": ids["eos"],
        "hidden_act": "silu",
        "hidden_size": s["hidden"],
        "initializer_range": 0.02,
        "num_attention_heads": s["heads"],
        "num_experts_per_tok": s["top_k"][arch],
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
                   mlp_only_layers=[1] if n_layers > 2 else [],
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


def write_checkpoint(out, groups, shards):
    if shards <= 1:
        tensors = {}
        for g in groups:
            tensors.update(g)
        st.write_file(os.path.join(out, "model.safetensors"), tensors, {"format": "pt"})
        return
    if shards > len(groups):
        raise SystemExit("gen_model: --shards %d exceeds the %d tensor groups" % (shards, len(groups)))
    total = sum(group_bytes(g) for g in groups)
    # Contiguous split by cumulative bytes, every shard non-empty.
    bounds, acc, start = [], 0, 0
    for i, g in enumerate(groups):
        acc += group_bytes(g)
        left_groups = len(groups) - (i + 1)
        left_shards = shards - len(bounds) - 1
        if left_shards > 0 and (acc >= total * (len(bounds) + 1) / shards
                                or left_groups == left_shards):
            bounds.append((start, i + 1))
            start = i + 1
    bounds.append((start, len(groups)))
    weight_map, total_size = {}, 0
    for k, (a, b) in enumerate(bounds):
        fname = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
        tensors = {}
        for g in groups[a:b]:
            tensors.update(g)
        total_size += st.write_file(os.path.join(out, fname), tensors, {"format": "pt"})
        for name in tensors:
            weight_map[name] = fname
    index = {"metadata": {"total_size": total_size},
             "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


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
    ap.add_argument("--arch", required=True, choices=ARCHS)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--experts-layout", choices=("per-expert", "fused"), default="per-expert")
    ap.add_argument("--weights-dtype", choices=("bf16", "fp8"), default="bf16")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--tokenizer", help="directory with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--vocab-size", type=int, help="override vocab_size")
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--clip-qkv", type=float, default=None, help="olmoe only: clip_qkv value")
    args = ap.parse_args(argv)

    if args.clip_qkv is not None and args.arch != "olmoe":
        ap.error("--clip-qkv applies to olmoe only")
    if args.shards < 1:
        ap.error("--shards must be >= 1")
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

    cfg = build_config(args.arch, args.size, vocab, ids, args.clip_qkv)
    if args.weights_dtype == "fp8":
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                      "quant_method": "fp8", "weight_block_size": [128, 128]}
    os.makedirs(args.out, exist_ok=True)
    for old in os.listdir(args.out):
        if old.endswith(".safetensors") or old == "model.safetensors.index.json":
            os.remove(os.path.join(args.out, old))
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    gen = {"bos_token_id": ids["bos"], "eos_token_id": gen_eos,
           "transformers_version": cfg["transformers_version"]}
    if ids["pad"] is not None:
        gen["pad_token_id"] = ids["pad"]
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2, sort_keys=True)
        f.write("\n")
    if args.tokenizer:
        for fname in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(args.tokenizer, fname), os.path.join(args.out, fname))

    groups = build_tensors(cfg, args.seed, args.experts_layout, args.weights_dtype)
    write_checkpoint(args.out, groups, args.shards)
    return 0


if __name__ == "__main__":
    sys.exit(main())
