//! `adeadvm import`: small ONNX models built here with the importer's own prost messages,
//! imported through the library and the command line.
//!
//! Malformed models must fail with the message a user sees and exit status 1, leaving no
//! output file; symbolic dims stay symbolic unless `--dim` fixes them; every node's
//! instructions carry its name (`.origin`), which disasm prints back and run-time errors name;
//! a few operators' semantics are checked against values computed here in f64, on the CPU and
//! (where there is a device) on Vulkan with the same bits; and importing is deterministic.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use adeadvm::api::{Backend, Config, Program, Session};
use adeadvm::onnx::proto::{
    attr_type, data_type as ty, AttributeProto, Dimension, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto, TypeProtoTensor,
    ValueInfoProto,
};
use adeadvm::onnx::{self, ImportOptions};
use adeadvm::HostTensor;
use prost::Message;

// ---- building models ----------------------------------------------------------------------

/// A dimension of a graph input or output: a size or a symbolic name.
enum Dm {
    N(i64),
    P(&'static str),
}

fn vi(name: &str, elem: i32, dims: &[Dm]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| match d {
            Dm::N(n) => Dimension { dim_value: Some(*n), dim_param: None },
            Dm::P(p) => Dimension { dim_value: None, dim_param: Some(p.to_string()) },
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor { elem_type: elem, shape: Some(TensorShapeProto { dim }) }),
            ..Default::default()
        }),
    }
}

fn f32_in(name: &str, dims: &[i64]) -> ValueInfoProto {
    vi(name, ty::FLOAT, &dims.iter().map(|&d| Dm::N(d)).collect::<Vec<_>>())
}

fn i64_in(name: &str, dims: &[i64]) -> ValueInfoProto {
    vi(name, ty::INT64, &dims.iter().map(|&d| Dm::N(d)).collect::<Vec<_>>())
}

/// An output: the importer computes its shape, so it declares none.
fn out(name: &str) -> ValueInfoProto {
    ValueInfoProto { name: name.into(), r#type: None }
}

fn node(
    name: &str,
    op: &str,
    inputs: &[&str],
    outputs: &[&str],
    attribute: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: name.into(),
        op_type: op.into(),
        domain: String::new(),
        attribute,
    }
}

fn attr_i(name: &str, i: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attr_type::INT, i, ..Default::default() }
}

fn attr_f(name: &str, f: f32) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attr_type::FLOAT, f, ..Default::default() }
}

fn tensor_f32(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: ty::FLOAT,
        raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..Default::default()
    }
}

fn tensor_i64(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: ty::INT64,
        int64_data: values.to_vec(),
        ..Default::default()
    }
}

fn model(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    initializer: Vec<TensorProto>,
) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 17 }],
        producer_name: "onnx_import.rs".into(),
        graph: Some(GraphProto {
            node: nodes,
            name: "g".into(),
            initializer,
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
    }
}

fn write_model(dir: &Path, file: &str, m: &ModelProto) -> PathBuf {
    let p = dir.join(file);
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    p
}

/// `y = Relu(x)` with x f32[2, 3]: the smallest valid model, varied by the error tests.
fn relu_model() -> ModelProto {
    model(
        vec![node("n0", "Relu", &["x"], &["y"], vec![])],
        vec![f32_in("x", &[2, 3])],
        vec![out("y")],
        vec![],
    )
}

// ---- the command line ---------------------------------------------------------------------

