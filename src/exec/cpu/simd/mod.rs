//! Vector versions of the hot non-GEMM kernels, with the reference kernels' semantics and
//! signatures plus a leading [`Ctx`].
//!
//! - **Strict tier** (`ctx.tier == Tier::Strict`): bit-identical to [`reference`] for every
//!   input. The AVX2 code repeats each `numerics` algorithm step by step on 8 lanes (mul then
//!   add, never FMA; branches as masks and blends; NaN made canonical), runs with MXCSR FTZ+DAZ
//!   (an [`FtzGuard`] is entered around every call and in every chunk), and follows the one
//!   256-lane reduction tree (32 vectors of 8 lanes).
//! - **Fast tier**: FMA in the polynomials and range reductions, hardware `vdivps`/`vsqrtps` for
//!   division, reciprocal and square roots. Accuracy (vs the exact value): div, recip, sqrt
//!   correctly rounded (flushed); rsqrt <= 1 ulp; exp, log, tanh, sigmoid, erf, gelu within about
//!   1 ulp of the strict results (same algorithms, one rounding fewer per fused step); softmax and
//!   the norms use them plus the same reduction tree. Deterministic: the same bits from run to run
//!   and for every thread count (nothing depends on data alignment, chunking or timing).
//!   Reductions, binary add/sub/mul/max/min and neg/abs/relu are the same code in both tiers.
//! - Without AVX2 (`ctx.level == SimdLevel::Scalar`, or not x86-64) every function runs the
//!   reference.
//!
//! **Threads**: large calls are split over `ctx.pool` into chunks of whole output rows (or
//! output elements); each output element is computed by exactly one chunk by the same code
//! whatever the split, so results do not depend on the thread count. Calls with less work than
//! [`INLINE_WORK`] run on the calling thread.
//!
//! Fast paths of [`binary`]: equal shapes, and one operand of the output's shape with the other
//! broadcast over leading axes (a scalar, a row, `[1, n]`, ...) or over trailing axes (`[m, 1]`).
//! Other broadcasts fall back to the reference.
//!
//! The comparisons and SELECT ([`compare`], [`compare_i32`], [`select`]) are exact, so they need
//! no per-tier code: portable loops over collapsed broadcast runs that the compiler vectorizes
//! (module `words`), the reference at `SimdLevel::Scalar`.

#[cfg(target_arch = "x86_64")]
mod kernels;
#[cfg(target_arch = "x86_64")]
pub(super) mod lanes;
#[cfg(target_arch = "x86_64")]
mod vmath;
mod words;

pub use words::{compare, compare_i32, select};

/// Runs `$body` with the type `$L` naming the vector of the widest level `$ctx` allows
/// (`__m512` for AVX-512, else `__m256`), inside a function compiled for that instruction set
/// (`lanes::with_avx512` / `with_avx2`), so the generic kernels inline into one wide loop.
/// Only for `ctx.level >= Avx2`.
#[cfg(target_arch = "x86_64")]
macro_rules! with_lanes {
    ($ctx:expr, $L:ident => $body:expr) => {{
        debug_assert!($ctx.level >= SimdLevel::Avx2);
        if $ctx.level >= SimdLevel::Avx512 {
            #[allow(dead_code)]
            type $L = std::arch::x86_64::__m512;
            // SAFETY: `ctx.level >= Avx512` is only ever set after CPUID and the OS reported
            // AVX-512 F/BW/DQ/VL (and AVX2, FMA) on this CPU (`SimdLevel::detect`); the body's
            // own requirements are stated where it is written.
            unsafe {
                lanes::with_avx512(
                    #[inline(always)]
                    || $body,
                )
            }
        } else {
            #[allow(dead_code)]
            type $L = std::arch::x86_64::__m256;
            // SAFETY: `ctx.level >= Avx2` is only ever set after CPUID and the OS reported
            // AVX2 and FMA on this CPU (`SimdLevel::detect`); the body's own requirements are
            // stated where it is written.
            unsafe {
                lanes::with_avx2(
                    #[inline(always)]
                    || $body,
                )
            }
        }
    }};
}

use rayon::prelude::*;

