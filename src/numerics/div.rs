//! Strict division, reciprocal, square root and reciprocal square root, built only from the
//! flushed add/sub/mul, comparisons, selects and integer operations on the bits.
//!
//! All four work on the significand scaled into a fixed interval (`[1, 2)` or `[1, 4)`), refine a
//! seed with a fixed number of Newton steps, then apply one *exact-residual* correction
//! (the residual comes from Dekker's exact product, so it carries ~48 bits), and finally put the
//! exponent back with integer arithmetic. Putting the exponent back with integers, not a multiply,
//! makes overflow and underflow explicit: a result whose (24-bit rounded) significand times 2^E
//! is below `FLT_MIN` is ±0, above `FLT_MAX` is ±inf.

use super::ops::{add, canon, is_nan_bits, mul, nan, neg, sub, two_prod};

const SIGN: u32 = 0x8000_0000;
const MANT: u32 = 0x007f_ffff;
const ONE_BITS: u32 = 0x3f80_0000;

/// Biased exponent field of a (canonical, finite, normal) value.
#[inline(always)]
fn exp_field(x: f32) -> i32 {
    ((x.to_bits() >> 23) & 0xff) as i32
}

/// The significand of a normal value as a float in `[1, 2)`: keep the mantissa bits, exponent 127.
#[inline(always)]
fn significand(x: f32) -> f32 {
    f32::from_bits((x.to_bits() & MANT) | ONE_BITS)
}

/// `m * 2^k` for `m` positive normal, by adding `k` to the exponent field; ±0 below `FLT_MIN`,
/// +inf above `FLT_MAX` (the sign is applied by the caller with `sign`).
#[inline(always)]
fn scale_bits(m: f32, k: i32, sign: u32) -> f32 {
    let e = exp_field(m) + k;
    if e >= 255 {
        f32::from_bits(0x7f80_0000 | sign)
    } else if e <= 0 {
        f32::from_bits(sign)
    } else {
        f32::from_bits((m.to_bits() & MANT) | ((e as u32) << 23) | sign)
    }
}

/// The ulp of a positive normal `v` (`2^(expfield(v) - 150)`, normal for the `v` used here), and
/// the ulp just below `v` (half as large when `v` is a power of two).
#[inline(always)]
fn ulps(v: f32) -> (f32, f32) {
    let e = (v.to_bits() >> 23) & 0xff;
    let up = f32::from_bits((e - 23) << 23);
    let down = if v.to_bits() & MANT == 0 { f32::from_bits((e - 24) << 23) } else { up };
    (up, down)
}

/// `1/m` for `m` in `[1, 2)`, within ~1 ulp (before the caller's exact correction).
///
/// ```text
/// y = 24/17 - (8/17)*m                    linear seed, relative error <= 1/17
/// repeat 3 times: e = 1 - m*y; y = y + y*e   (Newton; 1/17 -> 3.5e-3 -> 1.2e-5 -> 1.4e-10)
/// ```
#[inline(always)]
fn recip_seed(m: f32) -> f32 {
    const C0: f32 = 1.411_764_7; // 24/17
    const C1: f32 = 4.705_882_4e-1; // 8/17
    let mut y = sub(C0, mul(C1, m));
    for _ in 0..3 {
        let e = sub(1.0, mul(m, y));
        y = add(y, mul(y, e));
    }
    y
}

