//! The instructions a language-model decoder needs — SILU, ARGMAX, SCATTER, PUT, SLICE at a
//! register offset, TGET and TSET — on the CPU, each against a model written here (index
//! arithmetic, float64), and the verifier's and the VM's errors as a user reads them.

mod common;

use adeadvm::isa::DType;
use adeadvm::vm::HostTensor;
use common::*;

fn i32_out(outs: &std::collections::BTreeMap<String, HostTensor>, name: &str) -> Vec<i32> {
    outs[name].to_i32().unwrap_or_else(|| panic!("{name} is not i32"))
}

#[test]
fn silu_is_x_times_sigmoid_within_its_bound() {
    let mut xs = Rng(11).vec(3000, -40.0, 40.0);
    xs.extend([0.0, -0.0, 1.0, -1.0, 88.0, -88.0, -104.0, 1e-3, -1e-3]);
    let n = xs.len();
    let src = format!(
        ".input %x f32[{n}]\n.output y f32[{n}]\nALLOC %t: f32[{n}]\nSILU %t, %x\nSTORE y, %t\nFREE %t\n"
    );
    let ys = run_y(&src, &[("x", f32s(&[n], &xs))]);
    for (&x, &y) in xs.iter().zip(&ys) {
        let x64 = x as f64;
        let want = x64 / (1.0 + (-x64).exp());
        // SIGMOID's documented bound (4 ulp) and one rounded multiply. Below x = -87 sigmoid
        // is under FLT_MIN and flushed, so SILU is -0 there: the bound is absolute,
        // |x| * FLT_MIN (ISA.md), about 1e-36.
        if x >= -87.0 {
            let u = ulps(y, want);
            assert!(u <= 5, "SILU({x:e}) = {y:e}, float64 {want:e}: {u} ulp");
        } else {
            let bound = x64.abs() * f32::MIN_POSITIVE as f64;
            assert!((y as f64 - want).abs() <= bound, "SILU({x:e}) = {y:e}, float64 {want:e}");
        }
    }
    let special = [f32::NEG_INFINITY, f32::INFINITY, f32::NAN];
    let src = ".input %x f32[3]\n.output y f32[3]\nALLOC %t: f32[3]\nSILU %t, %x\nSTORE y, %t\nFREE %t\n";
    let ys = run_y(src, &[("x", f32s(&[3], &special))]);
    assert_eq!(ys[0].to_bits(), (-0.0f32).to_bits(), "SILU(-inf) is -0, the limit");
    assert_eq!(ys[1], f32::INFINITY);
    assert!(ys[2].is_nan());
}

#[test]
fn argmax_takes_the_first_of_equal_maxima_and_the_first_nan() {
    let rows: Vec<Vec<f32>> = vec![
        vec![1.0, 3.0, 3.0, 2.0],
        vec![-0.0, 0.0, -1.0, -0.0],
        vec![5.0, f32::NAN, 9.0, f32::NAN],
        vec![f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY],
        vec![1e-40, 2e-40, 0.0, -1e-40],
        vec![-7.0, -3.0, f32::INFINITY, 1e30],
    ];
    // Written here, independently: NaN is larger than every number, ties go to the lowest
    // index, and denormals count as zero (the strict tier flushes them).
    let model = |r: &[f32]| -> i32 {
        let flush = |v: f32| {
            if v.is_nan() {
                f64::INFINITY
            } else if v.abs() < f32::MIN_POSITIVE {
                0.0
            } else {
                v as f64
            }
        };
        if let Some(i) = r.iter().position(|v| v.is_nan()) {
            return i as i32;
        }
        let top = r.iter().map(|&v| flush(v)).fold(f64::NEG_INFINITY, f64::max);
        r.iter().position(|&v| flush(v) == top).unwrap() as i32
    };
    let flat: Vec<f32> = rows.concat();
    let src = ".input %x f32[6, 4]\n.output i i32[6]\n.output k i32[6, 1]\nALLOC %i: i32[6]\nARGMAX %i, %x\nSTORE i, %i\n\
               ALLOC %k: i32[6, 1]\nARGMAX %k, %x\nSTORE k, %k\nFREE %k\nFREE %i\n";
    let outs = run(&build(src), &[("x", f32s(&[6, 4], &flat))]).unwrap();
    let want: Vec<i32> = rows.iter().map(|r| model(r)).collect();
    assert_eq!(i32_out(&outs, "i"), want);
    assert_eq!(i32_out(&outs, "k"), want, "the kept axis gives the same indices");
    assert_eq!(want, [1, 0, 1, 0, 0, 2], "the model itself reads the rows as the ISA says");

    // Large random rows in f16 and bf16, against the model over the widened values.
    for dtype in ["f16", "bf16", "f32"] {
        let (r, c) = (9, 1000);
        let mut x = Rng(5).vec(r * c, -2.0, 2.0);
        x[3 * c + 999] = 100.0;
        let t = HostTensor::from_f32(vec![r, c], &x).unwrap();
        let src = format!(
            ".input %x f32[{r}, {c}]\n.output i i32[{r}]\nALLOC %h: {dtype}[{r}, {c}]\nCAST %h, %x\nALLOC %i: i32[{r}]\n\
             ARGMAX %i, %h\nSTORE i, %i\nFREE %i\nFREE %h\n"
        );
        let outs = run(&build(&src), &[("x", t)]).unwrap();
        let rounded: Vec<f32> = match dtype {
            "f16" => x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect(),
            "bf16" => x.iter().map(|&v| half::bf16::from_f32(v).to_f32()).collect(),
            _ => x.clone(),
        };
        let want: Vec<i32> = rounded.chunks(c).map(model).collect();
        assert_eq!(i32_out(&outs, "i"), want, "{dtype}");
    }
}

