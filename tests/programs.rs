//! The example programs in `programs/`: each one assembles from its file, survives the binary
//! round trip, verifies, runs on the CPU VM with the example inputs in `programs/data/`, and its
//! output matches an independent float64 evaluation of the function its header comment
//! describes. The reference reads the weights out of the assembled program's constant table and
//! does the math itself (plain f64 loops, `erf_f64`/`erfc_f64` for gelu); it calls no VM or
//! strict-numerics code.
//!
//! Each program is also run twice (the strict tier promises identical bits) and at other sizes
//! of its symbolic dimensions. The strict numerics make every output row a function of its own
//! input row only (dot products are one sequential chain per output element; layernorm and
//! softmax work per row), so outputs at another batch size are compared with the original run
//! bit for bit, row by row.
//!
//! **Tolerance.** The reference is exact to f64 precision; the VM computes in f32. Its error
//! is dominated by the K-term dot products, one rounding (2^-24 relative) per add/mul, which
//! accumulate like a random walk: about sqrt(K) * 2^-24 * (the size of the terms), i.e. 1e-6
//! for K = 1024 with terms of order 1; the strict transcendentals (exp, erf, rsqrt, division)
//! are within a few ulps. So every program is held to `max |vm - ref| <= 1e-5 * max |ref|`
//! (plus the same 1e-5 absolute for the attention and loop outputs, whose entries are of order
//! 1): 8 to 90 times the errors actually seen (1e-7 to 1.2e-6 of the scale; printed with
//! `--nocapture`), while any semantic slip (a wrong scale immediate, a lost bias of 0.01, a
//! mixed-up head permutation, a softmax scale of 1/16 instead of 1/4) moves the output by 1e-3 or
//! more of its scale. The inputs are the committed example data, so the margin is fixed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use adeadvm::asm::{assemble, AsmOptions};
use adeadvm::format::{ConstData, Program, TensorKind};
use adeadvm::isa::{DType, Dim};
use adeadvm::numerics::accuracy::{erf_f64, erfc_f64};
use adeadvm::verify::{verify, VerifiedProgram};
use adeadvm::vm::{HostTensor, Vm, VmConfig};

/// The relative tolerance explained in the module comment.
const TOL: f64 = 1e-5;

fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs")
}

/// Assembles `programs/<file>` (relative paths against `programs/`), round-trips it through
/// the binary format, and verifies it.
fn build(file: &str, defines: &[(&str, &str)]) -> Arc<VerifiedProgram> {
    let dir = programs_dir();
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let options = AsmOptions {
        defines: defines.iter().map(|&(k, v)| (k.to_string(), v.to_string())).collect(),
        base_dir: dir,
    };
    let program = assemble(&text, &path.display().to_string(), &options).unwrap_or_else(|e| panic!("{e}"));
    let bytes = program.to_bytes();
    let reloaded = Program::from_bytes(bytes.clone()).unwrap_or_else(|e| panic!("{file}: reload: {e}"));
    assert_eq!(reloaded.to_bytes(), bytes, "{file}: the binary round trip changes the bytes");
    Arc::new(verify(reloaded).unwrap_or_else(|e| panic!("{file}: verify: {e}")))
}

