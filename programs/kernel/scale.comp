// scale.comp — y[i] = x[i] * scale for i < n: the user kernel behind programs/kernel.s.
// Bindings: set 0, binding 0 = x (read), binding 1 = y (written).
// Push constants: float scale, uint n. Workgroup: 64 invocations.
// Rebuild: glslc --target-env=vulkan1.1 -O programs/kernel/scale.comp -o programs/kernel/scale.spv
#version 450
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0) readonly buffer In { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Out { float y[]; };
layout(push_constant) uniform Push {
    float scale;
    uint n;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) {
        y[i] = x[i] * pc.scale;
    }
}
