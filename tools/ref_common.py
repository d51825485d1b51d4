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
