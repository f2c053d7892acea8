//! ggml's block-quantized formats decoded to f32, written once: the assembler's `gguf(...)`,
//! the CPU executor's quantized MATMUL and GATHER, and the tests all call these, and the Vulkan
//! kernels (`shaders/include/matmul_q.glsl` for `shaders/matmul_q_{vec,tile}.comp`, and
//! `shaders/gather_q.comp`) repeat them in GLSL, checked bit for bit by tests/quant.rs.
//!
//! Exactness (why one definition serves every executor): a value is `d · q` (Q8_0) or
//! `d · q + m` (Q4_1) with `d`, `m` f16 widened to f32 (exact) and `q` a small integer. The
//! product of an 11-bit and an 8-bit significand is exact in f32, so Q8_0 values involve no
//! rounding at all, and a Q4_1 value is the exact `d · q + m` rounded once, to nearest even:
//! the same bits with a fused multiply-add or without, and none is ever an f32 denormal (an
//! f16's smallest step, 2^-24, is far above f32's normal range's floor), so flush-to-zero
//! cannot change them either.

use half::f16;

use crate::isa::BlockFormat;

const QK: usize = BlockFormat::BLOCK_ELEMS;

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// The first block (in `blocks`, whole blocks of `format`) whose f16 scale or min is not finite,
/// with those f16 bits. A program's blocks must have none: then every value is finite (at most
/// 65504 · 127 + 65504 in magnitude), so no NaN, whose bits executors would give differently,
/// can come out of a dequantization. The assembler and the verifier both refuse such blocks.
pub fn first_nonfinite(format: BlockFormat, blocks: &[u8]) -> Option<(usize, u16)> {
    let fields: &[usize] = match format {
        BlockFormat::Q8_0 => &[0],
        BlockFormat::Q4_1 => &[0, 2],
    };
    blocks.chunks_exact(format.block_bytes()).enumerate().find_map(|(i, b)| {
        fields
            .iter()
            .map(|&at| u16::from_le_bytes([b[at], b[at + 1]]))
            .find(|h| h & 0x7c00 == 0x7c00)
            .map(|h| (i, h))
    })
}

/// Decodes one block (`format.block_bytes()` bytes) into its 32 values.
///
/// Panics if `block` is shorter than a block.
pub fn dequantize_block(format: BlockFormat, block: &[u8], out: &mut [f32; QK]) {
    match format {
        BlockFormat::Q8_0 => {
            let d = f16_at(block, 0);
            for (o, &q) in out.iter_mut().zip(&block[2..34]) {
                *o = d * (q as i8) as f32;
            }
        }
        BlockFormat::Q4_1 => {
            let (d, m) = (f16_at(block, 0), f16_at(block, 2));
            let qs = &block[4..20];
            let (lo, hi) = out.split_at_mut(QK / 2);
            for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
                *l = d * (q & 0x0f) as f32 + m;
                *h = d * (q >> 4) as f32 + m;
            }
        }
    }
}

/// Decodes whole blocks: `out.len()` values (a multiple of 32) from the blocks at the start of
/// `blocks`.
///
/// Panics if `out.len()` is not a multiple of 32 or `blocks` is too short.
pub fn dequantize(format: BlockFormat, blocks: &[u8], out: &mut [f32]) {
    assert!(out.len().is_multiple_of(QK), "dequantize: {} values are not whole blocks", out.len());
    let bb = format.block_bytes();
    for (o, b) in out.chunks_exact_mut(QK).zip(blocks.chunks_exact(bb)) {
        let o: &mut [f32; QK] = o.try_into().expect("a chunk of 32");
        dequantize_block(format, b, o);
    }
}

/// Decodes rows `rows` of a quantized `[_, k]` matrix (`k` a multiple of 32) into `out`
/// (`rows.len() · k` values, row-major).
pub fn dequantize_rows(
    format: BlockFormat,
    blocks: &[u8],
    k: usize,
    rows: std::ops::Range<usize>,
    out: &mut [f32],
) {
    let row_bytes = k / QK * format.block_bytes();
    dequantize(format, &blocks[rows.start * row_bytes..rows.end * row_bytes], &mut out[..rows.len() * k]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Q8_0 against the definition in f64 (exact: the values are exact in f32).
    #[test]
    fn q8_0_is_d_times_q() {
        let d = f16::from_f32(0.0123);
        let mut block = d.to_bits().to_le_bytes().to_vec();
        block.extend((0..32).map(|i| (i * 7 - 100) as u8));
        let mut out = [0.0; 32];
        dequantize_block(BlockFormat::Q8_0, &block, &mut out);
        for (i, v) in out.iter().enumerate() {
            let q = (i as i32 * 7 - 100) as f64;
            assert_eq!(*v as f64, d.to_f64() * q);
        }
    }

    /// Q4_1: the nibble layout (low nibbles first) and one rounding of the exact value.
    #[test]
    fn q4_1_is_d_times_q_plus_m_rounded_once() {
        let (d, m) = (f16::from_f32(0.37), f16::from_f32(-1.9));
        let mut block = d.to_bits().to_le_bytes().to_vec();
        block.extend(m.to_bits().to_le_bytes());
        block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let mut out = [0.0; 32];
        dequantize_block(BlockFormat::Q4_1, &block, &mut out);
        for (i, v) in out.iter().enumerate() {
            let q = if i < 16 { i as f64 } else { (15 - (i - 16)) as f64 };
            assert_eq!(*v, (d.to_f64() * q + m.to_f64()) as f32, "element {i}");
        }
    }
}
