//! What the scale and precision benches share: the stores and their fresh namespaces, the
//! bench node's build and processes, and the readings of `/proc` (CPU, RSS, load).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use crate::util;

/// Milliseconds since the epoch on the host clock.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A store the scale and precision benches run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreKind {
    Sqlite,
    Redis,
    Postgres,
    Libsql,
}

impl StoreKind {
    #[cfg(test)]
    pub(crate) const ALL: [StoreKind; 4] = [
        StoreKind::Sqlite,
        StoreKind::Redis,
        StoreKind::Postgres,
        StoreKind::Libsql,
    ];

    pub(crate) fn parse(text: &str) -> Result<StoreKind> {
        Ok(match text {
            "sqlite" => StoreKind::Sqlite,
            "redis" => StoreKind::Redis,
            "postgres" | "postgresql" => StoreKind::Postgres,
            "libsql" => StoreKind::Libsql,
            other => bail!("--store {other}: expected sqlite, redis, postgres or libsql"),
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            StoreKind::Sqlite => "sqlite",
            StoreKind::Redis => "redis",
            StoreKind::Postgres => "postgres",
            StoreKind::Libsql => "libsql",
        }
    }

    /// The variable holding the server's URL (none for SQLite, a local file).
    pub(crate) fn url_var(self) -> Option<&'static str> {
        match self {
            StoreKind::Sqlite => None,
            StoreKind::Redis => Some("ANARCHON_REDIS_URL"),
            StoreKind::Postgres => Some("ANARCHON_POSTGRES_URL"),
            StoreKind::Libsql => Some("ANARCHON_LIBSQL_URL"),
        }
    }

    /// The process names of the store's server, whose CPU the benches read (none for
    /// SQLite, which runs inside the nodes).
    pub(crate) fn server_processes(self) -> &'static [&'static str] {
        match self {
            StoreKind::Sqlite => &[],
            StoreKind::Redis => &["redis-server"],
            StoreKind::Postgres => &["postgres"],
            StoreKind::Libsql => &["sqld"],
        }
    }

    /// The bare operation the precision bench puts beside the start lag.
    pub(crate) fn floor_name(self) -> &'static str {
        match self {
            StoreKind::Redis => "PING",
            StoreKind::Postgres | StoreKind::Sqlite => "1-row UPDATE, committed",
            StoreKind::Libsql => "-",
        }
    }

    /// The ceiling's unit of work, for the report.
    pub(crate) fn ceiling_name(self) -> &'static str {
        match self {
            StoreKind::Redis => "pipelines of 256 SET NX",
            StoreKind::Postgres => "committed 256-row unnest INSERT .. ON CONFLICT DO NOTHING",
            StoreKind::Sqlite => "BEGIN IMMEDIATE transactions of 256 INSERT OR IGNORE",
            StoreKind::Libsql => "not measured",
        }
    }

    /// Whether the bench reads the store server's call counters (Redis `INFO commandstats`,
    /// PostgreSQL `pg_stat_database` / `pg_stat_statements`); SQLite has no server.
    pub(crate) fn has_counters(self) -> bool {
        matches!(self, StoreKind::Redis | StoreKind::Postgres)
    }

    /// Whether the node has a bare client for this store (the ceiling and the floor).
    pub(crate) fn has_raw_client(self) -> bool {
        !matches!(self, StoreKind::Libsql)
    }
}

/// The server URL of `kind`: the caller's environment first, then the env file of
/// `cargo xtask test-servers`.
pub(crate) fn server_url(kind: StoreKind) -> Result<Option<String>> {
    let Some(var) = kind.url_var() else {
        return Ok(None);
    };
    if let Ok(url) = std::env::var(var)
        && !url.trim().is_empty()
    {
        return Ok(Some(url));
    }
    util::read_env_file()
        .into_iter()
        .find(|(k, v)| k == var && !v.is_empty())
        .map(|(_, v)| Some(v))
        .with_context(|| {
            format!(
                "{var} is not set: run `cargo xtask test-servers` (which writes {}), or set \
                 {var} to the {} server's URL",
                util::env_file().display(),
                kind.name()
            )
        })
}

