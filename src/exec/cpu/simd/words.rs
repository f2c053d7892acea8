//! The comparisons (EQ, LT, LE) and SELECT on the CPU executor: broadcasting walks over whole
//! runs of the output, split over the worker pool.
//!
//! Both are exact (a comparison's answer, or a copied element), so any order of work gives the
//! reference's bits; what this adds to `reference::{compare, compare_i32, select}` is speed:
//! the broadcast shapes are collapsed (size-1 axes dropped, axes that every operand walks
//! contiguously merged), each innermost run is one tight loop whose operands advance by 1 or
//! stay put (a broadcast), so the compiler vectorizes it, and large outputs are cut into
//! chunks for the pool. Float comparisons work on the bits with integer operations (the
//! order key below), which vectorize where the flushing float comparison would branch; the
//! tests hold them to `Compare::apply` over every special value.

use rayon::prelude::*;

use super::super::reference::{self, broadcast_strides, Compare};
use super::super::{Ctx, SimdLevel};
use super::INLINE_WORK;

/// Outputs per chunk when a call is split over the pool.
const CHUNK: usize = 1 << 14;

/// The operands' walk over the output, collapsed: an axis of size 1 is dropped and an axis is
/// merged into the one before it when every operand's stride there is its stride on the inner
/// axis times the inner size (the addresses visited in row-major order are unchanged). The
/// innermost stride of each operand is then 1 or 0 (a broadcast).
struct Walk<const K: usize> {
    shape: Vec<usize>,
    strides: [Vec<usize>; K],
}

impl<const K: usize> Walk<K> {
    fn new(out: &[usize], ins: [&[usize]; K]) -> Walk<K> {
        let full: [Vec<usize>; K] = std::array::from_fn(|k| broadcast_strides(ins[k], out));
        let mut shape: Vec<usize> = Vec::with_capacity(out.len());
        let mut strides: [Vec<usize>; K] = std::array::from_fn(|_| Vec::with_capacity(out.len()));
        for (d, &size) in out.iter().enumerate() {
            if size == 1 {
                continue;
            }
            let merges = !shape.is_empty()
                && (0..K).all(|k| strides[k].last().copied() == full[k][d].checked_mul(size));
            if merges {
                if let Some(last) = shape.last_mut() {
                    *last *= size;
                }
                for k in 0..K {
                    if let Some(last) = strides[k].last_mut() {
                        *last = full[k][d];
                    }
                }
            } else {
                shape.push(size);
                for k in 0..K {
                    strides[k].push(full[k][d]);
                }
            }
        }
        Walk { shape, strides }
    }

