//! The store's checkpoint thread reports each checkpoint as a `debug` event: what it did to
//! the WAL and how long it took. A test binary of its own, because the thread logs to the
//! process's global subscriber.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anarchon_core::store::{LeaseStore, Store};
use anarchon_core::testkit::lease::claim;
use anarchon_core::testkit::unique_job;
use common::TempStore;
use tracing_subscriber::fmt::MakeWriter;

/// Every line the global subscriber writes.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Lines {
    type Writer = Lines;
    fn make_writer(&'a self) -> Lines {
        self.clone()
    }
}

impl Lines {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Claims past 1,000 pages of WAL wake the checkpoint thread, whose `PASSIVE` checkpoint
/// is reported with the WAL's length, the frames it copied and its duration (fails when the
/// event is gone or loses a field: it is what lays a stall of the file's writers beside the
/// checkpoints of the moment, docs/stores.md).
#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_is_reported_with_the_wals_length_and_its_duration() {
    let lines = Lines::default();
    tracing_subscriber::fmt()
        .with_env_filter("anarchon_sqlite::checkpoint=debug")
        .with_writer(lines.clone())
        .with_ansi(false)
        .init();
    let ts = TempStore::new().await;
    let store = &ts.store;
    let wal = ts.path().with_extension("db-wal");
    let t = store.now().await.unwrap();
    let mut claimed = 0;
    while std::fs::metadata(&wal).map_or(0, |m| m.len()) < 5 << 20 {
        let claims: Vec<_> = (0..256)
            .map(|_| claim(&unique_job("ckpt"), t, "a", t))
            .collect();
        store.claim_many(&claims).await.unwrap();
        claimed += 256;
        assert!(claimed < 100_000, "the WAL did not grow");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let reported = |text: &str| {
        text.lines().any(|l| {
            l.contains("SQLite checkpoint")
                && l.contains("mode=Passive")
                && l.contains("busy=false")
                && l.contains("wal_frames=")
                && l.contains("copied_frames=")
                && l.contains("took_us=")
        })
    };
    while !reported(&lines.text()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        reported(&lines.text()),
        "no checkpoint reported: {}",
        lines.text()
    );
}
