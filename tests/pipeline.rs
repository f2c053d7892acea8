//! A program cut into stages over several executors (`adeadvm::pipeline`, `adeadvm run
//! --pipeline`): in the strict tier the outputs are the bits of one run on one device, for every
//! place the program can be cut and for stages on the CPU and a Vulkan device (lavapipe in CI).

mod common;

use std::path::Path;
use std::process::Command;

use adeadvm::api::{Backend, Config, Program, Session};
use adeadvm::pipeline::{cut_program, plan_cuts, PipelineSession};
use adeadvm::split::Place;
use adeadvm::HostTensor;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn pipelined(
    program: &Program,
    places: &[Place],
    cuts: &[usize],
    inputs: &[(&str, HostTensor)],
) -> HostTensor {
    let config = Config { threads: Some(2), ..Config::default() };
    let mut s = PipelineSession::with_cuts(program, places, cuts, &config).unwrap();
    for (name, t) in inputs {
        s.set_input(name, t).unwrap();
    }
    let stats = s.run().unwrap();
    assert_eq!(stats.len(), places.len());
    s.output("embedding").unwrap().clone()
}

#[test]
fn every_cut_of_a_transformer_gives_the_single_run_bits() {
    let dir = tempfile::tempdir().unwrap();
    let (program, inputs) = common::minilm_padded(dir.path(), 3, 5, 7);
    let want = common::embedding_of(&program, Backend::Cpu, &inputs);
    let n = program.verified().instructions().len();
    let mut cut = 0;
    for k in 1..n {
        if cut_program(&program, &[k]).is_err() {
            continue;
        }
        cut += 1;
        let got = pipelined(&program, &[Place::Cpu, Place::Cpu], &[k], &inputs);
        assert!(got == want, "cut before instruction {k}: the output differs from one run's");
    }
    // Straight-line code: every boundary is a cut.
    assert_eq!(cut, n - 1);
}

#[test]
fn planned_cuts_balance_the_constants_and_fall_between_layers() {
    let dir = tempfile::tempdir().unwrap();
    let (program, inputs) = common::minilm_padded(dir.path(), 3, 5, 7);
    let want = common::embedding_of(&program, Backend::Cpu, &inputs);
    let total: u64 = cut_program(&program, &[]).unwrap()[0].const_bytes;
    for stages in [2, 3, 6] {
        let cuts = plan_cuts(&program, stages).unwrap();
        assert_eq!(cuts.len(), stages - 1);
        let parts = cut_program(&program, &cuts).unwrap();
        for stage in &parts {
            // The word embeddings sit in the first stage alone; past them the six layers
            // weigh the same, so no stage holds more than its share and the embeddings.
            assert!(stage.const_bytes < total, "{stages} stages: {:?} holds every constant", stage.range);
        }
        // The tiny model has two layers: two stages meet between them, where only the hidden
        // state and the two forms of the mask are live.
        for stage in parts[1..].iter().filter(|_| stages == 2) {
            assert_eq!(
                stage.carried_in,
                ["pipe_maskf", "pipe_mask4", "pipe_x"],
                "{stages} stages: {:?} receives {:?}",
                stage.range,
                stage.carried_in
            );
        }
        let got = pipelined(&program, &vec![Place::Cpu; stages], &cuts, &inputs);
        assert!(got == want, "{stages} planned stages: the output differs from one run's");
    }
}

#[test]
fn stages_on_the_cpu_and_a_vulkan_device_give_the_single_run_bits() {
    if common::vk::exec().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (program, inputs) = common::minilm_padded(dir.path(), 3, 5, 7);
    let cpu = common::embedding_of(&program, Backend::Cpu, &inputs);
    for places in [vec![Place::Gpu(0), Place::Cpu], vec![Place::Cpu, Place::Gpu(0), Place::Gpu(0)]] {
        let cuts = plan_cuts(&program, places.len()).unwrap();
        assert!(pipelined(&program, &places, &cuts, &inputs) == cpu, "{places:?}: differs from one CPU run");
    }
}

/// A temporary a KERNEL wrote travels to the next stage (KERNEL's writes come from its
/// dispatch table, not its operands).
#[test]
fn a_temporary_written_by_a_kernel_is_carried() {
    if common::vk::exec().is_none() {
        return;
    }
    let program = Program::load(Path::new(ROOT).join("programs/kernel.s")).unwrap();
    let x: Vec<f32> = (0..1024).map(|i| i as f32 * 0.75 - 300.0).collect();
    let want: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
    for (places, cut) in [([Place::Gpu(0), Place::Cpu], 2), ([Place::Cpu, Place::Gpu(0)], 1)] {
        let mut s = PipelineSession::with_cuts(&program, &places, &[cut], &Config::default()).unwrap();
        s.set_input("x", common::f32s(&[1024], &x)).unwrap();
        s.run().unwrap();
        assert_eq!(s.output("y").unwrap().to_f32().unwrap(), want, "{places:?}, cut {cut}");
    }
}

