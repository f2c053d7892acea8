//! Block-quantized constants (q8_0, q4_1): MATMUL and GATHER read them as the f32 values ggml's
//! dequantization defines, so the result is the same bits as the same instruction on those
//! values given as f32, on every executor. The dequantization here is the test's own (from
//! ggml's definition, in f64), not the VM's; the f32 runs it is compared with take the weights
//! as an ordinary input, through the f32 kernels.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use adeadvm::exec::cpu::SimdLevel;
use adeadvm::verify::VerifiedProgram;
use adeadvm::vm::{Backend, HostTensor, VmConfig};
use common::*;
use half::f16;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fmt {
    Q8_0,
    Q4_1,
}

impl Fmt {
    fn name(self) -> &'static str {
        match self {
            Fmt::Q8_0 => "q8_0",
            Fmt::Q4_1 => "q4_1",
        }
    }
}

/// Random blocks for `rows` rows of `k` values, with awkward scales mixed in (zero, f16
/// denormals, negative and large), and the values they stand for, from ggml's definition
/// computed in f64 and rounded once to f32 (exact for q8_0; for q4_1 `d·q` is exact and the
/// sum is rounded once, as the definition says).
fn random_blocks(fmt: Fmt, rows: usize, k: usize, rng: &mut Rng) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::new();
    let mut values = Vec::new();
    let scales = [0.0f32, 6.0e-8, -3.0e-6, 0.75, -2.5, 1024.0];
    for b in 0..rows * k / 32 {
        let pick = |rng: &mut Rng| {
            if b % 7 == 3 {
                scales[(rng.next_u64() % scales.len() as u64) as usize]
            } else {
                rng.uniform(-0.05, 0.05)
            }
        };
        let d = f16::from_f32(pick(rng));
        bytes.extend(d.to_bits().to_le_bytes());
        match fmt {
            Fmt::Q8_0 => {
                let qs: Vec<i8> = (0..32).map(|_| rng.next_u64() as i8).collect();
                bytes.extend(qs.iter().map(|&q| q as u8));
                values.extend(qs.iter().map(|&q| (d.to_f64() * q as f64) as f32));
            }
            Fmt::Q4_1 => {
                let m = f16::from_f32(pick(rng) * -1.5);
                bytes.extend(m.to_bits().to_le_bytes());
                let qs: Vec<u8> = (0..32).map(|_| (rng.next_u64() % 16) as u8).collect();
                // Byte j: element j in the low nibble, element j + 16 in the high one.
                bytes.extend((0..16).map(|j| qs[j] | (qs[j + 16] << 4)));
                values.extend(qs.iter().map(|&q| (d.to_f64() * q as f64 + m.to_f64()) as f32));
            }
        }
    }
    (bytes, values)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every CPU configuration (scalar, each SIMD level here, 1 and 3 threads), and the Vulkan
/// executor when there is a device.
fn configs() -> Vec<(String, VmConfig)> {
    let mut out = Vec::new();
    for simd in [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512] {
        if simd > SimdLevel::detect() {
            continue;
        }
        for threads in [1, 3] {
            out.push((
                format!("{} x{threads}", simd.name()),
                VmConfig {
                    simd: Some(simd),
                    threads: Some(threads),
                    backend: Backend::Cpu,
                    ..VmConfig::default()
                },
            ));
        }
    }
    if common::vk::exec().is_some() {
        out.push((
            "vulkan".into(),
            VmConfig { backend: Backend::Vulkan, threads: Some(1), ..VmConfig::default() },
        ));
    }
    out
}

fn outputs(
    program: &Arc<VerifiedProgram>,
    inputs: &[(&str, HostTensor)],
    config: VmConfig,
) -> BTreeMap<String, HostTensor> {
    run_with(program, inputs, config).unwrap_or_else(|e| panic!("{e}"))
}

