//! Events: what happened, for whoever listens. [B-38]
//!
//! Events go to a `tokio::sync::broadcast` channel ([`crate::Scheduler::events`]) and to
//! `tracing`. An `error` event nobody listens to is logged at `error` level.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::history::Reason;
use crate::ids::{EpochMs, JobName};

/// The run an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    /// The job.
    pub job: JobName,
    /// The slot (for a manual run, when it was started); [`RunInfo::slot_ms`] gives it in
    /// milliseconds since the epoch.
    pub slot: DateTime<Utc>,
    /// The attempt (1, 2 ...).
    pub attempt: u32,
    /// The fencing token (0 for manual runs and claim-only stores).
    pub fence: u64,
    /// Why it started.
    pub reason: Reason,
    /// Started by `run_now`.
    pub manual: bool,
    /// This instance.
    pub instance_id: String,
}

impl RunInfo {
    /// The slot in milliseconds since the epoch, as the stores key it.
    pub fn slot_ms(&self) -> EpochMs {
        self.slot.timestamp_millis()
    }
}

/// Why a run ended without a result ([`Event::Interrupted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InterruptCause {
    /// Released to a backup on stop or after self-fencing.
    HandedOver,
    /// A run without a lease stopped by `stop()`.
    Stopped,
    /// Still running when stop's timeout passed.
    StopTimeout,
    /// Seen by a backup: the lease had ended and the job's next slot was due.
    ReplacedByNextSlot,
}

impl InterruptCause {
    /// `"handed over"`, `"stopped"`, `"stop timeout"` or `"replaced by the next slot"`, as
    /// the history's `error` field keeps it.
    pub fn as_str(self) -> &'static str {
        match self {
            InterruptCause::HandedOver => "handed over",
            InterruptCause::Stopped => "stopped",
            InterruptCause::StopTimeout => "stop timeout",
            InterruptCause::ReplacedByNextSlot => "replaced by the next slot",
        }
    }
}

impl fmt::Display for InterruptCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run failed ([`Event::Failure`]); `Display` gives the text the history's `error`
/// field keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureCause {
    /// The handler returned this error (a panic reads "handler panicked: ...", a failed data
    /// function "data function failed ...").
    Handler(String),
    /// The job's timeout passed: recorded failed at once, the handler cancelled. [B-21]
    TimedOut,
    /// Seen by a backup: the run was started `max_attempts` times without finishing. [B-14]
    Exhausted {
        /// The job's `max_attempts`.
        max_attempts: u32,
    },
}

impl fmt::Display for FailureCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureCause::Handler(message) => f.write_str(message),
            FailureCause::TimedOut => f.write_str("timed out"),
            FailureCause::Exhausted { max_attempts } => write!(
                f,
                "exhausted: started {max_attempts} times without finishing"
            ),
        }
    }
}

/// The store call an [`Event::Error`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreOperation {
    /// Claiming slots (`claim_many`, `claim_slot`).
    Claim,
    /// Renewing leases.
    Heartbeat,
    /// A backup reading the runs it watches.
    Runs,
    /// A backup taking runs over.
    TakeOver,
    /// Writing a run's result.
    Finish,
    /// Handing a run over.
    Release,
    /// Writing a history record (manual runs, claim-only stores).
    Record,
    /// Reading the unfinished runs on start.
    UnfinishedRuns,
    /// A backup's poll of the unfinished runs of the jobs it backs up
    /// (`newest_unfinished_runs`, every heartbeat).
    Sweep,
    /// An answer that did not fit its call (a bug in the scheduler's shell).
    Answer,
}

impl StoreOperation {
    /// The store trait method's name (`"claim"`, `"take_over"` ...), as logs and the
    /// `operation` metric label show it.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreOperation::Claim => "claim",
            StoreOperation::Heartbeat => "heartbeat",
            StoreOperation::Runs => "runs",
            StoreOperation::TakeOver => "take_over",
            StoreOperation::Finish => "finish",
            StoreOperation::Release => "release",
            StoreOperation::Record => "record",
            StoreOperation::UnfinishedRuns => "unfinished_runs",
            StoreOperation::Sweep => "newest_unfinished_runs",
            StoreOperation::Answer => "answer",
        }
    }
}

impl fmt::Display for StoreOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a slot was not started here. [B-11, B-10, B-12, B-29]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// Another instance claimed it.
    Taken,
    /// The claim came too late (`max_late_ms`, judged by the store's clock).
    Late,
    /// An earlier run of the job holds a live lease (`overlap: skip`).
    Overlap,
    /// A claim-only store lost the answer: skipped rather than risk a duplicate.
    Unknown,
}

impl SkipReason {
    /// `"taken"`, `"late"`, `"overlap"` or `"unknown"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Taken => "taken",
            SkipReason::Late => "late",
            SkipReason::Overlap => "overlap",
            SkipReason::Unknown => "unknown",
        }
    }
}

