//! Accuracy and determinism tests for `adeadvm::numerics` (the strict tier's scalar math).
//!
//! Default tests sample every unary function densely over all 2^32 bit patterns (stride 1031,
//! about four million inputs each) plus hand-picked edge cases, and assert the documented bound in
//! f32 ulps (metric: `numerics::accuracy`). The `#[ignore]`d `exhaustive_*` tests run every input
//! (`cargo test --release --test numerics -- --ignored --nocapture`) and print the table rows.

use adeadvm::numerics::{self as nm, accuracy::*};

type Unary = fn(f32) -> f32;

struct Case {
    name: &'static str,
    f: Unary,
    reference: fn(f64) -> f64,
    /// Documented bound in ulps (see docs/numerics.md).
    bound: f64,
    /// For gelu: inputs below this use the absolute metric (see `gelu_error`).
    abs_below: f64,
}

fn gelu_ref(x: f64) -> f64 {
    if x == f64::NEG_INFINITY {
        return -0.0;
    }
    if x < 0.0 {
        0.5 * x * erfc_f64(-x * std::f64::consts::FRAC_1_SQRT_2)
    } else {
        0.5 * x * (1.0 + erf_f64(x * std::f64::consts::FRAC_1_SQRT_2))
    }
}

fn sigmoid_ref(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// GELU below `abs_below`: `1 + erf(x/sqrt 2)` cancels, so the error is measured in ulps of
/// `0.5*|x|*2^-23`-scaled absolute terms: `|got - exact| / ulp(0.5*x)`, i.e. in units of the
/// rounding error of the factor `0.5*x` times one ulp of 1.
fn error(case: &Case, x: f32, got: f32) -> f64 {
    let xf = nm::ftz(x) as f64;
    let exact = (case.reference)(xf);
    if xf < case.abs_below && xf.is_finite() && got.is_finite() {
        (got as f64 - exact).abs() / ulp_f32(0.5 * xf)
    } else {
        ulp_error(got, exact)
    }
}

fn cases() -> Vec<Case> {
    let c = |name, f: Unary, reference: fn(f64) -> f64, bound| Case {
        name,
        f,
        reference,
        bound,
        abs_below: f64::NEG_INFINITY,
    };
    vec![
        c("recip", nm::recip, |x| 1.0 / x, 0.5),
        c("sqrt", nm::sqrt, f64::sqrt, 0.5),
        c("rsqrt", nm::rsqrt, |x| 1.0 / x.sqrt(), 0.5),
        c("exp", nm::exp, f64::exp, 2.0),
        c("log", nm::log, f64::ln, 2.0),
        c("tanh", nm::tanh, f64::tanh, 4.0),
        c("sigmoid", nm::sigmoid, sigmoid_ref, 4.0),
        c("erf", nm::erf, erf_f64, 2.0),
        Case { abs_below: -1.0, ..c("gelu", nm::gelu, gelu_ref, 4.0) },
    ]
}

fn edge_inputs() -> Vec<f32> {
    let mut v: Vec<f32> = vec![
        0.0,
        -0.0,
        f32::from_bits(1),
        f32::from_bits(0x007f_ffff),
        f32::from_bits(0x8000_0001),
        f32::from_bits(0x807f_ffff),
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(0x7fc0_0000),
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffff_ffff),
        f32::from_bits(0xffc0_0000),
        f32::EPSILON,
        std::f32::consts::SQRT_2,
        std::f32::consts::FRAC_1_SQRT_2,
        std::f32::consts::LN_2,
        std::f32::consts::E,
    ];
    // Thresholds (overflow/underflow of exp and friends, branch points) and their neighbours.
    let pivots = [
        88.722_84,
        88.8,
        -87.336_54,
        -103.972_08,
        -104.0,
        0.55,
        0.875,
        1.375,
        2.0,
        2.75,
        3.875,
        3.832_5,
        9.01,
        44.36,
        0.346_573_6,
        1.0,
        0.5,
        89.0,
        -89.0,
        16.635_532,
        18.420_68,
    ];
    for p in pivots {
        for s in [1.0f32, -1.0] {
            let b = (p * s).to_bits();
            for d in 0..4u32 {
                v.push(f32::from_bits(b.wrapping_add(d)));
                v.push(f32::from_bits(b.wrapping_sub(d)));
            }
        }
    }
    for i in -40..=40 {
        v.push(i as f32);
        v.push(i as f32 + 0.5);
    }
    for e in -126..=127 {
        let p = 2f32.powi(e);
        for x in [p, -p, f32::from_bits(p.to_bits() - 1), f32::from_bits(p.to_bits() + 1)] {
            v.push(x);
            v.push(-x);
        }
    }
    v
}

fn assert_strict_bits(name: &str, x: f32, y: f32) {
    let b = y.to_bits();
    if y.is_nan() {
        assert_eq!(b, nm::CANONICAL_NAN, "{name}({x:e}) gave a non-canonical NaN {b:#x}");
    } else {
        assert!(b & 0x7f80_0000 != 0 || b & 0x007f_ffff == 0, "{name}({x:e}) gave a denormal");
    }
}

