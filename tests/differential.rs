//! Differential test: seeded random multi-instruction programs (chained elementwise ops, several
//! CASTs and GATHERs, broadcasting, reductions, SOFTMAX, LAYERNORM, RMSNORM, MATMUL; special
//! values; zero-size, odd and large tensors past the CPU scheduler's batching threshold) run on
//! every executor: the scalar CPU, the SIMD CPU on 1 and on 3 threads, and Vulkan (lavapipe in
//! CI). Every instruction's result is a program output, and
//!  1. every output is bit-identical across the executors (the strict tier's promise), and
//!  2. every output is within the accuracy docs/ISA.md and docs/numerics.md document for its
//!     instruction, against a float64 model written here (not the VM's code), applied to that
//!     instruction's actual f32 operands.
//!
//! With no Vulkan device the Vulkan executor is skipped (printed), unless
//! ADEADVM_REQUIRE_VULKAN=1 (CI), where a missing device fails the test.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write;

use adeadvm::exec::cpu::SimdLevel;
use adeadvm::isa::DType;
use adeadvm::vm::{Backend, HostTensor, VmConfig};
use common::vk::required;

const U: f64 = 1.0 / 16_777_216.0; // 2^-24, the unit roundoff of f32
const FLT_MIN: f64 = 1.175_494_350_822_287_5e-38;
/// The tensor ids of the row vectors `generate` declares third and fourth: gamma and beta.
const GAMMA: usize = 2;
const BETA: usize = 3;
const TINY: f64 = 1.0e-36; // absolute slack for flushed values (below ~86 FLT_MIN)

thread_local! {
    /// The opcode whose results are being checked (for the report of the worst error).
    static CURRENT: std::cell::Cell<&'static str> = const { std::cell::Cell::new("") };
}
/// The largest error seen per opcode, as a fraction of its documented bound.
static WORST: std::sync::Mutex<BTreeMap<&'static str, f64>> = std::sync::Mutex::new(BTreeMap::new());

fn report_worst() {
    let w = WORST.lock().unwrap();
    let parts: Vec<String> = w.iter().map(|(k, v)| format!("{k} {v:.3}")).collect();
    println!("largest error / documented bound so far: {}", parts.join(", "));
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
    /// Mostly moderate values; with `special`, also ±0, denormals, ±inf, NaN, huge and tiny.
    fn value(&mut self, special: bool) -> f32 {
        if special && self.below(8) == 0 {
            let s = if self.next() & 1 == 0 { 0 } else { 0x8000_0000u32 };
            let r = self.next() as u32;
            let b = match self.below(7) {
                0 => 0,
                1 => 1 + r % 0x7f_ffff,
                2 => 0x7f80_0000,
                3 => 0x7fc0_0000 | (r & 0x3f_ffff),
                4 => 0x7e00_0000 + r % 0x0180_0000,
                5 => 0x0080_0000 + r % 0x0100_0000,
                _ => r & 0x7fff_ffff,
            };
            return f32::from_bits(b | s);
        }
        ((self.unit() * 2.0 - 1.0) * 4.0f64.powf(self.unit() * 4.0 - 2.0)) as f32
    }
}

fn ftz(x: f32) -> f64 {
    if x.is_finite() && (x as f64).abs() < FLT_MIN {
        0.0f64.copysign(x as f64)
    } else {
        x as f64
    }
}

/// The f32 ulp at the value v (normal grid below FLT_MIN).
fn ulp(v: f64) -> f64 {
    let e = if v == 0.0 { -126 } else { (v.abs().log2().floor() as i32).max(-126) };
    2f64.powi(e - 23)
}

/// Whether `got` is within `abs` of the exact `want`, under the strict rules: NaN exactly when
/// the model is NaN; infinities equal; a finite value past FLT_MAX may give that infinity; a
/// result within TINY of zero may be flushed.
fn within(got: f32, want: f64, abs: f64) -> bool {
    // (Not results flushed to zero or taken to infinity, which the rules below accept.)
    if got.is_finite() && want.is_finite() && abs > 0.0 && (got != 0.0 || want.abs() >= FLT_MIN) {
        let ratio = (got as f64 - want).abs() / abs;
        CURRENT.with(|c| {
            let mut w = WORST.lock().unwrap();
            let e = w.entry(c.get()).or_insert(0.0);
            *e = e.max(ratio);
        });
    }
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.to_bits() == 0x7fc0_0000;
    }
    let g = got as f64;
    if got.is_infinite() {
        return g == want || (want.signum() == g.signum() && want.abs() + abs >= f32::MAX as f64);
    }
    if want.is_infinite() {
        return false;
    }
    (g - want).abs() <= abs * (1.0 + 1e-9) + if got == 0.0 { TINY } else { 0.0 }
}

#[derive(Clone)]
struct T {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
}

fn shape_text(s: &[usize]) -> String {
    let d: Vec<String> = s.iter().map(|d| d.to_string()).collect();
    format!("[{}]", d.join(", "))
}

