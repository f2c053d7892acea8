//! Single-precision GEMM for the CPU executor: `C = A·B` with arbitrary operand strides.
//!
//! One blocked driver (BLIS-style loops NC → KC → MC → NR → MR over packed panels) serves
//! both tiers and both vector widths; only the microkernel differs (AVX2+FMA 6×16 on ymm,
//! AVX-512 12×32 on zmm, one generic kernel over the lane type):
//!
//! - **strict**: every `C(i,j)` is the reference chain `acc = +0; acc = acc + A(i,p)·B(p,j)`
//!   for `p` ascending, with a separate `vmulps` and `vaddps` (never fused), under MXCSR
//!   FTZ+DAZ, which makes those plain IEEE operations the strict ones. The kernel is vectorized
//!   across `j` (each lane is one output's chain), so no reassociation ever happens. Splitting
//!   `k` into KC chunks keeps the chain: the first chunk starts from `+0`, later chunks reload
//!   the partial sum from `C` (an exact f32 round trip) and continue it. NaN results are
//!   canonicalized when the last chunk stores them (a NaN chain stays NaN, so only the payload
//!   can differ from the reference, and that is fixed at the end).
//! - **fast**: the same loops with `vfmadd231ps`. Each output is still one FMA chain in `p`
//!   order, so the result does not depend on MC/NC or the thread split either: it is the same
//!   from run to run and for any thread count.
//!
//! Threads: the output is cut into disjoint rectangles (row blocks, or column blocks when `C`
//! is wide and short); each task runs the whole blocked algorithm on its rectangle with its
//! own packing buffers. Since every output is computed by one task, with the same chain
//! whatever the split, results never depend on the thread count.
//!
//! Weights: a constant B that a session multiplies by on every run is packed once
//! ([`PackedB`], kept by the VM) and [`gemm_packed`] reads its panels instead of packing them
//! again; packing only moves bits, so the results are the same.
//!
//! Without AVX2 (or with `ADEADVM_SIMD=scalar`) both tiers run the scalar strict loop built
//! on `numerics::{add, mul}`, which is the reference's bits.

use super::fpenv::FtzGuard;
use super::{Ctx, SimdLevel};
use crate::isa::{BlockFormat, Tier};
use crate::numerics as nx;

/// AVX2 microkernel rows (broadcast A values per k step); AVX-512 uses 12.
pub const MR: usize = 6;
/// AVX2 microkernel columns (two ymm vectors of B per k step); AVX-512 uses 32.
pub const NR: usize = 16;
/// AVX-512 microkernel rows and columns (two zmm vectors of B per k step).
const MR512: usize = 12;
const NR512: usize = 32;
/// Depth of one packed block for the AVX2 kernel: a KC×NR B micro-panel (16 KiB) and an A
/// micro-panel stay in a 32 KiB L1.
const KC: usize = 256;
/// Depth for the AVX-512 kernel (NR = 32). Its 48 KiB B micro-panel is past a 32 KiB L1 but
/// is read in order from L2, and each pass over K costs a load and a store of every C tile:
/// on the development machine (Zen 4) 1024² single-threaded went from 90 GFLOP/s at 128 to
/// 97-103 at 256 and 101 at 384, and MiniLM's 384-deep products now take one pass.
const KC512: usize = 384;
/// Rows of A packed per block (rounded up to a multiple of the kernel's rows): MC×KC floats
/// (144 KiB for AVX2, 216 KiB for AVX-512) stay in L2.
const MC: usize = 144;
/// Columns of B packed per block: KC×NC floats (4 MiB for AVX2, 6 MiB for AVX-512) stay in L3.
const NC: usize = 4096;
/// From this many threads a product is computed with B's packing shared between them
/// (`x86::gemm_shared`); below it each thread packs its own (`run_tasks`). On the 2-core
/// development machine (two vCPUs of an AMD EPYC), sharing was slower: MiniLM's MATMULs at
/// B=8 took 111 ms against 83 (likely each core reading the B panels the other had packed,
/// and two fork-joins a block instead of one). Not yet measured on a many-core host.
const SHARED_B_MIN_THREADS: usize = 8;

/// Whether a call on `threads` threads takes the shared-packing driver: from
/// [`SHARED_B_MIN_THREADS`], or always (`1`) or never (`0`) with `ADEADVM_CPU_GEMM_SHARED`
/// (a tuning aid; the bits are the same either way).
fn shared_b_pays(threads: usize) -> bool {
    static FORCED: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| crate::exec::env_switch("ADEADVM_CPU_GEMM_SHARED"));
    threads > 1 && forced.unwrap_or(threads >= SHARED_B_MIN_THREADS)
}

/// Below this many multiply-adds (m·n·k) the call runs on the calling thread.
pub(super) const PAR_MIN_WORK: usize = 1 << 20;
/// Products with at most this many rows of A, and B given transposed (`B(p,j) = b[j*b_cs +
/// p]`, a weight matrix stored [out, in] as every `tb` projection is), skip packing: the
/// matrix-vector kernel reads B once, in 8×8 blocks transposed in registers. A language model's
/// decode step is all such products; packing B for them read the weights three times (on the
/// development machine a SmolLM2 decode step's MATMULs ran at 4.4 GB/s). The chains are the
/// packed kernel's (`acc = +0`, then `acc + A·B` for `p` ascending, mul then add or one FMA),
/// so the bits are the same either way: which kernel runs never shows in a result.
pub(crate) const GEMV_MAX_M: usize = 8;
/// The matrix-vector kernel is bound by reading B, not by arithmetic: it goes parallel from a
/// quarter of [`PAR_MIN_WORK`] (a 576×576 projection, 1.3 MB of weights, is 0.33 M).
const GEMV_PAR_MIN_WORK: usize = 1 << 18;

/// C[m×n] (row-major, overwritten) = A·B, where `A(i,p) = a[i*a_rs + p*a_cs]` and
/// `B(p,j) = b[p*b_rs + j*b_cs]`.
///
/// Strict tier: each `C(i,j)` is exactly the reference's sequence (`acc = +0; acc = acc +
/// A(i,p)*B(p,j)`, `p` ascending, no FMA, FTZ+DAZ, canonical NaN). The kernel enters
/// flush-to-zero mode itself on every thread it uses, so it is correct even when the caller
/// has not. Fast tier: FMA; same bits from run to run and for any thread count.
///
/// `k == 0` gives `C = +0`. Panics if a slice is too short for the given shape and strides.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    ctx: &Ctx,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    a_rs: usize,
    a_cs: usize,
    b: &[f32],
    b_rs: usize,
    b_cs: usize,
    c: &mut [f32],
) {
    let Some(c) = nonempty_product(c, m, n, k) else { return };
    assert!((m - 1) * a_rs + (k - 1) * a_cs < a.len(), "gemm: A slice too short for its shape");
    assert!((k - 1) * b_rs + (n - 1) * b_cs < b.len(), "gemm: B slice too short for its shape");
    let ops = Operands { m, n, k, a, a_rs, a_cs, b, b_rs, b_cs };
    // How the output is cut among threads: in units of the kernel `run_rect` will pick.
    let gemv = ctx.level >= SimdLevel::Avx2 && m <= GEMV_MAX_M && b_rs == 1 && a_cs == 1 && k >= 8;
    let (unit, min_work) = if gemv {
        ((m, 8), GEMV_PAR_MIN_WORK)
    } else if ctx.level >= SimdLevel::Avx512 {
        ((MR512, NR512), PAR_MIN_WORK)
    } else {
        ((MR, NR), PAR_MIN_WORK)
    };
    #[cfg(target_arch = "x86_64")]
    if let Some(pool) = ctx.pool.filter(|p| {
        !gemv
            && ctx.level >= SimdLevel::Avx2
            && shared_b_pays(p.current_num_threads())
            && m * n * k >= min_work
    }) {
        let strict = ctx.tier == Tier::Strict;
        let out = OutPtr { ptr: c.as_mut_ptr(), n };
        if ctx.level >= SimdLevel::Avx512 {
            // SAFETY: `ctx.level >= Avx512` is only ever set after CPUID and the OS reported
            // AVX-512F/BW/DQ/VL on this CPU (`SimdLevel::detect`); `out` is `c`, borrowed
            // mutably for the call.
            unsafe { x86::gemm_shared::<x86::Avx512>(pool, strict, &ops, out) }
        } else {
            // SAFETY: as above, for AVX2 and FMA.
            unsafe { x86::gemm_shared::<x86::Avx2>(pool, strict, &ops, out) }
        }
        return;
    }
    run_tasks(ctx, &ops, c, unit, min_work, |rect, out| run_rect(ctx, &ops, rect, out));
}

