//! One vector width as a type: the lane operations the kernels of `vmath`, `kernels` and the
//! GEMM microkernel (`exec::cpu::gemm`) are written against, implemented for AVX2 (`__m256`,
//! 8 lanes) and AVX-512 (`__m512`, 16 lanes). Every algorithm is written once, generic over
//! [`Lanes`]; only this file knows the instructions.
//!
//! Invariants:
//! - Every method is `#[inline(always)]` and must only run inlined into a function compiled
//!   with the width's instruction set: [`with_avx2`] or [`with_avx512`] (through `with_lanes!`
//!   in `simd`), or GEMM's `#[target_feature]` entry points. That is what makes the `unsafe`
//!   methods sound: the intrinsics they call need the feature, which the caller checked at run
//!   time. (A closure written inside generic kernel code is compiled without the feature, and
//!   the intrinsics in it become calls: kernels use helper functions or macros instead.)
//! - The two widths give the same bits lane for lane: each method is the same IEEE operation
//!   (or integer operation) per lane, both honour MXCSR (FTZ+DAZ in the strict tier; no
//!   embedded rounding or SAE anywhere), and a lane mask means the same thing in both.

#![allow(clippy::missing_safety_doc)]

use std::arch::x86_64::*;

/// A vector of `N` f32 lanes with its integer vector and lane mask types.
///
/// Every method is `unsafe`: the CPU must have the width's instruction set (see the module
/// docs). Pointer methods state what they read or write.
pub(in crate::exec::cpu) trait Lanes: Copy {
    /// f32 lanes per vector (8 or 16).
    const N: usize;
    /// A vector of `N` i32 lanes.
    type I: Copy;
    /// A lane mask (one bit or one all-ones lane per lane).
    type M: Copy;

    // ---- float lanes
    unsafe fn splat(x: f32) -> Self;
    unsafe fn zero() -> Self;
    /// `p[..N]` readable.
    unsafe fn load(p: *const f32) -> Self;
    /// `p[..N]` writable.
    unsafe fn store(self, p: *mut f32);
    /// Non-temporal store of `p[..N]`; `p` must be aligned to the vector size (`4 * N` bytes).
    /// Weakly ordered: [`store_fence`] before anyone else may read it.
    unsafe fn stream(self, p: *mut f32);
    /// Lanes `..t` from `p[..t]` (t in 1..=N), the others 0. Reads nothing past `p[t - 1]`.
    unsafe fn load_part(p: *const f32, t: usize) -> Self;
    /// Lanes `..t` to `p[..t]` (t in 1..=N). Writes nothing past `p[t - 1]`.
    unsafe fn store_part(self, p: *mut f32, t: usize);
    unsafe fn add(a: Self, b: Self) -> Self;
    unsafe fn sub(a: Self, b: Self) -> Self;
    unsafe fn mul(a: Self, b: Self) -> Self;
    /// Hardware division (fast tier only).
    unsafe fn div_hw(a: Self, b: Self) -> Self;
    /// Hardware square root (fast tier only).
    unsafe fn sqrt_hw(a: Self) -> Self;
    /// `a*b + c`, one rounding (fast tier only).
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self;
    /// `c - a*b`, one rounding (fast tier only).
    unsafe fn fnmadd(a: Self, b: Self, c: Self) -> Self;
    /// `a*b - c`, one rounding (fast tier only).
    unsafe fn fmsub(a: Self, b: Self, c: Self) -> Self;
    /// Bitwise and / or / xor of the lanes' bits.
    unsafe fn and(a: Self, b: Self) -> Self;
    unsafe fn or(a: Self, b: Self) -> Self;
    unsafe fn xor(a: Self, b: Self) -> Self;
    /// Ordered, quiet comparisons (false where either lane is NaN).
    unsafe fn gt(a: Self, b: Self) -> Self::M;
    unsafe fn lt(a: Self, b: Self) -> Self::M;
    unsafe fn le(a: Self, b: Self) -> Self::M;
    unsafe fn ge(a: Self, b: Self) -> Self::M;
    unsafe fn eq(a: Self, b: Self) -> Self::M;
    /// True where either lane is NaN.
    unsafe fn unord(a: Self, b: Self) -> Self::M;
    /// `m ? a : b` per lane.
    unsafe fn sel(m: Self::M, a: Self, b: Self) -> Self;
    /// Lane `i` gets `t[idx[i]]` (idx in 0..4).
    unsafe fn pick(t: [f32; 4], idx: Self::I) -> Self;
    /// Truncating conversion (out of range and NaN give i32::MIN, as `cvttps2dq`).
    unsafe fn to_i(a: Self) -> Self::I;
    unsafe fn from_i(a: Self::I) -> Self;

