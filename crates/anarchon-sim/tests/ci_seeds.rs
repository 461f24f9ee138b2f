//! The simulator's fixed CI seeds: every one must break no invariant.
//!
//! `ANARCHON_SIM_SEEDS=N` runs N seeds instead of the default set (`ANARCHON_SIM_HOURS` sets
//! the hours of each, `ANARCHON_SIM_THREADS` the threads, default: the cores, at most 4). A
//! failure prints the seed, the invariant and the slot's timeline; replay it with
//! `cargo xtask simulate --seed S --hours H --nodes N`, shrink it with `--shrink`.

use anarchon_sim::{SimConfig, run_parallel};

/// Seeds 1..=SEEDS, HOURS each (then a quiet and an idle end of about 11 minutes), on NODES
/// instances: 200 hours under faults, about 238 cluster-hours (docs/testing.md,
/// "Deterministic simulation", has the time it takes).
const SEEDS: u64 = 200;
const HOURS: f64 = 1.0;
const NODES: usize = 3;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn the_ci_seeds_break_no_invariant() {
    let seeds = env_or("ANARCHON_SIM_SEEDS", SEEDS);
    let hours = env_or("ANARCHON_SIM_HOURS", HOURS);
    let threads = env_or(
        "ANARCHON_SIM_THREADS",
        std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
    );
    let template = SimConfig::new(1, NODES, hours);
    let summary = run_parallel(&template, 1, seeds, threads, |seed, outcome| {
        if let Err(message) = outcome {
            eprintln!("seed {seed}: {message}");
        }
    });
    println!("{}", summary.render());
    assert!(
        summary.violations.is_empty(),
        "violations (replay with `cargo xtask simulate --seed S --hours {hours} --nodes \
         {NODES}`): {:#?}",
        summary.violations
    );
}
