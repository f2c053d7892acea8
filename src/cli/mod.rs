//! Subcommands and their shared plumbing (loading `.s` or `.bib`, atomic output files).

mod bench;
mod generate;
mod run;

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use clap::{Args, Parser, Subcommand};

use adeadvm::asm::{self, AsmOptions, DisasmOptions};
use adeadvm::format::{digest_hex, Program};

/// A deterministic bytecode virtual machine for tensor programs.
#[derive(Parser)]
#[command(name = "adeadvm", version, about, long_about = None, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Assemble a .s file into a verified .bib program.
    Asm(AsmArgs),
    /// Print a .bib program as assembly that assembles back to the same bytes.
    Disasm(DisasmArgs),
    /// Import an ONNX model (model.onnx) as a verified .bib program.
    Import(ImportArgs),
    /// Verify a program and print its digest and memory plan.
    Verify(VerifyArgs),
    /// Run a program (.bib, or .s assembled in memory) on .npy inputs.
    Run(RunArgs),
    /// Re-run a recorded run and prove the results identical bit for bit, or name the first
    /// instruction that differs.
    Replay(ReplayArgs),
    /// Show this machine: CPU features, memory, executors and the determinism tier each gives.
    Info,
    // The one-line help names every kernel, from the enum that defines them.
    #[command(about = bench::about())]
    Bench(bench::BenchArgs),
    /// Generate text with a generation program (programs/smollm2.s): greedy, the same tokens on
    /// every executor and at any batch size.
    Generate(generate::GenerateArgs),
}

/// How to read a program given on the command line (.bib, or .s assembled in memory).
#[derive(Args, Clone)]
struct SourceArgs {
    /// Define NAME=VALUE for the assembler (used as ${NAME} and as a dimension); repeatable.
    #[arg(short = 'D', value_name = "NAME=VALUE", value_parser = parse_define)]
    define: Vec<(String, String)>,
}

#[derive(Args)]
struct AsmArgs {
    /// The assembly source file.
    input: PathBuf,
    /// Where to write the program (default: the input with the extension .bib).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    source: SourceArgs,
    /// Write the program even if the verifier rejects it (for testing the verifier).
    #[arg(long)]
    no_verify: bool,
}

#[derive(Args)]
struct ImportArgs {
    /// The ONNX model (its external data files, if any, beside it).
    input: PathBuf,
    /// Where to write the program (default: the input with the extension .bib).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// The determinism tier of the program.
    #[arg(long, default_value = "strict", value_parser = ["strict", "fast"])]
    tier: String,
    /// Fix a symbolic input dimension (ONNX dim_param) to a size; repeatable. Others stay
    /// symbolic, bound when the program runs.
    #[arg(long = "dim", value_name = "NAME=N", value_parser = parse_dim)]
    dims: Vec<(String, u64)>,
    /// Fix a graph input's value at import (a shape fed as an input, say): it becomes a constant
    /// and shape computations that read it fold; the program has no such input. Repeatable.
    #[arg(long = "known-input", value_name = "NAME=FILE.npy", value_parser = parse_binding)]
    known_inputs: Vec<(String, PathBuf)>,
    /// Also write the assembly the model was lowered to (reassemble it with
    /// `adeadvm asm FILE -D MODEL=path/to/model.onnx`).
    #[arg(long, value_name = "FILE.s")]
    emit_asm: Option<PathBuf>,
}

#[derive(Args)]
struct DisasmArgs {
    /// The program (.bib).
    input: PathBuf,
    /// Write the assembly here instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Write constants of more than 64 elements as .npy files in this folder (default with -o:
    /// FILE.data next to it; without -o they are printed, see --constants).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Without -o or --data-dir, how constants of more than 64 elements (and a vocabulary) are
    /// printed: `full` (assembly that assembles back), `summary` (the first values and the
    /// size, for reading), or `auto`: summary on a terminal, full into a pipe or file.
    #[arg(long, value_name = "HOW", default_value = "auto", value_parser = ["auto", "full", "summary"])]
    constants: String,
}

#[derive(Args)]
struct VerifyArgs {
    /// The program (.bib, or .s assembled in memory).
    input: PathBuf,
    /// Bind a symbolic dimension for the memory plan; unbound ones are taken as 1. Repeatable.
    #[arg(long = "dim", value_name = "NAME=N", value_parser = parse_dim)]
    dims: Vec<(String, u64)>,
    #[command(flatten)]
    source: SourceArgs,
}

