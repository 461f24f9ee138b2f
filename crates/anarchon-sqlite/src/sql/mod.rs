//! The schema, the statements and the row mapping of the SQLite store, written once for
//! every driver that speaks SQLite's SQL: `rusqlite` on a local file (this crate) and the
//! libSQL remote client (`anarchon-libsql`).
//!
//! Nothing here needs a driver. A driver implements [`Exec`] (run one statement, tell the
//! store's time), and the operations in [`ops`] and [`schema`] do the rest: they open the
//! transaction, run the statements in order, decide the outcome and map the rows. So both
//! stores run the same SQL in the same order and differ only in how a statement reaches
//! the database.
//!
//! Architecture invariant: this module never depends on `rusqlite` or `libsql`; the
//! `rusqlite` feature of the crate only adds the local store on top of it.

pub mod ops;
pub mod schema;

use std::fmt;
use std::future::Future;

use anarchon_core::store::{EpochMs, Error, Result};

/// A value bound to or read from a statement: the three storage classes the schema uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// SQL `NULL`.
    Null,
    /// A 64-bit integer.
    Integer(i64),
    /// UTF-8 text.
    Text(String),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Integer(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::Integer(i64::from(v))
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        // Fences, lease lengths and counts stay far below i64::MAX; saturate rather than wrap.
        Value::Integer(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Integer(i64::from(v))
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_owned())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// One result row.
pub type Row = Vec<Value>;

/// What a driver provides: one statement at a time on one connection, and the store's clock.
///
/// The operations call [`Exec::execute`] with `BEGIN IMMEDIATE`, `COMMIT` and `ROLLBACK`
/// themselves, so an implementation must send every call of one operation to the same
/// connection and must not share that connection with another operation meanwhile.
/// Errors are already mapped to [`anarchon_core::Error`] by the driver (it knows the store
/// kind, the operation, the path or URL).
pub trait Exec {
    /// The store's clock in epoch ms: the host clock for a local file, the server's for a
    /// remote database. Called inside the write transaction, after the lock was taken.
    fn now(&mut self) -> impl Future<Output = Result<EpochMs>>;

    /// Runs a statement that returns rows.
    fn query(&mut self, sql: &str, params: &[Value]) -> impl Future<Output = Result<Vec<Row>>>;

    /// Runs a statement and returns the number of rows it changed.
    fn execute(&mut self, sql: &str, params: &[Value]) -> impl Future<Output = Result<u64>>;
}

/// Checks a table prefix: an SQL identifier of ASCII letters, digits and `_`, starting with
/// a letter or `_`, at most 48 characters (so `<prefix>_attempts` stays a short name on
/// every database), and not SQLite's reserved `sqlite_` prefix.
pub fn validate_prefix(prefix: &str) -> std::result::Result<(), &'static str> {
    let mut bytes = prefix.bytes();
    match bytes.next() {
        None => return Err("it is empty"),
        Some(b) if !(b.is_ascii_alphabetic() || b == b'_') => {
            return Err("it must start with an ASCII letter or '_'");
        }
        _ => {}
    }
    if !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err("it may only hold ASCII letters, digits and '_'");
    }
    if prefix.len() > 48 {
        return Err("it is longer than 48 characters");
    }
    if prefix.to_ascii_lowercase().starts_with("sqlite_") {
        return Err("names starting with 'sqlite_' are reserved by SQLite");
    }
    Ok(())
}

/// The default table prefix.
pub const DEFAULT_PREFIX: &str = "anarchon_runs";

/// The three table names derived from one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tables {
    /// State and lease per run: `<prefix>`.
    pub runs: String,
    /// History, one row per attempt: `<prefix>_attempts`.
    pub attempts: String,
    /// Schema version and the per-job fence counters: `<prefix>_meta`.
    pub meta: String,
}

impl Tables {
    /// The names for `prefix` (checked with [`validate_prefix`]).
    pub fn new(prefix: &str) -> std::result::Result<Self, &'static str> {
        validate_prefix(prefix)?;
        Ok(Tables {
            runs: prefix.to_owned(),
            attempts: format!("{prefix}_attempts"),
            meta: format!("{prefix}_meta"),
        })
    }
}

/// Everything an operation needs besides the connection: the statements for one table
/// prefix, and the names to put into errors.
pub struct Sql {
    /// The store kind for errors (`"sqlite"`, `"libsql"`).
    pub store: &'static str,
    /// Where the tables live, for errors: a file path or a redacted URL.
    pub location: String,
    /// The table names.
    pub tables: Tables,
    pub(crate) st: Statements,
}