    /// Calls `f(first output, run length, operand offsets, operand steps)` for each stretch of
    /// the outputs `start..end` that lies in one innermost row, in order.
    fn runs(&self, start: usize, end: usize, mut f: impl FnMut(usize, usize, [usize; K], [usize; K])) {
        if start >= end {
            return;
        }
        let r = self.shape.len();
        if r == 0 {
            // One element (every axis was 1).
            return f(start, end - start, [0; K], [0; K]);
        }
        let inner = self.shape[r - 1];
        let step: [usize; K] = std::array::from_fn(|k| self.strides[k][r - 1]);
        // The multi-index of `start`.
        let mut idx = vec![0usize; r];
        let mut rem = start;
        for d in (0..r).rev() {
            idx[d] = rem % self.shape[d];
            rem /= self.shape[d];
        }
        let mut pos = start;
        while pos < end {
            let offs: [usize; K] =
                std::array::from_fn(|k| idx.iter().zip(&self.strides[k]).map(|(i, s)| i * s).sum());
            let len = (inner - idx[r - 1]).min(end - pos);
            f(pos, len, offs, step);
            pos += len;
            // The next row: carry into the outer axes.
            idx[r - 1] = 0;
            for d in (0..r - 1).rev() {
                idx[d] += 1;
                if idx[d] < self.shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
}

/// Runs `body(first output, chunk)` over `out` in chunks on the pool when there is enough
/// work, else in one piece on the calling thread. Every output is written by one chunk, with
/// the same value whatever the split.
fn chunked<T: Send>(ctx: &Ctx, out: &mut [T], body: impl Fn(usize, &mut [T]) + Sync) {
    match ctx.pool {
        Some(pool) if pool.current_num_threads() > 1 && out.len() >= INLINE_WORK => {
            pool.install(|| out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, o)| body(c * CHUNK, o)));
        }
        _ => body(0, out),
    }
}

/// `out[i] = f(a[i·sa], b[i·sb])` for a run, the steps 1 or 0 (each case its own loop, so the
/// compiler vectorizes the common ones).
#[inline(always)]
fn run2<A: Copy, O: Copy>(a: &[A], sa: usize, b: &[A], sb: usize, out: &mut [O], f: impl Fn(A, A) -> O) {
    let n = out.len();
    match (sa, sb) {
        (1, 1) => out.iter_mut().zip(&a[..n]).zip(&b[..n]).for_each(|((o, &x), &y)| *o = f(x, y)),
        (1, _) => {
            let y = b[0];
            out.iter_mut().zip(&a[..n]).for_each(|(o, &x)| *o = f(x, y))
        }
        (_, 1) => {
            let x = a[0];
            out.iter_mut().zip(&b[..n]).for_each(|(o, &y)| *o = f(x, y))
        }
        _ => out.fill(f(a[0], b[0])),
    }
}

/// The order key of an f32 given by its bits: the magnitude bits, 0 for zeros and denormals
/// (the strict tier flushes them), negated for a negative sign. Two non-NaN floats compare as
/// their canonicalized values do exactly when their keys compare so as i32 (so -0 and +0, and
/// every denormal, have key 0).
#[inline(always)]
fn key(bits: u32) -> i32 {
    let m = bits & 0x7fff_ffff;
    let m = if m < 0x0080_0000 { 0 } else { m as i32 };
    if (bits as i32) < 0 {
        -m
    } else {
        m
    }
}

#[inline(always)]
fn is_nan(bits: u32) -> bool {
    bits & 0x7fff_ffff > 0x7f80_0000
}

/// `a op b` on the bits of two floats, as [`Compare::apply`].
#[inline(always)]
fn float_cmp<const OP: u8>(a: u32, b: u32) -> i32 {
    let (ka, kb) = (key(a), key(b));
    let r = match OP {
        0 => ka == kb,
        1 => ka < kb,
        _ => ka <= kb,
    };
    i32::from(r & !is_nan(a) & !is_nan(b))
}

#[inline(always)]
fn int_cmp<const OP: u8>(a: i32, b: i32) -> i32 {
    i32::from(match OP {
        0 => a == b,
        1 => a < b,
        _ => a <= b,
    })
}

fn code(op: Compare) -> u8 {
    match op {
        Compare::Eq => 0,
        Compare::Lt => 1,
        Compare::Le => 2,
    }
}

/// A broadcasting comparison over `words`, each run through `cmp`.
#[allow(clippy::too_many_arguments)]
fn compare_words<A: Copy + Sync>(
    ctx: &Ctx,
    a: &[A],
    a_shape: &[usize],
    b: &[A],
    b_shape: &[usize],
    out: &mut [i32],
    out_shape: &[usize],
    cmp: impl Fn(A, A) -> i32 + Sync,
) {
    let n: usize = out_shape.iter().product();
    let walk = Walk::new(out_shape, [a_shape, b_shape]);
    chunked(ctx, &mut out[..n], |first, o| {
        walk.runs(first, first + o.len(), |pos, len, [ia, ib], [sa, sb]| {
            let o = &mut o[pos - first..pos - first + len];
            run2(&a[ia..], sa, &b[ib..], sb, o, &cmp);
        })
    });
}

/// `out = (a op b)` as i32 1 or 0 on float values with numpy broadcasting (see
/// [`reference::compare`], whose bits it gives at every level and thread count).
#[allow(clippy::too_many_arguments)]
pub fn compare(
    ctx: &Ctx,
    op: Compare,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [i32],
    out_shape: &[usize],
) {
    if ctx.level == SimdLevel::Scalar {
        return reference::compare(op, a, a_shape, b, b_shape, out, out_shape);
    }
    let (a, b): (&[u32], &[u32]) = (bytemuck::cast_slice(a), bytemuck::cast_slice(b));
    match code(op) {
        0 => compare_words(ctx, a, a_shape, b, b_shape, out, out_shape, float_cmp::<0>),
        1 => compare_words(ctx, a, a_shape, b, b_shape, out, out_shape, float_cmp::<1>),
        _ => compare_words(ctx, a, a_shape, b, b_shape, out, out_shape, float_cmp::<2>),
    }
}

/// `out = (a op b)` as i32 1 or 0 on i32 values (signed) with numpy broadcasting (see
/// [`reference::compare_i32`]).
#[allow(clippy::too_many_arguments)]
pub fn compare_i32(
    ctx: &Ctx,
    op: Compare,
    a: &[i32],
    a_shape: &[usize],
    b: &[i32],
    b_shape: &[usize],
    out: &mut [i32],
    out_shape: &[usize],
) {
    if ctx.level == SimdLevel::Scalar {
        return reference::compare_i32(op, a, a_shape, b, b_shape, out, out_shape);
    }
    match code(op) {
        0 => compare_words(ctx, a, a_shape, b, b_shape, out, out_shape, int_cmp::<0>),
        1 => compare_words(ctx, a, a_shape, b, b_shape, out, out_shape, int_cmp::<1>),
        _ => compare_words(ctx, a, a_shape, b, b_shape, out, out_shape, int_cmp::<2>),
    }
}

/// `out = a where cond != 0, else b` with cond, a and b broadcast to `out_shape`, copying the
/// chosen words (see [`reference::select`]). `T` is the element's storage: `u32` for 32-bit
/// types, `u16` for f16 and bf16.
#[allow(clippy::too_many_arguments)]
pub fn select<T: Copy + Send + Sync>(
    ctx: &Ctx,
    cond: &[i32],
    c_shape: &[usize],
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    out: &mut [T],
    out_shape: &[usize],
) {
    if ctx.level == SimdLevel::Scalar {
        return reference::select(cond, c_shape, a, a_shape, b, b_shape, out, out_shape);
    }
    let n: usize = out_shape.iter().product();
    let walk = Walk::new(out_shape, [c_shape, a_shape, b_shape]);
    chunked(ctx, &mut out[..n], |first, o| {
        walk.runs(first, first + o.len(), |pos, len, [ic, ia, ib], [sc, sa, sb]| {
            let o = &mut o[pos - first..pos - first + len];
            let (c, a, b) = (&cond[ic..], &a[ia..], &b[ib..]);
            if sc == 0 {
                // One condition for the whole run: a copy (or a fill) of one side.
                let (src, step) = if c[0] != 0 { (a, sa) } else { (b, sb) };
                if step == 1 {
                    o.copy_from_slice(&src[..len]);
                } else {
                    o.fill(src[0]);
                }
                return;
            }
            let c = &c[..len];
            // The choice as a mask-free select per element, each stepping case its own loop.
            match (sa, sb) {
                (1, 1) => {
                    for (((o, &c), &x), &y) in o.iter_mut().zip(c).zip(&a[..len]).zip(&b[..len]) {
                        *o = if c != 0 { x } else { y };
                    }
                }
                (1, _) => {
                    let y = b[0];
                    for ((o, &c), &x) in o.iter_mut().zip(c).zip(&a[..len]) {
                        *o = if c != 0 { x } else { y };
                    }
                }
                (_, 1) => {
                    let x = a[0];
                    for ((o, &c), &y) in o.iter_mut().zip(c).zip(&b[..len]) {
                        *o = if c != 0 { x } else { y };
                    }
                }
                _ => {
                    let (x, y) = (a[0], b[0]);
                    for (o, &c) in o.iter_mut().zip(c) {
                        *o = if c != 0 { x } else { y };
                    }
                }
            }
        })
    });
}