/// B packed once, for every later product with it: a weight matrix a session multiplies by
/// on every run. Packing a transposed weight (`tb`, stored [out, in]) takes 8×8 register
/// transposes, and each task of a threaded call packed all the columns it needs for itself:
/// on the development machine MiniLM at B=8 on one thread spent 18% of its time packing its
/// weights, and its 16 tasks on 16 threads each packed the whole weight for 64 rows of A.
///
/// The layout is what the blocked kernels read: blocks of [`NC`] columns (starting at multiples
/// of it), each cut into the kernel's KC-deep slices, each slice the block's `nr`-wide panels
/// (kc×nr floats, row-major, zero-padded); slice `pc` of the block at column `jc` starts at
/// `jc·k + pc·ncp`, `ncp` the block's width rounded up to `nr`. Packing only moves bits, so a
/// product reads the same values in the same order as one that packs as it goes: the same
/// bits in both tiers.
pub struct PackedB {
    level: SimdLevel,
    k: usize,
    n: usize,
    buf: Vec<f32>,
    /// Where the 64-byte aligned panels start in `buf`.
    off: usize,
}

impl PackedB {
    /// B (`B(p,j) = b[p*b_rs + j*b_cs]`, k×n) packed for `ctx.level`'s blocked kernel. None
    /// where no blocked SIMD kernel runs (scalar level), for an empty B, when `b` is too short
    /// for the shape, or when the memory cannot be had.
    pub fn new(ctx: &Ctx, k: usize, n: usize, b: &[f32], b_rs: usize, b_cs: usize) -> Option<PackedB> {
        if ctx.level < SimdLevel::Avx2 || k == 0 || n == 0 || (k - 1) * b_rs + (n - 1) * b_cs >= b.len() {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let (_, nr, kc_max) = panel_geometry(ctx.level);
            let len = Self::len_for(k, n, nr);
            let mut buf = Vec::new();
            buf.try_reserve_exact(len + 16).ok()?;
            buf.resize(len + 16, 0.0);
            let off = buf.as_ptr().align_offset(64).min(16);
            let ops = Operands { m: 0, n, k, a: &[], a_rs: 0, a_cs: 0, b, b_rs, b_cs };
            let mut packed = PackedB { level: ctx.level, k, n, buf, off };
            for jc in (0..n).step_by(NC) {
                let nc = NC.min(n - jc);
                let ncp = nc.next_multiple_of(nr);
                for pc in (0..k).step_by(kc_max) {
                    let kc = kc_max.min(k - pc);
                    let at = packed.off + jc * k + pc * ncp;
                    let dst = &mut packed.buf[at..at + kc * ncp];
                    // SAFETY: `ctx.level >= Avx2` is only ever set after CPUID and the OS
                    // reported AVX2 on this CPU (`SimdLevel::detect`); the bounds of `b` were
                    // checked above and `dst` holds the block's panels.
                    unsafe { x86::pack_b(&ops, nr, pc, kc, jc, nc, dst) };
                }
            }
            Some(packed)
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    }

    /// Floats of the packed panels of a k×n B for panels `nr` wide.
    fn len_for(k: usize, n: usize, nr: usize) -> usize {
        let last = (n - 1) / NC * NC;
        last * k + (n - last).next_multiple_of(nr) * k
    }

    /// Bytes it holds.
    pub fn bytes(&self) -> u64 {
        (self.buf.len() * 4) as u64
    }

    /// Rows (k) and columns (n) of the B it holds.
    pub fn shape(&self) -> (usize, usize) {
        (self.k, self.n)
    }

    /// The panel of slice `pc` that holds column `j` (a multiple of the panel width within
    /// its block).
    #[cfg(target_arch = "x86_64")]
    fn panels(&self, j: usize, pc: usize) -> *const f32 {
        let (_, nr, kc_max) = panel_geometry(self.level);
        let jc = j / NC * NC;
        let ncp = NC.min(self.n - jc).next_multiple_of(nr);
        let kc = kc_max.min(self.k - pc);
        debug_assert!((j - jc).is_multiple_of(nr) && pc.is_multiple_of(kc_max));
        self.buf[self.off + jc * self.k + pc * ncp + (j - jc) * kc..].as_ptr()
    }
}

/// The blocked kernel's microtile rows and columns and its KC at `level` (Avx2 or Avx512).
fn panel_geometry(level: SimdLevel) -> (usize, usize, usize) {
    if level >= SimdLevel::Avx512 {
        (MR512, NR512, KC512)
    } else {
        (MR, NR, KC)
    }
}

/// [`gemm`] with B packed beforehand ([`PackedB`], for this `ctx.level`): the same bits. The
/// output is cut into a grid of rectangles of at most about [`MC`] rows (and as few column
/// groups as give every thread one), one fork-join a call.
///
/// Panics if a slice is too short for the given shape and strides, or if `packed` was packed
/// for another SIMD level.
pub fn gemm_packed(
    ctx: &Ctx,
    m: usize,
    a: &[f32],
    a_rs: usize,
    a_cs: usize,
    packed: &PackedB,
    c: &mut [f32],
) {
    let (k, n) = packed.shape();
    let Some(c) = nonempty_product(c, m, n, k) else { return };
    assert!((m - 1) * a_rs + (k - 1) * a_cs < a.len(), "gemm: A slice too short for its shape");
    assert_eq!(packed.level, ctx.level, "gemm_packed: B was packed for another SIMD level");
    let ops = Operands { m, n, k, a, a_rs, a_cs, b: &[], b_rs: 0, b_cs: 0 };
    let out = OutPtr { ptr: c.as_mut_ptr(), n };
    let strict = ctx.tier == Tier::Strict;
    let (mr, nr, _) = panel_geometry(ctx.level);
    let run = |r: Rect| {
        let _ftz = strict.then(FtzGuard::new);
        #[cfg(target_arch = "x86_64")]
        if ctx.level >= SimdLevel::Avx512 {
            // SAFETY: `packed` exists, so its level (this one, asserted above) was detected on
            // this CPU; `r` starts at a multiple of NR (the grid below) and is this task's own
            // part of the output.
            unsafe { x86::gemm_rect::<x86::Avx512>(strict, &ops, Some(packed), r, out) }
        } else {
            // SAFETY: as above, for AVX2.
            unsafe { x86::gemm_rect::<x86::Avx2>(strict, &ops, Some(packed), r, out) }
        }
    };
    let threads = ctx.threads();
    let pool = match ctx.pool {
        Some(p) if threads > 1 && m * n * k >= PAR_MIN_WORK => p,
        _ => return run(Rect { i0: 0, i1: m, j0: 0, j1: n }),
    };
    let (a_panels, b_panels) = (m.div_ceil(mr), n.div_ceil(nr));
    let pm = a_panels.min(threads.max((a_panels * mr).div_ceil(MC)));
    let pn = threads.div_ceil(pm).clamp(1, b_panels);
    let rect = |t: usize| {
        let (ti, tj) = (t / pn, t % pn);
        Rect {
            i0: a_panels * ti / pm * mr,
            i1: (a_panels * (ti + 1) / pm * mr).min(m),
            j0: b_panels * tj / pn * nr,
            j1: (b_panels * (tj + 1) / pn * nr).min(n),
        }
    };
    use rayon::prelude::*;
    pool.install(|| (0..pm * pn).into_par_iter().for_each(|t| run(rect(t))));
}

/// Rows of a block-quantized B dequantized at a time by [`gemm_blocks`]: about 1 MiB of f32
/// (a slab stays in L2 while the f32 kernels read it), a multiple of 16 rows, at least 16.
fn slab_rows(k: usize) -> usize {
    ((1usize << 18) / k.max(1)).next_multiple_of(16).max(16)
}

std::thread_local! {
    /// Per-thread slab of dequantized B rows for [`gemm_blocks`].
    static SLAB: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// C[m×n] (row-major, overwritten) = A·B where B is given transposed and block-quantized:
/// `B(p, j)` is value `p` of row `j` of the `[n, k]` matrix `blocks` holds in `format`
/// (`k` a multiple of 32). With at most [`GEMV_MAX_M`] rows of A (a language model's decode
/// step) and AVX2 with F16C, a matrix-vector kernel decodes each block of eight rows of B in
/// registers and feeds it straight to [`gemm`]'s matrix-vector chains, so the weights are read
/// once, as blocks. Otherwise each task dequantizes the rows of B its columns need, a slab of
/// [`slab_rows`] at a time (vectorized where the CPU allows, exact either way), and runs
/// [`gemm`]'s kernels on the slab. Either way every `C(i, j)` is the same chain as `gemm` over
/// the dequantized f32 matrix, the same bits in every tier, while the weights are read from
/// memory as blocks (a sixth (Q4_1) or about a quarter (Q8_0) of their f32 size, and a
/// language model's decode is bound by that read).
///
/// Panics if a slice is too short for the given shape and strides.
#[allow(clippy::too_many_arguments)]
pub fn gemm_blocks(
    ctx: &Ctx,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    a_rs: usize,
    a_cs: usize,
    format: BlockFormat,
    blocks: &[u8],
    c: &mut [f32],
) {
    assert!(k.is_multiple_of(BlockFormat::BLOCK_ELEMS), "gemm_blocks: k = {k} is not whole blocks");
    let row_bytes = k / BlockFormat::BLOCK_ELEMS * format.block_bytes();
    assert!(
        blocks.len() >= n * row_bytes,
        "gemm_blocks: B has {} bytes, needs {}",
        blocks.len(),
        n * row_bytes
    );
    let Some(c) = nonempty_product(c, m, n, k) else { return };
    assert!((m - 1) * a_rs + (k - 1) * a_cs < a.len(), "gemm_blocks: A slice too short for its shape");
    // The split among threads looks at the shape only (`b` is not read by `run_tasks`).
    let whole = Operands { m, n, k, a, a_rs, a_cs, b: &[], b_rs: 1, b_cs: k };
    #[cfg(target_arch = "x86_64")]
    if ctx.level >= SimdLevel::Avx2
        && m <= GEMV_MAX_M
        && a_cs == 1
        && std::arch::is_x86_feature_detected!("f16c")
    {
        let strict = ctx.tier == Tier::Strict;
        run_tasks(ctx, &whole, c, (m, 8), GEMV_PAR_MIN_WORK, |rect, out| {
            let _ftz = strict.then(FtzGuard::new);
            // SAFETY: `ctx.level >= Avx2` is only ever set after CPUID (and the OS) reported
            // AVX2 and FMA on this CPU (`SimdLevel::detect`), F16C was just detected, and the
            // shapes were checked above; `rect` is this task's own part of the output.
            unsafe { x86::gemv_tb_blocks_rect(strict, format, blocks, &whole, rect, out) }
        });
        return;
    }
    let slab = slab_rows(k);
    let min_work = if m <= GEMV_MAX_M { GEMV_PAR_MIN_WORK } else { PAR_MIN_WORK };
    run_tasks(ctx, &whole, c, (MR, NR), min_work, |rect, out| {
        SLAB.with(|buf| {
            let mut fresh = Vec::new();
            let mut held = buf.try_borrow_mut();
            let buf = match held.as_deref_mut() {
                Ok(b) => b,
                Err(_) => &mut fresh,
            };
            for j0 in (rect.j0..rect.j1).step_by(slab) {
                let w = slab.min(rect.j1 - j0);
                let rows = aligned(buf, w * k);
                dequantize_slab(ctx, format, blocks, k, j0..j0 + w, rows);
                let ops = Operands { m, n: w, k, a, a_rs, a_cs, b: rows, b_rs: 1, b_cs: k };
                // Columns j0..j0+w of C are columns 0..w of this slab's product.
                let sub = OutPtr { ptr: out.ptr.wrapping_add(j0), n: out.n };
                run_rect(ctx, &ops, Rect { i0: rect.i0, i1: rect.i1, j0: 0, j1: w }, sub);
            }
        })
    });
}

/// `numerics::quant::dequantize_rows`, vectorized where the CPU allows (AVX2 and F16C): the
/// same operations on the same operands, so the same values (see [`x86::dequantize_rows`]).
fn dequantize_slab(
    ctx: &Ctx,
    format: BlockFormat,
    blocks: &[u8],
    k: usize,
    rows: std::ops::Range<usize>,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if ctx.level >= SimdLevel::Avx2 && std::arch::is_x86_feature_detected!("f16c") {
        let row_bytes = k / BlockFormat::BLOCK_ELEMS * format.block_bytes();
        let src = &blocks[rows.start * row_bytes..rows.end * row_bytes];
        let out = &mut out[..rows.len() * k];
        // SAFETY: AVX2 was reported by CPUID and the OS (`SimdLevel::detect`) and F16C was
        // just detected; `src` holds exactly the blocks of `out.len()` values (both sliced
        // above, which panics rather than reading past either).
        unsafe { x86::dequantize_rows(format, src, out) };
        return;
    }
    crate::numerics::quant::dequantize_rows(format, blocks, k, rows, out)
}

/// Runs the kernel [`gemm`] would pick for `ops` on one rectangle of the output, on this
/// thread.
fn run_rect(ctx: &Ctx, ops: &Operands, rect: Rect, out: OutPtr) {
    #[cfg(target_arch = "x86_64")]
    if ctx.level >= SimdLevel::Avx2 {
        let strict = ctx.tier == Tier::Strict;
        let _ftz = strict.then(FtzGuard::new);
        if ops.m <= GEMV_MAX_M && ops.b_rs == 1 && ops.a_cs == 1 && ops.k >= 8 {
            // SAFETY: `ctx.level >= Avx2` is only ever set after CPUID (and the OS) reported
            // AVX2 and FMA on this CPU (`SimdLevel::detect`); the caller checked the shapes.
            unsafe { x86::gemv_tb_rect(strict, ops, rect, out) }
        } else if ctx.level >= SimdLevel::Avx512 {
            // SAFETY: `ctx.level >= Avx512` is only ever set after CPUID and the OS reported
            // AVX-512F/BW/DQ/VL on this CPU (`SimdLevel::detect`).
            unsafe { x86::gemm_rect::<x86::Avx512>(strict, ops, None, rect, out) }
        } else {
            // SAFETY: as for the matrix-vector kernel.
            unsafe { x86::gemm_rect::<x86::Avx2>(strict, ops, None, rect, out) }
        }
        return;
    }
    scalar_rect(ops, rect, out)
}

/// The m×n output of a product, or None when there is nothing to compute: the product is
/// empty (`m` or `n` is 0), or `k` is 0 and the output is `+0` (written here).
///
/// Panics if `c` has fewer than m·n elements.
fn nonempty_product(c: &mut [f32], m: usize, n: usize, k: usize) -> Option<&mut [f32]> {
    assert!(c.len() >= m * n, "gemm: output has {} elements, needs {}", c.len(), m * n);
    let c = &mut c[..m * n];
    if m == 0 || n == 0 {
        return None;
    }
    if k == 0 {
        c.fill(0.0);
        return None;
    }
    Some(c)
}

/// The operands of one call (shape and strided views of A and B).
struct Operands<'a> {
    m: usize,
    n: usize,
    k: usize,
    a: &'a [f32],
    a_rs: usize,
    a_cs: usize,
    b: &'a [f32],
    b_rs: usize,
    b_cs: usize,
}

/// A rectangle of the output, rows `i0..i1` and columns `j0..j1`.
#[derive(Clone, Copy, Debug)]
struct Rect {
    i0: usize,
    i1: usize,
    j0: usize,
    j1: usize,
}

/// Where a task writes: a raw view of the whole row-major `C` (row stride `n`). Tasks get
/// disjoint rectangles of it, so their writes never overlap.
#[derive(Clone, Copy)]
struct OutPtr {
    ptr: *mut f32,
    n: usize,
}
// SAFETY: an `OutPtr` is shared only among tasks writing disjoint rectangles of one live
// `&mut [f32]` (see `run_tasks`), which outlives the scope the tasks run in.
unsafe impl Send for OutPtr {}
// SAFETY: as above; no two threads touch the same element.
unsafe impl Sync for OutPtr {}
impl OutPtr {
    /// The element `offset` floats in (a method, so closures capture the whole `OutPtr`).
    ///
    /// # Safety
    /// `offset` is inside the output.
    #[cfg(target_arch = "x86_64")]
    unsafe fn at(self, offset: usize) -> *mut f32 {
        self.ptr.add(offset)
    }
}

/// Splits the output into fixed rectangles, one per thread, and runs `f` on each (inline
/// when there is one thread or little work). The split changes only who computes an output,
/// never how, so the bits do not depend on it.
fn run_tasks<F>(ctx: &Ctx, ops: &Operands, c: &mut [f32], (mr, nr): (usize, usize), min_work: usize, f: F)
where
    F: Fn(Rect, OutPtr) + Sync,
{
    let (m, n) = (ops.m, ops.n);
    let out = OutPtr { ptr: c.as_mut_ptr(), n };
    let threads = ctx.threads();
    let whole = Rect { i0: 0, i1: m, j0: 0, j1: n };
    let pool = match ctx.pool {
        Some(p) if threads > 1 && m * n * ops.k >= min_work => p,
        _ => return f(whole, out),
    };
    // Split the longer side (in microkernel units) into `threads` near-equal parts.
    let (m_units, n_units) = (m.div_ceil(mr), n.div_ceil(nr));
    let by_rows = m_units >= threads.min(n_units) && m_units * mr >= n / 2;
    let (units, unit, len) = if by_rows { (m_units, mr, m) } else { (n_units, nr, n) };
    let parts = threads.min(units);
    if parts <= 1 {
        return f(whole, out);
    }
    let rects: Vec<Rect> = (0..parts)
        .map(|t| {
            let lo = (units * t / parts * unit).min(len);
            let hi = (units * (t + 1) / parts * unit).min(len);
            if by_rows {
                Rect { i0: lo, i1: hi, j0: 0, j1: n }
            } else {
                Rect { i0: 0, i1: m, j0: lo, j1: hi }
            }
        })
        .collect();
    let f = &f;
    pool.install(|| {
        rayon::scope(|s| {
            for &r in &rects {
                s.spawn(move |_| f(r, out));
            }
        })
    });
}

/// The scalar path: the reference chain per output, built on `numerics::{add, mul}` (which
/// give the strict bits with or without FTZ set). Loops run i → p → j so B and C rows are
/// read in order; each `C(i,j)` still sees its products in ascending `p`.
fn scalar_rect(ops: &Operands, r: Rect, out: OutPtr) {
    let w = r.j1 - r.j0;
    let mut acc = vec![0.0f32; w];
    for i in r.i0..r.i1 {
        acc.fill(0.0);
        for p in 0..ops.k {
            let av = ops.a[i * ops.a_rs + p * ops.a_cs];
            let brow = p * ops.b_rs;
            for (jj, s) in acc.iter_mut().enumerate() {
                *s = nx::add(*s, nx::mul(av, ops.b[brow + (r.j0 + jj) * ops.b_cs]));
            }
        }
        for (jj, v) in acc.iter().enumerate() {
            // SAFETY: (i, j0+jj) lies in this task's rectangle of the m×n output that `out`
            // points to; no other task writes it and the output outlives the call.
            unsafe { *out.ptr.add(i * out.n + r.j0 + jj) = *v };
        }
    }
}

/// A 64-byte aligned scratch slice of `len` floats inside `buf` (grown as needed, never
/// shrunk; stale contents are fine since packing writes every element it later reads).
fn aligned(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buf.len() < len + 16 {
        buf.resize(len + 16, 0.0);
    }
    let off = buf.as_ptr().align_offset(64).min(16);
    &mut buf[off..off + len]
}

std::thread_local! {
    /// Per-thread packing buffers (B panel block, A panel block), reused across calls so a
    /// call neither allocates nor page-faults in fresh memory.
    static PACK: std::cell::RefCell<(Vec<f32>, Vec<f32>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

std::thread_local! {
    /// The threaded driver's shared B packing buffer, owned by the thread that starts the call
    /// and reused across calls.
    static SHARED_PACK: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// Largest microkernel tile (floats); partial tiles go through a scratch tile this big.
    const MAX_TILE: usize = 12 * 32;

    use crate::exec::cpu::simd::lanes::Lanes;

    /// `acc + a*b`: a separate multiply and add (STRICT) or one FMA.
    ///
    /// # Safety
    /// As every [`Lanes`] method: inlined into a function compiled for `W`'s width.
    #[inline(always)]
    unsafe fn mul_add<W: Lanes, const STRICT: bool>(acc: W, a: W, b: W) -> W {
        if STRICT {
            W::add(acc, W::mul(a, b))
        } else {
            W::fmadd(a, b, acc)
        }
    }

    /// Any NaN lane becomes the canonical NaN.
    ///
    /// # Safety
    /// As [`mul_add`].
    #[inline(always)]
    unsafe fn canon_nan<W: Lanes>(v: W) -> W {
        W::sel(W::unord(v, v), W::float(W::si(nx::CANONICAL_NAN as i32)), v)
    }

    /// A microkernel shape and its entry point.
    pub(super) trait Micro {
        /// Tile rows (broadcast A values per k step).
        const MR: usize;
        /// Tile columns (whole vectors of B per k step).
        const NR: usize;
        /// Depth of one packed block (see [`KC`] and [`KC512`] for how each was chosen).
        const KC: usize;
        /// One MR×NR tile (see [`tile`]).
        ///
        /// # Safety
        /// As [`tile`], and the CPU must have the kernel's instruction set.
        #[allow(clippy::too_many_arguments)]
        unsafe fn tile(
            strict: bool,
            kc: usize,
            ap: *const f32,
            bp: *const f32,
            cp: *mut f32,
            ldc: usize,
            rows: usize,
            cols: usize,
            first: bool,
            last: bool,
        );
    }

    /// AVX2+FMA: 6×16 (two ymm per row, twelve accumulators).
    pub(super) struct Avx2;
    /// AVX-512F: 12×32 (two zmm per row, 24 accumulators of the 32 registers).
    pub(super) struct Avx512;

    impl Micro for Avx2 {
        const MR: usize = MR;
        const NR: usize = NR;
        const KC: usize = KC;
        unsafe fn tile(
            strict: bool,
            kc: usize,
            ap: *const f32,
            bp: *const f32,
            cp: *mut f32,
            ldc: usize,
            rows: usize,
            cols: usize,
            first: bool,
            last: bool,
        ) {
            // SAFETY: forwarded; the caller checked AVX2+FMA.
            tile_avx2(strict, kc, ap, bp, cp, ldc, rows, cols, first, last)
        }
    }
    impl Micro for Avx512 {
        const MR: usize = MR512;
        const NR: usize = NR512;
        const KC: usize = KC512;
        unsafe fn tile(
            strict: bool,
            kc: usize,
            ap: *const f32,
            bp: *const f32,
            cp: *mut f32,
            ldc: usize,
            rows: usize,
            cols: usize,
            first: bool,
            last: bool,
        ) {
            // SAFETY: forwarded; the caller checked AVX-512F/BW/DQ/VL.
            tile_avx512(strict, kc, ap, bp, cp, ldc, rows, cols, first, last)
        }
    }

    /// [`tile`] compiled for AVX2+FMA.
    ///
    /// # Safety
    /// As [`tile`]; the CPU must support AVX2 and FMA.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile_avx2(
        strict: bool,
        kc: usize,
        ap: *const f32,
        bp: *const f32,
        cp: *mut f32,
        ldc: usize,
        rows: usize,
        cols: usize,
        first: bool,
        last: bool,
    ) {
        tile::<__m256, { MR }, 2>(strict, kc, ap, bp, cp, ldc, rows, cols, first, last)
    }

    /// [`tile`] compiled for AVX-512.
    ///
    /// # Safety
    /// As [`tile`]; the CPU must support AVX-512F/BW/DQ/VL.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
    unsafe fn tile_avx512(
        strict: bool,
        kc: usize,
        ap: *const f32,
        bp: *const f32,
        cp: *mut f32,
        ldc: usize,
        rows: usize,
        cols: usize,
        first: bool,
        last: bool,
    ) {
        tile::<__m512, 12, 2>(strict, kc, ap, bp, cp, ldc, rows, cols, first, last)
    }

    /// The blocked algorithm on one output rectangle with microkernel `K`.
    ///
    /// # Safety
    /// The CPU must support `K`'s instruction set; `out` must point to the live m×n output
    /// with `r` inside it and written by no one else meanwhile.
    /// With `pre`, B's panels are read from it (packed for `K`: see [`PackedB`]) instead of
    /// being packed here.
    ///
    /// # Safety
    /// The CPU must support `K`'s instruction set; `out` must point to the live m×n output
    /// with `r` inside it and written by no one else meanwhile; `pre`, if given, was packed
    /// for `K` from a B of `ops`' k and n, and `r.j0` is a multiple of `K::NR`.
    pub(super) unsafe fn gemm_rect<K: Micro>(
        strict: bool,
        ops: &Operands,
        pre: Option<&PackedB>,
        r: Rect,
        out: OutPtr,
    ) {
        PACK.with(|bufs| {
            // A re-entrant call on this thread (not expected) would find the buffers taken
            // and use fresh ones instead of panicking.
            match bufs.try_borrow_mut() {
                Ok(mut b) => {
                    let (bb, ab) = &mut *b;
                    gemm_rect_with::<K>(strict, ops, pre, r, out, bb, ab)
                }
                Err(_) => gemm_rect_with::<K>(strict, ops, pre, r, out, &mut Vec::new(), &mut Vec::new()),
            }
        })
    }

    /// [`gemm_rect`] with the packing buffers given.
    ///
    /// # Safety
    /// As for [`gemm_rect`].
    unsafe fn gemm_rect_with<K: Micro>(
        strict: bool,
        ops: &Operands,
        pre: Option<&PackedB>,
        r: Rect,
        out: OutPtr,
        bbuf: &mut Vec<f32>,
        abuf: &mut Vec<f32>,
    ) {
        let (mr, nr) = (K::MR, K::NR);
        let k = ops.k;
        let nc_max = NC.min((r.j1 - r.j0).next_multiple_of(nr));
        let mc_max = MC.next_multiple_of(mr).min((r.i1 - r.i0).next_multiple_of(mr));
        let kc_max = K::KC.min(k);
        let bpack = if pre.is_some() { &mut [][..] } else { aligned(bbuf, kc_max * nc_max) };
        let apack = aligned(abuf, kc_max * mc_max);
        let mut jc = r.j0;
        while jc < r.j1 {
            // Blocks of NC columns: where B was packed beforehand, its blocks (which start
            // at multiples of NC); the chains do not depend on NC either way.
            let nc = if pre.is_some() { ((jc / NC + 1) * NC).min(r.j1) - jc } else { NC.min(r.j1 - jc) };
            for pc in (0..k).step_by(K::KC) {
                let kc = K::KC.min(k - pc);
                let (first, last) = (pc == 0, pc + kc == k);
                let bpanels: *const f32 = match pre {
                    Some(pb) => pb.panels(jc, pc),
                    None => {
                        // SAFETY: this function's callers checked the kernel's instruction
                        // set, which includes AVX.
                        pack_b(ops, nr, pc, kc, jc, nc, bpack);
                        bpack.as_ptr()
                    }
                };
                for ic in (r.i0..r.i1).step_by(mc_max) {
                    let mc = mc_max.min(r.i1 - ic);
                    // SAFETY: as for `pack_b`.
                    pack_a(ops, mr, ic, mc, pc, kc, apack);
                    for jr in (0..nc).step_by(nr) {
                        // SAFETY: panel jr/nr of this block lies jr·kc floats in (the packed
                        // block holds nc.div_ceil(nr) panels of kc·nr floats).
                        let bp = bpanels.add(jr * kc);
                        let cols = nr.min(nc - jr);
                        for ir in (0..mc).step_by(mr) {
                            let ap = apack[ir * kc..].as_ptr();
                            let rows = mr.min(mc - ir);
                            let cp = out.ptr.add((ic + ir) * out.n + jc + jr);
                            // SAFETY: the panels hold kc·MR and kc·NR floats at `ap` and `bp`;
                            // the tile (rows×cols at `cp`, row stride n) is inside `r`; the
                            // caller checked the instruction set.
                            K::tile(strict, kc, ap, bp, cp, out.n, rows, cols, first, last);
                        }
                    }
                }
            }
            jc += nc;
        }
    }

    /// A raw view of a shared packing buffer: tasks write disjoint panels of it, then (after the
    /// fork-join that ends the packing phase) every task reads it.
    #[derive(Clone, Copy)]
    struct PackPtr(*mut f32);
    // SAFETY: shared only inside one [`gemm_shared`] call, whose buffers outlive its scopes;
    // writers touch disjoint panels and readers start after every writer has finished.
    unsafe impl Send for PackPtr {}
    // SAFETY: as above.
    unsafe impl Sync for PackPtr {}
    impl PackPtr {
        /// The float `offset` floats in (a method, so closures capture the whole `PackPtr`).
        ///
        /// # Safety
        /// `offset` is inside the buffer.
        unsafe fn at(self, offset: usize) -> *mut f32 {
            self.0.add(offset)
        }
    }

    /// The blocked algorithm spread over `pool` with B's packing shared between its threads:
    /// for each KC-deep block, B's panels are packed once, in parallel, then the output is
    /// computed as a 2D grid of tasks, each packing its own rows of A (at most MC, so they stay
    /// in its core's L2) and reading the shared B panels. Per-thread packing of B, as
    /// [`gemm_rect`] does on a 1D split, packed all of B on every thread (16 copies of a
    /// 6 MiB block at 4096², which do not fit a shared L3), and a short product split by
    /// columns packed all of A on every thread. (A first version also packed A once and shared
    /// it; on 2 threads it was as slow as this one, see [`SHARED_B_MIN_THREADS`], so A stays
    /// private, where it was packed.) Each output is still one
    /// task's tile with the same chain (`first`/`last` at the same KC boundaries), so the bits
    /// are [`gemm_rect`]'s for any thread count.
    ///
    /// # Safety
    /// The CPU must support `K`'s instruction set; `out` must point to the live m×n output,
    /// written by no one else during the call.
    pub(super) unsafe fn gemm_shared<K: Micro>(
        pool: &rayon::ThreadPool,
        strict: bool,
        ops: &Operands,
        out: OutPtr,
    ) {
        SHARED_PACK.with(|buf| match buf.try_borrow_mut() {
            Ok(mut b) => gemm_shared_with::<K>(pool, strict, ops, out, &mut b),
            // A nested call on this thread (a task of another product stolen while this one
            // waits) packs into a fresh buffer.
            Err(_) => gemm_shared_with::<K>(pool, strict, ops, out, &mut Vec::new()),
        })
    }

    /// [`gemm_shared`] with the shared B buffer given.
    ///
    /// # Safety
    /// As for [`gemm_shared`].
    unsafe fn gemm_shared_with<K: Micro>(
        pool: &rayon::ThreadPool,
        strict: bool,
        ops: &Operands,
        out: OutPtr,
        bbuf: &mut Vec<f32>,
    ) {
        use rayon::prelude::*;
        let (mr, nr, m, k) = (K::MR, K::NR, ops.m, ops.k);
        let threads = pool.current_num_threads();
        let kc_max = K::KC.min(k);
        let nc_max = NC.min(ops.n.next_multiple_of(nr));
        let bpack = PackPtr(aligned(bbuf, kc_max * nc_max).as_mut_ptr());
        let a_panels = m.div_ceil(mr);
        for jc in (0..ops.n).step_by(NC) {
            let nc = NC.min(ops.n - jc);
            let b_panels = nc.div_ceil(nr);
            // The grid: row blocks of at most MC rows, about one a thread, and as few column
            // groups as give every thread a task (each column group packs its rows of A again).
            let pm = a_panels.min(threads.max((a_panels * mr).div_ceil(MC)));
            let pn = threads.div_ceil(pm).clamp(1, b_panels);
            for pc in (0..k).step_by(K::KC) {
                let kc = K::KC.min(k - pc);
                let (first, last) = (pc == 0, pc + kc == k);
                let chunk = b_panels.div_ceil(2 * threads).max(2);
                pool.install(|| {
                    (0..b_panels.div_ceil(chunk)).into_par_iter().for_each(|t| {
                        let p0 = t * chunk;
                        let cols = (chunk * nr).min(nc - p0 * nr);
                        let len = cols.div_ceil(nr) * nr * kc;
                        // SAFETY: panels p0.. lie at p0·nr·kc and are this task's alone;
                        // `bpack` holds nc_max·kc_max floats.
                        let dst = std::slice::from_raw_parts_mut(bpack.at(p0 * nr * kc), len);
                        pack_b(ops, nr, pc, kc, jc + p0 * nr, cols, dst);
                    })
                });
                pool.install(|| {
                    (0..pm * pn).into_par_iter().for_each(|t| {
                        let _ftz = strict.then(FtzGuard::new);
                        let (ti, tj) = (t / pn, t % pn);
                        let (i0, i1) = ((a_panels * ti / pm) * mr, ((a_panels * (ti + 1) / pm) * mr).min(m));
                        let (v0, v1) = (b_panels * tj / pn, b_panels * (tj + 1) / pn);
                        PACK.with(|bufs| {
                            let mut fresh = Vec::new();
                            let mut held = bufs.try_borrow_mut();
                            let abuf = match held.as_mut() {
                                Ok(b) => &mut b.1,
                                Err(_) => &mut fresh,
                            };
                            let apack = aligned(abuf, kc * (i1 - i0).next_multiple_of(mr));
                            pack_a(ops, mr, i0, i1 - i0, pc, kc, apack);
                            for jr in v0..v1 {
                                let bp = bpack.at(jr * nr * kc) as *const f32;
                                let cols = nr.min(nc - jr * nr);
                                for (ir, ap) in (i0..i1).step_by(mr).zip(apack.chunks_exact(mr * kc)) {
                                    let rows = mr.min(i1 - ir);
                                    let cp = out.at(ir * out.n + jc + jr * nr);
                                    // SAFETY: the packing phase above filled B's panel `jr`
                                    // (kc·NR floats) and `ap` holds kc·MR; the tile is inside
                                    // the output, in this task's part of the grid only; the
                                    // caller checked the instruction set.
                                    K::tile(strict, kc, ap.as_ptr(), bp, cp, out.n, rows, cols, first, last);
                                }
                            }
                        })
                    })
                });
            }
        }
    }

    /// Packs B(pc.., jc..) (kc×nc) into `nr`-wide panels, each kc×nr row-major, zero-padded.
    ///
    /// # Safety
    /// The CPU must have AVX (the register transposes); [`gemm_rect`]'s callers checked AVX2.
    pub(super) unsafe fn pack_b(
        ops: &Operands,
        nr: usize,
        pc: usize,
        kc: usize,
        jc: usize,
        nc: usize,
        dst: &mut [f32],
    ) {
        let (b, rs, cs) = (ops.b, ops.b_rs, ops.b_cs);
        for (jp, panel) in (0..nc).step_by(nr).zip(dst.chunks_exact_mut(kc * nr)) {
            let w = nr.min(nc - jp);
            let j = jc + jp;
            if cs == 1 {
                for (p, row) in panel.chunks_exact_mut(nr).enumerate() {
                    let src = (pc + p) * rs + j;
                    row[..w].copy_from_slice(&b[src..src + w]);
                    row[w..].fill(0.0);
                }
            } else {
                // Columns of B that are contiguous in p (a transposed operand, `tb`): whole
                // 8×8 blocks are transposed in registers, the ragged edges go one by one.
                let (jj8, p8) = if rs == 1 { (w / 8 * 8, kc / 8 * 8) } else { (0, 0) };
                for jj in (0..jj8).step_by(8) {
                    for p in (0..p8).step_by(8) {
                        let src = (j + jj) * cs + pc + p;
                        if p % 16 == 0 {
                            // The next eight columns' line at this depth: B is usually a
                            // weight read once from memory, eight short streams at a time.
                            for r in 8..16 {
                                let ahead = b.as_ptr().wrapping_add(src + r * cs);
                                // SAFETY: a prefetch is only a hint and never faults.
                                unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8) };
                            }
                        }
                        assert!(src + 7 * cs + 8 <= b.len() && (p + 7) * nr + jj + 8 <= panel.len());
                        // SAFETY: the assert keeps all eight 8-float rows read from `b` and
                        // written to `panel` in bounds; the caller guarantees AVX.
                        unsafe {
                            transpose8x8(b.as_ptr().add(src), cs, panel.as_mut_ptr().add(p * nr + jj), nr)
                        };
                    }
                }
                for jj in 0..nr {
                    let p_from = if jj < jj8 { p8 } else { 0 };
                    if jj < w {
                        let base = (j + jj) * cs;
                        for p in p_from..kc {
                            panel[p * nr + jj] = b[base + (pc + p) * rs];
                        }
                    } else {
                        for p in p_from..kc {
                            panel[p * nr + jj] = 0.0;
                        }
                    }
                }
            }
        }
    }

