#!/bin/sh
# Rebuilds the committed SPIR-V in shaders/spv from shaders/*.comp. Run from the repository root:
#   sh shaders/build.sh
# tests/vulkan.rs recompiles with the same flags and fails if shaders/spv is stale. The
# cooperative-matrix GEMMs go through shaders/glslang_cm2.py (see there for its compiler).
# -O: spirv-opt's performance passes (measured on an H100: the fast 64x64 GEMM went from 19.5 to
# 27.6 TFLOP/s). They keep `precise` (NoContraction) on what they do not copy; no strict shader
# may mark a loop holding float arithmetic [[unroll]], because the unroller drops `precise` on
# its copies and later passes fuse those into FMAs. tests/vulkan.rs checks every strict shader.
set -e
for f in shaders/*.comp; do
    n=$(basename "$f" .comp)
    # Workgroup-scope cooperative matrices: a newer glslang than glslc's (see the script).
    if grep -q GL_NV_cooperative_matrix2 "$f"; then
        python3 shaders/glslang_cm2.py "$f" "shaders/spv/$n.spv"
        continue
    fi
    # Subgroup operations need SPIR-V 1.3 (Vulkan 1.1); the rest stays loadable by 1.0 devices.
    env=vulkan1.0
    if grep -q GL_KHR_shader_subgroup "$f"; then
        env=vulkan1.1
    fi
    glslc -O --target-env=$env -I shaders/include "$f" -o "shaders/spv/$n.spv"
done
