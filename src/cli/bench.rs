//! `adeadvm bench`: times one kernel inside the VM (the figure a program gets) and prints
//! milliseconds with GFLOP/s or GB/s. `benches/peer_cpu.py` runs it beside numpy.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use adeadvm::asm::{assemble, AsmOptions};
use adeadvm::format::Program;
use adeadvm::isa::{DType, Tier};
use adeadvm::vm::{HostTensor, Observer, StepEvent, Vm, VmConfig, Wants};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Kernel {
    /// SGEMM SIZE×SIZE×SIZE (GFLOP/s).
    Matmul,
    /// The same with f16 operands and output (on cooperative matrices in the fast tier, where
    /// the device has them).
    MatmulF16,
    /// The same with bf16 operands and output.
    MatmulBf16,
    /// y = a + b over SIZE elements (GB/s, 12 bytes per element).
    Add,
    /// y = exp(x) over SIZE elements.
    Exp,
    /// y = gelu(x) over SIZE elements.
    Gelu,
    /// softmax over the rows of a SIZE×SIZE matrix (SIZE×ROW with --row).
    Softmax,
    /// layernorm over the rows of a SIZE×1024 matrix (SIZE×ROW with --row).
    Layernorm,
    /// rmsnorm over the rows of a SIZE×1024 matrix (SIZE×ROW with --row).
    Rmsnorm,
    /// REDUCE_SUM of a SIZE×SIZE matrix (SIZE×ROW with --row) over --axis (GB/s of the
    /// input and output); `reduce-sum 1 --row 16M` sums 16M elements to one.
    ReduceSum,
    /// REDUCE_MAX, as reduce-sum.
    ReduceMax,
    /// Interpreter overhead: a chain of 1000 dependent ADDs on 1-element tensors (ns per op;
    /// SIZE does not apply).
    Dispatch,
}

/// The length of `bench dispatch`'s chain of dependent ADDs (its size: SIZE does not apply).
const DISPATCH_CHAIN: usize = 1000;

/// `bench`'s line in the top-level help: every kernel's name, as the command line spells it.
pub fn about() -> String {
    let names: Vec<String> = Kernel::value_variants()
        .iter()
        .filter_map(|k| k.to_possible_value())
        .map(|v| v.get_name().to_string())
        .collect();
    format!("Time one kernel ({}) inside the VM", names.join(", "))
}

#[derive(Args)]
pub struct BenchArgs {
    /// The kernel to time.
    #[arg(value_enum)]
    kernel: Kernel,
    /// Problem size: N (accepts K and M suffixes: 16M = 16·2^20); dispatch has a fixed size.
    #[arg(default_value = "1024", value_parser = parse_size)]
    size: usize,
    /// Determinism tier.
    #[arg(long, default_value = "strict", value_parser = ["strict", "fast"])]
    tier: String,
    /// Executor: cpu or vulkan (on a device the time is the kernel's GPU time, from timestamps;
    /// the JSON also gives the wall time with one submit and wait).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "vulkan"])]
    backend: String,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Timed repetitions (the median is reported).
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// Seconds of untimed runs after the first (which builds the pipelines), before the timed
    /// ones: warms caches and brings a GPU to its working clocks.
    #[arg(long, default_value_t = 0.25, value_parser = parse_warmup)]
    warmup: f64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Say on stderr what is running as each run ends (a status line on a terminal by default:
    /// a large kernel on a CPU-emulated device such as lavapipe takes minutes).
    #[arg(long)]
    progress: bool,
    /// How the matmul kernels store their operands: nn (a [M, K], b [K, N]), nt (b stored
    /// [N, K], as a linear layer's weight), tn (a stored [K, M]) or tt.
    #[arg(long, default_value = "nn", value_parser = ["nn", "nt", "tn", "tt"])]
    layout: String,
    /// The activation the matmul kernels apply to each output (MATMUL's act=): none, relu or
    /// gelu.
    #[arg(long, default_value = "none", value_parser = ["none", "relu", "gelu"])]
    act: String,
    /// The row length of softmax, layernorm and rmsnorm (SIZE rows of ROW elements; default:
    /// SIZE for softmax, 1024 for the norms). Accepts K and M suffixes.
    #[arg(long, value_parser = parse_size)]
    row: Option<usize>,
    /// The axis the reduce kernels reduce: 1 (along each row: SIZE outputs) or 0 (down each
    /// column: ROW outputs).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=1))]
    axis: Option<u8>,
}

/// Seconds of warm-up: finite, from 0 to an hour.
fn parse_warmup(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| (0.0..=3600.0).contains(v))
        .ok_or_else(|| format!("`{s}` is not a number of seconds from 0 to 3600"))
}

