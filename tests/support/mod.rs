//! Shared harness of the slow multi-process tests (`cluster`, `scenarios`): a scheduler node
//! that runs in a child process, and the parent's view of the nodes' events.
//!
//! A test binary runs a node by re-executing itself (`std::env::current_exe()`) with the
//! arguments `child_node --exact --ignored --nocapture` and the node's configuration in the
//! environment variable [`NODE_ENV`]; its `child_node` test (ignored, so no runner counts it
//! as a test) calls [`child_main`], which does nothing without that variable. The node prints one line per scheduler event on stdout
//! (`EVENT start n1 t=... slot=... attempt=1 reason=scheduled`), which the parent reads
//! through [`Cluster`]. A node exits when its stdin closes, so no node outlives its test.
// Each test binary uses a different part of the harness.
#![allow(dead_code)]

pub(crate) mod examples;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anarchon::store::RunRecord as HistoryRecord;
use anarchon::{Event, JobName, Leased, Mode, Scheduler};

/// The environment variable that carries a child node's configuration.
pub(crate) const NODE_ENV: &str = "ANARCHON_TEST_NODE";

/// Milliseconds since the epoch on the host clock.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A job name unique to this run.
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

pub(crate) fn unique_job(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), now_ms() % 100_000_000)
}

/// A temporary SQLite path unique to this run; [`remove_sqlite`] deletes it.
pub(crate) fn temp_db(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "anarchon-{name}-{}-{}.db",
        std::process::id(),
        now_ms()
    ))
}

/// Deletes an SQLite file and its WAL companions.
pub(crate) fn remove_sqlite(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
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
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(3);
    });
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
    let mut events = scheduler.events();
    let printer = tokio::spawn({
        let id = id.to_owned();
        async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                match events.recv().await {
                    Ok(e) => println!("{}", event_line(&id, &e)),
                    Err(RecvError::Lagged(n)) => println!("LAGGED {id} n={n}"),
                    Err(RecvError::Closed) => break,
                }
            }
        }
    });
    scheduler.start().await?;
    println!("READY {id} t={} pid={}", now_ms(), std::process::id());
    let why = stop.await;
    println!("STOPPING {id} t={} cause={why}", now_ms());
    scheduler.stop(Duration::from_secs(5)).await?;
    drop(scheduler);
    let _ = tokio::time::timeout(Duration::from_secs(1), printer).await;
    println!("EXIT {id} t={}", now_ms());
    Ok(())
}

/// `EVENT <name> <node> t=<ms> slot=<ms> attempt=<n> reason=<r> [skip=..] [cause=..]`, with
/// spaces in causes written as `_`.
fn event_line(id: &str, event: &Event) -> String {
    let t = now_ms();
    let run = |r: &anarchon::RunInfo| {
        format!(
            "slot={} attempt={} reason={} fence={}",
            r.slot_ms(),
            r.attempt,
            r.reason,
            r.fence
        )
    };
    let rest = match event {
        Event::Start(r) | Event::Lost(r) | Event::Fenced(r) => run(r),
        Event::Success { run: r, .. } => run(r),
        Event::Failure { run: r, error } => {
            format!("{} cause={}", run(r), error.to_string().replace(' ', "_"))
        }
        Event::Interrupted { run: r, cause } => {
            format!("{} cause={}", run(r), cause.as_str().replace(' ', "_"))
        }
        Event::Skip { slot, reason, .. } => {
            format!("slot={} skip={}", slot.timestamp_millis(), reason.as_str())
        }
        Event::Error {
            operation, message, ..
        } => format!("op={operation} cause={}", message.replace(' ', "_")),
        other => format!("cause={}", format!("{other:?}").replace(' ', "_")),
    };
    format!("EVENT {} {id} t={t} {rest}", event.name())
}

// ----- the parent -----------------------------------------------------------------------

/// One line a node printed.
#[derive(Debug, Clone)]
pub(crate) struct Ev {
    /// `start`, `skip`, `success`, ... or `READY`, `STOPPING`, `EXIT`, `FAILED`.
    pub(crate) kind: String,
    /// The node.
    pub(crate) node: String,
    /// When the node printed it (host clock, epoch ms).
    pub(crate) t: i64,
    /// The other `key=value` fields, `_` turned back into spaces.
    pub(crate) fields: HashMap<String, String>,
}

