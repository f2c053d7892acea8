// norm_common.glsl -- the bindings and push constants of LAYERNORM's and RMSNORM's kernels
// (layernorm.comp, layernorm_fast.glsl, layernorm_strict.glsl, rmsnorm.comp,
// rmsnorm_strict.glsl; filled by ops::rows::layernorm_in and rmsnorm_with). RMSNORM has no
// beta: its kernels define NORM_NO_BETA first.
#ifndef ADEADVM_NORM_COMMON_GLSL
#define ADEADVM_NORM_COMMON_GLSL

layout(set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 2) readonly buffer G { float gamma[]; };
#ifndef NORM_NO_BETA
layout(set = 0, binding = 3) readonly buffer B { float beta[]; };
#endif
layout(push_constant) uniform P {
    uint rows;
    uint n;
    uint tbits;  // log2 of the threads per row (the tree kernels')
    uint flags;  // bit 0: gamma bound; bit 1: beta bound
    float nf;    // n as f32 (numerics::reduce::count: rounded on the host)
    float eps;
} p;

#endif // ADEADVM_NORM_COMMON_GLSL
