//! The random world of the deterministic simulator: one seed chooses the jobs, the handlers'
//! behaviours, and every fault (store latency, lost requests and answers, outages, lost or
//! late release notifications, crashes, freezes, restarts under the same or a new id,
//! graceful stops with short timeouts, clock offsets), each at a rate of [`Faults`] (0 turns
//! it off). Besides the harness's checks made at every start, it checks as it runs that an
//! expired lease is continued within 2 heartbeats + 1 s of its expiry while an instance is up
//! and the store calm, and at the end, with the faults off, that no record is `running`
//! without its handler, and that an idle cluster sends nothing to the store.

// Without `sim`, only the tests use it.
#![cfg_attr(not(feature = "sim"), allow(dead_code))]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use super::{Behaviour, Ev, Fate, S, Sim, T0_MS};
use crate::event::RunInfo;
use crate::history::RunStatus;
use crate::ids::{JobName, RunKey};
use crate::memory::Health as StoreHealth;
use crate::options::{CatchUp, JobOptions, LeaseTiming};
use crate::scheduler::JobDef;
use crate::scheduler::core::CoreCommand;
use crate::slot::Schedule;
use crate::store::{LeaseStore, Overlap};

/// The rate of each fault; 0 turns one off. [`Faults::default`] turns every one on.
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    /// Share of store calls answered slowly (0.5–3 s one way: past the 2 s store timeout
    /// about half of the time, so answers also come after the caller's deadline).
    pub slow_call: f64,
    /// Share of store calls lost on their way (no answer; the caller times out).
    pub lost_request: f64,
    /// Share of store calls carried out whose answer is lost (a commit the caller never
    /// learns of).
    pub lost_answer: f64,
    /// Whole-store outages (0.1–10 s, failing or hanging) per hour.
    pub outages_per_hour: f64,
    /// Share of release notifications lost.
    pub release_lost: f64,
    /// Share of release notifications late (0.1–5 s).
    pub release_late: f64,
    /// Crashes per instance-hour (restarted after 0.1–30 s).
    pub crashes_per_node_hour: f64,
    /// Freezes (0.1–10 s) per instance-hour.
    pub freezes_per_node_hour: f64,
    /// Graceful stops (timeout 0.1–10 s, restarted after 1–30 s) per instance-hour.
    pub stops_per_node_hour: f64,
    /// Share of restarts under a new instance id.
    pub new_id: f64,
    /// Share of (re)starts with a clock offset within the skew threshold (up to 0.9 s).
    pub skew_within: f64,
    /// Share of (re)starts with a clock offset beyond the skew threshold (1–3 s).
    pub skew_beyond: f64,
    /// Share of attempts whose handler fails.
    pub handler_error: f64,
    /// Share of attempts whose handler ignores cancellation.
    pub handler_ignores_cancel: f64,
    /// Share of attempts whose handler takes longer than the lease (1–3 leases).
    pub handler_long: f64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            slow_call: 0.002,
            lost_request: 0.002,
            lost_answer: 0.002,
            outages_per_hour: 4.0,
            release_lost: 0.05,
            release_late: 0.05,
            crashes_per_node_hour: 2.0,
            freezes_per_node_hour: 4.0,
            stops_per_node_hour: 2.0,
            new_id: 0.5,
            skew_within: 0.4,
            skew_beyond: 0.1,
            handler_error: 0.1,
            handler_ignores_cancel: 0.1,
            handler_long: 0.05,
        }
    }
}

impl Faults {
    /// Every fault off.
    pub fn none() -> Self {
        Faults {
            slow_call: 0.0,
            lost_request: 0.0,
            lost_answer: 0.0,
            outages_per_hour: 0.0,
            release_lost: 0.0,
            release_late: 0.0,
            crashes_per_node_hour: 0.0,
            freezes_per_node_hour: 0.0,
            stops_per_node_hour: 0.0,
            new_id: 0.0,
            skew_within: 0.0,
            skew_beyond: 0.0,
            handler_error: 0.0,
            handler_ignores_cancel: 0.0,
            handler_long: 0.0,
        }
    }
}

