#!/usr/bin/env python3
"""SmolLM2-135M-Instruct in float64 numpy: an independent reference for adeadvm's tests.

    python3 python/tests/smollm2_reference.py MODEL.gguf --prompt-ids 1,2,3 --steps 32 \
        [--logits-out logits.npy]        # prints {"tokens": [...]} as JSON

    from smollm2_reference import load
    model = load("SmolLM2-135M-Instruct.Q4_1.gguf")
    tokens, logits = model.generate([1, 9690, 198], 32)   # logits[i]: float64 [vocab]

Written from the published definition of the model (Hugging Face transformers'
LlamaForCausalLM with SmolLM2-135M-Instruct's config.json), not from adeadvm's code or
llama.cpp's: 30 decoder blocks of

    h = x + o_proj(attention(rope(q_proj(rms_norm(x))), rope(k_proj(...)), v_proj(...)))
    x = h + down_proj(silu(gate_proj(rms_norm(h))) * up_proj(rms_norm(h)))

with grouped-query attention (9 query heads, 3 key/value heads of 64, key/value head j serves
query heads 3j..3j+2, causal, scale 1/8), RoPE over the whole head with theta 100000 in HF's
"rotate_half" layout, RMSNorm x / sqrt(mean(x^2) + eps) * w, a final RMSNorm and the output
projection tied to the token embedding. Everything is float64; the only rounding that is not
float64's is in the stored (quantized) weights themselves.

The weights come from the GGUF file through the minimal reader below (GGUF v2/v3: metadata,
tensor infos, alignment; F32, F16, Q8_0 and Q4_1 dequantized to float64). One convention of
the file is undone on load: llama.cpp's converter stores the rows of attn_q and attn_k
permuted so that RoPE rotates adjacent pairs (x[2i], x[2i+1]); `unpermute` puts them back into
Hugging Face's order, where RoPE rotates (x[i], x[i + 32]). `Model(..., rope="adjacent")`
keeps the file's order and rotates adjacent pairs instead; both give the same logits (up to
float64 rounding), which checks that the un-permutation is right (see `selfcheck`).

Greedy decoding takes the argmax (the lowest index on an exact tie). A KV cache keeps each
step's cost linear in the length.
"""

import argparse
import contextlib
import ctypes
import json
import os
import struct
import sys

# One BLAS thread: the decode steps are matrix-vector products, which OpenBLAS runs several
# times slower on 2 threads than on 1 (measured: 0.45 GB/s vs 29 GB/s on a 1536x576 gemv). This
# only takes effect when numpy is not imported yet; `generate` also limits the threads of an
# already loaded OpenBLAS (see `one_blas_thread`).
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

# ---------------------------------------------------------------------------------------------
# GGUF reader

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types of the GGUF spec.
_SCALARS = {
    0: "<B",  # uint8
    1: "<b",  # int8
    2: "<H",  # uint16
    3: "<h",  # int16
    4: "<I",  # uint32
    5: "<i",  # int32
    6: "<f",  # float32
    7: "<?",  # bool
    10: "<Q",  # uint64
    11: "<q",  # int64
    12: "<d",  # float64
}
_STRING, _ARRAY = 8, 9

# ggml tensor types read here: type id -> (name, elements per block, bytes per block).
GGML_F32, GGML_F16, GGML_Q4_1, GGML_Q8_0 = 0, 1, 3, 8
_TYPES = {
    GGML_F32: ("F32", 1, 4),
    GGML_F16: ("F16", 1, 2),
    GGML_Q4_1: ("Q4_1", 32, 20),  # f16 d, f16 m, 16 bytes of 4-bit q: d*q + m
    GGML_Q8_0: ("Q8_0", 32, 34),  # f16 d, 32 int8 q: d*q
}


class GGUFError(ValueError):
    pass


