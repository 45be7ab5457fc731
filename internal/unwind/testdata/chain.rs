// chain.rs is a small Rust program built at test time with
// -C force-frame-pointers=no, so its .eh_frame can be compared with readelf.
use std::hint::black_box;

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
        s ^= leaf(&mut v, black_box(i));
    }
    s
}

fn main() {
    let r = std::panic::catch_unwind(|| middle(black_box(100)));
    println!("{:?}", r.is_ok());
}
