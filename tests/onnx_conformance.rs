//! ONNX's backend node tests (scripts/fetch-onnx-node-tests.sh), imported and run.
//!
//! Every test folder holds `model.onnx` and `test_data_set_*/{input,output}_*.pb`, written by
//! ONNX's own reference implementation. Each model is imported; one whose operators, types or
//! attributes are outside the importer's scope must fail to import with an "unsupported" error
//! (never a panic, never an assembly or verifier error). Every other test is in scope: it must
//! verify, run on the CPU (the scalar reference) and on Vulkan (lavapipe in CI) with the same
//! strict-tier bits, and match ONNX's expected outputs at the suite's tolerance (rtol 1e-3, atol
//! 1e-7, as onnx.backend.test's runner compares). NaNs must be where ONNX has them.
//!
//! tests/golden/onnx_conformance.txt lists the tests in scope; a test that leaves the list (it
//! became unsupported) or joins it must be a deliberate change (`ADEADVM_BLESS=1` rewrites it).
//! The per-operator table is printed and written to target/onnx-conformance.md.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use adeadvm::api::{Backend, Config, Program, Session};
use adeadvm::isa::DType;
use adeadvm::onnx::{self, proto::data_type, ImportOptions, TensorData, Values};
use adeadvm::HostTensor;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-7;

fn ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// The suite's folder, fetched when missing; None (after saying why) to skip.
fn suite_dir() -> Option<PathBuf> {
    let script = Path::new(ROOT).join("scripts/fetch-onnx-node-tests.sh");
    let out = Command::new("bash").arg(&script).output();
    let why = match out {
        Ok(out) if out.status.success() => {
            let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
            if dir.is_dir() {
                return Some(dir);
            }
            format!("the script printed {} but it is not a folder", dir.display())
        }
        Ok(out) => format!("{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr).trim()),
        Err(e) => format!("cannot run bash {}: {e}", script.display()),
    };
    let required = ci() || common::vk::required();
    assert!(!required, "onnx conformance: the suite could not be fetched: {why}");
    common::skip::skipped("ONNX's node conformance tests", &format!("no suite: {why}"));
    None
}

/// How one test ended.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Pass,
    Unsupported(String),
    Fail(String),
}

fn host_tensor(d: &TensorData) -> Result<HostTensor, String> {
    let dtype = d.dtype().ok_or_else(|| format!("input type {}", data_type::name(d.elem)))?;
    let bytes = d.to_bytes(dtype)?;
    let shape = d.dims.iter().map(|&x| x as usize).collect();
    HostTensor::from_bytes(dtype, shape, &bytes).ok_or_else(|| "bad input size".to_string())
}

/// The values of an output as f64 (i32 outputs stand for int64 and bool).
fn values_of(t: &HostTensor) -> Vec<f64> {
    let b = t.bytes();
    match t.dtype {
        DType::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
        DType::I32 => b.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
        DType::F16 => {
            b.chunks_exact(2).map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f64()).collect()
        }
        DType::Bf16 => {
            b.chunks_exact(2).map(|c| half::bf16::from_le_bytes(c.try_into().unwrap()).to_f64()).collect()
        }
    }
}

fn compare(name: &str, got: &HostTensor, want: &TensorData) -> Result<(), String> {
    let shape: Vec<u64> = got.shape.iter().map(|&d| d as u64).collect();
    if shape != want.dims {
        return Err(format!("output {name}: shape {:?}, expected {:?}", shape, want.dims));
    }
    let g = values_of(got);
    let w: Vec<f64> = match &want.values {
        Values::Float(v) => v.clone(),
        Values::Int(v) => v.iter().map(|&x| x as f64).collect(),
    };
    for (i, (&a, &e)) in g.iter().zip(&w).enumerate() {
        let ok = if e.is_nan() {
            a.is_nan()
        } else if e.is_infinite() {
            a == e
        } else {
            (a - e).abs() <= ATOL + RTOL * e.abs()
        };
        if !ok {
            return Err(format!("output {name}[{i}] = {a:e}, expected {e:e} (of {} values)", w.len()));
        }
    }
    Ok(())
}

fn run_once(
    program: &Program,
    backend: Backend,
    inputs: &[(String, HostTensor)],
) -> Result<BTreeMap<String, HostTensor>, String> {
    let config = Config { backend, threads: Some(2), ..Config::default() };
    let mut s = Session::new(program, &config).map_err(|e| e.to_string())?;
    for (name, t) in inputs {
        s.set_input(name, t.clone()).map_err(|e| e.to_string())?;
    }
    s.run().map_err(|e| e.to_string())?;
    Ok(s.outputs().into_iter().map(|(n, t)| (n.to_string(), t.clone())).collect())
}

