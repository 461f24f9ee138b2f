//! `cargo xtask bench <store>`: a store's claim micro-bench, with the test servers' URLs.
//!
//! Runs `cargo bench -p anarchon-<store> --bench claim -- [--json]`. The bench binaries use
//! the shared frame in `anarchon_core::bench` (warm-up, fixed op count, min/p50/p99, the
//! baseline measured in the same run). With `--json` only the JSON object goes to stdout.

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::util;

pub(crate) fn run(store: &str, json: bool) -> Result<ExitCode> {
    let store = store.trim_start_matches("anarchon-");
    let package = format!("anarchon-{store}");
    let crate_dir = util::project_root().join("crates").join(&package);
    if !crate_dir.join("Cargo.toml").is_file() {
        bail!("bench: there is no crate {package} (crates/{package})");
    }
    if !crate_dir.join("benches").join("claim.rs").is_file() {
        bail!("bench: {package} has no claim bench yet (crates/{package}/benches/claim.rs)");
    }
    let mut command = util::cargo();
    util::apply_env_file(&mut command);
    command.args(["bench", "-p", &package, "--bench", "claim", "--"]);
    if json {
        command.arg("--json");
    }
    Ok(util::exit_code(util::run_visible(&mut command)?))
}
