#!/usr/bin/env python3
"""A GGUF model without its weights, and back: for timing llama.cpp where the model file can't go.

    python3 benches/gguf_skeleton.py shrink MODEL.gguf MODEL.skel
    python3 benches/gguf_skeleton.py expand MODEL.skel SYNTH.gguf [--seed N]
    python3 benches/gguf_skeleton.py info FILE                  # header summary of a .gguf/.skel

`shrink` keeps the whole header, byte for byte: the key/value metadata (tokenizer included) and
the tensor infos (names, shapes, ggml types, offsets); the tensor data is dropped. The skeleton is
the GGUF file's first bytes up to the end of the tensor infos, so it is itself readable as a GGUF
header (SmolLM2-135M: about 2 MB against 98 MB).

`expand` writes a valid GGUF of exactly that header, with synthetic tensor data of each tensor's
ggml type at its recorded offset: quantized blocks (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q8_1 and the
K-quants) with random quants and small finite f16 scales (and mins), F16/BF16/F32 tensors with
small finite values, 1-D F32 tensors (norms) near 1. llama.cpp loads and runs it as it would the
real model (same shapes, types and tokenizer, so the same work per token); the text it writes
is meaningless. Deterministic for a given --seed. numpy and the standard library only.
"""

import argparse
import struct
import sys
import zlib

import numpy as np

# ggml type -> (name, elements per block, bytes per block, byte offsets of f16 scales in a block,
# byte offset of an f32 scale in a block or None)
GGML_TYPES = {
    0: ("F32", 1, 4, (), None),
    1: ("F16", 1, 2, (), None),
    2: ("Q4_0", 32, 18, (0,), None),
    3: ("Q4_1", 32, 20, (0, 2), None),
    6: ("Q5_0", 32, 22, (0,), None),
    7: ("Q5_1", 32, 24, (0, 2), None),
    8: ("Q8_0", 32, 34, (0,), None),
    9: ("Q8_1", 32, 36, (0, 2), None),
    10: ("Q2_K", 256, 84, (80, 82), None),
    11: ("Q3_K", 256, 110, (108,), None),
    12: ("Q4_K", 256, 144, (0, 2), None),
    13: ("Q5_K", 256, 176, (0, 2), None),
    14: ("Q6_K", 256, 210, (208,), None),
    15: ("Q8_K", 256, 292, (), 0),
    30: ("BF16", 1, 2, (), None),
}

