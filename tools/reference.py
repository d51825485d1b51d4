#!/usr/bin/python3
"""Reference forward pass of OLMoE, Qwen3-MoE and Mixtral in numpy
(DeepSeek-V3 and GLM-4.5 MoE, with their MTP head: ref_deepseek.py;
DeepSeek-V4: ref_deepseek_v4.py; Qwen3.5-MoE and Qwen3-Next: ref_qwen35.py;
MiniMax-M2: ref_minimax_m2.py; gpt-oss: ref_gpt_oss.py; Inkling:
ref_inkling.py).

    reference.py --model HF_DIR (--tokens 1,2,3 | --pick-tokens N --tokens-out FILE)
                 --out FILE.f32 [--seed S] [--min-margin EPS] [--dump-hidden] [--quiet]
                 [--mtp-out FILE.f32 [--mtp-hidden normed|raw]]

An independent re-implementation of the Hugging Face transformers model
definitions (modeling_olmoe.py, modeling_qwen3_moe.py, modeling_mixtral.py)
as they run with the model loaded in float32, which is the path colibri's
engine follows.  It reads the checkpoint itself (BF16/F16/F32, F8_E4M3 with
128x128 *_scale_inv blocks, per-expert or transformers-v5 fused experts),
runs the tokens teacher-forced (causal, positions 0..n-1) and writes the
logits as float32 little-endian [n_tokens, vocab], row-major.

The arithmetic is float64 on the float32 weights (closer to the exact value
than any float32 summation order); RoPE frequencies and angles are rounded
through float32 as transformers computes them.  The details that differ
between the three families are marked "HF:" below.

--pick-tokens N draws N deterministic token ids from --seed (trying the next
seeds as needed) until the smallest router margin (gap between the k-th and
(k+1)-th softmax probability of any token in any MoE layer) is at least
--min-margin (default 1e-4, far above the ~1e-7 error of a float32 engine
in these probabilities), so that an engine computing in float32 selects the
same experts.  Exit status 3 when the margin is not reached (with --tokens:
when the given tokens have a smaller margin).

--dump-hidden also writes FILE.hidden.f32 (float32 [n_layers + 1, n_tokens,
hidden]: the embeddings, then the residual stream after each layer, before
the final norm) and FILE.routing.json (selected experts and weights per MoE
layer and token).
"""

import argparse
import json
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_common  # noqa: E402
import safetensors_np as st  # noqa: E402
import ref_deepseek  # noqa: E402
import ref_deepseek_v4  # noqa: E402
import ref_qwen35  # noqa: E402
import ref_minimax_m2  # noqa: E402
import ref_gpt_oss  # noqa: E402
import ref_inkling  # noqa: E402


