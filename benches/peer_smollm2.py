#!/usr/bin/env python3
"""SmolLM2-135M-Instruct text generation on adeadvm beside a PyTorch fp32 eager implementation
of the same model with the same weights, in the same run on the same machine.

    dir=$(scripts/fetch-smollm2.sh)                     # or --model FILE.gguf
    cargo build --release
    python3 benches/peer_smollm2.py [--threads 2] [--devices cpu,cuda] [--backends cpu,vulkan]
                                    [--batches 1,8] [--prompt-len 128] [--gen 128] [--iters 3]

PyTorch: the model written here (Hugging Face's LlamaForCausalLM computation: RMSNorm, GQA
attention with rotate_half RoPE, SwiGLU, tied output layer), weights read from the GGUF by
python/tests/smollm2_reference.py's reader, dequantized and un-permuted to Hugging Face's
layout, as float32 torch tensors; a KV cache of fixed size (prompt + generated tokens); q/k/v
and gate/up each one fused matrix; TF32 off on CUDA. Measured, for each device and batch size:
  * prompt processing: tokens/s of one forward over the whole prompt (batch x prompt-len tokens)
    into an empty cache, logits of the last position only;
  * generation: tokens/s of `--gen` greedy steps after that prompt (batch x gen tokens), the
    argmax of each step fed back as the next input.
On CUDA the generation is also measured with the decode step captured once as a CUDA graph
(static input buffers, the whole fixed-size cache attended under a position mask, the argmax
written back into the input buffer inside the graph) and replayed; the prompt is not captured,
so the "cuda graphs" rows repeat the eager prompt figure. The script prints whether the graph
replay gives the same tokens as eager.

--synthetic runs PyTorch alone on random weights of the model's shapes, no model file needed.
First seen on one H200 (16 cores, --threads 16, synthetic weights, prompt 128, 128 generated,
before adeadvm could generate), tokens/s prompt / generation: CPU batch 1 1446 / 50.5, batch 8
3274 / 228; CUDA eager batch 1 5486 / 51.0, batch 8 52039 / 423; CUDA graphs generation batch 1
315, batch 8 1906. A loaded machine with few cores wants --threads 1: on a 2-core machine
shared with builds, 2 threads ran an fp32 matrix-vector product 18x slower than 1.

adeadvm: `adeadvm generate BIB --prompt-ids ... --max-tokens GEN --ignore-eos --json --backend B`
on the same prompt, reading the keys "prompt_tokens_per_s" and "gen_tokens_per_s" of its JSON.
Batches: the prompt given B times (`--prompt-ids` repeated), one run.

Each figure is the median of `--iters` runs after one warm-up. The prompt is `--prompt-len`
token ids drawn with a fixed seed from the ordinary (non-special) vocabulary; the same ids go to
both. The table ends with the ratios adeadvm / PyTorch of tokens/s (above 1: adeadvm faster):
adeadvm's cpu backend against PyTorch on the CPU, its vulkan backend against PyTorch CUDA
(eager and graphs). Before timing, PyTorch's first-step logits on a short prompt are checked
against the float64 reference (--no-check skips that); the greedy tokens of PyTorch and adeadvm
on the benchmark prompt are compared and their agreement printed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "tests"))

import smollm2_reference as ref  # noqa: E402

FIRST_ORDINARY_ID = 17  # ids 0..16 are special tokens (<|endoftext|>, <|im_start|>, ...)


# ---------------------------------------------------------------------------------------------
# PyTorch


def torch_weights(gguf, torch, device):
    """{name: float32 tensor on device} in Hugging Face's layout (q/k un-permuted)."""
    meta = gguf.meta
    n_layer = int(meta["llama.block_count"])
    n_head = int(meta["llama.attention.head_count"])
    n_kv = int(meta["llama.attention.head_count_kv"])

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(device)

    w = {"embed": t(gguf.tensor("token_embd.weight")), "norm": t(gguf.tensor("output_norm.weight"))}
    w["lm_head"] = t(gguf.tensor("output.weight")) if "output.weight" in gguf.infos else w["embed"]
    for i in range(n_layer):
        p = "blk.%d." % i
        q = ref.unpermute(gguf.tensor(p + "attn_q.weight"), n_head)
        k = ref.unpermute(gguf.tensor(p + "attn_k.weight"), n_kv)
        v = gguf.tensor(p + "attn_v.weight")
        w[p + "qkv"] = t(np.concatenate([q, k, v], axis=0))
        w[p + "o"] = t(gguf.tensor(p + "attn_output.weight"))
        w[p + "gate_up"] = t(np.concatenate([gguf.tensor(p + "ffn_gate.weight"), gguf.tensor(p + "ffn_up.weight")]))
        w[p + "down"] = t(gguf.tensor(p + "ffn_down.weight"))
        w[p + "attn_norm"] = t(gguf.tensor(p + "attn_norm.weight"))
        w[p + "ffn_norm"] = t(gguf.tensor(p + "ffn_norm.weight"))
    return w


