//! Checks a user SPIR-V module against its dispatch: the entry point, its workgroup size, the
//! storage-buffer bindings of descriptor set 0 and the push-constant block.

use std::collections::{BTreeMap, HashMap};

use rspirv::dr::{Instruction, Module, Operand};
use rspirv::spirv::{BuiltIn, Decoration, ExecutionMode, ExecutionModel, Op, StorageClass};

use super::KernelInfo;

/// Deepest type nesting the size computation follows (a forged module may contain cycles).
const MAX_TYPE_DEPTH: usize = 32;

/// Checks that the module's instructions tile its words: a header of five words, then
/// instructions whose word counts are at least 1 and end inside the module. rspirv trusts the
/// counts and panics (slicing past the end) on a count that runs past the module, a case the
/// `bib` fuzz target found.
pub(crate) fn check_layout(words: &[u32]) -> Result<(), String> {
    if words.len() < 5 {
        return Err(format!(
            "the module does not parse: it is {} words, shorter than the 5-word header",
            words.len()
        ));
    }
    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        if count == 0 || count > words.len() - at {
            return Err(format!(
                "the module does not parse: the instruction at word {at} claims {count} words, but {} are left",
                words.len() - at
            ));
        }
        if words[at] & 0xffff == OP_SPEC_CONSTANT_OP && count >= 4 {
            check_spec_constant_op(words[at + 3], at)?;
        }
        at += count;
    }
    Ok(())
}

/// SPIR-V's opcode of OpSpecConstantOp.
const OP_SPEC_CONSTANT_OP: u32 = 52;

/// Refuses an OpSpecConstantOp (at word `at`) that computes `inner`, an opcode with an operand
/// whose parsing depends on the instruction around it (a literal typed by a result type, a
/// nested OpSpecConstantOp, OpSwitch's pairs): rspirv's parser panics on those there, a case the
/// `bib` fuzz target found. No specialization constant may compute such an opcode anyway.
fn check_spec_constant_op(inner: u32, at: usize) -> Result<(), String> {
    use rspirv::grammar::OperandKind as Kind;
    let Some(g) = rspirv::grammar::INSTRUCTION_TABLE.lookup_opcode(inner) else {
        return Ok(()); // rspirv reports an unknown opcode as an error
    };
    let contextual = |k: &Kind| {
        matches!(
            k,
            Kind::LiteralContextDependentNumber
                | Kind::LiteralSpecConstantOpInteger
                | Kind::PairLiteralIntegerIdRef
        )
    };
    if g.operands.iter().any(|o| contextual(&o.kind)) {
        return Err(format!(
            "the module does not parse: the OpSpecConstantOp at word {at} computes {}, which no specialization constant may",
            g.opname
        ));
    }
    Ok(())
}

