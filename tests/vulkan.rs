//! Vulkan executor: strict-tier kernels against the CPU reference (bits), the committed SPIR-V
//! against its GLSL source, NoContraction on every float add/sub/mul, and errors as users see them.
//!
//! With no Vulkan device these tests print "skipped: ..." and pass, unless
//! ADEADVM_REQUIRE_VULKAN=1 (CI), where a missing device or glslc fails them.

mod common;

use std::process::Command;

use adeadvm::exec::cpu::reference::{Binary, Unary};
use adeadvm::exec::vulkan::{self, SHADERS};
use common::vk::{exec, required, BINARY, UNARY};

/// Special values: zeros, denormals, FLT_MIN neighbours, ones, huge, infinities, NaN payloads.
fn specials() -> Vec<f32> {
    let bits: &[u32] = &[
        0x0000_0000,
        0x8000_0000,
        0x0000_0001,
        0x8000_0001,
        0x0000_0100,
        0x007f_ffff,
        0x807f_ffff,
        0x0040_0000,
        0x0080_0000,
        0x8080_0000,
        0x0080_0001,
        0x0100_0000,
        0x0c80_0000,
        0x1f80_0000,
        0x2000_0000,
        0x3380_0000,
        0x3400_0000,
        0x3f00_0000,
        0x3f80_0000,
        0xbf80_0000,
        0x3f7f_ffff,
        0x3f80_0001,
        0x4000_0000,
        0xc000_0000,
        0x3fc0_0000,
        0x4049_0fdb,
        0x3f31_7218,
        0x42b1_999a,
        0x42b1_7218,
        0x42b2_0000,
        0xc2ae_ac50,
        0xc2cf_ffff,
        0xc2d0_0000,
        0xc2d0_0001,
        0x3f0c_cccd,
        0x3f0c_cccc,
        0x3f60_0000,
        0x4078_0000,
        0x4077_ffff,
        0x3880_0000,
        0x5f80_0000,
        0x7f00_0000,
        0x7f7f_ffff,
        0xff7f_ffff,
        0x7f80_0000,
        0xff80_0000,
        0x7fc0_0000,
        0xffc0_0000,
        0x7f80_0001,
        0x7fbf_ffff,
        0xff80_0001,
        0x7fc0_1234,
        0xffff_ffff,
        0x1e3c_e508,
        0x9e3c_e508,
        0x2f80_0000,
        // RSQRT's corrected significands (numerics::RSQRT_UP), the 0x7e7ffffe among them.
        0x4009_f038,
        0x407f_fffe,
        0x7e7f_fffe,
        0x0109_f038,
        0x3f7f_fffe,
    ];
    bits.iter().map(|&b| f32::from_bits(b)).collect()
}

/// Every 997th bit pattern over 2^32, plus the specials.
fn dense_sample() -> Vec<f32> {
    let mut v: Vec<f32> = (0..=u32::MAX / 997).map(|i| f32::from_bits(i * 997)).collect();
    v.extend(specials());
    v
}

/// Deterministic pseudo-random bits (splitmix-like), so failures reproduce.
fn mix(mut x: u64) -> u32 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) as u32
}

/// Operand pairs: all specials crossed, random bit patterns, random values of similar magnitude,
/// and products / quotients landing near FLT_MIN (where the flush-after-rounding rule matters).
fn pairs() -> (Vec<f32>, Vec<f32>) {
    let s = specials();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for &x in &s {
        for &y in &s {
            a.push(x);
            b.push(y);
        }
    }
    for i in 0..400_000u64 {
        a.push(f32::from_bits(mix(2 * i)));
        b.push(f32::from_bits(mix(2 * i + 1)));
    }
    for i in 0..200_000u64 {
        let (x, y) = (mix(3 * i), mix(3 * i + 1));
        let e = mix(3 * i + 2) % 254 + 1;
        let ey = (e as i32 + (x % 5) as i32 - 2).clamp(1, 254) as u32;
        a.push(f32::from_bits((x & 0x807f_ffff) | (e << 23)));
        b.push(f32::from_bits((y & 0x807f_ffff) | (ey << 23)));
    }
    for i in 0..200_000u64 {
        // Exponent fields summing to about 127 - 126: products near 2^-126, quotients likewise.
        let (x, y, z) = (mix(5 * i), mix(5 * i + 1), mix(5 * i + 2));
        let ea = z % 120 + 2;
        let eb = (128 - ea as i32 + (y % 3) as i32 - 1).clamp(1, 254) as u32;
        let eb_div = (ea as i32 + 126 - (x % 3) as i32).clamp(1, 254) as u32;
        a.push(f32::from_bits((x & 0x807f_ffff) | (ea << 23)));
        b.push(f32::from_bits((y & 0x807f_ffff) | (if i % 2 == 0 { eb } else { eb_div } << 23)));
    }
    (a, b)
}

