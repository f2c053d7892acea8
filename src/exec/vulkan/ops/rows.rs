//! Launchers for the row-wise and contraction kernels, strict tier: MATMUL, SOFTMAX, LAYERNORM,
//! RMSNORM and REDUCE_SUM/MEAN/MAX. Each gives exactly the bits of its CPU reference
//! (`exec::cpu::reference::{matmul, softmax, layernorm, rmsnorm, reduce}`):
//!
//! - matmul: every output keeps one accumulator that sees `k` in ascending order
//!   (`acc = +0; acc = add(acc, mul(a, b))`), then the bias, then the activation; tiles only
//!   decide which thread does which output. No activation or RELU: the register-tiled kernels of
//!   `shaders/include/gemm.glsl` (one compiled shader per [`GemmTile`] and tier; the hardware
//!   flush of the strict one is a specialization constant); in the fast tier with FMA (the same
//!   bits run to run, not the CPU's). GELU: the same kernel with the bias, then UNARY's GELU over
//!   the output in place (`act(add(acc, bias))` either way: the strict GELU of what it stored).
//!   Large fast-tier matmuls on devices with bf16 cooperative matrices take
//!   [`matmul_split_bf16`] instead (three bf16 pieces an operand: an f32 GEMM's accuracy, not
//!   the FMA kernel's bits).
//! - the row kernels (`shaders/{softmax,layernorm,rmsnorm}.comp` and their one-pass forms) follow the fixed
//!   256-lane tree of `numerics::reduce` (`shaders/include/rowtree.glsl`): lane `j` accumulates
//!   elements `j, j+256, ...` in order, then the halving levels 128..1. A row is shared by
//!   `T` threads (a power of two, 1..=256; `256 / T` rows per workgroup); each thread folds its
//!   lanes into the subtree the halving would have built, and the last `log2 T` levels run in
//!   shared memory. Every `T` gives the same bits; the launchers pick it from the row length
//!   (short rows: several rows per workgroup). REDUCE has its own kernels (`reduce` below).
//!
//! Every workgroup handles one group of rows or one output tile, and the grid (x, then y, then
//! z, each at most 65535) covers them all. No invocation runs long loops: lavapipe silently ends
//! every loop of an invocation after 65535 loop iterations in all (see rowtree.glsl), so the
//! shaders unroll their element loops, a matmul over a long `k` is split into dispatches of
//! [`GEMM_K_SPAN`] there, and [`loop_iterations`] bounds what a row kernel may ask of one thread.
//! The `*_with` variants take a [`Tuning`] (tests, benchmarks); no tuning changes a result bit.
//!
//! Operands are slices of f32 words bound at their own offsets; binding 0 is the destination,
//! then the sources in the order of the signature. An absent optional operand is replaced by
//! another bound slice and a flag in the push constants. Every slice must hold exactly the
//! tensor's bytes. Nothing is recorded for an empty output. Shapes have at most [`MAX_RANK`]
//! axes, every tensor fewer than 2^31 elements (the shaders index with 32-bit words), and rows
//! of the row kernels at most [`MAX_ROW`] elements (the verifier's limit on reduced rows, where
//! every executor converts the length to f32 exactly).

use std::sync::Arc;

use crate::exec::cpu::reference::{self, MatmulShape};
use crate::exec::vulkan::coopmat2::Coopmat2;
use crate::exec::vulkan::ops::data;
use crate::exec::vulkan::{Binding, Buffer, Kernel, Kernels, Recorder, Slice, VulkanError};
use crate::isa::{Act, BlockFormat, DType, Tier};

mod reduce;
pub use reduce::{reduce, reduce_in, reduce_partials, reduce_with, REDUCE_MIN_SEGMENT};

/// Most axes a tensor of these kernels may have.
pub const MAX_RANK: usize = 8;

/// Longest row of the row kernels (the reduced axis of a reduction).
pub const MAX_ROW: usize = 1 << 24;

/// The `k` one dispatch of the register-tiled GEMM covers on a CPU device (lavapipe; the
/// shader's loops run several iterations per k there): shaders/include/gemm.glsl `GEMM_K_SPAN`.
pub const GEMM_K_SPAN: u64 = 2048;

/// Every span of k a register-tiled GEMM dispatch covers is a multiple of this (the largest
/// chunk, `bk`, of any [`GemmTile`]): each dispatch but the last runs whole chunks, and the
/// next starts where the aligned (vec4) loads may read.
pub const GEMM_SPAN_QUANTUM: u64 = 32;

/// The `k` one dispatch of the register-tiled GEMM covers on `info`'s device: [`GEMM_K_SPAN`]
/// on a CPU implementation, whose loop limit it respects; on a GPU the whole `k` at once, so
/// no dispatch stores partial sums that the next reads back (measured on an H100 at 4096^2,
/// fast tier: 36.1 -> 36.4 TFLOP/s, strict 20.7 -> 20.8).
pub fn gemm_k_span(info: &crate::exec::vulkan::DeviceInfo) -> u64 {
    if info.device_type == "CPU" {
        GEMM_K_SPAN
    } else {
        u64::from(u32::MAX)
    }
}

/// Most elements of one tensor (the shaders index with u32 and add tile offsets past the end).
const MAX_ELEMS: u64 = (1 << 31) - 1;

/// Workgroups per grid dimension that every launch stays within.
const MAX_GROUPS: u32 = 65535;

/// The geometry of the register-tiled GEMM kernels (shaders/include/gemm.glsl; one compiled
/// shader per geometry and tier, shaders/gemm_{strict,fast}_BMxBNxBK_TMxTN.comp): a workgroup of
/// `(bm / tm) * (bn / tn)` threads computes a `bm` x `bn` output tile, staging `bk` of k at a
/// time; each thread owns `tm` x `tn` outputs. No choice changes a result bit (every output
/// still sums k ascending).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmTile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub tm: u32,
    pub tn: u32,
}

impl GemmTile {
    /// 128x128 tiles, 8x4 outputs a thread (512 threads): the largest outputs. A third less
    /// global and shared-memory staging per multiply-add than [`GemmTile::LARGE`]; one
    /// workgroup fills an NVIDIA multiprocessor's registers. 33 KiB of shared memory: not on
    /// lavapipe.
    pub const HUGE: GemmTile = GemmTile { bm: 128, bn: 128, bk: 16, tm: 8, tn: 4 };
    /// [`GemmTile::HUGE`] staged 32 of k at a time through one shared buffer: half the loop's
    /// overhead (loads, stores, barriers) per multiply-add, two barriers a chunk.
    pub const HUGE_DEEP: GemmTile = GemmTile { bm: 128, bn: 128, bk: 32, tm: 8, tn: 4 };
    /// 128x64 tiles, 8x4 outputs a thread: large outputs.
    pub const LARGE: GemmTile = GemmTile { bm: 128, bn: 64, bk: 16, tm: 8, tn: 4 };
    /// 64x64 tiles staged 32 of k at a time, 4x4 a thread: smaller outputs (more workgroups to
    /// spread over the device).
    pub const SMALL: GemmTile = GemmTile { bm: 64, bn: 64, bk: 32, tm: 4, tn: 4 };
    /// [`GemmTile::SMALL`] staged 16 of k at a time: within 32 KiB of shared memory (lavapipe).
    pub const COMPACT: GemmTile = GemmTile { bm: 64, bn: 64, bk: 16, tm: 4, tn: 4 };
    /// 64x32 tiles staged 16 of k at a time, 4x4 a thread (128 threads), for products at most
    /// 32 columns wide (attention's product with V, one head of 32 at a time), where a 64- or
    /// 128-wide tile computes half or three quarters padding. On the H100 (GPU timestamps, µs
    /// a layer), MiniLM's product with V on 128x128 tiles took 263 at B=128 and 84 at B=32
    /// (6.2 TFLOP/s at B=128; PyTorch's cuBLAS 68 on 128x32 tiles), on 128x64 tiles 149 and 63,
    /// on these 94 and 36.
    pub const NARROW: GemmTile = GemmTile { bm: 64, bn: 32, bk: 16, tm: 4, tn: 4 };
    /// Every compiled geometry (shaders/gemm_{strict,fast}_BMxBNxBK_TMxTN.comp), largest first.
    pub const ALL: [GemmTile; 6] = [
        GemmTile::HUGE_DEEP,
        GemmTile::HUGE,
        GemmTile::LARGE,
        GemmTile::SMALL,
        GemmTile::COMPACT,
        GemmTile::NARROW,
    ];

    /// Threads per workgroup.
    pub fn threads(&self) -> u32 {
        (self.bm / self.tm.max(1)) * (self.bn / self.tn.max(1))
    }

    /// Shared buffers of each operand the kernel stages k through: two where both fit in 48
    /// KiB (NVIDIA's workgroup limit), else one (and a second barrier a chunk).
    /// shaders/include/gemm.glsl's GEMM_STAGES states the same rule.
    pub fn stages(&self) -> u64 {
        if self.staged_bytes(2) <= 48 << 10 {
            2
        } else {
            1
        }
    }

    /// Shared memory the kernel declares ([`GemmTile::stages`] buffers of each operand, a vec4
    /// of padding per staged row, two flag words).
    pub fn shared_bytes(&self) -> u64 {
        self.staged_bytes(self.stages())
    }

    fn staged_bytes(&self, stages: u64) -> u64 {
        stages * u64::from(self.bk) * (u64::from(self.bm + 4) + u64::from(self.bn + 4)) * 4 + 8
    }

    /// The compiled shader of this geometry in `tier` (None: no shader has it).
    fn shader(&self, tier: Tier) -> Option<&'static str> {
        let GemmTile { bm, bn, bk, tm, tn } = *self;
        let name = format!("gemm_{}_{bm}x{bn}x{bk}_{tm}x{tn}", tier.name());
        crate::exec::vulkan::SHADERS.iter().map(|(n, _)| *n).find(|n| *n == name)
    }

    /// Why the kernel cannot run this geometry on `rec`'s device, if it cannot.
    pub fn unusable(&self, rec: &Recorder) -> Option<String> {
        self.unusable_on(rec.device().info())
    }

    /// Why the kernel cannot run this geometry on the device `info` describes, if it cannot
    /// (lavapipe, for one, gives a workgroup 32 KiB of shared memory, NVIDIA 48).
    pub fn unusable_on(&self, info: &crate::exec::vulkan::DeviceInfo) -> Option<String> {
        let wg = self.threads();
        if self.shader(Tier::Strict).is_none() {
            Some(format!("{self:?} is not one of the compiled geometries {:?}", GemmTile::ALL))
        } else if wg > info.max_compute_workgroup_invocations || wg > info.max_compute_workgroup_size[0] {
            Some(format!(
                "{self:?}: {wg} threads a workgroup; the device allows {}",
                info.max_compute_workgroup_invocations
            ))
        } else if self.shared_bytes() > u64::from(info.max_compute_shared_memory) {
            Some(format!(
                "{self:?}: {} bytes of shared memory; the device allows {}",
                self.shared_bytes(),
                info.max_compute_shared_memory
            ))
        } else {
            None
        }
    }

    /// Parses `BMxBNxBK/TMxTN` (e.g. `128x128x8/8x8`).
    pub fn parse(s: &str) -> Option<GemmTile> {
        let (tile, thread) = s.trim().split_once('/')?;
        let nums = |x: &str| -> Option<Vec<u32>> { x.split('x').map(|v| v.trim().parse().ok()).collect() };
        match (nums(tile)?.as_slice(), nums(thread)?.as_slice()) {
            (&[bm, bn, bk], &[tm, tn]) => Some(GemmTile { bm, bn, bk, tm, tn }),
            _ => None,
        }
    }

    /// The tile for a matmul of `tiles_of(tile)` output tiles: `ADEADVM_GEMM_TILE`
    /// (`BMxBNxBK/TMxTN`, one of [`GemmTile::ALL`], for tuning experiments; ignored unless the
    /// device can run it), else [`GemmTile::NARROW`] for products at most its width (`n`
    /// columns), else [`GemmTile::HUGE_DEEP`] when it still gives at least
    /// [`HUGE_MIN_TILES`] workgroups, else [`GemmTile::LARGE`] from [`LARGE_MIN_TILES`], else
    /// [`GemmTile::SMALL`], else (not enough shared memory) [`GemmTile::COMPACT`]. Measured on
    /// an H100 (driver 580, TFLOP/s at 1024^2 and 4096^2, fast and strict): LARGE 25.8/33.5 and
    /// 16.5/20.2, SMALL 27.1/29.1 and 18.1/19.3, COMPACT 24.5/26.0 and 17.3/18.3; 8x8 outputs a
    /// thread (128x128, 128x64, 64x128 tiles, k by 8 or 16, fully unrolled or not) and 64x128
    /// tiles of 4x8 did no better. Session 6, whole tiles (ALIGNED): HUGE 33.8 fast and 20.1
    /// strict at 2048^2 (LARGE 31.6 and 19.6), 36.0 and 20.7 at 4096^2 (LARGE 35.1 and 20.5).
    /// HUGE_DEEP against HUGE on an H200 (driver 580, fast and strict, TFLOP/s): 2048^2 34.7
    /// and 21.3 against 34.0 and 20.1, 4096^2 36.6 and 22.0 against 36.4 and 20.8, 8192^2 37.1
    /// and 22.2 against 36.8 and 20.8 (the same in a second round). The strict kernel gains
    /// from half the loop's overhead per multiply-add; the fast one does not, so its limit is
    /// inside the unrolled chunk (91% FFMA in the driver's code, benches/peak.py: 57% of the
    /// FFMA ceiling).
    fn chosen(rec: &Recorder, n: u64, tiles_of: impl Fn(GemmTile) -> u64) -> GemmTile {
        static FORCED: std::sync::OnceLock<Option<GemmTile>> = std::sync::OnceLock::new();
        let forced = FORCED.get_or_init(|| {
            let s = std::env::var("ADEADVM_GEMM_TILE").ok()?;
            let tile = GemmTile::parse(&s);
            if tile.is_none() {
                eprintln!(
                    "adeadvm: ignoring ADEADVM_GEMM_TILE={s:?}: not BMxBNxBK/TMxTN (e.g. 128x64x16/8x4)"
                );
            }
            tile
        });
        if let Some(t) = *forced {
            match t.unusable(rec) {
                None => return t,
                Some(why) => {
                    static WARNED: std::sync::Once = std::sync::Once::new();
                    WARNED.call_once(|| eprintln!("adeadvm: ignoring ADEADVM_GEMM_TILE: {why}"));
                }
            }
        }
        let usable = |t: &GemmTile| t.unusable(rec).is_none();
        if n <= u64::from(GemmTile::NARROW.bn) && usable(&GemmTile::NARROW) {
            return GemmTile::NARROW;
        }
        if usable(&GemmTile::HUGE_DEEP) && tiles_of(GemmTile::HUGE_DEEP) >= HUGE_MIN_TILES {
            return GemmTile::HUGE_DEEP;
        }
        if usable(&GemmTile::LARGE) && tiles_of(GemmTile::LARGE) >= LARGE_MIN_TILES {
            return GemmTile::LARGE;
        }
        [GemmTile::SMALL, GemmTile::COMPACT].into_iter().find(usable).unwrap_or(GemmTile::COMPACT)
    }

    /// The compiled shader of this geometry for `tier` on `k`'s device, with its
    /// specialization constants: HW_FTZ (strict tier only), ALIGNED where `aligned` says
    /// that no load of the matmul needs a bounds check ([`MatmulPlan::aligned_to`]), and the
    /// `k` one dispatch covers.
    fn kernel(
        &self,
        k: &Kernels,
        tier: Tier,
        aligned: bool,
        k_span: u64,
    ) -> Result<Arc<Kernel>, VulkanError> {
        let name = self.shader(tier).ok_or_else(|| invalid(format!("{self:?}: no such GEMM shader")))?;
        let hw_ftz = match tier {
            Tier::Fast => false,
            Tier::Strict => strict_gemm_hw_ftz(k),
        };
        let k_span = u32::try_from(k_span).unwrap_or(u32::MAX);
        k.specialized(name, &[u32::from(hw_ftz), u32::from(aligned), k_span])
    }
}

