//! The SIMD kernels (`exec::cpu::simd`) against the scalar reference, bit for bit.
//!
//! Everything runs inside an `FtzGuard` (the mode strict kernels run in). For every op and every
//! vector level this CPU has (AVX2, AVX-512): strict == reference (`to_bits`), and 1, 2 and 3
//! worker threads give the same bits (strict and fast). Every unary function is also checked over
//! a dense sample of all 2^32 bit patterns. A level the CPU lacks is skipped and reported on
//! stderr (once per test).

#[path = "common/skip.rs"]
mod skip;

use std::sync::OnceLock;

use adeadvm::exec::cpu::fpenv::FtzGuard;
use adeadvm::exec::cpu::reference::{self as r, Binary, Compare, Reduce, Unary};
use adeadvm::exec::cpu::{simd, worker_pool, Ctx, SimdLevel};
use adeadvm::isa::Tier;
use proptest::prelude::*;

const UNARY: [Unary; 11] = [
    Unary::Neg,
    Unary::Abs,
    Unary::Sqrt,
    Unary::Rsqrt,
    Unary::Exp,
    Unary::Log,
    Unary::Relu,
    Unary::Sigmoid,
    Unary::Tanh,
    Unary::Gelu,
    Unary::Erf,
];
const BINARY: [Binary; 6] = [Binary::Add, Binary::Sub, Binary::Mul, Binary::Div, Binary::Max, Binary::Min];

/// The vector levels this CPU has (each test runs on all of them); those it lacks are reported
/// on stderr, once per test binary.
fn levels() -> Vec<SimdLevel> {
    static REPORTED: std::sync::Once = std::sync::Once::new();
    let best = SimdLevel::detect();
    let all = [SimdLevel::Avx2, SimdLevel::Avx512];
    REPORTED.call_once(|| {
        for l in all.iter().filter(|&&l| l > best) {
            skip::skipped(
                &format!("the {} kernels against the scalar reference", l.name()),
                &format!("this CPU has no {}", l.name()),
            );
        }
    });
    all.into_iter().filter(|&l| l <= best).collect()
}

fn pools() -> &'static [rayon::ThreadPool; 3] {
    static P: OnceLock<[rayon::ThreadPool; 3]> = OnceLock::new();
    P.get_or_init(|| [worker_pool(1).unwrap(), worker_pool(2).unwrap(), worker_pool(3).unwrap()])
}

fn ctx(level: SimdLevel, tier: Tier, threads: usize) -> Ctx<'static> {
    Ctx { level, tier, pool: Some(&pools()[threads - 1]) }
}

fn strict1(level: SimdLevel) -> Ctx<'static> {
    Ctx { level, tier: Tier::Strict, pool: None }
}

#[track_caller]
fn same_bits(what: &str, want: &[f32], got: &[f32], inputs: &[&[f32]]) {
    assert_eq!(want.len(), got.len(), "{what}: lengths");
    if let Some(i) = (0..want.len()).find(|&i| want[i].to_bits() != got[i].to_bits()) {
        let ins: Vec<String> = inputs
            .iter()
            .map(|x| x.get(i).map_or("-".into(), |v| format!("{:#010x}", v.to_bits())))
            .collect();
        panic!(
            "{what}: element {i} of {}: want {:#010x} ({:e}), got {:#010x} ({:e}); inputs at {i}: {ins:?}",
            want.len(),
            want[i].to_bits(),
            want[i],
            got[i].to_bits(),
            got[i]
        );
    }
}

/// Runs `f` with the given context for 1, 2, 3 threads (strict and fast) and checks that the
/// thread count never changes the bits; returns nothing (strict vs reference is checked by the
/// caller).
fn threads_agree(level: SimdLevel, what: &str, n: usize, f: impl Fn(&Ctx, &mut [f32])) {
    for tier in [Tier::Strict, Tier::Fast] {
        let mut first = vec![0.0f32; n];
        f(&ctx(level, tier, 1), &mut first);
        for t in [2, 3] {
            let mut o = vec![0.0f32; n];
            f(&ctx(level, tier, t), &mut o);
            same_bits(&format!("{what} {level:?} {tier:?} {t} threads vs 1"), &first, &o, &[]);
        }
    }
}

