//! `cargo xtask bench driver`: the scheduler alone (the in-memory store, one process), so the
//! driver's own ceiling, CPU and memory per job read apart from any store's round trips.
//! Builds `examples/bench-driver.rs` in release and runs it with the arguments given.

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::util;

/// `cargo xtask bench driver`: the scheduler alone, N `every 1s` jobs on the in-memory store.
#[derive(clap::Args, Debug)]
pub(crate) struct Opts {
    /// Jobs (1 to 1,000,000; the bench's default: 10000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    jobs: Option<u64>,
    /// How long it runs (10 s to a day; the bench's default: 60).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(10..=86_400))]
    seconds: Option<u64>,
    /// Jitter of each job, in ms (at most an hour).
    #[arg(long, value_name = "J", value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    jitter_ms: Option<u64>,
    /// History kept per job (1 to 100,000).
    #[arg(long, value_name = "H", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    history_size: Option<u64>,
    /// Each handler holds its run this long (at most an hour): above the 1 s interval every
    /// job keeps one run in flight, and the table shows the memory per run in flight.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    hold_ms: Option<u64>,
    /// With `--hold-ms`: how long the handlers first run without holding, so the memory per
    /// run in flight also reads above the same jobs running (10 s to an hour; default 20).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(10..=3_600))]
    baseline_seconds: Option<u64>,
}

pub(crate) fn run(opts: Opts) -> Result<ExitCode> {
    let mut args: Vec<String> = Vec::new();
    for (name, value) in [
        ("--jobs", opts.jobs),
        ("--seconds", opts.seconds),
        ("--jitter-ms", opts.jitter_ms),
        ("--history-size", opts.history_size),
        ("--hold-ms", opts.hold_ms),
        ("--baseline-seconds", opts.baseline_seconds),
    ] {
        if let Some(value) = value {
            args.extend([name.to_owned(), value.to_string()]);
        }
    }
    let mut build = super::node::release_cargo();
    build.args(["build", "--release", "--example", "bench-driver"]);
    if !util::run_visible(&mut build)?.success() {
        bail!("building the driver bench failed");
    }
    let mut run = super::node::release_cargo();
    run.args([
        "run",
        "--quiet",
        "--release",
        "--example",
        "bench-driver",
        "--",
    ]);
    run.args(&args);
    Ok(util::exit_code(util::run_visible(&mut run)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_options_out_of_range_are_named() {
        for (bad, named) in [
            (vec!["--jobs", "0"], "--jobs"),
            (vec!["--jobs", "18446744073709551615"], "--jobs"),
            (vec!["--seconds", "9"], "--seconds"),
            (vec!["--seconds", "86401"], "--seconds"),
            (vec!["--jitter-ms", "3600001"], "--jitter-ms"),
            (vec!["--history-size", "0"], "--history-size"),
            (vec!["--hold-ms", "18446744073709551615"], "--hold-ms"),
            (vec!["--baseline-seconds", "9"], "--baseline-seconds"),
            (vec!["--baseline-seconds", "3601"], "--baseline-seconds"),
        ] {
            let args: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
            let err = super::super::parse_with::<Opts>(&args)
                .unwrap_err()
                .to_string();
            assert!(err.contains(named), "{bad:?}: {err}");
        }
        let args: Vec<String> = ["--jobs", "1000000", "--hold-ms", "5000"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let o = super::super::parse_with::<Opts>(&args).unwrap();
        assert_eq!((o.jobs, o.hold_ms), (Some(1_000_000), Some(5_000)));
    }
}