fn adeadvm(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_adeadvm")).args(args).current_dir(dir).output().expect("runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn succeeded(out: Output) -> Output {
    assert!(out.status.success(), "{}", text(&out.stderr));
    out
}

/// Imports `file` (in `dir`) to out.bib, expecting status 1 with `msg` in stderr and no
/// output file.
fn import_fails(dir: &Path, file: &str, extra: &[&str], msg: &str) {
    let _ = std::fs::remove_file(dir.join("out.bib"));
    let mut args = vec!["import", file, "-o", "out.bib", "--emit-asm", "out.s"];
    args.extend_from_slice(extra);
    let o = adeadvm(&args, dir);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{file}: {err}");
    assert!(err.contains(msg), "{file}: expected {msg:?} in:\n{err}");
    assert!(err.starts_with("error: "), "{file}: {err}");
    assert!(!dir.join("out.bib").exists(), "{file}: no output file on failure");
    assert!(!dir.join("out.s").exists(), "{file}: no assembly file on failure");
}

fn import_cli(dir: &Path, file: &str, output: &str, extra: &[&str]) -> Output {
    let mut args = vec!["import", file, "-o", output];
    args.extend_from_slice(extra);
    succeeded(adeadvm(&args, dir))
}

#[test]
fn unreadable_and_undecodable_files_are_clean_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    import_fails(d, "missing.onnx", &[], "error: cannot read missing.onnx: no such file");
    std::fs::create_dir(d.join("folder.onnx")).unwrap();
    import_fails(d, "folder.onnx", &[], "error: cannot read folder.onnx: it is a folder, not a regular file");

    // Bytes that are not a protobuf message (an invalid wire type in the first key).
    let mut bytes = vec![0x0f, 0xff, 0xff, 0xff];
    let mut x = 0x9e37_79b9_u32;
    for _ in 0..200 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        bytes.push(x as u8);
    }
    std::fs::write(d.join("random.onnx"), &bytes).unwrap();
    import_fails(
        d,
        "random.onnx",
        &[],
        "error: random.onnx is not an ONNX model: failed to decode Protobuf message",
    );

    // A valid model cut short in the middle of its graph.
    let full = relu_model().encode_to_vec();
    std::fs::write(d.join("cut.onnx"), &full[..full.len() - 5]).unwrap();
    import_fails(
        d,
        "cut.onnx",
        &[],
        "error: cut.onnx is not an ONNX model: failed to decode Protobuf message",
    );

    // No graph (an empty file decodes as a model with every field absent).
    let mut m = relu_model();
    m.graph = None;
    write_model(d, "nograph.onnx", &m);
    import_fails(d, "nograph.onnx", &[], "error: nograph.onnx is not an ONNX model: it has no graph");
    std::fs::write(d.join("empty.onnx"), b"").unwrap();
    import_fails(d, "empty.onnx", &[], "error: empty.onnx is not an ONNX model: it has no graph");

    // The library says the same.
    let e = onnx::import(&d.join("nograph.onnx"), &ImportOptions::default()).err().unwrap();
    assert!(e.to_string().ends_with("nograph.onnx is not an ONNX model: it has no graph"), "{e}");
}

/// `y = x + w` with `w` the given initializer.
fn add_init(w: TensorProto) -> ModelProto {
    model(
        vec![node("add", "Add", &["x", "w"], &["y"], vec![])],
        vec![f32_in("x", &[3])],
        vec![out("y")],
        vec![w],
    )
}

#[test]
fn malformed_initializers_are_clean_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut w = tensor_f32("w", &[3], &[1.0, 2.0, 3.0]);
    w.raw_data.truncate(8);
    write_model(d, "short.onnx", &add_init(w));
    import_fails(
        d,
        "short.onnx",
        &[],
        "error: initializer \"w\": raw data holds 8 bytes; 3 float values need 12",
    );

    let mut w = tensor_f32("w", &[3], &[]);
    w.dims = vec![-3];
    write_model(d, "negative.onnx", &add_init(w));
    import_fails(d, "negative.onnx", &[], "error: initializer \"w\": negative dimension -3");

    // A negative dimension on a graph input.
    let m = model(
        vec![node("n0", "Relu", &["x"], &["y"], vec![])],
        vec![vi("x", ty::FLOAT, &[Dm::N(2), Dm::N(-2)])],
        vec![out("y")],
        vec![],
    );
    write_model(d, "negative_input.onnx", &m);
    import_fails(d, "negative_input.onnx", &[], "error: input \"x\" has dimension -2");

    // float_data with fewer values than the dims ask for.
    let w = TensorProto {
        name: "w".into(),
        dims: vec![3],
        data_type: ty::FLOAT,
        float_data: vec![1.0],
        ..Default::default()
    };
    write_model(d, "few.onnx", &add_init(w));
    import_fails(d, "few.onnx", &[], "error: initializer \"w\": holds 1 values for 3 elements");
}

fn external(name: &str, location: &str, offset: Option<u64>, length: Option<u64>) -> TensorProto {
    let mut entries = vec![StringStringEntryProto { key: "location".into(), value: location.into() }];
    if let Some(o) = offset {
        entries.push(StringStringEntryProto { key: "offset".into(), value: o.to_string() });
    }
    if let Some(l) = length {
        entries.push(StringStringEntryProto { key: "length".into(), value: l.to_string() });
    }
    TensorProto {
        name: name.into(),
        dims: vec![3],
        data_type: ty::FLOAT,
        external_data: entries,
        data_location: 1,
        ..Default::default()
    }
}

