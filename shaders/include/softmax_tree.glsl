// softmax_tree.glsl -- the tree kernel of SOFTMAX (shaders/softmax.comp, and with TREE_PRELOAD
// shaders/softmax_long.comp for rows longer than the one-pass kernels take; rowtree.glsl says why).
// SOFTMAX over the last axis, strict tier: exec::cpu::reference::softmax, bit for bit.
//   logit[e] = strict_add(strict_mul(x[e], scale), mask[broadcast e])   (or strict_mul(x[e], scale))
//   then numerics::softmax_row:
//   m = max tree(logit); y[e] = exp(logit[e] - m); s = sum tree(y); r = recip(s); y[e] = y[e] * r
// Rows are shared by T = 1 << tbits threads (rowtree.glsl); logits are recomputed in each pass
// (the same operations, so the same bits) instead of being stored. Keeping a workgroup's rows in
// 16 KiB of shared memory between passes (x read once) was slower on an H200: rows of 4096
// 765 -> 689 GB/s, and rows of 8192, too long for it, 815 -> 671 (the passes' re-reads hit the
// caches, and the shared memory took from them); layernorm.comp likewise 646 -> 553.
#ifndef ADEADVM_SOFTMAX_TREE_GLSL
#define ADEADVM_SOFTMAX_TREE_GLSL
#define TREE_MAX_CANONICAL
#include "rowtree.glsl"
#include "softmax_common.glsl"

layout(local_size_x = 256) in;

uint g_base;  // first element of the current row
uint g_mbase; // mask offset of the current row's first element
float g_m;    // the row's max logit (pass 1)

// x and the mask (TREE_EARLY; 0 when none is bound) of element e.
vec2 tree_load(uint pass, uint e) {
    return vec2(x[g_base + e], (p.flags & 1u) != 0u ? TREE_EARLY(mask[g_mbase + e * p.mask_last]) : 0.0);
}

// Element e's logit from tree_load's values.
float logit(uint e, vec2 loaded) {
    float v = strict_mul(loaded.x, p.scale);
    if ((p.flags & 1u) != 0u) {
        v = strict_add(v, TREE_EARLY_OR(loaded.y, mask[g_mbase + e * p.mask_last]));
    }
    return v;
}

// Pass 0: the logits (for the max). Pass 1: exp(logit - m), stored in y (for the sum).
float tree_value(uint pass, uint e, vec2 loaded) {
    float v = logit(e, loaded);
    if (pass == 0u) {
        return v;
    }
    // strict_exp canonicalizes its operand: the plain difference gives strict_sub's result.
    float ev = strict_exp(strict_i_psub(v, g_m));
    y[g_base + e] = ev;
    return ev;
}

float g_r;    // recip of the row's sum (the last pass)

// The last pass: y[e] = mul(y[e], r) (this thread wrote y[e] in pass 1).
vec4 row_load(uint e) { return vec4(y[g_base + e], 0.0, 0.0, 0.0); }
void row_elem(uint e, vec4 loaded) { y[g_base + e] = strict_mul(loaded.x, g_r); }

void main() {
    TREE_ROW_BEGIN
    g_base = row * p.n;
    g_mbase = ((p.flags & 1u) != 0u && n != 0u) ? mask_row_offset(row) : 0u;
    // The logits are canonical (strict_mul's and strict_add's results).
    g_m = tree_max_canonical(0u, n, p.tbits);
    // exp's results are +0, positive normal, +inf or NaN.
    g_r = strict_recip(tree_reduce(TREE_ADD_NONNEG, 1u, n, p.tbits));
    tree_for_each(n, p.tbits);
}

#endif // ADEADVM_SOFTMAX_TREE_GLSL
