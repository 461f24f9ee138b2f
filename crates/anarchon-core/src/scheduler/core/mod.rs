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
mod pace;
mod slots;
mod types;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

pub(crate) use types::{
    Answer, CallId, ClockSample, CoreCommand, CoreConfig, CoreHealth, Effect, HandlerStart, Limits,
    Micros, Now, Request, RunId, SWEPT_PER_JOB, UNREACHABLE_AFTER, micros, skew_event,
};
use types::{Owned, Pending, Queues, ReplyTo, Timer};
// What the tests (`tests.rs`, `table`) name through `use super::*`.
#[cfg(test)]
use crate::{context::CancelCause, error::Result, history::RunRecord, options::LeaseTiming};

use super::JobDef;
use super::telemetry;
use super::watch::Watch;
use crate::error::Error;
use crate::event::{Event, RunInfo, StoreOperation};
use crate::ids::{EpochMs, JobName, RunKey};
use crate::store::Lease;

/// Timers handled in one turn at most (see [`Core::handle_timeout`]): a batch of claims of
/// the stores that batch most (256).
pub(crate) const TIMERS_PER_TURN: usize = 256;

/// The core of one scheduler instance. See the module docs.
pub(crate) struct Core {
    cfg: CoreConfig,
    /// The time of the input being handled.
    now: Now,
    jobs: HashMap<JobName, Arc<JobDef>>,
    timers: BTreeMap<(Micros, u64), Timer>,
    seq: u64,
    runs: HashMap<RunId, Owned>,
    next_run: RunId,
    /// Leased runs owned here, by key.
    held: HashMap<RunKey, RunId>,
    /// Claims and takeovers in flight (or queued), by key.
    in_flight: HashMap<RunKey, u32>,
    /// Releases sent on the side, in flight.
    side_writes: u32,
    /// Runs seen unfinished (or named by a release notification, or written off) that this
    /// instance backs up, one machine each.
    watches: BTreeMap<RunKey, Watch>,
    /// Jobs whose unfinished runs this instance looks for at every sweep without knowing of
    /// a particular run (see `look_out`): one record per job.
    job_watches: HashMap<JobName, types::JobWatch>,
    /// Sweeps sent so far (a sweep ends only the job watches noted before it was sent).
    sweeps_sent: u64,
    /// Runs whose claim or takeover this instance gave up waiting for (their outcome is
    /// unknown; the run is watched, or its job looked out for): a commit found later is an
    /// orphan of this life, released at once.
    gave_up: types::GivenUp,
    /// Runs whose last write this instance gave up on (it failed and is not sent again),
    /// with the attempt it held: when the backup watch sees a newer attempt, the instance
    /// learned it lost the run and says so (`Lost`). [B-16]
    written_off: HashMap<RunKey, RunInfo>,
    /// When the takeovers being answered were sent (their leases count from then).
    takeover_sent: Option<Micros>,
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
    queues: Queues,
    calls: HashMap<CallId, Pending>,
    next_call: CallId,
    effects: VecDeque<Effect>,
    health: CoreHealth,
    rng: u64,
    /// This instance's key for the order in which it sends claims that fall due together
    /// (see [`claim_rank`]); drawn from the seed, so it differs between instances.
    claim_key: u64,
    /// Slot timers of removed or replaced jobs still armed, at most (see `left_slot_timer`).
    stale_slot_timers: usize,
    /// Jobs whose last claim this instance lost (`Taken`): their next slots are claimed here
    /// `standby_delay` after the slot, so that the instance that won the last one claims
    /// alone first (see `slot_due`). Empty while `standby_delay` is zero.
    standby: HashSet<JobName>,
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
        let claim_key = mix64(cfg.seed ^ 0x9E37_79B9_7F4A_7C15);
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
            job_watches: HashMap::new(),
            sweeps_sent: 0,
            gave_up: types::GivenUp::default(),
            written_off: HashMap::new(),
            takeover_sent: None,
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
            queues: Queues::default(),
            calls: HashMap::new(),
            next_call: 0,
            effects: VecDeque::new(),
            health: CoreHealth::default(),
            rng,
            claim_key,
            stale_slot_timers: 0,
            standby: HashSet::new(),
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