/// With micro-batches the stages work at once on slices of the batch; the joined outputs are
/// still one run's bits, whatever the number of slices (more slices than rows: one a row).
#[test]
fn micro_batches_flow_through_the_stages_with_the_single_run_bits() {
    let dir = tempfile::tempdir().unwrap();
    let (program, inputs) = common::minilm_padded(dir.path(), 3, 5, 7);
    let want = common::embedding_of(&program, Backend::Cpu, &inputs);
    let mut places = vec![vec![Place::Cpu, Place::Cpu, Place::Cpu]];
    if common::vk::exec().is_some() {
        places.push(vec![Place::Gpu(0), Place::Cpu]);
        places.push(vec![Place::Cpu, Place::Gpu(0)]);
    }
    for places in places {
        let cuts = plan_cuts(&program, places.len()).unwrap();
        let mut s = PipelineSession::with_cuts(&program, &places, &cuts, &Config::default()).unwrap();
        for n in [2, 3, 5, 1] {
            s.set_micro_batches(n).unwrap();
            for (name, t) in &inputs {
                s.set_input(name, t).unwrap();
            }
            let stats = s.run().unwrap();
            assert_eq!(stats.len(), places.len());
            assert!(
                *s.output("embedding").unwrap() == want,
                "{places:?}, {n} micro-batches: differs from one run"
            );
        }
    }
    // A stage that fails stops the others, and its error is the one reported.
    let mut s = PipelineSession::new(&program, &[Place::Cpu, Place::Cpu], &Config::default()).unwrap();
    s.set_micro_batches(3).unwrap();
    let bad_ids = common::i32s(&[3, 5], &[99; 15]);
    s.set_input("input_ids", &bad_ids).unwrap();
    s.set_input("attention_mask", &inputs[1].1).unwrap();
    let err = s.run().unwrap_err().to_string();
    assert!(err.starts_with("on cpu: ") && err.contains("99"), "{err}");
    // Micro-batches need a batch axis.
    let fixed =
        Program::from_asm(".input %x f32[4]\n.output y f32[4]\n    STORE y, %x\n    NOP\n    HALT\n", "t.s")
            .unwrap();
    let mut s = PipelineSession::with_cuts(&fixed, &[Place::Cpu; 2], &[1], &Config::default()).unwrap();
    assert_eq!(
        s.set_micro_batches(2).unwrap_err().to_string(),
        "cannot split this program's batch over devices: `x` is declared f32[4]: its first axis is not a symbolic dimension"
    );
    assert_eq!(
        s.set_micro_batches(0).unwrap_err().to_string(),
        "cannot cut this program into stages: micro-batches must be at least 1"
    );
}

