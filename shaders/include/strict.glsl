// strict.glsl -- adeadvm strict-tier scalar math, the GLSL twin of src/numerics (Rust).
//
// Every function here repeats, step for step, the Rust function of the same name in
// adeadvm::numerics; the step lists are in the Rust doc comments and docs/numerics.md. Where a
// function takes a shortcut (plain IEEE operations where no operand or result can be denormal
// or NaN, no canonicalizing of a NaN that the result's canonicalization covers), its comment
// says why the bits are the same; tests/vulkan.rs compares every op with the CPU's bits. Rules:
//  * float arithmetic is only add/sub/mul, each on a `precise` variable (SPIR-V NoContraction, so
//    never fused into an FMA), with inputs and result flushed (denormal -> signed zero) and NaN
//    canonicalized to 0x7fc00000 explicitly: lavapipe keeps denormals, NVIDIA flushes them;
//  * everything else is comparisons, selects and integer operations on floatBitsToUint;
//  * no `/`, sqrt, inversesqrt, exp, log, fma, or packHalf2x16 (all vendor-rounded);
//  * every constant is written as its bits (uintBitsToFloat), never as a decimal literal.
// Include with:  #extension GL_GOOGLE_include_directive : require
//                #include "strict.glsl"
#ifndef ADEADVM_STRICT_GLSL
#define ADEADVM_STRICT_GLSL

#define S_F(bits) uintBitsToFloat(bits)
const uint STRICT_CANONICAL_NAN = 0x7fc00000u;
const uint S_SIGN = 0x80000000u;
const uint S_MANT = 0x007fffffu;

bool strict_isnan(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }

float strict_ftz(float x) {
    uint b = floatBitsToUint(x);
    return ((b & 0x7f800000u) == 0u) ? S_F(b & S_SIGN) : x;
}

float strict_canon(float x) { return strict_isnan(x) ? S_F(STRICT_CANONICAL_NAN) : strict_ftz(x); }

// add, sub and mul flush their operands but do not canonicalize a NaN operand as
// numerics::ops does first: a NaN operand makes the IEEE result a NaN whatever its payload,
// and the result is canonicalized, so the bits are the same with two fewer checks.
float strict_add(float a, float b) {
    precise float r = strict_ftz(a) + strict_ftz(b);
    return strict_canon(r);
}
float strict_sub(float a, float b) {
    precise float r = strict_ftz(a) - strict_ftz(b);
    return strict_canon(r);
}
// Flush with tininess after rounding (x86 MXCSR FTZ+DAZ); see numerics::mul for the steps.
// Operands of magnitude 2^-63 to 2^64 (exponent fields 64 to 190) take the IEEE product as it
// is: it is at least 2^-126, so nothing is flushed and no tininess arises, and it is no NaN
// (an overflow to infinity is what the full steps give too).
bool strict_i_mul_is_plain(float a, float b) {
    uint ea = (floatBitsToUint(a) >> 23) & 0xffu, eb = (floatBitsToUint(b) >> 23) & 0xffu;
    return ea - 64u <= 126u && eb - 64u <= 126u;
}
float strict_mul(float a, float b) {
    if (strict_i_mul_is_plain(a, b)) {
        precise float p = a * b;
        return p;
    }
    a = strict_ftz(a);
    b = strict_ftz(b);
    precise float r = a * b;
    r = strict_canon(r);
    if ((floatBitsToUint(r) & 0x7fffffffu) == 0x00800000u) {
        bool a_smaller = (floatBitsToUint(a) & 0x7fffffffu) <= (floatBitsToUint(b) & 0x7fffffffu);
        float s = a_smaller ? a : b;
        float l = a_smaller ? b : a;
        precise float t = (s * 16777216.0) * l;
        if ((floatBitsToUint(t) & 0x7fffffffu) < 0x0c800000u) {
            r = uintBitsToFloat(floatBitsToUint(r) & 0x80000000u);
        }
    }
    return r;
}

