//! The assembler's GGUF constant source `gguf("path", "tensor")`, `.define NAME
//! gguf_meta("path", "key")`, and the constant sources `arange`, `rope_cos(theta)` and
//! `rope_sin(theta)`: values, and error messages exactly as `adeadvm asm` prints them.

#[path = "support/smollm.rs"]
mod smollm;

use adeadvm::asm::{assemble, AsmOptions};
use adeadvm::format::{Program, TensorKind};
use adeadvm::gguf::build;

fn opts(dir: &std::path::Path) -> AsmOptions {
    AsmOptions { defines: vec![], base_dir: dir.to_path_buf() }
}

fn bytes(p: &Program, i: usize) -> Vec<u8> {
    match p.tensors[i].kind {
        TensorKind::Const(c) => p.const_bytes(&c).unwrap().to_vec(),
        _ => panic!("not a constant"),
    }
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect()
}

fn u16s(b: &[u8]) -> Vec<u16> {
    b.chunks_exact(2).map(|w| u16::from_le_bytes([w[0], w[1]])).collect()
}

fn strv(s: &str) -> Vec<u8> {
    let mut v = Vec::new();
    build::string(&mut v, s);
    v
}

/// A model file: `w` Q8_0 GGUF dims [32, 2] (d = 0.5 then 2.0, q = i - 16), `q` Q4_1 [32]
/// (d = 0.25, m = -1.5, byte j = (15 - j) << 4 | j), `norm` F32 [3], `old` Q4_0 [32]; metadata
/// of several types.
fn write_model(dir: &std::path::Path) {
    let mut w = Vec::new();
    for d in [0x3800u16, 0x4000] {
        w.extend_from_slice(&d.to_le_bytes());
        w.extend((0..32).map(|i: i32| (i - 16) as i8 as u8));
    }
    let mut q = vec![0x00, 0x34, 0x00, 0xbe];
    q.extend((0..16u8).map(|j| (15 - j) << 4 | j));
    let norm: Vec<u8> = [1.0f32, 1e-3, -2.5].iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut arr = 4u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&2u64.to_le_bytes());
    arr.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
    let meta = vec![
        ("llama.block_count", 4, 2u32.to_le_bytes().to_vec()),
        ("llama.embedding_length", 4, 32u32.to_le_bytes().to_vec()),
        ("llama.attention.layer_norm_rms_epsilon", 6, 1e-5f32.to_le_bytes().to_vec()),
        ("llama.rope.freq_base", 6, 100000f32.to_le_bytes().to_vec()),
        ("general.name", 8, strv("tiny model")),
        ("general.notes", 8, strv("two\nlines")),
        ("tokenizer.ggml.add_bos_token", 7, vec![0]),
        ("some.array", 9, arr),
    ];
    let file = build::file(
        &meta,
        &[
            build::T { name: "w", dims: &[32, 2], ty: 8, data: &w },
            build::T { name: "q", dims: &[32], ty: 3, data: &q },
            build::T { name: "norm", dims: &[3], ty: 0, data: &norm },
            build::T { name: "old", dims: &[32], ty: 2, data: &[0; 18] },
        ],
    );
    std::fs::write(dir.join("m.gguf"), file).unwrap();
}