fn compare(what: &str, inputs: &dyn Fn(usize) -> String, want: &[f32], got: &[f32]) {
    assert_eq!(want.len(), got.len(), "{what}: length");
    let bad: Vec<usize> = (0..want.len()).filter(|&i| want[i].to_bits() != got[i].to_bits()).collect();
    if let Some(&i) = bad.first() {
        panic!(
            "{what}: {} of {} results differ from the CPU reference; first at {}: {} -> cpu {:#010x} ({}), vulkan {:#010x} ({})",
            bad.len(),
            want.len(),
            i,
            inputs(i),
            want[i].to_bits(),
            want[i],
            got[i].to_bits(),
            got[i]
        );
    }
}

#[test]
fn unary_ops_match_cpu_reference_bits() {
    let Some(ex) = exec() else { return };
    let x = dense_sample();
    for op in UNARY {
        let got = ex.unary(op, &x).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        let want: Vec<f32> = x.iter().map(|&v| op.apply(v)).collect();
        compare(&format!("{op:?}"), &|i| format!("x = {:#010x}", x[i].to_bits()), &want, &got);
    }
}

/// The strict GELU's erf on the GPU takes plain arithmetic from |x / sqrt 2| = 2^-14 to 3.875
/// (strict.glsl says why that gives the strict bits) and one polynomial of four by interval: a
/// dense sweep of |x| from 2^-16 to 8, and every boundary's neighbours (x = b * sqrt 2 for each
/// interval boundary b of erf's argument).
#[test]
fn strict_gelu_intervals_match_cpu_reference_bits() {
    let Some(ex) = exec() else { return };
    let (lo, hi) = (0x3780_0000u32, 0x4100_0000u32); // 2^-16 and 8
    let mut x: Vec<f32> = (lo..hi).step_by(61).map(f32::from_bits).collect();
    for b in [2f32.powi(-14), 0.875, 1.375, 2.0, 2.75, 3.875] {
        let centre = (b * std::f32::consts::SQRT_2).to_bits();
        for d in 0..2000u32 {
            x.push(f32::from_bits(centre.wrapping_add(d)));
            x.push(f32::from_bits(centre.wrapping_sub(d)));
        }
    }
    x.extend(x.clone().iter().map(|v| -v));
    let got = ex.unary(Unary::Gelu, &x).unwrap();
    let want: Vec<f32> = x.iter().map(|&v| Unary::Gelu.apply(v)).collect();
    compare("gelu", &|i| format!("x = {:#010x}", x[i].to_bits()), &want, &got);
}

/// The strict exp's two paths on the GPU (plain arithmetic from |x| = 2^-40, the canonicalizing
/// steps below): around the threshold, and around every multiple of ln 2 in range, where k
/// changes and r is smallest.
#[test]
fn strict_exp_paths_match_cpu_reference_bits() {
    let Some(ex) = exec() else { return };
    let mut x: Vec<f32> = (0x2b70_0000u32..0x2b90_0000).step_by(5).map(f32::from_bits).collect();
    x.extend(x.clone().iter().map(|v| -v));
    for k in -151..=128 {
        let centre = (k as f32 * std::f32::consts::LN_2).to_bits();
        for d in 0..400u32 {
            x.push(f32::from_bits(centre.wrapping_add(d)));
            x.push(f32::from_bits(centre.wrapping_sub(d)));
        }
    }
    let got = ex.unary(Unary::Exp, &x).unwrap();
    let want: Vec<f32> = x.iter().map(|&v| Unary::Exp.apply(v)).collect();
    compare("exp", &|i| format!("x = {:#010x}", x[i].to_bits()), &want, &got);
}

