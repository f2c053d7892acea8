// softmax_fast.glsl -- SOFTMAX over the last axis in the fast tier, one pass: each row is read
// once into registers (fastrow.glsl), its max and sum reduced in fastrow's fixed order, exp the
// device's own; the same bits run to run on one device, within a few ulp of the exact result,
// not the CPU's bits. Same bindings and push constants as softmax.comp (tbits unused).
// Compiled once per FAST_PER (elements a thread: 4, 8, 16, 32) as
// shaders/softmax_fast_<PER>.comp; ops::rows takes the smallest that holds the row (fewer
// registers, more rows in flight).
#ifndef ADEADVM_SOFTMAX_FAST_GLSL
#define ADEADVM_SOFTMAX_FAST_GLSL
#include "fastrow.glsl"
#include "softmax_common.glsl"

void main() {
    FAST_ROW_BEGIN
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
    m = fast_reduce(m, true, 0u);
    float s = 0.0;
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
        v[j] = j * 256u + t < n ? exp(v[j] - m) : 0.0;
        s += v[j];
    }
    float r = 1.0 / fast_reduce(s, false, 1u);
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
        uint e = j * 256u + t;
        if (e < n) {
            y[base + e] = v[j] * r;
        }
    }
}

#endif // ADEADVM_SOFTMAX_FAST_GLSL
