//! Every opcode on the CPU reference, against an independent float64 reference written here.

mod common;

use common::*;

/// y = OP(x) for a unary opcode over `xs`.
fn unary(op: &str, xs: &[f32]) -> Vec<f32> {
    let n = xs.len();
    let src = format!(
        ".input %x f32[{n}]\n.output y f32[{n}]\nALLOC %t: f32[{n}]\n{op} %t, %x\nSTORE y, %t\nFREE %t\nHALT\n"
    );
    run_y(&src, &[("x", f32s(&[n], xs))])
}

fn sample_inputs(lo: f32, hi: f32) -> Vec<f32> {
    let mut r = Rng(7);
    let mut v = r.vec(2000, lo, hi);
    v.extend([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, lo, hi * 0.999]);
    v
}

fn check_unary(op: &str, xs: &[f32], reference: impl Fn(f64) -> f64, max_ulp: u64) {
    let ys = unary(op, xs);
    for (&x, &y) in xs.iter().zip(&ys) {
        let u = ulps(y, reference(x as f64));
        assert!(
            u <= max_ulp,
            "{op}({x:e}) = {y:e}, reference {:e}: {u} ulp > {max_ulp}",
            reference(x as f64)
        );
    }
}

/// GELU in f64: erfc in the negative tail, where 1 + erf(x) would cancel.
fn gelu64(x: f64) -> f64 {
    use adeadvm::numerics::accuracy::{erf_f64, erfc_f64};
    let z = x / std::f64::consts::SQRT_2;
    if x < 0.0 {
        0.5 * x * erfc_f64(-z)
    } else {
        0.5 * x * (1.0 + erf_f64(z))
    }
}

#[test]
fn unary_float_ops_match_float64_within_their_bounds() {
    let wide = sample_inputs(-80.0, 80.0);
    let pos = sample_inputs(1e-30, 1e30);
    check_unary("NEG", &wide, |x| -x, 0);
    check_unary("ABS", &wide, f64::abs, 0);
    check_unary("RELU", &wide, |x| x.max(0.0), 0);
    check_unary("SQRT", &pos, f64::sqrt, 1);
    check_unary("RSQRT", &pos, |x| 1.0 / x.sqrt(), 2);
    check_unary("EXP", &wide, f64::exp, 2);
    check_unary("LOG", &pos, f64::ln, 2);
    check_unary("TANH", &sample_inputs(-10.0, 10.0), f64::tanh, 4);
    check_unary("SIGMOID", &sample_inputs(-30.0, 30.0), |x| 1.0 / (1.0 + (-x).exp()), 4);
    // The erf form of GELU cancels where it tends to 0 (x < -1, and near 0): there the
    // documented bound (docs/numerics.md) is absolute, in ulps of 0.5·x; elsewhere relative.
    let xs = sample_inputs(-9.0, 6.0);
    let ys = unary("GELU", &xs);
    for (&x, &y) in xs.iter().zip(&ys) {
        if x >= -1.0 && x.abs() > 0.05 {
            let u = ulps(y, gelu64(x as f64));
            assert!(u <= 8, "GELU({x:e}) = {y:e}: {u} ulp");
        } else {
            let ulp_half_x = f32::EPSILON as f64 * (0.5 * x.abs() as f64).max(f32::MIN_POSITIVE as f64);
            let err = (y as f64 - gelu64(x as f64)).abs();
            assert!(err <= 4.0 * ulp_half_x, "GELU({x:e}) = {y:e}: error {err:e} > 4 ulp of x/2");
        }
    }
    let near = sample_inputs(-0.05, 0.05);
    let ys = unary("GELU", &near);
    let want: Vec<f64> = near.iter().map(|&x| gelu64(x as f64)).collect();
    assert_close(&ys, &want, 1e-9, 1e-5, "GELU near 0");
}

#[test]
fn unary_special_values() {
    let xs = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.0, -0.0, 1e-40];
    let exp = unary("EXP", &xs);
    assert_eq!(exp[0], f32::INFINITY);
    assert_eq!(exp[1], 0.0);
    assert_eq!(exp[2].to_bits(), 0x7fc0_0000, "NaN is canonical");
    assert_eq!(exp[5], 1.0, "a denormal input is flushed to zero first");
    let log = unary("LOG", &[0.0, -1.0, f32::INFINITY]);
    assert_eq!(log[0], f32::NEG_INFINITY);
    assert_eq!(log[1].to_bits(), 0x7fc0_0000);
    assert_eq!(log[2], f32::INFINITY);
    let sqrt = unary("SQRT", &[-0.0, -4.0, 16.0]);
    assert_eq!(sqrt[2], 4.0);
    assert!(sqrt[1].is_nan());
}

