#version 450
// LAYERNORM in the strict tier for rows of up to 16384 elements (256 threads a row, 64 elements a
// thread): see shaders/include/layernorm_strict.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define STRICT_T 256
#define STRICT_PER 64
#include "layernorm_strict.glsl"
