//! `cargo xtask`: project tasks (test servers, tests, scenarios, benches).
//!
//! Run `cargo xtask help` (or `cargo xtask <command> --help`) for the list and each
//! command's options; the arguments are parsed with clap's derive. Every subcommand lives in
//! its own module; the shared
//! helpers (paths, processes, the env file) are in `util`, the wire-level server checks in
//! `probe`.

mod bench;
mod chaos;
mod install;
mod probe;
mod scenarios;
mod simulate;
mod test;
mod test_servers;
#[cfg(test)]
mod tidy;
mod util;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// Project tasks for anarchon: test servers, tests, scenarios, chaos, the simulator, benches.
#[derive(Parser, Debug)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Option<Task>,
}

#[derive(Subcommand, Debug)]
enum Task {
    /// Bring up the servers the tests use and write their URLs to target/test-servers/env.
    ///
    /// Redis 7, Valkey, PostgreSQL, and where their binaries exist Redis >= 8.6 and sqld;
    /// --brokers adds RabbitMQ and NATS JetStream. Reuses servers already listening, uses
    /// Docker Compose where an engine answers (unless --local).
    TestServers(test_servers::Args),
    /// Run the workspace tests (doctests, then cargo-nextest) with the test servers' URLs.
    ///
    /// Ends with the true counts (`tests: N passed, N failed, N skipped`) and every skipped
    /// test's reason.
    Test(test::Args),
    /// Run the failure scenarios (docs/scenarios.md) against the test servers, and the
    /// outage, clock-skew and crowd scenarios on servers they start themselves.
    Scenarios(scenarios::Args),
    /// Random SIGKILL/SIGSTOP/SIGTERM (and store server crashes on Redis/PostgreSQL)
    /// against N instances for S seconds; exits non-zero on any violation and prints the
    /// seed to replay it.
    Chaos(chaos::Args),
    /// The deterministic simulator (crates/anarchon-sim, release); every argument goes to it
    /// (`cargo xtask simulate --help` prints its options).
    Simulate(simulate::Args),
    /// Benches: a store's claim bench, and the scale, precision, handover and driver benches.
    Bench(bench::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Task::TestServers(args)) => test_servers::run(args),
        Some(Task::Test(args)) => test::run(args),
        Some(Task::Scenarios(args)) => scenarios::run(args),
        Some(Task::Chaos(args)) => chaos::run(args),
        Some(Task::Bench(args)) => bench::run(args),
        Some(Task::Simulate(args)) => simulate::run(args),
        None => {
            let _ = Cli::command().print_help();
            Ok(ExitCode::SUCCESS)
        }
    };
    result.unwrap_or_else(|error| {
        eprintln!("xtask: error: {error:#}");
        ExitCode::FAILURE
    })
}
