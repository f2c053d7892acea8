// softmax_common.glsl -- the bindings and push constants of SOFTMAX's kernels (softmax.comp,
// softmax_fast.comp; filled by ops::rows::softmax_in) and the mask's offset for a row.
#ifndef ADEADVM_SOFTMAX_COMMON_GLSL
#define ADEADVM_SOFTMAX_COMMON_GLSL

layout(set = 0, binding = 0) buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 2) readonly buffer M { float mask[]; };
layout(push_constant) uniform P {
    uvec4 dims_lo;   // the leading (row) axes after merging, outermost first (naxes <= 7)
    uvec4 dims_hi;
    uvec4 mstr_lo;   // the mask's element stride along each of those axes (0 = broadcast)
    uvec4 mstr_hi;
    uint rows;
    uint n;          // row length (the last axis)
    uint tbits;      // log2 of the threads per row
    uint flags;      // bit 0: a mask is bound; bits 8..: naxes
    float scale;
    uint mask_last;  // the mask's stride along the last axis (0 or 1)
} p;

uint mask_row_offset(uint row) {
    uint off = 0u;
    uint rem = row;
    for (int ax = int(p.flags >> 8) - 1; ax >= 0; ax--) {
        uint d = ax < 4 ? p.dims_lo[ax] : p.dims_hi[ax - 4];
        uint s = ax < 4 ? p.mstr_lo[ax] : p.mstr_hi[ax - 4];
        off += (rem % d) * s;
        rem /= d;
    }
    return off;
}

#endif // ADEADVM_SOFTMAX_COMMON_GLSL