fn parse_size(s: &str) -> Result<usize, String> {
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1usize << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("`{s}` is not a positive size (e.g. 1024, 16M)"))
}

/// What `bench` is doing, on stderr: one status line rewritten in place on a terminal, or
/// plain lines with `--progress` into a pipe or file; nothing otherwise.
struct BenchProgress {
    lines: bool,
    status_line: bool,
    started: Instant,
}

impl BenchProgress {
    fn new(asked: bool) -> BenchProgress {
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        BenchProgress { lines: asked && !terminal, status_line: terminal, started: Instant::now() }
    }
    fn say(&self, what: &str) {
        let text = format!("bench: {what} ({:.1} s in)", self.started.elapsed().as_secs_f64());
        if self.status_line {
            eprint!("\r\x1b[2K{text}");
        } else if self.lines {
            eprintln!("{text}");
        }
    }
    /// Clears the status line before the result is printed.
    fn done(&self) {
        if self.status_line {
            eprint!("\r\x1b[2K");
        }
    }
}

/// Records the duration of every execution of one instruction: wall time, and GPU time
/// (timestamps) where it ran on a device.
struct TimeOf {
    index: usize,
    times: Vec<Duration>,
    gpu_times: Vec<Duration>,
}

impl Observer for TimeOf {
    fn wants(&self) -> Wants {
        Wants { timing: true, written: false }
    }
    fn step(&mut self, e: &StepEvent<'_>) -> ControlFlow<()> {
        if e.index == self.index {
            self.times.push(e.elapsed);
            self.gpu_times.extend(e.gpu_elapsed);
        }
        ControlFlow::Continue(())
    }
}