pub fn check_module(
    words: &[u32],
    entry: &str,
    nbindings: usize,
    push_len: usize,
) -> Result<KernelInfo, String> {
    check_layout(words)?;
    // rspirv's loader returns errors for malformed input once the layout is sound; the catch
    // is a last line of defence so that no byte string can take the process down.
    let parsed = std::panic::catch_unwind(|| rspirv::dr::load_words(words))
        .map_err(|_| "the module does not parse (the SPIR-V parser failed)".to_string())?;
    let module = parsed.map_err(|e| format!("the module does not parse: {e}"))?;
    let m = Facts::new(&module);

    // The entry point.
    let mut names = Vec::new();
    let mut found = None;
    for ep in &module.entry_points {
        let model = match ep.operands.first() {
            Some(Operand::ExecutionModel(m)) => *m,
            _ => continue,
        };
        let (Some(Operand::IdRef(id)), Some(Operand::LiteralString(name))) =
            (ep.operands.get(1), ep.operands.get(2))
        else {
            continue;
        };
        names.push(name.clone());
        if name == entry {
            if model != ExecutionModel::GLCompute {
                return Err(format!(
                    "entry point \"{entry}\" is a {model:?} shader, not a GLCompute (compute) shader"
                ));
            }
            found = Some(*id);
        }
    }
    let Some(entry_id) = found else {
        return Err(if names.is_empty() {
            format!("has no entry points (looking for \"{entry}\")")
        } else {
            format!("has no entry point \"{entry}\" (it has: {})", names.join(", "))
        });
    };

    let local_size = m.local_size(&module, entry_id)?;
    if let Some(axis) = local_size.iter().position(|&s| s == 0) {
        return Err(format!("the workgroup size {local_size:?} is zero on axis {axis}"));
    }

    // Resource variables.
    let mut bindings: BTreeMap<u32, bool> = BTreeMap::new(); // binding -> written
    let mut push_block: Option<u32> = None; // pointee type of the push-constant variable
    for v in module.types_global_values.iter().filter(|i| i.class.opcode == Op::Variable) {
        let (Some(var), Some(ptr)) = (v.result_id, v.result_type) else { continue };
        let Some(Operand::StorageClass(sc)) = v.operands.first() else { continue };
        let pointee =
            m.pointee(ptr).ok_or_else(|| format!("variable %{var} does not have a pointer type"))?;
        let vname = m.name(var);
        let is_block = |d: Decoration| m.has(pointee, d);
        let storage = match sc {
            StorageClass::StorageBuffer => true,
            StorageClass::Uniform if is_block(Decoration::BufferBlock) => true,
            StorageClass::PushConstant => {
                if push_block.is_some() {
                    return Err("declares more than one push-constant block".into());
                }
                push_block = Some(pointee);
                continue;
            }
            StorageClass::Uniform | StorageClass::UniformConstant => {
                if m.decoration(var, Decoration::DescriptorSet).is_some()
                    || m.decoration(var, Decoration::Binding).is_some()
                {
                    return Err(format!(
                        "variable {vname} is a {} resource; KERNEL binds only storage buffers (`buffer` blocks)",
                        if *sc == StorageClass::Uniform { "uniform-buffer" } else { "image or sampler" }
                    ));
                }
                false
            }
            _ => false,
        };
        if !storage {
            continue;
        }
        let set = m.decoration(var, Decoration::DescriptorSet);
        let binding = m.decoration(var, Decoration::Binding);
        let (Some(set), Some(binding)) = (set, binding) else {
            return Err(format!("storage buffer {vname} lacks a DescriptorSet or Binding decoration"));
        };
        if set != 0 {
            return Err(format!(
                "storage buffer {vname} is in descriptor set {set}; KERNEL binds tensors only in set 0"
            ));
        }
        if !m.is_struct(pointee) {
            return Err(format!(
                "storage buffer {vname} at binding {binding} is an array of buffers; KERNEL binds one tensor per binding"
            ));
        }
        let readonly =
            m.has(var, Decoration::NonWritable) || m.all_members_have(pointee, Decoration::NonWritable);
        *bindings.entry(binding).or_insert(false) |= !readonly;
    }

    for &b in bindings.keys() {
        if b as usize >= nbindings {
            return Err(format!(
                "the shader declares a storage buffer at binding {b} of set 0, but the dispatch binds only {nbindings} \
                 tensors (bindings 0..{})",
                nbindings as i64 - 1
            ));
        }
    }
    let mut written = Vec::with_capacity(nbindings);
    for b in 0..nbindings {
        match bindings.get(&(b as u32)) {
            Some(&w) => written.push(w),
            None => {
                return Err(format!(
                    "the dispatch binds a tensor at binding {b}, but the shader declares no storage buffer at binding \
                     {b} of set 0"
                ))
            }
        }
    }

    let push_bytes = match push_block {
        None => 0,
        Some(t) => m.size_of(t, 0)?,
    };
    if push_bytes % 4 != 0 {
        return Err(format!("the push-constant block is {push_bytes} bytes, not a multiple of 4"));
    }
    if push_bytes != push_len as u64 {
        return Err(format!(
            "the shader's push-constant block is {push_bytes} bytes, but the dispatch gives {push_len} bytes of push constants"
        ));
    }
    let capabilities = module
        .capabilities
        .iter()
        .filter_map(|c| match c.operands.first() {
            Some(Operand::Capability(c)) => Some(*c),
            _ => None,
        })
        .collect();
    // Last, after the checks above whose messages say more about a dispatch's own mistakes:
    // the whole module against SPIR-V's and Vulkan's rules.
    validate(words)?;
    Ok(KernelInfo { written, local_size, push_bytes: push_bytes as u32, capabilities })
}

/// The Vulkan version whose rules a module is validated against: the newest adeadvm asks for
/// (`exec::vulkan::device` caps the instance at 1.3), which accepts SPIR-V 1.0 to 1.6.
const VALIDATION_ENV: spirv_tools::TargetEnv = spirv_tools::TargetEnv::Vulkan_1_3;

