#version 450
// REDUCE_SUM / REDUCE_MEAN / REDUCE_MAX with 256 threads an output: see shaders/include/reduce.glsl.
#extension GL_GOOGLE_include_directive : require
#define REDUCE_T 256
#include "reduce.glsl"
