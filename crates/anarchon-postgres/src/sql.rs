//! The SQL text of every statement, built once per store from the schema and table names.
//!
//! Claims, results and takeovers go out as one pipelined transaction per batch: `BEGIN`, the
//! job lock ([`lock_jobs_sql`]: the `_jobs` rows of the batch's jobs, in job order), the
//! set-based claim or finish statement once per round (each job at most once per round), or
//! the takeover statement once per takeover, a deadline guard (claims, takeovers) and
//! `COMMIT`. Pruning runs after the batch, in a statement of its own (see [`PRUNE_EVERY`]). The statements after the lock take their snapshots once every earlier writer of
//! those jobs that locks them has committed, and no such writer can start before this batch
//! commits, so they decide on fresh data.
//!
//! A statement still reads a snapshot (data CTEs), decides from it, then writes with the
//! same conditions repeated in the `UPDATE`/`DELETE` `WHERE` clauses, so PostgreSQL
//! re-checks them against the newest row version when a writer that does not take the job
//! lock (a heartbeat, a release) changed the row meanwhile (READ COMMITTED re-evaluation).
//! When a write finds that the snapshot was stale, the statement raises SQLSTATE 40001
//! through the `<table>_retry` function; the transaction rolls back and the client runs it
//! again on a fresh snapshot.
//!
//! Lock order, to keep deadlocks away: the batch's job rows first (sorted), then run and
//! history rows. Heartbeats lock no job row; they, result batches and takeover batches
//! send their runs sorted by (job, slot), so that all lock run rows in one order (see the
//! store's `in_run_order`).

/// The database clock in epoch milliseconds. `clock_timestamp()` is volatile, so a CTE that
/// computes it is evaluated once per statement and every use sees the same instant.
pub(crate) const NOW_MS: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::int8";

/// The schema version this build writes and reads. Version 2 added
/// `<table>_jobs.unpruned` (see [`PRUNE_EVERY`]); version 3 the table `<table>_cuts`, each
/// job's remembered cut (see [`prune_sql`]); version 4 the history of a run's current attempt
/// in the run's own row (see [`ADDED`]).
pub(crate) const SCHEMA_VERSION: i64 = 4;

/// A won claim makes its job due to prune only when it is the job's `PRUNE_EVERY`-th won
/// claim since the job was last found due. The count lives in `<table>_jobs.unpruned`,
/// which the claim's fence update writes anyway, so it costs no extra row; every claim
/// answers with it, and the store sets the claim's `prune` flag when the count it last saw
/// says the next won claim is due (or when it has not seen the job's count yet). A flagged
/// claim sets the count to 0.
///
/// A result makes its job due when the job's count is above `size / 8` (at most
/// `PRUNE_EVERY - 1`, see [`finish_slack`]) or the finished run lies below the job's cut (see
/// [`below_cut`]), and then sets the count to 0.
///
/// Neither claims nor results prune in their batch: the batch holds its jobs' locks, and
/// every claim of those jobs waits for it (pruning a job reads up to `size` history keys
/// and deletes what lies below; with 3 x 10,000 `every 1s` jobs a result batch that pruned
/// held its 256 job locks about a second, and from the third minute the claims queued
/// behind such batches). The store prunes the due jobs after the batch committed, with
/// [`prune_sql`], which takes no job lock, in the background (see `crate::prune`): once
/// the prune after a finish is done the job holds at most `size + size / 8` runs besides
/// its running ones (exactly `size` below 8); with a prune window
/// (`PostgresOptions::prune_window`) that prune comes at the window's end, so until then
/// the job holds up to a window's worth of runs more. Between finishes, for runs that never finish
/// (taken over until exhausted, interrupted by the next slot) and for runs a fenced
/// transaction finished (which does not prune, see [`fenced_finish_sql`]), a job holds
/// about `size + PRUNE_EVERY` runs at most (plus any older run still running, which
/// pruning always keeps); with several instances the due claim may be a few claims late,
/// since an instance learns the count from its own claims (won or taken).
pub(crate) const PRUNE_EVERY: i32 = 16;

/// The fill factor of the history and jobs tables: half of each page is left free when rows
/// are inserted, so that the update a row gets soon after (a job's fence; a history row's
/// result, when schema version 3 and older wrote a history row at every claim) fits beside
/// it on the same page and is a heap-only tuple (HOT) update, which writes no index entry.
/// At PostgreSQL's default of 100 a history row's page is full
/// milliseconds after the insert (hundreds of rows a second go to the table's end), so
/// 98.7 % of the results were written as a new row version elsewhere plus an entry in each
/// of the table's two indexes (`pg_stat_user_tables`, 3 x 10,000 `every 1s`). The runs
/// table gets nothing: its `_running` index's predicate reads `status`, which every result
/// changes, so those updates are never HOT.
pub(crate) const HOT_FILLFACTOR: u32 = 50;

/// Columns added after version 1, as (the version that added it, table suffix, column,
/// information_schema type, what `ALTER TABLE ... ADD COLUMN` appends after the type): a table
/// of an older version lacks them until `prepare` migrates it. (Version 3 added a table,
/// which `prepare` creates as it creates missing tables.) Every one is added without
/// rewriting the table: a nullable column, or a constant default (PostgreSQL 11+).
///
/// Version 4: **a run's row is the history of its current attempt** (`instance_id`, `reason`,
/// `fence`, `finished_at`, `error`, beside the `started_at` of the current attempt), so a
/// won claim and its result write one row, not two: a history row is written only when the
/// run's row moves on while the attempt must stay on record (a release, a takeover). A run
/// whose `instance_id` is NULL was claimed by an older version: its current attempt has its
/// own history row. `_jobs.keys_added` counts the won claims that were their job's newest
/// run and `_jobs.keys_older` the others (see [`prune_sql`]); `_cuts.cut_added` and
/// `_cuts.cut_older` are those counts when the cut was remembered, `_cuts.cut_floor` the
/// lowest slot a run of the job below the cut could still have then.
pub(crate) const ADDED: [(i64, &str, &str, &str, &str); 11] = [
    (2, "_jobs", "unpruned", "integer", "NOT NULL DEFAULT 0"),
    (4, "", "instance_id", "text", ""),
    (4, "", "reason", "text", ""),
    (4, "", "fence", "bigint", ""),
    (4, "", "finished_at", "bigint", ""),
    (4, "", "error", "text", ""),
    (4, "_jobs", "keys_added", "bigint", ""),
    (4, "_jobs", "keys_older", "bigint", ""),
    (4, "_cuts", "cut_added", "bigint", ""),
    (4, "_cuts", "cut_older", "bigint", ""),
    (4, "_cuts", "cut_floor", "bigint", ""),
];

/// Quoted, schema-qualified names of the store's objects.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    pub(crate) schema: String,
    pub(crate) table: String,
    /// `"schema"."table"` (runs).
    pub(crate) runs: String,
    /// `"schema"."table_attempts"`.
    pub(crate) attempts: String,
    /// `"schema"."table_jobs"`.
    pub(crate) jobs: String,
    /// `"schema"."table_meta"`.
    pub(crate) meta: String,
    /// `"schema"."table_cuts"`.
    pub(crate) cuts: String,
    /// `"schema"."table_retry"`, the function that asks the client to run a statement again.
    pub(crate) retry: String,
    /// The NOTIFY channel of releases.
    pub(crate) channel: String,
}

impl Names {
    /// `schema` and `table` are validated identifiers (lowercase letters, digits, `_`).
    pub(crate) fn new(schema: &str, table: &str) -> Self {
        let q = |name: &str| format!("\"{schema}\".\"{name}\"");
        let plain = format!("{schema}.{table}");
        // A channel name is an identifier: at most 63 bytes.
        let channel = if plain.len() <= 63 {
            plain
        } else {
            format!("anarchon_{:016x}", fnv1a(plain.as_bytes()))
        };
        Names {
            schema: schema.to_owned(),
            table: table.to_owned(),
            runs: q(table),
            attempts: q(&format!("{table}_attempts")),
            jobs: q(&format!("{table}_jobs")),
            meta: q(&format!("{table}_meta")),
            cuts: q(&format!("{table}_cuts")),
            retry: q(&format!("{table}_retry")),
            channel,
        }
    }

    /// The advisory lock key that serialises schema creation and migration.
    pub(crate) fn lock_key(&self) -> i64 {
        fnv1a(format!("anarchon-postgres:{}.{}", self.schema, self.table).as_bytes()) as i64
    }

    /// The transaction-scoped advisory lock key of one run (job, slot) of this store's
    /// tables: a fenced transaction holds it from its check to its end, and a takeover tries
    /// it without waiting (see [`crate::fenced`]). Two runs whose keys collide (a 64-bit
    /// hash) only make a takeover of one wait while a fenced transaction of the other is
    /// open.
    pub(crate) fn run_lock_key(&self, job: &str, slot: i64) -> i64 {
        let text = format!(
            "anarchon-postgres-run:{}.{}:{}:{job}:{slot}",
            self.schema,
            self.table,
            job.len()
        );
        fnv1a(text.as_bytes()) as i64
    }

    /// The five table names (unquoted), runs first, meta fourth.
    pub(crate) fn table_names(&self) -> [String; 5] {
        let t = &self.table;
        [
            t.clone(),
            format!("{t}_attempts"),
            format!("{t}_jobs"),
            format!("{t}_meta"),
            format!("{t}_cuts"),
        ]
    }
}