/// Runs SPIRV-Tools' validator (what `spirv-val --target-env vulkan1.3` runs) over the module.
/// The checks above read only the interface; a module that passes them can still hold, say, an
/// OpFMul whose result is a struct or an id defined twice, and Vulkan drivers do not validate:
/// lavapipe crashed the process building a pipeline from such modules. So no module reaches a
/// driver unless the validator accepts it.
pub(crate) fn validate(words: &[u32]) -> Result<(), String> {
    use spirv_tools::val::Validator;
    let validator = spirv_tools::val::create(Some(VALIDATION_ENV));
    validator.validate(words, None).map_err(|e| match e.diagnostic {
        Some(d) => {
            // The reason, and in the notes the offending instruction as disassembled.
            let message = d.message.trim().trim_end_matches('.');
            match d.notes.lines().map(str::trim).find(|l| !l.is_empty()) {
                Some(instruction) => {
                    format!("is not valid SPIR-V: `{instruction}`: {message} (SPIRV-Tools validator)")
                }
                None => format!("is not valid SPIR-V: {message} (SPIRV-Tools validator)"),
            }
        }
        None => format!("is not valid SPIR-V: the SPIRV-Tools validator refused it ({:?})", e.inner),
    })
}

struct Facts<'a> {
    defs: HashMap<u32, &'a Instruction>,
    decorations: HashMap<u32, Vec<&'a Instruction>>,
    member_decorations: HashMap<(u32, u32), Vec<&'a Instruction>>,
    names: HashMap<u32, &'a str>,
}

fn lit(op: Option<&Operand>) -> Option<u32> {
    match op {
        Some(Operand::LiteralBit32(v)) => Some(*v),
        Some(Operand::LiteralBit64(v)) => u32::try_from(*v).ok(),
        _ => None,
    }
}

