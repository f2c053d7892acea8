//! One batch over several executors: a [`SplitSession`] cuts every input along its first axis,
//! runs the slices at once on the CPU and on any number of Vulkan devices, and joins the
//! outputs along the same axis.
//!
//! ```
//! use adeadvm::api::{Config, Program};
//! use adeadvm::split::{Place, SplitSession};
//! use adeadvm::HostTensor;
//!
//! let program = Program::from_asm(
//!     ".dim B\n.input %x f32[B, 2]\n.output y f32[B, 2]\n    ALLOC %t: f32[B, 2]\n    ADD %t, %x, %x\n    STORE y, %t\n    FREE %t\n    HALT\n",
//!     "double.s",
//! )?;
//! // Two CPU sessions here; `Place::parse_list("gpu0,gpu1,cpu")` names devices.
//! let mut split = SplitSession::new(&program, &[Place::Cpu, Place::Cpu], &Config::default())?;
//! split.set_input("x", HostTensor::from_f32(vec![3, 2], &[1., 2., 3., 4., 5., 6.]).unwrap())?;
//! split.run()?;
//! assert_eq!(split.output("y")?.to_f32().unwrap(), [2., 4., 6., 8., 10., 12.]);
//! # Ok::<(), adeadvm::Error>(())
//! ```
//!
//! Invariants:
//! - The split axis is a symbolic dimension that is the first axis of every input and every
//!   output (checked when the session is made). A row's result then depends on that row's
//!   inputs only, for programs that do not mix rows (a transformer over a batch of sequences,
//!   an MLP): in the strict tier the joined outputs are the same bits as one device's run of
//!   the whole batch, whatever the split and the devices. In the fast tier each device gives
//!   its own fast bits, so the joined result can differ from a single run in the last bits.
//! - The split follows the devices' measured speed: every device starts with an equal share,
//!   and after each run a device's share is its rows per second in that run (the first run
//!   measures). Rows are handed out in the order the devices are listed.

use std::time::{Duration, Instant};

use crate::api::{Backend, Config, Error, IntoHostTensor, Program, Result, Session};
use crate::format::TensorKind;
use crate::isa::{shape_text, Dim};
use crate::verify::PlanError;
use crate::vm::{HostTensor, VmError};

/// Where one slice of a split batch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The CPU executor.
    Cpu,
    /// Every tensor instruction on Vulkan device `n` (as `adeadvm info` numbers them).
    Gpu(usize),
}

impl Place {
    /// Parses a comma-separated list such as `gpu0,gpu1,cpu`. A place may be listed more than
    /// once (two sessions on one device).
    pub fn parse_list(list: &str) -> Result<Vec<Place>> {
        let bad = |why: String| Error::Devices(format!("`{list}`: {why}"));
        let mut places = Vec::new();
        for name in list.split(',').map(str::trim) {
            let place = match name {
                "cpu" => Place::Cpu,
                _ => match name.strip_prefix("gpu").map(str::parse::<usize>) {
                    Some(Ok(n)) => Place::Gpu(n),
                    _ => {
                        return Err(bad(format!("`{name}` is not `cpu` or `gpuN` (N a Vulkan device index)")))
                    }
                },
            };
            places.push(place);
        }
        Ok(places)
    }

    /// `cpu` or `gpuN`, as [`Place::parse_list`] takes it.
    pub fn name(self) -> String {
        match self {
            Place::Cpu => "cpu".into(),
            Place::Gpu(n) => format!("gpu{n}"),
        }
    }
}

/// One device's part of the last run.
#[derive(Clone, Debug, PartialEq)]
pub struct PartStats {
    pub place: Place,
    /// Rows of the batch it ran (0: it sat the run out).
    pub rows: usize,
    /// Its run's time, slicing and binding its inputs included.
    pub elapsed: Duration,
}

struct Part {
    place: Place,
    session: Session,
    /// Rows per second in its last run that had rows; None before it has run.
    speed: Option<f64>,
}

