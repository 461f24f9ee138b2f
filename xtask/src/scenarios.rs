//! `cargo xtask scenarios`: the failure scenarios of docs/scenarios.md, with real processes.
//!
//! Runs `cargo test --workspace --all-features --test scenarios --test resilience --test
//! exactly_once -- --ignored --skip child_node --nocapture` (the exactly-once runs print one
//! `EXACTLY-ONCE store=…` line per store) with the test servers' URLs and `ANARCHON_SLOW=1`; `--fast` also sets `ANARCHON_SCENARIOS_FAST=1`, which the scenarios
//! read to run the short subset CI runs.

use std::process::ExitCode;

use anyhow::Result;

use crate::util;

/// `cargo xtask scenarios`: the failure scenarios, with real processes and signals.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The short timings CI uses (ANARCHON_SCENARIOS_FAST=1).
    #[arg(long)]
    fast: bool,
}

pub(crate) fn run(Args { fast }: Args) -> Result<ExitCode> {
    let tests = util::project_root().join("tests");
    if !tests.join("scenarios.rs").is_file() && !tests.join("scenarios").join("main.rs").is_file() {
        println!(
            "scenarios: no scenarios yet (tests/scenarios.rs does not exist in the anarchon \
             package); nothing to run"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut command = util::cargo();
    util::apply_env_file(&mut command);
    command.env("ANARCHON_SLOW", "1");
    if fast {
        command.env("ANARCHON_SCENARIOS_FAST", "1");
    }
    // The Redis and PostgreSQL scenarios (and the naive column, on Redis `stream-id`,
    // RabbitMQ and NATS) are compiled only with their store features: every feature, as
    // `cargo xtask test` and clippy build, so no step rebuilds the workspace. The scenarios
    // are #[ignore]d (slow suite) and run here by asking for the ignored tests.
    command.args([
        "test",
        "--workspace",
        "--all-features",
        "--test",
        "scenarios",
        "--test",
        "resilience",
        "--test",
        "exactly_once",
        "--",
        "--ignored",
        "--skip",
        "child_node",
        "--nocapture",
    ]);
    Ok(util::exit_code(util::run_visible(&mut command)?))
}