/// The folder of one bench run (logs, the SQLite file, the nodes' stderr).
pub(crate) struct RunDir {
    pub(crate) path: PathBuf,
    pub(crate) id: String,
}

impl RunDir {
    pub(crate) fn create(label: &str) -> Result<RunDir> {
        let id = format!(
            "{:x}{:04x}",
            now_ms() % 0xffff_ffff,
            std::process::id() % 0xffff
        );
        let path = target_dir()
            .join("bench-runs")
            .join(format!("{label}-{id}"));
        std::fs::create_dir_all(&path)
            .with_context(|| format!("could not create {}", path.display()))?;
        Ok(RunDir { path, id })
    }

    /// The store spec of the node for this run: a fresh file, key prefix, schema or table
    /// prefix of its own.
    pub(crate) fn store_spec(&self, kind: StoreKind, url: Option<&str>) -> String {
        let url = url.unwrap_or_default();
        match kind {
            StoreKind::Sqlite => format!("sqlite:{}", self.path.join("bench.db").display()),
            StoreKind::Redis => format!("redis:{url}#anarchon-bench-{}:", self.id),
            StoreKind::Postgres => format!("postgres:{url}#anarchon_bench_{}", self.id),
            StoreKind::Libsql => format!("libsql:{url}#anarchon_bench_{}", self.id),
        }
    }

    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

fn target_dir() -> PathBuf {
    util::servers_dir()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| util::project_root().join("target"))
}

/// The stores a multi-store bench runs on, with their server URLs: the ones named, or by
/// default SQLite plus Redis and PostgreSQL where their URLs are set (a `SKIP` line for each
/// one that is not).
pub(crate) fn store_plan(named: &[StoreKind]) -> Result<Vec<(StoreKind, Option<String>)>> {
    let mut plan = Vec::new();
    if named.is_empty() {
        plan.push((StoreKind::Sqlite, None));
        for kind in [StoreKind::Redis, StoreKind::Postgres] {
            match server_url(kind) {
                Ok(url) => plan.push((kind, url)),
                Err(e) => eprintln!("SKIP {}: {e:#}", kind.name()),
            }
        }
    } else {
        for kind in named {
            plan.push((*kind, server_url(*kind)?));
        }
    }
    Ok(plan)
}

/// `cargo` for a release build of the benches. `cargo xtask` (a `cargo run`) hands xtask's
/// own package variables to us; build scripts such as ring's rerun when they change, which
/// would rebuild half the release tree: they are removed.
pub(crate) fn release_cargo() -> Command {
    let mut command = util::cargo();
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || matches!(&*key, "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "OUT_DIR")
        {
            command.env_remove(&*key);
        }
    }
    command
}

/// Builds the bench node in release and returns its path.
pub(crate) fn build_node() -> Result<PathBuf> {
    let mut command = release_cargo();
    command.args([
        "build",
        "--release",
        "--example",
        "bench-node",
        "--features",
        "all-stores",
    ]);
    let status = util::run_visible(&mut command)?;
    if !status.success() {
        bail!("building the bench node failed ({status})");
    }
    let path = target_dir()
        .join("release")
        .join("examples")
        .join("bench-node");
    if !path.is_file() {
        bail!("the bench node was built but {} is missing", path.display());
    }
    let dep_info = path.with_extension("d");
    if let Ok(text) = std::fs::read_to_string(&dep_info)
        && let Some(other) = built_from_elsewhere(&text, &util::project_root())
    {
        bail!(
            "{} was built from another checkout ({other}) that shares this target folder: \
             cargo names a workspace member's artifacts without its checkout's path and judged \
             them fresh, so this run would measure the other checkout's code; give one of the \
             two its own CARGO_TARGET_DIR",
            path.display()
        );
    }
    // Several checkouts may share one release target folder (CARGO_TARGET_DIR): each runs a
    // copy of its own, so another checkout's build cannot replace the binary between spawns.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&util::project_root(), &mut hasher);
    let own = path.with_file_name(format!(
        "bench-node-{:016x}",
        std::hash::Hasher::finish(&hasher)
    ));
    // Copied beside it and renamed over it: a bench of the same checkout that is still
    // running keeps its inode (copying onto a running binary fails with "text file busy").
    let part = own.with_file_name(format!(
        "{}.part-{}",
        own.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("bench-node"),
        std::process::id()
    ));
    std::fs::copy(&path, &part)
        .with_context(|| format!("copying {} to {}", path.display(), part.display()))?;
    std::fs::rename(&part, &own)
        .with_context(|| format!("renaming {} to {}", part.display(), own.display()))?;
    Ok(own)
}

