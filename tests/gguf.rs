//! The GGUF reader (src/gguf.rs): hand-built files with known block values, every kind of
//! malformed file, and SmolLM2-135M-Instruct's real file against values from an independent
//! reader.

#[path = "support/smollm.rs"]
mod smollm;

use adeadvm::gguf::{build, Array, GgmlType, GgufError, GgufFile, Value};

fn u32v(v: u32) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

fn strv(s: &str) -> Vec<u8> {
    let mut v = Vec::new();
    build::string(&mut v, s);
    v
}

/// A file with raw tensor infos (name, GGUF dims, ggml type, offset) and a data section.
fn raw_file(meta: &[(&str, u32, Vec<u8>)], infos: &[(&str, &[u64], u32, u64)], data: &[u8]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(infos.len() as u64).to_le_bytes());
    out.extend_from_slice(&(meta.len() as u64).to_le_bytes());
    for (k, ty, v) in meta {
        build::string(&mut out, k);
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(v);
    }
    for (name, dims, ty, offset) in infos {
        build::string(&mut out, name);
        out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in *dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
    }
    out.resize(out.len().next_multiple_of(32), 0);
    out.extend_from_slice(data);
    out
}

fn err(bytes: Vec<u8>) -> String {
    match GgufFile::from_bytes(bytes) {
        Ok(_) => panic!("the file should be refused"),
        Err(e) => e.to_string(),
    }
}

/// Two Q8_0 blocks: d = 0.5 then d = -0.25, q = i - 16 (i = 0..32) in both.
fn q8_0_blocks() -> (Vec<u8>, Vec<f32>) {
    let mut data = Vec::new();
    let mut want = Vec::new();
    for (bits, d) in [(0x3800u16, 0.5f32), (0xb400, -0.25)] {
        data.extend_from_slice(&bits.to_le_bytes());
        for i in 0..32i32 {
            data.push((i - 16) as i8 as u8);
            want.push(d * (i - 16) as f32);
        }
    }
    (data, want)
}

/// One Q4_1 block: d = 0.25, m = -1.5; byte j = (15 - j) << 4 | j, so element j is
/// 0.25 * j - 1.5 and element 16 + j is 0.25 * (15 - j) - 1.5.
fn q4_1_block() -> (Vec<u8>, Vec<f32>) {
    let mut data = Vec::new();
    data.extend_from_slice(&0x3400u16.to_le_bytes());
    data.extend_from_slice(&0xbe00u16.to_le_bytes());
    for j in 0..16u8 {
        data.push((15 - j) << 4 | j);
    }
    let mut want: Vec<f32> = (0..16).map(|j| 0.25 * j as f32 - 1.5).collect();
    want.extend((0..16).map(|j| 0.25 * (15 - j) as f32 - 1.5));
    (data, want)
}

fn valid_file() -> Vec<u8> {
    let (q8, _) = q8_0_blocks();
    let (q4, _) = q4_1_block();
    let f16: Vec<u8> = [0x3c00u16, 0xc000, 0x3800, 0x7bff].iter().flat_map(|b| b.to_le_bytes()).collect();
    let bf16: Vec<u8> = [0x3f80u16, 0xc040].iter().flat_map(|b| b.to_le_bytes()).collect();
    let f32s: Vec<u8> = [1.5f32, -0.0, 3.25e-3].iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut strings = 8u32.to_le_bytes().to_vec();
    strings.extend_from_slice(&2u64.to_le_bytes());
    build::string(&mut strings, "a b");
    build::string(&mut strings, "é");
    let mut ints = 5u32.to_le_bytes().to_vec();
    ints.extend_from_slice(&3u64.to_le_bytes());
    for v in [1i32, -2, 3] {
        ints.extend_from_slice(&v.to_le_bytes());
    }
    let mut nested = 9u32.to_le_bytes().to_vec();
    nested.extend_from_slice(&1u64.to_le_bytes());
    nested.extend_from_slice(&0u32.to_le_bytes());
    nested.extend_from_slice(&2u64.to_le_bytes());
    nested.extend_from_slice(&[7, 9]);
    let meta = vec![
        ("general.architecture", 8, strv("llama")),
        ("u8", 0, vec![200]),
        ("i8", 1, vec![0xfe]),
        ("u16", 2, 65535u16.to_le_bytes().to_vec()),
        ("i16", 3, (-300i16).to_le_bytes().to_vec()),
        ("u32", 4, u32v(30)),
        ("i32", 5, (-7i32).to_le_bytes().to_vec()),
        ("f32", 6, 1e-5f32.to_le_bytes().to_vec()),
        ("bool", 7, vec![1]),
        ("u64", 10, u64::MAX.to_le_bytes().to_vec()),
        ("i64", 11, i64::MIN.to_le_bytes().to_vec()),
        ("f64", 12, 0.1f64.to_le_bytes().to_vec()),
        ("strings", 9, strings),
        ("ints", 9, ints),
        ("nested", 9, nested),
    ];
    build::file(
        &meta,
        &[
            build::T { name: "q8", dims: &[32, 2], ty: 8, data: &q8 },
            build::T { name: "q4", dims: &[32], ty: 3, data: &q4 },
            build::T { name: "h", dims: &[2, 2], ty: 1, data: &f16 },
            build::T { name: "b", dims: &[2], ty: 30, data: &bf16 },
            build::T { name: "f", dims: &[3, 1, 1], ty: 0, data: &f32s },
        ],
    )
}