/// ERF against the float64 erf written in the tests (common::erf64), within its documented
/// 2 ulp, and its special values: ±inf -> ±1, NaN -> the canonical NaN, ±0 -> ±0, a denormal
/// -> a zero of its sign.
#[test]
fn erf_within_its_bound_and_special_values() {
    check_unary("ERF", &sample_inputs(-5.0, 5.0), erf64, 2);
    check_unary("ERF", &sample_inputs(-1e-3, 1e-3), erf64, 2);
    check_unary("ERF", &sample_inputs(1e-30, 1e-20), erf64, 2);
    let xs =
        [f32::INFINITY, f32::NEG_INFINITY, f32::from_bits(0xffc1_2345), 0.0, -0.0, 1e-40, -1e-40, 4.0, -10.0];
    let y: Vec<u32> = unary("ERF", &xs).iter().map(|v| v.to_bits()).collect();
    let want: Vec<u32> = [1.0f32, -1.0, f32::from_bits(0x7fc0_0000), 0.0, -0.0, 0.0, -0.0, 1.0, -1.0]
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(y, want);
}

/// The comparisons and SELECT on hand-picked values, their answers worked out by hand from the
/// ISA's rules: NaN compares false, -0 == +0, a denormal is a zero of its sign; SELECT copies
/// the bits (a NaN payload and a denormal stay) and broadcasts.
#[test]
fn comparisons_and_select_on_special_values() {
    let nan = f32::from_bits(0x7f80_0001);
    let a = [nan, -0.0, 1e-40, 1.0, f32::INFINITY, -1e-40, 2.0, -3.0];
    let b = [nan, 0.0, -0.0, 1.0, f32::INFINITY, 1e-45, 1.0, f32::NEG_INFINITY];
    let src = |op: &str| {
        format!(
            ".input %a f32[8]\n.input %b f32[8]\n.output y i32[8]\nALLOC %t: i32[8]\n{op} %t, %a, %b\nSTORE y, %t\n\
             FREE %t\n"
        )
    };
    let ins = [("a", f32s(&[8], &a)), ("b", f32s(&[8], &b))];
    let out = |op: &str| run(&build(&src(op)), &ins).unwrap()["y"].to_i32().unwrap();
    assert_eq!(out("EQ"), vec![0, 1, 1, 1, 1, 1, 0, 0]);
    assert_eq!(out("LT"), vec![0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(out("LE"), vec![0, 1, 1, 1, 1, 1, 0, 0]);
    // b < a: LT with the operands swapped (the importer's GT).
    let src_gt = ".input %a f32[8]\n.input %b f32[8]\n.output y i32[8]\nALLOC %t: i32[8]\nLT %t, %b, %a\nSTORE y, %t\nFREE %t\n";
    assert_eq!(run(&build(src_gt), &ins).unwrap()["y"].to_i32().unwrap(), vec![0, 0, 0, 0, 0, 0, 1, 1]);
    // i32: signed, with a row broadcast.
    let src =
        ".input %a i32[2, 3]\n.input %b i32[3]\n.output y i32[2, 3]\nALLOC %t: i32[2, 3]\nLE %t, %a, %b\n\
               STORE y, %t\nFREE %t\n";
    let ins = [("a", i32s(&[2, 3], &[i32::MIN, 0, 5, -1, i32::MAX, 4])), ("b", i32s(&[3], &[-1, 0, 4]))];
    assert_eq!(run(&build(src), &ins).unwrap()["y"].to_i32().unwrap(), vec![1, 1, 0, 1, 0, 1]);

    // SELECT [2, 3] from cond [2, 1], a [3] and b a scalar: bits copied.
    let src =
        ".input %c i32[2, 1]\n.input %a f32[3]\n.input %b f32[]\n.output y f32[2, 3]\nALLOC %t: f32[2, 3]\n\
               SELECT %t, %c, %a, %b\nSTORE y, %t\nFREE %t\n";
    let a = [nan, 1e-40, -0.0];
    let ins = [("c", i32s(&[2, 1], &[0, -7])), ("a", f32s(&[3], &a)), ("b", f32s(&[], &[2.5]))];
    let y: Vec<u32> =
        run(&build(src), &ins).unwrap()["y"].to_f32().unwrap().iter().map(|v| v.to_bits()).collect();
    let want: Vec<u32> = [2.5, 2.5, 2.5, a[0], a[1], a[2]].iter().map(|v: &f32| v.to_bits()).collect();
    assert_eq!(y, want);
    // The expand of ONNX Expand: an all-ones cond of the target shape, a and b the same row.
    let src =
        ".input %a bf16[1, 3]\n.output y bf16[4, 3]\nALLOC %c: i32[4, 3]\nFILL %c, 1\nALLOC %t: bf16[4, 3]\n\
               SELECT %t, %c, %a, %a\nSTORE y, %t\nFREE %t\nFREE %c\n";
    let row = adeadvm::vm::HostTensor::from_bytes(
        adeadvm::isa::DType::Bf16,
        vec![1, 3],
        &[0x01, 0x7f, 0x01, 0x00, 0x80, 0x3f],
    )
    .unwrap();
    let out = run(&build(src), &[("a", row)]).unwrap();
    assert_eq!(out["y"].bytes(), [0x01, 0x7f, 0x01, 0x00, 0x80, 0x3f].repeat(4).as_slice());
}

fn binary(
    op: &str,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out_shape: &[usize],
) -> Vec<f32> {
    let dims = |s: &[usize]| s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
    let src = format!(
        ".input %a f32[{}]\n.input %b f32[{}]\n.output y f32[{o}]\nALLOC %t: f32[{o}]\n{op} %t, %a, %b\nSTORE y, %t\nFREE %t\n",
        dims(a_shape),
        dims(b_shape),
        o = dims(out_shape)
    );
    run_y(&src, &[("a", f32s(a_shape, a)), ("b", f32s(b_shape, b))])
}

#[test]
fn binary_ops_broadcast_and_round_like_ieee() {
    let mut r = Rng(11);
    let a = r.vec(12, -10.0, 10.0);
    let b = r.vec(4, 0.5, 10.0);
    // a is [3, 4], b is [4]: b broadcasts over rows.
    for (op, f) in [
        ("ADD", (|x, y| x + y) as fn(f64, f64) -> f64),
        ("SUB", |x, y| x - y),
        ("MUL", |x, y| x * y),
        ("DIV", |x, y| x / y),
        ("MAX", f64::max),
        ("MIN", f64::min),
    ] {
        let got = binary(op, &a, &[3, 4], &b, &[4], &[3, 4]);
        for i in 0..12 {
            let want = f(a[i] as f64, b[i % 4] as f64);
            // add/sub/mul of two f32 rounded once is what f64 then rounding gives; div is correctly rounded.
            assert_eq!(ulps(got[i], want), 0, "{op} element {i}: {} vs {want}", got[i]);
        }
    }
    // [3, 1] with [1, 4] gives [3, 4].
    let got = binary("MUL", &[1.0, 2.0, 3.0], &[3, 1], &[1.0, 10.0, 100.0, 1000.0], &[1, 4], &[3, 4]);
    assert_eq!(got, vec![1.0, 10.0, 100.0, 1000.0, 2.0, 20.0, 200.0, 2000.0, 3.0, 30.0, 300.0, 3000.0]);
}

#[test]
fn scalar_immediate_forms() {
    let src = ".input %x f32[4]\n.output y f32[4]\nALLOC %t: f32[4]\nALLOC %u: f32[4]\nADD %t, %x, 1.5\nMUL %u, %t, -2.0\nSUB %t, %u, 0.5\nDIV %u, %t, 4.0\nMAX %t, %u, -3.0\nMIN %u, %t, 0.0\nSTORE y, %u\nFREE %t\nFREE %u\n";
    let x = [1.0f32, -1.0, 0.25, 10.0];
    let got = run_y(src, &[("x", f32s(&[4], &x))]);
    let want: Vec<f32> = x.iter().map(|&v| (((v + 1.5) * -2.0 - 0.5) / 4.0).clamp(-3.0, 0.0)).collect();
    assert_eq!(got, want);
}

#[test]
fn integer_elementwise_wraps() {
    let src = ".input %a i32[4]\n.input %b i32[4]\n.output y i32[4]\nALLOC %t: i32[4]\nADD %t, %a, %b\nSTORE y, %t\nFREE %t\n";
    let p = build(src);
    let out =
        run(&p, &[("a", i32s(&[4], &[1, i32::MAX, -5, 7])), ("b", i32s(&[4], &[2, 1, -5, -7]))]).unwrap();
    assert_eq!(out["y"].to_i32().unwrap(), vec![3, i32::MIN, -10, 0]);
}

fn matmul_ref(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, ta: bool, tb: bool) -> Vec<f64> {
    let mut out = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..k {
                let x = if ta { a[p * m + i] } else { a[i * k + p] };
                let y = if tb { b[j * k + p] } else { b[p * n + j] };
                s += x as f64 * y as f64;
            }
            out[i * n + j] = s;
        }
    }
    out
}

