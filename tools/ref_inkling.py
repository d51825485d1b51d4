"""Reference forward pass of Inkling's text model in numpy, written from
transformers v5.15.0 (models/inkling/modeling_inkling.py:
InklingForConditionalGeneration / InklingModel / InklingTextModel, its
configuration_inkling.py, masking_utils' causal and sliding masks, and the
"inkling_mm_model" rules of conversion_mapping.py with core_model_loading's
Interleave and Chunk, applied here by this file itself) as it runs with the
model loaded in float32; reference.py's --model dispatches here for
model_type inkling_mm_model (config.json's text_config) or inkling_text
(a flat text config).  The arithmetic is float64 on the float32 weights.
What the family does, marked "HF:" below:

- embeddings: embed rows, then embed_norm (an RMSNorm) before layer 0;
- each layer: x += sconv_a(attn(input_layernorm(x))), then
  x += sconv_m(mlp(post_attention_layernorm(x))); sconv(y) = y + causal
  depthwise conv1d(y) over the sequence, kernel K, zero history;
- attention: no RoPE; q = q_proj(x), k = k_sconv(k_proj(x)),
  v = v_sconv(v_proj(x)); q and k RMS-normed per head (q_norm / k_norm of
  [head_dim]); scores q.k / head_dim (not sqrt) plus a relative bias
  bias[h, t, j] = (r[t, h] @ rel_logits_proj.proj)[t - j] for
  0 <= t - j < extent, else 0, with r = r_proj(x) [n, heads, d_rel];
  "hybrid_sliding" layers have their own heads / kv heads / head_dim (swa_*),
  extent sliding_window_size and a sliding mask (query t sees keys
  t - window < j <= t); "hybrid" layers are causal with extent rel_extent and,
  when log_scaling_n_floor is set, q and the bias multiplied by
  tau(t) = 1 + alpha * log(max((t + 1) / floor, 1));
- MLP: "dense" layers down(silu(gate(x)) * up(x)) * mlp.global_scale;
  "sparse" layers one sigmoid router over E routed + S shared experts'
  logits; the routed choice is top-k of sigmoid(logit) + gate.bias; the
  weights over [chosen, shared] are sigmoid(l) / sum sigmoid(l) (HF:
  exp(logsigmoid - logsumexp(logsigmoid))), times route_scale *
  gate.global_scale; routed experts weighted by theirs, shared expert s by
  its own (no renormalisation after the cut to the routed ones);
- head: final norm, / logits_mup_width_multiplier, lm_head (= unembed),
  logits cut to unpadded_vocab_size.

Released names (model.llm.*, w13 interleaved g0, u0, g1, u1, ...) are
converted as conversion_mapping's rules do: Interleave(dim) (non-inverse:
new index s * n/2 + i = old 2i + s), then Chunk into gate and up for the
dense and shared w13; model.visual.*, model.audio.* and model.mtp.* are not
read.
"""

import json
import os

import numpy as np

import ref_common
import safetensors_np as st

MODEL_TYPES = ("inkling_mm_model", "inkling_text")

# InklingTextConfig.attribute_map: alias -> field
ALIASES = {"embedding_multiplier": "logits_mup_width_multiplier", "sliding_window": "sliding_window_size",
           "num_local_experts": "n_routed_experts", "sconv_kernel_size": "conv_kernel_size",
           "model_max_length": "max_position_embeddings"}

# InklingTextConfig defaults of the fields the forward pass reads
DEFAULTS = dict(vocab_size=201024, unpadded_vocab_size=None, hidden_size=6144, num_hidden_layers=66,
                num_attention_heads=64, num_key_value_heads=8, head_dim=128, swa_num_attention_heads=64,
                swa_num_key_value_heads=16, swa_head_dim=128, sliding_window_size=512, d_rel=16,
                rel_extent=1024, log_scaling_n_floor=None, log_scaling_alpha=0.1, local_layer_ids=None,
                layer_types=None, rms_norm_eps=1e-6, conv_kernel_size=4, mlp_layer_types=None,
                intermediate_size=24576, hidden_act="silu", moe_intermediate_size=3072,
                n_routed_experts=256, num_experts_per_tok=6, n_shared_experts=2, route_scale=8.0,
                logits_mup_width_multiplier=24.0)


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    return Model(model_dir, cfg) if cfg.get("model_type") in MODEL_TYPES else None


