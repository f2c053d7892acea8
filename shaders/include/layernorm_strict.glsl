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
// Rows of up to 1024 (64 threads a row) take 4 elements an iteration (strictrow.glsl's
// SROW_STEP): with 8 the 64x16 kernel spilled, and over 4096 rows of 1024 ran at 1252 against
// 1414 GB/s on an H100 (16384 rows: 1787 against 1711).
#if STRICT_T == 64
#define SROW_STEP 4
#endif
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
    STRICT_ROW_LOOP(SROW_NO_QUAD, LAYERNORM_SUM)
    float mu = strict_div(strict_row_sum(TREE_ADD_FLUSHED, sums, 0u), p.nf);
    SROW_LANES(squares, TREE_ADD_NONNEG)
#define LAYERNORM_DEV4                                                     \
    vec4 d4 = vec4(strict_sub_flushed(c[0], mu), strict_sub_flushed(c[1], mu), \
                   strict_sub_flushed(c[2], mu), strict_sub_flushed(c[3], mu));
#define LAYERNORM_SQUARE(i)                                                \
    if (srow_elem(i) < n) {                                                \
        squares[srow_lane(i)] = tree_op(TREE_ADD_NONNEG, squares[srow_lane(i)], sq4[i]); \
    }
    // The loop keeps d in place of x for the output pass.
    STRICT_ROW_LOOP(LAYERNORM_DEV4 vec4 sq4 = strict_mul_quad(d4, d4); SROW_SET_C4(d4), LAYERNORM_SQUARE)
    float var = strict_div(strict_row_sum(TREE_ADD_NONNEG, squares, 1u), p.nf);
    float rs = strict_rsqrt(strict_add(var, p.eps));
    bool has_gamma = (p.flags & 1u) != 0u, has_beta = (p.flags & 2u) != 0u;
#define LAYERNORM_SCALE4                                                   \
    vec4 o4 = strict_mul_quad(SROW_C4, vec4(rs));                          \
    if (has_gamma) {                                                       \
        o4 = strict_mul_quad(o4, SROW_LOAD4(gamma));                       \
    }
#define LAYERNORM_OUT(i)                                                   \
    if (srow_elem(i) < n) {                                                \
        float o = o4[i];                                                   \
        if (has_beta) {                                                    \
            o = strict_add(o, beta[srow_elem(i)]);                         \
        }                                                                  \
        y[base + srow_elem(i)] = o;                                        \
    }
    STRICT_ROW_LOOP(LAYERNORM_SCALE4, LAYERNORM_OUT)
}

#endif // ADEADVM_LAYERNORM_STRICT_GLSL
