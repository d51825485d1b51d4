#!/usr/bin/python3
"""Cross-check of ref_deepseek_v4.py: a second, independent float32
transliteration of transformers v5.15.0's modeling_deepseek_v4.py for
deepseek_v4, compared with the reference's logits.

    xcheck_deepseek_v4.py --model HF_DIR --tokens FILE.tokens --ref FILE.f32 [--mtp-ref FILE.mtp.f32]
                          [--tol 1e-5]

Everything here is float32 and shaped like the torch code: [B, H, S, D]
tensors with view / transpose / reshape, the half-sized cos / sin expanded by
repeat_interleave(2) and rotate_half on the trailing rope slice, the
compressors' [B, n_win, 2 * ratio, D] overlap layout filled from zeros / -inf,
the sliding-window mask as an additive finfo.min mask concatenated with the
compressor's block_bias (scatter of the indexer's picks into an -inf row),
the sink column appended and dropped, the grouped output projection as a
batched matmul, the hyper-connections' split / Sinkhorn loop and
comb.transpose(-1, -2) @ streams, torch.topk semantics, and the one-hot
expert loop with index_add.  It reads the checkpoint with its own name table
(transformers' names are rebuilt from the released ones, independently of
ref_deepseek_v4.RENAMES) and shares no arithmetic with the float64
reference.  It prints the largest logit difference relative to the logits'
largest magnitude and the smallest float32 router and indexer margins, and
exits 1 when the difference exceeds --tol.  With --mtp-ref it also runs
the MTP block mtp.0 (DeepSeek's inference/model.py MTPBlock.forward:
e_proj(enorm(embed(ids))).unsqueeze(2) + h_proj(hnorm(h)), Block.forward,
its own hc_head and norm, the shared head; teacher-forced on h of positions
0..S-2 and ids 1..S-1) and compares it with the reference's MTP logits.
"""

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np as st  # noqa: E402
import xcheck_deepseek  # noqa: E402

F = np.float32
NEG = np.finfo(np.float32).min


class W(xcheck_deepseek.W):
    """Released tensors by released name, dequantized to float32 (the
    release names a weight's block scales NAME.scale, not NAME_scale_inv)."""

    def __getitem__(self, k):
        t = self.t[k]
        base = k[:-7] if k.endswith(".weight") else k
        if t.dtype == "F8_E4M3":
            return st.fp8_block_dequantize(t.raw, st.to_f32(self.t[base + ".scale"]), self.block)
        if t.dtype == "I8":
            return st.fp4_dequantize(t.raw, st.to_f32(self.t[base + ".scale"]))
        if t.dtype in ("I64", "I32"):
            return np.asarray(t.raw, dtype=np.int64)
        return st.to_f32(t)


def linear(x, w):
    return np.matmul(x, w.T).astype(F)


def rmsnorm(x, w, eps):
    var = np.mean(np.square(x, dtype=F), axis=-1, keepdims=True, dtype=F)
    y = (x * (F(1) / np.sqrt(var + F(eps))).astype(F)).astype(F)
    return y if w is None else (w * y).astype(F)


def silu(x):
    return (x * (F(1) / (F(1) + np.exp(-x)))).astype(F)


def sigmoid(x):
    return (F(1) / (F(1) + np.exp(-x))).astype(F)


def softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp((x - m).astype(F))
    return (e / np.sum(e, axis=axis, keepdims=True, dtype=F)).astype(F)


def rotate_half(x):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return np.stack((-x2, x1), axis=-1).reshape(x.shape)


def apply_rope(x, cos, sin, unsqueeze_dim=1):
    """x [B, H, S, D] (or [B, S, H, D] with unsqueeze_dim 2); cos [B, S, r/2]."""
    cos = np.expand_dims(np.repeat(cos, 2, axis=-1), unsqueeze_dim)
    sin = np.expand_dims(np.repeat(sin, 2, axis=-1), unsqueeze_dim)
    r = cos.shape[-1]
    nope, rope = x[..., :-r], x[..., -r:]
    rot = (rope * cos + rotate_half(rope) * sin).astype(F)
    return np.concatenate([nope, rot], axis=-1)


