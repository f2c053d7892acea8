//! One batch over several executors (`adeadvm::split`, `adeadvm run --devices`): the joined
//! strict-tier outputs are the bits of a single device's run of the whole batch, for every
//! split, on the CPU and on a Vulkan device together (lavapipe in CI).

mod common;

use std::path::Path;
use std::process::Command;

use adeadvm::api::{Backend, Config, Program};
use adeadvm::split::{Place, SplitSession};
use adeadvm::HostTensor;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn split_run(
    program: &Program,
    places: &[Place],
    inputs: &[(&str, HostTensor)],
    runs: usize,
) -> Vec<HostTensor> {
    let mut s =
        SplitSession::new(program, places, &Config { threads: Some(2), ..Config::default() }).unwrap();
    (0..runs)
        .map(|_| {
            for (name, t) in inputs {
                s.set_input(name, t).unwrap();
            }
            let stats = s.run().unwrap();
            assert_eq!(stats.iter().map(|p| p.rows).sum::<usize>(), 11, "{stats:?}");
            s.output("embedding").unwrap().clone()
        })
        .collect()
}

#[test]
fn a_batch_split_over_cpu_sessions_gives_the_single_run_bits() {
    let dir = tempfile::tempdir().unwrap();
    let (program, inputs) = common::minilm_padded(dir.path(), 11, 7, 42);
    let want = common::embedding_of(&program, Backend::Cpu, &inputs);
    // 2, 3 and 11 sessions (one row each); the second run's split follows the measured speed.
    for n in [2, 3, 11] {
        for got in split_run(&program, &vec![Place::Cpu; n], &inputs, 2) {
            assert!(got == want, "{n} CPU sessions: the joined rows differ from one run's");
        }
    }
    // More devices than rows: some sit the run out.
    let few: Vec<(&str, HostTensor)> = inputs.iter().map(|(n, t)| (*n, rows(t, 0, 2))).collect();
    let mut s = SplitSession::new(&program, &[Place::Cpu; 4], &Config::default()).unwrap();
    for (name, t) in &few {
        s.set_input(name, t).unwrap();
    }
    let stats = s.run().unwrap();
    assert_eq!(stats.iter().map(|p| p.rows).collect::<Vec<_>>(), [1, 1, 0, 0]);
    assert!(*s.output("embedding").unwrap() == rows(&want, 0, 2));
}

#[test]
fn a_batch_split_over_the_cpu_and_a_vulkan_device_gives_the_single_run_bits() {
    if common::vk::exec().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (program, inputs) = common::minilm_padded(dir.path(), 11, 7, 42);
    let cpu = common::embedding_of(&program, Backend::Cpu, &inputs);
    let gpu = common::embedding_of(&program, Backend::Vulkan, &inputs);
    assert!(cpu == gpu, "one CPU run and one Vulkan run differ");
    for places in [vec![Place::Cpu, Place::Gpu(0)], vec![Place::Gpu(0), Place::Gpu(0), Place::Cpu]] {
        for got in split_run(&program, &places, &inputs, 2) {
            assert!(got == cpu, "{places:?}: the joined rows differ from one run's");
        }
    }
}

fn rows(t: &HostTensor, start: usize, n: usize) -> HostTensor {
    let row = t.bytes().len() / t.shape[0];
    let mut shape = t.shape.clone();
    shape[0] = n;
    HostTensor::from_bytes(t.dtype, shape, &t.bytes()[start * row..(start + n) * row]).unwrap()
}

