// spin.comp — a kernel that runs for as long as its caller asks: each invocation iterates
// `rounds` times 2^20 steps of a recurrence the compiler cannot remove, then writes
// y[i]. With rounds = 0xFFFFFFFF it runs for days on any device: tests/robustness.rs uses it
// to make ADEADVM_GPU_TIMEOUT fire on a real long-running KERNEL.
// Bindings: set 0, binding 0 = x (read), binding 1 = y (written).
// Push constants: uint rounds, uint n. Workgroup: 64 invocations.
// Rebuild: glslc --target-env=vulkan1.1 -O tests/support/kernels/spin.comp -o tests/support/kernels/spin.spv
#version 450
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0) readonly buffer In { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Out { float y[]; };
layout(push_constant) uniform Push {
    uint rounds;
    uint n;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.n) {
        return;
    }
    uint v = floatBitsToUint(x[i]);
    for (uint r = 0u; r < pc.rounds; r++) {
        for (uint k = 0u; k < 1048576u; k++) {
            v = v * 1664525u + 1013904223u;
        }
    }
    y[i] = uintBitsToFloat(v);
}
