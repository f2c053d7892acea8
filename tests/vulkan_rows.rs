//! The Vulkan row and contraction kernels (`exec::vulkan::ops::rows`: MATMUL, SOFTMAX,
//! LAYERNORM, RMSNORM, REDUCE_SUM/MEAN/MAX) against the CPU reference, bit for bit (strict tier),
//! on random shapes (odd sizes, rows longer than 256 and not multiples of it, m/n/k across tile
//! edges, batch broadcasting, transposes, bias and mask broadcasting, every reduction axis) and
//! values (denormals, ±inf, NaN payloads, -0.0, large magnitudes).
//!
//! With no Vulkan device these tests print "skipped: ..." and pass, unless
//! ADEADVM_REQUIRE_VULKAN=1 (CI), where a missing device fails them.

mod common;

use adeadvm::exec::cpu::reference::{self, MatmulShape, Reduce};
use adeadvm::exec::vulkan::ops::rows::{self, GemmTile, Tuning};
use adeadvm::exec::vulkan::{self, Recorder, Slice, VulkanError, VulkanExec, SHADERS};
use adeadvm::isa::{Act, DType, Tier};
use common::vk::exec;
use proptest::prelude::*;

/// Deterministic pseudo-random bits (splitmix-like), so failures reproduce from the seed.
fn mix(mut x: u64) -> u32 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) as u32
}

/// Values that exercise the strict rules: zeros of both signs, denormals, FLT_MIN and its
/// neighbours, infinities, NaNs with payloads, the largest finite values.
const SPECIALS: &[u32] = &[
    0x0000_0000,
    0x8000_0000,
    0x0000_0001,
    0x8000_0001,
    0x007f_ffff,
    0x807f_ffff,
    0x0080_0000,
    0x8080_0000,
    0x0080_0001,
    0x7f80_0000,
    0xff80_0000,
    0x7fc0_0000,
    0xffc0_1234,
    0x7f80_0001,
    0x7f7f_ffff,
    0xff7f_ffff,
    0x5f80_0000,
    0xdf00_0000,
    0x3f80_0000,
    0x1e3c_e508,
];

/// Draw `i` of the values from `seed`.
fn draw(seed: u64, i: usize) -> u32 {
    mix(seed.wrapping_mul(0x1_0000_0001).wrapping_add(i as u64))
}

/// A moderate normal (|v| in [2^-8, 2^8)) from a draw.
fn moderate(r: u32) -> f32 {
    f32::from_bits((r & 0x807f_ffff) | ((119 + (r >> 8) % 16) << 23))
}

/// `len` values from `seed`: mostly moderate normals (|v| in [2^-8, 2^8)), a few of huge or tiny
/// magnitude, and a `spice` per mille of [`SPECIALS`].
fn values(seed: u64, len: usize, spice: u32) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let r = draw(seed, i);
            let pick = mix(u64::from(r) ^ 0x5555) % 1000;
            if pick < spice {
                return f32::from_bits(SPECIALS[(r as usize >> 3) % SPECIALS.len()]);
            }
            if pick < spice + 10 {
                return f32::from_bits((r & 0x807f_ffff) | (((r >> 8) % 254 + 1) << 23));
            }
            moderate(r)
        })
        .collect()
}

/// `len` moderate normals from `seed` (no special or extreme values): sums of them stay finite.
fn moderate_values(seed: u64, len: usize) -> Vec<f32> {
    (0..len).map(|i| moderate(draw(seed, i))).collect()
}

fn upload(ex: &VulkanExec, rec: &mut Recorder, v: &[f32]) -> Slice {
    ex.upload(rec, bytemuck::cast_slice(v)).unwrap()
}

fn fetch(ex: &VulkanExec, rec: &mut Recorder, s: &Slice) -> Vec<f32> {
    bytemuck::pod_collect_to_vec(&ex.fetch(rec, s).unwrap())
}

/// Fails with the first differing element (as bits) unless `got` is `want` bit for bit.
fn same_bits(what: &str, want: &[f32], got: &[f32]) -> Result<(), TestCaseError> {
    prop_assert_eq!(want.len(), got.len(), "{}: length", what);
    let bad: Vec<usize> = (0..want.len()).filter(|&i| want[i].to_bits() != got[i].to_bits()).collect();
    if let Some(&i) = bad.first() {
        return Err(TestCaseError::fail(format!(
            "{what}: {} of {} results differ from the CPU reference; first at {i}: cpu {:#010x} ({}), vulkan {:#010x} ({})",
            bad.len(),
            want.len(),
            want[i].to_bits(),
            want[i],
            got[i].to_bits(),
            got[i]
        )));
    }
    Ok(())
}

