//! Counter-based random numbers: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as
//! easy as 1, 2, 3", SC 2011), the generator behind `rand(seed)` constants in the assembler
//! and the RAND opcode.
//!
//! Element `i` of a random tensor with seed `s` is a pure function of `(s, i)`: counter =
//! `[i as u32, (i >> 32) as u32, 0, 0]`, key = `[s, 0]`. So the values never depend on how the
//! work is split across threads or devices.
//!
//! - [`philox_uniform`] uses word 0 of the block: `(w0 >> 8) * 2^-24`, a multiple of 2^-24 in
//!   [0, 1). It is exact integer and power-of-two arithmetic, so every executor can reproduce it
//!   bit for bit.
//! - [`philox_normal`] is Box-Muller over words 0 and 1 computed only with the strict
//!   operations of `crate::numerics`, so it too gives the same bits on every executor. The
//!   assembler's `rand(seed, normal)` constants and the RAND opcode share it.

/// Philox-4x32 multipliers and Weyl key increments (Random123's PHILOX_M4x32_* / PHILOX_W32_*).
const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox-4x32 with `R` rounds: the four output words for one counter and key.
pub fn philox4x32<const R: usize>(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = ctr;
    let mut k = key;
    for round in 0..R {
        if round > 0 {
            k[0] = k[0].wrapping_add(W0);
            k[1] = k[1].wrapping_add(W1);
        }
        let p0 = (M0 as u64) * (c[0] as u64);
        let p1 = (M1 as u64) * (c[2] as u64);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// Philox-4x32-10, the standard 10-round variant.
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    philox4x32::<10>(ctr, key)
}

fn block(seed: u32, index: u64) -> [u32; 4] {
    philox4x32_10([index as u32, (index >> 32) as u32, 0, 0], [seed, 0])
}

/// Converts a 32-bit random word to a float in [0, 1) with 24 random bits.
pub fn u32_to_unit(w: u32) -> f32 {
    (w >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// Element `index` of a uniform [0, 1) random tensor with `seed`.
pub fn philox_uniform(seed: u32, index: u64) -> f32 {
    u32_to_unit(block(seed, index)[0])
}

/// A standard normal sample for element `index`: Box-Muller over words 0 and 1 of the Philox
/// block, computed only with the strict operations of `crate::numerics`, so every executor
/// gives the same bits. Steps (each a flushed f32 operation):
/// 1. `u1 = ((w0 >> 8) + 1) * 2^-24`, in (0, 1] (never 0, so the log is finite);
/// 2. `r = sqrt(-2 * log(u1))`;
/// 3. the angle 2π·u2 from the top 24 bits of w1, m = w1 >> 8: the quadrant q = m >> 22 and the
///    fraction f = (m & 0x3FFFFF) * 2^-22 are exact; θ = f * (π/2) in [0, π/2);
/// 4. sin θ and cos θ by their Taylor polynomials to degree 13 and 14 (Horner, mul then add;
///    truncation error below 1e-9 on [0, π/2]);
/// 5. cos(2π·u2) = cos θ, -sin θ, -cos θ, sin θ for q = 0, 1, 2, 3; the sample is r times it.
pub fn philox_normal(seed: u32, index: u64) -> f32 {
    use crate::numerics as nx;
    let w = block(seed, index);
    let u1 = nx::mul(((w[0] >> 8) + 1) as f32, 1.0 / 16_777_216.0);
    let r = nx::sqrt(nx::mul(-2.0, nx::log(u1)));
    let m = w[1] >> 8;
    let q = m >> 22;
    let f = nx::mul((m & 0x3F_FFFF) as f32, 1.0 / 4_194_304.0);
    let theta = nx::mul(f, std::f32::consts::FRAC_PI_2);
    let t2 = nx::mul(theta, theta);
    // sin θ = θ (1 - t2/3! (1 - t2/(4·5) (1 - ...))) written as a polynomial in t2 with
    // coefficients (-1)^k / (2k+1)!, evaluated from the highest degree down.
    const SIN: [f32; 7] = [
        1.0,
        -1.0 / 6.0,
        1.0 / 120.0,
        -1.0 / 5040.0,
        1.0 / 362_880.0,
        -1.0 / 39_916_800.0,
        1.0 / 6_227_020_800.0,
    ];
    const COS: [f32; 8] = [
        1.0,
        -0.5,
        1.0 / 24.0,
        -1.0 / 720.0,
        1.0 / 40320.0,
        -1.0 / 3_628_800.0,
        1.0 / 479_001_600.0,
        -1.0 / 87_178_291_200.0,
    ];
    let horner = |c: &[f32]| c.iter().rev().fold(0.0f32, |acc, &k| nx::add(nx::mul(acc, t2), k));
    let sin = nx::mul(theta, horner(&SIN));
    let cos = horner(&COS);
    let c = match q {
        0 => cos,
        1 => -sin,
        2 => -cos,
        _ => sin,
    };
    nx::mul(r, c)
}

/// Fills `out` as the RAND opcode does: element i is `philox_uniform(seed, i)` or
/// `philox_normal(seed, i)`.
pub fn fill_strict(seed: u32, dist: crate::isa::Dist, out: &mut [f32]) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = match dist {
            crate::isa::Dist::Uniform => philox_uniform(seed, i as u64),
            crate::isa::Dist::Normal => philox_normal(seed, i as u64),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known-answer vectors from Random123's kat_vectors (philox4x32 10 rounds).
    #[test]
    fn philox_known_answers() {
        assert_eq!(philox4x32_10([0; 4], [0; 2]), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0]),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn uniform_in_range_and_deterministic() {
        for i in 0..1000 {
            let u = philox_uniform(42, i);
            assert!((0.0..1.0).contains(&u));
            assert_eq!(u.to_bits(), philox_uniform(42, i).to_bits());
        }
        assert_ne!(philox_uniform(1, 0), philox_uniform(2, 0));
        assert_eq!(u32_to_unit(u32::MAX), 1.0 - 1.0 / 16_777_216.0);
    }

    #[test]
    fn normal_has_plausible_moments() {
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|i| philox_normal(7, i) as f64).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!((var - 1.0).abs() < 0.05, "var {var}");
        assert!(xs.iter().all(|x| x.is_finite()));
    }
}
