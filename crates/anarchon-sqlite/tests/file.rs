//! The SQLite store on real files: bad input, schema versions, concurrency across
//! connections and threads, timeouts and in-process release notifications. [B-33, B-43]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anarchon_core::store::{
    ClaimOutcome, Error, HistoryStore, LeaseStore, OwnerWrite, Prepare, RunStatus, Store,
};
use anarchon_core::testkit::lease::claim;
use anarchon_core::testkit::unique_job;
use anarchon_sqlite::SqliteStore;
use anarchon_sqlite::sql::Tables;
use anarchon_sqlite::sql::schema::{self, SCHEMA_VERSION};
use common::TempStore;

fn raw(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).expect("raw connection")
}

fn tables(path: &Path) -> Vec<String> {
    let c = raw(path);
    let mut st = c
        .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'index') ORDER BY name")
        .unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn meta_version(path: &Path, meta: &str) -> i64 {
    raw(path)
        .query_row(
            &format!("SELECT value FROM \"{meta}\" WHERE key = 'schema_version'"),
            [],
            |r| r.get(0),
        )
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn b43_open_creates_three_prefixed_tables_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    let store = SqliteStore::connect_with(
        &path,
        anarchon_sqlite::SqliteOptions::default().table("my_jobs"),
    )
    .await
    .unwrap();
    let names = tables(&path);
    for t in ["my_jobs", "my_jobs_attempts", "my_jobs_meta"] {
        assert!(names.iter().any(|n| n == t), "{t} missing from {names:?}");
    }
    assert_eq!(store.schema_version().await.unwrap(), Some(SCHEMA_VERSION));
    let mode: String = raw(&path)
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    // A second prefix in the same file is independent.
    let other = SqliteStore::connect(&path).await.unwrap();
    let job = unique_job("pfx");
    let t = store.now().await.unwrap();
    assert!(matches!(
        store.claim(&claim(&job, t, "a", t)).await.unwrap(),
        ClaimOutcome::Won(_)
    ));
    assert!(matches!(
        other.claim(&claim(&job, t, "b", t)).await.unwrap(),
        ClaimOutcome::Won(_)
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn b43_a_path_no_other_process_can_open_is_refused() {
    for bad in [
        "",
        "  ",
        ":memory:",
        ":MEMORY:",
        "file::memory:",
        "file::memory:?cache=shared",
        "file:anarchon?mode=memory&cache=shared",
    ] {
        let err = SqliteStore::connect(bad).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidOption { option: "path", .. }),
            "{bad:?}: {err}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!("{bad:?}")) && text.contains("coordinate"),
            "{bad:?}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn b42_invalid_table_prefix_is_refused_before_touching_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    for bad in ["", "1abc", "a-b", "x\"; DROP TABLE t; --", "sqlite_master"] {
        let err =
            SqliteStore::connect_with(&path, anarchon_sqlite::SqliteOptions::default().table(bad))
                .await
                .unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidOption {
                    option: "table",
                    ..
                }
            ),
            "{bad:?}: {err}"
        );
        assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
    }
    assert!(!path.exists(), "a refused prefix created the file");
}

#[tokio::test(flavor = "multi_thread")]
async fn b43_missing_directory_is_a_clear_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no").join("such").join("dir").join("x.db");
    let err = SqliteStore::connect(&path).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert!(source.contains("does not exist"), "{source}");
    assert!(!dir.path().join("no").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn b43_a_file_that_is_not_a_database_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    let text = "these are my notes, not a database\n".repeat(200);
    std::fs::write(&path, &text).unwrap();
    let err = SqliteStore::connect(&path).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("not an SQLite database"),
        "{msg}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "the file was changed"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");
}

/// Makes `path` unwritable even for root: `chmod 444`, and where that does not stop root,
/// the immutable attribute. Returns false when neither works here.
fn make_read_only(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444)).unwrap();
    if std::fs::OpenOptions::new().write(true).open(path).is_err() {
        return true;
    }
    let ok = std::process::Command::new("chattr")
        .arg("+i")
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    ok && std::fs::OpenOptions::new().write(true).open(path).is_err()
}

fn undo_read_only(path: &Path) {
    let _ = std::process::Command::new("chattr")
        .arg("-i")
        .arg(path)
        .status();
}

