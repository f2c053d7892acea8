#!/usr/bin/env bash
# Builds llama.cpp's own benchmark tools (llama-bench, llama-batched-bench), CPU only, from the
# llama.cpp vendored in the llama-cpp-python sdist of a pinned version, for benches/peer_llamacpp.py.
#
#     benches/build-llamacpp.sh            # prints the folder holding the binaries
#
# Result, in target/llamacpp/ (ignored by git):
#     bin/avx2/{llama-bench,llama-batched-bench}     x86-64 with AVX2+FMA+F16C+BMI2
#     bin/avx512/{llama-bench,llama-batched-bench}   the same plus AVX-512 F/CD/VL/DQ/BW
#     bin/VERSION                                    what was built, from what
# Both copies are linked statically (-static, glibc, libstdc++ and libgomp included: ldd finds no
# dependencies; GGML_STATIC alone links only ggml's own targets statically), no
# -march=native, so they run on another x86-64 Linux machine whatever its glibc;
# peer_llamacpp.py picks the copy by /proc/cpuinfo. Static linking rules out GGML_BACKEND_DL and
# with it GGML_CPU_ALL_VARIANTS (run-time selection needs shared backends), hence two copies;
# only ggml-cpu differs between them, so ccache (used where installed) makes the second cheap.
# Each binary is about 11 MB (static libstdc++, llama.cpp's common library); to carry them
# elsewhere, target/llamacpp/llamacpp-bin.tar.gz holds bin/ (about 19 MB for both copies).
#
# Idempotent: the sdist is downloaded once (sha256 checked), a copy whose binaries exist is not
# rebuilt (FORCE=1 rebuilds). Needs curl, cmake >= 3.14 (pip install cmake), a C/C++ compiler.
# JOBS (default 2) sets the build's parallelism, VARIANTS (default "avx2 avx512") the copies.
set -euo pipefail

VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
URL=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-$VERSION.tar.gz
JOBS=${JOBS:-2}
VARIANTS=${VARIANTS:-avx2 avx512}

root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/target/llamacpp
mkdir -p "$out"
cd "$out"

sdist=llama_cpp_python-$VERSION.tar.gz
if ! echo "$SHA256  $sdist" | sha256sum -c --status 2>/dev/null; then
    echo "downloading $sdist" >&2
    curl -fsSL -o "$sdist.part" "$URL"
    echo "$SHA256  $sdist.part" | sha256sum -c --status || { echo "sha256 mismatch for $sdist" >&2; rm -f "$sdist.part"; exit 1; }
    mv "$sdist.part" "$sdist"
fi
src=$out/llama_cpp_python-$VERSION/vendor/llama.cpp
if [ ! -f "$src/CMakeLists.txt" ]; then
    tar xzf "$sdist"
fi

command -v cmake >/dev/null || { echo "no cmake: pip install cmake (or apt-get install cmake)" >&2; exit 1; }

for variant in $VARIANTS; do
    case $variant in
        avx2)   isa=(-DGGML_AVX512=OFF) ;;
        avx512) isa=(-DGGML_AVX512=ON) ;;
        *) echo "unknown variant $variant (avx2, avx512)" >&2; exit 1 ;;
    esac
    bin=$out/bin/$variant
    if [ -z "${FORCE:-}" ] && [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-batched-bench" ]; then
        continue
    fi
    build=$out/build-$variant
    echo "building llama.cpp ($variant) in $build" >&2
    # GIT_EXECUTABLE=false: the sources sit inside adeadvm's git tree, whose commit must not
    # be reported as llama.cpp's (llama-bench then says build_commit "unknown").
    cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF -DGGML_STATIC=ON -DGGML_BACKEND_DL=OFF -DCMAKE_EXE_LINKER_FLAGS=-static \
        -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
        -DGGML_AVX_VNNI=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
        "${isa[@]}" -DGGML_OPENMP=ON \
        -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON \
        -DGIT_EXECUTABLE=/bin/false >"$out/cmake-$variant.log" 2>&1 \
        || { tail -30 "$out/cmake-$variant.log" >&2; exit 1; }
    cmake --build "$build" --config Release -j "$JOBS" --target llama-bench llama-batched-bench \
        >"$out/build-$variant.log" 2>&1 || { tail -40 "$out/build-$variant.log" >&2; exit 1; }
    mkdir -p "$bin"
    for tool in llama-bench llama-batched-bench; do
        cp "$build/bin/$tool" "$bin/$tool"
        strip "$bin/$tool"
        if ldd "$bin/$tool" 2>&1 | grep -q "=>"; then
            echo "$bin/$tool is not fully static:" >&2
            ldd "$bin/$tool" >&2
            exit 1
        fi
    done
done

{
    commit=$(sed -n "/^## \[$VERSION\]/,/^## /p" "$out/llama_cpp_python-$VERSION/CHANGELOG.md" | grep -o -m1 'llama.cpp@[0-9a-f]*' || true)
    echo "llama.cpp vendored in llama-cpp-python $VERSION (${commit:-commit unknown}; sdist sha256 $SHA256)"
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -m), $(${CC:-cc} --version | head -1), static, CPU only"
    echo "variants: $(cd "$out/bin" && ls -d */ | tr -d / | xargs)"
} >"$out/bin/VERSION"
# What to carry to another machine: peer_llamacpp.py unpacks it where bin/ is missing.
tar czf "$out/llamacpp-bin.tar.gz.part" -C "$out" bin && mv "$out/llamacpp-bin.tar.gz.part" "$out/llamacpp-bin.tar.gz"
echo "$out/bin"