fn check(r: Result<(), TestCaseError>) {
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// One matmul on the GPU and on the CPU reference; Err names the case.
fn matmul_case(
    ex: &VulkanExec,
    g: &MatmulShape,
    act: Act,
    bias_shape: Option<&[usize]>,
    (seed, spice): (u64, u32),
    tuning: &Tuning,
) -> Result<(), TestCaseError> {
    let count = |s: &[usize]| s.iter().product::<usize>();
    let a = values(seed, count(&g.a), spice);
    let b = values(seed + 1, count(&g.b), spice);
    let bias = bias_shape.map(|s| values(seed + 2, count(s), spice));
    let mut want = vec![0.0f32; count(&g.out)];
    reference::matmul(g, &a, &b, bias.as_deref().zip(bias_shape), act, &mut want);
    if tuning.gemm.is_some_and(|t| t.unusable_on(ex.device().info()).is_some()) {
        return Ok(()); // a geometry this device cannot run (see `tiles`)
    }
    let mut rec = Recorder::new(ex.device()).unwrap();
    let (sa, sb) = (upload(ex, &mut rec, &a), upload(ex, &mut rec, &b));
    let sbias = bias.as_ref().map(|v| upload(ex, &mut rec, v));
    let dst = ex.alloc(want.len() as u64 * 4).unwrap();
    let bias = sbias.as_ref().zip(bias_shape);
    rows::matmul_with(ex.kernels(), &mut rec, g, act, Tier::Strict, &dst, &sa, &sb, bias, tuning).unwrap();
    let got = fetch(ex, &mut rec, &dst);
    let what = format!("matmul {g:?} act {act:?} bias {bias_shape:?} seed {seed} spice {spice} {tuning:?}");
    same_bits(&what, &want, &got)
}

/// A batched matmul geometry: batch axes of `dims` where `a_full[i]` / `b_full[i]` say whether
/// the operand has the axis (else size 1); with `drop`, an operand's leading broadcast axes are
/// left out entirely (numpy: a lower rank).
fn geometry(
    dims: &[usize],
    a_full: &[bool],
    b_full: &[bool],
    (m, n, k): (usize, usize, usize),
    (ta, tb): (bool, bool),
    drop: bool,
) -> MatmulShape {
    let op = |full: &[bool], mat: [usize; 2]| -> Vec<usize> {
        let mut s: Vec<usize> = dims.iter().zip(full).map(|(&d, &f)| if f { d } else { 1 }).collect();
        while drop && s.first() == Some(&1) && full.get(dims.len() - s.len()) == Some(&false) {
            s.remove(0);
        }
        s.extend(mat);
        s
    };
    let a = op(a_full, if ta { [k, m] } else { [m, k] });
    let b = op(b_full, if tb { [n, k] } else { [k, n] });
    let mut out: Vec<usize> =
        dims.iter().zip(a_full.iter().zip(b_full)).map(|(&d, (&x, &y))| if x || y { d } else { 1 }).collect();
    out.extend([m, n]);
    MatmulShape { a, b, out, ta, tb }
}

fn act_of(i: u8) -> Act {
    [Act::None, Act::Relu, Act::Gelu][usize::from(i % 3)]
}

/// A random [`Tuning`]: threads per row 2^b (or automatic) and a cap on the grid's x (or none);
/// small caps spread the workgroups over y and z as more than 65535 of them would be.
fn tunings() -> impl Strategy<Value = Tuning> {
    (
        prop::option::of(0u32..9),
        prop::option::of(1u32..4),
        prop::option::of(prop::sample::select(GemmTile::ALL.to_vec())),
    )
        .prop_map(|(b, g, gemm)| Tuning {
            threads_per_row: b.map(|b| 1 << b),
            max_groups_x: g,
            gemm,
            gemm_k_span: None,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn matmul_matches_reference_bits(
        batch in prop::collection::vec((1usize..4, any::<bool>(), any::<bool>()), 0..4),
        m in 1usize..80,
        n in 1usize..140,
        k in 0usize..60,
        ta in any::<bool>(),
        tb in any::<bool>(),
        drop in any::<bool>(),
        act in 0u8..3,
        bias_kind in 0u8..6,
        seed in any::<u32>(),
        spice in prop::sample::select(vec![0u32, 5, 40]),
        tuning in tunings(),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let dims: Vec<usize> = batch.iter().map(|b| b.0).collect();
        let a_full: Vec<bool> = batch.iter().map(|b| b.1).collect();
        let b_full: Vec<bool> = batch.iter().map(|b| b.2).collect();
        // Keep each case small for the 2-core lavapipe CI.
        let reps: usize = dims.iter().product();
        let k = if reps * m * n * k > 400_000 { k.min(4) } else { k };
        let g = geometry(&dims, &a_full, &b_full, (m, n, k), (ta, tb), drop);
        let r = g.out.len();
        let bias: Option<Vec<usize>> = match bias_kind {
            0 => None,
            1 => Some(vec![n]),
            2 => Some(vec![m, 1]),
            3 => Some(g.out.clone()),
            4 => Some(vec![1]),
            // The batch axes and the columns, broadcast along the rows.
            _ => Some(g.out.iter().enumerate().map(|(i, &d)| if i == r - 2 { 1 } else { d }).collect()),
        };
        matmul_case(ex, &g, act_of(act), bias.as_deref(), (u64::from(seed), spice), &tuning)?;
    }

    #[test]
    fn softmax_matches_reference_bits(
        lead in prop::collection::vec(1usize..4, 0..4),
        n in prop::sample::select(vec![0usize, 1, 2, 3, 7, 31, 255, 256, 257, 300, 513, 700, 1024, 1030, 2100]),
        mask_keep in prop::collection::vec(any::<bool>(), 0..6),
        has_mask in any::<bool>(),
        causal in any::<bool>(),
        scale in prop::sample::select(vec![1.0f32, 0.125, -2.0, 0.0, 3.0e38, f32::INFINITY]),
        seed in any::<u32>(),
        spice in prop::sample::select(vec![0u32, 2, 30]),
        tuning in tunings(),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let mut shape = lead.clone();
        shape.push(n);
        let total: usize = shape.iter().product();
        // The mask: the last `mask_keep.len()` axes (at most the rank), each kept or made 1.
        let mr = mask_keep.len().min(shape.len());
        let mshape: Vec<usize> = shape[shape.len() - mr..]
            .iter()
            .zip(&mask_keep)
            .map(|(&d, &keep)| if keep { d } else { 1 })
            .collect();
        let x = values(u64::from(seed), total, spice);
        let mut mvals = values(u64::from(seed) + 7, mshape.iter().product(), spice);
        if causal {
            // An attention mask: 0 or -inf (whole rows of -inf give NaN, as the formula says).
            let len = mvals.len();
            for (i, v) in mvals.iter_mut().enumerate() {
                *v = if mix(u64::from(seed) ^ i as u64).is_multiple_of(3) || i + 1 == len { f32::NEG_INFINITY } else { 0.0 };
            }
        }
        let mask = has_mask.then_some((mvals.as_slice(), mshape.as_slice()));
        let mut want = vec![0.0f32; total];
        reference::softmax(&x, &shape, mask, scale, &mut want);
        let mut rec = Recorder::new(ex.device()).unwrap();
        let sx = upload(ex, &mut rec, &x);
        let sm = upload(ex, &mut rec, &mvals);
        let dst = ex.alloc(total as u64 * 4).unwrap();
        let gmask = has_mask.then_some((&sm, mshape.as_slice()));
        rows::softmax_in(ex.kernels(), &mut rec, Tier::Strict, &dst, &sx, &shape, gmask, scale, &tuning).unwrap();
        let got = fetch(ex, &mut rec, &dst);
        let what = format!(
            "softmax {shape:?} mask {:?} (causal {causal}) scale {scale} seed {seed} spice {spice} {tuning:?}",
            has_mask.then_some(&mshape)
        );
        same_bits(&what, &want, &got)?;
    }

    #[test]
    fn layernorm_and_rmsnorm_match_reference_bits(
        nrows in 0usize..12,
        n in prop::sample::select(vec![0usize, 1, 2, 5, 64, 255, 256, 257, 600, 1100, 2100]),
        with_gamma in any::<bool>(),
        with_beta in any::<bool>(),
        eps in prop::sample::select(vec![1.0e-5f32, 0.0, 1.0, 1.0e-30]),
        seed in any::<u32>(),
        spice in prop::sample::select(vec![0u32, 2, 30]),
        tuning in tunings(),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let total = nrows * n;
        let x = values(u64::from(seed), total, spice);
        let gamma = values(u64::from(seed) + 3, n, spice);
        let beta = values(u64::from(seed) + 4, n, spice);
        let (g, b) = (with_gamma.then_some(gamma.as_slice()), with_beta.then_some(beta.as_slice()));
        let mut want_ln = vec![0.0f32; total];
        reference::layernorm(&x, n, g, b, eps, &mut want_ln);
        let mut want_rms = vec![0.0f32; total];
        reference::rmsnorm(&x, n, g, eps, &mut want_rms);
        let mut rec = Recorder::new(ex.device()).unwrap();
        let sx = upload(ex, &mut rec, &x);
        let (sg, sb) = (upload(ex, &mut rec, &gamma), upload(ex, &mut rec, &beta));
        let (gs, bs) = (with_gamma.then_some(&sg), with_beta.then_some(&sb));
        let (d1, d2) = (ex.alloc(total as u64 * 4).unwrap(), ex.alloc(total as u64 * 4).unwrap());
        rows::layernorm_in(ex.kernels(), &mut rec, Tier::Strict, &d1, &sx, nrows, n, gs, bs, eps, &tuning).unwrap();
        rows::rmsnorm_with(ex.kernels(), &mut rec, &d2, &sx, nrows, n, gs, eps, &tuning).unwrap();
        let (got_ln, got_rms) = (fetch(ex, &mut rec, &d1), fetch(ex, &mut rec, &d2));
        let what = format!(
            "[{nrows}, {n}] gamma {with_gamma} beta {with_beta} eps {eps} seed {seed} spice {spice} {tuning:?}"
        );
        same_bits(&format!("layernorm {what}"), &want_ln, &got_ln)?;
        same_bits(&format!("rmsnorm {what}"), &want_rms, &got_rms)?;
    }

    #[test]
    fn reductions_match_reference_bits(
        shape in prop::collection::vec(prop::sample::select(vec![0usize, 1, 2, 3, 5, 16, 17, 32, 33, 256, 300]), 1..5),
        axis_pick in any::<usize>(),
        seed in any::<u32>(),
        spice in prop::sample::select(vec![0u32, 2, 30]),
        tuning in tunings(),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let mut shape = shape;
        // Keep each case small: shrink the largest axes until the tensor is modest.
        while shape.iter().product::<usize>() > 200_000 {
            let i = (0..shape.len()).max_by_key(|&i| shape[i]).unwrap_or(0);
            shape[i] = 3;
        }
        let axis = axis_pick % shape.len();
        let x = values(u64::from(seed), shape.iter().product(), spice);
        let outs: usize = shape.iter().enumerate().filter(|&(i, _)| i != axis).map(|(_, &d)| d).product();
        // Many threads on many short rows is slow on lavapipe (~0.1 ms a workgroup): keep a
        // forced choice to at most a few thousand workgroups.
        let mut tuning = tuning;
        if tuning.threads_per_row.is_some_and(|t| outs * t as usize > 1 << 20) {
            tuning.threads_per_row = None;
        }
        let mut rec = Recorder::new(ex.device()).unwrap();
        let sx = upload(ex, &mut rec, &x);
        for op in [Reduce::Sum, Reduce::Mean, Reduce::Max] {
            let mut want = vec![0.0f32; outs];
            reference::reduce(op, &x, &shape, axis, &mut want);
            let dst = ex.alloc(outs as u64 * 4).unwrap();
            rows::reduce_with(ex.kernels(), &mut rec, op, &dst, &sx, &shape, axis, &tuning).unwrap();
            let got = fetch(ex, &mut rec, &dst);
            let what = format!("{op:?} of {shape:?} over axis {axis} seed {seed} spice {spice} {tuning:?}");
            same_bits(&what, &want, &got)?;
        }
    }
}

/// Every way of sharing a row between threads (1..=256 per row) gives the reference's bits,
/// for rows shorter and longer than the 256 lanes.
#[test]
fn threads_per_row_never_change_bits() {
    let Some(ex) = exec() else { return };
    let k = ex.kernels();
    for (nrows, n) in [(5usize, 3usize), (3, 256), (4, 777)] {
        let total = nrows * n;
        let x = values(99 + n as u64, total, 20);
        let gamma = values(7, n, 0);
        let mut want_sm = vec![0.0f32; total];
        reference::softmax(&x, &[nrows, n], None, 0.5, &mut want_sm);
        let mut want_ln = vec![0.0f32; total];
        reference::layernorm(&x, n, Some(&gamma), Some(&gamma), 1e-5, &mut want_ln);
        let mut want_rms = vec![0.0f32; total];
        reference::rmsnorm(&x, n, Some(&gamma), 1e-5, &mut want_rms);
        // A strided reduction: [nrows, n] over axis 0.
        let mut want_sum = vec![0.0f32; n];
        reference::reduce(Reduce::Sum, &x, &[nrows, n], 0, &mut want_sum);
        let mut want_max = vec![0.0f32; nrows];
        reference::reduce(Reduce::Max, &x, &[nrows, n], 1, &mut want_max);
        for t in (0..=8).map(|b| 1u32 << b) {
            // A grid 2 wide: the workgroups spread over y.
            let tuning =
                Tuning { threads_per_row: Some(t), max_groups_x: Some(2), gemm: None, gemm_k_span: None };
            let mut rec = Recorder::new(ex.device()).unwrap();
            let sx = upload(ex, &mut rec, &x);
            let sg = upload(ex, &mut rec, &gamma);
            let d: Vec<Slice> = (0..3).map(|_| ex.alloc(total as u64 * 4).unwrap()).collect();
            let (ds, dm) = (ex.alloc(n as u64 * 4).unwrap(), ex.alloc(nrows as u64 * 4).unwrap());
            let shape = [nrows, n];
            rows::softmax_in(k, &mut rec, Tier::Strict, &d[0], &sx, &shape, None, 0.5, &tuning).unwrap();
            rows::layernorm_in(
                k,
                &mut rec,
                Tier::Strict,
                &d[1],
                &sx,
                nrows,
                n,
                Some(&sg),
                Some(&sg),
                1e-5,
                &tuning,
            )
            .unwrap();
            rows::rmsnorm_with(k, &mut rec, &d[2], &sx, nrows, n, Some(&sg), 1e-5, &tuning).unwrap();
            rows::reduce_with(k, &mut rec, Reduce::Sum, &ds, &sx, &shape, 0, &tuning).unwrap();
            rows::reduce_with(k, &mut rec, Reduce::Max, &dm, &sx, &shape, 1, &tuning).unwrap();
            let what = |op: &str| format!("{op} [{nrows}, {n}] with {t} threads per row");
            check(same_bits(&what("softmax"), &want_sm, &fetch(ex, &mut rec, &d[0])));
            check(same_bits(&what("layernorm"), &want_ln, &fetch(ex, &mut rec, &d[1])));
            check(same_bits(&what("rmsnorm"), &want_rms, &fetch(ex, &mut rec, &d[2])));
            check(same_bits(&what("sum over axis 0"), &want_sum, &fetch(ex, &mut rec, &ds)));
            check(same_bits(&what("max over axis 1"), &want_max, &fetch(ex, &mut rec, &dm)));
        }
    }
}

/// Hand-picked matmuls: long k with specials, every transpose, and the full bias.
#[test]
fn matmul_edges() {
    let Some(ex) = exec() else { return };
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let g = geometry(&[], &[], &[], (65, 67, 300), (ta, tb), false);
        check(matmul_case(ex, &g, Act::Gelu, Some(&[65, 67]), (11, 20), &Tuning::default()));
    }
    // k = 0: the output is act(+0 + bias).
    let g = geometry(&[2], &[true], &[false], (3, 5, 0), (false, false), false);
    check(matmul_case(ex, &g, Act::Relu, Some(&[5]), (12, 0), &Tuning::default()));
    // Six batch axes that cannot merge (a and b alternate broadcasting).
    let g = geometry(
        &[2, 2, 2, 2, 2, 2],
        &[true, false, true, false, true, false],
        &[false, true, false, true, false, true],
        (3, 4, 5),
        (false, true),
        true,
    );
    check(matmul_case(ex, &g, Act::None, Some(&[2, 1, 2, 1, 2, 1, 3, 1]), (13, 5), &Tuning::default()));
    // Several tiles along m and n and several batches, on a grid 2 wide.
    let g = geometry(&[5], &[true], &[true], (130, 200, 20), (false, false), false);
    let tuning = Tuning { threads_per_row: None, max_groups_x: Some(2), gemm: None, gemm_k_span: None };
    check(matmul_case(ex, &g, Act::Gelu, Some(&[200]), (14, 5), &tuning));
}

/// A k longer than one matmul dispatch covers: the accumulators resume across dispatches.
#[test]
fn matmul_k_over_several_dispatches() {
    let Some(ex) = exec() else { return };
    let k = 2 * rows::GEMM_K_SPAN as usize + 777;
    let g = geometry(&[2], &[true], &[false], (3, 70, k), (false, true), false);
    check(matmul_case(ex, &g, Act::Gelu, Some(&[3, 1]), (15, 5), &Tuning::default()));
    // Without special values the sums stay finite, so the GELU after the last span shows.
    check(matmul_case(ex, &g, Act::Gelu, Some(&[3, 1]), (15, 0), &Tuning::default()));
    let g = geometry(&[], &[], &[], (1, 1, rows::GEMM_K_SPAN as usize), (true, false), false);
    check(matmul_case(ex, &g, Act::Relu, None, (16, 5), &Tuning::default()));
    // The register-tiled kernels resume across dispatches too, aligned (vec4 loads) or not.
    for (tile, (m, n)) in tiles(ex).into_iter().zip([(5, 8), (9, 7), (4, 12)].into_iter().cycle()) {
        let g = geometry(&[], &[], &[], (m, n, 2 * rows::GEMM_K_SPAN as usize + 13), (false, false), false);
        let tuning = Tuning { gemm: Some(tile), gemm_k_span: Some(rows::GEMM_K_SPAN), ..Tuning::default() };
        check(matmul_case(ex, &g, Act::None, Some(&[n]), (17, 5), &tuning));
    }
}

/// The k a GEMM dispatch covers changes no bit, in either path of the loads: short spans
/// (several dispatches, each resuming the sums the last stored) against the device's default,
/// on whole tiles with vec4 operands (no bounds checks) and on ragged ones; a span that is no
/// multiple of a chunk is rounded down to one.
#[test]
fn gemm_k_span_never_changes_bits() {
    let Some(ex) = exec() else { return };
    for tile in tiles(ex) {
        for (m, n, k) in [(128, 128, 160), (9, 70, 141)] {
            let g = geometry(&[2], &[true], &[false], (m, n, k), (false, true), false);
            for span in [None, Some(32), Some(64), Some(70)] {
                let tuning = Tuning { gemm: Some(tile), gemm_k_span: span, ..Tuning::default() };
                check(matmul_case(ex, &g, Act::Relu, Some(&[n]), (19, 5), &tuning));
            }
        }
    }
}

/// The GEMM geometries this device can run (each one it cannot is named once).
fn tiles(ex: &VulkanExec) -> Vec<GemmTile> {
    GemmTile::ALL
        .into_iter()
        .filter(|t| match t.unusable_on(ex.device().info()) {
            Some(why) => {
                common::skip::skipped("a GEMM tile", &why);
                false
            }
            None => true,
        })
        .collect()
}

/// Every GEMM geometry, over tile edges, transposes, aligned (vec4) and unaligned operands.
#[test]
fn gemm_tiles_match_reference_bits() {
    let Some(ex) = exec() else { return };
    for tile in tiles(ex) {
        let tuning = Tuning { gemm: Some(tile), ..Tuning::default() };
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            // (128, 64, 32) and (128, 128, 48): whole tiles and vec4 operands, so most
            // geometries take gemm.glsl's loads without bounds checks (ALIGNED).
            for (m, n, k) in [(129, 131, 37), (128, 64, 32), (128, 128, 48), (3, 200, 8)] {
                let g = geometry(&[2], &[true], &[false], (m, n, k), (ta, tb), false);
                check(matmul_case(ex, &g, Act::Relu, Some(&[n]), (18 + k as u64, 30), &tuning));
            }
        }
    }
}

/// Operands of |x| >= 2^-63 whose products are normal numbers near 2^-126, so partial sums land
/// in the denormal range and must be flushed to signed zero exactly as the CPU does (the GEMM's
/// plain-product path), and the same with operands below 2^-63 (its careful path).
#[test]
fn gemm_flushes_denormal_sums_like_the_cpu() {
    let Some(ex) = exec() else { return };
    let (m, n, k) = (70usize, 66usize, 41usize);
    for tiny in [false, true] {
        // Plain path: both exponents >= -63; careful path: one operand below 2^-63.
        let ea = if tiny { 127 - 100 } else { 127 - 63 };
        let eb = if tiny { 127 - 26 } else { 127 - 63 };
        let near = |seed: u64, len: usize, e: u32| -> Vec<f32> {
            (0..len)
                .map(|i| {
                    let r = mix(seed ^ (i as u64) << 8);
                    let e = if r.is_multiple_of(7) { e + 1 } else { e };
                    f32::from_bits((r & 0x807f_ffff) | (e << 23))
                })
                .collect()
        };
        let a = near(1, m * k, ea);
        let b = near(2, k * n, eb);
        let g = geometry(&[], &[], &[], (m, n, k), (false, false), false);
        let mut want = vec![0.0f32; m * n];
        reference::matmul(&g, &a, &b, None, Act::None, &mut want);
        assert!(
            want.iter().any(|v| v.to_bits() == 0x8000_0000) && want.iter().any(|v| *v != 0.0),
            "the case must produce flushed -0 sums and nonzero ones"
        );
        for tile in tiles(ex) {
            let mut rec = Recorder::new(ex.device()).unwrap();
            let (sa, sb) = (upload(ex, &mut rec, &a), upload(ex, &mut rec, &b));
            let dst = ex.alloc((m * n) as u64 * 4).unwrap();
            let tuning = Tuning { gemm: Some(tile), ..Tuning::default() };
            rows::matmul_with(
                ex.kernels(),
                &mut rec,
                &g,
                Act::None,
                Tier::Strict,
                &dst,
                &sa,
                &sb,
                None,
                &tuning,
            )
            .unwrap();
            check(same_bits(
                &format!("near-denormal sums, tiny {tiny}, {tile:?}"),
                &want,
                &fetch(ex, &mut rec, &dst),
            ));
        }
    }
}

/// The fast tier (FMA): the same bits on every run and for every tile choice of one shape is
/// not promised, but every run of one shape and tile gives the same bits, and the results are
/// within rounding of a float64 reference. GELU is the CPU's GELU (numerics) of the sums the
/// same kernel gives without it, bit for bit.
#[test]
fn fast_gemm_is_repeatable_and_accurate() {
    let Some(ex) = exec() else { return };
    for (m, n, k, ta, tb) in [(130, 70, 300, false, false), (33, 129, 64, true, true), (8, 8, 5, false, true)]
    {
        let g = geometry(&[], &[], &[], (m, n, k), (ta, tb), false);
        // Moderate magnitudes only (no overflow), both signs.
        let moderate = |seed: u64, len: usize| -> Vec<f32> {
            (0..len)
                .map(|i| {
                    f32::from_bits(
                        (mix(seed ^ (i as u64) << 8) & 0x807f_ffff) | ((120 + i as u32 % 12) << 23),
                    )
                })
                .collect()
        };
        let (a, b, bias) = (moderate(21, m * k), moderate(22, k * n), moderate(23, n));
        let at = |i: usize, p: usize| f64::from(if ta { a[p * m + i] } else { a[i * k + p] });
        let bt = |p: usize, j: usize| f64::from(if tb { b[j * k + p] } else { b[p * n + j] });
        for tile in tiles(ex) {
            let tuning = Tuning { gemm: Some(tile), ..Tuning::default() };
            let run = |act: Act| {
                let mut rec = Recorder::new(ex.device()).unwrap();
                let (sa, sb, sc) =
                    (upload(ex, &mut rec, &a), upload(ex, &mut rec, &b), upload(ex, &mut rec, &bias));
                let dst = ex.alloc((m * n) as u64 * 4).unwrap();
                let bias = Some((&sc, &[n][..]));
                rows::matmul_with(ex.kernels(), &mut rec, &g, act, Tier::Fast, &dst, &sa, &sb, bias, &tuning)
                    .unwrap();
                fetch(ex, &mut rec, &dst)
            };
            let (first, second) = (run(Act::Relu), run(Act::Relu));
            check(same_bits(&format!("fast gemm run twice, {tile:?}"), &first, &second));
            let sums = run(Act::None);
            let want: Vec<f32> = sums.iter().map(|&x| reference::activate(Act::Gelu, x)).collect();
            check(same_bits(&format!("fast gemm with GELU, {tile:?}"), &want, &run(Act::Gelu)));
            let relu: Vec<f32> = sums.iter().map(|&x| reference::activate(Act::Relu, x)).collect();
            check(same_bits(&format!("fast gemm with RELU, {tile:?}"), &relu, &first));
            for i in 0..m {
                for j in 0..n {
                    let (exact, size): (f64, f64) = (0..k)
                        .fold((f64::from(bias[j]), f64::from(bias[j].abs())), |(s, z), p| {
                            (s + at(i, p) * bt(p, j), z + (at(i, p) * bt(p, j)).abs())
                        });
                    let got = f64::from(first[i * n + j]);
                    let tol = size * k as f64 * f64::from(f32::EPSILON);
                    assert!(
                        (got - exact.max(0.0)).abs() <= tol,
                        "fast gemm [{i}, {j}] {tile:?}: {got} vs {exact} (tolerance {tol})"
                    );
                }
            }
        }
    }
}

/// The probe that lets the strict GEMM leave flushing to the hardware says no on lavapipe,
/// which keeps denormals (its answer elsewhere is what the device does; the bit-exact tests
/// above hold either way).
#[test]
fn hw_ftz_probe() {
    let Some(ex) = exec() else { return };
    let yes = rows::strict_gemm_hw_ftz(ex.kernels());
    println!("{}: strict GEMM hardware flush {yes}", ex.device().info().name);
    if ex.device().info().driver_name.contains("llvmpipe") || ex.device().info().name.contains("llvmpipe") {
        assert!(!yes, "lavapipe keeps denormals; the probe must see that");
    }
}

/// Rows of the longest length allowed (2^24) stay within lavapipe's loop limit; longer rows,
/// and a threads-per-row choice that would pass the limit, are refused.
#[test]
fn longest_rows() {
    let Some(ex) = exec() else { return };
    let k = ex.kernels();
    let n = rows::MAX_ROW;
    let x = values(21, n, 1);
    let mut rec = Recorder::new(ex.device()).unwrap();
    let sx = upload(ex, &mut rec, &x);
    let dst = ex.alloc(n as u64 * 4).unwrap();
    let mut want = vec![0.0f32; n];
    reference::softmax(&x, &[1, n], None, 0.25, &mut want);
    rows::softmax(k, &mut rec, &dst, &sx, &[1, n], None, 0.25).unwrap();
    check(same_bits("softmax of a row of 2^24", &want, &fetch(ex, &mut rec, &dst)));
    let one = ex.alloc(4).unwrap();
    for op in [Reduce::Sum, Reduce::Max] {
        let mut want = [0.0f32];
        reference::reduce(op, &x, &[n], 0, &mut want);
        rows::reduce(k, &mut rec, op, &one, &sx, &[n], 0).unwrap();
        check(same_bits(&format!("{op:?} of 2^24"), &want, &fetch(ex, &mut rec, &one)));
    }
    let msg = |r: Result<(), VulkanError>| r.unwrap_err().to_string();
    let t1 = Tuning { threads_per_row: Some(1), max_groups_x: None, gemm: None, gemm_k_span: None };
    let e = msg(rows::reduce_with(k, &mut rec, Reduce::Sum, &one, &sx, &[n], 0, &t1));
    assert!(
        e.starts_with("invalid Vulkan dispatch: 8 threads per row of 16777216 elements would run about "),
        "{e}"
    );
    assert!(
        e.ends_with(" loop iterations per thread; lavapipe stops at 65535 (use more threads per row)"),
        "{e}"
    );
    let e = msg(rows::reduce(
        k,
        &mut rec,
        Reduce::Sum,
        &one,
        &ex.alloc(4 * (n as u64 + 1)).unwrap(),
        &[n + 1],
        0,
    ));
    assert_eq!(e, "invalid Vulkan dispatch: reduce: rows of 16777217 elements; at most 2^24");
    assert!(!rec.has_work());
}

/// Empty rows reduce to the reference's values; empty outputs record nothing.
#[test]
fn empty_rows_and_outputs() {
    let Some(ex) = exec() else { return };
    let k = ex.kernels();
    let mut rec = Recorder::new(ex.device()).unwrap();
    let empty = ex.alloc(0).unwrap();
    for (op, bits) in [(Reduce::Sum, 0u32), (Reduce::Max, 0xff80_0000), (Reduce::Mean, 0x7fc0_0000)] {
        let dst = ex.alloc(6 * 4).unwrap();
        rows::reduce(k, &mut rec, op, &dst, &empty, &[3, 0, 2], 1).unwrap();
        let got = fetch(ex, &mut rec, &dst);
        assert!(got.iter().all(|v| v.to_bits() == bits), "{op:?} of empty rows: {got:?}");
    }
    let g = MatmulShape { a: vec![0, 4], b: vec![4, 3], out: vec![0, 3], ta: false, tb: false };
    let b = ex.alloc(12 * 4).unwrap();
    rows::matmul(k, &mut rec, &g, Act::None, Tier::Strict, &empty, &empty, &b, None).unwrap();
    rows::softmax(k, &mut rec, &empty, &empty, &[4, 0], None, 1.0).unwrap();
    rows::softmax(k, &mut rec, &empty, &empty, &[0, 9], None, 1.0).unwrap();
    rows::layernorm(k, &mut rec, &empty, &empty, 4, 0, None, None, 1e-5).unwrap();
    rows::rmsnorm(k, &mut rec, &empty, &empty, 0, 8, None, 1e-5).unwrap();
    rows::reduce(k, &mut rec, Reduce::Sum, &empty, &empty, &[0, 5], 1).unwrap();
    assert!(!rec.has_work(), "empty outputs must record nothing");
}

/// More rows and batches than one grid dimension holds: the grid grows along y. (Slow on
/// lavapipe, where a workgroup costs ~0.1 ms; the other tests cover the same index arithmetic
/// cheaply with a small `max_groups_x`.)
#[test]
#[ignore = "about 15 s on lavapipe; run with --ignored"]
fn grids_past_65535_workgroups() {
    let Some(ex) = exec() else { return };
    let k = ex.kernels();
    let rows_n = 65_600usize;
    let x = values(5, rows_n, 10);
    let mut rec = Recorder::new(ex.device()).unwrap();
    let sx = upload(ex, &mut rec, &x);
    // One row per workgroup (256 threads on one element).
    let t256 = Tuning { threads_per_row: Some(256), max_groups_x: None, gemm: None, gemm_k_span: None };
    let dst = ex.alloc(rows_n as u64 * 4).unwrap();
    rows::rmsnorm_with(k, &mut rec, &dst, &sx, rows_n, 1, None, 1e-5, &t256).unwrap();
    let mut want = vec![0.0f32; rows_n];
    reference::rmsnorm(&x, 1, None, 1e-5, &mut want);
    check(same_bits("rmsnorm of 65600 rows", &want, &fetch(ex, &mut rec, &dst)));
    // 65600 batches of a 1x1x1 matmul.
    let g = MatmulShape {
        a: vec![rows_n, 1, 1],
        b: vec![1, 1, 1],
        out: vec![rows_n, 1, 1],
        ta: false,
        tb: false,
    };
    let sb = upload(ex, &mut rec, &[1.5]);
    rows::matmul(k, &mut rec, &g, Act::None, Tier::Strict, &dst, &sx, &sb, None).unwrap();
    let mut want = vec![0.0f32; rows_n];
    reference::matmul(&g, &x, &[1.5], None, Act::None, &mut want);
    check(same_bits("matmul of 65600 batches", &want, &fetch(ex, &mut rec, &dst)));
}

/// Bad shapes and sizes are clean errors, never panics.
#[test]
fn bad_input_is_refused() {
    let Some(ex) = exec() else { return };
    let k = ex.kernels();
    let mut rec = Recorder::new(ex.device()).unwrap();
    let s = |n: u64| ex.alloc(n * 4).unwrap();
    let msg = |r: Result<(), VulkanError>| r.unwrap_err().to_string();
    let x = s(24);
    let nine = [1usize, 1, 1, 1, 1, 1, 2, 3, 4];
    assert_eq!(
        msg(rows::softmax(k, &mut rec, &x, &x, &nine, None, 1.0)),
        "invalid Vulkan dispatch: softmax: shape [1, 1, 1, 1, 1, 1, 2, 3, 4] has 9 axes; at most 8"
    );
    assert_eq!(
        msg(rows::softmax(k, &mut rec, &s(23), &x, &[2, 3, 4], None, 1.0)),
        "invalid Vulkan dispatch: softmax destination: a slice of 92 bytes for 24 f32 elements (96 bytes)"
    );
    assert_eq!(
        msg(rows::softmax(k, &mut rec, &x, &x, &[2, 3, 4], Some((&s(2), &[2, 1])), 1.0)),
        "invalid Vulkan dispatch: softmax mask [2, 1] does not broadcast to the input [2, 3, 4]"
    );
    assert_eq!(
        msg(rows::reduce(k, &mut rec, Reduce::Sum, &s(6), &x, &[2, 3, 4], 3)),
        "invalid Vulkan dispatch: reduce over axis 3 of a shape of 3 axes [2, 3, 4]"
    );
    assert_eq!(
        msg(rows::layernorm(k, &mut rec, &x, &x, 6, 4, Some(&s(5)), None, 1e-5)),
        "invalid Vulkan dispatch: layernorm gamma: a slice of 20 bytes for 4 f32 elements (16 bytes)"
    );
    assert_eq!(
        msg(rows::rmsnorm_with(
            k,
            &mut rec,
            &x,
            &x,
            6,
            4,
            None,
            1e-5,
            &Tuning { threads_per_row: Some(3), max_groups_x: None, gemm: None, gemm_k_span: None }
        )),
        "invalid Vulkan dispatch: 3 threads per row; a power of two from 1 to 256"
    );
    let g = MatmulShape { a: vec![2, 3], b: vec![4, 2], out: vec![2, 2], ta: false, tb: false };
    let e = msg(rows::matmul(k, &mut rec, &g, Act::None, Tier::Strict, &s(4), &s(6), &s(8), None));
    assert!(e.contains("matmul shapes do not agree: op(a) is [2, 3], op(b) [4, 2]"), "{e}");
    let g = MatmulShape { a: vec![2, 3], b: vec![3, 2], out: vec![2, 2], ta: false, tb: false };
    let e =
        msg(rows::matmul(k, &mut rec, &g, Act::None, Tier::Strict, &s(4), &s(6), &s(6), Some((&s(3), &[3]))));
    assert_eq!(e, "invalid Vulkan dispatch: matmul bias [3] does not broadcast to the output [2, 2]");
    let e = msg(rows::matmul(k, &mut rec, &g, Act::None, Tier::Strict, &s(4), &s(5), &s(6), None));
    assert_eq!(e, "invalid Vulkan dispatch: matmul a: a slice of 20 bytes for 6 f32 elements (24 bytes)");
    let huge = [65_536usize, 65_536];
    assert!(msg(rows::softmax(k, &mut rec, &x, &x, &huge, None, 1.0)).contains("2^31 or more elements"));
    assert!(!rec.has_work());
}

/// The interfaces the launchers bind (binding 0 the destination, then the sources) and the
/// push-constant blocks they fill.
#[test]
fn reflected_row_interfaces() {
    let want: &[(&str, &[u32], u32)] = &[
        ("gemm_strict_64x64x16_4x4", &[0, 1, 2, 3], 124),
        ("gemm_fast_128x128x32_8x4", &[0, 1, 2, 3], 124),
        ("coopmat2_f16", &[0, 1, 2, 3], 124),
        ("coopmat2_bf16", &[0, 1, 2, 3], 124),
        ("softmax", &[0, 1, 2], 88),
        ("layernorm", &[0, 1, 2, 3], 24),
        ("rmsnorm", &[0, 1, 2], 24),
        ("reduce_8", &[0, 1], 28),
        ("reduce_32", &[0, 1], 28),
        ("reduce_256", &[0, 1], 28),
    ];
    for &(name, bindings, push) in want {
        let (_, bytes) = SHADERS.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("{name} missing"));
        let i = vulkan::reflect(&vulkan::spirv_words(bytes).unwrap()).unwrap();
        assert_eq!((i.bindings.as_slice(), i.push_bytes), (bindings, push), "{name}");
        assert!(push <= 128, "{name}: push constants over the 128 bytes every device allows");
    }
}

