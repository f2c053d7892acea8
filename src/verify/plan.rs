//! The memory plan: concrete sizes once symbols are bound, and arena offsets for temporaries.
//!
//! Temporaries are placed in planning order (first reachable ALLOC, ties by id), each at the
//! lowest [`ARENA_ALIGN`]-aligned offset where it overlaps no already placed temporary it
//! interferes with (is allocated together with at some reachable program point). A greedy
//! first fit: simple, deterministic, and close to optimal for the stack-like lifetimes tensor
//! programs have.

use thiserror::Error;

use super::VerifiedProgram;
use crate::format::{ConstData, Program, TensorKind};
use crate::isa::{DType, Dim, MAX_DIM, MAX_ELEMENTS};

/// Alignment of every temporary in the arena: enough for any SIMD load, and the largest
/// minStorageBufferOffsetAlignment Vulkan allows, so the device arena (laid out by the same plan)
/// can bind each tensor at its own offset. The gap it leaves after a tensor also holds the
/// rounding of a 2-byte tensor's binding up to whole words.
pub const ARENA_ALIGN: u64 = 256;

/// Where every tensor lives, for one binding of the symbolic dimensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Per tensor id: the arena offset of each temporary (a multiple of [`ARENA_ALIGN`]);
    /// None for inputs and constants. Temporaries never allocated by reachable code get 0 and
    /// do not count toward the peak.
    pub offsets: Vec<Option<u64>>,
    /// Per tensor id: its size in bytes.
    pub sizes: Vec<u64>,
    /// Per output id: its size in bytes.
    pub output_sizes: Vec<u64>,
    /// Arena bytes needed: the largest end offset of any temporary.
    pub peak_bytes: u64,
    /// Bytes of all constants as tensors (splat constants counted at their full size).
    pub const_bytes: u64,
    /// Bytes of all inputs.
    pub input_bytes: u64,
    /// Bytes of all outputs.
    pub output_bytes: u64,
}

/// Why sizes could not be computed for the given dimensions or inputs.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlanError {
    #[error("expected {expected} dimension values (one per symbol: {names}), got {got}")]
    DimCount { expected: usize, got: usize, names: String },
    #[error("dimension {name} = {value} exceeds the maximum {MAX_DIM}")]
    DimTooLarge { name: String, value: u64 },
    #[error("{what} is too large: its size in bytes does not fit 64 bits")]
    Overflow { what: String },
    #[error(
        "{what} has shape {shape:?}: {elements} elements, more than the maximum of {MAX_ELEMENTS} (2^40)"
    )]
    TooManyElements { what: String, shape: Vec<u64>, elements: u128 },
    #[error("unknown dimension {name} (the program's symbols: {known})")]
    UnknownSymbol { name: String, known: String },
    #[error("missing input {name}: the program declares it as {declared}")]
    MissingInput { name: String, declared: String },
    #[error("unknown input {name} (the program's inputs: {known})")]
    UnknownInput { name: String, known: String },
    #[error("input {name} is given twice")]
    DuplicateInput { name: String },
    #[error("input {name} is declared {declared} (rank {rank}) but was given shape {given:?} (rank {})", .given.len())]
    WrongRank { name: String, declared: String, rank: usize, given: Vec<u64> },
    #[error("input {name} is declared {declared} but was given shape {given:?}: axis {axis} must be {want}")]
    WrongSize { name: String, declared: String, given: Vec<u64>, axis: usize, want: u64 },
    #[error(
        "input {name} has {sym} = {value} (axis {axis}), but input {first} already set {sym} = {first_value}"
    )]
    Conflict { name: String, sym: String, value: u64, axis: usize, first: String, first_value: u64 },
}

impl PlanError {
    /// Input `t` (a declared input of a program with symbols `syms`) was not given.
    pub fn missing_input(t: &crate::format::TensorDecl, syms: &[String]) -> PlanError {
        let declared = format!("{}{}", t.dtype, crate::isa::shape_text(&t.shape, syms));
        PlanError::MissingInput { name: t.name.clone(), declared }
    }
}

