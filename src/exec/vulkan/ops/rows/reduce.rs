//! REDUCE_SUM / REDUCE_MEAN / REDUCE_MAX (`shaders/include/reduce.glsl`, compiled for 8, 32
//! and 256 threads an output).
//!
//! Every output is the 256-lane tree of `numerics::reduce` over its elements, so the strict
//! tier gets `reference::reduce`'s bits. A thread walks all its lanes a step at a time with
//! their loads issued together, and where the reduced axis is not the last (`inner > 1`) a
//! workgroup's outputs are neighbouring words, so its loads are whole rows.
//!
//! Too few outputs to fill the GPU (a whole tensor to one value, a few long rows or columns):
//! the reduced axis is cut into segments, each reduced by its own threads into scratch memory
//! ([`reduce_partials`] says how much), and a second pass reduces the partial results. Only
//! where that cannot change a bit of the result, or the tier allows it: max in both tiers (an
//! exact operation, so every grouping gives the tree's result), sums and means in the fast
//! tier (the same bits run to run, not the CPU's). A strict sum stays one pass: each lane is a
//! chain of adds in element order, 256 chains an output, which bounds how fast one output goes.

use crate::exec::cpu::reference::Reduce;
use crate::exec::vulkan::{Binding, Kernels, Recorder, Slice, VulkanError};
use crate::isa::Tier;

use super::{
    check_len, check_row, count, elements, grid, invalid, row_threads_env, strict_gemm_hw_ftz, w, Tuning,
    LOOP_BUDGET, MAX_ELEMS,
};

/// The shortest segment a cut axis gets: the second pass then reads at most one word for
/// every this many the first read.
pub const REDUCE_MIN_SEGMENT: u64 = 2048;

/// Workgroups a launch should have for the GPU to be busy (an H100 has 132 multiprocessors,
/// each holding eight of these 256-thread workgroups); fewer, and the axis is cut.
const BUSY_GROUPS: u64 = 1024;

/// Threads an output in the compiled kernels, and their shaders.
const KERNELS: [(u32, &str); 3] = [(8, "reduce_8"), (32, "reduce_32"), (256, "reduce_256")];

/// One pass: `outs` outputs, each reducing a segment (at most `seg` elements) of an axis of
/// `len`, cut in `nseg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pass {
    outer: u64,
    len: u64,
    inner: u64,
    nseg: u64,
    seg: u64,
}

impl Pass {
    fn outs(&self) -> u64 {
        self.outer * self.nseg * self.inner
    }
}

/// Loop iterations one invocation of `reduce_{t}` runs over segments of `seg` elements (its
/// main loop takes 256 * U elements an iteration, then one step of 256 at a time, then the
/// shared levels): lavapipe stops at 65535.
fn loop_iterations(seg: u64, t: u32) -> u64 {
    let unroll = match t {
        8 => 1,
        32 => 2,
        _ => 16,
    };
    seg / (256 * unroll) + unroll + 1 + u64::from(t.trailing_zeros()) + 2
}

/// Threads an output for `outs` outputs over segments of `seg`: the forced choice rounded up
/// to a compiled one, else for contiguous rows 8 up to 64 elements (rows of 32 a workgroup),
/// 32 up to 2048, then 256 (a lane a thread); for strided outputs 8 (32 neighbouring outputs a
/// workgroup) where there are enough outputs for a busy GPU, else 32 (8 a workgroup: four
/// times the workgroups, and still whole 32-byte sectors). More threads where lavapipe's loop
/// limit needs them; a forced choice past it is refused.
fn threads(tuning: &Tuning, outs: u64, seg: u64, strided: bool) -> Result<u32, VulkanError> {
    let forced = tuning.threads_per_row.or_else(row_threads_env);
    let t = match forced {
        Some(t) if t.is_power_of_two() && t <= 256 => {
            KERNELS.iter().map(|k| k.0).find(|&k| k >= t).unwrap_or(256)
        }
        Some(t) => return Err(invalid(format!("{t} threads per row; a power of two from 1 to 256"))),
        None if strided => {
            if outs >= 32 * BUSY_GROUPS {
                8
            } else {
                32
            }
        }
        None if seg <= 64 => 8,
        None if seg <= 2048 => 32,
        None => 256,
    };
    let fits = |t: u32| loop_iterations(seg, t) <= LOOP_BUDGET;
    if fits(t) {
        return Ok(t);
    }
    if forced.is_none() {
        if let Some(t) = KERNELS.iter().map(|k| k.0).find(|&k| k > t && fits(k)) {
            return Ok(t);
        }
    }
    Err(invalid(format!(
        "{t} threads per row of {seg} elements would run about {} loop iterations per thread; \
         lavapipe stops at 65535 (use more threads per row)",
        loop_iterations(seg, t)
    )))
}