/// Regression: lavapipe ends a shader loop after 65535 iterations, which once cut off the rows
/// a workgroup looped over; now a grid capped at one workgroup along x grows along y and z.
#[test]
fn reduce_in_a_long_looped_grid() {
    let Some(ex) = exec() else { return };
    let shape = [5usize, 17, 0, 256];
    let outs = 5 * 17 * 256;
    let mut want = vec![0.0f32; outs];
    reference::reduce(Reduce::Mean, &[], &shape, 2, &mut want);
    let mut rec = Recorder::new(ex.device()).unwrap();
    let sx = ex.alloc(0).unwrap();
    let dst = ex.alloc(outs as u64 * 4).unwrap();
    let tuning = Tuning { threads_per_row: None, max_groups_x: Some(1), gemm: None, gemm_k_span: None };
    rows::reduce_with(ex.kernels(), &mut rec, Reduce::Mean, &dst, &sx, &shape, 2, &tuning).unwrap();
    let got = fetch(ex, &mut rec, &dst);
    same_bits("empty-axis mean, one workgroup", &want, &got).unwrap();
}

/// f16 values in every class: mostly normals of any exponent, a tenth subnormals (products
/// down to 2^-48, sums that cancel), and a few of ±0, ±65504, ±inf and NaN.
fn f16_values(seed: u64, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let r = mix(seed.wrapping_mul(0x1_0000_0001).wrapping_add(i as u64));
            let sign = ((r >> 31) as u16) << 15;
            let bits = match mix(u64::from(r) ^ 0x3333) % 100 {
                0 => [0x0000, 0x7bff, 0x7c00, 0x7e00, 0x0001][(r as usize >> 4) % 5] | sign,
                1..=10 => sign | ((r as u16 % 1023) + 1),
                _ => sign | (((r >> 10) % 30 + 1) as u16) << 10 | (r as u16 & 0x3ff),
            };
            half::f16::from_bits(bits).to_f32()
        })
        .collect()
}

