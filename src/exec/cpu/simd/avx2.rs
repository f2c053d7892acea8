//! AVX2 loops over slices and rows, built on the lane functions of `vmath`.
//!
//! Every function is `unsafe` because it is compiled with `#[target_feature(enable =
//! "avx2,fma")]`: the caller must have checked that the CPU has AVX2 and FMA. Functions taking
//! raw pointers state their extra requirements. Strict results also need MXCSR FTZ+DAZ on the
//! calling thread (the dispatch in `simd::mod` enters an `FtzGuard` around every call).

use std::arch::x86_64::*;

use super::vmath::{self as vm, V};
use crate::exec::cpu::reference::{Binary, Unary};
use crate::numerics as nx;

/// Loads up to 8 values (`p[..t]`, t in 1..=8) with the other lanes 0.
///
/// # Safety
/// `p[..t]` must be readable.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn load_part(p: *const f32, t: usize) -> V {
    let mut buf = [0.0f32; 8];
    std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), t);
    _mm256_loadu_ps(buf.as_ptr())
}
/// Stores the first `t` lanes of `v` to `p[..t]`.
///
/// # Safety
/// `p[..t]` must be writable.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn store_part(p: *mut f32, v: V, t: usize) {
    let mut buf = [0.0f32; 8];
    _mm256_storeu_ps(buf.as_mut_ptr(), v);
    std::ptr::copy_nonoverlapping(buf.as_ptr(), p, t);
}
/// Lane mask of the first `t` lanes (t in 0..=8).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn first_lanes(t: usize) -> __m256i {
    _mm256_cmpgt_epi32(_mm256_set1_epi32(t as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
}

// ---- elementwise -----------------------------------------------------------------------------

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn unary_v<const OP: u8, const F: bool>(x: V) -> V {
    match OP {
        0 => vm::neg(x),
        1 => vm::abs(x),
        2 => vm::sqrt::<F>(x),
        3 => vm::rsqrt::<F>(x),
        4 => vm::exp::<F>(x),
        5 => vm::log::<F>(x),
        6 => vm::relu(x),
        7 => vm::sigmoid::<F>(x),
        8 => vm::tanh::<F>(x),
        _ => vm::gelu::<F>(x),
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn unary_loop<const OP: u8, const F: bool>(a: &[f32], out: &mut [f32]) {
    let n = out.len().min(a.len());
    let (pa, po) = (a.as_ptr(), out.as_mut_ptr());
    let mut i = 0;
    while i + 8 <= n {
        _mm256_storeu_ps(po.add(i), unary_v::<OP, F>(_mm256_loadu_ps(pa.add(i))));
        i += 8;
    }
    if i < n {
        store_part(po.add(i), unary_v::<OP, F>(load_part(pa.add(i), n - i)), n - i);
    }
}

/// `out[i] = op(a[i])` for `i < min(len)`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
pub(super) unsafe fn unary(op: Unary, fast: bool, a: &[f32], out: &mut [f32]) {
    macro_rules! go {
        ($k:literal) => {
            if fast {
                unary_loop::<$k, true>(a, out)
            } else {
                unary_loop::<$k, false>(a, out)
            }
        };
    }
    match op {
        Unary::Neg => go!(0),
        Unary::Abs => go!(1),
        Unary::Sqrt => go!(2),
        Unary::Rsqrt => go!(3),
        Unary::Exp => go!(4),
        Unary::Log => go!(5),
        Unary::Relu => go!(6),
        Unary::Sigmoid => go!(7),
        Unary::Tanh => go!(8),
        Unary::Gelu => go!(9),
    }
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn binary_v<const OP: u8, const F: bool>(a: V, b: V) -> V {
    match OP {
        0 => vm::fix_nan(vm::add(a, b)),
        1 => vm::fix_nan(vm::sub(a, b)),
        2 => vm::fix_nan(vm::mul(a, b)),
        3 => vm::div::<F>(a, b),
        4 => vm::max(a, b),
        _ => vm::min(a, b),
    }
}

/// One contiguous segment: `out[i] = op(a[i], b[i])`, where an operand marked `AS`/`BS` is a
/// single value used for every `i`.
#[target_feature(enable = "avx2,fma")]
unsafe fn binary_seg<const OP: u8, const F: bool, const AS: bool, const BS: bool>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
) {
    let n = out.len();
    assert!(
        (if AS { !a.is_empty() } else { a.len() >= n }) && (if BS { !b.is_empty() } else { b.len() >= n })
    );
    let (pa, pb, po) = (a.as_ptr(), b.as_ptr(), out.as_mut_ptr());
    let (sa, sb) = (_mm256_set1_ps(a[0]), _mm256_set1_ps(b[0]));
    let mut i = 0;
    // Four independent vectors per step keep more loads in flight (memory-bound ops).
    while i + 32 <= n {
        for j in [0, 8, 16, 24] {
            let va = if AS { sa } else { _mm256_loadu_ps(pa.add(i + j)) };
            let vb = if BS { sb } else { _mm256_loadu_ps(pb.add(i + j)) };
            _mm256_storeu_ps(po.add(i + j), binary_v::<OP, F>(va, vb));
        }
        i += 32;
    }
    while i + 8 <= n {
        let va = if AS { sa } else { _mm256_loadu_ps(pa.add(i)) };
        let vb = if BS { sb } else { _mm256_loadu_ps(pb.add(i)) };
        _mm256_storeu_ps(po.add(i), binary_v::<OP, F>(va, vb));
        i += 8;
    }
    if i < n {
        let t = n - i;
        let va = if AS { sa } else { load_part(pa.add(i), t) };
        let vb = if BS { sb } else { load_part(pb.add(i), t) };
        store_part(po.add(i), binary_v::<OP, F>(va, vb), t);
    }
}

/// How an operand of a binary op maps onto the flat output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    /// Same shape as the output.
    Full,
    /// A row of this length repeated (broadcast over leading axes; a scalar is `Row(1)`).
    Row(usize),
    /// Each value repeated this many times in a row (broadcast over trailing axes).
    Col(usize),
}

/// `out = op(a, b)` for the output elements `start..start + out.len()`, one operand `Full`.
///
/// # Safety
/// The CPU must support AVX2 and FMA. The operands must be as long as their `Side` says for an
/// output of at least `start + out.len()` elements.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn binary_range(
    op: Binary,
    fast: bool,
    a: &[f32],
    sa: Side,
    b: &[f32],
    sb: Side,
    out: &mut [f32],
    start: usize,
) {
    macro_rules! seg {
        ($as:literal, $bs:literal, $x:expr, $y:expr, $o:expr) => {{
            macro_rules! tier {
                ($k:literal) => {
                    if fast {
                        binary_seg::<$k, true, $as, $bs>($x, $y, $o)
                    } else {
                        binary_seg::<$k, false, $as, $bs>($x, $y, $o)
                    }
                };
            }
            match op {
                Binary::Add => tier!(0),
                Binary::Sub => tier!(1),
                Binary::Mul => tier!(2),
                Binary::Div => tier!(3),
                Binary::Max => tier!(4),
                Binary::Min => tier!(5),
            }
        }};
    }
    let n = out.len();
    let mut p = 0;
    while p < n {
        let g = start + p; // global output index
        let (len, done) = match (sa, sb) {
            (Side::Full, Side::Full) => {
                seg!(false, false, &a[g..g + n], &b[g..g + n], &mut out[..]);
                (n, true)
            }
            (Side::Full, Side::Row(l)) => {
                let len = (l - g % l).min(n - p);
                seg!(false, false, &a[g..g + len], &b[g % l..g % l + len], &mut out[p..p + len]);
                (len, false)
            }
            (Side::Row(l), Side::Full) => {
                let len = (l - g % l).min(n - p);
                seg!(false, false, &a[g % l..g % l + len], &b[g..g + len], &mut out[p..p + len]);
                (len, false)
            }
            (Side::Full, Side::Col(r)) => {
                let len = (r - g % r).min(n - p);
                seg!(false, true, &a[g..g + len], &b[g / r..], &mut out[p..p + len]);
                (len, false)
            }
            (Side::Col(r), Side::Full) => {
                let len = (r - g % r).min(n - p);
                seg!(true, false, &a[g / r..], &b[g..g + len], &mut out[p..p + len]);
                (len, false)
            }
            _ => unreachable!("binary_range needs one Full operand"),
        };
        if done {
            break;
        }
        p += len;
    }
}

/// `out = op(a, s)`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
pub(super) unsafe fn binary_scalar(op: Binary, fast: bool, a: &[f32], s: f32, out: &mut [f32]) {
    let n = out.len();
    binary_range(op, fast, &a[..n], Side::Full, &[s], Side::Col(usize::MAX), out, 0);
}

// ---- the 256-lane reduction tree ------------------------------------------------------------

/// What a tree pass reads, stores and combines.
pub(super) mod kind {
    /// Sum of `x`.
    pub const SUM: u8 = 0;
    /// Sum of `x*x`.
    pub const SUMSQ: u8 = 1;
    /// Strict max of `x`.
    pub const MAX: u8 = 2;
    /// `e = exp(x - c)` stored to `out`, summed (softmax).
    pub const EXP_SUM: u8 = 3;
    /// `d = x - c` stored to `out`, `d*d` summed (layer norm).
    pub const CENTER_SUMSQ: u8 = 4;
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn tree_step<const K: u8, const F: bool>(acc: V, x: V, c: V) -> (V, V) {
    match K {
        kind::SUM => (vm::add(acc, x), x),
        kind::SUMSQ => (vm::add(acc, vm::mul(x, x)), x),
        kind::MAX => (vm::max(acc, x), x),
        kind::EXP_SUM => {
            let e = vm::exp::<F>(vm::sub(x, c));
            (vm::add(acc, e), e)
        }
        _ => {
            let d = vm::sub(x, c);
            (vm::add(acc, vm::mul(d, d)), d)
        }
    }
}

/// The `numerics` reduction tree over `n` values read from `px`, with 32 vectors of 8 lanes
/// (lane `j` = vector `j / 8`, element `j % 8`): element `i` goes to lane `i % 256`, then the
/// halvings `s = 128..8` combine whole vectors and `s = 4, 2, 1` run on the 8 lanes of vector 0
/// with the scalar strict operations. Equals `numerics::sum` / `max_reduce` bit for bit (the
/// result is canonical). Kinds `EXP_SUM` and `CENTER_SUMSQ` also store the mapped values to
/// `po[..n]` (`po` may equal `px`).
///
/// # Safety
/// The CPU must support AVX2 and FMA; `px[..n]` readable; for the storing kinds `po[..n]`
/// writable (it may be the same memory as `px`, nothing else may alias it).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn tree<const K: u8, const F: bool>(px: *const f32, n: usize, c: f32, po: *mut f32) -> f32 {
    let stores = K == kind::EXP_SUM || K == kind::CENTER_SUMSQ;
    let init = if K == kind::MAX { f32::NEG_INFINITY } else { 0.0 };
    let cv = _mm256_set1_ps(c);
    let mut acc = [_mm256_set1_ps(init); 32];
    let mut base = 0;
    while base + 256 <= n {
        for (v, a) in acc.iter_mut().enumerate() {
            let (na, y) = tree_step::<K, F>(*a, _mm256_loadu_ps(px.add(base + 8 * v)), cv);
            *a = na;
            if stores {
                _mm256_storeu_ps(po.add(base + 8 * v), y);
            }
        }
        base += 256;
    }
    let rem = n - base;
    for (v, a) in acc.iter_mut().enumerate().take(rem / 8) {
        let (na, y) = tree_step::<K, F>(*a, _mm256_loadu_ps(px.add(base + 8 * v)), cv);
        *a = na;
        if stores {
            _mm256_storeu_ps(po.add(base + 8 * v), y);
        }
    }
    let t = rem % 8;
    if t > 0 {
        let v = rem / 8;
        let off = base + 8 * v;
        let (na, y) = tree_step::<K, F>(acc[v], load_part(px.add(off), t), cv);
        // Lanes past the end are untouched (not combined with a neutral value: -0 + +0 = +0).
        acc[v] = _mm256_blendv_ps(acc[v], na, _mm256_castsi256_ps(first_lanes(t)));
        if stores {
            store_part(po.add(off), y, t);
        }
    }
    let mut s = 16;
    while s >= 1 {
        for v in 0..s {
            acc[v] = if K == kind::MAX { vm::max(acc[v], acc[v + s]) } else { vm::add(acc[v], acc[v + s]) };
        }
        s /= 2;
    }
    let mut l = [0.0f32; 8];
    _mm256_storeu_ps(l.as_mut_ptr(), acc[0]);
    for s in [4, 2, 1] {
        for j in 0..s {
            l[j] = if K == kind::MAX { nx::max(l[j], l[j + s]) } else { nx::add(l[j], l[j + s]) };
        }
    }
    l[0]
}

/// Strict tree sum of a slice (`numerics::sum`).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
pub(super) unsafe fn sum(x: &[f32]) -> f32 {
    tree::<{ kind::SUM }, false>(x.as_ptr(), x.len(), 0.0, std::ptr::null_mut())
}
/// Strict tree max of a slice (`numerics::max_reduce`).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
pub(super) unsafe fn max_reduce(x: &[f32]) -> f32 {
    tree::<{ kind::MAX }, false>(x.as_ptr(), x.len(), 0.0, std::ptr::null_mut())
}

/// Reduction over a strided axis: outputs `o * inner + i` for `i` in `i0..i0 + out.len()`, each
/// the tree over `x[(o * len + k) * inner + i]`, k ascending. Eight outputs share one pass: lane
/// `j` of the tree is one vector (8 outputs), so the halvings are all whole-vector operations.
/// `MEAN` divides by `len` (strict vector division). `K` is `SUM` or `MAX`.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `x` must hold the whole `[outer, len, inner]` tensor.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn reduce_strided<const K: u8, const MEAN: bool>(
    x: &[f32],
    len: usize,
    inner: usize,
    o: usize,
    i0: usize,
    out: &mut [f32],
) {
    let init = _mm256_set1_ps(if K == kind::MAX { f32::NEG_INFINITY } else { 0.0 });
    let mut i = 0;
    while i < out.len() {
        let t = (out.len() - i).min(8);
        assert!(i0 + i + t <= inner && (len == 0 || (o * len + len - 1) * inner + i0 + i + t <= x.len()));
        let mask = first_lanes(t);
        let mut acc = [init; 256];
        for k in 0..len {
            let p = x.as_ptr().add((o * len + k) * inner + i0 + i);
            let v = if t == 8 { _mm256_loadu_ps(p) } else { _mm256_maskload_ps(p, mask) };
            let a = &mut acc[k % 256];
            *a = if K == kind::MAX { vm::max(*a, v) } else { vm::add(*a, v) };
        }
        let mut s = 128;
        while s >= 1 {
            for j in 0..s {
                acc[j] =
                    if K == kind::MAX { vm::max(acc[j], acc[j + s]) } else { vm::add(acc[j], acc[j + s]) };
            }
            s /= 2;
        }
        let mut r = vm::fix_nan(acc[0]);
        if MEAN {
            r = vm::div::<false>(r, _mm256_set1_ps(len as f32));
        }
        store_part(out.as_mut_ptr().add(i), r, t);
        i += t;
    }
}

