//! Batches on the Hrana test double: concurrent `claim_many` callers over the same slots,
//! batches holding several slots of one job (judged as if one after another, in input
//! order, exactly as the single calls judge them), and text that must survive being
//! written into the batch's SQL as literals. Runs on a double of its own. Without python3
//! it prints a SKIP line.

use std::collections::HashMap;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anarchon_core::store::{
    ClaimOutcome, EpochMs, Finish, HistoryStore, JobName, LeaseClaim, LeaseStore, Overlap,
    OwnerWrite, Reason, Retention, RunKey, RunStatus, Store, Takeover, TakeoverOutcome,
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
        "anarchon-hrana-bt-{}-{port}.db",
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
        eprintln!("SKIP libSQL batches: python3 (for the Hrana test double) is not available");
        return None;
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            eprintln!("SKIP libSQL batches: the Hrana test double did not listen within 10 s");
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(Double {
        port,
        _child: child,
    })
}

async fn store(port: u16, prefix: &str) -> LibsqlStore {
    LibsqlStore::connect_with(
        format!("http://127.0.0.1:{port}"),
        LibsqlOptions::default().table(prefix),
    )
    .await
    .expect("store")
}

fn claim(job: &JobName, slot: EpochMs, now: EpochMs, instance: &str) -> LeaseClaim {
    LeaseClaim {
        run: key(job, slot),
        scheduled_at: slot,
        instance_id: instance.into(),
        lease_ms: 30_000,
        not_after: now + 60_000,
        overlap: Overlap::Allow,
        reason: Reason::Scheduled,
        retention: Retention::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_concurrent_claim_many_callers_win_every_slot_exactly_once() {
    let Some(double) = tokio::task::spawn_blocking(start_double).await.unwrap() else {
        return;
    };
    let prefix = format!("cc_{:08x}", rand::random::<u32>());
    let stores = [
        store(double.port, &prefix).await,
        store(double.port, &prefix).await,
        store(double.port, &prefix).await,
    ];
    let t = stores[0].now().await.unwrap();
    for round in 0..3_i64 {
        // 32 jobs x 2 slots: 64 claims per caller, each caller in its own order.
        let jobs: Vec<JobName> = (0..32).map(|_| unique_job("cc")).collect();
        let slots: Vec<RunKey> = jobs
            .iter()
            .flat_map(|j| [key(j, t + round * 10), key(j, t + round * 10 + 5)])
            .collect();
        let mut calls = Vec::new();
        for (n, s) in stores.iter().enumerate() {
            let mut mine: Vec<LeaseClaim> = slots
                .iter()
                .map(|k| claim(&k.job, k.slot, t, &format!("i{n}")))
                .collect();
            // Different orders: forwards, backwards, and halves swapped.
            match n {
                1 => mine.reverse(),
                2 => mine.rotate_left(32),
                _ => {}
            }
            let s = s.clone();
            calls.push(tokio::spawn(async move {
                let out = s.claim_many(&mine).await.expect("claim_many");
                (n, mine, out)
            }));
        }
        let mut winners: HashMap<RunKey, Vec<String>> = HashMap::new();
        for call in calls {
            let (n, mine, out) = call.await.unwrap();
            assert_eq!(out.len(), mine.len());
            for (c, o) in mine.iter().zip(out) {
                match o {
                    ClaimOutcome::Won(l) => {
                        assert_eq!(l.run, c.run);
                        winners
                            .entry(c.run.clone())
                            .or_default()
                            .push(format!("i{n}"));
                    }
                    ClaimOutcome::Taken => {
                        winners.entry(c.run.clone()).or_default();
                    }
                    other => panic!("{}: {other:?}", c.run),
                }
            }
        }
        assert_eq!(winners.len(), 64);
        for (run, who) in &winners {
            assert_eq!(who.len(), 1, "{run} won by {who:?}");
        }
        // The store agrees: each run is owned by its one winner.
        let views = stores[0].runs(&slots).await.unwrap();
        assert_eq!(views.len(), 64);
        for v in views {
            assert_eq!(
                v.owner.as_deref(),
                Some(winners[&v.run][0].as_str()),
                "{}",
                v.run
            );
        }
    }
}

/// The story of one job told to `store` (a batch when `batch`, else one claim after the
/// other): what each claim answered, and the job's history, without the parts that differ
/// between two jobs or stores (times, fences).
async fn tell(
    store: &dyn LeaseStore,
    j: &JobName,
    batch: bool,
) -> (
    Vec<String>,
    Vec<(EpochMs, RunStatus, Option<String>, u32, String)>,
) {
    let t = store.now().await.unwrap();
    let base = t - 100_000;
    // A run whose lease ends at once, so a later slot interrupts it [B-15].
    let first = LeaseClaim {
        lease_ms: 1,
        ..claim(j, base, t, "x")
    };
    assert!(matches!(
        store.claim(&first).await.unwrap(),
        ClaimOutcome::Won(_)
    ));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let now = store.now().await.unwrap();
    let skip = |slot: EpochMs| LeaseClaim {
        overlap: Overlap::Skip,
        ..claim(j, slot, now, "y")
    };
    let story = vec![
        skip(base + 2_000),               // won; interrupts base (lease ended)
        skip(base + 2_000),               // taken (the claim before it)
        skip(base + 3_000),               // overlap with base + 2000 (live)
        claim(j, base + 3_000, now, "y"), // won: overlap allowed
        skip(base + 1_000),               // won: no live run before it
        skip(base),                       // taken
        LeaseClaim {
            not_after: now - 1,
            ..skip(base + 9_000)
        }, // late: nothing written
        skip(base + 4_000),               // overlap with base + 1000, the oldest live run
    ];
    let out = if batch {
        store.claim_many(&story).await.unwrap()
    } else {
        let mut out = Vec::new();
        for c in &story {
            out.push(store.claim(c).await.unwrap());
        }
        out
    };
    let mut fences = Vec::new();
    let shapes = out
        .iter()
        .map(|o| match o {
            ClaimOutcome::Won(l) => {
                fences.push(l.fence);
                format!("won {}", l.run.slot - base)
            }
            ClaimOutcome::Taken => "taken".into(),
            ClaimOutcome::Late { .. } => "late".into(),
            ClaimOutcome::Overlap { running_slot } => format!("overlap {}", running_slot - base),
        })
        .collect();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences in input order: {fences:?}"
    );
    let mut history: Vec<_> = store
        .history(j, 20)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.slot - base, r.status, r.error, r.attempt, r.instance_id))
        .collect();
    history.sort_by_key(|r| r.0);
    (shapes, history)
}