/// Something that happened on this instance. [B-38]
///
/// Subscribe with [`crate::Scheduler::events`]; `Display` writes one line per event.
///
/// ```
/// use anarchon_core::{Event, memory::MemoryStore, Scheduler};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
/// let mut events = scheduler.events();
/// tokio::spawn(async move {
///     while let Ok(event) = events.recv().await {
///         match &event {
///             Event::Failure { run, error } => eprintln!("{} failed: {error}", run.job),
///             Event::Error { .. } => eprintln!("store trouble: {event}"),
///             _ => println!("{event}"),
///         }
///     }
/// });
/// # Ok::<_, anarchon_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// A run started here.
    Start(RunInfo),
    /// A run finished with `Ok`.
    Success {
        /// The run.
        run: RunInfo,
        /// How long it took.
        duration: Duration,
    },
    /// A run failed: handler error, timeout, data function error, or crash budget used up.
    Failure {
        /// The run.
        run: RunInfo,
        /// The cause; `Display` gives the recorded error text.
        error: FailureCause,
    },
    /// A run ended without a result: handed over on stop, abandoned at the stop timeout, or
    /// (seen by a backup) replaced by the next slot.
    Interrupted {
        /// The run.
        run: RunInfo,
        /// Why.
        cause: InterruptCause,
    },
    /// A slot was not started here.
    Skip {
        /// The job.
        job: JobName,
        /// The slot.
        slot: DateTime<Utc>,
        /// Why.
        reason: SkipReason,
    },
    /// This instance learned that another took its run over: the signal was cancelled and
    /// its result is not recorded. [B-16]
    Lost(RunInfo),
    /// This instance could not renew a lease in time and cancelled the run's signal before
    /// the lease could have expired (self-fencing). [G-02]
    Fenced(RunInfo),
    /// A store problem.
    Error {
        /// The store call that failed.
        operation: StoreOperation,
        /// What kind of failure (timeout, unreachable store ...).
        kind: crate::error::ErrorKind,
        /// The job, when there is one.
        job: Option<JobName>,
        /// The error's message.
        message: String,
    },
    /// The driver loop has not turned for this long (hung runtime or a bug). [G-04]
    Stalled {
        /// Time since the driver last turned.
        idle: Duration,
    },
    /// This instance's clock differs from the store's by more than the threshold. Slots
    /// follow the instance clock and leases the store's, so keep clocks in sync. [B-20]
    ClockSkew {
        /// Instance clock minus store clock (negative when the instance is behind).
        skew: chrono::TimeDelta,
    },
}

impl Event {
    /// The event's name as `docs/behaviour.md` lists it (`"start"`, `"skip"` ...). [B-38]
    pub fn name(&self) -> &'static str {
        match self {
            Event::Start(_) => "start",
            Event::Success { .. } => "success",
            Event::Failure { .. } => "failure",
            Event::Interrupted { .. } => "interrupted",
            Event::Skip { .. } => "skip",
            Event::Lost(_) => "lost",
            Event::Fenced(_) => "fenced",
            Event::Error { .. } => "error",
            Event::Stalled { .. } => "stalled",
            Event::ClockSkew { .. } => "clock-skew",
        }
    }
}

impl fmt::Display for RunInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "job {} slot {} attempt {} fence {} ({}) on {}",
            self.job,
            self.slot
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            self.attempt,
            self.fence,
            self.reason,
            self.instance_id
        )
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line: the event's name, then what it is about.
///
/// ```
/// use anarchon_core::{Event, JobName, SkipReason, history::to_datetime};
///
/// let skip = Event::Skip {
///     job: JobName::new("report")?,
///     slot: to_datetime(1_767_225_600_000),
///     reason: SkipReason::Taken,
/// };
/// assert_eq!(skip.to_string(), "skip: job report slot 2026-01-01T00:00:00.000Z (taken)");
/// # Ok::<(), anarchon_core::Error>(())
/// ```
impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.name();
        match self {
            Event::Start(run) | Event::Lost(run) | Event::Fenced(run) => write!(f, "{name}: {run}"),
            Event::Success { run, duration } => {
                write!(f, "{name}: {run} in {} ms", duration.as_millis())
            }
            Event::Failure { run, error } => write!(f, "{name}: {run}: {error}"),
            Event::Interrupted { run, cause } => write!(f, "{name}: {run}: {cause}"),
            Event::Skip { job, slot, reason } => write!(
                f,
                "{name}: job {job} slot {} ({reason})",
                slot.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            ),
            Event::Error {
                operation,
                job,
                message,
                ..
            } => match job {
                Some(job) => write!(f, "{name}: {operation} for job {job}: {message}"),
                None => write!(f, "{name}: {operation}: {message}"),
            },
            Event::Stalled { idle } => write!(
                f,
                "{name}: the scheduler's loop has not turned for {} ms",
                idle.as_millis()
            ),
            Event::ClockSkew { skew } => write!(
                f,
                "{name}: this instance's clock is {} ms off the store's",
                skew.num_milliseconds()
            ),
        }
    }
}
