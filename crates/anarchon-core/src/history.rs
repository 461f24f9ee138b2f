//! History records: one per attempt, readable from any process. [B-36, B-37]

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{EpochMs, JobName};

/// Why a run was started. [B-30]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// The slot came due and this instance won the claim.
    Scheduled,
    /// `run_now` on this instance: no deduplication, no retry.
    Manual,
    /// A slot missed while no instance ran, claimed on start. [B-19]
    CatchUp,
    /// A backup claimed the next attempt of an unfinished run. [B-14, B-17]
    Takeover,
}

impl Reason {
    /// The name as stored and shown (`"catch-up"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Scheduled => "scheduled",
            Reason::Manual => "manual",
            Reason::CatchUp => "catch-up",
            Reason::Takeover => "takeover",
        }
    }

    /// Parses [`Reason::as_str`]'s output.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "scheduled" => Reason::Scheduled,
            "manual" => Reason::Manual,
            "catch-up" => Reason::CatchUp,
            "takeover" => Reason::Takeover,
            _ => return None,
        })
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

pub use crate::status::RunStatus;

/// One attempt of one run as a store writes and reads it, times in epoch ms (the store
/// author's form of [`HistoryRecord`]). [B-37]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The job.
    pub job: JobName,
    /// The slot (epoch ms); for a manual run, the time it was started.
    pub slot: EpochMs,
    /// When the slot was due (epoch ms, instance clock).
    pub scheduled_at: EpochMs,
    /// The instance that ran this attempt.
    pub instance_id: String,
    /// Started by `run_now`.
    pub manual: bool,
    /// 1 for the first start, 2 and up after takeovers.
    pub attempt: u32,
    /// Why it started.
    pub reason: Reason,
    /// What became of it.
    pub status: RunStatus,
    /// The fencing token of this attempt (0 for manual runs and claim-only stores).
    pub fence: u64,
    /// When it started (epoch ms, store clock where the store has one).
    pub started_at: EpochMs,
    /// When it ended.
    pub finished_at: Option<EpochMs>,
    /// The error or the cause of an interruption.
    pub error: Option<String>,
}

impl RunRecord {
    /// `finished_at - started_at`, once finished.
    pub fn duration_ms(&self) -> Option<i64> {
        self.finished_at.map(|f| (f - self.started_at).max(0))
    }
}

/// One attempt of one run, as [`crate::Scheduler::history`] returns it. [B-36, B-37]
///
/// ```
/// # async fn demo(scheduler: anarchon_core::Scheduler) -> anarchon_core::Result<()> {
/// for run in scheduler.history("report", 10).await? {
///     println!(
///         "{} slot {} attempt {} on {}: {} ({:?})",
///         run.job, run.slot, run.attempt, run.instance_id, run.status, run.duration()
///     );
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRecord {
    /// The job.
    pub job: JobName,
    /// The slot; for a manual run, the time it was started.
    pub slot: DateTime<Utc>,
    /// When the slot was due (instance clock).
    pub scheduled_at: DateTime<Utc>,
    /// The instance that ran this attempt.
    pub instance_id: String,
    /// Started by `run_now`.
    pub manual: bool,
    /// 1 for the first start, 2 and up after takeovers.
    pub attempt: u32,
    /// Why it started.
    pub reason: Reason,
    /// What became of it.
    pub status: RunStatus,
    /// The fencing token of this attempt (0 for manual runs and claim-only stores).
    pub fence: u64,
    /// When it started (store clock where the store has one).
    pub started_at: DateTime<Utc>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// The error or the cause of an interruption.
    pub error: Option<String>,
}

impl HistoryRecord {
    /// `finished_at - started_at`, once finished.
    pub fn duration(&self) -> Option<std::time::Duration> {
        self.finished_at
            .map(|f| (f - self.started_at).to_std().unwrap_or_default())
    }

    /// The slot in milliseconds since the epoch, as the stores key it.
    pub fn slot_ms(&self) -> EpochMs {
        self.slot.timestamp_millis()
    }
}

impl From<RunRecord> for HistoryRecord {
    fn from(r: RunRecord) -> Self {
        HistoryRecord {
            job: r.job,
            slot: to_datetime(r.slot),
            scheduled_at: to_datetime(r.scheduled_at),
            instance_id: r.instance_id,
            manual: r.manual,
            attempt: r.attempt,
            reason: r.reason,
            status: r.status,
            fence: r.fence,
            started_at: to_datetime(r.started_at),
            finished_at: r.finished_at.map(to_datetime),
            error: r.error,
        }
    }
}

/// Epoch milliseconds as a UTC time, clamped to what chrono can hold.
///
/// ```
/// use anarchon_core::history::to_datetime;
///
/// assert_eq!(to_datetime(0).to_rfc3339(), "1970-01-01T00:00:00+00:00");
/// assert_eq!(to_datetime(1_767_225_600_000).timestamp_millis(), 1_767_225_600_000);
/// ```
pub fn to_datetime(ms: EpochMs) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(if ms < 0 {
        DateTime::<Utc>::MIN_UTC
    } else {
        DateTime::<Utc>::MAX_UTC
    })
}

/// How much history a store keeps per job. [B-37]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Runs kept per job, newest first (at least 1).
    pub size: u32,
    /// Runs that finished longer ago than this are pruned (lease stores only).
    pub ttl_ms: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            size: 100,
            ttl_ms: None,
        }
    }
}
