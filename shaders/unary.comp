#version 450
// out[i] = op(x[i]), strict tier. One dispatch covers n elements with a grid-stride loop.
#extension GL_GOOGLE_include_directive : require
#include "elementwise.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(push_constant) uniform P { uint n; uint op; float scalar; } p;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        y[i] = ew_unary(p.op, x[i]);
    }
}
