// rmsnorm_tree.glsl -- the tree kernel of RMSNORM (shaders/rmsnorm.comp, and with TREE_PRELOAD
// shaders/rmsnorm_long.comp for rows longer than the one-pass kernels take; rowtree.glsl says why).
// RMSNORM over rows of n, strict tier: exec::cpu::reference::rmsnorm (numerics::rmsnorm_row):
//   ms = div(sum tree(mul(x, x)), n); rs = rsqrt(add(ms, eps)); y = mul(x, rs); y = mul(y, gamma)
// Rows are shared by T = 1 << tbits threads (rowtree.glsl).
#ifndef ADEADVM_RMSNORM_TREE_GLSL
#define ADEADVM_RMSNORM_TREE_GLSL
#include "rowtree.glsl"

layout(local_size_x = 256) in;
#define NORM_NO_BETA
#include "norm_common.glsl"

uint g_base;

vec2 tree_load(uint pass, uint e) { return vec2(x[g_base + e], 0.0); }

float tree_value(uint pass, uint e, vec2 loaded) {
    float v = loaded.x;
    return strict_mul(v, v);
}

float g_rs;

// y = mul(x, rs), then * gamma.
// x and gamma of element e (TREE_EARLY; 0 for an unbound gamma).
vec4 row_load(uint e) { return vec4(x[g_base + e], (p.flags & 1u) != 0u ? TREE_EARLY(gamma[e]) : 0.0, 0.0, 0.0); }

void row_elem(uint e, vec4 loaded) {
    float v = strict_mul(loaded.x, g_rs);
    if ((p.flags & 1u) != 0u) {
        v = strict_mul(v, TREE_EARLY_OR(loaded.y, gamma[e]));
    }
    y[g_base + e] = v;
}

void main() {
    TREE_ROW_BEGIN
    g_base = row * p.n;
    // The squares are +0, positive normal, +inf or NaN.
    float ms = strict_div(tree_reduce(TREE_ADD_NONNEG, 0u, n, p.tbits), p.nf);
    g_rs = strict_rsqrt(strict_add(ms, p.eps));
    tree_for_each(n, p.tbits);
}

#endif // ADEADVM_RMSNORM_TREE_GLSL