/// A batch over several executors (see the module docs).
pub struct SplitSession {
    program: Program,
    parts: Vec<Part>,
    /// The bound inputs, by declaration order.
    inputs: Vec<(String, Option<HostTensor>)>,
    outputs: Vec<(String, HostTensor)>,
    last: Vec<PartStats>,
}

impl SplitSession {
    /// A session over `places` (at least one). `config`'s backend is ignored: each place names
    /// its executor. `config.threads` is each CPU session's; when None, the CPU sessions share
    /// the cores left after one for each GPU session (which records on its own thread).
    pub fn new(program: &Program, places: &[Place], config: &Config) -> Result<SplitSession> {
        if places.is_empty() {
            return Err(Error::Devices("no devices given".into()));
        }
        let program = match config.tier {
            Some(t) => program.with_tier(t)?,
            None => program.clone(),
        };
        let p = program.verified().program();
        check_batch_axis(p)?;
        // Unless told, the CPU sessions share the cores a GPU session's recording thread leaves.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let gpus = places.iter().filter(|p| matches!(p, Place::Gpu(_))).count();
        let cpus = places.len() - gpus;
        let cpu_threads = config.threads.or(Some((cores.saturating_sub(gpus).max(1) / cpus.max(1)).max(1)));
        let mut parts = Vec::with_capacity(places.len());
        for &place in places {
            let session = Session::new(&program, &place_config(place, config, cpu_threads))
                .map_err(|e| Error::OnDevice { place: place.name(), source: Box::new(e) })?;
            parts.push(Part { place, session, speed: None });
        }
        let inputs = p
            .tensors
            .iter()
            .filter(|t| t.kind == TensorKind::Input)
            .map(|t| (t.name.clone(), None))
            .collect();
        Ok(SplitSession { program, parts, inputs, outputs: Vec::new(), last: Vec::new() })
    }

    /// The program (with any tier override applied).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Binds an input by name (the whole batch).
    pub fn set_input(&mut self, name: &str, tensor: impl IntoHostTensor) -> Result<()> {
        let tensor = tensor.into_host_tensor(name)?;
        let Some(slot) = self.inputs.iter_mut().find(|(n, _)| n == name) else {
            // The session words the unknown name (and the dtype check) as a single run would.
            return self.parts[0].session.set_input(name, tensor);
        };
        if tensor.shape.is_empty() {
            return Err(Error::NotSplittable(format!(
                "input `{name}` was given a scalar: it has no rows to split"
            )));
        }
        slot.1 = Some(tensor);
        Ok(())
    }