/// Reads `programs/data/<file>` as f32.
fn data(file: &str) -> HostTensor {
    let path = programs_dir().join("data").join(file);
    adeadvm::npy::read(&path, Some(DType::F32)).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a program on a fresh VM and returns its output `y`.
fn try_run(program: &Arc<VerifiedProgram>, inputs: &[(&str, &HostTensor)]) -> Result<HostTensor, String> {
    let mut vm = Vm::new(program.clone(), VmConfig::default()).map_err(|e| e.to_string())?;
    for &(name, t) in inputs {
        vm.set_input(name, t.clone()).map_err(|e| e.to_string())?;
    }
    vm.run().map_err(|e| e.to_string())?;
    Ok(vm.output("y").expect("output y").clone())
}

/// Runs twice on fresh VMs, asserts the two outputs are bit-identical, and returns one.
fn run_twice(program: &Arc<VerifiedProgram>, inputs: &[(&str, &HostTensor)], what: &str) -> HostTensor {
    let first = try_run(program, inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    let second = try_run(program, inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(first == second, "{what}: two runs differ (strict tier must be bit-identical)");
    first
}

/// The values of constant `%name` as f64: `Bytes` constants read from the data section,
/// `Splat(bits)` constants repeated to the declared shape.
fn weight(program: &Program, name: &str) -> Vec<f64> {
    let decl = program
        .tensors
        .iter()
        .find(|t| t.name == name || t.name.strip_prefix('%') == Some(name))
        .unwrap_or_else(|| panic!("no tensor {name} in {:?}", program.tensors.iter().map(|t| &t.name)));
    assert_eq!(decl.dtype, DType::F32, "{name}: dtype");
    let count: usize = decl
        .shape
        .iter()
        .map(|d| match d {
            Dim::Const(n) => *n as usize,
            Dim::Sym(_) => panic!("{name}: a constant has a symbolic dimension"),
        })
        .product();
    let TensorKind::Const(c) = decl.kind else { panic!("{name} is not a constant") };
    match c {
        ConstData::Splat(bits) => vec![f32::from_bits(bits) as f64; count],
        ConstData::Bytes { .. } => {
            let bytes = program.const_bytes(&c).expect("constant bytes in the data section");
            assert_eq!(bytes.len(), 4 * count, "{name}: byte count");
            bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64).collect()
        }
        ConstData::Blocks { format, .. } => panic!("{name}: the example programs keep no {format} constants"),
    }
}

/// An f32 tensor from the given rows of `t` (viewed as [rows, row_len]), in that order.
fn pick_rows(t: &HostTensor, rows: &[usize], shape: Vec<usize>) -> HostTensor {
    let v = t.to_f32().unwrap();
    let row = t.shape[1..].iter().product::<usize>();
    let out: Vec<f32> = rows.iter().flat_map(|&r| v[r * row..(r + 1) * row].iter().copied()).collect();
    HostTensor::from_f32(shape, &out).unwrap()
}

/// Asserts that row `i` of `got` is bit-identical to row `rows[i]` of `base` (rows of `row` f32s).
fn assert_rows_bitwise(got: &HostTensor, base: &HostTensor, rows: &[usize], row: usize, what: &str) {
    let g = got.to_f32().unwrap();
    let b = base.to_f32().unwrap();
    assert_eq!(g.len(), rows.len() * row, "{what}: output size");
    for (i, &r) in rows.iter().enumerate() {
        let gi = g[i * row..(i + 1) * row].iter().map(|x| x.to_bits());
        let bi = b[r * row..(r + 1) * row].iter().map(|x| x.to_bits());
        assert!(gi.eq(bi), "{what}: output row {i} differs from row {r} of the reference batch");
    }
}

/// Asserts `max |got - want| <= rel * max |want| + abs` and returns the measured max error
/// relative to the scale.
fn assert_matches(got: &HostTensor, want: &[f64], rel: f64, abs: f64, what: &str) -> f64 {
    let got = got.to_f32().unwrap();
    assert_eq!(got.len(), want.len(), "{what}: element count");
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    assert!(scale > 0.0 && scale.is_finite(), "{what}: degenerate reference (scale {scale})");
    let (mut worst, mut at) = (0.0f64, 0);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs();
        assert!(!err.is_nan(), "{what}: element {i}: got {g}, want {w}");
        if err > worst {
            (worst, at) = (err, i);
        }
    }
    println!(
        "{what}: max |vm - ref| = {worst:.3e} at {at} (output scale {scale:.3}, relative {:.2e})",
        worst / scale
    );
    assert!(
        worst <= rel * scale + abs,
        "{what}: element {at}: got {}, want {} (error {worst:e}, allowed {:e})",
        got[at],
        want[at],
        rel * scale + abs
    );
    worst / scale
}

// ---- float64 building blocks -------------------------------------------------------------

/// `a [m, k] @ b [k, n]`, row-major.
fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    assert_eq!((a.len(), b.len()), (m * k, k * n));
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = a[i * k + p];
            for j in 0..n {
                out[i * n + j] += x * b[p * n + j];
            }
        }
    }
    out
}

/// Adds `bias [n]` to every row of `x [_, n]`.
fn add_rows(x: &mut [f64], bias: &[f64]) {
    for row in x.chunks_exact_mut(bias.len()) {
        row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
    }
}

fn scale(x: &mut [f64], s: f64) {
    x.iter_mut().for_each(|v| *v *= s);
}

fn relu(x: &mut [f64]) {
    x.iter_mut().for_each(|v| *v = v.max(0.0));
}