/// The strict tier runs MATMUL of f16 values (widened to f32) on the fast (FMA) GEMM kernel
/// (`rows::gemm_tier`): its bits are the CPU reference's, for every compiled geometry, over
/// transposes, bias, RELU and k past a dispatch's span (lavapipe: several dispatches). Only a
/// device that fuses the FMA tells the kernels apart (lavapipe's agree on any values); on an
/// H200 the same test with general f32 values in `a` failed (61 of 1073 outputs differed).
#[test]
fn strict_f16_gemm_on_the_fast_kernel_is_the_cpu_bits() {
    let Some(ex) = exec() else { return };
    assert_eq!(rows::gemm_tier(Tier::Strict, DType::F16), Tier::Fast);
    assert_eq!(rows::gemm_tier(Tier::Strict, DType::Bf16), Tier::Strict);
    assert_eq!(rows::gemm_tier(Tier::Strict, DType::F32), Tier::Strict);
    let k = ex.kernels();
    let cases = [
        ((37, 29, 300), (false, false), true, Act::None),
        ((64, 128, 2100), (false, true), false, Act::Relu),
        ((130, 70, 45), (true, false), true, Act::Relu),
        ((128, 128, 64), (true, true), false, Act::None),
    ];
    for ((m, n, kk), (ta, tb), with_bias, act) in cases {
        let g = geometry(&[], &[], &[], (m, n, kk), (ta, tb), false);
        let a = f16_values(61, m * kk);
        let b = f16_values(62, kk * n);
        let bias = values(63, n, 20);
        let bias_shape = [n];
        let bias_arg = with_bias.then_some((bias.as_slice(), &bias_shape[..]));
        let mut want = vec![0.0f32; m * n];
        reference::matmul(&g, &a, &b, bias_arg, act, &mut want);
        for tile in GemmTile::ALL {
            let mut rec = Recorder::new(ex.device()).unwrap();
            if tile.unusable(&rec).is_some() {
                continue;
            }
            let (sa, sb, sbias) =
                (upload(ex, &mut rec, &a), upload(ex, &mut rec, &b), upload(ex, &mut rec, &bias));
            let dst = ex.alloc((m * n) as u64 * 4).unwrap();
            let tuning = Tuning { gemm: Some(tile), ..Tuning::default() };
            let tier = rows::gemm_tier(Tier::Strict, DType::F16);
            let bias_slice = with_bias.then_some((&sbias, &bias_shape[..]));
            rows::matmul_with(k, &mut rec, &g, act, tier, &dst, &sa, &sb, bias_slice, &tuning).unwrap();
            check(same_bits(
                &format!("strict f16 {g:?} {act:?} on {tile:?}"),
                &want,
                &fetch(ex, &mut rec, &dst),
            ));
        }
    }
}

/// The fast tier's f16 and bf16 GEMMs on cooperative matrices (only where the device has them):
/// over transposes, broadcast batches, bias, RELU, aligned and unaligned shapes and both output
/// types, every output within the rounding of f32 sums (plus the 16-bit output's own rounding)
/// of the CPU reference on the same 16-bit values, and the same bits on a second run; with the
/// operands restaged (transposed into scratch first) where `coopmat_restaging` offers it too.
/// GELU (f32 outputs) is the CPU's GELU of the sums without it, bit for bit.
#[test]
fn coopmat_gemm_is_repeatable_and_accurate() {
    let Some(ex) = exec() else { return };
    type Conv = (fn(f32) -> u16, fn(u16) -> f32);
    let kinds: [(DType, Conv, i32); 2] = [
        (DType::F16, (adeadvm::numerics::f32_to_f16_bits, |h| half::f16::from_bits(h).to_f32()), 10),
        (DType::Bf16, (adeadvm::numerics::f32_to_bf16_bits, adeadvm::numerics::bf16_bits_to_f32), 7),
    ];
    for (dtype, (to_bits, from_bits), mantissa) in kinds {
        if !ex.device().has_coopmat(dtype) {
            common::skip::skipped(
                &format!("the cooperative-matrix {dtype:?} GEMM"),
                &format!("{} has none", ex.device().info().name),
            );
            continue;
        }
        let narrow = |seed: u64, n: usize| -> Vec<f32> {
            values(seed, n, 0).iter().map(|x| from_bits(to_bits(x.clamp(-4.0, 4.0)))).collect()
        };
        let to_bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| to_bits(*x).to_le_bytes()).collect() };
        let cases = [
            (vec![], (128, 128, 64), (false, false), None, Act::None, true),
            (vec![], (200, 136, 72), (false, true), Some(vec![136]), Act::Relu, true),
            (vec![3], (33, 17, 40), (true, false), Some(vec![33, 1]), Act::None, true),
            (vec![2], (130, 257, 29), (true, true), None, Act::Relu, true),
            // Whole tiles and runs of 8 elements, transposed and batched: loads without clamping.
            (vec![2], (256, 256, 128), (true, true), Some(vec![256]), Act::None, true),
            (vec![], (512, 128, 320), (false, false), None, Act::Relu, true),
            // Enough output tiles for the large tile (ops::rows' COOPMAT2_MIN_TILES), whole and
            // partial.
            (vec![16], (256, 1024, 64), (false, true), Some(vec![1024]), Act::None, true),
            (vec![16], (250, 1000, 72), (true, false), None, Act::Relu, true),
            // Both operands restaged into the kernel's layout (ops::rows::coopmat_restaging),
            // and an odd k that keeps them as stored.
            (vec![2], (256, 512, 96), (true, false), Some(vec![512]), Act::None, true),
            (vec![], (300, 300, 33), (false, false), None, Act::None, true),
            // Whole tiles with k long enough for the unrolled loop (COOPMAT2_UNROLL chunks an
            // iteration) and a chunk after it: the small tile, then the large one.
            (vec![], (512, 512, 1088), (false, false), Some(vec![512]), Act::Relu, true),
            (vec![16], (256, 1024, 576), (false, true), None, Act::None, true),
            // a without the batch axis b has (broadcast), both restaged.
            (vec![3], (256, 320, 64), (true, false), None, Act::None, false),
        ];
        for (dims, (m, n, k), (ta, tb), bias_shape, act, a_batched) in cases {
            let full = vec![true; dims.len()];
            let a_full = vec![a_batched; dims.len()];
            let g = geometry(&dims, &a_full, &full, (m, n, k), (ta, tb), !a_batched);
            let count = |s: &[usize]| s.iter().product::<usize>();
            let (a, b) = (narrow(41, count(&g.a)), narrow(42, count(&g.b)));
            // Within the narrow types' range (a larger bias would make 16-bit outputs infinite).
            let bias = bias_shape
                .as_ref()
                .map(|s| values(43, count(s), 0).iter().map(|x| x.clamp(-4.0, 4.0)).collect::<Vec<f32>>());
            let mut want = vec![0.0f32; count(&g.out)];
            reference::matmul(&g, &a, &b, bias.as_deref().zip(bias_shape.as_deref()), act, &mut want);
            let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
            let mut scale = vec![0.0f32; want.len()];
            reference::matmul(&g, &abs(&a), &abs(&b), None, Act::None, &mut scale);
            let restaging = rows::coopmat_restaging(&g);
            for (dst_narrow, restage) in [(false, false), (true, false), (false, true), (true, true)] {
                if restage && restaging == [None, None] {
                    continue;
                }
                let run = |act: Act| {
                    let mut rec = Recorder::new(ex.device()).unwrap();
                    let sa = ex.upload(&mut rec, &to_bytes(&a)).unwrap();
                    let sb = ex.upload(&mut rec, &to_bytes(&b)).unwrap();
                    let sbias = bias.as_ref().map(|v| upload(ex, &mut rec, v));
                    let dst = ex.alloc(want.len() as u64 * if dst_narrow { 2 } else { 4 }).unwrap();
                    let bias = sbias.as_ref().zip(bias_shape.as_deref());
                    let scratch = restaging.map(|b| b.filter(|_| restage).map(|b| ex.alloc(b).unwrap()));
                    rows::matmul_coopmat(
                        ex.kernels(),
                        &mut rec,
                        &g,
                        act,
                        dtype,
                        &dst,
                        dst_narrow,
                        &sa,
                        &sb,
                        bias,
                        [scratch[0].as_ref(), scratch[1].as_ref()],
                    )
                    .unwrap();
                    let bytes = ex.fetch(&mut rec, &dst).unwrap();
                    if dst_narrow {
                        bytes
                            .chunks(2)
                            .map(|c| from_bits(u16::from_le_bytes([c[0], c[1]])))
                            .collect::<Vec<f32>>()
                    } else {
                        bytemuck::pod_collect_to_vec::<u8, f32>(&bytes)
                    }
                };
                let got = run(act);
                assert!(
                    got.iter().map(|x| x.to_bits()).eq(run(act).iter().map(|x| x.to_bits())),
                    "{dtype:?} {g:?}: not repeatable"
                );
                for i in 0..want.len() {
                    let tol = k as f32 * 2.0f32.powi(-22) * scale[i]
                        + if dst_narrow { want[i].abs() * 2.0f32.powi(-mantissa) } else { 0.0 }
                        + 1e-6;
                    assert!(
                        (got[i] - want[i]).abs() <= tol,
                        "{dtype:?} {g:?} act {act:?} narrow {dst_narrow} restaged {restage}: output {i} is {} where the f32 reference gives {} (tolerance {tol})",
                        got[i],
                        want[i]
                    );
                }
                // GELU (f32 output only): the CPU's GELU of the sums the kernel stores without it.
                if !dst_narrow {
                    let sums: Vec<f32> =
                        run(Act::None).iter().map(|&x| reference::activate(Act::Gelu, x)).collect();
                    let what = format!("{dtype:?} {g:?} GELU, restaged {restage}");
                    check(same_bits(&what, &sums, &run(Act::Gelu)));
                }
            }
        }
        // GELU into a 16-bit output would round twice; the launcher refuses it.
        let g = geometry(&[], &[], &[], (32, 32, 32), (false, false), false);
        let mut rec = Recorder::new(ex.device()).unwrap();
        let x = ex.alloc(32 * 32 * 2).unwrap();
        let e = rows::matmul_coopmat(
            ex.kernels(),
            &mut rec,
            &g,
            Act::Gelu,
            dtype,
            &x,
            true,
            &x,
            &x,
            None,
            [None, None],
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "invalid Vulkan dispatch: the cooperative-matrix GEMM takes GELU only with an f32 output (the output rounds once, after it)"
        );
    }
}

