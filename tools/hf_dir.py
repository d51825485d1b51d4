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