/// gelu, erf form: `x/2 * (1 + erf(x/sqrt 2))`, written with erfc below 0 so that the f64
/// reference keeps its relative accuracy in the negative tail.
fn gelu(x: f64) -> f64 {
    let t = x * std::f64::consts::FRAC_1_SQRT_2;
    if x >= 0.0 {
        0.5 * x * (1.0 + erf_f64(t))
    } else {
        0.5 * x * erfc_f64(-t)
    }
}

fn f64s(t: &HostTensor) -> Vec<f64> {
    t.to_f32().unwrap().into_iter().map(f64::from).collect()
}

// ---- mlp.s -------------------------------------------------------------------------------

/// h = relu((x / 28) @ w1 + b1);  y = (h / sqrt(128)) @ w2 + b2.
fn mlp_reference(p: &Program, x: &HostTensor) -> Vec<f64> {
    let b = x.shape[0];
    let mut xs = f64s(x);
    scale(&mut xs, 1.0 / 28.0);
    let mut h = matmul(&xs, &weight(p, "w1"), b, 784, 128);
    add_rows(&mut h, &weight(p, "b1"));
    relu(&mut h);
    scale(&mut h, 1.0 / 128f64.sqrt());
    let mut y = matmul(&h, &weight(p, "w2"), b, 128, 10);
    add_rows(&mut y, &weight(p, "b2"));
    y
}

#[test]
fn mlp_matches_f64_reference() {
    let prog = build("mlp.s", &[]);
    let p = prog.program();
    let x = data("mlp_x.npy");
    assert_eq!(x.shape, [4, 784]);
    let y = run_twice(&prog, &[("x", &x)], "mlp B=4");
    assert_eq!(y.shape, [4, 10]);
    assert_matches(&y, &mlp_reference(p, &x), TOL, 0.0, "mlp B=4");

    // Other batch sizes: B = 1 (row 2) and B = 7 (rows tiled and permuted).
    for rows in [vec![2], vec![3, 0, 1, 2, 3, 1, 0]] {
        let xb = pick_rows(&x, &rows, vec![rows.len(), 784]);
        let what = format!("mlp B={}", rows.len());
        let yb = run_twice(&prog, &[("x", &xb)], &what);
        assert_eq!(yb.shape, [rows.len(), 10]);
        assert_matches(&yb, &mlp_reference(p, &xb), TOL, 0.0, &what);
        assert_rows_bitwise(&yb, &y, &rows, 10, &what);
    }
}

// ---- attention.s -------------------------------------------------------------------------

/// Multi-head self-attention, D = 64, H = 4 heads of HD = 16, following the header comment:
/// the projections of x/8, per-head softmax(q k^T / 4 + mask), heads merged, (o/8) @ wo.
fn attention_reference(p: &Program, x: &HostTensor, mask: &HostTensor) -> Vec<f64> {
    const D: usize = 64;
    const H: usize = 4;
    const HD: usize = 16;
    let (b, t) = (x.shape[0], x.shape[1]);
    assert_eq!(mask.shape, [t, t]);
    let mask = f64s(mask);
    let mut xs = f64s(x);
    scale(&mut xs, 1.0 / 8.0);
    let q = matmul(&xs, &weight(p, "wq"), b * t, D, D);
    let k = matmul(&xs, &weight(p, "wk"), b * t, D, D);
    let v = matmul(&xs, &weight(p, "wv"), b * t, D, D);
    // Head h of token (bb, i) is columns h*HD .. (h+1)*HD of row bb*t + i.
    let at = |m: &[f64], bb: usize, i: usize, h: usize, d: usize| m[(bb * t + i) * D + h * HD + d];
    let mut o = vec![0.0; b * t * D]; // already merged: [B, T, H*HD]
    for bb in 0..b {
        for h in 0..H {
            for i in 0..t {
                let logits: Vec<f64> = (0..t)
                    .map(|j| {
                        let s: f64 = (0..HD).map(|d| at(&q, bb, i, h, d) * at(&k, bb, j, h, d)).sum();
                        s / (HD as f64).sqrt() + mask[i * t + j]
                    })
                    .collect();
                let m = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = logits.iter().map(|l| (l - m).exp()).collect();
                let sum: f64 = e.iter().sum();
                for d in 0..HD {
                    let acc: f64 = (0..t).map(|j| e[j] / sum * at(&v, bb, j, h, d)).sum();
                    o[(bb * t + i) * D + h * HD + d] = acc;
                }
            }
        }
    }
    scale(&mut o, 1.0 / 8.0);
    matmul(&o, &weight(p, "wo"), b * t, D, D)
}