#[test]
fn external_data_stays_inside_the_models_folder_and_its_file() {
    let root = tempfile::tempdir().unwrap();
    let d = root.path().join("model");
    std::fs::create_dir(&d).unwrap();
    let weights: Vec<u8> = [0.0f32, 1.5, -2.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(d.join("w.bin"), &weights).unwrap();
    // A file above the model's folder that must not be read.
    std::fs::write(root.path().join("x"), &weights).unwrap();

    // In range: offset 4, three floats. Imports, and the program adds [1.5, -2, 4].
    write_model(&d, "ok.onnx", &add_init(external("w", "w.bin", Some(4), Some(12))));
    import_cli(&d, "ok.onnx", "ok.bib", &[]);
    let imported = onnx::import(&d.join("ok.onnx"), &ImportOptions::default()).unwrap();
    let program = Program::verify_with(imported.program, None).unwrap();
    let got = run(&program, Backend::Cpu, &[("x", HostTensor::from_f32(vec![3], &[1.0, 1.0, 1.0]).unwrap())]);
    assert_eq!(got["y"].to_f32().unwrap(), vec![2.5, -1.0, 5.0]);

    write_model(&d, "up.onnx", &add_init(external("w", "../x", None, Some(12))));
    import_fails(
        &d,
        "up.onnx",
        &[],
        "error: initializer \"w\": external data location \"../x\" is outside the model's folder",
    );
    let abs = root.path().join("x").display().to_string();
    write_model(&d, "abs.onnx", &add_init(external("w", &abs, None, Some(12))));
    import_fails(
        &d,
        "abs.onnx",
        &[],
        &format!("error: initializer \"w\": external data location {abs:?} is outside the model's folder"),
    );

    write_model(&d, "past.onnx", &add_init(external("w", "w.bin", Some(8), Some(12))));
    import_fails(
        &d,
        "past.onnx",
        &[],
        "error: initializer \"w\": external data \"w.bin\" is 16 bytes; the tensor asks past its end",
    );
    write_model(&d, "offset.onnx", &add_init(external("w", "w.bin", Some(u64::MAX), Some(12))));
    import_fails(
        &d,
        "offset.onnx",
        &[],
        "error: initializer \"w\": external data \"w.bin\" is 16 bytes; the tensor asks past its end",
    );
    write_model(&d, "nofile.onnx", &add_init(external("w", "gone.bin", None, None)));
    import_fails(
        &d,
        "nofile.onnx",
        &[],
        "error: initializer \"w\": cannot read external data \"gone.bin\": no such file",
    );
}

#[test]
fn graphs_outside_the_importers_scope_name_the_node_operator_and_opset() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = model(
        vec![node("n0", "Conv", &["x", "w"], &["y"], vec![])],
        vec![f32_in("x", &[1, 1, 4, 4])],
        vec![out("y")],
        vec![tensor_f32("w", &[1, 1, 1, 1], &[2.0])],
    );
    write_model(d, "conv.onnx", &m);
    import_fails(
        d,
        "conv.onnx",
        &[],
        "error: node \"n0\": operator Conv (opset 17) is not supported by adeadvm's importer",
    );
    let e = onnx::import(&d.join("conv.onnx"), &ImportOptions::default()).err().unwrap();
    assert!(e.is_unsupported());
    assert_eq!(e.category(), "unsupported operator Conv");

    // Another domain is named with its operator.
    let mut m = relu_model();
    m.graph.as_mut().unwrap().node[0].domain = "com.microsoft".into();
    write_model(d, "domain.onnx", &m);
    import_fails(
        d,
        "domain.onnx",
        &[],
        "error: node \"n0\": operator com.microsoft.Relu (opset 17) is not supported by adeadvm's importer",
    );

    let m = model(
        vec![node("n0", "Relu", &["x"], &["y"], vec![])],
        vec![vi("x", ty::DOUBLE, &[Dm::N(2)])],
        vec![out("y")],
        vec![],
    );
    write_model(d, "double.onnx", &m);
    import_fails(d, "double.onnx", &[], "error: unsupported type: input \"x\" is double");

    let m = model(
        vec![node("n0", "Relu", &["x"], &["h"], vec![]), node("n1", "Add", &["h", "nope"], &["y"], vec![])],
        vec![f32_in("x", &[2])],
        vec![out("y")],
        vec![],
    );
    write_model(d, "undefined.onnx", &m);
    import_fails(
        d,
        "undefined.onnx",
        &[],
        "error: node \"n1\" (Add, opset 17): input \"nope\" is not defined before this node",
    );

    let m = model(
        vec![node("n0", "Relu", &["x"], &["h"], vec![])],
        vec![f32_in("x", &[2])],
        vec![out("y")],
        vec![],
    );
    write_model(d, "nooutput.onnx", &m);
    import_fails(d, "nooutput.onnx", &[], "error: output \"y\" is computed by no node");
}

