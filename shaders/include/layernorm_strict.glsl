// layernorm_strict.glsl -- LAYERNORM over rows of n in the strict tier, one pass: each row is
// read once into registers (strictrow.glsl) and gets exactly layernorm.comp's bits
// (exec::cpu::reference::layernorm): mu = div(sum tree(x), n), var = div(sum tree(d * d), n)
// with d = x - mu, rs = rsqrt(var + eps), y = (x - mu) * rs, then * gamma, + beta; on
// strict.glsl's lean forms where they give the same bits (flushed elements, squares summed
// as non-negative values). Compiled
// once per shape as shaders/layernorm_strict_<T>x<PER>.comp; ops::rows takes the one for the
// row's length.
#ifndef ADEADVM_LAYERNORM_STRICT_GLSL
#define ADEADVM_LAYERNORM_STRICT_GLSL
#include "strictrow.glsl"
#include "norm_common.glsl"

void main() {
    STRICT_ROW_BEGIN
    // The elements are flushed once, here (kept by the loop), for strict_*_flushed.
    SROW_LANES(sums, TREE_ADD_FLUSHED)
#define LAYERNORM_SUM(i)                                                   \
    if (srow_elem(i) < n) {                                                \
        c[i] = strict_ftz(c[i]);                                           \
        sums[srow_lane(i)] = tree_op(TREE_ADD_FLUSHED, sums[srow_lane(i)], c[i]); \
    }
    STRICT_ROW_LOOP(LAYERNORM_SUM)
    float mu = strict_div(strict_row_sum(TREE_ADD_FLUSHED, sums, 0u), p.nf);
    SROW_LANES(squares, TREE_ADD_NONNEG)
#define LAYERNORM_SQUARE(i)                                                \
    if (srow_elem(i) < n) {                                                \
        float d = strict_sub_flushed(c[i], mu);                            \
        squares[srow_lane(i)] = tree_op(TREE_ADD_NONNEG, squares[srow_lane(i)], strict_mul(d, d)); \
    }
    STRICT_ROW_LOOP(LAYERNORM_SQUARE)
    float var = strict_div(strict_row_sum(TREE_ADD_NONNEG, squares, 1u), p.nf);
    float rs = strict_rsqrt(strict_add(var, p.eps));
    bool has_gamma = (p.flags & 1u) != 0u, has_beta = (p.flags & 2u) != 0u;
#define LAYERNORM_OUT(i)                                                   \
    if (srow_elem(i) < n) {                                                \
        float o = strict_mul(strict_sub_flushed(c[i], mu), rs);                    \
        if (has_gamma) {                                                   \
            o = strict_mul(o, gamma[srow_elem(i)]);                        \
        }                                                                  \
        if (has_beta) {                                                    \
            o = strict_add(o, beta[srow_elem(i)]);                         \
        }                                                                  \
        y[base + srow_elem(i)] = o;                                        \
    }
    STRICT_ROW_LOOP(LAYERNORM_OUT)
}

#endif // ADEADVM_LAYERNORM_STRICT_GLSL
