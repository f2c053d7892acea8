#!/usr/bin/env python3
"""adeadvm's Vulkan kernels beside PyTorch (CUDA, fp32 with TF32 off) on the same shapes, in the
same run on the same GPU machine.

    python3 benches/peer_torch.py [--adeadvm target/release/adeadvm] [--quick]

Each adeadvm figure comes from `adeadvm bench KERNEL SIZE --backend vulkan --json`: the median
GPU time of one instruction inside the VM (Vulkan timestamps around its commands). Each PyTorch
figure is the median of CUDA-event timings of one call. The ratio is PyTorch's time over
adeadvm's: above 1 means adeadvm is faster; the last column is issue 6's target for the row.
The dispatch row compares the cost per instruction of a chain of 1000 dependent 1-element ADDs
(`adeadvm bench dispatch`: recording, one submit and the GPU's barriers, wall time) with
PyTorch's 1000 dependent eager adds (wall time, synchronized at the end). Absolute times drift;
read the ratios of one run. adeadvm's fast-tier SGEMM runs large shapes on the tensor cores as
three bf16 pieces an operand, with about four times the FMA kernel's average error:
benches/sgemm_accuracy.py compares the accuracy, ADEADVM_VULKAN_SGEMM_SPLIT=0 keeps the FMA kernel.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def torch_case(torch, kernel, n, iters):
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    if kernel.endswith("+gelu"):
        # The matmul, then PyTorch's GELU (erf form, as adeadvm's) over its output: two eager
        # kernels, as a linear layer and its activation run.
        kernel = kernel[: -len("+gelu")]
        if not kernel.startswith("matmul"):
            raise ValueError(kernel)
        a = torch.rand((n, n), device=dev, generator=g)
        b = torch.rand((n, n), device=dev, generator=g)
        if kernel != "matmul":
            dtype = torch.float16 if kernel == "matmul-f16" else torch.bfloat16
            a, b = a.to(dtype), b.to(dtype)
        gelu = torch.nn.functional.gelu
        run = lambda: gelu(torch.matmul(a, b))
        flops, nbytes = 2.0 * n**3, 12.0 * n * n
    elif kernel == "matmul":
        a = torch.rand((n, n), device=dev, generator=g)
        b = torch.rand((n, n), device=dev, generator=g)
        run = lambda: torch.matmul(a, b)
        flops, nbytes = 2.0 * n**3, 12.0 * n * n
    elif kernel in ("matmul-f16", "matmul-bf16"):
        dtype = torch.float16 if kernel == "matmul-f16" else torch.bfloat16
        a = torch.rand((n, n), device=dev, generator=g).to(dtype)
        b = torch.rand((n, n), device=dev, generator=g).to(dtype)
        run = lambda: torch.matmul(a, b)
        flops, nbytes = 2.0 * n**3, 6.0 * n * n
    elif kernel == "add":
        a = torch.rand(n, device=dev, generator=g)
        b = torch.rand(n, device=dev, generator=g)
        run = lambda: torch.add(a, b)
        flops, nbytes = n, 12.0 * n
    elif kernel == "exp":
        a = torch.rand(n, device=dev, generator=g)
        run = lambda: torch.exp(a)
        flops, nbytes = n, 8.0 * n
    elif kernel == "softmax":
        x = torch.rand((n, n), device=dev, generator=g)
        run = lambda: torch.softmax(x, dim=-1)
        flops, nbytes = 5.0 * n * n, 8.0 * n * n
    elif kernel == "layernorm":
        x = torch.rand((n, 1024), device=dev, generator=g)
        run = lambda: torch.nn.functional.layer_norm(x, (1024,))
        flops, nbytes = 8.0 * n * 1024, 8.0 * n * 1024
    elif kernel == "rmsnorm":
        x = torch.rand((n, 1024), device=dev, generator=g)
        run = lambda: torch.nn.functional.rms_norm(x, (1024,))
        flops, nbytes = 5.0 * n * 1024, 8.0 * n * 1024
    elif kernel in ("reduce-sum", "reduce-max"):
        # n as (rows, row, axis), adeadvm bench's [rows, row] over axis.
        rows, row, axis = n
        x = torch.rand((rows, row), device=dev, generator=g)
        op = torch.sum if kernel == "reduce-sum" else torch.amax
        run = lambda: op(x, dim=axis)
        outs = rows if axis == 1 else row
        flops, nbytes = rows * row, 4.0 * (rows * row + outs)
    else:
        raise ValueError(kernel)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        run()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    t = statistics.median(times)
    return t, flops, nbytes


def adeadvm_case(exe, kernel, n, tier, iters):
    shape = ["--row", str(n[1]), "--axis", str(n[2])] if isinstance(n, tuple) else []
    if kernel.endswith("+gelu"):
        kernel, shape = kernel[: -len("+gelu")], ["--act", "gelu"]
    size = str(n[0]) if isinstance(n, tuple) else str(n)
    out = subprocess.run(
        [exe, "bench", kernel, size, *shape, "--backend", "vulkan", "--tier", tier, "--iters", str(iters), "--json"],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        sys.exit(f"adeadvm bench {kernel} {n} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)["seconds"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adeadvm", default="target/release/adeadvm")
    ap.add_argument("--quick", action="store_true", help="fewer shapes and repetitions")
    ap.add_argument("--only", metavar="KERNEL", help="only the rows of this kernel (e.g. matmul-f16)")
    args = ap.parse_args()
    if not os.access(args.adeadvm, os.X_OK):
        sys.exit(f"no adeadvm executable at {args.adeadvm} (cargo build --release, or --adeadvm PATH)")
    try:
        import torch
    except ImportError:
        sys.exit("PyTorch is not installed (pip install torch)")
    if not torch.cuda.is_available():
        sys.exit("PyTorch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    iters = 5 if args.quick else 15
    # (kernel, size, issue 6's target: strict ratio, fast ratio)
    cases = [
        ("matmul", 1024, None, "fast >= 0.75x"),
        ("matmul", 2048, None, None),
        ("matmul", 4096, "strict >= 0.55x", "fast >= 0.85x"),
        ("matmul-f16", 4096, None, "fast >= 0.6x"),
        ("matmul-bf16", 4096, None, None),
        # MATMUL with act=gelu against a matmul then torch's GELU.
        ("matmul+gelu", 4096, None, None),
        ("matmul-f16+gelu", 4096, None, None),
        ("add", 16 << 20, ">= 0.9x", None),
        ("add", 100 << 20, ">= 0.9x", None),
        ("exp", 16 << 20, ">= 0.9x", None),
        ("softmax", 4096, None, None),
        ("layernorm", 4096, None, None),
        ("rmsnorm", 4096, None, None),
        # (rows, row, axis): along rows, down columns, and 16M elements to one.
        ("reduce-sum", (4096, 4096, 1), None, None),
        ("reduce-sum", (4096, 4096, 0), None, None),
        ("reduce-sum", (1, 16 << 20, 1), None, None),
        ("reduce-max", (4096, 4096, 1), None, None),
    ]
    if args.quick:
        cases = [cases[0], cases[2], cases[3], cases[7]]
    if args.only:
        cases = [c for c in cases if c[0] == args.only]
    print(f"GPU: {torch.cuda.get_device_name(0)}; PyTorch {torch.__version__}; fp32 with TF32 off (matmul-f16, matmul-bf16: fp16, bf16)")
    print(f"{'kernel':<15} {'size':>12} {'torch':>12} {'strict':>12} {'ratio':>6} {'fast':>12} {'ratio':>6}  target")
    for kernel, n, strict_target, fast_target in cases:
        t, flops, nbytes = torch_case(torch, kernel, n, iters)
        s = adeadvm_case(args.adeadvm, kernel, n, "strict", iters)
        f = adeadvm_case(args.adeadvm, kernel, n, "fast", iters)
        unit = (lambda x: f"{flops / x / 1e12:.2f} TF/s") if kernel.startswith("matmul") else (lambda x: f"{nbytes / x / 1e9:.0f} GB/s")
        target = ", ".join(x for x in (strict_target, fast_target) if x) or "-"
        size = f"{n[0]}x{n[1]}/{n[2]}" if isinstance(n, tuple) else n
        print(f"{kernel:<15} {size:>12} {unit(t):>12} {unit(s):>12} {t / s:>5.2f}x {unit(f):>12} {t / f:>5.2f}x  {target}")
    if args.only and args.only != "dispatch":
        return
    # A chain of dependent tiny operations: the cost of one instruction.
    x = torch.zeros(1, device="cuda")
    chain = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y = x
        for _ in range(1000):
            y = torch.add(y, 1.0)
        torch.cuda.synchronize()
        chain.append((time.perf_counter() - t0) / 1000)
    t = statistics.median(chain)
    d = adeadvm_case(args.adeadvm, "dispatch", 1, "strict", iters)
    print(f"{'dispatch':<15} {'1000x1':>12} {t * 1e6:>9.2f} us {d * 1e6:>9.2f} us {t / d:>5.2f}x {'':>12} {'':>6}  <= 3 us per instruction")


if __name__ == "__main__":
    main()
