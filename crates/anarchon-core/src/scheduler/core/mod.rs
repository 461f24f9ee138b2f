//! The scheduler of one instance as a plain value: every decision, no I/O.
//!
//! [`Core`] owns the jobs' next slots and the timer table, the runs this instance owns (each
//! an [`OwnerRun`](super::run::OwnerRun) machine), the runs it backs up (each a
//! [`Watch`](super::watch::Watch) machine), catch-up, liveness and self-fencing, stop, the
//! health figures, which store calls go out together, and its own bounds. It is fed inputs
//! with the time passed in ([`Core::handle_timeout`], [`Core::handle_answer`],
//! [`Core::handle_command`], [`Core::handler_returned`], [`Core::handle_release`],
//! [`Core::end_turn`]) and hands back [`Effect`]s ([`Core::poll_effect`]) and its next
//! wake-up ([`Core::poll_timeout`]). It reads no clock, spawns nothing, holds no store and
//! draws no random number of its own (jitter comes from the seed it was built with), so a
//! test drives it through virtual time without a runtime. The driver (`driver.rs`) is the
//! tokio shell that carries the effects out.
//!
//! Where each decision lives:
//! - `slots.rs`: which slot to claim and when, claim outcomes, catch-up;
//! - `owned.rs`: runs this instance owns: start, result writes, heartbeats, self-fencing;
//! - `backup.rs`: watched runs and takeovers;
//! - `calls.rs`: store requests as values, batching, the bounds on what is in flight.

mod backup;
mod calls;
mod owned;
mod slots;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

pub(crate) use calls::{Answer, CallId, Limits, MAX_CLAIMS_IN_FLIGHT, Request};

use super::JobDef;
use super::telemetry;
use super::watch::Watch;
use crate::context::{CancelCause, Data};
use crate::error::{Error, Result};
use crate::event::{Event, RunInfo};
use crate::history::RunRecord;
use crate::ids::{EpochMs, JobName, RunKey};
use crate::options::LeaseTiming;
use crate::store::Lease;

/// Microseconds on the shell's monotonic clock (from its origin).
pub(crate) type Micros = u64;

/// The time of an input: the monotonic clock (timers, renewal ages, round trips) and the
/// instance clock (slots), read together by the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Now {
    /// Monotonic µs since the shell's origin.
    pub(crate) mono: Micros,
    /// Instance clock, µs since the epoch.
    pub(crate) epoch_us: i64,
}

impl Now {
    /// Instance clock, ms since the epoch.
    pub(crate) fn epoch_ms(&self) -> EpochMs {
        self.epoch_us.div_euclid(1_000)
    }
}

/// `d` in µs, saturating.
pub(crate) fn micros(d: Duration) -> Micros {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// One run this instance owns, as the core knows it.
pub(crate) type RunId = u64;

/// A `run_now` caller waiting for its answer; the shell keeps the channel.
pub(crate) type ReplyTo = u64;

/// The difference between the store's clock and this instance's, measured from one answer
/// that carried the store's time. Its error is at most half the round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ClockSample {
    /// Store clock minus instance clock, ms.
    pub(crate) offset_ms: i64,
    /// Round trip of the call that measured it, ms.
    pub(crate) rtt_ms: i64,
}

impl ClockSample {
    /// From the store time `store_ms` read by a call sent at `sent` and answered at `now`.
    pub(crate) fn measure(store_ms: EpochMs, sent: Micros, now: Now) -> Self {
        let rtt = (now.mono.saturating_sub(sent) / 1_000).min(i64::MAX as u64) as i64;
        let local_mid = now.epoch_ms().saturating_sub(rtt / 2);
        ClockSample {
            offset_ms: store_ms.saturating_sub(local_mid),
            rtt_ms: rtt,
        }
    }
}

/// The clock-skew event when this instance's clock (`local_ms`) and the store's differ by
/// more than `threshold_ms` beyond `allowance` (the measurement's error). [B-20]
pub(crate) fn skew_event(
    local_ms: EpochMs,
    store_ms: EpochMs,
    allowance: i64,
    threshold_ms: u64,
) -> Option<Event> {
    let skew = local_ms.saturating_sub(store_ms);
    (skew.saturating_abs().saturating_sub(allowance) > threshold_ms.min(i64::MAX as u64) as i64)
        .then(|| Event::ClockSkew {
            skew: chrono::TimeDelta::try_milliseconds(skew).unwrap_or(chrono::TimeDelta::MIN),
        })
}

