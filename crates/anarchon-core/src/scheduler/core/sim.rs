//! A cluster of [`Core`]s on virtual time, without a runtime: the core's tests and the
//! deterministic simulator (`world`, feature `sim`) share it.
//!
//! Every core talks to one [`MemoryStore`] whose clock is a [`ManualClock`], so a store call
//! completes at its first poll (`now_or_never`): the in-memory store's model of the store
//! contract is the simulated store. Handlers are modelled by how long they take, what they
//! return and whether they answer cancellation. Every input and effect goes to a timeline
//! (printed when a test fails), whose hash identifies a run.
//!
//! The checks that hold in every run are made as it goes (the harness knows the truth):
//! one start per (job, slot, attempt), fences and attempts strictly increasing per slot,
//! and two handlers of one slot running at once only once the older one was told to stop
//! (its signal cancelled, or its local lease deadline passed, as when its process was
//! frozen past its lease). A violation panics with the invariant and the slot's timeline.

// The tests use parts the simulator does not, and without `sim` nothing is re-exported.
#![cfg_attr(not(test), allow(dead_code))]
#![cfg_attr(not(feature = "sim"), allow(unreachable_pub))]

mod world;

#[cfg_attr(not(feature = "sim"), allow(unused_imports))]
pub use world::{Faults, Report, SimConfig, run, timeline_of};

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::broadcast;

use super::*;
use crate::event::SkipReason;
use crate::memory::{ManualClock, MemoryStore};
use crate::options::{JobKind, JobOptions};
use crate::slot::Schedule;
use crate::store::{ClaimStore, HistoryStore, LeaseStore};

/// 2027-01-15T08:00:00Z (a whole minute).
pub(crate) const T0_MS: i64 = 1_800_000_000_000;
/// One second in µs.
pub(crate) const S: i64 = 1_000_000;

/// How a modelled handler behaves.
#[derive(Debug, Clone)]
pub(crate) struct Behaviour {
    pub(crate) takes: Duration,
    pub(crate) result: std::result::Result<(), String>,
    /// Returns `Err("cancelled")` when its signal is cancelled (after
    /// [`Behaviour::cancel_after`] of the world's choosing; at once in the tests).
    pub(crate) obeys_cancel: bool,
}

impl Behaviour {
    pub(crate) fn ok(takes: Duration) -> Self {
        Behaviour {
            takes,
            result: Ok(()),
            obeys_cancel: true,
        }
    }
}

/// A request's fate on its way (chosen by the world's faults; `Normal` in the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Normal,
    /// The store commits it but the answer never comes back.
    AnswerLost,
}

#[derive(Debug)]
pub(crate) enum Ev {
    /// A call reaches the store.
    Arrive {
        node: usize,
        life: u32,
        id: CallId,
        request: Request,
        sent: i64,
        fate: Fate,
    },
    /// Its answer reaches the node.
    Deliver {
        node: usize,
        life: u32,
        id: CallId,
        answer: Answer,
    },
    HandlerDone {
        node: usize,
        life: u32,
        run: RunId,
        result: std::result::Result<(), String>,
    },
    /// A release notification that was delayed.
    Release { node: usize, life: u32, key: RunKey },
    /// Something of the world (`world.rs`).
    World(world::WorldEv),
}

pub(crate) struct Node {
    pub(crate) core: Option<Core>,
    pub(crate) id: String,
    /// Bumped on crash and restart: events of an earlier life are dropped.
    pub(crate) life: u32,
    /// Restarts under a new instance id so far.
    pub(crate) generation: u32,
    /// No input is processed before this virtual time (a frozen process).
    pub(crate) frozen_until: i64,
    /// Live, not frozen and not stopping since this virtual time (`i64::MAX`: not now).
    pub(crate) up_since: i64,
    /// The instance clock's offset from the true time, µs.
    pub(crate) skew_us: i64,
    pub(crate) releases: Option<broadcast::Receiver<RunKey>>,
    pub(crate) cancelled: HashMap<RunId, CancelCause>,
    pub(crate) returned: HashSet<RunId>,
    /// The shell's local lease deadline of each running handler (monotonic µs).
    pub(crate) deadlines: HashMap<RunId, Micros>,
    /// The slot of each handler started in this life.
    pub(crate) slots: HashMap<RunId, RunKey>,
    pub(crate) starts: Vec<RunInfo>,
    pub(crate) events: Vec<Event>,
    pub(crate) replies: Vec<Result<RunRecord>>,
}

