//! Executors: where tensor instructions run.

pub mod cpu;
