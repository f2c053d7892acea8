//! Strict exp, log, tanh, sigmoid, erf and gelu. Each is a fixed sequence of the flushed
//! add/sub/mul, the strict div/recip, comparisons, selects and integer bit operations, written out
//! in its doc comment so the GLSL port (shaders/include/strict.glsl) repeats it step for step.
//! Polynomials are evaluated by Horner's rule, plain `mul` then `add`, highest coefficient first.
//! The fitted coefficients (tanh, erf) come from src/numerics/fit_coeffs.py.

use super::div::{div, recip};
use super::ops::{abs, add, canon, is_nan_bits, mul, nan, neg, sub};

const SIGN: u32 = 0x8000_0000;
const MANT: u32 = 0x007f_ffff;

/// `ln 2` split so that `k * LN2_HI` is exact for `|k| < 256` (LN2_HI has 16 significant bits).
const LN2_HI: f32 = 0.693_145_75; // 0x3f317200
const LN2_LO: f32 = 1.428_606_8e-6; // 0x35bfbe8e, ln 2 - LN2_HI rounded
const LOG2E: f32 = std::f32::consts::LOG2_E; // 0x3fb8aa3b
/// 1.5 * 2^23: `(v + MAGIC) - MAGIC` rounds `v` to the nearest integer (ties to even), |v| < 2^22.
const MAGIC: f32 = 12_582_912.0;

/// Horner: `c[n-1]` first, then `acc = add(c[i], mul(acc, t))` down to `c[0]`.
#[inline(always)]
fn horner(t: f32, c: &[f32]) -> f32 {
    let mut acc = c[c.len() - 1];
    for &ci in c[..c.len() - 1].iter().rev() {
        acc = add(ci, mul(acc, t));
    }
    acc
}

/// Taylor coefficients 1/2!, ..., 1/7! rounded to f32.
const EXP_C: [f32; 6] = [5e-1, 1.666_666_7e-1, 4.166_666_8e-2, 8.333_334e-3, 1.388_888_9e-3, 1.984_127e-4];

/// Strict `e^x`.
///
/// ```text
/// NaN -> NaN;  x > 88.8 (incl. +inf) -> +inf;  x < -104 (incl. -inf) -> +0
/// k  = ((x*LOG2E + MAGIC) - MAGIC)               nearest integer to x/ln2, as a float
/// r  = (x - k*LN2_HI) - k*LN2_LO                 |r| <~ 0.347; x - k*LN2_HI is exact
/// q  = horner(r, [1/2!, 1/3!, ..., 1/7!])
/// m  = 1 + (r + (r*r)*q)                          m in [0.70, 1.42]
/// E  = expfield(m) + k
/// E >= 255 -> +inf;  E <= 0 -> +0 (flush);  else bits(m) + (k << 23)
/// ```
pub fn exp(x: f32) -> f32 {
    let x = canon(x);
    if is_nan_bits(x) {
        return x;
    }
    if x > 88.8 {
        return f32::INFINITY;
    }
    if x < -104.0 {
        return 0.0;
    }
    let k = sub(add(mul(x, LOG2E), MAGIC), MAGIC);
    let r = sub(sub(x, mul(k, LN2_HI)), mul(k, LN2_LO));
    let q = horner(r, &EXP_C);
    let m = add(1.0, add(r, mul(mul(r, r), q)));
    let ki = k as i32;
    let e = ((m.to_bits() >> 23) & 0xff) as i32 + ki;
    if e >= 255 {
        f32::INFINITY
    } else if e <= 0 {
        0.0
    } else {
        f32::from_bits((m.to_bits() & MANT) | ((e as u32) << 23))
    }
}

/// `2/3, 2/5, 2/7, 2/9, 2/11` (the atanh series `log(1+f) = 2s + 2s^3/3 + ...`, `s = f/(2+f)`).
const LOG_C: [f32; 5] = [6.666_667e-1, 4e-1, 2.857_143e-1, 2.222_222_2e-1, 1.818_181_9e-1];

/// Strict natural logarithm.
///
/// ```text
/// NaN -> NaN;  ±0 (and denormals) -> -inf;  x < 0 -> NaN;  +inf -> +inf
/// e = expfield(x) - 127;  mb = bits(x) & 0x7fffff
/// mb >= 0x3504f3 (significand >= sqrt 2): m = bits(mb | 126<<23), k = e + 1
///                                   else: m = bits(mb | 127<<23), k = e       m in [0.707, 1.414)
/// f  = m - 1                                   exact
/// s  = div(f, 2 + f)
/// z  = s*s
/// R  = z * horner(z, [2/3, 2/5, 2/7, 2/9, 2/11])
/// hf = (0.5*f)*f
/// dk = float(k)
/// result = dk*LN2_HI - ((hf - (s*(hf + R) + dk*LN2_LO)) - f)
/// ```
/// (`log(1+f) = f - hf + s*(hf + R)` is an identity for `s = f/(2+f)`.)
pub fn log(x: f32) -> f32 {
    let x = canon(x);
    let b = x.to_bits();
    if is_nan_bits(x) {
        return x;
    }
    if b & !SIGN == 0 {
        return f32::NEG_INFINITY;
    }
    if b & SIGN != 0 {
        return nan();
    }
    if b == 0x7f80_0000 {
        return x;
    }
    let e = ((b >> 23) & 0xff) as i32 - 127;
    let mb = b & MANT;
    let (m, k) = if mb >= 0x0035_04f3 {
        (f32::from_bits(mb | (126 << 23)), e + 1)
    } else {
        (f32::from_bits(mb | (127 << 23)), e)
    };
    let f = sub(m, 1.0);
    let s = div(f, add(2.0, f));
    let z = mul(s, s);
    let r = mul(z, horner(z, &LOG_C));
    let hf = mul(mul(0.5, f), f);
    let dk = k as f32;
    sub(mul(dk, LN2_HI), sub(sub(hf, add(mul(s, add(hf, r)), mul(dk, LN2_LO))), f))
}