#[test]
fn scatter_writes_rows_and_keeps_the_rest() {
    // dst: 3 x 2 x 4 seen as 6 rows of 4; src: 2 x 2 rows; a repeated index: the later row wins.
    let src =
        ".input %d f32[3, 2, 4]\n.input %s f32[2, 2, 4]\n.input %ix i32[2, 2]\n.output y f32[3, 2, 4]\n\
               ALLOC %y: f32[3, 2, 4]\nCOPY %y, %d\nSCATTER %y, %s, %ix\nSTORE y, %y\nFREE %y\n";
    let d: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let s: Vec<f32> = (0..16).map(|i| 100.0 + i as f32).collect();
    let ix = [5, 0, 2, 5];
    let y =
        run_y(src, &[("d", f32s(&[3, 2, 4], &d)), ("s", f32s(&[2, 2, 4], &s)), ("ix", i32s(&[2, 2], &ix))]);
    let mut want = d.clone();
    for (i, &r) in ix.iter().enumerate() {
        want[r as usize * 4..r as usize * 4 + 4].copy_from_slice(&s[i * 4..i * 4 + 4]);
    }
    assert_eq!(y, want);
    assert_eq!(&y[20..24], &[112.0, 113.0, 114.0, 115.0], "row 5: the last of the two writes");

    // i32 and 16-bit rows move as raw bits.
    let src =
        ".input %s i32[2, 3]\n.input %ix i32[2]\n.output y i32[4, 3]\nALLOC %y: i32[4, 3]\nFILL %y, -1\n\
               SCATTER %y, %s, %ix\nSTORE y, %y\nFREE %y\n";
    let outs =
        run(&build(src), &[("s", i32s(&[2, 3], &[1, 2, 3, 4, 5, 6])), ("ix", i32s(&[2], &[3, 1]))]).unwrap();
    assert_eq!(i32_out(&outs, "y"), [-1, -1, -1, 4, 5, 6, -1, -1, -1, 1, 2, 3]);

    let err = run(&build(src), &[("s", i32s(&[2, 3], &[1, 2, 3, 4, 5, 6])), ("ix", i32s(&[2], &[1, 4]))])
        .unwrap_err();
    assert_eq!(
        err,
        "instruction 2 (line 6, SCATTER): index 4 at position 1 of `ix` is outside the destination's 4 rows"
    );
}

