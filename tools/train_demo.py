#!/usr/bin/python3
"""Trains colibri's default model: a tiny Qwen3-MoE that writes King James English.

Corpus: the King James Version of the Bible (1611), public domain, as
Debian's bible-kjv-text package (4.38) ships it for the `bible` program of
bible-kjv: 31,102 verses, 4.4 MB of text, read with
`bible -f Gen1:1-Rev22:21` (one verse per line).  The package's copyright
file: the translation's copyright has expired; the retrieval data "is
provided for unrestricted use".  Install both with
`apt-get install bible-kjv bible-kjv-text`.

What it writes into --out (a Hugging Face checkpoint in the released
Qwen3-MoE layout, loaded by colibri as any downloaded model is):
  tokenizer.json, tokenizer_config.json  byte-level BPE trained here on the
      training verses (GPT-2 byte map and pre-tokenizer regex), 4,096 tokens
      with 5 special tokens, and a small chat template
  config.json, generation_config.json, model.safetensors (bf16)
  train_log.tsv   the loss curve: step, tokens seen, lr, train loss, and the
                  held-out loss every --eval-every steps
  eval.json       held-out perplexity of the saved (bf16) weights, computed
                  here in float32, plus the token ids and per-window loss of
                  the first windows, which the engine's test recomputes
  TRAINING.md     what was trained, on what, with which numbers

Split: every 40th chapter of the Bible (counted from Genesis 1) is held
out; the rest is training text.  A quarter of the training windows are
drawn from a chat-formatted stream (a verse as the user's turn, the next
two as the assistant's) so that `colibri chat` answers in a turn that ends.

Deterministic: a fixed seed drives initialisation and the order of
windows; torch runs on --threads threads (default 2).  The same torch build,
BLAS and thread count reproduce the checkpoint bit for bit (checked by
training twice with --steps 5 and comparing the files); another build may
differ in the last bits of the float sums.  On this project's 2-core
machine the default run (--steps 500, 2M tokens) takes about 30 minutes.

    /usr/bin/python3 tools/train_demo.py --out models/kjv-moe-hf [--steps 500] [--threads 2]

Needs Debian's python3-torch, python3-numpy and python3-regex, and
libopenblas0-pthread: Debian's torch does its matrix products through the
system BLAS, and the reference libblas3 it falls back to is 40x slower
(2 GFLOP/s instead of 90 on two cores).  An offline tool: the committed
checkpoint is what make demo uses; nothing here runs on colibri's token
path.
"""

import argparse
import heapq
import json
import math
import os
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import regex

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_dir  # noqa: E402
import safetensors_np  # noqa: E402

SEED = 20261201
VOCAB = 4096
SPECIALS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}")

# The model: Qwen3-MoE layout, every layer sparse, tied embeddings.
MODEL = dict(hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64,
             experts=8, top_k=2, expert_ffn=128, rope_theta=10000.0, eps=1e-6)
SEQ = 256
BATCH = 16
HELD_OUT_EVERY = 40     # chapters
CHAT_SHARE = 0.25
TEST_WINDOWS = 4        # held-out windows whose ids and loss go to eval.json


# ------------------------------------------------------------------ corpus


def read_corpus(bible="bible"):
    """[(chapter key, verse text)] of the whole KJV, in order."""
    try:
        out = subprocess.run([bible, "-f", "Gen1:1-Rev22:21"], check=True,
                             capture_output=True).stdout.decode("ascii")
    except FileNotFoundError:
        sys.exit("train_demo: the `bible` program is missing: apt-get install bible-kjv bible-kjv-text")
    verses = []
    for line in out.splitlines():
        ref, _, text = line.partition(" ")
        chapter = ref.rsplit(":", 1)[0]
        if not text or ":" not in ref:
            sys.exit("train_demo: unexpected line from bible: %r" % line[:80])
        verses.append((chapter, text.strip()))
    if len(verses) != 31102:
        sys.exit("train_demo: expected 31102 verses from bible, got %d" % len(verses))
    return verses


