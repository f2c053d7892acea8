//! One program of the comparisons (EQ, LT, LE), SELECT and ERF over every dtype, broadcasting
//! (rows, columns, a scalar-like [1, C] expanded to [R, C]) and special values (NaN payloads,
//! ±0, denormals, ±inf, i32 extremes), on tensors large enough for the CPU scheduler's
//! batches; and a model of every output written here from the inputs alone (float64
//! comparisons of the flushed values, the chosen elements' bits, erf in float64), so the
//! executors are held to the ISA's definitions and not only to each other.

use std::collections::BTreeMap;

use adeadvm::isa::DType;
use adeadvm::numerics::accuracy::ulp_error;
use adeadvm::vm::HostTensor;

use super::{erf64, Rng};

/// The documented bound of ERF (docs/ISA.md), in ulps.
pub const ERF_ULPS: f64 = 2.0;

/// f32 bit patterns that matter to a comparison: both zeros, denormals, FLT_MIN, ±1, ±inf,
/// NaNs with payloads.
const SPECIAL: [u32; 14] = [
    0x0000_0000,
    0x8000_0000,
    0x0000_0001,
    0x8000_0001,
    0x007f_ffff,
    0x0080_0000,
    0x8080_0000,
    0x3f80_0000,
    0xbf80_0000,
    0x7f80_0000,
    0xff80_0000,
    0x7fc0_0000,
    0x7f80_1234,
    0xffc0_0001,
];

