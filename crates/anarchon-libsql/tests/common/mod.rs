//! Test helpers: the Hrana test double (`tests/hrana_double.py`) started once per test
//! process, as `conformance.rs` starts it.

#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test binary uses a part of the helpers"
)]

use std::io::Write as _;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The Hrana double for this test process; its stdin pipe is held here, so it exits with us.
static DOUBLE: OnceLock<Option<(String, Mutex<Child>)>> = OnceLock::new();

pub fn double_url() -> Option<String> {
    let started = DOUBLE.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hrana_double.py");
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let db = std::env::temp_dir().join(format!("anarchon-hrana-{}-{port}.db", std::process::id()));
        let child = Command::new("python3")
            .arg(script)
            .arg("--db")
            .arg(&db)
            .arg("--port")
            .arg(port.to_string())
            .arg("--exit-on-stdin-eof")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(child) = child else {
            assert!(
                !require_servers(),
                "python3 (for the Hrana test double) is not available and \
                 ANARCHON_REQUIRE_SERVERS=1: install python3 or set ANARCHON_LIBSQL_URL"
            );
            eprintln!("SKIP libSQL kit: neither ANARCHON_LIBSQL_URL nor python3 (for the Hrana test double) is available");
            return None;
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                assert!(
                    !require_servers(),
                    "the Hrana test double did not listen within 10 s and \
                     ANARCHON_REQUIRE_SERVERS=1"
                );
                eprintln!("SKIP libSQL kit: the Hrana test double did not listen within 10 s");
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut out = std::io::stderr();
        let _ = writeln!(
            out,
            "NOTE libSQL kit runs against tests/hrana_double.py (a test double, not sqld): set ANARCHON_LIBSQL_URL for a real server"
        );
        Some((format!("http://127.0.0.1:{port}"), Mutex::new(child)))
    });
    started.as_ref().map(|(url, _)| url.clone())
}

/// True when `ANARCHON_REQUIRE_SERVERS=1`: the double must start.
fn require_servers() -> bool {
    std::env::var("ANARCHON_REQUIRE_SERVERS").is_ok_and(|v| v == "1")
}

/// The double's URL, or `None` (with a SKIP line) without python3.
pub async fn server() -> Option<String> {
    tokio::task::spawn_blocking(double_url).await.ok().flatten()
}

/// A fresh table prefix.
pub fn prefix(tag: &str) -> String {
    format!("{tag}_{:016x}", rand::random::<u64>())
}