#[test]
fn a_reshape_shape_computed_at_run_time_must_be_known_at_import() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = model(
        vec![node("r", "Reshape", &["x", "shape"], &["y"], vec![])],
        vec![f32_in("x", &[2, 3]), i64_in("shape", &[2])],
        vec![out("y")],
        vec![],
    );
    write_model(d, "reshape.onnx", &m);
    import_fails(
        d,
        "reshape.onnx",
        &[],
        "error: node \"r\" (Reshape, opset 17): unsupported: the shape computed when the model runs (it must be known at import)",
    );
    let e = onnx::import(&d.join("reshape.onnx"), &ImportOptions::default()).err().unwrap();
    assert!(e.needs_known_inputs(), "{e}");

    // The shape given at import: [3, -1] makes y f32[3, 2], and the program has one input.
    adeadvm::api::write_npy(d.join("shape.npy"), &HostTensor::from_i32(vec![2], &[3, -1]).unwrap()).unwrap();
    let o = import_cli(
        d,
        "reshape.onnx",
        "reshape.bib",
        &["--known-input", "shape=shape.npy", "--emit-asm", "r.s"],
    );
    let err = text(&o.stderr);
    assert!(err.contains("inputs: x (float)\n  outputs: y (float)"), "{err}");
    let asm = std::fs::read_to_string(d.join("r.s")).unwrap();
    assert!(asm.contains(".output y f32[3, 2]"), "{asm}");
    let program = Program::load(d.join("reshape.bib")).unwrap();
    assert_eq!(program.inputs().len(), 1);
    assert_eq!(program.outputs()[0].shape, "[3, 2]");

    // A float .npy for an integer input, and a name the graph does not have, are refused.
    adeadvm::api::write_npy(d.join("f.npy"), &HostTensor::from_f32(vec![2], &[3.0, 2.0]).unwrap()).unwrap();
    import_fails(
        d,
        "reshape.onnx",
        &["--known-input", "shape=f.npy"],
        "error: --known-input shape: the graph's input is int64, the values given are not",
    );
    import_fails(
        d,
        "reshape.onnx",
        &["--known-input", "shap=shape.npy"],
        "error: --known-input shap: the graph has no input \"shap\"",
    );
}

// ---- running imported programs ------------------------------------------------------------

fn run(program: &Program, backend: Backend, inputs: &[(&str, HostTensor)]) -> BTreeMap<String, HostTensor> {
    try_run(program, backend, inputs).unwrap_or_else(|e| panic!("{e}"))
}

fn try_run(
    program: &Program,
    backend: Backend,
    inputs: &[(&str, HostTensor)],
) -> Result<BTreeMap<String, HostTensor>, String> {
    let config = Config { backend, threads: Some(2), ..Config::default() };
    let mut s = Session::new(program, &config).map_err(|e| e.to_string())?;
    for (name, t) in inputs {
        s.set_input(name, t.clone()).map_err(|e| e.to_string())?;
    }
    s.run().map_err(|e| e.to_string())?;
    Ok(s.outputs().into_iter().map(|(n, t)| (n.to_string(), t.clone())).collect())
}

/// Whether Vulkan runs here; a missing device fails under ADEADVM_REQUIRE_VULKAN=1.
fn vulkan() -> bool {
    match adeadvm::vm::shared_device() {
        Ok(_) => true,
        Err(e) => {
            assert!(!common::vk::required(), "ADEADVM_REQUIRE_VULKAN=1 but no Vulkan device: {e}");
            common::skip::skipped("ONNX import semantics on Vulkan", &format!("no Vulkan device ({e})"));
            false
        }
    }
}

/// Imports `m` from a file, runs it on the CPU, checks output `y` against `want` (shape and
/// values, within f32 rounding), and on Vulkan checks the same bits.
fn check(m: &ModelProto, inputs: &[(&str, HostTensor)], shape: &[usize], want: &[f64]) {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(dir.path(), "m.onnx", m);
    let imported = onnx::import(&path, &ImportOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let asm = imported.asm.clone();
    let program = Program::verify_with(imported.program, None).unwrap_or_else(|e| panic!("{e}\n{asm}"));
    let cpu = run(&program, Backend::Cpu, inputs);
    let y = &cpu["y"];
    assert_eq!(y.shape, shape, "{asm}");
    let got: Vec<f64> = match y.dtype {
        adeadvm::isa::DType::I32 => y.to_i32().unwrap().iter().map(|&v| v as f64).collect(),
        _ => y.to_f32().unwrap().iter().map(|&v| v as f64).collect(),
    };
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "y[{i}] = {g}, expected {w}\n{asm}");
    }
    if vulkan() {
        let gpu = run(&program, Backend::Vulkan, inputs);
        assert!(gpu["y"] == *y, "Vulkan's bits differ from the CPU's\n{asm}");
    }
}

