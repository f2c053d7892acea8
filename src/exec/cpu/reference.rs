//! The scalar reference: one plain implementation of every tensor opcode in the strict tier.
//!
//! Every float operation goes through `crate::numerics` (flushed IEEE add/sub/mul and the
//! algorithms built from them), in the fixed orders documented there, so that a SIMD kernel or
//! a GPU shader that follows the same steps gives the same bits. Kernels take f32 (or i32)
//! slices with concrete row-major shapes; the VM widens f16/bf16 to f32 before and rounds after.
//!
//! Invariants the caller guarantees (the verifier proved them): shapes agree as the ISA says;
//! output slices have exactly the output's element count; no input slice aliases the output.

use crate::isa::Act;
use crate::numerics as nx;

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Strides of `shape` broadcast to `out` (numpy rules, aligned at the last axis): a size-1 or
/// missing axis gets stride 0.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(shape);
    let lead = out.len() - shape.len();
    (0..out.len()).map(|i| if i < lead || shape[i - lead] == 1 { 0 } else { own[i - lead] }).collect()
}

/// Calls `f(out_index, [offset in each input])` for every element of `out` in row-major order.
pub fn for_each_broadcast<const N: usize>(
    out: &[usize],
    ins: [&[usize]; N],
    mut f: impl FnMut(usize, [usize; N]),
) {
    let n: usize = out.iter().product();
    if n == 0 {
        return;
    }
    let st: Vec<Vec<usize>> = ins.iter().map(|s| broadcast_strides(s, out)).collect();
    let mut idx = vec![0usize; out.len()];
    let mut offs = [0usize; N];
    for o in 0..n {
        f(o, offs);
        // Advance the multi-index like an odometer, updating each input's offset.
        for ax in (0..out.len()).rev() {
            idx[ax] += 1;
            for (k, s) in st.iter().enumerate() {
                offs[k] += s[ax];
            }
            if idx[ax] < out[ax] {
                break;
            }
            for (k, s) in st.iter().enumerate() {
                offs[k] -= s[ax] * out[ax];
            }
            idx[ax] = 0;
        }
    }
}

/// Unary float operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unary {
    Neg,
    Abs,
    Sqrt,
    Rsqrt,
    Exp,
    Log,
    Relu,
    Sigmoid,
    Tanh,
    Gelu,
    Silu,
    Erf,
}

impl Unary {
    /// The strict scalar function.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            // Sign flips are exact; canon keeps NaN canonical and denormals out.
            Unary::Neg => nx::canon(-nx::canon(x)),
            Unary::Abs => nx::canon(nx::canon(x).abs()),
            Unary::Sqrt => nx::sqrt(x),
            Unary::Rsqrt => nx::rsqrt(x),
            Unary::Exp => nx::exp(x),
            Unary::Log => nx::log(x),
            Unary::Relu => relu(x),
            Unary::Sigmoid => nx::sigmoid(x),
            Unary::Tanh => nx::tanh(x),
            Unary::Gelu => nx::gelu(x),
            Unary::Silu => nx::silu(x),
            Unary::Erf => nx::erf(x),
        }
    }
}

/// max(x, 0) with NaN propagated.
pub fn relu(x: f32) -> f32 {
    nx::max(x, 0.0)
}

/// Applies a fused activation.
pub fn activate(act: Act, x: f32) -> f32 {
    match act {
        Act::None => x,
        Act::Relu => relu(x),
        Act::Gelu => nx::gelu(x),
    }
}

/// Binary operations (float and, where the ISA allows, i32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
}

impl Binary {
    /// The strict float function.
    pub fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            Binary::Add => nx::add(a, b),
            Binary::Sub => nx::sub(a, b),
            Binary::Mul => nx::mul(a, b),
            Binary::Div => nx::div(a, b),
            Binary::Max => nx::max(a, b),
            Binary::Min => nx::min(a, b),
        }
    }
    /// The i32 function (wrapping); None for operations the ISA does not define on i32.
    pub fn apply_i32(self, a: i32, b: i32) -> Option<i32> {
        Some(match self {
            Binary::Add => a.wrapping_add(b),
            Binary::Sub => a.wrapping_sub(b),
            Binary::Mul => a.wrapping_mul(b),
            Binary::Max => a.max(b),
            Binary::Min => a.min(b),
            Binary::Div => return None,
        })
    }
}

