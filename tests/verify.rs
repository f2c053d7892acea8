//! The verifier: every rejection with its message as a user sees it, and the memory plan.

use adeadvm::format::{
    Blob, ConstData, KernelDecl, OutputDecl, Program, SpirvModule, TensorDecl, TensorKind, DATA_ALIGN,
};
use adeadvm::isa::{
    Act, DType, Dim, Insn, Instruction, KernelId, OutputId, Perm, Placement, Reg, SymId, Target, TensorId,
    Tier,
};
use adeadvm::verify::{verify, PlanError, VerifiedProgram, ARENA_ALIGN, MAX_ERRORS, MAX_INTERFERENCE_PAIRS};
use proptest::prelude::*;

use DType::{Bf16, F16, F32, I32};

fn c(n: u32) -> Dim {
    Dim::Const(n)
}

/// Builds programs directly; instruction i gets source line 10 + i.
#[derive(Default)]
struct B {
    p: Program,
    data: Vec<u8>,
}

impl B {
    fn new() -> B {
        B::default()
    }
    fn fast(mut self) -> B {
        self.p.tier = Tier::Fast;
        self
    }
    fn sym(&mut self, name: &str) -> Dim {
        self.p.syms.push(name.into());
        Dim::Sym(SymId(self.p.syms.len() as u16 - 1))
    }
    fn tensor(&mut self, name: &str, dtype: DType, shape: &[Dim], kind: TensorKind) -> TensorId {
        self.p.tensors.push(TensorDecl { name: name.into(), dtype, shape: shape.to_vec(), kind });
        TensorId(self.p.tensors.len() as u16 - 1)
    }
    fn input(&mut self, name: &str, dtype: DType, shape: &[Dim]) -> TensorId {
        self.tensor(name, dtype, shape, TensorKind::Input)
    }
    fn temp(&mut self, name: &str, dtype: DType, shape: &[Dim]) -> TensorId {
        self.tensor(name, dtype, shape, TensorKind::Temp)
    }
    fn splat(&mut self, name: &str, dtype: DType, shape: &[Dim], bits: u32) -> TensorId {
        self.tensor(name, dtype, shape, TensorKind::Const(ConstData::Splat(bits)))
    }
    fn bytes(&mut self, name: &str, dtype: DType, shape: &[Dim], len: usize) -> TensorId {
        let offset = self.data.len().next_multiple_of(DATA_ALIGN);
        self.data.resize(offset + len, 0);
        let data = ConstData::Bytes { offset: offset as u64, len: len as u64 };
        self.tensor(name, dtype, shape, TensorKind::Const(data))
    }
    fn output(&mut self, name: &str, dtype: DType, shape: &[Dim]) -> OutputId {
        self.p.outputs.push(OutputDecl { name: name.into(), dtype, shape: shape.to_vec() });
        OutputId(self.p.outputs.len() as u16 - 1)
    }
    fn op(&mut self, insn: Insn) -> &mut B {
        self.op_at(insn, Placement::Auto)
    }
    fn op_at(&mut self, insn: Insn, placement: Placement) -> &mut B {
        self.p.code.push(Instruction { insn, placement }.encode());
        self.p.debug.lines.push(10 + self.p.code.len() as u32 - 1);
        self
    }
    fn ops(&mut self, insns: &[Insn]) -> &mut B {
        for &i in insns {
            self.op(i);
        }
        self
    }
    fn build(&mut self) -> Program {
        let mut p = std::mem::take(&mut self.p);
        p.data = Blob::from_vec(std::mem::take(&mut self.data));
        p
    }
}

fn ok(mut b: B) -> VerifiedProgram {
    match verify(b.build()) {
        Ok(v) => v,
        Err(e) => panic!("expected the program to verify, got: {e}"),
    }
}

fn err(mut b: B) -> String {
    match verify(b.build()) {
        Ok(_) => panic!("expected a verify error"),
        Err(e) => e.to_string(),
    }
}

/// `ALLOC dst; <insn>; FREE dst` with the given tensors.
fn around(b: &mut B, dst: TensorId, insn: Insn) {
    b.ops(&[Insn::Alloc { t: dst }, insn, Insn::Free { t: dst }]);
}

fn unary(dst: TensorId, a: TensorId) -> Insn {
    Insn::Relu { dst, a }
}

// ---------------------------------------------------------------------------------------
// Decoding, ids, jumps, tiers, placement.

#[test]
fn undecodable_instruction() {
    let mut b = B::new();
    b.op(Insn::Nop);
    b.p.code.push([0xEE; 16]);
    b.p.debug.lines.push(11);
    assert_eq!(err(b), "instruction 1 (line 11): cannot decode the instruction: unknown opcode 0xee");

    let mut b = B::new();
    let mut bytes = Instruction { insn: Insn::Halt, placement: Placement::Auto }.encode();
    bytes[5] = 1;
    b.p.code.push(bytes);
    assert_eq!(
        err(b),
        "instruction 0 (HALT): cannot decode the instruction: HALT: byte 5 after the operands is 0x01, expected 0"
    );
}

#[test]
fn tensor_output_kernel_ids_in_range() {
    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    b.op(Insn::Neg { dst: TensorId(9), a: x });
    assert_eq!(
        err(b),
        "instruction 0 (line 10, NEG): operand `dst` is tensor id 9, but the program has only 1 tensors"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    b.op(Insn::Store { out: OutputId(0), src: x });
    assert_eq!(
        err(b),
        "instruction 0 (line 10, STORE): output id 0 is out of range (the program declares 0 outputs)"
    );

    let mut b = B::new().fast();
    b.op(Insn::Kernel { k: KernelId(2) });
    assert_eq!(
        err(b),
        "instruction 0 (line 10, KERNEL): kernel id 2 is out of range (the program declares 0 kernels)"
    );
}

#[test]
fn jump_target_past_the_end() {
    let mut b = B::new();
    b.ops(&[Insn::Iset { rd: Reg(0), value: 1 }, Insn::Jnz { cond: Reg(0), target: Target(2) }]);
    assert_eq!(
        err(b),
        "instruction 1 (line 11, JNZ): jump target 2 is past the end of the code (2 instructions; targets must be 0..1)"
    );
}

#[test]
fn kernel_needs_fast_tier_and_gpu() {
    let (mut b, _, _) = kernel_program(&[true, false], 0);
    b.p.tier = Tier::Strict;
    assert_eq!(
        err(b),
        "instruction 2 (line 12, KERNEL): KERNEL runs user SPIR-V, which is fast tier only (its results are \
         reproducible only on one device and driver), but this program is strict tier; declare `.tier fast` to use it"
    );

    let (mut b, _, _) = kernel_program(&[true, false], 0);
    let at = Instruction { insn: Insn::Kernel { k: KernelId(0) }, placement: Placement::Cpu }.encode();
    b.p.code[2] = at;
    assert_eq!(
        err(b),
        "instruction 2 (line 12, KERNEL): KERNEL runs only on the Vulkan executor and cannot be placed `@cpu`; \
         remove `@cpu`"
    );
}

// ---------------------------------------------------------------------------------------
// Dtypes.

#[test]
fn dtype_class() {
    let mut b = B::new();
    let x = b.input("x", I32, &[c(4)]);
    let y = b.temp("y", I32, &[c(4)]);
    around(&mut b, y, Insn::Sqrt { dst: y, a: x });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SQRT): SQRT takes float (f32, f16, bf16) tensors, but dst %y (i32[4]) is i32"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    let y = b.temp("y", F32, &[c(4)]);
    around(&mut b, y, Insn::Add { dst: y, a: x, b: x });
    ok(b);
}

#[test]
fn dtype_mismatch() {
    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    let h = b.input("h", F16, &[c(4)]);
    let y = b.temp("y", F32, &[c(4)]);
    around(&mut b, y, Insn::Add { dst: y, a: x, b: h });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, ADD): dtype mismatch: dst %y (f32[4]) is f32 but b %h (f16[4]) is f16; the \
         operands must share one dtype"
    );
}

#[test]
fn gather_indices_must_be_i32() {
    let mut b = B::new();
    let table = b.splat("emb", F32, &[c(100), c(16)], 0);
    let idx = b.input("ids", F32, &[c(2), c(3)]);
    let y = b.temp("y", F32, &[c(2), c(3), c(16)]);
    around(&mut b, y, Insn::Gather { dst: y, table, indices: idx });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, GATHER): GATHER indices must be i32, but indices %ids (f32[2, 3]) is not"
    );

    let mut b = B::new();
    let table = b.splat("emb", Bf16, &[c(100), c(16)], 0);
    let idx = b.input("ids", I32, &[c(2), c(3)]);
    let y = b.temp("y", Bf16, &[c(2), c(16)]);
    around(&mut b, y, Insn::Gather { dst: y, table, indices: idx });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, GATHER): dst %y (bf16[2, 16]) should be [2, 3, 16] (indices' shape followed by \
         table's shape without its first axis)"
    );
}

#[test]
fn cast_any_numeric_pair() {
    for (from, to) in [(F32, I32), (I32, Bf16), (F16, F32), (Bf16, F16)] {
        let mut b = B::new();
        let x = b.input("x", from, &[c(4)]);
        let y = b.temp("y", to, &[c(4)]);
        around(&mut b, y, Insn::Cast { dst: y, src: x });
        ok(b);
    }
    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    let y = b.temp("y", I32, &[c(5)]);
    around(&mut b, y, Insn::Cast { dst: y, src: x });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, CAST): shape mismatch: dst %y (i32[5]) and src %x (f32[4]) must have the same shape"
    );
}

// ---------------------------------------------------------------------------------------
// Shapes.