/// Output tiles from which [`GemmTile::LARGE`] is chosen: about three workgroups for each of an
/// H100's 132 multiprocessors (at 2048^2, 512 tiles, it ran 15% faster than SMALL; at 1024^2,
/// 128 tiles, 5% slower).
const LARGE_MIN_TILES: u64 = 384;

/// Output tiles from which [`GemmTile::HUGE_DEEP`] is chosen (one workgroup a multiprocessor at a
/// time: two waves on an H100 or H200 at 256). At 2048^2 (256 tiles) it ran 2% (fast) and 6%
/// (strict) faster than LARGE on an H200; at 1024^2 (64 tiles) 40% slower.
const HUGE_MIN_TILES: u64 = 256;

/// Rows the one-pass row kernels take (SOFTMAX, LAYERNORM and RMSNORM, both tiers): from
/// [`ONE_PASS_ROW_MIN`] elements to [`ONE_PASS_ROW_MAX`] (64 elements a thread in registers,
/// shaders/include/fastrow.glsl and strictrow.glsl; the fast tier's to [`FAST_ONE_PASS_ROW_MAX`]
/// where a workgroup takes 1024 threads). With as few threads a row as hold it
/// ([`RowOp::one_pass_kernel`]) they ran faster than the tree kernels at every length measured
/// on the H100. GB/s, fast tier (against the strict tree kernel, which it ran for short rows
/// before): SOFTMAX over rows of 4 1074 against 499, 16 2450 / 456, 128 3048 / 404; LAYERNORM
/// over rows of 768 3121 against 1365. Strict tier, against what ran before (the tree kernel below
/// rows of 48, 64 threads a row up to 256): SOFTMAX over rows of 4 1654 against 500, 32 1618 /
/// 435, 64 1565 / 486, 128 1524 / 962; LAYERNORM over rows of 32 1365 / 310; RMSNORM over rows
/// of 32 2175 / 478.
pub const ONE_PASS_ROW_MIN: u64 = 1;
/// See [`ONE_PASS_ROW_MIN`].
pub const ONE_PASS_ROW_MAX: u64 = 64 * 256;
/// The fast tier's one-pass kernels take rows up to this many elements on devices whose
/// workgroups take 1024 threads (32 elements a thread, a workgroup a row; others stop at
/// [`ONE_PASS_ROW_MAX`]). 64 elements a thread on 1024 threads would need more registers than
/// a multiprocessor has (65536 on NVIDIA's), and the strict tier's lanes spread a row over at
/// most 256 threads. Against the tree kernel, which reads the row once a pass, on the H100 over
/// 4096 rows of 32768, GB/s: fast SOFTMAX 1112 -> 2273, LAYERNORM 1330 -> 2958, RMSNORM 1907
/// -> 2987; softmax over rows of 20000 1074 -> 2325. The driver gives the kernels 64 registers
/// a thread (1024 threads: all a multiprocessor has).
pub const FAST_ONE_PASS_ROW_MAX: u64 = 32 * 1024;

/// Most merged batch axes the matmul push constants carry.
const MATMUL_BATCH_AXES: usize = 6;

/// Loop iterations the launchers allow one invocation (lavapipe stops at 65535; the count in
/// [`loop_iterations`] is an upper bound, and this leaves room besides).
const LOOP_BUDGET: u64 = 60_000;

/// rowtree.glsl `TREE_UNROLL`.
const TREE_UNROLL: u64 = 8;

fn invalid(msg: impl Into<String>) -> VulkanError {
    VulkanError::Invalid(msg.into())
}

/// Elements of `shape` (at most [`MAX_RANK`] axes, fewer than 2^31 elements).
fn elements(what: &str, shape: &[usize]) -> Result<u64, VulkanError> {
    if shape.len() > MAX_RANK {
        return Err(invalid(format!("{what}: shape {shape:?} has {} axes; at most {MAX_RANK}", shape.len())));
    }
    let n = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
    match n {
        Some(n) if n <= MAX_ELEMS => Ok(n),
        _ => Err(invalid(format!("{what}: shape {shape:?} has 2^31 or more elements"))),
    }
}

/// `s` must hold exactly `elems` f32 words.
fn check_len(what: &str, s: &Slice, elems: u64) -> Result<(), VulkanError> {
    if s.len != elems * 4 {
        return Err(invalid(format!(
            "{what}: a slice of {} bytes for {elems} f32 elements ({} bytes)",
            s.len,
            elems * 4
        )));
    }
    Ok(())
}

/// Casts a size already checked against [`MAX_ELEMS`].
fn w(v: u64) -> u32 {
    debug_assert!(v <= u64::from(u32::MAX));
    v as u32
}

/// How a launch spreads its work over the GPU. No setting changes a result bit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tuning {
    /// Threads sharing one row in the row kernels: a power of two from 1 to 256. None picks
    /// from the row length. A choice whose loops [`loop_iterations`] counts past the budget
    /// is refused.
    pub threads_per_row: Option<u32>,
    /// Most workgroups along the grid's x dimension (at least 1); the grid grows along y and z
    /// for the rest. None: 65535, or the device's limit if lower.
    pub max_groups_x: Option<u32>,
    /// The register-tiled matmul's geometry; None picks by shape. One the device cannot run is
    /// refused.
    pub gemm: Option<GemmTile>,
    /// The `k` one dispatch of the register-tiled matmul covers, rounded down to a multiple of
    /// [`GEMM_SPAN_QUANTUM`] (at least one); None: [`gemm_k_span`]. Past the device's loop
    /// limit (lavapipe) results are undefined.
    pub gemm_k_span: Option<u64>,
}

/// A grid of at least `groups` workgroups: x up to its cap, then y, then z (each within the
/// device's limits and 65535). The shaders number the workgroups x fastest and skip the spares.
pub(crate) fn grid(rec: &Recorder, tuning: &Tuning, groups: u64) -> Result<[u32; 3], VulkanError> {
    let lim = rec.device().info.max_compute_workgroup_count.map(|l| u64::from(l.clamp(1, MAX_GROUPS)));
    let x = groups.clamp(1, lim[0].min(u64::from(tuning.max_groups_x.unwrap_or(u32::MAX)).max(1)));
    let rest = groups.div_ceil(x);
    let y = rest.clamp(1, lim[1]);
    let z = rest.div_ceil(y).max(1);
    if z > lim[2] {
        return Err(invalid(format!(
            "{groups} workgroups do not fit a grid of {lim:?} (at most {x} along x)"
        )));
    }
    Ok([x as u32, y as u32, z as u32])
}

/// An upper bound on the loop iterations one invocation of a row kernel runs (rowtree.glsl):
/// `reductions` trees and `elem_loops` per-element passes over a row of `n` elements shared by
/// `1 << tbits` threads. Each thread owns `R = 256 >> tbits` lanes of `ceil(n / 256)`
/// elements, walked `TREE_UNROLL` at a time plus a remainder, with the binary-counter fold and
/// the shared levels around them; a loop that runs `i` times costs `i + 1`.
pub fn loop_iterations(n: u64, tbits: u32, reductions: u64, elem_loops: u64) -> u64 {
    let lanes = 256u64 >> tbits;
    let per_lane = n.div_ceil(256);
    // p loop + (unrolled + remainder + their exits) per lane + trailing-ones loop per leaf.
    let tree = lanes * (1 + per_lane / TREE_UNROLL + TREE_UNROLL + 1 + 2) + u64::from(tbits) + 2;
    let per_elem = n.div_ceil(1 << tbits) / TREE_UNROLL + TREE_UNROLL + 1;
    // The mask's row offset (softmax) and other fixed loops.
    reductions * tree + elem_loops * per_elem + 16
}

/// The threads sharing one row (as log2) for rows of `n` whose kernel runs `reductions`
/// trees and `elem_loops` element passes: `tuning.threads_per_row` if given (refused past the
/// loop budget), else enough threads that every lane holding data has its own thread (rows of
/// up to 256 elements) but no more, so short rows pack many to a workgroup; longer rows about
/// 16 elements a thread, from 32 to 256 threads (each halving of the threads saves a level of
/// the tree's shared-memory barriers: measured on an H100, strict LAYERNORM over rows of 1024
/// ran at 190 GB/s with 256 threads, 450 with 64, 524 with 32; SOFTMAX over rows of 1024 at
/// 280, 381 and 280, over rows of 4096 at 594, 620 and 490); a strided row
/// (`inner > 1` in a reduction) of at least 256 elements with many outputs gets a thread per
/// output where the budget allows, so neighbouring threads read neighbouring words (shorter
/// rows would leave most of that thread's 256 lanes empty).
fn row_tbits(
    tuning: &Tuning,
    rows: u64,
    n: u64,
    strided: bool,
    (reductions, elem_loops): (u64, u64),
) -> Result<u32, VulkanError> {
    let fits = |tbits: u32| loop_iterations(n, tbits, reductions, elem_loops) <= LOOP_BUDGET;
    let tbits = match tuning.threads_per_row.or_else(row_threads_env) {
        Some(t) if t.is_power_of_two() && t <= 256 => t.trailing_zeros(),
        Some(t) => return Err(invalid(format!("{t} threads per row; a power of two from 1 to 256"))),
        None if strided && rows >= 4096 && n >= 256 && fits(0) => 0,
        None if n <= 256 => n.max(1).next_power_of_two().trailing_zeros(),
        None => n.div_ceil(16).next_power_of_two().clamp(32, 256).trailing_zeros(),
    };
    if !fits(tbits) {
        return Err(invalid(format!(
            "{} threads per row of {n} elements would run about {} loop iterations per thread; \
             lavapipe stops at 65535 (use more threads per row)",
            1u32 << tbits,
            loop_iterations(n, tbits, reductions, elem_loops)
        )));
    }
    Ok(tbits)
}

/// `ADEADVM_ROW_THREADS`: threads per row for the row kernels where the caller's [`Tuning`]
/// leaves it open (a tuning aid; no choice changes a result bit).
fn row_threads_env() -> Option<u32> {
    static ROW_THREADS: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *ROW_THREADS.get_or_init(|| {
        let s = std::env::var("ADEADVM_ROW_THREADS").ok()?;
        let t = s.trim().parse::<u32>().ok().filter(|t| t.is_power_of_two() && *t <= 256);
        if t.is_none() {
            eprintln!("adeadvm: ignoring ADEADVM_ROW_THREADS={s:?}: not a power of two from 1 to 256");
        }
        t
    })
}

