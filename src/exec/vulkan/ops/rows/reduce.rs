//! REDUCE_SUM / REDUCE_MEAN / REDUCE_MAX (`shaders/include/reduce.glsl`, compiled for 1 (short
//! axes), 8, 32 and 256 threads an output, and `shaders/reduce_lanes.comp`).
//!
//! Every output is the 256-lane tree of `numerics::reduce` over its elements, so the strict
//! tier gets `reference::reduce`'s bits. A thread walks all its lanes a step at a time with
//! their loads issued together, and where the reduced axis is not the last (`inner > 1`) a
//! workgroup's outputs are neighbouring words, so its loads are whole rows.
//!
//! Too few outputs to fill the GPU (a whole tensor to one value, a few long rows or columns)
//! take two passes, with scratch memory between them ([`reduce_partials`] says how much):
//! - max in both tiers, sums and means in the fast tier: the reduced axis is cut into
//!   segments, each reduced by its own threads, and a second pass reduces the partial
//!   results. Max is exact, so every grouping gives the tree's result; the fast tier's sums
//!   are its own fixed grouping (the same bits run to run, not the CPU's).
//! - strict sums and means over long axes: a lane is a chain of adds in element order, which
//!   may not be regrouped, but the 256 lanes of an output are independent: `reduce_lanes`
//!   computes them for contiguous rows (8 lanes a workgroup), `reduce_lanes_strided` for
//!   strided axes (8, 16 or 32 neighbouring outputs a workgroup, by 256 / that many lanes),
//!   and the tree kernel folds them (flag 4: the elements are lane sums).

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

/// A compiled tree kernel (`reduce_{threads}`): `threads` an output, `unroll` steps of 256
/// elements an iteration of its main loop (a thread's loads of those steps issued together),
/// segments of at most `max_seg` elements.
#[derive(Debug, PartialEq, Eq)]
struct ReduceKernel {
    threads: u32,
    unroll: u64,
    max_seg: u64,
    name: &'static str,
}

/// The longest segment `reduce_1` takes (a thread an output holding each element in a lane of
/// its own; reduce.glsl's SHORT_SEG, specialized to 16 or to 32 elements), where 8 threads an
/// output walked 32 lanes each. H100, GB/s, strict REDUCE_SUM over 2^22 rows of 4: 134 -> 1622
/// (PyTorch 699); 2^20 rows of 16: 444 -> 1688 (598); 16 rows of 2^20 over axis 0: 401 -> 2465
/// (1705); REDUCE_MAX over 2^20 rows of 16: 378 -> 1741 (530). Specialized to 32 as well
/// (same run, PyTorch alongside): REDUCE_SUM over rows of 24 556 -> 1773 (773), 32 683 -> 904
/// (562), 32 rows of 2^19 over axis 0 581 -> 2351 (1714); rows of 64 stay with 8 threads
/// (893, PyTorch 928). Then contiguous rows of whole quads loaded a quad at a time (a third
/// run): rows of 4 1630 -> 1800 (PyTorch 727), 16 1688 -> 2283 (579), 24 1762 -> 2053 (797),
/// 32 869 -> 1711 (514).
const REDUCE_SHORT_SEG: u64 = 32;

/// `reduce_1`'s specialization constant SHORT_SEG for segments of `seg`: 16 lanes where they
/// hold the segment (half the loads and adds of 32).
fn short_lanes(seg: u64) -> u32 {
    if seg <= 16 {
        16
    } else {
        32
    }
}

const KERNELS: [ReduceKernel; 4] = [
    ReduceKernel { threads: 1, unroll: 1, max_seg: REDUCE_SHORT_SEG, name: "reduce_1" },
    ReduceKernel { threads: 8, unroll: 1, max_seg: u64::MAX, name: "reduce_8" },
    ReduceKernel { threads: 32, unroll: 2, max_seg: u64::MAX, name: "reduce_32" },
    ReduceKernel { threads: 256, unroll: 16, max_seg: u64::MAX, name: "reduce_256" },
];

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

