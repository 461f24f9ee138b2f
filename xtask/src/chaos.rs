//! `cargo xtask chaos`: the chaos test (`tests/chaos.rs`) on one store, with real processes,
//! real signals and, on Redis and PostgreSQL, crashes of a store server it starts itself.
//!
//! Runs `cargo test --workspace --all-features --test chaos -- --ignored --nocapture` with
//! `ANARCHON_SLOW=1` and the run's settings in `ANARCHON_CHAOS_*`. The test exits non-zero on
//! any violation and prints the seed, so a failure can be replayed.

use std::process::ExitCode;

use anyhow::Result;

use crate::util;

/// `cargo xtask chaos`: the chaos test on one store.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The store under test (Redis and PostgreSQL on a server the test starts and crashes).
    #[arg(long, default_value = "sqlite", value_parser = ["sqlite", "redis", "postgres"])]
    store: String,
    /// Scheduler processes (1 to 32).
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u64).range(1..=32))]
    instances: u64,
    /// How long the chaos lasts (1 s to a day).
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    seconds: u64,
    /// The seed of the plan (the default is fixed, so runs replay); a failure prints it.
    #[arg(long)]
    seed: Option<u64>,
}

pub(crate) fn run(args: Args) -> Result<ExitCode> {
    let Args {
        store,
        instances,
        seconds,
        seed,
    } = args;
    let (instances, seconds) = (instances.to_string(), seconds.to_string());
    let mut command = util::cargo();
    util::apply_env_file(&mut command);
    command
        .env("ANARCHON_SLOW", "1")
        .env("ANARCHON_CHAOS_STORE", &store)
        .env("ANARCHON_CHAOS_INSTANCES", &instances)
        .env("ANARCHON_CHAOS_SECONDS", &seconds);
    if let Some(seed) = seed {
        command.env("ANARCHON_CHAOS_SEED", seed.to_string());
    }
    // Every feature, as the other steps build (no rebuild); the chaos test is #[ignore]d
    // (slow suite) and run here by asking for the ignored tests.
    command.args([
        "test",
        "--workspace",
        "--all-features",
        "--test",
        "chaos",
        "--",
        "--ignored",
        "--skip",
        "child_node",
        "--nocapture",
    ]);
    Ok(util::exit_code(util::run_visible(&mut command)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(list: &[&str]) -> Result<Args, String> {
        let args: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        crate::bench::parse_with::<Args>(&args).map_err(|e| e.to_string())
    }

    #[test]
    fn chaos_options_parse_with_defaults() {
        let a = parse(&[]).unwrap();
        assert_eq!(
            (a.store.as_str(), a.instances, a.seconds),
            ("sqlite", 7, 90)
        );
        let a = parse(&["--instances", "32", "--seconds", "86400"]).unwrap();
        assert_eq!((a.instances, a.seconds), (32, 86_400));
    }

    #[test]
    fn chaos_options_out_of_range_are_named() {
        for (bad, named) in [
            (vec!["--instances", "0"], "--instances"),
            (vec!["--instances", "33"], "--instances"),
            (vec!["--instances", "18446744073709551615"], "--instances"),
            (vec!["--seconds", "0"], "--seconds"),
            (vec!["--seconds", "86401"], "--seconds"),
            (vec!["--store", "mysql"], "mysql"),
        ] {
            let err = parse(&bad).unwrap_err();
            assert!(err.contains(named), "{bad:?}: {err}");
        }
    }
}