class TorchSmolLM2:
    """fp32 eager SmolLM2 with a static KV cache [layers, batch, kv heads, max_len, head dim]."""

    def __init__(self, torch, gguf, device, batch, max_len):
        self.torch, self.F = torch, torch.nn.functional
        meta = gguf.meta
        self.n_layer = int(meta["llama.block_count"])
        self.d = int(meta["llama.embedding_length"])
        self.n_head = int(meta["llama.attention.head_count"])
        self.n_kv = int(meta["llama.attention.head_count_kv"])
        self.ff = int(meta["llama.feed_forward_length"])
        self.hd = self.d // self.n_head
        self.eps = 1e-5
        self.device, self.batch, self.max_len = device, batch, max_len
        self.w = torch_weights(gguf, torch, device)
        theta = float(meta["llama.rope.freq_base"])
        inv = 1.0 / theta ** (torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd)
        ang = torch.arange(max_len, dtype=torch.float64)[:, None] * inv[None, :]
        ang = torch.cat([ang, ang], dim=-1)  # HF: cos/sin repeated over both halves
        self.cos = ang.cos().float().to(device)  # [max_len, hd]
        self.sin = ang.sin().float().to(device)
        shape = (self.n_layer, batch, self.n_kv, max_len, self.hd)
        self.k_cache = torch.zeros(shape, device=device)
        self.v_cache = torch.zeros(shape, device=device)

    def _rms(self, x, w):
        return x * self.torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def _rope(self, x, cos, sin):
        h = self.hd // 2
        rot = self.torch.cat([-x[..., h:], x[..., :h]], dim=-1)
        return x * cos + rot * sin

    def forward(self, ids, pos, static=False, pos_t=None):
        """ids [B, T] at positions pos..pos+T-1 -> logits [B, vocab] of the last position.

        static=False: attends to cache[:pos+T] (python int pos). static=True (CUDA graphs, T=1):
        positions from the device tensor pos_t [1], the whole cache under a mask."""
        torch, F = self.torch, self.F
        B, T = ids.shape
        x = self.w["embed"][ids]  # [B, T, d]
        if static:
            cos, sin = self.cos[pos_t][None, None], self.sin[pos_t][None, None]  # [1, 1, 1, hd]
            mask = (torch.arange(self.max_len, device=self.device) <= pos_t)[None, None, None, :]
        else:
            cos = self.cos[pos : pos + T][None, None]
            sin = self.sin[pos : pos + T][None, None]
        group = self.n_head // self.n_kv
        qd, kd = self.n_head * self.hd, self.n_kv * self.hd
        for i in range(self.n_layer):
            p = "blk.%d." % i
            h = self._rms(x, self.w[p + "attn_norm"])
            qkv = F.linear(h, self.w[p + "qkv"])
            q = qkv[..., :qd].view(B, T, self.n_head, self.hd).transpose(1, 2)
            k = qkv[..., qd : qd + kd].view(B, T, self.n_kv, self.hd).transpose(1, 2)
            v = qkv[..., qd + kd :].view(B, T, self.n_kv, self.hd).transpose(1, 2)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            kc, vc = self.k_cache[i], self.v_cache[i]
            if static:
                kc.index_copy_(2, pos_t, k)
                vc.index_copy_(2, pos_t, v)
                keys, values = kc, vc
            else:
                kc[:, :, pos : pos + T] = k
                vc[:, :, pos : pos + T] = v
                keys, values = kc[:, :, : pos + T], vc[:, :, : pos + T]
            keys = keys.repeat_interleave(group, dim=1)  # HF's repeat_kv
            values = values.repeat_interleave(group, dim=1)
            if static:
                a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
            elif pos == 0:
                a = F.scaled_dot_product_attention(q, keys, values, is_causal=True)
            elif T == 1:
                a = F.scaled_dot_product_attention(q, keys, values)
            else:
                allowed = torch.arange(pos + T, device=self.device)[None, :] <= torch.arange(pos, pos + T, device=self.device)[:, None]
                a = F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed)
            x = x + F.linear(a.transpose(1, 2).reshape(B, T, self.d), self.w[p + "o"])
            h = self._rms(x, self.w[p + "ffn_norm"])
            gu = F.linear(h, self.w[p + "gate_up"])
            x = x + F.linear(F.silu(gu[..., : self.ff]) * gu[..., self.ff :], self.w[p + "down"])
        x = self._rms(x[:, -1], self.w["norm"])
        return F.linear(x, self.w["lm_head"])


def sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def torch_run(torch, model, prompt, gen):
    """(prompt seconds, generation seconds, tokens [B, gen]) of one greedy generation, eager."""
    B = prompt.shape[0]
    sync(torch, model.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        logits = model.forward(prompt, 0)
        nxt = logits.argmax(-1, keepdim=True)
        sync(torch, model.device)
        t1 = time.perf_counter()
        out = [nxt]
        P = prompt.shape[1]
        for s in range(gen - 1):
            nxt = model.forward(nxt, P + s).argmax(-1, keepdim=True)
            out.append(nxt)
        tokens = torch.cat(out, dim=1)
        sync(torch, model.device)
        t2 = time.perf_counter()
    assert tokens.shape == (B, gen)
    return t1 - t0, t2 - t1, tokens


class GraphDecoder:
    """The decode step captured as one CUDA graph: reads ids_buf [B, 1] and pos_buf [1], writes
    the argmax back into ids_buf."""

    def __init__(self, torch, model):
        self.torch, self.model = torch, model
        self.ids = torch.zeros((model.batch, 1), dtype=torch.long, device="cuda")
        self.pos = torch.zeros(1, dtype=torch.long, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode():
            with torch.cuda.stream(s):
                for _ in range(2):  # warm-up on a side stream, as torch.cuda.graphs asks
                    model.forward(self.ids, None, static=True, pos_t=self.pos)
            torch.cuda.current_stream().wait_stream(s)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                logits = model.forward(self.ids, None, static=True, pos_t=self.pos)
                self.ids.copy_(logits.argmax(-1, keepdim=True))

    def run(self, prompt, gen):
        torch, model = self.torch, self.model
        P = prompt.shape[1]
        sync(torch, "cuda")
        t0 = time.perf_counter()
        with torch.inference_mode():
            # The cache beyond the prompt is masked out, so stale entries of an earlier run are
            # never read before being overwritten.
            logits = model.forward(prompt, 0)
            self.ids.copy_(logits.argmax(-1, keepdim=True))
            sync(torch, "cuda")
            t1 = time.perf_counter()
            out = [self.ids.clone()]
            for s in range(gen - 1):
                self.pos.fill_(P + s)
                self.graph.replay()
                out.append(self.ids.clone())
            tokens = torch.cat(out, dim=1)
            sync(torch, "cuda")
            t2 = time.perf_counter()
        return t1 - t0, t2 - t1, tokens


def check_torch(torch, gguf, device, reference_model, ids):
    """Relative error (max |a-b| / max |b|) of PyTorch's first-step logits vs the float64 reference."""
    m = TorchSmolLM2(torch, gguf, device, 1, len(ids) + 1)
    with torch.inference_mode():
        got = m.forward(torch.tensor([ids], device=device), 0)[0].double().cpu().numpy()
    reference_model.reset()
    with ref.one_blas_thread():
        want = reference_model.forward(ids)[-1]
    return float(np.abs(got - want).max() / np.abs(want).max())


# ---------------------------------------------------------------------------------------------
# adeadvm


def adeadvm_cmd(args):
    exe = args.adeadvm or os.environ.get("ADEADVM_BIN") or str(ROOT / "target" / "release" / "adeadvm")
    if not Path(exe).is_file():
        sys.exit("no adeadvm CLI at %s (cargo build --release, or --adeadvm / ADEADVM_BIN)" % exe)
    return exe


def adeadvm_run(exe, bib, ids, gen, backend, extra, batch=1):
    cmd = [exe, "generate", str(bib), "--max-tokens", str(gen)]
    for _ in range(batch):
        cmd += ["--prompt-ids", ",".join(map(str, ids))]
    cmd += ["--ignore-eos", "--json", "--backend", backend] + extra
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError("adeadvm generate --backend %s failed (exit %d): %s" % (backend, run.returncode, run.stderr.strip()[-2000:]))
    out = None
    for text in [run.stdout] + run.stdout.strip().splitlines()[::-1]:
        try:
            out = json.loads(text)
            break
        except json.JSONDecodeError:
            continue
    if not isinstance(out, dict):
        raise RuntimeError("adeadvm generate --json printed no JSON object: %s" % run.stdout[-1000:])
    for key in ("prompt_tokens_per_s", "gen_tokens_per_s"):
        if key not in out:
            raise RuntimeError("adeadvm generate --json has no %r: %s" % (key, sorted(out)))
    first = out["results"][0] if "results" in out else out
    return float(out["prompt_tokens_per_s"]), float(out["gen_tokens_per_s"]), [int(i) for i in first["ids"]]


class SyntheticGGUF:
    """Random weights of SmolLM2-135M's shapes behind GGUFFile's interface (meta, infos, tensor),
    for trying the script without the model: timings hold, tokens mean nothing. The q/k rows are
    random too, so un-permuting them changes nothing that matters."""

    META = {
        "general.architecture": "llama",
        "llama.block_count": 30,
        "llama.embedding_length": 576,
        "llama.attention.head_count": 9,
        "llama.attention.head_count_kv": 3,
        "llama.feed_forward_length": 1536,
        "llama.rope.freq_base": 100000.0,
        "llama.rope.dimension_count": 64,
        "llama.vocab_size": 49152,
    }

    def __init__(self, layers=None):
        self.meta = dict(self.META)
        if layers:
            self.meta["llama.block_count"] = layers
        d, ff, kv, v = 576, 1536, 192, 49152
        shapes = {"token_embd.weight": (v, d), "output_norm.weight": (d,)}
        for i in range(self.meta["llama.block_count"]):
            p = "blk.%d." % i
            shapes.update({p + "attn_q.weight": (d, d), p + "attn_k.weight": (kv, d), p + "attn_v.weight": (kv, d)})
            shapes.update({p + "attn_output.weight": (d, d), p + "ffn_gate.weight": (ff, d), p + "ffn_up.weight": (ff, d)})
            shapes.update({p + "ffn_down.weight": (d, ff), p + "attn_norm.weight": (d,), p + "ffn_norm.weight": (d,)})
        self.infos = {k: (list(reversed(sh)), None, None) for k, sh in shapes.items()}
        self.shapes = shapes

    def tensor(self, name):
        shape = self.shapes[name]
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        if len(shape) == 1:
            return 1.0 + 0.1 * rng.standard_normal(shape)
        return rng.standard_normal(shape) / np.sqrt(shape[1])

    def write(self, path):
        """These weights as an f32 GGUF file that programs/smollm2.s assembles from, with a
        byte-level vocabulary of the model's size (its first tokens the 256 GPT-2 byte
        characters, the rest placeholders) for `.vocab`."""
        import struct

        def s(text):
            b = text.encode()
            return struct.pack("<Q", len(b)) + b

        chars = [c for c in range(33, 127)] + [c for c in range(161, 173)] + [c for c in range(174, 256)]
        extra = [c for c in range(256) if c not in chars]
        byte_chars = [chr(c) for c in chars] + [chr(256 + i) for i in range(len(extra))]
        tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + byte_chars
        tokens += ["<unused%d>" % i for i in range(self.meta["llama.vocab_size"] - len(tokens))]
        kv = [("general.architecture", struct.pack("<I", 8) + s("llama")),
              ("tokenizer.ggml.model", struct.pack("<I", 8) + s("gpt2")),
              ("tokenizer.ggml.tokens", struct.pack("<IIQ", 9, 8, len(tokens)) + b"".join(s(t) for t in tokens)),
              ("tokenizer.ggml.merges", struct.pack("<IIQ", 9, 8, 0)),
              ("tokenizer.ggml.eos_token_id", struct.pack("<II", 4, 2))]
        names = list(self.shapes)
        out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(names), len(kv)))
        for key, value in kv:
            out += s(key) + value
        offset = 0
        for name in names:
            shape = self.shapes[name]
            out += s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape))
            out += struct.pack("<IQ", 0, offset)
            offset += -(-4 * int(np.prod(shape)) // 32) * 32
        out += b"\0" * (-len(out) % 32)
        with open(path, "wb") as f:
            f.write(out)
            for name in names:
                a = np.asarray(self.tensor(name), dtype="<f4").tobytes()
                f.write(a + b"\0" * (-len(a) % 32))


def find_model(args):
    if args.model:
        return Path(args.model)
    if os.environ.get("ADEADVM_SMOLLM2_GGUF"):
        return Path(os.environ["ADEADVM_SMOLLM2_GGUF"])
    run = subprocess.run(["bash", str(ROOT / "scripts" / "fetch-smollm2.sh")], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("scripts/fetch-smollm2.sh failed: %s (or pass --model)" % run.stderr.strip()[-1000:])
    folder = Path(run.stdout.strip().splitlines()[-1])
    found = sorted(folder.glob("*.gguf"))
    if len(found) != 1:
        sys.exit("expected one .gguf in %s, found %s" % (folder, found))
    return found[0]


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="the SmolLM2 .gguf (default: ADEADVM_SMOLLM2_GGUF, else scripts/fetch-smollm2.sh)")
    ap.add_argument("--adeadvm", help="the CLI (default: ADEADVM_BIN, else target/release/adeadvm)")
    ap.add_argument("--bib", help="an assembled programs/smollm2.s (default: assemble it here)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads on the CPU (default 2)")
    ap.add_argument("--devices", default="cpu,cuda", help="PyTorch devices (cuda only where available)")
    ap.add_argument("--backends", default="cpu,vulkan", help="adeadvm backends")
    ap.add_argument("--batches", default="1,8", help="batch sizes")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128, help="tokens generated per sequence")
    ap.add_argument("--iters", type=int, default=3, help="timed runs per figure (median), after one warm-up")
    ap.add_argument("--no-graphs", action="store_true", help="skip the CUDA-graph decode")
    ap.add_argument("--no-torch", action="store_true", help="adeadvm only")
    ap.add_argument("--no-adeadvm", action="store_true", help="PyTorch only")
    ap.add_argument("--no-check", action="store_true", help="skip the check against the float64 reference")
    ap.add_argument("--adeadvm-arg", action="append", default=[], help="extra argument for adeadvm generate (repeatable)")
    ap.add_argument("--json-out", help="write the rows as JSON here")
    ap.add_argument("--synthetic", action="store_true", help="random weights of the model's shapes, no model file (for adeadvm written as an f32 GGUF)")
    ap.add_argument("--synthetic-layers", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()

    synthetic_dir = tempfile.TemporaryDirectory()
    if args.synthetic:
        gguf = SyntheticGGUF(args.synthetic_layers)
        gguf_path = None
        if not args.no_adeadvm:
            gguf_path = Path(synthetic_dir.name) / "synthetic.gguf"
            gguf.write(gguf_path)
        print("synthetic random weights: tokens meaningless", file=sys.stderr)
    else:
        gguf_path = find_model(args)
        gguf = ref.GGUFFile(str(gguf_path))
    vocab = int(gguf.meta["llama.vocab_size"])
    rng = np.random.default_rng(0)
    prompt_ids = rng.integers(FIRST_ORDINARY_ID, vocab, size=args.prompt_len).tolist()
    batches = [int(b) for b in args.batches.split(",") if b]
    rows = []  # (engine, where, batch, prompt tok/s, gen tok/s)
    greedy = {}  # where -> tokens of batch row 0

    if not args.no_torch:
        import torch

        torch.set_num_threads(args.threads)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        devices = [d for d in args.devices.split(",") if d]
        if "cuda" in devices and not torch.cuda.is_available():
            print("CUDA is not available: PyTorch runs on the CPU only", file=sys.stderr)
            devices.remove("cuda")
        if not args.no_check:
            reference_model = ref.Model(gguf)
            check_ids = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]
            for dev in devices:
                err = check_torch(torch, gguf, dev, reference_model, check_ids)
                print("PyTorch %s fp32 vs the float64 reference, first-step logits: relative error %.2e" % (dev, err))
                if err > 1e-3:
                    sys.exit("PyTorch's model disagrees with the float64 reference (%.2e > 1e-3)" % err)
            del reference_model
        for dev in devices:
            for B in batches:
                model = TorchSmolLM2(torch, gguf, dev, B, args.prompt_len + args.gen)
                prompt = torch.tensor([prompt_ids] * B, device=dev)
                runs = [torch_run(torch, model, prompt, args.gen) for _ in range(args.iters + 1)][1:]
                pp = statistics.median(B * args.prompt_len / r[0] for r in runs)
                tg = statistics.median(B * args.gen / r[1] for r in runs)
                rows.append(("pytorch", "%s eager" % dev, B, pp, tg))
                greedy.setdefault("pytorch %s" % dev, runs[-1][2][0].tolist())
                if dev == "cuda" and not args.no_graphs:
                    g = GraphDecoder(torch, model)
                    runs = [g.run(prompt, args.gen) for _ in range(args.iters + 1)][1:]
                    tg = statistics.median(B * args.gen / r[1] for r in runs)
                    rows.append(("pytorch", "cuda graphs", B, pp, tg))
                    same = runs[-1][2].tolist() == torch_run(torch, model, prompt, args.gen)[2].tolist()
                    print("cuda graphs, batch %d: same tokens as eager: %s" % (B, same))
                    del g
                print("%s batch %d done" % (dev, B), file=sys.stderr)
                del model
                if dev == "cuda":
                    torch.cuda.empty_cache()

    if not args.no_adeadvm:
        exe = adeadvm_cmd(args)
        with tempfile.TemporaryDirectory() as tmp:
            bib = args.bib
            if not bib:
                bib = Path(tmp) / "smollm2.bib"
                cmd = [exe, "asm", str(ROOT / "programs" / "smollm2.s"), "-D", "WEIGHTS=%s" % gguf_path, "-o", str(bib)]
                if args.synthetic:
                    # The synthetic file's tensors are f32 (the real one keeps Q4_1/Q8_0 blocks).
                    cmd += ["-D", "PROJ=f32", "-D", "EMBED=f32"]
                run = subprocess.run(cmd, capture_output=True, text=True)
                if run.returncode != 0:
                    sys.exit("assembling programs/smollm2.s failed: %s" % run.stderr.strip()[-2000:])
            for backend in [b for b in args.backends.split(",") if b]:
                for B in batches:
                    try:
                        runs = [adeadvm_run(exe, bib, prompt_ids, args.gen, backend, args.adeadvm_arg, B) for _ in range(args.iters + 1)][1:]
                    except RuntimeError as e:
                        print("adeadvm %s: %s" % (backend, e), file=sys.stderr)
                        continue
                    rows.append(("adeadvm", backend, B, statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)))
                    greedy.setdefault("adeadvm %s" % backend, runs[-1][2])
                    print("adeadvm %s batch %d done" % (backend, B), file=sys.stderr)

    print()
    print("SmolLM2-135M-Instruct (Q4_1 weights dequantized), prompt %d tokens, %d generated, greedy; tokens/s" % (args.prompt_len, args.gen))
    print("%-8s %-12s %5s %14s %14s" % ("engine", "where", "batch", "prompt tok/s", "gen tok/s"))
    for engine, where, B, pp, tg in rows:
        print("%-8s %-12s %5d %14.1f %14.1f" % (engine, where, B, pp, tg))
    pairs = [("cpu", "cpu eager"), ("vulkan", "cuda eager"), ("vulkan", "cuda graphs")]
    lines = []
    for backend, peer in pairs:
        for p in [r for r in rows if r[0] == "pytorch" and r[1] == peer]:
            a = next((r for r in rows if r[0] == "adeadvm" and r[1] == backend and r[2] == p[2]), None)
            if a:
                lines.append("adeadvm %-6s / pytorch %-11s (batch %d): prompt %.2fx, generation %.2fx" % (backend, peer, p[2], a[3] / p[3], a[4] / p[4]))
    if lines:
        print("\nratios adeadvm / PyTorch at the same batch size (tokens/s; above 1: adeadvm faster)")
        print("\n".join(lines))
    names = sorted(greedy)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            x, y = greedy[a], greedy[b]
            same = next((k for k, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))
            print("greedy tokens, %s vs %s: the first %d of %d agree" % (a, b, same, min(len(x), len(y))))
    if args.json_out:
        keys = ("engine", "where", "batch", "prompt_tokens_per_s", "gen_tokens_per_s")
        Path(args.json_out).write_text(json.dumps([dict(zip(keys, r)) for r in rows], indent=1) + "\n")


if __name__ == "__main__":
    main()
