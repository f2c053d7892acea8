#version 450
// out[i] = op(a[ia], b[ib]) on i32 with numpy broadcasting (addressing as in binary.comp), the
// semantics of exec::cpu::reference::binary_i32: add/sub/mul wrap (done on uint, whose
// arithmetic is modulo 2^32, the same bits as two's-complement wrapping), max/min are signed,
// and DIV, which the ISA does not define on i32 (`Binary::apply_i32` gives None), writes 0 as
// the reference does. Op codes as in elementwise.glsl `ew_binary`.
#extension GL_GOOGLE_include_directive : require
#include "data.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { int y[]; };
layout(set = 0, binding = 1) readonly buffer A { int a[]; };
layout(set = 0, binding = 2) readonly buffer B { int b[]; };
layout(push_constant) uniform P {
    uint n;
    uint op;
    uint rank;
    uint pad;
    uvec4 shape_lo, shape_hi;
    uvec4 sa_lo, sa_hi;
    uvec4 sb_lo, sb_hi;
} p;

int op_i32(uint op, int x, int z) {
    switch (op) {
    case 0u: return int(uint(x) + uint(z));
    case 1u: return int(uint(x) - uint(z));
    case 2u: return int(uint(x) * uint(z));
    case 4u: return x > z ? x : z;
    case 5u: return x < z ? x : z;
    }
    return 0; // DIV (3u): undefined on i32; the reference writes 0
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        uvec2 o = dm_offsets2(i, p.rank, p.shape_lo, p.shape_hi, p.sa_lo, p.sa_hi, p.sb_lo, p.sb_hi);
        y[i] = op_i32(p.op, a[o.x], b[o.y]);
    }
}
