#version 450
// out[i] = 16-bit element i of the packed src, zero-extended to a 32-bit word (element 2k is
// the low half of word k). Raw bits: with pack16 it lets 16-bit tensors use the 32-bit move
// kernels (strided_copy, gather) unchanged.
#extension GL_GOOGLE_include_directive : require
#include "data.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { uint y[]; };
layout(set = 0, binding = 1) readonly buffer X { uint x[]; };
layout(push_constant) uniform P { uint n; } p;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        y[i] = DM_HALF(x, i);
    }
}