// strict_mul of four pairs, lane by lane: the plain products where strict_mul takes them for all
// four, else strict_mul's steps for each. One test for the four rather than a branch each, so
// a loop's elements interleave: strict softmax over rows of 4096 ran 20% faster on an H100
// with plain products than with strict_mul's branch an element.
vec4 strict_mul_quad(vec4 a, vec4 b) {
    uvec4 ea = (floatBitsToUint(a) >> 23) & 0xffu, eb = (floatBitsToUint(b) >> 23) & 0xffu;
    if (all(lessThanEqual(ea - 64u, uvec4(126u))) && all(lessThanEqual(eb - 64u, uvec4(126u)))) {
        precise vec4 p = a * b;
        return p;
    }
    return vec4(strict_mul(a.x, b.x), strict_mul(a.y, b.y), strict_mul(a.z, b.z), strict_mul(a.w, b.w));
}

float strict_i_nan() { return S_F(STRICT_CANONICAL_NAN); }
float strict_i_neg(float x) {
    x = strict_canon(x);
    return strict_isnan(x) ? x : S_F(floatBitsToUint(x) ^ S_SIGN);
}
float strict_i_abs(float x) { return S_F(floatBitsToUint(strict_canon(x)) & 0x7fffffffu); }

// max and min flush their operands (canonicalizing a NaN first, as numerics::ops does, would
// only be checked for NaN again).
float strict_max(float a, float b) {
    a = strict_ftz(a);
    b = strict_ftz(b);
    if (strict_isnan(a) || strict_isnan(b)) return strict_i_nan();
    if (a == b) return S_F(floatBitsToUint(a) & floatBitsToUint(b));
    return (a > b) ? a : b;
}
float strict_min(float a, float b) {
    a = strict_ftz(a);
    b = strict_ftz(b);
    if (strict_isnan(a) || strict_isnan(b)) return strict_i_nan();
    if (a == b) return S_F(floatBitsToUint(a) | floatBitsToUint(b));
    return (a < b) ? a : b;
}

// ---- lean forms for the row kernels (shaders/include/strictrow.glsl's users) ----
// A value is "flushed" when it is not denormal; it may be a NaN of any payload. On flushed
// operands strict_add is canon(a + b), and the canonicalizing of a NaN can wait: every strict
// operation here gives a NaN for a NaN operand whatever its payload, and canonicalizes it
// (strict_mul, max, div, rsqrt, exp and the stores' strict_canon), and every one of add, sub
// and mul gives a NaN for a NaN operand. So a kernel that canonicalizes where a value leaves
// the arithmetic gets strict_add's bits with two flushes and a NaN check fewer an operation.
float strict_add_flushed(float a, float b) {
    precise float r = a + b;
    return strict_ftz(r);
}
float strict_sub_flushed(float a, float b) {
    precise float r = a - b;
    return strict_ftz(r);
}
// strict_add for operands that are +0, positive normal, +inf or NaN (exp's results, squares):
// the sum is at least the larger operand, so never denormal nor -0, and nothing is flushed.
float strict_add_nonneg(float a, float b) {
    precise float r = a + b;
    return r;
}
// strict_max on canonical operands is the larger in the total order -inf < .. < -0 < +0 < ..
// < +inf < NaN (its NaN is only 0x7fc00000), and strict_max_key maps that order to signed
// integers (a negative float's magnitude bits are reversed; the map is its own inverse). The
// max of the keys, taken in any order, is the key of strict_max's tree result: max is exact.
int strict_max_key(float x) {
    int b = floatBitsToInt(x);
    return b ^ ((b >> 31) & 0x7fffffff);
}
float strict_key_value(int k) { return intBitsToFloat(k ^ ((k >> 31) & 0x7fffffff)); }

// Plain IEEE add, sub and mul on `precise` variables (never fused): strict_add/sub/mul without
// the canonicalizing and flushing, for operands that are normal floats or zero and whose
// results are too (no NaN, nothing to flush, no product near FLT_MIN), where they agree.
float strict_i_padd(float a, float b) { precise float r = a + b; return r; }
float strict_i_psub(float a, float b) { precise float r = a - b; return r; }
float strict_i_pmul(float a, float b) { precise float r = a * b; return r; }