/// Comparisons (EQ, LT, LE), each giving i32 1 or 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    Eq,
    Lt,
    Le,
}

impl Compare {
    /// On float values (f16 and bf16 widened exactly to f32 first): IEEE comparison of the
    /// canonicalized values, so NaN compares false (EQ(NaN, NaN) = 0), -0 == +0, and a denormal
    /// is a zero of its sign (the strict tier flushes them).
    pub fn apply(self, a: f32, b: f32) -> bool {
        let (x, y) = (nx::canon(a), nx::canon(b));
        match self {
            Compare::Eq => x == y,
            Compare::Lt => x < y,
            Compare::Le => x <= y,
        }
    }
    /// On i32 values, signed.
    pub fn apply_i32(self, a: i32, b: i32) -> bool {
        match self {
            Compare::Eq => a == b,
            Compare::Lt => a < b,
            Compare::Le => a <= b,
        }
    }
}

/// out = op(a) elementwise.
pub fn unary(op: Unary, a: &[f32], out: &mut [f32]) {
    for (o, &x) in out.iter_mut().zip(a) {
        *o = op.apply(x);
    }
}

/// out = op(a, b) with broadcasting.
pub fn binary(
    op: Binary,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [f32],
    out_shape: &[usize],
) {
    for_each_broadcast(out_shape, [a_shape, b_shape], |o, [i, j]| out[o] = op.apply(a[i], b[j]));
}

/// out = op(a, b) on i32 with broadcasting.
pub fn binary_i32(
    op: Binary,
    a: &[i32],
    a_shape: &[usize],
    b: &[i32],
    b_shape: &[usize],
    out: &mut [i32],
    out_shape: &[usize],
) {
    for_each_broadcast(out_shape, [a_shape, b_shape], |o, [i, j]| {
        out[o] = op.apply_i32(a[i], b[j]).unwrap_or(0);
    });
}

/// out = (a op b) as i32 1 or 0 on float values, with broadcasting (EQ, LT, LE).
pub fn compare(
    op: Compare,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [i32],
    out_shape: &[usize],
) {
    for_each_broadcast(out_shape, [a_shape, b_shape], |o, [i, j]| out[o] = i32::from(op.apply(a[i], b[j])));
}

/// out = (a op b) as i32 1 or 0 on i32 values (signed), with broadcasting.
pub fn compare_i32(
    op: Compare,
    a: &[i32],
    a_shape: &[usize],
    b: &[i32],
    b_shape: &[usize],
    out: &mut [i32],
    out_shape: &[usize],
) {
    for_each_broadcast(out_shape, [a_shape, b_shape], |o, [i, j]| {
        out[o] = i32::from(op.apply_i32(a[i], b[j]))
    });
}

/// out = a where cond != 0, else b (SELECT), with cond, a and b broadcast to `out_shape`; the
/// chosen element is copied as it is (any element type: the VM passes 16- or 32-bit words).
#[allow(clippy::too_many_arguments)]
pub fn select<T: Copy>(
    cond: &[i32],
    c_shape: &[usize],
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
    out: &mut [T],
    out_shape: &[usize],
) {
    for_each_broadcast(out_shape, [c_shape, a_shape, b_shape], |o, [k, i, j]| {
        out[o] = if cond[k] != 0 { a[i] } else { b[j] };
    });
}

/// out = op(a, s) for a scalar immediate.
pub fn binary_scalar(op: Binary, a: &[f32], s: f32, out: &mut [f32]) {
    for (o, &x) in out.iter_mut().zip(a) {
        *o = op.apply(x, s);
    }
}

/// The geometry of one MATMUL, all sizes concrete.
#[derive(Clone, Debug)]
pub struct MatmulShape {
    /// Shapes of a, b and the output as stored.
    pub a: Vec<usize>,
    pub b: Vec<usize>,
    pub out: Vec<usize>,
    pub ta: bool,
    pub tb: bool,
}

