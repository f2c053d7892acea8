//! The .bib container: round trips, integrity, and hostile bytes.

use adeadvm::format::{
    Blob, ConstData, DebugInfo, FormatError, KernelDecl, OutputDecl, Program, SpirvModule, TensorDecl,
    TensorKind, DATA_ALIGN,
};
use adeadvm::isa::{DType, Dim, Insn, Instruction, OutputId, Placement, SymId, TensorId, Tier};
use proptest::prelude::*;

fn sample_program() -> Program {
    let insns = [
        Insn::Alloc { t: TensorId(3) },
        Insn::Matmul {
            dst: TensorId(3),
            a: TensorId(0),
            b: TensorId(1),
            bias: Some(TensorId(2)),
            ta: false,
            tb: true,
            act: adeadvm::isa::Act::Relu,
        },
        Insn::Store { out: OutputId(0), src: TensorId(3) },
        Insn::Free { t: TensorId(3) },
        Insn::Halt,
    ];
    let code: Vec<_> =
        insns.iter().map(|&insn| Instruction { insn, placement: Placement::Auto }.encode()).collect();
    let mut data = vec![0u8; 2 * DATA_ALIGN];
    for (i, b) in data.iter_mut().enumerate() {
        *b = i as u8;
    }
    Program {
        tier: Tier::Strict,
        syms: vec!["B".into()],
        tensors: vec![
            TensorDecl {
                name: "x".into(),
                dtype: DType::F32,
                shape: vec![Dim::Sym(SymId(0)), Dim::Const(4)],
                kind: TensorKind::Input,
            },
            TensorDecl {
                name: "w".into(),
                dtype: DType::F32,
                shape: vec![Dim::Const(2), Dim::Const(4)],
                kind: TensorKind::Const(ConstData::Bytes { offset: 64, len: 32 }),
            },
            TensorDecl {
                name: "b".into(),
                dtype: DType::F32,
                shape: vec![Dim::Const(2)],
                kind: TensorKind::Const(ConstData::Splat(1.0f32.to_bits())),
            },
            TensorDecl {
                name: "h".into(),
                dtype: DType::F32,
                shape: vec![Dim::Sym(SymId(0)), Dim::Const(2)],
                kind: TensorKind::Temp,
            },
        ],
        outputs: vec![OutputDecl {
            name: "y".into(),
            dtype: DType::F32,
            shape: vec![Dim::Sym(SymId(0)), Dim::Const(2)],
        }],
        spirv: vec![SpirvModule { name: "m".into(), words: vec![0x0723_0203, 0x0001_0000, 7, 9, 0] }],
        kernels: vec![KernelDecl {
            name: "k".into(),
            module: 0,
            entry: "main".into(),
            bindings: vec![TensorId(0), TensorId(3)],
            push: vec![0, 0, 128, 63],
            groups: [4, 1, 1],
        }],
        debug: DebugInfo {
            source: "sample.s".into(),
            lines: vec![3, 4, 5, 6, 7],
            labels: vec![("end".into(), 4)],
            origins: vec![(0, "n0".into()), (2, "/layer.0/Add \"x\"".into())],
        },
        data: Blob::from_vec(data),
        code,
        ..Program::default()
    }
}

#[test]
fn round_trip_is_exact_and_digest_is_identity() {
    let p = sample_program();
    let bytes = p.to_bytes();
    let q = Program::from_bytes(bytes.clone()).expect("loads");
    assert_eq!(q.to_bytes(), bytes, "re-serializing gives the same bytes");
    assert_eq!(q.digest, *blake3::hash(&bytes[..bytes.len() - 32]).as_bytes());
    let mut expected = p.clone();
    expected.digest = q.digest;
    assert_eq!(q, expected);
    assert_eq!(q.const_bytes(&ConstData::Bytes { offset: 64, len: 32 }).unwrap()[0], 64);
}

#[test]
fn load_reads_a_private_copy_and_load_mapped_maps_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.bib");
    std::fs::write(&path, sample_program().to_bytes()).unwrap();
    let p = Program::load(&path).unwrap();
    assert!(!p.data.is_mapped(), "load owns its bytes: the file may change under it");
    assert_eq!(p.tensors.len(), 4);
    // SAFETY: nothing changes the file while the mapping lives (it is dropped below).
    let m = unsafe { Program::load_mapped(&path) }.unwrap();
    assert!(m.data.is_mapped(), "constants stay in the mapping, not copied");
    assert_eq!(m, p);
}

