//! Checks of the program's tables: symbols, tensors, outputs and kernel dispatches.

use std::collections::{BTreeSet, HashSet};

use super::{spirv, Ctx, KernelInfo, VerifyError};
use crate::format::{is_identifier, ConstData, Program, TensorKind, DATA_ALIGN};
use crate::isa::{
    BlockFormat, DType, Dim, KernelId, OutputId, SymId, TensorId, MAX_DIM, MAX_ELEMENTS, MAX_RANK,
};

/// Checks the symbol, tensor and output tables.
pub fn check_tables(cx: &Ctx) -> Result<(), VerifyError> {
    let p = cx.p;
    let mut seen = HashSet::new();
    for s in &p.syms {
        if !is_identifier(s) {
            return Err(VerifyError::Program { message: format!("symbol name {s:?} is not an identifier") });
        }
        if !seen.insert(s.as_str()) {
            return Err(VerifyError::Program { message: format!("symbol {s} is declared twice") });
        }
    }
    if p.syms.len() > u16::MAX as usize {
        return Err(VerifyError::Program {
            message: format!("{} symbols; at most {} are addressable", p.syms.len(), u16::MAX),
        });
    }
    // 0xFFFF encodes "no tensor" in optional operands, so ids stop at 0xFFFE.
    if p.tensors.len() > u16::MAX as usize {
        return Err(VerifyError::Program {
            message: format!("{} tensors; at most {} are addressable", p.tensors.len(), u16::MAX),
        });
    }
    if p.outputs.len() > u16::MAX as usize + 1 || p.kernels.len() > u16::MAX as usize + 1 {
        return Err(VerifyError::Program { message: "too many outputs or kernels to address".into() });
    }

    let input_syms: BTreeSet<SymId> = p
        .tensors
        .iter()
        .filter(|t| t.kind == TensorKind::Input)
        .flat_map(|t| t.shape.iter())
        .filter_map(|d| match d {
            Dim::Sym(s) => Some(*s),
            Dim::Const(_) => None,
        })
        .collect();

    let mut names = HashSet::new();
    for (i, t) in p.tensors.iter().enumerate() {
        let id = TensorId(i as u16);
        let err = |message: String| VerifyError::Tensor { id, name: t.name.clone(), message };
        if t.name.is_empty() {
            return Err(err("the tensor has an empty name".into()));
        }
        if !names.insert(t.name.as_str()) {
            return Err(err(format!("the name %{} is declared twice", t.name)));
        }
        check_shape(cx, &t.shape, t.dtype).map_err(err)?;
        match t.kind {
            TensorKind::Input => {}
            TensorKind::Temp => {
                if let Some(s) = first_unbound_sym(&t.shape, &input_syms) {
                    return Err(err(format!(
                        "temporary {}{} uses symbol {}, which no input's shape contains, so its size \
                         cannot be known when the inputs are bound",
                        t.dtype,
                        cx.shape(&t.shape),
                        cx.dim(Dim::Sym(s))
                    )));
                }
            }
            TensorKind::Const(data) => {
                if t.shape.iter().any(|d| matches!(d, Dim::Sym(_))) {
                    return Err(err(format!(
                        "constant {}{} has a symbolic dimension; constants must have concrete shapes",
                        t.dtype,
                        cx.shape(&t.shape)
                    )));
                }
                let elements = const_elements(&t.shape);
                match data {
                    ConstData::Bytes { offset, len } => {
                        let want = elements.checked_mul(t.dtype.size() as u64);
                        if want != Some(len) {
                            return Err(err(format!(
                                "constant {}{} needs {} bytes ({elements} elements of {} bytes) but its data is {len} bytes",
                                t.dtype,
                                cx.shape(&t.shape),
                                want.map_or("more than 2^64".to_string(), |w| w.to_string()),
                                t.dtype.size()
                            )));
                        }
                        check_data_range(p, offset, len).map_err(err)?;
                    }
                    ConstData::Blocks { format, offset, len } => {
                        if t.dtype != DType::F32 {
                            return Err(err(format!(
                                "constant {} {}{} stores {format} blocks, whose values are f32, so its dtype must be f32",
                                t.name,
                                t.dtype,
                                cx.shape(&t.shape)
                            )));
                        }
                        let row = match t.shape.last() {
                            Some(Dim::Const(k)) => *k as usize,
                            _ => 0,
                        };
                        if t.shape.is_empty() || !row.is_multiple_of(BlockFormat::BLOCK_ELEMS) {
                            return Err(err(format!(
                                "constant {}{} stores {format} blocks along its last axis, which must be a nonzero rank and a multiple of 32 long",
                                format,
                                cx.shape(&t.shape)
                            )));
                        }
                        let want = format.byte_len(elements);
                        if want != Some(len) {
                            return Err(err(format!(
                                "constant {format}{} needs {} bytes ({} blocks of {} bytes) but its data is {len} bytes",
                                cx.shape(&t.shape),
                                want.map_or("more than 2^64".to_string(), |w| w.to_string()),
                                elements / BlockFormat::BLOCK_ELEMS as u64,
                                format.block_bytes()
                            )));
                        }
                        check_data_range(p, offset, len).map_err(err)?;
                        let bytes = p.data.get(offset as usize..(offset + len) as usize).unwrap_or_default();
                        if let Some((block, bits)) = crate::numerics::quant::first_nonfinite(format, bytes) {
                            return Err(err(format!(
                                "block {block} of constant {format}{} has a scale or min that is not finite (f16 bits {bits:#06x}); {format} blocks must hold finite numbers",
                                cx.shape(&t.shape)
                            )));
                        }
                    }
                    ConstData::Splat(bits) => {
                        if t.dtype.size() == 2 && bits > 0xFFFF {
                            return Err(err(format!(
                                "splat value {bits:#x} does not fit a {}-bit {} element",
                                t.dtype.size() * 8,
                                t.dtype
                            )));
                        }
                    }
                }
            }
        }
    }

    let mut names = HashSet::new();
    for (i, o) in p.outputs.iter().enumerate() {
        let err =
            |message: String| VerifyError::Output { id: OutputId(i as u16), name: o.name.clone(), message };
        if o.name.is_empty() {
            return Err(err("the output has an empty name".into()));
        }
        if !names.insert(o.name.as_str()) {
            return Err(err(format!("the output {} is declared twice", o.name)));
        }
        check_shape(cx, &o.shape, o.dtype).map_err(err)?;
        if let Some(s) = first_unbound_sym(&o.shape, &input_syms) {
            return Err(err(format!(
                "output {}{} uses symbol {}, which no input's shape contains, so its size cannot be \
                 known when the inputs are bound",
                o.dtype,
                cx.shape(&o.shape),
                cx.dim(Dim::Sym(s))
            )));
        }
    }
    Ok(())
}

