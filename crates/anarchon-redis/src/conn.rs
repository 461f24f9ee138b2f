//! The connection shared by the lease and claim-only stores: building the client, the
//! version check, bounded commands, script calls, error mapping and the history keys.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anarchon_core::store::{
    EpochMs, Error, JobName, Reason, Result, Retention, RunRecord, RunStatus, redact_url,
};
use fred::interfaces::*;
use fred::prelude::{Builder, Client, Config, ErrorKind, FromValue, ReconnectPolicy, Value};
use fred::types::config::Options;
use fred::types::scripts::Script;
use fred::types::{ClusterHash, CustomCommand, InfoKind};
use fred::util::redis_keyslot;
use tokio::task::JoinHandle;

use crate::error::RedisError;
use crate::options::RedisOptions;

pub(crate) const STORE: &str = "redis";

/// The most script calls [`Conn::eval_pipeline_in_groups`] writes in one pipeline. The read
/// scripts keep a call near a millisecond of server time (512 jobs or runs), so a group
/// holds this connection's other commands for a few milliseconds.
const CALLS_PER_PIPELINE: usize = 4;
/// Which server answered, from `INFO server`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerInfo {
    /// `Redis` or `Valkey`.
    pub(crate) name: &'static str,
    /// Major, minor, patch.
    pub(crate) version: (u32, u32, u32),
}

impl ServerInfo {
    /// Parses the `# Server` section of `INFO`. Valkey reports a Redis-compatible
    /// `redis_version` too, so it is recognised by `valkey_version` / `server_name`.
    pub(crate) fn parse(info: &str) -> Option<ServerInfo> {
        let mut fields = HashMap::new();
        for line in info.lines() {
            if let Some((k, v)) = line.trim().split_once(':') {
                fields.insert(k, v);
            }
        }
        let valkey = fields.contains_key("valkey_version")
            || fields
                .get("server_name")
                .is_some_and(|n| n.eq_ignore_ascii_case("valkey"));
        let raw = if valkey {
            fields
                .get("valkey_version")
                .or(fields.get("redis_version"))?
        } else {
            fields.get("redis_version")?
        };
        let mut parts = raw.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let version = (
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        );
        Some(ServerInfo {
            name: if valkey { "Valkey" } else { "Redis" },
            version,
        })
    }

    pub(crate) fn is_valkey(&self) -> bool {
        self.name == "Valkey"
    }
}

impl std::fmt::Display for ServerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (a, b, c) = self.version;
        write!(f, "{} {a}.{b}.{c}", self.name)
    }
}

/// Logs connection errors at most once per interval, with the count of the ones left out:
/// fred reports every failed reconnect attempt.
#[derive(Debug)]
pub(crate) struct LogLimiter {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl LogLimiter {
    pub(crate) fn new(every: Duration) -> Self {
        LogLimiter {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// Returns `Some(suppressed)` when this event should be logged.
    pub(crate) fn admit(&self) -> Option<u64> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match st.0 {
            Some(last) if now.duration_since(last) < self.every => {
                st.1 += 1;
                None
            }
            _ => {
                let suppressed = st.1;
                *st = (Some(now), 0);
                Some(suppressed)
            }
        }
    }
}

/// The local wall clock, epoch ms.
pub(crate) fn wall_ms() -> EpochMs {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as EpochMs)
}

/// The keys of one job: `<prefix>{<job>}:...`, one hash slot per job.
pub(crate) fn job_base(prefix: &str, job: &JobName) -> String {
    format!("{prefix}{{{job}}}:")
}

pub(crate) struct Conn {
    pub(crate) client: Client,
    owned: bool,
    pub(crate) target: String,
    pub(crate) opts: RedisOptions,
    server: tokio::sync::OnceCell<ServerInfo>,
    scripts: Vec<&'static Script>,
    /// The server clock at a known local instant, to compute command deadlines.
    clock: Mutex<Option<(EpochMs, Instant)>>,
    /// Jobs this process already added to the `jobs` set.
    known: Mutex<HashSet<JobName>>,
    closed: AtomicBool,
    listeners: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) limiter: std::sync::Arc<LogLimiter>,
    /// Requests sent and waited for (a command, a script call, a pipeline): the round trips,
    /// for tests and benchmarks.
    pub(crate) round_trips: std::sync::atomic::AtomicU64,
}

