//! Vulkan data-movement and elementwise launchers (`exec::vulkan::ops::data`) against the CPU
//! reference, bit for bit: f32 results are compared as u32 bits, on random shapes (odd sizes,
//! tails past a workgroup, broadcasting with rank mismatch and size-1 axes, empty tensors) and
//! values (denormals, ±inf, NaN payloads, -0.0, huge and extreme integers). CAST is checked
//! against the VM itself running a CAST instruction on the CPU.
//!
//! With no Vulkan device these tests print "skipped: ..." and pass, unless
//! ADEADVM_REQUIRE_VULKAN=1 (CI), where a missing device fails them.

mod common;

use adeadvm::exec::cpu::reference::{self as r, Binary, Compare, Unary};
use adeadvm::exec::vulkan::ops::data;
use adeadvm::exec::vulkan::{Recorder, Slice, VulkanError, VulkanExec};
use adeadvm::isa::{DType, Dist, Tier};
use adeadvm::vm::HostTensor;
use common::vk::{exec, BINARY, UNARY};
use proptest::prelude::*;
use proptest::sample::select;

/// One batch: `record` gets the kernels, a recorder and an output slice of `out_words` words;
/// `inputs` are uploaded first (in order). Returns the output's words after the batch.
fn run(
    ex: &VulkanExec,
    inputs: &[&[u32]],
    out_words: usize,
    record: impl FnOnce(
        &adeadvm::exec::vulkan::Kernels,
        &mut Recorder,
        &Slice,
        &[Slice],
    ) -> Result<(), VulkanError>,
) -> Vec<u32> {
    let mut rec = Recorder::new(ex.device()).unwrap();
    let ins: Vec<Slice> =
        inputs.iter().map(|x| ex.upload(&mut rec, bytemuck::cast_slice(x)).unwrap()).collect();
    let out = ex.alloc(out_words as u64 * 4).unwrap();
    record(ex.kernels(), &mut rec, &out, &ins).unwrap();
    bytemuck::pod_collect_to_vec(&ex.fetch(&mut rec, &out).unwrap())
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn ibits(x: &[i32]) -> Vec<u32> {
    x.iter().map(|&v| v as u32).collect()
}

/// Asserts equal words, naming the first difference.
fn same(what: &str, want: &[u32], got: &[u32]) {
    assert_eq!(want.len(), got.len(), "{what}: length");
    if let Some(i) = (0..want.len()).find(|&i| want[i] != got[i]) {
        let bad = (0..want.len()).filter(|&i| want[i] != got[i]).count();
        panic!(
            "{what}: {bad} of {} words differ; first at {i}: cpu {:#010x}, vulkan {:#010x}",
            want.len(),
            want[i],
            got[i]
        );
    }
}

/// f32 bit patterns that matter: zeros, denormals, FLT_MIN neighbours, ones, huge, infinities,
/// NaN payloads, integers around 2^24 and 2^31.
const SPECIAL_F32: &[u32] = &[
    0x0000_0000,
    0x8000_0000,
    0x0000_0001,
    0x8000_0001,
    0x007f_ffff,
    0x807f_ffff,
    0x0080_0000,
    0x8080_0000,
    0x3f00_0000,
    0x3f80_0000,
    0xbf80_0000,
    0x3fc0_0000,
    0xbfc0_0000,
    0x4020_0000,
    0xc020_0000,
    0x3f7f_ffff,
    0x4b80_0000,
    0x4b80_0001,
    0x4eff_ffff,
    0x4f00_0000,
    0xcf00_0000,
    0xcf00_0001,
    0x4f00_0001,
    0x477f_e000,
    0x477f_f000,
    0x477f_efff,
    0x3380_0000,
    0x3300_0000,
    0x3340_0000,
    0x387f_c000,
    0x3f80_8000,
    0x3f81_8000,
    0x7f7f_ffff,
    0xff7f_ffff,
    0x7f80_0000,
    0xff80_0000,
    0x7fc0_0000,
    0xffc0_0000,
    0x7f80_0001,
    0x7fbf_ffff,
    0xff80_0001,
    0x7fc0_1234,
    0xffff_ffff,
];

fn f32_value() -> impl Strategy<Value = f32> {
    prop_oneof![
        select(SPECIAL_F32).prop_map(f32::from_bits),
        any::<u32>().prop_map(f32::from_bits),
        -100.0f32..100.0,
    ]
}

fn i32_value() -> impl Strategy<Value = i32> {
    prop_oneof![
        select(
            &[
                0,
                1,
                -1,
                2,
                i32::MIN,
                i32::MIN + 1,
                i32::MAX,
                i32::MAX - 1,
                1 << 24,
                (1 << 24) + 1,
                -(1 << 30)
            ][..]
        ),
        any::<i32>(),
        -1000i32..1000,
    ]
}

/// A length that is often empty, one, just past a workgroup or odd.
fn length() -> impl Strategy<Value = usize> {
    prop_oneof![select(&[0usize, 1, 2, 3, 255, 256, 257, 511, 1023][..]), 0usize..1500]
}

/// (out, a, b) shapes that broadcast: out of rank 0..=8 (sizes 0..=4, mostly non-zero and small
/// at high rank); a and b are suffixes of it, each axis kept or made 1.
fn broadcast_shapes() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, Vec<usize>)> {
    (0usize..=8)
        .prop_flat_map(|rank| {
            let max = if rank > 5 { 3 } else { 6 };
            let dim = prop_oneof![20 => 1usize..=max, 1 => Just(0usize)];
            let suffix = (0..=rank, prop::collection::vec(any::<bool>(), rank));
            (prop::collection::vec(dim, rank), suffix.clone(), suffix)
        })
        .prop_map(|(out, (la, ma), (lb, mb))| {
            let take = |len: usize, ones: &[bool]| -> Vec<usize> {
                let lead = out.len() - len;
                (lead..out.len()).map(|i| if ones[i] { 1 } else { out[i] }).collect()
            };
            let (a, b) = (take(la, &ma), take(lb, &mb));
            (out, a, b)
        })
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// What a strided copy of `x` over `shape` leaves in a destination of `dst_len` words filled
/// with `fill`: dst[doff + Σ c·ds] = x[soff + Σ c·ss] for every multi-index c, by index
/// arithmetic.
fn strided_reference(
    x: &[u32],
    dst_len: usize,
    fill: u32,
    (doff, ds): (usize, &[usize]),
    (soff, ss): (usize, &[usize]),
    shape: &[usize],
) -> Vec<u32> {
    let mut want = vec![fill; dst_len];
    for i in 0..numel(shape) {
        let (mut rem, mut d, mut s) = (i, doff, soff);
        for ax in (0..shape.len()).rev() {
            let c = rem % shape[ax];
            rem /= shape[ax];
            d += c * ds[ax];
            s += c * ss[ax];
        }
        want[d] = x[s];
    }
    want
}

/// Strided copies whose last axis is contiguous on both sides in whole vec4s move four words a
/// thread; an offset or stride that is not whole vec4s keeps them one a thread. Both give the
/// index arithmetic's words.
#[test]
fn strided_copy_in_quads() {
    let Some(ex) = exec() else { return };
    let x: Vec<u32> = (0..4096u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
    // (shape, dst strides and offset, src strides and offset)
    type Case<'a> = (&'a [usize], &'a [usize], usize, &'a [usize], usize);
    let cases: [Case; 6] = [
        (&[1000], &[1], 0, &[1], 0),
        (&[3, 5, 8], &[48, 8, 1], 4, &[400, 12, 1], 8),
        (&[7, 12], &[12, 1], 0, &[16, 1], 4),
        (&[4, 6, 4], &[24, 4, 1], 8, &[4, 80, 1], 0),
        (&[3, 8], &[8, 1], 2, &[8, 1], 0),
        (&[5, 8], &[8, 1], 0, &[10, 1], 0),
    ];
    for (shape, ds, doff, ss, soff) in cases {
        let dst_len = doff + shape.iter().zip(ds).map(|(&n, &s)| (n - 1) * s).sum::<usize>() + 1;
        let got = run(ex, &[&x], dst_len, |k, rec, o, ins| {
            data::fill(k, rec, o, dst_len, 7)?;
            data::strided_copy(k, rec, o, doff, ds, &ins[0], soff, ss, shape)
        });
        let want = strided_reference(&x, dst_len, 7, (doff, ds), (soff, ss), shape);
        same(&format!("strided copy {shape:?} dst {ds:?}+{doff} src {ss:?}+{soff}"), &want, &got);
    }
    // data::copy: whole vec4s through the kernel, other lengths through a transfer.
    for words in [4usize, 1000, 1001, 4095] {
        let got = run(ex, &[&x[..words]], words, |k, rec, o, ins| data::copy(k, rec, o, &ins[0]));
        same(&format!("copy of {words} words"), &x[..words], &got);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn unary_matches_reference(op in select(&UNARY[..]), x in prop::collection::vec(f32_value(), 0..700)) {
        let Some(ex) = exec() else { return Ok(()) };
        let n = x.len();
        let got = run(ex, &[&bits(&x)], n, |k, rec, out, ins| data::unary(k, rec, op, Tier::Strict, out, &ins[0], n));
        let mut want = vec![0.0f32; n];
        r::unary(op, &x, &mut want);
        same(&format!("{op:?}"), &bits(&want), &got);
    }

    #[test]
    fn unary_i32_wraps_like_rust(neg in any::<bool>(), x in prop::collection::vec(i32_value(), 0..700)) {
        let Some(ex) = exec() else { return Ok(()) };
        let n = x.len();
        let got = run(ex, &[&ibits(&x)], n, |k, rec, out, ins| data::unary_i32(k, rec, neg, out, &ins[0], n));
        let want: Vec<i32> = x.iter().map(|&v| if neg { v.wrapping_neg() } else { v.wrapping_abs() }).collect();
        same(if neg { "NEG i32" } else { "ABS i32" }, &ibits(&want), &got);
    }

    #[test]
    fn binary_broadcasts_like_reference(
        op in select(&BINARY[..]),
        (out, sa, sb) in broadcast_shapes(),
        seed in any::<u64>(),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let (a, b) = (values_f32(seed, numel(&sa)), values_f32(!seed, numel(&sb)));
        let n = numel(&out);
        let got = run(ex, &[&bits(&a), &bits(&b)], n, |k, rec, o, ins| {
            data::binary(k, rec, op, o, &ins[0], &sa, &ins[1], &sb, &out)
        });
        let mut want = vec![0.0f32; n];
        r::binary(op, &a, &sa, &b, &sb, &mut want, &out);
        same(&format!("{op:?} {sa:?} {sb:?} -> {out:?}"), &bits(&want), &got);
    }

    #[test]
    fn binary_i32_broadcasts_like_reference(
        op in select(&BINARY[..]),
        (out, sa, sb) in broadcast_shapes(),
        seed in any::<u64>(),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let (a, b) = (values_i32(seed, numel(&sa)), values_i32(!seed, numel(&sb)));
        let n = numel(&out);
        let got = run(ex, &[&ibits(&a), &ibits(&b)], n, |k, rec, o, ins| {
            data::binary_i32(k, rec, op, o, &ins[0], &sa, &ins[1], &sb, &out)
        });
        let mut want = vec![0i32; n];
        r::binary_i32(op, &a, &sa, &b, &sb, &mut want, &out);
        same(&format!("{op:?} i32 {sa:?} {sb:?} -> {out:?}"), &ibits(&want), &got);
    }

    #[test]
    fn compare_broadcasts_like_reference(
        op in select(&COMPARE[..]),
        (out, sa, sb) in broadcast_shapes(),
        seed in any::<u64>(),
        ints in any::<bool>(),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let (na, nb, n) = (numel(&sa), numel(&sb), numel(&out));
        let (a, mut b) = if ints {
            (ibits(&values_i32(seed, na)), ibits(&values_i32(!seed, nb)))
        } else {
            (bits(&values_f32(seed, na)), bits(&values_f32(!seed, nb)))
        };
        mix_in(seed ^ 5, &a, &mut b);
        let got = run(ex, &[&a, &b], n, |k, rec, o, ins| {
            data::compare(k, rec, op, ints, o, &ins[0], &sa, &ins[1], &sb, &out)
        });
        let mut want = vec![0i32; n];
        if ints {
            let (x, y): (Vec<i32>, Vec<i32>) = (a.iter().map(|&w| w as i32).collect(), b.iter().map(|&w| w as i32).collect());
            r::compare_i32(op, &x, &sa, &y, &sb, &mut want, &out);
        } else {
            let (x, y): (Vec<f32>, Vec<f32>) =
                (a.iter().map(|&w| f32::from_bits(w)).collect(), b.iter().map(|&w| f32::from_bits(w)).collect());
            r::compare(op, &x, &sa, &y, &sb, &mut want, &out);
        }
        same(&format!("{op:?} ints={ints} {sa:?} {sb:?} -> {out:?}"), &ibits(&want), &got);
    }

    #[test]
    fn select_broadcasts_like_reference(
        (out, sa, sb) in broadcast_shapes(),
        seed in any::<u64>(),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let sc = cond_shape(seed, &out);
        let cond: Vec<i32> = values_i32(seed ^ 9, numel(&sc)).iter().map(|&v| v % 2).collect();
        let (a, b) = (bits(&values_f32(seed, numel(&sa))), bits(&values_f32(!seed, numel(&sb))));
        let n = numel(&out);
        let got = run(ex, &[&ibits(&cond), &a, &b], n, |k, rec, o, ins| {
            data::select(k, rec, o, &ins[0], &sc, &ins[1], &sa, &ins[2], &sb, &out)
        });
        let mut want = vec![0u32; n];
        r::select(&cond, &sc, &a, &sa, &b, &sb, &mut want, &out);
        same(&format!("SELECT {sc:?} {sa:?} {sb:?} -> {out:?}"), &want, &got);
    }

    #[test]
    fn binary_scalar_matches_reference(
        op in select(&BINARY[..]),
        s in f32_value(),
        a in prop::collection::vec(f32_value(), 0..700),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let n = a.len();
        let got = run(ex, &[&bits(&a)], n, |k, rec, o, ins| data::binary_scalar(k, rec, op, o, &ins[0], s, n));
        let mut want = vec![0.0f32; n];
        r::binary_scalar(op, &a, s, &mut want);
        same(&format!("{op:?} scalar {:#010x}", s.to_bits()), &bits(&want), &got);
    }

    #[test]
    fn fill_sets_every_word(n in length(), v in any::<u32>()) {
        let Some(ex) = exec() else { return Ok(()) };
        // One word past n stays untouched.
        let got = run(ex, &[], n + 1, |k, rec, o, _| {
            data::fill(k, rec, o, n + 1, 0xdead_beef)?;
            data::fill(k, rec, o, n, v)
        });
        let mut want = vec![v; n];
        want.push(0xdead_beef);
        same("FILL", &want, &got);
    }

    #[test]
    fn rand_matches_fill_strict(n in length(), seed in any::<u32>(), normal in any::<bool>()) {
        let Some(ex) = exec() else { return Ok(()) };
        let dist = if normal { Dist::Normal } else { Dist::Uniform };
        let got = run(ex, &[], n, |k, rec, o, _| data::rand(k, rec, o, n, seed, dist));
        let mut want = vec![0.0f32; n];
        adeadvm::rand::fill_strict(seed, dist, &mut want);
        same(&format!("RAND {dist:?} seed {seed}"), &bits(&want), &got);
    }

    #[test]
    fn unpack_and_pack16_move_raw_halves(w in prop::collection::vec(any::<u32>(), 0..400), odd in any::<bool>()) {
        let Some(ex) = exec() else { return Ok(()) };
        let n = (2 * w.len()).saturating_sub(usize::from(odd));
        let got = run(ex, &[&w], n, |k, rec, o, ins| data::unpack16(k, rec, o, &ins[0], n));
        let halves: Vec<u32> = (0..n).map(|i| (w[i / 2] >> (16 * (i % 2))) & 0xffff).collect();
        same("unpack16", &halves, &got);
        // Garbage in the high halves must not leak; an odd tail's upper half is 0.
        // A garbage word past n must not reach an odd tail either.
        let mut dirty: Vec<u32> = halves.iter().enumerate().map(|(i, &h)| h | ((i as u32) << 16)).collect();
        dirty.push(0xbeef_beef);
        let words = n.div_ceil(2);
        let got = run(ex, &[&dirty], words, |k, rec, o, ins| data::pack16(k, rec, o, &ins[0], n));
        let mut want: Vec<u32> = w[..words].to_vec();
        if odd && words > 0 {
            want[words - 1] &= 0xffff;
        }
        same("pack16", &want, &got);
    }

    #[test]
    fn transpose_slice_and_concat_by_strided_copy(
        shape in prop::collection::vec(1usize..=5, 0..=5),
        perm_seed in any::<u64>(),
        cut in any::<prop::sample::Index>(),
        grow in 0usize..=3,
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let rank = shape.len();
        let x: Vec<u32> = (0..numel(&shape) as u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
        let st = r::strides(&shape);
        // TRANSPOSE: out axis i = src axis perm[i]; walk the output shape with the output's
        // row-major strides and the permuted source strides.
        let mut perm: Vec<u8> = (0..rank as u8).collect();
        let mut s = perm_seed;
        for i in (1..rank).rev() {
            perm.swap(i, (s % (i as u64 + 1)) as usize);
            s /= i as u64 + 1;
        }
        let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p as usize]).collect();
        let src_st: Vec<usize> = perm.iter().map(|&p| st[p as usize]).collect();
        let got = run(ex, &[&x], x.len(), |k, rec, o, ins| {
            data::strided_copy(k, rec, o, 0, &r::strides(&out_shape), &ins[0], 0, &src_st, &out_shape)
        });
        let mut want = vec![0u32; x.len()];
        r::transpose(&x, &shape, &perm, &mut want);
        same(&format!("TRANSPOSE {shape:?} by {perm:?}"), &want, &got);
        if rank == 0 {
            return Ok(());
        }
        // SLICE along one axis: start..start+len, the source offset start * stride.
        let ax = cut.index(rank);
        let start = cut.index(shape[ax]);
        let len = shape[ax] - start;
        let mut sl = shape.clone();
        sl[ax] = len;
        let got = run(ex, &[&x], numel(&sl), |k, rec, o, ins| {
            data::strided_copy(k, rec, o, 0, &r::strides(&sl), &ins[0], start * st[ax], &st, &sl)
        });
        let mut want = vec![0u32; numel(&sl)];
        r::slice(&x, &shape, ax, start, len, &mut want);
        same(&format!("SLICE {shape:?} axis {ax} from {start}"), &want, &got);
        // CONCAT x with a second tensor along ax: two launches into one destination.
        let mut bs = shape.clone();
        bs[ax] = grow;
        let b: Vec<u32> = (0..numel(&bs) as u32).map(|i| !i).collect();
        let mut cs = shape.clone();
        cs[ax] += grow;
        let cst = r::strides(&cs);
        let got = run(ex, &[&x, &b], numel(&cs), |k, rec, o, ins| {
            data::strided_copy(k, rec, o, 0, &cst, &ins[0], 0, &st, &shape)?;
            data::strided_copy(k, rec, o, shape[ax] * cst[ax], &cst, &ins[1], 0, &r::strides(&bs), &bs)
        });
        let mut want = vec![0u32; numel(&cs)];
        r::concat(&x, &shape, &b, &bs, ax, &mut want);
        same(&format!("CONCAT {shape:?} + {bs:?} axis {ax}"), &want, &got);
    }

    #[test]
    fn strided_copy_with_any_strides_and_offsets(
        shape in prop::collection::vec(0usize..=4, 0..=8),
        ds_pad in prop::collection::vec(0usize..=2, 8),
        ss in prop::collection::vec(0usize..=7, 8),
        offs in (0usize..40, 0usize..40),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let rank = shape.len();
        // Destination strides: row-major with padding, so distinct indices never collide;
        // source strides arbitrary (0 repeats, overlaps allowed).
        let mut ds = vec![0usize; rank];
        let mut acc = 1;
        for d in (0..rank).rev() {
            ds[d] = acc;
            acc *= shape[d] + ds_pad[d];
        }
        let ss = &ss[..rank];
        let (doff, soff) = offs;
        let src_len = soff + shape.iter().zip(ss).map(|(&n, &s)| n.saturating_sub(1) * s).sum::<usize>() + 1;
        let dst_len = doff + acc;
        let x: Vec<u32> = (0..src_len as u32).map(|i| i ^ 0xa5a5_0000).collect();
        let got = run(ex, &[&x], dst_len, |k, rec, o, ins| {
            data::fill(k, rec, o, dst_len, 7)?;
            data::strided_copy(k, rec, o, doff, &ds, &ins[0], soff, ss, &shape)
        });
        let want = strided_reference(&x, dst_len, 7, (doff, &ds), (soff, ss), &shape);
        same(&format!("strided copy {shape:?} dst {ds:?}+{doff} src {ss:?}+{soff}"), &want, &got);
    }

    #[test]
    fn gather_matches_reference_and_flags_the_first_bad_index(
        rows in 0usize..12,
        row in 0usize..9,
        idx in prop::collection::vec(-3i32..14, 0..300),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let table: Vec<u32> = (0..(rows * row) as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        let count = idx.len();
        let mut rec = Recorder::new(ex.device()).unwrap();
        let t = ex.upload(&mut rec, bytemuck::cast_slice(&table)).unwrap();
        let ix = ex.upload(&mut rec, bytemuck::cast_slice(&idx)).unwrap();
        // Status words: slot 2 is ours; its neighbours must stay untouched.
        let status = ex.upload(&mut rec, bytemuck::cast_slice(&[u32::MAX; 4])).unwrap();
        let out = ex.upload(&mut rec, bytemuck::cast_slice(&vec![0x5555_5555u32; count * row])).unwrap();
        data::gather(ex.kernels(), &mut rec, &out, &t, rows, row, &ix, count, &status, 2).unwrap();
        let got: Vec<u32> = bytemuck::pod_collect_to_vec(&ex.fetch(&mut rec, &out).unwrap());
        let st: Vec<u32> = bytemuck::pod_collect_to_vec(&ex.fetch(&mut rec, &status).unwrap());
        let mut want = vec![0x5555_5555u32; count * row];
        let first_bad = r::gather(&table, rows, row, &idx, &mut want).err();
        let expect_status = first_bad.map_or(u32::MAX, |(pos, _)| pos as u32);
        prop_assert_eq!(st, vec![u32::MAX, u32::MAX, expect_status, u32::MAX]);
        // Rows with a good index must match; past the first bad position the CPU stopped, so
        // compare only good rows against the table directly.
        for (i, &v) in idx.iter().enumerate() {
            if v >= 0 && (v as usize) < rows {
                let s = v as usize * row;
                prop_assert_eq!(&got[i * row..(i + 1) * row], &table[s..s + row], "row {}", i);
            }
        }
        if first_bad.is_none() {
            same("GATHER", &want, &got);
        }
    }
}

const COMPARE: [Compare; 3] = [Compare::Eq, Compare::Lt, Compare::Le];

/// `b` with a quarter of its elements taken from `a` (the same bits) and some zeros and
/// denormals of either sign, so that equal operands meet.
fn mix_in(seed: u64, a: &[u32], b: &mut [u32]) {
    let mut g = common::Rng(seed);
    for v in b.iter_mut() {
        let r = g.next_u64();
        match r % 8 {
            0 | 1 if !a.is_empty() => *v = a[(r >> 8) as usize % a.len()],
            2 => *v = [0x0000_0000, 0x8000_0000, 0x0000_0001, 0x8000_0003][(r >> 8) as usize % 4],
            _ => {}
        }
    }
}

/// A cond shape that broadcasts to `out` (a suffix of it, each axis kept or made 1).
fn cond_shape(seed: u64, out: &[usize]) -> Vec<usize> {
    let mut g = common::Rng(seed);
    let len = (g.next_u64() % (out.len() as u64 + 1)) as usize;
    out[out.len() - len..].iter().map(|&d| if g.next_u64().is_multiple_of(3) { 1 } else { d }).collect()
}

/// Every pair of the special f32 patterns and 300,000 random pairs (half of them of nearby
/// magnitude, half equal up to a zero's sign or a denormal), each comparison on the device
/// against `Compare::apply`; then i32 pairs with the extremes against `apply_i32`.
#[test]
fn compare_every_special_pair_and_random_pairs() {
    let Some(ex) = exec() else { return };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for &x in SPECIAL_F32 {
        for &y in SPECIAL_F32 {
            a.push(x);
            b.push(y);
        }
    }
    let mut g = common::Rng(77);
    for i in 0..300_000u32 {
        let x = g.next_u64() as u32;
        let y = match i % 4 {
            0 => g.next_u64() as u32,
            1 => x ^ (g.next_u64() as u32 & 0x0000_00ff), // the same magnitude nearly
            2 => x ^ 0x8000_0000,                         // the other sign
            _ => x & 0x807f_ffff,                         // a denormal or zero of its sign
        };
        a.push(x);
        b.push(y);
    }
    let n = a.len();
    for op in COMPARE {
        let got = run(ex, &[&a, &b], n, |k, rec, o, ins| {
            data::compare(k, rec, op, false, o, &ins[0], &[n], &ins[1], &[n], &[n])
        });
        let want: Vec<u32> =
            a.iter().zip(&b).map(|(&x, &y)| op.apply(f32::from_bits(x), f32::from_bits(y)) as u32).collect();
        same(&format!("{op:?} f32 pairs"), &want, &got);
        // The same pairs as i32.
        let got = run(ex, &[&a, &b], n, |k, rec, o, ins| {
            data::compare(k, rec, op, true, o, &ins[0], &[n], &ins[1], &[n], &[n])
        });
        let want: Vec<u32> =
            a.iter().zip(&b).map(|(&x, &y)| op.apply_i32(x as i32, y as i32) as u32).collect();
        same(&format!("{op:?} i32 pairs"), &want, &got);
    }
}

/// SELECT over a million words with cond, a and b each of a different broadcast (a column, a
/// row, the whole), past one grid's first pass.
#[test]
fn select_large_with_three_broadcasts() {
    let Some(ex) = exec() else { return };
    let (rows, cols) = (977, 1031);
    let cond: Vec<i32> = (0..rows as i32).map(|i| [0, 1, -1, i32::MIN][i as usize % 4]).collect();
    let a: Vec<u32> = (0..cols as u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
    let b: Vec<u32> = (0..(rows * cols) as u32).map(|i| !i).collect();
    let out = [rows, cols];
    let got = run(ex, &[&ibits(&cond), &a, &b], rows * cols, |k, rec, o, ins| {
        data::select(k, rec, o, &ins[0], &[rows, 1], &ins[1], &[1, cols], &ins[2], &out, &out)
    });
    let mut want = vec![0u32; rows * cols];
    r::select(&cond, &[rows, 1], &a, &[1, cols], &b, &out, &mut want, &out);
    same("SELECT column/row/whole", &want, &got);
}

/// Deterministic f32 test data: specials and random bit patterns mixed.
fn values_f32(seed: u64, n: usize) -> Vec<f32> {
    let mut g = common::Rng(seed);
    (0..n)
        .map(|_| {
            let r = g.next_u64();
            match r % 4 {
                0 => f32::from_bits(SPECIAL_F32[(r >> 8) as usize % SPECIAL_F32.len()]),
                1 => f32::from_bits((r >> 32) as u32),
                _ => ((r >> 40) as f32 / 16_777_216.0 - 0.5) * 8.0,
            }
        })
        .collect()
}

fn values_i32(seed: u64, n: usize) -> Vec<i32> {
    let mut g = common::Rng(seed);
    (0..n)
        .map(|_| {
            let r = g.next_u64();
            match r % 4 {
                0 => [i32::MIN, i32::MAX, 0, -1, 1, i32::MIN + 1][(r >> 8) as usize % 6],
                1 => (r >> 32) as i32,
                _ => ((r >> 40) % 2001) as i32 - 1000,
            }
        })
        .collect()
}

/// Raw source words for `n` elements of `d`: f32 specials and random bits, every kind of
/// 16-bit pattern (denormal, inf, NaN, -0), and extreme i32s.
fn cast_source(d: DType, n: usize) -> Vec<u8> {
    let mut g = common::Rng(n as u64 * 31 + d as u64);
    let mut out = Vec::new();
    for i in 0..n {
        let r = g.next_u64();
        match d {
            DType::F32 => {
                let v = if i < SPECIAL_F32.len() { SPECIAL_F32[i] } else { values_f32(r, 1)[0].to_bits() };
                out.extend(v.to_le_bytes());
            }
            DType::I32 => {
                let v = match i {
                    0..=5 => [i32::MIN, i32::MAX, 0, -1, 16_777_217, -16_777_219][i],
                    _ if r.is_multiple_of(3) => (r >> 32) as i32 >> (r % 31),
                    _ => (r >> 32) as i32,
                };
                out.extend(v.to_le_bytes());
            }
            DType::F16 | DType::Bf16 => {
                const H: [u16; 12] =
                    [0, 0x8000, 1, 0x8001, 0x03ff, 0x7bff, 0x7c00, 0xfc00, 0x7c01, 0x7e00, 0xffff, 0x7f80];
                let v = if i < H.len() { H[i] } else { (r >> 48) as u16 };
                out.extend(v.to_le_bytes());
            }
        }
    }
    out
}

/// CAST of every dtype pair against the VM's own CAST instruction on the CPU, for lengths with
/// and without an odd 16-bit tail, one element, more than a workgroup, and whole quads (four
/// elements an invocation: 4, 64, 1000 and 4096, the special values among the first quads).
#[test]
fn cast_every_pair_matches_the_vm() {
    let Some(ex) = exec() else { return };
    for sd in DType::ALL {
        for dd in DType::ALL {
            for n in [1usize, 2, 3, 4, 64, 257, 1000, 1001, 4096] {
                let src_bytes = cast_source(sd, n);
                let prog = common::build(&format!(
                    ".input %x {sd}[{n}]\n.output y {dd}[{n}]\nALLOC %t: {dd}[{n}]\nCAST %t, %x\nSTORE y, %t\nFREE %t\n"
                ));
                let x = HostTensor::from_bytes(sd, vec![n], &src_bytes).unwrap();
                let outs = common::run(&prog, &[("x", x)]).unwrap();
                let want = outs["y"].bytes().to_vec();
                // Garbage past the n elements (0x3c00 halves) must not reach the output.
                let mut padded = src_bytes.clone();
                while !padded.len().is_multiple_of(4) || padded.len() < src_bytes.len() + 4 {
                    padded.extend([0x00, 0x3c]);
                }
                let words = (n * dd.size()).div_ceil(4);
                let got = run(ex, &[bytemuck::cast_slice(&padded)], words, |k, rec, o, ins| {
                    data::cast(k, rec, o, dd, &ins[0], sd, n)
                });
                let got: Vec<u8> = bytemuck::cast_slice(&got).to_vec();
                let what = format!("CAST {sd} -> {dd}, n = {n}");
                assert_eq!(&got[..want.len()], &want[..], "{what}");
                // An odd 16-bit tail: the last word's upper half is 0.
                assert!(got[want.len()..].iter().all(|&b| b == 0), "{what}: tail {:?}", &got[want.len()..]);
            }
        }
    }
}

/// Every 4093rd 32-bit pattern, little-endian, a whole number of quads (the last left out).
fn every_4093rd_word() -> Vec<u8> {
    (0..(u32::MAX / 4093) & !3).flat_map(|i| (i * 4093).to_le_bytes()).collect()
}

/// CAST of every 16-bit pattern, and of every 4093rd 32-bit pattern (a whole number of quads:
/// the last is left out), to every dtype, against the VM's CAST on the CPU.
#[test]
fn cast_sweeps_match_the_vm() {
    let Some(ex) = exec() else { return };
    for sd in DType::ALL {
        let src: Vec<u8> = if sd.size() == 2 {
            (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect()
        } else {
            every_4093rd_word()
        };
        let n = src.len() / sd.size();
        let x = HostTensor::from_bytes(sd, vec![n], &src).unwrap();
        for dd in DType::ALL {
            let prog = common::build(&format!(
                ".input %x {sd}[{n}]\n.output y {dd}[{n}]\nALLOC %t: {dd}[{n}]\nCAST %t, %x\nSTORE y, %t\nFREE %t\n"
            ));
            let outs = common::run(&prog, &[("x", x.clone())]).unwrap();
            let want: Vec<u32> = bytemuck::pod_collect_to_vec(outs["y"].bytes());
            let got = run(ex, &[bytemuck::cast_slice(&src)], want.len(), |k, rec, o, ins| {
                data::cast(k, rec, o, dd, &ins[0], sd, n)
            });
            same(&format!("CAST sweep {sd} -> {dd}"), &want, &got);
        }
    }
}

/// GELU then CAST in one pass (`data::gelu_cast`, the fast tier's 16-bit MATMUL with GELU) is the
/// VM's GELU then CAST on the CPU, bit for bit: into every dtype, with special values, an odd
/// 16-bit tail, whole quads, and every 4093rd 32-bit pattern.
#[test]
fn gelu_cast_is_gelu_then_cast() {
    let Some(ex) = exec() else { return };
    let sweep = every_4093rd_word();
    for dd in DType::ALL {
        for n in [1usize, 3, 64, 1001, 4096, sweep.len() / 4] {
            let src = if n == sweep.len() / 4 { sweep.clone() } else { cast_source(DType::F32, n) };
            let prog = common::build(&format!(
                ".input %x f32[{n}]\n.output y {dd}[{n}]\nALLOC %g: f32[{n}]\nALLOC %t: {dd}[{n}]\n\
                 GELU %g, %x\nCAST %t, %g\nSTORE y, %t\nFREE %g\nFREE %t\n"
            ));
            let x = HostTensor::from_bytes(DType::F32, vec![n], &src).unwrap();
            let want = common::run(&prog, &[("x", x)]).unwrap()["y"].bytes().to_vec();
            let words = (n * dd.size()).div_ceil(4);
            let got = run(ex, &[bytemuck::cast_slice(&src)], words, |k, rec, o, ins| {
                data::gelu_cast(k, rec, o, dd, &ins[0], n)
            });
            let got: Vec<u8> = bytemuck::cast_slice(&got).to_vec();
            assert_eq!(&got[..want.len()], &want[..], "GELU then CAST f32 -> {dd}, n = {n}");
        }
    }
}

/// A large RAND of each distribution (one seed), past the sizes the property test draws.
#[test]
fn rand_large_matches_fill_strict() {
    let Some(ex) = exec() else { return };
    let n = 300_000;
    for dist in [Dist::Uniform, Dist::Normal] {
        let got = run(ex, &[], n, |k, rec, o, _| data::rand(k, rec, o, n, 0xC0FF_EE11, dist));
        let mut want = vec![0.0f32; n];
        adeadvm::rand::fill_strict(0xC0FF_EE11, dist, &mut want);
        same(&format!("RAND {dist:?} n = {n}"), &bits(&want), &got);
    }
}

/// i32 -> f32 rounding at every binade boundary and tie, against Rust's `as`.
#[test]
fn cast_i32_to_f32_rounds_to_nearest_even() {
    let Some(ex) = exec() else { return };
    let mut v: Vec<i32> = Vec::new();
    for p in 0..31 {
        let b = 1i64 << p;
        for d in [-3i64, -2, -1, 0, 1, 2, 3] {
            for s in [1i64, -1] {
                let x = s * (b + d);
                if let Ok(x) = i32::try_from(x) {
                    v.push(x);
                }
            }
        }
        // Ties and near-ties above 2^24: low bits exactly half an ulp, and either side.
        if p > 24 {
            let half = 1i64 << (p - 24);
            for k in [1i64, 2, 3, 5] {
                for e in [-1i64, 0, 1] {
                    let x = b + k * 2 * half + half + e;
                    if let Ok(x) = i32::try_from(x) {
                        v.extend([x, x.wrapping_neg()]);
                    }
                }
            }
        }
    }
    v.extend([i32::MIN, i32::MAX, i32::MAX - 64, i32::MAX - 63]);
    let n = v.len();
    let got =
        run(ex, &[&ibits(&v)], n, |k, rec, o, ins| data::cast(k, rec, o, DType::F32, &ins[0], DType::I32, n));
    let want: Vec<u32> = v.iter().map(|&x| (x as f32).to_bits()).collect();
    same("CAST i32 -> f32", &want, &got);
}

/// The nearest value to the integer `v` with `sig` significant bits (ties to even), computed
/// exactly in i64, then encoded as f16 (`sig` 11, 5 exponent bits) or bf16 (`sig` 8, 8 exponent
/// bits): the model CAST i32 -> f16 / bf16 must match (one rounding, no f32 in between).
fn model_i32_to_16(v: i32, sig: u32) -> u16 {
    let (ebits, bias): (u32, i64) = if sig == 11 { (5, 15) } else { (8, 127) };
    let sign = if v < 0 { 0x8000u16 } else { 0 };
    let mag = (v as i64).abs();
    if mag == 0 {
        return 0;
    }
    // Round |v| to `sig` significant bits: r = mag rounded to a multiple of 2^k.
    let p = 63 - mag.leading_zeros() as i64; // 2^p <= mag < 2^(p+1)
    let k = (p + 1 - sig as i64).max(0);
    let unit = 1i64 << k;
    let (q, rem) = (mag / unit, mag % unit);
    let q = if 2 * rem > unit || (2 * rem == unit && q % 2 == 1) { q + 1 } else { q };
    let r = q * unit; // the rounded magnitude, exactly
    let e = 63 - r.leading_zeros() as i64; // its exponent (a carry may have raised it)
    let max_e = (1i64 << ebits) - 2 - bias; // the largest finite exponent
    if e > max_e {
        return sign | (((1u16 << ebits) - 1) << (sig - 1));
    }
    let frac = (r >> (e - (sig as i64 - 1)).max(0) << (sig as i64 - 1 - e).max(0)) - (1i64 << (sig - 1));
    sign | (((e + bias) as u16) << (sig - 1)) | frac as u16
}

/// CAST i32 -> f16 and i32 -> bf16 round once to nearest even, against the exact integer model
/// above: every binade boundary, ties and near-ties at every shift, f16's overflow edge (65519,
/// 65520), the 2^25 + 2^17 + 1 (0x4c01; rounding through f32 gave 0x4c00), and random
/// integers of every magnitude; on the Vulkan launcher and through the VM on the scalar CPU,
/// the SIMD CPU and the Vulkan backend.
#[test]
fn cast_i32_to_16_bit_rounds_once() {
    let mut v: Vec<i32> = vec![0, 1, -1, 65504, 65519, 65520, 65535, 65536, -65520, i32::MIN, i32::MAX];
    v.push((1 << 25) + (1 << 17) + 1);
    for p in 0..31 {
        let b = 1i64 << p;
        for d in [-3i64, -2, -1, 0, 1, 2, 3] {
            v.extend(i32::try_from(b + d).ok());
        }
        for sig in [8u32, 11] {
            if p > sig {
                let half = 1i64 << (p - sig);
                for k in [0i64, 1, 2, 3, 5] {
                    for e in [-1i64, 0, 1] {
                        v.extend(i32::try_from(b + k * 2 * half + half + e).ok());
                    }
                }
            }
        }
    }
    let mut g = common::Rng(0x1236);
    for _ in 0..20_000 {
        let r = g.next_u64();
        v.push((r >> 32) as i32 >> (r % 32));
    }
    let negs: Vec<i32> = v.iter().map(|x| x.wrapping_neg()).collect();
    v.extend(negs);
    let n = v.len();
    assert_eq!(model_i32_to_16((1 << 25) + (1 << 17) + 1, 8), 0x4c01);
    for (dd, sig) in [(DType::F16, 11u32), (DType::Bf16, 8)] {
        let want: Vec<u16> = v.iter().map(|&x| model_i32_to_16(x, sig)).collect();
        let want_bytes: Vec<u8> = want.iter().flat_map(|h| h.to_le_bytes()).collect();
        let prog = common::build(&format!(
            ".input %x i32[{n}]\n.output y {dd}[{n}]\nALLOC %t: {dd}[{n}]\nCAST %t, %x\nSTORE y, %t\nFREE %t\n"
        ));
        let x = common::i32s(&[n], &v);
        let check = |what: &str, got: &[u8]| {
            if let Some(i) = (0..n).find(|&i| got[2 * i..2 * i + 2] != want_bytes[2 * i..2 * i + 2]) {
                panic!(
                    "{what}: CAST i32 -> {dd} of {}: got {:#06x}, the nearest is {:#06x}",
                    v[i],
                    u16::from_le_bytes([got[2 * i], got[2 * i + 1]]),
                    want[i]
                );
            }
        };
        for simd in [adeadvm::exec::cpu::SimdLevel::Scalar, adeadvm::exec::cpu::SimdLevel::detect()] {
            let config = adeadvm::vm::VmConfig { simd: Some(simd), ..Default::default() };
            let outs = common::run_with(&prog, &[("x", x.clone())], config).unwrap();
            check(&format!("VM on the CPU ({})", simd.name()), outs["y"].bytes());
        }
        let Some(ex) = exec() else { continue };
        let got = run(ex, &[&ibits(&v)], (2 * n).div_ceil(4), |k, rec, o, ins| {
            data::cast(k, rec, o, dd, &ins[0], DType::I32, n)
        });
        check("Vulkan launcher", &bytemuck::cast_slice::<u32, u8>(&got)[..2 * n]);
        let config = adeadvm::vm::VmConfig { backend: adeadvm::vm::Backend::Vulkan, ..Default::default() };
        let outs = common::run_with(&prog, &[("x", x.clone())], config).unwrap();
        check("VM on Vulkan", outs["y"].bytes());
    }
}

/// Element indices past 2^32: the Philox counter's high word gets the carry.
#[test]
fn rand_counters_past_2_pow_32() {
    let Some(ex) = exec() else { return };
    for (first, dist) in
        [((1u64 << 32) - 300, Dist::Uniform), ((1u64 << 32) - 7, Dist::Normal), (5u64 << 40, Dist::Normal)]
    {
        let n = 600;
        let got = run(ex, &[], n, |k, rec, o, _| data::rand_at(k, rec, o, n, 99, dist, first));
        let want: Vec<u32> = (0..n as u64)
            .map(|i| match dist {
                Dist::Uniform => adeadvm::rand::philox_uniform(99, first + i),
                Dist::Normal => adeadvm::rand::philox_normal(99, first + i),
            })
            .map(f32::to_bits)
            .collect();
        same(&format!("RAND {dist:?} from {first}"), &want, &got);
    }
}

/// More items than 65535 workgroups of 256 cover in one pass: the grid-stride loop does the rest.
#[test]
fn grid_stride_covers_more_than_the_workgroup_limit() {
    let Some(ex) = exec() else { return };
    let n = 65_535 * 256 + 777;
    let got = run(ex, &[], n, |k, rec, o, _| data::fill(k, rec, o, n, 0x3f80_0000));
    assert!(got.len() == n && got.iter().all(|&w| w == 0x3f80_0000), "FILL of {n} words");
}

/// transpose16 swaps the last two axes of 16-bit matrices, raw bits, against index arithmetic
/// here: whole 64 x 64 tiles, partial tiles on either side, one-word-wide rows, batches.
#[test]
fn transpose16_swaps_the_last_two_axes() {
    let Some(ex) = exec() else { return };
    for (batch, rows, cols) in [(1, 2, 2), (1, 64, 64), (3, 66, 130), (1, 130, 2), (5, 2, 200), (2, 192, 128)]
    {
        let n = batch * rows * cols;
        // Every half distinct (its own index, scrambled), so a misplaced one shows.
        let halves: Vec<u16> = (0..n as u32).map(|i| (i.wrapping_mul(40503) ^ (i >> 16)) as u16).collect();
        let words: Vec<u32> = halves.chunks(2).map(|p| u32::from(p[0]) | u32::from(p[1]) << 16).collect();
        let mut want = vec![0u16; n];
        for b in 0..batch {
            for r in 0..rows {
                for c in 0..cols {
                    want[(b * cols + c) * rows + r] = halves[(b * rows + r) * cols + c];
                }
            }
        }
        let want: Vec<u32> = want.chunks(2).map(|p| u32::from(p[0]) | u32::from(p[1]) << 16).collect();
        let got = run(ex, &[&words], n / 2, |k, rec, o, ins| {
            data::transpose16(k, rec, o, &ins[0], batch, rows, cols)
        });
        same(&format!("transpose16 of {batch} x {rows} x {cols}"), &want, &got);
    }
}

/// Bad arguments are refused with a message before anything is recorded; empty outputs record
/// nothing.
#[test]
fn bad_arguments_are_clear_errors_and_empty_outputs_record_nothing() {
    let Some(ex) = exec() else { return };
    let k = ex.kernels();
    let mut rec = Recorder::new(ex.device()).unwrap();
    let s = ex.alloc(64).unwrap(); // 16 words
    let msg = |e: VulkanError| e.to_string();
    let e = data::binary(k, &mut rec, Binary::Add, &s, &s, &[2, 3], &s, &[4, 3], &[2, 3]).unwrap_err();
    assert_eq!(msg(e), "invalid Vulkan dispatch: operand b of shape [4, 3] does not broadcast to [2, 3]");
    let e = data::binary(k, &mut rec, Binary::Add, &s, &s, &[1, 2, 3], &s, &[3], &[2, 3]).unwrap_err();
    assert_eq!(
        msg(e),
        "invalid Vulkan dispatch: operand a of shape [1, 2, 3] has more axes than the output [2, 3]"
    );
    let nine = [1usize; 9];
    let e = data::binary_i32(k, &mut rec, Binary::Add, &s, &s, &[], &s, &[], &nine).unwrap_err();
    assert_eq!(msg(e), "invalid Vulkan dispatch: the output has rank 9; kernels take at most 8 axes");
    let e = data::binary(k, &mut rec, Binary::Add, &s, &s, &[17], &s, &[1], &[17]).unwrap_err();
    assert_eq!(
        msg(e),
        "invalid Vulkan dispatch: the destination holds 16 32-bit words; the operation needs 17"
    );
    let e = data::unary(k, &mut rec, Unary::Exp, Tier::Strict, &s, &s, 20).unwrap_err();
    assert!(msg(e).contains("needs 20"));
    let e = data::strided_copy(k, &mut rec, &s, 0, &[1, 1], &s, 0, &[1], &[2, 2]).unwrap_err();
    assert_eq!(
        msg(e),
        "invalid Vulkan dispatch: a strided copy over shape [2, 2] needs 2 strides per side; given 2 (dst) and 1 (src)"
    );
    let e = data::strided_copy(k, &mut rec, &s, 10, &[1], &s, 0, &[1], &[7]).unwrap_err();
    assert_eq!(
        msg(e),
        "invalid Vulkan dispatch: the destination holds 16 32-bit words; the operation needs 17"
    );
    let e = data::strided_copy(k, &mut rec, &s, 0, &[usize::MAX], &s, 0, &[1], &[3]).unwrap_err();
    assert_eq!(msg(e), "invalid Vulkan dispatch: a strided copy's addresses overflow");
    let e = data::gather(k, &mut rec, &s, &s, 4, 4, &s, 4, &s, 16).unwrap_err();
    assert_eq!(
        msg(e),
        "invalid Vulkan dispatch: the status buffer holds 16 32-bit words; the operation needs 17"
    );
    let e = data::transpose16(k, &mut rec, &s, &s, 1, 3, 4).unwrap_err();
    assert_eq!(msg(e), "invalid Vulkan dispatch: transpose16 takes even rows and columns, not 3 x 4");
    let e = data::transpose16(k, &mut rec, &s, &s, 2, 4, 6).unwrap_err();
    assert_eq!(
        msg(e),
        "invalid Vulkan dispatch: the destination holds 16 32-bit words; the operation needs 24"
    );
    let e = data::cast(k, &mut rec, &s, DType::F32, &s, DType::F16, 33).unwrap_err();
    assert!(msg(e).contains("needs 33"));
    let e = data::fill(k, &mut rec, &s, 1 << 33, 0).unwrap_err();
    assert_eq!(
        msg(e),
        "invalid Vulkan dispatch: the word count = 8589934592 does not fit the kernels' 32-bit indices"
    );
    // Empty outputs: nothing recorded.
    data::unary(k, &mut rec, Unary::Exp, Tier::Strict, &s, &s, 0).unwrap();
    data::unary_i32(k, &mut rec, true, &s, &s, 0).unwrap();
    data::binary(k, &mut rec, Binary::Add, &s, &s, &[0, 3], &s, &[3], &[0, 3]).unwrap();
    data::binary_i32(k, &mut rec, Binary::Mul, &s, &s, &[1], &s, &[0], &[0]).unwrap();
    data::binary_scalar(k, &mut rec, Binary::Add, &s, &s, 1.0, 0).unwrap();
    data::fill(k, &mut rec, &s, 0, 1).unwrap();
    data::rand(k, &mut rec, &s, 0, 1, Dist::Normal).unwrap();
    data::cast(k, &mut rec, &s, DType::F16, &s, DType::I32, 0).unwrap();
    data::unpack16(k, &mut rec, &s, &s, 0).unwrap();
    data::pack16(k, &mut rec, &s, &s, 0).unwrap();
    data::transpose16(k, &mut rec, &s, &s, 0, 64, 64).unwrap();
    data::strided_copy(k, &mut rec, &s, 0, &[1, 1], &s, 0, &[1, 1], &[3, 0]).unwrap();
    data::gather(k, &mut rec, &s, &s, 4, 4, &s, 0, &s, 0).unwrap();
    assert!(!rec.has_work(), "an empty operation recorded work");
}

/// The fast tier's UNARY ops on the device's own math (shaders/unary_fast.comp): within the
/// error Vulkan allows those built-ins (exp: 3 + 2|x| ulp; the others a few ulp, loosely bound
/// here) of the float64 result, over vec4 bodies and tails, and the same bits on a second run.
#[test]
fn fast_unary_uses_device_math_within_its_error() {
    let Some(ex) = exec() else { return };
    let n = 4099;
    let spread = |lo: f64, hi: f64| -> Vec<f32> {
        (0..n).map(|i| (lo + (hi - lo) * ((i as f64 * 0.618_034) % 1.0)) as f32).collect()
    };
    type Exact = fn(f64) -> f64;
    let cases: [(Unary, Vec<f32>, Exact); 6] = [
        (Unary::Exp, spread(-80.0, 80.0), f64::exp),
        (Unary::Log, spread(1e-30, 1e30), f64::ln),
        (Unary::Sqrt, spread(0.0, 1e20), f64::sqrt),
        (Unary::Rsqrt, spread(1e-20, 1e20), |x| 1.0 / x.sqrt()),
        (Unary::Sigmoid, spread(-30.0, 30.0), |x| 1.0 / (1.0 + (-x).exp())),
        (Unary::Tanh, spread(-10.0, 10.0), f64::tanh),
    ];
    for (op, x, exact) in cases {
        let go = || {
            run(ex, &[&bits(&x)], n, |k, rec, out, ins| data::unary(k, rec, op, Tier::Fast, out, &ins[0], n))
        };
        let got = go();
        assert_eq!(got, go(), "{op:?}: not repeatable");
        for (i, (&v, &g)) in x.iter().zip(&got).enumerate() {
            let want = exact(f64::from(v));
            let g = f64::from(f32::from_bits(g));
            let ulp = (want.abs() as f32).max(f32::MIN_POSITIVE);
            let ulp = f64::from(f32::from_bits(ulp.to_bits() + 1) - ulp);
            let allowed = match op {
                Unary::Exp => 3.0 + 2.0 * f64::from(v).abs(),
                Unary::Sigmoid => 8.0 + 2.0 * f64::from(v).abs(),
                _ => 8.0,
            } * ulp
                + if matches!(op, Unary::Log | Unary::Tanh) { 1e-6 } else { 0.0 };
            assert!(
                (g - want).abs() <= allowed,
                "{op:?}({v}) at {i}: {g} where float64 gives {want} (allowed {allowed})"
            );
        }
    }
}

/// The first pass of the fast tier's f32 MATMUL on bf16 cooperative matrices
/// (`data::split_bf16`, `rows::matmul_split_bf16`), against what its pieces must be, computed
/// here in f64: hi is a bf16 nearest to x (the one toward zero where rounding would overflow),
/// mid a bf16 nearest to x - hi, and hi + mid + lo is exactly x; inf and NaN go whole into hi;
/// and segment s of each output row holds piece `(pieces >> 2s) & 3` of the row's elements, from
/// either stored layout, over batches, partial tiles and random piece orders.
#[test]
fn split_bf16_pieces_sum_to_the_element() {
    let Some(ex) = exec() else { return };
    let bf16 = |h: u32| f32::from_bits(h << 16);
    // Whether bf16 bits h are a nearest bf16 to v (f64 distances to h's neighbours).
    let nearest = |v: f64, h: u32| {
        let d = (v - f64::from(bf16(h))).abs();
        [h.wrapping_sub(1), h + 1]
            .iter()
            .filter(|&&n| bf16(n).is_finite() && (n ^ h) & 0x8000 == 0)
            .all(|&n| (v - f64::from(bf16(n))).abs() >= d)
    };
    let mut x: Vec<f32> = (0..8000u32)
        .map(|i| {
            let r = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
            // Normal floats from 2^-100 to 2^100, any significand and sign.
            f32::from_bits((r as u32 & 0x807f_ffff) | ((27 + (r >> 23) as u32 % 200) << 23))
        })
        .collect();
    // Specials: infinities, NaNs (one with a payload only in its low half), the largest
    // floats (whose nearest bf16 overflows), zeros, exact bf16 values, ties.
    let specials = [
        0x7f80_0000u32,
        0xff80_0000,
        0x7fc0_0000,
        0x7f80_0001,
        0xffc0_1234,
        0x7f7f_ffff,
        0xff7f_ffff,
        0x0000_0000,
        0x8000_0000,
        0x3f80_0000,
        0x3f80_8000,
        0x3f81_8000,
        0xbf80_7fff,
        0x7f7f_8000,
    ];
    for (i, s) in specials.iter().enumerate() {
        x[i * 37] = f32::from_bits(*s);
    }
    for (batch, rows, kdim, transposed, pieces) in [
        (1usize, 64usize, 64usize, false, 0b00_01_00_10_01_00u32),
        (2, 37, 90, false, 0b00_00_01_00_01_10),
        (3, 50, 38, true, 0b00_01_00_10_01_00),
        (1, 130, 46, true, 0b10_10_01_01_00_00),
    ] {
        let n = batch * rows * kdim;
        let mut rec = Recorder::new(ex.device()).unwrap();
        let src = ex.upload(&mut rec, bytemuck::cast_slice(&x[..n])).unwrap();
        let (out, flags) = (ex.alloc(n as u64 * 12).unwrap(), ex.alloc((batch * rows) as u64 * 4).unwrap());
        data::fill(ex.kernels(), &mut rec, &flags, batch * rows, 0).unwrap();
        data::split_bf16(ex.kernels(), &mut rec, &out, &flags, &src, batch, rows, kdim, transposed, pieces)
            .unwrap();
        let got: Vec<u32> = bytemuck::pod_collect_to_vec(&ex.fetch(&mut rec, &out).unwrap());
        let flagged: Vec<u32> = bytemuck::pod_collect_to_vec(&ex.fetch(&mut rec, &flags).unwrap());
        let half = |j: usize| (got[j / 2] >> (16 * (j % 2))) & 0xffff;
        let what = format!("batch {batch}, {rows} x {kdim}, transposed {transposed}, pieces {pieces:#b}");
        for bz in 0..batch {
            for r in 0..rows {
                // A row holding an inf, a NaN or a normal float below 2^-103 is flagged.
                let at = |kk: usize| if transposed { kk * rows + r } else { r * kdim + kk };
                let inexact = (0..kdim).any(|kk| {
                    let v = x[bz * rows * kdim + at(kk)];
                    !v.is_finite() || (v.is_normal() && v.abs() < 2f32.powi(-103))
                });
                assert_eq!(flagged[bz * rows + r], u32::from(inexact), "{what}: row ({bz}, {r})'s flag");
                for kk in 0..kdim {
                    let v = x[bz * rows * kdim + at(kk)];
                    let out = |s: usize| half((bz * rows + r) * 6 * kdim + s * kdim + kk);
                    let mut piece = [None::<u32>; 3];
                    for s in 0..6 {
                        let p = ((pieces >> (2 * s)) & 3) as usize;
                        let h = out(s);
                        assert!(
                            piece[p].is_none_or(|q| q == h),
                            "{what}: piece {p} of {v:e} differs between segments"
                        );
                        piece[p] = Some(h);
                    }
                    let [hi, mid, lo] =
                        piece.map(|p| p.unwrap_or_else(|| panic!("{what}: a piece never laid out")));
                    let ctx = format!(
                        "{what}: {v:e} ({:#010x}) at ({bz}, {r}, {kk}) -> {hi:#06x} {mid:#06x} {lo:#06x}",
                        v.to_bits()
                    );
                    if !v.is_finite() {
                        let h = bf16(hi);
                        assert!(mid == 0 && lo == 0, "{ctx}");
                        assert!(if v.is_nan() { h.is_nan() } else { h == v }, "{ctx}");
                        continue;
                    }
                    let v64 = f64::from(v);
                    let sum = f64::from(bf16(hi)) + f64::from(bf16(mid)) + f64::from(bf16(lo));
                    if v.abs() < 2f32.powi(-103) {
                        continue; // flagged (lavapipe keeps denormal pieces; NVIDIA flushes them)
                    }
                    assert_eq!(sum, v64, "{ctx}: the pieces do not sum to the element");
                    // From the midpoint between bf16's largest and 2^128 up, rounding would overflow.
                    if v.to_bits() & 0x7fff_ffff >= 0x7f7f_8000 {
                        assert_eq!(
                            hi,
                            v.to_bits() >> 16,
                            "{ctx}: hi should truncate where rounding overflows"
                        );
                    } else {
                        assert!(nearest(v64, hi), "{ctx}: hi is not a nearest bf16");
                    }
                    assert!(nearest(v64 - f64::from(bf16(hi)), mid), "{ctx}: mid is not a nearest bf16");
                }
            }
        }
    }
}

/// A 16-bit tensor's elements packed two per word (element 2k in the low half), padded to a
/// whole word.
fn pack_u16(h: &[u16]) -> Vec<u32> {
    h.chunks(2).map(|c| u32::from(c[0]) | u32::from(c.get(1).copied().unwrap_or(0)) << 16).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn argmax_matches_reference_on_special_values(
        rows in 1usize..6,
        n in 0usize..700,
        seed in any::<u64>(),
        ties in any::<bool>(),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let mut x = values_f32(seed, (rows * n).max(1));
        x.truncate(rows * n);
        if ties {
            // Few distinct values, so most rows hold their maximum more than once.
            for v in &mut x {
                *v = [-0.0, 0.0, 1.0, f32::from_bits(3), f32::from_bits(0x8000_0005)][v.to_bits() as usize % 5];
            }
        }
        let mut want = vec![0i32; rows];
        r::argmax(&x, n, &mut want);
        let input = if x.is_empty() { vec![0u32] } else { bits(&x) };
        let got = run(ex, &[&input], rows, |k, rec, o, ins| data::argmax(k, rec, o, &ins[0], rows, n));
        same(&format!("ARGMAX {rows} rows of {n}"), &ibits(&want), &got);
    }

    #[test]
    fn scatter_matches_reference_and_writes_nothing_past_a_bad_index(
        rows in 0usize..12,
        row in 1usize..9,
        idx in prop::collection::vec(-2i32..13, 1..300),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let count = idx.len();
        let src: Vec<u32> = (0..(count * row) as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        let old: Vec<u32> = (0..(rows * row).max(1) as u32).map(|i| i ^ 0x5a5a_0000).collect();
        let mut rec = Recorder::new(ex.device()).unwrap();
        let s = ex.upload(&mut rec, bytemuck::cast_slice(&src)).unwrap();
        let ix = ex.upload(&mut rec, bytemuck::cast_slice(&idx)).unwrap();
        let status = ex.upload(&mut rec, bytemuck::cast_slice(&[u32::MAX; 4])).unwrap();
        let out = ex.upload(&mut rec, bytemuck::cast_slice(&old)).unwrap();
        data::scatter(ex.kernels(), &mut rec, &out, rows, row, &s, &ix, count, &status, 1, 3).unwrap();
        let got: Vec<u32> = bytemuck::pod_collect_to_vec(&ex.fetch(&mut rec, &out).unwrap());
        let st: Vec<u32> = bytemuck::pod_collect_to_vec(&ex.fetch(&mut rec, &status).unwrap());
        let mut want = old.clone();
        let first_bad = r::scatter(&src, row, &idx, rows, &mut want[..rows * row]).err();
        // The first bad position in slot 1, its value in slot 3.
        let expect = match first_bad {
            Some((pos, v)) => vec![u32::MAX, pos as u32, u32::MAX, v as u32],
            None => vec![u32::MAX; 4],
        };
        prop_assert_eq!(st, expect);
        // With a bad index the reference writes nothing, and neither does the kernel.
        same(&format!("SCATTER {count} rows of {row} into {rows}"), &want, &got);
    }

    #[test]
    fn window16_puts_and_slices_packed_halves_as_the_reference(
        shape in prop::collection::vec(1usize..7, 1..4),
        axis_pick in any::<usize>(),
        start_pick in any::<usize>(),
        len_pick in any::<usize>(),
    ) {
        let Some(ex) = exec() else { return Ok(()) };
        let ax = axis_pick % shape.len();
        let len = 1 + len_pick % shape[ax];
        let start = start_pick % (shape[ax] - len + 1);
        let mut part_shape = shape.clone();
        part_shape[ax] = len;
        let (whole_n, part_n) = (shape.iter().product::<usize>(), part_shape.iter().product::<usize>());
        let whole: Vec<u16> = (0..whole_n as u16).map(|i| i.wrapping_mul(40_503) | 1).collect();
        let part: Vec<u16> = (0..part_n as u16).map(|i| i.wrapping_mul(7_919) ^ 0x8000).collect();
        let inner: usize = shape[ax + 1..].iter().product();
        let outer: usize = shape[..ax].iter().product();
        // PUT: the untouched halves (neighbours sharing a word, and the padding half) kept.
        let mut want = whole.clone();
        r::put(&part, &shape, ax, start, len, &mut want);
        let put = data::Runs { outer, len: len * inner, db: shape[ax] * inner, dofs: start * inner, sb: len * inner, sofs: 0 };
        let mut old = pack_u16(&whole);
        let pad = old.len() * 2 > whole_n;
        if pad {
            let last = old.len() - 1;
            old[last] |= 0xbeef << 16;
        }
        let src = pack_u16(&part);
        let got = run(ex, &[&old, &src], old.len(), |k, rec, o, ins| {
            data::copy(k, rec, o, &ins[0])?;
            data::window16(k, rec, o, &ins[1], put)
        });
        let mut want_words = pack_u16(&want);
        if pad {
            let last = want_words.len() - 1;
            want_words[last] |= 0xbeef << 16;
        }
        same(&format!("PUT {part_shape:?} into {shape:?} axis {ax} at {start}"), &want_words, &got);
        // SLICE: the same window read back out.
        let mut sliced = vec![0u16; part_n];
        r::slice(&want, &shape, ax, start, len, &mut sliced);
        let slice = data::Runs { outer, len: len * inner, db: len * inner, dofs: 0, sb: shape[ax] * inner, sofs: start * inner };
        let src = pack_u16(&want);
        let got = run(ex, &[&src], part_n.div_ceil(2), |k, rec, o, ins| {
            data::fill(k, rec, o, part_n.div_ceil(2), 0)?;
            data::window16(k, rec, o, &ins[0], slice)
        });
        same(&format!("SLICE {part_shape:?} of {shape:?} axis {ax} at {start}"), &pack_u16(&sliced), &got);
    }
}

#[test]
fn set_word_writes_one_word_and_window16_refuses_overlapping_runs() {
    let Some(ex) = exec() else { return };
    let old: Vec<u32> = (0..300).collect();
    let got = run(ex, &[&old], 300, |k, rec, o, ins| {
        data::copy(k, rec, o, &ins[0])?;
        data::set_word(k, rec, o, 257, 0xdead_beef)
    });
    let mut want = old.clone();
    want[257] = 0xdead_beef;
    same("TSET's word", &want, &got);
    let mut rec = Recorder::new(ex.device()).unwrap();
    let s = ex.alloc(64).unwrap();
    let runs = data::Runs { outer: 2, len: 5, db: 4, dofs: 0, sb: 5, sofs: 0 };
    let e = data::window16(ex.kernels(), &mut rec, &s, &s, runs).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid Vulkan dispatch: runs of 5 elements every 4 (dst) and 5 (src) overlap"
    );
    let e = data::set_word(ex.kernels(), &mut rec, &s, 16, 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid Vulkan dispatch: the destination holds 16 32-bit words; the operation needs 17"
    );
}