// ---- values ----------------------------------------------------------------------------------

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// A value from a mixture: mostly normal ranges, some specials of every kind.
    fn value(&mut self, mix: u32) -> f32 {
        let sign = if self.next() & 1 == 0 { 0 } else { 0x8000_0000u32 };
        let c = self.below(100) as u32;
        if c >= mix {
            return (self.unit() * 2.0 - 1.0) * 8.0;
        }
        let b: u32 = match c % 10 {
            0 => 0,                                                // ±0
            1 => 0x7f80_0000,                                      // ±inf
            2 => 0x7f80_0001 + (self.next() as u32 % 0x7f_ffff),   // NaN, any payload
            3 => 1 + (self.next() as u32 % 0x7f_ffff),             // denormal
            4 => 0x7f00_0000 + (self.next() as u32 % 0x7f_ffff),   // huge
            5 => 0x0080_0000 + (self.next() as u32 % 0x0100_0000), // tiny normal
            6 => (self.next() as u32) & 0x7fff_ffff,               // any pattern
            7 => 0x4200_0000 + (self.next() as u32 % 0x0180_0000), // 32..~200 (exp edges)
            8 => 0x3f00_0000 + (self.next() as u32 % 0x0100_0000), // 0.5..2
            _ => (self.unit() * 200.0).to_bits(),                  // 0..200
        };
        f32::from_bits(b | sign)
    }
    fn values(&mut self, n: usize, mix: u32) -> Vec<f32> {
        (0..n).map(|_| self.value(mix)).collect()
    }
}

// ---- dense unary sweep -----------------------------------------------------------------------

#[test]
fn unary_dense_all_bit_patterns() {
    let _g = FtzGuard::new();
    // Stride 997 over all 2^32 patterns (about 4.3 million inputs), plus the last pattern.
    let mut xs: Vec<f32> = (0..=u32::MAX / 997).map(|i| f32::from_bits(i * 997)).collect();
    xs.push(f32::from_bits(u32::MAX));
    // RSQRT's corrected significands (numerics::RSQRT_UP) at several exponents, both binades.
    for b in adeadvm::numerics::RSQRT_UP {
        for e in [-0x3f00_0000i64, -0x0080_0000, 0, 0x0080_0000, 0x3e00_0000] {
            xs.push(f32::from_bits((b as i64 + e) as u32));
        }
    }
    let (mut want, mut got) = (vec![0.0; xs.len()], vec![0.0; xs.len()]);
    for op in UNARY {
        r::unary(op, &xs, &mut want);
        for level in levels() {
            simd::unary(&strict1(level), op, &xs, &mut got);
            same_bits(&format!("{op:?} {level:?} dense"), &want, &got, &[&xs]);
        }
    }
}

#[test]
fn binary_edge_pairs() {
    let _g = FtzGuard::new();
    let mut edges: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        2.0,
        3.0,
        1.5,
        f32::MAX,
        -f32::MAX,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::EPSILON,
        1.0 + f32::EPSILON,
        1.0 - f32::EPSILON / 2.0,
    ];
    for b in [1u32, 0x007f_ffff, 0x8000_0001, 0x7fc0_0000, 0xffc0_0000, 0x7f80_0001, 0xffbf_ffff, 0x7fc1_2345]
    {
        edges.push(f32::from_bits(b));
    }
    let mut rng = Rng(7);
    edges.extend(rng.values(200, 60));
    let (a, b): (Vec<f32>, Vec<f32>) = edges.iter().flat_map(|&x| edges.iter().map(move |&y| (x, y))).unzip();
    let n = a.len();
    for op in BINARY {
        let (mut want, mut got) = (vec![0.0; n], vec![0.0; n]);
        r::binary(op, &a, &[n], &b, &[n], &mut want, &[n]);
        for level in levels() {
            simd::binary(&strict1(level), op, &a, &[n], &b, &[n], &mut got, &[n]);
            same_bits(&format!("{op:?} {level:?} pairs"), &want, &got, &[&a, &b]);
        }
    }
}

