#version 450
// RMSNORM over rows of n, strict tier: exec::cpu::reference::rmsnorm (numerics::rmsnorm_row):
//   ms = div(sum tree(mul(x, x)), n); rs = rsqrt(add(ms, eps)); y = mul(x, rs); y = mul(y, gamma)
// Rows are shared by T = 1 << tbits threads (rowtree.glsl).
#extension GL_GOOGLE_include_directive : require
#include "rowtree.glsl"

layout(local_size_x = 256) in;
#define NORM_NO_BETA
#include "norm_common.glsl"

uint g_base;

float tree_value(uint pass, uint e) {
    float v = x[g_base + e];
    return strict_mul(v, v);
}

float g_rs;

// y = mul(x, rs), then * gamma.
void row_elem(uint e) {
    float v = strict_mul(x[g_base + e], g_rs);
    if ((p.flags & 1u) != 0u) {
        v = strict_mul(v, gamma[e]);
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
    // The squares are +0, positive normal, +inf or NaN.
    float ms = strict_div(tree_reduce(TREE_ADD_NONNEG, 0u, n, p.tbits), p.nf);
    g_rs = strict_rsqrt(strict_add(ms, p.eps));
    tree_for_each(n, p.tbits);
}