/// The inputs: name, dtype, shape and bytes.
pub struct Inputs {
    pub r: usize,
    pub c: usize,
    pub tensors: Vec<(&'static str, HostTensor)>,
}

fn f32_bits(rng: &mut Rng, n: usize) -> Vec<u32> {
    (0..n)
        .map(|_| match rng.next_u64() % 8 {
            0 | 1 => SPECIAL[(rng.next_u64() % SPECIAL.len() as u64) as usize],
            2 => (rng.next_u64() as u32) & 0x807f_ffff, // zero or denormal of either sign
            3 => rng.next_u64() as u32,                 // any pattern
            _ => rng.uniform(-3.0, 3.0).to_bits(),
        })
        .collect()
}

/// `b` that often equals `a` (the same bits, or the other zero, or a denormal of a zero).
fn near(rng: &mut Rng, a: &[u32]) -> Vec<u32> {
    let mut b = f32_bits(rng, a.len());
    for (v, &x) in b.iter_mut().zip(a) {
        match rng.next_u64() % 4 {
            0 => *v = x,
            1 if x & 0x7f80_0000 == 0 => *v = (x ^ 0x8000_0000) & 0x8000_0001,
            _ => {}
        }
    }
    b
}

fn ints(rng: &mut Rng, n: usize) -> Vec<i32> {
    (0..n)
        .map(|_| match rng.next_u64() % 6 {
            0 => [i32::MIN, i32::MAX, -1, 0, 1, i32::MIN + 1][(rng.next_u64() % 6) as usize],
            _ => (rng.next_u64() % 7) as i32 - 3,
        })
        .collect()
}

/// 16-bit patterns from f32 bits: the top half (bf16) or an f16 made of the same bits' pieces,
/// with f16 and bf16 specials (denormals, NaN payloads, ±0, ±inf) among them.
fn halves(rng: &mut Rng, n: usize, bf16: bool) -> Vec<u16> {
    let specials: [u16; 8] = if bf16 {
        [0x0000, 0x8000, 0x0001, 0x807f, 0x7f80, 0xff80, 0x7fc1, 0x3f80]
    } else {
        [0x0000, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00, 0x7e01, 0x3c00]
    };
    (0..n)
        .map(|_| match rng.next_u64() % 4 {
            0 => specials[(rng.next_u64() % 8) as usize],
            1 => rng.next_u64() as u16,
            _ if bf16 => (rng.uniform(-3.0, 3.0).to_bits() >> 16) as u16,
            _ => half::f16::from_f32(rng.uniform(-3.0, 3.0)).to_bits(),
        })
        .collect()
}

fn near16(rng: &mut Rng, a: &[u16], bf16: bool) -> Vec<u16> {
    let mut b = halves(rng, a.len(), bf16);
    for (v, &x) in b.iter_mut().zip(a) {
        if rng.next_u64().is_multiple_of(3) {
            *v = x;
        }
    }
    b
}

fn tensor(dtype: DType, shape: &[usize], bytes: &[u8]) -> HostTensor {
    HostTensor::from_bytes(dtype, shape.to_vec(), bytes).expect("bytes match the shape")
}

fn words(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn halfwords(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The inputs for [`program`]'s `r` x `c` tensors, from `seed`.
pub fn inputs(seed: u64, r: usize, c: usize) -> Inputs {
    let mut rng = Rng(seed);
    let n = r * c;
    let x = f32_bits(&mut rng, n);
    let y = near(&mut rng, &x);
    let row = near(&mut rng, &x[..c]);
    let col = f32_bits(&mut rng, r);
    let i = ints(&mut rng, n);
    let j = ints(&mut rng, c);
    let xh = halves(&mut rng, n, false);
    let yh = near16(&mut rng, &xh, false);
    let rowh = near16(&mut rng, &xh[..c], false);
    let xb = halves(&mut rng, n, true);
    let yb = near16(&mut rng, &xb, true);
    let colc: Vec<i32> = (0..r).map(|k| [0, 1, -7, i32::MIN][k % 4]).collect();
    let row1 = f32_bits(&mut rng, c);
    let i32b = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|w| w.to_le_bytes()).collect() };
    Inputs {
        r,
        c,
        tensors: vec![
            ("x", tensor(DType::F32, &[r, c], &words(&x))),
            ("y", tensor(DType::F32, &[r, c], &words(&y))),
            ("row", tensor(DType::F32, &[c], &words(&row))),
            ("col", tensor(DType::F32, &[r, 1], &words(&col))),
            ("i", tensor(DType::I32, &[r, c], &i32b(&i))),
            ("j", tensor(DType::I32, &[c], &i32b(&j))),
            ("xh", tensor(DType::F16, &[r, c], &halfwords(&xh))),
            ("yh", tensor(DType::F16, &[r, c], &halfwords(&yh))),
            ("rowh", tensor(DType::F16, &[c], &halfwords(&rowh))),
            ("xb", tensor(DType::Bf16, &[r, c], &halfwords(&xb))),
            ("yb", tensor(DType::Bf16, &[r, c], &halfwords(&yb))),
            ("colc", tensor(DType::I32, &[r, 1], &i32b(&colc))),
            ("row1", tensor(DType::F32, &[1, c], &words(&row1))),
        ],
    }
}

/// The program over [`inputs`]: six independent large kernels in a row (EQ, LT, LE on f32,
/// EQ and LT on i32, ERF), then four independent SELECTs (32-bit, from those results; one
/// expands a row and a column; one expands a [1, C] row to [R, C] under an all-ones cond),
/// then the 16-bit forms. Instruction k of those carries `placements[k % len]` (`@gpu`,
/// `@cpu` or "") after its mnemonic.
pub fn program(r: usize, c: usize, placements: &[&str]) -> String {
    let mut s = format!(
        ".input %x f32[{r}, {c}]\n.input %y f32[{r}, {c}]\n.input %row f32[{c}]\n.input %col f32[{r}, 1]\n\
         .input %i i32[{r}, {c}]\n.input %j i32[{c}]\n.input %xh f16[{r}, {c}]\n.input %yh f16[{r}, {c}]\n\
         .input %rowh f16[{c}]\n.input %xb bf16[{r}, {c}]\n.input %yb bf16[{r}, {c}]\n.input %colc i32[{r}, 1]\n\
         .input %row1 f32[1, {c}]\n"
    );
    let outs: [(&str, &str); 15] = [
        ("e", "i32"),
        ("l", "i32"),
        ("le", "i32"),
        ("ie", "i32"),
        ("il", "i32"),
        ("er", "f32"),
        ("s", "f32"),
        ("s2", "f32"),
        ("si", "i32"),
        ("ex", "f32"),
        ("eh", "i32"),
        ("lb", "i32"),
        ("leh", "i32"),
        ("sh", "f16"),
        ("sb", "bf16"),
    ];
    for (name, dt) in outs {
        s += &format!(".output {name} {dt}[{r}, {c}]\n");
    }
    s += &format!("ALLOC %ones: i32[{r}, {c}]\nFILL %ones, 1\n");
    for (name, dt) in outs {
        s += &format!("ALLOC %{name}: {dt}[{r}, {c}]\n");
    }
    let code = [
        "EQ %e, %x, %y",
        "LT %l, %x, %row",
        "LE %le, %col, %x",
        "EQ %ie, %i, %j",
        "LT %il, %j, %i",
        "ERF %er, %x",
        "SELECT %s, %l, %x, %y",
        "SELECT %s2, %le, %row, %col",
        "SELECT %si, %e, %i, %j",
        "SELECT %ex, %ones, %row1, %row1",
        "EQ %eh, %xh, %yh",
        "LT %lb, %xb, %yb",
        "LE %leh, %xh, %rowh",
        "SELECT %sh, %l, %xh, %yh",
        "SELECT %sb, %colc, %xb, %yb",
    ];
    for (k, line) in code.iter().enumerate() {
        let (m, rest) = line.split_once(' ').expect("mnemonic and operands");
        let p = placements.get(k % placements.len().max(1)).copied().unwrap_or("");
        s += &format!("{m}{p} {rest}\n");
    }
    for (name, _) in outs {
        s += &format!("STORE {name}, %{name}\nFREE %{name}\n");
    }
    s += "FREE %ones\n";
    s
}

/// The value of a float element under the strict rules: f32 and bf16 denormals are zeros of
/// their sign; f16 widens exactly (its denormals are normal f32 values).
fn value(dtype: DType, bytes: &[u8], k: usize) -> f64 {
    match dtype {
        DType::F32 => {
            let v = f32::from_le_bytes(bytes[4 * k..4 * k + 4].try_into().unwrap());
            if v.is_finite() && v.abs() < f32::MIN_POSITIVE {
                0.0
            } else {
                v as f64
            }
        }
        DType::F16 => half::f16::from_bits(u16::from_le_bytes([bytes[2 * k], bytes[2 * k + 1]])).to_f64(),
        DType::Bf16 => {
            let v = half::bf16::from_bits(u16::from_le_bytes([bytes[2 * k], bytes[2 * k + 1]])).to_f64();
            if v.is_finite() && v.abs() < f32::MIN_POSITIVE as f64 {
                0.0
            } else {
                v
            }
        }
        DType::I32 => i32::from_le_bytes(bytes[4 * k..4 * k + 4].try_into().unwrap()) as f64,
    }
}

/// Element `k` of a tensor's bytes as one word (2 or 4 bytes).
fn word(t: &HostTensor, k: usize) -> u32 {
    let s = t.dtype.size();
    let b = &t.bytes()[s * k..s * (k + 1)];
    if s == 2 {
        u16::from_le_bytes([b[0], b[1]]) as u32
    } else {
        u32::from_le_bytes(b.try_into().unwrap())
    }
}

/// Checks every output of [`program`] against the model; panics naming the first difference.
pub fn check_model(inputs: &Inputs, outs: &BTreeMap<String, HostTensor>, what: &str) {
    let (r, c) = (inputs.r, inputs.c);
    let input = |name: &str| &inputs.tensors.iter().find(|(n, _)| *n == name).expect("input").1;
    // Flat index of an [R, C] output's element in an operand of `shape` (broadcast).
    let at = |shape: &[usize], k: usize| -> usize {
        let (i, j) = (k / c, k % c);
        match shape {
            [n] if *n == c => j,
            [_, 1] => i,
            [1, _] => j,
            _ => k,
        }
    };
    let cmp = |op: &str, x: f64, y: f64| -> u32 {
        u32::from(match op {
            "EQ" => x == y,
            "LT" => x < y,
            _ => x <= y,
        })
    };
    // (output, op, a, b)
    let compares = [
        ("e", "EQ", "x", "y"),
        ("l", "LT", "x", "row"),
        ("le", "LE", "col", "x"),
        ("ie", "EQ", "i", "j"),
        ("il", "LT", "j", "i"),
        ("eh", "EQ", "xh", "yh"),
        ("lb", "LT", "xb", "yb"),
        ("leh", "LE", "xh", "rowh"),
    ];
    for (out, op, a, b) in compares {
        let (ta, tb, to) = (input(a), input(b), &outs[out]);
        assert_eq!(to.dtype, DType::I32);
        for k in 0..r * c {
            let x = value(ta.dtype, ta.bytes(), at(&ta.shape, k));
            let y = value(tb.dtype, tb.bytes(), at(&tb.shape, k));
            let want = cmp(op, x, y);
            assert_eq!(word(to, k), want, "{what}: {out} = {op} {a}, {b} at {k}: {x:e} vs {y:e}");
        }
    }
    // (output, cond, a, b): cond an output of the program or an input.
    let selects = [
        ("s", "l", "x", "y"),
        ("s2", "le", "row", "col"),
        ("si", "e", "i", "j"),
        ("sh", "l", "xh", "yh"),
        ("sb", "colc", "xb", "yb"),
    ];
    for (out, cond, a, b) in selects {
        let tc = outs.get(cond).unwrap_or_else(|| input(cond));
        let (ta, tb, to) = (input(a), input(b), &outs[out]);
        for k in 0..r * c {
            let ck = word(tc, at(&tc.shape, k));
            let want = if ck != 0 { word(ta, at(&ta.shape, k)) } else { word(tb, at(&tb.shape, k)) };
            assert_eq!(word(to, k), want, "{what}: {out} = SELECT {cond}, {a}, {b} at {k} (cond {ck})");
        }
    }
    // The expand: every row is row1, bit for bit.
    let (row1, ex) = (input("row1"), &outs["ex"]);
    for k in 0..r * c {
        assert_eq!(word(ex, k), word(row1, k % c), "{what}: ex (expand of row1) at {k}");
    }
    // ERF within its documented bound of the float64 erf of the flushed input.
    let (x, er) = (input("x"), &outs["er"]);
    for k in 0..r * c {
        let v = value(DType::F32, x.bytes(), k);
        let got = f32::from_bits(word(er, k));
        let e = ulp_error(got, erf64(v));
        assert!(e <= ERF_ULPS, "{what}: ERF({v:e}) = {got:e}, {e} ulp from {:e}", erf64(v));
        if v.is_nan() {
            assert_eq!(got.to_bits(), 0x7fc0_0000, "{what}: ERF(NaN) is the canonical NaN");
        }
    }
}
