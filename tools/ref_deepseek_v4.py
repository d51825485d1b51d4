"""Reference forward pass of DeepSeek-V4 (deepseek_v4), in numpy float64.

Used by reference.py (which dispatches here when config.json's model_type is
deepseek_v4); same conventions as ref_deepseek.py: float64 arithmetic on the
float32 weights, RoPE frequencies and angles rounded through float32 as
transformers builds them, teacher-forced positions 0..n-1.  Written from
transformers v5.15.0 (models/deepseek_v4/configuration_deepseek_v4.py and
modeling_deepseek_v4.py, modeling_rope_utils.py _compute_yarn_parameters);
the lines that matter are quoted as "HF:".  The path is transformers'
stateless single shot (no cache: every compressor compresses the complete
windows of the prompt, CSA's first window has no previous Ca half); a cache
filled from empty in one call gives the same numbers.

It reads the released checkpoint (names without `model.`, see
arch_deepseek_v4.py) and applies transformers' renaming itself (RENAMES,
conversion_mapping.py "deepseek_v4"; the FP8 quantizer's `.scale` ->
`.weight_scale_inv`), dequantizing F8_E4M3 weights with their NAME.scale
blocks (F8_E8M0 or F32, 128x128 tiles from quantization_config) and FP4
routed experts (I8, two e2m1 per byte, low nibble first, one scale per 32
inputs), in float32 as transformers' Fp8Dequantize does.

The multi-token-prediction block (mtp.M.*, with --mtp-out) is one more
hyper-connected decoder layer, index num_hidden_layers + M.  transformers
does not instantiate it (_keys_to_ignore_on_load_unexpected = mtp.*), so it
is written from DeepSeek's own inference code (deepseek-ai/DeepSeek-V4-Flash
inference/model.py, MTPBlock and Transformer, as public copies of the
release carry it; quoted as "DS:"): the block is a Block(n_layers + M) --
attention as compress_ratios[n_layers + M] says (sliding when the config
lists decoder layers only), score-routed MoE (layer_id >= n_hash_layers) --
with its own enorm, hnorm, e_proj, h_proj, norm and hc_head, and the model's
embedding and head.  Teacher-forced like ref_deepseek's MTP: row t takes the
main model's streams at position t (before the final hc_head) and token
t + 1, at position t, and predicts token t + 2.
"""

import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_common  # noqa: E402
import ref_deepseek  # noqa: E402
import safetensors_np as st  # noqa: E402

ARCHS = ("deepseek_v4",)

# HF DeepseekV4Config: _COMPRESS_RATIO_TO_LAYER_TYPE (legacy compress_ratios).
RATIO_TO_TYPE = {0: "sliding_attention", 4: "compressed_sparse_attention",
                 128: "heavily_compressed_attention"}

# Released name -> transformers name, applied in order (each rule to the
# result of the previous ones), as conversion_mapping.py's "deepseek_v4"
# WeightRenamings do; the per-expert w1 / w2 / w3 (which transformers merges
# into experts.gate_up_proj / down_proj) keep their index here.
RENAMES = [
    (r"\.attn\.", ".self_attn."),
    (r"\.ffn\.", ".mlp."),
    (r"\.indexer\.compressor\.", ".compressor.indexer."),
    (r"^embed\.weight$", "embed_tokens.weight"),
    (r"^head\.weight$", "lm_head.weight"),
    (r"^hc_head_(fn|base|scale)$", r"hc_head.hc_\1"),
    (r"\.attn_norm\.", ".input_layernorm."),
    (r"\.ffn_norm\.", ".post_attention_layernorm."),
    (r"\.hc_attn_(fn|base|scale)$", r".attn_hc.\1"),
    (r"\.hc_ffn_(fn|base|scale)$", r".ffn_hc.\1"),
    (r"\.attn_sink$", ".sinks"),
    (r"\.indexer\.weights_proj\.", ".compressor.indexer.scorer.weights_proj."),
    (r"\.indexer\.wq_b\.", ".compressor.indexer.q_b_proj."),
    (r"\.norm\.", ".kv_norm."),
    (r"\.ape$", ".position_bias"),
    (r"\.wq_a\.", ".q_a_proj."),
    (r"\.self_attn\.wq_b\.", ".self_attn.q_b_proj."),
    (r"\.wkv\.", ".kv_proj."),
    (r"\.wgate\.", ".gate_proj."),
    (r"\.wo_a\.", ".o_a_proj."),
    (r"\.wo_b\.", ".o_b_proj."),
    (r"\.q_norm\.", ".q_a_norm."),
    (r"\.gate\.bias$", ".gate.e_score_correction_bias"),
    (r"\.shared_experts\.w1\.", ".shared_experts.gate_proj."),
    (r"\.shared_experts\.w2\.", ".shared_experts.down_proj."),
    (r"\.shared_experts\.w3\.", ".shared_experts.up_proj."),
]
RENAMES = [(re.compile(a), b) for a, b in RENAMES]