use super::fpenv::FtzGuard;
use super::reference::{self, broadcast_strides, Binary, Reduce, Unary};
use super::{Ctx, SimdLevel};
use crate::isa::Tier;

/// Work (elements times a per-element cost) below which a call runs on the calling thread.
pub const INLINE_WORK: usize = 1 << 15;
/// Outputs (f32) from which binary ops write with non-temporal stores: 16 MiB, beyond the
/// caches of the machines this targets, where read-for-ownership of the output would cost a
/// quarter of the memory traffic. Same values either way.
const STREAM_MIN: usize = 1 << 22;
/// Work per chunk when a call is split over the pool.
const CHUNK_WORK: usize = 1 << 14;

/// Whether the AVX2 kernels may run.
fn use_avx2(ctx: &Ctx) -> bool {
    cfg!(target_arch = "x86_64") && ctx.level >= SimdLevel::Avx2
}

fn fast(ctx: &Ctx) -> bool {
    ctx.tier == Tier::Fast
}

/// Below one vector of output, the reference runs instead of the vector code: it gives the
/// same bits (the strict tier, and the ops whose vector code is the same in both tiers) and
/// skips the chunking and dispatch, which dominate on tiny tensors (interpreter overhead).
const TINY: usize = 8;

/// Whether an elementwise call of `n` outputs may take the reference instead (see [`TINY`]).
fn tiny(ctx: &Ctx, n: usize, tier_free: bool) -> bool {
    n < TINY && (ctx.tier == Tier::Strict || tier_free)
}

/// Runs `f(first_element, chunk)` over `out` split into chunks of whole units (`unit` elements
/// each, `unit_work` work each), on the pool when there is enough work, inline otherwise. Each
/// chunk runs inside an [`FtzGuard`]. `align` rounds the units per chunk up to a multiple.
fn run_chunks(
    ctx: &Ctx,
    out: &mut [f32],
    unit: usize,
    unit_work: usize,
    align: usize,
    f: impl Fn(usize, &mut [f32]) + Sync,
) {
    if out.is_empty() || unit == 0 {
        return;
    }
    let units = out.len() / unit;
    let work = units.saturating_mul(unit_work.max(1));
    match ctx.pool {
        Some(pool) if pool.current_num_threads() > 1 && work >= INLINE_WORK && units > 1 => {
            let per = (CHUNK_WORK / unit_work.max(1)).max(1).next_multiple_of(align.max(1));
            pool.install(|| {
                out.par_chunks_mut(per * unit).enumerate().for_each(|(c, o)| {
                    let _g = FtzGuard::new();
                    f(c * per * unit, o)
                })
            });
        }
        _ => {
            let _g = FtzGuard::new();
            f(0, out)
        }
    }
}

/// Bytes from which a copy or a transpose is split over the pool. Both are bound by memory,
/// which one core of a many-core server cannot saturate (MiniLM at B=8 copies 1.5 MB for each
/// of its 50 RESHAPEs and TRANSPOSEs a run); below this, waking the workers costs more.
const PAR_COPY_BYTES: usize = 1 << 20;

/// Chunks of at least [`PAR_COPY_BYTES`] / 4 bytes a copy is cut into, whole units of `unit`
/// elements of `size` bytes, about two a thread; None where the call runs in line.
fn copy_chunks<'a>(
    ctx: &Ctx<'a>,
    elems: usize,
    size: usize,
    unit: usize,
) -> Option<(&'a rayon::ThreadPool, usize)> {
    let pool = ctx.pool.filter(|p| p.current_num_threads() > 1 && elems * size >= PAR_COPY_BYTES)?;
    let per = elems.div_ceil(2 * pool.current_num_threads()).max(PAR_COPY_BYTES / 4 / size.max(1));
    let per = per.next_multiple_of(unit.max(1));
    (per < elems).then_some((pool, per))
}

/// `out = src` (COPY and RESHAPE), over the pool where it is large.
pub fn copy_bytes(ctx: &Ctx, src: &[u8], out: &mut [u8]) {
    match copy_chunks(ctx, out.len(), 1, 64) {
        Some((pool, per)) => pool.install(|| {
            out.par_chunks_mut(per).zip(src.par_chunks(per)).for_each(|(o, s)| o.copy_from_slice(s))
        }),
        None => out.copy_from_slice(src),
    }
}

