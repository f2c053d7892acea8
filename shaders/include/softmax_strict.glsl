// softmax_strict.glsl -- SOFTMAX over the last axis in the strict tier, one pass: each row is
// read once into registers (strictrow.glsl) and gets exactly softmax.comp's bits
// (exec::cpu::reference::softmax): the logits strict_mul(x, scale) (+ the mask), their max by
// the tree, exp(logit - max), their sum by the tree, then each times the sum's recip; on
// strict.glsl's lean forms where they give the same bits (the max on keys, the sum of
// non-negative values). Same
// bindings and push constants as softmax.comp (tbits unused). Compiled once per shape as
// shaders/softmax_strict_<T>x<PER>.comp; ops::rows takes the one for the row's length.
#ifndef ADEADVM_SOFTMAX_STRICT_GLSL
#define ADEADVM_SOFTMAX_STRICT_GLSL
// Rows of 8192 and 16384 take 16 elements an iteration (strictrow.glsl's SROW_STEP).
#if STRICT_PER >= 32
#define SROW_STEP 16
#endif
#include "strictrow.glsl"
#include "softmax_common.glsl"

void main() {
    STRICT_ROW_BEGIN
    bool masked = (p.flags & 1u) != 0u;
    uint mbase = masked && live ? mask_row_offset(row) : 0u;
    SROW_KEYS(keys)
#define SOFTMAX_LOGIT(i)                                                   \
    if (srow_elem(i) < n) {                                                \
        if (masked) {                                                      \
            c[i] = strict_add(c[i], mask[mbase + srow_elem(i) * p.mask_last]); \
        }                                                                  \
        keys[srow_lane(i)] = max(keys[srow_lane(i)], strict_max_key(c[i])); \
    }
    STRICT_ROW_LOOP(SROW_SET_C4(strict_mul_quad(SROW_C4, vec4(p.scale))), SOFTMAX_LOGIT)
    float m = strict_row_max(keys, 0u);
    SROW_LANES(sums, TREE_ADD_NONNEG)
    // strict_exp canonicalizes its operand, so the plain difference gives strict_sub's
    // result; exp's results are +0, positive normal, +inf or NaN (a non-negative sum).
    // strict_exp_selects: the loop's four elements interleave.
#define SOFTMAX_EXP(i)                                                     \
    if (srow_elem(i) < n) {                                                \
        c[i] = strict_exp_selects(strict_i_psub(c[i], m));                 \
        sums[srow_lane(i)] = tree_op(TREE_ADD_NONNEG, sums[srow_lane(i)], c[i]); \
    }
    STRICT_ROW_LOOP(SROW_NO_QUAD, SOFTMAX_EXP)
    float r = strict_recip(strict_row_sum(TREE_ADD_NONNEG, sums, 1u));
#define SOFTMAX_OUT(i)                                                     \
    if (srow_elem(i) < n) {                                                \
        y[base + srow_elem(i)] = c[i];                                     \
    }
    STRICT_ROW_LOOP(SROW_SET_C4(strict_mul_quad(SROW_C4, vec4(r))), SOFTMAX_OUT)
}

#endif // ADEADVM_SOFTMAX_STRICT_GLSL
