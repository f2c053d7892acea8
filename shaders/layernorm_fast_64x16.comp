#version 450
// LAYERNORM in the fast tier for rows of up to 1024 elements (64 threads a row, 16 elements a
// thread, 4 rows a workgroup): see shaders/include/layernorm_fast.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define FAST_T 64
#define FAST_PER 16u
#include "layernorm_fast.glsl"