class Model:
    """Config fields resolved once, and the weights as float64 on demand."""

    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        self.cfg = cfg
        self.arch = cfg.get("model_type")
        if self.arch not in ("olmoe", "qwen3_moe", "mixtral"):
            raise SystemExit("reference: unsupported model_type %r" % self.arch)
        self.hidden = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        # HF: olmoe (older releases) and mixtral derive head_dim from
        # hidden / heads unless config.head_dim is set; qwen3_moe sets it.
        self.head_dim = cfg.get("head_dim") or self.hidden // self.n_heads
        self.eps = cfg["rms_norm_eps"]
        self.vocab = cfg["vocab_size"]
        rope = cfg.get("rope_parameters") or {}
        self.rope_theta = cfg.get("rope_theta", rope.get("rope_theta", 10000.0))
        scaling = cfg.get("rope_scaling") or rope
        if scaling.get("rope_type", scaling.get("type", "default")) not in ("default",):
            raise SystemExit("reference: rope scaling %r is not implemented" % scaling)
        if cfg.get("partial_rotary_factor", 1.0) != 1.0:
            raise SystemExit("reference: partial_rotary_factor is not implemented")
        if cfg.get("hidden_act", "silu") != "silu":
            raise SystemExit("reference: hidden_act %r is not implemented" % cfg["hidden_act"])
        self.clip_qkv = cfg.get("clip_qkv") if self.arch == "olmoe" else None
        self.n_experts = cfg.get("num_experts") or cfg.get("num_local_experts") or 0
        self.top_k = cfg["num_experts_per_tok"]
        # HF: mixtral always renormalises the top-k weights; olmoe and
        # qwen3_moe only when norm_topk_prob (OLMoE ships false).
        self.norm_topk = True if self.arch == "mixtral" else bool(cfg.get("norm_topk_prob", False))
        # HF: Mixtral uses a sliding-window mask when sliding_window is set;
        # Qwen3MoeConfig drops sliding_window unless use_sliding_window.
        self.window = None
        if self.arch == "mixtral":
            self.window = cfg.get("sliding_window")
        elif self.arch == "qwen3_moe" and cfg.get("use_sliding_window"):
            raise SystemExit("reference: qwen3_moe use_sliding_window is not implemented")
        q = cfg.get("quantization_config") or {}
        self.fp8_block = tuple(q.get("weight_block_size") or (128, 128))
        self.tensors = st.load_dir(model_dir)
        self.tie = cfg.get("tie_word_embeddings", False)

    def is_moe(self, layer):
        if self.arch != "qwen3_moe":
            return True
        # HF Qwen3MoeDecoderLayer: sparse unless listed in mlp_only_layers,
        # and only every decoder_sparse_step-th layer (1-based).
        return (layer not in (self.cfg.get("mlp_only_layers") or [])
                and self.n_experts > 0
                and (layer + 1) % self.cfg.get("decoder_sparse_step", 1) == 0)

    def has(self, name):
        return name in self.tensors

    def w(self, name):
        """Float64 copy of a tensor; fp8 weights are dequantized with their
        name + "_scale_inv" blocks (float32 product, as DeepSeek's kernel)."""
        if name not in self.tensors:
            raise SystemExit("reference: checkpoint has no tensor %r" % name)
        t = self.tensors[name]
        if t.dtype == "F8_E4M3":
            s = self.tensors.get(name + "_scale_inv")
            if s is None:
                raise SystemExit("reference: fp8 tensor %r has no %s_scale_inv" % (name, name))
            return st.fp8_block_dequantize(t.raw, st.to_f32(s), self.fp8_block).astype(np.float64)
        return st.to_f32(t).astype(np.float64)

    def rows(self, name, ids):
        t = self.tensors[name]
        if t.dtype == "F8_E4M3":
            return self.w(name)[ids]
        return st.to_f32(st.Tensor(t.dtype, (len(ids), t.shape[1]), t.raw[ids])).astype(np.float64)

    def moe_prefix(self, layer):
        p = "model.layers.%d." % layer
        if self.arch == "mixtral" and self.has(p + "block_sparse_moe.gate.weight"):
            return p + "block_sparse_moe."
        return p + "mlp."

    def experts(self, layer):
        """(gate [E, I, H], up [E, I, H], down [E, H, I]) of one MoE layer."""
        m = self.moe_prefix(layer)
        if self.has(m + "experts.gate_up_proj"):
            # transformers v5 fused layout: gate_up_proj [E, 2I, H], gate rows
            # first (HF: linear(x, gate_up_proj[e]).chunk(2, dim=-1)).
            gu = self.w(m + "experts.gate_up_proj")
            down = self.w(m + "experts.down_proj")
            inter = gu.shape[1] // 2
            return gu[:, :inter], gu[:, inter:], down
        names = ("w1", "w3", "w2") if self.arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        out = []
        for n in names:
            out.append(np.stack([self.w("%sexperts.%d.%s.weight" % (m, e, n))
                                 for e in range(self.n_experts)]))
        return tuple(out)


def rms_norm(x, weight, eps):
    # HF *RMSNorm: variance = mean(x^2) over the last axis in float32, then
    # weight * (x * rsqrt(variance + eps)).
    var = np.mean(x * x, axis=-1, keepdims=True)
    return weight * (x / np.sqrt(var + eps))


silu = ref_common.silu


def rope_tables(head_dim, theta, n):
    """cos, sin [n, head_dim] as HF's default rotary embedding builds them:
    inv_freq = 1 / theta^(arange(0, d, 2) / d) in float32, angles = position *
    inv_freq in float32, then emb = cat(freqs, freqs) (rotate-half layout)."""
    idx = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / (np.float32(theta) ** idx)).astype(np.float32)
    freqs = (np.arange(n, dtype=np.float32)[:, None] * inv_freq[None, :]).astype(np.float32)
    emb = np.concatenate([freqs, freqs], axis=-1).astype(np.float64)
    return np.cos(emb), np.sin(emb)


def apply_rope(x, cos, sin):
    """x [n, heads, d]: x * cos + rotate_half(x) * sin, rotate_half(x) =
    cat(-x[d/2:], x[:d/2])."""
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def linear(m, x, name):
    y = x @ m.w(name + ".weight").T
    if m.has(name + ".bias"):
        y = y + m.w(name + ".bias")
    return y


