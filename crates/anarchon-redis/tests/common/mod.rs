//! Helpers of the Redis store's own tests: a private `redis-server` on a free port, options
//! with a fresh prefix, and an admin client.
#![allow(dead_code, unreachable_pub)] // Each test binary uses a different part of it.

pub mod cluster;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anarchon_redis::RedisOptions;
use anarchon_redis::fred::prelude::*;

/// Options with a fresh key prefix.
pub fn options() -> RedisOptions {
    RedisOptions::default().prefix(format!("anarchon-test-{:016x}:", rand::random::<u64>()))
}

/// A connected plain client, to look at and tamper with keys.
pub async fn admin(url: &str) -> Client {
    let client = Builder::from_config(Config::from_url(url).unwrap())
        .build()
        .unwrap();
    client.init().await.unwrap();
    client
}

/// A `redis-server` (or `valkey-server`) this test started itself on a free port, with an
/// append-only file fsynced on every write, so a killed and restarted server keeps every
/// acknowledged claim. Killed on drop.
pub struct OwnServer {
    pub binary: &'static str,
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    extra: Vec<String>,
}

/// Finds a server binary, or prints a SKIP line (a failure under
/// `ANARCHON_REQUIRE_SERVERS=1`).
pub fn server_binary(name: &'static str) -> Option<&'static str> {
    let found = Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(name);
    }
    if anarchon_core::testkit::require_servers() {
        panic!(
            "{name} is not installed and ANARCHON_REQUIRE_SERVERS=1: install it (apt-get install {name})"
        );
    }
    eprintln!("SKIP {name} is not installed: this test starts its own server and did not run");
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl OwnServer {
    /// Starts `binary` on a free port; `None` (after a SKIP line) when it is not installed.
    pub fn start(binary: &'static str, extra: &[&str]) -> Option<OwnServer> {
        let binary = server_binary(binary)?;
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "anarchon-redis-test-{port}-{:08x}",
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = OwnServer {
            binary,
            port,
            dir,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.spawn();
        Some(s)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(self.binary);
        cmd.args([
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "yes", "--appendfsync", "always"])
        .arg("--dir")
        .arg(&self.dir)
        .args(&self.extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        self.child = Some(cmd.spawn().expect("start server"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "{} did not listen on {}",
                self.binary,
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs the server (no graceful shutdown).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and data folder.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Runs `redis-cli` against it (for CLIENT PAUSE).
    pub fn cli(&self, args: &[&str]) {
        let status = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli");
        assert!(status.success());
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
