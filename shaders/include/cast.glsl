// cast.glsl -- CAST's kernel (shaders/cast.comp; see there for what it does), shared with
// shaders/gelu_cast.comp, which defines GELU_FIRST: each f32 source element is first UNARY's
// strict GELU, then converted (the bits of UNARY GELU followed by CAST, in one pass; the fast
// tier's 16-bit MATMUL with GELU rounds its f32 sums so). Without it the kernel is integer-only.
#ifndef ADEADVM_CAST_GLSL
#define ADEADVM_CAST_GLSL
#include "strict.glsl"
#include "data.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { uint y[]; };
layout(set = 0, binding = 1) readonly buffer X { uint x[]; };
layout(set = 0, binding = 0) writeonly buffer Y2 { uvec2 y2[]; };
layout(set = 0, binding = 0) writeonly buffer Y4 { uvec4 y4[]; };
layout(set = 0, binding = 1) readonly buffer X2 { uvec2 x2[]; };
layout(set = 0, binding = 1) readonly buffer X4 { uvec4 x4[]; };
layout(constant_id = 0) const bool QUADS = false;
layout(push_constant) uniform P {
    uint count; // invocations of work: elements, or words of a 16-bit destination
    uint n;     // elements
    uint src;   // source dtype code
    uint dst;   // destination dtype code
} p;

const uint F32 = 0u, F16 = 1u, BF16 = 2u, I32 = 3u;

// A source element's bits (16-bit: in the low half) widened to f32 bits (float sources), as
// vm::to_f32: f32 as stored, f16 exactly, bf16 shifted up and canonicalized.
uint widened(uint e) {
    if (p.src == F16) return floatBitsToUint(strict_f16_bits_to_f32(e));
    if (p.src == BF16) return floatBitsToUint(strict_bf16_bits_to_f32(e));
    return e;
}

// A source element's bits converted to the destination dtype: a 32-bit word, or 16 bits in the
// low half.
uint convert(uint e) {
    if (p.src == I32) {
        int v = int(e);
        if (p.dst == I32) return uint(v);
        if (p.dst == F16) return strict_i32_to_f16_bits(v);
        if (p.dst == BF16) return strict_i32_to_bf16_bits(v);
        return dm_i32_to_f32_bits(v);
    }
    uint b = widened(e);
#ifdef GELU_FIRST
    b = floatBitsToUint(strict_gelu(uintBitsToFloat(b)));
#endif
    if (p.dst == I32) return uint(dm_f32_bits_to_i32(b));
    float v = strict_canon(uintBitsToFloat(b));
    if (p.dst == F16) return strict_f32_to_f16_bits(v);
    if (p.dst == BF16) return strict_f32_to_bf16_bits(v);
    return floatBitsToUint(v);
}

// Source element i's bits.
uint source(uint i) { return p.src == F16 || p.src == BF16 ? DM_HALF(x, i) : x[i]; }

uint pair(uint lo, uint hi) { return (lo & 0xffffu) | (hi << 16); }

void main() {
    bool packed = p.dst == F16 || p.dst == BF16;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint w = gl_GlobalInvocationID.x; w < p.count; w += stride) {
        if (QUADS) {
            uvec4 e;
            if (p.src == F16 || p.src == BF16) {
                uvec2 h = x2[w];
                e = uvec4(h.x & 0xffffu, h.x >> 16, h.y & 0xffffu, h.y >> 16);
            } else {
                e = x4[w];
            }
            uvec4 r = uvec4(convert(e.x), convert(e.y), convert(e.z), convert(e.w));
            if (packed) {
                y2[w] = uvec2(pair(r.x, r.y), pair(r.z, r.w));
            } else {
                y4[w] = r;
            }
        } else if (packed) {
            uint lo = convert(source(2u * w));
            uint hi = 2u * w + 1u < p.n ? convert(source(2u * w + 1u)) : 0u;
            y[w] = pair(lo, hi);
        } else {
            y[w] = convert(source(w));
        }
    }
}

#endif // ADEADVM_CAST_GLSL