#[test]
fn reads_metadata_of_every_type() {
    let f = GgufFile::from_bytes(valid_file()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.data_start() % 32, 0);
    assert_eq!(f.get_str("general.architecture"), Some("llama"));
    assert_eq!(f.get("u8"), Some(&Value::U8(200)));
    assert_eq!(f.get("i8"), Some(&Value::I8(-2)));
    assert_eq!(f.get("u16"), Some(&Value::U16(65535)));
    assert_eq!(f.get("i16"), Some(&Value::I16(-300)));
    assert_eq!(f.get_u64("u32"), Some(30));
    assert_eq!(f.get("i32"), Some(&Value::I32(-7)));
    assert_eq!(f.get_u64("i32"), None);
    assert_eq!(f.get("f32"), Some(&Value::F32(1e-5)));
    assert_eq!(f.get("bool"), Some(&Value::Bool(true)));
    assert_eq!(f.get_u64("u64"), Some(u64::MAX));
    assert_eq!(f.get("i64"), Some(&Value::I64(i64::MIN)));
    assert_eq!(f.get_f64("f64"), Some(0.1));
    assert_eq!(f.get_array("strings"), Some(&Array::String(vec!["a b".into(), "é".into()])));
    assert_eq!(f.get_array("ints").and_then(Array::to_i64s), Some(vec![1, -2, 3]));
    assert_eq!(f.get_array("nested"), Some(&Array::Array(vec![Array::U8(vec![7, 9])])));
    assert_eq!(f.get("missing"), None);
    assert_eq!(f.metadata().len(), 15);
    assert_eq!(f.metadata()[0].0, "general.architecture");
    // The text `.define NAME gguf_meta(...)` substitutes.
    assert_eq!(f.get("f32").unwrap().scalar_text().as_deref(), Some("1e-5"));
    assert_eq!(f.get("i64").unwrap().scalar_text().as_deref(), Some("-9223372036854775808"));
    assert_eq!(f.get("bool").unwrap().scalar_text().as_deref(), Some("true"));
    assert_eq!(f.get("strings").unwrap().scalar_text(), None);
}

#[test]
fn dequantizes_known_blocks() {
    let f = GgufFile::from_bytes(valid_file()).unwrap();
    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["q8", "q4", "h", "b", "f"]);

    let q8 = f.tensor("q8").unwrap();
    assert_eq!(q8.info.ggml_type, GgmlType::Q8_0);
    assert_eq!(q8.info.dims, [32, 2]);
    assert_eq!(q8.shape(), [2, 32]);
    assert_eq!(q8.info.size, 68);
    assert_eq!(q8.dequantize().unwrap(), q8_0_blocks().1);

    let q4 = f.tensor("q4").unwrap();
    assert_eq!(q4.shape(), [32]);
    let got = q4.dequantize().unwrap();
    assert_eq!(got, q4_1_block().1);
    assert_eq!(got[..3], [-1.5, -1.25, -1.0]);
    assert_eq!(got[16..19], [2.25, 2.0, 1.75]);

    assert_eq!(f.tensor("h").unwrap().dequantize().unwrap(), [1.0, -2.0, 0.5, 65504.0]);
    assert_eq!(f.tensor("b").unwrap().dequantize().unwrap(), [1.0, -3.0]);
    let t = f.tensor("f").unwrap();
    assert_eq!(t.shape(), [1, 1, 3]);
    let v = t.dequantize().unwrap();
    assert_eq!(v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), [1.5f32, -0.0, 3.25e-3].map(f32::to_bits));
    assert!(f.tensor("nope").is_none());
}

