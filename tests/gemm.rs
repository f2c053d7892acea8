//! `exec::cpu::gemm`: strict bits equal the reference chain (scalar and AVX2, any strides, any
//! thread count, special values); fast tier close to float64 and bit-stable across runs and
//! thread counts.

use adeadvm::exec::cpu::fpenv::FtzGuard;
use adeadvm::exec::cpu::gemm::{gemm, gemm_packed, PackedB};
use adeadvm::exec::cpu::reference::{self, MatmulShape};
use adeadvm::exec::cpu::{worker_pool, Ctx, SimdLevel};
use adeadvm::isa::{Act, Tier};
use adeadvm::numerics as nx;
use proptest::prelude::*;

/// How an operand is laid out in memory.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// Rows contiguous (row stride = columns).
    RowMajor,
    /// Transposed: columns contiguous (column stride = rows).
    ColMajor,
    /// Row-major with `pad` spare elements after each row.
    Padded(usize),
}

/// (row stride, column stride, elements needed) of an r×c operand.
fn strides(l: Layout, r: usize, c: usize) -> (usize, usize, usize) {
    match l {
        Layout::RowMajor => (c, 1, r * c),
        Layout::ColMajor => (1, r, r * c),
        Layout::Padded(pad) => (c + pad, 1, r * (c + pad)),
    }
}

fn layout() -> impl Strategy<Value = Layout> {
    prop_oneof![Just(Layout::RowMajor), Just(Layout::ColMajor), (1usize..5).prop_map(Layout::Padded)]
}

/// Mostly ordinary values, with every special kind mixed in.
fn value() -> impl Strategy<Value = f32> {
    prop_oneof![
        12 => -4.0f32..4.0,
        2 => Just(0.0f32),
        2 => Just(-0.0f32),
        // Denormals of either sign.
        2 => (1u32..0x0080_0000, any::<bool>()).prop_map(|(m, s)| f32::from_bits(m | ((s as u32) << 31))),
        // Near sqrt(FLT_MIN): products land around FLT_MIN, on both sides of the flush edge.
        3 => (0.5f32..2.0, any::<bool>()).prop_map(|(x, s)| if s { -x } else { x } * 1.0842022e-19),
        // Tiny and huge magnitudes: products underflow or overflow.
        1 => 1e-30f32..1e-25,
        1 => 1e25f32..1e30,
        1 => -3e38f32..3e38,
        1 => Just(f32::INFINITY),
        1 => Just(f32::NEG_INFINITY),
        // NaN with any sign and payload.
        1 => (1u32..0x0040_0000, any::<bool>(), any::<bool>())
            .prop_map(|(p, q, s)| f32::from_bits(0x7f80_0000 | ((q as u32) << 22) | p | ((s as u32) << 31))),
    ]
}

/// The strict chain per output, written independently of the kernel: `acc = +0;
/// acc = add(acc, mul(A(i,p), B(p,j)))` for p ascending.
#[allow(clippy::too_many_arguments)]
fn strict_ref(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    (a_rs, a_cs): (usize, usize),
    b: &[f32],
    (b_rs, b_cs): (usize, usize),
) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f32;
            for p in 0..k {
                acc = nx::add(acc, nx::mul(a[i * a_rs + p * a_cs], b[p * b_rs + j * b_cs]));
            }
            c[i * n + j] = acc;
        }
    }
    c
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Index and values of the first differing element, for a readable failure.
fn first_diff(x: &[f32], y: &[f32]) -> Option<(usize, f32, f32)> {
    x.iter().zip(y).enumerate().find(|(_, (p, q))| p.to_bits() != q.to_bits()).map(|(i, (p, q))| (i, *p, *q))
}

struct Pools {
    two: rayon::ThreadPool,
    three: rayon::ThreadPool,
}

fn pools() -> &'static Pools {
    static P: std::sync::OnceLock<Pools> = std::sync::OnceLock::new();
    P.get_or_init(|| Pools { two: worker_pool(2).unwrap(), three: worker_pool(3).unwrap() })
}