#[derive(Args)]
struct RunArgs {
    /// The program (.bib, or .s assembled in memory).
    program: PathBuf,
    /// Bind an input to a .npy file; repeatable. float32, float16, int32 (int64 when every value
    /// fits), uint16 holding bf16 bits; little- or big-endian.
    #[arg(short, long = "input", value_name = "NAME=FILE.npy", value_parser = parse_binding)]
    inputs: Vec<(String, PathBuf)>,
    /// Write an output to a .npy file; repeatable. Outputs not named here are summarized.
    #[arg(short, long = "output", value_name = "NAME=FILE.npy", value_parser = parse_binding)]
    outputs: Vec<(String, PathBuf)>,
    /// Override the program's determinism tier.
    #[arg(long, value_parser = ["strict", "fast"])]
    tier: Option<String>,
    /// Print a per-opcode profile (count, time, GFLOP/s, GB/s) to stderr.
    #[arg(long)]
    profile: bool,
    /// Write a Chrome/Perfetto trace of the run (one event per instruction).
    #[arg(long, value_name = "FILE.json")]
    profile_json: Option<PathBuf>,
    /// Record the run (inputs and a digest of every tensor written) for `adeadvm replay`.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Memory budget in bytes (suffixes K, M, G allowed); default: the memory available now.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    max_memory: Option<u64>,
    /// Device memory budget in bytes for --backend vulkan or auto (suffixes K, M, G allowed);
    /// default: the device's memory.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    max_device_memory: Option<u64>,
    /// End the run after this many executed instructions.
    #[arg(long, value_name = "N")]
    max_steps: Option<u64>,
    /// Worker threads (default: every core). Results are the same for any number.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Executor: cpu, vulkan (every tensor instruction on the GPU), or auto (large instructions
    /// on a Vulkan GPU when there is one, never on a CPU-emulated device).
    #[arg(long, default_value = "auto", value_parser = ["auto", "cpu", "vulkan"])]
    backend: String,
    /// Split the batch over several executors at once, e.g. `gpu0,gpu1,cpu` (gpuN: Vulkan device
    /// N of `adeadvm info`): every input is cut along its first axis, in proportion to each
    /// device's speed, and the outputs joined. Strict-tier outputs are the bits of one device's run.
    #[arg(long, value_name = "LIST", conflicts_with_all = ["backend", "profile", "profile_json", "record"])]
    devices: Option<String>,
    /// Cut the program into stages run one after the other, one per device listed, e.g.
    /// `gpu0,gpu1` or `gpu0,cpu`: each device holds only its stage's constants, and the tensors
    /// live at a cut travel through host memory. Strict-tier outputs are the bits of one run.
    #[arg(long, value_name = "LIST", conflicts_with_all = ["backend", "profile", "profile_json", "record", "devices"])]
    pipeline: Option<String>,
    /// With --pipeline: cut before these instruction indices (one fewer than devices), instead
    /// of where the constants' bytes balance.
    #[arg(long, value_name = "N,N", value_delimiter = ',', requires = "pipeline")]
    cuts: Vec<usize>,
    /// With --pipeline: cut the batch (the first axis every input and output shares) into N
    /// slices that flow through the stages one after another, every stage busy at once.
    #[arg(long, value_name = "N", requires = "pipeline")]
    micro_batches: Option<usize>,
    #[command(flatten)]
    source: SourceArgs,
}

#[derive(Args)]
struct ReplayArgs {
    /// The program (.bib, or .s assembled in memory).
    program: PathBuf,
    /// The trace written by `adeadvm run --record`.
    trace: PathBuf,
    /// Override the determinism tier for the replay.
    #[arg(long, value_parser = ["strict", "fast"])]
    tier: Option<String>,
    /// Executor to replay on: cpu, vulkan or auto.
    #[arg(long, default_value = "auto", value_parser = ["auto", "cpu", "vulkan"])]
    backend: String,
    /// Worker threads for the replay (default: every core).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    #[command(flatten)]
    source: SourceArgs,
}

fn parse_binding(s: &str) -> std::result::Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), PathBuf::from(v))),
        _ => Err(format!("expected NAME=FILE, got `{s}`")),
    }
}

fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let (num, mult) = match s.trim().char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&s[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("`{s}` is not a byte count (e.g. 512M, 2G)"))
}

fn parse_define(s: &str) -> std::result::Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if adeadvm::format::is_identifier(k) => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected NAME=VALUE with NAME an identifier, got `{s}`")),
    }
}

fn parse_dim(s: &str) -> std::result::Result<(String, u64), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("expected NAME=N, got `{s}`"))?;
    let n = v.parse::<u64>().map_err(|_| format!("`{v}` is not a non-negative integer"))?;
    Ok((k.to_string(), n))
}

