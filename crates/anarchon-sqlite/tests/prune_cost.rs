//! [B-37] Pruning and `unfinished_runs` cost what they remove or find, not the job's history.
//!
//! The cost is counted, not timed: the steps of SQLite's virtual machine
//! (`SQLITE_STMTSTATUS_VM_STEP`) of every statement the store's operations run, which do not
//! depend on the machine's speed or load. The same claim-and-finish cycle is counted on a job
//! kept to 16 runs and on one kept to 128: a prune that walked the history (the `size`-th
//! newest run found on every finish, the age cut reading every row of the job, the running
//! runs found by a scan of every run of the job) costs about 8 times as much at 128, a prune
//! that costs what it removes the same.

use anarchon_core::store::{
    ClaimOutcome, EpochMs, Error, Finish, JobName, LeaseClaim, Overlap, Reason, Result, Retention,
    RunKey, RunStatus,
};
use anarchon_sqlite::sql::ops::{self, PRUNE_EVERY};
use anarchon_sqlite::sql::{Exec, Row, Sql, Tables, Value, schema};
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, StatementStatus};

/// An [`Exec`] on a plain connection that adds up the virtual machine steps of every
/// statement it runs.
struct Counting {
    conn: Connection,
    steps: u64,
    clock: EpochMs,
}

impl Counting {
    fn run(&mut self, sql: &str, params: &[Value]) -> rusqlite::Result<(Vec<Row>, u64)> {
        let bound: Vec<SqlValue> = params
            .iter()
            .map(|v| match v {
                Value::Null => SqlValue::Null,
                Value::Integer(i) => SqlValue::Integer(*i),
                Value::Text(s) => SqlValue::Text(s.clone()),
            })
            .collect();
        let mut st = self.conn.prepare_cached(sql)?;
        st.reset_status(StatementStatus::VmStep);
        let columns = st.column_count();
        let mut out = Vec::new();
        {
            let mut rows = st.query(rusqlite::params_from_iter(bound.iter()))?;
            while let Some(r) = rows.next()? {
                let mut row = Vec::with_capacity(columns);
                for i in 0..columns {
                    row.push(match r.get_ref(i)? {
                        ValueRef::Null => Value::Null,
                        ValueRef::Integer(v) => Value::Integer(v),
                        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
                        other => Value::Text(format!("{other:?}")),
                    });
                }
                out.push(row);
            }
        }
        self.steps += u64::try_from(st.get_status(StatementStatus::VmStep)).unwrap_or(0);
        drop(st);
        Ok((out, self.conn.changes()))
    }
}

fn failed(e: rusqlite::Error) -> Error {
    Error::store("sqlite", "counting test", e)
}

impl Exec for Counting {
    async fn now(&mut self) -> Result<EpochMs> {
        // A clock of its own: 1 ms a call, so runs end in slot order as in a service.
        self.clock += 1;
        Ok(self.clock)
    }

    async fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        self.run(sql, params).map(|r| r.0).map_err(failed)
    }

    async fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        self.run(sql, params).map(|r| r.1).map_err(failed)
    }
}

/// A store's tables on a fresh file of `dir`, and the counting connection to them.
async fn open(dir: &tempfile::TempDir) -> (Counting, Sql) {
    let path = dir.path().join("count.db");
    let conn = Connection::open(&path).expect("open");
    conn.pragma_update(None, "temp_store", "MEMORY")
        .expect("pragma");
    let mut e = Counting {
        conn,
        steps: 0,
        clock: 1_000_000_000,
    };
    let sql = Sql::new(
        "sqlite",
        path.display().to_string(),
        Tables::new("anarchon_runs").expect("prefix"),
    );
    schema::ensure(&mut e, &sql).await.expect("schema");
    (e, sql)
}

