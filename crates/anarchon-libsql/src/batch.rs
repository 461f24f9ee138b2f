//! Claims, results and takeovers as one Hrana batch: the rules of the single calls
//! (`anarchon_sqlite::sql::ops`) written as conditional statements that run in input order
//! inside one `BEGIN IMMEDIATE ... COMMIT`, sent as one HTTP request.
//!
//! What the `libsql` 0.10 remote client offers decides the shape. `Connection::execute_batch`
//! sends every statement of a string as one Hrana `batch` request (with `get_autocommit` and,
//! when the string opens and ends its transaction, `close`, all in one HTTP request), each
//! step conditioned on the one before (a failed step skips the rest, so `COMMIT` never runs
//! after a failure and the closed stream rolls back). But it binds no parameters, and it sends
//! each step with `want_rows: false`, so the server returns no rows. Hence:
//! - every value is a literal formatted here (integers by Rust, text quoted with `'` doubled,
//!   text with control characters as a hex blob cast to text);
//! - the store's clock is read once per batch on the server and kept in a working row of the
//!   meta table (`~n`, removed before `COMMIT`), which every later statement reads;
//! - the items go in rounds: an item reads and writes only rows of its own job (claims,
//!   takeovers) or run (results), so items that cannot see each other share a round (the
//!   first item of each job, then the second, ...) and only the order among one job's items
//!   matters, which the rounds keep. A round is a handful of set-based statements over a
//!   `VALUES` list of its items, so the SQL grows by a row per item, not by statements;
//! - each item's decision (won, taken, live, ...) is computed once, by the round's first
//!   statement, from the tables as they are at that point of the batch, and kept in a stash
//!   row; every write of the item is conditioned on it;
//! - pruning (which the contract lets a store defer) runs once, at the end of the batch, for
//!   the jobs due;
//! - the outcomes (codes, fences, the clock) stay in stash rows `b:<token>:...` of the meta
//!   table, committed with the batch, and one follow-up statement (`DELETE ... RETURNING`,
//!   through the client's `query`: a `describe` and a `cursor` request, and the stream's
//!   `close`) reads and removes them.
//!
//! Stash rows never collide with job keys (`job:<name>`) or `schema_version`, and a batch
//! removes stash rows left more than an hour ago (by the writer's clock) by a call whose
//! read never arrived.

use std::collections::HashMap;
use std::fmt::Write as _;

use anarchon_core::history::pruning_fence_residue;
use anarchon_core::store::{
    ClaimOutcome, EpochMs, Finish, Lease, LeaseClaim, Overlap, OwnerWrite, Reason, Retention,
    RunStatus, Takeover, TakeoverOutcome,
};
use anarchon_sqlite::sql::Tables;
use anarchon_sqlite::sql::ops::{self, PRUNE_EVERY};

/// The store's clock on the server, epoch ms, as an expression.
const NOW_EXPR: &str = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";

/// The most runs (the job's oldest) the end of a batch looks at for finished runs left
/// without an attempt: more than one prune removes (`ops::PRUNE_EVERY` by count, a page of
/// the age cut), so runs left by an earlier prune go at the next.
const RUNS_PAGE: i64 = 64;

/// Stash rows older than this (by the writer's clock) are removed by any later batch.
const STALE_STASH_MS: i64 = 3_600_000;