#[test]
fn matmul_every_transpose_flag_bias_and_activation() {
    let (m, k, n) = (5, 37, 7);
    let mut r = Rng(3);
    let a = r.vec(m * k, -1.0, 1.0);
    let b = r.vec(k * n, -1.0, 1.0);
    let bias = r.vec(n, -1.0, 1.0);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let a_shape = if ta { format!("{k}, {m}") } else { format!("{m}, {k}") };
        let b_shape = if tb { format!("{n}, {k}") } else { format!("{k}, {n}") };
        let flags = format!("{}{}", if ta { ", ta" } else { "" }, if tb { ", tb" } else { "" });
        let src = format!(
            ".input %a f32[{a_shape}]\n.input %b f32[{b_shape}]\n.input %c f32[{n}]\n.output y f32[{m}, {n}]\n\
             ALLOC %t: f32[{m}, {n}]\nMATMUL %t, %a, %b, bias=%c{flags}, act=relu\nSTORE y, %t\nFREE %t\n"
        );
        // Lay a and b out as the flags say.
        let a_in: Vec<f32> =
            if ta { (0..k * m).map(|i| a[(i % m) * k + i / m]).collect() } else { a.clone() };
        let b_in: Vec<f32> =
            if tb { (0..n * k).map(|i| b[(i % k) * n + i / k]).collect() } else { b.clone() };
        let a_dims: Vec<usize> = if ta { vec![k, m] } else { vec![m, k] };
        let b_dims: Vec<usize> = if tb { vec![n, k] } else { vec![k, n] };
        let got = run_y(
            &src,
            &[("a", f32s(&a_dims, &a_in)), ("b", f32s(&b_dims, &b_in)), ("c", f32s(&[n], &bias))],
        );
        let want: Vec<f64> = matmul_ref(&a, &b, m, k, n, false, false)
            .iter()
            .enumerate()
            .map(|(i, v)| (v + bias[i % n] as f64).max(0.0))
            .collect();
        assert_close(&got, &want, 1e-5, 1e-5, &format!("matmul ta={ta} tb={tb}"));
    }
}

