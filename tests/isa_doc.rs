//! docs/ISA.md is generated from opcodes/isa.toml; this test fails when the committed copy is
//! stale. `ADEADVM_BLESS=1 cargo test --test isa_doc` rewrites it.

use std::path::Path;

#[test]
fn docs_isa_md_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ISA.md");
    let generated = adeadvm::isa::ISA_MARKDOWN;
    if std::env::var_os("ADEADVM_BLESS").is_some() {
        std::fs::write(&path, generated).expect("write docs/ISA.md");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/ISA.md is stale: regenerate it with `ADEADVM_BLESS=1 cargo test --test isa_doc`"
    );
}

#[test]
fn every_opcode_is_documented_once() {
    for op in adeadvm::isa::Opcode::ALL {
        let info = op.info();
        let row = format!("| {:#04x} | `{}` |", *op as u8, info.mnemonic);
        assert_eq!(generated_rows(&row), 1, "{row}");
    }
}

fn generated_rows(prefix: &str) -> usize {
    adeadvm::isa::ISA_MARKDOWN.lines().filter(|l| l.starts_with(prefix)).count()
}