#[tokio::test]
async fn a_batch_with_several_slots_of_one_job_answers_as_single_claims_on_sqlite_do() {
    let Some(double) = tokio::task::spawn_blocking(start_double).await.unwrap() else {
        return;
    };
    let s = store(double.port, &format!("io_{:08x}", rand::random::<u32>())).await;
    let dir = tempfile::tempdir().unwrap();
    let local = anarchon_sqlite::SqliteStore::connect(dir.path().join("ref.db"))
        .await
        .unwrap();
    let batch = tell(&s, &unique_job("ioa"), true).await;
    let singles = tell(&s, &unique_job("iob"), false).await;
    let reference = tell(&local, &unique_job("ioc"), false).await;
    assert_eq!(
        batch.0,
        [
            "won 2000",
            "taken",
            "overlap 2000",
            "won 3000",
            "won 1000",
            "taken",
            "late",
            "overlap 1000"
        ]
    );
    assert_eq!(
        batch, reference,
        "libSQL batch vs the SQLite store's single claims"
    );
    assert_eq!(
        singles, reference,
        "libSQL single claims vs the SQLite store's"
    );
    assert_eq!(batch.1.len(), 4, "{:?}", batch.1);
    assert_eq!(
        batch.1[0],
        (
            0,
            RunStatus::Interrupted,
            Some("replaced by the next slot".to_owned()),
            1,
            "x".to_owned()
        )
    );
    local.close().await.unwrap();
}

