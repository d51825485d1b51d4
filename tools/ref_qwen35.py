"""Reference forward pass of Qwen3.5-MoE / Qwen3.6-MoE and Qwen3-Next.

Used by reference.py (which dispatches here when config.json's model_type is
one of ARCHS); same conventions: float64 arithmetic on the float32 weights,
RoPE frequencies and angles rounded through float32 as transformers builds
them, causal teacher-forced positions 0..n-1.  A transliteration of the
text model of transformers v5.15.0 (models/qwen3_5_moe/modeling_qwen3_5_moe.py
Qwen3_5MoeTextModel, models/qwen3_next/modeling_qwen3_next.py
Qwen3NextModel, and their configuration files); the lines that matter are
quoted as "HF:".

The two families share everything but the DeltaNet input projections and
the FFN choice:

- layers are "linear_attention" (Gated DeltaNet) or "full_attention"
  (gated softmax attention), from config.layer_types, else every
  full_attention_interval-th layer (default 4) is full;
- every norm but the DeltaNet's output norm is zero-centred,
  x / sqrt(mean(x^2) + eps) * (1 + w);
- Gated DeltaNet: projections to q, k, v (conv_dim = 2 key_dim + value_dim),
  z, b, a; a causal depthwise conv1d (kernel linear_conv_kernel_dim, zero
  left padding, no bias) then SiLU on q|k|v; q and k l2-normalised per head
  (x / sqrt(sum(x^2) + 1e-6)), q scaled by head_k_dim^-0.5; beta =
  sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias); key heads repeated
  (repeat_interleave) to the value heads; the gated delta rule run token by
  token (the recurrent form; transformers' prefill runs the chunked form,
  which hf_check.py compares against); the output normed per value head,
  times norm.weight (plain, not 1 + w), times silu(z); out_proj;
- attention: q_proj gives per head head_dim query rows then head_dim gate
  rows; per-head zero-centred q_norm / k_norm, rotate-half RoPE on the first
  int(head_dim * partial_rotary_factor) dims, GQA, causal softmax scaled by
  head_dim^-0.5, output times sigmoid(gate), o_proj;
- MoE: softmax over all experts, top-k, renormalised (always for Qwen3.5;
  by norm_topk_prob for Qwen3-Next); plus the shared expert SwiGLU scaled by
  sigmoid(shared_expert_gate(x)); Qwen3-Next's mlp_only_layers (and layers
  off decoder_sparse_step) are a dense SwiGLU of intermediate_size.

Qwen3-Next stores q|k|v|z and b|a fused per key head (in_proj_qkvz,
in_proj_ba); the reference splits them as HF fix_query_key_value_ordering
does.  The MTP block (mtp.*) is not run: transformers ignores it
(_keys_to_ignore_on_load_unexpected = ["^mtp.*"]).  The vision tower of the
qwen3_5_moe layout is not read; text positions are equal on the three
M-RoPE axes, so the interleaved M-RoPE sections change no angle.
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_common  # noqa: E402
import safetensors_np as st  # noqa: E402

ARCHS = ("qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next")

# Defaults of the config classes (Qwen3_5MoeTextConfig, Qwen3NextConfig) for
# the fields the forward reads; a config.json without a field gets these.
DEFAULTS = {
    "qwen3_5": dict(vocab_size=248320, hidden_size=2048, num_hidden_layers=40,
                    num_attention_heads=16, num_key_value_heads=2, hidden_act="silu",
                    rms_norm_eps=1e-6, attention_bias=False, head_dim=256,
                    linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
                    linear_num_key_heads=16, linear_num_value_heads=32, moe_intermediate_size=512,
                    shared_expert_intermediate_size=512, num_experts_per_tok=8, num_experts=256,
                    tie_word_embeddings=False),
    "qwen3_next": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632,
                       num_hidden_layers=48, num_attention_heads=16, num_key_value_heads=2,
                       hidden_act="silu", rms_norm_eps=1e-6, attention_bias=False, head_dim=256,
                       linear_conv_kernel_dim=4, linear_key_head_dim=128,
                       linear_value_head_dim=128, linear_num_key_heads=16,
                       linear_num_value_heads=32, decoder_sparse_step=1,
                       moe_intermediate_size=512, shared_expert_intermediate_size=512,
                       num_experts_per_tok=10, num_experts=512, norm_topk_prob=True,
                       tie_word_embeddings=False),
}

# HF configuration_utils._LEGACY_LAYER_TYPE_REMAP
LEGACY_TYPES = {"conv": "linear_attention", "mamba": "linear_attention",
                "attention": "full_attention"}


def load(model_dir):
    """A Model for these families, or None for any other model_type."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") not in ARCHS:
        return None
    return Model(model_dir, cfg)


