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

/// The usage of every bench, printed by `cargo xtask bench --help`.
const HELP: &str = "\
Benches (not tests: nothing in them is asserted).

Usage:
  cargo xtask bench <store> [--json]
      The claim bench of crates/anarchon-<store> (cargo bench --bench claim).
  cargo xtask bench scale --store redis|postgres|sqlite|libsql [--jobs N] [--instances K]
                          [--seconds S] [--ceiling-seconds C] [--json] [--keep]
      K scheduler processes (examples/bench-node.rs, release) with N `every 1s` jobs each on
      a fresh namespace of the store for S seconds, beside the store's own ceiling for
      batches of 256 writes measured in the same run (defaults 1000, 3, 60).
  cargo xtask bench precision [--store sqlite,redis,postgres,libsql] [--seconds S]
                              [--instances K] [--json] [--keep]
      Start lag of one `every 1s` job on K instances (3) per store for S seconds (30),
      beside the p99 of the store's bare one-row operation.
  cargo xtask bench handover [--store sqlite,redis,postgres] [--rounds N] [--every-ms MS]
                             [--hold-ms MS] [--keep]
      3 scheduler processes share one long job; each round sends SIGTERM to attempt 1's
      owner and times signal -> attempt 2 started on another process (20 rounds).
  cargo xtask bench driver [--jobs N] [--seconds S] [--jitter-ms J] [--history-size H]
      The scheduler alone: one process, N `every 1s` jobs (10,000) on the in-memory store.

docs/performance.md explains what each prints.
";

/// `cargo xtask bench`: its arguments are read by the bench named first (each checks its
/// own options and names the one it does not know); `--help` prints every bench's usage.
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
pub(crate) struct Args {
    /// `<store> [--json]`, or `scale|precision|handover|driver [options]`; --help for all.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

pub(crate) fn run(Args { args }: Args) -> Result<ExitCode> {
    if args.is_empty() || args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return Ok(ExitCode::SUCCESS);
    }
    let args = &args[..];
    match args.first().map(String::as_str) {
        Some("driver") => driver::run(&args[1..]),
        Some("scale") => scale::run(&args[1..]),
        Some("precision") => precision::run(&args[1..]),
        Some("handover") => handover::run(&args[1..]),
        _ => claim::run(args),
    }
}
