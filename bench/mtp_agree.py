#!/usr/bin/python3
"""A DeepSeek-V3, DeepSeek-V4 or Qwen3.5 checkpoint whose MTP head agrees with the model.

    mtp_agree.py --src HF_DIR --out HF_DIR2 [--alpha A]

Random weights give an MTP head that never predicts what the model then
samples, so drafting is never accepted. This rewrites a generated
checkpoint (tools/gen_model.py --arch deepseek_v3) so that it does:

- every layer's output projections (self_attn.o_proj, mlp.down_proj,
  mlp.shared_experts.down_proj, mlp.experts.E.down_proj; the MTP layer's
  too) are scaled by A (default 0.05): the residual stream stays close to
  the token embedding, and the model is close to a bigram model,
  next = argmax lm_head(norm(embed(token)));
- the MTP layer takes the embedding half of its input only: eh_proj =
  [I | 0] (eh_proj's input is cat(enorm(embed(next)), hnorm(h))), enorm
  weight 1, shared_head.norm = model.norm (shared_head.head is already
  lm_head): its prediction is that same bigram of the token it is given.

Qwen3.5 (tools/gen_model.py --arch qwen3_5_moe) names the same things
otherwise: the DeltaNet's linear_attn.out_proj and the fused
mlp.experts.down_proj are scaled too, the MTP block's mtp.fc = [I | 0],
mtp.pre_fc_norm_embedding 0 (its norms are zero-centred: 1 + w = 1) and
mtp.norm = the model's final norm.

DeepSeek-V4 (tools/gen_model.py --arch deepseek_v4, the released names)
scales attn.wo_b and the experts' and shared expert's w2; its MTP block
gets e_proj = I, h_proj = 0, enorm 1, norm = the model's norm and the
model's hc_head_*: the streams stay close to copies of the embedding (the
Sinkhorn mixer keeps their sum), so both heads see norm(embed(token)).

So the MTP head predicts, up to the residual contributions A scales down,
what the model itself will predict one position later: A = 0 agrees
always, larger A less often. Every layer still routes and computes every
expert (the cost of a forward does not change); only the values differ.
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import safetensors_np as st  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--alpha", type=float, default=0.05)
    a = ap.parse_args()
    with open(os.path.join(a.src, "config.json")) as f:
        cfg = json.load(f)
    # The MLA families name the tensors this touches alike; Qwen3.5 keeps
    # its text model's fields in text_config.
    qwen = cfg.get("model_type") == "qwen3_5_moe"
    v4 = cfg.get("model_type") == "deepseek_v4"
    if qwen:
        cfg = cfg.get("text_config", {})
    if not (qwen and cfg.get("mtp_num_hidden_layers")) and (
            cfg.get("model_type") not in ("deepseek_v3", "deepseek_v32", "glm_moe_dsa", "deepseek_v4")
            or not cfg.get("num_nextn_predict_layers")):
        sys.exit("mtp_agree: %s is not a deepseek_v3 / deepseek_v32 / glm_moe_dsa / deepseek_v4 / qwen3_5_moe "
                 "checkpoint with an MTP layer" % a.src)
    if os.path.exists(os.path.join(a.src, "model.safetensors.index.json")):
        sys.exit("mtp_agree: sharded checkpoints are not handled")
    H = cfg["hidden_size"]
    mtp = cfg["num_hidden_layers"]
    t = st.load_file(os.path.join(a.src, "model.safetensors"))

    def f32(name):
        x = t[name]
        if x.dtype == "BF16":
            return st.bf16_to_f32(x.raw)
        if x.dtype == "F32":
            return np.array(x.raw, dtype=np.float32)
        sys.exit("mtp_agree: %s is %s; use a bf16 checkpoint" % (name, x.dtype))

    out = {}
    for name, x in t.items():
        out[name] = (x.dtype, np.array(x.raw))

    def put(name, v):
        dtype = t[name].dtype
        out[name] = (dtype, st.f32_to_bf16(v) if dtype == "BF16" else v.astype(np.float32))

    scaled = 0
    for name in t:
        if name.endswith(("self_attn.o_proj.weight", "down_proj.weight", "experts.down_proj",
                          "linear_attn.out_proj.weight")) or (
                              v4 and name.endswith((".attn.wo_b.weight", ".w2.weight"))):
            put(name, f32(name) * a.alpha)
            scaled += 1
    eh = np.zeros((H, 2 * H), dtype=np.float32)
    eh[:, :H] = np.eye(H, dtype=np.float32)
    if v4:
        put("mtp.0.e_proj.weight", np.eye(H, dtype=np.float32))
        put("mtp.0.h_proj.weight", np.zeros((H, H), dtype=np.float32))
        put("mtp.0.enorm.weight", np.ones(H, dtype=np.float32))
        put("mtp.0.norm.weight", f32("norm.weight"))
        for k in ("fn", "base", "scale"):
            put("mtp.0.hc_head_" + k, f32("hc_head_" + k))
    elif qwen:
        put("mtp.fc.weight", eh)
        put("mtp.pre_fc_norm_embedding.weight", np.zeros(H, dtype=np.float32))
        put("mtp.norm.weight", f32("model.language_model.norm.weight"))
    else:
        p = "model.layers.%d." % mtp
        put(p + "eh_proj.weight", eh)
        put(p + "enorm.weight", np.ones(H, dtype=np.float32))
        put(p + "shared_head.norm.weight", f32("model.norm.weight"))
    os.makedirs(a.out, exist_ok=True)
    st.write_file(os.path.join(a.out, "model.safetensors"), out)
    for f in os.listdir(a.src):
        if f.endswith(".json"):
            shutil.copy(os.path.join(a.src, f), os.path.join(a.out, f))
    print("mtp_agree: %s -> %s: %d output projections scaled by %g, MTP input projection = [I | 0]"
          % (a.src, a.out, scaled, a.alpha), file=sys.stderr)


if __name__ == "__main__":
    main()