#[test]
fn broadcasting() {
    let mut b = B::new();
    let bs = b.sym("B");
    let x = b.input("x", F32, &[bs, c(1), c(4)]);
    let bias = b.splat("bias", F32, &[c(3), c(1)], 0);
    let y = b.temp("y", F32, &[bs, c(3), c(4)]);
    around(&mut b, y, Insn::Add { dst: y, a: x, b: bias });
    ok(b);

    let mut b = B::new();
    let x = b.input("x", F32, &[c(2), c(3)]);
    let z = b.input("z", F32, &[c(4)]);
    let y = b.temp("y", F32, &[c(2), c(3)]);
    around(&mut b, y, Insn::Mul { dst: y, a: x, b: z });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, MUL): shapes do not broadcast: a %x (f32[2, 3]) and b %z (f32[4]) have sizes 3 \
         and 4 on axis -1 (sizes must be equal or 1)"
    );

    // Two different symbols never agree, even though they might be equal at run time.
    let mut b = B::new();
    let (s, t) = (b.sym("S"), b.sym("T"));
    let x = b.input("x", F32, &[s]);
    let z = b.input("z", F32, &[t]);
    let y = b.temp("y", F32, &[s]);
    around(&mut b, y, Insn::Sub { dst: y, a: x, b: z });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SUB): shapes do not broadcast: a %x (f32[S]) and b %z (f32[T]) have sizes S and \
         T on axis -1 (sizes must be equal or 1)"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(2), c(3)]);
    let y = b.temp("y", F32, &[c(3)]);
    around(&mut b, y, Insn::Max { dst: y, a: x, b: x });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, MAX): dst %y (f32[3]) should be [2, 3] (the broadcast shape of a and b)"
    );
}

// ---------------------------------------------------------------------------------------
// Comparisons and SELECT: the operand types the ISA fixes (an i32 dst, an i32 cond).

#[test]
fn comparisons_write_i32_from_one_source_dtype() {
    // Every source dtype, broadcasting as ADD does.
    for d in [F32, F16, Bf16, I32] {
        let mut b = B::new();
        let x = b.input("x", d, &[c(2), c(3)]);
        let z = b.input("z", d, &[c(3)]);
        let k = b.temp("k", I32, &[c(2), c(3)]);
        b.ops(&[
            Insn::Alloc { t: k },
            Insn::Eq { dst: k, a: x, b: z },
            Insn::Lt { dst: k, a: z, b: x },
            Insn::Le { dst: k, a: x, b: x },
            Insn::Free { t: k },
        ]);
        ok(b);
    }

    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    let y = b.temp("y", F32, &[c(4)]);
    around(&mut b, y, Insn::Eq { dst: y, a: x, b: x });
    assert_eq!(err(b), "instruction 1 (line 11, EQ): EQ's dst is always i32, but dst %y (f32[4]) is f32");

    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    let h = b.input("h", F16, &[c(4)]);
    let k = b.temp("k", I32, &[c(4)]);
    around(&mut b, k, Insn::Lt { dst: k, a: x, b: h });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, LT): dtype mismatch: a %x (f32[4]) is f32 but b %h (f16[4]) is f16; the operands \
         must share one dtype"
    );

    // i32 against f32 is a mismatch too (no implicit conversion).
    let mut b = B::new();
    let x = b.input("x", I32, &[c(4)]);
    let h = b.input("h", F32, &[c(4)]);
    let k = b.temp("k", I32, &[c(4)]);
    around(&mut b, k, Insn::Le { dst: k, a: x, b: h });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, LE): dtype mismatch: a %x (i32[4]) is i32 but b %h (f32[4]) is f32; the operands \
         must share one dtype"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(2), c(3)]);
    let z = b.input("z", F32, &[c(4)]);
    let k = b.temp("k", I32, &[c(2), c(3)]);
    around(&mut b, k, Insn::Lt { dst: k, a: x, b: z });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, LT): shapes do not broadcast: a %x (f32[2, 3]) and b %z (f32[4]) have sizes 3 \
         and 4 on axis -1 (sizes must be equal or 1)"
    );

    let mut b = B::new();
    let x = b.input("x", Bf16, &[c(2), c(3)]);
    let k = b.temp("k", I32, &[c(3)]);
    around(&mut b, k, Insn::Le { dst: k, a: x, b: x });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, LE): dst %k (i32[3]) should be [2, 3] (the broadcast shape of a and b)"
    );
}

#[test]
fn select_takes_an_i32_cond_and_one_dtype_for_the_rest() {
    // Every dtype; dst larger than both a and b (an expand: cond has dst's shape).
    for d in [F32, F16, Bf16, I32] {
        let mut b = B::new();
        let m = b.input("m", I32, &[c(4), c(5)]);
        let x = b.input("x", d, &[c(1), c(5)]);
        let z = b.input("z", d, &[]);
        let y = b.temp("y", d, &[c(4), c(5)]);
        b.ops(&[
            Insn::Alloc { t: y },
            Insn::Select { dst: y, cond: m, a: x, b: x },
            Insn::Select { dst: y, cond: m, a: z, b: y },
            Insn::Free { t: y },
        ]);
        ok(b);
    }
    // cond broadcast too: [4, 1] against [1, 5] and a scalar.
    let mut b = B::new();
    let m = b.input("m", I32, &[c(4), c(1)]);
    let x = b.input("x", F32, &[c(1), c(5)]);
    let z = b.input("z", F32, &[]);
    let y = b.temp("y", F32, &[c(4), c(5)]);
    around(&mut b, y, Insn::Select { dst: y, cond: m, a: x, b: z });
    ok(b);

    let mut b = B::new();
    let m = b.input("m", F32, &[c(4)]);
    let x = b.input("x", F32, &[c(4)]);
    let y = b.temp("y", F32, &[c(4)]);
    around(&mut b, y, Insn::Select { dst: y, cond: m, a: x, b: x });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SELECT): SELECT's cond is always i32, but cond %m (f32[4]) is f32"
    );

    let mut b = B::new();
    let m = b.input("m", I32, &[c(4)]);
    let x = b.input("x", F32, &[c(4)]);
    let h = b.input("h", F16, &[c(4)]);
    let y = b.temp("y", F32, &[c(4)]);
    around(&mut b, y, Insn::Select { dst: y, cond: m, a: x, b: h });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SELECT): dtype mismatch: dst %y (f32[4]) is f32 but b %h (f16[4]) is f16; the \
         operands must share one dtype"
    );

    let mut b = B::new();
    let m = b.input("m", I32, &[c(4)]);
    let x = b.input("x", F32, &[c(4)]);
    let y = b.temp("y", Bf16, &[c(4)]);
    around(&mut b, y, Insn::Select { dst: y, cond: m, a: x, b: x });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SELECT): dtype mismatch: dst %y (bf16[4]) is bf16 but a %x (f32[4]) is f32; the \
         operands must share one dtype"
    );

    let mut b = B::new();
    let m = b.input("m", I32, &[c(3)]);
    let x = b.input("x", F32, &[c(2), c(4)]);
    let z = b.input("z", F32, &[c(4)]);
    let y = b.temp("y", F32, &[c(2), c(4)]);
    around(&mut b, y, Insn::Select { dst: y, cond: m, a: x, b: z });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SELECT): shapes do not broadcast: cond %m (i32[3]) and a %x (f32[2, 4]) have \
         sizes 3 and 4 on axis -1 (sizes must be equal or 1)"
    );

    // Each pair broadcasts but for cond and b.
    let mut b = B::new();
    let m = b.input("m", I32, &[c(4), c(1)]);
    let x = b.input("x", F32, &[c(1), c(5)]);
    let z = b.input("z", F32, &[c(3), c(1)]);
    let y = b.temp("y", F32, &[c(4), c(5)]);
    around(&mut b, y, Insn::Select { dst: y, cond: m, a: x, b: z });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SELECT): shapes do not broadcast: cond %m (i32[4, 1]) and b %z (f32[3, 1]) have \
         sizes 4 and 3 on axis -2 (sizes must be equal or 1)"
    );

    let mut b = B::new();
    let m = b.input("m", I32, &[c(4), c(5)]);
    let x = b.input("x", F32, &[c(1), c(5)]);
    let y = b.temp("y", F32, &[c(5)]);
    around(&mut b, y, Insn::Select { dst: y, cond: m, a: x, b: x });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SELECT): dst %y (f32[5]) should be [4, 5] (the broadcast shape of cond, a and b)"
    );
}

#[test]
fn erf_takes_floats() {
    let mut b = B::new();
    let x = b.input("x", I32, &[c(4)]);
    let y = b.temp("y", I32, &[c(4)]);
    around(&mut b, y, Insn::Erf { dst: y, a: x });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, ERF): ERF takes float (f32, f16, bf16) tensors, but dst %y (i32[4]) is i32"
    );
    let mut b = B::new();
    let x = b.input("x", Bf16, &[c(4)]);
    let y = b.temp("y", Bf16, &[c(4)]);
    around(&mut b, y, Insn::Erf { dst: y, a: x });
    ok(b);
}

#[test]
fn unary_shape() {
    let mut b = B::new();
    let x = b.input("x", F32, &[c(2), c(3)]);
    let y = b.temp("y", F32, &[c(3), c(2)]);
    around(&mut b, y, unary(y, x));
    assert_eq!(
        err(b),
        "instruction 1 (line 11, RELU): shape mismatch: dst %y (f32[3, 2]) and a %x (f32[2, 3]) must have the same \
         shape"
    );
}