// ---- row kernels -----------------------------------------------------------------------------

/// How the softmax mask meets one row.
#[derive(Clone, Copy)]
pub(super) enum RowMask<'a> {
    None,
    /// One mask value per element of the row.
    Row(&'a [f32]),
    /// One mask value for the whole row.
    Splat(f32),
}

/// One softmax row (`numerics::softmax_row` on `add(mul(x, scale), mask)`); fast: FMA exp and a
/// hardware reciprocal.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn softmax_row<const F: bool>(x: &[f32], mask: RowMask, scale: f32, out: &mut [f32]) {
    let n = out.len();
    assert!(x.len() == n && !matches!(mask, RowMask::Row(m) if m.len() < n));
    let sc = _mm256_set1_ps(scale);
    let (px, po) = (x.as_ptr(), out.as_mut_ptr());
    let logit = |i: usize, v: V| -> V {
        let l = vm::mul(v, sc);
        match mask {
            RowMask::None => l,
            RowMask::Row(m) => vm::add(l, load_part(m.as_ptr().add(i), 8.min(n - i))),
            RowMask::Splat(m) => vm::add(l, _mm256_set1_ps(m)),
        }
    };
    let mut i = 0;
    while i + 8 <= n {
        _mm256_storeu_ps(po.add(i), logit(i, _mm256_loadu_ps(px.add(i))));
        i += 8;
    }
    if i < n {
        store_part(po.add(i), logit(i, load_part(px.add(i), n - i)), n - i);
    }
    let m = tree::<{ kind::MAX }, F>(po, n, 0.0, po);
    let s = tree::<{ kind::EXP_SUM }, F>(po, n, m, po);
    let r = if F { 1.0 / s } else { nx::recip(s) };
    scale_row(out, r);
}

