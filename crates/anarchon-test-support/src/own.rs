//! Servers a test starts for itself on spare loopback ports, so it can pause (SIGSTOP),
//! kill and restart them without touching the shared test servers: a nats-server, a
//! `redis-server` with an append-only file, a PostgreSQL cluster (`initdb` as user
//! `postgres`), and for SQLite a process that holds the file's write lock. Each is stopped
//! by its PID when dropped. Without the program, `start` says so through [`unobtainable`]
//! and gives `None`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::servers::{spare_port, unobtainable};

/// A folder of its own under the system's temporary folder.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "anarchon-{name}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// How a server this test started came up.
enum Came {
    /// Its own log says it listens.
    Ready,
    /// It exited: on a fresh spare port, most likely because another process took the port
    /// between [`spare_port`] and the server's bind.
    Exited,
}

/// Waits until the server `child` writes `ready` to its log file `log` (it listens), or exits.
///
/// A port that answers is not enough: it may be another test process's server that took the
/// spare port first, while this one failed to bind and exited (seen in CI: a secrets test
/// connected with a wrong password to a nats-server of another test, which had no
/// password).
fn wait_ready(child: &mut Child, log: &Path, ready: &str, what: &str) -> Came {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if std::fs::read_to_string(log).is_ok_and(|text| text.contains(ready)) {
            return Came::Ready;
        }
        if child.try_wait().ok().flatten().is_some() {
            return Came::Exited;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not say `{ready}` within 10 s; see {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last lines of a server's log, for a failure message.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

/// How many spare ports a fresh server tries before the test gives up.
const PORT_TRIES: usize = 5;

/// A server process a test starts on a port of its own and waits for ([`wait_ready`]).
trait OwnServer {
    /// What the server is called in a failure message.
    const NAME: &'static str;
    /// Starts the process on [`port`](Self::port) and waits for it.
    fn spawn(&mut self) -> Came;
    fn port(&self) -> u16;
    /// Forgets an exited process and moves to another port.
    fn move_to(&mut self, port: u16);
    fn log(&self) -> PathBuf;
}

/// Starts `server` on its port, then on spare ports while it exits at start (another
/// process took the port), [`PORT_TRIES`] in all.
fn come_up<S: OwnServer>(mut server: S) -> S {
    for _ in 1..PORT_TRIES {
        if let Came::Ready = server.spawn() {
            return server;
        }
        server.move_to(spare_port());
    }
    spawn_on_its_port(&mut server);
    server
}

/// Starts `server` on its port (a restart keeps it); panics with its log's tail when it
/// exits at start.
fn spawn_on_its_port<S: OwnServer>(server: &mut S) {
    if let Came::Exited = server.spawn() {
        panic!(
            "{} on port {} exited at start: {}",
            S::NAME,
            server.port(),
            log_tail(&server.log())
        );
    }
}

/// Finds nats-server: `ANARCHON_NATS_SERVER`, then `nats-server` on `PATH`, then
/// `/usr/sbin/nats-server`; without one, [`unobtainable`].
fn nats_server_binary() -> Option<String> {
    let candidates = std::env::var("ANARCHON_NATS_SERVER")
        .ok()
        .into_iter()
        .chain(["nats-server".to_owned(), "/usr/sbin/nats-server".to_owned()]);
    for c in candidates {
        let ok = Command::new(&c)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(c);
        }
    }
    unobtainable(
        "nats-server is not installed",
        "install it (apt-get install nats-server) or point ANARCHON_NATS_SERVER at one; the \
         test starts a server of its own",
    );
    None
}

/// A nats-server this test started on a spare loopback port; SIGKILLed (by its PID) and
/// its folder removed on drop.
#[derive(Debug)]
pub struct OwnNats {
    binary: String,
    /// The port it listens on.
    pub port: u16,
    /// Its storage folder (`-sd`).
    pub dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl OwnNats {
    /// Starts nats-server with these extra arguments (`-js` for JetStream); `None` after
    /// [`unobtainable`] when it is not installed.
    pub fn start(extra: &[&str]) -> Option<OwnNats> {
        Self::start_trying(spare_port(), extra)
    }

    /// [`start`](Self::start), trying `port` first and spare ports after it while the
    /// server exits at start (another process holds the port).
    fn start_trying(port: u16, extra: &[&str]) -> Option<OwnNats> {
        let binary = nats_server_binary()?;
        let dir = scratch_dir("nats-test");
        Some(come_up(OwnNats {
            binary,
            port,
            dir,
            args: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        }))
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// SIGKILLs the server.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and storage folder.
    pub fn restart(&mut self) {
        self.kill();
        spawn_on_its_port(self);
    }
}

impl OwnServer for OwnNats {
    const NAME: &'static str = "nats-server";

    /// Starts the server on its port and waits until its own log says it is ready.
    fn spawn(&mut self) -> Came {
        let log = self.log();
        let _ = std::fs::remove_file(&log);
        let mut cmd = Command::new(&self.binary);
        cmd.args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"])
            .arg(&self.dir)
            .arg("-l")
            .arg(&log)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("start nats-server");
        let came = wait_ready(&mut child, &log, "Server is ready", Self::NAME);
        self.child = Some(child);
        came
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn move_to(&mut self, port: u16) {
        self.child = None;
        self.port = port;
    }

    fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn kill(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status();
}

/// Is `redis-server` installed? Without it, [`unobtainable`] (a `SKIP` line, or a panic
/// under `ANARCHON_REQUIRE_SERVERS=1`) and `false`.
pub fn redis_server_installed() -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        unobtainable(
            "redis-server is not installed",
            "cargo xtask test-servers --install; the test starts a server of its own",
        );
    }
    found
}

/// A `redis-server` of this test on a spare loopback port, persisting every write
/// (`appendfsync always`), so a kill and restart loses nothing that was acknowledged.
/// SIGKILLed (by its PID) and its folder removed on drop.
#[derive(Debug)]
pub struct OwnRedis {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

impl OwnRedis {
    /// Starts one; `None` (after [`unobtainable`]) when `redis-server` is not installed.
    pub fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// Starts one with these extra arguments (`--requirepass`, `--user` ...); `None` (after
    /// [`unobtainable`]) when `redis-server` is not installed.
    pub fn start_with(extra: &[&str]) -> Option<Self> {
        Self::start_trying(spare_port(), extra)
    }

    /// [`start_with`](Self::start_with), trying `port` first and spare ports after it while
    /// the server exits at start (another process holds the port).
    fn start_trying(port: u16, extra: &[&str]) -> Option<Self> {
        if !redis_server_installed() {
            return None;
        }
        Some(come_up(OwnRedis {
            child: None,
            port,
            dir: scratch_dir("redis"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        }))
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Freezes (`true`) or thaws the server: while frozen no call is answered.
    pub fn freeze(&self, frozen: bool) {
        if let Some(c) = &self.child {
            kill(c.id(), if frozen { "STOP" } else { "CONT" });
        }
    }

    /// SIGKILLs the server (no graceful shutdown); [`restart`](Self::restart) brings it back.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(c.id(), "CONT");
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, data folder and arguments (after a SIGKILL if it
    /// still runs).
    pub fn restart(&mut self) {
        self.kill();
        spawn_on_its_port(self);
    }

    /// SIGKILL, then a new server on the same port and data.
    pub fn kill_and_restart(&mut self) {
        self.restart();
    }

    /// Runs `redis-cli -p <port> <args>` against it (`CLIENT PAUSE 1000`); panics when it
    /// fails.
    pub fn cli(&self, args: &[&str]) {
        let status = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli");
        assert!(status.success(), "redis-cli {args:?} failed");
    }
}

impl OwnServer for OwnRedis {
    const NAME: &'static str = "redis-server";

    /// Starts the server on its port and waits until its own log says it accepts
    /// connections.
    fn spawn(&mut self) -> Came {
        let log = self.log();
        let _ = std::fs::remove_file(&log);
        let mut child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
            ])
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let came = wait_ready(&mut child, &log, "Ready to accept connections", Self::NAME);
        self.child = Some(child);
        came
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn move_to(&mut self, port: u16) {
        self.child = None;
        self.port = port;
    }

    fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A PostgreSQL cluster of this test, run as user `postgres` from the Debian binaries.
pub struct OwnPostgres {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
}

impl OwnPostgres {
    /// Creates and starts one; `None` (with a `SKIP` line) when the binaries or the
    /// `postgres` user are missing.
    pub fn start() -> Option<Self> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("initdb").is_file())
            .max();
        let Some(bin) = bin else {
            unobtainable(
                "no PostgreSQL server binaries under /usr/lib/postgresql",
                "cargo xtask test-servers --install; the test starts a cluster of its own",
            );
            return None;
        };
        let dir = scratch_dir("pg");
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status();
        let data = dir.join("data");
        let ok = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(bin.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            unobtainable(
                "initdb as user postgres failed",
                "the test needs the user postgres and runuser (run it as root)",
            );
            let _ = std::fs::remove_dir_all(&dir);
            return None;
        }
        let pg = OwnPostgres {
            bin,
            dir,
            port: spare_port(),
        };
        pg.ctl(&["start", "-w", "-t", "20"]);
        Some(pg)
    }

    fn ctl(&self, args: &[&str]) {
        let data = self.dir.join("data");
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=on -c max_connections=200",
            self.port,
            self.dir.display()
        );
        let ok = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(args)
            .arg("-D")
            .arg(&data)
            .args(["-o", &opts, "-l"])
            .arg(self.dir.join("log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "pg_ctl {args:?} failed; see {}",
            self.dir.join("log").display()
        );
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The postmaster and every process it started.
    fn pids(&self) -> Vec<u32> {
        let Ok(text) = std::fs::read_to_string(self.dir.join("data").join("postmaster.pid")) else {
            return Vec::new();
        };
        let Some(master) = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<u32>().ok())
        else {
            return Vec::new();
        };
        let mut pids = vec![master];
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for e in entries.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                    continue;
                };
                let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
                // The parent pid is the 4th field, after the `(comm)` that may hold spaces.
                let ppid = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                    .and_then(|p| p.parse::<u32>().ok());
                if ppid == Some(master) {
                    pids.push(pid);
                }
            }
        }
        pids
    }

    /// Freezes (`true`) or thaws every process of the cluster.
    pub fn freeze(&self, frozen: bool) {
        for pid in self.pids() {
            kill(pid, if frozen { "STOP" } else { "CONT" });
        }
    }

    /// An immediate shutdown (as a crash: recovery from the WAL), then a start.
    pub fn crash_and_restart(&self) {
        self.freeze(false);
        self.ctl(&["stop", "-m", "immediate", "-w"]);
        self.ctl(&["start", "-w", "-t", "20"]);
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        self.freeze(false);
        let data = self.dir.join("data");
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["stop", "-m", "immediate", "-D"])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A process that holds an SQLite file's write lock (`BEGIN EXCLUSIVE`) until released: an
/// outage of the SQLite store as its other processes see it.
pub struct SqliteLock {
    child: Child,
}

impl SqliteLock {
    /// Takes the lock (Python's sqlite3 module); `None` with a `SKIP` line without python3.
    pub fn take(path: &Path) -> Option<Self> {
        let script = "import sqlite3, sys\n\
            c = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)\n\
            c.execute('BEGIN EXCLUSIVE')\n\
            print('LOCKED', flush=True)\n\
            sys.stdin.read()\n\
            c.execute('ROLLBACK')\n";
        let mut child = match Command::new("python3")
            .args(["-c", script])
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(_) => {
                unobtainable(
                    "python3 is not installed",
                    "the test holds an SQLite lock from another process with Python's sqlite3",
                );
                return None;
            }
        };
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).ok();
        assert!(
            line.starts_with("LOCKED"),
            "the lock holder did not lock: {line:?}"
        );
        Some(SqliteLock { child })
    }
}

impl Drop for SqliteLock {
    fn drop(&mut self) {
        // Closing stdin lets it roll back and exit.
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server whose spare port another process took meanwhile starts on another port, and
    /// is the one that answers there: its log says so (fails with a port-only wait, which
    /// took the other server's answer for its own).
    #[test]
    fn a_server_whose_port_was_taken_starts_on_another() {
        let Some(first) = OwnNats::start(&[]) else {
            return;
        };
        let second = OwnNats::start_trying(first.port, &[]).expect("nats-server");
        assert_ne!(second.port, first.port);
        let log = std::fs::read_to_string(second.log()).unwrap();
        assert!(log.contains(&format!("127.0.0.1:{}", second.port)), "{log}");
        drop(first);
        let Some(first) = OwnRedis::start() else {
            return;
        };
        let second = OwnRedis::start_trying(first.port, &[]).expect("redis-server");
        assert_ne!(second.port, first.port);
        let mut again = second;
        again.restart();
        assert!(
            std::fs::read_to_string(again.log())
                .unwrap()
                .contains("Ready to accept connections")
        );
    }
}