#[test]
fn matmul_inner_dimensions() {
    let mut b = B::new();
    let bs = b.sym("B");
    let x = b.input("x", F32, &[bs, c(784)]);
    let w = b.splat("w", F32, &[c(512), c(10)], 0);
    let y = b.temp("y", F32, &[bs, c(10)]);
    b.ops(&[Insn::Nop; 6]);
    b.op(Insn::Alloc { t: y });
    b.op(Insn::Matmul { dst: y, a: x, b: w, bias: None, ta: false, tb: false, act: Act::None });
    b.op(Insn::Free { t: y });
    assert_eq!(
        err(b),
        "instruction 7 (line 17, MATMUL): inner dimensions differ: a %x is f32[B, 784] (K = 784) but b %w is \
         f32[512, 10] (K = 512)"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(784), c(8)]);
    let w = b.splat("w", F32, &[c(10), c(784)], 0);
    let y = b.temp("y", F32, &[c(8), c(10)]);
    around(&mut b, y, Insn::Matmul { dst: y, a: x, b: w, bias: None, ta: true, tb: true, act: Act::Relu });
    ok(b);

    let mut b = B::new();
    let x = b.input("x", F32, &[c(784), c(8)]);
    let w = b.splat("w", F32, &[c(784), c(10)], 0);
    let y = b.temp("y", F32, &[c(8), c(10)]);
    around(&mut b, y, Insn::Matmul { dst: y, a: x, b: w, bias: None, ta: false, tb: false, act: Act::None });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, MATMUL): inner dimensions differ: a %x is f32[784, 8] (K = 8) but b %w is \
         f32[784, 10] (K = 784)"
    );
}

#[test]
fn matmul_batch_and_bias() {
    let mut b = B::new();
    let bs = b.sym("B");
    let q = b.input("q", F32, &[bs, c(4), c(8), c(16)]);
    let k = b.input("k", F32, &[c(1), c(4), c(8), c(16)]);
    let y = b.temp("y", F32, &[bs, c(4), c(8), c(8)]);
    let bias = b.splat("bias", F32, &[c(8)], 0);
    around(
        &mut b,
        y,
        Insn::Matmul { dst: y, a: q, b: k, bias: Some(bias), ta: false, tb: true, act: Act::None },
    );
    ok(b);

    let mut b = B::new();
    let q = b.input("q", F32, &[c(2), c(8), c(16)]);
    let k = b.input("k", F32, &[c(3), c(16), c(8)]);
    let y = b.temp("y", F32, &[c(2), c(8), c(8)]);
    around(&mut b, y, Insn::Matmul { dst: y, a: q, b: k, bias: None, ta: false, tb: false, act: Act::None });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, MATMUL): batch dimensions do not broadcast: a %q has batch [2] and b %k has batch \
         [3] (2 vs 3 at axis -1 of the batch)"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(4), c(16)]);
    let w = b.splat("w", F32, &[c(16), c(8)], 0);
    let bias = b.splat("bias", F32, &[c(4)], 0);
    let y = b.temp("y", F32, &[c(4), c(8)]);
    around(
        &mut b,
        y,
        Insn::Matmul { dst: y, a: x, b: w, bias: Some(bias), ta: false, tb: false, act: Act::Gelu },
    );
    assert_eq!(
        err(b),
        "instruction 1 (line 11, MATMUL): bias %bias (f32[4]) does not broadcast to the result shape [4, 8]"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(4), c(16)]);
    let w = b.splat("w", F32, &[c(16), c(8)], 0);
    let y = b.temp("y", F32, &[c(8), c(4)]);
    around(&mut b, y, Insn::Matmul { dst: y, a: x, b: w, bias: None, ta: false, tb: false, act: Act::None });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, MATMUL): dst %y (f32[8, 4]) should be [4, 8] (op(a) @ op(b): batch, then M, then N)"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(16)]);
    let w = b.splat("w", F32, &[c(16), c(8)], 0);
    let y = b.temp("y", F32, &[c(8)]);
    around(&mut b, y, Insn::Matmul { dst: y, a: x, b: w, bias: None, ta: false, tb: false, act: Act::None });
    assert_eq!(err(b), "instruction 1 (line 11, MATMUL): a %x (f32[16]) must have rank 2 or more");
}

#[test]
fn slice_bounds() {
    let mut b = B::new();
    let x = b.input("x", F32, &[c(4), c(10)]);
    let y = b.temp("y", F32, &[c(4), c(3)]);
    around(&mut b, y, Insn::Slice { dst: y, src: x, axis: -1, start: 7 });
    ok(b);

    let mut b = B::new();
    let x = b.input("x", F32, &[c(4), c(10)]);
    let y = b.temp("y", F32, &[c(4), c(3)]);
    around(&mut b, y, Insn::Slice { dst: y, src: x, axis: 1, start: 8 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SLICE): slice 8..8+3 on axis 1 is past the end of src %x (f32[4, 10]), whose size \
         there is 10"
    );

    let mut b = B::new();
    let t = b.sym("T");
    let x = b.input("x", F32, &[t, c(10)]);
    let y = b.temp("y", F32, &[c(2), c(10)]);
    around(&mut b, y, Insn::Slice { dst: y, src: x, axis: 0, start: 0 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SLICE): slice 0..0+2 on axis 0 is not provably inside (symbolic sizes) of src %x \
         (f32[T, 10]), whose size there is T"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(4), c(10)]);
    let y = b.temp("y", F32, &[c(3), c(3)]);
    around(&mut b, y, Insn::Slice { dst: y, src: x, axis: 1, start: 0 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SLICE): dst %y (f32[3, 3]) and src %x (f32[4, 10]) differ on axis 0 (3 vs 4); only \
         the sliced axis 1 may differ"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(4), c(10)]);
    let y = b.temp("y", F32, &[c(4), c(3)]);
    around(&mut b, y, Insn::Slice { dst: y, src: x, axis: 2, start: 0 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SLICE): axis 2 is out of range for src %x (f32[4, 10]), which has rank 2"
    );
}

/// The first T rows of a fixed-size table (BERT's position embeddings): a symbolic length from a
/// constant axis verifies when the start is inside the axis; the rest is checked at run time.
#[test]
fn slice_symbolic_prefix_of_a_fixed_axis() {
    let mut b = B::new();
    let t = b.sym("T");
    let _ = b.input("ids", F32, &[t]);
    let x = b.input("x", F32, &[c(512), c(4)]);
    let y = b.temp("y", F32, &[t, c(4)]);
    around(&mut b, y, Insn::Slice { dst: y, src: x, axis: 0, start: 0 });
    ok(b);

    let mut b = B::new();
    let t = b.sym("T");
    let _ = b.input("ids", F32, &[t]);
    let x = b.input("x", F32, &[c(512), c(4)]);
    let y = b.temp("y", F32, &[t, c(4)]);
    around(&mut b, y, Insn::Slice { dst: y, src: x, axis: 0, start: 513 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SLICE): slice 513..513+T on axis 0 is not provably inside (symbolic sizes) of src \
         %x (f32[512, 4]), whose size there is 512"
    );
}

#[test]
fn concat() {
    let mut b = B::new();
    let bs = b.sym("B");
    let x = b.input("x", F32, &[bs, c(3)]);
    let z = b.input("z", F32, &[bs, c(5)]);
    let y = b.temp("y", F32, &[bs, c(8)]);
    around(&mut b, y, Insn::Concat { dst: y, a: x, b: z, axis: -1 });
    ok(b);

    let mut b = B::new();
    let x = b.input("x", F32, &[c(2), c(3)]);
    let z = b.input("z", F32, &[c(2), c(5)]);
    let y = b.temp("y", F32, &[c(2), c(9)]);
    around(&mut b, y, Insn::Concat { dst: y, a: x, b: z, axis: 1 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, CONCAT): dst %y (f32[2, 9]) should have size 8 on axis 1 (a's plus b's), but has 9"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(2), c(3)]);
    let z = b.input("z", F32, &[c(3), c(3)]);
    let y = b.temp("y", F32, &[c(2), c(6)]);
    around(&mut b, y, Insn::Concat { dst: y, a: x, b: z, axis: 1 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, CONCAT): dst %y (f32[2, 6]), a %x (f32[2, 3]) and b %z (f32[3, 3]) must match on \
         every axis but 1 (the concatenation axis); axis 0 differs"
    );
}

#[test]
fn transpose() {
    let mut b = B::new();
    let bs = b.sym("B");
    let x = b.input("x", F32, &[bs, c(3), c(5)]);
    let y = b.temp("y", F32, &[bs, c(5), c(3)]);
    around(&mut b, y, Insn::Transpose { dst: y, src: x, perm: Perm::new(&[0, 2, 1]).unwrap() });
    ok(b);

    let mut b = B::new();
    let x = b.input("x", F32, &[c(3), c(5)]);
    let y = b.temp("y", F32, &[c(5), c(3)]);
    around(&mut b, y, Insn::Transpose { dst: y, src: x, perm: Perm::new(&[0, 2, 1]).unwrap() });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, TRANSPOSE): permutation [0, 2, 1] has 3 axes but src %x (f32[3, 5]) has rank 2"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(3), c(5)]);
    let y = b.temp("y", F32, &[c(3), c(5)]);
    around(&mut b, y, Insn::Transpose { dst: y, src: x, perm: Perm::new(&[1, 0]).unwrap() });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, TRANSPOSE): dst %y (f32[3, 5]) should be [5, 3] (src permuted by [1, 0])"
    );
}

#[test]
fn reshape_compares_monomials() {
    let mut b = B::new();
    let (bs, t) = (b.sym("B"), b.sym("T"));
    let x = b.input("x", F32, &[bs, t, c(6)]);
    let y = b.temp("y", F32, &[t, c(2), bs, c(3)]);
    around(&mut b, y, Insn::Reshape { dst: y, src: x });
    ok(b);

    let mut b = B::new();
    let (bs, t) = (b.sym("B"), b.sym("T"));
    let x = b.input("x", F32, &[bs, t, c(6)]);
    let y = b.temp("y", F32, &[bs, c(12)]);
    around(&mut b, y, Insn::Reshape { dst: y, src: x });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, RESHAPE): element counts differ: dst %y (f32[B, 12]) has 12×B elements but src %x \
         (f32[B, T, 6]) has 6×B×T"
    );
}

