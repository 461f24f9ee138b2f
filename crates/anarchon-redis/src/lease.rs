//! The `lease` strategy: [`RedisStore`], a [`LeaseStore`] on Redis or Valkey.

use std::sync::Arc;

use anarchon_core::history::{
    MAX_PRUNE_PERIOD, finish_prune_period, prunes_at, pruning_fence_residue,
};
use anarchon_core::store::{
    BatchLimits, ClaimOutcome, EpochMs, Error, Finish, HistoryStore, JobName, Lease, LeaseClaim,
    LeaseStore, Overlap, OwnerWrite, Prepare, Renewal, Result, Retention, RunKey, RunRecord,
    RunStatus, RunView, Store, Takeover, TakeoverOutcome, one_by_one,
};
use async_trait::async_trait;
use fred::prelude::{Client, Value};
use tokio::sync::broadcast;

use crate::conn::{Conn, STORE, int, wall_ms};
use crate::error::RedisError;
use crate::options::RedisOptions;
use crate::pubsub::{Releases, message};
use crate::scripts;

/// The Redis/Valkey lease store (strategy `lease`, the default). [B-11..B-21, B-41]
///
/// Each run is a hash `<prefix>{<job>}:run:<slot>` that also holds the history row of
/// each of its attempts; per job a few indexes (`runs`, `live`, `hist`, `fin`) and the
/// fence counter `fence`. All keys of a job share the hash tag `{<job>}`, so every
/// script touches one hash slot and the store works on a Redis Cluster.
///
/// Every operation is one Lua script (`EVALSHA`), which reads the server clock with
/// `TIME` and refuses a write that arrives after its deadline, so a command that fred
/// replays after a reconnect, or that the client already gave up on, has no effect. [B-10]
///
/// ```no_run
/// # async fn demo() -> anarchon_core::Result<()> {
/// use anarchon_core::store::Store;
/// let store = anarchon_redis::RedisStore::connect("redis://127.0.0.1:6379").await?;
/// println!("server clock: {}", store.now().await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Arc<Conn>,
    releases: Releases,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.inner.conn.target)
            .field("prefix", &self.inner.conn.prefix())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to `url` (`redis://`, `rediss://`) with default options and checks the
    /// server version, so a wrong URL, password or server fails here.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] for a URL that cannot be read, [`Error::Unavailable`] when
    /// the server cannot be reached or refuses the login, [`Error::ServerTooOld`].
    ///
    /// ```no_run
    /// # async fn demo() -> anarchon_core::Result<()> {
    /// use anarchon_core::Scheduler;
    /// use anarchon_redis::RedisStore;
    ///
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// let scheduler = Scheduler::leased(store).build()?;
    /// # let _ = scheduler; Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// [`RedisStore::connect`] with these options.
    ///
    /// # Errors
    ///
    /// As [`RedisStore::connect`], and [`Error::InvalidOption`] for a bad prefix.
    ///
    /// ```no_run
    /// # async fn demo() -> anarchon_core::Result<()> {
    /// use std::time::Duration;
    /// use anarchon_redis::{RedisOptions, RedisStore};
    ///
    /// let options = RedisOptions::default()
    ///     .prefix("myapp:")
    ///     .command_timeout(Duration::from_secs(2));
    /// let store = RedisStore::connect_with("redis://127.0.0.1:6379", options).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<Self> {
        let store = Self::unconnected_with(url, options)?;
        store.inner.conn.ensure().await?;
        Ok(store)
    }

    /// A store on the user's own `fred` client (connected or not: it is connected here if
    /// needed) with these options, checking the server version. [`Store::close`] leaves
    /// the client open; the store opens one extra connection of its own for release
    /// notifications.
    ///
    /// # Errors
    ///
    /// As [`RedisStore::connect_with`].
    ///
    /// ```no_run
    /// # async fn demo() -> anarchon_core::Result<()> {
    /// use anarchon_redis::fred::prelude::*;
    /// use anarchon_redis::{RedisOptions, RedisStore};
    ///
    /// let config = Config::from_url("redis://127.0.0.1:6379").expect("url");
    /// let client = Builder::from_config(config).build().expect("client");
    /// client.init().await.expect("connect");
    /// let store = RedisStore::from_client(client.clone(), RedisOptions::default()).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn from_client(client: Client, options: RedisOptions) -> Result<Self> {
        let prefix = options.prefix.clone();
        let conn = Conn::from_client(client, options, scripts::lease_scripts().to_vec())?;
        let store = Self::with_conn(conn, &prefix);
        store.inner.conn.ensure().await?;
        Ok(store)
    }

    /// A store on its own connection to `url` that connects at its first call: only the
    /// URL and the options are checked here (test-only, feature `testkit`: use
    /// [`RedisStore::connect_with`]).
    ///
    /// # Errors
    ///
    /// [`RedisError`] for a URL or a prefix that cannot be used.
    #[cfg(feature = "testkit")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
    pub fn unconnected(url: &str, options: RedisOptions) -> std::result::Result<Self, RedisError> {
        Self::unconnected_with(url, options)
    }

    fn unconnected_with(url: &str, options: RedisOptions) -> std::result::Result<Self, RedisError> {
        let prefix = options.prefix.clone();
        let conn = Conn::from_url(url, options, scripts::lease_scripts().to_vec())?;
        Ok(Self::with_conn(conn, &prefix))
    }

    fn with_conn(conn: Conn, prefix: &str) -> Self {
        RedisStore {
            inner: Arc::new(Inner {
                conn: Arc::new(conn),
                releases: Releases::new(prefix),
            }),
        }
    }

    /// The server found, e.g. `Redis 7.0.15` or `Valkey 8.0.1` (connects if needed).
    pub async fn server(&self) -> Result<String> {
        Ok(self.inner.conn.ensure().await?.to_string())
    }

    /// The connection the store uses (to send `PING` beside it in a benchmark, say).
    pub fn client(&self) -> &Client {
        &self.inner.conn.client
    }

    fn conn(&self) -> &Conn {
        &self.inner.conn
    }

    fn deadline_passed(&self, operation: &'static str) -> Error {
        Error::Timeout {
            store: STORE,
            operation,
            after: self.conn().opts.command_timeout,
        }
    }

    fn run_keys(&self, run: &RunKey) -> (String, String) {
        let base = self.conn().base(&run.job);
        let rk = format!("{base}run:{}", run.slot);
        (base, rk)
    }
}

