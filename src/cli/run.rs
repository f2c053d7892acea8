//! `adeadvm run`, `replay` and `info`.

use std::io::IsTerminal;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use adeadvm::api;
use adeadvm::format::digest_hex;
use adeadvm::output::OutputBatch;
use adeadvm::profile::{Fanout, Profiler, MAX_TIMELINE_EVENTS};
use adeadvm::trace::{Recorder, Replayer, Trace, DEFAULT_RECORDING_LIMIT, DEFAULT_VALUE_BUDGET};
use adeadvm::vm::{HostTensor, Observer, StepEvent, Wants};

use super::{check_output_path, load_program, verify_loaded, ReplayArgs, RunArgs, SourceArgs};

/// Loads, applies a tier override, and verifies.
fn prepare(path: &Path, source: &SourceArgs, tier: Option<&str>) -> Result<api::Program> {
    let tier = tier.map(api::parse_tier).transpose()?;
    verify_loaded(load_program(path, source)?, path, tier)
}

pub fn cmd_run(a: RunArgs) -> Result<()> {
    let loaded = prepare(&a.program, &a.source, a.tier.as_deref())?;
    let program = loaded.verified();
    let p = program.program();
    for (name, _) in &a.outputs {
        if !p.outputs.iter().any(|o| &o.name == name) {
            let known: Vec<&str> = p.outputs.iter().map(|o| o.name.as_str()).collect();
            bail!(
                "--output {name}: the program has no output `{name}` (its outputs are: {})",
                known.join(", ")
            );
        }
    }
    // A run can be long: an output that cannot be written is reported before it starts.
    for path in a.outputs.iter().map(|(_, p)| p).chain(&a.record).chain(&a.profile_json) {
        check_output_path(path)?;
    }
    let config = api::Config {
        backend: api::Backend::from_name(&a.backend)?,
        tier: None,
        threads: a.threads,
        max_memory: a.max_memory,
        max_device_memory: a.max_device_memory,
        max_steps: a.max_steps,
        vulkan_device: None,
    };
    if let Some(devices) = &a.devices {
        return run_split(&a, &loaded, &adeadvm::split::Place::parse_list(devices)?, &config);
    }
    if let Some(list) = &a.pipeline {
        return run_pipeline(&a, &loaded, &adeadvm::split::Place::parse_list(list)?, &config);
    }
    let mut vm = api::Session::new(&loaded, &config)?;
    let mut recorded_inputs = Vec::new();
    for (name, path) in &a.inputs {
        let tensor = read_input(&a, &loaded, name, path)?;
        let bind = |vm: &mut api::Session, tensor| {
            vm.set_input(name, tensor).with_context(|| format!("--input {name}={}", path.display()))
        };
        // Only a recording keeps a second copy of the inputs (the trace holds them).
        if a.record.is_some() {
            bind(&mut vm, tensor.clone())?;
            recorded_inputs.push((name.clone(), tensor));
        } else {
            bind(&mut vm, tensor)?;
        }
    }

    let mut progress = Progress::new(program.instructions().len());
    // What a recording or a timeline keeps per step counts against the memory budget too.
    let recording_limit = a.max_memory.unwrap_or(u64::MAX).min(DEFAULT_RECORDING_LIMIT);
    let timeline_limit = Profiler::events_within(a.max_memory.unwrap_or(u64::MAX)).min(MAX_TIMELINE_EVENTS);
    let mut profiler = Profiler::with_limit(a.profile_json.is_some(), timeline_limit);
    let mut recorder = Recorder::with_limit(DEFAULT_VALUE_BUDGET, recording_limit);
    let mut observers: Vec<&mut dyn Observer> = vec![&mut progress];
    if a.profile || a.profile_json.is_some() {
        observers.push(&mut profiler);
    }
    if a.record.is_some() {
        observers.push(&mut recorder);
    }
    let stats = vm.run_observed(&mut Fanout(observers))?;
    progress.clear();
    // A recording or timeline that reached its limit stopped the run: an error, nothing written.
    if let Some(e) = recorder.limit_error() {
        return Err(e.into());
    }
    if let Some(e) = profiler.limit_error() {
        bail!(e);
    }

    let mut results = stage_outputs(&a, &vm.outputs())?;
    let mut recorded_steps = 0;
    if let Some(path) = &a.record {
        let outputs = vm.outputs().iter().map(|(n, t)| (n.to_string(), t.digest())).collect();
        recorded_inputs.sort_by(|x, y| x.0.cmp(&y.0));
        let trace = recorder.finish(p.digest, p.tier, recorded_inputs, outputs);
        recorded_steps = trace.steps.len();
        results.stage(path, &trace.to_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &a.profile_json {
        results
            .stage(path, profiler.chrome_trace().as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    results.commit().context("cannot put the results in place")?;

    print_summaries(&a, &vm.outputs());
    if let Some(path) = &a.record {
        eprintln!("recorded {recorded_steps} steps to {}", path.display());
    }
    if a.profile {
        eprintln!(
            "\nprofile ({}, {} steps, {:.3} ms, arena {} bytes):",
            a.backend,
            stats.steps,
            stats.elapsed.as_secs_f64() * 1e3,
            stats.arena_bytes
        );
        eprint!("{}", profiler.table());
    }
    Ok(())
}

/// Reads `--input name=path` for the program's declared dtype.
fn read_input(a: &RunArgs, program: &api::Program, name: &str, path: &Path) -> Result<HostTensor> {
    let p = program.verified().program();
    let declared = p.tensors.iter().find(|t| t.name == name && t.kind == adeadvm::format::TensorKind::Input);
    // An input larger than the memory budget could never run: refused before it is read.
    let limit = a.max_memory.unwrap_or(adeadvm::input::DEFAULT_READ_LIMIT);
    adeadvm::npy::read_limited(path, declared.map(|d| d.dtype), limit)
        .with_context(|| format!("--input {name}={}", path.display()))
}

/// Stages every `--output` file. Every result is written to a temporary first and put in
/// place only when all are written: a run delivers all its files or changes none.
fn stage_outputs(a: &RunArgs, outputs: &[(&str, &HostTensor)]) -> Result<OutputBatch> {
    let mut results = OutputBatch::new();
    for (name, path) in &a.outputs {
        let (_, t) = outputs
            .iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| anyhow!("output `{name}` was not written"))?;
        adeadvm::npy::stage(&mut results, path, t)?;
    }
    Ok(results)
}

/// Prints a summary line for each output not written to a file.
fn print_summaries(a: &RunArgs, outputs: &[(&str, &HostTensor)]) {
    for (name, t) in outputs {
        if !a.outputs.iter().any(|(n, _)| n == name) {
            println!("{}", summarize(name, t));
        }
    }
}

/// `adeadvm run --devices`: one batch over several executors (see [`adeadvm::split`]).
fn run_split(
    a: &RunArgs,
    program: &api::Program,
    places: &[adeadvm::split::Place],
    config: &api::Config,
) -> Result<()> {
    let mut split = adeadvm::split::SplitSession::new(program, places, config)?;
    for (name, path) in &a.inputs {
        let tensor = read_input(a, program, name, path)?;
        split.set_input(name, tensor).with_context(|| format!("--input {name}={}", path.display()))?;
    }
    let stats = split.run()?;
    stage_outputs(a, &split.outputs())?.commit().context("cannot put the results in place")?;
    print_summaries(a, &split.outputs());
    for part in stats {
        eprintln!("{}: {} rows in {:.3} ms", part.place.name(), part.rows, part.elapsed.as_secs_f64() * 1e3);
    }
    Ok(())
}

/// `adeadvm run --pipeline`: the program cut into stages over several executors (see
/// [`adeadvm::pipeline`]).
fn run_pipeline(
    a: &RunArgs,
    program: &api::Program,
    places: &[adeadvm::split::Place],
    config: &api::Config,
) -> Result<()> {
    use adeadvm::pipeline::PipelineSession;
    let mut pipeline = if a.cuts.is_empty() {
        PipelineSession::new(program, places, config)?
    } else {
        PipelineSession::with_cuts(program, places, &a.cuts, config)?
    };
    if let Some(n) = a.micro_batches {
        pipeline.set_micro_batches(n)?;
    }
    for (name, path) in &a.inputs {
        let tensor = read_input(a, program, name, path)?;
        pipeline.set_input(name, tensor).with_context(|| format!("--input {name}={}", path.display()))?;
    }
    let began = std::time::Instant::now();
    let stats = pipeline.run()?;
    let wall = began.elapsed();
    stage_outputs(a, &pipeline.outputs())?.commit().context("cannot put the results in place")?;
    print_summaries(a, &pipeline.outputs());
    for (s, (part, (_, stage))) in stats.iter().zip(pipeline.stages()).enumerate() {
        eprintln!(
            "stage {}: {} ran instructions {}..{} ({} of constants) in {:.3} ms{}",
            s + 1,
            part.place.name(),
            part.range.start,
            part.range.end,
            short_bytes(stage.const_bytes),
            part.elapsed.as_secs_f64() * 1e3,
            if stage.carried_out.is_empty() {
                String::new()
            } else {
                format!(", handing on {} ({})", short_bytes(part.carried_bytes), stage.carried_out.join(", "))
            }
        );
    }
    if places.len() > stats.len() {
        eprintln!("(the program has places for {} stages only)", stats.len());
    }
    if a.micro_batches.is_some_and(|n| n > 1) {
        eprintln!("{:.3} ms in all, the stages working at once", wall.as_secs_f64() * 1e3);
    }
    Ok(())
}

/// `1.50 MiB`: [`adeadvm::verify::bytes_text`] without the exact count.
fn short_bytes(n: u64) -> String {
    let text = adeadvm::verify::bytes_text(n);
    text.split(" (").next().unwrap_or(&text).to_string()
}

/// One line per output: name, dtype and shape, digest, and the first values.
fn summarize(name: &str, t: &HostTensor) -> String {
    const SHOWN: usize = 8;
    // Only the values shown are converted: a whole output would be a second copy of it.
    let shown = t.len().min(SHOWN);
    let head = HostTensor::from_bytes(t.dtype, vec![shown], &t.bytes()[..shown * t.dtype.size()]);
    let values: Vec<String> = match head.as_ref().and_then(HostTensor::to_f32) {
        Some(v) => v.iter().map(|x| format!("{x}")).collect(),
        None => head.and_then(|h| h.to_i32()).unwrap_or_default().iter().map(|x| x.to_string()).collect(),
    };
    let more = if t.len() > SHOWN { ", …" } else { "" };
    format!(
        "{name}: {}{:?} digest {} [{}{more}]",
        t.dtype,
        t.shape,
        &digest_hex(&t.digest())[..16],
        values.join(", ")
    )
}

pub fn cmd_replay(a: ReplayArgs) -> Result<()> {
    let loaded = prepare(&a.program, &a.source, a.tier.as_deref())?;
    let program = loaded.verified();
    let p = program.program();
    let trace = Trace::load(&a.trace)?;
    if trace.program_digest != p.digest {
        eprintln!(
            "warning: the program differs from the one recorded (recorded {}, now {}); comparing anyway",
            &digest_hex(&trace.program_digest)[..16],
            &digest_hex(&p.digest)[..16]
        );
    }
    let config = api::Config {
        backend: api::Backend::from_name(&a.backend)?,
        threads: a.threads,
        ..api::Config::default()
    };
    let mut vm = api::Session::new(&loaded, &config)?;
    for (name, t) in &trace.inputs {
        vm.set_input(name, t).with_context(|| format!("the recorded input `{name}`"))?;
    }
    // What actually ran: auto without a GPU is the CPU.
    let executor = match vm.vm().gpu_device() {
        Some(device) => format!("{} with {device}", a.backend),
        None => "cpu".to_string(),
    };
    let mut progress = Progress::new(program.instructions().len());
    let mut replayer = Replayer::new(&trace);
    let stats = vm.run_observed(&mut Fanout(vec![&mut progress, &mut replayer]))?;
    progress.clear();
    let outputs: Vec<(String, [u8; 32])> =
        vm.outputs().iter().map(|(n, t)| (n.to_string(), t.digest())).collect();
    replayer.finish(&outputs);
    match &replayer.divergence {
        None => {
            let distinct: std::collections::BTreeSet<u32> = trace.steps.iter().map(|s| s.index).collect();
            let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
            println!(
                "identical: all {} ({}) and {} match the recording bit for bit (replayed on {})",
                plural(stats.steps as usize, "step"),
                plural(distinct.len(), "distinct instruction"),
                plural(outputs.len(), "output"),
                executor
            );
            Ok(())
        }
        Some(d) => {
            print!("{}", Trace::describe(d, p, program.instructions()));
            bail!("the replay differs from the recording")
        }
    }
}

pub fn cmd_info() -> Result<()> {
    use raw_cpuid::CpuId;
    let cpu = CpuId::new();
    let vendor = cpu.get_vendor_info().map_or("unknown".to_string(), |v| v.as_str().to_string());
    let brand =
        cpu.get_processor_brand_string().map_or("unknown".to_string(), |b| b.as_str().trim().to_string());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut features = Vec::new();
    if let Some(f) = cpu.get_feature_info() {
        for (on, name) in
            [(f.has_sse42(), "sse4.2"), (f.has_avx(), "avx"), (f.has_fma(), "fma"), (f.has_f16c(), "f16c")]
        {
            if on {
                features.push(name);
            }
        }
    }
    if let Some(e) = cpu.get_extended_feature_info() {
        for (on, name) in [
            (e.has_avx2(), "avx2"),
            (e.has_avx512f(), "avx512f"),
            (e.has_avx512bw(), "avx512bw"),
            (e.has_avx512vl(), "avx512vl"),
            (e.has_avx512dq(), "avx512dq"),
        ] {
            if on {
                features.push(name);
            }
        }
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem = |key: &str| -> String {
        meminfo
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or("unknown".into(), |kb| format!("{:.1} GiB", kb as f64 / (1 << 20) as f64))
    };
    println!("adeadvm {}", env!("CARGO_PKG_VERSION"));
    println!("cpu:     {brand} ({vendor}), {cores} logical cores");
    println!("simd:    {}", if features.is_empty() { "none detected".into() } else { features.join(" ") });
    println!("memory:  {} total, {} available", mem("MemTotal:"), mem("MemAvailable:"));
    println!("executors:");
    // What the CPU executor will use, as a session decides it (`SimdLevel::from_env`), not
    // only what the CPU has: ADEADVM_SIMD can lower it.
    let level = adeadvm::exec::cpu::SimdLevel::from_env();
    let kernels = match level {
        adeadvm::exec::cpu::SimdLevel::Scalar => "the scalar reference for every opcode".to_string(),
        l => format!("{} SIMD kernels (the scalar reference where an opcode has none)", l.name()),
    };
    let forced = match std::env::var("ADEADVM_SIMD") {
        Ok(v) => format!(" (ADEADVM_SIMD={v})"),
        Err(_) => String::new(),
    };
    println!(
        "  cpu     {kernels}{forced}, {cores} worker thread{}; tiers: strict (bit-identical everywhere), fast",
        if cores == 1 { "" } else { "s" }
    );
    print_vulkan_info();
    Ok(())
}

/// The Vulkan lines of `adeadvm info`: each device with its driver and limits, or why there is none.
fn print_vulkan_info() {
    match adeadvm::exec::vulkan::devices() {
        Err(e) => println!("  vulkan  {e}; every program runs on the CPU"),
        Ok(devs) => {
            println!(
                "  vulkan  {} device(s); every opcode (strict: the CPU's bits; KERNEL: fast tier); --backend vulkan, or auto (GPUs only)",
                devs.len()
            );
            for d in devs {
                let (ma, mi, pa) = d.api_version;
                let driver = if d.driver_name.is_empty() {
                    format!("driver version {:#x}", d.driver_version)
                } else {
                    format!("{} {} (driver version {:#x})", d.driver_name, d.driver_info, d.driver_version)
                };
                let flag = |v: Option<bool>| v.map_or("unknown", |b| if b { "yes" } else { "no" });
                let [sx, sy, sz] = d.max_compute_workgroup_size;
                let [cx, cy, cz] = d.max_compute_workgroup_count;
                println!(
                    "    [{}] {} ({}, {}), Vulkan {ma}.{mi}.{pa}",
                    d.index,
                    d.name,
                    d.device_type,
                    d.vendor()
                );
                println!("        driver: {driver}");
                println!(
                    "        compute: {} invocations/workgroup, size {sx}x{sy}x{sz}, count {cx}x{cy}x{cz}; \
                     storage buffer range {} bytes; subgroup {}; multiprocessors {}",
                    d.max_compute_workgroup_invocations,
                    d.max_storage_buffer_range,
                    d.subgroup_size.map_or("unknown".into(), |s| s.to_string()),
                    d.multiprocessors.map_or("unknown".into(), |s| s.to_string())
                );
                println!(
                    "        fp32 denormals: preserve {}, flush-to-zero {}; strict tier: {}",
                    flag(d.denorm_preserve_f32),
                    flag(d.denorm_ftz_f32),
                    if d.has_compute_queue {
                        "yes (shaders flush denormals and avoid vendor rounding explicitly)"
                    } else {
                        "no (no compute queue)"
                    }
                );
                match d.coopmat {
                    Some(c) => println!(
                        "        tensor cores (fast-tier MATMUL): {} on workgroup-scope cooperative matrices, granularity {}{}",
                        if c.bf16 { "f16 and bf16" } else { "f16" },
                        c.granularity.map(|g| g.to_string()).join("x"),
                        if c.bf16 { "; large f32 ones as three bf16 pieces each" } else { "" }
                    ),
                    None => println!(
                        "        tensor cores (fast-tier MATMUL): none (f16 and bf16 widen to f32; needs VK_NV_cooperative_matrix2)"
                    ),
                }
            }
        }
    }
}

/// Progress on stderr for runs longer than a second, when stderr is a terminal (or
/// ADEADVM_PROGRESS=1 asks for it anyway).
struct Progress {
    start: Instant,
    last: Duration,
    code_len: usize,
    enabled: bool,
    shown: bool,
}

impl Progress {
    fn new(code_len: usize) -> Progress {
        let enabled =
            std::io::stderr().is_terminal() || std::env::var_os("ADEADVM_PROGRESS").is_some_and(|v| v == "1");
        Progress { start: Instant::now(), last: Duration::ZERO, code_len, enabled, shown: false }
    }
    fn clear(&mut self) {
        if self.shown {
            eprintln!();
        }
    }
}

impl Observer for Progress {
    fn wants(&self) -> Wants {
        Wants::default()
    }
    fn step(&mut self, e: &StepEvent<'_>) -> ControlFlow<()> {
        if self.enabled && e.step.is_multiple_of(64) {
            let now = self.start.elapsed();
            if now > Duration::from_secs(1) && now - self.last > Duration::from_millis(250) {
                self.last = now;
                self.shown = true;
                eprint!(
                    "\r  {:.1}s  step {}  instruction {}/{} ({})      ",
                    now.as_secs_f64(),
                    e.step,
                    e.index,
                    self.code_len,
                    e.instruction.insn.info().mnemonic
                );
            }
        }
        ControlFlow::Continue(())
    }
}
