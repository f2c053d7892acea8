//! Lowering an ONNX graph to adeadvm assembly.
//!
//! Every graph value is either known at import ([`Known`]: initializers, Constant nodes, and
//! what folds from them, shape computations above all) or computed when the program runs
//! ([`Rt`]: a program input or a temporary). A node whose inputs are all known and whose
//! result is integer data (or small float data that only moves) is folded here; any other node
//! becomes instructions, and a known value it reads becomes a `.const`. Temporaries are
//! ALLOCed where they are first written and FREEd after their last use, so the planner can
//! reuse their memory.
//!
//! Invariants: a value's shape is exact (every node computes its output shape here; ONNX's
//! `value_info` is not trusted), and every instruction written verifies; an input the importer
//! cannot express is an [`ImportError`] naming the node, never an assembly error.

use std::collections::{HashMap, HashSet};

use super::proto::{attr_type, data_type as ty, AttributeProto, NodeProto};
use super::{tensor_data, vm_dtype, Binding, ImportError, ImportOptions, Model, TensorData, Values};
use crate::isa::{DType, MAX_RANK};

/// The operators the importer lowers (default domain), for documentation and tables.
pub const SUPPORTED_OPS: &[&str] = &[
    "Abs",
    "Add",
    "And",
    "ArgMax",
    "ArgMin",
    "Cast",
    "CastLike",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Div",
    "Dropout",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Gather",
    "Gelu",
    "Gemm",
    "Greater",
    "GreaterOrEqual",
    "Identity",
    "LayerNormalization",
    "Less",
    "LessOrEqual",
    "Log",
    "LogSoftmax",
    "MatMul",
    "Max",
    "Mean",
    "Min",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "Pow",
    "Range",
    "Reciprocal",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceSum",
    "ReduceSumSquare",
    "Relu",
    "Reshape",
    "RMSNormalization",
    "Shape",
    "Sigmoid",
    "Size",
    "Slice",
    "Softmax",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Tanh",
    "Transpose",
    "Trilu",
    "Unsqueeze",
    "Where",
    "Xor",
];

/// Known float data larger than this is not folded (it stays a constant the program reads):
/// folding copies values into the assembly text.
const FOLD_FLOATS: usize = 4096;

/// One dimension: a size, or a symbolic dim of the program.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum D {
    N(u64),
    S(String),
}

impl std::fmt::Display for D {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            D::N(n) => write!(f, "{n}"),
            D::S(s) => f.write_str(s),
        }
    }
}

/// An integer value known at import: a number, or a symbolic dim's size (from Shape).
#[derive(Clone, Debug, PartialEq)]
enum IntV {
    N(i64),
    S(String),
}

#[derive(Clone, Debug)]
enum KVals {
    Float(Vec<f64>),
    Int(Vec<IntV>),
}

/// A value known at import.
#[derive(Clone, Debug)]
struct Known {
    elem: i32,
    dims: Vec<u64>,
    vals: KVals,
    /// The initializer or Constant output it is, unchanged (read with `onnx(...)`).
    source: Option<String>,
}

impl Known {
    fn len(&self) -> usize {
        match &self.vals {
            KVals::Float(v) => v.len(),
            KVals::Int(v) => v.len(),
        }
    }
    fn ints(vals: Vec<i64>, dims: Vec<u64>) -> Known {
        Known {
            elem: ty::INT64,
            dims,
            vals: KVals::Int(vals.into_iter().map(IntV::N).collect()),
            source: None,
        }
    }
    fn shape(&self) -> Vec<D> {
        self.dims.iter().map(|&d| D::N(d)).collect()
    }
    fn is_float(&self) -> bool {
        matches!(self.vals, KVals::Float(_))
    }
}

/// A value computed when the program runs: an input or a temporary (or a constant the
/// program reads), by its name in the assembly (without `%`).
#[derive(Clone, Debug)]
struct Rt {
    name: String,
    elem: i32,
    shape: Vec<D>,
}

#[derive(Clone, Debug)]
enum Value {
    Known(Known),
    Rt(Rt),
}

impl Value {
    fn elem(&self) -> i32 {
        match self {
            Value::Known(k) => k.elem,
            Value::Rt(r) => r.elem,
        }
    }
    fn shape(&self) -> Vec<D> {
        match self {
            Value::Known(k) => k.shape(),
            Value::Rt(r) => r.shape.clone(),
        }
    }
    fn rank(&self) -> usize {
        match self {
            Value::Known(k) => k.dims.len(),
            Value::Rt(r) => r.shape.len(),
        }
    }
}

/// An error of the node being lowered (the caller adds the node's name, operator and opset).
struct NodeErr(String);

type NResult<T> = Result<T, NodeErr>;

fn err<T>(m: impl Into<String>) -> NResult<T> {
    Err(NodeErr(m.into()))
}

fn unsupported<T>(what: impl std::fmt::Display) -> NResult<T> {
    err(format!("unsupported: {what}"))
}

/// One instruction line and the temporaries it names.
struct Line {
    text: String,
    temps: Vec<usize>,
    origin: usize,
}

/// What lowering made.
pub(super) struct Lowered {
    pub asm: String,
    pub inputs: Vec<Binding>,
    pub outputs: Vec<Binding>,
}

struct Lowerer<'m> {
    model: &'m Model,
    opset: i64,
    values: HashMap<String, Value>,
    decls: Vec<String>,
    lines: Vec<Line>,
    /// Temporaries by id: their names.
    temps: Vec<String>,
    temp_ids: HashMap<String, usize>,
    used_names: HashSet<String>,
    /// Constants already declared, by a key of their source or contents.
    consts: HashMap<String, String>,
    fixed_dims: HashMap<String, u64>,
    syms: Vec<String>,
    origin: usize,
    origins: Vec<String>,
    counter: usize,
}

/// Makes `s` an assembly identifier: letters, digits and `_`, not starting with a digit.
fn ident(s: &str) -> String {
    let mut out: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'v');
    }
    out
}

/// `s` made safe inside an assembly string: a quote, a backslash, a `$` (which would start a
/// `${NAME}` substitution) or a control character becomes `_`.
fn asm_string(s: &str) -> String {
    s.chars().map(|c| if matches!(c, '"' | '\\' | '$') || c.is_control() { '_' } else { c }).collect()
}

/// Logical operators and Where's condition take bool tensors (held as i32 0 or 1).
fn bool_only(elems: &[i32]) -> NResult<()> {
    match elems.iter().find(|&&e| e != ty::BOOL) {
        Some(&e) => err(format!("expected bool tensors, got {}", ty::name(e))),
        None => Ok(()),
    }
}

fn dtype_of(elem: i32) -> NResult<DType> {
    vm_dtype(elem).map_or_else(|| unsupported(format_args!("type {}", ty::name(elem))), Ok)
}

fn is_float_elem(elem: i32) -> bool {
    matches!(elem, ty::FLOAT | ty::FLOAT16 | ty::BFLOAT16)
}

fn shape_text(shape: &[D]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// Bits of `v` in a float dtype, written as the assembler's raw-bits hex.
fn float_bits_text(v: f64, dt: DType) -> String {
    match dt {
        DType::F16 => format!("0x{:04x}", half::f16::from_f64(v).to_bits()),
        DType::Bf16 => format!("0x{:04x}", half::bf16::from_f64(v).to_bits()),
        _ => format!("0x{:08x}", (v as f32).to_bits()),
    }
}

/// An f32 immediate holding `v` exactly (v is a value of a float dtype, so an f32).
fn imm(v: f64) -> String {
    format!("0x{:08x}", (v as f32).to_bits())
}

fn norm_axis(axis: i64, rank: usize) -> NResult<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r.max(1) || (rank == 0) {
        return err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(a as usize)
}

/// numpy broadcasting of two shapes.
fn broadcast(a: &[D], b: &[D]) -> NResult<Vec<D>> {
    let n = a.len().max(b.len());
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        let x = if k < n - a.len() { D::N(1) } else { a[k - (n - a.len())].clone() };
        let y = if k < n - b.len() { D::N(1) } else { b[k - (n - b.len())].clone() };
        out.push(match (x, y) {
            (x, y) if x == y => x,
            (D::N(1), y) => y,
            (x, D::N(1)) => x,
            (x, y) => return err(format!("shapes do not broadcast: sizes {x} and {y} on axis {k}")),
        });
    }
    Ok(out)
}

fn fixed(shape: &[D], what: &str) -> NResult<Vec<u64>> {
    shape
        .iter()
        .map(|d| match d {
            D::N(n) => Ok(*n),
            D::S(s) => err(format!("{what} depends on the symbolic dimension {s}; fix it with --dim {s}=N")),
        })
        .collect()
}

/// The element count of `dims`, or an error past adeadvm's limits (each dimension below 2^31,
/// at most 2^40 elements).
fn element_count(dims: &[u64]) -> NResult<u64> {
    let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).filter(|&n| n <= crate::isa::MAX_ELEMENTS);
    match n {
        Some(n) if dims.iter().all(|&d| d <= crate::isa::MAX_DIM as u64) => Ok(n),
        _ => unsupported(format_args!(
            "shape {dims:?} (adeadvm tensors have dimensions below 2^31 and at most 2^40 elements)"
        )),
    }
}

/// Split's sizes, none negative.
fn split_sizes(sizes: &[i64]) -> NResult<Vec<u64>> {
    sizes
        .iter()
        .map(|&v| u64::try_from(v).map_or_else(|_| err(format!("split size {v} is negative")), Ok))
        .collect()
}

/// Checks the fixed part of `shape` against adeadvm's limits.
fn check_shape(shape: &[D]) -> NResult<()> {
    let dims: Vec<u64> = shape.iter().map(|d| if let D::N(n) = d { *n } else { 1 }).collect();
    element_count(&dims).map(drop)
}