/// The bench node's dep-info (`bench-node.d`: "target: source source ...", a space inside
/// a path written `\ `) names its own source under another folder than `root`: the binary
/// is another checkout's. Returns that source's path.
fn built_from_elsewhere(dep_info: &str, root: &Path) -> Option<String> {
    let own = root.join("examples").join("bench-node.rs");
    let (_, sources) = dep_info.lines().next()?.split_once(": ")?;
    let mut paths: Vec<String> = Vec::new();
    let mut escaped = false;
    for part in sources.split(' ') {
        match paths.last_mut() {
            Some(last) if escaped => {
                last.pop();
                last.push(' ');
                last.push_str(part);
            }
            _ if part.is_empty() => {}
            _ => paths.push(part.to_owned()),
        }
        escaped = part.ends_with('\\');
    }
    let main = paths
        .into_iter()
        .find(|p| Path::new(p).ends_with(Path::new("examples").join("bench-node.rs")))?;
    (Path::new(&main) != own).then_some(main)
}

/// One bench node process; killed if still running when dropped.
pub(crate) struct Node {
    pub(crate) name: String,
    child: Child,
    lines: Receiver<String>,
    /// Every stdout line seen so far.
    pub(crate) seen: Vec<String>,
}

impl Node {
    /// Starts `bin mode args...`; stdout is read line by line and copied to `<stderr_file>`
    /// with the extension `out` (the node's readings stay in a run folder kept with
    /// `--keep`), stderr goes to `<stderr_file>`.
    pub(crate) fn spawn(
        name: &str,
        bin: &Path,
        mode: &str,
        args: &[String],
        stderr_file: &Path,
    ) -> Result<Node> {
        let stderr = std::fs::File::create(stderr_file)
            .with_context(|| format!("could not create {}", stderr_file.display()))?;
        let mut command = Command::new(bin);
        command
            .arg(mode)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let mut child = command
            .spawn()
            .with_context(|| format!("could not start `{}`", util::show(&command)))?;
        let stdout = child.stdout.take().context("child stdout")?;
        let copy_file = stderr_file.with_extension("out");
        let mut copy = std::io::BufWriter::new(
            std::fs::File::create(&copy_file)
                .with_context(|| format!("could not create {}", copy_file.display()))?,
        );
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // A line at a time: a run killed midway still leaves what the node said.
                let _ = writeln!(copy, "{line}").and_then(|()| copy.flush());
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Node {
            name: name.to_owned(),
            child,
            lines,
            seen: Vec::new(),
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a line starting with `tag` and returns it; fails on exit or timeout.
    pub(crate) fn wait_for(&mut self, tag: &str, limit: Duration) -> Result<String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.starts_with(tag) {
                        return Ok(line);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    bail!(
                        "node {} printed no `{tag}` line within {}",
                        self.name,
                        util::secs(limit)
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().ok();
                    bail!(
                        "node {} exited ({}) before printing `{tag}`; its last lines: {:?}",
                        self.name,
                        status.map_or("?".to_owned(), |s| s.to_string()),
                        self.seen.iter().rev().take(5).collect::<Vec<_>>()
                    )
                }
            }
        }
    }

    /// Sends SIGTERM (the node stops its scheduler and writes its log).
    pub(crate) fn terminate(&self) -> Result<()> {
        let ok = util::succeeds(Command::new("kill").args(["-TERM", &self.pid().to_string()]));
        if !ok {
            bail!(
                "could not send SIGTERM to node {} (pid {})",
                self.name,
                self.pid()
            );
        }
        Ok(())
    }

