#!/usr/bin/env python3
"""all-MiniLM-L6-v2 on adeadvm beside PyTorch: the CPU at 1 and N threads and the GPU, B = 1..128.

    cargo build --release                               # the CLI (to assemble) and the C library
    python3 benches/peer_minilm_torch.py --random-weights [--json results.json]
    python3 benches/peer_minilm_torch.py --model "$(scripts/fetch-minilm.sh)"

The same weights go to both: the model's model.safetensors (--model), or random weights of its
shapes written to a temporary file (--random-weights: the speed is the same, and no download is
needed, which is how the GPU machine runs it). PyTorch runs the BERT encoder written here with
torch.nn.functional (Hugging Face's BertModel's computation: erf GELU, layernorm eps 1e-12,
additive mask (1 - mask) * float32 min, mean pooling, L2 normalisation); adeadvm runs
programs/minilm_l6.s through the Python binding, in the strict and the fast tier.

Every figure is end to end, as an application sees it: numpy token ids in, numpy embeddings out
(for PyTorch on the GPU: the copies to and from the device and the synchronisation included).
Rows:
  - CPU, at each of --cpu-runs (THREADS x BATCH; default N x 1, N x 8, N x 32 and 1 x 32 with N the
    machine's cores): PyTorch with torch.set_num_threads(THREADS), adeadvm with threads=THREADS;
  - GPU (when PyTorch sees CUDA and adeadvm a Vulkan device), at each of --gpu-batches: PyTorch
    eager, and at B = 1 also PyTorch replaying a CUDA graph (the cheapest launch it has); adeadvm
    with backend="vulkan".
Each time is the median of --iters calls after a warm-up call, the engines' calls interleaved
with a pause between them (peer_minilm.median_times). The ratio is PyTorch's time over adeadvm's:
above 1 means adeadvm is faster. The embeddings are checked against PyTorch's (max |difference|
<= 1e-3 with random weights, 1e-4 with the model's) and the script exits 1 when they differ.
TF32 is off in PyTorch (fp32 matmuls as adeadvm computes them).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from peer_minilm import D, FF, HD, HEADS, LAYERS, cpu_name, inputs, median_times, read_safetensors  # noqa: E402

VOCAB, MAXPOS = 30522, 512


def random_weights(seed=0):
    """{name: array} with MiniLM's names and shapes: N(0, 0.05) matrices, layernorm gains near 1."""
    rng = np.random.default_rng(seed)
    shapes = {
        "embeddings.word_embeddings.weight": (VOCAB, D),
        "embeddings.position_embeddings.weight": (MAXPOS, D),
        "embeddings.token_type_embeddings.weight": (2, D),
        "embeddings.LayerNorm.weight": (D,),
        "embeddings.LayerNorm.bias": (D,),
    }
    for l in range(LAYERS):
        p = "encoder.layer.%d." % l
        for proj in ("query", "key", "value"):
            shapes[p + "attention.self.%s.weight" % proj] = (D, D)
            shapes[p + "attention.self.%s.bias" % proj] = (D,)
        shapes[p + "attention.output.dense.weight"] = (D, D)
        shapes[p + "attention.output.dense.bias"] = (D,)
        shapes[p + "intermediate.dense.weight"] = (FF, D)
        shapes[p + "intermediate.dense.bias"] = (FF,)
        shapes[p + "output.dense.weight"] = (D, FF)
        shapes[p + "output.dense.bias"] = (D,)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[p + ln + ".weight"] = (D,)
            shapes[p + ln + ".bias"] = (D,)
    out = {}
    for name, shape in shapes.items():
        if "LayerNorm.weight" in name:
            out[name] = (1.0 + 0.05 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (0.05 * rng.standard_normal(shape)).astype(np.float32)
    return out


def write_safetensors(path, tensors):
    """A .safetensors file of F32 tensors (no extra package)."""
    header, offset = {}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little"))
        f.write(blob)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())