# GGUF metadata value types: fixed-size ones as struct formats; 8 string, 9 array.
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Header:
    """A parsed GGUF header: meta {key: value}, tensors [(name, dims, type, offset)], end (the
    byte offset just past the tensor infos), alignment, data_start."""

    def __init__(self, buf):
        self.buf = buf
        if buf[:4] != b"GGUF":
            raise ValueError("not a GGUF file (magic %r)" % bytes(buf[:4]))
        self.pos = 4
        self.version = self._u("<I")
        if self.version not in (2, 3):
            raise ValueError("GGUF version %d unsupported (2 and 3 are)" % self.version)
        n_tensors, n_kv = self._u("<Q"), self._u("<Q")
        self.meta = {}
        for _ in range(n_kv):
            key = self._str()
            self.meta[key] = self._value(self._u("<I"))
        self.tensors = []
        for _ in range(n_tensors):
            name = self._str()
            dims = [self._u("<Q") for _ in range(self._u("<I"))]
            ttype, offset = self._u("<I"), self._u("<Q")
            self.tensors.append((name, dims, ttype, offset))
        self.end = self.pos
        if self.end > len(buf):
            raise ValueError("GGUF header truncated")
        self.alignment = int(self.meta.get("general.alignment", 32))
        self.data_start = -(-self.end // self.alignment) * self.alignment
        del self.buf

    def _u(self, fmt):
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def _str(self):
        n = self._u("<Q")
        s = bytes(self.buf[self.pos : self.pos + n])
        if len(s) != n:
            raise ValueError("GGUF header truncated")
        self.pos += n
        return s.decode("utf-8", "replace")

    def _value(self, vtype):
        if vtype in SCALAR:
            return self._u(SCALAR[vtype])
        if vtype == 8:
            return self._str()
        if vtype == 9:
            etype, n = self._u("<I"), self._u("<Q")
            if etype in SCALAR:  # skip fast, keep the length
                size = struct.calcsize(SCALAR[etype])
                self.pos += n * size
                return ArraySummary(etype, n)
            return [self._value(etype) for _ in range(n)] if etype != 8 else ArraySummary(8, self._skip_strings(n))
        raise ValueError("unknown GGUF value type %d" % vtype)

    def _skip_strings(self, n):
        for _ in range(n):
            (k,) = struct.unpack_from("<Q", self.buf, self.pos)
            self.pos += 8 + k
        return n


class ArraySummary:
    def __init__(self, etype, n):
        self.etype, self.n = etype, n

    def __repr__(self):
        return "[%d x type %d]" % (self.n, self.etype)


def tensor_nbytes(dims, ttype):
    if ttype not in GGML_TYPES:
        raise ValueError("ggml type %d not supported by this script" % ttype)
    _, block, size, _, _ = GGML_TYPES[ttype]
    n = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if dims and dims[0] % block:
        raise ValueError("row of %d elements is not a whole number of %d-element blocks" % (dims[0], block))
    return n // block * size


def read_header(path, limit=64 << 20):
    with open(path, "rb") as f:
        buf = f.read(1 << 20)
        while True:
            try:
                return Header(buf), buf
            except (struct.error, ValueError) as e:
                if isinstance(e, ValueError) and "truncated" not in str(e):
                    raise
                more = f.read(len(buf))
                if not more or len(buf) > limit:
                    raise ValueError("%s: GGUF header incomplete or larger than %d bytes" % (path, limit))
                buf += more


def shrink(src, dst):
    h, buf = read_header(src)
    with open(dst, "wb") as f:
        f.write(buf[: h.end])
    data = sum(tensor_nbytes(d, t) for _, d, t, _ in h.tensors)
    print("%s: header of %d bytes kept (%d tensors, %d metadata keys), %d bytes of tensor data dropped" % (dst, h.end, len(h.tensors), len(h.meta), data))


def synthetic(name, dims, ttype, rng):
    """Bytes of one tensor's synthetic data."""
    tname, block, size, f16_at, f32_at = GGML_TYPES[ttype]
    n = int(np.prod(dims, dtype=np.int64))
    if ttype == 0:
        if len(dims) == 1:  # norms and the like: near 1
            a = 1.0 + 0.05 * rng.standard_normal(n)
        else:
            a = 0.02 * rng.standard_normal(n)
        return a.astype("<f4").tobytes()
    if ttype in (1, 30):
        a = (0.02 * rng.standard_normal(n)).astype("<f4")
        if ttype == 1:
            return a.astype("<f2").tobytes()
        return (a.view("<u4") >> 16).astype("<u2").tobytes()
    blocks = rng.integers(0, 256, size=(n // block, size), dtype=np.uint8)
    for i, at in enumerate(f16_at):
        # d: a small positive scale; a second f16 is a min (Q4_1, Q5_1, K-quant dmin) or a sum
        # (Q8_1): small, negative for mins so the dequantized values centre near 0.
        v = rng.uniform(0.002, 0.02, size=len(blocks))
        if i == 1:
            v = -8 * v if ttype in (3, 7) else v
        blocks[:, at : at + 2] = v.astype("<f2").view(np.uint8).reshape(-1, 2)
    if f32_at is not None:
        v = rng.uniform(0.002, 0.02, size=len(blocks)).astype("<f4")
        blocks[:, f32_at : f32_at + 4] = v.view(np.uint8).reshape(-1, 4)
    return blocks.tobytes()


def expand(src, dst, seed):
    with open(src, "rb") as f:
        buf = f.read()
    h = Header(buf)
    if h.end != len(buf):
        sys.exit("%s: %d bytes past the GGUF header: not a skeleton (use shrink)" % (src, len(buf) - h.end))
    with open(dst, "wb") as f:
        f.write(buf)
        f.write(b"\0" * (h.data_start - h.end))
        written = 0
        for name, dims, ttype, offset in sorted(h.tensors, key=lambda t: t[3]):
            if offset < written:
                sys.exit("tensor %s at offset %d overlaps the previous one" % (name, offset))
            f.write(b"\0" * (offset - written))
            rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
            data = synthetic(name, dims, ttype, rng)
            assert len(data) == tensor_nbytes(dims, ttype)
            f.write(data)
            written = offset + len(data)
        f.write(b"\0" * (-written % h.alignment))
    print("%s: %d tensors of synthetic data, %d bytes in all" % (dst, len(h.tensors), h.data_start + written + (-written % h.alignment)))


def info(path):
    h, _ = read_header(path)
    print("%s: GGUF v%d, header %d bytes, alignment %d, %d tensors" % (path, h.version, h.end, h.alignment, len(h.tensors)))
    for k, v in h.meta.items():
        print("  %s = %r" % (k, v if not isinstance(v, str) or len(v) < 80 else v[:77] + "..."))
    types = {}
    for _, dims, ttype, _ in h.tensors:
        t = GGML_TYPES.get(ttype, ("type%d" % ttype,))[0]
        types[t] = types.get(t, 0) + 1
    print("  tensor types: %s" % ", ".join("%s x%d" % kv for kv in sorted(types.items())))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("shrink", help="GGUF -> skeleton (header only)")
    p.add_argument("src")
    p.add_argument("dst")
    p = sub.add_parser("expand", help="skeleton -> GGUF with synthetic tensor data")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("info", help="print a GGUF or skeleton header")
    p.add_argument("path")
    args = ap.parse_args()
    if args.cmd == "shrink":
        shrink(args.src, args.dst)
    elif args.cmd == "expand":
        expand(args.src, args.dst, args.seed)
    else:
        info(args.path)


if __name__ == "__main__":
    main()