/// Every context a test runs: each level available here × {no pool, 2 threads, 3 threads}.
fn contexts(tier: Tier) -> Vec<Ctx<'static>> {
    let p = pools();
    let mut levels = vec![SimdLevel::Scalar];
    for l in [SimdLevel::Avx2, SimdLevel::Avx512] {
        if SimdLevel::detect() >= l {
            levels.push(l);
        }
    }
    let mut v = Vec::new();
    for level in levels {
        for pool in [None, Some(&p.two), Some(&p.three)] {
            v.push(Ctx { level, tier, pool });
        }
    }
    v
}

#[allow(clippy::too_many_arguments)]
fn run(
    ctx: &Ctx,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    (a_rs, a_cs): (usize, usize),
    b: &[f32],
    (b_rs, b_cs): (usize, usize),
) -> Vec<f32> {
    // Garbage in the output: gemm must overwrite every element.
    let mut c = vec![f32::from_bits(0x7fbd_dead); m * n];
    gemm(ctx, m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, &mut c);
    // B packed beforehand (as a session packs a constant weight) gives the same bits.
    if let Some(packed) = PackedB::new(ctx, k, n, b, b_rs, b_cs) {
        let mut p = vec![f32::from_bits(0x7fbd_dead); m * n];
        gemm_packed(ctx, m, a, a_rs, a_cs, &packed, &mut p);
        assert!(
            bits(&p) == bits(&c),
            "{:?} {:?} threads={} m={m} n={n} k={k}: B packed beforehand differs at {:?}",
            ctx.tier,
            ctx.level,
            ctx.threads(),
            first_diff(&p, &c)
        );
    }
    c
}

/// A strict check of one problem: every context gives the reference's bits.
fn check_strict(m: usize, n: usize, k: usize, la: Layout, lb: Layout, a: &[f32], b: &[f32]) {
    let _ftz = FtzGuard::new();
    let (a_rs, a_cs, _) = strides(la, m, k);
    let (b_rs, b_cs, _) = strides(lb, k, n);
    let want = strict_ref(m, n, k, a, (a_rs, a_cs), b, (b_rs, b_cs));
    for ctx in contexts(Tier::Strict) {
        let got = run(&ctx, m, n, k, a, (a_rs, a_cs), b, (b_rs, b_cs));
        assert!(
            bits(&got) == bits(&want),
            "strict {:?} threads={} m={m} n={n} k={k} {la:?} {lb:?}: first diff {:?}",
            ctx.level,
            ctx.threads(),
            first_diff(&got, &want)
        );
    }
}

/// A deterministic xorshift stream from `seed`.
fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

