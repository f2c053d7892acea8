#version 450
// SOFTMAX in the fast tier for rows of up to 32768 elements (1024 threads a row, 32 elements a
// thread, a workgroup a row: devices whose workgroups take 1024 threads): see
// shaders/include/softmax_fast.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define FAST_T 1024
#define FAST_PER 32u
#include "softmax_fast.glsl"