/// FNV-1a, 64 bit: a stable hash (std's hasher is randomly seeded per process).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The expected columns of each table: (table suffix, [(column, information_schema type)]).
pub(crate) const SHAPES: [(&str, &[(&str, &str)]); 5] = [
    (
        "",
        &[
            ("job", "text"),
            ("slot", "bigint"),
            ("status", "text"),
            ("attempt", "integer"),
            ("counted_starts", "integer"),
            ("owner", "text"),
            ("expires_at", "bigint"),
            ("scheduled_at", "bigint"),
            ("started_at", "bigint"),
            ("instance_id", "text"),
            ("reason", "text"),
            ("fence", "bigint"),
            ("finished_at", "bigint"),
            ("error", "text"),
        ],
    ),
    (
        "_attempts",
        &[
            ("job", "text"),
            ("slot", "bigint"),
            ("manual", "boolean"),
            ("attempt", "integer"),
            ("instance_id", "text"),
            ("scheduled_at", "bigint"),
            ("reason", "text"),
            ("status", "text"),
            ("fence", "bigint"),
            ("started_at", "bigint"),
            ("finished_at", "bigint"),
            ("error", "text"),
        ],
    ),
    (
        "_jobs",
        &[
            ("job", "text"),
            ("fence", "bigint"),
            ("registered_at", "bigint"),
            ("unpruned", "integer"),
            ("keys_added", "bigint"),
            ("keys_older", "bigint"),
        ],
    ),
    ("_meta", &[("key", "text"), ("value", "text")]),
    (
        "_cuts",
        &[
            ("job", "text"),
            ("cut_slot", "bigint"),
            ("cut_manual", "boolean"),
            ("cut_at", "bigint"),
            ("cut_fence", "bigint"),
            ("cut_size", "bigint"),
            ("fast_prunes", "integer"),
            ("cut_added", "bigint"),
            ("cut_older", "bigint"),
            ("cut_floor", "bigint"),
        ],
    ),
];

/// Every statement of the store.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) create: String,
    pub(crate) now: String,
    pub(crate) register_jobs: String,
    pub(crate) known_jobs: String,
    pub(crate) history: String,
    pub(crate) record_manual: String,
    /// Prunes a set of jobs, outside any batch (see [`prune_sql`]).
    pub(crate) prune: String,
    /// Locks the `_cuts` rows of a prune's jobs in job order (see [`lock_cuts_sql`]).
    pub(crate) lock_cuts: String,
    /// Opens the prune's transaction: no JIT compilation, and a plan made for each run of
    /// its statement (`plan_cache_mode = force_custom_plan`). With the jobs' list known the
    /// planner costs the prune of 128 jobs above `jit_above_cost` and
    /// `jit_optimize_above_cost`, and compiled it for about half a second, ten times its
    /// work (EXPLAIN ANALYZE, 10,000 jobs x 113 runs). A generic plan is made once per
    /// connection and kept, on the tables as they were at the connection's first prune: a
    /// store's first prunes come at its first claims, on tables of a few thousand runs,
    /// where a sequential scan of the runs table is the cheaper delete, and a connection
    /// that kept such a plan read all the runs at every prune once the tables had grown
    /// (3 x 10,000 `every 1s` past the pruning point: 10 of 24 sampled prunes carried such
    /// a plan, and the two of them that had rows to delete read 1.03 and 1.05 million runs,
    /// 0.3-0.5 s of 0.6-0.7 s prunes; autovacuum off, so no `ANALYZE` ever replaced the
    /// plan). Planning the statement each time costs about 1.1 ms (`pg_stat_statements`).
    pub(crate) prune_settings: String,
    /// Locks the `_jobs` rows of a batch's jobs in job order (see [`lock_jobs_sql`]).
    pub(crate) lock_jobs: String,
    /// Locks the `_jobs` rows of a claim batch's jobs whose runs do not exist yet (see
    /// [`lock_claims_sql`]).
    pub(crate) lock_claims: String,
    /// The claim of a round of one claim (see [`claim_sql`]), indexed by "due to prune"
    /// (1: sets the job's count of claims since pruning to 0).
    pub(crate) claim: [String; 2],
    /// The set-based claim of a round of claims (see [`claim_set_sql`]).
    pub(crate) claim_set: String,
    /// The last statement of a claim or takeover batch before its `COMMIT`: fails (SQLSTATE 22P02) when
    /// the database clock is past `$1`, the batch's latest deadline, so the transaction
    /// rolls back instead of committing after its caller gave up. (The failing cast reads
    /// the clock, so the planner cannot fold it into an error of every call.)
    pub(crate) claim_guard: String,
    /// Opens a claim or takeover batch, before its job lock: the transaction's
    /// `lock_timeout` ends 1 ms past the batch's deadline (`$1`, database clock; a deadline
    /// already past waits 1 ms, one further than the setting's largest value, about 24
    /// days, sets no limit: the batch's own timeout bounds it), so a batch never waits for
    /// a lock past the moment every item in it is late.
    pub(crate) lock_wait_until: String,
    /// Opens a batch without a deadline (results, prunes), before its job lock: the
    /// transaction's `lock_timeout` is `$1` (text, the batch timeout), so the server stops
    /// waiting for a lock when the caller stops waiting for the batch, rather than wait on
    /// for nobody and then hold the batch's locks.
    pub(crate) lock_wait_for: String,
    pub(crate) heartbeat: String,
    /// The finish of a round of one result (see [`finish_sql`]).
    pub(crate) finish: String,
    /// The set-based finish of a round of results (see [`finish_set_sql`]).
    pub(crate) finish_set: String,
    pub(crate) release: String,
    pub(crate) take_over: String,
    /// The check a fenced transaction runs once it holds its run's lock (see
    /// [`fenced_check_sql`]).
    pub(crate) fenced_check: String,
    /// The check a fenced transaction runs before its `COMMIT` (see [`fenced_check_sql`]).
    pub(crate) fenced_recheck: String,
    /// Records the run and its attempt `succeeded` in a fenced transaction (see
    /// [`fenced_finish_sql`]).
    pub(crate) fenced_finish: String,
    pub(crate) runs: String,
    pub(crate) unfinished: String,
    /// The backups' sweep: per job its newest `$2` unfinished runs through the `_running`
    /// index read backwards, and its runs handed over through the `_released` index.
    pub(crate) newest_unfinished: String,
}