impl fmt::Debug for Sql {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sql")
            .field("store", &self.store)
            .field("location", &self.location)
            .field("tables", &self.tables)
            .finish_non_exhaustive()
    }
}

impl Sql {
    /// The statements for `tables`.
    pub fn new(store: &'static str, location: impl Into<String>, tables: Tables) -> Self {
        let st = Statements::new(&tables);
        Sql {
            store,
            location: location.into(),
            tables,
            st,
        }
    }

    /// An [`Error::Corrupt`] about `what` at this location.
    pub fn corrupt(&self, what: &str, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            store: self.store,
            location: if what.is_empty() {
                self.location.clone()
            } else {
                format!("{} in {}", what, self.location)
            },
            reason: reason.into(),
        }
    }
}

/// Fills `{runs}`, `{attempts}` and `{meta}` with the quoted table names.
fn render(template: &str, t: &Tables) -> String {
    template
        .replace("{runs}", &format!("\"{}\"", t.runs))
        .replace("{attempts}", &format!("\"{}\"", t.attempts))
        .replace("{meta}", &format!("\"{}\"", t.meta))
        .replace("{running}", &format!("\"{}_running\"", t.runs))
}

/// The fixed statements of one prefix, rendered once so drivers can cache them by text.
pub(crate) struct Statements {
    pub(crate) interrupt_runs: String,
    pub(crate) claim_check: String,
    pub(crate) run_exists: String,
    pub(crate) register_job: String,
    pub(crate) next_fence: String,
    pub(crate) takeover_fence: String,
    pub(crate) insert_run: String,
    pub(crate) insert_attempt: String,
    pub(crate) prune_cut: String,
    pub(crate) prune_by_count: String,
    pub(crate) prune_runs_by_count: String,
    pub(crate) prune_by_age: String,
    pub(crate) prune_runs: String,
    pub(crate) prune_runs_by_age: String,
    pub(crate) finish_run: String,
    pub(crate) finish_attempt: String,
    /// What a fenced transaction checks at its start (see [`ops::check_attempt`]).
    pub(crate) fence_check: String,
    /// `finish_run` conditional on the fence too, for a fenced transaction's own finish.
    pub(crate) finish_run_fenced: String,
    pub(crate) release_run: String,
    pub(crate) close_attempt: String,
    pub(crate) write_attempt: String,
    pub(crate) read_run: String,
    pub(crate) set_run_status: String,
    pub(crate) takeover_run: String,
    pub(crate) history: String,
    pub(crate) update_manual: String,
    pub(crate) known_jobs: String,
    /// `UPDATE ... WHERE (job, slot, attempt, owner) IN (VALUES` — completed per batch.
    pub(crate) heartbeat_head: String,
    /// `SELECT ... WHERE (job, slot) IN (VALUES` — completed per batch.
    pub(crate) runs_head: String,
    /// `SELECT ... WHERE status = 'running' AND job IN (` — completed per batch.
    pub(crate) unfinished_head: String,
}

/// The columns of a run view, in the order [`ops`] reads them. A run that ended keeps its
/// last owner in the row (the history of its current attempt); its view has none.
const RUN_VIEW_COLUMNS: &str = "job, slot, status, attempt, \
     CASE WHEN status = 'running' THEN owner END, expires_at";
/// The columns of a history record, in the order [`ops`] reads them.
const ATTEMPT_COLUMNS: &str = "job, slot, scheduled_at, instance_id, manual, attempt, reason, \
     status, fence, started_at, finished_at, error";

