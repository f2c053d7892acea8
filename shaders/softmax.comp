#version 450
// SOFTMAX over the last axis, strict tier: exec::cpu::reference::softmax, bit for bit.
//   logit[e] = strict_add(strict_mul(x[e], scale), mask[broadcast e])   (or strict_mul(x[e], scale))
//   then numerics::softmax_row:
//   m = max tree(logit); y[e] = exp(logit[e] - m); s = sum tree(y); r = recip(s); y[e] = y[e] * r
// Rows are shared by T = 1 << tbits threads (rowtree.glsl); logits are recomputed in each pass
// (the same operations, so the same bits) instead of being stored.
#extension GL_GOOGLE_include_directive : require
#include "rowtree.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 2) readonly buffer M { float mask[]; };
layout(push_constant) uniform P {
    uvec4 dims_lo;   // the leading (row) axes after merging, outermost first (naxes <= 7)
    uvec4 dims_hi;
    uvec4 mstr_lo;   // the mask's element stride along each of those axes (0 = broadcast)
    uvec4 mstr_hi;
    uint rows;
    uint n;          // row length (the last axis)
    uint tbits;      // log2 of the threads per row
    uint flags;      // bit 0: a mask is bound; bits 8..: naxes
    float scale;
    uint mask_last;  // the mask's stride along the last axis (0 or 1)
} p;

uint g_base;  // first element of the current row
uint g_mbase; // mask offset of the current row's first element
float g_m;    // the row's max logit (pass 1)

float logit(uint e) {
    float v = strict_mul(x[g_base + e], p.scale);
    if ((p.flags & 1u) != 0u) {
        v = strict_add(v, mask[g_mbase + e * p.mask_last]);
    }
    return v;
}

// Pass 0: the logits (for the max). Pass 1: exp(logit - m), stored in y (for the sum).
float tree_value(uint pass, uint e) {
    float v = logit(e);
    if (pass == 0u) {
        return v;
    }
    float ev = strict_exp(strict_sub(v, g_m));
    y[g_base + e] = ev;
    return ev;
}

float g_r;    // recip of the row's sum (the last pass)

// The last pass: y[e] = mul(y[e], r) (this thread wrote y[e] in pass 1).
void row_elem(uint e) { y[g_base + e] = strict_mul(y[g_base + e], g_r); }

uint mask_row_offset(uint row) {
    uint off = 0u;
    uint rem = row;
    for (int ax = int(p.flags >> 8) - 1; ax >= 0; ax--) {
        uint d = ax < 4 ? p.dims_lo[ax] : p.dims_hi[ax - 4];
        uint s = ax < 4 ? p.mstr_lo[ax] : p.mstr_hi[ax - 4];
        off += (rem % d) * s;
        rem /= d;
    }
    return off;
}

void main() {
    if (!tree_group_live(p.rows, p.tbits)) {
        return;
    }
    uint row = tree_row(p.tbits);
    uint n = row < p.rows ? p.n : 0u;
    g_base = row * p.n;
    g_mbase = ((p.flags & 1u) != 0u && n != 0u) ? mask_row_offset(row) : 0u;
    g_m = tree_reduce(TREE_MAX, 0u, n, p.tbits);
    g_r = strict_recip(tree_reduce(TREE_ADD, 1u, n, p.tbits));
    tree_for_each(n, p.tbits);
}
