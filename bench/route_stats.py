#!/usr/bin/python3
"""Routing statistics of a Hugging Face MoE checkpoint: how skewed expert
usage is, per layer, for a teacher-forced sequence of random tokens.

    route_stats.py --model HF_DIR [--tokens N] [--seed S] [--json FILE]

Runs the forward pass of tools/reference.py (attention, norms and routers
exactly as there) but loads only the experts the tokens select, in float32,
and skips the logits, so a 7 B model takes about a minute. Prints per MoE
layer: the rms of the residual stream entering the MoE block, the share of
tokens whose top-k holds the hottest expert, the share of all selections
that go to the hottest 25% and 50% of the experts (the hit rate a cache
pinning exactly those experts would get), experts never selected, and the
mean overlap of the expert sets of consecutive tokens. It checks the
routing that tools/gen_model.py --shape builds (see tools/README.md).
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import reference as ref  # noqa: E402
import safetensors_np as st  # noqa: E402


def expert_weight(m, name):
    t = m.tensors[name]
    if t.dtype == "F8_E4M3":
        s = m.tensors[name + "_scale_inv"]
        return st.fp8_block_dequantize(t.raw, st.to_f32(s), m.fp8_block)
    return st.to_f32(t)


def moe_lazy(m, layer, h, stats):
    """reference.moe without the float64 copy of every expert: routing in
    float64 as there, each selected expert loaded once in float32."""
    pfx = m.moe_prefix(layer)
    logits = h @ m.w(pfx + "gate.weight").T
    z = logits - logits.max(axis=-1, keepdims=True)
    probs = np.exp(z)
    probs /= probs.sum(axis=-1, keepdims=True)
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :m.top_k]
    weights = np.take_along_axis(probs, top, axis=-1)
    if m.norm_topk:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    names = ("w1", "w3", "w2") if m.arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    out = np.zeros_like(h)
    h32 = h.astype(np.float32)
    for e in np.unique(top):
        rows, slots = np.nonzero(top == e)
        g, u, d = (expert_weight(m, "%sexperts.%d.%s.weight" % (pfx, e, n)) for n in names)
        y = ref.swiglu(h32[rows], g, u, d).astype(np.float64)
        out[rows] += weights[rows, slots][:, None] * y
    stats.append(layer_stats(layer, top, m.n_experts, logits))
    return out


def layer_stats(layer, top, n_experts, logits):
    n_tok, k = top.shape
    counts = np.bincount(top.ravel(), minlength=n_experts)
    order = np.sort(counts)[::-1]
    sets = [set(r) for r in top.tolist()]
    overlap = np.mean([len(a & b) for a, b in zip(sets, sets[1:])]) if n_tok > 1 else 0.0
    return {
        "layer": layer,
        "hottest_token_share": float(order[0] / n_tok),
        "top25_selection_share": float(order[:max(1, n_experts // 4)].sum() / counts.sum()),
        "top50_selection_share": float(order[:max(1, n_experts // 2)].sum() / counts.sum()),
        "uniform_top25_share": 0.25,
        "unused_experts": int((counts == 0).sum()),
        "consecutive_overlap": float(overlap),
        "k": k,
        # Spread of each expert's mean logit over the experts (the hot/cold
        # bias) against the mean spread of a logit over the tokens.
        "logit_bias_std": float(logits.mean(axis=0).std()),
        "logit_token_std": float(logits.std(axis=0).mean()),
        "counts": counts.tolist(),
    }


def run(model_dir, n_tokens, seed):
    m = ref.Model(model_dir)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, ref.token_range(model_dir, m.vocab), n_tokens)
    x = m.rows("model.embed_tokens.weight", tokens)
    cos, sin = ref.rope_tables(m.head_dim, m.rope_theta, n_tokens)
    stats, rms0 = [], float(np.sqrt(np.mean(x * x)))
    for layer in range(m.n_layers):
        p = "model.layers.%d." % layer
        h = ref.rms_norm(x, m.w(p + "input_layernorm.weight"), m.eps)
        x = x + ref.attention(m, layer, h, cos, sin)
        rms = float(np.sqrt(np.mean(x * x)))
        h = ref.rms_norm(x, m.w(p + "post_attention_layernorm.weight"), m.eps)
        if m.is_moe(layer):
            x = x + moe_lazy(m, layer, h, stats)
            stats[-1]["residual_rms"] = rms / rms0
        else:
            x = x + ref.dense_mlp(m, layer, h)
        sys.stderr.write("route_stats: layer %d done\n" % layer)
    return {"model": os.path.abspath(model_dir), "tokens": n_tokens, "seed": seed,
            "experts": m.n_experts, "top_k": m.top_k, "layers": stats}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="also write the statistics (with per-expert counts) here")
    args = ap.parse_args(argv)
    res = run(args.model, args.tokens, args.seed)
    print("%d random tokens, %d experts, top-%d (uniform routing: hottest expert in %.0f%% "
          "of the tokens, hottest 25%% of experts take 25%% of the selections)"
          % (res["tokens"], res["experts"], res["top_k"], 100.0 * res["top_k"] / res["experts"]))
    print()
    print("| layer | residual rms | hottest expert: tokens | hottest 25%: selections "
          "| hottest 50%: selections | unused experts | overlap with previous token "
          "| logit std: bias / token |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in res["layers"]:
        print("| %d | %.2f | %.0f%% | %.0f%% | %.0f%% | %d | %.2f of %d | %.2f / %.2f |"
              % (s["layer"], s["residual_rms"], 100 * s["hottest_token_share"],
                 100 * s["top25_selection_share"], 100 * s["top50_selection_share"],
                 s["unused_experts"], s["consecutive_overlap"], s["k"],
                 s["logit_bias_std"], s["logit_token_std"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
