//! Several processes opening one fresh database file at the same moment all succeed (the
//! quick start and the cluster tests start three at once). The switch to WAL answers BUSY at
//! once, without the busy handler, while another process holds the file: the store retries.

use std::process::Command;
use std::time::Duration;

/// Child mode: open the store named by `ANARCHON_OPEN_RACE_FILE` and exit 0 on success.
#[test]
fn child_open() {
    let Ok(path) = std::env::var("ANARCHON_OPEN_RACE_FILE") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        anarchon_sqlite::SqliteStore::connect_with(
            &path,
            anarchon_sqlite::SqliteOptions::default().busy_timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap_or_else(|e| panic!("open {path}: {e}"));
    });
}

#[test]
fn b43_processes_opening_a_fresh_file_at_once_all_succeed() {
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rounds = if std::env::var("ANARCHON_SLOW").is_ok_and(|v| v == "1") {
        60
    } else {
        15
    };
    for round in 0..rounds {
        let path = dir.path().join(format!("race-par-{round}.db"));
        let children: Vec<_> = (0..4)
            .map(|_| {
                Command::new(&exe)
                    .args(["--exact", "child_open", "--nocapture", "--test-threads=1"])
                    .env("ANARCHON_OPEN_RACE_FILE", &path)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: a process failed to open the fresh file: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
}
