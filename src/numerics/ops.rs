//! The strict primitives: denormal flush, NaN canonicalization, and the flushed IEEE
//! add/sub/mul, min/max that every other strict function is built from.

/// The one NaN bit pattern strict mode ever produces (quiet, positive, zero payload).
pub const CANONICAL_NAN: u32 = 0x7fc0_0000;

const SIGN: u32 = 0x8000_0000;
const EXP_MASK: u32 = 0x7f80_0000;
const ABS_MASK: u32 = 0x7fff_ffff;

#[inline(always)]
pub(crate) fn nan() -> f32 {
    f32::from_bits(CANONICAL_NAN)
}

/// `true` for any NaN, tested on the bits (what the GLSL port does; no float compare).
#[inline(always)]
pub(crate) fn is_nan_bits(x: f32) -> bool {
    x.to_bits() & ABS_MASK > EXP_MASK
}

/// Flush a denormal to the zero of the same sign; every other value is returned unchanged.
///
/// Step: `if (bits & 0x7f800000) == 0 { bits &= 0x80000000 }`.
#[inline(always)]
pub fn ftz(x: f32) -> f32 {
    let b = x.to_bits();
    if b & EXP_MASK == 0 {
        f32::from_bits(b & SIGN)
    } else {
        x
    }
}

/// [`ftz`], and any NaN (either sign, any payload) becomes [`CANONICAL_NAN`].
#[inline(always)]
pub fn canon(x: f32) -> f32 {
    if is_nan_bits(x) {
        nan()
    } else {
        ftz(x)
    }
}

/// Strict addition: `canon(canon(a) + canon(b))` with one IEEE binary32 round-to-nearest-even add.
///
/// On a GPU this is a `precise` (NoContraction) add with the same explicit flushes.
#[inline(always)]
pub fn add(a: f32, b: f32) -> f32 {
    canon(canon(a) + canon(b))
}

/// Strict subtraction: `canon(canon(a) - canon(b))`.
#[inline(always)]
pub fn sub(a: f32, b: f32) -> f32 {
    canon(canon(a) - canon(b))
}

/// Strict multiplication of the canonicalized inputs, never fused with a following add, flushed
/// to zero with tininess detected *after rounding* (IEEE 754 §7.5): a product is flushed when,
/// rounded to 24 bits as if the exponent range were unbounded, it is below FLT_MIN. That is what
/// x86 SSE/AVX compute with MXCSR.FTZ and DAZ set, so SIMD kernels get these bits from plain
/// `vmulps` (checked on 50 million products at the boundary, and in `tests/numerics.rs`).
///
/// Steps: `r = a * b` (IEEE, round to nearest even); if `|r| < FLT_MIN`, `r = ±0`; if
/// `|r| == FLT_MIN` (the product may have rounded up onto FLT_MIN from the denormal grid),
/// recompute it in the normal range as `t = (s * 2^24) * l`, with `s` the operand of smaller
/// magnitude and `l` the other (exact scaling, no overflow), and flush `r` if
/// `|t| < FLT_MIN * 2^24`. Additions need no such step: a sum that small is exact.
#[inline(always)]
pub fn mul(a: f32, b: f32) -> f32 {
    let (a, b) = (canon(a), canon(b));
    let r = canon(a * b);
    if r.to_bits() & ABS_MASK == f32::MIN_POSITIVE.to_bits() {
        let (s, l) = if a.to_bits() & ABS_MASK <= b.to_bits() & ABS_MASK { (a, b) } else { (b, a) };
        let t = (s * 16_777_216.0) * l;
        if t.to_bits() & ABS_MASK < (f32::MIN_POSITIVE * 16_777_216.0).to_bits() {
            return f32::from_bits(r.to_bits() & SIGN);
        }
    }
    r
}

/// Exact negation (sign-bit flip) of the canonicalized value; NaN stays canonical.
#[inline(always)]
pub(crate) fn neg(x: f32) -> f32 {
    let x = canon(x);
    if is_nan_bits(x) {
        x
    } else {
        f32::from_bits(x.to_bits() ^ SIGN)
    }
}

/// `|x|` of the canonicalized value (sign bit cleared; NaN stays canonical).
#[inline(always)]
pub(crate) fn abs(x: f32) -> f32 {
    f32::from_bits(canon(x).to_bits() & ABS_MASK)
}

