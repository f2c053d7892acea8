// rmsnorm_strict.glsl -- RMSNORM over rows of n in the strict tier, one pass: each row is read
// once into registers (strictrow.glsl) and gets exactly rmsnorm.comp's bits
// (exec::cpu::reference::rmsnorm): ms = div(sum tree(x * x), n), rs = rsqrt(ms + eps),
// y = x * rs, then * gamma. Compiled once per shape as shaders/rmsnorm_strict_<T>x<PER>.comp;
// ops::rows takes the one for the row's length.
#ifndef ADEADVM_RMSNORM_STRICT_GLSL
#define ADEADVM_RMSNORM_STRICT_GLSL
// Rows of up to 4096 take 4 elements an iteration (strictrow.glsl's SROW_STEP).
#if STRICT_PER <= 16
#define SROW_STEP 4
#endif
#include "strictrow.glsl"
#define NORM_NO_BETA
#include "norm_common.glsl"

void main() {
    STRICT_ROW_BEGIN
    // strict_mul's squares are +0, positive normal, +inf or NaN: a non-negative sum.
    SROW_LANES(squares, TREE_ADD_NONNEG)
#define RMSNORM_SQUARE(i)                                                  \
    if (srow_elem(i) < n) {                                                \
        squares[srow_lane(i)] = tree_op(TREE_ADD_NONNEG, squares[srow_lane(i)], sq4[i]); \
    }
    STRICT_ROW_LOOP(vec4 sq4 = strict_mul_quad(SROW_C4, SROW_C4);, RMSNORM_SQUARE)
    float ms = strict_div(strict_row_sum(TREE_ADD_NONNEG, squares, 0u), p.nf);
    float rs = strict_rsqrt(strict_add(ms, p.eps));
    bool has_gamma = (p.flags & 1u) != 0u;
#define RMSNORM_SCALE4                                                     \
    vec4 o4 = strict_mul_quad(SROW_C4, vec4(rs));                          \
    if (has_gamma) {                                                       \
        o4 = strict_mul_quad(o4, SROW_LOAD4(gamma));                       \
    }
#define RMSNORM_OUT(i)                                                     \
    if (srow_elem(i) < n) {                                                \
        y[base + srow_elem(i)] = o4[i];                                    \
    }
    STRICT_ROW_LOOP(RMSNORM_SCALE4, RMSNORM_OUT)
}

#endif // ADEADVM_RMSNORM_STRICT_GLSL