def hf_name(name):
    """transformers' name of a released tensor (with the base model's
    `model.` prefix that from_pretrained adds; lm_head stays outside)."""
    for rx, to in RENAMES:
        name = rx.sub(to, name)
    return name if name == "lm_head.weight" else "model." + name


# DS: MTPBlock's own tensors (the rest of mtp.M.* is a Block's, named as
# layers.L's).
MTP_OWN = ("e_proj.weight", "e_proj.scale", "h_proj.weight", "h_proj.scale", "enorm.weight",
           "hnorm.weight", "norm.weight", "hc_head_fn", "hc_head_base", "hc_head_scale")


def load(model_dir, mtp=False):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") not in ARCHS:
        return None
    return Model(model_dir, cfg, mtp)


def rms_norm(x, weight, eps):
    var = np.mean(x * x, axis=-1, keepdims=True)
    y = x / np.sqrt(var + eps)
    return y if weight is None else weight * y


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax(x, axis):
    z = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def sqrtsoftplus(x):
    # HF SqrtSoftplusActivation: F.softplus(x).sqrt(), softplus with
    # threshold 20 (x itself above it).
    return np.sqrt(np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20)))))


def rope_tail(x, cos, sin):
    """HF apply_rotary_pos_emb (V4): interleaved RoPE on the LAST 2 * len(cos)
    channels of each head, pairs (x[2i], x[2i+1]) rotated by angle_i, the
    leading (nope) channels untouched.  x [n, ..., d], cos/sin [n, r/2]."""
    r = 2 * cos.shape[-1]
    out = x.copy()
    shape = (cos.shape[0],) + (1,) * (x.ndim - 2) + (cos.shape[-1],)
    c, s = cos.reshape(shape), sin.reshape(shape)
    a, b = x[..., -r::2], x[..., -r + 1::2]
    out[..., -r::2] = a * c - b * s
    out[..., -r + 1::2] = b * c + a * s
    return out


