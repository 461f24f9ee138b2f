//! The slow proof of the fenced transactions with real processes, per store: runs
//! `examples/exactly-once.rs` with a plan that stops the first attempt of chosen slots at
//! every point of the handler (before the transaction, inside it, after its commit and
//! before the scheduler's own bookkeeping), where the example's parent then sends SIGKILL,
//! SIGSTOP past the lease, SIGTERM (a handover) or, on PostgreSQL, ends every node's server
//! connection (`pg_terminate_backend`) with the transaction open. The handler prints the
//! point it reached and waits there, so each signal lands at that point.
//!
//! The verdict is read from the database, not from the example's output: per slot, the
//! ledger rows the handler's fenced transactions wrote and the job's history. Exactly one
//! row for each slot that succeeded (by the attempt that succeeded), none for any other
//! slot; every planned slot succeeded; a slot stopped before its commit was done by a later
//! attempt, one killed after its commit by its first attempt alone; the balance is the sum
//! of the ledger. Slow suite: `#[ignore]`d, run by `cargo xtask test --slow`, about 25 s per
//! store; PostgreSQL needs `ANARCHON_POSTGRES_URL` (and the feature `postgres`).

mod support;

use std::collections::BTreeMap;

use std::path::Path;
use std::time::{Duration, Instant};

use anarchon::{HistoryRecord, RunStatus, Scheduler};
use support::TempDb;
use support::examples::{build_example, run_example};

/// Every point twice (PostgreSQL adds the connection kill), with undisturbed slots between.
const PLAN: &str = "before,none,inside,none,after,none,stop,none,term,none,\
                    before,inside,after,stop,term,none";

/// One ledger row: slot, attempt, instance, amount.
type Entry = (i64, i64, String, i64);

/// What the database holds after a run.
struct Stored {
    ledger: Vec<Entry>,
    balance: i64,
    runs: Vec<HistoryRecord>,
}

async fn history<S: anarchon::LeaseStore>(store: S, job: &str) -> Vec<HistoryRecord> {
    let reader = Scheduler::leased(store).build().expect("a reader");
    let mut runs = Vec::new();
    for k in 0..4 {
        runs.extend(
            reader
                .history(&format!("{job}-{k}"), 10_000)
                .await
                .expect("the history"),
        );
    }
    runs.sort_by_key(|r| (r.slot, r.attempt));
    runs
}

