//! Generates the instruction set from `opcodes/isa.toml`: the `Opcode` and `Insn` enums, the
//! operand tables, conversions between typed instructions and generic operand lists, and the
//! text of docs/ISA.md. The hand-written code in src/isa encodes and decodes each operand kind;
//! everything per-opcode comes from here.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;

#[derive(Deserialize)]
struct Isa {
    instruction_bytes: usize,
    operand_start: usize,
    /// The numerics every executor follows (ISA.md's "Numerics" section), one rule an entry.
    #[serde(default)]
    numerics: Vec<String>,
    /// What every program relies on (ISA.md's "Program rules" section), one rule an entry.
    #[serde(default)]
    program_rules: Vec<String>,
    kinds: BTreeMap<String, Kind>,
    enums: BTreeMap<String, EnumDef>,
    op: Vec<Op>,
}

#[derive(Deserialize)]
struct Kind {
    width: usize,
    rust: String,
    doc: String,
}

#[derive(Deserialize)]
struct EnumDef {
    rust: String,
    values: Vec<String>,
}

#[derive(Deserialize)]
struct Op {
    name: String,
    mnemonic: Option<String>,
    code: u8,
    group: String,
    tier: Option<String>,
    dtypes: String,
    /// Tensor operands whose dtype is fixed (`{ dst = "i32" }`), whatever `dtypes` says.
    #[serde(default)]
    operand_dtypes: BTreeMap<String, String>,
    #[serde(default)]
    operands: Vec<String>,
    doc: String,
}

/// The Rust `DType` variant of a dtype name in `operand_dtypes`.
fn dtype_variant(name: &str) -> Option<&'static str> {
    Some(match name {
        "f32" => "F32",
        "f16" => "F16",
        "bf16" => "Bf16",
        "i32" => "I32",
        _ => return None,
    })
}

impl Op {
    /// The `dtypes` column of docs/ISA.md: the class, then each fixed operand (`numeric; dst i32`).
    fn dtypes_text(&self) -> String {
        let mut t = self.dtypes.clone();
        for (operand, d) in &self.operand_dtypes {
            t.push_str(&format!("; {operand} {d}"));
        }
        t
    }
}

struct OperandSpec {
    name: String,
    kind: String,
    writes: bool,
    /// Written in part (`:rw`): the tensor's other elements keep their values, so it is read too.
    partial: bool,
    default: Option<String>,
    offset: usize,
    /// The one dtype this operand takes, from the op's `operand_dtypes`.
    dtype: Option<String>,
}

impl OperandSpec {
    /// A tensor operand, required or optional.
    fn is_tensor(&self) -> bool {
        self.kind == "tensor" || self.kind == "tensor_opt"
    }
}

fn camel(s: &str) -> String {
    s.split('_')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase(),
                None => String::new(),
            }
        })
        .collect()
}

fn fail(msg: String) -> ! {
    panic!("opcodes/isa.toml: {msg}")
}

fn parse_operand(op: &str, text: &str, isa: &Isa, offset: usize) -> OperandSpec {
    let (head, default) = match text.split_once('=') {
        Some((h, d)) => (h, Some(d.trim().to_string())),
        None => (text, None),
    };
    let parts: Vec<&str> = head.split(':').map(str::trim).collect();
    let (name, kind, writes, partial) = match parts.as_slice() {
        [n, k] => (*n, *k, false, false),
        [n, k, "w"] => (*n, *k, true, false),
        [n, k, "rw"] => (*n, *k, true, true),
        _ => fail(format!("{op}: operand `{text}` is not name:kind[:w|:rw][=default]")),
    };
    if !isa.kinds.contains_key(kind) {
        fail(format!("{op}: operand `{name}` has unknown kind `{kind}`"));
    }
    if writes && kind != "tensor" {
        fail(format!("{op}: only a tensor operand can be written (`{name}`)"));
    }
    OperandSpec {
        name: name.to_string(),
        kind: kind.to_string(),
        writes,
        partial,
        default,
        offset,
        dtype: None,
    }
}

