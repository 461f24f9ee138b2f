//! The simulator's fixed CI seeds: every one must break no invariant.
//!
//! `ANARCHON_SIM_SEEDS=N` runs N seeds instead of the default set (`ANARCHON_SIM_HOURS` sets
//! the hours of each). A failure prints the seed, the invariant and the slot's timeline;
//! replay it with `cargo xtask simulate --seed S --hours H --nodes N`.

use anarchon_sim::{SimConfig, run_many};

/// Seeds 1..=SEEDS, HOURS each, on NODES instances: about 43 cluster-hours in 54 s of one
/// core in debug (docs/testing.md, "Deterministic simulation").
const SEEDS: u64 = 36;
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
    let template = SimConfig::new(1, NODES, hours);
    let summary = run_many(&template, 1, seeds, |seed, outcome| {
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