pub fn cmd_bench(a: BenchArgs) -> Result<()> {
    let n = a.size;
    let tier = Tier::from_name(&a.tier).context("tier")?;
    let is_matmul = matches!(a.kernel, Kernel::Matmul | Kernel::MatmulF16 | Kernel::MatmulBf16);
    if a.layout != "nn" && !is_matmul {
        bail!("--layout {} applies to the matmul kernels only", a.layout);
    }
    if a.act != "none" && !is_matmul {
        bail!("--act {} applies to the matmul kernels only", a.act);
    }
    let is_reduce = matches!(a.kernel, Kernel::ReduceSum | Kernel::ReduceMax);
    let row = match (a.kernel, a.row) {
        (Kernel::Softmax | Kernel::ReduceSum | Kernel::ReduceMax, r) => r.unwrap_or(n),
        (Kernel::Layernorm | Kernel::Rmsnorm, r) => r.unwrap_or(1024),
        (_, Some(_)) => bail!("--row applies to softmax, layernorm, rmsnorm and the reduce kernels only"),
        (_, None) => 0,
    };
    if a.axis.is_some() && !is_reduce {
        bail!("--axis applies to the reduce kernels only");
    }
    let axis = usize::from(a.axis.unwrap_or(1));
    // The operands are square, so a stored transpose changes only how the kernel reads them.
    let matmul_insn = match a.layout.as_str() {
        "nt" => "MATMUL %c, %a, %b, tb",
        "tn" => "MATMUL %c, %a, %b, ta",
        "tt" => "MATMUL %c, %a, %b, ta, tb",
        _ => "MATMUL %c, %a, %b",
    };
    let matmul_insn = &match a.act.as_str() {
        "none" => matmul_insn.to_string(),
        act => format!("{matmul_insn}, act={act}"),
    };
    // Refused before any input is generated: the largest tensor, held about six times over (the
    // generated values, the bound input, the arena, the device's copies and the summed result).
    let largest = match a.kernel {
        Kernel::Matmul | Kernel::MatmulF16 | Kernel::MatmulBf16 => n.checked_mul(n),
        Kernel::Softmax | Kernel::Layernorm | Kernel::Rmsnorm | Kernel::ReduceSum | Kernel::ReduceMax => {
            n.checked_mul(row)
        }
        Kernel::Add | Kernel::Exp | Kernel::Gelu => Some(n),
        Kernel::Dispatch => Some(1),
    };
    let need = largest.and_then(|e| (e as u64).checked_mul(4 * 6)).unwrap_or(u64::MAX);
    let available = adeadvm::vm::available_memory();
    if need > available {
        bail!(
            "bench {} {n}: its tensors take about {:.1} GB with their copies; this machine has {:.1} GB available (choose a smaller SIZE)",
            a.kernel.to_possible_value().map_or_else(|| format!("{:?}", a.kernel), |v| v.get_name().to_string()),
            need as f64 / 1e9,
            available as f64 / 1e9
        );
    }
    // (program text, timed instruction index, inputs, flops per run, bytes per run)
    let f32_input = |shape: Vec<usize>, seed: u32| -> Result<HostTensor> {
        let count: usize = shape.iter().product();
        let values: Vec<f32> =
            (0..count as u64).map(|i| adeadvm::rand::philox_uniform(seed, i) * 2.0 - 1.0).collect();
        HostTensor::from_f32(shape, &values).context("input too large")
    };
    // The timed instruction (index 1) writes %c; the run stores only %c summed along its last
    // axis, so that the host's download between runs stays small and the GPU stays busy (an
    // H100 timed EXP over 100M elements at a fifth of its bandwidth when each run stored the
    // 400 MB result: its clocks fell while the host copied).
    let timed = |inputs: &str, dtype: &str, shape: &[usize], insn: &str| -> String {
        let dims = |s: &[usize]| s.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
        let rows = if shape.len() > 1 { dims(&shape[..shape.len() - 1]) } else { "1".into() };
        format!(
            "{inputs}\n.output y {dtype}[{rows}]\nALLOC %c: {dtype}[{}]\n{insn}\nALLOC %r: {dtype}[{rows}]\nREDUCE_SUM %r, %c, {}\nSTORE y, %r\nFREE %r\nFREE %c\n",
            dims(shape),
            shape.len() - 1
        )
    };
    // Elementwise operands as [n / g, g], g = gcd(n, 4096): the same elements in the same order,
    // with rows that the GPU's REDUCE_SUM takes (at most 2^24 elements a row).
    let g = (1..=12).rev().map(|b| 1usize << b).find(|&g| n.is_multiple_of(g)).unwrap_or(1);
    let flat = [n / g, g];
    let flat_decl = format!("{}, {g}", n / g);
    let (src, index, inputs, flops, bytes): (String, usize, Vec<(&str, HostTensor)>, f64, f64) = match a
        .kernel
    {
        Kernel::Matmul => (
            timed(&format!(".input %a f32[{n}, {n}]\n.input %b f32[{n}, {n}]"), "f32", &[n, n], matmul_insn),
            1,
            vec![("a", f32_input(vec![n, n], 1)?), ("b", f32_input(vec![n, n], 2)?)],
            2.0 * (n as f64).powi(3),
            12.0 * (n as f64).powi(2),
        ),
        Kernel::MatmulF16 | Kernel::MatmulBf16 => {
            let (dtype, to_bits): (DType, fn(f32) -> u16) = match a.kernel {
                Kernel::MatmulF16 => (DType::F16, adeadvm::numerics::f32_to_f16_bits),
                _ => (DType::Bf16, adeadvm::numerics::f32_to_bf16_bits),
            };
            let half_input = |seed: u32| -> Result<HostTensor> {
                let bytes: Vec<u8> = (0..(n * n) as u64)
                    .flat_map(|i| to_bits(adeadvm::rand::philox_uniform(seed, i) * 2.0 - 1.0).to_le_bytes())
                    .collect();
                HostTensor::from_bytes(dtype, vec![n, n], &bytes).context("input too large")
            };
            let name = dtype.name();
            (
                timed(
                    &format!(".input %a {name}[{n}, {n}]\n.input %b {name}[{n}, {n}]"),
                    name,
                    &[n, n],
                    matmul_insn,
                ),
                1,
                vec![("a", half_input(1)?), ("b", half_input(2)?)],
                2.0 * (n as f64).powi(3),
                6.0 * (n as f64).powi(2),
            )
        }
        Kernel::Add => (
            timed(
                &format!(".input %a f32[{flat_decl}]\n.input %b f32[{flat_decl}]"),
                "f32",
                &flat,
                "ADD %c, %a, %b",
            ),
            1,
            vec![("a", f32_input(flat.to_vec(), 1)?), ("b", f32_input(flat.to_vec(), 2)?)],
            n as f64,
            12.0 * n as f64,
        ),
        Kernel::Exp | Kernel::Gelu => {
            let op = if matches!(a.kernel, Kernel::Exp) { "EXP" } else { "GELU" };
            (
                timed(&format!(".input %a f32[{flat_decl}]"), "f32", &flat, &format!("{op} %c, %a")),
                1,
                vec![("a", f32_input(flat.to_vec(), 1)?)],
                n as f64,
                8.0 * n as f64,
            )
        }
        Kernel::Softmax | Kernel::Layernorm | Kernel::Rmsnorm => {
            let (op, flops) = match a.kernel {
                Kernel::Softmax => ("SOFTMAX", 5.0),
                Kernel::Layernorm => ("LAYERNORM", 8.0),
                _ => ("RMSNORM", 5.0),
            };
            (
                timed(&format!(".input %a f32[{n}, {row}]"), "f32", &[n, row], &format!("{op} %c, %a")),
                1,
                vec![("a", f32_input(vec![n, row], 1)?)],
                flops * (n * row) as f64,
                8.0 * (n * row) as f64,
            )
        }
        Kernel::ReduceSum | Kernel::ReduceMax => {
            let op = if matches!(a.kernel, Kernel::ReduceSum) { "REDUCE_SUM" } else { "REDUCE_MAX" };
            let outs = if axis == 1 { n } else { row };
            (
                timed(&format!(".input %a f32[{n}, {row}]"), "f32", &[outs], &format!("{op} %c, %a, {axis}")),
                1,
                vec![("a", f32_input(vec![n, row], 1)?)],
                (n * row) as f64,
                4.0 * (n * row + outs) as f64,
            )
        }
        Kernel::Dispatch => {
            let mut s = String::from(".output y f32[1]\nALLOC %c: f32[1]\nFILL %c, 0.0\n");
            for _ in 0..DISPATCH_CHAIN {
                s.push_str("ADD %c, %c, 1.0\n");
            }
            s.push_str("STORE y, %c\nFREE %c\n");
            (s, usize::MAX, Vec::new(), DISPATCH_CHAIN as f64, 0.0)
        }
    };
    let program = assemble(&src, "bench.s", &AsmOptions { defines: Vec::new(), base_dir: ".".into() })?;
    let mut program = Program::from_bytes(program.to_bytes())?;
    program.tier = tier;
    let verified = Arc::new(adeadvm::verify::verify(program)?);
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |t| t.get()));
    let backend = adeadvm::vm::Backend::from_name(&a.backend).context("backend")?;
    let mut vm = Vm::new(verified, VmConfig { threads: Some(threads), backend, ..VmConfig::default() })?;
    for (name, t) in inputs {
        vm.set_input(name, t)?;
    }
    if a.iters == 0 {
        bail!("--iters must be at least 1");
    }
    // Untimed runs warm caches, allocate the arena and bring a GPU to its working clocks: one
    // run, which builds the pipelines, then --warmup seconds of runs.
    let progress = BenchProgress::new(a.progress);
    progress.say("the first run, which builds the pipelines");
    vm.run()?;
    progress.say(&format!("warming up for {} s", a.warmup));
    let warm_from = Instant::now();
    let warmup = Duration::from_secs_f64(a.warmup);
    while warm_from.elapsed() < warmup {
        vm.run()?;
    }
    let mut samples = Vec::with_capacity(a.iters);
    let mut gpu_samples = Vec::with_capacity(a.iters);
    // Per instruction, the host's own time (wall less submissions and GPU waits).
    let mut host_samples = Vec::with_capacity(a.iters);
    // GPU submissions of the timed runs, and how many reused an earlier run's command buffer.
    let (mut submissions, mut reused) = (0, 0);
    // The whole program's wall time a run, the timed loop's mean: what a caller running the
    // program again and again gets (the median above times one instruction).
    let loop_from = Instant::now();
    for i in 0..a.iters {
        progress.say(&format!("timed run {} of {}", i + 1, a.iters));
        if index == usize::MAX {
            let stats = vm.run()?;
            submissions += stats.gpu_submissions;
            reused += stats.gpu_reused;
            samples.push(stats.elapsed / stats.steps.max(1) as u32);
            host_samples.push(stats.elapsed.saturating_sub(stats.gpu_wait) / stats.steps.max(1) as u32);
        } else {
            let mut timer = TimeOf { index, times: Vec::new(), gpu_times: Vec::new() };
            vm.run_observed(&mut timer)?;
            samples.extend(timer.times);
            gpu_samples.extend(timer.gpu_times);
        }
    }
    progress.done();
    let run_wall = loop_from.elapsed().as_secs_f64() / a.iters as f64;
    let median_of = |v: &mut Vec<Duration>| -> Option<f64> {
        v.sort();
        v.get(v.len() / 2).map(Duration::as_secs_f64)
    };
    let wall = median_of(&mut samples).context("no samples")?;
    // On a device the kernel's own time is the GPU's (as CUDA events time PyTorch); the wall
    // time adds one submit and fence wait.
    let gpu = if gpu_samples.len() == samples.len() { median_of(&mut gpu_samples) } else { None };
    let median = gpu.unwrap_or(wall);
    let host = median_of(&mut host_samples);
    let name =
        a.kernel.to_possible_value().map_or_else(|| format!("{:?}", a.kernel), |v| v.get_name().to_string());
    let level = vm.simd_level().name();
    let mut shape_json =
        if is_matmul { format!("\"layout\":\"{}\",\"act\":\"{}\",", a.layout, a.act) } else { String::new() };
    // Which f32 GEMM the fast tier's Vulkan MATMUL took: the FMA kernel, or the tensor cores
    // with three bf16 pieces an operand (rows::split_sgemm_chosen; it depends on the sizes only).
    let fast_vulkan_sgemm = matches!(a.kernel, Kernel::Matmul) && tier == Tier::Fast && a.backend == "vulkan";
    let split_gemm = fast_vulkan_sgemm
        && adeadvm::vm::shared_device().is_ok_and(|d| {
            let g = adeadvm::exec::cpu::reference::MatmulShape::plain(n, n, n);
            adeadvm::exec::vulkan::ops::rows::split_sgemm_chosen(d.kernels(), &g).is_some()
        });
    if fast_vulkan_sgemm {
        shape_json.push_str(&format!("\"gemm\":\"{}\",", if split_gemm { "bf16-pieces" } else { "fma" }));
    }
    if row > 0 {
        shape_json.push_str(&format!("\"row\":{row},"));
    }
    if is_reduce {
        shape_json.push_str(&format!("\"axis\":{axis},"));
    }
    if a.json {
        let json_size = if matches!(a.kernel, Kernel::Dispatch) { DISPATCH_CHAIN } else { n };
        let mut host = host.map_or(String::new(), |h| format!(",\"host_seconds\":{h:e}"));
        if submissions > 0 {
            host.push_str(&format!(",\"gpu_submissions\":{submissions},\"gpu_reused\":{reused}"));
        }
        println!(
            "{{\"kernel\":\"{name}\",{shape_json}\"size\":{json_size},\"tier\":\"{}\",\"backend\":\"{}\",\"threads\":{threads},\"simd\":\"{level}\",\"seconds\":{median:e},\"wall_seconds\":{wall:e},\"run_seconds\":{run_wall:e}{host},\"timed_by\":\"{}\",\"gflops\":{:.3},\"gbps\":{:.3}}}",
            a.tier,
            a.backend,
            if gpu.is_some() { "gpu" } else { "wall" },
            flops / median / 1e9,
            bytes / median / 1e9
        );
        return Ok(());
    }
    let what = match a.kernel {
        Kernel::Matmul | Kernel::MatmulF16 | Kernel::MatmulBf16 => {
            format!("{:.1} GFLOP/s", flops / median / 1e9)
        }
        Kernel::Dispatch => format!("{:.0} ns per instruction", median * 1e9),
        _ => format!("{:.2} GB/s", bytes / median / 1e9),
    };
    let shown = if matches!(a.kernel, Kernel::Dispatch) {
        format!("{:.3} µs", median * 1e6)
    } else {
        format!("{:.3} ms", median * 1e3)
    };
    let timed_by = match (gpu, host) {
        (Some(_), _) => format!(
            "GPU timestamps; {:.3} ms wall with submit and wait, {:.3} ms a whole run",
            wall * 1e3,
            run_wall * 1e3
        ),
        (None, Some(h)) if a.backend != "cpu" => format!(
            "wall; the host's own share {:.0} ns, the rest submitting and waiting; {reused} of {submissions} submissions reused an earlier run's command buffer",
            h * 1e9
        ),
        _ => "wall".into(),
    };
    let mut shown_name = if is_matmul && a.layout != "nn" { format!("{name} ({})", a.layout) } else { name };
    if a.act != "none" {
        shown_name.push_str(&format!(" act={}", a.act));
    }
    if split_gemm {
        shown_name.push_str(" (f32 on the tensor cores, three bf16 pieces an operand)");
    }
    let mut shown_size = match (a.kernel, a.row) {
        (Kernel::Dispatch, _) => format!("({DISPATCH_CHAIN} dependent ADDs of f32[1])"),
        (_, Some(_)) => format!("{n}x{row}"),
        (_, None) => n.to_string(),
    };
    if is_reduce {
        shown_size.push_str(&format!(" axis {axis}"));
    }
    println!(
        "{shown_name} {shown_size}  {} {} threads={threads} simd={level}: {shown}  {what}  (median of {}, {timed_by})",
        a.backend,
        a.tier,
        samples.len()
    );
    Ok(())
}