impl Statements {
    fn new(t: &Tables) -> Self {
        let r = |s: &str| render(s, t);
        Statements {
            // [B-15] Earlier runs whose lease ended; their history rows are closed one by one
            // from what this returns. A claim runs it only when `claim_check` found such runs.
            // Without `INDEXED BY` the planner (no statistics) walks the primary key over
            // all of the job's earlier runs, finished ones included.
            // The row keeps its owner and records the end: it is the history of its
            // current attempt (a released run's attempt has its history row already).
            interrupt_runs: r("UPDATE {runs} INDEXED BY {running} \
                 SET status = 'interrupted', finished_at = ?3, \
                 error = 'replaced by the next slot' \
                 WHERE job = ?1 AND slot < ?2 AND status = 'running' \
                 AND (owner IS NULL OR expires_at <= ?3) RETURNING slot, attempt"),
            // Is the slot taken; which earlier run holds a live lease (the oldest); are there
            // earlier runs to interrupt (`interrupt_runs`). The searches of earlier runs go
            // through the partial index for the reason given above.
            // A claim's run exists already: the claim is `Taken` whoever asks (see
            // `ops::claim_many`'s read before the write lock).
            run_exists: r("SELECT EXISTS (SELECT 1 FROM {runs} WHERE job = ?1 AND slot = ?2)"),
            claim_check: r(
                "SELECT EXISTS (SELECT 1 FROM {runs} WHERE job = ?1 AND slot = ?2), \
                 (SELECT MIN(slot) FROM {runs} INDEXED BY {running} \
                  WHERE job = ?1 AND slot < ?2 \
                  AND status = 'running' AND owner IS NOT NULL AND expires_at > ?3), \
                 EXISTS (SELECT 1 FROM {runs} INDEXED BY {running} \
                  WHERE job = ?1 AND slot < ?2 AND status = 'running' \
                  AND (owner IS NULL OR expires_at <= ?3))",
            ),
            register_job: r("INSERT INTO {meta} (key, value) VALUES (?1, 0) \
                 ON CONFLICT (key) DO NOTHING"),
            // The per-job fence lives in meta so that pruning every run never lowers it.
            next_fence: r("INSERT INTO {meta} (key, value) VALUES (?1, 1) \
                 ON CONFLICT (key) DO UPDATE SET value = value + 1 RETURNING value"),
            // A takeover's fence: `ops::PRUNE_EVERY` above the last one, so the fence modulo
            // `PRUNE_EVERY` counts won claims only (a claim's fence is the last one + 1).
            takeover_fence: r(&format!(
                "INSERT INTO {{meta}} (key, value) VALUES (?1, {every}) \
                 ON CONFLICT (key) DO UPDATE SET value = value + {every} RETURNING value",
                every = ops::PRUNE_EVERY
            )),
            insert_run: r(
                "INSERT INTO {runs} (job, slot, scheduled_at, status, attempt, starts, \
                 owner, reason, fence, started_at, expires_at, error) \
                 VALUES (?1, ?2, ?3, 'running', 1, 1, ?4, ?5, ?6, ?7, ?8, NULL)",
            ),
            insert_attempt: r(
                "INSERT INTO {attempts} (job, slot, manual, attempt, instance_id, \
                 scheduled_at, reason, status, fence, started_at, finished_at, error) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) \
                 ON CONFLICT (job, slot, manual, attempt, instance_id) DO UPDATE SET \
                 scheduled_at = excluded.scheduled_at, reason = excluded.reason, \
                 status = excluded.status, fence = excluded.fence, \
                 started_at = excluded.started_at, finished_at = excluded.finished_at, \
                 error = excluded.error",
            ),
            // [B-37] By count, the cut: the (slot, manual) of the `size`-th newest run of the
            // job. A scheduled run is its row (every history row of a scheduled run has
            // one), a manual run its history rows (one per slot, whichever instances).
            // Both ranges are read newest first by key and merged, so it walks `size`
            // entries.
            prune_cut: r(
                "SELECT slot, manual FROM (SELECT slot, 0 AS manual FROM {runs} WHERE job = ?1 \
                 UNION ALL SELECT DISTINCT slot, 1 AS manual FROM {attempts} \
                 WHERE job = ?1 AND manual = 1) \
                 ORDER BY slot DESC, manual DESC LIMIT 1 OFFSET ?2 - 1",
            ),
            // [B-37] By count: the history rows of runs older than the cut (?2, ?3), except
            // those of running runs. The range on the unique index touches only what goes.
            prune_by_count: r(
                "DELETE FROM {attempts} WHERE job = ?1 AND (slot, manual) < (?2, ?3) \
                 AND NOT (manual = 0 AND EXISTS (SELECT 1 FROM {runs} AS r \
                   WHERE r.job = ?1 AND r.slot = {attempts}.slot AND r.status = 'running')) \
                 RETURNING slot, manual",
            ),
            // [B-37] By count: the runs older than the cut (?2, ?3) that ended, with the
            // history of their current attempt; a range on the primary key (a scheduled
            // run's row is older than the cut when its slot is below ?2, or at it when the
            // cut is a manual run's: `?3` is 0 or 1).
            prune_runs_by_count: r("DELETE FROM {runs} WHERE job = ?1 AND slot < ?2 + ?3 \
                 AND status <> 'running' \
                 AND NOT EXISTS (SELECT 1 FROM {attempts} AS a \
                   WHERE a.job = ?1 AND a.slot = {runs}.slot AND a.manual = 0)"),
            // [B-37] By age: attempts that finished before the cut, except those of running
            // runs, among the job's ?3 oldest attempts (by slot; ties on the last slot
            // included): the range on the unique index stops there, so a pass reads what it
            // removes plus one page, not the job's whole history (`ops::TTL_PAGE`).
            prune_by_age: r(
                "DELETE FROM {attempts} WHERE job = ?1 AND finished_at < ?2 \
                 AND slot <= (SELECT MAX(slot) FROM (SELECT slot FROM {attempts} \
                   WHERE job = ?1 ORDER BY slot LIMIT ?3)) \
                 AND NOT (manual = 0 AND EXISTS (SELECT 1 FROM {runs} AS r \
                   WHERE r.job = ?1 AND r.slot = {attempts}.slot AND r.status = 'running')) \
                 RETURNING slot, manual",
            ),
            // By age, a run that ended goes when the last of its history rows went: one
            // statement for the slots from ?2 to ?3, the range a prune removed history rows
            // from. A run in the range that still has a history row, or still runs, stays,
            // and so does one whose current attempt (its row's history) ended at or after
            // the cut ?4; a row of an older version (no `finished_at`) goes, as there.
            prune_runs: r(
                "DELETE FROM {runs} WHERE job = ?1 AND slot BETWEEN ?2 AND ?3 \
                 AND status <> 'running' AND (finished_at IS NULL OR finished_at < ?4) \
                 AND NOT EXISTS (SELECT 1 FROM {attempts} AS a \
                   WHERE a.job = ?1 AND a.slot = {runs}.slot AND a.manual = 0)",
            ),
            // [B-37] By age: runs whose current attempt ended before the cut and that hold
            // no history row, among the job's ?3 oldest runs (as `prune_by_age`).
            prune_runs_by_age: r("DELETE FROM {runs} WHERE job = ?1 AND finished_at < ?2 \
                 AND status <> 'running' \
                 AND slot <= (SELECT MAX(slot) FROM (SELECT slot FROM {runs} \
                   WHERE job = ?1 ORDER BY slot LIMIT ?3)) \
                 AND NOT EXISTS (SELECT 1 FROM {attempts} AS a \
                   WHERE a.job = ?1 AND a.slot = {runs}.slot AND a.manual = 0) \
                 RETURNING slot"),
            // The row keeps its owner: it is the history of its current attempt.
            finish_run: r(
                "UPDATE {runs} SET status = ?5, error = ?6, finished_at = ?7 \
                 WHERE job = ?1 AND slot = ?2 AND attempt = ?3 AND owner = ?4 \
                 AND status = 'running'",
            ),
            finish_attempt: r(
                "UPDATE {attempts} SET status = ?4, finished_at = ?5, error = ?6 \
                 WHERE job = ?1 AND slot = ?2 AND manual = 0 AND attempt = ?3",
            ),
            fence_check: r("SELECT status, attempt, owner, fence, expires_at \
                 FROM {runs} WHERE job = ?1 AND slot = ?2"),
            finish_run_fenced: r("UPDATE {runs} SET status = ?6, error = NULL, \
                 finished_at = ?7 \
                 WHERE job = ?1 AND slot = ?2 AND attempt = ?3 AND owner = ?4 AND fence = ?5 \
                 AND status = 'running'"),
            release_run: r("UPDATE {runs} SET owner = NULL, expires_at = ?5 \
                 WHERE job = ?1 AND slot = ?2 AND attempt = ?3 AND owner = ?4 \
                 AND status = 'running'"),
            // Ends the attempt's history row unless it already ended (as after a release).
            close_attempt: r(
                "UPDATE {attempts} SET status = ?4, finished_at = ?5, error = ?6 \
                 WHERE job = ?1 AND slot = ?2 AND manual = 0 AND attempt = ?3 \
                 AND status = 'running'",
            ),
            // The history row of the run's current attempt (?3), held by ?4, ended with
            // status ?5 at ?6 with error ?7, written from the run's row before the row
            // moves on (a release, a takeover). A row written already (by a build before
            // version 4, or a store that writes one at every claim) is ended unless it
            // ended already.
            write_attempt: r(
                "INSERT INTO {attempts} (job, slot, manual, attempt, instance_id, \
                 scheduled_at, reason, status, fence, started_at, finished_at, error) \
                 SELECT job, slot, 0, attempt, owner, scheduled_at, reason, ?5, fence, \
                 started_at, ?6, ?7 FROM {runs} WHERE job = ?1 AND slot = ?2 \
                 AND attempt = ?3 AND owner = ?4 AND status = 'running' \
                 ON CONFLICT (job, slot, manual, attempt, instance_id) DO UPDATE SET \
                 status = excluded.status, finished_at = excluded.finished_at, \
                 error = excluded.error WHERE {attempts}.status = 'running'",
            ),
            read_run: r(
                "SELECT status, attempt, starts, owner, expires_at, scheduled_at \
                 FROM {runs} WHERE job = ?1 AND slot = ?2",
            ),
            set_run_status: r("UPDATE {runs} SET status = ?3, error = ?4 \
                 WHERE job = ?1 AND slot = ?2"),
            takeover_run: r(
                "UPDATE {runs} SET status = 'running', attempt = ?3, starts = ?4, \
                 owner = ?5, reason = 'takeover', fence = ?6, started_at = ?7, \
                 expires_at = ?8, error = NULL, finished_at = NULL \
                 WHERE job = ?1 AND slot = ?2",
            ),
            // The history rows, and the runs whose current attempt has none (its history is
            // the run's row: running with an owner, or ended by its result or by the next
            // slot, which set `finished_at` and keep the owner). Other runs without a row
            // for their current attempt are not history: a row of an older version or of a
            // store that writes a row at every claim whose rows a prune removed first (the
            // run goes next), or a run that a build before version 4 finished (it clears the
            // owner; that record is not shown).
            // Ties on every sort key keep the order of insertion, as the reference store
            // does; a run's row, which has no insertion number, goes first among its ties.
            history: r(&format!(
                "SELECT {ATTEMPT_COLUMNS} FROM (\
                 SELECT {ATTEMPT_COLUMNS}, id FROM {{attempts}} WHERE job = ?1 \
                 UNION ALL SELECT job, slot, scheduled_at, owner, 0, attempt, reason, status, \
                 fence, started_at, finished_at, error, NULL FROM {{runs}} AS r \
                 WHERE job = ?1 AND owner IS NOT NULL \
                 AND (status = 'running' OR finished_at IS NOT NULL) AND NOT EXISTS (SELECT 1 \
                   FROM {{attempts}} AS a WHERE a.job = ?1 AND a.slot = r.slot \
                   AND a.manual = 0 AND a.attempt = r.attempt)) \
                 ORDER BY started_at DESC, slot DESC, attempt DESC, id ASC LIMIT ?2"
            )),
            update_manual: r(
                "UPDATE {attempts} SET scheduled_at = ?4, attempt = ?5, reason = ?6, \
                 status = ?7, fence = ?8, started_at = ?9, finished_at = ?10, error = ?11 \
                 WHERE job = ?1 AND slot = ?2 AND manual = 1 AND instance_id = ?3",
            ),
            // Job keys are `job:<name>`; the range keeps the scan on the primary key.
            known_jobs: r("SELECT substr(key, 5) FROM {meta} \
                 WHERE key >= 'job:' AND key < 'job;' ORDER BY key"),
            heartbeat_head: r(
                "UPDATE {runs} SET expires_at = ?1 WHERE status = 'running' \
                 AND (job, slot, attempt, owner) IN (VALUES ",
            ),
            runs_head: r(&format!(
                "SELECT {RUN_VIEW_COLUMNS} FROM {{runs}} WHERE (job, slot) IN (VALUES "
            )),
            // Through the partial index of running runs: without `INDEXED BY` the planner
            // (no statistics) walks the primary key over every run of each job, finished
            // ones included (26 µs a job at 100 runs, against 3 µs).
            unfinished_head: r(&format!(
                "SELECT {RUN_VIEW_COLUMNS} FROM {{runs}} INDEXED BY {{running}} \
                 WHERE status = 'running' AND job IN ("
            )),
        }
    }
}

/// The meta key of a job: its row holds the job's last fence and makes it known.
pub(crate) fn job_key(job: &str) -> String {
    format!("job:{job}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_sql_identifiers() {
        assert!(validate_prefix("anarchon_runs").is_ok());
        assert!(validate_prefix("_x9").is_ok());
        for bad in [
            "",
            "9x",
            "a-b",
            "a b",
            "x\"; DROP TABLE y; --",
            "sqlite_x",
            "é",
        ] {
            assert!(validate_prefix(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_prefix(&"a".repeat(49)).is_err());
    }

    #[test]
    fn statements_name_the_prefixed_tables() {
        let t = Tables::new("p").unwrap();
        let st = Statements::new(&t);
        assert!(st.insert_attempt.contains("\"p_attempts\""));
        assert!(st.next_fence.contains("\"p_meta\""));
        assert!(!st.history.contains('{'), "{}", st.history);
        assert!(!st.runs_head.contains('{'));
    }
}