def attention(m, layer, h, cos, sin):
    p = "model.layers.%d.self_attn." % layer
    n = h.shape[0]
    nh, nkv, hd = m.n_heads, m.n_kv, m.head_dim
    q = linear(m, h, p + "q_proj")
    k = linear(m, h, p + "k_proj")
    v = linear(m, h, p + "v_proj")
    if m.arch == "olmoe":
        # HF OlmoeAttention: q_norm / k_norm over the whole projected vectors
        # (weights [heads*hd] and [kv_heads*hd]) before the head reshape, then
        # clip_qkv clamps q, k and v, then RoPE.
        q = rms_norm(q, m.w(p + "q_norm.weight"), m.eps)
        k = rms_norm(k, m.w(p + "k_norm.weight"), m.eps)
        if m.clip_qkv is not None:
            c = float(m.clip_qkv)
            q, k, v = np.clip(q, -c, c), np.clip(k, -c, c), np.clip(v, -c, c)
    q = q.reshape(n, nh, hd)
    k = k.reshape(n, nkv, hd)
    v = v.reshape(n, nkv, hd)
    if m.arch == "qwen3_moe":
        # HF Qwen3MoeAttention: q_norm / k_norm per head (weight [hd]) on the
        # reshaped q and k, before RoPE.
        q = rms_norm(q, m.w(p + "q_norm.weight"), m.eps)
        k = rms_norm(k, m.w(p + "k_norm.weight"), m.eps)
    q = apply_rope(q, cos, sin)
    k = apply_rope(k, cos, sin)
    # Causal mask (and Mixtral's sliding window: key j visible from query i
    # when 0 <= i - j < window).
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allowed = j <= i
    if m.window is not None:
        allowed &= (i - j) < m.window
    scale = hd ** -0.5
    group = nh // nkv
    out = np.empty((n, nh, hd))
    for head in range(nh):
        kvh = head // group            # HF repeat_kv: head h reads kv head h // group
        s = (q[:, head] @ k[:, kvh].T) * scale
        s = np.where(allowed, s, -np.inf)
        s = s - s.max(axis=-1, keepdims=True)
        e = np.exp(s)
        out[:, head] = (e / e.sum(axis=-1, keepdims=True)) @ v[:, kvh]
    return linear(m, out.reshape(n, nh * hd), p + "o_proj")


swiglu = ref_common.swiglu


def moe(m, layer, h, record):
    pfx = m.moe_prefix(layer)
    logits = h @ m.w(pfx + "gate.weight").T
    # HF: softmax over all experts (float32), top-k of the probabilities, then
    # optional renormalisation of the k selected weights.
    top, weights, margins = ref_common.softmax_topk(logits, m.top_k, m.norm_topk)
    out = ref_common.routed_sum(h, top, weights, *m.experts(layer))
    record.append({"layer": layer, "experts": top.tolist(), "weights": weights.tolist(),
                   "margins": margins.tolist()})
    return out


def dense_mlp(m, layer, h):
    p = "model.layers.%d.mlp." % layer
    return swiglu(h, m.w(p + "gate_proj.weight"), m.w(p + "up_proj.weight"),
                  m.w(p + "down_proj.weight"))


def forward(m, tokens):
    """Returns (logits [n, vocab] float64, hidden [L+1, n, H], routing records)."""
    if isinstance(m, (ref_deepseek.Model, ref_deepseek_v4.Model, ref_qwen35.Model, ref_minimax_m2.Model,
                      ref_gpt_oss.Model, ref_inkling.Model)):
        return m.forward(tokens)
    n = len(tokens)
    x = m.rows("model.embed_tokens.weight", np.asarray(tokens))
    cos, sin = rope_tables(m.head_dim, m.rope_theta, n)
    hidden = [x.copy()]
    routing = []
    for layer in range(m.n_layers):
        p = "model.layers.%d." % layer
        h = rms_norm(x, m.w(p + "input_layernorm.weight"), m.eps)
        x = x + attention(m, layer, h, cos, sin)
        h = rms_norm(x, m.w(p + "post_attention_layernorm.weight"), m.eps)
        x = x + (moe(m, layer, h, routing) if m.is_moe(layer) else dense_mlp(m, layer, h))
        hidden.append(x.copy())
    x = rms_norm(x, m.w("model.norm.weight"), m.eps)
    head = "lm_head.weight" if m.has("lm_head.weight") or not m.tie else "model.embed_tokens.weight"
    logits = x @ m.w(head).T
    return logits, np.stack(hidden), routing


def min_margin(routing):
    best = (np.inf, None, None)
    for r in routing:
        for t, g in enumerate(r["margins"]):
            if g < best[0]:
                best = (g, r["layer"], t)
    return best


