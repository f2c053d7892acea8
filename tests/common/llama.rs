//! A tiny Llama-architecture model with random weights, written as a GGUF file in llama.cpp's
//! layout (q and k rows permuted for rotary embedding on adjacent pairs) with a byte-level
//! vocabulary, and the `-D` definitions that assemble programs/smollm2.s for it. Its tensors
//! have SmolLM2's GGUF types: Q4_1 projections, a Q8_0 token embedding and f32 norms, quantized
//! here (ggml's reference quantizers, written out below) and dequantized here too, so the model
//! the float64 reference runs is exactly the one the file holds.

use std::path::Path;

use half::f16;

use super::Rng;

/// The tiny model's sizes (the program's defines).
pub const L: usize = 2;
pub const D: usize = 32;
pub const H: usize = 4;
pub const KVH: usize = 2;
pub const HD: usize = 8;
/// A multiple of 32 (a Q4_1 row of ffn_down is FF values, whole blocks).
pub const FF: usize = 64;
pub const VOCAB: usize = 61;
pub const CTX: usize = 40;
pub const MAXNEW: usize = 12;
pub const KEEP: usize = 3;
pub const THETA: f64 = 10000.0;
pub const EPS: f64 = 1e-5;

/// A block-quantized matrix ([rows, cols], cols a multiple of 32): its blocks as ggml stores
/// them and the f32 values they stand for. Derefs to the values.
pub struct Quantized {
    pub format: Format,
    pub cols: usize,
    pub blocks: Vec<u8>,
    pub values: Vec<f32>,
}

impl std::ops::Deref for Quantized {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.values
    }
}

/// ggml's block formats (32 values a block).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Format {
    /// f16 scale `d`, 32 × i8: value = d·q (34 bytes).
    Q8_0,
    /// f16 scale `d` and minimum `m`, 16 bytes of nibbles (value j in the low nibble of byte
    /// j, value j + 16 in the high one): value = d·q + m (20 bytes).
    Q4_1,
}

impl Format {
    pub fn block_bytes(self) -> usize {
        match self {
            Format::Q8_0 => 34,
            Format::Q4_1 => 20,
        }
    }

    /// The GGUF tensor type id (ggml_type).
    fn gguf_type(self) -> u32 {
        match self {
            Format::Q8_0 => 8,
            Format::Q4_1 => 3,
        }
    }
}

/// ggml's `quantize_row_q8_0_ref` on one block: d = max|x| / 127, q = round(x / d) (half away
/// from zero, C's `roundf`), d stored as f16.
fn quantize_block_q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_bits().to_le_bytes());
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

/// ggml's `quantize_row_q4_1_ref` on one block: m = min x, d = (max x - m) / 15,
/// q = min(15, trunc((x - m) / d + 0.5)), d and m stored as f16.
fn quantize_block_q4_1(x: &[f32], out: &mut Vec<u8>) {
    let min = x.iter().fold(f32::MAX, |m, &v| if v < m { v } else { m });
    let max = x.iter().fold(-f32::MAX, |m, &v| if v > m { v } else { m });
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_bits().to_le_bytes());
    out.extend(f16::from_f32(min).to_bits().to_le_bytes());
    let q = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
    out.extend((0..16).map(|j| q(x[j]) | (q(x[j + 16]) << 4)));
}

/// The values of one block, from ggml's definition computed in f64 and rounded once to f32
/// (exact for Q8_0; for Q4_1 `d·q` is exact and the sum is rounded once).
fn dequantize_block(format: Format, b: &[u8], out: &mut Vec<f32>) {
    let f = |i: usize| f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f64();
    match format {
        Format::Q8_0 => out.extend(b[2..34].iter().map(|&q| (f(0) * (q as i8) as f64) as f32)),
        Format::Q4_1 => {
            let (d, m) = (f(0), f(2));
            out.extend(b[4..20].iter().map(|&q| (d * (q & 15) as f64 + m) as f32));
            out.extend(b[4..20].iter().map(|&q| (d * (q >> 4) as f64 + m) as f32));
        }
    }
}

/// Quantizes `x` ([_, cols], row-major, cols a multiple of 32) block by block.
pub fn quantize(format: Format, x: &[f32], cols: usize) -> Quantized {
    assert!(cols.is_multiple_of(32) && x.len().is_multiple_of(cols));
    let mut blocks = Vec::new();
    for chunk in x.chunks_exact(32) {
        match format {
            Format::Q8_0 => quantize_block_q8_0(chunk, &mut blocks),
            Format::Q4_1 => quantize_block_q4_1(chunk, &mut blocks),
        }
    }
    let mut values = Vec::with_capacity(x.len());
    for b in blocks.chunks_exact(format.block_bytes()) {
        dequantize_block(format, b, &mut values);
    }
    Quantized { format, cols, blocks, values }
}