/// `tanh(x) = x + x^3 g(x^2)` on `|x| < 0.55`: g fitted (near-minimax) on `u = x^2` in `[0, 0.3025]`.
const TANH_C: [f32; 6] =
    [-3.333_333e-1, 1.333_329_5e-1, -5.395_978e-2, 2.178_369e-2, -8.416_563e-3, 2.398_743e-3];

/// Strict hyperbolic tangent.
///
/// ```text
/// NaN -> NaN
/// a = |x|
/// a < 0.55:  u = a*a;  t = a + (a*u)*horner(u, TANH_C)           (tiny a: a*u flushes, t = a)
/// else:      E = exp(2*a);  t = 1 - div(2, E + 1)
/// result = t with the sign bit of x (so tanh(-0) = -0)
///            (a >= 44.4: E = +inf, div gives 0, t = 1)
/// ```
pub fn tanh(x: f32) -> f32 {
    let x = canon(x);
    if is_nan_bits(x) {
        return x;
    }
    let a = abs(x);
    let t = if a < 0.55 {
        let u = mul(a, a);
        add(a, mul(mul(a, u), horner(u, &TANH_C)))
    } else {
        let e = exp(mul(2.0, a));
        sub(1.0, div(2.0, add(e, 1.0)))
    };
    f32::from_bits(t.to_bits() | (x.to_bits() & SIGN))
}

/// Strict logistic sigmoid: `recip(1 + exp(-x))`.
///
/// `-x` is a sign flip. x = +inf -> 1; x = -inf -> exp = +inf -> 0; NaN -> NaN.
pub fn sigmoid(x: f32) -> f32 {
    recip(add(1.0, exp(neg(x))))
}

/// SiLU (swish), `x * sigmoid(x)`: [`sigmoid`], then one rounded multiply.
///
/// `x = -inf` -> -0 (the limit; the formula would give `-inf * 0`). NaN -> NaN.
pub fn silu(x: f32) -> f32 {
    let x = canon(x);
    if x == f32::NEG_INFINITY {
        return -0.0;
    }
    mul(x, sigmoid(x))
}

/// `erf(x) = x + x p(x^2)` on `|x| < 0.875`, p fitted in `u = x^2` (relative error).
const ERF_SMALL: [f32; 7] = [
    1.283_791_7e-1,
    -3.761_263_5e-1,
    1.128_373_7e-1,
    -2.686_178e-2,
    5.207_232e-3,
    -8.216_693e-4,
    8.699_595e-5,
];

/// `erfc(a) = q_i(a - mid_i)` on four pieces covering `[0.875, 3.875)`, fitted (absolute error).
/// Piece i covers `[ERFC_LO[i], ERFC_LO[i+1])` (the last up to 3.875), centre `ERFC_MID[i]`.
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

/// Strict error function.
///
/// ```text
/// NaN -> NaN
/// a = |x|
/// a < 2^-14:   b = 8*a;  y = 0.125*(b + b*ERF_SMALL[0])          (exact scalings keep b*c normal;
///                                                                 the a^3 term is below 2^-29 a)
/// a < 0.875:   u = a*a;  y = a + a*horner(u, ERF_SMALL)
/// a < 3.875:   i = number of ERFC_LO[1..] that are <= a (0..3);  t = a - ERFC_MID[i]
///              y = 1 - horner(t, ERFC_C[i])
/// else:        y = 1   (erf rounds to 1 in f32 from a ~ 3.8325 on)
/// result = y with the sign bit of x
/// ```
pub fn erf(x: f32) -> f32 {
    let x = canon(x);
    if is_nan_bits(x) {
        return x;
    }
    let a = abs(x);
    let y = if a < 6.103_515_6e-5 {
        let b = mul(8.0, a);
        mul(0.125, add(b, mul(b, ERF_SMALL[0])))
    } else if a < 0.875 {
        let u = mul(a, a);
        add(a, mul(a, horner(u, &ERF_SMALL)))
    } else if a < 3.875 {
        let i = ERFC_LO[1..].iter().filter(|&&lo| lo <= a).count();
        let t = sub(a, ERFC_MID[i]);
        sub(1.0, horner(t, &ERFC_C[i]))
    } else {
        1.0
    };
    f32::from_bits(y.to_bits() | (x.to_bits() & SIGN))
}

/// Strict GELU, erf form: `(0.5*x) * (1 + erf(x*FRAC_1_SQRT_2))`.
///
/// `x = -inf` -> -0 (the limit; the formula would give `-inf * 0`). NaN -> NaN.
/// For very negative x the factor `1 + erf` cancels (absolute, not relative, accuracy there).
pub fn gelu(x: f32) -> f32 {
    const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
    let x = canon(x);
    if x == f32::NEG_INFINITY {
        return -0.0;
    }
    mul(mul(0.5, x), add(1.0, erf(mul(x, FRAC_1_SQRT_2))))
}
