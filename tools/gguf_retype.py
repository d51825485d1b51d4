#!/usr/bin/python3
"""Rewrites the GGML type of one tensor in a GGUF header, for the tests.

    gguf_retype.py IN.gguf TENSOR TYPE_ID OUT.gguf

The new type must take as many bytes as the old one for the tensor's shape
(e.g. q4_0 -> iq4_nl, 18 bytes per 32 values each; f32 -> i32), so that the
file stays well-formed and only the type is wrong for a reader: how
tests/test_gguf_convert.c makes a file holding a type colibri has no kernel
for.  Walks the header as the GGUF format lays it out (v2 / v3).
"""
import struct
import sys

# Fixed-size metadata value types: id -> bytes.
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(b, off, vtype):
    if vtype in SIZES:
        return off + SIZES[vtype]
    if vtype == 8:
        (n,) = struct.unpack_from("<Q", b, off)
        return off + 8 + n
    if vtype == 9:
        atype, n = struct.unpack_from("<IQ", b, off)
        off += 12
        for _ in range(n):
            off = skip_value(b, off, atype)
        return off
    raise SystemExit("gguf_retype: unknown value type %d" % vtype)


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    src, name, new_type, dst = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3]), sys.argv[4]
    b = bytearray(open(src, "rb").read())
    if b[:4] != b"GGUF":
        raise SystemExit("gguf_retype: %s is not a GGUF file" % src)
    n_tensors, n_kv = struct.unpack_from("<QQ", b, 8)
    off = 24
    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", b, off)
        off += 8 + klen
        (vtype,) = struct.unpack_from("<I", b, off)
        off = skip_value(b, off + 4, vtype)
    for _ in range(n_tensors):
        (nlen,) = struct.unpack_from("<Q", b, off)
        tname = bytes(b[off + 8:off + 8 + nlen])
        off += 8 + nlen
        (ndim,) = struct.unpack_from("<I", b, off)
        off += 4 + 8 * ndim
        if tname == name:
            struct.pack_into("<I", b, off, new_type)
            open(dst, "wb").write(b)
            return
        off += 4 + 8
    raise SystemExit("gguf_retype: %s has no tensor %s" % (src, name.decode()))


if __name__ == "__main__":
    main()
