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

Needs zstd: the `zstandard` module or the `zstd` program. Exit status: 0 pipelines written;
1 none found; 2 bad arguments or no zstd.
"""

import argparse
import glob
import os
import shutil
import struct
import subprocess
import sys

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PIPELINE_MAGIC = b"NVDANVVM"
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
    args = ap.parse_args()
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
            print(summary)
            found += 1
    if found == 0:
        sys.stderr.write(f"nvidia-sass: no cached pipelines under {args.cache} (was __GL_SHADER_DISK_CACHE=1 set?)\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
