#version 450
// The fast tier's f32 MATMUL on bf16 cooperative matrices (ops::rows::matmul_split_bf16), its
// last pass, over the sums the bf16 GEMM stored in y (one thread an output):
//  * an output that is inf or NaN is summed again from the f32 operands a and b, one FMA chain
//    k ascending from +0: the bits of the register-tiled fast GEMM (shaders/include/gemm.glsl).
//    Only an inf or NaN operand, or a sum at the edge of f32's range, gets there, and the split
//    can turn such a sum's inf into NaN (inf times a zero piece), so this gives them the IEEE
//    semantics of a real f32 dot product;
//  * then the fast GEMM's finish: a canonical NaN, the bias, the activation (none or relu).
// An output needing neither is not written.
#extension GL_GOOGLE_include_directive : require
#include "matmul_common.glsl"

layout(local_size_x = 256) in;

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
    float v = y[i];
    bool again = isinf(v) || isnan(v);
    if (!again && !has_bias && act == 0u) {
        return;
    }
    uint bz = i / per, r = i % per / N, c = i % N;
    uint aoff, boff, coff;
    matmul_batch_offsets(bz, aoff, boff, coff);
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