impl Ev {
    /// The slot, if any.
    pub(crate) fn slot(&self) -> Option<i64> {
        self.fields.get("slot")?.parse().ok()
    }
    /// The attempt, if any.
    pub(crate) fn attempt(&self) -> Option<u32> {
        self.fields.get("attempt")?.parse().ok()
    }
    /// A field, or "".
    pub(crate) fn field(&self, key: &str) -> &str {
        self.fields.get(key).map_or("", String::as_str)
    }
    /// This kind of event about this slot.
    pub(crate) fn is(&self, kind: &str, slot: i64) -> bool {
        self.kind == kind && self.slot() == Some(slot)
    }
}

fn parse(node: &str, line: &str) -> Option<Ev> {
    // libtest may print `test child_node ... ` in front of the first line.
    let at = [
        "EVENT ",
        "READY ",
        "STOPPING ",
        "EXIT ",
        "FAILED ",
        "LAGGED ",
    ]
    .iter()
    .filter_map(|tag| line.find(tag))
    .min()?;
    let mut words = line[at..].split_whitespace();
    let mut kind = words.next()?.to_owned();
    if kind == "EVENT" {
        kind = words.next()?.to_owned();
    }
    words.next()?;
    let fields: HashMap<String, String> = words
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.replace('_', " ")))
        .collect();
    let t = fields
        .get("t")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(now_ms);
    Some(Ev {
        kind,
        node: node.to_owned(),
        t,
        fields,
    })
}

/// Nodes in child processes, all running one [`NodeConfig`], and everything they printed.
pub(crate) struct Cluster {
    /// The configuration every node gets.
    pub(crate) cfg: NodeConfig,
    children: BTreeMap<String, Child>,
    frozen: Vec<String>,
    tx: Sender<Ev>,
    rx: Receiver<Ev>,
    /// Every line read so far, in arrival order.
    pub(crate) seen: Vec<Ev>,
    /// `(epoch ms, what)` of each signal sent, for the log.
    pub(crate) signals: Vec<(i64, String)>,
}

impl Cluster {
    /// No node yet.
    pub(crate) fn new(cfg: NodeConfig) -> Self {
        let (tx, rx) = channel();
        Cluster {
            cfg,
            children: BTreeMap::new(),
            frozen: Vec::new(),
            tx,
            rx,
            seen: Vec::new(),
            signals: Vec::new(),
        }
    }

