#version 450
// MATMUL with no activation or RELU, strict tier, 128x128 output tiles staged 32 of k at a time through one shared buffer, 8x4 outputs a thread: see shaders/include/gemm.glsl.
#extension GL_GOOGLE_include_directive : require
#define GEMM_BM 128
#define GEMM_BN 128
#define GEMM_BK 32
#define GEMM_TM 8
#define GEMM_TN 4
#include "gemm.glsl"