/// Strict maximum. Inputs are canonicalized first (denormals count as zeros of their sign).
///
/// - NaN if either input is NaN (canonical NaN; unlike IEEE `maxNum`, NaN is never dropped).
/// - `max(-0, +0) = max(+0, -0) = +0`; `max(-0, -0) = -0`.
/// - otherwise the larger value.
#[inline(always)]
pub fn max(a: f32, b: f32) -> f32 {
    let (a, b) = (canon(a), canon(b));
    if is_nan_bits(a) || is_nan_bits(b) {
        nan()
    } else if a == b {
        // Equal values: identical bits, or +0 and -0, where AND of the bits gives +0.
        f32::from_bits(a.to_bits() & b.to_bits())
    } else if a > b {
        a
    } else {
        b
    }
}

/// Strict minimum: as [`max`] mirrored; `min(-0, +0) = min(+0, -0) = -0`.
#[inline(always)]
pub fn min(a: f32, b: f32) -> f32 {
    let (a, b) = (canon(a), canon(b));
    if is_nan_bits(a) || is_nan_bits(b) {
        nan()
    } else if a == b {
        f32::from_bits(a.to_bits() | b.to_bits())
    } else if a < b {
        a
    } else {
        b
    }
}

/// Dekker's exact product: returns `(p, e)` with `p = mul(a, b)` and `a * b = p + e` exactly,
/// for operands in the moderate range the strict algorithms use (no overflow, no underflow).
///
/// Steps (Veltkamp split with C = 4097 = 2^12 + 1, each op strict):
/// ```text
/// t = C*a; ah = t - (t - a); al = a - ah        (same for b)
/// p = a*b
/// e = (((ah*bh - p) + ah*bl) + al*bh) + al*bl
/// ```
#[inline(always)]
pub(crate) fn two_prod(a: f32, b: f32) -> (f32, f32) {
    const C: f32 = 4097.0;
    let t = mul(C, a);
    let ah = sub(t, sub(t, a));
    let al = sub(a, ah);
    let t = mul(C, b);
    let bh = sub(t, sub(t, b));
    let bl = sub(b, bh);
    let p = mul(a, b);
    let e = add(add(add(sub(mul(ah, bh), p), mul(ah, bl)), mul(al, bh)), mul(al, bl));
    (p, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_and_canon() {
        assert_eq!(ftz(f32::from_bits(1)).to_bits(), 0);
        assert_eq!(ftz(f32::from_bits(0x807f_ffff)).to_bits(), SIGN);
        assert_eq!(ftz(f32::MIN_POSITIVE), f32::MIN_POSITIVE);
        assert_eq!(canon(f32::from_bits(0xffc0_0001)).to_bits(), CANONICAL_NAN);
        assert_eq!(canon(f32::from_bits(0x7f80_0001)).to_bits(), CANONICAL_NAN);
        assert_eq!(canon(f32::INFINITY), f32::INFINITY);
    }

    #[test]
    fn min_max_zeros_and_nan() {
        assert_eq!(max(-0.0, 0.0).to_bits(), 0);
        assert_eq!(max(0.0, -0.0).to_bits(), 0);
        assert_eq!(max(-0.0, -0.0).to_bits(), SIGN);
        assert_eq!(min(-0.0, 0.0).to_bits(), SIGN);
        assert_eq!(min(0.0, -0.0).to_bits(), SIGN);
        assert_eq!(max(f32::NAN, 1.0).to_bits(), CANONICAL_NAN);
        assert_eq!(min(1.0, -f32::NAN).to_bits(), CANONICAL_NAN);
        assert_eq!(max(1.0, 2.0), 2.0);
        assert_eq!(min(1.0, 2.0), 1.0);
        // A denormal is a zero of its sign.
        assert_eq!(max(f32::from_bits(0x8000_0001), 0.0).to_bits(), 0);
    }

    #[test]
    fn two_prod_is_exact() {
        let mut s = 0x1234_5678u32;
        for _ in 0..10_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let a = f32::from_bits(0x3f80_0000 | (s & 0x7f_ffff));
            let b = f32::from_bits(0x3f00_0000 | (s.rotate_left(11) & 0x7f_ffff));
            let (p, e) = two_prod(a, b);
            assert_eq!(p as f64 + e as f64, a as f64 * b as f64);
        }
    }
}
