#version 450
// The tensor-core ceiling a Vulkan shader reaches (the f16 GEMM's): subgroup-scope cooperative
// matrices (VK_KHR_cooperative_matrix, 16x16x16 f16 x f16 + f32), 16 independent accumulators
// a subgroup fed from 4 A and 4 B matrices held in registers, 64 multiply-adds (524288 flops)
// an iteration of the loop. Compiled by shaders/glslang_cm2.py (the glslc CI installs predates
// GL_KHR_cooperative_matrix).
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
void main() {
    MA a[4];
    MB b[4];
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        a[j] = MA(float16_t(p.a + float(j)));
        b[j] = MB(float16_t(p.b + float(j)));
    }
    MC c[16];
    [[unroll]] for (uint j = 0u; j < 16u; j++) {
        c[j] = MC(0.0);
    }
    for (uint i = 0u; i < p.iters; i++) {
        [[unroll]] for (uint r = 0u; r < 4u; r++) {
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
