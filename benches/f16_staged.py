#!/usr/bin/env python3
"""Where the f16 GEMM's time goes on a GPU with cooperative matrices: a hand-staged kernel
(benches/f16_staged/gemm.comp) in several configurations, run by `adeadvm bench matmul-f16`
in place of the driver's workgroup-scope kernel, beside that kernel, in one process each.

    python3 benches/f16_staged.py [--adeadvm target/release/adeadvm] [--sizes 4096 8192]

Each configuration is compiled by shaders/glslang_cm2.py into a temporary folder as
coopmat2_f16.spv, which ADEADVM_SPIRV_DIR puts in the place of the committed one;
ADEADVM_COOPMAT2_TILE gives the host the configuration's tile. The configurations that
compute the product are first checked against the driver's kernel on a 2048^2 f16 MATMUL
(the same bits, by the digest `adeadvm run` prints); the two timing-only ones (loads kept in
one L1-resident chunk; no staging at all) give wrong results by design and are marked so.
Needs a device with cooperative matrices (an NVIDIA GPU; lavapipe has none). Where the GPU
machine lacks the compiler (slangpy), compile elsewhere and carry the result:
    python3 benches/f16_staged.py --build-into DIR      (here: compiles every configuration)
    python3 benches/f16_staged.py --prebuilt DIR        (there: runs them)
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SOURCE = os.path.join(HERE, "f16_staged", "gemm.comp")

# name: (defines, host tile, computes the product)
CONFIGS = {
    "128x128 by 64, one stage": ("THREADS 128u|TBM 128u|TBN 128u|BK 64u|NST 1", "128x128x64/4", True),
    "128x128 by 32, two stages": ("THREADS 128u|TBM 128u|TBN 128u|BK 32u|NST 2", "128x128x64/4", True),
    "128x256 by 32, one stage (256 threads)": ("THREADS 256u|TBM 128u|TBN 256u|BK 32u|NST 1", "128x256x64/4", True),
    "256x128 by 32, one stage (256 threads)": ("THREADS 256u|TBM 256u|TBN 128u|BK 32u|NST 1", "256x128x64/4", True),
    "128x256 by 16, two stages (256 threads)": ("THREADS 256u|TBM 128u|TBN 256u|BK 16u|NST 2", "128x256x64/4", True),
    "128x128 by 64, loads from one chunk (timing)": (
        "THREADS 128u|TBM 128u|TBN 128u|BK 64u|NST 1|CHUNK(c) 0u", "128x128x64/4", False),
    "128x128 by 64, no staging (timing)": (
        "THREADS 128u|TBM 128u|TBN 128u|BK 64u|NST 1|NOSTAGE", "128x128x64/4", False),
}

CHECK_PROGRAM = """.tier fast
.const %a f16[2048, 2048] = rand(1, normal)
.const %b f16[2048, 2048] = rand(2, normal)
.output y f16[2048, 2048]
    ALLOC %y: f16[2048, 2048]
    MATMUL %y, %a, %b
    STORE y, %y
    FREE %y
    HALT
"""


def build(name, defines, into):
    with open(SOURCE, encoding="utf-8") as f:
        src = f.read()
    config = "\n".join(f"#define {d}" for d in defines.split("|"))
    src = src.replace("//CONFIG", config, 1)
    os.makedirs(into, exist_ok=True)
    comp = os.path.join(into, "gemm.comp")
    with open(comp, "w", encoding="utf-8") as f:
        f.write(src)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "shaders", "glslang_cm2.py"), comp,
                          os.path.join(into, "coopmat2_f16.spv")], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{name}: the compile failed: {out.stderr.strip()}")


def env_for(spirv_dir, tile):
    env = dict(os.environ)
    if spirv_dir:
        env["ADEADVM_SPIRV_DIR"] = spirv_dir
        env["ADEADVM_COOPMAT2_TILE"] = tile
    return env


def digest(exe, program, env):
    out = subprocess.run([exe, "run", program, "--backend", "vulkan"], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"adeadvm run failed: {out.stderr.strip()}")
    m = re.search(r"digest ([0-9a-f]+)", out.stdout + out.stderr)
    if not m:
        sys.exit(f"adeadvm run printed no digest: {(out.stdout + out.stderr).strip()[-300:]}")
    return m.group(1)


def tflops(exe, n, env):
    out = subprocess.run([exe, "bench", "matmul-f16", str(n), "--backend", "vulkan", "--tier", "fast",
                          "--iters", "20", "--json"], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"adeadvm bench matmul-f16 {n} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)["gflops"] / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adeadvm", default="target/release/adeadvm")
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--build-into", metavar="DIR", help="only compile the configurations into DIR")
    ap.add_argument("--prebuilt", metavar="DIR", help="take the configurations compiled by --build-into DIR")
    args = ap.parse_args()
    if args.build_into:
        for i, (name, (defines, _, _)) in enumerate(CONFIGS.items()):
            build(name, defines, os.path.join(args.build_into, str(i)))
        print(f"compiled {len(CONFIGS)} configurations into {args.build_into}")
        return
    if not os.access(args.adeadvm, os.X_OK):
        sys.exit(f"no adeadvm executable at {args.adeadvm} (cargo build --release, or --adeadvm PATH)")
    if any(n <= 0 or n % 256 for n in args.sizes):
        sys.exit("sizes must be positive multiples of 256 (whole tiles of every configuration)")
    info = subprocess.run([args.adeadvm, "info"], capture_output=True, text=True).stdout
    if not re.search(r"tensor cores \(fast-tier MATMUL\): (?!none)", info):
        sys.exit("no Vulkan device with cooperative matrices here (adeadvm info): the kernel would not run")
    with tempfile.TemporaryDirectory() as tmp:
        program = os.path.join(tmp, "check.s")
        with open(program, "w", encoding="utf-8") as f:
            f.write(CHECK_PROGRAM)
        want = digest(args.adeadvm, program, env_for(None, None))
        rows = [("driver's kernel (coopmat2.glsl)", None, None, "")]
        for i, (name, (defines, tile, computes)) in enumerate(CONFIGS.items()):
            if args.prebuilt:
                into = os.path.abspath(os.path.join(args.prebuilt, str(i)))
                if not os.path.isfile(os.path.join(into, "coopmat2_f16.spv")):
                    sys.exit(f"{name}: no {into}/coopmat2_f16.spv (compile with --build-into {args.prebuilt})")
            else:
                into = os.path.join(tmp, str(i))
                build(name, defines, into)
            if computes:
                got = digest(args.adeadvm, program, env_for(into, tile))
                if got != want:
                    sys.exit(f"{name}: digest {got}, the driver's kernel {want}: not the same bits")
                note = "same bits"
            else:
                note = "wrong results by design"
            rows.append((name, into, tile, note))
        print(f"{'f16 GEMM, TFLOP/s':<46}" + "".join(f"{n:>9}" for n in args.sizes))
        for name, spirv_dir, tile, note in rows:
            cells = "".join(f"{tflops(args.adeadvm, n, env_for(spirv_dir, tile)):9.1f}" for n in args.sizes)
            print(f"{name:<46}{cells}  {note}")


if __name__ == "__main__":
    main()