    /// Starts the nodes and waits until each printed `READY` (panics after 20 s).
    pub(crate) fn start(&mut self, ids: &[&str]) {
        let since = self.seen.len();
        for id in ids {
            let exe = std::env::current_exe().expect("the test binary");
            let mut child = Command::new(exe)
                .args([
                    "child_node",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(NODE_ENV, self.cfg.encode(id))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a node");
            let stdout = child.stdout.take().expect("stdout");
            let tx = self.tx.clone();
            let node = id.to_string();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(ev) = parse(&node, &line)
                        && tx.send(ev).is_err()
                    {
                        break;
                    }
                }
            });
            self.children.insert(id.to_string(), child);
        }
        let want = ids.len();
        let ok = self.wait_for(Duration::from_secs(20), |seen| {
            if let Some(f) = seen[since..].iter().find(|e| e.kind == "FAILED") {
                panic!("node {} failed: {:?}", f.node, f.fields);
            }
            (seen[since..].iter().filter(|e| e.kind == "READY").count() >= want).then_some(())
        });
        assert!(ok.is_some(), "nodes {ids:?} did not start within 20 s");
    }

    /// Reads lines until `found` returns something or `within` passes.
    pub(crate) fn wait_for<T>(
        &mut self,
        within: Duration,
        mut found: impl FnMut(&[Ev]) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(t) = found(&self.seen) {
                return Some(t);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self.rx.recv_timeout(left) {
                Ok(ev) => self.seen.push(ev),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Waits for the first event matching `pred` (searching everything seen so far).
    pub(crate) fn wait_event(
        &mut self,
        within: Duration,
        pred: impl Fn(&Ev) -> bool,
    ) -> Option<Ev> {
        self.wait_for(within, |seen| seen.iter().find(|e| pred(e)).cloned())
    }

    /// Keeps reading lines for `d`.
    pub(crate) fn pause(&mut self, d: Duration) {
        self.wait_for(d, |_| None::<()>);
    }

    /// Keeps reading lines until the host clock reaches `t` (epoch ms).
    pub(crate) fn pause_until(&mut self, t: i64) {
        let d = (t - now_ms()).max(0) as u64;
        self.pause(Duration::from_millis(d));
    }

    /// The pid of a node.
    pub(crate) fn pid(&self, id: &str) -> u32 {
        self.children[id].id()
    }

    /// True while the node's process is alive.
    pub(crate) fn is_running(&mut self, id: &str) -> bool {
        self.children
            .get_mut(id)
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Sends a signal (`"INT"`, `"TERM"`, `"STOP"`, `"CONT"`, `"KILL"`) with `kill`; returns
    /// when it was sent (epoch ms). `KILL` also reaps the process.
    pub(crate) fn signal(&mut self, id: &str, sig: &str) -> i64 {
        let pid = self.pid(id);
        let t = now_ms();
        let ok = Command::new("kill")
            .args([format!("-{sig}"), pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{sig} {pid} ({id}) failed");
        self.signals.push((t, format!("SIG{sig} -> {id}")));
        match sig {
            "STOP" => self.frozen.push(id.to_owned()),
            "CONT" => self.frozen.retain(|f| f != id),
            "KILL" => {
                if let Some(mut c) = self.children.remove(id) {
                    let _ = c.wait();
                }
                self.frozen.retain(|f| f != id);
            }
            _ => {}
        }
        t
    }

    /// Waits until a node's process exits (after `INT`/`TERM`); false after `within`.
    pub(crate) fn wait_exit(&mut self, id: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            match self.children.get_mut(id).map(|c| c.try_wait()) {
                None | Some(Ok(Some(_))) | Some(Err(_)) => {
                    self.children.remove(id);
                    return true;
                }
                Some(Ok(None)) => {}
            }
            if Instant::now() >= deadline {
                return false;
            }
            self.pause(Duration::from_millis(25));
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

    /// Every line read, as text, for a failure message.
    pub(crate) fn log(&self) -> String {
        let t0 = self.seen.first().map_or(0, |e| e.t);
        let mut lines: Vec<(i64, String)> = self
            .seen
            .iter()
            .map(|e| {
                let mut f: Vec<String> = e
                    .fields
                    .iter()
                    .filter(|(k, _)| k.as_str() != "t")
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                f.sort();
                (e.t, format!("{} {} {}", e.node, e.kind, f.join(" ")))
            })
            .collect();
        lines.extend(self.signals.iter().cloned());
        lines.sort_by_key(|(t, _)| *t);
        lines
            .iter()
            .map(|(t, l)| format!("  {:>7.3}s {l}", (t - t0) as f64 / 1000.0))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Stops every node: SIGCONT to frozen ones, SIGINT to all, SIGKILL after 5 s.
    pub(crate) fn shutdown(&mut self) {
        for id in std::mem::take(&mut self.frozen) {
            if let Some(c) = self.children.get(&id) {
                let _ = Command::new("kill")
                    .args(["-CONT", &c.id().to_string()])
                    .status();
            }
        }
        for c in self.children.values() {
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for c in self.children.values_mut() {
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        self.children.clear();
    }

    /// The store's history of the job (newest first), read from this process.
    pub(crate) fn history(&self, count: usize) -> Vec<HistoryRecord> {
        history(&self.cfg.store, &self.cfg.job, count)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown();
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

/// Deletes a temporary SQLite file when dropped.
pub(crate) struct TempDb(pub PathBuf);

impl TempDb {
    /// A fresh temporary path; see [`temp_db`].
    pub(crate) fn new(name: &str) -> Self {
        TempDb(temp_db(name))
    }

    /// The store spec of this file.
    pub(crate) fn spec(&self) -> StoreSpec {
        format!("sqlite:{}", self.0.display())
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        remove_sqlite(&self.0);
    }
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
