"""A tiny DeepSeek-V4 checkpoint for the converter's tests (test_convert.c).

Writes OUT/config.json and OUT/model.safetensors with random weights, in the
layout of the released checkpoints (layers.L.attn.wq_a.weight, ffn.experts.E.w1,
hc_head_fn, a whole MTP block mtp.0.* that the container keeps as layer 3, FP8 e4m3 weights with `.scale` block scales, FP4 e2m1
experts packed two per I8 byte with ue8m0 scales per 32 inputs) or in
transformers' names (model.layers.L.self_attn.q_a_proj.weight, fused experts),
and OUT/expect.json: each container tensor's name with its values as float32
lists (what the converter must store, before rounding to the container's
type), computed here independently of colibri.

  /usr/bin/python3 tests/v4_checkpoint.py OUT released|internal [fp8] [fp4] [e8m0]
  /usr/bin/python3 tests/v4_checkpoint.py check CONTAINER EXPECT.json

check compares an f32 container (convert --quant f32) with expect.json, value
for value (exactly: the dequantized FP8 / FP4 products are exact in f32), and
that every container tensor and expert is listed there; it prints the first
difference and exits 1.
"""
import json
import struct
import sys

import numpy as np

H, NH, HD, QL, E, K, I, V, HC, OG, OL, IH, ID, ROT = 64, 2, 32, 32, 4, 2, 64, 96, 2, 2, 16, 2, 16, 8
RATIOS = [0, 4, 128]
NLAYERS = 3
NHASH = 1

FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
               dtype=np.float32)


def e4m3_table():
    vals = np.zeros(256, dtype=np.float32)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            v = np.nan
        elif e == 0:
            v = m / 8.0 * 2.0 ** -6
        else:
            v = (1 + m / 8.0) * 2.0 ** (e - 7)
        vals[b] = -v if s else v
    return vals


E4M3 = e4m3_table()


def bf16_bytes(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_round(a):
    return (bf16_bytes(a).astype(np.uint32) << 16).view(np.float32)


class Writer:
    def __init__(self):
        self.entries = {}
        self.blobs = []
        self.off = 0

    def add(self, name, dtype, shape, raw):
        raw = raw.tobytes()
        self.entries[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [self.off, self.off + len(raw)]}
        self.blobs.append(raw)
        self.off += len(raw)

    def save(self, path):
        hdr = json.dumps(self.entries).encode()
        hdr += b" " * (-len(hdr) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(hdr)))
            f.write(hdr)
            for b in self.blobs:
                f.write(b)


