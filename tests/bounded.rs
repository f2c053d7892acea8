//! Issue 34, items 4, 5, 7 and 8 (rows of docs/robustness.md): every budget bounds what a run
//! keeps, every file read is bounded and never blocks, a run delivers all its results or none,
//! and a GPU timeout is reported and the process exits. Each case runs the command line as a
//! user does, as a child process under a watchdog, and checks the exit status, the message and
//! what is left in the folder.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use adeadvm::api::{Config, Program, Session};
use adeadvm::HostTensor;
use common::vk::required;
use common::{listing, root};

/// How long any command here may take before the watchdog kills it and the test fails (a
/// hang is the bug several of these cases guard against).
const WATCHDOG: Duration = Duration::from_secs(120);

/// Runs `adeadvm ARGS` in `dir` under the watchdog: (exit status, stdout, stderr).
fn adeadvm(args: &[&str], dir: &Path, env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_adeadvm"));
    c.args(args).current_dir(dir).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().expect("starts");
    // The pipes are drained on threads so a chatty child never blocks on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > WATCHDOG {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!(
                "adeadvm {args:?} still ran after {WATCHDOG:?}: it hangs (stderr: {})",
                err.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), out.join().unwrap(), err.join().unwrap())
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

/// A program that loops forever, writing a temporary at every step (legal: there is no default
/// step limit).
const ENDLESS: &str = ".input %x f32[4]\n.output y f32[4]\n\
    ALLOC %t: f32[4]\nloop:\nADD %t, %x, %x\nJMP loop\nSTORE y, %t\nFREE %t\n";

/// A program with two outputs.
const TWO_OUTPUTS: &str = ".input %x f32[4]\n.output y f32[4]\n.output z f32[4]\n\
    ALLOC %t: f32[4]\nADD %t, %x, %x\nSTORE y, %t\nSTORE z, %t\nFREE %t\n";

/// `dir` with `name` holding `source` and `x.npy` holding four floats.
fn setup(dir: &Path, name: &str, source: &str) {
    std::fs::write(dir.join(name), source).unwrap();
    let x = HostTensor::from_f32(vec![4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    std::fs::write(dir.join("x.npy"), adeadvm::npy::to_bytes(&x)).unwrap();
}

const NOT_REGULAR: &str = "not a regular file (adeadvm reads only regular files)";

// ---- item 4: budgets that bound ----

#[test]
fn a_recording_of_an_endless_loop_stops_at_its_limit_with_a_clear_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), "loop.s", ENDLESS);
    let (code, _, err) = adeadvm(
        &[
            "run",
            "loop.s",
            "--input",
            "x=x.npy",
            "--max-memory",
            "1M",
            "--record",
            "t.trc",
            "--output",
            "y=y.npy",
        ],
        dir.path(),
        &[],
    );
    assert_eq!(code, Some(1), "{err}");
    let steps = err
        .strip_prefix("error: the recording reached its limit of 1048576 bytes after ")
        .and_then(|rest| rest.split_once(" steps, "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(steps.0.parse::<u64>().unwrap() > 1000, "{err}");
    assert_eq!(
        steps.1,
        "so the run was stopped there and nothing was written; the program may loop forever (bound it with --max-steps)\n"
    );
    assert_eq!(listing(dir.path()), ["loop.s", "x.npy"]);
}

#[test]
fn a_profile_timeline_of_an_endless_loop_stops_at_its_limit_with_a_clear_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), "loop.s", ENDLESS);
    let (code, _, err) = adeadvm(
        &["run", "loop.s", "--input", "x=x.npy", "--max-memory", "1M", "--profile-json", "p.json"],
        dir.path(),
        &[],
    );
    assert_eq!(code, Some(1), "{err}");
    let events = adeadvm::profile::Profiler::events_within(1 << 20);
    assert_eq!(
        err,
        format!(
            "error: the profile timeline reached its limit of {events} steps, so the run was stopped there and nothing was written; the program may loop forever (bound it with --max-steps)\n"
        )
    );
    assert_eq!(listing(dir.path()), ["loop.s", "x.npy"]);
}

#[test]
fn more_threads_than_the_limit_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), "two.s", TWO_OUTPUTS);
    let cores = std::thread::available_parallelism().unwrap().get();
    let max = cores * adeadvm::vm::MAX_THREADS_PER_CORE;
    let (code, _, err) =
        adeadvm(&["run", "two.s", "--input", "x=x.npy", "--threads", "100000"], dir.path(), &[]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err,
        format!("error: 100000 worker threads is more than the limit of {max} (4 per core on this machine's {cores} cores)\n")
    );
    // The limit itself is allowed.
    let (code, out, err) =
        adeadvm(&["run", "two.s", "--input", "x=x.npy", "--threads", &max.to_string()], dir.path(), &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("y: f32[4] digest "), "{out}");
}

