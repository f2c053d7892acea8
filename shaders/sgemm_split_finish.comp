#version 450
// The fast tier's f32 MATMUL on bf16 cooperative matrices (ops::rows::matmul_split_bf16), its
// last pass, over the sums the bf16 GEMM stored in y (one thread an output):
//  * an output of a row of a or column of b that the first pass flagged (an inf, a NaN or a
//    normal float below 2^-103 in it: shaders/sgemm_split_pieces.comp), or that came out inf or
//    NaN (a sum at the edge of f32's range), is summed again from the f32 operands a and b, one
//    FMA chain k ascending from +0: the bits of the register-tiled fast GEMM
//    (shaders/include/gemm.glsl), with the IEEE semantics of an f32 dot product;
//  * then the fast GEMM's finish: a canonical NaN, the bias, the activation (none or relu).
// An output needing neither is not written.
#extension GL_GOOGLE_include_directive : require
#include "matmul_common.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 4) readonly buffer FA { uint flag_a[]; }; // a's rows, [batch][m]
layout(set = 0, binding = 5) readonly buffer FB { uint flag_b[]; }; // b's, [batch][n]

void main() {
    uint M = p.m, N = p.n, K = p.k;
    uint t = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    uint per = M * N;
    uint i = t * 256u + gl_LocalInvocationID.x;
    if (i >= matmul_batches() * per) {
        return;
    }
    uint act = (p.flags >> 2) & 3u;
    bool has_bias = (p.flags & 16u) != 0u;
    uint bz = i / per, r = i % per / N, c = i % N;
    uint aoff, boff, coff;
    matmul_batch_offsets(bz, aoff, boff, coff);
    float v = y[i];
    // An operand's batch offset is a whole number of its [m, k] or [n, k] matrices.
    bool again = isinf(v) || isnan(v) || flag_a[aoff / K + r] != 0u || flag_b[boff / K + c] != 0u;
    if (!again && !has_bias && act == 0u) {
        return;
    }
    if (again) {
        bool ta = (p.flags & 1u) != 0u, tb = (p.flags & 2u) != 0u;
        float acc = 0.0;
        for (uint kk = 0u; kk < K; kk++) {
            float av = ta ? a[aoff + kk * M + r] : a[aoff + r * K + kk];
            float bv = tb ? b[boff + c * K + kk] : b[boff + kk * N + c];
            acc = fma(av, bv, acc);
        }
        v = acc;
    }
    v = strict_canon(v);
    if (has_bias) {
        v = strict_add(v, bias[coff + r * p.bias_sm + c * p.bias_sn]);
    }
    y[i] = activate(act, v);
}
