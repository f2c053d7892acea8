//! The `numerics` algorithms on vectors, written once over [`Lanes`] (AVX2: 8 lanes, AVX-512:
//! 16 lanes; lanes are independent, so both widths give the same bits per lane).
//!
//! Every function is generic over `F` (the tier): `F = false` is the strict tier and repeats the
//! scalar algorithm of `crate::numerics` step for step — the same constants, the same operation
//! order, plain multiply then add (never FMA), the scalar branches done as lane masks and
//! blends — so that, with MXCSR FTZ+DAZ set (see `fpenv`), each lane gives exactly the scalar
//! bits. Plain IEEE add/sub/mul under FTZ+DAZ *are* the strict operations, so only NaN
//! canonicalization and the explicit input flush before bit inspection are repeated here.
//!
//! `F = true` is the fast tier: FMA in polynomials and Cody-Waite reductions, and hardware
//! division and square root (correctly rounded IEEE, flushed) instead of the Newton sequences.
//! It is deterministic (no data-dependent or thread-dependent choices) but not bit-equal to
//! strict. The fast tier's bits may differ between vector widths only where FMA contraction
//! differs, and it does not: each step is the same instruction per lane at both widths.
//!
//! All functions are `#[inline(always)]` and `unsafe` for the reason [`Lanes`] methods are:
//! they must run inlined into a function compiled for the width (see `lanes`).

#![allow(clippy::excessive_precision)]

use super::lanes::Lanes;

const SIGN: i32 = 0x8000_0000u32 as i32;
const ABS: i32 = 0x7fff_ffff;
const EXP_MASK: i32 = 0x7f80_0000;
const MANT: i32 = 0x007f_ffff;
const ONE_BITS: i32 = 0x3f80_0000;
const INF_BITS: i32 = 0x7f80_0000;
const CANON_NAN: i32 = 0x7fc0_0000;

// ---- small helpers ---------------------------------------------------------------------------

#[inline(always)]
unsafe fn andi<L: Lanes>(a: L, m: i32) -> L {
    L::and(a, L::float(L::si(m)))
}
#[inline(always)]
unsafe fn xori<L: Lanes>(a: L, m: i32) -> L {
    L::xor(a, L::float(L::si(m)))
}
/// Lanes that are NaN (any sign, any payload).
#[inline(always)]
unsafe fn is_nan<L: Lanes>(x: L) -> L::M {
    L::unord(x, x)
}
#[inline(always)]
unsafe fn nan<L: Lanes>() -> L {
    L::float(L::si(CANON_NAN))
}

/// `numerics::ftz`: a denormal becomes the zero of its sign.
#[inline(always)]
pub(super) unsafe fn ftz<L: Lanes>(x: L) -> L {
    let den = L::ieq(L::iand(L::bits(x), L::si(EXP_MASK)), L::si(0));
    L::sel(den, andi(x, SIGN), x)
}
/// Any NaN becomes the canonical NaN (other values unchanged).
#[inline(always)]
pub(super) unsafe fn fix_nan<L: Lanes>(x: L) -> L {
    L::sel(is_nan(x), nan::<L>(), x)
}
/// `numerics::canon`.
#[inline(always)]
pub(super) unsafe fn canon<L: Lanes>(x: L) -> L {
    fix_nan(ftz(x))
}

/// `acc*t + c`: mul then add (strict) or one FMA (fast).
#[inline(always)]
unsafe fn madd<L: Lanes, const F: bool>(acc: L, t: L, c: L) -> L {
    if F {
        L::fmadd(acc, t, c)
    } else {
        L::add(c, L::mul(acc, t))
    }
}

/// Horner's rule, highest coefficient first: `acc = c[i] + acc*t`.
#[inline(always)]
unsafe fn horner<L: Lanes, const F: bool>(t: L, c: &[f32]) -> L {
    let mut acc = L::splat(c[c.len() - 1]);
    for &ci in c[..c.len() - 1].iter().rev() {
        acc = madd::<L, F>(acc, t, L::splat(ci));
    }
    acc
}