def token_range(model_dir, vocab):
    """Ids a prompt can contain: the tokenizer's ids when there is one."""
    path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.exists(path):
        return vocab
    with open(path) as f:
        tok = json.load(f)
    vocab_ids = tok.get("model", {}).get("vocab", {})
    n = len(vocab_ids) if isinstance(vocab_ids, list) else max(vocab_ids.values(), default=-1) + 1
    ids = [n - 1] + [a["id"] for a in tok.get("added_tokens", [])]
    return min(vocab, max(ids) + 1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", help="comma-separated token ids")
    ap.add_argument("--pick-tokens", type=int, metavar="N", help="draw N deterministic token ids")
    ap.add_argument("--tokens-out", help="with --pick-tokens: where to write the ids")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-margin", type=float, default=None,
                    help="smallest acceptable top-k router margin (default 1e-4 with "
                         "--pick-tokens, unchecked otherwise)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dump-hidden", action="store_true")
    ap.add_argument("--mtp-out", help="deepseek_v3 / glm4_moe / deepseek_v4: also write the MTP head's logits "
                    "[n_tokens - 1, vocab] (row t predicts token t + 2); its routing counts in the margin")
    ap.add_argument("--mtp-hidden", choices=("normed", "raw"), default="normed",
                    help="hidden state fed to the MTP head: after model.norm (default, as vLLM "
                    "and SGLang) or the residual stream before it")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if (args.tokens is None) == (args.pick_tokens is None):
        ap.error("give exactly one of --tokens and --pick-tokens")
    if args.pick_tokens is not None and not args.tokens_out:
        ap.error("--pick-tokens needs --tokens-out")

    m = (ref_deepseek.load(args.model, args.mtp_out is not None, args.mtp_hidden)
         or ref_deepseek_v4.load(args.model, args.mtp_out is not None) or ref_qwen35.load(args.model)
         or ref_minimax_m2.load(args.model) or ref_gpt_oss.load(args.model)
         or ref_inkling.load(args.model) or Model(args.model))
    if args.mtp_out and isinstance(m, ref_qwen35.Model):
        ap.error("--mtp-out: no MTP reference for %s (transformers v5.15.0 does not run mtp.*)" % m.arch)
    if args.mtp_out and not getattr(m, "want_mtp", False):
        ap.error("--mtp-out: the model has no MTP layer")
    if args.tokens is not None:
        try:
            tokens = [int(t) for t in args.tokens.split(",") if t.strip() != ""]
        except ValueError:
            ap.error("--tokens must be comma-separated integers")
        if not tokens:
            ap.error("--tokens is empty")
        bad = [t for t in tokens if not 0 <= t < m.vocab]
        if bad:
            ap.error("token ids %s are outside the vocabulary of %d" % (bad, m.vocab))
        logits, hidden, routing = forward(m, tokens)
        margin = min_margin(routing)
        threshold = args.min_margin
    else:
        threshold = 1e-4 if args.min_margin is None else args.min_margin
        limit = token_range(args.model, m.vocab)
        for attempt in range(64):
            rng = random.Random(args.seed + attempt)
            tokens = [rng.randrange(limit) for _ in range(args.pick_tokens)]
            logits, hidden, routing = forward(m, tokens)
            margin = min_margin(routing)
            if margin[0] >= threshold:
                break
            if not args.quiet:
                sys.stderr.write("reference: draw %d has router margin %.3g, drawing again\n"
                                 % (args.seed + attempt, margin[0]))
        else:
            sys.stderr.write("reference: no token draw in 64 reached router margin %g\n" % threshold)
            return 3
        with open(args.tokens_out, "w") as f:
            f.write(",".join(str(t) for t in tokens) + "\n")

    if not np.all(np.isfinite(logits)):
        raise SystemExit("reference: non-finite logits")
    logits.astype("<f4").tofile(args.out)
    if args.mtp_out:
        m.mtp_logits.astype("<f4").tofile(args.mtp_out)
    if args.dump_hidden:
        hidden.astype("<f4").tofile(args.out + ".hidden.f32")
        with open(args.out + ".routing.json", "w") as f:
            json.dump({"tokens": tokens, "layers": routing}, f)
            f.write("\n")
    if not args.quiet:
        where = "" if margin[1] is None else " (layer %d, token %d)" % (margin[1], margin[2])
        sys.stderr.write("reference: %s, %d tokens, vocab %d, logits std %.3f range [%.3f, %.3f], "
                         "min router margin %.3g%s\n"
                         % (m.arch, len(tokens), m.vocab, logits.std(), logits.min(),
                            logits.max(), margin[0], where))
        if hasattr(m, "note"):
            sys.stderr.write(m.note())
    if threshold is not None and margin[0] < threshold:
        sys.stderr.write("reference: router margin %.3g is below %g\n" % (margin[0], threshold))
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