/// The most claims one pipeline carries (`BatchLimits::claims`).
const BATCH_CLAIMS: usize = 256;

/// The most results one pipeline carries (`BatchLimits::finishes`).
const BATCH_FINISHES: usize = 256;

/// The most runs one `runs` script call reads. A backup may watch tens of thousands of runs
/// (every run of its jobs another instance won in the last heartbeat): read by one script,
/// they blocked the server for seconds (576,011 keys took 2.0 s on a loaded 2-core machine,
/// 3.5 µs a key) and every other client's commands with it. 512 keys keep a call near 2 ms.
const RUNS_PER_CALL: usize = 512;

/// The most jobs one `unfinished_runs` script call reads: asked for every job of a large
/// service (10,000 or 100,000) in one call, the script would hold the server for tens of
/// milliseconds; 512 jobs (a `ZRANGE` each, plus the few runs they have unfinished) keep a
/// call near a millisecond.
const JOBS_PER_CALL: usize = 512;

/// How often a claim prunes its job (`claim.lua`, which writes it as 16; a test in
/// `scripts.rs` holds the two together): on one won claim in this many, at the job's phase
/// (`anarchon_core::history::prunes_at`).
const CLAIM_PRUNE_EVERY: u64 = MAX_PRUNE_PERIOD;