/// [`reference::transpose`], over the pool where it is large (parts of whole blocks: the same
/// values).
pub fn transpose<T: Copy + Send + Sync>(ctx: &Ctx, x: &[T], shape: &[usize], perm: &[u8], out: &mut [T]) {
    let block = reference::transpose_block(shape, perm);
    match copy_chunks(ctx, out.len(), std::mem::size_of::<T>(), block) {
        Some((pool, per)) => pool.install(|| {
            out.par_chunks_mut(per)
                .enumerate()
                .for_each(|(i, o)| reference::transpose_part(x, shape, perm, i * per, o))
        }),
        None => reference::transpose(x, shape, perm, out),
    }
}

/// Rough cost per element of a unary op, in units of one add.
fn unary_cost(op: Unary) -> usize {
    match op {
        Unary::Neg | Unary::Abs | Unary::Relu => 1,
        _ => 8,
    }
}

/// `out = op(a)` elementwise (see [`reference::unary`]).
pub fn unary(ctx: &Ctx, op: Unary, a: &[f32], out: &mut [f32]) {
    if !use_avx2(ctx) || tiny(ctx, out.len(), matches!(op, Unary::Neg | Unary::Abs | Unary::Relu)) {
        return reference::unary(op, a, out);
    }
    #[cfg(target_arch = "x86_64")]
    {
        let n = out.len().min(a.len());
        let fast = fast(ctx);
        run_chunks(
            ctx,
            &mut out[..n],
            1,
            unary_cost(op),
            16,
            |s, o| with_lanes!(ctx, L => kernels::unary::<L>(op, fast, &a[s..s + o.len()], o)),
        );
    }
}

/// `out = op(a, s)` for a scalar immediate (see [`reference::binary_scalar`]).
pub fn binary_scalar(ctx: &Ctx, op: Binary, a: &[f32], s: f32, out: &mut [f32]) {
    if !use_avx2(ctx) || tiny(ctx, out.len(), op != Binary::Div) {
        return reference::binary_scalar(op, a, s, out);
    }
    #[cfg(target_arch = "x86_64")]
    {
        let n = out.len().min(a.len());
        let fast = fast(ctx);
        let cost = if op == Binary::Div { 4 } else { 1 };
        let nt = n >= STREAM_MIN;
        run_chunks(
            ctx,
            &mut out[..n],
            1,
            cost,
            16,
            |st, o| with_lanes!(ctx, L => kernels::binary_scalar::<L>(op, fast, &a[st..st + o.len()], s, o, nt)),
        );
    }
}

/// How an operand of `shape` maps onto an output of `out` (numpy broadcasting), if it is one
/// of the fast-path layouts.
#[cfg(target_arch = "x86_64")]
fn side(shape: &[usize], out: &[usize]) -> Option<kernels::Side> {
    if shape.len() > out.len() {
        return None;
    }
    let lead = out.len() - shape.len();
    let dim = |i: usize| if i < lead { 1 } else { shape[i - lead] };
    // Axes of extent > 1 in the output: broadcast (operand has 1) or kept (operand matches).
    let mut first_kept = None;
    let mut last_kept = None;
    let mut first_bc = None;
    let mut last_bc = None;
    for (i, &o) in out.iter().enumerate() {
        if o == 1 {
            continue;
        }
        if dim(i) == o {
            first_kept.get_or_insert(i);
            last_kept = Some(i);
        } else if dim(i) == 1 {
            first_bc.get_or_insert(i);
            last_bc = Some(i);
        } else {
            return None;
        }
    }
    let n: usize = shape.iter().product();
    let total: usize = out.iter().product();
    match (first_bc, last_bc, first_kept, last_kept) {
        (None, ..) => Some(kernels::Side::Full),
        (Some(_), Some(_), None, _) => Some(kernels::Side::Row(1)),
        (Some(_), Some(lb), Some(fk), _) if lb < fk => Some(kernels::Side::Row(n)),
        (Some(fb), _, Some(_), Some(lk)) if lk < fb => Some(kernels::Side::Col(total / n)),
        _ => None,
    }
}