/// What the core needs to know of its configuration and store.
#[derive(Debug, Clone)]
pub(crate) struct CoreConfig {
    pub(crate) instance_id: Arc<str>,
    pub(crate) timing: LeaseTiming,
    pub(crate) store_timeout: Duration,
    pub(crate) skew_threshold_ms: u64,
    pub(crate) abort_grace: Duration,
    /// A lease store (else claim-only).
    pub(crate) lease_store: bool,
    /// The store's kind, for error messages.
    pub(crate) store_kind: &'static str,
    /// How many calls of each kind the store takes in one round trip.
    pub(crate) limits: Limits,
    /// Seeds the jitter's random numbers.
    pub(crate) seed: u64,
}

/// What the shell must do.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Send a store call; its answer comes back through [`Core::handle_answer`] with `id`.
    /// `run`: the run it belongs to (its span is the call's parent).
    Call {
        id: CallId,
        request: Request,
        run: Option<RunId>,
    },
    /// Start a run's handler; it reports back through [`Core::handler_returned`].
    StartHandler(Box<HandlerStart>),
    /// Cancel the run's signal.
    Cancel { run: RunId, cause: CancelCause },
    /// Move the handler's local lease deadline (unless its signal already tripped).
    ExtendDeadline { run: RunId, at: Micros },
    /// Abort the run's handler task now.
    Abort { run: RunId },
    /// The core forgot the run: the shell may drop what it keeps for it.
    Forget { run: RunId },
    /// Report an event.
    Emit(Event),
    /// Answer a `run_now` caller.
    Reply {
        to: ReplyTo,
        answer: Result<RunRecord>,
    },
    /// Tell the store whether this instance watches runs (SQLite polls for other
    /// processes' releases only meanwhile).
    Watching(bool),
}

/// What the shell needs to start a handler.
#[derive(Debug)]
pub(crate) struct HandlerStart {
    pub(crate) run: RunId,
    pub(crate) job: Arc<JobDef>,
    pub(crate) info: RunInfo,
    pub(crate) scheduled_at: EpochMs,
    /// The local lease deadline (leased runs).
    pub(crate) lease_deadline: Option<Micros>,
    /// `run_now`'s data.
    pub(crate) data: Option<Data>,
}

/// A command from the scheduler's handle.
#[derive(Debug)]
pub(crate) enum CoreCommand {
    Add(Arc<JobDef>),
    Remove(JobName),
    RunNow {
        job: Arc<JobDef>,
        data: Option<Data>,
        reply: ReplyTo,
    },
    Stop {
        timeout: Duration,
    },
}

/// The health figures the core keeps (the shell publishes them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CoreHealth {
    /// Runs owned under a lease that have not recorded their result yet.
    pub(crate) leases_held: u64,
    /// Consecutive failed store calls reached [`UNREACHABLE_AFTER`].
    pub(crate) store_unreachable: bool,
    /// The last store error since the store last answered.
    pub(crate) last_error: Option<String>,
    /// Slots not claimed in time, in all.
    pub(crate) slots_late: u64,
}

/// Consecutive failed store calls after which the store counts as unreachable.
pub(crate) const UNREACHABLE_AFTER: u32 = 3;

#[derive(Debug)]
enum Timer {
    Due { job: Arc<JobDef>, slot: EpochMs },
    Heartbeat,
    Watch,
    Timeout { run: RunId },
    AbortGrace { run: RunId },
    StopDeadline,
}

/// The core of one scheduler instance. See the module docs.
pub(crate) struct Core {
    cfg: CoreConfig,
    /// The time of the input being handled.
    now: Now,
    jobs: HashMap<JobName, Arc<JobDef>>,
    timers: BTreeMap<(Micros, u64), Timer>,
    seq: u64,
    runs: HashMap<RunId, owned::Owned>,
    next_run: RunId,
    /// Leased runs owned here, by key.
    held: HashMap<RunKey, RunId>,
    /// Claims and takeovers in flight (or queued), by key.
    in_flight: HashMap<RunKey, u32>,
    /// Releases sent on the side, in flight.
    side_writes: u32,
    watches: BTreeMap<RunKey, Watch>,
    /// Watched runs whose claim or takeover this instance gave up waiting for (their
    /// outcome is unknown): a commit found later is an orphan of this life, released at once.
    gave_up: HashSet<RunKey>,
    heartbeat_armed: bool,
    heartbeat_in_flight: bool,
    watch_armed: bool,
    watch_in_flight: bool,
    catch_up: HashMap<JobName, VecDeque<EpochMs>>,
    stopping: bool,
    stop_forced: bool,
    last_skew_event: Option<Micros>,
    clock: ClockSample,
    /// Consecutive failed store calls.
    failures: u32,
    /// Jobs whose claim failed since the store last answered: caught up on recovery.
    missed: HashSet<JobName>,
    /// What the store was last told by [`Effect::Watching`].
    watching: bool,
    /// Runs owned and watched as last published to the metrics gauges.
    gauges: (usize, usize),
    queues: calls::Queues,
    calls: HashMap<CallId, calls::Pending>,
    next_call: CallId,
    effects: VecDeque<Effect>,
    health: CoreHealth,
    rng: u64,
}

