//! Text generation with a generation program (programs/smollm2.s): from prompts as token ids to
//! the generated ids, in one run of the VM.
//!
//! A *generation program* declares this interface (checked by [`GenerationProgram::new`]):
//! - inputs `feed` i32[N, B] (`feed[j, b]` = token j of prompt b while j is inside it, else -1),
//!   `prefix` i32[B, P] (the first P tokens of every prompt, P being the shortest prompt's
//!   length minus one: the block the program processes at once before its decode steps),
//!   `lens` i32[B], `max_new` i32[1] and `stop` i32[1] (the end token, or -1 for none);
//! - outputs `tokens` i32[B, MAXNEW] (the generated ids, -1 where none) and `logits`
//!   f32[B, KEEP, V] (the logits that chose each sequence's first KEEP tokens);
//! - optionally a constant `ctx_len` i32[1]: the most positions its cache holds;
//! - exactly one ARGMAX per decode step (how progress and the prompt/generation split are timed).
//!
//! The program does the rest: step j consumes token j of each prompt, or that sequence's last
//! generated token once its prompt is over, so a sequence's results never depend on the
//! others in its batch. Invariant: the ids given back are cut after the stop token (which is
//! not included) or after `max_new` tokens.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::api::{self, Session};
use crate::format::{ConstData, TensorKind};
use crate::isa::{DType, Dim, Insn};
use crate::vm::{HostTensor, Observer, StepEvent, Wants};

/// Why a generation could not run.
#[derive(Debug, Error)]
pub enum GenerateError {
    #[error("this program is not a generation program: {0} (see programs/smollm2.s for the interface)")]
    NotAGenerator(String),
    #[error("no prompt was given")]
    NoPrompt,
    #[error("prompt {0} is empty: a prompt needs at least one token")]
    EmptyPrompt(usize),
    #[error("token {id} at position {pos} of prompt {prompt} is outside the vocabulary of {vocab} tokens")]
    BadToken { prompt: usize, pos: usize, id: i64, vocab: usize },
    #[error("{got} new tokens asked for, outside 1..={most} (this program keeps at most {most} tokens a sequence; assemble it with -D MAXNEW=... for more)")]
    MaxNew { got: usize, most: usize },
    #[error("the longest prompt ({prompt} tokens) and {max_new} new tokens need {need} positions, more than this program's context of {ctx} (assemble it with -D CTX=... for more)")]
    Context { prompt: usize, max_new: usize, need: usize, ctx: usize },
    #[error("{0} prompts in one batch; this program takes at most {1} (-D MAXB=...)")]
    Batch(usize, usize),
    #[error(transparent)]
    Run(#[from] api::Error),
}

/// What to generate.
#[derive(Clone, Debug)]
pub struct Request {
    /// The prompts as token ids; they run as one batch.
    pub prompts: Vec<Vec<i64>>,
    /// Tokens to generate per prompt at most.
    pub max_new: usize,
    /// Stop a sequence once it produces this token (None: exactly `max_new` tokens).
    pub stop: Option<u32>,
}

/// One prompt's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Sequence {
    /// The generated ids, without the stop token.
    pub ids: Vec<u32>,
    /// Whether it ended on the stop token.
    pub stopped: bool,
    /// The logits that chose its first tokens (at most the program's KEEP), each over the vocabulary.
    pub logits: Vec<Vec<f32>>,
}

/// A generation's results and timing.
#[derive(Clone, Debug)]
pub struct Generation {
    pub sequences: Vec<Sequence>,
    /// Positions processed: the prefill block's and one a decode step.
    pub steps: u64,
    /// From the start to the end of the step that consumed the longest prompt's last token
    /// (which also makes its first new token).
    pub prompt_time: Duration,
    /// The steps after it.
    pub gen_time: Duration,
    /// Prompt tokens processed (every prompt's length).
    pub prompt_tokens: usize,
    /// Tokens generated after each sequence's first (the ones `gen_time` made).
    pub gen_tokens: usize,
}

/// A verified program checked to have the generation interface.
pub struct GenerationProgram {
    program: api::Program,
    max_new: usize,
    keep: usize,
    vocab: usize,
    ctx: Option<usize>,
    max_batch: Option<usize>,
}