// ---- division and square roots ----
// After their special cases, strict_div, strict_sqrt and strict_rsqrt work on significands m in
// [1, 4), seeds near 1/m or 1/sqrt(m) in [1/2, 1], quotients and roots in [1/2, 2], their
// halves split by Veltkamp (a low part is zero or at least 2^-25 in magnitude), and remainders
// that are zero or at least 2^-60: every operand and result of their adds, subs and muls is a
// normal float of magnitude at most 2^14, or zero, so those steps take the plain operations,
// with the bits of numerics' strict ones (a product of two zeros or a zero and a normal float is
// the same signed zero either way). About a tenth of the instructions: the row kernels wait on
// these between their passes.

// Dekker's exact product (Veltkamp split, C = 4097): a*b = p + e.
void strict_i_two_prod(float a, float b, out float p, out float e) {
    float C = S_F(0x45801000u); // 4097
    float t = strict_i_pmul(C, a);
    float ah = strict_i_psub(t, strict_i_psub(t, a));
    float al = strict_i_psub(a, ah);
    t = strict_i_pmul(C, b);
    float bh = strict_i_psub(t, strict_i_psub(t, b));
    float bl = strict_i_psub(b, bh);
    p = strict_i_pmul(a, b);
    e = strict_i_padd(strict_i_padd(strict_i_padd(strict_i_psub(strict_i_pmul(ah, bh), p), strict_i_pmul(ah, bl)),
                                    strict_i_pmul(al, bh)),
                      strict_i_pmul(al, bl));
}

int strict_i_expfield(float x) { return int((floatBitsToUint(x) >> 23) & 0xffu); }
float strict_i_significand(float x) { return S_F((floatBitsToUint(x) & S_MANT) | 0x3f800000u); }

float strict_i_scale_bits(float m, int k, uint sign) {
    int e = strict_i_expfield(m) + k;
    if (e >= 255) return S_F(0x7f800000u | sign);
    if (e <= 0) return S_F(sign);
    return S_F((floatBitsToUint(m) & S_MANT) | (uint(e) << 23) | sign);
}

// ulp of a positive normal v, and the ulp just below v.
void strict_i_ulps(float v, out float up, out float down) {
    uint e = (floatBitsToUint(v) >> 23) & 0xffu;
    up = S_F((e - 23u) << 23);
    down = ((floatBitsToUint(v) & S_MANT) == 0u) ? S_F((e - 24u) << 23) : up;
}

float strict_i_recip_seed(float m) {
    float y = strict_i_psub(S_F(0x3fb4b4b5u), strict_i_pmul(S_F(0x3ef0f0f1u), m)); // 24/17 - 8/17 m
    for (int i = 0; i < 3; i++) {
        float e = strict_i_psub(1.0, strict_i_pmul(m, y));
        y = strict_i_padd(y, strict_i_pmul(y, e));
    }
    return y;
}

float strict_div(float a, float b) {
    a = strict_canon(a);
    b = strict_canon(b);
    if (strict_isnan(a) || strict_isnan(b)) return strict_i_nan();
    uint sign = (floatBitsToUint(a) ^ floatBitsToUint(b)) & S_SIGN;
    uint ua = floatBitsToUint(a) & ~S_SIGN;
    uint ub = floatBitsToUint(b) & ~S_SIGN;
    bool a_zero = ua == 0u, b_zero = ub == 0u;
    bool a_inf = ua == 0x7f800000u, b_inf = ub == 0x7f800000u;
    if ((a_zero && b_zero) || (a_inf && b_inf)) return strict_i_nan();
    if (a_inf || b_zero) return S_F(0x7f800000u | sign);
    if (a_zero || b_inf) return S_F(sign);
    float ma = strict_i_significand(a), mb = strict_i_significand(b);
    float y = strict_i_recip_seed(mb);
    float q0 = strict_i_pmul(ma, y);
    float ph, pl;
    strict_i_two_prod(q0, mb, ph, pl);
    float r = strict_i_psub(strict_i_psub(ma, ph), pl);
    float q = strict_i_padd(q0, strict_i_pmul(r, y));
    strict_i_two_prod(q, mb, ph, pl);
    r = strict_i_psub(strict_i_psub(ma, ph), pl);
    float u, ud;
    strict_i_ulps(q, u, ud);
    if (r > strict_i_pmul(mb, strict_i_pmul(0.5, u))) {
        q = strict_i_padd(q, u);
    } else if (-r > strict_i_pmul(mb, strict_i_pmul(0.5, ud))) {
        q = strict_i_psub(q, ud);
    }
    return strict_i_scale_bits(q, strict_i_expfield(a) - strict_i_expfield(b), sign);
}

