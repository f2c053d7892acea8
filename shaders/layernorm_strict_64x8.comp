#version 450
// LAYERNORM in the strict tier for rows of up to 512 elements (64 threads a row, 8 elements a
// thread, 4 rows a workgroup): see shaders/include/layernorm_strict.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define STRICT_T 64
#define STRICT_PER 8
#include "layernorm_strict.glsl"
