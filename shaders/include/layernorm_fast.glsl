// layernorm_fast.glsl -- LAYERNORM over rows of n in the fast tier, one pass: each row is read once
// into registers (fastrow.glsl), its mean and variance reduced in fastrow's fixed order,
// inversesqrt the device's own; the same bits run to run on one device, not the CPU's bits. Same
// bindings and push constants as layernorm.comp (tbits unused). Compiled once per shape (FAST_T
// threads a row, FAST_PER elements a thread) as shaders/layernorm_fast_[<T>x]<PER>.comp;
// ops::rows::RowOp::one_pass_kernel picks one by the row's length.
#ifndef ADEADVM_LAYERNORM_FAST_GLSL
#define ADEADVM_LAYERNORM_FAST_GLSL
#include "fastrow.glsl"
#include "norm_common.glsl"

void main() {
    FAST_ROW_BEGIN
    float v[FAST_PER];
    float s = 0.0;
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
        uint e = fast_elem(j);
        v[j] = e < n ? x[base + e] : 0.0;
        s += v[j];
    }
    float mu = fast_reduce(s, false, 0u) / p.nf;
    float q = 0.0;
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
        float d = fast_elem(j) < n ? v[j] - mu : 0.0;
        q += d * d;
    }
    float rs = inversesqrt(fast_reduce(q, false, 1u) / p.nf + p.eps);
    bool has_gamma = (p.flags & 1u) != 0u, has_beta = (p.flags & 2u) != 0u;
    if (!has_gamma && !has_beta) {
        FAST_STORE((v[j] - mu) * rs)
        return;
    }
    // Every load of gamma and beta before the first store (FAST_STORE_ROW).
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
        uint e = min(fast_elem(j), FAST_LAST);
        v[j] = (v[j] - mu) * rs;
        if (has_gamma) {
            v[j] *= gamma[e];
        }
        if (has_beta) {
            v[j] += beta[e];
        }
    }
    FAST_STORE_ROW
}

#endif // ADEADVM_LAYERNORM_FAST_GLSL
