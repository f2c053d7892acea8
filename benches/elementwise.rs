//! Elementwise and row kernels of `exec::cpu::simd`: strict vs fast, 1 and 2 threads, with the
//! scalar reference as a baseline for add and exp.
//!
//! `cargo bench --bench elementwise` runs at the best vector level of this CPU;
//! `ADEADVM_SIMD=avx2 cargo bench --bench elementwise` compares a lower one. Throughput: add is
//! reported in bytes moved (two 4-byte reads and one 4-byte write per element, the same count
//! as numpy's `np.add(a, b, out=c)`); the others in elements.

use std::hint::black_box;

use adeadvm::exec::cpu::fpenv::FtzGuard;
use adeadvm::exec::cpu::reference::{self as r, Binary, Reduce, Unary};
use adeadvm::exec::cpu::{simd, worker_pool, Ctx, SimdLevel};
use adeadvm::isa::Tier;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const N: usize = 1 << 24;

fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n).map(|i| adeadvm::rand::philox_normal(seed, i as u64) * 2.0).collect()
}

fn configs(pools: &[rayon::ThreadPool; 2]) -> Vec<(String, Ctx<'_>)> {
    let level = SimdLevel::from_env();
    let mut v = Vec::new();
    for tier in [Tier::Strict, Tier::Fast] {
        for (t, p) in pools.iter().enumerate() {
            v.push((format!("{}/{}t", tier.name(), t + 1), Ctx { level, tier, pool: Some(p) }));
        }
    }
    v
}

fn benches(c: &mut Criterion) {
    let _g = FtzGuard::new();
    let pools = [worker_pool(1).unwrap(), worker_pool(2).unwrap()];
    let a = data(N, 1);
    let b = data(N, 2);
    let mut out = vec![0.0f32; N];

    let mut g = c.benchmark_group("add_16M");
    g.sample_size(10).throughput(Throughput::Bytes((N * 12) as u64));
    g.bench_function("reference", |bn| {
        bn.iter(|| r::binary(Binary::Add, &a, &[N], &b, &[N], &mut out, &[N]))
    });
    for (name, ctx) in configs(&pools) {
        g.bench_function(BenchmarkId::from_parameter(name), |bn| {
            bn.iter(|| simd::binary(&ctx, Binary::Add, black_box(&a), &[N], &b, &[N], &mut out, &[N]))
        });
    }
    g.finish();

    for op in [Unary::Exp, Unary::Tanh, Unary::Gelu] {
        let mut g = c.benchmark_group(format!("{op:?}_16M").to_lowercase());
        g.sample_size(10).throughput(Throughput::Elements(N as u64));
        if op == Unary::Exp {
            g.bench_function("reference", |bn| bn.iter(|| r::unary(op, black_box(&a), &mut out)));
        }
        for (name, ctx) in configs(&pools) {
            g.bench_function(BenchmarkId::from_parameter(name), |bn| {
                bn.iter(|| simd::unary(&ctx, op, black_box(&a), &mut out))
            });
        }
        g.finish();
    }

    let (rows, cols) = (4096, 4096);
    let mut g = c.benchmark_group("softmax_4096x4096");
    g.sample_size(10).throughput(Throughput::Elements((rows * cols) as u64));
    for (name, ctx) in configs(&pools) {
        g.bench_function(BenchmarkId::from_parameter(name), |bn| {
            bn.iter(|| {
                simd::softmax(&ctx, black_box(&a[..rows * cols]), &[rows, cols], None, 0.125, &mut out)
            })
        });
    }
    g.finish();

    let (rows, cols) = (4096, 1024);
    let (gamma, beta) = (&b[..cols], &b[cols..2 * cols]);
    let mut g = c.benchmark_group("layernorm_4096x1024");
    g.sample_size(10).throughput(Throughput::Elements((rows * cols) as u64));
    for (name, ctx) in configs(&pools) {
        g.bench_function(BenchmarkId::from_parameter(name), |bn| {
            bn.iter(|| {
                simd::layernorm(
                    &ctx,
                    black_box(&a[..rows * cols]),
                    cols,
                    Some(gamma),
                    Some(beta),
                    1e-5,
                    &mut out[..rows * cols],
                )
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("rmsnorm_4096x1024");
    g.sample_size(10).throughput(Throughput::Elements((rows * cols) as u64));
    for (name, ctx) in configs(&pools) {
        g.bench_function(BenchmarkId::from_parameter(name), |bn| {
            bn.iter(|| {
                simd::rmsnorm(
                    &ctx,
                    black_box(&a[..rows * cols]),
                    cols,
                    Some(gamma),
                    1e-5,
                    &mut out[..rows * cols],
                )
            })
        });
    }
    g.finish();

    // Rows (the contiguous axis, one tree per output) and columns (strided, one output per lane).
    for (axis, outs) in [(1, rows), (0, cols)] {
        let mut g = c.benchmark_group(format!("reduce_sum_4096x1024_axis{axis}"));
        g.sample_size(10).throughput(Throughput::Elements((rows * cols) as u64));
        for (name, ctx) in configs(&pools) {
            g.bench_function(BenchmarkId::from_parameter(name), |bn| {
                bn.iter(|| {
                    simd::reduce(
                        &ctx,
                        Reduce::Sum,
                        black_box(&a[..rows * cols]),
                        &[rows, cols],
                        axis,
                        &mut out[..outs],
                    )
                })
            });
        }
        g.finish();
    }
}

criterion_group! {
    name = elementwise;
    config = Criterion::default().warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = benches
}
criterion_main!(elementwise);
