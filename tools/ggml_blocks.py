#!/usr/bin/env python3
"""Reference dequantization of llama.cpp's GGML block formats, in numpy.

Written from the published format (ggml-common.h block structs, the
dequantize_row_* reference loops in ggml-quants.c), not copied: the C kernels
in colibri are tested against this module.

Types: f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, mxfp4.

  Q8_0  34 B / 32   {f16 d; i8 qs[32]}                     x = qs*d
  Q4_0  18 B / 32   {f16 d; u8 qs[16]}                     x[j] = ((qs[j]&15)-8)*d,
                                                           x[j+16] = ((qs[j]>>4)-8)*d
  Q4_K 144 B / 256  {f16 d, dmin; u8 scales[12]; u8 qs[128]}
  Q5_K 176 B / 256  {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
  Q6_K 210 B / 256  {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
  MXFP4 17 B / 32   {u8 e; u8 qs[16]}  x = kvalues[nibble] * 2^(e-128)

Every step is done in float32 in the same order as ggml's scalar reference
(e.g. Q4_K: d1 = d*sc, m1 = dmin*m, y = d1*q - m1; Q6_K: y = (d*sc)*q), so the
results are bit-identical to ggml's dequantize_row_*.

How it was checked: `python3 tools/ggml_blocks.py --self-check` compares, for
every type on random blocks (random bytes, finite random scales), this module
against ggml's own to-float functions loaded via ctypes from llama.cpp's
libggml-base.so (dequantize_row_q8_0, ..._q4_0, ..._q4_K, ..._q5_K, ..._q6_K,
..._mxfp4, ggml_fp16_to_fp32_row, ggml_bf16_to_fp32_row), bit for bit.  Pass
the library with --lib PATH (default: $LLAMA_CPP_DIR/build/bin/libggml-base.so,
$LLAMA_CPP_DIR defaulting to /work/llama.cpp-81ff7abe5 as in bench/llama_cpp.sh); without it, the check runs against a slow scalar
transliteration of the C loops kept in this file (_scalar_dequantize).

CLI:
  python3 tools/ggml_blocks.py --out DIR
writes DIR/<name>.bin (raw blocks of a 4 x 512 matrix, rows consecutive) and
DIR/<name>.f32 (its dequantization, float32 LE [4, 512]) for f16, bf16, q8_0,
q4_0, q4_k, q5_k, q6_k, mxfp4, from a fixed seed.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_np import bf16_to_f32  # noqa: E402

F32 = np.float32

# type name -> (elements per block, bytes per block)
BLOCK = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q4_0": (32, 18),
    "q4_k": (256, 144),
    "q5_k": (256, 176),
    "q6_k": (256, 210),
    "mxfp4": (32, 17),
}

# ggml_type enum values (ggml.h)
GGML_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "q4_k": 12,
             "q5_k": 13, "q6_k": 14, "bf16": 30, "mxfp4": 39}

# E2M1 values doubled (the ggml convention; the scale is halved to match).
KVALUES_MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12],
                         dtype=np.int8)

FIXTURE_TYPES = ["f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "mxfp4"]


def _nbytes(type_name, rows, cols):
    qk, bs = BLOCK[type_name]
    if cols % qk:
        raise ValueError(f"{type_name}: cols {cols} not a multiple of {qk}")
    return rows * (cols // qk) * bs


def _blocks(type_name, raw, rows, cols):
    """raw -> uint8 [nblocks, block_bytes]."""
    qk, bs = BLOCK[type_name]
    buf = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) \
        else np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    n = _nbytes(type_name, rows, cols)
    if buf.size != n:
        raise ValueError(f"{type_name}: {buf.size} bytes, want {n} for {rows}x{cols}")
    return buf.reshape(-1, bs)


def _f16(b, off):
    """The little-endian fp16 at byte off of each block, as float32 [nb, 1]."""
    return np.ascontiguousarray(b[:, off:off + 2]).view("<f2").astype(F32)


def _scale_min_k4(scales):
    """get_scale_min_k4 for j = 0..7: (sc, m) uint8 [nb, 8] each."""
    q = scales.astype(np.uint8)
    sc = np.empty((q.shape[0], 8), np.uint8)
    m = np.empty((q.shape[0], 8), np.uint8)
    sc[:, :4] = q[:, 0:4] & 63
    m[:, :4] = q[:, 4:8] & 63
    sc[:, 4:] = (q[:, 8:12] & 0xF) | ((q[:, 0:4] >> 6) << 4)
    m[:, 4:] = (q[:, 8:12] >> 4) | ((q[:, 4:8] >> 6) << 4)
    return sc, m


def _kquant_4_5(d, dmin, scales, qs, qh):
    """Shared Q4_K / Q5_K body.  qs [nb, 128]; qh [nb, 32] or None."""
    nb = qs.shape[0]
    sc, m = _scale_min_k4(scales)
    d1 = d * sc.astype(F32)          # [nb, 8]  f32 * f32
    m1 = dmin * m.astype(F32)
    q4 = qs.reshape(nb, 4, 32)       # chunk c of 64 values uses qs[32c:32c+32]
    q = np.empty((nb, 4, 2, 32), np.uint8)
    q[:, :, 0] = q4 & 0xF
    q[:, :, 1] = q4 >> 4
    if qh is not None:
        bit = np.arange(8, dtype=np.uint8).reshape(4, 2, 1)   # bit 2c (low), 2c+1 (high)
        q += ((qh[:, None, None, :] >> bit) & 1) << 4
    q = q.reshape(nb, 8, 32).astype(F32)
    y = d1[:, :, None] * q
    y = y - m1[:, :, None]
    return y.reshape(nb, 256)


def dequantize(type_name, raw, rows, cols):
    """Dequantize ggml blocks of a rows x cols matrix (rows consecutive) to float32."""
    t = type_name.lower()
    if t not in BLOCK:
        raise ValueError(f"unknown type {type_name}")
    b = _blocks(t, raw, rows, cols)
    if t == "f32":
        y = b.reshape(-1).view("<f4").astype(F32)
    elif t == "f16":
        y = b.reshape(-1).view("<f2").astype(F32)
    elif t == "bf16":
        y = bf16_to_f32(b.reshape(-1).view("<u2"))
    elif t == "q8_0":
        d = _f16(b, 0)
        y = b[:, 2:].view(np.int8).astype(F32) * d
    elif t == "q4_0":
        d = _f16(b, 0)
        qs = b[:, 2:18]
        q = np.concatenate([(qs & 0xF).astype(np.int32) - 8,
                            (qs >> 4).astype(np.int32) - 8], axis=1)
        y = q.astype(F32) * d
    elif t == "mxfp4":
        e = b[:, 0].astype(np.uint32)
        # ggml_e8m0_to_fp32_half: 2^(e-128), denormal for e < 2
        bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << 23).astype(np.uint32)
        d = bits.view(F32)[:, None]
        qs = b[:, 1:17]
        q = np.concatenate([KVALUES_MXFP4[qs & 0xF], KVALUES_MXFP4[qs >> 4]], axis=1)
        y = q.astype(F32) * d
    elif t == "q4_k":
        y = _kquant_4_5(_f16(b, 0), _f16(b, 2), b[:, 4:16], b[:, 16:144], None)
    elif t == "q5_k":
        y = _kquant_4_5(_f16(b, 0), _f16(b, 2), b[:, 4:16], b[:, 48:176], b[:, 16:48])
    elif t == "q6_k":
        nb = b.shape[0]
        ql = b[:, 0:128].reshape(nb, 2, 2, 32)     # half n, ql[l] / ql[l+32]
        qh = b[:, 128:192].reshape(nb, 2, 1, 32)   # half n, qh[l]
        sc = b[:, 192:208].view(np.int8).astype(F32).reshape(nb, 2, 8)
        d = _f16(b, 208).reshape(nb, 1, 1)
        # within a half of 128: y[l + 32k], k = 0..3: ql nibble (k >> 1) of
        # ql[l + 32*(k & 1)], qh bits 2k..2k+1, scale sc[l/16 + 2k]
        q = np.empty((nb, 2, 4, 32), np.int32)
        for k in range(4):
            lo = ql[:, :, k & 1]
            lo = (lo & 0xF) if k < 2 else (lo >> 4)
            hi = (qh[:, :, 0] >> (2 * k)) & 3
            q[:, :, k] = (lo | (hi << 4)).astype(np.int32) - 32
        s = sc.reshape(nb, 2, 4, 2)                # [.., k, l/16]
        ds = d[:, :, :, None] * s                  # d * sc  (f32)
        ds = np.repeat(ds, 16, axis=3).reshape(nb, 2, 4, 32)
        y = (ds * q.astype(F32)).reshape(nb, 256)
    return np.ascontiguousarray(y, dtype=F32).reshape(rows, cols)


def _rand_f16(rng, n, signed):
    v = rng.uniform(0.001, 0.1, n)
    if signed:
        v *= rng.choice([-1.0, 1.0], n)
    return v.astype("<f2").view(np.uint8).reshape(n, 2)


def random_blocks(type_name, rows, cols, rng):
    """Random blocks: random bytes, finite random scales (d/dmin in ~[0.001, 0.1],
    MXFP4 e in [118, 130]); f32/f16/bf16 are finite random values."""
    t = type_name.lower()
    qk, bs = BLOCK[t]
    n = _nbytes(t, rows, cols)
    count = rows * cols
    if t in ("f32", "f16", "bf16"):
        v = rng.standard_normal(count).astype(F32)
        if t == "f32":
            return v.astype("<f4").tobytes()
        if t == "f16":
            return v.astype("<f2").tobytes()
        return (v.view(np.uint32) >> 16).astype("<u2").tobytes()
    b = rng.integers(0, 256, n, dtype=np.uint8).reshape(-1, bs)
    nb = b.shape[0]
    if t in ("q8_0", "q4_0"):
        b[:, 0:2] = _rand_f16(rng, nb, True)
    elif t in ("q4_k", "q5_k"):
        b[:, 0:2] = _rand_f16(rng, nb, False)
        b[:, 2:4] = _rand_f16(rng, nb, False)
    elif t == "q6_k":
        b[:, 208:210] = _rand_f16(rng, nb, True)
    elif t == "mxfp4":
        b[:, 0] = rng.integers(118, 131, nb, dtype=np.uint8)
    return b.tobytes()


# ---------------------------------------------------------------- self-check

def _scalar_dequantize(t, raw, rows, cols):
    """Slow scalar transliteration of ggml's reference loops (np.float32 scalars)."""
    import struct
    qk, bs = BLOCK[t]
    raw = bytes(raw)
    h = lambda o: F32(np.frombuffer(raw[o:o + 2], "<f2")[0])
    out = []
    for i in range(len(raw) // bs):
        o = i * bs
        x = raw[o:o + bs]
        if t == "f32":
            out.append(F32(struct.unpack("<f", x)[0]))
        elif t == "f16":
            out.append(h(o))
        elif t == "bf16":
            out.append(np.uint32(struct.unpack("<H", x)[0] << 16).view(F32))
        elif t == "q8_0":
            d = h(o)
            out += [F32(struct.unpack("b", x[2 + j:3 + j])[0]) * d for j in range(32)]
        elif t in ("q4_0", "mxfp4"):
            if t == "q4_0":
                d = h(o)
                f = lambda n: F32(n - 8)
                qs = x[2:18]
            else:
                e = x[0]
                d = np.uint32((0x00200000 << e) if e < 2 else ((e - 1) << 23)).view(F32)
                f = lambda n: F32(KVALUES_MXFP4[n])
                qs = x[1:17]
            y = [None] * 32
            for j in range(16):
                y[j] = f(qs[j] & 0xF) * d
                y[j + 16] = f(qs[j] >> 4) * d
            out += y
        elif t in ("q4_k", "q5_k"):
            d, mn = h(o), h(o + 2)
            sc12 = x[4:16]
            qh = x[16:48] if t == "q5_k" else None
            ql = x[48:176] if t == "q5_k" else x[16:144]

            def gsm(j):
                if j < 4:
                    return sc12[j] & 63, sc12[j + 4] & 63
                return ((sc12[j + 4] & 0xF) | ((sc12[j - 4] >> 6) << 4),
                        (sc12[j + 4] >> 4) | ((sc12[j] >> 6) << 4))
            is_, qo, u1, u2 = 0, 0, 1, 2
            for j in range(0, 256, 64):
                s, m = gsm(is_)
                d1, m1 = d * F32(s), mn * F32(m)
                s, m = gsm(is_ + 1)
                d2, m2 = d * F32(s), mn * F32(m)
                for l in range(32):
                    v = (ql[qo + l] & 0xF) + (16 if qh is not None and qh[l] & u1 else 0)
                    out.append(d1 * F32(v) - m1)
                for l in range(32):
                    v = (ql[qo + l] >> 4) + (16 if qh is not None and qh[l] & u2 else 0)
                    out.append(d2 * F32(v) - m2)
                qo += 32
                is_ += 2
                u1 <<= 2
                u2 <<= 2
        elif t == "q6_k":
            d = h(o + 208)
            y = [None] * 256
            sc = struct.unpack("16b", x[192:208])
            for n in range(2):
                ql, qh, s = x[64 * n:64 * n + 64], x[128 + 32 * n:160 + 32 * n], sc[8 * n:8 * n + 8]
                for l in range(32):
                    is_ = l // 16
                    q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32
                    q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32
                    q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32
                    q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32
                    y[128 * n + l] = d * F32(s[is_]) * F32(q1)
                    y[128 * n + l + 32] = d * F32(s[is_ + 2]) * F32(q2)
                    y[128 * n + l + 64] = d * F32(s[is_ + 4]) * F32(q3)
                    y[128 * n + l + 96] = d * F32(s[is_ + 6]) * F32(q4)
            out += y
    return np.array(out, dtype=F32).reshape(rows, cols)


def _ggml_dequantize(lib, t, raw, rows, cols):
    import ctypes
    names = {"f16": "ggml_fp16_to_fp32_row", "bf16": "ggml_bf16_to_fp32_row",
             "q8_0": "dequantize_row_q8_0", "q4_0": "dequantize_row_q4_0",
             "q4_k": "dequantize_row_q4_K", "q5_k": "dequantize_row_q5_K",
             "q6_k": "dequantize_row_q6_K", "mxfp4": "dequantize_row_mxfp4"}
    if t == "f32":
        return np.frombuffer(raw, "<f4").reshape(rows, cols)
    fn = getattr(lib, names[t])
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    src = ctypes.create_string_buffer(bytes(raw), len(raw))
    y = np.zeros(rows * cols, F32)
    fn(src, y.ctypes.data, rows * cols)
    return y.reshape(rows, cols)


def self_check(lib_path, scalar):
    rng = np.random.default_rng(12345)
    lib = None
    if not scalar and lib_path and os.path.exists(lib_path):
        import ctypes
        lib = ctypes.CDLL(lib_path)
    against = f"ggml ({lib_path})" if lib is not None else "scalar transliteration"
    ok = True
    for t in BLOCK:
        qk = BLOCK[t][0]
        rows, cols = (3, 4 * max(qk, 32)) if lib is None else (16, 8 * max(qk, 32))
        for trial in range(3 if lib is None else 20):
            raw = random_blocks(t, rows, cols, rng)
            if trial == 0 and t == "mxfp4":   # also every e, denormals included
                b = np.frombuffer(raw, np.uint8).reshape(-1, 17).copy()
                b[:, 0] = np.arange(b.shape[0]) % 256
                raw = b.tobytes()
            a = dequantize(t, raw, rows, cols)
            r = (_ggml_dequantize(lib, t, raw, rows, cols) if lib is not None
                 else _scalar_dequantize(t, raw, rows, cols))
            same = np.array_equal(a.view(np.uint32), r.view(np.uint32))
            if not same:
                bad = np.flatnonzero(a.view(np.uint32).ravel() != r.view(np.uint32).ravel())
                print(f"{t}: MISMATCH vs {against}: {bad.size} values, first at {bad[0]}: "
                      f"{a.ravel()[bad[0]]!r} != {r.ravel()[bad[0]]!r}")
                ok = False
                break
        else:
            print(f"{t}: bit-identical vs {against}")
    return ok


def write_fixtures(out, rows=4, cols=512, seed=20240601):
    os.makedirs(out, exist_ok=True)
    for t in FIXTURE_TYPES:
        rng = np.random.default_rng([seed, GGML_TYPE[t]])
        raw = random_blocks(t, rows, cols, rng)
        y = dequantize(t, raw, rows, cols)
        assert np.all(np.isfinite(y)), t
        with open(os.path.join(out, t + ".bin"), "wb") as f:
            f.write(raw)
        with open(os.path.join(out, t + ".f32"), "wb") as f:
            f.write(y.astype("<f4").tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write <type>.bin / <type>.f32 fixtures (4 x 512) here")
    ap.add_argument("--self-check", action="store_true",
                    help="compare against ggml's library (or the scalar loops without it)")
    ap.add_argument("--lib", default=os.path.join(os.environ.get("LLAMA_CPP_DIR", "/work/llama.cpp-81ff7abe5"),
                                                 "build/bin/libggml-base.so"),
                    help="libggml-base.so of a llama.cpp build (default: $LLAMA_CPP_DIR/build/bin, as bench/llama_cpp.sh)")
    ap.add_argument("--scalar", action="store_true",
                    help="self-check against the scalar transliteration even if --lib exists")
    a = ap.parse_args()
    if not a.out and not a.self_check:
        ap.error("give --out DIR and/or --self-check")
    rc = 0
    if a.self_check:
        rc = 0 if self_check(a.lib, a.scalar) else 1
    if a.out:
        write_fixtures(a.out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