/// How `op` over `shape`'s `axis` runs in `tier`: its first pass, and whether a second reduces
/// that pass's partial results. Checks the shape.
fn plan(tier: Tier, op: Reduce, shape: &[usize], axis: usize) -> Result<(Pass, bool), VulkanError> {
    elements("reduce", shape)?;
    if axis >= shape.len() {
        return Err(invalid(format!("reduce over axis {axis} of a shape of {} axes {shape:?}", shape.len())));
    }
    let outer = shape[..axis].iter().product::<usize>() as u64;
    let len = shape[axis] as u64;
    let inner = shape[axis + 1..].iter().product::<usize>() as u64;
    // Output elements: outer * inner, which may exceed the input's when len is 0.
    if outer.checked_mul(inner).is_none_or(|o| o > MAX_ELEMS) {
        return Err(invalid(format!("reduce of {shape:?} over axis {axis}: 2^31 or more outputs")));
    }
    check_row("reduce", len)?;
    let whole = Pass { outer, len, inner, nseg: 1, seg: len };
    let may_cut = matches!(op, Reduce::Max) || tier == Tier::Fast;
    if !may_cut || len < 2 * REDUCE_MIN_SEGMENT {
        return Ok((whole, false));
    }
    // Workgroups of the uncut launch (its threads an output, as `threads` picks them).
    let outs = outer * inner;
    let per_group = 256 / u64::from(threads(&Tuning::default(), outs, len, inner > 1).unwrap_or(256));
    let groups = outs.div_ceil(per_group);
    if groups >= BUSY_GROUPS / 2 {
        return Ok((whole, false));
    }
    let nseg = (BUSY_GROUPS / groups).next_power_of_two().min(len / REDUCE_MIN_SEGMENT);
    // Whole steps of 256 a segment, and no empty segment.
    let seg = len.div_ceil(nseg).next_multiple_of(256);
    let nseg = len.div_ceil(seg);
    if nseg < 2 {
        return Ok((whole, false));
    }
    Ok((Pass { nseg, seg, ..whole }, true))
}

/// Bytes of scratch memory [`reduce_in`] takes for `op` over `shape`'s `axis` in `tier` (the
/// first pass's partial results), 0 where it runs in one pass or the shape is refused.
pub fn reduce_partials(tier: Tier, op: Reduce, shape: &[usize], axis: usize) -> u64 {
    match plan(tier, op, shape, axis) {
        Ok((first, true)) => first.outs() * 4,
        _ => 0,
    }
}

/// REDUCE_SUM / REDUCE_MEAN / REDUCE_MAX of `x` (of `shape`) over `axis`, exactly
/// `reference::reduce`: `dst` has the shape without the axis; output `o * inner + i` reduces
/// `x[(o * len + e) * inner + i]` for `e` ascending with the tree (`numerics::sum`,
/// `max_reduce`; mean = `div(sum, len)`). Empty rows give +0, -inf and NaN. One pass.
pub fn reduce(
    k: &Kernels,
    rec: &mut Recorder,
    op: Reduce,
    dst: &Slice,
    x: &Slice,
    shape: &[usize],
    axis: usize,
) -> Result<(), VulkanError> {
    reduce_with(k, rec, op, dst, x, shape, axis, &Tuning::default())
}

/// [`reduce`] with a [`Tuning`] (`threads_per_row`: threads an output, rounded up to 8, 32 or
/// 256).
#[allow(clippy::too_many_arguments)]
pub fn reduce_with(
    k: &Kernels,
    rec: &mut Recorder,
    op: Reduce,
    dst: &Slice,
    x: &Slice,
    shape: &[usize],
    axis: usize,
    tuning: &Tuning,
) -> Result<(), VulkanError> {
    reduce_in(k, rec, Tier::Strict, op, dst, x, shape, axis, None, tuning)
}

