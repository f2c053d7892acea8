//! Strict-tier scalar numerics: the exact arithmetic every executor (scalar CPU, SIMD CPU,
//! Vulkan on lavapipe and NVIDIA) repeats so that strict programs give the same bits everywhere.
//!
//! # The rules
//!
//! Strict mode uses only IEEE binary32 add, sub and mul (round to nearest even, never fused),
//! comparisons, selects and integer operations on `f32::to_bits`. Every add/sub/mul input and
//! result is flushed to zero if denormal ([`ftz`]), and every NaN is the one [`CANONICAL_NAN`]
//! ([`canon`]). Division, square roots and the transcendental functions are built from those
//! operations as fixed step sequences, written in each function's doc comment and repeated in
//! `shaders/include/strict.glsl`. Nothing here calls `/`, `f32::sqrt`, libm or `mul_add`.
//!
//! Reductions follow one tree ([`sum`], [`REDUCE_LANES`]); matmul-style dot products run `k`
//! ascending ([`dot`]). The row kernels ([`softmax_row`], [`layernorm_row`], [`rmsnorm_row`],
//! [`mean`], [`max_reduce`]) are the reference formulas for the corresponding opcodes.
//!
//! # Accuracy
//!
//! Measured with [`accuracy::ulp_error`] (error in f32 ulps at the exact value; 0.5 = correctly
//! rounded; inputs flushed before the f64 reference is evaluated; a flushed ±0 result stands for
//! any value below FLT_MIN). See docs/numerics.md for the full table, including the exhaustive runs.
//!
#![doc = include_str!("accuracy_table.md")]

pub mod accuracy;
mod convert;
mod div;
mod ops;
pub mod quant;
mod reduce;
mod transcendental;

pub use convert::{
    bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits, i32_to_bf16_bits, i32_to_f16_bits,
    BF16_CANONICAL_NAN, F16_CANONICAL_NAN,
};
pub use div::{div, recip, rsqrt, sqrt, RSQRT_UP};
pub use ops::{add, canon, ftz, max, min, mul, sub, CANONICAL_NAN};
pub use reduce::{
    dot, fma_chain_is_dot, layernorm_row, max_reduce, mean, rmsnorm_row, softmax_row, sum, REDUCE_LANES,
};
pub use transcendental::{erf, exp, gelu, log, sigmoid, silu, tanh};
