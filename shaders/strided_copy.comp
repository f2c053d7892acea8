#version 450
// dst[dst_off + sum c*ds] = src[src_off + sum c*ss] for every multi-index c over `shape`
// (rank <= 8; rank 0 is one element), 32-bit words copied as raw bits. COPY/RESHAPE, SLICE,
// CONCAT (two launches into one dst) and TRANSPOSE are all this kernel with different strides;
// the launcher merges axes both sides walk contiguously, so a plain copy is rank 1. Under VEC4
// (a specialization constant) every unit is four words: the launcher sets it where the last
// axis is contiguous on both sides and every offset and stride is whole vec4s, and passes the
// shape, strides and offsets counted in vec4s. H100, GB/s before and after: COPY of 2^24
// words 836 (vkCmdCopyBuffer) -> 2773; TRANSPOSE [32,512,12,64] by [0,2,1,3] 821 -> 2568;
// SLICE of half the columns of 4096x4096 1353 -> 2504; CONCAT of two 4096x2048 1370 -> 2532.
#extension GL_GOOGLE_include_directive : require
#include "data.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { uint y[]; };
layout(set = 0, binding = 1) readonly buffer X { uint x[]; };
layout(set = 0, binding = 0) writeonly buffer Y4 { uvec4 y4[]; };
layout(set = 0, binding = 1) readonly buffer X4 { uvec4 x4[]; };
layout(constant_id = 0) const bool VEC4 = false;
layout(push_constant) uniform P {
    uint n;
    uint rank;
    uint dst_off;
    uint src_off;
    uvec4 shape_lo, shape_hi;
    uvec4 ds_lo, ds_hi; // dst strides
    uvec4 ss_lo, ss_hi; // src strides
} p;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        uvec2 o = dm_offsets2(i, p.rank, p.shape_lo, p.shape_hi, p.ds_lo, p.ds_hi, p.ss_lo, p.ss_hi);
        if (VEC4) {
            y4[p.dst_off + o.x] = x4[p.src_off + o.y];
        } else {
            y[p.dst_off + o.x] = x[p.src_off + o.y];
        }
    }
}