float strict_recip(float x) { return strict_div(1.0, x); }

// x = m * 4^h, m in [1, 4).
float strict_i_split_even(float x, out int h) {
    int e = strict_i_expfield(x) - 127;
    int odd = e & 1;
    h = (e - odd) >> 1;
    return S_F((floatBitsToUint(x) & S_MANT) | (uint(127 + odd) << 23));
}

float strict_i_rsqrt_seed(float m) {
    float y = S_F(0x5f3759dfu - (floatBitsToUint(m) >> 1));
    float hm = strict_i_pmul(0.5, m);
    for (int i = 0; i < 3; i++) {
        y = strict_i_pmul(y, strict_i_psub(1.5, strict_i_pmul(strict_i_pmul(hm, y), y)));
    }
    return y;
}

float strict_sqrt(float x) {
    x = strict_canon(x);
    uint b = floatBitsToUint(x);
    if (strict_isnan(x) || (b & ~S_SIGN) == 0u || b == 0x7f800000u) return x;
    if ((b & S_SIGN) != 0u) return strict_i_nan();
    int h;
    float m = strict_i_split_even(x, h);
    float y = strict_i_rsqrt_seed(m);
    float s0 = strict_i_pmul(m, y);
    float ph, pl;
    strict_i_two_prod(s0, s0, ph, pl);
    float r = strict_i_psub(strict_i_psub(m, ph), pl);
    float s = strict_i_padd(s0, strict_i_pmul(r, strict_i_pmul(0.5, y)));
    strict_i_two_prod(s, s, ph, pl);
    r = strict_i_psub(strict_i_psub(m, ph), pl);
    float u, ud;
    strict_i_ulps(s, u, ud);
    if (r > strict_i_pmul(s, u)) {
        s = strict_i_padd(s, u);
    } else if (r <= -strict_i_pmul(s, ud)) {
        s = strict_i_psub(s, ud);
    }
    return strict_i_scale_bits(s, h, 0u);
}

float strict_rsqrt(float x) {
    x = strict_canon(x);
    uint b = floatBitsToUint(x);
    if (strict_isnan(x)) return x;
    if ((b & ~S_SIGN) == 0u) return S_F(0x7f800000u | b);
    if ((b & S_SIGN) != 0u) return strict_i_nan();
    if (b == 0x7f800000u) return 0.0;
    int h;
    float m = strict_i_split_even(x, h);
    float y = strict_i_rsqrt_seed(m);
    float yh, yl, ph, pl;
    strict_i_two_prod(y, y, yh, yl);
    strict_i_two_prod(m, yh, ph, pl);
    float e = strict_i_psub(strict_i_psub(strict_i_psub(1.0, ph), pl), strict_i_pmul(m, yl));
    float z = strict_i_padd(y, strict_i_pmul(y, strict_i_pmul(0.5, e)));
    // numerics::RSQRT_UP: the two significands where z lies on the wrong side of a rounding
    // midpoint get the next float up, so the result is correctly rounded.
    uint mb = floatBitsToUint(m);
    if (mb == 0x4009f038u || mb == 0x407ffffeu) z = S_F(floatBitsToUint(z) + 1u);
    return strict_i_scale_bits(z, -h, 0u);
}

// ---- exp / log ----

#define S_LN2_HI S_F(0x3f317200u)
#define S_LN2_LO S_F(0x35bfbe8eu)
#define S_LOG2E S_F(0x3fb8aa3bu)
#define S_MAGIC S_F(0x4b400000u) // 1.5 * 2^23