/// Row-major strides.
fn strides(dims: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// The source index of each element of `dims_out` broadcast from `dims_in` (numpy rules).
fn broadcast_index(dims_in: &[u64], dims_out: &[u64]) -> Vec<usize> {
    let n = dims_out.len();
    let pad = n - dims_in.len();
    let sin = strides(dims_in);
    let total: u64 = dims_out.iter().product();
    let sout = strides(dims_out);
    (0..total)
        .map(|flat| {
            let mut src = 0u64;
            for k in 0..n {
                let c = (flat / sout[k]) % dims_out[k].max(1);
                if k >= pad && dims_in[k - pad] != 1 {
                    src += c * sin[k - pad];
                }
            }
            src as usize
        })
        .collect()
}

impl<'m> Lowerer<'m> {
    fn fresh(&mut self, prefix: &str) -> String {
        loop {
            self.counter += 1;
            let n = format!("{prefix}{}", self.counter);
            if self.used_names.insert(n.clone()) {
                return n;
            }
        }
    }

    fn unique(&mut self, base: &str) -> String {
        let mut n = ident(base);
        while !self.used_names.insert(n.clone()) {
            n = format!("{n}_");
        }
        n
    }

    fn sym(&mut self, name: &str) -> D {
        if let Some(&n) = self.fixed_dims.get(name) {
            return D::N(n);
        }
        let mut s = ident(name);
        if s == "MODEL" {
            s.push('_'); // `${MODEL}` is the model file's define
        }
        if !self.syms.contains(&s) {
            self.syms.push(s.clone());
        }
        D::S(s)
    }

    /// Writes an instruction.
    fn ins(&mut self, text: String) {
        let temps = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '%'))
            .filter_map(|w| w.strip_prefix('%'))
            .filter_map(|w| self.temp_ids.get(w).copied())
            .collect();
        self.lines.push(Line { text, temps, origin: self.origin });
    }

    /// A new temporary, ALLOCed here.
    fn tmp(&mut self, elem: i32, shape: &[D]) -> NResult<Rt> {
        let dt = dtype_of(elem)?;
        if shape.len() > MAX_RANK {
            return unsupported(format_args!(
                "rank {} (adeadvm tensors have at most {MAX_RANK} axes)",
                shape.len()
            ));
        }
        check_shape(shape)?;
        let name = self.fresh("t");
        self.decls.push(format!(".tensor %{name} {dt}{}", shape_text(shape)));
        self.temp_ids.insert(name.clone(), self.temps.len());
        self.temps.push(name.clone());
        self.ins(format!("ALLOC %{name}"));
        Ok(Rt { name, elem, shape: shape.to_vec() })
    }

    /// A known value as a constant the program reads.
    fn materialize(&mut self, k: &Known) -> NResult<Rt> {
        let dt = dtype_of(k.elem)?;
        if k.dims.len() > MAX_RANK {
            return unsupported(format_args!("rank {} constants", k.dims.len()));
        }
        let shape = k.shape();
        let decl_head = |name: &str| format!(".const %{name} {dt}{}", shape_text(&shape));
        // An int64 value beyond int32 is refused here, not when the assembler reads it.
        if let KVals::Int(v) = &k.vals {
            if let Some(n) = v.iter().find_map(|x| match x {
                IntV::N(n) if i32::try_from(*n).is_err() => Some(*n),
                _ => None,
            }) {
                return unsupported(format_args!("int64 value {n} (beyond int32)"));
            }
        }
        let plain_source = k.source.as_ref().filter(|s| !s.is_empty() && asm_string(s) == **s);
        let body = if let Some(src) = plain_source {
            format!("onnx(\"${{MODEL}}\", \"{src}\")")
        } else {
            let mut items = Vec::with_capacity(k.len());
            match &k.vals {
                KVals::Float(v) => {
                    if !dt.is_float() {
                        return unsupported(format_args!("{} values as {dt}", ty::name(k.elem)));
                    }
                    items.extend(v.iter().map(|&x| float_bits_text(x, dt)));
                }
                KVals::Int(v) => {
                    for x in v {
                        match x {
                            IntV::N(n) if i32::try_from(*n).is_ok() => items.push(n.to_string()),
                            IntV::N(n) => return unsupported(format_args!("int64 value {n} (beyond int32)")),
                            IntV::S(s) => {
                                return err(format!(
                                    "a value computed from the symbolic dimension {s} is used as data; fix it with --dim {s}=N"
                                ))
                            }
                        }
                    }
                }
            }
            if items.len() > 1 && items.iter().all(|i| *i == items[0]) {
                format!("fill({})", items[0])
            } else if items.is_empty() {
                "zeros".to_string()
            } else {
                format!("[{}]", items.join(", "))
            }
        };
        let key = format!("{dt}{} = {body}", shape_text(&shape));
        if let Some(name) = self.consts.get(&key) {
            return Ok(Rt { name: name.clone(), elem: k.elem, shape });
        }
        let name = self.fresh("c");
        self.decls.push(format!("{} = {body}", decl_head(&name)));
        self.consts.insert(key, name.clone());
        Ok(Rt { name, elem: k.elem, shape })
    }

    /// A splat constant of `shape` (a number per element).
    fn splat(&mut self, elem: i32, shape: &[D], v: f64) -> NResult<Rt> {
        let dt = dtype_of(elem)?;
        let text = if dt.is_float() { float_bits_text(v, dt) } else { (v as i64).to_string() };
        check_shape(shape)?;
        if let Some(D::S(sym)) = shape.iter().find(|d| matches!(d, D::S(_))) {
            return unsupported(format_args!(
                "a constant of symbolic shape {} (fix {sym} with --dim {sym}=N)",
                shape_text(shape)
            ));
        }
        let key = format!("{dt}{} = fill({text})", shape_text(shape));
        if let Some(name) = self.consts.get(&key) {
            return Ok(Rt { name: name.clone(), elem, shape: shape.to_vec() });
        }
        let name = self.fresh("c");
        self.decls.push(format!(".const %{name} {key}"));
        self.consts.insert(key, name.clone());
        Ok(Rt { name, elem, shape: shape.to_vec() })
    }

    fn rt(&mut self, v: &Value) -> NResult<Rt> {
        match v {
            Value::Rt(r) => Ok(r.clone()),
            Value::Known(k) => self.materialize(k),
        }
    }

    fn value(&self, name: &str) -> NResult<Value> {
        self.values
            .get(name)
            .cloned()
            .map_or_else(|| err(format!("input {name:?} is not defined before this node")), Ok)
    }

    // ---- instruction helpers -------------------------------------------------------------

    fn unary(&mut self, mn: &str, x: &Rt, elem_out: i32) -> NResult<Rt> {
        let d = self.tmp(elem_out, &x.shape)?;
        self.ins(format!("{mn} %{}, %{}", d.name, x.name));
        Ok(d)
    }

    fn binary(&mut self, mn: &str, a: &Rt, b: &Rt, elem_out: i32) -> NResult<Rt> {
        let shape = broadcast(&a.shape, &b.shape)?;
        let d = self.tmp(elem_out, &shape)?;
        self.ins(format!("{mn} %{}, %{}, %{}", d.name, a.name, b.name));
        Ok(d)
    }

    fn scalar_op(&mut self, mn: &str, a: &Rt, s: f64) -> NResult<Rt> {
        let d = self.tmp(a.elem, &a.shape)?;
        self.ins(format!("{mn} %{}, %{}, {}", d.name, a.name, imm(s)));
        Ok(d)
    }

    fn reshape(&mut self, x: &Rt, shape: &[D]) -> NResult<Rt> {
        if x.shape == shape {
            return Ok(x.clone());
        }
        let d = self.tmp(x.elem, shape)?;
        self.ins(format!("RESHAPE %{}, %{}", d.name, x.name));
        Ok(d)
    }

    fn transpose(&mut self, x: &Rt, perm: &[usize]) -> NResult<Rt> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x.clone());
        }
        let shape: Vec<D> = perm.iter().map(|&p| x.shape[p].clone()).collect();
        let d = self.tmp(x.elem, &shape)?;
        let p: Vec<String> = perm.iter().map(|p| p.to_string()).collect();
        self.ins(format!("TRANSPOSE %{}, %{}, [{}]", d.name, x.name, p.join(", ")));
        Ok(d)
    }

    /// Moves `axis` to the end (a permutation and its inverse).
    fn axis_last_perm(rank: usize, axis: usize) -> (Vec<usize>, Vec<usize>) {
        let mut p: Vec<usize> = (0..rank).filter(|&i| i != axis).collect();
        p.push(axis);
        let mut inv = vec![0; rank];
        for (i, &x) in p.iter().enumerate() {
            inv[x] = i;
        }
        (p, inv)
    }

    fn slice(&mut self, x: &Rt, axis: usize, start: u64, len: D) -> NResult<Rt> {
        let mut shape = x.shape.clone();
        if start == 0 && shape[axis] == len {
            return Ok(x.clone());
        }
        shape[axis] = len;
        let d = self.tmp(x.elem, &shape)?;
        self.ins(format!("SLICE %{}, %{}, {axis}, {start}", d.name, x.name));
        Ok(d)
    }

    /// `x` gathered along `axis` at known indices (each in range).
    fn take(&mut self, x: &Rt, axis: usize, idx: &[u64]) -> NResult<Rt> {
        let rank = x.shape.len();
        let mut front: Vec<usize> = vec![axis];
        front.extend((0..rank).filter(|&i| i != axis));
        let xt = self.transpose(x, &front)?;
        let k = Known::ints(idx.iter().map(|&i| i as i64).collect(), vec![idx.len() as u64]);
        let ki = self.materialize(&Known { elem: ty::INT32, ..k })?;
        let mut shape = xt.shape.clone();
        shape[0] = D::N(idx.len() as u64);
        let g = self.tmp(x.elem, &shape)?;
        self.ins(format!("GATHER %{}, %{}, %{}", g.name, xt.name, ki.name));
        let mut back = vec![0; rank];
        for (i, &f) in front.iter().enumerate() {
            back[f] = i;
        }
        self.transpose(&g, &back)
    }

    fn copy_to_new(&mut self, x: &Rt) -> NResult<Rt> {
        let d = self.tmp(x.elem, &x.shape)?;
        self.ins(format!("COPY %{}, %{}", d.name, x.name));
        Ok(d)
    }

    // ---- the graph ----------------------------------------------------------------------

    fn input_value(&mut self, vi: &super::proto::ValueInfoProto) -> Result<(Rt, Binding), ImportError> {
        let bad = |m: String| ImportError::Model(m);
        let tt = vi.r#type.as_ref().and_then(|t| t.tensor_type.as_ref()).ok_or_else(|| {
            bad(format!("unsupported: input {:?} is not a tensor (or has no type)", vi.name))
        })?;
        let dt = vm_dtype(tt.elem_type).ok_or_else(|| {
            bad(format!("unsupported type: input {:?} is {}", vi.name, ty::name(tt.elem_type)))
        })?;
        let shape_proto = tt.shape.as_ref().ok_or_else(|| {
            bad(format!("unsupported: input {:?} has no shape (its rank is unknown)", vi.name))
        })?;
        let mut shape = Vec::new();
        for (i, d) in shape_proto.dim.iter().enumerate() {
            shape.push(match (&d.dim_value, &d.dim_param) {
                (Some(v), _) if *v >= 0 => D::N(*v as u64),
                (Some(v), _) => return Err(bad(format!("input {:?} has dimension {v}", vi.name))),
                (None, Some(p)) if !p.is_empty() => self.sym(p),
                _ => self.sym(&format!("{}_dim{i}", vi.name)),
            });
        }
        if shape.len() > MAX_RANK {
            return Err(bad(format!("unsupported: input {:?} has rank {}", vi.name, shape.len())));
        }
        let name = self.unique(&vi.name);
        self.decls.push(format!(".input %{name} {dt}{}", shape_text(&shape)));
        let b = Binding { name: name.clone(), onnx_name: vi.name.clone(), elem: tt.elem_type };
        Ok((Rt { name, elem: tt.elem_type, shape }, b))
    }

    fn run(mut self, options: &ImportOptions) -> Result<Lowered, ImportError> {
        let g = self.model.graph();
        let dir = self.model.dir.clone();
        for t in &g.initializer {
            let data = tensor_data(t, &dir)
                .map_err(|e| ImportError::Model(format!("initializer {:?}: {e}", t.name)))?;
            // `onnx(...)` finds a name's first tensor: only that one is read by name.
            let first = self.model.named_tensor(&t.name).is_some_and(|x| std::ptr::eq(x, t));
            let source = first.then(|| t.name.clone());
            self.values.insert(t.name.clone(), Value::Known(known_from(data, source)));
        }
        if !g.sparse_initializer.is_empty() {
            return Err(ImportError::Model("unsupported: sparse initializers".into()));
        }
        for (name, data) in &options.known_inputs {
            let Some(vi) = g.input.iter().find(|i| i.name == *name) else {
                return Err(ImportError::Model(format!(
                    "--known-input {name}: the graph has no input {name:?}"
                )));
            };
            // The graph's element type (an int64 input given as int32 .npy values is int64).
            let declared = vi.r#type.as_ref().and_then(|t| t.tensor_type.as_ref()).map(|t| t.elem_type);
            let mut data = data.clone();
            if let Some(d) = declared {
                if is_float_elem(d) != matches!(data.values, Values::Float(_)) {
                    return Err(ImportError::Model(format!(
                        "--known-input {name}: the graph's input is {}, the values given are not",
                        ty::name(d)
                    )));
                }
                data.elem = d;
            }
            self.values.insert(name.clone(), Value::Known(known_from(data, None)));
        }
        let mut inputs = Vec::new();
        for vi in &g.input {
            if self.values.contains_key(&vi.name) {
                continue; // an initializer or a known input: a constant
            }
            let (rt, b) = self.input_value(vi)?;
            self.values.insert(vi.name.clone(), Value::Rt(rt));
            inputs.push(b);
        }
        let outputs: Vec<String> = g.output.iter().map(|o| o.name.clone()).collect();
        let nodes = fuse(&g.node, &self.values, &outputs, self.opset);
        for (i, node) in nodes.iter().enumerate() {
            self.origin = self.origins.len();
            let label =
                if node.name.is_empty() { format!("{}_{i}", node.op_type) } else { node.name.clone() };
            self.origins.push(label.clone());
            if !(node.domain.is_empty() || node.domain == "ai.onnx") {
                return Err(ImportError::UnsupportedOp {
                    node: label,
                    op: node.op_type.clone(),
                    domain: format!("{}.", node.domain),
                    opset: self.opset,
                });
            }
            match self.node(node) {
                Ok(outs) => {
                    for (name, v) in node.output.iter().zip(outs) {
                        if !name.is_empty() {
                            self.values.insert(name.clone(), v);
                        }
                    }
                }
                Err(NodeErr(m)) if m == "\u{0}unknown" => {
                    return Err(ImportError::UnsupportedOp {
                        node: label,
                        op: node.op_type.clone(),
                        domain: String::new(),
                        opset: self.opset,
                    })
                }
                Err(NodeErr(message)) => {
                    return Err(ImportError::Node {
                        node: label,
                        op: node.op_type.clone(),
                        opset: self.opset,
                        message,
                    })
                }
            }
        }
        self.origin = self.origins.len();
        self.origins.push("outputs".into());
        let mut outputs = Vec::new();
        let mut out_decls = Vec::new();
        for vi in &g.output {
            let v =
                self.values.get(&vi.name).cloned().ok_or_else(|| {
                    ImportError::Model(format!("output {:?} is computed by no node", vi.name))
                })?;
            let rt =
                self.rt(&v).map_err(|NodeErr(m)| ImportError::Model(format!("output {:?}: {m}", vi.name)))?;
            let dt = dtype_of(rt.elem).map_err(|NodeErr(m)| ImportError::Model(m))?;
            let name = self.unique(&vi.name);
            out_decls.push(format!(".output {name} {dt}{}", shape_text(&rt.shape)));
            self.ins(format!("STORE {name}, %{}", rt.name));
            outputs.push(Binding { name, onnx_name: vi.name.clone(), elem: rt.elem });
        }
        Ok(Lowered { asm: self.text(options, &out_decls), inputs, outputs })
    }

    /// The assembly: header, declarations, then the code with FREE after each temporary's
    /// last use.
    fn text(&self, options: &ImportOptions, out_decls: &[String]) -> String {
        let mut last = vec![0usize; self.temps.len()];
        for (i, l) in self.lines.iter().enumerate() {
            for &t in &l.temps {
                last[t] = i;
            }
        }
        let mut frees: Vec<Vec<usize>> = vec![Vec::new(); self.lines.len()];
        for (t, &i) in last.iter().enumerate() {
            frees[i].push(t);
        }
        let mut s = String::new();
        s.push_str(&format!("; imported from {} by adeadvm import\n", self.model.path));
        // The debug source name `import` assembles under, so that `--emit-asm` output assembles
        // back to the same bytes whatever the file is called.
        let file = std::path::Path::new(&self.model.path)
            .file_name()
            .map_or_else(|| "model.onnx".into(), |f| f.to_string_lossy().into_owned());
        s.push_str(&format!(".file \"{}.s\"\n", asm_string(&file)));
        s.push_str(&format!(".tier {}\n", options.tier.name()));
        if !self.syms.is_empty() {
            s.push_str(&format!(".dim {}\n", self.syms.join(", ")));
        }
        for d in self.decls.iter().filter(|d| d.starts_with(".input")) {
            s.push_str(d);
            s.push('\n');
        }
        for d in out_decls {
            s.push_str(d);
            s.push('\n');
        }
        for d in self.decls.iter().filter(|d| !d.starts_with(".input")) {
            s.push_str(d);
            s.push('\n');
        }
        let mut origin = usize::MAX;
        for (i, l) in self.lines.iter().enumerate() {
            if l.origin != origin {
                origin = l.origin;
                let name = &self.origins[origin];
                s.push_str(&format!(".origin \"{}\"\n", asm_string(name)));
            }
            s.push_str("    ");
            s.push_str(&l.text);
            s.push('\n');
            for &t in &frees[i] {
                s.push_str(&format!("    FREE %{}\n", self.temps[t]));
            }
        }
        s.push_str("    HALT\n");
        s
    }

    // ---- attributes ---------------------------------------------------------------------

    fn attr<'n>(node: &'n NodeProto, name: &str) -> Option<&'n AttributeProto> {
        node.attribute.iter().find(|a| a.name == name)
    }

    fn attr_i(node: &NodeProto, name: &str, default: i64) -> NResult<i64> {
        match Self::attr(node, name) {
            None => Ok(default),
            Some(a) if a.r#type == attr_type::INT || a.r#type == 0 => Ok(a.i),
            Some(_) => err(format!("attribute {name} is not an integer")),
        }
    }

    fn attr_f(node: &NodeProto, name: &str, default: f32) -> NResult<f32> {
        match Self::attr(node, name) {
            None => Ok(default),
            Some(a) if a.r#type == attr_type::FLOAT || a.r#type == 0 => Ok(a.f),
            Some(_) => err(format!("attribute {name} is not a float")),
        }
    }

    fn attr_ints(node: &NodeProto, name: &str) -> NResult<Option<Vec<i64>>> {
        match Self::attr(node, name) {
            None => Ok(None),
            Some(a) if a.r#type == attr_type::INTS || a.r#type == 0 => Ok(Some(a.ints.clone())),
            Some(_) => err(format!("attribute {name} is not a list of integers")),
        }
    }

    fn attr_s(node: &NodeProto, name: &str, default: &str) -> NResult<String> {
        match Self::attr(node, name) {
            None => Ok(default.into()),
            Some(a) if a.r#type == attr_type::STRING || a.r#type == 0 => {
                Ok(String::from_utf8_lossy(&a.s).into_owned())
            }
            Some(_) => err(format!("attribute {name} is not a string")),
        }
    }

    fn input(&self, node: &NodeProto, i: usize) -> NResult<Option<Value>> {
        match node.input.get(i) {
            Some(n) if !n.is_empty() => self.value(n).map(Some),
            _ => Ok(None),
        }
    }

    fn req(&self, node: &NodeProto, i: usize) -> NResult<Value> {
        self.input(node, i)?.map_or_else(|| err(format!("input {i} is missing")), Ok)
    }

    /// Integers known at import (an input like Reshape's shape or Slice's starts).
    fn known_ints(&self, v: &Value, what: &str) -> NResult<Vec<IntV>> {
        match v {
            Value::Known(Known { vals: KVals::Int(v), .. }) => Ok(v.clone()),
            _ => {
                unsupported(format_args!("{what} computed when the model runs (it must be known at import)"))
            }
        }
    }

    fn known_nums(&self, v: &Value, what: &str) -> NResult<Vec<i64>> {
        self.known_ints(v, what)?
            .into_iter()
            .map(|x| match x {
                IntV::N(n) => Ok(n),
                IntV::S(s) => {
                    err(format!("{what} depends on the symbolic dimension {s}; fix it with --dim {s}=N"))
                }
            })
            .collect()
    }

    /// Axes from an attribute (older opsets) or an input (newer).
    fn axes(&self, node: &NodeProto, input: usize, attr_until: i64) -> NResult<Option<Vec<i64>>> {
        if self.opset < attr_until {
            Self::attr_ints(node, "axes")
        } else {
            match self.input(node, input)? {
                Some(v) => self.known_nums(&v, "axes").map(Some),
                None => Ok(None),
            }
        }
    }

    // ---- nodes --------------------------------------------------------------------------

    fn node(&mut self, node: &NodeProto) -> NResult<Vec<Value>> {
        let op = node.op_type.as_str();
        if let Some(v) = self.fold(node)? {
            return Ok(v);
        }
        let one = |v: Rt| Ok(vec![Value::Rt(v)]);
        match op {
            "Identity" => Ok(vec![self.req(node, 0)?]),
            "Dropout" => {
                let x = self.req(node, 0)?;
                if let Some(Value::Known(k)) = self.input(node, 2)? {
                    if matches!(&k.vals, KVals::Int(v) if v.first() == Some(&IntV::N(1))) {
                        return unsupported("Dropout in training mode");
                    }
                } else if self.input(node, 2)?.is_some() {
                    return unsupported("Dropout with a training_mode computed at run time");
                }
                let mut outs = vec![x.clone()];
                if node.output.len() > 1 && !node.output[1].is_empty() {
                    let mask = self.splat(ty::BOOL, &x.shape(), 1.0)?;
                    outs.push(Value::Rt(mask));
                }
                Ok(outs)
            }
            "Relu" | "Sigmoid" | "Tanh" | "Sqrt" | "Exp" | "Log" | "Erf" => {
                let x = self.req(node, 0)?;
                let x = self.rt(&x)?;
                self.float_only(x.elem)?;
                let mn = match op {
                    "Relu" => "RELU",
                    "Sigmoid" => "SIGMOID",
                    "Tanh" => "TANH",
                    "Sqrt" => "SQRT",
                    "Exp" => "EXP",
                    "Log" => "LOG",
                    _ => "ERF",
                };
                one(self.unary(mn, &x, x.elem)?)
            }
            "Neg" | "Abs" => {
                let x = self.req(node, 0)?;
                let x = self.rt(&x)?;
                self.numeric(x.elem)?;
                one(self.unary(if op == "Neg" { "NEG" } else { "ABS" }, &x, x.elem)?)
            }
            "Reciprocal" => {
                let x = self.req(node, 0)?;
                let x = self.rt(&x)?;
                self.float_only(x.elem)?;
                let c = self.splat(x.elem, &[], 1.0)?;
                one(self.binary("DIV", &c, &x, x.elem)?)
            }
            "Gelu" => {
                let x = self.req(node, 0)?;
                let x = self.rt(&x)?;
                self.float_only(x.elem)?;
                match Self::attr_s(node, "approximate", "none")?.as_str() {
                    "none" => one(self.unary("GELU", &x, x.elem)?),
                    "tanh" => one(self.gelu_tanh(&x)?),
                    other => unsupported(format_args!("approximate={other:?}")),
                }
            }
            "Add" | "Sub" | "Mul" | "Div" => {
                let a = self.req(node, 0)?;
                let b = self.req(node, 1)?;
                if a.elem() != b.elem() {
                    return err("the inputs' types differ");
                }
                let mn = op.to_ascii_uppercase();
                if op == "Div" {
                    self.float_only(a.elem())?;
                } else {
                    self.numeric(a.elem())?;
                }
                // A single known float on the right: the immediate form.
                if let (Value::Known(k), true) = (&b, is_float_elem(a.elem())) {
                    if let (KVals::Float(v), true) = (&k.vals, k.len() == 1 && k.dims.len() <= a.rank()) {
                        let a = self.rt(&a)?;
                        return one(self.scalar_op(&mn, &a, v[0])?);
                    }
                }
                let (a, b) = (self.rt(&a)?, self.rt(&b)?);
                one(self.binary(&mn, &a, &b, a.elem)?)
            }
            "Max" | "Min" | "Sum" | "Mean" => {
                let mut vals = Vec::new();
                for i in 0..node.input.len() {
                    if let Some(v) = self.input(node, i)? {
                        vals.push(self.rt(&v)?);
                    }
                }
                let Some(first) = vals.first().cloned() else { return err("no inputs") };
                if vals.iter().any(|v| v.elem != first.elem) {
                    return err("the inputs' types differ");
                }
                if op == "Mean" {
                    self.float_only(first.elem)?;
                } else {
                    self.numeric(first.elem)?;
                }
                let mn = match op {
                    "Max" => "MAX",
                    "Min" => "MIN",
                    _ => "ADD",
                };
                let mut acc = first.clone();
                for v in &vals[1..] {
                    acc = self.binary(mn, &acc, v, first.elem)?;
                }
                if op == "Mean" && vals.len() > 1 {
                    acc = self.scalar_op("DIV", &acc, vals.len() as f64)?;
                }
                if vals.len() == 1 {
                    return Ok(vec![Value::Rt(acc)]);
                }
                one(acc)
            }
            "Pow" => self.pow(node).map(|r| vec![Value::Rt(r)]),
            "Clip" => {
                let x = self.req(node, 0)?;
                let x = self.rt(&x)?;
                self.float_only(x.elem)?;
                let (lo, hi) = if self.opset < 11 {
                    (
                        Some(Self::attr_f(node, "min", f32::MIN)? as f64),
                        Some(Self::attr_f(node, "max", f32::MAX)? as f64),
                    )
                } else {
                    let bound = |s: &mut Self, i: usize, mn: &str, y: Rt| -> NResult<Rt> {
                        match s.input(node, i)? {
                            None => Ok(y),
                            Some(Value::Known(Known { vals: KVals::Float(v), .. })) if v.len() == 1 => {
                                s.scalar_op(mn, &y, v[0])
                            }
                            Some(v) => {
                                let b = s.rt(&v)?;
                                if !b.shape.is_empty() || b.elem != y.elem {
                                    return err("min and max must be scalars of the input's type");
                                }
                                s.binary(mn, &y, &b, y.elem)
                            }
                        }
                    };
                    let y = bound(self, 1, "MAX", x)?;
                    let y = bound(self, 2, "MIN", y)?;
                    return Ok(vec![Value::Rt(y)]);
                };
                let mut y = x;
                if let Some(lo) = lo {
                    y = self.scalar_op("MAX", &y, lo)?;
                }
                if let Some(hi) = hi {
                    y = self.scalar_op("MIN", &y, hi)?;
                }
                Ok(vec![Value::Rt(y)])
            }
            "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" => {
                let a = self.req(node, 0)?;
                let b = self.req(node, 1)?;
                if a.elem() != b.elem() {
                    return err("the inputs' types differ");
                }
                self.numeric(a.elem())?;
                let (a, b) = (self.rt(&a)?, self.rt(&b)?);
                let (mn, x, y) = match op {
                    "Equal" => ("EQ", &a, &b),
                    "Less" => ("LT", &a, &b),
                    "Greater" => ("LT", &b, &a),
                    "LessOrEqual" => ("LE", &a, &b),
                    _ => ("LE", &b, &a),
                };
                one(self.binary(mn, x, y, ty::BOOL)?)
            }
            "Not" => {
                let x = self.req(node, 0)?;
                let x = self.rt(&x)?;
                bool_only(&[x.elem])?;
                let c = self.splat(ty::BOOL, &[], 1.0)?;
                one(self.binary("SUB", &c, &x, ty::BOOL)?)
            }
            "Xor" => {
                let a = self.req(node, 0)?;
                let b = self.req(node, 1)?;
                let (a, b) = (self.rt(&a)?, self.rt(&b)?);
                bool_only(&[a.elem, b.elem])?;
                let d = self.binary("SUB", &a, &b, ty::BOOL)?;
                one(self.unary("ABS", &d, ty::BOOL)?)
            }
            "And" | "Or" => {
                let a = self.req(node, 0)?;
                let b = self.req(node, 1)?;
                let (a, b) = (self.rt(&a)?, self.rt(&b)?);
                bool_only(&[a.elem, b.elem])?;
                one(self.binary(if op == "And" { "MIN" } else { "MAX" }, &a, &b, ty::BOOL)?)
            }
            "Where" => {
                let c = self.req(node, 0)?;
                let x = self.req(node, 1)?;
                let y = self.req(node, 2)?;
                if x.elem() != y.elem() {
                    return err("X and Y have different types");
                }
                bool_only(&[c.elem()])?;
                let (c, x, y) = (self.rt(&c)?, self.rt(&x)?, self.rt(&y)?);
                let shape = broadcast(&broadcast(&c.shape, &x.shape)?, &y.shape)?;
                let d = self.tmp(x.elem, &shape)?;
                self.ins(format!("SELECT %{}, %{}, %{}, %{}", d.name, c.name, x.name, y.name));
                one(d)
            }
            "Expand" => {
                let x = self.req(node, 0)?;
                let s = self.req(node, 1)?;
                let target = self.known_ints(&s, "the shape")?;
                let target: Vec<D> = target.iter().map(|v| self.dim_of(v)).collect::<NResult<_>>()?;
                let shape = broadcast(&x.shape(), &target)?;
                let x = self.rt(&x)?;
                if shape == x.shape {
                    return one(x);
                }
                let ones = self.splat(ty::BOOL, &shape, 1.0)?;
                let d = self.tmp(x.elem, &shape)?;
                self.ins(format!("SELECT %{}, %{}, %{}, %{}", d.name, ones.name, x.name, x.name));
                one(d)
            }
            "Cast" | "CastLike" => {
                let x = self.req(node, 0)?;
                let to = if op == "Cast" {
                    Self::attr_i(node, "to", 0)? as i32
                } else {
                    self.req(node, 1)?.elem()
                };
                if Self::attr_i(node, "saturate", 1)? != 1 {
                    return unsupported("saturate=0");
                }
                let x = self.rt(&x)?;
                one(self.cast(&x, to)?)
            }
            "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => {
                let x = self.req(node, 0)?;
                let shape = self.reshape_target(node, &x.shape())?;
                let x = self.rt(&x)?;
                one(self.reshape(&x, &shape)?)
            }
            "Transpose" => {
                let x = self.req(node, 0)?;
                let perm = self.perm(node, x.rank())?;
                let x = self.rt(&x)?;
                one(self.transpose(&x, &perm)?)
            }
            "Concat" => {
                let mut vals = Vec::new();
                for i in 0..node.input.len() {
                    if let Some(v) = self.input(node, i)? {
                        vals.push(v);
                    }
                }
                let Some(first) = vals.first() else { return err("no inputs") };
                let axis = norm_axis(Self::attr_i(node, "axis", i64::MIN)?, first.rank())
                    .or_else(|_| err("the axis attribute is missing or out of range"))?;
                let mut acc: Option<Rt> = None;
                if vals.iter().any(|v| v.elem() != first.elem() || v.rank() != first.rank()) {
                    return err("the inputs differ in type or rank");
                }
                for v in &vals {
                    let v = self.rt(v)?;
                    acc = Some(match acc {
                        None => v,
                        Some(a) => {
                            if (0..a.shape.len()).any(|k| k != axis && a.shape[k] != v.shape[k]) {
                                return err(format!(
                                    "shapes {} and {} differ off the axis {axis}",
                                    shape_text(&a.shape),
                                    shape_text(&v.shape)
                                ));
                            }
                            let mut shape = a.shape.clone();
                            shape[axis] = add_dims(&a.shape[axis], &v.shape[axis])?;
                            let d = self.tmp(a.elem, &shape)?;
                            self.ins(format!("CONCAT %{}, %{}, %{}, {axis}", d.name, a.name, v.name));
                            d
                        }
                    });
                }
                let acc = acc.expect("one input at least");
                if vals.len() == 1 {
                    return Ok(vec![Value::Rt(acc)]);
                }
                one(acc)
            }
            "Split" => self.split(node),
            "Slice" => {
                let x = self.req(node, 0)?;
                let x = self.rt(&x)?;
                let plan = self.slice_plan(node, &x.shape)?;
                let mut y = x;
                for (axis, start, step, len) in plan {
                    match len {
                        len if step == 1 => y = self.slice(&y, axis, start as u64, len)?,
                        D::N(len) => {
                            let idx: Vec<u64> = (0..len as i64).map(|i| (start + i * step) as u64).collect();
                            y = self.take(&y, axis, &idx)?;
                        }
                        D::S(_) => unreachable!("symbolic lengths have step 1"),
                    }
                }
                Ok(vec![Value::Rt(y)])
            }
            "Gather" => self.gather(node).map(|r| vec![Value::Rt(r)]),
            "MatMul" => self.matmul(node).map(|r| vec![Value::Rt(r)]),
            "Gemm" => self.gemm(node).map(|r| vec![Value::Rt(r)]),
            "Softmax" | "LogSoftmax" => self.softmax(node).map(|r| vec![Value::Rt(r)]),
            "LayerNormalization" | "RMSNormalization" => self.norm(node),
            "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceSumSquare" | "ReduceL1"
            | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" => {
                self.reduce(node).map(|r| vec![Value::Rt(r)])
            }
            "ArgMax" | "ArgMin" => self.argmax(node).map(|r| vec![Value::Rt(r)]),
            "Trilu" => self.trilu(node).map(|r| vec![Value::Rt(r)]),
            "ConstantOfShape" => {
                let s = self.req(node, 0)?;
                let dims: Vec<D> = self
                    .known_ints(&s, "the shape")?
                    .iter()
                    .map(|v| self.dim_of(v))
                    .collect::<NResult<_>>()?;
                let (elem, v) = constant_of_shape_value(node)?;
                one(self.splat(elem, &dims, v)?)
            }
            "_MatMulBias" => {
                let a = self.req(node, 0)?;
                let b = self.req(node, 1)?;
                let c = self.req(node, 2)?;
                let (a, b, c) = (self.rt(&a)?, self.rt(&b)?, self.rt(&c)?);
                self.float_only(a.elem)?;
                let ra = a.shape.len();
                if ra < 2 || b.elem != a.elem || c.elem != a.elem || b.shape.len() != 2 {
                    return err("MatMul of these operands' types or ranks, with this bias, is not supported");
                }
                if a.shape[ra - 1] != b.shape[0] || c.shape != [b.shape[1].clone()] {
                    return err(format!(
                        "shapes {} @ {} + {} do not fit",
                        shape_text(&a.shape),
                        shape_text(&b.shape),
                        shape_text(&c.shape)
                    ));
                }
                let mut shape = a.shape.clone();
                shape[ra - 1] = b.shape[1].clone();
                let act = Self::attr_s(node, "act", "none")?;
                let d = self.tmp(a.elem, &shape)?;
                let act = if act == "none" { String::new() } else { format!(", act={act}") };
                self.ins(format!("MATMUL %{}, %{}, %{}, bias=%{}{act}", d.name, a.name, b.name, c.name));
                one(d)
            }
            "_Softmax" => {
                let x = self.req(node, 0)?;
                let x = self.rt(&x)?;
                self.float_only(x.elem)?;
                let mask = match self.input(node, 1)? {
                    Some(m) => {
                        let m = self.rt(&m)?;
                        if m.elem != x.elem || broadcast(&m.shape, &x.shape)? != x.shape {
                            return err("internal: the fused mask does not broadcast to the scores");
                        }
                        format!(", mask=%{}", m.name)
                    }
                    None => String::new(),
                };
                let scale = Self::attr_f(node, "scale", 1.0)?;
                let d = self.tmp(x.elem, &x.shape)?;
                self.ins(format!("SOFTMAX %{}, %{}{mask}, scale={}", d.name, x.name, imm(scale as f64)));
                one(d)
            }
            "Range" => {
                unsupported("Range with bounds computed when the model runs (they must be known at import)")
            }
            "Shape" | "Size" | "Constant" => err(format!("{op} could not be folded")),
            _ => err("\u{0}unknown"),
        }
    }

    fn float_only(&self, elem: i32) -> NResult<()> {
        dtype_of(elem)?;
        if !is_float_elem(elem) {
            return unsupported(format_args!(
                "type {} for this operator (adeadvm computes it on floats)",
                ty::name(elem)
            ));
        }
        Ok(())
    }

    fn numeric(&self, elem: i32) -> NResult<()> {
        dtype_of(elem).map(drop)
    }

    fn dim_of(&self, v: &IntV) -> NResult<D> {
        match v {
            IntV::N(n) if *n >= 0 => Ok(D::N(*n as u64)),
            IntV::N(n) => err(format!("dimension {n} is negative")),
            IntV::S(s) => Ok(D::S(s.clone())),
        }
    }

    fn cast(&mut self, x: &Rt, to: i32) -> NResult<Rt> {
        let dt_to = dtype_of(to)?;
        let dt_from = dtype_of(x.elem)?;
        if to == ty::BOOL {
            if x.elem == ty::BOOL {
                return Ok(Rt { elem: ty::BOOL, ..x.clone() });
            }
            // x != 0: 1 - (x == 0).
            let z = self.splat(x.elem, &[], 0.0)?;
            let e = self.binary("EQ", x, &z, ty::BOOL)?;
            let one = self.splat(ty::BOOL, &[], 1.0)?;
            return self.binary("SUB", &one, &e, ty::BOOL);
        }
        if dt_to == dt_from {
            // int64 <-> int32 <-> bool are all i32: the same values (bool 0/1, int64 held as i32).
            if dt_to.is_float() {
                let d = self.tmp(to, &x.shape)?;
                self.ins(format!("CAST %{}, %{}", d.name, x.name));
                return Ok(d);
            }
            return Ok(Rt { elem: to, ..x.clone() });
        }
        let d = self.tmp(to, &x.shape)?;
        self.ins(format!("CAST %{}, %{}", d.name, x.name));
        Ok(d)
    }

    fn gelu_tanh(&mut self, x: &Rt) -> NResult<Rt> {
        // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        let x2 = self.binary("MUL", x, x, x.elem)?;
        let x3 = self.binary("MUL", &x2, x, x.elem)?;
        let a = self.scalar_op("MUL", &x3, 0.044715f32 as f64)?;
        let s = self.binary("ADD", x, &a, x.elem)?;
        let k = (2.0f64 / std::f64::consts::PI).sqrt() as f32 as f64;
        let s = self.scalar_op("MUL", &s, k)?;
        let t = self.unary("TANH", &s, x.elem)?;
        let t = self.scalar_op("ADD", &t, 1.0)?;
        let h = self.scalar_op("MUL", x, 0.5)?;
        self.binary("MUL", &h, &t, x.elem)
    }

    fn pow(&mut self, node: &NodeProto) -> NResult<Rt> {
        let x = self.req(node, 0)?;
        let y = self.req(node, 1)?;
        let xr = self.rt(&x)?;
        self.float_only(xr.elem)?;
        // A known scalar exponent: exact forms where there is one.
        let exp_known = match &y {
            Value::Known(Known { vals: KVals::Float(v), dims, .. })
                if v.len() == 1 && dims.len() <= xr.shape.len() =>
            {
                Some(v[0])
            }
            Value::Known(Known { vals: KVals::Int(v), dims, .. })
                if v.len() == 1 && dims.len() <= xr.shape.len() =>
            {
                match v[0] {
                    IntV::N(n) => Some(n as f64),
                    IntV::S(_) => None,
                }
            }
            _ => None,
        };
        if let Some(e) = exp_known {
            if e == 1.0 {
                return self.copy_to_new(&xr);
            }
            if e == 0.5 {
                return self.unary("SQRT", &xr, xr.elem);
            }
            if e == -0.5 {
                return self.unary("RSQRT", &xr, xr.elem);
            }
            if e.fract() == 0.0 && e.abs() <= 64.0 && e != 0.0 {
                // Square and multiply: each product rounded, as ONNX's reference computes it
                // within its tolerance.
                let n = e.abs() as u32;
                let mut result: Option<Rt> = None;
                let mut base = xr.clone();
                let mut k = n;
                loop {
                    if k & 1 == 1 {
                        result = Some(match result {
                            None => base.clone(),
                            Some(r) => self.binary("MUL", &r, &base, xr.elem)?,
                        });
                    }
                    k >>= 1;
                    if k == 0 {
                        break;
                    }
                    base = self.binary("MUL", &base, &base, xr.elem)?;
                }
                let r = result.expect("n >= 1");
                let r = if r.name == xr.name { self.copy_to_new(&r)? } else { r };
                if e < 0.0 {
                    let one = self.splat(xr.elem, &[], 1.0)?;
                    return self.binary("DIV", &one, &r, xr.elem);
                }
                return Ok(r);
            }
        }
        // exp(y ln x): for x > 0 (a negative base gives NaN here, unlike ONNX for integer y).
        let yr = self.rt(&y)?;
        let yr = if yr.elem != xr.elem { self.cast(&yr, xr.elem)? } else { yr };
        let l = self.unary("LOG", &xr, xr.elem)?;
        let m = self.binary("MUL", &l, &yr, xr.elem)?;
        self.unary("EXP", &m, xr.elem)
    }

    fn perm(&self, node: &NodeProto, rank: usize) -> NResult<Vec<usize>> {
        let perm: Vec<usize> = match Self::attr_ints(node, "perm")? {
            Some(p) => p.iter().map(|&a| norm_axis(a, rank)).collect::<NResult<_>>()?,
            None => (0..rank).rev().collect(),
        };
        let mut seen = vec![false; rank];
        if perm.len() != rank || perm.iter().any(|&p| std::mem::replace(&mut seen[p], true)) {
            return err(format!("perm {perm:?} is not a permutation of {rank} axes"));
        }
        Ok(perm)
    }

    /// The output shape of Reshape, Flatten, Squeeze or Unsqueeze.
    fn reshape_target(&self, node: &NodeProto, shape: &[D]) -> NResult<Vec<D>> {
        let rank = shape.len();
        match node.op_type.as_str() {
            "Reshape" => {
                let s = self.req(node, 1)?;
                let target = self.known_ints(&s, "the shape")?;
                let allowzero = Self::attr_i(node, "allowzero", 0)? == 1;
                let mut out: Vec<Option<D>> = Vec::new();
                let mut infer = None;
                for (i, v) in target.iter().enumerate() {
                    out.push(match v {
                        IntV::N(0) if !allowzero => Some(
                            shape
                                .get(i)
                                .cloned()
                                .map_or_else(|| err("0 copies a dimension past the input's rank"), Ok)?,
                        ),
                        IntV::N(-1) => {
                            if infer.replace(i).is_some() {
                                return err("more than one -1 in the shape");
                            }
                            None
                        }
                        v => Some(self.dim_of(v)?),
                    });
                }
                if let Some(i) = infer {
                    let known: Vec<D> = out.iter().flatten().cloned().collect();
                    out[i] = Some(divide_count(shape, &known)?);
                }
                let out: Vec<D> = out.into_iter().map(|d| d.expect("filled")).collect();
                if !same_count(shape, &out) {
                    return err(format!(
                        "cannot reshape {} to {} (element counts differ)",
                        shape_text(shape),
                        shape_text(&out)
                    ));
                }
                Ok(out)
            }
            "Flatten" => {
                let axis = Self::attr_i(node, "axis", 1)?;
                let a = if axis < 0 { axis + rank as i64 } else { axis };
                if a < 0 || a > rank as i64 {
                    return err(format!("axis {axis} is out of range for rank {rank}"));
                }
                let a = a as usize;
                Ok(vec![product(&shape[..a])?, product(&shape[a..])?])
            }
            "Squeeze" => {
                let axes = self.axes(node, 1, 13)?;
                let axes: Vec<usize> = match axes {
                    Some(a) => a.iter().map(|&x| norm_axis(x, rank)).collect::<NResult<_>>()?,
                    None => (0..rank).filter(|&i| shape[i] == D::N(1)).collect(),
                };
                for &a in &axes {
                    if shape[a] != D::N(1) {
                        return err(format!("axis {a} has size {}, not 1", shape[a]));
                    }
                }
                Ok((0..rank).filter(|i| !axes.contains(i)).map(|i| shape[i].clone()).collect())
            }
            _ => {
                let axes = self.axes(node, 1, 13)?.map_or_else(|| err("axes are missing"), Ok)?;
                let out_rank = rank + axes.len();
                let mut axes: Vec<usize> =
                    axes.iter().map(|&x| norm_axis(x, out_rank)).collect::<NResult<_>>()?;
                axes.sort_unstable();
                axes.dedup();
                if axes.len() + rank != out_rank {
                    return err("repeated axes");
                }
                let mut it = shape.iter();
                Ok((0..out_rank)
                    .map(|i| if axes.contains(&i) { D::N(1) } else { it.next().cloned().unwrap_or(D::N(1)) })
                    .collect())
            }
        }
    }

    fn split(&mut self, node: &NodeProto) -> NResult<Vec<Value>> {
        let x = self.req(node, 0)?;
        let x = self.rt(&x)?;
        let axis = norm_axis(Self::attr_i(node, "axis", 0)?, x.shape.len())?;
        let D::N(total) = x.shape[axis].clone() else {
            return unsupported("Split along a symbolic dimension");
        };
        let n_out = node.output.len() as u64;
        let sizes: Vec<u64> = match if self.opset < 13 { Self::attr_ints(node, "split")? } else { None } {
            Some(s) => split_sizes(&s)?,
            None => match self.input(node, 1)? {
                Some(v) if self.opset >= 13 => split_sizes(&self.known_nums(&v, "split")?)?,
                _ => {
                    let n = if self.opset >= 18 {
                        Self::attr_i(node, "num_outputs", n_out as i64)? as u64
                    } else {
                        n_out
                    };
                    if n == 0 {
                        return err("no outputs");
                    }
                    let chunk = total.div_ceil(n);
                    (0..n).map(|i| chunk.min(total.saturating_sub(i * chunk))).collect()
                }
            },
        };
        if sizes.iter().try_fold(0u64, |a, &s| a.checked_add(s)) != Some(total) || sizes.len() as u64 != n_out
        {
            return err(format!(
                "split sizes {sizes:?} do not cover the axis of size {total} in {n_out} outputs"
            ));
        }
        let mut outs = Vec::new();
        let mut start = 0;
        for s in sizes {
            let mut shape = x.shape.clone();
            shape[axis] = D::N(s);
            let d = self.tmp(x.elem, &shape)?;
            self.ins(format!("SLICE %{}, %{}, {axis}, {start}", d.name, x.name));
            outs.push(Value::Rt(d));
            start += s;
        }
        Ok(outs)
    }

    /// Slice's (axis, start, step, length) for each sliced axis, clamped as ONNX defines. A
    /// length may be symbolic: `x[0:T]` where T is a symbolic dim's size (from Shape).
    fn slice_plan(&self, node: &NodeProto, shape: &[D]) -> NResult<Vec<(usize, i64, i64, D)>> {
        let rank = shape.len();
        let (starts, ends, axes, steps) = if self.opset < 10 {
            let s = Self::attr_ints(node, "starts")?.map_or_else(|| err("starts are missing"), Ok)?;
            let e = Self::attr_ints(node, "ends")?.map_or_else(|| err("ends are missing"), Ok)?;
            (s, e.into_iter().map(IntV::N).collect(), Self::attr_ints(node, "axes")?, None)
        } else {
            let s = self.req(node, 1)?;
            let e = self.req(node, 2)?;
            let a = self.input(node, 3)?;
            let st = self.input(node, 4)?;
            (
                self.known_nums(&s, "starts")?,
                self.known_ints(&e, "ends")?,
                a.map(|a| self.known_nums(&a, "axes")).transpose()?,
                st.map(|s| self.known_nums(&s, "steps")).transpose()?,
            )
        };
        let axes: Vec<usize> = match axes {
            Some(a) => a.iter().map(|&x| norm_axis(x, rank)).collect::<NResult<_>>()?,
            None => (0..starts.len()).collect(),
        };
        if starts.len() != axes.len()
            || ends.len() != axes.len()
            || steps.as_ref().is_some_and(|s| s.len() != axes.len())
        {
            return err("starts, ends, axes and steps have different lengths");
        }
        let mut plan = Vec::new();
        for (i, &axis) in axes.iter().enumerate() {
            let step = steps.as_ref().map_or(1, |s| s[i]);
            if step == 0 {
                return err("step 0");
            }
            let end = match &ends[i] {
                IntV::N(e) => *e,
                IntV::S(sym) if starts[i] == 0 && step == 1 => {
                    // x[0:T]: T rows, checked against the axis when the program runs.
                    if let D::S(d) = &shape[axis] {
                        if d != sym {
                            return unsupported(format_args!("a slice to {sym} of an axis of size {d}"));
                        }
                    }
                    plan.push((axis, 0, 1, D::S(sym.clone())));
                    continue;
                }
                IntV::S(sym) => {
                    return unsupported(format_args!(
                        "a slice bound computed from the symbolic dimension {sym}"
                    ))
                }
            };
            let D::N(dim) = shape[axis].clone() else {
                return unsupported("Slice of a symbolic dimension");
            };
            let dim = dim as i64;
            let clamp = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
            let fix = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
            let (start, end) = if step > 0 {
                (clamp(fix(starts[i]), 0, dim), clamp(fix(end), 0, dim))
            } else {
                (clamp(fix(starts[i]), 0, dim - 1), clamp(fix(end), -1, dim - 1))
            };
            let len = if step > 0 {
                if end > start {
                    (end - start + step - 1) / step
                } else {
                    0
                }
            } else if start > end {
                (start - end + (-step) - 1) / (-step)
            } else {
                0
            };
            plan.push((axis, start, step, D::N(len as u64)));
        }
        Ok(plan)
    }

    fn gather(&mut self, node: &NodeProto) -> NResult<Rt> {
        let x = self.req(node, 0)?;
        let idx = self.req(node, 1)?;
        let x = self.rt(&x)?;
        let rank = x.shape.len();
        let axis = norm_axis(Self::attr_i(node, "axis", 0)?, rank)?;
        if !matches!(idx.elem(), ty::INT32 | ty::INT64) {
            return err("indices are not integers");
        }
        let ir = match &idx {
            Value::Known(k) => {
                // Negative indices count from the end: fixed here.
                let D::N(n) = x.shape[axis].clone() else {
                    return self.rt(&idx).and_then(|i| self.gather_rt(&x, axis, &i));
                };
                let vals = self.known_ints(&idx, "indices")?;
                let mut fixed = Vec::new();
                for v in vals {
                    match v {
                        IntV::N(i) if i >= -(n as i64) && i < n as i64 => {
                            fixed.push(if i < 0 { i + n as i64 } else { i })
                        }
                        IntV::N(i) => return err(format!("index {i} is out of range for size {n}")),
                        IntV::S(_) => return unsupported("symbolic indices"),
                    }
                }
                self.materialize(&Known::ints(fixed, k.dims.clone()))?
            }
            Value::Rt(r) => {
                // idx + n where idx < 0.
                let r = r.clone();
                let n = &x.shape[axis];
                match n {
                    D::N(n) => {
                        let zero = self.splat(ty::INT32, &[], 0.0)?;
                        let neg = self.binary("LT", &r, &zero, ty::BOOL)?;
                        let nn = self.splat(ty::INT32, &[], *n as f64)?;
                        let plus = self.binary("ADD", &r, &nn, r.elem)?;
                        let d = self.tmp(r.elem, &r.shape)?;
                        self.ins(format!("SELECT %{}, %{}, %{}, %{}", d.name, neg.name, plus.name, r.name));
                        d
                    }
                    D::S(_) => r,
                }
            }
        };
        self.gather_rt(&x, axis, &ir)
    }

    fn gather_rt(&mut self, x: &Rt, axis: usize, idx: &Rt) -> NResult<Rt> {
        let rank = x.shape.len();
        let mut front: Vec<usize> = vec![axis];
        front.extend((0..rank).filter(|&i| i != axis));
        let xt = self.transpose(x, &front)?;
        let mut shape = idx.shape.clone();
        shape.extend(xt.shape[1..].iter().cloned());
        if shape.len() > MAX_RANK {
            return unsupported(format_args!("a result of rank {}", shape.len()));
        }
        let g = self.tmp(x.elem, &shape)?;
        self.ins(format!("GATHER %{}, %{}, %{}", g.name, xt.name, idx.name));
        if axis == 0 {
            return Ok(g);
        }
        // g is [idx..., d_0..d_{a-1}, d_{a+1}..]; ONNX wants [d_0..d_{a-1}, idx..., d_{a+1}..].
        let q = idx.shape.len();
        let mut perm: Vec<usize> = (q..q + axis).collect();
        perm.extend(0..q);
        perm.extend(q + axis..shape.len());
        self.transpose(&g, &perm)
    }

    fn matmul(&mut self, node: &NodeProto) -> NResult<Rt> {
        let a = self.req(node, 0)?;
        let b = self.req(node, 1)?;
        if a.elem() != b.elem() {
            return err("the inputs' types differ");
        }
        let (a, b) = (self.rt(&a)?, self.rt(&b)?);
        self.float_only(a.elem)?;
        if a.shape.is_empty() || b.shape.is_empty() {
            return err("MatMul of a scalar");
        }
        let a2 =
            if a.shape.len() == 1 { self.reshape(&a, &[D::N(1), a.shape[0].clone()])? } else { a.clone() };
        let b2 =
            if b.shape.len() == 1 { self.reshape(&b, &[b.shape[0].clone(), D::N(1)])? } else { b.clone() };
        let (ra, rb) = (a2.shape.len(), b2.shape.len());
        if a2.shape[ra - 1] != b2.shape[rb - 2] {
            return err(format!("inner dimensions differ: {} and {}", a2.shape[ra - 1], b2.shape[rb - 2]));
        }
        let batch = broadcast(&a2.shape[..ra - 2], &b2.shape[..rb - 2])?;
        let mut shape = batch;
        shape.push(a2.shape[ra - 2].clone());
        shape.push(b2.shape[rb - 1].clone());
        let d = self.tmp(a.elem, &shape)?;
        self.ins(format!("MATMUL %{}, %{}, %{}", d.name, a2.name, b2.name));
        let mut out = shape.clone();
        if b.shape.len() == 1 {
            out.pop();
        }
        if a.shape.len() == 1 {
            out.remove(out.len() - if b.shape.len() == 1 { 1 } else { 2 });
        }
        self.reshape(&d, &out)
    }

    fn gemm(&mut self, node: &NodeProto) -> NResult<Rt> {
        let a = self.req(node, 0)?;
        let b = self.req(node, 1)?;
        let c = self.input(node, 2)?;
        let alpha = Self::attr_f(node, "alpha", 1.0)? as f64;
        let beta = Self::attr_f(node, "beta", 1.0)? as f64;
        let ta = Self::attr_i(node, "transA", 0)? != 0;
        let tb = Self::attr_i(node, "transB", 0)? != 0;
        let (a, b) = (self.rt(&a)?, self.rt(&b)?);
        self.float_only(a.elem)?;
        if a.shape.len() != 2 || b.shape.len() != 2 || a.elem != b.elem {
            return err("A and B must be matrices of one type");
        }
        let m = a.shape[if ta { 1 } else { 0 }].clone();
        let n = b.shape[if tb { 0 } else { 1 }].clone();
        let (ka, kb) = (&a.shape[if ta { 0 } else { 1 }], &b.shape[if tb { 1 } else { 0 }]);
        if ka != kb {
            return err(format!("inner dimensions differ: {ka} and {kb}"));
        }
        let flags = format!("{}{}", if ta { ", ta" } else { "" }, if tb { ", tb" } else { "" });
        let shape = vec![m, n];
        let c = match c {
            Some(c) if c.elem() != a.elem => return err("C's type differs from A's"),
            Some(c) => Some(self.rt(&c)?),
            None => None,
        };
        if alpha == 1.0 && (beta == 1.0 || c.is_none()) {
            if let Some(c) = &c {
                if broadcast(&c.shape, &shape)? != shape {
                    return err("C does not broadcast to [M, N]");
                }
            }
            let d = self.tmp(a.elem, &shape)?;
            let bias = c.as_ref().map_or(String::new(), |c| format!(", bias=%{}", c.name));
            self.ins(format!("MATMUL %{}, %{}, %{}{bias}{flags}", d.name, a.name, b.name));
            return Ok(d);
        }
        let d = self.tmp(a.elem, &shape)?;
        self.ins(format!("MATMUL %{}, %{}, %{}{flags}", d.name, a.name, b.name));
        let y = if alpha != 1.0 { self.scalar_op("MUL", &d, alpha)? } else { d };
        match c {
            Some(c) if beta != 0.0 => {
                let cb = if beta != 1.0 { self.scalar_op("MUL", &c, beta)? } else { c };
                self.binary("ADD", &y, &cb, a.elem)
            }
            _ => Ok(y),
        }
    }

    fn softmax(&mut self, node: &NodeProto) -> NResult<Rt> {
        let x = self.req(node, 0)?;
        let x = self.rt(&x)?;
        self.float_only(x.elem)?;
        let rank = x.shape.len();
        if rank == 0 {
            return err("Softmax of a scalar");
        }
        if self.opset < 13 {
            // Softmax over the 2-D view [prod(:axis), prod(axis:)].
            let axis = Self::attr_i(node, "axis", 1)?;
            let a = if axis < 0 { axis + rank as i64 } else { axis };
            if a < 0 || a >= rank as i64 {
                return err(format!("axis {axis} is out of range for rank {rank}"));
            }
            let flat = vec![product(&x.shape[..a as usize])?, product(&x.shape[a as usize..])?];
            let x2 = self.reshape(&x, &flat)?;
            let y = self.softmax_last(&x2, node.op_type == "LogSoftmax")?;
            return self.reshape(&y, &x.shape);
        }
        let axis = norm_axis(Self::attr_i(node, "axis", -1)?, rank)?;
        let (p, inv) = Self::axis_last_perm(rank, axis);
        let xt = self.transpose(&x, &p)?;
        let y = self.softmax_last(&xt, node.op_type == "LogSoftmax")?;
        self.transpose(&y, &inv)
    }

    /// SOFTMAX over the last axis, or log-softmax: x - m - log(sum(exp(x - m))), m the maximum
    /// (not LOG of SOFTMAX, which underflows to -inf where the answer is only very negative).
    fn softmax_last(&mut self, x: &Rt, log: bool) -> NResult<Rt> {
        if !log {
            return self.unary("SOFTMAX", x, x.elem);
        }
        let last = x.shape.len() - 1;
        let m = self.reduce_axes(x, &[last], "REDUCE_MAX")?;
        let d = self.binary("SUB", x, &m, x.elem)?;
        let e = self.unary("EXP", &d, x.elem)?;
        let s = self.reduce_axes(&e, &[last], "REDUCE_SUM")?;
        let l = self.unary("LOG", &s, x.elem)?;
        self.binary("SUB", &d, &l, x.elem)
    }

    fn norm(&mut self, node: &NodeProto) -> NResult<Vec<Value>> {
        let rms = node.op_type == "RMSNormalization";
        let x = self.req(node, 0)?;
        let scale = self.req(node, 1)?;
        let bias = if rms { None } else { self.input(node, 2)? };
        let x = self.rt(&x)?;
        self.float_only(x.elem)?;
        let rank = x.shape.len();
        let axis = norm_axis(Self::attr_i(node, "axis", -1)?, rank)?;
        let eps = Self::attr_f(node, "epsilon", 1e-5)?;
        let inner = product(&x.shape[axis..])?;
        let mut flat: Vec<D> = x.shape[..axis].to_vec();
        flat.push(inner.clone());
        let xf = self.reshape(&x, &flat)?;
        let flat_param = |s: &mut Self, v: &Value| -> NResult<Rt> {
            let r = s.rt(v)?;
            if r.elem != x.elem {
                return unsupported("Scale or B of another type than X");
            }
            if same_count(&r.shape, std::slice::from_ref(&inner)) {
                s.reshape(&r, std::slice::from_ref(&inner))
            } else {
                unsupported("Scale or B that broadcast (adeadvm takes them with the normalized shape)")
            }
        };
        let g = flat_param(self, &scale)?;
        let b = match &bias {
            Some(b) => Some(flat_param(self, b)?),
            None => None,
        };
        let y = self.tmp(x.elem, &flat)?;
        let eps_text = imm(eps as f64);
        if rms {
            self.ins(format!("RMSNORM %{}, %{}, gamma=%{}, eps={eps_text}", y.name, xf.name, g.name));
        } else {
            let beta = b.as_ref().map_or(String::new(), |b| format!(", beta=%{}", b.name));
            self.ins(format!("LAYERNORM %{}, %{}, gamma=%{}{beta}, eps={eps_text}", y.name, xf.name, g.name));
        }
        let y = self.reshape(&y, &x.shape)?;
        let mut outs = vec![Value::Rt(y)];
        let wants = |i: usize| node.output.get(i).is_some_and(|o| !o.is_empty());
        if !rms && (wants(1) || wants(2)) {
            let stash = Self::attr_i(node, "stash_type", 1)? as i32;
            let mut kept: Vec<D> = x.shape[..axis].to_vec();
            kept.extend(std::iter::repeat_n(D::N(1), rank - axis));
            let mut red = flat.clone();
            *red.last_mut().expect("rank >= 1") = D::N(1);
            let xs = if x.elem != stash { self.cast(&xf, stash)? } else { xf.clone() };
            let mean = self.tmp(stash, &red)?;
            self.ins(format!("REDUCE_MEAN %{}, %{}, -1", mean.name, xs.name));
            let d = self.binary("SUB", &xs, &mean, stash)?;
            let d2 = self.binary("MUL", &d, &d, stash)?;
            let var = self.tmp(stash, &red)?;
            self.ins(format!("REDUCE_MEAN %{}, %{}, -1", var.name, d2.name));
            let ve = self.scalar_op("ADD", &var, eps as f64)?;
            let inv = self.unary("RSQRT", &ve, stash)?;
            let mean = self.reshape(&mean, &kept)?;
            let inv = self.reshape(&inv, &kept)?;
            outs.push(Value::Rt(mean));
            outs.push(Value::Rt(inv));
        }
        Ok(outs)
    }

    /// `x` reduced by `mn` over each of `axes` in turn, keeping them (size 1).
    fn reduce_axes(&mut self, x: &Rt, axes: &[usize], mn: &str) -> NResult<Rt> {
        let mut y = if x.shape.is_empty() { self.copy_to_new(x)? } else { x.clone() };
        for &a in axes {
            let mut shape = y.shape.clone();
            shape[a] = D::N(1);
            let d = self.tmp(x.elem, &shape)?;
            self.ins(format!("{mn} %{}, %{}, {a}", d.name, y.name));
            y = d;
        }
        Ok(y)
    }

    fn reduce(&mut self, node: &NodeProto) -> NResult<Rt> {
        let op = node.op_type.as_str();
        let x = self.req(node, 0)?;
        let x = self.rt(&x)?;
        self.float_only(x.elem)?;
        let rank = x.shape.len();
        let until = if op == "ReduceSum" { 13 } else { 18 };
        let axes = self.axes(node, 1, until)?;
        let keep = Self::attr_i(node, "keepdims", 1)? != 0;
        let noop = Self::attr_i(node, "noop_with_empty_axes", 0)? != 0;
        let mut axes: Vec<usize> = match axes {
            Some(a) if !a.is_empty() => a.iter().map(|&v| norm_axis(v, rank)).collect::<NResult<_>>()?,
            _ if noop => return self.copy_to_new(&x),
            _ => (0..rank).collect(),
        };
        axes.sort_unstable();
        axes.dedup();
        let mut y = match op {
            "ReduceSum" => self.reduce_axes(&x, &axes, "REDUCE_SUM")?,
            "ReduceMean" => self.reduce_axes(&x, &axes, "REDUCE_MEAN")?,
            "ReduceMax" => self.reduce_axes(&x, &axes, "REDUCE_MAX")?,
            "ReduceMin" => {
                // min x = -max(-x), exactly.
                let n = self.unary("NEG", &x, x.elem)?;
                let m = self.reduce_axes(&n, &axes, "REDUCE_MAX")?;
                self.unary("NEG", &m, x.elem)?
            }
            "ReduceSumSquare" | "ReduceL2" => {
                let sq = self.binary("MUL", &x, &x, x.elem)?;
                let s = self.reduce_axes(&sq, &axes, "REDUCE_SUM")?;
                if op == "ReduceL2" {
                    self.unary("SQRT", &s, x.elem)?
                } else {
                    s
                }
            }
            "ReduceL1" => {
                let a = self.unary("ABS", &x, x.elem)?;
                self.reduce_axes(&a, &axes, "REDUCE_SUM")?
            }
            "ReduceLogSum" => {
                let s = self.reduce_axes(&x, &axes, "REDUCE_SUM")?;
                self.unary("LOG", &s, x.elem)?
            }
            _ => {
                // log(sum(exp(x - m))) + m, m the maximum (no overflow in exp).
                let m = self.reduce_axes(&x, &axes, "REDUCE_MAX")?;
                let d = self.binary("SUB", &x, &m, x.elem)?;
                let e = self.unary("EXP", &d, x.elem)?;
                let s = self.reduce_axes(&e, &axes, "REDUCE_SUM")?;
                let l = self.unary("LOG", &s, x.elem)?;
                self.binary("ADD", &l, &m, x.elem)?
            }
        };
        if !keep {
            let shape: Vec<D> = (0..rank).filter(|i| !axes.contains(i)).map(|i| y.shape[i].clone()).collect();
            y = self.reshape(&y, &shape)?;
        }
        Ok(y)
    }

    fn argmax(&mut self, node: &NodeProto) -> NResult<Rt> {
        let x = self.req(node, 0)?;
        let x = self.rt(&x)?;
        self.float_only(x.elem)?;
        // argmin x = argmax -x: NEG is exact, and ARGMAX counts -0 and +0 (and denormals) equal.
        let x = if node.op_type == "ArgMin" { self.unary("NEG", &x, x.elem)? } else { x };
        let rank = x.shape.len();
        let axis = norm_axis(Self::attr_i(node, "axis", 0)?, rank)?;
        let keep = Self::attr_i(node, "keepdims", 1)? != 0;
        let last = Self::attr_i(node, "select_last_index", 0)? != 0;
        let (p, _) = Self::axis_last_perm(rank, axis);
        let mut xt = self.transpose(&x, &p)?;
        let D::N(n) = x.shape[axis].clone() else {
            if last {
                return unsupported("select_last_index along a symbolic dimension");
            }
            return self.argmax_last(&xt, &x.shape, axis, keep);
        };
        if last {
            // The last maximum is the first one of the reversed axis: n-1 - argmax(reversed).
            let idx: Vec<u64> = (0..n).rev().collect();
            xt = self.take(&xt, rank - 1, &idx)?;
            let i = self.argmax_last(&xt, &x.shape, axis, keep)?;
            let c = self.splat(ty::INT32, &[], (n as f64) - 1.0)?;
            let r = self.binary("SUB", &c, &i, ty::INT64)?;
            return Ok(r);
        }
        self.argmax_last(&xt, &x.shape, axis, keep)
    }

    fn argmax_last(&mut self, xt: &Rt, shape: &[D], axis: usize, keep: bool) -> NResult<Rt> {
        let mut red = xt.shape.clone();
        red.pop();
        let d = self.tmp(ty::INT64, &red)?;
        self.ins(format!("ARGMAX %{}, %{}", d.name, xt.name));
        let out: Vec<D> = if keep {
            shape.iter().enumerate().map(|(i, s)| if i == axis { D::N(1) } else { s.clone() }).collect()
        } else {
            shape.iter().enumerate().filter(|&(i, _)| i != axis).map(|(_, s)| s.clone()).collect()
        };
        self.reshape(&d, &out)
    }

    fn trilu(&mut self, node: &NodeProto) -> NResult<Rt> {
        let x = self.req(node, 0)?;
        let x = self.rt(&x)?;
        let rank = x.shape.len();
        if rank < 2 {
            return err("Trilu needs a rank of 2 or more");
        }
        let k = match self.input(node, 1)? {
            Some(v) => *self.known_nums(&v, "k")?.first().map_or_else(|| err("k is empty"), Ok)?,
            None => 0,
        };
        let upper = Self::attr_i(node, "upper", 1)? != 0;
        let dims = fixed(&x.shape[rank - 2..], "Trilu's matrix size")?;
        let (n, m) = (dims[0], dims[1]);
        // Known mask: keep (i, j) where j - i >= k (upper) or j - i <= k (lower).
        let mut mask = Vec::with_capacity((n * m) as usize);
        for i in 0..n as i64 {
            for j in 0..m as i64 {
                let keep = if upper { j - i >= k } else { j - i <= k };
                mask.push(keep as i64);
            }
        }
        let km = Known { elem: ty::BOOL, ..Known::ints(mask, vec![n, m]) };
        let c = self.materialize(&km)?;
        let z = self.splat(x.elem, &[], 0.0)?;
        let d = self.tmp(x.elem, &x.shape)?;
        self.ins(format!("SELECT %{}, %{}, %{}, %{}", d.name, c.name, x.name, z.name));
        Ok(d)
    }

    // ---- folding ------------------------------------------------------------------------

    /// The node's outputs when they are known at import, or None to lower it.
    fn fold(&mut self, node: &NodeProto) -> NResult<Option<Vec<Value>>> {
        let op = node.op_type.as_str();
        match op {
            "Constant" => return self.constant(node).map(|k| Some(vec![Value::Known(k)])),
            "Shape" => {
                let x = self.req(node, 0)?;
                let shape = x.shape();
                let r = shape.len() as i64;
                let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                let start = clampi(Self::attr_i(node, "start", 0)?);
                let end = clampi(Self::attr_i(node, "end", r)?);
                let vals: Vec<IntV> = shape[start..end.max(start)]
                    .iter()
                    .map(|d| match d {
                        D::N(n) => IntV::N(*n as i64),
                        D::S(s) => IntV::S(s.clone()),
                    })
                    .collect();
                let n = vals.len() as u64;
                return Ok(Some(vec![Value::Known(Known {
                    elem: ty::INT64,
                    dims: vec![n],
                    vals: KVals::Int(vals),
                    source: None,
                })]));
            }
            "Size" => {
                let x = self.req(node, 0)?;
                let p = product(&x.shape())?;
                let v = match p {
                    D::N(n) => IntV::N(n as i64),
                    D::S(s) => IntV::S(s),
                };
                return Ok(Some(vec![Value::Known(Known {
                    elem: ty::INT64,
                    dims: vec![],
                    vals: KVals::Int(vec![v]),
                    source: None,
                })]));
            }
            _ => {}
        }
        if op == "CastLike" {
            // Only the value must be known: the second input gives just its type.
            if let (Some(Value::Known(x)), Some(like)) = (self.input(node, 0)?, self.input(node, 1)?) {
                return Ok(cast_known(&x, like.elem()).map(|k| vec![Value::Known(k)]));
            }
        }
        let mut ins = Vec::new();
        for i in 0..node.input.len() {
            match self.input(node, i)? {
                Some(Value::Known(k)) => ins.push(Some(k)),
                Some(Value::Rt(_)) => return Ok(None),
                None => ins.push(None),
            }
        }
        if ins.is_empty() || ins[0].is_none() {
            return Ok(None);
        }
        let x = ins[0].clone().expect("checked");
        let small = |k: &Known| !k.is_float() || k.len() <= FOLD_FLOATS;
        if !ins.iter().flatten().all(small) {
            return Ok(None);
        }
        let kint = |k: &Known| !k.is_float();
        let out = match op {
            "Identity" => Some(x),
            "Cast" | "CastLike" => {
                let to = if op == "Cast" {
                    Self::attr_i(node, "to", 0)? as i32
                } else {
                    self.req(node, 1)?.elem()
                };
                cast_known(&x, to)
            }
            "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => {
                let shape = self.reshape_target(node, &x.shape())?;
                let dims = fixed(&shape, "the shape")?;
                Some(Known { dims, source: None, ..x })
            }
            "Concat" => {
                let axis = norm_axis(Self::attr_i(node, "axis", 0)?, x.dims.len())?;
                let parts: Vec<Known> = ins.iter().flatten().cloned().collect();
                Some(concat_known(&parts, axis)?)
            }
            "Gather" => {
                let Some(idx) = ins.get(1).cloned().flatten() else { return err("indices are missing") };
                let axis = norm_axis(Self::attr_i(node, "axis", 0)?, x.dims.len())?;
                Some(gather_known(&x, axis, &idx)?)
            }
            "Slice" => {
                let plan = self.slice_plan(node, &x.shape())?;
                let mut y = x;
                for (axis, start, step, len) in plan {
                    let D::N(len) = len else { return Ok(None) };
                    let idx: Vec<i64> = (0..len as i64).map(|i| start + i * step).collect();
                    let ik = Known::ints(idx, vec![len]);
                    y = gather_known(&y, axis, &ik)?;
                }
                Some(y)
            }
            "Expand" => {
                let Some(s) = ins.get(1).cloned().flatten() else { return err("shape is missing") };
                let target = self.known_nums(&Value::Known(s), "the shape")?;
                let target: Vec<D> = target.iter().map(|&v| D::N(v.max(0) as u64)).collect();
                let shape = fixed(&broadcast(&x.shape(), &target)?, "the shape")?;
                if element_count(&shape)? > FOLD_FLOATS as u64 {
                    return Ok(None);
                }
                let idx = broadcast_index(&x.dims, &shape);
                Some(pick(&x, &idx, shape))
            }
            "ConstantOfShape" => {
                let target = self.known_nums(&Value::Known(x), "the shape")?;
                let dims: Vec<u64> = target.iter().map(|&v| v.max(0) as u64).collect();
                let n = element_count(&dims)?;
                if n > FOLD_FLOATS as u64 {
                    return Ok(None);
                }
                let (elem, v) = constant_of_shape_value(node)?;
                let vals = if is_float_elem(elem) {
                    KVals::Float(vec![v; n as usize])
                } else {
                    KVals::Int(vec![IntV::N(v as i64); n as usize])
                };
                Some(Known { elem, dims, vals, source: None })
            }
            "Range" => {
                let get = |i: usize| ins.get(i).cloned().flatten();
                let (Some(s), Some(l), Some(d)) = (get(0), get(1), get(2)) else {
                    return err("inputs are missing");
                };
                Some(range_known(&s, &l, &d)?)
            }
            "Add" | "Sub" | "Mul" | "Div" | "Max" | "Min" | "Equal" | "Less" | "Greater" | "LessOrEqual"
            | "GreaterOrEqual" | "And" | "Or" | "Mod"
                if ins.len() == 2 && ins.iter().all(|k| k.as_ref().is_some_and(kint)) =>
            {
                let b = ins[1].clone().expect("checked");
                Some(int_binary(op, &x, &b)?)
            }
            "Neg" | "Abs" | "Not" if kint(&x) => {
                Some(map_ints(&x, if op == "Not" { ty::BOOL } else { x.elem }, |v| match op {
                    "Neg" => v.wrapping_neg(),
                    "Abs" => v.wrapping_abs(),
                    _ => (v == 0) as i64,
                })?)
            }
            "Where" if ins.len() == 3 && ins.iter().all(|k| k.as_ref().is_some_and(kint)) => {
                let (y, z) = (ins[1].clone().expect("checked"), ins[2].clone().expect("checked"));
                Some(where_known(&x, &y, &z)?)
            }
            _ => None,
        };
        Ok(out.map(|k| vec![Value::Known(k)]))
    }

    fn constant(&self, node: &NodeProto) -> NResult<Known> {
        let a = node.attribute.first().map_or_else(|| err("no value"), Ok)?;
        let name = node.output.first().cloned();
        Ok(match a.name.as_str() {
            "value" => {
                let t = a.t.as_ref().map_or_else(|| err("value is not a tensor"), Ok)?;
                let data = tensor_data(t, &self.model.dir).map_err(NodeErr)?;
                // Read by name only where `onnx(...)` finds this very tensor by it.
                let name = name.filter(|n| self.model.named_tensor(n).is_some_and(|x| std::ptr::eq(x, t)));
                known_from(data, name)
            }
            "value_float" => {
                Known { elem: ty::FLOAT, dims: vec![], vals: KVals::Float(vec![a.f as f64]), source: None }
            }
            "value_floats" => Known {
                elem: ty::FLOAT,
                dims: vec![a.floats.len() as u64],
                vals: KVals::Float(a.floats.iter().map(|&f| f as f64).collect()),
                source: None,
            },
            "value_int" => Known::ints(vec![a.i], vec![]),
            "value_ints" => Known::ints(a.ints.clone(), vec![a.ints.len() as u64]),
            other => return unsupported(format_args!("Constant's {other}")),
        })
    }
}