fn cut_err(src: &str, cuts: &[usize]) -> String {
    let program = Program::from_asm(src, "t.s").unwrap();
    match cut_program(&program, cuts) {
        Ok(_) => panic!("expected an error for cuts {cuts:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn cuts_that_would_change_the_program_are_refused_clearly() {
    let looped = ".input %x f32[2]\n.output y f32[2]\n    ALLOC %t: f32[2]\n    COPY %t, %x\n    ISET r0, 3\nloop:\n    ADD %t, %t, %t\n    IADDI r0, r0, -1\n    JNZ r0, loop\n    STORE y, %t\n    FREE %t\n    HALT\n";
    assert_eq!(
        cut_err(looped, &[4]),
        "cannot cut this program into stages: cannot cut before instruction 4: the jump at instruction 5 to 3 crosses it"
    );
    assert_eq!(
        cut_err(looped, &[3]),
        "cannot cut this program into stages: cannot cut before instruction 3: register r0 is used on both sides (instructions 2 and 5)"
    );
    assert_eq!(cut_err(looped, &[0]), "cannot cut this program into stages: cannot cut before instruction 0: a stage must run at least one instruction");
    assert_eq!(cut_err(looped, &[9]), "cannot cut this program into stages: cannot cut before instruction 9: the program has 9 instructions");
    assert_eq!(cut_err(looped, &[2, 2]), "cannot cut this program into stages: cuts must increase: 2 then 2");
    let stored_twice =
        ".input %x f32[2]\n.output y f32[2]\n    STORE y, %x\n    NOP\n    STORE y, %x\n    HALT\n";
    assert_eq!(
        cut_err(stored_twice, &[2]),
        "cannot cut this program into stages: cannot cut before instruction 2: output `y` is stored on both sides (instructions 0 and 2)"
    );
    // The loop can still be cut before it starts or after it ends, with the same result.
    let program = Program::from_asm(looped, "t.s").unwrap();
    let x = common::f32s(&[2], &[1.0, -2.5]);
    for cut in [2, 6, 7] {
        let mut s =
            PipelineSession::with_cuts(&program, &[Place::Cpu, Place::Cpu], &[cut], &Config::default())
                .unwrap();
        s.set_input("x", &x).unwrap();
        s.run().unwrap();
        assert_eq!(s.output("y").unwrap().to_f32().unwrap(), [8.0, -20.0], "cut {cut}");
    }
    let err = PipelineSession::with_cuts(&program, &[Place::Cpu; 3], &[2], &Config::default()).err().unwrap();
    assert_eq!(err.to_string(), "cannot cut this program into stages: 3 devices need 2 cuts, 1 were given");
    let mut s = PipelineSession::with_cuts(&program, &[Place::Cpu; 2], &[2], &Config::default()).unwrap();
    assert_eq!(s.run().unwrap_err().to_string(), "missing input x: the program declares it as f32[2]");
}

/// Outputs stored before a cut come from the stage that stored them.
#[test]
fn outputs_come_from_the_stage_that_stores_them() {
    let src = ".dim N\n.input %x f32[N]\n.output early f32[N]\n.output late f32[N]\n    ALLOC %a: f32[N]\n    EXP %a, %x\n    STORE early, %a\n    ALLOC %b: f32[N]\n    MUL %b, %a, %x\n    FREE %a\n    STORE late, %b\n    FREE %b\n    HALT\n";
    let program = Program::from_asm(src, "t.s").unwrap();
    let x = common::f32s(&[3], &[0.5, -1.0, 2.0]);
    let whole = {
        let mut s = Session::new(&program, &Config::default()).unwrap();
        s.set_input("x", &x).unwrap();
        s.run().unwrap();
        [s.output("early").unwrap().clone(), s.output("late").unwrap().clone()]
    };
    for cut in 1..8 {
        let mut s =
            PipelineSession::with_cuts(&program, &[Place::Cpu; 2], &[cut], &Config::default()).unwrap();
        s.set_input("x", &x).unwrap();
        s.run().unwrap();
        assert!(
            *s.output("early").unwrap() == whole[0] && *s.output("late").unwrap() == whole[1],
            "cut {cut}"
        );
        let names: Vec<&str> = s.outputs().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["early", "late"]);
    }
}

/// The CLI: `--pipeline cpu,cpu` writes the file `--backend cpu` writes and says what each stage ran.
#[test]
fn the_cli_runs_a_pipeline() {
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
    let two = run(&["--pipeline", "cpu,cpu"], &dir.path().join("two.npy"));
    assert!(two.status.success(), "{}", String::from_utf8_lossy(&two.stderr));
    let stderr = String::from_utf8_lossy(&two.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].starts_with("stage 1: cpu ran instructions 0..5 (392.50 KiB of constants) in "),
        "{stderr}"
    );
    assert!(lines[0].ends_with(" ms, handing on 2.00 KiB (pipe_h)"), "{stderr}");
    assert!(
        lines[1].starts_with("stage 2: cpu ran instructions 5..14 (5.04 KiB of constants) in "),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("one.npy")).unwrap(),
        std::fs::read(dir.path().join("two.npy")).unwrap()
    );
    let cut = run(&["--pipeline", "cpu,cpu,cpu", "--cuts", "3,9"], &dir.path().join("cut.npy"));
    assert!(cut.status.success(), "{}", String::from_utf8_lossy(&cut.stderr));
    assert_eq!(
        std::fs::read(dir.path().join("one.npy")).unwrap(),
        std::fs::read(dir.path().join("cut.npy")).unwrap()
    );

    let bad = run(&["--pipeline", "cpu,cpu", "--cuts", "0"], &dir.path().join("bad.npy"));
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr),
        "error: cannot cut this program into stages: cannot cut before instruction 0: a stage must run at least one instruction\n"
    );
    assert!(!dir.path().join("bad.npy").exists());
    let clash = run(&["--pipeline", "cpu", "--devices", "cpu"], &dir.path().join("clash.npy"));
    assert_eq!(clash.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&clash.stderr).contains("cannot be used with"));
}
