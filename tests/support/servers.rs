//! Store servers a slow test starts for itself on spare loopback ports, so it can pause
//! (SIGSTOP), kill and restart them without touching the shared test servers: a
//! `redis-server` with an append-only file, a PostgreSQL cluster (`initdb` as user
//! `postgres`), and for SQLite a process that holds the file's write lock. Each is stopped
//! by its PID when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::now_ms;

/// A free TCP port on 127.0.0.1 (bound and released at once).
pub(crate) fn spare_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a spare loopback port")
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "anarchon-{name}-{}-{}",
        std::process::id(),
        now_ms()
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn wait_port(port: u16, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn kill(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status();
}

/// A `redis-server` of this test, persisting every write (`appendfsync always`), so a kill
/// and restart loses nothing that was acknowledged.
pub(crate) struct OwnRedis {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl OwnRedis {
    /// Starts one; `None` (with a `SKIP` line) when `redis-server` is not installed.
    pub(crate) fn start() -> Option<Self> {
        if Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_err()
        {
            eprintln!("SKIP: redis-server is not installed (cargo xtask test-servers --install)");
            return None;
        }
        let mut r = OwnRedis {
            child: None,
            port: spare_port(),
            dir: scratch_dir("redis"),
        };
        r.spawn();
        Some(r)
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
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
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        assert!(
            wait_port(self.port, Duration::from_secs(10)),
            "redis-server on {} did not listen",
            self.port
        );
    }

    /// `redis://127.0.0.1:<port>`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Freezes (`true`) or thaws the server: while frozen no call is answered.
    pub(crate) fn freeze(&self, frozen: bool) {
        if let Some(c) = &self.child {
            kill(c.id(), if frozen { "STOP" } else { "CONT" });
        }
    }

    /// SIGKILL, then a new server on the same port and data.
    pub(crate) fn kill_and_restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.spawn();
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(c.id(), "CONT");
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A PostgreSQL cluster of this test, run as user `postgres` from the Debian binaries.
pub(crate) struct OwnPostgres {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
}

impl OwnPostgres {
    /// Creates and starts one; `None` (with a `SKIP` line) when the binaries or the
    /// `postgres` user are missing.
    pub(crate) fn start() -> Option<Self> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("initdb").is_file())
            .max();
        let Some(bin) = bin else {
            eprintln!("SKIP: no PostgreSQL server binaries (cargo xtask test-servers --install)");
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
            eprintln!("SKIP: initdb as user postgres failed");
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
    pub(crate) fn url(&self) -> String {
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
    pub(crate) fn freeze(&self, frozen: bool) {
        for pid in self.pids() {
            kill(pid, if frozen { "STOP" } else { "CONT" });
        }
    }

    /// An immediate shutdown (as a crash: recovery from the WAL), then a start.
    pub(crate) fn crash_and_restart(&self) {
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
pub(crate) struct SqliteLock {
    child: Child,
}

impl SqliteLock {
    /// Takes the lock (Python's sqlite3 module); `None` with a `SKIP` line without python3.
    pub(crate) fn take(path: &Path) -> Option<Self> {
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
                eprintln!("SKIP: python3 is needed to hold an SQLite lock");
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