def split_corpus(verses):
    train, held = [], []
    chapter, n = None, -1
    for ch, text in verses:
        if ch != chapter:
            chapter, n = ch, n + 1
        (held if n % HELD_OUT_EVERY == HELD_OUT_EVERY // 2 else train).append(text)
    return train, held


# ------------------------------------------------------------------ BPE


BYTE_MAP = hf_dir.bytes_to_unicode()
PRETOK = regex.compile(GPT2_PATTERN)


def pieces(text):
    for m in PRETOK.finditer(text):
        yield "".join(BYTE_MAP[b] for b in m.group().encode("utf-8"))


def train_bpe(texts, n_merges):
    """Merges learned from the word counts of texts, most frequent pair first
    (ties: the smaller pair as strings), one heap entry per count change."""
    counts = Counter()
    for t in texts:
        counts.update(pieces(t))
    words = [list(w) for w in counts]
    freq = [counts[w] for w in counts]
    pair_n = Counter()
    where = {}
    for i, w in enumerate(words):
        for p in zip(w, w[1:]):
            pair_n[p] += freq[i]
            where.setdefault(p, set()).add(i)
    heap = [(-n, p) for p, n in pair_n.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        negn, p = heapq.heappop(heap)
        if pair_n.get(p, 0) != -negn or -negn <= 0:
            continue
        merges.append(p)
        joined = p[0] + p[1]
        touched = set()
        for i in sorted(where.pop(p, ())):
            w = words[i]
            for q in zip(w, w[1:]):
                pair_n[q] -= freq[i]
                touched.add(q)
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == p[0] and w[j + 1] == p[1]:
                    out.append(joined)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for q in zip(out, out[1:]):
                pair_n[q] += freq[i]
                where.setdefault(q, set()).add(i)
                touched.add(q)
        for q in touched:
            if q != p and pair_n[q] > 0:
                heapq.heappush(heap, (-pair_n[q], q))
        pair_n.pop(p, None)
    return merges


class Encoder:
    """Byte-level BPE by merge rank, as the tokenizers library applies it."""

    def __init__(self, merges):
        self.vocab = {BYTE_MAP[b]: i for i, b in enumerate(sorted(BYTE_MAP))}
        self.ranks = {}
        for r, (a, b) in enumerate(merges):
            self.ranks[(a, b)] = r
            self.vocab[a + b] = 256 + r
        for i, s in enumerate(SPECIALS):
            self.vocab[s] = VOCAB - len(SPECIALS) + i
        self.special = {s: self.vocab[s] for s in SPECIALS}
        self.cache = {}

    def word(self, w):
        ids = self.cache.get(w)
        if ids is not None:
            return ids
        sym = list(w)
        while len(sym) > 1:
            best, at = None, -1
            for j in range(len(sym) - 1):
                r = self.ranks.get((sym[j], sym[j + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, j
            if best is None:
                break
            sym[at:at + 2] = [sym[at] + sym[at + 1]]
        ids = [self.vocab[s] for s in sym]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for p in pieces(text):
            out.extend(self.word(p))
        return out


def write_tokenizer(out, merges, enc):
    vocab = sorted(enc.vocab.items(), key=lambda kv: kv[1])
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": enc.special[s], "content": s, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": True} for s in SPECIALS],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                          "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True,
                    "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {s: i for s, i in vocab if s not in enc.special},
                  "merges": ["%s %s" % m for m in merges]},
    }
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|end|>",
        "pad_token": "<|endoftext|>",
        "add_bos_token": False,
        "model_max_length": SEQ * 4,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {str(enc.special[s]): {"content": s, "special": True,
                                                       "lstrip": False, "rstrip": False,
                                                       "normalized": False, "single_word": False}
                                 for s in SPECIALS},
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def streams(enc, train, held):
    """Token streams: plain training text, chat-formatted training text, held-out text."""
    nl = enc.encode("\n")
    plain = []
    for t in train:
        plain.extend(enc.encode(t) + nl)
    sp = enc.special
    chat = []
    for i in range(0, len(train) - 2, 3):
        chat.extend([sp["<|user|>"]] + enc.encode("\n" + train[i]) + [sp["<|end|>"]] + nl +
                    [sp["<|assistant|>"]] + enc.encode("\n" + train[i + 1] + " " + train[i + 2]) +
                    [sp["<|end|>"]] + nl)
    heldout = []
    for t in held:
        heldout.extend(enc.encode(t) + nl)
    return (np.array(plain, np.int64), np.array(chat, np.int64), np.array(heldout, np.int64))


# ------------------------------------------------------------------ model


def build_model(torch):
    nn, F = torch.nn, torch.nn.functional
    m = MODEL

    class RMSNorm(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))

        def forward(self, x):
            var = x.pow(2).mean(-1, keepdim=True)
            return self.weight * (x * torch.rsqrt(var + m["eps"]))

    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            H, hd = m["hidden"], m["head_dim"]
            self.input_layernorm = RMSNorm(H)
            self.q_proj = nn.Linear(H, m["heads"] * hd, bias=False)
            self.k_proj = nn.Linear(H, m["kv_heads"] * hd, bias=False)
            self.v_proj = nn.Linear(H, m["kv_heads"] * hd, bias=False)
            self.o_proj = nn.Linear(m["heads"] * hd, H, bias=False)
            self.q_norm = RMSNorm(hd)
            self.k_norm = RMSNorm(hd)
            self.post_attention_layernorm = RMSNorm(H)
            self.gate = nn.Linear(H, m["experts"], bias=False)
            E, I = m["experts"], m["expert_ffn"]
            self.w_gate = nn.Parameter(torch.empty(E, I, H))
            self.w_up = nn.Parameter(torch.empty(E, I, H))
            self.w_down = nn.Parameter(torch.empty(E, H, I))

        def attn(self, x, cos, sin, mask):
            B, T, _ = x.shape
            hd, nh, nkv = m["head_dim"], m["heads"], m["kv_heads"]
            q = self.q_norm(self.q_proj(x).view(B, T, nh, hd)).transpose(1, 2)
            k = self.k_norm(self.k_proj(x).view(B, T, nkv, hd)).transpose(1, 2)
            v = self.v_proj(x).view(B, T, nkv, hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(nh // nkv, dim=1)
            v = v.repeat_interleave(nh // nkv, dim=1)
            a = (q @ k.transpose(-1, -2)) * hd ** -0.5 + mask
            a = torch.softmax(a, dim=-1)
            return self.o_proj((a @ v).transpose(1, 2).reshape(B, T, nh * hd))

        def moe(self, x):
            B, T, H = x.shape
            x = x.reshape(B * T, H)
            probs = torch.softmax(self.gate(x), dim=-1)
            top_p, top_i = torch.topk(probs, m["top_k"], dim=-1)
            top_p = top_p / top_p.sum(-1, keepdim=True)
            out = torch.zeros_like(x)
            for e in range(m["experts"]):
                rows, slot = (top_i == e).nonzero(as_tuple=True)
                if rows.numel() == 0:
                    continue
                xe = x[rows]
                he = F.silu(xe @ self.w_gate[e].t()) * (xe @ self.w_up[e].t())
                out.index_add_(0, rows, (he @ self.w_down[e].t()) * top_p[rows, slot, None])
            # Switch-style balance: fraction routed to each expert times its mean probability.
            frac = torch.zeros(m["experts"]).index_add_(
                0, top_i.reshape(-1), torch.ones(top_i.numel())) / top_i.numel()
            aux = m["experts"] * (frac * probs.mean(0)).sum()
            return out.reshape(B, T, H), aux

        def forward(self, x, cos, sin, mask):
            x = x + self.attn(self.input_layernorm(x), cos, sin, mask)
            y, aux = self.moe(self.post_attention_layernorm(x))
            return x + y, aux

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, m["hidden"])
            self.layers = nn.ModuleList([Layer() for _ in range(m["layers"])])
            self.norm = RMSNorm(m["hidden"])
            hd = m["head_dim"]
            inv = 1.0 / (m["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
            self.register_buffer("inv_freq", inv, persistent=False)

        def forward(self, ids):
            B, T = ids.shape
            pos = torch.arange(T, dtype=torch.float32)
            f = pos[:, None] * self.inv_freq[None, :]
            emb = torch.cat((f, f), dim=-1)
            cos, sin = emb.cos()[None, None], emb.sin()[None, None]
            mask = torch.full((T, T), float("-inf")).triu(1)
            x = self.embed(ids)
            aux = 0.0
            for layer in self.layers:
                x, a = layer(x, cos, sin, mask)
                aux = aux + a
            return self.norm(x) @ self.embed.weight.t(), aux / len(self.layers)

    model = Model()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                continue
            p.normal_(0.0, 0.02)
    return model


def hf_views(model):
    """{HF name: the model's tensor (a view)} in the released Qwen3-MoE layout (per-expert names)."""
    t = {"model.embed_tokens.weight": model.embed.weight, "model.norm.weight": model.norm.weight}
    for L, layer in enumerate(model.layers):
        p = "model.layers.%d." % L
        t[p + "input_layernorm.weight"] = layer.input_layernorm.weight
        t[p + "post_attention_layernorm.weight"] = layer.post_attention_layernorm.weight
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t[p + "self_attn.%s.weight" % n] = getattr(layer, n).weight
        t[p + "self_attn.q_norm.weight"] = layer.q_norm.weight
        t[p + "self_attn.k_norm.weight"] = layer.k_norm.weight
        t[p + "mlp.gate.weight"] = layer.gate.weight
        for e in range(MODEL["experts"]):
            q = p + "mlp.experts.%d." % e
            t[q + "gate_proj.weight"] = layer.w_gate[e]
            t[q + "up_proj.weight"] = layer.w_up[e]
            t[q + "down_proj.weight"] = layer.w_down[e]
    return t


def hf_config(enc):
    m = MODEL
    return {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": None, "eos_token_id": [enc.special["<|end|>"], enc.special["<|endoftext|>"]],
        "pad_token_id": enc.special["<|endoftext|>"],
        "decoder_sparse_step": 1, "head_dim": m["head_dim"], "hidden_act": "silu",
        "hidden_size": m["hidden"], "initializer_range": 0.02,
        "intermediate_size": m["expert_ffn"] * m["top_k"],
        "max_position_embeddings": SEQ * 4, "max_window_layers": m["layers"],
        "mlp_only_layers": [], "moe_intermediate_size": m["expert_ffn"],
        "norm_topk_prob": True, "num_attention_heads": m["heads"],
        "num_experts": m["experts"], "num_experts_per_tok": m["top_k"],
        "num_hidden_layers": m["layers"], "num_key_value_heads": m["kv_heads"],
        "output_router_logits": False, "rms_norm_eps": m["eps"],
        "rope_scaling": None, "rope_theta": m["rope_theta"],
        "router_aux_loss_coef": 0.01, "sliding_window": None,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "5.15.0", "use_cache": True,
        "use_sliding_window": False, "vocab_size": VOCAB,
    }


# ------------------------------------------------------------------ training


def windows_loss(torch, model, data, starts):
    """Mean next-token loss (nats) over windows data[s:s+SEQ], one value per window."""
    out = []
    with torch.no_grad():
        for s in starts:
            ids = torch.from_numpy(data[s:s + SEQ][None])
            logits, _ = model(ids)
            out.append(float(torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:])))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--bible", default="bible")
    args = ap.parse_args()

    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)

    verses = read_corpus(args.bible)
    train, held = split_corpus(verses)
    print("corpus: %d verses, %d training, %d held out (one chapter in %d)"
          % (len(verses), len(train), len(held), HELD_OUT_EVERY), flush=True)
    merges = train_bpe(train, VOCAB - 256 - len(SPECIALS))
    enc = Encoder(merges)
    write_tokenizer(args.out, merges, enc)
    plain, chat, heldout = streams(enc, train, held)
    print("tokenizer: %d merges, %.2f bytes/token; tokens: %d plain, %d chat, %d held out (%.0f s)"
          % (len(merges), sum(len(t) + 1 for t in train) / len(plain), len(plain), len(chat),
             len(heldout), time.time() - t0), flush=True)

    model = build_model(torch)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    warm = max(1, args.steps // 20)
    held_starts = list(range(0, len(heldout) - SEQ, SEQ))
    eval_starts = held_starts[::max(1, len(held_starts) // 32)][:32]
    log = open(os.path.join(args.out, "train_log.tsv"), "w")
    log.write("step\ttokens\tlr\ttrain_loss\theldout_loss\n")
    ema = None
    for step in range(1, args.steps + 1):
        lr = args.lr * (step / warm if step <= warm else
                        0.1 + 0.45 * (1 + math.cos(math.pi * (step - warm) / (args.steps - warm))))
        for g in opt.param_groups:
            g["lr"] = lr
        rows = []
        for _ in range(BATCH):
            src = chat if rng.random() < CHAT_SHARE else plain
            s = int(rng.integers(0, len(src) - SEQ - 1))
            rows.append(src[s:s + SEQ + 1])
        batch = torch.from_numpy(np.stack(rows))
        logits, aux = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        (loss + 0.01 * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = float(loss) if ema is None else 0.95 * ema + 0.05 * float(loss)
        held_loss = ""
        if step % args.eval_every == 0 or step == args.steps:
            held_loss = "%.4f" % np.mean(windows_loss(torch, model, heldout, eval_starts))
        log.write("%d\t%d\t%.6f\t%.4f\t%s\n" % (step, step * BATCH * SEQ, lr, float(loss), held_loss))
        log.flush()
        if step % 10 == 0 or held_loss:
            el = time.time() - t0
            print("step %d/%d  loss %.3f (ema %.3f)%s  lr %.2e  %.0f s, eta %.0f s"
                  % (step, args.steps, float(loss), ema,
                     "  held-out %s" % held_loss if held_loss else "", lr, el,
                     el / step * (args.steps - step)), flush=True)
    log.close()

    # Save bf16, then evaluate exactly those weights in float32.
    views = hf_views(model)
    bf = {k: safetensors_np.f32_to_bf16(v.detach().numpy().astype(np.float32)) for k, v in views.items()}
    safetensors_np.write_file(os.path.join(args.out, "model.safetensors"),
                              {k: ("BF16", v) for k, v in bf.items()})
    with torch.no_grad():
        for k, v in views.items():
            v.copy_(torch.from_numpy(safetensors_np.bf16_to_f32(bf[k])))
    all_loss = windows_loss(torch, model, heldout, held_starts)
    test_loss = all_loss[:TEST_WINDOWS]
    train_loss = np.mean(windows_loss(torch, model, plain, [int(x) for x in np.linspace(0, len(plain) - SEQ - 1, 64)]))
    ev = {
        "about": "held-out perplexity of model.safetensors (bf16 weights, float32 arithmetic, torch), "
                 "windows of %d tokens without overlap, each scored on its last %d tokens" % (SEQ, SEQ - 1),
        "seq": SEQ,
        "heldout_windows": len(held_starts),
        "heldout_loss": float(np.mean(all_loss)),
        "heldout_ppl": float(math.exp(np.mean(all_loss))),
        "train_loss": float(train_loss),
        "train_ppl": float(math.exp(train_loss)),
        "test_windows": [{"tokens": [int(x) for x in heldout[s:s + SEQ]], "loss": l}
                         for s, l in zip(held_starts, test_loss)],
        "test_ppl": float(math.exp(np.mean(test_loss))),
        # The tokenizer as trained, for a check that the engine's loader encodes alike.
        "tokenizer_check": [{"text": t, "ids": enc.encode(t)} for t in held[:24]],
    }
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump(ev, f)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(hf_config(enc), f, indent=1)
    gen = {"do_sample": True, "temperature": 0.8, "top_p": 0.95, "top_k": 50,
           "eos_token_id": [enc.special["<|end|>"], enc.special["<|endoftext|>"]],
           "pad_token_id": enc.special["<|endoftext|>"], "transformers_version": "5.15.0"}
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=1)
    el = time.time() - t0
    with open(os.path.join(args.out, "TRAINING.md"), "w") as f:
        f.write("# kjv-moe: colibri's default model (a toy)\n\n"
                "A %.1fM-parameter Qwen3-MoE (%d layers, hidden %d, %d experts of %d, top-%d, "
                "tied embeddings, byte-level BPE of %d tokens) trained by tools/train_demo.py "
                "(seed %d, %d steps of %d x %d tokens, %d threads, %.0f min) on the King James "
                "Bible from Debian's bible-kjv-text, every %dth chapter held out.\n\n"
                "- training loss (last step): %.3f; on %d training windows: %.3f\n"
                "- held-out loss %.3f, perplexity %.2f (%d windows of %d tokens)\n"
                "- loss curve: train_log.tsv\n"
                % (n_params / 1e6, MODEL["layers"], MODEL["hidden"], MODEL["experts"],
                   MODEL["expert_ffn"], MODEL["top_k"], VOCAB, SEED, args.steps, BATCH, SEQ,
                   args.threads, el / 60, HELD_OUT_EVERY, float(loss), 64, train_loss,
                   ev["heldout_loss"], ev["heldout_ppl"], len(held_starts), SEQ))
    print("done: %d params, held-out loss %.3f ppl %.2f, train loss %.3f, %.0f s"
          % (n_params, ev["heldout_loss"], ev["heldout_ppl"], train_loss, el), flush=True)


if __name__ == "__main__":
    main()
