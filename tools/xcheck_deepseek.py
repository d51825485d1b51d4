#!/usr/bin/python3
"""Cross-check of ref_deepseek.py: a second, independent float32
transliteration of the transformers code for deepseek_v3, glm4_moe,
deepseek_v32 and glm_moe_dsa (modeling_*.py: the Attention classes, the
DSA Indexer, the routers), and of vLLM's DeepSeekMultiTokenPredictorLayer
for the MTP head.

    xcheck_deepseek.py --model HF_DIR --tokens FILE.tokens --ref FILE.f32
                       [--mtp-ref FILE.mtp.f32] [--tol 1e-5]

Everything here is float32 and shaped like the torch code ([B, H, S, D]
tensors, view/transpose/reshape, repeat_kv, an additive causal mask of
finfo.min, softmax, the one-hot expert loop with index_add, torch.topk
semantics), so it shares no arithmetic with the float64 reference.  The
DSA indexer keeps torch's form too: per-head relu(q.k) weighted by
weights_proj, the finfo.min causal mask added, topk, and the keep set
scattered into an index mask (a bool mask filled with finfo.min for
deepseek_v32, a -inf mask added for glm_moe_dsa).  RoPE pairing as
transformers v5.15.0 has it, reading no flag: deepseek_v32 interleaves MLA
and rotates halves in the indexer, glm_moe_dsa interleaves both.  It
prints the
largest logit difference relative to the logits' largest magnitude, the
smallest float32 router and indexer margins (a selection closer than the
float32 error could flip), and exits 1 when the difference exceeds --tol.
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np as st  # noqa: E402

F = np.float32


class W:
    def __init__(self, d):
        self.t = st.load_dir(d)
        with open(os.path.join(d, "config.json")) as f:
            self.c = json.load(f)
        q = self.c.get("quantization_config") or {}
        self.block = tuple(q.get("weight_block_size") or (128, 128))

    def __contains__(self, k):
        return k in self.t

    def __getitem__(self, k):
        t = self.t[k]
        if t.dtype == "F8_E4M3":
            return st.fp8_block_dequantize(t.raw, st.to_f32(self.t[k + "_scale_inv"]), self.block)
        return st.to_f32(t)


def linear(x, w, b=None):
    y = np.matmul(x, w.T).astype(F)
    return y if b is None else (y + b).astype(F)


def rmsnorm(x, w, eps):
    var = np.mean(np.square(x, dtype=F), axis=-1, keepdims=True, dtype=F)
    return (w * (x * (F(1) / np.sqrt(var + F(eps))).astype(F))).astype(F)


def layernorm(x, w, b, eps):
    """nn.LayerNorm: biased variance over the last dim, then weight and bias."""
    mean = np.mean(x, axis=-1, keepdims=True, dtype=F)
    var = np.mean(np.square(x - mean, dtype=F), axis=-1, keepdims=True, dtype=F)
    return ((x - mean) / np.sqrt(var + F(eps)) * w + b).astype(F)


def silu(x):
    return (x * (F(1) / (F(1) + np.exp(-x)))).astype(F)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rope_interleave(x, cos, sin):
    """apply_rotary_pos_emb_interleave (modeling_deepseek_v32.py): pairs
    (x[2i], x[2i+1]) rotated by angle i, written as [evens | odds], which
    permutes q and k alike and so leaves q.k as the complex form has it."""
    h = cos.shape[-1] // 2
    cos, sin = cos[..., :h], sin[..., :h]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(F)


def rope_half(x, cos, sin):
    """apply_rotary_pos_emb: pairs (x[i], x[i + d/2])."""
    return (x * cos + rotate_half(x) * sin).astype(F)


def yarn(cfg, rp, dim):
    """modeling_rope_utils._compute_yarn_parameters (transformers v5)."""
    base = rp.get("rope_theta", cfg.get("rope_theta"))
    factor = rp["factor"]
    attention_factor = rp.get("attention_factor")
    mscale = rp.get("mscale")
    mscale_all_dim = rp.get("mscale_all_dim")
    original_max_position_embeddings = rp["original_max_position_embeddings"]

    def get_mscale(scale, mscale=1):
        if scale <= 1:
            return 1.0
        return 0.1 * mscale * math.log(scale) + 1.0
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
        else:
            attention_factor = get_mscale(factor)
    beta_fast = rp.get("beta_fast") or 32
    beta_slow = rp.get("beta_slow") or 1

    def find_correction_dim(num_rotations, dim, base, max_position_embeddings):
        return (dim * math.log(max_position_embeddings / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    def find_correction_range(low_rot, high_rot, dim, base, max_position_embeddings, truncate):
        low = find_correction_dim(low_rot, dim, base, max_position_embeddings)
        high = find_correction_dim(high_rot, dim, base, max_position_embeddings)
        if truncate:
            low = math.floor(low)
            high = math.ceil(high)
        return max(low, 0), min(high, dim - 1)

    def linear_ramp_factor(mn, mx, dim):
        if mn == mx:
            mx += 0.001
        linear_func = (np.arange(dim, dtype=F) - F(mn)) / F(mx - mn)
        return np.clip(linear_func.astype(F), 0, 1).astype(F)

    pos_freqs = np.power(F(base), np.arange(0, dim, 2).astype(F) / F(dim)).astype(F)
    inv_freq_extrapolation = (F(1.0) / pos_freqs).astype(F)
    inv_freq_interpolation = (F(1.0) / (F(factor) * pos_freqs)).astype(F)
    truncate = rp.get("truncate", True)
    low, high = find_correction_range(beta_fast, beta_slow, dim, base, original_max_position_embeddings, truncate)
    inv_freq_extrapolation_factor = (F(1) - linear_ramp_factor(low, high, dim // 2)).astype(F)
    inv_freq = (inv_freq_interpolation * (F(1) - inv_freq_extrapolation_factor)
                + inv_freq_extrapolation * inv_freq_extrapolation_factor).astype(F)
    return inv_freq, attention_factor


class Net:
    def __init__(self, d):
        self.w = W(d)
        c = self.c = self.w.c
        self.v32 = c["model_type"] == "deepseek_v32"
        self.glm_dsa = c["model_type"] == "glm_moe_dsa"
        self.dsa = self.v32 or self.glm_dsa
        self.ds = c["model_type"] == "deepseek_v3" or self.dsa         # MLA attention
        # transformers v5 reads rope_parameters; older configs carry rope_scaling.
        rp = dict(c.get("rope_scaling") or c.get("rope_parameters") or {})
        rp.setdefault("rope_theta", c.get("rope_theta"))
        rtype = rp.get("rope_type", rp.get("type", "default"))
        if self.ds:
            dim = c["qk_rope_head_dim"]           # the configs set head_dim = qk_rope_head_dim
        else:
            hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
            dim = int(hd * c.get("partial_rotary_factor", 1.0))
        if rtype == "yarn":
            self.inv_freq, self.attention_scaling = yarn(c, rp, dim)
        else:
            self.inv_freq = (F(1.0) / np.power(F(rp["rope_theta"]), np.arange(0, dim, 2).astype(F) / F(dim))).astype(F)
            self.attention_scaling = 1.0
        self.rp, self.rtype = rp, rtype
        if self.dsa:
            # transformers v5.15.0: DeepseekV32Attention and GlmMoeDsaAttention
            # call apply_rotary_pos_emb_interleave; DeepseekV32Indexer calls
            # apply_rotary_pos_emb, GlmMoeDsaIndexer the interleaved one.  No
            # flag is read (GLM-5's release sets rope_interleave and
            # indexer_rope_interleave true, which agrees).
            self.mla_interleave = True
            self.index_interleave = self.glm_dsa
            # GlmMoeDsaConfig.__post_init__: indexer_types, else
            # index_topk_pattern, else the index_topk_freq / offset schedule.
            N = c["num_hidden_layers"]
            types = c.get("indexer_types") if self.glm_dsa else ["full"] * N
            if types is None:
                pattern = c.get("index_topk_pattern")
                if pattern is not None:
                    types = [{"F": "full", "S": "shared"}[ch] for ch in pattern] if isinstance(pattern, str) \
                        else list(pattern)
                else:
                    freq = max(c.get("index_topk_freq", 1), 1)
                    offset = c.get("index_skip_topk_offset", 2)
                    types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(N)]
            self.indexer_types = types

    def rotary(self, n):
        pos = np.arange(n, dtype=F)
        freqs = (self.inv_freq[:, None] @ pos[None, :]).T.astype(F)          # [S, dim/2]
        emb = np.concatenate([freqs, freqs], axis=-1)
        return (np.cos(emb) * F(self.attention_scaling)).astype(F), (np.sin(emb) * F(self.attention_scaling)).astype(F)

    @staticmethod
    def causal_mask(S):
        # create_causal_mask for eager: 0 on and below the diagonal, finfo.min above.
        return np.triu(np.full((S, S), np.finfo(F).min, dtype=F), 1)

    def eager(self, q, k, v, scaling, groups, mask=None):
        # q [H, S, D], k/v [Hkv, S, D]; repeat_kv; additive mask [S, T].
        k = np.repeat(k, groups, axis=0)
        v = np.repeat(v, groups, axis=0)
        if mask is None:
            mask = self.causal_mask(q.shape[1])
        a = (np.matmul(q, k.transpose(0, 2, 1)).astype(F) * F(scaling) + mask).astype(F)
        a = a - a.max(-1, keepdims=True)
        a = np.exp(a)
        a = (a / a.sum(-1, keepdims=True)).astype(F)
        return np.matmul(a, v).astype(F).transpose(1, 0, 2)                  # [S, H, Dv]

    def attn_ds(self, p, x, cos, sin):
        c, w = self.c, self.w
        S = x.shape[0]
        nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        qk = nope + rope
        if c.get("q_lora_rank") is None:
            q_states = linear(x, w[p + "q_proj.weight"])
        else:
            q_states = linear(rmsnorm(linear(x, w[p + "q_a_proj.weight"]), w[p + "q_a_layernorm.weight"], 1e-6),
                              w[p + "q_b_proj.weight"])
        q_states = q_states.reshape(S, -1, qk).transpose(1, 0, 2)
        q_pass, q_rot = q_states[..., :nope], q_states[..., nope:]
        compressed_kv = linear(x, w[p + "kv_a_proj_with_mqa.weight"])
        kvr = c["kv_lora_rank"]
        k_pass, k_rot = compressed_kv[:, :kvr], compressed_kv[:, kvr:]
        k_pass = linear(rmsnorm(k_pass, w[p + "kv_a_layernorm.weight"], 1e-6), w[p + "kv_b_proj.weight"])
        k_pass = k_pass.reshape(S, -1, nope + vd).transpose(1, 0, 2)
        k_pass, value_states = k_pass[..., :nope], k_pass[..., nope:]
        k_rot = k_rot.reshape(1, S, rope)
        if c.get("rope_interleave", True):
            # apply_rotary_pos_emb_interleave
            h, s, d = q_rot.shape
            q_rot = q_rot.reshape(h, s, d // 2, 2).transpose(0, 1, 3, 2).reshape(h, s, d)
            k_rot = k_rot.reshape(1, s, d // 2, 2).transpose(0, 1, 3, 2).reshape(1, s, d)
        q_rot = (q_rot * cos + rotate_half(q_rot) * sin).astype(F)
        k_rot = (k_rot * cos + rotate_half(k_rot) * sin).astype(F)
        k_rot = np.broadcast_to(k_rot, k_pass.shape[:-1] + (rope,))
        query = np.concatenate([q_pass, q_rot], -1)
        key = np.concatenate([k_pass, k_rot], -1)
        scaling = qk ** -0.5
        if self.rtype != "default":
            mad = self.rp.get("mscale_all_dim", 0)
            if mad:
                f = self.rp["factor"]
                m = 0.1 * mad * math.log(f) + 1.0 if f > 1 else 1.0
                scaling = scaling * m * m
        out = self.eager(query, key, value_states, scaling, 1)
        return linear(out.reshape(S, -1), w[p + "o_proj.weight"])

    def indexer(self, p, x, q_resid, cos, sin, mask, index_margins):
        """DeepseekV32Indexer / GlmMoeDsaIndexer.forward without a cache:
        the topk key indices [S, topk] of every query."""
        c, w = self.c, self.w
        S = x.shape[0]
        H, D, R = c["index_n_heads"], c["index_head_dim"], c["qk_rope_head_dim"]
        q = linear(q_resid, w[p + "wq_b.weight"]).reshape(S, H, D)             # [S, H, D]
        q_rot, q_pass = q[..., :R], q[..., R:]                                    # rope part first
        k = layernorm(linear(x, w[p + "wk.weight"]), w[p + "k_norm.weight"], w[p + "k_norm.bias"], 1e-6)
        k = k[:, None, :]                                                         # [S, 1, D]
        k_rot, k_pass = k[..., :R], k[..., R:]
        rope = rope_interleave if self.index_interleave else rope_half
        cs, sn = cos[:, None, :], sin[:, None, :]                                 # unsqueeze_dim=2
        q = np.concatenate([rope(q_rot, cs, sn), q_pass], axis=-1)               # [S, H, D]
        k = np.concatenate([rope(k_rot, cs, sn), k_pass], axis=-1)[:, 0]         # [S, D] = [T, D]
        scores = (np.matmul(q, k.T[None]).astype(F) * F(D ** -0.5)).astype(F)   # [S, H, T]
        scores = np.maximum(scores, F(0))                                         # relu
        weights = (linear(x, w[p + "weights_proj.weight"]) * F(H ** -0.5)).astype(F)     # [S, H]
        index_scores = np.matmul(weights[:, None, :], scores).astype(F)[:, 0]    # [S, T]
        index_scores = (index_scores + mask).astype(F)
        T = index_scores.shape[-1]
        topk = min(c["index_topk"], T)
        order = np.argsort(-index_scores, axis=-1, kind="stable")                 # torch.topk, ties low
        for s_ in range(S):
            if s_ + 1 > topk:               # more visible keys than kept: a real choice
                srt = index_scores[s_, order[s_]]
                index_margins.append(float(srt[topk - 1] - srt[topk]))
        return order[:, :topk]

    def attn_dsa(self, L, p, x, cos, sin, prev_topk_indices, index_margins):
        """DeepseekV32Attention / GlmMoeDsaAttention (eager, no cache).
        Returns the output and the topk indices handed to the next layer."""
        c, w = self.c, self.w
        S = x.shape[0]
        nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        qk = nope + rope
        q_resid = rmsnorm(linear(x, w[p + "q_a_proj.weight"]), w[p + "q_a_layernorm.weight"], 1e-6)
        q_states = linear(q_resid, w[p + "q_b_proj.weight"]).reshape(S, -1, qk).transpose(1, 0, 2)
        q_pass, q_rot = q_states[..., :nope], q_states[..., nope:]
        compressed_kv = linear(x, w[p + "kv_a_proj_with_mqa.weight"])
        kvr = c["kv_lora_rank"]
        kv_pass, k_rot = compressed_kv[:, :kvr], compressed_kv[:, kvr:]
        kv = linear(rmsnorm(kv_pass, w[p + "kv_a_layernorm.weight"], 1e-6), w[p + "kv_b_proj.weight"])
        kv = kv.reshape(S, -1, nope + vd).transpose(1, 0, 2)                     # [H, S, nope + vd]
        k_pass, value_states = kv[..., :nope], kv[..., nope:]
        k_rot = k_rot.reshape(1, S, rope)
        rot = rope_interleave if self.mla_interleave else rope_half
        q_rot, k_rot = rot(q_rot, cos, sin), rot(k_rot, cos, sin)
        query = np.concatenate([q_pass, q_rot], -1)
        key = np.concatenate([k_pass, np.broadcast_to(k_rot, k_pass.shape[:-1] + (rope,))], -1)
        scaling = qk ** -0.5
        if self.rtype != "default" and self.rp.get("mscale_all_dim", 0):
            # yarn_apply_mscale (both DeepseekV32Attention and GlmMoeDsaAttention).
            f = self.rp["factor"]
            m = 0.1 * self.rp["mscale_all_dim"] * math.log(f) + 1.0 if f > 1 else 1.0
            scaling = scaling * m * m
        mask = self.causal_mask(S)                                                # [S, T]
        N = c["num_hidden_layers"]
        types = self.indexer_types
        skip_topk = L < N and types[L] == "shared"     # the MTP layer runs its own indexer
        next_skip_topk = L < len(types) - 1 and types[L + 1] == "shared"
        if not skip_topk or prev_topk_indices is None:
            topk_indices = self.indexer(p + "indexer.", x, q_resid, cos, sin, mask, index_margins)
        else:
            topk_indices = prev_topk_indices
        T = key.shape[1]
        if self.v32:
            # bool index_mask, True = not selected; attention_mask.masked_fill(index_mask, finfo.min)
            index_mask = np.ones((S, T), dtype=bool)
            np.put_along_axis(index_mask, topk_indices, False, axis=1)
            mask = np.where(index_mask, np.finfo(F).min, mask).astype(F)
        else:
            # -inf everywhere, 0.0 scattered at the selection, plus the causal mask
            index_mask = np.full((S, T), -np.inf, dtype=F)
            np.put_along_axis(index_mask, topk_indices, F(0.0), axis=1)
            mask = (index_mask + mask).astype(F)
        out = self.eager(query, key, value_states, scaling, 1, mask)
        return linear(out.reshape(S, -1), w[p + "o_proj.weight"]), (topk_indices if next_skip_topk else None)

    def attn_glm(self, p, x, cos, sin):
        c, w = self.c, self.w
        S = x.shape[0]
        hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]

        def b(n):
            return w[n] if n in w else None
        q = linear(x, w[p + "q_proj.weight"], b(p + "q_proj.bias")).reshape(S, -1, hd)
        k = linear(x, w[p + "k_proj.weight"], b(p + "k_proj.bias")).reshape(S, -1, hd)
        v = linear(x, w[p + "v_proj.weight"], b(p + "v_proj.bias")).reshape(S, -1, hd)
        if c.get("use_qk_norm"):
            q = rmsnorm(q, w[p + "q_norm.weight"], c["rms_norm_eps"])
            k = rmsnorm(k, w[p + "k_norm.weight"], c["rms_norm_eps"])
        q, k, v = q.transpose(1, 0, 2), k.transpose(1, 0, 2), v.transpose(1, 0, 2)
        rd = cos.shape[-1]
        q_embed = (q[..., :rd] * cos + rotate_half(q[..., :rd]) * sin).astype(F)
        k_embed = (k[..., :rd] * cos + rotate_half(k[..., :rd]) * sin).astype(F)
        q = np.concatenate([q_embed, q[..., rd:]], -1)
        k = np.concatenate([k_embed, k[..., rd:]], -1)
        groups = c["num_attention_heads"] // c["num_key_value_heads"]
        out = self.eager(q, k, v, hd ** -0.5, groups)
        return linear(out.reshape(S, -1), w[p + "o_proj.weight"])

    def mlp(self, p, x):
        w = self.w
        return linear(silu(linear(x, w[p + "gate_proj.weight"])) * linear(x, w[p + "up_proj.weight"]),
                      w[p + "down_proj.weight"])

    def moe(self, p, x, margins):
        c, w = self.c, self.w
        E, G, KG, K = c["n_routed_experts"], c["n_group"], c["topk_group"], c["num_experts_per_tok"]
        router_logits = linear(x, w[p + "gate.weight"])
        router_logits = (F(1) / (F(1) + np.exp(-router_logits))).astype(F)        # .sigmoid()
        bias = w[p + "gate.e_score_correction_bias"]
        for_choice = (router_logits + bias).astype(F)
        T = x.shape[0]
        group_scores = -np.sort(-for_choice.reshape(T, G, E // G), axis=-1)[..., :2].sum(-1, dtype=F)
        group_idx = np.argsort(-group_scores, axis=-1, kind="stable")[:, :KG]   # torch.topk
        group_mask = np.zeros_like(group_scores)
        np.put_along_axis(group_mask, group_idx, 1, axis=1)
        score_mask = np.broadcast_to(group_mask[:, :, None], (T, G, E // G)).reshape(T, E)
        # masked_fill(~score_mask, 0.0); the DSA routers fill with -inf
        fill = F(-np.inf) if self.dsa else F(0.0)
        scores_for_choice = np.where(score_mask.astype(bool), for_choice, fill)
        topk_indices = np.argsort(-scores_for_choice, axis=-1, kind="stable")[:, :K]
        srt = -np.sort(-scores_for_choice, axis=-1)
        if K < E:
            margins.append(float((srt[:, K - 1] - srt[:, K]).min()))
        topk_weights = np.take_along_axis(router_logits, topk_indices, 1)
        if c.get("norm_topk_prob", True):
            topk_weights = (topk_weights / (topk_weights.sum(-1, keepdims=True) + F(1e-20))).astype(F)
        topk_weights = (topk_weights * F(c["routed_scaling_factor"])).astype(F)
        # DeepseekV3MoE.moe: one-hot expert loop, index_add_
        final = np.zeros_like(x)
        expert_mask = np.eye(E, dtype=np.int64)[topk_indices].transpose(2, 0, 1)   # [E, T, K]
        for e in range(E):
            tok, slot = np.where(expert_mask[e])
            if tok.size:
                ep = "%sexperts.%d." % (p, e)
                if p + "experts.gate_up_proj" in w:
                    gu = w[p + "experts.gate_up_proj"][e]
                    I = gu.shape[0] // 2
                    h = linear(x[tok], gu)
                    out = linear(silu(h[:, :I]) * h[:, I:], w[p + "experts.down_proj"][e])
                else:
                    out = self.mlp(ep, x[tok])
                np.add.at(final, tok, (out * topk_weights[tok, slot][:, None]).astype(F))
        return (final + self.mlp(p + "shared_experts.", x)).astype(F)

    def layer(self, L, x, cos, sin, margins, prev_topk_indices=None, index_margins=None):
        """One decoder layer; returns (hidden, topk indices for the next layer)."""
        c, w = self.c, self.w
        p = "model.layers.%d." % L
        res = x
        h = rmsnorm(x, w[p + "input_layernorm.weight"], c["rms_norm_eps"])
        topk_indices = None
        if self.dsa:
            h, topk_indices = self.attn_dsa(L, p + "self_attn.", h, cos, sin, prev_topk_indices, index_margins)
        else:
            h = (self.attn_ds if self.ds else self.attn_glm)(p + "self_attn.", h, cos, sin)
        x = (res + h).astype(F)
        res = x
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], c["rms_norm_eps"])
        # DeepseekV32Config / GlmMoeDsaConfig: mlp_layer_types, defaulting to
        # first_k_dense_replace; the MTP layer (past the list) is MoE.
        types = c.get("mlp_layer_types") if self.dsa else None
        if types and L < len(types):
            sparse = types[L] == "sparse"
        else:
            sparse = L >= c.get("first_k_dense_replace", 3)
        if sparse:
            h = self.moe(p + "mlp.", h, margins)
        else:
            h = self.mlp(p + "mlp.", h)
        return (res + h).astype(F), topk_indices

    def run(self, ids):
        c, w = self.c, self.w
        S = len(ids)
        cos, sin = self.rotary(S)
        x = w["model.embed_tokens.weight"][ids]
        margins, index_margins = [], []
        topk_indices = None
        for L in range(c["num_hidden_layers"]):
            x, topk_indices = self.layer(L, x, cos, sin, margins, topk_indices, index_margins)
        hn = rmsnorm(x, w["model.norm.weight"], c["rms_norm_eps"])
        logits = linear(hn, w["lm_head.weight"])
        mtp = None
        if c.get("num_nextn_predict_layers"):
            # vLLM DeepSeekMultiTokenPredictorLayer.forward, teacher-forced:
            # input_ids shifted left by one, previous_hidden_states = the
            # target model's output (after model.norm), same positions.
            N = c["num_hidden_layers"]
            p = "model.layers.%d." % N
            inputs_embeds = w[p + "embed_tokens.weight"][ids[1:]]
            inputs_embeds = rmsnorm(inputs_embeds, w[p + "enorm.weight"], c["rms_norm_eps"])
            prev = rmsnorm(hn[:-1], w[p + "hnorm.weight"], c["rms_norm_eps"])
            h = linear(np.concatenate([inputs_embeds, prev], -1), w[p + "eh_proj.weight"])
            h, _ = self.layer(N, h, cos[:S - 1], sin[:S - 1], margins, None, index_margins)
            mtp = linear(rmsnorm(h, w[p + "shared_head.norm.weight"], c["rms_norm_eps"]),
                         w[p + "shared_head.head.weight"])
        return (logits, mtp, min(margins) if margins else float("inf"),
                min(index_margins) if index_margins else float("inf"))


def compare(name, got, want):
    scale = float(np.abs(want).max())
    d = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) / scale
    print("xcheck: %s max |diff| / max |ref| = %.2e (ref max %.3f)" % (name, d, scale))
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--mtp-ref")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    ids = np.array([int(t) for t in open(a.tokens).read().strip().split(",")])
    net = Net(a.model)
    logits, mtp, margin, index_margin = net.run(ids)
    V = net.c["vocab_size"]
    worst = compare("logits", logits, np.fromfile(a.ref, dtype="<f4").reshape(len(ids), V))
    if a.mtp_ref:
        worst = max(worst, compare("mtp logits", mtp,
                                   np.fromfile(a.mtp_ref, dtype="<f4").reshape(len(ids) - 1, V)))
    print("xcheck: float32 router margin %.3g" % margin)
    if net.dsa:
        print("xcheck: float32 indexer margin %.3g" % index_margin)
    return 1 if worst > a.tol else 0


if __name__ == "__main__":
    sys.exit(main())
