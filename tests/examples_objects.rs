//! The `register` and `data` examples run to completion and print what they promise
//! (`ANARCHON_SLOW=1`, as `cargo xtask test --slow` sets: each builds and runs an example
//! binary through `cargo run`). [B-31, B-35]

mod support;

use std::process::Command;

use support::slow_enabled;

/// Runs `cargo run --example NAME` (in this test's target dir) and returns its stdout.
fn run_example(name: &str) -> String {
    let output = Command::new(env!("CARGO"))
        .args(["run", "--quiet", "--example", name])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "example {name} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn b35_the_register_example_runs_two_tenants_under_prefixes() {
    if !slow_enabled() {
        eprintln!("SKIP examples_objects: set ANARCHON_SLOW=1 (cargo xtask test --slow)");
        return;
    }
    let out = run_example("register");
    for expected in [
        "registered acme as acme-Tenant-sync, acme-morning-report",
        "registered globex as globex-Tenant-sync, globex-morning-report",
        "refused: job \"acme-Tenant-sync\" is already registered",
        "tenant acme   region eu",
        "tenant globex region us",
        "done: two tenants",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
}

#[test]
fn b31_the_data_example_merges_three_levels_and_opens_a_client_per_run() {
    if !slow_enabled() {
        eprintln!("SKIP examples_objects: set ANARCHON_SLOW=1 (cargo xtask test --slow)");
        return;
    }
    let out = run_example("data");
    for expected in [
        "env=demo table=orders batch=100 manual=false",
        "env=demo table=orders batch=500 manual=true",
        "run-now succeeded",
        "done: scheduler, job and run-now data merged",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
}
