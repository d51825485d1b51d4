#!/usr/bin/python3
"""shape_inkling: an Inkling-975B-shaped checkpoint (thinkingmachines/Inkling)
cut to a few layers, in the released layout, streamed to disk, for benchmarks.

    tools/shape_inkling.py --out DIR [--layers N] [--seed S] [--shards K]

The layout is the release's (model.llm.* names, the nested inkling_mm_model
config.json with the text model in text_config, gate/up rows interleaved in
w13, BF16 except the short convolutions' F32) as /tmp/briefs/ink_spec.md and
tools/arch_inkling.py describe it; the dimensions are the real model's:
hidden 6144, vocab 201024 padded (200058 used), global attention 64 heads /
8 kv / head_dim 128 and sliding 64 / 16 / 128 (window 512, (i + 1) % 6 != 0
sliding), d_rel 16 with extent 1024 on global layers, short convolutions of
4 taps, 256 routed experts of width 3072 (top-6) plus 2 shared ones, a dense
MLP of 24576 in the first layer (dense_mlp_idx 1), route_scale 8,
logits_mup_width_multiplier 24.  --layers keeps the first N of the 66
(default 2: layer 0 dense, layer 1 MoE; --dense-layers 0 makes every
layer MoE, e.g. a 1-layer MoE model).  The other towers hold only their
two final norms here (the converter's skip path; the real towers are
billions of parameters nobody reads), and there is no MTP layer.

Sizes (BF16): a MoE layer is 29.4 GB (19.3 GB of w13, 9.7 GB of w2, the
rest attention and shared experts), the dense layer 1.1 GB, embed + unembed
4.9 GB: 35.5 GB at 2 layers.  The script refuses to start unless that plus
1 GiB is free.  Nothing is held in RAM beyond one chunk of 8 M values (and
one 8192 x 6144 projection): tensors are written in row chunks through
gen_model.write_shape_checkpoint (shard headers first, pages dropped as they
are written), so the machine's memory never bounds the model.

Values (gen_model's --shape approach, so that generation runs at disk
speed): normals from a table of 65536 equiprobable N(0, 1) quantiles indexed
by random 16-bit integers, pre-encoded as bf16.  Magnitudes give a sane
forward on RMS-normed inputs:

- embed rows: SHARE * g + noise for one shared random direction g (as
  gen_model's shapes); embed_norm, attn_norm, mlp_norm, norm: 1 + 0.1 N;
- q/k/v/r projections std H^-0.5 with rows orthogonal to the shared
  direction after the layer's attn_norm (so attention outputs stay
  token-specific), o_proj 0.7 (nh hd)^-0.5; q_norm / k_norm 3 (1 + 0.1 N),
  scores q.k / head_dim of std ~0.8; the relative-logit bank 0.3 N (bias
  std ~1.2 with r of rms 1); short convolutions 0.15 N (F32);
- experts, shared experts and the dense MLP: gate/up std H^-0.5
  (pre-activations of std 1), down 0.33 I^-0.5 (an expert's output has
  rms ~0.2; the 6 + 2 weights sum to route_scale * global_scale = 8, so the
  block adds ~0.55 rms); the dense MLP's down 0.7 I^-0.5; global_scale 1 on
  both;
- unembed rows orthogonal to the final norm's shared direction, std
  1.5 * 24 / sqrt(H): logits of std ~1.5 after the divisor of 24.
- routing is skewed and token-dependent, as tools/arch_gpt_oss.py's shape:
  router row e is ROUTER_SCALE * m_e * r_e with r_e a random unit vector
  orthogonal to the shared direction after mlp_norm and m_e =
  exp(NORM_SIGMA N(0, 1)), so experts with the larger rows are picked more
  often (sigmoid scores saturate: the wider logit spread wins the top-6);
  the correction bias is -ROUTER_ZIPF log(rank_e), centred, for a random
  ranking (small: it is added to sigmoid scores in [0, 1]).  Simulated on
  4096 N(0, 1) token projections: the hottest expert in the top-6 of 18%
  of the tokens, the median one of 1.0% (uniform: 2.3%), the hottest
  quarter of the experts 74% of the picks; the two shared rows have m = 1.

gen_model.py --shape inkling-975b calls main() here when gen_model has the
hook; the script runs on its own as well (bench/inkling.sh calls it so).
"""

