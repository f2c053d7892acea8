// data.glsl -- integer helpers of the data-movement kernels: strided addressing over up to 8
// axes, 16-bit halves of packed words, and exact int <-> f32 conversions done with integer
// operations (a driver's OpConvertSToF / OpConvertFToS rounding and out-of-range behaviour are
// not something strict mode may rely on). No float arithmetic here.
#ifndef ADEADVM_DATA_GLSL
#define ADEADVM_DATA_GLSL

// Axis d (0..7) of an 8-vector passed as two uvec4 (push-constant blocks hold no arrays here:
// the reflector sizes scalars, vectors and structs).
uint dm_at(uvec4 lo, uvec4 hi, uint d) { return d < 4u ? lo[d] : hi[d - 4u]; }

// The offsets in two strided operands of row-major flat index i over `shape` (rank <= 8):
// c = the multi-index of i; returns (sum c*s0, sum c*s1). Rank 0 is one element at (0, 0).
uvec2 dm_offsets2(uint i, uint rank, uvec4 sh_lo, uvec4 sh_hi, uvec4 s0_lo, uvec4 s0_hi, uvec4 s1_lo,
                  uvec4 s1_hi) {
    uint rem = i;
    uvec2 off = uvec2(0u);
    for (uint d = rank; d > 0u;) {
        d--;
        uint s = dm_at(sh_lo, sh_hi, d);
        uint c = rem % s;
        rem /= s;
        off += c * uvec2(dm_at(s0_lo, s0_hi, d), dm_at(s1_lo, s1_hi, d));
    }
    return off;
}

// 16-bit element i of a packed array (little-endian: element 2k is the low half of word k).
#define DM_HALF(arr, i) ((arr[(i) >> 1] >> (((i) & 1u) << 4)) & 0xffffu)

// Position of the highest set bit of v != 0 (an exact integer instruction).
uint dm_msb(uint v) { return uint(findMSB(v)); }

// Shift right by s (1..31), rounding to nearest, ties to even.
uint dm_shr_rne(uint v, uint s) {
    uint q = v >> s;
    uint rem = v & ((1u << s) - 1u);
    uint half_ = 1u << (s - 1u);
    return (rem > half_ || (rem == half_ && (q & 1u) == 1u)) ? q + 1u : q;
}

// Bits of the f32 nearest to the i32 v, ties to even: Rust's `v as f32`.
uint dm_i32_to_f32_bits(int v) {
    if (v == 0) return 0u;
    uint sign = v < 0 ? 0x80000000u : 0u;
    uint mag = v < 0 ? 0u - uint(v) : uint(v); // |i32::MIN| = 2^31 fits in a uint
    uint p = dm_msb(mag);
    uint q = p <= 23u ? mag << (23u - p) : dm_shr_rne(mag, p - 23u); // 24 significant bits
    // q in [2^23, 2^24]: adding it carries its leading one (and a rounding overflow) into the
    // exponent field.
    return sign | (((126u + p) << 23) + q);
}

// Rust's `f32::from_bits(b) as i32`: truncates toward zero, saturates, NaN -> 0.
int dm_f32_bits_to_i32(uint b) {
    uint a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return 0;
    bool neg = (b & 0x80000000u) != 0u;
    int e = int(a >> 23) - 127;
    if (e < 0) return 0; // |x| < 1, zeros and denormals included
    if (e >= 31) return neg ? int(0x80000000u) : 0x7fffffff; // |x| >= 2^31 (and inf)
    uint m = (a & 0x007fffffu) | 0x00800000u;
    uint mag = e >= 23 ? m << uint(e - 23) : m >> uint(23 - e);
    return int(neg ? 0u - mag : mag);
}

// Bits of the f32 equal to the integer v < 2^24 (exact).
uint dm_u24_to_f32_bits(uint v) { return v == 0u ? 0u : dm_i32_to_f32_bits(int(v)); }

#endif // ADEADVM_DATA_GLSL