#[test]
fn q4_1_is_one_rounding_of_the_exact_value() {
    // d = 0.1 (f16 0x2e66), m = 1/3 (f16 0x3555): d * q is exact in f32, so d * q + m in f32 is
    // the exact sum (computed in f64, where it is exact too) rounded once.
    let mut data = vec![0x66, 0x2e, 0x55, 0x35];
    data.extend((0..16u8).map(|j| (15 - j) << 4 | j));
    let f =
        GgufFile::from_bytes(build::file(&[], &[build::T { name: "t", dims: &[32], ty: 3, data: &data }]))
            .unwrap();
    let got = f.tensor("t").unwrap().dequantize().unwrap();
    let d = half::f16::from_bits(0x2e66).to_f64();
    let m = half::f16::from_bits(0x3555).to_f64();
    for (i, g) in got.iter().enumerate() {
        let q = if i < 16 { i } else { 15 - (i - 16) } as f64;
        assert_eq!(*g, (d * q + m) as f32, "element {i}");
    }
}

#[test]
fn unsupported_types_do_not_dequantize() {
    let data = vec![0u8; 18];
    let f =
        GgufFile::from_bytes(build::file(&[], &[build::T { name: "w", dims: &[32], ty: 2, data: &data }]))
            .unwrap();
    let t = f.tensor("w").unwrap();
    assert_eq!(t.info.ggml_type, GgmlType::Q4_0);
    assert_eq!(
        t.dequantize().unwrap_err().to_string(),
        "tensor `w`: dequantizing Q4_0 is not supported (F32, F16, BF16, Q8_0 and Q4_1 are)"
    );
}

#[test]
fn version_2_and_alignment() {
    let mut v2 = valid_file();
    v2[4] = 2;
    assert_eq!(GgufFile::from_bytes(v2).unwrap().version(), 2);
    let data = [0u8; 4];
    let f =
        GgufFile::from_bytes(raw_file(&[("general.alignment", 4, u32v(8))], &[("t", &[1], 0, 8)], &[0; 16]))
            .unwrap();
    assert_eq!(f.alignment(), 8);
    assert_eq!(f.tensor("t").unwrap().data, data);
}

