#version 450
// The fast-tier SGEMM's inner step as a ceiling: the 128x128 tile's 512 threads, 8x4 outputs a
// thread, warps of 8 x 4 threads (shaders/include/gemm.glsl's HUGE geometries), each k step
// reading two vec4s of a and one of b from shared memory and multiplying them out with 32
// fmas, 16 steps an iteration of its loop; no global memory and no barrier in the loop. What it
// reaches and the FFMA ceiling do not is the price of the outer product and its shared-memory
// reads; what the SGEMM does not reach of it is the price of staging (global loads, shared
// stores, barriers). Run by peak.s; benches/peak.py turns its GPU time into TFLOP/s.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 512) in;
layout(set = 0, binding = 0) buffer Y { float y[]; };
layout(push_constant) uniform P { float a; float b; uint iters; } p;
const uint NTN = 32u, NTM = 16u;      // threads along n and m
const uint SA = 2u * NTM + 1u, SB = NTN + 1u; // vec4s a staged k row (one of padding)
shared vec4 As[32u * SA];
shared vec4 Bs[32u * SB];
void main() {
    uint t = gl_LocalInvocationID.x;
    uint tx = (t / 32u) % (NTN / 8u) * 8u + t % 8u;
    uint ty = (t / 32u) / (NTN / 8u) * 4u + (t % 32u) / 8u;
    for (uint i = t; i < 32u * SA; i += 512u) As[i] = vec4(float(i) * p.a, p.b, 1.0, 2.0);
    for (uint i = t; i < 32u * SB; i += 512u) Bs[i] = vec4(p.b, float(i) * p.a, 3.0, 1.0);
    barrier();
    vec4 acc[8];
    [[unroll]] for (uint i = 0u; i < 8u; i++) acc[i] = vec4(0.0);
    for (uint it = 0u; it < p.iters; it++) {
        // Two sets of 16 staged k rows, alternately, so no read is the same as the last
        // iteration's (nothing to hoist out of the loop).
        uint base = (it & 1u) * 16u;
        [[unroll]] for (uint kk = 0u; kk < 16u; kk++) {
            vec4 a0 = As[(base + kk) * SA + ty], a1 = As[(base + kk) * SA + NTM + ty];
            vec4 b0 = Bs[(base + kk) * SB + tx];
            [[unroll]] for (uint e = 0u; e < 4u; e++) {
                acc[e] = fma(vec4(a0[e]), b0, acc[e]);
                acc[4u + e] = fma(vec4(a1[e]), b0, acc[4u + e]);
            }
        }
    }
    float s = 0.0;
    [[unroll]] for (uint i = 0u; i < 8u; i++) s += acc[i].x + acc[i].y + acc[i].z + acc[i].w;
    // Stored, so that the compiler keeps the chains.
    y[gl_GlobalInvocationID.x] = s;
}
