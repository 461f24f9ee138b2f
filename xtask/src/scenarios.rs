//! `cargo xtask scenarios`: the failure scenarios of docs/scenarios.md, with real processes.
//!
//! Runs `cargo test -p anarchon --test scenarios --test resilience -- --nocapture` with the
//! test servers' URLs and `ANARCHON_SLOW=1`; `--fast` also sets `ANARCHON_SCENARIOS_FAST=1`, which the scenarios
//! read to run the short subset CI runs.

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::util;

pub(crate) fn run(args: &[String]) -> Result<ExitCode> {
    let mut fast = false;
    for arg in args {
        match arg.as_str() {
            "--fast" => fast = true,
            other => bail!("scenarios: unknown option `{other}` (expected --fast)"),
        }
    }
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
    // RabbitMQ and NATS) are compiled only with their store features.
    command.args([
        "test",
        "-p",
        "anarchon",
        "--features",
        "redis,postgres,amqp,nats",
        "--test",
        "scenarios",
        "--test",
        "resilience",
        "--",
        "--nocapture",
    ]);
    Ok(util::exit_code(util::run_visible(&mut command)?))
}