impl Core {
    /// A core for `jobs`, started at `now` with the clock sample `start()` measured: it
    /// schedules every job and lists the unfinished runs (orphans first, then catch-up).
    pub(crate) fn new(
        cfg: CoreConfig,
        now: Now,
        clock: ClockSample,
        jobs: Vec<Arc<JobDef>>,
    ) -> Self {
        let rng = cfg.seed | 1;
        let mut core = Core {
            cfg,
            now,
            jobs: HashMap::new(),
            timers: BTreeMap::new(),
            seq: 0,
            runs: HashMap::new(),
            next_run: 0,
            held: HashMap::new(),
            in_flight: HashMap::new(),
            side_writes: 0,
            watches: BTreeMap::new(),
            gave_up: HashSet::new(),
            heartbeat_armed: false,
            heartbeat_in_flight: false,
            watch_armed: false,
            watch_in_flight: false,
            catch_up: HashMap::new(),
            stopping: false,
            stop_forced: false,
            last_skew_event: None,
            clock,
            failures: 0,
            missed: HashSet::new(),
            watching: false,
            gauges: (usize::MAX, usize::MAX),
            queues: calls::Queues::default(),
            calls: HashMap::new(),
            next_call: 0,
            effects: VecDeque::new(),
            health: CoreHealth::default(),
            rng,
        };
        core.begin(jobs);
        core
    }

    // ----- the surface --------------------------------------------------------------------

    /// The next effect to carry out.
    pub(crate) fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// When the core wants [`Core::handle_timeout`] next.
    pub(crate) fn poll_timeout(&self) -> Option<Micros> {
        self.timers.keys().next().map(|(t, _)| *t)
    }

    /// The health figures.
    pub(crate) fn health(&self) -> &CoreHealth {
        &self.health
    }

    /// Stop was asked for and nothing is left to wait for (or its timeout passed): the shell
    /// may end.
    pub(crate) fn is_done(&self) -> bool {
        self.stopping && (self.stop_forced || self.settled())
    }

    /// `stop()` was asked for.
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// The store was last told this instance watches runs.
    pub(crate) fn is_watching(&self) -> bool {
        self.watching
    }

    /// The job of a run this instance owns.
    pub(crate) fn job_of(&self, run: RunId) -> Option<&JobName> {
        self.runs.get(&run).map(|o| &o.info.job)
    }

