#!/usr/bin/env python3
"""Which dense weights are worth their bytes: KL to the f32 container, top-1
agreement and the weight bytes a token reads, for int4 experts with each
choice of dense precision (issue 38).

    bench/dense_split.py [--colibri ./colibri] [--out FILE.md]
                         [--model NAME=HF_DIR[:TOKENS]] ...

Each model is converted to f32 (the reference) and to

    default         --quant int4                       (dense int8)
    dense int4      --quant int4 --dense-quant int4    (a Q4_0 file's bytes)
    attn int4+head  --quant int4 --dense-quant int4 --head-quant int8
    attn int8,head4 --quant int4 --head-quant int4
    int8            --quant int8                       (experts and dense int8)

then `colibri logits` runs the same tokens through each (teacher-forced),
and the table gives the mean KL(f32 || variant) over positions, top-1
agreement with f32, and the bytes a decoded token reads: every resident
matrix but the embedding table (one row a token) and the MTP layers, plus
top-k experts' records in each MoE layer. Without --model it takes the
test fixtures in build/fixtures/hf (tools/make_fixtures.sh) with their
reference tokens. Offline tool: numpy, no network.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

VARIANTS = [
    ("default (dense int8)", ["--quant", "int4"]),
    ("dense int4", ["--quant", "int4", "--dense-quant", "int4"]),
    ("attention int4, lm_head int8", ["--quant", "int4", "--dense-quant", "int4", "--head-quant", "int8"]),
    ("attention int8, lm_head int4", ["--quant", "int4", "--head-quant", "int4"]),
    ("int8", ["--quant", "int8"]),
]

FIXTURES = ["olmoe", "qwen3_moe", "mixtral", "deepseek_v3", "glm4_moe", "qwen3_5_moe", "minimax_m2",
            "inkling_bf16"]


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"dense_split: {' '.join(cmd)} failed:\n{r.stderr}")
    return r.stdout


def token_bytes(container, hf_dir):
    """Weight bytes a decoded token reads (see the module comment)."""
    m = json.load(open(os.path.join(container, "manifest.json")))
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    cfg = cfg.get("text_config", cfg)
    n_layers = cfg["num_hidden_layers"]
    top_k = cfg.get("num_experts_per_tok") or cfg.get("moe_topk") or 1
    total = 0
    for t in m["resident"]["tensors"]:
        name = t["name"]
        if "embed" in name:
            continue
        mt = re.search(r"layers\.(\d+)\.", name)
        if (mt and int(mt.group(1)) >= n_layers) or ".mtp" in name:
            continue
        total += t["bytes"]
    for layer in m["experts"]["layers"]:
        if layer["layer"] < n_layers:
            total += top_k * sum(p["bytes"] for p in layer["parts"])
    return total


def logits(colibri, container, tokens, out):
    run([colibri, "logits", "--model", container, "--tokens", tokens, "--out", out])
    return np.fromfile(out, dtype=np.float32)


def kl_top1(ref, got, vocab):
    a = ref.reshape(-1, vocab).astype(np.float64)
    b = got.reshape(-1, vocab).astype(np.float64)
    la = a - a.max(axis=1, keepdims=True)
    la -= np.log(np.exp(la).sum(axis=1, keepdims=True))
    lb = b - b.max(axis=1, keepdims=True)
    lb -= np.log(np.exp(lb).sum(axis=1, keepdims=True))
    kl = (np.exp(la) * (la - lb)).sum(axis=1).mean()
    top1 = (a.argmax(axis=1) == b.argmax(axis=1)).mean()
    return float(kl), float(top1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--colibri", default="./colibri")
    ap.add_argument("--fixtures", default="build/fixtures")
    ap.add_argument("--model", action="append", default=[],
                    help="NAME=HF_DIR[:TOKENS] (TOKENS: comma-separated ids; default 1..48)")
    ap.add_argument("--out", help="write the table as markdown here too")
    ap.add_argument("--ref-quant", default="f32",
                    help="the reference container (bf16 gives the same logits as f32 for bf16 weights, "
                         "at half the disk)")
    a = ap.parse_args()
    models = []
    for spec in a.model:
        name, rest = spec.split("=", 1)
        hf, _, toks = rest.partition(":")
        models.append((name, hf, toks or ",".join(str(i) for i in range(1, 49))))
    if not models:
        for name in FIXTURES:
            hf = os.path.join(a.fixtures, "hf", name)
            tok = os.path.join(a.fixtures, "ref", name + ".tokens")
            if os.path.isdir(hf) and os.path.exists(tok):
                models.append((name, hf, open(tok).read().strip()))
    if not models:
        sys.exit("dense_split: no models (run tools/make_fixtures.sh build/fixtures, or pass --model)")
    work = tempfile.mkdtemp(prefix="dense-split-")
    lines = ["| model | variant | mean KL to f32 | top-1 | bytes / token | vs default |",
             "| --- | --- | --- | --- | --- | --- |"]
    try:
        for name, hf, toks in models:
            ref_dir = os.path.join(work, name + "-ref")
            run([a.colibri, "convert", "--quiet", "--force", "--quant", a.ref_quant, hf, ref_dir])
            ref = logits(a.colibri, ref_dir, toks, os.path.join(work, "ref.f32"))
            n_tok = toks.count(",") + 1
            vocab = ref.size // n_tok
            shutil.rmtree(ref_dir)
            base_bytes = None
            for label, args in VARIANTS:
                d = os.path.join(work, name + "-v")
                run([a.colibri, "convert", "--quiet", "--force"] + args + [hf, d])
                got = logits(a.colibri, d, toks, os.path.join(work, "v.f32"))
                kl, top1 = kl_top1(ref, got, vocab)
                nb = token_bytes(d, hf)
                base_bytes = base_bytes or nb
                lines.append(f"| {name} | {label} | {kl:.4g} | {top1:.3f} | {nb / 1e6:.3f} MB | "
                             f"{nb / base_bytes:.2f}x |")
                print(lines[-1], flush=True)
                shutil.rmtree(d)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