/// MATMUL with a quantized b against MATMUL with the same values as an f32 input: the same
/// bits on every executor, for decode-like (M ≤ 8) and prompt-like shapes, with and without
/// bias and activation, and with batch axes on a.
#[test]
fn quantized_matmul_is_matmul_over_the_dequantized_values() {
    let mut rng = Rng(31);
    let cases: &[(&[usize], usize, usize, &str)] = &[
        (&[1], 7, 32, ""),
        (&[3], 64, 96, ", bias=%bias"),
        (&[2, 1], 300, 576, ""),
        (&[8], 33, 64, ", act=gelu"),
        (&[9], 40, 128, ", bias=%bias, act=relu"),
        (&[2, 37], 129, 192, ""),
        // Matrix-vector products (M <= 8, read from the blocks directly): every M, K of one
        // block, and N that leaves 1 to 7 columns after the groups of eight.
        (&[1], 1, 32, ""),
        (&[2], 9, 32, ""),
        (&[4], 8, 32, ", bias=%bias"),
        (&[5], 17, 32, ""),
        (&[6], 23, 64, ""),
        (&[7], 30, 96, ", act=relu"),
        (&[2, 4], 15, 160, ""),
    ];
    for fmt in [Fmt::Q8_0, Fmt::Q4_1] {
        for &(lead, n, k, extra) in cases {
            let (blocks, w) = random_blocks(fmt, n, k, &mut rng);
            let rows: usize = lead.iter().product();
            let x = rng.vec(rows * k, -2.0, 2.0);
            let bias = rng.vec(n, -1.0, 1.0);
            let dims = |last: usize| {
                let mut d: Vec<String> = lead.iter().map(|v| v.to_string()).collect();
                d.push(last.to_string());
                d.join(", ")
            };
            let body = format!(
                ".input %x f32[{}]\n.input %bias f32[{n}]\n.output y f32[{}]\nALLOC %t: f32[{}]\n",
                dims(k),
                dims(n),
                dims(n)
            );
            let tail = "STORE y, %t\nFREE %t\n".to_string();
            let quant_src = format!(
                ".const %w {}[{n}, {k}] = blocks(\"{}\")\n{body}MATMUL %t, %x, %w, tb{extra}\n{tail}",
                fmt.name(),
                hex(&blocks)
            );
            let plain_src = format!(".input %w f32[{n}, {k}]\n{body}MATMUL %t, %x, %w, tb{extra}\n{tail}");
            let (quant, plain) = (build(&quant_src), build(&plain_src));
            let xs: Vec<usize> = lead.iter().copied().chain([k]).collect();
            let ins = [("x", f32s(&xs, &x)), ("bias", f32s(&[n], &bias))];
            let mut with_w = ins.to_vec();
            with_w.push(("w", f32s(&[n, k], &w)));
            let scalar = VmConfig {
                simd: Some(SimdLevel::Scalar),
                threads: Some(1),
                backend: Backend::Cpu,
                ..VmConfig::default()
            };
            let want = outputs(&plain, &with_w, scalar)["y"].clone();
            // The fast tier (fused multiply-adds) against its own f32 MATMUL on the same
            // configuration: the chains are per output and in order there too.
            let quant_fast = build(&format!(".tier fast\n{quant_src}"));
            let plain_fast = build(&format!(".tier fast\n{plain_src}"));
            for (label, config) in configs() {
                let got = outputs(&quant, &ins, config.clone())["y"].clone();
                assert!(
                    got == want,
                    "{} {lead:?}x{k} @ [{n}, {k}]{extra} on {label}: not the bits of the f32 MATMUL",
                    fmt.name()
                );
                let got = outputs(&quant_fast, &ins, config.clone())["y"].clone();
                let want_fast = outputs(&plain_fast, &with_w, config)["y"].clone();
                assert!(
                    got == want_fast,
                    "{} {lead:?}x{k} @ [{n}, {k}]{extra} on {label}, fast tier: not the bits of the f32 MATMUL",
                    fmt.name()
                );
            }
            // And the f32 MATMUL itself is within its documented bound of the exact product.
            let got = want.to_f32().unwrap();
            if extra.is_empty() {
                for i in 0..rows {
                    for j in 0..n {
                        let dot: f64 = (0..k).map(|p| x[i * k + p] as f64 * w[j * k + p] as f64).sum();
                        let mag: f64 =
                            (0..k).map(|p| (x[i * k + p] as f64 * w[j * k + p] as f64).abs()).sum();
                        let bound = k as f64 * 2f64.powi(-24) * mag + 1e-30;
                        assert!((got[i * n + j] as f64 - dot).abs() <= bound, "row {i} col {j}");
                    }
                }
            }
        }
    }
}

