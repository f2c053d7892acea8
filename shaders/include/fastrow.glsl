// fastrow.glsl -- what the fast tier's one-pass row kernels (softmax_fast, layernorm_fast)
// share: a workgroup of 256 threads per row, each thread holding its FAST_PER elements
// (e = j * 256 + t) in registers, so a row is read once and written once (rows of 1024 to
// FAST_PER * 256 elements; ops::rows picks these kernels only for those). Reductions run over
// a fixed halving tree in shared memory: the same order every run, so the same bits run to run
// on one device (not the strict tier's tree, nor the CPU's bits).
#ifndef ADEADVM_FASTROW_GLSL
#define ADEADVM_FASTROW_GLSL
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 256) in;
const uint FAST_PER = 32u; // ops::rows::FAST_ROW_MAX / 256
shared float fast_red[256];

// The row of this workgroup (the grid is x, then y, then z).
uint fast_row() {
    return (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}

// The workgroup's max (is_max) or sum of one value per thread; every thread gets it.
float fast_reduce(float v, bool is_max) {
    uint t = gl_LocalInvocationIndex;
    fast_red[t] = v;
    barrier();
    [[unroll]] for (uint s = 128u; s > 0u; s >>= 1) {
        if (t < s) {
            fast_red[t] = is_max ? max(fast_red[t], fast_red[t + s]) : fast_red[t] + fast_red[t + s];
        }
        barrier();
    }
    float r = fast_red[0];
    barrier(); // every thread has read it before fast_red is reused
    return r;
}

#endif // ADEADVM_FASTROW_GLSL
