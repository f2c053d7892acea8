// rmsnorm_fast.glsl -- RMSNORM over rows of n in the fast tier, one pass: each row is read once
// into registers (fastrow.glsl), its mean square reduced in fastrow's fixed order, inversesqrt the
// device's own; the same bits run to run on one device, not the CPU's bits. Same bindings and push
// constants as rmsnorm.comp (tbits unused). Compiled once per shape (FAST_T threads a row, FAST_PER
// elements a thread) as shaders/rmsnorm_fast_[<T>x]<PER>.comp; ops::rows::RowOp::one_pass_kernel
// picks one by the row's length.
#ifndef ADEADVM_RMSNORM_FAST_GLSL
#define ADEADVM_RMSNORM_FAST_GLSL
#include "fastrow.glsl"
#define NORM_NO_BETA
#include "norm_common.glsl"

void main() {
    FAST_ROW_BEGIN
    float v[FAST_PER];
    float q = 0.0;
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
        uint e = fast_elem(j);
        v[j] = e < n ? x[base + e] : 0.0;
        q += v[j] * v[j];
    }
    float rs = inversesqrt(fast_reduce(q, false, 0u) / p.nf + p.eps);
    if ((p.flags & 1u) == 0u) {
        FAST_STORE(v[j] * rs)
        return;
    }
    // Every load of gamma before the first store (FAST_STORE_ROW).
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {
        v[j] = v[j] * rs * gamma[min(fast_elem(j), FAST_LAST)];
    }
    FAST_STORE_ROW
}

#endif // ADEADVM_RMSNORM_FAST_GLSL