/// The Vulkan executor at a language model's shapes (decode: 1 to 8 rows, the matrix-vector
/// kernel; prompt: 130 rows, the tiled kernel; N past a whole number of tiles; K of 576, 1536
/// and 2112, past the k one dispatch covers on lavapipe, so later dispatches resume the sums):
/// the bits of the f32 MATMUL on the CPU, with and without bias and activation, with batch axes
/// on a (taken as rows of one matrix, and with a bias per batch, not), in both formats.
#[test]
fn quantized_matmul_on_vulkan_at_model_shapes() {
    if common::vk::exec().is_none() {
        return;
    }
    let vulkan = VmConfig { backend: Backend::Vulkan, threads: Some(1), ..VmConfig::default() };
    let cpu = VmConfig { backend: Backend::Cpu, threads: Some(2), ..VmConfig::default() };
    let mut rng = Rng(2026);
    // (a's leading axes, N, K, extra operands, whether the bias has a's leading axes too)
    let cases: &[(&[usize], usize, usize, &str, bool)] = &[
        (&[1], 1000, 576, "", false),
        (&[8], 1000, 1536, ", bias=%bias, act=relu", false),
        (&[3, 1], 1003, 1536, ", bias=%bias", false),
        (&[2, 4], 1000, 576, ", act=gelu", false),
        (&[5], 300, 2112, ", bias=%bias", false),
        (&[130], 1000, 576, ", bias=%bias", false),
        (&[130], 1001, 1536, ", act=gelu", false),
        (&[2, 65], 1000, 576, ", bias=%bias, act=relu", true),
        (&[130], 300, 2112, "", false),
    ];
    for fmt in [Fmt::Q8_0, Fmt::Q4_1] {
        for &(lead, n, k, extra, full_bias) in cases {
            let (blocks, w) = random_blocks(fmt, n, k, &mut rng);
            let rows: usize = lead.iter().product();
            let x = rng.vec(rows * k, -2.0, 2.0);
            let dims = |last: usize| {
                let mut d: Vec<String> = lead.iter().map(|v| v.to_string()).collect();
                d.push(last.to_string());
                d.join(", ")
            };
            let (bias_shape, bias_dims) =
                if full_bias { (dims(n), [lead, &[n]].concat()) } else { (n.to_string(), vec![n]) };
            let bias = rng.vec(bias_dims.iter().product(), -1.0, 1.0);
            let body = format!(
                ".input %x f32[{}]\n.input %bias f32[{bias_shape}]\n.output y f32[{}]\nALLOC %t: f32[{}]\n",
                dims(k),
                dims(n),
                dims(n)
            );
            let tail = "STORE y, %t\nFREE %t\n";
            let quant = build(&format!(
                ".const %w {}[{n}, {k}] = blocks(\"{}\")\n{body}MATMUL %t, %x, %w, tb{extra}\n{tail}",
                fmt.name(),
                hex(&blocks)
            ));
            let plain =
                build(&format!(".input %w f32[{n}, {k}]\n{body}MATMUL %t, %x, %w, tb{extra}\n{tail}"));
            let xs: Vec<usize> = lead.iter().copied().chain([k]).collect();
            let ins = [("x", f32s(&xs, &x)), ("bias", f32s(&bias_dims, &bias))];
            let mut with_w = ins.to_vec();
            with_w.push(("w", f32s(&[n, k], &w)));
            let want = outputs(&plain, &with_w, cpu.clone())["y"].clone();
            let got = outputs(&quant, &ins, vulkan.clone())["y"].clone();
            assert!(
                got == want,
                "{} {lead:?}x{k} @ [{n}, {k}]{extra} on vulkan: not the bits of the f32 MATMUL",
                fmt.name()
            );
        }
    }
    // GATHER from a table of a model's embedding shape.
    for fmt in [Fmt::Q8_0, Fmt::Q4_1] {
        let (rows, k) = (1000, 576);
        let (blocks, w) = random_blocks(fmt, rows, k, &mut rng);
        let ids: Vec<i32> = (0..70).map(|i| (i * 389 % rows) as i32).collect();
        let p = build(&format!(
            ".const %e {}[{rows}, {k}] = blocks(\"{}\")\n.input %ids i32[70]\n.output y f32[70, {k}]\n\
             ALLOC %t: f32[70, {k}]\nGATHER %t, %e, %ids\nSTORE y, %t\nFREE %t\n",
            fmt.name(),
            hex(&blocks)
        ));
        let got = outputs(&p, &[("ids", i32s(&[70], &ids))], vulkan.clone())["y"].to_f32().unwrap();
        let want: Vec<f32> =
            ids.iter().flat_map(|&i| w[i as usize * k..(i as usize + 1) * k].to_vec()).collect();
        let same = got.len() == want.len() && got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{} GATHER of 70 rows of [{rows}, {k}] on vulkan", fmt.name());
    }
}