// ---- max / min -------------------------------------------------------------------------------

/// `numerics::max`: NaN if either is NaN; equal values give the AND of the bits; else the larger.
#[inline(always)]
pub(super) unsafe fn max<L: Lanes>(a: L, b: L) -> L {
    let (a, b) = (canon(a), canon(b));
    let r = L::sel(L::gt(a, b), a, b);
    let r = L::sel(L::eq(a, b), L::and(a, b), r);
    L::sel(L::unord(a, b), nan::<L>(), r)
}
/// `numerics::min`: as `max` mirrored (equal values give the OR of the bits).
#[inline(always)]
pub(super) unsafe fn min<L: Lanes>(a: L, b: L) -> L {
    let (a, b) = (canon(a), canon(b));
    let r = L::sel(L::lt(a, b), a, b);
    let r = L::sel(L::eq(a, b), L::or(a, b), r);
    L::sel(L::unord(a, b), nan::<L>(), r)
}

// ---- division and square roots ---------------------------------------------------------------

#[inline(always)]
unsafe fn exp_field<L: Lanes>(x: L) -> L::I {
    L::iand(L::srl23(L::bits(x)), L::si(0xff))
}
#[inline(always)]
unsafe fn significand<L: Lanes>(x: L) -> L {
    L::float(L::ior(L::iand(L::bits(x), L::si(MANT)), L::si(ONE_BITS)))
}
/// `scale_bits`: `m * 2^k` through the exponent field, ±0 below FLT_MIN, ±inf above FLT_MAX.
#[inline(always)]
unsafe fn scale_bits<L: Lanes>(m: L, k: L::I, sign: L::I) -> L {
    let e = L::iadd(exp_field(m), k);
    let over = L::igt(e, L::si(254));
    let under = L::igt(L::si(1), e);
    let normal = L::ior(L::ior(L::iand(L::bits(m), L::si(MANT)), L::sll23(e)), sign);
    let r = L::sel(over, L::float(L::ior(L::si(INF_BITS), sign)), L::float(normal));
    L::sel(under, L::float(sign), r)
}
/// `ulps`: the ulp of `v` and the ulp just below `v`.
#[inline(always)]
unsafe fn ulps<L: Lanes>(v: L) -> (L, L) {
    let e = exp_field(v);
    let up = L::float(L::sll23(L::isub(e, L::si(23))));
    let below = L::float(L::sll23(L::isub(e, L::si(24))));
    let pow2 = L::ieq(L::iand(L::bits(v), L::si(MANT)), L::si(0));
    (up, L::sel(pow2, below, up))
}
/// `two_prod`: Dekker's exact product (Veltkamp split with 4097).
#[inline(always)]
unsafe fn two_prod<L: Lanes>(a: L, b: L) -> (L, L) {
    let c = L::splat(4097.0);
    let t = L::mul(c, a);
    let ah = L::sub(t, L::sub(t, a));
    let al = L::sub(a, ah);
    let t = L::mul(c, b);
    let bh = L::sub(t, L::sub(t, b));
    let bl = L::sub(b, bh);
    let p = L::mul(a, b);
    let e = L::add(L::add(L::add(L::sub(L::mul(ah, bh), p), L::mul(ah, bl)), L::mul(al, bh)), L::mul(al, bl));
    (p, e)
}
#[inline(always)]
unsafe fn recip_seed<L: Lanes>(m: L) -> L {
    let one = L::splat(1.0);
    let mut y = L::sub(L::splat(1.411_764_7), L::mul(L::splat(4.705_882_4e-1), m));
    for _ in 0..3 {
        let e = L::sub(one, L::mul(m, y));
        y = L::add(y, L::mul(y, e));
    }
    y
}

