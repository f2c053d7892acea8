//! cargo-fuzz target `gguf`: see `gguf` in tests/common/hostile.rs, which `cargo test` also
//! runs over the corpus in fuzz/corpus/gguf and every crash kept in fuzz/regressions/gguf.
#![no_main]

#[path = "../../tests/common/hostile.rs"]
mod hostile;

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostile::gguf(data));