/// Deterministic pseudo-random data, for the large fixed-shape tests.
fn data(len: usize, seed: u64) -> Vec<f32> {
    let mut next = xorshift(seed);
    (0..len).map(|_| ((next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0).collect()
}

fn problem() -> impl Strategy<Value = (usize, usize, usize, Layout, Layout, Vec<f32>, Vec<f32>)> {
    (1usize..70, 1usize..70, 1usize..70, layout(), layout()).prop_flat_map(|(m, n, k, la, lb)| {
        let (_, _, alen) = strides(la, m, k);
        let (_, _, blen) = strides(lb, k, n);
        (
            Just(m),
            Just(n),
            Just(k),
            Just(la),
            Just(lb),
            prop::collection::vec(value(), alen),
            prop::collection::vec(value(), blen),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Strict: scalar and AVX2, 1/2/3 threads, any strides, special values: the reference bits.
    #[test]
    fn strict_matches_reference_chain((m, n, k, la, lb, a, b) in problem()) {
        check_strict(m, n, k, la, lb, &a, &b);
    }

    /// Fast: within float64-derived error bounds, and the same bits on every run and thread
    /// count (per level).
    #[test]
    fn fast_close_and_deterministic(
        (m, n, k, la, lb) in (1usize..70, 1usize..70, 1usize..70, layout(), layout()),
        seed in any::<u64>(),
    ) {
        let (a_rs, a_cs, alen) = strides(la, m, k);
        let (b_rs, b_cs, blen) = strides(lb, k, n);
        let (a, b) = (data(alen, seed), data(blen, seed ^ 0x5555));
        check_fast(m, n, k, &a, (a_rs, a_cs), &b, (b_rs, b_cs));
    }
}

fn check_fast(m: usize, n: usize, k: usize, a: &[f32], sa: (usize, usize), b: &[f32], sb: (usize, usize)) {
    let mut first_by_level: Vec<(SimdLevel, Vec<u32>)> = Vec::new();
    for ctx in contexts(Tier::Fast) {
        let got = run(&ctx, m, n, k, a, sa, b, sb);
        let again = run(&ctx, m, n, k, a, sa, b, sb);
        assert_eq!(bits(&got), bits(&again), "fast tier differs from run to run");
        match first_by_level.iter().find(|(l, _)| *l == ctx.level) {
            Some((_, want)) => {
                assert!(*want == bits(&got), "fast {:?}: bits depend on the thread count", ctx.level)
            }
            None => first_by_level.push((ctx.level, bits(&got))),
        }
        for i in 0..m {
            for j in 0..n {
                let (mut exact, mut mag) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let prod = a[i * sa.0 + p * sa.1] as f64 * b[p * sb.0 + j * sb.1] as f64;
                    exact += prod;
                    mag += prod.abs();
                }
                let err = (got[i * n + j] as f64 - exact).abs();
                let bound = (k as f64 + 2.0) * f32::EPSILON as f64 * mag + 1e-30;
                assert!(err <= bound, "fast C({i},{j}) = {} vs {exact} (bound {bound})", got[i * n + j]);
            }
        }
    }
}

/// Shapes past one KC (256) and MC (144) block, tails everywhere, large enough to be split
/// over threads, by rows (tall) and by columns (wide and short).
#[test]
fn strict_large_blocked_and_threaded() {
    for &(m, n, k) in &[(301, 203, 600), (7, 1100, 300), (150, 37, 520)] {
        for (la, lb) in [(Layout::RowMajor, Layout::RowMajor), (Layout::ColMajor, Layout::ColMajor)] {
            let (_, _, alen) = strides(la, m, k);
            let (_, _, blen) = strides(lb, k, n);
            let mut a = data(alen, 7);
            let mut b = data(blen, 8);
            // Sprinkle specials so later KC chunks see NaN/inf/denormal partial sums.
            a[alen / 3] = f32::NAN;
            a[alen / 2] = 1e-39;
            b[blen / 5] = f32::INFINITY;
            b[blen / 4] = -0.0;
            check_strict(m, n, k, la, lb, &a, &b);
        }
    }
}

#[test]
fn fast_large_thread_invariant() {
    for &(m, n, k) in &[(301, 203, 600), (7, 1100, 300), (200, 200, 40)] {
        let (a, b) = (data(m * k, 1), data(k * n, 2));
        check_fast(m, n, k, &a, (k, 1), &b, (n, 1));
        let (a, b) = (data(m * k, 3), data(k * n, 4));
        check_fast(m, n, k, &a, (1, m), &b, (1, k));
    }
}

/// The MATMUL geometry of op(a) [m, k] times op(b) [k, n], stored transposed as `ta`/`tb` say.
fn matmul_shape(m: usize, n: usize, k: usize, ta: bool, tb: bool) -> MatmulShape {
    MatmulShape {
        a: if ta { vec![k, m] } else { vec![m, k] },
        b: if tb { vec![n, k] } else { vec![k, n] },
        out: vec![m, n],
        ta,
        tb,
    }
}

/// The VM's reference matmul (with transposed operands) agrees with the AVX2 strict kernel.
#[test]
fn strict_matches_reference_matmul() {
    let _ftz = FtzGuard::new();
    let (m, n, k) = (37, 45, 300);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let (a, b) = (data(m * k, 11), data(k * n, 12));
        let g = matmul_shape(m, n, k, ta, tb);
        let mut want = vec![0.0f32; m * n];
        reference::matmul(&g, &a, &b, None, Act::None, &mut want);
        let (a_rs, a_cs) = if ta { (1, m) } else { (k, 1) };
        let (b_rs, b_cs) = if tb { (1, k) } else { (n, 1) };
        for ctx in contexts(Tier::Strict) {
            let got = run(&ctx, m, n, k, &a, (a_rs, a_cs), &b, (b_rs, b_cs));
            assert!(
                bits(&got) == bits(&want),
                "ta={ta} tb={tb} {:?}: {:?}",
                ctx.level,
                first_diff(&got, &want)
            );
        }
    }
}

#[test]
fn k_zero_gives_positive_zero() {
    for tier in [Tier::Strict, Tier::Fast] {
        for ctx in contexts(tier) {
            let got = run(&ctx, 5, 9, 0, &[], (0, 1), &[], (9, 1));
            assert!(got.iter().all(|x| x.to_bits() == 0));
        }
    }
}

/// All-negative-zero products still give +0 (the chain starts from +0), and inf·0 gives the
/// canonical NaN.
#[test]
fn signed_zero_and_canonical_nan() {
    let _ftz = FtzGuard::new();
    let (m, n, k) = (13, 33, 5);
    let a = vec![-0.0f32; m * k];
    let b = vec![1.0f32; k * n];
    let mut b2 = b.clone();
    b2[0] = f32::INFINITY;
    for ctx in contexts(Tier::Strict) {
        let got = run(&ctx, m, n, k, &a, (k, 1), &b, (n, 1));
        assert!(got.iter().all(|x| x.to_bits() == 0), "{:?}", ctx.level);
        let got = run(&ctx, m, n, k, &a, (k, 1), &b2, (n, 1));
        assert_eq!(got[0].to_bits(), nx::CANONICAL_NAN);
        assert_eq!(got[n].to_bits(), nx::CANONICAL_NAN);
    }
}

/// The kernel enters flush-to-zero itself: a caller without the guard still gets strict bits
/// (denormal inputs and products near FLT_MIN).
#[test]
fn strict_without_caller_ftz() {
    let (m, n, k) = (19, 21, 40);
    // Products ~1e-38: denormal unless flushed, so their sum tells FTZ from no FTZ.
    let a: Vec<f32> = (0..m * k)
        .map(|i| if i % 11 == 0 { 1e-39 } else { 1e-19 * (1.0 + (i % 7) as f32 / 100.0) })
        .collect();
    let b: Vec<f32> = (0..k * n)
        .map(|i| if i % 13 == 0 { -2e-39 } else { 1e-19 * (1.0 + (i % 5) as f32 / 50.0) })
        .collect();
    let want = strict_ref(m, n, k, &a, (k, 1), &b, (n, 1));
    for ctx in contexts(Tier::Strict) {
        let got = run(&ctx, m, n, k, &a, (k, 1), &b, (n, 1));
        assert!(bits(&got) == bits(&want), "{:?}: {:?}", ctx.level, first_diff(&got, &want));
    }
}

/// f16 values of every class (widened), from `data`'s generator: normals of any exponent,
/// subnormals, ±0, ±65504, ±inf and NaN.
fn f16_data(len: usize, seed: u64) -> Vec<f32> {
    let mut next = xorshift(seed);
    (0..len)
        .map(|_| {
            let r = (next() >> 32) as u32;
            let sign = ((r >> 31) as u16) << 15;
            let bits = match (r >> 20) % 128 {
                0 => [0x0000, 0x7bff, 0x7c00, 0x7e01][(r as usize) % 4] | sign,
                1..=12 => sign | ((r as u16 % 1023) + 1),
                _ => sign | ((((r >> 10) % 30 + 1) as u16) << 10) | (r as u16 & 0x3ff),
            };
            nx::f16_bits_to_f32(bits)
        })
        .collect()
}

/// The strict tier's MATMUL of f16 values runs the FMA kernel (numerics::fma_chain_is_dot) and
/// still gives the reference's bits in every context, transposed or not, with bias and RELU;
/// a control labelling general f32 values as f16 differs where the kernel really fuses.
#[test]
fn strict_f16_matmul_on_the_fma_kernel_is_the_reference() {
    use adeadvm::exec::cpu::matmul;
    use adeadvm::isa::DType;
    for ((m, n, k), (ta, tb), relu) in
        [((70, 50, 300), (false, false), false), ((13, 33, 129), (true, true), true)]
    {
        let g = matmul_shape(m, n, k, ta, tb);
        let act = if relu { Act::Relu } else { Act::None };
        let bias = data(n, 9);
        let bias_shape = [n];
        let (a, b) = (f16_data(m * k, 1), f16_data(k * n, 2));
        let mut want = vec![0.0f32; m * n];
        reference::matmul(&g, &a, &b, Some((&bias, &bias_shape)), act, &mut want);
        for ctx in contexts(Tier::Strict) {
            let mut got = vec![f32::from_bits(0x7fbd_dead); m * n];
            matmul(
                &ctx,
                &g,
                DType::F16,
                &a,
                adeadvm::exec::cpu::MatB::F32(&b),
                Some((&bias, &bias_shape)),
                act,
                &mut got,
            );
            assert!(
                bits(&got) == bits(&want),
                "{g:?} at {:?} on {} threads: first difference {:?}",
                ctx.level,
                ctx.threads(),
                first_diff(&got, &want)
            );
        }
        // Control: the same path on general f32 values is the fast tier's, not the reference.
        let (a, b) = (data(m * k, 3), data(k * n, 4));
        reference::matmul(&g, &a, &b, None, Act::None, &mut want);
        for ctx in contexts(Tier::Strict).into_iter().filter(|c| c.level >= SimdLevel::Avx2) {
            let mut got = vec![0.0f32; m * n];
            matmul(&ctx, &g, DType::F16, &a, adeadvm::exec::cpu::MatB::F32(&b), None, Act::None, &mut got);
            assert!(
                bits(&got) != bits(&want),
                "{g:?} at {:?}: the control agreed with the reference",
                ctx.level
            );
        }
    }
}

/// MATMUL's bias and activation (applied in place, a block of rows at a time, split over the
/// pool) give the reference's bits in the strict tier for every epilogue: bias only, activation
/// only, both; with outputs of many blocks and a row length that does not divide a block.
#[test]
fn strict_matmul_epilogue_over_many_blocks_is_the_reference() {
    use adeadvm::exec::cpu::matmul;
    use adeadvm::isa::DType;
    let (m, n, k) = (150, 1000, 24);
    let g = matmul_shape(m, n, k, false, true);
    let (a, b) = (data(m * k, 11), data(k * n, 12));
    let bias = data(n, 13);
    let bias_shape = [n];
    for (with_bias, act) in [(true, Act::None), (false, Act::Gelu), (true, Act::Gelu), (true, Act::Relu)] {
        let bias = with_bias.then_some((&bias[..], &bias_shape[..]));
        let mut want = vec![0.0f32; m * n];
        reference::matmul(&g, &a, &b, bias, act, &mut want);
        for ctx in contexts(Tier::Strict) {
            let mut got = vec![f32::from_bits(0x7fbd_dead); m * n];
            matmul(&ctx, &g, DType::F32, &a, adeadvm::exec::cpu::MatB::F32(&b), bias, act, &mut got);
            assert!(
                bits(&got) == bits(&want),
                "bias {with_bias}, {act:?} at {:?} on {} threads: first difference {:?}",
                ctx.level,
                ctx.threads(),
                first_diff(&got, &want)
            );
        }
    }
}

/// A few rows times a transposed B (a decode step's projections), where the matrix-vector
/// kernel runs: strict, the reference chain's bits at every level and thread count, with special
/// values planted; fast, each row's bits the same as in a product of 40 rows (the packed
/// kernel), so a sequence's result does not depend on how many rows its batch has.
#[test]
fn few_rows_times_transposed_b_keep_the_chains() {
    let specials =
        [0.0, -0.0, 1e-40, -3e-39, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 3e38, 1.0842022e-19];
    for m in 1..=8usize {
        for &k in &[8usize, 13, 64, 67] {
            for &n in &[1usize, 7, 8, 9, 33] {
                let mut a = data(m * k, (m * 1000 + k * 10 + n) as u64);
                let mut b = data(n * k, (m * 7 + k * 3 + n) as u64 ^ 0xabc);
                for (t, s) in specials.iter().enumerate() {
                    if (m + k + n + t) % 3 == 0 {
                        let (ia, ib) = ((t * 31) % a.len(), (t * 17 + 5) % b.len());
                        a[ia] = *s;
                        b[ib] = *s;
                    }
                }
                // A row-major [m, k]; B transposed: B(p, j) = b[j * k + p].
                check_strict(m, n, k, Layout::RowMajor, Layout::ColMajor, &a, &b);
            }
        }
    }
    let (k, n) = (67, 45);
    let a = data(40 * k, 1);
    let b = data(n * k, 2);
    for ctx in contexts(Tier::Fast) {
        let all = run(&ctx, 40, n, k, &a, (k, 1), &b, (1, k));
        for m in [1usize, 3, 8] {
            let few = run(&ctx, m, n, k, &a[..m * k], (k, 1), &b, (1, k));
            assert!(
                bits(&few) == bits(&all[..m * n]),
                "fast {:?} x{}: {m} rows differ from the same rows in a product of 40",
                ctx.level,
                ctx.threads()
            );
        }
    }
}

/// The threaded driver on shapes past its blocks: more rows of A than it packs at a time
/// (2304), more columns than one B block (4096), a K past one KC block, and a 16-thread pool
/// (a grid of tiles wider than the 2- and 3-thread pools make). Strict: the reference bits;
/// fast: the single-threaded bits.
#[test]
fn threaded_driver_row_and_column_blocks() {
    let _ftz = FtzGuard::new();
    let sixteen = worker_pool(16).unwrap();
    for &(m, n, k) in &[(2400, 24, 40), (13, 4200, 20), (40, 300, 900)] {
        for (la, lb) in [(Layout::RowMajor, Layout::ColMajor), (Layout::ColMajor, Layout::RowMajor)] {
            let (a_rs, a_cs, alen) = strides(la, m, k);
            let (b_rs, b_cs, blen) = strides(lb, k, n);
            let mut a = data(alen, 11);
            let b = data(blen, 12);
            a[alen / 2] = f32::NAN;
            let want = strict_ref(m, n, k, &a, (a_rs, a_cs), &b, (b_rs, b_cs));
            for level in [SimdLevel::Avx2, SimdLevel::Avx512] {
                if SimdLevel::detect() < level {
                    continue;
                }
                let threaded = |tier| Ctx { level, tier, pool: Some(&sixteen) };
                let inline = |tier| Ctx { level, tier, pool: None };
                let got = run(&threaded(Tier::Strict), m, n, k, &a, (a_rs, a_cs), &b, (b_rs, b_cs));
                assert!(
                    bits(&got) == bits(&want),
                    "strict {level:?} m={m} n={n} k={k}: first diff {:?}",
                    first_diff(&got, &want)
                );
                let fast = run(&threaded(Tier::Fast), m, n, k, &a, (a_rs, a_cs), &b, (b_rs, b_cs));
                let one = run(&inline(Tier::Fast), m, n, k, &a, (a_rs, a_cs), &b, (b_rs, b_cs));
                assert!(
                    bits(&fast) == bits(&one),
                    "fast {level:?} m={m} n={n} k={k}: bits depend on the thread count"
                );
            }
        }
    }
}

/// B packed once for a session's products ([`PackedB`]): past one block of columns (NC =
/// 4096) and one KC slice (256 for AVX2, 384 for AVX-512), ragged at every edge, on one
/// thread and a grid over 16 (tall: row blocks; short: column groups): the strict bits are
/// the reference's and the fast bits those of the kernel that packs as it goes.
#[test]
fn weights_packed_beforehand_keep_the_bits() {
    let _ftz = FtzGuard::new();
    let sixteen = worker_pool(16).unwrap();
    for &(m, n, k) in &[(37, 4200, 400), (300, 70, 800), (9, 4130, 33), (150, 4097, 1)] {
        for lb in [Layout::RowMajor, Layout::ColMajor] {
            let (b_rs, b_cs, blen) = strides(lb, k, n);
            let (mut a, mut b) = (data(m * k, 31), data(blen, 32));
            a[m * k / 2] = f32::NAN;
            b[blen / 3] = 1e-39;
            let want = strict_ref(m, n, k, &a, (k, 1), &b, (b_rs, b_cs));
            for level in [SimdLevel::Avx2, SimdLevel::Avx512] {
                if SimdLevel::detect() < level {
                    continue;
                }
                for pool in [None, Some(&sixteen)] {
                    for tier in [Tier::Strict, Tier::Fast] {
                        let ctx = Ctx { level, tier, pool };
                        let packed = PackedB::new(&ctx, k, n, &b, b_rs, b_cs).expect("packs");
                        let mut got = vec![f32::from_bits(0x7fbd_dead); m * n];
                        gemm_packed(&ctx, m, &a, k, 1, &packed, &mut got);
                        let mut unpacked = vec![0.0; m * n];
                        gemm(&ctx, m, n, k, &a, k, 1, &b, b_rs, b_cs, &mut unpacked);
                        let want = if tier == Tier::Strict { &want } else { &unpacked };
                        assert!(
                            bits(&got) == bits(want),
                            "{tier:?} {level:?} threads={} m={m} n={n} k={k} {lb:?}: first diff {:?}",
                            ctx.threads(),
                            first_diff(&got, want)
                        );
                    }
                }
            }
        }
    }
}

/// Batched products too small to split one by one go side by side on a pool of 4 threads or
/// more: with a broadcast batch axis and `tb` (attention's shapes), the strict bits are the
/// reference's and the fast bits those of the products run in line.
#[test]
fn batched_small_products_side_by_side() {
    use adeadvm::exec::cpu::{matmul, MatB};
    use adeadvm::isa::DType;
    let _ftz = FtzGuard::new();
    let eight = worker_pool(8).unwrap();
    let (batch, heads, m, n, k) = (3, 6, 40, 48, 32);
    let g = MatmulShape {
        a: vec![batch, heads, m, k],
        b: vec![1, heads, n, k],
        out: vec![batch, heads, m, n],
        ta: false,
        tb: true,
    };
    let (a, mut b) = (data(batch * heads * m * k, 21), data(heads * n * k, 22));
    b[7] = f32::NAN;
    let mut want = vec![0.0f32; batch * heads * m * n];
    reference::matmul(&g, &a, &b, None, Act::None, &mut want);
    for level in [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512] {
        if SimdLevel::detect() < level {
            continue;
        }
        let go = |tier, pool| {
            let mut out = vec![f32::from_bits(0x7fbd_dead); want.len()];
            matmul(&Ctx { level, tier, pool }, &g, DType::F32, &a, MatB::F32(&b), None, Act::None, &mut out);
            out
        };
        let strict = go(Tier::Strict, Some(&eight));
        assert!(bits(&strict) == bits(&want), "strict {level:?}: {:?}", first_diff(&strict, &want));
        assert!(bits(&go(Tier::Fast, Some(&eight))) == bits(&go(Tier::Fast, None)), "fast {level:?}");
    }
}
