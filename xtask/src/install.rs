//! `cargo xtask test-servers --install`: installs the Debian packages of the test servers
//! that are missing, so a newcomer's machine and CI take the same path.
//!
//! Redis, PostgreSQL, Valkey, and Chromium with its WebDriver (the dashboard's browser test)
//! always; RabbitMQ and NATS with `--brokers`; the `openssl`
//! command with `--tls`. Valkey comes from `bookworm-backports` on Debian 12 (the suite is
//! added to the apt sources when missing) and from the main suite on later releases. Redis
//! ≥ 8.6 and sqld have no Debian package and are never installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util;

/// What `--install` may install, and when.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Wanted {
    /// RabbitMQ and NATS too.
    pub(crate) brokers: bool,
    /// The `openssl` command (certificates of the TLS servers).
    pub(crate) tls: bool,
}

/// A Debian package and how to tell it is installed.
struct Package {
    name: &'static str,
    installed: fn() -> bool,
    broker: bool,
    tls: bool,
}

fn program(name: &str) -> bool {
    util::which(name).is_some()
        || ["/usr/sbin", "/usr/local/sbin", "/sbin"]
            .iter()
            .any(|dir| Path::new(dir).join(name).is_file())
}

const PACKAGES: [Package; 8] = [
    Package {
        name: "redis-server",
        installed: || program("redis-server"),
        broker: false,
        tls: false,
    },
    Package {
        name: "postgresql",
        installed: || postgres_bindir().is_some(),
        broker: false,
        tls: false,
    },
    Package {
        name: "valkey-server",
        installed: || program("valkey-server"),
        broker: false,
        tls: false,
    },
    Package {
        name: "rabbitmq-server",
        installed: || program("rabbitmq-server"),
        broker: true,
        tls: false,
    },
    Package {
        name: "nats-server",
        installed: || program("nats-server"),
        broker: true,
        tls: false,
    },
    Package {
        name: "chromium",
        installed: || program("chromium"),
        broker: false,
        tls: false,
    },
    Package {
        name: "chromium-driver",
        installed: || program("chromedriver"),
        broker: false,
        tls: false,
    },
    Package {
        name: "openssl",
        installed: || program("openssl"),
        broker: false,
        tls: true,
    },
];

/// The missing packages among those `wanted` asks for.
pub(crate) fn missing(wanted: Wanted) -> Vec<&'static str> {
    PACKAGES
        .iter()
        .filter(|p| (!p.broker || wanted.brokers) && (!p.tls || wanted.tls))
        .filter(|p| !(p.installed)())
        .map(|p| p.name)
        .collect()
}

/// The Debian release's code name (`bookworm`), from `/etc/os-release`.
fn codename() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
}

/// Valkey has no package in Debian 12's main suite: it is in `bookworm-backports`.
fn valkey_needs_backports(codename: Option<&str>) -> bool {
    codename == Some("bookworm")
}

const BACKPORTS_LINE: &str = "deb http://deb.debian.org/debian bookworm-backports main";
const BACKPORTS_FILE: &str = "/etc/apt/sources.list.d/bookworm-backports.list";

/// Whether an active apt source (a `.list` line or a deb822 `.sources` stanza) names the
/// `bookworm-backports` suite. Commented lines and disabled files do not count.
fn backports_configured() -> bool {
    let mut files = vec![Path::new("/etc/apt/sources.list").to_path_buf()];
    if let Ok(entries) = std::fs::read_dir("/etc/apt/sources.list.d") {
        files.extend(entries.flatten().map(|e| e.path()).filter(|p| {
            p.extension()
                .is_some_and(|ext| ext == "list" || ext == "sources")
        }));
    }
    files
        .iter()
        .any(|file| std::fs::read_to_string(file).is_ok_and(|text| names_backports(&text)))
}

fn names_backports(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.starts_with('#'))
        .any(|line| {
            line.split_whitespace()
                .any(|word| word == "bookworm-backports")
        })
}

/// The shell commands that install `packages` by hand (for messages).
pub(crate) fn manual_commands(packages: &[&str]) -> String {
    let backports = valkey_needs_backports(codename().as_deref());
    let (valkey, others): (Vec<&str>, Vec<&str>) = packages
        .iter()
        .partition(|p| **p == "valkey-server" && backports);
    let mut lines = Vec::new();
    if !valkey.is_empty() && !backports_configured() {
        lines.push(format!("echo '{BACKPORTS_LINE}' > {BACKPORTS_FILE}"));
    }
    lines.push("apt-get update".to_string());
    if !others.is_empty() {
        lines.push(format!(
            "apt-get install -y --no-install-recommends {}",
            others.join(" ")
        ));
    }
    if !valkey.is_empty() {
        lines.push(
            "apt-get install -y --no-install-recommends -t bookworm-backports valkey-server".into(),
        );
    }
    lines.join(" && ")
}