def text_config(cfg, where="config.json"):
    """The InklingTextConfig fields as its __post_init__ resolves them."""
    raw = cfg.get("text_config") if cfg.get("model_type") == "inkling_mm_model" else cfg
    if not isinstance(raw, dict):
        raise SystemExit("reference: %s: inkling_mm_model without a text_config object" % where)
    t = dict(DEFAULTS)
    kw = {}
    for k, v in raw.items():
        k = ALIASES.get(k, k)
        if k in DEFAULTS:
            t[k] = v
        else:
            kw[k] = v
    n = t["num_hidden_layers"]
    if t["layer_types"] is None:
        # HF: every sixth layer global unless local_layer_ids says otherwise
        local = set(t["local_layer_ids"]) if t["local_layer_ids"] is not None else \
            {i for i in range(n) if (i + 1) % 6}
        t["layer_types"] = ["hybrid_sliding" if i in local else "hybrid" for i in range(n)]
    if t["mlp_layer_types"] is None:
        dense = kw.get("dense_mlp_idx", 0)
        t["mlp_layer_types"] = ["dense" if i < dense else "sparse" for i in range(n)]
    if kw.get("dense_intermediate_size") is not None:
        t["intermediate_size"] = kw["dense_intermediate_size"]
    for key in ("layer_types", "mlp_layer_types"):
        if len(t[key]) != n:
            raise SystemExit("reference: %s: %s has %d entries for %d layers" % (where, key, len(t[key]), n))
    for lt in t["layer_types"]:
        if lt not in ("hybrid", "hybrid_sliding"):
            raise SystemExit("reference: %s: layer type %r is not hybrid / hybrid_sliding" % (where, lt))
    for mt in t["mlp_layer_types"]:
        if mt not in ("dense", "sparse"):
            raise SystemExit("reference: %s: mlp layer type %r is not dense / sparse" % (where, mt))
    if t["hidden_act"] != "silu":
        raise SystemExit("reference: %s: hidden_act %r is not implemented" % (where, t["hidden_act"]))
    return t


