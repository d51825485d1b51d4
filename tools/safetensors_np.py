"""safetensors reader/writer and number formats for colibri's offline tools.

A safetensors file is: an unsigned 64-bit little-endian header length N, N
bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
"__metadata__": {str: str}}, then the raw tensor bytes; offsets are relative
to the first byte after the header.  This module reads and writes that format
with numpy only (no torch, no safetensors package), and converts the dtypes
colibri's tests use: F32, F16, BF16 and F8_E4M3 (e4m3fn: no infinities, one
NaN pattern per sign, max 448) with DeepSeek-style 128x128 block scales, and
DeepSeek-V4's F8_E8M0 power-of-two scales (ue8m0) and FP4 e2m1 weights
packed two per I8 byte (MXFP4: one ue8m0 scale per 32 inputs).

Invariants: readers validate every offset against the file size and the
shape * itemsize and raise ValueError naming the file and tensor; writers
produce files the reference Rust implementation would accept (header padded
with spaces to a multiple of 8, tensors packed back to back, no gaps).

Run `/usr/bin/python3 tools/safetensors_np.py --self-test` to check the bf16
and e4m3 converters exhaustively against an independent brute-force encoder.
"""

import json
import math
import os
import struct
import sys
import time

import numpy as np

# dtype name -> (numpy storage dtype, itemsize).  BF16 and F8_E4M3 are stored
# as raw integers and converted explicitly.
DTYPES = {
    "F64": (np.dtype("<f8"), 8),
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
    "F8_E4M3": (np.dtype("u1"), 1),
    "F8_E8M0": (np.dtype("u1"), 1),
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "I16": (np.dtype("<i2"), 2),
    "I8": (np.dtype("i1"), 1),
    "U8": (np.dtype("u1"), 1),
    "BOOL": (np.dtype("u1"), 1),
}

HEADER_BYTES_MAX = 100 * 1024 * 1024


class Tensor:
    """One stored tensor: dtype name, shape and raw storage (a numpy view)."""

    def __init__(self, dtype, shape, raw):
        self.dtype = dtype
        self.shape = tuple(shape)
        self.raw = raw

    def __repr__(self):
        return "Tensor(%s, %s)" % (self.dtype, list(self.shape))


# ---------------------------------------------------------------- reading


