//! Limits and faults (issue 9; the table in docs/robustness.md): each hostile condition gives
//! one clear error, exit status 1 on the command line, and no half-written output file.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use adeadvm::api::{Backend, Config, Program, Session};
use adeadvm::exec::vulkan::{FAULT_ENV, LIBRARY_ENV};
use adeadvm::HostTensor;
use common::vk::required;
use common::*;

fn adeadvm(args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_adeadvm"));
    c.args(args).current_dir(dir);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether the Vulkan tests can run here; with ADEADVM_REQUIRE_VULKAN=1 (CI) they must.
fn vulkan() -> bool {
    match adeadvm::vm::shared_device() {
        Ok(_) => true,
        Err(e) => {
            assert!(!required(), "ADEADVM_REQUIRE_VULKAN=1 but no Vulkan device: {e}");
            common::skip::skipped("a robustness check on Vulkan", &format!("no Vulkan device ({e})"));
            false
        }
    }
}

/// `adeadvm run programs/mlp.s` with its input, extra arguments and environment, in `dir`.
fn run_mlp(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let prog = root().join("programs/mlp.s");
    let x = format!("x={}", root().join("programs/data/mlp_x.npy").display());
    let mut args = vec!["run", prog.to_str().unwrap(), "--input", &x];
    args.extend(extra);
    let out = adeadvm(&args, dir, env);
    (out.status.code(), text(&out.stderr))
}

// ---- limits ----------------------------------------------------------------------------

#[test]
fn a_huge_splat_constant_is_refused_before_it_is_allocated() {
    // 2^40 elements of f32: 4 TiB, refused by the budget check before any byte is allocated.
    let p = build(
        ".const %w f32[1048576, 1048576] = fill(1.5)\n.output y f32[1]\nALLOC %t: f32[1]\nFILL %t, 1.0\n\
         STORE y, %t\nFREE %t\n",
    );
    let program = Program::from(p);
    let err = Session::new(&program, &Config { backend: Backend::Cpu, ..Config::default() }).err().unwrap();
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "the program's constants need 4398046511104 bytes in memory, more than the memory budget of "
        ),
        "{msg}"
    );
}

#[test]
fn shapes_beyond_the_rank_and_element_limits_are_refused() {
    let err = try_build(".input %x f32[1048576, 2097152]\n.output y f32[1]\nHALT\n").unwrap_err();
    assert!(
        err.contains("f32[1048576, 2097152] has more than the maximum of 1099511627776 (2^40) elements"),
        "{err}"
    );
    let err = try_build(".input %x f32[1, 1, 1, 1, 1, 1, 1, 1, 1]\n.output y f32[1]\nHALT\n").unwrap_err();
    assert!(err.contains("rank 9 exceeds the maximum of 8"), "{err}");
    // Symbolic dimensions are bound later: the planner applies the same limit.
    let p = build(".input %x f32[B, 1048576, 1048576]\n.output y f32[B, 1048576, 1048576]\nSTORE y, %x\n");
    let err = p.plan(&[2]).unwrap_err().to_string();
    assert_eq!(
        err,
        "tensor %x has shape [2, 1048576, 1048576]: 2199023255552 elements, more than the maximum of 1099511627776 (2^40)"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("big.s"),
        ".input %x f32[B, 1048576, 1048576]\n.output y f32[B, 1048576, 1048576]\nSTORE y, %x\n",
    )
    .unwrap();
    let out = adeadvm(&["verify", "big.s", "--dim", "B=2"], dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "error: tensor %x has shape [2, 1048576, 1048576]: 2199023255552 elements, more than the maximum of 1099511627776 (2^40)\n"
    );
}

#[test]
fn a_run_that_claims_a_huge_arena_fails_fast_without_allocating_it() {
    // 2^40 bytes of arena: refused by the budget check, long before any allocation.
    let p = build(
        ".output y f32[1]\nALLOC %t: f32[262144, 1048576]\nFILL %t, 1.0\nFREE %t\n\
         ALLOC %u: f32[1]\nFILL %u, 2.0\nSTORE y, %u\nFREE %u\n",
    );
    let err = run_with(&p, &[], adeadvm::vm::VmConfig::default()).unwrap_err();
    assert!(
        err.starts_with("this run needs 1099511627780 bytes (arena peak 1099511627776, inputs and outputs 4, constants and scratch 0), more than the memory budget of "),
        "{err}"
    );
}