def torch_model(torch, weights, device):
    """forward(ids, mask) -> embeddings [B, D], BertModel's encoder + mean pooling + normalize."""
    F = torch.nn.functional
    W = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in weights.items()}
    fmin = torch.finfo(torch.float32).min

    def ln(x, p):
        return F.layer_norm(x, (D,), W[p + ".weight"], W[p + ".bias"], 1e-12)

    def lin(x, p):
        return F.linear(x, W[p + ".weight"], W[p + ".bias"])

    def forward(ids, mask):
        b, t = ids.shape
        x = W["embeddings.word_embeddings.weight"][ids]
        x = x + W["embeddings.token_type_embeddings.weight"][0] + W["embeddings.position_embeddings.weight"][:t]
        x = ln(x, "embeddings.LayerNorm")
        maskf = mask.to(torch.float32)
        add = ((1.0 - maskf) * fmin)[:, None, None, :]
        for l in range(LAYERS):
            p = "encoder.layer.%d." % l
            heads = lambda y: y.view(b, t, HEADS, HD).transpose(1, 2)
            q = heads(lin(x, p + "attention.self.query"))
            k = heads(lin(x, p + "attention.self.key"))
            v = heads(lin(x, p + "attention.self.value"))
            s = torch.matmul(q, k.transpose(-1, -2)) / (HD**0.5) + add
            c = torch.matmul(torch.softmax(s, dim=-1), v).transpose(1, 2).reshape(b, t, D)
            a = ln(lin(c, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            h = F.gelu(lin(a, p + "intermediate.dense"))
            x = ln(lin(h, p + "output.dense") + a, p + "output.LayerNorm")
        m = maskf[:, :, None]
        mean = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(mean, p=2.0, dim=1, eps=1e-12)

    return forward


def assemble(binary, weights_path, out):
    cmd = [binary, "asm", str(ROOT / "programs" / "minilm_l6.s"), "-D", "WEIGHTS=%s" % weights_path, "-o", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def parse_runs(text):
    runs = []
    for item in text.split(","):
        threads, _, batch = item.strip().partition("x")
        if not threads.isdigit() or not batch.isdigit() or int(threads) < 1 or int(batch) < 1:
            raise argparse.ArgumentTypeError("expected THREADSxBATCH items such as 16x8, not %r" % item)
        runs.append((int(threads), int(batch)))
    return runs


def parse_batches(text):
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected batch sizes such as 1,8,32, not %r" % text) from None
    if any(b < 1 for b in out):
        raise argparse.ArgumentTypeError("batch sizes must be positive")
    return out


def main():
    cores = os.cpu_count() or 1
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="folder with the model's model.safetensors")
    src.add_argument("--random-weights", action="store_true", help="random weights of MiniLM's shapes")
    p.add_argument("--binary", default=str(ROOT / "target" / "release" / "adeadvm"))
    p.add_argument("--seq", type=int, default=128, help="tokens per sequence (default 128)")
    p.add_argument("--iters", type=int, default=15)
    p.add_argument(
        "--cpu-runs",
        type=parse_runs,
        default=[(cores, 1), (cores, 8), (cores, 32), (1, 32)],
        help="THREADSxBATCH list (default %dx1,%dx8,%dx32,1x32)" % (cores, cores, cores),
    )
    p.add_argument("--gpu-batches", type=parse_batches, default=[1, 8, 32, 128])
    p.add_argument("--no-gpu", action="store_true")
    p.add_argument("--no-cpu", action="store_true")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args()
    if args.seq < 2 or args.seq > MAXPOS:
        p.error("--seq must be in 2..%d" % MAXPOS)
    if args.iters < 1:
        p.error("--iters must be positive")

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    import adeadvm

    tmp = tempfile.mkdtemp(prefix="peer_minilm_torch.")
    if args.random_weights:
        weights = random_weights()
        wpath = os.path.join(tmp, "model.safetensors")
        write_safetensors(wpath, weights)
        tol = 1e-3
    else:
        wpath = os.path.join(os.path.abspath(args.model), "model.safetensors")
        weights = read_safetensors(wpath)
        tol = 1e-4
    bib = os.path.join(tmp, "minilm.bib")
    assemble(args.binary, wpath, bib)
    program_vms = {}

    def vm(backend, tier, threads=None):
        key = (backend, tier, threads)
        if key not in program_vms:
            program_vms[key] = adeadvm.load(bib, backend=backend, tier=tier, threads=threads)
        return program_vms[key]

    rows, worst = [], 0.0

    def check(name, ours, theirs):
        nonlocal worst
        diff = float(np.max(np.abs(ours - theirs)))
        worst = max(worst, diff)
        if not diff <= tol:
            print("peer_minilm_torch: %s: embeddings differ from PyTorch's by %.3g (> %g)" % (name, diff, tol))
            sys.exit(1)

    def report(row):
        rows.append(row)
        t, s, f = row["torch_ms"], row["strict_ms"], row["fast_ms"]
        print(
            "%-44s  PyTorch %8.2f ms  strict %8.2f ms (%.2fx)  fast %8.2f ms (%.2fx)"
            % (row["run"], t, s, t / s, f, t / f),
            flush=True,
        )

    def compare(run, peer, strict, fast, ids, mask):
        """Checks both tiers' embeddings against the peer's, then times the three in turn."""
        run_s = lambda: strict.run(input_ids=ids, attention_mask=mask)["embedding"]
        run_f = lambda: fast.run(input_ids=ids, attention_mask=mask)["embedding"]
        ref = peer()
        check(run + ", strict", run_s(), ref)
        check(run + ", fast", run_f(), ref)
        t, s, f = median_times([peer, run_s, run_f], args.iters)
        report(dict(run=run, torch_ms=t * 1e3, strict_ms=s * 1e3, fast_ms=f * 1e3))

    if not args.no_cpu:
        forward = torch_model(torch, weights, "cpu")
        for threads, batch in args.cpu_runs:
            ids, mask = inputs(batch, args.seq, seed=batch)
            torch.set_num_threads(threads)
            strict, fast = vm("cpu", "strict", threads), vm("cpu", "fast", threads)

            def run_torch():
                with torch.inference_mode():
                    return forward(torch.from_numpy(ids).long(), torch.from_numpy(mask)).numpy()

            run = "CPU, %d thread%s, B=%d" % (threads, "" if threads == 1 else "s", batch)
            compare(run, run_torch, strict, fast, ids, mask)

    gpu = not args.no_gpu and torch.cuda.is_available()
    if gpu:
        try:
            vm("vulkan", "strict")
        except adeadvm.Error as e:
            print("peer_minilm_torch: no GPU rows: adeadvm has no Vulkan device here (%s)" % e)
            gpu = False
    if gpu:
        forward = torch_model(torch, weights, "cuda")
        for batch in args.gpu_batches:
            ids, mask = inputs(batch, args.seq, seed=batch)
            strict, fast = vm("vulkan", "strict"), vm("vulkan", "fast")

            def run_eager():
                with torch.inference_mode():
                    i = torch.from_numpy(ids).cuda().long()
                    m = torch.from_numpy(mask).cuda()
                    return forward(i, m).cpu().numpy()

            compare("GPU, B=%d (PyTorch eager)" % batch, run_eager, strict, fast, ids, mask)
            if batch == 1:
                # PyTorch's cheapest launch: the whole forward captured once as a CUDA graph,
                # replayed on static input buffers.
                static_ids = torch.from_numpy(ids).cuda().long()
                static_mask = torch.from_numpy(mask).cuda()
                with torch.inference_mode():
                    stream = torch.cuda.Stream()
                    stream.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(stream):
                        for _ in range(3):
                            forward(static_ids, static_mask)
                    torch.cuda.current_stream().wait_stream(stream)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        static_out = forward(static_ids, static_mask)

                def run_graph():
                    static_ids.copy_(torch.from_numpy(ids).long())
                    static_mask.copy_(torch.from_numpy(mask))
                    graph.replay()
                    return static_out.cpu().numpy()

                compare("GPU, B=1 (PyTorch CUDA graph)", run_graph, strict, fast, ids, mask)

    gpu_name = torch.cuda.get_device_name(0) if gpu else None
    print()
    print("Machine: %s, %d cores%s; seq %d, median of %d calls; max |embedding difference| %.2g"
          % (cpu_name(), cores, ("; GPU " + gpu_name) if gpu_name else "", args.seq, args.iters, worst))
    print()
    print("| run | PyTorch | adeadvm strict | adeadvm fast |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        t = r["torch_ms"]
        print("| %s | %.2f ms | %.2f ms (%.2fx) | %.2f ms (%.2fx) |"
              % (r["run"], t, r["strict_ms"], t / r["strict_ms"], r["fast_ms"], t / r["fast_ms"]))
    if args.json:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        meta = dict(cpu=cpu_name(), cores=cores, gpu=gpu_name, seq=args.seq, iters=args.iters,
                    torch=torch.__version__, max_diff=worst, date=time.strftime("%Y-%m-%d"),
                    commit=commit.stdout.strip() or None)
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
