#version 450
// out[i] = op(a[ia], b[ib]) with numpy broadcasting, strict tier: i runs over the output in
// row-major order and ia, ib are its offsets in a and b (stride 0 on a broadcast axis). The
// launcher (ops::data::binary) drops size-1 axes and merges axes that every operand walks
// contiguously, so equal shapes arrive as rank 1 and the index arithmetic stays small; those
// (both strides 1) take four elements at a time through vec4 views of the bindings (every
// binding starts 256-byte aligned), the same op on each element.
// The op is specialization constant 0 (one pipeline per op, as in unary.comp); ANY_OP takes
// it from the push constants.
#extension GL_GOOGLE_include_directive : require
#include "elementwise.glsl"
#include "data.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer A { float a[]; };
layout(set = 0, binding = 2) readonly buffer B { float b[]; };
layout(set = 0, binding = 0) writeonly buffer Y4 { vec4 y4[]; };
layout(set = 0, binding = 1) readonly buffer A4 { vec4 a4[]; };
layout(set = 0, binding = 2) readonly buffer B4 { vec4 b4[]; };
layout(push_constant) uniform P {
    uint n;
    uint op;
    uint rank;
    uint pad;
    uvec4 shape_lo, shape_hi; // output shape (axes 0..3, 4..7)
    uvec4 sa_lo, sa_hi;       // a's strides over the output shape
    uvec4 sb_lo, sb_hi;       // b's strides
} p;
const uint ANY_OP = 0xffffffffu;
layout(constant_id = 0) const uint OP = ANY_OP;

void main() {
    uint op = OP == ANY_OP ? p.op : OP;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (p.rank == 1u && p.sa_lo.x == 1u && p.sb_lo.x == 1u) {
        uint n4 = p.n / 4u;
        for (uint i = gl_GlobalInvocationID.x; i < n4; i += stride) {
            // Written out, as in unary.comp.
            vec4 va = a4[i], vb = b4[i];
            y4[i] = vec4(ew_binary(op, va.x, vb.x), ew_binary(op, va.y, vb.y), ew_binary(op, va.z, vb.z),
                         ew_binary(op, va.w, vb.w));
        }
        for (uint i = n4 * 4u + gl_GlobalInvocationID.x; i < p.n; i += stride) {
            y[i] = ew_binary(op, a[i], b[i]);
        }
        return;
    }
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        uvec2 o = dm_offsets2(i, p.rank, p.shape_lo, p.shape_hi, p.sa_lo, p.sa_hi, p.sb_lo, p.sb_hi);
        y[i] = ew_binary(op, a[o.x], b[o.y]);
    }
}
