"""Reference forward pass of gpt-oss in numpy, written from transformers
v5.15.0 (models/gpt_oss/modeling_gpt_oss.py, its config class,
modeling_rope_utils' YaRN, masking_utils' sliding window and
integrations/mxfp4's dequantization) as it runs with the model loaded in
float32; reference.py's --model dispatches here for model_type gpt_oss.
The arithmetic is float64 on the float32 weights; RoPE frequencies and
angles are rounded through float32 as transformers computes them.  What the
family does, marked "HF:" below:

- attention: GQA, head_dim from the config (not hidden / heads), biases on
  q/k/v/o; RoPE rotates the two halves of each head (x1 * cos - x2 * sin,
  x2 * cos + x1 * sin) with YaRN frequencies, cos and sin both multiplied by
  YaRN's attention_factor (so the scores carry its square); layer_types
  picks per layer a causal mask or a sliding one (query q sees keys
  q - sliding_window < k <= q); each head's sink (self_attn.sinks) is one
  more logit in the softmax, dropped afterwards;
- MoE on every layer: router logits = h W^T + b; the top-k LOGITS choose
  the experts, their weights are the softmax over the chosen k only;
  experts: gate_up = h @ gate_up_proj[e] + bias ([E, H, 2I], gate at even
  columns, up at odd), gate clamped to <= 7, up to [-7, 7],
  out = (up + 1) * gate * sigmoid(1.702 gate), then @ down_proj[e] ([E, I, H])
  + bias.  transformers hard-codes 7 and 1.702 (the config's swiglu_limit
  is not read); a config whose swiglu_limit is not 7 is refused.

MXFP4 experts (*_blocks U8 [E, out, in/32, 16], *_scales U8 [E, out, in/32])
are dequantized here exactly: byte b of a block holds element 2b in its low
nibble and 2b + 1 in its high one, each an e2m1 code, times 2^(scale - 127);
then [E, out, in] is transposed to transformers' [E, in, out].
"""

import json
import math
import os

import numpy as np

import ref_common
import safetensors_np as st

SWIGLU_LIMIT = 7.0
SWIGLU_ALPHA = 1.702

# e2m1 code -> value (sign in bit 3), as integrations/mxfp4.FP4_VALUES.
FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                       -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float64)


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    return Model(model_dir, cfg) if cfg.get("model_type") == "gpt_oss" else None


def mxfp4_dequantize(blocks, scales):
    """blocks uint8 [E, out, G, 16], scales uint8 [E, out, G] -> float64
    [E, G * 32, out] (transformers' convert_moe_packed_tensors, exactly)."""
    b = np.asarray(blocks).view(np.uint8)
    s = np.asarray(scales).view(np.uint8).astype(np.int64)
    if b.shape[:-1] != s.shape or b.shape[-1] != 16:
        raise SystemExit("reference: mxfp4 blocks %s do not match scales %s" % (list(b.shape), list(s.shape)))
    v = np.empty(b.shape[:-1] + (32,))
    v[..., 0::2] = FP4_VALUES[b & 0x0F]
    v[..., 1::2] = FP4_VALUES[b >> 4]
    v = np.ldexp(v, (s - 127)[..., None])
    E, out, G = s.shape
    return v.reshape(E, out, G * 32).transpose(0, 2, 1)


