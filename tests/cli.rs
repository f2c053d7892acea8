//! The command line as a user meets it: exit statuses, messages, files written.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn adeadvm(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_adeadvm")).args(args).current_dir(dir).output().expect("runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `out`, after asserting that the command succeeded (else its stderr is the message).
fn succeeded(out: Output) -> Output {
    assert!(out.status.success(), "{}", text(&out.stderr));
    out
}

/// Asserts that the command exited with `code` and said `msg` on stderr.
fn failed_with(out: Output, code: i32, msg: &str) {
    assert_eq!(out.status.code(), Some(code), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(msg), "{msg}: {}", text(&out.stderr));
}

fn programs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs")
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn asm_disasm_asm_gives_the_same_bytes_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    for prog in ["mlp.s", "attention.s", "ffn.s", "loop.s", "kernel.s"] {
        let src = programs().join(prog);
        let out = adeadvm(&["asm", path(&src), "-o", "a.bib"], dir.path());
        assert!(out.status.success(), "{prog}: {}", text(&out.stderr));
        assert!(text(&out.stderr).starts_with("wrote a.bib ("), "{}", text(&out.stderr));
        let out = adeadvm(&["disasm", "a.bib", "-o", "a.s"], dir.path());
        assert!(out.status.success(), "{prog}: {}", text(&out.stderr));
        let out = adeadvm(&["asm", "a.s", "-o", "b.bib"], dir.path());
        assert!(out.status.success(), "{prog}: {}", text(&out.stderr));
        let (a, b) = (
            std::fs::read(dir.path().join("a.bib")).unwrap(),
            std::fs::read(dir.path().join("b.bib")).unwrap(),
        );
        assert!(a == b, "{prog}: reassembled bytes differ");
    }
}

#[test]
fn asm_errors_are_reported_all_at_once_with_status_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.s"),
        ".input %x f32[4]\n.output y f32[4]\n    ALLOC %t: f32[4]\n    MATMLU %t, %x, %x\n    RELU %t, %nope\n",
    )
    .unwrap();
    let out = adeadvm(&["asm", "bad.s"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("error: unknown mnemonic `MATMLU`\n --> bad.s:4:5\n"), "{err}");
    assert!(err.contains("MATMLU %t, %x, %x\n  |     ^^^^^^"), "{err}");
    assert!(err.contains("bad.s:5:"), "the second error is reported too: {err}");
    assert!(err.trim_end().ends_with("due to 2 previous errors"), "{err}");
    assert!(!dir.path().join("bad.bib").exists(), "no output file on failure");
}