/// `out = op(a, b)` with numpy broadcasting (see [`reference::binary`]).
#[allow(clippy::too_many_arguments)]
pub fn binary(
    ctx: &Ctx,
    op: Binary,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [f32],
    out_shape: &[usize],
) {
    #[cfg(target_arch = "x86_64")]
    if use_avx2(ctx) {
        use kernels::Side;
        let total: usize = out_shape.iter().product();
        if total == 0 {
            return;
        }
        if tiny(ctx, total, op != Binary::Div) {
            // Each operand is the output's shape or a single value (else the general walk).
            let (na, nb) = (a_shape.iter().product::<usize>(), b_shape.iter().product::<usize>());
            if (na == total || na == 1) && (nb == total || nb == 1) {
                let (sa, sb) = (usize::from(na != 1), usize::from(nb != 1));
                for (i, o) in out[..total].iter_mut().enumerate() {
                    *o = op.apply(a[i * sa], b[i * sb]);
                }
                return;
            }
            return reference::binary(op, a, a_shape, b, b_shape, out, out_shape);
        }
        let sides = (side(a_shape, out_shape), side(b_shape, out_shape));
        if let (Some(sa), Some(sb)) = sides {
            if sa == Side::Full || sb == Side::Full {
                let fast = fast(ctx);
                let cost = if op == Binary::Div { 4 } else { 1 };
                let nt = total >= STREAM_MIN;
                run_chunks(ctx, &mut out[..total], 1, cost, 16, |st, o| {
                    // `side` proved that each operand has the length its layout needs for
                    // `total` outputs (what `binary_range` requires).
                    with_lanes!(ctx, L => kernels::binary_range::<L>(op, fast, a, sa, b, sb, o, st, nt))
                });
                return;
            }
        }
    }
    reference::binary(op, a, a_shape, b, b_shape, out, out_shape)
}

/// Softmax over the last axis of `x * scale + mask` (see [`reference::softmax`]).
pub fn softmax(
    ctx: &Ctx,
    x: &[f32],
    shape: &[usize],
    mask: Option<(&[f32], &[usize])>,
    scale: f32,
    out: &mut [f32],
) {
    if !use_avx2(ctx) || shape.is_empty() {
        return reference::softmax(x, shape, mask, scale, out);
    }
    #[cfg(target_arch = "x86_64")]
    {
        use kernels::RowMask;
        let r = shape.len();
        let n = shape[r - 1];
        let total: usize = shape.iter().product();
        if n == 0 || total == 0 {
            return;
        }
        let ms = mask.map(|(_, s)| broadcast_strides(s, shape));
        let lead = &shape[..r - 1];
        // Offset of row `row`'s first mask value (mask strides over the leading axes).
        let mask_off = |row: usize, st: &[usize]| {
            let mut rem = row;
            let mut off = 0;
            for ax in (0..lead.len()).rev() {
                off += (rem % lead[ax]) * st[ax];
                rem /= lead[ax];
            }
            off
        };
        let fast = fast(ctx);
        run_chunks(ctx, &mut out[..total], n, n * 12, 1, |st, o| {
            with_lanes!(ctx, L => {
                for (k, orow) in o.chunks_exact_mut(n).enumerate() {
                    let row = st / n + k;
                    let xrow = &x[row * n..(row + 1) * n];
                    let rm = match (mask, &ms) {
                        (Some((mv, _)), Some(st)) => {
                            let off = mask_off(row, st);
                            if st[r - 1] == 0 {
                                RowMask::Splat(mv[off])
                            } else {
                                RowMask::Row(&mv[off..off + n])
                            }
                        }
                        _ => RowMask::None,
                    };
                    if fast {
                        kernels::softmax_row::<L, true>(xrow, rm, scale, orow)
                    } else {
                        kernels::softmax_row::<L, false>(xrow, rm, scale, orow)
                    }
                }
            })
        });
    }
}

