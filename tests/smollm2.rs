//! programs/smollm2.s on a tiny Llama model with random weights, written by this test as a GGUF
//! file in llama.cpp's layout (q and k rows permuted for rotary embedding on adjacent pairs) and
//! SmolLM2's types (Q4_1 projections, a Q8_0 embedding, quantized by the test):
//! - the program keeping the blocks and the one dequantizing them at assembly time
//!   (`-D PROJ=f32 -D EMBED=f32`) give the same tokens and the same bits of every logit;
//! - greedy tokens and logits against a float64 model written here from Hugging Face's
//!   LlamaForCausalLM definition (rotate-half RoPE on the unpermuted weights), not from the VM;
//! - the same bits alone and in a batch with prompts of other lengths (batch invariance);
//! - the same bits on the scalar CPU, the SIMD CPU at 1 to 3 threads, and Vulkan (lavapipe);
//! - `adeadvm generate` as a user runs it, its errors, and replay of a recorded generation.
//!
//! The real SmolLM2-135M is checked against an independent float64 reference in
//! python/tests/test_smollm2.py.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use adeadvm::api;
use adeadvm::exec::cpu::SimdLevel;
use adeadvm::generate::{GenerationProgram, Request};
use adeadvm::vm::{Backend, VmConfig};
use common::llama::*;

fn program_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/smollm2.s")
}

/// The tiny model's folder, GGUF and assembled programs (built once per test binary).
struct Tiny {
    dir: tempfile::TempDir,
    weights: Weights,
    /// programs/smollm2.s as it is: the GGUF's Q4_1 and Q8_0 blocks kept.
    program: api::Program,
    /// With `-D PROJ=f32 -D EMBED=f32`: the same weights dequantized into f32 constants.
    dequantized: api::Program,
}

fn tiny() -> &'static Tiny {
    static TINY: std::sync::OnceLock<Tiny> = std::sync::OnceLock::new();
    TINY.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (weights, defines) = tiny_model(dir.path());
        let load = |defines: Vec<(String, String)>| {
            let options = api::LoadOptions { defines, ..api::LoadOptions::default() };
            api::Program::load_with(program_path(), &options).unwrap_or_else(|e| panic!("{e}"))
        };
        let program = load(defines.clone());
        let dequantized = load(defines.into_iter().chain(dequantize_defines()).collect());
        Tiny { dir, weights, program, dequantized }
    })
}

// ---- the float64 model (Hugging Face's definition) ----

fn rmsnorm(x: &[f64], w: &[f32]) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + EPS).sqrt();
    x.iter().zip(w).map(|(v, g)| v * r * *g as f64).collect()
}

/// y = W x for W [out, in] row-major.
fn linear(w: &[f32], x: &[f64]) -> Vec<f64> {
    w.chunks(x.len()).map(|row| row.iter().zip(x).map(|(a, b)| *a as f64 * b).sum()).collect()
}

/// Rotate-half RoPE on one head at position `pos`.
fn rope(x: &mut [f64], pos: usize) {
    let half = HD / 2;
    for i in 0..half {
        let inv = THETA.powf(-2.0 * i as f64 / HD as f64);
        let (c, s) = ((pos as f64 * inv).cos(), (pos as f64 * inv).sin());
        let (a, b) = (x[i], x[i + half]);
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
    }
}

