#version 450
// out[i] = bits for every 32-bit word: FILL (the VM passes canon(value) bits for f32, the i32
// bits for i32; a 16-bit fill is bits = h | h << 16 over the packed words).
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P { uint n; uint bits; } p;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        y[i] = p.bits;
    }
}
