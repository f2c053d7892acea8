//! Launchers: one function per tensor operation, recording its kernel's dispatches into a
//! [`super::Recorder`]. Operands are [`super::Slice`]s of contiguous row-major 32-bit data (f32
//! or i32); 16-bit tensors are widened to 32 bits around a launch by `cast`/`unpack16`/`pack16`.
//! Binding 0 of every kernel is the destination, then the sources in the instruction's order.
//! In the strict tier each launcher gives exactly the bits of the CPU reference
//! (`exec::cpu::reference` and `numerics`).

pub mod data;
pub mod rows;