impl GenerationProgram {
    /// Checks `program`'s interface (see the module docs).
    pub fn new(program: api::Program) -> Result<GenerationProgram, GenerateError> {
        let bad = |s: String| GenerateError::NotAGenerator(s);
        let p = program.verified().program();
        for (name, rank) in [("feed", 2), ("prefix", 2), ("lens", 1), ("max_new", 1), ("stop", 1)] {
            let t = p
                .tensors
                .iter()
                .find(|t| t.name == name && t.kind == TensorKind::Input)
                .ok_or_else(|| bad(format!("it has no input `{name}`")))?;
            if t.dtype != DType::I32 || t.shape.len() != rank {
                return Err(bad(format!("input `{name}` must be i32 of rank {rank}")));
            }
        }
        let out = |name: &str| {
            p.outputs.iter().find(|o| o.name == name).ok_or_else(|| bad(format!("it has no output `{name}`")))
        };
        let tokens = out("tokens")?;
        let logits = out("logits")?;
        let fixed = |d: &Dim| match d {
            Dim::Const(n) => Some(*n as usize),
            Dim::Sym(_) => None,
        };
        let (max_new, keep, vocab) = match (tokens.shape.as_slice(), logits.shape.as_slice()) {
            ([_, m], [_, k, v]) if tokens.dtype == DType::I32 && logits.dtype == DType::F32 => {
                (fixed(m), fixed(k), fixed(v))
            }
            _ => {
                return Err(bad(
                    "outputs `tokens` i32[B, MAXNEW] and `logits` f32[B, KEEP, V] expected".into()
                ))
            }
        };
        let (Some(max_new), Some(keep), Some(vocab)) = (max_new, keep, vocab) else {
            return Err(
                bad("the sizes MAXNEW, KEEP and V of `tokens` and `logits` must be constants".into()),
            );
        };
        let const_i32 = |name: &str| -> Option<usize> {
            let t = p.tensors.iter().find(|t| t.name == name)?;
            let TensorKind::Const(data) = t.kind else { return None };
            let v = match data {
                ConstData::Splat(bits) => bits as i32,
                ConstData::Bytes { offset, .. } => {
                    let b = p.data.get(offset as usize..offset as usize + 4)?;
                    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
                }
                ConstData::Blocks { .. } => return None,
            };
            (t.dtype == DType::I32).then_some(v.max(0) as usize)
        };
        let max_batch =
            p.tensors.iter().find(|t| t.name == "rows").and_then(|t| t.shape.first().and_then(fixed));
        Ok(GenerationProgram { ctx: const_i32("ctx_len"), program, max_new, keep, vocab, max_batch })
    }

    /// The program.
    pub fn program(&self) -> &api::Program {
        &self.program
    }

    /// Bytes of weights one decode step reads: the stored size (blocks, or f32 values) of every
    /// constant a MATMUL takes as `b`, once each. Each such matrix is read whole once a step
    /// whatever the batch, which makes this the figure decode speed is bound by: the
    /// benchmarks divide it by a step's time for the bandwidth a generation achieves.
    pub fn weight_bytes_per_step(&self) -> u64 {
        let p = self.program.verified().program();
        let mut seen = std::collections::HashSet::new();
        let mut total = 0u64;
        for ins in self.program.verified().instructions() {
            let Insn::Matmul { b, .. } = ins.insn else { continue };
            let decl = &p.tensors[b.0 as usize];
            let TensorKind::Const(data) = decl.kind else { continue };
            if seen.insert(b) {
                total += match data {
                    ConstData::Splat(_) => 0,
                    _ => p.const_bytes(&data).map_or(0, |d| d.len() as u64),
                };
            }
        }
        total
    }

    /// The vocabulary size (the logits' last axis).
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// Most tokens generated per sequence.
    pub fn max_new(&self) -> usize {
        self.max_new
    }

