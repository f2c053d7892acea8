#version 450
// A copy of `outer` runs of `len` 16-bit elements between packed 16-bit tensors (element 2k is
// the low half of word k): run o of the destination starts at element o*db + dofs, run o of
// the source at o*sb + sofs. PUT (a window of the destination, the rest kept) and SLICE at a
// register offset (a window of the source) on f16/bf16 without widening the whole tensor.
// Each invocation owns one destination word: item t is word k of run o's words (at most
// len/2 + 1 of them), and it writes that word only when the word's lowest element inside the
// window belongs to run o, so a word two runs share has one writer. A word half inside the
// window keeps its other half (read, modified and written by its one owner).
#extension GL_GOOGLE_include_directive : require
#include "data.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) buffer Y { uint y[]; };
layout(set = 0, binding = 1) readonly buffer X { uint x[]; };
layout(push_constant) uniform P {
    uint items; // outer * wpr
    uint wpr;   // candidate words a run: len / 2 + 1
    uint outer;
    uint len;
    uint db;
    uint dofs;
    uint sb;
    uint sofs;
} p;

// Whether destination element e lies in a run; then its run and position in it.
bool in_window(uint e, out uint o, out uint j) {
    o = 0u;
    j = 0u;
    if (e < p.dofs) return false;
    uint q = e - p.dofs;
    o = q / p.db;
    j = q - o * p.db;
    return o < p.outer && j < p.len;
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint t = gl_GlobalInvocationID.x; t < p.items; t += stride) {
        uint o = t / p.wpr;
        uint w = ((o * p.db + p.dofs) >> 1) + (t - o * p.wpr);
        uint o0, j0, o1, j1;
        bool in0 = in_window(2u * w, o0, j0);
        bool in1 = in_window(2u * w + 1u, o1, j1);
        if (!(in0 || in1) || (in0 ? o0 : o1) != o) continue;
        uint old = in0 && in1 ? 0u : y[w];
        uint lo = in0 ? DM_HALF(x, o0 * p.sb + p.sofs + j0) : old & 0xffffu;
        uint hi = in1 ? DM_HALF(x, o1 * p.sb + p.sofs + j1) : old >> 16;
        y[w] = lo | (hi << 16);
    }
}