#[test]
fn attention_matches_f64_reference() {
    let prog = build("attention.s", &[]);
    let p = prog.program();
    let x = data("attention_x.npy");
    let mask = data("attention_mask.npy");
    assert_eq!((x.shape.as_slice(), mask.shape.as_slice()), (&[2, 8, 64][..], &[8, 8][..]));
    let y = run_twice(&prog, &[("x", &x), ("mask", &mask)], "attention B=2 T=8");
    assert_eq!(y.shape, [2, 8, 64]);
    assert_matches(&y, &attention_reference(p, &x, &mask), TOL, TOL, "attention B=2 T=8");

    // B = 3 (batches tiled): each batch's output is bit-identical to the original's.
    let rows = [1, 0, 1];
    let x3 = pick_rows(&x, &rows, vec![3, 8, 64]);
    let y3 = run_twice(&prog, &[("x", &x3), ("mask", &mask)], "attention B=3 T=8");
    assert_matches(&y3, &attention_reference(p, &x3, &mask), TOL, TOL, "attention B=3 T=8");
    assert_rows_bitwise(&y3, &y, &rows, 8 * 64, "attention B=3 T=8");

    // T = 5: the first 5 tokens, with the top-left 5x5 of the causal mask.
    let xv = x.to_f32().unwrap();
    let x5: Vec<f32> = (0..2).flat_map(|b| xv[b * 512..b * 512 + 5 * 64].iter().copied()).collect();
    let x5 = HostTensor::from_f32(vec![2, 5, 64], &x5).unwrap();
    let mv = mask.to_f32().unwrap();
    let m5: Vec<f32> = (0..5).flat_map(|i| mv[i * 8..i * 8 + 5].iter().copied()).collect();
    let m5 = HostTensor::from_f32(vec![5, 5], &m5).unwrap();
    let y5 = run_twice(&prog, &[("x", &x5), ("mask", &m5)], "attention B=2 T=5");
    assert_eq!(y5.shape, [2, 5, 64]);
    assert_matches(&y5, &attention_reference(p, &x5, &m5), TOL, TOL, "attention B=2 T=5");

    // An all-zero mask (no masking) and a mask of -inf (the header allows either): T = 8.
    let zeros = HostTensor::from_f32(vec![8, 8], &[0.0; 64]).unwrap();
    let y0 = run_twice(&prog, &[("x", &x), ("mask", &zeros)], "attention unmasked");
    assert_matches(&y0, &attention_reference(p, &x, &zeros), TOL, TOL, "attention unmasked");
    let inf: Vec<f32> = mv.iter().map(|&m| if m < 0.0 { f32::NEG_INFINITY } else { 0.0 }).collect();
    let inf = HostTensor::from_f32(vec![8, 8], &inf).unwrap();
    let yi = run_twice(&prog, &[("x", &x), ("mask", &inf)], "attention -inf mask");
    assert_matches(&yi, &attention_reference(p, &x, &inf), TOL, TOL, "attention -inf mask");
}

// ---- ffn.s -------------------------------------------------------------------------------

/// n = layernorm(x) * gamma + beta (eps 1e-5);  h = gelu((n @ w1) / 16 + b1);
/// y = x + (h @ w2) / 32.
fn ffn_reference(p: &Program, x: &HostTensor) -> Vec<f64> {
    const D: usize = 256;
    const FF: usize = 1024;
    let n_rows = x.shape[0];
    let x = f64s(x);
    let (gamma, beta) = (weight(p, "gamma"), weight(p, "beta"));
    let mut n = Vec::with_capacity(x.len());
    for row in x.chunks_exact(D) {
        let mu = row.iter().sum::<f64>() / D as f64;
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / D as f64;
        let rs = 1.0 / (var + 1e-5).sqrt();
        n.extend(row.iter().enumerate().map(|(i, v)| (v - mu) * rs * gamma[i] + beta[i]));
    }
    let mut h = matmul(&n, &weight(p, "w1"), n_rows, D, FF);
    scale(&mut h, 1.0 / (D as f64).sqrt());
    add_rows(&mut h, &weight(p, "b1"));
    h.iter_mut().for_each(|v| *v = gelu(*v));
    let mut y = matmul(&h, &weight(p, "w2"), n_rows, FF, D);
    scale(&mut y, 1.0 / (FF as f64).sqrt());
    y.iter_mut().zip(&x).for_each(|(y, x)| *y += x);
    y
}

