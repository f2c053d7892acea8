//! The end of `cargo test`: what did not run on this machine, and why.
//!
//! Not a test (harness = false in Cargo.toml): it prints the lines that the tests recorded with
//! `common::skip::skipped` during this run, so nothing is skipped silently. Named to sort last:
//! cargo runs test binaries in the order of their names (the doc-tests follow; they skip nothing).

#[path = "common/skip.rs"]
mod skip;

use std::collections::BTreeMap;

fn main() {
    let dir = skip::record_dir(skip::runner_id());
    let record = std::fs::read_to_string(dir.join(skip::RECORD)).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    // (binary, what, why) -> the tests that skipped it.
    let mut skips: BTreeMap<(&str, &str, &str), Vec<&str>> = BTreeMap::new();
    for line in record.lines() {
        let mut fields = line.splitn(4, '\t');
        let (Some(binary), Some(test), Some(what), Some(why)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let tests = skips.entry((binary, what, why)).or_default();
        if !tests.contains(&test) {
            tests.push(test);
        }
    }
    if skips.is_empty() {
        println!("\nevery check ran: nothing was skipped on this machine\n");
        return;
    }
    println!("\nwhat did not run on this machine ({} kind(s) of check):", skips.len());
    for ((binary, what, why), tests) in skips {
        let shown: Vec<&str> = tests.iter().take(3).copied().collect();
        let more = if tests.len() > 3 { format!(" and {} more", tests.len() - 3) } else { String::new() };
        println!("  SKIPPED {binary}: {what}: {why}\n          in {}{more}", shown.join(", "));
    }
    println!();
}
