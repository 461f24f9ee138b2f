//! What a claim costs in HTTP requests, counted by the Hrana test double (`GET /stats`):
//! a single claim, a batch of claims in one transaction, and the same claims one by one.
//! Runs on a double of its own (this test binary's only test), so no other test's requests
//! are counted. Without python3 it prints a SKIP line.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anarchon_core::store::{
    ClaimOutcome, EpochMs, JobName, LeaseClaim, LeaseStore, Overlap, Prepare, Reason, Retention,
    Store,
};
use anarchon_core::testkit::{key, unique_job};
use anarchon_libsql::{LibsqlOptions, LibsqlStore};

struct Double {
    port: u16,
    _child: Child,
}

fn start_double() -> Option<Double> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hrana_double.py");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let db = std::env::temp_dir().join(format!(
        "anarchon-hrana-rq-{}-{port}.db",
        std::process::id()
    ));
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
        eprintln!(
            "SKIP libSQL request count: python3 (for the Hrana test double) is not available"
        );
        return None;
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            eprintln!(
                "SKIP libSQL request count: the Hrana test double did not listen within 10 s"
            );
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(Double {
        port,
        _child: child,
    })
}

/// The requests the double has served so far.
fn served(port: u16) -> u64 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the double");
    write!(
        s,
        "GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    body.split("\"requests\":")
        .nth(1)
        .and_then(|rest| rest.trim().trim_end_matches('}').trim().parse().ok())
        .unwrap_or_else(|| panic!("unexpected /stats answer {text:?}"))
}

fn claim(job: &JobName, slot: EpochMs, now: EpochMs) -> LeaseClaim {
    LeaseClaim {
        run: key(job, slot),
        scheduled_at: slot,
        instance_id: "a".into(),
        lease_ms: 30_000,
        not_after: now + 60_000,
        overlap: Overlap::Skip,
        reason: Reason::Scheduled,
        retention: Retention::default(),
    }
}

#[tokio::test]
async fn a_batch_of_claims_costs_fewer_requests_than_single_claims() {
    let Some(double) = tokio::task::spawn_blocking(start_double).await.unwrap() else {
        return;
    };
    let port = double.port;
    let store = LibsqlStore::connect_with(
        format!("http://127.0.0.1:{port}"),
        LibsqlOptions::default().table(format!("rq_{:08x}", rand::random::<u32>())),
    )
    .await
    .expect("store");
    let jobs: Vec<JobName> = (0..41).map(|_| unique_job("rq")).collect();
    store
        .prepare(&Prepare {
            jobs: jobs.clone(),
            instance_id: "a".into(),
            call_timeout: Duration::from_secs(10),
        })
        .await
        .expect("prepare");
    let t = store.now().await.unwrap();
    let count = |before: u64| tokio::task::spawn_blocking(move || served(port) - before - 1);

    let before = tokio::task::spawn_blocking(move || served(port))
        .await
        .unwrap();
    let out = store.claim(&claim(&jobs[0], t, t)).await.unwrap();
    assert!(matches!(out, ClaimOutcome::Won(_)), "{out:?}");
    let one = count(before).await.unwrap();

    let before = tokio::task::spawn_blocking(move || served(port))
        .await
        .unwrap();
    for j in &jobs[1..21] {
        let out = store.claim(&claim(j, t, t)).await.unwrap();
        assert!(matches!(out, ClaimOutcome::Won(_)), "{out:?}");
    }
    let singles = count(before).await.unwrap();

    let batch: Vec<LeaseClaim> = jobs[21..].iter().map(|j| claim(j, t, t)).collect();
    let before = tokio::task::spawn_blocking(move || served(port))
        .await
        .unwrap();
    let out = store.claim_many(&batch).await.unwrap();
    assert!(
        out.iter().all(|o| matches!(o, ClaimOutcome::Won(_))),
        "{out:?}"
    );
    let batched = count(before).await.unwrap();

    eprintln!(
        "libSQL HTTP requests: one claim {one}; 20 single claims {singles} ({:.1} each); \
         a batch of 20 claims {batched} ({:.1} each)",
        singles as f64 / 20.0,
        batched as f64 / 20.0
    );
    // A dropped stream is closed by a request the client sends in the background, so a
    // window may count one request more or less.
    assert!(
        (7..=12).contains(&one),
        "a single claim costs about ten requests: {one}"
    );
    assert!(
        batched + 19 <= singles,
        "a batch saves at least a request per claim (the transaction's BEGIN and COMMIT): \
         {batched} vs {singles}"
    );
    store.close().await.unwrap();
}