/// `numerics::div` (strict) or `vdivps` (fast).
#[inline(always)]
pub(super) unsafe fn div<L: Lanes, const F: bool>(a: L, b: L) -> L {
    if F {
        return fix_nan(L::div_hw(a, b));
    }
    let (a, b) = (canon(a), canon(b));
    let any_nan = L::unord(a, b);
    let sign = L::iand(L::ixor(L::bits(a), L::bits(b)), L::si(SIGN));
    let ua = L::iand(L::bits(a), L::si(ABS));
    let ub = L::iand(L::bits(b), L::si(ABS));
    let zero = L::si(0);
    let (a_zero, b_zero) = (L::ieq(ua, zero), L::ieq(ub, zero));
    let (a_inf, b_inf) = (L::ieq(ua, L::si(INF_BITS)), L::ieq(ub, L::si(INF_BITS)));
    let (ma, mb) = (significand(a), significand(b));
    let y = recip_seed(mb);
    let q0 = L::mul(ma, y);
    let (ph, pl) = two_prod(q0, mb);
    let r = L::sub(L::sub(ma, ph), pl);
    let q = L::add(q0, L::mul(r, y));
    let (ph, pl) = two_prod(q, mb);
    let r = L::sub(L::sub(ma, ph), pl);
    let (u, ud) = ulps(q);
    let half = L::splat(0.5);
    let up = L::gt(r, L::mul(mb, L::mul(half, u)));
    let down = L::gt(xori(r, SIGN), L::mul(mb, L::mul(half, ud)));
    let q = L::sel(up, L::add(q, u), L::sel(down, L::sub(q, ud), q));
    let mut res = scale_bits(q, L::isub(exp_field(a), exp_field(b)), sign);
    // Special cases, lowest precedence first.
    res = L::sel(L::mor(a_zero, b_inf), L::float(sign), res);
    res = L::sel(L::mor(a_inf, b_zero), L::float(L::ior(L::si(INF_BITS), sign)), res);
    let bad = L::mor(any_nan, L::mor(L::mand(a_zero, b_zero), L::mand(a_inf, b_inf)));
    L::sel(bad, nan::<L>(), res)
}

/// `numerics::recip` = `div(1, x)`.
#[inline(always)]
pub(super) unsafe fn recip<L: Lanes, const F: bool>(x: L) -> L {
    div::<L, F>(L::splat(1.0), x)
}

/// `split_even`: `x = m * 4^h`, m in [1, 4).
#[inline(always)]
unsafe fn split_even<L: Lanes>(x: L) -> (L, L::I) {
    let e = L::isub(exp_field(x), L::si(127));
    let odd = L::iand(e, L::si(1));
    let m = L::float(L::ior(L::iand(L::bits(x), L::si(MANT)), L::sll23(L::iadd(odd, L::si(127)))));
    (m, L::sra1(L::isub(e, odd)))
}
#[inline(always)]
unsafe fn rsqrt_seed<L: Lanes>(m: L) -> L {
    let mut y = L::float(L::isub(L::si(0x5f37_59df), L::srl1(L::bits(m))));
    let hm = L::mul(L::splat(0.5), m);
    for _ in 0..3 {
        y = L::mul(y, L::sub(L::splat(1.5), L::mul(L::mul(hm, y), y)));
    }
    y
}

/// `numerics::sqrt` (strict) or `vsqrtps` (fast).
#[inline(always)]
pub(super) unsafe fn sqrt<L: Lanes, const F: bool>(x: L) -> L {
    if F {
        return fix_nan(L::sqrt_hw(x));
    }
    let x = canon(x);
    let b = L::bits(x);
    let zero = L::si(0);
    let abs = L::iand(b, L::si(ABS));
    // NaN, ±0 and +inf return x itself; other negatives give NaN.
    let keep = L::mor(L::mor(is_nan(x), L::ieq(abs, zero)), L::ieq(b, L::si(INF_BITS)));
    let neg = L::igt(zero, b);
    let (m, h) = split_even(x);
    let y = rsqrt_seed(m);
    let s0 = L::mul(m, y);
    let (ph, pl) = two_prod(s0, s0);
    let r = L::sub(L::sub(m, ph), pl);
    let s = L::add(s0, L::mul(r, L::mul(L::splat(0.5), y)));
    let (ph, pl) = two_prod(s, s);
    let r = L::sub(L::sub(m, ph), pl);
    let (u, ud) = ulps(s);
    let up = L::gt(r, L::mul(s, u));
    let down = L::le(r, xori(L::mul(s, ud), SIGN));
    let s = L::sel(up, L::add(s, u), L::sel(down, L::sub(s, ud), s));
    let res = scale_bits(s, h, zero);
    L::sel(keep, x, L::sel(neg, nan::<L>(), res))
}

