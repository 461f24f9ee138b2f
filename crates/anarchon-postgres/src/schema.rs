//! Creating, checking and migrating the schema in `prepare`. [B-33, B-42]
//!
//! Everything happens in one transaction that first takes a transaction-scoped advisory
//! lock, so ten instances starting at once create the tables once and the others wait a few
//! milliseconds. When every table exists at the current version, no DDL that could block
//! the claims of instances already running runs at all: at most the fill factor of an older
//! table is set, under a lock that claims and results do not conflict with (see
//! `leave_room_for_hot_updates`).

use std::collections::{BTreeMap, BTreeSet};

use anarchon_core::store::{Error, JobName, Result};
use deadpool_postgres::Object;

use crate::Inner;
use crate::error::KIND;
use crate::sql::{ADDED, HOT_FILLFACTOR, SCHEMA_VERSION, SHAPES};

impl Inner {
    pub(crate) async fn prepare_schema(&self, jobs: &[JobName]) -> Result<()> {
        self.check_server().await?;
        let mut client = self.client("prepare").await?;
        // Creating the schema may wait for another instance's lock: give it twice the bound.
        let bound = self.timeout.saturating_mul(2);
        match tokio::time::timeout(bound, self.prepare_in(&mut client, jobs)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                // A failed prepare is rare; its connection may be dead or still rolling back.
                drop(Object::take(client));
                Err(e)
            }
            Err(_) => {
                drop(Object::take(client));
                Err(Error::Timeout {
                    store: KIND,
                    operation: "prepare",
                    after: bound,
                })
            }
        }
    }

    async fn prepare_in(&self, client: &mut Object, jobs: &[JobName]) -> Result<()> {
        let pg = |e| self.pg(e, "prepare");
        let names = &self.names;
        let mut tx = client.transaction().await.map_err(pg)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&names.lock_key()])
            .await
            .map_err(pg)?;

        let schema_exists: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)",
                &[&names.schema],
            )
            .await
            .map_err(pg)?
            .get(0);
        let table_names = names.table_names();
        let wanted: Vec<&str> = table_names.iter().map(String::as_str).collect();
        let mut kinds: BTreeMap<String, String> = BTreeMap::new();
        for row in tx
            .query(
                "SELECT c.relname::text, c.relkind::text FROM pg_catalog.pg_class c
                 JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace
                 WHERE s.nspname = $1 AND c.relname = ANY($2::text[])",
                &[&names.schema, &wanted],
            )
            .await
            .map_err(pg)?
        {
            kinds.insert(row.get(0), row.get(1));
        }
        let mut columns: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for row in tx
            .query(
                "SELECT table_name::text, column_name::text, data_type::text
                 FROM information_schema.columns
                 WHERE table_schema = $1 AND table_name = ANY($2::text[])",
                &[&names.schema, &wanted],
            )
            .await
            .map_err(pg)?
        {
            columns
                .entry(row.get(0))
                .or_default()
                .insert(row.get(1), row.get(2));
        }

        // The meta table first: a newer schema may have another shape, and that must be
        // reported as "too new", not as "not anarchon's".
        let meta_name = &table_names[3];
        let mut version: Option<i64> = None;
        if kinds.contains_key(meta_name) {
            self.check_shape(meta_name, &kinds, &columns, SHAPES[3].1)?;
            let row = tx
                .query_opt(
                    &format!(
                        "SELECT value FROM {} WHERE key = 'schema_version'",
                        names.meta
                    ),
                    &[],
                )
                .await
                .map_err(pg)?;
            if let Some(row) = row {
                let text: String = row.get(0);
                let v = text.trim().parse::<i64>().map_err(|_| Error::Corrupt {
                    store: KIND,
                    location: self.location(meta_name),
                    reason: format!(
                        "schema_version is {text:?}, not a number; it was not written by anarchon"
                    ),
                })?;
                if v > SCHEMA_VERSION {
                    return Err(Error::SchemaTooNew {
                        store: KIND,
                        location: format!("{}.{}", names.schema, names.table),
                        found: v,
                        supported: SCHEMA_VERSION,
                    });
                }
                version = Some(v);
            }
        }
        // A table of an older version (or of unknown version: version 1 had no meta row)
        // lacks the columns added since; they are added below instead of being reported as a
        // foreign shape. (The meta table was checked above.)
        let added_later = |suffix: &str, column: &str, ty: &str| {
            ADDED.iter().any(|&(added_in, s, c, t, _)| {
                s == suffix && c == column && t == ty && version.is_none_or(|v| v < added_in)
            })
        };
        for (name, (suffix, shape)) in table_names.iter().zip(SHAPES.iter()) {
            if *suffix != "_meta" && kinds.contains_key(name) {
                let shape: Vec<(&str, &str)> = shape
                    .iter()
                    .copied()
                    .filter(|(column, ty)| {
                        columns.get(name).is_some_and(|c| c.contains_key(*column))
                            || !added_later(suffix, column, ty)
                    })
                    .collect();
                self.check_shape(name, &kinds, &columns, &shape)?;
            }
        }

        let retry_name = format!("{}_retry", names.table);
        let retry_exists: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                 JOIN pg_catalog.pg_namespace s ON s.oid = p.pronamespace
                 WHERE s.nspname = $1 AND p.proname = $2)",
                &[&names.schema, &retry_name],
            )
            .await
            .map_err(pg)?
            .get(0);
        let complete =
            kinds.len() == table_names.len() && retry_exists && version == Some(SCHEMA_VERSION);
        if !complete {
            if !schema_exists {
                tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{}\"", names.schema))
                    .await
                    .map_err(pg)?;
            }
            tx.batch_execute(&self.sql.create).await.map_err(pg)?;
            // Migrations from older versions; the tables above exist (2 → 3 is the table of
            // remembered cuts, created with them). 1 → 2: the jobs table's count of claims
            // since the job was last pruned, with a constant default. 3 → 4: the history of a
            // run's current attempt in its row, NULL in the rows of older versions. Neither
            // rewrites a table (PostgreSQL 11+; older servers rewrite the small jobs table for
            // the default); each takes the table's lock for a moment.
            for (_, suffix, column, ty, rest) in ADDED {
                let table = format!("{}{suffix}", names.table);
                let existed = kinds.contains_key(&table);
                if existed && !columns.get(&table).is_some_and(|c| c.contains_key(column)) {
                    let schema = &names.schema;
                    tx.batch_execute(&format!(
                        "ALTER TABLE \"{schema}\".\"{table}\" ADD COLUMN {column} {ty} {rest}"
                    ))
                    .await
                    .map_err(pg)?;
                }
            }
            tx.execute(
                &format!(
                    "INSERT INTO {} (key, value) VALUES ('schema_version', $1)
                     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    names.meta
                ),
                &[&SCHEMA_VERSION.to_string()],
            )
            .await
            .map_err(pg)?;
            tracing::info!(
                schema = %names.schema,
                table = %names.table,
                version = SCHEMA_VERSION,
                "postgres store schema created or migrated"
            );
        }
        if !jobs.is_empty() {
            let list: Vec<&str> = jobs.iter().map(JobName::as_str).collect();
            tx.execute(&self.sql.register_jobs, &[&list])
                .await
                .map_err(pg)?;
        }
        self.leave_room_for_hot_updates(&mut tx).await?;
        let vacuum = self.vacuum_settings(&mut tx).await?;
        tx.commit().await.map_err(pg)?;
        for warning in vacuum.warnings(&names.schema) {
            tracing::warn!(schema = %names.schema, table = %names.table, "{warning}");
        }
        Ok(())
    }

    /// Reads whether autovacuum runs on the server and which of the store's tables turned it
    /// off (`autovacuum_enabled = false`).
    async fn vacuum_settings(
        &self,
        tx: &mut deadpool_postgres::Transaction<'_>,
    ) -> Result<VacuumSettings> {
        let names = &self.names;
        let table_names = names.table_names();
        let tables = [table_names[0].as_str(), table_names[1].as_str()];
        let row = tx
            .query_one(
                "SELECT current_setting('autovacuum') <> 'off',
                        coalesce((SELECT array_agg(c.relname::text ORDER BY c.relname)
                                  FROM pg_catalog.pg_class c
                                  JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace
                                  WHERE s.nspname = $1 AND c.relname = ANY($2::text[])
                                    AND EXISTS (
                                      SELECT 1 FROM unnest(c.reloptions) o
                                      WHERE o ~* '^autovacuum_enabled=(false|off|no|n|f|0)$')),
                                 '{}')",
                &[&names.schema, &&tables[..]],
            )
            .await
            .map_err(|e| self.pg(e, "prepare"))?;
        Ok(VacuumSettings {
            server_on: row.get(0),
            tables_off: row.get(1),
        })
    }

    /// Gives the history and jobs tables [`HOT_FILLFACTOR`] where they have no fill factor of
    /// their own (tables created before it was set; a fill factor someone chose is kept).
    /// It applies to pages filled from now on. `SET (fillfactor)` waits for no claim or
    /// result (it takes a lock that row writes do not conflict with), only for a `VACUUM` of
    /// the table or other DDL: it runs last, in a savepoint, with a lock timeout of a second.
    /// If it cannot be done (a busy table, a role that does not own it), the tables keep
    /// their fill factor, a warning says so, and `prepare` goes on: it is an optimisation.
    async fn leave_room_for_hot_updates(
        &self,
        tx: &mut deadpool_postgres::Transaction<'_>,
    ) -> Result<()> {
        let pg = |e| self.pg(e, "prepare");
        let names = &self.names;
        let table_names = names.table_names();
        let tables = [table_names[1].as_str(), table_names[2].as_str()];
        let bare: Vec<String> = tx
            .query(
                "SELECT c.relname::text FROM pg_catalog.pg_class c
                 JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace
                 WHERE s.nspname = $1 AND c.relname = ANY($2::text[])
                   AND NOT EXISTS (SELECT 1 FROM unnest(coalesce(c.reloptions, '{}'::text[])) o
                                   WHERE o LIKE 'fillfactor=%')",
                &[&names.schema, &&tables[..]],
            )
            .await
            .map_err(pg)?
            .iter()
            .map(|row| row.get(0))
            .collect();
        for table in bare {
            let statement = format!(
                "SET LOCAL lock_timeout = '1s';
                 ALTER TABLE \"{}\".\"{table}\" SET (fillfactor = {HOT_FILLFACTOR})",
                names.schema
            );
            let savepoint = tx.savepoint("anarchon_fillfactor").await.map_err(pg)?;
            match savepoint.batch_execute(&statement).await {
                Ok(()) => savepoint.commit().await.map_err(pg)?,
                Err(e) => {
                    let error = pg(e);
                    savepoint.rollback().await.map_err(pg)?;
                    tracing::warn!(
                        schema = %names.schema,
                        table = %table,
                        %error,
                        "postgres store: could not set the table's fill factor to {HOT_FILLFACTOR} \
                         (it keeps its own; results then write more index entries); run \
                         ALTER TABLE ... SET (fillfactor = {HOT_FILLFACTOR}) as the table's owner"
                    );
                }
            }
        }
        Ok(())
    }

    fn location(&self, table: &str) -> String {
        format!("table {}.{}", self.names.schema, table)
    }

    fn check_shape(
        &self,
        table: &str,
        kinds: &BTreeMap<String, String>,
        columns: &BTreeMap<String, BTreeMap<String, String>>,
        shape: &[(&str, &str)],
    ) -> Result<()> {
        let corrupt = |reason: String| Error::Corrupt {
            store: KIND,
            location: self.location(table),
            reason: format!(
                "{reason}; it was not created by anarchon: choose another `table` prefix or \
                 `schema`, or drop it"
            ),
        };
        match kinds.get(table).map(String::as_str) {
            Some("r" | "p") => {}
            Some(kind) => return Err(corrupt(format!("it is not a table (relkind {kind:?})"))),
            None => return Ok(()),
        }
        let empty = BTreeMap::new();
        let found = columns.get(table).unwrap_or(&empty);
        let mut problems = Vec::new();
        for (column, ty) in shape {
            match found.get(*column) {
                None => problems.push(format!("column {column} is missing")),
                Some(t) if t != ty => {
                    problems.push(format!("column {column} is {t}, expected {ty}"))
                }
                Some(_) => {}
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        let expected: BTreeSet<&str> = shape.iter().map(|(c, _)| *c).collect();
        let extra: Vec<&str> = found
            .keys()
            .map(String::as_str)
            .filter(|c| !expected.contains(c))
            .collect();
        if !extra.is_empty() {
            problems.push(format!("it has other columns ({})", extra.join(", ")));
        }
        Err(corrupt(problems.join(", ")))
    }
}

/// Whether dead rows of the store's tables are ever reclaimed without a hand-run `VACUUM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VacuumSettings {
    /// The server's `autovacuum` setting is on.
    pub(crate) server_on: bool,
    /// The store's runs and history tables that have `autovacuum_enabled = false`.
    pub(crate) tables_off: Vec<String>,
}