/// A handler running somewhere, as the checker knows it.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    node: usize,
    life: u32,
    run: RunId,
    attempt: u32,
    started: i64,
}

/// What the harness checks as it runs.
#[derive(Default)]
pub(crate) struct Checker {
    /// Handlers running now, by slot.
    pub(crate) running: BTreeMap<RunKey, Vec<Live>>,
    /// The last (attempt, fence) started per slot.
    fences: HashMap<RunKey, (u32, u64)>,
    /// Slots started and not yet seen finished in the store.
    pub(crate) open: BTreeSet<RunKey>,
    /// Attempts seen expired by the liveness check while it was armed.
    pub(crate) expired: BTreeSet<(RunKey, u32)>,
}

impl Checker {
    /// Forgets slots before `slot_ms` (nothing of them can start again).
    pub(crate) fn forget_before(&mut self, slot_ms: i64) {
        self.fences.retain(|k, _| k.slot >= slot_ms);
        self.expired.retain(|(k, _)| k.slot >= slot_ms);
    }
}

/// A cluster of cores on one in-memory store, on virtual time.
pub(crate) struct Sim {
    /// Virtual time, µs since the epoch.
    pub(crate) now: i64,
    pub(crate) start: i64,
    pub(crate) clock: ManualClock,
    pub(crate) store: MemoryStore,
    pub(crate) nodes: Vec<Node>,
    pub(crate) queue: BTreeMap<(i64, u64), Ev>,
    pub(crate) seq: u64,
    /// One way, store call.
    pub(crate) latency: i64,
    pub(crate) store_timeout: Duration,
    pub(crate) timing: LeaseTiming,
    pub(crate) jobs: Vec<Arc<JobDef>>,
    pub(crate) behaviour: Arc<dyn Fn(&RunInfo) -> Behaviour>,
    pub(crate) claims_in_flight: usize,
    pub(crate) timeline: Vec<String>,
    /// Lines kept in `timeline` (older ones are dropped; the hash covers all).
    pub(crate) timeline_cap: usize,
    /// A hash of every timeline line (or, without `detail`, of each line's time, node and
    /// kind).
    pub(crate) hash: u64,
    /// Write every input and effect to the timeline (the tests; a replay). Without it only
    /// the world's own lines are kept, several times faster.
    pub(crate) detail: bool,
    /// Keep per-node starts, events and replies (the tests read them; the world counts).
    pub(crate) keep: bool,
    /// Every (job, slot, attempt) started, by node.
    pub(crate) started: HashMap<(RunKey, u32), usize>,
    /// Calls sent to the store, by operation.
    pub(crate) calls_sent: HashMap<&'static str, u64>,
    /// Events reported, by name (interruptions by cause).
    pub(crate) counts: BTreeMap<String, u64>,
    pub(crate) lease_store: bool,
    /// The next calls of an operation that fail (the store refuses them).
    pub(crate) fail_next: HashMap<&'static str, u32>,
    pub(crate) check: Checker,
    /// The random world: faults and their rates (`None` in the tests).
    pub(crate) world: Option<world::World>,
}

impl Drop for Sim {
    fn drop(&mut self) {
        if std::thread::panicking() && self.world.is_none() {
            let from = self.timeline.len().saturating_sub(400);
            eprintln!(
                "--- timeline (last {} lines) ---",
                self.timeline.len() - from
            );
            for line in &self.timeline[from..] {
                eprintln!("{line}");
            }
        }
    }
}

pub(crate) fn job(name: &str, schedule: Schedule, opts: JobOptions) -> Arc<JobDef> {
    Arc::new(JobDef {
        name: JobName::new(name).unwrap(),
        kind: JobKind::Every,
        schedule,
        opts,
        handler: Arc::new(|_| Box::pin(async { Ok(()) })),
        data: None,
    })
}

pub(crate) fn every(name: &str, interval: Duration, opts: JobOptions) -> Arc<JobDef> {
    job(name, Schedule::every(interval, 0).unwrap(), opts)
}

/// Options without jitter (exact timing in the tests).
pub(crate) fn opts() -> JobOptions {
    JobOptions {
        jitter: Duration::ZERO,
        ..JobOptions::default()
    }
}

pub(crate) fn skips(events: &[Event], reason: SkipReason) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::Skip { reason: r, .. } if *r == reason))
        .count()
}