/// `numerics::rsqrt` (strict) or `1 / sqrt(x)` with hardware division and square root (fast,
/// two roundings: at most 1 ulp).
#[inline(always)]
pub(super) unsafe fn rsqrt<L: Lanes, const F: bool>(x: L) -> L {
    if F {
        return fix_nan(L::div_hw(L::splat(1.0), L::sqrt_hw(x)));
    }
    let x = canon(x);
    let b = L::bits(x);
    let zero = L::si(0);
    let abs = L::iand(b, L::si(ABS));
    let is_zero = L::ieq(abs, zero);
    let neg = L::igt(zero, b);
    let pinf = L::ieq(b, L::si(INF_BITS));
    let (m, h) = split_even(x);
    let y = rsqrt_seed(m);
    let (yh, yl) = two_prod(y, y);
    let (ph, pl) = two_prod(m, yh);
    let e = L::sub(L::sub(L::sub(L::splat(1.0), ph), pl), L::mul(m, yl));
    let z = L::add(y, L::mul(y, L::mul(L::splat(0.5), e)));
    // numerics::RSQRT_UP: one ulp up for the two significands where z rounds the wrong way.
    let mb = L::bits(m);
    let [u0, u1] = crate::numerics::RSQRT_UP;
    let up = L::mor(L::ieq(mb, L::si(u0 as i32)), L::ieq(mb, L::si(u1 as i32)));
    let z = L::sel(up, L::float(L::iadd(L::bits(z), L::si(1))), z);
    let mut res = scale_bits(z, L::isub(zero, h), zero);
    res = L::sel(pinf, L::zero(), res);
    res = L::sel(neg, nan::<L>(), res);
    res = L::sel(is_zero, L::float(L::ior(L::si(INF_BITS), b)), res);
    L::sel(is_nan(x), nan::<L>(), res)
}

// ---- transcendental --------------------------------------------------------------------------

const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
const LOG2E: f32 = std::f32::consts::LOG2_E;
const MAGIC: f32 = 12_582_912.0;
const EXP_C: [f32; 6] = [5e-1, 1.666_666_7e-1, 4.166_666_8e-2, 8.333_334e-3, 1.388_888_9e-3, 1.984_127e-4];

/// `numerics::exp`. Fast: the same reduction and polynomial with FMA (about 1 ulp).
#[inline(always)]
pub(super) unsafe fn exp<L: Lanes, const F: bool>(x: L) -> L {
    let x = canon(x);
    let magic = L::splat(MAGIC);
    let (k, r) = if F {
        let k = L::sub(L::fmadd(x, L::splat(LOG2E), magic), magic);
        let r = L::fnmadd(k, L::splat(LN2_HI), x);
        (k, L::fnmadd(k, L::splat(LN2_LO), r))
    } else {
        let k = L::sub(L::add(L::mul(x, L::splat(LOG2E)), magic), magic);
        (k, L::sub(L::sub(x, L::mul(k, L::splat(LN2_HI))), L::mul(k, L::splat(LN2_LO))))
    };
    let q = horner::<L, F>(r, &EXP_C);
    let m = L::add(L::splat(1.0), madd::<L, F>(L::mul(r, r), q, r));
    let e = L::iadd(exp_field(m), L::to_i(k));
    let over = L::igt(e, L::si(254));
    let under = L::igt(L::si(1), e);
    let mut res = L::float(L::ior(L::iand(L::bits(m), L::si(MANT)), L::sll23(e)));
    let inf = L::float(L::si(INF_BITS));
    res = L::sel(over, inf, res);
    res = L::sel(under, L::zero(), res);
    res = L::sel(L::lt(x, L::splat(-104.0)), L::zero(), res);
    res = L::sel(L::gt(x, L::splat(88.8)), inf, res);
    L::sel(is_nan(x), nan::<L>(), res)
}

