//! Shared harness of the slow multi-process tests (`cluster`, `scenarios`): a scheduler node
//! that runs in a child process, and the parent's view of the nodes' events.
//!
//! A test binary runs a node by re-executing itself (`std::env::current_exe()`) with the
//! arguments `child_node --exact --ignored --nocapture` and the node's configuration in the
//! environment variable [`NODE_ENV`]; its `child_node` test (ignored, so no runner counts it
//! as a test) calls [`child_main`], which does nothing without that variable. The node prints
//! one line per scheduler event on stdout (`EVENT start n1 t=... slot=... attempt=1
//! reason=scheduled`), which the parent reads through [`Cluster`]. A node exits when its
//! stdin closes, so no node outlives its test.
//!
//! The process plumbing (spawning, reading the lines, signals by PID, temporary databases,
//! the host clock) is the examples' harness, `examples/common/process.rs`, taken in here with
//! `#[path]`: one copy for the examples and the tests.
// Each test binary uses a different part of the harness.
#![allow(dead_code)]

pub(crate) mod examples;

#[path = "../../examples/common/process.rs"]
mod process;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anarchon::store::RunRecord as HistoryRecord;
use anarchon::{JobName, Leased, Mode, Scheduler};
// Each test binary takes a different part.
#[allow(unused_imports)]
pub(crate) use process::{
    Ev, Procs, Signal, TempDb, clock, now_ms, print_events, remove_sqlite, temp_db,
};

/// The environment variable that carries a child node's configuration.
pub(crate) const NODE_ENV: &str = "ANARCHON_TEST_NODE";

/// A Redis target for the nodes of one test run: the URL and a key prefix of its own
/// (`<url>#<prefix>`), so runs never meet keys of other runs or of older key formats.
#[cfg(feature = "redis")]
pub(crate) fn redis_target(url: &str) -> String {
    format!(
        "{url}#anarchon-test-{}-{}:",
        std::process::id(),
        now_ms() % 100_000_000
    )
}

/// Opens the store of a [`StoreSpec`]: `redis-naive:` is the Redis claim-only `stream-id`
/// strategy, which no URL names; every other spec is `<kind>:<url>[#<prefix>]`, opened by
/// `anarchon::any` from the URL (the kind only labels it).
async fn open_store(spec: &str) -> anyhow::Result<anarchon::any::AnyStore> {
    use anarchon::any::{self, AnyOptions, AnyStore};
    let (kind, target) = spec
        .split_once(':')
        .ok_or_else(|| anyhow::anyhow!("bad store spec {spec:?}"))?;
    let (url, prefix) = target.split_once('#').unwrap_or((target, ""));
    if kind == "redis-naive" {
        #[cfg(feature = "redis")]
        {
            let store = anarchon::redis::RedisClaimStore::connect_with(
                url,
                anarchon::redis::Strategy::StreamId,
                anarchon::redis::RedisOptions::default().prefix(prefix),
            )
            .await?;
            return Ok(AnyStore::Claim(std::sync::Arc::new(store)));
        }
        #[cfg(not(feature = "redis"))]
        anyhow::bail!("store {kind:?} is not built into this test binary");
    }
    let mut options = AnyOptions::default();
    if !prefix.is_empty() {
        options = options.prefix(prefix);
    }
    Ok(any::open_with(url, options).await?)
}

/// A job name unique to this run.
pub(crate) fn unique_job(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), now_ms() % 100_000_000)
}

/// The store a node runs on: `sqlite:<path>`, `redis-lease:<url>`, `redis-naive:<url>`
/// (the claim-only `stream-id` strategy), `amqp-naive:<url>` and `nats-naive:<url>` (the
/// claim-only RabbitMQ and NATS stores) or `postgres:<url>`.
pub(crate) type StoreSpec = String;