/// Loop iterations one invocation of `kernel` runs over segments of `seg` elements (its main
/// loop, then one step of 256 at a time, then the shared levels): lavapipe stops at 65535.
fn loop_iterations(seg: u64, kernel: &ReduceKernel) -> u64 {
    seg / (256 * kernel.unroll) + kernel.unroll + 1 + u64::from(kernel.threads.trailing_zeros()) + 2
}

/// The kernel for `outs` outputs over segments of `seg`: the forced threads an output rounded
/// up to a compiled count that takes the segment, else a thread an output for segments of up
/// to [`REDUCE_SHORT_SEG`], then for contiguous rows 8 threads up to 64 elements (rows of 32 a
/// workgroup), 32 up to 2048, then 256 (a lane a thread); for strided outputs 8 (32
/// neighbouring outputs a workgroup) where there are enough outputs for a busy GPU, else 32
/// (8 a workgroup: four times the workgroups, and still whole 32-byte sectors). More threads
/// where lavapipe's loop limit needs them; a forced choice past it is refused.
fn pick(tuning: &Tuning, outs: u64, seg: u64, strided: bool) -> Result<&'static ReduceKernel, VulkanError> {
    let forced = tuning.threads_per_row.or_else(row_threads_env);
    let kernel = match forced {
        Some(t) if t.is_power_of_two() && t <= 256 => {
            KERNELS.iter().find(|k| k.threads >= t && seg <= k.max_seg).unwrap_or(&KERNELS[3])
        }
        Some(t) => return Err(invalid(format!("{t} threads per row; a power of two from 1 to 256"))),
        None if seg <= REDUCE_SHORT_SEG => &KERNELS[0],
        None if strided && outs >= 32 * BUSY_GROUPS => &KERNELS[1],
        None if strided => &KERNELS[2],
        None if seg <= 64 => &KERNELS[1],
        None if seg <= 2048 => &KERNELS[2],
        None => &KERNELS[3],
    };
    let fits = |k: &ReduceKernel| loop_iterations(seg, k) <= LOOP_BUDGET;
    if fits(kernel) {
        return Ok(kernel);
    }
    if forced.is_none() {
        if let Some(k) = KERNELS.iter().find(|k| k.threads > kernel.threads && fits(k)) {
            return Ok(k);
        }
    }
    Err(invalid(format!(
        "{} threads per row of {seg} elements would run about {} loop iterations per thread; \
         lavapipe stops at 65535 (use more threads per row)",
        kernel.threads,
        loop_iterations(seg, kernel)
    )))
}

/// How a reduction runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// One pass of the tree kernels.
    One(Pass),
    /// The axis cut into segments (`Pass::nseg` of them), then the partial results reduced.
    Cut(Pass),
    /// Strict sums over an axis of `len` of `[outer, len, inner]`: `reduce_lanes` (inner 1) or
    /// `reduce_lanes_strided` computes every output's 256 lane sums, then the tree kernels fold
    /// them.
    Lanes { outer: u64, len: u64, inner: u64 },
}

/// Rows at least this long, too few to keep the GPU busy with a workgroup each, spread each
/// row's lanes over workgroups in the strict tier's sums (`reduce_lanes`): 256 steps a lane.
const LANES_MIN_ROW: u64 = 256 * 256;

/// Strided axes at least this long, with too few outputs to keep the GPU busy, spread each
/// output's lanes over workgroups in the strict tier's sums (`reduce_lanes_strided`): 32 steps
/// a lane, one iteration of its loop.
const STRIDED_LANES_MIN_LEN: u64 = 256 * 32;

/// `reduce_lanes_strided`'s neighbouring outputs a workgroup for `inner` outputs side by side
/// (its specialization constant COLS): 32 (a warp's loads of a step one row's 128-byte line),
/// or 8 or 16 where there are fewer (whole 32-byte sectors; columns past `inner` idle). H100,
/// strict REDUCE_SUM over axis 0, GB/s, one pass against the lanes: 2^20×16 35 -> 419, 2^21×8
/// 17 -> 222, 2^22×4 9 -> 117 (PyTorch about 1200: 16 outputs have only 4096 lane chains).
fn strided_lane_cols(inner: u64) -> u64 {
    inner.next_power_of_two().clamp(8, 32)
}