/// Rust expression for an operand default, as a generic `Operand`.
fn default_expr(kind: &str, text: &str, isa: &Isa, op: &str) -> String {
    let msg = format!("{op}: default `{text}` does not fit kind `{kind}`");
    match kind {
        "tensor_opt" if text == "none" => "Operand::TensorOpt(None)".into(),
        "reg_opt" if text == "none" => "Operand::RegOpt(None)".into(),
        "bool" if text == "false" || text == "true" => format!("Operand::Bool({text})"),
        "f32" => {
            let v: f32 = text.parse().unwrap_or_else(|_| fail(msg.clone()));
            format!("Operand::F32(f32::from_bits({:#010x}))", v.to_bits())
        }
        "u16" | "u32" | "i32" => {
            let v: i64 = text.parse().unwrap_or_else(|_| fail(msg.clone()));
            format!("Operand::{}({v})", camel(kind))
        }
        k if isa.enums.contains_key(k) => {
            let e = &isa.enums[k];
            if !e.values.iter().any(|v| v == text) {
                fail(msg)
            }
            format!("Operand::{}({}::{})", camel(k), e.rust, camel(text))
        }
        _ => fail(msg),
    }
}

fn main() {
    println!("cargo:rerun-if-changed=opcodes/isa.toml");
    println!("cargo:rerun-if-changed=build.rs");
    let text = std::fs::read_to_string("opcodes/isa.toml").expect("read opcodes/isa.toml");
    let isa: Isa = toml::from_str(&text).unwrap_or_else(|e| fail(e.to_string()));

    // Check the table's own invariants before generating anything from it.
    let mut codes = BTreeSet::new();
    let mut names = BTreeSet::new();
    let mut signatures = BTreeSet::new();
    let mut ops = Vec::new();
    for op in &isa.op {
        if !codes.insert(op.code) {
            fail(format!("opcode {:#04x} used twice", op.code));
        }
        if !names.insert(op.name.clone()) {
            fail(format!("name {} used twice", op.name));
        }
        if !["control", "memory", "elementwise", "tensor", "gpu"].contains(&op.group.as_str()) {
            fail(format!("{}: unknown group {}", op.name, op.group));
        }
        if !["float", "numeric", "any", "none"].contains(&op.dtypes.as_str()) {
            fail(format!("{}: unknown dtypes {}", op.name, op.dtypes));
        }
        let mut offset = isa.operand_start;
        let mut specs = Vec::new();
        let mut seen_optional = false;
        for o in &op.operands {
            let mut spec = parse_operand(&op.name, o, &isa, offset);
            spec.dtype = op.operand_dtypes.get(&spec.name).cloned();
            if spec.default.is_some() {
                seen_optional = true;
            } else if seen_optional {
                fail(format!("{}: required operand `{}` after an optional one", op.name, spec.name));
            }
            offset += isa.kinds[&spec.kind].width;
            specs.push(spec);
        }
        for (operand, d) in &op.operand_dtypes {
            if !specs.iter().any(|s| &s.name == operand && s.is_tensor()) {
                fail(format!("{}: operand_dtypes names `{operand}`, which is not a tensor operand", op.name));
            }
            if dtype_variant(d).is_none() {
                fail(format!("{}: operand_dtypes gives `{operand}` the unknown dtype `{d}`", op.name));
            }
            if op.dtypes == "none" {
                fail(format!("{}: operand_dtypes on an instruction of dtype class none", op.name));
            }
        }
        if offset > isa.instruction_bytes {
            fail(format!("{}: operands need {offset} bytes, more than {}", op.name, isa.instruction_bytes));
        }
        // `TensorOperands` has one destination slot.
        if specs.iter().filter(|s| s.writes).count() > 1 {
            fail(format!("{}: more than one written tensor", op.name));
        }
        let mnemonic = op.mnemonic.clone().unwrap_or_else(|| op.name.clone());
        let required: Vec<&str> =
            specs.iter().filter(|s| s.default.is_none()).map(|s| s.kind.as_str()).collect();
        if !signatures.insert((mnemonic.clone(), required.join(","))) {
            fail(format!("{}: mnemonic {mnemonic} has two entries with the same operand kinds", op.name));
        }
        ops.push((op, mnemonic, specs));
    }

    let mut out = String::new();
    let w = &mut out;
    writeln!(w, "// @generated by build.rs from opcodes/isa.toml. Do not edit.").unwrap();
    writeln!(w, "/// Size of one encoded instruction in bytes.").unwrap();
    writeln!(w, "pub const INSN_BYTES: usize = {};", isa.instruction_bytes).unwrap();
    writeln!(w, "/// Offset of the first operand byte.").unwrap();
    writeln!(w, "pub const OPERAND_START: usize = {};", isa.operand_start).unwrap();

    let max_tensor_reads = ops
        .iter()
        .map(|(_, _, specs)| specs.iter().filter(|s| s.is_tensor() && !s.writes).count())
        .max()
        .unwrap_or(0);
    writeln!(w, "/// Most tensor operands one instruction reads (KERNEL's bindings aside).").unwrap();
    writeln!(w, "pub const MAX_TENSOR_READS: usize = {max_tensor_reads};").unwrap();

    // Enums of named values (act, dist).
    for (key, e) in &isa.enums {
        writeln!(w, "/// Values of the `{key}` operand kind.").unwrap();
        writeln!(
            w,
            "#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]\n#[repr(u8)]\npub enum {} {{",
            e.rust
        )
        .unwrap();
        for (i, v) in e.values.iter().enumerate() {
            writeln!(w, "    {} = {i},", camel(v)).unwrap();
        }
        writeln!(w, "}}").unwrap();
        writeln!(w, "impl {} {{", e.rust).unwrap();
        writeln!(w, "    /// Every value, in encoding order.").unwrap();
        let all: Vec<String> = e.values.iter().map(|v| format!("{}::{}", e.rust, camel(v))).collect();
        writeln!(w, "    pub const ALL: &'static [{}] = &[{}];", e.rust, all.join(", ")).unwrap();
        writeln!(w, "    /// The assembly name.").unwrap();
        writeln!(w, "    pub fn name(self) -> &'static str {{ match self {{").unwrap();
        for v in &e.values {
            writeln!(w, "        {}::{} => {v:?},", e.rust, camel(v)).unwrap();
        }
        writeln!(w, "    }} }}").unwrap();
        writeln!(w, "    /// Decodes the byte value.").unwrap();
        writeln!(w, "    pub fn from_u8(v: u8) -> Option<Self> {{ Self::ALL.get(v as usize).copied() }}")
            .unwrap();
        writeln!(w, "    /// Parses the assembly name.").unwrap();
        writeln!(w, "    pub fn from_name(s: &str) -> Option<Self> {{ Self::ALL.iter().copied().find(|v| v.name() == s) }}")
            .unwrap();
        writeln!(w, "}}").unwrap();
    }

    // Operand kinds.
    writeln!(w, "/// How an operand is encoded and written in assembly.").unwrap();
    writeln!(w, "#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]\npub enum OperandKind {{").unwrap();
    for k in isa.kinds.keys() {
        writeln!(w, "    {},", camel(k)).unwrap();
    }
    writeln!(w, "}}").unwrap();
    writeln!(w, "impl OperandKind {{").unwrap();
    writeln!(w, "    /// Encoded width in bytes.").unwrap();
    writeln!(w, "    pub const fn width(self) -> usize {{ match self {{").unwrap();
    for (k, v) in &isa.kinds {
        writeln!(w, "        OperandKind::{} => {},", camel(k), v.width).unwrap();
    }
    writeln!(w, "    }} }}").unwrap();
    writeln!(w, "    /// The name used in opcodes/isa.toml and docs.").unwrap();
    writeln!(w, "    pub const fn name(self) -> &'static str {{ match self {{").unwrap();
    for k in isa.kinds.keys() {
        writeln!(w, "        OperandKind::{} => {k:?},", camel(k)).unwrap();
    }
    writeln!(w, "    }} }}").unwrap();
    writeln!(w, "}}").unwrap();

    // Generic operand values.
    writeln!(w, "/// One operand value of any kind.").unwrap();
    writeln!(w, "#[derive(Clone, Copy, Debug, PartialEq)]\npub enum Operand {{").unwrap();
    for (k, v) in &isa.kinds {
        writeln!(w, "    {}({}),", camel(k), v.rust).unwrap();
    }
    writeln!(w, "}}").unwrap();
    writeln!(w, "impl Operand {{").unwrap();
    writeln!(w, "    /// The kind of this value.").unwrap();
    writeln!(w, "    pub fn kind(&self) -> OperandKind {{ match self {{").unwrap();
    for k in isa.kinds.keys() {
        writeln!(w, "        Operand::{}(_) => OperandKind::{},", camel(k), camel(k)).unwrap();
    }
    writeln!(w, "    }} }}").unwrap();
    writeln!(w, "}}").unwrap();

    // Opcode enum and tables.
    writeln!(w, "/// The opcode byte of each instruction.").unwrap();
    writeln!(w, "#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]\n#[repr(u8)]\npub enum Opcode {{")
        .unwrap();
    for (op, _, _) in &ops {
        writeln!(w, "    /// {}", op.doc).unwrap();
        writeln!(w, "    {} = {:#04x},", camel(&op.name), op.code).unwrap();
    }
    writeln!(w, "}}").unwrap();
    writeln!(w, "impl Opcode {{").unwrap();
    let all: Vec<String> = ops.iter().map(|(o, _, _)| format!("Opcode::{}", camel(&o.name))).collect();
    writeln!(w, "    /// Every opcode, in table order.").unwrap();
    writeln!(w, "    pub const ALL: &'static [Opcode] = &[{}];", all.join(", ")).unwrap();
    writeln!(w, "    /// Decodes an opcode byte.").unwrap();
    writeln!(w, "    pub fn from_u8(v: u8) -> Option<Opcode> {{ match v {{").unwrap();
    for (op, _, _) in &ops {
        writeln!(w, "        {:#04x} => Some(Opcode::{}),", op.code, camel(&op.name)).unwrap();
    }
    writeln!(w, "        _ => None,\n    }} }}").unwrap();
    writeln!(w, "    /// The static description of this opcode.").unwrap();
    writeln!(w, "    pub fn info(self) -> &'static OpInfo {{ match self {{").unwrap();
    for (i, (op, _, _)) in ops.iter().enumerate() {
        writeln!(w, "        Opcode::{} => &OP_INFO[{i}],", camel(&op.name)).unwrap();
    }
    writeln!(w, "    }} }}").unwrap();
    writeln!(w, "}}").unwrap();

    writeln!(w, "/// One row per opcode, in table order.").unwrap();
    writeln!(w, "pub static OP_INFO: &[OpInfo] = &[").unwrap();
    for (op, mnemonic, specs) in &ops {
        writeln!(w, "    OpInfo {{").unwrap();
        writeln!(w, "        opcode: Opcode::{},", camel(&op.name)).unwrap();
        writeln!(w, "        name: {:?},", op.name).unwrap();
        writeln!(w, "        mnemonic: {mnemonic:?},").unwrap();
        writeln!(w, "        group: Group::{},", camel(&op.group)).unwrap();
        writeln!(w, "        tier: Tier::{},", camel(op.tier.as_deref().unwrap_or("strict"))).unwrap();
        writeln!(w, "        dtypes: DtypeClass::{},", camel(&op.dtypes)).unwrap();
        writeln!(w, "        doc: {:?},", op.doc).unwrap();
        writeln!(w, "        operands: &[").unwrap();
        for s in specs {
            let default = match &s.default {
                Some(d) => format!("Some({})", default_expr(&s.kind, d, &isa, &op.name)),
                None => "None".into(),
            };
            let dtype = match &s.dtype {
                Some(d) => format!("Some(DType::{})", dtype_variant(d).expect("checked above")),
                None => "None".into(),
            };
            writeln!(
                w,
                "            OperandInfo {{ name: {:?}, kind: OperandKind::{}, writes: {}, partial: {}, offset: {}, default: {default}, dtype: {dtype} }},",
                s.name,
                camel(&s.kind),
                s.writes,
                s.partial,
                s.offset
            )
            .unwrap();
        }
        writeln!(w, "        ],\n    }},").unwrap();
    }
    writeln!(w, "];").unwrap();

    // Typed instructions.
    writeln!(w, "/// A decoded instruction, one variant per opcode, with named operands.").unwrap();
    writeln!(w, "#[derive(Clone, Copy, Debug, PartialEq)]\npub enum Insn {{").unwrap();
    for (op, _, specs) in &ops {
        writeln!(w, "    /// {}", op.doc).unwrap();
        if specs.is_empty() {
            writeln!(w, "    {},", camel(&op.name)).unwrap();
        } else {
            let fields: Vec<String> =
                specs.iter().map(|s| format!("{}: {}", s.name, isa.kinds[&s.kind].rust)).collect();
            writeln!(w, "    {} {{ {} }},", camel(&op.name), fields.join(", ")).unwrap();
        }
    }
    writeln!(w, "}}").unwrap();
    writeln!(w, "impl Insn {{").unwrap();
    writeln!(w, "    /// The opcode of this instruction.").unwrap();
    writeln!(w, "    pub fn opcode(&self) -> Opcode {{ match self {{").unwrap();
    for (op, _, specs) in &ops {
        let pat = if specs.is_empty() { String::new() } else { " { .. }".into() };
        writeln!(w, "        Insn::{}{pat} => Opcode::{},", camel(&op.name), camel(&op.name)).unwrap();
    }
    writeln!(w, "    }} }}").unwrap();
    writeln!(w, "    /// The operands in table order, as generic values.").unwrap();
    writeln!(w, "    pub fn operands(&self) -> Vec<Operand> {{ match *self {{").unwrap();
    for (op, _, specs) in &ops {
        if specs.is_empty() {
            writeln!(w, "        Insn::{} => Vec::new(),", camel(&op.name)).unwrap();
        } else {
            let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            let vals: Vec<String> =
                specs.iter().map(|s| format!("Operand::{}({})", camel(&s.kind), s.name)).collect();
            writeln!(
                w,
                "        Insn::{} {{ {} }} => vec![{}],",
                camel(&op.name),
                names.join(", "),
                vals.join(", ")
            )
            .unwrap();
        }
    }
    writeln!(w, "    }} }}").unwrap();
    writeln!(
        w,
        "    /// Builds an instruction from operands in table order; None if a kind or the count is wrong."
    )
    .unwrap();
    writeln!(w, "    pub fn from_operands(op: Opcode, ops: &[Operand]) -> Option<Insn> {{ match op {{")
        .unwrap();
    for (op, _, specs) in &ops {
        if specs.is_empty() {
            writeln!(
                w,
                "        Opcode::{} => ops.is_empty().then_some(Insn::{}),",
                camel(&op.name),
                camel(&op.name)
            )
            .unwrap();
        } else {
            let pats: Vec<String> =
                specs.iter().map(|s| format!("Operand::{}({})", camel(&s.kind), s.name)).collect();
            let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            writeln!(
                w,
                "        Opcode::{} => match *ops {{ [{}] => Some(Insn::{} {{ {} }}), _ => None }},",
                camel(&op.name),
                pats.join(", "),
                camel(&op.name),
                names.join(", ")
            )
            .unwrap();
        }
    }
    writeln!(w, "    }} }}").unwrap();
    writeln!(w, "    /// The tensor it writes and the tensors it reads, by role (see [`TensorOperands`]).")
        .unwrap();
    writeln!(w, "    pub fn tensor_operands(&self) -> TensorOperands {{ match *self {{").unwrap();
    for (op, _, specs) in &ops {
        let tensors: Vec<&OperandSpec> = specs.iter().filter(|s| s.is_tensor()).collect();
        let mut fields: Vec<&str> = tensors.iter().map(|s| s.name.as_str()).collect();
        if fields.len() < specs.len() {
            fields.push("..");
        }
        let pattern = if specs.is_empty() { String::new() } else { format!(" {{ {} }}", fields.join(", ")) };
        let dst = match tensors.iter().find(|s| s.writes) {
            Some(s) => format!("Some({})", s.name),
            None => "None".into(),
        };
        let mut srcs: Vec<String> = tensors
            .iter()
            .filter(|s| !s.writes)
            .map(|s| if s.kind == "tensor" { format!("Some({})", s.name) } else { s.name.clone() })
            .collect();
        srcs.resize(max_tensor_reads, "None".into());
        writeln!(
            w,
            "        Insn::{}{pattern} => TensorOperands {{ dst: {dst}, srcs: [{}] }},",
            camel(&op.name),
            srcs.join(", ")
        )
        .unwrap();
    }
    writeln!(w, "    }} }}").unwrap();
    writeln!(w, "}}").unwrap();

    let out_dir = std::env::var("OUT_DIR").expect("OUT_DIR");
    std::fs::write(Path::new(&out_dir).join("isa_gen.rs"), out).expect("write isa_gen.rs");
    std::fs::write(Path::new(&out_dir).join("ISA.md"), isa_markdown(&isa, &ops)).expect("write ISA.md");
}

