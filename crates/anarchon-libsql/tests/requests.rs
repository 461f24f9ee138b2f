//! What a claim and a result cost in HTTP requests, counted by the Hrana test double
//! (`GET /stats`): a single claim, a batch of claims in one transaction, the same claims one
//! by one, and likewise for results (finish).
//! Runs on a double of its own (this test binary's only test), so no other test's requests
//! are counted. Without python3 it prints a SKIP line.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anarchon_core::store::{
    ClaimOutcome, EpochMs, Finish, HistoryStore, JobName, Lease, LeaseClaim, LeaseStore, Overlap,
    OwnerWrite, Prepare, Reason, Retention, RunStatus, Store,
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
async fn batches_of_claims_and_results_cost_fewer_requests_than_single_calls() {
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
    let mut single_leases = Vec::new();
    for j in &jobs[1..21] {
        match store.claim(&claim(j, t, t)).await.unwrap() {
            ClaimOutcome::Won(l) => single_leases.push(l),
            other => panic!("{other:?}"),
        }
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
    let batch_leases: Vec<Lease> = out
        .into_iter()
        .map(|o| match o {
            ClaimOutcome::Won(l) => l,
            other => panic!("{other:?}"),
        })
        .collect();

    // Results: the 20 runs claimed one by one are finished one by one, the 20 claimed in a
    // batch in one batch.
    let finish = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    };
    let before = tokio::task::spawn_blocking(move || served(port))
        .await
        .unwrap();
    for l in &single_leases {
        assert_eq!(store.finish(l, &finish).await.unwrap(), OwnerWrite::Done);
    }
    let single_finishes = count(before).await.unwrap();
    let writes: Vec<(Lease, Finish)> = batch_leases
        .iter()
        .map(|l| (l.clone(), finish.clone()))
        .collect();
    let before = tokio::task::spawn_blocking(move || served(port))
        .await
        .unwrap();
    let out = store.finish_many(&writes).await.unwrap();
    let batched_finishes = count(before).await.unwrap();
    assert_eq!(out, vec![OwnerWrite::Done; 20]);
    for (l, _) in &writes {
        let row = store.history(&l.run.job, 1).await.unwrap().remove(0);
        assert_eq!(row.status, RunStatus::Succeeded, "{}", l.run);
    }
    // The same results again: every run is final, so all are lost and nothing changes.
    let out = store.finish_many(&writes).await.unwrap();
    assert_eq!(out, vec![OwnerWrite::Lost; 20]);
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
    eprintln!(
        "libSQL HTTP requests: 20 single finishes {single_finishes} ({:.1} each); \
         a batch of 20 results {batched_finishes} ({:.1} each)",
        single_finishes as f64 / 20.0,
        batched_finishes as f64 / 20.0
    );
    assert!(
        batched_finishes + 19 <= single_finishes,
        "a batch of results saves at least a request per result (the transaction's BEGIN and \
         COMMIT): {batched_finishes} vs {single_finishes}"
    );
    store.close().await.unwrap();
}