/// Strict division `a / b`.
///
/// Special cases (inputs canonicalized first, so denormals are zeros): NaN in -> NaN;
/// `0/0`, `inf/inf` -> NaN; `x/0` -> ±inf; `inf/x` -> ±inf; `x/inf` -> ±0; `0/x` -> ±0, the sign
/// being the XOR of the signs. Otherwise, with `a = ma*2^ea`, `b = mb*2^eb`, `ma, mb` in `[1, 2)`:
/// ```text
/// y  = recip_seed(mb)                       ~1/mb
/// q0 = ma*y
/// (ph, pl) = two_prod(q0, mb)               q0*mb exactly
/// r  = (ma - ph) - pl                       ma - ph is exact (Sterbenz)
/// q  = q0 + r*y                             q in [0.5, 2), within 0.5 ulp + 2^-48 relative
/// (ph, pl) = two_prod(q, mb)                final rounding decision, on exact values:
/// r  = (ma - ph) - pl                       exact (|r| fits 25 bits)
/// (u, ud) = ulp of q, ulp just below q      (ud = u/2 when q is a power of two)
/// r > mb*(0.5*u)        -> q = q + u        true quotient above q + u/2
/// -r > mb*(0.5*ud)      -> q = q - ud       true quotient below q - ud/2 (ties cannot occur)
/// result = q * 2^(ea-eb) via the exponent field (±0 below FLT_MIN, ±inf above FLT_MAX)
/// ```
/// So the significand is correctly rounded; the result is the correctly rounded quotient except
/// that a quotient whose *rounded* value is below FLT_MIN is 0 (the FTZ rule).
pub fn div(a: f32, b: f32) -> f32 {
    let (a, b) = (canon(a), canon(b));
    if is_nan_bits(a) || is_nan_bits(b) {
        return nan();
    }
    let sign = (a.to_bits() ^ b.to_bits()) & SIGN;
    let (ua, ub) = (a.to_bits() & !SIGN, b.to_bits() & !SIGN);
    let (a_zero, b_zero) = (ua == 0, ub == 0);
    let (a_inf, b_inf) = (ua == 0x7f80_0000, ub == 0x7f80_0000);
    if (a_zero && b_zero) || (a_inf && b_inf) {
        return nan();
    }
    if a_inf || b_zero {
        return f32::from_bits(0x7f80_0000 | sign);
    }
    if a_zero || b_inf {
        return f32::from_bits(sign);
    }
    let (ma, mb) = (significand(a), significand(b));
    let y = recip_seed(mb);
    let q0 = mul(ma, y);
    let (ph, pl) = two_prod(q0, mb);
    let r = sub(sub(ma, ph), pl);
    let q = add(q0, mul(r, y));
    let (ph, pl) = two_prod(q, mb);
    let r = sub(sub(ma, ph), pl);
    let (u, ud) = ulps(q);
    let q = if r > mul(mb, mul(0.5, u)) {
        add(q, u)
    } else if neg(r) > mul(mb, mul(0.5, ud)) {
        sub(q, ud)
    } else {
        q
    };
    scale_bits(q, exp_field(a) - exp_field(b), sign)
}

/// Strict reciprocal: exactly `div(1.0, x)`.
pub fn recip(x: f32) -> f32 {
    div(1.0, x)
}

/// Splits a positive normal `x` into `(m, h)` with `x = m * 4^h`, `m` in `[1, 4)`.
#[inline(always)]
fn split_even(x: f32) -> (f32, i32) {
    let e = exp_field(x) - 127;
    let odd = e & 1;
    // m = significand * 2^odd: exponent field 127 + odd.
    let m = f32::from_bits((x.to_bits() & MANT) | (((127 + odd) as u32) << 23));
    (m, (e - odd) >> 1)
}

/// `1/sqrt(m)` for `m` in `[1, 4)`, a few ulp accurate.
///
/// ```text
/// y = bits(0x5f3759df - (bits(m) >> 1))        seed, relative error <= 0.18%
/// hm = 0.5*m
/// repeat 3 times: y = y*(1.5 - (hm*y)*y)       (Newton; 1.8e-3 -> 4.6e-6 -> 3e-11)
/// ```
#[inline(always)]
fn rsqrt_seed(m: f32) -> f32 {
    let mut y = f32::from_bits(0x5f37_59df - (m.to_bits() >> 1));
    let hm = mul(0.5, m);
    for _ in 0..3 {
        y = mul(y, sub(1.5, mul(mul(hm, y), y)));
    }
    y
}

/// Strict square root.
///
/// NaN -> NaN; ±0 (and denormals) -> the zero itself; negative -> NaN; +inf -> +inf. Otherwise,
/// with `x = m * 4^h`, `m` in `[1, 4)`:
/// ```text
/// y  = rsqrt_seed(m)
/// s0 = m*y
/// (ph, pl) = two_prod(s0, s0)
/// r  = (m - ph) - pl                         exact residual m - s0^2
/// s  = s0 + r*(0.5*y)                        s in [1, 2]
/// (ph, pl) = two_prod(s, s); r = (m - ph) - pl   exact residual m - s^2 (fits 25 bits)
/// (u, ud) = ulp of s, ulp just below s
/// r > s*u     -> s = s + u                   (m > (s + u/2)^2; r and s*u lie on the 2^-46 grid)
/// r <= -s*ud  -> s = s - ud                  (m < (s - ud/2)^2)
/// result = s * 2^h via the exponent field (always normal)
/// ```
pub fn sqrt(x: f32) -> f32 {
    let x = canon(x);
    let b = x.to_bits();
    if is_nan_bits(x) || b & !SIGN == 0 || b == 0x7f80_0000 {
        return x;
    }
    if b & SIGN != 0 {
        return nan();
    }
    let (m, h) = split_even(x);
    let y = rsqrt_seed(m);
    let s0 = mul(m, y);
    let (ph, pl) = two_prod(s0, s0);
    let r = sub(sub(m, ph), pl);
    let s = add(s0, mul(r, mul(0.5, y)));
    let (ph, pl) = two_prod(s, s);
    let r = sub(sub(m, ph), pl);
    let (u, ud) = ulps(s);
    let s = if r > mul(s, u) {
        add(s, u)
    } else if r <= neg(mul(s, ud)) {
        sub(s, ud)
    } else {
        s
    };
    scale_bits(s, h, 0)
}