impl<'a> Facts<'a> {
    fn new(module: &'a Module) -> Facts<'a> {
        let mut f = Facts {
            defs: HashMap::new(),
            decorations: HashMap::new(),
            member_decorations: HashMap::new(),
            names: HashMap::new(),
        };
        for i in &module.types_global_values {
            if let Some(id) = i.result_id {
                f.defs.insert(id, i);
            }
        }
        for a in &module.annotations {
            match a.class.opcode {
                Op::Decorate => {
                    if let Some(Operand::IdRef(t)) = a.operands.first() {
                        f.decorations.entry(*t).or_default().push(a);
                    }
                }
                Op::MemberDecorate => {
                    if let (Some(Operand::IdRef(t)), Some(m)) = (a.operands.first(), lit(a.operands.get(1))) {
                        f.member_decorations.entry((*t, m)).or_default().push(a);
                    }
                }
                _ => {}
            }
        }
        for n in &module.debug_names {
            if n.class.opcode == Op::Name {
                if let (Some(Operand::IdRef(t)), Some(Operand::LiteralString(s))) =
                    (n.operands.first(), n.operands.get(1))
                {
                    f.names.insert(*t, s.as_str());
                }
            }
        }
        f
    }

    fn name(&self, id: u32) -> String {
        match self.names.get(&id) {
            Some(n) if !n.is_empty() => format!("\"{n}\""),
            _ => format!("%{id}"),
        }
    }

    /// The first literal operand of decoration `d` on `id`, or Some(0) for a flag decoration.
    fn decoration(&self, id: u32, d: Decoration) -> Option<u32> {
        self.decorations.get(&id)?.iter().find_map(|a| match a.operands.get(1) {
            Some(Operand::Decoration(x)) if *x == d => Some(lit(a.operands.get(2)).unwrap_or(0)),
            _ => None,
        })
    }

    fn has(&self, id: u32, d: Decoration) -> bool {
        self.decoration(id, d).is_some()
    }

    fn member_decoration(&self, id: u32, member: u32, d: Decoration) -> Option<u32> {
        self.member_decorations.get(&(id, member))?.iter().find_map(|a| match a.operands.get(2) {
            Some(Operand::Decoration(x)) if *x == d => Some(lit(a.operands.get(3)).unwrap_or(0)),
            _ => None,
        })
    }

    fn is_struct(&self, id: u32) -> bool {
        self.defs.get(&id).is_some_and(|i| i.class.opcode == Op::TypeStruct)
    }

    fn all_members_have(&self, id: u32, d: Decoration) -> bool {
        match self.defs.get(&id) {
            Some(s) if s.class.opcode == Op::TypeStruct && !s.operands.is_empty() => {
                (0..s.operands.len() as u32).all(|m| self.member_decoration(id, m, d).is_some())
            }
            _ => false,
        }
    }

    fn pointee(&self, ptr: u32) -> Option<u32> {
        let p = self.defs.get(&ptr)?;
        if p.class.opcode != Op::TypePointer {
            return None;
        }
        match p.operands.get(1) {
            Some(Operand::IdRef(t)) => Some(*t),
            _ => None,
        }
    }

    /// The value of an integer constant (or a specialization constant's default).
    fn constant(&self, id: u32) -> Option<u32> {
        let c = self.defs.get(&id)?;
        match c.class.opcode {
            Op::Constant | Op::SpecConstant => lit(c.operands.first()),
            _ => None,
        }
    }

    fn local_size(&self, module: &Module, entry: u32) -> Result<[u32; 3], String> {
        // The WorkgroupSize built-in, when present, overrides the execution mode.
        for (id, decs) in &self.decorations {
            let is_wg = decs.iter().any(|a| {
                matches!(a.operands.get(1), Some(Operand::Decoration(Decoration::BuiltIn)))
                    && matches!(a.operands.get(2), Some(Operand::BuiltIn(BuiltIn::WorkgroupSize)))
            });
            if !is_wg {
                continue;
            }
            if let Some(c) = self.defs.get(id) {
                if matches!(c.class.opcode, Op::ConstantComposite | Op::SpecConstantComposite) {
                    let mut v = [0u32; 3];
                    for (k, slot) in v.iter_mut().enumerate() {
                        *slot = match c.operands.get(k) {
                            Some(Operand::IdRef(x)) => self.constant(*x),
                            _ => None,
                        }
                        .ok_or("the WorkgroupSize built-in is not a composite of three integer constants")?;
                    }
                    return Ok(v);
                }
            }
        }
        for em in &module.execution_modes {
            if !matches!(em.operands.first(), Some(Operand::IdRef(e)) if *e == entry) {
                continue;
            }
            match em.operands.get(1) {
                Some(Operand::ExecutionMode(ExecutionMode::LocalSize)) => {
                    let v = [lit(em.operands.get(2)), lit(em.operands.get(3)), lit(em.operands.get(4))];
                    if let [Some(x), Some(y), Some(z)] = v {
                        return Ok([x, y, z]);
                    }
                    return Err("malformed LocalSize execution mode".into());
                }
                Some(Operand::ExecutionMode(ExecutionMode::LocalSizeId)) => {
                    let get = |k: usize| match em.operands.get(k) {
                        Some(Operand::IdRef(x)) => self.constant(*x),
                        _ => None,
                    };
                    if let [Some(x), Some(y), Some(z)] = [get(2), get(3), get(4)] {
                        return Ok([x, y, z]);
                    }
                    return Err("the LocalSizeId execution mode does not name three integer constants".into());
                }
                _ => {}
            }
        }
        Err("the entry point declares no workgroup size (LocalSize execution mode)".into())
    }

    /// Byte size of a type as laid out in a push-constant block (Offset/ArrayStride decorated).
    fn size_of(&self, id: u32, depth: usize) -> Result<u64, String> {
        if depth > MAX_TYPE_DEPTH {
            return Err("push-constant types nest too deeply".into());
        }
        let t = self.defs.get(&id).ok_or_else(|| format!("push-constant block uses undefined type %{id}"))?;
        let overflow = || "push-constant block size overflows".to_string();
        match t.class.opcode {
            Op::TypeInt | Op::TypeFloat => {
                let w = lit(t.operands.first()).ok_or("malformed scalar type")?;
                Ok(w as u64 / 8)
            }
            Op::TypeVector | Op::TypeMatrix => {
                let (Some(Operand::IdRef(c)), Some(n)) = (t.operands.first(), lit(t.operands.get(1))) else {
                    return Err("malformed vector or matrix type".into());
                };
                self.size_of(*c, depth + 1)?.checked_mul(n as u64).ok_or_else(overflow)
            }
            Op::TypeArray => {
                let (Some(Operand::IdRef(e)), Some(Operand::IdRef(len))) =
                    (t.operands.first(), t.operands.get(1))
                else {
                    return Err("malformed array type".into());
                };
                let n = self
                    .constant(*len)
                    .ok_or("an array length in the push-constant block is not a constant")?;
                let stride = match self.decoration(id, Decoration::ArrayStride) {
                    Some(s) => s as u64,
                    None => self.size_of(*e, depth + 1)?,
                };
                stride.checked_mul(n as u64).ok_or_else(overflow)
            }
            Op::TypeStruct => {
                let mut end = 0u64;
                for (k, member) in t.operands.iter().enumerate() {
                    let Operand::IdRef(mt) = member else { return Err("malformed struct type".into()) };
                    let off = self
                        .member_decoration(id, k as u32, Decoration::Offset)
                        .ok_or_else(|| format!("push-constant member {k} has no Offset decoration"))?;
                    let e = (off as u64).checked_add(self.size_of(*mt, depth + 1)?).ok_or_else(overflow)?;
                    end = end.max(e);
                }
                Ok(end)
            }
            other => Err(format!("the push-constant block contains an unsupported type (Op{other:?})")),
        }
    }
}
