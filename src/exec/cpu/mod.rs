//! The CPU executor. `reference` is the scalar strict implementation every other executor
//! must match bit for bit.

pub mod reference;