#[test]
fn reduce_keepdims_or_drop() {
    for shape in [vec![c(4)], vec![c(4), c(1)]] {
        let mut b = B::new();
        let x = b.input("x", F32, &[c(4), c(7)]);
        let y = b.temp("y", F32, &shape);
        around(&mut b, y, Insn::ReduceSum { dst: y, src: x, axis: -1 });
        ok(b);
    }
    let mut b = B::new();
    let x = b.input("x", F32, &[c(4), c(7)]);
    let y = b.temp("y", F32, &[c(7)]);
    around(&mut b, y, Insn::ReduceMax { dst: y, src: x, axis: 1 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, REDUCE_MAX): dst %y (f32[7]) should be [4] (axis 1 dropped) or [4, 1] (kept with \
         size 1) when reducing src %x (f32[4, 7])"
    );
}

#[test]
fn softmax_mask() {
    let mut b = B::new();
    let x = b.input("x", F32, &[c(2), c(8), c(8)]);
    let mask = b.splat("mask", F32, &[c(8), c(8)], 0);
    let y = b.temp("y", F32, &[c(2), c(8), c(8)]);
    around(&mut b, y, Insn::Softmax { dst: y, x, mask: Some(mask), scale: 0.125 });
    ok(b);

    let mut b = B::new();
    let x = b.input("x", F32, &[c(2), c(8), c(8)]);
    let mask = b.splat("mask", F32, &[c(2), c(1), c(1), c(8)], 0);
    let y = b.temp("y", F32, &[c(2), c(8), c(8)]);
    around(&mut b, y, Insn::Softmax { dst: y, x, mask: Some(mask), scale: 1.0 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, SOFTMAX): mask %mask (f32[2, 1, 1, 8]) does not broadcast to x %x (f32[2, 8, 8])"
    );
}

