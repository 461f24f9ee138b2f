//! The core's data: time, configuration, effects and commands, store requests and answers as
//! values, and what the core keeps of calls and runs. Plain types with no behaviour beyond
//! small conversions; the parts of the core (`slots`, `owned`, `backup`, `calls`) and
//! `mod.rs` build on them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::context::{CancelCause, Data};
use crate::error::{Error, Result};
use crate::event::{Event, RunInfo};
use crate::history::{Reason, Retention, RunRecord, RunStatus};
use crate::ids::{EpochMs, JobName, RunKey};
use crate::options::LeaseTiming;
use crate::scheduler::JobDef;
use crate::scheduler::run::OwnerRun;
use crate::store::{
    ClaimOutcome, Finish, Lease, LeaseClaim, OwnerWrite, Renewal, RunView, SlotClaim, SlotOutcome,
    Takeover, TakeoverOutcome,
};

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
    /// How long after a slot an instance that lost its job's last claim waits before it
    /// claims the slot too (see `Core::standby`); zero: never.
    pub(crate) standby_delay: Duration,
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
    /// Runs of other instances backed up now.
    pub(crate) runs_watched: u64,
}

/// Consecutive failed store calls after which the store counts as unreachable.
pub(crate) const UNREACHABLE_AFTER: u32 = 3;

/// Runs of one job a backup watches besides the job's newest run and the runs handed over
/// or being taken over (see `Core::watch`). A job whose runs end has one or two unfinished
/// at a time; the bound matters when runs pile up `running` in the store (results answered
/// too late, long runs with overlap allowed), where the older ones can only be interrupted
/// by a newer slot anyway. [B-14, B-15]
pub(crate) const WATCHED_PER_JOB: usize = 3;

/// How many unfinished runs of each job a sweep asks the store for (besides those handed
/// over): the runs a backup watches of a job, so a job's older runs are not read and sent
/// every heartbeat only to be dropped (3 x 10,000 `every 1s` on a saturated PostgreSQL
/// listed hundreds of thousands per sweep, and half the sweeps timed out). [B-14]
pub(crate) const SWEPT_PER_JOB: usize = WATCHED_PER_JOB + 1;

#[derive(Debug)]
pub(super) enum Timer {
    Due { job: Arc<JobDef>, slot: EpochMs },
    Heartbeat,
    Watch,
    Timeout { run: RunId },
    AbortGrace { run: RunId },
    StopDeadline,
}

/// Claims sent and not answered yet, at most, by default (see the module docs); below it,
/// the bound follows the store's recent pace (see [`pace`](super::pace)).
pub(crate) const MAX_CLAIMS_IN_FLIGHT: usize = 16_384;

/// The paced bound on claims in flight never falls below this many of the store's claim
/// batches (nor below [`MIN_PACED_CLAIMS`]), so a store that speeds up is seen at once.
pub(crate) const PACED_FLOOR_BATCHES: usize = 4;

/// See [`PACED_FLOOR_BATCHES`].
pub(crate) const MIN_PACED_CLAIMS: usize = 64;

/// Claim calls out at once past which a batch that is not full waits for the next answer,
/// on a store that asks for it ([`BatchLimits::gather_batches`](crate::store::BatchLimits)).
/// Claims that fall due while calls are out then go together in the next call, so a store
/// that is slow to answer sees fewer, fuller batches, while an idle instance's claim leaves
/// at once and a burst's full batches all leave together. Measured: 100,000 tenants' jobs on
/// 5 instances on PostgreSQL started 12-25 % of slots in their second with a call per due
/// claim (the server's CPU spent on five statements a transaction), 97 % with this bound;
/// on SQLite (3 x 10,000 `every 1s`) the same bound cut the share from 99.75 % to 47-59 %,
/// which is why it is the store's choice.
pub(crate) const CLAIM_CALLS_IN_FLIGHT: usize = 2;

/// Result calls out at once past which a result batch that is not full waits for the next
/// answer, on a store that gathers batches or results
/// ([`BatchLimits::gather_batches`](crate::store::BatchLimits), `gather_results`), as claims do
/// ([`CLAIM_CALLS_IN_FLIGHT`]). A result waits at most until a call of its kind is answered
/// or times out, then takes its own call: two store timeouts at worst (10 s with the
/// defaults). Its run's lease is renewed meanwhile once it nears its end (a lease shorter
/// than the wait let a backup take the run over and run the slot again:
/// `b13_a_run_whose_result_is_still_being_written_keeps_its_lease`). Measured: 3 x 10,000 `every 1s` on PostgreSQL
/// sent about 1,100 result transactions a second of 3-4 results each (95 % of the server's
/// commits) with a call per turn's results.
pub(crate) const RESULT_CALLS_IN_FLIGHT: usize = 2;

