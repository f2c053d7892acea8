#!/usr/bin/env python3
"""How accurate each f32 GEMM is, on the same operands: adeadvm's strict tier, its fast tier (on an
NVIDIA GPU with bf16 cooperative matrices, large matmuls run as three bf16 pieces an operand), its
fast tier's FMA kernel (ADEADVM_VULKAN_SGEMM_SPLIT=0), and PyTorch's fp32 matmul (TF32 off)
where PyTorch has CUDA, each against float64.

    python3 benches/sgemm_accuracy.py [--adeadvm target/release/adeadvm] [--size 4096] [--k 4096]

For each output the error is |y - y64| / sum_k |a b| (float64); the script prints that error's
root mean square and maximum. Operands are standard normal (seed 0). Needs numpy.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def adeadvm(exe, prog, a, b, tier, env, tmp):
    out = os.path.join(tmp, "y.npy")
    cmd = [exe, "run", prog, "--backend", "vulkan", "--tier", tier, "-i", f"a={a}", "-i", f"b={b}", "-o", f"y={out}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return np.load(out)


def positive(s):
    try:
        v = int(s)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"`{s}` is not a positive size")
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adeadvm", default="target/release/adeadvm")
    ap.add_argument("--size", type=positive, default=4096, help="M = N")
    ap.add_argument("--k", type=positive, default=4096)
    args = ap.parse_args()
    if not os.access(args.adeadvm, os.X_OK):
        sys.exit(f"no adeadvm executable at {args.adeadvm} (cargo build --release, or --adeadvm PATH)")
    n, k = args.size, args.k
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = a64 @ b64
    scale = np.abs(a64) @ np.abs(b64)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pa, pb, prog = (os.path.join(tmp, f) for f in ("a.npy", "b.npy", "mm.s"))
        np.save(pa, a)
        np.save(pb, b)
        with open(prog, "w") as f:
            f.write(
                f".input %a f32[{n}, {k}]\n.input %b f32[{k}, {n}]\n.output y f32[{n}, {n}]\n"
                f"ALLOC %y: f32[{n}, {n}]\nMATMUL %y, %a, %b\nSTORE y, %y\nFREE %y\n"
            )
        cases = [
            ("adeadvm strict", "strict", {}),
            ("adeadvm fast", "fast", {}),
            ("adeadvm fast, FMA kernel", "fast", {"ADEADVM_VULKAN_SGEMM_SPLIT": "0"}),
            ("adeadvm fast, split bf16", "fast", {"ADEADVM_VULKAN_SGEMM_SPLIT": "1"}),
        ]
        for name, tier, env in cases:
            rows.append((name, adeadvm(args.adeadvm, prog, pa, pb, tier, env, tmp)))
    try:
        import torch

        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = False
            y = (torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu().numpy()
            rows.append((f"PyTorch {torch.__version__} fp32 (TF32 off)", y))
    except ImportError:
        pass
    print(f"{n} x {n} x {k}, standard normal operands; error = |y - y64| / sum |a b|")
    print(f"{'GEMM':36} {'rms error':>12} {'max error':>12}")
    for name, y in rows:
        err = np.abs(y.astype(np.float64) - exact) / scale
        print(f"{name:36} {np.sqrt(np.mean(err**2)):12.3e} {err.max():12.3e}")


if __name__ == "__main__":
    main()
