//! `cargo xtask test`: the workspace tests against the servers `test-servers` found, with a
//! summary whose counts are true.
//!
//! Reads `target/test-servers/env` into the tests' environment and runs `cargo test --doc
//! --workspace --all-features` (nextest runs no doctests), then `cargo nextest run --workspace
//! --all-features`. A test that cannot run here is never run to pass by returning early: it is
//! `#[ignore]`d with its reason in the source (the slow suite, the harness's `child_node`
//! entry points) or left out by a nextest filter of a [`Gate`] below (a test that needs a
//! server no package carries), and the summary counts it as skipped, with the reason. Without
//! cargo-nextest it falls back to `cargo test` (with `--include-ignored --skip child_node`
//! for the slow suite) and sums libtest's result lines instead.
//!
//! The last line is `tests: N passed, N failed, N skipped`. With `ANARCHON_REQUIRE_SERVERS=1`
//! only the gates marked unobtainable may skip; any other skip fails the run.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::{test_servers, util};

/// `cargo xtask test`: the workspace tests (doctests, then cargo-nextest) with the test
/// servers' URLs; ends with the true counts and every skipped test's reason.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Also run the slow suite (real processes and clocks; the same as ANARCHON_SLOW=1).
    #[arg(long)]
    slow: bool,
    /// Arguments for the runner (a filter, `-p <crate>` ...); the doctests are then left out.
    #[arg(last = true)]
    runner: Vec<String>,
}

/// The test binaries of the slow suite: every test in them is `#[ignore]`d with the reason
/// "slow suite: ANARCHON_SLOW=1 cargo xtask test" and runs only with `--slow`.
const SLOW_BINARIES: &[&str] = &[
    "anarchon::cluster",
    "anarchon::chaos",
    "anarchon::examples_objects",
    "anarchon::examples_http_api",
    "anarchon::examples_failover",
    "anarchon::exactly_once",
    "anarchon::scenarios",
    "anarchon::resilience",
    "anarchon-redis::failover",
    "anarchon-redis::cluster_failover",
    "anarchon-nats::restart",
];

/// How a gate picks tests by name.
#[derive(Debug, Clone, Copy)]
enum Name {
    Any,
    Exact(&'static str),
    Prefix(&'static str),
}

/// A set of tests that runs only when its condition holds, else is left out by a filter and
/// counted as skipped with `reason`.
#[derive(Debug)]
struct Gate {
    /// Binary ids (`package::binary`); empty: any binary.
    binaries: &'static [&'static str],
    name: Name,
    /// Why the tests are left out when `run` is false.
    reason: String,
    run: bool,
    /// Allowed to skip under `ANARCHON_REQUIRE_SERVERS=1`: not a test, not asked for, or
    /// needing what no package installs.
    unobtainable: bool,
    /// Not a test at all (counted neither as run nor as skipped).
    not_a_test: bool,
}

impl Gate {
    fn matches(&self, binary_id: &str, test: &str) -> bool {
        (self.binaries.is_empty() || self.binaries.contains(&binary_id))
            && match self.name {
                Name::Any => true,
                Name::Exact(name) => test == name,
                Name::Prefix(prefix) => test.starts_with(prefix),
            }
    }