/// The strict tier's one-pass SOFTMAX, LAYERNORM and RMSNORM (rows of ONE_PASS_ROW_MIN to
/// ONE_PASS_ROW_MAX, held in registers; shaders/include/strictrow.glsl) give the CPU
/// reference's bits for every compiled shape, with special values, a broadcast mask holding
/// -inf, negative scales, gamma and beta; and the tree kernels on the same cases, for rows
/// longer than those and for short rows with a number of threads a row chosen.
#[test]
fn strict_rows_match_reference_bits() {
    let Some(ex) = exec() else { return };
    let k = ex.kernels();
    let info = ex.device().info();
    if !info.subgroup_shuffle {
        println!("{}: no subgroup shuffles, so the tree kernels ran", info.name);
    }
    let (min, max) = (rows::ONE_PASS_ROW_MIN as usize, rows::ONE_PASS_ROW_MAX as usize);
    let tree = |threads| Tuning { threads_per_row: Some(threads), ..Tuning::default() };
    // Each compiled shape: rows of up to 4, 8, 16, 32, 64 and 128 elements (1 to 32 threads a
    // row, 256 to 8 rows a workgroup, placed by subgroup; on lavapipe's subgroups of 8, 16 and
    // 32 threads take the shared-memory levels), 256, 512, 1024 (64 threads a row, four rows a
    // workgroup), 2048, 4096, 8192 and 16384 elements; ragged rows and whole ones. The tree
    // kernels: short rows with the threads a row chosen, and rows longer than the one-pass
    // kernels take.
    let one_pass = [min, 2, 3, 4, 5, 8, 13, 16, 31, 32, 47, 64, 100, 128, 129, 256, 300, 512, 700, 1031];
    let one_pass = one_pass.into_iter().chain([2048, 3000, 4097, 9001, max]).map(|n| (n, Tuning::default()));
    let trees = [(3, tree(4)), (47, tree(64)), (100, tree(2)), (max + 1, Tuning::default())];
    for (n, tuning) in one_pass.chain(trees) {
        // A padding row in the kernels with several rows a workgroup; short rows fill more
        // than one workgroup (of up to 256 rows) and more than one subgroup.
        let nrows = if n <= 256 { 517 } else { 5 };
        // (seed, spice, scale, sensitive, shift). The sensitive cases' results depend on the
        // order of the sums (a kernel pairing the tree's lanes otherwise fails them), so they
        // have no mask, gamma or beta, whose terms would hide a last-bit difference: logits
        // within about 1 of each other, so that the softmax's sum (and the rmsnorm's of the
        // squares) adds many comparable terms, and every third value 2^20 times larger, so
        // that the layernorm's sums cancel. The last has only negative values (shifted by
        // -8), whose max a kernel ordering them wrongly misses.
        let cases = [
            (61u64, 0u32, 0.5f32, false, 0.0f32),
            (62, 30, -2.0, false, 0.0),
            (63, 300, 1.0, false, 0.0),
            (64, 0, 1.0 / 128.0, true, 0.0),
            (65, 0, 1.0, true, -8.0),
        ];
        for (seed, spice, scale, sensitive, shift) in cases {
            let x: Vec<f32> = match sensitive {
                // Uniform in [-4, 4) + shift: no term dwarfs the rest, as values' wide exponents
                // would.
                true => (0..nrows * n)
                    .map(|i| (mix(seed ^ i as u64) as f32 / 4294967296.0 - 0.5) * 8.0 + shift)
                    .collect(),
                false => values(seed, nrows * n, spice),
            };
            let mut wide = x.clone();
            wide.iter_mut().step_by(3).for_each(|v| *v *= 1_048_576.0);
            let mut mask = values(seed + 1, n, spice);
            for (i, m) in mask.iter_mut().enumerate() {
                if mix(seed ^ i as u64).is_multiple_of(5) {
                    *m = f32::NEG_INFINITY;
                }
            }
            let (gamma, beta) = (values(seed + 2, n, spice), values(seed + 3, n, spice));
            let (mask, gamma, beta) = match sensitive {
                true => (None, None, None),
                false => (Some(mask.as_slice()), Some(gamma.as_slice()), Some(beta.as_slice())),
            };
            let ln_x = if sensitive { &wide } else { &x };
            let mut want_sm = vec![0.0f32; nrows * n];
            let mshape = [1, n];
            reference::softmax(&x, &[nrows, n], mask.map(|m| (m, &mshape[..])), scale, &mut want_sm);
            let mut want_ln = vec![0.0f32; nrows * n];
            reference::layernorm(ln_x, n, gamma, beta, 1e-5, &mut want_ln);
            let mut want_rms = vec![0.0f32; nrows * n];
            reference::rmsnorm(&x, n, gamma, 1e-5, &mut want_rms);
            let mut rec = Recorder::new(ex.device()).unwrap();
            let (sx, sw) = (upload(ex, &mut rec, &x), upload(ex, &mut rec, ln_x));
            let sm = mask.map(|m| upload(ex, &mut rec, m));
            let sg = gamma.map(|g| upload(ex, &mut rec, g));
            let sb = beta.map(|b| upload(ex, &mut rec, b));
            let [d0, d1, d2] = [0; 3].map(|_| ex.alloc((nrows * n) as u64 * 4).unwrap());
            let mask_arg = sm.as_ref().map(|m| (m, &mshape[..]));
            rows::softmax_in(k, &mut rec, Tier::Strict, &d0, &sx, &[nrows, n], mask_arg, scale, &tuning)
                .unwrap();
            let (g, b) = (sg.as_ref(), sb.as_ref());
            rows::layernorm_in(k, &mut rec, Tier::Strict, &d1, &sw, nrows, n, g, b, 1e-5, &tuning).unwrap();
            rows::rmsnorm_with(k, &mut rec, &d2, &sx, nrows, n, g, 1e-5, &tuning).unwrap();
            let what = |op: &str| {
                format!("strict {op} [{nrows}, {n}] ({tuning:?}) seed {seed} spice {spice} scale {scale}")
            };
            check(same_bits(&what("softmax"), &want_sm, &fetch(ex, &mut rec, &d0)));
            check(same_bits(&what("layernorm"), &want_ln, &fetch(ex, &mut rec, &d1)));
            check(same_bits(&what("rmsnorm"), &want_rms, &fetch(ex, &mut rec, &d2)));
        }
    }
}

/// Layernorm rows whose sums meet a denormal partial sum, which the strict add flushes, so the
/// row's sum, its mean and every output differ where a kernel keeps a denormal (as lavapipe's
/// arithmetic would without the flush, of a sum or of an element). Within a lane (rows longer
/// than 512): lane 0 adds 1.5 FLT_MIN and -1.25 FLT_MIN (0.25 FLT_MIN, flushed to zero), then
/// 2^-115 (the rest of the row is zero but for lane 3's 2 FLT_MIN and a denormal element).
/// Between lanes: lanes 0 and 128 (or 16) hold 1.5 and -1.25 FLT_MIN, which the tree's level 128
/// (16) pairs, and lane 64 (8) 2^-115: levels within a thread, in shared memory and by shuffles
/// (64 threads a row on NVIDIA's subgroups of 32; rows of up to 128 elements, 4 to 32 threads a
/// row, by shuffles in place). Each one-pass shape, and the tree kernels (rows of 47 and 4096
/// with threads per row chosen, and a row longer than the one-pass kernels take).
#[test]
fn strict_layernorm_flushes_partial_sums() {
    let Some(ex) = exec() else { return };
    let k = ex.kernels();
    let m = f32::MIN_POSITIVE;
    let tree = Tuning { threads_per_row: Some(64), ..Tuning::default() };
    let max = rows::ONE_PASS_ROW_MAX as usize;
    let one_pass = [20, 32, 64, 100, 200, 512, 1024, 2048, 4096, 8192, max];
    let trees = [(47, tree), (4096, tree), (max + 1, Tuning::default())];
    let cases = one_pass.map(|n| (n, Tuning::default())).into_iter().chain(trees);
    for (n, tuning) in cases {
        // 0: within a lane; else the tree's levels `level` and `level / 2`.
        for level in [0, 128, 16] {
            if (level == 0 && n <= 512) || n <= level {
                continue;
            }
            let mut x = vec![0.0f32; 2 * n];
            for (row, sign) in [(0, 1.0f32), (1, -1.0)] {
                let r = &mut x[row * n..(row + 1) * n];
                if level == 0 {
                    (r[0], r[256], r[512]) = (1.5 * m * sign, -1.25 * m * sign, 2048.0 * m * sign);
                    // Lane 3: 2 FLT_MIN, then a denormal element (flushed: the lane stays 2 FLT_MIN).
                    (r[3], r[259]) = (2.0 * m * sign, f32::from_bits(0x0040_0000) * sign);
                } else {
                    (r[0], r[level], r[level / 2]) = (1.5 * m * sign, -1.25 * m * sign, 2048.0 * m * sign);
                }
            }
            let mut want = vec![0.0f32; 2 * n];
            reference::layernorm(&x, n, None, None, 1e-5, &mut want);
            let mut rec = Recorder::new(ex.device()).unwrap();
            let sx = upload(ex, &mut rec, &x);
            let d = ex.alloc((2 * n) as u64 * 4).unwrap();
            rows::layernorm_in(k, &mut rec, Tier::Strict, &d, &sx, 2, n, None, None, 1e-5, &tuning).unwrap();
            let what =
                format!("strict layernorm [2, {n}] ({tuning:?}), a denormal partial sum (level {level})");
            check(same_bits(&what, &want, &fetch(ex, &mut rec, &d)));
        }
    }
}

