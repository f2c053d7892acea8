//! Launchers of the data-movement and elementwise kernels (strict tier): unary and binary float
//! math, their i32 forms, the comparisons and SELECT, FILL, RAND, CAST, the 16-bit pack/unpack moves, strided copies (COPY,
//! RESHAPE, SLICE, CONCAT, TRANSPOSE, PUT), GATHER, and the decoder's SCATTER, 16-bit windows
//! (PUT, SLICE at a register offset), TSET's one word and ARGMAX.
//!
//! Each launcher checks its arguments (ranks, sizes, that every word it touches lies inside its
//! slice, that counts fit the kernels' u32 indices) and returns [`VulkanError::Invalid`] rather
//! than record a dispatch that would read or write out of bounds. An empty output records
//! nothing. Every kernel is a grid-stride loop over its items, dispatched with
//! [`groups_for`], so any size runs within the device's workgroup-count limit.
//!
//! Every result is bit for bit the CPU reference's: `exec::cpu::reference`, `numerics`,
//! `rand::fill_strict` and the VM's CAST (see each function). Operands are 32-bit words;
//! 16-bit float tensors are packed two per word (element 2k in the low half).

use std::sync::Arc;

use crate::exec::cpu::reference::{broadcast_strides, Binary, Compare, Unary};
use crate::exec::vulkan::{
    binary_op_code, compare_op_code, groups_for, unary_op_code, Binding, Kernel, Kernels, Recorder, Slice,
    VulkanError, LOCAL_SIZE,
};
use crate::isa::{DType, Dist, Tier};

/// Most axes a strided or broadcasting kernel takes (its push constants hold 8 per operand).
pub const MAX_RANK: usize = 8;

fn invalid(what: String) -> VulkanError {
    VulkanError::Invalid(what)
}

/// `v` as a u32 push constant, or an error naming `what`.
fn to_u32(v: u64, what: &str) -> Result<u32, VulkanError> {
    u32::try_from(v).map_err(|_| invalid(format!("{what} = {v} does not fit the kernels' 32-bit indices")))
}

/// Checks that `s` holds at least `words` 32-bit words.
fn fits(s: &Slice, role: &str, words: u64) -> Result<(), VulkanError> {
    let have = s.len.div_ceil(4);
    if have < words {
        return Err(invalid(format!("{role} holds {have} 32-bit words; the operation needs {words}")));
    }
    Ok(())
}

/// Elements of `shape` (None on overflow).
fn count(shape: &[usize]) -> Option<u64> {
    shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64))
}

fn check_rank(shape: &[usize], what: &str) -> Result<(), VulkanError> {
    if shape.len() > MAX_RANK {
        return Err(invalid(format!(
            "{what} has rank {}; kernels take at most {MAX_RANK} axes",
            shape.len()
        )));
    }
    Ok(())
}

/// Records one dispatch of kernel `name` over `items` grid-stride items.
fn launch(
    k: &Kernels,
    rec: &mut Recorder,
    name: &'static str,
    bindings: &[Binding],
    push: &[u32],
    items: u64,
) -> Result<(), VulkanError> {
    launch_kernel(rec, &k.get(name)?, bindings, push, items)
}

/// Records one dispatch of `kernel` (a specialized pipeline) over `items` grid-stride items.
fn launch_kernel(
    rec: &mut Recorder,
    kernel: &Arc<Kernel>,
    bindings: &[Binding],
    push: &[u32],
    items: u64,
) -> Result<(), VulkanError> {
    let groups = groups_for(rec.device(), items, LOCAL_SIZE);
    rec.dispatch(kernel, bindings, push, groups)
}

/// Drops size-1 axes and merges neighbouring axes that every operand walks contiguously (axis
/// d-1 and d merge when each operand's stride of d-1 is its stride of d times the size of d),
/// so the kernels do less index arithmetic: equal shapes become rank 1, a row broadcast rank 2.
/// The addresses visited, in row-major order, are unchanged.
fn collapse<const K: usize>(shape: &[usize], strides: [&[usize]; K]) -> (Vec<usize>, [Vec<usize>; K]) {
    let mut sh: Vec<usize> = Vec::with_capacity(shape.len());
    let mut st: [Vec<usize>; K] = std::array::from_fn(|_| Vec::with_capacity(shape.len()));
    for (d, &size) in shape.iter().enumerate() {
        if size == 1 {
            continue;
        }
        let merges =
            !sh.is_empty() && (0..K).all(|o| st[o].last().copied() == strides[o][d].checked_mul(size));
        if merges {
            if let Some(last) = sh.last_mut() {
                *last *= size;
            }
            for o in 0..K {
                if let Some(last) = st[o].last_mut() {
                    *last = strides[o][d];
                }
            }
        } else {
            sh.push(size);
            for o in 0..K {
                st[o].push(strides[o][d]);
            }
        }
    }
    (sh, st)
}

/// An axis list of at most 8 values as the kernels' two uvec4 push constants.
fn axes8(v: &[usize], what: &str) -> Result<[u32; 8], VulkanError> {
    let mut out = [0u32; 8];
    for (o, &x) in out.iter_mut().zip(v) {
        *o = to_u32(x as u64, what)?;
    }
    Ok(out)
}

