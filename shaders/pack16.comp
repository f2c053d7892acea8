#version 450
// The inverse of unpack16: word w of the output = low 16 bits of src[2w] | low 16 bits of
// src[2w+1] << 16, for n 16-bit elements. One invocation writes one whole word (so no two
// invocations share a word); for odd n the upper half of the last word is 0.
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { uint y[]; };
layout(set = 0, binding = 1) readonly buffer X { uint x[]; };
layout(push_constant) uniform P { uint n; } p;

void main() {
    uint words = (p.n >> 1) + (p.n & 1u);
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint w = gl_GlobalInvocationID.x; w < words; w += stride) {
        uint lo = x[2u * w] & 0xffffu;
        uint hi = 2u * w + 1u < p.n ? x[2u * w + 1u] & 0xffffu : 0u;
        y[w] = lo | (hi << 16);
    }
}
