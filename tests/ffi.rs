//! The C ABI: the C example built with the system compiler and run, and every entry point's
//! checks (null pointers, bad sizes, unknown names, wrong dtypes) called directly.

#[path = "common/skip.rs"]
mod skip;

use std::ffi::{c_char, c_void, CStr};
use std::path::PathBuf;
use std::process::Command;
use std::ptr::{null, null_mut};

use adeadvm::api::{Config, Program, Session};
use adeadvm::ffi::*;
use adeadvm::HostTensor;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn last_error() -> String {
    // SAFETY: adeadvm_last_error never returns NULL; the string lives until the next failure.
    unsafe { CStr::from_ptr(adeadvm_last_error()) }.to_string_lossy().into_owned()
}

/// The folder holding this build's libadeadvm.so: `cargo test` builds the cdylib with the rlib
/// (one lib target, all its crate types) into the deps folder this test runs from, so that one
/// is current. Failing that, target/<profile> (`cargo build --lib`), built here if missing.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let so_name = if cfg!(target_os = "macos") { "libadeadvm.dylib" } else { "libadeadvm.so" };
    let deps = exe.parent().unwrap().to_path_buf();
    if deps.join(so_name).exists() {
        return deps;
    }
    let profile_dir = deps.parent().unwrap().to_path_buf();
    let so = profile_dir.join(so_name);
    if !so.exists() {
        let target_dir = profile_dir.parent().unwrap();
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--lib"]).env("CARGO_TARGET_DIR", target_dir).current_dir(ROOT);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cannot run cargo build --lib");
        assert!(status.success(), "cargo build --lib failed");
    }
    assert!(so.exists(), "{} was not built", so.display());
    profile_dir
}

/// What the C example prints for y, computed through the Rust API on the same input.
fn expected_lines(program: &Program) -> Vec<String> {
    let mut s = Session::new(program, &Config::default()).unwrap();
    let x: Vec<f32> = (0..2 * 784).map(|i| ((i * 37) % 101) as f32 / 101.0 - 0.5).collect();
    s.set_input("x", HostTensor::from_f32(vec![2, 784], &x).unwrap()).unwrap();
    s.run().unwrap();
    let y = s.output("y").unwrap().to_f32().unwrap();
    let mut lines = vec![format!("digest {}", program.digest_hex())];
    lines.extend(y.iter().enumerate().map(|(i, v)| format!("y[{i}] = (0x{:08x})", v.to_bits())));
    lines
}

/// The README's C commands (the block after "Build and run the example"): the build lines, the
/// shared link, the run line, and the static link written inline after it.
struct ReadmeC {
    shared: String,
    run: String,
    static_: String,
}

fn readme_c() -> ReadmeC {
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let at = readme.find("Build and run the example from the repository root").expect("the C build text");
    let rest = &readme[at..];
    let block = &rest[rest.find("```sh\n").expect("a sh block") + 6..];
    let block = &block[..block.find("```").unwrap()];
    let lines: Vec<&str> = block.lines().collect();
    assert_eq!(lines[0], "cargo build --release --lib");
    let after = &rest[rest.find("link it statically").expect("the static link")..];
    let static_ = after[after.find('`').unwrap() + 1..].split('`').next().unwrap().to_string();
    ReadmeC { shared: lines[1].to_string(), run: lines[2].to_string(), static_ }
}

/// A README `cc` line as arguments, with this build's library folder for `target/release` and
/// `exe` for the output. The README's commands are also run exactly as written, from a fresh
/// clone's point of view, by python/tests/test_readme.py (CI); this test keeps them honest in
/// `cargo test` without a release build.
fn cc_args(line: &str, lib: &std::path::Path, exe: &std::path::Path) -> Vec<String> {
    let lib = lib.display().to_string();
    let line = line.replace("$PWD/target/release", &lib).replace("target/release", &lib);
    let mut args: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    assert_eq!(args[0], "cc", "{line}");
    let o = args.iter().position(|a| a == "-o").expect("-o in the README's cc line");
    args[o + 1] = exe.display().to_string();
    args.remove(0);
    args
}