/// The `prune` statement: prunes each job of `$1` to its retention (`$2` size, `$3` TTL ms,
/// NULL elements: none), as the reference model (`MemoryStore::prune`) does: it keeps the
/// `size` newest distinct (slot, manual) history keys of a job, drops rows that finished
/// before `now - ttl`, always keeps the rows of running runs, and removes a run once none
/// of its history is left. Each job appears once in `$1`.
///
/// **The keys** (schema version 4): a scheduled key is a run's row (`(slot, false)`; the
/// row holds its current attempt's history, and the history rows of its earlier attempts
/// share its key), a manual key a manual run's history row (`(slot, true)`). A job's keys
/// are read by merging the two, each through its own index (the runs' primary key, the
/// history table's partial `_manual` index), never a key that is not the job's.
///
/// **Finding the cut in O(rows pruned).** The cut of a job (its `size`-th newest key) is
/// remembered in `_cuts` (`cut_slot`, `cut_manual`) with the job's `_jobs.keys_added` on the
/// prune's snapshot (`cut_added`): at least `size` keys were at or above the cut then.
/// `keys_added` counts the won claims whose run was the job's newest when it was claimed
/// (no run of a later slot existed; a claim takes it under the job's lock, in the same
/// transaction as the run, so a snapshot holds a run exactly when it holds its count). Such
/// a run's key lies above every key that existed then, the remembered cut's among them
/// (the cut's key still exists, checked, and existed when the cut was remembered). Keys are
/// only deleted by prunes, below their own cut, which never lies below a remembered one
/// (without a TTL a job's cut only moves up). So the keys at or above the remembered cut
/// now number at least `size + u`, `u = keys_added - cut_added`, and the new cut is at
/// least the `u + 1`-th key upwards from the remembered one: the prune reads that many keys
/// upwards and deletes what lies below, instead of reading the `size` newest keys of every
/// job from the top. (Without the visibility map a vacuum sets, reading a key reads its
/// row's page too, and a job's rows lie a page apart: the read from the top was about 100
/// page reads per job and 62 % of the prune's time at 3 x 10,000 `every 1s` jobs.) Keys not
/// counted (a manual run, a claim of an older slot than the job's newest, a claim by an
/// older version) only keep the cut lower: the prune deletes less, never more.
///
/// Every [`FAST_PRUNES`]-th prune of a job reads the cut from the top again, which finds it
/// exactly (`_cuts.fast_prunes` counts the prunes since), so keys left so never add up.
/// The read from the top is also taken for a job without a remembered cut (its first prune, a
/// job with fewer than `size` keys, a cut whose run was still running), a cut remembered
/// for another retention size (`cut_size`: the job's options changed), a manual cut, a cut
/// remembered by an older version (no `cut_added`), with a TTL (which deletes above the
/// cut), or whose remembered cut's key is gone. That last check covers a prune of an older
/// release, which neither reads nor moves the remembered cut: it could only delete keys
/// above the remembered cut by deleting the cut's own key first (a prune keeps only running
/// runs below its cut, and a running run's key is never remembered).
///
/// **Every read of the history and runs tables is pinned to the job's index range.** The rows
/// below each job's cut are read by a `LATERAL` subquery per job that `OFFSET 0` keeps from
/// being flattened into a join (a range scan of the runs' primary key and of
/// `_attempts_slot` from the job's cut down, run once per job, whatever the estimates), and
/// both deletes go by `ctid` (`ctid = ANY (ARRAY(...))` is a TID scan whatever the planner
/// estimates). The statement reads the candidates on its own snapshot, so each `ctid` names
/// the row version it read: no other writer changes a row of a run that was not running on
/// that snapshot (only a manual run's row may be upserted at the same moment, and one below
/// the cut goes in either version). Each job's remembered cut and its `keys_added` are read
/// the same way, by primary key, and a cut forgotten is written by the `ctid` read there (as
/// a join, and as `job = ANY ($1)`, both were planned as sequential scans of the whole
/// `_cuts` table, a row per job, at every prune). The `_cuts` rows are locked by
/// [`lock_cuts_sql`] before, so their `ctid`s stay.
/// Written as joins, these were planned from row estimates alone (autovacuum off: no
/// statistics, and a CTE is guessed at hundreds of thousands of rows) as hash joins over
/// sequential scans: a prune of 128 jobs read the history table twice from end to end,
/// 1.1 million rows each time, 1.4 s and 72,000 buffers read from outside the cache a
/// prune, and three such prunes, one per instance, ran at every moment past the pruning
/// point (3 x 10,000 `every 1s`, `pg_stat_statements` and `auto_explain`). Pinned, the same
/// prunes took 19.8 ms each (test `b37_a_prune_reads_only_the_jobs_it_prunes` reads the plan).
///
/// **Below the cut from the last cut's floor.** The runs below a job's cut are read from
/// `lo`, the lowest slot a run below the remembered cut could still have (`cut_floor`: that
/// cut, or the oldest run kept below it because it was running), not from the job's first
/// entry: the runs deleted by earlier prunes stay in the primary key as dead entries until
/// a vacuum, in pages that receive no more inserts, and a read from the first entry crossed
/// all of them (35.7 million pages read from outside the cache over ten minutes of 3 x
/// 10,000 `every 1s`, rising through the run). A won claim that was not its job's newest
/// run (`keys_older`, a catch-up of an old slot, say) may lie below the floor: when that
/// count moved since the cut was remembered, the prune reads the whole range once.
///
/// Whether a history row's run, or the cut's own run, is running is read by the run's primary
/// key (as `NOT EXISTS` under an `OR` the planner made each a hashed subplan over the whole
/// `_running` index: every running run of every job read at every prune, 2,584 entries and
/// 9,469 heap fetches in a prune of 65 jobs at 3 x 10,000 `every 1s`, `auto_explain`).
///
/// A run goes with its key when it lies below the cut and is not running; with a TTL, also
/// when it is not running, its own history ended before `now - ttl` (a run of an older
/// version, whose history is all in history rows, counts as ended) and none of its history
/// rows stays.
///
/// It runs after [`lock_cuts_sql`] in the same transaction, so its snapshot follows every
/// earlier prune of its jobs and no other prune of them runs until it commits: the cut it
/// reads is the one the rows it reads were pruned to. Claims and results never touch
/// `_cuts`, so they never wait for a prune.
fn prune_sql(names: &Names) -> String {
    let Names {
        runs,
        attempts,
        jobs,
        cuts,
        ..
    } = names;
    let now = NOW_MS;
    // $1 jobs, $2 sizes, $3 ttl ms (NULL elements: none).
    format!(
        "WITH n AS (SELECT {now} AS ms),
pq AS (
    SELECT q.job, q.size, q.ttl, c.cut_slot, c.cut_manual, c.cut_added, c.cut_size,
           c.fast_prunes, c.tid AS cut_tid, k.keys_added, k.keys_older,
           coalesce(CASE WHEN c.cut_older = k.keys_older THEN c.cut_floor END,
                    -9223372036854775808) AS lo
    FROM unnest($1::text[], $2::int8[], $3::int8[]) AS q(job, size, ttl)
    LEFT JOIN LATERAL (SELECT c.*, c.ctid AS tid FROM {cuts} c WHERE c.job = q.job OFFSET 0) c
        ON true
    LEFT JOIN LATERAL (
        SELECT j.keys_added, j.keys_older FROM {jobs} j WHERE j.job = q.job OFFSET 0
    ) k ON true
),
fast AS (
    SELECT p.job, p.size, p.cut_slot, p.keys_added - p.cut_added AS added, p.lo
    FROM pq p
    WHERE p.ttl IS NULL AND p.cut_added IS NOT NULL AND p.keys_added >= p.cut_added
      AND NOT p.cut_manual AND p.cut_size = p.size AND p.fast_prunes < {fast_limit}
      AND EXISTS (SELECT 1 FROM {runs} r WHERE r.job = p.job AND r.slot = p.cut_slot)
),
pcut AS (
    SELECT f.job, f.size, true AS upwards, c.slot, c.manual, f.lo FROM fast f CROSS JOIN LATERAL (
        SELECT k.slot, k.manual FROM (
            (SELECT r.slot, false AS manual FROM {runs} r
             WHERE r.job = f.job AND r.slot >= f.cut_slot
             ORDER BY r.slot LIMIT f.added + 1)
            UNION ALL
            (SELECT DISTINCT a.slot, true AS manual FROM {attempts} a
             WHERE a.job = f.job AND a.manual AND a.slot >= f.cut_slot
             ORDER BY a.slot LIMIT f.added + 1)
        ) k
        ORDER BY k.slot, k.manual OFFSET f.added LIMIT 1
    ) c
    UNION ALL
    SELECT q.job, q.size, false, c.slot, c.manual, q.lo FROM pq q CROSS JOIN LATERAL (
        SELECT k.slot, k.manual FROM (
            (SELECT r.slot, false AS manual FROM {runs} r
             WHERE r.job = q.job
             ORDER BY r.slot DESC LIMIT greatest(q.size, 1))
            UNION ALL
            (SELECT DISTINCT a.slot, true AS manual FROM {attempts} a
             WHERE a.job = q.job AND a.manual
             ORDER BY a.slot DESC LIMIT greatest(q.size, 1))
        ) k
        ORDER BY k.slot DESC, k.manual DESC OFFSET greatest(q.size, 1) - 1 LIMIT 1
    ) c
    WHERE q.job NOT IN (SELECT f.job FROM fast f)
),
pcand AS (
    SELECT c.job, a.slot, a.manual, a.tid
    FROM pcut c CROSS JOIN LATERAL (
        SELECT x.slot, x.manual, x.ctid AS tid FROM {attempts} x
        WHERE x.job = c.job AND x.slot <= c.slot AND (x.slot, x.manual) < (c.slot, c.manual)
        OFFSET 0
    ) a
    UNION
    SELECT q.job, a.slot, a.manual, a.tid
    FROM pq q CROSS JOIN n CROSS JOIN LATERAL (
        SELECT x.slot, x.manual, x.ctid AS tid FROM {attempts} x
        WHERE q.ttl IS NOT NULL AND x.job = q.job AND x.finished_at < n.ms - q.ttl
        OFFSET 0
    ) a
),
pdrop AS (
    SELECT p.job, p.slot, p.manual, p.tid FROM pcand p
    WHERE p.manual OR (SELECT r.status FROM {runs} r
                       WHERE r.job = p.job AND r.slot = p.slot) IS DISTINCT FROM 'running'
),
del_a AS (
    DELETE FROM {attempts} a WHERE a.ctid = ANY (ARRAY(SELECT d.tid FROM pdrop d))
),
rdrop AS (
    SELECT c.job, r.slot, r.tid FROM pcut c CROSS JOIN LATERAL (
        SELECT x.slot, x.ctid AS tid FROM {runs} x
        WHERE x.job = c.job AND x.slot >= c.lo AND x.slot <= c.slot
          AND (x.slot < c.slot OR c.manual) AND x.status <> 'running'
        OFFSET 0
    ) r
    UNION
    SELECT q.job, r.slot, r.tid FROM pq q CROSS JOIN n CROSS JOIN LATERAL (
        SELECT x.slot, x.ctid AS tid FROM {runs} x
        WHERE q.ttl IS NOT NULL AND x.job = q.job AND x.status <> 'running'
          AND coalesce(x.finished_at, 0) < n.ms - q.ttl
          AND NOT EXISTS (SELECT 1 FROM {attempts} a
                          WHERE a.job = x.job AND a.slot = x.slot AND NOT a.manual
                            AND (a.finished_at IS NULL OR a.finished_at >= n.ms - q.ttl))
        OFFSET 0
    ) r
),
del_r AS (
    DELETE FROM {runs} r
    WHERE r.ctid = ANY (ARRAY(SELECT t.tid FROM rdrop t)) AND r.status <> 'running'
),
cut AS (
    SELECT c.job, c.size, c.upwards, c.slot, c.manual FROM pcut c
    WHERE NOT (c.job NOT IN (SELECT q.job FROM pq q WHERE q.ttl IS NULL))
      AND (c.manual OR (SELECT r.status FROM {runs} r
                        WHERE r.job = c.job AND r.slot = c.slot) IS DISTINCT FROM 'running')
),
remember AS (
    UPDATE {cuts} k
    SET cut_slot = c.slot, cut_manual = c.manual,
        cut_at = n.ms,
        -- Read only by the prunes of version 3, which count upwards from it by fences:
        -- NULL has them read the cut from the top.
        cut_fence = NULL,
        cut_added = (SELECT p.keys_added FROM pq p WHERE p.job = k.job),
        cut_older = (SELECT p.keys_older FROM pq p WHERE p.job = k.job),
        cut_floor = least(c.slot, (SELECT r.slot FROM {runs} r
                                   WHERE r.job = c.job AND r.slot < c.slot
                                     AND r.status = 'running'
                                   ORDER BY r.slot LIMIT 1)),
        cut_size = c.size,
        fast_prunes = CASE WHEN c.upwards THEN k.fast_prunes + 1 ELSE 0 END
    FROM cut c, n
    WHERE k.job = c.job
),
forget AS (
    UPDATE {cuts} k
    SET cut_slot = NULL, cut_manual = NULL, cut_at = NULL, cut_fence = NULL, cut_size = NULL,
        cut_added = NULL, cut_older = NULL, cut_floor = NULL, fast_prunes = 0
    WHERE k.ctid = ANY (ARRAY(SELECT p.cut_tid FROM pq p WHERE p.cut_tid IS NOT NULL))
      AND k.job NOT IN (SELECT c.job FROM cut c)
)
SELECT (SELECT count(*) FROM pdrop) + (SELECT count(*) FROM rdrop)",
        fast_limit = FAST_PRUNES - 1,
    )
}

