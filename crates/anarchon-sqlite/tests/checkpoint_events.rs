//! The store's checkpoint thread reports each checkpoint as a `debug` event: what it did to
//! the WAL and how long it took. A test binary of its own, because the thread logs to the
//! process's global subscriber.

mod common;

use std::time::{Duration, Instant};

use anarchon_test_support::CapturedLogs;
use common::TempStore;

/// Claims past 1,000 pages of WAL wake the checkpoint thread, whose `PASSIVE` checkpoint
/// is reported with the WAL's length, the frames it copied and its duration (fails when the
/// event is gone or loses a field: it is what lays a stall of the file's writers beside the
/// checkpoints of the moment, docs/stores.md).
#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_is_reported_with_the_wals_length_and_its_duration() {
    let logs = CapturedLogs::install();
    let ts = TempStore::new().await;
    ts.claim_until_the_wal_holds(5 << 20).await;
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
    let deadline = Instant::now() + Duration::from_secs(5);
    while !reported(&logs.text()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        reported(&logs.text()),
        "no checkpoint reported: {}",
        logs.text()
    );
}
