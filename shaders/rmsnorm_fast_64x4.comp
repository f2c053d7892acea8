#version 450
// RMSNORM in the fast tier for rows of up to 256 elements (64 threads a row, 4 elements a
// thread, 4 rows a workgroup): see shaders/include/rmsnorm_fast.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define FAST_T 64
#define FAST_PER 4u
#include "rmsnorm_fast.glsl"