#[test]
fn malformed_headers_are_errors() {
    assert_eq!(err(b"GGU".to_vec()), "not a GGUF file (magic [47, 47, 55], expected \"GGUF\")");
    assert_eq!(
        err(b"GGML\x03\0\0\0".to_vec()),
        "not a GGUF file (magic [47, 47, 4d, 4c], expected \"GGUF\")"
    );
    let mut f = valid_file();
    f[4] = 1;
    assert_eq!(err(f.clone()), "unsupported GGUF version 1 (2 and 3 are supported)");
    f[4] = 4;
    assert_eq!(err(f), "unsupported GGUF version 4 (2 and 3 are supported)");
    let mut f = b"GGUF\x03\0\0\0".to_vec();
    f.extend_from_slice(&0u64.to_le_bytes());
    f.extend_from_slice(&u64::MAX.to_le_bytes());
    assert_eq!(
        err(f),
        "the metadata count: count 18446744073709551615 is impossible, the file has only 0 bytes left"
    );
    let mut f = b"GGUF\x03\0\0\0".to_vec();
    f.extend_from_slice(&(1u64 << 40).to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    assert_eq!(err(f), "the tensor count: count 1099511627776 is impossible, the file has only 0 bytes left");
}

#[test]
fn every_truncation_is_an_error() {
    let f = valid_file();
    for n in 0..f.len() {
        assert!(GgufFile::from_bytes(f[..n].to_vec()).is_err(), "a file cut at {n} bytes was accepted");
    }
    assert_eq!(
        err(f[..30].to_vec()),
        "the metadata count: count 15 is impossible, the file has only 6 bytes left"
    );
    assert_eq!(
        err(f[..f.len() - 1].to_vec()),
        "tensor `f`: its 12 bytes at data offset 192 end past the file (the data section has 203 bytes)"
    );
}

#[test]
fn malformed_metadata_is_an_error() {
    assert_eq!(err(raw_file(&[("k", 13, vec![0; 8])], &[], &[])), "metadata `k`: unknown value type 13");
    assert_eq!(err(raw_file(&[("k", 7, vec![2])], &[], &[])), "metadata `k`: a bool must be 0 or 1, found 2");
    assert_eq!(
        err(raw_file(&[("k", 4, u32v(1)), ("k", 4, u32v(2))], &[], &[])),
        "metadata key `k` appears twice"
    );
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(b"abc");
    assert_eq!(
        err(raw_file(&[("k", 8, huge)], &[], &[])),
        "the file ends early: the value of `k` at byte 45 needs 18446744073709551615 bytes, 19 are left"
    );
    let mut arr = 4u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&(1u64 << 62).to_le_bytes());
    assert_eq!(
        err(raw_file(&[("k", 9, arr)], &[], &[])),
        "the array `k`: count 4611686018427387904 is impossible, the file has only 15 bytes left"
    );
    let mut arr = 13u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&0u64.to_le_bytes());
    assert_eq!(err(raw_file(&[("k", 9, arr)], &[], &[])), "metadata `k`: unknown value type 13");
    // Arrays of arrays nested 9 deep.
    let mut deep = Vec::new();
    for _ in 0..9 {
        deep.extend_from_slice(&9u32.to_le_bytes());
        deep.extend_from_slice(&1u64.to_le_bytes());
    }
    deep.extend_from_slice(&0u32.to_le_bytes());
    deep.extend_from_slice(&0u64.to_le_bytes());
    assert_eq!(err(raw_file(&[("k", 9, deep)], &[], &[])), "metadata `k`: arrays nested deeper than 8");
    let mut bad_key = b"GGUF\x03\0\0\0".to_vec();
    bad_key.extend_from_slice(&0u64.to_le_bytes());
    bad_key.extend_from_slice(&1u64.to_le_bytes());
    bad_key.extend_from_slice(&2u64.to_le_bytes());
    bad_key.extend_from_slice(&[0xff, 0xfe]);
    bad_key.extend_from_slice(&4u32.to_le_bytes());
    bad_key.extend_from_slice(&0u32.to_le_bytes());
    assert_eq!(err(bad_key), "metadata key 0 is not valid UTF-8");
    for (ty, v) in [(4u32, u32v(0)), (4, u32v(24)), (10, 32u64.to_le_bytes().to_vec())] {
        let e = err(raw_file(&[("general.alignment", ty, v)], &[], &[]));
        assert!(e.starts_with("metadata `general.alignment` must be a nonzero power of two u32"), "{e}");
    }
}

#[test]
fn malformed_tensor_infos_are_errors() {
    let z = [0u8; 256];
    let e = |infos: &[(&str, &[u64], u32, u64)]| err(raw_file(&[], infos, &z));
    assert_eq!(e(&[("t", &[], 0, 0)]), "tensor `t`: 0 dims (1 to 4 are allowed)");
    assert_eq!(e(&[("t", &[1, 1, 1, 1, 1], 0, 0)]), "tensor `t`: 5 dims (1 to 4 are allowed)");
    assert_eq!(
        e(&[("t", &[u64::MAX, 2], 0, 0)]),
        "tensor `t`: dims [18446744073709551615, 2] overflow the element count"
    );
    assert_eq!(
        e(&[("t", &[1 << 62, 4], 0, 0)]),
        "tensor `t`: dims [4611686018427387904, 4] overflow the element count"
    );
    assert_eq!(e(&[("t", &[4], 99, 0)]), "tensor `t`: unknown ggml type 99");
    assert_eq!(e(&[("t", &[16], 8, 0)]), "tensor `t`: row length 16 is not a multiple of Q8_0's block of 32");
    assert_eq!(e(&[("t", &[4], 0, 4)]), "tensor `t`: offset 4 is not a multiple of the alignment 32");
    assert_eq!(
        e(&[("t", &[128], 0, 0)]),
        "tensor `t`: its 512 bytes at data offset 0 end past the file (the data section has 256 bytes)"
    );
    assert_eq!(
        e(&[("t", &[4], 0, u64::MAX - 31)]),
        "tensor `t`: its 16 bytes at data offset 18446744073709551584 end past the file (the data section has 256 bytes)"
    );
    assert_eq!(e(&[("t", &[4], 0, 0), ("t", &[4], 0, 32)]), "tensor `t` appears twice");
    assert_eq!(
        e(&[("a", &[16], 0, 0), ("b", &[4], 0, 32)]),
        "tensors `a` and `b` overlap in the data section"
    );
    // Tensors may share nothing but may leave gaps and come in any order.
    let f = GgufFile::from_bytes(raw_file(&[], &[("a", &[4], 0, 64), ("b", &[8], 0, 0)], &z)).unwrap();
    assert_eq!(f.tensor("a").unwrap().info.offset, 64);
}