/// A hash of `bytes` onto `h`, 8 bytes at a time.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x0100_0000_01b3);
    }
    for b in chunks.remainder() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The kind of an effect and its ids, for the hash of a run without full detail.
fn effect_code(e: &Effect) -> u64 {
    match e {
        Effect::Call { id, request, .. } => {
            16 ^ (id << 8) ^ (request.operation().len() as u64) << 40
        }
        Effect::StartHandler(s) => {
            17 ^ (s.run << 8) ^ (u64::from(s.info.attempt) << 40) ^ (s.info.slot_ms() as u64)
        }
        Effect::Cancel { run, .. } => 18 ^ (run << 8),
        Effect::ExtendDeadline { run, at } => 19 ^ (run << 8) ^ (at << 20),
        Effect::Abort { run } => 20 ^ (run << 8),
        Effect::Forget { run } => 21 ^ (run << 8),
        Effect::Emit(ev) => 22 ^ ((ev.name().len() as u64) << 8),
        Effect::Reply { to, .. } => 23 ^ (to << 8),
        Effect::Watching(w) => 24 ^ (u64::from(*w) << 8),
    }
}

impl Sim {
    pub(crate) fn new(nodes: usize, jobs: Vec<Arc<JobDef>>) -> Self {
        let clock = ManualClock::new(T0_MS);
        let store = MemoryStore::with_clock(clock.clone());
        let mut sim = Sim {
            now: T0_MS * 1_000,
            start: T0_MS * 1_000,
            clock,
            store,
            nodes: Vec::new(),
            queue: BTreeMap::new(),
            seq: 0,
            latency: 500,
            store_timeout: Duration::from_secs(2),
            timing: LeaseTiming {
                lease: Duration::from_secs(30),
                heartbeat: Duration::from_secs(5),
            },
            jobs,
            behaviour: Arc::new(|_| Behaviour::ok(Duration::from_millis(100))),
            claims_in_flight: MAX_CLAIMS_IN_FLIGHT,
            timeline: Vec::new(),
            timeline_cap: usize::MAX,
            hash: 0xcbf2_9ce4_8422_2325,
            detail: true,
            keep: true,
            started: HashMap::new(),
            calls_sent: HashMap::new(),
            counts: BTreeMap::new(),
            lease_store: true,
            fail_next: HashMap::new(),
            check: Checker::default(),
            world: None,
        };
        for i in 0..nodes {
            sim.nodes.push(Node {
                core: None,
                id: format!("node-{i}"),
                life: 0,
                generation: 0,
                frozen_until: 0,
                up_since: i64::MAX,
                skew_us: 0,
                releases: None,
                cancelled: HashMap::new(),
                returned: HashSet::new(),
                deadlines: HashMap::new(),
                slots: HashMap::new(),
                starts: Vec::new(),
                events: Vec::new(),
                replies: Vec::new(),
            });
        }
        sim
    }

    pub(crate) fn behave(mut self, f: impl Fn(&RunInfo) -> Behaviour + 'static) -> Self {
        self.behaviour = Arc::new(f);
        self
    }

    pub(crate) fn claim_only(mut self) -> Self {
        self.lease_store = false;
        self
    }

    /// A timeline line: `what` at full detail, else only `code` goes into the hash.
    fn note(&mut self, node: usize, code: u64, what: impl FnOnce() -> String) {
        if self.detail {
            self.log(node, what());
        } else {
            let t = (self.now - self.start) as u64;
            self.hash = mix64(self.hash ^ t);
            self.hash = mix64(self.hash ^ (node as u64) ^ (code << 8));
        }
    }

    pub(crate) fn log(&mut self, node: usize, what: String) {
        let t = self.now - self.start;
        let (secs, frac) = (t.div_euclid(S), t.rem_euclid(S) / 100);
        let line = if node == usize::MAX {
            format!("{secs:>5}.{frac:04}s -- {what}")
        } else {
            format!("{secs:>5}.{frac:04}s n{node} {what}")
        };
        self.hash = fnv(self.hash, line.as_bytes());
        if self.timeline.len() >= self.timeline_cap {
            let half = self.timeline_cap / 2;
            self.timeline.drain(..half);
        }
        self.timeline.push(line);
    }

    pub(crate) fn now_of(&self, node: usize) -> Now {
        Now {
            mono: (self.now - self.start) as Micros,
            epoch_us: self.now + self.nodes[node].skew_us,
        }
    }