def read_header(path):
    """Returns (header dict without __metadata__, metadata dict, data start)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError("%s: too short for a safetensors header" % path)
        (n,) = struct.unpack("<Q", head)
        if n > HEADER_BYTES_MAX or 8 + n > size:
            raise ValueError("%s: header length %d does not fit a %d-byte file"
                             % (path, n, size))
        text = f.read(n)
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError("%s: malformed JSON header: %s" % (path, e))
    if not isinstance(header, dict):
        raise ValueError("%s: header is not a JSON object" % path)
    meta = header.pop("__metadata__", None) or {}
    data_start = 8 + n
    data_bytes = size - data_start
    for name, info in header.items():
        try:
            dtype = info["dtype"]
            shape = [int(d) for d in info["shape"]]
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError("%s: tensor %r has a malformed header entry" % (path, name))
        if dtype not in DTYPES:
            raise ValueError("%s: tensor %r has unknown dtype %r" % (path, name, dtype))
        want = DTYPES[dtype][1] * math.prod(shape)
        if begin < 0 or end < begin or end > data_bytes or end - begin != want:
            raise ValueError("%s: tensor %r offsets [%d, %d) do not match shape %s %s "
                             "in %d data bytes" % (path, name, begin, end, shape, dtype,
                                                   data_bytes))
    return header, meta, data_start


def load_file(path):
    """Maps one .safetensors file; returns {name: Tensor} (read-only views)."""
    header, _, data_start = read_header(path)
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        np_dtype = DTYPES[info["dtype"]][0]
        raw = mm[data_start + begin:data_start + end].view(np_dtype).reshape(info["shape"])
        out[name] = Tensor(info["dtype"], info["shape"], raw)
    return out


def load_dir(model_dir):
    """Loads every tensor of a Hugging Face checkpoint directory.

    Uses model.safetensors.index.json when present (and checks that each
    tensor lies in the shard the index names), else model.safetensors.
    """
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError("%s: no weight_map" % index_path)
        out = {}
        for shard in sorted(set(weight_map.values())):
            for name, t in load_file(os.path.join(model_dir, shard)).items():
                if weight_map.get(name) != shard:
                    raise ValueError("%s: tensor %r is in %s but the index says %s"
                                     % (model_dir, name, shard, weight_map.get(name)))
                out[name] = t
        missing = sorted(set(weight_map) - set(out))
        if missing:
            raise ValueError("%s: index names tensors missing from the shards: %s"
                             % (model_dir, ", ".join(missing[:5])))
        return out
    single = os.path.join(model_dir, "model.safetensors")
    if not os.path.exists(single):
        raise ValueError("%s: neither model.safetensors nor an index" % model_dir)
    return load_file(single)


# ---------------------------------------------------------------- writing


def write_file(path, tensors, metadata=None):
    """Writes {name: (dtype name, numpy array of that dtype's storage)}.

    Tensors are laid out as the reference writer does: by decreasing
    itemsize, then by name, so every tensor is aligned to its itemsize.
    Writes to path + ".tmp" and renames, so a reader never sees half a file.
    """
    order = sorted(tensors, key=lambda n: (-DTYPES[tensors[n][0]][1], n))
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    blobs = []
    for name in order:
        dtype, arr = tensors[name]
        np_dtype = DTYPES[dtype][0]
        arr = np.ascontiguousarray(arr)
        if arr.dtype != np_dtype:
            raise ValueError("tensor %r: storage %s does not match dtype %s"
                             % (name, arr.dtype, dtype))
        blob = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)
    return offset


# ---------------------------------------------------------------- bf16


def bf16_to_f32(raw):
    """Raw uint16 bf16 bits -> float32 (exact)."""
    return (np.asarray(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """float32 -> raw uint16 bf16 bits, round to nearest even (NaN stays NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    out = rounded.astype(np.uint16)
    out[nan] = ((u[nan] >> 16) | np.uint32(0x40)).astype(np.uint16)
    return out


# ---------------------------------------------------------------- e4m3fn

E4M3_MAX = 448.0


def _e4m3_table():
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> 3) & 0xF
    man = codes & 0x7
    val = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1.0 + man / 8.0) * 2.0 ** (exp - 7.0))
    val = sign * val
    val[(exp == 0xF) & (man == 0x7)] = np.nan
    return val


E4M3_VALUES = _e4m3_table()          # float64 value of every code, NaN at 0x7F, 0xFF
_E4M3_POS = E4M3_VALUES[:0x7F]       # codes 0..126 ascending: 0 .. 448


def e4m3_to_f32(raw):
    """Raw uint8 e4m3fn codes -> float32 (exact)."""
    return E4M3_VALUES.astype(np.float32)[np.asarray(raw, dtype=np.uint8)]


