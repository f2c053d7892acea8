//! The CPU executor.
//!
//! - `reference`: the scalar strict implementation of every opcode; everything else must give
//!   its bits in the strict tier.
//! - `fpenv`: the flush-to-zero mode (MXCSR FTZ+DAZ) strict SIMD kernels run in.
//! - [`SimdLevel`]: which vector instructions kernels may use, detected once with raw-cpuid;
//!   `ADEADVM_SIMD=scalar|avx2|avx512` forces a lower level (for tests and comparisons).
//! - [`Ctx`]: what a kernel call needs besides its data: level, tier and the worker pool.
//!
//! Threading rule: work is split into chunks whose results do not depend on how many there are
//! (each output element is computed by exactly one chunk, in the same order whatever the split),
//! so results never depend on the thread count.

pub mod fpenv;
pub mod gemm;
pub mod reference;
pub mod simd;

use crate::isa::Tier;

/// Vector instruction sets a kernel may use, in increasing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimdLevel {
    /// Plain scalar code (the reference paths).
    Scalar,
    /// AVX2 and FMA (FMA only in the fast tier).
    Avx2,
    /// AVX-512 F, BW, DQ and VL.
    Avx512,
}

impl SimdLevel {
    /// The name used by `ADEADVM_SIMD` and `adeadvm info`.
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Scalar => "scalar",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }

    /// The best level this CPU supports.
    pub fn detect() -> SimdLevel {
        #[cfg(target_arch = "x86_64")]
        {
            let cpu = raw_cpuid::CpuId::new();
            let f = cpu.get_feature_info();
            let e = cpu.get_extended_feature_info();
            let os_avx = f.as_ref().is_some_and(|f| f.has_oxsave() && f.has_avx());
            let avx2 =
                os_avx && f.as_ref().is_some_and(|f| f.has_fma()) && e.as_ref().is_some_and(|e| e.has_avx2());
            let avx512 = avx2
                && e.as_ref().is_some_and(|e| {
                    e.has_avx512f() && e.has_avx512bw() && e.has_avx512dq() && e.has_avx512vl()
                });
            // raw-cpuid reports what the CPU has; std's detection also checks that the OS saves
            // the wide registers (XCR0), which AVX-512 needs.
            if avx512 && std::arch::is_x86_feature_detected!("avx512f") {
                return SimdLevel::Avx512;
            }
            if avx2
                && std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return SimdLevel::Avx2;
            }
        }
        SimdLevel::Scalar
    }

    /// The level to use: the detected one, lowered by `ADEADVM_SIMD` if set (a request for
    /// more than the CPU has is clamped to what it has).
    pub fn from_env() -> SimdLevel {
        let best = SimdLevel::detect();
        match std::env::var("ADEADVM_SIMD").ok().as_deref() {
            Some("scalar") => SimdLevel::Scalar,
            Some("avx2") => best.min(SimdLevel::Avx2),
            _ => best,
        }
    }
}

/// What a kernel call needs besides its data.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    pub level: SimdLevel,
    pub tier: Tier,
    /// Worker pool for splitting large kernels; None runs on the calling thread only.
    pub pool: Option<&'a rayon::ThreadPool>,
}

impl Ctx<'_> {
    /// Scalar, strict, single-threaded: the reference configuration.
    pub fn reference() -> Ctx<'static> {
        Ctx { level: SimdLevel::Scalar, tier: Tier::Strict, pool: None }
    }
    /// Threads available for splitting (1 without a pool).
    pub fn threads(&self) -> usize {
        self.pool.map_or(1, |p| p.current_num_threads())
    }
}

/// A worker pool of `threads` threads, each in flush-to-zero mode.
pub fn worker_pool(threads: usize) -> Result<rayon::ThreadPool, rayon::ThreadPoolBuildError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("adeadvm-cpu-{i}"))
        .start_handler(|_| fpenv::enter_ftz_for_thread())
        .build()
}

use crate::isa::Act;
use reference::{for_each_broadcast, MatmulShape, Unary};