    pub(crate) fn config(&self, node: usize) -> CoreConfig {
        let limit = if self.lease_store { 64 } else { 1 };
        CoreConfig {
            instance_id: self.nodes[node].id.as_str().into(),
            timing: self.timing,
            store_timeout: self.store_timeout,
            skew_threshold_ms: 1_000,
            abort_grace: Duration::from_secs(5),
            lease_store: self.lease_store,
            store_kind: "memory",
            limits: Limits {
                claims: limit,
                takeovers: limit,
                finishes: limit,
                claims_in_flight: self.claims_in_flight,
            },
            seed: (node as u64 + 1) ^ self.world.as_ref().map_or(0, |w| w.seed << 8),
        }
    }

    /// Starts (or restarts) a node: a new core with every job.
    pub(crate) fn start(&mut self, node: usize) {
        self.end_life(node);
        let cfg = self.config(node);
        let now = self.now_of(node);
        let jobs = self.jobs.clone();
        let clock = ClockSample {
            offset_ms: -self.nodes[node].skew_us.div_euclid(1_000),
            rtt_ms: 2 * self.latency / 1_000,
        };
        let n = &mut self.nodes[node];
        n.releases = if self.lease_store {
            self.store.subscribe_releases()
        } else {
            None
        };
        n.up_since = self.now.max(n.frozen_until);
        n.core = Some(Core::new(cfg, now, clock, jobs));
        let id = n.id.clone();
        self.log(node, format!("start as {id}"));
        self.drain(node);
    }

    /// The node's process ends (crash, or stop returned): its handlers end with it.
    fn end_life(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        n.core = None;
        n.life += 1;
        n.up_since = i64::MAX;
        n.cancelled.clear();
        n.returned.clear();
        n.deadlines.clear();
        n.slots.clear();
        for lives in self.check.running.values_mut() {
            lives.retain(|l| l.node != node);
        }
        self.check.running.retain(|_, v| !v.is_empty());
    }

    pub(crate) fn crash(&mut self, node: usize) {
        self.end_life(node);
        self.log(node, "crash".into());
    }

    pub(crate) fn freeze(&mut self, node: usize, for_: Duration) {
        let n = &mut self.nodes[node];
        n.frozen_until = self.now + for_.as_micros() as i64;
        if n.core.as_ref().is_some_and(|c| !c.is_stopping()) {
            n.up_since = n.frozen_until;
        }
        self.log(node, format!("freeze {for_:?}"));
    }

    pub(crate) fn command(&mut self, node: usize, command: CoreCommand) {
        let now = self.now_of(node);
        self.log(node, format!("command {command:?}"));
        if matches!(command, CoreCommand::Stop { .. }) {
            self.nodes[node].up_since = i64::MAX;
        }
        if let Some(core) = self.nodes[node].core.as_mut() {
            core.handle_command(now, command);
        }
        self.turn(node);
    }

    pub(crate) fn core(&self, node: usize) -> &Core {
        self.nodes[node].core.as_ref().expect("a live core")
    }