/// The memory budget counts the scratch copy an instruction that reads its own destination
/// needs, and the constants the VM holds in memory of its own (a splat), not only the arena.
#[test]
fn the_memory_budget_counts_the_scratch_copy_and_owned_constants() {
    let source = ".input %x f32[1024]\n.const %c f32[1024] = fill(2.0)\n.output y f32[1024]\n\
        ALLOC %t: f32[1024]\nADD %t, %x, %c\nMUL %t, %t, %t\nSTORE y, %t\nFREE %t\n";
    let program = Program::from_asm(source, "scratch.s").unwrap();
    let x = HostTensor::from_f32(vec![1024], &[1.0; 1024]).unwrap();
    // Arena 4096, inputs and outputs 8192, the splat 4096 and the scratch copy 4096.
    let needed = 4096 + 8192 + 4096 + 4096;
    let run = |budget: u64| {
        let mut s =
            Session::new(&program, &Config { max_memory: Some(budget), ..Config::default() }).unwrap();
        s.set_input("x", &x).unwrap();
        s.run().map(|_| s.output("y").unwrap().to_f32().unwrap()[0])
    };
    assert_eq!(run(needed).unwrap(), 9.0);
    assert_eq!(
        run(needed - 1).unwrap_err().to_string(),
        format!(
            "this run needs {needed} bytes (arena peak 4096, inputs and outputs 8192, constants and scratch 8192), more than the memory budget of {} bytes",
            needed - 1
        )
    );
}

// ---- item 5: bounded reads that never block ----

#[test]
fn a_device_or_fifo_given_as_an_input_trace_or_source_is_refused_without_reading_or_blocking() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), "two.s", TWO_OUTPUTS);
    mkfifo(&dir.path().join("pipe"));
    mkfifo(&dir.path().join("pipe.s"));
    let fails = |args: &[&str]| {
        let (code, _, err) = adeadvm(args, dir.path(), &[]);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        err
    };
    assert_eq!(
        fails(&["run", "two.s", "--input", "x=/dev/zero"]),
        format!(
            "error: --input x=/dev/zero: cannot read /dev/zero: it is a character device, {NOT_REGULAR}\n"
        )
    );
    assert_eq!(
        fails(&["run", "two.s", "--input", "x=pipe"]),
        format!("error: --input x=pipe: cannot read pipe: it is a FIFO, {NOT_REGULAR}\n")
    );
    assert_eq!(
        fails(&["replay", "two.s", "/dev/zero"]),
        format!("error: cannot read trace /dev/zero: it is a character device, {NOT_REGULAR}\n")
    );
    assert_eq!(
        fails(&["replay", "two.s", "pipe"]),
        format!("error: cannot read trace pipe: it is a FIFO, {NOT_REGULAR}\n")
    );
    assert!(fails(&["run", "pipe.s"]).ends_with(&format!("pipe.s: it is a FIFO, {NOT_REGULAR}\n")));
    assert!(
        fails(&["asm", "pipe.s", "-o", "p.bib"]).ends_with(&format!("pipe.s: it is a FIFO, {NOT_REGULAR}\n"))
    );
    // A .bib program that is a FIFO is refused before it is opened, too.
    std::fs::rename(dir.path().join("pipe"), dir.path().join("pipe.bib")).unwrap();
    assert!(fails(&["run", "pipe.bib"]).ends_with(&format!("it is a FIFO, {NOT_REGULAR}\n")));
    assert_eq!(listing(dir.path()), ["pipe.bib", "pipe.s", "two.s", "x.npy"]);
}

#[test]
fn a_device_or_fifo_in_a_constant_source_is_an_assembler_error_on_its_line() {
    let dir = tempfile::tempdir().unwrap();
    mkfifo(&dir.path().join("pipe.npy"));
    for (path, what) in [("/dev/zero", "a character device"), ("pipe.npy", "a FIFO")] {
        let source = format!(".const %w f32[4] = npy(\"{path}\")\n.output y f32[4]\nSTORE y, %w\n");
        std::fs::write(dir.path().join("c.s"), &source).unwrap();
        let (code, _, err) = adeadvm(&["asm", "c.s", "-o", "c.bib"], dir.path(), &[]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains(&format!("cannot read `{path}`: it is {what}, {NOT_REGULAR}")), "{err}");
        assert!(err.contains("c.s:1:"), "{err}");
    }
    assert_eq!(listing(dir.path()), ["c.s", "pipe.npy"]);
}

