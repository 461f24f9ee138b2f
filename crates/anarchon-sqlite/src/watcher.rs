//! Release notifications across processes: while a scheduler of this process watches runs as
//! a backup, a thread polls the file's `PRAGMA data_version` (a counter SQLite bumps when
//! another connection commits) every [`POLL`], and on a change reads the runs that are
//! released (running, no owner) and announces the new ones on the in-process release
//! channel. A handover by a process on another connection so reaches the backups within a
//! few tens of milliseconds instead of at their next heartbeat poll. With no watcher the
//! thread ends: an idle instance reads nothing.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anarchon_core::JobName;
use anarchon_core::store::RunKey;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::broadcast;

/// How often the file's change counter is read while someone watches.
pub(crate) const POLL: Duration = Duration::from_millis(15);

/// Counts the schedulers of this store that watch runs and runs the poller while any does.
pub(crate) struct ReleaseWatcher {
    path: PathBuf,
    runs_table: String,
    releases: Arc<broadcast::Sender<RunKey>>,
    watchers: Arc<AtomicUsize>,
    alive: Arc<AtomicBool>,
}

impl ReleaseWatcher {
    pub(crate) fn new(
        path: PathBuf,
        runs_table: String,
        releases: Arc<broadcast::Sender<RunKey>>,
    ) -> Self {
        ReleaseWatcher {
            path,
            runs_table,
            releases,
            watchers: Arc::default(),
            alive: Arc::default(),
        }
    }

    /// One scheduler starts (`true`) or stops watching.
    pub(crate) fn set(&self, watching: bool) {
        if watching {
            self.watchers.fetch_add(1, Ordering::SeqCst);
            self.ensure_thread();
        } else {
            let _ = self
                .watchers
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
    }

    fn ensure_thread(&self) {
        if self.alive.swap(true, Ordering::SeqCst) {
            return;
        }
        let (path, table) = (self.path.clone(), self.runs_table.clone());
        let (releases, watchers, alive) = (
            self.releases.clone(),
            self.watchers.clone(),
            self.alive.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("anarchon-sqlite-watch".into())
            .spawn(move || {
                poll(&path, &table, &releases, &watchers);
                alive.store(false, Ordering::SeqCst);
                // A watcher that arrived while this thread was leaving starts no new one
                // (it saw `alive`): carry on for it.
                if watchers.load(Ordering::SeqCst) > 0 && !alive.swap(true, Ordering::SeqCst) {
                    poll(&path, &table, &releases, &watchers);
                    alive.store(false, Ordering::SeqCst);
                }
            });
        if let Err(e) = spawned {
            self.alive.store(false, Ordering::SeqCst);
            tracing::warn!(
                "anarchon-sqlite: could not start the release watcher ({e}); backups in other \
                 processes then notice a handover at their next poll"
            );
        }
    }
}

fn poll(path: &PathBuf, table: &str, releases: &broadcast::Sender<RunKey>, watchers: &AtomicUsize) {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = match Connection::open_with_flags(path, flags) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("anarchon-sqlite: the release watcher could not open the file: {e}");
            return;
        }
    };
    let _ = conn.busy_timeout(Duration::from_millis(50));
    let query = released_query(table);
    let mut version: Option<i64> = None;
    let mut known: HashSet<RunKey> = HashSet::new();
    while watchers.load(Ordering::SeqCst) > 0 {
        let now: Option<i64> = conn.query_row("PRAGMA data_version", [], |r| r.get(0)).ok();
        if now.is_some() && now != version {
            version = now;
            if let Ok(released) = read_released(&conn, &query) {
                for key in released.difference(&known) {
                    let _ = releases.send(key.clone());
                }
                known = released;
            }
        }
        std::thread::sleep(POLL);
    }
}

/// The released runs (running, no owner), through the partial index of released runs
/// (schema version 3), so the read touches those only. Under load the other processes
/// commit many times between two polls, so this runs at about every poll; reading every
/// running run instead took ~20 ms at 10,000 running runs, up to half a core per process.
fn released_query(table: &str) -> String {
    format!(
        "SELECT job, slot FROM \"{table}\" INDEXED BY \"{table}_released\" \
         WHERE status = 'running' AND owner IS NULL"
    )
}

fn read_released(conn: &Connection, query: &str) -> rusqlite::Result<HashSet<RunKey>> {
    let mut stmt = conn.prepare_cached(query)?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    let mut out = HashSet::new();
    for row in rows {
        let (job, slot) = row?;
        if let Ok(job) = JobName::new(job) {
            out.insert(RunKey::new(job, slot));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::{Tables, schema};
    use rusqlite::StatementStatus;

    /// The watcher's read steps through the released runs only, however many runs are
    /// running: with 2,000 running runs and 2 released it finds the 2 in a few steps.
    #[test]
    fn the_release_watcher_reads_only_released_runs() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("w.db")).unwrap();
        let t = Tables::new("w").unwrap();
        for stmt in schema::create_v1(&t) {
            conn.execute(&stmt, []).unwrap();
        }
        for from in 1..schema::SCHEMA_VERSION {
            for stmt in schema::migration(&t, from) {
                conn.execute(&stmt, []).unwrap();
            }
        }
        conn.execute_batch("BEGIN").unwrap();
        for i in 0..2_000 {
            let owner = if i % 1_000 == 7 { None } else { Some("a") };
            conn.execute(
                "INSERT INTO w (job, slot, scheduled_at, status, attempt, starts, owner, \
                 reason, fence, started_at, expires_at, error) \
                 VALUES (?1, 1000, 1000, 'running', 1, 1, ?2, 'scheduled', 1, 1000, 9000, NULL)",
                rusqlite::params![format!("job-{i:05}"), owner],
            )
            .unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
        let query = released_query(&t.runs);
        let released = read_released(&conn, &query).unwrap();
        let mut jobs: Vec<String> = released.iter().map(|k| k.job.to_string()).collect();
        jobs.sort();
        assert_eq!(jobs, ["job-00007", "job-01007"]);
        let stmt = conn.prepare_cached(&query).unwrap();
        let steps = stmt.get_status(StatementStatus::VmStep);
        assert!(
            steps < 100,
            "the watcher's read took {steps} VM steps for 2 released runs among 2,000 running \
             ones: it scans the running runs"
        );
    }
}