const LOG_C: [f32; 5] = [6.666_667e-1, 4e-1, 2.857_143e-1, 2.222_222_2e-1, 1.818_181_9e-1];

/// `numerics::log`.
#[inline(always)]
pub(super) unsafe fn log<L: Lanes, const F: bool>(x: L) -> L {
    let x = canon(x);
    let b = L::bits(x);
    let zero = L::si(0);
    let e = L::isub(exp_field(x), L::si(127));
    let mb = L::iand(b, L::si(MANT));
    // big (1 where set): exponent 126 and k = e + 1; else exponent 127 and k = e.
    let big = L::imask(L::igt(mb, L::si(0x0035_04f2)), L::si(1));
    let m = L::float(L::ior(mb, L::sll23(L::isub(L::si(127), big))));
    let k = L::iadd(e, big);
    let one = L::splat(1.0);
    let f = L::sub(m, one);
    let s = div::<L, F>(f, L::add(L::splat(2.0), f));
    let z = L::mul(s, s);
    let r = L::mul(z, horner::<L, F>(z, &LOG_C));
    let hf = L::mul(L::mul(L::splat(0.5), f), f);
    let dk = L::from_i(k);
    let res = if F {
        let t = L::fmadd(s, L::add(hf, r), L::mul(dk, L::splat(LN2_LO)));
        L::fmsub(dk, L::splat(LN2_HI), L::sub(L::sub(hf, t), f))
    } else {
        L::sub(
            L::mul(dk, L::splat(LN2_HI)),
            L::sub(L::sub(hf, L::add(L::mul(s, L::add(hf, r)), L::mul(dk, L::splat(LN2_LO)))), f),
        )
    };
    let abs = L::iand(b, L::si(ABS));
    let mut res = L::sel(L::ieq(b, L::si(INF_BITS)), x, res);
    res = L::sel(L::igt(zero, b), nan::<L>(), res);
    res = L::sel(L::ieq(abs, zero), L::splat(f32::NEG_INFINITY), res);
    L::sel(is_nan(x), nan::<L>(), res)
}

const TANH_C: [f32; 6] =
    [-3.333_333e-1, 1.333_329_5e-1, -5.395_978e-2, 2.178_369e-2, -8.416_563e-3, 2.398_743e-3];

/// `numerics::tanh`.
#[inline(always)]
pub(super) unsafe fn tanh<L: Lanes, const F: bool>(x: L) -> L {
    let x = canon(x);
    let a = andi(x, ABS);
    let small = L::lt(a, L::splat(0.55));
    let one = L::splat(1.0);
    // Both branches give the same lanes whether or not the other is computed, so a branch no
    // lane needs is skipped.
    let t_small = if L::none(small) {
        one
    } else {
        let u = L::mul(a, a);
        madd::<L, F>(L::mul(a, u), horner::<L, F>(u, &TANH_C), a)
    };
    let t_big = if L::all(small) {
        one
    } else {
        let e = exp::<L, F>(L::mul(L::splat(2.0), a));
        L::sub(one, div::<L, F>(L::splat(2.0), L::add(e, one)))
    };
    let t = L::sel(small, t_small, t_big);
    let res = L::or(t, andi(x, SIGN));
    L::sel(is_nan(x), nan::<L>(), res)
}

