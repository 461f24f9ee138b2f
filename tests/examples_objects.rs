//! The `register` and `data` examples run to completion and print what they promise
//! (slow suite, ignored unless `ANARCHON_SLOW=1 cargo xtask test`: each builds and runs an
//! example binary, with the features this test was built with). [B-31, B-35]

mod support;

use std::process::Command;

use support::examples::build_example;

/// Builds the example `name` (in this test's target dir), runs it and returns its stdout.
fn run_example(name: &str) -> String {
    let exe = build_example(name, &[]);
    let output = Command::new(&exe)
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
#[ignore = "slow suite: ANARCHON_SLOW=1 cargo xtask test"]
fn b35_the_register_example_runs_two_tenants_under_prefixes() {
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
#[ignore = "slow suite: ANARCHON_SLOW=1 cargo xtask test"]
fn b31_the_data_example_merges_three_levels_and_opens_a_client_per_run() {
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