/// Deterministic test values in [-2, 2).
fn vals(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 4096) as f32 / 1024.0 - 2.0
        })
        .collect()
}

fn f32t(shape: &[usize], v: &[f32]) -> HostTensor {
    HostTensor::from_f32(shape.to_vec(), v).unwrap()
}

#[test]
fn gemm_with_alpha_beta_and_trans_b() {
    let (a, b, c) = (vals(6, 1), vals(12, 2), vals(4, 3));
    let m = model(
        vec![node(
            "gemm",
            "Gemm",
            &["a", "b", "c"],
            &["y"],
            vec![attr_f("alpha", 0.5), attr_f("beta", 2.0), attr_i("transB", 1)],
        )],
        vec![f32_in("a", &[2, 3])],
        vec![out("y")],
        vec![tensor_f32("b", &[4, 3], &b), tensor_f32("c", &[4], &c)],
    );
    let mut want = Vec::new();
    for i in 0..2 {
        for j in 0..4 {
            let dot: f64 = (0..3).map(|k| a[i * 3 + k] as f64 * b[j * 3 + k] as f64).sum();
            want.push(0.5 * dot + 2.0 * c[j] as f64);
        }
    }
    check(&m, &[("a", f32t(&[2, 3], &a))], &[2, 4], &want);
}

#[test]
fn matmul_with_a_1d_operand() {
    // [3] x [3, 4] -> [4], then [2, 4] x [4] -> [2]; y = the second.
    let (v, w, x) = (vals(3, 4), vals(12, 5), vals(8, 6));
    let m = model(
        vec![
            node("mv", "MatMul", &["v", "w"], &["h"], vec![]),
            node("xm", "MatMul", &["x", "h"], &["y"], vec![]),
        ],
        vec![f32_in("v", &[3]), f32_in("x", &[2, 4])],
        vec![out("y")],
        vec![tensor_f32("w", &[3, 4], &w)],
    );
    let h: Vec<f64> = (0..4).map(|j| (0..3).map(|k| v[k] as f64 * w[k * 4 + j] as f64).sum()).collect();
    let want: Vec<f64> = (0..2).map(|i| (0..4).map(|k| x[i * 4 + k] as f64 * h[k]).sum()).collect();
    check(&m, &[("v", f32t(&[3], &v)), ("x", f32t(&[2, 4], &x))], &[2], &want);
}

#[test]
fn softmax_on_a_non_last_axis() {
    let x = vals(24, 7);
    let m = model(
        vec![node("sm", "Softmax", &["x"], &["y"], vec![attr_i("axis", 1)])],
        vec![f32_in("x", &[2, 3, 4])],
        vec![out("y")],
        vec![],
    );
    let mut want = vec![0.0; 24];
    for i in 0..2 {
        for k in 0..4 {
            let at = |j: usize| i * 12 + j * 4 + k;
            let max = (0..3).map(|j| x[at(j)] as f64).fold(f64::MIN, f64::max);
            let sum: f64 = (0..3).map(|j| (x[at(j)] as f64 - max).exp()).sum();
            for j in 0..3 {
                want[at(j)] = (x[at(j)] as f64 - max).exp() / sum;
            }
        }
    }
    check(&m, &[("x", f32t(&[2, 3, 4], &x))], &[2, 3, 4], &want);
}

#[test]
fn expand_broadcasts_to_a_known_shape() {
    let x = vals(3, 8);
    let m = model(
        vec![node("ex", "Expand", &["x", "shape"], &["y"], vec![])],
        vec![f32_in("x", &[3, 1])],
        vec![out("y")],
        vec![tensor_i64("shape", &[3], &[2, 1, 4])],
    );
    let want: Vec<f64> = (0..24).map(|f| x[(f / 4) % 3] as f64).collect();
    check(&m, &[("x", f32t(&[3, 1], &x))], &[2, 3, 4], &want);
}

#[test]
fn where_broadcasts_its_three_operands() {
    let (a, b) = (vals(3, 9), vals(4, 10));
    let cond = [1, 0, 0, 1];
    let m = model(
        vec![node("w", "Where", &["c", "a", "b"], &["y"], vec![])],
        vec![vi("c", ty::BOOL, &[Dm::N(1), Dm::N(4)]), f32_in("a", &[3, 1]), f32_in("b", &[4])],
        vec![out("y")],
        vec![],
    );
    let want: Vec<f64> =
        (0..12).map(|f| if cond[f % 4] != 0 { a[f / 4] as f64 } else { b[f % 4] as f64 }).collect();
    check(
        &m,
        &[
            ("c", HostTensor::from_i32(vec![1, 4], &cond).unwrap()),
            ("a", f32t(&[3, 1], &a)),
            ("b", f32t(&[4], &b)),
        ],
        &[3, 4],
        &want,
    );
}