/// Layer normalization over rows of `n` (see [`reference::layernorm`]).
pub fn layernorm(
    ctx: &Ctx,
    x: &[f32],
    n: usize,
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    out: &mut [f32],
) {
    if !use_avx2(ctx) || n == 0 {
        return reference::layernorm(x, n, gamma, beta, eps, out);
    }
    #[cfg(target_arch = "x86_64")]
    {
        let rows = x.len().min(out.len()) / n;
        let fast = fast(ctx);
        run_chunks(ctx, &mut out[..rows * n], n, n * 4, 1, |st, o| {
            with_lanes!(ctx, L => {
                for (k, orow) in o.chunks_exact_mut(n).enumerate() {
                    let xrow = &x[st + k * n..st + (k + 1) * n];
                    if fast {
                        kernels::layernorm_row::<L, true>(xrow, gamma, beta, eps, orow)
                    } else {
                        kernels::layernorm_row::<L, false>(xrow, gamma, beta, eps, orow)
                    }
                }
            })
        });
    }
}

/// RMS normalization over rows of `n` (see [`reference::rmsnorm`]).
pub fn rmsnorm(ctx: &Ctx, x: &[f32], n: usize, gamma: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    if !use_avx2(ctx) || n == 0 {
        return reference::rmsnorm(x, n, gamma, eps, out);
    }
    #[cfg(target_arch = "x86_64")]
    {
        let rows = x.len().min(out.len()) / n;
        let fast = fast(ctx);
        run_chunks(ctx, &mut out[..rows * n], n, n * 3, 1, |st, o| {
            with_lanes!(ctx, L => {
                for (k, orow) in o.chunks_exact_mut(n).enumerate() {
                    let xrow = &x[st + k * n..st + (k + 1) * n];
                    if fast {
                        kernels::rmsnorm_row::<L, true>(xrow, gamma, eps, orow)
                    } else {
                        kernels::rmsnorm_row::<L, false>(xrow, gamma, eps, orow)
                    }
                }
            })
        });
    }
}

/// Reduction of `x` of `shape` over `axis` (see [`reference::reduce`]). Both tiers give the
/// strict result.
pub fn reduce(ctx: &Ctx, op: Reduce, x: &[f32], shape: &[usize], axis: usize, out: &mut [f32]) {
    if !use_avx2(ctx) {
        return reference::reduce(op, x, shape, axis, out);
    }
    #[cfg(target_arch = "x86_64")]
    {
        use kernels::kind;
        let outer: usize = shape[..axis].iter().product();
        let len = shape[axis];
        let inner: usize = shape[axis + 1..].iter().product();
        let total = outer * inner;
        if inner == 1 {
            run_chunks(ctx, &mut out[..total], 1, len.max(1), 16, |st, o| {
                with_lanes!(ctx, L => {
                    for (k, r) in o.iter_mut().enumerate() {
                        let row = &x[(st + k) * len..(st + k + 1) * len];
                        *r = match op {
                            Reduce::Sum => kernels::sum::<L>(row),
                            Reduce::Mean => crate::numerics::div(kernels::sum::<L>(row), len as f32),
                            Reduce::Max => kernels::max_reduce::<L>(row),
                        };
                    }
                })
            });
        } else {
            run_chunks(ctx, &mut out[..total], 1, len.max(1) + 32, 16, |st, o| {
                with_lanes!(ctx, L => {
                    // Walk the chunk in runs that stay within one outer index.
                    let mut p = 0;
                    while p < o.len() {
                        let g = st + p;
                        let (oi, i0) = (g / inner, g % inner);
                        let run = (inner - i0).min(o.len() - p);
                        let dst = &mut o[p..p + run];
                        // `x` holds the whole [outer, len, inner] tensor (what `reduce_strided`
                        // requires).
                        match op {
                            Reduce::Sum => {
                                kernels::reduce_strided::<L, { kind::SUM }, false>(x, len, inner, oi, i0, dst)
                            }
                            Reduce::Mean => {
                                kernels::reduce_strided::<L, { kind::SUM }, true>(x, len, inner, oi, i0, dst)
                            }
                            Reduce::Max => {
                                kernels::reduce_strided::<L, { kind::MAX }, false>(x, len, inner, oi, i0, dst)
                            }
                        }
                        p += run;
                    }
                })
            });
        }
    }
}
