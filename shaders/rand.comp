#version 450
// RAND: out[i] = rand::philox_uniform(seed, first + i) or rand::philox_normal(seed, first + i),
// bit for bit. The element index is 64 bits (counter words 0 and 1; `first` is split into
// first_lo / first_hi and the carry of first_lo + i goes into the high word), so a tensor
// filled in pieces gets the same values as one filled at once.
//  * uniform: (w0 >> 8) * 2^-24, built from the bits (exact);
//  * normal: Box-Muller with the strict operations, in the order of rand::philox_normal.
// Results are stored as bits (uint), so no driver touches them on the way out.
#extension GL_GOOGLE_include_directive : require
#include "strict.glsl"
#include "data.glsl"

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P {
    uint n;
    uint seed;
    uint dist; // 0 uniform, 1 normal (isa::Dist)
    uint first_lo;
    uint first_hi;
} p;

// Philox-4x32-10 (rand::philox4x32): counter c, key (k0, k1).
uvec4 philox(uvec4 c, uint k0, uint k1) {
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint hi0, lo0, hi1, lo1;
        umulExtended(0xD2511F53u, c.x, hi0, lo0);
        umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
        c = uvec4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    }
    return c;
}

// horner(t2, c) = fold from the highest coefficient: acc = add(mul(acc, t2), k), acc0 = +0.
const uint SIN_C[7] = uint[7](0x3f800000u, 0xbe2aaaabu, 0x3c088889u, 0xb9500d01u, 0x3638ef1du,
                              0xb2d7322bu, 0x2f309231u);
const uint COS_C[8] = uint[8](0x3f800000u, 0xbf000000u, 0x3d2aaaabu, 0xbab60b61u, 0x37d00d01u,
                              0xb493f27eu, 0x310f76c7u, 0xad49cba6u);

uint normal_bits(uvec4 w) {
    // 1. u1 = ((w0 >> 8) + 1) * 2^-24 in (0, 1]
    float u1 = strict_mul(uintBitsToFloat(dm_u24_to_f32_bits((w.x >> 8) + 1u)), S_F(0x33800000u));
    // 2. r = sqrt(-2 log u1)
    float r = strict_sqrt(strict_mul(S_F(0xc0000000u), strict_log(u1)));
    // 3. quadrant and angle
    uint m = w.y >> 8;
    uint q = m >> 22;
    float f = strict_mul(uintBitsToFloat(dm_u24_to_f32_bits(m & 0x3fffffu)), S_F(0x34800000u)); // 2^-22
    float theta = strict_mul(f, S_F(0x3fc90fdbu));                                              // pi/2
    float t2 = strict_mul(theta, theta);
    // 4. Taylor polynomials
    float hs = 0.0;
    for (int k = 6; k >= 0; k--) hs = strict_add(strict_mul(hs, t2), S_F(SIN_C[k]));
    float hc = 0.0;
    for (int k = 7; k >= 0; k--) hc = strict_add(strict_mul(hc, t2), S_F(COS_C[k]));
    uint sin_ = floatBitsToUint(strict_mul(theta, hs));
    uint cos_ = floatBitsToUint(hc);
    // 5. cos(2 pi u2) by quadrant; Rust's unary minus flips the sign bit
    uint c = q == 0u ? cos_ : q == 1u ? sin_ ^ S_SIGN : q == 2u ? cos_ ^ S_SIGN : sin_;
    return floatBitsToUint(strict_mul(r, uintBitsToFloat(c)));
}

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        uint lo = p.first_lo + i;
        uint hi = p.first_hi + (lo < i ? 1u : 0u); // carry
        uvec4 w = philox(uvec4(lo, hi, 0u, 0u), p.seed, 0u);
        uint bits;
        if (p.dist == 0u) {
            bits = dm_u24_to_f32_bits(w.x >> 8);
            bits = bits == 0u ? 0u : bits - (24u << 23); // * 2^-24, exact: a power-of-two scale
        } else {
            bits = normal_bits(w);
        }
        y[i] = bits;
    }
}
