#version 450
// MATMUL with no activation or RELU, strict tier: see shaders/include/matmul.glsl.
#extension GL_GOOGLE_include_directive : require
#include "matmul.glsl"
