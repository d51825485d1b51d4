"""Reference forward pass of DeepSeek-V3 (deepseek_v3) and GLM-4.5 (glm4_moe).

Used by reference.py (which dispatches here when config.json's model_type is
one of ARCHS); same conventions: float64 arithmetic on the float32 weights,
RoPE frequencies and angles rounded through float32 as transformers builds
them, causal teacher-forced positions 0..n-1.  Written from the transformers
model definitions (models/deepseek_v3/modeling_deepseek_v3.py,
models/glm4_moe/modeling_glm4_moe.py, modeling_rope_utils.py
_compute_yarn_parameters); the lines that matter are quoted as "HF:".

Multi-token prediction (num_nextn_predict_layers >= 1): transformers skips
these layers (_keys_to_ignore_on_load_unexpected = model.layers.61.*), so
the MTP head follows the serving engines that run it (vLLM
deepseek_mtp.py, SGLang deepseek_nextn.py) and DeepSeek-V3's report:
for position t (0..n-2)

    u_t = eh_proj(cat(enorm(E[token_{t+1}]), hnorm(h_t)))
    y   = decoder layer num_hidden_layers on u_0..u_{n-2} (causal, positions 0..n-2)
    mtp_logits_t = shared_head.head(shared_head.norm(y_t))   # predicts token t+2

with E = model.layers.N.embed_tokens (model.embed_tokens when absent) and
shared_head.head (lm_head when absent).  h_t is the main model's output
after the final norm (model.norm), which is what vLLM and SGLang pass to the
MTP layer (DeepseekV2Model.forward returns norm(hidden, residual)); with
mtp_hidden="raw" it is the residual stream before model.norm instead.
"""

import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_common  # noqa: E402
import safetensors_np as st  # noqa: E402

ARCHS = ("deepseek_v3", "glm4_moe", "deepseek_v32", "glm_moe_dsa")
MLA_ARCHS = ("deepseek_v3", "deepseek_v32", "glm_moe_dsa")
DSA_ARCHS = ("deepseek_v32", "glm_moe_dsa")


