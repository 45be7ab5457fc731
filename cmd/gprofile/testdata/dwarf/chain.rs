// The chain workload in Rust (built with -C force-frame-pointers=no):
// main -> chain_a -> chain_b -> chain_c, where chain_c spins. Runs
// argv[1] seconds.
use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn chain_c(n: u64) -> u64 {
    let mut acc = black_box(1u64);
    for i in 0..n {
        acc = black_box(acc.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    acc
}

#[inline(never)]
fn chain_b(n: u64) -> u64 {
    black_box(chain_c(n)) ^ 3
}

#[inline(never)]
fn chain_a(n: u64) -> u64 {
    black_box(chain_b(n)) ^ 5
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut sink = 0u64;
    while Instant::now() < end {
        sink ^= chain_a(black_box(2_000_000));
    }
    black_box(sink);
}