#[test]
fn an_input_larger_than_the_memory_budget_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), "two.s", TWO_OUTPUTS);
    let (code, _, err) =
        adeadvm(&["run", "two.s", "--input", "x=x.npy", "--max-memory", "100"], dir.path(), &[]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err,
        "error: --input x=x.npy: cannot read x.npy: it is larger than the limit of 100 bytes for this file\n"
    );
}

// ---- item 7: all results or none ----

#[test]
fn a_run_whose_later_result_cannot_be_written_replaces_none_of_the_earlier_ones() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), "two.s", TWO_OUTPUTS);
    std::fs::write(dir.path().join("y.npy"), "old y").unwrap();
    std::fs::create_dir(dir.path().join("z.npy")).unwrap();
    let (code, _, err) = adeadvm(
        &["run", "two.s", "--input", "x=x.npy", "--output", "y=y.npy", "--output", "z=z.npy"],
        dir.path(),
        &[],
    );
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err, "error: cannot write z.npy: it is a folder\n");
    assert_eq!(std::fs::read_to_string(dir.path().join("y.npy")).unwrap(), "old y");
    assert_eq!(listing(dir.path()), ["two.s", "x.npy", "y.npy", "z.npy"]);
    // The same with --record and --profile-json as the later results.
    std::fs::remove_dir(dir.path().join("z.npy")).unwrap();
    for flag in ["--record", "--profile-json"] {
        std::fs::create_dir(dir.path().join("late")).unwrap();
        let (code, _, err) = adeadvm(
            &[
                "run", "two.s", "--input", "x=x.npy", "--output", "y=y.npy", "--output", "z=z.npy", flag,
                "late",
            ],
            dir.path(),
            &[],
        );
        assert_eq!(code, Some(1), "{err}");
        assert_eq!(err, "error: cannot write late: it is a folder\n");
        assert_eq!(std::fs::read_to_string(dir.path().join("y.npy")).unwrap(), "old y");
        assert_eq!(listing(dir.path()), ["late", "two.s", "x.npy", "y.npy"]);
        std::fs::remove_dir(dir.path().join("late")).unwrap();
    }
    // When every result can be written, all are.
    let (code, _, err) = adeadvm(
        &[
            "run", "two.s", "--input", "x=x.npy", "--output", "y=y.npy", "--output", "z=z.npy", "--record",
            "t.trc",
        ],
        dir.path(),
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(listing(dir.path()), ["t.trc", "two.s", "x.npy", "y.npy", "z.npy"]);
    let y = adeadvm::npy::read(&dir.path().join("y.npy"), None).unwrap();
    assert_eq!(y.to_f32().unwrap(), [2.0, 4.0, 6.0, 8.0]);
}

/// After a failed run, asking for an output says the run failed, instead of handing back the
/// outputs stored before the failure or those of an earlier run.
#[test]
fn after_a_failed_run_there_are_no_outputs() {
    let program = Program::from_asm(TWO_OUTPUTS, "two.s").unwrap();
    let mut s = Session::new(&program, &Config::default()).unwrap();
    s.set_input("x", HostTensor::from_f32(vec![4], &[1.0, 2.0, 3.0, 4.0]).unwrap()).unwrap();
    s.run().unwrap();
    assert_eq!(s.output("z").unwrap().to_f32().unwrap(), [2.0, 4.0, 6.0, 8.0]);
    // Three steps: the third stores y, then the step budget ends the run before z is stored.
    let mut limited = Session::new(&program, &Config { max_steps: Some(3), ..Config::default() }).unwrap();
    limited.set_input("x", HostTensor::from_f32(vec![4], &[1.0, 2.0, 3.0, 4.0]).unwrap()).unwrap();
    assert!(limited.run().is_err());
    let why = "the step budget of 3 instructions was used up; the program may loop forever (raise --max-steps if not)";
    for name in ["y", "z"] {
        assert_eq!(
            limited.output(name).unwrap_err().to_string(),
            format!("output `{name}`: there are no outputs, the last run failed: {why}")
        );
    }
    assert!(limited.outputs().is_empty());
}

// ---- item 8: a GPU timeout is reported, and the process exits ----

