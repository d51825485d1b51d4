"""Reference forward pass of MiniMax-M2 in numpy, written from transformers
v5.15.0 (models/minimax_m2/modeling_minimax_m2.py and its config class) as it
runs with the model loaded in float32; reference.py's --model dispatches here
for model_type minimax_m2.  The arithmetic is float64 on the float32 weights;
RoPE frequencies and angles are rounded through float32 as transformers
computes them.  What the family does, marked "HF:" below:

- attention: GQA, head_dim from the config (not hidden / heads), no biases;
  q_norm / k_norm are RMSNorms over the WHOLE projected q and k (weights
  [heads * head_dim], [kv_heads * head_dim]) before the head reshape;
  rotate-half RoPE over the first rotary dims of each head, the rest passed
  through;
- MoE on every layer: router logits = gate(h); scores = sigmoid(logits);
  the top-k of scores + e_score_correction_bias choose the experts; their
  weights are the chosen (unbiased) scores divided by their sum; no scaling
  factor, no shared expert; experts are SwiGLU (w1 gate, w3 up, w2 down).

The rotary dims: MiniMaxM2Config (transformers v5.15.0) reads
partial_rotary_factor (in rope_parameters or at the top level, default 1.0)
and ignores rotary_dim, the key MiniMax's own released config uses; this
reference follows transformers, and refuses a config whose rotary_dim
disagrees with it (colibri reads both; see engine/model/model_config.c).
"""

import json
import os

import numpy as np

import ref_common
import safetensors_np as st


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    return Model(model_dir, cfg) if cfg.get("model_type") == "minimax_m2" else None


rms_norm = ref_common.rms_norm


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class Model(ref_common.Weights):
    def __init__(self, model_dir, cfg):
        self.cfg = cfg
        self.arch = "minimax_m2"
        self.hidden = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg["num_key_value_heads"]
        # HF: head_dim = getattr(config, "head_dim", hidden // heads).
        self.head_dim = cfg.get("head_dim") or self.hidden // self.n_heads
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.vocab = cfg["vocab_size"]
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            raise SystemExit("reference: minimax_m2 rope scaling %r is not implemented" % rope)
        self.theta = rope.get("rope_theta", cfg.get("rope_theta", 5000000.0))
        factor = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
        # HF compute_default_rope_parameters: dim = int(head_dim * factor).
        self.rot = int(self.head_dim * factor)
        if cfg.get("rotary_dim") is not None and cfg["rotary_dim"] != self.rot:
            raise SystemExit("reference: rotary_dim %d disagrees with partial_rotary_factor %g (%d dims)"
                             % (cfg["rotary_dim"], factor, self.rot))
        if cfg.get("hidden_act", "silu") != "silu":
            raise SystemExit("reference: hidden_act %r is not implemented" % cfg["hidden_act"])
        self.n_experts = cfg["num_local_experts"]
        self.top_k = cfg["num_experts_per_tok"]
        q = cfg.get("quantization_config") or {}
        self.fp8_block = tuple(q.get("weight_block_size") or (128, 128))
        self.tensors = st.load_dir(model_dir)

    def rope(self, n):
        d = self.rot
        idx = np.arange(0, d, 2, dtype=np.int64).astype(np.float32) / np.float32(d)
        inv = (np.float32(1.0) / (np.float32(self.theta) ** idx)).astype(np.float32)
        freqs = (np.arange(n, dtype=np.float32)[:, None] * inv[None, :]).astype(np.float32)
        emb = np.concatenate([freqs, freqs], axis=-1).astype(np.float64)
        return np.cos(emb), np.sin(emb)

    def apply_rope(self, x, cos, sin):
        # HF apply_rotary_pos_emb: rotate-half on x[..., :rot], the rest as is.
        r = self.rot
        xr, xp = x[..., :r], x[..., r:]
        half = r // 2
        rot = np.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
        return np.concatenate([xr * cos[:, None, :] + rot * sin[:, None, :], xp], axis=-1)

    def attention(self, layer, h, cos, sin):
        p = "model.layers.%d.self_attn." % layer
        n = h.shape[0]
        nh, nkv, hd = self.n_heads, self.n_kv, self.head_dim
        q = rms_norm(self.linear(h, p + "q_proj"), self.w(p + "q_norm.weight"), self.eps)
        k = rms_norm(self.linear(h, p + "k_proj"), self.w(p + "k_norm.weight"), self.eps)
        v = self.linear(h, p + "v_proj")
        q = self.apply_rope(q.reshape(n, nh, hd), cos, sin)
        k = self.apply_rope(k.reshape(n, nkv, hd), cos, sin)
        v = v.reshape(n, nkv, hd)
        allowed = np.arange(n)[None, :] <= np.arange(n)[:, None]
        group = nh // nkv
        out = np.empty((n, nh, hd))
        for head in range(nh):
            kvh = head // group
            s = (q[:, head] @ k[:, kvh].T) * hd ** -0.5
            s = np.where(allowed, s, -np.inf)
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            out[:, head] = (e / e.sum(axis=-1, keepdims=True)) @ v[:, kvh]
        return self.linear(out.reshape(n, nh * hd), p + "o_proj")

    def moe(self, layer, h, record):
        m = "model.layers.%d.block_sparse_moe." % layer
        scores = sigmoid(h @ self.w(m + "gate.weight").T)
        choice = scores + self.w(m + "e_score_correction_bias")
        order = np.argsort(-choice, axis=-1, kind="stable")
        top = order[:, :self.top_k]
        weights = np.take_along_axis(scores, top, axis=-1)
        weights = weights / weights.sum(axis=-1, keepdims=True)
        kth = np.take_along_axis(choice, order[:, self.top_k - 1:self.top_k], axis=-1)[:, 0]
        nxt = np.take_along_axis(choice, order[:, self.top_k:self.top_k + 1], axis=-1)[:, 0]
        names = [[self.w("%sexperts.%d.%s.weight" % (m, e, part)) for e in range(self.n_experts)]
                 for part in ("w1", "w3", "w2")]
        out = ref_common.routed_sum(h, top, weights, *[np.stack(x) for x in names])
        record.append({"layer": layer, "experts": top.tolist(), "weights": weights.tolist(),
                       "margins": (kth - nxt).tolist()})
        return out

    def forward(self, tokens):
        return ref_common.prenorm_decoder(self, tokens, *self.rope(len(tokens)))
