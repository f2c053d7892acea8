#!/usr/bin/env python3
"""adeadvm's CPU kernels beside numpy (OpenBLAS for SGEMM) on the same shapes, in the same run.

    cargo build --release && python3 benches/peer_cpu.py [--threads N] [--quick]

Each adeadvm figure comes from `adeadvm bench KERNEL SIZE --json` (the median time of one
instruction inside the VM); each numpy figure is the median of as many timed calls. numpy,
strict and fast alternate in rounds, and the ratio (numpy's time over adeadvm's, above 1 means
adeadvm is faster) is taken within each round and its median printed, so load that drifts
during the run touches both sides alike. Absolute times on shared machines drift; only the
ratios mean anything. The last line is the interpreter's overhead per instruction.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def numpy_case(np, kernel, n):
    rng = np.random.default_rng(0)
    if kernel == "matmul":
        a = rng.random((n, n), dtype=np.float32)
        b = rng.random((n, n), dtype=np.float32)
        c = np.empty((n, n), dtype=np.float32)
        run = lambda: np.matmul(a, b, out=c)
        flops, nbytes = 2.0 * n**3, 12.0 * n * n
    elif kernel == "add":
        a = rng.random(n, dtype=np.float32)
        b = rng.random(n, dtype=np.float32)
        c = np.empty(n, dtype=np.float32)
        run = lambda: np.add(a, b, out=c)
        flops, nbytes = n, 12.0 * n
    elif kernel == "exp":
        a = rng.random(n, dtype=np.float32)
        c = np.empty(n, dtype=np.float32)
        run = lambda: np.exp(a, out=c)
        flops, nbytes = n, 8.0 * n
    elif kernel == "softmax":
        x = rng.random((n, n), dtype=np.float32)

        def run():
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

        flops, nbytes = 5.0 * n * n, 8.0 * n * n
    elif kernel == "layernorm":
        x = rng.random((n, 1024), dtype=np.float32)

        def run():
            mu = x.mean(axis=-1, keepdims=True)
            d = x - mu
            return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + 1e-5)

        flops, nbytes = 8.0 * n * 1024, 8.0 * n * 1024
    else:
        raise ValueError(kernel)
    run()
    return run, flops, nbytes


def numpy_time(run, iters):
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def adeadvm_case(binary, kernel, n, tier, threads, iters):
    cmd = [binary, "bench", kernel, str(n), "--tier", tier, "--iters", str(iters), "--json"]
    if threads:
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "adeadvm"))
    p.add_argument("--threads", type=int, default=0, help="threads for both (default: every core)")
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions")
    args = p.parse_args()
    if args.threads:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    try:
        import numpy as np
    except ImportError:
        sys.exit("numpy is needed: pip install numpy")
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary} not found: run `cargo build --release` first")
    iters = 5 if args.quick else 9
    rounds = 3
    cases = [
        ("matmul", 512 if args.quick else 1024, "GFLOP/s"),
        ("add", (1 << 22) if args.quick else (1 << 24), "GB/s"),
        ("exp", (1 << 22) if args.quick else (1 << 24), "GB/s"),
        ("softmax", 1024 if args.quick else 4096, "GB/s"),
        ("layernorm", 1024 if args.quick else 4096, "GB/s"),
    ]
    print(f"numpy {np.__version__}; threads: {args.threads or 'all'}; {rounds} rounds of numpy, strict, fast "
          f"(median of {iters} calls each); ratio = numpy time / adeadvm time in the same round, "
          "median over rounds (>1: adeadvm faster)")
    print(f"{'kernel':<10} {'size':>9} {'numpy':>14} {'strict':>14} {'ratio':>7} {'fast':>14} {'ratio':>7}")
    for kernel, n, unit in cases:
        run, flops, nbytes = numpy_case(np, kernel, n)
        t_np, t_tier, ratio = [], {"strict": [], "fast": []}, {"strict": [], "fast": []}
        for _ in range(rounds):
            t = numpy_time(run, iters)
            t_np.append(t)
            for tier in ("strict", "fast"):
                s = adeadvm_case(args.binary, kernel, n, tier, args.threads, iters)["seconds"]
                t_tier[tier].append(s)
                ratio[tier].append(t / s)
        rate = (lambda t: flops / t / 1e9) if unit == "GFLOP/s" else (lambda t: nbytes / t / 1e9)
        med = statistics.median
        row = f"{kernel:<10} {n:>9} {rate(med(t_np)):>8.1f} {unit:<5}"
        for tier in ("strict", "fast"):
            row += f" {rate(med(t_tier[tier])):>8.1f} {unit:<5} {med(ratio[tier]):>6.2f}x"
        print(row, flush=True)
    # Interpreter overhead: 1000 dependent ADDs on 1-element tensors, one thread (no numpy peer).
    d = adeadvm_case(args.binary, "dispatch", 1, "strict", 1, 15)
    print(f"dispatch: {d['seconds'] * 1e9:.0f} ns per instruction (1-element ADDs, 1 thread; target <= 50 ns)")

if __name__ == "__main__":
    main()
