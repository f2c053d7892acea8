//! Executors: where tensor instructions run.

pub mod cpu;
pub mod vulkan;
