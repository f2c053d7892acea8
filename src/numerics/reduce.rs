//! The fixed reduction tree and the row-wise reference kernels (softmax, layer norm, RMS norm,
//! mean, max) every executor must reproduce step for step.

use super::div::{div, recip, rsqrt};
use super::ops::{add, max, mul, sub};
use super::transcendental::exp;
use crate::isa::DType;

/// Lanes of the one reduction tree (a 256-thread workgroup; 16 lanes x 16 accumulators on a CPU).
pub const REDUCE_LANES: usize = 256;

/// The tree, generic over the element source and the combining operation:
/// ```text
/// lane[j] = init for j in 0..256
/// for i in 0..n (ascending): lane[i % 256] = op(lane[i % 256], v(i))
/// for s in 128, 64, 32, 16, 8, 4, 2, 1: for j in 0..s: lane[j] = op(lane[j], lane[j + s])
/// result = lane[0]
/// ```
/// (Element `i` goes to lane `i % 256`, so lane `j` sees `j, j+256, j+512, ...` in that order.)
#[inline]
fn tree(n: usize, init: f32, v: impl Fn(usize) -> f32, op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut lane = [init; REDUCE_LANES];
    let mut base = 0;
    while base < n {
        let len = (n - base).min(REDUCE_LANES);
        for (j, l) in lane[..len].iter_mut().enumerate() {
            *l = op(*l, v(base + j));
        }
        base += REDUCE_LANES;
    }
    let mut s = REDUCE_LANES / 2;
    while s >= 1 {
        for j in 0..s {
            lane[j] = op(lane[j], lane[j + s]);
        }
        s /= 2;
    }
    lane[0]
}

/// The strict sum: the 256-lane tree (see the module docs and docs/numerics.md) with `add`, lanes
/// starting at `+0.0`:
/// ```text
/// lane[j] = +0.0 for j in 0..256
/// for i in 0..n ascending: lane[i % 256] = add(lane[i % 256], x[i])
/// for s in 128, 64, ..., 1: for j in 0..s: lane[j] = add(lane[j], lane[j + s])
/// result = lane[0]
/// ```
///
/// Empty input gives +0. A sum whose terms are all -0 gives +0 (the lanes start at +0).
pub fn sum(xs: &[f32]) -> f32 {
    tree(xs.len(), 0.0, |i| xs[i], add)
}

/// The same tree with strict [`max`], lanes starting at `-inf`; any NaN makes the result NaN.
/// Empty input gives -inf.
pub fn max_reduce(xs: &[f32]) -> f32 {
    tree(xs.len(), f32::NEG_INFINITY, |i| xs[i], max)
}

/// Strict dot product in matmul's order: `acc = +0.0; for k ascending: acc = add(acc, mul(a[k], b[k]))`.
///
/// # Panics
/// If the lengths differ.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: length mismatch");
    a.iter().zip(b).fold(0.0, |acc, (&x, &y)| add(acc, mul(x, y)))
}

/// Whether a fused multiply-add chain in [`dot`]'s order (`acc = +0; acc = fma(a[k], b[k], acc)`,
/// k ascending), its result then [`canon`]icalized, gives exactly [`dot`]'s bits for operands
/// that are all values of `dtype` widened to f32. True for f16 only; the GEMMs use it to run
/// the strict tier's f16 MATMUL on their FMA kernels.
///
/// Why: every f16 value is an integer multiple of 2^-24 of magnitude at most 65504, so the
/// product of two has at most 22 significant bits and a magnitude of 0 or 2^-48 to 2^32 (or is
/// inf or NaN): it is exact in f32, so `fma(a, b, acc)` = round(acc + a·b) = `add(acc, mul(a,
/// b))` (and a device that does not fuse computes the same). Every partial sum is a multiple
/// of 2^-48 (an exact sum of such, or a rounding to an f32 ulp of at least 2^-47), so none is
/// ever denormal and the strict flush never fires; fewer than 2^90 products cannot overflow.
/// Only a NaN's payload can differ, which `canon` fixes. bf16 and f32 values reach f32's
/// whole exponent range (and f32 has 24 significant bits): their products round, underflow and
/// overflow.
pub fn fma_chain_is_dot(dtype: DType) -> bool {
    dtype == DType::F16
}