/// An integer literal (`i64::MIN` has no literal form in SQLite: `-9223372036854775808`
/// would be read as a real).
pub(crate) fn int(v: i64) -> String {
    if v == i64::MIN {
        "(-9223372036854775807 - 1)".to_owned()
    } else {
        v.to_string()
    }
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A text literal. Text without control characters is quoted with `'` doubled (SQLite has
/// no backslash escapes, so nothing else can end the literal); text with a control character
/// (NUL among them, which would end the SQL text in C) becomes `CAST(X'..' AS TEXT)`, whose
/// hex digits cannot end anything either.
pub(crate) fn text(s: &str) -> String {
    if s.chars().any(char::is_control) {
        let mut out = String::with_capacity(s.len() * 2 + 20);
        out.push_str("CAST(X'");
        for b in s.bytes() {
            let _ = write!(out, "{b:02X}");
        }
        out.push_str("' AS TEXT)");
        out
    } else {
        let mut out = String::with_capacity(s.len() + 2);
        out.push('\'');
        out.push_str(&s.replace('\'', "''"));
        out.push('\'');
        out
    }
}

fn opt_text(s: Option<&str>) -> String {
    s.map_or_else(|| "NULL".to_owned(), text)
}

/// The working row of a batch in the meta table: the clock reading, read by every later
/// statement. Removed before `COMMIT`, so no one else ever sees it.
const NOW_KEY: &str = "~n";

/// The statements of one batch, and the token its stash rows carry.
pub(crate) struct Script {
    sql: String,
    /// `b:<writer ms>.<random>`: the stash rows are `<base>:...`.
    base: String,
    runs: String,
    running: String,
    attempts: String,
    meta: String,
    /// The batch's clock reading: `(SELECT value FROM meta WHERE key = '~n')`.
    now: String,
    /// The jobs to prune at the end: `(job, size, ttl, hit)` rows (see `prune_if`).
    due: Vec<String>,
}

impl Script {
    /// A batch that opens its transaction, removes stale stash rows and reads the clock.
    pub(crate) fn new(t: &Tables) -> Self {
        let writer_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let base = format!("b:{writer_ms:015}.{:016x}", rand_token());
        let meta = format!("\"{}\"", t.meta);
        let now = format!("(SELECT value FROM {meta} WHERE key = '{NOW_KEY}')");
        let mut s = Script {
            sql: String::with_capacity(64 * 1024),
            base,
            runs: format!("\"{}\"", t.runs),
            running: format!("\"{}_running\"", t.runs),
            attempts: format!("\"{}\"", t.attempts),
            meta,
            now,
            due: Vec::new(),
        };
        s.push("BEGIN IMMEDIATE");
        let stale = format!("b:{:015}", writer_ms.saturating_sub(STALE_STASH_MS).max(0));
        let stmt = format!(
            "DELETE FROM {m} WHERE key >= 'b:' AND key < {}",
            text(&stale),
            m = s.meta
        );
        s.push(&stmt);
        let stmt = format!(
            "INSERT INTO {m} (key, value) VALUES ('{NOW_KEY}', {NOW_EXPR}) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            m = s.meta
        );
        s.push(&stmt);
        let stmt = format!(
            "INSERT INTO {m} (key, value) SELECT {}, value FROM {m} WHERE key = '{NOW_KEY}'",
            text(&format!("{}:now", s.base)),
            m = s.meta
        );
        s.push(&stmt);
        s
    }

    /// The stash rows' range: `key >= from AND key < to`.
    pub(crate) fn stash_range(&self) -> (String, String) {
        (format!("{}:", self.base), format!("{};", self.base))
    }

    fn push(&mut self, stmt: &str) {
        self.sql.push_str(stmt);
        self.sql.push_str(";\n");
    }

    /// The literal key of stash row `name` of item `i`.
    fn key(&self, i: usize, name: &str) -> String {
        text(&format!("{}:{i:05}:{name}", self.base))
    }

    /// The statements with the closing `COMMIT` (the working rows removed before it).
    pub(crate) fn finish(mut self) -> String {
        self.prune_due();
        let stmt = format!("DELETE FROM {} WHERE key = '{NOW_KEY}'", self.meta);
        self.push(&stmt);
        self.push("COMMIT");
        self.sql
    }

    /// [B-37] Job `j` (a literal) is to be pruned to `retention` at the end of the batch
    /// if `hit` (an expression over the item's stash rows) holds: by age when `retention`
    /// has a TTL, by count when `by_count`.
    fn prune_if(&mut self, j: &str, retention: Retention, by_count: bool, hit: String) {
        let ttl = retention
            .ttl_ms
            .map_or_else(|| "NULL".to_owned(), |t| int(ms(t)));
        self.due.push(format!(
            "({j}, {}, {ttl}, {}, {hit})",
            i64::from(retention.size.max(1)),
            i64::from(by_count)
        ));
    }

    /// [B-37] Prunes the jobs due (see [`Script::prune_if`]) to their retention, once per
    /// job at the end of the batch, as the single calls prune: by count (the jobs due by
    /// count) the attempts beyond the `size` newest runs (a manual run counts as a run of its
    /// own); by age (the jobs with a TTL) those among the job's [`ops::TTL_PAGE`] oldest
    /// that finished before the cut; never those of running runs; then the finished runs
    /// left without an attempt, among the job's [`RUNS_PAGE`] oldest, except those whose row
    /// holds their last attempt's history (an owner and a finish time: written by the SQLite
    /// store, which writes no history row for a won claim; this store never prunes them, so
    /// a file moved from the SQLite store keeps them, at most a job's history each). The contract lets a
    /// store defer pruning; deferring it to the end of the batch only keeps runs a little
    /// longer (a later item of the batch never finds a run of its job pruned that it would
    /// have found). A job due twice in one batch is pruned with the larger size and the
    /// longer age (the one that keeps more).
    ///
    /// Cost: the age cut and the removal of runs read what they remove plus one page of the
    /// job's oldest rows (a correlated bound on the unique index / primary key), never the
    /// job's whole history; the count ranks the job's history rows, but only on the finishes
    /// and claims due by count (one in [`ops::finish_prune_period`], see `ops::PRUNE_EVERY`).
    fn prune_due(&mut self) {
        if self.due.is_empty() {
            return;
        }
        let (r, a) = (self.runs.clone(), self.attempts.clone());
        let with = format!(
            "WITH v(job, size, ttl, cnt, hit) AS (VALUES {}), \
             due(job, size, cut, cnt) AS (SELECT job, MAX(size), \
               CASE WHEN COUNT(ttl) < COUNT(*) THEN NULL ELSE {} - MAX(ttl) END, MAX(cnt) \
               FROM v WHERE hit GROUP BY job)",
            self.due.join(", "),
            self.now
        );
        let running = |x: &str| {
            format!(
                "NOT ({x}.manual = 0 AND EXISTS (SELECT 1 FROM {r} AS r \
                 WHERE r.job = {x}.job AND r.slot = {x}.slot AND r.status = 'running'))"
            )
        };
        let stmt = format!(
            "{with} DELETE FROM {a} WHERE id IN (SELECT x.id FROM \
             (SELECT p.id AS id, p.job AS job, p.slot AS slot, p.manual AS manual, \
               d.size AS size, DENSE_RANK() OVER \
               (PARTITION BY p.job ORDER BY p.slot DESC, p.manual DESC) AS rk \
              FROM {a} AS p JOIN due AS d ON p.job = d.job WHERE d.cnt) AS x \
             WHERE x.rk > x.size AND {})",
            running("x")
        );
        self.push(&stmt);
        let stmt = format!(
            "{with} DELETE FROM {a} WHERE id IN (SELECT p.id FROM due AS d JOIN {a} AS p \
             ON p.job = d.job AND p.slot <= COALESCE((SELECT q.slot FROM {a} AS q \
               WHERE q.job = d.job ORDER BY q.slot LIMIT 1 OFFSET {page}), \
               (SELECT MAX(q.slot) FROM {a} AS q WHERE q.job = d.job)) \
             WHERE d.cut IS NOT NULL AND p.finished_at < d.cut AND {})",
            running("p"),
            page = ops::TTL_PAGE - 1
        );
        self.push(&stmt);
        let stmt = format!(
            "{with} DELETE FROM {r} WHERE (job, slot) IN (SELECT p.job, p.slot \
             FROM due AS d JOIN {r} AS p \
             ON p.job = d.job AND p.slot <= COALESCE((SELECT q.slot FROM {r} AS q \
               WHERE q.job = d.job ORDER BY q.slot LIMIT 1 OFFSET {page}), \
               (SELECT MAX(q.slot) FROM {r} AS q WHERE q.job = d.job)) \
             WHERE p.status <> 'running' AND (p.owner IS NULL OR p.finished_at IS NULL) \
             AND NOT EXISTS (SELECT 1 FROM {a} AS a \
               WHERE a.job = p.job AND a.slot = p.slot AND a.manual = 0))",
            page = RUNS_PAGE - 1
        );
        self.push(&stmt);
    }

    /// A new history row (as `ops::insert_attempt`: an upsert on its unique key).
    fn insert_attempt(&mut self, with: &str, select: &str) {
        let stmt = format!(
            "{with}INSERT INTO {} (job, slot, manual, attempt, instance_id, scheduled_at, reason, \
             status, fence, started_at, finished_at, error) {select} \
             ON CONFLICT (job, slot, manual, attempt, instance_id) DO UPDATE SET \
             scheduled_at = excluded.scheduled_at, reason = excluded.reason, \
             status = excluded.status, fence = excluded.fence, \
             started_at = excluded.started_at, finished_at = excluded.finished_at, \
             error = excluded.error",
            self.attempts
        );
        self.push(&stmt);
    }

    /// Claims `claims` (items `0..`): [`anarchon_core::LeaseStore::claim`], each as the
    /// single claim judges it, in input order. [B-10, B-11, B-12, B-15, B-37]
    ///
    /// A claim reads and writes only rows of its own job (its runs, their history rows, the
    /// job's fence), so claims of different jobs cannot see each other and only the order
    /// among claims of one job matters. The claims go in rounds: the first claim of each job,
    /// then the second of each job, and so on; each round is a handful of set-based
    /// statements over the round's claims (a `VALUES` list), so the SQL grows by one row per
    /// claim, not by a dozen statements. Stash per item: `c` the outcome (0 won, 1 late,
    /// 2 taken, 3 overlap; see [`Stash::claim`]), `v` the running slot of an overlap, `f`
    /// the fence of a won claim.
    pub(crate) fn claims(&mut self, claims: &[LeaseClaim]) {
        let mut rounds: Vec<Vec<(usize, &LeaseClaim)>> = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, c) in claims.iter().enumerate() {
            let n = seen.entry(c.run.job.as_str()).or_insert(0);
            if rounds.len() <= *n {
                rounds.push(Vec::new());
            }
            rounds[*n].push((i, c));
            *n += 1;
        }
        for round in &rounds {
            self.claim_round(round);
        }
        // [B-37] One won claim in PRUNE_EVERY prunes its job, at the job's phase (see
        // `ops::PRUNE_EVERY`): the fence kept in the stash exists only for a won claim.
        for (i, c) in claims.iter().enumerate() {
            let hit = format!(
                "(SELECT value FROM {} WHERE key = {}) % {} = {}",
                self.meta,
                self.key(i, "f"),
                i64::try_from(PRUNE_EVERY).unwrap_or(16),
                pruning_fence_residue(c.run.job.as_str(), PRUNE_EVERY)
            );
            self.prune_if(&text(c.run.job.as_str()), c.retention, true, hit);
        }
    }

    /// One round of [`Script::claims`]: claims of distinct jobs.
    fn claim_round(&mut self, round: &[(usize, &LeaseClaim)]) {
        let (r, ri, a, m, n) = (
            self.runs.clone(),
            self.running.clone(),
            self.attempts.clone(),
            self.meta.clone(),
            self.now.clone(),
        );
        let rows: Vec<String> = round
            .iter()
            .map(|(i, c)| {
                format!(
                    "({}, {}, {}, {}, {}, {}, {}, {}, {})",
                    text(&format!("{}:{i:05}:", self.base)),
                    text(c.run.job.as_str()),
                    int(c.run.slot),
                    int(c.scheduled_at),
                    text(&c.instance_id),
                    text(c.reason.as_str()),
                    int(ms(c.lease_ms)),
                    int(c.not_after),
                    i64::from(matches!(c.overlap, Overlap::Skip)),
                )
            })
            .collect();
        let with = format!(
            "WITH c(k, job, slot, sched, inst, reason, lease, na, skip) AS (VALUES {})",
            rows.join(", ")
        );
        let code = format!("(SELECT value FROM {m} WHERE key = c.k || 'c')");
        let fence = format!("(SELECT value FROM {m} WHERE key = 'job:' || c.job)");
        let live_earlier = format!(
            "FROM {r} AS p INDEXED BY {ri} WHERE p.job = c.job AND p.slot < c.slot \
             AND p.status = 'running' AND p.owner IS NOT NULL AND p.expires_at > {n}"
        );
        // The decision, judged before any write of the round.
        let stmt = format!(
            "{with} INSERT INTO {m} (key, value) SELECT c.k || 'c', CASE \
             WHEN {n} > c.na THEN 1 \
             WHEN EXISTS (SELECT 1 FROM {r} AS p WHERE p.job = c.job AND p.slot = c.slot) THEN 2 \
             WHEN c.skip = 1 AND EXISTS (SELECT 1 {live_earlier}) THEN 3 \
             ELSE 0 END FROM c WHERE true"
        );
        self.push(&stmt);
        let stmt = format!(
            "{with} INSERT INTO {m} (key, value) SELECT c.k || 'v', \
             (SELECT MIN(p.slot) {live_earlier}) FROM c WHERE {code} = 3"
        );
        self.push(&stmt);
        // [B-15] Earlier runs whose lease ended: their running history rows, then the runs.
        let stmt = format!(
            "{with} UPDATE {a} SET status = 'interrupted', finished_at = {n}, \
             error = 'replaced by the next slot' \
             WHERE job IN (SELECT job FROM c) AND manual = 0 AND status = 'running' \
             AND EXISTS (SELECT 1 FROM c JOIN {r} AS p ON p.job = c.job \
               WHERE c.job = {a}.job AND {code} <> 1 AND p.slot < c.slot \
               AND p.slot = {a}.slot AND p.attempt = {a}.attempt AND p.status = 'running' \
               AND (p.owner IS NULL OR p.expires_at <= {n}))"
        );
        self.push(&stmt);
        let stmt = format!(
            "{with} UPDATE {r} INDEXED BY {ri} SET status = 'interrupted', owner = NULL \
             WHERE job IN (SELECT c.job FROM c WHERE {code} <> 1) AND status = 'running' \
             AND (owner IS NULL OR expires_at <= {n}) \
             AND slot < (SELECT c.slot FROM c WHERE c.job = {r}.job)"
        );
        self.push(&stmt);
        // Known jobs; then the fences (a claim's: +1), the runs, their first history rows.
        let stmt = format!(
            "{with} INSERT INTO {m} (key, value) SELECT 'job:' || c.job, 0 FROM c \
             WHERE {code} <> 1 ON CONFLICT (key) DO NOTHING"
        );
        self.push(&stmt);
        let stmt = format!(
            "{with} UPDATE {m} SET value = value + 1 \
             WHERE key IN (SELECT 'job:' || c.job FROM c WHERE {code} = 0)"
        );
        self.push(&stmt);
        let stmt = format!(
            "{with} INSERT INTO {r} (job, slot, scheduled_at, status, attempt, starts, owner, \
             reason, fence, started_at, expires_at, error) \
             SELECT c.job, c.slot, c.sched, 'running', 1, 1, c.inst, c.reason, {fence}, {n}, \
             CASE WHEN c.lease > 9223372036854775807 - {n} THEN 9223372036854775807 \
             ELSE {n} + c.lease END, NULL FROM c WHERE {code} = 0"
        );
        self.push(&stmt);
        let select = format!(
            "SELECT c.job, c.slot, 0, 1, c.inst, c.sched, c.reason, 'running', {fence}, {n}, \
             NULL, NULL FROM c WHERE {code} = 0"
        );
        self.insert_attempt(&format!("{with} "), &select);
        let stmt = format!(
            "{with} INSERT INTO {m} (key, value) SELECT c.k || 'f', {fence} FROM c \
             WHERE {code} = 0"
        );
        self.push(&stmt);
    }

    /// Writes `writes` (items `0..`): [`anarchon_core::LeaseStore::finish`], each as the
    /// single finish writes it, in input order. [B-16, B-37]
    ///
    /// A result reads and writes only its own run and that run's history rows (pruning
    /// waits for the end of the batch), so results of different runs cannot see each
    /// other: they go in rounds (the first result of each run, then the second, ...), each
    /// round a few set-based statements over a `VALUES` list, as for [`Script::claims`].
    /// Stash per item: `c` 0 done, 1 lost.
    pub(crate) fn finishes(&mut self, writes: &[(Lease, Finish)]) {
        let mut rounds: Vec<Vec<(usize, &Lease, &Finish)>> = Vec::new();
        let mut seen: HashMap<(&str, EpochMs), usize> = HashMap::new();
        for (i, (l, f)) in writes.iter().enumerate() {
            let n = seen.entry((l.run.job.as_str(), l.run.slot)).or_insert(0);
            if rounds.len() <= *n {
                rounds.push(Vec::new());
            }
            rounds[*n].push((i, l, f));
            *n += 1;
        }
        for round in &rounds {
            self.finish_round(round);
        }
        // [B-37] A result prunes by count on one finish in `ops::finish_prune_period` (by
        // the run's fence), by age on every one when the job has a TTL.
        for (i, (l, f)) in writes.iter().enumerate() {
            let by_count = ops::finish_prunes(l.run.job.as_str(), l.fence, f.retention.size);
            if !by_count && f.retention.ttl_ms.is_none() {
                continue;
            }
            let hit = format!(
                "(SELECT value FROM {} WHERE key = {}) = 0",
                self.meta,
                self.key(i, "c")
            );
            self.prune_if(&text(l.run.job.as_str()), f.retention, by_count, hit);
        }
    }

    /// One round of [`Script::finishes`]: results of distinct runs.
    fn finish_round(&mut self, round: &[(usize, &Lease, &Finish)]) {
        let (r, a, m, n) = (
            self.runs.clone(),
            self.attempts.clone(),
            self.meta.clone(),
            self.now.clone(),
        );
        let rows: Vec<String> = round
            .iter()
            .map(|(i, l, f)| {
                format!(
                    "({}, {}, {}, {}, {}, {}, {})",
                    text(&format!("{}:{i:05}:", self.base)),
                    text(l.run.job.as_str()),
                    int(l.run.slot),
                    i64::from(l.attempt),
                    text(&l.instance_id),
                    text(f.status.as_str()),
                    opt_text(f.error.as_deref()),
                )
            })
            .collect();
        let with = format!(
            "WITH c(k, job, slot, att, inst, st, err) AS (VALUES {})",
            rows.join(", ")
        );
        let keys: Vec<String> = round
            .iter()
            .map(|(i, l, _)| {
                format!(
                    "({}, {}, {}, {}, {})",
                    text(&format!("{}:{i:05}:", self.base)),
                    text(l.run.job.as_str()),
                    int(l.run.slot),
                    i64::from(l.attempt),
                    text(&l.instance_id),
                )
            })
            .collect();
        let with_keys = format!(
            "WITH c(k, job, slot, att, inst) AS (VALUES {})",
            keys.join(", ")
        );
        let code = format!("(SELECT value FROM {m} WHERE key = c.k || 'c')");
        // The decision: the run is running under this attempt and owner.
        let stmt = format!(
            "{with_keys} INSERT INTO {m} (key, value) SELECT c.k || 'c', CASE WHEN EXISTS \
             (SELECT 1 FROM {r} AS p WHERE p.job = c.job AND p.slot = c.slot \
              AND p.attempt = c.att AND p.owner = c.inst AND p.status = 'running') \
             THEN 0 ELSE 1 END FROM c WHERE true"
        );
        self.push(&stmt);
        let mine = |t: &str| format!("c.job = {t}.job AND c.slot = {t}.slot");
        let stmt = format!(
            "{with} UPDATE {r} SET status = (SELECT c.st FROM c WHERE {k}), owner = NULL, \
             error = (SELECT c.err FROM c WHERE {k}) \
             WHERE job IN (SELECT job FROM c) \
             AND EXISTS (SELECT 1 FROM c WHERE {k} AND {code} = 0)",
            k = mine(&r)
        );
        self.push(&stmt);
        let stmt = format!(
            "{with} UPDATE {a} SET status = (SELECT c.st FROM c WHERE {k}), \
             finished_at = {n}, error = (SELECT c.err FROM c WHERE {k}) \
             WHERE job IN (SELECT job FROM c) AND manual = 0 \
             AND EXISTS (SELECT 1 FROM c WHERE {k} AND c.att = {a}.attempt AND {code} = 0)",
            k = mine(&a)
        );
        self.push(&stmt);
    }

    /// Takes over `takeovers` (items `0..`): [`anarchon_core::LeaseStore::take_over`],
    /// each as the single takeover judges it, in input order. [B-14, B-15, B-17]
    ///
    /// A takeover reads and writes only its run, that run's history rows and its job's
    /// fence, so takeovers of different jobs cannot see each other: they go in rounds (the
    /// first takeover of each job, then the second, ...), as for [`Script::claims`]. Stash
    /// per item: `c` the outcome (see [`Stash::take_over`]), `f` the fence and `s` the run's
    /// scheduled time of a won takeover.
    pub(crate) fn takeovers(&mut self, takeovers: &[Takeover]) {
        let mut rounds: Vec<Vec<(usize, &Takeover)>> = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, t) in takeovers.iter().enumerate() {
            let n = seen.entry(t.run.job.as_str()).or_insert(0);
            if rounds.len() <= *n {
                rounds.push(Vec::new());
            }
            rounds[*n].push((i, t));
            *n += 1;
        }
        for round in &rounds {
            self.takeover_round(round);
        }
    }

    /// One round of [`Script::takeovers`]: takeovers of distinct jobs.
    fn takeover_round(&mut self, round: &[(usize, &Takeover)]) {
        let (r, a, m, n) = (
            self.runs.clone(),
            self.attempts.clone(),
            self.meta.clone(),
            self.now.clone(),
        );
        let rows: Vec<String> = round
            .iter()
            .map(|(i, t)| {
                format!(
                    "({}, {}, {}, {}, {}, {}, {}, {}, {})",
                    text(&format!("{}:{i:05}:", self.base)),
                    text(t.run.job.as_str()),
                    int(t.run.slot),
                    i64::from(t.seen_attempt),
                    text(&t.instance_id),
                    int(ms(t.lease_ms)),
                    int(t.not_after),
                    i64::from(t.superseded),
                    i64::from(t.max_attempts),
                )
            })
            .collect();
        let with = format!(
            "WITH c(k, job, slot, seen, inst, lease, na, sup, maxa) AS (VALUES {})",
            rows.join(", ")
        );
        let code = format!("(SELECT value FROM {m} WHERE key = c.k || 'c')");
        let mine = |t: &str| format!("c.job = {t}.job AND c.slot = {t}.slot");
        let stmt = format!(
            "{with} INSERT INTO {m} (key, value) SELECT c.k || 'c', CASE \
             WHEN {n} > c.na THEN 1 \
             WHEN r.job IS NULL THEN 2 \
             WHEN r.status = 'succeeded' THEN 10 \
             WHEN r.status = 'failed' THEN 11 \
             WHEN r.status = 'interrupted' THEN 12 \
             WHEN r.status <> 'running' THEN 13 \
             WHEN r.attempt <> c.seen OR (r.owner IS NOT NULL AND r.expires_at > {n}) THEN 3 \
             WHEN c.sup = 1 THEN 4 \
             WHEN (CASE WHEN r.owner IS NULL THEN r.starts ELSE r.starts + 1 END) > c.maxa \
             THEN 5 ELSE 0 END \
             FROM c LEFT JOIN {r} AS r ON r.job = c.job AND r.slot = c.slot WHERE true"
        );
        self.push(&stmt);
        // The attempt seen ends (unless it already ended, as after a release): its history
        // row is ended, or written from the run's row where that row holds the attempt's
        // history (the SQLite store writes no row for a won claim or takeover, see
        // `anarchon_sqlite::sql::ops`); a released run has its row already.
        let stmt = format!(
            "{with} INSERT INTO {a} (job, slot, manual, attempt, instance_id, scheduled_at, \
             reason, status, fence, started_at, finished_at, error) \
             SELECT r.job, r.slot, 0, r.attempt, r.owner, r.scheduled_at, r.reason, \
             'interrupted', r.fence, r.started_at, {n}, 'lease expired' \
             FROM c JOIN {r} AS r ON r.job = c.job AND r.slot = c.slot \
             WHERE r.attempt = c.seen AND r.owner IS NOT NULL AND r.status = 'running' \
             AND {code} IN (0, 4, 5) \
             ON CONFLICT (job, slot, manual, attempt, instance_id) DO UPDATE SET \
             status = excluded.status, finished_at = excluded.finished_at, \
             error = excluded.error WHERE {a}.status = 'running'"
        );
        self.push(&stmt);
        for (status, error, c) in [("interrupted", "NULL", 4), ("failed", "'exhausted'", 5)] {
            let stmt = format!(
                "{with} UPDATE {r} SET status = '{status}', error = {error} \
                 WHERE job IN (SELECT job FROM c) \
                 AND EXISTS (SELECT 1 FROM c WHERE {k} AND {code} = {c})",
                k = mine(&r)
            );
            self.push(&stmt);
        }
        // A takeover's fence: PRUNE_EVERY above the last one (see `ops::PRUNE_EVERY`).
        let every = i64::try_from(PRUNE_EVERY).unwrap_or(16);
        let stmt = format!(
            "{with} INSERT INTO {m} (key, value) SELECT 'job:' || c.job, {every} FROM c \
             WHERE {code} = 0 ON CONFLICT (key) DO UPDATE SET value = value + {every}"
        );
        self.push(&stmt);
        let stmt = format!(
            "{with} UPDATE {r} SET status = 'running', \
             attempt = (SELECT c.seen + 1 FROM c WHERE {k}), \
             starts = CASE WHEN owner IS NULL THEN starts ELSE starts + 1 END, \
             owner = (SELECT c.inst FROM c WHERE {k}), reason = 'takeover', \
             fence = (SELECT value FROM {m} WHERE key = 'job:' || {r}.job), \
             started_at = {n}, \
             expires_at = (SELECT CASE WHEN c.lease > 9223372036854775807 - {n} \
               THEN 9223372036854775807 ELSE {n} + c.lease END FROM c WHERE {k}), \
             error = NULL \
             WHERE job IN (SELECT job FROM c) \
             AND EXISTS (SELECT 1 FROM c WHERE {k} AND {code} = 0)",
            k = mine(&r)
        );
        self.push(&stmt);
        let from = format!("FROM c JOIN {r} AS r ON r.job = c.job AND r.slot = c.slot");
        let select = format!(
            "SELECT c.job, c.slot, 0, c.seen + 1, c.inst, r.scheduled_at, 'takeover', \
             'running', r.fence, {n}, NULL, NULL {from} WHERE {code} = 0"
        );
        self.insert_attempt(&format!("{with} "), &select);
        for (name, column) in [("f", "fence"), ("s", "scheduled_at")] {
            let stmt = format!(
                "{with} INSERT INTO {m} (key, value) SELECT c.k || '{name}', r.{column} \
                 {from} WHERE {code} = 0"
            );
            self.push(&stmt);
        }
    }
}