/// `out[i] = canon(out[i] * r)`.
#[target_feature(enable = "avx2,fma")]
unsafe fn scale_row(out: &mut [f32], r: f32) {
    let n = out.len();
    let po = out.as_mut_ptr();
    let rv = _mm256_set1_ps(r);
    let mut i = 0;
    while i + 8 <= n {
        _mm256_storeu_ps(po.add(i), vm::fix_nan(vm::mul(_mm256_loadu_ps(po.add(i)), rv)));
        i += 8;
    }
    if i < n {
        store_part(po.add(i), vm::fix_nan(vm::mul(load_part(po.add(i), n - i), rv)), n - i);
    }
}

/// `out[i] = canon(((out[i] * rs) * gamma[i]) + beta[i])` (gamma, beta optional), or with
/// `src` as the input instead of `out` when given.
#[target_feature(enable = "avx2,fma")]
unsafe fn affine_row(
    src: Option<&[f32]>,
    out: &mut [f32],
    rs: f32,
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
) {
    let n = out.len();
    assert!(
        src.is_none_or(|s| s.len() == n)
            && gamma.is_none_or(|g| g.len() == n)
            && beta.is_none_or(|b| b.len() == n)
    );
    let po = out.as_mut_ptr();
    let ps = src.map_or(po as *const f32, |s| s.as_ptr());
    let rv = _mm256_set1_ps(rs);
    let f = |i: usize, t: usize| {
        let ld = |p: *const f32| if t == 8 { _mm256_loadu_ps(p.add(i)) } else { load_part(p.add(i), t) };
        let mut y = vm::mul(ld(ps), rv);
        if let Some(g) = gamma {
            y = vm::mul(y, ld(g.as_ptr()));
        }
        if let Some(b) = beta {
            y = vm::add(y, ld(b.as_ptr()));
        }
        y = vm::fix_nan(y);
        if t == 8 {
            _mm256_storeu_ps(po.add(i), y)
        } else {
            store_part(po.add(i), y, t)
        }
    };
    let mut i = 0;
    while i + 8 <= n {
        f(i, 8);
        i += 8;
    }
    if i < n {
        f(i, n - i);
    }
}

/// One layer-norm row (`numerics::layernorm_row`).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn layernorm_row<const F: bool>(
    x: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    out: &mut [f32],
) {
    let n = x.len();
    assert_eq!(out.len(), n);
    let cnt = n as f32;
    let mu = nx::div(sum(x), cnt);
    let ss = tree::<{ kind::CENTER_SUMSQ }, F>(x.as_ptr(), n, mu, out.as_mut_ptr());
    let var = nx::div(ss, cnt);
    let rs = if F { 1.0 / nx::add(var, eps).sqrt() } else { nx::rsqrt(nx::add(var, eps)) };
    affine_row(None, out, rs, gamma, beta);
}

/// One RMS-norm row (`numerics::rmsnorm_row`).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rmsnorm_row<const F: bool>(x: &[f32], gamma: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    let n = x.len();
    let ss = tree::<{ kind::SUMSQ }, F>(x.as_ptr(), n, 0.0, std::ptr::null_mut());
    let ms = nx::div(ss, n as f32);
    let rs = if F { 1.0 / nx::add(ms, eps).sqrt() } else { nx::rsqrt(nx::add(ms, eps)) };
    affine_row(Some(x), out, rs, gamma, None);
}
