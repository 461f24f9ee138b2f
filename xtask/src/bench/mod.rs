//! `cargo xtask bench`: a store's claim micro-bench (`bench <store>`), the scale,
//! start-precision and graceful-handover benches (`bench scale`, `bench precision`,
//! `bench handover`) that run real scheduler processes (`examples/bench-node.rs`, built in
//! release) against a store, and the driver bench (`bench driver`): the scheduler alone on the
//! in-memory store.

mod claim;
mod driver;
mod handover;
mod node;
mod precision;
mod scale;
mod session;
mod stats;

use std::process::ExitCode;

use anyhow::Result;

pub(crate) fn run(args: &[String]) -> Result<ExitCode> {
    match args.first().map(String::as_str) {
        Some("driver") => driver::run(&args[1..]),
        Some("scale") => scale::run(&args[1..]),
        Some("precision") => precision::run(&args[1..]),
        Some("handover") => handover::run(&args[1..]),
        _ => claim::run(args),
    }
}