#[test]
fn matmul_batched_with_broadcast_weights() {
    let (bt, m, k, n) = (3, 4, 8, 5);
    let mut r = Rng(5);
    let a = r.vec(bt * m * k, -1.0, 1.0);
    let b = r.vec(k * n, -1.0, 1.0);
    let src = format!(
        ".input %a f32[{bt}, {m}, {k}]\n.input %b f32[{k}, {n}]\n.output y f32[{bt}, {m}, {n}]\nALLOC %t: f32[{bt}, {m}, {n}]\nMATMUL %t, %a, %b, act=gelu\nSTORE y, %t\nFREE %t\n"
    );
    let got = run_y(&src, &[("a", f32s(&[bt, m, k], &a)), ("b", f32s(&[k, n], &b))]);
    let mut want = Vec::new();
    for i in 0..bt {
        for v in matmul_ref(&a[i * m * k..(i + 1) * m * k], &b, m, k, n, false, false) {
            want.push(gelu64(v));
        }
    }
    assert_close(&got, &want, 1e-5, 1e-5, "batched matmul + gelu");
}

#[test]
fn matmul_sums_k_in_ascending_order() {
    // 1e8 + 1 - 1e8 ... in ascending k: ((0 + 1e8) + 1) + (-1e8) = 0 in f32, not 1.
    let src = ".input %a f32[1, 3]\n.input %b f32[3, 1]\n.output y f32[1, 1]\nALLOC %t: f32[1, 1]\nMATMUL %t, %a, %b\nSTORE y, %t\nFREE %t\n";
    let got = run_y(src, &[("a", f32s(&[1, 3], &[1e8, 1.0, -1e8])), ("b", f32s(&[3, 1], &[1.0, 1.0, 1.0]))]);
    assert_eq!(got, vec![0.0]);
}

#[test]
fn softmax_with_scale_and_mask() {
    let (rows, n) = (3, 300);
    let mut r = Rng(9);
    let x = r.vec(rows * n, -5.0, 5.0);
    let mask: Vec<f32> = (0..n).map(|j| if j % 7 == 0 { -10000.0 } else { 0.0 }).collect();
    let src = format!(
        ".input %x f32[{rows}, {n}]\n.input %m f32[{n}]\n.output y f32[{rows}, {n}]\nALLOC %t: f32[{rows}, {n}]\nSOFTMAX %t, %x, mask=%m, scale=0.5\nSTORE y, %t\nFREE %t\n"
    );
    let got = run_y(&src, &[("x", f32s(&[rows, n], &x)), ("m", f32s(&[n], &mask))]);
    let mut want = Vec::new();
    for i in 0..rows {
        let logits: Vec<f64> = (0..n).map(|j| x[i * n + j] as f64 * 0.5 + mask[j] as f64).collect();
        let mx = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = logits.iter().map(|l| (l - mx).exp()).sum();
        want.extend(logits.iter().map(|l| (l - mx).exp() / s));
    }
    assert_close(&got, &want, 1e-7, 1e-5, "softmax");
}