rms_norm = ref_common.rms_norm


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def yarn_inv_freq(dim, base, rope, max_pos):
    """(inv_freq float32 [dim / 2], attention_factor) as
    modeling_rope_utils._compute_yarn_parameters computes them."""
    factor = rope.get("factor")
    orig = rope.get("original_max_position_embeddings", max_pos)
    if factor is None:
        factor = max_pos / orig

    def get_mscale(scale, mscale=1):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attention_factor = rope.get("attention_factor")
    if attention_factor is None:
        if rope.get("mscale") and rope.get("mscale_all_dim"):
            attention_factor = float(get_mscale(factor, rope["mscale"]) / get_mscale(factor, rope["mscale_all_dim"]))
        else:
            attention_factor = get_mscale(factor)
    beta_fast = rope.get("beta_fast") or 32
    beta_slow = rope.get("beta_slow") or 1

    def correction_dim(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    # HF: truncate defaults to True; the released gpt-oss config sets false.
    if rope.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    f32 = np.float32
    pos = (f32(base) ** (np.arange(0, dim, 2).astype(f32) / f32(dim))).astype(f32)
    extrapolation = (f32(1.0) / pos).astype(f32)
    interpolation = (f32(1.0) / (f32(factor) * pos)).astype(f32)
    ramp = np.clip((np.arange(dim // 2).astype(f32) - f32(low)) / f32(high - low), f32(0), f32(1)).astype(f32)
    extra_factor = (f32(1) - ramp).astype(f32)
    inv = (interpolation * (f32(1) - extra_factor) + extrapolation * extra_factor).astype(f32)
    return inv, attention_factor


class Model(ref_common.Weights):
    def __init__(self, model_dir, cfg):
        self.cfg = cfg
        self.arch = "gpt_oss"
        self.hidden = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        # HF: GptOssConfig.head_dim defaults to 64; None means hidden / heads.
        hd = cfg.get("head_dim", 64)
        self.head_dim = hd if hd is not None else self.hidden // self.n_heads
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.vocab = cfg["vocab_size"]
        self.layer_types = cfg.get("layer_types") or [
            "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(self.n_layers)]
        self.window = cfg.get("sliding_window", 128)
        if "sliding_attention" in self.layer_types and not self.window:
            raise SystemExit("reference: gpt_oss sliding layers without a sliding_window")
        self.n_experts = cfg.get("num_local_experts", 128)
        # HF reads num_experts_per_tok (default 4); the release also writes
        # experts_per_token, which must agree.
        self.top_k = cfg.get("num_experts_per_tok", 4)
        if cfg.get("experts_per_token", self.top_k) != self.top_k:
            raise SystemExit("reference: experts_per_token %d disagrees with num_experts_per_tok %d"
                             % (cfg["experts_per_token"], self.top_k))
        if cfg.get("swiglu_limit", SWIGLU_LIMIT) != SWIGLU_LIMIT:
            raise SystemExit("reference: swiglu_limit %r: transformers v5.15.0 hard-codes 7.0"
                             % cfg["swiglu_limit"])
        self.tie = cfg.get("tie_word_embeddings", False)
        # HF: rope_scaling, when present, wins over rope_parameters; rope_theta
        # defaults to GptOssConfig.default_theta; no rope dict at all means the
        # released YaRN.
        rope = dict(cfg.get("rope_scaling") or cfg.get("rope_parameters") or {
            "rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "truncate": False, "original_max_position_embeddings": 4096})
        self.theta = rope.get("rope_theta", cfg.get("rope_theta", 150000.0))
        self.rope_type = rope.get("rope_type", rope.get("type", "default"))
        dim = int(self.head_dim * rope.get("partial_rotary_factor", 1.0))
        if dim != self.head_dim:
            raise SystemExit("reference: gpt_oss partial rotary is not implemented")
        if self.rope_type == "yarn":
            self.inv_freq, self.attention_factor = yarn_inv_freq(
                dim, self.theta, rope, cfg.get("max_position_embeddings", 131072))
        elif self.rope_type == "default":
            idx = np.arange(0, dim, 2).astype(np.float32) / np.float32(dim)
            self.inv_freq = (np.float32(1.0) / (np.float32(self.theta) ** idx)).astype(np.float32)
            self.attention_factor = 1.0
        else:
            raise SystemExit("reference: gpt_oss rope_type %r is not implemented" % self.rope_type)
        self.tensors = st.load_dir(model_dir)
        self.clamped = dict(gate=0, up=0, values=0)

    def experts_weight(self, layer, proj):
        """[E, in, out] float64: gate_up_proj [E, H, 2I] or down_proj [E, I, H]."""
        name = "model.layers.%d.mlp.experts.%s" % (layer, proj)
        cache = self.__dict__.setdefault("_cache", {})
        if name not in cache:
            if self.has(name + "_blocks"):
                cache[name] = mxfp4_dequantize(self.tensors[name + "_blocks"].raw,
                                               self.tensors[name + "_scales"].raw)
            else:
                cache[name] = self.w(name)
        return cache[name]

    def rope(self, n):
        freqs = (np.arange(n, dtype=np.float32)[:, None] * self.inv_freq[None, :]).astype(np.float32)
        f = freqs.astype(np.float64)
        return np.cos(f) * self.attention_factor, np.sin(f) * self.attention_factor

    @staticmethod
    def apply_rope(x, cos, sin):
        # HF _apply_rotary_emb: chunk the head in two halves.
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        c, s = cos[:, None, :], sin[:, None, :]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)

    def attention(self, layer, h, cos, sin):
        p = "model.layers.%d.self_attn." % layer
        n = h.shape[0]
        nh, nkv, hd = self.n_heads, self.n_kv, self.head_dim
        q = self.apply_rope(self.linear(h, p + "q_proj").reshape(n, nh, hd), cos, sin)
        k = self.apply_rope(self.linear(h, p + "k_proj").reshape(n, nkv, hd), cos, sin)
        v = self.linear(h, p + "v_proj").reshape(n, nkv, hd)
        qi, ki = np.arange(n)[:, None], np.arange(n)[None, :]
        allowed = ki <= qi
        if self.layer_types[layer] == "sliding_attention":
            # HF masking_utils.sliding_window_overlay: kv_idx > q_idx - sliding_window.
            allowed = allowed & (ki > qi - self.window)
        sinks = self.w(p + "sinks")
        group = nh // nkv
        out = np.empty((n, nh, hd))
        for head in range(nh):
            kvh = head // group
            s = (q[:, head] @ k[:, kvh].T) * hd ** -0.5
            s = np.where(allowed, s, -np.inf)
            full = np.concatenate([s, np.full((n, 1), sinks[head])], axis=-1)
            e = np.exp(full - full.max(axis=-1, keepdims=True))
            probs = e / e.sum(axis=-1, keepdims=True)
            out[:, head] = probs[:, :-1] @ v[:, kvh]
        return self.linear(out.reshape(n, nh * hd), p + "o_proj")

    def moe(self, layer, h, record):
        m = "model.layers.%d.mlp." % layer
        logits = self.linear(h, m + "router")
        order = np.argsort(-logits, axis=-1, kind="stable")
        top = order[:, :self.top_k]
        chosen = np.take_along_axis(logits, top, axis=-1)
        e = np.exp(chosen - chosen.max(axis=-1, keepdims=True))
        weights = e / e.sum(axis=-1, keepdims=True)
        if self.top_k < self.n_experts:
            nxt = np.take_along_axis(logits, order[:, self.top_k:self.top_k + 1], axis=-1)[:, 0]
            margins = chosen[:, -1] - nxt
        else:
            margins = np.full(h.shape[0], np.inf)
        gate_up = self.experts_weight(layer, "gate_up_proj")
        down = self.experts_weight(layer, "down_proj")
        gate_up_bias = self.w(m + "experts.gate_up_proj_bias")
        down_bias = self.w(m + "experts.down_proj_bias")
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            for slot in range(self.top_k):
                x = top[t, slot]
                gu = h[t] @ gate_up[x] + gate_up_bias[x]
                gate, up = gu[0::2], gu[1::2]
                self.clamped["gate"] += int((gate > SWIGLU_LIMIT).sum())
                self.clamped["up"] += int((np.abs(up) > SWIGLU_LIMIT).sum())
                self.clamped["values"] += gate.size
                gate = np.minimum(gate, SWIGLU_LIMIT)
                up = np.clip(up, -SWIGLU_LIMIT, SWIGLU_LIMIT)
                act = (up + 1.0) * gate * sigmoid(SWIGLU_ALPHA * gate)
                out[t] += weights[t, slot] * (act @ down[x] + down_bias[x])
        record.append({"layer": layer, "experts": top.tolist(), "weights": weights.tolist(),
                       "margins": margins.tolist()})
        return out

    def forward(self, tokens):
        self.clamped = dict(gate=0, up=0, values=0)
        return ref_common.prenorm_decoder(self, tokens, *self.rope(len(tokens)))

    def note(self):
        """One line on the last forward's clamped SwiGLU, for reference.py."""
        c = self.clamped
        return ("reference: gpt_oss clamped SwiGLU: gate > 7 in %d, |up| > 7 in %d of %d routed values each\n"
                % (c["gate"], c["up"], c["values"]))