    /// The nextest filterset of the gate's tests.
    fn filterset(&self) -> String {
        let binaries = self
            .binaries
            .iter()
            .map(|id| format!("binary_id(={id})"))
            .collect::<Vec<_>>()
            .join(" | ");
        let name = match self.name {
            Name::Any => None,
            Name::Exact(name) => Some(format!("test(={name})")),
            Name::Prefix(prefix) => Some(format!("test(/^{prefix}/)")),
        };
        match (binaries.is_empty(), name) {
            (true, Some(name)) => name,
            (false, None) => format!("({binaries})"),
            (false, Some(name)) => format!("({binaries}) & {name}"),
            (true, None) => "all()".to_owned(),
        }
    }
}

/// The gates, given the slow switch and the URLs the tests get.
fn gates(slow: bool, set: &dyn Fn(&str) -> bool) -> Vec<Gate> {
    vec![
        Gate {
            binaries: &[],
            name: Name::Exact("child_node"),
            reason: "not a test: the node process of the real-process harness (tests/support), \
                     run by name with --ignored --exact"
                .into(),
            run: false,
            unobtainable: true,
            not_a_test: true,
        },
        Gate {
            binaries: SLOW_BINARIES,
            name: Name::Any,
            reason: "slow suite (real processes and clocks): ANARCHON_SLOW=1 or --slow".into(),
            run: slow,
            unobtainable: true,
            not_a_test: false,
        },
        Gate {
            binaries: &["anarchon-redis::conformance"],
            name: Name::Prefix("redis86_idmp"),
            reason: "the `idmp` strategy needs Redis >= 8.6 (ANARCHON_REDIS86_URL is unset; no \
                     Debian package carries it)"
                .into(),
            run: set("ANARCHON_REDIS86_URL"),
            unobtainable: true,
            not_a_test: false,
        },
        Gate {
            binaries: &["anarchon-libsql::conformance"],
            name: Name::Exact("runtime::b16_frozen_owner_is_fenced_then_learns_it_lost"),
            reason: "unreliable on the Hrana test double (passed 1 of 7 runs on the loaded \
                     2-core machine: after a freeze the owner's calls time out at the test's \
                     300 ms call timeout instead of learning it lost); runs on a real sqld \
                     (ANARCHON_LIBSQL_URL is unset; no package carries sqld)"
                .into(),
            run: set("ANARCHON_LIBSQL_URL"),
            unobtainable: true,
            not_a_test: false,
        },
        Gate {
            binaries: &["anarchon-sqlite::fenced"],
            name: Name::Exact("child_fenced_transaction"),
            reason: "not a test: the child process of anarchon-sqlite's fenced-transaction kill \
                     tests, run by name with --ignored --exact"
                .into(),
            run: false,
            unobtainable: true,
            not_a_test: true,
        },
    ]
}

/// Counts of one run.
#[derive(Debug, Default)]
struct Counts {
    passed: u64,
    failed: u64,
    /// Reason -> (count, unobtainable).
    skipped: BTreeMap<String, (u64, bool)>,
    /// Entry points that are `#[test]` functions but not tests (`child_node`), left out.
    not_tests: u64,
}

impl Counts {
    fn skip(&mut self, reason: &str, n: u64, unobtainable: bool) {
        if n > 0 {
            let entry = self
                .skipped
                .entry(reason.to_owned())
                .or_insert((0, unobtainable));
            entry.0 += n;
        }
    }