impl Conn {
    /// A client of our own from a URL (not connected yet).
    pub(crate) fn from_url(
        url: &str,
        opts: RedisOptions,
        scripts: Vec<&'static Script>,
    ) -> std::result::Result<Conn, RedisError> {
        opts.validate()?;
        let redacted = redact_url(url);
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("redis" | "valkey" | "redis-cluster" | "redis-sentinel") => {}
            Some("rediss" | "valkeys" | "rediss-cluster" | "rediss-sentinel") => {
                if !cfg!(feature = "tls") {
                    return Err(RedisError::InvalidUrl {
                        url: redacted,
                        reason: "TLS URLs need the `tls` feature of anarchon-redis".into(),
                    });
                }
            }
            _ => {
                return Err(RedisError::InvalidUrl {
                    url: redacted,
                    reason: "the scheme must be redis:// or rediss://".into(),
                });
            }
        }
        // fred sees the URL without its user info; the credentials are set apart.
        let split = crate::url::split(url)?;
        let mut config = Config::from_url(&split.bare).map_err(|e| RedisError::InvalidUrl {
            url: redacted.clone(),
            reason: e.details().to_string(),
        })?;
        config.username = split.username;
        config.password = split.password;
        let (cmd, conn) = (opts.command_timeout, opts.connect_timeout);
        let policy = ReconnectPolicy::new_exponential(
            0,
            // Bounded by `RedisOptions::MAX_TIMEOUT` (1 h): far below `u32::MAX` ms.
            u32::try_from(opts.reconnect_min.as_millis()).unwrap_or(u32::MAX),
            u32::try_from(opts.reconnect_max.as_millis()).unwrap_or(u32::MAX),
            2,
        );
        let client = Builder::from_config(config)
            .with_connection_config(|c| {
                c.connection_timeout = conn;
                c.internal_command_timeout = cmd;
                // A command in flight when the socket died is not sent again: the scripts
                // refuse late arrivals anyway, and a claim must not be doubled.
                c.max_command_attempts = 1;
            })
            .with_performance_config(|p| p.default_command_timeout = cmd)
            .set_policy(policy)
            .build()
            .map_err(|e| RedisError::InvalidUrl {
                url: redacted.clone(),
                reason: e.details().to_string(),
            })?;
        Ok(Conn::new(client, true, redacted, opts, scripts))
    }

    /// The user's own client: never closed by the store.
    pub(crate) fn from_client(
        client: Client,
        opts: RedisOptions,
        scripts: Vec<&'static Script>,
    ) -> std::result::Result<Conn, RedisError> {
        opts.validate()?;
        let target = format!("client {}", client.id());
        Ok(Conn::new(client, false, target, opts, scripts))
    }

    fn new(
        client: Client,
        owned: bool,
        target: String,
        opts: RedisOptions,
        scripts: Vec<&'static Script>,
    ) -> Conn {
        Conn {
            client,
            owned,
            target,
            opts,
            server: tokio::sync::OnceCell::new(),
            scripts,
            clock: Mutex::new(None),
            known: Mutex::new(HashSet::new()),
            closed: AtomicBool::new(false),
            listeners: Mutex::new(Vec::new()),
            limiter: std::sync::Arc::new(LogLimiter::new(Duration::from_secs(10))),
            round_trips: std::sync::atomic::AtomicU64::new(0),
        }
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.opts.prefix
    }

    pub(crate) fn base(&self, job: &JobName) -> String {
        job_base(&self.opts.prefix, job)
    }

    fn call_options(&self) -> Options {
        Options {
            timeout: Some(self.opts.command_timeout),
            max_attempts: Some(1),
            ..Default::default()
        }
    }

    pub(crate) fn unavailable(&self, source: impl Into<anarchon_core::BoxError>) -> Error {
        Error::Unavailable {
            store: STORE,
            target: self.target.clone(),
            source: source.into(),
        }
    }

    /// Maps a driver error: timeouts, connection trouble, keys of the wrong type.
    pub(crate) fn map_err(&self, operation: &'static str, e: fred::error::Error) -> Error {
        let details = e.details();
        if let Some(pos) = details.find("ANARCHON_WRONGTYPE ") {
            let rest = &details[pos + "ANARCHON_WRONGTYPE ".len()..];
            let mut words = rest.splitn(3, ' ');
            let got = words.next().unwrap_or("?").to_owned();
            let want = words.next().unwrap_or("?").to_owned();
            let key = words.next().unwrap_or("");
            let key = key
                .strip_prefix('<')
                .and_then(|k| k.rfind('>').map(|end| &k[..end]))
                .unwrap_or(key);
            return corrupt(key, &got, &want);
        }
        if details.starts_with("WRONGTYPE") {
            return Error::Corrupt {
                store: STORE,
                location: format!("a key under the prefix {:?}", self.opts.prefix),
                reason: format!(
                    "{details} during `{operation}`; remove the key or choose another prefix"
                ),
            };
        }
        match e.kind() {
            ErrorKind::Timeout => Error::Timeout {
                store: STORE,
                operation,
                after: self.opts.command_timeout,
            },
            ErrorKind::IO
            | ErrorKind::Canceled
            | ErrorKind::Auth
            | ErrorKind::Config
            | ErrorKind::Url
            | ErrorKind::Routing
            | ErrorKind::Backpressure => self.unavailable(e),
            #[cfg(feature = "tls")]
            ErrorKind::Tls => self.unavailable(e),
            _ => Error::store(STORE, operation, e),
        }
    }

    /// Connects (once), checks the server, loads the scripts.
    pub(crate) async fn ensure(&self) -> Result<&ServerInfo> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(self.unavailable("the store was closed"));
        }
        self.server.get_or_try_init(|| self.connect()).await
    }

    async fn connect(&self) -> Result<ServerInfo> {
        if self.owned && !self.client.is_connected() {
            let init = tokio::time::timeout(self.opts.connect_timeout, self.client.init()).await;
            match init {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    let _ = self.client.quit().await;
                    return Err(self.unavailable(e));
                }
                Err(_) => {
                    // Stop the reconnect loop fred runs for a server that never answered.
                    let _ =
                        tokio::time::timeout(Duration::from_millis(200), self.client.quit()).await;
                    return Err(self.unavailable(format!(
                        "no connection within {:?}",
                        self.opts.connect_timeout
                    )));
                }
            }
            self.watch_client(&self.client, "main");
        }
        let info: String = self
            .client
            .with_options(&self.call_options())
            .info(Some(InfoKind::Server))
            .await
            .map_err(|e| self.map_err("connect", e))?;
        let server = ServerInfo::parse(&info)
            .ok_or_else(|| Error::store(STORE, "connect", "INFO server has no version"))?;
        if !server.is_valkey() && server.version < (5, 0, 0) {
            return Err(Error::ServerTooOld {
                store: STORE,
                found: server.to_string(),
                required: "Redis 5.0 or Valkey".into(),
            });
        }
        for script in &self.scripts {
            self.load(script).await?;
        }
        self.server_now_raw().await?;
        Ok(server)
    }

    /// Logs connection errors (rate-limited) and reconnects of a client the store opened.
    pub(crate) fn watch_client(&self, client: &Client, role: &'static str) {
        let limiter = self.limiter.clone();
        let target = self.target.clone();
        let mut errors = client.error_rx();
        let mut reconnects = client.reconnect_rx();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    e = errors.recv() => match e {
                        Ok((e, server)) => {
                            if let Some(suppressed) = limiter.admit() {
                                let server = server.map(|s| s.to_string()).unwrap_or_default();
                                tracing::warn!(target: "anarchon_redis", %target, %server, role, suppressed,
                                    "redis connection error: {e}");
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(_) => break,
                    },
                    r = reconnects.recv() => match r {
                        Ok(server) => tracing::info!(target: "anarchon_redis", %target, %server, role, "redis connected"),
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(_) => break,
                    },
                }
            }
        });
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
    }

    async fn load(&self, script: &Script) -> Result<()> {
        match tokio::time::timeout(self.opts.command_timeout, script.load(&self.client)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.map_err("script load", e)),
            Err(_) => Err(Error::Timeout {
                store: STORE,
                operation: "script load",
                after: self.opts.command_timeout,
            }),
        }
    }

    /// `EVALSHA`, with `SCRIPT LOAD` and one retry on `NOSCRIPT` (a restarted or flushed
    /// server), bounded by the command timeout.
    pub(crate) async fn eval(
        &self,
        operation: &'static str,
        script: &Script,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<Value> {
        self.ensure().await?;
        let opts = self.call_options();
        let client = self.client.with_options(&opts);
        self.count_round_trip();
        let first: std::result::Result<Value, _> = client
            .evalsha(script.sha1().clone(), keys.clone(), args.clone())
            .await;
        match first {
            Err(e) if e.details().starts_with("NOSCRIPT") => {
                self.load(script).await?;
                self.count_round_trip();
                client
                    .evalsha(script.sha1().clone(), keys, args)
                    .await
                    .map_err(|e| self.map_err(operation, e))
            }
            r => r.map_err(|e| self.map_err(operation, e)),
        }
    }

    /// Logs (at debug) when a batch was sent, when the server ran its first and last call
    /// (the server time in each reply, `{code, now, ...}`; overlap answers carry none), and
    /// when the answer came back: where the time of a slow batch went.
    pub(crate) fn trace_batch(&self, operation: &'static str, sent_ms: EpochMs, replies: &[Value]) {
        if !tracing::enabled!(target: "anarchon_redis", tracing::Level::DEBUG) {
            return;
        }
        let answered_ms = wall_ms();
        let times = replies.iter().filter_map(|r| match r {
            Value::Array(v) if int(v.first()) != Some(2) => int(v.get(1)),
            _ => None,
        });
        let (first, last) = times.fold((None, None), |(lo, hi): (Option<i64>, Option<i64>), t| {
            (
                Some(lo.map_or(t, |l| l.min(t))),
                Some(hi.map_or(t, |h| h.max(t))),
            )
        });
        tracing::debug!(
            target: "anarchon_redis",
            operation,
            calls = replies.len(),
            server_first_after_ms = first.map_or(-1, |f| f - sent_ms),
            server_last_after_ms = last.map_or(-1, |l| l - sent_ms),
            answered_after_ms = answered_ms - sent_ms,
            "batch answered"
        );
    }

    fn count_round_trip(&self) {
        self.round_trips
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Several `EVALSHA` calls of one script for a large read, [`CALLS_PER_PIPELINE`] at a
    /// time: each group in one pipeline (one round trip), the groups one after another, so
    /// the other commands of this connection (claims of slots due now) wait behind at most
    /// one group, not behind a listing of 100,000 jobs (measured: a start's listing held a
    /// node's claims for up to 1.5 s). Calls to one hash slot run in the order given; the
    /// answers come in the order of `calls`; each group is bounded by the command timeout.
    /// Batches of writes (a cluster's claims split per hash slot) keep one pipeline
    /// ([`eval_pipeline`](Self::eval_pipeline)).
    pub(crate) async fn eval_pipeline_in_groups(
        &self,
        operation: &'static str,
        script: &Script,
        calls: Vec<(Vec<String>, Vec<String>)>,
    ) -> Result<Vec<Value>> {
        if calls.len() <= CALLS_PER_PIPELINE {
            return self.eval_pipeline(operation, script, calls).await;
        }
        let mut answers = Vec::with_capacity(calls.len());
        let mut calls = calls.into_iter().peekable();
        while calls.peek().is_some() {
            let group: Vec<_> = calls.by_ref().take(CALLS_PER_PIPELINE).collect();
            answers.extend(self.eval_pipeline(operation, script, group).await?);
        }
        Ok(answers)
    }

    /// Several `EVALSHA` calls of one script in one pipeline: written together, answered
    /// together, one round trip (on a cluster fred sends each call to its node, so one round
    /// trip per node, in parallel). Calls to one hash slot run in the order given. Calls
    /// refused with `NOSCRIPT` (a restarted or flushed node) had no effect: the script is
    /// loaded and they are sent again, in order, in a second pipeline. Bounded by the
    /// command timeout; the answers come in the order of `calls`.
    pub(crate) async fn eval_pipeline(
        &self,
        operation: &'static str,
        script: &Script,
        calls: Vec<(Vec<String>, Vec<String>)>,
    ) -> Result<Vec<Value>> {
        self.ensure().await?;
        let mut answers: Vec<Option<Value>> = vec![None; calls.len()];
        let mut pending: Vec<usize> = (0..calls.len()).collect();
        let mut loaded = false;
        while !pending.is_empty() {
            let pipeline = self.client.pipeline();
            for &i in &pending {
                let (keys, args) = &calls[i];
                // fred's pipeline has no `evalsha`: the same command, routed by the hash
                // slot of its first key as `evalsha` routes it.
                let slot = keys.first().map_or(0, |k| redis_keyslot(k.as_bytes()));
                let mut words: Vec<String> = Vec::with_capacity(2 + keys.len() + args.len());
                words.push(script.sha1().to_string());
                words.push(keys.len().to_string());
                words.extend(keys.iter().cloned());
                words.extend(args.iter().cloned());
                let queued: std::result::Result<(), _> = pipeline
                    .custom(
                        CustomCommand::new_static("EVALSHA", ClusterHash::Custom(slot), false),
                        words,
                    )
                    .await;
                queued.map_err(|e| self.map_err(operation, e))?;
            }
            self.count_round_trip();
            let replies =
                match tokio::time::timeout(self.opts.command_timeout, pipeline.try_all::<Value>())
                    .await
                {
                    Ok(replies) => replies,
                    Err(_) => {
                        return Err(Error::Timeout {
                            store: STORE,
                            operation,
                            after: self.opts.command_timeout,
                        });
                    }
                };
            if replies.len() != pending.len() {
                // One error for the whole pipeline (not sent, connection lost, timeout).
                let e = replies.into_iter().find_map(std::result::Result::err);
                return Err(match e {
                    Some(e) => self.map_err(operation, e),
                    None => Error::store(STORE, operation, "a pipeline was answered short"),
                });
            }
            let mut again = Vec::new();
            for (&i, reply) in pending.iter().zip(replies) {
                match reply {
                    Ok(v) => answers[i] = Some(v),
                    Err(e) if e.details().starts_with("NOSCRIPT") && !loaded => again.push(i),
                    Err(e) => return Err(self.map_err(operation, e)),
                }
            }
            if !again.is_empty() {
                self.load(script).await?;
                loaded = true;
            }
            pending = again;
        }
        Ok(answers.into_iter().flatten().collect())
    }

    /// Runs a batch of single-run script calls (`keys` = the run hash, `args` = the job's
    /// key base, the deadline, then the call's own arguments) as calls of the batch script
    /// `many`, which takes every run's key base and own arguments in a row: one call for the
    /// whole batch on a single node, one per hash slot on a cluster (in one pipeline). The
    /// answers of the single calls come back in the order given.
    pub(crate) async fn eval_batch(
        &self,
        operation: &'static str,
        many: &Script,
        calls: Vec<(Vec<String>, Vec<String>)>,
    ) -> Result<Vec<Value>> {
        let rks: Vec<String> = calls
            .iter()
            .map(|(keys, _)| keys.first().cloned().unwrap_or_default())
            .collect();
        let groups = self.group_by_slot(&rks);
        let deadline = self.deadline();
        let scripted: Vec<(Vec<String>, Vec<String>)> = groups
            .iter()
            .map(|group| {
                let keys = group.iter().map(|&i| rks[i].clone()).collect();
                let per_call = calls.first().map_or(0, |(_, args)| args.len() - 1);
                let mut args = Vec::with_capacity(2 + per_call * group.len());
                args.extend([String::new(), deadline.clone()]);
                for &i in group {
                    let single = &calls[i].1;
                    args.push(single[0].clone());
                    args.extend(single[2..].iter().cloned());
                }
                (keys, args)
            })
            .collect();
        drop(calls);
        let sent_ms = wall_ms();
        let replies = if let [_] = scripted.as_slice() {
            // One call (a single node): sent as a plain command, which fred drops unsent
            // if its timeout passed while it still waited in the client's queue.
            let (keys, args) = scripted.into_iter().next().unwrap_or_default();
            vec![self.eval(operation, many, keys, args).await?]
        } else {
            self.eval_pipeline(operation, many, scripted).await?
        };
        if replies.len() != groups.len() {
            return Err(Error::store(
                STORE,
                operation,
                format!(
                    "{} batch calls were answered {} times",
                    groups.len(),
                    replies.len()
                ),
            ));
        }
        let mut answers: Vec<Value> = vec![Value::Null; rks.len()];
        for (group, reply) in groups.iter().zip(replies) {
            let v = reply.into_array();
            if v.len() != group.len() {
                return Err(Error::store(
                    STORE,
                    operation,
                    format!("a batch of {} calls was answered with {v:?}", group.len()),
                ));
            }
            for (&i, r) in group.iter().zip(v) {
                answers[i] = r;
            }
        }
        self.trace_batch(operation, sent_ms, &answers);
        Ok(answers)
    }

    /// A plain command, bounded.
    pub(crate) async fn command<R: FromValue>(
        &self,
        operation: &'static str,
        cmd: &'static str,
        args: Vec<Value>,
    ) -> Result<R> {
        self.ensure().await?;
        self.count_round_trip();
        let hash = ClusterHash::FirstKey;
        self.client
            .with_options(&self.call_options())
            .custom(CustomCommand::new_static(cmd, hash, false), args)
            .await
            .map_err(|e| self.map_err(operation, e))
    }

    async fn server_now_raw(&self) -> Result<EpochMs> {
        self.count_round_trip();
        let t: Vec<String> = self
            .client
            .with_options(&self.call_options())
            .custom(
                CustomCommand::new_static("TIME", ClusterHash::Random, false),
                Vec::<String>::new(),
            )
            .await
            .map_err(|e| self.map_err("time", e))?;
        let secs: i64 = t.first().and_then(|s| s.parse().ok()).unwrap_or(0);
        let micros: i64 = t.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let now = secs.saturating_mul(1000).saturating_add(micros / 1000);
        self.observe_clock(now);
        Ok(now)
    }

    /// The server's clock (`TIME`).
    pub(crate) async fn server_now(&self) -> Result<EpochMs> {
        self.ensure().await?;
        self.server_now_raw().await
    }

    /// Remembers a server time seen in a reply, to estimate the server clock locally.
    pub(crate) fn observe_clock(&self, server_ms: EpochMs) {
        *self.clock.lock().unwrap_or_else(|e| e.into_inner()) = Some((server_ms, Instant::now()));
    }

    /// The estimated server clock now (from the last reply that carried its time).
    pub(crate) fn estimated_now(&self) -> Option<EpochMs> {
        self.clock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|(ms, at)| {
                ms.saturating_add(
                    EpochMs::try_from(at.elapsed().as_millis()).unwrap_or(EpochMs::MAX),
                )
            })
    }

    /// The deadline on the server clock after which a write sent now must have no effect:
    /// by then this process has given up on the answer.
    pub(crate) fn deadline(&self) -> String {
        match self.estimated_now() {
            Some(now) => now
                .saturating_add(
                    EpochMs::try_from(self.opts.command_timeout.as_millis())
                        .unwrap_or(EpochMs::MAX),
                )
                .to_string(),
            None => "0".into(),
        }
    }

    /// Adds jobs to the `jobs` set once per process (for `known_jobs`).
    pub(crate) async fn note_jobs(&self, jobs: &[JobName]) -> Result<()> {
        let fresh: Vec<JobName> = {
            let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            jobs.iter()
                .filter(|j| !known.contains(*j))
                .cloned()
                .collect()
        };
        if fresh.is_empty() {
            return Ok(());
        }
        let key = format!("{}jobs", self.opts.prefix);
        let mut args: Vec<Value> = vec![key.clone().into()];
        args.extend(fresh.iter().map(|j| Value::from(j.as_str())));
        let r: std::result::Result<i64, Error> = self.command("prepare", "SADD", args).await;
        r.map_err(|e| wrongtype_key(e, &key, "set"))?;
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(fresh);
        Ok(())
    }

    /// Writes the format version once and refuses any other: a newer one with
    /// `SchemaTooNew`, an older one (format 1, before attempts moved into the run hash)
    /// with `Corrupt` saying to delete the prefix's keys, since format 1 is not migrated.
    pub(crate) async fn check_meta(&self) -> Result<()> {
        let key = format!("{}meta", self.opts.prefix);
        let _: i64 = self
            .command(
                "prepare",
                "HSETNX",
                vec![key.clone().into(), "format".into(), FORMAT.into()],
            )
            .await
            .map_err(|e| wrongtype_key(e, &key, "hash"))?;
        let found: Option<String> = self
            .command("prepare", "HGET", vec![key.clone().into(), "format".into()])
            .await?;
        check_format(&key, found.as_deref(), &self.opts.prefix)
    }

    pub(crate) async fn known_jobs(&self) -> Result<Vec<JobName>> {
        let key = format!("{}jobs", self.opts.prefix);
        let names: Vec<String> = self
            .command("known_jobs", "SMEMBERS", vec![key.clone().into()])
            .await
            .map_err(|e| wrongtype_key(e, &key, "set"))?;
        let mut jobs: Vec<JobName> = names
            .into_iter()
            .filter_map(|n| JobName::new(n).ok())
            .collect();
        jobs.sort();
        Ok(jobs)
    }

    pub(crate) async fn history(&self, job: &JobName, count: usize) -> Result<Vec<RunRecord>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let base = self.base(job);
        let v = self
            .eval(
                "history",
                &crate::scripts::HISTORY,
                vec![format!("{base}hist")],
                vec![base.clone(), "0".into(), count.to_string()],
            )
            .await?;
        let mut rows = Vec::new();
        for row in v.into_array() {
            let flat = row.into_array();
            let mut map = BTreeMap::new();
            let mut it = flat.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                map.insert(
                    k.as_string().unwrap_or_default(),
                    v.as_string().unwrap_or_default(),
                );
            }
            rows.push(parse_row(job, &map).ok_or_else(|| Error::Corrupt {
                store: STORE,
                location: format!("{base}row:*"),
                reason:
                    "a history row is missing fields; remove it or choose another prefix".into(),
            })?);
        }
        rows.sort_by_key(|r| std::cmp::Reverse((r.started_at, r.slot, r.attempt)));
        rows.truncate(count);
        Ok(rows)
    }

    /// Inserts or replaces a history row keyed by `id` (the row belongs to run `member`).
    pub(crate) async fn put_row(
        &self,
        record: &RunRecord,
        id: String,
        member: String,
        retention: Retention,
    ) -> Result<()> {
        let base = self.base(&record.job);
        let mut args = vec![
            base.clone(),
            "0".into(),
            id.clone(),
            member.clone(),
            record.slot.to_string(),
            retention.size.max(1).to_string(),
            retention.ttl_ms.unwrap_or(0).to_string(),
            record.started_at.to_string(),
            record
                .finished_at
                .map(|f| f.to_string())
                .unwrap_or_default(),
        ];
        args.extend(row_fields(record));
        let keys = vec![
            format!("{base}row:{id}"),
            format!("{base}hist"),
            format!("{base}fin"),
            format!("{base}runs"),
            format!("{base}rr:{member}"),
        ];
        let v = self
            .eval("record", &crate::scripts::PUT_ROW, keys, args)
            .await?;
        if let Some(now) = v.into_array().get(1).and_then(Value::as_i64) {
            self.observe_clock(now);
        }
        Ok(())
    }

    /// Whether the client is part of a cluster (then multi-job scripts are split per slot).
    pub(crate) fn clustered(&self) -> bool {
        self.client.is_clustered()
    }

    /// Groups key indexes by hash slot in a cluster; one group on a single node.
    pub(crate) fn group_by_slot(&self, keys: &[String]) -> Vec<Vec<usize>> {
        if !self.clustered() {
            return if keys.is_empty() {
                Vec::new()
            } else {
                vec![(0..keys.len()).collect()]
            };
        }
        let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            groups
                .entry(redis_keyslot(k.as_bytes()))
                .or_default()
                .push(i);
        }
        groups.into_values().collect()
    }

    /// Closes what the store opened: its own client; never the user's.
    pub(crate) async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if self.owned && self.client.is_connected() {
            let _ = tokio::time::timeout(self.opts.command_timeout, self.client.quit()).await;
        }
        for task in self
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// The key format version this build writes (`<prefix>meta`, field `format`). Format 2
/// keeps each attempt's history row inside its run hash; format 1 had a hash per row.
pub(crate) const FORMAT: i64 = 2;