#[test]
fn put_and_slice_at_register_offsets() {
    // A cache of 2 x 6 x 3; each step writes a 2 x 1 x 3 block at position r1, then reads the
    // first r1 + 1 positions back with a register-offset SLICE of length 2 ending at r1.
    let src = ".input %x f32[2, 4, 3]\n.output y f32[2, 6, 3]\n.output w f32[2, 2, 3]\n\
               ALLOC %c: f32[2, 6, 3]\nFILL %c, 0.5\nALLOC %step: f32[2, 1, 3]\nISET r1, 0\nISET r2, 4\n\
               loop:\nSLICE %step, %x, 1, r1\nIADDI r3, r1, 1\nPUT %c, %step, 1, r3\nIADDI r1, r1, 1\n\
               ISUB r4, r2, r1\nJNZ r4, loop\n\
               ALLOC %w: f32[2, 2, 3]\nISET r5, 3\nSLICE %w, %c, 1, r5\nSTORE w, %w\nFREE %w\n\
               STORE y, %c\nFREE %step\nFREE %c\n";
    let x: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let outs = run(&build(src), &[("x", f32s(&[2, 4, 3], &x))]).unwrap();
    let y = outs["y"].to_f32().unwrap();
    // Model: c[b, p, :] = x[b, p - 1, :] for p in 1..=4, 0.5 elsewhere.
    let mut want = vec![0.5f32; 36];
    for b in 0..2 {
        for p in 1..=4 {
            for k in 0..3 {
                want[(b * 6 + p) * 3 + k] = x[(b * 4 + p - 1) * 3 + k];
            }
        }
    }
    assert_eq!(y, want);
    let w = outs["w"].to_f32().unwrap();
    let want_w: Vec<f32> = (0..2).flat_map(|b| want[(b * 6 + 3) * 3..(b * 6 + 5) * 3].to_vec()).collect();
    assert_eq!(w, want_w);

    let bad = ".input %x f32[4, 3]\n.output y f32[6, 3]\nALLOC %c: f32[6, 3]\nFILL %c, 0\nISET r1, 3\n\
               PUT %c, %x, 0, r1\nSTORE y, %c\nFREE %c\n";
    let err = run(&build(bad), &[("x", f32s(&[4, 3], &[0.0; 12]))]).unwrap_err();
    assert_eq!(err, "instruction 3 (line 6, PUT): put r1 = 3 .. 3 + 4 is outside the axis of size 6");
    let bad = ".input %x f32[4, 3]\n.output y f32[2, 3]\nALLOC %c: f32[2, 3]\nISET r1, -1\n\
               SLICE %c, %x, 0, r1\nSTORE y, %c\nFREE %c\n";
    let err = run(&build(bad), &[("x", f32s(&[4, 3], &[0.0; 12]))]).unwrap_err();
    assert_eq!(err, "instruction 2 (line 5, SLICE): slice r1 = -1 .. -1 + 2 is outside the axis of size 4");
}

#[test]
fn tget_and_tset_move_scalars_and_drive_a_loop() {
    // Counts down from the first element of `n`, writing each count into `log` at its step,
    // and stops early at the stop value held in `stop`: how a generation loop ends on a token.
    let src = ".input %n i32[1]\n.input %stop i32[1]\n.output log i32[8]\n.output steps i32[1]\n\
               ALLOC %log: i32[8]\nFILL %log, -1\nALLOC %steps: i32[1]\nFILL %steps, 0\n\
               ISET r0, 0\nTGET r1, %n, r0\nTGET r2, %stop, r0\nISET r3, 0\n\
               loop:\nTSET %log, r3, r1\nIADDI r3, r3, 1\nIEQ r4, r1, r2\nJNZ r4, done\nIADDI r1, r1, -1\nJNZ r1, loop\n\
               done:\nTSET %steps, r0, r3\nSTORE log, %log\nSTORE steps, %steps\nFREE %steps\nFREE %log\n";
    let p = build(src);
    let outs = run(&p, &[("n", i32s(&[1], &[5])), ("stop", i32s(&[1], &[3]))]).unwrap();
    assert_eq!(i32_out(&outs, "log"), [5, 4, 3, -1, -1, -1, -1, -1]);
    assert_eq!(i32_out(&outs, "steps"), [3]);
    let outs = run(&p, &[("n", i32s(&[1], &[4])), ("stop", i32s(&[1], &[-9]))]).unwrap();
    assert_eq!(i32_out(&outs, "log"), [4, 3, 2, 1, -1, -1, -1, -1]);
    assert_eq!(i32_out(&outs, "steps"), [4]);

    // TSET wraps the register to 32 bits; an index outside the tensor is a clean error.
    let src =
        ".output y i32[2]\nALLOC %y: i32[2]\nFILL %y, 0\nISET r1, 2147483647\nIADDI r1, r1, 1\nISET r0, 1\n\
               TSET %y, r0, r1\nSTORE y, %y\nFREE %y\n";
    let outs = run(&build(src), &[]).unwrap();
    assert_eq!(i32_out(&outs, "y"), [0, i32::MIN]);
    let src = ".input %x i32[3]\n.output y i32[3]\nISET r0, 3\nTGET r1, %x, r0\nALLOC %y: i32[3]\nCOPY %y, %x\nSTORE y, %y\nFREE %y\n";
    let err = run(&build(src), &[("x", i32s(&[3], &[1, 2, 3]))]).unwrap_err();
    assert_eq!(err, "instruction 1 (line 4, TGET): index r0 = 3 is outside `x`'s 3 elements");
}