impl RedisStore {
    /// The keys and arguments of the claim script for `c`.
    fn claim_call(&self, c: &LeaseClaim) -> Result<(Vec<String>, Vec<String>)> {
        if c.instance_id.is_empty() {
            return Err(Error::invalid_option("instance_id", "must not be empty"));
        }
        let conn = self.conn();
        let (base, rk) = self.run_keys(&c.run);
        // Only the run hash is declared: it routes the call in a cluster, and the script
        // builds the job's other keys from the same hash tag.
        let keys = vec![rk];
        let args = vec![
            base,
            conn.deadline(),
            c.run.slot.to_string(),
            c.not_after.to_string(),
            c.lease_ms.to_string(),
            c.instance_id.clone(),
            if c.overlap == Overlap::Skip { "1" } else { "0" }.into(),
            c.reason.as_str().into(),
            c.scheduled_at.to_string(),
            c.retention.size.max(1).to_string(),
            c.retention.ttl_ms.unwrap_or(0).to_string(),
            pruning_fence_residue(c.run.job.as_str(), CLAIM_PRUNE_EVERY).to_string(),
        ];
        Ok((keys, args))
    }

    /// The keys and arguments of the finish script for one result.
    fn finish_call(&self, lease: &Lease, finish: &Finish) -> (Vec<String>, Vec<String>) {
        let (base, rk) = self.run_keys(&lease.run);
        let keys = vec![rk];
        let args = vec![
            base,
            self.conn().deadline(),
            lease.run.slot.to_string(),
            lease.attempt.to_string(),
            lease.instance_id.clone(),
            finish.status.as_str().into(),
            finish
                .error
                .as_deref()
                .map(|e| crate::text::cap(e).into_owned())
                .unwrap_or_default(),
            if finish.error.is_some() { "1" } else { "0" }.into(),
            // By count on one finish in `finish_prune_period(size)` (by the run's fence, at
            // the job's phase), the rule of every store: a job holds at most about `size + 15`
            // finished runs; the claim's pruning on one fence in 16 bounds the runs that never
            // finish the same way. 0: by age only.
            if prunes_at(
                lease.run.job.as_str(),
                lease.fence,
                finish_prune_period(finish.retention.size.max(1)),
            ) {
                finish.retention.size.max(1).to_string()
            } else {
                "0".into()
            },
            finish.retention.ttl_ms.unwrap_or(0).to_string(),
        ];
        (keys, args)
    }

    /// Reads the claim script's reply.
    fn claim_reply(&self, c: &LeaseClaim, v: &[Value]) -> Result<ClaimOutcome> {
        match code(v) {
            1 => {
                let (Some(now), Some(fence)) = (int(v.get(1)), int(v.get(2))) else {
                    return Err(bad_reply("claim", v));
                };
                let expires_at = now + c.lease_ms as EpochMs;
                self.conn().observe_clock(now);
                Ok(ClaimOutcome::Won(Lease {
                    run: c.run.clone(),
                    attempt: 1,
                    fence: fence as u64,
                    instance_id: c.instance_id.clone(),
                    reason: c.reason,
                    scheduled_at: c.scheduled_at,
                    started_at: now,
                    expires_at,
                }))
            }
            0 => Ok(ClaimOutcome::Taken),
            -1 => Ok(ClaimOutcome::Late {
                store_now: int(v.get(1)).unwrap_or(0),
            }),
            2 => Ok(ClaimOutcome::Overlap {
                running_slot: int(v.get(1)).unwrap_or(0),
            }),
            -2 => Err(self.deadline_passed("claim")),
            _ => Err(bad_reply("claim", v)),
        }
    }

    /// How many requests this store has sent and waited for so far (a command, a script
    /// call, a pipelined claim or result batch): its round trips, counted for tests and benchmarks.
    #[doc(hidden)]
    pub fn round_trips(&self) -> u64 {
        self.conn()
            .round_trips
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

fn code(v: &[Value]) -> i64 {
    int(v.first()).unwrap_or(i64::MIN)
}

fn bad_reply(operation: &'static str, v: &[Value]) -> Error {
    Error::store(STORE, operation, format!("unexpected script reply {v:?}"))
}

#[async_trait]
impl Store for RedisStore {
    fn kind(&self) -> &'static str {
        STORE
    }

    async fn prepare(&self, prepare: &Prepare) -> Result<()> {
        self.conn().ensure().await?;
        self.conn().check_meta().await?;
        self.conn().note_jobs(&prepare.jobs).await?;
        if !prepare.jobs.is_empty() {
            // Backups hear of releases from now on.
            self.inner.releases.start(&self.inner.conn).await?;
        }
        Ok(())
    }

    async fn now(&self) -> Result<EpochMs> {
        self.conn().server_now().await
    }

    async fn close(&self) -> Result<()> {
        self.inner.releases.stop().await;
        self.conn().close().await;
        Ok(())
    }
}

#[async_trait]
impl HistoryStore for RedisStore {
    async fn history(&self, job: &JobName, count: usize) -> Result<Vec<RunRecord>> {
        self.conn().history(job, count).await
    }

