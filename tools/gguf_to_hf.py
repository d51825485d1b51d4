#!/usr/bin/python3
"""Turns a GGUF file (llama.cpp's layout) back into a float32 Hugging Face
checkpoint: the independent reference side of colibri's GGUF input.

    gguf_to_hf.py FILE.gguf --out HF_DIR [--quiet]

FILE may be the first file of a split set (NAME-00001-of-0000N.gguf); the
others are found by name.  Everything here is written from the published
format (gguf-py's docs, ggml.h), not from colibri's C reader:

  header   "GGUF", u32 version (2 or 3), u64 tensor count, u64 kv count;
  kv       string key (u64 length + UTF-8), u32 value type, value (arrays:
           u32 element type, u64 count, elements; no nested arrays read);
  tensors  name, u32 n_dims, u64 ne[n_dims] (innermost first), u32 ggml
           type, u64 offset from the data section;
  data     at the header's end rounded up to general.alignment (32).

Every tensor is dequantized with tools/ggml_blocks.py (bit-identical to
ggml's dequantize_row_*), so the checkpoint holds exactly the values a
GGUF-reading engine must compute with.  Then llama.cpp's mapping
(convert_hf_to_gguf.py at 81ff7abe5) is undone per architecture:

  olmoe     names only (no permutation; OLMoE ropes in the NeoX layout).
  qwen3moe  names only; ffn_gate / ffn_up / ffn_down layers are dense
            (mlp_only_layers), the others MoE.
  llama     (Mixtral) attn_q / attn_k rows un-permuted (the inverse of
            LlamaModel.permute), experts back to block_sparse_moe.experts.N
            .w1 / .w3 / .w2.

Stacked experts ffn_{gate,up,down}_exps [ne: cols, rows, E] become E
per-expert matrices.  config.json is rebuilt from the metadata alone
(model_type, sizes, rope theta, eps, expert counts, special ids); no source
config is read.  Output: HF_DIR/config.json and HF_DIR/model.safetensors,
all F32.  Errors (bad magic, truncation, an unknown type or architecture, a
missing tensor) exit 1 with a message naming the file.
"""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ggml_blocks as gb  # noqa: E402
import safetensors_np as st  # noqa: E402

TYPE_NAMES = {v: k for k, v in gb.GGML_TYPE.items()}
# gguf value types -> struct format (scalars)
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


class GGUFError(Exception):
    pass


class Reader:
    def __init__(self, path):
        self.path = path
        try:
            with open(path, "rb") as f:
                self.buf = f.read()
        except OSError as e:
            raise GGUFError("%s: %s" % (path, e))
        self.pos = 0

    def take(self, n, what):
        if self.pos + n > len(self.buf):
            raise GGUFError("%s: truncated in %s (offset %d, file %d bytes)"
                            % (self.path, what, self.pos, len(self.buf)))
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what):
        n = self.unpack("<Q", what)
        try:
            return self.take(n, what).decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError("%s: %s is not UTF-8" % (self.path, what))

    def value(self, vtype, what):
        if vtype == 6:      # f32: the shortest decimal that reads back as the same float32
            return float(repr(np.float32(self.unpack("<f", what))))
        if vtype in SCALARS:
            return self.unpack(SCALARS[vtype], what)
        if vtype == STRING:
            return self.string(what)
        if vtype == ARRAY:
            et = self.unpack("<I", what)
            n = self.unpack("<Q", what)
            if et == ARRAY:
                raise GGUFError("%s: %s: nested arrays are not read" % (self.path, what))
            if et in SCALARS and et != 7:
                size = struct.calcsize(SCALARS[et])
                raw = self.take(n * size, what)
                return np.frombuffer(raw, dtype=np.dtype(SCALARS[et])).tolist()
            return [self.value(et, what) for _ in range(n)]
        raise GGUFError("%s: %s has unknown value type %d" % (self.path, what, vtype))