#[tokio::test(flavor = "multi_thread")]
async fn b43_a_read_only_file_is_a_clear_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.db");
    {
        let s = SqliteStore::connect(&path).await.unwrap();
        s.close().await.unwrap();
    }
    // Fold the WAL into the main file so the read-only file holds everything.
    raw(&path)
        .pragma_update(None, "journal_mode", "DELETE")
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    if !make_read_only(&path) {
        undo_read_only(&path);
        if anarchon_core::testkit::require_servers() {
            panic!("cannot make a file read-only here (root without chattr)");
        }
        eprintln!("SKIP b43 read-only: cannot make a file read-only here (root without chattr)");
        return;
    }
    let err = SqliteStore::connect(&path).await.unwrap_err();
    undo_read_only(&path);
    let msg = format!(
        "{err}: {}",
        std::error::Error::source(&err)
            .map(ToString::to_string)
            .unwrap_or_default()
    );
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("read-only"),
        "{msg}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file was changed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn b33_a_newer_schema_is_refused_naming_the_path_and_nothing_changes() {
    let ts = TempStore::new().await;
    let path = ts.path();
    let job = unique_job("new");
    let t = ts.store.now().await.unwrap();
    ts.store.claim(&claim(&job, t, "a", t)).await.unwrap();
    ts.store.close().await.unwrap();
    raw(&path)
        .execute(
            "UPDATE anarchon_runs_meta SET value = 99 WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
    let before = tables(&path);
    let err = SqliteStore::connect(&path).await.unwrap_err();
    match &err {
        Error::SchemaTooNew {
            found,
            supported,
            location,
            ..
        } => {
            assert_eq!((*found, *supported), (99, SCHEMA_VERSION));
            assert!(location.contains(&path.display().to_string()), "{location}");
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    assert!(err.to_string().contains("upgrade anarchon"), "{err}");
    assert_eq!(meta_version(&path, "anarchon_runs_meta"), 99);
    assert_eq!(tables(&path), before);
    let runs: i64 = raw(&path)
        .query_row("SELECT count(*) FROM anarchon_runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(runs, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn b33_a_store_opened_before_an_upgrade_refuses_at_prepare() {
    let ts = TempStore::new().await;
    raw(&ts.path())
        .execute(
            "UPDATE anarchon_runs_meta SET value = 7 WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
    let err = ts
        .store
        .prepare(&Prepare {
            jobs: vec![unique_job("p")],
            instance_id: "a".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::SchemaTooNew { found: 7, .. }),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn b33_an_older_schema_is_migrated_keeping_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    let t = Tables::new("anarchon_runs").unwrap();
    {
        let c = raw(&path);
        for stmt in schema::create_v1(&t) {
            c.execute(&stmt, []).unwrap();
        }
        c.execute("INSERT INTO anarchon_runs_meta (key, value) VALUES ('schema_version', 1), ('job:old', 4)", [])
            .unwrap();
        c.execute(
            "INSERT INTO anarchon_runs_attempts (job, slot, manual, attempt, instance_id, scheduled_at, \
             reason, status, fence, started_at, finished_at, error) \
             VALUES ('old', 1000, 0, 1, 'a', 1000, 'scheduled', 'succeeded', 4, 1001, 1500, NULL)",
            [],
        )
        .unwrap();
        c.execute(
            "INSERT INTO anarchon_runs (job, slot, scheduled_at, status, attempt, starts, owner, \
             reason, fence, started_at, expires_at, error) \
             VALUES ('old', 1000, 1000, 'succeeded', 1, 1, NULL, 'scheduled', 4, 1001, 2000, NULL)",
            [],
        )
        .unwrap();
    }
    assert!(!tables(&path).iter().any(|n| n == "anarchon_runs_running"));
    let store = SqliteStore::connect(&path).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), Some(SCHEMA_VERSION));
    assert!(
        tables(&path).iter().any(|n| n == "anarchon_runs_running"),
        "{:?}",
        tables(&path)
    );
    let old = anarchon_core::JobName::new("old").unwrap();
    let h = store.history(&old, 10).await.unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(
        (h[0].slot, h[0].fence, h[0].status),
        (1000, 4, RunStatus::Succeeded)
    );
    assert_eq!(store.known_jobs().await.unwrap(), vec![old.clone()]);
    // The fence goes on from the migrated counter.
    let now = store.now().await.unwrap();
    let ClaimOutcome::Won(l) = store.claim(&claim(&old, now, "b", now)).await.unwrap() else {
        panic!("claim after migration")
    };
    assert_eq!(l.fence, 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn b43_a_foreign_table_with_our_name_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    raw(&path)
        .execute_batch("CREATE TABLE anarchon_runs (id INTEGER PRIMARY KEY, payload TEXT); INSERT INTO anarchon_runs (payload) VALUES ('mine');")
        .unwrap();
    let err = SqliteStore::connect(&path).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("anarchon_runs")
            && msg.contains(&path.display().to_string())
            && msg.contains("table"),
        "{msg}"
    );
    let payload: String = raw(&path)
        .query_row("SELECT payload FROM anarchon_runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(payload, "mine");
    assert_eq!(tables(&path), vec!["anarchon_runs".to_owned()]);
    // Another prefix in the same file works beside it.
    SqliteStore::connect_with(
        &path,
        anarchon_sqlite::SqliteOptions::default().table("scheduler"),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn b43_a_table_of_ours_with_another_shape_is_refused() {
    let ts = TempStore::new().await;
    ts.store.close().await.unwrap();
    raw(&ts.path())
        .execute("ALTER TABLE anarchon_runs ADD COLUMN extra TEXT", [])
        .unwrap();
    let err = SqliteStore::connect(ts.path()).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("extra"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn b11_claims_from_many_connections_and_threads_have_one_winner() {
    let ts = TempStore::new().await;
    let path = ts.path();
    let job = unique_job("multi");
    let t0 = ts.store.now().await.unwrap();
    let slots: Vec<i64> = (0..20).map(|i| t0 - 20_000 + i * 1000).collect();
    // Four OS threads, each with its own runtime and two stores (two connections).
    let mut threads = Vec::new();
    for th in 0..4 {
        let path = path.clone();
        let job = job.clone();
        let slots = slots.clone();
        threads.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut wins = Vec::new();
                let stores = [
                    SqliteStore::connect(&path).await.unwrap(),
                    SqliteStore::connect(&path).await.unwrap(),
                ];
                for &slot in &slots {
                    let mut tasks = Vec::new();
                    for (i, s) in stores.iter().enumerate() {
                        let mut c = claim(&job, slot, &format!("t{th}s{i}"), slot);
                        c.overlap = anarchon_core::Overlap::Allow;
                        c.not_after = slot + 120_000;
                        let s = s.clone();
                        tasks.push(tokio::spawn(async move { s.claim(&c).await }));
                    }
                    for task in tasks {
                        match task.await.unwrap().expect("claim") {
                            ClaimOutcome::Won(l) => wins.push((slot, l.fence)),
                            ClaimOutcome::Taken => {}
                            other => panic!("unexpected {other:?}"),
                        }
                    }
                }
                wins
            })
        }));
    }
    let mut wins: Vec<(i64, u64)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    wins.sort();
    let won_slots: Vec<i64> = wins.iter().map(|w| w.0).collect();
    assert_eq!(won_slots, slots, "every slot exactly once");
    let mut fences: Vec<u64> = wins.iter().map(|w| w.1).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), slots.len(), "fences are unique");
}

#[tokio::test(flavor = "multi_thread")]
async fn b43_a_held_write_lock_bounds_a_claim_by_the_busy_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let store = SqliteStore::connect_with(
        &path,
        anarchon_sqlite::SqliteOptions::default().busy_timeout(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let blocker = raw(&path);
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let job = unique_job("busy");
    let t = store.now().await.unwrap();
    let started = Instant::now();
    let err = store.claim(&claim(&job, t, "a", t)).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(
            err,
            Error::Timeout {
                operation: "claim",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(3),
        "{took:?}"
    );
    blocker.execute_batch("COMMIT").unwrap();
    assert!(matches!(
        store.claim(&claim(&job, t, "a", t)).await.unwrap(),
        ClaimOutcome::Won(_)
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn b11_a_claim_of_a_slot_already_won_is_answered_taken_without_the_write_lock() {
    // The instances that lose a slot must not queue for the file's lock behind the winner:
    // a claim whose run exists is answered from a read (WAL readers never wait for the
    // writer), even while another connection holds the write lock, in a batch too.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lost.db");
    let options = anarchon_sqlite::SqliteOptions::default().busy_timeout(Duration::from_secs(5));
    let winner = SqliteStore::connect_with(&path, options.clone())
        .await
        .unwrap();
    let loser = SqliteStore::connect_with(&path, options).await.unwrap();
    let jobs: Vec<_> = (0..3).map(|i| unique_job(&format!("lost{i}"))).collect();
    let t = winner.now().await.unwrap();
    let claims: Vec<_> = jobs.iter().map(|j| claim(j, t, "winner", t)).collect();
    for outcome in winner.claim_many(&claims).await.unwrap() {
        assert!(matches!(outcome, ClaimOutcome::Won(_)), "{outcome:?}");
    }
    let blocker = raw(&path);
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    let lost: Vec<_> = jobs.iter().map(|j| claim(j, t, "loser", t)).collect();
    let answers = loser.claim_many(&lost).await.unwrap();
    let took = started.elapsed();
    assert_eq!(answers, vec![ClaimOutcome::Taken; 3]);
    assert!(
        took < Duration::from_secs(2),
        "waited {took:?} for the lock"
    );
    // A claim that may win still waits for the lock, and wins once it is free.
    let free = unique_job("free");
    let pending = {
        let loser = loser.clone();
        let c = claim(&free, t, "loser", t);
        tokio::spawn(async move { loser.claim(&c).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !pending.is_finished(),
        "a claim that may insert took no lock"
    );
    blocker.execute_batch("COMMIT").unwrap();
    assert!(matches!(
        pending.await.unwrap().unwrap(),
        ClaimOutcome::Won(_)
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn b43_a_call_queued_past_its_deadline_is_not_executed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    let store = SqliteStore::connect_with(
        &path,
        anarchon_sqlite::SqliteOptions::default()
            .busy_timeout(Duration::from_millis(800))
            .call_timeout(Duration::from_millis(400)),
    )
    .await
    .unwrap();
    let blocker = raw(&path);
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let job = unique_job("queued");
    let t = store.now().await.unwrap();
    // The first claim waits for the lock on the connection's thread; the second waits
    // behind it in the queue and is given up at its deadline.
    let (ca, cb) = (claim(&job, t, "a", t), claim(&job, t + 1, "b", t));
    let (a, b) = tokio::join!(store.claim(&ca), store.claim(&cb));
    assert!(matches!(a, Err(Error::Timeout { .. })), "{a:?}");
    assert!(matches!(b, Err(Error::Timeout { .. })), "{b:?}");
    blocker.execute_batch("COMMIT").unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        store.history(&job, 10).await.unwrap().is_empty(),
        "a given-up claim ran later"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn b17_stores_of_one_process_hear_releases_at_once() {
    let ts = TempStore::new().await;
    let backup = SqliteStore::connect(ts.path()).await.unwrap();
    let mut rx = backup
        .subscribe_releases()
        .expect("in-process notifications");
    let job = unique_job("rel");
    let t = ts.store.now().await.unwrap();
    let ClaimOutcome::Won(l) = ts.store.claim(&claim(&job, t, "a", t)).await.unwrap() else {
        panic!("claim")
    };
    assert_eq!(ts.store.release(&l).await.unwrap(), OwnerWrite::Done);
    let got = tokio::time::timeout(Duration::from_secs(2), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, l.run);
}

#[tokio::test(flavor = "multi_thread")]
async fn b34_close_ends_the_connection_and_later_calls_fail() {
    let ts = TempStore::new().await;
    let clone = ts.store.clone();
    ts.store.close().await.unwrap();
    ts.store.close().await.unwrap();
    let err = clone.known_jobs().await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    // The file is free: another store can take the write lock at once.
    let other = SqliteStore::connect_with(
        ts.path(),
        anarchon_sqlite::SqliteOptions::default().busy_timeout(Duration::from_millis(50)),
    )
    .await
    .unwrap();
    other
        .prepare(&Prepare {
            jobs: vec![unique_job("c")],
            instance_id: "b".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn many_stores_starting_at_once_create_the_schema_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = Arc::new(dir.path().join("race.db"));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let path = path.clone();
        tasks.push(tokio::spawn(
            async move { SqliteStore::connect(&*path).await },
        ));
    }
    for t in tasks {
        let s = t.await.unwrap().expect("open");
        assert_eq!(s.schema_version().await.unwrap(), Some(SCHEMA_VERSION));
    }
    assert_eq!(meta_version(&path, "anarchon_runs_meta"), SCHEMA_VERSION);
}

/// [B-37] A won claim prunes only on every `PRUNE_EVERY`-th fence and a takeover's fence
/// leaves that count alone, so runs that never finish stay bounded; a finish prunes exactly.
#[tokio::test(flavor = "multi_thread")]
async fn b37_claims_prune_every_nth_claim_and_runs_stay_bounded() {
    use anarchon_core::store::{Retention, Takeover, TakeoverOutcome};
    use anarchon_sqlite::sql::ops::PRUNE_EVERY;
    let ts = TempStore::new().await;
    let store = &ts.store;
    let job = unique_job("bound");
    let keep = Retention {
        size: 3,
        ttl_ms: None,
    };
    let bound = 3 + PRUNE_EVERY as usize - 1;
    let t = store.now().await.unwrap();
    let mut fences = Vec::new();
    let mut most = 0;
    for i in 0..60 {
        let slot = t - 200_000 + i * 1000;
        let mut c = claim(&job, slot, "a", t);
        c.retention = keep;
        // A lease of 0 ms has ended at once: the next claim interrupts the run.
        c.lease_ms = 0;
        let ClaimOutcome::Won(l) = store.claim(&c).await.unwrap() else {
            panic!("claim {i}")
        };
        fences.push(l.fence);
        if i % 5 == 0 {
            // Every fifth run is taken over once.
            let tk = Takeover {
                run: l.run.clone(),
                seen_attempt: 1,
                instance_id: "b".into(),
                lease_ms: 0,
                max_attempts: 3,
                superseded: false,
                not_after: i64::MAX,
            };
            let TakeoverOutcome::Won(l2) = store.take_over(&tk).await.unwrap() else {
                panic!("take over {i}")
            };
            assert_eq!(
                l2.fence,
                l.fence + PRUNE_EVERY,
                "a takeover adds PRUNE_EVERY"
            );
        }
        // Never finished: the next claim interrupts it.
        let runs = store.history(&job, 1000).await.unwrap();
        let distinct: std::collections::BTreeSet<i64> = runs.iter().map(|r| r.slot).collect();
        most = most.max(distinct.len());
        assert!(
            distinct.len() <= bound,
            "claim {i}: {} runs",
            distinct.len()
        );
    }
    assert!(most > 3, "claims defer pruning");
    // The claims' fences count on by one (a takeover adds PRUNE_EVERY, which keeps the
    // residue), so 60 of them hold the job's pruning residue 3 or 4 times.
    let pruning = fences
        .iter()
        .filter(|&&f| anarchon_core::history::prunes_at(job.as_str(), f, PRUNE_EVERY))
        .count();
    assert!(
        (3..=4).contains(&pruning),
        "one claim in PRUNE_EVERY prunes: {pruning} of 60"
    );
    // A finish prunes exactly.
    let mut c = claim(&job, t - 1000, "a", t);
    c.retention = keep;
    let ClaimOutcome::Won(l) = store.claim(&c).await.unwrap() else {
        panic!("last claim")
    };
    let f = anarchon_core::store::Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: keep,
    };
    assert_eq!(store.finish(&l, &f).await.unwrap(), OwnerWrite::Done);
    let runs = store.history(&job, 1000).await.unwrap();
    let distinct: std::collections::BTreeSet<i64> = runs.iter().map(|r| r.slot).collect();
    assert_eq!(distinct.len(), 3, "{runs:?}");
}

/// A release written by another connection (another process, as far as SQLite can tell) is
/// announced on the release channel while a scheduler watches: the watcher reads the file's
/// change counter, finds the newly released run and sends its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b17_a_release_by_another_connection_is_announced_while_watching() {
    let t = TempStore::new().await;
    let job = unique_job("xproc");
    t.store
        .prepare(&Prepare {
            jobs: vec![job.clone()],
            instance_id: "a".into(),
            call_timeout: Duration::from_secs(5),
        })
        .await
        .unwrap();
    let now = t.store.now().await.unwrap();
    let ClaimOutcome::Won(lease) = t.store.claim(&claim(&job, now, "a", now)).await.unwrap() else {
        panic!("claim")
    };
    let mut rx = t.store.subscribe_releases().expect("a release channel");
    t.store.set_watching(true);
    // Another connection releases the run, as another process's store would.
    let runs = t.store.tables().runs.clone();
    raw(&t.path())
        .execute(
            &format!("UPDATE {runs} SET owner = NULL WHERE job = ?1 AND slot = ?2"),
            rusqlite::params![job.as_str(), lease.run.slot],
        )
        .unwrap();
    let started = Instant::now();
    let key = tokio::time::timeout(Duration::from_secs(2), rx.recv())
        .await
        .expect("announced within 2 s")
        .expect("a key");
    assert_eq!(key, lease.run);
    eprintln!(
        "released by another connection: announced after {:?}",
        started.elapsed()
    );
    t.store.set_watching(false);
}

/// Polls `f` once: a store call queues its work on the connection's thread in its first
/// poll, so the calls polled here reach the queue in this order.
fn queue<F: std::future::Future + ?Sized>(f: std::pin::Pin<&mut F>) {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(f.poll(&mut cx).is_pending(), "the call did not wait");
}

/// A result queued behind claims is written before them: a finish that reaches the queue
/// after the claim of the job's next slot still frees that slot (the claim wins instead of
/// being skipped as an overlap with the run that was already done).
#[tokio::test(flavor = "multi_thread")]
async fn a_queued_result_goes_before_queued_claims() {
    let t = TempStore::new().await;
    let store = &t.store;
    let (job, other) = (unique_job("prio"), unique_job("prio-other"));
    let now = store.now().await.unwrap();
    let ClaimOutcome::Won(lease) = store.claim(&claim(&job, now, "a", now)).await.unwrap() else {
        panic!("claim")
    };
    // Keeps the connection's thread busy (waiting for the write lock) while the next two
    // calls are queued.
    let blocker = raw(&t.path());
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let first = [claim(&other, now, "a", now)];
    let mut busy = store.claim_many(&first);
    queue(busy.as_mut());
    let next = [claim(&job, now + 1_000, "a", now)];
    let mut next_claim = store.claim_many(&next);
    queue(next_claim.as_mut());
    let done = anarchon_core::store::Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: anarchon_core::store::Retention::default(),
    };
    let mut finish = store.finish(&lease, &done);
    queue(finish.as_mut());
    blocker.execute_batch("COMMIT").unwrap();
    assert!(matches!(busy.await.unwrap()[0], ClaimOutcome::Won(_)));
    assert_eq!(finish.await.unwrap(), OwnerWrite::Done);
    let outcome = next_claim.await.unwrap();
    assert!(
        matches!(outcome[0], ClaimOutcome::Won(_)),
        "the claim ran before the queued finish: {outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wal_grown_while_a_reader_held_it_is_cut_back_once_it_restarts() {
    // While a reader holds its snapshot no checkpoint can restart the WAL, and every claim
    // appends to it (a burst of catch-ups on five instances grew it to 1.4 GB for a 90 MB
    // file). Once readers let go, the next checkpoint restarts it and SQLite cuts the file
    // back to the store's `journal_size_limit` (64 MiB) instead of keeping its size.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal.db");
    let store = SqliteStore::connect(&path).await.unwrap();
    let wal = dir.path().join("wal.db-wal");
    let size = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    let reader = raw(&path);
    reader.execute_batch("BEGIN").unwrap();
    let _: i64 = reader
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .unwrap();
    let now = store.now().await.unwrap();
    let claims = || -> Vec<_> {
        (0..256)
            .map(|_| claim(&unique_job("wal"), now, "a", now))
            .collect()
    };
    let mut batches = 0;
    while size() <= 80 << 20 {
        store.claim_many(&claims()).await.unwrap();
        batches += 1;
        assert!(batches < 1_000, "the WAL stayed at {} bytes", size());
    }
    reader.execute_batch("COMMIT").unwrap();
    drop(reader);
    for _ in 0..50 {
        if size() <= 64 << 20 {
            break;
        }
        store.claim_many(&claims()).await.unwrap();
    }
    assert!(size() <= 64 << 20, "the WAL kept {} bytes", size());
}

/// The runs in the database file itself, as a reader that ignores the WAL sees them
/// (`immutable=1`): what a checkpoint has copied there.
fn runs_in_the_file(path: &Path, runs_table: &str) -> i64 {
    let uri = format!("file:{}?immutable=1", path.display());
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI;
    let c = rusqlite::Connection::open_with_flags(uri, flags).expect("immutable connection");
    c.query_row(&format!("SELECT count(*) FROM \"{runs_table}\""), [], |r| {
        r.get(0)
    })
    .unwrap_or(0)
}

/// The store's commits are checkpointed into the file while it stays open, by its own
/// checkpoint thread, which its connection's WAL hook (in place of SQLite's automatic
/// checkpoint) wakes once the WAL holds 1,000 pages: claims past that size reach the database
/// file within moments (fails when the hook or the thread does not checkpoint).
#[tokio::test(flavor = "multi_thread")]
async fn the_store_checkpoints_its_commits_on_a_thread_of_its_own() {
    let ts = TempStore::new().await;
    let store = &ts.store;
    let runs_table = store.tables().runs.clone();
    let claimed = ts.claim_until_the_wal_holds(5 << 20).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen = runs_in_the_file(&ts.path(), &runs_table);
    while seen < claimed && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        seen = runs_in_the_file(&ts.path(), &runs_table);
    }
    assert_eq!(seen, claimed, "runs checkpointed into the file");
}

/// [B-37] A prune deletes the runs of the slots it pruned in one range, and a run inside that
/// range that still runs stays, with its history; runs above the cut stay too.
#[tokio::test(flavor = "multi_thread")]
async fn b37_a_prune_keeps_a_running_run_among_the_runs_it_deletes() {
    use anarchon_core::store::{Finish, Overlap, Retention};
    let ts = TempStore::new().await;
    let store = &ts.store;
    let job = unique_job("range");
    let keep = Retention {
        size: 3,
        ttl_ms: None,
    };
    let t = store.now().await.unwrap();
    let slots: Vec<i64> = (0..10).map(|i| t - 100_000 + i * 1000).collect();
    let mut leases = Vec::new();
    for &slot in &slots {
        let mut c = claim(&job, slot, "a", t);
        c.retention = keep;
        c.overlap = Overlap::Allow;
        c.lease_ms = 600_000;
        let ClaimOutcome::Won(l) = store.claim(&c).await.unwrap() else {
            panic!("claim {slot}")
        };
        leases.push(l);
    }
    let done = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: keep,
    };
    // Every run finishes but the third, which still runs.
    for (i, l) in leases.iter().enumerate() {
        if i != 2 {
            assert_eq!(store.finish(l, &done).await.unwrap(), OwnerWrite::Done);
        }
    }
    let runs_table = store.tables().runs.clone();
    let conn = raw(&ts.path());
    let mut st = conn
        .prepare(&format!(
            "SELECT slot, status FROM \"{runs_table}\" WHERE job = ?1 ORDER BY slot"
        ))
        .unwrap();
    let runs: Vec<(i64, String)> = st
        .query_map([job.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        runs,
        vec![
            (slots[2], "running".to_owned()),
            (slots[7], "succeeded".to_owned()),
            (slots[8], "succeeded".to_owned()),
            (slots[9], "succeeded".to_owned()),
        ]
    );
    let history = store.history(&job, 100).await.unwrap();
    let kept: std::collections::BTreeSet<i64> = history.iter().map(|r| r.slot).collect();
    assert_eq!(
        kept,
        [slots[2], slots[7], slots[8], slots[9]]
            .into_iter()
            .collect()
    );
}

/// [B-37] Jobs whose fences go in step (registered together, every slot of each claimed and
/// finished in the same batches) do not all prune at the same finish: each prunes at its own
/// phase, so after any round some hold `size` runs and the others one more. With the same
/// fences pruning every job, all of them held the same count after every round, and at
/// scale all their prunes fell into one second.
#[tokio::test(flavor = "multi_thread")]
async fn b37_jobs_whose_fences_go_in_step_prune_at_different_finishes() {
    use anarchon_core::store::{Finish, JobName, Lease, Retention};
    let ts = TempStore::new().await;
    let store = &ts.store;
    // `size` 16: one finish in 2 prunes (see `finish_prune_period`).
    let keep = Retention {
        size: 16,
        ttl_ms: None,
    };
    let done = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: keep,
    };
    let jobs: Vec<JobName> = (0..64).map(|_| unique_job("step")).collect();
    let t = store.now().await.unwrap();
    for round in 0..20 {
        let slot = t - 100_000 + round * 1000;
        let claims: Vec<_> = jobs
            .iter()
            .map(|j| {
                let mut c = claim(j, slot, "a", t);
                c.retention = keep;
                c
            })
            .collect();
        let writes: Vec<(Lease, Finish)> = store
            .claim_many(&claims)
            .await
            .unwrap()
            .into_iter()
            .map(|o| match o {
                ClaimOutcome::Won(l) => (l, done.clone()),
                other => panic!("round {round}: {other:?}"),
            })
            .collect();
        let out = store.finish_many(&writes).await.unwrap();
        assert!(out.iter().all(|o| *o == OwnerWrite::Done), "{out:?}");
        if round >= 17 {
            let mut held = std::collections::BTreeMap::<usize, usize>::new();
            for j in &jobs {
                *held
                    .entry(store.history(j, 100).await.unwrap().len())
                    .or_default() += 1;
            }
            assert_eq!(
                held.keys().copied().collect::<Vec<_>>(),
                vec![16, 17],
                "round {round}: jobs by the runs they hold: {held:?}"
            );
        }
    }
}

fn history_rows(path: &Path) -> i64 {
    raw(path)
        .query_row("SELECT COUNT(*) FROM anarchon_runs_attempts", [], |r| {
            r.get(0)
        })
        .unwrap()
}

/// A won claim and its result write the run's row only: the row is the history of its
/// current attempt (schema version 4). An attempt gets a history row of its own when a
/// release or a takeover moves the row on, and the history reads both, each attempt once.
#[tokio::test(flavor = "multi_thread")]
async fn b37_a_won_claim_and_its_result_write_no_history_row() {
    use anarchon_core::store::{Finish, Retention, Takeover, TakeoverOutcome};
    let t = TempStore::new().await;
    let store = &t.store;
    let j = unique_job("inline");
    let keep = Retention {
        size: 100,
        ttl_ms: None,
    };
    let now = store.now().await.unwrap();
    let ClaimOutcome::Won(first) = store.claim(&claim(&j, 1_000, "i1", now)).await.unwrap() else {
        panic!("claim of slot 1000")
    };
    let failed = Finish {
        status: RunStatus::Failed,
        error: Some("boom".into()),
        retention: keep,
    };
    assert_eq!(
        store.finish(&first, &failed).await.unwrap(),
        OwnerWrite::Done
    );
    assert_eq!(
        history_rows(&t.path()),
        0,
        "a claim and its result wrote history rows"
    );

    let ClaimOutcome::Won(second) = store.claim(&claim(&j, 2_000, "i1", now)).await.unwrap() else {
        panic!("claim of slot 2000")
    };
    assert_eq!(store.release(&second).await.unwrap(), OwnerWrite::Done);
    assert_eq!(
        history_rows(&t.path()),
        1,
        "the release wrote its attempt's row"
    );
    let takeover = Takeover {
        run: second.run.clone(),
        seen_attempt: 1,
        instance_id: "i2".into(),
        lease_ms: 60_000,
        max_attempts: 3,
        superseded: false,
        not_after: i64::MAX / 2,
    };
    let TakeoverOutcome::Won(retry) = store.take_over(&takeover).await.unwrap() else {
        panic!("takeover of the released run")
    };
    let ok = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: keep,
    };
    assert_eq!(store.finish(&retry, &ok).await.unwrap(), OwnerWrite::Done);
    assert_eq!(
        history_rows(&t.path()),
        1,
        "the takeover or its result wrote a row"
    );

    // Each attempt once, as it ended: the kit's
    // `b36_history_shows_each_attempt_once_as_it_ended` checks every field.
    assert_eq!(store.history(&j, 10).await.unwrap().len(), 3);
    // A finished run's view has no owner, although its row keeps the last one.
    let views = store.runs(std::slice::from_ref(&first.run)).await.unwrap();
    assert_eq!(
        (views[0].status, views[0].owner.as_deref()),
        (RunStatus::Failed, None)
    );
}

/// A run claimed by a build before version 4 (its attempt has a history row) and finished
/// after the migration: the row is ended and read once, the run's row not read beside it.
#[tokio::test(flavor = "multi_thread")]
async fn b33_an_attempt_of_an_older_version_is_finished_in_its_own_row() {
    use anarchon_core::store::{Finish, Lease, Reason, Retention, RunKey};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v3.db");
    let t = Tables::new("anarchon_runs").unwrap();
    {
        let c = raw(&path);
        for stmt in schema::create_v1(&t) {
            c.execute(&stmt, []).unwrap();
        }
        for from in 1..3 {
            for stmt in schema::migration(&t, from) {
                c.execute(&stmt, []).unwrap();
            }
        }
        c.execute_batch(
            "INSERT INTO anarchon_runs_meta (key, value) VALUES ('schema_version', 3), ('job:v3', 2);
             INSERT INTO anarchon_runs_attempts (job, slot, manual, attempt, instance_id, scheduled_at,
               reason, status, fence, started_at, finished_at, error)
               VALUES ('v3', 1000, 0, 1, 'a', 1000, 'scheduled', 'running', 2, 1001, NULL, NULL);
             INSERT INTO anarchon_runs (job, slot, scheduled_at, status, attempt, starts, owner,
               reason, fence, started_at, expires_at, error)
               VALUES ('v3', 1000, 1000, 'running', 1, 1, 'a', 'scheduled', 2, 1001,
               99999999999999, NULL);",
        )
        .unwrap();
    }
    let store = SqliteStore::connect(&path).await.unwrap();
    assert_eq!(store.schema_version().await.unwrap(), Some(SCHEMA_VERSION));
    let j = anarchon_core::JobName::new("v3").unwrap();
    let lease = Lease {
        run: RunKey::new(j.clone(), 1000),
        attempt: 1,
        fence: 2,
        instance_id: "a".into(),
        reason: Reason::Scheduled,
        scheduled_at: 1000,
        started_at: 1001,
        expires_at: 99_999_999_999_999,
    };
    let done = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention {
            size: 100,
            ttl_ms: None,
        },
    };
    assert_eq!(store.finish(&lease, &done).await.unwrap(), OwnerWrite::Done);
    let h = store.history(&j, 10).await.unwrap();
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!((h[0].status, h[0].fence), (RunStatus::Succeeded, 2));
    assert!(h[0].finished_at.is_some());
    assert_eq!(history_rows(&path), 1);
}
