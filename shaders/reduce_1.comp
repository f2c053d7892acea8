#version 450
// REDUCE_SUM / REDUCE_MEAN / REDUCE_MAX with a thread an output, for segments of up to 16 or
// 32 elements (a specialization constant): see shaders/include/reduce.glsl.
#extension GL_GOOGLE_include_directive : require
#define REDUCE_T 1
#include "reduce.glsl"
