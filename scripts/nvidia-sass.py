#!/usr/bin/env python3
"""Disassembles the compute pipelines NVIDIA's Vulkan driver kept in its shader disk cache.

On the GPU machine (the driver and CUDA's nvdisasm are there), from the project root:

    d=$(mktemp -d)
    __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 __GL_SHADER_DISK_CACHE_PATH=$d \\
        ADEADVM_VULKAN_PIPELINE_STATS=1 target/release/adeadvm bench matmul 4096 --backend vulkan --tier fast
    python3 scripts/nvidia-sass.py $d $OUT/sass

Each pipeline the driver cached becomes OUT/k<N>_<bytes>.bin (its machine code) and, where
nvdisasm is found, OUT/k<N>_<bytes>.sass; one summary line a pipeline counts the instructions
that matter to the GEMM kernels (FFMA, HMMA and HGMMA, shared and global loads, asynchronous
copies (LDGSTS), local-memory spills).
<bytes> is the code's size, the "Binary Size" that ADEADVM_VULKAN_PIPELINE_STATS=1 prints when
the pipeline is built: that names the kernel.

What the cache holds (seen with driver 580 on an H100; not a documented format): files *.bin
under the cache folder, each a series of zstd frames; a frame that decompresses to a blob
starting with b"NVDANVVM" is a pipeline, with the code's size and offset as little-endian u32s
at 0x4c and 0x50, the code starting 8 bytes after that offset. nvdisasm reads it raw
(`-b SM90`; --arch for another GPU).

--stats LOG names each pipeline from the lines ADEADVM_VULKAN_PIPELINE_STATS=1 wrote to LOG
("adeadvm: pipeline NAME [SPEC] (TIER): ... Binary Size=N", matched by size) and checks the
strict tier at the level of machine code: a built-in strict pipeline must hold no fused
multiply-add (FFMA, DFMA), since its `precise` products and sums are separate roundings. (The
driver does fuse NoContraction operations it copies when it unrolls a loop marked [[unroll]]:
seen with driver 580, which is why strict shaders carry no such loop; tests/vulkan.rs checks
the SPIR-V for it.) For example, every strict opcode's pipelines:

    __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 __GL_SHADER_DISK_CACHE_PATH=$d \
        ADEADVM_VULKAN_PIPELINE_STATS=1 ADEADVM_REQUIRE_VULKAN=1 \
        $(the vulkan_vm test executable) --nocapture every_opcode 2> stats.log
    python3 scripts/nvidia-sass.py $d $OUT/sass --stats stats.log

Needs zstd: the `zstandard` module or the `zstd` program. Exit status: 0 pipelines written
(and, with --stats, no strict pipeline fused); 1 none found, or a strict pipeline holds a
fused multiply-add; 2 bad arguments or no zstd.
"""

import argparse
import glob
import os
import re
import shutil
import struct
import subprocess
import sys

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PIPELINE_MAGIC = b"NVDANVVM"
# Fused multiply-adds, which no strict pipeline may hold (HFMA2.MMA with zero operands is the
# compiler's register-move idiom, not arithmetic, and strict shaders do no f16 arithmetic).
FUSED = ["FFMA", "DFMA"]
STATS_LINE = re.compile(r"adeadvm: pipeline (\S+) (\[[^\]]*\]) \((\w+)\):.*Binary Size=(\d+)")
COUNTED = ["FFMA", "HMMA", "HGMMA", "LDS", "LDSM", "STS", "LDG", "LDGSTS", "DEPBAR", "STG", "LDL", "STL", "BAR"]


def decompressor():
    """A function from one zstd frame (and maybe trailing bytes) to its contents, or None."""
    try:
        import zstandard  # type: ignore

        def with_module(chunk):
            try:
                return zstandard.ZstdDecompressor().decompressobj().decompress(chunk)
            except zstandard.ZstdError:
                return b""

        return with_module
    except ImportError:
        pass
    program = os.environ.get("ZSTD") or shutil.which("zstd")
    if program is None:
        return None

    def with_program(chunk):
        # zstd complains about the bytes after the frame but writes the frame's contents.
        r = subprocess.run([program, "-d", "-c", "-q"], input=chunk, capture_output=True)
        return r.stdout

    return with_program


def frames(data):
    """The zstd frames of a cache file: each from its magic number to the next one."""
    starts = []
    i = data.find(ZSTD_MAGIC)
    while i >= 0:
        starts.append(i)
        i = data.find(ZSTD_MAGIC, i + 4)
    for n, s in enumerate(starts):
        yield data[s : starts[n + 1] if n + 1 < len(starts) else len(data)]


