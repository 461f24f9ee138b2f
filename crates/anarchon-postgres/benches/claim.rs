//! Claim throughput and latency of the PostgreSQL store (written in the next commit).

fn main() {}