/// Runs the command line; returns the process exit status.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    // A panic is a bug in adeadvm, never the user's fault; it still must not end in Rust's
    // status 101 with a backtrace, so report it as one line and fail with status 1.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("adeadvm: internal error: {info}. Please report this with the input that caused it.");
    }));
    let result = std::panic::catch_unwind(|| match cli.command {
        Command::Asm(a) => cmd_asm(a),
        Command::Disasm(a) => cmd_disasm(a),
        Command::Import(a) => cmd_import(a),
        Command::Verify(a) => cmd_verify(a),
        Command::Run(a) => run::cmd_run(a),
        Command::Replay(a) => run::cmd_replay(a),
        Command::Info => run::cmd_info(),
        Command::Bench(a) => bench::cmd_bench(a),
        Command::Generate(a) => generate::cmd_generate(a),
    });
    match result {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            report(&e);
            1
        }
        Err(_) => 1,
    }
}

fn report(e: &anyhow::Error) {
    // Verifier diagnostics rendered against their source are complete text too.
    if let Some(rendered) = e.downcast_ref::<RenderedDiagnostics>() {
        eprint!("{}", rendered.0);
        return;
    }
    // Assembler diagnostics are already complete, multi-line, rustc-style text.
    let asm = e.downcast_ref::<asm::AsmErrors>().or(match e.downcast_ref::<adeadvm::Error>() {
        Some(adeadvm::Error::Asm(a)) => Some(a),
        _ => None,
    });
    if let Some(asm) = asm {
        eprint!("{asm}");
        return;
    }
    // Context added here comes first, then its causes; the library's errors already include
    // their own sources in their messages, so a cause the text already holds is not repeated.
    let mut msg = format!("error: {e}");
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !msg.contains(&text) {
            msg.push_str(&format!(": {text}"));
        }
    }
    eprintln!("{msg}");
}

/// Reads a program: a .s file is assembled in memory, anything else is loaded as .bib.
fn load_program(path: &Path, source: &SourceArgs) -> Result<Program> {
    Ok(adeadvm::api::Program::read_unverified(path, &source.define)?)
}

/// Diagnostics already rendered rustc-style (several lines, a summary at the end), which
/// `report` prints as they are.
#[derive(Debug)]
struct RenderedDiagnostics(String);

impl std::fmt::Display for RenderedDiagnostics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RenderedDiagnostics {}

/// The largest source file read to show verifier errors in context: a `.s` this large is
/// no program (and `/dev/zero` named as a program's source must not be read forever).
const MAX_SOURCE_BYTES: u64 = 64 << 20;

/// The text of the file `program` (loaded from `path`) was assembled from, and the name to show
/// for it: `path` itself for a `.s`; for a `.bib`, its recorded source name (the assembled
/// file's name), looked up in the `.bib`'s folder. No text when that file is not there.
fn source_of(path: &Path, program: &Program) -> (Option<String>, String) {
    let read = |file: &Path| -> Option<String> {
        let meta = std::fs::metadata(file).ok()?;
        if !meta.is_file() || meta.len() > MAX_SOURCE_BYTES {
            return None;
        }
        String::from_utf8(std::fs::read(file).ok()?).ok()
    };
    if path.extension().is_some_and(|e| e == "s") {
        return (read(path), path.display().to_string());
    }
    let recorded = Path::new(&program.debug.source);
    if program.debug.source.is_empty() || recorded.is_absolute() {
        return (None, path.display().to_string());
    }
    let beside = path.parent().unwrap_or(Path::new("")).join(recorded);
    match read(&beside) {
        Some(text) => (Some(text), beside.display().to_string()),
        None => (None, program.debug.source.clone()),
    }
}

/// Verifies `program`, loaded from `path` (with a tier override). A verification failure
/// becomes every error rendered rustc-style against the program's source (see
/// `VerifyErrors::render`); any other error is passed on.
fn verify_loaded(
    program: Program,
    path: &Path,
    tier: Option<adeadvm::isa::Tier>,
) -> Result<adeadvm::api::Program> {
    let (source, name) = source_of(path, &program);
    adeadvm::api::Program::verify_with(program, tier).map_err(|e| match e {
        adeadvm::Error::Verify(errors) => {
            RenderedDiagnostics(errors.render(source.as_deref(), &name, &path.display().to_string())).into()
        }
        e => e.into(),
    })
}

fn assemble_file(path: &Path, source: &SourceArgs) -> Result<Program> {
    let text = adeadvm::input::read_file(path, adeadvm::input::DEFAULT_READ_LIMIT)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let text = String::from_utf8(text).map_err(|_| anyhow!("{} is not UTF-8 text", path.display()))?;
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let options = AsmOptions { defines: source.define.clone(), base_dir };
    Ok(asm::assemble(&text, &path.display().to_string(), &options)?)
}

