//! cargo-fuzz target `asm`: see `asm` in tests/common/hostile.rs, which `cargo test` also
//! runs over the corpus in fuzz/corpus/asm and every crash kept in fuzz/regressions/asm.
#![no_main]

#[path = "../../tests/common/hostile.rs"]
mod hostile;

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostile::asm(data));
