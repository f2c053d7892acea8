//! The error metric used to measure (and test) the strict functions, and f64 reference functions
//! std lacks (`erf`, `erfc`).
//!
//! **Metric.** `ulp_error(got, exact)` compares an f32 result with the exact value (an f64 that is
//! far more accurate than f32) in units of the f32 ulp at `exact`:
//! `|got - exact| / ulp(exact)`, `ulp(v) = 2^(max(floor(log2 |v|), -126) - 23)`. So 0.5 means
//! correctly rounded and 1.0 means faithful. Flush-to-zero is built in:
//! - the reference is evaluated at the *flushed* input (callers pass `ftz(x)` to the f64 function);
//! - a result of ±0 stands for "some value in (-FLT_MIN, FLT_MIN)": its error is
//!   `max(0, |exact| - FLT_MIN) / ulp(exact)` (the sign of zero is not an accuracy matter);
//! - a finite `exact` that rounds to ±inf in f32 accepts that infinity with error 0;
//! - NaN against NaN is 0; NaN against a number, or a wrong infinity, is `f64::INFINITY`.

/// The f32 ulp at `v` (ulp of the binade `|v|` lies in; 2^-149 below FLT_MIN).
pub fn ulp_f32(v: f64) -> f64 {
    let a = v.abs();
    if !a.is_finite() {
        return f64::INFINITY;
    }
    let e = if a < f32::MIN_POSITIVE as f64 { -126 } else { a.log2().floor() as i32 };
    // log2 may round up just below a power of two; correct by one step either way.
    let e = if e > -126 && 2f64.powi(e) > a { e - 1 } else { e };
    let e = if 2f64.powi(e + 1) <= a { e + 1 } else { e };
    2f64.powi(e.max(-126) - 23)
}

/// Error of `got` against the exact value `exact`, in f32 ulps (see the module docs).
pub fn ulp_error(got: f32, exact: f64) -> f64 {
    if exact.is_nan() || got.is_nan() {
        return if exact.is_nan() && got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    let rounded = exact as f32;
    if got.is_infinite() || exact.is_infinite() || rounded.is_infinite() {
        return if got == rounded { 0.0 } else { f64::INFINITY };
    }
    let u = ulp_f32(exact);
    if got == 0.0 {
        return ((exact.abs() - f32::MIN_POSITIVE as f64) / u).max(0.0);
    }
    (got as f64 - exact).abs() / u
}

/// `erf(x)` in f64, accurate to a few f64 ulps (far below f32 resolution).
///
/// `|x| < 3`: `erf x = 2/sqrt(pi) * exp(-x^2) * sum 2^n x^(2n+1) / (1*3*...*(2n+1))` (all terms
/// positive); otherwise `1 - erfc(|x|)` with the sign.
pub fn erf_f64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a > 6.0 {
        1.0 // erfc(6) = 2.2e-17 < 2^-54: erf rounds to 1 in f64
    } else if a < 3.0 {
        let x2 = a * a;
        let mut term = a;
        let mut s = a;
        let mut n = 0.0;
        while term > s * 1e-18 {
            n += 1.0;
            term *= 2.0 * x2 / (2.0 * n + 1.0);
            s += term;
        }
        std::f64::consts::FRAC_2_SQRT_PI * (-x2).exp() * s
    } else {
        1.0 - erfc_f64(a)
    };
    r.copysign(x)
}

/// `erfc(x)` in f64 with *relative* accuracy in the tail: `1 - erf` below 2 (where erfc > 0.004,
/// so the subtraction costs under 3 digits), a continued fraction from 2 on (evaluated backwards
/// from depth `40 + 1200/x^2`), `2 - erfc(-x)` for negative x.
pub fn erfc_f64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < 0.0 {
        return 2.0 - erfc_f64(-x);
    }
    if x < 2.0 {
        return 1.0 - erf_f64(x);
    }
    if x > 27.3 {
        return 0.0;
    }
    // erfc x = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))
    let mut f = x;
    let depth = 40 + (1200.0 / (x * x)) as u32;
    for k in (1..=depth).rev() {
        f = x + (k as f64 / 2.0) / f;
    }
    (-x * x).exp() / (std::f64::consts::PI.sqrt() * f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric() {
        assert_eq!(ulp_f32(1.0), 2f64.powi(-23));
        assert_eq!(ulp_f32(0.999_999_999), 2f64.powi(-24));
        assert_eq!(ulp_f32(1e-40), 2f64.powi(-149));
        assert_eq!(ulp_error(1.0, 1.0 + 2f64.powi(-24)), 0.5);
        assert_eq!(ulp_error(0.0, 1e-40), 0.0);
        assert_eq!(ulp_error(f32::INFINITY, f64::MAX), 0.0);
        assert_eq!(ulp_error(f32::MAX, f64::INFINITY), f64::INFINITY);
    }

    #[test]
    fn erf_reference() {
        // Values from the standard tables (A&S 7.1, more digits from mpmath).
        let cases = [
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.5, 0.999_999_256_901_627_7),
        ];
        for (x, e) in cases {
            assert!((erf_f64(x) - e).abs() < 1e-15, "erf({x}) = {}", erf_f64(x));
        }
        let c = erfc_f64(5.0);
        assert!((c / 1.537_459_794_428_034_8e-12 - 1.0).abs() < 1e-13, "erfc(5) = {c}");
        let c = erfc_f64(1.0);
        assert!((c / 0.157_299_207_050_285_13 - 1.0).abs() < 1e-14, "erfc(1) = {c}");
        let c = erfc_f64(2.0);
        assert!((c / 4.677_734_981_047_266e-3 - 1.0).abs() < 1e-13, "erfc(2) = {c}");
        let c = erfc_f64(2.000_001);
        assert!((c / 4.677_714_314_103_242e-3 - 1.0).abs() < 1e-13, "erfc(2+) = {c}");
    }
}
