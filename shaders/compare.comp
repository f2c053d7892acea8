#version 450
// EQ, LT, LE: y[i] = (a[ia] op b[ib]) as i32 1 or 0, with numpy broadcasting (addressing as in
// binary.comp: the launcher, ops::data::compare, drops size-1 axes and merges contiguous ones).
// Integer operations on the bits only, no float comparison, so a device that flushes
// denormals and one that keeps them (NVIDIA, lavapipe) give the same answers, those of
// exec::cpu::reference::Compare: with `ints` = 0 the words are f32 (16-bit sources widened
// exactly by the VM first), compared by an order key made from the bits -- zeros and
// denormals of either sign are 0, other values their magnitude bits with the sign -- and
// false whenever either is NaN; with `ints` = 1 they are i32, compared signed.
// op: 0 EQ, 1 LT, 2 LE (kernels::compare_op_code).
#extension GL_GOOGLE_include_directive : require
#include "data.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { int y[]; };
layout(set = 0, binding = 1) readonly buffer A { uint a[]; };
layout(set = 0, binding = 2) readonly buffer B { uint b[]; };
layout(push_constant) uniform P {
    uint n;
    uint op;
    uint rank;
    uint ints;
    uvec4 shape_lo, shape_hi;
    uvec4 sa_lo, sa_hi;
    uvec4 sb_lo, sb_hi;
} p;

// The order key of an f32's bits (NaN handled by the caller).
int order_key(uint x) {
    uint m = x & 0x7fffffffu;
    if (m < 0x00800000u) return 0; // a zero or a denormal: a zero
    return (x >> 31) != 0u ? -int(m) : int(m);
}

bool is_nan(uint x) { return (x & 0x7fffffffu) > 0x7f800000u; }

int compare(uint x, uint z) {
    int kx, kz;
    if (p.ints != 0u) {
        kx = int(x);
        kz = int(z);
    } else {
        if (is_nan(x) || is_nan(z)) return 0;
        kx = order_key(x);
        kz = order_key(z);
    }
    bool r = p.op == 0u ? kx == kz : (p.op == 1u ? kx < kz : kx <= kz);
    return r ? 1 : 0;
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (p.rank == 1u) {
        // Equal shapes, or one side a single value: no index arithmetic.
        for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
            y[i] = compare(a[i * p.sa_lo.x], b[i * p.sb_lo.x]);
        }
        return;
    }
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        uvec2 o = dm_offsets2(i, p.rank, p.shape_lo, p.shape_hi, p.sa_lo, p.sa_hi, p.sb_lo, p.sb_hi);
        y[i] = compare(a[o.x], b[o.y]);
    }
}
