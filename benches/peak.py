#!/usr/bin/env python3
"""The arithmetic ceilings a Vulkan shader reaches on this GPU, and how much of each the GEMMs
reach: adeadvm's (and PyTorch's, where it is installed with CUDA), in the same run.

    python3 benches/peak.py [--adeadvm target/release/adeadvm] [--size 4096]

The ceilings are the kernels of benches/peak (run by benches/peak/peak.s as user SPIR-V through
`adeadvm run --profile`, timed by Vulkan timestamps), with nothing in their loops but the
arithmetic:
  ffma    FP32 fused multiply-add: the fast-tier SGEMM's ceiling (PyTorch's SGEMM too);
  step    the fast-tier SGEMM's inner step alone (128x128 tile, 8x4 outputs a thread, fragments
          read from shared memory, no global memory, no barrier): the part of ffma it misses is
          the outer product's price, the part of it the SGEMM misses is staging's;
  muladd  a `precise` multiply, then an add: the strict-tier SGEMM's ceiling;
  step_strict  the strict-tier SGEMM's inner step alone (as step, with muladd's arithmetic);
  mma     16x16x16 f16 cooperative matrices (VK_KHR_cooperative_matrix, subgroups of 32): the
          f16 GEMM's ceiling through Vulkan (cuBLAS reaches further on Hopper through its
          warpgroup instructions, which no Vulkan shader gets on NVIDIA's driver 580);
  mma_step  the f16 GEMM's inner step alone (128x128 tile of four subgroups of 64x64, each k
          step's matrices loaded from operands staged in shared memory, no global memory, no
          barrier): as step is to ffma.
A ceiling the device cannot run (no cooperative matrices, as on lavapipe) prints as such.
For a GPU machine: on a CPU Vulkan device (lavapipe) the loops take minutes (--scale 0.001).
The kernels' SPIR-V is committed beside their sources; after changing one:
    glslc -O --target-env=vulkan1.1 benches/peak/ffma.comp -o benches/peak/ffma.spv   (muladd, step too; step_strict with -DSTRICT_STEP)
    python3 shaders/glslang_cm2.py benches/peak/mma.comp benches/peak/mma.spv   (mma_step too)
"""

import argparse
import os
import re
import subprocess
import sys

from peer_torch import adeadvm_case, torch_case  # noqa: E402 (this folder is on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "peak", "peak.s")

# kernel: (workgroups, iterations, flops per workgroup per iteration)
CEILINGS = {
    "ffma": (2112, 3000, 256 * 256),  # 256 invocations, 128 fmas each
    "step": (2112, 1000, 512 * 16 * 32 * 2),  # 512 invocations, 16 steps of 32 fmas each
    "muladd": (2112, 1500, 256 * 256),  # the same chains as a multiply and an add
    "step_strict": (2112, 500, 512 * 16 * 32 * 2),  # step as a multiply and an add
    "mma": (4224, 300, 4 * 64 * 16 * 16 * 16 * 2),  # 4 subgroups, 64 multiply-adds each
    "mma_step": (4224, 150, 4 * 32 * 16 * 16 * 16 * 2),  # 4 subgroups, 2 k steps of 16 each
}


def ceiling(exe, kernel, scale):
    groups, iters, flops = CEILINGS[kernel]
    iters = max(1, int(iters * scale))
    out = subprocess.run(
        [exe, "run", PROGRAM, "--backend", "vulkan", "--profile",
         "-D", f"K={kernel}", "-D", f"G={groups}", "-D", f"IT={iters}"],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"
    # The profile's KERNEL row: count, host ms, GPU ms (three launches).
    m = re.search(r"^KERNEL\s+(\d+)\s+[\d.]+\s+([\d.]+)", out.stderr, re.M)
    if not m:
        return None, "no GPU time in the profile"
    seconds = float(m.group(2)) / 1e3 / int(m.group(1))
    return groups * iters * flops / seconds / 1e12, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adeadvm", default="target/release/adeadvm")
    ap.add_argument("--size", type=int, default=4096, help="the GEMMs' size (default 4096)")
    ap.add_argument("--scale", type=float, default=1.0, help="scale the ceiling kernels' loops")
    args = ap.parse_args()
    if not os.access(args.adeadvm, os.X_OK):
        sys.exit(f"no adeadvm executable at {args.adeadvm} (cargo build --release, or --adeadvm PATH)")
    try:
        import torch

        torch = torch if torch.cuda.is_available() else None
    except ImportError:
        torch = None
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        print(f"device: {torch.cuda.get_device_name()}")
    tf = {}
    print(f"{'ceiling':<12} {'TFLOP/s':>9}")
    for kernel in CEILINGS:
        tf[kernel], err = ceiling(args.adeadvm, kernel, args.scale)
        shown = f"{tf[kernel]:9.1f}" if tf[kernel] else f"  n/a ({err})"
        print(f"{kernel:<12} {shown}")
    n = args.size
    rows = [
        ("adeadvm SGEMM fast", ["ffma", "step"], lambda: adeadvm_case(args.adeadvm, "matmul", n, "fast", 15)),
        ("adeadvm SGEMM strict", ["muladd", "step_strict"], lambda: adeadvm_case(args.adeadvm, "matmul", n, "strict", 15)),
        ("adeadvm f16 GEMM fast", ["mma", "mma_step"], lambda: adeadvm_case(args.adeadvm, "matmul-f16", n, "fast", 15)),
    ]
    if torch is not None:
        rows += [
            ("PyTorch SGEMM", ["ffma"], lambda: torch_case(torch, "matmul", n, 15)[0]),
            ("PyTorch f16 GEMM", ["mma"], lambda: torch_case(torch, "matmul-f16", n, 15)[0]),
        ]
    print(f"\n{'GEMM ' + str(n) + '^2':<24} {'TFLOP/s':>9}  of its ceilings")
    for name, of, timed in rows:
        got = 2.0 * n**3 / timed() / 1e12
        parts = ", ".join(f"{got / tf[c]:.2f} of {c}" for c in of if tf[c])
        print(f"{name:<24} {got:9.1f}  {parts or '-'}")


if __name__ == "__main__":
    main()