#[test]
fn div_random_pairs() {
    let _g = FtzGuard::new();
    let mut rng = Rng(99);
    let n = 1 << 20;
    let a: Vec<f32> = (0..n).map(|_| f32::from_bits(rng.next() as u32)).collect();
    let b: Vec<f32> = (0..n).map(|_| f32::from_bits(rng.next() as u32)).collect();
    let (mut want, mut got) = (vec![0.0; n], vec![0.0; n]);
    r::binary(Binary::Div, &a, &[n], &b, &[n], &mut want, &[n]);
    for level in levels() {
        simd::binary(&strict1(level), Binary::Div, &a, &[n], &b, &[n], &mut got, &[n]);
        same_bits(&format!("div {level:?} random bits"), &want, &got, &[&a, &b]);
    }
}

// ---- threading on sizes large enough to split ------------------------------------------------

#[test]
fn large_kernels_split_over_threads() {
    for level in levels() {
        large_kernels_at(level);
    }
}

fn large_kernels_at(level: SimdLevel) {
    let _g = FtzGuard::new();
    let mut rng = Rng(3);
    let n = 300_001;
    let a = rng.values(n, 10);
    let b = rng.values(n, 10);
    let mut want = vec![0.0; n];
    for op in [Unary::Exp, Unary::Gelu, Unary::Relu] {
        r::unary(op, &a, &mut want);
        threads_agree(level, &format!("{op:?}"), n, |c, o| {
            simd::unary(c, op, &a, o);
            if c.tier == Tier::Strict {
                same_bits(&format!("{op:?} vs reference"), &want, o, &[&a]);
            }
        });
    }
    for op in [Binary::Add, Binary::Div] {
        r::binary(op, &a, &[n], &b, &[n], &mut want, &[n]);
        threads_agree(level, &format!("{op:?}"), n, |c, o| {
            simd::binary(c, op, &a, &[n], &b, &[n], o, &[n]);
            if c.tier == Tier::Strict {
                same_bits(&format!("{op:?} vs reference"), &want, o, &[&a, &b]);
            }
        });
    }
    let (rows, cols) = (300, 1000);
    let x = &a[..rows * cols];
    let g = &b[..cols];
    let mut want = vec![0.0; rows * cols];
    r::softmax(x, &[rows, cols], Some((g, &[cols])), 0.5, &mut want);
    threads_agree(level, "softmax", rows * cols, |c, o| {
        simd::softmax(c, x, &[rows, cols], Some((g, &[cols])), 0.5, o);
        if c.tier == Tier::Strict {
            same_bits("softmax vs reference", &want, o, &[x]);
        }
    });
    r::layernorm(x, cols, Some(g), Some(g), 1e-5, &mut want);
    threads_agree(level, "layernorm", rows * cols, |c, o| {
        simd::layernorm(c, x, cols, Some(g), Some(g), 1e-5, o);
        if c.tier == Tier::Strict {
            same_bits("layernorm vs reference", &want, o, &[x]);
        }
    });
    for (axis, len) in [(0, rows), (1, cols)] {
        let on = rows * cols / len;
        let mut want = vec![0.0; on];
        r::reduce(Reduce::Sum, x, &[rows, cols], axis, &mut want);
        threads_agree(level, "reduce", on, |c, o| {
            simd::reduce(c, Reduce::Sum, x, &[rows, cols], axis, o);
            same_bits("reduce vs reference", &want, o, &[]);
        });
    }
}

/// Outputs of 4Mi elements and more are written with non-temporal stores after a head that
/// reaches a 64-byte boundary: an output that starts off that boundary, with a ragged end,
/// still gives the reference's bits (and the same for every thread count).
#[test]
fn streamed_outputs_give_the_same_bits() {
    let _g = FtzGuard::new();
    let mut rng = Rng(11);
    let n = (1 << 22) + 13;
    let a = rng.values(n, 5);
    let b = rng.values(n, 5);
    let mut want = vec![0.0; n];
    for level in levels() {
        for op in [Binary::Add, Binary::Div] {
            r::binary(op, &a, &[n], &b, &[n], &mut want, &[n]);
            threads_agree(level, &format!("{op:?} streamed"), n, |c, o| {
                // Shifted by 3 elements: the output starts 12 bytes past an aligned boundary.
                let mut buf = vec![0.0f32; n + 3];
                simd::binary(c, op, &a, &[n], &b, &[n], &mut buf[3..], &[n]);
                o.copy_from_slice(&buf[3..]);
                if c.tier == Tier::Strict {
                    same_bits(&format!("{op:?} {level:?} streamed vs reference"), &want, o, &[&a, &b]);
                }
            });
        }
        r::binary_scalar(Binary::Mul, &a, 0.75, &mut want);
        let mut got = vec![0.0; n];
        simd::binary_scalar(&strict1(level), Binary::Mul, &a, 0.75, &mut got);
        same_bits(&format!("mul scalar {level:?} streamed"), &want, &got, &[&a]);
    }
}

