#version 450
// REDUCE_SUM / REDUCE_MEAN / REDUCE_MAX over one axis, strict tier: exec::cpu::reference::reduce.
// x is viewed as [outer, len, inner]; output r = o * inner + i reduces the strided row
// x[(o * len + e) * inner + i], e = 0..len ascending, with the tree (numerics::sum / max_reduce);
// mean is then div(sum, len) (numerics::mean). Empty rows: sum +0, max -inf, mean 0/0 = NaN.
// Rows are shared by T = 1 << tbits threads (rowtree.glsl); T = 1 (a thread per output) keeps
// the reads of neighbouring threads contiguous when inner > 1.
#extension GL_GOOGLE_include_directive : require
#include "rowtree.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(push_constant) uniform P {
    uint outer;
    uint len;
    uint inner;
    uint tbits;  // log2 of the threads per row
    uint op;     // 0 sum, 1 mean, 2 max
    float nf;    // len as f32 (rounded on the host)
} p;

uint g_base;

vec2 tree_load(uint pass, uint e) { return vec2(x[g_base + e * p.inner], 0.0); }
float tree_value(uint pass, uint e, vec2 loaded) { return loaded.x; }

void main() {
    uint rows = p.outer * p.inner;
    if (!tree_group_live(rows, p.tbits)) {
        return;
    }
    uint t = gl_LocalInvocationIndex & ((1u << p.tbits) - 1u);
    uint row = tree_row(p.tbits);
    bool valid = row < rows;
    uint n = valid ? p.len : 0u;
    uint o = valid ? row / p.inner : 0u;
    uint i = valid ? row % p.inner : 0u;
    g_base = o * p.len * p.inner + i;
    float r = tree_reduce(p.op == 2u ? TREE_MAX : TREE_ADD, 0u, n, p.tbits);
    if (p.op == 1u) {
        r = strict_div(r, p.nf);
    }
    if (valid && t == 0u) {
        y[row] = r;
    }
}
