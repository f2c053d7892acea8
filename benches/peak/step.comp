#version 450
// The SGEMM's inner step as a ceiling: the 128x128 tile's 512 threads, 8x4 outputs a thread,
// warps of 8 x 4 threads (shaders/include/gemm.glsl's HUGE geometries), each k step reading two
// vec4s of a and one of b from shared memory and multiplying them out, 16 steps an iteration
// of its loop; no global memory and no barrier in the loop. Compiled twice: step.spv with fma
// (the fast tier's), step_strict.spv (-DSTRICT_STEP) with a `precise` multiply, then an add
// (the strict tier's). What it does not reach of the FFMA or multiply-add ceiling is the price
// of the outer product and its shared-memory reads; what the SGEMM does not reach of it is the
// price of staging (global loads, shared stores, barriers). The steps are written out by
// macros, not [[unroll]]: NVIDIA's driver (580) keeps NoContraction only on the first copy of
// a loop so marked. Run by peak.s; benches/peak.py turns its GPU time into TFLOP/s.
layout(local_size_x = 512) in;
layout(set = 0, binding = 0) buffer Y { float y[]; };
layout(push_constant) uniform P { float a; float b; uint iters; } p;
const uint NTN = 32u, NTM = 16u;              // threads along n and m
const uint SA = 2u * NTM + 1u, SB = NTN + 1u; // vec4s a staged k row (one of padding)
shared vec4 As[32u * SA];
shared vec4 Bs[32u * SB];
#ifdef STRICT_STEP
#define MAC(acc, x, y) { precise vec4 prod = vec4(x) * (y); precise vec4 s = (acc) + prod; acc = s; }
#else
#define MAC(acc, x, y) acc = fma(vec4(x), (y), acc);
#endif
#define STEP_E(e) MAC(acc[e], a0[e], b0) MAC(acc[4 + (e)], a1[e], b0)
#define STEP(kk)                                                                        \
    {                                                                                   \
        vec4 a0 = As[(base + (kk)) * SA + ty], a1 = As[(base + (kk)) * SA + NTM + ty];  \
        vec4 b0 = Bs[(base + (kk)) * SB + tx];                                          \
        STEP_E(0) STEP_E(1) STEP_E(2) STEP_E(3)                                         \
    }
#define STEPS4(k) STEP(k) STEP((k) + 1u) STEP((k) + 2u) STEP((k) + 3u)
void main() {
    uint t = gl_LocalInvocationID.x;
    uint tx = (t / 32u) % (NTN / 8u) * 8u + t % 8u;
    uint ty = (t / 32u) / (NTN / 8u) * 4u + (t % 32u) / 8u;
    for (uint i = t; i < 32u * SA; i += 512u) As[i] = vec4(float(i) * p.a, p.b, 1.0, 2.0);
    for (uint i = t; i < 32u * SB; i += 512u) Bs[i] = vec4(p.b, float(i) * p.a, 3.0, 1.0);
    barrier();
    vec4 acc[8] = vec4[8](vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0));
    for (uint it = 0u; it < p.iters; it++) {
        // Two sets of 16 staged k rows, alternately, so no read is the same as the last
        // iteration's (nothing to hoist out of the loop).
        uint base = (it & 1u) * 16u;
        STEPS4(0u) STEPS4(4u) STEPS4(8u) STEPS4(12u)
    }
    vec4 s = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
    // Stored, so that the compiler keeps the chains.
    y[gl_GlobalInvocationID.x] = s.x + s.y + s.z + s.w;
}