/// Judges the format found in `<prefix>meta` (`key`): only [`FORMAT`] is accepted.
fn check_format(key: &str, found: Option<&str>, prefix: &str) -> Result<()> {
    let Some(found) = found.and_then(|f| f.parse::<i64>().ok()) else {
        return Err(Error::Corrupt {
            store: STORE,
            location: format!("key {key:?}"),
            reason: format!(
                "its field `format` is {found:?}, not a format version; remove the key or give \
                 anarchon another prefix"
            ),
        });
    };
    if found > FORMAT {
        return Err(Error::SchemaTooNew {
            store: STORE,
            location: key.to_owned(),
            found,
            supported: FORMAT,
        });
    }
    if found < FORMAT {
        return Err(Error::Corrupt {
            store: STORE,
            location: format!("key {key:?}"),
            reason: format!(
                "the keys under the prefix {prefix:?} are in key format {found}, written by an \
                 older anarchon-redis; this build uses format {FORMAT} and does not migrate them: \
                 delete them (redis-cli --scan --pattern '{prefix}*' | xargs redis-cli del) or \
                 give anarchon another prefix"
            ),
        });
    }
    Ok(())
}

pub(crate) fn corrupt(key: &str, got: &str, want: &str) -> Error {
    Error::Corrupt {
        store: STORE,
        location: format!("key {key:?}"),
        reason: format!(
            "it holds a {got} where anarchon keeps a {want}; something else wrote under anarchon's prefix: \
             remove the key or give anarchon another prefix"
        ),
    }
}