#[test]
fn norm_params() {
    let mut b = B::new();
    let x = b.input("x", F16, &[c(2), c(384)]);
    let g = b.splat("g", F16, &[c(384)], 0x3C00);
    let y = b.temp("y", F16, &[c(2), c(384)]);
    around(&mut b, y, Insn::Layernorm { dst: y, x, gamma: Some(g), beta: Some(g), eps: 1e-5 });
    around(&mut b, y, Insn::Rmsnorm { dst: y, x, gamma: None, eps: 1e-6 });
    ok(b);

    let mut b = B::new();
    let x = b.input("x", F32, &[c(2), c(384)]);
    let g = b.splat("g", F32, &[c(384)], 0);
    let beta = b.splat("beta", F32, &[c(1), c(384)], 0);
    let y = b.temp("y", F32, &[c(2), c(384)]);
    around(&mut b, y, Insn::Layernorm { dst: y, x, gamma: Some(g), beta: Some(beta), eps: 1e-5 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, LAYERNORM): beta %beta (f32[1, 384]) should be [384] ([N], N being x's last \
         dimension)"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(2), c(384)]);
    let g = b.splat("g", F32, &[c(2)], 0);
    let y = b.temp("y", F32, &[c(2), c(384)]);
    around(&mut b, y, Insn::Rmsnorm { dst: y, x, gamma: Some(g), eps: 1e-5 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, RMSNORM): gamma %g (f32[2]) should be [384] ([N], N being x's last dimension)"
    );
}

#[test]
fn load_rules() {
    // A loop selects one of three same-shaped constants.
    let mut b = B::new();
    let w0 = b.splat("w0", F32, &[c(4)], 0);
    b.splat("w1", F32, &[c(4)], 0);
    b.bytes("w2", F32, &[c(4)], 16);
    let y = b.temp("y", F32, &[c(4)]);
    around(&mut b, y, Insn::Load { dst: y, src: w0, index: Some(Reg(3)), count: 3 });
    ok(b);

    let mut b = B::new();
    let w0 = b.splat("w0", F32, &[c(4)], 0);
    b.splat("w1", F32, &[c(5)], 0);
    let y = b.temp("y", F32, &[c(4)]);
    around(&mut b, y, Insn::Load { dst: y, src: w0, index: Some(Reg(3)), count: 2 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, LOAD): %w1 (constant 1 of 2) is f32[5] but dst %y is f32[4]; every loaded constant \
         must have dst's dtype and shape"
    );

    let mut b = B::new();
    let w0 = b.splat("w0", F32, &[c(4)], 0);
    let y = b.temp("y", F32, &[c(4)]);
    around(&mut b, y, Insn::Load { dst: y, src: w0, index: Some(Reg(0)), count: 3 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, LOAD): index=r.., count=3 selects tensors 0 to 2 of the table starting at %w0, but \
         the program has only 2 tensors"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    let y = b.temp("y", F32, &[c(4)]);
    around(&mut b, y, Insn::Load { dst: y, src: x, index: None, count: 1 });
    assert_eq!(err(b), "instruction 1 (line 11, LOAD): LOAD copies from constants, but %x is an input");

    let mut b = B::new();
    let w0 = b.splat("w0", F32, &[c(4)], 0);
    let y = b.temp("y", F32, &[c(4)]);
    around(&mut b, y, Insn::Load { dst: y, src: w0, index: None, count: 2 });
    assert_eq!(
        err(b),
        "instruction 1 (line 11, LOAD): count=2 needs an index register (index=rN) to pick one of the 2 constants"
    );
}

#[test]
fn store_matches_output() {
    let mut b = B::new();
    let bs = b.sym("B");
    let x = b.input("x", F32, &[bs, c(10)]);
    let out = b.output("y", F32, &[bs, c(10)]);
    b.op(Insn::Store { out, src: x });
    ok(b);

    let mut b = B::new();
    let bs = b.sym("B");
    let x = b.input("x", F16, &[bs, c(10)]);
    let out = b.output("y", F32, &[bs, c(10)]);
    b.op(Insn::Store { out, src: x });
    assert_eq!(
        err(b),
        "instruction 0 (line 10, STORE): output y is declared f32[B, 10], but src %x is f16[B, 10]"
    );
}

#[test]
fn writes_only_to_temporaries() {
    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    b.op(Insn::Fill { dst: x, value: 0.0 });
    assert_eq!(
        err(b),
        "instruction 0 (line 10, FILL): FILL writes %x, which is an input; only temporaries can be written"
    );

    let mut b = B::new();
    let w = b.splat("w", F32, &[c(4)], 0);
    let x = b.input("x", F32, &[c(4)]);
    b.op(Insn::Copy { dst: w, src: x });
    assert_eq!(
        err(b),
        "instruction 0 (line 10, COPY): COPY writes %w, which is a constant; only temporaries can be written"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    b.op(Insn::Alloc { t: x });
    assert_eq!(
        err(b),
        "instruction 0 (line 10, ALLOC): %x is an input; ALLOC takes only temporaries (declared with .tensor)"
    );
}

// ---------------------------------------------------------------------------------------
// Tables.

#[test]
fn constant_tables() {
    let mut b = B::new();
    let bs = b.sym("B");
    b.input("x", F32, &[bs]);
    b.splat("w", F32, &[bs, c(4)], 0);
    assert_eq!(
        err(b),
        "tensor %w (tensor 1): constant f32[B, 4] has a symbolic dimension; constants must have concrete shapes"
    );

    let mut b = B::new();
    b.bytes("w", F32, &[c(2), c(3)], 20);
    assert_eq!(
        err(b),
        "tensor %w (tensor 0): constant f32[2, 3] needs 24 bytes (6 elements of 4 bytes) but its data is 20 bytes"
    );

    let mut b = B::new();
    b.splat("h", F16, &[c(3)], 0x1_0000);
    assert_eq!(err(b), "tensor %h (tensor 0): splat value 0x10000 does not fit a 16-bit f16 element");

    let mut b = B::new();
    b.splat("h", Bf16, &[c(3)], 0x3F80);
    b.splat("f", F32, &[c(3)], 0x3F80_0000);
    ok(b);

    let mut b = B::new();
    b.splat("h", F32, &[c(3)], 0);
    b.splat("h", F32, &[c(3)], 0);
    assert_eq!(err(b), "tensor %h (tensor 1): the name %h is declared twice");

    let mut b = B::new();
    b.p.tensors.push(TensorDecl {
        name: "w".into(),
        dtype: F32,
        shape: vec![c(4)],
        kind: TensorKind::Const(ConstData::Bytes { offset: 0, len: 16 }),
    });
    assert_eq!(err(b), "tensor %w (tensor 0): constant data 0+16 lies outside the 0-byte data section");
}

#[test]
fn symbols_must_come_from_inputs() {
    let mut b = B::new();
    let (bs, t) = (b.sym("B"), b.sym("T"));
    b.input("x", F32, &[bs, c(4)]);
    b.temp("h", F32, &[bs, t]);
    assert_eq!(
        err(b),
        "tensor %h (tensor 1): temporary f32[B, T] uses symbol T, which no input's shape contains, so its size \
         cannot be known when the inputs are bound"
    );

    let mut b = B::new();
    let (bs, t) = (b.sym("B"), b.sym("T"));
    b.input("x", F32, &[bs, c(4)]);
    b.output("y", F32, &[t]);
    assert_eq!(
        err(b),
        "output y: output f32[T] uses symbol T, which no input's shape contains, so its size cannot be known when \
         the inputs are bound"
    );

    let mut b = B::new();
    b.p.tensors.push(TensorDecl {
        name: "x".into(),
        dtype: F32,
        shape: vec![Dim::Sym(SymId(3))],
        kind: TensorKind::Input,
    });
    assert_eq!(err(b), "tensor %x (tensor 0): dimension refers to symbol 3, but there are 0 symbols");

    let mut b = B::new();
    b.input("x", F32, &[c(1); 9]);
    assert_eq!(err(b), "tensor %x (tensor 0): rank 9 exceeds the maximum 8");
}

// ---------------------------------------------------------------------------------------
// Dataflow.

#[test]
fn alloc_free_discipline() {
    let mut b = B::new();
    let h = b.temp("h", F32, &[c(4)]);
    b.ops(&[Insn::Alloc { t: h }, Insn::Alloc { t: h }]);
    // Two independent errors: a FREE between the ALLOCs still leaves %h allocated at the end.
    assert_eq!(
        err(b),
        "instruction 1 (line 11, ALLOC): %h is already allocated (by instruction 0 (line 10, ALLOC)); FREE it \
         before allocating it again\n\
         instruction 1 (line 11, ALLOC): the program ends after this instruction (the end of the code) with %h \
         still allocated (leaked; allocated by instruction 0 (line 10, ALLOC)); FREE it before the program ends"
    );

    let mut b = B::new();
    let h = b.temp("h", F32, &[c(4)]);
    b.ops(&[Insn::Alloc { t: h }, Insn::Free { t: h }, Insn::Free { t: h }]);
    assert_eq!(
        err(b),
        "instruction 2 (line 12, FREE): double free: %h was already freed by instruction 1 (line 11, FREE)"
    );

    let mut b = B::new();
    let h = b.temp("h", F32, &[c(4)]);
    b.ops(&[Insn::Free { t: h }]);
    assert_eq!(
        err(b),
        "instruction 0 (line 10, FREE): FREE of %h, which is not allocated here (FREE before ALLOC)"
    );

    let mut b = B::new();
    let h = b.temp("h", F32, &[c(4)]);
    b.ops(&[Insn::Fill { dst: h, value: 1.0 }, Insn::Alloc { t: h }, Insn::Free { t: h }]);
    assert_eq!(
        err(b),
        "instruction 0 (line 10, FILL): writes %h before it is allocated (use before ALLOC %h)"
    );

    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    let h = b.temp("h", F32, &[c(4)]);
    let y = b.temp("y", F32, &[c(4)]);
    b.ops(&[
        Insn::Alloc { t: h },
        Insn::Alloc { t: y },
        Insn::Fill { dst: h, value: 1.0 },
        Insn::Free { t: h },
        Insn::Add { dst: y, a: x, b: h },
        Insn::Free { t: y },
    ]);
    assert_eq!(
        err(b),
        "instruction 4 (line 14, ADD): reads %h after it was freed (use after FREE, by instruction 3 (line 13, FREE))"
    );
}

#[test]
fn leaks_and_unwritten_outputs() {
    let mut b = B::new();
    let h = b.temp("h", F32, &[c(4)]);
    b.ops(&[Insn::Nop, Insn::Alloc { t: h }, Insn::Fill { dst: h, value: 0.0 }]);
    assert_eq!(
        err(b),
        "instruction 2 (line 12, FILL): the program ends after this instruction (the end of the code) with %h still \
         allocated (leaked; allocated by instruction 1 (line 11, ALLOC)); FREE it before the program ends"
    );

    let mut b = B::new();
    let h = b.temp("h", F32, &[c(4)]);
    b.ops(&[Insn::Alloc { t: h }, Insn::Halt, Insn::Free { t: h }]);
    assert_eq!(
        err(b),
        "instruction 1 (line 11, HALT): the program ends here with %h still allocated (leaked; allocated by \
         instruction 0 (line 10, ALLOC)); FREE it before the program ends"
    );

    // The output is written on only one of two paths.
    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    let out = b.output("y", F32, &[c(4)]);
    b.ops(&[
        Insn::Iset { rd: Reg(0), value: 0 },
        Insn::Jz { cond: Reg(0), target: Target(3) },
        Insn::Store { out, src: x },
        Insn::Halt,
    ]);
    assert_eq!(
        err(b),
        "instruction 3 (line 13, HALT): the program ends here, but output y is not written on every path to this \
         point; STORE y before it"
    );

    let mut b = B::new();
    b.output("y", F32, &[c(4)]);
    assert_eq!(err(b), "the program has no instructions, so output y is never written");
}

#[test]
fn joins_need_the_same_allocations() {
    let mut b = B::new();
    let h = b.temp("h", F32, &[c(4)]);
    b.ops(&[
        Insn::Iset { rd: Reg(0), value: 0 },
        Insn::Jz { cond: Reg(0), target: Target(3) },
        Insn::Alloc { t: h },
        Insn::Nop,
        Insn::Free { t: h },
    ]);
    assert_eq!(
        err(b),
        "instruction 3 (line 13, NOP): control flow joins here with different tensors allocated: %h is allocated \
         coming from instruction 2 (line 12, ALLOC) but not coming from instruction 1 (line 11, JZ); every path into \
         a point must allocate the same temporaries"
    );
}

#[test]
fn unreachable_code_is_still_type_checked() {
    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    let h = b.temp("h", I32, &[c(4)]);
    b.ops(&[Insn::Halt, Insn::Neg { dst: h, a: x }]);
    assert_eq!(
        err(b),
        "instruction 1 (line 11, NEG): dtype mismatch: dst %h (i32[4]) is i32 but a %x (f32[4]) is f32; the \
         operands must share one dtype"
    );

    // ...but not dataflow-checked: an unreachable use of an unallocated temp is fine.
    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    let h = b.temp("h", F32, &[c(4)]);
    b.ops(&[Insn::Halt, Insn::Neg { dst: h, a: x }]);
    let v = ok(b);
    assert!(v.is_reachable(0) && !v.is_reachable(1));

    // A temporary allocated only in unreachable code takes no arena space.
    let mut b = B::new();
    let big = b.temp("big", F32, &[c(1 << 20)]);
    b.ops(&[Insn::Halt, Insn::Alloc { t: big }, Insn::Free { t: big }]);
    let v = ok(b);
    assert_eq!(v.first_alloc(big), None);
    let plan = v.plan(&[]).unwrap();
    assert_eq!((plan.offsets[0], plan.peak_bytes), (Some(0), 0));
}

/// A counted loop over 3 layers: `h = relu(h @ w[i])`, weights selected with LOAD index=.
fn loop_program() -> B {
    let mut b = B::new();
    let bs = b.sym("B");
    let x = b.input("x", F32, &[bs, c(16)]);
    let w0 = b.splat("w0", F32, &[c(16), c(16)], 0);
    b.splat("w1", F32, &[c(16), c(16)], 0);
    b.splat("w2", F32, &[c(16), c(16)], 0);
    let w = b.temp("w", F32, &[c(16), c(16)]);
    let h = b.temp("h", F32, &[bs, c(16)]);
    let t = b.temp("t", F32, &[bs, c(16)]);
    let out = b.output("y", F32, &[bs, c(16)]);
    b.ops(&[
        Insn::Alloc { t: h },                                                                  // 0
        Insn::Copy { dst: h, src: x },                                                         // 1
        Insn::Iset { rd: Reg(0), value: 0 },                                                   // 2
        Insn::Iset { rd: Reg(1), value: 3 },                                                   // 3
        Insn::Alloc { t: w },                                                                  // 4 loop:
        Insn::Load { dst: w, src: w0, index: Some(Reg(0)), count: 3 },                         // 5
        Insn::Alloc { t },                                                                     // 6
        Insn::Matmul { dst: t, a: h, b: w, bias: None, ta: false, tb: false, act: Act::Relu }, // 7
        Insn::Free { t: w },                                                                   // 8
        Insn::Copy { dst: h, src: t },                                                         // 9
        Insn::Free { t },                                                                      // 10
        Insn::Iaddi { rd: Reg(0), ra: Reg(0), value: 1 },                                      // 11
        Insn::Ilt { rd: Reg(2), ra: Reg(0), rb: Reg(1) },                                      // 12
        Insn::Jnz { cond: Reg(2), target: Target(4) },                                         // 13
        Insn::Store { out, src: h },                                                           // 14
        Insn::Free { t: h },                                                                   // 15
        Insn::Halt,                                                                            // 16
    ]);
    b
}

#[test]
fn a_loop_verifies_and_plans() {
    let v = ok(loop_program());
    assert_eq!(v.instructions().len(), 17);
    let (w, h, t) = (TensorId(4), TensorId(5), TensorId(6));
    assert_eq!(v.alloc_order(), &[h, w, t]);
    assert_eq!(v.interferes_with(w), &[h, t]);
    assert_eq!(v.interferes_with(t), &[w, h]);

    let plan = v.plan(&[8]).unwrap();
    assert_eq!(plan.sizes[h.0 as usize], 8 * 16 * 4);
    assert_eq!(plan.offsets[0], None); // the input
    assert_eq!(plan.offsets[h.0 as usize], Some(0));
    assert_eq!(plan.offsets[w.0 as usize], Some(512));
    assert_eq!(plan.offsets[t.0 as usize], Some(512 + 1024));
    assert_eq!(plan.peak_bytes, 512 + 1024 + 512);
    assert_eq!(plan.const_bytes, 3 * 1024);
    assert_eq!(plan.input_bytes, 512);
    assert_eq!(plan.output_bytes, 512);

    let report = v.report(&[]).unwrap();
    assert!(report.contains("tier          strict"), "{report}");
    assert!(
        report.contains("dims          B = 1\n              (B not given with --dim NAME=N; bound to 1)"),
        "{report}"
    );
    assert!(report.contains("arena peak  1.31 KiB (1344 bytes) for 3 temporaries"), "{report}");
    let report = v.report(&[("B".into(), 64)]).unwrap();
    assert!(report.contains("arena peak  9.00 KiB (9216 bytes)"), "{report}");
    assert_eq!(
        v.report(&[("N".into(), 1)]).unwrap_err().to_string(),
        "unknown dimension N (the program's symbols: B)"
    );
}

#[test]
fn the_plan_reuses_space_of_temporaries_that_do_not_interfere() {
    let mut b = B::new();
    let x = b.input("x", F32, &[c(100)]);
    let a = b.temp("a", F32, &[c(100)]);
    let bb = b.temp("b", F32, &[c(100)]);
    let cc = b.temp("c", F32, &[c(100)]);
    b.ops(&[
        Insn::Alloc { t: a },
        Insn::Relu { dst: a, a: x },
        Insn::Alloc { t: bb },
        Insn::Relu { dst: bb, a },
        Insn::Free { t: a },
        Insn::Alloc { t: cc }, // reuses a's space
        Insn::Relu { dst: cc, a: bb },
        Insn::Free { t: bb },
        Insn::Free { t: cc },
    ]);
    let v = ok(b);
    let plan = v.plan(&[]).unwrap();
    // 400 bytes, rounded up to the 256-byte alignment: 512.
    assert_eq!(plan.offsets[1..], [Some(0), Some(512), Some(0)]);
    assert_eq!(plan.peak_bytes, 512 + 400);
}

#[test]
fn plan_errors() {
    let v = ok(loop_program());
    assert_eq!(
        v.plan(&[]).unwrap_err().to_string(),
        "expected 1 dimension values (one per symbol: B), got 0"
    );
    assert_eq!(
        v.plan(&[1 << 40]).unwrap_err().to_string(),
        "dimension B = 1099511627776 exceeds the maximum 2147483647"
    );

    // Sizes past the element limit, or past even 128 bits, are errors, never panics.
    let big = adeadvm::isa::MAX_DIM as u64;
    for (rank, too_many) in [(4, true), (8, false)] {
        let mut b = B::new();
        let s: Vec<Dim> = (0..rank).map(|i| b.sym(&format!("S{i}"))).collect();
        b.input("x", F32, &s);
        let err = ok(b).plan(&vec![big; rank]).unwrap_err();
        if too_many {
            assert!(err.to_string().starts_with("tensor %x has shape [2147483647, 2147483647, "), "{err}");
        } else {
            assert!(matches!(err, PlanError::Overflow { .. }), "{err}");
        }
    }
}

#[test]
fn dims_from_input_shapes() {
    let mut b = B::new();
    let (bs, t) = (b.sym("B"), b.sym("T"));
    b.sym("unused");
    b.input("x", F32, &[bs, t, c(4)]);
    b.input("mask", F32, &[bs, t]);
    let v = ok(b);
    assert_eq!(v.dims_from_inputs(&[("x", &[2, 7, 4]), ("%mask", &[2, 7])]).unwrap(), vec![2, 7, 1]);
    let e = |inputs: &[(&str, &[u64])]| v.dims_from_inputs(inputs).unwrap_err().to_string();
    assert_eq!(e(&[("x", &[2, 7, 4])]), "missing input mask: the program declares it as f32[B, T]");
    assert_eq!(
        e(&[("x", &[2, 7, 4]), ("mask", &[2, 7]), ("z", &[1])]),
        "unknown input z (the program's inputs: x, mask)"
    );
    assert_eq!(
        e(&[("x", &[2, 7]), ("mask", &[2, 7])]),
        "input x is declared f32[B, T, 4] (rank 3) but was given shape [2, 7] (rank 2)"
    );
    assert_eq!(
        e(&[("x", &[2, 7, 5]), ("mask", &[2, 7])]),
        "input x is declared f32[B, T, 4] but was given shape [2, 7, 5]: axis 2 must be 4"
    );
    assert_eq!(
        e(&[("x", &[2, 7, 4]), ("mask", &[2, 8])]),
        "input mask has T = 8 (axis 1), but input x already set T = 7"
    );
    assert_eq!(e(&[("x", &[2, 7, 4]), ("x", &[2, 7, 4])]), "input x is given twice");
}

// ---------------------------------------------------------------------------------------
// Kernels.

/// A compute shader with one storage buffer per entry of `readonly` (binding i), a push block
/// of `push_words` u32 members, and LocalSize 64x1x1.
fn spirv(readonly: &[bool], push_words: usize, model: rspirv::spirv::ExecutionModel, set: u32) -> Vec<u32> {
    use rspirv::binary::Assemble;
    use rspirv::dr::{Builder, Operand};
    use rspirv::spirv::{self as s, Decoration as D};
    let mut b = Builder::new();
    b.set_version(1, 3);
    b.capability(s::Capability::Shader);
    b.memory_model(s::AddressingModel::Logical, s::MemoryModel::GLSL450);
    let void = b.type_void();
    let voidf = b.type_function(void, vec![]);
    let f32t = b.type_float(32, None);
    let u32t = b.type_int(32, 0);
    let rt = b.type_runtime_array(f32t);
    b.decorate(rt, D::ArrayStride, [Operand::LiteralBit32(4)]);
    let st = b.type_struct([rt]);
    b.decorate(st, D::Block, []);
    b.member_decorate(st, 0, D::Offset, [Operand::LiteralBit32(0)]);
    let ptr = b.type_pointer(None, s::StorageClass::StorageBuffer, st);
    let mut vars = Vec::new();
    for (i, &ro) in readonly.iter().enumerate() {
        let v = b.variable(ptr, None, s::StorageClass::StorageBuffer, None);
        b.decorate(v, D::DescriptorSet, [Operand::LiteralBit32(set)]);
        b.decorate(v, D::Binding, [Operand::LiteralBit32(i as u32)]);
        if ro {
            b.decorate(v, D::NonWritable, []);
        }
        vars.push(v);
    }
    if push_words > 0 {
        let pst = b.type_struct(vec![u32t; push_words]);
        b.decorate(pst, D::Block, []);
        for k in 0..push_words {
            b.member_decorate(pst, k as u32, D::Offset, [Operand::LiteralBit32(4 * k as u32)]);
        }
        let pptr = b.type_pointer(None, s::StorageClass::PushConstant, pst);
        vars.push(b.variable(pptr, None, s::StorageClass::PushConstant, None));
    }
    let f = b.begin_function(void, None, s::FunctionControl::NONE, voidf).unwrap();
    b.begin_block(None).unwrap();
    b.ret().unwrap();
    b.end_function().unwrap();
    // SPIR-V 1.3 lists only Input and Output variables in an entry point's interface (the
    // validator refuses storage buffers there); `vars` are the module's globals all the same.
    let _ = vars;
    b.entry_point(model, f, "main", vec![]);
    b.execution_mode(f, s::ExecutionMode::LocalSize, [64, 1, 1]);
    b.module().assemble()
}

/// A fast-tier program: `ALLOC %out; ALLOC %tmp?; KERNEL k; ...` where binding 0 is the input
/// %x and the others are temporaries; `readonly[i]` says whether binding i is NonWritable.
fn kernel_program(readonly: &[bool], push_words: usize) -> (B, Vec<TensorId>, KernelId) {
    let mut b = B::new().fast();
    let x = b.input("x", F32, &[c(256)]);
    let mut bindings = vec![x];
    for i in 1..readonly.len() {
        bindings.push(b.temp(&format!("t{i}"), F32, &[c(256)]));
    }
    let words = spirv(readonly, push_words, rspirv::spirv::ExecutionModel::GLCompute, 0);
    b.p.spirv.push(SpirvModule { name: "kmod".into(), words });
    b.p.kernels.push(KernelDecl {
        name: "k".into(),
        module: 0,
        entry: "main".into(),
        bindings: bindings.clone(),
        push: vec![0; 4 * push_words],
        groups: [4, 1, 1],
    });
    let k = KernelId(0);
    let temps = &bindings[1..];
    // KERNEL lands at index 2 (line 12).
    for _ in temps.len()..2 {
        b.op(Insn::Nop);
    }
    for &t in temps {
        b.op(Insn::Alloc { t });
    }
    b.op(Insn::Kernel { k });
    for &t in temps {
        b.op(Insn::Free { t });
    }
    (b, bindings, k)
}

#[test]
fn kernel_verifies_and_records_written_bindings() {
    let (b, _, k) = kernel_program(&[true, false], 2);
    let v = ok(b);
    let info = v.kernel(k);
    assert_eq!(info.written, vec![false, true]);
    assert_eq!(info.local_size, [64, 1, 1]);
    assert_eq!(info.push_bytes, 8);
}

#[test]
fn kernel_rejections() {
    use rspirv::spirv::ExecutionModel;

    let (mut b, _, _) = kernel_program(&[true, false], 0);
    b.p.spirv[0].words = vec![0x0723_0203, 1, 2];
    let e = err(b);
    assert!(e.starts_with("kernel k: SPIR-V module kmod: the module does not parse: "), "{e}");

    let (mut b, _, _) = kernel_program(&[true, false], 0);
    b.p.kernels[0].entry = "go".into();
    assert_eq!(err(b), "kernel k: SPIR-V module kmod: has no entry point \"go\" (it has: main)");

    let (mut b, _, _) = kernel_program(&[true, false], 0);
    b.p.spirv[0].words = spirv(&[true, false], 0, ExecutionModel::Fragment, 0);
    assert_eq!(
        err(b),
        "kernel k: SPIR-V module kmod: entry point \"main\" is a Fragment shader, not a GLCompute (compute) shader"
    );

    let (mut b, _, _) = kernel_program(&[true, false], 0);
    b.p.spirv[0].words = spirv(&[true, false, false], 0, ExecutionModel::GLCompute, 0);
    assert_eq!(
        err(b),
        "kernel k: SPIR-V module kmod: the shader declares a storage buffer at binding 2 of set 0, but the dispatch \
         binds only 2 tensors (bindings 0..1)"
    );

    let (mut b, _, _) = kernel_program(&[true, false], 0);
    b.p.spirv[0].words = spirv(&[true], 0, ExecutionModel::GLCompute, 0);
    assert_eq!(
        err(b),
        "kernel k: SPIR-V module kmod: the dispatch binds a tensor at binding 1, but the shader declares no storage \
         buffer at binding 1 of set 0"
    );

    let (mut b, _, _) = kernel_program(&[true, false], 0);
    b.p.spirv[0].words = spirv(&[true, false], 0, ExecutionModel::GLCompute, 1);
    assert_eq!(
        err(b),
        "kernel k: SPIR-V module kmod: storage buffer %8 is in descriptor set 1; KERNEL binds tensors only in set 0"
    );

    let (mut b, _, _) = kernel_program(&[true, false], 2);
    b.p.kernels[0].push = vec![0; 4];
    assert_eq!(
        err(b),
        "kernel k: SPIR-V module kmod: the shader's push-constant block is 8 bytes, but the dispatch gives 4 bytes \
         of push constants"
    );

    let (mut b, _, _) = kernel_program(&[true, false], 0);
    b.p.kernels[0].push = vec![0; 3];
    assert_eq!(err(b), "kernel k: push constants are 3 bytes, not a multiple of 4");

    let (mut b, _, _) = kernel_program(&[true, false], 0);
    b.p.kernels[0].groups = [4, 0, 1];
    assert_eq!(err(b), "kernel k: workgroup count 4, 0, 1 is zero on axis y; every count must be at least 1");

    // Binding 0 is the input %x: the shader must not be able to write it.
    let (b, _, _) = kernel_program(&[false, false], 0);
    assert_eq!(
        err(b),
        "kernel k: binding 0 is %x, an input, but the shader may write it (its buffer is not decorated \
         NonWritable); only temporaries can be written (mark the buffer `readonly` in the shader)"
    );

    let (mut b, _, _) = kernel_program(&[true, false], 0);
    b.p.kernels[0].module = 5;
    assert_eq!(err(b), "kernel k: names SPIR-V module 5, but the program has 1 modules");
}

#[test]
fn kernel_bindings_must_be_allocated() {
    // Written binding %t1 freed before the KERNEL.
    let (mut b, bindings, _) = kernel_program(&[true, false], 0);
    let t1 = bindings[1];
    let free = Instruction { insn: Insn::Free { t: t1 }, placement: Placement::Auto }.encode();
    let nop = Instruction { insn: Insn::Nop, placement: Placement::Auto }.encode();
    let alloc = Instruction { insn: Insn::Alloc { t: t1 }, placement: Placement::Auto }.encode();
    b.p.code[0] = alloc;
    b.p.code[1] = free;
    b.p.code[3] = nop;
    assert_eq!(
        err(b),
        "instruction 2 (line 12, KERNEL): binding 1 writes %t1 after it was freed (use after FREE, by instruction 1 \
         (line 11, FREE))"
    );

    // A read-only temporary binding that was never allocated.
    let (mut b, bindings, _) = kernel_program(&[true, true, false], 0);
    let t1 = bindings[1];
    let nop = Instruction { insn: Insn::Nop, placement: Placement::Auto }.encode();
    let pos = b
        .p
        .code
        .iter()
        .position(|c| *c == Instruction { insn: Insn::Alloc { t: t1 }, placement: Placement::Auto }.encode())
        .unwrap();
    b.p.code[pos] = nop;
    let pos = b
        .p
        .code
        .iter()
        .position(|c| *c == Instruction { insn: Insn::Free { t: t1 }, placement: Placement::Auto }.encode())
        .unwrap();
    b.p.code[pos] = nop;
    assert_eq!(
        err(b),
        "instruction 2 (line 12, KERNEL): binding 1 reads %t1 before it is allocated (use before ALLOC %t1)"
    );
}

// ---------------------------------------------------------------------------------------
// Properties.

proptest! {
    /// Random ALLOC/FREE sequences (with random sizes and symbolic dims): interfering
    /// temporaries never overlap, every offset is aligned, and the peak covers every tensor.
    #[test]
    fn plan_never_overlaps_interfering_temporaries(
        sizes in prop::collection::vec((1u32..300, prop::bool::ANY), 1..12),
        steps in prop::collection::vec((0usize..12, prop::bool::ANY), 0..60),
        n in 1u64..5,
    ) {
        let mut b = B::new();
        let bs = b.sym("N");
        b.input("x", F32, &[bs]);
        let temps: Vec<TensorId> = sizes
            .iter()
            .enumerate()
            .map(|(i, &(s, sym))| {
                let shape = if sym { vec![bs, c(s)] } else { vec![c(s)] };
                b.temp(&format!("t{i}"), F32, &shape)
            })
            .collect();
        let mut live = vec![false; temps.len()];
        let mut snapshots: Vec<Vec<usize>> = Vec::new();
        for (k, alloc) in steps {
            let k = k % temps.len();
            if live[k] && !alloc {
                b.op(Insn::Free { t: temps[k] });
                live[k] = false;
            } else if !live[k] {
                b.op(Insn::Alloc { t: temps[k] });
                live[k] = true;
                b.op(Insn::Fill { dst: temps[k], value: 1.0 });
            }
            snapshots.push((0..temps.len()).filter(|&i| live[i]).collect());
        }
        for (k, l) in live.iter().enumerate() {
            if *l {
                b.op(Insn::Free { t: temps[k] });
            }
        }
        let v = ok(b);
        let plan = v.plan(&[n]).unwrap();
        for set in &snapshots {
            for (i, &p) in set.iter().enumerate() {
                for &q in &set[i + 1..] {
                    let (tp, tq) = (temps[p].0 as usize, temps[q].0 as usize);
                    let (op, oq) = (plan.offsets[tp].unwrap(), plan.offsets[tq].unwrap());
                    let (ep, eq) = (op + plan.sizes[tp], oq + plan.sizes[tq]);
                    prop_assert!(ep <= oq || eq <= op, "t{p} [{op}, {ep}) overlaps t{q} [{oq}, {eq})");
                }
            }
        }
        for &t in &temps {
            let off = plan.offsets[t.0 as usize].unwrap();
            prop_assert_eq!(off % ARENA_ALIGN, 0);
            prop_assert!(off + plan.sizes[t.0 as usize] <= plan.peak_bytes || v.interferes_with(t).is_empty());
        }
    }

    /// Arbitrary code never panics the verifier: raw bytes, and instructions with a valid
    /// opcode and small operand values (so most decode and reach the type and flow checks).
    #[test]
    fn arbitrary_code_never_panics(
        raw in prop::collection::vec(prop::array::uniform16(0u8..0x60), 0..8),
        ops in prop::collection::vec((0usize..adeadvm::isa::OP_INFO.len(), 0u8..3, prop::array::uniform14(0u8..5)), 0..24),
        tier in prop::bool::ANY,
    ) {
        let mut b = B::new();
        if tier {
            b = b.fast();
        }
        let bs = b.sym("B");
        b.input("x", F32, &[bs, c(4)]);
        b.temp("h", F32, &[bs, c(4)]);
        b.splat("w", F32, &[c(4), c(4)], 0);
        b.temp("i", I32, &[c(4)]);
        b.output("y", F32, &[bs, c(4)]);
        let mut p = b.build();
        let n = ops.len();
        p.code = ops
            .into_iter()
            .map(|(k, placement, operands)| {
                let info = &adeadvm::isa::OP_INFO[k];
                let mut bytes = [0u8; 16];
                bytes[0] = info.opcode as u8;
                bytes[1] = placement;
                let end = info.operands.last().map_or(2, |o| o.offset as usize + o.kind.width());
                bytes[2..end].copy_from_slice(&operands[..end - 2]);
                bytes
            })
            .collect();
        p.debug.lines = (0..n as u32).collect();
        let _ = verify(p.clone());
        p.code.extend(raw);
        let _ = verify(p);
    }
}

// ---------------------------------------------------------------------------------------
// Definite initialization: a temporary is written before it is read, on every path.

#[test]
fn read_before_write_is_refused() {
    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    let t = b.temp("t", F32, &[c(4)]);
    let u = b.temp("u", F32, &[c(4)]);
    let y = b.output("y", F32, &[c(4)]);
    b.ops(&[
        Insn::Alloc { t },
        Insn::Alloc { t: u },
        Insn::Add { dst: u, a: x, b: t },
        Insn::Store { out: y, src: u },
        Insn::Free { t },
        Insn::Free { t: u },
    ]);
    assert_eq!(
        err(b),
        "instruction 2 (line 12, ADD): reads %t before anything wrote it (allocated by instruction 0 (line 10, ALLOC)) \
         on some path here; its bytes would be whatever the arena held, so write it first (FILL, COPY, LOAD, ...)"
    );
}

#[test]
fn written_on_only_one_path_is_refused_and_on_both_accepted() {
    // ALLOC t; ISET r0; JZ r0, L; FILL t; L: STORE y, t; FREE t
    let build = |fill_on_both: bool| {
        let mut b = B::new();
        let t = b.temp("t", F32, &[c(2)]);
        let y = b.output("y", F32, &[c(2)]);
        b.ops(&[Insn::Alloc { t }, Insn::Iset { rd: Reg(0), value: 0 }]);
        if fill_on_both {
            b.op(Insn::Fill { dst: t, value: 2.0 });
        }
        b.ops(&[
            Insn::Jz { cond: Reg(0), target: Target(if fill_on_both { 5 } else { 4 }) },
            Insn::Fill { dst: t, value: 1.0 },
            Insn::Store { out: y, src: t },
            Insn::Free { t },
        ]);
        b
    };
    let e = err(build(false));
    assert!(e.starts_with("instruction 4 (line 14, STORE): reads %t before anything wrote it"), "{e}");
    ok(build(true));
}

// ---------------------------------------------------------------------------------------
// Every independent error at once (issue 35.4).

#[test]
fn every_independent_error_is_reported_in_instruction_order() {
    let mut b = B::new();
    let x = b.input("x", F32, &[c(4)]);
    let a = b.temp("a", F32, &[c(4)]);
    let h = b.temp("h", F32, &[c(2)]);
    let y = b.output("y", F32, &[c(4)]);
    b.ops(&[
        Insn::Alloc { t: a },
        Insn::Relu { dst: a, a: x },
        Insn::Free { t: a },
        // A type error and a use before ALLOC on the same instruction: both are reported.
        Insn::Relu { dst: h, a: x },
        // A use after FREE.
        Insn::Relu { dst: a, a: x },
        Insn::Store { out: y, src: x },
        Insn::Halt,
    ]);
    let errors = verify(b.build()).unwrap_err();
    assert!(!errors.truncated);
    assert_eq!(
        errors.to_string(),
        "instruction 3 (line 13, RELU): shape mismatch: dst %h (f32[2]) and a %x (f32[4]) must have the same shape\n\
         instruction 3 (line 13, RELU): writes %h before it is allocated (use before ALLOC %h)\n\
         instruction 4 (line 14, RELU): writes %a after it was freed (use after FREE, by instruction 2 (line 12, FREE))"
    );
}

#[test]
fn a_join_error_is_not_reported_again_at_every_later_use() {
    // JZ skips the ALLOC: the join is wrong, and the FREE after it is not a second error.
    let mut b = B::new();
    let h = b.temp("h", F32, &[c(4)]);
    b.ops(&[
        Insn::Iset { rd: Reg(0), value: 0 },
        Insn::Jz { cond: Reg(0), target: Target(3) },
        Insn::Alloc { t: h },
        Insn::Nop,
        Insn::Free { t: h },
    ]);
    let errors = verify(b.build()).unwrap_err();
    assert_eq!(errors.errors.len(), 1, "{errors}");
    assert!(
        errors.to_string().starts_with("instruction 3 (line 13, NOP): control flow joins here"),
        "{errors}"
    );
}

#[test]
fn errors_stop_at_the_cap() {
    let mut b = B::new();
    let h = b.temp("h", F32, &[c(4)]);
    for _ in 0..100 {
        b.op(Insn::Free { t: h });
    }
    let errors = verify(b.build()).unwrap_err();
    assert_eq!(errors.errors.len(), MAX_ERRORS);
    assert!(errors.truncated);
    assert!(errors.to_string().ends_with("\n(verification stopped after 20 errors)"), "{errors}");
}

// ---------------------------------------------------------------------------------------
// Cost: near linear in the program (issue 34.3). These ran for minutes (L^3 time) or
// exhausted memory (N * L) before; each must finish in seconds in a debug build.

/// `count` temporaries of 4 floats, allocated in a row.
fn many_temps(b: &mut B, count: usize) -> Vec<TensorId> {
    (0..count).map(|k| b.temp(&format!("t{k}"), F32, &[c(4)])).collect()
}

#[test]
fn thousands_of_temporaries_allocated_in_a_row_plan_as_a_stack() {
    let mut b = B::new();
    let ts = many_temps(&mut b, 3000);
    for &t in &ts {
        b.op(Insn::Alloc { t });
    }
    for &t in ts.iter().rev() {
        b.op(Insn::Free { t });
    }
    let v = ok(b);
    // All 3000 are allocated together: each interferes with the 2999 others...
    assert_eq!(v.interferes_with(ts[1234]).len(), 2999);
    // ...so the first fit stacks them, one aligned slot each, in allocation order.
    let plan = v.plan(&[]).unwrap();
    assert_eq!(plan.peak_bytes, 2999 * ARENA_ALIGN + 16);
    for (k, &t) in ts.iter().enumerate() {
        assert_eq!(plan.offsets[t.0 as usize], Some(k as u64 * ARENA_ALIGN));
    }
}

#[test]
fn temporaries_live_across_hundreds_of_thousands_of_instructions_verify() {
    // 3000 temporaries stay allocated across 300,000 NOPs, then across 100,000 one-instruction
    // blocks (each a jump to the next): a state per instruction or per block would be
    // gigabytes.
    let mut b = B::new();
    let ts = many_temps(&mut b, 3000);
    for &t in &ts {
        b.op(Insn::Alloc { t });
    }
    for _ in 0..300_000 {
        b.op(Insn::Nop);
    }
    for _ in 0..100_000 {
        let next = b.p.code.len() as u32 + 1;
        b.op(Insn::Jmp { target: Target(next) });
    }
    for &t in &ts {
        b.op(Insn::Free { t });
    }
    b.op(Insn::Halt);
    let n = b.p.code.len();
    let v = ok(b);
    assert!((0..n).all(|i| v.is_reachable(i)));
    assert_eq!(v.plan(&[]).unwrap().peak_bytes, 2999 * ARENA_ALIGN + 16);
}

#[test]
fn the_interference_graph_has_a_limit() {
    // The k-th ALLOC of a row adds k pairs: past 2^24 pairs the program is refused, at the
    // ALLOC that crosses the limit (0 + 1 + ... + 5793 > 2^24 >= 0 + 1 + ... + 5792), before
    // the graph is built.
    assert_eq!(MAX_INTERFERENCE_PAIRS, 1 << 24);
    let mut b = B::new();
    let ts = many_temps(&mut b, 6000);
    for &t in &ts {
        b.op(Insn::Alloc { t });
    }
    for &t in ts.iter().rev() {
        b.op(Insn::Free { t });
    }
    assert_eq!(
        err(b),
        "instruction 5793 (line 5803, ALLOC): allocating %t5793 here, with 5793 temporaries already allocated, makes \
         more than 16777216 pairs of temporaries allocated at the same time in the program (the memory planner's \
         limit); free temporaries sooner"
    );
}

// Invalid SPIR-V (issue 34): modules one word away from programs/kernel/scale.spv that pass
// the interface checks but that SPIRV-Tools' validator refuses; lavapipe crashed the process
// building pipelines from such modules, so the verifier must refuse them.

/// programs/kernel.s, assembled, with its SPIR-V module's words.
fn kernel_example() -> (adeadvm::format::Program, Vec<u32>) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("programs");
    let source = std::fs::read_to_string(root.join("kernel.s")).unwrap();
    let options = adeadvm::asm::AsmOptions { defines: Vec::new(), base_dir: root };
    let program = adeadvm::asm::assemble(&source, "kernel.s", &options).unwrap();
    let words = program.spirv[0].words.clone();
    (program, words)
}

/// (start word, opcode) of every instruction after the header.
fn instructions(words: &[u32]) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    let mut at = 5;
    while at < words.len() {
        out.push((at, words[at] & 0xffff));
        at += (words[at] >> 16) as usize;
    }
    out
}

/// The start word of the first instruction with `opcode`.
fn first(words: &[u32], opcode: u32) -> usize {
    instructions(words)
        .into_iter()
        .find(|&(_, op)| op == opcode)
        .unwrap_or_else(|| panic!("no opcode {opcode}"))
        .0
}

/// Verifies programs/kernel.s with `words` as its module.
fn verify_kernel_with(words: Vec<u32>) -> Result<VerifiedProgram, String> {
    let (mut program, _) = kernel_example();
    program.spirv[0].words = words;
    verify(program).map_err(|e| e.to_string())
}

const OP_TYPE_STRUCT: u32 = 30;
const OP_LOAD: u32 = 61;
const OP_ACCESS_CHAIN: u32 = 65;
const OP_FMUL: u32 = 133;

#[test]
fn the_unchanged_kernel_module_validates() {
    let (_, words) = kernel_example();
    verify_kernel_with(words).unwrap();
}

#[test]
fn an_fmul_whose_result_type_is_a_struct_is_refused() {
    let (_, mut words) = kernel_example();
    let fmul = first(&words, OP_FMUL);
    words[fmul + 1] = words[first(&words, OP_TYPE_STRUCT) + 1]; // result type := a struct
    assert_eq!(
        verify_kernel_with(words).unwrap_err(),
        "kernel scale_by_2: SPIR-V module scale: is not valid SPIR-V: `%47 = OpFMul %_struct_18 %43 %46`: Expected \
         floating scalar or vector type as Result Type: FMul (SPIRV-Tools validator)"
    );
}

#[test]
fn an_id_defined_twice_is_refused() {
    let (_, mut words) = kernel_example();
    let fmul = first(&words, OP_FMUL);
    words[fmul + 2] = words[first(&words, OP_LOAD) + 2]; // the product's id := a load's id
    assert_eq!(
        verify_kernel_with(words).unwrap_err(),
        "kernel scale_by_2: SPIR-V module scale: is not valid SPIR-V: Id 15 is defined more than once (SPIRV-Tools \
         validator)"
    );
}

#[test]
fn an_access_chain_whose_base_is_a_type_is_refused() {
    let (_, mut words) = kernel_example();
    let chain = first(&words, OP_ACCESS_CHAIN);
    words[chain + 3] = words[first(&words, OP_TYPE_STRUCT) + 1]; // the base := a type
    assert_eq!(
        verify_kernel_with(words).unwrap_err(),
        "kernel scale_by_2: SPIR-V module scale: is not valid SPIR-V: `%14 = OpAccessChain %_ptr_Input_uint \
         %_struct_18 %uint_0`: Operand '18[%_struct_18]' cannot be a type (SPIRV-Tools validator)"
    );
}
