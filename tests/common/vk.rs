//! The Vulkan side of the test harness: one shared executor per test binary, and the rule that
//! a missing device skips a test unless ADEADVM_REQUIRE_VULKAN=1 (CI), where it fails.

use std::sync::OnceLock;

use adeadvm::exec::cpu::reference::{Binary, Unary};
use adeadvm::exec::vulkan::VulkanExec;

pub const UNARY: [Unary; 11] = [
    Unary::Neg,
    Unary::Abs,
    Unary::Sqrt,
    Unary::Rsqrt,
    Unary::Exp,
    Unary::Log,
    Unary::Relu,
    Unary::Sigmoid,
    Unary::Tanh,
    Unary::Gelu,
    Unary::Erf,
];
pub const BINARY: [Binary; 6] =
    [Binary::Add, Binary::Sub, Binary::Mul, Binary::Div, Binary::Max, Binary::Min];

/// Whether a missing Vulkan device must fail the tests (CI sets ADEADVM_REQUIRE_VULKAN=1).
pub fn required() -> bool {
    std::env::var("ADEADVM_REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

/// The shared executor, or None (after printing why) when there is no device and none is required.
pub fn exec() -> Option<&'static VulkanExec> {
    static EXEC: OnceLock<Result<VulkanExec, String>> = OnceLock::new();
    match EXEC.get_or_init(|| VulkanExec::new().map_err(|e| e.to_string())) {
        Ok(e) => Some(e),
        Err(reason) if required() => panic!("ADEADVM_REQUIRE_VULKAN=1 but no Vulkan device: {reason}"),
        Err(reason) => {
            super::skip::skipped("the Vulkan executor tests", &format!("no Vulkan device ({reason})"));
            None
        }
    }
}
