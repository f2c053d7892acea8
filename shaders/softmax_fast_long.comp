#version 450
// SOFTMAX in the fast tier for rows longer than the one-pass kernels hold (ops::rows:
// FAST_ONE_PASS_ROW_MAX): a workgroup of 256 threads a row, which reads the row twice and writes
// it once, where the tree kernel reads it three times. The first pass keeps each thread's
// running max m and sum s of exp(logit - m), eight elements (e = e0 + j * 256 + t) an
// iteration: the chunk's max first, then s rescaled once by exp(m_old - m) and the chunk's
// terms added; the row's max and sum come from fastrow's fixed-order reductions (the sums
// rescaled to the row's max first), so the same bits run to run on one device. The second pass
// writes exp(logit - max) * (1 / sum), as softmax_fast.glsl does. Special values give what the
// two-pass formula gives: a row of -inf, or holding +inf or NaN, is NaN throughout (a term of
// a -inf logit is 0 whatever the running max, and a rescale between equal maxima 1, so a
// leading run of -inf leaves no NaN behind). Same bindings and push constants as softmax.comp
// (tbits unused).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
// FAST_PER: the elements a thread loads an iteration.
#define FAST_PER 8u
#include "fastrow.glsl"
#include "softmax_common.glsl"

#define NEG_INF uintBitsToFloat(0xff800000u)

// exp(a - m) where a <= m, 1 where a == m (both -inf: no NaN).
float rescale(float a, float m) { return a == m ? 1.0 : exp(a - m); }

void main() {
    FAST_ROW_BEGIN
    bool masked = (p.flags & 1u) != 0u;
    uint mbase = masked ? mask_row_offset(row) : 0u;
    // An iteration's logits, every load issued before any is used (softmax_fast.glsl).
#define SOFTMAX_LONG_LOAD(v, e0)                                                             \
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {                                        \
        uint e = (e0) + fast_elem(j);                                                        \
        v[j] = e < n ? x[base + e] * p.scale : NEG_INF;                                      \
    }                                                                                        \
    if (masked) {                                                                            \
        [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {                                    \
            uint e = (e0) + fast_elem(j);                                                    \
            if (e < n) {                                                                     \
                v[j] += mask[mbase + e * p.mask_last];                                       \
            }                                                                                \
        }                                                                                    \
    }
    const uint STEP = FAST_PER * FAST_T;
    float m = NEG_INF, s = 0.0;
    for (uint e0 = 0u; e0 < n; e0 += STEP) {
        float v[FAST_PER];
        SOFTMAX_LONG_LOAD(v, e0)
        float mc = m;
        [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
            mc = max(mc, v[j]);
        }
        float terms = 0.0;
        [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
            terms += v[j] == NEG_INF ? 0.0 : exp(v[j] - mc);
        }
        s = s * rescale(m, mc) + terms;
        m = mc;
    }
    float row_max = fast_reduce(m, true, 0u);
    float r = 1.0 / fast_reduce(s * rescale(m, row_max), false, 1u);
    for (uint e0 = 0u; e0 < n; e0 += STEP) {
        float v[FAST_PER];
        SOFTMAX_LONG_LOAD(v, e0)
        [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
            uint e = e0 + fast_elem(j);
            if (e < n) {
                y[base + e] = exp(v[j] - row_max) * r;
            }
        }
    }
}