fn wrongtype_key(e: Error, key: &str, want: &str) -> Error {
    match e {
        Error::Corrupt { .. } => corrupt(key, "value of another type", want),
        other => other,
    }
}

/// The fields of a history row hash.
pub(crate) fn row_fields(r: &RunRecord) -> Vec<String> {
    let mut f = vec![
        "slot".into(),
        r.slot.to_string(),
        "sched".into(),
        r.scheduled_at.to_string(),
        "inst".into(),
        r.instance_id.clone(),
        "man".into(),
        if r.manual { "1" } else { "0" }.into(),
        "att".into(),
        r.attempt.to_string(),
        "rsn".into(),
        r.reason.as_str().into(),
        "st".into(),
        r.status.as_str().into(),
        "fence".into(),
        r.fence.to_string(),
        "start".into(),
        r.started_at.to_string(),
    ];
    if let Some(fin) = r.finished_at {
        f.extend(["fin".into(), fin.to_string()]);
    }
    if let Some(err) = &r.error {
        let err = crate::text::cap(err);
        f.extend(["err".into(), err.into_owned()]);
    }
    f
}

pub(crate) fn parse_row(job: &JobName, m: &BTreeMap<String, String>) -> Option<RunRecord> {
    let num = |k: &str| m.get(k).and_then(|v| v.parse::<i64>().ok());
    Some(RunRecord {
        job: job.clone(),
        slot: num("slot")?,
        scheduled_at: num("sched")?,
        instance_id: m.get("inst")?.clone(),
        manual: m.get("man").is_some_and(|v| v == "1"),
        // A number out of range is a row anarchon did not write: refused like a missing
        // field (the caller reports it as `Corrupt`).
        attempt: u32::try_from(num("att")?).ok()?,
        reason: Reason::parse(m.get("rsn")?)?,
        status: RunStatus::parse(m.get("st")?)?,
        fence: u64::try_from(num("fence").unwrap_or(0)).ok()?,
        started_at: num("start")?,
        finished_at: num("fin"),
        error: m.get("err").cloned(),
    })
}