/// GATHER from a quantized table gives the dequantized rows, on every executor; an index out
/// of range is the same run-time error as for an f32 table.
#[test]
fn quantized_gather_gives_the_dequantized_rows() {
    let mut rng = Rng(5);
    for fmt in [Fmt::Q8_0, Fmt::Q4_1] {
        let (rows, k) = (50, 96);
        let (blocks, w) = random_blocks(fmt, rows, k, &mut rng);
        let ids = [0, 49, 7, 7, 23];
        let p = build(&format!(
            ".const %e {}[{rows}, {k}] = blocks(\"{}\")\n.input %ids i32[5]\n.output y f32[5, {k}]\n\
             ALLOC %t: f32[5, {k}]\nGATHER %t, %e, %ids\nSTORE y, %t\nFREE %t\n",
            fmt.name(),
            hex(&blocks)
        ));
        let want: Vec<f32> =
            ids.iter().flat_map(|&i| w[i as usize * k..(i as usize + 1) * k].to_vec()).collect();
        for (label, config) in configs() {
            let got = outputs(&p, &[("ids", i32s(&[5], &ids))], config.clone())["y"].to_f32().unwrap();
            let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{} GATHER on {label}", fmt.name());
            let err = run_with(&p, &[("ids", i32s(&[5], &[0, 1, 50, 2, 3]))], config).unwrap_err();
            assert!(
                err.contains("index 50 at position 2 of `ids` is outside the table's 50 rows"),
                "{label}: {err}"
            );
        }
    }
}