impl MatmulShape {
    /// [m, k] times [k, n]: no batch axes, neither operand transposed.
    pub fn plain(m: usize, n: usize, k: usize) -> MatmulShape {
        MatmulShape { a: vec![m, k], b: vec![k, n], out: vec![m, n], ta: false, tb: false }
    }
}

/// dst = act(op(a) @ op(b) + bias). For each output, k runs in ascending order:
/// `acc = +0; acc = add(acc, mul(a[m,k], b[k,n]))`, then `acc = add(acc, bias)`, then `act`.
pub fn matmul(
    g: &MatmulShape,
    a: &[f32],
    b: &[f32],
    bias: Option<(&[f32], &[usize])>,
    act: Act,
    out: &mut [f32],
) {
    let r = g.out.len();
    let (m, n) = (g.out[r - 2], g.out[r - 1]);
    let k = if g.ta { g.a[g.a.len() - 2] } else { g.a[g.a.len() - 1] };
    let batch_out = &g.out[..r - 2];
    let (a_batch, b_batch) = (&g.a[..g.a.len() - 2], &g.b[..g.b.len() - 2]);
    // (row stride, column stride) of op(a) as [m, k] and op(b) as [k, n].
    let (a_rs, a_cs) = if g.ta { (1, m) } else { (k, 1) };
    let (b_rs, b_cs) = if g.tb { (1, k) } else { (n, 1) };
    let bias_strides = bias.map(|(_, s)| broadcast_strides(s, &g.out));
    let out_strides = strides(&g.out);
    let mut batch = 0usize;
    for_each_broadcast(batch_out, [a_batch, b_batch], |_, [ab, bb]| {
        let (a0, b0) = (ab * m * k, bb * k * n);
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0f32;
                for p in 0..k {
                    acc = nx::add(acc, nx::mul(a[a0 + i * a_rs + p * a_cs], b[b0 + p * b_rs + j * b_cs]));
                }
                let o = batch * m * n + i * n + j;
                if let (Some((bv, _)), Some(bs)) = (bias, &bias_strides) {
                    // The bias offset from the output's multi-index.
                    let mut rem = o;
                    let mut off = 0;
                    for ax in 0..r {
                        off += (rem / out_strides[ax]) * bs[ax];
                        rem %= out_strides[ax];
                    }
                    acc = nx::add(acc, bv[off]);
                }
                out[o] = activate(act, acc);
            }
        }
        batch += 1;
    });
}

/// dst = softmax(x * scale + mask) over the last axis. The scaled, masked logits are formed as
/// `add(mul(x, scale), mask)`; the row then goes through `numerics::softmax_row`.
pub fn softmax(x: &[f32], shape: &[usize], mask: Option<(&[f32], &[usize])>, scale: f32, out: &mut [f32]) {
    let n = *shape.last().unwrap_or(&1);
    let mut logits = vec![0.0f32; x.len()];
    match mask {
        Some((mv, ms)) => for_each_broadcast(shape, [shape, ms], |o, [i, j]| {
            logits[o] = nx::add(nx::mul(x[i], scale), mv[j]);
        }),
        None => {
            for (l, &v) in logits.iter_mut().zip(x) {
                *l = nx::mul(v, scale);
            }
        }
    }
    if n == 0 {
        return;
    }
    for (row, o) in logits.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        nx::softmax_row(row, o);
    }
}

/// Layer normalization over the last axis (see `numerics::layernorm_row`).
pub fn layernorm(
    x: &[f32],
    n: usize,
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
    out: &mut [f32],
) {
    if n == 0 {
        return;
    }
    for (row, o) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        nx::layernorm_row(row, gamma, beta, eps, o);
    }
}

/// RMS normalization over the last axis (see `numerics::rmsnorm_row`).
pub fn rmsnorm(x: &[f32], n: usize, gamma: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    if n == 0 {
        return;
    }
    for (row, o) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        nx::rmsnorm_row(row, gamma, eps, o);
    }
}

/// Reductions over one axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    Sum,
    Mean,
    Max,
}

