"""Softmax top-k routing as the transformers routers of OLMoE, Qwen3-MoE,
Mixtral, Qwen3.5-MoE and Qwen3-Next compute it, for the numpy references
(reference.py, ref_qwen35.py): softmax over all experts, the k most
probable (stable order), optionally renormalised, with the margin between
the k-th and the (k+1)-th probability of each token."""

import numpy as np


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
