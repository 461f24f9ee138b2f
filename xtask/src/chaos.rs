//! `cargo xtask chaos`: the chaos test (`tests/chaos.rs`) on one store, with real processes,
//! real signals and, on Redis and PostgreSQL, crashes of a store server it starts itself.
//!
//! Runs `cargo test -p anarchon --features redis,postgres --test chaos -- --nocapture` with
//! `ANARCHON_SLOW=1` and the run's settings in `ANARCHON_CHAOS_*`. The test exits non-zero on
//! any violation and prints the seed, so a failure can be replayed.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use crate::util;

pub(crate) fn run(args: &[String]) -> Result<ExitCode> {
    let mut store = "sqlite".to_owned();
    let mut instances = "7".to_owned();
    let mut seconds = "90".to_owned();
    let mut seed: Option<String> = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .with_context(|| format!("chaos: {name} needs a value"))
        };
        match arg.as_str() {
            "--store" => store = value("--store")?,
            "--instances" => instances = value("--instances")?,
            "--seconds" => seconds = value("--seconds")?,
            "--seed" => seed = Some(value("--seed")?),
            other => bail!(
                "chaos: unknown option `{other}` (expected --store sqlite|redis|postgres, \
                 --instances N, --seconds S, --seed X)"
            ),
        }
    }
    if !matches!(store.as_str(), "sqlite" | "redis" | "postgres") {
        bail!("chaos: --store {store}: expected sqlite, redis or postgres");
    }
    for (name, v) in [("--instances", &instances), ("--seconds", &seconds)] {
        let n: u64 = v
            .parse()
            .with_context(|| format!("chaos: {name} {v}: expected a positive number"))?;
        if n == 0 {
            bail!("chaos: {name} must be positive");
        }
    }
    let mut command = util::cargo();
    util::apply_env_file(&mut command);
    command
        .env("ANARCHON_SLOW", "1")
        .env("ANARCHON_CHAOS_STORE", &store)
        .env("ANARCHON_CHAOS_INSTANCES", &instances)
        .env("ANARCHON_CHAOS_SECONDS", &seconds);
    if let Some(seed) = &seed {
        let _: u64 = seed
            .parse()
            .with_context(|| format!("chaos: --seed {seed}: expected a number"))?;
        command.env("ANARCHON_CHAOS_SEED", seed);
    }
    command.args([
        "test",
        "-p",
        "anarchon",
        "--features",
        "redis,postgres",
        "--test",
        "chaos",
        "--",
        "--nocapture",
    ]);
    Ok(util::exit_code(util::run_visible(&mut command)?))
}
