//! 8-lane AVX2 ports of the `numerics` algorithms.
//!
//! Every function is generic over `F` (the tier): `F = false` is the strict tier and repeats the
//! scalar algorithm of `crate::numerics` step for step — the same constants, the same operation
//! order, plain `vmulps` then `vaddps` (never FMA), the scalar branches done as lane masks and
//! blends — so that, with MXCSR FTZ+DAZ set (see `fpenv`), each lane gives exactly the scalar
//! bits. Plain IEEE add/sub/mul under FTZ+DAZ *are* the strict operations, so only NaN
//! canonicalization and the explicit input flush before bit inspection are repeated here.
//!
//! `F = true` is the fast tier: FMA in polynomials and Cody-Waite reductions, and hardware
//! `vdivps`/`vsqrtps` (correctly rounded IEEE, flushed) instead of the Newton sequences. It is
//! deterministic (no data-dependent or thread-dependent choices) but not bit-equal to strict.
//!
//! All functions here are `unsafe` only because they are compiled with
//! `#[target_feature(enable = "avx2,fma")]`: callers must have checked that the CPU has AVX2
//! and FMA (the dispatch in `simd::mod` checks `ctx.level >= SimdLevel::Avx2`).

#![allow(clippy::excessive_precision)]

use std::arch::x86_64::*;

pub(super) type V = __m256;
type I = __m256i;

const SIGN: i32 = 0x8000_0000u32 as i32;
const ABS: i32 = 0x7fff_ffff;
const EXP_MASK: i32 = 0x7f80_0000;
const MANT: i32 = 0x007f_ffff;
const ONE_BITS: i32 = 0x3f80_0000;
const INF_BITS: i32 = 0x7f80_0000;
const CANON_NAN: i32 = 0x7fc0_0000;

// ---- lane primitives -------------------------------------------------------------------------

