"""The side files of a generated Hugging Face checkpoint folder, shared by
gen_model.py and its arch_*.py modules."""

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
