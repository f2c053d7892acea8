//! The profiler: a per-opcode table (count, time, GFLOP/s or GB/s) and a Chrome/Perfetto trace
//! (`chrome://tracing` or ui.perfetto.dev) with one event per executed instruction.

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
    pub flops: u64,
    pub bytes: u64,
}

/// Collects per-opcode totals and, optionally, one trace event per step.
#[derive(Default)]
pub struct Profiler {
    pub totals: BTreeMap<Opcode, OpTotals>,
    events: Option<Vec<(usize, Opcode, Duration, Duration)>>,
    clock: Duration,
}

impl Profiler {
    /// A profiler; with `timeline` it also keeps every step for [`Profiler::chrome_trace`].
    pub fn new(timeline: bool) -> Profiler {
        Profiler { events: timeline.then(Vec::new), ..Profiler::default() }
    }

    /// The per-opcode table, slowest first.
    pub fn table(&self) -> String {
        let total: Duration = self.totals.values().map(|t| t.time).sum();
        let mut rows: Vec<(&Opcode, &OpTotals)> = self.totals.iter().collect();
        rows.sort_by(|a, b| b.1.time.cmp(&a.1.time).then(a.0.cmp(b.0)));
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<12} {:>8} {:>12} {:>7} {:>10} {:>10}",
            "opcode", "count", "time (ms)", "share", "GFLOP/s", "GB/s"
        );
        for (op, t) in rows {
            let secs = t.time.as_secs_f64();
            let rate = |x: u64| {
                if secs > 0.0 && x > 0 {
                    format!("{:.2}", x as f64 / secs / 1e9)
                } else {
                    "-".into()
                }
            };
            let share = if total.is_zero() { 0.0 } else { 100.0 * secs / total.as_secs_f64() };
            let _ = writeln!(
                s,
                "{:<12} {:>8} {:>12.3} {:>6.1}% {:>10} {:>10}",
                op.info().mnemonic,
                t.count,
                secs * 1e3,
                share,
                rate(t.flops),
                rate(t.bytes)
            );
        }
        let _ = writeln!(
            s,
            "{:<12} {:>8} {:>12.3}",
            "total",
            self.totals.values().map(|t| t.count).sum::<u64>(),
            total.as_secs_f64() * 1e3
        );
        s
    }

    /// The Chrome trace-event JSON of the recorded steps (one CPU lane).
    pub fn chrome_trace(&self) -> String {
        let mut s = String::from("{\"traceEvents\":[\n");
        s.push_str("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"cpu\"}}");
        for (index, op, start, dur) in self.events.iter().flatten() {
            let _ = write!(
                s,
                ",\n{{\"name\":\"{}\",\"cat\":\"cpu\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"index\":{index}}}}}",
                op.info().mnemonic,
                start.as_secs_f64() * 1e6,
                dur.as_secs_f64() * 1e6
            );
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
        t.flops += e.flops;
        t.bytes += e.bytes;
        if let Some(ev) = &mut self.events {
            ev.push((e.index, e.instruction.insn.opcode(), self.clock, e.elapsed));
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