    /// Handles the timers due at `now`.
    pub(crate) fn handle_timeout(&mut self, now: Now) {
        self.now = now;
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now.mono {
                break;
            }
            let timer = entry.remove();
            self.timer(timer);
        }
    }

    /// A command from the handle.
    pub(crate) fn handle_command(&mut self, now: Now, command: CoreCommand) {
        self.now = now;
        match command {
            CoreCommand::Add(job) => {
                if !self.stopping {
                    self.jobs.insert(job.name.clone(), job.clone());
                    self.schedule_next(&job, self.now_ms());
                }
            }
            CoreCommand::Remove(name) => {
                self.jobs.remove(&name);
                self.catch_up.remove(&name);
                self.missed.remove(&name);
                self.watches.retain(|k, w| {
                    k.job != name || w.state == super::watch::WatchState::TakingOver
                });
                self.gave_up.retain(|k| k.job != name);
            }
            CoreCommand::RunNow { job, data, reply } => self.run_now(job, data, reply),
            CoreCommand::Stop { timeout } => {
                if !self.stopping {
                    self.begin_stop(timeout);
                }
            }
        }
    }

    /// A store call was answered (or failed, or timed out).
    pub(crate) fn handle_answer(&mut self, now: Now, id: CallId, answer: Answer) {
        self.now = now;
        self.answered(id, answer);
    }

    /// A release notification named `key`: look at that run now instead of at the next
    /// poll. [B-17]
    pub(crate) fn handle_release(&mut self, now: Now, key: RunKey) {
        self.now = now;
        self.feed_watch(&key, super::watch::WatchInput::Released);
    }

    /// The loop turn ended: what it produced goes out, in batches.
    pub(crate) fn end_turn(&mut self, now: Now) {
        self.now = now;
        self.shed_queued_claims();
        self.flush_claims();
        self.flush_reads();
        self.flush_takeovers();
        self.flush_finishes();
        self.announce_watching();
        self.publish_gauges();
    }

    // ----- helpers shared by the parts ------------------------------------------------------

    fn now_ms(&self) -> EpochMs {
        self.now.epoch_ms()
    }

    fn push(&mut self, effect: Effect) {
        self.effects.push_back(effect);
    }

    /// The monotonic µs at which the instance clock reads `epoch_ms`, or `None` when that is
    /// too far ahead to represent (never due).
    fn mono_at(&self, epoch_ms: EpochMs) -> Option<Micros> {
        // In µs: a clock read in whole ms would put the timer up to 1 ms after the instant.
        let delta = epoch_ms
            .saturating_mul(1_000)
            .saturating_sub(self.now.epoch_us)
            .max(0) as u64;
        self.now.mono.checked_add(delta)
    }

    fn arm(&mut self, at: Micros, timer: Timer) {
        self.seq += 1;
        self.timers.insert((at, self.seq), timer);
    }

    fn arm_after(&mut self, after: Duration, timer: Timer) {
        if let Some(at) = self.now.mono.checked_add(micros(after)) {
            self.arm(at, timer);
        }
    }

    fn lease_ms(&self) -> u64 {
        self.cfg.timing.lease_ms()
    }

    fn heartbeat_every(&self) -> Duration {
        Duration::from_millis(self.cfg.timing.heartbeat_ms())
    }

    /// A random delay in `0..=max_ms` (xorshift64* on the seed: jitter needs spread, not
    /// secrecy).
    fn random_up_to(&mut self, max_ms: u64) -> u64 {
        if max_ms == 0 {
            return 0;
        }
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        match max_ms.checked_add(1) {
            Some(n) => r % n,
            None => r,
        }
    }

    /// Nothing is left in flight: stop may return.
    fn settled(&self) -> bool {
        self.runs.is_empty() && self.in_flight.is_empty() && self.side_writes == 0
    }

    fn emit(&mut self, event: Event) {
        if let Event::Error { message, .. } = &event {
            self.health.last_error = Some(message.clone());
        }
        self.push(Effect::Emit(event));
    }

    fn error(&mut self, operation: &'static str, job: Option<&JobName>, e: &Error) {
        self.emit(Event::Error {
            operation,
            job: job.cloned(),
            // The whole source chain: "claim: connection reset: os error 104".
            message: telemetry::error_chain(e),
        });
    }

    /// A store call answered (`ok`) or failed. After failures, an answer means the store is
    /// back: report it healthy and catch up the jobs whose claims failed meanwhile.
    fn count(&mut self, ok: bool) {
        if ok {
            if self.failures == 0 {
                return;
            }
            self.failures = 0;
            self.health.store_unreachable = false;
            self.health.last_error = None;
            let missed: Vec<JobName> = self.missed.drain().collect();
            for name in missed {
                if let Some(job) = self.jobs.get(&name).cloned() {
                    self.catch_up_job(&job);
                }
            }
        } else {
            self.failures = self.failures.saturating_add(1);
            if self.failures >= UNREACHABLE_AFTER {
                self.health.store_unreachable = true;
            }
        }
    }

    /// `count` slots of `job` not claimed in time: counted for `health()` and metrics.
    fn note_late(&mut self, job: &JobName, count: u64) {
        self.health.slots_late = self.health.slots_late.saturating_add(count);
        telemetry::slots_late(&self.cfg.instance_id, job.as_str(), count);
    }

    /// Tells the store when this instance starts or stops watching runs.
    fn announce_watching(&mut self) {
        let want = !self.watches.is_empty() && !self.stopping;
        if want != self.watching && self.cfg.lease_store {
            self.watching = want;
            self.push(Effect::Watching(want));
        }
    }

    /// Publishes runs owned and watched when they changed (two map lengths: O(1)).
    fn publish_gauges(&mut self) {
        let now = (self.held.len(), self.watches.len());
        if now != self.gauges {
            self.gauges = now;
            telemetry::gauges(&self.cfg.instance_id, now.0, now.1);
        }
    }

    fn is_here(&self, key: &RunKey) -> bool {
        self.held.contains_key(key) || self.in_flight.contains_key(key)
    }

    fn flight_start(&mut self, key: &RunKey) {
        *self.in_flight.entry(key.clone()).or_default() += 1;
    }

    fn flight_end(&mut self, key: &RunKey) {
        if let Some(n) = self.in_flight.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.in_flight.remove(key);
            }
        }
    }

    fn timer(&mut self, timer: Timer) {
        match timer {
            Timer::Due { job, slot } => self.slot_due(job, slot),
            Timer::Heartbeat => self.heartbeat(),
            Timer::Watch => self.watch_tick(),
            Timer::Timeout { run } => self.feed_owner(run, super::run::OwnerInput::TimeoutElapsed),
            Timer::AbortGrace { run } => {
                self.feed_owner(run, super::run::OwnerInput::AbortGraceElapsed)
            }
            Timer::StopDeadline => self.stop_deadline(),
        }
    }

    /// Stops scheduling and watching, cancels every run; claims and takeovers in flight are
    /// waited for (a win is handed straight over), and so are result writes, until the
    /// stop timeout. [B-17, B-34]
    fn begin_stop(&mut self, timeout: Duration) {
        self.stopping = true;
        self.timers
            .retain(|_, t| !matches!(t, Timer::Due { .. } | Timer::Watch));
        self.watch_armed = false;
        self.watches
            .retain(|_, w| w.state == super::watch::WatchState::TakingOver);
        self.gave_up.clear();
        self.catch_up.clear();
        self.missed.clear();
        self.drop_queued_claims();
        let ids: Vec<RunId> = self.runs.keys().copied().collect();
        for id in ids {
            self.feed_owner(id, super::run::OwnerInput::Stop);
        }
        // A timeout too long to represent waits as long as it takes.
        self.arm_after(timeout, Timer::StopDeadline);
    }

    /// Stop's timeout passed: runs still going are no longer heartbeated (a backup takes
    /// over after the lease) and their handlers are aborted; nothing else is waited for.
    fn stop_deadline(&mut self) {
        let ids: Vec<RunId> = self.runs.keys().copied().collect();
        for id in ids {
            self.feed_owner(id, super::run::OwnerInput::StopDeadline);
        }
        self.stop_forced = true;
    }
}