    /// Reads lines until the node closes stdout and exits; fails past `limit`.
    pub(crate) fn finish(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    bail!(
                        "node {} did not exit within {}",
                        self.name,
                        util::secs(limit)
                    )
                }
            }
        }
        let status = self.child.wait()?;
        if !status.success() {
            bail!(
                "node {} failed ({status}); its last lines: {:?}",
                self.name,
                self.seen.iter().rev().take(5).collect::<Vec<_>>()
            );
        }
        Ok(())
    }

    /// The last line starting with `tag`.
    pub(crate) fn line(&self, tag: &str) -> Option<&str> {
        self.seen
            .iter()
            .rev()
            .find(|l| l.starts_with(tag))
            .map(String::as_str)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs a short node mode (`ceiling`, `clean`) to its end and returns its stdout.
pub(crate) fn run_node(bin: &Path, mode: &str, args: &[String], limit: Duration) -> Result<String> {
    let mut command = Command::new(bin);
    command.arg(mode).args(args);
    let shown = util::show(&command);
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{shown}`"))?;
    let started = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("`{shown}` did not finish within {}", util::secs(limit));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "`{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The value of `key=` in a `TAG key=value ...` line.
pub(crate) fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// A number field of a line.
pub(crate) fn num_field(line: &str, key: &str) -> Option<f64> {
    field(line, key)?.parse().ok()
}

// ----- /proc ------------------------------------------------------------------------------

/// utime + stime of a process in clock ticks, from the text of `/proc/<pid>/stat`.
pub(crate) fn parse_stat_ticks(stat: &str) -> Option<u64> {
    // The command name may hold spaces and parentheses: fields count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU ticks a process has used so far.
pub(crate) fn cpu_ticks(pid: u32) -> Option<u64> {
    parse_stat_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 on Linux when unknown).
pub(crate) fn ticks_per_second() -> f64 {
    util::output_within(
        Command::new("getconf").arg("CLK_TCK"),
        Duration::from_secs(2),
    )
    .and_then(|out| out.trim().parse().ok())
    .unwrap_or(100.0)
}

/// VmRSS in KiB from the text of `/proc/<pid>/status`.
pub(crate) fn parse_rss_kb(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// VmRSS of a process in KiB.
pub(crate) fn rss_kb(pid: u32) -> Option<u64> {
    parse_rss_kb(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// Total CPU ticks of every process whose name is one of `names` (a store server and its
/// workers or backends).
pub(crate) fn ticks_of_named(names: &[&str]) -> Option<u64> {
    if names.is_empty() {
        return None;
    }
    let mut total = 0;
    let mut found = false;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else {
            continue;
        };
        if names.contains(&comm.trim())
            && let Some(t) = cpu_ticks(pid)
        {
            total += t;
            found = true;
        }
    }
    found.then_some(total)
}

/// Busy and total ticks of all CPUs, from the `cpu` line of `/proc/stat`.
pub(crate) fn parse_machine_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = values.iter().take(8).sum();
    // idle and iowait are fields 4 and 5.
    let idle = values.get(3)? + values.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// Busy and total ticks of the machine so far.
pub(crate) fn machine_ticks() -> Option<(u64, u64)> {
    parse_machine_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The share of all CPUs busy between two [`machine_ticks`] readings (`None`: either is
/// missing, or no tick passed).
pub(crate) fn busy_share(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    match (before, after) {
        (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
            Some(b1.saturating_sub(b0) as f64 / (t1 - t0) as f64)
        }
        _ => None,
    }
}

/// The 1, 5 and 15 minute load averages, as `uptime` shows them.
pub(crate) fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".to_owned())
}

/// `N CPUs (model), M GiB`.
pub(crate) fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpus = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU", |(_, m)| m.trim())
        .to_owned();
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    format!("{cpus} CPUs ({model}), {mem_gib:.0} GiB")
}

/// CPU use over a stretch of wall time, as a share of one core (1.0 = one core busy).
pub(crate) fn cores(ticks: u64, ticks_per_second: f64, wall: Duration) -> f64 {
    if wall.is_zero() {
        return 0.0;
    }
    ticks as f64 / ticks_per_second / wall.as_secs_f64()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_bench_node_built_from_another_checkout_is_told_apart() {
        let root = Path::new("/work/main");
        let ours = "/work/main/target/release/examples/bench-node: \
                    /work/main/crates/a/src/lib.rs /work/main/examples/bench-node.rs\n\n\
                    /work/main/examples/bench-node.rs:\n";
        assert_eq!(super::built_from_elsewhere(ours, root), None);
        let theirs = "/work/main/target/release/examples/bench-node: \
                      /tmp/base/crates/a/src/lib.rs /tmp/base/examples/bench-node.rs\n";
        assert_eq!(
            super::built_from_elsewhere(theirs, root).as_deref(),
            Some("/tmp/base/examples/bench-node.rs")
        );
        // A path with a space is written with `\ `; a longer path ending in ours is not ours.
        let spaced = "t: /my\\ dir/examples/bench-node.rs /x.rs\n";
        assert_eq!(
            super::built_from_elsewhere(spaced, Path::new("/my dir")),
            None
        );
        let longer = "t: /tmp/x/work/main/examples/bench-node.rs\n";
        assert!(super::built_from_elsewhere(longer, root).is_some());
        // An unknown format judges nothing.
        assert_eq!(super::built_from_elsewhere("garbage", root), None);
    }

    use super::*;

    #[test]
    fn stat_ticks_count_from_the_last_parenthesis() {
        let stat = "4242 (bench node (x)) S 1 4242 4242 0 -1 4194560 500 0 0 0 120 35 0 0 20 0 3 0 100 0 0";
        assert_eq!(parse_stat_ticks(stat), Some(155));
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn rss_and_machine_ticks_parse() {
        assert_eq!(
            parse_rss_kb("Name:\tx\nVmPeak:\t 9000 kB\nVmRSS:\t    5120 kB\n"),
            Some(5120)
        );
        let stat = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(parse_machine_ticks(stat), Some((150, 1000)));
    }

    #[test]
    fn the_busy_share_needs_two_readings_a_tick_apart() {
        assert_eq!(busy_share(Some((100, 1000)), Some((400, 2000))), Some(0.3));
        assert_eq!(busy_share(Some((100, 1000)), Some((100, 1000))), None);
        assert_eq!(busy_share(None, Some((400, 2000))), None);
        assert_eq!(busy_share(Some((500, 1000)), Some((400, 2000))), Some(0.0));
    }

    #[test]
    fn fields_and_cores_read_as_expected() {
        let line = "COUNTS start=10 skip_late=2 error_ops=claim:3";
        assert_eq!(field(line, "start"), Some("10"));
        assert_eq!(field(line, "skip"), None);
        assert_eq!(num_field(line, "skip_late"), Some(2.0));
        assert_eq!(field(line, "error_ops"), Some("claim:3"));
        assert_eq!(cores(150, 100.0, Duration::from_secs(3)), 0.5);
    }

    #[test]
    fn every_run_gets_its_own_namespace() {
        let dir = RunDir {
            path: PathBuf::from("/tmp/run"),
            id: "abc".into(),
        };
        assert_eq!(
            dir.store_spec(StoreKind::Redis, Some("redis://h:6379")),
            "redis:redis://h:6379#anarchon-bench-abc:"
        );
        assert_eq!(
            dir.store_spec(StoreKind::Postgres, Some("postgres://u@h/db")),
            "postgres:postgres://u@h/db#anarchon_bench_abc"
        );
        assert_eq!(
            dir.store_spec(StoreKind::Sqlite, None),
            "sqlite:/tmp/run/bench.db"
        );
        for kind in StoreKind::ALL {
            assert_eq!(StoreKind::parse(kind.name()).unwrap(), kind);
        }
        assert!(StoreKind::parse("mysql").is_err());
    }
}