/// `ADEADVM_GEMM_K_SPAN`: the k one register-tiled GEMM dispatch covers where the caller's
/// [`Tuning`] leaves it open (a tuning aid; no choice changes a result bit).
fn gemm_k_span_env() -> Option<u64> {
    static K_SPAN: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *K_SPAN.get_or_init(|| {
        let s = std::env::var("ADEADVM_GEMM_K_SPAN").ok()?;
        let span = s.trim().parse::<u64>().ok().filter(|&n| n >= GEMM_SPAN_QUANTUM);
        if span.is_none() {
            eprintln!("adeadvm: ignoring ADEADVM_GEMM_K_SPAN={s:?}: not a whole number of at least {GEMM_SPAN_QUANTUM}");
        }
        span
    })
}

/// Rows of a row kernel must be at most [`MAX_ROW`] long.
fn check_row(what: &str, n: u64) -> Result<(), VulkanError> {
    if n > MAX_ROW as u64 {
        return Err(invalid(format!("{what}: rows of {n} elements; at most 2^24")));
    }
    Ok(())
}

/// One dispatch of a row kernel over `rows` rows with `256 >> tbits` rows per workgroup.
fn dispatch_rows(
    rec: &mut Recorder,
    tuning: &Tuning,
    kernel: &Arc<Kernel>,
    bindings: &[Binding],
    push: &[u32],
    rows: u64,
    tbits: u32,
) -> Result<(), VulkanError> {
    let groups = grid(rec, tuning, rows.div_ceil(256 >> tbits))?;
    rec.dispatch(kernel, bindings, push, groups)
}

/// MATMUL: `dst = act(op(a) @ op(b) + bias)`, exactly `reference::matmul`.
///
/// `g` gives the stored shapes of `a`, `b` and the output and the transposes: `op(a)` is
/// `[.., m, k]` (`a` stored `[.., k, m]` when `ta`), `op(b)` is `[.., k, n]` (`b` stored
/// `[.., n, k]` when `tb`), the output `[.., m, n]`. The batch axes (all but the last two)
/// broadcast numpy-style: `a` and `b` may have different ranks, and each output batch axis must
/// be the broadcast of theirs. The bias, if any, broadcasts to the whole output shape (`[n]`,
/// `[m, 1]`, the full shape, ...). `act` is applied last, as `reference::activate`.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    k: &Kernels,
    rec: &mut Recorder,
    g: &MatmulShape,
    act: Act,
    tier: Tier,
    dst: &Slice,
    a: &Slice,
    b: &Slice,
    bias: Option<(&Slice, &[usize])>,
) -> Result<(), VulkanError> {
    matmul_with(k, rec, g, act, tier, dst, a, b, bias, &Tuning::default())
}

/// [`matmul`] with a [`Tuning`] (`max_groups_x` and `gemm` apply).
#[allow(clippy::too_many_arguments)]
pub fn matmul_with(
    k: &Kernels,
    rec: &mut Recorder,
    g: &MatmulShape,
    act: Act,
    tier: Tier,
    dst: &Slice,
    a: &Slice,
    b: &Slice,
    bias: Option<(&Slice, &[usize])>,
    tuning: &Tuning,
) -> Result<(), VulkanError> {
    let plan = MatmulPlan::checked(g, dst, a, b, bias)?;
    if plan.out_elems == 0 {
        return Ok(());
    }
    // GELU runs after the GEMM ([`gelu_after`]).
    let act_code = match act {
        Act::None | Act::Gelu => 0u32,
        Act::Relu => 1,
    };
    let tile = match tuning.gemm {
        Some(t) => {
            if let Some(why) = t.unusable(rec) {
                return Err(invalid(why));
            }
            t
        }
        None => GemmTile::chosen(rec, u64::from(plan.n), |t| plan.tiles(t.bm, t.bn)),
    };
    let span =
        tuning.gemm_k_span.or_else(gemm_k_span_env).unwrap_or_else(|| gemm_k_span(rec.device().info()));
    // Every dispatch starts k on a whole chunk, where the aligned loads expect it.
    let span = (span / GEMM_SPAN_QUANTUM).max(1) * GEMM_SPAN_QUANTUM;
    let kernel = tile.kernel(k, tier, plan.aligned_to(g, &tile, 4), span)?;
    let mut push = plan.push_constants(g, act_code, bias.is_some(), 0);
    let bias_slice = bias.map_or(a, |(s, _)| s);
    let bindings = [Binding::write(dst), Binding::read(a), Binding::read(b), Binding::read(bias_slice)];
    let groups = grid(rec, tuning, plan.tiles(u64::from(tile.bm), u64::from(tile.bn)))?;
    // One dispatch per span of k; each resumes the accumulators the previous one stored.
    let mut k_begin = 0u64;
    loop {
        push[28] = w(k_begin);
        rec.dispatch(&kernel, &bindings, &push, groups)?;
        k_begin += span;
        if k_begin >= u64::from(plan.k) {
            break;
        }
    }
    if act == Act::Gelu {
        gelu_after(k, rec, tier, dst, plan.out_elems)?;
    }
    Ok(())
}

/// How [`matmul_split_k`] cuts a fast-tier matmul's k: `slices` spans of `span` (the last may
/// be shorter), and the scratch bytes the partial sums take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitK {
    pub slices: u64,
    pub span: u64,
    pub scratch_bytes: u64,
}

/// Fewest k a split-k span covers, and fewest spans worth cutting k into;
/// `ADEADVM_VULKAN_SPLIT_K_SPAN` (a multiple of 32) sets another span, for tuning. Measured on
/// an H100 (20 dependent MATMULs of one shape a run, warm, µs each unsplit / split): spans of
/// 64 or more, 128x1536x384 94 / 59 (10 spans of 160), 32x4096x1024 207 / 101 (8 of 512),
/// 128x384x1536 56 / 44 (2 of 192); but 128x384^2 37 / 37 (6 of 64) and 256x384^2 41 / 49 (5 of
/// 96): short spans do not pay for the reduction, so k must allow 4 spans of 192.
const SPLIT_K_MIN_SPAN: u64 = 192;
const SPLIT_K_MIN_SLICES: u64 = 4;

fn split_k_min_span() -> u64 {
    static SPAN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SPAN.get_or_init(|| {
        std::env::var("ADEADVM_VULKAN_SPLIT_K_SPAN")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .filter(|&v| v >= GEMM_SPAN_QUANTUM && v.is_multiple_of(GEMM_SPAN_QUANTUM))
            .unwrap_or(SPLIT_K_MIN_SPAN)
    })
}

/// Whether the fast tier's f32 matmul `g` (of `tier`) runs as [`matmul_split_k`] on `k`'s
/// device: where 64x64 output tiles would give fewer workgroups than half the device's
/// multiprocessors (MiniLM's feed-forward output at B=1: 128x384 outputs, 12 workgroups for
/// 132 multiprocessors on an H100, each running all 1536 of k) and k has room for
/// [`SPLIT_K_MIN_SLICES`] spans of at least [`SPLIT_K_MIN_SPAN`], and the output's bytes are
/// whole multiples of 256 (each slice's partial sums start on a buffer offset a binding may
/// take). Not on a CPU device (lavapipe) unless forced;
/// `ADEADVM_VULKAN_SPLIT_K=1` forces it wherever k allows, `0` turns it off.
pub fn split_k_chosen(k: &Kernels, g: &MatmulShape, tier: Tier) -> Option<SplitK> {
    if tier != Tier::Fast {
        return None;
    }
    static FORCED: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let forced = *FORCED.get_or_init(|| crate::exec::env_switch("ADEADVM_VULKAN_SPLIT_K"));
    let info = k.device().info();
    if forced == Some(false) || (forced.is_none() && info.device_type == "CPU") {
        return None;
    }
    let plan = MatmulPlan::new(g, None).ok()?;
    let kk = u64::from(plan.k);
    let min_span = split_k_min_span();
    if !(plan.out_elems * 4).is_multiple_of(256) || kk < SPLIT_K_MIN_SLICES * min_span {
        return None;
    }
    let tiles = plan.tiles(64u64, 64u64);
    let sms = u64::from(info.multiprocessors.unwrap_or(SPLIT_DEFAULT_MULTIPROCESSORS));
    let wanted = if forced == Some(true) { 4 } else { sms / tiles.max(1) };
    if forced.is_none() && 2 * tiles > sms {
        return None;
    }
    let slices = wanted.clamp(SPLIT_K_MIN_SLICES, kk / min_span);
    let span = kk.div_ceil(slices).next_multiple_of(GEMM_SPAN_QUANTUM);
    let slices = kk.div_ceil(span);
    (slices >= 2).then_some(SplitK { slices, span, scratch_bytes: (slices - 1) * plan.out_elems * 4 })
}

/// The fast tier's MATMUL with k cut into `split.slices` spans ([`split_k_chosen`]), for
/// matmuls with too few output tiles to fill the device: every span but the last runs at once
/// on the register-tiled kernel into its own block of `scratch` (`split.scratch_bytes`; the
/// blocks after the first zeroed first, as the kernel resumes from what its destination holds),
/// REDUCE_SUM's kernel adds the blocks into `dst` in order, and the last span resumes from that
/// sum and finishes (bias, activation) as the unsplit kernel's last span does. The same bits run
/// to run, not the unsplit kernel's (the fast tier's contract). `dst` must not overlap `a`,
/// `b` or the bias.
#[allow(clippy::too_many_arguments)]
pub fn matmul_split_k(
    k: &Kernels,
    rec: &mut Recorder,
    g: &MatmulShape,
    act: Act,
    dst: &Slice,
    a: &Slice,
    b: &Slice,
    bias: Option<(&Slice, &[usize])>,
    split: SplitK,
    scratch: &Slice,
) -> Result<(), VulkanError> {
    let plan = MatmulPlan::checked(g, dst, a, b, bias)?;
    let block = plan.out_elems * 4;
    if split.slices < 2
        || scratch.len != split.scratch_bytes
        || split.scratch_bytes != (split.slices - 1) * block
    {
        return Err(invalid(format!(
            "split-k scratch: {split:?} for {} outputs, given {} bytes",
            plan.out_elems, scratch.len
        )));
    }
    let act_code = match act {
        Act::None | Act::Gelu => 0u32,
        Act::Relu => 1,
    };
    let tile = GemmTile::chosen(rec, u64::from(plan.n), |t| plan.tiles(t.bm, t.bn));
    let kernel = tile.kernel(k, Tier::Fast, plan.aligned_to(g, &tile, 4), split.span)?;
    let mut push = plan.push_constants(g, act_code, bias.is_some(), 0);
    let bias_slice = bias.map_or(a, |(s, _)| s);
    let groups = grid(rec, &Tuning::default(), plan.tiles(u64::from(tile.bm), u64::from(tile.bn)))?;
    let blocks: Vec<Slice> = (0..split.slices - 1)
        .map(|j| scratch.buf.slice(scratch.offset + j * block, block))
        .collect::<Result<_, _>>()?;
    if split.slices > 2 {
        let zeroed = scratch.buf.slice(scratch.offset + block, (split.slices - 2) * block)?;
        data::fill(k, rec, &zeroed, ((split.slices - 2) * plan.out_elems) as usize, 0)?;
    }
    for (j, y) in blocks.iter().enumerate() {
        push[28] = w(j as u64 * split.span);
        let bindings = [Binding::write(y), Binding::read(a), Binding::read(b), Binding::read(bias_slice)];
        rec.dispatch(&kernel, &bindings, &push, groups)?;
    }
    let shape = [(split.slices - 1) as usize, plan.out_elems as usize];
    reduce::reduce_in(
        k,
        rec,
        Tier::Strict,
        reference::Reduce::Sum,
        dst,
        scratch,
        &shape,
        0,
        None,
        &Tuning::default(),
    )?;
    push[28] = w((split.slices - 1) * split.span);
    let bindings = [Binding::write(dst), Binding::read(a), Binding::read(b), Binding::read(bias_slice)];
    rec.dispatch(&kernel, &bindings, &push, groups)?;
    if act == Act::Gelu {
        gelu_after(k, rec, Tier::Fast, dst, plan.out_elems)?;
    }
    Ok(())
}

/// Rows of a from which [`matmul_blocks`] runs the tiled kernel (shaders/matmul_q_tile.comp)
/// rather than the matrix-vector one (shaders/matmul_q_vec.comp, which keeps one accumulator
/// per row in each thread: at most 8).
pub const BLOCKS_VEC_MAX_M: u64 = 8;

/// The k a chunk of shaders/matmul_q_vec.comp (CB blocks): its dispatches start on whole chunks.
const BLOCKS_VEC_CHUNK: u64 = 8 * BlockFormat::BLOCK_ELEMS as u64;

/// The code of `format` in shaders/include/matmul_q.glsl and shaders/gather_q.comp (`FORMAT`).
pub fn block_format_code(format: BlockFormat) -> u32 {
    match format {
        BlockFormat::Q8_0 => 0,
        BlockFormat::Q4_1 => 1,
    }
}