def zc_norm(x, w, eps):
    # HF Qwen3_5MoeRMSNorm / Qwen3NextRMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1.0 + w)


silu = ref_common.silu


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    # torch.nn.functional.softplus (beta 1, threshold 20: x itself above 20)
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def l2norm(x):
    # HF l2norm: x * rsqrt(sum(x^2) + 1e-6) over the head dimension
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + 1e-6)


def rope_config(t, defaults_partial):
    """(theta, partial_rotary_factor, params) as PreTrainedConfig resolves them
    (RotaryEmbeddingConfigMixin.convert_rope_params_to_dict): a truthy
    rope_scaling replaces rope_parameters; inside the dict rope_theta and
    partial_rotary_factor win over the top-level fields, which win over the
    defaults (theta 10000, factor 0.25 from the config's __post_init__)."""
    params = dict(t.get("rope_scaling") or t.get("rope_parameters") or {})
    theta = params.get("rope_theta", t.get("rope_theta", 10000.0))
    partial = params.get("partial_rotary_factor", t.get("partial_rotary_factor", defaults_partial))
    kind = params.get("rope_type", params.get("type", "default"))
    return float(theta), float(partial), kind, params


class Model(ref_common.Weights):
    def __init__(self, model_dir, cfg):
        self.cfg = cfg
        self.arch = cfg["model_type"]
        self.next = self.arch == "qwen3_next"
        # HF Qwen3_5MoeForCausalLM reads the text config; the VLM layout nests it.
        t = dict(DEFAULTS["qwen3_next" if self.next else "qwen3_5"])
        t.update((cfg.get("text_config") or {}) if self.arch == "qwen3_5_moe" else cfg)
        if self.arch == "qwen3_5_moe":
            t["tie_word_embeddings"] = cfg.get("tie_word_embeddings", False)
        self.t = t
        self.want_mtp = False
        self.hidden = t["hidden_size"]
        self.n_layers = t["num_hidden_layers"]
        self.vocab = t["vocab_size"]
        self.eps = t["rms_norm_eps"]
        if t["hidden_act"] != "silu":
            raise SystemExit("reference: hidden_act %r is not implemented" % t["hidden_act"])
        types = t.get("layer_types")
        if types is None:
            interval = t.get("full_attention_interval", 4)
            types = ["linear_attention" if (i + 1) % interval else "full_attention"
                     for i in range(self.n_layers)]
        self.layer_types = [LEGACY_TYPES.get(x, x) for x in types]
        if len(self.layer_types) < self.n_layers or any(
                x not in ("linear_attention", "full_attention") for x in self.layer_types):
            raise SystemExit("reference: layer_types %r do not give %d linear/full layers"
                             % (types, self.n_layers))
        # Attention.  HF: head_dim = getattr(config, "head_dim", ...) and the
        # config class always has the field (default 256).
        self.n_heads = t["num_attention_heads"]
        self.n_kv = t["num_key_value_heads"]
        self.head_dim = t.get("head_dim") or self.hidden // self.n_heads
        theta, partial, kind, _ = rope_config(t, 0.25)
        if kind != "default":
            raise SystemExit("reference: rope type %r is not implemented" % kind)
        # HF compute_default_rope_parameters: dim = int(head_dim * partial_rotary_factor)
        self.rot_dim = int(self.head_dim * partial)
        idx = np.arange(0, self.rot_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(self.rot_dim)
        self.inv_freq = (np.float32(1.0) / (np.float32(theta) ** idx)).astype(np.float32)
        self.rope_theta = theta
        self.attention_bias = bool(t["attention_bias"])
        # Gated DeltaNet
        self.nk, self.nv = t["linear_num_key_heads"], t["linear_num_value_heads"]
        self.dk, self.dv = t["linear_key_head_dim"], t["linear_value_head_dim"]
        self.conv_k = t["linear_conv_kernel_dim"]
        if self.nv % self.nk:
            raise SystemExit("reference: %d value heads do not group under %d key heads"
                             % (self.nv, self.nk))
        # MoE
        self.n_experts = t["num_experts"]
        self.top_k = t["num_experts_per_tok"]
        # HF Qwen3_5MoeTopKRouter always renormalises; Qwen3NextTopKRouter
        # when norm_topk_prob.
        self.norm_topk = bool(t["norm_topk_prob"]) if self.next else True
        self.tensors = st.load_dir(model_dir)
        self.prefix = ("model.language_model." if "model.language_model.embed_tokens.weight" in self.tensors
                       else "model.")
        self._cache = {}

    def is_moe(self, L):
        # HF Qwen3NextDecoderLayer: sparse unless in mlp_only_layers, when
        # num_experts > 0 and (layer + 1) % decoder_sparse_step == 0; every
        # Qwen3.5-MoE layer is sparse.
        if not self.next:
            return True
        t = self.t
        return (L not in (t.get("mlp_only_layers") or []) and self.n_experts > 0
                and (L + 1) % t["decoder_sparse_step"] == 0)

    # ------------------------------------------------------------ weights

    def experts(self, p):
        """(gate [E, I, H], up [E, I, H], down [E, H, I]) under p ('...mlp.')."""
        m = p + "experts."
        if self.has(m + "gate_up_proj"):
            # HF: gate, up = linear(x, gate_up_proj[e]).chunk(2, dim=-1)
            gu = self.w(m + "gate_up_proj")
            inter = gu.shape[1] // 2
            return gu[:, :inter], gu[:, inter:], self.w(m + "down_proj")
        return tuple(np.stack([self.w("%s%d.%s.weight" % (m, e, part)) for e in range(self.n_experts)])
                     for part in ("gate_proj", "up_proj", "down_proj"))

    # ------------------------------------------------------------ Gated DeltaNet

    def deltanet_inputs(self, p, h):
        """(mixed_qkv [n, conv_dim], z [n, nv, dv], b [n, nv], a [n, nv])."""
        n = h.shape[0]
        nk, nv, dk, dv = self.nk, self.nv, self.dk, self.dv
        if not self.next:
            qkv = self.linear(h, p + "in_proj_qkv")
            z = self.linear(h, p + "in_proj_z").reshape(n, nv, dv)
            return qkv, z, self.linear(h, p + "in_proj_b"), self.linear(h, p + "in_proj_a")
        # HF Qwen3NextGatedDeltaNet.fix_query_key_value_ordering: per key head
        # [q (dk) | k (dk) | v (r*dv) | z (r*dv)] and [b (r) | a (r)], r = nv / nk.
        r = nv // nk
        qkvz = self.linear(h, p + "in_proj_qkvz").reshape(n, nk, 2 * dk + 2 * r * dv)
        ba = self.linear(h, p + "in_proj_ba").reshape(n, nk, 2 * r)
        q, k = qkvz[..., :dk], qkvz[..., dk:2 * dk]
        v = qkvz[..., 2 * dk:2 * dk + r * dv]
        z = qkvz[..., 2 * dk + r * dv:].reshape(n, nv, dv)
        b, a = ba[..., :r].reshape(n, nv), ba[..., r:].reshape(n, nv)
        qkv = np.concatenate([q.reshape(n, -1), k.reshape(n, -1), v.reshape(n, -1)], axis=-1)
        return qkv, z, b, a

    def deltanet(self, L, h):
        """HF Qwen3_5MoeGatedDeltaNet / Qwen3NextGatedDeltaNet, no cache."""
        p = self.prefix + "layers.%d.linear_attn." % L
        n = h.shape[0]
        nk, nv, dk, dv, K = self.nk, self.nv, self.dk, self.dv, self.conv_k
        qkv, z, b, a = self.deltanet_inputs(p, h)
        # HF causal_conv1d_fn: depthwise conv1d, padding K-1, first n outputs,
        # i.e. out[t] = sum_j w[:, j] * x[t - (K-1) + j] with zeros before 0; SiLU.
        cw = self.w(p + "conv1d.weight")[:, 0, :]                     # [conv_dim, K]
        xp = np.concatenate([np.zeros((K - 1, qkv.shape[1])), qkv], axis=0)
        conv = np.zeros_like(qkv)
        for j in range(K):
            conv += xp[j:j + n] * cw[:, j]
        if self.has(p + "conv1d.bias"):
            conv += self.w(p + "conv1d.bias")
        conv = silu(conv)
        kd = nk * dk
        q = conv[:, :kd].reshape(n, nk, dk)
        k = conv[:, kd:2 * kd].reshape(n, nk, dk)
        v = conv[:, 2 * kd:].reshape(n, nv, dv)
        beta = sigmoid(b)                                              # [n, nv]
        g = -np.exp(self.w(p + "A_log")) * softplus(a + self.w(p + "dt_bias"))
        r = nv // nk
        # HF: query.repeat_interleave(nv // nk, dim=2): value head h reads key head h // r.
        q = np.repeat(q, r, axis=1)
        k = np.repeat(k, r, axis=1)
        # HF torch_*_gated_delta_rule(use_qk_l2norm_in_kernel=True): l2norm,
        # then q * head_k_dim^-0.5.
        q = l2norm(q) * dk ** -0.5
        k = l2norm(k)
        out = np.empty((n, nv, dv))
        for hd in range(nv):
            S = np.zeros((dk, dv))                                     # state [dk, dv]
            for t in range(n):
                S = S * np.exp(g[t, hd])
                kv_mem = k[t, hd] @ S                                  # [dv]
                delta = (v[t, hd] - kv_mem) * beta[t, hd]
                S = S + np.outer(k[t, hd], delta)
                out[t, hd] = q[t, hd] @ S
        # HF Qwen3_5MoeRMSNormGated: norm per value head, times weight (plain),
        # times silu(z).
        y = out / np.sqrt(np.mean(out * out, axis=-1, keepdims=True) + self.eps)
        y = y * self.w(p + "norm.weight") * silu(z)
        return self.linear(y.reshape(n, nv * dv), p + "out_proj")

    # ------------------------------------------------------------ attention

    def rope_tables(self, n):
        ang = (np.arange(n, dtype=np.float32)[:, None] * self.inv_freq[None, :]).astype(np.float32)
        ang = ang.astype(np.float64)
        return np.cos(ang), np.sin(ang)

    def rope(self, x, cos, sin):
        """Rotate-half on the first rot_dim dims of x [n, heads, d]; the rest passes."""
        rd = self.rot_dim
        h = rd // 2
        c, s = cos[:, None, :], sin[:, None, :]
        a, b = x[..., :h], x[..., h:rd]
        return np.concatenate([a * c - b * s, b * c + a * s, x[..., rd:]], axis=-1)

    def attention(self, p, h, cos, sin):
        """HF Qwen3_5MoeAttention / Qwen3NextAttention (eager), no cache."""
        n = h.shape[0]
        nh, nkv, hd = self.n_heads, self.n_kv, self.head_dim
        # HF: q, gate = chunk(q_proj(x).view(n, -1, 2*head_dim), 2, dim=-1)
        qg = self.linear(h, p + "q_proj").reshape(n, nh, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:].reshape(n, nh * hd)
        q = zc_norm(q, self.w(p + "q_norm.weight"), self.eps)
        k = zc_norm(self.linear(h, p + "k_proj").reshape(n, nkv, hd), self.w(p + "k_norm.weight"), self.eps)
        v = self.linear(h, p + "v_proj").reshape(n, nkv, hd)
        q = self.rope(q, cos, sin)
        k = self.rope(k, cos, sin)
        allowed = np.arange(n)[None, :] <= np.arange(n)[:, None]
        group = nh // nkv
        out = np.empty((n, nh, hd))
        for head in range(nh):
            kvh = head // group                  # HF repeat_kv
            s = (q[:, head] @ k[:, kvh].T) * hd ** -0.5
            s = np.where(allowed, s, -np.inf)
            s = s - s.max(axis=-1, keepdims=True)
            e = np.exp(s)
            out[:, head] = (e / e.sum(axis=-1, keepdims=True)) @ v[:, kvh]
        out = out.reshape(n, nh * hd) * sigmoid(gate)
        return self.linear(out, p + "o_proj")

    # ------------------------------------------------------------ FFN

    def mlp(self, p, h):
        return self.linear(silu(self.linear(h, p + "gate_proj")) * self.linear(h, p + "up_proj"),
                           p + "down_proj")

    def moe(self, L, p, h, record):
        """HF Qwen3_5MoeSparseMoeBlock / Qwen3NextSparseMoeBlock."""
        logits = h @ self.w(p + "gate.weight").T
        top, weights, margins = ref_common.softmax_topk(logits, self.top_k, self.norm_topk)
        out = ref_common.routed_sum(h, top, weights, *self.experts(p))
        # HF: shared_expert(x) * sigmoid(shared_expert_gate(x)), added.
        out += sigmoid(self.linear(h, p + "shared_expert_gate")) * self.mlp(p + "shared_expert.", h)
        record.append({"layer": L, "experts": top.tolist(), "weights": weights.tolist(),
                       "margins": margins.tolist()})
        return out

    # ------------------------------------------------------------ model

    def forward(self, tokens):
        """(logits [n, vocab], hidden [L+1, n, H], routing records)."""
        n = len(tokens)
        P = self.prefix
        x = self.w(P + "embed_tokens.weight")[np.asarray(tokens)]
        cos, sin = self.rope_tables(n)
        hidden = [x.copy()]
        routing = []
        for L in range(self.n_layers):
            p = P + "layers.%d." % L
            h = zc_norm(x, self.w(p + "input_layernorm.weight"), self.eps)
            if self.layer_types[L] == "linear_attention":
                x = x + self.deltanet(L, h)
            else:
                x = x + self.attention(p + "self_attn.", h, cos, sin)
            h = zc_norm(x, self.w(p + "post_attention_layernorm.weight"), self.eps)
            x = x + (self.moe(L, p + "mlp.", h, routing) if self.is_moe(L) else self.mlp(p + "mlp.", h))
            hidden.append(x.copy())
        xn = zc_norm(x, self.w(P + "norm.weight"), self.eps)
        head = "lm_head.weight"
        if not self.has(head) and self.t.get("tie_word_embeddings"):
            head = P + "embed_tokens.weight"
        logits = xn @ self.w(head).T
        return logits, np.stack(hidden), routing
