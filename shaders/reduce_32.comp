#version 450
// REDUCE_SUM / REDUCE_MEAN / REDUCE_MAX with 32 threads an output: see shaders/include/reduce.glsl.
#extension GL_GOOGLE_include_directive : require
#define REDUCE_T 32
#include "reduce.glsl"