import argparse
import os
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gen_model as g  # noqa: E402
import hf_dir  # noqa: E402
import safetensors_np as st  # noqa: E402

SHAPE_NAME = "inkling-975b"

# thinkingmachines/Inkling's text model (InklingTextConfig defaults, which
# are the released model's).
SHAPE = dict(hidden=6144, layers=66, vocab=201024, unpadded=200058,
             heads=64, kv_heads=8, head_dim=128, swa_heads=64, swa_kv_heads=16, swa_head_dim=128,
             window=512, d_rel=16, rel_extent=1024, kernel=4,
             experts=256, top_k=6, shared=2, moe_ffn=3072, dense_ffn=24576, dense_mlp_idx=1,
             route_scale=8.0, mup=24.0, rms_eps=1e-6, max_pos=131072, bos=1, eos=2)

SHARE = g.SHARE
ROUTER_SCALE = 2.0
NORM_SIGMA = 0.3
ROUTER_ZIPF = 0.01
QK_NORM_GAIN = 3.0
ROUTER_GLOBAL_SCALE = 1.0
CHUNK_ELEMS = g.CHUNK_ELEMS
SHARD_BYTES = 5 << 30       # default shard count: about this much a shard


def layer_type(i):
    return "hybrid_sliding" if (i + 1) % 6 else "hybrid"


def build_config(d):
    """config.json: the released nested inkling_mm_model form, text fields
    under the names a release uses (tools/arch_inkling.py's)."""
    n = d["layers"]
    text = {
        "model_type": "inkling_text",
        "vocab_size": d["vocab"],
        "unpadded_vocab_size": d["unpadded"],
        "hidden_size": d["hidden"],
        "num_hidden_layers": n,
        "num_attention_heads": d["heads"],
        "num_key_value_heads": d["kv_heads"],
        "head_dim": d["head_dim"],
        "swa_num_attention_heads": d["swa_heads"],
        "swa_num_key_value_heads": d["swa_kv_heads"],
        "swa_head_dim": d["swa_head_dim"],
        "sliding_window_size": d["window"],
        "d_rel": d["d_rel"],
        "rel_extent": d["rel_extent"],
        "log_scaling_n_floor": None,
        "log_scaling_alpha": 0.1,
        "layer_types": [layer_type(i) for i in range(n)],
        "sconv_kernel_size": d["kernel"],
        "model_max_length": d["max_pos"],
        "dense_mlp_idx": min(d["dense_mlp_idx"], n),
        "dense_intermediate_size": d["dense_ffn"],
        "hidden_act": "silu",
        "moe_intermediate_size": d["moe_ffn"],
        "n_routed_experts": d["experts"],
        "num_experts_per_tok": d["top_k"],
        "n_shared_experts": d["shared"],
        "route_scale": d["route_scale"],
        "logits_mup_width_multiplier": d["mup"],
        "rms_norm_eps": d["rms_eps"],
        "bos_token_id": d["bos"],
        "eos_token_id": d["eos"],
    }
    return {
        "architectures": ["InklingForConditionalGeneration"],
        "model_type": "inkling_mm_model",
        "text_config": text,
        "vision_config": {"model_type": "inkling_vision"},
        "audio_config": {"model_type": "inkling_audio"},
        "image_token_id": 200054,
        "audio_token_id": 200053,
        "image_bos_token_id": 200005,
        "audio_bos_token_id": 200020,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "5.15.0",
    }


