// layernorm_strict.glsl -- LAYERNORM over rows of n in the strict tier, one pass: each row is
// read once into registers (strictrow.glsl) and gets exactly layernorm.comp's bits
// (exec::cpu::reference::layernorm): mu = div(sum tree(x), n), var = div(sum tree(d * d), n)
// with d = x - mu, rs = rsqrt(var + eps), y = (x - mu) * rs, then * gamma, + beta. Compiled
// once per shape as shaders/layernorm_strict_<T>x<PER>.comp; ops::rows takes the one for the
// row's length.
#ifndef ADEADVM_LAYERNORM_STRICT_GLSL
#define ADEADVM_LAYERNORM_STRICT_GLSL
#include "strictrow.glsl"
#include "norm_common.glsl"

void main() {
    STRICT_ROW_BEGIN
    SROW_LANES(sums, TREE_ADD)
#define LAYERNORM_SUM(i)                                                   \
    if (srow_elem(i) < n) {                                                \
        sums[srow_lane(i)] = tree_op(TREE_ADD, sums[srow_lane(i)], c[i]);  \
    }
    STRICT_ROW_LOOP(LAYERNORM_SUM)
    float mu = strict_div(strict_row_reduce(TREE_ADD, sums, 0u), p.nf);
    SROW_LANES(squares, TREE_ADD)
#define LAYERNORM_SQUARE(i)                                                \
    if (srow_elem(i) < n) {                                                \
        float d = strict_sub(c[i], mu);                                    \
        squares[srow_lane(i)] = tree_op(TREE_ADD, squares[srow_lane(i)], strict_mul(d, d)); \
    }
    STRICT_ROW_LOOP(LAYERNORM_SQUARE)
    float var = strict_div(strict_row_reduce(TREE_ADD, squares, 1u), p.nf);
    float rs = strict_rsqrt(strict_add(var, p.eps));
    bool has_gamma = (p.flags & 1u) != 0u, has_beta = (p.flags & 2u) != 0u;
#define LAYERNORM_OUT(i)                                                   \
    if (srow_elem(i) < n) {                                                \
        float o = strict_mul(strict_sub(c[i], mu), rs);                    \
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
