#!/bin/sh
# Rebuilds the committed SPIR-V in shaders/spv from shaders/*.comp. Run from the repository root:
#   sh shaders/build.sh
# tests/vulkan.rs recompiles with the same flags and fails if shaders/spv is stale.
set -e
for f in shaders/*.comp; do
    n=$(basename "$f" .comp)
    glslc --target-env=vulkan1.0 -I shaders/include "$f" -o "shaders/spv/$n.spv"
done
