#version 450
// SELECT: y[i] = cond[ic] != 0 ? a[ia] : b[ib] over 32-bit words, with cond, a and b broadcast
// to the output (numpy rules); the VM unpacks 16-bit operands to one element a word first and
// packs the result after. Pure data movement: the chosen word is copied, no float operation.
// Three operands' strides over eight axes would need more push-constant bytes than devices
// promise (128), so the launcher (ops::data::select) passes the output shape, collapsed as in
// binary.comp, and for each operand a mask of the axes it is broadcast on (bit d: axis d has
// stride 0); its other strides are those of a row-major walk over the axes it keeps, which
// is what every operand of a broadcast has (the launcher checks that).
#extension GL_GOOGLE_include_directive : require
#include "data.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { uint y[]; };
layout(set = 0, binding = 1) readonly buffer C { int cond[]; };
layout(set = 0, binding = 2) readonly buffer A { uint a[]; };
layout(set = 0, binding = 3) readonly buffer B { uint b[]; };
layout(push_constant) uniform P {
    uint n;
    uint rank;
    uint mask_c; // bit d set: cond is broadcast on axis d
    uint mask_a;
    uint mask_b;
    uint pad0;
    uint pad1;
    uint pad2;
    uvec4 shape_lo, shape_hi; // output shape (axes 0..3, 4..7)
} p;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        // The multi-index of i, innermost axis first; each operand's offset and the stride of
        // its next kept axis.
        uint rem = i;
        uvec3 off = uvec3(0u);
        uvec3 st = uvec3(1u);
        for (uint d = p.rank; d > 0u;) {
            d--;
            uint s = dm_at(p.shape_lo, p.shape_hi, d);
            uint c = rem % s;
            rem /= s;
            uvec3 kept = uvec3(((p.mask_c >> d) & 1u) ^ 1u, ((p.mask_a >> d) & 1u) ^ 1u, ((p.mask_b >> d) & 1u) ^ 1u);
            off += kept * c * st;
            st *= kept * (s - 1u) + 1u; // s where kept, 1 where broadcast
        }
        y[i] = cond[off.x] != 0 ? a[off.y] : b[off.z];
    }
}