// ---- comparisons and SELECT --------------------------------------------------------------------

const COMPARE: [Compare; 3] = [Compare::Eq, Compare::Lt, Compare::Le];

/// i32 outputs as f32 bit patterns, for `check` and `threads_agree`.
fn as_f32(v: &[i32], o: &mut [f32]) {
    for (o, &v) in o.iter_mut().zip(v) {
        *o = f32::from_bits(v as u32);
    }
}

/// `b`'s values mixed with `a`'s own (so that EQ and LE meet equal operands, -0 against +0 and
/// denormals against zeros among them).
fn mixed_with(rng: &mut Rng, a: &[f32], b: &mut [f32]) {
    for v in b.iter_mut() {
        match rng.below(4) {
            0 if !a.is_empty() => *v = a[rng.below(a.len() as u64) as usize],
            1 => *v = [0.0f32, -0.0, f32::from_bits(1), f32::from_bits(0x8000_0005)][rng.below(4) as usize],
            _ => {}
        }
    }
}

/// The comparisons on f32 and i32 and SELECT on 32- and 16-bit words: the executor's collapsed
/// broadcast runs against the reference's walk, on special values, at every level and for 1 to
/// 3 threads; and the float comparison is the IEEE comparison of the flushed values.
fn check_compare_and_select(seed: u64, mix: u32, swap: bool) {
    let mut rng = Rng(seed);
    let (out, bs) = broadcast_shapes(&mut rng);
    let (as_, bs) = if swap { (bs, out.clone()) } else { (out.clone(), bs) };
    let n: usize = out.iter().product();
    let a = rng.values(as_.iter().product(), mix);
    let mut b = rng.values(bs.iter().product(), mix);
    mixed_with(&mut rng, &a, &mut b);
    let ai: Vec<i32> = a.iter().map(|v| (v.to_bits() as i32) >> (rng.below(2) * 28)).collect();
    let bi: Vec<i32> = b.iter().map(|v| (v.to_bits() as i32) >> 28).collect();
    for op in COMPARE {
        let mut want = vec![0i32; n];
        r::compare(op, &a, &as_, &b, &bs, &mut want, &out);
        // The reference against IEEE comparisons of the flushed values, element by element.
        r::for_each_broadcast(&out, [&as_[..], &bs[..]], |o, [i, j]| {
            let ftz = |v: f32| if v.is_finite() && v.abs() < f32::MIN_POSITIVE { 0.0 } else { v };
            let (x, y) = (ftz(a[i]), ftz(b[j]));
            let model = match op {
                Compare::Eq => x == y,
                Compare::Lt => x < y,
                Compare::Le => x <= y,
            };
            assert_eq!(want[o], i32::from(model), "{op:?} {:#010x} {:#010x}", a[i].to_bits(), b[j].to_bits());
        });
        check(
            &format!("{op:?} {as_:?} {bs:?} -> {out:?}"),
            n,
            |o| as_f32(&want, o),
            |c, o| {
                let mut v = vec![0i32; n];
                simd::compare(c, op, &a, &as_, &b, &bs, &mut v, &out);
                as_f32(&v, o)
            },
        );
        let mut want = vec![0i32; n];
        r::compare_i32(op, &ai, &as_, &bi, &bs, &mut want, &out);
        check(
            &format!("{op:?} i32 {as_:?} {bs:?} -> {out:?}"),
            n,
            |o| as_f32(&want, o),
            |c, o| {
                let mut v = vec![0i32; n];
                simd::compare_i32(c, op, &ai, &as_, &bi, &bs, &mut v, &out);
                as_f32(&v, o)
            },
        );
    }
    // SELECT, its condition broadcast its own way: values 0, 1 and others.
    let (_, cs) = broadcast_shapes_to(&mut rng, &out);
    let cond: Vec<i32> = (0..cs.iter().product::<usize>())
        .map(|_| [0, 1, -1, i32::MIN, 7][rng.below(5) as usize] * i32::from(rng.below(3) != 0))
        .collect();
    let (aw, bw): (Vec<u32>, Vec<u32>) =
        (a.iter().map(|v| v.to_bits()).collect(), b.iter().map(|v| v.to_bits()).collect());
    let mut want = vec![0u32; n];
    r::select(&cond, &cs, &aw, &as_, &bw, &bs, &mut want, &out);
    r::for_each_broadcast(&out, [&cs[..], &as_[..], &bs[..]], |o, [k, i, j]| {
        assert_eq!(want[o], if cond[k] != 0 { aw[i] } else { bw[j] });
    });
    check(
        &format!("SELECT {cs:?} {as_:?} {bs:?} -> {out:?}"),
        n,
        |o| o.iter_mut().zip(&want).for_each(|(o, &w)| *o = f32::from_bits(w)),
        |c, o| {
            let mut v = vec![0u32; n];
            simd::select(c, &cond, &cs, &aw, &as_, &bw, &bs, &mut v, &out);
            o.iter_mut().zip(&v).for_each(|(o, &w)| *o = f32::from_bits(w));
        },
    );
    let (ah, bh): (Vec<u16>, Vec<u16>) =
        (aw.iter().map(|&w| (w >> 9) as u16).collect(), bw.iter().map(|&w| w as u16).collect());
    let mut want = vec![0u16; n];
    r::select(&cond, &cs, &ah, &as_, &bh, &bs, &mut want, &out);
    for level in levels() {
        for threads in [1, 3] {
            let mut got = vec![0u16; n];
            simd::select(&ctx(level, Tier::Strict, threads), &cond, &cs, &ah, &as_, &bh, &bs, &mut got, &out);
            assert_eq!(want, got, "SELECT 16-bit {cs:?} {as_:?} {bs:?} -> {out:?} {level:?} x{threads}");
        }
    }
}