/// Rows of -0 in the strict tier: each lane's first add (+0 + -0) gives +0, so the layernorm's
/// mean is +0 and every output -0 * rsqrt = -0; a kernel whose compiler folded that add of the
/// constant +0 away would get a mean of -0 and outputs +0. Every one-pass shape, whole rows
/// (where no lane is left at its start value) and ragged ones.
#[test]
fn strict_rows_of_negative_zero() {
    let Some(ex) = exec() else { return };
    let k = ex.kernels();
    let max = rows::ONE_PASS_ROW_MAX as usize;
    for n in [1usize, 3, 4, 8, 16, 32, 64, 100, 128, 256, 512, 1024, 2048, 4096, 8192, max] {
        let nrows = 3;
        let x = vec![-0.0f32; nrows * n];
        let mut want_ln = vec![0.0f32; nrows * n];
        reference::layernorm(&x, n, None, None, 1e-5, &mut want_ln);
        assert!(want_ln.iter().all(|v| v.to_bits() == 0x8000_0000), "the reference's outputs are -0");
        let mut want_rms = vec![0.0f32; nrows * n];
        reference::rmsnorm(&x, n, None, 1e-5, &mut want_rms);
        let mut rec = Recorder::new(ex.device()).unwrap();
        let sx = upload(ex, &mut rec, &x);
        let [d0, d1] = [0; 2].map(|_| ex.alloc((nrows * n) as u64 * 4).unwrap());
        let t = Tuning::default();
        rows::layernorm_in(k, &mut rec, Tier::Strict, &d0, &sx, nrows, n, None, None, 1e-5, &t).unwrap();
        rows::rmsnorm_with(k, &mut rec, &d1, &sx, nrows, n, None, 1e-5, &t).unwrap();
        check(same_bits(&format!("strict layernorm of -0 rows of {n}"), &want_ln, &fetch(ex, &mut rec, &d0)));
        check(same_bits(&format!("strict rmsnorm of -0 rows of {n}"), &want_rms, &fetch(ex, &mut rec, &d1)));
    }
}

/// The fast tier's one-pass SOFTMAX, LAYERNORM and RMSNORM (rows of ONE_PASS_ROW_MIN to
/// FAST_ONE_PASS_ROW_MAX): within a small relative error of float64, with and without a broadcast
/// mask, gamma and beta (the kernels' two output paths), and the same bits on a second run.
#[test]
fn fast_row_kernels_are_repeatable_and_accurate() {
    let Some(ex) = exec() else { return };
    let k = ex.kernels();
    let tuning = Tuning::default();
    let info = ex.device().info();
    if !info.subgroup_shuffle {
        println!("{}: no subgroup shuffles, so the strict kernels ran", info.name);
    }
    // Rows for each one-pass shape: 1, 2, 4, 8, 16, 32 and 64 threads a row with 4 elements
    // each (whole rows and ragged ones), 64 with 8 and 16; 256 with 8, 16, 32 and 64; 1024 with
    // 32 (on devices whose workgroups take 1024 threads, lavapipe's among them; else the tree
    // kernel).
    let min = rows::ONE_PASS_ROW_MIN as usize;
    let (max, max1024) = (rows::ONE_PASS_ROW_MAX as usize, rows::FAST_ONE_PASS_ROW_MAX as usize);
    // Past them, the fast softmax's two-pass kernel (softmax_fast_long; the norms' tree kernels).
    for n in [min, 3, 8, 16, 32, 64, 100, 256, 300, 700, 1500, 3000, 6000, 9001, max, 20000, max1024, 40000] {
        let nrows = 3;
        let x: Vec<f32> = values(51, nrows * n, 0).iter().map(|v| v.clamp(-30.0, 30.0)).collect();
        let mask: Vec<f32> = values(52, n, 0).iter().map(|v| v.clamp(-5.0, 5.0)).collect();
        let gamma: Vec<f32> = values(53, n, 0).iter().map(|v| v.clamp(-2.0, 2.0)).collect();
        let beta: Vec<f32> = values(54, n, 0).iter().map(|v| v.clamp(-2.0, 2.0)).collect();
        let run = |which: u8, extras: bool| -> Vec<f32> {
            let mut rec = Recorder::new(ex.device()).unwrap();
            let (sx, sm) = (upload(ex, &mut rec, &x), upload(ex, &mut rec, &mask));
            let (sg, sb) = (upload(ex, &mut rec, &gamma), upload(ex, &mut rec, &beta));
            let dst = ex.alloc((nrows * n) as u64 * 4).unwrap();
            if which == 0 {
                let shape = [nrows, n];
                rows::softmax_in(
                    k,
                    &mut rec,
                    Tier::Fast,
                    &dst,
                    &sx,
                    &shape,
                    extras.then_some((&sm, &[1, n][..])),
                    0.5,
                    &tuning,
                )
                .unwrap();
            } else if which == 2 {
                rows::rmsnorm_in(
                    k,
                    &mut rec,
                    Tier::Fast,
                    &dst,
                    &sx,
                    nrows,
                    n,
                    extras.then_some(&sg),
                    1e-5,
                    &tuning,
                )
                .unwrap();
            } else {
                rows::layernorm_in(
                    k,
                    &mut rec,
                    Tier::Fast,
                    &dst,
                    &sx,
                    nrows,
                    n,
                    extras.then_some(&sg),
                    extras.then_some(&sb),
                    1e-5,
                    &tuning,
                )
                .unwrap();
            }
            fetch(ex, &mut rec, &dst)
        };
        for (which, extras) in [0u8, 1, 2].into_iter().flat_map(|w| [(w, true), (w, false)]) {
            let got = run(which, extras);
            let again = run(which, extras);
            assert!(got.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()), "n {n}: not repeatable");
            // Without extras: no mask, gamma 1 and beta 0.
            let mask_at = |i: usize| if extras { f64::from(mask[i]) } else { 0.0 };
            let gamma_at = |i: usize| if extras { f64::from(gamma[i]) } else { 1.0 };
            let beta_at = |i: usize| if extras { f64::from(beta[i]) } else { 0.0 };
            for r in 0..nrows {
                let row: Vec<f64> = x[r * n..(r + 1) * n].iter().map(|&v| f64::from(v)).collect();
                let want: Vec<f64> = if which == 0 {
                    let logit: Vec<f64> = row.iter().enumerate().map(|(i, v)| v * 0.5 + mask_at(i)).collect();
                    let m = logit.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = logit.iter().map(|l| (l - m).exp()).collect();
                    let s: f64 = e.iter().sum();
                    e.iter().map(|v| v / s).collect()
                } else if which == 2 {
                    let ms = row.iter().map(|v| v * v).sum::<f64>() / n as f64;
                    let rs = 1.0 / (ms + 1e-5f32 as f64).sqrt();
                    (0..n).map(|i| row[i] * rs * gamma_at(i)).collect()
                } else {
                    let mu = row.iter().sum::<f64>() / n as f64;
                    let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n as f64;
                    let rs = 1.0 / (var + 1e-5f32 as f64).sqrt();
                    (0..n).map(|i| (row[i] - mu) * rs * gamma_at(i) + beta_at(i)).collect()
                };
                for i in 0..n {
                    let (g, w) = (f64::from(got[r * n + i]), want[i]);
                    let scale = match which {
                        0 => w.abs(),
                        2 => w.abs() + 1.0,
                        _ => w.abs() + beta_at(i).abs() + 1.0,
                    };
                    assert!(
                        (g - w).abs() <= 2e-5 * scale + 1e-30,
                        "{} (extras {extras}) n {n} row {r} element {i}: {g} where float64 gives {w}",
                        ["softmax", "layernorm", "rmsnorm"][usize::from(which)]
                    );
                }
            }
        }
    }
}

/// The fast softmax over rows longer than its one-pass kernels hold (softmax_fast_long, which
/// keeps a running max and rescales its sum) on special rows, beside the CPU reference: a row
/// whose first 5000 logits are -inf (masked) is the softmax of the rest (within 2e-5 of float64,
/// and exactly 0 where masked: the leading -inf leave no NaN behind); rows of -inf only, or
/// holding one +inf or one NaN, are NaN throughout, as the reference's are.
#[test]
fn fast_long_softmax_special_rows() {
    let Some(ex) = exec() else { return };
    let k = ex.kernels();
    let n = 40_000;
    let nrows = 4;
    let x: Vec<f32> = values(71, nrows * n, 0).iter().map(|v| v.clamp(-30.0, 30.0)).collect();
    let mut mask = vec![0.0f32; nrows * n];
    mask[..5000].iter_mut().for_each(|m| *m = f32::NEG_INFINITY);
    mask[n..2 * n].iter_mut().for_each(|m| *m = f32::NEG_INFINITY);
    mask[2 * n + 12345] = f32::INFINITY;
    mask[3 * n + 30000] = f32::NAN;
    let shape = [nrows, n];
    let mut want = vec![0.0f32; nrows * n];
    reference::softmax(&x, &shape, Some((&mask, &shape[..])), 1.0, &mut want);
    let mut rec = Recorder::new(ex.device()).unwrap();
    let (sx, sm) = (upload(ex, &mut rec, &x), upload(ex, &mut rec, &mask));
    let dst = ex.alloc((nrows * n) as u64 * 4).unwrap();
    let tuning = Tuning::default();
    rows::softmax_in(k, &mut rec, Tier::Fast, &dst, &sx, &shape, Some((&sm, &shape[..])), 1.0, &tuning)
        .unwrap();
    let got = fetch(ex, &mut rec, &dst);
    let row0: Vec<f64> = (0..n).map(|i| f64::from(x[i]) + f64::from(mask[i])).collect();
    let m = row0.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let total: f64 = row0.iter().map(|l| (l - m).exp()).sum();
    for i in 0..n {
        let w = (row0[i] - m).exp() / total;
        let g = f64::from(got[i]);
        assert!((g - w).abs() <= 2e-5 * w, "row 0 element {i}: {g} where float64 gives {w}");
        if i < 5000 {
            assert_eq!(got[i].to_bits(), 0, "row 0 element {i} (masked) is {}", got[i]);
        }
    }
    for r in 1..nrows {
        let row = |v: &[f32]| v[r * n..(r + 1) * n].iter().all(|y| y.is_nan());
        assert!(row(&want), "the reference's row {r} is not all NaN");
        assert!(row(&got), "row {r} is not all NaN");
    }
}

/// Runs [`rows::reduce_in`] of `op` over `shape`'s `axis` in `tier` with the scratch
/// [`rows::reduce_partials`] asks for (none where it runs in one pass).
fn reduce_in_tier(
    ex: &VulkanExec,
    tier: Tier,
    op: Reduce,
    x: &[f32],
    shape: &[usize],
    axis: usize,
) -> Vec<f32> {
    let outs: usize = shape.iter().enumerate().filter(|&(i, _)| i != axis).map(|(_, &d)| d).product();
    let mut rec = Recorder::new(ex.device()).unwrap();
    let sx = upload(ex, &mut rec, x);
    let dst = ex.alloc(outs as u64 * 4).unwrap();
    let bytes = rows::reduce_partials(tier, op, shape, axis);
    let partials = (bytes > 0).then(|| ex.alloc(bytes).unwrap());
    rows::reduce_in(
        ex.kernels(),
        &mut rec,
        tier,
        op,
        &dst,
        &sx,
        shape,
        axis,
        partials.as_ref(),
        &Tuning::default(),
    )
    .unwrap();
    fetch(ex, &mut rec, &dst)
}