    async fn record_manual(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        self.conn()
            .note_jobs(std::slice::from_ref(&record.job))
            .await?;
        let id = format!("m:{}|{}", record.slot, record.instance_id);
        let member = format!("m:{}", record.slot);
        self.conn().put_row(record, id, member, retention).await
    }

    async fn known_jobs(&self) -> Result<Vec<JobName>> {
        self.conn().known_jobs().await
    }
}

#[async_trait]
impl LeaseStore for RedisStore {
    /// One `claim_many` script call per batch of up to 256 claims on a single node (per
    /// hash slot on a cluster, those calls in one pipeline): one round trip per batch.
    /// The script runs the single claim's code once per claim in the order given, so each
    /// claim judges lateness on the server clock and is fenced exactly as a single claim.
    async fn claim_many(&self, claims: &[LeaseClaim]) -> Result<Vec<ClaimOutcome>> {
        match claims {
            [] => return Ok(Vec::new()),
            // One claim (one job falling due alone, the common case at a few jobs) takes the
            // single claim's path: no batch to build, the start lag of one round trip.
            [one] => return Ok(vec![self.claim_one(one).await?]),
            _ => {}
        }
        let conn = self.conn();
        let calls = claims
            .iter()
            .map(|c| self.claim_call(c))
            .collect::<Result<Vec<_>>>()?;
        let mut jobs: Vec<JobName> = claims.iter().map(|c| c.run.job.clone()).collect();
        jobs.sort();
        jobs.dedup();
        conn.note_jobs(&jobs).await?;
        let mut out = Vec::with_capacity(claims.len());
        let mut calls = calls.into_iter();
        for chunk in claims.chunks(BATCH_CLAIMS) {
            let batch: Vec<_> = calls.by_ref().take(chunk.len()).collect();
            let answers = conn
                .eval_batch("claim", &scripts::CLAIM_MANY, batch)
                .await?;
            for (c, reply) in chunk.iter().zip(answers) {
                out.push(self.claim_reply(c, &reply.into_array())?);
            }
        }
        Ok(out)
    }

    /// Claims and results go out 256 per pipeline (`BATCH_CLAIMS`, `BATCH_FINISHES`);
    /// takeovers one script call each (no batch script).
    fn limits(&self) -> BatchLimits {
        BatchLimits {
            claims: BATCH_CLAIMS,
            finishes: BATCH_FINISHES,
            takeovers: 1,
            gather_batches: false,
            gather_results: false,
        }
    }

    async fn heartbeat(&self, leases: &[Lease], lease_ms: u64) -> Result<Vec<Renewal>> {
        let conn = self.conn();
        let keys: Vec<String> = leases.iter().map(|l| self.run_keys(&l.run).1).collect();
        // One script call for the whole batch on a single node; in a cluster one call per
        // hash slot (leases of different jobs live in different slots), sent concurrently.
        let groups = conn.group_by_slot(&keys);
        let calls = groups.iter().map(|group| {
            let gkeys: Vec<String> = group.iter().map(|&i| keys[i].clone()).collect();
            let mut args = vec![String::new(), conn.deadline(), lease_ms.to_string()];
            for &i in group {
                args.push(leases[i].attempt.to_string());
                args.push(leases[i].instance_id.clone());
            }
            conn.eval("heartbeat", &scripts::HEARTBEAT, gkeys, args)
        });
        let replies = futures::future::try_join_all(calls).await?;
        let mut out = vec![Renewal::Lost; leases.len()];
        for (group, reply) in groups.iter().zip(replies) {
            let v = reply.into_array();
            if code(&v) == -2 {
                return Err(self.deadline_passed("heartbeat"));
            }
            if v.len() != group.len() {
                return Err(bad_reply("heartbeat", &v));
            }
            for (&i, r) in group.iter().zip(&v) {
                out[i] = match int(Some(r)) {
                    Some(exp) if exp > 0 => Renewal::Renewed { expires_at: exp },
                    _ => Renewal::Lost,
                };
            }
        }
        Ok(out)
    }