#[test]
fn the_verifier_explains_bad_decoder_instructions() {
    let cases: &[(&str, &str)] = &[
        (
            ".input %x f32[4, 3]\n.output y f32[4]\nALLOC %y: f32[4]\nARGMAX %y, %x\nSTORE y, %y\nFREE %y\n",
            "ARGMAX writes i32 indices, but dst %y (f32[4]) is not i32",
        ),
        (
            ".input %x f32[4, 3]\n.output y i32[3]\nALLOC %y: i32[3]\nARGMAX %y, %x\nSTORE y, %y\nFREE %y\n",
            "dst %y (i32[3]) should be [4] (the last axis dropped) or [4, 1] (kept with size 1) for src %x (f32[4, 3])",
        ),
        (
            ".input %s f32[2, 3]\n.input %ix i32[2]\n.output y f32[4, 5]\nALLOC %y: f32[4, 5]\nFILL %y, 0\n\
             SCATTER %y, %s, %ix\nSTORE y, %y\nFREE %y\n",
            "must have the same last axis",
        ),
        (
            ".input %s f32[2, 3]\n.input %ix i32[3]\n.output y f32[4, 3]\nALLOC %y: f32[4, 3]\nFILL %y, 0\n\
             SCATTER %y, %s, %ix\nSTORE y, %y\nFREE %y\n",
            "indices %ix (i32[3]) should be [2] (src's shape without its last axis)",
        ),
        (
            ".input %s f32[2, 3]\n.output y f32[4, 3]\nALLOC %y: f32[4, 3]\nISET r1, 0\nPUT %y, %s, 0, r1\nSTORE y, %y\nFREE %y\n",
            "writes into part of %y before anything wrote it",
        ),
        (
            ".input %s f32[5, 3]\n.output y f32[4, 3]\nALLOC %y: f32[4, 3]\nFILL %y, 0\nISET r1, 0\nPUT %y, %s, 0, r1\n\
             STORE y, %y\nFREE %y\n",
            "src %s (f32[5, 3]) is longer on axis 0 (5) than dst %y (f32[4, 3]) (4)",
        ),
        (
            ".input %x f32[3]\n.output y f32[3]\nISET r0, 0\nTGET r1, %x, r0\nALLOC %y: f32[3]\nCOPY %y, %x\nSTORE y, %y\nFREE %y\n",
            "TGET moves i32 elements, but tensor %x (f32[3]) is not i32",
        ),
    ];
    for (src, want) in cases {
        let err = try_build(src).map(|_| ()).unwrap_err();
        assert!(err.contains(want), "expected `{want}` in:\n{err}");
    }
}

#[test]
fn a_partial_write_keeps_16_bit_neighbours() {
    // bf16 rows of odd length: a PUT of one element between two others must leave both halves
    // of the neighbouring words alone.
    let src = ".input %x f32[5]\n.input %v f32[1]\n.output y f32[5]\nALLOC %h: bf16[5]\nCAST %h, %x\nALLOC %hv: bf16[1]\n\
               CAST %hv, %v\nISET r1, 2\nPUT %h, %hv, 0, r1\nALLOC %y: f32[5]\nCAST %y, %h\nSTORE y, %y\nFREE %y\nFREE %hv\nFREE %h\n";
    let y = run_y(src, &[("x", f32s(&[5], &[1.0, 2.0, 3.0, 4.0, 5.0])), ("v", f32s(&[1], &[-8.0]))]);
    assert_eq!(y, [1.0, 2.0, -8.0, 4.0, 5.0]);
    assert_eq!(DType::Bf16.size(), 2);
}