    /// What this core holds per run or job, by structure, for the simulator's check that
    /// nothing is kept for runs that ended or jobs that left: with no job registered and no
    /// run unfinished, every count must fall to 0.
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn tracked(&self) -> Vec<(&'static str, usize)> {
        vec![
            ("owned runs", self.runs.len()),
            ("held leases", self.held.len()),
            ("claims and takeovers in flight", self.in_flight.len()),
            ("watches", self.watches.len()),
            ("job watches", self.job_watches.len()),
            ("given-up calls", self.gave_up.len()),
            ("written-off runs", self.written_off.len()),
            ("catch-up jobs", self.catch_up.len()),
            ("missed jobs", self.missed.len()),
            ("queued claims", self.queues.claims.len()),
            ("queued catch-ups", self.queues.catch_ups.len()),
            ("queued reads", self.queues.reads.len()),
            ("queued results", self.queues.finishes.len()),
            ("queued takeovers", self.queues.takeovers.len()),
            ("calls in flight", self.calls.len()),
            ("timers", self.timers.len()),
        ]
    }

    /// Store calls sent and not yet answered (or given up).
    #[cfg(any(test, feature = "sim"))]
    pub(crate) fn calls_in_flight(&self) -> usize {
        self.calls.len()
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
    ///
    /// At most [`TIMERS_PER_TURN`] of them: when more are due (thousands of jobs whose slots
    /// fall due together), the rest stay due and the shell comes back for them on its next
    /// turn, after it has handled what arrived meanwhile. So the first batch of claims
    /// leaves after a few hundred timers rather than after all of them, the store works on it
    /// while the core handles the next ones, and the answers (handler starts) are not held
    /// back behind every timer of the burst.
    pub(crate) fn handle_timeout(&mut self, now: Now) {
        self.now = now;
        for _ in 0..TIMERS_PER_TURN {
            let Some(entry) = self.timers.first_entry() else {
                break;
            };
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
                    if self.jobs.insert(job.name.clone(), job.clone()).is_some() {
                        self.left_slot_timer();
                    }
                    self.schedule_next(&job, self.now_ms());
                    if self.cfg.lease_store {
                        // A job added while running backs up its unfinished runs at once, as
                        // `start` does: a run handed over while the job was registered
                        // nowhere is continued now, not at the job's next slot. [B-19]
                        self.call(
                            Request::Unfinished(vec![job.name.clone()]),
                            Pending::Adopt,
                            None,
                        );
                        // Its newest slot, due before it was added here, is not claimed here
                        // (no catch-up for an added job): back it up while others may claim it.
                        if let Some(newest) = job.schedule.newest_due(self.now_ms()) {
                            self.back_up_unclaimed_slot(&job, newest);
                        }
                    }
                }
            }
            CoreCommand::Remove(name) => {
                if self.jobs.remove(&name).is_some() {
                    self.left_slot_timer();
                }
                self.catch_up.remove(&name);
                self.missed.remove(&name);
                self.standby.remove(&name);
                self.watches.retain(|k, w| {
                    k.job != name || w.state == super::watch::WatchState::TakingOver
                });
                self.job_watches.remove(&name);
                self.gave_up.forget_job(&name);
                self.written_off.retain(|k, _| k.job != name);
            }
            CoreCommand::RunNow { job, data, reply } => self.run_now(job, data, reply),
            CoreCommand::Stop { timeout } => {
                if !self.stopping {
                    self.begin_stop(timeout);
                }
            }
        }
    }

    /// A job was removed or replaced: its armed slot timer is left behind (it fires as a
    /// no-op: `slot_due` ignores a timer of a definition no longer registered). Once such
    /// timers outnumber the jobs registered, one pass drops them all, so however often jobs
    /// come and go the timers stay within twice the jobs (O(1) amortised per removal), and a
    /// removed daily job does not keep its timer for a day.
    fn left_slot_timer(&mut self) {
        self.stale_slot_timers += 1;
        if self.stale_slot_timers <= self.jobs.len() {
            return;
        }
        let jobs = &self.jobs;
        self.timers.retain(|_, t| match t {
            Timer::Due { job, .. } => jobs.get(&job.name).is_some_and(|j| Arc::ptr_eq(j, job)),
            _ => true,
        });
        self.stale_slot_timers = 0;
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
        // A handed-over run of one of this instance's jobs is backed up even if this instance
        // did not know of it (its slot was claimed by an instance whose clock saw another
        // slot due): the notification is how it learns of it.
        if !self.is_here(&key) {
            match self.watches.get_mut(&key) {
                Some(w) => w.named_by_release = true,
                None => self.watch(key.clone(), Watch::handed_over()),
            }
        }
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

    /// A random delay in `0..=max_ms` from the core's seeded generator.
    fn random_up_to(&mut self, max_ms: u64) -> u64 {
        crate::slot::jitter(&mut self.rng, max_ms)
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

    fn error(&mut self, operation: StoreOperation, job: Option<&JobName>, e: &Error) {
        self.emit(Event::Error {
            operation,
            kind: e.kind(),
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
            // In name order: a HashMap's order differs from one map to the next, and the
            // core's effects must not (the simulator replays a run from its seed).
            let mut missed: Vec<JobName> = self.missed.drain().collect();
            missed.sort();
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
        let want = (!self.watches.is_empty() || !self.job_watches.is_empty()) && !self.stopping;
        if want != self.watching && self.cfg.lease_store {
            self.watching = want;
            self.push(Effect::Watching(want));
        }
    }

    /// Publishes runs owned and watched when they changed (map lengths: O(1)). A job looked
    /// out for counts as one run watched: the run it lost or skipped.
    fn publish_gauges(&mut self) {
        let now = (self.held.len(), self.watches.len() + self.job_watches.len());
        if now != self.gauges {
            self.gauges = now;
            self.health.runs_watched = now.1 as u64;
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
        self.job_watches.clear();
        self.gave_up.clear();
        self.catch_up.clear();
        self.missed.clear();
        self.drop_queued_claims();
        let mut ids: Vec<RunId> = self.runs.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            self.feed_owner(id, super::run::OwnerInput::Stop);
        }
        // A timeout too long to represent waits as long as it takes.
        self.arm_after(timeout, Timer::StopDeadline);
    }

    /// Stop's timeout passed: runs still going are no longer heartbeated (a backup takes
    /// over after the lease) and their handlers are aborted; nothing else is waited for.
    fn stop_deadline(&mut self) {
        let mut ids: Vec<RunId> = self.runs.keys().copied().collect();
        ids.sort_unstable();
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

pub(crate) use crate::ids::mix64;

/// Where `job`'s claims go in the order of the instance whose key is `key`: a hash of the
/// name (FNV-1a) mixed with the key. Every instance has the same jobs fall due together;
/// sent in one shared order, the instances' batches would hold the same jobs at the same
/// moment, so each batch would race its twins on the other instances and two of the three
/// would lose every claim in it while holding the store's lock (SQLite's file, PostgreSQL's
/// job rows) for nothing. In its own order an instance's first batches mostly win, and by the
/// time it reaches jobs another instance already claimed, their runs exist and the store
/// answers `Taken` cheaply.
pub(crate) fn claim_rank(key: u64, job: &str) -> u64 {
    crate::ids::name_hash(key, job)
}

/// [`claim_rank`] for one slot: the instance's order of jobs drawn anew for every slot, so
/// that under overload no job ranks last slot after slot on every instance.
pub(crate) fn slot_claim_rank(key: u64, job: &str, slot: EpochMs) -> u64 {
    claim_rank(key ^ mix64(slot as u64), job)
}

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
                // Without catch-up the core starts 1 s before slot T0, and the slot before it
                // can no longer be claimed by then: nothing is backed up at the start.
                max_late: Duration::from_secs(1),
                ..JobOptions::default()
            },
            handler: Arc::new(|_| Box::pin(async { Ok(()) })),
            data: None,
            fixed_data: None,
        });
        let now = Now {
            mono: 0,
            epoch_us: if catch_up { T0 + 1 } else { T0 - 1_000 } * 1_000,
        };
        let cfg = CoreConfig {
            instance_id: "me".into(),
            timing: LeaseTiming::default(),
            store_timeout: Duration::from_secs(2),
            skew_threshold_ms: 1_000,
            abort_grace: Duration::from_secs(5),
            lease_store: true,
            store_kind: "memory",
            limits: Limits::of(Some(crate::store::BatchLimits::all(8))),
            seed: 1,
            standby_delay: Duration::ZERO,
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
                        now.epoch_us = T0 * 1_000;
                        now.mono = 1_000_000;
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