class Weights:
    """The tensors' writers: write(f) streams one tensor's raw storage."""

    def __init__(self, cfg, seed):
        self.t = cfg["text_config"]
        self.seed = seed
        self.H = self.t["hidden_size"]
        self.q = g.normal_quantiles()
        self.q32 = self.q.astype(np.float32)
        self.tables = {}
        self.gdir = g.seeded_rng(seed, "shared-direction").standard_normal(self.H)

    def table(self, std):
        if std not in self.tables:
            self.tables[std] = st.f32_to_bf16((self.q * std).astype(np.float32))
        return self.tables[std]

    def norm_values(self, name, std=0.1):
        return g.master_weight(self.seed, name, (self.H,), "norm", std)

    def shared_dir(self, norm_name):
        """The shared embedding direction after a norm (bf16-rounded weight)."""
        v = g.bf16_round(self.norm_values(norm_name)).astype(np.float64) * self.gdir
        return (v / np.linalg.norm(v)).astype(np.float32)

    def chunks(self, name, n):
        """(rng, count) chunks of n values from the tensor's own generator."""
        rng = g.seeded_rng(self.seed, name)
        for a in range(0, n, CHUNK_ELEMS):
            yield rng, min(CHUNK_ELEMS, n - a)

    def normal(self, name, shape, std):
        """Table normals of std, any shape, chunk by chunk."""
        n = int(np.prod(shape))

        def write(f):
            tab = self.table(std)
            for rng, k in self.chunks(name, n):
                f.write(tab[g.rng_u16(rng, k)].data)
        return write

    def orthogonal_rows(self, name, shape, std, norm_name, shift=None):
        """Rows of std with the shared direction after norm_name projected
        out; shift (an f32 [cols] vector) is added to every row."""
        rows, cols = shape
        step = max(1, CHUNK_ELEMS // cols)

        def write(f):
            u = self.shared_dir(norm_name)
            rng = g.seeded_rng(self.seed, name)
            for r in range(0, rows, step):
                n = min(step, rows - r)
                w = self.q32[g.rng_u16(rng, n * cols)].reshape(n, cols) * np.float32(std)
                w -= np.outer(w @ u, u)
                if shift is not None:
                    w += shift
                f.write(st.f32_to_bf16(w).data)
        return write

    def embed(self, name, shape):
        rows, cols = shape
        step = max(1, CHUNK_ELEMS // cols)

        def write(f):
            shared = (SHARE * self.gdir).astype(np.float32)
            keep = np.float32(np.sqrt(1.0 - SHARE * SHARE))
            rng = g.seeded_rng(self.seed, name)
            for r in range(0, rows, step):
                n = min(step, rows - r)
                noise = self.q32[g.rng_u16(rng, n * cols)].reshape(n, cols)
                f.write(st.f32_to_bf16(noise * keep + shared).data)
        return write

    def router(self, layer, E, S):
        """(weight [E + S, H], bias [E]) bf16 storage of one layer's router."""
        name = "model.llm.layers.%d.mlp.gate.weight" % layer
        u = self.shared_dir("model.llm.layers.%d.mlp_norm.weight" % layer).astype(np.float64)
        rng = g.seeded_rng(self.seed, name)
        r = rng.standard_normal((E + S, self.H))
        r -= np.outer(r @ u, u)
        r /= np.linalg.norm(r, axis=1, keepdims=True)
        m = np.concatenate([np.exp(NORM_SIGMA * rng.standard_normal(E)), np.ones(S)])
        # x . r_e has the rms of the token-specific part of the normed input.
        keep = np.sqrt(1.0 - SHARE * SHARE)
        w = (ROUTER_SCALE * m / keep)[:, None] * r
        b = -ROUTER_ZIPF * np.log(rng.permutation(E) + 1.0)
        b -= b.mean()
        return st.f32_to_bf16(w.astype(np.float32)), st.f32_to_bf16(b.astype(np.float32))


def plan(cfg, seed):
    """Groups of (name, dtype, shape, write) in checkpoint order; a group
    stays within one shard."""
    t = cfg["text_config"]
    W = Weights(cfg, seed)
    H, K, V = t["hidden_size"], t["sconv_kernel_size"], t["vocab_size"]
    E, S, I = t["n_routed_experts"], t["n_shared_experts"], t["moe_intermediate_size"]
    Id, d_rel = t["dense_intermediate_size"], t["d_rel"]
    arr = g.ShapeWeights.array_writer

    def bf16(name, shape, write):
        return [(name, "BF16", shape, write)]

    def norm(name, gain=1.0):
        return bf16(name, (H,), arr(st.f32_to_bf16(gain * W.norm_values(name))))

    def f32(name, shape, std):
        w = std * g.seeded_rng(seed, name).standard_normal(shape)
        return [(name, "F32", shape, arr(w.astype("<f4")))]

    def scalar(name, value):
        return bf16(name, (1,), arr(st.f32_to_bf16(np.array([value], dtype=np.float32))))

    groups = [bf16("model.llm.embed.weight", (V, H), W.embed("model.llm.embed.weight", (V, H))),
              norm("model.llm.embed_norm.weight")]
    for L in range(t["num_hidden_layers"]):
        p = "model.llm.layers.%d." % L
        if t["layer_types"][L] == "hybrid_sliding":
            nh, nkv, hd = t["swa_num_attention_heads"], t["swa_num_key_value_heads"], t["swa_head_dim"]
            extent = t["sliding_window_size"]
        else:
            nh, nkv, hd, extent = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"], t["rel_extent"]
        groups.append(norm(p + "attn_norm.weight"))
        for proj, rows in (("wq_du", nh * hd), ("wk_dv", nkv * hd), ("wv_dv", nkv * hd), ("wr_du", nh * d_rel)):
            name = p + "attn.%s.weight" % proj
            groups.append(bf16(name, (rows, H), W.orthogonal_rows(name, (rows, H), H ** -0.5,
                                                                   p + "attn_norm.weight")))
        name = p + "attn.wo_ud.weight"
        groups.append(bf16(name, (H, nh * hd), W.normal(name, (H, nh * hd), 0.7 * (nh * hd) ** -0.5)))
        qk = np.float32(QK_NORM_GAIN)
        for n in ("q_norm", "k_norm"):
            name = p + "attn.%s.weight" % n
            groups.append(bf16(name, (hd,), arr(st.f32_to_bf16(
                qk * g.master_weight(seed, name, (hd,), "norm", 0.1)))))
        groups.append(f32(p + "attn.k_sconv.weight", (nkv * hd, 1, K), 0.15))
        groups.append(f32(p + "attn.v_sconv.weight", (nkv * hd, 1, K), 0.15))
        name = p + "attn.rel_logits_proj.proj"
        groups.append(bf16(name, (d_rel, extent), W.normal(name, (d_rel, extent), 0.3)))
        groups.append(f32(p + "attn_sconv.weight", (H, 1, K), 0.15))
        groups.append(norm(p + "mlp_norm.weight"))
        m = p + "mlp."
        if L < t["dense_mlp_idx"]:
            groups.append(bf16(m + "w13_dn.weight", (2 * Id, H), W.normal(m + "w13_dn.weight", (2 * Id, H), H ** -0.5)))
            groups.append(bf16(m + "w2_md.weight", (H, Id), W.normal(m + "w2_md.weight", (H, Id), 0.7 * Id ** -0.5)))
            groups.append(scalar(m + "global_scale", 1.0))
        else:
            w, b = W.router(L, E, S)
            groups.append(bf16(m + "gate.weight", (E + S, H), arr(w)))
            groups.append(bf16(m + "gate.bias", (E,), arr(b)))
            groups.append(scalar(m + "gate.global_scale", ROUTER_GLOBAL_SCALE))
            for name, shape, std in ((m + "experts.w13_weight", (E, 2 * I, H), H ** -0.5),
                                     (m + "experts.w2_weight", (E, H, I), 0.33 * I ** -0.5),
                                     (m + "shared_experts.shared_w13_weight", (S, 2 * I, H), H ** -0.5),
                                     (m + "shared_experts.shared_w2_weight", (S, H, I), 0.33 * I ** -0.5)):
                groups.append(bf16(name, shape, W.normal(name, shape, std)))
        groups.append(f32(p + "mlp_sconv.weight", (H, 1, K), 0.15))
    groups.append(norm("model.llm.norm.weight"))
    name = "model.llm.unembed.weight"
    groups.append(bf16(name, (V, H), W.orthogonal_rows(name, (V, H), 1.5 * t["logits_mup_width_multiplier"] * H ** -0.5,
                                                       "model.llm.norm.weight")))
    # The other towers' final norms only: a converter skips model.visual.* /
    # model.audio.*; the real towers would add GBs nobody reads here.
    for name in ("model.visual.final_norm.weight", "model.audio.final_norm.weight"):
        groups.append(norm(name))
    return groups


def nbytes(groups):
    return sum(st.DTYPES[t[1]][1] * int(np.prod(t[2])) for grp in groups for t in grp)


def write(out, layers=2, seed=1, shards=None, dense_layers=None):
    """Writes the checkpoint to out (created; old weights removed); returns
    the bytes written. Refuses when out's disk lacks the room."""
    if not 1 <= layers <= SHAPE["layers"]:
        raise SystemExit("shape_inkling: --layers must be in [1, %d]" % SHAPE["layers"])
    d = dict(SHAPE, layers=layers)
    if dense_layers is not None:
        d["dense_mlp_idx"] = dense_layers
    cfg = build_config(d)
    groups = plan(cfg, seed)
    need = nbytes(groups)
    if shards is None:
        shards = max(1, min(len(groups), -(-need // SHARD_BYTES)))
    if not 1 <= shards <= len(groups):
        raise SystemExit("shape_inkling: --shards must be in [1, %d]" % len(groups))
    hf_dir.clear_weights(out)
    free = shutil.disk_usage(out).free
    if need + (1 << 30) > free:
        raise SystemExit("shape_inkling: %s with %d layers needs %.1f GB (+1 GiB kept) but %s has "
                         "%.1f GB free" % (SHAPE_NAME, layers, need / 1e9, out, free / 1e9))
    done = os.path.join(out, ".complete")
    if os.path.exists(done):
        os.remove(done)
    hf_dir.write_json(os.path.join(out, "config.json"), cfg)
    hf_dir.write_json(os.path.join(out, "generation_config.json"),
                      {"bos_token_id": d["bos"], "eos_token_id": d["eos"],
                       "transformers_version": cfg["transformers_version"]})
    label = "%s (%d layers)" % (SHAPE_NAME, layers)
    n_params = sum(int(np.prod(t[2])) for grp in groups for t in grp)
    sys.stderr.write("shape_inkling: %s, %.2f B parameters, bf16, %.2f GB in %d shard(s) -> %s\n"
                     % (label, n_params / 1e9, need / 1e9, shards, out))
    t0 = time.monotonic()
    g.write_shape_checkpoint(out, groups, shards, label)
    with open(done, "w") as f:
        f.write("%s layers=%d seed=%d bytes=%d\n" % (SHAPE_NAME, layers, seed, need))
    sys.stderr.write("shape_inkling: %s written in %.0f s\n" % (label, time.monotonic() - t0))
    return need


def main(args, ap, gm=None):
    """gen_model.py --shape inkling-975b's entry (gm: the gen_model module,
    unused: this module imports it)."""
    return 0 if write(args.out, args.layers or 2, args.seed, args.shards,
                      getattr(args, "dense_layers", None)) else 1


def cli(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=2, help="first N of the 66 layers (default 2)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shards", type=int, help="safetensors files (default: about 5 GiB each)")
    ap.add_argument("--dense-layers", type=int, help="leading dense layers (default 1, as released)")
    ap.add_argument("--size-only", action="store_true", help="print the bytes needed and exit")
    args = ap.parse_args(argv)
    if args.size_only:
        d = dict(SHAPE, layers=args.layers)
        if args.dense_layers is not None:
            d["dense_mlp_idx"] = args.dense_layers
        print(nbytes(plan(build_config(d), args.seed)))
        return 0
    write(args.out, args.layers, args.seed, args.shards, args.dense_layers)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
