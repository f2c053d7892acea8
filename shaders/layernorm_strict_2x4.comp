#version 450
// LAYERNORM in the strict tier for rows of up to 8 elements (2 threads a row, 4 elements a
// thread, 128 rows a workgroup): see shaders/include/layernorm_strict.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define STRICT_T 2
#define STRICT_PER 4
#include "layernorm_strict.glsl"
