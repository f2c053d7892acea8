//! Embedding adeadvm in a Rust program: load once, run from a session, read outputs.
//!
//! `cargo run --example embed`

use adeadvm::api::{Config, Program, Session};
use adeadvm::HostTensor;

fn main() -> Result<(), adeadvm::Error> {
    // A .bib file, its bytes, or assembly (assembled in memory) all load the same way.
    let program = Program::load(concat!(env!("CARGO_MANIFEST_DIR"), "/programs/mlp.s"))?;
    println!("program {} (tier {})", &program.digest_hex()[..16], program.tier().name());
    for i in program.inputs() {
        println!("  input  {}: {}{}", i.name, i.dtype, i.shape);
    }

    // A session per thread; the program is shared (Program is an Arc inside).
    let mut session = Session::new(&program, &Config { threads: Some(2), ..Config::default() })?;
    let x: Vec<f32> = (0..2 * 784).map(|i| ((i * 37) % 101) as f32 / 101.0 - 0.5).collect();
    session.set_input("x", HostTensor::from_f32(vec![2, 784], &x).expect("2*784 values"))?;
    let stats = session.run()?;
    let y = session.output("y")?;
    println!("ran {} steps; y: {}{:?}", stats.steps, y.dtype, y.shape);
    for row in y.to_f32().expect("f32 output").chunks(10) {
        println!("  {row:?}");
    }

    // Errors carry each stage's own message.
    if let Err(e) = session.set_input("nope", HostTensor::from_f32(vec![1], &[0.0]).unwrap()) {
        println!("error, as expected: {e}");
    }
    Ok(())
}