fn split_err(src: &str, places: &[Place]) -> String {
    let program = Program::from_asm(src, "t.s").unwrap();
    match SplitSession::new(&program, places, &Config::default()) {
        Ok(_) => panic!("expected an error for {src}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn programs_and_device_lists_that_cannot_split_are_refused_clearly() {
    let fixed = ".input %x f32[4]\n.output y f32[4]\n    STORE y, %x\n    HALT\n";
    assert_eq!(
        split_err(fixed, &[Place::Cpu]),
        "cannot split this program's batch over devices: `x` is declared f32[4]: its first axis is not a symbolic dimension"
    );
    let mixed =
        ".dim B, T\n.input %x f32[B, 2]\n.input %m f32[T]\n.output y f32[T]\n    STORE y, %m\n    HALT\n";
    assert_eq!(
        split_err(mixed, &[Place::Cpu]),
        "cannot split this program's batch over devices: `m`'s first axis is T, but the others' is B: inputs and outputs must share it"
    );
    assert_eq!(
        Place::parse_list("gpu0,tpu").unwrap_err().to_string(),
        "devices `gpu0,tpu`: `tpu` is not `cpu` or `gpuN` (N a Vulkan device index)"
    );
    assert_eq!(Place::parse_list("gpu1, cpu,gpu0").unwrap(), [Place::Gpu(1), Place::Cpu, Place::Gpu(0)]);

    let double = ".dim B\n.input %x f32[B, 2]\n.input %z f32[B, 2]\n.output y f32[B, 2]\n    ALLOC %t: f32[B, 2]\n    ADD %t, %x, %z\n    STORE y, %t\n    FREE %t\n    HALT\n";
    let program = Program::from_asm(double, "t.s").unwrap();
    let mut s = SplitSession::new(&program, &[Place::Cpu, Place::Cpu], &Config::default()).unwrap();
    s.set_input("x", common::f32s(&[3, 2], &[1.0; 6])).unwrap();
    assert_eq!(s.run().unwrap_err().to_string(), "missing input z: the program declares it as f32[B, 2]");
    s.set_input("z", common::f32s(&[2, 2], &[1.0; 4])).unwrap();
    assert_eq!(
        s.run().unwrap_err().to_string(),
        "cannot split this program's batch over devices: input `z` has 2 rows, `x` has 3: the batch axis must agree"
    );
    let err = s.set_input("w", common::f32s(&[2, 2], &[1.0; 4])).unwrap_err().to_string();
    assert!(err.contains("no input `w`") || err.contains("unknown input"), "{err}");
    s.set_input("z", common::f32s(&[3, 2], &[2.0; 6])).unwrap();
    s.run().unwrap();
    assert_eq!(s.output("y").unwrap().to_f32().unwrap(), [3.0; 6]);
}

/// The CLI: `--devices cpu,cpu` writes the file `--backend cpu` writes, and says where the rows ran.
#[test]
fn the_cli_splits_a_run_with_devices() {
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_adeadvm");
    let run = |extra: &[&str], out: &Path| {
        Command::new(bin)
            .current_dir(ROOT)
            .args(["run", "programs/mlp.s", "--input", "x=programs/data/mlp_x.npy", "--output"])
            .arg(format!("y={}", out.display()))
            .args(extra)
            .output()
            .unwrap()
    };
    let one = run(&["--backend", "cpu"], &dir.path().join("one.npy"));
    assert!(one.status.success(), "{}", String::from_utf8_lossy(&one.stderr));
    let split = run(&["--devices", "cpu,cpu,cpu"], &dir.path().join("split.npy"));
    assert!(split.status.success(), "{}", String::from_utf8_lossy(&split.stderr));
    let stderr = String::from_utf8_lossy(&split.stderr);
    assert!(stderr.starts_with("cpu: 2 rows in "), "{stderr}");
    assert_eq!(stderr.matches("cpu: 1 rows in ").count(), 2, "{stderr}");
    assert_eq!(
        std::fs::read(dir.path().join("one.npy")).unwrap(),
        std::fs::read(dir.path().join("split.npy")).unwrap()
    );

    let bad = run(&["--devices", "cpu,npu"], &dir.path().join("bad.npy"));
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr),
        "error: devices `cpu,npu`: `npu` is not `cpu` or `gpuN` (N a Vulkan device index)\n"
    );
    assert!(!dir.path().join("bad.npy").exists());
    let clash = run(&["--devices", "cpu", "--profile"], &dir.path().join("clash.npy"));
    assert_eq!(clash.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&clash.stderr).contains("cannot be used with"));
}