    pub(crate) fn schedule(&mut self, at: i64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    /// End of a loop turn: flush, then carry out the effects.
    pub(crate) fn turn(&mut self, node: usize) {
        let now = self.now_of(node);
        if let Some(core) = self.nodes[node].core.as_mut() {
            core.end_turn(now);
        }
        self.drain(node);
        if let Some(core) = self.nodes[node].core.as_ref()
            && core.is_done()
        {
            let forced = core.stop_forced;
            self.log(node, "stopped".into());
            self.end_life(node);
            if self.world.is_some() {
                self.world_stopped(node, forced);
            }
        }
    }

    /// Panics with the invariant broken, the seed and the timeline of the slot concerned.
    pub(crate) fn violation(&self, invariant: &str, key: Option<&RunKey>, detail: String) -> ! {
        let seed = self
            .world
            .as_ref()
            .map_or_else(|| "-".to_owned(), |w| w.seed.to_string());
        let full = self.world.as_ref().is_some_and(|w| w.full_timeline);
        let lines = timeline_of(&self.timeline, if full { None } else { key });
        // The slot's last lines (its whole story but for the longest runs).
        let lines = &lines[lines
            .len()
            .saturating_sub(if full { usize::MAX } else { 400 })..];
        let lean = if self.detail {
            ""
        } else {
            " (the world's lines only: replay the seed with detail for every input and effect)"
        };
        panic!(
            "VIOLATION seed {seed} at {:.4}s: {invariant}: {detail}\n--- timeline of {}{lean} ---\n{}",
            (self.now - self.start) as f64 / 1e6,
            key.map_or_else(|| "the cluster".to_owned(), ToString::to_string),
            lines.join("\n")
        );
    }

    fn count(&mut self, name: String) {
        *self.counts.entry(name).or_default() += 1;
    }

    /// The checks made when a handler starts.
    fn check_start(&mut self, node: usize, start: &HandlerStart) {
        let key = RunKey::new(start.info.job.clone(), start.info.slot_ms());
        let attempt = start.info.attempt;
        // One start per attempt, cluster-wide.
        if let Some(other) = self.started.insert((key.clone(), attempt), node) {
            self.violation(
                "one start per (job, slot, attempt)",
                Some(&key),
                format!("attempt {attempt} started twice: n{other} and n{node}"),
            );
        }
        // Fences and attempts strictly increase per slot.
        let fence = start.info.fence;
        if let Some(&(a, f)) = self.check.fences.get(&key)
            && (attempt <= a || fence <= f)
        {
            self.violation(
                "fences strictly increase per slot",
                Some(&key),
                format!("attempt {attempt} fence {fence} after attempt {a} fence {f}"),
            );
        }
        self.check.fences.insert(key.clone(), (attempt, fence));
        // An older handler of the slot still running was told to stop.
        let lives = self.check.running.get(&key).cloned().unwrap_or_default();
        for l in lives {
            let n = &self.nodes[l.node];
            if n.life != l.life || n.returned.contains(&l.run) {
                continue;
            }
            let mono = self.now_of(l.node).mono;
            let told = n.cancelled.contains_key(&l.run)
                || n.deadlines.get(&l.run).is_some_and(|d| *d <= mono);
            if !told {
                self.violation(
                    "two handlers of one slot at once",
                    Some(&key),
                    format!(
                        "attempt {attempt} starts on n{node} while attempt {} (started at \
                         {:.4}s) runs on n{} untold (frozen until {:.4}s)",
                        l.attempt,
                        (l.started - self.start) as f64 / 1e6,
                        l.node,
                        (n.frozen_until - self.start) as f64 / 1e6,
                    ),
                );
            }
        }
        self.check
            .running
            .entry(key.clone())
            .or_default()
            .push(Live {
                node,
                life: self.nodes[node].life,
                run: start.run,
                attempt,
                started: self.now,
            });
        self.nodes[node].slots.insert(start.run, key.clone());
        self.check.open.insert(key);
    }

    /// The handler `run` of `node` ended (returned or aborted).
    fn handler_gone(&mut self, node: usize, run: RunId) {
        let life = self.nodes[node].life;
        self.nodes[node].deadlines.remove(&run);
        let Some(key) = self.nodes[node].slots.remove(&run) else {
            return;
        };
        if let Some(v) = self.check.running.get_mut(&key) {
            v.retain(|l| !(l.node == node && l.life == life && l.run == run));
            if v.is_empty() {
                self.check.running.remove(&key);
            }
        }
    }

    pub(crate) fn drain(&mut self, node: usize) {
        loop {
            let Some(effect) = self.nodes[node].core.as_mut().and_then(Core::poll_effect) else {
                return;
            };
            self.note(node, effect_code(&effect), || format!("{effect:?}"));
            let life = self.nodes[node].life;
            match effect {
                Effect::Call { id, request, .. } => {
                    *self.calls_sent.entry(request.operation()).or_default() += 1;
                    let sent = self.now;
                    match self.call_fate() {
                        Some((latency, fate)) => {
                            self.schedule(
                                sent + latency,
                                Ev::Arrive {
                                    node,
                                    life,
                                    id,
                                    request,
                                    sent,
                                    fate,
                                },
                            );
                        }
                        None => {
                            // Lost on its way: the caller times out.
                            let op = request.operation();
                            let answer = request.shape().failed(Error::Timeout {
                                store: "memory",
                                operation: op,
                                after: self.store_timeout,
                            });
                            let at = sent + self.store_timeout.as_micros() as i64;
                            self.schedule(
                                at,
                                Ev::Deliver {
                                    node,
                                    life,
                                    id,
                                    answer,
                                },
                            );
                        }
                    }
                }
                Effect::StartHandler(start) => {
                    if !start.info.manual {
                        self.check_start(node, &start);
                        let reason = start.info.reason.as_str();
                        self.count(format!("start {reason}"));
                    }
                    let b = (self.behaviour)(&start.info);
                    if let Some(d) = start.lease_deadline {
                        self.nodes[node].deadlines.insert(start.run, d);
                    }
                    if self.keep {
                        self.nodes[node].starts.push(start.info.clone());
                    }
                    let at = self.now + b.takes.as_micros() as i64;
                    self.schedule(
                        at,
                        Ev::HandlerDone {
                            node,
                            life,
                            run: start.run,
                            result: b.result.clone(),
                        },
                    );
                }
                Effect::Cancel { run, cause } => {
                    self.nodes[node].cancelled.entry(run).or_insert(cause);
                    let info = self.nodes[node]
                        .core
                        .as_ref()
                        .and_then(|c| c.runs.get(&run))
                        .map(|o| o.info.clone());
                    if let Some(info) = info
                        && (self.behaviour)(&info).obeys_cancel
                    {
                        let at = self.now + self.cancel_after(&info);
                        self.schedule(
                            at,
                            Ev::HandlerDone {
                                node,
                                life,
                                run,
                                result: Err("cancelled".into()),
                            },
                        );
                    }
                }
                Effect::Abort { run } => {
                    self.nodes[node].returned.insert(run);
                    self.handler_gone(node, run);
                }
                Effect::ExtendDeadline { run, at } => {
                    let n = &mut self.nodes[node];
                    if !n.cancelled.contains_key(&run) && n.deadlines.contains_key(&run) {
                        n.deadlines.insert(run, at);
                    }
                }
                Effect::Emit(event) => {
                    let name = match &event {
                        Event::Interrupted { cause, .. } => format!("interrupted {cause:?}"),
                        e => e.name().to_owned(),
                    };
                    self.count(name);
                    if self.keep {
                        self.nodes[node].events.push(event);
                    }
                }
                Effect::Reply { answer, .. } => {
                    if self.keep {
                        self.nodes[node].replies.push(answer);
                    }
                }
                Effect::Forget { .. } | Effect::Watching(_) => {}
            }
        }
    }

    /// One-way latency and fate of a call; `None`: lost on its way.
    fn call_fate(&mut self) -> Option<(i64, Fate)> {
        let base = self.latency;
        match self.world.as_mut() {
            None => Some((base, Fate::Normal)),
            Some(w) => w.call_fate(base),
        }
    }

    /// How long an obeying handler takes to notice its cancellation.
    fn cancel_after(&mut self, info: &RunInfo) -> i64 {
        self.world.as_ref().map_or(0, |w| w.cancel_after(info))
    }

    /// Runs the store's side of a call; `None` when the store hangs.
    fn execute(&self, request: Request) -> Option<Answer> {
        let s = &self.store;
        let lease: &dyn LeaseStore = s;
        let claim: &dyn ClaimStore = s;
        let history: &dyn HistoryStore = s;
        let answer = match request {
            Request::Claim { claims, .. } => {
                Answer::Claims(lease.claim_many(&claims).now_or_never()?)
            }
            Request::ClaimSlot(c) => Answer::Slot(claim.claim_slot(&c).now_or_never()?),
            Request::Heartbeat { leases, lease_ms } => {
                Answer::Renewals(lease.heartbeat(&leases, lease_ms).now_or_never()?)
            }
            Request::Runs(keys) => Answer::Runs(lease.runs(&keys).now_or_never()?),
            Request::Unfinished(jobs) => Answer::Runs(lease.unfinished_runs(&jobs).now_or_never()?),
            Request::TakeOver { takeovers, .. } => {
                Answer::Takeovers(lease.take_over_many(&takeovers).now_or_never()?)
            }
            Request::Finish { writes, .. } => {
                Answer::Writes(lease.finish_many(&writes).now_or_never()?)
            }
            Request::Release(l) => Answer::Released(lease.release(&l).now_or_never()?),
            Request::Record {
                record,
                retention,
                claim_only,
            } => Answer::Recorded(if claim_only {
                claim.record(&record, retention).now_or_never()?
            } else {
                history.record_manual(&record, retention).now_or_never()?
            }),
        };
        Some(answer)
    }

    fn next_timer(&self) -> Option<(i64, usize)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let t = n.core.as_ref()?.poll_timeout()? as i64 + self.start;
                Some((t.max(n.frozen_until), i))
            })
            .min()
    }

    /// Runs the cluster for `d` of virtual time.
    pub(crate) fn run_for(&mut self, d: Duration) {
        let until = self.now + d.as_micros() as i64;
        self.run_until(until);
    }

    pub(crate) fn run_until(&mut self, until: i64) {
        loop {
            let q = self.queue.keys().next().map(|(t, _)| *t);
            let timer = self.next_timer();
            let t = match (q, timer) {
                (Some(q), Some((t, _))) => q.min(t),
                (Some(q), None) => q,
                (None, Some((t, _))) => t,
                (None, None) => break,
            };
            if t > until {
                break;
            }
            self.now = self.now.max(t);
            self.clock.set(self.now.div_euclid(1_000));
            if let Some((tt, node)) = timer
                && tt == t
                && q.is_none_or(|q| q >= t)
            {
                let now = self.now_of(node);
                self.note(node, 1, || "timers due".into());
                if let Some(core) = self.nodes[node].core.as_mut() {
                    core.handle_timeout(now);
                }
                self.turn(node);
                continue;
            }
            if let Some((_, ev)) = self.queue.pop_first() {
                self.event(ev);
            }
        }
        self.now = self.now.max(until);
        self.clock.set(self.now.div_euclid(1_000));
    }

    fn event(&mut self, ev: Ev) {
        match ev {
            Ev::Arrive {
                node,
                life,
                id,
                request,
                sent,
                fate,
            } => {
                let shape = request.shape();
                let op = request.operation();
                let refuse = match self.fail_next.get_mut(op) {
                    Some(n) if *n > 0 => {
                        *n -= 1;
                        true
                    }
                    _ => false,
                };
                let answer = if refuse {
                    Some(shape.failed(Error::store("memory", op, "refused by the test")))
                } else {
                    self.execute(request)
                };
                self.releases();
                let deadline = sent + self.store_timeout.as_micros() as i64;
                let back = self.now
                    + self
                        .world
                        .as_mut()
                        .map_or(self.latency, |w| w.latency(self.latency));
                let (at, answer) = match answer {
                    Some(a) if back <= deadline && fate == Fate::Normal => (back, a),
                    _ => (
                        deadline,
                        shape.failed(Error::Timeout {
                            store: "memory",
                            operation: op,
                            after: self.store_timeout,
                        }),
                    ),
                };
                self.schedule(
                    at,
                    Ev::Deliver {
                        node,
                        life,
                        id,
                        answer,
                    },
                );
            }
            Ev::Deliver {
                node,
                life,
                id,
                answer,
            } => {
                if !self.alive(node, life) {
                    return;
                }
                if self.nodes[node].frozen_until > self.now {
                    let at = self.nodes[node].frozen_until;
                    self.schedule(
                        at,
                        Ev::Deliver {
                            node,
                            life,
                            id,
                            answer,
                        },
                    );
                    return;
                }
                self.note(node, 2 ^ (id << 8), || format!("answer #{id}: {answer:?}"));
                let now = self.now_of(node);
                if let Some(core) = self.nodes[node].core.as_mut() {
                    core.handle_answer(now, id, answer);
                }
                self.turn(node);
            }
            Ev::HandlerDone {
                node,
                life,
                run,
                result,
            } => {
                if !self.alive(node, life) || !self.nodes[node].returned.insert(run) {
                    return;
                }
                if self.nodes[node].frozen_until > self.now {
                    self.nodes[node].returned.remove(&run);
                    let at = self.nodes[node].frozen_until;
                    self.schedule(
                        at,
                        Ev::HandlerDone {
                            node,
                            life,
                            run,
                            result,
                        },
                    );
                    return;
                }
                self.handler_gone(node, run);
                let cause = self.nodes[node].cancelled.get(&run).copied();
                self.note(node, 3 ^ (run << 8), || {
                    format!("handler #{run} returned {result:?} (cause {cause:?})")
                });
                let now = self.now_of(node);
                if let Some(core) = self.nodes[node].core.as_mut() {
                    core.handler_returned(now, run, result, cause);
                }
                self.turn(node);
            }
            Ev::Release { node, life, key } => self.release_to(node, life, key),
            Ev::World(ev) => self.world_event(ev),
        }
    }

    pub(crate) fn alive(&self, node: usize, life: u32) -> bool {
        self.nodes[node].life == life && self.nodes[node].core.is_some()
    }

    /// A release notification for `key` reaches `node` (if still that life and not frozen).
    fn release_to(&mut self, node: usize, life: u32, key: RunKey) {
        if !self.alive(node, life) {
            return;
        }
        if self.nodes[node].frozen_until > self.now {
            // A frozen process reads its socket when it wakes.
            let at = self.nodes[node].frozen_until;
            self.schedule(at, Ev::Release { node, life, key });
            return;
        }
        let now = self.now_of(node);
        self.note(node, 4, || format!("release notification {key}"));
        if let Some(core) = self.nodes[node].core.as_mut() {
            core.handle_release(now, key);
        }
        self.turn(node);
    }

    /// Release notifications reach the live, unfrozen nodes.
    fn releases(&mut self) {
        for node in 0..self.nodes.len() {
            let mut keys = Vec::new();
            if let Some(rx) = self.nodes[node].releases.as_mut() {
                while let Ok(k) = rx.try_recv() {
                    keys.push(k);
                }
            }
            if self.nodes[node].core.is_none() || self.nodes[node].frozen_until > self.now {
                continue;
            }
            let life = self.nodes[node].life;
            for key in keys {
                match self.world.as_mut().map(world::World::release_fate) {
                    None | Some(Some(0)) => self.release_to(node, life, key),
                    Some(None) => self.log(node, format!("release notification {key} lost")),
                    Some(Some(late)) => {
                        let at = self.now + late;
                        self.schedule(at, Ev::Release { node, life, key });
                    }
                }
            }
        }
    }

    pub(crate) fn history(&self, name: &str) -> Vec<RunRecord> {
        let h: &dyn HistoryStore = &self.store;
        h.history(&JobName::new(name).unwrap(), 1_000)
            .now_or_never()
            .unwrap()
            .unwrap()
    }

    pub(crate) fn all_starts(&self) -> Vec<(usize, RunInfo)> {
        let mut out: Vec<(usize, RunInfo)> = self
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| n.starts.iter().map(move |s| (i, s.clone())))
            .collect();
        out.sort_by_key(|(_, s)| (s.slot, s.attempt));
        out
    }

    pub(crate) fn events(&self, node: usize) -> &[Event] {
        &self.nodes[node].events
    }

    pub(crate) fn secs(&self) -> f64 {
        (self.now - self.start) as f64 / S as f64
    }
}