/// One prune of a job in `FAST_PRUNES` reads its cut from the top (see [`prune_sql`]): the
/// others find it upwards from the remembered one.
pub(crate) const FAST_PRUNES: i32 = 8;

/// The lock that opens a prune's transaction: it locks the `_cuts` row of each of its jobs
/// in job order, creating the rows of jobs that have none (as [`lock_jobs_sql`] does for
/// `_jobs`). Prunes of a job then run one after the other, each after the last committed.
fn lock_cuts_sql(names: &Names) -> String {
    let Names { cuts, .. } = names;
    // $1 jobs.
    format!(
        "INSERT INTO {cuts} AS c (job)
SELECT k.job FROM (SELECT DISTINCT job FROM unnest($1::text[]) AS u(job)) k
ORDER BY k.job
ON CONFLICT (job) DO UPDATE SET cut_at = c.cut_at WHERE false"
    )
}

/// The `claim` statement: `reset` selects the variant of a claim due to prune (see
/// [`PRUNE_EVERY`]), which sets the job's count of claims since pruning to 0 rather than
/// adding 1; the store prunes the job after the batch committed (see [`prune_sql`]). A
/// claim whose run exists is taken and looks up no earlier run (see [`claim_set_sql`]).
fn claim_sql(names: &Names, reset: bool) -> String {
    let Names {
        runs,
        attempts,
        jobs,
        retry,
        ..
    } = names;
    let now = NOW_MS;
    // $1 job, $2 slot, $3 scheduled_at, $4 instance, $5 lease ms, $6 not_after,
    // $7 overlap skip, $8 reason.
    format!(
        "WITH n AS (SELECT {now} AS ms),
ok AS (SELECT ms FROM n WHERE ms <= $6),
existing AS (SELECT 1 AS x FROM {runs} r, ok WHERE r.job = $1 AND r.slot = $2),
to_mark AS (
    SELECT r.slot FROM {runs} r, ok
    WHERE r.job = $1 AND r.slot < $2 AND r.status = 'running'
      AND (r.owner IS NULL OR r.expires_at <= ok.ms)
      AND NOT EXISTS (SELECT 1 FROM existing)
),
live AS (
    SELECT r.slot FROM {runs} r, ok
    WHERE $7 AND r.job = $1 AND r.slot < $2 AND r.status = 'running'
      AND r.owner IS NOT NULL AND r.expires_at > ok.ms
      AND NOT EXISTS (SELECT 1 FROM existing)
    ORDER BY r.slot LIMIT 1
),
snap AS (SELECT j.fence, j.unpruned FROM {jobs} j WHERE j.job = $1),
newest AS (
    SELECT NOT EXISTS (SELECT 1 FROM {runs} r WHERE r.job = $1 AND r.slot > $2) AS newest
),
ins AS (
    INSERT INTO {runs} (job, slot, status, attempt, counted_starts, owner, expires_at,
                        scheduled_at, started_at, instance_id, reason, fence)
    SELECT $1, $2, 'running', 1, 1, $4, ok.ms + $5, $3, ok.ms, $4, $8,
           coalesce((SELECT fence FROM snap), 0) + 1
    FROM ok
    WHERE NOT EXISTS (SELECT 1 FROM existing) AND NOT EXISTS (SELECT 1 FROM live)
    ON CONFLICT (job, slot) DO NOTHING
    RETURNING slot, expires_at, started_at, fence
),
marked AS (
    UPDATE {runs} r SET status = 'interrupted', owner = NULL, finished_at = n.ms,
                        error = 'replaced by the next slot'
    FROM to_mark m, n
    WHERE r.job = $1 AND r.slot = m.slot AND r.status = 'running'
      AND (r.owner IS NULL OR r.expires_at <= n.ms)
    RETURNING r.slot, r.attempt, r.instance_id IS NULL AS own_row
),
marked_rows AS (
    UPDATE {attempts} a
    SET status = 'interrupted', finished_at = n.ms, error = 'replaced by the next slot'
    FROM marked m, n
    WHERE m.own_row AND a.job = $1 AND a.slot = m.slot AND a.attempt = m.attempt
      AND NOT a.manual AND a.status = 'running'
),
fence AS (
    INSERT INTO {jobs} AS j (job, fence, registered_at, unpruned, keys_added, keys_older)
    SELECT $1, 1, ins.started_at, {first_count}, 1, 0 FROM ins
    WHERE (SELECT count(*) FROM marked) >= 0
    ON CONFLICT (job) DO UPDATE SET fence = j.fence + 1, unpruned = {count},
        keys_added = coalesce(j.keys_added, 0)
                     + CASE WHEN (SELECT newest FROM newest) THEN 1 ELSE 0 END,
        keys_older = coalesce(j.keys_older, 0)
                     + CASE WHEN (SELECT newest FROM newest) THEN 0 ELSE 1 END
    WHERE NOT $7 OR j.fence = (SELECT fence FROM snap)
    RETURNING j.fence, j.unpruned
)
SELECT n.ms,
       n.ms > $6 AS late,
       EXISTS (SELECT 1 FROM existing) AS existed,
       (SELECT slot FROM live) AS live_slot,
       (SELECT expires_at FROM ins) AS expires_at,
       (SELECT fence FROM fence) AS fence,
       coalesce((SELECT unpruned FROM fence), (SELECT unpruned FROM snap)) AS unpruned,
       CASE
           WHEN EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM fence)
               THEN {retry}('another claim of the job committed first')
           WHEN (SELECT fence FROM ins) IS DISTINCT FROM (SELECT fence FROM fence)
               THEN {retry}('the fence of the job moved during the claim')
           WHEN (SELECT count(*) FROM marked) <> (SELECT count(*) FROM to_mark)
               THEN {retry}('an ended lease was renewed meanwhile')
       END AS retry
FROM n",
        first_count = if reset { "0" } else { "1" },
        count = if reset { "0" } else { "j.unpruned + 1" },
    )
}

/// The `finish` statement: conditional on (job, slot, attempt, owner) and status `running`,
/// the run's row (which holds its current attempt's history; for a run claimed by an older
/// version, also the attempt's own history row) gets the status, `finished_at` and error.
/// It does not prune: it answers whether the job is due to (a TTL is set, the job's count of claims
/// since pruning is above [`finish_slack`], or the run lies below the job's cut, see
/// [`below_cut`]) and then sets that count to 0; the store prunes the due jobs after the
/// batch committed (see [`prune_sql`]).
fn finish_sql(names: &Names) -> String {
    let Names {
        runs,
        attempts,
        jobs,
        retry,
        ..
    } = names;
    let now = NOW_MS;
    // $1 job, $2 slot, $3 attempt, $4 owner, $5 status, $6 error, $7 size, $8 ttl ms.
    format!(
        "WITH n AS (SELECT {now} AS ms),
chk AS (
    SELECT r.slot, r.instance_id IS NULL AS own_row FROM {runs} r
    WHERE r.job = $1 AND r.slot = $2 AND r.attempt = $3 AND r.owner = $4
      AND r.status = 'running'
),
due AS (
    SELECT 1 AS x FROM chk
    WHERE $8::int8 IS NOT NULL
       OR (SELECT j.unpruned FROM {jobs} j WHERE j.job = $1) > {slack}
       OR {below}
),
reset AS (UPDATE {jobs} j SET unpruned = 0 WHERE j.job = $1 AND EXISTS (SELECT 1 FROM due)),
f AS (
    UPDATE {runs} r SET status = $5, owner = NULL, finished_at = n.ms, error = $6
    FROM chk, n
    WHERE r.job = $1 AND r.slot = chk.slot AND r.attempt = $3 AND r.owner = $4
      AND r.status = 'running'
    RETURNING r.slot
),
h AS (
    UPDATE {attempts} a SET status = $5, finished_at = n.ms, error = $6
    FROM chk, n
    WHERE chk.own_row AND a.job = $1 AND a.slot = chk.slot AND a.attempt = $3
      AND NOT a.manual
)
SELECT EXISTS (SELECT 1 FROM chk) AS done,
       EXISTS (SELECT 1 FROM due) AS due,
       CASE
           WHEN EXISTS (SELECT 1 FROM chk) AND NOT EXISTS (SELECT 1 FROM f)
               THEN {retry}('the run changed while it was finished')
       END AS retry",
        slack = finish_slack("$7"),
        below = below_cut(names, "$1", "$2", "$7"),
    )
}