// numerics::exp's steps after its range checks, on plain operations: the result's significand
// bits (m's) and exponent field e (before the overflow and underflow checks). They are exact
// where |x| >= 2^-40 within the range checks: every operand and result is then a normal float or
// zero. k is an integer of magnitude at most 151 (k * LN2_HI and x - k * LN2_HI are exact);
// r = x when k = 0, else a nonzero r is a multiple of ulp(k * LN2_LO) >= 2^-43; so
// r * r * q >= 2^-99 and every other product is larger, and every sum of normal operands is
// zero or at least 2^-99 too. k's integer is t's low bits (t = 1.5 * 2^23 + k exactly): an
// integer subtraction rather than a conversion. About 30 instructions where numerics'
// canonicalizing steps take ten times as many.
float strict_i_exp_steps(float x, out int e) {
    float t = strict_i_padd(strict_i_pmul(x, S_LOG2E), S_MAGIC);
    float k = strict_i_psub(t, S_MAGIC);
    float r = strict_i_psub(strict_i_psub(x, strict_i_pmul(k, S_LN2_HI)), strict_i_pmul(k, S_LN2_LO));
    // horner(r, [1/2!, ..., 1/7!])
    float q = S_F(0x39500d01u);
    q = strict_i_padd(S_F(0x3ab60b61u), strict_i_pmul(q, r));
    q = strict_i_padd(S_F(0x3c088889u), strict_i_pmul(q, r));
    q = strict_i_padd(S_F(0x3d2aaaabu), strict_i_pmul(q, r));
    q = strict_i_padd(S_F(0x3e2aaaabu), strict_i_pmul(q, r));
    q = strict_i_padd(S_F(0x3f000000u), strict_i_pmul(q, r));
    float m = strict_i_padd(1.0, strict_i_padd(r, strict_i_pmul(strict_i_pmul(r, r), q)));
    e = strict_i_expfield(m) + (floatBitsToInt(t) - floatBitsToInt(S_MAGIC));
    return m;
}

// numerics::exp. Where |x| < 2^-40 it gives exactly 1: k = 0, r = x, r * r * q is below half an
// ulp of r (or flushed), and 1 + r rounds to 1 (tests/numerics.rs,
// gpu_exp_of_tiny_is_one_*), so no steps are taken there.
float strict_exp(float x) {
    x = strict_canon(x);
    if (strict_isnan(x)) return x;
    if (x > S_F(0x42b1999au)) return S_F(0x7f800000u); // 88.8
    if (x < S_F(0xc2d00000u)) return 0.0;              // -104
    if ((floatBitsToUint(x) & 0x7fffffffu) < 0x2b800000u) return 1.0; // 2^-40
    int e;
    float m = strict_i_exp_steps(x, e);
    if (e >= 255) return S_F(0x7f800000u);
    if (e <= 0) return 0.0;
    return S_F((floatBitsToUint(m) & S_MANT) | (uint(e) << 23));
}

// strict_exp with its checks as selects after the steps, taken for every x (their result is
// dropped outside their range): for a loop over several elements, which then interleave
// rather than each wait for the branches before it. Measured on an H100: strict SOFTMAX over
// rows of 4096, 1444 -> 1483 GB/s; 8192, 1360 -> 1426. The elementwise EXP kept the branches
// (16M elements: 2962 GB/s with them, 2766 with the selects).
float strict_exp_selects(float x) {
    x = strict_canon(x);
    int e;
    float m = strict_i_exp_steps(x, e);
    float y = S_F((floatBitsToUint(m) & S_MANT) | (uint(e) << 23));
    y = e >= 255 ? S_F(0x7f800000u) : y;
    y = e <= 0 ? 0.0 : y;
    y = (floatBitsToUint(x) & 0x7fffffffu) < 0x2b800000u ? 1.0 : y;
    y = x < S_F(0xc2d00000u) ? 0.0 : y;
    y = x > S_F(0x42b1999au) ? S_F(0x7f800000u) : y;
    return strict_isnan(x) ? x : y;
}

