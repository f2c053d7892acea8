//! The vector loops over slices and rows, written once over [`Lanes`] and built on the lane
//! functions of `vmath`. AVX2 runs them on 8 lanes, AVX-512 on 16.
//!
//! Every function is `#[inline(always)]` and `unsafe`: it must run inlined into a function
//! compiled for its width (the dispatch in `simd::mod` calls it inside `with_lanes!`, after
//! checking the CPU). Functions taking raw pointers state their extra requirements. Strict
//! results also need MXCSR FTZ+DAZ on the calling thread (the dispatch enters an `FtzGuard`
//! around every call).
//!
//! Width independence: elementwise loops compute each output from its own inputs only, so
//! the width changes nothing. The reductions follow the one 256-lane tree of
//! `numerics::sum` at both widths (32 vectors of 8 lanes or 16 of 16: lane `j` is vector
//! `j / N`, element `j % N`, and the halvings are the same pairs of lanes); the strided
//! reduction puts one output per lane, so its tree is the same at any width.

use super::lanes::Lanes;
use super::vmath as vm;
use crate::exec::cpu::reference::{Binary, Unary};
use crate::numerics as nx;

/// `p[..t]` (t in 1..=N) as a vector, the other lanes 0.
#[inline(always)]
unsafe fn ld_n<L: Lanes>(p: *const f32, t: usize) -> L {
    if t == L::N {
        L::load(p)
    } else {
        L::load_part(p, t)
    }
}
/// Stores `v` to `p[..N]`.
#[inline(always)]
unsafe fn st<L: Lanes>(p: *mut f32, v: L) {
    v.store(p)
}
/// Stores the first `t` lanes of `v` to `p[..t]`.
#[inline(always)]
unsafe fn st_part<L: Lanes>(p: *mut f32, v: L, t: usize) {
    v.store_part(p, t)
}

// ---- elementwise -----------------------------------------------------------------------------

#[inline(always)]
unsafe fn unary_v<L: Lanes, const OP: u8, const F: bool>(x: L) -> L {
    match OP {
        0 => vm::neg(x),
        1 => vm::abs(x),
        2 => vm::sqrt::<L, F>(x),
        3 => vm::rsqrt::<L, F>(x),
        4 => vm::exp::<L, F>(x),
        5 => vm::log::<L, F>(x),
        6 => vm::relu(x),
        7 => vm::sigmoid::<L, F>(x),
        8 => vm::tanh::<L, F>(x),
        9 => vm::gelu::<L, F>(x),
        10 => vm::silu::<L, F>(x),
        // 11, the last code `unary` passes.
        _ => vm::erf::<L, F>(x),
    }
}

#[inline(always)]
unsafe fn unary_loop<L: Lanes, const OP: u8, const F: bool>(a: &[f32], out: &mut [f32]) {
    let n = out.len().min(a.len());
    let (pa, po) = (a.as_ptr(), out.as_mut_ptr());
    let mut i = 0;
    while i + L::N <= n {
        st(po.add(i), unary_v::<L, OP, F>(L::load(pa.add(i))));
        i += L::N;
    }
    if i < n {
        st_part(po.add(i), unary_v::<L, OP, F>(L::load_part(pa.add(i), n - i)), n - i);
    }
}