def main():
    out, layout = sys.argv[1], sys.argv[2]
    flags = set(sys.argv[3:])
    released = layout == "released"
    rng = np.random.default_rng(7)
    w = Writer()
    expect = {}

    def bf16(name, internal, shape, scale=0.1):
        a = bf16_round(rng.standard_normal(shape).astype(np.float32) * scale)
        w.add(name if released else internal, "BF16", shape, bf16_bytes(a))
        expect[internal] = a

    def f32(name, internal, shape, scale=0.1):
        a = (rng.standard_normal(shape) * scale).astype(np.float32)
        w.add(name if released else internal, "F32", shape, a)
        expect[internal] = a

    def fp8(name, internal, shape):
        """FP8 e4m3 with 128x128 block scales named NAME.scale (released)."""
        if not (released and "fp8" in flags):
            return bf16(name, internal, shape)
        q = rng.integers(0, 256, size=shape, dtype=np.uint8)
        q[(q & 0x7F) == 0x7F] = 0x10  # no NaN
        br, bc = -(-shape[0] // 128), -(-shape[1] // 128)
        if "e8m0" in flags:
            sb = rng.integers(118, 124, size=(br, bc)).astype(np.uint8)
            sv = (2.0 ** (sb.astype(np.float64) - 127)).astype(np.float32)
            sname, sdt, sraw = name[: -len(".weight")] + ".scale", "F8_E8M0", sb
        else:
            sv = (rng.random((br, bc)) * 0.01 + 0.001).astype(np.float32)
            sname, sdt, sraw = name[: -len(".weight")] + ".scale", "F32", sv
        w.add(name, "F8_E4M3", shape, q)
        w.add(sname, sdt, (br, bc), sraw)
        full = np.repeat(np.repeat(sv, 128, 0), 128, 1)[: shape[0], : shape[1]]
        expect[internal] = (E4M3[q] * full).astype(np.float32)

    def fp4(name, internal, shape):
        if not (released and "fp4" in flags):
            return fp8(name, internal, shape)
        rows, cols = shape
        nib = rng.integers(0, 16, size=(rows, cols), dtype=np.uint8)
        packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8).view(np.int8)
        sb = rng.integers(120, 126, size=(rows, cols // 32)).astype(np.uint8)
        w.add(name, "I8", (rows, cols // 2), packed)
        w.add(name[: -len(".weight")] + ".scale", "F8_E8M0", (rows, cols // 32), sb)
        sv = (2.0 ** (sb.astype(np.float64) - 127)).astype(np.float32)
        expect[internal] = (FP4[nib] * np.repeat(sv, 32, 1)).astype(np.float32)

    def m(i, rel, internal):
        # Layer NLAYERS is the MTP block mtp.0 (released layout only).
        pre = "mtp.0." if i == NLAYERS else f"layers.{i}."
        return pre + rel, f"model.layers.{i}.{internal}"

    bf16("embed.weight", "model.embed_tokens.weight", (V, H))
    for i in range(NLAYERS + (1 if released else 0)):
        r = RATIOS[i] if i < NLAYERS else 0
        f32(*m(i, "attn_norm.weight", "input_layernorm.weight"), (H,))
        f32(*m(i, "ffn_norm.weight", "post_attention_layernorm.weight"), (H,))
        for site, rel in (("attn_hc", "hc_attn"), ("ffn_hc", "hc_ffn")):
            f32(*m(i, rel + "_fn", site + ".fn"), ((2 + HC) * HC, HC * H))
            f32(*m(i, rel + "_base", site + ".base"), ((2 + HC) * HC,))
            f32(*m(i, rel + "_scale", site + ".scale"), (3,))
        fp8(*m(i, "attn.wq_a.weight", "self_attn.q_a_proj.weight"), (QL, H))
        f32(*m(i, "attn.q_norm.weight", "self_attn.q_a_norm.weight"), (QL,))
        fp8(*m(i, "attn.wq_b.weight", "self_attn.q_b_proj.weight"), (NH * HD, QL))
        fp8(*m(i, "attn.wkv.weight", "self_attn.kv_proj.weight"), (HD, H))
        f32(*m(i, "attn.kv_norm.weight", "self_attn.kv_norm.weight"), (HD,))
        fp8(*m(i, "attn.wo_a.weight", "self_attn.o_a_proj.weight"), (OG * OL, NH * HD // OG))
        fp8(*m(i, "attn.wo_b.weight", "self_attn.o_b_proj.weight"), (H, OG * OL))
        f32(*m(i, "attn.attn_sink", "self_attn.sinks"), (NH,))
        if r:
            cs = 2 if r == 4 else 1
            bf16(*m(i, "attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"), (cs * HD, H))
            bf16(*m(i, "attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"), (cs * HD, H))
            f32(*m(i, "attn.compressor.ape", "self_attn.compressor.position_bias"), (r, cs * HD))
            f32(*m(i, "attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"), (HD,))
        if r == 4:
            p, q = "attn.indexer.", "self_attn.compressor.indexer."
            bf16(*m(i, p + "compressor.wkv.weight", q + "kv_proj.weight"), (2 * ID, H))
            bf16(*m(i, p + "compressor.wgate.weight", q + "gate_proj.weight"), (2 * ID, H))
            f32(*m(i, p + "compressor.ape", q + "position_bias"), (r, 2 * ID))
            f32(*m(i, p + "compressor.norm.weight", q + "kv_norm.weight"), (ID,))
            fp8(*m(i, p + "wq_b.weight", q + "q_b_proj.weight"), (IH * ID, QL))
            bf16(*m(i, p + "weights_proj.weight", q + "scorer.weights_proj.weight"), (IH, H))
        bf16(*m(i, "ffn.gate.weight", "mlp.gate.weight"), (E, H))
        if i < NHASH:
            t = rng.integers(0, E, size=(V, K)).astype(np.int64)
            rel, internal = m(i, "ffn.gate.tid2eid", "mlp.gate.tid2eid")
            w.add(rel if released else internal, "I64", (V, K), t)
            expect[internal] = t.astype(np.float32)
        else:
            f32(*m(i, "ffn.gate.bias", "mlp.gate.e_score_correction_bias"), (E,))
        for wn, pn in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
            shape = (H, I) if wn == "w2" else (I, H)
            fp8(*m(i, f"ffn.shared_experts.{wn}.weight", f"mlp.shared_experts.{pn}.weight"), shape)
        if released:
            for e in range(E):
                for wn, pn in (("w1", "gate"), ("w3", "up"), ("w2", "down")):
                    shape = (H, I) if wn == "w2" else (I, H)
                    fp4(*m(i, f"ffn.experts.{e}.{wn}.weight", f"mlp.experts.{e}.{pn}_proj.weight"), shape)
        else:
            gu = bf16_round(rng.standard_normal((E, 2 * I, H)).astype(np.float32) * 0.1)
            dn = bf16_round(rng.standard_normal((E, H, I)).astype(np.float32) * 0.1)
            w.add(f"model.layers.{i}.mlp.experts.gate_up_proj", "BF16", gu.shape, bf16_bytes(gu))
            w.add(f"model.layers.{i}.mlp.experts.down_proj", "BF16", dn.shape, bf16_bytes(dn))
            for e in range(E):
                expect[f"model.layers.{i}.mlp.experts.{e}.gate_proj.weight"] = gu[e, :I]
                expect[f"model.layers.{i}.mlp.experts.{e}.up_proj.weight"] = gu[e, I:]
                expect[f"model.layers.{i}.mlp.experts.{e}.down_proj.weight"] = dn[e]
    f32("hc_head_fn", "model.hc_head.hc_fn", (HC, HC * H))
    f32("hc_head_base", "model.hc_head.hc_base", (HC,))
    f32("hc_head_scale", "model.hc_head.hc_scale", (1,))
    f32("norm.weight", "model.norm.weight", (H,))
    bf16("head.weight", "lm_head.weight", (V, H))
    if released:
        # The MTP block's own tensors (its decoder block is layer NLAYERS above).
        L = NLAYERS
        fp8(f"mtp.0.e_proj.weight", f"model.layers.{L}.e_proj.weight", (H, H))
        fp8(f"mtp.0.h_proj.weight", f"model.layers.{L}.h_proj.weight", (H, H))
        f32("mtp.0.enorm.weight", f"model.layers.{L}.enorm.weight", (H,))
        f32("mtp.0.hnorm.weight", f"model.layers.{L}.hnorm.weight", (H,))
        f32("mtp.0.norm.weight", f"model.layers.{L}.shared_head.norm.weight", (H,))
        f32("mtp.0.hc_head_fn", f"model.layers.{L}.hc_head.hc_fn", (HC, HC * H))
        f32("mtp.0.hc_head_base", f"model.layers.{L}.hc_head.hc_base", (HC,))
        f32("mtp.0.hc_head_scale", f"model.layers.{L}.hc_head.hc_scale", (1,))
    w.save(f"{out}/model.safetensors")
    cfg = {
        "model_type": "deepseek_v4", "vocab_size": V, "hidden_size": H, "num_hidden_layers": NLAYERS,
        "num_attention_heads": NH, "num_key_value_heads": 1, "head_dim": HD, "q_lora_rank": QL,
        "moe_intermediate_size": I, "n_routed_experts": E, "num_experts_per_tok": K, "n_shared_experts": 1,
        "o_groups": OG, "o_lora_rank": OL, "index_n_heads": IH, "index_head_dim": ID, "index_topk": 2,
        "sliding_window": 8, "hc_mult": HC, "qk_rope_head_dim": ROT, "compress_ratios": RATIOS + [0],
        "num_hash_layers": NHASH, "num_nextn_predict_layers": 1,
        "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 64},
    }
    with open(f"{out}/config.json", "w") as f:
        json.dump(cfg, f)
    with open(f"{out}/expect.json", "w") as f:
        json.dump({k: v.reshape(-1).tolist() for k, v in expect.items()}, f)


def check(container, expect_path):
    with open(expect_path) as f:
        expect = json.load(f)
    with open(f"{container}/manifest.json") as f:
        man = json.load(f)
    res = open(f"{container}/resident.bin", "rb").read()
    seen = set()
    for t in man["resident"]["tensors"]:
        if t["type"] != "f32":
            sys.exit(f"{t['name']}: type {t['type']}, expected f32")
        got = np.frombuffer(res, dtype="<f4", count=t["bytes"] // 4, offset=t["offset"])
        want = np.array(expect.get(t["name"], []), dtype=np.float32)
        if t["name"] not in expect or got.shape != want.shape or not np.array_equal(got, want):
            sys.exit(f"{t['name']}: stored values differ from the checkpoint's")
        seen.add(t["name"])
    for l in man["experts"]["layers"]:
        data = open(f"{container}/{l['file']}", "rb").read()
        for e in range(man["experts"]["n_experts"]):
            for part in l["parts"]:
                name = f"model.layers.{l['layer']}.mlp.experts.{e}.{part['name']}_proj.weight"
                off = e * l["record_bytes"] + part["offset"]
                got = np.frombuffer(data, dtype="<f4", count=part["bytes"] // 4, offset=off)
                want = np.array(expect.get(name, []), dtype=np.float32)
                if name not in expect or not np.array_equal(got, want):
                    sys.exit(f"{name}: stored values differ from the checkpoint's")
                seen.add(name)
    missing = sorted(set(expect) - seen)
    if missing:
        sys.exit(f"not in the container: {missing[0]} (and {len(missing) - 1} more)")
    print(f"{len(seen)} tensors match")


if sys.argv[1] == "check":
    check(sys.argv[2], sys.argv[3])
else:
    main()