/// [`reduce_with`] in `tier`, in two passes where [`reduce_partials`] asks for scratch memory
/// and `partials` is a slice of exactly that many bytes (without it: one pass, as the strict
/// tier's sums always run). The fast tier's cut sums are its own fixed grouping of the same
/// tree, the same bits from run to run.
#[allow(clippy::too_many_arguments)]
pub fn reduce_in(
    k: &Kernels,
    rec: &mut Recorder,
    tier: Tier,
    op: Reduce,
    dst: &Slice,
    x: &Slice,
    shape: &[usize],
    axis: usize,
    partials: Option<&Slice>,
    tuning: &Tuning,
) -> Result<(), VulkanError> {
    let (first, cut) = plan(tier, op, shape, axis)?;
    let total = elements("reduce", shape)?;
    let outs = first.outer * first.inner;
    check_len("reduce x", x, total)?;
    check_len("reduce destination", dst, outs)?;
    if outs == 0 {
        // Checked before returning, so a refused choice is refused for every shape.
        threads(tuning, 0, first.len, first.inner > 1)?;
        return Ok(());
    }
    let hw_ftz = !matches!(op, Reduce::Max) && strict_gemm_hw_ftz(k);
    let kernel = |t: u32| {
        let name = KERNELS.iter().find(|c| c.0 == t).map_or("reduce_256", |c| c.1);
        k.specialized(name, &[u32::from(hw_ftz), u32::from(matches!(op, Reduce::Max))])
    };
    let launch = |rec: &mut Recorder, pass: Pass, dst: &Slice, src: &Slice, mean: bool| {
        let t = threads(tuning, pass.outs(), pass.seg, pass.inner > 1)?;
        let flags = u32::from(pass.inner > 1) | (u32::from(mean) << 1);
        let push = [
            w(pass.outs()),
            w(pass.len),
            w(pass.inner),
            w(pass.seg),
            w(pass.nseg),
            flags,
            count(first.len as usize).to_bits(),
        ];
        let groups = grid(rec, tuning, pass.outs().div_ceil(u64::from(256 / t)))?;
        rec.dispatch(&kernel(t)?, &[Binding::write(dst), Binding::read(src)], &push, groups)
    };
    let mean = matches!(op, Reduce::Mean);
    match partials.filter(|_| cut) {
        Some(scratch) => {
            check_len("reduce partial results", scratch, first.outs())?;
            launch(rec, first, scratch, x, false)?;
            let second =
                Pass { outer: first.outer, len: first.nseg, inner: first.inner, nseg: 1, seg: first.nseg };
            launch(rec, second, dst, scratch, mean)
        }
        None => launch(rec, Pass { nseg: 1, seg: first.len, ..first }, dst, x, mean),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_cut_only_what_may_be_cut() {
        let cut = |tier, op, shape: &[usize], axis| plan(tier, op, shape, axis).unwrap().1;
        // A strict sum never, a strict max and a fast sum where there are few outputs.
        assert!(!cut(Tier::Strict, Reduce::Sum, &[1 << 20], 0));
        assert!(!cut(Tier::Strict, Reduce::Mean, &[1 << 20], 0));
        assert!(cut(Tier::Strict, Reduce::Max, &[1 << 20], 0));
        assert!(cut(Tier::Fast, Reduce::Sum, &[1 << 20], 0));
        // Many outputs already fill the GPU; short axes are never cut.
        assert!(!cut(Tier::Fast, Reduce::Sum, &[1 << 14, 4096], 1));
        assert!(!cut(Tier::Fast, Reduce::Sum, &[8, 4095], 1));
        let (p, _) = plan(Tier::Fast, Reduce::Sum, &[3, 100_000, 5], 1).unwrap();
        assert_eq!((p.outer, p.len, p.inner), (3, 100_000, 5));
        assert!(p.seg >= REDUCE_MIN_SEGMENT && p.seg % 256 == 0, "{p:?}");
        assert!(p.nseg * p.seg >= p.len && (p.nseg - 1) * p.seg < p.len, "no empty segment: {p:?}");
        assert_eq!(reduce_partials(Tier::Fast, Reduce::Sum, &[3, 100_000, 5], 1), p.outs() * 4);
        assert_eq!(reduce_partials(Tier::Strict, Reduce::Sum, &[3, 100_000, 5], 1), 0);
    }

    #[test]
    fn loop_budget_picks_more_threads() {
        let t = Tuning::default();
        assert_eq!(threads(&t, 1 << 20, 1 << 24, true).unwrap(), 32);
        assert_eq!(threads(&t, 1, 1 << 24, false).unwrap(), 256);
        let forced = Tuning { threads_per_row: Some(2), ..Tuning::default() };
        assert_eq!(threads(&forced, 4, 100, false).unwrap(), 8);
        assert!(threads(&forced, 4, 1 << 24, false).is_err());
    }
}