#[test]
fn ffn_matches_f64_reference() {
    let prog = build("ffn.s", &[]);
    let p = prog.program();
    let x = data("ffn_x.npy");
    assert_eq!(x.shape, [16, 256]);
    let y = run_twice(&prog, &[("x", &x)], "ffn N=16");
    assert_eq!(y.shape, [16, 256]);
    assert_matches(&y, &ffn_reference(p, &x), TOL, 0.0, "ffn N=16");
    // The residual dominates y; check the block's own contribution y - x on its own scale too.
    let (yv, xv) = (f64s(&y), f64s(&x));
    let delta: Vec<f32> = yv.iter().zip(&xv).map(|(y, x)| (y - x) as f32).collect();
    let delta = HostTensor::from_f32(vec![16, 256], &delta).unwrap();
    let want: Vec<f64> = ffn_reference(p, &x).iter().zip(&xv).map(|(y, x)| y - x).collect();
    assert_matches(&delta, &want, TOL, 0.0, "ffn N=16, y - x");

    for rows in [vec![5], vec![15, 0, 7]] {
        let xb = pick_rows(&x, &rows, vec![rows.len(), 256]);
        let what = format!("ffn N={}", rows.len());
        let yb = run_twice(&prog, &[("x", &xb)], &what);
        assert_matches(&yb, &ffn_reference(p, &xb), TOL, 0.0, &what);
        assert_rows_bitwise(&yb, &y, &rows, 256, &what);
    }
}

// ---- loop.s ------------------------------------------------------------------------------

/// h_0 = x;  h_{l+1} = relu(h_l @ w_l + b_l) / sqrt(32) for l < L;  y = h_L.
fn loop_reference(p: &Program, x: &HostTensor, layers: usize) -> Vec<f64> {
    let b = x.shape[0];
    let mut h = f64s(x);
    for l in 0..layers {
        h = matmul(&h, &weight(p, &format!("w{l}")), b, 32, 32);
        add_rows(&mut h, &weight(p, &format!("b{l}")));
        relu(&mut h);
        scale(&mut h, 1.0 / 32f64.sqrt());
    }
    h
}

#[test]
fn loop_matches_f64_reference() {
    let prog = build("loop.s", &[]);
    let p = prog.program();
    // The biases are fill(0.0${i}): 0.00, 0.01, 0.02, 0.03 (as f32), splat to all 32 entries.
    for l in 0..4 {
        let want = f64::from(format!("0.0{l}").parse::<f32>().unwrap());
        assert!(weight(p, &format!("b{l}")).iter().all(|&b| b == want), "b{l}");
    }
    let x = data("loop_x.npy");
    assert_eq!(x.shape, [4, 32]);
    let y = run_twice(&prog, &[("x", &x)], "loop B=4");
    assert_eq!(y.shape, [4, 32]);
    assert_matches(&y, &loop_reference(p, &x, 4), TOL, TOL, "loop B=4");

    for rows in [vec![1], vec![0, 1, 2, 3, 3, 2, 1, 0, 2]] {
        let xb = pick_rows(&x, &rows, vec![rows.len(), 32]);
        let what = format!("loop B={}", rows.len());
        let yb = run_twice(&prog, &[("x", &xb)], &what);
        assert_matches(&yb, &loop_reference(p, &xb, 4), TOL, TOL, &what);
        assert_rows_bitwise(&yb, &y, &rows, 32, &what);
    }

    // The header's `-D L=8`: eight layers, w0..w7 and b0..b7, selected by the loop counter.
    let deep = build("loop.s", &[("L", "8")]);
    let yd = run_twice(&deep, &[("x", &x)], "loop L=8");
    assert_matches(&yd, &loop_reference(deep.program(), &x, 8), TOL, TOL, "loop L=8");
}

// ---- kernel.s ----------------------------------------------------------------------------

#[test]
fn kernel_verifies_but_needs_vulkan_on_the_cpu() {
    let prog = build("kernel.s", &[]);
    assert_eq!(prog.program().kernels.len(), 1);
    let x = data("kernel_x.npy");
    assert_eq!(x.shape, [1024]);
    let err = try_run(&prog, &[("x", &x)]).expect_err("KERNEL cannot run on the CPU VM");
    assert!(err.contains("Vulkan"), "unexpected error: {err}");
    assert!(err.contains("KERNEL"), "the error should name the instruction: {err}");
}
