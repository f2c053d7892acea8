#version 450
// SOFTMAX in the fast tier for rows of up to 16384 elements (64 a thread): see
// shaders/include/softmax_fast.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define FAST_PER 64u
#include "softmax_fast.glsl"