fn rand_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u64(u64::from(std::process::id()));
    h.finish()
}

/// The stash rows of a batch, read back: the clock and each item's named values.
#[derive(Debug, Default)]
pub(crate) struct Stash {
    pub(crate) now: Option<EpochMs>,
    pub(crate) items: HashMap<(usize, String), i64>,
}

impl Stash {
    /// Files one `(key, value)` row of the batch with stash range `from`.
    pub(crate) fn put(&mut self, from: &str, key: &str, value: i64) -> Result<(), String> {
        let rest = key
            .strip_prefix(from)
            .ok_or_else(|| format!("stash key {key:?} outside {from:?}"))?;
        if rest == "now" {
            self.now = Some(value);
            return Ok(());
        }
        let (i, name) = rest
            .split_once(':')
            .ok_or_else(|| format!("stash key {key:?} has no item"))?;
        let i: usize = i
            .parse()
            .map_err(|_| format!("stash key {key:?} has no item number"))?;
        self.items.insert((i, name.to_owned()), value);
        Ok(())
    }

    fn get(&self, i: usize, name: &str) -> Result<i64, String> {
        self.items
            .get(&(i, name.to_owned()))
            .copied()
            .ok_or_else(|| format!("the batch left no stash row {name:?} for item {i}"))
    }

