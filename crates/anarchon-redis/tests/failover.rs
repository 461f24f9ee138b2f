//! Slow suite (`ANARCHON_SLOW=1`): a Redis server this test starts itself is killed and
//! restarted while three instances claim slots. [B-10, B-11, B-29, B-41]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anarchon_core::store::{
    ClaimOutcome, HistoryStore, LeaseClaim, LeaseStore, Overlap, Prepare, Reason, Retention,
    RunKey, Store,
};
use anarchon_core::testkit::unique_job;
use anarchon_redis::RedisStore;
use anarchon_test_support::OwnRedis;
use common::options;

const GRID_MS: i64 = 200;

fn host_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// How long after its slot a claim of the restart test may still be run.
const NOT_AFTER_MS: i64 = 300;

/// The server is SIGKILLed mid-run and restarted 1.5 s later on the same port (its
/// append-only file keeps every acknowledged write). The instances reconnect by themselves,
/// claim again, and no slot is ever started twice: claims buffered during the outage reach
/// the server after their deadline and are refused by the script. A release after the
/// restart still reaches the subscriber (it subscribed again).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "slow suite: ANARCHON_SLOW=1 cargo xtask test"]
async fn b29_server_restart_reconnects_without_duplicate_start() {
    let Some(mut server) = OwnRedis::start() else {
        return;
    };
    let opts = options()
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(2))
        .reconnect_delay(Duration::from_millis(50), Duration::from_millis(400));
    let job = unique_job("restart");
    let mut stores = Vec::new();
    for i in 0..3 {
        let s = Arc::new(
            RedisStore::connect_with(&server.url(), opts.clone())
                .await
                .unwrap(),
        );
        s.prepare(&Prepare {
            jobs: vec![job.clone()],
            instance_id: format!("i{i}"),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .unwrap();
        stores.push(s);
    }
    let mut releases = stores[2].subscribe_releases().unwrap();

    // (slot, instance) -> outcome text; wins per slot.
    let wins: Arc<Mutex<BTreeMap<i64, Vec<String>>>> = Arc::default();
    // Slots whose claim call failed on some instance (timed out, connection lost).
    let failed: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
    let run_for = Duration::from_secs(7);
    let began = Instant::now();
    let mut tasks = Vec::new();
    for (i, s) in stores.iter().enumerate() {
        let (s, wins, failed, job) = (s.clone(), wins.clone(), failed.clone(), job.clone());
        tasks.push(tokio::spawn(async move {
            let mut last = 0;
            while began.elapsed() < run_for {
                let slot = host_ms() / GRID_MS * GRID_MS;
                if slot == last {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                last = slot;
                tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 30)).await;
                let c = LeaseClaim {
                    run: RunKey::new(job.clone(), slot),
                    scheduled_at: slot,
                    instance_id: format!("i{i}"),
                    lease_ms: 5_000,
                    not_after: slot + NOT_AFTER_MS,
                    overlap: Overlap::Allow,
                    reason: Reason::Scheduled,
                    retention: Retention::default(),
                };
                match s.claim(&c).await {
                    Ok(ClaimOutcome::Won(_)) => wins
                        .lock()
                        .unwrap()
                        .entry(slot)
                        .or_default()
                        .push(format!("i{i}")),
                    Ok(_) => {}
                    Err(_) => {
                        failed.lock().unwrap().insert(slot);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    server.kill();
    let killed_at = host_ms();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    server.restart();
    let restarted_at = host_ms();
    for t in tasks {
        t.await.unwrap();
    }

    let wins = wins.lock().unwrap().clone();
    eprintln!(
        "slots won: {}, slots whose claim failed: {}, slots won after the restart: {}",
        wins.len(),
        failed.lock().unwrap().len(),
        wins.keys().filter(|&&s| s > restarted_at).count()
    );
    let duplicates: Vec<_> = wins.iter().filter(|(_, w)| w.len() > 1).collect();
    assert!(duplicates.is_empty(), "slots started twice: {duplicates:?}");
    assert!(
        wins.keys().any(|&s| s < killed_at),
        "no claim before the kill"
    );
    assert!(
        wins.keys().filter(|&&s| s > restarted_at + 500).count() >= 5,
        "the instances did not reconnect and claim again: {wins:?}"
    );
    assert!(
        !failed.lock().unwrap().is_empty(),
        "the outage went unnoticed"
    );
    // Nothing started behind the instances' backs when buffered commands reached the
    // restarted server: every run the server holds was won by a claim that got its answer,
    // except a claim the server ran in time while its caller gave up on it (the command
    // timeout on a loaded machine, the kill cutting the answer off), which a backup takes
    // over once its lease ends. "In time": the run's `started_at`, the server's clock (this
    // host's) when the script ran, is not past the claim's `not_after` (slot + 300 ms); a
    // claim buffered through the outage reaches the server later than that and is refused.
    let h = stores[0].history(&job, 1000).await.unwrap();
    let stored: BTreeSet<i64> = h.iter().map(|r| r.slot).collect();
    let answered: BTreeSet<i64> = wins.keys().copied().collect();
    let failed = failed.lock().unwrap().clone();
    let unanswered: Vec<(i64, i64)> = h
        .iter()
        .filter(|r| !answered.contains(&r.slot))
        .map(|r| (r.slot, r.started_at))
        .collect();
    assert!(
        unanswered
            .iter()
            .all(|(slot, started)| failed.contains(slot) && *started <= slot + NOT_AFTER_MS),
        "runs in the store that no instance was told it won (slot, started at): \
         {unanswered:?}; claims that failed: {failed:?}; the server was killed at \
         {killed_at} and restarted at {restarted_at}"
    );
    assert!(
        answered.is_subset(&stored),
        "won runs missing from the store: {:?}",
        answered.difference(&stored).collect::<Vec<_>>()
    );

    // Release notifications survive the restart: the subscriber subscribed again.
    let t = stores[0].now().await.unwrap();
    let c = LeaseClaim {
        run: RunKey::new(job.clone(), t + 1),
        scheduled_at: t,
        instance_id: "i0".into(),
        lease_ms: 5_000,
        not_after: t + 60_000,
        overlap: Overlap::Allow,
        reason: Reason::Scheduled,
        retention: Retention::default(),
    };
    let ClaimOutcome::Won(lease) = stores[0].claim(&c).await.unwrap() else {
        panic!("claim after restart")
    };
    stores[0].release(&lease).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            match releases.recv().await {
                Ok(k) if k == lease.run => return k,
                Ok(_) => continue,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    assert!(got.is_ok(), "no release notification after the restart");
    for s in stores {
        s.close().await.unwrap();
    }
}