    /// One `finish_many` script call per batch of up to 256 results on a single node (per
    /// hash slot on a cluster, those calls in one pipeline): one round trip per batch. The
    /// script runs the single finish's code once per result in the order given, so each is
    /// fenced and prunes exactly as a single finish.
    async fn finish_many(&self, writes: &[(Lease, Finish)]) -> Result<Vec<OwnerWrite>> {
        match writes {
            [] => return Ok(Vec::new()),
            [(lease, finish)] => return Ok(vec![self.finish_one(lease, finish).await?]),
            _ => {}
        }
        let conn = self.conn();
        let mut out = Vec::with_capacity(writes.len());
        for chunk in writes.chunks(BATCH_FINISHES) {
            let calls: Vec<_> = chunk
                .iter()
                .map(|(lease, finish)| self.finish_call(lease, finish))
                .collect();
            let answers = conn
                .eval_batch("finish", &scripts::FINISH_MANY, calls)
                .await?;
            for reply in answers {
                out.push(owner_write(self, "finish", &reply.into_array())?);
            }
        }
        Ok(out)
    }

    async fn release(&self, lease: &Lease) -> Result<OwnerWrite> {
        let conn = self.conn();
        let (base, rk) = self.run_keys(&lease.run);
        let slot = lease.run.slot;
        let keys = vec![rk];
        let args = vec![
            base,
            conn.deadline(),
            slot.to_string(),
            lease.attempt.to_string(),
            lease.instance_id.clone(),
            self.inner.releases.channel.clone(),
            message(&lease.run),
        ];
        let v = conn
            .eval("release", &scripts::RELEASE, keys, args)
            .await?
            .into_array();
        owner_write(self, "release", &v)
    }

    /// One `take_over` script call after the other (there is no batch script).
    async fn take_over_many(&self, takeovers: &[Takeover]) -> Result<Vec<TakeoverOutcome>> {
        one_by_one(takeovers, |t| self.take_over_one(t)).await
    }

