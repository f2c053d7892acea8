//! Shared test harness: assemble a program from text, run it, and compare against references.
#![allow(dead_code)]

pub mod cmpsel;
pub mod hostile;
pub mod llama;
pub mod skip;
pub mod vk;

use std::collections::BTreeMap;
use std::sync::Arc;

use adeadvm::asm::{assemble, AsmOptions};
use adeadvm::format::Program;
use adeadvm::verify::{verify, VerifiedProgram};
use adeadvm::vm::{HostTensor, Vm, VmConfig};

/// Assembles and verifies, panicking with the full diagnostics on failure.
pub fn build(src: &str) -> Arc<VerifiedProgram> {
    try_build(src).unwrap_or_else(|e| panic!("{e}"))
}

/// Assembles and verifies, returning the error text a user would see.
pub fn try_build(src: &str) -> Result<Arc<VerifiedProgram>, String> {
    let options = AsmOptions { defines: Vec::new(), base_dir: std::env::current_dir().unwrap() };
    let program = assemble(src, "test.s", &options).map_err(|e| e.to_string())?;
    let program = Program::from_bytes(program.to_bytes()).map_err(|e| e.to_string())?;
    Ok(Arc::new(verify(program).map_err(|e| e.to_string())?))
}

/// Runs a verified program on named inputs and returns its outputs.
pub fn run(
    program: &Arc<VerifiedProgram>,
    inputs: &[(&str, HostTensor)],
) -> Result<BTreeMap<String, HostTensor>, String> {
    run_with(program, inputs, VmConfig::default())
}

/// Like [`run`] with a VM configuration.
pub fn run_with(
    program: &Arc<VerifiedProgram>,
    inputs: &[(&str, HostTensor)],
    config: VmConfig,
) -> Result<BTreeMap<String, HostTensor>, String> {
    let mut vm = Vm::new(program.clone(), config).map_err(|e| e.to_string())?;
    for (name, t) in inputs {
        vm.set_input(name, t.clone()).map_err(|e| e.to_string())?;
    }
    vm.run().map_err(|e| e.to_string())?;
    Ok(vm.outputs().into_iter().map(|(n, t)| (n.to_string(), t.clone())).collect())
}

/// Assembles, runs, and returns the one output `y` as f32 values.
pub fn run_y(src: &str, inputs: &[(&str, HostTensor)]) -> Vec<f32> {
    let outs = run(&build(src), inputs).unwrap_or_else(|e| panic!("{e}"));
    outs["y"].to_f32().expect("float output")
}

/// A deterministic pseudo-random stream (SplitMix64) for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
}

pub fn f32s(shape: &[usize], values: &[f32]) -> HostTensor {
    HostTensor::from_f32(shape.to_vec(), values).expect("shape matches values")
}

pub fn i32s(shape: &[usize], values: &[i32]) -> HostTensor {
    HostTensor::from_i32(shape.to_vec(), values).expect("shape matches values")
}

/// Distance in ulps between an f32 result and an f64 reference rounded to f32 (denormal
/// references count as zero, as strict mode flushes them).
pub fn ulps(got: f32, want: f64) -> u64 {
    let want = want as f32;
    let want = if want != 0.0 && want.abs() < f32::MIN_POSITIVE { 0.0f32.copysign(want) } else { want };
    if got.is_nan() && want.is_nan() {
        return 0;
    }
    if got == want {
        return 0;
    }
    let ord = |x: f32| {
        let b = x.to_bits() as i64;
        if b < 0x8000_0000 {
            b
        } else {
            -(b & 0x7fff_ffff)
        }
    };
    ord(got).abs_diff(ord(want))
}

/// Asserts |got - want| <= atol + rtol * |want| element by element.
pub fn assert_close(got: &[f32], want: &[f64], atol: f64, rtol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs();
        assert!(err <= atol + rtol * w.abs(), "{what}: element {i}: got {g}, want {w} (error {err:e})");
    }
}

