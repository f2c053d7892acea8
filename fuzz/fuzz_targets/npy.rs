//! cargo-fuzz target `npy`: see `npy` in tests/common/hostile.rs, which `cargo test` also
//! runs over the corpus in fuzz/corpus/npy and every crash kept in fuzz/regressions/npy.
#![no_main]

#[path = "../../tests/common/hostile.rs"]
mod hostile;

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostile::npy(data));