    fn now(&self) -> Result<EpochMs, String> {
        self.now
            .ok_or_else(|| "the batch left no clock reading".to_owned())
    }

    /// The outcome of claim `i`.
    pub(crate) fn claim(&self, i: usize, c: &LeaseClaim) -> Result<ClaimOutcome, String> {
        let now = self.now()?;
        Ok(match self.get(i, "c")? {
            0 => {
                let fence = self.get(i, "f")?;
                ClaimOutcome::Won(Lease {
                    run: c.run.clone(),
                    attempt: 1,
                    fence: u64::try_from(fence).map_err(|_| format!("fence {fence}"))?,
                    instance_id: c.instance_id.clone(),
                    reason: c.reason,
                    scheduled_at: c.scheduled_at,
                    started_at: now,
                    expires_at: now.saturating_add(ms(c.lease_ms)),
                })
            }
            1 => ClaimOutcome::Late { store_now: now },
            2 => ClaimOutcome::Taken,
            3 => ClaimOutcome::Overlap {
                running_slot: self.get(i, "v")?,
            },
            other => return Err(format!("unknown claim outcome {other}")),
        })
    }

    /// The outcome of result `i`.
    pub(crate) fn finish(&self, i: usize) -> Result<OwnerWrite, String> {
        Ok(match self.get(i, "c")? {
            0 => OwnerWrite::Done,
            1 => OwnerWrite::Lost,
            other => return Err(format!("unknown result outcome {other}")),
        })
    }