class _Cursor:
    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise GGUFError("truncated GGUF file: wanted %d bytes at offset %d of %d" % (n, self.pos, len(self.buf)))
        b = self.buf[self.pos : self.pos + n]
        self.pos += n
        return b

    def scalar(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        n = self.scalar("<Q")
        return bytes(self.take(n)).decode("utf-8", errors="replace")

    def value(self, vtype):
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            itype = self.scalar("<I")
            n = self.scalar("<Q")
            if itype in _SCALARS and itype != 7:
                dt = np.dtype(_SCALARS[itype])
                a = np.frombuffer(self.take(n * dt.itemsize), dtype=dt)
                return a
            return [self.value(itype) for _ in range(n)]
        raise GGUFError("unknown GGUF metadata value type %d at offset %d" % (vtype, self.pos))


class GGUFFile:
    """The metadata (`.meta`, {key: value}) and tensors (`.tensor(name)` -> float64 array) of a
    GGUF file. Arrays come in ggml's order reversed: ggml's ne = [576, 49152] (fastest first)
    is a row-major numpy array of shape (49152, 576)."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = memoryview(f.read())
        c = _Cursor(self.buf)
        if bytes(c.take(4)) != GGUF_MAGIC:
            raise GGUFError("%s is not a GGUF file (no GGUF magic)" % path)
        self.version = c.scalar("<I")
        if self.version not in (2, 3):
            raise GGUFError("GGUF version %d is not supported (2 or 3)" % self.version)
        n_tensors = c.scalar("<Q")
        n_kv = c.scalar("<Q")
        self.meta = {}
        for _ in range(n_kv):
            key = c.string()
            self.meta[key] = c.value(c.scalar("<I"))
        self.infos = {}
        for _ in range(n_tensors):
            name = c.string()
            n_dims = c.scalar("<I")
            ne = [c.scalar("<Q") for _ in range(n_dims)]
            ttype = c.scalar("<I")
            offset = c.scalar("<Q")
            self.infos[name] = (ne, ttype, offset)
        align = int(self.meta.get("general.alignment", DEFAULT_ALIGNMENT))
        self.data_start = (c.pos + align - 1) // align * align
        for name, (ne, ttype, offset) in self.infos.items():
            if offset % align:
                raise GGUFError("tensor %s is not aligned to %d" % (name, align))

    def tensor_type(self, name):
        return _TYPES.get(self.infos[name][1], ("type%d" % self.infos[name][1],))[0]

    def tensor(self, name):
        if name not in self.infos:
            raise GGUFError("the GGUF file has no tensor %r" % name)
        ne, ttype, offset = self.infos[name]
        if ttype not in _TYPES:
            raise GGUFError("tensor %s has ggml type %d, which this reader does not dequantize" % (name, ttype))
        _, per_block, block_bytes = _TYPES[ttype]
        count = int(np.prod(ne, dtype=np.int64))
        if count % per_block:
            raise GGUFError("tensor %s: %d elements is not a whole number of blocks" % (name, count))
        nbytes = count // per_block * block_bytes
        start = self.data_start + offset
        if start + nbytes > len(self.buf):
            raise GGUFError("tensor %s runs past the end of the file" % name)
        raw = np.frombuffer(self.buf[start : start + nbytes], dtype=np.uint8)
        flat = dequantize(raw, ttype, count)
        return flat.reshape(tuple(reversed(ne)))


def dequantize(raw, ttype, count):
    """float64[count] from the bytes of `count` elements of ggml type `ttype`."""
    if ttype == GGML_F32:
        return raw.view("<f4").astype(np.float64)
    if ttype == GGML_F16:
        return raw.view("<f2").astype(np.float64)
    if ttype == GGML_Q8_0:
        blocks = raw.reshape(-1, 34)
        d = blocks[:, 0:2].copy().view("<f2").astype(np.float64)  # [nb, 1]
        q = blocks[:, 2:34].view(np.int8).astype(np.float64)  # [nb, 32]
        return (d * q).reshape(count)
    if ttype == GGML_Q4_1:
        blocks = raw.reshape(-1, 20)
        d = blocks[:, 0:2].copy().view("<f2").astype(np.float64)
        m = blocks[:, 2:4].copy().view("<f2").astype(np.float64)
        qs = blocks[:, 4:20]
        # element j of a block (0..15) is the low nibble of byte j, element 16 + j the high one
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float64)
        return (d * q + m).reshape(count)
    raise GGUFError("ggml type %d is not supported" % ttype)


# ---------------------------------------------------------------------------------------------
# The model


def unpermute(w, n_head):
    """Undoes llama.cpp's convert_hf_to_gguf permutation of q/k projection rows.

    The converter writes HF's rows [head, half, i] (half in {0, 1}, i < head_dim/2) in the order
    [head, i, half], so that RoPE on adjacent pairs (2i, 2i+1) equals HF's rotate_half RoPE on
    (i, i + head_dim/2). Here the file's [head, i, half] goes back to HF's [head, half, i]."""
    rows, cols = w.shape
    hd = rows // n_head
    return w.reshape(n_head, hd // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


class Model:
    """SmolLM2 in float64. `rope` is "half" (HF's rotate_half on un-permuted q/k weights, the
    default) or "adjacent" (the file's q/k row order, RoPE on adjacent pairs)."""

    def __init__(self, gguf, rope="half"):
        if rope not in ("half", "adjacent"):
            raise ValueError("rope must be 'half' or 'adjacent'")
        meta = gguf.meta
        arch = meta.get("general.architecture")
        if arch != "llama":
            raise GGUFError("expected a llama-architecture GGUF, got %r" % arch)
        self.n_layer = int(meta["llama.block_count"])
        self.d = int(meta["llama.embedding_length"])
        self.n_head = int(meta["llama.attention.head_count"])
        self.n_kv = int(meta["llama.attention.head_count_kv"])
        self.ff = int(meta["llama.feed_forward_length"])
        self.theta = float(meta["llama.rope.freq_base"])
        # HF's config says rms_norm_eps = 1e-05 (the GGUF holds it rounded to float32)
        self.eps = 1e-5
        self.hd = self.d // self.n_head
        self.rope = rope
        if int(meta.get("llama.rope.dimension_count", self.hd)) != self.hd:
            raise GGUFError("partial RoPE is not what SmolLM2 uses")
        self.embed = gguf.tensor("token_embd.weight")  # [vocab, d]
        self.vocab = self.embed.shape[0]
        # tied output projection: SmolLM2 has tie_word_embeddings = true
        # (a file with its own output.weight would use that)
        self.lm_head = gguf.tensor("output.weight") if "output.weight" in gguf.infos else self.embed
        self.norm = gguf.tensor("output_norm.weight")
        self.layers = []
        for i in range(self.n_layer):
            p = "blk.%d." % i
            q = gguf.tensor(p + "attn_q.weight")  # [n_head*hd, d]
            k = gguf.tensor(p + "attn_k.weight")  # [n_kv*hd, d]
            if rope == "half":
                q = unpermute(q, self.n_head)
                k = unpermute(k, self.n_kv)
            # weights transposed once so that activations [T, d] @ W.T is a plain x @ Wt
            self.layers.append(
                dict(
                    attn_norm=gguf.tensor(p + "attn_norm.weight"),
                    wq=np.ascontiguousarray(q.T),
                    wk=np.ascontiguousarray(k.T),
                    wv=np.ascontiguousarray(gguf.tensor(p + "attn_v.weight").T),
                    wo=np.ascontiguousarray(gguf.tensor(p + "attn_output.weight").T),
                    ffn_norm=gguf.tensor(p + "ffn_norm.weight"),
                    wg=np.ascontiguousarray(gguf.tensor(p + "ffn_gate.weight").T),
                    wu=np.ascontiguousarray(gguf.tensor(p + "ffn_up.weight").T),
                    wd=np.ascontiguousarray(gguf.tensor(p + "ffn_down.weight").T),
                )
            )
        self.inv_freq = 1.0 / self.theta ** (np.arange(0, self.hd, 2, dtype=np.float64) / self.hd)
        self.reset()

    def reset(self):
        self.cache_k = [None] * self.n_layer  # per layer: [n_kv, T, hd]
        self.cache_v = [None] * self.n_layer
        self.pos = 0

    def _rope(self, x, positions):
        """x: [heads, T, hd]; positions: [T]."""
        ang = positions[:, None].astype(np.float64) * self.inv_freq[None, :]  # [T, hd/2]
        cos, sin = np.cos(ang), np.sin(ang)
        h = self.hd // 2
        if self.rope == "half":
            # HF: q * cos + rotate_half(q) * sin, cos/sin repeated over both halves
            x1, x2 = x[..., :h], x[..., h:]
            return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x2 * cos + x1 * sin
        return out

    def forward(self, ids):
        """Runs `ids` (the next tokens after those cached) and returns float64 logits [T, vocab]."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or len(ids) == 0:
            raise ValueError("forward takes a non-empty 1-D list of token ids")
        if ids.min() < 0 or ids.max() >= self.vocab:
            raise ValueError("token id out of range [0, %d)" % self.vocab)
        T = len(ids)
        positions = np.arange(self.pos, self.pos + T)
        x = self.embed[ids]  # [T, d]
        group = self.n_head // self.n_kv
        scale = 1.0 / np.sqrt(self.hd)
        total = self.pos + T
        # causal mask over [T, total]: query t (at position pos+t) sees keys 0..pos+t
        mask = np.arange(total)[None, :] > positions[:, None]
        for i, L in enumerate(self.layers):
            h = rms_norm(x, L["attn_norm"], self.eps)
            q = (h @ L["wq"]).reshape(T, self.n_head, self.hd).transpose(1, 0, 2)
            k = (h @ L["wk"]).reshape(T, self.n_kv, self.hd).transpose(1, 0, 2)
            v = (h @ L["wv"]).reshape(T, self.n_kv, self.hd).transpose(1, 0, 2)
            q = self._rope(q, positions)
            k = self._rope(k, positions)
            if self.cache_k[i] is not None:
                k = np.concatenate([self.cache_k[i], k], axis=1)
                v = np.concatenate([self.cache_v[i], v], axis=1)
            self.cache_k[i], self.cache_v[i] = k, v
            # query head hq uses key/value head hq // group (HF's repeat_kv)
            kk = np.repeat(k, group, axis=0)  # [n_head, total, hd]
            vv = np.repeat(v, group, axis=0)
            s = np.matmul(q, kk.transpose(0, 2, 1)) * scale  # [n_head, T, total]
            s = np.where(mask[None], -np.inf, s)
            s = s - s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=-1, keepdims=True)
            a = np.matmul(p, vv).transpose(1, 0, 2).reshape(T, self.d)
            x = x + a @ L["wo"]
            h = rms_norm(x, L["ffn_norm"], self.eps)
            x = x + (silu(h @ L["wg"]) * (h @ L["wu"])) @ L["wd"]
        self.pos = total
        x = rms_norm(x, self.norm, self.eps)
        return x @ self.lm_head.T

    def generate(self, prompt_ids, steps):
        """Greedy decoding from a fresh cache: (tokens, logits_per_step), where tokens has `steps`
        ids and logits_per_step[i] is the float64 [vocab] vector whose argmax is tokens[i] (the
        logits after the last prompt token for i = 0). No stop at end-of-sequence."""
        if steps < 1:
            raise ValueError("steps must be at least 1")
        self.reset()
        tokens, per_step = [], []
        with one_blas_thread():
            logits = self.forward(list(prompt_ids))[-1]
            for i in range(steps):
                t = int(np.argmax(logits))
                tokens.append(t)
                per_step.append(logits)
                if i + 1 < steps:
                    logits = self.forward([t])[-1]
        return tokens, per_step


def _openblas_threads():
    """(get, set) of the OpenBLAS that numpy loaded, or None (found in /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower() and ".so" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in ("scipy_openblas", "openblas"):
            for suffix in ("64_", ""):
                get = getattr(lib, prefix + "_get_num_threads" + suffix, None)
                put = getattr(lib, prefix + "_set_num_threads" + suffix, None)
                if get is not None and put is not None:
                    get.restype = ctypes.c_int
                    put.argtypes = [ctypes.c_int]
                    return get, put
    return None


@contextlib.contextmanager
def one_blas_thread():
    """Runs the body with one OpenBLAS thread where that can be set (threadpoolctl when it is
    installed, else OpenBLAS's own setter through ctypes); otherwise the body runs as it is."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    if threadpool_limits is not None:
        with threadpool_limits(limits=1, user_api="blas"):
            yield
        return
    fns = _openblas_threads()
    if fns is None:
        yield
        return
    get, put = fns
    before = get()
    put(1)
    try:
        yield
    finally:
        put(before)


def load(gguf_path, rope="half"):
    """The model of a SmolLM2 GGUF file, weights dequantized to float64."""
    return Model(GGUFFile(gguf_path), rope=rope)


def selfcheck(gguf_path, prompt_ids, steps=4):
    """Max |difference| of logits between the two RoPE layouts (HF's rotate_half on un-permuted
    weights, and adjacent pairs on the file's order): float64 rounding if un-permuting is right."""
    g = GGUFFile(gguf_path)
    a = Model(g, rope="half").generate(prompt_ids, steps)
    b = Model(g, rope="adjacent").generate(prompt_ids, steps)
    assert a[0] == b[0], (a[0], b[0])
    return max(float(np.abs(x - y).max()) for x, y in zip(a[1], b[1]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="the SmolLM2 GGUF file")
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("--steps", type=int, default=32, help="tokens to generate (greedy)")
    ap.add_argument("--logits-out", help="write float64 [steps, vocab] logits to this .npy")
    ap.add_argument("--rope", choices=["half", "adjacent"], default="half", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        ids = [int(s) for s in args.prompt_ids.split(",") if s.strip()]
    except ValueError:
        ap.error("--prompt-ids must be comma-separated integers")
    if not ids:
        ap.error("--prompt-ids is empty")
    model = load(args.model, rope=args.rope)
    tokens, logits = model.generate(ids, args.steps)
    if args.logits_out:
        np.save(args.logits_out, np.stack(logits))
    print(json.dumps({"tokens": tokens}))


if __name__ == "__main__":
    sys.exit(main())