/// A view of a lease for the `RunInfo` of a run started from it.
fn info_of(lease: &Lease) -> RunInfo {
    RunInfo {
        job: lease.run.job.clone(),
        slot: crate::history::to_datetime(lease.run.slot),
        attempt: lease.attempt,
        fence: lease.fence,
        reason: lease.reason,
        manual: false,
        instance_id: lease.instance_id.clone(),
    }
}

impl std::fmt::Debug for JobDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobDef")
            .field("name", &self.name)
            .field("schedule", &self.schedule)
            .finish_non_exhaustive()
    }
}

#[cfg(any(test, feature = "sim"))]
pub(crate) mod sim;
#[cfg(test)]
mod tests;

/// The table of claim outcomes and what the core does with each, rendered by driving a core;
/// a test checks that `docs/architecture.md` shows exactly this table.
#[cfg(test)]
pub(crate) mod table {
    use super::*;
    use crate::history::Reason;
    use crate::options::{JobKind, JobOptions};
    use crate::slot::Schedule;
    use crate::store::{ClaimOutcome, Lease};

    const T0: EpochMs = 1_800_000_000_000;

    fn core(catch_up: bool) -> (Core, Now) {
        let job = Arc::new(JobDef {
            name: JobName::new("j").unwrap(),
            kind: JobKind::Every,
            schedule: Schedule::every(Duration::from_secs(60), 0).unwrap(),
            opts: JobOptions {
                jitter: Duration::ZERO,
                catch_up: if catch_up {
                    crate::options::CatchUp::Latest
                } else {
                    crate::options::CatchUp::None
                },
                ..JobOptions::default()
            },
            handler: Arc::new(|_| Box::pin(async { Ok(()) })),
            data: None,
        });
        let now = Now {
            mono: 0,
            epoch_us: (T0 + 1) * 1_000,
        };
        let cfg = CoreConfig {
            instance_id: "me".into(),
            timing: LeaseTiming::default(),
            store_timeout: Duration::from_secs(2),
            skew_threshold_ms: 1_000,
            abort_grace: Duration::from_secs(5),
            lease_store: true,
            store_kind: "memory",
            limits: Limits {
                claims: 8,
                takeovers: 8,
                finishes: 8,
                claims_in_flight: MAX_CLAIMS_IN_FLIGHT,
            },
            seed: 1,
        };
        let mut core = Core::new(cfg, now, ClockSample::default(), vec![job]);
        // Answer the start's listing with no run: catch-up (when on) claims slot T0.
        let id = match core.poll_effect() {
            Some(Effect::Call { id, .. }) => id,
            other => panic!("{other:?}"),
        };
        core.handle_answer(now, id, Answer::Runs(Ok(vec![])));
        core.end_turn(now);
        (core, now)
    }