#[test]
fn c_example_builds_links_and_runs() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "no C compiler `{cc}` in CI");
        skip::skipped("the C example", &format!("no C compiler `{cc}`"));
        return;
    }
    let lib = lib_dir();
    let out = tempfile::tempdir().unwrap();
    let readme = readme_c();
    assert_eq!(
        readme.shared,
        "cc examples/c/main.c -I include -L target/release -ladeadvm -Wl,-rpath,$PWD/target/release -o mlp"
    );
    assert_eq!(readme.run, "./mlp programs/mlp.s 784");
    let run_args: Vec<&str> = readme.run.split_whitespace().skip(1).collect();
    // Linked against the cdylib (found at run time through the rpath) and against the staticlib,
    // each as the README writes it, warnings as errors.
    let mut exes = Vec::new();
    let staticlib = lib.join("libadeadvm.a");
    assert!(staticlib.exists(), "{} was not built (crate-type staticlib)", staticlib.display());
    for (shared, line) in [(true, &readme.shared), (false, &readme.static_)] {
        let exe = out.path().join(if shared { "c_example_shared" } else { "c_example_static" });
        let build = Command::new(&cc)
            .current_dir(ROOT)
            .args(["-std=c99", "-Wall", "-Wextra", "-Werror"])
            .args(cc_args(line, &lib, &exe))
            .output()
            .unwrap();
        assert!(build.status.success(), "{line}: cc failed:\n{}", String::from_utf8_lossy(&build.stderr));
        exes.push(exe);
    }

    // Called wrongly, the example says how to call it (exit 2).
    for args in [&[][..], &["programs/mlp.s"], &["programs/mlp.s", "0"], &["programs/mlp.s", "78x"]] {
        let run = Command::new(&exes[0])
            .current_dir(ROOT)
            .args(args)
            .env("LD_LIBRARY_PATH", &lib)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("usage: "), "{stderr}");
        assert!(
            stderr.contains(" PROGRAM COLS\n  PROGRAM  a .s or .bib program with an input x of f32[2, COLS] and an output y\n"),
            "{stderr}"
        );
    }

    for program in [run_args[0].to_string(), {
        // The same program as .bib bytes.
        let bib = out.path().join("mlp.bib");
        let p = Program::load(format!("{ROOT}/programs/mlp.s")).unwrap();
        std::fs::write(&bib, p.verified().program().to_bytes()).unwrap();
        bib.display().to_string()
    }] {
        for exe in &exes {
            // This build's library first: cargo's LD_LIBRARY_PATH may name an older one.
            let run = Command::new(exe)
                .current_dir(ROOT)
                .args([program.as_str(), run_args[1]])
                .env("LD_LIBRARY_PATH", &lib)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&run.stdout);
            assert!(run.status.success(), "{program}: {stdout}\n{}", String::from_utf8_lossy(&run.stderr));
            assert!(
                stdout.contains("unknown input: status 7: unknown input nope (the program's inputs: x)"),
                "{stdout}"
            );
            assert!(
                stdout.contains("wrong dtype: status 8: input x is declared f32 but was given i32 data"),
                "{stdout}"
            );
            assert!(stdout.contains("y: dtype 0 shape [2, 10] 80 bytes"), "{stdout}");
            let got: Vec<String> = stdout
                .lines()
                .filter(|l| l.starts_with("digest ") || l.starts_with("y["))
                .map(|l| match l.split_once(" = ") {
                    // Compare the bits; the decimal text is for people.
                    Some((k, v)) => format!("{k} = {}", &v[v.find('(').unwrap()..]),
                    None => l.to_string(),
                })
                .collect();
            // The digest covers the debug info, which names the source as the C program did.
            let expected = if program.ends_with(".s") {
                let source = std::fs::read_to_string(format!("{ROOT}/{program}")).unwrap();
                Program::from_asm(&source, &program).unwrap()
            } else {
                Program::load(&program).unwrap()
            };
            assert_eq!(got, expected_lines(&expected), "{program}");
            assert!(stdout.ends_with("ok\n"));
        }
    }
}