#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn splat(x: f32) -> V {
    _mm256_set1_ps(x)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn si(x: i32) -> I {
    _mm256_set1_epi32(x)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn bits(x: V) -> I {
    _mm256_castps_si256(x)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn float(x: I) -> V {
    _mm256_castsi256_ps(x)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn add(a: V, b: V) -> V {
    _mm256_add_ps(a, b)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn sub(a: V, b: V) -> V {
    _mm256_sub_ps(a, b)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn mul(a: V, b: V) -> V {
    _mm256_mul_ps(a, b)
}
/// `m ? a : b` per lane (m is an all-ones/all-zeros lane mask).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn sel(m: V, a: V, b: V) -> V {
    _mm256_blendv_ps(b, a, m)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn seli(m: I, a: V, b: V) -> V {
    _mm256_blendv_ps(b, a, float(m))
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn gt(a: V, b: V) -> V {
    _mm256_cmp_ps::<_CMP_GT_OQ>(a, b)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn lt(a: V, b: V) -> V {
    _mm256_cmp_ps::<_CMP_LT_OQ>(a, b)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn le(a: V, b: V) -> V {
    _mm256_cmp_ps::<_CMP_LE_OQ>(a, b)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn ge(a: V, b: V) -> V {
    _mm256_cmp_ps::<_CMP_GE_OQ>(a, b)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn eq(a: V, b: V) -> V {
    _mm256_cmp_ps::<_CMP_EQ_OQ>(a, b)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn or(a: V, b: V) -> V {
    _mm256_or_ps(a, b)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn and(a: V, b: V) -> V {
    _mm256_and_ps(a, b)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn andi(a: V, m: i32) -> V {
    _mm256_and_ps(a, float(si(m)))
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn xori(a: V, m: i32) -> V {
    _mm256_xor_ps(a, float(si(m)))
}
/// Lanes that are NaN (any sign, any payload).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn is_nan(x: V) -> V {
    _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn nan() -> V {
    float(si(CANON_NAN))
}
/// Lane mask: true where every lane in `m` is set.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn all(m: V) -> bool {
    _mm256_movemask_ps(m) == 0xff
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn none(m: V) -> bool {
    _mm256_movemask_ps(m) == 0
}

/// `numerics::ftz`: a denormal becomes the zero of its sign.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn ftz(x: V) -> V {
    let den = _mm256_cmpeq_epi32(_mm256_and_si256(bits(x), si(EXP_MASK)), _mm256_setzero_si256());
    seli(den, andi(x, SIGN), x)
}
/// Any NaN becomes the canonical NaN (other values unchanged).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn fix_nan(x: V) -> V {
    sel(is_nan(x), nan(), x)
}
/// `numerics::canon`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn canon(x: V) -> V {
    fix_nan(ftz(x))
}

/// `acc*t + c`: mul then add (strict) or one FMA (fast).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn madd<const F: bool>(acc: V, t: V, c: V) -> V {
    if F {
        _mm256_fmadd_ps(acc, t, c)
    } else {
        add(c, mul(acc, t))
    }
}

/// Horner's rule, highest coefficient first: `acc = c[i] + acc*t`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn horner<const F: bool>(t: V, c: &[f32]) -> V {
    let mut acc = splat(c[c.len() - 1]);
    for &ci in c[..c.len() - 1].iter().rev() {
        acc = madd::<F>(acc, t, splat(ci));
    }
    acc
}

// ---- max / min -------------------------------------------------------------------------------

/// `numerics::max`: NaN if either is NaN; equal values give the AND of the bits; else the larger.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn max(a: V, b: V) -> V {
    let (a, b) = (canon(a), canon(b));
    let r = sel(gt(a, b), a, b);
    let r = sel(eq(a, b), and(a, b), r);
    sel(_mm256_cmp_ps::<_CMP_UNORD_Q>(a, b), nan(), r)
}
/// `numerics::min`: as `max` mirrored (equal values give the OR of the bits).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn min(a: V, b: V) -> V {
    let (a, b) = (canon(a), canon(b));
    let r = sel(lt(a, b), a, b);
    let r = sel(eq(a, b), or(a, b), r);
    sel(_mm256_cmp_ps::<_CMP_UNORD_Q>(a, b), nan(), r)
}

// ---- division and square roots ---------------------------------------------------------------

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_field(x: V) -> I {
    _mm256_and_si256(_mm256_srli_epi32::<23>(bits(x)), si(0xff))
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn significand(x: V) -> V {
    float(_mm256_or_si256(_mm256_and_si256(bits(x), si(MANT)), si(ONE_BITS)))
}
/// `scale_bits`: `m * 2^k` through the exponent field, ±0 below FLT_MIN, ±inf above FLT_MAX.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn scale_bits(m: V, k: I, sign: I) -> V {
    let e = _mm256_add_epi32(exp_field(m), k);
    let over = _mm256_cmpgt_epi32(e, si(254));
    let under = _mm256_cmpgt_epi32(si(1), e);
    let normal = _mm256_or_si256(
        _mm256_or_si256(_mm256_and_si256(bits(m), si(MANT)), _mm256_slli_epi32::<23>(e)),
        sign,
    );
    let r = seli(over, float(_mm256_or_si256(si(INF_BITS), sign)), float(normal));
    seli(under, float(sign), r)
}
/// `ulps`: the ulp of `v` and the ulp just below `v`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn ulps(v: V) -> (V, V) {
    let e = exp_field(v);
    let up = float(_mm256_slli_epi32::<23>(_mm256_sub_epi32(e, si(23))));
    let below = float(_mm256_slli_epi32::<23>(_mm256_sub_epi32(e, si(24))));
    let pow2 = _mm256_cmpeq_epi32(_mm256_and_si256(bits(v), si(MANT)), _mm256_setzero_si256());
    (up, seli(pow2, below, up))
}
/// `two_prod`: Dekker's exact product (Veltkamp split with 4097).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn two_prod(a: V, b: V) -> (V, V) {
    let c = splat(4097.0);
    let t = mul(c, a);
    let ah = sub(t, sub(t, a));
    let al = sub(a, ah);
    let t = mul(c, b);
    let bh = sub(t, sub(t, b));
    let bl = sub(b, bh);
    let p = mul(a, b);
    let e = add(add(add(sub(mul(ah, bh), p), mul(ah, bl)), mul(al, bh)), mul(al, bl));
    (p, e)
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn recip_seed(m: V) -> V {
    let one = splat(1.0);
    let mut y = sub(splat(1.411_764_7), mul(splat(4.705_882_4e-1), m));
    for _ in 0..3 {
        let e = sub(one, mul(m, y));
        y = add(y, mul(y, e));
    }
    y
}

/// `numerics::div` (strict) or `vdivps` (fast).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn div<const F: bool>(a: V, b: V) -> V {
    if F {
        return fix_nan(_mm256_div_ps(a, b));
    }
    let (a, b) = (canon(a), canon(b));
    let any_nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(a, b);
    let sign = _mm256_and_si256(_mm256_xor_si256(bits(a), bits(b)), si(SIGN));
    let ua = _mm256_and_si256(bits(a), si(ABS));
    let ub = _mm256_and_si256(bits(b), si(ABS));
    let zero = _mm256_setzero_si256();
    let (a_zero, b_zero) = (float(_mm256_cmpeq_epi32(ua, zero)), float(_mm256_cmpeq_epi32(ub, zero)));
    let (a_inf, b_inf) =
        (float(_mm256_cmpeq_epi32(ua, si(INF_BITS))), float(_mm256_cmpeq_epi32(ub, si(INF_BITS))));
    let (ma, mb) = (significand(a), significand(b));
    let y = recip_seed(mb);
    let q0 = mul(ma, y);
    let (ph, pl) = two_prod(q0, mb);
    let r = sub(sub(ma, ph), pl);
    let q = add(q0, mul(r, y));
    let (ph, pl) = two_prod(q, mb);
    let r = sub(sub(ma, ph), pl);
    let (u, ud) = ulps(q);
    let half = splat(0.5);
    let up = gt(r, mul(mb, mul(half, u)));
    let down = gt(xori(r, SIGN), mul(mb, mul(half, ud)));
    let q = sel(up, add(q, u), sel(down, sub(q, ud), q));
    let mut res = scale_bits(q, _mm256_sub_epi32(exp_field(a), exp_field(b)), sign);
    // Special cases, lowest precedence first.
    res = sel(or(a_zero, b_inf), float(sign), res);
    res = sel(or(a_inf, b_zero), float(_mm256_or_si256(si(INF_BITS), sign)), res);
    let bad = or(any_nan, or(and(a_zero, b_zero), and(a_inf, b_inf)));
    sel(bad, nan(), res)
}

/// `numerics::recip` = `div(1, x)`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn recip<const F: bool>(x: V) -> V {
    div::<F>(splat(1.0), x)
}

/// `split_even`: `x = m * 4^h`, m in [1, 4).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn split_even(x: V) -> (V, I) {
    let e = _mm256_sub_epi32(exp_field(x), si(127));
    let odd = _mm256_and_si256(e, si(1));
    let m = float(_mm256_or_si256(
        _mm256_and_si256(bits(x), si(MANT)),
        _mm256_slli_epi32::<23>(_mm256_add_epi32(odd, si(127))),
    ));
    (m, _mm256_srai_epi32::<1>(_mm256_sub_epi32(e, odd)))
}
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn rsqrt_seed(m: V) -> V {
    let mut y = float(_mm256_sub_epi32(si(0x5f37_59df), _mm256_srli_epi32::<1>(bits(m))));
    let hm = mul(splat(0.5), m);
    for _ in 0..3 {
        y = mul(y, sub(splat(1.5), mul(mul(hm, y), y)));
    }
    y
}

/// `numerics::sqrt` (strict) or `vsqrtps` (fast).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn sqrt<const F: bool>(x: V) -> V {
    if F {
        return fix_nan(_mm256_sqrt_ps(x));
    }
    let x = canon(x);
    let b = bits(x);
    let zero = _mm256_setzero_si256();
    let abs = _mm256_and_si256(b, si(ABS));
    // NaN, ±0 and +inf return x itself; other negatives give NaN.
    let keep =
        or(or(is_nan(x), float(_mm256_cmpeq_epi32(abs, zero))), float(_mm256_cmpeq_epi32(b, si(INF_BITS))));
    let neg = float(_mm256_cmpgt_epi32(zero, b));
    let (m, h) = split_even(x);
    let y = rsqrt_seed(m);
    let s0 = mul(m, y);
    let (ph, pl) = two_prod(s0, s0);
    let r = sub(sub(m, ph), pl);
    let s = add(s0, mul(r, mul(splat(0.5), y)));
    let (ph, pl) = two_prod(s, s);
    let r = sub(sub(m, ph), pl);
    let (u, ud) = ulps(s);
    let up = gt(r, mul(s, u));
    let down = le(r, xori(mul(s, ud), SIGN));
    let s = sel(up, add(s, u), sel(down, sub(s, ud), s));
    let res = scale_bits(s, h, zero);
    sel(keep, x, sel(neg, nan(), res))
}

/// `numerics::rsqrt` (strict) or `1 / sqrt(x)` with hardware division and square root (fast,
/// two roundings: at most 1 ulp).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rsqrt<const F: bool>(x: V) -> V {
    if F {
        return fix_nan(_mm256_div_ps(splat(1.0), _mm256_sqrt_ps(x)));
    }
    let x = canon(x);
    let b = bits(x);
    let zero = _mm256_setzero_si256();
    let abs = _mm256_and_si256(b, si(ABS));
    let is_zero = float(_mm256_cmpeq_epi32(abs, zero));
    let neg = float(_mm256_cmpgt_epi32(zero, b));
    let pinf = float(_mm256_cmpeq_epi32(b, si(INF_BITS)));
    let (m, h) = split_even(x);
    let y = rsqrt_seed(m);
    let (yh, yl) = two_prod(y, y);
    let (ph, pl) = two_prod(m, yh);
    let e = sub(sub(sub(splat(1.0), ph), pl), mul(m, yl));
    let z = add(y, mul(y, mul(splat(0.5), e)));
    let mut res = scale_bits(z, _mm256_sub_epi32(zero, h), zero);
    res = sel(pinf, _mm256_setzero_ps(), res);
    res = sel(neg, nan(), res);
    res = sel(is_zero, float(_mm256_or_si256(si(INF_BITS), b)), res);
    sel(is_nan(x), nan(), res)
}

// ---- transcendental --------------------------------------------------------------------------

const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
const LOG2E: f32 = std::f32::consts::LOG2_E;
const MAGIC: f32 = 12_582_912.0;
const EXP_C: [f32; 6] = [5e-1, 1.666_666_7e-1, 4.166_666_8e-2, 8.333_334e-3, 1.388_888_9e-3, 1.984_127e-4];

/// `numerics::exp`. Fast: the same reduction and polynomial with FMA (about 1 ulp).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn exp<const F: bool>(x: V) -> V {
    let x = canon(x);
    let magic = splat(MAGIC);
    let (k, r) = if F {
        let k = sub(_mm256_fmadd_ps(x, splat(LOG2E), magic), magic);
        let r = _mm256_fnmadd_ps(k, splat(LN2_HI), x);
        (k, _mm256_fnmadd_ps(k, splat(LN2_LO), r))
    } else {
        let k = sub(add(mul(x, splat(LOG2E)), magic), magic);
        (k, sub(sub(x, mul(k, splat(LN2_HI))), mul(k, splat(LN2_LO))))
    };
    let q = horner::<F>(r, &EXP_C);
    let m = add(splat(1.0), madd::<F>(mul(r, r), q, r));
    let e = _mm256_add_epi32(exp_field(m), _mm256_cvttps_epi32(k));
    let over = float(_mm256_cmpgt_epi32(e, si(254)));
    let under = float(_mm256_cmpgt_epi32(si(1), e));
    let mut res = float(_mm256_or_si256(_mm256_and_si256(bits(m), si(MANT)), _mm256_slli_epi32::<23>(e)));
    let inf = float(si(INF_BITS));
    res = sel(over, inf, res);
    res = sel(under, _mm256_setzero_ps(), res);
    res = sel(lt(x, splat(-104.0)), _mm256_setzero_ps(), res);
    res = sel(gt(x, splat(88.8)), inf, res);
    sel(is_nan(x), nan(), res)
}