/// One won claim of slot `i` of `job` and its finish.
async fn cycle(e: &mut Counting, sql: &Sql, job: &JobName, i: i64, retention: Retention) {
    let slot = i * 1000;
    let claim = LeaseClaim {
        run: RunKey::new(job.clone(), slot),
        scheduled_at: slot,
        instance_id: "a".into(),
        lease_ms: 60_000,
        not_after: i64::MAX,
        overlap: Overlap::Skip,
        reason: Reason::Scheduled,
        retention,
    };
    let won = ops::claim_many(e, sql, &[claim]).await.expect("claim");
    let Some(ClaimOutcome::Won(lease)) = won.into_iter().next() else {
        panic!("claim of slot {slot} not won")
    };
    let finish = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention,
    };
    ops::finish_many(e, sql, &[(lease, finish)])
        .await
        .expect("finish");
}

/// Steps per claim-and-finish cycle at the steady state of a job kept to `size` runs (the
/// average over 128 cycles, a whole number of pruning periods), steps of one
/// `unfinished_runs` of the job there, and the runs the job holds at the end.
async fn steady(size: u32, ttl_ms: Option<u64>) -> (u64, u64, usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut e, sql) = open(&dir).await;
    let job = JobName::new("counted").expect("job name");
    let retention = Retention { size, ttl_ms };
    let warm = i64::from(size) + 2 * PRUNE_EVERY as i64;
    for i in 0..warm {
        cycle(&mut e, &sql, &job, i, retention).await;
    }
    e.steps = 0;
    let cycles = 128;
    for i in warm..warm + cycles {
        cycle(&mut e, &sql, &job, i, retention).await;
    }
    let per_cycle = e.steps / cycles as u64;
    e.steps = 0;
    let unfinished = ops::unfinished_runs(&mut e, &sql, std::slice::from_ref(&job))
        .await
        .expect("unfinished runs");
    assert!(unfinished.is_empty(), "{unfinished:?}");
    let read = e.steps;
    let kept = ops::history(&mut e, &sql, &job, 100_000)
        .await
        .expect("history")
        .len();
    (per_cycle, read, kept)
}

fn flat(what: &str, small: u64, big: u64) {
    // The history grows 8 times from `small` to `big`; a cost that follows it grows about as
    // much, one that does not stays within a few steps of the same.
    eprintln!("{what}: {small} VM steps at 16 runs, {big} at 128");
    assert!(
        big * 4 < small * 5,
        "{what}: {small} VM steps at 16 runs, {big} at 128: the cost grows with the history"
    );
}

/// [B-37] A claim-and-finish cycle costs the same at 16 and at 128 runs of history (the
/// finish prunes one in `size / 8` finishes, that many runs at once), and the job holds
/// between `size` and `size + PRUNE_EVERY - 1` runs.
#[tokio::test]
async fn b37_pruning_by_count_costs_the_same_whatever_the_history() {
    let (small, _, kept_small) = steady(16, None).await;
    let (big, _, kept_big) = steady(128, None).await;
    flat("claim + finish, pruning by count", small, big);
    assert!(
        (16..16 + PRUNE_EVERY as usize).contains(&kept_small),
        "{kept_small} runs kept of 16"
    );
    assert!(
        (128..128 + PRUNE_EVERY as usize).contains(&kept_big),
        "{kept_big} runs kept of 128"
    );
}

/// [B-37] With a TTL that removes nothing, the age cut looks at a page of the job's oldest
/// rows, not at every row: the cycle costs the same at 16 and at 128 runs.
#[tokio::test]
async fn b37_the_age_cut_costs_the_same_whatever_the_history() {
    let day = Some(86_400_000);
    let (small, _, _) = steady(16, day).await;
    let (big, _, kept) = steady(128, day).await;
    flat("claim + finish, pruning by count and age", small, big);
    assert!(
        (128..128 + PRUNE_EVERY as usize).contains(&kept),
        "{kept} runs kept of 128"
    );
}

/// `unfinished_runs` of a job with no running run reads the partial index of running runs,
/// not the job's finished runs: the same steps at 16 and at 128 runs.
#[tokio::test]
async fn b19_unfinished_runs_costs_the_same_whatever_the_history() {
    let (_, small, _) = steady(16, None).await;
    let (_, big, _) = steady(128, None).await;
    flat("unfinished_runs", small, big);
}