/// Few outputs over a long axis: the max is cut into segments in both tiers, a strict sum or
/// mean over long contiguous rows or a long strided axis spreads each output's lanes over
/// workgroups (8, 16 or 32 outputs side by side), and both give the reference's bits (max is
/// exact; the lanes keep their chains); a strict sum over a shorter strided axis runs in one
/// pass.
#[test]
fn cut_reductions_keep_strict_bits() {
    let Some(ex) = exec() else { return };
    for (shape, axis, lanes) in [
        (vec![20_000usize], 0usize, false),
        (vec![3, 9_000, 5], 1, true),
        (vec![9_001, 3], 0, true),
        (vec![8_000, 3], 0, false),
        (vec![2, 70_000], 1, true),
        (vec![66_001], 0, true),
        // Lanes of more than one block of reduce_lanes' staging (448 steps of 256): three
        // blocks, the last ragged, so the chains cross the staged buffers' turns.
        (vec![2, 300_001], 1, true),
        (vec![9_000, 40], 0, true),
        (vec![2, 8_300, 33], 1, true),
        (vec![8_191, 40], 0, false),
    ] {
        let total: usize = shape.iter().product();
        // The max meets special values; the sums do not, since one inf or NaN (or a huge
        // value) among thousands of elements makes every sum NaN or infinite, which any order
        // of adds gives (the special values' sums have their own test below).
        let spiced = values(total as u64, total, 30);
        let plain = moderate_values(total as u64, total);
        let outs = total / shape[axis];
        assert!(
            rows::reduce_partials(Tier::Strict, Reduce::Max, &shape, axis) > 0,
            "{shape:?} should be cut"
        );
        let lane_sums = rows::reduce_partials(Tier::Strict, Reduce::Sum, &shape, axis);
        assert_eq!(lane_sums, if lanes { outs as u64 * 256 * 4 } else { 0 }, "{shape:?}");
        for (tier, op) in [
            (Tier::Strict, Reduce::Max),
            (Tier::Fast, Reduce::Max),
            (Tier::Strict, Reduce::Sum),
            (Tier::Strict, Reduce::Mean),
        ] {
            let x = if op == Reduce::Max { &spiced } else { &plain };
            let mut want = vec![0.0f32; outs];
            reference::reduce(op, x, &shape, axis, &mut want);
            assert!(
                op == Reduce::Max || want.iter().all(|v| v.is_finite()),
                "{op:?} of {shape:?}: finite sums"
            );
            let got = reduce_in_tier(ex, tier, op, x, &shape, axis);
            check(same_bits(&format!("{tier:?} {op:?} of {shape:?} over axis {axis}"), &want, &got));
        }
    }
    // Every lane's sum a flushed -0 (-1.5 FLT_MIN + FLT_MIN, then -0s): the tree of -0s is -0,
    // which the second pass keeps only if it takes the lane sums as they are (+0 + -0 is +0).
    let n = 70_000;
    let mut x = vec![-0.0f32; n];
    x[..256].fill(-1.5 * f32::MIN_POSITIVE);
    x[256..512].fill(f32::MIN_POSITIVE);
    let mut want = [0.0f32];
    reference::reduce(Reduce::Sum, &x, &[n], 0, &mut want);
    assert_eq!(want[0].to_bits(), 0x8000_0000, "the reference's sum is -0");
    check(same_bits("a sum of -0 lanes", &want, &reduce_in_tier(ex, Tier::Strict, Reduce::Sum, &x, &[n], 0)));
    // Lane chains meeting a denormal element, which the strict add flushes before it adds:
    // FLT_MIN, then -2^-140, stays FLT_MIN (the unflushed sum falls below FLT_MIN and flushes to
    // +0), so the sum is 256 FLT_MIN.
    let mut x = vec![0.0f32; n];
    x[..256].fill(f32::MIN_POSITIVE);
    x[256..512].fill(-f32::from_bits(1 << 9));
    reference::reduce(Reduce::Sum, &x, &[n], 0, &mut want);
    assert_eq!(want[0], 256.0 * f32::MIN_POSITIVE, "the reference flushes the elements");
    check(same_bits(
        "lanes meeting denormals",
        &want,
        &reduce_in_tier(ex, Tier::Strict, Reduce::Sum, &x, &[n], 0),
    ));
}

/// Outputs whose elements are all -0 (the sum is +0), denormals of both signs (flushed), hold a
/// NaN, or both infinities give the reference's bits for sums, means and maxes in both tiers on
/// every reduction path: axes of up to 32 elements (a thread an output, `reduce_1`: the tree's
/// levels past the elements' lanes skipped) in both layouts, an axis of one and an empty axis
/// (mean NaN); the one-pass tree kernels; the lane sums of long rows (`reduce_lanes`) and of
/// long strided axes (`reduce_lanes_strided`: ragged groups of 8, 16 and 32 outputs).
#[test]
fn special_outputs_keep_strict_bits_on_every_reduce_path() {
    let Some(ex) = exec() else { return };
    let d = f32::from_bits(1 << 9);
    for (shape, axis) in [
        (vec![1000usize, 16], 1usize),
        (vec![517, 13], 1),
        (vec![300, 32], 1),
        (vec![3, 27, 7], 1),
        (vec![400, 8], 1),
        (vec![300, 28], 1),
        (vec![7, 16, 33], 1),
        (vec![16, 300], 0),
        (vec![300, 1], 1),
        (vec![4, 0, 3], 1),
        (vec![5, 600], 1),
        (vec![600, 5], 0),
        (vec![5, 70_000], 1),
        (vec![9_000, 40], 0),
        (vec![2, 8_300, 33], 1),
        (vec![9_000, 5], 0),
        (vec![2, 8_300, 12], 1),
    ] {
        let total: usize = shape.iter().product();
        let mut x = values(total as u64 + 7, total, 30);
        let len = shape[axis];
        let inner: usize = shape[axis + 1..].iter().product();
        // Output 0's elements -0; output 1's FLT_MIN in its first 256 (a step of every lane),
        // then -2^-140 (flushed first, so each lane keeps FLT_MIN: unflushed, a lane's sum falls
        // below FLT_MIN and flushes to 0); output 2's a NaN; output 3's both infinities (where
        // there are such outputs and elements).
        let at = |o: usize, e: usize| (o / inner * len + e) * inner + o % inner;
        let outs = total.checked_div(len).unwrap_or(0);
        for e in 0..len {
            if outs > 3 {
                x[at(0, e)] = -0.0;
                x[at(1, e)] = if e < 256 { f32::MIN_POSITIVE } else { -d };
                x[at(3, e)] = if e == 0 { f32::INFINITY } else { 1.0 };
            }
        }
        if outs > 3 && len > 1 {
            x[at(2, len - 1)] = f32::NAN;
            x[at(3, len - 1)] = f32::NEG_INFINITY;
        }
        for op in [Reduce::Sum, Reduce::Mean, Reduce::Max] {
            let n_out: usize =
                shape.iter().enumerate().filter(|&(i, _)| i != axis).map(|(_, &v)| v).product();
            let mut want = vec![0.0f32; n_out];
            reference::reduce(op, &x, &shape, axis, &mut want);
            for tier in [Tier::Strict, Tier::Fast] {
                let got = reduce_in_tier(ex, tier, op, &x, &shape, axis);
                check(same_bits(&format!("{tier:?} {op:?} of {shape:?} over axis {axis}"), &want, &got));
            }
        }
    }
}

/// The fast tier's cut sums and means: the same bits every run, within the error bound of
/// any order of float additions (n ulps of the sum of magnitudes, n the axis length) of the
/// exact sum, and the special values' results: a NaN or both infinities give NaN, one
/// infinity gives it.
#[test]
fn fast_cut_sums_are_repeatable_and_accurate() {
    let Some(ex) = exec() else { return };
    for (shape, axis) in
        [(vec![1usize << 20], 0usize), (vec![3, 50_000], 1), (vec![40_000, 7], 0), (vec![2, 30_000, 3], 1)]
    {
        let total: usize = shape.iter().product();
        let len = shape[axis];
        let inner: usize = shape[axis + 1..].iter().product();
        let outs = total / len;
        assert!(rows::reduce_partials(Tier::Fast, Reduce::Sum, &shape, axis) > 0, "{shape:?} should be cut");
        // Values in (-1, 1), so no partial sum overflows.
        let mut x: Vec<f32> =
            (0..total as u64).map(|i| (mix(i ^ 0xabcd) as f64 / 2f64.powi(31) - 1.0) as f32).collect();
        // Output 0 (its elements) gets a NaN, output 1 +inf, output 2 (if any) +inf and -inf.
        let at = |o: usize, e: usize| (o / inner * len + e) * inner + o % inner;
        x[at(0, len / 3)] = f32::NAN;
        if outs > 2 {
            x[at(1, len - 1)] = f32::INFINITY;
            x[at(2, 5)] = f32::INFINITY;
            x[at(2, len / 2)] = f32::NEG_INFINITY;
        }
        for op in [Reduce::Sum, Reduce::Mean] {
            let got = reduce_in_tier(ex, Tier::Fast, op, &x, &shape, axis);
            let again = reduce_in_tier(ex, Tier::Fast, op, &x, &shape, axis);
            check(same_bits(&format!("fast {op:?} of {shape:?} run twice"), &got, &again));
            for (o, &g) in got.iter().enumerate() {
                let (exact, magnitude) = (0..len).fold((0.0f64, 0.0f64), |(s, m), e| {
                    let v = f64::from(x[at(o, e)]);
                    (s + v, m + v.abs())
                });
                let scale = if matches!(op, Reduce::Mean) { len as f64 } else { 1.0 };
                let what = format!("fast {op:?} of {shape:?} over axis {axis}, output {o}");
                if exact.is_nan() {
                    assert!(g.is_nan(), "{what}: {g} for NaN");
                } else if exact.is_infinite() {
                    assert_eq!(f64::from(g), exact, "{what}");
                } else {
                    let bound = len as f64 * f64::from(f32::EPSILON) * magnitude / scale;
                    let err = (f64::from(g) - exact / scale).abs();
                    assert!(
                        err <= bound,
                        "{what}: {g} against {}, error {err} over the bound {bound}",
                        exact / scale
                    );
                }
            }
        }
    }
}

/// f64 sums of matmul `g` (batches broadcast as numpy does), the f64 sums of |a|·|b|, and for
/// each output whether its dot product takes an inf, a NaN or a normal float below 2^-103
/// (what `rows::matmul_split_bf16` sums again in f32).
fn matmul_f64(g: &MatmulShape, a: &[f32], b: &[f32]) -> (Vec<f64>, Vec<f64>, Vec<bool>) {
    let r = g.out.len();
    let (m, n) = (g.out[r - 2], g.out[r - 1]);
    let k = if g.ta { g.a[g.a.len() - 2] } else { g.a[g.a.len() - 1] };
    // An operand's matrix offset for output batch index `bz`, its batch axes padded to the output's.
    let offset = |shape: &[usize], bz: usize| {
        let nb = shape.len() - 2;
        let (mut rem, mut off, mut stride) = (bz, 0, shape[nb] * shape[nb + 1]);
        for i in (0..r - 2).rev() {
            let idx = rem % g.out[i];
            rem /= g.out[i];
            if let Some(j) = (i + nb).checked_sub(r - 2) {
                if shape[j] > 1 {
                    off += idx * stride;
                }
                stride *= shape[j];
            }
        }
        off
    };
    let batches: usize = g.out[..r - 2].iter().product();
    let (mut sum, mut scale) = (vec![0.0; batches * m * n], vec![0.0; batches * m * n]);
    let mut inexact = vec![false; batches * m * n];
    let bad = |v: f32| !v.is_finite() || (v.is_normal() && v.abs() < 2f32.powi(-103));
    for bz in 0..batches {
        let (ao, bo) = (offset(&g.a, bz), offset(&g.b, bz));
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut t, mut odd) = (0.0f64, 0.0f64, false);
                for kk in 0..k {
                    let x = a[ao + if g.ta { kk * m + i } else { i * k + kk }];
                    let y = b[bo + if g.tb { j * k + kk } else { kk * n + j }];
                    odd |= bad(x) || bad(y);
                    let p = f64::from(x) * f64::from(y);
                    s += p;
                    t += p.abs();
                }
                sum[(bz * m + i) * n + j] = s;
                scale[(bz * m + i) * n + j] = t;
                inexact[(bz * m + i) * n + j] = odd;
            }
        }
    }
    (sum, scale, inexact)
}

