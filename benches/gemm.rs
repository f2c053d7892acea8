//! GEMM throughput: strict (mul+add chain) and fast (FMA) tiers, square sizes, 1 and 2 threads.
//! Criterion reports elements/s with 2·m·n·k elements per iteration, i.e. FLOP/s.

use adeadvm::exec::cpu::fpenv::FtzGuard;
use adeadvm::exec::cpu::gemm::gemm;
use adeadvm::exec::cpu::{worker_pool, Ctx, SimdLevel};
use adeadvm::isa::Tier;
use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};

fn data(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32 / 16_777_216.0 - 0.5)
        .collect()
}

fn bench(cr: &mut Criterion) {
    let _ftz = FtzGuard::new();
    let level = SimdLevel::from_env();
    let pool2 = worker_pool(2).unwrap();
    for tier in [Tier::Strict, Tier::Fast] {
        let mut g = cr.benchmark_group(format!("gemm_{}", tier.name()));
        g.sample_size(10);
        for n in [256usize, 512, 1024] {
            let (a, b) = (data(n * n, 1), data(n * n, 2));
            let mut c = vec![0.0f32; n * n];
            g.throughput(Throughput::Elements((2 * n * n * n) as u64));
            for (threads, pool) in [(1, None), (2, Some(&pool2))] {
                let ctx = Ctx { level, tier, pool };
                g.bench_with_input(BenchmarkId::new(format!("t{threads}"), n), &n, |bch, &n| {
                    bch.iter(|| gemm(&ctx, n, n, n, &a, n, 1, &b, n, 1, &mut c))
                });
            }
        }
        g.finish();
    }
}

/// `GEMM_QUICK=1 cargo bench --bench gemm`: best-of-N GFLOP/s table (the same method as a
/// best-of-N numpy timing), instead of criterion's statistics. Useful on a loaded machine.
fn quick() {
    let _ftz = FtzGuard::new();
    let level = SimdLevel::from_env();
    let pool2 = worker_pool(2).unwrap();
    for n in [256usize, 512, 1024] {
        let (a, b) = (data(n * n, 1), data(n * n, 2));
        let mut c = vec![0.0f32; n * n];
        let mut row = format!("n={n:5}");
        for tier in [Tier::Strict, Tier::Fast] {
            for (threads, pool) in [(1, None), (2, Some(&pool2))] {
                let ctx = Ctx { level, tier, pool };
                let flops = 2.0 * (n * n * n) as f64;
                let reps = (2e9 / flops).ceil() as usize;
                let mut best = f64::MAX;
                for _ in 0..7 {
                    let t = std::time::Instant::now();
                    for _ in 0..reps {
                        gemm(&ctx, n, n, n, &a, n, 1, &b, n, 1, &mut c);
                    }
                    best = best.min(t.elapsed().as_secs_f64() / reps as f64);
                }
                row += &format!("  {} t{threads}: {:6.1}", tier.name(), flops / best / 1e9);
            }
        }
        println!("{row}  GFLOP/s");
    }
}

criterion_group!(benches, bench);

fn main() {
    if std::env::var_os("GEMM_QUICK").is_some() {
        quick();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