/// What a node runs: one `every` job whose run works `work_ms`, cut short by its signal.
#[derive(Debug, Clone)]
pub(crate) struct NodeConfig {
    /// The store.
    pub(crate) store: StoreSpec,
    /// The job's name.
    pub(crate) job: String,
    /// Slots every ...
    pub(crate) interval_ms: u64,
    /// ... on the grid shifted by this.
    pub(crate) offset_ms: i64,
    /// How long a run works.
    pub(crate) work_ms: u64,
    /// Lease stores: the lease, its heartbeat, the catch-up window and the crash budget.
    pub(crate) lease_ms: u64,
    /// See `lease_ms`.
    pub(crate) heartbeat_ms: u64,
    /// See `lease_ms`.
    pub(crate) catch_up_ms: u64,
    /// See `lease_ms`.
    pub(crate) max_attempts: u32,
    /// A file the handlers append their own log to (see [`HandlerLine`]); empty for none.
    pub(crate) handler_log: String,
    /// The node whose clock runs `skew_ms` off (empty: none).
    pub(crate) skewed: String,
    /// See `skewed`.
    pub(crate) skew_ms: i64,
}

impl NodeConfig {
    /// A job every `interval_ms` working `work_ms`, with lease 1.5 s, heartbeat 0.3 s, no
    /// catch-up, three attempts.
    pub(crate) fn new(store: StoreSpec, job: &str, interval_ms: u64, work_ms: u64) -> Self {
        NodeConfig {
            store,
            job: job.to_owned(),
            interval_ms,
            offset_ms: 0,
            work_ms,
            lease_ms: 1_500,
            heartbeat_ms: 300,
            catch_up_ms: 0,
            max_attempts: 3,
            handler_log: String::new(),
            skewed: String::new(),
            skew_ms: 0,
        }
    }

    /// Shifts the grid so a slot comes `lead_ms` from now; returns that slot.
    pub(crate) fn first_slot_in(&mut self, lead_ms: u64) -> i64 {
        let slot = now_ms() + lead_ms as i64;
        self.offset_ms = slot.rem_euclid(self.interval_ms as i64);
        slot
    }

    fn encode(&self, id: &str) -> String {
        format!(
            "id={id}\nstore={}\njob={}\ninterval={}\noffset={}\nwork={}\nlease={}\nheartbeat={}\ncatchup={}\nattempts={}\nhandlerlog={}\nskewed={}\nskew={}",
            self.store,
            self.job,
            self.interval_ms,
            self.offset_ms,
            self.work_ms,
            self.lease_ms,
            self.heartbeat_ms,
            self.catch_up_ms,
            self.max_attempts,
            self.handler_log,
            self.skewed,
            self.skew_ms
        )
    }

    fn decode(text: &str) -> (String, NodeConfig) {
        let map: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
        let num = |k: &str| -> u64 {
            map.get(k)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("node config: {k} missing"))
        };
        let cfg = NodeConfig {
            store: map["store"].to_owned(),
            job: map["job"].to_owned(),
            interval_ms: num("interval"),
            offset_ms: map["offset"].parse().expect("offset"),
            work_ms: num("work"),
            lease_ms: num("lease"),
            heartbeat_ms: num("heartbeat"),
            catch_up_ms: num("catchup"),
            max_attempts: num("attempts") as u32,
            handler_log: map
                .get("handlerlog")
                .map_or(String::new(), |s| s.to_string()),
            skewed: map.get("skewed").map_or(String::new(), |s| s.to_string()),
            skew_ms: map.get("skew").and_then(|v| v.parse().ok()).unwrap_or(0),
        };
        (map["id"].to_owned(), cfg)
    }
}

// ----- the child ------------------------------------------------------------------------

/// The body of a test binary's `child_node` test: runs a node when [`NODE_ENV`] is set,
/// else returns at once.
pub(crate) fn child_main() {
    let Ok(text) = std::env::var(NODE_ENV) else {
        return;
    };
    let (id, cfg) = NodeConfig::decode(&text);
    // The parent holds our stdin: when it goes away, so do we.
    process::exit_with_parent();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let code = match runtime.block_on(node(&id, cfg)) {
        Ok(()) => 0,
        Err(e) => {
            println!("FAILED {id} {e:#}");
            1
        }
    };
    std::process::exit(code);
}

