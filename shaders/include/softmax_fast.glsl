// softmax_fast.glsl -- SOFTMAX over the last axis in the fast tier, one pass: each row is read once
// into registers (fastrow.glsl), its max and sum reduced in fastrow's fixed order, exp the device's
// own; the same bits run to run on one device, within a few ulp of the exact result, not the CPU's
// bits. Same bindings and push constants as softmax.comp (tbits unused). Compiled once per shape
// (FAST_T threads a row, FAST_PER elements a thread) as shaders/softmax_fast_[<T>x]<PER>.comp;
// ops::rows::RowOp::one_pass_kernel picks one by the row's length.
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
    // Every load of x is issued before anything waits on one: with the mask's load in the same
    // loop (behind its branch) each element's load waited for the last (H100, rows of 8192:
    // 1605 -> 2941 GB/s).
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
        uint e = fast_elem(j);
        v[j] = e < n ? x[base + e] * p.scale : m;
    }
    if (masked) {
        [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
            uint e = fast_elem(j);
            if (e < n) {
                v[j] += mask[mbase + e * p.mask_last];
            }
        }
    }
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
        m = max(m, v[j]);
    }
    m = fast_reduce(m, true, 0u);
    float s = 0.0;
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
        v[j] = fast_elem(j) < n ? exp(v[j] - m) : 0.0;
        s += v[j];
    }
    float r = 1.0 / fast_reduce(s, false, 1u);
    FAST_STORE(v[j] * r)
}

#endif // ADEADVM_SOFTMAX_FAST_GLSL