/// Mutated valid files (bytes overwritten by a fixed pseudo-random sequence): every outcome is a
/// parse or an error, never a panic, and a file that parses dequantizes.
#[test]
fn mutated_files_never_panic() {
    let base = valid_file();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut parsed = 0;
    for _ in 0..3000 {
        let mut f = base.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % f.len() as u64) as usize;
            f[at] = match next() % 3 {
                0 => next() as u8,
                1 => 0xff,
                _ => 0,
            };
        }
        if let Ok(g) = GgufFile::from_bytes(f) {
            parsed += 1;
            for t in g.tensors() {
                let _ = g.tensor(&t.name).unwrap().dequantize();
            }
        }
    }
    assert!(parsed > 0, "no mutation left a readable file; the test checks nothing");
}

#[test]
fn open_reports_missing_files() {
    let e = GgufFile::open("/nonexistent/model.gguf").unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }));
    assert!(e.to_string().starts_with("cannot read /nonexistent/model.gguf: "), "{e}");
}

/// The real file. Expected values from llama.cpp's `gguf` Python package (GGUFReader and
/// `gguf.quants.dequantize`, numpy), an independent reader: f32 bits of elements at these
/// row-major flat indices, and the float64 sum of all elements.
#[test]
fn smollm2_file() {
    let Some(path) = smollm::model_path() else { return };
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.tensors().len(), 272);
    assert_eq!(f.get_str("general.architecture"), Some("llama"));
    assert_eq!(f.get_u64("llama.block_count"), Some(30));
    assert_eq!(f.get_u64("llama.embedding_length"), Some(576));
    assert_eq!(f.get_u64("llama.attention.head_count"), Some(9));
    assert_eq!(f.get_u64("llama.attention.head_count_kv"), Some(3));
    assert_eq!(f.get_u64("llama.feed_forward_length"), Some(1536));
    assert_eq!(f.get("llama.rope.freq_base"), Some(&Value::F32(100000.0)));
    assert_eq!(f.get("llama.attention.layer_norm_rms_epsilon"), Some(&Value::F32(1e-5)));
    assert_eq!(f.get_array("tokenizer.ggml.tokens").map(Array::len), Some(49152));
    type Case<'a> = (&'a str, &'a [u64], GgmlType, &'a [u32], f64);
    let cases: &[Case] = &[
        (
            "token_embd.weight",
            &[49152, 576],
            GgmlType::Q8_0,
            &[0xbdda3400, 0x3d071400, 0x3dab7200, 0xbe4d3700, 0xbdbf7600, 0x3da20680, 0xbd2ad000],
            -15353.04449415207,
        ),
        (
            "blk.0.attn_q.weight",
            &[576, 576],
            GgmlType::Q4_1,
            &[0xbdc54000, 0x3e212000, 0x3e918000, 0xbdc54000, 0xbeb14000, 0xbc590000, 0xbe830000],
            59.22322082519531,
        ),
        (
            "blk.29.ffn_down.weight",
            &[576, 1536],
            GgmlType::Q4_1,
            &[0xbe8bf000, 0x3e3ec000, 0x3d464000, 0xbe8bf000, 0x3cda0000, 0x3e8efc00, 0x3d680000],
            49.83570861816406,
        ),
        (
            "output_norm.weight",
            &[576],
            GgmlType::F32,
            &[0x3fe10000, 0x3fe90000, 0xbfa10000, 0x3fea0000, 0x3ff00000, 0x3ffe0000],
            1038.33203125,
        ),
    ];
    for &(name, shape, ty, bits, sum) in cases {
        let t = f.tensor(name).unwrap();
        assert_eq!(t.shape(), shape, "{name}");
        assert_eq!(t.info.ggml_type, ty, "{name}");
        let v = t.dequantize().unwrap();
        assert_eq!(v.len() as u64, shape.iter().product::<u64>());
        let idx = [0usize, 1, 17, 31, 32, 100003, v.len() - 1].into_iter().filter(|&i| i < v.len());
        let got: Vec<u32> = idx.map(|i| v[i].to_bits()).collect();
        assert_eq!(got, bits, "{name}");
        let s: f64 = v.iter().map(|&x| x as f64).sum();
        assert!((s - sum).abs() <= 1e-9 * sum.abs().max(1.0), "{name}: sum {s}, expected {sum}");
    }
}
