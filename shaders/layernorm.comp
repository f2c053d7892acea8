#version 450
// LAYERNORM over rows of n, strict tier: exec::cpu::reference::layernorm (numerics::layernorm_row):
//   mu = div(sum tree(x), n); var = div(sum tree(mul(d, d)), n) with d = sub(x, mu)
//   rs = rsqrt(add(var, eps)); y = mul(sub(x, mu), rs); y = mul(y, gamma); y = add(y, beta)
// Rows are shared by T = 1 << tbits threads (rowtree.glsl); d is recomputed, not stored.
#extension GL_GOOGLE_include_directive : require
#include "rowtree.glsl"

layout(local_size_x = 256) in;
#include "norm_common.glsl"

uint g_base;
float g_mu;

// Pass 0: x, flushed (for the mean, a sum of flushed values). Pass 1: mul(d, d), d = sub(x, mu)
// (for the variance, a sum of non-negative values).
float tree_value(uint pass, uint e) {
    float v = strict_ftz(x[g_base + e]);
    if (pass == 0u) {
        return v;
    }
    float d = strict_sub_flushed(v, g_mu);
    return strict_mul(d, d);
}

float g_rs;

// y = mul(sub(x, mu), rs), then * gamma, + beta.
void row_elem(uint e) {
    float v = strict_mul(strict_sub_flushed(strict_ftz(x[g_base + e]), g_mu), g_rs);
    if ((p.flags & 1u) != 0u) {
        v = strict_mul(v, gamma[e]);
    }
    if ((p.flags & 2u) != 0u) {
        v = strict_add(v, beta[e]);
    }
    y[g_base + e] = v;
}

void main() {
    if (!tree_group_live(p.rows, p.tbits)) {
        return;
    }
    uint row = tree_row(p.tbits);
    uint n = row < p.rows ? p.n : 0u;
    g_base = row * p.n;
    g_mu = strict_div(tree_reduce(TREE_ADD_FLUSHED, 0u, n, p.tbits), p.nf);
    float var = strict_div(tree_reduce(TREE_ADD_NONNEG, 1u, n, p.tbits), p.nf);
    g_rs = strict_rsqrt(strict_add(var, p.eps));
    tree_for_each(n, p.tbits);
}