#[test]
fn every_flipped_byte_is_caught() {
    let bytes = sample_program().to_bytes();
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut b = bytes.clone();
            b[i] ^= bit;
            let err =
                Program::from_bytes(b).expect_err(&format!("flip of byte {i} bit {bit:#x} must be caught"));
            let msg = err.to_string();
            assert!(!msg.is_empty());
            if i < 8 {
                assert!(matches!(err, FormatError::BadMagic(_)), "byte {i}: {msg}");
            }
        }
    }
}

#[test]
fn truncation_and_padding_are_caught() {
    let bytes = sample_program().to_bytes();
    for len in [0, 7, 8, 95, bytes.len() / 2, bytes.len() - 1] {
        assert!(Program::from_bytes(bytes[..len].to_vec()).is_err(), "truncated to {len}");
    }
    let mut padded = bytes.clone();
    padded.push(0);
    let err = Program::from_bytes(padded).unwrap_err().to_string();
    assert!(err.contains("truncated or padded"), "{err}");
}

#[test]
fn user_facing_messages() {
    let bytes = sample_program().to_bytes();
    let msg = |b: Vec<u8>| Program::from_bytes(b).unwrap_err().to_string();

    assert_eq!(
        msg(b"\x7fELF\x02\x01\x01\x00rest of some binary.........................................................................".to_vec()),
        "not an adeadvm program: bad magic bytes (expected \"ADEADVM\\x1a\", found [127, 69, 76, 70, 2, 1, 1, 0])"
    );
    let mut newer = bytes.clone();
    newer[8] = 2;
    assert_eq!(
        msg(newer),
        "this program uses .bib format 2.0, but this adeadvm reads format 1.x; upgrade adeadvm"
    );
    let mut body = bytes.clone();
    body[100] ^= 1;
    assert!(msg(body).starts_with("digest mismatch: the file is corrupt or was modified (stored "));
    assert_eq!(
        msg(b"ADEADVM\x1a".to_vec()),
        "not an adeadvm program: the file is 8 bytes, shorter than the 96-byte header and digest"
    );
}

#[test]
fn a_newer_minor_version_still_loads() {
    let mut bytes = sample_program().to_bytes();
    bytes[10] = 7;
    reseal(&mut bytes);
    assert_eq!(Program::from_bytes(bytes).unwrap().version, (1, 7));
}

#[test]
fn unknown_sections_optional_skipped_required_refused() {
    // Re-label the debug section (kind 8) with other kinds.
    let bytes = sample_program().to_bytes();
    let count = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    let entry = (0..count)
        .map(|i| 64 + i * 24)
        .find(|&at| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) == 8)
        .expect("a debug section");
    let mut optional = bytes.clone();
    optional[entry..entry + 4].copy_from_slice(&(0x8000_0042u32).to_le_bytes());
    reseal(&mut optional);
    let p = Program::from_bytes(optional).expect("an optional section is skipped");
    assert!(p.debug.lines.is_empty());
    let mut required = bytes;
    required[entry..entry + 4].copy_from_slice(&42u32.to_le_bytes());
    reseal(&mut required);
    let err = Program::from_bytes(required).unwrap_err().to_string();
    assert!(err.contains("unknown section kind 42"), "{err}");
}

/// Recomputes the digest, so the parser behind it sees the change.
fn reseal(bytes: &mut [u8]) {
    let n = bytes.len() - 32;
    let d = blake3::hash(&bytes[..n]);
    bytes[n..].copy_from_slice(d.as_bytes());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = Program::from_bytes(bytes);
    }

    /// Mutations behind a valid digest reach the section parser: it must fail cleanly or
    /// give a program that serializes back to the same bytes.
    #[test]
    fn resealed_mutations_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let mut bytes = sample_program().to_bytes();
        let n = bytes.len() - 32;
        for (at, v) in edits {
            bytes[at % n] = v;
        }
        reseal(&mut bytes);
        if let Ok(p) = Program::from_bytes(bytes) {
            // Optional sections it did not know are dropped; everything it read survives.
            let mut again = Program::from_bytes(p.to_bytes()).expect("what was read re-serializes");
            again.digest = p.digest;
            again.version = p.version;
            prop_assert_eq!(again, p);
        }
    }

    #[test]
    fn huge_counts_fail_fast(at in 64usize..400, v in any::<u32>()) {
        let mut bytes = sample_program().to_bytes();
        let n = bytes.len() - 32;
        let at = at.min(n - 4);
        bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
        reseal(&mut bytes);
        let _ = Program::from_bytes(bytes);
    }
}