float strict_log(float x) {
    x = strict_canon(x);
    uint b = floatBitsToUint(x);
    if (strict_isnan(x)) return x;
    if ((b & ~S_SIGN) == 0u) return S_F(0xff800000u);
    if ((b & S_SIGN) != 0u) return strict_i_nan();
    if (b == 0x7f800000u) return x;
    int e = int((b >> 23) & 0xffu) - 127;
    uint mb = b & S_MANT;
    float m;
    int k;
    if (mb >= 0x3504f3u) {
        m = S_F(mb | (126u << 23));
        k = e + 1;
    } else {
        m = S_F(mb | (127u << 23));
        k = e;
    }
    float f = strict_sub(m, 1.0);
    float s = strict_div(f, strict_add(2.0, f));
    float z = strict_mul(s, s);
    // horner(z, [2/3, 2/5, 2/7, 2/9, 2/11])
    float R = S_F(0x3e3a2e8cu);
    R = strict_add(S_F(0x3e638e39u), strict_mul(R, z));
    R = strict_add(S_F(0x3e924925u), strict_mul(R, z));
    R = strict_add(S_F(0x3ecccccdu), strict_mul(R, z));
    R = strict_add(S_F(0x3f2aaaabu), strict_mul(R, z));
    R = strict_mul(z, R);
    float hf = strict_mul(strict_mul(0.5, f), f);
    float dk = float(k); // exact: |k| < 2^24
    return strict_sub(strict_mul(dk, S_LN2_HI),
                      strict_sub(strict_sub(hf, strict_add(strict_mul(s, strict_add(hf, R)),
                                                           strict_mul(dk, S_LN2_LO))),
                                 f));
}

// ---- tanh / sigmoid ----

float strict_tanh(float x) {
    x = strict_canon(x);
    if (strict_isnan(x)) return x;
    float a = strict_i_abs(x);
    float t;
    if (a < S_F(0x3f0ccccdu)) { // 0.55
        float u = strict_mul(a, a);
        float g = S_F(0x3b1d343bu);
        g = strict_add(S_F(0xbc09e5a0u), strict_mul(g, u));
        g = strict_add(S_F(0x3cb273b6u), strict_mul(g, u));
        g = strict_add(S_F(0xbd5d04eeu), strict_mul(g, u));
        g = strict_add(S_F(0x3e08886fu), strict_mul(g, u));
        g = strict_add(S_F(0xbeaaaaaau), strict_mul(g, u));
        t = strict_add(a, strict_mul(strict_mul(a, u), g));
    } else {
        float E = strict_exp(strict_mul(2.0, a));
        t = strict_sub(1.0, strict_div(2.0, strict_add(E, 1.0)));
    }
    return S_F(floatBitsToUint(t) | (floatBitsToUint(x) & S_SIGN));
}

float strict_sigmoid(float x) { return strict_recip(strict_add(1.0, strict_exp(strict_i_neg(x)))); }

// ---- erf / gelu ----

// The polynomials of numerics::erf's intervals [0.875, 3.875) (S_ERFC_C's rows): Horner from
// c8 down, q = c_j + q * t, in plain `precise` arithmetic (see strict_erf). Each call passes its
// row as literals: a run-time index into a constant array became a copy of the array in each
// thread's local memory on NVIDIA. One call with each coefficient chosen by selects among the
// four rows (no branch on the interval; the same bits) measured no faster on an H200: GELU over
// 16M elements in [-1, 1) 2140 GB/s both, f16 MATMUL 4096^2 with GELU 221 -> 211 TFLOP/s.
float strict_i_erfc_horner(float t, uint c0, uint c1, uint c2, uint c3, uint c4, uint c5, uint c6,
                           uint c7, uint c8) {
    float q = S_F(c8);
    q = strict_i_padd(S_F(c7), strict_i_pmul(q, t));
    q = strict_i_padd(S_F(c6), strict_i_pmul(q, t));
    q = strict_i_padd(S_F(c5), strict_i_pmul(q, t));
    q = strict_i_padd(S_F(c4), strict_i_pmul(q, t));
    q = strict_i_padd(S_F(c3), strict_i_pmul(q, t));
    q = strict_i_padd(S_F(c2), strict_i_pmul(q, t));
    q = strict_i_padd(S_F(c1), strict_i_pmul(q, t));
    return strict_i_padd(S_F(c0), strict_i_pmul(q, t));
}