impl VacuumSettings {
    /// What `prepare` warns of: every result, takeover and pruning pass leaves dead rows in
    /// the runs and history tables (3 x 10,000 `every 1s` jobs: 2.1 million beside 1.07
    /// million live in the runs table after four minutes with autovacuum off), and without
    /// `VACUUM` the tables and their indexes grow without bound. One warning for the server,
    /// one for the tables that turned it off.
    pub(crate) fn warnings(&self, schema: &str) -> Vec<String> {
        const WHY: &str = "every result and pruning pass leaves dead rows in the runs and \
                           history tables that only VACUUM reclaims; without it they and their \
                           indexes grow without bound and claims slow down";
        let mut out = Vec::new();
        if !self.server_on {
            out.push(format!(
                "autovacuum is off on this PostgreSQL server: {WHY}; turn it on \
                 (autovacuum = on) or VACUUM the tables of schema {schema} regularly"
            ));
        }
        if !self.tables_off.is_empty() {
            let tables: Vec<String> = self
                .tables_off
                .iter()
                .map(|t| format!("{schema}.{t}"))
                .collect();
            out.push(format!(
                "autovacuum is turned off for {}: {WHY}; turn it back on (ALTER TABLE ... \
                 RESET (autovacuum_enabled)) or VACUUM them regularly",
                tables.join(", ")
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::VacuumSettings;

    #[test]
    fn prepare_warns_when_nothing_vacuums_the_tables() {
        let on = VacuumSettings {
            server_on: true,
            tables_off: vec![],
        };
        assert!(on.warnings("s").is_empty());
        let both_off = VacuumSettings {
            server_on: false,
            tables_off: vec!["anarchon_runs".into(), "anarchon_runs_attempts".into()],
        };
        let w = both_off.warnings("s");
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("autovacuum is off on this PostgreSQL server"),
            "{w:?}"
        );
        assert!(w[0].contains("schema s regularly"), "{w:?}");
        assert!(
            w[1].starts_with(
                "autovacuum is turned off for s.anarchon_runs, s.anarchon_runs_attempts:"
            ),
            "{w:?}"
        );
    }
}
