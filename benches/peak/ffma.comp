#version 450
// The FP32 fused multiply-add ceiling (the fast-tier SGEMM's): every invocation runs 8
// independent chains x = fma(x, a, b), 128 fmas (256 flops) an iteration of its loop, with
// nothing else in the loop. Run by ffma.s; benches/peak.py turns its GPU time into TFLOP/s.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) buffer Y { float y[]; };
layout(push_constant) uniform P { float a; float b; uint iters; } p;
void main() {
    float x0 = float(gl_GlobalInvocationID.x), x1 = x0 + 1.0, x2 = x0 + 2.0, x3 = x0 + 3.0;
    float x4 = x0 + 4.0, x5 = x0 + 5.0, x6 = x0 + 6.0, x7 = x0 + 7.0;
    for (uint i = 0u; i < p.iters; i++) {
        [[unroll]] for (uint j = 0u; j < 16u; j++) {
            x0 = fma(x0, p.a, p.b); x1 = fma(x1, p.a, p.b); x2 = fma(x2, p.a, p.b); x3 = fma(x3, p.a, p.b);
            x4 = fma(x4, p.a, p.b); x5 = fma(x5, p.a, p.b); x6 = fma(x6, p.a, p.b); x7 = fma(x7, p.a, p.b);
        }
    }
    // Stored, so that the compiler keeps the chains.
    y[gl_GlobalInvocationID.x] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
}