/// MATMUL with a block-quantized `b`: `dst = act(op(a) @ b^T + bias)` where `b` is `[n, k]`
/// (`g.b`, with `g.tb`; `k` a multiple of 32) held as `format`'s blocks, `blocks` their bytes
/// as stored; the bits are those of [`matmul`] over the dequantized f32 matrix
/// (`numerics::quant`), in either tier. `a`, the bias and `dst` are f32 as for [`matmul`], `a`
/// with any batch axes (`b` has none). At most [`BLOCKS_VEC_MAX_M`] rows of a (a batch's):
/// shaders/matmul_q_vec.comp, which reads each block once for all the rows; more:
/// shaders/matmul_q_tile.comp, 64 x 64 output tiles with b's blocks dequantized into shared
/// memory. Where every batch of `a` is contiguous and the bias (if any) is the same for all
/// rows, the batches are taken as rows of one matrix (the same outputs; b read once).
#[allow(clippy::too_many_arguments)]
pub fn matmul_blocks(
    k: &Kernels,
    rec: &mut Recorder,
    g: &MatmulShape,
    act: Act,
    format: BlockFormat,
    dst: &Slice,
    a: &Slice,
    blocks: &Slice,
    bias: Option<(&Slice, &[usize])>,
) -> Result<(), VulkanError> {
    if !g.tb || g.b.len() != 2 {
        return Err(invalid(format!(
            "a block-quantized matmul b must be [N, K] with tb (b {:?}, tb {})",
            g.b, g.tb
        )));
    }
    let qk = BlockFormat::BLOCK_ELEMS;
    let (n, kk) = (g.b[0], g.b[1]);
    if !kk.is_multiple_of(qk) {
        return Err(invalid(format!(
            "a block-quantized matmul b's rows of {kk} values are not whole blocks"
        )));
    }
    let want = (n as u64)
        .checked_mul((kk / qk) as u64)
        .and_then(|b| b.checked_mul(format.block_bytes() as u64))
        .filter(|&b| b <= u64::from(u32::MAX))
        .ok_or_else(|| {
            invalid(format!("b [{n}, {kk}] in {} blocks overflows 32-bit byte offsets", format.name()))
        })?;
    if blocks.len != want {
        return Err(invalid(format!(
            "matmul b: {} bytes of {} blocks where [{n}, {kk}] takes {want}",
            blocks.len,
            format.name()
        )));
    }
    // Batches of a contiguous [.., m, k] a with a bias that is one row ([n]) or none: rows of
    // one [batches * m, k] matrix.
    let merged;
    let g = match bias.map(|(_, s)| s) {
        Some(s) if s.len() > 1 => g,
        _ if !g.ta
            && g.a.len() > 2
            && g.out.len() == g.a.len()
            && g.out[..g.out.len() - 2] == g.a[..g.a.len() - 2] =>
        {
            let rows: usize = g.a[..g.a.len() - 1].iter().product();
            merged =
                MatmulShape { a: vec![rows, kk], b: g.b.clone(), out: vec![rows, n], ta: false, tb: true };
            &merged
        }
        _ => g,
    };
    let plan = MatmulPlan::new(g, bias.map(|(_, s)| s))?;
    check_len("matmul a", a, plan.a_elems)?;
    check_len("matmul destination", dst, plan.out_elems)?;
    if let Some((s, _)) = bias {
        check_len("matmul bias", s, plan.bias_elems)?;
    }
    if plan.out_elems == 0 {
        return Ok(());
    }
    let act_code = match act {
        Act::None | Act::Gelu => 0u32,
        Act::Relu => 1,
    };
    let vec = u64::from(plan.m) <= BLOCKS_VEC_MAX_M;
    let chunk = if vec { BLOCKS_VEC_CHUNK } else { qk as u64 };
    let span = gemm_k_span_env().unwrap_or_else(|| gemm_k_span(rec.device().info()));
    let span = (span / chunk).max(1) * chunk;
    let span32 = u32::try_from(span).unwrap_or(u32::MAX);
    let code = block_format_code(format);
    let (kernel, groups) = if vec {
        (k.specialized("matmul_q_vec", &[code, span32, plan.m])?, plan.tiles(u64::from(plan.m.max(1)), 64u64))
    } else {
        (k.specialized("matmul_q_tile", &[code, span32])?, plan.tiles(64u64, 64u64))
    };
    let mut push = plan.push_constants(g, act_code, bias.is_some(), 0);
    let bias_slice = bias.map_or(a, |(s, _)| s);
    let bindings = [Binding::write(dst), Binding::read(a), Binding::read(blocks), Binding::read(bias_slice)];
    let groups = grid(rec, &Tuning::default(), groups)?;
    let mut k_begin = 0u64;
    loop {
        push[28] = w(k_begin);
        rec.dispatch(&kernel, &bindings, &push, groups)?;
        k_begin += span;
        if k_begin >= u64::from(plan.k) {
            break;
        }
    }
    if act == Act::Gelu {
        gelu_after(k, rec, Tier::Strict, dst, plan.out_elems)?;
    }
    Ok(())
}

/// MATMUL's GELU over the `n` f32 outputs a GEMM kernel stored in `dst` (with the bias, act
/// none), in place: the kernels' finish is reference::activate's argument (the sum, then the
/// bias) and UNARY's strict GELU is reference::activate's GELU, so the bits are those of one
/// kernel doing both. The extra read and write of the output is 1-2% of a 4096^2 SGEMM's time;
/// compiled in, strict_gelu would carry its erf into every GEMM kernel (the 64x64 kernel that
/// took GELU before was kept apart for that: on lavapipe it slowed each workgroup several times).
/// In the cooperative-matrix kernel's epilogue (coopMatPerElementNV) it slowed that kernel too,
/// on an H200 at 4096^2 against this pass in the same run: f16 with GELU 216 -> 99 TFLOP/s, with
/// RELU 283 -> 202 (the same bits, the SPIR-V twice the size).
fn gelu_after(k: &Kernels, rec: &mut Recorder, tier: Tier, dst: &Slice, n: u64) -> Result<(), VulkanError> {
    data::unary(k, rec, reference::Unary::Gelu, tier, dst, dst, n as usize)
}

/// The tier whose register-tiled GEMM kernel [`matmul`] should run for operands that hold
/// `operands` values (widened to f32) in tier `tier`: the fast kernel (one FMA chain per
/// output, k ascending, finished with a canonical NaN like the strict one) where
/// [`numerics::fma_chain_is_dot`](crate::numerics::fma_chain_is_dot) proves it gives the
/// strict bits (f16). Measured on an H200 at 4096^2: strict f16 20.1 -> 34.7 TFLOP/s.
pub fn gemm_tier(tier: Tier, operands: DType) -> Tier {
    if crate::numerics::fma_chain_is_dot(operands) {
        Tier::Fast
    } else {
        tier
    }
}

/// [`matmul`] of 16-bit float operands on workgroup-scope cooperative matrices
/// (shaders/coopmat2_{f16,bf16}.comp), fast tier: `a` and `b` hold `operands` elements (f16 or
/// bf16), `dst` the same (`dst_narrow`) or f32, the bias f32. Act none or relu, and GELU where
/// `dst` is f32 (UNARY's GELU over the output afterwards, before any rounding to 16 bits). Only where
/// [`coopmat_runs`] says so. `restaged[i]`, where given, is scratch of exactly the bytes
/// [`coopmat_restaging`] asks for operand i (a, b): the operand is transposed there first and
/// the kernel reads it from there (None: read as stored, slower where restaging is offered).
#[allow(clippy::too_many_arguments)]
pub fn matmul_coopmat(
    k: &Kernels,
    rec: &mut Recorder,
    g: &MatmulShape,
    act: Act,
    operands: DType,
    dst: &Slice,
    dst_narrow: bool,
    a: &Slice,
    b: &Slice,
    bias: Option<(&Slice, &[usize])>,
    restaged: [Option<&Slice>; 2],
) -> Result<(), VulkanError> {
    let limits = match k.device().coopmat2() {
        Some(limits) if coopmat_runs(k, operands) => limits,
        _ => {
            return Err(invalid(format!(
                "the cooperative-matrix GEMM cannot run on {operands:?} operands on this device"
            )))
        }
    };
    if act == Act::Gelu && dst_narrow {
        return Err(invalid(
            "the cooperative-matrix GEMM takes GELU only with an f32 output (the output rounds once, after it)",
        ));
    }
    // Operands restaged into the layout the kernel reads fastest (a as [.., M, K], b as
    // [.., N, K]): the geometry the kernel runs, with the same element counts as `g`.
    let want = coopmat_restaging(g);
    let mut run = g.clone();
    for (i, scratch) in restaged.iter().enumerate() {
        if scratch.is_none() {
            continue;
        }
        if want[i].is_none() {
            return Err(invalid(format!("matmul operand {i} needs no restaging (coopmat_restaging)")));
        }
        let stored = if i == 0 { &mut run.a } else { &mut run.b };
        let r = stored.len();
        stored.swap(r - 2, r - 1);
        if i == 0 {
            run.ta = false;
        } else {
            run.tb = true;
        }
    }
    let plan = MatmulPlan::new(&run, bias.map(|(_, s)| s))?;
    let sized = |what: &str, s: &Slice, bytes: u64| {
        if s.len == bytes {
            Ok(())
        } else {
            Err(invalid(format!("{what}: a slice of {} bytes where {bytes} were expected", s.len)))
        }
    };
    sized("matmul a (16-bit)", a, plan.a_elems * 2)?;
    sized("matmul b (16-bit)", b, plan.b_elems * 2)?;
    sized("matmul destination", dst, plan.out_elems * if dst_narrow { 2 } else { 4 })?;
    if let Some((s, _)) = bias {
        check_len("matmul bias", s, plan.bias_elems)?;
    }
    for (scratch, bytes) in restaged.iter().zip(want) {
        if let (Some(s), Some(bytes)) = (scratch, bytes) {
            sized("matmul restaging scratch", s, bytes)?;
        }
    }
    if plan.out_elems == 0 {
        return Ok(());
    }
    let (mut a, mut b) = (a, b);
    for (i, scratch) in restaged.into_iter().enumerate() {
        let Some(scratch) = scratch else { continue };
        let stored = if i == 0 { &g.a } else { &g.b };
        let r = stored.len();
        let batch: usize = stored[..r - 2].iter().product();
        let operand = if i == 0 { &mut a } else { &mut b };
        data::transpose16(k, rec, scratch, operand, batch, stored[r - 2], stored[r - 1])?;
        *operand = scratch;
    }
    let g = &run;
    let act_code = u32::from(act == Act::Relu);
    let push = plan.push_constants(g, act_code, bias.is_some(), u32::from(dst_narrow) << 5);
    let bias_slice = bias.map_or(a, |(s, _)| s);
    let bindings = [Binding::write(dst), Binding::read(a), Binding::read(b), Binding::read(bias_slice)];
    let (tile, unroll) = coopmat2_tile(limits, |t| plan.tiles(t.bm, t.bn));
    let shape = u32::from(plan.aligned_to(g, &tile, 8)) | u32::from(g.ta) << 1 | u32::from(g.tb) << 2;
    let name = if operands == DType::Bf16 { "coopmat2_bf16" } else { "coopmat2_f16" };
    let kernel = k.specialized(name, &[shape, tile.bm, tile.bn, tile.bk, unroll])?;
    let groups = grid(rec, &Tuning::default(), plan.tiles(tile.bm, tile.bn))?;
    rec.dispatch(&kernel, &bindings, &push, groups)?;
    if act == Act::Gelu {
        gelu_after(k, rec, Tier::Fast, dst, plan.out_elems)?;
    }
    Ok(())
}

/// The output tile, k chunk and unrolling of shaders/include/coopmat2.glsl (its specialization
/// constants 1 to 4; tm and tn unused) for a matmul of `tiles_of(tile)` output tiles:
/// `ADEADVM_COOPMAT2_TILE=BMxBNxBK[/UNROLL]` where the device's granularity and largest
/// dimension allow it (a tuning aid), else [`COOPMAT2_TILE`] where it gives at least
/// [`COOPMAT2_MIN_TILES`] workgroups, else [`COOPMAT2_SMALL_TILE`] (both unrolled by
/// [`COOPMAT2_UNROLL`]), else (neither fits the granularity) the granularity, rolled.
fn coopmat2_tile(limits: Coopmat2, tiles_of: impl Fn(GemmTile) -> u64) -> (GemmTile, u32) {
    let fits = |t: &GemmTile| {
        let [gm, gn, gk] = limits.granularity;
        let dims = [(t.bm, gm), (t.bn, gn), (t.bk, gk)];
        dims.iter().all(|&(d, g)| g > 0 && d > 0 && d % g == 0 && d <= limits.max_dimension)
    };
    static FORCED: std::sync::OnceLock<Option<(GemmTile, u32)>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| {
        let s = std::env::var("ADEADVM_COOPMAT2_TILE").ok()?;
        let (dims, unroll) = s.trim().split_once('/').unwrap_or((s.trim(), "4"));
        let nums: Option<Vec<u32>> = dims.split('x').map(|v| v.trim().parse().ok()).collect();
        let tile = match (nums.as_deref(), unroll.parse::<u32>()) {
            (Some(&[bm, bn, bk]), Ok(u)) if (1..=16).contains(&u) => Some((GemmTile { bm, bn, bk, tm: 0, tn: 0 }, u)),
            _ => None,
        };
        if tile.is_none_or(|(t, _)| !fits(&t)) {
            eprintln!(
                "adeadvm: ignoring ADEADVM_COOPMAT2_TILE={s:?}: not BMxBNxBK[/UNROLL] in multiples of {:?} up to {}, UNROLL 1 to 16",
                limits.granularity, limits.max_dimension
            );
            return None;
        }
        tile
    });
    if let Some(t) = *forced {
        return t;
    }
    if fits(&COOPMAT2_TILE) && tiles_of(COOPMAT2_TILE) >= COOPMAT2_MIN_TILES {
        return (COOPMAT2_TILE, COOPMAT2_UNROLL);
    }
    if fits(&COOPMAT2_SMALL_TILE) {
        return (COOPMAT2_SMALL_TILE, COOPMAT2_UNROLL);
    }
    let [bm, bn, bk] = limits.granularity;
    (GemmTile { bm, bn, bk, tm: 0, tn: 0 }, 1)
}