fn first_unbound_sym(shape: &[Dim], input_syms: &BTreeSet<SymId>) -> Option<SymId> {
    shape.iter().find_map(|d| match d {
        Dim::Sym(s) if !input_syms.contains(s) => Some(*s),
        _ => None,
    })
}

fn const_elements(shape: &[Dim]) -> u64 {
    shape.iter().fold(1u64, |acc, d| match d {
        Dim::Const(n) => acc.saturating_mul(*n as u64),
        Dim::Sym(_) => acc,
    })
}

/// Rank, dimension ranges, symbol ids, and that the constant part of the size fits 64 bits.
fn check_shape(cx: &Ctx, shape: &[Dim], dtype: DType) -> Result<(), String> {
    if shape.len() > MAX_RANK {
        return Err(format!("rank {} exceeds the maximum {MAX_RANK}", shape.len()));
    }
    for d in shape {
        match *d {
            Dim::Const(n) if n > MAX_DIM => {
                return Err(format!("dimension {n} exceeds the maximum {MAX_DIM}"));
            }
            Dim::Sym(s) if s.0 as usize >= cx.p.syms.len() => {
                return Err(format!(
                    "dimension refers to symbol {}, but there are {} symbols",
                    s.0,
                    cx.p.syms.len()
                ));
            }
            _ => {}
        }
    }
    // The constant part of the element count; symbols only make it larger (or zero).
    let elements = shape.iter().try_fold(1u64, |acc, d| match *d {
        Dim::Const(n) => acc.checked_mul(n as u64),
        Dim::Sym(_) => Some(acc),
    });
    if elements.is_none_or(|n| n > MAX_ELEMENTS) {
        return Err(format!(
            "{dtype}{} has more than the maximum of {MAX_ELEMENTS} (2^40) elements",
            cx.shape(shape)
        ));
    }
    Ok(())
}