/// A shape with its symbols replaced by their values.
pub(crate) fn concrete_shape(p: &Program, shape: &[Dim], dims: &[u64]) -> Result<Vec<u64>, PlanError> {
    check_dims(p, dims)?;
    Ok(shape
        .iter()
        .map(|d| match *d {
            Dim::Const(n) => n as u64,
            Dim::Sym(s) => dims.get(s.0 as usize).copied().unwrap_or(0),
        })
        .collect())
}

fn check_dims(p: &Program, dims: &[u64]) -> Result<(), PlanError> {
    if dims.len() != p.syms.len() {
        return Err(PlanError::DimCount {
            expected: p.syms.len(),
            got: dims.len(),
            names: p.syms.join(", "),
        });
    }
    for (name, &value) in p.syms.iter().zip(dims) {
        if value > MAX_DIM as u64 {
            return Err(PlanError::DimTooLarge { name: name.clone(), value });
        }
    }
    Ok(())
}

fn bytes(
    p: &Program,
    dtype: DType,
    shape: &[Dim],
    dims: &[u64],
    what: impl Fn() -> String,
) -> Result<u64, PlanError> {
    let shape = concrete_shape(p, shape, dims)?;
    // Every dim is at most MAX_DIM (< 2^31) and there are at most MAX_RANK (8) of them: the
    // product is checked in 128 bits, so it never overflows before the limit is applied.
    let elements = shape.iter().try_fold(1u128, |acc, &d| acc.checked_mul(u128::from(d)));
    match elements {
        Some(n) if n <= u128::from(MAX_ELEMENTS) => Ok(n as u64 * dtype.size() as u64),
        Some(n) => Err(PlanError::TooManyElements { what: what(), shape, elements: n }),
        None => Err(PlanError::Overflow { what: what() }),
    }
}

fn sum(mut values: impl Iterator<Item = u64>, what: &str) -> Result<u64, PlanError> {
    values
        .try_fold(0u64, |a, b| a.checked_add(b))
        .ok_or_else(|| PlanError::Overflow { what: what.to_string() })
}

impl VerifiedProgram {
    /// Plans memory for one binding of the symbols (`dims[i]` is the value of symbol i).
    pub fn plan(&self, dims: &[u64]) -> Result<MemoryPlan, PlanError> {
        let p = self.program();
        check_dims(p, dims)?;
        let sizes = p
            .tensors
            .iter()
            .map(|t| match t.kind {
                // Block-quantized constants are held (in host and device memory) as stored.
                TensorKind::Const(ConstData::Blocks { len, .. }) => Ok(len),
                _ => bytes(p, t.dtype, &t.shape, dims, || format!("tensor %{}", t.name)),
            })
            .collect::<Result<Vec<u64>, _>>()?;
        let output_sizes = p
            .outputs
            .iter()
            .map(|o| bytes(p, o.dtype, &o.shape, dims, || format!("output {}", o.name)))
            .collect::<Result<Vec<u64>, _>>()?;

        let mut offsets: Vec<Option<u64>> = vec![None; p.tensors.len()];
        let mut peak = 0u64;
        for &t in self.alloc_order() {
            if self.first_alloc(t).is_none() {
                // Never allocated at run time: it needs no space (offset 0, outside the peak).
                if let Some(slot) = offsets.get_mut(t.0 as usize) {
                    *slot = Some(0);
                }
                continue;
            }
            let size = sizes.get(t.0 as usize).copied().unwrap_or(0);
            let mut taken: Vec<(u64, u64)> = self
                .interferes_with(t)
                .iter()
                .filter_map(|u| {
                    let off = offsets.get(u.0 as usize).copied().flatten()?;
                    Some((off, off + sizes.get(u.0 as usize).copied().unwrap_or(0)))
                })
                .collect();
            taken.sort_unstable();
            let overflow =
                || PlanError::Overflow { what: format!("the arena (placing %{})", self.tensor(t).name) };
            let mut at = 0u64;
            for (start, end) in taken {
                if start == end {
                    continue; // empty tensors overlap nothing
                }
                if at.checked_add(size).ok_or_else(overflow)? <= start {
                    break;
                }
                if end > at {
                    at = end.checked_next_multiple_of(ARENA_ALIGN).ok_or_else(overflow)?;
                }
            }
            let end = at.checked_add(size).ok_or_else(overflow)?;
            peak = peak.max(end);
            if let Some(slot) = offsets.get_mut(t.0 as usize) {
                *slot = Some(at);
            }
        }

        let of_kind = |k: fn(&TensorKind) -> bool| {
            p.tensors.iter().zip(&sizes).filter(move |(t, _)| k(&t.kind)).map(|(_, s)| *s)
        };
        Ok(MemoryPlan {
            const_bytes: sum(of_kind(|k| matches!(k, TensorKind::Const(_))), "the constants")?,
            input_bytes: sum(of_kind(|k| matches!(k, TensorKind::Input)), "the inputs")?,
            output_bytes: sum(output_sizes.iter().copied(), "the outputs")?,
            offsets,
            sizes,
            output_sizes,
            peak_bytes: peak,
        })
    }