/// The prefix of the text a fenced transaction's failing check casts to `int8`: the
/// error message (SQLSTATE 22P02) carries `anarchon fenced: <loss>` (see
/// [`crate::fenced`]).
pub(crate) const FENCED_LOSS: &str = "anarchon fenced: ";

/// The ownership check of a fenced transaction: what the run row and its attempt's history
/// row say about attempt `$3` of owner `$4` with fence `$5`, as a loss (`NULL`: this
/// attempt owns the run): `missing`, `finished:<status>`, `superseded` (another attempt,
/// owner or fence), `released` (handed over), `lease ended` (only when `$6`).
///
/// `commit` false: the check at the start, run once the transaction holds the run's
/// advisory lock (in its own statement, so its snapshot is taken after the lock was
/// granted and sees every takeover that committed before). It also restores the
/// `lock_timeout` the start lowered, and answers the loss as a column.
///
/// `commit` true: the check before `COMMIT`. It locks the run row (`FOR NO KEY UPDATE`;
/// READ COMMITTED re-reads the newest version of a row it locks), so no claim, release or
/// finish can change the run between the check and the commit, and it fails with the loss
/// in the message of a cast error, so that the `COMMIT` pipelined after it rolls back.
fn fenced_check_sql(names: &Names, commit: bool) -> String {
    let Names { runs, attempts, .. } = names;
    let now = NOW_MS;
    // $1 job, $2 slot, $3 attempt, $4 owner, $5 fence, $6 check the lease.
    let lock = if commit { " FOR NO KEY UPDATE" } else { "" };
    let loss = "CASE
        WHEN r.job IS NULL THEN 'missing'
        WHEN r.status <> 'running' THEN 'finished:' || r.status
        WHEN r.attempt <> $3 OR (r.owner IS NOT NULL AND r.owner <> $4)
             OR coalesce(r.fence, a.fence) IS DISTINCT FROM $5 THEN 'superseded'
        WHEN r.owner IS NULL THEN 'released'
        WHEN $6 AND r.expires_at <= n.ms THEN 'lease ended'
    END";
    let answer = if commit {
        format!("CASE WHEN x.loss IS NOT NULL THEN CAST('{FENCED_LOSS}' || x.loss AS int8) END")
    } else {
        "set_config('lock_timeout', current_setting('anarchon.saved_lock_timeout'), true), \
         x.loss"
            .to_owned()
    };
    format!(
        "WITH n AS (SELECT {now} AS ms),
r AS (
    SELECT r.job, r.status, r.attempt, r.owner, r.expires_at,
           CASE WHEN r.instance_id IS NOT NULL THEN r.fence END AS fence
    FROM {runs} r
    WHERE r.job = $1 AND r.slot = $2{lock}
)
SELECT {answer}
FROM (
    SELECT {loss} AS loss
    FROM n LEFT JOIN r ON true
    LEFT JOIN LATERAL (
        SELECT a.fence FROM {attempts} a
        WHERE r.fence IS NULL AND a.job = $1 AND a.slot = $2 AND a.attempt = $3
          AND NOT a.manual
        LIMIT 1
    ) a ON true
) x"
    )
}

/// Records attempt `$3` of owner `$4` `succeeded` in a fenced transaction, after
/// [`fenced_check_sql`]'s check before `COMMIT` locked the run: the run row (and the
/// attempt's own history row, for a run claimed by an older version) as
/// `LeaseStore::finish` writes them (status, no owner,
/// `finished_at` on the database clock, no error). It does not prune: the next claims of
/// the job do (see [`PRUNE_EVERY`]). Fails (a cast error) when the run row was not
/// written, so the pipelined `COMMIT` rolls back. (The failing cast reads the clock: a
/// constant one would be folded by the planner into an error of every call.)
fn fenced_finish_sql(names: &Names) -> String {
    let Names { runs, attempts, .. } = names;
    let now = NOW_MS;
    // $1 job, $2 slot, $3 attempt, $4 owner.
    format!(
        "WITH n AS (SELECT {now} AS ms),
f AS (
    UPDATE {runs} r SET status = 'succeeded', owner = NULL, finished_at = n.ms, error = NULL
    FROM n
    WHERE r.job = $1 AND r.slot = $2 AND r.attempt = $3 AND r.owner = $4
      AND r.status = 'running'
    RETURNING r.slot, r.instance_id IS NULL AS own_row
),
h AS (
    UPDATE {attempts} a SET status = 'succeeded', finished_at = n.ms, error = NULL
    FROM n, f
    WHERE f.own_row AND a.job = $1 AND a.slot = f.slot AND a.attempt = $3 AND NOT a.manual
    RETURNING a.slot
)
SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM f)
            THEN CAST('{FENCED_LOSS}superseded' || substr(n.ms::text, 1, 0) AS int8) END,
       (SELECT count(*) FROM h)
FROM n"
    )
}

/// The statement that opens every claim, result and takeover batch: it locks the `_jobs`
/// row of each of the batch's jobs, in job order, and creates the rows of jobs no instance
/// registered. `ON CONFLICT DO UPDATE ... WHERE false` updates nothing but locks every
/// existing row it meets, in the order the sorted `SELECT` feeds them. The batch's next
/// statements then take their snapshots after every earlier claim, result or takeover of
/// these jobs committed, and none can start until this batch commits: claims of one job by
/// several instances run one after the other, decided on fresh data, and two batches lock
/// their common jobs in the same order, so they never deadlock.
fn lock_jobs_sql(names: &Names) -> String {
    let Names { jobs, .. } = names;
    let now = NOW_MS;
    // $1 jobs.
    format!(
        "INSERT INTO {jobs} AS j (job, fence, registered_at, unpruned)
SELECT k.job, 0, {now}, 0 FROM (SELECT DISTINCT job FROM unnest($1::text[]) AS u(job)) k
ORDER BY k.job
ON CONFLICT (job) DO UPDATE SET fence = j.fence WHERE false"
    )
}

/// The lock that opens a claim batch: [`lock_jobs_sql`]'s, but only for the jobs of claims
/// whose run does not exist yet (`$2` holds the claims' slots). A claim whose run exists is
/// `Taken` whatever happens next (a run is only deleted by pruning, long after its slot),
/// so the two instances that lose a slot no longer lock (and write a lock into) the job's
/// row and no longer queue behind the winner: only the claims that may insert lock. If the
/// run appears after this statement's snapshot, the claim statement's later snapshot sees
/// it (a run committed before the lock was granted) or waits on the lock as before. The
/// jobs locked are a subset of the batch's, still sorted: the lock order is unchanged.
fn lock_claims_sql(names: &Names) -> String {
    let Names { jobs, runs, .. } = names;
    let now = NOW_MS;
    // $1 jobs, $2 slots.
    format!(
        "INSERT INTO {jobs} AS j (job, fence, registered_at, unpruned)
SELECT k.job, 0, {now}, 0 FROM (
    SELECT DISTINCT u.job FROM unnest($1::text[], $2::int8[]) AS u(job, slot)
    WHERE NOT EXISTS (SELECT 1 FROM {runs} r WHERE r.job = u.job AND r.slot = u.slot)
) k
ORDER BY k.job
ON CONFLICT (job) DO UPDATE SET fence = j.fence WHERE false"
    )
}