    fn effect_name(e: &Effect) -> Option<String> {
        Some(match e {
            Effect::Call { request, .. } => match request {
                Request::Release(_) => "release the won lease".into(),
                Request::Claim { claims, .. } => format!("claim ({})", claims[0].reason.as_str()),
                other => format!("call {}", other.operation()),
            },
            Effect::StartHandler(_) => "start the handler".into(),
            Effect::Emit(Event::Skip { reason, .. }) => format!("skip ({})", reason.as_str()),
            Effect::Emit(Event::Error { operation, .. }) => format!("emit error ({operation})"),
            Effect::Emit(event) => format!("emit {}", event.name()),
            Effect::Watching(true) => "back up".into(),
            _ => return None,
        })
    }

    /// Every claim outcome, for a scheduled claim and a catch-up one, as markdown rows.
    pub(crate) fn render() -> String {
        let lease = Lease {
            run: RunKey::new(JobName::new("j").unwrap(), T0),
            attempt: 1,
            fence: 1,
            instance_id: "me".into(),
            reason: Reason::Scheduled,
            scheduled_at: T0,
            started_at: T0 + 1,
            expires_at: T0 + 30_001,
        };
        let answers: Vec<(&str, Result<ClaimOutcome>)> = vec![
            ("won", Ok(ClaimOutcome::Won(lease))),
            ("taken", Ok(ClaimOutcome::Taken)),
            ("late", Ok(ClaimOutcome::Late { store_now: T0 })),
            (
                "overlap",
                Ok(ClaimOutcome::Overlap {
                    running_slot: T0 - 60_000,
                }),
            ),
            (
                "failed or timed out",
                Err(Error::store("memory", "claim", "down")),
            ),
        ];
        let mut out = String::from("| claim | answer | while | effects |\n|---|---|---|---|\n");
        for catch_up in [false, true] {
            for stopping in [false, true] {
                for (name, answer) in &answers {
                    let (mut core, mut now) = core(catch_up);
                    if !catch_up {
                        now.epoch_us = (T0 + 60_000) * 1_000;
                        now.mono = 60_000_000;
                        core.handle_timeout(now);
                        core.end_turn(now);
                    }
                    let id = std::iter::from_fn(|| core.poll_effect())
                        .find_map(|e| match e {
                            Effect::Call {
                                id,
                                request: Request::Claim { .. },
                                ..
                            } => Some(id),
                            _ => None,
                        })
                        .expect("a claim");
                    if stopping {
                        core.handle_command(
                            now,
                            CoreCommand::Stop {
                                timeout: Duration::from_secs(5),
                            },
                        );
                        while core.poll_effect().is_some() {}
                    }
                    let answer = match answer {
                        Ok(o) => Answer::Claims(Ok(vec![o.clone()])),
                        Err(_) => Answer::Claims(Err(Error::store("memory", "claim", "down"))),
                    };
                    core.handle_answer(now, id, answer);
                    core.end_turn(now);
                    let fx: Vec<String> = std::iter::from_fn(|| core.poll_effect())
                        .filter_map(|e| effect_name(&e))
                        .collect();
                    let fx = if fx.is_empty() {
                        "—".to_owned()
                    } else {
                        fx.join(", ")
                    };
                    let claim = if catch_up { "catch-up" } else { "scheduled" };
                    let when = if stopping { "stopping" } else { "running" };
                    out.push_str(&format!("| {claim} | {name} | {when} | {fx} |\n"));
                }
            }
        }
        out
    }
}