/// Identifies a store call in flight.
pub(crate) type CallId = u64;

/// How many calls of each kind the store takes in one round trip (1: no batching).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) claims: usize,
    pub(crate) takeovers: usize,
    pub(crate) finishes: usize,
    /// Claims sent and unanswered, at most ([`MAX_CLAIMS_IN_FLIGHT`]).
    pub(crate) claims_in_flight: usize,
    /// A claim batch that is not full waits while [`CLAIM_CALLS_IN_FLIGHT`] calls are out
    /// (the store's [`BatchLimits::gather_batches`](crate::store::BatchLimits)).
    pub(crate) gather_batches: bool,
    /// A result batch that is not full waits while [`RESULT_CALLS_IN_FLIGHT`] calls are out
    /// (the store's [`BatchLimits::gather_results`](crate::store::BatchLimits), or
    /// `gather_batches`).
    pub(crate) gather_results: bool,
}

impl Limits {
    /// A lease store's batch limits (`None`: a claim-only store, one call per item), with
    /// the bound on claims in flight.
    pub(crate) fn of(batch: Option<crate::store::BatchLimits>) -> Self {
        let batch = batch.unwrap_or_default();
        Limits {
            claims: batch.claims,
            takeovers: batch.takeovers,
            finishes: batch.finishes,
            claims_in_flight: MAX_CLAIMS_IN_FLIGHT,
            gather_batches: batch.gather_batches,
            gather_results: batch.gather_batches || batch.gather_results,
        }
    }
}

/// A store call. Claims, takeovers and results go through the store's batch calls, at most
/// the store's [`BatchLimits`](crate::store::BatchLimits) items each.
#[derive(Debug, Clone)]
pub(crate) enum Request {
    Claim {
        claims: Vec<LeaseClaim>,
    },
    ClaimSlot(SlotClaim),
    Heartbeat {
        leases: Vec<Lease>,
        lease_ms: u64,
    },
    Runs(Vec<RunKey>),
    TakeOver {
        takeovers: Vec<Takeover>,
    },
    Finish {
        writes: Vec<(Lease, Finish)>,
    },
    Release(Lease),
    /// A history record of a run without a lease (manual, claim-only).
    Record {
        record: RunRecord,
        retention: Retention,
        /// Through the claim-only store's `record` (else `record_manual`).
        claim_only: bool,
    },
    Unfinished(Vec<JobName>),
    /// The backups' sweep: [`SWEPT_PER_JOB`] runs of each job, and those handed over.
    Sweep(Vec<JobName>),
}

impl Request {
    /// The store trait method's name, for errors, spans and metrics.
    pub(crate) fn operation(&self) -> &'static str {
        match self {
            Request::Claim { .. } | Request::ClaimSlot(_) => "claim",
            Request::Heartbeat { .. } => "heartbeat",
            Request::Runs(_) => "runs",
            Request::TakeOver { .. } => "take_over",
            Request::Finish { .. } => "finish",
            Request::Release(_) => "release",
            Request::Record { .. } => "record",
            Request::Unfinished(_) => "unfinished_runs",
            Request::Sweep(_) => "newest_unfinished_runs",
        }
    }

    /// The shape of its answer.
    pub(crate) fn shape(&self) -> Shape {
        match self {
            Request::Claim { .. } => Shape::Claims,
            Request::ClaimSlot(_) => Shape::Slot,
            Request::Heartbeat { .. } => Shape::Renewals,
            Request::Runs(_) | Request::Unfinished(_) | Request::Sweep(_) => Shape::Runs,
            Request::TakeOver { .. } => Shape::Takeovers,
            Request::Finish { .. } => Shape::Writes,
            Request::Release(_) => Shape::Released,
            Request::Record { .. } => Shape::Recorded,
        }
    }
}

/// Which [`Answer`] variant a request's answer takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Claims,
    Slot,
    Renewals,
    Runs,
    Takeovers,
    Writes,
    Released,
    Recorded,
}