    /// The matrix-vector kernel (see [`GEMV_MAX_M`]): output columns `r.j0..r.j1` of every row,
    /// eight columns at a time, each lane one output's chain. Each step loads an 8×8 block of B
    /// (eight of its rows, contiguous in `p`), transposes it in registers, and feeds its eight
    /// columns to every row's accumulator in ascending `p`; the last `k % 8` steps gather their
    /// eight values one by one, and the last `n % 8` columns take the scalar chain.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `ops` has `a_cs == 1`, `b_rs == 1`, `m <= GEMV_MAX_M`
    /// and slices long enough for its shape (checked by [`gemm`]); `r` is a rectangle of the
    /// output `out` points to that no other task writes.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gemv_tb_rect(strict: bool, ops: &Operands, r: Rect, out: OutPtr) {
        if strict {
            gemv_tb::<true>(ops, r, out)
        } else {
            gemv_tb::<false>(ops, r, out)
        }
    }

    #[inline(always)]
    unsafe fn gemv_tb<const STRICT: bool>(ops: &Operands, r: Rect, out: OutPtr) {
        let (m, k) = (ops.m, ops.k);
        let (a, b, a_rs, b_cs) = (ops.a.as_ptr(), ops.b.as_ptr(), ops.a_rs, ops.b_cs);
        let kb = k / 8 * 8;
        let mut j = r.j0;
        while j + 8 <= r.j1 {
            let mut acc = [<__m256 as Lanes>::zero(); GEMV_MAX_M];
            let rows: [*const f32; 8] = std::array::from_fn(|l| b.add((j + l) * b_cs));
            let mut p = 0;
            while p < kb {
                let v: [__m256; 8] = std::array::from_fn(|l| _mm256_loadu_ps(rows[l].add(p)));
                // cols[q] lane l = B(p + q, j + l).
                let cols = transpose8(v);
                for (i, acc) in acc.iter_mut().enumerate().take(m) {
                    let ai = a.add(i * a_rs + p);
                    for (q, col) in cols.iter().enumerate() {
                        *acc = mul_add::<__m256, STRICT>(*acc, _mm256_set1_ps(*ai.add(q)), *col);
                    }
                }
                p += 8;
            }
            for p in kb..k {
                let col = _mm256_setr_ps(
                    *rows[0].add(p),
                    *rows[1].add(p),
                    *rows[2].add(p),
                    *rows[3].add(p),
                    *rows[4].add(p),
                    *rows[5].add(p),
                    *rows[6].add(p),
                    *rows[7].add(p),
                );
                for (i, acc) in acc.iter_mut().enumerate().take(m) {
                    *acc = mul_add::<__m256, STRICT>(*acc, _mm256_set1_ps(*a.add(i * a_rs + p)), col);
                }
            }
            for (i, acc) in acc.iter().enumerate().take(m) {
                let v = if STRICT { canon_nan(*acc) } else { *acc };
                // SAFETY (of the store): row i, columns j..j+8 lie in this task's rectangle.
                _mm256_storeu_ps(out.ptr.add(i * out.n + j), v);
            }
            j += 8;
        }
        // The last columns: the same chains, one output at a time.
        for j in j..r.j1 {
            for i in 0..m {
                let mut acc = 0.0f32;
                for p in 0..k {
                    let (x, y) = (*a.add(i * a_rs + p), *b.add(j * b_cs + p));
                    acc = if STRICT { nx::add(acc, nx::mul(x, y)) } else { x.mul_add(y, acc) };
                }
                if STRICT {
                    acc = nx::canon(acc);
                }
                *out.ptr.add(i * out.n + j) = acc;
            }
        }
    }

    /// The 8×8 transpose of eight vectors in registers: lane `l` of result `q` is lane `q` of
    /// `v[l]`.
    ///
    /// # Safety
    /// Inlined into a function compiled for AVX.
    #[inline(always)]
    unsafe fn transpose8(v: [__m256; 8]) -> [__m256; 8] {
        let t0 = _mm256_unpacklo_ps(v[0], v[1]);
        let t1 = _mm256_unpackhi_ps(v[0], v[1]);
        let t2 = _mm256_unpacklo_ps(v[2], v[3]);
        let t3 = _mm256_unpackhi_ps(v[2], v[3]);
        let t4 = _mm256_unpacklo_ps(v[4], v[5]);
        let t5 = _mm256_unpackhi_ps(v[4], v[5]);
        let t6 = _mm256_unpacklo_ps(v[6], v[7]);
        let t7 = _mm256_unpackhi_ps(v[6], v[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ]
    }

    /// The matrix-vector kernel over block-quantized B (see [`gemm_blocks`]): [`gemv_tb`]'s
    /// loop with B's 8×8 blocks decoded in registers instead of loaded, so the weights are read
    /// once, as blocks. Per block of 32 values and eight rows of B: the eight scales (and Q4_1
    /// minimums) are widened from f16 to one vector (lane `l` = row `l`'s), and each quarter of
    /// the block's quants is widened to i32 and converted to f32 (exact), transposed, and turned
    /// into values by `d · q` (and `+ m`): the same IEEE operations on the same operands as
    /// `numerics::quant::dequantize_block`, and neither is ever an f32 denormal (see that
    /// module), so the values are its bits under FTZ/DAZ too. They then feed the per-output
    /// chains exactly as in [`gemv_tb`]; the last `n % 8` rows are decoded by
    /// `numerics::quant` and take the scalar chain.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `ops` has `a_cs == 1`, `m <= GEMV_MAX_M`, `k` a
    /// multiple of 32 and `a` long enough for its shape, `blocks` holds at least `ops.n` rows
    /// of `k` values in `format` (checked by [`gemm_blocks`]); `r` is a rectangle of the
    /// output `out` points to that no other task writes.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn gemv_tb_blocks_rect(
        strict: bool,
        format: BlockFormat,
        blocks: &[u8],
        ops: &Operands,
        r: Rect,
        out: OutPtr,
    ) {
        match (strict, format) {
            (true, BlockFormat::Q8_0) => gemv_tb_blocks::<true, false>(blocks, ops, r, out),
            (true, BlockFormat::Q4_1) => gemv_tb_blocks::<true, true>(blocks, ops, r, out),
            (false, BlockFormat::Q8_0) => gemv_tb_blocks::<false, false>(blocks, ops, r, out),
            (false, BlockFormat::Q4_1) => gemv_tb_blocks::<false, true>(blocks, ops, r, out),
        }
    }

    /// Eight little-endian f16 bit patterns, one at `offset` of each block, widened to f32.
    ///
    /// # Safety
    /// Inlined into a function compiled for F16C; two bytes readable at each `block[l] + offset`.
    #[inline(always)]
    unsafe fn f16x8(block: &[*const u8; 8], offset: usize) -> __m256 {
        let h = |l: usize| {
            u16::from_le_bytes(std::ptr::read_unaligned(block[l].add(offset) as *const [u8; 2])) as i16
        };
        _mm256_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7)))
    }

    #[inline(always)]
    unsafe fn gemv_tb_blocks<const STRICT: bool, const Q4_1: bool>(
        blocks: &[u8],
        ops: &Operands,
        r: Rect,
        out: OutPtr,
    ) {
        let (m, k) = (ops.m, ops.k);
        let (a, a_rs) = (ops.a.as_ptr(), ops.a_rs);
        let format = if Q4_1 { BlockFormat::Q4_1 } else { BlockFormat::Q8_0 };
        let block_bytes = format.block_bytes();
        let row_blocks = k / BlockFormat::BLOCK_ELEMS;
        let row_bytes = row_blocks * block_bytes;
        let base = blocks.as_ptr();
        let low_nibble = _mm256_set1_epi32(0x0f);
        let mut j = r.j0;
        while j + 8 <= r.j1 {
            let mut acc = [<__m256 as Lanes>::zero(); GEMV_MAX_M];
            for blk in 0..row_blocks {
                let block: [*const u8; 8] =
                    std::array::from_fn(|l| base.add((j + l) * row_bytes + blk * block_bytes));
                let d = f16x8(&block, 0);
                let min = if Q4_1 { f16x8(&block, 2) } else { <__m256 as Lanes>::zero() };
                // Quarter `c` of a block: values 8c..8c+8. Q8_0: bytes 2 + 8c.., as i8. Q4_1:
                // value v < 16 is the low nibble of byte 4 + v, value v >= 16 the high nibble
                // of byte 4 + v - 16.
                for c in 0..4 {
                    let q: [__m256; 8] = std::array::from_fn(|l| {
                        let ints = if Q4_1 {
                            let bytes = _mm_loadl_epi64(block[l].add(4 + (c & 1) * 8) as *const __m128i);
                            let wide = _mm256_cvtepu8_epi32(bytes);
                            if c < 2 {
                                _mm256_and_si256(wide, low_nibble)
                            } else {
                                _mm256_srli_epi32::<4>(wide)
                            }
                        } else {
                            _mm256_cvtepi8_epi32(_mm_loadl_epi64(block[l].add(2 + c * 8) as *const __m128i))
                        };
                        _mm256_cvtepi32_ps(ints)
                    });
                    // cols[t] lane l = B(p + t, j + l) once scaled.
                    let mut cols = transpose8(q);
                    for col in cols.iter_mut() {
                        *col = _mm256_mul_ps(*col, d);
                        if Q4_1 {
                            *col = _mm256_add_ps(*col, min);
                        }
                    }
                    let p = blk * BlockFormat::BLOCK_ELEMS + c * 8;
                    for (i, acc) in acc.iter_mut().enumerate().take(m) {
                        let ai = a.add(i * a_rs + p);
                        for (t, col) in cols.iter().enumerate() {
                            *acc = mul_add::<__m256, STRICT>(*acc, _mm256_set1_ps(*ai.add(t)), *col);
                        }
                    }
                }
            }
            for (i, acc) in acc.iter().enumerate().take(m) {
                let v = if STRICT { canon_nan(*acc) } else { *acc };
                // SAFETY (of the store): row i, columns j..j+8 lie in this task's rectangle.
                _mm256_storeu_ps(out.ptr.add(i * out.n + j), v);
            }
            j += 8;
        }
        // The last rows of B: decoded one at a time, then the same chains as above.
        let mut row = vec![0.0f32; if j < r.j1 { k } else { 0 }];
        for j in j..r.j1 {
            crate::numerics::quant::dequantize_rows(format, blocks, k, j..j + 1, &mut row);
            for i in 0..m {
                let mut acc = 0.0f32;
                for (p, &y) in row.iter().enumerate() {
                    let x = *a.add(i * a_rs + p);
                    acc = if STRICT { nx::add(acc, nx::mul(x, y)) } else { x.mul_add(y, acc) };
                }
                if STRICT {
                    acc = nx::canon(acc);
                }
                *out.ptr.add(i * out.n + j) = acc;
            }
        }
    }

    /// Decodes whole blocks of `format` from `src` into `out` (`out.len()` values, a multiple
    /// of 32; `src` exactly their blocks): per block, the f16 scale (and Q4_1 minimum) widened
    /// by F16C (exact, as `half`'s conversion), each eight quants widened to i32 and converted
    /// to f32 (exact), then `d · q` (and `+ m`): the operations of
    /// `numerics::quant::dequantize_block` in the same order, on the same operands, so the same
    /// values, which are never f32 denormals (FTZ/DAZ cannot change them).
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn dequantize_rows(format: BlockFormat, src: &[u8], out: &mut [f32]) {
        let block_bytes = format.block_bytes();
        assert!(
            out.len() / BlockFormat::BLOCK_ELEMS * block_bytes == src.len() && out.len().is_multiple_of(32)
        );
        let low_nibble = _mm256_set1_epi32(0x0f);
        // The f16 at `b`, widened, in every lane.
        let f16 = |b: *const u8| {
            let bits = u16::from_le_bytes(std::ptr::read_unaligned(b as *const [u8; 2]));
            _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
        };
        for (o, b) in out.chunks_exact_mut(BlockFormat::BLOCK_ELEMS).zip(src.chunks_exact(block_bytes)) {
            let (o, b) = (o.as_mut_ptr(), b.as_ptr());
            let d = f16(b);
            match format {
                BlockFormat::Q8_0 => {
                    for c in 0..4 {
                        let q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(b.add(2 + 8 * c) as *const __m128i));
                        _mm256_storeu_ps(o.add(8 * c), _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
                    }
                }
                BlockFormat::Q4_1 => {
                    let m = f16(b.add(2));
                    for half in 0..2 {
                        let bytes =
                            _mm256_cvtepu8_epi32(_mm_loadl_epi64(b.add(4 + 8 * half) as *const __m128i));
                        // Byte j holds value j (low nibble) and value j + 16 (high nibble).
                        let lo = _mm256_cvtepi32_ps(_mm256_and_si256(bytes, low_nibble));
                        let hi = _mm256_cvtepi32_ps(_mm256_srli_epi32::<4>(bytes));
                        _mm256_storeu_ps(o.add(8 * half), _mm256_add_ps(_mm256_mul_ps(d, lo), m));
                        _mm256_storeu_ps(o.add(16 + 8 * half), _mm256_add_ps(_mm256_mul_ps(d, hi), m));
                    }
                }
            }
        }
    }

    /// Copies the 4×8 block at `src` (rows `src_stride` floats apart) transposed to `dst`
    /// (eight rows of four, `dst_stride` apart): `dst[c][r] = src[r][c]`.
    ///
    /// # Safety
    /// The CPU must have AVX; four rows of eight floats must be readable at `src`, and eight
    /// rows of four writable at `dst`, with the given strides.
    #[target_feature(enable = "avx")]
    unsafe fn transpose4x8(src: *const f32, src_stride: usize, dst: *mut f32, dst_stride: usize) {
        let r: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(src.add(i * src_stride)));
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        // Each holds column c in its low half and column c + 4 in its high half.
        let cols = [
            _mm256_shuffle_ps::<0x44>(t0, t2),
            _mm256_shuffle_ps::<0xEE>(t0, t2),
            _mm256_shuffle_ps::<0x44>(t1, t3),
            _mm256_shuffle_ps::<0xEE>(t1, t3),
        ];
        for (c, v) in cols.iter().enumerate() {
            _mm_storeu_ps(dst.add(c * dst_stride), _mm256_castps256_ps128(*v));
            _mm_storeu_ps(dst.add((c + 4) * dst_stride), _mm256_extractf128_ps::<1>(*v));
        }
    }

    /// Copies the 8×8 block at `src` (rows `src_stride` floats apart) transposed to `dst`
    /// (rows `dst_stride` apart): `dst[c][r] = src[r][c]`, as two 4×8 halves.
    ///
    /// # Safety
    /// The CPU must have AVX; eight rows of eight floats must be readable at `src` and
    /// writable at `dst` with the given strides.
    #[target_feature(enable = "avx")]
    unsafe fn transpose8x8(src: *const f32, src_stride: usize, dst: *mut f32, dst_stride: usize) {
        transpose4x8(src, src_stride, dst, dst_stride);
        transpose4x8(src.add(4 * src_stride), src_stride, dst.add(4), dst_stride);
    }

    /// Packs A(ic.., pc..) (mc×kc) into `mr`-tall panels, each kc×mr (k-major), zero-padded.
    ///
    /// # Safety
    /// As for [`pack_b`].
    unsafe fn pack_a(ops: &Operands, mr: usize, ic: usize, mc: usize, pc: usize, kc: usize, dst: &mut [f32]) {
        let (a, rs, cs) = (ops.a, ops.a_rs, ops.a_cs);
        for (ip, panel) in (0..mc).step_by(mr).zip(dst.chunks_exact_mut(kc * mr)) {
            let h = mr.min(mc - ip);
            let i = ic + ip;
            if rs == 1 && h == mr {
                for (p, col) in panel.chunks_exact_mut(mr).enumerate() {
                    let src = (pc + p) * cs + i;
                    col.copy_from_slice(&a[src..src + mr]);
                }
            } else {
                // Rows of A contiguous in p (row-major A, the usual case): groups of four
                // whole rows by eight p are transposed in registers, the rest one by one.
                let (ii4, p8) = if cs == 1 && h == mr { (mr / 4 * 4, kc / 8 * 8) } else { (0, 0) };
                for ii in (0..ii4).step_by(4) {
                    for p in (0..p8).step_by(8) {
                        let src = (i + ii) * rs + pc + p;
                        assert!(src + 3 * rs + 8 <= a.len() && (p + 7) * mr + ii + 4 <= panel.len());
                        // SAFETY: the assert keeps the four 8-float rows read from `a` and the
                        // eight 4-float rows written to `panel` in bounds; the caller
                        // guarantees AVX.
                        unsafe {
                            transpose4x8(a.as_ptr().add(src), rs, panel.as_mut_ptr().add(p * mr + ii), mr)
                        };
                    }
                }
                for ii in 0..mr {
                    let p_from = if ii < ii4 { p8 } else { 0 };
                    if ii < h {
                        let base = (i + ii) * rs;
                        for p in p_from..kc {
                            panel[p * mr + ii] = a[base + (pc + p) * cs];
                        }
                    } else {
                        for p in p_from..kc {
                            panel[p * mr + ii] = 0.0;
                        }
                    }
                }
            }
        }
    }

    /// One MR×(NV·N) tile; partial tiles go through a full-size scratch tile.
    ///
    /// # Safety
    /// The CPU must have `W`'s instruction set (this is only inlined into the entry points
    /// that enable it); `ap`/`bp` hold kc·MR / kc·NR floats; `cp` addresses a rows×cols tile
    /// with row stride `ldc` that only this call touches.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn tile<W: Lanes, const MR_: usize, const NV: usize>(
        strict: bool,
        kc: usize,
        ap: *const f32,
        bp: *const f32,
        cp: *mut f32,
        ldc: usize,
        rows: usize,
        cols: usize,
        first: bool,
        last: bool,
    ) {
        let nr = NV * W::N;
        if rows == MR_ && cols == nr {
            if strict {
                kernel::<W, MR_, NV, true>(kc, ap, bp, cp, ldc, first, last);
            } else {
                kernel::<W, MR_, NV, false>(kc, ap, bp, cp, ldc, first, last);
            }
            return;
        }
        debug_assert!(MR_ * nr <= MAX_TILE);
        let mut t = [0.0f32; MAX_TILE];
        if !first {
            for r in 0..rows {
                std::ptr::copy_nonoverlapping(cp.add(r * ldc), t.as_mut_ptr().add(r * nr), cols);
            }
        }
        if strict {
            kernel::<W, MR_, NV, true>(kc, ap, bp, t.as_mut_ptr(), nr, first, last);
        } else {
            kernel::<W, MR_, NV, false>(kc, ap, bp, t.as_mut_ptr(), nr, first, last);
        }
        for r in 0..rows {
            std::ptr::copy_nonoverlapping(t.as_ptr().add(r * nr), cp.add(r * ldc), cols);
        }
    }

    /// The MR×NR microkernel (NR = NV vectors): C[MR×NR] (+)= Apanel[kc×MR]ᵀ · Bpanel[kc×NR].
    ///
    /// `first`: start from +0 instead of loading C. `last` (strict): canonicalize NaN on store.
    /// STRICT multiplies then adds (two roundings, the reference's); otherwise one FMA.
    ///
    /// # Safety
    /// As [`tile`]; `cp` addresses a full MR×NR tile with row stride `ldc`.
    #[inline(always)]
    unsafe fn kernel<W: Lanes, const MR_: usize, const NV: usize, const STRICT: bool>(
        kc: usize,
        ap: *const f32,
        bp: *const f32,
        cp: *mut f32,
        ldc: usize,
        first: bool,
        last: bool,
    ) {
        let nr = NV * W::N;
        for r in 0..MR_ {
            _mm_prefetch::<_MM_HINT_T0>(cp.add(r * ldc) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(cp.add(r * ldc + nr - 1) as *const i8);
        }
        let mut acc = [[W::zero(); NV]; MR_];
        if !first {
            for (r, row) in acc.iter_mut().enumerate() {
                for (v, a) in row.iter_mut().enumerate() {
                    *a = W::load(cp.add(r * ldc + v * W::N));
                }
            }
        }
        // One k step: NV B vectors, MR A broadcasts, MR·NV chains advanced by one product.
        #[inline(always)]
        unsafe fn step<W: Lanes, const MR_: usize, const NV: usize, const STRICT: bool>(
            acc: &mut [[W; NV]; MR_],
            ap: *const f32,
            bp: *const f32,
        ) {
            let mut b = [W::zero(); NV];
            for (v, bv) in b.iter_mut().enumerate() {
                *bv = W::load(bp.add(v * W::N));
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let av = W::splat(*ap.add(r));
                for (a, &bv) in row.iter_mut().zip(&b) {
                    *a = mul_add::<W, STRICT>(*a, av, bv);
                }
            }
        }
        let (mut ap, mut bp) = (ap, bp);
        // Unrolled by 4 (the steps still run in ascending k, each chain in order).
        for _ in 0..kc / 4 {
            _mm_prefetch::<_MM_HINT_T0>(ap.add(4 * MR_ + 64) as *const i8);
            for u in 0..4 {
                step::<W, MR_, NV, STRICT>(&mut acc, ap.add(u * MR_), bp.add(u * nr));
            }
            ap = ap.add(4 * MR_);
            bp = bp.add(4 * nr);
        }
        for _ in 0..kc % 4 {
            step::<W, MR_, NV, STRICT>(&mut acc, ap, bp);
            ap = ap.add(MR_);
            bp = bp.add(nr);
        }
        if STRICT && last {
            for row in acc.iter_mut() {
                for v in row.iter_mut() {
                    *v = canon_nan(*v);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (v, a) in row.iter().enumerate() {
                a.store(cp.add(r * ldc + v * W::N));
            }
        }
    }
}
