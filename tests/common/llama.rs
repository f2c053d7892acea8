//! A tiny Llama-architecture model with random weights, written as a GGUF file in llama.cpp's
//! layout (q and k rows permuted for rotary embedding on adjacent pairs) with a byte-level
//! vocabulary, and the `-D` definitions that assemble programs/smollm2.s for it.

use std::path::Path;

use super::Rng;

/// The tiny model's sizes (the program's defines).
pub const L: usize = 2;
pub const D: usize = 32;
pub const H: usize = 4;
pub const KVH: usize = 2;
pub const HD: usize = 8;
pub const FF: usize = 48;
pub const VOCAB: usize = 61;
pub const CTX: usize = 40;
pub const MAXNEW: usize = 12;
pub const KEEP: usize = 3;
pub const THETA: f64 = 10000.0;
pub const EPS: f64 = 1e-5;

/// Weights in Hugging Face's layout ([out, in], q and k unpermuted), as f32 values.
pub struct Weights {
    pub embed: Vec<f32>,
    pub out_norm: Vec<f32>,
    pub layers: Vec<Layer>,
}

pub struct Layer {
    pub attn_norm: Vec<f32>,
    pub wq: Vec<f32>,
    pub wk: Vec<f32>,
    pub wv: Vec<f32>,
    pub wo: Vec<f32>,
    pub ffn_norm: Vec<f32>,
    pub wgate: Vec<f32>,
    pub wup: Vec<f32>,
    pub wdown: Vec<f32>,
}

pub fn random_weights(seed: u64) -> Weights {
    let mut r = Rng(seed);
    let mut m = |n: usize, scale: f32| r.vec(n, -scale, scale);
    let embed = m(VOCAB * D, 1.0);
    let out_norm: Vec<f32> = m(D, 0.2).iter().map(|v| 1.0 + v).collect();
    let layers = (0..L)
        .map(|_| Layer {
            attn_norm: m(D, 0.2).iter().map(|v| 1.0 + v).collect(),
            wq: m(D * D, 0.3),
            wk: m(KVH * HD * D, 0.3),
            wv: m(KVH * HD * D, 0.3),
            wo: m(D * D, 0.3),
            ffn_norm: m(D, 0.2).iter().map(|v| 1.0 + v).collect(),
            wgate: m(FF * D, 0.3),
            wup: m(FF * D, 0.3),
            wdown: m(D * FF, 0.3),
        })
        .collect();
    Weights { embed, out_norm, layers }
}

/// llama.cpp's permutation of q/k rows ([heads * HD, in]): within each head, rows (i, i + HD/2)
/// of Hugging Face's layout become rows (2i, 2i + 1).
fn permute_rows(w: &[f32], heads: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; w.len()];
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

/// A GGUF v3 file of f32 tensors (type 0), dims listed fastest first, data 32-byte aligned.
pub fn write_gguf(path: &Path, tensors: &[(String, Vec<usize>, Vec<f32>)]) {
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
    for (name, shape, values) in tensors {
        s(&mut b, name);
        b.extend((shape.len() as u32).to_le_bytes());
        for d in shape.iter().rev() {
            b.extend((*d as u64).to_le_bytes());
        }
        b.extend(0u32.to_le_bytes());
        b.extend(offset.to_le_bytes());
        offset += (values.len() as u64 * 4).next_multiple_of(32);
    }
    b.resize(b.len().next_multiple_of(32), 0);
    for (_, _, values) in tensors {
        for v in values {
            b.extend(v.to_le_bytes());
        }
        b.resize(b.len().next_multiple_of(32), 0);
    }
    std::fs::write(path, b).unwrap();
}

pub fn gguf_tensors(w: &Weights) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut t = vec![
        ("token_embd.weight".to_string(), vec![VOCAB, D], w.embed.clone()),
        ("output_norm.weight".to_string(), vec![D], w.out_norm.clone()),
    ];
    for (l, x) in w.layers.iter().enumerate() {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        t.push((n("attn_norm"), vec![D], x.attn_norm.clone()));
        t.push((n("attn_q"), vec![D, D], permute_rows(&x.wq, H, D)));
        t.push((n("attn_k"), vec![KVH * HD, D], permute_rows(&x.wk, KVH, D)));
        t.push((n("attn_v"), vec![KVH * HD, D], x.wv.clone()));
        t.push((n("attn_output"), vec![D, D], x.wo.clone()));
        t.push((n("ffn_norm"), vec![D], x.ffn_norm.clone()));
        t.push((n("ffn_gate"), vec![FF, D], x.wgate.clone()));
        t.push((n("ffn_up"), vec![FF, D], x.wup.clone()));
        t.push((n("ffn_down"), vec![D, FF], x.wdown.clone()));
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

/// Writes the tiny model's GGUF into `dir` and returns the definitions that assemble
/// programs/smollm2.s for it.
pub fn tiny_model(dir: &Path) -> (Weights, Vec<(String, String)>) {
    let weights = random_weights(2026);
    let path = dir.join("tiny.gguf");
    write_gguf(&path, &gguf_tensors(&weights));
    let d = defines(&path);
    (weights, d)
}
