//! `adeadvm generate`: text from a generation program (programs/smollm2.s).

use std::io::IsTerminal;
use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use adeadvm::api;
use adeadvm::generate::{Generation, GenerationProgram, Request};
use adeadvm::isa::Insn;
use adeadvm::profile::Fanout;
use adeadvm::trace::{Recorder, DEFAULT_VALUE_BUDGET};
use adeadvm::vm::{HostTensor, Observer, StepEvent, Wants};

use super::{check_output_path, load_program, verify_loaded, SourceArgs};

#[derive(Args)]
pub struct GenerateArgs {
    /// The generation program (.bib, or .s assembled in memory), e.g. smollm2.bib.
    program: PathBuf,
    /// A prompt as text (tokenized with the vocabulary the program carries); repeat it to run
    /// several prompts as one batch.
    #[arg(long, value_name = "TEXT")]
    prompt: Vec<String>,
    /// A prompt as comma-separated token ids (`1,2,3`); repeatable, after the --prompt ones.
    #[arg(long, value_name = "IDS", value_parser = parse_ids)]
    prompt_ids: Vec<Vec<i64>>,
    /// Send text prompts as they are, without the chat template the vocabulary carries (by
    /// default a text prompt is wrapped as one user turn of a ChatML template, and the model's
    /// answer follows).
    #[arg(long)]
    raw: bool,
    /// Tokens to generate per prompt at most.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_tokens: usize,
    /// Generate exactly --max-tokens tokens, past the end-of-text token.
    #[arg(long)]
    ignore_eos: bool,
    /// Print the generated ids and text (and timing) as JSON.
    #[arg(long)]
    json: bool,
    /// Write the logits that chose the first tokens as a float32 .npy: [kept, vocab] for one
    /// prompt, [prompts, kept, vocab] for several.
    #[arg(long, value_name = "FILE.npy")]
    logits_out: Option<PathBuf>,
    /// Record the run for `adeadvm replay` (which names the first instruction that differs).
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Override the program's determinism tier.
    #[arg(long, value_parser = ["strict", "fast"])]
    tier: Option<String>,
    /// Worker threads (default: every core). The tokens are the same for any number.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Executor: cpu, vulkan, or auto (large instructions on a Vulkan GPU when there is one).
    #[arg(long, default_value = "auto", value_parser = ["auto", "cpu", "vulkan"])]
    backend: String,
    #[command(flatten)]
    source: SourceArgs,
}

fn parse_ids(s: &str) -> std::result::Result<Vec<i64>, String> {
    s.split(',')
        .map(|t| {
            t.trim()
                .parse::<i64>()
                .map_err(|_| format!("`{}` is not a token id (expected e.g. 1,2,3)", t.trim()))
        })
        .collect()
}

pub fn cmd_generate(a: GenerateArgs) -> Result<()> {
    if a.prompt.is_empty() && a.prompt_ids.is_empty() {
        bail!("give a prompt: --prompt TEXT or --prompt-ids 1,2,3");
    }
    for path in a.logits_out.iter().chain(&a.record) {
        check_output_path(path)?;
    }
    let tier = a.tier.as_deref().map(api::parse_tier).transpose()?;
    let program = verify_loaded(load_program(&a.program, &a.source)?, &a.program, tier)?;
    let vocab = adeadvm::tokenizer::Tokenizer::from_program(program.verified().program())?;
    let generator = GenerationProgram::new(program)?;
    let mut prompts = Vec::new();
    for text in &a.prompt {
        let Some(tok) = &vocab else {
            bail!("this program carries no vocabulary (assemble it with `.vocab gguf(...)`), so give --prompt-ids instead of --prompt");
        };
        // The chat template when the vocabulary has a ChatML one (SmolLM2-Instruct's), else the
        // text as it is.
        let text = if a.raw || !tok.has_chatml_template() { text.clone() } else { tok.chat_prompt(text) };
        prompts.push(tok.encode(&text).into_iter().map(i64::from).collect());
    }
    prompts.extend(a.prompt_ids.iter().cloned());
    let stop = if a.ignore_eos { None } else { vocab.as_ref().and_then(|t| t.eos_id()) };
    let request = Request { prompts, max_new: a.max_tokens, stop };

    let config = api::Config {
        backend: api::Backend::from_name(&a.backend)?,
        threads: a.threads,
        ..api::Config::default()
    };
    let mut session = api::Session::new(generator.program(), &config)?;
    let steps = request.prompts.iter().map(Vec::len).max().unwrap_or(0) - 1 + request.max_new;
    let mut progress = StepProgress::new(steps);
    let mut recorder = Recorder::new(DEFAULT_VALUE_BUDGET);
    let mut observers: Vec<&mut dyn Observer> = vec![&mut progress];
    if a.record.is_some() {
        observers.push(&mut recorder);
    }
    let out = generator.generate(&mut session, &request, &mut Fanout(observers))?;
    progress.clear();
    if let Some(e) = recorder.limit_error() {
        return Err(e.into());
    }

    if let Some(path) = &a.record {
        let p = generator.program().verified().program();
        let mut inputs: Vec<(String, HostTensor)> =
            generator.inputs(&request)?.into_iter().map(|(n, t)| (n.to_string(), t)).collect();
        inputs.sort_by(|x, y| x.0.cmp(&y.0));
        let outputs = session.outputs().iter().map(|(n, t)| (n.to_string(), t.digest())).collect();
        let trace = recorder.finish(p.digest, p.tier, inputs, outputs);
        trace.save(path)?;
        eprintln!("recorded {} steps to {}", trace.steps.len(), path.display());
    }
    if let Some(path) = &a.logits_out {
        write_logits(path, &out, generator.vocab())?;
    }
    let texts: Vec<Option<String>> =
        out.sequences.iter().map(|s| vocab.as_ref().map(|t| t.decode(&s.ids))).collect();
    if a.json {
        println!("{}", json_report(&out, &texts, generator.weight_bytes_per_step()));
    } else {
        for (k, (s, text)) in out.sequences.iter().zip(&texts).enumerate() {
            if out.sequences.len() > 1 {
                println!("--- prompt {k}");
            }
            match text {
                Some(t) => println!("{t}"),
                None => println!("{}", s.ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
            }
        }
        eprintln!("{}", timing_line(&out));
    }
    Ok(())
}

fn rate(tokens: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        tokens as f64 / secs
    } else {
        0.0
    }
}