/// One simulated run.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Every random choice comes from it.
    pub seed: u64,
    /// Instances.
    pub nodes: usize,
    /// Simulated hours with faults (then the quiet and idle checks, a few minutes more).
    pub hours: f64,
    /// The faults' rates.
    pub faults: Faults,
    /// Every input and effect in the timeline (a replay; several times slower). Without it a
    /// violation's timeline shows only the world's own lines: replay the seed with it.
    pub detail: bool,
    /// A violation prints the whole timeline kept (the last 200,000 lines), not only the
    /// lines of the slot concerned.
    pub full_timeline: bool,
}

impl SimConfig {
    /// `seed` on `nodes` instances for `hours`, every fault on.
    pub fn new(seed: u64, nodes: usize, hours: f64) -> Self {
        SimConfig {
            seed,
            nodes,
            hours,
            faults: Faults::default(),
            full_timeline: false,
            detail: false,
        }
    }
}

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Instances.
    pub nodes: usize,
    /// Jobs (every, cron, at).
    pub jobs: usize,
    /// Simulated seconds, the checks at the end included.
    pub simulated_secs: f64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Events and starts, by name (`start takeover`, `interrupted HandedOver`, ...).
    pub events: BTreeMap<String, u64>,
    /// Store calls sent.
    pub calls: u64,
    /// Handlers started (every reason).
    pub runs: u64,
    /// Attempts started by a backup.
    pub takeovers: u64,
    /// Runs handed over by a stopping owner.
    pub handovers: u64,
    /// Expired leases checked for continuation (the liveness check fired).
    pub liveness_checks: u64,
    /// A hash of the whole timeline: the same seed gives the same hash.
    pub hash: u64,
}

impl Report {
    /// Simulated instance-hours (instances × simulated hours).
    pub fn instance_hours(&self) -> f64 {
        self.nodes as f64 * self.simulated_secs / 3_600.0
    }
}

/// The lines of `timeline` about `key` (its job and slot) and the world's own lines (faults,
/// starts, crashes, freezes, stops); every line when `key` is `None`.
pub fn timeline_of(timeline: &[String], key: Option<&RunKey>) -> Vec<String> {
    let Some(key) = key else {
        return timeline.to_vec();
    };
    let slot_ms = key.slot.to_string();
    let slot_dt = format!("{:?}", crate::history::to_datetime(key.slot));
    let job = format!("{:?}", key.job.as_str());
    let display = key.to_string();
    let world = [
        " start as ",
        " crash",
        " freeze ",
        " stopped",
        " command Stop",
        " ! ",
    ];
    timeline
        .iter()
        .filter(|l| {
            ((l.contains(&slot_ms) || l.contains(&slot_dt)) && l.contains(&job))
                || l.contains(&display)
                || world.iter().any(|w| l.contains(w))
        })
        .cloned()
        .collect()
}