def code_of(blob):
    """The machine code of a decompressed pipeline blob, or None."""
    if not blob.startswith(PIPELINE_MAGIC) or len(blob) < 0x54:
        return None
    size, offset = struct.unpack_from("<II", blob, 0x4C)
    start = offset + 8
    if size == 0 or start + size > len(blob):
        return None
    return blob[start : start + size]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cache", help="the __GL_SHADER_DISK_CACHE_PATH folder of the run")
    ap.add_argument("out", help="folder for the code and its disassembly (made if missing)")
    ap.add_argument("--arch", default="SM90", help="nvdisasm's -b argument (default SM90: H100, H200)")
    ap.add_argument("--stats", metavar="LOG", help="name the pipelines from ADEADVM_VULKAN_PIPELINE_STATS output; check the strict ones")
    args = ap.parse_args()
    # Binary size -> the pipelines of that size: "name [spec] (tier)".
    named = {}
    if args.stats:
        try:
            with open(args.stats, errors="replace") as f:
                for m in STATS_LINE.finditer(f.read()):
                    label = f"{m.group(1)} {m.group(2)} ({m.group(3)})"
                    named.setdefault(int(m.group(4)), set()).add(label)
        except OSError as e:
            sys.stderr.write(f"nvidia-sass: cannot read {args.stats}: {e}\n")
            return 2
        if not named:
            sys.stderr.write(f"nvidia-sass: no pipeline lines in {args.stats} (was ADEADVM_VULKAN_PIPELINE_STATS=1 set?)\n")
            return 2
    fused_code = {}  # binary size -> {machine code: what} of the pipelines holding fused ops
    if not os.path.isdir(args.cache):
        sys.stderr.write(f"nvidia-sass: {args.cache} is not a folder\n")
        return 2
    decompress = decompressor()
    if decompress is None:
        sys.stderr.write("nvidia-sass: needs zstd (pip install zstandard, or the zstd program; ZSTD=path)\n")
        return 2
    nvdisasm = shutil.which("nvdisasm") or next(
        (p for p in ["/usr/local/cuda/bin/nvdisasm"] if os.path.exists(p)), None
    )
    if nvdisasm is None:
        sys.stderr.write("nvidia-sass: no nvdisasm (CUDA's); writing the machine code only\n")
    os.makedirs(args.out, exist_ok=True)
    found = 0
    for path in sorted(glob.glob(os.path.join(args.cache, "**", "*.bin"), recursive=True)):
        with open(path, "rb") as f:
            data = f.read()
        for frame in frames(data):
            code = code_of(decompress(frame))
            if code is None:
                continue
            base = os.path.join(args.out, f"k{found}_{len(code)}")
            with open(base + ".bin", "wb") as f:
                f.write(code)
            summary = f"{base}.bin: {len(code)} bytes"
            if nvdisasm:
                r = subprocess.run([nvdisasm, "-b", args.arch, base + ".bin"], capture_output=True, text=True)
                if r.returncode != 0:
                    summary += f"; nvdisasm failed: {r.stderr.strip()[:200]}"
                else:
                    with open(base + ".sass", "w") as f:
                        f.write(r.stdout)
                    ops = [line.split("*/", 1)[1].split() for line in r.stdout.splitlines() if "*/" in line]
                    names = [o[1] if o and o[0].startswith("@") and len(o) > 1 else (o[0] if o else "") for o in ops]
                    counts = {k: sum(1 for n in names if n == k or n.startswith(k + ".")) for k in COUNTED}
                    summary += "; " + " ".join(f"{k} {v}" for k, v in counts.items() if v)
                    fused = sum(1 for n in names if any(n == k or n.startswith(k + ".") or n.startswith(k + "32I") for k in FUSED))
                    labels = sorted(named.get(len(code), ()))
                    if labels:
                        summary += " <- " + ", ".join(labels)
                    if fused:
                        fused_code.setdefault(len(code), {})[code] = f"{base}.sass: {fused} fused multiply-adds"
            print(summary)
            found += 1
    if found == 0:
        sys.stderr.write(f"nvidia-sass: no cached pipelines under {args.cache} (was __GL_SHADER_DISK_CACHE=1 set?)\n")
        return 1
    if args.stats:
        # Pipelines are named by their size only, and two may share one (a strict UNARY and
        # a fast GEMM did). The same code may be cached twice, so distinct codes are counted:
        # a size fails when it has more distinct fused codes than pipelines of a tier that
        # may fuse (fast, user), so that at least one strict pipeline must be among them.
        fused_strict = []
        for size, codes in sorted(fused_code.items()):
            labels = named.get(size, set())
            if not any(l.endswith("(strict)") for l in labels):
                continue
            may_fuse = sum(1 for l in labels if not l.endswith("(strict)"))
            if len(codes) > may_fuse:
                fused_strict += [f"{what} (pipelines of {size} bytes: {', '.join(sorted(labels))})" for what in codes.values()]
            else:
                print(f"nvidia-sass: {size} bytes: {len(codes)} fused pipeline(s) beside {may_fuse} of a fusing tier: {', '.join(sorted(labels))}")
        if fused_strict:
            sys.stderr.write("nvidia-sass: strict pipelines with fused multiply-adds:\n  " + "\n  ".join(fused_strict) + "\n")
            return 1
        print(f"nvidia-sass: no strict pipeline holds a fused multiply-add ({len(named)} pipeline sizes named)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