#[test]
fn binary_ops_match_cpu_reference_bits() {
    let Some(ex) = exec() else { return };
    let (a, b) = pairs();
    for op in BINARY {
        let got = ex.binary(op, &a, &b).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        let want: Vec<f32> = a.iter().zip(&b).map(|(&x, &y)| op.apply(x, y)).collect();
        let at = |i: usize| format!("a = {:#010x}, b = {:#010x}", a[i].to_bits(), b[i].to_bits());
        compare(&format!("{op:?}"), &at, &want, &got);
    }
}

#[test]
fn binary_scalar_ops_match_cpu_reference_bits() {
    let Some(ex) = exec() else { return };
    let a: Vec<f32> = (0..=u32::MAX / 65_521).map(|i| f32::from_bits(i * 65_521)).chain(specials()).collect();
    let mut scalars = specials();
    scalars.extend((0..8).map(|i| f32::from_bits(mix(1000 + i))));
    for op in BINARY {
        for &s in &scalars {
            let got = ex.binary_scalar(op, &a, s).unwrap_or_else(|e| panic!("{op:?}: {e}"));
            let want: Vec<f32> = a.iter().map(|&x| op.apply(x, s)).collect();
            let at = |i: usize| format!("a = {:#010x}, s = {:#010x}", a[i].to_bits(), s.to_bits());
            compare(&format!("{op:?} scalar"), &at, &want, &got);
        }
    }
}

#[test]
fn empty_and_mismatched_inputs() {
    let Some(ex) = exec() else { return };
    assert!(ex.unary(Unary::Exp, &[]).unwrap().is_empty());
    let e = ex.binary(Binary::Add, &[1.0, 2.0], &[1.0]).unwrap_err();
    assert_eq!(e.to_string(), "invalid Vulkan dispatch: binary operands of 2 and 1 elements");
    // Not a multiple of the workgroup size, and one element.
    let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.37 - 100.0).collect();
    let got = ex.unary(Unary::Tanh, &x).unwrap();
    assert!(x.iter().zip(&got).all(|(&v, g)| Unary::Tanh.apply(v).to_bits() == g.to_bits()));
    assert_eq!(ex.binary_scalar(Binary::Div, &[1.0], 3.0).unwrap()[0].to_bits(), (1.0f32 / 3.0).to_bits());
}

#[test]
fn reflected_interfaces() {
    // (name, storage-buffer bindings, push-constant bytes) of the kernels whose launchers fix them.
    let known: &[(&str, u32, u32)] = &[
        ("unary", 2, 12),
        ("binary", 3, 112),
        ("binary_scalar", 2, 12),
        ("binary_i32", 3, 112),
        ("unary_i32", 2, 8),
        ("fill", 1, 8),
        ("rand", 1, 20),
        ("cast", 2, 16),
        ("gelu_cast", 2, 16),
        ("unpack16", 2, 4),
        ("pack16", 2, 4),
        ("strided_copy", 2, 112),
        ("gather", 4, 20),
        ("scatter", 4, 20),
        ("window16", 2, 32),
        ("set_word", 1, 8),
        ("argmax", 2, 8),
        ("compare", 3, 112),
        ("select", 4, 64),
        ("sgemm_split_pieces", 3, 16),
        ("sgemm_split_finish", 6, 124),
    ];
    for (name, bytes) in SHADERS {
        let words = vulkan::spirv_words(bytes).unwrap();
        let i = vulkan::reflect(&words).unwrap();
        // Every kernel: bindings 0..k (dst first, no gaps) and at most 128 push-constant bytes.
        assert_eq!(i.bindings, (0..i.bindings.len() as u32).collect::<Vec<_>>(), "{name}");
        assert!(i.push_bytes <= 128 && i.push_bytes.is_multiple_of(4), "{name}: {} push bytes", i.push_bytes);
        if let Some(&(_, b, p)) = known.iter().find(|k| k.0 == *name) {
            assert_eq!((i.bindings.len() as u32, i.push_bytes), (b, p), "{name}");
        }
    }
    for (name, ..) in known {
        assert!(SHADERS.iter().any(|s| s.0 == *name), "{name} is not embedded");
    }
    let e = vulkan::spirv_words(&[1, 2, 3, 4]).unwrap_err();
    assert!(e.contains("not a SPIR-V module"), "{e}");
}

