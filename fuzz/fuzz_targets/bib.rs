//! cargo-fuzz target `bib`: see `bib` in tests/common/hostile.rs, which `cargo test` also
//! runs over the corpus in fuzz/corpus/bib and every crash kept in fuzz/regressions/bib.
#![no_main]

#[path = "../../tests/common/hostile.rs"]
mod hostile;

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostile::bib(data));
