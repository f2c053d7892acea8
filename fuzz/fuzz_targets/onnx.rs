//! cargo-fuzz target `onnx`: see `onnx` in tests/common/hostile.rs, which `cargo test` also
//! runs over the corpus in fuzz/corpus/onnx and every crash kept in fuzz/regressions/onnx.
#![no_main]

#[path = "../../tests/common/hostile.rs"]
mod hostile;

libfuzzer_sys::fuzz_target!(|data: &[u8]| hostile::onnx(data));