const LOG_C: [f32; 5] = [6.666_667e-1, 4e-1, 2.857_143e-1, 2.222_222_2e-1, 1.818_181_9e-1];

/// `numerics::log`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn log<const F: bool>(x: V) -> V {
    let x = canon(x);
    let b = bits(x);
    let zero = _mm256_setzero_si256();
    let e = _mm256_sub_epi32(exp_field(x), si(127));
    let mb = _mm256_and_si256(b, si(MANT));
    let big = _mm256_cmpgt_epi32(mb, si(0x0035_04f2));
    // big: exponent 126 and k = e + 1; else exponent 127 and k = e (big is -1 where set).
    let m = float(_mm256_or_si256(mb, _mm256_slli_epi32::<23>(_mm256_add_epi32(si(127), big))));
    let k = _mm256_sub_epi32(e, big);
    let one = splat(1.0);
    let f = sub(m, one);
    let s = div::<F>(f, add(splat(2.0), f));
    let z = mul(s, s);
    let r = mul(z, horner::<F>(z, &LOG_C));
    let hf = mul(mul(splat(0.5), f), f);
    let dk = _mm256_cvtepi32_ps(k);
    let res = if F {
        let t = _mm256_fmadd_ps(s, add(hf, r), mul(dk, splat(LN2_LO)));
        _mm256_fmsub_ps(dk, splat(LN2_HI), sub(sub(hf, t), f))
    } else {
        sub(mul(dk, splat(LN2_HI)), sub(sub(hf, add(mul(s, add(hf, r)), mul(dk, splat(LN2_LO)))), f))
    };
    let abs = _mm256_and_si256(b, si(ABS));
    let mut res = sel(float(_mm256_cmpeq_epi32(b, si(INF_BITS))), x, res);
    res = sel(float(_mm256_cmpgt_epi32(zero, b)), nan(), res);
    res = sel(float(_mm256_cmpeq_epi32(abs, zero)), splat(f32::NEG_INFINITY), res);
    sel(is_nan(x), nan(), res)
}