    /// Checks a request against the program's limits and builds its inputs (`feed`, `prefix`,
    /// `lens`, `max_new`, `stop`).
    pub fn inputs(&self, req: &Request) -> Result<Vec<(&'static str, HostTensor)>, GenerateError> {
        if req.prompts.is_empty() {
            return Err(GenerateError::NoPrompt);
        }
        if let Some(most) = self.max_batch.filter(|&m| req.prompts.len() > m) {
            return Err(GenerateError::Batch(req.prompts.len(), most));
        }
        for (i, prompt) in req.prompts.iter().enumerate() {
            if prompt.is_empty() {
                return Err(GenerateError::EmptyPrompt(i));
            }
            if let Some((pos, &id)) =
                prompt.iter().enumerate().find(|(_, &id)| id < 0 || id as usize >= self.vocab)
            {
                return Err(GenerateError::BadToken { prompt: i, pos, id, vocab: self.vocab });
            }
        }
        if req.max_new == 0 || req.max_new > self.max_new {
            return Err(GenerateError::MaxNew { got: req.max_new, most: self.max_new });
        }
        let longest = req.prompts.iter().map(Vec::len).max().unwrap_or(0);
        let steps = longest - 1 + req.max_new;
        if let Some(ctx) = self.ctx.filter(|&c| steps > c) {
            return Err(GenerateError::Context { prompt: longest, max_new: req.max_new, need: steps, ctx });
        }
        let b = req.prompts.len();
        let mut feed = vec![-1i32; steps * b];
        for (k, prompt) in req.prompts.iter().enumerate() {
            for (j, &id) in prompt.iter().enumerate() {
                feed[j * b + k] = id as i32;
            }
        }
        let shortest = req.prompts.iter().map(Vec::len).min().unwrap_or(1);
        let block = shortest - 1;
        let prefix: Vec<i32> =
            req.prompts.iter().flat_map(|p| p[..block].iter().map(|&id| id as i32)).collect();
        let lens: Vec<i32> = req.prompts.iter().map(|p| p.len() as i32).collect();
        let stop = req.stop.map_or(-1, |s| s as i32);
        let t = |shape: Vec<usize>, v: &[i32]| HostTensor::from_i32(shape, v).expect("shape matches");
        Ok(vec![
            ("feed", t(vec![steps, b], &feed)),
            ("prefix", t(vec![b, block], &prefix)),
            ("lens", t(vec![b], &lens)),
            ("max_new", t(vec![1], &[req.max_new as i32])),
            ("stop", t(vec![1], &[stop])),
        ])
    }

    /// Runs one generation in `session` (a session of this program), reporting every step to
    /// `observer` as well (a trace recorder, progress).
    pub fn generate(
        &self,
        session: &mut Session,
        req: &Request,
        observer: &mut dyn Observer,
    ) -> Result<Generation, GenerateError> {
        for (name, t) in self.inputs(req)? {
            session.set_input(name, &t)?;
        }
        let longest = req.prompts.iter().map(Vec::len).max().unwrap_or(0);
        let mut clock = StepClock { start: Instant::now(), marks: Vec::new(), inner: observer };
        session.run_observed(&mut clock)?;
        let end = Instant::now();
        let marks = clock.marks;
        let b = req.prompts.len();
        let tokens = session.output("tokens")?.to_i32().unwrap_or_default();
        let logits = session.output("logits")?.to_f32().unwrap_or_default();
        let mut sequences = Vec::with_capacity(b);
        for k in 0..b {
            let row = &tokens[k * self.max_new..(k + 1) * self.max_new];
            let made: Vec<u32> =
                row.iter().take(req.max_new).take_while(|&&t| t >= 0).map(|&t| t as u32).collect();
            let stop_at = req.stop.and_then(|s| made.iter().position(|&t| t == s));
            let ids = match stop_at {
                Some(i) => made[..i].to_vec(),
                None => made.clone(),
            };
            let kept = made.len().min(self.keep);
            let base = k * self.keep * self.vocab;
            let logits = (0..kept)
                .map(|g| logits[base + g * self.vocab..base + (g + 1) * self.vocab].to_vec())
                .collect();
            sequences.push(Sequence { ids, stopped: stop_at.is_some(), logits });
        }
        // The decode steps start at position `block`; the longest prompt ends at `longest - 1`.
        let block = req.prompts.iter().map(Vec::len).min().unwrap_or(1) - 1;
        let split = marks.get(longest - 1 - block).copied().unwrap_or(end);
        let generated: usize = sequences.iter().map(|s| s.ids.len() + usize::from(s.stopped)).sum();
        Ok(Generation {
            steps: (block + marks.len()) as u64,
            prompt_time: split - clock.start,
            gen_time: end - split,
            prompt_tokens: req.prompts.iter().map(Vec::len).sum(),
            gen_tokens: generated.saturating_sub(b),
            sequences,
        })
    }
}

/// Notes the time at each ARGMAX (one per decode step) and passes every event on.
struct StepClock<'a> {
    start: Instant,
    marks: Vec<Instant>,
    inner: &'a mut dyn Observer,
}

impl Observer for StepClock<'_> {
    fn wants(&self) -> Wants {
        self.inner.wants()
    }
    fn step(&mut self, e: &StepEvent<'_>) -> ControlFlow<()> {
        if let Insn::Argmax { .. } = e.instruction.insn {
            self.marks.push(Instant::now());
        }
        self.inner.step(e)
    }
}