def f32_to_e4m3(x):
    """float -> raw uint8 e4m3fn codes: round to nearest, ties to even code,
    magnitudes above 448 saturate to 448 (as DeepSeek's quantizer clamps),
    NaN -> 0x7F.  The sign of zero is kept."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), E4M3_MAX)
    hi = np.searchsorted(_E4M3_POS, a, side="left")      # first value >= a
    hi = np.minimum(hi, len(_E4M3_POS) - 1)
    lo = np.maximum(hi - 1, 0)
    d_hi = _E4M3_POS[hi] - a
    d_lo = a - _E4M3_POS[lo]
    take_lo = (d_lo < d_hi) | ((d_lo == d_hi) & (lo % 2 == 0) & (lo != hi))
    code = np.where(take_lo, lo, hi).astype(np.uint8)
    code |= np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    code[np.isnan(x)] = 0x7F
    return code


def fp8_block_quantize(w, block=(128, 128)):
    """Quantizes the last two dims of w (float) in blocks, DeepSeek style.

    Returns (codes uint8 same shape, scale_inv float32 of shape
    [..., ceil(rows/br), ceil(cols/bc)]) with w ~= e4m3(codes) * scale_inv,
    scale_inv = amax(|block|) / 448 so each block uses the full e4m3 range.
    """
    w = np.asarray(w, dtype=np.float32)
    rows, cols = w.shape[-2:]
    br, bc = block
    nr, nc = -(-rows // br), -(-cols // bc)
    lead = w.shape[:-2]
    codes = np.empty(w.shape, dtype=np.uint8)
    scale = np.empty(lead + (nr, nc), dtype=np.float32)
    for i in range(nr):
        for j in range(nc):
            blk = w[..., i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            amax = np.abs(blk).max(axis=(-2, -1)).astype(np.float32)
            s = np.where(amax > 0, amax / np.float32(E4M3_MAX), np.float32(1.0)).astype(np.float32)
            scale[..., i, j] = s
            codes[..., i * br:(i + 1) * br, j * bc:(j + 1) * bc] = \
                f32_to_e4m3(blk / s[..., None, None])
    return codes, scale


def fp8_block_dequantize(codes, scale_inv, block=(128, 128)):
    """Inverse of fp8_block_quantize: float32 e4m3(codes) * scale_inv per block
    (the product rounded to float32, as DeepSeek's weight_dequant does)."""
    v = e4m3_to_f32(codes)
    br, bc = block
    s = np.repeat(np.repeat(np.asarray(scale_inv, dtype=np.float32), br, axis=-2), bc, axis=-1)
    s = s[..., :v.shape[-2], :v.shape[-1]]
    if s.shape != v.shape:
        raise ValueError("scale_inv shape %s does not cover weight shape %s with blocks %s"
                         % (list(np.shape(scale_inv)), list(v.shape), list(block)))
    return (v * s).astype(np.float32)


# ---------------------------------------------------------------- ue8m0, e2m1 (DeepSeek-V4)


def e8m0_to_f32(raw):
    """Raw uint8 ue8m0 codes (float8_e8m0fnu: 2^(code - 127), 0xFF NaN) -> float32."""
    c = np.asarray(raw, dtype=np.uint8).astype(np.int32)
    out = np.ldexp(np.float32(1.0), c - 127).astype(np.float32)
    out[c == 255] = np.nan
    return out


def f32_to_e8m0(x):
    """Powers of two (2^-127 .. 2^127) -> raw uint8 ue8m0 codes; anything else raises."""
    x = np.asarray(x, dtype=np.float64)
    m, e = np.frexp(x)
    if np.any(m != 0.5) or np.any(e - 1 < -127) or np.any(e - 1 > 127):
        raise ValueError("f32_to_e8m0: not all values are powers of two in range")
    return (e - 1 + 127).astype(np.uint8)


def pow2_ceil(x):
    """Smallest power of two >= x (x > 0), as float32; 1 where x == 0."""
    x = np.asarray(x, dtype=np.float64)
    e = np.ceil(np.log2(np.where(x > 0, x, 1.0)))
    # log2 of an exact power of two is exact; guard the rounding of the others.
    e = np.where(np.exp2(e - 1) >= x, e - 1, e)
    e = np.where(np.exp2(e) < x, e + 1, e)
    return np.exp2(e).astype(np.float32)


# e2m1 code -> value: sign bit 3, then 0, 0.5, 1, 1.5, 2, 3, 4, 6.
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)
E2M1_MAX = 6.0


def f32_to_e2m1(x):
    """float -> e2m1 codes (uint8 0..15): nearest value, ties to the even code,
    magnitudes above 6 saturate; the sign of zero is kept."""
    x = np.asarray(x, dtype=np.float64)
    pos = E2M1_VALUES[:8].astype(np.float64)
    a = np.minimum(np.abs(x), E2M1_MAX)
    hi = np.minimum(np.searchsorted(pos, a, side="left"), 7)
    lo = np.maximum(hi - 1, 0)
    d_hi, d_lo = pos[hi] - a, a - pos[lo]
    take_lo = (d_lo < d_hi) | ((d_lo == d_hi) & (lo % 2 == 0) & (lo != hi))
    code = np.where(take_lo, lo, hi).astype(np.uint8)
    return code | np.where(np.signbit(x), 8, 0).astype(np.uint8)