const TANH_C: [f32; 6] =
    [-3.333_333e-1, 1.333_329_5e-1, -5.395_978e-2, 2.178_369e-2, -8.416_563e-3, 2.398_743e-3];

/// `numerics::tanh`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn tanh<const F: bool>(x: V) -> V {
    let x = canon(x);
    let a = andi(x, ABS);
    let small = lt(a, splat(0.55));
    let one = splat(1.0);
    // Both branches give the same lanes whether or not the other is computed, so a branch no
    // lane needs is skipped.
    let t_small = if none(small) {
        one
    } else {
        let u = mul(a, a);
        madd::<F>(mul(a, u), horner::<F>(u, &TANH_C), a)
    };
    let t_big = if all(small) {
        one
    } else {
        let e = exp::<F>(mul(splat(2.0), a));
        sub(one, div::<F>(splat(2.0), add(e, one)))
    };
    let t = sel(small, t_small, t_big);
    let res = or(t, andi(x, SIGN));
    sel(is_nan(x), nan(), res)
}

/// `numerics::sigmoid`: `recip(1 + exp(-x))`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn sigmoid<const F: bool>(x: V) -> V {
    // neg: the canonical value with the sign flipped (a NaN stays a NaN; exp canonicalizes it).
    let nx = xori(canon(x), SIGN);
    recip::<F>(add(splat(1.0), exp::<F>(nx)))
}