/// The fast tier's f32 matmul on bf16 cooperative matrices (`rows::matmul_split_bf16`; only
/// where the device has them), against float64 and against the register-tiled FMA kernel on
/// the same device: every output within an f32 dot product's error bound (k·2^-24 Σ|a·b|) of
/// the f64 sum, and the root-mean-square error (relative to Σ|a·b|) at most 4 times the FMA
/// kernel's (the tensor cores' f32 accumulation truncates, where FMA rounds to nearest: measured
/// on an H100 at k = 512, 7.3e-8 against 4.4e-8; dropping the three 2^-16 products as well would
/// be about 2^8 times worse); the same bits on a second run,
/// bias, RELU and GELU as the FMA kernel applies them. Every output whose dot product takes an
/// inf, a NaN or a normal float below 2^-103 has exactly the FMA kernel's bits (the last pass
/// sums them again), and so has every output the FMA kernel gives as inf or NaN, except where
/// the FMA kernel's partial sums overflowed and the exact sum is finite; the rest are finite.
#[test]
fn split_sgemm_is_as_accurate_as_f32() {
    let Some(ex) = exec() else { return };
    if !ex.device().has_coopmat(DType::Bf16) {
        common::skip::skipped(
            "split_sgemm_is_as_accurate_as_f32",
            &format!("{} has no cooperative-matrix bf16 GEMM", ex.device().info().name),
        );
        return;
    }
    let cases = [
        (vec![], (256, 256, 512), (false, false), None, Act::None, 0),
        (vec![], (128, 256, 4096), (false, true), None, Act::None, 0),
        (vec![], (300, 200, 1000), (true, true), Some(vec![200]), Act::Relu, 0),
        (vec![3], (129, 257, 96), (true, false), Some(vec![129, 1]), Act::None, 0),
        (vec![2], (512, 384, 2048), (false, true), None, Act::Gelu, 0),
        // Infinities and NaNs among the operands.
        (vec![], (192, 160, 256), (false, false), Some(vec![160]), Act::Relu, 8),
        (vec![2], (96, 130, 64), (true, true), None, Act::None, 20),
    ];
    for (dims, (m, n, k), (ta, tb), bias_shape, act, spice) in cases {
        let full = vec![true; dims.len()];
        // b without the batch axes (broadcast) where there are any.
        let g = geometry(&dims, &full, &vec![false; dims.len()], (m, n, k), (ta, tb), true);
        let count = |s: &[usize]| s.iter().product::<usize>();
        let (a, b) = (values(61, count(&g.a), spice), values(62, count(&g.b), spice));
        let bias = bias_shape.as_ref().map(|s| values(63, count(s), 0));
        // With Some(act), the case's bias and act; with None, the sums alone.
        let run = |split: bool, finish: Option<Act>| -> Vec<f32> {
            let act = finish.unwrap_or(Act::None);
            let mut rec = Recorder::new(ex.device()).unwrap();
            let (sa, sb) = (upload(ex, &mut rec, &a), upload(ex, &mut rec, &b));
            let sbias = bias.as_ref().map(|v| upload(ex, &mut rec, v));
            let bias = sbias.as_ref().zip(bias_shape.as_deref()).filter(|_| finish.is_some());
            let dst = ex.alloc(count(&g.out) as u64 * 4).unwrap();
            if split {
                let bytes = rows::split_scratch(&g).unwrap();
                let scratch = bytes.map(|b| ex.alloc(b).unwrap());
                let scratch = [&scratch[0], &scratch[1], &scratch[2], &scratch[3]];
                rows::matmul_split_bf16(ex.kernels(), &mut rec, &g, act, &dst, &sa, &sb, bias, scratch)
                    .unwrap();
            } else {
                rows::matmul(ex.kernels(), &mut rec, &g, act, Tier::Fast, &dst, &sa, &sb, bias).unwrap();
            }
            bytemuck::pod_collect_to_vec(&ex.fetch(&mut rec, &dst).unwrap())
        };
        let what = format!("{g:?} act {act:?} bias {bias_shape:?}");
        let got = run(true, Some(act));
        check(same_bits(&format!("{what}: a second run"), &got, &run(true, Some(act))));
        // Outputs whose dot product takes an inf, a NaN or a normal float below 2^-103, and those
        // the FMA kernel gives as inf or NaN (a sum past f32's range): the FMA kernel's bits, or,
        // where a partial sum of the FMA kernel's order overflowed and the split's did not, a
        // finite sum that f64 finds finite too; all others finite.
        let fma = run(false, Some(act));
        let (sum, scale, inexact) = matmul_f64(&g, &a, &b);
        let mut redone = 0;
        for i in 0..got.len() {
            if inexact[i] {
                assert_eq!(got[i].to_bits(), fma[i].to_bits(), "{what}: output {i} (an inexact operand)");
                redone += 1;
            } else if fma[i].is_finite() {
                assert!(got[i].is_finite(), "{what}: output {i} is {} where FMA gives {}", got[i], fma[i]);
            } else if !got[i].is_finite() {
                assert_eq!(got[i].to_bits(), fma[i].to_bits(), "{what}: output {i} (not finite)");
                redone += 1;
            } else {
                assert!(
                    sum[i].is_finite(),
                    "{what}: output {i} is {} where FMA gives {} and f64 {}",
                    got[i],
                    fma[i],
                    sum[i]
                );
            }
        }
        if spice > 0 {
            assert!(redone > 0, "{what}: no output is inf or NaN; the case tests nothing");
            continue;
        }
        if act == Act::Gelu {
            let sums: Vec<f32> =
                run(true, Some(Act::None)).iter().map(|&x| reference::activate(Act::Gelu, x)).collect();
            check(same_bits(&format!("{what}: GELU of the sums"), &sums, &got));
            continue;
        }
        // Accuracy of the sums before the bias and activation.
        let (got, fma) = (run(true, None), run(false, None));
        // Outputs within f32's range (a few operands are huge), and not summed again.
        let finite: Vec<usize> =
            (0..got.len()).filter(|&i| !inexact[i] && fma[i].is_finite() && got[i].is_finite()).collect();
        let rel = |v: &[f32], i: usize| (f64::from(v[i]) - sum[i]).abs() / scale[i];
        let rms =
            |v: &[f32]| (finite.iter().map(|&i| rel(v, i).powi(2)).sum::<f64>() / finite.len() as f64).sqrt();
        // An f32 dot product's bound, k·2^-24 Σ|a·b|: the split's six segments take 6k/16
        // accumulations on the tensor cores, each truncating by less than 2^-23 of the sum.
        let bound = (k + 2) as f64 * 2f64.powi(-24);
        for &i in &finite {
            assert!(rel(&got, i) <= bound, "{what}: output {i} is {} where f64 gives {}", got[i], sum[i]);
        }
        let (e_split, e_fma) = (rms(&got), rms(&fma));
        println!("{what}: root-mean-square error / sum |a b|: split {e_split:.3e}, FMA {e_fma:.3e}");
        assert!(e_split <= 4.0 * e_fma, "{what}: split {e_split:.3e} against FMA {e_fma:.3e}");
        // The bias and activation as the FMA kernel's finish applies them: canonical NaN, the
        // strict add of the bias (broadcast numpy-style), the activation.
        if bias.is_some() || act != Act::None {
            let r = g.out.len();
            let want: Vec<f32> = (0..got.len())
                .map(|i| {
                    let v = adeadvm::numerics::canon(got[i]);
                    let v = match (&bias, &bias_shape) {
                        (Some(bv), Some(bs)) => {
                            // The bias element of output i: its index along each of the
                            // bias's axes (aligned to the output's last ones), 0 where size 1.
                            let (mut rem, mut at, mut stride) = (i, 0, 1);
                            for ax in (0..r).rev() {
                                let idx = rem % g.out[ax];
                                rem /= g.out[ax];
                                if let Some(bax) = (ax + bs.len()).checked_sub(r) {
                                    if bs[bax] > 1 {
                                        at += idx * stride;
                                    }
                                    stride *= bs[bax];
                                }
                            }
                            adeadvm::numerics::add(v, bv[at])
                        }
                        _ => v,
                    };
                    reference::activate(act, v)
                })
                .collect();
            check(same_bits(&format!("{what}: bias and activation"), &want, &run(true, Some(act))));
        }
    }
}

/// The fast tier's split-k MATMUL (rows::matmul_split_k: spans of k at once into scratch,
/// summed, the last span finishing) against a float64 reference, next to the unsplit fast
/// kernel: shapes with few output tiles, a batch axis, a bias, RELU and GELU, a k that is not a
/// whole number of spans, and both operand layouts. Its error bound is the unsplit kernel's
/// (each is a sum of k f32 products); the same bits on a second run.
#[test]
fn split_k_matmul_matches_a_float64_reference() {
    let Some(ex) = exec() else { return };
    let k = ex.kernels();
    let mut rec = Recorder::new(ex.device()).unwrap();
    // a's shape, b's shape, ta, tb, the activation, whether there is a bias.
    type Case = (&'static [usize], &'static [usize], bool, bool, Act, bool);
    let cases: [Case; 6] = [
        (&[128, 384], &[384, 384], false, false, Act::None, false),
        (&[128, 1000], &[1000, 64], false, false, Act::Relu, true),
        (&[3, 64, 200], &[3, 200, 64], false, false, Act::None, true),
        (&[200, 64], &[64, 200], true, true, Act::Gelu, false),
        (&[16, 130], &[130, 64], false, false, Act::None, false),
        (&[64, 512], &[128, 512], false, true, Act::Relu, true),
    ];
    for (i, &(ashape, bshape, ta, tb, act, with_bias)) in cases.iter().enumerate() {
        let r = ashape.len();
        let (m, kk) = if ta { (ashape[r - 1], ashape[r - 2]) } else { (ashape[r - 2], ashape[r - 1]) };
        let n = if tb { bshape[r - 2] } else { bshape[r - 1] };
        let mut out = ashape[..r - 2].to_vec();
        out.extend([m, n]);
        let g = MatmulShape { a: ashape.to_vec(), b: bshape.to_vec(), out: out.clone(), ta, tb };
        let na: usize = ashape.iter().product();
        let nb: usize = bshape.iter().product();
        let nout: usize = out.iter().product();
        let x = moderate_values(11 + i as u64, na);
        let y = moderate_values(29 + i as u64, nb);
        let bias = moderate_values(47 + i as u64, n);
        let (sa, sb, sbias) =
            (upload(ex, &mut rec, &x), upload(ex, &mut rec, &y), upload(ex, &mut rec, &bias));
        let bias_shape = [n];
        let bias_arg = with_bias.then_some((&sbias, &bias_shape[..]));
        let split = rows::SplitK {
            slices: kk.div_ceil(64) as u64,
            span: 64,
            scratch_bytes: (kk.div_ceil(64) as u64 - 1) * nout as u64 * 4,
        };
        let scratch = ex.alloc(split.scratch_bytes).unwrap();
        let got: Vec<Vec<f32>> = (0..2)
            .map(|_| {
                let dst = ex.alloc(nout as u64 * 4).unwrap();
                rows::matmul_split_k(k, &mut rec, &g, act, &dst, &sa, &sb, bias_arg, split, &scratch)
                    .unwrap();
                fetch(ex, &mut rec, &dst)
            })
            .collect();
        assert!(got[0].iter().zip(&got[1]).all(|(p, q)| p.to_bits() == q.to_bits()), "case {i}: run to run");
        let dst = ex.alloc(nout as u64 * 4).unwrap();
        rows::matmul(k, &mut rec, &g, act, Tier::Fast, &dst, &sa, &sb, bias_arg).unwrap();
        let unsplit = fetch(ex, &mut rec, &dst);
        // float64 reference, with the magnitude sum that bounds an f32 sum's error.
        let batches = nout / (m * n);
        let (astep, bstep) = (na / batches, nb / batches);
        let gelu = |v: f64| 0.5 * v * (1.0 + libm_erf(v / std::f64::consts::SQRT_2));
        let mut worst = [0.0f64; 2];
        for bz in 0..batches {
            for row in 0..m {
                for col in 0..n {
                    let (mut s, mut mag) = (0.0f64, 0.0f64);
                    for e in 0..kk {
                        let av = if ta { x[bz * astep + e * m + row] } else { x[bz * astep + row * kk + e] };
                        let bv = if tb { y[bz * bstep + col * kk + e] } else { y[bz * bstep + e * n + col] };
                        s += f64::from(av) * f64::from(bv);
                        mag += (f64::from(av) * f64::from(bv)).abs();
                    }
                    if with_bias {
                        s += f64::from(bias[col]);
                        mag += f64::from(bias[col]).abs();
                    }
                    let want = match act {
                        Act::None => s,
                        Act::Relu => s.max(0.0),
                        Act::Gelu => gelu(s),
                    };
                    let o = bz * m * n + row * n + col;
                    // GELU's own error (the fast tier's vendor math) counts against |want|.
                    let slack = if act == Act::Gelu { 1e-6 * want.abs() } else { 0.0 };
                    for (w, v) in worst.iter_mut().zip([got[0][o], unsplit[o]]) {
                        *w = w.max(((f64::from(v) - want).abs() - slack).max(0.0) / mag.max(1e-30));
                    }
                }
            }
        }
        // An f32 sum of k products errs by at most about k * 2^-24 of the magnitude sum.
        let bound = (kk as f64 + 2.0) * 2f64.powi(-24);
        assert!(
            worst[0] <= bound,
            "case {i} {g:?}: split-k error {:.3e} of the magnitude sum > {bound:.3e}",
            worst[0]
        );
        assert!(worst[1] <= bound, "case {i}: the unsplit kernel's error {:.3e} > {bound:.3e}", worst[1]);
    }
}

/// erf for the GELU reference (Abramowitz-Stegun 7.1.26 is too coarse; this is the series /
/// continued fraction pair, good to 1e-15).
fn libm_erf(x: f64) -> f64 {
    if x.abs() < 2.5 {
        let (mut term, mut sum, x2) = (x, x, x * x);
        for n in 1..80 {
            term *= -x2 / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        let t = x.abs();
        let mut f = 0.0;
        for n in (1..120).rev() {
            f = (n as f64 / 2.0) / (t + f);
        }
        let erfc = (-t * t).exp() / std::f64::consts::PI.sqrt() / (t + f);
        (1.0 - erfc).copysign(x)
    }
}