    // ---- bit casts and integer lanes
    unsafe fn bits(a: Self) -> Self::I;
    unsafe fn float(a: Self::I) -> Self;
    unsafe fn si(x: i32) -> Self::I;
    unsafe fn iadd(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn isub(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn iand(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn ior(a: Self::I, b: Self::I) -> Self::I;
    unsafe fn ixor(a: Self::I, b: Self::I) -> Self::I;
    /// Logical shift right by 23 (the exponent field to the bottom).
    unsafe fn srl23(a: Self::I) -> Self::I;
    /// Logical shift right by 1.
    unsafe fn srl1(a: Self::I) -> Self::I;
    /// Shift left by 23 (into the exponent field).
    unsafe fn sll23(a: Self::I) -> Self::I;
    /// Arithmetic shift right by 1.
    unsafe fn sra1(a: Self::I) -> Self::I;
    unsafe fn ieq(a: Self::I, b: Self::I) -> Self::M;
    /// Signed `a > b`.
    unsafe fn igt(a: Self::I, b: Self::I) -> Self::M;
    /// `m ? a : 0` per lane.
    unsafe fn imask(m: Self::M, a: Self::I) -> Self::I;

    // ---- masks
    unsafe fn mor(a: Self::M, b: Self::M) -> Self::M;
    unsafe fn mand(a: Self::M, b: Self::M) -> Self::M;
    /// Every lane set.
    unsafe fn all(m: Self::M) -> bool;
    /// No lane set.
    unsafe fn none(m: Self::M) -> bool;
    /// Lanes `..t` set (t in 0..=N).
    unsafe fn first(t: usize) -> Self::M;
    /// Lane `j` of the result is lane `(j + s) % N` of `a` (the upper lanes moved down, for
    /// pairing lane `j` with lane `j + s` in a halving tree).
    unsafe fn rotate_down(a: Self, s: usize) -> Self;
}

/// Runs `f` inside a function compiled for AVX2 and FMA, so that the [`Lanes`] methods of
/// `__m256` inlined into it become single instructions.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(in crate::exec::cpu) unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// As [`with_avx2`] for AVX-512 (`__m512`).
///
/// # Safety
/// The CPU must support AVX-512 F, BW, DQ and VL (and AVX2 and FMA).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
pub(in crate::exec::cpu) unsafe fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// Orders earlier non-temporal stores before every later store (`sfence`).
///
/// # Safety
/// None beyond x86-64 (SSE is part of the baseline); `unsafe` only as the intrinsic is.
#[inline(always)]
pub(in crate::exec::cpu) unsafe fn store_fence() {
    _mm_sfence()
}

impl Lanes for __m256 {
    const N: usize = 8;
    type I = __m256i;
    type M = __m256;

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        _mm256_storeu_ps(p, self)
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut f32) {
        _mm256_stream_ps(p, self)
    }
    #[inline(always)]
    unsafe fn load_part(p: *const f32, t: usize) -> Self {
        let mut buf = [0.0f32; 8];
        std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), t);
        _mm256_loadu_ps(buf.as_ptr())
    }
    #[inline(always)]
    unsafe fn store_part(self, p: *mut f32, t: usize) {
        let mut buf = [0.0f32; 8];
        _mm256_storeu_ps(buf.as_mut_ptr(), self);
        std::ptr::copy_nonoverlapping(buf.as_ptr(), p, t);
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        _mm256_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        _mm256_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        _mm256_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn div_hw(a: Self, b: Self) -> Self {
        _mm256_div_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sqrt_hw(a: Self) -> Self {
        _mm256_sqrt_ps(a)
    }
    #[inline(always)]
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn fnmadd(a: Self, b: Self, c: Self) -> Self {
        _mm256_fnmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn fmsub(a: Self, b: Self, c: Self) -> Self {
        _mm256_fmsub_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn and(a: Self, b: Self) -> Self {
        _mm256_and_ps(a, b)
    }
    #[inline(always)]
    unsafe fn or(a: Self, b: Self) -> Self {
        _mm256_or_ps(a, b)
    }
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        _mm256_xor_ps(a, b)
    }
    #[inline(always)]
    unsafe fn gt(a: Self, b: Self) -> Self::M {
        _mm256_cmp_ps::<_CMP_GT_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn lt(a: Self, b: Self) -> Self::M {
        _mm256_cmp_ps::<_CMP_LT_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn le(a: Self, b: Self) -> Self::M {
        _mm256_cmp_ps::<_CMP_LE_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn ge(a: Self, b: Self) -> Self::M {
        _mm256_cmp_ps::<_CMP_GE_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn eq(a: Self, b: Self) -> Self::M {
        _mm256_cmp_ps::<_CMP_EQ_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn unord(a: Self, b: Self) -> Self::M {
        _mm256_cmp_ps::<_CMP_UNORD_Q>(a, b)
    }
    #[inline(always)]
    unsafe fn sel(m: Self::M, a: Self, b: Self) -> Self {
        _mm256_blendv_ps(b, a, m)
    }
    #[inline(always)]
    unsafe fn pick(t: [f32; 4], idx: Self::I) -> Self {
        _mm256_permutevar8x32_ps(_mm256_setr_ps(t[0], t[1], t[2], t[3], 0.0, 0.0, 0.0, 0.0), idx)
    }
    #[inline(always)]
    unsafe fn to_i(a: Self) -> Self::I {
        _mm256_cvttps_epi32(a)
    }
    #[inline(always)]
    unsafe fn from_i(a: Self::I) -> Self {
        _mm256_cvtepi32_ps(a)
    }
    #[inline(always)]
    unsafe fn bits(a: Self) -> Self::I {
        _mm256_castps_si256(a)
    }
    #[inline(always)]
    unsafe fn float(a: Self::I) -> Self {
        _mm256_castsi256_ps(a)
    }
    #[inline(always)]
    unsafe fn si(x: i32) -> Self::I {
        _mm256_set1_epi32(x)
    }
    #[inline(always)]
    unsafe fn iadd(a: Self::I, b: Self::I) -> Self::I {
        _mm256_add_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn isub(a: Self::I, b: Self::I) -> Self::I {
        _mm256_sub_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn iand(a: Self::I, b: Self::I) -> Self::I {
        _mm256_and_si256(a, b)
    }
    #[inline(always)]
    unsafe fn ior(a: Self::I, b: Self::I) -> Self::I {
        _mm256_or_si256(a, b)
    }
    #[inline(always)]
    unsafe fn ixor(a: Self::I, b: Self::I) -> Self::I {
        _mm256_xor_si256(a, b)
    }
    #[inline(always)]
    unsafe fn srl23(a: Self::I) -> Self::I {
        _mm256_srli_epi32::<23>(a)
    }
    #[inline(always)]
    unsafe fn srl1(a: Self::I) -> Self::I {
        _mm256_srli_epi32::<1>(a)
    }
    #[inline(always)]
    unsafe fn sll23(a: Self::I) -> Self::I {
        _mm256_slli_epi32::<23>(a)
    }
    #[inline(always)]
    unsafe fn sra1(a: Self::I) -> Self::I {
        _mm256_srai_epi32::<1>(a)
    }
    #[inline(always)]
    unsafe fn ieq(a: Self::I, b: Self::I) -> Self::M {
        _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b))
    }
    #[inline(always)]
    unsafe fn igt(a: Self::I, b: Self::I) -> Self::M {
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(a, b))
    }
    #[inline(always)]
    unsafe fn imask(m: Self::M, a: Self::I) -> Self::I {
        _mm256_and_si256(_mm256_castps_si256(m), a)
    }
    #[inline(always)]
    unsafe fn mor(a: Self::M, b: Self::M) -> Self::M {
        _mm256_or_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mand(a: Self::M, b: Self::M) -> Self::M {
        _mm256_and_ps(a, b)
    }
    #[inline(always)]
    unsafe fn all(m: Self::M) -> bool {
        _mm256_movemask_ps(m) == 0xff
    }
    #[inline(always)]
    unsafe fn none(m: Self::M) -> bool {
        _mm256_movemask_ps(m) == 0
    }
    #[inline(always)]
    unsafe fn first(t: usize) -> Self::M {
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(
            _mm256_set1_epi32(t as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        ))
    }
    #[inline(always)]
    unsafe fn rotate_down(a: Self, s: usize) -> Self {
        let idx = _mm256_and_si256(
            _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(s as i32)),
            _mm256_set1_epi32(7),
        );
        _mm256_permutevar8x32_ps(a, idx)
    }
}

impl Lanes for __m512 {
    const N: usize = 16;
    type I = __m512i;
    type M = __mmask16;

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        _mm512_storeu_ps(p, self)
    }
    #[inline(always)]
    unsafe fn stream(self, p: *mut f32) {
        _mm512_stream_ps(p, self)
    }
    #[inline(always)]
    unsafe fn load_part(p: *const f32, t: usize) -> Self {
        // Masked-off lanes are neither read nor fault.
        _mm512_maskz_loadu_ps(Self::first(t), p)
    }
    #[inline(always)]
    unsafe fn store_part(self, p: *mut f32, t: usize) {
        _mm512_mask_storeu_ps(p, Self::first(t), self)
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        _mm512_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        _mm512_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn div_hw(a: Self, b: Self) -> Self {
        _mm512_div_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sqrt_hw(a: Self) -> Self {
        _mm512_sqrt_ps(a)
    }
    #[inline(always)]
    unsafe fn fmadd(a: Self, b: Self, c: Self) -> Self {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn fnmadd(a: Self, b: Self, c: Self) -> Self {
        _mm512_fnmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn fmsub(a: Self, b: Self, c: Self) -> Self {
        _mm512_fmsub_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn and(a: Self, b: Self) -> Self {
        _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
    }
    #[inline(always)]
    unsafe fn or(a: Self, b: Self) -> Self {
        _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
    }
    #[inline(always)]
    unsafe fn xor(a: Self, b: Self) -> Self {
        _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
    }
    #[inline(always)]
    unsafe fn gt(a: Self, b: Self) -> Self::M {
        _mm512_cmp_ps_mask::<_CMP_GT_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn lt(a: Self, b: Self) -> Self::M {
        _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn le(a: Self, b: Self) -> Self::M {
        _mm512_cmp_ps_mask::<_CMP_LE_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn ge(a: Self, b: Self) -> Self::M {
        _mm512_cmp_ps_mask::<_CMP_GE_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn eq(a: Self, b: Self) -> Self::M {
        _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(a, b)
    }
    #[inline(always)]
    unsafe fn unord(a: Self, b: Self) -> Self::M {
        _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, b)
    }
    #[inline(always)]
    unsafe fn sel(m: Self::M, a: Self, b: Self) -> Self {
        _mm512_mask_blend_ps(m, b, a)
    }
    #[inline(always)]
    unsafe fn pick(t: [f32; 4], idx: Self::I) -> Self {
        let table = _mm512_castps128_ps512(_mm_setr_ps(t[0], t[1], t[2], t[3]));
        _mm512_permutexvar_ps(idx, table)
    }
    #[inline(always)]
    unsafe fn to_i(a: Self) -> Self::I {
        _mm512_cvttps_epi32(a)
    }
    #[inline(always)]
    unsafe fn from_i(a: Self::I) -> Self {
        _mm512_cvtepi32_ps(a)
    }
    #[inline(always)]
    unsafe fn bits(a: Self) -> Self::I {
        _mm512_castps_si512(a)
    }
    #[inline(always)]
    unsafe fn float(a: Self::I) -> Self {
        _mm512_castsi512_ps(a)
    }
    #[inline(always)]
    unsafe fn si(x: i32) -> Self::I {
        _mm512_set1_epi32(x)
    }
    #[inline(always)]
    unsafe fn iadd(a: Self::I, b: Self::I) -> Self::I {
        _mm512_add_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn isub(a: Self::I, b: Self::I) -> Self::I {
        _mm512_sub_epi32(a, b)
    }
    #[inline(always)]
    unsafe fn iand(a: Self::I, b: Self::I) -> Self::I {
        _mm512_and_si512(a, b)
    }
    #[inline(always)]
    unsafe fn ior(a: Self::I, b: Self::I) -> Self::I {
        _mm512_or_si512(a, b)
    }
    #[inline(always)]
    unsafe fn ixor(a: Self::I, b: Self::I) -> Self::I {
        _mm512_xor_si512(a, b)
    }
    #[inline(always)]
    unsafe fn srl23(a: Self::I) -> Self::I {
        _mm512_srli_epi32::<23>(a)
    }
    #[inline(always)]
    unsafe fn srl1(a: Self::I) -> Self::I {
        _mm512_srli_epi32::<1>(a)
    }
    #[inline(always)]
    unsafe fn sll23(a: Self::I) -> Self::I {
        _mm512_slli_epi32::<23>(a)
    }
    #[inline(always)]
    unsafe fn sra1(a: Self::I) -> Self::I {
        _mm512_srai_epi32::<1>(a)
    }
    #[inline(always)]
    unsafe fn ieq(a: Self::I, b: Self::I) -> Self::M {
        _mm512_cmpeq_epi32_mask(a, b)
    }
    #[inline(always)]
    unsafe fn igt(a: Self::I, b: Self::I) -> Self::M {
        _mm512_cmpgt_epi32_mask(a, b)
    }
    #[inline(always)]
    unsafe fn imask(m: Self::M, a: Self::I) -> Self::I {
        _mm512_maskz_mov_epi32(m, a)
    }
    #[inline(always)]
    unsafe fn mor(a: Self::M, b: Self::M) -> Self::M {
        a | b
    }
    #[inline(always)]
    unsafe fn mand(a: Self::M, b: Self::M) -> Self::M {
        a & b
    }
    #[inline(always)]
    unsafe fn all(m: Self::M) -> bool {
        m == 0xffff
    }
    #[inline(always)]
    unsafe fn none(m: Self::M) -> bool {
        m == 0
    }
    #[inline(always)]
    unsafe fn first(t: usize) -> Self::M {
        if t >= 16 {
            0xffff
        } else {
            ((1u32 << t) - 1) as u16
        }
    }
    #[inline(always)]
    unsafe fn rotate_down(a: Self, s: usize) -> Self {
        let iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let idx =
            _mm512_and_si512(_mm512_add_epi32(iota, _mm512_set1_epi32(s as i32)), _mm512_set1_epi32(15));
        _mm512_permutexvar_ps(idx, a)
    }
}