/// Weights in Hugging Face's layout ([out, in], q and k unpermuted): the embedding Q8_0, the
/// projections Q4_1 (their values are what the model computes with), the norms f32.
pub struct Weights {
    pub embed: Quantized,
    pub out_norm: Vec<f32>,
    pub layers: Vec<Layer>,
}

pub struct Layer {
    pub attn_norm: Vec<f32>,
    pub wq: Quantized,
    pub wk: Quantized,
    pub wv: Quantized,
    pub wo: Quantized,
    pub ffn_norm: Vec<f32>,
    pub wgate: Quantized,
    pub wup: Quantized,
    pub wdown: Quantized,
}

pub fn random_weights(seed: u64) -> Weights {
    let mut r = Rng(seed);
    let mut m = |n: usize, scale: f32| r.vec(n, -scale, scale);
    let q4 = |x: Vec<f32>, cols: usize| quantize(Format::Q4_1, &x, cols);
    let embed = quantize(Format::Q8_0, &m(VOCAB * D, 1.0), D);
    let out_norm: Vec<f32> = m(D, 0.2).iter().map(|v| 1.0 + v).collect();
    let layers = (0..L)
        .map(|_| Layer {
            attn_norm: m(D, 0.2).iter().map(|v| 1.0 + v).collect(),
            wq: q4(m(D * D, 0.3), D),
            wk: q4(m(KVH * HD * D, 0.3), D),
            wv: q4(m(KVH * HD * D, 0.3), D),
            wo: q4(m(D * D, 0.3), D),
            ffn_norm: m(D, 0.2).iter().map(|v| 1.0 + v).collect(),
            wgate: q4(m(FF * D, 0.3), D),
            wup: q4(m(FF * D, 0.3), D),
            wdown: q4(m(D * FF, 0.3), FF),
        })
        .collect();
    Weights { embed, out_norm, layers }
}

/// llama.cpp's permutation of q/k rows ([heads * HD, in], each row `row_len` elements: values,
/// or a quantized row's bytes): within each head, rows (i, i + HD/2) of Hugging Face's layout
/// become rows (2i, 2i + 1).
fn permute_rows<T: Copy + Default>(w: &[T], heads: usize, cols: usize) -> Vec<T> {
    let mut out = vec![T::default(); w.len()];
    for h in 0..heads {
        for i in 0..HD / 2 {
            for j in 0..2 {
                let from = h * HD + j * (HD / 2) + i;
                let to = h * HD + 2 * i + j;
                out[to * cols..(to + 1) * cols].copy_from_slice(&w[from * cols..(from + 1) * cols]);
            }
        }
    }
    out
}

/// A tensor's data in a GGUF file: f32 values (type 0) or blocks.
pub enum Data {
    F32(Vec<f32>),
    Blocks(Format, Vec<u8>),
}

impl Data {
    fn gguf_type(&self) -> u32 {
        match self {
            Data::F32(_) => 0,
            Data::Blocks(f, _) => f.gguf_type(),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            Data::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Data::Blocks(_, b) => b.clone(),
        }
    }
}

/// A GGUF v3 file, dims listed fastest first, data 32-byte aligned.
pub fn write_gguf(path: &Path, tensors: &[(String, Vec<usize>, Data)]) {
    let mut b = Vec::new();
    let s = |b: &mut Vec<u8>, t: &str| {
        b.extend((t.len() as u64).to_le_bytes());
        b.extend(t.as_bytes());
    };
    b.extend(b"GGUF");
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend(8u64.to_le_bytes());
    let string = |b: &mut Vec<u8>, key: &str, v: &str| {
        s(b, key);
        b.extend(8u32.to_le_bytes());
        s(b, v);
    };
    string(&mut b, "general.architecture", "llama");
    // A tiny byte-level vocabulary: three control tokens, then space (GPT-2's `Ġ`), a-z, A-Z
    // and 0-4, one byte each, and no merges.
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from).to_vec();
    tokens.push("\u{120}".into());
    tokens.extend(('a'..='z').chain('A'..='Z').chain('0'..='4').map(String::from));
    assert_eq!(tokens.len(), VOCAB);
    string(&mut b, "tokenizer.ggml.model", "gpt2");
    string(&mut b, "tokenizer.ggml.pre", "gpt2");
    s(&mut b, "tokenizer.ggml.tokens");
    b.extend(9u32.to_le_bytes());
    b.extend(8u32.to_le_bytes());
    b.extend((tokens.len() as u64).to_le_bytes());
    for t in &tokens {
        s(&mut b, t);
    }
    s(&mut b, "tokenizer.ggml.token_type");
    b.extend(9u32.to_le_bytes());
    b.extend(5u32.to_le_bytes()); // i32
    b.extend((tokens.len() as u64).to_le_bytes());
    for i in 0..tokens.len() {
        b.extend((if i < 3 { 3i32 } else { 1 }).to_le_bytes());
    }
    s(&mut b, "tokenizer.ggml.merges");
    b.extend(9u32.to_le_bytes());
    b.extend(8u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    s(&mut b, "tokenizer.ggml.eos_token_id");
    b.extend(4u32.to_le_bytes());
    b.extend(2u32.to_le_bytes());
    string(
        &mut b,
        "tokenizer.chat_template",
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}",
    );
    let mut offset = 0u64;
    for (name, shape, data) in tensors {
        s(&mut b, name);
        b.extend((shape.len() as u32).to_le_bytes());
        for d in shape.iter().rev() {
            b.extend((*d as u64).to_le_bytes());
        }
        b.extend(data.gguf_type().to_le_bytes());
        b.extend(offset.to_le_bytes());
        offset += (data.bytes().len() as u64).next_multiple_of(32);
    }
    b.resize(b.len().next_multiple_of(32), 0);
    for (_, _, data) in tensors {
        b.extend(data.bytes());
        b.resize(b.len().next_multiple_of(32), 0);
    }
    std::fs::write(path, b).unwrap();
}