/// An operand shape that broadcasts to `out` (as `broadcast_shapes` draws them).
fn broadcast_shapes_to(rng: &mut Rng, out: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let rank = out.len();
    let b = match rng.below(5) {
        0 => out.to_vec(),
        1 => vec![1],
        2 => out[rng.below(rank as u64 + 1) as usize..].to_vec(),
        3 => vec![],
        _ => out.iter().map(|&d| if rng.below(2) == 0 { 1 } else { d }).collect(),
    };
    (out.to_vec(), b)
}

/// Outputs past the size from which the work is split over the pool (2^15), with a row, a
/// column and a whole-tensor operand: every thread count gives the reference's bits.
#[test]
fn compare_and_select_large_outputs_split_over_threads() {
    let (r_, c_) = (131, 517);
    let n = r_ * c_;
    let mut rng = Rng(5);
    let a = rng.values(n, 40);
    let mut row = rng.values(c_, 40);
    mixed_with(&mut rng, &a[..c_], &mut row);
    let col: Vec<i32> = (0..r_).map(|i| (i % 3) as i32 - 1).collect();
    let cond: Vec<i32> = (0..n).map(|i| (i % 7 == 0) as i32).collect();
    let aw: Vec<u32> = a.iter().map(|v| v.to_bits()).collect();
    let rw: Vec<u32> = row.iter().map(|v| v.to_bits()).collect();
    for (what, cs, cv) in [("col", vec![r_, 1], &col), ("full", vec![r_, c_], &cond)] {
        let mut want = vec![0u32; n];
        r::select(cv, &cs, &aw, &[r_, c_], &rw, &[c_], &mut want, &[r_, c_]);
        for level in levels().into_iter().chain([SimdLevel::Scalar]) {
            for t in [1, 2, 3] {
                let mut got = vec![0u32; n];
                simd::select(
                    &ctx(level, Tier::Strict, t),
                    cv,
                    &cs,
                    &aw,
                    &[r_, c_],
                    &rw,
                    &[c_],
                    &mut got,
                    &[r_, c_],
                );
                assert!(want == got, "SELECT {what} {level:?} x{t}");
            }
        }
    }
    for op in COMPARE {
        let mut want = vec![0i32; n];
        r::compare(op, &a, &[r_, c_], &row, &[c_], &mut want, &[r_, c_]);
        for level in levels() {
            for t in [1, 2, 3] {
                let mut got = vec![0i32; n];
                simd::compare(
                    &ctx(level, Tier::Strict, t),
                    op,
                    &a,
                    &[r_, c_],
                    &row,
                    &[c_],
                    &mut got,
                    &[r_, c_],
                );
                assert!(want == got, "{op:?} {level:?} x{t}");
            }
        }
    }
}