/// `y = Gather(data, idx, axis=1)` with data f32[2, 3] and run-time int64 indices [n].
fn gather_model(n: i64) -> ModelProto {
    model(
        vec![node("gather_cols", "Gather", &["data", "idx"], &["y"], vec![attr_i("axis", 1)])],
        vec![f32_in("data", &[2, 3]), i64_in("idx", &[n])],
        vec![out("y")],
        vec![],
    )
}

#[test]
fn gather_on_axis_1_with_negative_run_time_indices() {
    let data = vals(6, 11);
    let idx = [-1, 0, -3, 2];
    let want: Vec<f64> = (0..2)
        .flat_map(|r| idx.iter().map(move |&i| (r, i)))
        .map(|(r, i)| data[r * 3 + (i + 3) as usize % 3] as f64)
        .collect();
    check(
        &gather_model(4),
        &[("data", f32t(&[2, 3], &data)), ("idx", HostTensor::from_i32(vec![4], &idx).unwrap())],
        &[2, 4],
        &want,
    );
}

/// ONNX Slice on one axis of size `n` (the rule as the operator's specification gives it).
fn slice_indices(n: i64, start: i64, end: i64, step: i64) -> Vec<i64> {
    let clamp = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
    let fix = |v: i64| if v < 0 { v.saturating_add(n) } else { v };
    let (s, e) = if step > 0 {
        (clamp(fix(start), 0, n), clamp(fix(end), 0, n))
    } else {
        (clamp(fix(start), 0, n - 1), clamp(fix(end), -1, n - 1))
    };
    let mut out = Vec::new();
    let mut i = s;
    while (step > 0 && i < e) || (step < 0 && i > e) {
        out.push(i);
        i += step;
    }
    out
}

#[test]
fn slice_with_negative_steps() {
    // x f32[3, 5]: axis 0 reversed whole (ends INT64_MIN), axis 1 from -1 down to 0 by 2.
    let x = vals(15, 12);
    let m = model(
        vec![node("sl", "Slice", &["x", "starts", "ends", "axes", "steps"], &["y"], vec![])],
        vec![f32_in("x", &[3, 5])],
        vec![out("y")],
        vec![
            tensor_i64("starts", &[2], &[-1, -1]),
            tensor_i64("ends", &[2], &[i64::MIN, 0]),
            tensor_i64("axes", &[2], &[0, 1]),
            tensor_i64("steps", &[2], &[-1, -2]),
        ],
    );
    let rows = slice_indices(3, -1, i64::MIN, -1);
    let cols = slice_indices(5, -1, 0, -2);
    assert_eq!((rows.as_slice(), cols.as_slice()), (&[2, 1, 0][..], &[4, 2][..]));
    let xs = &x;
    let want: Vec<f64> =
        rows.iter().flat_map(|&r| cols.iter().map(move |&c| xs[(r * 5 + c) as usize] as f64)).collect();
    check(&m, &[("x", f32t(&[3, 5], &x))], &[3, 2], &want);
}

// ---- symbolic dims ------------------------------------------------------------------------

/// `y = x * w + 1` with x f32[batch, 4].
fn batch_model() -> (ModelProto, Vec<f32>) {
    let w = vals(4, 13);
    let m = model(
        vec![
            node("scale", "Mul", &["x", "w"], &["h"], vec![]),
            node("shift", "Add", &["h", "one"], &["y"], vec![]),
        ],
        vec![vi("x", ty::FLOAT, &[Dm::P("batch"), Dm::N(4)])],
        vec![out("y")],
        vec![tensor_f32("w", &[4], &w), tensor_f32("one", &[], &[1.0])],
    );
    (m, w)
}