/// splitmix64: one seeded stream for every choice.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// In `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `true` with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// In `lo..hi` (µs or any unit), `lo` when empty.
    pub(crate) fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        lo + (self.next() % (hi - lo) as u64) as i64
    }

    /// An exponential gap with `per_hour` events per hour, µs; `None` when off.
    pub(crate) fn gap(&mut self, per_hour: f64) -> Option<i64> {
        if per_hour <= 0.0 {
            return None;
        }
        let u = 1.0 - self.unit();
        Some((-u.ln() * 3_600.0 / per_hour * 1e6) as i64 + 1)
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn unit_of(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A stable hash of one attempt, for its behaviour (the same every time it is asked).
fn attempt_hash(seed: u64, info: &RunInfo, salt: u64) -> u64 {
    let mut h = mix(seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for b in info.job.as_str().bytes() {
        h = mix(h ^ u64::from(b));
    }
    mix(h ^ info.slot_ms() as u64 ^ (u64::from(info.attempt) << 48))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorldEv {
    Crash(usize),
    Freeze(usize),
    Stop(usize),
    Restart(usize),
    Outage,
    Heal,
    Sweep,
}

/// The world's state inside a [`Sim`].
pub(crate) struct World {
    pub(crate) seed: u64,
    pub(crate) full_timeline: bool,
    rng: Rng,
    faults: Faults,
    counts: BTreeMap<&'static str, u64>,
    /// No new faults (the end's checks).
    quiet: bool,
    /// The store had no fault since this time (µs).
    calm_since: i64,
    /// Sweeps so far (the liveness check runs in each).
    sweeps: u64,
    liveness_checks: u64,
    /// Restarts pending, by node.
    restarting: Vec<bool>,
    now: i64,
}

impl World {
    fn count(&mut self, what: &'static str) {
        *self.counts.entry(what).or_default() += 1;
    }

    fn disturb(&mut self) {
        self.calm_since = self.now;
    }

    /// One way latency of a call, µs.
    pub(crate) fn latency(&mut self, base: i64) -> i64 {
        if self.quiet {
            return base;
        }
        if self.rng.chance(self.faults.slow_call) {
            self.count("slow call");
            self.disturb();
            return self.rng.range(500_000, 3_000_000);
        }
        if self.rng.chance(0.1) {
            self.rng.range(2_000, 50_000)
        } else {
            self.rng.range(200, 2_000)
        }
    }

    /// The fate of a call sent now; `None`: lost on its way.
    pub(crate) fn call_fate(&mut self, base: i64) -> Option<(i64, Fate)> {
        if !self.quiet {
            if self.rng.chance(self.faults.lost_request) {
                self.count("lost request");
                self.disturb();
                return None;
            }
            if self.rng.chance(self.faults.lost_answer) {
                self.count("lost answer");
                self.disturb();
                return Some((self.latency(base), Fate::AnswerLost));
            }
        }
        Some((self.latency(base), Fate::Normal))
    }

    /// `None`: lost; `Some(0)`: now; else late by that many µs.
    pub(crate) fn release_fate(&mut self) -> Option<i64> {
        if self.quiet {
            return Some(0);
        }
        if self.rng.chance(self.faults.release_lost) {
            self.count("release lost");
            self.disturb();
            return None;
        }
        if self.rng.chance(self.faults.release_late) {
            self.count("release late");
            self.disturb();
            return Some(self.rng.range(100_000, 5_000_000));
        }
        Some(0)
    }

    /// How long an obeying handler takes to notice its cancellation, µs (0–500 ms).
    pub(crate) fn cancel_after(&self, info: &RunInfo) -> i64 {
        (unit_of(attempt_hash(self.seed, info, 4)) * 500_000.0) as i64
    }
}

/// What the handlers do: chosen per attempt from the seed.
fn behaviours(
    seed: u64,
    faults: &Faults,
    lease: Duration,
    intervals: HashMap<JobName, i64>,
) -> impl Fn(&RunInfo) -> Behaviour + 'static {
    let (long, error, ignores) = (
        faults.handler_long,
        faults.handler_error,
        faults.handler_ignores_cancel,
    );
    let lease_us = lease.as_micros() as i64;
    move |info: &RunInfo| {
        let interval = intervals.get(&info.job).copied().unwrap_or(10 * S);
        let r = unit_of(attempt_hash(seed, info, 1));
        let takes_us = if r < long {
            lease_us + (r / long * 2.0 * lease_us as f64) as i64
        } else if r < long + 0.15 {
            let f = 0.5 + 1.5 * (r - long) / 0.15;
            ((interval as f64 * f) as i64).min(150 * S)
        } else {
            let max = (interval / 2).clamp(20_000, 10 * S);
            10_000 + (r * max as f64) as i64
        };
        let failed = unit_of(attempt_hash(seed, info, 2)) < error;
        Behaviour {
            takes: Duration::from_micros(takes_us as u64),
            result: if failed { Err("boom".into()) } else { Ok(()) },
            obeys_cancel: unit_of(attempt_hash(seed, info, 3)) >= ignores,
        }
    }
}

/// The jobs of a seed: a mix of `every` (1–10 s and 30–300 s), cron and `at`, overlap skip
/// and allow, each catch-up policy, `max_attempts` 1–4, some with a timeout.
fn jobs(rng: &mut Rng, hours: f64) -> (Vec<Arc<JobDef>>, HashMap<JobName, i64>) {
    let n = rng.range(3, 7);
    let mut jobs = Vec::new();
    let mut intervals = HashMap::new();
    for i in 0..n {
        let name = format!("j{i}");
        let r = rng.unit();
        let (schedule, interval) = if r < 0.55 {
            let s = rng.range(1, 11);
            (Schedule::every(Duration::from_secs(s as u64), 0), s * S)
        } else if r < 0.75 {
            let s = rng.range(30, 301);
            (Schedule::every(Duration::from_secs(s as u64), 0), s * S)
        } else if r < 0.9 {
            let every = [2, 3, 5, 10, 15, 20, 30][rng.range(0, 7) as usize];
            (
                Schedule::cron(&format!("*/{every} * * * * *"), None),
                every * S,
            )
        } else {
            let at = T0_MS + rng.range(1_000, ((hours * 3_600_000.0) as i64).max(2_000));
            (Ok(Schedule::at_ms(at)), 60 * S)
        };
        let Ok(schedule) = schedule else {
            continue;
        };
        let opts = JobOptions {
            jitter: if rng.chance(0.5) {
                Duration::ZERO
            } else {
                Duration::from_millis(rng.range(0, 2_000) as u64)
            },
            overlap: if rng.chance(0.2) {
                Overlap::Allow
            } else {
                Overlap::Skip
            },
            catch_up: match rng.range(0, 4) {
                0 => CatchUp::None,
                1 => CatchUp::All { max: 3 },
                _ => CatchUp::Latest,
            },
            max_attempts: rng.range(1, 5) as u32,
            timeout: rng
                .chance(0.25)
                .then(|| Duration::from_secs(rng.range(1, 60) as u64)),
            ..JobOptions::default()
        };
        let def = super::job(&name, schedule, opts);
        intervals.insert(def.name.clone(), interval);
        jobs.push(def);
    }
    (jobs, intervals)
}

/// Runs one seed: the hours with faults, then the quiet and idle checks. Panics on a
/// violation, with the seed, the invariant and the timeline of the slot concerned.
pub fn run(cfg: &SimConfig) -> Report {
    let mut rng = Rng::new(cfg.seed);
    let (jobs, intervals) = jobs(&mut rng, cfg.hours);
    let timing = match rng.range(0, 3) {
        0 => LeaseTiming {
            lease: Duration::from_secs(4),
            heartbeat: Duration::from_secs(1),
        },
        1 => LeaseTiming {
            lease: Duration::from_secs(10),
            heartbeat: Duration::from_millis(2_500),
        },
        _ => LeaseTiming {
            lease: Duration::from_secs(30),
            heartbeat: Duration::from_secs(5),
        },
    };
    let n_jobs = jobs.len();
    let behave = behaviours(cfg.seed, &cfg.faults, timing.lease, intervals);
    let mut sim = Sim::new(cfg.nodes.max(1), jobs).behave(behave);
    sim.timing = timing;
    sim.latency = 1_000;
    sim.keep = false;
    sim.detail = cfg.detail;
    sim.timeline_cap = 200_000;
    sim.world = Some(World {
        seed: cfg.seed,
        full_timeline: cfg.full_timeline,
        rng,
        faults: cfg.faults.clone(),
        counts: BTreeMap::new(),
        quiet: false,
        calm_since: sim.now,
        sweeps: 0,
        liveness_checks: 0,
        restarting: vec![false; sim.nodes.len()],
        now: sim.now,
    });
    for node in 0..sim.nodes.len() {
        sim.skew(node);
        sim.start(node);
        sim.plan_node_faults(node);
    }
    sim.plan(WorldEv::Outage);
    let t = sim.now + S;
    sim.schedule(t, Ev::World(WorldEv::Sweep));
    sim.run_for(Duration::from_secs_f64(cfg.hours.max(0.0) * 3_600.0));
    sim.quiet_and_idle();
    let w = sim.world.as_ref().expect("the world");
    let events = sim.counts.clone();
    let get = |k: &str| events.get(k).copied().unwrap_or(0);
    Report {
        seed: cfg.seed,
        nodes: sim.nodes.len(),
        jobs: n_jobs,
        simulated_secs: sim.secs(),
        faults: w.counts.clone(),
        runs: events
            .iter()
            .filter(|(k, _)| k.starts_with("start "))
            .map(|(_, v)| v)
            .sum(),
        takeovers: get("start takeover"),
        handovers: get("interrupted HandedOver"),
        liveness_checks: w.liveness_checks,
        calls: sim.calls_sent.values().sum(),
        events,
        hash: sim.hash,
    }
}

impl Sim {
    fn world(&mut self) -> &mut World {
        let now = self.now;
        let w = self.world.as_mut().expect("the world");
        w.now = now;
        w
    }

    fn log_world(&mut self, what: String) {
        self.log(usize::MAX, format!("! {what}"));
    }

    /// A new clock offset for a (re)start.
    fn skew(&mut self, node: usize) {
        let w = self.world();
        let (within, beyond) = (w.faults.skew_within, w.faults.skew_beyond);
        let r = w.rng.unit();
        let sign = if w.rng.chance(0.5) { 1 } else { -1 };
        let skew = if r < beyond {
            w.count("skew beyond threshold");
            sign * w.rng.range(1_000_000, 3_000_000)
        } else if r < beyond + within {
            w.count("skew within threshold");
            sign * w.rng.range(0, 900_000)
        } else {
            0
        };
        self.nodes[node].skew_us = skew;
    }

    fn plan(&mut self, ev: WorldEv) {
        let w = self.world();
        let rate = match ev {
            WorldEv::Crash(_) => w.faults.crashes_per_node_hour,
            WorldEv::Freeze(_) => w.faults.freezes_per_node_hour,
            WorldEv::Stop(_) => w.faults.stops_per_node_hour,
            WorldEv::Outage => w.faults.outages_per_hour,
            _ => 0.0,
        };
        if let Some(gap) = w.rng.gap(rate) {
            let at = self.now + gap;
            self.schedule(at, Ev::World(ev));
        }
    }

    fn plan_node_faults(&mut self, node: usize) {
        self.plan(WorldEv::Crash(node));
        self.plan(WorldEv::Freeze(node));
        self.plan(WorldEv::Stop(node));
    }

    fn restart_later(&mut self, node: usize, lo: i64, hi: i64) {
        let w = self.world();
        if w.restarting[node] {
            return;
        }
        w.restarting[node] = true;
        let at = w.now + w.rng.range(lo, hi);
        self.schedule(at, Ev::World(WorldEv::Restart(node)));
    }

    /// A node's stop returned.
    pub(crate) fn world_stopped(&mut self, node: usize, forced: bool) {
        if forced {
            self.world().count("stop timeout passed");
        }
        self.restart_later(node, S, 30 * S);
    }

    pub(crate) fn world_event(&mut self, ev: WorldEv) {
        let quiet = self.world().quiet;
        match ev {
            WorldEv::Crash(node) => {
                if quiet {
                    return;
                }
                self.plan(ev);
                if self.nodes[node].core.is_some() {
                    self.world().count("crash");
                    self.crash(node);
                    self.restart_later(node, S / 10, 30 * S);
                }
            }
            WorldEv::Freeze(node) => {
                if quiet {
                    return;
                }
                self.plan(ev);
                if self.nodes[node].core.is_some() && self.nodes[node].frozen_until <= self.now {
                    let d = self.world().rng.range(S / 10, 10 * S);
                    self.world().count("freeze");
                    self.freeze(node, Duration::from_micros(d as u64));
                }
            }
            WorldEv::Stop(node) => {
                if quiet {
                    return;
                }
                self.plan(ev);
                if self.nodes[node]
                    .core
                    .as_ref()
                    .is_some_and(|c| !c.is_stopping())
                    && self.nodes[node].frozen_until <= self.now
                {
                    let d = self.world().rng.range(S / 10, 10 * S);
                    self.world().count("stop");
                    self.command(
                        node,
                        CoreCommand::Stop {
                            timeout: Duration::from_micros(d as u64),
                        },
                    );
                }
            }
            WorldEv::Restart(node) => {
                self.world().restarting[node] = false;
                if self.nodes[node].core.is_some() {
                    return;
                }
                let w = self.world();
                let new_id = !quiet && w.rng.chance(w.faults.new_id);
                w.count(if new_id {
                    "restart as a new id"
                } else {
                    "restart as the same id"
                });
                if new_id {
                    let n = &mut self.nodes[node];
                    n.generation += 1;
                    n.id = format!("node-{node}.{}", n.generation);
                }
                if quiet {
                    self.nodes[node].skew_us = 0;
                } else {
                    self.skew(node);
                }
                self.start(node);
            }
            WorldEv::Outage => {
                if quiet {
                    return;
                }
                self.plan(ev);
                let w = self.world();
                let hang = w.rng.chance(0.5);
                let d = w.rng.range(S / 10, 10 * S);
                w.count(if hang {
                    "outage (hanging)"
                } else {
                    "outage (failing)"
                });
                w.disturb();
                self.store.set_health(if hang {
                    StoreHealth::Hanging
                } else {
                    StoreHealth::Unavailable
                });
                self.log_world(format!("store outage {d} µs, hanging {hang}"));
                let at = self.now + d;
                self.schedule(at, Ev::World(WorldEv::Heal));
            }
            WorldEv::Heal => {
                self.store.set_health(StoreHealth::Healthy);
                self.world().disturb();
                self.log_world("store healthy".into());
            }
            WorldEv::Sweep => {
                self.sweep();
                let t = self.now + S;
                self.schedule(t, Ev::World(WorldEv::Sweep));
            }
        }
    }

    /// Every second: an expired lease is continued within 2 heartbeats + 1 s of its expiry
    /// while an instance is up and the store calm (the bound of guarantees.md: lease +
    /// 2 heartbeats + store latency after the last renewal).
    fn sweep(&mut self) {
        let sweeps = {
            let w = self.world();
            w.sweeps += 1;
            w.sweeps
        };
        if sweeps % 3_600 == 0 {
            // Forget slots older than 2 h: nothing of them can start again.
            let old = self.now / 1_000 - 7_200_000;
            self.started.retain(|(k, _), _| k.slot >= old);
            self.check.forget_before(old);
        }
        if !self.lease_store || self.jobs.is_empty() {
            return;
        }
        let keys: Vec<RunKey> = self.check.open.iter().cloned().collect();
        let lease: &dyn LeaseStore = &self.store;
        let Some(Ok(views)) = lease.runs(&keys).now_or_never() else {
            return;
        };
        let running: HashMap<&RunKey, &crate::store::RunView> = views
            .iter()
            .filter(|v| v.status == RunStatus::Running)
            .map(|v| (&v.run, v))
            .collect();
        let done: Vec<RunKey> = keys
            .iter()
            .filter(|k| !running.contains_key(k))
            .cloned()
            .collect();
        for k in done {
            self.check.open.remove(&k);
        }
        let hb = self.timing.heartbeat.as_micros() as i64;
        let timeout = self.store_timeout.as_micros() as i64;
        let bound = 2 * hb + S;
        let calm_since = self.world().calm_since;
        let mut late = None;
        let mut checked = 0;
        for v in running.values() {
            let expired = v.expires_at * 1_000;
            if self.now <= expired {
                continue;
            }
            let window = expired - hb - timeout;
            let up = self
                .nodes
                .iter()
                .any(|n| n.core.is_some() && n.up_since <= window);
            if calm_since > window || !up {
                continue;
            }
            if self.check.expired.insert((v.run.clone(), v.attempt)) {
                checked += 1;
            }
            if self.now - expired <= bound {
                continue;
            }
            late = Some((*v).clone());
            break;
        }
        if let Some(v) = late {
            self.violation(
                "an expired lease is continued within 2 heartbeats + 1 s",
                Some(&v.run),
                format!(
                    "attempt {} (owner {:?}) expired at {:.4}s and is still running",
                    v.attempt,
                    v.owner,
                    (v.expires_at * 1_000 - self.start) as f64 / 1e6
                ),
            );
        }
        self.world().liveness_checks += checked;
    }

    /// The end: faults off, every instance up; after 2 leases no record is `running`
    /// without its handler; then with every job removed, nothing reaches the store.
    fn quiet_and_idle(&mut self) {
        self.world().quiet = true;
        self.store.set_health(StoreHealth::Healthy);
        self.log_world("quiet".into());
        for node in 0..self.nodes.len() {
            if self.nodes[node].core.is_none() {
                self.restart_later(node, 0, 1);
            }
        }
        let lease = self.timing.lease;
        self.run_for(lease * 2 + Duration::from_secs(12));
        self.check_quiet();
        // Idle: no job left.
        self.log_world("idle".into());
        let names: Vec<JobName> = self.jobs.iter().map(|j| j.name.clone()).collect();
        self.jobs.clear();
        for node in 0..self.nodes.len() {
            for name in &names {
                if self.nodes[node].core.is_some() {
                    self.command(node, CoreCommand::Remove(name.clone()));
                }
            }
        }
        for _ in 0..40 {
            if self.check.running.is_empty() {
                break;
            }
            self.run_for(Duration::from_secs(10));
        }
        self.run_for(lease * 2 + Duration::from_secs(12));
        if self.check.running.is_empty() && self.lease_store {
            let lease: &dyn LeaseStore = &self.store;
            let left: Vec<_> = lease
                .unfinished_runs(&names)
                .now_or_never()
                .and_then(|r| r.ok())
                .unwrap_or_default();
            if let Some(v) = left.first() {
                self.violation(
                    "no record running once the cluster is quiet",
                    Some(&v.run),
                    format!(
                        "attempt {} of owner {:?} is still running with no handler left \
                         anywhere",
                        v.attempt, v.owner
                    ),
                );
            }
        }
        let before: u64 = self.calls_sent.values().sum();
        self.run_for(Duration::from_secs(600));
        let after: u64 = self.calls_sent.values().sum();
        if after != before && self.check.running.is_empty() {
            self.violation(
                "no store call while idle",
                None,
                format!("{} calls in 10 idle minutes", after - before),
            );
        }
    }

    /// After 2 quiet leases: every `running` record has its handler running on its owner.
    fn check_quiet(&mut self) {
        let names: Vec<JobName> = self.jobs.iter().map(|j| j.name.clone()).collect();
        if !self.lease_store {
            return;
        }
        let lease: &dyn LeaseStore = &self.store;
        let views = match lease.unfinished_runs(&names).now_or_never() {
            Some(Ok(v)) => v,
            other => self.violation("the store answers once quiet", None, format!("{other:?}")),
        };
        for v in views {
            let owner = self
                .nodes
                .iter()
                .position(|n| n.core.is_some() && Some(n.id.as_str()) == v.owner.as_deref());
            let handler = owner.is_some_and(|o| {
                self.check
                    .running
                    .get(&v.run)
                    .is_some_and(|l| l.iter().any(|l| l.node == o && l.attempt == v.attempt))
            });
            // Its claim's or takeover's answer, or its result, may be on the way: the owner
            // still tracks it under a valid lease (the idle check below then sees it end).
            let tracked = owner.is_some_and(|o| {
                self.nodes[o]
                    .core
                    .as_ref()
                    .is_some_and(|c| c.is_here(&v.run))
            }) && v.expires_at > v.store_now;
            if !handler && !tracked {
                self.violation(
                    "no record running once the cluster is quiet",
                    Some(&v.run),
                    format!(
                        "attempt {} of owner {:?} is running without its handler",
                        v.attempt, v.owner
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_runs_with_every_fault_and_breaks_no_invariant() {
        let r = run(&SimConfig::new(1, 3, 0.25));
        assert!(r.runs > 100, "{r:?}");
        assert!(r.faults.values().sum::<u64>() > 5, "{r:?}");
    }

    #[test]
    fn the_same_seed_gives_the_same_timeline_and_another_seed_another() {
        let cfg = SimConfig::new(7, 3, 0.1);
        let a = run(&cfg);
        let b = run(&cfg);
        assert_eq!(a.hash, b.hash, "the same seed, two timelines");
        assert_eq!(a, b);
        let c = run(&SimConfig { seed: 8, ..cfg });
        assert_ne!(a.hash, c.hash, "another seed, the same timeline");
    }
}