def yarn_inv_freq(p, dim, max_pos):
    """modeling_rope_utils._compute_yarn_parameters."""
    base, factor = p["rope_theta"], p["factor"]
    orig = p["original_max_position_embeddings"]
    af = p.get("attention_factor")
    if af is None:
        af = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    bf, bs = p.get("beta_fast") or 32, p.get("beta_slow") or 1

    def cdim(n_rot):
        return (dim * math.log(orig / (n_rot * 2 * math.pi))) / (2 * math.log(base))
    low, high = cdim(bf), cdim(bs)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = (F(base) ** (np.arange(0, dim, 2).astype(F) / F(dim))).astype(F)
    inv_ex = (F(1) / pos_freqs).astype(F)
    inv_in = (F(1) / (F(factor) * pos_freqs)).astype(F)
    ramp = np.clip((np.arange(dim // 2, dtype=F) - F(low)) / F(high - low), 0, 1).astype(F)
    ex = (F(1) - ramp).astype(F)
    return (inv_in * (F(1) - ex) + inv_ex * ex).astype(F), float(af)


class Net:
    def __init__(self, d):
        self.w = W(d)
        c = self.c = self.w.c
        n = c["num_hidden_layers"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        # configuration_deepseek_v4.py __post_init__ (legacy keys folded in).
        rates = dict(c.get("compress_rates") or {"compressed_sparse_attention": 4,
                                                 "heavily_compressed_attention": 128})
        if "compress_rate_csa" in c:
            rates["compressed_sparse_attention"] = c["compress_rate_csa"]
        if "compress_rate_hca" in c:
            rates["heavily_compressed_attention"] = c["compress_rate_hca"]
        self.rates = rates
        lt = c.get("layer_types")
        if lt is None:
            lt = [{0: "sliding_attention", 4: "compressed_sparse_attention",
                   128: "heavily_compressed_attention"}[r] for r in c["compress_ratios"]]
        mt = c.get("mlp_layer_types")
        if mt is None:
            k = c.get("num_hash_layers", 3)
            mt = ["hash_moe"] * min(n, k) + ["moe"] * max(0, n - k)
        # The MTP block is Block(n): compress_ratios[n] when the legacy list
        # has it, else sliding; never hash-routed.
        ratios = c.get("compress_ratios") if c.get("layer_types") is None else None
        self.layer_types = list(lt[:n]) + [
            lt[n + i] if ratios is not None and n + i < len(lt) else "sliding_attention"
            for i in range(c.get("num_nextn_predict_layers", 1) or 0)]
        self.mlp_types = list(mt[:n]) + ["moe"] * (c.get("num_nextn_predict_layers", 1) or 0)
        prf = c.get("partial_rotary_factor")
        if prf is None:
            prf = c["qk_rope_head_dim"] / c["head_dim"] if "qk_rope_head_dim" in c else 0.125
        dim = int(c["head_dim"] * prf)
        flat = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
        kind = flat.get("rope_type", flat.get("type", "default"))
        main = (F(1) / (F(c.get("rope_theta", 10000.0)) ** (np.arange(0, dim, 2).astype(F) / F(dim)))).astype(F)
        ctheta = c.get("compress_rope_theta", 160000.0)
        if kind == "yarn":
            p = dict(flat, rope_theta=ctheta)
            p.setdefault("attention_factor", 1.0)
            comp = yarn_inv_freq(p, dim, c.get("max_position_embeddings"))
        else:
            comp = ((F(1) / (F(ctheta) ** (np.arange(0, dim, 2).astype(F) / F(dim)))).astype(F), 1.0)
        self.inv = {"main": (main, 1.0), "compress": comp}
        self.router_margins, self.index_margins = [], []

    def rotary(self, label, pos):
        inv, sc = self.inv[label]
        freqs = (inv[None, :, None] @ pos[None, None, :].astype(F)).astype(F).transpose(0, 2, 1)
        return (np.cos(freqs) * F(sc)).astype(F), (np.sin(freqs) * F(sc)).astype(F)

    # -------- mHC
    def hc(self, p, x):
        c = self.c
        hc = c["hc_mult"]
        w = self.w
        flat = rmsnorm(x.reshape(x.shape[0], x.shape[1], -1), None, self.eps)
        mix = linear(flat, w[p + "_fn"])
        pre_w, post_w, comb_w = mix[..., :hc], mix[..., hc:2 * hc], mix[..., 2 * hc:]
        b, s = w[p + "_base"], w[p + "_scale"]
        pre = (sigmoid(pre_w * s[0] + b[:hc]) + F(c["hc_eps"])).astype(F)
        post = (F(2) * sigmoid(post_w * s[1] + b[hc:2 * hc])).astype(F)
        cl = (comb_w.reshape(*comb_w.shape[:-1], hc, hc) * s[2] + b[2 * hc:].reshape(hc, hc)).astype(F)
        eps = F(c["hc_eps"])
        comb = (softmax(cl, -1) + eps).astype(F)
        comb = (comb / (comb.sum(-2, keepdims=True, dtype=F) + eps)).astype(F)
        for _ in range(c["hc_sinkhorn_iters"] - 1):
            comb = (comb / (comb.sum(-1, keepdims=True, dtype=F) + eps)).astype(F)
            comb = (comb / (comb.sum(-2, keepdims=True, dtype=F) + eps)).astype(F)
        collapsed = (pre[..., None] * x).sum(axis=2, dtype=F)
        return post, comb, collapsed

    # -------- compressors
    def compress(self, x, wkv, wgate, ape, norm, rate, hd, overlap):
        B, S, _ = x.shape
        kv, gate = linear(x, wkv), linear(x, wgate)
        usable = (S // rate) * rate
        kv, gate = kv[:, :usable], gate[:, :usable]
        if kv.shape[1] == 0:
            return np.zeros((B, 0, hd), F)
        nw = usable // rate
        kv = kv.reshape(B, nw, rate, -1)
        gate = (gate.reshape(B, nw, rate, -1) + ape).astype(F)
        if overlap:
            nk = np.zeros((B, nw, 2 * rate, hd), F)
            ng = np.full((B, nw, 2 * rate, hd), -np.inf, F)
            nk[:, :, rate:] = kv[..., hd:]
            ng[:, :, rate:] = gate[..., hd:]
            if nw > 1:
                nk[:, 1:, :rate] = kv[:, :-1, :, :hd]
                ng[:, 1:, :rate] = gate[:, :-1, :, :hd]
            kv, gate = nk, ng
        comp = rmsnorm((kv * softmax(gate, 2)).sum(axis=2, dtype=F), norm, self.eps)
        pos = np.arange(nw) * rate
        cos, sin = self.rotary("compress", pos)
        return apply_rope(comp[:, None], cos, sin)[:, 0]

    def indexer(self, p, x, qres, pos):
        c, w = self.c, self.w
        rate = self.rates["compressed_sparse_attention"]
        ih, idim = c["index_n_heads"], c["index_head_dim"]
        B, S, _ = x.shape
        ck = self.compress(x, w[p + "indexer.compressor.wkv.weight"], w[p + "indexer.compressor.wgate.weight"],
                           w[p + "indexer.compressor.ape"], w[p + "indexer.compressor.norm.weight"],
                           rate, idim, True)
        cos, sin = self.rotary("compress", pos)
        q = linear(qres, w[p + "indexer.wq_b.weight"]).reshape(B, S, -1, idim).transpose(0, 2, 1, 3)
        q = apply_rope(q, cos, sin).transpose(0, 2, 1, 3)            # [B, S, H, D]
        scores = np.matmul(q, ck.transpose(0, 2, 1)[:, None]).astype(F)  # [B, S, H, T]
        scores = (np.maximum(scores, 0) * F(idim ** -0.5)).astype(F)
        weights = (linear(x, w[p + "indexer.weights_proj.weight"]) * F(ih ** -0.5)).astype(F)
        score = (scores * weights[..., None]).sum(axis=2, dtype=F)     # [B, S, T]
        T = ck.shape[1]
        k = min(c["index_topk"], T)
        thr = (pos + 1) // rate
        score = np.where(np.arange(T)[None, None, :] >= thr[None, :, None], -np.inf, score).astype(F)
        idx = np.argsort(-score, axis=-1, kind="stable")[..., :k]
        for t in range(S):
            v = np.sort(score[0, t][np.isfinite(score[0, t])])[::-1]
            if len(v) > k:
                self.index_margins.append(float(v[k - 1] - v[k]))
        return np.where(idx >= thr[None, :, None], -1, idx)

    def attention(self, L, x, pos, mask, pre):
        c, w = self.c, self.w
        p = pre + "attn."
        ltype = self.layer_types[L]
        B, S, _ = x.shape
        nh, hd = c["num_attention_heads"], c["head_dim"]
        cos, sin = self.rotary("main" if ltype == "sliding_attention" else "compress", pos)
        qres = rmsnorm(linear(x, w[p + "wq_a.weight"]), w[p + "q_norm.weight"], self.eps)
        q = linear(qres, w[p + "wq_b.weight"]).reshape(B, S, -1, hd).transpose(0, 2, 1, 3)
        q = apply_rope(rmsnorm(q, None, self.eps), cos, sin)
        kv = rmsnorm(linear(x, w[p + "wkv.weight"]), w[p + "kv_norm.weight"], self.eps)
        kv = apply_rope(kv.reshape(B, S, -1, hd).transpose(0, 2, 1, 3), cos, sin)
        if ltype != "sliding_attention":
            csa = ltype == "compressed_sparse_attention"
            rate = self.rates[ltype]
            ck = self.compress(x, w[p + "compressor.wkv.weight"], w[p + "compressor.wgate.weight"],
                               w[p + "compressor.ape"], w[p + "compressor.norm.weight"], rate, hd, csa)
            T = ck.shape[1]
            if csa:
                top = self.indexer(p, x, qres, pos)
                safe = np.where(top >= 0, top, T)
                bb = np.full((B, 1, S, T + 1), -np.inf, F)
                np.put_along_axis(bb, safe[:, None], F(0), axis=-1)
                bb = bb[..., :T]
            else:
                ent = np.arange(T)
                thr = (pos + 1) // rate
                bb = np.where(ent[None, None, None, :] >= thr[None, None, :, None], -np.inf, 0).astype(F)
            kv = np.concatenate([kv, ck[:, None]], axis=2)
            mask = np.concatenate([mask, bb], axis=-1)
        attn = (np.matmul(q, np.repeat(kv, nh, axis=1).transpose(0, 1, 3, 2)) * F(hd ** -0.5) + mask).astype(F)
        sinks = np.broadcast_to(w[p + "attn_sink"].reshape(1, -1, 1, 1), (B, nh, S, 1))
        comb = np.concatenate([attn, sinks], axis=-1)
        comb = (comb - comb.max(-1, keepdims=True)).astype(F)
        probs = softmax(comb, -1)[..., :-1]
        out = np.matmul(probs, np.repeat(kv, nh, axis=1)).astype(F).transpose(0, 2, 1, 3)   # [B, S, H, D]
        out = apply_rope(out.transpose(0, 2, 1, 3), cos, -sin).transpose(0, 2, 1, 3)
        g = c["o_groups"]
        grouped = out.reshape(B, S, g, -1)
        wa = w[p + "wo_a.weight"]
        wv = wa.reshape(g, -1, grouped.shape[-1]).transpose(0, 2, 1)
        xg = grouped.reshape(-1, g, grouped.shape[-1]).transpose(1, 0, 2)
        y = np.matmul(xg, wv).astype(F).transpose(1, 0, 2).reshape(B, S, -1)
        return linear(y, w[p + "wo_b.weight"])

    def gate_act(self, gu):
        lim = F(self.c["swiglu_limit"])
        g, u = np.split(gu, 2, axis=-1)
        return (silu(np.minimum(g, lim)) * np.clip(u, -lim, lim)).astype(F)

    def moe(self, L, x, ids, pre):
        c, w = self.c, self.w
        p = pre + "ffn."
        B, S, H = x.shape
        flat = x.reshape(-1, H)
        logits = linear(flat, w[p + "gate.weight"])
        sp = np.where(logits > 20, logits, np.log1p(np.exp(np.minimum(logits, 20)))).astype(F)
        scores = np.sqrt(sp).astype(F)
        k = c["num_experts_per_tok"]
        if self.mlp_types[L] == "hash_moe":
            idx = w[p + "gate.tid2eid"][ids.reshape(-1)]
        else:
            biased = (scores + w[p + "gate.bias"]).astype(F)
            idx = np.argsort(-biased, axis=-1, kind="stable")[:, :k]
            srt = -np.sort(-biased, axis=-1)
            self.router_margins.append(float((srt[:, k - 1] - srt[:, k]).min()))
        wt = np.take_along_axis(scores, idx, 1)
        wt = (wt / (wt.sum(-1, keepdims=True, dtype=F) + F(1e-20)) * F(c["routed_scaling_factor"])).astype(F)
        E = c["n_routed_experts"]
        final = np.zeros_like(flat)
        onehot = np.eye(E, dtype=np.int64)[idx].transpose(2, 1, 0)      # [E, k, T]
        for e in np.nonzero(onehot.sum(axis=(1, 2)) > 0)[0]:
            kpos, tok = np.nonzero(onehot[e])
            gu = np.concatenate([w["%sexperts.%d.w1.weight" % (p, e)], w["%sexperts.%d.w3.weight" % (p, e)]], 0)
            cur = self.gate_act(linear(flat[tok], gu))
            cur = (linear(cur, w["%sexperts.%d.w2.weight" % (p, e)]) * wt[tok, kpos, None]).astype(F)
            np.add.at(final, tok, cur)
        s = p + "shared_experts."
        lim = F(c["swiglu_limit"])
        gt = np.minimum(linear(x, w[s + "w1.weight"]), lim)
        up = np.clip(linear(x, w[s + "w3.weight"]), -lim, lim)
        shared = linear((silu(gt) * up).astype(F), w[s + "w2.weight"])
        return (final.reshape(B, S, H) + shared).astype(F)

    def run(self, ids):
        c, w = self.c, self.w
        S = len(ids)
        pos = np.arange(S)
        emb = w["embed.weight"][ids][None]
        h = np.ascontiguousarray(np.broadcast_to(emb[:, :, None], (1, S, c["hc_mult"], emb.shape[-1])))
        i, j = pos[:, None], pos[None, :]
        mask = np.where((j <= i) & (j > i - c["sliding_window"]), F(0), NEG).astype(F)[None, None]
        for L in range(c["num_hidden_layers"]):
            h = self.block(L, "layers.%d." % L, h, ids, pos, mask)
        self.streams = h
        return self.head(h, "", w["norm.weight"])

    def block(self, L, p, h, ids, pos, mask):
        w = self.w
        post, comb, col = self.hc(p + "hc_attn", h)
        a = self.attention(L, rmsnorm(col, w[p + "attn_norm.weight"], self.eps), pos, mask, p)
        h = (post[..., None] * a[:, :, None] + np.matmul(comb.transpose(0, 1, 3, 2), h)).astype(F)
        post, comb, col = self.hc(p + "hc_ffn", h)
        m = self.moe(L, rmsnorm(col, w[p + "ffn_norm.weight"], self.eps), ids[None], p)
        return (post[..., None] * m[:, :, None] + np.matmul(comb.transpose(0, 1, 3, 2), h)).astype(F)

    def head(self, h, p, norm):
        c, w = self.c, self.w
        S = h.shape[1]
        flat = rmsnorm(h.reshape(1, S, -1), None, self.eps)
        mixes = linear(flat, w[p + "hc_head_fn"])
        pre = (sigmoid(mixes * w[p + "hc_head_scale"] + w[p + "hc_head_base"]) + F(c["hc_eps"])).astype(F)
        y = (pre[..., None] * h).sum(axis=2, dtype=F)
        return linear(rmsnorm(y, norm, self.eps), w["head.weight"])[0]

    def mtp(self, ids):
        """MTP logits [S - 1, vocab] after run(ids)."""
        c, w = self.c, self.w
        S = len(ids) - 1
        nxt = ids[1:]
        pos = np.arange(S)
        i, j = pos[:, None], pos[None, :]
        mask = np.where((j <= i) & (j > i - c["sliding_window"]), F(0), NEG).astype(F)[None, None]
        e = rmsnorm(w["embed.weight"][nxt][None], w["mtp.0.enorm.weight"], self.eps)
        x = rmsnorm(self.streams[:, :S], w["mtp.0.hnorm.weight"], self.eps)
        x = (linear(e, w["mtp.0.e_proj.weight"])[:, :, None] + linear(x, w["mtp.0.h_proj.weight"])).astype(F)
        x = self.block(c["num_hidden_layers"], "mtp.0.", x, nxt, pos, mask)
        return self.head(x, "mtp.0.", w["mtp.0.norm.weight"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--mtp-ref", help="the reference's MTP logits (reference.py --mtp-out)")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    ids = np.array([int(t) for t in open(a.tokens).read().strip().split(",")])
    net = Net(a.model)
    logits = net.run(ids)
    want = np.fromfile(a.ref, dtype="<f4").reshape(len(ids), net.c["vocab_size"])
    scale = float(np.abs(want).max())
    d = float(np.abs(logits.astype(np.float64) - want).max()) / scale
    print("xcheck: logits max |diff| / max |ref| = %.2e (ref max %.3f), top1 %d/%d"
          % (d, scale, int((logits.argmax(-1) == want.argmax(-1)).sum()), len(ids)))
    if a.mtp_ref:
        got = net.mtp(ids)
        want_m = np.fromfile(a.mtp_ref, dtype="<f4").reshape(len(ids) - 1, net.c["vocab_size"])
        dm = float(np.abs(got.astype(np.float64) - want_m).max()) / float(np.abs(want_m).max())
        print("xcheck: MTP logits max |diff| / max |ref| = %.2e, top1 %d/%d"
              % (dm, int((got.argmax(-1) == want_m.argmax(-1)).sum()), len(ids) - 1))
        d = max(d, dm)
    print("xcheck: float32 router margin %.3g" % min(net.router_margins or [float("inf")]))
    print("xcheck: float32 indexer margin %.3g" % min(net.index_margins or [float("inf")]))
    return 1 if d > a.tol else 0


if __name__ == "__main__":
    sys.exit(main())