/// `out[i] = op(a[i])` for `i < min(len)`.
///
/// # Safety
/// As for every function here (see the module docs).
#[inline(always)]
pub(super) unsafe fn unary<L: Lanes>(op: Unary, fast: bool, a: &[f32], out: &mut [f32]) {
    macro_rules! go {
        ($k:literal) => {
            if fast {
                unary_loop::<L, $k, true>(a, out)
            } else {
                unary_loop::<L, $k, false>(a, out)
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
        Unary::Silu => go!(10),
        Unary::Erf => go!(11),
    }
}

#[inline(always)]
unsafe fn binary_v<L: Lanes, const OP: u8, const F: bool>(a: L, b: L) -> L {
    match OP {
        0 => vm::fix_nan(L::add(a, b)),
        1 => vm::fix_nan(L::sub(a, b)),
        2 => vm::fix_nan(L::mul(a, b)),
        3 => vm::div::<L, F>(a, b),
        4 => vm::max(a, b),
        _ => vm::min(a, b),
    }
}

/// One contiguous segment: `out[i] = op(a[i], b[i])`, where an operand marked `AS`/`BS` is a
/// single value used for every `i`. `nt`: write whole vectors with non-temporal stores (for
/// outputs far larger than the caches: no read-for-ownership of lines that are overwritten
/// whole), fenced before returning. Every output gets the same value either way.
#[inline(always)]
unsafe fn binary_seg<L: Lanes, const OP: u8, const F: bool, const AS: bool, const BS: bool>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    nt: bool,
) {
    let n = out.len();
    assert!(
        (if AS { !a.is_empty() } else { a.len() >= n }) && (if BS { !b.is_empty() } else { b.len() >= n })
    );
    let (pa, pb, po) = (a.as_ptr(), b.as_ptr(), out.as_mut_ptr());
    let (sa, sb) = (L::splat(a[0]), L::splat(b[0]));
    // `t` (1..=N) outputs from `i` on, with partial loads and stores (a macro: a closure would
    // be compiled without the width's instruction set).
    macro_rules! part {
        ($i:expr, $t:expr) => {{
            let (i, t) = ($i, $t);
            let va = if AS { sa } else { L::load_part(pa.add(i), t) };
            let vb = if BS { sb } else { L::load_part(pb.add(i), t) };
            st_part(po.add(i), binary_v::<L, OP, F>(va, vb), t);
            t
        }};
    }
    let mut i = 0;
    if nt {
        // Up to the output's first 64-byte boundary, so that every streamed vector is aligned.
        let head = ((64 - po as usize % 64) % 64 / 4).min(n);
        while i < head {
            i += part!(i, (head - i).min(L::N));
        }
    }
    // Four independent vectors per step keep more loads in flight (memory-bound ops).
    while i + 4 * L::N <= n {
        for u in 0..4 {
            let j = i + u * L::N;
            let va = if AS { sa } else { L::load(pa.add(j)) };
            let vb = if BS { sb } else { L::load(pb.add(j)) };
            let y = binary_v::<L, OP, F>(va, vb);
            if nt {
                y.stream(po.add(j))
            } else {
                st(po.add(j), y)
            }
        }
        i += 4 * L::N;
    }
    if nt {
        super::lanes::store_fence();
    }
    while i + L::N <= n {
        let va = if AS { sa } else { L::load(pa.add(i)) };
        let vb = if BS { sb } else { L::load(pb.add(i)) };
        st(po.add(i), binary_v::<L, OP, F>(va, vb));
        i += L::N;
    }
    if i < n {
        part!(i, n - i);
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

/// `out = op(a, b)` for the output elements `start..start + out.len()`, one operand `Full`;
/// `nt`: non-temporal stores (see `binary_seg`).
///
/// # Safety
/// As for every function here (see the module docs). The operands must be as long as their `Side` says for an
/// output of at least `start + out.len()` elements.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) unsafe fn binary_range<L: Lanes>(
    op: Binary,
    fast: bool,
    a: &[f32],
    sa: Side,
    b: &[f32],
    sb: Side,
    out: &mut [f32],
    start: usize,
    nt: bool,
) {
    macro_rules! seg {
        ($as:literal, $bs:literal, $x:expr, $y:expr, $o:expr) => {{
            macro_rules! tier {
                ($k:literal) => {
                    if fast {
                        binary_seg::<L, $k, true, $as, $bs>($x, $y, $o, nt)
                    } else {
                        binary_seg::<L, $k, false, $as, $bs>($x, $y, $o, nt)
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
/// As for every function here (see the module docs).
#[inline(always)]
pub(super) unsafe fn binary_scalar<L: Lanes>(
    op: Binary,
    fast: bool,
    a: &[f32],
    s: f32,
    out: &mut [f32],
    nt: bool,
) {
    let n = out.len();
    binary_range::<L>(op, fast, &a[..n], Side::Full, &[s], Side::Col(usize::MAX), out, 0, nt);
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

#[inline(always)]
unsafe fn tree_step<L: Lanes, const K: u8, const F: bool>(acc: L, x: L, c: L) -> (L, L) {
    match K {
        kind::SUM => (L::add(acc, x), x),
        kind::SUMSQ => (L::add(acc, L::mul(x, x)), x),
        kind::MAX => (vm::max(acc, x), x),
        kind::EXP_SUM => {
            let e = vm::exp::<L, F>(L::sub(x, c));
            (L::add(acc, e), e)
        }
        _ => {
            let d = L::sub(x, c);
            (L::add(acc, L::mul(d, d)), d)
        }
    }
}

/// The `numerics` reduction tree over `n` values read from `px`, with `NV = 256 / N` vectors
/// of `N` lanes (lane `j` = vector `j / N`, element `j % N`): element `i` goes to lane
/// `i % 256`, then the halvings `s = 128..N` combine whole vectors (vector `v` with `v + s/N`)
/// and `s = N/2..1` run on the lanes of vector 0 with the scalar strict operations. The pairs
/// combined are the same at every width, so AVX2 and AVX-512 give the same bits, and they equal
/// `numerics::sum` / `max_reduce` bit for bit (the result is canonical). Kinds `EXP_SUM` and
/// `CENTER_SUMSQ` also store the mapped values to `po[..n]` (`po` may equal `px`).
///
/// # Safety
/// As for every function here (see the module docs); `px[..n]` readable; for the storing
/// kinds `po[..n]` writable (it may be the same memory as `px`, nothing else may alias it).
#[inline(always)]
pub(super) unsafe fn tree<L: Lanes, const K: u8, const F: bool>(
    px: *const f32,
    n: usize,
    c: f32,
    po: *mut f32,
) -> f32 {
    let w = L::N;
    let nv = 256 / w;
    let stores = K == kind::EXP_SUM || K == kind::CENTER_SUMSQ;
    let init = if K == kind::MAX { f32::NEG_INFINITY } else { 0.0 };
    let cv = L::splat(c);
    let mut acc = [L::splat(init); 32];
    let acc = &mut acc[..nv];
    let mut base = 0;
    while base + 256 <= n {
        for (v, a) in acc.iter_mut().enumerate() {
            let (na, y) = tree_step::<L, K, F>(*a, L::load(px.add(base + w * v)), cv);
            *a = na;
            if stores {
                st(po.add(base + w * v), y);
            }
        }
        base += 256;
    }
    let rem = n - base;
    for (v, a) in acc.iter_mut().enumerate().take(rem / w) {
        let (na, y) = tree_step::<L, K, F>(*a, L::load(px.add(base + w * v)), cv);
        *a = na;
        if stores {
            st(po.add(base + w * v), y);
        }
    }
    let t = rem % w;
    if t > 0 {
        let v = rem / w;
        let off = base + w * v;
        let (na, y) = tree_step::<L, K, F>(acc[v], L::load_part(px.add(off), t), cv);
        // Lanes past the end are untouched (not combined with a neutral value: -0 + +0 = +0).
        acc[v] = L::sel(L::first(t), na, acc[v]);
        if stores {
            st_part(po.add(off), y, t);
        }
    }
    // A vector no element reached still holds `init`, and pairing with it changes nothing:
    // every accumulator starts from +0 (so it is never -0, and x + +0 = x) or, for MAX, from
    // -inf (max(x, -inf) = x). A row shorter than 256 skips the pairs whose upper vector is
    // such a vector (rows of 128 at 16 lanes: the whole first level of four).
    let reached = if n >= 256 { nv } else { n.div_ceil(w) };
    let mut s = nv / 2;
    while s >= 1 {
        for v in 0..s.min(reached.saturating_sub(s)) {
            acc[v] = if K == kind::MAX { vm::max(acc[v], acc[v + s]) } else { L::add(acc[v], acc[v + s]) };
        }
        s /= 2;
    }
    // The halvings inside vector 0, lane j with lane j + s, on whole vectors: lanes j < s get
    // exactly those pairs (the rest are never read). `vm::max` is `numerics::max`, and the
    // add under FTZ+DAZ is `numerics::add` but for a NaN's payload, which the final `canon`
    // fixes. (Done one lane at a time with the scalar operations, this was a quarter of a
    // short row's softmax.)
    let mut v = acc[0];
    let mut s = w / 2;
    while s >= 1 {
        let upper = L::rotate_down(v, s);
        v = if K == kind::MAX { vm::max(v, upper) } else { L::add(v, upper) };
        s /= 2;
    }
    let mut l = [0.0f32; 16];
    st(l.as_mut_ptr(), v);
    nx::canon(l[0])
}

/// Strict tree sum of a slice (`numerics::sum`).
///
/// # Safety
/// As for every function here (see the module docs).
#[inline(always)]
pub(super) unsafe fn sum<L: Lanes>(x: &[f32]) -> f32 {
    tree::<L, { kind::SUM }, false>(x.as_ptr(), x.len(), 0.0, std::ptr::null_mut())
}
/// Strict tree max of a slice (`numerics::max_reduce`).
///
/// # Safety
/// As for every function here (see the module docs).
#[inline(always)]
pub(super) unsafe fn max_reduce<L: Lanes>(x: &[f32]) -> f32 {
    tree::<L, { kind::MAX }, false>(x.as_ptr(), x.len(), 0.0, std::ptr::null_mut())
}

/// Reduction over a strided axis: outputs `o * inner + i` for `i` in `i0..i0 + out.len()`, each
/// the tree over `x[(o * len + k) * inner + i]`, k ascending. `N` outputs share one pass: lane
/// `j` of the tree is one vector (`N` outputs), so the halvings are all whole-vector operations.
/// `MEAN` divides by `len` (strict vector division). `K` is `SUM` or `MAX`.
///
/// # Safety
/// As for every function here (see the module docs); `x` must hold the whole `[outer, len, inner]` tensor.
#[inline(always)]
pub(super) unsafe fn reduce_strided<L: Lanes, const K: u8, const MEAN: bool>(
    x: &[f32],
    len: usize,
    inner: usize,
    o: usize,
    i0: usize,
    out: &mut [f32],
) {
    let init = L::splat(if K == kind::MAX { f32::NEG_INFINITY } else { 0.0 });
    let mut i = 0;
    while i < out.len() {
        let t = (out.len() - i).min(L::N);
        assert!(i0 + i + t <= inner && (len == 0 || (o * len + len - 1) * inner + i0 + i + t <= x.len()));
        let mut acc = [init; 256];
        for k in 0..len {
            let p = x.as_ptr().add((o * len + k) * inner + i0 + i);
            let v = if t == L::N { L::load(p) } else { L::load_part(p, t) };
            let a = &mut acc[k % 256];
            *a = if K == kind::MAX { vm::max(*a, v) } else { L::add(*a, v) };
        }
        let mut s = 128;
        while s >= 1 {
            for j in 0..s {
                acc[j] =
                    if K == kind::MAX { vm::max(acc[j], acc[j + s]) } else { L::add(acc[j], acc[j + s]) };
            }
            s /= 2;
        }
        let mut r = vm::fix_nan(acc[0]);
        if MEAN {
            r = vm::div::<L, false>(r, L::splat(len as f32));
        }
        st_part(out.as_mut_ptr().add(i), r, t);
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
/// As for every function here (see the module docs).
#[inline(always)]
pub(super) unsafe fn softmax_row<L: Lanes, const F: bool>(
    x: &[f32],
    mask: RowMask,
    scale: f32,
    out: &mut [f32],
) {
    let n = out.len();
    assert!(x.len() == n && !matches!(mask, RowMask::Row(m) if m.len() < n));
    let sc = L::splat(scale);
    let (px, po) = (x.as_ptr(), out.as_mut_ptr());
    // (A macro, not a closure: a closure would be compiled without the width's features.)
    macro_rules! logit {
        ($i:expr, $v:expr) => {{
            let l = L::mul($v, sc);
            match mask {
                RowMask::None => l,
                RowMask::Row(m) => L::add(l, L::load_part(m.as_ptr().add($i), L::N.min(n - $i))),
                RowMask::Splat(m) => L::add(l, L::splat(m)),
            }
        }};
    }
    let mut i = 0;
    while i + L::N <= n {
        st(po.add(i), logit!(i, L::load(px.add(i))));
        i += L::N;
    }
    if i < n {
        st_part(po.add(i), logit!(i, L::load_part(px.add(i), n - i)), n - i);
    }
    let m = tree::<L, { kind::MAX }, F>(po, n, 0.0, po);
    let s = tree::<L, { kind::EXP_SUM }, F>(po, n, m, po);
    let r = if F { 1.0 / s } else { nx::recip(s) };
    scale_row::<L>(out, r);
}

/// `out[i] = canon(out[i] * r)`.
#[inline(always)]
unsafe fn scale_row<L: Lanes>(out: &mut [f32], r: f32) {
    let n = out.len();
    let po = out.as_mut_ptr();
    let rv = L::splat(r);
    let mut i = 0;
    while i + L::N <= n {
        st(po.add(i), vm::fix_nan(L::mul(L::load(po.add(i)), rv)));
        i += L::N;
    }
    if i < n {
        st_part(po.add(i), vm::fix_nan(L::mul(L::load_part(po.add(i), n - i), rv)), n - i);
    }
}

/// `out[i] = canon(((out[i] * rs) * gamma[i]) + beta[i])` (gamma, beta optional), or with
/// `src` as the input instead of `out` when given.
#[inline(always)]
unsafe fn affine_row<L: Lanes>(
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
    let rv = L::splat(rs);
    let mut i = 0;
    while i + L::N <= n {
        affine_part::<L>(ps, po, rv, gamma, beta, i, L::N);
        i += L::N;
    }
    if i < n {
        affine_part::<L>(ps, po, rv, gamma, beta, i, n - i);
    }
}

/// `t` lanes (1..=N) of [`affine_row`] at `i`.
#[inline(always)]
unsafe fn affine_part<L: Lanes>(
    ps: *const f32,
    po: *mut f32,
    rv: L,
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    i: usize,
    t: usize,
) {
    let mut y = L::mul(ld_n::<L>(ps.add(i), t), rv);
    if let Some(g) = gamma {
        y = L::mul(y, ld_n::<L>(g.as_ptr().add(i), t));
    }
    if let Some(b) = beta {
        y = L::add(y, ld_n::<L>(b.as_ptr().add(i), t));
    }
    y = vm::fix_nan(y);
    if t == L::N {
        st(po.add(i), y)
    } else {
        st_part(po.add(i), y, t)
    }
}

/// One layer-norm row (`numerics::layernorm_row`).
///
/// # Safety
/// As for every function here (see the module docs).
#[inline(always)]
pub(super) unsafe fn layernorm_row<L: Lanes, const F: bool>(
    x: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    out: &mut [f32],
) {
    let n = x.len();
    assert_eq!(out.len(), n);
    let cnt = n as f32;
    // The fast tier divides in hardware (the strict division, built from adds and
    // multiplies, took 2% of MiniLM's time at B=8: two a row).
    let div = |a: f32, b: f32| if F { a / b } else { nx::div(a, b) };
    let mu = div(sum::<L>(x), cnt);
    let ss = tree::<L, { kind::CENTER_SUMSQ }, F>(x.as_ptr(), n, mu, out.as_mut_ptr());
    let var = div(ss, cnt);
    let rs = if F { 1.0 / nx::add(var, eps).sqrt() } else { nx::rsqrt(nx::add(var, eps)) };
    affine_row::<L>(None, out, rs, gamma, beta);
}

/// One RMS-norm row (`numerics::rmsnorm_row`).
///
/// # Safety
/// As for every function here (see the module docs).
#[inline(always)]
pub(super) unsafe fn rmsnorm_row<L: Lanes, const F: bool>(
    x: &[f32],
    gamma: Option<&[f32]>,
    eps: f32,
    out: &mut [f32],
) {
    let n = x.len();
    let ss = tree::<L, { kind::SUMSQ }, F>(x.as_ptr(), n, 0.0, std::ptr::null_mut());
    let ms = if F { ss / n as f32 } else { nx::div(ss, n as f32) };
    let rs = if F { 1.0 / nx::add(ms, eps).sqrt() } else { nx::rsqrt(nx::add(ms, eps)) };
    affine_row::<L>(Some(x), out, rs, gamma, None);
}