#[test]
fn committed_spirv_is_current() {
    let root = env!("CARGO_MANIFEST_DIR");
    if Command::new("glslc").arg("--version").output().is_err() {
        assert!(!required(), "ADEADVM_REQUIRE_VULKAN=1 but glslc is not on PATH");
        common::skip::skipped("shaders/spv is current", "glslc is not on PATH");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut sources = 0;
    for entry in std::fs::read_dir(format!("{root}/shaders")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "comp") {
            continue;
        }
        sources += 1;
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        let out = dir.path().join(format!("{name}.spv"));
        // The same command as shaders/build.sh, from the repository root.
        let source = std::fs::read_to_string(&path).unwrap();
        let st = if source.contains("GL_NV_cooperative_matrix2") {
            let run = Command::new("python3")
                .current_dir(root)
                .args(["shaders/glslang_cm2.py", &format!("shaders/{name}.comp")])
                .arg(&out)
                .output();
            // No python3, or no compiler with GL_NV_cooperative_matrix2 (exit 3: the script says
            // which to install).
            let missing = match &run {
                Err(e) => Some(format!("python3 cannot be run ({e})")),
                Ok(st) if st.status.code() == Some(3) => {
                    Some(String::from_utf8_lossy(&st.stderr).into_owned())
                }
                Ok(_) => None,
            };
            if let Some(why) = missing {
                assert!(
                    !required(),
                    "ADEADVM_REQUIRE_VULKAN=1 but {name}.comp cannot be compiled here: {why}"
                );
                common::skip::skipped(&format!("shaders/spv/{name}.spv is current"), why.trim());
                continue;
            }
            run.unwrap()
        } else {
            let env = if source.contains("GL_KHR_shader_subgroup") {
                "--target-env=vulkan1.1"
            } else {
                "--target-env=vulkan1.0"
            };
            Command::new("glslc")
                .current_dir(root)
                .args(["-O", env, "-I", "shaders/include"])
                .arg(format!("shaders/{name}.comp"))
                .arg("-o")
                .arg(&out)
                .output()
                .unwrap()
        };
        assert!(st.status.success(), "compiling {name}.comp failed: {}", String::from_utf8_lossy(&st.stderr));
        let fresh = std::fs::read(&out).unwrap();
        let committed = std::fs::read(format!("{root}/shaders/spv/{name}.spv"))
            .unwrap_or_else(|e| panic!("shaders/spv/{name}.spv: {e}; run `sh shaders/build.sh`"));
        assert!(fresh == committed, "shaders/spv/{name}.spv is stale; run `sh shaders/build.sh` and commit");
        let embedded = SHADERS.iter().find(|(n, _)| *n == name);
        assert!(
            embedded.is_some_and(|(_, b)| *b == committed),
            "{name} is not embedded in SHADERS or differs"
        );
    }
    assert_eq!(sources, SHADERS.len(), "every shaders/*.comp is embedded, and only those");
}

/// Kernels that only move or convert bits with integer operations: they must contain no float
/// arithmetic at all (so none can be contracted or rounded by a driver).
const INTEGER_ONLY: &[&str] = &[
    "binary_i32",
    "unary_i32",
    "fill",
    "cast",
    "unpack16",
    "pack16",
    "transpose16",
    "strided_copy",
    "gather",
    "scatter",
    "window16",
    "set_word",
    "argmax",
    "compare",
    "select",
];