/// Runs `case` over `inputs`, returning (max error, worst input).
fn measure(case: &Case, inputs: impl Iterator<Item = f32>) -> (f64, f32) {
    let mut worst = (0.0f64, 0.0f32);
    for x in inputs {
        let y = (case.f)(x);
        assert_strict_bits(case.name, x, y);
        let e = error(case, x, y);
        if e > worst.0 || e.is_nan() {
            worst = (e, x);
        }
    }
    worst
}

#[test]
fn unary_functions_within_bounds_sampled() {
    const STRIDE: u64 = 1031;
    let edges = edge_inputs();
    let mut failures = Vec::new();
    for case in cases() {
        let sampled = (0..(1u64 << 32)).step_by(STRIDE as usize).map(|b| f32::from_bits(b as u32));
        let (e, x) = measure(&case, sampled.chain(edges.iter().copied()));
        println!("{:8} max {:.4} ulp at {:e} ({:#010x})", case.name, e, x, x.to_bits());
        if e.is_nan() || e > case.bound {
            failures.push(format!("{}: {e} ulp at {x:e} > {}", case.name, case.bound));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn special_values() {
    let inf = f32::INFINITY;
    let nan_in = f32::from_bits(0xffc1_2345);
    for case in cases() {
        assert_eq!((case.f)(nan_in).to_bits(), nm::CANONICAL_NAN, "{}(NaN)", case.name);
    }
    assert_eq!(nm::exp(inf), inf);
    assert_eq!(nm::exp(-inf).to_bits(), 0);
    assert_eq!(nm::exp(0.0), 1.0);
    assert_eq!(nm::exp(-0.0), 1.0);
    assert_eq!(nm::exp(89.0), inf);
    assert_eq!(nm::exp(-88.0).to_bits(), 0); // below FLT_MIN: flushed, never denormal
    assert_eq!(nm::log(0.0), -inf);
    assert_eq!(nm::log(-0.0), -inf);
    assert_eq!(nm::log(f32::from_bits(5)), -inf); // denormal input is zero
    assert!(nm::log(-1.0).is_nan());
    assert!(nm::log(-inf).is_nan());
    assert_eq!(nm::log(inf), inf);
    assert_eq!(nm::log(1.0).to_bits(), 0);
    assert!(nm::sqrt(-1e-30).is_nan());
    assert_eq!(nm::sqrt(inf), inf);
    assert_eq!(nm::sqrt(f32::from_bits(0x8000_0003)).to_bits(), 0x8000_0000);
    assert!(nm::rsqrt(-1.0).is_nan());
    assert_eq!(nm::recip(inf).to_bits(), 0);
    assert_eq!(nm::recip(-inf).to_bits(), 0x8000_0000);
    assert_eq!(nm::recip(f32::MAX).to_bits(), 0); // 1/MAX is denormal: flushed
    assert_eq!(nm::recip(f32::MIN_POSITIVE), 2f32.powi(126));
    for (x, t) in [(inf, 1.0f32), (-inf, -1.0), (0.0, 0.0), (-0.0, -0.0)] {
        assert_eq!(nm::tanh(x).to_bits(), t.to_bits(), "tanh({x})");
        assert_eq!(nm::erf(x).to_bits(), t.to_bits(), "erf({x})");
    }
    assert_eq!(nm::sigmoid(inf), 1.0);
    assert_eq!(nm::sigmoid(-inf).to_bits(), 0);
    assert_eq!(nm::sigmoid(0.0), 0.5);
    assert_eq!(nm::gelu(inf), inf);
    assert_eq!(nm::gelu(-inf).to_bits(), 0x8000_0000);
    assert_eq!(nm::gelu(0.0).to_bits(), 0);
    // Tiny inputs: the odd functions return x itself.
    for x in [1e-30f32, -3e-20, 1e-10] {
        assert_eq!(nm::tanh(x), x);
        assert_eq!(nm::erf(x), (8.0 * x + 8.0 * x * 0.128_379_17) * 0.125);
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 32) as u32
    }
    /// Random bits, biased towards interesting exponents half of the time.
    fn f32(&mut self) -> f32 {
        let b = self.next();
        if b & 1 == 0 {
            f32::from_bits(b)
        } else {
            let e = 100 + (self.next() % 56); // exponents around 1 (2^-27 .. 2^28)
            f32::from_bits((b & 0x807f_ffff) | (e << 23))
        }
    }
    fn normalish(&mut self) -> f32 {
        (self.next() as f64 / u32::MAX as f64 * 8.0 - 4.0) as f32
    }
}

#[test]
fn div_correctly_rounded_sampled() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let edges = edge_inputs();
    let mut worst = 0.0f64;
    let mut check = |a: f32, b: f32| {
        let q = nm::div(a, b);
        assert_strict_bits("div", a, q);
        let exact = nm::ftz(a) as f64 / nm::ftz(b) as f64;
        let e = ulp_error(q, exact);
        assert!(e <= 0.5, "div({a:e}, {b:e}) = {q:e}: {e} ulp (exact {exact:e})");
        // Bits: the correctly rounded quotient, flushed (FLT_MIN edge aside).
        let want = nm::canon(exact as f32);
        if want.abs() != f32::MIN_POSITIVE && !want.is_nan() {
            assert_eq!(q.to_bits(), want.to_bits(), "div({a:e}, {b:e})");
        }
        worst = worst.max(e);
    };
    for _ in 0..300_000 {
        let (a, b) = (rng.f32(), rng.f32());
        check(a, b);
    }
    for &a in edges.iter().step_by(3) {
        for &b in edges.iter().step_by(5) {
            check(a, b);
        }
    }
    println!("div max {worst:.4} ulp");
}

#[test]
fn add_sub_mul_never_denormal_or_noncanonical_nan() {
    let mut rng = Rng(42);
    let tiny = [
        f32::MIN_POSITIVE,
        1.5 * f32::MIN_POSITIVE,
        f32::from_bits(0x0080_0001),
        f32::from_bits(0x0100_0000),
        1e-20,
        3e-19,
        f32::from_bits(0x1f80_0000),
        f32::from_bits(1),
        f32::from_bits(0x7fff_ffff),
        f32::from_bits(0xff80_0001),
    ];
    type Op = fn(f32, f32) -> f32;
    let ops: [(&str, Op, Op); 3] =
        [("add", nm::add, |a, b| a + b), ("sub", nm::sub, |a, b| a - b), ("mul", nm::mul, |a, b| a * b)];
    for (name, op, ieee) in ops {
        let mut pairs: Vec<(f32, f32)> = (0..200_000).map(|_| (rng.f32(), rng.f32())).collect();
        for &a in &tiny {
            for &b in &tiny {
                pairs.extend([(a, b), (-a, b), (a, -b), (a, 1.0 - f32::EPSILON), (a, 0.5)]);
            }
        }
        for (a, b) in pairs {
            let r = op(a, b);
            assert_strict_bits(name, a, r);
            // And it is the IEEE result of the canonicalized inputs, canonicalized.
            let want = nm::canon(ieee(nm::canon(a), nm::canon(b)));
            assert_eq!(r.to_bits(), want.to_bits(), "{name}({a:e}, {b:e})");
        }
    }
    // Exactly-denormal results flush to the zero of their sign.
    assert_eq!(nm::sub(1.5 * f32::MIN_POSITIVE, f32::MIN_POSITIVE * 1.25).to_bits(), 0);
    assert_eq!(nm::sub(f32::MIN_POSITIVE * 1.25, 1.5 * f32::MIN_POSITIVE).to_bits(), 0x8000_0000);
    assert_eq!(nm::mul(1e-20, -1e-20).to_bits(), 0x8000_0000);
    // The FLT_MIN edge: IEEE rounds (2 - 2^-23) * 2^-127 up to FLT_MIN on the denormal grid, but
    // rounded to 24 bits with an unbounded exponent it is below FLT_MIN: tiny after rounding,
    // so flushed, as x86 FTZ does (documented in docs/numerics.md).
    let a = f32::from_bits(0x1f7f_ffff); // (2 - 2^-23) * 2^-65
    let b = f32::from_bits(0x2080_0000); // 2^-62
    assert_eq!(nm::mul(a, b).to_bits(), 0);
    assert_eq!(nm::mul(-a, b).to_bits(), 0x8000_0000);
    // (1 - 2^-46) * 2^-126 rounds to FLT_MIN with an unbounded exponent too: not tiny, kept.
    assert_eq!(nm::mul(f32::from_bits(0x3f7f_fffe), f32::from_bits(0x0080_0001)), f32::MIN_POSITIVE);
}

/// The tree written out as the CPU SIMD executor maps it: 16 vector accumulators of 16 lanes,
/// lane `j` of the spec = vector `j / 16`, element `j % 16`.
fn sum_as_16x16(xs: &[f32]) -> f32 {
    let mut acc = [[0.0f32; 16]; 16];
    for (i, &x) in xs.iter().enumerate() {
        let j = i % 256;
        acc[j / 16][j % 16] = nm::add(acc[j / 16][j % 16], x);
    }
    // s = 128, 64, 32, 16: whole vectors combine (vector v with v + s/16).
    for s in [8usize, 4, 2, 1] {
        for v in 0..s {
            let hi = acc[v + s];
            for (l, h) in acc[v].iter_mut().zip(hi) {
                *l = nm::add(*l, h);
            }
        }
    }
    // s = 8, 4, 2, 1: within vector 0.
    let mut v = acc[0];
    for s in [8usize, 4, 2, 1] {
        for l in 0..s {
            v[l] = nm::add(v[l], v[l + s]);
        }
    }
    v[0]
}

#[test]
fn sum_follows_the_tree_and_is_accurate() {
    let mut rng = Rng(7);
    for n in [0usize, 1, 2, 255, 256, 257, 1000, 4096, 65_537] {
        let xs: Vec<f32> = (0..n).map(|_| rng.normalish()).collect();
        let s = nm::sum(&xs);
        assert_eq!(s.to_bits(), nm::sum(&xs).to_bits());
        assert_eq!(s.to_bits(), sum_as_16x16(&xs).to_bits(), "n = {n}");
        let exact: f64 = xs.iter().map(|&x| x as f64).sum();
        let abs: f64 = xs.iter().map(|&x| x.abs() as f64).sum();
        // Every element passes through at most ceil(n/256) + 8 roundings.
        let depth = n.div_ceil(256) as f64 + 8.0;
        assert!((s as f64 - exact).abs() <= depth * 2f64.powi(-24) * abs * 1.01, "n = {n}");
    }
    assert_eq!(nm::sum(&[]).to_bits(), 0);
    assert_eq!(nm::sum(&[-0.0, -0.0]).to_bits(), 0);
    assert_eq!(nm::sum(&[1.0, f32::NAN]).to_bits(), nm::CANONICAL_NAN);
    // A case where order matters: the tree, not left to right.
    let mut xs = vec![0.0f32; 257];
    xs[0] = 1.0;
    xs[256] = 2f32.powi(-24);
    xs[1] = 2f32.powi(-24);
    // Lane 0 gets 1 + 2^-24 (ties to even: 1), lane 1 gets 2^-24; the tree then adds 1 + 2^-24 = 1.
    assert_eq!(nm::sum(&xs), 1.0);
    assert_eq!(nm::max_reduce(&[1.0, 3.0, -2.0]), 3.0);
    assert_eq!(nm::max_reduce(&[]), f32::NEG_INFINITY);
    assert!(nm::max_reduce(&[1.0, f32::NAN]).is_nan());
}

#[test]
fn dot_is_sequential() {
    let mut rng = Rng(11);
    let a: Vec<f32> = (0..1000).map(|_| rng.normalish()).collect();
    let b: Vec<f32> = (0..1000).map(|_| rng.normalish()).collect();
    let mut acc = 0.0f32;
    for k in 0..a.len() {
        acc = nm::add(acc, nm::mul(a[k], b[k]));
    }
    assert_eq!(nm::dot(&a, &b).to_bits(), acc.to_bits());
    assert_eq!(nm::dot(&[], &[]).to_bits(), 0);
}

/// f16 values of every class (widened): normals of any exponent, subnormals, ±0, ±65504,
/// ±inf and NaN.
fn f16_value(rng: &mut Rng) -> f32 {
    let r = rng.next();
    let sign = ((r >> 31) as u16) << 15;
    let bits = match (r >> 20) % 64 {
        0 => [0x0000, 0x7bff, 0x7c00, 0x7e01, 0x0001][(r as usize) % 5] | sign,
        1..=8 => sign | ((r as u16 % 1023) + 1),
        _ => sign | ((((r >> 10) % 30 + 1) as u16) << 10) | (r as u16 & 0x3ff),
    };
    nm::f16_bits_to_f32(bits)
}

/// numerics::fma_chain_is_dot: for f16 values a fused multiply-add chain (Rust's mul_add,
/// one rounding) then canon gives exactly dot's bits, on chains that cancel to tiny sums,
/// reach inf and NaN; for f32 values it does not (the check would notice a wrong rule).
#[test]
fn fma_chains_of_f16_values_are_dot() {
    assert!(nm::fma_chain_is_dot(adeadvm::isa::DType::F16));
    for d in [adeadvm::isa::DType::Bf16, adeadvm::isa::DType::F32] {
        assert!(!nm::fma_chain_is_dot(d), "{d:?}");
    }
    let chain =
        |a: &[f32], b: &[f32]| nm::canon(a.iter().zip(b).fold(0.0f32, |acc, (&x, &y)| x.mul_add(y, acc)));
    let mut rng = Rng(29);
    let mut specials = 0;
    for len in (0..400).map(|i| 1 + i * 7) {
        // Mostly finite runs (a special value ends a chain's information), a few with specials.
        let finite = len % 3 != 0;
        let mut draw = || loop {
            let v = f16_value(&mut rng);
            if !finite || v.is_finite() {
                return v;
            }
        };
        let a: Vec<f32> = (0..len).map(|_| draw()).collect();
        let b: Vec<f32> = (0..len).map(|_| draw()).collect();
        let (want, got) = (nm::dot(&a, &b), chain(&a, &b));
        specials += usize::from(!want.is_finite());
        assert_eq!(got.to_bits(), want.to_bits(), "length {len}: fma chain {got:e}, dot {want:e}");
    }
    assert!(specials > 0, "no chain reached inf or NaN");
    // Control: general f32 values round their products, and the chains differ somewhere.
    let differ = (0..200).any(|_| {
        let a: Vec<f32> = (0..64).map(|_| rng.normalish()).collect();
        let b: Vec<f32> = (0..64).map(|_| rng.normalish()).collect();
        chain(&a, &b).to_bits() != nm::dot(&a, &b).to_bits()
    });
    assert!(differ, "f32 chains all agreed: the check cannot tell fused from unfused");
}

#[test]
fn row_kernels() {
    let mut rng = Rng(5);
    let x: Vec<f32> = (0..1000).map(|_| rng.normalish() * 3.0).collect();
    let xd: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let n = x.len() as f64;

    let mut y = vec![0.0; x.len()];
    nm::softmax_row(&x, &mut y);
    let m = xd.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    // x - max is rounded to f32 first (as the kernel does); the rest is exact.
    let dd: Vec<f64> = x.iter().map(|&v| nm::sub(v, m as f32) as f64).collect();
    let z: f64 = dd.iter().map(|v| v.exp()).sum();
    for (i, &v) in y.iter().enumerate() {
        let exact = dd[i].exp() / z;
        assert!(ulp_error(v, exact) <= 8.0, "softmax[{i}]");
    }
    let mut y2 = vec![0.0; x.len()];
    nm::softmax_row(&x, &mut y2);
    assert_eq!(y, y2);

    let g: Vec<f32> = (0..1000).map(|_| rng.normalish()).collect();
    let b: Vec<f32> = (0..1000).map(|_| rng.normalish()).collect();
    nm::layernorm_row(&x, Some(&g), Some(&b), 1e-5, &mut y);
    let mu = xd.iter().sum::<f64>() / n;
    let var = xd.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n;
    for i in 0..x.len() {
        let exact = (xd[i] - mu) / (var + 1e-5).sqrt() * g[i] as f64 + b[i] as f64;
        assert!((y[i] as f64 - exact).abs() < 1e-5, "layernorm[{i}]");
    }
    // The exact steps, spelled out.
    let mu32 = nm::div(nm::sum(&x), 1000.0);
    assert_eq!(mu32, nm::mean(&x));
    let d: Vec<f32> = x.iter().map(|&v| nm::sub(v, mu32)).collect();
    let sq: Vec<f32> = d.iter().map(|&v| nm::mul(v, v)).collect();
    let rs = nm::rsqrt(nm::add(nm::div(nm::sum(&sq), 1000.0), 1e-5));
    for i in 0..x.len() {
        let want = nm::add(nm::mul(nm::mul(d[i], rs), g[i]), b[i]);
        assert_eq!(y[i].to_bits(), want.to_bits());
    }

    nm::rmsnorm_row(&x, Some(&g), 1e-6, &mut y);
    let ms = xd.iter().map(|v| v * v).sum::<f64>() / n;
    for i in 0..x.len() {
        let exact = xd[i] / (ms + 1e-6).sqrt() * g[i] as f64;
        assert!((y[i] as f64 - exact).abs() < 1e-5, "rmsnorm[{i}]");
    }
    assert!(nm::mean(&[]).is_nan());
}

// ---- exhaustive runs (release mode; multi-threaded) ----

fn exhaustive(name: &str) {
    let case = cases().into_iter().find(|c| c.name == name).unwrap();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let chunk = (1u64 << 32) / threads;
    let case = &case;
    let results: Vec<(f64, f32)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let hi = if t + 1 == threads { 1u64 << 32 } else { (t + 1) * chunk };
                    measure(case, (t * chunk..hi).map(|b| f32::from_bits(b as u32)))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (e, x) = results.into_iter().fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
    println!("EXHAUSTIVE {name}: max {e:.4} ulp at {x:e} ({:#010x}), bound {}", x.to_bits(), case.bound);
    assert!(e <= case.bound);
}

macro_rules! exhaustive_tests {
    ($($f:ident),*) => {$(
        #[test]
        #[ignore = "all 2^32 inputs; run in release"]
        fn $f() {
            exhaustive(&stringify!($f)["exhaustive_".len()..]);
        }
    )*};
}
exhaustive_tests!(
    exhaustive_recip,
    exhaustive_sqrt,
    exhaustive_rsqrt,
    exhaustive_exp,
    exhaustive_log,
    exhaustive_tanh,
    exhaustive_sigmoid,
    exhaustive_erf,
    exhaustive_gelu
);

#[test]
#[ignore = "all 2^32 inputs; run in release"]
fn exhaustive_f16_bf16_conversions() {
    for b in 0..=u32::MAX {
        let x = f32::from_bits(b);
        let xc = nm::canon(x);
        if xc.is_nan() {
            continue;
        }
        assert_eq!(nm::f32_to_f16_bits(x), half::f16::from_f32(xc).to_bits(), "{b:#x}");
        assert_eq!(nm::f32_to_bf16_bits(x), half::bf16::from_f32(xc).to_bits(), "{b:#x}");
    }
}

/// recip, sqrt and rsqrt work on the significand (recip: [1, 2); sqrt, rsqrt: [1, 4)) and put the
/// exponent back with integer arithmetic, so their error depends only on the significand (and on
/// the exponent only at overflow/underflow). This runs *every* significand (2^23 for recip,
/// 2^24 for sqrt/rsqrt) at one exponent, then every exponent for every 61st significand; together
/// that is the exhaustive result for these three functions.
#[test]
#[ignore = "2^24 significands x 3 functions; run in release"]
fn exhaustive_significands_recip_sqrt_rsqrt() {
    for name in ["recip", "sqrt", "rsqrt"] {
        let case = cases().into_iter().find(|c| c.name == name).unwrap();
        let (lo, hi) =
            if name == "recip" { (0x3f80_0000u32, 0x4000_0000u32) } else { (0x3f80_0000, 0x4080_0000) };
        let (e1, x1) = measure(&case, (lo..hi).map(f32::from_bits));
        let all_exp = (0u32..0x80_0000).step_by(61).flat_map(|m| {
            (0u32..512).map(move |se| f32::from_bits(((se & 0x100) << 23) | ((se & 0xff) << 23) | m))
        });
        let (e2, x2) = measure(&case, all_exp);
        let (e, x) = if e2 > e1 { (e2, x2) } else { (e1, x1) };
        println!("EXHAUSTIVE-SIGNIFICANDS {name}: max {e:.9} ulp at {x:e} ({:#010x})", x.to_bits());
        assert!(e <= case.bound);
    }
}

/// Strict add/sub/mul are what x86 computes with MXCSR FTZ+DAZ set (tininess after rounding), so
/// SIMD kernels may use plain vector instructions in that mode. Inputs here are non-NaN, since
/// hardware NaN payloads are not canonical (kernels canonicalize NaN separately).
#[cfg(target_arch = "x86_64")]
#[test]
fn strict_ops_equal_hardware_flush_to_zero() {
    use adeadvm::exec::cpu::fpenv::FtzGuard;
    use adeadvm::numerics::{add, mul, sub};
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut pairs: Vec<(f32, f32)> = Vec::new();
    for _ in 0..400_000 {
        // Products landing near FLT_MIN: exponents summing to about 1 - 127.
        let ea = 90 + (next() % 38) as u32;
        let eb = 128 - ea + (next() % 3) as u32;
        let a = f32::from_bits(((next() & 1) as u32) << 31 | ea << 23 | (next() as u32 & 0x7f_ffff));
        let b = f32::from_bits(eb << 23 | (next() as u32 & 0x7f_ffff));
        pairs.push((a, b));
        // Arbitrary non-NaN bit patterns (denormals, infinities, zeros included).
        let r = |n: u64| {
            let x = f32::from_bits(n as u32);
            if x.is_nan() {
                1.5
            } else {
                x
            }
        };
        pairs.push((r(next()), r(next())));
        // Sums that cancel near FLT_MIN.
        let x = f32::from_bits(0x0080_0000 + (next() % 0x0100_0000) as u32);
        pairs.push((x, -f32::from_bits(x.to_bits() + (next() % 8) as u32)));
    }
    pairs.push((f32::from_bits(0x3f7f_ffff), f32::MIN_POSITIVE)); // flushed: tiny after rounding
    pairs.push((f32::from_bits(0x3f7f_fffe), f32::from_bits(0x0080_0001))); // kept: rounds up to FLT_MIN
    let hw: Vec<(u32, u32, u32)> = {
        let _ftz = FtzGuard::new();
        pairs
            .iter()
            .map(|&(a, b)| {
                let (a, b) = (std::hint::black_box(a), std::hint::black_box(b));
                ((a * b).to_bits(), (a + b).to_bits(), (a - b).to_bits())
            })
            .collect()
    };
    for (&(a, b), &(m, s, d)) in pairs.iter().zip(&hw) {
        let canon = |bits: u32| if f32::from_bits(bits).is_nan() { 0x7fc0_0000 } else { bits };
        assert_eq!(mul(a, b).to_bits(), canon(m), "mul({a:e}, {b:e})");
        assert_eq!(add(a, b).to_bits(), canon(s), "add({a:e}, {b:e})");
        assert_eq!(sub(a, b).to_bits(), canon(d), "sub({a:e}, {b:e})");
    }
}

/// shaders/include/strict.glsl's `strict_exp` where it keeps its steps' result: `numerics::exp`'s
/// steps on plain IEEE add, sub and mul (Rust never fuses them), which the GPU takes where
/// |x| >= 2^-40 and x is within exp's range checks, on the claim that every operand and result
/// there is a normal float or zero, so that the strict operations' canonicalizing and flushing
/// change nothing; k's integer is read from t's low bits, as the shader does.
fn exp_on_plain_ops(x: f32) -> f32 {
    let f = f32::from_bits;
    let t = x * f(0x3fb8_aa3b) + f(0x4b40_0000);
    let k = t - f(0x4b40_0000);
    let r = (x - k * f(0x3f31_7200)) - k * f(0x35bf_be8e);
    let mut q = f(0x3950_0d01);
    for c in [0x3ab6_0b61, 0x3c08_8889, 0x3d2a_aaab, 0x3e2a_aaab, 0x3f00_0000] {
        q = f(c) + q * r;
    }
    let m = 1.0 + (r + (r * r) * q);
    let e = ((m.to_bits() >> 23) & 0xff) as i32 + (t.to_bits() as i32 - 0x4b40_0000);
    match e {
        255.. => f32::INFINITY,
        ..=0 => 0.0,
        _ => f((m.to_bits() & 0x007f_ffff) | ((e as u32) << 23)),
    }
}

/// `strict_exp` on the GPU gives 1 for every |x| < 2^-40 (no steps): every `stride`-th such float,
/// of both signs, denormals and zeros included, is 1 under `numerics::exp` too.
fn exp_below_2_pow_minus_40_is_one(stride: usize) {
    for sign in [0u32, 0x8000_0000] {
        for b in (0u32..0x2b80_0000).step_by(stride).chain([0x2b7f_ffff, 0x0080_0000, 1]) {
            let x = f32::from_bits(b | sign);
            assert_eq!(nm::exp(x).to_bits(), 1f32.to_bits(), "exp({x:e} = {:#010x})", x.to_bits());
        }
    }
}

#[test]
fn gpu_exp_of_tiny_is_one_sampled() {
    exp_below_2_pow_minus_40_is_one(1009);
}

/// All 1.46 billion floats below 2^-40 in magnitude (a few minutes in release).
#[test]
#[ignore]
fn gpu_exp_of_tiny_is_one_exhaustive() {
    exp_below_2_pow_minus_40_is_one(1);
}

/// shaders/include/strict.glsl's division and square roots after their special cases: the steps
/// of `numerics::div`, `sqrt` and `rsqrt` on significands, on plain IEEE operations (the
/// shader's claim: every operand and result there is a normal float or zero). Each returns the
/// significand of the result, before the exponent is put back.
mod plain_roots {
    const MANT: u32 = 0x007f_ffff;
    fn two_prod(a: f32, b: f32) -> (f32, f32) {
        let c = 4097.0f32;
        let t = c * a;
        let ah = t - (t - a);
        let al = a - ah;
        let t = c * b;
        let bh = t - (t - b);
        let bl = b - bh;
        let p = a * b;
        (p, (((ah * bh - p) + ah * bl) + al * bh) + al * bl)
    }
    fn ulps(v: f32) -> (f32, f32) {
        let e = (v.to_bits() >> 23) & 0xff;
        let up = f32::from_bits((e - 23) << 23);
        (up, if v.to_bits() & MANT == 0 { f32::from_bits((e - 24) << 23) } else { up })
    }
    fn rsqrt_seed(m: f32) -> f32 {
        let mut y = f32::from_bits(0x5f37_59df - (m.to_bits() >> 1));
        let hm = 0.5 * m;
        for _ in 0..3 {
            y = y * (1.5 - (hm * y) * y);
        }
        y
    }
    /// ma / mb for ma, mb in [1, 2).
    pub fn div(ma: f32, mb: f32) -> f32 {
        let mut y = f32::from_bits(0x3fb4_b4b5) - f32::from_bits(0x3ef0_f0f1) * mb;
        for _ in 0..3 {
            y = y + y * (1.0 - mb * y);
        }
        let q0 = ma * y;
        let (ph, pl) = two_prod(q0, mb);
        let q = q0 + ((ma - ph) - pl) * y;
        let (ph, pl) = two_prod(q, mb);
        let r = (ma - ph) - pl;
        let (u, ud) = ulps(q);
        if r > mb * (0.5 * u) {
            q + u
        } else if -r > mb * (0.5 * ud) {
            q - ud
        } else {
            q
        }
    }
    /// sqrt(m) for m in [1, 4).
    pub fn sqrt(m: f32) -> f32 {
        let y = rsqrt_seed(m);
        let s0 = m * y;
        let (ph, pl) = two_prod(s0, s0);
        let s = s0 + ((m - ph) - pl) * (0.5 * y);
        let (ph, pl) = two_prod(s, s);
        let r = (m - ph) - pl;
        let (u, ud) = ulps(s);
        if r > s * u {
            s + u
        } else if r <= -(s * ud) {
            s - ud
        } else {
            s
        }
    }
    /// 1 / sqrt(m) for m in [1, 4).
    pub fn rsqrt(m: f32) -> f32 {
        let y = rsqrt_seed(m);
        let (yh, yl) = two_prod(y, y);
        let (ph, pl) = two_prod(m, yh);
        let e = ((1.0 - ph) - pl) - m * yl;
        let z = y + y * (0.5 * e);
        if [0x4009_f038, 0x407f_fffe].contains(&m.to_bits()) {
            f32::from_bits(z.to_bits() + 1)
        } else {
            z
        }
    }
}

/// Every `stride`-th significand in [1, 4) (sqrt, rsqrt), and in [1, 2) as a divisor of 65
/// dividends (div): the plain steps give numerics' bits (in [1, 4) the
/// exponent put back is the identity, or a halving for rsqrt's odd binade, which is exact).
fn plain_roots_agree(stride: usize) {
    let f = f32::from_bits;
    for b in (0x3f80_0000u32..0x4080_0000).step_by(stride) {
        let m = f(b);
        assert_eq!(nm::sqrt(m).to_bits(), plain_roots::sqrt(m).to_bits(), "sqrt({m:e})");
        // rsqrt's scale_bits puts back -h, h = 0 here: the significand is the result.
        assert_eq!(nm::rsqrt(m).to_bits(), plain_roots::rsqrt(m).to_bits(), "rsqrt({m:e})");
    }
    // 64 dividends spread over [1, 2) (and its ends), against every `stride`-th divisor.
    let dividends: Vec<f32> =
        (0x3f80_0000u32..0x4000_0000).step_by(131_071).map(f).chain([f(0x3fff_ffff)]).collect();
    for b in (0x3f80_0000u32..0x4000_0000).step_by(stride) {
        for &a in &dividends {
            let mb = f(b);
            // a / mb for significands: scale_bits adds exponent 0 (a, mb in [1, 2)).
            assert_eq!(nm::div(a, mb).to_bits(), plain_roots::div(a, mb).to_bits(), "div({a:e}, {mb:e})");
        }
    }
}

#[test]
fn gpu_division_and_roots_on_plain_ops_are_strict_sampled() {
    plain_roots_agree(37);
}

/// Every significand (a few minutes in release).
#[test]
#[ignore]
fn gpu_division_and_roots_on_plain_ops_are_strict_exhaustive() {
    plain_roots_agree(1);
}

/// Every `stride`-th float the GPU's plain-arithmetic exp takes: the same bits as the strict exp.
fn plain_exp_agrees(stride: usize) {
    let (lo, hi) = (f32::from_bits(0xc2d0_0000), f32::from_bits(0x42b1_999a)); // -104, 88.8
    let mut checked = 0u64;
    for sign in [0u32, 0x8000_0000] {
        for b in (0x2b80_0000u32..=0x42d0_0000).step_by(stride) {
            let x = f32::from_bits(b | sign);
            if x < lo || x > hi {
                continue;
            }
            checked += 1;
            let (want, got) = (nm::exp(x), exp_on_plain_ops(x));
            assert_eq!(
                want.to_bits(),
                got.to_bits(),
                "exp({x:e} = {:#010x}): strict {want:e}, plain {got:e}",
                x.to_bits()
            );
        }
    }
    assert!(checked > 780_000_000 / stride as u64, "{checked}");
}

#[test]
fn gpu_exp_fast_path_is_the_strict_exp_sampled() {
    plain_exp_agrees(31);
}

/// All 780 million floats of the fast path (about a minute in release).
#[test]
#[ignore]
fn gpu_exp_fast_path_is_the_strict_exp_exhaustive() {
    plain_exp_agrees(1);
}

/// Whether `z` (in [0.5, 1]) is `1/sqrt(m)` (m in [1, 4)) correctly rounded, decided exactly on
/// integers: with m = M 2^-23 and z = Z 2^-24, the true value lies between the midpoints
/// (2Z ± 1) 2^-25 (the lower one (4Z - 1) 2^-26 when z = 0.5) iff M (2Z - 1)^2 < 2^73 <
/// M (2Z + 1)^2 (no tie is possible: an odd square times M is never 2^73).
fn rsqrt_is_correctly_rounded(m: f32, z: f32) -> bool {
    let mm = (m.to_bits() & 0x7f_ffff | 0x80_0000) as u128 * if m >= 2.0 { 2 } else { 1 };
    let zz = (z as f64 * (1u64 << 24) as f64) as u128;
    let above = mm * (2 * zz + 1) * (2 * zz + 1) > 1u128 << 73;
    let below = if zz == 1 << 23 {
        mm * (4 * zz - 1) * (4 * zz - 1) < 1u128 << 75
    } else {
        mm * (2 * zz - 1) * (2 * zz - 1) < 1u128 << 73
    };
    above && below
}

/// RSQRT is correctly rounded (docs/numerics.md, ISA.md): over every significand in [1, 4) (the
/// exponent is put back with integers, so this is every input) the result is the correctly
/// rounded `1/sqrt(m)`, decided exactly on integers, and its error measured against f64 is at
/// most 0.5 ulp. The input 0x7e7ffffe gives the correctly rounded 0x20000001.
#[test]
fn rsqrt_is_correctly_rounded_for_every_significand() {
    let (mut max_err, mut at, mut wrong) = (0.0f64, 0.0f32, Vec::new());
    for bits in 0x3f80_0000u32..0x4080_0000 {
        let m = f32::from_bits(bits);
        let z = nm::rsqrt(m);
        let t = 1.0 / (m as f64).sqrt();
        let err = (z as f64 - t).abs() / 2f64.powi(-24);
        if err > max_err {
            (max_err, at) = (err, m);
        }
        if !rsqrt_is_correctly_rounded(m, z) {
            wrong.push(bits);
        }
    }
    println!("rsqrt over every significand: max {max_err:.12} ulp at {at:e} ({:#010x})", at.to_bits());
    assert!(wrong.is_empty(), "not correctly rounded at significands {wrong:#010x?}");
    assert!(max_err <= 0.5, "max {max_err} ulp at {at:e}");
    // The case: 2^-63 / sqrt(2 * 1.99999976); the integer model, not the function,
    // says which float is nearest.
    let x = f32::from_bits(0x7e7f_fffe);
    let m = f32::from_bits(0x407f_fffe);
    let want = f32::from_bits(0x2000_0001);
    assert!(rsqrt_is_correctly_rounded(m, f32::from_bits(0x3f00_0001)));
    assert_eq!(nm::rsqrt(x).to_bits(), want.to_bits());
}