pub fn gguf_tensors(w: &Weights) -> Vec<(String, Vec<usize>, Data)> {
    let blocks = |q: &Quantized| Data::Blocks(q.format, q.blocks.clone());
    // Rows are whole blocks, so permuting a quantized matrix's rows permutes its rows' bytes.
    let permuted = |q: &Quantized, heads: usize| {
        let row_bytes = q.cols / 32 * q.format.block_bytes();
        Data::Blocks(q.format, permute_rows(&q.blocks, heads, row_bytes))
    };
    let mut t = vec![
        ("token_embd.weight".to_string(), vec![VOCAB, D], blocks(&w.embed)),
        ("output_norm.weight".to_string(), vec![D], Data::F32(w.out_norm.clone())),
    ];
    for (l, x) in w.layers.iter().enumerate() {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        t.push((n("attn_norm"), vec![D], Data::F32(x.attn_norm.clone())));
        t.push((n("attn_q"), vec![D, D], permuted(&x.wq, H)));
        t.push((n("attn_k"), vec![KVH * HD, D], permuted(&x.wk, KVH)));
        t.push((n("attn_v"), vec![KVH * HD, D], blocks(&x.wv)));
        t.push((n("attn_output"), vec![D, D], blocks(&x.wo)));
        t.push((n("ffn_norm"), vec![D], Data::F32(x.ffn_norm.clone())));
        t.push((n("ffn_gate"), vec![FF, D], blocks(&x.wgate)));
        t.push((n("ffn_up"), vec![FF, D], blocks(&x.wup)));
        t.push((n("ffn_down"), vec![D, FF], blocks(&x.wdown)));
    }
    t
}

pub fn defines(weights: &Path) -> Vec<(String, String)> {
    [
        ("WEIGHTS", weights.display().to_string()),
        ("L", L.to_string()),
        ("D", D.to_string()),
        ("H", H.to_string()),
        ("KVH", KVH.to_string()),
        ("GROUP", (H / KVH).to_string()),
        ("HD", HD.to_string()),
        ("HALF", (HD / 2).to_string()),
        ("KVD", (KVH * HD).to_string()),
        ("FF", FF.to_string()),
        ("VOCAB", VOCAB.to_string()),
        ("THETA", THETA.to_string()),
        ("SCALE", (1.0 / (HD as f64).sqrt()).to_string()),
        ("CTX", CTX.to_string()),
        ("MAXNEW", MAXNEW.to_string()),
        ("KEEP", KEEP.to_string()),
        ("MAXB", "8".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The definitions that make programs/smollm2.s dequantize the weights into f32 constants at
/// assembly time (added to [`defines`]).
pub fn dequantize_defines() -> Vec<(String, String)> {
    vec![("PROJ".to_string(), "f32".to_string()), ("EMBED".to_string(), "f32".to_string())]
}

/// Writes the tiny model's GGUF into `dir` and returns the definitions that assemble
/// programs/smollm2.s for it (keeping its blocks).
pub fn tiny_model(dir: &Path) -> (Weights, Vec<(String, String)>) {
    let weights = random_weights(2026);
    let path = dir.join("tiny.gguf");
    write_gguf(&path, &gguf_tensors(&weights));
    let d = defines(&path);
    (weights, d)
}