fn load_mlp() -> *mut AdeadvmProgram {
    let path = format!("{ROOT}/programs/mlp.s\0");
    let mut p = null_mut();
    // SAFETY: a NUL-terminated path and a writable out-pointer.
    let st = unsafe { adeadvm_program_load(path.as_ptr().cast(), &mut p) };
    assert_eq!(st, AdeadvmStatus::Ok, "{}", last_error());
    p
}

fn new_session(p: *const AdeadvmProgram) -> *mut AdeadvmSession {
    let mut s = null_mut();
    // SAFETY: a live program, default config, writable out-pointer.
    assert_eq!(unsafe { adeadvm_session_new(p, null(), &mut s) }, AdeadvmStatus::Ok, "{}", last_error());
    s
}

/// Binds the MLP's input `x` (rows of 784) to `x`, which must succeed.
///
/// # Safety
/// `s` is a live session.
unsafe fn set_mlp_x(s: *mut AdeadvmSession, x: &[f32]) {
    let shape = [x.len() / 784, 784];
    // SAFETY: a live session (caller), pointers to live locals with their true lengths.
    let st = unsafe {
        adeadvm_session_set_input(
            s,
            c"x".as_ptr(),
            AdeadvmDtype::F32 as u32,
            shape.as_ptr(),
            2,
            x.as_ptr().cast(),
            x.len() * 4,
        )
    };
    assert_eq!(st, AdeadvmStatus::Ok, "{}", last_error());
}