/// A BERT encoder's tensors (Hugging Face names) at D=8, FF=16, vocabulary 10, 16 positions
/// and `layers` layers, with distinct values.
pub fn write_tiny_bert(path: &std::path::Path, layers: usize) {
    use safetensors::tensor::TensorView;
    use safetensors::Dtype;
    let (d, ff) = (8usize, 16usize);
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("embeddings.word_embeddings.weight".into(), vec![10, d]),
        ("embeddings.position_embeddings.weight".into(), vec![16, d]),
        ("embeddings.token_type_embeddings.weight".into(), vec![2, d]),
        ("embeddings.LayerNorm.weight".into(), vec![d]),
        ("embeddings.LayerNorm.bias".into(), vec![d]),
    ];
    for l in 0..layers {
        let p = format!("encoder.layer.{l}");
        for (name, shape) in [
            ("attention.self.query.weight", vec![d, d]),
            ("attention.self.query.bias", vec![d]),
            ("attention.self.key.weight", vec![d, d]),
            ("attention.self.key.bias", vec![d]),
            ("attention.self.value.weight", vec![d, d]),
            ("attention.self.value.bias", vec![d]),
            ("attention.output.dense.weight", vec![d, d]),
            ("attention.output.dense.bias", vec![d]),
            ("attention.output.LayerNorm.weight", vec![d]),
            ("attention.output.LayerNorm.bias", vec![d]),
            ("intermediate.dense.weight", vec![ff, d]),
            ("intermediate.dense.bias", vec![ff]),
            ("output.dense.weight", vec![d, ff]),
            ("output.dense.bias", vec![d]),
            ("output.LayerNorm.weight", vec![d]),
            ("output.LayerNorm.bias", vec![d]),
        ] {
            shapes.push((format!("{p}.{name}"), shape));
        }
    }
    let data: Vec<Vec<u8>> = shapes
        .iter()
        .enumerate()
        .map(|(k, (_, s))| {
            let n: usize = s.iter().product();
            (0..n).flat_map(|i| ((k * 1000 + i) as f32 * 0.001).to_le_bytes()).collect()
        })
        .collect();
    let views: Vec<(&str, TensorView)> = shapes
        .iter()
        .zip(&data)
        .map(|((name, shape), bytes)| {
            (name.as_str(), TensorView::new(Dtype::F32, shape.clone(), bytes).unwrap())
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

/// The `-D` definitions that assemble `program` when it is programs/minilm_l6.s or
/// programs/smollm2.s: a tiny model of its structure, whose weights are written into `dir`.
/// Empty for any other program.
pub fn example_defines(program: &std::path::Path, dir: &std::path::Path) -> Vec<(String, String)> {
    match program.file_name().and_then(|f| f.to_str()) {
        Some("minilm_l6.s") => {
            minilm_tiny_defines(dir).into_iter().map(|(k, v)| (k.to_string(), v)).collect()
        }
        Some("smollm2.s") => llama::tiny_model(dir).1,
        _ => Vec::new(),
    }
}

/// programs/minilm_l6.s with a tiny model of its structure (strict tier, weights written into
/// `dir`), and a batch of `rows` sentences of 1 to `t` tokens padded to `t`: the rows a split or
/// a micro-batch cuts apart. Each row's ids come from `seed`.
pub fn minilm_padded(
    dir: &std::path::Path,
    rows: usize,
    t: usize,
    seed: u64,
) -> (adeadvm::api::Program, Vec<(&'static str, HostTensor)>) {
    let path = root().join("programs/minilm_l6.s");
    let options = adeadvm::api::LoadOptions { defines: example_defines(&path, dir), tier: None };
    let program = adeadvm::api::Program::load_with(&path, &options).unwrap();
    let mut rng = Rng(seed);
    let mut ids = vec![0i32; rows * t];
    let mut mask = vec![0i32; rows * t];
    for r in 0..rows {
        for c in 0..1 + r % t {
            ids[r * t + c] = 1 + (rng.next_u64() % 9) as i32;
            mask[r * t + c] = 1;
        }
    }
    (program, vec![("input_ids", i32s(&[rows, t], &ids)), ("attention_mask", i32s(&[rows, t], &mask))])
}

/// `program`'s output `embedding` from one session on `backend` (2 threads) over `inputs`.
pub fn embedding_of(
    program: &adeadvm::api::Program,
    backend: adeadvm::api::Backend,
    inputs: &[(&str, HostTensor)],
) -> HostTensor {
    let config = adeadvm::api::Config { backend, threads: Some(2), ..Default::default() };
    let mut s = adeadvm::api::Session::new(program, &config).unwrap();
    for (name, t) in inputs {
        s.set_input(name, t).unwrap();
    }
    s.run().unwrap();
    s.output("embedding").unwrap().clone()
}

/// A tiny model of minilm_l6.s's structure (D=8, 2 heads of 4, FF=16, 2 layers).
fn minilm_tiny_defines(dir: &std::path::Path) -> Vec<(&'static str, String)> {
    let weights = dir.join("tiny.safetensors");
    write_tiny_bert(&weights, 2);
    let mut d = vec![("WEIGHTS", weights.display().to_string())];
    for (k, v) in [
        ("D", "8"),
        ("H", "2"),
        ("HD", "4"),
        ("FF", "16"),
        ("L", "2"),
        ("VOCAB", "10"),
        ("MAXPOS", "16"),
        ("SCALE", "0.5"),
    ] {
        d.push((k, v.to_string()));
    }
    d
}

/// Values kernels get wrong first: ±0, ±inf, NaN, denormals, huge and tiny, exp's limits.
pub const SPECIALS: [f32; 12] =
    [0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-40, -1e-39, 3e38, -3e38, 1e-30, 88.7, -87.4];

/// A program of programs/, assembled (relative paths from there) and verified.
pub fn program_file(name: &str) -> Arc<VerifiedProgram> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("programs");
    let text = std::fs::read_to_string(dir.join(name)).unwrap();
    let options = AsmOptions { defines: Vec::new(), base_dir: dir };
    let p = assemble(&text, name, &options).unwrap_or_else(|e| panic!("{e}"));
    Arc::new(verify(Program::from_bytes(p.to_bytes()).unwrap()).unwrap())
}

/// An example input of programs/data.
pub fn data(name: &str) -> HostTensor {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/data").join(name);
    adeadvm::npy::read(&path, None).unwrap()
}

/// MATMUL where M, N or K is 0, with a bias and an activation (issue 34: N = 0 divided by zero
/// in the CPU epilogue), on `config`. `y = relu(a @ b + bias)` and `z = gelu(a @ b)` over
/// `[M, K] x [K, N]`, with N bound from the inputs and, in a second program, written as 0. An
/// empty product gives an empty output of shape [M, N]; K = 0 gives a product of zeros, so
/// `y = relu(bias)` and `z = gelu(0) = 0`.
pub fn check_matmul_with_an_empty_side(config: &VmConfig, what: &str) {
    let program = |n: &str| {
        build(&format!(
            ".dim M, K, N
.input %a f32[M, K]
.input %b f32[K, {n}]
.input %bias f32[{n}]
.output y f32[M, {n}]
.output z f32[M, {n}]
    ALLOC %p: f32[M, {n}]
    MATMUL %p, %a, %b, bias=%bias, act=relu
    STORE y, %p
    MATMUL %p, %a, %b, act=gelu
    STORE z, %p
    FREE %p
    HALT
"
        ))
    };
    let bound_n = program("N");
    let fixed_n = program("0");
    let bias_values = [1.0f32, -2.0, 0.5, 3.0, -0.25];
    // (M, K, N): N = 0 with and without rows and depth; M = 0; K = 0.
    for (m, k, n) in [(3, 4, 0), (0, 4, 0), (0, 0, 0), (3, 0, 0), (0, 4, 5), (3, 0, 5)] {
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 + 1.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| 0.5 - i as f32).collect();
        let inputs = [
            ("a", HostTensor::from_f32(vec![m, k], &a).unwrap()),
            ("b", HostTensor::from_f32(vec![k, n], &b).unwrap()),
            ("bias", HostTensor::from_f32(vec![n], &bias_values[..n]).unwrap()),
        ];
        let mut programs = vec![("N bound from the inputs", &bound_n)];
        if n == 0 {
            programs.push(("N written as 0", &fixed_n));
        }
        for (how, program) in programs {
            let case = format!("{what}: M = {m}, K = {k}, N = {n} ({how})");
            let outs = run_with(program, &inputs, config.clone()).unwrap_or_else(|e| panic!("{case}: {e}"));
            let (y, z) = (&outs["y"], &outs["z"]);
            assert_eq!((&y.shape, &z.shape), (&vec![m, n], &vec![m, n]), "{case}");
            let want_y: Vec<f32> = (0..m).flat_map(|_| bias_values[..n].iter().map(|v| v.max(0.0))).collect();
            assert_eq!(y.to_f32().unwrap(), want_y, "{case}: y");
            assert_eq!(z.to_f32().unwrap(), vec![0.0; m * n], "{case}: z");
        }
    }
}

/// The repository root.
pub fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The files in `dir`, sorted (temporary files of a failed write would show up here).
pub fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// erf in f64, written here rather than taken from the library under test (Abramowitz-Stegun
/// 7.1.26 is too coarse; this is the series / continued fraction): within about 1e-15 of erf.
pub fn erf64(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        // Maclaurin series: erf(a) = 2/sqrt(pi) sum (-1)^k a^(2k+1) / (k! (2k+1)).
        let (mut term, mut sum, mut k) = (a, a, 0.0f64);
        while term.abs() > 1e-18 * sum.abs() {
            k += 1.0;
            term *= -a * a / k;
            sum += term / (2.0 * k + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if a < 8.0 {
        // erfc by its continued fraction (Lentz), evaluated backwards with 60 terms.
        let mut f = 0.0f64;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (a + f);
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * (a + f))
    } else {
        1.0
    };
    r.copysign(x)
}