/// The tile of shaders/include/coopmat2.glsl for large matmuls, with its operands restaged as
/// [`coopmat_restaging`] says (a [M, K], b [N, K]). Measured on an H200 with workgroups of 256
/// (driver 580, f16, TFLOP/s at 4096^2, each a process that compiled its pipeline afresh, the
/// same to 0.5 in repeats; k chunk / chunks a loop iteration): 128x256 by 64/16 254, 64/8 249, 64/4 228,
/// 64/2 205, 64/1 185, 32/16 231, 32/4 212, 16/16 153; 128x128 by 64/16 242, 64/8 233; 256x128
/// by 64/1 172, 64/4 129, 64/8 118, 32/8 221; 64x256 by 64/8 215. At 8192^2: 128x256x64/8 270,
/// /16 279; at 2048^2 186 and 180.
///
/// Workgroups of 128 ([`crate::exec::vulkan::coopmat2::WORKGROUP`]), now, on the same
/// H200 (driver 580, f16, TFLOP/s at 4096^2, fresh processes, each the same to 1% in 2 to 8
/// repeats): 128x128 by 64/4 291 (8192^2 324, 2048^2 217), 64/2 287, 64/8 287 (8192^2 322),
/// 64/1 263, 32/4 221; 256x64 by 64/8 238; 128x64 and 64x128 by 64/8 221 and 220; workgroups of
/// 64: 64x64 by 64/8 206, 128x64 155, 64x128 141-143; of 32 (a subgroup a workgroup): 64x32
/// and 32x64 by 64/8 169-172, 64x64 100-105. In the same runs 128x256x64/8 on 256 gave 251
/// (8192^2 274, 2048^2 189). With 128 a 128x128 tile takes 255 registers a thread, so two
/// workgroups share a multiprocessor (32 KiB of staged operands each, besides the 8 KiB the
/// driver reserves), and one's staging overlaps the other's multiplies.
const COOPMAT2_TILE: GemmTile = GemmTile { bm: 128, bn: 128, bk: 64, tm: 0, tn: 0 };
/// Chunks of k a loop iteration of either tile (the unclamped loop; see above and below).
const COOPMAT2_UNROLL: u32 = 4;
/// The tile for smaller ones. On an H200 with workgroups of 128 at 1024^2 (f16, TFLOP/s, k by 64
/// unrolled by 4): 128x64 94, 64x64 91; 128x64 on 256 gave 94 too. On 256, earlier, on an H100
/// (k by 64 unrolled by 4): at
/// 512^2 256x128 1.5, 128x128 10.2, 128x64 16.1, 64x64 16.9; at 1024^2 35.5, 49.1, 77.0 and
/// 59.1; at 2048^2 (128 tiles of 256x128) 126.6, 95.7, 109.8 and 66.2. On an H200 with the
/// operands restaged, at 1024^2: 128x64 by 4 chunks 89, by 8 94, by 16 93; 64x128 by 8 91;
/// 128x128 by 8 76; 128x256 by 8 49.
const COOPMAT2_SMALL_TILE: GemmTile = GemmTile { bm: 128, bn: 64, bk: 64, tm: 0, tn: 0 };
/// Fewest workgroups of [`COOPMAT2_TILE`] worth taking it (an H100 has 132 multiprocessors).
const COOPMAT2_MIN_TILES: u64 = 128;

/// The bytes of scratch memory [`matmul_coopmat`] takes to restage each operand (a, b) of `g`
/// into the layout its kernel reads fastest, k contiguous: a stored `[.., K, M]` (`ta`) and b
/// stored `[.., K, N]` (not `tb`) are transposed first ([`data::transpose16`]) where both
/// their axes are even and the other operand's outer dimension is at least
/// [`COOPMAT2_RESTAGE_MIN`], so that the transpose (one read and one write of the operand)
/// costs little beside the multiply. Measured on an H200 at 4096^2 (f16, TFLOP/s): b stored
/// [N, K] 178 against 148 for [K, N]; a stored [K, M] 12-56.
pub fn coopmat_restaging(g: &MatmulShape) -> [Option<u64>; 2] {
    let (ra, rb) = (g.a.len(), g.b.len());
    if ra < 2 || rb < 2 {
        return [None, None];
    }
    let (m, n) = (if g.ta { g.a[ra - 1] } else { g.a[ra - 2] }, if g.tb { g.b[rb - 2] } else { g.b[rb - 1] });
    let even = |s: &[usize]| s[s.len() - 1].is_multiple_of(2) && s[s.len() - 2].is_multiple_of(2);
    let bytes = |s: &[usize]| s.iter().map(|&d| d as u64).product::<u64>() * 2;
    [
        (g.ta && even(&g.a) && n >= COOPMAT2_RESTAGE_MIN).then(|| bytes(&g.a)),
        (!g.tb && even(&g.b) && m >= COOPMAT2_RESTAGE_MIN).then(|| bytes(&g.b)),
    ]
}

/// See [`coopmat_restaging`].
pub const COOPMAT2_RESTAGE_MIN: usize = 256;

/// Whether [`matmul_coopmat`] runs on `operands` (f16 or bf16) on `k`'s device (the device has
/// the cooperative matrices).
pub fn coopmat_runs(k: &Kernels, operands: DType) -> bool {
    k.device().has_coopmat(operands)
}

/// The segments of k of [`matmul_split_bf16`]'s bf16 GEMM: (a's piece, b's piece) of the
/// products each sums (0 hi, 1 mid, 2 lo; shaders/sgemm_split_pieces.comp), the smallest first, so that
/// the corrections are summed among themselves before the leading products join them.
pub const SPLIT_SEGMENTS: [(u32, u32); 6] = [(2, 0), (1, 1), (0, 2), (1, 0), (0, 1), (0, 0)];

/// Most scratch bytes [`matmul_split_bf16`] takes (and at most an eighth of the device's memory);
/// a larger matmul runs the register-tiled kernel.
pub const SPLIT_SCRATCH_MAX: u64 = 4 << 30;

/// The `pieces` argument of [`data::split_bf16`] for operand `i` (0: a, 1: b).
fn split_pieces(i: usize) -> u32 {
    SPLIT_SEGMENTS
        .iter()
        .enumerate()
        .map(|(s, &(pa, pb))| (if i == 0 { pa } else { pb }) << (2 * s))
        .fold(0, |acc, v| acc | v)
}

/// The bytes of scratch memory [`matmul_split_bf16`] takes for `g`: a's and b's three bf16
/// pieces (six segments of k, 12 bytes an element), then a word for each row of a and each
/// column of b (their flags). None where it cannot run `g`: k zero or odd, or an operand's
/// pieces past the kernels' 2^31 elements.
pub fn split_scratch(g: &MatmulShape) -> Option<[u64; 4]> {
    let (ra, rb) = (g.a.len(), g.b.len());
    if ra < 2 || rb < 2 {
        return None;
    }
    let k = if g.ta { g.a[ra - 2] } else { g.a[ra - 1] };
    let elems = |s: &[usize]| s.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
    let (na, nb) = (elems(&g.a)?, elems(&g.b)?);
    if k == 0 || !k.is_multiple_of(2) || na.max(nb).checked_mul(6)? > MAX_ELEMS {
        return None;
    }
    let k = k as u64;
    Some([na * 12, nb * 12, na / k * 4, nb / k * 4])
}

/// Whether the fast tier's f32 matmul `g` runs as [`matmul_split_bf16`] on `k`'s device rather
/// than on the register-tiled FMA kernel, and if so the scratch it takes ([`split_scratch`]'s
/// bytes): where the device has bf16 cooperative matrices,
/// [`split_scratch`] allows it within [`SPLIT_SCRATCH_MAX`] and an eighth of the device's
/// memory, and the six bf16 products beat the
/// FMA kernel there ([`split_pays`]); or always (`1`) or never (`0`) with
/// `ADEADVM_VULKAN_SGEMM_SPLIT`.
pub fn split_sgemm_chosen(k: &Kernels, g: &MatmulShape) -> Option<[u64; 4]> {
    let bytes = split_scratch(g)?;
    let device_bytes = k.device().info().device_local_bytes;
    let most = if device_bytes > 0 { SPLIT_SCRATCH_MAX.min(device_bytes / 8) } else { SPLIT_SCRATCH_MAX };
    if !coopmat_runs(k, DType::Bf16) || bytes.iter().sum::<u64>() > most {
        return None;
    }
    static FORCED: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| crate::exec::env_switch("ADEADVM_VULKAN_SGEMM_SPLIT"));
    let pays = match *forced {
        Some(f) => f,
        None => {
            let plan = MatmulPlan::new(g, None).ok()?;
            let sms = k.device().info().multiprocessors.unwrap_or(SPLIT_DEFAULT_MULTIPROCESSORS);
            split_pays(plan.tiles(128u64, 128u64), u64::from(plan.k), u64::from(sms))
        }
    };
    pays.then_some(bytes)
}

/// Whether the split bf16 GEMM beats the FMA kernel on a matmul of `tiles` 128x128 output tiles
/// and `k`, on `sms` multiprocessors: both kernels take 128x128 tiles at these sizes, two
/// workgroups a multiprocessor for the bf16 GEMM and one for the FMA kernel, and a last wave of
/// workgroups that leaves multiprocessors idle costs the bf16 GEMM a whole wave of its six
/// products. Measured on an H200 (132 multiprocessors; TFLOP/s FMA against split, `M x N x K`,
/// 30 MATMULs a run): 4096^2 x 256 31.6 / 28.2, x 512 34.1 / 36.5, x 1024 35.6 / 43.0, x 4096
/// 36.6 / 48.5; 4096 x 1024 x 4096 36.5 / 40.6, 1024 x 4096 x 4096 36.5 / 41.3; 8192 x 3072 x 768
/// 35.2 / 43.2, 8192^2 37.1 / 43.8, 3072^2 32.7 / 39.8, 2048^2 34.7 / 40.8; and where it keeps
/// the FMA kernel: 2048^2 x 512 33.3 / 32.4, 8192 x 768 x 768 34.7 / 28.1, 8192 x 768 x 3072 36.5 /
/// 33.3 (384 tiles: one and a half waves), 2048 x 1024 x 4096 29.8 / 27.6, 2048 x 1024 x 1024 28.5
/// / 25.4, 1024^2 x 4096 29.5 / 17.5, 1280^3 22.7 / 21.5, 1024^2 27.1 / 18.6 (1536^3, 144 tiles,
/// 22.2 / 24.7, is left to the FMA kernel too).
fn split_pays(tiles: u64, k: u64, sms: u64) -> bool {
    // The share of a kernel's waves that are full, with `slots` workgroups running at once.
    let full = |slots: u64| tiles as f64 / (tiles.div_ceil(slots) * slots) as f64;
    let sms = sms.max(1);
    tiles >= SPLIT_MIN_TILES
        && (k >= 1024 || (k >= 512 && tiles >= 2 * SPLIT_MIN_TILES))
        && full(2 * sms) >= 0.8 * full(sms)
}

/// Fewest 128x128 output tiles for which [`split_pays`].
const SPLIT_MIN_TILES: u64 = 256;

/// Multiprocessors assumed where the device does not say (an H100's or H200's).
const SPLIT_DEFAULT_MULTIPROCESSORS: u32 = 132;