#[cfg(test)]
mod checks {
    use super::*;
    use crate::history::Reason;

    fn start(sim: &Sim, run: RunId, attempt: u32, fence: u64) -> HandlerStart {
        HandlerStart {
            run,
            job: sim.jobs[0].clone(),
            info: RunInfo {
                job: sim.jobs[0].name.clone(),
                slot: crate::history::to_datetime(T0_MS),
                attempt,
                fence,
                reason: Reason::Scheduled,
                manual: false,
                instance_id: "x".into(),
            },
            scheduled_at: T0_MS,
            lease_deadline: Some(30 * S as u64),
            data: None,
        }
    }

    fn sim() -> Sim {
        let mut sim = Sim::new(2, vec![every("j", Duration::from_secs(60), opts())]);
        sim.start(0);
        sim.start(1);
        sim
    }

    #[test]
    #[should_panic(expected = "one start per (job, slot, attempt)")]
    fn a_second_start_of_one_attempt_is_a_violation() {
        let mut sim = sim();
        sim.check_start(0, &start(&sim, 0, 1, 1));
        sim.check_start(1, &start(&sim, 0, 1, 2));
    }

    #[test]
    #[should_panic(expected = "fences strictly increase per slot")]
    fn a_fence_not_above_the_last_is_a_violation() {
        let mut sim = sim();
        sim.check_start(0, &start(&sim, 0, 1, 5));
        sim.nodes[0].returned.insert(0);
        sim.check_start(1, &start(&sim, 0, 2, 5));
    }

    #[test]
    #[should_panic(expected = "two handlers of one slot at once")]
    fn a_takeover_while_the_old_handler_runs_untold_is_a_violation() {
        let mut sim = sim();
        sim.check_start(0, &start(&sim, 0, 1, 1));
        sim.check_start(1, &start(&sim, 0, 2, 2));
    }

    #[test]
    fn a_takeover_after_the_old_handler_was_told_is_not() {
        let mut sim = sim();
        sim.check_start(0, &start(&sim, 0, 1, 1));
        sim.nodes[0].cancelled.insert(0, CancelCause::LeaseLost);
        sim.check_start(1, &start(&sim, 0, 2, 2));
        // Past its local lease deadline (a frozen process) counts as told too.
        sim.nodes[1].deadlines.insert(0, 30 * S as u64);
        sim.now += 31 * S;
        sim.check_start(0, &start(&sim, 1, 3, 3));
    }
}