// ---- properties ------------------------------------------------------------------------------

/// Checks `simd(strict) == reference`, and threads 1/2/3 agree (strict and fast).
/// At every level this CPU has.
fn check(what: &str, n: usize, reference: impl Fn(&mut [f32]), simd_fn: impl Fn(&Ctx, &mut [f32])) {
    let _g = FtzGuard::new();
    let mut want = vec![0.0; n];
    reference(&mut want);
    for level in levels() {
        let mut got = vec![0.0; n];
        simd_fn(&strict1(level), &mut got);
        same_bits(&format!("{what} {level:?}"), &want, &got, &[]);
        threads_agree(level, what, n, |c, o| simd_fn(c, o));
    }
}

/// A random output shape (rank 1..=4) and an operand shape broadcast to it.
fn broadcast_shapes(rng: &mut Rng) -> (Vec<usize>, Vec<usize>) {
    let rank = 1 + rng.below(4) as usize;
    let out: Vec<usize> =
        (0..rank).map(|_| 1 + rng.below(if rank == 1 { 300 } else { 13 }) as usize).collect();
    let b = match rng.below(6) {
        0 => out.clone(),
        1 => vec![1],
        2 => out[rng.below(rank as u64) as usize..].to_vec(), // row over leading axes
        3 => {
            // column: trailing axes 1
            let k = rng.below(rank as u64 + 1) as usize;
            out.iter().enumerate().map(|(i, &d)| if i >= k { 1 } else { d }).collect()
        }
        4 => vec![],
        _ => out.iter().map(|&d| if rng.below(2) == 0 { 1 } else { d }).collect(), // anything
    };
    (out, b)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn unary_matches(seed: u64, len in 0usize..2000, mix in 0u32..100, op in 0usize..UNARY.len()) {
        let mut rng = Rng(seed);
        let a = rng.values(len, mix);
        let op = UNARY[op];
        check(&format!("{op:?} len {len}"), len, |o| r::unary(op, &a, o), |c, o| simd::unary(c, op, &a, o));
    }

    #[test]
    fn binary_matches(seed: u64, mix in 0u32..100, op in 0usize..6, swap: bool, scalar: bool) {
        let mut rng = Rng(seed);
        let op = BINARY[op];
        let (out, bs) = broadcast_shapes(&mut rng);
        let (as_, bs) = if swap { (bs, out.clone()) } else { (out.clone(), bs) };
        let n: usize = out.iter().product();
        let a = rng.values(as_.iter().product(), mix);
        let b = rng.values(bs.iter().product(), mix);
        check(
            &format!("{op:?} {as_:?} {bs:?} -> {out:?}"),
            n,
            |o| r::binary(op, &a, &as_, &b, &bs, o, &out),
            |c, o| simd::binary(c, op, &a, &as_, &b, &bs, o, &out),
        );
        if scalar {
            let s = b.first().copied().unwrap_or(0.0);
            let a = &a[..a.len().min(n)];
            check(
                &format!("{op:?} scalar {s:e}"),
                a.len(),
                |o| r::binary_scalar(op, a, s, o),
                |c, o| simd::binary_scalar(c, op, a, s, o),
            );
        }
    }

    #[test]
    fn compare_and_select_match(seed: u64, mix in 0u32..100, swap: bool) {
        check_compare_and_select(seed, mix, swap);
    }

    #[test]
    fn softmax_matches(seed: u64, rows in 1usize..6, n in 1usize..1000, mix in 0u32..30, mask in 0u8..4, scale in -2.0f32..2.0) {
        let mut rng = Rng(seed);
        let shape = vec![rows, n];
        let x = rng.values(rows * n, mix);
        let ms: Vec<usize> = match mask { 0 => vec![], 1 => vec![n], 2 => vec![rows, 1], _ => vec![rows, n] };
        let mv = rng.values(ms.iter().product(), mix);
        let m = if mask == 0 { None } else { Some((&mv[..], &ms[..])) };
        check(
            &format!("softmax {shape:?} mask {ms:?}"),
            rows * n,
            |o| r::softmax(&x, &shape, m, scale, o),
            |c, o| simd::softmax(c, &x, &shape, m, scale, o),
        );
    }

    #[test]
    fn norms_match(seed: u64, rows in 1usize..5, n in 1usize..1000, mix in 0u32..30, affine in 0u8..4, eps in 0.0f32..0.1) {
        let mut rng = Rng(seed);
        let x = rng.values(rows * n, mix);
        let g = rng.values(n, mix);
        let b = rng.values(n, mix);
        let gamma = (affine & 1 != 0).then_some(&g[..]);
        let beta = (affine & 2 != 0).then_some(&b[..]);
        check(
            &format!("layernorm {rows}x{n}"),
            rows * n,
            |o| r::layernorm(&x, n, gamma, beta, eps, o),
            |c, o| simd::layernorm(c, &x, n, gamma, beta, eps, o),
        );
        check(
            &format!("rmsnorm {rows}x{n}"),
            rows * n,
            |o| r::rmsnorm(&x, n, gamma, eps, o),
            |c, o| simd::rmsnorm(c, &x, n, gamma, eps, o),
        );
    }

    #[test]
    fn reduce_matches(seed: u64, mix in 0u32..40, op in 0usize..3, rank in 1usize..4) {
        let mut rng = Rng(seed);
        let shape: Vec<usize> = (0..rank).map(|_| rng.below(if rank == 1 { 1000 } else { 40 }) as usize).collect();
        let axis = rng.below(rank as u64) as usize;
        let x = rng.values(shape.iter().product(), mix);
        let on: usize = shape.iter().enumerate().filter(|&(i, _)| i != axis).map(|(_, &d)| d).product();
        let op = [Reduce::Sum, Reduce::Mean, Reduce::Max][op];
        check(
            &format!("{op:?} {shape:?} axis {axis}"),
            on,
            |o| r::reduce(op, &x, &shape, axis, o),
            |c, o| simd::reduce(c, op, &x, &shape, axis, o),
        );
    }
}