#[test]
fn layernorm_and_rmsnorm() {
    let (rows, n) = (4, 384);
    let mut r = Rng(13);
    let x = r.vec(rows * n, -3.0, 3.0);
    let g = r.vec(n, 0.5, 1.5);
    let bta = r.vec(n, -0.5, 0.5);
    let src = format!(
        ".input %x f32[{rows}, {n}]\n.input %g f32[{n}]\n.input %b f32[{n}]\n.output y f32[{rows}, {n}]\n.output z f32[{rows}, {n}]\n\
         ALLOC %t: f32[{rows}, {n}]\nLAYERNORM %t, %x, gamma=%g, beta=%b, eps=1e-12\nSTORE y, %t\n\
         RMSNORM %t, %x, gamma=%g, eps=1e-6\nSTORE z, %t\nFREE %t\n"
    );
    let p = build(&src);
    let out =
        run(&p, &[("x", f32s(&[rows, n], &x)), ("g", f32s(&[n], &g)), ("b", f32s(&[n], &bta))]).unwrap();
    let (mut ln, mut rms) = (Vec::new(), Vec::new());
    for i in 0..rows {
        let row: Vec<f64> = x[i * n..(i + 1) * n].iter().map(|&v| v as f64).collect();
        let mean = row.iter().sum::<f64>() / n as f64;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
        let ms = row.iter().map(|v| v * v).sum::<f64>() / n as f64;
        for j in 0..n {
            ln.push((row[j] - mean) / (var + 1e-12).sqrt() * g[j] as f64 + bta[j] as f64);
            rms.push(row[j] / (ms + 1e-6).sqrt() * g[j] as f64);
        }
    }
    assert_close(&out["y"].to_f32().unwrap(), &ln, 1e-5, 1e-5, "layernorm");
    assert_close(&out["z"].to_f32().unwrap(), &rms, 1e-5, 1e-5, "rmsnorm");
}

#[test]
fn reductions_over_each_axis() {
    let (a, b, c) = (3, 500, 4);
    let mut r = Rng(17);
    let x = r.vec(a * b * c, -1.0, 1.0);
    let src = format!(
        ".input %x f32[{a}, {b}, {c}]\n.output s f32[{a}, {c}]\n.output m f32[{a}, 1, {c}]\n.output x f32[{a}, {b}]\n\
         ALLOC %s: f32[{a}, {c}]\nALLOC %m: f32[{a}, 1, {c}]\nALLOC %mx: f32[{a}, {b}]\n\
         REDUCE_SUM %s, %x, 1\nREDUCE_MEAN %m, %x, 1\nREDUCE_MAX %mx, %x, -1\nSTORE s, %s\nSTORE m, %m\nSTORE x, %mx\nFREE %s\nFREE %m\nFREE %mx\n"
    );
    let p = build(&src);
    let out = run(&p, &[("x", f32s(&[a, b, c], &x))]).unwrap();
    let at = |i: usize, j: usize, k: usize| x[(i * b + j) * c + k] as f64;
    let mut sums = Vec::new();
    let mut means = Vec::new();
    for i in 0..a {
        for k in 0..c {
            let s: f64 = (0..b).map(|j| at(i, j, k)).sum();
            sums.push(s);
            means.push(s / b as f64);
        }
    }
    let maxes: Vec<f64> =
        (0..a * b).map(|ij| (0..c).map(|k| at(ij / b, ij % b, k)).fold(f64::MIN, f64::max)).collect();
    assert_close(&out["s"].to_f32().unwrap(), &sums, 1e-4, 1e-5, "sum");
    assert_close(&out["m"].to_f32().unwrap(), &means, 1e-6, 1e-5, "mean");
    assert_close(&out["x"].to_f32().unwrap(), &maxes, 0.0, 0.0, "max");
}

#[test]
fn data_movement_is_exact() {
    let x: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let src = ".input %x f32[2, 3, 4]\n.output t f32[4, 2, 3]\n.output s f32[2, 2, 4]\n.output c f32[2, 5, 4]\n.output r f32[6, 4]\n.output k f32[2, 3, 4]\n\
        ALLOC %t: f32[4, 2, 3]\nTRANSPOSE %t, %x, [2, 0, 1]\nSTORE t, %t\nFREE %t\n\
        ALLOC %s: f32[2, 2, 4]\nSLICE %s, %x, 1, 1\nSTORE s, %s\n\
        ALLOC %c: f32[2, 5, 4]\nCONCAT %c, %x, %s, 1\nSTORE c, %c\nFREE %c\nFREE %s\n\
        ALLOC %r: f32[6, 4]\nRESHAPE %r, %x\nSTORE r, %r\nFREE %r\n\
        ALLOC %k: f32[2, 3, 4]\nCOPY %k, %x\nSTORE k, %k\nFREE %k\n";
    let out = run(&build(src), &[("x", f32s(&[2, 3, 4], &x))]).unwrap();
    let at = |i: usize, j: usize, k: usize| x[(i * 3 + j) * 4 + k];
    let t: Vec<f32> = (0..24).map(|o| at(o / 3 % 2, o % 3, o / 6)).collect();
    assert_eq!(out["t"].to_f32().unwrap(), t);
    let s: Vec<f32> = (0..16).map(|o| at(o / 8, 1 + o / 4 % 2, o % 4)).collect();
    assert_eq!(out["s"].to_f32().unwrap(), s);
    let mut c = Vec::new();
    for i in 0..2 {
        c.extend_from_slice(&x[i * 12..(i + 1) * 12]);
        c.extend_from_slice(&s[i * 8..(i + 1) * 8]);
    }
    assert_eq!(out["c"].to_f32().unwrap(), c);
    assert_eq!(out["r"].to_f32().unwrap(), x);
    assert_eq!(out["k"].to_f32().unwrap(), x);
}