/// The fast tier's f32 MATMUL on bf16 cooperative matrices (`g`, `act`, the bias as for
/// [`matmul`]; f32 `a`, `b` and `dst`, which must not overlap either operand). Each operand is
/// cut into three bf16 pieces whose sum is exactly it ([`data::split_bf16`]), and one bf16 GEMM
/// over six segments of k ([`SPLIT_SEGMENTS`]) sums every product of pieces but the three
/// smallest, which are at most 2^-23 |a·b| together (an f32 product alone rounds by up to
/// 2^-24 |a·b|), not the bits of the FMA kernel. The tensor cores' f32 sums truncate where FMA
/// rounds to nearest: on an H100 at 4096^3 (standard normal operands, benches/sgemm_accuracy.py)
/// the error relative to Σ|a·b| was 1.08e-7 root mean square and 8.1e-7 at most, against the
/// FMA kernel's and cuBLAS's 2.81e-8 and 3.85e-7. A last pass (shaders/sgemm_split_finish.comp)
/// sums again, by FMA in f32, every output of a row of a or column of b holding an inf, a NaN or
/// a normal float below 2^-103 (whose pieces are not exact: the first pass flags them), and
/// every output that came out inf or NaN; then it adds the bias and the activation as the FMA
/// kernel's finish does; GELU runs after it. `scratch` holds [`split_scratch`]'s bytes, in its
/// order. The same bits run to run on one device and driver.
#[allow(clippy::too_many_arguments)]
pub fn matmul_split_bf16(
    k: &Kernels,
    rec: &mut Recorder,
    g: &MatmulShape,
    act: Act,
    dst: &Slice,
    a: &Slice,
    b: &Slice,
    bias: Option<(&Slice, &[usize])>,
    scratch: [&Slice; 4],
) -> Result<(), VulkanError> {
    let Some(bytes) = split_scratch(g) else {
        MatmulPlan::new(g, bias.map(|(_, s)| s))?;
        return Err(invalid(format!(
            "the split bf16 GEMM takes an even k and operands of fewer than 2^31 / 6 elements (a {:?}, b {:?})",
            g.a, g.b
        )));
    };
    let plan = MatmulPlan::checked(g, dst, a, b, bias)?;
    for (s, want) in scratch.iter().zip(bytes) {
        if s.len != want {
            return Err(invalid(format!(
                "split bf16 scratch: a slice of {} bytes where {want} were expected",
                s.len
            )));
        }
    }
    if plan.out_elems == 0 {
        return Ok(());
    }
    let (m, n, kk) = (plan.m as usize, plan.n as usize, plan.k as usize);
    // The pieces: a as [.., M, 6K], b as [.., N, 6K] (k contiguous on both, as the
    // cooperative-matrix kernel reads fastest).
    let mut split = g.clone();
    for (i, src) in [a, b].into_iter().enumerate() {
        let (stored, rows, transposed) = if i == 0 { (&g.a, m, g.ta) } else { (&g.b, n, !g.tb) };
        let r = stored.len();
        let batch: usize = stored[..r - 2].iter().product();
        let (out, flags) = (scratch[i], scratch[2 + i]);
        data::fill(k, rec, flags, batch * rows, 0)?;
        data::split_bf16(k, rec, out, flags, src, batch, rows, kk, transposed, split_pieces(i))?;
        let shape = if i == 0 { &mut split.a } else { &mut split.b };
        shape[r - 2] = rows;
        shape[r - 1] = 6 * kk;
    }
    split.ta = false;
    split.tb = true;
    matmul_coopmat(
        k,
        rec,
        &split,
        Act::None,
        DType::Bf16,
        dst,
        false,
        scratch[0],
        scratch[1],
        None,
        [None, None],
    )?;
    let act_code = u32::from(act == Act::Relu);
    let push = plan.push_constants(g, act_code, bias.is_some(), 0);
    let bias_slice = bias.map_or(a, |(s, _)| s);
    let bindings = [
        Binding::write(dst),
        Binding::read(a),
        Binding::read(b),
        Binding::read(bias_slice),
        Binding::read(scratch[2]),
        Binding::read(scratch[3]),
    ];
    let groups = grid(rec, &Tuning::default(), plan.out_elems.div_ceil(256))?;
    rec.dispatch(&k.get("sgemm_split_finish")?, &bindings, &push, groups)?;
    if act == Act::Gelu {
        gelu_after(k, rec, Tier::Fast, dst, plan.out_elems)?;
    }
    Ok(())
}

/// Whether the strict GEMM may leave flushing its sums to the hardware on this device (the
/// `HW_FTZ` constant of shaders/include/gemm.glsl): probed once per device by running the
/// kernel that way on partial sums that are denormals of both signs, carried on into a further
/// term, and comparing every bit with the CPU reference. Any difference, or a failure to run the
/// probe, keeps the software flush, which is right everywhere.
pub fn strict_gemm_hw_ftz(k: &Kernels) -> bool {
    *k.hw_ftz.get_or_init(|| probe_hw_ftz(k).unwrap_or(false))
}

/// The probe's operands (m = n = 8, k = 3) and geometry.
fn hw_ftz_probe_case() -> (Vec<f32>, Vec<f32>, MatmulShape) {
    // out[i, j] = a[i, 0] b[0, j] + a[i, 1] b[1, j] + 2^-126 with every operand of magnitude
    // >= 2^-63 (the kernel's plain-product path). The first two products sum to
    // 2^-126 ((j - 1)/16 + ij/256): for most (i, j) a denormal of either sign, which the strict
    // rule flushes before the third term is added (giving exactly 2^-126); a device that keeps
    // it gives another number. (The epilogue flushes the final sum, so the probe needs the
    // third term to see what the hardware did in the middle.)
    let (m, n, kk) = (8usize, 8usize, 3usize);
    let p63 = |x: f32| x * f32::from_bits((127 - 63) << 23);
    let a: Vec<f32> = (0..m)
        .flat_map(|i| [p63(1.0 + i as f32 / 16.0), -p63(1.0 + (i + 1) as f32 / 16.0), p63(1.0)])
        .collect();
    let b: Vec<f32> = (0..n)
        .map(|j| p63(1.0 + j as f32 / 16.0))
        .chain((0..n).map(|_| p63(1.0)))
        .chain((0..n).map(|_| p63(1.0)))
        .collect();
    let g = MatmulShape { a: vec![m, kk], b: vec![kk, n], out: vec![m, n], ta: false, tb: false };
    (a, b, g)
}

fn probe_hw_ftz(k: &Kernels) -> Result<bool, VulkanError> {
    let (a, b, g) = hw_ftz_probe_case();
    let (m, n) = (g.out[0], g.out[1]);
    let mut want = vec![0f32; m * n];
    reference::matmul(&g, &a, &b, None, Act::None, &mut want);
    let dev = k.device().clone();
    let mut rec = Recorder::new(&dev)?;
    let upload = |rec: &mut Recorder, v: &[f32]| -> Result<Slice, VulkanError> {
        let s = Arc::new(Buffer::new(&dev, (v.len() * 4) as u64)?).whole();
        rec.upload(&s, bytemuck::cast_slice(v))?;
        Ok(s)
    };
    let (sa, sb) = (upload(&mut rec, &a)?, upload(&mut rec, &b)?);
    let dst = Arc::new(Buffer::new(&dev, (m * n * 4) as u64)?).whole();
    let name = GemmTile::SMALL.shader(Tier::Strict).unwrap_or_default();
    let kernel = k.specialized(name, &[1])?;
    let plan = MatmulPlan::new(&g, None)?;
    let mut push = vec![0u32; 24];
    push.extend([plan.m, plan.n, plan.k, 0, 0, 0, 0]);
    let bindings = [Binding::write(&dst), Binding::read(&sa), Binding::read(&sb), Binding::read(&sa)];
    rec.dispatch(&kernel, &bindings, &push, [1, 1, 1])?;
    let down = rec.download(&dst)?;
    rec.flush()?;
    let mut got = vec![0u8; m * n * 4];
    rec.read(&down, &mut got)?;
    let got: Vec<u32> = bytemuck::pod_collect_to_vec(&got);
    Ok(got.iter().zip(&want).all(|(g, w)| *g == w.to_bits()))
}

/// One merged batch axis of a matmul: its size and each operand's element stride along it
/// (0 where the operand broadcasts).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct BatchAxis {
    dim: u32,
    a: u32,
    b: u32,
    c: u32,
}

impl BatchAxis {
    fn field(&self, i: usize) -> u32 {
        [self.dim, self.a, self.b, self.c][i]
    }
}

/// The validated geometry of one matmul, as the shader's push constants carry it.
#[derive(Debug)]
struct MatmulPlan {
    m: u32,
    n: u32,
    k: u32,
    batches: u32,
    axes: Vec<BatchAxis>,
    bias_sm: u32,
    bias_sn: u32,
    a_elems: u64,
    b_elems: u64,
    bias_elems: u64,
    out_elems: u64,
}

impl MatmulPlan {
    /// The plan of `g`, with the operands' and destination's lengths checked against it.
    fn checked(
        g: &MatmulShape,
        dst: &Slice,
        a: &Slice,
        b: &Slice,
        bias: Option<(&Slice, &[usize])>,
    ) -> Result<MatmulPlan, VulkanError> {
        let plan = MatmulPlan::new(g, bias.map(|(_, s)| s))?;
        check_len("matmul a", a, plan.a_elems)?;
        check_len("matmul b", b, plan.b_elems)?;
        check_len("matmul destination", dst, plan.out_elems)?;
        if let Some((s, _)) = bias {
            check_len("matmul bias", s, plan.bias_elems)?;
        }
        Ok(plan)
    }

    /// Output tiles of `bm` x `bn` over every batch: one workgroup each.
    fn tiles(&self, bm: impl Into<u64>, bn: impl Into<u64>) -> u64 {
        u64::from(self.batches)
            * u64::from(self.m).div_ceil(bm.into())
            * u64::from(self.n).div_ceil(bn.into())
    }

    /// Whether `tile` covers this matmul in whole tiles and whole chunks of k, with both
    /// operands read in runs of `run` elements everywhere (contiguous dimensions and batch
    /// strides multiples of it): the ALIGNED constant of shaders/include/gemm.glsl (vec4s) and
    /// bit 0 of shaders/include/coopmat2.glsl's SHAPE (8 halves), loads without bounds checks.
    fn aligned_to(&self, g: &MatmulShape, tile: &GemmTile, run: u32) -> bool {
        let a_contiguous = if g.ta { self.m } else { self.k };
        let b_contiguous = if g.tb { self.k } else { self.n };
        self.m.is_multiple_of(tile.bm)
            && self.n.is_multiple_of(tile.bn)
            && self.k.is_multiple_of(tile.bk)
            && a_contiguous.is_multiple_of(run)
            && b_contiguous.is_multiple_of(run)
            && self.axes.iter().all(|ax| ax.a.is_multiple_of(run) && ax.b.is_multiple_of(run))
    }

    /// The push constants of shaders/include/matmul_common.glsl (k_begin 0); `extra_flags` are
    /// or-ed into the flags word.
    fn push_constants(&self, g: &MatmulShape, act_code: u32, has_bias: bool, extra_flags: u32) -> Vec<u32> {
        let flags = u32::from(g.ta)
            | u32::from(g.tb) << 1
            | act_code << 2
            | u32::from(has_bias) << 4
            | extra_flags
            | (self.axes.len() as u32) << 8;
        let ax = |i: usize| self.axes.get(i).copied().unwrap_or_default();
        let mut push = Vec::with_capacity(31);
        for field in 0..4 {
            push.extend((0..4).map(|i| ax(i).field(field)));
        }
        push.extend([ax(4).dim, ax(5).dim, ax(4).a, ax(5).a, ax(4).b, ax(5).b, ax(4).c, ax(5).c]);
        push.extend([self.m, self.n, self.k, flags, 0, self.bias_sm, self.bias_sn]);
        push
    }

