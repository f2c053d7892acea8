#version 450
// REDUCE_SUM / REDUCE_MEAN over a long strided axis with few outputs, strict tier: the first of
// two passes (ops::rows reduce), reduce_lanes.comp's for x viewed as [outer, len, inner] with
// inner > 1. It computes each output's 256 lane sums of numerics::reduce's tree (lane j: +0,
// then the output's elements j, j+256, ... added in order, a chain the strict tier may not
// regroup) into [outputs, 256]; the second pass (reduce.glsl with its flag 4) folds them with
// the tree's levels and divides for a mean.
//
// A thread walks one lane of one output; a workgroup holds COLS neighbouring outputs (columns;
// 32, or 8 or 16 where there are fewer: a specialization constant) by LANES = 256 / COLS lanes,
// so a warp's loads of a step are whole 32-byte sectors of neighbouring words (with 32
// columns, one row's 128-byte line), and 256 / LANES workgroups take a column group's 256
// lanes. Where one pass gave an output 32 threads of 8 lanes (reduce_32, 8 outputs a
// workgroup), 64 outputs filled 8 workgroups; here they fill 64, each thread with U loads in
// flight.
//
// Arithmetic as reduce.glsl's sums: elements flushed, a `precise` add whose result is flushed
// (by the hardware where HW_FTZ is set), NaN canonicalized by the second pass; the lane's first
// add in integer operations (treeops.glsl's tree_sum_first).
#extension GL_GOOGLE_include_directive : require
#include "treeops.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const bool HW_FTZ = false;
layout(constant_id = 1) const uint COLS = 32u; // outputs a workgroup: 8, 16 or 32
layout(set = 0, binding = 0) writeonly buffer Y { float y[]; }; // [outer * inner, 256] lane sums
layout(set = 0, binding = 1) readonly buffer X { float x[]; };  // [outer, len, inner]
layout(push_constant) uniform P {
    uint outer;
    uint len;
    uint inner;
    uint col_groups; // ceil(inner / COLS)
} p;

const uint LANES = 256u / COLS;    // lanes a workgroup
const uint GROUPS = 256u / LANES;  // workgroups a column group
const uint U = 32u;                // steps an iteration, their loads issued together

float add(float a, float b) { return tree_lane_add(a, b, HW_FTZ); }

void main() {
    // Workgroup (o * col_groups + cg) * GROUPS + lg: lanes lg * LANES .., columns cg * COLS ..
    uint group = tree_group();
    uint lg = group % GROUPS, oc = group / GROUPS;
    uint cg = oc % p.col_groups, o = oc / p.col_groups;
    uint li = gl_LocalInvocationIndex;
    uint i = cg * COLS + li % COLS;
    uint lane = lg * LANES + li / COLS;
    if (o >= p.outer || i >= p.inner) {
        return; // no barrier in this kernel
    }
    uint base = o * p.len * p.inner + i; // element e at base + e * inner
    uint steps = lane < p.len ? (p.len - lane + 255u) / 256u : 0u;
    uint at = base + lane * p.inner, step = 256u * p.inner; // step k at at + k * step
    float acc = 0.0;
    uint k = 0u;
    if (steps > 0u) {
        acc = uintBitsToFloat(tree_sum_first(floatBitsToUint(strict_ftz(x[at]))));
        k = 1u;
    }
    float v[U];
#define SL_LOAD(u) v[u] = strict_ftz(x[at + (k + uint(u)) * step]);
#define SL_ADD(u) acc = add(acc, v[u]);
#define SL_EACH4(X, u) X(u) X(u + 1) X(u + 2) X(u + 3)
#define SL_EACH16(X, u) SL_EACH4(X, u) SL_EACH4(X, u + 4) SL_EACH4(X, u + 8) SL_EACH4(X, u + 12)
#define SL_EACH(X) SL_EACH16(X, 0) SL_EACH16(X, 16)
    for (; k + U <= steps; k += U) {
        SL_EACH(SL_LOAD)
        SL_EACH(SL_ADD)
    }
    for (; k < steps; k++) {
        acc = add(acc, strict_ftz(x[at + k * step]));
    }
    y[(o * p.inner + i) * 256u + lane] = acc;
}