/// The set-based claim: one statement for a batch in which each job appears at most once
/// (the store splits a batch that holds several slots of a job into such rounds), run after
/// [`lock_jobs_sql`] in the same transaction. Each claim is judged by the single claim's
/// rules (see `LeaseStore::claim`): late on the database clock against its `not_after`;
/// taken when its run exists; else earlier runs of its job that are running with an ended
/// lease become `interrupted` (their rows hold that, and the running history rows of runs an
/// older version claimed); overlap when `skip` and an earlier run of the job holds a live
/// lease; else its run, which holds its first attempt's history and the job's next fence
/// (read from the job's row, which the batch holds locked), and the job's fence are
/// written. A won claim whose `prune` flag is set sets its job's count
/// of claims since pruning to 0 (else adds 1); the store prunes its job after the batch
/// committed (see [`PRUNE_EVERY`], [`prune_sql`]). One answer row per claim, by `ord`.
///
/// **A taken claim reads one index entry and writes nothing.** The claim that created the
/// run marked its job's earlier ended leases under the job's lock; a lease that ended since
/// is marked by the next slot's winner or taken over by a backup (`superseded`), as it
/// would be had no instance lost this slot. So the lookups of live and ended leases and the
/// job's count of claims since pruning are only read for claims whose run does not exist
/// (`OFFSET 0` keeps `e` from being flattened into `d`, so that `existed` is read once per
/// claim, not once per use; `MATERIALIZED` would need PostgreSQL 12). With three instances
/// two claims of every slot are taken: 3 callers racing on 10,000 jobs with full histories
/// (`bench-node slot-floor --via store --race 1`), 12.6 buffer reads per claim instead of
/// 17.2.
///
/// `to_mark` looks each claim's earlier running runs up in a `LATERAL` subquery that
/// `OFFSET 0` keeps from being flattened into a join, so it runs once per claim on the
/// job's entries of the `_running` index whatever the statistics say. As a plain join the
/// planner chose that order until an autovacuum `ANALYZE` of the runs table, then scanned
/// the whole `_running` index once and compared every running run with every claim (3 x
/// 10,000 `every 1s`: claims of 256 from 14 ms to 0.3-0.8 s, the job locks queued behind
/// them, no slot started in its second for about 45 seconds, until the next `ANALYZE`).
///
/// The planner guesses one row for every CTE, so it joins two CTEs of 256 rows in a nested
/// loop that scans one of them once per row of the other: the fence update joined `ins` to
/// `d` that way, 65,536 comparisons and 150 ms of a 294 ms claim of 256 (auto_explain, 3 x
/// 10,000 `every 1s`). Statements that need a CTE's rows among another's therefore test
/// membership with `NOT (x NOT IN (SELECT ...))`, which stays a hashed subplan (an `IN`
/// becomes a semi-join, planned as that nested loop); each job appears once in a round, so
/// the job alone identifies a claim. Likewise it would join a CTE of 256 rows to the
/// runs through a scan of the whole `_running` index and a nested loop (256 x the running
/// runs). The writes that join a CTE to the runs therefore compare `status` with a column
/// of the CTE that holds `'running'` (`to_mark.running`, `chk.running`) rather than with
/// the constant: the partial index no longer applies, and each CTE row looks its run up by
/// primary key. Membership tests against CTEs are `IN` / `NOT IN` lists, which the planner
/// hashes, rather than correlated `EXISTS`.
fn claim_set_sql(names: &Names) -> String {
    let Names {
        runs,
        attempts,
        jobs,
        retry,
        ..
    } = names;
    let now = NOW_MS;
    // Arrays, one element per claim: $1 job, $2 slot, $3 scheduled_at, $4 instance,
    // $5 lease ms, $6 not_after, $7 overlap skip, $8 reason, $9 due to prune.
    format!(
        "WITH n AS (SELECT {now} AS ms),
b AS (
    SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::text[], $5::int8[],
                         $6::int8[], $7::bool[], $8::text[], $9::bool[])
        WITH ORDINALITY AS b(job, slot, scheduled_at, owner, lease_ms, not_after, skip,
                             reason, prune, ord)
),
e AS (
    SELECT b.*, n.ms,
           EXISTS (SELECT 1 FROM {runs} r WHERE r.job = b.job AND r.slot = b.slot) AS existed
    FROM b, n
    WHERE n.ms <= b.not_after
    OFFSET 0
),
d AS (
    SELECT e.*,
           CASE WHEN e.skip AND NOT e.existed THEN (
               SELECT r.slot FROM {runs} r
               WHERE r.job = e.job AND r.slot < e.slot AND r.status = 'running'
                 AND r.owner IS NOT NULL AND r.expires_at > e.ms
               ORDER BY r.slot LIMIT 1)
           END AS live_slot
    FROM e
),
to_mark AS (
    SELECT t.job, t.slot, t.running FROM d CROSS JOIN LATERAL (
        SELECT r.job, r.slot, r.status AS running FROM {runs} r
        WHERE r.job = d.job AND r.slot < d.slot AND r.status = 'running'
          AND (r.owner IS NULL OR r.expires_at <= d.ms)
        OFFSET 0
    ) t
    WHERE NOT d.existed
),
ins AS (
    INSERT INTO {runs} (job, slot, status, attempt, counted_starts, owner, expires_at,
                        scheduled_at, started_at, instance_id, reason, fence)
    SELECT d.job, d.slot, 'running', 1, 1, d.owner, d.ms + d.lease_ms, d.scheduled_at, d.ms,
           d.owner, d.reason, (SELECT j.fence + 1 FROM {jobs} j WHERE j.job = d.job)
    FROM d WHERE NOT d.existed AND d.live_slot IS NULL
    ORDER BY d.job, d.slot
    ON CONFLICT (job, slot) DO NOTHING
    RETURNING job, slot, expires_at, started_at, fence
),
marked AS (
    UPDATE {runs} r SET status = 'interrupted', owner = NULL, finished_at = n.ms,
                        error = 'replaced by the next slot'
    FROM to_mark m, n
    WHERE r.job = m.job AND r.slot = m.slot AND r.status = m.running
      AND (r.owner IS NULL OR r.expires_at <= n.ms)
    RETURNING r.job, r.slot, r.attempt, r.instance_id IS NULL AS own_row
),
marked_rows AS (
    UPDATE {attempts} a
    SET status = 'interrupted', finished_at = n.ms, error = 'replaced by the next slot'
    FROM marked m, n
    WHERE m.own_row AND a.job = m.job AND a.slot = m.slot AND a.attempt = m.attempt
      AND NOT a.manual AND a.status = 'running'
),
fence AS (
    UPDATE {jobs} j
    SET fence = j.fence + 1,
        unpruned = CASE WHEN d.prune THEN 0 ELSE j.unpruned + 1 END,
        keys_added = coalesce(j.keys_added, 0) + CASE WHEN d.newest THEN 1 ELSE 0 END,
        keys_older = coalesce(j.keys_older, 0) + CASE WHEN d.newest THEN 0 ELSE 1 END
    FROM (SELECT d.job, d.prune, NOT EXISTS (
              SELECT 1 FROM {runs} r WHERE r.job = d.job AND r.slot > d.slot) AS newest
          FROM d) d
    WHERE j.job = d.job
      AND NOT (d.job NOT IN (SELECT i.job FROM ins i))
      AND (SELECT count(*) FROM marked) >= 0
    RETURNING j.job, j.fence, j.unpruned
),
chk AS (
    SELECT CASE
        WHEN (SELECT count(*) FROM ins) <> (SELECT count(*) FROM fence)
            THEN {retry}('a claimed job has no fence row')
        WHEN EXISTS (SELECT 1 FROM ins i
                     WHERE (i.job, i.fence) NOT IN (SELECT f.job, f.fence FROM fence f))
            THEN {retry}('the fence of a job moved during the claim')
        WHEN (SELECT count(*) FROM marked) <> (SELECT count(*) FROM to_mark)
            THEN {retry}('an ended lease was renewed meanwhile')
    END AS retry
)
SELECT b.ord, n.ms, n.ms > b.not_after AS late, coalesce(d.existed, false) AS existed,
       d.live_slot, i.expires_at, f.fence,
       CASE WHEN d.existed THEN NULL
            ELSE coalesce(f.unpruned, (SELECT j.unpruned FROM {jobs} j WHERE j.job = b.job))
       END AS unpruned,
       chk.retry
FROM b CROSS JOIN n CROSS JOIN chk
LEFT JOIN d ON d.ord = b.ord
LEFT JOIN ins i ON i.job = b.job AND i.slot = b.slot
LEFT JOIN fence f ON f.job = b.job AND i.job IS NOT NULL
ORDER BY b.ord"
    )
}

/// The set-based finish: one statement for a batch of results in which each job appears at
/// most once (the store splits other batches into such rounds), run after
/// [`lock_jobs_sql`] in the same transaction. Each result is written by the single finish's
/// rules: conditional on (job, slot, attempt, owner) and status `running`, the run's row
/// (and the attempt's own history row, for a run an older version claimed) gets the status,
/// `finished_at` and error, and the job is pruned to the result's retention; a stale
/// owner's result writes nothing. One answer row per result, by `ord`.
fn finish_set_sql(names: &Names) -> String {
    let Names {
        runs,
        attempts,
        jobs,
        retry,
        ..
    } = names;
    let now = NOW_MS;
    // Arrays, one element per result: $1 job, $2 slot, $3 attempt, $4 owner, $5 status,
    // $6 error (NULL elements: none), $7 retention size, $8 retention ttl ms (NULL: none).
    format!(
        "WITH n AS (SELECT {now} AS ms),
b AS (
    SELECT * FROM unnest($1::text[], $2::int8[], $3::int4[], $4::text[], $5::text[],
                         $6::text[], $7::int8[], $8::int8[])
        WITH ORDINALITY AS b(job, slot, attempt, owner, status, error, size, ttl, ord)
),
chk AS (
    SELECT b.*, 'running'::text AS running, x.own_row FROM b CROSS JOIN LATERAL (
        SELECT r.instance_id IS NULL AS own_row FROM {runs} r
        WHERE r.job = b.job AND r.slot = b.slot AND r.attempt = b.attempt
          AND r.owner = b.owner AND r.status = 'running'
        OFFSET 0
    ) x
),
pj AS (
    SELECT c.job, c.ord FROM chk c JOIN {jobs} j ON j.job = c.job
    WHERE c.ttl IS NOT NULL OR j.unpruned > {slack} OR {below}
),
reset AS (UPDATE {jobs} j SET unpruned = 0 FROM pj WHERE j.job = pj.job),
f AS (
    UPDATE {runs} r SET status = c.status, owner = NULL, finished_at = n.ms, error = c.error
    FROM chk c, n
    WHERE r.job = c.job AND r.slot = c.slot AND r.attempt = c.attempt AND r.owner = c.owner
      AND r.status = c.running
    RETURNING r.job, r.slot
),
h AS (
    UPDATE {attempts} a SET status = c.status, finished_at = n.ms, error = c.error
    FROM chk c, n
    WHERE c.own_row AND a.job = c.job AND a.slot = c.slot AND a.attempt = c.attempt
      AND NOT a.manual
),
verdict AS (
    SELECT CASE
        WHEN (SELECT count(*) FROM chk) <> (SELECT count(*) FROM f)
            THEN {retry}('a run changed while it was finished')
    END AS retry
)
SELECT b.ord, b.ord IN (SELECT c.ord FROM chk c) AS done,
       b.ord IN (SELECT p.ord FROM pj p) AS due, verdict.retry
FROM b CROSS JOIN verdict
ORDER BY b.ord",
        slack = finish_slack("c.size"),
        below = below_cut(names, "c.job", "c.slot", "c.size"),
    )
}