/// Reduces `x` of `shape` over `axis` (already non-negative) into `out` (the shape without the
/// axis, in row-major order). Each output gathers its row in ascending order along the axis and
/// reduces it with the fixed tree of `numerics`.
pub fn reduce(op: Reduce, x: &[f32], shape: &[usize], axis: usize, out: &mut [f32]) {
    let outer: usize = shape[..axis].iter().product();
    let len = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let mut row = vec![0.0f32; len];
    for o in 0..outer {
        for i in 0..inner {
            for (k, r) in row.iter_mut().enumerate() {
                *r = x[(o * len + k) * inner + i];
            }
            out[o * inner + i] = match op {
                Reduce::Sum => nx::sum(&row),
                Reduce::Mean => nx::mean(&row),
                Reduce::Max => nx::max_reduce(&row),
            };
        }
    }
}

/// dst axis i = src axis perm[i]. Works on any element type.
pub fn transpose<T: Copy>(x: &[T], shape: &[usize], perm: &[u8], out: &mut [T]) {
    transpose_part(x, shape, perm, 0, out)
}

/// Elements of the blocks [`transpose`] copies whole: the trailing axes the permutation keeps
/// in place are contiguous in both tensors (BERT's [0, 2, 1, 3] moves whole head rows).
pub fn transpose_block(shape: &[usize], perm: &[u8]) -> usize {
    let kept = perm.iter().enumerate().rev().take_while(|&(i, &p)| p as usize == i).count();
    shape[perm.len() - kept..].iter().product()
}

/// The part of [`transpose`]'s output that starts `start` elements in (a multiple of
/// [`transpose_block`]) and fills `out` (at most to the output's end): parts cut at blocks
/// may be written by different threads, with the output's values.
pub fn transpose_part<T: Copy>(x: &[T], shape: &[usize], perm: &[u8], start: usize, out: &mut [T]) {
    let src_strides = strides(shape);
    let block = transpose_block(shape, perm);
    let lead = perm.len() - perm.iter().enumerate().rev().take_while(|&(i, &p)| p as usize == i).count();
    let out_shape: Vec<usize> = perm[..lead].iter().map(|&p| shape[p as usize]).collect();
    let perm_strides: Vec<usize> = perm[..lead].iter().map(|&p| src_strides[p as usize]).collect();
    // Walk the output in order; the source offset is the dot of the index with perm_strides.
    let total: usize = out_shape.iter().product::<usize>() * block;
    if block == 0 || start >= total {
        return;
    }
    debug_assert!(start.is_multiple_of(block));
    let n = out.len().min(total - start);
    // The index of the part's first block, and its source offset.
    let mut idx = vec![0usize; out_shape.len()];
    let mut rest = start / block;
    for ax in (0..out_shape.len()).rev() {
        idx[ax] = rest % out_shape[ax];
        rest /= out_shape[ax];
    }
    let mut off: usize = idx.iter().zip(&perm_strides).map(|(i, s)| i * s).sum();
    for o in out[..n].chunks_exact_mut(block) {
        o.copy_from_slice(&x[off..off + block]);
        for ax in (0..out_shape.len()).rev() {
            idx[ax] += 1;
            off += perm_strides[ax];
            if idx[ax] < out_shape[ax] {
                break;
            }
            off -= perm_strides[ax] * out_shape[ax];
            idx[ax] = 0;
        }
    }
}

/// dst = src[..., start..start+len, ...] along `axis`.
pub fn slice<T: Copy>(x: &[T], shape: &[usize], axis: usize, start: usize, len: usize, out: &mut [T]) {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let src_block = shape[axis] * inner;
    let dst_block = len * inner;
    for o in 0..outer {
        let s = o * src_block + start * inner;
        out[o * dst_block..(o + 1) * dst_block].copy_from_slice(&x[s..s + dst_block]);
    }
}

