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

/// A session packs its constant weights once for the CPU's blocked products (`tb` and not,
/// more rows than the matrix-vector kernel takes) and keeps them: run after run, at a batch
/// small enough for the matrix-vector kernel, and with a memory budget that leaves no room
/// for the packed copies (so every product packs as it goes), the outputs have the same bits,
/// and in the strict tier those of the reference chains computed here.
#[test]
fn packed_constant_weights_keep_the_bits() {
    use adeadvm::exec::cpu::reference::{matmul, MatmulShape};
    use adeadvm::isa::Act;
    let dir = tempfile::tempdir().unwrap();
    let values = |len: usize, seed: u32| -> Vec<f32> {
        (0..len as u32).map(|i| ((i.wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0).collect()
    };
    let (w1, w2) = (values(48 * 64, 1), values(64 * 48, 2));
    for (name, shape, v) in [("w1", [48, 64], &w1), ("w2", [48, 64], &w2)] {
        let t = HostTensor::from_f32(shape.to_vec(), v).unwrap();
        adeadvm::api::write_npy(dir.path().join(format!("{name}.npy")), &t).unwrap();
    }
    let d = dir.path().display();
    let source = format!(
        ".tier strict\n.dim B\n.input %x f32[B, 64]\n.output y f32[B, 48]\n\
         .const %w1 f32[48, 64] = npy(\"{d}/w1.npy\")\n.const %w2 f32[48, 64] = npy(\"{d}/w2.npy\")\n\
         ALLOC %h: f32[B, 48]\nMATMUL %h, %x, %w1, tb\nALLOC %g: f32[B, 64]\nMATMUL %g, %h, %w2\n\
         ALLOC %y: f32[B, 48]\nMATMUL %y, %g, %w1, tb\nFREE %g\nFREE %h\nSTORE y, %y\nFREE %y\nHALT\n"
    );
    let program = Program::from_asm(&source, "packed.s").unwrap();
    for tier in [Tier::Strict, Tier::Fast] {
        let program = program.with_tier(tier).unwrap();
        for rows in [40, 3] {
            let x = values(rows * 64, 3);
            let xt = HostTensor::from_f32(vec![rows, 64], &x).unwrap();
            let run = |config: &Config| {
                let mut s = Session::new(&program, config).unwrap();
                s.set_input("x", &xt).unwrap();
                s.run().unwrap();
                let first = s.output("y").unwrap().clone();
                s.run().unwrap();
                assert_eq!(s.output("y").unwrap(), &first, "{tier:?}, {rows} rows: a second run differs");
                first
            };
            let packed = run(&Config { threads: Some(2), ..Config::default() });
            // The budget the run needs and not a byte more: no room to pack.
            let e = Session::new(&program, &Config { max_memory: Some(1), ..Config::default() })
                .and_then(|mut s| {
                    s.set_input("x", &xt)?;
                    s.run()
                })
                .unwrap_err()
                .to_string();
            let needed: u64 =
                e.split("needs ").nth(1).and_then(|r| r.split(' ').next()).unwrap().parse().unwrap();
            let unpacked = run(&Config { threads: Some(2), max_memory: Some(needed), ..Config::default() });
            assert_eq!(packed, unpacked, "{tier:?}, {rows} rows: packed weights change the bits");
            if tier == Tier::Strict {
                let mm = |a: &[f32], m: usize, k: usize, w: &[f32], n: usize, tb: bool| {
                    let g = MatmulShape {
                        a: vec![m, k],
                        b: if tb { vec![n, k] } else { vec![k, n] },
                        out: vec![m, n],
                        ta: false,
                        tb,
                    };
                    let mut out = vec![0.0; m * n];
                    matmul(&g, a, w, None, Act::None, &mut out);
                    out
                };
                let h = mm(&x, rows, 64, &w1, 48, true);
                let g = mm(&h, rows, 48, &w2, 64, false);
                let want = mm(&g, rows, 64, &w1, 48, true);
                assert_eq!(packed.to_f32().unwrap(), want, "{rows} rows: not the reference's bits");
            }
        }
    }
}