    /// Binds every symbol from the concrete shapes of the inputs (`name` with or without the
    /// leading `%`). Every input must be given exactly once, with its declared rank, its
    /// constant dims, and one value per symbol across all inputs. Symbols no input uses (and
    /// so nothing else may use) are bound to 1.
    pub fn dims_from_inputs(&self, inputs: &[(&str, &[u64])]) -> Result<Vec<u64>, PlanError> {
        let p = self.program();
        let declared: Vec<&crate::format::TensorDecl> =
            p.tensors.iter().filter(|t| t.kind == TensorKind::Input).collect();
        let known = || {
            let names: Vec<&str> = declared.iter().map(|t| t.name.as_str()).collect();
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        };
        let mut given: Vec<Option<&[u64]>> = vec![None; declared.len()];
        for (name, shape) in inputs {
            let name = name.strip_prefix('%').unwrap_or(name);
            let Some(k) = declared.iter().position(|t| t.name == name) else {
                return Err(PlanError::UnknownInput { name: name.to_string(), known: known() });
            };
            if given[k].is_some() {
                return Err(PlanError::DuplicateInput { name: name.to_string() });
            }
            given[k] = Some(shape);
        }
        let mut values: Vec<Option<(u64, &str)>> = vec![None; p.syms.len()];
        for (t, g) in declared.iter().zip(&given) {
            let declared_text = format!("{}{}", t.dtype, crate::isa::shape_text(&t.shape, &p.syms));
            let Some(g) = g else {
                return Err(PlanError::missing_input(t, &p.syms));
            };
            if g.len() != t.shape.len() {
                return Err(PlanError::WrongRank {
                    name: t.name.clone(),
                    declared: declared_text,
                    rank: t.shape.len(),
                    given: g.to_vec(),
                });
            }
            for (axis, (d, &v)) in t.shape.iter().zip(g.iter()).enumerate() {
                match *d {
                    Dim::Const(n) if n as u64 != v => {
                        return Err(PlanError::WrongSize {
                            name: t.name.clone(),
                            declared: declared_text,
                            given: g.to_vec(),
                            axis,
                            want: n as u64,
                        });
                    }
                    Dim::Const(_) => {}
                    Dim::Sym(s) => {
                        let sym = p.syms.get(s.0 as usize).cloned().unwrap_or_default();
                        if v > MAX_DIM as u64 {
                            return Err(PlanError::DimTooLarge { name: sym, value: v });
                        }
                        match values.get_mut(s.0 as usize) {
                            Some(Some((first_value, first))) if *first_value != v => {
                                return Err(PlanError::Conflict {
                                    name: t.name.clone(),
                                    sym,
                                    value: v,
                                    axis,
                                    first: first.to_string(),
                                    first_value: *first_value,
                                });
                            }
                            Some(slot @ None) => *slot = Some((v, t.name.as_str())),
                            _ => {}
                        }
                    }
                }
            }
        }
        Ok(values.into_iter().map(|v| v.map_or(1, |(v, _)| v)).collect())
    }
}