/// `n` as f32 for a row length: exact up to 2^24; beyond, round-to-nearest-even (the verifier
/// keeps reduced rows at most 2^24 long so every executor converts exactly).
#[inline]
fn count(n: usize) -> f32 {
    n as f32
}

/// REDUCE_MEAN over one row: `div(sum(x), n)` (one correctly rounded division, not `mul` by
/// `recip(n)`). Empty row: `0/0` = NaN.
pub fn mean(xs: &[f32]) -> f32 {
    div(sum(xs), count(xs.len()))
}

/// SOFTMAX over one row:
/// ```text
/// m = max_reduce(x)
/// e[i] = exp(x[i] - m)                 (strict sub, strict exp)
/// s = sum(e)                           (the tree)
/// r = recip(s)
/// out[i] = e[i] * r                    (strict mul; not a per-element division)
/// ```
/// A row containing NaN or +inf, or all -inf, gives NaN everywhere (as the formula says).
///
/// # Panics
/// If `out.len() != x.len()`.
pub fn softmax_row(x: &[f32], out: &mut [f32]) {
    assert_eq!(x.len(), out.len(), "softmax_row: length mismatch");
    let m = max_reduce(x);
    for (o, &v) in out.iter_mut().zip(x) {
        *o = exp(sub(v, m));
    }
    let r = recip(sum(out));
    for o in out.iter_mut() {
        *o = mul(*o, r);
    }
}

/// LAYERNORM over one row:
/// ```text
/// mu = div(sum(x), n)
/// d[i] = x[i] - mu
/// var = div(sum(d[i]*d[i]), n)         (the tree over the products mul(d[i], d[i]))
/// rs = rsqrt(var + eps)
/// y[i] = d[i] * rs
/// y[i] = y[i] * gamma[i]               (if gamma)
/// y[i] = y[i] + beta[i]                (if beta)
/// ```
///
/// # Panics
/// If `out`, `gamma` or `beta` is not as long as `x`.
pub fn layernorm_row(x: &[f32], gamma: Option<&[f32]>, beta: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    let n = x.len();
    assert_eq!(out.len(), n, "layernorm_row: out length mismatch");
    let mu = mean(x);
    for (o, &v) in out.iter_mut().zip(x) {
        *o = sub(v, mu);
    }
    let var = div(tree(n, 0.0, |i| mul(out[i], out[i]), add), count(n));
    let rs = rsqrt(add(var, eps));
    for o in out.iter_mut() {
        *o = mul(*o, rs);
    }
    apply_affine(out, gamma, beta);
}

/// RMSNORM over one row:
/// ```text
/// ms = div(sum(x[i]*x[i]), n)          (the tree over mul(x[i], x[i]))
/// rs = rsqrt(ms + eps)
/// y[i] = x[i] * rs
/// y[i] = y[i] * gamma[i]               (if gamma)
/// ```
///
/// # Panics
/// If `out` or `gamma` is not as long as `x`.
pub fn rmsnorm_row(x: &[f32], gamma: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    let n = x.len();
    assert_eq!(out.len(), n, "rmsnorm_row: out length mismatch");
    let ms = div(tree(n, 0.0, |i| mul(x[i], x[i]), add), count(n));
    let rs = rsqrt(add(ms, eps));
    for (o, &v) in out.iter_mut().zip(x) {
        *o = mul(v, rs);
    }
    apply_affine(out, gamma, None);
}

fn apply_affine(out: &mut [f32], gamma: Option<&[f32]>, beta: Option<&[f32]>) {
    if let Some(g) = gamma {
        assert_eq!(g.len(), out.len(), "gamma length mismatch");
        for (o, &gi) in out.iter_mut().zip(g) {
            *o = mul(*o, gi);
        }
    }
    if let Some(b) = beta {
        assert_eq!(b.len(), out.len(), "beta length mismatch");
        for (o, &bi) in out.iter_mut().zip(b) {
            *o = add(*o, bi);
        }
    }
}
