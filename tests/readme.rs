//! The README's examples run as written.

mod common;

#[test]
fn readme_program_assembles_and_runs() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let start = readme.find("```asm\n").expect("an asm block") + "```asm\n".len();
    let src = &readme[start..start + readme[start..].find("```").unwrap()];
    let program = common::build(src);
    let x = common::f32s(&[3, 4], &[1.0, 0.0, -1.0, 2.0, 0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0]);
    let out = common::run(&program, &[("x", x)]).unwrap();
    let y = out["y"].to_f32().unwrap();
    assert_eq!(out["y"].shape, vec![3, 2]);
    // The last row of x is zero, so y = relu(b) there.
    assert_eq!(&y[4..], &[0.5, 0.0]);
}
