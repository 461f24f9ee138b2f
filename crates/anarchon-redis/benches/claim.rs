//! Claim benchmark (written below).
fn main() {}
