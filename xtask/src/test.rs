//! `cargo xtask test`: the workspace tests against the servers `test-servers` found.
//!
//! Reads `target/test-servers/env` into the tests' environment, runs `cargo nextest run
//! --workspace --all-features` where cargo-nextest is installed (and `cargo test --doc
//! --workspace --all-features` first, since nextest does not run doctests), else `cargo test
//! --workspace --all-features`, and ends with which
//! server-backed suites ran and which were skipped. The exit code is the test runner's.

use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Result, bail};

use crate::{test_servers, util};

pub(crate) fn run(args: &[String]) -> Result<ExitCode> {
    // `ANARCHON_SLOW=1 cargo xtask test` is the same as `--slow` (CI runs the README's command so).
    let mut slow = std::env::var("ANARCHON_SLOW").is_ok_and(|v| v == "1");
    let mut extra: Vec<String> = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--slow" => slow = true,
            "--" => extra.extend(args.by_ref().cloned()),
            other => bail!("test: unknown option `{other}` (expected --slow, or -- <runner args>)"),
        }
    }

    let begun = Instant::now();
    let nextest = util::succeeds(util::cargo().args(["nextest", "--version"]));
    let mut status = None;
    let mut effective = Vec::new();

    if nextest && extra.is_empty() {
        // Doctests first, so that nextest's summary is the last word of the run.
        let mut doc = prepared(slow, &mut effective);
        doc.args(["test", "--doc", "--workspace", "--all-features"]);
        let doc_status = util::run_visible(&mut doc)?;
        if !doc_status.success() {
            status = Some(doc_status);
        }
    } else if nextest {
        eprintln!(
            "test: extra runner arguments given; doctests skipped (cargo test --doc --workspace runs them)"
        );
    }

    let mut main = prepared(slow, &mut effective);
    // Run every test even after a failure, so one run shows all that is broken.
    if nextest {
        main.args(["nextest", "run", "--no-tests=warn", "--no-fail-fast"]);
    } else {
        main.args(["test", "--no-fail-fast"]);
    }
    // `--workspace` would override a `-p <crate>` given after `--`.
    let picks_packages = extra.iter().take_while(|arg| *arg != "--").any(|arg| {
        arg == "-p" || arg.starts_with("--package") || (arg.starts_with("-p") && arg.len() > 2)
    });
    if !picks_packages {
        main.arg("--workspace");
    }
    // Every feature (each store, `metrics`, the kit): what clippy checks is what runs.
    if !extra
        .iter()
        .any(|a| a == "--all-features" || a.starts_with("--features") || a == "-F")
    {
        main.arg("--all-features");
    }
    main.args(&extra);
    let main_status = util::run_visible(&mut main)?;
    let status = status
        .filter(|_| main_status.success())
        .unwrap_or(main_status);

    summary(&effective, slow);
    eprintln!(
        "test: {} in {} (exit code {})",
        if status.success() { "passed" } else { "FAILED" },
        util::secs(begun.elapsed()),
        status
            .code()
            .map_or_else(|| "signal".into(), |code| code.to_string())
    );
    Ok(util::exit_code(status))
}

/// A cargo command with the env file loaded and the slow switch set.
fn prepared(slow: bool, effective: &mut Vec<(String, String)>) -> Command {
    let mut command = util::cargo();
    *effective = util::apply_env_file(&mut command);
    if slow {
        command.env("ANARCHON_SLOW", "1");
    }
    command
}

/// Which server-backed suites had their server, judged by the URLs the tests were given.
fn summary(effective: &[(String, String)], slow: bool) {
    let set = |variable: &str| {
        effective
            .iter()
            .any(|(key, value)| key == variable && !value.is_empty())
    };
    let (ran, skipped): (Vec<_>, Vec<_>) =
        test_servers::suites().partition(|(variable, _, _)| set(variable));
    let names = |suites: &[(&str, &str, &str)]| {
        suites
            .iter()
            .map(|(variable, name, _)| format!("{name} ({variable})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!();
    eprintln!("server-backed suites (judged by the URLs the tests were given):");
    if ran.is_empty() {
        eprintln!("  ran:     none");
    } else {
        eprintln!("  ran:     {}", names(&ran));
    }
    if skipped.is_empty() {
        eprintln!("  skipped: none");
    } else {
        eprintln!(
            "  skipped: {} (no URL: their tests printed SKIP lines)",
            names(&skipped)
        );
        let mut flags: Vec<&str> = skipped
            .iter()
            .map(|(_, _, flag)| *flag)
            .filter(|flag| !flag.is_empty())
            .collect();
        flags.dedup();
        let flags: String = flags.iter().map(|flag| format!(" {flag}")).collect();
        eprintln!(
            "  start them with `cargo xtask test-servers{flags}`, then run `cargo xtask test` again"
        );
        if skipped
            .iter()
            .any(|(_, name, _)| *name == "redis86" || *name == "libsql")
        {
            eprintln!(
                "  (redis86 and libsql need binaries no Debian package has: a redis-server >= 8.6 \
                 in ANARCHON_REDIS86_SERVER, sqld on PATH or in ANARCHON_SQLD, or Docker; see \
                 docs/testing.md)"
            );
        }
        if std::env::var("ANARCHON_REQUIRE_SERVERS").is_ok_and(|v| v == "1") {
            eprintln!(
                "  ANARCHON_REQUIRE_SERVERS=1: suites without their server fail instead of skipping"
            );
        }
    }
    eprintln!(
        "  slow suite (real processes and clocks): {}",
        if slow {
            "ran (ANARCHON_SLOW=1)"
        } else {
            "not run; add --slow"
        }
    );
}