/// Installs what is missing. Needs root (or `sudo` without a password) and apt.
pub(crate) fn install(wanted: Wanted) -> Result<()> {
    let packages = missing(wanted);
    if packages.is_empty() {
        println!("test-servers: every server package is installed");
        return Ok(());
    }
    if util::which("apt-get").is_none() {
        bail!(
            "--install knows Debian's apt only, and apt-get is not here: install {} with your \
             system's package manager",
            packages.join(", ")
        );
    }
    let sudo = if util::running_as_root() {
        false
    } else if util::which("sudo").is_some()
        && util::succeeds(Command::new("sudo").args(["-n", "true"]))
    {
        true
    } else {
        bail!(
            "installing {} needs root: run `sudo cargo xtask test-servers --install`, or as \
             root: {}",
            packages.join(", "),
            manual_commands(&packages)
        );
    };
    let root = |program: &str| {
        let mut command = if sudo {
            let mut command = Command::new("sudo");
            command.args(["-n", "--preserve-env=DEBIAN_FRONTEND", program]);
            command
        } else {
            Command::new(program)
        };
        command.env("DEBIAN_FRONTEND", "noninteractive");
        command
    };

    let backports =
        packages.contains(&"valkey-server") && valkey_needs_backports(codename().as_deref());
    if backports && !backports_configured() {
        println!("test-servers: adding `{BACKPORTS_LINE}` to {BACKPORTS_FILE}");
        if sudo {
            let mut tee = root("tee");
            tee.arg(BACKPORTS_FILE);
            write_through(&mut tee, &format!("{BACKPORTS_LINE}\n"))?;
        } else {
            std::fs::write(BACKPORTS_FILE, format!("{BACKPORTS_LINE}\n"))
                .with_context(|| format!("writing {BACKPORTS_FILE}"))?;
        }
    }
    let apt = |args: &[&str]| -> Result<()> {
        let mut command = root("apt-get");
        // Another apt run (an unattended upgrade) may hold the lock for a while.
        command.args(["-o", "DPkg::Lock::Timeout=300"]).args(args);
        let status = util::run_visible(&mut command)?;
        if !status.success() {
            bail!("`{}` failed ({status})", util::show(&command));
        }
        Ok(())
    };
    apt(&["update", "-qq"])?;
    let (valkey, others): (Vec<&str>, Vec<&str>) = packages
        .iter()
        .partition(|p| **p == "valkey-server" && backports);
    if !others.is_empty() {
        println!("test-servers: installing {}", others.join(" "));
        let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
        args.extend(&others);
        apt(&args)?;
    }
    if !valkey.is_empty() {
        println!("test-servers: installing valkey-server from bookworm-backports");
        apt(&[
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "-t",
            "bookworm-backports",
            "valkey-server",
        ])?;
    }
    let still = missing(wanted);
    if !still.is_empty() {
        bail!(
            "apt-get finished but {} is still not found",
            still.join(", ")
        );
    }
    Ok(())
}

/// Runs `command` with `text` on its stdin.
fn write_through(command: &mut Command, text: &str) -> Result<()> {
    use std::io::Write;
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("could not start `{}`", util::show(command)))?;
    child
        .stdin
        .take()
        .context("no stdin")?
        .write_all(text.as_bytes())?;
    let status = child.wait()?;
    if !status.success() {
        bail!("`{}` failed ({status})", util::show(command));
    }
    Ok(())
}

/// The newest `/usr/lib/postgresql/<major>/bin`, else the folder of `pg_ctl` on PATH.
pub(crate) fn postgres_bindir() -> Option<PathBuf> {
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("pg_ctl").is_file().then_some((major, bin))
        })
        .max_by_key(|(major, _)| *major)
        .map(|(_, bin)| bin);
    newest.or_else(|| {
        let pg_ctl = util::which("pg_ctl")?;
        let pg_ctl = std::fs::canonicalize(&pg_ctl).unwrap_or(pg_ctl);
        pg_ctl.parent().map(Path::to_path_buf)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backports_are_found_only_in_active_lines() {
        assert!(names_backports(
            "deb http://deb.debian.org/debian bookworm-backports main\n"
        ));
        assert!(names_backports(
            "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-backports\n"
        ));
        assert!(!names_backports(
            "# deb http://deb.debian.org/debian bookworm-backports main\n"
        ));
        assert!(!names_backports("Suites: bookworm bookworm-updates\n"));
    }

    #[test]
    fn valkey_needs_backports_on_bookworm_only() {
        assert!(valkey_needs_backports(Some("bookworm")));
        assert!(!valkey_needs_backports(Some("trixie")));
        assert!(!valkey_needs_backports(None));
    }

    #[test]
    fn brokers_and_openssl_are_asked_for_only_with_their_flags() {
        let names = |wanted: Wanted| -> Vec<&str> {
            PACKAGES
                .iter()
                .filter(|p| (!p.broker || wanted.brokers) && (!p.tls || wanted.tls))
                .map(|p| p.name)
                .collect()
        };
        assert_eq!(
            names(Wanted::default()),
            [
                "redis-server",
                "postgresql",
                "valkey-server",
                "chromium",
                "chromium-driver"
            ]
        );
        assert!(
            names(Wanted {
                brokers: true,
                tls: false
            })
            .contains(&"nats-server")
        );
        assert!(
            names(Wanted {
                brokers: false,
                tls: true
            })
            .contains(&"openssl")
        );
    }
}