/// Copies and transposes past the size where they are split over the pool: 1, 2 and 3
/// threads give the reference's elements, for whole-block permutations (BERT's heads), ones
/// that move the last axis (blocks of one element) and 16-bit elements.
#[test]
fn large_copies_and_transposes_over_threads() {
    let cases: [(&[usize], &[u8]); 4] = [
        (&[8, 128, 12, 32], &[0, 2, 1, 3]),
        (&[3, 300, 401], &[0, 2, 1]),
        (&[64, 96, 48], &[2, 0, 1]),
        (&[5, 7, 9, 11, 13], &[4, 3, 2, 1, 0]),
    ];
    for (shape, perm) in cases {
        let n: usize = shape.iter().product();
        let x: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2654435761)).collect();
        let mut want = vec![0u32; n];
        r::transpose(&x, shape, perm, &mut want);
        let x16: Vec<u16> = x.iter().map(|&v| v as u16).collect();
        let mut want16 = vec![0u16; n];
        r::transpose(&x16, shape, perm, &mut want16);
        for threads in 1..=3 {
            let c = ctx(SimdLevel::detect(), Tier::Strict, threads);
            let mut got = vec![0u32; n];
            simd::transpose(&c, &x, shape, perm, &mut got);
            assert!(got == want, "transpose {shape:?} by {perm:?} on {threads} threads");
            let mut got16 = vec![0u16; n];
            simd::transpose(&c, &x16, shape, perm, &mut got16);
            assert!(got16 == want16, "16-bit transpose {shape:?} by {perm:?} on {threads} threads");
            let bytes: &[u8] = bytemuck::cast_slice(&x);
            let mut copied = vec![0u8; bytes.len() - 3];
            simd::copy_bytes(&c, &bytes[3..], &mut copied);
            assert!(copied == bytes[3..], "copy of {} bytes on {threads} threads", copied.len());
        }
    }
}