/// `numerics::sigmoid`: `recip(1 + exp(-x))`.
#[inline(always)]
pub(super) unsafe fn sigmoid<L: Lanes, const F: bool>(x: L) -> L {
    // neg: the canonical value with the sign flipped (a NaN stays a NaN; exp canonicalizes it).
    let nx = xori(canon(x), SIGN);
    recip::<L, F>(L::add(L::splat(1.0), exp::<L, F>(nx)))
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
#[inline(always)]
unsafe fn pick<L: Lanes>(t: [f32; 4], idx: L::I) -> L {
    L::pick(t, idx)
}

/// `numerics::erf`.
#[inline(always)]
pub(super) unsafe fn erf<L: Lanes, const F: bool>(x: L) -> L {
    let x = canon(x);
    let a = andi(x, ABS);
    let one = L::splat(1.0);
    let tiny = L::lt(a, L::splat(6.103_515_6e-5));
    let small = L::lt(a, L::splat(0.875));
    let mid = L::lt(a, L::splat(3.875));
    let mut y = one;
    if !L::none(mid) {
        // Piece index: how many of ERFC_LO[1..] are <= a.
        let one_i = L::si(1);
        let m1 = L::imask(L::ge(a, L::splat(ERFC_LO[1])), one_i);
        let m2 = L::imask(L::ge(a, L::splat(ERFC_LO[2])), one_i);
        let m3 = L::imask(L::ge(a, L::splat(ERFC_LO[3])), one_i);
        let idx = L::iadd(L::iadd(m1, m2), m3);
        let t = L::sub(a, pick(ERFC_MID, idx));
        let col = |j: usize| [ERFC_C[0][j], ERFC_C[1][j], ERFC_C[2][j], ERFC_C[3][j]];
        let mut acc = pick(col(8), idx);
        for j in (0..8).rev() {
            acc = madd::<L, F>(acc, t, pick(col(j), idx));
        }
        y = L::sel(mid, L::sub(one, acc), y);
    }
    if !L::none(small) {
        let u = L::mul(a, a);
        y = L::sel(small, madd::<L, F>(a, horner::<L, F>(u, &ERF_SMALL), a), y);
    }
    if !L::none(tiny) {
        let b = L::mul(L::splat(8.0), a);
        y = L::sel(tiny, L::mul(L::splat(0.125), madd::<L, F>(b, L::splat(ERF_SMALL[0]), b)), y);
    }
    let res = L::or(y, andi(x, SIGN));
    L::sel(is_nan(x), nan::<L>(), res)
}

/// `numerics::gelu`: `(0.5*x) * (1 + erf(x*FRAC_1_SQRT_2))`, `gelu(-inf) = -0`.
#[inline(always)]
pub(super) unsafe fn gelu<L: Lanes, const F: bool>(x: L) -> L {
    let x = canon(x);
    let h = L::mul(L::splat(0.5), x);
    let e = erf::<L, F>(L::mul(x, L::splat(std::f32::consts::FRAC_1_SQRT_2)));
    let r = if F { L::fmadd(h, e, h) } else { L::mul(h, L::add(L::splat(1.0), e)) };
    let r = L::sel(L::eq(x, L::splat(f32::NEG_INFINITY)), L::splat(-0.0), r);
    fix_nan(r)
}

/// `numerics::silu`: `x * sigmoid(x)`, `silu(-inf) = -0`.
#[inline(always)]
pub(super) unsafe fn silu<L: Lanes, const F: bool>(x: L) -> L {
    let x = canon(x);
    let r = L::mul(x, sigmoid::<L, F>(x));
    let r = L::sel(L::eq(x, L::splat(f32::NEG_INFINITY)), L::splat(-0.0), r);
    fix_nan(r)
}

/// `max(x, 0)` with NaN propagated (`reference::relu`).
#[inline(always)]
pub(super) unsafe fn relu<L: Lanes>(x: L) -> L {
    max(x, L::zero())
}

/// `reference` Neg: `canon(-canon(x))`.
#[inline(always)]
pub(super) unsafe fn neg<L: Lanes>(x: L) -> L {
    fix_nan(xori(ftz(x), SIGN))
}

/// `reference` Abs: `canon(canon(x).abs())`.
#[inline(always)]
pub(super) unsafe fn abs<L: Lanes>(x: L) -> L {
    andi(canon(x), ABS)
}
