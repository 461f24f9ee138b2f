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

/// The longest period of [`prunes_at`] a store uses: a won claim prunes its job on one fence
/// in this many, and a finish on one in [`finish_prune_period`], which divides it.
pub const MAX_PRUNE_PERIOD: u64 = 16;

/// How often a finish prunes a job kept to `size` runs by count: the largest power of two
/// at most `size / 8`, between 1 (every finish below a `size` of 16, so small histories stay
/// exact) and [`MAX_PRUNE_PERIOD`]. Being a power of two it divides `MAX_PRUNE_PERIOD`, so a
/// store that adds `MAX_PRUNE_PERIOD` to a job's fence for a takeover leaves the fence
/// modulo the period alone. Pruned then, a job holds at most `size + period - 1` finished
/// runs, and finding the cut (O(`size`)) is shared by the `period` runs it removes. [B-37]
///
/// ```
/// use anarchon_core::history::finish_prune_period;
/// assert_eq!(finish_prune_period(3), 1);
/// assert_eq!(finish_prune_period(100), 8);
/// assert_eq!(finish_prune_period(1000), 16);
/// ```
pub fn finish_prune_period(size: u32) -> u64 {
    let p = u64::from(size / 8).max(1);
    (1u64 << (63 - p.leading_zeros())).min(MAX_PRUNE_PERIOD)
}

/// Whether the won claim or result with `fence` is the one in `period` consecutive ones of
/// `job` that prunes the job's history, for a store that prunes on one in `period` of them
/// (`period` 0 counts as 1). [B-37]
///
/// Every job has a phase of its own, a hash of its name: jobs that come due together draw
/// their fences in step (10,000 jobs `every 1s` registered at once all reach fence 16 in the
/// same second), and pruning at the multiples of `period` alone would have all of them prune
/// in that one second, a burst of work every `period` seconds that made its slots late, while
/// the seconds between pruned nothing. With the phase about one job in `period` prunes each
/// second. For one job it is still exactly one fence in any `period` consecutive ones, and
/// for a `period` that divides another (the powers of two up to 16 the stores use), the
/// fences that prune at the larger one prune at the smaller one too.
///
/// ```
/// use anarchon_core::history::prunes_at;
///
/// // One fence in every 16 consecutive ones prunes a job ...
/// let pruning = (1..=16).filter(|&fence| prunes_at("report", fence, 16)).count();
/// assert_eq!(pruning, 1);
/// // ... and jobs in step do not all prune at the same fence.
/// let at_16 = (0..1000).filter(|i| prunes_at(&format!("job-{i}"), 16, 16)).count();
/// assert!(at_16 < 200, "{at_16} of 1000 jobs prune at fence 16");
/// // A period of 1 prunes every time.
/// assert!(prunes_at("report", 7, 1));
/// ```
pub fn prunes_at(job: &str, fence: u64, period: u64) -> bool {
    fence % period.max(1) == pruning_fence_residue(job, period)
}

/// The fence modulo `period` at which `job` prunes (see [`prunes_at`]): for a store that
/// decides where the fence is drawn, in its own statement or script.
///
/// ```
/// use anarchon_core::history::{pruning_fence_residue, prunes_at};
///
/// let residue = pruning_fence_residue("report", 16);
/// assert!(residue < 16);
/// assert!(prunes_at("report", 32 + residue, 16));
/// assert_eq!(pruning_fence_residue("report", 1), 0);
/// ```
pub fn pruning_fence_residue(job: &str, period: u64) -> u64 {
    let period = period.max(1);
    // The job's phase: a hash of its name with a fixed key, the same in every process and
    // release.
    let phase = crate::ids::name_hash(0x7072_756e_6550_6861, job) % period;
    (period - phase) % period
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            size: 100,
            ttl_ms: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIODS: [u64; 5] = [1, 2, 4, 8, 16];

    #[test]
    fn b37_a_finish_prunes_by_count_every_time_below_16_and_at_most_one_in_16() {
        assert_eq!(finish_prune_period(0), 1);
        assert_eq!(finish_prune_period(1), 1);
        assert_eq!(finish_prune_period(15), 1);
        assert_eq!(finish_prune_period(16), 2);
        assert_eq!(finish_prune_period(100), 8);
        assert_eq!(finish_prune_period(128), 16);
        assert_eq!(finish_prune_period(u32::MAX), 16);
        for size in 0..2000 {
            assert!(
                MAX_PRUNE_PERIOD.is_multiple_of(finish_prune_period(size)),
                "{size}"
            );
        }
    }

    #[test]
    fn b37_a_job_prunes_at_exactly_one_fence_in_any_period_consecutive_ones() {
        for i in 0..500 {
            let job = format!("tenant-{i}.report");
            for period in PERIODS {
                for first in 1..=40 {
                    let pruning = (first..first + period)
                        .filter(|&fence| prunes_at(&job, fence, period))
                        .count();
                    assert_eq!(pruning, 1, "{job}, period {period}, fences from {first}");
                }
            }
        }
    }

    #[test]
    fn b37_jobs_whose_fences_go_in_step_spread_their_prunes_over_the_period() {
        // 10,000 jobs registered together and claimed every second reach every fence in the
        // same second: each fence must be the pruning one of about one job in `period`.
        let jobs: Vec<String> = (0..10_000).map(|i| format!("job-{i:05}")).collect();
        for period in [8u64, 16] {
            let even = 10_000 / period;
            for fence in 1..=period {
                let pruning = jobs.iter().filter(|j| prunes_at(j, fence, period)).count();
                let pruning = u64::try_from(pruning).unwrap();
                assert!(
                    pruning.abs_diff(even) * 5 < even,
                    "period {period}, fence {fence}: {pruning} of 10,000 jobs prune (even: {even})"
                );
            }
        }
    }

    #[test]
    fn b37_a_fence_that_prunes_at_a_period_prunes_at_each_period_dividing_it() {
        for i in 0..500 {
            let job = format!("j{i}");
            for fence in 0..64 {
                for (k, period) in PERIODS.iter().enumerate() {
                    if prunes_at(&job, fence, *period) {
                        for smaller in &PERIODS[..k] {
                            assert!(prunes_at(&job, fence, *smaller), "{job} {fence} {smaller}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn b37_a_jobs_pruning_fences_are_the_same_in_every_release() {
        // Processes of different builds prune the same job at the same fences only while the
        // phase (a hash of the name with a fixed key) stays as it is: a change here is a
        // change every store's users would see in how many runs a job holds at a moment.
        let pruning: Vec<u64> = (1..=16).filter(|&f| prunes_at("report", f, 16)).collect();
        assert_eq!(pruning, vec![PINNED_REPORT_FENCE]);
        assert!(prunes_at("", 0, 0));
    }

    /// Worked out apart from this code (a few lines of Python): FNV-1a 64 of `report`, XOR
    /// the key `0x7072_756e_6550_6861`, splitmix64's finalizer: `0xac33_3d41_ab36_b267`,
    /// 7 modulo 16, so fence 9.
    const PINNED_REPORT_FENCE: u64 = 9;
}