async fn node(id: &str, cfg: NodeConfig) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    // Registered before anything else, so an early SIGTERM/SIGINT is a graceful stop.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let stop = async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    };
    match open_store(&cfg.store).await? {
        anarchon::any::AnyStore::Lease(store) => {
            let builder = Scheduler::leased_shared(store);
            serve(id, &cfg, leased(builder, id, &cfg)?, stop).await
        }
        anarchon::any::AnyStore::Claim(store) => {
            let scheduler = Scheduler::claim_only_shared(store)
                .instance_id(id)
                .clock(node_clock(id, &cfg))
                .jitter(Duration::from_millis(0))
                .build()?;
            serve(id, &cfg, scheduler, stop).await
        }
    }
}

/// The system clock, shifted for the node the configuration names as skewed.
fn node_clock(id: &str, cfg: &NodeConfig) -> anarchon::Clock {
    if cfg.skewed == id {
        anarchon::Clock::SystemShifted {
            offset_ms: cfg.skew_ms,
        }
    } else {
        anarchon::Clock::System
    }
}

fn leased(
    builder: anarchon::SchedulerBuilder<Leased>,
    id: &str,
    cfg: &NodeConfig,
) -> anarchon::Result<Scheduler<Leased>> {
    builder
        .instance_id(id)
        .clock(node_clock(id, cfg))
        .lease(Duration::from_millis(cfg.lease_ms))
        .heartbeat(Duration::from_millis(cfg.heartbeat_ms))
        .catch_up_window(Duration::from_millis(cfg.catch_up_ms))
        .max_attempts(cfg.max_attempts)
        .jitter(Duration::from_millis(0))
        .build()
}

async fn serve<M: Mode>(
    id: &str,
    cfg: &NodeConfig,
    scheduler: Scheduler<M>,
    stop: impl std::future::Future<Output = &'static str>,
) -> anyhow::Result<()> {
    let work = Duration::from_millis(cfg.work_ms);
    let job = scheduler
        .every(&cfg.job, Duration::from_millis(cfg.interval_ms))
        .offset(Duration::from_millis(
            cfg.offset_ms.rem_euclid(cfg.interval_ms.max(1) as i64) as u64,
        ));
    if cfg.handler_log.is_empty() {
        job.handler(move |ctx| async move {
            tokio::select! {
                _ = ctx.signal.cancelled() => {}
                _ = tokio::time::sleep(work) => {}
            }
            Ok(ctx.check_cancelled()?)
        })?;
    } else {
        let log = std::sync::Arc::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&cfg.handler_log)?,
        );
        let node = id.to_owned();
        job.handler(move |ctx| {
            let log = log.clone();
            let node = node.clone();
            async move {
                let line = |what: &str| {
                    use std::io::Write;
                    // One write per line on an O_APPEND file: lines of several processes
                    // never interleave.
                    let text = format!(
                        "H {what} {node} {} {} {} {}\n",
                        ctx.slot_ms(),
                        ctx.attempt,
                        ctx.fence,
                        now_ms()
                    );
                    let _ = (&*log).write_all(text.as_bytes());
                };
                line("START");
                // Work in steps of 100 ms, each one a side effect made only after the
                // handler's own cancellation check passed.
                for _ in 0..(work.as_millis() / 100).max(1) {
                    tokio::select! {
                        _ = ctx.signal.cancelled() => {}
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    }
                    if let Err(e) = ctx.check_cancelled() {
                        line("STEP-ERR");
                        line("END");
                        return Err(e.into());
                    }
                    line("STEP-OK");
                }
                line("END");
                Ok(())
            }
        })?;
    }
    let printer = print_events(id, scheduler.events());
    scheduler.start().await?;
    process::ready(id);
    let why = stop.await;
    process::stopping(id, why);
    scheduler.stop(Duration::from_secs(5)).await?;
    drop(scheduler);
    process::exited(id, printer).await;
    Ok(())
}

// ----- the parent -----------------------------------------------------------------------

/// Nodes in child processes, all running one [`NodeConfig`], and everything they printed:
/// the harness's [`Procs`] (reading, waiting, signals, the log) with the nodes' configuration.
pub(crate) struct Cluster {
    /// The configuration every node gets.
    pub(crate) cfg: NodeConfig,
    procs: Procs,
}

process::wraps_procs!(Cluster, procs);

impl Cluster {
    /// No node yet.
    pub(crate) fn new(cfg: NodeConfig) -> Self {
        Cluster {
            cfg,
            procs: Procs::new(),
        }
    }