/// The test's inputs by graph input name (input_k.pb is the k-th graph input that is not an
/// initializer).
fn test_inputs(model: &onnx::Model, set: &Path) -> Result<Vec<(String, TensorData)>, String> {
    let g = model.graph();
    let names =
        g.input.iter().filter(|i| !g.initializer.iter().any(|t| t.name == i.name)).map(|i| i.name.clone());
    let mut out = Vec::new();
    for (k, name) in names.enumerate() {
        let path = set.join(format!("input_{k}.pb"));
        let (_, data) = onnx::read_tensor_pb(&path).map_err(|e| e.to_string())?;
        out.push((name, data));
    }
    Ok(out)
}

fn run_test(dir: &Path, vulkan: bool) -> Outcome {
    let path = dir.join("model.onnx");
    let model = match onnx::Model::load(&path) {
        Ok(m) => m,
        Err(e) => return Outcome::Fail(format!("load: {e}")),
    };
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| r.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    sets.sort();
    let mut options = ImportOptions::default();
    let imported = match onnx::import_model(&model, &path, &options) {
        Ok(i) => i,
        // Shape inputs (a Reshape's shape, a Slice's starts) fed as graph inputs: the test's
        // integer inputs are fixed at import, as `--known-input` does.
        Err(e) if e.needs_known_inputs() && sets.len() == 1 => {
            let Ok(inputs) = test_inputs(&model, &sets[0]) else { return Outcome::Fail("inputs".into()) };
            options.known_inputs =
                inputs.into_iter().filter(|(_, d)| !matches!(d.values, Values::Float(_))).collect();
            match onnx::import_model(&model, &path, &options) {
                Ok(i) => i,
                Err(e) if e.is_unsupported() => return Outcome::Unsupported(e.category()),
                Err(e) => return Outcome::Fail(format!("import: {e}")),
            }
        }
        Err(e) if e.is_unsupported() => return Outcome::Unsupported(e.category()),
        Err(e) => return Outcome::Fail(format!("import: {e}")),
    };
    let program = match Program::verify_with(imported.program, None) {
        Ok(p) => p,
        Err(e) => return Outcome::Fail(format!("verify: {e}")),
    };
    for set in sets {
        let all = match test_inputs(&model, &set) {
            Ok(a) => a,
            Err(e) => return Outcome::Fail(e),
        };
        let mut inputs = Vec::new();
        for b in &imported.inputs {
            let Some((_, data)) = all.iter().find(|(n, _)| *n == b.onnx_name) else {
                return Outcome::Fail(format!("no test data for input {}", b.onnx_name));
            };
            match host_tensor(data) {
                Ok(t) => inputs.push((b.name.clone(), t)),
                Err(e) => return Outcome::Unsupported(format!("unsupported test data: {e}")),
            }
        }
        let cpu = match run_once(&program, Backend::Cpu, &inputs) {
            Ok(o) => o,
            Err(e) if e.contains("does not fit in int32") => {
                return Outcome::Unsupported("unsupported: int64 values beyond int32".into())
            }
            Err(e) => return Outcome::Fail(format!("cpu: {e}")),
        };
        for (i, b) in imported.outputs.iter().enumerate() {
            let path = set.join(format!("output_{i}.pb"));
            let want = match onnx::read_tensor_pb(&path) {
                Ok((_, d)) => d,
                Err(e) => return Outcome::Fail(format!("{}: {e}", path.display())),
            };
            if let Err(e) = compare(&b.onnx_name, &cpu[&b.name], &want) {
                return Outcome::Fail(e);
            }
        }
        if vulkan {
            let gpu = match run_once(&program, Backend::Vulkan, &inputs) {
                Ok(o) => o,
                Err(e) => return Outcome::Fail(format!("vulkan: {e}")),
            };
            for (name, t) in &cpu {
                if gpu[name] != *t {
                    return Outcome::Fail(format!("output {name}: Vulkan's bits differ from the CPU's"));
                }
            }
        }
    }
    Outcome::Pass
}

/// The operator a test is about: its nodes' one op type, or "(several operators)".
fn operator_of(dir: &Path) -> String {
    let Ok(m) = onnx::Model::load(&dir.join("model.onnx")) else { return "(unreadable)".into() };
    let mut ops: Vec<&str> = m.graph().node.iter().map(|n| n.op_type.as_str()).collect();
    ops.sort_unstable();
    ops.dedup();
    match ops.as_slice() {
        [one] => one.to_string(),
        _ => "(several operators)".into(),
    }
}

