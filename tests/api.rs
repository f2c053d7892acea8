//! The embedding API (adeadvm::api): loading every way, config, errors, threads.

use std::sync::Arc;

use adeadvm::api::{Backend, Config, Program, Session, TensorView};
use adeadvm::isa::{DType, Tier};
use adeadvm::{Error, HostTensor};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn mlp() -> Program {
    Program::load(format!("{ROOT}/programs/mlp.s")).unwrap()
}

fn mlp_x() -> HostTensor {
    adeadvm::api::read_npy(format!("{ROOT}/programs/data/mlp_x.npy"), Some(DType::F32)).unwrap()
}

#[test]
fn s_and_bib_and_bytes_load_the_same_program() {
    let from_s = mlp();
    let source = std::fs::read_to_string(format!("{ROOT}/programs/mlp.s")).unwrap();
    // The debug info names the source file, so the same name gives the same digest.
    let from_text = Program::from_asm(&source, &format!("{ROOT}/programs/mlp.s")).unwrap();
    assert_eq!(from_s.digest(), from_text.digest());
    let bytes = from_s.verified().program().to_bytes();
    let dir = tempfile::tempdir().unwrap();
    let bib = dir.path().join("mlp.bib");
    std::fs::write(&bib, &bytes).unwrap();
    let from_bib = Program::load(&bib).unwrap();
    let from_bytes = Program::from_bytes(bytes).unwrap();
    assert_eq!(from_bib.digest(), from_s.digest());
    assert_eq!(from_bytes.digest_hex(), from_s.digest_hex());
    assert_eq!(from_s.inputs()[0].name, "x");
    assert_eq!(from_s.inputs()[0].shape, "[B, 784]");
    assert_eq!(from_s.outputs()[0].name, "y");
}

#[test]
fn run_and_views_and_reruns() {
    let program = mlp();
    let x = mlp_x();
    let mut s = Session::new(&program, &Config { threads: Some(1), ..Config::default() }).unwrap();
    s.set_input("x", &x).unwrap();
    s.run().unwrap();
    let y = s.output("y").unwrap().clone();
    assert_eq!(y.dtype, DType::F32);
    assert_eq!(y.shape, vec![x.shape[0], 10]);
    s.set_input("x", TensorView { dtype: DType::F32, shape: &x.shape, bytes: x.bytes() }).unwrap();
    s.run().unwrap();
    assert_eq!(s.output("y").unwrap(), &y);
    assert_eq!(s.digest(), program.digest());
    assert_eq!(s.outputs().len(), 1);
}

#[test]
fn errors_keep_the_stage_messages() {
    let program = mlp();
    let mut s = Session::new(&program, &Config::default()).unwrap();
    let e = s.set_input("x", HostTensor::from_i32(vec![1, 784], &[0; 784]).unwrap()).unwrap_err();
    assert!(matches!(e, Error::Vm(_)));
    assert_eq!(e.to_string(), "input x is declared f32 but was given i32 data");
    let e = s.set_input("nope", mlp_x()).unwrap_err();
    assert_eq!(e.to_string(), "unknown input nope (the program's inputs: x)");
    let e = s.output("y").unwrap_err();
    assert_eq!(e.to_string(), "output `y` was not written (run the session first)");
    let e = s.output("z").unwrap_err();
    assert_eq!(e.to_string(), "the program has no output `z` (its outputs are: y)");
    let e =
        s.set_input("x", TensorView { dtype: DType::F32, shape: &[2, 784], bytes: &[0; 12] }).unwrap_err();
    assert_eq!(e.to_string(), "tensor `x`: shape [2, 784] of f32 needs 6272 bytes, but 12 were given");
    assert!(matches!(s.run().unwrap_err(), Error::Vm(_)));
    let e = Program::from_bytes(b"nonsense".to_vec()).unwrap_err();
    assert!(matches!(e, Error::Format(_)));
    assert!(e.to_string().starts_with("not an adeadvm program"), "{e}");
    let e = Program::from_asm(".input %x f32[2]\n    FROB %x\n", "bad.s").unwrap_err();
    assert!(matches!(e, Error::Asm(_)));
    assert!(e.to_string().contains("bad.s:2"), "{e}");
    let e = Program::load("/nonexistent/p.s").unwrap_err();
    assert!(e.to_string().starts_with("cannot read /nonexistent/p.s: "), "{e}");
    assert_eq!(
        Backend::from_name("warp").unwrap_err().to_string(),
        "unknown backend `warp` (expected cpu, vulkan or auto)"
    );
    assert_eq!(adeadvm::api::parse_tier("loose").unwrap_err().to_string(), "unknown tier `loose`");
}

#[test]
fn budgets_and_tier_override() {
    let program = mlp();
    let mut s = Session::new(&program, &Config { max_steps: Some(2), ..Config::default() }).unwrap();
    s.set_input("x", mlp_x()).unwrap();
    let e = s.run().unwrap_err();
    assert!(e.to_string().contains("step budget of 2"), "{e}");
    let fast = Session::new(&program, &Config { tier: Some(Tier::Fast), ..Config::default() }).unwrap();
    assert_eq!(fast.program().tier(), Tier::Fast);
    assert_eq!(program.tier(), Tier::Strict);
}

/// One program shared by four sessions on four threads: identical outputs, bit for bit.
#[test]
fn sessions_on_threads_share_one_program() {
    let program = Arc::new(mlp());
    let x = mlp_x();
    let outputs: Vec<HostTensor> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let program = Arc::clone(&program);
                let x = &x;
                scope.spawn(move || {
                    let config = Config { threads: Some(1 + i % 2), ..Config::default() };
                    let mut s = Session::new(&program, &config).unwrap();
                    s.set_input("x", x).unwrap();
                    for _ in 0..3 {
                        s.run().unwrap();
                    }
                    s.output("y").unwrap().clone()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for o in &outputs[1..] {
        assert_eq!(o, &outputs[0]);
    }
}
