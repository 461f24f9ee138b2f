//! The tables, their version and the migrations. [B-33, B-43]
//!
//! `<prefix>_meta` holds `schema_version`. [`ensure`] runs in one `BEGIN IMMEDIATE`
//! transaction, so instances that start at the same moment take turns: the first creates
//! or migrates, the others find the current version. A newer version is refused with
//! [`Error::SchemaTooNew`] before anything is written; a table of ours with other columns,
//! or tables of ours without a meta table, are refused with [`Error::Corrupt`]. Nothing is
//! ever dropped or rewritten.
//!
//! | version | change |
//! |---|---|
//! | 1 | the tables `<prefix>`, `<prefix>_attempts`, `<prefix>_meta` |
//! | 2 | the partial index `<prefix>_running` on running runs, so a claim's checks of earlier runs touch only the running ones |
//! | 3 | the partial index `<prefix>_released` on released runs (running, no owner), so the release watcher of each process reads only those, not every running run |
//! | 4 | the column `finished_at` of `<prefix>`: a run's row is the history of its current attempt until another attempt supersedes it (see [`super::ops`]), so a won claim and its result write no history row |

use anarchon_core::store::{Error, Result};

use super::ops::finish_tx;
use super::{Exec, Sql, Tables, Value, render};

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 4;

/// Columns of `<prefix>` (one row per run: state, lease, fence, and the history of its
/// current attempt) at [`SCHEMA_VERSION`].
pub const RUNS_COLUMNS: &[&str] = &[
    "job",
    "slot",
    "scheduled_at",
    "status",
    "attempt",
    "starts",
    "owner",
    "reason",
    "fence",
    "started_at",
    "expires_at",
    "error",
    "finished_at",
];

/// The columns of `<prefix>` a schema at `version` has (`finished_at` came with version 4).
pub fn runs_columns(version: i64) -> &'static [&'static str] {
    if version >= 4 {
        RUNS_COLUMNS
    } else {
        &RUNS_COLUMNS[..RUNS_COLUMNS.len() - 1]
    }
}

/// Columns of `<prefix>_attempts` (one row per attempt: the history).
pub const ATTEMPTS_COLUMNS: &[&str] = &[
    "id",
    "job",
    "slot",
    "manual",
    "attempt",
    "instance_id",
    "scheduled_at",
    "reason",
    "status",
    "fence",
    "started_at",
    "finished_at",
    "error",
];

/// Columns of `<prefix>_meta` (`schema_version`, and `job:<name>` → the job's last fence).
pub const META_COLUMNS: &[&str] = &["key", "value"];

/// The statements that create version 1.
pub fn create_v1(t: &Tables) -> Vec<String> {
    [
        "CREATE TABLE IF NOT EXISTS {meta} (
            key TEXT NOT NULL PRIMARY KEY,
            value INTEGER NOT NULL
        )",
        "CREATE TABLE IF NOT EXISTS {runs} (
            job TEXT NOT NULL,
            slot INTEGER NOT NULL,
            scheduled_at INTEGER NOT NULL,
            status TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            starts INTEGER NOT NULL,
            owner TEXT,
            reason TEXT NOT NULL,
            fence INTEGER NOT NULL,
            started_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            error TEXT,
            PRIMARY KEY (job, slot)
        ) WITHOUT ROWID",
        "CREATE TABLE IF NOT EXISTS {attempts} (
            id INTEGER PRIMARY KEY,
            job TEXT NOT NULL,
            slot INTEGER NOT NULL,
            manual INTEGER NOT NULL,
            attempt INTEGER NOT NULL,
            instance_id TEXT NOT NULL,
            scheduled_at INTEGER NOT NULL,
            reason TEXT NOT NULL,
            status TEXT NOT NULL,
            fence INTEGER NOT NULL,
            started_at INTEGER NOT NULL,
            finished_at INTEGER,
            error TEXT,
            UNIQUE (job, slot, manual, attempt, instance_id)
        )",
    ]
    .iter()
    .map(|s| render(s, t))
    .collect()
}

/// The statements that migrate version `from` to `from + 1`.
pub fn migration(t: &Tables, from: i64) -> Vec<String> {
    match from {
        1 => vec![format!(
            "CREATE INDEX IF NOT EXISTS \"{}_running\" ON \"{}\" (job, slot) WHERE status = 'running'",
            t.runs, t.runs
        )],
        2 => vec![format!(
            "CREATE INDEX IF NOT EXISTS \"{}_released\" ON \"{}\" (job, slot) \
             WHERE status = 'running' AND owner IS NULL",
            t.runs, t.runs
        )],
        // Rows of older versions keep `finished_at` NULL: each of their attempts has a
        // history row already, which the history reads prefer.
        3 => vec![format!(
            "ALTER TABLE \"{}\" ADD COLUMN finished_at INTEGER",
            t.runs
        )],
        _ => Vec::new(),
    }
}

/// What [`ensure`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    /// The tables were created at [`SCHEMA_VERSION`].
    Created,
    /// The schema was migrated from this version.
    Migrated {
        /// The version found.
        from: i64,
    },
    /// The schema was current.
    Current,
}

/// Creates, checks or migrates the tables in one `BEGIN IMMEDIATE` transaction.
pub async fn ensure<E: Exec>(e: &mut E, sql: &Sql) -> Result<Ensured> {
    e.execute("BEGIN IMMEDIATE", &[]).await?;
    let r = ensure_in_tx(e, sql).await;
    finish_tx(e, r).await
}

