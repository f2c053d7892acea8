// layernorm_tree.glsl -- the tree kernel of LAYERNORM (shaders/layernorm.comp, and with TREE_PRELOAD
// shaders/layernorm_long.comp for rows longer than the one-pass kernels take; rowtree.glsl says why).
// LAYERNORM over rows of n, strict tier: exec::cpu::reference::layernorm (numerics::layernorm_row):
//   mu = div(sum tree(x), n); var = div(sum tree(mul(d, d)), n) with d = sub(x, mu)
//   rs = rsqrt(add(var, eps)); y = mul(sub(x, mu), rs); y = mul(y, gamma); y = add(y, beta)
// Rows are shared by T = 1 << tbits threads (rowtree.glsl); d is recomputed, not stored.
#ifndef ADEADVM_LAYERNORM_TREE_GLSL
#define ADEADVM_LAYERNORM_TREE_GLSL
#include "rowtree.glsl"

layout(local_size_x = 256) in;
#include "norm_common.glsl"

uint g_base;
float g_mu;

// Pass 0: x, flushed (for the mean, a sum of flushed values). Pass 1: mul(d, d), d = sub(x, mu)
// (for the variance, a sum of non-negative values).
vec2 tree_load(uint pass, uint e) { return vec2(x[g_base + e], 0.0); }

float tree_value(uint pass, uint e, vec2 loaded) {
    float v = strict_ftz(loaded.x);
    if (pass == 0u) {
        return v;
    }
    float d = strict_sub_flushed(v, g_mu);
    return strict_mul(d, d);
}

float g_rs;

// y = mul(sub(x, mu), rs), then * gamma, + beta.
// x, gamma and beta of element e (TREE_EARLY; 0 for an unbound gamma or beta).
vec4 row_load(uint e) {
    return vec4(x[g_base + e], (p.flags & 1u) != 0u ? TREE_EARLY(gamma[e]) : 0.0,
                (p.flags & 2u) != 0u ? TREE_EARLY(beta[e]) : 0.0, 0.0);
}

void row_elem(uint e, vec4 loaded) {
    float v = strict_mul(strict_sub_flushed(strict_ftz(loaded.x), g_mu), g_rs);
    if ((p.flags & 1u) != 0u) {
        v = strict_mul(v, TREE_EARLY_OR(loaded.y, gamma[e]));
    }
    if ((p.flags & 2u) != 0u) {
        v = strict_add(v, TREE_EARLY_OR(loaded.z, beta[e]));
    }
    y[g_base + e] = v;
}

void main() {
    TREE_ROW_BEGIN
    g_base = row * p.n;
    g_mu = strict_div(tree_reduce(TREE_ADD_FLUSHED, 0u, n, p.tbits), p.nf);
    float var = strict_div(tree_reduce(TREE_ADD_NONNEG, 1u, n, p.tbits), p.nf);
    g_rs = strict_rsqrt(strict_add(var, p.eps));
    tree_for_each(n, p.tbits);
}

#endif // ADEADVM_LAYERNORM_TREE_GLSL
