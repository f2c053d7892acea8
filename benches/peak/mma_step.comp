#version 450
// The f16 GEMM's inner step as a ceiling: a 128x128 output tile a workgroup of 128 (four
// subgroups of 64x64, 16 accumulators of 16x16 each, as the driver's workgroup-scope kernel
// splits it), each step of 16 along k loading its four A and four B matrices from a chunk of
// 128x64 halves of each operand staged in shared memory (rows padded by 8 halves: no bank
// conflicts), k contiguous as the restaged operands are (a [M, K], b [N, K]); no global memory
// and no barrier in the loop. What it misses of `mma` is the price of feeding the tensor cores
// from shared memory; what the f16 GEMM misses of it is staging's (global loads, shared stores,
// barriers). Compiled by shaders/glslang_cm2.py.
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 128) in;
layout(set = 0, binding = 0) buffer Y { float y[]; };
layout(push_constant) uniform P { float a; float b; uint iters; } p;
#define MA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
const uint PITCH = 64u + 8u; // halves a staged row
shared f16vec2 As[128u * PITCH / 2u];
shared f16vec2 Bs[128u * PITCH / 2u];
void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint i = t; i < 128u * PITCH / 2u; i += 128u) {
        As[i] = f16vec2(float16_t(p.a * float(i & 7u)), float16_t(p.b));
        Bs[i] = f16vec2(float16_t(p.b), float16_t(p.a * float(i & 3u)));
    }
    barrier();
    uint sg = t / 32u;
    uint am = (sg / 2u) * 64u, bn = (sg % 2u) * 64u; // this subgroup's 64x64 of the tile
    MC c[16];
    [[unroll]] for (uint j = 0u; j < 16u; j++) {
        c[j] = MC(0.0);
    }
    for (uint it = 0u; it < p.iters; it++) {
        // Two steps of 16 along k an iteration, from the chunk's first or second half in turn,
        // so no load repeats the last iteration's (nothing to hoist out of the loop).
        uint k0 = (it & 1u) * 32u;
        [[unroll]] for (uint kk = 0u; kk < 2u; kk++) {
            MA a[4];
            MB b[4];
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                coopMatLoad(a[i], As, ((am + 16u * i) * PITCH + k0 + 16u * kk) / 2u, PITCH / 2u,
                            gl_CooperativeMatrixLayoutRowMajor);
                coopMatLoad(b[i], Bs, ((bn + 16u * i) * PITCH + k0 + 16u * kk) / 2u, PITCH / 2u,
                            gl_CooperativeMatrixLayoutColumnMajor);
            }
            [[unroll]] for (uint j = 0u; j < 16u; j++) {
                c[j] = coopMatMulAdd(a[j / 4u], b[j % 4u], c[j]);
            }
        }
    }
    [[unroll]] for (uint j = 1u; j < 16u; j++) {
        c[0] = MC(c[0] + c[j]);
    }
    coopMatStore(c[0], y, (gl_GlobalInvocationID.x / 32u) * 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
}