class Model(ref_common.Weights):
    def __init__(self, model_dir, cfg, mtp=False):
        self.cfg = cfg
        self.arch = cfg["model_type"]
        self.n_mtp = cfg.get("num_nextn_predict_layers", 1) or 0
        self.want_mtp = bool(mtp) and self.n_mtp > 0
        self.mtp_logits = None
        self.hidden = cfg["hidden_size"]
        self.n_layers = N = cfg["num_hidden_layers"]
        self.vocab = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.n_heads = cfg["num_attention_heads"]
        self.head_dim = cfg["head_dim"]
        if cfg.get("num_key_value_heads", 1) != 1:
            raise SystemExit("reference: deepseek_v4 has one shared K=V head")
        if cfg.get("hidden_act", "silu") != "silu":
            raise SystemExit("reference: hidden_act %r is not implemented" % cfg["hidden_act"])
        if cfg.get("scoring_func", "sqrtsoftplus") != "sqrtsoftplus":
            raise SystemExit("reference: scoring_func %r is not implemented" % cfg["scoring_func"])
        # HF DeepseekV4Config.__post_init__: compress_rates (default 4 / 128,
        # legacy compress_rate_csa / _hca folded in), layer_types (explicit,
        # else legacy compress_ratios, else the V4-Pro schedule),
        # mlp_layer_types (else num_hash_layers hash_moe, default 3), and
        # the rope dims (partial_rotary_factor, else qk_rope_head_dim /
        # head_dim, else 64 / 512).
        self.rates = dict(cfg.get("compress_rates") or
                          {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128})
        if cfg.get("compress_rate_csa") is not None:
            self.rates["compressed_sparse_attention"] = cfg["compress_rate_csa"]
        if cfg.get("compress_rate_hca") is not None:
            self.rates["heavily_compressed_attention"] = cfg["compress_rate_hca"]
        types = cfg.get("layer_types")
        if types is None and cfg.get("compress_ratios") is not None:
            try:
                types = [RATIO_TO_TYPE[r] for r in cfg["compress_ratios"]]
            except KeyError as e:
                raise SystemExit("reference: compress_ratios value %s is not 0, 4 or 128" % e)
        if types is None:
            types = (["heavily_compressed_attention"] * min(N, 2)
                     + ["compressed_sparse_attention" if i % 2 else "heavily_compressed_attention"
                        for i in range(max(N - 2, 0))])
        self.layer_types = list(types[:N])
        mlp = cfg.get("mlp_layer_types")
        if mlp is None:
            nh = cfg.get("num_hash_layers")
            nh = 3 if nh is None else nh
            mlp = ["hash_moe"] * min(N, nh) + ["moe"] * max(0, N - nh)
        self.mlp_types = list(mlp[:N])
        # DS: the MTP layers are Block(n_layers + i): Attention reads
        # compress_ratios[layer_id] (sliding when only the decoder layers
        # are listed: layer_types has no entry for them), Gate hashes only
        # layer_id < n_hash_layers.
        listed = types if cfg.get("layer_types") is None and cfg.get("compress_ratios") is not None else []
        for i in range(self.n_mtp):
            self.layer_types.append(listed[N + i] if N + i < len(listed) else "sliding_attention")
            self.mlp_types.append("moe")
        prf = cfg.get("partial_rotary_factor")
        if prf is None:
            q = cfg.get("qk_rope_head_dim")
            prf = q / self.head_dim if q is not None else 64 / 512
        self.rope_dim = int(self.head_dim * prf)
        self.sliding_window = cfg.get("sliding_window", 128)
        self.o_groups = cfg["o_groups"]
        self.o_lora = cfg["o_lora_rank"]
        self.index_heads = cfg.get("index_n_heads", 64)
        self.index_dim = cfg.get("index_head_dim", 128)
        self.index_topk = cfg.get("index_topk", 512)
        self.hc = cfg.get("hc_mult", 4)
        self.hc_iters = cfg.get("hc_sinkhorn_iters", 20)
        self.hc_eps = cfg.get("hc_eps", 1e-6)
        self.n_experts = cfg["n_routed_experts"]
        self.top_k = cfg["num_experts_per_tok"]
        self.rsf = float(cfg.get("routed_scaling_factor", 1.5))
        self.limit = float(cfg.get("swiglu_limit", 10.0))
        self.rope = self.rope_parameters(cfg, prf)
        q = cfg.get("quantization_config") or {}
        self.fp8_block = tuple(q.get("weight_block_size") or (128, 128))
        raw = st.load_dir(model_dir)
        self.tensors = {}
        for name, t in raw.items():
            if name.endswith(".scale"):
                continue            # scales go with their weight
            base = name[: -len(".weight")] if name.endswith(".weight") else name
            m = re.match(r"mtp\.(\d+)\.(.*)$", name)
            if m:
                # HF: mtp.* ignored on load; here the MTP reference reads it.
                if not self.want_mtp or int(m.group(1)) >= self.n_mtp:
                    continue
                if m.group(2) in MTP_OWN:
                    key = "mtp.%s.%s" % (m.group(1), m.group(2))
                else:
                    key = hf_name("layers.%d.%s" % (N + int(m.group(1)), m.group(2)))
                self.tensors[key] = (t, raw.get(base + ".scale"))
                continue
            self.tensors[hf_name(name)] = (t, raw.get(base + ".scale"))
        self._cache = {}

    def rope_parameters(self, cfg, prf):
        """HF __post_init__: rope_parameters nested {main, compress} as given,
        else main = default rope at rope_theta, compress = the flat
        rope_parameters / rope_scaling keys at compress_rope_theta with
        attention_factor forced to 1.0 when YaRN.  Returns {label: (inv_freq
        float32 [rope_dim/2], attention_scaling)}."""
        rp = dict(cfg.get("rope_scaling") or cfg.get("rope_parameters") or {})
        theta = cfg.get("rope_theta", 10000.0)
        if isinstance(rp.get("main"), dict) and isinstance(rp.get("compress"), dict):
            main, comp = rp["main"], rp["compress"]
        else:
            flat = {k: v for k, v in rp.items() if k not in ("main", "compress")}
            main = {"rope_type": "default", "rope_theta": theta}
            comp = dict(flat, rope_theta=cfg.get("compress_rope_theta", 160000.0))
            comp["rope_type"] = comp.get("rope_type", comp.get("type", "default"))
            if comp["rope_type"] == "yarn":
                comp.setdefault("attention_factor", 1.0)
        out = {}
        for label, p in (("main", main), ("compress", comp)):
            kind = p.get("rope_type", p.get("type", "default"))
            base = p.get("rope_theta", theta)
            if kind == "default":
                out[label] = (ref_deepseek.default_inv_freq(self.rope_dim, base), 1.0)
            elif kind == "yarn":
                out[label] = ref_deepseek.yarn_inv_freq(self.rope_dim, base, p,
                                                        cfg.get("max_position_embeddings", 1048576))
            else:
                raise SystemExit("reference: rope type %r is not implemented" % kind)
        return out

    # ------------------------------------------------------------ weights

    def has(self, name):
        return name in self.tensors

    def w(self, name):
        if name in self._cache:
            return self._cache[name]
        if name not in self.tensors:
            raise SystemExit("reference: checkpoint has no tensor for %r" % name)
        t, scale = self.tensors[name]
        if t.dtype in ("F8_E4M3", "I8"):
            if scale is None:
                raise SystemExit("reference: quantized tensor for %r has no .scale" % name)
            s = st.to_f32(scale)
            if t.dtype == "F8_E4M3":
                v = st.fp8_block_dequantize(t.raw, s, self.fp8_block)
            else:
                v = st.fp4_dequantize(t.raw, s)
        elif t.dtype in ("I64", "I32"):
            v = np.asarray(t.raw, dtype=np.int64)
        else:
            v = st.to_f32(t)
        v = v.astype(np.float64) if v.dtype != np.int64 else v
        self._cache[name] = v
        return v

    def lin(self, x, name):
        return x @ self.w(name + ".weight").T

    # ------------------------------------------------------------ rope

    def cos_sin(self, label, positions):
        """HF DeepseekV4RotaryEmbedding.forward: freqs = inv_freq @ positions
        in float32, cos / sin times attention_scaling (no duplication: one
        angle per interleaved pair)."""
        inv_freq, scaling = self.rope[label]
        ang = (np.asarray(positions, dtype=np.float32)[:, None] * inv_freq[None, :]).astype(np.float32)
        ang = ang.astype(np.float64)
        return np.cos(ang) * scaling, np.sin(ang) * scaling

    # ------------------------------------------------------------ hyper-connections

    def hyper(self, p, h):
        """HF DeepseekV4HyperConnection.forward on streams h [n, hc, H]:
        flat = UnweightedRMSNorm(h.flatten); pre/post/comb logits = flat @ fn^T
        split [hc, hc, hc*hc];
          pre  = sigmoid(pre_w * scale[0] + base[:hc]) + hc_eps
          post = 2 * sigmoid(post_w * scale[1] + base[hc:2hc])
          comb = softmax(comb_w * scale[2] + base[2hc:], -1) + hc_eps
          comb = comb / (comb.sum(-2) + hc_eps)
          (hc_sinkhorn_iters - 1) x: rows / (sum + eps), then columns / (sum + eps)
        collapsed = sum_j pre_j * h_j.  Returns (post, comb, collapsed)."""
        hc, n = self.hc, h.shape[0]
        flat = rms_norm(h.reshape(n, -1), None, self.eps)
        mixes = flat @ self.w(p + "fn").T
        base, scale = self.w(p + "base"), self.w(p + "scale")
        pre = sigmoid(mixes[:, :hc] * scale[0] + base[:hc]) + self.hc_eps
        post = 2 * sigmoid(mixes[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])
        logits = mixes[:, 2 * hc:].reshape(n, hc, hc) * scale[2] + base[2 * hc:].reshape(hc, hc)
        comb = softmax(logits, -1) + self.hc_eps
        comb = comb / (comb.sum(axis=-2, keepdims=True) + self.hc_eps)
        for _ in range(self.hc_iters - 1):
            comb = comb / (comb.sum(axis=-1, keepdims=True) + self.hc_eps)
            comb = comb / (comb.sum(axis=-2, keepdims=True) + self.hc_eps)
        collapsed = (pre[:, :, None] * h).sum(axis=1)
        return post, comb, collapsed

    def residual(self, post, comb, out, h):
        # HF DeepseekV4DecoderLayer: post.unsqueeze(-1) * out.unsqueeze(-2)
        #     + torch.matmul(comb.transpose(-1, -2), hidden_states)
        # i.e. new_k = post_k * out + sum_j comb[j, k] * h_j.
        return post[:, :, None] * out[:, None, :] + np.einsum("njk,njd->nkd", comb, h)

    def hyper_head(self, h, p="model.hc_head.hc_"):
        """HF DeepseekV4HyperHead: pre = sigmoid(flat @ hc_fn^T * hc_scale +
        hc_base) + eps, sum_j pre_j * h_j (DS ParallelHead.hc_head the same,
        with an MTP block's hc_head_fn / _scale / _base: p = "mtp.M.hc_head_")."""
        n = h.shape[0]
        flat = rms_norm(h.reshape(n, -1), None, self.eps)
        mixes = flat @ self.w(p + "fn").T
        pre = sigmoid(mixes * self.w(p + "scale")[0] + self.w(p + "base")) + self.hc_eps
        return (pre[:, :, None] * h).sum(axis=1)

    # ------------------------------------------------------------ compressors

    def pool(self, c, x, width, rate, overlap, positions_out):
        """The compressor's pooled entries (HF DeepseekV4HCACompressor /
        DeepseekV4CSACompressor / DeepseekV4Indexer, stateless): complete
        windows of `rate` tokens only (usable = n // rate * rate); gate + the
        learned position_bias [rate, .], softmax over the window's slots per
        channel; CSA (overlap) pools 2 * rate slots per entry: window w-1's Ca
        half ([..., :width]) then window w's Cb half ([..., width:]); window
        0's Ca slots are zero-kv / -inf-gate.  Then kv_norm and RoPE
        ("compress") at position w * rate.  Returns [T, width]."""
        n = x.shape[0]
        W = n // rate
        if W == 0:
            return np.zeros((0, width))
        kv = self.lin(x, c + "kv_proj")[:W * rate]
        gate = self.lin(x, c + "gate_proj")[:W * rate]
        kv = kv.reshape(W, rate, -1)
        gate = gate.reshape(W, rate, -1) + self.w(c + "position_bias")
        if overlap:
            nkv = np.zeros((W, 2 * rate, width))
            ngate = np.full((W, 2 * rate, width), -np.inf)
            nkv[:, rate:] = kv[..., width:]
            ngate[:, rate:] = gate[..., width:]
            nkv[1:, :rate] = kv[:-1, :, :width]
            ngate[1:, :rate] = gate[:-1, :, :width]
            kv, gate = nkv, ngate
        pooled = (kv * softmax(gate, 1)).sum(axis=1)
        pooled = rms_norm(pooled, self.w(c + "kv_norm.weight"), self.eps)
        cos, sin = self.cos_sin("compress", np.arange(W) * rate)
        positions_out.extend((np.arange(W) * rate).tolist())
        return rope_tail(pooled, cos, sin)

    def indexer(self, L, p, x, qr, record):
        """HF DeepseekV4Indexer + DeepseekV4IndexerScorer: its own CSA pool
        at index_head_dim; q = q_b_proj(q_residual) per index head, RoPE
        ("compress") at the query positions; score[t, s] = sum_h
        (weights_proj(x)[t, h] * index_n_heads^-0.5) * relu(q[t, h] . K[s]) *
        index_head_dim^-0.5; entries s >= (t + 1) // rate masked -inf; top
        index_topk (at most T); picks past the threshold become -1."""
        c = p + "compressor.indexer."
        rate = self.rates["compressed_sparse_attention"]
        n = x.shape[0]
        K = self.pool(c, x, self.index_dim, rate, True, [])
        T = K.shape[0]
        q = self.lin(qr, c + "q_b_proj").reshape(n, self.index_heads, self.index_dim)
        cos, sin = self.cos_sin("compress", np.arange(n))
        q = rope_tail(q, cos, sin)
        k = min(self.index_topk, T)
        if T == 0:
            return np.zeros((n, 0), dtype=np.int64)
        scores = np.maximum(np.einsum("thd,sd->ths", q, K), 0.0) * self.index_dim ** -0.5
        weights = self.lin(x, c + "scorer.weights_proj") * self.index_heads ** -0.5
        score = (scores * weights[:, :, None]).sum(axis=1)                # [n, T]
        thresh = (np.arange(n) + 1) // rate
        score = np.where(np.arange(T)[None, :] >= thresh[:, None], -np.inf, score)
        order = np.argsort(-score, axis=-1, kind="stable")[:, :k]
        top = np.where(order >= thresh[:, None], -1, order)
        margins = []
        for t in range(n):
            valid = np.sort(score[t, :min(thresh[t], T)])[::-1]
            margins.append(float(valid[k - 1] - valid[k]) if len(valid) > k else float("inf"))
        record.append({"layer": L, "indexer": top.tolist(), "margins": margins})
        return top

    def compressed(self, L, p, x, qr, record):
        """(compressed entries [T, head_dim], block bias [n, T]) of a CSA or
        HCA layer.  HCA: entry w visible from query t iff w < (t + 1) //
        rate.  CSA: only the indexer's valid picks (HF: block_bias -inf,
        scatter 0 at the picks, -1 sentinels sent to a dropped column)."""
        ltype = self.layer_types[L]
        n = x.shape[0]
        rate = self.rates[ltype]
        csa = ltype == "compressed_sparse_attention"
        comp = self.pool(p + "compressor.", x, self.head_dim, rate, csa, [])
        T = comp.shape[0]
        bias = np.zeros((n, T))
        if csa:
            top = self.indexer(L, p, x, qr, record)
            bias[:] = -np.inf
            for t in range(n):
                for s in top[t]:
                    if s >= 0:
                        bias[t, s] = 0.0
        else:
            thresh = (np.arange(n) + 1) // rate
            bias[np.arange(T)[None, :] >= thresh[:, None]] = -np.inf
        return comp, bias

    # ------------------------------------------------------------ attention

    def attention(self, L, x, record):
        """HF DeepseekV4Attention.forward (eager) for x [n, H]."""
        p = "model.layers.%d.self_attn." % L
        n, nh, hd = x.shape[0], self.n_heads, self.head_dim
        label = "main" if self.layer_types[L] == "sliding_attention" else "compress"
        cos, sin = self.cos_sin(label, np.arange(n))
        # HF: q_residual = q_a_norm(q_a_proj(x)); q = q_b_norm(q_b_proj(q_residual))
        #     (unweighted RMSNorm per head), RoPE; kv = kv_norm(kv_proj(x)), RoPE.
        qr = rms_norm(self.lin(x, p + "q_a_proj"), self.w(p + "q_a_norm.weight"), self.eps)
        q = rms_norm(self.lin(qr, p + "q_b_proj").reshape(n, nh, hd), None, self.eps)
        q = rope_tail(q, cos, sin)
        kv = rms_norm(self.lin(x, p + "kv_proj"), self.w(p + "kv_norm.weight"), self.eps)
        kv = rope_tail(kv, cos, sin)
        # Sliding-window causal mask (masking_utils: kv_idx <= q_idx and
        # kv_idx > q_idx - sliding_window), then the compressor's block bias.
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        mask = np.where((j <= i) & (j > i - self.sliding_window), 0.0, -np.inf)
        keys = kv
        if self.layer_types[L] != "sliding_attention":
            comp, bias = self.compressed(L, p, x, qr, record)
            keys = np.concatenate([kv, comp], axis=0)
            mask = np.concatenate([mask, bias], axis=1)
        # HF eager_attention_forward: scores * head_dim^-0.5 + mask, the
        # per-head sink logit appended, softmax, the sink column dropped;
        # K = V (one shared head).
        sinks = self.w(p + "sinks")
        out = np.empty((n, nh, hd))
        for h in range(nh):
            s = (q[:, h] @ keys.T) * hd ** -0.5 + mask
            s = np.concatenate([s, np.full((n, 1), sinks[h])], axis=1)
            prob = softmax(s, -1)[:, :-1]
            out[:, h] = prob @ keys
        # HF: the conjugate rotation (cos, -sin) at the query positions on the
        # output's rope slice, then the grouped output projection.
        out = rope_tail(out, cos, -sin)
        g, olr = self.o_groups, self.o_lora
        grouped = out.reshape(n, g, -1)
        wa = self.w(p + "o_a_proj.weight").reshape(g, olr, -1)
        mid = np.einsum("ngi,goi->ngo", grouped, wa).reshape(n, g * olr)
        return self.lin(mid, p + "o_b_proj")

    # ------------------------------------------------------------ MoE

    def clamped_swiglu(self, x, gate, up, down):
        # HF DeepseekV4MLP / DeepseekV4Experts._apply_gate: gate.clamp(max=limit),
        # up.clamp(-limit, limit), silu(gate) * up, then down.
        g = np.minimum(x @ gate.T, self.limit)
        u = np.clip(x @ up.T, -self.limit, self.limit)
        return (ref_common.silu(g) * u) @ down.T

    def moe(self, L, x, tokens, record):
        """HF DeepseekV4SparseMoeBlock: router (hash or top-k), routed experts,
        plus the shared expert on every token."""
        p = "model.layers.%d.mlp." % L
        scores = sqrtsoftplus(self.lin(x, p + "gate"))
        k = self.top_k
        if self.mlp_types[L] == "hash_moe":
            # HF DeepseekV4HashRouter: indices = tid2eid[input_ids]; the
            # learned gate still weights them.
            top = self.w(p + "gate.tid2eid")[np.asarray(tokens)]
            margins = [float("inf")] * len(tokens)
        else:
            # HF DeepseekV4TopKRouter: topk(scores + e_score_correction_bias),
            # weights from the unbiased scores.
            biased = scores + self.w(p + "gate.e_score_correction_bias")
            order = np.argsort(-biased, axis=-1, kind="stable")
            top = order[:, :k]
            srt = np.take_along_axis(biased, order, axis=-1)
            margins = (srt[:, k - 1] - srt[:, k]).tolist() if k < self.n_experts else \
                [float("inf")] * len(tokens)
        weights = np.take_along_axis(scores, top, axis=-1)
        # HF: weights / (sum + 1e-20) * routed_scaling_factor, always (the
        # router does not read norm_topk_prob).
        weights = weights / (weights.sum(axis=-1, keepdims=True) + 1e-20) * self.rsf
        record.append({"layer": L, "experts": top.tolist(), "weights": weights.tolist(),
                       "margins": margins})
        e = p + "experts.%d.%s.weight"
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            for slot in range(k):
                ex = top[t, slot]
                out[t] += weights[t, slot] * self.clamped_swiglu(
                    x[t], self.w(e % (ex, "w1")), self.w(e % (ex, "w3")), self.w(e % (ex, "w2")))
        s = p + "shared_experts."
        return out + self.clamped_swiglu(x, self.w(s + "gate_proj.weight"), self.w(s + "up_proj.weight"),
                                         self.w(s + "down_proj.weight"))

    # ------------------------------------------------------------ forward

    def forward(self, tokens):
        """(logits [n, vocab], hidden [L + 1, n, hc * H] streams, routing records)."""
        n = len(tokens)
        emb = self.w("model.embed_tokens.weight")[np.asarray(tokens)]
        # HF DeepseekV4Model: inputs_embeds.unsqueeze(2).expand(.., hc_mult, ..)
        h = np.repeat(emb[:, None, :], self.hc, axis=1)
        hidden = [h.reshape(n, -1).copy()]
        record = []
        for L in range(self.n_layers):
            h = self.block(L, h, tokens, record)
            hidden.append(h.reshape(n, -1).copy())
        if self.want_mtp:
            self.mtp_logits = self.mtp(tokens, h, record)
        y = rms_norm(self.hyper_head(h), self.w("model.norm.weight"), self.eps)
        logits = y @ self.w("lm_head.weight").T
        return logits, np.stack(hidden), record

    def block(self, L, h, tokens, record):
        """HF DeepseekV4DecoderLayer (DS Block.forward) on streams h [n, hc, H]."""
        p = "model.layers.%d." % L
        post, comb, col = self.hyper(p + "attn_hc.", h)
        out = self.attention(L, rms_norm(col, self.w(p + "input_layernorm.weight"), self.eps), record)
        h = self.residual(post, comb, out, h)
        post, comb, col = self.hyper(p + "ffn_hc.", h)
        out = self.moe(L, rms_norm(col, self.w(p + "post_attention_layernorm.weight"), self.eps),
                       tokens, record)
        return self.residual(post, comb, out, h)

    def mtp(self, tokens, h, record):
        """MTP module 0, teacher-forced: [n - 1, vocab] logits, row t from the
        streams h[t] (the last decoder layer's, before hc_head) and token t + 1.
        DS MTPBlock.forward:
            e = self.enorm(self.embed(input_ids)); x = self.hnorm(x)
            x = self.e_proj(e).unsqueeze(2) + self.h_proj(x)
            x = super().forward(x, start_pos, input_ids)
            logits = self.head(x, self.hc_head_fn, self.hc_head_scale, self.hc_head_base, self.norm)
        (RMSNorm over the last dim: hnorm and h_proj act on each stream.)"""
        n = len(tokens) - 1
        if n <= 0:
            return np.zeros((0, self.vocab))
        p, nxt = "mtp.0.", list(tokens[1:])
        e = rms_norm(self.w("model.embed_tokens.weight")[np.asarray(nxt)], self.w(p + "enorm.weight"), self.eps)
        x = rms_norm(h[:n], self.w(p + "hnorm.weight"), self.eps)
        x = self.lin(e, p + "e_proj")[:, None, :] + self.lin(x, p + "h_proj")
        x = self.block(self.n_layers, x, nxt, record)
        y = rms_norm(self.hyper_head(x, p + "hc_head_"), self.w(p + "norm.weight"), self.eps)
        return y @ self.w("lm_head.weight").T

