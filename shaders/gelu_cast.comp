#version 450
// CAST of f32 elements after UNARY's strict GELU of each, in one pass: the bits of GELU followed
// by CAST (ops::data::gelu_cast; the fast tier's 16-bit MATMUL with GELU rounds its f32 sums
// so). The kernel is shaders/include/cast.glsl's; this file only asks for the GELU.
#extension GL_GOOGLE_include_directive : require
#define GELU_FIRST
#include "cast.glsl"