    /// How many of `rows` each device runs: in proportion to its measured speed (equal shares
    /// until every device has run), by largest remainder, ties to the device listed first.
    fn shares(&self, rows: usize) -> Vec<usize> {
        let weights: Vec<f64> = if self.parts.iter().all(|p| p.speed.is_some()) {
            self.parts.iter().map(|p| p.speed.unwrap_or(1.0).max(1e-9)).collect()
        } else {
            vec![1.0; self.parts.len()]
        };
        let total: f64 = weights.iter().sum();
        let exact: Vec<f64> = weights.iter().map(|w| rows as f64 * w / total).collect();
        let mut shares: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
        let mut left = rows - shares.iter().sum::<usize>().min(rows);
        let mut order: Vec<usize> = (0..shares.len()).collect();
        order.sort_by(|&a, &b| {
            (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())).then(a.cmp(&b))
        });
        for &i in order.iter().cycle() {
            if left == 0 {
                break;
            }
            shares[i] += 1;
            left -= 1;
        }
        shares
    }

    /// Runs the program once over the bound inputs: each device its rows, all at once.
    pub fn run(&mut self) -> Result<Vec<PartStats>> {
        self.outputs.clear();
        let mut bound = Vec::with_capacity(self.inputs.len());
        for (name, t) in &self.inputs {
            let Some(t) = t else { return Err(unbound_input(&self.program, name)) };
            bound.push((name.as_str(), t));
        }
        let rows = batch_rows(&bound)?;
        let shares = self.shares(rows);
        let starts: Vec<usize> =
            shares.iter().scan(0, |at, &n| Some(std::mem::replace(at, *at + n))).collect();
        // The devices with rows; an empty batch still runs once, on the first.
        let ran: Vec<bool> = (0..self.parts.len()).map(|i| shares[i] > 0 || (rows == 0 && i == 0)).collect();
        let results: Vec<Option<Result<Duration>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .parts
                .iter_mut()
                .enumerate()
                .map(|(i, part)| {
                    let (bound, start, n) = (&bound, starts[i], shares[i]);
                    ran[i].then(|| {
                        scope.spawn(move || {
                            let began = Instant::now();
                            for (name, t) in bound {
                                part.session.set_input(name, rows_of(t, start, n))?;
                            }
                            part.session.run()?;
                            Ok(began.elapsed())
                        })
                    })
                })
                .collect();
            let join = |h: std::thread::ScopedJoinHandle<'_, Result<Duration>>| {
                h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
            };
            handles.into_iter().map(|h| h.map(join)).collect()
        });
        let mut stats = Vec::with_capacity(self.parts.len());
        for (i, (part, result)) in self.parts.iter_mut().zip(results).enumerate() {
            let elapsed = match result {
                None => Duration::ZERO,
                Some(r) => {
                    r.map_err(|e| Error::OnDevice { place: part.place.name(), source: Box::new(e) })?
                }
            };
            if shares[i] > 0 {
                part.speed = Some(shares[i] as f64 / elapsed.as_secs_f64().max(1e-9));
            }
            stats.push(PartStats { place: part.place, rows: shares[i], elapsed });
        }
        let decls = &self.program.verified().program().outputs;
        for decl in decls {
            let pieces: Vec<&HostTensor> = self
                .parts
                .iter()
                .zip(&ran)
                .filter(|(_, &r)| r)
                .map(|(p, _)| p.session.output(&decl.name))
                .collect::<Result<_>>()?;
            self.outputs.push((decl.name.clone(), join_rows(&pieces)));
        }
        self.last = stats.clone();
        Ok(stats)
    }

    /// An output of the last run (the whole batch), by name.
    pub fn output(&self, name: &str) -> Result<&HostTensor> {
        output_named(&self.outputs, &self.program, name)
    }

    /// Every output of the last run, in declaration order.
    pub fn outputs(&self) -> Vec<(&str, &HostTensor)> {
        self.outputs.iter().map(|(n, t)| (n.as_str(), t)).collect()
    }

    /// Each device's rows and time in the last run, in the order the devices were given.
    pub fn last_split(&self) -> &[PartStats] {
        &self.last
    }
}

/// Checks that `p`'s inputs and outputs share one symbolic first axis, the batch a split cuts.
pub(crate) fn check_batch_axis(p: &crate::format::Program) -> Result<()> {
    let mut axis = None;
    let inputs = p.tensors.iter().filter(|t| t.kind == TensorKind::Input);
    let declared = inputs
        .map(|t| (&t.name, t.dtype, &t.shape))
        .chain(p.outputs.iter().map(|o| (&o.name, o.dtype, &o.shape)));
    for (name, dtype, shape) in declared {
        let first = match shape.first() {
            Some(&Dim::Sym(s)) => s,
            _ => {
                return Err(Error::NotSplittable(format!(
                    "`{name}` is declared {dtype}{}: its first axis is not a symbolic dimension",
                    shape_text(shape, &p.syms)
                )))
            }
        };
        match axis {
            None => axis = Some(first),
            Some(a) if a != first => {
                let sym = |s: crate::isa::SymId| p.syms[s.0 as usize].clone();
                return Err(Error::NotSplittable(format!(
                    "`{name}`'s first axis is {}, but the others' is {}: inputs and outputs must share it",
                    sym(first),
                    sym(a)
                )));
            }
            Some(_) => {}
        }
    }
    if axis.is_none() {
        return Err(Error::NotSplittable("the program has no inputs or outputs to split".into()));
    }
    Ok(())
}