    fn skipped_total(&self) -> u64 {
        self.skipped.values().map(|(n, _)| n).sum()
    }
}

pub(crate) fn run(args: Args) -> Result<ExitCode> {
    // `ANARCHON_SLOW=1 cargo xtask test` is the same as `--slow` (CI runs the README's command so).
    let slow = args.slow || std::env::var("ANARCHON_SLOW").is_ok_and(|v| v == "1");
    let extra = args.runner;
    let require = std::env::var("ANARCHON_REQUIRE_SERVERS").is_ok_and(|v| v == "1");

    let begun = Instant::now();
    let nextest = util::succeeds(util::cargo().args(["nextest", "--version"]));
    let mut effective = Vec::new();
    let mut counts = Counts::default();
    let mut failed_step = None;

    if extra.is_empty() {
        // Doctests first, so that the runner's summary comes last.
        let mut doc = prepared(slow, &mut effective);
        doc.args(["test", "--doc", "--workspace", "--all-features"]);
        let (status, lines) = run_teed(&mut doc)?;
        let doc_counts = libtest_counts(&lines);
        counts.passed += doc_counts.0;
        counts.failed += doc_counts.1;
        counts.skip(
            "doc examples marked `ignore` (not compiled)",
            doc_counts.2,
            true,
        );
        if !status.success() {
            failed_step = Some(status);
        }
    } else {
        eprintln!("test: runner arguments given; doctests left out (cargo test --doc runs them)");
    }

    // The URLs the tests get (the env file under the caller's environment).
    let _ = prepared(slow, &mut effective);
    let urls = effective.clone();
    let set = |variable: &str| {
        urls.iter()
            .any(|(key, value)| key == variable && !value.is_empty())
    };
    let gates = gates(slow, &set);

    let status = if nextest {
        run_nextest(slow, &extra, &gates, &mut counts, &mut effective)?
    } else {
        eprintln!(
            "test: cargo-nextest is not installed: running cargo test (install it with \
             `cargo install --locked cargo-nextest` for the filtered, counted run)"
        );
        run_cargo_test(slow, &extra, &gates, &mut counts, &mut effective)?
    };
    let mut status = failed_step.filter(|_| status.success()).unwrap_or(status);

    servers_summary(&effective, slow);
    let mut fail_for_skips = false;
    eprintln!();
    if counts.not_tests > 0 {
        eprintln!(
            "not tests, left out and not counted: {} `child_node` entry points (the node \
             processes of the real-process harness, run by name with --ignored --exact)",
            counts.not_tests
        );
    }
    if counts.skipped.is_empty() {
        eprintln!("skipped: none");
    } else {
        eprintln!("skipped (reported by the runner as skipped, never as passed):");
        for (reason, (n, unobtainable)) in &counts.skipped {
            let mark = if require && !unobtainable {
                fail_for_skips = true;
                " [not allowed under ANARCHON_REQUIRE_SERVERS=1]"
            } else {
                ""
            };
            eprintln!("  {n:>4}  {reason}{mark}");
        }
    }
    if fail_for_skips {
        eprintln!(
            "test: ANARCHON_REQUIRE_SERVERS=1 and tests were skipped for a reason that is not \
             unobtainable"
        );
    }
    eprintln!(
        "test: {} in {} (runner's exit code {})",
        if status.success() && !fail_for_skips {
            "passed"
        } else {
            "FAILED"
        },
        util::secs(begun.elapsed()),
        status
            .code()
            .map_or_else(|| "signal".into(), |code| code.to_string())
    );
    let _ = std::io::stderr().flush();
    println!(
        "tests: {} passed, {} failed, {} skipped",
        counts.passed,
        counts.failed,
        counts.skipped_total()
    );
    if fail_for_skips && status.success() {
        status = failed_status();
    }
    Ok(util::exit_code(status))
}

/// An exit status of 1 (a run that skipped what it may not).
fn failed_status() -> ExitStatus {
    Command::new("false")
        .status()
        .unwrap_or_else(|_| std::process::ExitStatus::default())
}

/// The nextest run: lists what will run and what not (and why), then runs it.
fn run_nextest(
    slow: bool,
    extra: &[String],
    gates: &[Gate],
    counts: &mut Counts,
    effective: &mut Vec<(String, String)>,
) -> Result<ExitStatus> {
    // A filterset given after `--` is joined with the gates' by `&` (nextest would join two
    // `-E` by `|`, and let the gated tests in again).
    let (mut filters, extra) = user_filtersets(extra);
    filters.extend(
        gates
            .iter()
            .filter(|gate| !gate.run)
            .map(|gate| format!("not ({})", gate.filterset())),
    );
    let extra = &extra[..];
    let common = |command: &mut Command| {
        if !picks_packages(extra) {
            command.arg("--workspace");
        }
        // Every feature (each store, `metrics`, the kit): what clippy checks is what runs,
        // and every CI step shares this one build.
        if !picks_features(extra) {
            command.arg("--all-features");
        }
        if slow {
            // The slow suite's tests are #[ignore]d; the gates' filter leaves out the rest.
            command.args(["--run-ignored", "all"]);
        }
        if !filters.is_empty() {
            command.args(["-E", &filters.join(" & ")]);
        }
        command.args(extra);
    };

    let mut list = prepared(slow, effective);
    list.args(["nextest", "list", "--message-format", "json"]);
    common(&mut list);
    list.stderr(Stdio::inherit());
    let listing = list
        .output()
        .context("running cargo nextest list")
        .and_then(|out| {
            anyhow::ensure!(
                out.status.success(),
                "cargo nextest list failed ({})",
                out.status
            );
            serde_json::from_slice::<Value>(&out.stdout).context("reading nextest's list")
        });
    match &listing {
        Ok(listing) => classify(listing, gates, counts),
        Err(error) => eprintln!("test: {error:#}; the skipped tests are not itemised"),
    }

    let mut main = prepared(slow, effective);
    // Run every test even after a failure, so one run shows all that is broken.
    main.args(["nextest", "run", "--no-tests=warn", "--no-fail-fast"]);
    common(&mut main);
    let (status, lines) = run_teed(&mut main)?;
    let (passed, failed, skipped) = nextest_counts(&lines);
    let flaky = lines
        .iter()
        .rev()
        .find(|line| line.trim_start().starts_with("Summary") && line.contains(" run: "))
        .map_or(0, |line| {
            line.split(['(', ')', ','])
                .map(|part| number_before(part, "flaky"))
                .sum::<u64>()
        });
    if flaky > 0 {
        eprintln!(
            "test: {flaky} test(s) passed only on a retry (FLAKY above; .config/nextest.toml \
             says which tests may retry)"
        );
    }
    counts.passed += passed;
    counts.failed += failed;
    if listing.is_err() {
        counts.skip("left out (reasons not itemised)", skipped, false);
    }
    Ok(status)
}

/// Counts what the listing leaves out, by reason.
fn classify(listing: &Value, gates: &[Gate], counts: &mut Counts) {
    let Some(suites) = listing["rust-suites"].as_object() else {
        return;
    };
    for suite in suites.values() {
        let binary_id = suite["binary-id"].as_str().unwrap_or_default();
        let Some(cases) = suite["testcases"].as_object() else {
            continue;
        };
        for (name, case) in cases {
            if case["filter-match"]["status"] == "matches" {
                continue;
            }
            let known = gates.iter().any(|gate| gate.matches(binary_id, name));
            match gates
                .iter()
                .find(|gate| !gate.run && gate.matches(binary_id, name))
            {
                Some(gate) if gate.not_a_test => counts.not_tests += 1,
                Some(gate) => counts.skip(&gate.reason, 1, gate.unobtainable),
                None if !known && case["filter-match"]["reason"] == "ignored" => counts.skip(
                    &format!("#[ignore]d, in no xtask gate: {binary_id} {name}"),
                    1,
                    false,
                ),
                None => counts.skip("left out by the runner arguments given", 1, true),
            }
        }
    }
}

/// Without nextest: `cargo test`, the slow suite through `--include-ignored`.
fn run_cargo_test(
    slow: bool,
    extra: &[String],
    gates: &[Gate],
    counts: &mut Counts,
    effective: &mut Vec<(String, String)>,
) -> Result<ExitStatus> {
    let mut main = prepared(slow, effective);
    main.args(["test", "--no-fail-fast"]);
    if !picks_packages(extra) {
        main.arg("--workspace");
    }
    if !picks_features(extra) {
        main.arg("--all-features");
    }
    let (cargo_args, test_args) = match extra.iter().position(|a| a == "--") {
        Some(at) => (&extra[..at], &extra[at + 1..]),
        None => (extra, &[][..]),
    };
    main.args(cargo_args).arg("--");
    if slow {
        main.arg("--include-ignored");
        // libtest skips by substring: precise enough for these names.
        for gate in gates.iter().filter(|gate| !gate.run) {
            match gate.name {
                Name::Exact(name) | Name::Prefix(name) => {
                    main.args(["--skip", name]);
                }
                Name::Any => {}
            }
        }
    }
    main.args(test_args);
    let (status, lines) = run_teed(&mut main)?;
    let (passed, failed, ignored) = libtest_counts(&lines);
    counts.passed += passed;
    counts.failed += failed;
    counts.skip(
        "#[ignore]d or --skip'ed (cargo test does not itemise them; install cargo-nextest)",
        ignored,
        !slow,
    );
    Ok(status)
}

/// Takes the `-E X` / `--filterset X` (`--filter-expr X`) arguments out of `extra`, each as
/// `(X)`.
fn user_filtersets(extra: &[String]) -> (Vec<String>, Vec<String>) {
    let mut filters = Vec::new();
    let mut rest = Vec::new();
    let mut args = extra.iter();
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "-E" | "--filterset" | "--filter-expr" => args.next().cloned(),
            other => ["--filterset=", "--filter-expr=", "-E"]
                .iter()
                .find_map(|flag| other.strip_prefix(flag))
                .filter(|value| !value.is_empty())
                .map(str::to_owned),
        };
        match value {
            Some(value) => filters.push(format!("({value})")),
            None => rest.push(arg.clone()),
        }
    }
    (filters, rest)
}