#[tokio::test]
async fn text_written_as_literals_comes_back_unchanged() {
    let Some(double) = tokio::task::spawn_blocking(start_double).await.unwrap() else {
        return;
    };
    let s = store(double.port, &format!("lt_{:08x}", rand::random::<u32>())).await;
    let t = s.now().await.unwrap();
    let texts = [
        "it's \"quoted\"; -- not a comment",
        "back\\slash \\' and ?1 :name $x @y",
        "é 😀 ünïcode 'ﬁ'",
        "nul \0 inside",
        "line\nbreak\ttab\r",
        "');DROP TABLE x;--",
    ];
    for text in texts {
        let job = unique_job("lt");
        let out = s.claim_many(&[claim(&job, t, t, text)]).await.unwrap();
        let lease = match out.into_iter().next() {
            Some(ClaimOutcome::Won(l)) => l,
            other => panic!("{text:?}: {other:?}"),
        };
        assert_eq!(lease.instance_id, text);
        let view = s
            .runs(std::slice::from_ref(&lease.run))
            .await
            .unwrap()
            .remove(0);
        assert_eq!(view.owner.as_deref(), Some(text), "{text:?}");
        let finish = Finish {
            status: RunStatus::Failed,
            error: Some(text.to_owned()),
            retention: Retention::default(),
        };
        assert_eq!(
            s.finish_many(&[(lease.clone(), finish)]).await.unwrap(),
            vec![OwnerWrite::Done],
            "{text:?}"
        );
        let row = s.history(&job, 1).await.unwrap().remove(0);
        assert_eq!(row.instance_id, text);
        assert_eq!(row.error.as_deref(), Some(text), "{text:?}");
        assert_eq!(row.status, RunStatus::Failed);
        // A takeover by an instance with such a name: the run is final, so Finished.
        let out = s
            .take_over_many(&[Takeover {
                run: lease.run.clone(),
                seen_attempt: 1,
                instance_id: text.to_owned(),
                lease_ms: 1_000,
                max_attempts: 3,
                superseded: false,
                not_after: t + 60_000,
            }])
            .await
            .unwrap();
        assert_eq!(out, vec![TakeoverOutcome::Finished(RunStatus::Failed)]);
    }
}

