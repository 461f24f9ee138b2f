//! What claims, results and takeovers cost in HTTP requests, counted by the Hrana test
//! double (`GET /stats`): a batch (one Hrana batch, then one statement that reads the
//! outcomes back: `describe`, `cursor`, and the stream's `close` the client sends in the
//! background) costs the same four requests for 1, 20 or 64 items; single calls are
//! batches of one.
//! Runs on a double of its own (this test binary's only test), so no other test's requests
//! are counted. Without python3 it prints a SKIP line.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anarchon_core::store::{
    ClaimOutcome, EpochMs, Finish, HistoryStore, JobName, Lease, LeaseClaim, LeaseStore, Overlap,
    OwnerWrite, Prepare, Reason, Retention, RunStatus, Store, Takeover, TakeoverOutcome,
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

/// The requests `f` costs: counted after the background `close` of the call before it and
/// of this one had time to arrive (a settling pause, not a timed assertion: a late `close`
/// only moves one request between windows, and the bounds below allow that).
/// Prints the wall time too (information only: the double is local and in Python).
async fn cost<T, F: std::future::Future<Output = T>>(what: &str, port: u16, f: F) -> (u64, T) {
    tokio::time::sleep(Duration::from_millis(150)).await;
    let before = tokio::task::spawn_blocking(move || served(port))
        .await
        .unwrap();
    let started = Instant::now();
    let out = f.await;
    eprintln!(
        "libSQL wall time on the double: {what}: {:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    let after = tokio::task::spawn_blocking(move || served(port))
        .await
        .unwrap();
    (after - before, out)
}

fn won(out: Vec<ClaimOutcome>) -> Vec<Lease> {
    out.into_iter()
        .map(|o| match o {
            ClaimOutcome::Won(l) => l,
            other => panic!("{other:?}"),
        })
        .collect()
}

/// Four requests per batch: the Hrana batch, and `describe`, `cursor` and `close` of the
/// statement that reads the outcomes back.
const PER_BATCH: std::ops::RangeInclusive<u64> = 3..=4;

#[tokio::test]
async fn a_batch_of_64_claims_results_or_takeovers_costs_four_requests_like_a_single_call() {
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
    let jobs: Vec<JobName> = (0..150).map(|_| unique_job("rq")).collect();
    store
        .prepare(&Prepare {
            jobs: jobs.clone(),
            instance_id: "a".into(),
            call_timeout: Duration::from_secs(10),
        })
        .await
        .expect("prepare");
    let t = store.now().await.unwrap();

    let (one, out) = cost("one claim", port, store.claim(&claim(&jobs[0], t, t))).await;
    assert!(matches!(out, Ok(ClaimOutcome::Won(_))), "{out:?}");

    let (singles, single_leases) = cost("20 single claims", port, async {
        let mut leases = Vec::new();
        for j in &jobs[1..21] {
            leases.push(won(vec![store.claim(&claim(j, t, t)).await.unwrap()]).remove(0));
        }
        leases
    })
    .await;

    let batch20: Vec<LeaseClaim> = jobs[21..41].iter().map(|j| claim(j, t, t)).collect();
    let (batched20, out) = cost("a batch of 20 claims", port, store.claim_many(&batch20)).await;
    assert_eq!(won(out.unwrap()).len(), 20);

    let batch64: Vec<LeaseClaim> = jobs[41..105].iter().map(|j| claim(j, t, t)).collect();
    let (batched64, out) = cost("a batch of 64 claims", port, store.claim_many(&batch64)).await;
    let leases64 = won(out.unwrap());
    assert_eq!(leases64.len(), 64);
    // Taken: the same 64 again.
    let (taken64, out) = cost("64 taken claims", port, store.claim_many(&batch64)).await;
    assert!(
        out.unwrap().iter().all(|o| *o == ClaimOutcome::Taken),
        "a claim of a taken slot is Taken"
    );

    let finish = Finish {
        status: RunStatus::Succeeded,
        error: Some("it's done; -- really".into()),
        retention: Retention::default(),
    };
    let (single_finishes, _) = cost("20 single finishes", port, async {
        for l in &single_leases {
            assert_eq!(store.finish(l, &finish).await.unwrap(), OwnerWrite::Done);
        }
    })
    .await;
    let writes: Vec<(Lease, Finish)> = leases64
        .iter()
        .map(|l| (l.clone(), finish.clone()))
        .collect();
    let (finished64, out) = cost("a batch of 64 results", port, store.finish_many(&writes)).await;
    assert_eq!(out.unwrap(), vec![OwnerWrite::Done; 64]);
    for (l, _) in &writes[..3] {
        let row = store.history(&l.run.job, 1).await.unwrap().remove(0);
        assert_eq!(row.status, RunStatus::Succeeded, "{}", l.run);
        assert_eq!(row.error, finish.error);
    }
    // The same results again: every run is final, so all are lost and nothing changes.
    let out = store.finish_many(&writes).await.unwrap();
    assert_eq!(out, vec![OwnerWrite::Lost; 64]);

    // Takeovers: 64 runs whose 1 ms leases ended (a slot after finished runs of the jobs,
    // or of jobs not claimed before: an unfinished earlier run would make it an overlap).
    let short: Vec<LeaseClaim> = jobs[105..]
        .iter()
        .chain(&jobs[1..20])
        .map(|j| LeaseClaim {
            lease_ms: 1,
            ..claim(j, t + 1_000, t + 1_000)
        })
        .collect();
    assert_eq!(short.len(), 64);
    let short_leases = won(store.claim_many(&short).await.unwrap());
    tokio::time::sleep(Duration::from_millis(20)).await;
    let now = store.now().await.unwrap();
    let takeovers: Vec<Takeover> = short_leases
        .iter()
        .map(|l| Takeover {
            run: l.run.clone(),
            seen_attempt: 1,
            instance_id: "b".into(),
            lease_ms: 30_000,
            max_attempts: 3,
            superseded: false,
            not_after: now + 60_000,
        })
        .collect();
    let (took64, out) = cost(
        "a batch of 64 takeovers",
        port,
        store.take_over_many(&takeovers),
    )
    .await;
    let out = out.unwrap();
    for (o, l) in out.iter().zip(&short_leases) {
        match o {
            TakeoverOutcome::Won(n) => {
                assert_eq!((n.attempt, n.instance_id.as_str()), (2, "b"));
                assert!(n.fence > l.fence, "{} after {}", n.fence, l.fence);
                assert_eq!(n.scheduled_at, l.scheduled_at);
            }
            other => panic!("{other:?}"),
        }
    }

    eprintln!(
        "libSQL HTTP requests: one claim {one}; 20 single claims {singles} ({:.2} each); \
         a batch of 20 claims {batched20} ({:.2} each); a batch of 64 claims {batched64} \
         ({:.3} each); 64 taken claims {taken64}; 20 single finishes {single_finishes} \
         ({:.2} each); a batch of 64 results {finished64} ({:.3} each); a batch of 64 \
         takeovers {took64} ({:.3} each)",
        singles as f64 / 20.0,
        batched20 as f64 / 20.0,
        batched64 as f64 / 64.0,
        single_finishes as f64 / 20.0,
        finished64 as f64 / 64.0,
        took64 as f64 / 64.0,
    );
    for (what, n) in [
        ("one claim", one),
        ("a batch of 20 claims", batched20),
        ("a batch of 64 claims", batched64),
        ("a batch of 64 taken claims", taken64),
        ("a batch of 64 results", finished64),
        ("a batch of 64 takeovers", took64),
    ] {
        assert!(
            PER_BATCH.contains(&n),
            "{what} costs {n} HTTP requests, not the constant {PER_BATCH:?}"
        );
    }
    assert!(
        (3 * 20..=4 * 20).contains(&singles) && (3 * 20..=4 * 20).contains(&single_finishes),
        "a single claim or result is a batch of one: {singles}, {single_finishes} for 20"
    );
    store.close().await.unwrap();
}