#[test]
fn gather_fill_cast_and_constants() {
    let src = ".input %ids i32[2, 3]\n.const %table f32[4, 2] = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]\n\
        .output e f32[2, 3, 2]\n.output f i32[3]\n.output h f16[4]\n.output b f32[4]\n\
        ALLOC %e: f32[2, 3, 2]\nGATHER %e, %table, %ids\nSTORE e, %e\nFREE %e\n\
        ALLOC %f: i32[3]\nFILL %f, -2.7\nSTORE f, %f\nFREE %f\n\
        ALLOC %v: f32[4]\nFILL %v, 0.1\nALLOC %h: f16[4]\nCAST %h, %v\nSTORE h, %h\nALLOC %b: f32[4]\nCAST %b, %h\nSTORE b, %b\nFREE %v\nFREE %h\nFREE %b\n";
    let out = run(&build(src), &[("ids", i32s(&[2, 3], &[3, 0, 1, 1, 2, 3]))]).unwrap();
    assert_eq!(out["e"].to_f32().unwrap(), vec![3.0, 3.5, 0.0, 0.5, 1.0, 1.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]);
    assert_eq!(out["f"].to_i32().unwrap(), vec![-2, -2, -2], "FILL truncates toward zero for i32");
    let h = out["h"].to_f32().unwrap();
    assert_eq!(h[0], half::f16::from_f32(0.1).to_f32(), "f32 -> f16 rounds to nearest even");
    assert_eq!(out["b"].to_f32().unwrap(), h, "f16 -> f32 is exact");
}

#[test]
fn gather_index_out_of_range_is_a_clean_error() {
    let src = ".input %ids i32[2]\n.const %table f32[4, 2] = zeros\n.output e f32[2, 2]\nALLOC %e: f32[2, 2]\nGATHER %e, %table, %ids\nSTORE e, %e\nFREE %e\n";
    let err = run(&build(src), &[("ids", i32s(&[2], &[1, 4]))]).unwrap_err();
    assert_eq!(
        err,
        "instruction 1 (line 5, GATHER): index 4 at position 1 of `ids` is outside the table's 4 rows"
    );
}