/// The largest offset `offset + Σ (shape[d] - 1) · strides[d]` a strided walk reaches
/// (`shape` has no zero axis), or None on overflow.
fn last_offset(offset: usize, shape: &[usize], strides: &[usize]) -> Option<u64> {
    shape
        .iter()
        .zip(strides)
        .try_fold(offset as u64, |acc, (&n, &s)| acc.checked_add((n as u64 - 1).checked_mul(s as u64)?))
}

/// `dst = op(x)` over `n` f32 elements (UNARY opcodes: NEG, ABS, SQRT, RSQRT, EXP, LOG, RELU,
/// SIGMOID, TANH, GELU), each element `reference::Unary::apply` — the strict functions of
/// `numerics` repeated in shaders/include/strict.glsl — or, in the fast tier, the device's own
/// exp, log, sqrt, inversesqrt and tanh for the ops built on them (shaders/unary_fast.comp).
pub fn unary(
    k: &Kernels,
    rec: &mut Recorder,
    op: Unary,
    tier: Tier,
    dst: &Slice,
    x: &Slice,
    n: usize,
) -> Result<(), VulkanError> {
    if n == 0 {
        return Ok(());
    }
    let n32 = to_u32(n as u64, "the element count")?;
    fits(dst, "the destination", n as u64)?;
    fits(x, "the source", n as u64)?;
    // One pipeline per op (its code as specialization constant 0; see shaders/unary.comp); the
    // fast tier takes the device's own math where shaders/unary_fast.comp has it.
    let code = unary_op_code(op);
    let vendor =
        matches!(op, Unary::Sqrt | Unary::Rsqrt | Unary::Exp | Unary::Log | Unary::Sigmoid | Unary::Tanh);
    let name = if tier == Tier::Fast && vendor { "unary_fast" } else { "unary" };
    let kernel = k.specialized(name, &[code])?;
    // Both kernels take four elements a thread.
    let groups = groups_for(rec.device(), (n as u64).div_ceil(4), LOCAL_SIZE);
    rec.dispatch(&kernel, &[Binding::write(dst), Binding::read(x)], &[n32, code, 0], groups)
}

/// `dst = -x` (`neg`) or `|x|` over `n` i32 elements, wrapping like Rust's `wrapping_neg` /
/// `wrapping_abs` (so i32::MIN maps to itself): the VM's NEG and ABS on i32 tensors.
pub fn unary_i32(
    k: &Kernels,
    rec: &mut Recorder,
    neg: bool,
    dst: &Slice,
    x: &Slice,
    n: usize,
) -> Result<(), VulkanError> {
    if n == 0 {
        return Ok(());
    }
    let n32 = to_u32(n as u64, "the element count")?;
    fits(dst, "the destination", n as u64)?;
    fits(x, "the source", n as u64)?;
    launch(k, rec, "unary_i32", &[Binding::write(dst), Binding::read(x)], &[n32, u32::from(neg)], n as u64)
}

/// Checks that each `(name, shape)` broadcasts to `out_shape` (numpy rules, aligned at the last
/// axis, rank <= 8); returns the output's element count.
fn check_broadcast(shapes: &[(&str, &[usize])], out_shape: &[usize]) -> Result<u64, VulkanError> {
    check_rank(out_shape, "the output")?;
    for &(what, s) in shapes {
        let lead = out_shape.len().checked_sub(s.len()).ok_or_else(|| {
            invalid(format!("operand {what} of shape {s:?} has more axes than the output {out_shape:?}"))
        })?;
        if s.iter().zip(&out_shape[lead..]).any(|(&x, &o)| x != o && x != 1) {
            return Err(invalid(format!(
                "operand {what} of shape {s:?} does not broadcast to {out_shape:?}"
            )));
        }
    }
    count(out_shape).ok_or_else(|| invalid(format!("the output shape {out_shape:?} overflows")))
}