impl Shape {
    /// The answer of a call that failed or timed out as a whole.
    pub(crate) fn failed(self, e: Error) -> Answer {
        match self {
            Shape::Claims => Answer::Claims(Err(e)),
            Shape::Slot => Answer::Slot(Err(e)),
            Shape::Renewals => Answer::Renewals(Err(e)),
            Shape::Runs => Answer::Runs(Err(e)),
            Shape::Takeovers => Answer::Takeovers(Err(e)),
            Shape::Writes => Answer::Writes(Err(e)),
            Shape::Released => Answer::Released(Err(e)),
            Shape::Recorded => Answer::Recorded(Err(e)),
        }
    }
}

/// The answer to a [`Request`], one variant per request kind.
#[derive(Debug)]
pub(crate) enum Answer {
    Claims(Result<Vec<ClaimOutcome>>),
    Slot(Result<SlotOutcome>),
    Renewals(Result<Vec<Renewal>>),
    Runs(Result<Vec<RunView>>),
    Takeovers(Result<Vec<TakeoverOutcome>>),
    Writes(Result<Vec<OwnerWrite>>),
    Released(Result<OwnerWrite>),
    Recorded(Result<()>),
}

impl Answer {
    /// The error, when the call failed as a whole.
    pub(crate) fn error(&self) -> Option<&Error> {
        match self {
            Answer::Claims(Err(e))
            | Answer::Slot(Err(e))
            | Answer::Renewals(Err(e))
            | Answer::Runs(Err(e))
            | Answer::Takeovers(Err(e))
            | Answer::Writes(Err(e))
            | Answer::Released(Err(e))
            | Answer::Recorded(Err(e)) => Some(e),
            _ => None,
        }
    }
}

/// What the core remembers of a call in flight.
#[derive(Debug)]
pub(super) enum Pending {
    Claims {
        items: Vec<(Arc<JobDef>, EpochMs, Reason)>,
        sent: Micros,
    },
    Slot {
        job: Arc<JobDef>,
        slot: EpochMs,
    },
    Heartbeat {
        ids: Vec<RunId>,
        sent: Micros,
    },
    /// Targeted reads of runs named by release notifications.
    Runs {
        asked: Vec<RunKey>,
        sent: Micros,
    },
    /// The backup poll: the unfinished runs of the asked runs' jobs and of the jobs looked
    /// out for.
    Sweep {
        asked: Vec<RunKey>,
        sent: Micros,
        /// Which sweep this is (`Core::sweeps_sent` when it was sent).
        sweep: u64,
    },
    Takeovers {
        keys: Vec<RunKey>,
        sent: Micros,
    },
    /// Result writes of owned runs (finish batches, a release, a record).
    Writes {
        ids: Vec<RunId>,
    },
    /// A release sent on the side (won while stopping, an orphan of ours).
    SideRelease {
        key: RunKey,
    },
    /// The `running` record of a run without a lease.
    StartRecord {
        run: RunId,
        job: JobName,
    },
    Unfinished,
    /// The unfinished runs of a job added while running (no catch-up follows).
    Adopt,
}

/// A claim waiting for the end of the turn (or for room in flight).
#[derive(Debug)]
pub(super) struct QueuedClaim {
    pub(super) job: Arc<JobDef>,
    pub(super) slot: EpochMs,
    pub(super) reason: Reason,
    pub(super) claim: LeaseClaim,
    /// Queued by the job's standby (it lost the job's last claim, see `Core::standby_from`):
    /// it waits behind the claims that may win.
    pub(super) standby: bool,
    /// The claim's place in the order claims leave in (see `Core::flush_claims`), lowest
    /// first, drawn once when it is queued: a claim may wait through many turns, and each
    /// turn that sends picks its batch by this key.
    pub(super) order: ClaimOrder,
}

/// See [`QueuedClaim::order`]: (standby, the instance's rank of the job for the slot, not a
/// catch-up).
pub(super) type ClaimOrder = (bool, u64, bool);

/// Where a catch-up claim waits its turn: the instance's own rank of the job
/// ([`claim_rank`](super::claim_rank)), the job, the slot.
pub(super) type HeldKey = (u64, JobName, EpochMs);