def fp4_pack(codes):
    """e2m1 codes [..., 2n] -> int8 bytes [..., n]: element 2k in the low
    nibble, 2k+1 in the high one (transformers' Fp8Dequantize._unpack_fp4)."""
    c = np.asarray(codes, dtype=np.uint8)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8).view(np.int8)


def fp4_unpack(packed):
    """int8 bytes [..., n] -> float32 e2m1 values [..., 2n] (low nibble first)."""
    u = np.asarray(packed).view(np.uint8)
    out = np.empty(u.shape[:-1] + (2 * u.shape[-1],), dtype=np.float32)
    out[..., 0::2] = E2M1_VALUES[u & 0xF]
    out[..., 1::2] = E2M1_VALUES[u >> 4]
    return out


def fp4_quantize(w, group=32):
    """MXFP4 as DeepSeek-V4 ships routed experts: w [rows, cols] -> (int8
    [rows, cols/2], ue8m0 codes [rows, cols/group]); each group of `group`
    inputs scaled by the power of two 2^ceil(log2(amax / 6))."""
    w = np.asarray(w, dtype=np.float32)
    rows, cols = w.shape[-2:]
    if cols % group or cols % 2:
        raise ValueError("fp4_quantize: %d columns are not a multiple of %d" % (cols, group))
    g = w.reshape(w.shape[:-1] + (cols // group, group))
    scale = pow2_ceil(np.abs(g).max(axis=-1) / np.float32(E2M1_MAX))
    codes = f32_to_e2m1(g / scale[..., None]).reshape(w.shape)
    return fp4_pack(codes), f32_to_e8m0(scale)


def fp4_dequantize(packed, scale, group=32):
    """Inverse of fp4_quantize: e2m1 value * its group's scale (float32;
    scale as float32 values, or F8_E8M0 codes when given as uint8)."""
    v = fp4_unpack(packed)
    s = np.asarray(scale)
    s = e8m0_to_f32(s) if s.dtype == np.uint8 else s.astype(np.float32)
    s = np.repeat(s, group, axis=-1)
    if s.shape != v.shape:
        raise ValueError("fp4 scale %s does not cover weight %s in groups of %d"
                         % (list(np.shape(scale)), list(v.shape), group))
    return (v * s).astype(np.float32)


def fp8_block_quantize_ue8m0(w, block=(128, 128)):
    """fp8_block_quantize with power-of-two scales (DeepSeek-V4's ue8m0
    `scale_fmt`): scale = 2^ceil(log2(amax / 448)), so no code saturates.
    Returns (codes uint8, scale ue8m0 codes uint8)."""
    w = np.asarray(w, dtype=np.float32)
    rows, cols = w.shape[-2:]
    br, bc = block
    nr, nc = -(-rows // br), -(-cols // bc)
    codes = np.empty(w.shape, dtype=np.uint8)
    scale = np.empty(w.shape[:-2] + (nr, nc), dtype=np.float32)
    for i in range(nr):
        for j in range(nc):
            blk = w[..., i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            s = pow2_ceil(np.abs(blk).max(axis=(-2, -1)) / np.float32(E4M3_MAX))
            scale[..., i, j] = s
            codes[..., i * br:(i + 1) * br, j * bc:(j + 1) * bc] = \
                f32_to_e4m3(blk / s[..., None, None])
    return codes, f32_to_e8m0(scale)


def to_f32(t):
    """Tensor of a float dtype -> float32 array (fp8 without its scale)."""
    if t.dtype == "BF16":
        return bf16_to_f32(t.raw)
    if t.dtype == "F8_E4M3":
        return e4m3_to_f32(t.raw)
    if t.dtype == "F8_E8M0":
        return e8m0_to_f32(t.raw)
    if t.dtype in ("F32", "F16", "F64"):
        return np.asarray(t.raw, dtype=np.float32)
    raise ValueError("tensor of dtype %s is not a float tensor" % t.dtype)


# ---------------------------------------------------------------- self-test


SYNC_BYTES = 256 << 20        # SyncedWriter flushes and drops written pages this often


class Progress:
    """One line on stderr every few seconds: `prog: [label: ]done / total GB
    (percent), part, rate, time left`."""

    def __init__(self, total_bytes, prog, label=None):
        self.total, self.done, self.prog, self.label = total_bytes, 0, prog, label
        self.t0 = self.t_last = time.monotonic()

    def add(self, n, part):
        self.done += n
        now = time.monotonic()
        if n and (now - self.t_last >= 5 or self.done == self.total):
            self.t_last = now
            rate = self.done / max(now - self.t0, 1e-9)
            left = (self.total - self.done) / rate if rate > 0 else 0
            sys.stderr.write("%s: %s%.2f / %.2f GB (%3.0f%%), %s, %.0f MB/s, %.0f s left\n"
                             % (self.prog, self.label + ": " if self.label else "", self.done / 1e9,
                                self.total / 1e9, 100.0 * self.done / max(self.total, 1), part,
                                rate / 1e6, left))
            sys.stderr.flush()


class SyncedWriter:
    """A file writer that flushes and drops its pages every SYNC_BYTES, so a
    file larger than RAM neither fills the page cache nor piles up dirty
    pages, and reports what it wrote to a Progress (none: silent) under the
    name `part`."""

    def __init__(self, f, progress=None, part=""):
        self.f, self.progress, self.part = f, progress, part
        self.pending, self.synced = 0, 0

    def write(self, buf):
        n = memoryview(buf).nbytes
        self.f.write(buf)
        self.pending += n
        if self.progress:
            self.progress.add(n, self.part)
        if self.pending >= SYNC_BYTES:
            self.sync()

    def sync(self):
        self.f.flush()
        fd = self.f.fileno()
        os.fdatasync(fd)
        end = self.f.tell()
        os.posix_fadvise(fd, self.synced, end - self.synced, os.POSIX_FADV_DONTNEED)
        self.synced, self.pending = end, 0


def _self_test():
    # e4m3: every finite code decodes and re-encodes to itself (both zeros too).
    codes = np.arange(256, dtype=np.uint8)
    finite = ~np.isnan(E4M3_VALUES)
    back = f32_to_e4m3(E4M3_VALUES[finite])
    assert np.array_equal(back, codes[finite]), "e4m3 round trip"
    assert E4M3_VALUES[0x7E] == 448.0 and E4M3_VALUES[0x01] == 2.0 ** -9
    assert E4M3_VALUES[0x08] == 2.0 ** -6 and E4M3_VALUES[0x38] == 1.0
    # Midpoints go to the even code, one ulp either side to the nearer one.
    pos = _E4M3_POS
    mid = (pos[:-1] + pos[1:]) / 2
    lo_code = np.arange(len(mid))
    want_tie = np.where(lo_code % 2 == 0, lo_code, lo_code + 1)
    assert np.array_equal(f32_to_e4m3(mid), want_tie), "e4m3 ties to even"
    assert np.array_equal(f32_to_e4m3(np.nextafter(mid, 0)), lo_code), "below midpoint"
    assert np.array_equal(f32_to_e4m3(np.nextafter(mid, 1e9)), lo_code + 1), "above midpoint"
    assert np.array_equal(f32_to_e4m3(-mid), want_tie | 0x80), "negative ties"
    assert f32_to_e4m3(np.array([464.0, 1e30, -500.0])).tolist() == [0x7E, 0x7E, 0xFE]
    assert f32_to_e4m3(np.array([np.nan]))[0] == 0x7F
    # Brute force on random float32 values over the whole range, including
    # subnormals: nearest finite value, ties to the even code.
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(200000) * np.exp2(rng.uniform(-12, 10, 200000))).astype(np.float32)
    x = np.concatenate([x, E4M3_VALUES[finite].astype(np.float32)])
    a = np.minimum(np.abs(x.astype(np.float64)), 448.0)
    dist = np.abs(a[:, None] - pos[None, :])
    best = dist.min(axis=1, keepdims=True)
    cand = dist == best
    first = cand.argmax(axis=1)
    two = cand.sum(axis=1) == 2
    brute = np.where(two & (first % 2 == 1), first + 1, first).astype(np.uint8)
    brute |= np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    assert np.array_equal(f32_to_e4m3(x), brute), "e4m3 brute force"
    # bf16: exhaustive round trip of all non-NaN bf16 values, RNE on halves.
    allbits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    f = bf16_to_f32(allbits)
    ok = ~np.isnan(f)
    assert np.array_equal(f32_to_bf16(f[ok]), allbits[ok]), "bf16 round trip"
    base = bf16_to_f32(np.arange(0x3F80, 0x3F90, dtype=np.uint16))
    half = (base.view(np.uint32) + np.uint32(0x8000)).view(np.float32)
    got = f32_to_bf16(half)
    want = np.arange(0x3F80, 0x3F90) + (np.arange(0x3F80, 0x3F90) & 1)
    assert np.array_equal(got, want.astype(np.uint16)), "bf16 ties to even"
    # Block quantization: error bounded by half an e4m3 ulp of each block.
    w = (rng.standard_normal((3, 200, 130)) * 0.05).astype(np.float32)
    q, s = fp8_block_quantize(w)
    assert s.shape == (3, 2, 2)
    d = fp8_block_dequantize(q, s)
    rel = np.abs(d - w) / np.maximum(np.abs(w), 2.0 ** -6 * s.max())
    assert rel.max() <= 2.0 ** -4 + 1e-6, rel.max()
    # ue8m0 and e2m1 (DeepSeek-V4).
    assert np.array_equal(f32_to_e8m0(e8m0_to_f32(np.arange(255, dtype=np.uint8))),
                          np.arange(255, dtype=np.uint8)), "e8m0 round trip"
    assert pow2_ceil(np.array([1.0, 1.5, 0.25, 0.3, 6.0])).tolist() == [1.0, 2.0, 0.25, 0.5, 8.0]
    vals = E2M1_VALUES.astype(np.float64)
    assert np.array_equal(f32_to_e2m1(vals), np.arange(16, dtype=np.uint8)), "e2m1 round trip"
    assert f32_to_e2m1(np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0])).tolist() == \
        [0, 2, 2, 4, 4, 6, 6, 7], "e2m1 ties to even"
    codes4 = rng.integers(0, 16, (3, 64)).astype(np.uint8)
    assert np.array_equal(fp4_unpack(fp4_pack(codes4)), E2M1_VALUES[codes4]), "fp4 packing"
    w4 = (rng.standard_normal((8, 64)) * 0.1).astype(np.float32)
    p4, s4 = fp4_quantize(w4)
    assert p4.dtype == np.int8 and p4.shape == (8, 32) and s4.shape == (8, 2)
    d4 = fp4_dequantize(p4, s4)
    sc = np.repeat(e8m0_to_f32(s4), 32, axis=-1)
    assert np.all(np.abs(d4 - w4) <= sc + 1e-12), "fp4 error within half a step (1 between 4 and 6)"
    q8, s8 = fp8_block_quantize_ue8m0(w)
    d8 = fp8_block_dequantize(q8, e8m0_to_f32(s8))
    assert np.abs(d8 - w).max() <= np.abs(w).max() * 2.0 ** -3, "ue8m0 fp8"
    # File round trip.
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, "t.safetensors")
        write_file(p, {"a": ("BF16", f32_to_bf16(w[0])), "b": ("F32", s), "c": ("F8_E4M3", q)})
        t = load_file(p)
        assert np.array_equal(to_f32(t["a"]), bf16_to_f32(f32_to_bf16(w[0])))
        assert np.array_equal(np.asarray(t["b"].raw), s) and np.array_equal(t["c"].raw, q)
        with open(p, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
        assert (8 + n) % 8 == 0
    print("safetensors_np self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        _self_test()
    else:
        sys.stderr.write("usage: safetensors_np.py --self-test\n")
        sys.exit(2)