/// Whether the run (`job`, `slot`) lies below its job's cut: at least `size` history keys
/// are newer than its own. A run that was running when the job was last pruned was kept
/// there, so its finish must prune even when no claim came since. An ordered index scan
/// upwards from the run's key, of at most `size` keys: in the common case the finished run
/// is the newest or next-newest key and the scan reads one or two entries.
fn below_cut(names: &Names, job: &str, slot: &str, size: &str) -> String {
    let Names { runs, attempts, .. } = names;
    format!(
        "(SELECT count(*) FROM (
        SELECT r.slot FROM {runs} r WHERE r.job = {job} AND r.slot > {slot}
        LIMIT greatest({size}, 1)
    ) x) + (SELECT count(*) FROM (
        SELECT DISTINCT a.slot FROM {attempts} a
        WHERE a.job = {job} AND a.manual AND a.slot >= {slot}
        LIMIT greatest({size}, 1)
    ) y) >= greatest({size}, 1)"
    )
}

/// How many won claims since the job was last pruned a finish lets pass without pruning,
/// as SQL over the retention size `size`: `size / 8`, at most `PRUNE_EVERY - 1` (so 0 below
/// a size of 8, where every finish after a won claim prunes). A finish prunes only when the
/// job's `unpruned` count is above it, the finished run lies below the job's cut (see
/// [`below_cut`]) or a TTL is set, and then sets the count to 0: after a finish a job holds
/// at most `size + size / 8` runs besides its running ones (exactly `size` below 8), and the
/// ordered scan of `size` keys that finds the cut runs once in `size / 8 + 1` finishes,
/// not on every one (see [`PRUNE_EVERY`]).
fn finish_slack(size: &str) -> String {
    format!("least({size} / 8, {})", PRUNE_EVERY - 1)
}

impl Sql {
    pub(crate) fn new(names: &Names) -> Self {
        let Names {
            runs,
            attempts,
            jobs,
            meta,
            cuts,
            retry,
            table,
            schema,
            ..
        } = names;
        let now = NOW_MS;

        let create = format!(
            "CREATE TABLE IF NOT EXISTS {meta} (
    key text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE IF NOT EXISTS {jobs} (
    job text PRIMARY KEY,
    fence bigint NOT NULL DEFAULT 0,
    registered_at bigint NOT NULL,
    unpruned integer NOT NULL DEFAULT 0,
    keys_added bigint,
    keys_older bigint
) WITH (fillfactor = {HOT_FILLFACTOR});
-- Each job's remembered cut (see the prune): written by prunes only, so that a prune's lock
-- on it never makes a claim or a result wait. NULL: the next prune reads it from the top.
CREATE TABLE IF NOT EXISTS {cuts} (
    job text PRIMARY KEY,
    cut_slot bigint,
    cut_manual boolean,
    cut_at bigint,
    cut_fence bigint,
    cut_size bigint,
    fast_prunes integer NOT NULL DEFAULT 0,
    cut_added bigint,
    cut_older bigint,
    cut_floor bigint
) WITH (fillfactor = {HOT_FILLFACTOR});
CREATE TABLE IF NOT EXISTS {runs} (
    job text NOT NULL,
    slot bigint NOT NULL,
    status text NOT NULL,
    attempt integer NOT NULL,
    counted_starts integer NOT NULL,
    owner text,
    expires_at bigint NOT NULL,
    scheduled_at bigint NOT NULL,
    started_at bigint NOT NULL,
    instance_id text,
    reason text,
    fence bigint,
    finished_at bigint,
    error text,
    PRIMARY KEY (job, slot)
);
CREATE INDEX IF NOT EXISTS \"{table}_running\" ON {runs} (job, slot) WHERE status = 'running';
-- The runs handed over (released, no owner yet): the backups' sweep reads them beside each
-- job's newest unfinished runs without reading the older ones. Its entries are added only
-- at a release; an older table without it answers the same, reading each job's unfinished
-- runs to find them.
CREATE INDEX IF NOT EXISTS \"{table}_released\" ON {runs} (job, slot)
    WHERE status = 'running' AND owner IS NULL;
CREATE TABLE IF NOT EXISTS {attempts} (
    job text NOT NULL,
    slot bigint NOT NULL,
    manual boolean NOT NULL,
    attempt integer NOT NULL,
    instance_id text NOT NULL,
    scheduled_at bigint NOT NULL,
    reason text NOT NULL,
    status text NOT NULL,
    fence bigint NOT NULL,
    started_at bigint NOT NULL,
    finished_at bigint,
    error text
) WITH (fillfactor = {HOT_FILLFACTOR});
-- Not unique: a second unique index beside the manual one would make two concurrent manual
-- upserts fail instead of update (only the ON CONFLICT arbiter index is handled).
CREATE INDEX IF NOT EXISTS \"{table}_attempts_slot\"
    ON {attempts} (job, slot, manual);
CREATE UNIQUE INDEX IF NOT EXISTS \"{table}_attempts_manual\"
    ON {attempts} (job, slot, instance_id) WHERE manual;
CREATE INDEX IF NOT EXISTS \"{table}_attempts_started\"
    ON {attempts} (job, started_at DESC, attempt DESC);
CREATE OR REPLACE FUNCTION {retry}(reason text) RETURNS integer LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    RAISE EXCEPTION 'anarchon: %; the statement is run again', reason
        USING ERRCODE = 'serialization_failure';
END
$fn$;
COMMENT ON TABLE {runs} IS 'anarchon: state and lease of each run (job, slot), and the history of its current attempt';
COMMENT ON TABLE {attempts} IS 'anarchon: history of attempts the run row no longer holds, and of manual runs';
COMMENT ON TABLE {jobs} IS 'anarchon: known jobs and their fencing counter';
COMMENT ON TABLE {meta} IS 'anarchon: schema version';
INSERT INTO {meta} (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}')
    ON CONFLICT (key) DO NOTHING;"
        );
        let _ = schema;

        let register_jobs = format!(
            "INSERT INTO {jobs} (job, fence, registered_at)
SELECT j, 0, {now} FROM unnest($1::text[]) AS j
ON CONFLICT (job) DO NOTHING"
        );
        let known_jobs = format!("SELECT job FROM {jobs}");
        // The history rows, and each run whose row holds its current attempt's history
        // (claimed by version 4 or later, and no row of that attempt written since).
        let history = format!(
            "SELECT h.job, h.slot, h.scheduled_at, h.instance_id, h.manual, h.attempt, h.reason,
       h.status, h.fence, h.started_at, h.finished_at, h.error
FROM (
    SELECT a.job, a.slot, a.scheduled_at, a.instance_id, a.manual, a.attempt, a.reason,
           a.status, a.fence, a.started_at, a.finished_at, a.error
    FROM {attempts} a WHERE a.job = $1
    UNION ALL
    SELECT r.job, r.slot, r.scheduled_at, r.instance_id, false, r.attempt, r.reason, r.status,
           r.fence, r.started_at, r.finished_at, r.error
    FROM {runs} r
    WHERE r.job = $1 AND r.instance_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM {attempts} a
                      WHERE a.job = r.job AND a.slot = r.slot AND a.attempt = r.attempt
                        AND NOT a.manual)
) h
ORDER BY h.started_at DESC, h.attempt DESC, h.slot DESC
LIMIT $2"
        );
        let record_manual = format!(
            "WITH j AS (
    INSERT INTO {jobs} (job, fence, registered_at) VALUES ($1, 0, {now})
    ON CONFLICT (job) DO NOTHING
)
INSERT INTO {attempts} AS a (job, slot, manual, attempt, instance_id, scheduled_at, reason,
                            status, fence, started_at, finished_at, error)
VALUES ($1, $2, true, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (job, slot, instance_id) WHERE manual DO UPDATE SET
    attempt = EXCLUDED.attempt, scheduled_at = EXCLUDED.scheduled_at, reason = EXCLUDED.reason,
    status = EXCLUDED.status, fence = EXCLUDED.fence, started_at = EXCLUDED.started_at,
    finished_at = EXCLUDED.finished_at, error = EXCLUDED.error
-- The start record (running) and the finish record of a manual run may be written on two
-- pooled connections at once; a late start record must not undo the finish.
WHERE a.status = 'running' OR EXCLUDED.status <> 'running'"
        );
        // $1 jobs, $2 slots, $3 attempts, $4 owners, $5 lease ms.
        let heartbeat = format!(
            "WITH n AS (SELECT {now} AS ms),
b AS (
    SELECT * FROM unnest($1::text[], $2::int8[], $3::int4[], $4::text[])
        WITH ORDINALITY AS b(job, slot, attempt, owner, ord)
),
u AS (
    UPDATE {runs} r SET expires_at = n.ms + $5
    FROM b, n
    WHERE r.job = b.job AND r.slot = b.slot AND r.attempt = b.attempt AND r.owner = b.owner
      AND r.status = 'running'
    RETURNING r.job, r.slot, r.attempt, r.owner, r.expires_at
)
SELECT b.ord, u.expires_at
FROM b LEFT JOIN u
  ON u.job = b.job AND u.slot = b.slot AND u.attempt = b.attempt AND u.owner = b.owner
ORDER BY b.ord"
        );