    /// The `runs` script over at most `RUNS_PER_CALL` runs per call, every call of the
    /// read in one pipeline: one round trip (per node on a cluster) however many runs a
    /// backup watches, and the server never blocked by one long script.
    async fn runs(&self, runs: &[RunKey]) -> Result<Vec<RunView>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let conn = self.conn();
        let keys: Vec<String> = runs.iter().map(|r| self.run_keys(r).1).collect();
        let groups: Vec<Vec<usize>> = conn
            .group_by_slot(&keys)
            .into_iter()
            .flat_map(|group| {
                group
                    .chunks(RUNS_PER_CALL)
                    .map(<[usize]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect();
        let calls: Vec<(Vec<String>, Vec<String>)> = groups
            .iter()
            .map(|group| {
                let gkeys = group.iter().map(|&i| keys[i].clone()).collect();
                (gkeys, vec![String::new(), "0".into()])
            })
            .collect();
        drop(keys);
        let sent_ms = wall_ms();
        let replies = conn
            .eval_pipeline_in_groups("runs", &scripts::RUNS, calls)
            .await?;
        if replies.len() != groups.len() {
            return Err(bad_reply("runs", &replies));
        }
        let server_ms = replies.first().and_then(|r| match r {
            Value::Array(v) => int(v.first()),
            _ => None,
        });
        tracing::debug!(
            target: "anarchon_redis",
            operation = "runs",
            keys = runs.len(),
            calls = groups.len(),
            server_first_after_ms = server_ms.map_or(-1, |t| t - sent_ms),
            answered_after_ms = wall_ms() - sent_ms,
            "batch answered"
        );
        let mut found: Vec<Option<RunView>> = vec![None; runs.len()];
        for (group, reply) in groups.iter().zip(replies) {
            let mut v = reply.into_array().into_iter();
            let now = int(v.next().as_ref())
                .ok_or_else(|| Error::store(STORE, "runs", "no server time"))?;
            for (&i, r) in group.iter().zip(v) {
                let fields = r.into_array();
                if fields.len() == 4 {
                    found[i] = Some(view(
                        &runs[i], now, &fields[0], &fields[1], &fields[2], &fields[3],
                    )?);
                }
            }
        }
        Ok(found.into_iter().flatten().collect())
    }

    /// The `unfinished_runs` script over at most 512 jobs per call (each job's
    /// `live` set and the run hashes it names: O(unfinished runs) plus one read a job),
    /// four calls to a pipeline (`Conn::eval_pipeline_in_groups`): 49 round trips for
    /// 100,000 jobs, no call holds the server for more than about a millisecond, and no
    /// group holds this store's other commands for more than a few.
    async fn unfinished_runs(&self, jobs: &[JobName]) -> Result<Vec<RunView>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let conn = self.conn();
        let bases: Vec<String> = jobs.iter().map(|j| conn.base(j)).collect();
        let keys: Vec<String> = bases.iter().map(|b| format!("{b}live")).collect();
        let groups: Vec<Vec<usize>> = conn
            .group_by_slot(&keys)
            .into_iter()
            .flat_map(|group| {
                group
                    .chunks(JOBS_PER_CALL)
                    .map(<[usize]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect();
        let calls: Vec<(Vec<String>, Vec<String>)> = groups
            .iter()
            .map(|group| {
                let gkeys: Vec<String> = group.iter().map(|&i| keys[i].clone()).collect();
                let mut args = vec![String::new(), "0".into()];
                args.extend(group.iter().map(|&i| bases[i].clone()));
                (gkeys, args)
            })
            .collect();
        drop(keys);
        let replies = conn
            .eval_pipeline_in_groups("unfinished_runs", &scripts::UNFINISHED, calls)
            .await?;
        if replies.len() != groups.len() {
            return Err(bad_reply("unfinished_runs", &replies));
        }
        let mut out = Vec::new();
        for (group, reply) in groups.iter().zip(replies) {
            let mut v = reply.into_array().into_iter();
            let now = int(v.next().as_ref())
                .ok_or_else(|| Error::store(STORE, "unfinished_runs", "no server time"))?;
            for (&i, list) in group.iter().zip(v) {
                for run in list.into_array() {
                    let f = run.into_array();
                    if f.len() != 5 {
                        continue;
                    }
                    let Some(slot) = int(Some(&f[0])) else {
                        continue;
                    };
                    let key = RunKey::new(jobs[i].clone(), slot);
                    out.push(view(&key, now, &f[1], &f[2], &f[3], &f[4])?);
                }
            }
        }
        Ok(out)
    }

    fn subscribe_releases(&self) -> Option<broadcast::Receiver<RunKey>> {
        let rx = self.inner.releases.tx.subscribe();
        // Normally started by `prepare`; started here for a store used without it.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let inner = self.inner.clone();
            handle.spawn(async move {
                if let Err(e) = inner.releases.start(&inner.conn).await {
                    tracing::warn!(target: "anarchon_redis", "release notifications unavailable, backups poll: {e}");
                }
            });
        }
        Some(rx)
    }
}

impl RedisStore {
    /// One claim: the `claim` script, one round trip.
    async fn claim_one(&self, c: &LeaseClaim) -> Result<ClaimOutcome> {
        let conn = self.conn();
        let (keys, args) = self.claim_call(c)?;
        conn.note_jobs(std::slice::from_ref(&c.run.job)).await?;
        let v = conn
            .eval("claim", &scripts::CLAIM, keys, args)
            .await?
            .into_array();
        self.claim_reply(c, &v)
    }

    /// One result: the `finish` script, one round trip.
    async fn finish_one(&self, lease: &Lease, finish: &Finish) -> Result<OwnerWrite> {
        let (keys, args) = self.finish_call(lease, finish);
        let v = self
            .conn()
            .eval("finish", &scripts::FINISH, keys, args)
            .await?
            .into_array();
        owner_write(self, "finish", &v)
    }

    /// One takeover: the `take_over` script, one round trip.
    async fn take_over_one(&self, t: &Takeover) -> Result<TakeoverOutcome> {
        if t.instance_id.is_empty() {
            return Err(Error::invalid_option("instance_id", "must not be empty"));
        }
        let conn = self.conn();
        let (base, rk) = self.run_keys(&t.run);
        let slot = t.run.slot;
        let keys = vec![rk];
        // The earlier of this connection's own deadline and the scheduler's.
        let deadline = match conn.deadline().parse::<EpochMs>() {
            Ok(d) if d > 0 => d.min(t.not_after),
            _ => t.not_after,
        };
        let args = vec![
            base,
            deadline.to_string(),
            slot.to_string(),
            t.seen_attempt.to_string(),
            t.instance_id.clone(),
            t.lease_ms.to_string(),
            t.max_attempts.to_string(),
            if t.superseded { "1" } else { "0" }.into(),
        ];
        let v = conn
            .eval("take_over", &scripts::TAKEOVER, keys, args)
            .await?
            .into_array();
        match code(&v) {
            1 => {
                let (Some(now), Some(fence), Some(expires_at), Some(scheduled_at)) =
                    (int(v.get(1)), int(v.get(2)), int(v.get(3)), int(v.get(4)))
                else {
                    return Err(bad_reply("take_over", &v));
                };
                conn.observe_clock(now);
                Ok(TakeoverOutcome::Won(Lease {
                    run: t.run.clone(),
                    attempt: t.seen_attempt + 1,
                    fence: fence as u64,
                    instance_id: t.instance_id.clone(),
                    reason: anarchon_core::Reason::Takeover,
                    scheduled_at,
                    started_at: now,
                    expires_at,
                }))
            }
            0 => Ok(TakeoverOutcome::Live),
            3 => {
                let status = v
                    .get(1)
                    .and_then(Value::as_string)
                    .and_then(|s| RunStatus::parse(&s))
                    .unwrap_or(RunStatus::Interrupted);
                Ok(TakeoverOutcome::Finished(status))
            }
            4 => Ok(TakeoverOutcome::Interrupted),
            5 => Ok(TakeoverOutcome::Exhausted),
            // Past the deadline nothing was written.
            -2 => Ok(TakeoverOutcome::Late),
            _ => Err(bad_reply("take_over", &v)),
        }
    }
}

fn view(
    run: &RunKey,
    now: EpochMs,
    st: &Value,
    att: &Value,
    own: &Value,
    exp: &Value,
) -> Result<RunView> {
    let status = st
        .as_string()
        .and_then(|s| RunStatus::parse(&s))
        .ok_or_else(|| Error::Corrupt {
            store: STORE,
            location: format!("run {run}"),
            reason: format!("unknown status {st:?}; remove the key or choose another prefix"),
        })?;
    let attempt = u32::try_from(int(Some(att)).unwrap_or(0)).map_err(|_| Error::Corrupt {
        store: STORE,
        location: format!("run {run}"),
        reason: format!("attempt {att:?} is out of range; remove the key or choose another prefix"),
    })?;
    let owner = own.as_string().filter(|o| !o.is_empty());
    Ok(RunView {
        run: run.clone(),
        status,
        attempt,
        owner,
        expires_at: int(Some(exp)).unwrap_or(0),
        store_now: now,
    })
}

/// The answer of an owner's conditional write (finish, release): 1 done, 0 lost (the fence
/// no longer matches), -2 arrived after its deadline (nothing written).
fn owner_write(store: &RedisStore, operation: &'static str, v: &[Value]) -> Result<OwnerWrite> {
    match code(v) {
        1 => Ok(OwnerWrite::Done),
        0 => Ok(OwnerWrite::Lost),
        -2 => Err(store.deadline_passed(operation)),
        _ => Err(bad_reply(operation, v)),
    }
}