    /// Starts the nodes and waits until each printed `READY` (panics after 20 s, or when a
    /// node printed `FAILED`).
    pub(crate) fn start(&mut self, ids: &[&str]) {
        let since = self.procs.seen.len();
        let exe = std::env::current_exe().expect("the test binary");
        for id in ids {
            let mut command = Command::new(&exe);
            command
                .args([
                    "child_node",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(NODE_ENV, self.cfg.encode(id));
            self.procs
                .spawn(id, command)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        if let Err(e) = self.procs.wait_ready(ids, since, Duration::from_secs(20)) {
            panic!("nodes {ids:?}: {e}");
        }
    }

    /// Events of a kind about a slot.
    pub(crate) fn events(&self, kind: &str, slot: i64) -> Vec<&Ev> {
        self.seen.iter().filter(|e| e.is(kind, slot)).collect()
    }

    /// The most runs that were going at once across the nodes, judged from `start` and the
    /// end events (`success`, `failure`, `interrupted`, `lost`, `fenced`), for slots in
    /// `from..=to`. A run with no end counts as going until the last line read.
    pub(crate) fn max_concurrent(&self, from: i64, to: i64) -> usize {
        let end_kinds = ["success", "failure", "interrupted", "lost", "fenced"];
        let last = self.seen.iter().map(|e| e.t).max().unwrap_or(0);
        let mut edges: Vec<(i64, i32)> = Vec::new();
        for s in self.seen.iter().filter(|e| e.kind == "start") {
            let Some(slot) = s.slot().filter(|sl| (from..=to).contains(sl)) else {
                continue;
            };
            let end = self
                .seen
                .iter()
                .filter(|e| {
                    end_kinds.contains(&e.kind.as_str())
                        && e.node == s.node
                        && e.slot() == Some(slot)
                        && e.attempt() == s.attempt()
                        && e.t >= s.t
                })
                .map(|e| e.t)
                .min()
                .unwrap_or(last);
            edges.push((s.t, 1));
            edges.push((end, -1));
        }
        // Ends sort before starts at the same millisecond.
        edges.sort();
        let (mut now, mut max) = (0i32, 0i32);
        for (_, d) in edges {
            now += d;
            max = max.max(now);
        }
        max as usize
    }

    /// The store's history of the job (newest first), read from this process.
    pub(crate) fn history(&self, count: usize) -> Vec<HistoryRecord> {
        history(&self.cfg.store, &self.cfg.job, count)
    }
}

/// The history of `job` in a store (newest first), read from a process that registered no
/// jobs. [B-36]
pub(crate) fn history(store: &str, job: &str, count: usize) -> Vec<HistoryRecord> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let job = JobName::new(job).expect("job name");
        let store = open_store(store).await.expect("open the store").history();
        let records = store.history(&job, count).await.expect("history");
        let _ = store.close().await;
        records
    })
}

/// The attempts of one slot in a history, oldest first.
pub(crate) fn attempts_of(history: &[HistoryRecord], slot: i64) -> Vec<HistoryRecord> {
    let mut v: Vec<HistoryRecord> = history.iter().filter(|r| r.slot == slot).cloned().collect();
    v.sort_by_key(|r| r.attempt);
    v
}

/// One line of a handler's own log: `H <what> <node> <slot> <attempt> <fence> <t>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HandlerLine {
    /// `START`, `STEP-OK`, `STEP-ERR` or `END`.
    pub(crate) what: String,
    /// The node.
    pub(crate) node: String,
    /// The run.
    pub(crate) slot: i64,
    /// The attempt.
    pub(crate) attempt: u32,
    /// The attempt's fence.
    pub(crate) fence: u64,
    /// When (host clock, epoch ms).
    pub(crate) t: i64,
}

/// Reads a handler log written through [`NodeConfig::handler_log`].
pub(crate) fn read_handler_log(path: &Path) -> Vec<HandlerLine> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() != 7 || w[0] != "H" {
                return None;
            }
            Some(HandlerLine {
                what: w[1].to_owned(),
                node: w[2].to_owned(),
                slot: w[3].parse().ok()?,
                attempt: w[4].parse().ok()?,
                fence: w[5].parse().ok()?,
                t: w[6].parse().ok()?,
            })
        })
        .collect()
}
