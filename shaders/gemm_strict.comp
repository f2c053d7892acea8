#version 450
// MATMUL with no activation or RELU, strict tier, register-tiled: see shaders/include/gemm.glsl.
#extension GL_GOOGLE_include_directive : require
#include "gemm.glsl"