/// [B-37] Pruning by claims (one fence in 16 of a job, at its phase) and by results, through batches:
/// the same sequence of claims and results leaves the same history on libSQL as on the
/// SQLite store; a batch of many slots of one job prunes it once at its end.
#[tokio::test]
async fn claims_and_results_prune_as_on_the_sqlite_store() {
    let Some(double) = tokio::task::spawn_blocking(start_double).await.unwrap() else {
        return;
    };
    let s = store(double.port, &format!("pr_{:08x}", rand::random::<u32>())).await;
    let dir = tempfile::tempdir().unwrap();
    let local = anarchon_sqlite::SqliteStore::connect(dir.path().join("ref.db"))
        .await
        .unwrap();
    let retention = Retention {
        size: 3,
        ttl_ms: None,
    };
    async fn story(
        store: &dyn LeaseStore,
        j: &JobName,
        retention: Retention,
    ) -> Vec<(EpochMs, RunStatus)> {
        let t = store.now().await.unwrap();
        let base = t - 1_000_000;
        for n in 0..40 {
            let c = LeaseClaim {
                retention,
                ..claim(j, base + n * 1_000, t, "p")
            };
            let lease = match store.claim(&c).await.unwrap() {
                ClaimOutcome::Won(l) => l,
                other => panic!("{other:?}"),
            };
            // Every third run stays running (never pruned); the others end at once.
            if n % 3 != 0 {
                let f = Finish {
                    status: RunStatus::Succeeded,
                    error: None,
                    retention,
                };
                assert_eq!(store.finish(&lease, &f).await.unwrap(), OwnerWrite::Done);
            }
        }
        let mut h: Vec<_> = store
            .history(j, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.slot - base, r.status))
            .collect();
        h.sort_by_key(|r| r.0);
        h
    }
    let ours = story(&s, &unique_job("pra"), retention).await;
    let reference = story(&local, &unique_job("prb"), retention).await;
    assert_eq!(ours, reference);
    assert!(ours.len() < 40, "{ours:?}");

    // 40 slots of one job in one batch, all won and left running, then all finished in
    // one batch: the job is pruned to its 3 newest runs.
    let j = unique_job("prc");
    let t = s.now().await.unwrap();
    let claims: Vec<LeaseClaim> = (0..40)
        .map(|n| LeaseClaim {
            retention,
            ..claim(&j, t - 100_000 + n * 1_000, t, "p")
        })
        .collect();
    let leases = anarchon_core::testkit::lease::won_all(&s, &claims).await;
    assert_eq!(
        s.history(&j, 100).await.unwrap().len(),
        40,
        "running runs stay"
    );
    let f = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention,
    };
    let writes: Vec<_> = leases.into_iter().map(|l| (l, f.clone())).collect();
    assert_eq!(
        s.finish_many(&writes).await.unwrap(),
        vec![OwnerWrite::Done; 40]
    );
    let h = s.history(&j, 100).await.unwrap();
    assert_eq!(
        h.iter().map(|r| r.slot).collect::<Vec<_>>(),
        vec![
            t - 100_000 + 39_000,
            t - 100_000 + 38_000,
            t - 100_000 + 37_000
        ]
    );
    let views = s
        .runs(
            &(0..40)
                .map(|n| key(&j, t - 100_000 + n * 1_000))
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    assert_eq!(views.len(), 3, "the runs of pruned history go too");
    local.close().await.unwrap();
}

/// [B-16] The same result twice in one batch: the first is written, the second finds the
/// run final and is lost; a result of another attempt of a run is lost.
#[tokio::test]
async fn a_result_twice_in_one_batch_is_written_once() {
    let Some(double) = tokio::task::spawn_blocking(start_double).await.unwrap() else {
        return;
    };
    let s = store(double.port, &format!("fw_{:08x}", rand::random::<u32>())).await;
    let t = s.now().await.unwrap();
    let (a, b) = (unique_job("fwa"), unique_job("fwb"));
    let out = s
        .claim_many(&[claim(&a, t, t, "p"), claim(&b, t, t, "p")])
        .await
        .unwrap();
    let leases: Vec<_> = out
        .into_iter()
        .map(|o| match o {
            ClaimOutcome::Won(l) => l,
            other => panic!("{other:?}"),
        })
        .collect();
    let done = |status| Finish {
        status,
        error: None,
        retention: Retention::default(),
    };
    let mut stale = leases[1].clone();
    stale.attempt = 2;
    let out = s
        .finish_many(&[
            (leases[0].clone(), done(RunStatus::Succeeded)),
            (stale, done(RunStatus::Succeeded)),
            (leases[0].clone(), done(RunStatus::Failed)),
            (leases[1].clone(), done(RunStatus::Failed)),
        ])
        .await
        .unwrap();
    assert_eq!(
        out,
        vec![
            OwnerWrite::Done,
            OwnerWrite::Lost,
            OwnerWrite::Lost,
            OwnerWrite::Done
        ]
    );
    assert_eq!(
        s.history(&a, 1).await.unwrap()[0].status,
        RunStatus::Succeeded
    );
    assert_eq!(s.history(&b, 1).await.unwrap()[0].status, RunStatus::Failed);
}
