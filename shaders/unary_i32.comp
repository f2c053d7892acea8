#version 450
// out[i] = -x[i] (neg != 0) or |x[i]| on i32, wrapping as Rust's wrapping_neg / wrapping_abs
// (so -i32::MIN = |i32::MIN| = i32::MIN): the VM's NEG and ABS on i32. The negation is a uint
// subtraction from 0, which is defined modulo 2^32 (GLSL's abs() on i32::MIN is not).

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { int y[]; };
layout(set = 0, binding = 1) readonly buffer X { int x[]; };
layout(push_constant) uniform P { uint n; uint neg; } p;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        int v = x[i];
        bool flip = p.neg != 0u || v < 0;
        y[i] = flip ? int(0u - uint(v)) : v;
    }
}
