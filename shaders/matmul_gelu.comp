#version 450
// MATMUL with GELU, strict tier: see shaders/include/matmul.glsl.
#extension GL_GOOGLE_include_directive : require
#define MATMUL_GELU
#include "matmul.glsl"
