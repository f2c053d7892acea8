// rmsnorm_common.glsl -- the bindings and push constants of RMSNORM's kernels (rmsnorm.comp,
// rmsnorm_strict.glsl; filled by ops::rows::rmsnorm_with).
#ifndef ADEADVM_RMSNORM_COMMON_GLSL
#define ADEADVM_RMSNORM_COMMON_GLSL

layout(set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 2) readonly buffer G { float gamma[]; };
layout(push_constant) uniform P {
    uint rows;
    uint n;
    uint tbits;  // log2 of the threads per row (rmsnorm.comp's)
    uint flags;  // bit 0: gamma bound
    float nf;    // n as f32 (rounded on the host)
    float eps;
} p;

#endif // ADEADVM_RMSNORM_COMMON_GLSL