/// What a program may not do with a quantized constant, as the user is told.
#[test]
fn misuse_of_a_quantized_constant_is_explained() {
    let blocks = hex(&random_blocks(Fmt::Q8_0, 2, 32, &mut Rng(1)).0);
    let decl =
        format!(".const %w q8_0[2, 32] = blocks(\"{blocks}\")\n.input %x f32[2, 32]\n.output y f32[2, 32]\n");
    let err = try_build(&format!("{decl}ALLOC %t: f32[2, 32]\nADD %t, %x, %w\nSTORE y, %t\nFREE %t\n"))
        .unwrap_err();
    assert!(
        err.contains(
            "constant %w (q8_0[2, 32]) holds q8_0 blocks, which only MATMUL (as b, [N, K] with `tb`) and GATHER \
             (as the table, [rows, K]) can read; declare it f32 to use it here"
        ),
        "{err}"
    );
    let err = try_build(&format!("{decl}ALLOC %t: f32[2, 2]\nMATMUL %t, %x, %w\nFREE %t\n")).unwrap_err();
    assert!(err.contains("which only MATMUL (as b, [N, K] with `tb`)"), "{err}");
    // Rows must be whole blocks, and the hex must be exactly the blocks.
    let err = try_build(".const %w q4_1[2, 48] = blocks(\"00\")\n").unwrap_err();
    assert!(
        err.contains("`%w` is q4_1[2, 48], but a q4_1 constant's rows must be whole blocks of 32 values"),
        "{err}"
    );
    let err = try_build(".const %w q4_1[1, 32] = blocks(\"0011\")\n").unwrap_err();
    assert!(
        err.contains("`%w` is q4_1[1, 32], which takes 20 bytes of q4_1 blocks, but `blocks(...)` gives 2"),
        "{err}"
    );
    let err = try_build(".const %w q4_1[1, 32] = fill(1)\n").unwrap_err();
    assert!(err.contains("`gguf(\"path\", \"tensor\")` or `blocks(\"hex\")`"), "{err}");
    let err = try_build(".input %w q4_1[1, 32]\n").unwrap_err();
    assert!(err.contains("unknown element type `q4_1`"), "{err}");
    assert!(err.contains("`q4_1` is a storage type for constants only"), "{err}");
}

/// `gguf(...)` keeps a tensor's blocks only when the declared type is the file's; the program's
/// data is then the file's bytes, and disassembly gives text that assembles to the same program.
#[test]
fn gguf_blocks_are_kept_as_stored_and_round_trip() {
    use adeadvm::asm::{assemble, disassemble, AsmOptions, DisasmOptions};
    use adeadvm::gguf::build::{file, T};
    let dir = tempfile::tempdir().unwrap();
    let (q8, _) = random_blocks(Fmt::Q8_0, 4, 64, &mut Rng(2));
    let (q4, _) = random_blocks(Fmt::Q4_1, 3, 96, &mut Rng(3));
    let path = dir.path().join("m.gguf");
    std::fs::write(
        &path,
        file(
            &[],
            &[
                T { name: "a", dims: &[64, 4], ty: 8, data: &q8 },
                T { name: "b", dims: &[96, 3], ty: 3, data: &q4 },
            ],
        ),
    )
    .unwrap();
    let options = AsmOptions { defines: Vec::new(), base_dir: dir.path().to_path_buf() };
    let src =
        ".const %a q8_0[4, 64] = gguf(\"m.gguf\", \"a\")\n.const %b q4_1[3, 96] = gguf(\"m.gguf\", \"b\")\n";
    let p = assemble(src, "q.s", &options).unwrap();
    assert_eq!(
        p.const_bytes(match &p.tensors[0].kind {
            adeadvm::format::TensorKind::Const(c) => c,
            _ => unreachable!(),
        }),
        Some(&q8[..])
    );
    let bytes = p.to_bytes();
    let loaded = adeadvm::format::Program::from_bytes(bytes.clone()).unwrap();
    assert_eq!(loaded.version, (1, 1), "a program with blocks is written as format 1.1");
    for data_dir in [None, Some(dir.path().join("data"))] {
        let text = disassemble(
            &p,
            &DisasmOptions {
                data_dir: data_dir.clone(),
                asm_dir: dir.path().to_path_buf(),
                summarize_large: false,
            },
        )
        .unwrap();
        let again = assemble(&text, "q.s", &options).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(again.to_bytes() == bytes, "round trip through {data_dir:?}:\n{text}");
    }
    let err = assemble(".const %a q4_1[4, 64] = gguf(\"m.gguf\", \"a\")\n", "q.s", &options)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`m.gguf`: tensor `a` is Q8_0, but `%a` is declared q4_1[4, 64]"), "{err}");
    assert!(err.contains("declare it as q8_0 or as f32 (dequantized)"), "{err}");
}

