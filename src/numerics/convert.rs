//! f16 / bf16 conversions with round-to-nearest-even, written with integer operations only so the
//! GLSL port gives the same bits (GLSL's packHalf2x16 rounding is implementation-defined).
//! Strict-mode rules apply: f32 inputs are canonicalized first (denormals are zeros), NaN becomes
//! the canonical NaN of the target format (f16 0x7e00, bf16 0x7fc0, f32 0x7fc00000).
//! f16 denormals are kept (they are normal f32 values); bf16 denormals are f32 denormals, so they
//! are flushed like any f32.

use super::ops::{canon, is_nan_bits, nan};

/// Canonical f16 NaN.
pub const F16_CANONICAL_NAN: u16 = 0x7e00;
/// Canonical bf16 NaN.
pub const BF16_CANONICAL_NAN: u16 = 0x7fc0;

/// Shift right by `s` (1..=31) rounding to nearest, ties to even.
#[inline(always)]
fn shr_rne(v: u32, s: u32) -> u32 {
    let q = v >> s;
    let rem = v & ((1 << s) - 1);
    let half = 1 << (s - 1);
    if rem > half || (rem == half && q & 1 == 1) {
        q + 1
    } else {
        q
    }
}

/// f32 -> IEEE binary16 bits, round to nearest even; overflow -> ±inf.
pub fn f32_to_f16_bits(x: f32) -> u16 {
    let x = canon(x);
    if is_nan_bits(x) {
        return F16_CANONICAL_NAN;
    }
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let a = b & 0x7fff_ffff;
    if a >= 0x7f80_0000 {
        return sign | 0x7c00;
    }
    if a == 0 {
        return sign;
    }
    let e = (a >> 23) as i32 - 127;
    let full = (a & 0x7f_ffff) | 0x80_0000; // 24-bit significand, value full * 2^(e-23)
    let h = if e > 15 {
        0x7c00
    } else if e >= -14 {
        // Normal f16: exponent field e+15, keep the top 10 fraction bits; the rounding carry may
        // run into the exponent (and up to inf, 0x7c00), which is the right answer.
        shr_rne((((e + 15) as u32) << 23) | (a & 0x7f_ffff), 13)
    } else if e >= -25 {
        // Denormal f16: value / 2^-24 = full * 2^(e+1).
        shr_rne(full, (-1 - e) as u32)
    } else {
        0
    };
    sign | h as u16
}

/// IEEE binary16 bits -> f32 (exact; NaN -> canonical f32 NaN).
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let e = (h >> 10) & 0x1f;
    let m = h & 0x3ff;
    let bits = if e == 31 {
        if m != 0 {
            return nan();
        }
        0x7f80_0000
    } else if e == 0 {
        if m == 0 {
            0
        } else {
            // m * 2^-24 with the top set bit of m at position p.
            let p = 31 - m.leading_zeros();
            ((p + 103) << 23) | ((m << (23 - p)) & 0x7f_ffff)
        }
    } else {
        ((e + 112) << 23) | (m << 13)
    };
    f32::from_bits(sign | bits)
}

/// f32 -> bfloat16 bits, round to nearest even; overflow -> ±inf.
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let x = canon(x);
    if is_nan_bits(x) {
        return BF16_CANONICAL_NAN;
    }
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// bfloat16 bits -> f32: the bits shifted up, then canonicalized (denormals flush, NaN canonical).
pub fn bf16_bits_to_f32(h: u16) -> f32 {
    canon(f32::from_bits((h as u32) << 16))
}

/// i32 -> IEEE binary16 bits, one rounding to nearest even (no f32 intermediate);
/// `|v| >= 65520` gives ±inf. Integer steps (repeated by `strict_i32_to_f16_bits` in GLSL):
/// ```text
/// v == 0 -> 0x0000
/// sign = v < 0 ? 0x8000 : 0; mag = |v| as u32 (2^31 for i32::MIN); p = msb(mag)
/// p >= 16                 -> sign | 0x7c00          (mag >= 65536 > 65504 + half an ulp)
/// q = p <= 10 ? mag << (10 - p) : shr_rne(mag, p - 10)     q in [2^10, 2^11]
/// h = ((p + 14) << 10) + q                            the leading one and a rounding carry
///                                                     run into the exponent (65520.. -> 0x7c00)
/// sign | h
/// ```
pub fn i32_to_f16_bits(v: i32) -> u16 {
    if v == 0 {
        return 0;
    }
    let sign: u32 = if v < 0 { 0x8000 } else { 0 };
    let mag = v.unsigned_abs();
    let p = 31 - mag.leading_zeros();
    if p >= 16 {
        return (sign | 0x7c00) as u16;
    }
    let q = if p <= 10 { mag << (10 - p) } else { shr_rne(mag, p - 10) };
    (sign | (((p + 14) << 10) + q)) as u16
}

