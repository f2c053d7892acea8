//! Reads a compute shader's interface from its SPIR-V with rspirv: the storage-buffer bindings of
//! descriptor set 0 and the size of the push-constant block.

use std::collections::{BTreeSet, HashMap};

use rspirv::dr::{Instruction, Operand};
use rspirv::spirv::{Decoration, Op, StorageClass};

/// What a pipeline layout needs to know about a shader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Storage-buffer bindings of descriptor set 0, ascending.
    pub bindings: Vec<u32>,
    /// Bytes of the push-constant block (0 when there is none).
    pub push_bytes: u32,
}

fn lit(op: Option<&Operand>) -> Option<u32> {
    match op {
        Some(Operand::LiteralBit32(v)) => Some(*v),
        _ => None,
    }
}

/// Reflects `words`; an error names what the module lacks.
pub fn reflect(words: &[u32]) -> Result<Interface, String> {
    crate::verify::check_spirv_layout(words)?;
    let module = rspirv::dr::load_words(words).map_err(|e| format!("the SPIR-V does not parse: {e}"))?;
    let defs: HashMap<u32, &Instruction> =
        module.types_global_values.iter().filter_map(|i| Some((i.result_id?, i))).collect();
    let mut deco: HashMap<(u32, Decoration), Option<u32>> = HashMap::new();
    let mut member_offset: HashMap<(u32, u32), u32> = HashMap::new();
    for a in &module.annotations {
        match (a.class.opcode, a.operands.first()) {
            (Op::Decorate, Some(Operand::IdRef(t))) => {
                if let Some(Operand::Decoration(d)) = a.operands.get(1) {
                    deco.insert((*t, *d), lit(a.operands.get(2)));
                }
            }
            (Op::MemberDecorate, Some(Operand::IdRef(t))) => {
                if let (Some(m), Some(Operand::Decoration(Decoration::Offset)), Some(off)) =
                    (lit(a.operands.get(1)), a.operands.get(2), lit(a.operands.get(3)))
                {
                    member_offset.insert((*t, m), off);
                }
            }
            _ => {}
        }
    }
    let pointee = |ptr: u32| -> Option<u32> {
        let p = defs.get(&ptr)?;
        match (p.class.opcode, p.operands.get(1)) {
            (Op::TypePointer, Some(Operand::IdRef(t))) => Some(*t),
            _ => None,
        }
    };
    let mut bindings = BTreeSet::new();
    let mut push_bytes = 0;
    for v in module.types_global_values.iter().filter(|i| i.class.opcode == Op::Variable) {
        let (Some(var), Some(ptr), Some(Operand::StorageClass(sc))) =
            (v.result_id, v.result_type, v.operands.first())
        else {
            continue;
        };
        let ty = pointee(ptr).ok_or_else(|| format!("variable %{var} has no pointer type"))?;
        let storage = match sc {
            StorageClass::StorageBuffer => true,
            StorageClass::Uniform => deco.contains_key(&(ty, Decoration::BufferBlock)),
            StorageClass::PushConstant => {
                push_bytes = size_of(&defs, &member_offset, ty, 0)?;
                continue;
            }
            _ => false,
        };
        if !storage {
            continue;
        }
        let set = deco.get(&(var, Decoration::DescriptorSet)).copied().flatten();
        let binding = deco.get(&(var, Decoration::Binding)).copied().flatten();
        match (set, binding) {
            (Some(0), Some(b)) => {
                bindings.insert(b);
            }
            (Some(s), Some(_)) => {
                return Err(format!("storage buffer %{var} is in descriptor set {s}, not 0"))
            }
            _ => return Err(format!("storage buffer %{var} lacks a DescriptorSet or Binding decoration")),
        }
    }
    Ok(Interface { bindings: bindings.into_iter().collect(), push_bytes })
}

/// Bytes of a push-constant type: scalars, vectors and structs (by member offsets).
fn size_of(
    defs: &HashMap<u32, &Instruction>,
    offsets: &HashMap<(u32, u32), u32>,
    ty: u32,
    depth: usize,
) -> Result<u32, String> {
    if depth > 16 {
        return Err("push-constant types nest too deeply".into());
    }
    let i = defs.get(&ty).ok_or_else(|| format!("type %{ty} is not defined"))?;
    match i.class.opcode {
        Op::TypeFloat | Op::TypeInt => Ok(lit(i.operands.first()).unwrap_or(32) / 8),
        Op::TypeVector => {
            let (Some(Operand::IdRef(c)), Some(n)) = (i.operands.first(), lit(i.operands.get(1))) else {
                return Err(format!("vector type %{ty} is malformed"));
            };
            Ok(n * size_of(defs, offsets, *c, depth + 1)?)
        }
        Op::TypeStruct => {
            let mut end = 0;
            for (m, op) in i.operands.iter().enumerate() {
                let Operand::IdRef(mt) = op else { continue };
                let off = offsets.get(&(ty, m as u32)).copied().unwrap_or(0);
                end = end.max(off + size_of(defs, offsets, *mt, depth + 1)?);
            }
            Ok(end)
        }
        op => Err(format!("push-constant member type {op:?} is not supported")),
    }
}
