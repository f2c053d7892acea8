#version 450
// CAST between f32, f16, bf16 and i32, exactly as the VM's CPU path (vm::Vm::cast with
// float_op's widening and rounding); also what widens 16-bit float operands to f32 and rounds
// results back around the f32 kernels. Dtype codes: 0 f32, 1 f16, 2 bf16, 3 i32 (isa::DType).
//  * i32 -> i32: copy.
//  * i32 -> float: the nearest f32, ties to even (Rust `v as f32`, integer ops only), then
//    rounded to f16 / bf16 (two roundings, as the VM does).
//  * float -> i32: widen to f32, then truncate toward zero, saturate, NaN -> 0 (Rust `as`).
//  * float -> float: widen to f32, canonicalize (denormals flush, NaN canonical), round to
//    nearest even into the destination format (strict_f32_to_f16_bits / _bf16_bits).
// 16-bit tensors are packed two per word, element 2k in the low half. A 16-bit destination is
// written one whole word per invocation (elements 2w and 2w+1; for odd n the upper half of the
// last word is 0), so no two invocations share a word; `count` is the number of words then,
// else the number of elements. Under QUADS (a specialization constant; the launcher sets it
// where n is a multiple of 4) an invocation converts elements 4w .. 4w + 3, read as one uvec4
// (32-bit source) or uvec2 (16-bit) and written likewise, and `count` is n / 4: one load and
// one store an invocation, where the word-a-time path read a 16-bit destination's two f32
// sources with two loads (H100, f32 -> f16 over 16M elements: 1724 -> 2038 GB/s).
// Under GELU_FIRST (a specialization constant; f32 source only) each element is first UNARY's
// strict GELU, then converted: the bits of UNARY GELU followed by this cast, in one pass (the
// fast tier's 16-bit MATMUL with GELU, whose f32 sums then round once).
#extension GL_GOOGLE_include_directive : require
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
layout(constant_id = 1) const bool GELU_FIRST = false;
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
        uint f = dm_i32_to_f32_bits(v);
        if (p.dst == F16) return strict_f32_to_f16_bits(uintBitsToFloat(f));
        if (p.dst == BF16) return strict_f32_to_bf16_bits(uintBitsToFloat(f));
        return f;
    }
    uint b = widened(e);
    if (GELU_FIRST) b = floatBitsToUint(strict_gelu(uintBitsToFloat(b)));
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