def interleave(w, dim):
    """core_model_loading.Interleave(dim), not inverse: [g0, u0, g1, u1, ...]
    along dim -> [g0, g1, ..., u0, u1, ...]."""
    shape = list(w.shape)
    split = shape[:dim] + [shape[dim] // 2, 2] + shape[dim + 1:]
    return np.swapaxes(w.reshape(split), dim, dim + 1).reshape(shape)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def short_conv(y, w):
    """InklingShortConvolution: y + causal depthwise conv1d(y); y [n, C],
    w [C, 1, K] (or [C, K]); out[t] = y[t] + sum_j w[:, j] y[t - (K-1) + j]."""
    w = w.reshape(w.shape[0], -1)
    K = w.shape[1]
    n = y.shape[0]
    pad = np.concatenate([np.zeros((K - 1, y.shape[1])), y], axis=0)
    out = np.zeros_like(y)
    for j in range(K):
        out += w[:, j] * pad[j:j + n]
    return y + out


class Model(ref_common.Weights):
    def __init__(self, model_dir, cfg):
        self.cfg = cfg
        self.arch = "inkling"
        t = self.t = text_config(cfg, os.path.join(model_dir, "config.json"))
        self.hidden = t["hidden_size"]
        self.n_layers = t["num_hidden_layers"]
        self.eps = t["rms_norm_eps"]
        self.vocab_stored = t["vocab_size"]
        u = t["unpadded_vocab_size"]
        # HF: the logits are cut only when unpadded_vocab_size is smaller
        self.vocab = u if u is not None and u < self.vocab_stored else self.vocab_stored
        self.top_k = t["num_experts_per_tok"]
        self.n_experts = t["n_routed_experts"]
        self.n_shared = t["n_shared_experts"]
        self.tensors = st.load_dir(model_dir)
        self.model_dir = model_dir
        if "model.llm.embed.weight" not in self.tensors:
            raise SystemExit("reference: %s: no model.llm.embed.weight (not the released Inkling layout)"
                             % model_dir)
        self.skipped = sorted(n for n in self.tensors if not n.startswith("model.llm."))

    def r(self, name):
        """A released tensor (model.llm. + name) as float64."""
        return self.w("model.llm." + name)

    def layer_dims(self, layer):
        t = self.t
        if t["layer_types"][layer] == "hybrid_sliding":
            return (t["swa_num_attention_heads"], t["swa_num_key_value_heads"], t["swa_head_dim"],
                    t["sliding_window_size"], t["sliding_window_size"])
        return t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"], t["rel_extent"], None

    def attention(self, layer, x):
        p = "layers.%d.attn." % layer
        n = x.shape[0]
        nh, nkv, hd, extent, window = self.layer_dims(layer)
        d_rel = self.t["d_rel"]
        q = (x @ self.r(p + "wq_du.weight").T).reshape(n, nh, hd)
        k = short_conv(x @ self.r(p + "wk_dv.weight").T, self.r(p + "k_sconv.weight")).reshape(n, nkv, hd)
        v = short_conv(x @ self.r(p + "wv_dv.weight").T, self.r(p + "v_sconv.weight")).reshape(n, nkv, hd)
        rel_states = (x @ self.r(p + "wr_du.weight").T).reshape(n, nh, d_rel)
        q = ref_common.rms_norm(q, self.r(p + "q_norm.weight"), self.eps)
        k = ref_common.rms_norm(k, self.r(p + "k_norm.weight"), self.eps)
        proj = self.r(p + "rel_logits_proj.proj")
        if proj.shape != (d_rel, extent):
            raise SystemExit("reference: %s: layer %d rel_logits_proj.proj is %s, want [%d, %d]"
                             % (self.model_dir, layer, list(proj.shape), d_rel, extent))
        rel = rel_states @ proj                                  # [n, nh, extent]
        ti, ji = np.arange(n)[:, None], np.arange(n)[None, :]
        dist = ti - ji
        inside = (dist >= 0) & (dist < extent)
        bias = np.where(inside[None], np.take_along_axis(
            rel.transpose(1, 0, 2), np.broadcast_to(np.clip(dist, 0, extent - 1)[None], (nh, n, n)), axis=-1), 0.0)
        floor = self.t["log_scaling_n_floor"]
        if window is None and floor is not None:
            # HF: computed in float32 from the positions; (t + 1) / floor
            tau = 1.0 + self.t["log_scaling_alpha"] * np.log(np.maximum((np.arange(n) + 1.0) / floor, 1.0))
            q = q * tau[:, None, None]
            bias = bias * tau[None, :, None]
        allowed = dist >= 0
        if window is not None:
            # masking_utils.sliding_window_overlay: kv_idx > q_idx - sliding_window
            allowed = allowed & (dist < window)
        group = nh // nkv
        out = np.empty((n, nh, hd))
        for h in range(nh):
            s = (q[:, h] @ k[:, h // group].T) / hd + bias[h]
            s = np.where(allowed, s, -np.inf)
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            out[:, h] = (e / e.sum(axis=-1, keepdims=True)) @ v[:, h // group]
        return out.reshape(n, nh * hd) @ self.r(p + "wo_ud.weight").T

    def dense_mlp(self, layer, x):
        p = "layers.%d.mlp." % layer
        w13 = interleave(self.r(p + "w13_dn.weight"), 0)
        gate, up = np.split(w13, 2, axis=0)
        return ref_common.swiglu(x, gate, up, self.r(p + "w2_md.weight")) * self.r(p + "global_scale")[0]

    def moe(self, layer, x, record):
        p = "layers.%d.mlp." % layer
        E, S, k = self.n_experts, self.n_shared, self.top_k
        logits = x @ self.r(p + "gate.weight").T                 # [n, E + S]
        if logits.shape[1] != E + S:
            raise SystemExit("reference: %s: layer %d mlp.gate.weight has %d rows, want %d routed + %d shared"
                             % (self.model_dir, layer, logits.shape[1], E, S))
        choice = sigmoid(logits[:, :E]) + self.r(p + "gate.bias")
        order = np.argsort(-choice, axis=-1, kind="stable")
        top = order[:, :k]
        kth = np.take_along_axis(choice, order[:, k - 1:k], axis=-1)[:, 0]
        nxt = np.take_along_axis(choice, order[:, k:k + 1], axis=-1)[:, 0] if k < E else kth - np.inf
        sel = np.concatenate([np.take_along_axis(logits[:, :E], top, axis=-1), logits[:, E:]], axis=-1)
        sg = sigmoid(sel)
        weights = sg / sg.sum(axis=-1, keepdims=True)
        weights = weights * self.t["route_scale"] * self.r(p + "gate.global_scale")[0]
        w13 = interleave(self.r(p + "experts.w13_weight"), 1)    # [E, 2I, H]: gate rows, then up rows
        gate, up = np.split(w13, 2, axis=1)
        out = ref_common.routed_sum(x, top, weights[:, :k], gate, up, self.r(p + "experts.w2_weight"))
        sw13 = interleave(self.r(p + "shared_experts.shared_w13_weight"), 1)
        sgate, sup = np.split(sw13, 2, axis=1)
        sdown = self.r(p + "shared_experts.shared_w2_weight")
        for s in range(S):
            out += weights[:, k + s:k + s + 1] * ref_common.swiglu(x, sgate[s], sup[s], sdown[s])
        record.append({"layer": layer, "experts": top.tolist(), "weights": weights[:, :k].tolist(),
                       "shared": weights[:, k:].tolist(), "margins": (kth - nxt).tolist()})
        return out

    def forward(self, tokens):
        emb = self.tensors["model.llm.embed.weight"]
        n = len(tokens)
        x = st.to_f32(st.Tensor(emb.dtype, (n, emb.shape[1]), emb.raw[np.asarray(tokens)])).astype(np.float64)
        x = ref_common.rms_norm(x, self.r("embed_norm.weight"), self.eps)
        hidden, routing = [x.copy()], []
        for layer in range(self.n_layers):
            p = "layers.%d." % layer
            a = self.attention(layer, ref_common.rms_norm(x, self.r(p + "attn_norm.weight"), self.eps))
            x = x + short_conv(a, self.r(p + "attn_sconv.weight"))
            h = ref_common.rms_norm(x, self.r(p + "mlp_norm.weight"), self.eps)
            if self.t["mlp_layer_types"][layer] == "dense":
                m = self.dense_mlp(layer, h)
            else:
                m = self.moe(layer, h, routing)
            x = x + short_conv(m, self.r(p + "mlp_sconv.weight"))
            hidden.append(x.copy())
        x = ref_common.rms_norm(x, self.r("norm.weight"), self.eps) / self.t["logits_mup_width_multiplier"]
        logits = x @ self.r("unembed.weight").T
        return logits[:, :self.vocab], np.stack(hidden), routing

    def note(self):
        return ("reference: inkling: %d tensors outside model.llm.* not read (%s)\n"
                % (len(self.skipped), ", ".join(sorted({".".join(s.split(".")[:2]) for s in self.skipped}))))