/// Output `name` among a multi-session run's joined `outputs`, or why there is none: the
/// program has no such output, or no run wrote it.
pub(crate) fn output_named<'a>(
    outputs: &'a [(String, HostTensor)],
    program: &Program,
    name: &str,
) -> Result<&'a HostTensor> {
    if let Some((_, t)) = outputs.iter().find(|(n, _)| n == name) {
        return Ok(t);
    }
    let decls = &program.verified().program().outputs;
    if !decls.iter().any(|o| o.name == name) {
        let known: Vec<&str> = decls.iter().map(|o| o.name.as_str()).collect();
        return Err(Error::UnknownOutput { name: name.to_string(), known: known.join(", ") });
    }
    Err(Error::NotWritten(name.to_string()))
}

/// The error for `program`'s input `name` left unbound at a run, worded as a single session's.
pub(crate) fn unbound_input(program: &Program, name: &str) -> Error {
    let p = program.verified().program();
    let decl = p.tensors.iter().find(|d| d.name == name && d.kind == TensorKind::Input);
    let decl = decl.expect("the bound inputs are the program's declared inputs");
    VmError::from(PlanError::missing_input(decl, &p.syms)).into()
}

/// The rows of the bound inputs' batch axis (checked to agree; 0 without inputs).
pub(crate) fn batch_rows(bound: &[(&str, &HostTensor)]) -> Result<usize> {
    let rows = bound.first().map_or(0, |(_, t)| t.shape[0]);
    if let Some((name, t)) = bound.iter().find(|(_, t)| t.shape[0] != rows) {
        return Err(Error::NotSplittable(format!(
            "input `{name}` has {} rows, `{}` has {rows}: the batch axis must agree",
            t.shape[0], bound[0].0
        )));
    }
    Ok(rows)
}

/// `config` for a session on `place`: its executor and device, `cpu_threads` threads on the CPU
/// (a GPU session keeps `config.threads`), and the tier of the program as given (the caller
/// applies any override once, to the program).
pub(crate) fn place_config(place: Place, config: &Config, cpu_threads: Option<usize>) -> Config {
    Config {
        backend: match place {
            Place::Cpu => Backend::Cpu,
            Place::Gpu(_) => Backend::Vulkan,
        },
        vulkan_device: match place {
            Place::Cpu => None,
            Place::Gpu(n) => Some(n),
        },
        tier: None,
        threads: match place {
            Place::Cpu => cpu_threads,
            Place::Gpu(_) => config.threads,
        },
        ..config.clone()
    }
}

/// Rows `start..start + n` of `t` (along its first axis).
pub(crate) fn rows_of(t: &HostTensor, start: usize, n: usize) -> HostTensor {
    let row_bytes = t.bytes().len() / t.shape[0].max(1);
    let mut shape = t.shape.clone();
    shape[0] = n;
    let bytes = &t.bytes()[start * row_bytes..(start + n) * row_bytes];
    HostTensor::from_bytes(t.dtype, shape, bytes).expect("a row range of a tensor matches its shape")
}

/// The pieces one after the other along the first axis (they agree on dtype and other axes:
/// one program made them).
pub(crate) fn join_rows(pieces: &[&HostTensor]) -> HostTensor {
    let first = pieces[0];
    let mut shape = first.shape.clone();
    shape[0] = pieces.iter().map(|t| t.shape[0]).sum();
    let bytes: Vec<u8> = pieces.iter().flat_map(|t| t.bytes().iter().copied()).collect();
    HostTensor::from_bytes(first.dtype, shape, &bytes).expect("joined rows match the joined shape")
}