def load(model_dir, mtp=False, mtp_hidden="normed"):
    """A Model for these families, or None for any other model_type."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") not in ARCHS:
        return None
    return Model(model_dir, cfg, mtp, mtp_hidden)


def get_mscale(scale, mscale=1.0):
    # HF (modeling_rope_utils and DeepseekV3's yarn_get_mscale)
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def rope_parameters(cfg):
    """The rope dict whatever the config spelling (rope_scaling with "type",
    transformers v5 rope_parameters with "rope_type"), and rope_theta."""
    rp = cfg.get("rope_parameters") or {}
    rs = cfg.get("rope_scaling") or {}
    params = dict(rp)
    params.update(rs)
    theta = cfg.get("rope_theta", params.get("rope_theta", 10000.0))
    kind = params.get("rope_type", params.get("type", "default"))
    return params, theta, kind


def yarn_inv_freq(dim, base, params, max_pos):
    """HF _compute_yarn_parameters, in float32 where torch is float32.
    Returns (inv_freq float32 [dim/2], attention_factor)."""
    factor = params.get("factor")
    orig = params.get("original_max_position_embeddings")
    if orig is None:
        orig = max_pos
    if factor is None:
        factor = max_pos / orig     # HF v5: factor defaults to max_pos / original
    elif params.get("original_max_position_embeddings") is not None and max_pos / orig != factor:
        # transformers 4.5x replaces factor by max_position_embeddings /
        # original_max_position_embeddings; v5 keeps factor.  Real configs
        # have both equal (DeepSeek-V3: 163840 / 4096 = 40), so refuse the
        # ambiguous case rather than pick a version.
        raise SystemExit("reference: rope_scaling factor %g differs from max_position_embeddings / "
                         "original_max_position_embeddings = %g (transformers versions disagree)"
                         % (factor, max_pos / orig))
    factor = float(factor)
    attention_factor = params.get("attention_factor")
    mscale = params.get("mscale")
    mscale_all_dim = params.get("mscale_all_dim")
    if attention_factor is None:
        # HF: if mscale and mscale_all_dim: get_mscale(f, mscale) / get_mscale(f, mscale_all_dim)
        #     else: get_mscale(f)
        if mscale and mscale_all_dim:
            attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
        else:
            attention_factor = get_mscale(factor)
    beta_fast = params.get("beta_fast") or 32
    beta_slow = params.get("beta_slow") or 1
    truncate = params.get("truncate", True)

    def correction_dim(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    f32 = np.float32
    pos_freqs = (f32(base) ** (np.arange(0, dim, 2).astype(f32) / f32(dim))).astype(f32)
    extrap = (f32(1.0) / pos_freqs).astype(f32)
    interp = (f32(1.0) / (f32(factor) * pos_freqs).astype(f32)).astype(f32)
    ramp = ((np.arange(dim // 2, dtype=f32) - f32(low)) / f32(high - low)).astype(f32)
    ramp = np.clip(ramp, f32(0), f32(1))
    extrap_factor = (f32(1) - ramp).astype(f32)
    inv_freq = ((interp * (f32(1) - extrap_factor)).astype(f32)
                + (extrap * extrap_factor).astype(f32)).astype(f32)
    return inv_freq, float(attention_factor)


def default_inv_freq(dim, base):
    idx = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    return (np.float32(1.0) / (np.float32(base) ** idx)).astype(np.float32)


def rms_norm(x, weight, eps):
    var = np.mean(x * x, axis=-1, keepdims=True)
    return weight * (x / np.sqrt(var + eps))


silu = ref_common.silu


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class Model(ref_common.Weights):
    def __init__(self, model_dir, cfg, mtp=False, mtp_hidden="normed"):
        self.cfg = cfg
        self.arch = cfg["model_type"]
        self.hidden = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_mtp = cfg.get("num_nextn_predict_layers") or 0
        self.want_mtp = bool(mtp) and self.n_mtp > 0
        if mtp_hidden not in ("normed", "raw"):
            raise SystemExit("reference: mtp hidden %r is not normed or raw" % mtp_hidden)
        self.mtp_hidden = mtp_hidden
        self.mtp_logits = None
        self.vocab = cfg["vocab_size"]
        self.eps = cfg["rms_norm_eps"]
        self.n_heads = cfg["num_attention_heads"]
        if cfg.get("hidden_act", "silu") != "silu":
            raise SystemExit("reference: hidden_act %r is not implemented" % cfg["hidden_act"])
        # MoE (HF DeepseekV3MoE / Glm4MoeMoE; both ignore scoring_func and
        # topk_method: the router is always sigmoid + noaux_tc).
        self.n_experts = cfg["n_routed_experts"]
        self.top_k = cfg["num_experts_per_tok"]
        self.n_group = cfg.get("n_group") or 1
        self.topk_group = cfg.get("topk_group") or 1
        self.norm_topk = bool(cfg.get("norm_topk_prob", True))
        self.rsf = float(cfg.get("routed_scaling_factor", 1.0))
        # HF DeepseekV3Config / DeepseekV32Config / GlmMoeDsaConfig default: 3.
        self.first_dense = cfg.get("first_k_dense_replace", 3)
        # DeepseekV32Config / GlmMoeDsaConfig: mlp_layer_types overrides it.
        types = cfg.get("mlp_layer_types") if self.arch in DSA_ARCHS else None
        self.moe_layers = ([t == "sparse" for t in types] if types else None)
        if cfg.get("scoring_func", "sigmoid") != "sigmoid":
            raise SystemExit("reference: scoring_func %r is not implemented" % cfg["scoring_func"])
        if self.n_experts % self.n_group or self.n_experts // self.n_group < 2:
            raise SystemExit("reference: %d experts do not split into %d groups of >= 2"
                             % (self.n_experts, self.n_group))
        params, theta, kind = rope_parameters(cfg)
        self.dsa = self.arch in DSA_ARCHS
        if self.arch in MLA_ARCHS:
            self.q_lora = cfg.get("q_lora_rank")
            self.kv_lora = cfg["kv_lora_rank"]
            self.nope = cfg["qk_nope_head_dim"]
            self.rope_dim = cfg["qk_rope_head_dim"]
            self.v_dim = cfg["v_head_dim"]
            # HF DeepseekV3Config: rope_interleave defaults to True (the real
            # config.json does not set it).
            self.interleave = bool(cfg.get("rope_interleave", True))
            if self.arch in DSA_ARCHS:
                # transformers v5.15.0 DeepseekV32Attention and
                # GlmMoeDsaAttention: apply_rotary_pos_emb_interleave, always;
                # neither reads rope_interleave (GLM-5's release sets it true,
                # which agrees).  Older versions of modeling_glm_moe_dsa.py
                # rotated halves; v5.15.0 is the reference.
                self.interleave = True
            # HF DeepseekV3Attention (and, in v5.15.0, yarn_apply_mscale in
            # DeepseekV32Attention and GlmMoeDsaAttention): scaling =
            # qk_head_dim^-0.5, times yarn_get_mscale(factor, mscale_all_dim)^2
            # when rope scaling is set and mscale_all_dim is non-zero.
            self.scale = (self.nope + self.rope_dim) ** -0.5
            if kind != "default" and params.get("mscale_all_dim", 0):
                ms = get_mscale(float(params["factor"]), params["mscale_all_dim"])
                self.scale *= ms * ms
            rot_dim = self.rope_dim
            if self.dsa:
                if not self.q_lora:
                    raise SystemExit("reference: the DSA indexer needs q_lora_rank")
                self.index_heads = cfg.get("index_n_heads", 64 if self.arch == "deepseek_v32" else 32)
                self.index_dim = cfg.get("index_head_dim", 128)
                self.index_topk = cfg.get("index_topk", 2048)
                # Indexer RoPE (transformers v5.15.0, no flag read by
                # either): DeepseekV32Indexer rotates halves
                # (apply_rotary_pos_emb, "NON-interleaved"); GlmMoeDsaIndexer
                # applies apply_rotary_pos_emb_interleave.
                self.index_interleave = self.arch == "glm_moe_dsa"
                self.index_shared = self.indexer_types(cfg)
        else:
            self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
            self.head_dim = cfg.get("head_dim") or self.hidden // self.n_heads
            partial = cfg.get("partial_rotary_factor", params.get("partial_rotary_factor", 1.0))
            rot_dim = int(self.head_dim * partial)
            self.use_qk_norm = bool(cfg.get("use_qk_norm", False))
            self.interleave = False
            self.scale = self.head_dim ** -0.5
        self.rot_dim = rot_dim
        if kind == "default":
            self.inv_freq, self.attention_factor = default_inv_freq(rot_dim, theta), 1.0
        elif kind == "yarn":
            self.inv_freq, self.attention_factor = yarn_inv_freq(
                rot_dim, theta, params, cfg["max_position_embeddings"])
        else:
            raise SystemExit("reference: rope type %r is not implemented" % kind)
        q = cfg.get("quantization_config") or {}
        self.fp8_block = tuple(q.get("weight_block_size") or (128, 128))
        self.tensors = st.load_dir(model_dir)
        self._cache = {}

    def indexer_types(self, cfg):
        """Per decoder layer, whether it reuses the previous layer's selection
        (HF GlmMoeDsaConfig.__post_init__: indexer_types, else
        index_topk_pattern, else the index_topk_freq / index_skip_topk_offset
        schedule).  DeepSeek-V3.2 runs every indexer."""
        N = self.n_layers
        if self.arch != "glm_moe_dsa":
            return [False] * N
        types = cfg.get("indexer_types")
        if types is None:
            pattern = cfg.get("index_topk_pattern")
            if pattern is not None:
                types = ([{"F": "full", "S": "shared"}[c] for c in pattern]
                         if isinstance(pattern, str) else list(pattern))
            else:
                freq = max(cfg.get("index_topk_freq", 1), 1)
                offset = cfg.get("index_skip_topk_offset", 2)
                types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(N)]
        return [t == "shared" for t in types]

    # ------------------------------------------------------------ weights

    def experts(self, layer):
        m = "model.layers.%d.mlp.experts." % layer
        if self.has(m + "gate_up_proj"):
            gu = self.w(m + "gate_up_proj")
            inter = gu.shape[1] // 2
            return gu[:, :inter], gu[:, inter:], self.w(m + "down_proj")
        return tuple(np.stack([self.w("%s%d.%s.weight" % (m, e, part))
                               for e in range(self.n_experts)])
                     for part in ("gate_proj", "up_proj", "down_proj"))

    # ------------------------------------------------------------ rope

    def rope_tables(self, n):
        """cos, sin [n, rot_dim/2] (float64, times attention_factor); the
        angles position * inv_freq rounded to float32 as HF computes them."""
        ang = (np.arange(n, dtype=np.float32)[:, None] * self.inv_freq[None, :]).astype(np.float32)
        ang = ang.astype(np.float64)
        return np.cos(ang) * self.attention_factor, np.sin(ang) * self.attention_factor

    def rope(self, x, cos, sin, interleave=None):
        """x [n, heads, d] with d = rot_dim.  Interleaved: each pair
        (x[2i], x[2i+1]) is rotated by angle_i (the complex form of DeepSeek's
        apply_rotary_emb; HF's apply_rotary_pos_emb_interleave de-interleaves
        q and k alike first, which leaves every q.k unchanged).  Otherwise
        rotate-half: the pairs are (x[i], x[i + d/2])."""
        c, s = cos[:, None, :], sin[:, None, :]
        out = np.empty_like(x)
        if self.interleave if interleave is None else interleave:
            a, b = x[..., 0::2], x[..., 1::2]
            out[..., 0::2] = a * c - b * s
            out[..., 1::2] = b * c + a * s
        else:
            h = x.shape[-1] // 2
            a, b = x[..., :h], x[..., h:]
            out[..., :h] = a * c - b * s
            out[..., h:] = b * c + a * s
        return out

    # ------------------------------------------------------------ attention

    def softmax_attend(self, scores, v, keep=None):
        """scores [n, n] of one head (already scaled), causal (and only the
        keys keep [n, n] allows, when given), times v [n, dv]."""
        n = scores.shape[0]
        allowed = np.arange(n)[None, :] <= np.arange(n)[:, None]
        if keep is not None:
            allowed = allowed & keep
        s = np.where(allowed, scores, -np.inf)
        s = s - s.max(axis=-1, keepdims=True)
        e = np.exp(s)
        return (e / e.sum(axis=-1, keepdims=True)) @ v

    def indexer(self, layer, h, qa, cos, sin, record):
        """HF DeepseekV32Indexer / GlmMoeDsaIndexer: which keys each query
        keeps, as a bool [n, n] (query, key).  Appends the selection margins
        (gap between the index_topk-th and the next score) to record."""
        if layer < self.n_layers and self.index_shared[layer] and self._keep is not None:
            return self._keep     # HF: a "shared" layer reuses prev_topk_indices
        p = "model.layers.%d.self_attn.indexer." % layer
        n = h.shape[0]
        IH, ID, R, K = self.index_heads, self.index_dim, self.rope_dim, self.index_topk
        q = self.linear(qa, p + "wq_b").reshape(n, IH, ID)
        k = self.linear(h, p + "wk")
        # HF: k_norm = nn.LayerNorm(head_dim, eps=1e-6)
        mu = k.mean(axis=-1, keepdims=True)
        var = ((k - mu) ** 2).mean(axis=-1, keepdims=True)
        k = (k - mu) / np.sqrt(var + 1e-6) * self.w(p + "k_norm.weight") + self.w(p + "k_norm.bias")
        # HF: rope part first: torch.split(q, [qk_rope_head_dim, head_dim - qk_rope_head_dim])
        q = np.concatenate([self.rope(q[..., :R], cos, sin, self.index_interleave), q[..., R:]], axis=-1)
        k = np.concatenate([self.rope(k[:, None, :R], cos, sin, self.index_interleave)[:, 0], k[:, R:]],
                           axis=-1)
        w = self.linear(h, p + "weights_proj") * IH ** -0.5                 # [n, IH]
        s = np.einsum("shd,td->sht", q, k) * ID ** -0.5
        score = np.einsum("sht,sh->st", np.maximum(s, 0.0), w)            # [n, n]
        keep = np.zeros((n, n), dtype=bool)
        margins = []
        for i in range(n):
            vis = i + 1
            if vis <= K:
                keep[i, :vis] = True    # HF: topk over masked scores keeps them all
                continue
            order = np.argsort(-score[i, :vis], kind="stable")
            keep[i, order[:K]] = True
            margins.append(score[i, order[K - 1]] - score[i, order[K]])
        record.append({"layer": layer, "indexer": True, "margins": margins})
        self._keep = keep
        return keep

    def mla(self, layer, h, cos, sin):
        """HF DeepseekV3Attention (eager), without the KV-cache; with the DSA
        indexer's mask for deepseek_v32 / glm_moe_dsa."""
        p = "model.layers.%d.self_attn." % layer
        n = h.shape[0]
        nh, nope, rd, vd = self.n_heads, self.nope, self.rope_dim, self.v_dim
        if self.q_lora is None:
            q = self.linear(h, p + "q_proj")
        else:
            # HF: q_a_layernorm = DeepseekV3RMSNorm(q_lora_rank): eps 1e-6,
            # not config.rms_norm_eps (same for kv_a_layernorm).
            qa = rms_norm(self.linear(h, p + "q_a_proj"), self.w(p + "q_a_layernorm.weight"), 1e-6)
            q = self.linear(qa, p + "q_b_proj")
        keep = self.indexer(layer, h, qa, cos, sin, self._record) if self.dsa else None
        q = q.reshape(n, nh, nope + rd)
        q_nope, q_pe = q[..., :nope], q[..., nope:]
        ckv = self.linear(h, p + "kv_a_proj_with_mqa")
        c, k_pe = ckv[:, :self.kv_lora], ckv[:, self.kv_lora:]
        kv = self.linear(rms_norm(c, self.w(p + "kv_a_layernorm.weight"), 1e-6), p + "kv_b_proj")
        kv = kv.reshape(n, nh, nope + vd)
        k_nope, v = kv[..., :nope], kv[..., nope:]
        q_pe = self.rope(q_pe, cos, sin)
        k_pe = self.rope(k_pe[:, None, :], cos, sin)[:, 0]     # one rope key shared by all heads
        out = np.empty((n, nh, vd))
        for head in range(nh):
            s = (q_nope[:, head] @ k_nope[:, head].T + q_pe[:, head] @ k_pe.T) * self.scale
            out[:, head] = self.softmax_attend(s, v[:, head], keep)
        return self.linear(out.reshape(n, nh * vd), p + "o_proj")

    def gqa(self, layer, h, cos, sin):
        """HF Glm4MoeAttention (eager)."""
        p = "model.layers.%d.self_attn." % layer
        n = h.shape[0]
        nh, nkv, hd, rd = self.n_heads, self.n_kv, self.head_dim, self.rot_dim
        q = self.linear(h, p + "q_proj").reshape(n, nh, hd)     # biases included
        k = self.linear(h, p + "k_proj").reshape(n, nkv, hd)
        v = self.linear(h, p + "v_proj").reshape(n, nkv, hd)
        if self.use_qk_norm:
            # HF: q_norm / k_norm = RMSNorm(head_dim, eps=rms_norm_eps) per head,
            # after the bias, before RoPE.
            q = rms_norm(q, self.w(p + "q_norm.weight"), self.eps)
            k = rms_norm(k, self.w(p + "k_norm.weight"), self.eps)
        # HF apply_rotary_pos_emb: rotate-half on the first rotary_dim dims,
        # the rest passes through.
        q = np.concatenate([self.rope(q[..., :rd], cos, sin), q[..., rd:]], axis=-1)
        k = np.concatenate([self.rope(k[..., :rd], cos, sin), k[..., rd:]], axis=-1)
        group = nh // nkv
        out = np.empty((n, nh, hd))
        for head in range(nh):
            kvh = head // group
            out[:, head] = self.softmax_attend((q[:, head] @ k[:, kvh].T) * self.scale, v[:, kvh])
        return self.linear(out.reshape(n, nh * hd), p + "o_proj")

    # ------------------------------------------------------------ MoE

    def route(self, logits, bias):
        """HF DeepseekV3MoE.route_tokens_to_experts (Glm4MoeMoE is the same).
        Returns (experts [n, k] by decreasing choice score, weights [n, k],
        margins [n])."""
        n = logits.shape[0]
        E, G, KG, K = self.n_experts, self.n_group, self.topk_group, self.top_k
        scores = sigmoid(logits)
        choice = scores + bias[None, :]
        per = E // G
        grouped = np.sort(choice.reshape(n, G, per), axis=-1)
        group_scores = grouped[..., -1] + grouped[..., -2]          # sum of the top 2
        g_order = np.argsort(-group_scores, axis=-1, kind="stable")
        keep = np.zeros((n, G), dtype=bool)
        np.put_along_axis(keep, g_order[:, :KG], True, axis=-1)
        mask = np.repeat(keep, per, axis=-1)
        # HF DeepseekV3 / Glm4Moe: masked_fill(~score_mask, 0.0) -- 0.0, not
        # -inf: a kept expert whose biased score is negative ranks below every
        # masked one.  DeepseekV32 / GlmMoeDsa mask with -inf.
        fill, other = (-np.inf, 0.0) if self.dsa else (0.0, -np.inf)
        masked = np.where(mask, choice, fill)
        order = np.argsort(-masked, axis=-1, kind="stable")
        top = order[:, :K]
        weights = np.take_along_axis(scores, top, axis=-1)          # unbiased scores
        if self.norm_topk:
            weights = weights / (weights.sum(axis=-1, keepdims=True) + 1e-20)
        weights = weights * self.rsf
        margins = np.full(n, np.inf)
        if K < E:
            srt = np.take_along_axis(masked, order, axis=-1)
            margins = np.minimum(margins, srt[:, K - 1] - srt[:, K])
        if KG < G:
            gs = np.take_along_axis(group_scores, g_order, axis=-1)
            margins = np.minimum(margins, gs[:, KG - 1] - gs[:, KG])
            # transformers' deepseek_v32 / glm_moe_dsa routers and DeepSeek's
            # own inference Gate mask with -inf instead of 0.0.  A token whose
            # selection depends on that difference gets margin 0, so picked
            # fixtures hold under both conventions.
            alt = np.argsort(-np.where(mask, choice, other), axis=-1, kind="stable")[:, :K]
            differs = np.any(np.sort(alt, axis=-1) != np.sort(top, axis=-1), axis=-1)
            margins = np.where(differs, 0.0, margins)
        return top, weights, margins

    def moe(self, layer, h, record):
        m = "model.layers.%d.mlp." % layer
        logits = h @ self.w(m + "gate.weight").T
        bias = (self.w(m + "gate.e_score_correction_bias") if self.has(m + "gate.e_score_correction_bias")
                else np.zeros(self.n_experts))
        top, weights, margins = self.route(logits, bias)
        out = ref_common.routed_sum(h, top, weights, *self.experts(layer))
        # HF: hidden_states + shared_experts(residuals)
        out += self.mlp(m + "shared_experts.", h)
        record.append({"layer": layer, "experts": top.tolist(), "weights": weights.tolist(),
                       "margins": margins.tolist()})
        return out

    def mlp(self, pfx, h):
        return self.linear(silu(self.linear(h, pfx + "gate_proj")) * self.linear(h, pfx + "up_proj"),
                           pfx + "down_proj")

    # ------------------------------------------------------------ layers

    def layer(self, L, x, cos, sin, routing):
        p = "model.layers.%d." % L
        h = rms_norm(x, self.w(p + "input_layernorm.weight"), self.eps)
        attn = self.mla if self.arch in MLA_ARCHS else self.gqa
        self._record = routing
        x = x + attn(L, h, cos, sin)
        h = rms_norm(x, self.w(p + "post_attention_layernorm.weight"), self.eps)
        # HF: MoE when layer_idx >= first_k_dense_replace.
        moe = L >= self.first_dense
        if self.moe_layers is not None and L < self.n_layers:
            moe = self.moe_layers[L]
        if moe:
            return x + self.moe(L, h, routing)
        return x + self.mlp(p + "mlp.", h)

    def rows(self, name, ids):
        return self.w(name)[np.asarray(ids)]

    def forward(self, tokens):
        """(logits [n, vocab], hidden [L+1, n, H], routing); sets mtp_logits
        [n-1, vocab] when the MTP head was asked for."""
        n = len(tokens)
        x = self.rows("model.embed_tokens.weight", tokens)
        cos, sin = self.rope_tables(n)
        hidden = [x.copy()]
        self._keep = None
        routing = []
        for L in range(self.n_layers):
            x = self.layer(L, x, cos, sin, routing)
            hidden.append(x.copy())
        xn = rms_norm(x, self.w("model.norm.weight"), self.eps)
        head = "lm_head.weight" if self.has("lm_head.weight") else "model.embed_tokens.weight"
        logits = xn @ self.w(head).T
        if self.want_mtp:
            self.mtp_logits = self.mtp(tokens, xn if self.mtp_hidden == "normed" else x,
                                       cos, sin, routing)
        return logits, np.stack(hidden), routing

    def mtp(self, tokens, h, cos, sin, routing):
        """The first MTP module (layer num_hidden_layers); see the module doc."""
        N = self.n_layers
        p = "model.layers.%d." % N
        n = len(tokens)
        if n < 2:
            return np.zeros((0, self.vocab))
        emb = p + "embed_tokens.weight" if self.has(p + "embed_tokens.weight") else "model.embed_tokens.weight"
        e = rms_norm(self.rows(emb, tokens[1:]), self.w(p + "enorm.weight"), self.eps)
        hh = rms_norm(h[:-1], self.w(p + "hnorm.weight"), self.eps)
        u = np.concatenate([e, hh], axis=-1) @ self.w(p + "eh_proj.weight").T
        y = self.layer(N, u, cos[:n - 1], sin[:n - 1], routing)
        y = rms_norm(y, self.w(p + "shared_head.norm.weight"), self.eps)
        head = p + "shared_head.head.weight" if self.has(p + "shared_head.head.weight") else "lm_head.weight"
        return y @ self.w(head).T
