//! The embedded SPIR-V (compiled from shaders/*.comp by shaders/build.sh and committed, so a
//! build needs no glslc) and the op codes the shaders switch on.

use crate::exec::cpu::reference::{Binary, Unary};

/// (name, SPIR-V bytes) of every embedded shader; `shaders/<name>.comp` is its source.
pub const SHADERS: &[(&str, &[u8])] = &[
    ("unary", include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/spv/unary.spv"))),
    ("binary", include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/spv/binary.spv"))),
    ("binary_scalar", include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/spv/binary_scalar.spv"))),
];

pub(crate) fn spirv(name: &str) -> Option<&'static [u8]> {
    SHADERS.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// The code of `op` in shaders/include/elementwise.glsl `ew_unary`.
pub fn unary_op_code(op: Unary) -> u32 {
    match op {
        Unary::Neg => 0,
        Unary::Abs => 1,
        Unary::Sqrt => 2,
        Unary::Rsqrt => 3,
        Unary::Exp => 4,
        Unary::Log => 5,
        Unary::Relu => 6,
        Unary::Sigmoid => 7,
        Unary::Tanh => 8,
        Unary::Gelu => 9,
    }
}

/// The code of `op` in shaders/include/elementwise.glsl `ew_binary`.
pub fn binary_op_code(op: Binary) -> u32 {
    match op {
        Binary::Add => 0,
        Binary::Sub => 1,
        Binary::Mul => 2,
        Binary::Div => 3,
        Binary::Max => 4,
        Binary::Min => 5,
    }
}
