//! Saying what did not run, where the user sees it.
//!
//! libtest captures `println!`/`eprintln!` of passing tests, so a check that cannot run here (no
//! Vulkan device, no C compiler, a CPU without AVX-512, a device without cooperative matrices, a
//! model that could not be fetched) used to be visible only under `--nocapture`. [`skipped`]
//! writes to the process's stderr handle itself, which libtest does not capture, and appends a
//! line to a record that `tests/z_report_skipped.rs`, the last test binary `cargo test` runs,
//! prints as a summary at the end of the run.
//!
//! Invariant: the record of one `cargo test` run is the folder named after the process that
//! started the test binaries (cargo), so concurrent or earlier runs never mix into the summary.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

/// The folder holding the records of the `cargo test` run that started this test binary.
pub fn record_dir(runner: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("skipped").join(runner.to_string())
}

/// The id of the process that started this test binary (cargo, for `cargo test`).
pub fn runner_id() -> u32 {
    std::os::unix::process::parent_id()
}

/// Reports that `what` did not run, and why: on stderr now (once per binary), and in the
/// end-of-run summary (with the test that skipped it: libtest names each test's thread).
pub fn skipped(what: &str, why: &str) {
    static SAID: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| stem.split('-').next().unwrap_or_default().to_string())
        .unwrap_or_default();
    let test = std::thread::current().name().unwrap_or("main").to_string();
    let clean = |s: &str| s.replace(['\n', '\t'], " ");
    let (what, why) = (clean(what), clean(why));
    let first = SAID.lock().map(|mut said| said.insert(format!("{what}\t{why}"))).unwrap_or(true);
    if first {
        // Not eprintln!: libtest would capture it.
        let _ = writeln!(std::io::stderr(), "SKIPPED {binary}: {what}: {why}");
    }
    let dir = record_dir(runner_id());
    if std::fs::create_dir_all(&dir).is_ok() {
        // One short append per line: O_APPEND keeps concurrent test threads' lines whole.
        if let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(RECORD)) {
            let _ = file.write_all(format!("{binary}\t{test}\t{what}\t{why}\n").as_bytes());
        }
    }
}

/// The record's file name in [`record_dir`]: one line per skip, `binary\ttest\twhat\twhy`.
pub const RECORD: &str = "skipped.tsv";
