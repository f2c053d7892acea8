#version 450
// out[i] = op(a[ia], b[ib]) with numpy broadcasting, strict tier: i runs over the output in
// row-major order and ia, ib are its offsets in a and b (stride 0 on a broadcast axis). The
// launcher (ops::data::binary) drops size-1 axes and merges axes that every operand walks
// contiguously, so equal shapes arrive as rank 1 and the index arithmetic stays small.
#extension GL_GOOGLE_include_directive : require
#include "elementwise.glsl"
#include "data.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer A { float a[]; };
layout(set = 0, binding = 2) readonly buffer B { float b[]; };
layout(push_constant) uniform P {
    uint n;
    uint op;
    uint rank;
    uint pad;
    uvec4 shape_lo, shape_hi; // output shape (axes 0..3, 4..7)
    uvec4 sa_lo, sa_hi;       // a's strides over the output shape
    uvec4 sb_lo, sb_hi;       // b's strides
} p;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        uvec2 o = dm_offsets2(i, p.rank, p.shape_lo, p.shape_hi, p.sa_lo, p.sa_hi, p.sb_lo, p.sb_hi);
        y[i] = ew_binary(p.op, a[o.x], b[o.y]);
    }
}