/// Push constants of the broadcasting binary kernels: {n, op code, rank, `word3`, shape[8],
/// a strides[8], b strides[8]} after checking the shapes (numpy rules, operands aligned at the
/// last axis, rank <= 8) and the slices' sizes. None when the output is empty.
#[allow(clippy::too_many_arguments)]
fn broadcast_push(
    op: u32,
    word3: u32,
    dst: &Slice,
    a: &Slice,
    a_shape: &[usize],
    b: &Slice,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<Option<(Vec<u32>, u64)>, VulkanError> {
    let n = check_broadcast(&[("a", a_shape), ("b", b_shape)], out_shape)?;
    if n == 0 {
        return Ok(None);
    }
    let n32 = to_u32(n, "the output's element count")?;
    fits(dst, "the destination", n)?;
    // Non-empty output: every operand axis is its output axis or 1, so no operand is empty.
    fits(a, "operand a", count(a_shape).unwrap_or(u64::MAX))?;
    fits(b, "operand b", count(b_shape).unwrap_or(u64::MAX))?;
    let (sa, sb) = (broadcast_strides(a_shape, out_shape), broadcast_strides(b_shape, out_shape));
    let (shape, [sa, sb]) = collapse(out_shape, [&sa, &sb]);
    let mut push = vec![n32, op, shape.len() as u32, word3];
    push.extend(axes8(&shape, "an axis size")?);
    push.extend(axes8(&sa, "a stride")?);
    push.extend(axes8(&sb, "a stride")?);
    Ok(Some((push, n)))
}

/// `dst = op(a, b)` on f32 with numpy broadcasting (ADD, SUB, MUL, DIV, MAX, MIN):
/// `reference::binary`. `a_shape` and `b_shape` may have fewer axes than `out_shape` (aligned
/// at the last axis) and size-1 axes; ranks are at most [`MAX_RANK`].
#[allow(clippy::too_many_arguments)]
pub fn binary(
    k: &Kernels,
    rec: &mut Recorder,
    op: Binary,
    dst: &Slice,
    a: &Slice,
    a_shape: &[usize],
    b: &Slice,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<(), VulkanError> {
    let code = binary_op_code(op);
    let Some((push, n)) = broadcast_push(code, 0, dst, a, a_shape, b, b_shape, out_shape)? else {
        return Ok(());
    };
    // One pipeline per op (specialization constant 0; see shaders/binary.comp).
    let kernel = k.specialized("binary", &[binary_op_code(op)])?;
    // Equal shapes (rank 1, unit strides) go four elements a thread: a grid for n / 4 threads
    // (the grid-stride loops cover any size; idle threads only cost launches).
    let vec4 = push[2] == 1 && push[12] == 1 && push[20] == 1;
    let groups = groups_for(rec.device(), if vec4 { n.div_ceil(4) } else { n }, LOCAL_SIZE);
    rec.dispatch(&kernel, &[Binding::write(dst), Binding::read(a), Binding::read(b)], &push, groups)
}

/// `dst = op(a, b)` on i32 with numpy broadcasting: `reference::binary_i32` — add, sub and mul
/// wrap, max and min compare signed, and DIV (not an i32 operation in the ISA, so
/// `Binary::apply_i32` gives None and the reference writes 0) writes 0. No case fails, so no
/// status word is needed.
#[allow(clippy::too_many_arguments)]
pub fn binary_i32(
    k: &Kernels,
    rec: &mut Recorder,
    op: Binary,
    dst: &Slice,
    a: &Slice,
    a_shape: &[usize],
    b: &Slice,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<(), VulkanError> {
    let code = binary_op_code(op);
    let Some((push, n)) = broadcast_push(code, 0, dst, a, a_shape, b, b_shape, out_shape)? else {
        return Ok(());
    };
    launch(k, rec, "binary_i32", &[Binding::write(dst), Binding::read(a), Binding::read(b)], &push, n)
}

/// `dst = (a op b)` as i32 1 or 0 with numpy broadcasting (EQ, LT, LE): `reference::compare`
/// on f32 words (`ints` false; the VM widens 16-bit sources exactly first) or
/// `reference::compare_i32` on i32 words, by integer operations on the bits
/// (shaders/compare.comp). Shapes as for [`binary`].
#[allow(clippy::too_many_arguments)]
pub fn compare(
    k: &Kernels,
    rec: &mut Recorder,
    op: Compare,
    ints: bool,
    dst: &Slice,
    a: &Slice,
    a_shape: &[usize],
    b: &Slice,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<(), VulkanError> {
    let code = compare_op_code(op);
    let Some((push, n)) = broadcast_push(code, u32::from(ints), dst, a, a_shape, b, b_shape, out_shape)?
    else {
        return Ok(());
    };
    launch(k, rec, "compare", &[Binding::write(dst), Binding::read(a), Binding::read(b)], &push, n)
}

/// `dst = a where cond != 0, else b` over 32-bit words (SELECT; the VM moves 16-bit elements
/// through `unpack16`/`pack16`), with cond, a and b broadcast to `out_shape` (numpy rules, rank
/// at most [`MAX_RANK`]): `reference::select`, the chosen words copied (shaders/select.comp).
/// The kernel takes the collapsed output shape and, per operand, a mask of the axes it is
/// broadcast on; its other strides are a row-major walk over the axes it keeps.
#[allow(clippy::too_many_arguments)]
pub fn select(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    cond: &Slice,
    c_shape: &[usize],
    a: &Slice,
    a_shape: &[usize],
    b: &Slice,
    b_shape: &[usize],
    out_shape: &[usize],
) -> Result<(), VulkanError> {
    let n = check_broadcast(&[("cond", c_shape), ("a", a_shape), ("b", b_shape)], out_shape)?;
    if n == 0 {
        return Ok(());
    }
    let n32 = to_u32(n, "the output's element count")?;
    fits(dst, "the destination", n)?;
    fits(cond, "operand cond", count(c_shape).unwrap_or(u64::MAX))?;
    fits(a, "operand a", count(a_shape).unwrap_or(u64::MAX))?;
    fits(b, "operand b", count(b_shape).unwrap_or(u64::MAX))?;
    let full = [c_shape, a_shape, b_shape].map(|s| broadcast_strides(s, out_shape));
    let (shape, strides) = collapse(out_shape, [&full[0], &full[1], &full[2]]);
    let mut masks = [0u32; 3];
    for (mask, st) in masks.iter_mut().zip(&strides) {
        // The strides the kernel derives: 0 on a broadcast axis, else the product of the sizes
        // of the kept axes inside it.
        let mut next = 1usize;
        for d in (0..shape.len()).rev() {
            if st[d] == 0 {
                *mask |= 1 << d;
            } else if st[d] != next {
                return Err(invalid(format!(
                    "internal: stride {} on axis {d} of the collapsed shape {shape:?}, not {next}",
                    st[d]
                )));
            } else {
                next *= shape[d];
            }
        }
    }
    let mut push = vec![n32, shape.len() as u32, masks[0], masks[1], masks[2], 0, 0, 0];
    push.extend(axes8(&shape, "an axis size")?);
    let bindings = [Binding::write(dst), Binding::read(cond), Binding::read(a), Binding::read(b)];
    launch(k, rec, "select", &bindings, &push, n)
}

/// `dst = op(a, s)` over `n` f32 elements for a scalar immediate (ADD_S … MIN_S):
/// `reference::binary_scalar`.
pub fn binary_scalar(
    k: &Kernels,
    rec: &mut Recorder,
    op: Binary,
    dst: &Slice,
    a: &Slice,
    s: f32,
    n: usize,
) -> Result<(), VulkanError> {
    if n == 0 {
        return Ok(());
    }
    let n32 = to_u32(n as u64, "the element count")?;
    fits(dst, "the destination", n as u64)?;
    fits(a, "the source", n as u64)?;
    let push = [n32, binary_op_code(op), s.to_bits()];
    launch(k, rec, "binary_scalar", &[Binding::write(dst), Binding::read(a)], &push, n as u64)
}

/// Sets each of the first `n` 32-bit words of `dst` to `bits` (FILL: the VM passes the bits of
/// `numerics::canon(value)` for f32, the i32's bits for i32, or a 16-bit pattern in both halves
/// over the packed words).
pub fn fill(k: &Kernels, rec: &mut Recorder, dst: &Slice, n: usize, bits: u32) -> Result<(), VulkanError> {
    if n == 0 {
        return Ok(());
    }
    let n32 = to_u32(n as u64, "the word count")?;
    fits(dst, "the destination", n as u64)?;
    launch(k, rec, "fill", &[Binding::write(dst)], &[n32, bits], n as u64)
}

/// `dst[i] = rand::philox_uniform(seed, i)` or `philox_normal(seed, i)` for i in 0..n, as f32:
/// `rand::fill_strict` (RAND).
pub fn rand(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    n: usize,
    seed: u32,
    dist: Dist,
) -> Result<(), VulkanError> {
    rand_at(k, rec, dst, n, seed, dist, 0)
}

/// Like [`rand`] for elements `first .. first + n` of a larger random tensor: `dst[i]` is the
/// value of element `first + i`. The element index is 64 bits in the kernel (Philox counter
/// words 0 and 1), so a tensor filled in pieces past 2^32 elements equals one filled at once.
#[allow(clippy::too_many_arguments)]
pub fn rand_at(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    n: usize,
    seed: u32,
    dist: Dist,
    first: u64,
) -> Result<(), VulkanError> {
    if n == 0 {
        return Ok(());
    }
    let n32 = to_u32(n as u64, "the element count")?;
    if first.checked_add(n as u64 - 1).is_none() {
        return Err(invalid(format!("random elements {first} + {n} pass 2^64")));
    }
    fits(dst, "the destination", n as u64)?;
    let dist = match dist {
        Dist::Uniform => 0,
        Dist::Normal => 1,
    };
    let push = [n32, seed, dist, first as u32, (first >> 32) as u32];
    launch(k, rec, "rand", &[Binding::write(dst)], &push, n as u64)
}

/// The kernels' code of a dtype (shaders/cast.comp).
fn dtype_code(d: DType) -> u32 {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Bf16 => 2,
        DType::I32 => 3,
    }
}

/// 32-bit words that `n` elements of `d` occupy.
fn words_of(d: DType, n: u64) -> u64 {
    if d.size() == 2 {
        n.div_ceil(2)
    } else {
        n
    }
}

/// `dst = src` converted from `src_dtype` to `dst_dtype` over `n` elements, any pair of f32,
/// f16, bf16 and i32, exactly as the VM's CAST on the CPU:
/// - i32 → i32 copies; i32 → float rounds to the nearest f32 (ties to even, Rust `as`) and then
///   to f16/bf16;
/// - float → i32 widens to f32, then truncates toward zero, saturating, NaN → 0 (Rust `as`);
/// - float → float widens to f32 (exactly; bf16 denormals flush), canonicalizes (denormals
///   flush, NaN canonical) and rounds to nearest even into the destination format.
///
/// The same kernel widens 16-bit float operands to f32 before an f32 kernel and rounds results
/// back (the VM's `float_op`). 16-bit data is packed two per word; a 16-bit destination is
/// written a whole word per invocation, with the upper half of the last word 0 for odd `n`.
#[allow(clippy::too_many_arguments)]
pub fn cast(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    dst_dtype: DType,
    src: &Slice,
    src_dtype: DType,
    n: usize,
) -> Result<(), VulkanError> {
    cast_with(k, rec, (dst, dst_dtype), (src, src_dtype), n, false)
}

/// `dst = ` UNARY's GELU of each of the `n` f32 elements of `src`, converted to `dst_dtype` as
/// [`cast`] converts: the bits of [`unary`] GELU then [`cast`], in one pass, with no f32
/// intermediate written (the fast tier's 16-bit MATMUL with GELU rounds its f32 sums so).
pub fn gelu_cast(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    dst_dtype: DType,
    src: &Slice,
    n: usize,
) -> Result<(), VulkanError> {
    cast_with(k, rec, (dst, dst_dtype), (src, DType::F32), n, true)
}

/// [`cast`] of `n` elements, each destination and source a slice and its dtype, with GELU
/// applied to each (f32) element first where `gelu_first` (shaders/gelu_cast.comp: the same
/// kernel, apart so that CAST's stays integer-only).
fn cast_with(
    k: &Kernels,
    rec: &mut Recorder,
    (dst, dst_dtype): (&Slice, DType),
    (src, src_dtype): (&Slice, DType),
    n: usize,
    gelu_first: bool,
) -> Result<(), VulkanError> {
    if n == 0 {
        return Ok(());
    }
    let n32 = to_u32(n as u64, "the element count")?;
    let words = words_of(dst_dtype, n as u64);
    fits(dst, "the destination", words)?;
    fits(src, "the source", words_of(src_dtype, n as u64))?;
    // Four elements an invocation where n is whole quads (slices start 256-byte aligned, so
    // every quad is a whole uvec4 or uvec2 on both sides; shaders/cast.comp).
    let quads = n.is_multiple_of(4);
    let items = if quads { n as u64 / 4 } else { words };
    let push = [items as u32, n32, dtype_code(src_dtype), dtype_code(dst_dtype)];
    let kernel = k.specialized(if gelu_first { "gelu_cast" } else { "cast" }, &[u32::from(quads)])?;
    launch_kernel(rec, &kernel, &[Binding::write(dst), Binding::read(src)], &push, items)
}

/// `dst[i] = ` 16-bit element i of the packed `src`, zero-extended to 32 bits, for i in 0..n
/// (raw bits; with [`pack16`] it moves 16-bit tensors through the 32-bit move kernels).
pub fn unpack16(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    src: &Slice,
    n: usize,
) -> Result<(), VulkanError> {
    if n == 0 {
        return Ok(());
    }
    let n32 = to_u32(n as u64, "the element count")?;
    fits(dst, "the destination", n as u64)?;
    fits(src, "the source", (n as u64).div_ceil(2))?;
    launch(k, rec, "unpack16", &[Binding::write(dst), Binding::read(src)], &[n32], n as u64)
}

/// Packs the low 16 bits of `src[0..n]` two per word into `dst` (element 2k in the low half;
/// for odd `n` the upper half of the last word is 0): the inverse of [`unpack16`].
pub fn pack16(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    src: &Slice,
    n: usize,
) -> Result<(), VulkanError> {
    if n == 0 {
        return Ok(());
    }
    let n32 = to_u32(n as u64, "the element count")?;
    let words = (n as u64).div_ceil(2);
    fits(dst, "the destination", words)?;
    fits(src, "the source", n as u64)?;
    launch(k, rec, "pack16", &[Binding::write(dst), Binding::read(src)], &[n32], words)
}

/// `dst[b][c][r] = src[b][r][c]` for `batch` matrices of `rows` x `cols` 16-bit elements (raw
/// bits, packed two a word): the last two axes swapped. `rows` and `cols` must be even (each
/// output word then pairs two input rows; odd shapes take [`unpack16`], [`strided_copy`] and
/// [`pack16`]).
pub fn transpose16(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    src: &Slice,
    batch: usize,
    rows: usize,
    cols: usize,
) -> Result<(), VulkanError> {
    if !rows.is_multiple_of(2) || !cols.is_multiple_of(2) {
        return Err(invalid(format!("transpose16 takes even rows and columns, not {rows} x {cols}")));
    }
    let words = count(&[batch, rows, cols])
        .map(|n| n / 2)
        .ok_or_else(|| invalid("transpose16: too many elements".into()))?;
    if words == 0 {
        return Ok(());
    }
    to_u32(words, "the word count")?;
    fits(dst, "the destination", words)?;
    fits(src, "the source", words)?;
    const TILE: u64 = 64; // shaders/transpose16.comp
    let tiles = batch as u64 * (rows as u64).div_ceil(TILE) * (cols as u64).div_ceil(TILE);
    let groups = super::rows::grid(rec, &super::rows::Tuning::default(), tiles)?;
    let push = [batch as u32, rows as u32, cols as u32];
    rec.dispatch(&k.get("transpose16")?, &[Binding::write(dst), Binding::read(src)], &push, groups)
}

/// Cuts `batch` f32 matrices of [`rows`, `k`] (or [`k`, `rows`] where `transposed`) into three
/// bf16 pieces each (hi, mid, lo, whose sum is exactly the element; shaders/sgemm_split_pieces.comp
/// says how) laid out as `batch` matrices of [`rows`, 6·`k`] bf16: segment s of a row holds
/// piece `(pieces >> 2s) & 3` (0 hi, 1 mid, 2 lo) of each of its k elements. `k` is even. A row
/// holding an inf, a NaN or a normal float below 2^-103 (whose pieces the GEMM cannot use) sets
/// its word of `flags` (`batch` x `rows` words, zeroed before) to 1. The first pass of
/// [`super::rows::matmul_split_bf16`]; `dst` holds 12 bytes an element of `src`.
#[allow(clippy::too_many_arguments)]
pub fn split_bf16(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    flags: &Slice,
    src: &Slice,
    batch: usize,
    rows: usize,
    kdim: usize,
    transposed: bool,
    pieces: u32,
) -> Result<(), VulkanError> {
    if !kdim.is_multiple_of(2) {
        return Err(invalid(format!("split_bf16 takes an even k, not {kdim}")));
    }
    if (0..6).any(|s| (pieces >> (2 * s)) & 3 == 3) || pieces >> 12 != 0 {
        return Err(invalid(format!("split_bf16: {pieces:#x} is not six piece indices 0 to 2")));
    }
    let elems = count(&[batch, rows, kdim]).ok_or_else(|| invalid("split_bf16: too many elements".into()))?;
    if elems == 0 {
        return Ok(());
    }
    to_u32(elems * 3, "the output's word count")?;
    fits(dst, "the destination", elems * 3)?;
    fits(flags, "the row flags", batch as u64 * rows as u64)?;
    fits(src, "the source", elems)?;
    const TILE: u64 = 64; // shaders/sgemm_split_pieces.comp
    let tiles = batch as u64 * (rows as u64).div_ceil(TILE) * (kdim as u64).div_ceil(TILE);
    let groups = super::rows::grid(rec, &super::rows::Tuning::default(), tiles)?;
    let push = [batch as u32, rows as u32, kdim as u32, pieces];
    let kernel = k.specialized("sgemm_split_pieces", &[u32::from(transposed)])?;
    rec.dispatch(&kernel, &[Binding::write(dst), Binding::read(src), Binding::write(flags)], &push, groups)
}

/// For every multi-index `c` over `shape` (rank <= 8; rank 0 is one element):
/// `dst[dst_offset + Σ c·dst_strides] = src[src_offset + Σ c·src_strides]`, 32-bit elements
/// copied as bits; offsets and strides count elements. The VM builds COPY/RESHAPE, SLICE,
/// CONCAT (one launch per operand into one `dst`) and TRANSPOSE from it; 16-bit tensors go
/// through [`unpack16`] and [`pack16`]. Every address reached must lie inside its slice.
#[allow(clippy::too_many_arguments)]
pub fn strided_copy(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    dst_offset: usize,
    dst_strides: &[usize],
    src: &Slice,
    src_offset: usize,
    src_strides: &[usize],
    shape: &[usize],
) -> Result<(), VulkanError> {
    check_rank(shape, "the copied shape")?;
    if dst_strides.len() != shape.len() || src_strides.len() != shape.len() {
        return Err(invalid(format!(
            "a strided copy over shape {shape:?} needs {} strides per side; given {} (dst) and {} (src)",
            shape.len(),
            dst_strides.len(),
            src_strides.len()
        )));
    }
    let n = count(shape).ok_or_else(|| invalid(format!("the copied shape {shape:?} overflows")))?;
    if n == 0 {
        return Ok(());
    }
    to_u32(n, "the element count")?;
    let overflow = || invalid("a strided copy's addresses overflow".to_string());
    let dst_last = last_offset(dst_offset, shape, dst_strides).ok_or_else(overflow)?;
    let src_last = last_offset(src_offset, shape, src_strides).ok_or_else(overflow)?;
    fits(dst, "the destination", dst_last + 1)?;
    fits(src, "the source", src_last + 1)?;
    // The kernel adds offsets in u32.
    to_u32(dst_last, "the last destination element")?;
    to_u32(src_last, "the last source element")?;
    let (mut sh, [mut ds, mut ss]) = collapse(shape, [dst_strides, src_strides]);
    // Four words a unit where the last axis is contiguous on both sides and every offset and
    // stride is whole vec4s (slices start 256-byte aligned): the same words moved.
    let last = sh.len().wrapping_sub(1);
    let quads = !sh.is_empty()
        && ds[last] == 1
        && ss[last] == 1
        && sh[last].is_multiple_of(4)
        && dst_offset.is_multiple_of(4)
        && src_offset.is_multiple_of(4)
        && ds[..last].iter().chain(&ss[..last]).all(|s| s.is_multiple_of(4));
    let (dst_offset, src_offset, items) = if quads {
        sh[last] /= 4;
        for s in ds[..last].iter_mut().chain(&mut ss[..last]) {
            *s /= 4;
        }
        (dst_offset / 4, src_offset / 4, n / 4)
    } else {
        (dst_offset, src_offset, n)
    };
    let mut push = vec![
        to_u32(items, "the element count")?,
        sh.len() as u32,
        to_u32(dst_offset as u64, "the destination offset")?,
        to_u32(src_offset as u64, "the source offset")?,
    ];
    push.extend(axes8(&sh, "an axis size")?);
    push.extend(axes8(&ds, "a destination stride")?);
    push.extend(axes8(&ss, "a source stride")?);
    let kernel = k.specialized("strided_copy", &[u32::from(quads)])?;
    launch_kernel(rec, &kernel, &[Binding::write(dst), Binding::read(src)], &push, items)
}

/// A copy of `src` into `dst` (equal lengths): as [`strided_copy`] four words a thread where
/// the length is whole vec4s (an H100 moved 2^24 words at 836 GB/s through
/// vkCmdCopyBuffer), else a transfer command.
pub fn copy(k: &Kernels, rec: &mut Recorder, dst: &Slice, src: &Slice) -> Result<(), VulkanError> {
    if src.len != dst.len || !src.len.is_multiple_of(16) || src.len == 0 {
        return rec.copy(src, dst);
    }
    let words = (src.len / 4) as usize;
    strided_copy(k, rec, dst, 0, &[1], src, 0, &[1], &[words])
}

/// GATHER: `dst[i, :] = table[indices[i], :]` for i in 0..count, rows of `row` 32-bit words,
/// `table` of `rows` rows, `indices` i32. An index outside `0..rows` is never read through; the
/// kernel writes the smallest position holding one into `status[slot]` with atomicMin (the
/// caller fills the status word with 0xFFFFFFFF first and, after the batch, reports
/// "index {v} at position {pos}" when it changed, as the CPU reference's first bad index). Rows
/// of bad positions are left unwritten. Indices are checked even when `row` is 0.
#[allow(clippy::too_many_arguments)]
pub fn gather(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    table: &Slice,
    rows: usize,
    row: usize,
    indices: &Slice,
    count: usize,
    status: &Slice,
    slot: u32,
) -> Result<(), VulkanError> {
    if count == 0 {
        return Ok(());
    }
    let total = (count as u64)
        .checked_mul(row as u64)
        .ok_or_else(|| invalid(format!("{count} rows of {row} words overflow")))?;
    let table_words = (rows as u64)
        .checked_mul(row as u64)
        .ok_or_else(|| invalid(format!("a table of {rows} rows of {row} words overflows")))?;
    // Rows of whole vec4s move four words a thread (counts in vec4s).
    let quads = row.is_multiple_of(4) && row > 0;
    let unit = if quads { 4 } else { 1 };
    let push = [
        to_u32(total / unit, "the gathered word count")?,
        to_u32(count as u64, "the index count")?,
        to_u32(rows as u64, "the table's row count")?,
        to_u32(row as u64 / unit, "the row length")?,
        slot,
    ];
    to_u32(table_words, "the table's word count")?;
    fits(dst, "the destination", total)?;
    fits(table, "the table", table_words)?;
    fits(indices, "the indices", count as u64)?;
    fits(status, "the status buffer", u64::from(slot) + 1)?;
    let bindings =
        [Binding::write(dst), Binding::read(table), Binding::read(indices), Binding::write(status)];
    let kernel = k.specialized("gather", &[u32::from(quads)])?;
    launch_kernel(rec, &kernel, &bindings, &push, (total / unit).max(count as u64))
}

/// GATHER from a block-quantized table: `dst[i, :]` = the `k` f32 values of row `indices[i]`
/// of the `[rows, k]` table whose `format` blocks `table` holds as stored (`k` a multiple of
/// 32), exactly `numerics::quant`'s (shaders/gather_q.comp). Out-of-range indices are reported
/// through `status[slot]` as for [`gather`], their rows left unwritten.
#[allow(clippy::too_many_arguments)]
pub fn gather_blocks(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    format: crate::isa::BlockFormat,
    table: &Slice,
    rows: usize,
    row: usize,
    indices: &Slice,
    count: usize,
    status: &Slice,
    slot: u32,
) -> Result<(), VulkanError> {
    if count == 0 || row == 0 {
        return Ok(());
    }
    let qk = crate::isa::BlockFormat::BLOCK_ELEMS;
    if !row.is_multiple_of(qk) {
        return Err(invalid(format!("a block-quantized table's rows of {row} values are not whole blocks")));
    }
    let total = (count as u64)
        .checked_mul(row as u64)
        .ok_or_else(|| invalid(format!("{count} rows of {row} values overflow")))?;
    let table_bytes = (rows as u64)
        .checked_mul((row / qk) as u64)
        .and_then(|b| b.checked_mul(format.block_bytes() as u64))
        .ok_or_else(|| invalid(format!("a table of {rows} rows of {row} values overflows")))?;
    if table.len != table_bytes {
        return Err(invalid(format!(
            "the table: {} bytes of {} blocks where [{rows}, {row}] takes {table_bytes}",
            table.len,
            format.name()
        )));
    }
    let push = [
        to_u32(total, "the gathered value count")?,
        to_u32(count as u64, "the index count")?,
        to_u32(rows as u64, "the table's row count")?,
        to_u32(row as u64, "the row length")?,
        slot,
    ];
    to_u32(table_bytes, "the table's byte count")?;
    fits(dst, "the destination", total)?;
    fits(indices, "the indices", count as u64)?;
    fits(status, "the status buffer", u64::from(slot) + 1)?;
    let bindings =
        [Binding::write(dst), Binding::read(table), Binding::read(indices), Binding::write(status)];
    let kernel = k.specialized("gather_q", &[super::rows::block_format_code(format)])?;
    launch_kernel(rec, &kernel, &bindings, &push, total.max(count as u64))
}

/// SCATTER: `dst[indices[i], :] = src[i, :]` for i in 0..count, rows of `row` 32-bit words,
/// `dst` of `rows` rows, `indices` i32; rows no index names keep their values, and where
/// indices repeat the highest i wins (`reference::scatter`). When any index lies outside
/// `0..rows` nothing is written, the smallest such position goes into `status[slot]` and its
/// index into `status[value_slot]` (the caller fills the slot with 0xFFFFFFFF first and
/// reports it after the batch, as for [`gather`]). `src` must not share bytes with `dst`. One
/// workgroup per source row, each reading all `count` indices (shaders/scatter.comp says why
/// that is deterministic).
#[allow(clippy::too_many_arguments)]
pub fn scatter(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    rows: usize,
    row: usize,
    src: &Slice,
    indices: &Slice,
    count: usize,
    status: &Slice,
    slot: u32,
    value_slot: u32,
) -> Result<(), VulkanError> {
    if count == 0 {
        return Ok(());
    }
    let src_words = (count as u64)
        .checked_mul(row as u64)
        .ok_or_else(|| invalid(format!("{count} rows of {row} words overflow")))?;
    let dst_words = (rows as u64)
        .checked_mul(row as u64)
        .ok_or_else(|| invalid(format!("{rows} rows of {row} words overflow")))?;
    to_u32(src_words, "the source's word count")?;
    to_u32(dst_words, "the destination's word count")?;
    let push = [
        to_u32(count as u64, "the index count")?,
        to_u32(rows as u64, "the destination's row count")?,
        to_u32(row as u64, "the row length")?,
        slot,
        value_slot,
    ];
    fits(dst, "the destination", dst_words)?;
    fits(src, "the source", src_words)?;
    fits(indices, "the indices", count as u64)?;
    fits(status, "the status buffer", u64::from(slot.max(value_slot)) + 1)?;
    let bindings = [Binding::write(dst), Binding::read(src), Binding::read(indices), Binding::write(status)];
    let groups = groups_for(rec.device(), count as u64, 1);
    rec.dispatch(&k.get("scatter")?, &bindings, &push, groups)
}

/// One window copy between packed 16-bit tensors (see [`window16`]): `outer` runs of `len`
/// elements, run o at element `o * db + dofs` of the destination and `o * sb + sofs` of the
/// source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Runs {
    pub outer: usize,
    pub len: usize,
    pub db: usize,
    pub dofs: usize,
    pub sb: usize,
    pub sofs: usize,
}

/// Copies the 16-bit elements of `runs` from `src` into `dst` (both packed two per word,
/// element 2k in the low half): PUT into a window of `dst` and SLICE at a register offset on
/// f16 and bf16, without widening either tensor. Every element of `dst` outside the runs
/// keeps its bits, the other half of a word the runs cover in part included: each word has
/// one writer (shaders/window16.comp), which reads and rewrites it. `src` must not share
/// bytes with `dst`; runs must not overlap (`db >= len` and `sb >= len`).
pub fn window16(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    src: &Slice,
    runs: Runs,
) -> Result<(), VulkanError> {
    let Runs { outer, len, db, dofs, sb, sofs } = runs;
    if outer == 0 || len == 0 {
        return Ok(());
    }
    if db < len || sb < len {
        return Err(invalid(format!("runs of {len} elements every {db} (dst) and {sb} (src) overlap")));
    }
    let last = |block: usize, ofs: usize| {
        (outer as u64 - 1)
            .checked_mul(block as u64)
            .and_then(|v| v.checked_add(ofs as u64 + len as u64))
            .ok_or_else(|| invalid("a window copy's addresses overflow".to_string()))
    };
    let (dst_end, src_end) = (last(db, dofs)?, last(sb, sofs)?);
    // The kernel computes element indices (one past the last, doubled words) in u32.
    to_u32(dst_end + 1, "the destination's last element")?;
    to_u32(src_end, "the source's last element")?;
    fits(dst, "the destination", dst_end.div_ceil(2))?;
    fits(src, "the source", src_end.div_ceil(2))?;
    let wpr = len as u64 / 2 + 1;
    let items = to_u32(outer as u64 * wpr, "the window's word count")?;
    let push = [
        items,
        wpr as u32,
        outer as u32,
        len as u32,
        to_u32(db as u64, "the destination's run stride")?,
        dofs as u32,
        to_u32(sb as u64, "the source's run stride")?,
        sofs as u32,
    ];
    launch(k, rec, "window16", &[Binding::write(dst), Binding::read(src)], &push, u64::from(items))
}

/// `dst[at] = bits` for one 32-bit word of `dst` (TSET); the rest of `dst` is untouched.
pub fn set_word(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    at: usize,
    bits: u32,
) -> Result<(), VulkanError> {
    fits(dst, "the destination", at as u64 + 1)?;
    let push = [to_u32(at as u64, "the element index")?, bits];
    rec.dispatch(&k.get("set_word")?, &[Binding::write(dst)], &push, [1, 1, 1])
}

/// ARGMAX: `dst[r]` = the index (i32) of the largest of the `n` f32 values of row r of `x`,
/// for `rows` rows: `reference::argmax` — the lowest index among equal values, NaN above
/// every number (the first NaN wins), -0 equal to +0 and denormals counted as zeros of their
/// sign, decided on the bits (shaders/argmax.comp), so every device agrees. An empty row
/// (`n == 0`) gives -1.
pub fn argmax(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    x: &Slice,
    rows: usize,
    n: usize,
) -> Result<(), VulkanError> {
    if rows == 0 {
        return Ok(());
    }
    if n == 0 {
        return fill(k, rec, dst, rows, u32::MAX);
    }
    let total =
        (rows as u64).checked_mul(n as u64).ok_or_else(|| invalid(format!("{rows} rows of {n} overflow")))?;
    to_u32(total, "the source's element count")?;
    fits(dst, "the destination", rows as u64)?;
    fits(x, "the source", total)?;
    let push = [rows as u32, n as u32];
    let groups = groups_for(rec.device(), rows as u64, 1);
    rec.dispatch(&k.get("argmax")?, &[Binding::write(dst), Binding::read(x)], &push, groups)
}