/// Graph rewrites that give the program the instructions a hand-written one would use (as ONNX
/// Runtime's fusions do), then dead-node removal:
///
/// - the erf form of GELU, `x * 0.5 * (1 + erf(x / sqrt 2))` (either order of the products),
///   becomes one Gelu: GELU's strict bound is tighter than the five rounded steps';
/// - MatMul by a known [K, N] matrix, then Add of a known [N] bias, becomes one MATMUL with
///   `bias` (the same rounding: the product, then the bias added once), and a Gelu after it
///   its `act=gelu`;
/// - Softmax over the last axis of `(s / c) + mask` or `(s * c) + mask`, c a known scalar,
///   becomes SOFTMAX's `scale` (1/c rounded, for a division) and `mask`.
///
/// Fused nodes are internal operators (`_MatMulBias`, `_Softmax`) named after the last node
/// they replace, so errors still name a node of the model.
fn fuse(
    nodes: &[NodeProto],
    values: &HashMap<String, Value>,
    outputs: &[String],
    opset: i64,
) -> Vec<NodeProto> {
    let mut nodes: Vec<NodeProto> = nodes.to_vec();
    let scalar = |name: &str| -> Option<f64> {
        match values.get(name) {
            Some(Value::Known(Known { vals: KVals::Float(v), .. })) if v.len() == 1 => Some(v[0]),
            _ => None,
        }
    };
    let uses = |nodes: &[NodeProto], name: &str| -> usize {
        nodes.iter().flat_map(|n| n.input.iter()).filter(|i| *i == name).count()
            + outputs.iter().filter(|o| *o == name).count()
    };
    let producer = |nodes: &[NodeProto], name: &str| -> Option<usize> {
        nodes.iter().position(|n| n.output.first().is_some_and(|o| o == name))
    };
    let other = |n: &NodeProto, this: &str| -> Option<String> {
        match n.input.as_slice() {
            [a, b] if a == this => Some(b.clone()),
            [a, b] if b == this => Some(a.clone()),
            _ => None,
        }
    };
    let attr_f = |name: &str, f: f32| AttributeProto {
        name: name.into(),
        r#type: attr_type::FLOAT,
        f,
        ..Default::default()
    };
    let attr_s = |name: &str, s: &str| AttributeProto {
        name: name.into(),
        r#type: attr_type::STRING,
        s: s.as_bytes().to_vec(),
        ..Default::default()
    };
    let single = |n: &NodeProto, op: &str| n.op_type == op && n.domain.is_empty() && n.output.len() == 1;

    // GELU: Erf(Div(h, sqrt2)) -> Add(., 1) -> Mul ... -> Mul.
    for e in 0..nodes.len() {
        if !single(&nodes[e], "Erf") {
            continue;
        }
        let Some(d) = nodes[e].input.first().and_then(|i| producer(&nodes, i)) else { continue };
        let dn = &nodes[d];
        let h = match (dn.op_type.as_str(), dn.input.as_slice()) {
            ("Div", [h, c]) if scalar(c).is_some_and(|c| (c - std::f64::consts::SQRT_2).abs() < 1e-6) => {
                h.clone()
            }
            ("Mul", [h, c])
                if scalar(c).is_some_and(|c| (c - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-6) =>
            {
                h.clone()
            }
            _ => continue,
        };
        let eo = nodes[e].output[0].clone();
        let Some(a) = nodes.iter().position(|n| single(n, "Add") && n.input.contains(&eo)) else { continue };
        if other(&nodes[a], &eo).and_then(|c| scalar(&c)) != Some(1.0) || uses(&nodes, &eo) != 1 {
            continue;
        }
        let ao = nodes[a].output[0].clone();
        let Some(m) = nodes.iter().position(|n| single(n, "Mul") && n.input.contains(&ao)) else { continue };
        if uses(&nodes, &ao) != 1 {
            continue;
        }
        let Some(x) = other(&nodes[m], &ao) else { continue };
        // Form A: Mul(Mul(h, 0.5), ao). Form B: Mul(Mul(h, ao), 0.5).
        let last = if producer(&nodes, &x).is_some_and(|p| {
            single(&nodes[p], "Mul") && other(&nodes[p], &h).and_then(|c| scalar(&c)) == Some(0.5)
        }) && uses(&nodes, &x) == 1
        {
            m
        } else if x == h {
            let mo = nodes[m].output[0].clone();
            match nodes.iter().position(|n| single(n, "Mul") && n.input.contains(&mo)) {
                Some(m2)
                    if uses(&nodes, &mo) == 1
                        && other(&nodes[m2], &mo).and_then(|c| scalar(&c)) == Some(0.5) =>
                {
                    m2
                }
                _ => continue,
            }
        } else {
            continue;
        };
        let n = &mut nodes[last];
        n.op_type = "Gelu".into();
        n.input = vec![h];
        n.attribute.clear();
    }

    // The GELUs' inner nodes are dead now: gone, so that their uses do not count below.
    let mut nodes = remove_dead(nodes, outputs);

    // MatMul + Add(bias) [+ Gelu].
    for a in 0..nodes.len() {
        if !single(&nodes[a], "Add") || nodes[a].input.len() != 2 {
            continue;
        }
        let found = nodes[a].input.iter().enumerate().find_map(|(k, i)| {
            let p = producer(&nodes, i)?;
            let mm = &nodes[p];
            let bias = nodes[a].input[1 - k].clone();
            let w_ok =
                matches!(values.get(&mm.input.get(1)?.clone()), Some(Value::Known(w)) if w.dims.len() == 2);
            let b_ok = matches!(values.get(&bias), Some(Value::Known(b)) if b.dims.len() == 1);
            (single(mm, "MatMul") && w_ok && b_ok && uses(&nodes, i) == 1).then_some((p, bias))
        });
        let Some((p, bias)) = found else { continue };
        let (x, w) = (nodes[p].input[0].clone(), nodes[p].input[1].clone());
        let ao = nodes[a].output[0].clone();
        let gelu =
            nodes.iter().position(|n| single(n, "Gelu") && n.input == [ao.clone()] && n.attribute.is_empty());
        let (target, act) = match gelu {
            Some(g) if uses(&nodes, &ao) == 1 => (g, "gelu"),
            _ => (a, "none"),
        };
        let n = &mut nodes[target];
        n.op_type = "_MatMulBias".into();
        n.input = vec![x, w, bias];
        n.attribute = vec![attr_s("act", act)];
    }

    // Softmax(x * scale + mask).
    for s in 0..nodes.len() {
        if !single(&nodes[s], "Softmax") {
            continue;
        }
        // Before opset 13 the default axis is 1 (over a 2-D view).
        let axis = nodes[s]
            .attribute
            .iter()
            .find(|a| a.name == "axis")
            .map_or(if opset < 13 { 1 } else { -1 }, |a| a.i);
        if axis != -1 {
            continue;
        }
        let Some(input) = nodes[s].input.first().cloned() else { continue };
        let Some(a) = producer(&nodes, &input) else { continue };
        if !single(&nodes[a], "Add") || nodes[a].input.len() != 2 || uses(&nodes, &input) != 1 {
            continue;
        }
        let found = nodes[a].input.iter().enumerate().find_map(|(k, i)| {
            let p = producer(&nodes, i)?;
            let n = &nodes[p];
            let c = scalar(n.input.get(1)?)?;
            let scale = match n.op_type.as_str() {
                "Div" if c != 0.0 => (1.0f32 / c as f32) as f64,
                "Mul" => c,
                _ => return None,
            };
            (uses(&nodes, i) == 1 && n.output.len() == 1)
                .then(|| (n.input[0].clone(), nodes[a].input[1 - k].clone(), scale))
        });
        let Some((x, mask, scale)) = found else { continue };
        let n = &mut nodes[s];
        n.op_type = "_Softmax".into();
        n.input = vec![x, mask];
        n.attribute = vec![attr_f("scale", scale as f32)];
    }

    remove_dead(nodes, outputs)
}

/// The nodes some graph output depends on, in their order.
fn remove_dead(nodes: Vec<NodeProto>, outputs: &[String]) -> Vec<NodeProto> {
    let mut live: HashSet<String> = outputs.iter().cloned().collect();
    let mut keep = vec![false; nodes.len()];
    for (i, n) in nodes.iter().enumerate().rev() {
        if n.output.iter().any(|o| live.contains(o)) {
            keep[i] = true;
            live.extend(n.input.iter().cloned());
        }
    }
    nodes.into_iter().zip(keep).filter(|(_, k)| *k).map(|(n, _)| n).collect()
}

fn known_from(data: TensorData, source: Option<String>) -> Known {
    let vals = match data.values {
        Values::Float(v) => KVals::Float(v),
        Values::Int(v) => KVals::Int(v.into_iter().map(IntV::N).collect()),
    };
    Known { elem: data.elem, dims: data.dims, vals, source }
}

fn constant_of_shape_value(node: &NodeProto) -> NResult<(i32, f64)> {
    match node.attribute.iter().find(|a| a.name == "value").and_then(|a| a.t.as_ref()) {
        None => Ok((ty::FLOAT, 0.0)),
        Some(t) => {
            let d = tensor_data(t, std::path::Path::new(".")).map_err(NodeErr)?;
            let v = match &d.values {
                Values::Float(v) => v.first().copied(),
                Values::Int(v) => v.first().map(|&x| x as f64),
            };
            Ok((d.elem, v.map_or_else(|| err("value is empty"), Ok)?))
        }
    }
}

fn add_dims(a: &D, b: &D) -> NResult<D> {
    match (a, b) {
        (D::N(x), D::N(y)) => Ok(D::N(x + y)),
        (x, D::N(0)) | (D::N(0), x) => Ok(x.clone()),
        _ => unsupported(format_args!("a dimension {a} + {b} (fix the symbolic dims with --dim)")),
    }
}

/// The product of dims, when it is a number or a single symbolic dim.
fn product(shape: &[D]) -> NResult<D> {
    let mut n = 1u64;
    let mut sym = None;
    for d in shape {
        match d {
            D::N(k) => n *= k,
            D::S(s) if sym.is_none() => sym = Some(s.clone()),
            D::S(s) => {
                return unsupported(format_args!(
                    "a dimension {s} × {} (fix the symbolic dims with --dim)",
                    sym.unwrap_or_default()
                ))
            }
        }
    }
    match sym {
        None => Ok(D::N(n)),
        Some(s) if n == 1 => Ok(D::S(s)),
        Some(s) => unsupported(format_args!("a dimension {n} × {s} (fix the symbolic dims with --dim)")),
    }
}

/// Element counts as a number and a sorted list of symbols.
fn count_parts(shape: &[D]) -> (u64, Vec<String>) {
    let mut n = 1u64;
    let mut syms = Vec::new();
    for d in shape {
        match d {
            D::N(k) => n = n.saturating_mul(*k),
            D::S(s) => syms.push(s.clone()),
        }
    }
    syms.sort();
    (n, syms)
}

fn same_count(a: &[D], b: &[D]) -> bool {
    count_parts(a) == count_parts(b)
}

/// The dim that makes `known`'s count equal `shape`'s (Reshape's -1).
fn divide_count(shape: &[D], known: &[D]) -> NResult<D> {
    let (n, mut s) = count_parts(shape);
    let (k, ks) = count_parts(known);
    for x in ks {
        match s.iter().position(|y| *y == x) {
            Some(i) => {
                s.remove(i);
            }
            None => {
                return unsupported("a -1 in Reshape that depends on symbolic dims (fix them with --dim)")
            }
        }
    }
    if k == 0 || n % k != 0 {
        return err("-1 in the shape cannot be inferred (the element count does not divide)");
    }
    match (n / k, s.len()) {
        (q, 0) => Ok(D::N(q)),
        (1, 1) => Ok(D::S(s.remove(0))),
        _ => unsupported("a -1 in Reshape that is a product of symbolic dims (fix them with --dim)"),
    }
}

/// A known value converted as CAST converts (floats rounded once to the type, floats to
/// integers truncated), or None where the importer leaves the conversion to the program.
fn cast_known(x: &Known, to: i32) -> Option<Known> {
    let round = |v: f64| -> f64 {
        match to {
            ty::FLOAT => v as f32 as f64,
            ty::FLOAT16 => half::f16::from_f64(v).to_f64(),
            _ => half::bf16::from_f64(v).to_f64(),
        }
    };
    let vals = match (&x.vals, to) {
        (KVals::Int(v), ty::INT64 | ty::INT32) => KVals::Int(v.clone()),
        (KVals::Int(v), ty::BOOL) => KVals::Int(
            v.iter()
                .map(|i| if let IntV::N(n) = i { Some(IntV::N((*n != 0) as i64)) } else { None })
                .collect::<Option<_>>()?,
        ),
        (KVals::Int(v), ty::FLOAT | ty::FLOAT16 | ty::BFLOAT16) => KVals::Float(
            v.iter()
                .map(|i| if let IntV::N(n) = i { Some(round(*n as f64)) } else { None })
                .collect::<Option<_>>()?,
        ),
        (KVals::Float(v), ty::FLOAT | ty::FLOAT16 | ty::BFLOAT16) => {
            KVals::Float(v.iter().map(|&f| round(f)).collect())
        }
        _ => return None,
    };
    Some(Known { elem: to, dims: x.dims.clone(), vals, source: None })
}

fn map_ints(x: &Known, elem: i32, f: impl Fn(i64) -> i64) -> NResult<Known> {
    let KVals::Int(v) = &x.vals else { return err("not integers") };
    let vals = v
        .iter()
        .map(|i| match i {
            IntV::N(n) => Ok(IntV::N(f(*n))),
            IntV::S(s) => err(format!("this arithmetic on the symbolic dimension {s} needs --dim {s}=N")),
        })
        .collect::<NResult<_>>()?;
    Ok(Known { elem, dims: x.dims.clone(), vals: KVals::Int(vals), source: None })
}

/// The elements of `x` at flat indices `idx`, with dims `dims`.
fn pick(x: &Known, idx: &[usize], dims: Vec<u64>) -> Known {
    let vals = match &x.vals {
        KVals::Float(v) => KVals::Float(idx.iter().map(|&i| v[i]).collect()),
        KVals::Int(v) => KVals::Int(idx.iter().map(|&i| v[i].clone()).collect()),
    };
    Known { elem: x.elem, dims, vals, source: None }
}

fn concat_known(parts: &[Known], axis: usize) -> NResult<Known> {
    let first = &parts[0];
    let mut dims = first.dims.clone();
    dims[axis] = parts.iter().map(|p| p.dims.get(axis).copied().unwrap_or(0)).sum();
    for p in parts {
        if p.dims.len() != first.dims.len()
            || p.elem != first.elem
            || (0..p.dims.len()).any(|k| k != axis && p.dims[k] != first.dims[k])
        {
            return err("inputs differ in rank, type or shape off the axis");
        }
    }
    let outer: u64 = dims[..axis].iter().product();
    let mut vals_f = Vec::new();
    let mut vals_i = Vec::new();
    for o in 0..outer {
        for p in parts {
            let inner: u64 = p.dims[axis..].iter().product();
            let range = (o * inner) as usize..((o + 1) * inner) as usize;
            match &p.vals {
                KVals::Float(v) => vals_f.extend_from_slice(&v[range]),
                KVals::Int(v) => vals_i.extend_from_slice(&v[range]),
            }
        }
    }
    let vals = if first.is_float() { KVals::Float(vals_f) } else { KVals::Int(vals_i) };
    Ok(Known { elem: first.elem, dims, vals, source: None })
}

fn gather_known(x: &Known, axis: usize, idx: &Known) -> NResult<Known> {
    let KVals::Int(iv) = &idx.vals else { return err("indices are not integers") };
    let n = x.dims[axis] as i64;
    let mut ids = Vec::with_capacity(iv.len());
    for v in iv {
        match v {
            IntV::N(i) if *i >= -n && *i < n => ids.push(if *i < 0 { i + n } else { *i } as u64),
            IntV::N(i) => return err(format!("index {i} is out of range for size {n}")),
            IntV::S(_) => return unsupported("symbolic indices"),
        }
    }
    let outer: u64 = x.dims[..axis].iter().product();
    let inner: u64 = x.dims[axis + 1..].iter().product();
    let mut flat = Vec::new();
    for o in 0..outer {
        for &i in &ids {
            for k in 0..inner {
                flat.push(((o * n as u64 + i) * inner + k) as usize);
            }
        }
    }
    let mut dims = x.dims[..axis].to_vec();
    dims.extend_from_slice(&idx.dims);
    dims.extend_from_slice(&x.dims[axis + 1..]);
    Ok(pick(x, &flat, dims))
}

fn range_known(s: &Known, l: &Known, d: &Known) -> NResult<Known> {
    let scalar = |k: &Known| -> NResult<f64> {
        match &k.vals {
            KVals::Float(v) if v.len() == 1 => Ok(v[0]),
            KVals::Int(v) if v.len() == 1 => match &v[0] {
                IntV::N(n) => Ok(*n as f64),
                IntV::S(s) => {
                    unsupported(format_args!("Range over the symbolic dimension {s} (fix it with --dim)"))
                }
            },
            _ => err("start, limit and delta must be scalars"),
        }
    };
    let (start, limit, delta) = (scalar(s)?, scalar(l)?, scalar(d)?);
    if delta == 0.0 {
        return err("delta is 0");
    }
    let n = ((limit - start) / delta).ceil().max(0.0) as u64;
    if n > 1 << 24 {
        return err("the range is too long");
    }
    if s.is_float() {
        // ONNX's reference: start + i * delta in the input type.
        let v: Vec<f64> = (0..n).map(|i| (start as f32 + (i as f32) * (delta as f32)) as f64).collect();
        Ok(Known { elem: s.elem, dims: vec![n], vals: KVals::Float(v), source: None })
    } else {
        let v: Vec<i64> = (0..n as i64)
            .map(|i| i.checked_mul(delta as i64).and_then(|x| x.checked_add(start as i64)))
            .collect::<Option<_>>()
            .map_or_else(|| err("the range overflows int64"), Ok)?;
        Ok(Known { elem: s.elem, ..Known::ints(v, vec![n]) })
    }
}

fn int_binary(op: &str, a: &Known, b: &Known) -> NResult<Known> {
    let shape = fixed(&broadcast(&a.shape(), &b.shape())?, "the shape")?;
    let ia = broadcast_index(&a.dims, &shape);
    let ib = broadcast_index(&b.dims, &shape);
    let (KVals::Int(va), KVals::Int(vb)) = (&a.vals, &b.vals) else { return err("not integers") };
    let cmp = matches!(op, "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual");
    let mut out = Vec::with_capacity(ia.len());
    for (&i, &j) in ia.iter().zip(&ib) {
        let v = match (&va[i], &vb[j]) {
            (IntV::N(x), IntV::N(y)) => {
                let (x, y) = (*x, *y);
                IntV::N(match op {
                    "Add" => x.wrapping_add(y),
                    "Sub" => x.wrapping_sub(y),
                    "Mul" => x.wrapping_mul(y),
                    "Div" if y == 0 => return err("integer division by zero"),
                    "Div" => x.wrapping_div(y),
                    "Mod" if y == 0 => return err("integer division by zero"),
                    "Mod" => {
                        // The sign of the divisor, as ONNX's Mod (fmod=0) and Python's %.
                        let r = x.wrapping_rem(y);
                        if r != 0 && (r < 0) != (y < 0) {
                            r + y
                        } else {
                            r
                        }
                    }
                    "Max" => x.max(y),
                    "Min" => x.min(y),
                    "Equal" => (x == y) as i64,
                    "Less" => (x < y) as i64,
                    "Greater" => (x > y) as i64,
                    "LessOrEqual" => (x <= y) as i64,
                    "GreaterOrEqual" => (x >= y) as i64,
                    "And" => (x != 0 && y != 0) as i64,
                    _ => (x != 0 || y != 0) as i64,
                })
            }
            (IntV::S(s), IntV::N(1)) if matches!(op, "Mul" | "Div") => IntV::S(s.clone()),
            (IntV::N(1), IntV::S(s)) if op == "Mul" => IntV::S(s.clone()),
            (IntV::S(s), IntV::N(0)) if matches!(op, "Add" | "Sub") => IntV::S(s.clone()),
            (IntV::N(0), IntV::S(s)) if op == "Add" => IntV::S(s.clone()),
            (IntV::S(s), IntV::S(t)) if s == t && op == "Equal" => IntV::N(1),
            (IntV::S(s), _) | (_, IntV::S(s)) => {
                return err(format!("{op} on the symbolic dimension {s} needs --dim {s}=N"));
            }
        };
        out.push(v);
    }
    let elem = if cmp { ty::BOOL } else { a.elem };
    Ok(Known { elem, dims: shape, vals: KVals::Int(out), source: None })
}

fn where_known(c: &Known, x: &Known, y: &Known) -> NResult<Known> {
    let shape = fixed(&broadcast(&broadcast(&c.shape(), &x.shape())?, &y.shape())?, "the shape")?;
    let (ic, ix, iy) = (
        broadcast_index(&c.dims, &shape),
        broadcast_index(&x.dims, &shape),
        broadcast_index(&y.dims, &shape),
    );
    let (KVals::Int(vc), KVals::Int(vx), KVals::Int(vy)) = (&c.vals, &x.vals, &y.vals) else {
        return err("not integers");
    };
    let vals = (0..ic.len())
        .map(|k| if vc[ic[k]] != IntV::N(0) { vx[ix[k]].clone() } else { vy[iy[k]].clone() })
        .collect();
    Ok(Known { elem: x.elem, dims: shape, vals: KVals::Int(vals), source: None })
}

/// Lowers `model` to assembly.
pub(super) fn lower(model: &Model, options: &ImportOptions) -> Result<Lowered, ImportError> {
    let l = Lowerer {
        model,
        opset: model.opset(),
        values: HashMap::new(),
        decls: Vec::new(),
        lines: Vec::new(),
        temps: Vec::new(),
        temp_ids: HashMap::new(),
        used_names: HashSet::new(),
        consts: HashMap::new(),
        fixed_dims: options.dims.iter().cloned().collect(),
        syms: Vec::new(),
        origin: 0,
        origins: Vec::new(),
        counter: 0,
    };
    l.run(options)
}
