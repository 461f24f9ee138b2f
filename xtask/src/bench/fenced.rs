//! `cargo xtask bench fenced`: what a fenced transaction costs beside a plain transaction
//! doing the same insert, in the same run, on SQLite (always) and PostgreSQL (when the test
//! servers' env file or the environment names one). Runs the stores' own examples in release:
//! `anarchon-sqlite`'s `sqlite-fenced-cost` and `anarchon-postgres`'s `postgres-fenced-cost`.

use std::process::ExitCode;

use anyhow::Result;

use crate::util;

/// `cargo xtask bench fenced`: fenced against plain transactions on SQLite and PostgreSQL.
#[derive(clap::Args, Debug)]
pub(crate) struct Opts {
    /// Transactions of each kind (the examples' defaults when left out).
    #[arg(long, value_name = "N")]
    transactions: Option<u32>,
}

pub(crate) fn run(opts: Opts) -> Result<ExitCode> {
    let count = opts.transactions.map(|n| n.to_string());
    let mut sqlite = super::node::release_cargo();
    sqlite.args([
        "run",
        "--quiet",
        "--release",
        "-p",
        "anarchon-sqlite",
        "--example",
        "sqlite-fenced-cost",
    ]);
    if let Some(n) = &count {
        sqlite.args(["--", n]);
    }
    println!("== SQLite: fenced against plain transactions");
    let status = util::run_visible(&mut sqlite)?;
    if !status.success() {
        return Ok(util::exit_code(status));
    }
    let url = std::env::var("ANARCHON_POSTGRES_URL").ok().or_else(|| {
        util::read_env_file()
            .into_iter()
            .find(|(k, _)| k == "ANARCHON_POSTGRES_URL")
            .map(|(_, v)| v)
    });
    let Some(url) = url else {
        println!(
            "== PostgreSQL: skipped (no ANARCHON_POSTGRES_URL; `cargo xtask test-servers` \
             writes one)"
        );
        return Ok(ExitCode::SUCCESS);
    };
    let mut postgres = super::node::release_cargo();
    postgres.args([
        "run",
        "--quiet",
        "--release",
        "-p",
        "anarchon-postgres",
        "--example",
        "postgres-fenced-cost",
        "--",
        &url,
    ]);
    if let Some(n) = &count {
        postgres.arg(n);
    }
    println!("== PostgreSQL: fenced against plain transactions");
    Ok(util::exit_code(util::run_visible(&mut postgres)?))
}
