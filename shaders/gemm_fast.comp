#version 450
// MATMUL with no activation or RELU, fast tier (FMA), register-tiled: see shaders/include/gemm.glsl.
#extension GL_GOOGLE_include_directive : require
#define GEMM_FAST
#include "gemm.glsl"