/// MATMUL's `b` as the CPU executor reads it: f32 values, a block-quantized `[N, K]`
/// constant (read with `tb`; the verifier allows it nowhere else), or a two-axis f32 matrix
/// packed beforehand for the blocked kernels (a constant the session multiplies by on every
/// run; the same bits as `F32`).
#[derive(Clone, Copy)]
pub enum MatB<'a> {
    F32(&'a [f32]),
    Blocks { format: crate::isa::BlockFormat, bytes: &'a [u8] },
    Packed(&'a gemm::PackedB),
}

/// MATMUL on the CPU: `gemm` for each (broadcast) batch, then the epilogue in the reference's
/// order: `acc = add(acc, bias)`, then the activation. Gives `reference::matmul`'s bits in the
/// strict tier at every SIMD level and thread count. `operands` is the type whose values `a`
/// and `b` both hold (widened): for f16 the strict tier takes the FMA kernel, whose chains
/// give the strict bits there once canonicalized (`numerics::fma_chain_is_dot`). A
/// block-quantized `b` gives the bits of the same call on its dequantized values
/// (`gemm::gemm_blocks`).
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    ctx: &Ctx,
    g: &MatmulShape,
    operands: crate::isa::DType,
    a: &[f32],
    b: MatB,
    bias: Option<(&[f32], &[usize])>,
    act: Act,
    out: &mut [f32],
) {
    if out.is_empty() {
        // M, N or a batch axis is 0: nothing to compute (and the epilogue's blocks are whole
        // rows of N, so N = 0 would divide by zero there).
        return;
    }
    let exact = ctx.tier == Tier::Strict && crate::numerics::fma_chain_is_dot(operands);
    let gemm_ctx = if exact { Ctx { tier: Tier::Fast, ..*ctx } } else { *ctx };
    let r = g.out.len();
    let (m, n) = (g.out[r - 2], g.out[r - 1]);
    let k = if g.ta { g.a[g.a.len() - 2] } else { g.a[g.a.len() - 1] };
    // Element (i, p) of op(a) and (p, j) of op(b) as strides into one batch's matrix.
    let (a_rs, a_cs) = if g.ta { (1, m) } else { (k, 1) };
    let (b_rs, b_cs) = if g.tb { (1, k) } else { (n, 1) };
    let (a_batch, b_batch) = (&g.a[..g.a.len() - 2], &g.b[..g.b.len() - 2]);
    match b {
        MatB::Blocks { format, bytes } if !g.ta => {
            // b is one [N, K] matrix (no batch axes), so the rows of every batch of a are one
            // [batch·M, K] matrix: one pass over the weights for all of them.
            let rows = out.len() / n;
            gemm::gemm_blocks(&gemm_ctx, rows, n, k, &a[..rows * k], k, 1, format, bytes, out);
        }
        MatB::Blocks { format, bytes } => {
            let mut batch = 0usize;
            for_each_broadcast(&g.out[..r - 2], [a_batch], |_, [ab]| {
                let c = &mut out[batch * m * n..(batch + 1) * m * n];
                gemm::gemm_blocks(
                    &gemm_ctx,
                    m,
                    n,
                    k,
                    &a[ab * m * k..(ab + 1) * m * k],
                    a_rs,
                    a_cs,
                    format,
                    bytes,
                    c,
                );
                batch += 1;
            });
        }
        MatB::Packed(packed) if !g.ta => {
            // As for blocks: b has no batch axes, so every batch of a is one [batch·M, K]
            // matrix and one call covers them all.
            let rows = out.len() / n;
            gemm::gemm_packed(&gemm_ctx, rows, &a[..rows * k], k, 1, packed, out);
        }
        MatB::Packed(packed) => {
            for (batch, c) in out.chunks_mut(m * n).enumerate() {
                gemm::gemm_packed(
                    &gemm_ctx,
                    m,
                    &a[batch * m * k..(batch + 1) * m * k],
                    a_rs,
                    a_cs,
                    packed,
                    c,
                );
            }
        }
        MatB::F32(b) => {
            let mut pairs = Vec::new();
            for_each_broadcast(&g.out[..r - 2], [a_batch, b_batch], |_, [ab, bb]| pairs.push((ab, bb)));
            let one = |c: &mut [f32], (ab, bb): (usize, usize), ctx: &Ctx| {
                gemm::gemm(
                    ctx,
                    m,
                    n,
                    k,
                    &a[ab * m * k..(ab + 1) * m * k],
                    a_rs,
                    a_cs,
                    &b[bb * k * n..(bb + 1) * k * n],
                    b_rs,
                    b_cs,
                    c,
                )
            };
            match gemm_ctx.pool {
                // Many products too small to be split themselves (attention's per-head
                // products, 128×128×32 for MiniLM) go side by side, one a task: each is the
                // same call as in line, so the bits are too. On 2 threads this was measured
                // slower (4.1 ms against 2.8 for 20 such products: waking the other worker
                // cost more than it gave), so it takes 4 threads or more; on a 16-core host
                // the products in line were most of MiniLM's attention time.
                Some(pool)
                    if pool.current_num_threads() >= 4
                        && pairs.len() > 1
                        && m * n * k < gemm::PAR_MIN_WORK
                        && pairs.len() * m * n * k >= gemm::PAR_MIN_WORK =>
                {
                    use rayon::prelude::*;
                    let inline = Ctx { pool: None, ..gemm_ctx };
                    pool.install(|| {
                        out[..pairs.len() * m * n]
                            .par_chunks_mut(m * n)
                            .zip(pairs.par_iter())
                            .for_each(|(c, &pair)| one(c, pair, &inline))
                    });
                }
                _ => {
                    for (c, &pair) in out.chunks_mut(m * n).zip(&pairs) {
                        one(c, pair, &gemm_ctx);
                    }
                }
            }
        }
    }
    if exact {
        // What the strict kernel does as it stores its chains' ends.
        out.iter_mut().for_each(|v| *v = crate::numerics::canon(*v));
    }
    // A bias of one value a column goes with the activation, a block of rows at a time;
    // any other broadcast takes the reference's walk first.
    let row_bias = match bias {
        Some((bv, bs)) if bs == [n] && n > 0 => Some(bv),
        Some((bv, bs)) => {
            for_each_broadcast(&g.out, [bs], |o, [j]| out[o] = crate::numerics::add(out[o], bv[j]));
            None
        }
        None => None,
    };
    let op = match act {
        Act::None => None,
        Act::Relu => Some(Unary::Relu),
        Act::Gelu => Some(Unary::Gelu),
    };
    if row_bias.is_some() || op.is_some() {
        epilogue(ctx, n, row_bias, op, out);
    }
}

/// Floats of output one epilogue block covers (whole rows; a longer row is its own block):
/// small enough that the block and its copy stay in L1 and L2 between the two passes.
const EPILOGUE_BLOCK: usize = 8192;

std::thread_local! {
    /// The copy of one epilogue block that the out-of-place SIMD kernels read from.
    static EPILOGUE_TMP: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `out = act(out + bias)` over rows of `n`, in place: each block of rows goes through the
/// SIMD add (bias broadcast along the rows) and then the SIMD unary, both of which give the
/// reference's bits in the strict tier. Blocks are independent, so the split among threads
/// changes nothing. (Copying the whole output for the activation, as before, cost a fresh
/// page-faulted allocation a call: GELU after MiniLM's 128×1536 MATMUL took 0.7 ms, 0.2 of
/// it the GELU.)
fn epilogue(ctx: &Ctx, n: usize, bias: Option<&[f32]>, op: Option<Unary>, out: &mut [f32]) {
    if n == 0 {
        return; // no columns, so no output (`matmul` does not call this then)
    }
    let rows_per = (EPILOGUE_BLOCK / n).max(1);
    let inline = Ctx { pool: None, ..*ctx };
    let block = |o: &mut [f32]| {
        EPILOGUE_TMP.with(|tmp| {
            let mut tmp = tmp.borrow_mut();
            tmp.resize(o.len(), 0.0);
            let tmp = &mut tmp[..o.len()];
            let shape = [o.len() / n, n];
            let add_bias = |bv: &[f32], dst: &mut [f32], src: &[f32]| {
                simd::binary(&inline, reference::Binary::Add, src, &shape, bv, &[n], dst, &shape)
            };
            // The block passes through `tmp` once: bias into it, the activation back out.
            match (bias, op) {
                (Some(bv), Some(op)) => {
                    add_bias(bv, tmp, o);
                    simd::unary(&inline, op, tmp, o);
                }
                (Some(bv), None) => {
                    add_bias(bv, tmp, o);
                    o.copy_from_slice(tmp);
                }
                (None, Some(op)) => {
                    tmp.copy_from_slice(o);
                    simd::unary(&inline, op, tmp, o);
                }
                (None, None) => {}
            }
        })
    };
    match ctx.pool {
        Some(pool) if pool.current_num_threads() > 1 && out.len() >= 2 * rows_per * n => {
            use rayon::prelude::*;
            pool.install(|| out.par_chunks_mut(rows_per * n).for_each(block));
        }
        _ => out.chunks_mut(rows_per * n).for_each(block),
    }
}