/// Reads the schema version without writing (`None` when there is no meta table).
pub async fn version<E: Exec>(e: &mut E, sql: &Sql) -> Result<Option<i64>> {
    let t = &sql.tables;
    if object_type(e, &t.meta).await?.is_none() {
        return Ok(None);
    }
    read_version(e, sql).await.map(Some)
}

async fn object_type<E: Exec>(e: &mut E, name: &str) -> Result<Option<String>> {
    let rows = e
        .query(
            "SELECT type FROM sqlite_master WHERE name = ?1 COLLATE NOCASE",
            &[Value::from(name)],
        )
        .await?;
    Ok(rows.into_iter().next().and_then(|mut r| match r.pop() {
        Some(Value::Text(s)) => Some(s),
        _ => None,
    }))
}

async fn read_version<E: Exec>(e: &mut E, sql: &Sql) -> Result<i64> {
    let t = &sql.tables;
    check_table(e, sql, &t.meta, META_COLUMNS).await?;
    let rows = e
        .query(
            &format!(
                "SELECT value FROM \"{}\" WHERE key = 'schema_version'",
                t.meta
            ),
            &[],
        )
        .await?;
    match rows.first().and_then(|r| r.first()) {
        Some(Value::Integer(v)) if *v >= 1 => Ok(*v),
        Some(other) => Err(sql.corrupt(
            &format!("table {}", t.meta),
            format!("its schema_version is {other:?}, not a version anarchon wrote"),
        )),
        None => Err(sql.corrupt(
            &format!("table {}", t.meta),
            "it has no schema_version row, so anarchon did not create it; \
             choose another `table` prefix",
        )),
    }
}

async fn ensure_in_tx<E: Exec>(e: &mut E, sql: &Sql) -> Result<Ensured> {
    let t = &sql.tables;
    if object_type(e, &t.meta).await?.is_some() {
        let found = read_version(e, sql).await?;
        if found > SCHEMA_VERSION {
            return Err(Error::SchemaTooNew {
                store: sql.store,
                location: format!("{} (tables {}*)", sql.location, t.runs),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        check_table(e, sql, &t.runs, runs_columns(found)).await?;
        check_table(e, sql, &t.attempts, ATTEMPTS_COLUMNS).await?;
        if found == SCHEMA_VERSION {
            return Ok(Ensured::Current);
        }
        for from in found..SCHEMA_VERSION {
            for stmt in migration(t, from) {
                e.execute(&stmt, &[]).await?;
            }
        }
        set_version(e, sql).await?;
        tracing::info!(
            store = sql.store,
            location = %sql.location,
            from = found,
            to = SCHEMA_VERSION,
            "migrated the anarchon schema"
        );
        return Ok(Ensured::Migrated { from: found });
    }
    for name in [&t.runs, &t.attempts] {
        if object_type(e, name).await?.is_some() {
            return Err(sql.corrupt(
                &format!("table {name}"),
                format!(
                    "it exists but {} does not, so anarchon did not create it; \
                     choose another `table` prefix (nothing was changed)",
                    t.meta
                ),
            ));
        }
    }
    for stmt in create_v1(t) {
        e.execute(&stmt, &[]).await?;
    }
    for from in 1..SCHEMA_VERSION {
        for stmt in migration(t, from) {
            e.execute(&stmt, &[]).await?;
        }
    }
    set_version(e, sql).await?;
    Ok(Ensured::Created)
}

async fn set_version<E: Exec>(e: &mut E, sql: &Sql) -> Result<()> {
    e.execute(
        &format!(
            "INSERT INTO \"{}\" (key, value) VALUES ('schema_version', ?1) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            sql.tables.meta
        ),
        &[Value::Integer(SCHEMA_VERSION)],
    )
    .await?;
    Ok(())
}

/// Refuses `name` unless it is a table with exactly `expected` columns.
async fn check_table<E: Exec>(e: &mut E, sql: &Sql, name: &str, expected: &[&str]) -> Result<()> {
    match object_type(e, name).await?.as_deref() {
        Some("table") => {}
        Some(other) => {
            return Err(sql.corrupt(
                &format!("table {name}"),
                format!("it is a {other}, not a table; choose another `table` prefix"),
            ));
        }
        None => {
            return Err(sql.corrupt(
                &format!("table {name}"),
                "it is missing although the meta table exists; restore it from a backup \
                 or choose another `table` prefix",
            ));
        }
    }
    let rows = e
        .query(
            "SELECT name FROM pragma_table_info(?1)",
            &[Value::from(name)],
        )
        .await?;
    let mut found: Vec<String> = rows
        .into_iter()
        .filter_map(|mut r| match r.pop() {
            Some(Value::Text(s)) => Some(s.to_ascii_lowercase()),
            _ => None,
        })
        .collect();
    found.sort();
    let mut want: Vec<String> = expected.iter().map(|s| (*s).to_owned()).collect();
    want.sort();
    if found != want {
        return Err(sql.corrupt(
            &format!("table {name}"),
            format!(
                "it has the columns ({}) where anarchon expects ({}); it was not created by \
                 this anarchon: choose another `table` prefix (nothing was changed)",
                found.join(", "),
                want.join(", ")
            ),
        ));
    }
    Ok(())
}
