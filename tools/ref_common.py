"""What the numpy references share (reference.py, ref_deepseek.py,
ref_qwen35.py): softmax top-k routing as the transformers routers of OLMoE,
Qwen3-MoE, Mixtral, Qwen3.5-MoE and Qwen3-Next compute it, and the
checkpoint's weights as float64 arrays, SiLU and the routed experts' sum."""

import numpy as np

import safetensors_np as st


class Weights:
    """A checkpoint's tensors (self.tensors, from safetensors_np.load_dir)
    read once each as float64; FP8 e4m3 ones dequantized with their
    NAME_scale_inv blocks of self.fp8_block (None: FP8 is refused)."""

    fp8_block = None

    def has(self, name):
        return name in self.tensors

    def w(self, name):
        cache = self.__dict__.setdefault("_cache", {})
        if name in cache:
            return cache[name]
        if name not in self.tensors:
            raise SystemExit("reference: checkpoint has no tensor %r" % name)
        t = self.tensors[name]
        if t.dtype == "F8_E4M3":
            if self.fp8_block is None:
                raise SystemExit("reference: fp8 weights are not implemented for %s" % self.arch)
            s = self.tensors.get(name + "_scale_inv")
            if s is None:
                raise SystemExit("reference: fp8 tensor %r has no %s_scale_inv" % (name, name))
            v = st.fp8_block_dequantize(t.raw, st.to_f32(s), self.fp8_block).astype(np.float64)
        else:
            v = st.to_f32(t).astype(np.float64)
        cache[name] = v
        return v

    def linear(self, x, name):
        y = x @ self.w(name + ".weight").T
        if self.has(name + ".bias"):
            y = y + self.w(name + ".bias")
        return y


def rms_norm(x, weight, eps):
    """HF *RMSNorm: weight * (x * rsqrt(mean(x^2) + eps)) over the last axis."""
    var = np.mean(x * x, axis=-1, keepdims=True)
    return weight * (x / np.sqrt(var + eps))


def prenorm_decoder(m, tokens, cos, sin):
    """The decoder loop the pre-norm families share (ref_minimax_m2.py,
    ref_gpt_oss.py): embeddings, then per layer x += attention(norm(x)) and
    x += moe(norm(x)), the final norm and the head (the embedding when tied
    and no lm_head is stored; untied, lm_head must be there).  m gives n_layers, eps, tensors, w(), has(),
    attention(layer, h, cos, sin), moe(layer, h, routing) and may set tie.
    Returns (logits [n, vocab], hidden [L+1, n, H], routing records)."""
    emb = m.tensors["model.embed_tokens.weight"]
    n = len(tokens)
    x = st.to_f32(st.Tensor(emb.dtype, (n, emb.shape[1]), emb.raw[np.asarray(tokens)])).astype(np.float64)
    hidden, routing = [x.copy()], []
    for layer in range(m.n_layers):
        p = "model.layers.%d." % layer
        x = x + m.attention(layer, rms_norm(x, m.w(p + "input_layernorm.weight"), m.eps), cos, sin)
        x = x + m.moe(layer, rms_norm(x, m.w(p + "post_attention_layernorm.weight"), m.eps), routing)
        hidden.append(x.copy())
    x = rms_norm(x, m.w("model.norm.weight"), m.eps)
    tie = getattr(m, "tie", False)
    head = "lm_head.weight" if m.has("lm_head.weight") or not tie else "model.embed_tokens.weight"
    return x @ m.w(head).T, np.stack(hidden), routing


def softmax_topk(logits, top_k, norm):
    """(top [T, k] expert ids, weights [T, k], margins [T]) of router logits [T, E]."""
    z = logits - logits.max(axis=-1, keepdims=True)
    probs = np.exp(z)
    probs /= probs.sum(axis=-1, keepdims=True)
    order = np.argsort(-probs, axis=-1, kind="stable")
    top = order[:, :top_k]
    weights = np.take_along_axis(probs, top, axis=-1)
    if norm:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    if top_k < logits.shape[-1]:
        kth = np.take_along_axis(probs, order[:, top_k - 1:top_k], axis=-1)[:, 0]
        nxt = np.take_along_axis(probs, order[:, top_k:top_k + 1], axis=-1)[:, 0]
        margins = kth - nxt
    else:
        margins = np.full(logits.shape[0], np.inf)
    return top, weights, margins


def silu(x):
    return x / (1.0 + np.exp(-x))


def swiglu(x, gate, up, down):
    """down(silu(gate(x)) * up(x)) for the [out, in] matrices of nn.Linear."""
    return (silu(x @ gate.T) * (x @ up.T)) @ down.T


def routed_sum(h, top, weights, gate, up, down):
    """Each token's chosen experts [E, ...] run on it and weighted, summed
    in slot order."""
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        for slot in range(top.shape[1]):
            e = top[t, slot]
            out[t] += weights[t, slot] * swiglu(h[t], gate[e], up[e], down[e])
    return out