// numerics::erf. Where 2^-14 <= |x| < 3.875 the steps take plain `precise` arithmetic, the same
// bits as the strict operations there: no operand or result is a denormal, infinite or NaN.
// Each step adds a coefficient c to a product z: either |z| < |c| / 2 and the sum is at least
// |c| / 2, or |z| >= |c| / 2 and the sum is zero or a multiple of ulp(c / 2). Below 0.875 the
// coefficients are at least 2^-14, so every partial sum p is zero or at least 2^-38, and the
// products by u = a * a >= 2^-28 (and by a >= 2^-14) at least 2^-66. From 0.875, t = a - mid is
// zero or a multiple of ulp(a) >= 2^-24 and the coefficients are at least 2^-19, so every q is
// zero or at least 2^-43 and every product zero or at least 2^-67. Only the first interval keeps
// the strict operations (its products reach 2^-126 near zero).
float strict_erf(float x) {
    x = strict_canon(x);
    if (strict_isnan(x)) return x;
    float a = strict_i_abs(x);
    float y;
    if (a < S_F(0x38800000u)) { // 2^-14
        float b = strict_mul(8.0, a);
        y = strict_mul(0.125, strict_add(b, strict_mul(b, S_F(0x3e0375d4u))));
    } else if (a < S_F(0x3f600000u)) { // 0.875
        float u = strict_i_pmul(a, a);
        float p = S_F(0x38b67198u);
        p = strict_i_padd(S_F(0xba57654bu), strict_i_pmul(p, u));
        p = strict_i_padd(S_F(0x3baaa16eu), strict_i_pmul(p, u));
        p = strict_i_padd(S_F(0xbcdc0d3cu), strict_i_pmul(p, u));
        p = strict_i_padd(S_F(0x3de71747u), strict_i_pmul(p, u));
        p = strict_i_padd(S_F(0xbec093a2u), strict_i_pmul(p, u));
        p = strict_i_padd(S_F(0x3e0375d4u), strict_i_pmul(p, u));
        y = strict_i_padd(a, strict_i_pmul(a, p));
    } else if (a < S_F(0x40780000u)) { // 3.875
        // The interval: how many of S_ERFC_LO[1..3] lie at or below a.
        uint i = uint(S_F(0x3fb00000u) <= a) + uint(S_F(0x40000000u) <= a) + uint(S_F(0x40300000u) <= a);
        float mid = S_F(i == 0u ? 0x3f900000u : i == 1u ? 0x3fd80000u : i == 2u ? 0x40180000u : 0x40540000u);
        float t = strict_i_psub(a, mid);
        float q;
        if (i == 0u) {
            q = strict_i_erfc_horner(t, 0x3de494b6u, 0xbea2f4ceu, 0x3eb75368u, 0xbe2659e5u, 0xbce528ddu,
                                     0x3d7b2bf8u, 0xbc7e5d83u, 0xbc1c8a7eu, 0x3bbf4ac7u);
        } else if (i == 1u) {
            q = strict_i_erfc_horner(t, 0x3c8b5926u, 0xbd85fcbfu, 0x3de21a82u, 0xbdd1b481u, 0x3d4b243fu,
                                     0xbb33897du, 0xbc3f6eceu, 0x3bc5a121u, 0xb82bced2u);
        } else if (i == 2u) {
            q = strict_i_erfc_horner(t, 0x3a4d3e18u, 0xbb8348cfu, 0x3c1be66eu, 0xbc60f43fu, 0x3c572c17u,
                                     0xbc091b59u, 0x3b4c4048u, 0xb79cefffu, 0xba20c494u);
        } else {
            q = strict_i_erfc_horner(t, 0x363c4370u, 0xb7a26825u, 0x38868a11u, 0xb90e24dfu, 0x395483f8u,
                                     0xb96ae5a7u, 0x394e63fau, 0xb91c6142u, 0x389337cau);
        }
        y = strict_i_psub(1.0, q);
    } else {
        y = 1.0;
    }
    return S_F(floatBitsToUint(y) | (floatBitsToUint(x) & S_SIGN));
}