/// One instruction of a generated program, with what the model needs to check it.
#[derive(Clone, Debug)]
enum Op {
    Unary(&'static str, usize),
    Binary(&'static str, usize, usize),
    Scalar(&'static str, usize, f32),
    Cast(usize),
    Gather(usize, usize),
    Matmul(usize, usize, bool),
    Softmax(usize, Option<usize>, f32),
    LayerNorm(usize, bool, f32),
    RmsNorm(usize, bool, f32),
    Reduce(&'static str, usize),
    /// EQ, LT or LE of two tensors of one dtype, broadcasting: i32 1 or 0.
    Compare(&'static str, usize, usize),
    /// SELECT cond, a, b, broadcasting all three.
    Select(usize, usize, usize),
}

struct Gen {
    text: String,
    body: String,
    tensors: Vec<T>,
    ops: Vec<(Op, usize)>, // the op and its result tensor
    inputs: Vec<(String, HostTensor)>,
    temps: Vec<String>,
    gathers: usize,
}

impl Gen {
    fn input(&mut self, g: &mut Rng, dtype: DType, shape: Vec<usize>, special: bool, ints: i32) -> usize {
        let name = format!("in{}", self.tensors.len());
        let n: usize = shape.iter().product();
        let t = match dtype {
            DType::I32 => {
                let v: Vec<i32> = (0..n).map(|_| g.below(ints as usize) as i32).collect();
                common::i32s(&shape, &v)
            }
            _ => {
                let v: Vec<f32> = (0..n).map(|_| g.value(special)).collect();
                common::f32s(&shape, &v)
            }
        };
        writeln!(self.text, ".input %{name} {dtype}{}", shape_text(&shape)).unwrap();
        self.inputs.push((name.clone(), t));
        self.tensors.push(T { name, dtype, shape });
        self.tensors.len() - 1
    }

    /// An i32 input of integers v = (2^p + k 2^(p-7)) + 2^(p-8) + d, p in 24..31, d in
    /// [-(2^(p-24) - 1), 2^(p-24) - 1]: next to a bf16 midpoint by less than an f32 half-ulp.
    fn input_midpoint_ints(&mut self, g: &mut Rng, shape: Vec<usize>) -> usize {
        let name = format!("in{}", self.tensors.len());
        let n: usize = shape.iter().product();
        let v: Vec<i32> = (0..n)
            .map(|_| {
                let p = 24 + g.below(7) as i64;
                let half_f32 = 1i64 << (p - 24);
                let d = g.below(2 * half_f32 as usize - 1) as i64 - (half_f32 - 1);
                let v = (1i64 << p) + g.below(128) as i64 * (1 << (p - 7)) + (1 << (p - 8)) + d;
                let v = i32::try_from(v).unwrap_or(i32::MAX);
                if g.below(2) == 0 {
                    v
                } else {
                    -v
                }
            })
            .collect();
        writeln!(self.text, ".input %{name} i32{}", shape_text(&shape)).unwrap();
        self.inputs.push((name.clone(), common::i32s(&shape, &v)));
        self.tensors.push(T { name, dtype: DType::I32, shape });
        self.tensors.len() - 1
    }

    /// A new temporary of this dtype and shape, stored as an output after `insn` writes it.
    fn result(&mut self, op: Op, dtype: DType, shape: Vec<usize>, insn: &str) -> usize {
        let id = self.tensors.len();
        let name = format!("t{id}");
        let st = shape_text(&shape);
        writeln!(self.text, ".output o{id} {dtype}{st}").unwrap();
        writeln!(
            self.body,
            "ALLOC %{name}: {dtype}{st}\n{}\nSTORE o{id}, %{name}",
            insn.replace("%@", &format!("%{name}"))
        )
        .unwrap();
        self.temps.push(name.clone());
        self.tensors.push(T { name, dtype, shape });
        self.ops.push((op, id));
        id
    }

    fn n(&self, i: usize) -> &str {
        &self.tensors[i].name
    }

    /// Tensor `t` (f32) in dtype `d`: itself for f32, else a CAST (checked as every CAST is).
    fn cast_to(&mut self, t: usize, d: DType) -> usize {
        if d == DType::F32 {
            return t;
        }
        let (tn, shape) = (self.n(t).to_string(), self.tensors[t].shape.clone());
        self.result(Op::Cast(t), d, shape, &format!("CAST %@, %{tn}"))
    }
}

/// Numpy broadcasting of shapes (the generator draws only ones that broadcast).
fn broadcast(shapes: &[&[usize]]) -> Vec<usize> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    (0..rank)
        .map(|k| {
            let dims = shapes.iter().filter_map(|s| (s.len() + k).checked_sub(rank).map(|i| s[i]));
            dims.fold(1, |acc, d| if d == 1 { acc } else { d })
        })
        .collect()
}

/// The offset in an operand of `shape` of element `i` of an output of `out` (numpy rules).
fn bidx(shape: &[usize], out: &[usize], i: usize) -> usize {
    let lead = out.len() - shape.len();
    let (mut rem, mut off, mut stride) = (i, 0, 1);
    for k in (0..out.len()).rev() {
        let c = rem % out[k];
        rem /= out[k];
        if k >= lead {
            let s = shape[k - lead];
            if s != 1 {
                off += c * stride;
            }
            stride *= s;
        }
    }
    off
}

/// GATHERs a program may hold: several, since a second GATHER in one batch once failed on
/// Vulkan (its status slot was bound at a misaligned offset).
const MAX_GATHERS: usize = 3;

const UNARY: [&str; 12] =
    ["NEG", "ABS", "SQRT", "RSQRT", "EXP", "LOG", "RELU", "SIGMOID", "TANH", "GELU", "SILU", "ERF"];
/// ERF's documented bound (docs/ISA.md), in ulps.
const ERF_ULPS: f64 = 2.0;
const BINARY: [&str; 6] = ["ADD", "SUB", "MUL", "DIV", "MAX", "MIN"];

/// A random program over rows [r, n]: a pool of f32 [r, n] tensors that instructions read and
/// extend; a row vector [n] for broadcasting, gamma and beta.
/// Every kind of step `generate` takes (`ERF_STEP` only when asked for by name).
const ALL_STEPS: std::ops::Range<usize> = 0..16;
/// A step that is ERF on a tensor of the pool.
const ERF_STEP: usize = 16;

fn generate(g: &mut Rng, r: usize, n: usize, steps: usize, kinds: &[usize]) -> Gen {
    let mut gen = Gen {
        text: String::new(),
        body: String::new(),
        tensors: vec![],
        ops: vec![],
        inputs: vec![],
        temps: vec![],
        gathers: 0,
    };
    let rn = vec![r, n];
    let mut pool =
        vec![gen.input(g, DType::F32, rn.clone(), true, 0), gen.input(g, DType::F32, rn.clone(), true, 0)];
    let row = gen.input(g, DType::F32, vec![n], false, 0);
    let row2 = gen.input(g, DType::F32, vec![n], false, 0);
    let col = gen.input(g, DType::F32, vec![r, 1], false, 0);
    for _ in 0..steps {
        let a = g.pick(&pool);
        let b = g.pick(&pool);
        let an = gen.n(a).to_string();
        let k = kinds[g.below(kinds.len())];
        let id = match k {
            ERF_STEP => gen.result(Op::Unary("ERF", a), DType::F32, rn.clone(), &format!("ERF %@, %{an}")),
            0..=2 => {
                let u = g.pick(&UNARY);
                gen.result(Op::Unary(u, a), DType::F32, rn.clone(), &format!("{u} %@, %{an}"))
            }
            3..=5 => {
                let op = g.pick(&BINARY);
                let b = match g.below(4) {
                    0 => row,
                    1 => col,
                    _ => b,
                };
                let bn = gen.n(b).to_string();
                gen.result(Op::Binary(op, a, b), DType::F32, rn.clone(), &format!("{op} %@, %{an}, %{bn}"))
            }
            6 => {
                let op = g.pick(&BINARY);
                let special = g.below(4) == 0;
                let s = g.value(special);
                gen.result(
                    Op::Scalar(op, a, s),
                    DType::F32,
                    rn.clone(),
                    &format!("{op} %@, %{an}, 0x{:08x}", s.to_bits()),
                )
            }
            7 => {
                // A chain of CASTs through 16-bit types and i32 (i32 -> f16 / bf16 included),
                // and back to f32. Integers big enough to round in bf16 come from scaling.
                let a = if g.below(2) == 0 {
                    let s = g.pick(&[3.0e4f32, 7.0e8, 2.0e9]);
                    gen.result(
                        Op::Scalar("MUL", a, s),
                        DType::F32,
                        rn.clone(),
                        &format!("MUL %@, %{an}, {s:e}"),
                    )
                } else {
                    a
                };
                // Or integers next to a bf16 rounding midpoint (half a bf16 ulp plus less than
                // half an f32 ulp): exactly where rounding through f32 rounds twice.
                let mut c = if g.below(2) == 0 { gen.input_midpoint_ints(g, rn.clone()) } else { a };
                for _ in 0..1 + g.below(3) {
                    let d = g.pick(&[DType::F16, DType::Bf16, DType::I32, DType::F32]);
                    let cn = gen.n(c).to_string();
                    c = gen.result(Op::Cast(c), d, rn.clone(), &format!("CAST %@, %{cn}"));
                }
                let cn = gen.n(c).to_string();
                gen.result(Op::Cast(c), DType::F32, rn.clone(), &format!("CAST %@, %{cn}"))
            }
            8 if gen.gathers < MAX_GATHERS => {
                gen.gathers += 1;
                let idx = gen.input(g, DType::I32, vec![r], false, r.max(1) as i32);
                let inn = gen.n(idx).to_string();
                gen.result(Op::Gather(a, idx), DType::F32, rn.clone(), &format!("GATHER %@, %{an}, %{inn}"))
            }
            9 if (r * n * n) <= 4_000_000 => {
                let tb = g.below(2) == 0;
                let w = gen.input(g, DType::F32, vec![n, n], false, 0);
                let wn = gen.n(w).to_string();
                let flag = if tb { ", tb" } else { "" };
                gen.result(
                    Op::Matmul(a, w, tb),
                    DType::F32,
                    rn.clone(),
                    &format!("MATMUL %@, %{an}, %{wn}{flag}"),
                )
            }
            10 => {
                let mask = if g.below(2) == 0 { Some(b) } else { None };
                let scale = g.pick(&[1.0f32, 0.125, 3.0]);
                let m = mask.map_or(String::new(), |m| format!(", mask=%{}", gen.n(m)));
                gen.result(
                    Op::Softmax(a, mask, scale),
                    DType::F32,
                    rn.clone(),
                    &format!("SOFTMAX %@, %{an}{m}, scale={scale}"),
                )
            }
            11 => {
                let affine = g.below(2) == 0;
                let eps = g.pick(&[1e-5f32, 1e-3, 0.0]);
                let gb = if affine {
                    format!(", gamma=%{}, beta=%{}", gen.n(row), gen.n(row2))
                } else {
                    String::new()
                };
                gen.result(
                    Op::LayerNorm(a, affine, eps),
                    DType::F32,
                    rn.clone(),
                    &format!("LAYERNORM %@, %{an}{gb}, eps={eps:e}"),
                )
            }
            12 => {
                let affine = g.below(2) == 0;
                let eps = g.pick(&[1e-5f32, 1e-6]);
                let gm = if affine { format!(", gamma=%{}", gen.n(row)) } else { String::new() };
                gen.result(
                    Op::RmsNorm(a, affine, eps),
                    DType::F32,
                    rn.clone(),
                    &format!("RMSNORM %@, %{an}{gm}, eps={eps:e}"),
                )
            }
            13 => {
                let op = g.pick(&["REDUCE_SUM", "REDUCE_MEAN", "REDUCE_MAX"]);
                gen.result(Op::Reduce(op, a), DType::F32, vec![r], &format!("{op} %@, %{an}, -1"))
            }
            14 => {
                // A comparison in one of the four dtypes (CASTs to it first), the other side
                // a tensor of the pool, the operand itself, a row or a column, either way round.
                let op = g.pick(&["EQ", "LT", "LE"]);
                let d = g.pick(&[DType::F32, DType::F32, DType::F16, DType::Bf16, DType::I32]);
                let other = match g.below(5) {
                    0 => row,
                    1 => col,
                    2 => a,
                    _ => b,
                };
                let (x, y) = (gen.cast_to(a, d), gen.cast_to(other, d));
                let (x, y) = if g.below(2) == 0 { (x, y) } else { (y, x) };
                let out = broadcast(&[&gen.tensors[x].shape, &gen.tensors[y].shape]);
                let (xn, yn) = (gen.n(x).to_string(), gen.n(y).to_string());
                gen.result(Op::Compare(op, x, y), DType::I32, out, &format!("{op} %@, %{xn}, %{yn}"))
            }
            _ => {
                // SELECT in one of the four dtypes: cond an i32 input of 0, 1 and 2 ([r, n], a
                // column or a row), a and b from the pool, a row or a column (an expand when
                // both are rows and cond is whole).
                let d = g.pick(&[DType::F32, DType::F32, DType::F16, DType::Bf16, DType::I32]);
                let cshape = [rn.clone(), rn.clone(), vec![r, 1], vec![n]][g.below(4)].clone();
                let cond = gen.input(g, DType::I32, cshape, false, 3);
                let side = |g: &mut Rng, t: usize| match g.below(4) {
                    0 => row,
                    1 => col,
                    2 => row2,
                    _ => t,
                };
                let (x, y) = (side(g, a), side(g, b));
                let (x, y) = (gen.cast_to(x, d), gen.cast_to(y, d));
                let out =
                    broadcast(&[&gen.tensors[cond].shape, &gen.tensors[x].shape, &gen.tensors[y].shape]);
                let (cn, xn, yn) = (gen.n(cond).to_string(), gen.n(x).to_string(), gen.n(y).to_string());
                gen.result(Op::Select(cond, x, y), d, out, &format!("SELECT %@, %{cn}, %{xn}, %{yn}"))
            }
        };
        if gen.tensors[id].shape == rn && gen.tensors[id].dtype == DType::F32 {
            pool.push(id);
        }
    }
    for t in &gen.temps {
        writeln!(gen.body, "FREE %{t}").unwrap();
    }
    gen
}

fn f32s(t: &HostTensor) -> Vec<f32> {
    t.to_f32().expect("float tensor")
}

/// The largest row count of the reduction tree's lanes: ceil(n / 256) additions per lane, then
/// 8 halving steps.
fn tree_depth(n: usize) -> f64 {
    (n.div_ceil(256) + 8) as f64
}

/// Checks each instruction's output against the f64 model and its documented bound; returns a
/// message naming the first violation.
fn check_accuracy(
    gen: &Gen,
    vals: &BTreeMap<usize, Vec<f32>>,
    ints: &BTreeMap<usize, Vec<i32>>,
) -> Result<(), String> {
    let shape = |i: usize| gen.tensors[i].shape.clone();
    for (op, id) in &gen.ops {
        let out = &gen.tensors[*id];
        let kind: &'static str = match *op {
            Op::Unary(n, _)
            | Op::Binary(n, ..)
            | Op::Scalar(n, ..)
            | Op::Reduce(n, _)
            | Op::Compare(n, ..) => n,
            Op::Select(..) => "SELECT",
            Op::Cast(_) => "CAST",
            Op::Gather(..) => "GATHER",
            Op::Matmul(..) => "MATMUL",
            Op::Softmax(..) => "SOFTMAX",
            Op::LayerNorm(..) => "LAYERNORM",
            Op::RmsNorm(..) => "RMSNORM",
        };
        CURRENT.with(|c| c.set(kind));
        let fail = |i: usize, got: String, want: String, bound: String| {
            Err(format!("{op:?} -> {} element {i}: got {got}, model {want} (bound {bound})", out.name))
        };
        match *op {
            Op::Unary(name, a) => {
                let (x, y) = (&vals[&a], &vals[id]);
                for i in 0..y.len() {
                    let v = ftz(x[i]);
                    let (want, ulps) = match name {
                        "NEG" => (-v, 0.0),
                        "ABS" => (v.abs(), 0.0),
                        "SQRT" => (v.sqrt(), 0.5),
                        "RSQRT" => (1.0 / v.sqrt(), 0.5),
                        "EXP" => (v.exp(), 2.0),
                        "LOG" => (v.ln(), 2.0),
                        "RELU" => (v.max(0.0), 0.0),
                        "SIGMOID" => (1.0 / (1.0 + (-v).exp()), 4.0),
                        "TANH" => (v.tanh(), 4.0),
                        "SILU" => (v / (1.0 + (-v).exp()), 5.0),
                        "ERF" => (common::erf64(v), ERF_ULPS),
                        _ => (0.5 * v * (1.0 + common::erf64(v / std::f64::consts::SQRT_2)), 4.0),
                    };
                    // GELU below -1: absolute error in units of ulp(x/2) (documented).
                    // SILU below -87: sigmoid is under FLT_MIN and flushed, so |x| * FLT_MIN (ISA.md).
                    let abs = match name {
                        "GELU" if v < -1.0 => ulps * ulp(0.5 * v),
                        "SILU" if v < -87.0 => (ulps * ulp(want)).max(v.abs() * f32::MIN_POSITIVE as f64),
                        _ => ulps * ulp(want),
                    };
                    let want = match name {
                        "RELU" if v.is_nan() => f64::NAN,
                        "GELU" | "SILU" if v == f64::NEG_INFINITY => -0.0,
                        _ => want,
                    };
                    let abs = if v.is_infinite() { 0.0 } else { abs };
                    if !within(y[i], want, abs) {
                        return fail(
                            i,
                            format!("{:e}", y[i]),
                            format!("{want:e} of {:e}", x[i]),
                            format!("{ulps} ulp"),
                        );
                    }
                }
            }
            Op::Binary(name, a, b) => {
                let (x, z, y) = (&vals[&a], &vals[&b], &vals[id]);
                let (sa, sb) = (shape(a), shape(b));
                let cols = sa[1];
                for i in 0..y.len() {
                    let (rr, c) = (i / cols.max(1), i % cols.max(1));
                    let j = match sb.as_slice() {
                        [_] => c,
                        [_, 1] => rr,
                        _ => i,
                    };
                    if let Err((w, bound)) = binary_ok(name, x[i], z[j], y[i]) {
                        return fail(
                            i,
                            format!("{:e}", y[i]),
                            format!("{w:e} of {:e}, {:e}", x[i], z[j]),
                            bound,
                        );
                    }
                }
            }
            Op::Scalar(name, a, s) => {
                let (x, y) = (&vals[&a], &vals[id]);
                for i in 0..y.len() {
                    if let Err((w, bound)) = binary_ok(name, x[i], s, y[i]) {
                        return fail(i, format!("{:e}", y[i]), format!("{w:e} of {:e}, {s:e}", x[i]), bound);
                    }
                }
            }
            Op::Compare(name, a, b) => {
                // The strict values (f32 and bf16 denormals flushed, f16 and i32 exact) compared
                // in f64, NaN unordered: exactly the i32 1 or 0.
                let value = |t: usize, k: usize| {
                    let d = gen.tensors[t].dtype;
                    cast_source_value(d, vals.get(&t).map(|v| v[k]), ints.get(&t).map(|v| v[k]))
                };
                for (i, &got) in ints[id].iter().enumerate() {
                    let (x, y) =
                        (value(a, bidx(&shape(a), &out.shape, i)), value(b, bidx(&shape(b), &out.shape, i)));
                    let want = i32::from(match name {
                        "EQ" => x == y,
                        "LT" => x < y,
                        _ => x <= y,
                    });
                    if got != want {
                        return fail(i, got.to_string(), format!("{want} of {x:e}, {y:e}"), "exact".into());
                    }
                }
            }
            Op::Select(c, a, b) => {
                // The chosen element's bits, unchanged.
                let bits = |t: usize, k: usize| match vals.get(&t) {
                    Some(v) => v[k].to_bits(),
                    None => ints[&t][k] as u32,
                };
                for i in 0..out.shape.iter().product::<usize>() {
                    let cond = ints[&c][bidx(&shape(c), &out.shape, i)];
                    let want = if cond != 0 {
                        bits(a, bidx(&shape(a), &out.shape, i))
                    } else {
                        bits(b, bidx(&shape(b), &out.shape, i))
                    };
                    if bits(*id, i) != want {
                        return fail(
                            i,
                            format!("{:#x}", bits(*id, i)),
                            format!("{want:#x} (cond {cond})"),
                            "exact".into(),
                        );
                    }
                }
            }
            Op::Cast(a) => {
                let (sd, dd) = (gen.tensors[a].dtype, out.dtype);
                let n = out.shape.iter().product::<usize>();
                for i in 0..n {
                    // The source's exact value (floats flushed as strict does; f16 denormals are
                    // normal f32 values and stay), then one rounding by the model: an integer
                    // rounded to the format's significant bits in i64 first (`round_exact`; then
                    // `half`'s from_f32 is exact, or gives inf past the range), a float by
                    // `half`'s from_f32 (one rounding from an f32), f64 `as f32`, or truncation
                    // with saturation for i32. (`half`'s from_f64 goes through f32: two roundings.)
                    let x = cast_source_value(sd, vals.get(&a).map(|v| v[i]), ints.get(&a).map(|v| v[i]));
                    let want: u32 = match dd {
                        DType::F32 if x.is_nan() => 0x7fc0_0000,
                        DType::F32 => (x as f32).to_bits(),
                        DType::F16 if x.is_nan() => 0x7e00,
                        DType::F16 => half::f16::from_f32(round_exact(x, 11) as f32).to_bits() as u32,
                        DType::Bf16 if x.is_nan() => 0x7fc0,
                        DType::Bf16 => half::bf16::from_f32(round_exact(x, 8) as f32).to_bits() as u32,
                        DType::I32 if x.is_nan() => 0,
                        DType::I32 => x.trunc().clamp(i32::MIN as f64, i32::MAX as f64) as i32 as u32,
                    };
                    let got = if dd == DType::F32 { vals[id][i].to_bits() } else { ints[id][i] as u32 };
                    if got != want {
                        return fail(
                            i,
                            format!("{got:#x}"),
                            format!("{want:#x} of {sd} {x:e}"),
                            "exact".into(),
                        );
                    }
                }
            }
            Op::Gather(table, idx) => {
                let (t, ix, y) = (&vals[&table], &ints[&idx], &vals[id]);
                let cols = out.shape[1];
                for i in 0..y.len() {
                    let want = t[ix[i / cols] as usize * cols + i % cols];
                    if want.to_bits() != y[i].to_bits() {
                        return fail(
                            i,
                            format!("{:#x}", y[i].to_bits()),
                            format!("{:#x}", want.to_bits()),
                            "exact".into(),
                        );
                    }
                }
            }
            Op::Matmul(a, w, tb) => {
                let (x, wv, y) = (&vals[&a], &vals[&w], &vals[id]);
                let k = shape(a)[1];
                let nn = out.shape[1];
                for (i, &got) in y.iter().enumerate() {
                    let (rr, c) = (i / nn, i % nn);
                    let (mut s, mut sa) = (0.0f64, 0.0f64);
                    for kk in 0..k {
                        let bv = if tb { wv[c * k + kk] } else { wv[kk * nn + c] };
                        let p = ftz(x[rr * k + kk]) * ftz(bv);
                        s += p;
                        sa += p.abs();
                    }
                    // Sequential k-ascending chain: |err| <= K u sum|a b| (plus flushes).
                    if sa >= f32::MAX as f64 || sa.is_nan() {
                        continue; // an intermediate may overflow (documented): no bound
                    }
                    let bound = k as f64 * U * sa + (k as f64 + 1.0) * FLT_MIN;
                    if !within(got, s, bound) {
                        return fail(i, format!("{got:e}"), format!("{s:e}"), format!("{bound:e}"));
                    }
                }
            }
            Op::Reduce(name, a) => {
                let (x, y) = (&vals[&a], &vals[id]);
                let n = shape(a)[1];
                for rr in 0..y.len() {
                    let row: Vec<f64> = x[rr * n..(rr + 1) * n].iter().map(|&v| ftz(v)).collect();
                    let (want, bound) = match name {
                        "REDUCE_MAX" => {
                            let w = if row.iter().any(|v| v.is_nan()) {
                                f64::NAN
                            } else {
                                row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v))
                            };
                            (w, 0.0)
                        }
                        _ => {
                            let s: f64 = row.iter().sum();
                            let sa: f64 = row.iter().map(|v| v.abs()).sum();
                            let finite: f64 = row.iter().filter(|v| v.is_finite()).map(|v| v.abs()).sum();
                            if finite >= f32::MAX as f64 {
                                continue; // a partial sum may overflow (documented): no bound
                            }
                            let b = tree_depth(n) * U * sa + n as f64 * FLT_MIN;
                            if name == "REDUCE_SUM" {
                                (s, b)
                            } else {
                                // A correctly rounded division of the tree's sum by n.
                                let m = s / n as f64;
                                (m, b / n as f64 + 0.5 * ulp(m))
                            }
                        }
                    };
                    let want = if n == 0 && name == "REDUCE_SUM" { 0.0 } else { want };
                    if !within(y[rr], want, bound) || (n == 0 && name == "REDUCE_SUM" && y[rr].to_bits() != 0)
                    {
                        return fail(rr, format!("{:e}", y[rr]), format!("{want:e}"), format!("{bound:e}"));
                    }
                }
            }
            Op::Softmax(a, mask, scale) => {
                let (x, y) = (&vals[&a], &vals[id]);
                let n = shape(a)[1];
                for rr in 0..out.shape[0] {
                    // The logits in f32 as documented: x*scale (rounded), then + mask (rounded).
                    let l: Vec<f64> = (0..n)
                        .map(|c| {
                            let p = ftz((ftz(x[rr * n + c]) as f32) * scale);
                            match mask {
                                Some(m) => ftz((p as f32) + (ftz(vals[&m][rr * n + c]) as f32)),
                                None => p,
                            }
                        })
                        .collect();
                    let m = l.iter().fold(f64::NEG_INFINITY, |m, &v| {
                        if v.is_nan() || m.is_nan() {
                            f64::NAN
                        } else {
                            m.max(v)
                        }
                    });
                    let e: Vec<f64> = l.iter().map(|&v| (v - m).exp()).collect();
                    let s: f64 = e.iter().sum();
                    let p: Vec<f64> = e.iter().map(|v| v / s).collect();
                    let spread: f64 =
                        p.iter().zip(&l).filter(|(p, _)| **p > 0.0).map(|(p, l)| p * (l - m).abs()).sum();
                    for c in 0..n {
                        let bad = m.is_nan() || m.is_infinite();
                        let want = if bad { f64::NAN } else { p[c] };
                        let bound = if bad {
                            0.0
                        } else if p[c] == 0.0 {
                            2.0 * FLT_MIN
                        } else {
                            p[c] * U * ((l[c] - m).abs() + spread + tree_depth(n) + 18.0) + 2.0 * FLT_MIN
                        };
                        if !within(y[rr * n + c], want, bound) {
                            return fail(
                                rr * n + c,
                                format!("{:e}", y[rr * n + c]),
                                format!("{want:e}"),
                                format!("{bound:e}"),
                            );
                        }
                    }
                }
            }
            Op::LayerNorm(a, affine, eps) | Op::RmsNorm(a, affine, eps) => {
                let layer = matches!(op, Op::LayerNorm(..));
                let (x, y) = (&vals[&a], &vals[id]);
                let n = shape(a)[1];
                let gamma: Vec<f64> =
                    (0..n).map(|c| if affine { ftz(vals[&GAMMA][c]) } else { 1.0 }).collect();
                let beta: Vec<f64> =
                    (0..n).map(|c| if affine && layer { ftz(vals[&BETA][c]) } else { 0.0 }).collect();
                for rr in 0..out.shape[0] {
                    let row: Vec<f64> = x[rr * n..(rr + 1) * n].iter().map(|&v| ftz(v)).collect();
                    let nf = n as f64;
                    let squares: f64 = row.iter().map(|v| v * v).sum();
                    if squares.is_finite() && squares >= f32::MAX as f64 / 4.0 {
                        continue; // the variance may overflow (documented): no bound
                    }
                    let mu = if layer { row.iter().sum::<f64>() / nf } else { 0.0 };
                    let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / nf;
                    let sigma = (var + eps as f64).sqrt();
                    let sabs = row.iter().map(|v| v.abs()).sum::<f64>() / nf;
                    let l = tree_depth(n);
                    for c in 0..n {
                        let yn = (row[c] - mu) / sigma;
                        let want = yn * gamma[c] + beta[c];
                        // Documented (numerics.md): |err| <= u (|g| ((L+10) S/sigma + (L/2+12)|y|)
                        // + |out|) for LAYERNORM (S = mean |x|), u (|g| (L/2+12)|y| + |out|) for
                        // RMSNORM, plus flushed values; a row with NaN or inf gives NaN.
                        let shift = if layer { (l + 10.0) * sabs / sigma } else { 0.0 };
                        let bound = U * (gamma[c].abs() * (shift + (l / 2.0 + 12.0) * yn.abs()) + want.abs())
                            + 4.0 * FLT_MIN;
                        let i = rr * n + c;
                        if !within(y[i], want, bound) {
                            return fail(i, format!("{:e}", y[i]), format!("{want:e}"), format!("{bound:e}"));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// `x` rounded to `sig` significant bits, ties to even, exactly, when `x` is an integer of at most
/// 53 bits (i32 sources); other values are returned as they are (a float source is an f32
/// value, which `half`'s from_f32 rounds once).
fn round_exact(x: f64, sig: u32) -> f64 {
    if x.fract() != 0.0 || !x.is_finite() || x.abs() >= 2f64.powi(53) {
        return x;
    }
    let mag = x.abs() as i64;
    if mag == 0 {
        return x;
    }
    let p = 63 - mag.leading_zeros() as i64;
    let k = (p + 1 - sig as i64).max(0);
    let unit = 1i64 << k;
    let (q, rem) = (mag / unit, mag % unit);
    let q = if 2 * rem > unit || (2 * rem == unit && q % 2 == 1) { q + 1 } else { q };
    ((q * unit) as f64).copysign(x)
}

/// A CAST source element's exact value under the strict rules: f32 and bf16 denormals are
/// zeros of their sign, f16 widens exactly, i32 is exact in f64.
fn cast_source_value(d: DType, f: Option<f32>, i: Option<i32>) -> f64 {
    match d {
        DType::F32 => ftz(f.expect("f32 source")),
        DType::I32 => i.expect("i32 source") as f64,
        DType::F16 => half::f16::from_bits(i.expect("f16 bits") as u16).to_f64(),
        DType::Bf16 => ftz(half::bf16::from_bits(i.expect("bf16 bits") as u16).to_f32()),
    }
}

/// Whether a binary op's result is within its documented bound (correctly rounded for ADD, SUB,
/// MUL, DIV; exact for MAX, MIN), else the model value and the bound.
fn binary_ok(name: &str, a: f32, b: f32, got: f32) -> Result<(), (f64, String)> {
    let (x, y) = (ftz(a), ftz(b));
    let want = match name {
        "ADD" => x + y,
        "SUB" => x - y,
        "MUL" => x * y,
        "DIV" => x / y,
        "MAX" => {
            if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.max(y)
            }
        }
        _ => {
            if x.is_nan() || y.is_nan() {
                f64::NAN
            } else {
                x.min(y)
            }
        }
    };
    let bound = if matches!(name, "MAX" | "MIN") { 0.0 } else { 0.5 * ulp(want) };
    if within(got, want, bound) {
        Ok(())
    } else {
        Err((want, format!("{bound:e}")))
    }
}

/// The CAST model itself on values whose answers are known: one rounding from the integer.
#[test]
fn cast_model_rounds_once() {
    let int = |v: i32| cast_source_value(DType::I32, None, Some(v));
    assert_eq!(half::bf16::from_f32(round_exact(int((1 << 25) + (1 << 17) + 1), 8) as f32).to_bits(), 0x4c01);
    assert_eq!(half::bf16::from_f32(round_exact(int(-((1 << 25) + (1 << 17))), 8) as f32).to_bits(), 0xcc00);
    assert_eq!(half::f16::from_f32(round_exact(int(65520), 11) as f32).to_bits(), 0x7c00);
    assert_eq!(half::f16::from_f32(round_exact(int(65519), 11) as f32).to_bits(), 0x7bff);
    assert_eq!(half::f16::from_f32(round_exact(int(2049), 11) as f32).to_bits(), 0x6800);
}

fn executors() -> Vec<(&'static str, VmConfig)> {
    let cpu = |simd, threads| VmConfig {
        simd: Some(simd),
        threads: Some(threads),
        backend: Backend::Cpu,
        ..VmConfig::default()
    };
    let mut v = vec![
        ("scalar CPU", cpu(SimdLevel::Scalar, 1)),
        ("SIMD CPU, 1 thread", cpu(SimdLevel::detect(), 1)),
        ("SIMD CPU, 3 threads", cpu(SimdLevel::detect(), 3)),
        // The most a 2-core machine allows (4 a core), and where the GEMM's shared-packing
        // driver and batched products side by side (tests/gemm.rs) take over (8 and 4).
        ("SIMD CPU, 8 threads", cpu(SimdLevel::detect(), 8)),
    ];
    match adeadvm::vm::shared_device() {
        Ok(_) => {
            v.push(("Vulkan", VmConfig { backend: Backend::Vulkan, threads: Some(1), ..VmConfig::default() }))
        }
        Err(e) => {
            assert!(!required(), "ADEADVM_REQUIRE_VULKAN=1 but no Vulkan device: {e}");
            common::skip::skipped(
                "the differential test on the Vulkan executor",
                &format!("no Vulkan device ({e})"),
            );
        }
    }
    v
}

/// Runs one generated program on every executor and checks it; returns the opcodes it checked.
fn run_case(
    seed: u64,
    r: usize,
    n: usize,
    steps: usize,
    kinds: &[usize],
    execs: &[(&'static str, VmConfig)],
) -> Vec<String> {
    let mut g = Rng(seed);
    let gen = generate(&mut g, r, n, steps, kinds);
    let src = format!("{}{}", gen.text, gen.body);
    let program = common::build(&src);
    let inputs: Vec<(&str, HostTensor)> = gen.inputs.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let mut first: Option<(&str, BTreeMap<String, HostTensor>)> = None;
    for (name, config) in execs {
        let outs = common::run_with(&program, &inputs, config.clone())
            .unwrap_or_else(|e| panic!("seed {seed} on {name}: {e}\n{src}"));
        match &first {
            None => first = Some((name, outs)),
            Some((fname, want)) => {
                for (o, w) in want {
                    let got = &outs[o];
                    if got.bytes() != w.bytes() {
                        let sz = w.dtype.size();
                        let pos = w.bytes().iter().zip(got.bytes()).position(|(a, b)| a != b).unwrap() / sz;
                        panic!(
                            "seed {seed}: output {o} differs between {fname} and {name} at element {pos}: {:02x?} vs {:02x?}\n{src}",
                            &w.bytes()[pos * sz..(pos + 1) * sz],
                            &got.bytes()[pos * sz..(pos + 1) * sz]
                        );
                    }
                }
            }
        }
    }
    // The accuracy check, on the (common) results and the inputs.
    let (_, outs) = first.expect("at least one executor");
    let mut vals = BTreeMap::new();
    let mut ints = BTreeMap::new();
    for (i, t) in gen.tensors.iter().enumerate() {
        let host = if let Some((_, h)) = gen.inputs.iter().find(|(n, _)| *n == t.name) {
            h.clone()
        } else {
            outs[&format!("o{i}")].clone()
        };
        match t.dtype {
            DType::F32 => {
                vals.insert(i, f32s(&host));
            }
            DType::I32 => {
                ints.insert(
                    i,
                    host.bytes().chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect(),
                );
            }
            _ => {
                ints.insert(
                    i,
                    host.bytes().chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]) as i32).collect(),
                );
            }
        }
    }
    if let Err(e) = check_accuracy(&gen, &vals, &ints) {
        panic!("seed {seed} (rows {r}, n {n}): {e}\n{src}");
    }
    gen.ops
        .iter()
        .map(|(op, id)| match op {
            Op::Compare(name, a, _) => format!("{name} {}", gen.tensors[*a].dtype),
            Op::Select(..) => format!("SELECT {}", gen.tensors[*id].dtype),
            Op::Unary(name, _) => name.to_string(),
            _ => String::new(),
        })
        .collect()
}

/// Whether `seen` holds every comparison and SELECT in every dtype, and ERF.
fn assert_covers_comparisons_and_select(seen: &std::collections::BTreeSet<String>) {
    let mut want = vec!["ERF".to_string()];
    for d in ["f32", "f16", "bf16", "i32"] {
        for op in ["EQ", "LT", "LE", "SELECT"] {
            want.push(format!("{op} {d}"));
        }
    }
    let missing: Vec<&String> = want.iter().filter(|w| !seen.contains(*w)).collect();
    assert!(missing.is_empty(), "the generated programs never checked {missing:?}");
}

/// Many small and odd-sized programs (zero rows and zero-length rows among them).
#[test]
fn random_programs_agree_and_meet_the_documented_accuracy() {
    let execs = executors();
    let sizes = [(1, 1), (3, 17), (2, 256), (4, 257), (5, 3), (0, 8), (3, 0), (7, 100), (1, 1000), (2, 513)];
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..150u64 {
        let (r, n) = sizes[seed as usize % sizes.len()];
        seen.extend(run_case(
            0xd1ff_0000 + seed,
            r,
            n,
            3 + (seed as usize % 6),
            &ALL_STEPS.collect::<Vec<_>>(),
            &execs,
        ));
    }
    report_worst();
    assert_covers_comparisons_and_select(&seen);
}

/// Programs on tensors past 2^15 elements, where the CPU scheduler batches and splits work
/// across threads.
#[test]
fn large_random_programs_agree_and_meet_the_documented_accuracy() {
    let execs = executors();
    for (seed, (r, n)) in [(160usize, 257usize), (40, 1024), (300, 120), (64, 700)].into_iter().enumerate() {
        run_case(0x1a26_0000 + seed as u64, r, n, 5, &ALL_STEPS.collect::<Vec<_>>(), &execs);
    }
    report_worst();
}

/// The comparisons, SELECT (each in f32, f16, bf16 and i32; rows, columns and expands) and ERF
/// on tensors of tens of thousands of elements, which the CPU executor splits over its threads.
#[test]
fn large_comparisons_select_and_erf_agree_and_match_the_model() {
    let execs = executors();
    let mut seen = std::collections::BTreeSet::new();
    for (seed, (r, n)) in [(120usize, 300usize), (50, 1031), (257, 129), (33, 2000)].into_iter().enumerate() {
        seen.extend(run_case(0xc5e1_0000 + seed as u64, r, n, 40, &[14, 15, ERF_STEP], &execs));
    }
    report_worst();
    assert_covers_comparisons_and_select(&seen);
}

/// The documented results of empty reductions and of a MATMUL with K = 0 (ISA.md, "Numerics"):
/// REDUCE_SUM +0, REDUCE_MEAN NaN, REDUCE_MAX -inf, MATMUL act(bias); the same on every executor.
#[test]
fn empty_reductions_and_k0_matmul_give_the_documented_values() {
    let program = common::build(
        ".input %x f32[3, 0]\n.input %w f32[0, 4]\n.input %b f32[4]\n\
         .output s f32[3]\n.output m f32[3]\n.output x f32[3]\n.output y f32[3, 4]\n.output z f32[3, 4]\n\
         ALLOC %s: f32[3]\nREDUCE_SUM %s, %x, -1\nSTORE s, %s\n\
         ALLOC %m: f32[3]\nREDUCE_MEAN %m, %x, -1\nSTORE m, %m\n\
         ALLOC %mx: f32[3]\nREDUCE_MAX %mx, %x, -1\nSTORE x, %mx\n\
         ALLOC %y: f32[3, 4]\nMATMUL %y, %x, %w, bias=%b\nSTORE y, %y\n\
         ALLOC %z: f32[3, 4]\nMATMUL %z, %x, %w, bias=%b, act=relu\nSTORE z, %z\n\
         FREE %s\nFREE %m\nFREE %mx\nFREE %y\nFREE %z\n",
    );
    let bias = [1.5f32, -2.0, 0.0, -0.0];
    let inputs = [
        ("x", common::f32s(&[3, 0], &[])),
        ("w", common::f32s(&[0, 4], &[])),
        ("b", common::f32s(&[4], &bias)),
    ];
    for (name, config) in executors() {
        let outs = common::run_with(&program, &inputs, config).unwrap_or_else(|e| panic!("{name}: {e}"));
        let bits = |o: &str| -> Vec<u32> { f32s(&outs[o]).iter().map(|v| v.to_bits()).collect() };
        assert_eq!(bits("s"), vec![0; 3], "{name}: REDUCE_SUM of nothing is +0");
        assert_eq!(bits("m"), vec![0x7fc0_0000; 3], "{name}: REDUCE_MEAN of nothing is NaN");
        assert_eq!(bits("x"), vec![f32::NEG_INFINITY.to_bits(); 3], "{name}: REDUCE_MAX of nothing is -inf");
        // +0 + bias: -0 + +0 is +0 in IEEE addition.
        let want: Vec<u32> = bias.iter().map(|&b| (0.0f32 + b).to_bits()).collect();
        assert_eq!(bits("y"), want.repeat(3), "{name}: MATMUL with K = 0 is the bias");
        let want: Vec<u32> = bias.iter().map(|&b| (0.0f32 + b).max(0.0).to_bits()).collect();
        assert_eq!(bits("z"), want.repeat(3), "{name}: MATMUL with K = 0 and relu is relu(bias)");
    }
}