/// Checks every kernel dispatch and its SPIR-V; returns what each kernel's shader does.
pub fn check_kernels(cx: &Ctx) -> Result<Vec<KernelInfo>, VerifyError> {
    let p = cx.p;
    let mut out = Vec::with_capacity(p.kernels.len());
    for (i, k) in p.kernels.iter().enumerate() {
        let err =
            |message: String| VerifyError::Kernel { id: KernelId(i as u16), name: k.name.clone(), message };
        let Some(module) = p.spirv.get(k.module as usize) else {
            return Err(err(format!(
                "names SPIR-V module {}, but the program has {} modules",
                k.module,
                p.spirv.len()
            )));
        };
        for (b, t) in k.bindings.iter().enumerate() {
            match cx.decl(*t) {
                None => {
                    return Err(err(format!(
                        "binding {b} is tensor {}, out of range (the program has {} tensors)",
                        t.0,
                        p.tensors.len()
                    )))
                }
                Some(d) if matches!(d.kind, TensorKind::Const(ConstData::Blocks { .. })) => {
                    return Err(err(format!(
                        "binding {b} is {} ({}), a block-quantized constant, which a kernel cannot bind",
                        cx.name(*t),
                        cx.ty(*t)
                    )))
                }
                Some(_) => {}
            }
        }
        if let Some(axis) = k.groups.iter().position(|&g| g == 0) {
            return Err(err(format!(
                "workgroup count {} is zero on axis {}; every count must be at least 1",
                k.groups.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(", "),
                ["x", "y", "z"].get(axis).copied().unwrap_or("?")
            )));
        }
        if k.push.len() % 4 != 0 {
            return Err(err(format!("push constants are {} bytes, not a multiple of 4", k.push.len())));
        }
        let facts = spirv::check_module(&module.words, &k.entry, k.bindings.len(), k.push.len())
            .map_err(|m| err(format!("SPIR-V module {}: {m}", module.name)))?;
        for (b, (&t, &w)) in k.bindings.iter().zip(&facts.written).enumerate() {
            let kind = cx.decl(t).map(|d| d.kind);
            if w && kind != Some(TensorKind::Temp) {
                return Err(err(format!(
                    "binding {b} is {}, {}, but the shader may write it (its buffer is not decorated \
                     NonWritable); only temporaries can be written (mark the buffer `readonly` in the shader)",
                    cx.name(t),
                    cx.kind_word(t)
                )));
            }
        }
        out.push(facts);
    }
    Ok(out)
}

/// A constant's stored bytes are aligned and inside the data section.
fn check_data_range(p: &Program, offset: u64, len: u64) -> Result<(), String> {
    if !offset.is_multiple_of(DATA_ALIGN as u64) {
        return Err(format!("constant data offset {offset} is not a multiple of {DATA_ALIGN}"));
    }
    if offset.checked_add(len).is_none_or(|e| e > p.data.len() as u64) {
        return Err(format!(
            "constant data {offset}+{len} lies outside the {}-byte data section",
            p.data.len()
        ));
    }
    Ok(())
}