float strict_gelu(float x) {
    x = strict_canon(x);
    if (floatBitsToUint(x) == 0xff800000u) return S_F(S_SIGN);
    return strict_mul(strict_mul(0.5, x), strict_add(1.0, strict_erf(strict_mul(x, S_F(0x3f3504f3u)))));
}

// numerics::silu: sigmoid, then one rounded multiply; silu(-inf) = -0.
float strict_silu(float x) {
    x = strict_canon(x);
    if (floatBitsToUint(x) == 0xff800000u) return S_F(S_SIGN);
    return strict_mul(x, strict_sigmoid(x));
}

// ---- f16 / bf16 (integer only; packHalf2x16 rounding is implementation-defined) ----

uint strict_i_shr_rne(uint v, uint s) {
    uint q = v >> s;
    uint rem = v & ((1u << s) - 1u);
    uint half_ = 1u << (s - 1u);
    return (rem > half_ || (rem == half_ && (q & 1u) == 1u)) ? q + 1u : q;
}

uint strict_f32_to_f16_bits(float x) {
    x = strict_canon(x);
    if (strict_isnan(x)) return 0x7e00u;
    uint b = floatBitsToUint(x);
    uint sign = (b >> 16) & 0x8000u;
    uint a = b & 0x7fffffffu;
    if (a >= 0x7f800000u) return sign | 0x7c00u;
    if (a == 0u) return sign;
    int e = int(a >> 23) - 127;
    uint full = (a & S_MANT) | 0x800000u;
    uint h;
    if (e > 15) h = 0x7c00u;
    else if (e >= -14) h = strict_i_shr_rne((uint(e + 15) << 23) | (a & S_MANT), 13u);
    else if (e >= -25) h = strict_i_shr_rne(full, uint(-1 - e));
    else h = 0u;
    return sign | h;
}

float strict_f16_bits_to_f32(uint h) {
    uint sign = (h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu;
    uint m = h & 0x3ffu;
    uint bits;
    if (e == 31u) {
        if (m != 0u) return strict_i_nan();
        bits = 0x7f800000u;
    } else if (e == 0u) {
        if (m == 0u) {
            bits = 0u;
        } else {
            uint p = uint(findMSB(m));
            bits = ((p + 103u) << 23) | ((m << (23u - p)) & S_MANT);
        }
    } else {
        bits = ((e + 112u) << 23) | (m << 13);
    }
    return S_F(sign | bits);
}

uint strict_f32_to_bf16_bits(float x) {
    x = strict_canon(x);
    if (strict_isnan(x)) return 0x7fc0u;
    uint b = floatBitsToUint(x);
    return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
}

float strict_bf16_bits_to_f32(uint h) { return strict_canon(S_F(h << 16)); }

// i32 -> f16 / bf16 with one rounding to nearest even, straight from the integer (numerics::
// i32_to_f16_bits / i32_to_bf16_bits, same steps): |v| as a uint, p its top bit, the top 11
// (f16) or 8 (bf16) significant bits rounded, the leading one and a rounding carry added into
// the exponent field. f16: |v| >= 65536 -> inf; 65520..65535 round up onto inf (0x7c00).
uint strict_i32_to_f16_bits(int v) {
    if (v == 0) return 0u;
    uint sign = v < 0 ? 0x8000u : 0u;
    uint mag = v < 0 ? 0u - uint(v) : uint(v); // |i32::MIN| = 2^31 fits in a uint
    uint p = uint(findMSB(mag));
    if (p >= 16u) return sign | 0x7c00u;
    uint q = p <= 10u ? mag << (10u - p) : strict_i_shr_rne(mag, p - 10u);
    return sign | (((p + 14u) << 10) + q);
}

uint strict_i32_to_bf16_bits(int v) {
    if (v == 0) return 0u;
    uint sign = v < 0 ? 0x8000u : 0u;
    uint mag = v < 0 ? 0u - uint(v) : uint(v);
    uint p = uint(findMSB(mag));
    uint q = p <= 7u ? mag << (7u - p) : strict_i_shr_rne(mag, p - 7u);
    return sign | (((p + 126u) << 7) + q);
}

#endif // ADEADVM_STRICT_GLSL