fn picks_packages(extra: &[String]) -> bool {
    // `--workspace` would override a `-p <crate>` given after `--`.
    extra.iter().take_while(|arg| *arg != "--").any(|arg| {
        arg == "-p" || arg.starts_with("--package") || (arg.starts_with("-p") && arg.len() > 2)
    })
}

fn picks_features(extra: &[String]) -> bool {
    extra
        .iter()
        .any(|a| a == "--all-features" || a.starts_with("--features") || a == "-F")
}

/// A cargo command with the env file loaded and the slow switch set.
fn prepared(slow: bool, effective: &mut Vec<(String, String)>) -> Command {
    let mut command = util::cargo();
    *effective = util::apply_env_file(&mut command);
    if slow {
        command.env("ANARCHON_SLOW", "1");
        // The failure scenarios run once, in this run, at the short timings CI uses;
        // `cargo xtask scenarios` runs them at the catalogue's timings.
        if std::env::var_os("ANARCHON_SCENARIOS_FAST").is_none() {
            command.env("ANARCHON_SCENARIOS_FAST", "1");
        }
    }
    command
}

/// Runs `command` with its stdout and stderr shown as they come, and returns every line.
fn run_teed(command: &mut Command) -> Result<(ExitStatus, Vec<String>)> {
    eprintln!("+ {}", util::show(command));
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", util::show(command)))?;
    let stdout = child.stdout.take().context("stdout")?;
    let stderr = child.stderr.take().context("stderr")?;
    let err_thread = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            lines.push(line);
        }
        lines
    });
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        println!("{line}");
        lines.push(line);
    }
    lines.extend(err_thread.join().unwrap_or_default());
    let status = child.wait()?;
    Ok((status, lines))
}