/// A KERNEL that runs for days (tests/support/kernels/spin.comp) under a 1 s GPU timeout: the
/// timeout's error comes back and the process exits, instead of waiting for the device forever
/// while tearing down.
#[test]
fn a_kernel_running_past_the_gpu_timeout_is_reported_and_the_process_exits() {
    if let Err(e) = adeadvm::vm::shared_device() {
        assert!(!required(), "ADEADVM_REQUIRE_VULKAN=1 but no Vulkan device: {e}");
        eprintln!("skipped: {e}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(root().join("tests/support/kernels/spin.spv"), dir.path().join("spin.spv")).unwrap();
    let source = ".tier fast\n.input %x f32[64]\n.tensor %y f32[64]\n.output y f32[64]\n\
        .spirv spin = file(\"spin.spv\")\n\
        .kernel k = spin \"main\" bindings(%x, %y) push(u32 65535, u32 64) groups(65535, 1, 1)\n\
        ALLOC %y\nKERNEL k\nGPU_SYNC\nSTORE y, %y\nFREE %y\n";
    std::fs::write(dir.path().join("spin.s"), source).unwrap();
    let x = HostTensor::from_f32(vec![64], &[1.0; 64]).unwrap();
    std::fs::write(dir.path().join("x.npy"), adeadvm::npy::to_bytes(&x)).unwrap();
    let start = Instant::now();
    let (code, _, err) = adeadvm(
        &["run", "spin.s", "--backend", "vulkan", "--input", "x=x.npy", "--output", "y=y.npy"],
        dir.path(),
        &[("ADEADVM_GPU_TIMEOUT", "1")],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.trim_end()
            .ends_with("the GPU did not finish a batch within 1 s (set ADEADVM_GPU_TIMEOUT to wait longer)"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(listing(dir.path()), ["spin.s", "spin.spv", "x.npy"]);
    eprintln!("the timeout was reported and the process exited after {:?}", start.elapsed());
}

/// The same through the C ABI: after a run fails, `adeadvm_session_output` reports
/// `ADEADVM_STATUS_NOT_WRITTEN` and why, instead of OK with the earlier run's tensors.
#[test]
fn after_a_failed_run_the_c_abi_reports_no_outputs() {
    use adeadvm::ffi::*;
    use std::ffi::{CStr, CString};
    use std::ptr::{null, null_mut};
    let source = CString::new(
        ".input %x f32[N]\n.output y f32[N]\nALLOC %t: f32[N]\nADD %t, %x, %x\nSTORE y, %t\nFREE %t\n",
    )
    .unwrap();
    let last_error = || {
        // SAFETY: adeadvm_last_error always returns a valid NUL-terminated string.
        unsafe { CStr::from_ptr(adeadvm_last_error()) }.to_string_lossy().into_owned()
    };
    let mut program = null_mut();
    // SAFETY: valid strings and a writable out pointer.
    assert_eq!(unsafe { adeadvm_program_from_asm(source.as_ptr(), null(), &mut program) }, AdeadvmStatus::Ok);
    // SAFETY: zeroed is a valid AdeadvmConfig before adeadvm_config_default fills it.
    let mut config: AdeadvmConfig = unsafe { std::mem::zeroed() };
    // SAFETY: `config` is writable.
    assert_eq!(unsafe { adeadvm_config_default(&mut config) }, AdeadvmStatus::Ok);
    config.backend = c"cpu".as_ptr();
    config.max_memory = 4096;
    let mut session = null_mut();
    // SAFETY: a live program, a readable config and a writable out pointer.
    assert_eq!(unsafe { adeadvm_session_new(program, &config, &mut session) }, AdeadvmStatus::Ok);
    let y = c"y";
    let x = c"x";
    let run_with = |n: usize| {
        let data = vec![1.0f32; n];
        // SAFETY: a live session; `shape` holds 1 value and `data` n floats.
        let set =
            unsafe { adeadvm_session_set_input(session, x.as_ptr(), 0, &n, 1, data.as_ptr().cast(), n * 4) };
        assert_eq!(set, AdeadvmStatus::Ok, "{}", last_error());
        // SAFETY: a live session.
        unsafe { adeadvm_session_run(session) }
    };
    let output = || {
        let (mut dtype, mut shape, mut rank, mut data, mut nbytes) =
            (0u32, [0usize; 8], 0usize, null(), 0usize);
        // SAFETY: a live session; every out pointer is writable, `shape` holds 8 values.
        unsafe {
            adeadvm_session_output(
                session,
                y.as_ptr(),
                &mut dtype,
                shape.as_mut_ptr(),
                8,
                &mut rank,
                &mut data,
                &mut nbytes,
            )
        }
    };
    assert_eq!(run_with(4), AdeadvmStatus::Ok, "{}", last_error());
    assert_eq!(output(), AdeadvmStatus::Ok);
    // 1000 floats in, 1000 out and the arena: past the 4096-byte budget.
    assert_eq!(run_with(1000), AdeadvmStatus::Budget);
    assert_eq!(output(), AdeadvmStatus::NotWritten);
    let err = last_error();
    assert!(
        err.starts_with("output `y`: there are no outputs, the last run failed: this run needs "),
        "{err}"
    );
    // SAFETY: live handles, each freed once.
    unsafe {
        adeadvm_session_free(session);
        adeadvm_program_free(program);
    }
}