#[test]
fn gguf_constants_dequantize() {
    let dir = tempfile::tempdir().unwrap();
    write_model(dir.path());
    let src = "\
.const %w f32[2, 32] = gguf(\"m.gguf\", \"w\")
.const %q f32[32] = gguf(\"m.gguf\", \"q\")
.const %wh f16[2, 32] = gguf(\"m.gguf\", \"w\")
.const %nb bf16[3] = gguf(\"m.gguf\", \"norm\")
.const %nh f16[3] = gguf(\"m.gguf\", \"norm\")
";
    let p = assemble(src, "t.s", &opts(dir.path())).unwrap_or_else(|e| panic!("{e}"));
    let w = f32s(&bytes(&p, 0));
    let want: Vec<f32> =
        [0.5f32, 2.0].iter().flat_map(|&d| (0..32).map(move |i| d * (i - 16) as f32)).collect();
    assert_eq!(w, want);
    let q = f32s(&bytes(&p, 1));
    assert_eq!(q[..4], [-1.5, -1.25, -1.0, -0.75]);
    assert_eq!(q[16..20], [2.25, 2.0, 1.75, 1.5]);
    // f16: -8.0 (0xc800), 0.5 * 15 = 7.5 (0x4780), 2.0 * -16 = -32 (0xd000).
    let wh = u16s(&bytes(&p, 2));
    assert_eq!([wh[0], wh[31], wh[32]], [0xc800, 0x4780, 0xd000]);
    // bf16 of 1.0, 1e-3 (f32 0x3a83126f rounds to 0x3a83), -2.5.
    assert_eq!(u16s(&bytes(&p, 3)), [0x3f80, 0x3a83, 0xc020]);
    // f16 of 1e-3: 0x1419 (0.0009999275, the nearest f16).
    assert_eq!(u16s(&bytes(&p, 4)), [0x3c00, 0x1419, 0xc100]);
}

#[test]
fn gguf_meta_defines() {
    let dir = tempfile::tempdir().unwrap();
    write_model(dir.path());
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let src = "\
.define MODEL ../m.gguf
.define D gguf_meta(\"${MODEL}\", \"llama.embedding_length\")
.define EPS gguf_meta(\"${MODEL}\", \"llama.attention.layer_norm_rms_epsilon\")
.define NAME gguf_meta(\"${MODEL}\", \"general.name\")
.define BOS gguf_meta(\"${MODEL}\", \"tokenizer.ggml.add_bos_token\")
.file \"${NAME} ${BOS}\"
.const %e f32[] = [${EPS}]
.const %b f32[${D}] = gguf(\"${MODEL}\", \"q\")
.output y f32[]
    STORE y, %e
";
    let p = assemble(src, "t.s", &opts(&dir.path().join("sub"))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(bytes(&p, 0), 1e-5f32.to_le_bytes());
    assert_eq!(p.tensors[1].shape.len(), 1);
    assert_eq!(bytes(&p, 1).len(), 32 * 4);
    let dis = adeadvm::asm::DisasmOptions {
        data_dir: None,
        asm_dir: dir.path().to_path_buf(),
        summarize_large: false,
    };
    let text = adeadvm::asm::disassemble(&p, &dis).unwrap();
    assert!(text.contains(".file \"tiny model false\""), "{text}");
}

#[test]
fn arange_and_rope_tables() {
    let src = "\
.const %i i32[2, 3] = arange
.const %f f32[4] = arange
.const %h f16[3] = arange
.const %c f32[3, 4] = rope_cos(10000)
.const %s f32[3, 4] = rope_sin(10000)
.const %ch f16[3, 4] = rope_cos(10000)
";
    let p = assemble(src, "t.s", &AsmOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let i: Vec<i32> =
        bytes(&p, 0).chunks_exact(4).map(|w| i32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
    assert_eq!(i, [0, 1, 2, 3, 4, 5]);
    assert_eq!(f32s(&bytes(&p, 1)), [0.0, 1.0, 2.0, 3.0]);
    assert_eq!(u16s(&bytes(&p, 2)), [0x0000, 0x3c00, 0x4000]);
    // D = 4: columns 0 and 1 turn at 1 radian per position, columns 2 and 3 at
    // 10000^(-2/4) = 0.01. cos/sin values below from Python's math module (shortest repr).
    let cos = [
        [1.0, 1.0, 1.0, 1.0],
        [0.5403023058681398, 0.5403023058681398, 0.9999500004166653, 0.9999500004166653],
        [-0.4161468365471424, -0.4161468365471424, 0.9998000066665778, 0.9998000066665778],
    ];
    let sin = [
        [0.0, 0.0, 0.0, 0.0],
        [0.8414709848078965, 0.8414709848078965, 0.009999833334166664, 0.009999833334166664],
        [0.9092974268256817, 0.9092974268256817, 0.01999866669333308, 0.01999866669333308],
    ];
    let flat = |t: [[f64; 4]; 3]| t.iter().flatten().map(|&v| v as f32).collect::<Vec<f32>>();
    assert_eq!(f32s(&bytes(&p, 3)), flat(cos));
    assert_eq!(f32s(&bytes(&p, 4)), flat(sin));
    let ch: Vec<u16> = flat(cos).iter().map(|&v| half::f16::from_f32(v).to_bits()).collect();
    assert_eq!(u16s(&bytes(&p, 5)), ch);
}

/// Every error, rendered as `adeadvm asm` prints it.
#[test]
fn gguf_errors_as_the_user_sees_them() {
    let dir = tempfile::tempdir().unwrap();
    write_model(dir.path());
    std::fs::write(dir.path().join("bad.gguf"), b"GGUF\x09\0\0\0").unwrap();
    let run = |src: &str| match assemble(src, "t.s", &opts(dir.path())) {
        Ok(_) => panic!("expected errors for:\n{src}"),
        Err(e) => e.to_string(),
    };
    let got = run("\
.const %a f32[2, 32] = gguf(\"missing.gguf\", \"w\")
.const %b f32[2, 32] = gguf(\"bad.gguf\", \"w\")
.const %c f32[2, 32] = gguf(\"m.gguf\", \"nrom\")
.const %d f32[32, 2] = gguf(\"m.gguf\", \"w\")
.const %e f32[32] = gguf(\"m.gguf\", \"old\")
.const %f i32[3] = gguf(\"m.gguf\", \"norm\")
.const %g f32[3] = gguf(\"m.gguf\")
");
    assert_eq!(
        got,
        r#"error: cannot read `missing.gguf`: no such file
 --> t.s:1:29
  |
1 | .const %a f32[2, 32] = gguf("missing.gguf", "w")
  |                             ^^^^^^^^^^^^^^ referenced here

error: cannot read `bad.gguf`: not a valid GGUF file: unsupported GGUF version 9 (2 and 3 are supported)
 --> t.s:2:29
  |
2 | .const %b f32[2, 32] = gguf("bad.gguf", "w")
  |                             ^^^^^^^^^^ referenced here

error: `m.gguf` has no tensor named `nrom`
 --> t.s:3:39
  |
3 | .const %c f32[2, 32] = gguf("m.gguf", "nrom")
  |                                       ^^^^^^ not in the file
  |
  = note: closest names in the file: `norm`, `old`, `q`

error: `m.gguf: w` has shape [2, 32], but `%d` is declared f32[32, 2]
 --> t.s:4:39
  |
4 | .const %d f32[32, 2] = gguf("m.gguf", "w")
  |                                       ^^^ loaded from here
  |
  = note: GGUF lists dims fastest first ([32, 2]); the row-major shape is that list reversed

error: `m.gguf`: tensor `old` is Q4_0, which cannot be loaded into `%e` (f32)
 --> t.s:5:36
  |
5 | .const %e f32[32] = gguf("m.gguf", "old")
  |                                    ^^^^^ loaded from here
  |
  = note: GGUF tensors of type F32, F16, BF16, Q8_0 and Q4_1 load into f32, f16 or bf16 (dequantized)

error: `m.gguf`: tensor `norm` is F32, which cannot be loaded into `%f` (i32)
 --> t.s:6:35
  |
6 | .const %f i32[3] = gguf("m.gguf", "norm")
  |                                   ^^^^^^ loaded from here
  |
  = note: GGUF tensors of type F32, F16, BF16, Q8_0 and Q4_1 load into f32, f16 or bf16 (dequantized)

error: wrong arguments to `gguf(...)`
 --> t.s:7:20
  |
7 | .const %g f32[3] = gguf("m.gguf")
  |                    ^^^^^^^^^^^^^^ expected `gguf("path", "tensor name")`

error: could not assemble t.s due to 7 previous errors
"#
    );
    let got = run("\
.define A gguf_meta(\"m.gguf\", \"some.array\")
.define B gguf_meta(\"m.gguf\", \"llama.block_cnt\")
.define C gguf_meta(\"m.gguf\", \"general.notes\")
.define E gguf_meta(\"nope.gguf\", \"x\")
.define F gguf_meta(\"m.gguf\")
");
    assert_eq!(
        got,
        r#"error: metadata `some.array` is an array of 2 elements; a define takes a number, string or bool
 --> t.s:1:31
  |
1 | .define A gguf_meta("m.gguf", "some.array")
  |                               ^^^^^^^^^^^^ an array

error: `m.gguf` has no metadata key `llama.block_cnt`
 --> t.s:2:31
  |
2 | .define B gguf_meta("m.gguf", "llama.block_cnt")
  |                               ^^^^^^^^^^^^^^^^^ not in the file
  |
  = note: closest keys in the file: `llama.block_count`, `llama.embedding_length`, `llama.rope.freq_base`

error: metadata `general.notes` is a string of several lines, which cannot be a define
 --> t.s:3:31
  |
3 | .define C gguf_meta("m.gguf", "general.notes")
  |                               ^^^^^^^^^^^^^^^ a define's value is one line of text

error: cannot read `nope.gguf`: no such file
 --> t.s:4:21
  |
4 | .define E gguf_meta("nope.gguf", "x")
  |                     ^^^^^^^^^^^ referenced here

error: wrong arguments to `gguf_meta(...)`
 --> t.s:5:11
  |
5 | .define F gguf_meta("m.gguf")
  |           ^^^^^^^^^^^^^^^^^^^ expected `gguf_meta("path", "key")`

error: could not assemble t.s due to 5 previous errors
"#
    );
    let got = run("\
.const %a i32[4] = rope_cos(10000)
.const %b f32[4] = rope_sin(10000)
.const %c f32[2, 3] = rope_cos(10000)
.const %d f32[2, 4] = rope_cos(-1)
.const %e f32[2, 4] = rope_cos()
.const %f f32[2, 4] = arange(3)
");
    assert_eq!(
        got,
        r#"error: `rope_cos` needs a float constant, but `%a` is i32
 --> t.s:1:20
  |
1 | .const %a i32[4] = rope_cos(10000)
  |                    ^^^^^^^^ only for f32, f16 and bf16

error: `rope_sin` needs a 2-D constant [positions, dim], but `%b` is f32[4]
 --> t.s:2:20
  |
2 | .const %b f32[4] = rope_sin(10000)
  |                    ^^^^^^^^ only for shape [P, D]

error: `rope_cos` needs an even last dim, but `%c` is f32[2, 3]
 --> t.s:3:23
  |
3 | .const %c f32[2, 3] = rope_cos(10000)
  |                       ^^^^^^^^ columns 2i and 2i+1 share frequency i

error: invalid rope base `-1`: must be a finite number above 0
 --> t.s:4:32
  |
4 | .const %d f32[2, 4] = rope_cos(-1)
  |                                ^^ invalid number

error: wrong arguments to `rope_cos(...)`
 --> t.s:5:23
  |
5 | .const %e f32[2, 4] = rope_cos()
  |                       ^^^^^^^^^^ expected `rope_cos(theta)`

error: expected a constant value: `[...]`, `zeros`, `ones`, `fill(v)`, `rand(seed)`, `arange`, `rope_cos(theta)`, `rope_sin(theta)`, `npy("...")`, `safetensors("...", "...")` or `gguf("...", "...")`, found `arange(...)`
 --> t.s:6:23
  |
6 | .const %f f32[2, 4] = arange(3)
  |                       ^^^^^^^^^ invalid value

error: could not assemble t.s due to 6 previous errors
"#
    );
}

/// SmolLM2's real file: the example of src/asm/SYNTAX.md as written, and constants equal to
/// what the GGUF reader dequantizes.
#[test]
fn smollm2_constants_and_metadata() {
    let Some(path) = smollm::model_path() else { return };
    let dir = path.parent().unwrap();
    let src = "\
.define MODEL SmolLM2-135M-Instruct.Q4_1.gguf
.define D gguf_meta(\"${MODEL}\", \"llama.embedding_length\")            ; 576
.define EPS gguf_meta(\"${MODEL}\", \"llama.attention.layer_norm_rms_epsilon\") ; 1e-5
.const %norm0 f32[${D}] = gguf(\"${MODEL}\", \"blk.0.attn_norm.weight\")
.define THETA gguf_meta(\"${MODEL}\", \"llama.rope.freq_base\")
.define KV gguf_meta(\"${MODEL}\", \"llama.attention.head_count_kv\")
.const %wk f16[192, ${D}] = gguf(\"${MODEL}\", \"blk.0.attn_k.weight\")
.const %wd f32[${D}, 1536] = gguf(\"${MODEL}\", \"blk.29.ffn_down.weight\")
.const %cos f32[8, 64] = rope_cos(${THETA})
.const %eps f32[${KV}] = fill(${EPS})
";
    let p = assemble(src, "smol.s", &opts(dir)).unwrap_or_else(|e| panic!("{e}"));
    let file = adeadvm::gguf::GgufFile::open(&path).unwrap();
    let deq = |name: &str| file.tensor(name).unwrap().dequantize().unwrap();
    assert_eq!(f32s(&bytes(&p, 0)), deq("blk.0.attn_norm.weight"));
    let wk: Vec<u16> = deq("blk.0.attn_k.weight").iter().map(|&v| half::f16::from_f32(v).to_bits()).collect();
    assert_eq!(u16s(&bytes(&p, 1)), wk);
    assert_eq!(f32s(&bytes(&p, 2)), deq("blk.29.ffn_down.weight"));
    let cos = f32s(&bytes(&p, 3));
    // Row 1, columns 2 and 3: cos(100000^(-2/64)) = cos(0.6978305848598664).
    assert_eq!(cos[64 + 2], cos[64 + 3]);
    assert!((cos[64 + 2] as f64 - 0.6978305848598664f64.cos()).abs() < 1e-7);
    assert_eq!(p.tensors[4].shape.len(), 1);
}