/// The first T rows of a fixed table (BERT's position embeddings): the verifier accepts the
/// symbolic length, and the run checks T against the table's rows.
#[test]
fn slice_of_a_symbolic_prefix_is_checked_at_run_time() {
    let src = ".input %x f32[T]\n.const %table f32[4, 2] = [0, 1, 2, 3, 4, 5, 6, 7]\n.output e f32[T, 2]\n\
        ALLOC %e: f32[T, 2]\nSLICE %e, %table, 0, 1\nSTORE e, %e\nFREE %e\n";
    let p = build(src);
    let out = run(&p, &[("x", f32s(&[3], &[0.0; 3]))]).unwrap();
    assert_eq!(out["e"].to_f32().unwrap(), vec![2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    let out = run(&p, &[("x", f32s(&[0], &[]))]).unwrap();
    assert!(out["e"].to_f32().unwrap().is_empty());
    let err = run(&p, &[("x", f32s(&[4], &[0.0; 4]))]).unwrap_err();
    assert_eq!(err, "instruction 1 (line 5, SLICE): slice 1..5 is outside axis 0 of size 4");
}

#[test]
fn rand_is_reproducible_and_distributed() {
    let src = ".output u f32[100000]\n.output n f32[100000]\nALLOC %u: f32[100000]\nRAND %u, 42\nSTORE u, %u\nRAND %u, 42, dist=normal\nSTORE n, %u\nFREE %u\n";
    let p = build(src);
    let a = run(&p, &[]).unwrap();
    let b = run(&p, &[]).unwrap();
    assert_eq!(a, b, "the same bits every run");
    let u = a["u"].to_f32().unwrap();
    assert!(u.iter().all(|&v| (0.0..1.0).contains(&v)));
    let mean = u.iter().map(|&v| v as f64).sum::<f64>() / u.len() as f64;
    assert!((mean - 0.5).abs() < 0.01, "uniform mean {mean}");
    let n = a["n"].to_f32().unwrap();
    let mean = n.iter().map(|&v| v as f64).sum::<f64>() / n.len() as f64;
    let var = n.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n.len() as f64;
    assert!(mean.abs() < 0.02 && (var - 1.0).abs() < 0.03, "normal mean {mean} variance {var}");
}

#[test]
fn loop_with_registers_and_indexed_load() {
    // y = x + w0 + w1 + w2 through a loop selecting each constant with LOAD index=r0.
    let src = ".input %x f32[2]\n.output y f32[2]\n\
        .const %w0 f32[2] = [1.0, 10.0]\n.const %w1 f32[2] = [2.0, 20.0]\n.const %w2 f32[2] = [3.0, 30.0]\n\
        ALLOC %acc: f32[2]\nALLOC %w: f32[2]\nCOPY %acc, %x\nISET r0, 0\nISET r1, 3\n\
        loop:\nLOAD %w, %w0, index=r0, count=3\nADD %acc, %acc, %w\nIADDI r0, r0, 1\nILT r2, r0, r1\nJNZ r2, loop\n\
        STORE y, %acc\nFREE %w\nFREE %acc\nHALT\n";
    assert_eq!(run_y(src, &[("x", f32s(&[2], &[0.5, 0.25]))]), vec![6.5, 60.25]);
}

#[test]
fn budgets_end_runs_cleanly() {
    let spin = ".output y f32[1]\nALLOC %t: f32[1]\nFILL %t, 1.0\nISET r0, 1\nspin:\nJNZ r0, spin\nSTORE y, %t\nFREE %t\n";
    let p = build(spin);
    let err =
        run_with(&p, &[], adeadvm::vm::VmConfig { max_steps: Some(1000), ..Default::default() }).unwrap_err();
    assert_eq!(err, "the step budget of 1000 instructions was used up; the program may loop forever (raise --max-steps if not)");
    let big = ".output y f32[1024]\nALLOC %t: f32[1024, 1024]\nALLOC %s: f32[1024]\nFILL %t, 1.0\nREDUCE_SUM %s, %t, 0\nSTORE y, %s\nFREE %t\nFREE %s\n";
    let err =
        run_with(&build(big), &[], adeadvm::vm::VmConfig { max_memory: Some(1 << 20), ..Default::default() })
            .unwrap_err();
    assert!(err.starts_with("this run needs "), "{err}");
    assert!(err.contains("more than the memory budget of 1048576 bytes"), "{err}");
}

#[test]
fn input_binding_errors_as_users_see_them() {
    let p = build(".input %x f32[B, 4]\n.input %m f32[B, 4]\n.output y f32[B, 4]\nALLOC %t: f32[B, 4]\nADD %t, %x, %m\nSTORE y, %t\nFREE %t\n");
    let x = f32s(&[2, 4], &[0.0; 8]);
    let err = |inputs: &[(&str, adeadvm::vm::HostTensor)]| run(&p, inputs).unwrap_err();
    assert_eq!(err(&[("x", x.clone())]), "missing input m: the program declares it as f32[B, 4]");
    assert_eq!(err(&[("q", x.clone())]), "unknown input q (the program's inputs: x, m)");
    assert_eq!(err(&[("x", i32s(&[2, 4], &[0; 8]))]), "input x is declared f32 but was given i32 data");
    assert_eq!(
        err(&[("x", f32s(&[8], &[0.0; 8])), ("m", x.clone())]),
        "input x is declared f32[B, 4] (rank 2) but was given shape [8] (rank 1)"
    );
    assert_eq!(
        err(&[("x", f32s(&[4, 2], &[0.0; 8])), ("m", x.clone())]),
        "input x is declared f32[B, 4] but was given shape [4, 2]: axis 1 must be 4"
    );
    assert_eq!(
        err(&[("x", x.clone()), ("m", f32s(&[1, 4], &[0.0; 4]))]),
        "input m has B = 1 (axis 0), but input x already set B = 2"
    );
}

#[test]
fn symbolic_dims_take_sizes_from_inputs() {
    let p = build(".input %x f32[B, T]\n.output y f32[B, T]\nALLOC %t: f32[B, T]\nMUL %t, %x, 2.0\nSTORE y, %t\nFREE %t\n");
    for (b, t) in [(1, 1), (2, 3), (5, 7)] {
        let x: Vec<f32> = (0..b * t).map(|i| i as f32).collect();
        let out = run(&p, &[("x", f32s(&[b, t], &x))]).unwrap();
        assert_eq!(out["y"].shape, vec![b, t]);
        assert_eq!(out["y"].to_f32().unwrap(), x.iter().map(|v| v * 2.0).collect::<Vec<_>>());
    }
}

#[test]
fn f16_and_bf16_compute_in_f32_and_round() {
    let src = ".input %x f32[3]\n.output y bf16[3]\nALLOC %h: bf16[3]\nALLOC %t: bf16[3]\nCAST %h, %x\nADD %t, %h, %h\nSTORE y, %t\nFREE %h\nFREE %t\n";
    let x = [1.0f32, 2.71, -2.5e-3];
    let out = run(&build(src), &[("x", f32s(&[3], &x))]).unwrap();
    let want: Vec<f32> = x
        .iter()
        .map(|&v| {
            let h = half::bf16::from_f32(v).to_f32();
            half::bf16::from_f32(h + h).to_f32()
        })
        .collect();
    assert_eq!(out["y"].to_f32().unwrap(), want);
}

/// TRANSPOSE's CPU walk (which copies trailing axes the permutation keeps as whole blocks)
/// against index arithmetic written out here: every permutation of ranks 1 to 4, over shapes
/// with extents 1 to 3 (0 too) on each axis.
#[test]
fn transpose_matches_index_arithmetic_for_every_permutation() {
    fn perms(r: usize) -> Vec<Vec<u8>> {
        if r == 0 {
            return vec![vec![]];
        }
        let mut all = Vec::new();
        for p in perms(r - 1) {
            for at in 0..=p.len() {
                let mut q = p.clone();
                q.insert(at, (r - 1) as u8);
                all.push(q);
            }
        }
        all
    }
    let mut checked = 0;
    for rank in 1..=4usize {
        for code in 0..4usize.pow(rank as u32) {
            let shape: Vec<usize> =
                (0..rank).map(|i| [2, 3, 1, 0][code / 4usize.pow(i as u32) % 4]).collect();
            let n: usize = shape.iter().product();
            let x: Vec<i32> = (0..n as i32).map(|v| v * 7 + 1).collect();
            for perm in perms(rank) {
                let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p as usize]).collect();
                let mut want = vec![0; n];
                for (o, w) in want.iter_mut().enumerate() {
                    // Output multi-index, then the source index it names (src axis perm[i]).
                    let mut rest = o;
                    let mut out_idx = vec![0; rank];
                    for ax in (0..rank).rev() {
                        out_idx[ax] = rest % out_shape[ax];
                        rest /= out_shape[ax];
                    }
                    let mut src_idx = vec![0; rank];
                    for ax in 0..rank {
                        src_idx[perm[ax] as usize] = out_idx[ax];
                    }
                    *w = x[src_idx.iter().zip(&shape).fold(0, |acc, (&i, &d)| acc * d + i)];
                }
                let mut got = vec![-1; n];
                adeadvm::exec::cpu::reference::transpose(&x, &shape, &perm, &mut got);
                assert_eq!(got, want, "shape {shape:?} perm {perm:?}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 4 + 16 * 2 + 64 * 6 + 256 * 24);
}

/// docs/ISA.md's rule on in-place operands: the destination may be one of the sources in every
/// instruction, and the result is what a fresh destination would hold (each instruction reads
/// its sources whole before its result is visible). Row kernels and MATMUL read elements after
/// writing others, so an executor must copy an aliased source aside; checked on the CPU and,
/// where there is one, on a Vulkan device.
#[test]
fn a_destination_may_be_one_of_the_sources() {
    use adeadvm::vm::{Backend, VmConfig};
    let x = [1.0f32, 2.0, 3.0, 4.0];
    // (instruction in place, the same into a fresh %b, expected y where it is plain to write)
    let cases: [(&str, &str, Option<[f32; 4]>); 5] = [
        ("ADD %a, %a, %a", "ADD %b, %a, %a", Some([2.0, 4.0, 6.0, 8.0])),
        // [[1, 2], [3, 4]] squared: [[7, 10], [15, 22]].
        ("MATMUL %a, %a, %a", "MATMUL %b, %a, %a", Some([7.0, 10.0, 15.0, 22.0])),
        ("TRANSPOSE %a, %a, [1, 0]", "TRANSPOSE %b, %a, [1, 0]", Some([1.0, 3.0, 2.0, 4.0])),
        ("SOFTMAX %a, %a", "SOFTMAX %b, %a", None),
        // a @ a^T: [[5, 11], [11, 25]].
        ("MATMUL %a, %a, %a, tb", "MATMUL %b, %a, %a, tb", Some([5.0, 11.0, 11.0, 25.0])),
    ];
    let mut configs = vec![("cpu", VmConfig { backend: Backend::Cpu, ..VmConfig::default() })];
    if common::vk::exec().is_some() {
        configs.push(("vulkan", VmConfig { backend: Backend::Vulkan, ..VmConfig::default() }));
    }
    for (in_place, fresh, expected) in cases {
        let program = |insn: &str, dst: &str| {
            format!(
                ".input %x f32[2, 2]\n.output y f32[2, 2]\nALLOC %a: f32[2, 2]\nALLOC %b: f32[2, 2]\n\
                 COPY %a, %x\nCOPY %b, %x\n{insn}\nSTORE y, {dst}\nFREE %a\nFREE %b\n"
            )
        };
        let a = build(&program(in_place, "%a"));
        let b = build(&program(fresh, "%b"));
        for (name, config) in &configs {
            let run = |p| run_with(p, &[("x", f32s(&[2, 2], &x))], config.clone()).unwrap()["y"].clone();
            let (got, want) = (run(&a), run(&b));
            assert_eq!(got.bytes(), want.bytes(), "{in_place} on {name}");
            if let Some(e) = expected {
                assert_eq!(got.to_f32().unwrap(), e, "{in_place} on {name}");
            }
        }
    }
}
