//! The profiler: a per-opcode table (count, time, GFLOP/s or GB/s) and a Chrome/Perfetto trace
//! (`chrome://tracing` or ui.perfetto.dev) with one event per executed instruction.
//!
//! Instructions that ran on a Vulkan device also carry their GPU time (timestamps around the
//! commands they recorded): the table gains a GPU column, the rates use the GPU time, and the
//! trace a `gpu` lane beside the `cpu` one. Profiling waits for the GPU after each such
//! instruction, so the lanes show each instruction's own cost, not the overlap of a batch.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::time::Duration;

use crate::isa::Opcode;
use crate::vm::{Observer, StepEvent, Wants};

/// Totals for one opcode.
#[derive(Clone, Debug, Default)]
pub struct OpTotals {
    pub count: u64,
    pub time: Duration,
    /// GPU time of the executions that ran on a device.
    pub gpu_time: Duration,
    /// How many executions ran on a device.
    pub gpu_count: u64,
    pub flops: u64,
    pub bytes: u64,
}

/// One executed instruction: (index, opcode, start, wall time, GPU time).
type Event = (usize, Opcode, Duration, Duration, Option<Duration>);

/// The most steps a timeline (`run --profile-json`) keeps: 4 million (about 160 MB in memory,
/// 500 MB of JSON), and no more than fit in the memory budget (`--max-memory`). A run that executes more is stopped there and fails with
/// [`Profiler::limit_error`]: a timeline of an endless loop would grow without bound.
pub const MAX_TIMELINE_EVENTS: usize = 4_000_000;

/// Collects per-opcode totals and, optionally, one trace event per step.
#[derive(Default)]
pub struct Profiler {
    pub totals: BTreeMap<Opcode, OpTotals>,
    events: Option<Vec<Event>>,
    clock: Duration,
    /// The most steps the timeline keeps; reaching it stops the run and sets `full`.
    max_events: usize,
    full: bool,
}

impl Profiler {
    /// A profiler; with `timeline` it also keeps every step for [`Profiler::chrome_trace`].
    pub fn new(timeline: bool) -> Profiler {
        Profiler::with_limit(timeline, MAX_TIMELINE_EVENTS)
    }

    /// [`Profiler::new`] whose timeline keeps at most `max_events` steps.
    pub fn with_limit(timeline: bool, max_events: usize) -> Profiler {
        Profiler { events: timeline.then(Vec::new), max_events, ..Profiler::default() }
    }

    /// The most timeline steps that fit in `bytes` of memory (for a memory budget).
    pub fn events_within(bytes: u64) -> usize {
        usize::try_from(bytes / std::mem::size_of::<Event>() as u64).unwrap_or(usize::MAX)
    }

    /// Why the timeline is incomplete, when the run executed more than [`MAX_TIMELINE_EVENTS`]
    /// steps (the run stopped there).
    pub fn limit_error(&self) -> Option<String> {
        self.full.then(|| {
            format!(
                "the profile timeline reached its limit of {} steps, so the run was stopped there and nothing was written; the program may loop forever (bound it with --max-steps)",
                self.max_events
            )
        })
    }

