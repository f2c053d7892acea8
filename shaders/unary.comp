#version 450
// out[i] = op(x[i]), strict tier. One dispatch covers n elements with a grid-stride loop.
// The op is specialization constant 0 (the launcher builds one pipeline per op, so each keeps
// only its own function: with all ten behind a switch, EXP ran at a sixth of the memory
// bandwidth on an H100); ANY_OP (the default) takes it from the push constants instead.
// Four elements a thread through vec4 views of the bindings (every binding starts 256-byte
// aligned), then the tail one by one.
#extension GL_GOOGLE_include_directive : require
#include "elementwise.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 0) writeonly buffer Y4 { vec4 y4[]; };
layout(set = 0, binding = 1) readonly buffer X4 { vec4 x4[]; };
layout(push_constant) uniform P { uint n; uint op; float scalar; } p;
const uint ANY_OP = 0xffffffffu;
layout(constant_id = 0) const uint OP = ANY_OP;

void main() {
    uint op = OP == ANY_OP ? p.op : OP;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint n4 = p.n / 4u;
    for (uint i = gl_GlobalInvocationID.x; i < n4; i += stride) {
        // The four written out, not looped: NVIDIA's compiler kept a loop over e rolled, with a
        // run-time index into the vectors (about 20 instructions an element beside strict exp's
        // 33; strict EXP ran at 2.7 TB/s on an H200, compute-bound), and a strict shader may
        // not ask it to unroll (see gemm.glsl).
        vec4 v = x4[i];
        y4[i] = vec4(ew_unary(op, v.x), ew_unary(op, v.y), ew_unary(op, v.z), ew_unary(op, v.w));
    }
    for (uint i = n4 * 4u + gl_GlobalInvocationID.x; i < p.n; i += stride) {
        y[i] = ew_unary(op, x[i]);
    }
}
