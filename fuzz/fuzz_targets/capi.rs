//! cargo-fuzz target `capi`: see `capi` in tests/common/hostile.rs, which `cargo test` also
//! runs over the corpus in fuzz/corpus/capi and every crash kept in fuzz/regressions/capi.
#![no_main]

#[path = "../../tests/common/hostile.rs"]
mod hostile;

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostile::capi(data));