fn isa_markdown(isa: &Isa, ops: &[(&Op, String, Vec<OperandSpec>)]) -> String {
    let mut m = String::new();
    let w = &mut m;
    writeln!(w, "# The adeadvm instruction set\n").unwrap();
    writeln!(
        w,
        "Generated from `opcodes/isa.toml` by `build.rs`; `cargo test` fails when this file is stale"
    )
    .unwrap();
    writeln!(w, "(regenerate with `ADEADVM_BLESS=1 cargo test --test isa_doc`).\n").unwrap();
    writeln!(w, "## Encoding\n").unwrap();
    writeln!(
        w,
        "Every instruction is {} bytes, little-endian. Byte 0 is the opcode, byte 1 the placement hint",
        isa.instruction_bytes
    )
    .unwrap();
    writeln!(
        w,
        "(0 auto, 1 cpu, 2 gpu; written `MNEMONIC@cpu` / `MNEMONIC@gpu` in assembly), and the operands"
    )
    .unwrap();
    writeln!(
        w,
        "follow from byte {}, packed in the order listed, each at its kind's width. Bytes after the last",
        isa.operand_start
    )
    .unwrap();
    writeln!(w, "operand are zero; the decoder rejects anything else.\n").unwrap();
    writeln!(w, "Optional operands (those with a default) are written `name=value` after the required ones;")
        .unwrap();
    writeln!(w, "a bool may be written as its bare name. The disassembler prints only non-default values.\n")
        .unwrap();
    writeln!(
        w,
        "Tier `strict` gives the same bits on every executor; `fast` only from run to run on one device.\n"
    )
    .unwrap();
    if !isa.program_rules.is_empty() {
        writeln!(w, "## Program rules\n").unwrap();
        for rule in &isa.program_rules {
            writeln!(w, "- {rule}").unwrap();
        }
        writeln!(w).unwrap();
    }
    if !isa.numerics.is_empty() {
        writeln!(w, "## Numerics\n").unwrap();
        writeln!(w, "The exact step lists and the measured accuracy are in docs/numerics.md.\n").unwrap();
        for rule in &isa.numerics {
            writeln!(w, "- {rule}").unwrap();
        }
        writeln!(w).unwrap();
    }
    writeln!(w, "## Operand kinds\n").unwrap();
    writeln!(w, "| kind | bytes | meaning |\n| --- | --- | --- |").unwrap();
    for (k, v) in &isa.kinds {
        writeln!(w, "| `{k}` | {} | {} |", v.width, v.doc).unwrap();
    }
    writeln!(w, "\n## Opcodes\n").unwrap();
    writeln!(w, "| code | mnemonic | group | tier | dtypes | operands (byte offset) | meaning |").unwrap();
    writeln!(w, "| --- | --- | --- | --- | --- | --- | --- |").unwrap();
    for (op, mnemonic, specs) in ops {
        let operands: Vec<String> = specs
            .iter()
            .map(|s| {
                let mut t = format!("`{}`: {}", s.name, s.kind);
                if s.partial {
                    t.push_str(" (written in part)");
                } else if s.writes {
                    t.push_str(" (written)");
                }
                if let Some(d) = &s.default {
                    t.push_str(&format!(" = {d}"));
                }
                format!("{t} @{}", s.offset)
            })
            .collect();
        let operands = if operands.is_empty() { "—".to_string() } else { operands.join("<br>") };
        writeln!(
            w,
            "| {:#04x} | `{mnemonic}` | {} | {} | {} | {operands} | {} |",
            op.code,
            op.group,
            op.tier.as_deref().unwrap_or("strict"),
            op.dtypes_text(),
            op.doc.replace('|', "\\|")
        )
        .unwrap();
    }
    m
}