#[test]
fn onnx_node_tests_pass_in_scope_on_cpu_and_vulkan() {
    let Some(suite) = suite_dir() else { return };
    let vulkan = match adeadvm::vm::shared_device() {
        Ok(_) => true,
        Err(e) => {
            assert!(!common::vk::required(), "ADEADVM_REQUIRE_VULKAN=1 but no Vulkan device: {e}");
            common::skip::skipped("ONNX conformance on Vulkan", &format!("no Vulkan device ({e})"));
            false
        }
    };
    let only = std::env::var("ADEADVM_ONNX_TEST").ok();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&suite)
        .expect("the suite folder")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("model.onnx").is_file())
        .filter(|p| {
            only.as_ref()
                .is_none_or(|o| p.file_name().is_some_and(|n| n.to_string_lossy().contains(o.as_str())))
        })
        .collect();
    dirs.sort();
    // operator -> (passed, failed, unsupported)
    let mut table: BTreeMap<String, (u32, u32, u32)> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut in_scope = Vec::new();
    let mut reasons: BTreeMap<String, u32> = BTreeMap::new();
    for dir in &dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let outcome = std::panic::catch_unwind(|| run_test(dir, vulkan))
            .unwrap_or_else(|_| Outcome::Fail("panicked".into()));
        let row = table.entry(operator_of(dir)).or_default();
        match outcome {
            Outcome::Pass => {
                row.0 += 1;
                in_scope.push(name);
            }
            Outcome::Fail(why) => {
                row.1 += 1;
                in_scope.push(name.clone());
                let why: Vec<&str> = why.lines().filter(|l| !l.trim().is_empty()).take(3).collect();
                failures.push(format!("{name}: {}", why.join(" | ")));
            }
            Outcome::Unsupported(why) => {
                row.2 += 1;
                *reasons.entry(why).or_default() += 1;
            }
        }
    }
    let (p, f, u) = table.values().fold((0, 0, 0), |a, r| (a.0 + r.0, a.1 + r.1, a.2 + r.2));
    let mut md = String::new();
    md.push_str(&format!(
        "ONNX {} node tests: {} in scope ({p} passed, {f} failed), {u} unsupported; CPU{}\n\n",
        suite.file_name().unwrap().to_string_lossy().trim_start_matches("onnx-node-tests-"),
        p + f,
        if vulkan { " and Vulkan, the same bits" } else { " only (no Vulkan device)" }
    ));
    md.push_str("| operator | passed | failed | unsupported |\n| --- | --- | --- | --- |\n");
    for (op, (p, f, u)) in &table {
        if p + f > 0 {
            md.push_str(&format!("| {op} | {p} | {f} | {u} |\n"));
        }
    }
    let unsupported_ops: Vec<String> =
        table.iter().filter(|(_, r)| r.0 + r.1 == 0).map(|(op, r)| format!("{op} ({})", r.2)).collect();
    md.push_str(&format!("\nOperators with no test in scope (tests): {}\n", unsupported_ops.join(", ")));
    md.push_str("\nWhy tests are out of scope:\n\n");
    for (why, n) in &reasons {
        md.push_str(&format!("- {why}: {n}\n"));
    }
    eprintln!("{md}");
    let _ = std::fs::create_dir_all(Path::new(ROOT).join("target"));
    let _ = std::fs::write(Path::new(ROOT).join("target/onnx-conformance.md"), &md);
    assert!(
        failures.is_empty(),
        "{} in-scope ONNX node tests failed:\n{}",
        failures.len(),
        failures.join("\n")
    );

    if only.is_none() {
        let golden = Path::new(ROOT).join("tests/golden/onnx_conformance.txt");
        let text = in_scope.join("\n") + "\n";
        if std::env::var("ADEADVM_BLESS").is_ok_and(|v| v == "1") {
            std::fs::write(&golden, &text).expect("write the golden list");
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_default();
        if want != text {
            let want: std::collections::BTreeSet<&str> = want.lines().collect();
            let got: std::collections::BTreeSet<&str> = text.lines().collect();
            let left: Vec<_> = want.difference(&got).collect();
            let joined: Vec<_> = got.difference(&want).collect();
            panic!(
                "the tests in scope changed (ADEADVM_BLESS=1 rewrites {}): no longer in scope {left:?}; newly in scope {joined:?}",
                golden.display()
            );
        }
    }
}
