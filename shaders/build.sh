#!/bin/sh
# Rebuilds the committed SPIR-V in shaders/spv from shaders/*.comp. Run from the repository root:
#   sh shaders/build.sh
# tests/vulkan.rs recompiles with the same flags and fails if shaders/spv is stale.
# -O: spirv-opt's performance passes (measured on an H100: the fast 64x64 GEMM went from 19.5 to
# 27.6 TFLOP/s). They keep `precise` (NoContraction) on what they do not copy; no strict shader
# may mark a loop holding float arithmetic [[unroll]], because the unroller drops `precise` on
# its copies and later passes fuse those into FMAs. tests/vulkan.rs checks every strict shader.
set -e
for f in shaders/*.comp; do
    n=$(basename "$f" .comp)
    # Cooperative matrices (and the subgroup builtins beside them) need SPIR-V 1.3.
    env=vulkan1.0
    if grep -q GL_NV_cooperative_matrix "$f"; then env=vulkan1.1; fi
    glslc -O --target-env=$env -I shaders/include "$f" -o "shaders/spv/$n.spv"
done
