"""The side files of a generated Hugging Face checkpoint folder, shared by
gen_model.py and its arch_*.py modules, and the byte alphabet of the
byte-level tokenizer.json files the tools write."""

import json
import os


def write_json(path, obj):
    """config.json / generation_config.json as the generators write them:
    indented, keys sorted, a final newline."""
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def clear_weights(out):
    """Creates out, or removes the weight files a previous run left there."""
    os.makedirs(out, exist_ok=True)
    for old in os.listdir(out):
        if old.endswith(".safetensors") or old == "model.safetensors.index.json":
            os.remove(os.path.join(out, old))


def tiny_only(args, ap, arch, extra=()):
    """Refuses gen_model's options that a tiny released-layout family
    (arch_minimax_m2.py, arch_gpt_oss.py, arch_deepseek_v4.py) does not
    take, plus the (name, bad) pairs of extra; returns --shards (default 1)."""
    for opt, bad in (("--shape", getattr(args, "shape", None)),
                     ("--layers", getattr(args, "layers", None) is not None),
                     ("--tokenizer", args.tokenizer),
                     ("--clip-qkv", args.clip_qkv is not None),
                     ("--experts-layout fused", args.experts_layout == "fused"),
                     ("--size small", args.size not in (None, "tiny"))) + tuple(extra):
        if bad:
            ap.error("%s is not available for --arch %s" % (opt, arch))
    shards = 1 if args.shards is None else args.shards
    if shards < 1:
        ap.error("--shards must be >= 1")
    return shards


def shape_dims(args, ap, shapes, refused):
    """The dimensions of gen_model's --shape args.shape from shapes, cut to
    --layers, and its shard count, refusing the options that do not combine
    with a real shape: the common ones plus the (name, bad) pairs of
    refused. Returns (dims, shards)."""
    for opt, bad in (("--arch", args.arch), ("--size", args.size), ("--tokenizer", args.tokenizer),
                     ("--vocab-size", args.vocab_size), ("--clip-qkv", args.clip_qkv is not None),
                     ("--weights-dtype fp8", args.weights_dtype == "fp8")) + tuple(refused):
        if bad:
            ap.error("%s does not combine with --shape %s" % (opt, args.shape))
    d = dict(shapes[args.shape])
    if args.layers is not None:
        if not 1 <= args.layers <= d["layers"]:
            ap.error("--layers must be in [1, %d] for %s" % (d["layers"], args.shape))
        d["layers"] = args.layers
    shards = d["shards"] if args.shards is None else args.shards
    if shards < 1:
        ap.error("--shards must be >= 1")
    return d, shards


def bytes_to_unicode():
    """GPT-2's map of the 256 byte values to printable characters (the
    byte-level BPE alphabet of tokenizer.json)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}