/// i32 -> bfloat16 bits, one rounding to nearest even (no f32 intermediate, which would round
/// twice: 2^25 + 2^17 + 1 must give 0x4c01, not 0x4c00). Integer steps (repeated by
/// `strict_i32_to_bf16_bits` in GLSL):
/// ```text
/// v == 0 -> 0x0000
/// sign = v < 0 ? 0x8000 : 0; mag = |v| as u32 (2^31 for i32::MIN); p = msb(mag)
/// q = p <= 7 ? mag << (7 - p) : shr_rne(mag, p - 7)     q in [2^7, 2^8]
/// sign | (((p + 126) << 7) + q)                         never overflows (|v| <= 2^31)
/// ```
pub fn i32_to_bf16_bits(v: i32) -> u16 {
    if v == 0 {
        return 0;
    }
    let sign: u32 = if v < 0 { 0x8000 } else { 0 };
    let mag = v.unsigned_abs();
    let p = 31 - mag.leading_zeros();
    let q = if p <= 7 { mag << (7 - p) } else { shr_rne(mag, p - 7) };
    (sign | (((p + 126) << 7) + q)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_round_trip_all() {
        for h in 0..=u16::MAX {
            let x = f16_bits_to_f32(h);
            let is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
            if is_nan {
                assert_eq!(x.to_bits(), 0x7fc0_0000);
                assert_eq!(f32_to_f16_bits(x), F16_CANONICAL_NAN);
            } else {
                assert_eq!(x, half::f16::from_bits(h).to_f32(), "{h:#x}");
                assert_eq!(f32_to_f16_bits(x), h, "{h:#x}");
            }
        }
    }

    #[test]
    fn f16_rounding_edges() {
        assert_eq!(f32_to_f16_bits(65504.0), 0x7bff);
        assert_eq!(f32_to_f16_bits(65519.996), 0x7bff);
        assert_eq!(f32_to_f16_bits(65520.0), 0x7c00);
        assert_eq!(f32_to_f16_bits(2.0f32.powi(-25)), 0); // tie to even (0)
        assert_eq!(f32_to_f16_bits(2.0f32.powi(-25) * 1.000_001), 1);
        assert_eq!(f32_to_f16_bits(3.0 * 2.0f32.powi(-25)), 2); // tie to even (2)
        assert_eq!(f32_to_f16_bits(-1.0), 0xbc00);
        assert_eq!(f32_to_f16_bits(f32::from_bits(1)), 0);
    }

    #[test]
    fn bf16_edges() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80); // tie to even
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16_bits(f32::MAX), 0x7f80);
        assert_eq!(f32_to_bf16_bits(f32::NAN), BF16_CANONICAL_NAN);
        assert_eq!(bf16_bits_to_f32(0x0001).to_bits(), 0);
        assert_eq!(bf16_bits_to_f32(0xffc1).to_bits(), 0x7fc0_0000);
    }

    #[test]
    fn i32_conversions_round_once() {
        assert_eq!(i32_to_bf16_bits((1 << 25) + (1 << 17) + 1), 0x4c01);
        assert_eq!(i32_to_bf16_bits(1), 0x3f80);
        assert_eq!(i32_to_bf16_bits(i32::MIN), 0xcf00);
        assert_eq!(i32_to_bf16_bits(i32::MAX), 0x4f00);
        assert_eq!(i32_to_f16_bits(65504), 0x7bff);
        assert_eq!(i32_to_f16_bits(65519), 0x7bff);
        assert_eq!(i32_to_f16_bits(65520), 0x7c00);
        assert_eq!(i32_to_f16_bits(-65520), 0xfc00);
        assert_eq!(i32_to_f16_bits(2049), 0x6800); // tie to even
        assert_eq!(i32_to_f16_bits(2051), 0x6802); // tie to even, up
        assert_eq!(i32_to_f16_bits(i32::MIN), 0xfc00);
    }
}
