// The chain workload in Rust (built with -C force-frame-pointers=no):
// main -> chain_a -> chain_b -> chain_c, where chain_c spins. Runs
// argv[1] seconds. Volatile reads and writes keep the optimizer from
// folding the chain (std::hint::black_box needs Rust 1.66; Debian 12
// ships 1.63).
use std::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};
use std::time::{Duration, Instant};

static mut SINK: u64 = 1;

fn load() -> u64 {
    unsafe { read_volatile(addr_of!(SINK)) }
}

fn store(v: u64) {
    unsafe { write_volatile(addr_of_mut!(SINK), v) }
}

#[inline(never)]
fn chain_c(n: u64) -> u64 {
    let mut acc = load();
    for i in 0..n {
        acc = acc.wrapping_mul(6364136223846793005).wrapping_add(i);
        if i & 0xfff == 0 {
            store(acc);
        }
    }
    acc
}

#[inline(never)]
fn chain_b(n: u64) -> u64 {
    let v = chain_c(n);
    store(v);
    v ^ load()
}

#[inline(never)]
fn chain_a(n: u64) -> u64 {
    let v = chain_b(n);
    store(v);
    v ^ load()
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let v = chain_a(2_000_000);
        store(v);
    }
}