/// dst = a followed by b along `axis`.
pub fn concat<T: Copy>(a: &[T], a_shape: &[usize], b: &[T], b_shape: &[usize], axis: usize, out: &mut [T]) {
    let outer: usize = a_shape[..axis].iter().product();
    let inner: usize = a_shape[axis + 1..].iter().product();
    let (ab, bb) = (a_shape[axis] * inner, b_shape[axis] * inner);
    for o in 0..outer {
        let d = o * (ab + bb);
        out[d..d + ab].copy_from_slice(&a[o * ab..(o + 1) * ab]);
        out[d + ab..d + ab + bb].copy_from_slice(&b[o * bb..(o + 1) * bb]);
    }
}

/// dst[i, :] = table[indices[i], :] with rows of `row` elements. Returns the position and value
/// of the first index out of range instead of reading past the table.
pub fn gather<T: Copy>(
    table: &[T],
    rows: usize,
    row: usize,
    indices: &[i32],
    out: &mut [T],
) -> Result<(), (usize, i32)> {
    for (i, &ix) in indices.iter().enumerate() {
        if ix < 0 || ix as usize >= rows {
            return Err((i, ix));
        }
        let s = ix as usize * row;
        out[i * row..(i + 1) * row].copy_from_slice(&table[s..s + row]);
    }
    Ok(())
}

/// GATHER from a block-quantized `[rows, k]` table: each index's row dequantized
/// (`numerics::quant`) into `out`, `k` values a row. Errors as [`gather`].
pub fn gather_blocks(
    format: crate::isa::BlockFormat,
    table: &[u8],
    rows: usize,
    k: usize,
    indices: &[i32],
    out: &mut [f32],
) -> Result<(), (usize, i32)> {
    for (i, &ix) in indices.iter().enumerate() {
        if ix < 0 || ix as usize >= rows {
            return Err((i, ix));
        }
        let r = ix as usize;
        crate::numerics::quant::dequantize_rows(format, table, k, r..r + 1, &mut out[i * k..(i + 1) * k]);
    }
    Ok(())
}

/// The inverse of [`slice`]: `dst[..., start : start + len, ...] = part` along `axis`, where
/// `shape` is dst's and `len` part's size on that axis. Every other element of dst is kept.
pub fn put<T: Copy>(part: &[T], shape: &[usize], axis: usize, start: usize, len: usize, dst: &mut [T]) {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let dst_block = shape[axis] * inner;
    let src_block = len * inner;
    for o in 0..outer {
        let d = o * dst_block + start * inner;
        dst[d..d + src_block].copy_from_slice(&part[o * src_block..(o + 1) * src_block]);
    }
}

/// The inverse of [`gather`] (SCATTER): row i of `src` (rows of `row` elements) replaces row
/// `indices[i]` of `dst`, which has `rows` rows; other rows are kept, and a later i wins over an
/// earlier one with the same index. Every index is checked before anything is written: on the
/// first out of range, its position and value, and dst unchanged.
pub fn scatter<T: Copy>(
    src: &[T],
    row: usize,
    indices: &[i32],
    rows: usize,
    dst: &mut [T],
) -> Result<(), (usize, i32)> {
    if let Some((i, &ix)) = indices.iter().enumerate().find(|(_, &ix)| ix < 0 || ix as usize >= rows) {
        return Err((i, ix));
    }
    for (i, &ix) in indices.iter().enumerate() {
        let d = ix as usize * row;
        dst[d..d + row].copy_from_slice(&src[i * row..(i + 1) * row]);
    }
    Ok(())
}

/// ARGMAX over rows of `n`: the index of each row's largest element, the lowest among equal
/// ones; NaN is larger than every number (so the first NaN wins) and -0 equals +0. An empty row
/// (`n == 0`) gives -1. A denormal counts as a zero of its sign (the strict tier flushes them
/// on every executor). Comparisons only, so the result is exact.
pub fn argmax(x: &[f32], n: usize, out: &mut [i32]) {
    if n == 0 {
        out.fill(-1);
        return;
    }
    for (o, row) in out.iter_mut().zip(x.chunks_exact(n)) {
        let mut best = 0usize;
        let mut top = nx::canon(row[0]);
        for (i, &v) in row.iter().enumerate().skip(1) {
            if top.is_nan() {
                break;
            }
            let v = nx::canon(v);
            if v.is_nan() || v > top {
                (best, top) = (i, v);
            }
        }
        *o = best as i32;
    }
}