    fn new(g: &MatmulShape, bias: Option<&[usize]>) -> Result<MatmulPlan, VulkanError> {
        let shapes = format!("a {:?}, b {:?}, output {:?}", g.a, g.b, g.out);
        let (ra, rb, r) = (g.a.len(), g.b.len(), g.out.len());
        if ra < 2 || rb < 2 || r < 2 {
            return Err(invalid(format!("matmul needs operands of rank 2 or more ({shapes})")));
        }
        let a_elems = elements("matmul a", &g.a)?;
        let b_elems = elements("matmul b", &g.b)?;
        let out_elems = elements("matmul output", &g.out)?;
        let (m, ka) = if g.ta { (g.a[ra - 1], g.a[ra - 2]) } else { (g.a[ra - 2], g.a[ra - 1]) };
        let (kb, n) = if g.tb { (g.b[rb - 1], g.b[rb - 2]) } else { (g.b[rb - 2], g.b[rb - 1]) };
        if ka != kb || g.out[r - 2] != m || g.out[r - 1] != n {
            return Err(invalid(format!(
                "matmul shapes do not agree: op(a) is [{m}, {ka}], op(b) [{kb}, {n}], the output ends in {:?} ({shapes}, ta {}, tb {})",
                &g.out[r - 2..],
                g.ta,
                g.tb
            )));
        }
        let nb = r - 2;
        if ra - 2 > nb || rb - 2 > nb {
            return Err(invalid(format!("matmul output has fewer batch axes than an operand ({shapes})")));
        }
        // Batch dims of a and b aligned to the output's (missing leading axes are 1).
        let pad = |s: &[usize], rank: usize| -> Vec<usize> {
            let mut v = vec![1; rank - s.len()];
            v.extend_from_slice(s);
            v
        };
        let a_batch = pad(&g.a[..ra - 2], nb);
        let b_batch = pad(&g.b[..rb - 2], nb);
        for i in 0..nb {
            let (x, y, o) = (a_batch[i], b_batch[i], g.out[i]);
            let want = if x == y || y == 1 {
                x
            } else if x == 1 {
                y
            } else {
                return Err(invalid(format!("matmul batch axes do not broadcast ({shapes})")));
            };
            if o != want {
                return Err(invalid(format!(
                    "matmul output batch axis {i} is {o}; broadcasting a and b gives {want} ({shapes})"
                )));
            }
        }
        let bias_shape = match bias {
            Some(s) => {
                if s.len() > r {
                    return Err(invalid(format!(
                        "matmul bias {s:?} has more axes than the output {:?}",
                        g.out
                    )));
                }
                let bs = pad(s, r);
                if bs.iter().zip(&g.out).any(|(&x, &o)| x != 1 && x != o) {
                    return Err(invalid(format!(
                        "matmul bias {s:?} does not broadcast to the output {:?}",
                        g.out
                    )));
                }
                bs
            }
            None => vec![1; r],
        };
        let bias_elems = elements("matmul bias", &bias_shape)?;
        // Element strides along the output's axes, 0 where the operand broadcasts.
        let bstrides = |shape: &[usize], unit: u64| -> Vec<u64> {
            let mut st = vec![0u64; shape.len()];
            let mut run = unit;
            for i in (0..shape.len()).rev() {
                st[i] = if shape[i] == 1 { 0 } else { run };
                run *= shape[i] as u64;
            }
            st
        };
        let (mu, nu, ku) = (m as u64, n as u64, ka as u64);
        let sa = bstrides(&a_batch, mu * ku);
        let sb = bstrides(&b_batch, ku * nu);
        let sc = bstrides(&bias_shape, 1);
        // Merge neighbouring batch axes where every operand steps through them as one axis;
        // drop axes of size 1.
        let mut axes: Vec<(u64, u64, u64, u64)> = Vec::new();
        for i in 0..nb {
            let d = g.out[i] as u64;
            if d == 1 {
                continue;
            }
            let cur = (d, sa[i], sb[i], sc[i]);
            if let Some(last) = axes.last_mut() {
                let joins = |outer: u64, inner: u64| outer == inner * d;
                if joins(last.1, cur.1) && joins(last.2, cur.2) && joins(last.3, cur.3) {
                    *last = (last.0 * d, cur.1, cur.2, cur.3);
                    continue;
                }
            }
            axes.push(cur);
        }
        if axes.len() > MATMUL_BATCH_AXES {
            return Err(invalid(format!(
                "matmul batch axes broadcast in {} separate groups; at most {MATMUL_BATCH_AXES} ({shapes})",
                axes.len()
            )));
        }
        let batches: u64 = g.out[..nb].iter().map(|&d| d as u64).product();
        Ok(MatmulPlan {
            m: w(mu),
            n: w(nu),
            k: w(ku),
            batches: w(batches),
            axes: axes
                .iter()
                .map(|&(dim, a, b, c)| BatchAxis { dim: w(dim), a: w(a), b: w(b), c: w(c) })
                .collect(),
            bias_sm: w(sc[r - 2]),
            bias_sn: w(sc[r - 1]),
            a_elems,
            b_elems,
            bias_elems,
            out_elems,
        })
    }
}

/// SOFTMAX over the last axis: `dst = softmax(x * scale + mask)`, exactly `reference::softmax`.
/// The logits are `add(mul(x, scale), mask)` with the mask broadcast numpy-style to `shape`
/// (or `mul(x, scale)` without one); each row then goes through `numerics::softmax_row`.
pub fn softmax(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    x: &Slice,
    shape: &[usize],
    mask: Option<(&Slice, &[usize])>,
    scale: f32,
) -> Result<(), VulkanError> {
    softmax_in(k, rec, Tier::Strict, dst, x, shape, mask, scale, &Tuning::default())
}

/// The row operations that have one-pass kernels besides their tree kernel.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RowOp {
    Softmax,
    Layernorm,
    Rmsnorm,
}

impl RowOp {
    /// The tree kernel (shaders/<name>.comp, rowtree.glsl) for rows of `n`: any row length, any
    /// threads a row. Rows longer than [`ONE_PASS_ROW_MAX`] take the variant that loads each
    /// iteration's elements before using any (shaders/<name>_long.comp, TREE_PRELOAD); shorter
    /// ones the variant that holds fewer registers.
    fn tree_kernel(self, n: u64) -> &'static str {
        match (self, n > ONE_PASS_ROW_MAX) {
            (RowOp::Softmax, true) => "softmax_long",
            (RowOp::Layernorm, true) => "layernorm_long",
            (RowOp::Rmsnorm, true) => "rmsnorm_long",
            (op, false) => op.name(),
        }
    }

    /// The operation's name in messages (also its shorter rows' tree kernel).
    fn name(self) -> &'static str {
        match self {
            RowOp::Softmax => "softmax",
            RowOp::Layernorm => "layernorm",
            RowOp::Rmsnorm => "rmsnorm",
        }
    }

    /// The one-pass kernel in `tier` for rows of `n` (up to [`FAST_ONE_PASS_ROW_MAX`] in the
    /// fast tier, [`ONE_PASS_ROW_MAX`] in the strict), and the rows a workgroup takes (256 /
    /// threads a row, at least one).
    ///
    /// The fast tier's (shaders/<op>_fast_[<T>x]<PER>.comp, T 256 where not named) give rows of
    /// up to 256 elements the fewest threads, 1 to 64, that hold the row 4 elements a thread,
    /// rows of up to 1024 64 threads with 8 or 16 elements each, longer rows 256 threads with 8
    /// to 64 elements (the fewest that hold the row: fewer registers, more rows in flight), and
    /// rows of up to 32768 1024 threads with 32. Threads without elements cost as much as the
    /// rest: on the H100, fast SOFTMAX over 16M elements in rows of 32 ran at 598 GB/s on 64
    /// threads a row, 973 on 32, 2372 on 16 and 2929 on 8 (4 elements a thread); rows of 4 at
    /// 1074 on 4 threads; rows of 512 at 2123 on 256 threads with 4 elements (2 of them in the
    /// row), 3031 on 64 with 8; rows of 1024 at 2913 on 256 with 4, 2945 on 64 with 16.
    ///
    /// The strict tier's (<op>_strict_<T>x<PER>.comp) give rows of up to 256 elements the
    /// fewest threads, 1 to 64, that hold the row 4 elements a thread, as the fast tier's do
    /// (with fewer than 64 threads, a thread's other lanes of the tree's 256 hold only their
    /// starting value: strictrow.glsl); they keep 8 or 16 elements a thread on 64 threads a row
    /// up to rows of 1024 (4 rows a workgroup), 16 on 128 up to 2048 and on 256 up to 4096, 32
    /// and 64 beyond: the tree's per-row work (its barriers, the strict division and square
    /// root) is then spread over more elements (H200, strict LAYERNORM over rows of 1024: 293
    /// GB/s on 256 threads a row with 4 elements each, 669 on 64 with 16). The strict tier's
    /// lanes cannot spread a row of 16384 over more than 256 threads: thread t folds lane t's
    /// elements in order. On the H100, 8192 rows of 16384 went from the tree kernel's 897 GB/s
    /// (strict SOFTMAX), 1241 (LAYERNORM) and 1526 (RMSNORM) to 1399, 2042 and 2562, and in the
    /// fast tier (which ran the strict tree kernel there) to 2905, 2636 and 2962.
    fn one_pass_kernel(self, tier: Tier, n: u64) -> (&'static str, u64) {
        // Rows of up to 4 << class elements.
        let class = (n.max(4).next_power_of_two().trailing_zeros() - 2) as usize;
        macro_rules! kernels {
            ($op:literal) => {
                (
                    [
                        concat!($op, "_fast_1x4"),
                        concat!($op, "_fast_2x4"),
                        concat!($op, "_fast_4x4"),
                        concat!($op, "_fast_8x4"),
                        concat!($op, "_fast_16x4"),
                        concat!($op, "_fast_32x4"),
                        concat!($op, "_fast_64x4"),
                        concat!($op, "_fast_64x8"),
                        concat!($op, "_fast_64x16"),
                        concat!($op, "_fast_8"),
                        concat!($op, "_fast_16"),
                        concat!($op, "_fast_32"),
                        concat!($op, "_fast_64"),
                        concat!($op, "_fast_1024x32"),
                    ],
                    [
                        concat!($op, "_strict_1x4"),
                        concat!($op, "_strict_2x4"),
                        concat!($op, "_strict_4x4"),
                        concat!($op, "_strict_8x4"),
                        concat!($op, "_strict_16x4"),
                        concat!($op, "_strict_32x4"),
                        concat!($op, "_strict_64x4"),
                        concat!($op, "_strict_64x8"),
                        concat!($op, "_strict_64x16"),
                        concat!($op, "_strict_128x16"),
                        concat!($op, "_strict_256x16"),
                        concat!($op, "_strict_256x32"),
                        concat!($op, "_strict_256x64"),
                    ],
                )
            };
        }
        let (fast, strict): ([&'static str; 14], [&'static str; 13]) = match self {
            RowOp::Softmax => kernels!("softmax"),
            RowOp::Layernorm => kernels!("layernorm"),
            RowOp::Rmsnorm => kernels!("rmsnorm"),
        };
        match tier {
            Tier::Fast => (fast[class], [256, 128, 64, 32, 16, 8, 4, 4, 4, 1, 1, 1, 1, 1][class]),
            Tier::Strict => (strict[class], [256, 128, 64, 32, 16, 8, 4, 4, 4, 2, 1, 1, 1][class]),
        }
    }
}

/// Whether the one-pass row kernels (shaders/include/fastrow.glsl, strictrow.glsl) take rows of
/// `n` on `rec`'s device: they reduce with subgroup shuffles; elsewhere the tree kernels
/// (rowtree.glsl) run, which read a row once a pass. A number of threads a row chosen by
/// `tuning` or `ADEADVM_ROW_THREADS` is the tree kernels' (the one-pass kernels choose their
/// own, [`RowOp::one_pass_kernel`]).
fn one_pass_row(rec: &Recorder, tuning: &Tuning, tier: Tier, n: u64) -> bool {
    let info = rec.device().info();
    let (min, max) = match tier {
        // A workgroup of 1024, whose reductions hold a part a subgroup (at most 256).
        Tier::Fast
            if info.max_compute_workgroup_invocations >= 1024
                && info.max_compute_workgroup_size[0] >= 1024
                && info.subgroup_size.is_some_and(|s| s >= 4) =>
        {
            (ONE_PASS_ROW_MIN, FAST_ONE_PASS_ROW_MAX)
        }
        Tier::Fast | Tier::Strict => (ONE_PASS_ROW_MIN, ONE_PASS_ROW_MAX),
    };
    tuning.threads_per_row.or_else(row_threads_env).is_none()
        && (min..=max).contains(&n)
        && info.subgroup_shuffle
}

/// Dispatches the kernel of `op` over `rows` rows of `n`: its one-pass kernel where
/// [`one_pass_row`] takes the rows, else its tree kernel with `tbits`.
#[allow(clippy::too_many_arguments)]
fn dispatch_row_op(
    k: &Kernels,
    rec: &mut Recorder,
    tier: Tier,
    tuning: &Tuning,
    op: RowOp,
    bindings: &[Binding],
    push: &[u32],
    (rows, n, tbits): (u64, u64, u32),
) -> Result<(), VulkanError> {
    if one_pass_row(rec, tuning, tier, n) {
        let (kernel, rows_per_group) = op.one_pass_kernel(tier, n);
        let groups = grid(rec, tuning, rows.div_ceil(rows_per_group))?;
        return rec.dispatch(&k.get(kernel)?, bindings, push, groups);
    }
    // The fast tier's softmax over rows too long for its one-pass kernels: a workgroup a row,
    // reading the row twice (shaders/softmax_fast_long.comp) where the tree kernel reads it three
    // times.
    if tier == Tier::Fast
        && op == RowOp::Softmax
        && n > ONE_PASS_ROW_MAX
        && tuning.threads_per_row.or_else(row_threads_env).is_none()
        && rec.device().info().subgroup_shuffle
    {
        let groups = grid(rec, tuning, rows)?;
        return rec.dispatch(&k.get("softmax_fast_long")?, bindings, push, groups);
    }
    dispatch_rows(rec, tuning, &k.get(op.tree_kernel(n))?, bindings, push, rows, tbits)
}