/// The number before `word` in `text` (`"12 passed"` -> 12).
fn number_before(text: &str, word: &str) -> u64 {
    text.split([',', ';', ':'])
        .filter_map(|part| {
            let mut words = part.split_whitespace();
            let n: u64 = words.next()?.parse().ok()?;
            (words.next() == Some(word)).then_some(n)
        })
        .sum()
}

/// Sums libtest's `test result: ok. N passed; N failed; N ignored; ...` lines.
fn libtest_counts(lines: &[String]) -> (u64, u64, u64) {
    lines
        .iter()
        .filter_map(|line| line.trim().strip_prefix("test result: "))
        .map(|rest| {
            let rest = rest.split_once(". ").map_or(rest, |(_, r)| r);
            (
                number_before(rest, "passed"),
                number_before(rest, "failed"),
                number_before(rest, "ignored"),
            )
        })
        .fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
}

/// nextest's `Summary [ 1.2s] N tests run: N passed, N failed, N skipped` (timed-out tests
/// count as failed).
fn nextest_counts(lines: &[String]) -> (u64, u64, u64) {
    let Some(line) = lines
        .iter()
        .rev()
        .find(|line| line.trim_start().starts_with("Summary") && line.contains(" run: "))
    else {
        return (0, 0, 0);
    };
    let rest = line.split_once(" run: ").map_or("", |(_, r)| r);
    (
        number_before(rest, "passed"),
        number_before(rest, "failed") + number_before(rest, "timed"),
        number_before(rest, "skipped"),
    )
}