/// Strict reciprocal square root `1/sqrt(x)` (one rounding, not `recip(sqrt(x))`).
///
/// NaN -> NaN; ±0 (and denormals) -> ±inf; negative -> NaN; +inf -> +0. Otherwise, with
/// `x = m * 4^h`, `m` in `[1, 4)`:
/// ```text
/// y  = rsqrt_seed(m)
/// (yh, yl) = two_prod(y, y)                  y^2 exactly
/// (ph, pl) = two_prod(m, yh)
/// e  = ((1 - ph) - pl) - m*yl                e = 1 - m*y^2 to ~2^-48 (1 - ph exact)
/// z  = y + y*(0.5*e)                         z in [0.5, 1], within 0.5 + 2^-24.4 ulp
/// bits(m) in RSQRT_UP -> z = next float up   the two significands where z lies on the wrong
///                                            side of a rounding midpoint
/// result = z * 2^-h via the exponent field (always normal)
/// ```
/// Correctly rounded for every input: the error depends only on `m` (the exponent is put back
/// with integers), and `tests/numerics.rs` (`rsqrt_is_correctly_rounded_for_every_significand`)
/// checks all 2^24 significands in `[1, 4)` exactly, on integers. Without the table two of them
/// were one ulp low (the largest error 0.50000004 ulp, at `m = 0x407ffffe`, e.g. the input
/// 0x7e7ffffe).
pub fn rsqrt(x: f32) -> f32 {
    let x = canon(x);
    let b = x.to_bits();
    if is_nan_bits(x) {
        return x;
    }
    if b & !SIGN == 0 {
        return f32::from_bits(0x7f80_0000 | b);
    }
    if b & SIGN != 0 {
        return nan();
    }
    if b == 0x7f80_0000 {
        return 0.0;
    }
    let (m, h) = split_even(x);
    let y = rsqrt_seed(m);
    let (yh, yl) = two_prod(y, y);
    let (ph, pl) = two_prod(m, yh);
    let e = sub(sub(sub(1.0, ph), pl), mul(m, yl));
    let z = add(y, mul(y, mul(0.5, e)));
    let z = if RSQRT_UP.contains(&m.to_bits()) { f32::from_bits(z.to_bits() + 1) } else { z };
    scale_bits(z, -h, 0)
}

/// The bits of the significands `m` in `[1, 4)` for which [`rsqrt`]'s `z` is one ulp below the
/// correctly rounded `1/sqrt(m)` (an exhaustive search; no `z` is ever one ulp above). The
/// SIMD kernels and `strict_rsqrt` in GLSL check the same two.
pub const RSQRT_UP: [u32; 2] = [0x4009_f038, 0x407f_fffe];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn div_specials() {
        assert_eq!(div(1.0, 0.0), f32::INFINITY);
        assert_eq!(div(1.0, -0.0), f32::NEG_INFINITY);
        assert_eq!(div(-1.0, f32::INFINITY).to_bits(), SIGN);
        assert!(div(0.0, 0.0).is_nan());
        assert!(div(f32::INFINITY, f32::NEG_INFINITY).is_nan());
        assert_eq!(div(6.0, 3.0), 2.0);
        assert_eq!(div(f32::MAX, 0.5), f32::INFINITY);
        assert_eq!(div(f32::MIN_POSITIVE, 2.0), 0.0);
        // A denormal divisor is a zero.
        assert_eq!(div(1.0, f32::from_bits(1)), f32::INFINITY);
    }

    #[test]
    fn recip_significands_exhaustive_binade() {
        // Every significand in [1, 2) (2^23 values) at dev-profile speed would be slow; stride 7.
        let mut bits = ONE_BITS;
        while bits < 0x4000_0000 {
            let x = f32::from_bits(bits);
            assert_eq!(recip(x), (1.0f64 / x as f64) as f32, "recip({x:e})");
            bits += 7;
        }
    }

    #[test]
    fn sqrt_small_cases() {
        assert_eq!(sqrt(4.0), 2.0);
        assert_eq!(sqrt(2.0), std::f32::consts::SQRT_2);
        assert_eq!(sqrt(-0.0).to_bits(), SIGN);
        assert!(sqrt(-1.0).is_nan());
        assert_eq!(rsqrt(4.0), 0.5);
        assert_eq!(rsqrt(0.0), f32::INFINITY);
        assert_eq!(rsqrt(-0.0), f32::NEG_INFINITY);
        assert_eq!(rsqrt(f32::INFINITY).to_bits(), 0);
    }
}