/// Strided strict sums spread their lanes only where one pass would have fewer workgroups
/// than this (about one a multiprocessor). H100, strict REDUCE_SUM over axis 0, GB/s, one pass
/// against the lanes: 65536×64 228 -> 1040 (PyTorch 376), 32768×256 489 -> 2048 (639),
/// 16384×768 1137 -> 1666 (944), 1M×32 66 -> 826 (1194); but 8192×2048 (256 workgroups one
/// pass) 2064 against 1618.
const STRIDED_LANES_MAX_GROUPS: u64 = 128;

/// How `op` over `shape`'s `axis` runs in `tier`. Checks the shape.
fn plan(tier: Tier, op: Reduce, shape: &[usize], axis: usize) -> Result<Plan, VulkanError> {
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
    // Workgroups of one pass (its threads an output, as `pick` picks them).
    let outs = outer * inner;
    let per_group =
        256 / u64::from(pick(&Tuning::default(), outs, len, inner > 1).map_or(256, |k| k.threads));
    let groups = outs.div_ceil(per_group);
    if groups >= BUSY_GROUPS / 2 {
        return Ok(Plan::One(whole));
    }
    let may_cut = matches!(op, Reduce::Max) || tier == Tier::Fast;
    if !may_cut {
        if (inner == 1 && len >= LANES_MIN_ROW)
            || (inner > 1 && len >= STRIDED_LANES_MIN_LEN && groups < STRIDED_LANES_MAX_GROUPS)
        {
            return Ok(Plan::Lanes { outer, len, inner });
        }
        return Ok(Plan::One(whole));
    }
    if len < 2 * REDUCE_MIN_SEGMENT {
        return Ok(Plan::One(whole));
    }
    let nseg = (BUSY_GROUPS / groups).next_power_of_two().min(len / REDUCE_MIN_SEGMENT);
    // Whole steps of 256 a segment, and no empty segment.
    let seg = len.div_ceil(nseg).next_multiple_of(256);
    let nseg = len.div_ceil(seg);
    if nseg < 2 {
        return Ok(Plan::One(whole));
    }
    Ok(Plan::Cut(Pass { nseg, seg, ..whole }))
}

