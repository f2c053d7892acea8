//! Hostile input: every file of the fuzz corpus (fuzz/corpus/<target>) and every crash the
//! fuzzers found (fuzz/regressions/<target>) goes through the same entry points the cargo-fuzz
//! targets drive (tests/common/hostile.rs), so a fixed crash stays fixed without a fuzzer. The
//! named tests below pin what each found crash now gives instead: a clear error.

mod common;

use std::path::{Path, PathBuf};

use common::hostile;

fn files(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut out = Vec::new();
    for dir in [root.join("corpus").join(target), root.join("regressions").join(target)] {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            out.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    out.sort();
    out
}

fn replay(target: &str, f: fn(&[u8])) {
    let files = files(target);
    assert!(!files.is_empty(), "no corpus for fuzz target {target}");
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        // A panic names the file: run `cargo fuzz run {target} <file>` to reproduce it.
        eprintln!("{}", path.display());
        f(&bytes);
    }
}

#[test]
fn bib_corpus_and_regressions_run_cleanly() {
    replay("bib", hostile::bib);
}

#[test]
fn asm_corpus_and_regressions_run_cleanly() {
    replay("asm", hostile::asm);
}

#[test]
fn npy_corpus_and_regressions_run_cleanly() {
    replay("npy", hostile::npy);
}

#[test]
fn capi_corpus_and_regressions_run_cleanly() {
    replay("capi", hostile::capi);
}

/// Found by the `npy` seeds before fuzzing started: npyz multiplied the header's dimensions
/// unchecked (an overflow panic in debug builds, a wrong element count in release builds).
#[test]
fn an_npy_shape_whose_element_count_overflows_is_malformed() {
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/npy/shape_product_overflows.npy"),
    )
    .unwrap();
    let err = adeadvm::npy::parse(&bytes, "big.npy", None).unwrap_err().to_string();
    assert_eq!(
        err,
        "big.npy is not a valid .npy file: shape (1099511627776, 1099511627776) has more elements than fit 64 bits"
    );
}
