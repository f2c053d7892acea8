#version 450
// RMSNORM, strict tier, the tree kernel for rows of up to ops::rows::ONE_PASS_ROW_MAX elements
// (where no one-pass kernel takes them): see shaders/include/rmsnorm_tree.glsl.
#extension GL_GOOGLE_include_directive : require
#include "rmsnorm_tree.glsl"
