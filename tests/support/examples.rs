//! Building an example for a slow test with the features the test binary was built with, in
//! its own target directory and profile, so that after `cargo xtask test` (which builds every
//! example with `--all-features`) nothing is rebuilt.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The feature arguments that build the examples as this test binary was built: with every
/// store and the kit on, it was built with `--all-features` (as `cargo xtask test` does), so
/// that is passed on; else the facade features beyond the default, as `anarchon/<feature>`.
/// Matching them lets cargo find the examples already built, instead of rebuilding the
/// workspace with other features. `extra` names facade features the example needs beyond
/// those (`web` for `http-api`).
fn feature_args(extra: &[&str]) -> Vec<String> {
    let on = [
        ("libsql", cfg!(feature = "libsql")),
        ("postgres", cfg!(feature = "postgres")),
        ("redis", cfg!(feature = "redis")),
        ("amqp", cfg!(feature = "amqp")),
        ("nats", cfg!(feature = "nats")),
        ("testkit", cfg!(feature = "testkit")),
    ];
    if on.iter().all(|(_, on)| *on) {
        return vec!["--all-features".to_owned()];
    }
    let on: Vec<String> = on
        .iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| *name)
        .chain(extra.iter().copied())
        .map(|name| format!("anarchon/{name}"))
        .collect();
    if on.is_empty() {
        Vec::new()
    } else {
        vec!["--features".to_owned(), on.join(",")]
    }
}

/// Builds the example `name` in this test's target directory and profile; returns its path.
pub(crate) fn build_example(name: &str, extra: &[&str]) -> PathBuf {
    // <target>/<profile>/deps/examples_failover-<hash>
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lies in <target>/<profile>/deps");
    let target_dir = profile_dir.parent().expect("a target directory");
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        // `cargo test` and nextest build the examples with the `test` profile (into `debug`):
        // asking for the same profile finds them built.
        Some("debug") => "test".to_owned(),
        Some(other) => other.to_owned(),
        None => panic!("no profile folder in {}", exe.display()),
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_owned());
    let started = Instant::now();
    let mut command = Command::new(cargo);
    // The variables cargo sets for a test process are not the build's: a build script that
    // watches one (ring watches CARGO_MANIFEST_DIR) would make cargo rebuild it and all that
    // depends on it, here and again in the next ordinary build.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
                "OUT_DIR",
            ]
            .contains(&key.as_ref())
        {
            command.env_remove(key.as_ref());
        }
    }
    let status = command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", target_dir)
        .args(["build", "--quiet", "--workspace", "--example", name])
        .args(["--profile", &profile])
        .args(feature_args(extra))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build --example {name} failed");
    eprintln!(
        "built example {name} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let path = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(path.exists(), "cargo build did not make {}", path.display());
    path
}

/// Runs `exe` with `args` until it exits (killed after `limit`); returns its exit code and
/// stdout. Its stderr goes to ours.
pub(crate) fn run_example<A: AsRef<OsStr>>(
    exe: &Path,
    args: &[A],
    limit: Duration,
) -> (Option<i32>, String) {
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the example") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let text = reader.join().unwrap_or_default();
            panic!(
                "{} did not finish within {limit:?}; its output:\n{text}",
                exe.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (status.code(), reader.join().expect("the stdout reader"))
}