/// [`softmax`] in `tier` with a [`Tuning`]: rows of [`ONE_PASS_ROW_MIN`] to
/// [`ONE_PASS_ROW_MAX`] elements take a one-pass kernel (the row read once into registers): shaders/softmax_strict_*.comp
/// (the tree kernel's bits) or softmax_fast_*.comp (the device's exp, a fixed order of its own:
/// the same bits run to run on one device); other rows take the tree kernel.
#[allow(clippy::too_many_arguments)]
pub fn softmax_in(
    k: &Kernels,
    rec: &mut Recorder,
    tier: Tier,
    dst: &Slice,
    x: &Slice,
    shape: &[usize],
    mask: Option<(&Slice, &[usize])>,
    scale: f32,
    tuning: &Tuning,
) -> Result<(), VulkanError> {
    let total = elements("softmax", shape)?;
    check_len("softmax x", x, total)?;
    check_len("softmax destination", dst, total)?;
    let r = shape.len();
    let n = shape.last().copied().unwrap_or(1) as u64;
    // Mask strides along each axis of `shape`, 0 where it broadcasts.
    let mut mstr = vec![0u64; r];
    if let Some((ms, mshape)) = mask {
        let melems = elements("softmax mask", mshape)?;
        check_len("softmax mask", ms, melems)?;
        if mshape.len() > r {
            return Err(invalid(format!("softmax mask {mshape:?} has more axes than the input {shape:?}")));
        }
        let lead = r - mshape.len();
        let mut run = 1u64;
        for i in (0..r).rev() {
            let d = if i < lead { 1 } else { mshape[i - lead] };
            if d != 1 && d != shape[i] {
                return Err(invalid(format!(
                    "softmax mask {mshape:?} does not broadcast to the input {shape:?}"
                )));
            }
            mstr[i] = if d == 1 { 0 } else { run };
            run *= d as u64;
        }
    }
    let rows = total.checked_div(n).unwrap_or(0);
    check_row("softmax", n)?;
    let tbits = row_tbits(tuning, rows, n, false, (2, 1))?;
    if total == 0 {
        return Ok(());
    }
    // The leading axes, size-1 axes dropped and neighbours merged where the mask steps through
    // them as one axis.
    let mut axes: Vec<(u64, u64)> = Vec::new();
    for i in 0..r.saturating_sub(1) {
        let d = shape[i] as u64;
        if d == 1 {
            continue;
        }
        match axes.last_mut() {
            Some(last) if last.1 == mstr[i] * d => *last = (last.0 * d, mstr[i]),
            _ => axes.push((d, mstr[i])),
        }
    }
    let (mut dims, mut strs) = ([1u32; 8], [0u32; 8]);
    for (i, &(d, s)) in axes.iter().enumerate() {
        dims[i] = w(d);
        strs[i] = w(s);
    }
    let flags = u32::from(mask.is_some()) | (axes.len() as u32) << 8;
    let mask_last = if r == 0 { 0 } else { w(mstr[r - 1]) };
    let mut push: Vec<u32> = dims.iter().chain(&strs).copied().collect();
    push.extend([w(rows), w(n), tbits, flags, scale.to_bits(), mask_last]);
    let mask_slice = mask.map_or(x, |(s, _)| s);
    let bindings = [Binding::write(dst), Binding::read(x), Binding::read(mask_slice)];
    dispatch_row_op(k, rec, tier, tuning, RowOp::Softmax, &bindings, &push, (rows, n, tbits))
}

/// LAYERNORM over rows of `n`: exactly `reference::layernorm` (`numerics::layernorm_row`:
/// mean and variance by the tree, `div` by `n`, `rsqrt(var + eps)`, then `* gamma`, `+ beta`).
/// `x` and `dst` hold `rows * n` elements, `gamma` and `beta` `n` each.
#[allow(clippy::too_many_arguments)]
pub fn layernorm(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    x: &Slice,
    rows: usize,
    n: usize,
    gamma: Option<&Slice>,
    beta: Option<&Slice>,
    eps: f32,
) -> Result<(), VulkanError> {
    layernorm_in(k, rec, Tier::Strict, dst, x, rows, n, gamma, beta, eps, &Tuning::default())
}

/// [`layernorm`] in `tier` with a [`Tuning`]: rows of [`ONE_PASS_ROW_MIN`] to
/// [`ONE_PASS_ROW_MAX`] elements take a one-pass kernel: shaders/layernorm_strict_*.comp (the tree
/// kernel's bits) or layernorm_fast_*.comp (the device's inversesqrt, a fixed order of its own);
/// other rows take the tree kernel.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_in(
    k: &Kernels,
    rec: &mut Recorder,
    tier: Tier,
    dst: &Slice,
    x: &Slice,
    rows: usize,
    n: usize,
    gamma: Option<&Slice>,
    beta: Option<&Slice>,
    eps: f32,
    tuning: &Tuning,
) -> Result<(), VulkanError> {
    norm_rows(k, rec, tier, RowOp::Layernorm, dst, x, (rows, n), (gamma, beta), eps, tuning)
}

/// RMSNORM over rows of `n`: exactly `reference::rmsnorm` (`numerics::rmsnorm_row`: mean
/// square by the tree over `mul(x, x)`, `div` by `n`, `rsqrt(ms + eps)`, then `* gamma`).
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    x: &Slice,
    rows: usize,
    n: usize,
    gamma: Option<&Slice>,
    eps: f32,
) -> Result<(), VulkanError> {
    rmsnorm_in(k, rec, Tier::Strict, dst, x, rows, n, gamma, eps, &Tuning::default())
}

/// [`rmsnorm`] (strict) with a [`Tuning`].
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm_with(
    k: &Kernels,
    rec: &mut Recorder,
    dst: &Slice,
    x: &Slice,
    rows: usize,
    n: usize,
    gamma: Option<&Slice>,
    eps: f32,
    tuning: &Tuning,
) -> Result<(), VulkanError> {
    rmsnorm_in(k, rec, Tier::Strict, dst, x, rows, n, gamma, eps, tuning)
}

/// [`rmsnorm`] in `tier` with a [`Tuning`]: rows of [`ONE_PASS_ROW_MIN`] to
/// [`ONE_PASS_ROW_MAX`] elements take a one-pass kernel: shaders/rmsnorm_strict_*.comp (the tree
/// kernel's bits) or rmsnorm_fast_*.comp (the device's inversesqrt, a fixed order of its own);
/// other rows take the tree kernel.
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm_in(
    k: &Kernels,
    rec: &mut Recorder,
    tier: Tier,
    dst: &Slice,
    x: &Slice,
    rows: usize,
    n: usize,
    gamma: Option<&Slice>,
    eps: f32,
    tuning: &Tuning,
) -> Result<(), VulkanError> {
    norm_rows(k, rec, tier, RowOp::Rmsnorm, dst, x, (rows, n), (gamma, None), eps, tuning)
}

/// LAYERNORM's and RMSNORM's launch (`op` one of them; RMSNORM has no beta): the sizes, the
/// threads a row, the push constants (shaders/include/norm_common.glsl) and the bindings.
#[allow(clippy::too_many_arguments)]
fn norm_rows(
    k: &Kernels,
    rec: &mut Recorder,
    tier: Tier,
    op: RowOp,
    dst: &Slice,
    x: &Slice,
    (rows, n): (usize, usize),
    (gamma, beta): (Option<&Slice>, Option<&Slice>),
    eps: f32,
    tuning: &Tuning,
) -> Result<(), VulkanError> {
    let layernorm = matches!(op, RowOp::Layernorm);
    let total = norm_checks(op.name(), dst, x, rows, n, &[("gamma", gamma), ("beta", beta)])?;
    // LAYERNORM reduces twice (mean, variance), RMSNORM once.
    let tbits = row_tbits(tuning, rows as u64, n as u64, false, (if layernorm { 2 } else { 1 }, 1))?;
    if total == 0 {
        return Ok(());
    }
    let flags = u32::from(gamma.is_some()) | u32::from(beta.is_some()) << 1;
    let push = [w(rows as u64), w(n as u64), tbits, flags, count(n).to_bits(), eps.to_bits()];
    let bindings = [
        Binding::write(dst),
        Binding::read(x),
        Binding::read(gamma.unwrap_or(x)),
        Binding::read(beta.unwrap_or(x)),
    ];
    let bindings = if layernorm { &bindings[..] } else { &bindings[..3] };
    dispatch_row_op(k, rec, tier, tuning, op, bindings, &push, (rows as u64, n as u64, tbits))
}

/// `n` as f32, rounded as `numerics::reduce::count` rounds it (`n as f32`), passed to the
/// shaders as bits so they never convert an integer themselves.
fn count(n: usize) -> f32 {
    n as f32
}

/// Sizes of a normalization: `rows * n` elements in `x` and `dst`, `n` in each affine operand.
fn norm_checks(
    what: &str,
    dst: &Slice,
    x: &Slice,
    rows: usize,
    n: usize,
    affine: &[(&str, Option<&Slice>)],
) -> Result<u64, VulkanError> {
    let total = elements(what, &[rows, n])?;
    check_row(what, n as u64)?;
    check_len(&format!("{what} x"), x, total)?;
    check_len(&format!("{what} destination"), dst, total)?;
    for (name, s) in affine {
        if let Some(s) = s {
            check_len(&format!("{what} {name}"), s, n as u64)?;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(a: &[usize], b: &[usize], out: &[usize]) -> MatmulShape {
        MatmulShape { a: a.to_vec(), b: b.to_vec(), out: out.to_vec(), ta: false, tb: false }
    }

    #[test]
    fn batch_axes_merge_and_broadcast() {
        // [2,3] batch of a, [3] of b: a steps through both axes as one, b broadcasts axis 0.
        let p = MatmulPlan::new(&shape(&[2, 3, 4, 5], &[3, 5, 6], &[2, 3, 4, 6]), None).unwrap();
        assert_eq!(
            p.axes,
            vec![BatchAxis { dim: 2, a: 60, b: 0, c: 0 }, BatchAxis { dim: 3, a: 20, b: 30, c: 0 }]
        );
        assert_eq!(p.batches, 6);
        // Both full: one merged axis.
        let p = MatmulPlan::new(&shape(&[2, 3, 4, 5], &[2, 3, 5, 6], &[2, 3, 4, 6]), None).unwrap();
        assert_eq!(p.axes, vec![BatchAxis { dim: 6, a: 20, b: 30, c: 0 }]);
        // Bias [m, 1]: a row stride, no column stride.
        let p = MatmulPlan::new(&shape(&[4, 5], &[5, 6], &[4, 6]), Some(&[4, 1])).unwrap();
        assert_eq!((p.bias_sm, p.bias_sn, p.bias_elems), (1, 0, 4));
    }

    /// The probe can tell: keeping the denormal partial sums gives other bits than flushing them.
    #[test]
    fn hw_ftz_probe_sees_kept_denormals() {
        let (a, b, g) = hw_ftz_probe_case();
        let (m, n) = (g.out[0], g.out[1]);
        let mut flushed = vec![0f32; m * n];
        reference::matmul(&g, &a, &b, None, Act::None, &mut flushed);
        // IEEE arithmetic that keeps denormals (Rust's default), then the epilogue's flush.
        let kept = |i: usize, j: usize| {
            let s = (0..3).fold(0f32, |acc, p| acc + a[i * 3 + p] * b[p * n + j]);
            if s.is_subnormal() {
                0.0
            } else {
                s
            }
        };
        let differ = (0..m * n).filter(|&o| flushed[o].to_bits() != kept(o / n, o % n).to_bits()).count();
        assert!(differ > m * n / 2, "only {differ} of {} outputs tell flushing from keeping", m * n);
    }

    /// split_pays picks, for each shape measured on the H200 (132 multiprocessors), the kernel
    /// that ran faster there, except 2048^2 x 512 (3% slower) and 1536^3 (11% faster, left out).
    #[test]
    fn split_pays_where_it_measured_faster() {
        let tiles = |m: u64, n: u64| m.div_ceil(128) * n.div_ceil(128);
        let cases = [
            ((4096, 4096, 256), false),
            ((4096, 4096, 512), true),
            ((4096, 4096, 1024), true),
            ((4096, 4096, 4096), true),
            ((4096, 1024, 4096), true),
            ((1024, 4096, 4096), true),
            ((8192, 3072, 768), true),
            ((8192, 8192, 8192), true),
            ((3072, 3072, 3072), true),
            ((2048, 2048, 2048), true),
            ((8192, 768, 768), false),
            ((8192, 768, 3072), false),
            ((2048, 1024, 4096), false),
            ((2048, 1024, 1024), false),
            ((1024, 1024, 4096), false),
            ((1280, 1280, 1280), false),
            ((1024, 1024, 1024), false),
        ];
        for ((m, n, k), want) in cases {
            assert_eq!(split_pays(tiles(m, n), k, 132), want, "{m} x {n} x {k}");
        }
        // The pieces' segments: every product but mid*lo, lo*mid and lo*lo, each once.
        let mut seen: Vec<(u32, u32)> = SPLIT_SEGMENTS.to_vec();
        seen.sort();
        assert_eq!(seen, vec![(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0)]);
        assert_eq!(split_pieces(0) & 3, 2, "segment 0 takes a's lo");
    }

    #[test]
    fn bad_shapes_are_refused() {
        let msg = |r: Result<MatmulPlan, VulkanError>| r.unwrap_err().to_string();
        assert!(msg(MatmulPlan::new(&shape(&[4, 5], &[6, 7], &[4, 7]), None)).contains("do not agree"));
        assert!(msg(MatmulPlan::new(&shape(&[2, 4, 5], &[3, 5, 7], &[2, 4, 7]), None)).contains("broadcast"));
        assert!(msg(MatmulPlan::new(&shape(&[4, 5], &[5, 7], &[4, 7]), Some(&[5]))).contains("bias"));
        assert!(msg(MatmulPlan::new(&shape(&[5], &[5, 7], &[4, 7]), None)).contains("rank 2"));
        let big = [1usize, 1, 1, 1, 1, 1, 1, 4, 5];
        assert!(msg(MatmulPlan::new(&shape(&big, &[5, 7], &[4, 7]), None)).contains("at most 8"));
    }
}
