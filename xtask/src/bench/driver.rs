//! `cargo xtask bench driver`: the scheduler alone (the in-memory store, one process), so the
//! driver's own ceiling, CPU and memory per job read apart from any store's round trips.
//! Builds `examples/bench-driver.rs` in release and runs it with the arguments given.

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::util;

/// `cargo xtask bench driver`: the scheduler alone, N `every 1s` jobs on the in-memory store.
#[derive(clap::Args, Debug)]
pub(crate) struct Opts {
    /// Jobs (the bench's default: 10000).
    #[arg(long, value_name = "N")]
    jobs: Option<u64>,
    /// How long it runs (the bench's default).
    #[arg(long, value_name = "S")]
    seconds: Option<u64>,
    /// Jitter of each job, in ms.
    #[arg(long, value_name = "J")]
    jitter_ms: Option<u64>,
    /// History kept per job.
    #[arg(long, value_name = "H")]
    history_size: Option<u64>,
}

pub(crate) fn run(opts: Opts) -> Result<ExitCode> {
    let mut args: Vec<String> = Vec::new();
    for (name, value) in [
        ("--jobs", opts.jobs),
        ("--seconds", opts.seconds),
        ("--jitter-ms", opts.jitter_ms),
        ("--history-size", opts.history_size),
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