/// Reads an integer from a script reply element.
pub(crate) fn int(v: Option<&Value>) -> Option<i64> {
    v.and_then(|v| match v {
        Value::Integer(i) => Some(*i),
        other => other.as_string().and_then(|s| s.parse().ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redis_and_valkey_info() {
        let redis = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n";
        assert_eq!(
            ServerInfo::parse(redis).unwrap().to_string(),
            "Redis 7.0.15"
        );
        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n";
        let v = ServerInfo::parse(valkey).unwrap();
        assert!(v.is_valkey());
        assert_eq!(v.to_string(), "Valkey 8.0.1");
        assert!(ServerInfo::parse("nothing").is_none());
    }

    #[test]
    fn limiter_admits_once_per_interval() {
        let l = LogLimiter::new(Duration::from_secs(60));
        assert_eq!(l.admit(), Some(0));
        assert_eq!(l.admit(), None);
        assert_eq!(l.admit(), None);
    }

    #[test]
    fn only_the_current_key_format_is_accepted() {
        let key = "anarchon:meta";
        assert!(check_format(key, Some("2"), "anarchon:").is_ok());
        match check_format(key, Some("3"), "anarchon:") {
            Err(Error::SchemaTooNew {
                found, supported, ..
            }) => assert_eq!((found, supported), (3, 2)),
            other => panic!("{other:?}"),
        }
        let err = check_format(key, Some("1"), "anarchon:").unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("format 1") && msg.contains("'anarchon:*'"),
            "{msg}"
        );
        let err = check_format(key, Some("x"), "anarchon:").unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }

    #[test]
    fn job_keys_are_hash_tagged() {
        let job = JobName::new("nightly").unwrap();
        assert_eq!(job_base("anarchon:", &job), "anarchon:{nightly}:");
    }
}