fn c(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

#[test]
fn null_pointers_are_refused() {
    let mut p = null_mut();
    // SAFETY (all calls in this test): every non-null pointer is valid; the nulls are the test.
    unsafe {
        assert_eq!(adeadvm_program_load(null(), &mut p), AdeadvmStatus::NullPointer);
        assert_eq!(last_error(), "path is NULL");
        assert_eq!(adeadvm_program_load(c("x.bib").as_ptr().cast(), null_mut()), AdeadvmStatus::NullPointer);
        assert_eq!(last_error(), "out is NULL");
        assert_eq!(adeadvm_program_from_bytes(null(), 4, &mut p), AdeadvmStatus::NullPointer);
        assert_eq!(adeadvm_program_from_asm(null(), null(), &mut p), AdeadvmStatus::NullPointer);
        assert_eq!(adeadvm_program_digest(null(), null_mut(), 32), AdeadvmStatus::NullPointer);
        assert_eq!(last_error(), "program is NULL");
        assert_eq!(adeadvm_config_default(null_mut()), AdeadvmStatus::NullPointer);
        assert_eq!(adeadvm_session_new(null(), null(), null_mut()), AdeadvmStatus::NullPointer);
        assert_eq!(adeadvm_session_run(null_mut()), AdeadvmStatus::NullPointer);
        assert_eq!(last_error(), "session is NULL");
        let name = c("x");
        assert_eq!(
            adeadvm_session_set_input(null_mut(), name.as_ptr().cast(), 0, null(), 0, null(), 0),
            AdeadvmStatus::NullPointer
        );
        let prog = load_mlp();
        let s = new_session(prog);
        assert_eq!(adeadvm_session_set_input(s, null(), 0, null(), 0, null(), 0), AdeadvmStatus::NullPointer);
        assert_eq!(last_error(), "name is NULL");
        assert_eq!(
            adeadvm_session_set_input(s, name.as_ptr().cast(), 0, null(), 2, null(), 0),
            AdeadvmStatus::NullPointer
        );
        assert_eq!(last_error(), "shape is NULL");
        let shape = [1usize, 784];
        assert_eq!(
            adeadvm_session_set_input(s, name.as_ptr().cast(), 0, shape.as_ptr(), 2, null(), 3136),
            AdeadvmStatus::NullPointer
        );
        assert_eq!(last_error(), "data is NULL");
        let y = c("y");
        let (mut dt, mut rank, mut nb) = (0u32, 0usize, 0usize);
        let mut data: *const c_void = null();
        let mut dims = [0usize; 4];
        assert_eq!(
            adeadvm_session_output(
                s,
                y.as_ptr().cast(),
                null_mut(),
                dims.as_mut_ptr(),
                4,
                &mut rank,
                &mut data,
                &mut nb
            ),
            AdeadvmStatus::NullPointer
        );
        assert_eq!(last_error(), "dtype is NULL");
        assert_eq!(
            adeadvm_session_output(
                s,
                y.as_ptr().cast(),
                &mut dt,
                dims.as_mut_ptr(),
                4,
                &mut rank,
                &mut data,
                &mut nb
            ),
            AdeadvmStatus::NotWritten
        );
        adeadvm_session_free(s);
        adeadvm_program_free(prog);
        adeadvm_session_free(null_mut());
        adeadvm_program_free(null_mut());
    }
}

#[test]
fn sizes_names_and_dtypes_are_checked() {
    let prog = load_mlp();
    let s = new_session(prog);
    let x = vec![0.25f32; 2 * 784];
    let shape = [2usize, 784];
    let (xn, yn, zn) = (c("x"), c("y"), c("nope"));
    // SAFETY (all calls in this test): every pointer is valid for the sizes given, except
    // where the size is what is under test (and then it is checked before any read).
    unsafe {
        let set = |name: &[u8], dtype: u32, nbytes: usize| {
            adeadvm_session_set_input(
                s,
                name.as_ptr().cast(),
                dtype,
                shape.as_ptr(),
                2,
                x.as_ptr().cast(),
                nbytes,
            )
        };
        assert_eq!(set(&xn, 0, 12), AdeadvmStatus::InvalidArgument);
        assert_eq!(last_error(), "tensor `x`: shape [2, 784] of f32 needs 6272 bytes, but 12 were given");
        assert_eq!(set(&xn, 9, 6272), AdeadvmStatus::InvalidArgument);
        assert!(last_error().starts_with("dtype 9 is not one of"), "{}", last_error());
        assert_eq!(set(&xn, AdeadvmDtype::I32 as u32, 6272), AdeadvmStatus::DtypeMismatch);
        assert_eq!(last_error(), "input x is declared f32 but was given i32 data");
        assert_eq!(set(&zn, 0, 6272), AdeadvmStatus::UnknownName);
        assert_eq!(last_error(), "unknown input nope (the program's inputs: x)");
        assert_eq!(
            adeadvm_session_set_input(
                s,
                xn.as_ptr().cast(),
                0,
                shape.as_ptr(),
                1000,
                x.as_ptr().cast(),
                6272
            ),
            AdeadvmStatus::InvalidArgument
        );
        let bad_utf8 = [0xffu8, 0];
        assert_eq!(set(&bad_utf8, 0, 6272), AdeadvmStatus::InvalidArgument);
        assert_eq!(last_error(), "name is not UTF-8");

        assert_eq!(set(&xn, 0, 6272), AdeadvmStatus::Ok);
        assert_eq!(adeadvm_session_run(s), AdeadvmStatus::Ok);
        let (mut dt, mut rank, mut nb) = (0u32, 0usize, 0usize);
        let mut data: *const c_void = null();
        let mut dims = [0usize; 4];
        assert_eq!(
            adeadvm_session_output(
                s,
                yn.as_ptr().cast(),
                &mut dt,
                dims.as_mut_ptr(),
                1,
                &mut rank,
                &mut data,
                &mut nb
            ),
            AdeadvmStatus::BufferTooSmall
        );
        assert_eq!(rank, 2);
        assert_eq!(
            adeadvm_session_output(
                s,
                zn.as_ptr().cast(),
                &mut dt,
                dims.as_mut_ptr(),
                4,
                &mut rank,
                &mut data,
                &mut nb
            ),
            AdeadvmStatus::UnknownName
        );
        assert_eq!(last_error(), "the program has no output `nope` (its outputs are: y)");
        assert_eq!(
            adeadvm_session_output(
                s,
                yn.as_ptr().cast(),
                &mut dt,
                dims.as_mut_ptr(),
                4,
                &mut rank,
                &mut data,
                &mut nb
            ),
            AdeadvmStatus::Ok
        );
        assert_eq!((dt, rank, &dims[..2], nb), (AdeadvmDtype::F32 as u32, 2, &[2usize, 10][..], 80));

        let mut digest = [0u8; 32];
        assert_eq!(adeadvm_program_digest(prog, digest.as_mut_ptr(), 31), AdeadvmStatus::BufferTooSmall);
        assert_eq!(adeadvm_program_digest(prog, digest.as_mut_ptr(), 32), AdeadvmStatus::Ok);
        let mut n = 0usize;
        assert_eq!(adeadvm_program_tensor_count(prog, 1, &mut n), AdeadvmStatus::Ok);
        assert_eq!(n, 1);
        let mut name: *const c_char = null();
        assert_eq!(adeadvm_program_tensor_name(prog, 0, 0, &mut name), AdeadvmStatus::Ok);
        assert_eq!(CStr::from_ptr(name).to_str().unwrap(), "x");
        assert_eq!(adeadvm_program_tensor_name(prog, 0, 5, &mut name), AdeadvmStatus::InvalidArgument);
        assert_eq!(adeadvm_program_tensor_count(prog, 7, &mut n), AdeadvmStatus::InvalidArgument);

        let mut cfg = std::mem::zeroed::<AdeadvmConfig>();
        assert_eq!(adeadvm_config_default(&mut cfg), AdeadvmStatus::Ok);
        cfg.tier = 7;
        let mut s2 = null_mut();
        assert_eq!(adeadvm_session_new(prog, &cfg, &mut s2), AdeadvmStatus::InvalidArgument);
        cfg.tier = AdeadvmTier::Program as u32;
        let warp = c("warp");
        cfg.backend = warp.as_ptr().cast();
        assert_eq!(adeadvm_session_new(prog, &cfg, &mut s2), AdeadvmStatus::InvalidArgument);
        assert_eq!(last_error(), "unknown backend `warp` (expected cpu, vulkan or auto)");
        assert!(s2.is_null());

        adeadvm_session_free(s);
        adeadvm_program_free(prog);
    }
}

#[test]
fn load_errors_have_statuses_and_messages() {
    let mut p = null_mut();
    // SAFETY (all calls in this test): valid strings, buffers and out-pointers.
    unsafe {
        assert_eq!(adeadvm_program_load(c("/nonexistent/m.bib").as_ptr().cast(), &mut p), AdeadvmStatus::Io);
        assert!(last_error().starts_with("cannot read /nonexistent/m.bib: "), "{}", last_error());
        let junk = b"definitely not a program";
        assert_eq!(adeadvm_program_from_bytes(junk.as_ptr(), junk.len(), &mut p), AdeadvmStatus::Format);
        assert!(last_error().starts_with("not an adeadvm program"), "{}", last_error());
        let src = c(".input %x f32[2]\n    FROB %x\n");
        assert_eq!(
            adeadvm_program_from_asm(src.as_ptr().cast(), c("bad.s").as_ptr().cast(), &mut p),
            AdeadvmStatus::Assembly
        );
        assert!(last_error().contains("bad.s:2"), "{}", last_error());
        assert!(p.is_null());
        // The last error is per thread.
        let other = std::thread::spawn(last_error).join().unwrap();
        assert_eq!(other, "");
    }
}

/// Whether the Vulkan tests can run here; with ADEADVM_REQUIRE_VULKAN=1 (CI) they must.
fn vulkan() -> bool {
    match adeadvm::vm::shared_device() {
        Ok(_) => true,
        Err(e) => {
            let required = std::env::var("ADEADVM_REQUIRE_VULKAN").is_ok_and(|v| v == "1");
            assert!(!required, "ADEADVM_REQUIRE_VULKAN=1 but no Vulkan device: {e}");
            skip::skipped("the C ABI on Vulkan", &format!("no Vulkan device ({e})"));
            false
        }
    }
}

/// `AdeadvmConfig.max_device_memory` is `Config::max_device_memory` for C callers: set, a
/// Vulkan run that needs more device memory fails with ADEADVM_STATUS_BUDGET and the budget
/// message before anything is allocated on the device; 0 (the default) is the device's memory.
/// Called through the ABI from Rust, then from C against include/adeadvm.h.
#[test]
fn the_device_memory_budget_is_set_through_the_c_config() {
    if !vulkan() {
        return;
    }
    let x: Vec<f32> = (0..2 * 784).map(|i| ((i * 37) % 101) as f32 / 101.0 - 0.5).collect();
    let vulkan = c("vulkan");
    let run_with = |budget: u64| -> (AdeadvmStatus, String) {
        let prog = load_mlp();
        // SAFETY: a live program, valid pointers and sizes throughout.
        unsafe {
            let mut cfg = std::mem::zeroed::<AdeadvmConfig>();
            cfg.max_device_memory = 12345;
            assert_eq!(adeadvm_config_default(&mut cfg), AdeadvmStatus::Ok);
            assert_eq!(cfg.max_device_memory, 0, "the default is no budget of our own");
            cfg.backend = vulkan.as_ptr().cast();
            cfg.max_device_memory = budget;
            let mut s = null_mut();
            assert_eq!(adeadvm_session_new(prog, &cfg, &mut s), AdeadvmStatus::Ok, "{}", last_error());
            set_mlp_x(s, &x);
            let st = adeadvm_session_run(s);
            let err = if st == AdeadvmStatus::Ok { String::new() } else { last_error() };
            adeadvm_session_free(s);
            adeadvm_program_free(prog);
            (st, err)
        }
    };
    let (st, err) = run_with(65536);
    assert_eq!(st, AdeadvmStatus::Budget, "{err}");
    assert!(err.starts_with("this run needs "), "{err}");
    assert!(err.contains(" bytes of device memory on "), "{err}");
    assert!(err.ends_with("more than the device memory budget of 65536 bytes"), "{err}");
    let (st, err) = run_with(0);
    assert_eq!(st, AdeadvmStatus::Ok, "{err}");

    // The same from C, against the committed header.
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "no C compiler `{cc}` in CI");
        skip::skipped("the C half of the generation test", &format!("no C compiler `{cc}`"));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("budget.c");
    std::fs::write(
        &src,
        r#"#include <stdio.h>
#include "adeadvm.h"
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    AdeadvmProgram *program = NULL;
    if (adeadvm_program_load(argv[1], &program) != ADEADVM_STATUS_OK) return 3;
    AdeadvmConfig config;
    adeadvm_config_default(&config);
    config.backend = "vulkan";
    config.max_device_memory = 65536;
    AdeadvmSession *session = NULL;
    if (adeadvm_session_new(program, &config, &session) != ADEADVM_STATUS_OK) return 4;
    adeadvm_program_free(program);
    static float x[2 * 784];
    size_t shape[2] = {2, 784};
    if (adeadvm_session_set_input(session, "x", ADEADVM_DTYPE_F32, shape, 2, x, sizeof x) != ADEADVM_STATUS_OK) return 5;
    AdeadvmStatus st = adeadvm_session_run(session);
    printf("status %d: %s\n", (int)st, adeadvm_last_error());
    adeadvm_session_free(session);
    return st == ADEADVM_STATUS_BUDGET ? 0 : 1;
}
"#,
    )
    .unwrap();
    let lib = lib_dir();
    let exe = dir.path().join("budget");
    let build = Command::new(&cc)
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-I", &format!("{ROOT}/include")])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg("-ladeadvm")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .unwrap();
    assert!(build.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&build.stderr));
    // This build's library first: cargo's LD_LIBRARY_PATH may name an older one in target/<profile>.
    let run = Command::new(&exe)
        .arg(format!("{ROOT}/programs/mlp.s"))
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}{}", String::from_utf8_lossy(&run.stderr));
    assert!(
        stdout.starts_with(&format!("status {}: this run needs ", AdeadvmStatus::Budget as i32)),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("more than the device memory budget of 65536 bytes"), "{stdout}");
}