fn cmd_asm(a: AsmArgs) -> Result<()> {
    let program = assemble_file(&a.input, &a.source)?;
    let bytes = program.to_bytes();
    let program = Program::from_bytes(bytes.clone())?;
    if !a.no_verify {
        verify_loaded(program.clone(), &a.input, None)?;
    }
    let out = a.output.unwrap_or_else(|| a.input.with_extension("bib"));
    write_atomically(&out, &bytes)?;
    eprintln!(
        "wrote {} ({} instructions, {} tensors, {} bytes, digest {})",
        out.display(),
        program.code.len(),
        program.tensors.len(),
        bytes.len(),
        &digest_hex(&program.digest)[..16]
    );
    Ok(())
}

fn cmd_import(a: ImportArgs) -> Result<()> {
    let out = a.output.clone().unwrap_or_else(|| a.input.with_extension("bib"));
    check_output_path(&out)?;
    if let Some(s) = &a.emit_asm {
        check_output_path(s)?;
    }
    let mut known_inputs = Vec::new();
    for (name, path) in &a.known_inputs {
        let t = adeadvm::api::read_npy(path, None).with_context(|| format!("--known-input {name}"))?;
        known_inputs.push((name.clone(), adeadvm::onnx::TensorData::from_host(&t)));
    }
    let options = adeadvm::onnx::ImportOptions {
        tier: adeadvm::isa::Tier::from_name(&a.tier).expect("clap checked the tier"),
        dims: a.dims.clone(),
        known_inputs,
    };
    let imported = adeadvm::onnx::import(&a.input, &options)?;
    let bytes = imported.program.to_bytes();
    let program = Program::from_bytes(bytes.clone())?;
    verify_loaded(program.clone(), &a.input, None)
        .context("the imported program does not verify (a bug in the importer; --emit-asm shows it)")?;
    if let Some(s) = &a.emit_asm {
        write_atomically(s, imported.asm.as_bytes())?;
    }
    write_atomically(&out, &bytes)?;
    let names = |b: &[adeadvm::onnx::Binding]| -> String {
        b.iter()
            .map(|b| {
                let ty = adeadvm::onnx::proto::data_type::name(b.elem);
                if b.name == b.onnx_name {
                    format!("{} ({ty})", b.name)
                } else {
                    format!("{} (ONNX {:?}, {ty})", b.name, b.onnx_name)
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!(
        "wrote {} ({} instructions, {} tensors, {} bytes, digest {})\n  inputs: {}\n  outputs: {}",
        out.display(),
        program.code.len(),
        program.tensors.len(),
        bytes.len(),
        &digest_hex(&program.digest)[..16],
        names(&imported.inputs),
        names(&imported.outputs),
    );
    Ok(())
}

fn cmd_disasm(a: DisasmArgs) -> Result<()> {
    let program = Program::load(&a.input)?;
    let data_dir =
        a.data_dir.or_else(|| a.output.as_ref().map(|o| PathBuf::from(format!("{}.data", o.display()))));
    // Paths of .npy constants are written relative to where the assembly goes.
    let asm_dir = match a.output.as_ref().and_then(|o| o.parent()) {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // A model's weights printed in full take minutes to scroll past on a terminal; into a
    // pipe or a file they are what makes the text assemble back.
    let summarize_large = a.output.is_none()
        && match a.constants.as_str() {
            "summary" => true,
            "full" => false,
            _ => std::io::IsTerminal::is_terminal(&std::io::stdout()),
        };
    let text = asm::disassemble(&program, &DisasmOptions { data_dir, asm_dir, summarize_large })?;
    match a.output {
        Some(out) => write_atomically(&out, text.as_bytes()),
        None => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            match stdout.write_all(text.as_bytes()) {
                // A closed pipe (`| head`) is not an error worth reporting.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                r => r.context("cannot write to standard output"),
            }
        }
    }
}

fn cmd_verify(a: VerifyArgs) -> Result<()> {
    let program = load_program(&a.input, &a.source)?;
    let loaded = verify_loaded(program, &a.input, None)?;
    print!("{}", loaded.verified().report(&a.dims)?);
    Ok(())
}

/// Fails early, before any work, when `path` cannot be written because its folder does not
/// exist or is not a folder (the write itself still reports anything else).
fn check_output_path(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(anyhow!("cannot write {}: {} is not a folder", path.display(), dir.display())),
        Err(e) => Err(anyhow!("cannot write {}: the folder {}: {e}", path.display(), dir.display())),
    }
}

/// Writes through a temporary file and a rename (see `adeadvm::output::write_atomically`).
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    adeadvm::output::write_atomically(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}