#[test]
fn the_device_memory_budget_is_enforced_before_running() {
    if !vulkan() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = run_mlp(dir.path(), &["--backend", "vulkan", "--max-device-memory", "64K"], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.starts_with("error: this run needs "), "{err}");
    assert!(err.contains(" bytes of device memory on "), "{err}");
    assert!(err.trim_end().ends_with("more than the device memory budget of 65536 bytes"), "{err}");
    // The same program fits the default budget (the device's memory).
    let (code, err) = run_mlp(dir.path(), &["--backend", "vulkan"], &[]);
    assert_eq!(code, Some(0), "{err}");
}

/// `programs/kernel/scale.spv` with its LocalSize execution mode set to `x`, 1, 1. glslc also
/// emits a constant composite decorated as the WorkgroupSize built-in, which overrides the
/// execution mode; its x component (an OpConstant of its own) is set to `x` as well, so that
/// the module stays valid SPIR-V (the verifier validates it) and says `x` both ways. (The
/// module is refused before any pipeline is built from it.)
fn scale_spv_with_local_size(x: u32) -> Vec<u8> {
    let bytes = std::fs::read(root().join("programs/kernel/scale.spv")).unwrap();
    let mut words: Vec<u32> =
        bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    // (start word, opcode, word count) of every instruction.
    let mut insns = Vec::new();
    let mut i = 5;
    while i < words.len() {
        let (count, op) = ((words[i] >> 16) as usize, words[i] & 0xffff);
        insns.push((i, op, count));
        i += count.max(1);
    }
    let mut patched = false;
    let mut workgroup_size = None;
    for &(i, op, count) in &insns {
        // OpExecutionMode %entry LocalSize x y z
        if op == 16 && count == 6 && words[i + 2] == 17 {
            words[i + 3] = x;
            patched = true;
        }
        // OpDecorate %id BuiltIn WorkgroupSize
        if op == 71 && count == 4 && words[i + 2] == 11 && words[i + 3] == 25 {
            workgroup_size = Some(words[i + 1]);
        }
    }
    assert!(patched, "scale.spv has a LocalSize execution mode");
    let workgroup_size = workgroup_size.expect("scale.spv has a WorkgroupSize constant");
    // OpConstantComposite %uvec3 %workgroup_size %x %y %z, then OpConstant %uint %x value.
    let &(composite, ..) =
        insns.iter().find(|&&(i, op, _)| op == 44 && words[i + 2] == workgroup_size).unwrap();
    let x_id = words[composite + 3];
    let &(constant, ..) = insns.iter().find(|&&(i, op, _)| op == 43 && words[i + 2] == x_id).unwrap();
    words[constant + 3] = x;
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn a_spirv_kernel_asking_for_more_than_the_device_allows_is_refused_at_load() {
    if !vulkan() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let limits = adeadvm::vm::shared_device().unwrap().device().info().clone();
    let too_big = limits.max_compute_workgroup_size[0].saturating_add(1);
    std::fs::write(dir.path().join("big.spv"), scale_spv_with_local_size(too_big)).unwrap();
    let source = |groups: u32| {
        format!(
            ".tier fast\n.input %x f32[64]\n.tensor %y f32[64]\n.output y f32[64]\n.spirv scale = file(\"big.spv\")\n\
             .kernel k = scale \"main\" bindings(%x, %y) push(f32 2.0, u32 64) groups({groups}, 1, 1)\n\
             ALLOC %y\nKERNEL k\nGPU_SYNC\nSTORE y, %y\nFREE %y\n"
        )
    };
    let options = adeadvm::asm::AsmOptions { defines: Vec::new(), base_dir: dir.path().to_path_buf() };
    let program = Program::from_asm_with(&source(1), "big.s", &options).unwrap();
    let config = Config { backend: Backend::Vulkan, ..Config::default() };
    let err = Session::new(&program, &config).err().unwrap().to_string();
    let [mx, my, mz] = limits.max_compute_workgroup_size;
    assert_eq!(
        err,
        format!(
            "kernel k cannot run on the Vulkan device {}: its workgroup size is {too_big}x1x1; the device allows at most {mx}x{my}x{mz}",
            limits.name
        )
    );
    // Workgroup counts past the device's limit are refused at load too.
    std::fs::write(dir.path().join("big.spv"), scale_spv_with_local_size(64)).unwrap();
    let groups = limits.max_compute_workgroup_count[0].saturating_add(1);
    let program = Program::from_asm_with(&source(groups), "big.s", &options).unwrap();
    let err = Session::new(&program, &config).err().unwrap().to_string();
    assert!(
        err.starts_with(&format!(
            "kernel k cannot run on the Vulkan device {}: it dispatches {groups}x1x1 workgroups; the device allows at most ",
            limits.name
        )),
        "{err}"
    );
}

/// A kernel whose SPIR-V declares a capability that needs a device feature adeadvm does not
/// enable (Int64: 64-bit integers, never enabled) is refused when the session opens the device,
/// by name, rather than failing in the driver's pipeline compiler mid-run.
#[test]
fn a_spirv_kernel_needing_a_feature_the_device_lacks_is_refused_at_load() {
    if !vulkan() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(root().join("programs/kernel/scale.spv")).unwrap();
    // OpCapability Int64 (opcode 17, two words; Int64 is capability 11) before the first
    // instruction, where the module's capabilities are.
    let mut patched = bytes[..20].to_vec();
    patched.extend([(2u32 << 16 | 17).to_le_bytes(), 11u32.to_le_bytes()].concat());
    patched.extend(&bytes[20..]);
    std::fs::write(dir.path().join("i64.spv"), patched).unwrap();
    let source = ".tier fast\n.input %x f32[64]\n.tensor %y f32[64]\n.output y f32[64]\n.spirv scale = file(\"i64.spv\")\n\
         .kernel k = scale \"main\" bindings(%x, %y) push(f32 2.0, u32 64) groups(1, 1, 1)\n\
         ALLOC %y\nKERNEL k\nGPU_SYNC\nSTORE y, %y\nFREE %y\n";
    let options = adeadvm::asm::AsmOptions { defines: Vec::new(), base_dir: dir.path().to_path_buf() };
    let program = Program::from_asm_with(source, "i64.s", &options).unwrap();
    let config = Config { backend: Backend::Vulkan, ..Config::default() };
    let err = Session::new(&program, &config).err().unwrap().to_string();
    let name = adeadvm::vm::shared_device().unwrap().device().info().name.clone();
    assert!(
        err.starts_with(&format!(
            "kernel k cannot run on the Vulkan device {name}: its SPIR-V declares capability Int64, whose device \
             feature adeadvm does not enable"
        )),
        "{err}"
    );
}

// ---- faults ----------------------------------------------------------------------------

#[test]
fn out_of_device_memory_mid_run_is_a_clear_error_and_writes_no_output() {
    if !vulkan() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Allocations 1 and 2 (status words, the arena) succeed; the input's upload at the first
    // instruction fails as a full device would.
    let (code, err) =
        run_mlp(dir.path(), &["--backend", "vulkan", "--output", "y=y.npy"], &[(FAULT_ENV, "oom-after=2")]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err,
        "error: instruction 1 (line 20, MUL): on the GPU: out of device memory during vmaCreateBuffer\n"
    );
    assert!(listing(dir.path()).is_empty(), "no output file: {:?}", listing(dir.path()));
}

#[test]
fn a_lost_device_is_a_clear_error_and_writes_no_output() {
    if !vulkan() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, err) =
        run_mlp(dir.path(), &["--backend", "vulkan", "--output", "y=y.npy"], &[(FAULT_ENV, "lost-after=0")]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.trim_end()
            .ends_with("the Vulkan device was lost during vkQueueSubmit; results of work in flight are gone"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(listing(dir.path()).is_empty(), "no output file: {:?}", listing(dir.path()));
}

#[test]
fn a_gpu_that_does_not_finish_in_time_is_a_clear_error_and_writes_no_output() {
    if !vulkan() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = run_mlp(
        dir.path(),
        &["--backend", "vulkan", "--output", "y=y.npy"],
        &[(FAULT_ENV, "timeout-after=0"), ("ADEADVM_GPU_TIMEOUT", "1")],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.trim_end()
            .ends_with("the GPU did not finish a batch within 1 s (set ADEADVM_GPU_TIMEOUT to wait longer)"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(listing(dir.path()).is_empty(), "no output file: {:?}", listing(dir.path()));
}

#[test]
fn no_vulkan_loader_is_a_clear_error_and_writes_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = run_mlp(
        dir.path(),
        &["--backend", "vulkan", "--output", "y=y.npy"],
        &[(LIBRARY_ENV, "/nonexistent/libvulkan.so.1")],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with("error: Vulkan is unavailable: cannot load /nonexistent/libvulkan.so.1"),
        "{err}"
    );
    assert!(listing(dir.path()).is_empty(), "no output file: {:?}", listing(dir.path()));
}

/// A .bib with real constant data (not splats), and its output on `x`.
fn weights_program(dir: &Path) -> (PathBuf, HostTensor, Vec<u8>) {
    let path = dir.join("w.bib");
    let program = adeadvm::asm::assemble(
        ".input %x f32[4, 64]\n.const %w f32[64, 64] = rand(3)\n.output y f32[4, 64]\n\
         ALLOC %y: f32[4, 64]\nMATMUL %y, %x, %w\nSTORE y, %y\nFREE %y\n",
        "w.s",
        &adeadvm::asm::AsmOptions::default(),
    )
    .unwrap();
    let bytes = program.to_bytes();
    std::fs::write(&path, &bytes).unwrap();
    let x = f32s(&[4, 64], &Rng(5).vec(256, -1.0, 1.0));
    (path, x, bytes)
}

#[test]
fn a_weights_file_truncated_or_rewritten_under_a_loaded_program_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (path, x, bytes) = weights_program(dir.path());
    let program = Program::load(&path).unwrap();
    let config = Config { backend: Backend::Cpu, threads: Some(1), ..Config::default() };
    let mut session = Session::new(&program, &config).unwrap();
    session.set_input("x", &x).unwrap();
    session.run().unwrap();
    let want = session.output("y").unwrap().digest();

    // Truncated while loaded: a mapped file would fault (SIGBUS) on the next read of a
    // constant; the loaded program owns its bytes, so the run gives the same bits.
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(100).unwrap();
    session.run().unwrap();
    assert_eq!(session.output("y").unwrap().digest(), want);
    let mut fresh = Session::new(&program, &config).unwrap();
    fresh.set_input("x", &x).unwrap();
    fresh.run().unwrap();
    assert_eq!(fresh.output("y").unwrap().digest(), want);

    // Rewritten in place with other constants (same length): still the verified program's bits.
    let mut changed = bytes.clone();
    let n = changed.len();
    changed[n / 2..n - 32].iter_mut().for_each(|b| *b = b.wrapping_add(1));
    std::fs::write(&path, &changed).unwrap();
    session.run().unwrap();
    assert_eq!(session.output("y").unwrap().digest(), want);

    // Loading the changed file is refused: the digest no longer matches.
    let err = Program::load(&path).unwrap_err().to_string();
    assert!(err.starts_with("digest mismatch: the file is corrupt or was modified"), "{err}");
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(100).unwrap();
    let err = Program::load(&path).unwrap_err().to_string();
    assert!(err.starts_with("the header says the file is "), "{err}");
}

#[test]
fn a_device_or_pipe_is_not_read_forever() {
    // /dev/zero never ends: loading reads its first bytes and stops at the bad magic.
    let err = adeadvm::format::Program::load(Path::new("/dev/zero")).unwrap_err().to_string();
    assert_eq!(
        err,
        "not an adeadvm program: bad magic bytes (expected \"ADEADVM\\x1a\", found [0, 0, 0, 0, 0, 0, 0, 0])"
    );
}

#[test]
fn an_unwritable_output_path_fails_before_the_run_with_no_file_left() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file.txt"), "not a folder").unwrap();
    for (flag, value, shown) in [
        ("--output", "y=missing/y.npy", "missing/y.npy"),
        ("--record", "missing/run.trace", "missing/run.trace"),
        ("--profile-json", "file.txt/t.json", "file.txt/t.json"),
    ] {
        let (code, err) = run_mlp(dir.path(), &["--backend", "cpu", flag, value], &[]);
        assert_eq!(code, Some(1), "{flag}: {err}");
        assert!(err.starts_with(&format!("error: cannot write {shown}: ")), "{flag}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    assert_eq!(listing(dir.path()), ["file.txt"]);
}

#[test]
fn a_failed_write_leaves_no_partial_file_and_keeps_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    // The target is a folder: the rename fails after the data was written to a temporary file,
    // which is removed.
    std::fs::create_dir(dir.path().join("y.npy")).unwrap();
    let (code, err) = run_mlp(dir.path(), &["--backend", "cpu", "--output", "y=y.npy"], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.starts_with("error: cannot write y.npy: "), "{err}");
    assert_eq!(listing(dir.path()), ["y.npy"]);
    // A run that fails leaves an existing output file as it was.
    std::fs::remove_dir(dir.path().join("y.npy")).unwrap();
    std::fs::write(dir.path().join("y.npy"), "old").unwrap();
    let (code, err) =
        run_mlp(dir.path(), &["--backend", "cpu", "--output", "y=y.npy", "--max-steps", "2"], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(std::fs::read_to_string(dir.path().join("y.npy")).unwrap(), "old");
    assert_eq!(listing(dir.path()), ["y.npy"]);
    // asm -o into a missing folder: one line, nothing written.
    let src = root().join("programs/mlp.s");
    let out = adeadvm(&["asm", src.to_str().unwrap(), "-o", "missing/m.bib"], dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("error: cannot write missing/m.bib: "), "{}", text(&out.stderr));
    assert_eq!(listing(dir.path()), ["y.npy"]);
}

#[test]
fn concurrent_atomic_writes_never_mix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.bin");
    std::thread::scope(|s| {
        for k in 0..4u8 {
            let path = path.clone();
            s.spawn(move || {
                for _ in 0..20 {
                    adeadvm::output::write_atomically(&path, &vec![k; 1 << 16]).unwrap();
                }
            });
        }
    });
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 1 << 16);
    assert!(bytes.iter().all(|&b| b == bytes[0]), "one writer's bytes, whole");
    assert_eq!(listing(dir.path()), ["out.bin"]);
}

/// An output path that is a FIFO (or a device such as /dev/null) is written through, and stays
/// what it was: renaming a temporary file over it would, as root, replace /dev/null itself.
#[test]
fn an_output_path_that_is_a_fifo_or_a_link_is_written_through_not_replaced() {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let dir = tempfile::tempdir().unwrap();
    let src = root().join("programs/loop.s");
    let src = src.to_str().unwrap();
    let plain = adeadvm(&["asm", src, "-o", "plain.bib"], dir.path(), &[]);
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let expected = std::fs::read(dir.path().join("plain.bib")).unwrap();

    let fifo = dir.path().join("pipe.bib");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: c_path is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
    // The reading end opens without waiting for a writer, and the program fits the pipe's
    // buffer, so the writer never blocks; a writer that renamed over the FIFO instead leaves
    // the reader with nothing rather than hanging the test.
    assert!(expected.len() < 65536, "the program fits a pipe buffer");
    let mut reader =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo).unwrap();
    let out = adeadvm(&["asm", src, "-o", "pipe.bib"], dir.path(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut reader, &mut got).unwrap();
    assert!(got == expected, "the FIFO's reader got {} bytes of the program's {}", got.len(), expected.len());
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "still a FIFO");

    // A link keeps being a link; the file it names gets the program.
    std::fs::write(dir.path().join("target.bib"), "old").unwrap();
    std::os::unix::fs::symlink("target.bib", dir.path().join("link.bib")).unwrap();
    let out = adeadvm(&["asm", src, "-o", "link.bib"], dir.path(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(std::fs::symlink_metadata(dir.path().join("link.bib")).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(dir.path().join("target.bib")).unwrap(), expected);
    assert_eq!(listing(dir.path()), ["link.bib", "pipe.bib", "plain.bib", "target.bib"]);
}