#[test]
fn symbolic_dims_stay_symbolic_unless_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (m, w) = batch_model();
    let path = write_model(d, "batch.onnx", &m);
    let imported = onnx::import(&path, &ImportOptions::default()).unwrap();
    assert!(imported.asm.contains("\n.dim batch\n"), "{}", imported.asm);
    assert!(imported.asm.contains(".input %x f32[batch, 4]"), "{}", imported.asm);
    let program = Program::verify_with(imported.program, None).unwrap();
    assert_eq!(program.inputs()[0].shape, "[batch, 4]");
    assert_eq!(program.outputs()[0].shape, "[batch, 4]");
    for batch in [1usize, 2, 5] {
        let x = vals(batch * 4, batch as u32 + 20);
        let got = run(&program, Backend::Cpu, &[("x", f32t(&[batch, 4], &x))]);
        let y = &got["y"];
        assert_eq!(y.shape, vec![batch, 4]);
        let want: Vec<f32> =
            x.iter().enumerate().map(|(i, &v)| (v as f64 * w[i % 4] as f64 + 1.0) as f32).collect();
        assert_eq!(y.to_f32().unwrap(), want, "batch {batch}");
    }

    // --dim batch=3 fixes it: the program's shapes are numbers, and batch 2 is refused.
    let o = import_cli(d, "batch.onnx", "b3.bib", &["--dim", "batch=3", "--emit-asm", "b3.s"]);
    assert!(text(&o.stderr).starts_with("wrote b3.bib ("), "{}", text(&o.stderr));
    let asm = std::fs::read_to_string(d.join("b3.s")).unwrap();
    assert!(!asm.contains(".dim"), "{asm}");
    assert!(asm.contains(".input %x f32[3, 4]"), "{asm}");
    let program = Program::load(d.join("b3.bib")).unwrap();
    assert_eq!(program.inputs()[0].shape, "[3, 4]");
    let x = vals(12, 30);
    let got = run(&program, Backend::Cpu, &[("x", f32t(&[3, 4], &x))]);
    assert_eq!(got["y"].shape, vec![3, 4]);
    assert!(try_run(&program, Backend::Cpu, &[("x", f32t(&[2, 4], &vals(8, 31)))]).is_err());
}

// ---- origins ------------------------------------------------------------------------------

#[test]
fn origins_name_the_nodes_in_assembly_disasm_and_run_time_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (m, _) = batch_model();
    write_model(d, "batch.onnx", &m);
    import_cli(d, "batch.onnx", "a.bib", &["--emit-asm", "a.s"]);
    let asm = std::fs::read_to_string(d.join("a.s")).unwrap();
    for n in ["scale", "shift"] {
        assert!(asm.contains(&format!(".origin \"{n}\"\n")), "{asm}");
    }

    // disasm prints the origins back, and its text assembles to the same bytes.
    let o = succeeded(adeadvm(&["disasm", "a.bib"], d));
    let listing = text(&o.stdout);
    for n in ["scale", "shift"] {
        assert!(listing.contains(&format!(".origin \"{n}\"")), "{listing}");
    }
    succeeded(adeadvm(&["disasm", "a.bib", "-o", "d.s"], d));
    succeeded(adeadvm(&["asm", "d.s", "-o", "b.bib"], d));
    assert!(std::fs::read(d.join("a.bib")).unwrap() == std::fs::read(d.join("b.bib")).unwrap());

    // The emitted assembly reassembles to the same bytes too (MODEL names the model file; the
    // program records its source's name, which the importer gives as `batch.onnx.s`).
    std::fs::copy(d.join("a.s"), d.join("batch.onnx.s")).unwrap();
    succeeded(adeadvm(&["asm", "batch.onnx.s", "-D", "MODEL=batch.onnx", "-o", "c.bib"], d));
    assert!(std::fs::read(d.join("a.bib")).unwrap() == std::fs::read(d.join("c.bib")).unwrap());

    // A Gather index out of range, known only when the program runs: the error names the node.
    write_model(d, "gather.onnx", &gather_model(2));
    import_cli(d, "gather.onnx", "g.bib", &[]);
    adeadvm::api::write_npy(d.join("data.npy"), &f32t(&[2, 3], &vals(6, 40))).unwrap();
    adeadvm::api::write_npy(d.join("ok.npy"), &HostTensor::from_i32(vec![2], &[2, -3]).unwrap()).unwrap();
    adeadvm::api::write_npy(d.join("bad.npy"), &HostTensor::from_i32(vec![2], &[0, 3]).unwrap()).unwrap();
    succeeded(adeadvm(&["run", "g.bib", "--backend", "cpu", "-i", "data=data.npy", "-i", "idx=ok.npy"], d));
    let o = adeadvm(&["run", "g.bib", "--backend", "cpu", "-i", "data=data.npy", "-i", "idx=bad.npy"], d);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("from \"gather_cols\""), "{err}");
}

// ---- determinism --------------------------------------------------------------------------

