// matmul_q.glsl -- what the MATMUL kernels over a block-quantized b (shaders/matmul_q_vec.comp,
// shaders/matmul_q_tile.comp) share: b's bytes, ggml's dequantization, the strict
// multiply-accumulate and the finish. b is [N, K] with `tb` (K a multiple of 32), stored as
// ggml's blocks (isa::BlockFormat): row j of b is K / 32 blocks, the rows one after another.
//
// Values (numerics::quant, repeated here): a block's scale d (and Q4_1's minimum m) are f16,
// widened exactly (integer steps, as strict_f16_bits_to_f32 but keeping a NaN's payload as the
// half crate does: a NaN scale never reaches a MATMUL result uncanonicalized, see finish). Q8_0:
// d * q, exact in f32 (an 11-bit by 8-bit product). Q4_1: d * q + m, d * q exact (11 by 4 bits),
// the sum rounded once: the same bits fused or not. Every value is zero or of magnitude in
// [2^-24, 2^21) (d, m and so the exact sum are multiples of 2^-24), or inf/NaN from an inf/NaN
// scale: never denormal, never tiny enough for a product to need strict_mul's steps on its
// account.
//
// Arithmetic (as shaders/include/gemm.glsl's strict kernels, and so numerics' chain): a is
// flushed when staged; a chunk in which some staged a is nonzero and below 2^-63 takes the full
// strict_mul (a workgroup-uniform flag: the chunk's number + 1 in `tiny_chunk`), else the plain
// `precise` product is numerics::mul's (both operands then of magnitude >= 2^-63 where nonzero,
// b below 2^21). acc = ftz(acc + p), k ascending from +0 (or the partial sums an earlier
// dispatch stored, k_begin > 0), then finish: canonical NaN, the bias, RELU (GELU runs after,
// ops::rows::matmul_blocks). Both tiers run these kernels (the strict bits).
#ifndef ADEADVM_MATMUL_Q_GLSL
#define ADEADVM_MATMUL_Q_GLSL
#include "matmul_common.glsl"

// b's bytes as words (the binding covers whole words; a row's blocks need not start on one).
layout(set = 0, binding = 2) readonly buffer BW { uint bw[]; };
// isa::BlockFormat: 0 Q8_0 (34-byte blocks: d, 32 signed bytes), 1 Q4_1 (20-byte blocks: d, m,
// 16 bytes holding element j in the low nibble and element j + 16 in the high one).
layout(constant_id = 0) const uint FORMAT = 0u;
// The k one dispatch covers (a multiple of the kernel's chunk of k; ops::rows::matmul_blocks):
// lavapipe ends an invocation's loops after 65535 iterations in all.
layout(constant_id = 1) const uint K_SPAN = 0xffffffffu;
const uint QK = 32u;
const uint BLOCK_BYTES = FORMAT == 0u ? 34u : 20u;

// f16 bits -> f32, exact (see above).
float q_f16(uint h) {
    uint sign = (h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu;
    uint m = h & 0x3ffu;
    if (e == 31u) {
        return uintBitsToFloat(sign | (m == 0u ? 0x7f800000u : (0x7fc00000u | (m << 13))));
    }
    if (e == 0u) {
        if (m == 0u) {
            return uintBitsToFloat(sign);
        }
        uint p = uint(findMSB(m));
        return uintBitsToFloat(sign | ((p + 103u) << 23) | ((m << (23u - p)) & 0x007fffffu));
    }
    return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

// The four bytes at byte offset o of word array w (any alignment; the words past the last
// byte read only as the high bytes of the result). A macro: GLSL takes no array parameters
// of unsized or shared arrays.
#define Q_WORD_AT(w, base, o) \
    (((o) & 3u) == 0u ? w[(base) + ((o) >> 2)] \
                      : ((w[(base) + ((o) >> 2)] >> (((o) & 3u) << 3)) | (w[(base) + ((o) >> 2) + 1u] << (32u - (((o) & 3u) << 3)))))

// The four values of bytes `q` of a Q8_0 block (signed) with scale d: exact products.
vec4 q8_values(float d, uint q) {
    ivec4 s = ivec4(int(q << 24), int(q << 16), int(q << 8), int(q)) >> 24;
    precise vec4 v = vec4(d) * vec4(s);
    return v;
}
// The four values of nibbles `q` (one a byte, already shifted down) of a Q4_1 block.
vec4 q4_values(float d, float m, uint q) {
    uvec4 n = uvec4(q, q >> 8, q >> 16, q >> 24) & 0x0fu;
    precise vec4 dq = vec4(d) * vec4(n);
    precise vec4 v = dq + vec4(m);
    return v;
}

vec4 q_ftz4(vec4 v) { return vec4(strict_ftz(v.x), strict_ftz(v.y), strict_ftz(v.z), strict_ftz(v.w)); }
vec4 q_mul4(vec4 x, vec4 y) {
    return vec4(strict_mul(x.x, y.x), strict_mul(x.y, y.y), strict_mul(x.z, y.z), strict_mul(x.w, y.w));
}
// An a value as staged: flushed; *tiny set when it is nonzero and below 2^-63.
float q_stage(float v, inout bool tiny) {
    uint ex = floatBitsToUint(v) & 0x7f800000u;
    tiny = tiny || (ex != 0u && ex < (64u << 23));
    return strict_ftz(v);
}
// acc = ftz(acc + x * y), lane by lane (x, y vec4s of a and b values).
#define Q_MAC(acc, x, y, careful)                                 \
    {                                                             \
        precise vec4 prod = (careful) ? q_mul4(x, y) : (x) * (y); \
        precise vec4 s = (acc) + prod;                            \
        acc = q_ftz4(s);                                          \
    }

// The last span's finish of output (r, c) (c < N): canonical NaN, the bias, the activation.
float q_finish(float x, uint r, uint c, bool has_bias, uint act, uint coff) {
    x = strict_canon(x);
    if (has_bias) {
        x = strict_add(x, bias[coff + r * p.bias_sm + c * p.bias_sn]);
    }
    return activate(act, x);
}

#endif // ADEADVM_MATMUL_Q_GLSL