    /// The outcome of takeover `i`.
    pub(crate) fn take_over(&self, i: usize, t: &Takeover) -> Result<TakeoverOutcome, String> {
        Ok(match self.get(i, "c")? {
            0 => {
                let now = self.now()?;
                let fence = self.get(i, "f")?;
                TakeoverOutcome::Won(Lease {
                    run: t.run.clone(),
                    attempt: t.seen_attempt + 1,
                    fence: u64::try_from(fence).map_err(|_| format!("fence {fence}"))?,
                    instance_id: t.instance_id.clone(),
                    reason: Reason::Takeover,
                    scheduled_at: self.get(i, "s")?,
                    started_at: now,
                    expires_at: now.saturating_add(ms(t.lease_ms)),
                })
            }
            1 => TakeoverOutcome::Late,
            2 => TakeoverOutcome::Finished(RunStatus::Interrupted),
            3 => TakeoverOutcome::Live,
            4 => TakeoverOutcome::Interrupted,
            5 => TakeoverOutcome::Exhausted,
            10 => TakeoverOutcome::Finished(RunStatus::Succeeded),
            11 => TakeoverOutcome::Finished(RunStatus::Failed),
            12 => TakeoverOutcome::Finished(RunStatus::Interrupted),
            13 => return Err(format!("run {} holds an unknown status", t.run)),
            other => return Err(format!("unknown takeover outcome {other}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_cannot_end_early() {
        assert_eq!(text("a'b"), "'a''b'");
        assert_eq!(text("x\"; DROP TABLE y; --"), "'x\"; DROP TABLE y; --'");
        assert_eq!(text("a\0b"), "CAST(X'610062' AS TEXT)");
        assert_eq!(text("l1\nl2"), "CAST(X'6C310A6C32' AS TEXT)");
        assert_eq!(text("\\'"), "'\\'''");
        assert_eq!(int(-5), "-5");
        assert_eq!(int(i64::MIN), "(-9223372036854775807 - 1)");
        assert_eq!(opt_text(None), "NULL");
    }

    /// The SQL of a full batch: job names and instance ids of a usual length, and at their
    /// longest (128 and 200 characters), with 1,000-character error texts.
    #[test]
    fn a_full_batch_is_a_few_hundred_kib() {
        for (name, instance, one_job, bound) in [
            (20, 36, false, 512 * 1024),
            (20, 36, true, 512 * 1024),
            (128, 200, false, 1024 * 1024),
        ] {
            full_batch(name, instance, one_job, bound);
        }
    }

    /// [B-37] A file whose runs the SQLite store wrote (schema version 4: a won claim's run row is
    /// the history of its attempt, with no history row), then written by this store's
    /// batches, run here on SQLite itself (the same SQL a libSQL server runs): a takeover
    /// writes the history row of the attempt whose lease ended before the row moves on, and
    /// the end-of-batch prune keeps the runs whose row is their history.
    #[tokio::test(flavor = "multi_thread")]
    async fn b37_runs_whose_row_is_their_history_keep_it_through_these_batches() {
        use anarchon_core::store::{
            ClaimOutcome, HistoryStore, JobName, LeaseStore, RunKey, Store,
        };
        use anarchon_core::testkit::lease::claim;
        let dir = tempfile::tempdir().unwrap();
        let store = anarchon_sqlite::SqliteStore::connect(dir.path().join("moved.db"))
            .await
            .unwrap();
        let t = Tables::new("anarchon_runs").unwrap();
        let job = JobName::new("moved").unwrap();
        let keep = Retention {
            size: 10,
            ttl_ms: None,
        };
        let now = store.now().await.unwrap();
        for slot in [1_000, 2_000] {
            let ClaimOutcome::Won(l) = store
                .claim(&claim(&job, slot, "sqlite", now))
                .await
                .unwrap()
            else {
                panic!("claim of {slot}")
            };
            let done = Finish {
                status: RunStatus::Succeeded,
                error: None,
                retention: keep,
            };
            assert_eq!(store.finish(&l, &done).await.unwrap(), OwnerWrite::Done);
        }
        let mut c = claim(&job, 3_000, "sqlite", now);
        c.lease_ms = 1;
        let ClaimOutcome::Won(crashed) = store.claim(&c).await.unwrap() else {
            panic!("claim of 3000")
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let run = |sql: String| {
            store
                .open_connection()
                .unwrap()
                .execute_batch(&sql)
                .unwrap()
        };
        let mut s = Script::new(&t);
        s.takeovers(&[Takeover {
            run: crashed.run.clone(),
            seen_attempt: 1,
            instance_id: "libsql".into(),
            lease_ms: 60_000,
            max_attempts: 3,
            superseded: false,
            not_after: i64::MAX / 2,
        }]);
        run(s.finish());
        // A claim and its result by this store, pruning the job by count at the result
        // (every result prunes below 16 runs).
        let mut c = claim(&job, 4_000, "libsql", now);
        c.overlap = Overlap::Allow;
        let mut s = Script::new(&t);
        s.claims(&[c]);
        run(s.finish());
        let fence: i64 = store
            .open_connection()
            .unwrap()
            .query_row(
                "SELECT fence FROM anarchon_runs WHERE job = 'moved' AND slot = 4000",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let lease = Lease {
            run: RunKey::new(job.clone(), 4_000),
            attempt: 1,
            fence: u64::try_from(fence).unwrap(),
            instance_id: "libsql".into(),
            reason: Reason::Scheduled,
            scheduled_at: 4_000,
            started_at: now,
            expires_at: i64::MAX / 2,
        };
        let mut s = Script::new(&t);
        let done = Finish {
            status: RunStatus::Succeeded,
            error: None,
            retention: keep,
        };
        s.finishes(&[(lease, done)]);
        run(s.finish());
        let h = store.history(&job, 10).await.unwrap();
        let seen: Vec<_> = h
            .iter()
            .map(|r| (r.slot, r.attempt, r.instance_id.as_str(), r.status))
            .collect();
        assert_eq!(
            seen,
            [
                (4_000, 1, "libsql", RunStatus::Succeeded),
                (3_000, 2, "libsql", RunStatus::Running),
                (3_000, 1, "sqlite", RunStatus::Interrupted),
                (2_000, 1, "sqlite", RunStatus::Succeeded),
                (1_000, 1, "sqlite", RunStatus::Succeeded),
            ],
            "{h:?}"
        );
        assert_eq!(h[2].error.as_deref(), Some("lease expired"));
    }

    /// 64 items of 64 jobs (as the driver batches slots due together), or of one job.
    fn full_batch(name: usize, instance: usize, one_job: bool, bound: usize) {
        use anarchon_core::store::{JobName, RunKey};
        let t = Tables::new("anarchon_runs").unwrap();
        let instance = "i".repeat(instance);
        let retention = Retention {
            size: 10,
            ttl_ms: Some(60_000),
        };
        let mut claims = Script::new(&t);
        let mut all_claims = Vec::new();
        let mut all_results = Vec::new();
        let mut all_takeovers = Vec::new();
        let mut takeovers = Script::new(&t);
        let mut results = Script::new(&t);
        for i in 0..crate::BATCH_CLAIMS {
            let name = if one_job {
                "j".repeat(name)
            } else {
                format!("{i:02}{}", "j".repeat(name - 2))
            };
            let job = JobName::new(name).unwrap();
            let run = RunKey::new(job, 1_700_000_000_000 + i as i64);
            all_claims.push(LeaseClaim {
                run: run.clone(),
                scheduled_at: run.slot,
                instance_id: instance.clone(),
                lease_ms: 30_000,
                not_after: run.slot + 1_000,
                overlap: Overlap::Skip,
                reason: Reason::Scheduled,
                retention,
            });
            all_takeovers.push(Takeover {
                run: run.clone(),
                seen_attempt: 1,
                instance_id: instance.clone(),
                lease_ms: 30_000,
                max_attempts: 3,
                superseded: false,
                not_after: run.slot + 1_000,
            });
            let lease = Lease {
                run: run.clone(),
                attempt: 1,
                fence: 1,
                instance_id: instance.clone(),
                reason: Reason::Scheduled,
                scheduled_at: run.slot,
                started_at: run.slot,
                expires_at: run.slot,
            };
            // One result in eight failed, with a 1,000-character error.
            let finish = Finish {
                status: if i % 8 == 0 {
                    RunStatus::Failed
                } else {
                    RunStatus::Succeeded
                },
                error: (i % 8 == 0).then(|| "e".repeat(1_000)),
                retention,
            };
            all_results.push((lease, finish));
        }
        results.finishes(&all_results);
        takeovers.takeovers(&all_takeovers);
        claims.claims(&all_claims);
        for (what, s) in [
            ("claims", claims.finish()),
            ("takeovers", takeovers.finish()),
            ("results", results.finish()),
        ] {
            eprintln!(
                "a batch of {} {what} of {} (job names of {name}, instance ids of {} \
                 characters): {} bytes of SQL",
                crate::BATCH_CLAIMS,
                if one_job { "one job" } else { "as many jobs" },
                instance.len(),
                s.len()
            );
            assert!(s.len() < bound, "{what}: {}", s.len());
        }
    }
}