/// Bytes of scratch memory [`reduce_in`] takes for `op` over `shape`'s `axis` in `tier` (the
/// first pass's partial results), 0 where it runs in one pass or the shape is refused.
pub fn reduce_partials(tier: Tier, op: Reduce, shape: &[usize], axis: usize) -> u64 {
    match plan(tier, op, shape, axis) {
        Ok(Plan::Cut(first)) => first.outs() * 4,
        Ok(Plan::Lanes { outer, inner, .. }) => outer * inner * 256 * 4,
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

/// [`reduce`] with a [`Tuning`] (`threads_per_row`: threads an output, rounded up to 1 (axes of
/// up to 32), 8, 32 or 256).
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
    let plan = plan(tier, op, shape, axis)?;
    let total = elements("reduce", shape)?;
    let whole = match plan {
        Plan::One(p) | Plan::Cut(p) => Pass { nseg: 1, seg: p.len, ..p },
        Plan::Lanes { outer, len, inner } => Pass { outer, len, inner, nseg: 1, seg: len },
    };
    let outs = whole.outs();
    check_len("reduce x", x, total)?;
    check_len("reduce destination", dst, outs)?;
    if outs == 0 {
        // Checked before returning, so a refused choice is refused for every shape.
        pick(tuning, 0, whole.len, whole.inner > 1)?;
        return Ok(());
    }
    let hw_ftz = !matches!(op, Reduce::Max) && strict_gemm_hw_ftz(k);
    let spec = [u32::from(hw_ftz), u32::from(matches!(op, Reduce::Max))];
    // A pass of the tree kernels; `flags` adds to the layout's (2: mean, 4: lane sums given).
    let launch = |rec: &mut Recorder, pass: Pass, dst: &Slice, src: &Slice, flags: u32| {
        let kernel = pick(tuning, pass.outs(), pass.seg, pass.inner > 1)?;
        let push = [
            w(pass.outs()),
            w(pass.len),
            w(pass.inner),
            w(pass.seg),
            w(pass.nseg),
            flags | u32::from(pass.inner > 1),
            count(whole.len as usize).to_bits(),
        ];
        let groups = grid(rec, tuning, pass.outs().div_ceil(u64::from(256 / kernel.threads)))?;
        let pipeline = match kernel.threads {
            1 => {
                // Contiguous outputs of whole quads load a quad at a time (SHORT_QUADS).
                let quads = pass.inner == 1 && pass.nseg == 1 && pass.len.is_multiple_of(4);
                k.specialized(kernel.name, &[spec[0], spec[1], short_lanes(pass.seg), u32::from(quads)])?
            }
            _ => k.specialized(kernel.name, &spec)?,
        };
        rec.dispatch(&pipeline, &[Binding::write(dst), Binding::read(src)], &push, groups)
    };
    let mean = u32::from(matches!(op, Reduce::Mean)) << 1;
    match (plan, partials) {
        (Plan::Cut(first), Some(scratch)) => {
            check_len("reduce partial results", scratch, first.outs())?;
            launch(rec, first, scratch, x, 0)?;
            let second =
                Pass { outer: first.outer, len: first.nseg, inner: first.inner, nseg: 1, seg: first.nseg };
            launch(rec, second, dst, scratch, mean)
        }
        (Plan::Lanes { outer, len, inner }, Some(scratch)) => {
            let outs = outer * inner;
            check_len("reduce lane sums", scratch, outs * 256)?;
            let bindings = [Binding::write(scratch), Binding::read(x)];
            if inner == 1 {
                let groups = grid(rec, tuning, outer * 256 / LANES_PER_GROUP)?;
                let pipeline = k.specialized("reduce_lanes", &spec[..1])?;
                rec.dispatch(&pipeline, &bindings, &[w(outer), w(len)], groups)?;
            } else {
                // A group of `cols` columns takes 256 lanes / (256 / cols) a workgroup = cols
                // workgroups.
                let cols = strided_lane_cols(inner);
                let col_groups = inner.div_ceil(cols);
                let groups = grid(rec, tuning, outer * col_groups * cols)?;
                let pipeline = k.specialized("reduce_lanes_strided", &[spec[0], cols as u32])?;
                let push = [w(outer), w(len), w(inner), w(col_groups)];
                rec.dispatch(&pipeline, &bindings, &push, groups)?;
            }
            let second = Pass { outer: outs, len: 256, inner: 1, nseg: 1, seg: 256 };
            launch(rec, second, dst, scratch, mean | 4)
        }
        _ => launch(rec, whole, dst, x, mean),
    }
}

/// `reduce_lanes.comp`'s lanes a workgroup.
const LANES_PER_GROUP: u64 = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_cut_only_what_may_be_cut() {
        let cut =
            |tier, op, shape: &[usize], axis| matches!(plan(tier, op, shape, axis).unwrap(), Plan::Cut(_));
        // A strict sum never, a strict max and a fast sum where there are few outputs.
        assert!(!cut(Tier::Strict, Reduce::Sum, &[1 << 20], 0));
        assert!(!cut(Tier::Strict, Reduce::Mean, &[1 << 20], 0));
        assert!(cut(Tier::Strict, Reduce::Max, &[1 << 20], 0));
        assert!(cut(Tier::Fast, Reduce::Sum, &[1 << 20], 0));
        // Many outputs already fill the GPU; short axes are never cut.
        assert!(!cut(Tier::Fast, Reduce::Sum, &[1 << 14, 4096], 1));
        assert!(!cut(Tier::Fast, Reduce::Sum, &[8, 4095], 1));
        let Plan::Cut(p) = plan(Tier::Fast, Reduce::Sum, &[3, 100_000, 5], 1).unwrap() else {
            panic!("not cut")
        };
        assert_eq!((p.outer, p.len, p.inner), (3, 100_000, 5));
        assert!(p.seg >= REDUCE_MIN_SEGMENT && p.seg % 256 == 0, "{p:?}");
        assert!(p.nseg * p.seg >= p.len && (p.nseg - 1) * p.seg < p.len, "no empty segment: {p:?}");
        assert_eq!(reduce_partials(Tier::Fast, Reduce::Sum, &[3, 100_000, 5], 1), p.outs() * 4);
        // A strict sum spreads the lanes of such an axis instead.
        assert_eq!(reduce_partials(Tier::Strict, Reduce::Sum, &[3, 100_000, 5], 1), 15 * 256 * 4);
        // A strict sum over few long contiguous rows spreads their lanes instead.
        assert_eq!(
            plan(Tier::Strict, Reduce::Mean, &[3, 1 << 16], 1).unwrap(),
            Plan::Lanes { outer: 3, len: 1 << 16, inner: 1 }
        );
        assert_eq!(reduce_partials(Tier::Strict, Reduce::Sum, &[3, 1 << 16], 1), 3 * 256 * 4);
        assert!(matches!(plan(Tier::Strict, Reduce::Sum, &[3, (1 << 16) - 1], 1).unwrap(), Plan::One(_)));
        // And over a long strided axis with enough outputs side by side.
        assert_eq!(
            plan(Tier::Strict, Reduce::Sum, &[2, 8192, 40], 1).unwrap(),
            Plan::Lanes { outer: 2, len: 8192, inner: 40 }
        );
        assert_eq!(reduce_partials(Tier::Strict, Reduce::Sum, &[2, 8192, 40], 1), 80 * 256 * 4);
        assert!(matches!(plan(Tier::Strict, Reduce::Sum, &[8191, 40], 0).unwrap(), Plan::One(_)));
        assert!(matches!(plan(Tier::Strict, Reduce::Sum, &[16384, 768], 0).unwrap(), Plan::Lanes { .. }));
        assert!(matches!(plan(Tier::Strict, Reduce::Sum, &[8192, 2048], 0).unwrap(), Plan::One(_)));
        assert!(matches!(plan(Tier::Strict, Reduce::Sum, &[1 << 16, 3], 0).unwrap(), Plan::Lanes { .. }));
        assert_eq!([1, 3, 8, 9, 16, 17, 32, 100].map(strided_lane_cols), [8, 8, 8, 16, 16, 32, 32, 32]);
    }

    #[test]
    fn loop_budget_picks_more_threads() {
        let t = Tuning::default();
        assert_eq!(pick(&t, 1 << 20, 1 << 24, true).unwrap().threads, 32);
        assert_eq!(pick(&t, 1, 1 << 24, false).unwrap().threads, 256);
        let forced = Tuning { threads_per_row: Some(2), ..Tuning::default() };
        assert_eq!(pick(&forced, 4, 100, false).unwrap().threads, 8);
        assert!(pick(&forced, 4, 1 << 24, false).is_err());
        // A thread an output only for short segments, forced or not.
        let one = Tuning { threads_per_row: Some(1), ..Tuning::default() };
        assert_eq!(pick(&one, 4, REDUCE_SHORT_SEG, true).unwrap().threads, 1);
        assert_eq!(pick(&one, 4, REDUCE_SHORT_SEG + 1, true).unwrap().threads, 8);
        assert_eq!(pick(&t, 1 << 20, REDUCE_SHORT_SEG, false).unwrap().threads, 1);
        assert_eq!(pick(&t, 1 << 20, REDUCE_SHORT_SEG + 1, false).unwrap().threads, 8);
    }
}