def read_one(path):
    """(kv dict, {name: (type name, ne, raw bytes)}) of one GGUF file."""
    r = Reader(path)
    if r.take(4, "magic") != b"GGUF":
        raise GGUFError("%s: not a GGUF file (bad magic)" % path)
    version = r.unpack("<I", "version")
    if version not in (2, 3):
        raise GGUFError("%s: GGUF version %d (only 2 and 3)" % (path, version))
    n_tensors = r.unpack("<Q", "tensor count")
    n_kv = r.unpack("<Q", "kv count")
    kv = {}
    for i in range(n_kv):
        key = r.string("key %d" % i)
        vtype = r.unpack("<I", "type of %s" % key)
        if key in kv:
            raise GGUFError("%s: duplicate key %s" % (path, key))
        kv[key] = r.value(vtype, key)
    infos = []
    for i in range(n_tensors):
        name = r.string("tensor %d name" % i)
        nd = r.unpack("<I", name)
        if not 1 <= nd <= 4:
            raise GGUFError("%s: tensor %s has %d dimensions" % (path, name, nd))
        ne = [r.unpack("<Q", name) for _ in range(nd)]
        t = r.unpack("<I", name)
        off = r.unpack("<Q", name)
        if t not in TYPE_NAMES:
            raise GGUFError("%s: tensor %s has ggml type %d, not one of %s"
                            % (path, name, t, sorted(TYPE_NAMES)))
        infos.append((name, TYPE_NAMES[t], ne, off))
    align = kv.get("general.alignment", 32)
    data = -(-r.pos // align) * align
    tensors = {}
    for name, t, ne, off in infos:
        blk, size = gb.BLOCK[t]
        if ne[0] % blk:
            raise GGUFError("%s: tensor %s: ne0 %d is not whole %s blocks" % (path, name, ne[0], t))
        nbytes = ne[0] // blk * size * int(np.prod(ne[1:], dtype=np.int64))
        begin = data + off
        if begin + nbytes > len(r.buf):
            raise GGUFError("%s: tensor %s (%d bytes at %d) runs past the end (%d bytes)"
                            % (path, name, nbytes, begin, len(r.buf)))
        if name in tensors:
            raise GGUFError("%s: duplicate tensor %s" % (path, name))
        tensors[name] = (t, ne, r.buf[begin:begin + nbytes])
    return kv, tensors


def read_gguf(path):
    m = re.match(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$", path)
    if not m:
        return read_one(path)
    n = int(m.group(3))
    kv, tensors = {}, {}
    for i in range(n):
        p = "%s-%05d-of-%05d.gguf" % (m.group(1), i + 1, n)
        k, t = read_one(p)
        if k.get("split.no") != i or k.get("split.count") != n:
            raise GGUFError("%s: split.no %r / split.count %r, expected %d / %d"
                            % (p, k.get("split.no"), k.get("split.count"), i, n))
        if i == 0:
            kv = k
        for name in t:
            if name in tensors:
                raise GGUFError("%s: tensor %s is also in an earlier split" % (p, name))
        tensors.update(t)
    if len(tensors) != kv.get("split.tensors.count"):
        raise GGUFError("%s: %d tensors in %d files, split.tensors.count says %r"
                        % (path, len(tensors), n, kv.get("split.tensors.count")))
    return kv, tensors


def dequant(entry):
    t, ne, raw = entry
    rows = int(np.prod(ne[1:], dtype=np.int64))
    x = gb.dequantize(t, np.frombuffer(raw, dtype=np.uint8), rows, ne[0])
    return x.reshape(tuple(reversed(ne)))


# ---------------------------------------------------------------- unmapping


class Model:
    def __init__(self, path, kv, tensors):
        self.path, self.kv, self.tensors = path, kv, tensors
        self.arch = kv.get("general.architecture")
        self.used = set()
        self.out = {}

    def key(self, k, default=KeyError):
        full = self.arch + "." + k
        if full in self.kv:
            return self.kv[full]
        if default is KeyError:
            raise GGUFError("%s: missing metadata key %s" % (self.path, full))
        return default

    def has(self, name):
        return name in self.tensors

    def get(self, name):
        if name not in self.tensors:
            raise GGUFError("%s: missing tensor %s" % (self.path, name))
        self.used.add(name)
        return dequant(self.tensors[name])

    def put(self, name, x):
        self.out[name] = np.ascontiguousarray(x, dtype=np.float32)

    def experts(self, gname, fmt):
        x = self.get(gname)
        for e in range(x.shape[0]):
            self.put(fmt % e, x[e])


def unpermute_rope(w, n_head, n_head_kv):
    """The inverse of LlamaModel.permute."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def special_ids(m, cfg):
    for typ, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("pad", "padding_token_id")):
        v = m.kv.get("tokenizer.ggml." + key)
        if v is not None:
            cfg[typ + "_token_id"] = v


def base_config(m, nlayer_key="block_count"):
    H = m.key("embedding_length")
    emb = m.tensors["token_embd.weight"][1]
    cfg = {"hidden_size": H, "num_hidden_layers": m.key(nlayer_key),
           "num_attention_heads": m.key("attention.head_count"),
           "num_key_value_heads": m.key("attention.head_count_kv", m.key("attention.head_count")),
           "rms_norm_eps": m.key("attention.layer_norm_rms_epsilon"),
           "rope_theta": m.key("rope.freq_base", 10000.0),
           "max_position_embeddings": m.key("context_length", 4096),
           "vocab_size": emb[1], "hidden_act": "silu", "attention_dropout": 0.0,
           "initializer_range": 0.02, "use_cache": True, "rope_scaling": None,
           "tie_word_embeddings": "output.weight" not in m.tensors,
           "torch_dtype": "float32"}
    special_ids(m, cfg)
    return cfg


def attn_plain(m, b, p, q_norm=True):
    m.put(p + "input_layernorm.weight", m.get(b + "attn_norm.weight"))
    for gn, hn in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"),
                   ("attn_output", "o_proj")):
        m.put(p + "self_attn.%s.weight" % hn, m.get(b + gn + ".weight"))
    if q_norm:
        m.put(p + "self_attn.q_norm.weight", m.get(b + "attn_q_norm.weight"))
        m.put(p + "self_attn.k_norm.weight", m.get(b + "attn_k_norm.weight"))
    m.put(p + "post_attention_layernorm.weight", m.get(b + "ffn_norm.weight"))


def experts_std(m, b, p):
    m.put(p + "mlp.gate.weight", m.get(b + "ffn_gate_inp.weight"))
    for part in ("gate", "up", "down"):
        m.experts(b + "ffn_%s_exps.weight" % part, p + "mlp.experts.%d." + part + "_proj.weight")


def head(m):
    m.put("model.embed_tokens.weight", m.get("token_embd.weight"))
    m.put("model.norm.weight", m.get("output_norm.weight"))
    if m.has("output.weight"):
        m.put("lm_head.weight", m.get("output.weight"))


def to_olmoe(m):
    cfg = base_config(m)
    L = cfg["num_hidden_layers"]
    head(m)
    for i in range(L):
        b, p = "blk.%d." % i, "model.layers.%d." % i
        attn_plain(m, b, p)
        experts_std(m, b, p)
    E = m.key("expert_count")
    cfg.update(model_type="olmoe", architectures=["OlmoeForCausalLM"],
               intermediate_size=m.key("feed_forward_length"), num_experts=E,
               num_experts_per_tok=m.key("expert_used_count"), norm_topk_prob=False,
               clip_qkv=None, attention_bias=False, router_aux_loss_coef=0.01,
               output_router_logits=False)
    if m.kv.get("tokenizer.ggml.add_bos_token") is False:
        cfg["bos_token_id"] = None     # gguf_write's synthetic vocab: bos = eos, never added
    return cfg


def to_qwen3moe(m):
    cfg = base_config(m)
    L = cfg["num_hidden_layers"]
    head(m)
    dense = []
    for i in range(L):
        b, p = "blk.%d." % i, "model.layers.%d." % i
        attn_plain(m, b, p)
        if m.has(b + "ffn_gate_inp.weight"):
            experts_std(m, b, p)
        else:
            dense.append(i)
            for gn, hn in (("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")):
                m.put(p + "mlp.%s.weight" % hn, m.get(b + gn + ".weight"))
    hd = m.key("attention.key_length", None)
    if hd is None:
        hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    ff = m.key("feed_forward_length", None)
    if ff is None and dense:
        ff = m.tensors["blk.%d.ffn_gate.weight" % dense[0]][1][1]
    cfg.update(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"],
               head_dim=hd, intermediate_size=ff,
               moe_intermediate_size=m.key("expert_feed_forward_length"),
               num_experts=m.key("expert_count"), num_experts_per_tok=m.key("expert_used_count"),
               norm_topk_prob=True, mlp_only_layers=dense, decoder_sparse_step=1,
               attention_bias=False, sliding_window=None, use_sliding_window=False,
               max_window_layers=L, router_aux_loss_coef=0.001, output_router_logits=False)
    return cfg


def to_llama(m):
    cfg = base_config(m)
    if not m.key("expert_count", 0):
        raise GGUFError("%s: a llama GGUF without experts (only Mixtral is taken)" % m.path)
    L = cfg["num_hidden_layers"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head(m)
    for i in range(L):
        b, p = "blk.%d." % i, "model.layers.%d." % i
        m.put(p + "input_layernorm.weight", m.get(b + "attn_norm.weight"))
        m.put(p + "self_attn.q_proj.weight", unpermute_rope(m.get(b + "attn_q.weight"), nh, nh))
        m.put(p + "self_attn.k_proj.weight", unpermute_rope(m.get(b + "attn_k.weight"), nh, nkv))
        m.put(p + "self_attn.v_proj.weight", m.get(b + "attn_v.weight"))
        m.put(p + "self_attn.o_proj.weight", m.get(b + "attn_output.weight"))
        m.put(p + "post_attention_layernorm.weight", m.get(b + "ffn_norm.weight"))
        q = p + "block_sparse_moe."
        m.put(q + "gate.weight", m.get(b + "ffn_gate_inp.weight"))
        for gn, w in (("gate", "w1"), ("up", "w3"), ("down", "w2")):
            m.experts(b + "ffn_%s_exps.weight" % gn, q + "experts.%d." + w + ".weight")
    hd = m.key("rope.dimension_count", cfg["hidden_size"] // nh)
    cfg.update(model_type="mixtral", architectures=["MixtralForCausalLM"],
               intermediate_size=m.key("feed_forward_length"),
               num_local_experts=m.key("expert_count"),
               num_experts_per_tok=m.key("expert_used_count"), head_dim=hd,
               sliding_window=None, router_aux_loss_coef=0.02, router_jitter_noise=0.0,
               output_router_logits=False)
    return cfg


def rope_yarn(m):
    if m.key("rope.scaling.type", None) != "yarn":
        return None
    rs = {"rope_type": "yarn", "factor": m.key("rope.scaling.factor"),
          "original_max_position_embeddings": m.key("rope.scaling.original_context_length")}
    for k, gk in (("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow")):
        if m.key("rope.scaling." + gk, None) is not None:
            rs[k] = m.key("rope.scaling." + gk)
    return rs


def moe_common(m, cfg):
    cfg.update(n_routed_experts=m.key("expert_count"),
               num_experts_per_tok=m.key("expert_used_count"),
               moe_intermediate_size=m.key("expert_feed_forward_length"),
               n_shared_experts=m.key("expert_shared_count", 0) or None,
               first_k_dense_replace=m.key("leading_dense_block_count", 0),
               routed_scaling_factor=m.key("expert_weights_scale", 1.0),
               norm_topk_prob=bool(m.key("expert_weights_norm", False)),
               n_group=m.key("expert_group_count", 1), topk_group=m.key("expert_group_used_count", 1),
               intermediate_size=m.key("feed_forward_length"))


def moe_layer(m, b, p, shared):
    m.put(p + "mlp.gate.weight", m.get(b + "ffn_gate_inp.weight"))
    if m.has(b + "exp_probs_b.bias"):
        m.put(p + "mlp.gate.e_score_correction_bias", m.get(b + "exp_probs_b.bias"))
    for part in ("gate", "up", "down"):
        m.experts(b + "ffn_%s_exps.weight" % part, p + "mlp.experts.%d." + part + "_proj.weight")
    if shared:
        for part in ("gate", "up", "down"):
            m.put(p + "mlp.shared_experts.%s_proj.weight" % part, m.get(b + "ffn_%s_shexp.weight" % part))


def dense_layer(m, b, p):
    for part in ("gate", "up", "down"):
        m.put(p + "mlp.%s_proj.weight" % part, m.get(b + "ffn_%s.weight" % part))


def to_deepseek2(m):
    """DeepSeek-V3: attn_k_b [nh, rank, nope] transposed back and stacked
    with attn_v_b [nh, v, rank] per head into kv_b_proj; no MTP layers
    (llama.cpp's converter drops them).  GGUF keeps only mscale_all_dim
    (as yarn_log_multiplier / 0.1); mscale is taken equal to it."""
    cfg = base_config(m)
    nh = cfg["num_attention_heads"]
    cfg["num_key_value_heads"] = nh       # GGUF says 1 (MLA as MQA); transformers wants heads
    L = cfg["num_hidden_layers"]
    rope = m.key("rope.dimension_count")
    nope = m.key("attention.key_length_mla") - rope
    vd = m.key("attention.value_length_mla")
    rank = m.key("attention.kv_lora_rank")
    moe_common(m, cfg)
    head(m)
    for i in range(L):
        b, p = "blk.%d." % i, "model.layers.%d." % i
        a = p + "self_attn."
        m.put(p + "input_layernorm.weight", m.get(b + "attn_norm.weight"))
        if m.has(b + "attn_q_a.weight"):
            m.put(a + "q_a_proj.weight", m.get(b + "attn_q_a.weight"))
            m.put(a + "q_a_layernorm.weight", m.get(b + "attn_q_a_norm.weight"))
            m.put(a + "q_b_proj.weight", m.get(b + "attn_q_b.weight"))
        else:
            m.put(a + "q_proj.weight", m.get(b + "attn_q.weight"))
        m.put(a + "kv_a_proj_with_mqa.weight", m.get(b + "attn_kv_a_mqa.weight"))
        m.put(a + "kv_a_layernorm.weight", m.get(b + "attn_kv_a_norm.weight"))
        kb = m.get(b + "attn_k_b.weight").transpose(0, 2, 1)       # [nh, nope, rank]
        vb = m.get(b + "attn_v_b.weight")                          # [nh, v, rank]
        if kb.shape != (nh, nope, rank) or vb.shape != (nh, vd, rank):
            raise GGUFError("%s: %s attn_k_b / attn_v_b shapes %s / %s do not fit heads %d, "
                            "nope %d, v %d, rank %d" % (m.path, b, kb.shape, vb.shape, nh, nope, vd, rank))
        m.put(a + "kv_b_proj.weight", np.concatenate([kb, vb], axis=1).reshape(nh * (nope + vd), rank))
        m.put(a + "o_proj.weight", m.get(b + "attn_output.weight"))
        m.put(p + "post_attention_layernorm.weight", m.get(b + "ffn_norm.weight"))
        if m.has(b + "ffn_gate_inp.weight"):
            moe_layer(m, b, p, cfg["n_shared_experts"])
        else:
            dense_layer(m, b, p)
    rs = rope_yarn(m)
    if rs is not None and m.key("rope.scaling.yarn_log_multiplier", None) is not None:
        ms = float(repr(np.float32(m.key("rope.scaling.yarn_log_multiplier") / 0.1)))
        rs.update(mscale=ms, mscale_all_dim=ms)
    if rs is not None:
        rs["type"] = rs.pop("rope_type")
    gating = m.key("expert_gating_func", 1)
    cfg.update(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"],
               q_lora_rank=m.key("attention.q_lora_rank", None), kv_lora_rank=rank,
               qk_rope_head_dim=rope, qk_nope_head_dim=nope, v_head_dim=vd,
               scoring_func="sigmoid" if gating == 2 else "softmax",
               topk_method="noaux_tc" if gating == 2 else "greedy",
               rope_scaling=rs, num_nextn_predict_layers=0, attention_bias=False,
               moe_layer_freq=1, ep_size=1, pretraining_tp=1)
    return cfg


def to_glm4moe(m):
    """GLM-4.5: the nextn (MTP) blocks after num_hidden_layers mapped back
    to model.layers.N.{eh_proj, embed_tokens, enorm, hnorm, shared_head.*}."""
    cfg = base_config(m)
    nextn = m.key("nextn_predict_layers", 0)
    L = cfg["num_hidden_layers"] - nextn
    cfg["num_hidden_layers"] = L
    moe_common(m, cfg)
    head(m)
    for i in range(L + nextn):
        b, p = "blk.%d." % i, "model.layers.%d." % i
        a = p + "self_attn."
        m.put(p + "input_layernorm.weight", m.get(b + "attn_norm.weight"))
        for gn, hn in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj")):
            m.put(a + hn + ".weight", m.get(b + gn + ".weight"))
            if m.has(b + gn + ".bias"):
                m.put(a + hn + ".bias", m.get(b + gn + ".bias"))
        m.put(a + "o_proj.weight", m.get(b + "attn_output.weight"))
        if m.has(b + "attn_q_norm.weight"):
            m.put(a + "q_norm.weight", m.get(b + "attn_q_norm.weight"))
            m.put(a + "k_norm.weight", m.get(b + "attn_k_norm.weight"))
        m.put(p + "post_attention_layernorm.weight", m.get(b + "post_attention_norm.weight"))
        if m.has(b + "ffn_gate_inp.weight"):
            moe_layer(m, b, p, cfg["n_shared_experts"])
        else:
            dense_layer(m, b, p)
        if i >= L:
            for hn, gn in (("eh_proj", "eh_proj"), ("embed_tokens", "embed_tokens"),
                           ("enorm", "enorm"), ("hnorm", "hnorm"),
                           ("shared_head.head", "shared_head_head"),
                           ("shared_head.norm", "shared_head_norm")):
                m.put(p + hn + ".weight", m.get(b + "nextn." + gn + ".weight"))
    hd = m.key("attention.key_length")
    cfg.update(model_type="glm4_moe", architectures=["Glm4MoeForCausalLM"], head_dim=hd,
               partial_rotary_factor=m.key("rope.dimension_count") / hd,
               attention_bias=m.has("blk.0.attn_q.bias"), use_qk_norm=m.has("blk.0.attn_q_norm.weight"),
               num_nextn_predict_layers=nextn, rope_scaling=None)
    return cfg


def to_gpt_oss(m):
    """gpt-oss: ffn_gate_exps / ffn_up_exps (and biases) interleaved back
    into transformers' dequantized layout, gate_up_proj [E, H, 2I] (column
    2k gate, 2k+1 up) and down_proj [E, I, H]; sliding attention on even
    layers, as llama.cpp's gpt-oss graph has it; YaRN without truncation
    (llama.cpp's rope does not round the correction range); swiglu_limit
    7.0 as llama.cpp hard-codes."""
    cfg = base_config(m)
    L = cfg["num_hidden_layers"]
    head(m)
    for i in range(L):
        b, p = "blk.%d." % i, "model.layers.%d." % i
        a = p + "self_attn."
        m.put(p + "input_layernorm.weight", m.get(b + "attn_norm.weight"))
        for gn, hn in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"),
                       ("attn_output", "o_proj")):
            m.put(a + hn + ".weight", m.get(b + gn + ".weight"))
            m.put(a + hn + ".bias", m.get(b + gn + ".bias"))
        m.put(a + "sinks", m.get(b + "attn_sinks.weight"))
        m.put(p + "post_attention_layernorm.weight", m.get(b + "post_attention_norm.weight"))
        x = p + "mlp."
        m.put(x + "router.weight", m.get(b + "ffn_gate_inp.weight"))
        m.put(x + "router.bias", m.get(b + "ffn_gate_inp.bias"))
        g, u = m.get(b + "ffn_gate_exps.weight"), m.get(b + "ffn_up_exps.weight")   # [E, I, H]
        gu = np.empty((g.shape[0], 2 * g.shape[1], g.shape[2]), np.float32)
        gu[:, 0::2], gu[:, 1::2] = g, u
        m.put(x + "experts.gate_up_proj", gu.transpose(0, 2, 1))
        gb_, ub = m.get(b + "ffn_gate_exps.bias"), m.get(b + "ffn_up_exps.bias")
        gub = np.empty((gb_.shape[0], 2 * gb_.shape[1]), np.float32)
        gub[:, 0::2], gub[:, 1::2] = gb_, ub
        m.put(x + "experts.gate_up_proj_bias", gub)
        m.put(x + "experts.down_proj", m.get(b + "ffn_down_exps.weight").transpose(0, 2, 1))
        m.put(x + "experts.down_proj_bias", m.get(b + "ffn_down_exps.bias"))
    rs = rope_yarn(m)
    if rs is not None:
        rs["truncate"] = False
    E = m.key("expert_count")
    cfg.update(model_type="gpt_oss", architectures=["GptOssForCausalLM"],
               head_dim=m.key("attention.key_length"), attention_bias=True,
               intermediate_size=m.key("expert_feed_forward_length"), num_local_experts=E,
               num_experts_per_tok=m.key("expert_used_count"),
               experts_per_token=m.key("expert_used_count"),
               sliding_window=m.key("attention.sliding_window"),
               layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)],
               rope_scaling=rs, swiglu_limit=7.0, router_aux_loss_coef=0.9,
               output_router_logits=False,
               initial_context_length=(rs or {}).get("original_max_position_embeddings", 4096))
    return cfg

ARCHS = {"olmoe": to_olmoe, "qwen3moe": to_qwen3moe, "llama": to_llama,
         "deepseek2": to_deepseek2, "glm4moe": to_glm4moe, "gpt-oss": to_gpt_oss}


def convert(path, out, quiet=False):
    kv, tensors = read_gguf(path)
    arch = kv.get("general.architecture")
    if arch not in ARCHS:
        raise GGUFError("%s: general.architecture %r; supported: %s"
                        % (path, arch, ", ".join(sorted(ARCHS))))
    m = Model(path, kv, tensors)
    cfg = ARCHS[arch](m)
    left = sorted(set(tensors) - m.used)
    if left:
        raise GGUFError("%s: tensors not mapped back: %s" % (path, ", ".join(left[:8])))
    os.makedirs(out, exist_ok=True)
    st.write_file(os.path.join(out, "model.safetensors"),
                  {n: ("F32", x) for n, x in m.out.items()})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    if not quiet:
        sys.stderr.write("gguf_to_hf: %s -> %s: %s, %d tensors\n" % (path, out, arch, len(m.out)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("--out", required=True)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    try:
        convert(args.gguf, args.out, args.quiet)
    except GGUFError as e:
        sys.stderr.write("gguf_to_hf: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
