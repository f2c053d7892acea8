#version 450
// SOFTMAX over the last axis in the fast tier, one pass: each row is read once into registers
// (fastrow.glsl), its max and sum reduced over a fixed tree, exp the device's own; the same
// bits run to run on one device, within a few ulp of the exact result, not the CPU's bits.
// Same bindings and push constants as softmax.comp (tbits unused).
#extension GL_GOOGLE_include_directive : require
#include "fastrow.glsl"
#include "softmax_common.glsl"

void main() {
    uint row = fast_row();
    if (row >= p.rows) {
        return; // the grid's spare workgroups (uniform: before any barrier)
    }
    uint t = gl_LocalInvocationIndex, n = p.n, base = row * n;
    bool masked = (p.flags & 1u) != 0u;
    uint mbase = masked ? mask_row_offset(row) : 0u;
    float v[FAST_PER];
    float m = uintBitsToFloat(0xff800000u);
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
        uint e = j * 256u + t;
        v[j] = m;
        if (e < n) {
            v[j] = x[base + e] * p.scale + (masked ? mask[mbase + e * p.mask_last] : 0.0);
            m = max(m, v[j]);
        }
    }
    m = fast_reduce(m, true);
    float s = 0.0;
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
        v[j] = j * 256u + t < n ? exp(v[j] - m) : 0.0;
        s += v[j];
    }
    float r = 1.0 / fast_reduce(s, false);
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
        uint e = j * 256u + t;
        if (e < n) {
            y[base + e] = v[j] * r;
        }
    }
}
