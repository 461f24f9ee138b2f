//! Events: what happened, for whoever listens. [B-38]
//!
//! Events go to a `tokio::sync::broadcast` channel ([`crate::Scheduler::events`]) and to
//! `tracing`. An `error` event nobody listens to is logged at `error` level.

use crate::history::Reason;
use crate::ids::{EpochMs, JobName};

/// The run an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    /// The job.
    pub job: JobName,
    /// The slot (epoch ms).
    pub slot: EpochMs,
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
        duration_ms: u64,
    },
    /// A run failed: handler error, timeout, data function error, or crash budget used up.
    Failure {
        /// The run.
        run: RunInfo,
        /// The cause.
        error: String,
    },
    /// A run ended without a result: handed over on stop, abandoned at the stop timeout, or
    /// (seen by a backup) replaced by the next slot.
    Interrupted {
        /// The run.
        run: RunInfo,
        /// Why (`"handed over"`, `"stop timeout"`, `"replaced by the next slot"`).
        cause: String,
    },
    /// A slot was not started here.
    Skip {
        /// The job.
        job: JobName,
        /// The slot.
        slot: EpochMs,
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
        /// The operation (`"claim"`, `"heartbeat"` ...).
        operation: &'static str,
        /// The job, when there is one.
        job: Option<JobName>,
        /// The error's message.
        message: String,
    },
    /// The driver loop has not turned for this long (hung runtime or a bug). [G-04]
    Stalled {
        /// Milliseconds since the driver last turned.
        for_ms: u64,
    },
    /// This instance's clock differs from the store's by more than the threshold. Slots
    /// follow the instance clock and leases the store's, so keep clocks in sync. [B-20]
    ClockSkew {
        /// Instance clock minus store clock, ms.
        skew_ms: i64,
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
