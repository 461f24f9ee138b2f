//! Helpers of the PostgreSQL tests: a fresh schema per store, and cleanup of old ones.

#![allow(dead_code, unreachable_pub)] // Each test binary uses a different part.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anarchon_core::store::{Prepare, Store};
use anarchon_postgres::{PostgresOptions, PostgresStore};

/// The server URL, or `None` after a SKIP line (a failure under ANARCHON_REQUIRE_SERVERS=1).
pub fn url() -> Option<String> {
    anarchon_core::testkit::server_url("ANARCHON_POSTGRES_URL")
}

/// A schema name no other test uses: `anarchon_test_<unix seconds>_<random>`.
pub fn fresh_schema() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    format!("anarchon_test_{secs}_{:08x}", rand::random::<u32>())
}

/// A store on a fresh schema (not yet prepared, not yet connected: the lazily connecting
/// constructor, so tests can build one without an async context).
///
/// Its jobs are pruned as soon as they are found due (no prune window, the default, set
/// here so that a changed default cannot make the conformance kit's retention tests, which
/// wait up to 10 s for a prune, wait for a window). `tests/batch.rs` tests the window.
pub fn store_on(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::unconnected(
        url,
        PostgresOptions::default()
            .schema(schema)
            .pool_size(4)
            .prune_window(Duration::ZERO),
    )
    .expect("valid options")
}

/// A `prepare` of no jobs, as the tests' instance `test`.
pub fn prepare_no_jobs() -> Prepare {
    Prepare {
        jobs: vec![],
        instance_id: "test".into(),
        call_timeout: Duration::from_secs(5),
    }
}

/// A prepared store on a fresh schema. Also drops the test schemas older than an hour, so
/// the server stays small however often the tests run.
pub async fn fresh_store(url: &str) -> PostgresStore {
    drop_old_schemas(url).await;
    let store = store_on(url, &fresh_schema());
    store
        .prepare(&prepare_no_jobs())
        .await
        .expect("prepare a fresh schema");
    store
}

/// A client on a connection of its own, and the task that drives the connection (it ends
/// once the client is dropped).
pub async fn connect(
    url: &str,
) -> (
    tokio_postgres::Client,
    tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>,
) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    (client, tokio::spawn(connection))
}

/// Runs SQL on a connection of its own.
pub async fn exec(url: &str, sql: &str) -> Result<(), tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let task = tokio::spawn(connection);
    let r = client.batch_execute(sql).await;
    drop(client);
    let _ = task.await;
    r
}

/// Drops one schema and everything in it.
pub async fn drop_schema(url: &str, schema: &str) {
    let _ = exec(url, &format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")).await;
}

pub async fn drop_old_schemas(url: &str) {
    let Ok((client, connection)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await else {
        return;
    };
    let task = tokio::spawn(connection);
    let cutoff = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() - Duration::from_secs(3600);
    if let Ok(rows) = client
        .query(
            "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'anarchon\\_test\\_%'",
            &[],
        )
        .await
    {
        for row in rows {
            let name: String = row.get(0);
            let secs = name
                .strip_prefix("anarchon_test_")
                .and_then(|r| r.split('_').next())
                .and_then(|s| s.parse::<u64>().ok());
            if secs.is_some_and(|s| s < cutoff.as_secs()) {
                let _ = client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
                    .await;
            }
        }
    }
    drop(client);
    let _ = task.await;
}

/// Another connection's open transaction holding row locks (`FOR UPDATE`), as a batch or a
/// prune of another instance holds them.
pub struct RowLocks {
    client: tokio_postgres::Client,
    task: tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>,
}

impl RowLocks {
    /// The `_jobs` rows of `jobs`, as a claim, result or takeover batch holds them.
    pub async fn jobs(url: &str, schema: &str, jobs: &[&str]) -> RowLocks {
        let sql =
            format!("SELECT 1 FROM \"{schema}\".anarchon_runs_jobs WHERE job = ANY($1) FOR UPDATE");
        Self::hold(url, &sql, jobs).await
    }

    /// Every history row of `jobs`, as a prune deleting them holds them: the history
    /// table's rows and the rows of the runs that ended (a run's row holds the history of
    /// its current attempt).
    pub async fn history(url: &str, schema: &str, jobs: &[&str]) -> RowLocks {
        let sql = format!(
            "SELECT 1 FROM \"{schema}\".anarchon_runs_attempts WHERE job = ANY($1) FOR UPDATE"
        );
        let locks = Self::hold(url, &sql, jobs).await;
        let runs = format!(
            "SELECT 1 FROM \"{schema}\".anarchon_runs WHERE job = ANY($1) AND status <> 'running' \
             FOR UPDATE"
        );
        locks.client.execute(&runs, &[&jobs]).await.unwrap();
        locks
    }

    async fn hold(url: &str, sql: &str, jobs: &[&str]) -> RowLocks {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let task = tokio::spawn(connection);
        client.batch_execute("BEGIN").await.unwrap();
        client.execute(sql, &[&jobs]).await.unwrap();
        RowLocks { client, task }
    }

    /// Waits (at most 10 s) until `n` other backends wait for these locks (directly, or
    /// behind another backend that waits for them), so a test can
    /// tell that a statement it started in the background began (and took its snapshot)
    /// before what the test does next.
    pub async fn wait_for_waiters(&self, n: i64) {
        let pid: i32 = self
            .client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let started = std::time::Instant::now();
        loop {
            // The activity view is read once per transaction unless cleared.
            self.client
                .execute("SELECT pg_stat_clear_snapshot()", &[])
                .await
                .unwrap();
            let waiting: i64 = self
                .client
                .query_one(
                    "WITH RECURSIVE w(pid) AS (
                         SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))
                         UNION
                         SELECT a.pid FROM pg_stat_activity a JOIN w
                             ON w.pid = ANY(pg_blocking_pids(a.pid))
                     )
                     SELECT count(*) FROM w",
                    &[&pid],
                )
                .await
                .unwrap()
                .get(0);
            if waiting >= n {
                return;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "{waiting} backends wait for the held rows after 10 s, not {n}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Rolls the transaction back: the rows are free again.
    pub async fn release(self) {
        self.client.batch_execute("ROLLBACK").await.unwrap();
        drop(self.client);
        let _ = self.task.await;
    }
}

/// A log writer that appends to a shared buffer, for tests that read what was logged.
pub struct LogSink(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
