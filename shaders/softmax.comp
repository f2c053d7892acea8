#version 450
// SOFTMAX, strict tier, the tree kernel for rows of up to ops::rows::ONE_PASS_ROW_MAX elements
// (where no one-pass kernel takes them): see shaders/include/softmax_tree.glsl.
#extension GL_GOOGLE_include_directive : require
#include "softmax_tree.glsl"