fn timing_line(out: &Generation) -> String {
    let (pt, gt) = (out.prompt_time.as_secs_f64(), out.gen_time.as_secs_f64());
    format!(
        "{} prompt tokens in {:.2} s ({:.1} tokens/s), {} more tokens in {:.2} s ({:.1} tokens/s)",
        out.prompt_tokens,
        pt,
        rate(out.prompt_tokens, pt),
        out.gen_tokens,
        gt,
        rate(out.gen_tokens, gt)
    )
}

/// JSON text of a string (quotes, backslashes and control characters escaped).
fn json_string(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// GB/s of weights read while generating: `weight_bytes` a decode step, one step for every
/// token of each sequence after the prompt.
fn weight_gbps(out: &Generation, weight_bytes: u64) -> f64 {
    let steps = out.gen_tokens as f64 / out.sequences.len().max(1) as f64;
    rate(1, out.gen_time.as_secs_f64()) * steps * weight_bytes as f64 / 1e9
}

/// One prompt: {"ids", "text", "stopped"} and the timing; several: {"results": [...], timing}.
/// The timing includes the weights' bytes a decode step reads and the GB/s that makes.
fn json_report(out: &Generation, texts: &[Option<String>], weight_bytes: u64) -> String {
    let one = |k: usize| {
        let s = &out.sequences[k];
        let ids: Vec<String> = s.ids.iter().map(u32::to_string).collect();
        let text = texts[k].as_deref().map_or("null".to_string(), json_string);
        format!("\"ids\": [{}], \"text\": {text}, \"stopped\": {}", ids.join(", "), s.stopped)
    };
    let timing = format!(
        "\"steps\": {}, \"prompt_tokens\": {}, \"prompt_seconds\": {:.6}, \"prompt_tokens_per_s\": {:.3}, \
         \"gen_tokens\": {}, \"gen_seconds\": {:.6}, \"gen_tokens_per_s\": {:.3}, \
         \"weight_bytes_per_step\": {weight_bytes}, \"gen_weight_gb_per_s\": {:.3}",
        out.steps,
        out.prompt_tokens,
        out.prompt_time.as_secs_f64(),
        rate(out.prompt_tokens, out.prompt_time.as_secs_f64()),
        out.gen_tokens,
        out.gen_time.as_secs_f64(),
        rate(out.gen_tokens, out.gen_time.as_secs_f64()),
        weight_gbps(out, weight_bytes)
    );
    if out.sequences.len() == 1 {
        format!("{{{}, {timing}}}", one(0))
    } else {
        let all: Vec<String> = (0..out.sequences.len()).map(|k| format!("{{{}}}", one(k))).collect();
        format!("{{\"results\": [{}], {timing}}}", all.join(", "))
    }
}

fn write_logits(path: &std::path::Path, out: &Generation, vocab: usize) -> Result<()> {
    let kept = out.sequences.iter().map(|s| s.logits.len()).min().unwrap_or(0);
    let mut values = Vec::with_capacity(out.sequences.len() * kept * vocab);
    for s in &out.sequences {
        for l in &s.logits[..kept] {
            values.extend_from_slice(l);
        }
    }
    let shape =
        if out.sequences.len() == 1 { vec![kept, vocab] } else { vec![out.sequences.len(), kept, vocab] };
    let t = HostTensor::from_f32(shape, &values).context("the logits")?;
    adeadvm::npy::write(path, &t)?;
    Ok(())
}

/// "step j/N" on a terminal's stderr, one update per decode step (ARGMAX).
struct StepProgress {
    total: usize,
    done: usize,
    shown: bool,
    tty: bool,
}

impl StepProgress {
    fn new(total: usize) -> StepProgress {
        StepProgress { total, done: 0, shown: false, tty: std::io::stderr().is_terminal() }
    }
    fn clear(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
            self.shown = false;
        }
    }
}

impl Observer for StepProgress {
    fn wants(&self) -> Wants {
        Wants::default()
    }
    fn step(&mut self, e: &StepEvent<'_>) -> ControlFlow<()> {
        if let Insn::Argmax { .. } = e.instruction.insn {
            self.done += 1;
            if self.tty {
                eprint!("\rstep {}/{}", self.done, self.total);
                self.shown = true;
            }
        }
        ControlFlow::Continue(())
    }
}
