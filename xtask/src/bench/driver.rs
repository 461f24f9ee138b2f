//! `cargo xtask bench driver`: the scheduler alone (the in-memory store, one process), so the
//! driver's own ceiling, CPU and memory per job read apart from any store's round trips.
//! Builds `examples/bench-driver.rs` in release and runs it with the arguments given.

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::util;

const USAGE: &str = "bench driver [--jobs N] [--seconds S] [--jitter-ms J] [--history-size H]";

pub(crate) fn run(args: &[String]) -> Result<ExitCode> {
    for pair in args.chunks(2) {
        match pair {
            [name, value]
                if ["--jobs", "--seconds", "--jitter-ms", "--history-size"]
                    .contains(&name.as_str())
                    && value.parse::<u64>().is_ok() => {}
            _ => bail!("bench driver: unexpected `{}` ({USAGE})", pair.join(" ")),
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
    run.args(args);
    Ok(util::exit_code(util::run_visible(&mut run)?))
}