/// Which server-backed suites had their server, judged by the URLs the tests were given.
fn servers_summary(effective: &[(String, String)], slow: bool) {
    let set = |variable: &str| {
        effective
            .iter()
            .any(|(key, value)| key == variable && !value.is_empty())
    };
    let (ran, missing): (Vec<_>, Vec<_>) =
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
        eprintln!("  with their server:    none");
    } else {
        eprintln!("  with their server:    {}", names(&ran));
    }
    if missing.is_empty() {
        eprintln!("  without their server: none");
    } else {
        eprintln!("  without their server: {}", names(&missing));
        if std::env::var("ANARCHON_REQUIRE_SERVERS").is_ok_and(|v| v == "1") {
            eprintln!(
                "  ANARCHON_REQUIRE_SERVERS=1: a test that needs one of these and is not gated \
                 above fails"
            );
        } else {
            eprintln!(
                "  their tests printed SKIP lines and returned (counted as passed by the runner: \
                 set ANARCHON_REQUIRE_SERVERS=1 to make them fail instead)"
            );
        }
        let mut flags: Vec<&str> = missing
            .iter()
            .map(|(_, _, flag)| *flag)
            .filter(|flag| !flag.is_empty())
            .collect();
        flags.dedup();
        let flags: String = flags.iter().map(|flag| format!(" {flag}")).collect();
        eprintln!(
            "  start them with `cargo xtask test-servers{flags}`, then run `cargo xtask test` again"
        );
        if missing
            .iter()
            .any(|(_, name, _)| *name == "redis86" || *name == "libsql")
        {
            eprintln!(
                "  (redis86 and libsql need binaries no Debian package has: a redis-server >= 8.6 \
                 in ANARCHON_REDIS86_SERVER, sqld on PATH or in ANARCHON_SQLD, or Docker; the \
                 libSQL kit runs on its Hrana test double without sqld; see docs/testing.md)"
            );
        }
    }
    eprintln!(
        "  slow suite (real processes and clocks): {}",
        if slow {
            "ran (ANARCHON_SLOW=1), failure scenarios at the short timings"
        } else {
            "not run; add --slow"
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nextest_and_libtest_summaries_are_read() {
        let lines = vec![
            "     Summary [ 849.123s] 766 tests run: 760 passed (3 slow), 4 failed, 2 timed out, 34 skipped".to_owned(),
        ];
        assert_eq!(nextest_counts(&lines), (760, 6, 34));
        let lines = vec![
            "test result: ok. 12 passed; 0 failed; 3 ignored; 0 measured; 0 filtered out; finished in 0.1s".to_owned(),
            "test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out".to_owned(),
        ];
        assert_eq!(libtest_counts(&lines), (13, 2, 3));
    }

    #[test]
    fn gate_filtersets_match_what_the_gates_match() {
        let gates = gates(false, &|_| false);
        assert_eq!(gates[0].filterset(), "test(=child_node)");
        assert!(
            gates[1]
                .filterset()
                .starts_with("(binary_id(=anarchon::cluster) | ")
        );
        assert_eq!(
            gates[2].filterset(),
            "(binary_id(=anarchon-redis::conformance)) & test(/^redis86_idmp/)"
        );
        assert!(gates[2].matches("anarchon-redis::conformance", "redis86_idmp::claim_b10_x"));
        assert!(!gates[2].matches("anarchon-redis::conformance", "lease::b10_x"));
        assert!(gates[0].matches("anarchon::cluster", "child_node"));
        let given: Vec<String> = ["-E", "package(a)", "--filterset=test(b)", "x"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            user_filtersets(&given),
            (
                vec!["(package(a))".to_owned(), "(test(b))".to_owned()],
                vec!["x".to_owned()]
            )
        );
    }
}
