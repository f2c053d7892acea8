// treeops.glsl -- what the strict row kernels share of numerics::reduce's 256-lane tree
// (docs/numerics.md): its two operations and their starting values, and the workgroup's index.
// rowtree.glsl walks the tree with any number of threads a row; strictrow.glsl holds a row in
// registers, a lane a thread.
#ifndef ADEADVM_TREEOPS_GLSL
#define ADEADVM_TREEOPS_GLSL
#include "strict.glsl"

const uint TREE_LANES = 256u;
const uint TREE_ADD = 0u; // lanes start at +0, op = strict_add (numerics::sum)
const uint TREE_MAX = 1u; // lanes start at -inf, op = strict_max (numerics::max_reduce)

float tree_init(uint op) { return op == TREE_MAX ? S_F(0xff800000u) : S_F(0u); }

float tree_op(uint op, float a, float b) { return op == TREE_MAX ? strict_max(a, b) : strict_add(a, b); }

// This workgroup's index in the launch's grid (x fastest, then y, then z).
uint tree_group() {
    return (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}

#endif // ADEADVM_TREEOPS_GLSL
