// chain.rs is a small Rust program built at test time with
// -C force-frame-pointers=no, so its .eh_frame can be compared with readelf.
// It keeps to Rust 1.63 (Debian 12's rustc).
#[inline(never)]
fn leaf(v: &mut Vec<u64>, n: u64) -> u64 {
    v.push(n);
    v.iter().fold(0, |a, b| a.wrapping_mul(31).wrapping_add(*b))
}

#[inline(never)]
fn middle(n: u64) -> u64 {
    let mut v = Vec::new();
    let mut s = 0;
    for i in 0..n {
        s ^= leaf(&mut v, i);
    }
    s
}

fn main() {
    let n = std::env::args().count() as u64 * 100; // not a constant the compiler can fold
    let r = std::panic::catch_unwind(|| middle(n));
    println!("{:?}", r.is_ok());
}
