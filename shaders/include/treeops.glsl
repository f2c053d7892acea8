// treeops.glsl -- what the strict row kernels and the REDUCE kernels share of numerics::reduce's
// 256-lane tree (docs/numerics.md): its two operations and their starting values, the REDUCE
// kernels' lane add, and the workgroup's index. rowtree.glsl walks the tree with any number of
// threads a row; strictrow.glsl holds a row in registers, a lane a thread; reduce.glsl,
// reduce_lanes.comp and reduce_lanes_strided.comp reduce tensors' axes.
#ifndef ADEADVM_TREEOPS_GLSL
#define ADEADVM_TREEOPS_GLSL
#include "strict.glsl"

const uint TREE_LANES = 256u;
const uint TREE_ADD = 0u; // lanes start at +0, op = strict_add (numerics::sum)
const uint TREE_MAX = 1u; // lanes start at -inf, op = strict_max (numerics::max_reduce)
// numerics::sum on what strict.glsl's lean forms take, with its bits: sums of flushed values
// (strict_add_flushed; a NaN is canonicalized later, by the strict operation that takes the
// sum) and of non-negative ones (strict_add_nonneg). Lanes start at +0.
const uint TREE_ADD_FLUSHED = 2u;
const uint TREE_ADD_NONNEG = 3u;

float tree_init(uint op) { return op == TREE_MAX ? S_F(0xff800000u) : S_F(0u); }

float tree_op(uint op, float a, float b) {
    if (op == TREE_MAX) return strict_max(a, b);
    if (op == TREE_ADD_FLUSHED) return strict_add_flushed(a, b);
    if (op == TREE_ADD_NONNEG) return strict_add_nonneg(a, b);
    return strict_add(a, b);
}

// The REDUCE kernels' add of a sum lane and a flushed element (or two lane sums): a `precise`
// add whose result is flushed, by the hardware where `hw_ftz` (their specialization constant
// HW_FTZ: ops::rows' probe saw the device flush denormal sums exactly so). A NaN is
// canonicalized at the end (every NaN stays NaN).
float tree_lane_add(float a, float b, bool hw_ftz) {
    precise float s = a + b;
    return hw_ftz ? s : strict_ftz(s);
}

// A sum lane's first add, +0 + e, for a flushed element's bits e, in integer operations: a
// compiler may fold an add of the constant +0 away (lavapipe does, `precise` or not), which
// would keep a -0 that the add turns into +0; nothing else changes (a NaN stays NaN).
uint tree_sum_first(uint e) { return (e & 0x7fffffffu) == 0u ? 0u : e; }

// This workgroup's index in the launch's grid (x fastest, then y, then z).
uint tree_group() {
    return (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}

#endif // ADEADVM_TREEOPS_GLSL
