#version 450
// A hand-staged f16 GEMM on subgroup-scope cooperative matrices (VK_KHR_cooperative_matrix,
// 16x16x16, f32 sums), the measurement benches/f16_staged.py runs in place of the driver's
// workgroup-scope kernel (shaders/include/coopmat2.glsl) through ADEADVM_SPIRV_DIR. It asks
// where the f16 GEMM's time goes: the same tile as the driver's (128x128, four subgroups of
// 64x64, 16 accumulators each), each chunk of k loaded from global memory into registers,
// stored into padded shared memory (rows of BK + 8 halves: no bank conflicts for the matrix
// loads) and multiplied out from there, with the next chunk's loads issued before this one's
// multiplies. Its sums are the driver's kernel's bits (the runner checks).
//
// It takes only what the runner gives it: whole tiles (M and N multiples of the tile, K of
// BK), a stored [M, K] and b [N, K] (the layout ops::rows restages to), f16 out, no bias or
// activation. The runner writes the configuration in place of the CONFIG line:
//   THREADS  invocations a workgroup (32 per 64x64 of the tile)
//   TBM TBN  the workgroup's tile (ADEADVM_COOPMAT2_TILE gives the host the same grid)
//   BK       k a chunk
//   NST      1: one shared stage (two barriers a chunk), 2: two (one barrier a chunk)
//   CHUNK(c) the chunk of k the loads read; `0u` keeps them in the first (L1-resident): a
//            timing of staging without L2 traffic, with wrong results
//   NOSTAGE  no global loads or shared stores in the loop (barriers kept): a timing of the
//            loop alone, with wrong results
// Compiled by shaders/glslang_cm2.py.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "matmul_common.glsl"
//CONFIG
#ifndef CHUNK
#define CHUNK(c) (c)
#endif
layout(local_size_x = THREADS) in;
// coopmat2.glsl's specialization constants, which the host sets (unused here).
layout(constant_id = 0) const uint SHAPE = 0u;
layout(constant_id = 1) const uint CM_BM = 128u;
layout(constant_id = 2) const uint CM_BN = 128u;
layout(constant_id = 3) const uint CM_BK = 64u;
layout(constant_id = 4) const uint CM_UNROLL = 4u;
layout(set = 0, binding = 0) buffer Y16 { float16_t y16[]; };
layout(set = 0, binding = 1) readonly buffer A4 { uvec4 a4[]; };
layout(set = 0, binding = 2) readonly buffer B4 { uvec4 b4[]; };
const uint WGN = TBN / 64u;              // subgroups along n
const uint Q = BK / 8u;                  // 16-byte quads a staged row
const uint PQ = Q + 1u;                  // with one of padding
const uint SA = TBM * PQ, SB = TBN * PQ; // quads a stage of each operand
const uint PA = TBM * Q / THREADS, PB = TBN * Q / THREADS;
shared uvec4 As[NST * SA];
shared uvec4 Bs[NST * SB];
#define MA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define MH coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
void main() {
    uint M = p.m, N = p.n, K = p.k;
    uint tiles_m = M / TBM, tiles_n = N / TBN;
    uint tile = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (tile >= matmul_batches() * tiles_m * tiles_n) {
        return;
    }
    uint bz = tile / (tiles_n * tiles_m);
    uint row0 = ((tile / tiles_n) % tiles_m) * TBM;
    uint col0 = (tile % tiles_n) * TBN;
    uint aoff, boff, coff;
    matmul_batch_offsets(bz, aoff, boff, coff);
    uint t = gl_LocalInvocationID.x;
    uint KQ = K / 8u;
    uint abase = aoff / 8u + row0 * KQ, bbase = boff / 8u + col0 * KQ;
    uvec4 ra[PA], rb[PB];
#define LOADS(c)                                                          \
    [[unroll]] for (uint i = 0u; i < PA; i++) {                           \
        uint idx = t + THREADS * i;                                       \
        ra[i] = a4[abase + (idx / Q) * KQ + CHUNK(c) * Q + idx % Q];      \
    }                                                                     \
    [[unroll]] for (uint i = 0u; i < PB; i++) {                           \
        uint idx = t + THREADS * i;                                       \
        rb[i] = b4[bbase + (idx / Q) * KQ + CHUNK(c) * Q + idx % Q];      \
    }
#define STORES(s)                                                         \
    [[unroll]] for (uint i = 0u; i < PA; i++) {                           \
        uint idx = t + THREADS * i;                                       \
        As[(s) * SA + (idx / Q) * PQ + idx % Q] = ra[i];                  \
    }                                                                     \
    [[unroll]] for (uint i = 0u; i < PB; i++) {                           \
        uint idx = t + THREADS * i;                                       \
        Bs[(s) * SB + (idx / Q) * PQ + idx % Q] = rb[i];                  \
    }
    uint sg = t / 32u;
    uint am = (sg / WGN) * 64u, bn = (sg % WGN) * 64u; // this subgroup's 64x64
    MC c[16];
    [[unroll]] for (uint j = 0u; j < 16u; j++) {
        c[j] = MC(0.0);
    }
#define MULTIPLY(s)                                                                               \
    [[unroll]] for (uint kk = 0u; kk < BK / 16u; kk++) {                                          \
        MA a[4];                                                                                  \
        MB b[4];                                                                                  \
        [[unroll]] for (uint i = 0u; i < 4u; i++) {                                               \
            coopMatLoad(a[i], As, (s) * SA + (am + 16u * i) * PQ + 2u * kk, PQ,                   \
                        gl_CooperativeMatrixLayoutRowMajor);                                      \
            coopMatLoad(b[i], Bs, (s) * SB + (bn + 16u * i) * PQ + 2u * kk, PQ,                   \
                        gl_CooperativeMatrixLayoutColumnMajor);                                   \
        }                                                                                         \
        [[unroll]] for (uint j = 0u; j < 16u; j++) {                                              \
            c[j] = coopMatMulAdd(a[j / 4u], b[j % 4u], c[j]);                                     \
        }                                                                                         \
    }
#ifdef NOSTAGE
#define STAGING(more) false
#else
#define STAGING(more) (more)
#endif
    uint chunks = K / BK;
    LOADS(0u)
    STORES(0u)
    barrier();
    for (uint ch = 0u; ch < chunks; ch++) {
        bool more = ch + 1u < chunks;
        if (STAGING(more)) {
            LOADS(ch + 1u)
        }
#if NST == 2
        MULTIPLY(ch & 1u)
        if (STAGING(more)) {
            STORES((ch & 1u) ^ 1u)
        }
        barrier();
#else
        MULTIPLY(0u)
        barrier();
        if (STAGING(more)) {
            STORES(0u)
        }
        barrier();
#endif
    }
    uint yoff = bz * M * N;
    [[unroll]] for (uint j = 0u; j < 16u; j++) {
        MH h = MH(c[j]);
        coopMatStore(h, y16, yoff + (row0 + am + 16u * (j / 4u)) * N + col0 + bn + 16u * (j % 4u), N,
                     gl_CooperativeMatrixLayoutRowMajor);
    }
}
