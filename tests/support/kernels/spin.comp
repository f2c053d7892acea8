// spin.comp — a kernel that runs for hours: tests/bounded.rs uses it to make
// ADEADVM_GPU_TIMEOUT fire on a real long-running KERNEL (no fault injection).
// Every invocation of every workgroup runs `rounds` times 512 steps of a recurrence that
// loads from x at an address the previous step decides (so no compiler can fold it), then
// invocations below n write y[i]. lavapipe (llvmpipe) ends any shader loop after 65535
// iterations, so the work is in the 512 steps written out per iteration and in the number of
// workgroups: groups(65535, 1, 1) with rounds = 65535 is about 10^15 steps.
// Bindings: set 0, binding 0 = x (read, 64 floats), binding 1 = y (written).
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

#define STEP v = v * 1664525u + floatBitsToUint(x[v & 63u]);
#define STEP8 STEP STEP STEP STEP STEP STEP STEP STEP
#define STEP64 STEP8 STEP8 STEP8 STEP8 STEP8 STEP8 STEP8 STEP8
#define STEP512 STEP64 STEP64 STEP64 STEP64 STEP64 STEP64 STEP64 STEP64

void main() {
    uint i = gl_GlobalInvocationID.x;
    uint v = i;
    for (uint r = 0u; r < pc.rounds; r++) {
        STEP512
    }
    if (i < pc.n) {
        y[i] = uintBitsToFloat(v);
    }
}
