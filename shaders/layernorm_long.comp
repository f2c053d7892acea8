#version 450
// LAYERNORM, strict tier, the tree kernel for rows longer than the one-pass kernels take, each
// iteration's elements loaded before any is used (TREE_PRELOAD, shaders/include/rowtree.glsl):
// see shaders/include/layernorm_tree.glsl.
#extension GL_GOOGLE_include_directive : require
#define TREE_PRELOAD
#include "layernorm_tree.glsl"
