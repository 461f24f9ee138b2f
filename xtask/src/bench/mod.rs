//! `cargo xtask bench`: a store's claim micro-bench (`bench <store>`), the scale,
//! start-precision and graceful-handover benches (`bench scale`, `bench precision`,
//! `bench handover`) that run real scheduler processes (`examples/bench-node.rs`, built in
//! release) against a store, and the driver bench (`bench driver`): the scheduler alone on the
//! in-memory store; and the fenced-transaction bench (`bench fenced`).

mod claim;
mod driver;
mod fenced;
mod handover;
mod hold;
mod node;
mod precision;
mod scale;
mod session;
mod slow;
mod stats;

use std::process::ExitCode;

use anyhow::Result;

/// `cargo xtask bench <store> [--json]`, or one of the process benches.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct Args {
    #[command(subcommand)]
    kind: Option<Kind>,
    /// The claim bench of `crates/anarchon-<STORE>` (`cargo bench --bench claim`): sqlite,
    /// libsql, postgres, redis, amqp, nats.
    #[arg(required = true)]
    store: Option<String>,
    /// The claim bench's JSON object only, on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Subcommand, Debug)]
enum Kind {
    /// K scheduler processes (examples/bench-node.rs, release) with N `every 1s` jobs each on
    /// a fresh namespace of the store for S seconds, beside the store's own ceiling.
    Scale(scale::Opts),
    /// Start lag of one `every 1s` job on K instances per store, beside the p99 of the
    /// store's bare one-row operation.
    Precision(precision::Opts),
    /// SIGTERM to attempt 1's owner, timed until attempt 2 runs on another process.
    Handover(handover::Opts),
    /// The scheduler alone: one process, N `every 1s` jobs on the in-memory store.
    Driver(driver::Opts),
    /// A fenced transaction (exactly-once writes) beside a plain one, SQLite and PostgreSQL.
    Fenced(fenced::Opts),
}

pub(crate) fn run(args: Args) -> Result<ExitCode> {
    match (args.kind, args.store) {
        (Some(Kind::Scale(opts)), _) => scale::run(opts),
        (Some(Kind::Precision(opts)), _) => precision::run(opts),
        (Some(Kind::Handover(opts)), _) => handover::run(opts),
        (Some(Kind::Driver(opts)), _) => driver::run(opts),
        (Some(Kind::Fenced(opts)), _) => fenced::run(opts),
        (None, Some(store)) => claim::run(&store, args.json),
        (None, None) => anyhow::bail!(
            "bench: which store? `cargo xtask bench <store>`, e.g. `cargo xtask bench redis`"
        ),
    }
}

/// Parses one command's arguments (without `cargo xtask <command>`), for the unit tests.
#[cfg(test)]
pub(crate) fn parse_with<T: clap::Args>(args: &[String]) -> Result<T> {
    use clap::Parser;
    #[derive(Parser)]
    #[command(name = "bench", no_binary_name = true)]
    struct One<T: clap::Args> {
        #[command(flatten)]
        opts: T,
    }
    One::<T>::try_parse_from(args)
        .map(|one| one.opts)
        .map_err(|e| anyhow::anyhow!("{}", e.render()))
}
