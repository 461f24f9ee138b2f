//! Claim benchmark (written in a later commit).

fn main() {}