    /// The per-opcode table, slowest first. Rates are per GPU time where an opcode ran on a
    /// device only, per wall time otherwise.
    pub fn table(&self) -> String {
        let total: Duration = self.totals.values().map(|t| t.time).sum();
        let gpu = self.totals.values().any(|t| t.gpu_count > 0);
        let mut rows: Vec<(&Opcode, &OpTotals)> = self.totals.iter().collect();
        rows.sort_by(|a, b| b.1.time.cmp(&a.1.time).then(a.0.cmp(b.0)));
        let mut s = String::new();
        let gpu_head = if gpu { format!(" {:>12}", "GPU (ms)") } else { String::new() };
        let _ = writeln!(
            s,
            "{:<12} {:>8} {:>12}{gpu_head} {:>7} {:>10} {:>10}",
            "opcode", "count", "time (ms)", "share", "GFLOP/s", "GB/s"
        );
        for (op, t) in rows {
            let secs = if t.gpu_count == t.count && t.count > 0 { t.gpu_time } else { t.time }.as_secs_f64();
            let rate = |x: u64| {
                if secs > 0.0 && x > 0 {
                    format!("{:.2}", x as f64 / secs / 1e9)
                } else {
                    "-".into()
                }
            };
            let share =
                if total.is_zero() { 0.0 } else { 100.0 * t.time.as_secs_f64() / total.as_secs_f64() };
            let gpu_cell = match (gpu, t.gpu_count) {
                (false, _) => String::new(),
                (true, 0) => format!(" {:>12}", "-"),
                (true, _) => format!(" {:>12.3}", t.gpu_time.as_secs_f64() * 1e3),
            };
            let _ = writeln!(
                s,
                "{:<12} {:>8} {:>12.3}{gpu_cell} {:>6.1}% {:>10} {:>10}",
                op.info().mnemonic,
                t.count,
                t.time.as_secs_f64() * 1e3,
                share,
                rate(t.flops),
                rate(t.bytes)
            );
        }
        let gpu_total = if gpu {
            format!(
                " {:>12.3}",
                self.totals.values().map(|t| t.gpu_time).sum::<Duration>().as_secs_f64() * 1e3
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "{:<12} {:>8} {:>12.3}{gpu_total}",
            "total",
            self.totals.values().map(|t| t.count).sum::<u64>(),
            total.as_secs_f64() * 1e3
        );
        s
    }

    /// The Chrome trace-event JSON of the recorded steps: a `cpu` lane with every instruction's
    /// wall time and, when any ran on a device, a `gpu` lane with their GPU times (each drawn
    /// from the start of its instruction).
    pub fn chrome_trace(&self) -> String {
        let mut s = String::from("{\"traceEvents\":[\n");
        s.push_str("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"cpu\"}}");
        let events = self.events.as_deref().unwrap_or_default();
        if events.iter().any(|e| e.4.is_some()) {
            s.push_str(
                ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":2,\"args\":{\"name\":\"gpu\"}}",
            );
        }
        let event = |s: &mut String,
                     tid: u32,
                     index: usize,
                     op: &Opcode,
                     start: &Duration,
                     dur: &Duration| {
            let _ = write!(
                s,
                ",\n{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":1,\"tid\":{tid},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"index\":{index}}}}}",
                op.info().mnemonic,
                if tid == 1 { "cpu" } else { "gpu" },
                start.as_secs_f64() * 1e6,
                dur.as_secs_f64() * 1e6
            );
        };
        for (index, op, start, dur, gpu) in events {
            event(&mut s, 1, *index, op, start, dur);
            if let Some(g) = gpu {
                event(&mut s, 2, *index, op, start, g);
            }
        }
        s.push_str("\n],\"displayTimeUnit\":\"ms\"}\n");
        s
    }
}

impl Observer for Profiler {
    fn wants(&self) -> Wants {
        Wants { timing: true, written: false }
    }
    fn step(&mut self, e: &StepEvent<'_>) -> ControlFlow<()> {
        let t = self.totals.entry(e.instruction.insn.opcode()).or_default();
        t.count += 1;
        t.time += e.elapsed;
        if let Some(g) = e.gpu_elapsed {
            t.gpu_time += g;
            t.gpu_count += 1;
        }
        t.flops += e.flops;
        t.bytes += e.bytes;
        if let Some(ev) = &mut self.events {
            if ev.len() >= self.max_events {
                self.full = true;
                return ControlFlow::Break(());
            }
            ev.push((e.index, e.instruction.insn.opcode(), self.clock, e.elapsed, e.gpu_elapsed));
        }
        self.clock += e.elapsed;
        ControlFlow::Continue(())
    }
}

/// Several observers in turn; the run stops if any asks to.
pub struct Fanout<'a>(pub Vec<&'a mut dyn Observer>);

impl Observer for Fanout<'_> {
    fn wants(&self) -> Wants {
        self.0.iter().fold(Wants::default(), |w, o| {
            let x = o.wants();
            Wants { timing: w.timing || x.timing, written: w.written || x.written }
        })
    }
    fn step(&mut self, e: &StepEvent<'_>) -> ControlFlow<()> {
        let mut flow = ControlFlow::Continue(());
        for o in &mut self.0 {
            if o.step(e).is_break() {
                flow = ControlFlow::Break(());
            }
        }
        flow
    }
}
