// matmul_common.glsl -- what every MATMUL kernel shares: the bindings, the push constants
// (filled by ops::rows::matmul_with), the batch-axis decoding and the activation.
// y[batch, i, j] = act(add(acc, bias[broadcast])), acc summed over k ascending from +0; GELU is
// not compiled into them: ops::rows::matmul_with runs UNARY's GELU over their output.
#ifndef ADEADVM_MATMUL_COMMON_GLSL
#define ADEADVM_MATMUL_COMMON_GLSL
#include "strict.glsl"

layout(set = 0, binding = 0) buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer A { float a[]; };
layout(set = 0, binding = 2) readonly buffer B { float b[]; };
layout(set = 0, binding = 3) readonly buffer C { float bias[]; };
layout(push_constant) uniform P {
    uvec4 dims_lo;  // merged batch axes 0..3 (outermost first)
    uvec4 astr_lo;  // a's element stride per batch axis (0 = broadcast)
    uvec4 bstr_lo;  // b's
    uvec4 cstr_lo;  // the bias's
    uvec4 hi0;      // dims[4], dims[5], astr[4], astr[5]
    uvec4 hi1;      // bstr[4], bstr[5], cstr[4], cstr[5]
    uint m;
    uint n;
    uint k;
    uint flags;     // bit 0: ta; bit 1: tb; bits 2-3: act (0 none, 1 relu); bit 4: bias; bits 8..: batch axes
    uint k_begin;   // this dispatch's first k (a multiple of the kernel's span of k)
    uint bias_sm;   // the bias's stride along the output's rows (0 = broadcast)
    uint bias_sn;   // and columns
} p;

uint bdim(uint i) { return i < 4u ? p.dims_lo[i] : p.hi0[i - 4u]; }
uint astr(uint i) { return i < 4u ? p.astr_lo[i] : p.hi0[i - 2u]; }
uint bstr(uint i) { return i < 4u ? p.bstr_lo[i] : p.hi1[i - 4u]; }
uint cstr(uint i) { return i < 4u ? p.cstr_lo[i] : p.hi1[i - 2u]; }

uint matmul_batches() {
    uint batches = 1u;
    for (uint ax = 0u; ax < (p.flags >> 8); ax++) {
        batches *= bdim(ax);
    }
    return batches;
}

// The element offsets of batch `bz` in a, b and the bias (numpy broadcasting over merged axes).
void matmul_batch_offsets(uint bz, out uint aoff, out uint boff, out uint coff) {
    aoff = 0u;
    boff = 0u;
    coff = 0u;
    uint rem = bz;
    for (int ax = int(p.flags >> 8) - 1; ax >= 0; ax--) {
        uint d = bdim(uint(ax));
        uint idx = rem % d;
        rem /= d;
        aoff += idx * astr(uint(ax));
        boff += idx * bstr(uint(ax));
        coff += idx * cstr(uint(ax));
    }
}

// reference::activate for none and relu
float activate(uint act, float v) {
    if (act == 1u) return strict_max(v, 0.0);
    return v;
}

#endif // ADEADVM_MATMUL_COMMON_GLSL