/// The per-turn queues.
#[derive(Debug, Default)]
pub(super) struct Queues {
    pub(super) claims: Vec<QueuedClaim>,
    /// Catch-up claims yielding to the others, in the order they go out.
    pub(super) catch_ups: std::collections::BTreeMap<HeldKey, QueuedClaim>,
    /// Claims sent and unanswered.
    pub(super) claims_in_flight: usize,
    /// Of those, catch-up claims, held to
    /// [`catch_up_in_flight`](super::calls::catch_up_in_flight) so that missed slots never
    /// delay slots due now.
    pub(super) catch_ups_in_flight: usize,
    /// Claim calls sent and unanswered (see [`CLAIM_CALLS_IN_FLIGHT`]).
    pub(super) claim_calls: usize,
    /// The store's recent pace of answering claims, which bounds the claims in flight
    /// (see [`pace`](super::pace)).
    pub(super) pace: super::pace::ClaimPace,
    /// Result calls sent and unanswered (see [`RESULT_CALLS_IN_FLIGHT`]).
    pub(super) result_calls: usize,
    /// When queued claims are next checked for being late (instance clock, ms).
    pub(super) next_shed_ms: EpochMs,
    /// Watched runs to read at once (release notifications of this turn).
    pub(super) reads: Vec<RunKey>,
    pub(super) finishes: Vec<(RunId, Lease, Finish)>,
    pub(super) takeovers: Vec<Takeover>,
}

/// A run this instance owns: its machine and what the core needs to carry out effects.
#[derive(Debug)]
pub(super) struct Owned {
    pub(super) job: Arc<JobDef>,
    pub(super) info: RunInfo,
    pub(super) lease: Option<Lease>,
    pub(super) machine: OwnerRun,
    /// Monotonic µs when it started.
    pub(super) started: Micros,
    pub(super) started_at: EpochMs,
    pub(super) scheduled_at: EpochMs,
    /// When the last renewal that succeeded was sent (monotonic µs).
    pub(super) last_renewed: Micros,
    /// A run without a lease has its `running` record written first; its final record
    /// waits here until that write is answered (a pooled store could reorder them).
    pub(super) start_pending: bool,
    pub(super) held_write: Option<Box<Request>>,
    pub(super) reply: Option<ReplyTo>,
}

impl Owned {
    pub(super) fn record(
        &self,
        status: RunStatus,
        error: Option<String>,
        finished_at: Option<EpochMs>,
    ) -> RunRecord {
        RunRecord {
            job: self.info.job.clone(),
            slot: self.info.slot_ms(),
            scheduled_at: self.scheduled_at,
            instance_id: self.info.instance_id.clone(),
            manual: self.info.manual,
            attempt: self.info.attempt,
            reason: self.info.reason,
            status,
            fence: self.info.fence,
            started_at: self.started_at,
            finished_at,
            error,
        }
    }
}

/// A job whose unfinished runs this instance looks for at every sweep (see
/// `Core::look_out`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct JobWatch {
    /// Looked for until then at least (instance clock, epoch ms): the last moment any
    /// instance may still claim the latest slot noted.
    pub(super) until: EpochMs,
    /// Sweeps sent before the latest slot was noted: only a sweep sent after it may end the
    /// record (one sent before may have read the store before that slot's run was written).
    pub(super) noted_after: u64,
}

/// The runs whose claim or takeover this instance gave up waiting for, by job: a slot is 8
/// bytes in its job's sorted list, not a key of its own (under a store that answers nothing
/// every slot's claim is given up on until its window ends).
#[derive(Debug, Default)]
pub(super) struct GivenUp {
    by_job: HashMap<JobName, Vec<EpochMs>>,
    len: usize,
}

impl GivenUp {
    pub(super) fn insert(&mut self, key: RunKey) {
        let slots = self.by_job.entry(key.job).or_default();
        if let Err(at) = slots.binary_search(&key.slot) {
            slots.insert(at, key.slot);
            self.len += 1;
        }
    }

    pub(super) fn contains(&self, key: &RunKey) -> bool {
        self.by_job
            .get(&key.job)
            .is_some_and(|slots| slots.binary_search(&key.slot).is_ok())
    }

    pub(super) fn remove(&mut self, key: &RunKey) {
        if let Some(slots) = self.by_job.get_mut(&key.job)
            && let Ok(at) = slots.binary_search(&key.slot)
        {
            slots.remove(at);
            self.len -= 1;
            if slots.is_empty() {
                self.by_job.remove(&key.job);
            }
        }
    }

    /// Forgets every run of `job`.
    pub(super) fn forget_job(&mut self, job: &JobName) {
        if let Some(slots) = self.by_job.remove(job) {
            self.len -= slots.len();
        }
    }

    /// Keeps the slots of each job that `keep` says to.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&JobName, EpochMs) -> bool) {
        let mut len = 0;
        self.by_job.retain(|job, slots| {
            slots.retain(|&slot| keep(job, slot));
            len += slots.len();
            !slots.is_empty()
        });
        self.len = len;
    }

    pub(super) fn clear(&mut self) {
        self.by_job.clear();
        self.len = 0;
    }

    #[cfg(any(test, feature = "sim"))]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }
}
