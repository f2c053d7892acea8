#version 450
// MATMUL with no activation or RELU, strict tier, 64x32 output tiles staged 16 of k at a time, 4x4 outputs a thread: see shaders/include/gemm.glsl.
#extension GL_GOOGLE_include_directive : require
#define GEMM_BM 64
#define GEMM_BN 32
#define GEMM_BK 16
#define GEMM_TM 4
#define GEMM_TN 4
#include "gemm.glsl"
