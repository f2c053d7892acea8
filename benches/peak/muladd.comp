#version 450
// The strict tier's ceiling: the same chains as ffma.comp as a `precise` multiply, then an add
// (two instructions where FMA is one; counted as 2 flops, as the strict SGEMM counts them).
// The inner loop carries no [[unroll]]: NVIDIA's driver (580) unrolls a loop so marked and
// keeps NoContraction on its first copy only, fusing the rest into FFMA (seen in its SASS).
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) buffer Y { float y[]; };
layout(push_constant) uniform P { float a; float b; uint iters; } p;
void main() {
    precise float x0 = float(gl_GlobalInvocationID.x), x1 = x0 + 1.0, x2 = x0 + 2.0, x3 = x0 + 3.0;
    precise float x4 = x0 + 4.0, x5 = x0 + 5.0, x6 = x0 + 6.0, x7 = x0 + 7.0;
    for (uint i = 0u; i < p.iters; i++) {
        for (uint j = 0u; j < 16u; j++) {
            x0 = x0 * p.a + p.b; x1 = x1 * p.a + p.b; x2 = x2 * p.a + p.b; x3 = x3 * p.a + p.b;
            x4 = x4 * p.a + p.b; x5 = x5 * p.a + p.b; x6 = x6 * p.a + p.b; x7 = x7 * p.a + p.b;
        }
    }
    y[gl_GlobalInvocationID.x] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
}