const ERF_SMALL: [f32; 7] = [
    1.283_791_7e-1,
    -3.761_263_5e-1,
    1.128_373_7e-1,
    -2.686_178e-2,
    5.207_232e-3,
    -8.216_693e-4,
    8.699_595e-5,
];
const ERFC_LO: [f32; 4] = [0.875, 1.375, 2.0, 2.75];
const ERFC_MID: [f32; 4] = [1.125, 1.687_5, 2.375, 3.312_5];
const ERFC_C: [[f32; 9]; 4] = [
    [
        1.116_117_7e-1,
        -3.182_739_6e-1,
        3.580_582e-1,
        -1.624_523e-1,
        -2.797_358_7e-2,
        6.132_123e-2,
        -1.552_522_5e-2,
        -9.554_503_5e-3,
        5.837_771_6e-3,
    ],
    [
        1.701_028_3e-2,
        -6.542_348e-2,
        1.104_021_2e-1,
        -1.023_950_65e-1,
        4.959_511_4e-2,
        -2.739_518_2e-3,
        -1.168_413_3e-2,
        6.031_171e-3,
        -4.096_219_3e-5,
    ],
    [
        7.829_382e-4,
        -4.006_482e-3,
        9.515_388e-3,
        -1.373_010_8e-2,
        1.313_307e-2,
        -8.368_337e-3,
        3.116_624_4e-3,
        -1.870_840_6e-5,
        -6.132_808e-4,
    ],
    [
        2.805_343_7e-6,
        -1.936_040_1e-5,
        6.415_335e-5,
        -1.355_591_1e-4,
        2.026_705_8e-4,
        -2.240_153_1e-4,
        1.968_293_5e-4,
        -1.491_355e-4,
        7.019_898e-5,
    ],
];