#[test]
fn strict_shaders_never_contract() {
    use rspirv::dr::Operand;
    use rspirv::spirv::{Decoration, Op};
    for (name, bytes) in SHADERS.iter().filter(|(name, _)| !vulkan::fast_only(name)) {
        let module = rspirv::dr::load_words(vulkan::spirv_words(bytes).unwrap()).unwrap();
        // Result types that are integers (or integer vectors): extended instructions on them
        // (findMSB and the like) are exact, unlike the float ones.
        let int_types: std::collections::HashSet<u32> = {
            let ints: std::collections::HashSet<u32> = module
                .types_global_values
                .iter()
                .filter(|t| t.class.opcode == Op::TypeInt)
                .filter_map(|t| t.result_id)
                .collect();
            let vectors = module.types_global_values.iter().filter(|t| {
                t.class.opcode == Op::TypeVector
                    && matches!(t.operands.first(), Some(Operand::IdRef(c)) if ints.contains(c))
            });
            let vectors: Vec<u32> = vectors.filter_map(|t| t.result_id).collect();
            ints.into_iter().chain(vectors).collect()
        };
        let precise: std::collections::HashSet<u32> = module
            .annotations
            .iter()
            .filter(|a| a.class.opcode == Op::Decorate)
            .filter(|a| matches!(a.operands.get(1), Some(Operand::Decoration(Decoration::NoContraction))))
            .filter_map(|a| match a.operands.first() {
                Some(Operand::IdRef(id)) => Some(*id),
                _ => None,
            })
            .collect();
        let mut arith = 0;
        for f in &module.functions {
            for block in &f.blocks {
                for i in &block.instructions {
                    if matches!(i.class.opcode, Op::FAdd | Op::FSub | Op::FMul) {
                        arith += 1;
                        let id = i.result_id.unwrap();
                        assert!(
                            precise.contains(&id),
                            "{name}: {:?} %{id} lacks NoContraction",
                            i.class.opcode
                        );
                    }
                    // NVIDIA's driver (580, H200) unrolls a loop marked Unroll and leaves
                    // NoContraction on the first copy only: `precise` x * a + b in such a loop
                    // ran as FFMA (its SASS, scripts/nvidia-sass.py). Strict loops stay unmarked.
                    if i.class.opcode == Op::LoopMerge {
                        let unroll = matches!(i.operands.get(2),
                            Some(Operand::LoopControl(c)) if c.contains(rspirv::spirv::LoopControl::UNROLL));
                        assert!(!unroll, "{name}: a strict shader asks the driver to unroll a loop");
                    }
                    let float_ext = i.class.opcode == Op::ExtInst
                        && !i.result_type.is_some_and(|t| int_types.contains(&t));
                    assert!(
                        !matches!(i.class.opcode, Op::FDiv | Op::FMod | Op::FRem) && !float_ext,
                        "{name}: strict shaders must not use {:?} on floats (vendor-rounded)",
                        i.class.opcode
                    );
                }
            }
        }
        if INTEGER_ONLY.contains(name) {
            assert_eq!(arith, 0, "{name}: an integer-only kernel does float arithmetic");
        } else {
            assert!(arith > 0, "{name}: no float arithmetic found; the check would be vacuous");
        }
    }
}

#[test]
fn missing_loader_is_a_clear_error() {
    // A child process, so the override does not leak into the other tests' device.
    let out = Command::new(env!("CARGO_BIN_EXE_adeadvm"))
        .arg("info")
        .env(vulkan::LIBRARY_ENV, "/nonexistent/libvulkan.so.1")
        .output()
        .unwrap();
    assert!(out.status.success(), "adeadvm info failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("vulkan  Vulkan is unavailable: cannot load /nonexistent/libvulkan.so.1: ")
            && text.contains("every program runs on the CPU"),
        "{text}"
    );
}

#[test]
fn info_lists_devices_or_says_why_not() {
    let out = Command::new(env!("CARGO_BIN_EXE_adeadvm")).arg("info").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    match vulkan::devices() {
        Ok(devs) => {
            for d in &devs {
                assert!(text.contains(&d.name), "{text}");
            }
            assert!(text.contains("fp32 denormals: preserve"), "{text}");
            // One tensor-core line a device, saying what the probe found.
            let tensor_lines: Vec<&str> =
                text.lines().filter(|l| l.contains("tensor cores (fast-tier MATMUL): ")).collect();
            assert_eq!(tensor_lines.len(), devs.len(), "{text}");
            for (d, line) in devs.iter().zip(&tensor_lines) {
                let want = match d.coopmat {
                    Some(c) if c.bf16 => "f16 and bf16 on workgroup-scope cooperative matrices",
                    Some(_) => "f16 on workgroup-scope cooperative matrices",
                    None => "none (f16 and bf16 widen to f32; needs VK_NV_cooperative_matrix2)",
                };
                assert!(line.contains(&format!("MATMUL): {want}")), "{}: {line}", d.name);
            }
        }
        Err(e) => {
            assert!(!required(), "ADEADVM_REQUIRE_VULKAN=1 but devices() failed: {e}");
            assert!(text.contains("Vulkan is unavailable"), "{text}");
        }
    }
}

#[test]
fn zero_sized_buffers_are_refused() {
    let Some(ex) = exec() else { return };
    assert_eq!(
        vulkan::Buffer::new(ex.device(), 0).err().map(|e| e.to_string()).as_deref(),
        Some("invalid Vulkan dispatch: a buffer of zero bytes")
    );
}