fn stored_sqlite(db: &Path, job: &str) -> Stored {
    let conn = rusqlite::Connection::open(db).expect("open the example's file");
    let mut stmt = conn
        .prepare(
            "SELECT slot, attempt, instance, amount FROM eo_ledger WHERE job = ?1 \
             ORDER BY slot, attempt",
        )
        .expect("the ledger");
    let ledger = stmt
        .query_map([job], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("the ledger")
        .collect::<Result<Vec<Entry>, _>>()
        .expect("ledger rows");
    let balance = conn
        .query_row(
            "SELECT balance FROM eo_accounts WHERE job = ?1",
            [job],
            |r| r.get(0),
        )
        .expect("the account");
    let runs = tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(async {
            let store = anarchon::sqlite::SqliteStore::connect(db)
                .await
                .expect("the store");
            history(store, job).await
        });
    Stored {
        ledger,
        balance,
        runs,
    }
}

#[cfg(feature = "postgres")]
fn stored_postgres(url: &str, job: &str) -> Stored {
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(async {
            let store = anarchon::postgres::PostgresStore::connect(url)
                .await
                .expect("the store");
            let conn = store.connection().await.expect("a connection");
            let ledger = conn
                .query(
                    "SELECT slot, attempt, instance, amount FROM eo_ledger WHERE job = $1 \
                     ORDER BY slot, attempt",
                    &[&job],
                )
                .await
                .expect("the ledger")
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect();
            let balance = conn
                .query_one("SELECT balance FROM eo_accounts WHERE job = $1", &[&job])
                .await
                .expect("the account")
                .get(0);
            drop(conn);
            let runs = history(store, job).await;
            Stored {
                ledger,
                balance,
                runs,
            }
        })
}

/// The example's `PLAN first=<ms> points=<list>` line.
fn plan_of(out: &str) -> (i64, Vec<String>) {
    let line = out
        .lines()
        .find(|l| l.starts_with("PLAN first="))
        .unwrap_or_else(|| panic!("no PLAN line:\n{out}"));
    let mut first = 0;
    let mut points = Vec::new();
    for word in line.split_whitespace() {
        if let Some(v) = word.strip_prefix("first=") {
            first = v.parse().expect("the first slot");
        }
        if let Some(v) = word.strip_prefix("points=") {
            points = v.split(',').map(str::to_owned).collect();
        }
    }
    (first, points)
}

/// Runs the example on `target` and judges the database; returns the figures line.
fn prove(store: &str, target: &str, plan: &str, read: impl FnOnce(&str) -> Stored) -> String {
    let exe = build_example("exactly-once", &[]);
    let job = format!(
        "eo-test-{}-{}",
        store,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .as_millis()
    );
    let started = Instant::now();
    let (code, out) = run_example(
        &exe,
        &["--plan", plan, "--job", &job, target],
        Duration::from_secs(180),
    );
    eprintln!("{out}");
    let (first, points) = plan_of(&out);
    assert_eq!(points.join(","), plan, "the plan the example ran");

    // What the parent did, by point (the example's lines); judged below from the database.
    let mut actions: BTreeMap<&str, usize> = BTreeMap::new();
    for l in out.lines() {
        for (prefix, point) in [
            ("SIGKILL", "before:"),
            ("SIGKILL", "inside:"),
            ("SIGKILL", "after:"),
            ("SIGSTOP", "stop:"),
            ("SIGTERM", "term:"),
            ("TERMINATE", "pgkill:"),
        ] {
            if l.contains(&format!("] {prefix} ")) && l.contains(&format!(" {point} ")) {
                *actions.entry(point.trim_end_matches(':')).or_default() += 1;
            }
        }
    }
    for point in points.iter().filter(|p| *p != "none") {
        let planned = points.iter().filter(|p| *p == point).count();
        assert_eq!(
            actions.get(point.as_str()).copied().unwrap_or(0),
            planned,
            "{point}: the parent acted {actions:?} for the plan {plan}\n{out}"
        );
    }

    let db = read(&job);
    let mut slots: BTreeMap<i64, (Vec<&HistoryRecord>, Vec<&Entry>)> = BTreeMap::new();
    for r in &db.runs {
        slots.entry(r.slot_ms()).or_default().0.push(r);
    }
    for e in &db.ledger {
        slots.entry(e.0).or_default().1.push(e);
    }
    let mut finished = 0;
    let mut later = 0;
    for (slot, (attempts, rows)) in &slots {
        let won: Vec<&&HistoryRecord> = attempts
            .iter()
            .filter(|r| r.status == RunStatus::Succeeded)
            .collect();
        assert!(
            won.len() <= 1,
            "slot {slot}: {} succeeded attempts: {attempts:#?}",
            won.len()
        );
        assert_eq!(
            rows.len(),
            won.len(),
            "slot {slot}: {} ledger rows for {} succeeded attempts: rows {rows:?}, \
             history {attempts:#?}",
            rows.len(),
            won.len()
        );
        if let (Some(w), Some(e)) = (won.first(), rows.first()) {
            finished += 1;
            assert_eq!(
                (i64::from(w.attempt), w.instance_id.as_str()),
                (e.1, e.2.as_str()),
                "slot {slot}: the row is not the succeeded attempt's"
            );
            if w.attempt > 1 {
                later += 1;
            }
        }
        let Some(i) = (*slot >= first && (slot - first) % 1_000 == 0)
            .then(|| ((slot - first) / 1_000) as usize)
            .filter(|i| *i < points.len())
        else {
            continue;
        };
        let point = points[i].as_str();
        assert_eq!(
            won.len(),
            1,
            "planned slot {slot} ({point}) did not succeed"
        );
        let w = won[0];
        match point {
            "before" | "inside" | "stop" | "term" => {
                assert!(
                    w.attempt >= 2,
                    "slot {slot} ({point}): done by attempt {}, stopped before its commit",
                    w.attempt
                );
                let first_attempt = attempts.iter().find(|r| r.attempt == 1);
                assert!(
                    first_attempt.is_some_and(|r| r.status != RunStatus::Succeeded),
                    "slot {slot} ({point}): attempt 1 {first_attempt:?}"
                );
            }
            "after" => assert_eq!(
                (w.attempt, attempts.len()),
                (1, 1),
                "slot {slot} (after): killed after its commit, yet run again: {attempts:#?}"
            ),
            _ => {}
        }
    }
    for i in 0..points.len() as i64 {
        assert!(
            slots.contains_key(&(first + i * 1_000)),
            "planned slot {} never ran",
            first + i * 1_000
        );
    }
    let sum: i64 = db.ledger.iter().map(|e| e.3).sum();
    assert_eq!(db.balance, sum, "the balance is the ledger's sum");
    assert_eq!(sum, 10 * finished as i64);
    assert_eq!(code, Some(0), "the example reported a failure:\n{out}");
    // One line for `cargo xtask scenarios` (an "exactly-once" column) and for the docs.
    let kills: Vec<String> = ["before", "inside", "after", "stop", "term", "pgkill"]
        .iter()
        .map(|p| format!("{p}={}", actions.get(p).copied().unwrap_or(0)))
        .collect();
    let figures = format!(
        "EXACTLY-ONCE store={store} slots={} finished={finished} rows={} duplicates=0 \
         later={later} {} secs={:.0}",
        slots.len(),
        db.ledger.len(),
        kills.join(" "),
        started.elapsed().as_secs_f64()
    );
    eprintln!("{figures}");
    figures
}

#[test]
#[ignore = "slow suite: ANARCHON_SLOW=1 cargo xtask test"]
fn b45_exactly_once_on_sqlite_under_kills_stops_and_handovers() {
    let db = TempDb::new("exactly-once");
    let target = db.0.display().to_string();
    let path = db.0.clone();
    prove("sqlite", &target, PLAN, |job| stored_sqlite(&path, job));
}

#[cfg(feature = "postgres")]
#[test]
#[ignore = "slow suite: ANARCHON_SLOW=1 cargo xtask test"]
fn b45_exactly_once_on_postgres_under_kills_stops_handovers_and_connection_kills() {
    let Some(url) = anarchon_test_support::server_url("ANARCHON_POSTGRES_URL") else {
        return;
    };
    let plan = format!("{PLAN},pgkill,none,pgkill");
    prove("postgres", &url, &plan, |job| stored_postgres(&url, job));
}