/// `AdeadvmConfig.devices` splits a session's batch over several executors, `pipeline` cuts its
/// program into stages over them: the output is one session's bits; a bad list is
/// ADEADVM_STATUS_INVALID_ARGUMENT with the list's error.
#[test]
fn the_c_config_splits_the_batch_over_devices() {
    let x: Vec<f32> = (0..5 * 784).map(|i| ((i * 37) % 101) as f32 / 101.0 - 0.5).collect();
    let output_of = |devices: Option<&[u8]>,
                     pipeline: Option<&[u8]>,
                     micro_batches: u32|
     -> Result<Vec<u8>, (AdeadvmStatus, String)> {
        let prog = load_mlp();
        // SAFETY: a live program, valid pointers and sizes throughout.
        unsafe {
            let mut cfg = std::mem::zeroed::<AdeadvmConfig>();
            assert_eq!(adeadvm_config_default(&mut cfg), AdeadvmStatus::Ok);
            assert!(cfg.devices.is_null(), "the default is one session");
            assert!(cfg.pipeline.is_null(), "the default is one session");
            assert_eq!(cfg.micro_batches, 0, "the default is the whole batch at once");
            cfg.micro_batches = micro_batches;
            if let Some(d) = devices {
                cfg.devices = d.as_ptr().cast();
            }
            if let Some(p) = pipeline {
                cfg.pipeline = p.as_ptr().cast();
            }
            let mut s = null_mut();
            let st = adeadvm_session_new(prog, &cfg, &mut s);
            adeadvm_program_free(prog);
            if st != AdeadvmStatus::Ok {
                return Err((st, last_error()));
            }
            set_mlp_x(s, &x);
            assert_eq!(adeadvm_session_run(s), AdeadvmStatus::Ok, "{}", last_error());
            let (mut dtype, mut rank, mut data, mut nbytes) = (0u32, 0usize, std::ptr::null(), 0usize);
            let mut out_shape = [0usize; 2];
            let st = adeadvm_session_output(
                s,
                c"y".as_ptr(),
                &mut dtype,
                out_shape.as_mut_ptr(),
                2,
                &mut rank,
                &mut data,
                &mut nbytes,
            );
            assert_eq!(st, AdeadvmStatus::Ok, "{}", last_error());
            assert_eq!(out_shape, [5, 10]);
            let bytes = std::slice::from_raw_parts(data.cast::<u8>(), nbytes).to_vec();
            adeadvm_session_free(s);
            Ok(bytes)
        }
    };
    let one = output_of(None, None, 0).unwrap();
    assert_eq!(output_of(Some(&c("cpu,cpu")), None, 0).unwrap(), one);
    let (st, err) = output_of(Some(&c("cpu,gpu")), None, 0).unwrap_err();
    assert_eq!(st, AdeadvmStatus::InvalidArgument);
    assert_eq!(err, "devices `cpu,gpu`: `gpu` is not `cpu` or `gpuN` (N a Vulkan device index)");
    // `pipeline` cuts the program into stages instead.
    assert_eq!(output_of(None, Some(&c("cpu,cpu")), 0).unwrap(), one);
    // Micro-batches on a pipeline of three CPU stages: five slices of one row.
    assert_eq!(output_of(None, Some(&c("cpu,cpu,cpu")), 5).unwrap(), one);
    let (st, err) = output_of(Some(&c("cpu")), Some(&c("cpu,cpu")), 0).unwrap_err();
    assert_eq!(st, AdeadvmStatus::InvalidArgument);
    assert_eq!(err, "config.devices and config.pipeline cannot both be set");
}