#[test]
fn importing_the_same_file_twice_gives_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = model(
        vec![
            node("gemm", "Gemm", &["a", "b", "c"], &["h"], vec![attr_i("transB", 1)]),
            node("sm", "Softmax", &["h"], &["y"], vec![attr_i("axis", 0)]),
        ],
        vec![vi("a", ty::FLOAT, &[Dm::P("n"), Dm::N(3)])],
        vec![out("y")],
        vec![tensor_f32("b", &[4, 3], &vals(12, 50)), tensor_f32("c", &[4], &vals(4, 51))],
    );
    write_model(d, "m.onnx", &m);
    let a = text(&import_cli(d, "m.onnx", "a.bib", &[]).stderr);
    let b = text(&import_cli(d, "m.onnx", "b.bib", &[]).stderr);
    let bytes = std::fs::read(d.join("a.bib")).unwrap();
    assert!(bytes == std::fs::read(d.join("b.bib")).unwrap(), "the two imports differ");
    let digest = |s: &str| s.split("digest ").nth(1).map(|t| t[..16].to_string());
    assert!(digest(&a).is_some() && digest(&a) == digest(&b), "{a}\n{b}");
    let x = onnx::import(&d.join("m.onnx"), &ImportOptions::default()).unwrap();
    let y = onnx::import(&d.join("m.onnx"), &ImportOptions::default()).unwrap();
    assert_eq!(x.asm, y.asm);
    assert!(x.program.to_bytes() == bytes);
    assert!(y.program.to_bytes() == bytes);
}

// ---- shape arithmetic on hostile values ---------------------------------------------------

/// Folding at import on hostile integers: once panics (overflow) or a hang (a huge folded
/// Expand); now a clean error naming the node, or (Expand of a large integer tensor) a
/// program that computes it.
#[test]
fn hostile_integers_in_folded_shape_arithmetic_are_clean_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let one = |n: &str, op: &str, ins: &[&str], attrs: Vec<AttributeProto>, inits: Vec<TensorProto>| {
        model(vec![node(n, op, ins, &["y"], attrs)], vec![], vec![out("y")], inits)
    };
    let big = 1i64 << 40;
    let too_large = "(adeadvm tensors have dimensions below 2^31 and at most 2^40 elements)";
    let cases = [
        (
            "neg",
            one("n", "Neg", &["x"], vec![], vec![tensor_i64("x", &[1], &[i64::MIN])]),
            "error: output \"y\": unsupported: int64 value -9223372036854775808 (beyond int32)".to_string(),
        ),
        (
            "abs",
            one("n", "Abs", &["x"], vec![], vec![tensor_i64("x", &[1], &[i64::MIN])]),
            "error: output \"y\": unsupported: int64 value -9223372036854775808 (beyond int32)".to_string(),
        ),
        (
            "constant_of_shape",
            one("c", "ConstantOfShape", &["s"], vec![], vec![tensor_i64("s", &[3], &[big, big, big])]),
            format!("error: node \"c\" (ConstantOfShape, opset 17): unsupported: shape [{big}, {big}, {big}] {too_large}"),
        ),
        (
            "expand",
            one("e", "Expand", &["x", "s"], vec![], vec![tensor_i64("x", &[1], &[1]), tensor_i64("s", &[2], &[big, big])]),
            format!("error: node \"e\" (Expand, opset 17): unsupported: shape [{big}, {big}] {too_large}"),
        ),
        (
            "range",
            one(
                "r",
                "Range",
                &["a", "b", "c"],
                vec![],
                vec![tensor_i64("a", &[], &[i64::MIN]), tensor_i64("b", &[], &[i64::MAX]), tensor_i64("c", &[], &[1 << 62])],
            ),
            "error: node \"r\" (Range, opset 17): the range overflows int64".to_string(),
        ),
        (
            "split",
            model(
                vec![node("s", "Split", &["x", "sizes"], &["y", "z"], vec![])],
                vec![],
                vec![out("y")],
                vec![tensor_i64("x", &[3], &[1, 2, 3]), tensor_i64("sizes", &[2], &[-1, 4])],
            ),
            "error: node \"s\" (Split, opset 17): split size -1 is negative".to_string(),
        ),
    ];
    for (name, m, msg) in cases {
        let file = format!("{name}.onnx");
        write_model(d, &file, &m);
        import_fails(d, &file, &[], &msg);
    }

    // Expand of a small integer tensor to 2^30 elements is not folded (it would copy them into
    // the assembly); the program computes it.
    let m = one(
        "e",
        "Expand",
        &["x", "s"],
        vec![],
        vec![tensor_i64("x", &[1], &[7]), tensor_i64("s", &[1], &[1 << 30])],
    );
    let path = write_model(d, "expand_big.onnx", &m);
    let imported = onnx::import(&path, &ImportOptions::default()).unwrap();
    assert!(imported.asm.contains(".output y i32[1073741824]"), "{}", imported.asm);
}
