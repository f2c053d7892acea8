#version 450
// out[i] = op(x[i]) in the fast tier with the device's own math (exp, log, sqrt, inversesqrt,
// tanh): the same bits run to run on one device, within a few ulp of the exact result, not the
// CPU's bits. Four elements at a time through vec4 views (every binding starts 256-byte
// aligned), then the tail. The op is specialization constant 0, as in unary.comp; ops without
// a vendor form here (neg, abs, relu, gelu) stay with unary.comp.
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 0) writeonly buffer Y4 { vec4 y4[]; };
layout(set = 0, binding = 1) readonly buffer X4 { vec4 x4[]; };
layout(push_constant) uniform P { uint n; uint op; float scalar; } p;
layout(constant_id = 0) const uint OP = 4u;

// The codes of kernels::unary_op_code.
vec4 op4(vec4 v) {
    switch (OP) {
    case 2u: return sqrt(v);
    case 3u: return inversesqrt(v);
    case 4u: return exp(v);
    case 5u: return log(v);
    case 7u: return 1.0 / (1.0 + exp(-v));
    case 8u: return tanh(v);
    }
    return vec4(uintBitsToFloat(0x7fc00000u));
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint n4 = p.n / 4u;
    for (uint i = gl_GlobalInvocationID.x; i < n4; i += stride) {
        y4[i] = op4(x4[i]);
    }
    for (uint i = n4 * 4u + gl_GlobalInvocationID.x; i < p.n; i += stride) {
        y[i] = op4(vec4(x[i])).x;
    }
}