/// Per-lane table look-up: lane i gets `t[idx[i]]` (idx in 0..4).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn pick(t: [f32; 4], idx: I) -> V {
    _mm256_permutevar8x32_ps(_mm256_setr_ps(t[0], t[1], t[2], t[3], 0.0, 0.0, 0.0, 0.0), idx)
}

/// `numerics::erf`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn erf<const F: bool>(x: V) -> V {
    let x = canon(x);
    let a = andi(x, ABS);
    let one = splat(1.0);
    let tiny = lt(a, splat(6.103_515_6e-5));
    let small = lt(a, splat(0.875));
    let mid = lt(a, splat(3.875));
    let mut y = one;
    if !none(mid) {
        // Piece index: how many of ERFC_LO[1..] are <= a (-1 per true compare, then negated).
        let m1 = bits(ge(a, splat(ERFC_LO[1])));
        let m2 = bits(ge(a, splat(ERFC_LO[2])));
        let m3 = bits(ge(a, splat(ERFC_LO[3])));
        let idx = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_add_epi32(_mm256_add_epi32(m1, m2), m3));
        let t = sub(a, pick(ERFC_MID, idx));
        let col = |j: usize| [ERFC_C[0][j], ERFC_C[1][j], ERFC_C[2][j], ERFC_C[3][j]];
        let mut acc = pick(col(8), idx);
        for j in (0..8).rev() {
            acc = madd::<F>(acc, t, pick(col(j), idx));
        }
        y = sel(mid, sub(one, acc), y);
    }
    if !none(small) {
        let u = mul(a, a);
        y = sel(small, madd::<F>(a, horner::<F>(u, &ERF_SMALL), a), y);
    }
    if !none(tiny) {
        let b = mul(splat(8.0), a);
        y = sel(tiny, mul(splat(0.125), madd::<F>(b, splat(ERF_SMALL[0]), b)), y);
    }
    let res = or(y, andi(x, SIGN));
    sel(is_nan(x), nan(), res)
}

/// `numerics::gelu`: `(0.5*x) * (1 + erf(x*FRAC_1_SQRT_2))`, `gelu(-inf) = -0`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn gelu<const F: bool>(x: V) -> V {
    let x = canon(x);
    let h = mul(splat(0.5), x);
    let e = erf::<F>(mul(x, splat(std::f32::consts::FRAC_1_SQRT_2)));
    let r = if F { _mm256_fmadd_ps(h, e, h) } else { mul(h, add(splat(1.0), e)) };
    let r = sel(eq(x, splat(f32::NEG_INFINITY)), splat(-0.0), r);
    fix_nan(r)
}

/// `max(x, 0)` with NaN propagated (`reference::relu`).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn relu(x: V) -> V {
    max(x, _mm256_setzero_ps())
}

/// `reference` Neg: `canon(-canon(x))`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn neg(x: V) -> V {
    fix_nan(xori(ftz(x), SIGN))
}

/// `reference` Abs: `canon(canon(x).abs())`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn abs(x: V) -> V {
    andi(canon(x), ABS)
}