/// The constants of one program may take at most 2^42 bytes (`adeadvm::asm::MAX_DATA_BYTES`,
/// src/asm/consts.rs says why: what one loaded .bib can hold). The check runs on declared sizes before
/// any value is built or file read, so these programs are refused at once without the memory
/// (and without `w.npy` existing), and the output file is left as it was.
#[test]
fn asm_refuses_constants_past_the_data_section_limit_before_building_them() {
    assert_eq!(adeadvm::asm::MAX_DATA_BYTES, 1 << 42, "the messages below spell the limit out");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.bib"), "old").unwrap();
    std::fs::write(
        dir.path().join("big.s"),
        ".input %x f32[4]\n\
         .const %a f32[2] = [1.0, 2.0]\n\
         .const %w f32[1048576, 1048576] = npy(\"w.npy\")\n\
         .const %v bf16[2147483647, 2147483647] = safetensors(\"m.safetensors\", \"v\")\n\
         .const %z f32[2147483647, 2147483647] = zeros\n\
         .output y f32[4]\n    STORE y, %x\n",
    )
    .unwrap();
    let out = adeadvm(&["asm", "big.s"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    // %w alone would fit (2^42 bytes exactly), but not after %a's 64 bytes; %v does not fit
    // even alone; the splat %z stores no bytes, so it takes none of the data section.
    assert_eq!(
        text(&out.stderr),
        "error: constant `%w` does not fit in the program's data section (4398046511104 bytes)
 --> big.s:3:35
  |
3 | .const %w f32[1048576, 1048576] = npy(\"w.npy\")
  |                                   ^^^^^^^^^^^^ 4398046511104 bytes after the 64 bytes of the constants before it; at most 4398046511104 in all
  |
  = note: a program's constants together may take at most 4398046511104 bytes (2^42): a .bib is loaded as one block of memory

error: constant `%v` does not fit in the program's data section (9223372028264841218 bytes)
 --> big.s:4:42
  |
4 | .const %v bf16[2147483647, 2147483647] = safetensors(\"m.safetensors\", \"v\")
  |                                          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ 9223372028264841218 bytes after the 64 bytes of the constants before it; at most 4398046511104 in all
  |
  = note: a program's constants together may take at most 4398046511104 bytes (2^42): a .bib is loaded as one block of memory

error: could not assemble big.s due to 2 previous errors
"
    );
    assert_eq!(std::fs::read_to_string(dir.path().join("big.bib")).unwrap(), "old");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "no temporary file left: {names:?}");

    // The same 2^42-byte constant first in the program fits the data section: the assembler
    // goes on to read its file.
    std::fs::write(
        dir.path().join("first.s"),
        ".input %x f32[4]\n.const %w f32[1048576, 1048576] = npy(\"w.npy\")\n.output y f32[4]\n    STORE y, %x\n",
    )
    .unwrap();
    let out = adeadvm(&["asm", "first.s"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("error: cannot read `w.npy`: no such file\n"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn asm_runs_the_verifier() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("leak.s"),
        ".output y f32[2]\n    ALLOC %t: f32[2]\n    FILL %t, 1.0\n    STORE y, %t\n",
    )
    .unwrap();
    let out = adeadvm(&["asm", "leak.s"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "error: the program ends after this instruction (the end of the code) with %t still allocated (leaked; \
         allocated by instruction 0 (line 2, ALLOC)); FREE it before the program ends\n \
         --> leak.s:4:5\n  |\n4 |     STORE y, %t\n  |     ^^^^^^^^^^^ instruction 2 (STORE)\n\n\
         error: could not verify leak.s due to 1 previous error\n"
    );
    assert!(!dir.path().join("leak.bib").exists());
}

#[test]
fn bad_bytes_give_one_clear_line_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let out = adeadvm(&["asm", path(&programs().join("mlp.s")), "-o", "good.bib"], dir.path());
    assert!(out.status.success());
    let good = std::fs::read(dir.path().join("good.bib")).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.bib", vec![], "error: not an adeadvm program: the file is 0 bytes, shorter than the 96-byte header and digest\n"),
        ("text.bib", b"hello world, this is not a program at all, not even close to one.........................".to_vec(),
         "error: not an adeadvm program: bad magic bytes (expected \"ADEADVM\\x1a\", found [104, 101, 108, 108, 111, 32, 119, 111])\n"),
        ("trunc.bib", good[..good.len() - 1].to_vec(), ""),
    ];
    for (name, bytes, want) in cases {
        std::fs::write(dir.path().join(name), &bytes).unwrap();
        for cmd in ["verify", "disasm", "run"] {
            let out = adeadvm(&[cmd, name], dir.path());
            assert_eq!(out.status.code(), Some(1), "{cmd} {name}: {}", text(&out.stderr));
            let err = text(&out.stderr);
            assert_eq!(err.lines().count(), 1, "{cmd} {name}: one line: {err}");
            if !want.is_empty() {
                assert_eq!(err, want, "{cmd} {name}");
            }
        }
    }
    let mut newer = good.clone();
    newer[8] = 9;
    std::fs::write(dir.path().join("newer.bib"), &newer).unwrap();
    let out = adeadvm(&["verify", "newer.bib"], dir.path());
    assert_eq!(
        text(&out.stderr),
        "error: this program uses .bib format 9.0, but this adeadvm reads format 1.x; upgrade adeadvm\n"
    );
    let out = adeadvm(&["verify", "missing.bib"], dir.path());
    assert_eq!(text(&out.stderr), "error: cannot read missing.bib: No such file or directory (os error 2)\n");
}

#[test]
fn verify_prints_digest_and_plan() {
    let dir = tempfile::tempdir().unwrap();
    let out = adeadvm(
        &["verify", path(&programs().join("attention.s")), "--dim", "B=2", "--dim", "T=128"],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.starts_with("digest        "), "{s}");
    assert!(s.contains("B = 2") && s.contains("T = 128"), "{s}");
    assert!(s.contains("arena peak"), "{s}");
    let out = adeadvm(&["verify", path(&programs().join("attention.s")), "--dim", "Q=2"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("error: unknown dimension Q"), "{}", text(&out.stderr));
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["frobnicate"][..],
        &["asm"],
        &["run", "x.bib", "--input", "noequals"],
        &["verify", "x.s", "-D", "1X=2"],
    ] {
        let out = adeadvm(args, dir.path());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
    }
    let out = adeadvm(&["--help"], dir.path());
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("Assemble a .s file"));
}

/// `bench` runs a small case, and refuses a size this machine cannot hold before generating any
/// input (a softmax over 2^21 x 2^21 elements is 16 TiB), rather than being killed for memory.
#[test]
fn bench_runs_and_refuses_what_does_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let out = adeadvm(&["bench", "exp", "1000", "--iters", "2"], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("exp 1000  cpu strict"), "{}", text(&out.stdout));
    // --act sets MATMUL's activation, for the matmul kernels only.
    let out =
        succeeded(adeadvm(&["bench", "matmul", "8", "--act", "gelu", "--iters", "1", "--json"], dir.path()));
    assert!(text(&out.stdout).contains("\"act\":\"gelu\""), "{}", text(&out.stdout));
    // The fast tier's Vulkan SGEMM names the GEMM it took (a device without bf16 cooperative
    // matrices, such as lavapipe, keeps the FMA kernel; a large one on NVIDIA takes the pieces).
    if let Some(ex) = common::vk::exec() {
        let fast = |size: &str, json: &[&str]| {
            let args = [
                "bench",
                "matmul",
                size,
                "--tier",
                "fast",
                "--backend",
                "vulkan",
                "--iters",
                "1",
                "--warmup",
                "0",
            ];
            succeeded(adeadvm(&[&args[..], json].concat(), dir.path()))
        };
        assert!(text(&fast("64", &["--json"]).stdout).contains("\"gemm\":\"fma\""));
        if ex.device().has_coopmat(adeadvm::isa::DType::Bf16) {
            let said = text(&fast("4096", &[]).stdout);
            assert!(said.contains("(f32 on the tensor cores, three bf16 pieces an operand)"), "{said}");
            let said = text(&fast("4096", &["--json"]).stdout);
            assert!(said.contains("\"gemm\":\"bf16-pieces\""), "{said}");
        }
    }
    failed_with(
        adeadvm(&["bench", "exp", "8", "--act", "relu"], dir.path()),
        1,
        "--act relu applies to the matmul kernels only",
    );
    failed_with(
        adeadvm(&["bench", "matmul", "8", "--act", "tanh"], dir.path()),
        2,
        "invalid value 'tanh' for '--act <ACT>'",
    );
    // --warmup takes seconds from 0 (the one untimed run only) to an hour.
    succeeded(adeadvm(&["bench", "exp", "1000", "--iters", "2", "--warmup", "0"], dir.path()));
    for bad in ["-1", "x", "NaN", "3601"] {
        let out = adeadvm(&["bench", "exp", "1000", &format!("--warmup={bad}")], dir.path());
        failed_with(out, 2, &format!("`{bad}` is not a number of seconds from 0 to 3600"));
    }
    let out = adeadvm(&["bench", "softmax", "2M"], dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("bench softmax 2097152: its tensors take about")
            && err.contains("choose a smaller SIZE"),
        "{err}"
    );
    // --row sets the row kernels' row length (SIZE rows), counted in the memory check too, and
    // is refused elsewhere.
    let out = adeadvm(&["bench", "layernorm", "3", "--row", "2K", "--iters", "2", "--json"], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json = text(&out.stdout);
    assert!(json.contains("\"row\":2048,\"size\":3,"), "{json}");
    let out = adeadvm(&["bench", "softmax", "2", "--row", "1M", "--iters", "2"], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("softmax 2x1048576  cpu strict"), "{}", text(&out.stdout));
    let out = adeadvm(&["bench", "rmsnorm", "1M", "--row", "1M"], dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("bench rmsnorm 1048576: its tensors take about"),
        "{}",
        text(&out.stderr)
    );
    let out = adeadvm(&["bench", "exp", "1000", "--row", "8"], dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("--row applies to softmax, layernorm, rmsnorm and the reduce kernels only"),
        "{}",
        text(&out.stderr)
    );
    // The reduce kernels take --row and --axis; --axis applies to them only.
    let out = adeadvm(
        &["bench", "reduce-sum", "3", "--row", "5", "--axis", "0", "--iters", "2", "--json"],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json = text(&out.stdout);
    assert!(json.contains("\"row\":5,\"axis\":0,\"size\":3,"), "{json}");
    let out = adeadvm(&["bench", "reduce-max", "4", "--iters", "2"], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("reduce-max 4 axis 1  cpu strict"), "{}", text(&out.stdout));
    let out = adeadvm(&["bench", "exp", "1000", "--axis", "0"], dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--axis applies to the reduce kernels only"), "{}", text(&out.stderr));
}

#[test]
fn run_writes_outputs_and_replay_proves_them() {
    let dir = tempfile::tempdir().unwrap();
    let x = programs().join("data/mlp_x.npy");
    let input = format!("x={}", path(&x));
    let out = adeadvm(
        &[
            "run",
            path(&programs().join("mlp.s")),
            "--input",
            &input,
            "--output",
            "y=y.npy",
            "--record",
            "run.trace",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let y = adeadvm::npy::read(&dir.path().join("y.npy"), None).unwrap();
    assert_eq!(y.shape, vec![4, 10]);
    let out = adeadvm(&["replay", path(&programs().join("mlp.s")), "run.trace"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Replayed on auto: the CPU here, a GPU where the machine has one (the same bits either way).
    let said = text(&out.stdout);
    let on = said
        .strip_prefix("identical: all 14 steps (14 distinct instructions) and 1 output match the recording bit for bit (replayed on ")
        .and_then(|rest| rest.strip_suffix(")\n"));
    assert!(on.is_some_and(|on| on == "cpu" || on.starts_with("auto with ")), "{said}");
}

#[test]
fn replay_names_the_instruction_a_changed_constant_affects() {
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(programs().join("mlp.s")).unwrap();
    assert!(original.contains(".const %b2 f32[10] = fill(0.01)"));
    std::fs::write(dir.path().join("mlp.s"), &original).unwrap();
    std::fs::write(dir.path().join("changed.s"), original.replace("fill(0.01)", "fill(0.02)")).unwrap();
    let input = format!("x={}", path(&programs().join("data/mlp_x.npy")));
    let out = adeadvm(&["run", "mlp.s", "--input", &input, "--record", "run.trace"], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = adeadvm(&["replay", "changed.s", "run.trace"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    let matmul_line = original.lines().position(|l| l.contains("MATMUL %logits")).unwrap() + 1;
    assert!(
        stdout.starts_with(&format!("first difference at step 9: instruction 9 (MATMUL, changed.s:{matmul_line})\n  tensor wrote %logits: f32 [4, 10]\n")),
        "{stdout}"
    );
    assert!(stdout.contains("  largest difference: 1.000e-2 absolute at element 0 (expected "), "{stdout}");
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("warning: the program differs from the one recorded"), "{stderr}");
    assert!(stderr.ends_with("error: the replay differs from the recording\n"), "{stderr}");
}

#[test]
fn run_input_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mlp = programs().join("mlp.s");
    let x = format!("x={}", path(&programs().join("data/mlp_x.npy")));
    let err = |args: &[&str]| {
        let mut a = vec!["run", path(&mlp)];
        a.extend_from_slice(args);
        let out = adeadvm(&a, dir.path());
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        text(&out.stderr)
    };
    assert_eq!(err(&[]), "error: missing input x: the program declares it as f32[B, 784]\n");
    assert_eq!(
        err(&["--input", "z=a.npy"]),
        "error: --input z=a.npy: cannot read a.npy: No such file or directory (os error 2)\n"
    );
    std::fs::write(
        dir.path().join("a.npy"),
        adeadvm::npy::to_bytes(&adeadvm::vm::HostTensor::from_f32(vec![2], &[1.0, 2.0]).unwrap()),
    )
    .unwrap();
    assert_eq!(
        err(&["--input", "z=a.npy"]),
        "error: --input z=a.npy: unknown input z (the program's inputs: x)\n"
    );
    assert_eq!(
        err(&["--input", "x=a.npy"]),
        "error: input x is declared f32[B, 784] (rank 2) but was given shape [2] (rank 1)\n"
    );
    assert_eq!(
        err(&["--input", &x, "--output", "q=q.npy"]),
        "error: --output q: the program has no output `q` (its outputs are: y)\n"
    );
    std::fs::write(dir.path().join("junk.npy"), b"not numpy").unwrap();
    assert!(err(&["--input", "x=junk.npy"])
        .starts_with("error: --input x=junk.npy: junk.npy is not a valid .npy file: "));
    assert_eq!(err(&["--input", &x, "--max-steps", "3"]), "error: the step budget of 3 instructions was used up; the program may loop forever (raise --max-steps if not)\n");
}

/// A .npy header and data as numpy writes them (format 1.0, header padded to 64 bytes).
fn npy_file(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// `run --input` takes big-endian .npy (as `npy(...)` constants do), converting it, and int64
/// data for an i32 input when every value fits; a value that does not is an error naming the
/// input and the value (exit 1).
#[test]
fn run_input_big_endian_and_int64() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("p.s"),
        ".input %x f32[3]\n.input %k i32[3]\n.output y f32[3]\n.output j i32[3]\n\
         ALLOC %t: f32[3]\nADD %t, %x, %x\nSTORE y, %t\nFREE %t\n\
         ALLOC %u: i32[3]\nADD %u, %k, %k\nSTORE j, %u\nFREE %u\n",
    )
    .unwrap();
    let xs = [1.5f32, -0.0, 3.0e-3];
    let ks = [7i64, -1_000_000_000, i32::MIN as i64 / 2];
    let be_f32: Vec<u8> = xs.iter().flat_map(|v| v.to_be_bytes()).collect();
    let be_i64: Vec<u8> = ks.iter().flat_map(|v| v.to_be_bytes()).collect();
    let le_i64: Vec<u8> = ks.iter().flat_map(|v| v.to_le_bytes()).collect();
    let le_i32: Vec<u8> = ks.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect();
    let write = |name: &str, bytes: Vec<u8>| std::fs::write(dir.path().join(name), bytes).unwrap();
    write("x_be.npy", npy_file(">f4", "(3,)", &be_f32));
    write("k_be8.npy", npy_file(">i8", "(3,)", &be_i64));
    write("k_le8.npy", npy_file("<i8", "(3,)", &le_i64));
    write(
        "k_be4.npy",
        npy_file(">i4", "(3,)", &ks.iter().flat_map(|&v| (v as i32).to_be_bytes()).collect::<Vec<_>>()),
    );
    for k in ["k_be8.npy", "k_le8.npy", "k_be4.npy"] {
        let out = adeadvm(
            &[
                "run",
                "p.s",
                "--input",
                "x=x_be.npy",
                "--input",
                &format!("k={k}"),
                "--output",
                "y=y.npy",
                "--output",
                "j=j.npy",
            ],
            dir.path(),
        );
        succeeded(out);
        let y = adeadvm::npy::read(&dir.path().join("y.npy"), None).unwrap();
        let want: Vec<u8> = xs.iter().flat_map(|v| (v + v).to_le_bytes()).collect();
        assert_eq!(y.bytes(), &want[..], "{k}");
        let j = adeadvm::npy::read(&dir.path().join("j.npy"), None).unwrap();
        let want: Vec<u8> = le_i32
            .chunks(4)
            .flat_map(|c| {
                let v = i32::from_le_bytes(c.try_into().unwrap());
                v.wrapping_add(v).to_le_bytes()
            })
            .collect();
        assert_eq!(j.bytes(), &want[..], "{k}");
    }
    let big = [1i64, 1 << 31, -5];
    write(
        "k_big.npy",
        npy_file("<i8", "(3,)", &big.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>()),
    );
    let out = adeadvm(&["run", "p.s", "--input", "x=x_be.npy", "--input", "k=k_big.npy"], dir.path());
    failed_with(
        out,
        1,
        "error: --input k=k_big.npy: k_big.npy: int64 value 2147483648 at position 1 does not fit in int32\n",
    );
    // int64 data for a float input is named as int64, the file's type, not as the i32 it
    // would have been narrowed to.
    let out = adeadvm(&["run", "p.s", "--input", "x=k_le8.npy", "--input", "k=k_le8.npy"], dir.path());
    failed_with(
        out,
        1,
        "error: --input x=k_le8.npy: k_le8.npy holds int64 data where f32 data is wanted \
         (int64 is narrowed to int32 for i32 tensors only)\n",
    );
}

#[test]
fn info_lists_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    // As a user runs it: ADEADVM_SIMD (a testing aid) unset.
    let unforced = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_adeadvm"))
            .args(args)
            .env_remove("ADEADVM_SIMD")
            .current_dir(dir.path())
            .output()
            .unwrap();
        succeeded(out)
    };
    let out = unforced(&["info"]);
    let s = text(&out.stdout);
    assert!(s.contains("\ncpu:") && s.contains("\nsimd:") && s.contains("\nmemory:"), "{s}");
    // The CPU executor's line says which kernels it will use, as bench does (simd=...).
    let cpu_line = s.lines().find(|l| l.starts_with("  cpu ")).unwrap_or_else(|| panic!("{s}"));
    #[cfg(target_arch = "x86_64")]
    {
        let expected = if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            "  cpu     avx512 SIMD kernels (the scalar reference where an opcode has none), "
        } else if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            "  cpu     avx2 SIMD kernels (the scalar reference where an opcode has none), "
        } else {
            "  cpu     the scalar reference for every opcode, "
        };
        assert!(cpu_line.starts_with(expected), "{cpu_line}");
        let bench = unforced(&["bench", "add", "64", "--iters", "1", "--warmup", "0"]);
        let simd = expected.split_whitespace().nth(1).unwrap();
        let simd = if simd == "the" { "scalar" } else { simd };
        assert!(text(&bench.stdout).contains(&format!(" simd={simd}:")), "{}", text(&bench.stdout));
    }
    // ADEADVM_SIMD lowers it, and info says so.
    let out = Command::new(env!("CARGO_BIN_EXE_adeadvm"))
        .arg("info")
        .env("ADEADVM_SIMD", "scalar")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let s = text(&out.stdout);
    assert!(s.contains("\n  cpu     the scalar reference for every opcode (ADEADVM_SIMD=scalar), "), "{s}");
}

/// The top-level help names every bench kernel; dispatch shows its own size, not SIZE's
/// default; --progress says each run on stderr.
#[test]
fn bench_help_size_and_progress() {
    let dir = tempfile::tempdir().unwrap();
    let help = text(&succeeded(adeadvm(&["--help"], dir.path())).stdout);
    assert!(
        help.contains(
            "Time one kernel (matmul, matmul-f16, matmul-bf16, add, exp, gelu, softmax, layernorm, \
             rmsnorm, reduce-sum, reduce-max, dispatch) inside the VM\n"
        ),
        "{help}"
    );
    let out = succeeded(adeadvm(&["bench", "dispatch", "--iters", "2", "--warmup", "0"], dir.path()));
    let said = text(&out.stdout);
    assert!(said.starts_with("dispatch (1000 dependent ADDs of f32[1])  cpu strict threads="), "{said}");
    assert!(!said.contains("1024"), "{said}");
    let out =
        succeeded(adeadvm(&["bench", "dispatch", "--iters", "1", "--warmup", "0", "--json"], dir.path()));
    assert!(text(&out.stdout).contains("\"kernel\":\"dispatch\",\"size\":1000,"), "{}", text(&out.stdout));
    // Without --progress (and not on a terminal) stderr stays empty.
    assert_eq!(text(&out.stderr), "");
    let out = succeeded(adeadvm(
        &["bench", "exp", "100", "--iters", "2", "--warmup", "0", "--progress"],
        dir.path(),
    ));
    let stderr = text(&out.stderr);
    // Each line ends with the time so far, " (0.0 s in)".
    let lines: Vec<&str> = stderr.lines().map(|l| l.split(" (").next().unwrap()).collect();
    assert_eq!(
        lines,
        [
            "bench: the first run, which builds the pipelines",
            "bench: warming up for 0 s",
            "bench: timed run 1 of 2",
            "bench: timed run 2 of 2",
        ],
        "{}",
        text(&out.stderr)
    );
}

/// `disasm` without -o: `--constants summary` shows large constants by their first values and
/// size; into a pipe the default is the full text, which assembles back to the same bytes.
#[test]
fn disasm_summarizes_large_constants_unless_writing_assembly() {
    let dir = tempfile::tempdir().unwrap();
    let mlp = programs().join("mlp.s");
    succeeded(adeadvm(&["asm", path(&mlp), "-o", "mlp.bib"], dir.path()));
    let summary =
        text(&succeeded(adeadvm(&["disasm", "mlp.bib", "--constants", "summary"], dir.path())).stdout);
    let full = text(&succeeded(adeadvm(&["disasm", "mlp.bib"], dir.path())).stdout);
    assert!(summary.len() * 20 < full.len(), "{} vs {} bytes", summary.len(), full.len());
    let elided: Vec<&str> = summary.lines().filter(|l| l.contains(", ...]  ; ")).collect();
    assert!(!elided.is_empty(), "{summary}");
    for line in elided {
        assert!(line.starts_with(".const %"), "{line}");
        assert!(
            line.ends_with(
                " values, elided; `disasm -o FILE` writes it to FILE.data, `--constants full` prints it"
            ),
            "{line}"
        );
    }
    // The small constants and every instruction are printed as they are.
    for line in full.lines().filter(|l| !l.starts_with(".const")) {
        assert!(summary.lines().any(|s| s == line), "{line}");
    }
    std::fs::write(dir.path().join("again.s"), &full).unwrap();
    succeeded(adeadvm(&["asm", "again.s", "-o", "again.bib"], dir.path()));
    assert!(
        std::fs::read(dir.path().join("again.bib")).unwrap()
            == std::fs::read(dir.path().join("mlp.bib")).unwrap()
    );
    failed_with(
        adeadvm(&["disasm", "mlp.bib", "--constants", "some"], dir.path()),
        2,
        "invalid value 'some' for '--constants <HOW>'",
    );
}

#[test]
fn every_cpu_program_runs_and_replays_identically_at_any_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let data = programs().join("data");
    let cases: [(&str, &[&str]); 4] = [
        ("mlp.s", &["x=mlp_x.npy"]),
        ("attention.s", &["x=attention_x.npy", "mask=attention_mask.npy"]),
        ("ffn.s", &["x=ffn_x.npy"]),
        ("loop.s", &["x=loop_x.npy"]),
    ];
    for (prog, inputs) in cases {
        let src = programs().join(prog);
        let mut args = vec![
            "run".to_string(),
            path(&src).to_string(),
            "--record".into(),
            "run.trace".into(),
            "--threads".into(),
            "1".into(),
        ];
        for i in inputs {
            let (name, file) = i.split_once('=').unwrap();
            args.extend(["--input".to_string(), format!("{name}={}", path(&data.join(file)))]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = adeadvm(&args, dir.path());
        assert!(out.status.success(), "{prog}: {}", text(&out.stderr));
        for threads in ["1", "2", "3"] {
            let out = adeadvm(&["replay", path(&src), "run.trace", "--threads", threads], dir.path());
            assert_eq!(
                out.status.code(),
                Some(0),
                "{prog} replay with {threads} threads: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            );
            assert!(text(&out.stdout).starts_with("identical: all "), "{prog}: {}", text(&out.stdout));
        }
    }
}

/// A program with three independent verification errors (issue 35.4).
const THREE_ERRORS: &str = ".input %x f32[4]
.output y f32[4]
    ALLOC %a: f32[4]
    RELU %a, %x
    FREE %a
    ALLOC %h: f32[2]
    RELU %h, %x    ; wrong shape
    relu %a, %x
    STORE y, %x
    HALT
";

const THREE_ERRORS_RENDERED: &str = "\
error: shape mismatch: dst %h (f32[2]) and a %x (f32[4]) must have the same shape
 --> bad.s:7:5
  |
7 |     RELU %h, %x    ; wrong shape
  |     ^^^^^^^^^^^ instruction 4 (RELU)

error: writes %a after it was freed (use after FREE, by instruction 2 (line 5, FREE))
 --> bad.s:8:5
  |
8 |     relu %a, %x
  |     ^^^^^^^^^^^ instruction 5 (RELU)

error: the program ends here with %h still allocated (leaked; allocated by instruction 3 (line 6, ALLOC)); FREE it before the program ends
  --> bad.s:10:5
   |
10 |     HALT
   |     ^^^^ instruction 7 (HALT)

error: could not verify bad.s due to 3 previous errors
";

#[test]
fn verification_errors_point_at_their_source_lines_all_at_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.s"), THREE_ERRORS).unwrap();
    for args in [&["asm", "bad.s"][..], &["verify", "bad.s"], &["run", "bad.s"]] {
        let out = adeadvm(args, dir.path());
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(text(&out.stderr), THREE_ERRORS_RENDERED, "{args:?}");
    }
    assert!(!dir.path().join("bad.bib").exists());

    // A .bib is shown against the source file it records, found beside it...
    succeeded(adeadvm(&["asm", "bad.s", "--no-verify"], dir.path()));
    let out = adeadvm(&["verify", "bad.bib"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        THREE_ERRORS_RENDERED.replace("could not verify bad.s", "could not verify bad.bib")
    );

    // ...and by line alone when the source is not there (or no longer holds the instruction).
    std::fs::write(dir.path().join("bad.s"), "; edited since\n").unwrap();
    let out = adeadvm(&["verify", "bad.bib"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "error: shape mismatch: dst %h (f32[2]) and a %x (f32[4]) must have the same shape\n \
         --> bad.s:7\n  |\n  = note: instruction 4 (RELU)\n\n\
         error: writes %a after it was freed (use after FREE, by instruction 2 (line 5, FREE))\n \
         --> bad.s:8\n  |\n  = note: instruction 5 (RELU)\n\n\
         error: the program ends here with %h still allocated (leaked; allocated by instruction 3 (line 6, ALLOC)); \
         FREE it before the program ends\n  --> bad.s:10\n   |\n   = note: instruction 7 (HALT)\n\n\
         error: could not verify bad.bib due to 3 previous errors\n"
    );
}

#[test]
fn the_digest_does_not_depend_on_the_path_the_source_was_given_by() {
    // Issue 35.3: programs/mlp.s, its absolute path, and mlp.s from inside programs/ gave three
    // digests, so a replay from another folder warned that the program differed.
    let dir = tempfile::tempdir().unwrap();
    let progs = dir.path().join("programs");
    std::fs::create_dir(&progs).unwrap();
    std::fs::copy(programs().join("mlp.s"), progs.join("mlp.s")).unwrap();
    let absolute = progs.join("mlp.s");
    succeeded(adeadvm(&["asm", "programs/mlp.s", "-o", "relative.bib"], dir.path()));
    succeeded(adeadvm(&["asm", path(&absolute), "-o", "absolute.bib"], dir.path()));
    succeeded(adeadvm(&["asm", "mlp.s", "-o", "../inside.bib"], &progs));
    let bytes = |name: &str| std::fs::read(dir.path().join(name)).unwrap();
    assert!(
        bytes("relative.bib") == bytes("absolute.bib"),
        "relative and absolute paths give different programs"
    );
    assert!(
        bytes("relative.bib") == bytes("inside.bib"),
        "a path from inside the folder gives another program"
    );

    // Recorded from inside the folder, replayed from outside it (by both paths): no warning.
    let x = programs().join("data/mlp_x.npy");
    let input = format!("x={}", path(&x));
    succeeded(adeadvm(&["run", "mlp.s", "--input", &input, "--record", "../run.trace"], &progs));
    for program in ["programs/mlp.s", path(&absolute), "relative.bib"] {
        let out = succeeded(adeadvm(&["replay", program, "run.trace"], dir.path()));
        assert_eq!(text(&out.stderr), "", "{program}");
        assert!(text(&out.stdout).starts_with("identical: "), "{program}: {}", text(&out.stdout));
    }
}
