//! Helpers shared by the subcommands: project paths, the env file, starting processes.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// The workspace root: xtask lives one folder below it.
///
/// Read at run time first (`cargo run`, which `cargo xtask` is, sets `CARGO_MANIFEST_DIR` for
/// the process): several checkouts sharing one `CARGO_TARGET_DIR` share one xtask binary, whose
/// compiled-in path is the checkout that built it last.
pub(crate) fn project_root() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.join("Cargo.toml").is_file())
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest
        .parent()
        .expect("xtask sits inside the workspace")
        .to_path_buf()
}

/// The folder `test-servers` keeps its data, logs, env file and state in.
///
/// It follows `CARGO_TARGET_DIR` when that is set, so CI's single target folder also holds
/// the servers' data.
pub(crate) fn servers_dir() -> PathBuf {
    target_dir().join("test-servers")
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                project_root().join(dir)
            }
        }
        _ => project_root().join("target"),
    }
}

/// The env file written by `test-servers` and read by `test`, `scenarios` and `bench`.
pub(crate) fn env_file() -> PathBuf {
    servers_dir().join("env")
}

/// The cargo that runs us (so the same toolchain builds the tests).
pub(crate) fn cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(project_root());
    command
}

/// Parses `KEY=VALUE` lines; blank lines and `#` comments are skipped.
pub(crate) fn parse_env(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.trim().to_string(), value.trim().to_string()))
        .collect()
}

/// Reads the env file, if there is one.
pub(crate) fn read_env_file() -> Vec<(String, String)> {
    std::fs::read_to_string(env_file())
        .map(|text| parse_env(&text))
        .unwrap_or_default()
}

/// Adds the env file's variables to `command`, except those the caller's environment
/// already sets: a URL given by hand wins over the file. Returns the variables in effect.
pub(crate) fn apply_env_file(command: &mut Command) -> Vec<(String, String)> {
    let mut effective = Vec::new();
    for (key, value) in read_env_file() {
        match std::env::var(&key) {
            Ok(own) if !own.is_empty() => effective.push((key, own)),
            _ => {
                command.env(&key, &value);
                effective.push((key, value));
            }
        }
    }
    // Variables set by hand that the file does not know count too.
    for (key, value) in std::env::vars() {
        if key.starts_with("ANARCHON_")
            && key.ends_with("_URL")
            && !value.is_empty()
            && !effective.iter().any(|(known, _)| *known == key)
        {
            effective.push((key, value));
        }
    }
    effective
}

/// Prints the command line (without the environment) the way a shell would show it.
pub(crate) fn show(command: &Command) -> String {
    let mut line = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    line
}

fn quote(arg: &OsStr) -> String {
    let arg = arg.to_string_lossy();
    if !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c))
    {
        arg.into_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// Runs a command in the foreground, inheriting stdio, after printing it.
pub(crate) fn run_visible(command: &mut Command) -> Result<ExitStatus> {
    eprintln!("$ {}", show(command));
    command
        .status()
        .with_context(|| format!("could not start `{}`", show(command)))
}

/// Runs a command quietly and returns whether it succeeded; a missing program is `false`.
pub(crate) fn succeeds(command: &mut Command) -> bool {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Runs a command quietly with a deadline and returns its stdout if it succeeded.
pub(crate) fn output_within(command: &mut Command, limit: Duration) -> Option<String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut out = String::new();
                if let Some(mut stdout) = child.stdout.take() {
                    use std::io::Read;
                    stdout.read_to_string(&mut out).ok()?;
                }
                return status.success().then_some(out);
            }
            Ok(None) if started.elapsed() < limit => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Finds a program on `PATH`.
pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Whether we run as root (servers that refuse root are then started as their own user).
pub(crate) fn running_as_root() -> bool {
    // The effective uid is the second field of the `Uid:` line.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

/// Maps a child's exit status to our own exit code (a signal death becomes 1).
pub(crate) fn exit_code(status: ExitStatus) -> ExitCode {
    match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1).max(1)),
        None => ExitCode::FAILURE,
    }
}

/// Seconds with one decimal, for timing lines.
pub(crate) fn secs(elapsed: Duration) -> String {
    format!("{:.1} s", elapsed.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_lines_parse_and_skip_comments() {
        let parsed = parse_env("# written by xtask\n\nA=1\n B = redis://x:1 \nnot a pair\n");
        assert_eq!(
            parsed,
            vec![
                ("A".to_string(), "1".to_string()),
                ("B".to_string(), "redis://x:1".to_string())
            ]
        );
    }

    #[test]
    fn shown_commands_quote_what_a_shell_would_split() {
        let mut command = Command::new("redis-server");
        command.args(["--save", "", "--dir", "/tmp/a b"]);
        assert_eq!(show(&command), "redis-server --save '' --dir '/tmp/a b'");
    }
}
