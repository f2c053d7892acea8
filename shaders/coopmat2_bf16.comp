#version 450
// MATMUL of bf16 operands on workgroup-scope cooperative matrices, fast tier: see
// shaders/include/coopmat2.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_bfloat16 : require
#define CM2_T bfloat16_t
#include "coopmat2.glsl"