/// Greedy generation in float64: the tokens and each step's logits.
fn reference(w: &Weights, prompt: &[i64], steps: usize) -> (Vec<u32>, Vec<Vec<f64>>) {
    let mut kcache: Vec<Vec<Vec<f64>>> = vec![Vec::new(); L]; // [layer][pos] -> KVH*HD
    let mut vcache: Vec<Vec<Vec<f64>>> = vec![Vec::new(); L];
    let mut tokens = Vec::new();
    let mut all_logits = Vec::new();
    let mut next = prompt[0] as usize;
    let total = prompt.len() - 1 + steps;
    for pos in 0..total {
        let tok = if pos < prompt.len() { prompt[pos] as usize } else { next };
        let mut x: Vec<f64> = w.embed[tok * D..(tok + 1) * D].iter().map(|&v| v as f64).collect();
        for (l, ly) in w.layers.iter().enumerate() {
            let h = rmsnorm(&x, &ly.attn_norm);
            let mut q = linear(&ly.wq, &h);
            let mut k = linear(&ly.wk, &h);
            let v = linear(&ly.wv, &h);
            for hh in 0..H {
                rope(&mut q[hh * HD..(hh + 1) * HD], pos);
            }
            for hh in 0..KVH {
                rope(&mut k[hh * HD..(hh + 1) * HD], pos);
            }
            kcache[l].push(k);
            vcache[l].push(v);
            let mut att = vec![0.0; D];
            for hh in 0..H {
                let g = hh / (H / KVH);
                let qh = &q[hh * HD..(hh + 1) * HD];
                let scores: Vec<f64> = kcache[l]
                    .iter()
                    .map(|kk| {
                        qh.iter().zip(&kk[g * HD..(g + 1) * HD]).map(|(a, b)| a * b).sum::<f64>()
                            / (HD as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for (p, vv) in e.iter().zip(&vcache[l]) {
                    for d in 0..HD {
                        att[hh * HD + d] += p / z * vv[g * HD + d];
                    }
                }
            }
            let o = linear(&ly.wo, &att);
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let h2 = rmsnorm(&x, &ly.ffn_norm);
            let gate = linear(&ly.wgate, &h2);
            let up = linear(&ly.wup, &h2);
            let act: Vec<f64> = gate.iter().zip(&up).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
            let dn = linear(&ly.wdown, &act);
            x.iter_mut().zip(&dn).for_each(|(a, b)| *a += b);
        }
        if pos + 1 >= prompt.len() {
            let xn = rmsnorm(&x, &w.out_norm);
            let logits = linear(&w.embed, &xn);
            let best = (0..VOCAB).fold(0, |b, i| if logits[i] > logits[b] { i } else { b });
            next = best;
            tokens.push(best as u32);
            all_logits.push(logits);
        }
    }
    (tokens, all_logits)
}

fn generate(config: VmConfig, prompts: &[Vec<i64>], max_new: usize) -> adeadvm::generate::Generation {
    generate_with(&tiny().program, config, prompts, max_new)
}

fn generate_with(
    program: &api::Program,
    config: VmConfig,
    prompts: &[Vec<i64>],
    max_new: usize,
) -> adeadvm::generate::Generation {
    let generator = GenerationProgram::new(program.clone()).unwrap();
    let mut session = api::Session::from_vm_config(program, config).unwrap();
    let req = Request { prompts: prompts.to_vec(), max_new, stop: None };
    generator.generate(&mut session, &req, &mut ()).unwrap_or_else(|e| panic!("{e}"))
}

fn cpu(simd: SimdLevel, threads: usize) -> VmConfig {
    VmConfig { simd: Some(simd), threads: Some(threads), backend: Backend::Cpu, ..VmConfig::default() }
}

fn prompts() -> Vec<Vec<i64>> {
    vec![vec![3, 17, 42, 5, 9, 60, 1], vec![12], vec![7, 7, 7, 30]]
}

#[test]
fn greedy_tokens_and_logits_match_a_float64_model() {
    let w = &tiny().weights;
    for prompt in prompts() {
        let got = generate(cpu(SimdLevel::detect(), 2), std::slice::from_ref(&prompt), MAXNEW);
        let (want, want_logits) = reference(w, &prompt, MAXNEW);
        let s = &got.sequences[0];
        assert_eq!(s.ids, want, "prompt {prompt:?}: greedy tokens");
        assert_eq!(s.logits.len(), KEEP);
        for (step, (l, r)) in s.logits.iter().zip(&want_logits).enumerate() {
            let scale = r.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let err = l.iter().zip(r).fold(0.0f64, |m, (a, b)| m.max((*a as f64 - b).abs()));
            assert!(
                err <= 1e-4 * scale,
                "prompt {prompt:?} step {step}: logits off by {err:e} (scale {scale:e})"
            );
        }
    }
}

/// The quantized program and the dequantized one compute with the same f32 values (ggml's
/// dequantization of the same blocks), so every token and every bit of every logit is the same,
/// on the scalar CPU and on SIMD with several threads (decode steps: matrix-vector products
/// reading the blocks directly; the prefill block: products of several rows).
#[test]
fn the_quantized_and_dequantized_programs_give_the_same_bits() {
    let t = tiny();
    let ps = prompts();
    let bits = |g: &adeadvm::generate::Generation| -> Vec<(Vec<u32>, Vec<u32>)> {
        g.sequences
            .iter()
            .map(|s| (s.ids.clone(), s.logits.concat().iter().map(|v| v.to_bits()).collect()))
            .collect()
    };
    let mut configs = vec![cpu(SimdLevel::Scalar, 1)];
    configs.extend([1, 3].map(|threads| cpu(SimdLevel::detect(), threads)));
    for config in configs {
        let label = format!("{:?} x{:?}", config.simd, config.threads);
        let quantized = generate_with(&t.program, config.clone(), &ps, MAXNEW);
        let dequantized = generate_with(&t.dequantized, config, &ps, MAXNEW);
        assert_eq!(quantized.sequences.len(), ps.len());
        assert!(quantized.sequences.iter().all(|s| s.ids.len() == MAXNEW || s.ids.last() == Some(&2)));
        assert!(bits(&quantized) == bits(&dequantized), "{label}: quantized and dequantized programs differ");
    }
    // The blocks are kept as they are: the dequantized program is larger by exactly the f32
    // size of the quantized weights less their blocks' size (up to each constant's alignment).
    let w = &t.weights;
    let mut quantized: Vec<&Quantized> = vec![&w.embed];
    for l in &w.layers {
        quantized.extend([&l.wq, &l.wk, &l.wv, &l.wo, &l.wgate, &l.wup, &l.wdown]);
    }
    let saved: usize = quantized.iter().map(|q| q.values.len() * 4 - q.blocks.len()).sum();
    let size = |p: &api::Program| p.verified().program().to_bytes().len();
    let (q, f) = (size(&t.program), size(&t.dequantized));
    assert!(
        (f - q).abs_diff(saved) <= 64 * quantized.len(),
        "the quantized program is {q} bytes, the dequantized one {f}: not {saved} bytes apart"
    );
}

#[test]
fn a_prompt_gives_the_same_bits_alone_and_in_any_batch() {
    let ps = prompts();
    let batch = generate(cpu(SimdLevel::detect(), 3), &ps, MAXNEW);
    let reversed: Vec<Vec<i64>> = ps.iter().rev().cloned().collect();
    let rev = generate(cpu(SimdLevel::detect(), 1), &reversed, MAXNEW);
    for (k, p) in ps.iter().enumerate() {
        let alone = generate(cpu(SimdLevel::detect(), 2), std::slice::from_ref(p), MAXNEW);
        let bits = |s: &adeadvm::generate::Sequence| -> Vec<Vec<u32>> {
            s.logits.iter().map(|l| l.iter().map(|v| v.to_bits()).collect()).collect()
        };
        assert_eq!(alone.sequences[0].ids, batch.sequences[k].ids, "prompt {k}: tokens alone vs batch");
        assert_eq!(bits(&alone.sequences[0]), bits(&batch.sequences[k]), "prompt {k}: logits alone vs batch");
        let r = &rev.sequences[ps.len() - 1 - k];
        assert_eq!(bits(&alone.sequences[0]), bits(r), "prompt {k}: logits alone vs reversed batch");
    }
    // Prompts of 7 and 4 tokens: a prefill block of 3 positions, then steps; alone, the first
    // runs a block of 6. The same bits either way.
    let pair = vec![ps[0].clone(), ps[2].clone()];
    let both = generate(cpu(SimdLevel::detect(), 2), &pair, MAXNEW);
    for (k, p) in pair.iter().enumerate() {
        let alone = generate(cpu(SimdLevel::detect(), 2), std::slice::from_ref(p), MAXNEW);
        assert!(alone.sequences[0] == both.sequences[k], "prompt {k} of the pair: alone vs batch");
    }
}

#[test]
fn every_cpu_configuration_and_vulkan_give_the_same_bits() {
    let ps = prompts();
    let want = generate(cpu(SimdLevel::Scalar, 1), &ps, MAXNEW);
    let bits = |g: &adeadvm::generate::Generation| -> Vec<(Vec<u32>, Vec<u32>)> {
        g.sequences
            .iter()
            .map(|s| (s.ids.clone(), s.logits.concat().iter().map(|v| v.to_bits()).collect()))
            .collect()
    };
    for level in [SimdLevel::Avx2, SimdLevel::Avx512].into_iter().filter(|l| *l <= SimdLevel::detect()) {
        for threads in [1, 3] {
            let got = generate(cpu(level, threads), &ps, MAXNEW);
            assert!(bits(&got) == bits(&want), "{level:?} x{threads} differs from the scalar CPU");
        }
    }
    match adeadvm::vm::shared_device() {
        Ok(_) => {
            let config = VmConfig { backend: Backend::Vulkan, threads: Some(1), ..VmConfig::default() };
            let got = generate_with(&tiny().program, config, &ps, MAXNEW);
            assert!(bits(&got) == bits(&want), "Vulkan differs from the scalar CPU");
        }
        Err(e) => {
            assert!(!common::vk::required(), "ADEADVM_REQUIRE_VULKAN=1 but no Vulkan device: {e}");
            common::skip::skipped("the tiny Llama on Vulkan", &format!("no Vulkan device ({e})"));
        }
    }
}

#[test]
fn requests_outside_the_program_are_clear_errors() {
    let t = tiny();
    let generator = GenerationProgram::new(t.program.clone()).unwrap();
    let err = |prompts: Vec<Vec<i64>>, max_new: usize| {
        generator.inputs(&Request { prompts, max_new, stop: None }).map(|_| ()).unwrap_err().to_string()
    };
    assert_eq!(err(vec![], 4), "no prompt was given");
    assert_eq!(err(vec![vec![1], vec![]], 4), "prompt 1 is empty: a prompt needs at least one token");
    assert_eq!(
        err(vec![vec![1, 61]], 4),
        "token 61 at position 1 of prompt 0 is outside the vocabulary of 61 tokens"
    );
    assert_eq!(
        err(vec![vec![1]], 13),
        "13 new tokens asked for, outside 1..=12 (this program keeps at most 12 tokens a sequence; assemble it with -D MAXNEW=... for more)"
    );
    assert_eq!(
        err(vec![vec![1; 35]], 10),
        "the longest prompt (35 tokens) and 10 new tokens need 44 positions, more than this program's context of 40 (assemble it with -D CTX=... for more)"
    );
    let not = api::Program::from_asm(
        ".input %x f32[2]\n.output y f32[2]\nALLOC %y: f32[2]\nCOPY %y, %x\nSTORE y, %y\nFREE %y\n",
        "x.s",
    )
    .unwrap();
    let e = GenerationProgram::new(not).map(|_| ()).unwrap_err().to_string();
    assert_eq!(
        e,
        "this program is not a generation program: it has no input `feed` (see programs/smollm2.s for the interface)"
    );
}

fn adeadvm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_adeadvm"))
}

#[test]
fn the_generate_command_prints_ids_records_and_replays() {
    let t = tiny();
    let dir = t.dir.path();
    let bib = dir.join("tiny.bib");
    let mut asm = adeadvm();
    asm.arg("asm").arg(program_path()).arg("-o").arg(&bib);
    for (k, v) in defines(&dir.join("tiny.gguf")) {
        asm.arg("-D").arg(format!("{k}={v}"));
    }
    let out = asm.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let trace = dir.join("gen.trace");
    let logits = dir.join("l.npy");
    let out = adeadvm()
        .args([
            "generate",
            bib.to_str().unwrap(),
            "--prompt-ids",
            "3,17,42,5",
            "--max-tokens",
            "6",
            "--ignore-eos",
            "--json",
        ])
        .args([
            "--backend",
            "cpu",
            "--record",
            trace.to_str().unwrap(),
            "--logits-out",
            logits.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json = String::from_utf8(out.stdout).unwrap();
    let (want, _) = reference(&t.weights, &[3, 17, 42, 5], 6);
    let ids: Vec<String> = want.iter().map(u32::to_string).collect();
    assert!(json.starts_with(&format!("{{\"ids\": [{}], \"text\": ", ids.join(", "))), "{json}");
    assert!(json.contains("\"gen_tokens_per_s\": "), "{json}");
    // A decode step reads every projection (q4_1: 20 bytes per 32 weights) and the tied output
    // layer (the q8_0 embedding: 34 bytes per 32) once.
    let per_layer = 2 * D * D + 2 * (KVH * HD) * D + 3 * FF * D;
    let weight_bytes = L * per_layer / 32 * 20 + VOCAB * D / 32 * 34;
    assert!(json.contains(&format!("\"weight_bytes_per_step\": {weight_bytes}, ")), "{json}");
    let l = adeadvm::npy::read(&logits, None).unwrap();
    assert_eq!(l.shape, [KEEP, VOCAB]);

    let out = adeadvm()
        .args(["replay", bib.to_str().unwrap(), trace.to_str().unwrap(), "--backend", "cpu"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.starts_with("identical: all "),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A text prompt goes through the vocabulary the program carries (`.vocab`): "hi Bo" is the
    // ids of h, i, space, B, o in the tiny vocabulary; the answer is decoded back to text.
    let run = |args: &[&str]| {
        let out = adeadvm()
            .args(["generate", bib.to_str().unwrap(), "--backend", "cpu", "--json"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&["--prompt", "hi Bo", "--raw", "--max-tokens", "5", "--ignore-eos"]);
    let ids = run(&["--prompt-ids", "11,12,3,31,18", "--max-tokens", "5", "--ignore-eos"]);
    let (want, _) = reference(&t.weights, &[11, 12, 3, 31, 18], 5);
    let chars: String = want
        .iter()
        .map(|&i| match i {
            3 => ' ',
            4..=29 => (b'a' + (i - 4) as u8) as char,
            30..=55 => (b'A' + (i - 30) as u8) as char,
            56..=60 => (b'0' + (i - 56) as u8) as char,
            _ => '?',
        })
        .collect();
    assert!(!want.iter().any(|&i| i < 3), "the check below assumes no control token was generated: {want:?}");
    let ids_json: Vec<String> = want.iter().map(u32::to_string).collect();
    assert!(
        text.starts_with(&format!("{{\"ids\": [{}], \"text\": \"{chars}\"", ids_json.join(", "))),
        "{text}"
    );
    assert!(
        ids.starts_with(&format!("{{\"ids\": [{}], \"text\": \"{chars}\"", ids_json.join(", "))),
        "{ids}"
    );
    let out = adeadvm().args(["generate", bib.to_str().unwrap(), "--prompt-ids", "1,x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`x` is not a token id (expected e.g. 1,2,3)"));
}
