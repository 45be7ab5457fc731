// rust.rs: a hot loop three calls deep in a module, built twice by the
// tests, with legacy and with v0 symbol mangling: gprofile must show
// rustwork::hot::outer;rustwork::hot::mid;rustwork::hot::spin, without
// hashes. Runs argv[1] seconds (a float).
use std::hint::black_box;
use std::time::{Duration, Instant};

mod hot {
    use std::hint::black_box;

    #[inline(never)]
    pub fn spin(n: u64) -> u64 {
        let mut acc = black_box(1u64);
        for i in 0..n {
            acc = black_box(acc.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        acc
    }

    #[inline(never)]
    pub fn mid(n: u64) -> u64 {
        black_box(spin(n)) ^ 3
    }

    #[inline(never)]
    pub fn outer(n: u64) -> u64 {
        black_box(mid(n)) ^ 5
    }
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut sink = 0u64;
    while Instant::now() < end {
        sink ^= hot::outer(black_box(2_000_000));
    }
    black_box(sink);
}