/// A .bib whose blocks constant is malformed is refused with a message naming the defect: an
/// unknown format byte when loading, a wrong byte count, a dtype other than f32 or rows that
/// are not whole blocks when verifying.
#[test]
fn malformed_blocks_constants_are_refused() {
    use adeadvm::format::{ConstData, Program, TensorKind};
    use adeadvm::isa::{BlockFormat, DType, Dim};
    let blocks = hex(&random_blocks(Fmt::Q4_1, 2, 64, &mut Rng(8)).0);
    let src = format!(
        ".const %w q4_1[2, 64] = blocks(\"{blocks}\")\n.input %x f32[1, 64]\n.output y f32[1, 2]\n\
         ALLOC %t: f32[1, 2]\nMATMUL %t, %x, %w, tb\nSTORE y, %t\nFREE %t\n"
    );
    let options =
        adeadvm::asm::AsmOptions { defines: Vec::new(), base_dir: std::env::current_dir().unwrap() };
    let good = adeadvm::asm::assemble(&src, "q.s", &options).unwrap();
    let verify = |p: Program| adeadvm::verify::verify(p).err().map(|e| e.to_string()).unwrap_or_default();

    // The format byte follows the kind byte 4, the dtype, the shape and the name (a u32 length, "w").
    let bytes = good.to_bytes();
    let at = bytes.windows(5).position(|w| w == [1, 0, 0, 0, b'w']).expect("the name `w`") + 5;
    assert_eq!(bytes[at], BlockFormat::Q4_1 as u8);
    let mut bad = bytes.clone();
    bad[at] = 9;
    let err = Program::from_bytes(common::hostile::seal(&bad).unwrap()).unwrap_err().to_string();
    assert!(err.contains("constant \"w\" has unknown block format byte 9"), "{err}");

    let with = |f: &dyn Fn(&mut adeadvm::format::TensorDecl)| {
        let mut p = good.clone();
        f(&mut p.tensors[0]);
        verify(p)
    };
    let err = with(&|t| {
        if let TensorKind::Const(ConstData::Blocks { len, .. }) = &mut t.kind {
            *len -= 20;
        }
    });
    assert!(
        err.contains("constant q4_1[2, 64] needs 80 bytes (4 blocks of 20 bytes) but its data is 60 bytes"),
        "{err}"
    );
    let err = with(&|t| t.dtype = DType::I32);
    assert!(err.contains("stores q4_1 blocks, whose values are f32, so its dtype must be f32"), "{err}");
    let err = with(&|t| t.shape = vec![Dim::Const(4), Dim::Const(32)]);
    assert!(err.contains("inner dimensions differ"), "{err}");
    // A scale that is not finite (f16 inf in block 1's `d`): refused by the assembler at the
    // value, and by the verifier in a .bib.
    let mut raw = random_blocks(Fmt::Q4_1, 2, 64, &mut Rng(8)).0;
    raw[20..22].copy_from_slice(&0x7c00u16.to_le_bytes());
    let err = try_build(&format!(".const %w q4_1[2, 64] = blocks(\"{}\")\n", hex(&raw))).unwrap_err();
    assert!(err.contains("block 1 of `%w` has a scale or min that is not finite (f16 bits 0x7c00)"), "{err}");
    let mut p = good.clone();
    let mut data = p.data.to_vec();
    let TensorKind::Const(ConstData::Blocks { offset, .. }) = p.tensors[0].kind else { unreachable!() };
    data[offset as usize + 42..offset as usize + 44].copy_from_slice(&0xfe00u16.to_le_bytes());
    p.data = adeadvm::format::Blob::from_vec(data);
    let err = verify(p);
    assert!(
        err.contains(
            "block 2 of constant q4_1[2, 64] has a scale or min that is not finite (f16 bits 0xfe00)"
        ),
        "{err}"
    );
    let err = with(&|t| t.shape = vec![Dim::Const(8), Dim::Const(16)]);
    assert!(err.contains("constant q4_1[8, 16] stores q4_1 blocks along its last axis"), "{err}");
}