        // $1 job, $2 slot, $3 attempt, $4 owner, $5 channel, $6 payload.
        let release = format!(
            "WITH n AS (SELECT {now} AS ms),
u AS (
    UPDATE {runs} r SET owner = NULL, expires_at = n.ms
    FROM n
    WHERE r.job = $1 AND r.slot = $2 AND r.attempt = $3 AND r.owner = $4
      AND r.status = 'running'
    RETURNING r.slot, r.instance_id, r.reason, r.fence, r.scheduled_at, r.started_at
),
h AS (
    UPDATE {attempts} a SET status = 'interrupted', finished_at = n.ms, error = 'handed over'
    FROM u, n
    WHERE u.instance_id IS NULL AND a.job = $1 AND a.slot = $2 AND a.attempt = $3
      AND NOT a.manual AND a.status = 'running'
),
-- The run's row held the attempt's history: it is written as a row of its own, since the
-- run's row moves on to the next attempt.
h_new AS (
    INSERT INTO {attempts} (job, slot, manual, attempt, instance_id, scheduled_at, reason,
                            status, fence, started_at, finished_at, error)
    SELECT $1, $2, false, $3, u.instance_id, u.scheduled_at, u.reason, 'interrupted',
           u.fence, u.started_at, n.ms, 'handed over'
    FROM u, n WHERE u.instance_id IS NOT NULL
),
note AS (SELECT pg_notify($5, $6) FROM u)
SELECT EXISTS (SELECT 1 FROM u) AS done, (SELECT count(*) FROM note) AS notified"
        );

        // $1 job, $2 slot, $3 seen attempt, $4 instance, $5 max attempts, $6 superseded,
        // $7 lease ms, $8 not after (the caller's deadline: past it nothing is written),
        // $9 the run's lock key (`Names::run_lock_key`).
        let take_over = format!(
            "WITH n AS (SELECT {now} AS ms),
d AS (
    SELECT r.status, r.scheduled_at, n.ms, r.owner, r.instance_id, r.reason,
           r.fence AS old_fence, r.started_at,
           coalesce((SELECT j.fence FROM {jobs} j WHERE j.job = $1), 0) + 1 AS next_fence,
           CASE WHEN r.owner IS NULL THEN r.counted_starts ELSE r.counted_starts + 1 END
               AS counted,
           CASE
               WHEN n.ms > $8 THEN 'late'
               WHEN r.status <> 'running' THEN 'finished'
               WHEN r.attempt <> $3 OR (r.owner IS NOT NULL AND r.expires_at > n.ms) THEN 'live'
               -- A fenced transaction of the run is open (it holds the run's lock until it
               -- ends): the run is not taken while it may still commit. Tried, never
               -- waited for, so one open transaction holds up no other takeover.
               WHEN NOT pg_try_advisory_xact_lock($9) THEN 'live'
               WHEN $6 THEN 'interrupted'
               WHEN (CASE WHEN r.owner IS NULL THEN r.counted_starts
                          ELSE r.counted_starts + 1 END) > $5 THEN 'exhausted'
               ELSE 'won'
           END AS outcome
    FROM {runs} r, n
    WHERE r.job = $1 AND r.slot = $2
),
u AS (
    UPDATE {runs} r SET
        status = CASE d.outcome WHEN 'interrupted' THEN 'interrupted'
                                WHEN 'exhausted' THEN 'failed' ELSE 'running' END,
        attempt = CASE WHEN d.outcome = 'won' THEN r.attempt + 1 ELSE r.attempt END,
        counted_starts = CASE WHEN d.outcome = 'won' THEN d.counted ELSE r.counted_starts END,
        owner = CASE WHEN d.outcome = 'won' THEN $4 ELSE r.owner END,
        expires_at = CASE WHEN d.outcome = 'won' THEN d.ms + $7 ELSE r.expires_at END,
        instance_id = CASE WHEN d.outcome = 'won' THEN $4 ELSE r.instance_id END,
        reason = CASE WHEN d.outcome = 'won' THEN 'takeover' ELSE r.reason END,
        fence = CASE WHEN d.outcome = 'won' THEN d.next_fence ELSE r.fence END,
        started_at = CASE WHEN d.outcome = 'won' THEN d.ms ELSE r.started_at END,
        finished_at = CASE WHEN d.outcome = 'won' THEN NULL ELSE d.ms END,
        error = CASE WHEN d.outcome = 'won' THEN NULL ELSE 'lease expired' END
    FROM d
    WHERE r.job = $1 AND r.slot = $2 AND d.outcome IN ('interrupted', 'exhausted', 'won')
      AND r.status = 'running' AND r.attempt = $3
      AND (r.owner IS NULL OR r.expires_at <= d.ms)
    RETURNING r.attempt, r.expires_at
),
old_row AS (
    UPDATE {attempts} a SET status = 'interrupted', finished_at = d.ms, error = 'lease expired'
    FROM d, u
    WHERE d.instance_id IS NULL AND a.job = $1 AND a.slot = $2 AND a.attempt = $3
      AND NOT a.manual AND a.status = 'running'
),
-- The ended attempt's history was the run's row, which now moves on: it gets a row of its
-- own. (A run handed over has one already, written by its release.)
old_new AS (
    INSERT INTO {attempts} (job, slot, manual, attempt, instance_id, scheduled_at, reason,
                            status, fence, started_at, finished_at, error)
    SELECT $1, $2, false, $3, d.instance_id, d.scheduled_at, d.reason, 'interrupted',
           d.old_fence, d.started_at, d.ms, 'lease expired'
    FROM d, u
    WHERE d.instance_id IS NOT NULL AND d.owner IS NOT NULL
),
fence AS (
    INSERT INTO {jobs} AS j (job, fence, registered_at)
    SELECT $1, 1, d.ms FROM d, u WHERE d.outcome = 'won'
    ON CONFLICT (job) DO UPDATE SET fence = j.fence + 1
    RETURNING j.fence
)
SELECT CASE WHEN n.ms > $8 THEN 'late' ELSE d.outcome END, d.status, u.attempt,
       u.expires_at, fence.fence, d.scheduled_at, n.ms,
       CASE WHEN d.outcome IN ('interrupted', 'exhausted', 'won') AND u.attempt IS NULL
            THEN {retry}('the run changed during the takeover')
            WHEN d.outcome = 'won' AND fence.fence IS DISTINCT FROM d.next_fence
            THEN {retry}('the fence of the job moved during the takeover') END AS retry
FROM n LEFT JOIN d ON true LEFT JOIN u ON true LEFT JOIN fence ON true"
        );

        let runs_sql = format!(
            "WITH n AS (SELECT {now} AS ms)
SELECT r.job, r.slot, r.status, r.attempt, r.owner, r.expires_at, n.ms
FROM unnest($1::text[], $2::int8[]) WITH ORDINALITY AS k(job, slot, ord)
JOIN {runs} r ON r.job = k.job AND r.slot = k.slot
CROSS JOIN n
ORDER BY k.ord"
        );
        let unfinished = format!(
            "WITH n AS (SELECT {now} AS ms)
SELECT r.job, r.slot, r.status, r.attempt, r.owner, r.expires_at, n.ms
FROM {runs} r CROSS JOIN n
WHERE r.status = 'running' AND r.job = ANY($1::text[])"
        );

        // LATERAL per job, so each job's share is one short index descent whatever the
        // statistics say; UNION because a run handed over may also be among the newest.
        let newest_unfinished = format!(
            "WITH n AS (SELECT {now} AS ms)
SELECT t.job, t.slot, t.status, t.attempt, t.owner, t.expires_at, n.ms
FROM unnest($1::text[]) AS j(job)
CROSS JOIN LATERAL (
    (SELECT r.job, r.slot, r.status, r.attempt, r.owner, r.expires_at FROM {runs} r
     WHERE r.job = j.job AND r.status = 'running'
     ORDER BY r.slot DESC LIMIT $2)
    UNION
    (SELECT r.job, r.slot, r.status, r.attempt, r.owner, r.expires_at FROM {runs} r
     WHERE r.job = j.job AND r.status = 'running' AND r.owner IS NULL)
) t
CROSS JOIN n
ORDER BY t.job, t.slot"
        );

        Sql {
            create,
            now: format!("SELECT {now}"),
            register_jobs,
            known_jobs,
            history,
            record_manual,
            prune: prune_sql(names),
            lock_cuts: lock_cuts_sql(names),
            prune_settings: "SELECT set_config('jit', 'off', true), \
                             set_config('plan_cache_mode', 'force_custom_plan', true)"
                .to_owned(),
            lock_jobs: lock_jobs_sql(names),
            lock_claims: lock_claims_sql(names),
            claim: [claim_sql(names, false), claim_sql(names, true)],
            finish: finish_sql(names),
            claim_set: claim_set_sql(names),
            // `greatest($1, n) - n` cannot overflow, whatever the deadline.
            lock_wait_until: format!(
                "SELECT set_config('lock_timeout', CASE WHEN w >= 2147483647 THEN '0' \
                 ELSE (w + 1)::text || 'ms' END, true) \
                 FROM (SELECT greatest($1, x.n) - x.n AS w FROM (SELECT {now} AS n) x) y"
            ),
            lock_wait_for: "SELECT set_config('lock_timeout', $1, true)".to_owned(),
            claim_guard: format!(
                "SELECT CASE WHEN {now} > $1 \
                 THEN CAST('anarchon: the claim batch reached its deadline ' || {now} AS int8) \
                 END"
            ),
            heartbeat,
            finish_set: finish_set_sql(names),
            release,
            take_over,
            fenced_check: fenced_check_sql(names, false),
            fenced_recheck: fenced_check_sql(names, true),
            fenced_finish: fenced_finish_sql(names),
            runs: runs_sql,
            unfinished,
            newest_unfinished,
        }
    }
}
